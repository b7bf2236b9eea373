#!/bin/sh
# tools/vision-grpo.sh - the experiment behind the vision demo's tuning: the
# demo's SFT warm start of tiny-vl on sw-shapes' red-square counting (the
# counts with the vision tower, then the drawn answers with it frozen, as
# examples/vision/make-sft.sh makes them), then GRPO through sw-run (the
# training pictures taken in turn, as in examples/vision/run.sh), and what
# GRPO's groups held: held-out accuracy at each evaluation, and every 10
# iterations the sampled accuracy, the entropy, the response length and the
# share of samples whose advantage is 0 (groups whose responses all scored
# the same: no gradient).
#
#   tools/vision-grpo.sh DIR      (everything lands in DIR, made afresh)
#
# Knobs (environment), by default examples/vision/run.sh's: TRAIN (1000), EVAL (200) pictures,
# DATA_SEED (sw-shapes' seed, 1), SFT_EPOCHS (on the counts, 6), SFT_MB (SFT updates a pass, 50),
# SFT_LR (1e-3), DRAWN_EPOCHS (then on the drawn answers, 3; 0: none), DRAWN_TOWER (--train-vision:
# they train the tower too; empty: frozen), ITERS (120), BATCH (32), GROUP (8), LR (3e-4),
# MB (GRPO updates an iteration, 4), ENTROPY (GRPO's entropy bonus, 0.01), SEED (sw-run's seed, 1),
# TOWER (--train-vision: GRPO trains the vision tower; empty: frozen), EVAL_EVERY (20),
# VERIFY_EXTRA (-r length,max=4,buffer=2: DAPO's overlong punishment, against
# the rambling answers whose last number the math verifier reads), B (build).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$top/build}
PATH="$B/bin:$PATH"
d=${1:?usage: vision-grpo.sh DIR}
mkdir -p "$d"
d=$(cd "$d" && pwd)
SFT_EPOCHS=${SFT_EPOCHS:-6} SFT_MB=${SFT_MB:-50} SFT_LR=${SFT_LR:-1e-3} DRAWN_EPOCHS=${DRAWN_EPOCHS:-3}
DRAWN_TOWER=${DRAWN_TOWER:-} ITERS=${ITERS:-120} BATCH=${BATCH:-32} GROUP=${GROUP:-8} LR=${LR:-3e-4} MB=${MB:-4} ENTROPY=${ENTROPY:-0.01}
EVAL_EVERY=${EVAL_EVERY:-20} SEED=${SEED:-1} TOWER=${TOWER---train-vision}
VERIFY_EXTRA=${VERIFY_EXTRA--r length,max=4,buffer=2}
rm -rf "$d/data" "$d/model" "$d/run"
sw-shapes -n "${TRAIN:-1000}" -e "${EVAL:-200}" -q red-square -s "${DATA_SEED:-1}" "$d/data" >/dev/null
"$top/examples/vision/make-sft.sh" "$d/data"
sw-model init --size tiny-vl --seed 1 "$d/model" >/dev/null
sw-train -q -a sft --train-vision --lr "$SFT_LR" --epochs "$SFT_EPOCHS" --minibatches "$SFT_MB" --seed 1 \
	-m "$d/model" -o "$d/model" "$d/data/sft-unsafe.jsonl" >/dev/null
[ "$DRAWN_EPOCHS" -eq 0 ] ||
	sw-train -q -a sft $DRAWN_TOWER --lr "$SFT_LR" --epochs "$DRAWN_EPOCHS" --minibatches "$SFT_MB" --seed 2 \
		-m "$d/model" -o "$d/model" "$d/data/sft-drawn.jsonl" >/dev/null
cat >"$d/experiment" <<EOT
model $d/model
prompts $d/data/train.jsonl
eval $d/data/eval.jsonl
iters $ITERS
batch $BATCH
group $GROUP
seed $SEED
eval-every $EVAL_EVERY
ckpt-every 50
select $top/examples/vision/in-turn.sh $d/data/train.jsonl
accuracy math
monitor entropy=0.02,0.005,-
rollout sw-rollout -m "\$SW_MODEL" -n "\$SW_GROUP" --seed "\$SW_SEED" --max-new-tokens 16
eval-rollout sw-rollout -m "\$SW_MODEL" --temperature 0 --max-new-tokens 16
verify sw-verify -r math $VERIFY_EXTRA -r blocklist:$d/data/blocklist,hard
train sw-train --algo grpo $TOWER --lr $LR --minibatches $MB --entropy-coef $ENTROPY --metrics "\$SW_TRAIN_METRICS"
EOT
sw-run -q -c "$d/experiment" -o "$d/run"
echo "held-out accuracy (greedy), violation rate:"
jq -r 'select(.eval) | "  iteration \(.iter): \(.accuracy), \(.violation_rate)"' "$d/run/metrics.jsonl"
echo "iteration: sampled accuracy, entropy, response length, share of samples with advantage 0"
for f in "$d"/run/samples/iter-*.train.msgpack*; do
	i=$(basename "$f" | sed 's/^iter-0*//; s/\..*//')
	[ $((i % 10)) -eq 0 ] || [ "$i" -eq 1 ] || continue
	z=$(sw-cat -f json "$f" | jq -s '(map(select(.advantage == 0)) | length) / length')
	jq -r --argjson i "$i" --arg z "$z" 'select(.iter == $i and (.eval | not)) |
		"  \(.iter): \(.accuracy), \(.entropy * 100 | round / 100), \(.response_len_mean), \($z)"' "$d/run/metrics.jsonl"
done
