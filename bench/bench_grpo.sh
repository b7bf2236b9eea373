#!/bin/sh
# bench/bench_grpo.sh - a GRPO iteration of sw-run beside TRL's GRPOTrainer,
# the figure users compare first (issue 14), in one run:
#
#   sw-run   select | sort | rollout | verify | balance | train, the weights in
#            a shared store, a frozen reference for the KL (--ref)
#   TRL      GRPOTrainer (bench/grpo_trl.py): generation, reference log-probs,
#            loss, backward and AdamW inside each trainer step
#
# Same model (a random one of SmolLM2-135M's shapes in f32, written by
# transformers: bench/grpo_trl.py make), same prompts, 8 prompts x 8 responses
# of 64 new tokens (sampled at temperature 1 from a random model over 49152
# tokens, so every response runs to 64: the end token is 1 in 49152), KL to the
# reference with beta 0.04 (k3), learning rate 1e-6, one AdamW step an
# iteration, 2 threads on both sides, DAPO's overlong reward on characters on
# both sides.  SW_BENCH_ITERS iterations (default 3) a side, SW_BENCH_ROUNDS
# rounds (default 1) alternating the two so that a change of the machine's load
# falls on both.  Figures: the median of every iteration's wall time (sw-run:
# metrics' time_s.iteration, with its stages; TRL: the callback's step time)
# and their ratio; each side's whole command (what a user times: TRL's Python
# start, imports and loads; sw-run's start, checkpoints and audit log); when sw-run's rollout and train stages end (the stages of an
# iteration start together as one pipeline, so the train stage's time includes
# its wait for the samples); the train stage's peak RSS beside TRL's process
# peak.
# SW_BENCH_MATMUL=bf16 runs sw-run's train stage with `sw-train --matmul bf16`
# (bf16 products, f32 sums; the rollout stays f32), SW_BENCH_TRL_BF16=1 TRL
# with GRPOConfig(bf16=True) (autocast to bf16 on the CPU); both f32 unless set.
# Needs torch, transformers, trl (pip install trl) and the programs in $B/bin.
set -euf
. "$(dirname "$0")/env.sh"
iters=${SW_BENCH_ITERS:-3}
rounds=${SW_BENCH_ROUNDS:-1}
matmul=${SW_BENCH_MATMUL:-f32}
trl_bf16=${SW_BENCH_TRL_BF16:-0}
case $matmul in f32 | bf16) ;; *) echo "bench_grpo: SW_BENCH_MATMUL='$matmul' is not f32 or bf16" >&2; exit 1 ;; esac
case $trl_bf16 in 0) trl_prec=f32; trl_arg= ;; 1) trl_prec=bf16; trl_arg=bf16 ;;
*) echo "bench_grpo: SW_BENCH_TRL_BF16='$trl_bf16' is not 0 or 1" >&2; exit 1 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
python3 -c 'import torch, transformers, trl' 2>/dev/null ||
	{ echo "bench_grpo: needs torch, transformers and trl (pip install trl)" >&2; exit 1; }
tmp=$(bench_tmp grpo)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

python3 "$here/grpo_trl.py" make m >/dev/null 2>&1
python3 - "$iters" >p.jsonl <<'EOF'
import json, sys
for i in range(8 * int(sys.argv[1])):
    print(json.dumps({"id": f"p{i}", "prompt": f"Question {i}: tell a short story about the number {7 * i}."}))
EOF

: >sw.iter; : >sw.rollout; : >sw.train; : >sw.rss; : >sw.whole; : >trl.iter; : >trl.rss; : >trl.whole
load0=$(cut -d' ' -f1-3 /proc/loadavg)
r=0
while [ "$r" -lt "$rounds" ]; do
	r=$((r + 1))
	rm -rf run
	t0=$(date +%s.%N)
	sw-run -q -m m -p p.jsonl -o run --iters "$iters" -b 8 -n 8 --ref --ckpt-every "$iters" \
		--rollout "sw-rollout -m $tmp/m -n \"\$SW_GROUP\" --seed \"\$SW_SEED\" --max-new-tokens 64 --threads 2" \
		--verify 'sw-verify -r length,max=120,buffer=60,unit=chars' \
		--train "sw-train --matmul $matmul --algo grpo --lr 1e-6 --kl-coef 0.04 -j 2 --metrics \"\$SW_TRAIN_METRICS\""
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >>sw.whole
	jq 'select(.eval | not) | .time_s.iteration' run/metrics.jsonl >>sw.iter
	jq 'select(.eval | not) | .time_s.rollout' run/metrics.jsonl >>sw.rollout
	jq 'select(.eval | not) | .time_s.train' run/metrics.jsonl >>sw.train
	jq 'select(.eval | not) | .rss_mb.train' run/metrics.jsonl >>sw.rss
	t0=$(date +%s.%N)
	python3 "$here/grpo_trl.py" run m p.jsonl "$iters" trl.json $trl_arg >trl.log 2>&1 ||
		{ tail -20 trl.log >&2; exit 1; }
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >>trl.whole
	jq '.step_s[]' trl.json >>trl.iter
	jq '.peak_rss / 1048576' trl.json >>trl.rss
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

med() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
max() { sort -g "$1" | tail -n 1; }
echo "GRPO iteration, random SmolLM2-135M-shaped model (f32), 8 prompts x 8 responses x 64 tokens, KL 0.04, 2 threads;"
echo "matrix products: sw-run's train stage $matmul (rollout f32), TRL $trl_prec"
echo "$rounds round(s) x $iters iterations a side; load average before $load0, after $load1"
echo "torch $(jq -r .torch trl.json), trl $(python3 -c 'import trl; print(trl.__version__)'), $(sw-run --version)"
echo
echo "| | median iteration | rollout ends at | train ends at | peak RSS (MB) |"
echo "|---|---|---|---|---|"
printf '| sw-run (train %s) | %.2f s | %.2f s | %.2f s | %.0f (train stage) |\n' "$matmul" "$(med sw.iter)" "$(med sw.rollout)" "$(med sw.train)" "$(max sw.rss)"
printf '| TRL GRPOTrainer (%s) | %.2f s | | | %.0f (process) |\n' "$trl_prec" "$(med trl.iter)" "$(max trl.rss)"
echo
awk -v a="$(med trl.iter)" -v b="$(med sw.iter)" 'BEGIN { printf "TRL iteration / sw-run iteration: %.2fx (goal >= 3x)\n", a / b }'
echo "every iteration (s): sw-run $(tr '\n' ' ' <sw.iter); TRL $(tr '\n' ' ' <trl.iter)"
awk -v a="$(med trl.whole)" -v b="$(med sw.whole)" -v n="$iters" 'BEGIN { printf "whole run of %d iterations, the command'"'"'s wall time (median of the rounds): TRL %.2f s (its start: Python, imports, the models and data loaded; it saves nothing), sw-run %.2f s (its start, its first and last checkpoints: the trained model and its optimiser state written, and the audit log): %.2fx\n", n, a, b, a / b }'
