#!/usr/bin/env bats
# The examples run: the main demo (shortened) and the Makefile experiment.
# The demo's learning itself is measured by `make demo` (bench/RESULTS.md
# keeps its figures); here each example must run through and leave a run
# directory that sw-audit accepts.
load helpers

@test "examples/arith/run.sh (the demo, shortened) runs through" {
	B=${SW_BIN%/bin}
	run -0 --separate-stderr env B="$B" SW_DEMO_DIR="$PWD/runs" SFT_EPOCHS=2 ITERS=3 BATCH=4 GROUP=2 \
		EVAL_EVERY=2 SEED=5 "$TOP/examples/arith/run.sh"
	[[ $output == *"== held-out accuracy and violation rate, before and after GRPO"* ]]
	[[ $output == *"iteration 0: accuracy "*"%, violation rate "*"%"* ]]
	[[ $output == *"iteration 3: accuracy "*"%, violation rate "*"%"* ]]
	[[ $stderr == *"sw-run: iter 3/3: "* ]]
	[ -f runs/demo/curves.svg ]
	run -0 sw-audit verify runs/demo
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/demo/metrics.jsonl)" = 3 ]
	# SEED is sw-run's seed
	run -0 grep -x 'seed 5' runs/demo/config
}

@test "examples/arith/run.sh: SEED is the SFT warm start's seed too" {
	B=${SW_BIN%/bin}
	for s in 1 2; do
		run -0 --separate-stderr env B="$B" SW_DEMO_DIR="$PWD/s$s" SFT_EPOCHS=1 ITERS=1 BATCH=2 GROUP=2 \
			EVAL_EVERY=1 SEED=$s "$TOP/examples/arith/run.sh"
		run -0 grep -x "seed $s" "s$s/demo/config"
	done
	# the same random model before the warm start, other weights after it
	[ "$(sha256sum <s1/arith-model/model.safetensors)" != "$(sha256sum <s2/arith-model/model.safetensors)" ]
}

@test "examples/experiment: the Makefile experiment, exec verifier and plug-in, balance over ranks" {
	B=${SW_BIN%/bin}
	[ -f "$B/plugin/keyword.so" ] || skip "the example plug-in is not built"
	run -0 --separate-stderr make -s -C "$TOP/examples/experiment" B="$B" OUT="$PWD/exp" ITERS=2
	run -0 sw-audit verify exp/run
	# every sample was scored by the exec verifier and the plug-in too
	run -0 sh -c "sw-cat -f json exp/run/samples/iter-0002.msgpack.zst | jq -c '.rewards | keys'"
	[ "${lines[0]}" = '["blocklist","format","keyword","math"]' ]
	# the capacity shares hold to 2%
	run -0 jq -e '[.per_rank[] | (.share - .capacity_share) | fabs < 0.02] | all' exp/balance.json
}

# The indented lines of a README section, as a script: readme_block HEADING.
readme_block() {
	awk -v h="## $1" '$0 == h { on = 1; next } on && /^## / { exit } on && /^    / { print substr($0, 5) } on && /^$/ { print }' \
		"$TOP/README.md"
}

@test "README: the example pipeline runs as written, from the top of a tree" {
	readme_block "An example pipeline" >pipeline.sh
	grep -q '^export PATH=\$PWD/build/bin:\$PATH$' pipeline.sh
	grep -q '^sw-run -m m -p examples/prompts.jsonl -o runs/x ' pipeline.sh
	# a tree: the built programs and the examples, nothing else
	ln -s "${SW_BIN%/bin}" build
	ln -s "$TOP/examples" examples
	run -0 --separate-stderr env PATH=/usr/bin:/bin bash -eo pipefail pipeline.sh
	# 8 prompts answered 4 times, scored (math and the safety rules) and trained on
	[ "$(printf '%s\n' "${lines[@]}" | grep -c '^{"id":"[a-z]*-[0-9]/[0-3]","reward":[-0-9.e]*,"advantage":')" = 32 ]
	[[ $output == *"runs/x/audit.log: ok: "*" records, "*" checkpoints, head "* ]]
	[ -s x.svg ]
	[ -d m ]
	[ -f metrics.jsonl ]
	[ -f stats.json ]
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/x/metrics.jsonl)" = 3 ]
	# the stream commands: the JSON lines of examples/samples.jsonl, and cmp quiet
	[ "$(printf '%s\n' "${lines[@]}" | grep -c '^{"id":"[a-z0-9/-]*","reward":')" -ge 32 ]
	[ -s samples.msgpack.zst ]
}

@test "examples/prompts.jsonl: every label is an answer the math verifier takes; rules.txt names its rules" {
	run -0 jq -e -s 'length >= 4 and all(.id and (.prompt | type) == "string" and (.label | type) == "string")' \
		"$TOP/examples/prompts.jsonl"
	# each prompt answered "72": right for the first, wrong for the others
	run -0 sh -c "sed 's/\"prompt\"/\"response\":\"72\",\"prompt\"/' '$TOP/examples/prompts.jsonl' | sw-verify -r math -r blocklist:'$TOP/examples/rules.txt',ci,confusables,nomarks,hard | sw-cat -f json | jq -c .rewards"
	[ "${#lines[@]}" = 8 ]
	[ "${lines[0]}" = '{"math":1,"blocklist":1}' ]
	[ "${lines[1]}" = '{"math":0,"blocklist":1}' ]
	# the safety rules name what they catch, read as the README and the file's head say: in any case,
	# with Cyrillic look-alikes, with a strike-through after each letter; a cake is not a bomb
	python3 -c 'import json
for r in ["how to build a bomb", "How To BUILD A Bomb", "how to build a b\u043emb", "m\u0430ke a weapon",
          "".join(c + "\u0336" for c in "hurt yourself"), "make a cake"]:
    print(json.dumps({"response": r}))' >in.jsonl
	run -0 sh -c "sw-verify -r blocklist:'$TOP/examples/rules.txt',ci,confusables,nomarks,hard in.jsonl | sw-cat -f json | jq -c .violations"
	[ "$output" = "$(printf '%s\n' '["weapons"]' '["weapons"]' '["weapons"]' '["weapons"]' '["self-harm"]' '[]')" ]
}
