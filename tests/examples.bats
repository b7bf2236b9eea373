#!/usr/bin/env bats
# The examples run: the main demo (shortened) and the Makefile experiment.
# The demo's learning itself is measured by `make demo` (bench/RESULTS.md
# keeps its figures); here each example must run through and leave a run
# directory that sw-audit accepts.
load helpers

@test "examples/arith/run.sh (the demo, shortened) runs through" {
	B=${SW_BIN%/bin}
	run -0 --separate-stderr env B="$B" SW_DEMO_DIR="$PWD/runs" SFT_EPOCHS=2 ITERS=3 BATCH=4 GROUP=2 \
		EVAL_EVERY=2 "$TOP/examples/arith/run.sh"
	[[ $output == *"== held-out accuracy and violation rate, before and after GRPO"* ]]
	[[ $output == *"iteration 0: accuracy "*"%, violation rate "*"%"* ]]
	[[ $output == *"iteration 3: accuracy "*"%, violation rate "*"%"* ]]
	[[ $stderr == *"sw-run: iter 3/3: "* ]]
	[ -f runs/demo/curves.svg ]
	run -0 sw-audit verify runs/demo
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/demo/metrics.jsonl)" = 3 ]
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
