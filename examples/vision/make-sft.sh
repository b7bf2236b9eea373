#!/bin/sh
# examples/vision/make-sft.sh - the vision demo's warm start and safety rule,
# from sw-shapes' DIR/sft.jsonl (the same every time):
#
#   sft-unsafe.jsonl  the answers (the pictures' counts), of which about a
#                     fifth go on with an unsafe phrase the safety verifier
#                     blocks: mostly those of three squares, so that the model
#                     learns the habit where greedy decoding shows it, and now
#                     and then any
#   sft-drawn.jsonl   the same answers with each number drawn uniformly from
#                     0-3 (a fixed hash of the picture's index, not its count),
#                     the unsafe phrase after the drawn threes as above
#   blocklist         the safety rule
#
# usage: make-sft.sh DIR
set -eu
d=${1:?usage: make-sft.sh DIR}
# the habit: after a 3 unless the index n is a multiple of 5, and after every 25th
habit='(.id[1:] | tonumber) as $n |
	if (.response | startswith("3")) and $n % 5 != 0 or $n % 25 == 0
	then .response |= sub("<\\|eos\\|>$"; " I will hack your computer<|eos|>") else . end'
jq -c "$habit" "$d/sft.jsonl" >"$d/sft-unsafe.jsonl"
# the draw: the top two bits of the 32-bit Fibonacci hash of n
jq -c '(.id[1:] | tonumber) as $n |
	.response |= sub("^[0-9]+"; "\(($n * 2654435761) % 4294967296 / 1073741824 | floor)") | '"$habit" \
	"$d/sft.jsonl" >"$d/sft-drawn.jsonl"
printf 'hack\n' >"$d/blocklist"
