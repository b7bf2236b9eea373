#!/bin/sh
# examples/arith/run.sh - the main demo (`make demo`): teach a small model
# arithmetic, and to stop saying something unsafe, on this machine's CPU.
#
#   1. data: sums like "23+7=", with held-out ones for evaluation
#   2. sw-model init: a small random model with the byte tokenizer
#   3. SFT warm start on answers of which about a fifth carry an unsafe phrase
#   4. GRPO through sw-run: a math verifier for the reward, and a hard
#      blocklist verifier for safety (a violation gets the minimum reward)
#   5. held-out accuracy and violation rate before and after, the run
#      directory, the audit check and the plot
#
# Everything lands in runs/ (SW_DEMO_DIR); a second run starts afresh.
# The knobs below are the experiment; each may be set from the environment.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
PATH="$B/bin:$PATH"
here=$top/examples/arith
dir=${SW_DEMO_DIR:-$top/runs}

SIZE=${SIZE:-tiny}            # sw-model init --size
SEED=${SEED:-1}               # the SFT's and sw-run's seed
SFT_EPOCHS=${SFT_EPOCHS:-12}  # passes over the warm-start answers: about half right after them
SFT_LR=${SFT_LR:-1.5e-3}      # at 3e-3 some seeds' warm start diverges (bench/RESULTS.md, "demo")
ITERS=${ITERS:-200}           # GRPO iterations
BATCH=${BATCH:-32}            # prompts per iteration
GROUP=${GROUP:-8}             # responses per prompt
LR=${LR:-7e-4}                # GRPO learning rate
EVAL_EVERY=${EVAL_EVERY:-20}
# the stages share two cores: OpenMP threads must not spin waiting for each other
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY

say() { printf '\n== %s\n' "$*"; }
t0=$(date +%s)
rm -rf "$dir/demo" "$dir/arith-model" "$dir/arith-data"
mkdir -p "$dir"

say "data: sums of a two-digit and a one-digit number (examples/arith/make-data.sh)"
"$here/make-data.sh" "$dir/arith-data"
wc -l "$dir/arith-data/train.jsonl" "$dir/arith-data/eval.jsonl" "$dir/arith-data/sft.jsonl" | sed '$d'
echo "$(grep -c hack "$dir/arith-data/sft.jsonl") of the warm-start answers carry the unsafe phrase"

say "sw-model init --size $SIZE"
sw-model init --size "$SIZE" --seed 1 "$dir/arith-model" >/dev/null
sw-model info "$dir/arith-model" | head -3

say "SFT warm start: $SFT_EPOCHS epochs (sw-train -a sft)"
sw-train -q -a sft --lr "$SFT_LR" --epochs "$SFT_EPOCHS" --minibatches 12 --seed "$SEED" \
	-m "$dir/arith-model" -o "$dir/arith-model" --metrics "$dir/sft-metrics.jsonl" \
	"$dir/arith-data/sft.jsonl" >/dev/null
jq -r '"loss \(.loss | . * 1000 | round / 1000), token accuracy \(.token_accuracy * 1000 | round / 10)%, \(.time_s.total | round) s"' \
	"$dir/sft-metrics.jsonl"
rm -f "$dir/sft-metrics.jsonl"

say "GRPO with sw-run: $ITERS iterations of $BATCH prompts x $GROUP responses"
cat >"$dir/arith.experiment" <<EOT
# the demo's experiment (examples/arith/run.sh writes it)
model $dir/arith-model
prompts $dir/arith-data/train.jsonl
eval $dir/arith-data/eval.jsonl
iters $ITERS
batch $BATCH
group $GROUP
eval-every $EVAL_EVERY
ckpt-every 10
accuracy math
# a three-token answer is meant to become certain: warn only when entropy is nearly gone
monitor entropy=0.02,0.005,-
rollout sw-rollout -n "\$SW_GROUP" --seed "\$SW_SEED" --max-new-tokens 24
eval-rollout sw-rollout --temperature 0 --max-new-tokens 24
verify sw-verify -r math -r blocklist:$dir/arith-data/blocklist,hard
train sw-train --algo grpo --lr $LR --metrics "\$SW_TRAIN_METRICS"
EOT
sw-run -v --seed "$SEED" -c "$dir/arith.experiment" -o "$dir/demo"

say "sw-audit verify $dir/demo"
sw-audit verify "$dir/demo"
sw-plot -o "$dir/demo/curves.svg" "$dir/demo" && echo "the curves: $dir/demo/curves.svg"
if command -v rsvg-convert >/dev/null || command -v convert >/dev/null; then
	sw-plot -o "$dir/demo/curves.png" "$dir/demo" && echo "            $dir/demo/curves.png"
fi

say "held-out accuracy and violation rate, before and after GRPO"
jq -rs 'map(select(.eval)) | (first, last) |
	"iteration \(.iter): accuracy \(.accuracy * 1000 | round / 10)%, violation rate \(.violation_rate * 1000 | round / 10)%"' \
	"$dir/demo/metrics.jsonl"
echo "the run: $dir/demo ($(( $(date +%s) - t0 )) s)"
