#!/usr/bin/env bats
# examples/vision/run.sh (`make demo-vision`), shortened to seconds: the
# pictures, the SFT warm start (the counts with the vision tower, then the
# drawn answers with it frozen), GRPO through sw-run
# with the math verifier and the hard safety rule, accuracy before and
# after, a run directory sw-audit accepts.  How much it learns is measured
# by `make demo-vision` itself (README, "The vision demo").
load helpers

@test "examples/vision/run.sh (the vision demo, shortened) runs through" {
	B=${SW_BIN%/bin}
	run -0 --separate-stderr env B="$B" SW_DEMO_DIR="$PWD/runs" TRAIN=16 EVAL=8 SFT_EPOCHS=1 SFT_MB=2 DRAWN_EPOCHS=1 ITERS=5 \
		BATCH=4 GROUP=2 EVAL_EVERY=1 "$TOP/examples/vision/run.sh"
	[[ $output == *"== data: 16 pictures to learn from, 8 held out"* ]]
	[[ $output == *"architecture    LlavaForConditionalGeneration"* ]]
	[[ $output == *"== SFT warm start: 1 epochs (sw-train -a sft --train-vision)"* ]]
	[[ $output == *"== SFT on the drawn answers: 1 epochs (sw-train -a sft)"* ]]
	[ -s runs/vision-data/sft-drawn.jsonl ]
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

@test "examples/vision/make-sft.sh: the counts with the unsafe habit, and the same with numbers drawn uniformly" {
	run -0 sw-shapes -n 400 -e 1 -q red-square -s 3 d
	run -0 "$TOP/examples/vision/make-sft.sh" d
	[ "$(cat d/blocklist)" = hack ]
	[ "$(wc -l <d/sft-unsafe.jsonl)" -eq 400 ]
	[ "$(wc -l <d/sft-drawn.jsonl)" -eq 400 ]
	# sft-unsafe.jsonl answers each picture's count, sft-drawn.jsonl the same pictures and prompts
	nums() { jq -r '"\(.id) \(.response | capture("^(?<k>[0-9]+)").k)"' "$1"; }
	[ "$(nums d/sft-unsafe.jsonl)" = "$(jq -r '"\(.id) \(.label)"' d/train.jsonl)" ]
	[ "$(jq -c '[.id, .prompt, .media]' d/sft-drawn.jsonl)" = "$(jq -c '[.id, .prompt, .media]' d/train.jsonl)" ]
	# the drawn numbers: each of 0-3 about a quarter of the time, the count about a quarter of the time
	for k in 0 1 2 3; do
		n=$(nums d/sft-drawn.jsonl | awk -v k="$k" '$2 == k' | wc -l)
		[ "$n" -ge 80 ]
		[ "$n" -le 120 ]
	done
	same=$(paste -d ' ' <(nums d/sft-unsafe.jsonl) <(nums d/sft-drawn.jsonl) | awk '$2 == $4' | wc -l)
	[ "$same" -ge 60 ]
	[ "$same" -le 140 ]
	# the habit in both: after most threes, and after every 25th answer whatever its number
	for f in d/sft-unsafe.jsonl d/sft-drawn.jsonl; do
		[ "$(jq -r 'select(.response | startswith("3")) | .response' "$f" | grep -c hack)" -gt 0 ]
		[ "$(jq -r 'select(.id == "t25" or .id == "t50") | .response' "$f" | grep -c ' I will hack your computer<|eos|>$')" -eq 2 ]
		[ "$(jq -r 'select(.id | .[1:] | tonumber | . % 5 == 0 and . % 25 != 0) | .response' "$f" | grep -c hack)" -eq 0 ]
	done
	# the same every time
	cp d/sft-drawn.jsonl first.jsonl
	run -0 "$TOP/examples/vision/make-sft.sh" d
	cmp first.jsonl d/sft-drawn.jsonl
}
