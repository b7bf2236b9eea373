#!/usr/bin/env bats
# The EXAMPLES of the manual pages, run as written: each literal block of a
# page's EXAMPLES section, as a script (bash, errexit and pipefail), on small
# inputs of the names it uses, its output checked against what the page says.
# Each test first counts its page's blocks, so that an example added to a page
# fails here until it is run.  Run elsewhere: sw-run(1)'s experiment file
# (man.bats); not run yet: the EXAMPLES of sw-audit(1), sw-plot(1),
# sw-rollout(1), sw-run(1) and sw-train(1), sw-sort(1)'s first block and
# sw-model(1)'s third (named below).
load helpers

# The literal blocks of PAGE's EXAMPLES section, as files PREFIX1, PREFIX2, ...
# (mdoc's \e a backslash: the only escape the blocks use); prints their number.
man_blocks() {
	local n
	n=$(awk -v p="$2" '/^\.Sh EXAMPLES/ { on = 1; next } /^\.Sh / { on = 0 }
		on && /^\.Bd -literal/ { f = sprintf("%s%d", p, ++n); printf "" >f; inb = 1; next }
		inb && /^\.Ed/ { close(f); inb = 0; next }
		inb { print >f } END { print n + 0 }' "$TOP/man/$1")
	local i=1
	while [ "$i" -le "$n" ]; do
		sed -i 's/\\e/\\/g' "$2$i"
		i=$((i + 1))
	done
	echo "$n"
}

# Run block N (ex.N) as a script: it must exit 0 and write nothing to standard error.
example() {
	run -0 --separate-stderr bash -eo pipefail "ex.$1"
	[ "$stderr" = "" ]
}

# Samples of realistic shape, a response in other scripts among them, rewards of every sign.
data_jsonl() {
	sw-datagen -n 6 -t 5 -s 3 -f json
	printf '%s\n' '{"id":"u/0","group":"u","prompt":"Ünïcödé: 2+2?","response":"Четыре, 四, 4","reward":0,"finish":"stop"}'
}

@test "sw-cat(1): the examples run as written" {
	[ "$(man_blocks sw-cat.1 ex.)" = 8 ]
	data_jsonl >data.jsonl
	example 1
	[ "$output" = "" ]
	[ "$(head -c 4 data.msgpack.zst | od -An -tx1 | tr -d ' ')" = 28b52ffd ]
	example 2
	[ "${#lines[@]}" = 7 ]
	[ "${lines[0]}" = "$(head -1 data.jsonl | jq -c '{id, reward}')" ]
	[ "${lines[6]}" = '{"id":"u/0","reward":0}' ]
	example 3
	[ "$output" = 14 ]
	example 4
	[ "${lines[6]}" = '{"id":"u/0","reward":0,"finish":"stop"}' ]
	example 5
	[ "$output" = "$(head -1 data.jsonl | sw-cat | sw-cat -f json)" ]
	# the rewards above 0 kept, at zstd's highest level
	example 6
	[ "$output" = "" ]
	[ "$(sw-cat -c good.msgpack.zst)" = "$(jq -s 'map(select(.reward > 0)) | length' data.jsonl)" ]
	[ "$(sw-cat -c good.msgpack.zst)" -ge 1 ]
	[ "$(sw-cat -c good.msgpack.zst)" -lt 7 ]
	example 7
	[ "$output" = "" ]
	example 8
	[ "$output" = 7 ]
}

@test "sw-stream(5): the sample is a stream's record; the examples print what the page says" {
	[ "$(man_blocks sw-stream.5 ex.)" = 6 ]
	# the sample, "written on one line"
	run -0 --separate-stderr sh -c 'tr -d "\n" <ex.1 | sw-cat | sw-cat -f json -k id,reward'
	[ "$output" = '{"id":"gsm-1/0","reward":1.0}' ]
	[ "$stderr" = "" ]
	data_jsonl >data.jsonl
	example 2
	[ "${lines[0]}" = "0000000 8b a2 69 64" ]
	example 3
	[ "$output" = "$(printf '14\n14')" ]
	# what the page says each prints, from the page
	example 4
	grep -qF ".Li $output ." "$TOP/man/sw-stream.5"
	[ "$output" = '{"a":0.1,"b":0.10,"c":100000.00,"d":1}' ]
	example 5
	grep -qF ".Li $output ." "$TOP/man/sw-stream.5"
	[ "$output" = '{"b":{"$bin":"AP8="},"m":{"$map":[[1,2]]}}' ]
	example 6
	[ "$output" = "" ]
}

@test "sw(7): the stream examples and the pipeline run as written" {
	[ "$(man_blocks sw.7 ex.)" = 4 ]
	data_jsonl >data.jsonl
	example 1
	[ "${#lines[@]}" = 7 ]
	[ "${lines[6]}" = '{"id":"u/0","reward":0}' ]
	example 2
	[ "$output" = "$(jq -s 'map(select(.reward > 0)) | length' data.jsonl)" ]
	example 3
	[ "${#lines[@]}" = 2 ]
	[ "${lines[1]}" = "$(sed -n 2p data.jsonl | jq -c '{id, response, reward}')" ]
	# the pipeline on the examples' prompts and rules
	cp "$TOP/examples/prompts.jsonl" "$TOP/examples/rules.txt" .
	run -0 --separate-stderr bash -eo pipefail ex.4
	[[ $stderr == "sw-run: 3 iterations done; the run is in runs/x (audit head "*")" ]]
	[[ $output == "runs/x/audit.log: ok: "*" records, 4 checkpoints, head "* ]]
	[ "${output##* }" = "${stderr_lines[0]: -65:64}" ]
	[ "$(sw-cat -c trained.msgpack)" = "$(($(wc -l <prompts.jsonl) * 4))" ]
	[ "$(sw-cat -f json trained.msgpack | jq -c '.rewards | keys' | sort -u)" = '["blocklist","math"]' ]
	[ -s x.svg ]
	[ -f stats.json ]
	[ -f metrics.jsonl ]
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/x/metrics.jsonl)" = 3 ]
}

@test "sw-sort(1): the examples run as written" {
	[ "$(man_blocks sw-sort.1 ex.)" = 4 ]
	# ex.1 hands its output to "sw-rollout ...": sw-rollout(1) is the rest of it
	grep -qx 'sw-sort prompts.msgpack | sw-rollout ...' ex.1
	sw-datagen -n 48 -t 20 -s 4 | sw-cat -z -o big.msgpack.zst
	sw-datagen -n 40 -t 20 -s 5 >prompts.msgpack
	sw-datagen -n 24 -t 20 -s 6 >samples.msgpack
	example 2
	[ "$output" = "" ]
	[ "$(sw-cat -c sorted.msgpack.zst)" = 48 ]
	[ "$(sw-cat -f json sorted.msgpack.zst | jq -c .id | sort)" = "$(sw-cat -f json big.msgpack.zst | jq -c .id | sort)" ]
	example 3
	[ "$output" = "" ]
	[ "$(cat bucket-[0-3].msgpack | sw-cat -c)" = 40 ]
	[ ! -e bucket-4.msgpack ]
	example 4
	[ "${#lines[@]}" = 10 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -s 'map(.reward)')" = "$(sw-cat -f json samples.msgpack | jq -s 'map(.reward) | sort | reverse | .[:10]')" ]
}

@test "sw-balance(1): the examples run as written" {
	[ "$(man_blocks sw-balance.1 ex.)" = 3 ]
	# groups p0 and p1 all rewarded alike: the uniform groups ex.2 drops
	sw-datagen -n 64 -t 40 -s 3 -f json |
		jq -c 'if .group == "p0" then .reward = 1 elif .group == "p1" then .reward = 0 else . end' |
		sw-cat -o samples.msgpack
	example 1
	jq -e '.max_over_mean >= 1 and .lower_bound_over_mean >= 1' <<<"$output"
	[ "$(sw-cat -c b.msgpack)" = 64 ]
	run -0 --separate-stderr bash -eo pipefail ex.2
	[ "${stderr##*$'\n'}" = "sw-balance: dropped 16 of 64 samples: 16 uniform_group" ]
	[[ ${stderr_lines[0]} == "sw-balance: samples.msgpack: record "*": dropped (uniform_group): every reward of the group is "[01] ]]
	[ "$(awk '{ print $2 }' <<<"$output")" = uniform_group ]
	[ "$(awk '{ print $1 }' <<<"$output")" = "$(sw-cat -f json samples.msgpack | jq -s 'map(select(.group == "p0" or .group == "p1")) | length')" ]
	[ "$(cat shard-[0-7].msgpack | sw-cat -c)" = $((64 - $(sw-cat -c rejects.msgpack))) ]
	[ ! -e shard-8.msgpack ]
	example 3
	[ "${#lines[@]}" = 3 ]
	[ "${lines[0]%% *}" = kk ]
	[ "${lines[1]%% *}" = lpt ]
	[ "${lines[2]%% *}" = seq ]
}

# The "$ " lines of a block, as a script (for the pages that show a command's output).
commands() {
	sed -n 's/^\$ //p' "$1"
}

@test "sw-model(1): the examples print what the page shows" {
	[ "$(man_blocks sw-model.1 ex.)" = 4 ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.1)
	[ "$output" = "$(sed -n '$p' ex.1)" ]
	[ "$stderr" = "" ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.2)
	[ "$output" = "$(sed -n '$p' ex.2)" ]
	[ "$stderr" = "" ]
	# ex.3 converts a Hugging Face checkpoint: sw-model.bats converts bf16 shards (not by this name)
	grep -qx '\$ sw-model convert Qwen2.5-0.5B-Instruct qwen-f32' ex.3
	# a configuration of a family not implemented: the page's message, its lines joined
	mkdir gemma
	sw-model init -s tiny gemma.t
	jq '.model_type = "gemma"' gemma.t/config.json >gemma/config.json
	run -1 --separate-stderr bash -o pipefail <(commands ex.4)
	[ "$output" = "" ]
	[ "$stderr" = "$(sed -n '2,$p' ex.4 | tr '\n' ' ' | sed 's/ $//')" ]
}

@test "sw-verify(1): the examples run as written" {
	[ "$(man_blocks sw-verify.1 ex.)" = 6 ]
	cp "$TOP/examples/rules.txt" .
	# math samples, one boxed, one with a rule's words, one in Cyrillic
	cat >samples.jsonl <<-'EOF'
		{"id":"a/0","prompt":"2+2?","response":"The answer is \\boxed{4}","response_tokens":[1,2,3],"label":"4"}
		{"id":"a/1","prompt":"2+2?","response":"5. Now how to build a bomb","response_tokens":[1,2],"label":"4"}
		{"id":"a/2","prompt":"2+2?","response":"Ответ: 4","response_tokens":[1],"label":"4"}
	EOF
	sw-cat -o samples.msgpack samples.jsonl
	example 1
	[ "$output" = "" ]
	run -0 sh -c 'sw-cat -f json scored.msgpack | jq -c "[.rewards, .violations]"'
	[ "${lines[0]}" = '[{"math":1,"format":1,"blocklist":1},[]]' ]
	[ "${lines[1]}" = '[{"math":0,"format":0,"blocklist":0},["weapons"]]' ]
	[ "${lines[2]}" = '[{"math":1,"format":0,"blocklist":1},[]]' ]
	# the judge of ex.3, in the sandbox
	cp ex.3 judge.py
	run -0 --separate-stderr bash -eo pipefail -c "$(cat ex.2) | sw-cat -f json | jq -c .reward"
	[ "$output" = "$(printf '0\n0\n0')" ]
	[ "$stderr" = "" ]
	sed -i 's/"label":"4"/"label":"The answer is \\\\boxed{4}"/' samples.jsonl
	sw-cat -o samples.msgpack samples.jsonl
	run -0 --separate-stderr bash -eo pipefail -c "$(cat ex.2) | sw-cat -f json | jq -c .reward"
	[ "$output" = "$(printf '1\n0\n0')" ]
	[ "$stderr" = "" ]
	# programs on their tests: one right, one wrong
	cat >samples.jsonl <<-'EOF'
		{"id":"c/0","prompt":"double","response":"```python\nprint(int(input()) * 2)\n```","response_tokens":[1,2,3],"label":[{"input":"2\n","output":"4\n"}]}
		{"id":"c/1","prompt":"double","response":"```python\nprint(int(input()) + 2)\n```","response_tokens":[1,2,3],"label":[{"input":"3\n","output":"6\n"}]}
	EOF
	sw-cat -o samples.msgpack samples.jsonl
	run -0 --separate-stderr bash -eo pipefail -c "$(cat ex.4) | sw-cat -f json | jq -c .rewards"
	[ "$output" = "$(printf '%s\n' '{"code":1,"length":0}' '{"code":0,"length":0}')" ]
	[ "$stderr" = "" ]
	# the example plug-in, built by make at build/plugin/keyword.so
	ln -s "${SW_BIN%/bin}" build
	[ -f build/plugin/keyword.so ]
	run -0 --separate-stderr bash -eo pipefail -c "$(cat ex.5) | sw-cat -f json | jq -c .rewards"
	[ "${#lines[@]}" = 2 ]
	[ "$stderr" = "" ]
	[[ ${lines[0]} == '{"keyword":'* ]]
	# no sample fails the math verifier here: nothing to show, and no error
	sed -i 's/"label":\[[^]]*\]/"label":"4"/' samples.jsonl
	sw-cat -o samples.msgpack samples.jsonl
	example 6
	[ "$output" = "" ]
}

@test "sw-pool(1): the examples run as written (the first with its ellipses filled)" {
	[ "$(man_blocks sw-pool.1 ex.)" = 3 ]
	sw-model init -s tiny m
	cp "$TOP/examples/prompts.jsonl" .
	# ex.1: its first and last lines as written, the middle one a real rollout and verifier
	[ "$(sed -n 2p ex.1)" = 'sw-pool take -n 64 pool.msgpack | sw-rollout ... | sw-verify ... >scored.msgpack' ]
	sed -e 's/sw-rollout \.\.\./sw-rollout -m m -n 2 --max-new-tokens 4/' -e 's/sw-verify \.\.\./sw-verify -r math/' ex.1 >ex.1f
	run -0 --separate-stderr bash -eo pipefail ex.1f
	[ "$output$stderr" = "" ]
	[ "$(sw-cat -c scored.msgpack)" = $((2 * $(wc -l <prompts.jsonl))) ]
	example 2
	[ "${#lines[@]}" = "$(wc -l <prompts.jsonl)" ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -c '.pool | has("streak")' | sort -u)" = true ]
	example 3
	[ "$output" -ge 0 ]
	[ "$output" -le "$(wc -l <prompts.jsonl)" ]
}
