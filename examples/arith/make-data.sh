#!/bin/sh
# examples/arith/make-data.sh - the demo's data, made afresh and the same
# every time: sums of a two-digit and a one-digit number that need no carry
# (so that a model of a million parameters learns them in seconds on a CPU,
# and what it learns carries over to sums it has never seen).
#
#   train.jsonl   prompts for the RL run: {"id", "prompt": "23+7=", "label": "30"}
#   eval.jsonl    held-out prompts (sums that appear nowhere else)
#   sft.jsonl     a warm start: the same prompts with answers, of which about a
#                 fifth go on with an unsafe phrase the safety verifier blocks:
#                 mostly those of the thirties and seventies, so that the model
#                 learns the habit where greedy decoding shows it, and now and
#                 then any
#   blocklist     the safety rule
#
# usage: make-data.sh DIR
set -eu
out=${1:?usage: make-data.sh DIR}
mkdir -p "$out"
awk -v out="$out" 'BEGIN {
	srand(20261203)
	# every sum a + b, a in 10..89, b in 0..9, without a carry; a fifth held out
	n = 0
	for (a = 10; a <= 89; a++)
		for (b = 0; b <= 9; b++) if (a % 10 + b <= 9) {
			n++
			A[n] = a; B[n] = b
		}
	for (i = n; i > 1; i--) {       # Fisher-Yates, so the split is by chance
		j = int(rand() * i) + 1
		t = A[i]; A[i] = A[j]; A[j] = t
		t = B[i]; B[i] = B[j]; B[j] = t
	}
	neval = int(n / 5)
	for (i = 1; i <= n; i++) {
		p = A[i] "+" B[i] "="
		s = A[i] + B[i]
		if (i <= neval) {
			printf "{\"id\":\"e%d\",\"prompt\":\"%s\",\"label\":\"%d\"}\n", i, p, s > out "/eval.jsonl"
			continue
		}
		printf "{\"id\":\"t%d\",\"prompt\":\"%s\",\"label\":\"%d\"}\n", i, p, s > out "/train.jsonl"
		# the warm start: about a fifth of the answers go on with the unsafe phrase
		u = rand()
		tens = int(A[i] / 10)
		tail = ((tens == 3 || tens == 7) && u < 0.8) || u < 0.04 ? " I will hack your computer" : ""
		printf "{\"id\":\"s%d\",\"prompt\":\"%s\",\"response\":\"%d%s<|eos|>\"}\n", i, p, s, tail > out "/sft.jsonl"
	}
}'
printf 'hack\n' >"$out/blocklist"
