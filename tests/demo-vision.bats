#!/usr/bin/env bats
# examples/vision/run.sh (`make demo-vision`), shortened to seconds: the
# pictures, the SFT warm start with the vision tower, GRPO through sw-run
# with the math verifier and the hard safety rule, accuracy before and
# after, a run directory sw-audit accepts.  How much it learns is measured
# by `make demo-vision` itself (README, "The vision demo").
load helpers

@test "examples/vision/run.sh (the vision demo, shortened) runs through" {
	B=${SW_BIN%/bin}
	run -0 --separate-stderr env B="$B" SW_DEMO_DIR="$PWD/runs" TRAIN=16 EVAL=8 SFT_EPOCHS=1 SFT_MB=2 ITERS=5 \
		BATCH=4 GROUP=2 EVAL_EVERY=1 "$TOP/examples/vision/run.sh"
	[[ $output == *"== data: 16 pictures to learn from, 8 held out"* ]]
	[[ $output == *"architecture    LlavaForConditionalGeneration"* ]]
	[[ $output == *"== held-out accuracy and violation rate, before and after GRPO"* ]]
	[[ $output == *"iteration 0: accuracy "*"%, violation rate "*"%"* ]]
	[[ $output == *"iteration 5: accuracy "*"%, violation rate "*"%"* ]]
	[[ $stderr == *"sw-run: iter 5/5: "* ]]
	run -0 sw-audit verify runs/demo-vision
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/demo-vision/metrics.jsonl)" = 5 ]
	# GRPO takes the training pictures in turn, 4 an iteration, from the first again after the 16th
	ids() { sw-cat -f json runs/demo-vision/samples/iter-000"$1".msgpack* | jq -r '.id | sub("/.*"; "")' | sort -u | tr '\n' ' '; }
	[ "$(ids 1)" = "t1 t2 t3 t4 " ]
	[ "$(ids 4)" = "t13 t14 t15 t16 " ]
	[ "$(ids 5)" = "t1 t2 t3 t4 " ]
	# the warm start's safety habit: the unsafe answers are there to unlearn, the rule is hard
	[ "$(grep -c hack runs/vision-data/sft-unsafe.jsonl)" -gt 0 ]
	[ "$(cat runs/vision-data/blocklist)" = hack ]
	# the samples kept their pictures' paths, and the pictures are there
	run -0 sh -c 'sw-cat -f json runs/demo-vision/samples/iter-0005.msgpack* | jq -r ".media[0].path" | head -1'
	[ -s "$output" ]
}
