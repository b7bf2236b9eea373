#!/usr/bin/env bats
# The EXAMPLES of the manual pages, run as written: each literal block of a
# page's EXAMPLES section, as a script (bash, errexit and pipefail), on small
# inputs of the names it uses, its output checked against what the page says.
# Each test first counts its page's blocks, so that an example added to a page
# fails here until it is run.  Where a page elides (sw-pool(1)'s "sw-rollout
# ...", sw-audit(1)'s "5f0c..." and its counts), the test fills the gap and
# says how.  Run elsewhere too: sw-run(1)'s experiment file (man.bats).
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

# Run block N as a script with mpirun the tests' (helpers.bash's sw_mpirun); it writes nothing
# to standard output.
mpi_example() {
	run -0 --separate-stderr bash -eo pipefail -c "$(declare -f sw_mpirun); mpirun() { sw_mpirun \"\$@\"; }; $(cat "ex.$1")"
	[ "$output" = "" ]
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
	sw-model init -s tiny model
	head -3 "$TOP/examples/prompts.jsonl" | sw-cat -o prompts.msgpack
	example 1
	[ "$output" = "" ]
	[ "$(sw-cat -c samples.msgpack)" = 24 ]
	# the cheapest prompt's group first
	[ "$(sw-cat -n 1 -f json samples.msgpack | jq -r .group)" = "$(sw-sort prompts.msgpack | sw-cat -n 1 -f json | jq -r .id)" ]
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
	# nothing dropped: the empty rejects file ends the pipeline, as the page says
	sw-datagen -n 64 -t 40 -s 3 -f json | jq -c '.reward = (.id | ltrimstr("p") | sub("/"; ".") | tonumber)' |
		sw-cat -o samples.msgpack
	run -1 --separate-stderr bash -eo pipefail ex.2
	[ "$output" = "" ]
	[ "$stderr" = "sw-cat: rejects.msgpack: empty input: no records" ]
	[ ! -s rejects.msgpack ]
	example 3
	[ "${#lines[@]}" = 3 ]
	[ "${lines[0]%% *}" = kk ]
	[ "${lines[1]%% *}" = lpt ]
	[ "${lines[2]%% *}" = seq ]
}

# Lines FROM on of block file F joined by spaces, as a program's message the page wraps: joined F FROM.
joined() {
	sed -n "$2,\$p" "$1" | tr '\n' ' ' | sed 's/ $//'
}

# The dtypes of safetensors file F's header, one a line.
dtypes() {
	head -c 4096 "$1" | grep -ao '"dtype":"[A-Z0-9]*"' | sort -u
}

# The "$ " lines of a block (and the lines a backslash continues them on), as a script: the
# pages that show a command's output.
commands() {
	awk '/^\$ / { print substr($0, 3); more = /\\$/; next } more { print; more = /\\$/ }' "$1"
}

@test "sw-model(1): the examples print what the page shows" {
	[ "$(man_blocks sw-model.1 ex.)" = 4 ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.1)
	[ "$output" = "$(sed -n '$p' ex.1)" ]
	[ "$stderr" = "" ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.2)
	[ "$output" = "$(sed -n '$p' ex.2)" ]
	[ "$stderr" = "" ]
	# a bf16 checkpoint of Qwen2's family by that name (transformers', tiny; one file: sw-model.bats
	# converts a sharded one): one float32 file (the dtypes of its header)
	cp -r "$TOP/tests/fixtures/models/tiny-qwen2-bf16" Qwen2.5-0.5B-Instruct
	[ "$(dtypes Qwen2.5-0.5B-Instruct/model.safetensors)" = '"dtype":"BF16"' ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.3)
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	[ "$(dtypes qwen-f32/model.safetensors)" = '"dtype":"F32"' ]
	[ "$(sw-model info --json qwen-f32 | jq -r .model_type)" = qwen2 ]
	# a configuration of a family sw-model does not read: the page's message, its lines joined
	mkdir gemma
	sw-model init -s tiny gemma.t
	jq '.model_type = "gemma"' gemma.t/config.json >gemma/config.json
	run -1 --separate-stderr bash -o pipefail <(commands ex.4)
	[ "$output" = "" ]
	[ "$stderr" = "$(joined ex.4 2)" ]
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

@test "sw-pool(1): the examples run as written (the first two with their ellipses filled)" {
	[ "$(man_blocks sw-pool.1 ex.)" = 4 ]
	sw-model init -s tiny m
	cp "$TOP/examples/prompts.jsonl" .
	# ex.1: its first and last lines as written, the middle one a real rollout and verifier
	[ "$(sed -n 2p ex.1)" = 'sw-pool take -n 64 pool.msgpack | sw-rollout ... | sw-verify ... >scored.msgpack' ]
	sed -e 's/sw-rollout \.\.\./sw-rollout -m m -n 2 --max-new-tokens 4/' -e 's/sw-verify \.\.\./sw-verify -r math/' ex.1 >ex.1f
	run -0 --separate-stderr bash -eo pipefail ex.1f
	[ "$output$stderr" = "" ]
	[ "$(sw-cat -c scored.msgpack)" = $((2 * $(wc -l <prompts.jsonl))) ]
	# ex.2: the same as one pipeline, ending in the update of the pool it took from: a second round
	[ "$(sed -n 2p ex.2)" = '    sw-pool update pool.msgpack' ]
	sed -e 's/sw-rollout \.\.\./sw-rollout -m m -n 2 --max-new-tokens 4/' -e 's/sw-verify \.\.\./sw-verify -r math/' ex.2 >ex.2f
	run -0 --separate-stderr timeout 60 bash -eo pipefail ex.2f
	[ "$output$stderr" = "" ]
	[ "$(sw-cat -f json pool.msgpack | jq -s -c 'map(.pool.last_seen) | unique')" = "[2]" ]
	example 3
	[ "${#lines[@]}" = "$(wc -l <prompts.jsonl)" ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -c '.pool | has("streak")' | sort -u)" = true ]
	example 4
	[ "$output" -ge 0 ]
	[ "$output" -le "$(wc -l <prompts.jsonl)" ]
}

# A model of tiny size and three short runs of it (sw-run on the examples' prompts).
a_run() {
	[ -d m ] || sw-model init -s tiny m
	[ -f prompts.jsonl ] || cp "$TOP/examples/prompts.jsonl" .
	sw-run -q -m m -p prompts.jsonl -o "$1" --iters 2 -b 4 -n 2 --verify 'sw-verify -r math' \
		--rollout 'sw-rollout -n "$SW_GROUP" --max-new-tokens 8'
}

@test "sw-plot(1): the examples draw what they name, and the bad value is named as the page says" {
	[ "$(man_blocks sw-plot.1 ex.)" = 3 ]
	a_run runs/demo
	a_run runs/lr1
	a_run runs/lr3
	run -0 --separate-stderr bash -eo pipefail <(commands ex.1)
	[ "$output$stderr" = "" ]
	[ "$(head -c 8 runs/demo/curves.png | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]
	run -0 --separate-stderr bash -eo pipefail <(commands ex.2)
	[ "$output$stderr" = "" ]
	grep -q 'lr 1e-5 vs 3e-5' cmp.svg
	grep -q 'runs/lr1' cmp.svg
	grep -q 'runs/lr3' cmp.svg
	# runs/x: the demo's metrics, record 7's kl a string
	mkdir -p runs/x
	head -1 runs/demo/metrics.jsonl >r
	for i in 1 2 3 4 5 6; do jq -c ".iter = $i | .kl = 0.0$i" r; done >runs/x/metrics.jsonl
	jq -c '.iter = 7 | .kl = "n/a"' r >>runs/x/metrics.jsonl
	run -1 --separate-stderr bash -o pipefail <(commands ex.3)
	[ "$output" = "" ]
	[ "$stderr" = "$(joined ex.3 2)" ]
}

@test "sw-rollout(1): the examples run as written" {
	[ "$(man_blocks sw-rollout.1 ex.)" = 4 ]
	sw-model init -s tiny model
	cp -r model policy
	cp -r model reference
	head -2 "$TOP/examples/prompts.jsonl" >prompts.jsonl
	example 1
	[ "${#lines[@]}" = 16 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -r .finish | sort -u | grep -cvx 'stop\|length')" = 0 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq '.n <= 512' | sort -u)" = true ]
	example 2
	[ "${#lines[@]}" = 1 ]
	[ "$(jq -r '.id + " " + .group' <<<"$output")" = "q1/0 q1" ]
	[[ "$(jq -r .response <<<"$output")" != *$'\n\n'* ]]
	example 3
	[ "$output" = "" ]
	[ "$(sw-cat -c scored.msgpack)" = 16 ]
	[ "$(sw-cat -f json scored.msgpack | jq '(.ref_logprobs | length) == (.response_tokens | length) and (.rewards | has("math"))' | sort -u)" = true ]
	need_mpirun
	mpi_example 4
	[ "$(sw-cat -c dp.msgpack)" = 8 ]
}

@test "sw-train(1): the examples run as written" {
	[ "$(man_blocks sw-train.1 ex.)" = 4 ]
	sw-model init -s tiny tiny
	sft_set >sft.jsonl
	example 1
	[ "$output" = "" ]
	[ -f tiny/model.safetensors ]
	# a GRPO step from checkpoint 3, against checkpoint 0
	mkdir ckpt
	sw-model init -s tiny ckpt/0
	cp -r ckpt/0 ckpt/3
	head -2 "$TOP/examples/prompts.jsonl" | sw-rollout -m ckpt/3 -n 4 --max-new-tokens 8 | sw-verify -r math >samples.msgpack
	example 2
	[ "${#lines[@]}" = 8 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq 'type' | sort -u)" = '"number"' ]
	[ -f ckpt/4/model.safetensors ]
	[ "$(jq -s 'length' metrics.jsonl)" -ge 1 ]
	cp -r ckpt/0 m
	example 3
	[ "$output" = "" ]
	need_mpirun
	mpi_example 4
	[ "$(sw-cat -c balanced.msgpack)" = 8 ]
	# ex.3's step and ex.4's: two versions of m
	[ "$(jq .version m/trainer_state.json)" = 2 ]
}

@test "sw-run(1): the examples run as written (my-filter a filter of one's own)" {
	[ "$(man_blocks sw-run.1 ex.)" = 5 ]
	sw-model init -s tiny model
	cp "$TOP/examples/prompts.jsonl" .
	# a stage of one's own: it drops the samples of one prompt, and counts what it saw
	mkdir bin
	printf '%s\n' '#!/bin/sh' "sw-cat -f json | tee -a '$PWD/seen.jsonl' | jq -c 'select(.group != \"gsm-1\")' | sw-cat" \
		>bin/my-filter
	chmod +x bin/my-filter
	PATH=$PWD/bin:$PATH
	run -0 --separate-stderr bash -eo pipefail ex.1
	[ "$output" = "" ]
	[[ $stderr == "sw-run: 4 iterations done; the run is in runs/x (audit head "*")" ]]
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/x/metrics.jsonl)" = 4 ]
	[ "$(jq -s 'map(.group) | unique | length' seen.jsonl)" -ge 2 ]
	[ "$(sw-cat -f json runs/x/samples/iter-0004.msgpack.zst | jq -c 'select(.group == "gsm-1")' | wc -l)" = 0 ]
	run -0 --separate-stderr bash -eo pipefail ex.2
	[[ $stderr == "sw-run: 6 iterations done; the run is in runs/x (audit head "*")" ]]
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/x/metrics.jsonl)" = 6 ]
	run -0 --separate-stderr bash -eo pipefail ex.3
	[[ $stderr == "sw-run: 10 iterations done; the run is in runs/y (audit head "*")" ]]
	[ "$(ls runs/y/ckpt | wc -l)" -le 4 ]
	[ -d runs/y/ckpt/iter-0010 ]
	[ -d runs/y/ckpt/iter-0008 ]
	[ ! -d runs/y/ckpt/iter-0007 ] || [ "$(ls runs/y/ckpt | wc -l)" = 4 ]
	need_mpirun
	# the mpirun sw-run starts: what sw-run-ranks.bats's setup gives it (LeakSanitizer, under make
	# check, would report what Open MPI keeps until exit), and mpirun, not srun, in a Slurm job
	run -0 --separate-stderr env -u SLURM_JOB_ID ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
		OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
		OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_btl_vader_backing_directory="$BATS_TEST_TMPDIR" \
		bash -eo pipefail ex.4
	[ "$output" = "" ]
	[[ ${stderr_lines[-1]} == "sw-run: 4 iterations done; the run is in runs/dp (audit head "*")" ]]
	grep -qx 'ranks 2' runs/dp/config
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/dp/metrics.jsonl)" = 4 ]
	run -0 --separate-stderr bash -eo pipefail ex.5
	[[ $output == "runs/x/audit.log: ok: "*" records, "*" checkpoints, head "* ]]
	[ -s x.svg ]
}

# A line of sw-audit's with its numbers as N and its hashes (or the page's "5f0c...") as H.
shape() {
	sed -E 's/[0-9a-f]{64}|5f0c\.\.\./H/g; s/[0-9]+/N/g'
}

# Rewrite record K of audit log LOG (its time's last digit) and, with --rechain, every hash and
# prev from it on, as sw-audit(1) says they are made ("The log"): prints the record's byte offset.
edit_log() {
	python3 - "$@" <<-'PY'
		import hashlib, json, sys
		path, k, rechain = sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3
		lines = open(path, "rb").read().split(b"\n")
		at = sum(len(l) + 1 for l in lines[:k - 1])
		l = lines[k - 1]
		i = l.index(b'"time":"') + len(b'"time":"2026-12-06T11:36:09.62')
		lines[k - 1] = l[:i] + (b"1" if l[i:i + 1] != b"1" else b"2") + l[i + 1:]
		prev = None
		for j in range(k - 1, len(lines)) if rechain else []:
		    l = lines[j]
		    if not l:
		        continue
		    body = l[:l.rindex(b',"hash":"')]
		    if prev is not None:
		        p = body.index(b'"prev":"') + 8
		        body = body[:p] + prev + body[p + 64:]
		    prev = hashlib.blake2b(body, digest_size=32).hexdigest().encode()
		    tail = l[l.index(b'"', l.rindex(b',"hash":"') + 9) + 1:]
		    lines[j] = body + b',"hash":"' + prev + b'"' + tail
		open(path, "wb").write(b"\n".join(lines))
		print(at)
	PY
}

@test "sw-audit(1): the examples say what sw-audit prints (its numbers and hashes aside)" {
	[ "$(man_blocks sw-audit.1 ex.)" = 6 ]
	a_run runs/demo
	run -0 --separate-stderr bash -eo pipefail <(commands ex.1)
	[ "$stderr" = "" ]
	[ "$(shape <<<"$output")" = "$(sed -n 2p ex.1 | shape)" ]
	head=${output##* }
	# the head kept elsewhere, given back
	[ "$(commands ex.2)" = 'sw-audit verify -H 5f0c... runs/demo' ]
	run -0 --separate-stderr bash -eo pipefail -c "$(commands ex.2 | sed "s/5f0c\.\.\./$head/")"
	[ "${#lines[@]}" = 2 ]
	[ "${lines[0]##* }" = "$head" ]
	n=${lines[0]#*: ok: }
	[ "${lines[1]}" = "runs/demo/audit.log: the head is record ${n%% *}" ]
	# a byte changed: the page's message, at the record's byte
	cp -r runs/demo runs/kept
	at=$(edit_log runs/demo/audit.log 17)
	run -1 --separate-stderr bash -o pipefail <(commands ex.3)
	[ "$output" = "" ]
	[ "$stderr" = "$(joined ex.3 2 | sed "s/byte 4211/byte $at/")" ]
	# signed, then edited and re-chained by hand from record 9: the hashes hold, the signature not
	cp "$TOP/examples/prompts.jsonl" .
	[ "$(commands ex.4 | sed -n 1,2p)" = "$(printf '%s\n' 'sw-audit keygen run.key' 'sw-run -m m -p prompts.jsonl -o runs/x --sign-key run.key')" ]
	run -0 --separate-stderr bash -eo pipefail -c "$(commands ex.4 | sed -n 1,3p)"
	[ "$(shape <<<"${output%%), *}")" = "$(sed -n 4p ex.4 | sed 's/), \.\.\.$//' | shape)" ]
	[[ $stderr == "sw-run: 10 iterations done; the run is in runs/x (audit head "*")" ]]
	at=$(edit_log runs/x/audit.log 9 --rechain)
	run -0 sw-audit verify runs/x
	run -1 --separate-stderr bash -o pipefail -c "$(commands ex.4 | sed -n 4p)"
	[ "$output" = "" ]
	[ "$stderr" = "$(joined ex.4 6 | sed "s/byte 3120/byte $at/")" ]
	# a stage's record, its output's digest in it (the demo's log as it was before the edit)
	rm -r runs/demo
	mv runs/kept runs/demo
	sw-datagen -n 3 >out.msgpack
	run -0 --separate-stderr bash -eo pipefail <(commands ex.5)
	[ "$output$stderr" = "" ]
	[ "$(tail -1 runs/demo/audit.log | jq -r '.event + " " + .name + " " + .output')" = "stage filter $(sw-audit digest out.msgpack | cut -d' ' -f1)" ]
	run -0 sw-audit verify runs/demo
	# iteration 2's weights digest is its checkpoint's weights (run-e2e.bats: every iteration's, as they move)
	run -0 --separate-stderr bash -eo pipefail <(commands ex.6)
	[ "$stderr" = "" ]
	[ "$(shape <<<"$output")" = "$(sed -n '2p;4p' ex.6 | sed 's/3b9e\.\.\./H/' | shape)" ]
	[ "${lines[1]}" = "${lines[0]}  runs/demo/ckpt/iter-0002" ]
}
