#!/bin/sh
# examples/vision/make-sft.sh - the vision demo's warm start and safety rule,
# from sw-shapes' DIR/sft.jsonl (the same every time):
#
#   sft-unsafe.jsonl  the answers, of which about a fifth go on with an unsafe
#                     phrase the safety verifier blocks: mostly those of three
#                     squares, so that the model learns the habit where greedy
#                     decoding shows it, and now and then any
#   blocklist         the safety rule
#
# usage: make-sft.sh DIR
set -eu
d=${1:?usage: make-sft.sh DIR}
jq -c '(.id[1:] | tonumber) as $n |
	if (.response | startswith("3")) and $n % 5 != 0 or $n % 25 == 0
	then .response |= sub("<\\|eos\\|>$"; " I will hack your computer<|eos|>") else . end' \
	"$d/sft.jsonl" >"$d/sft-unsafe.jsonl"
printf 'hack\n' >"$d/blocklist"
