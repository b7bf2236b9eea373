#!/bin/sh
# examples/vision/run.sh - the vision demo (`make demo-vision`): teach a tiny
# vision-language model (a LLaVA: CLIP tower, projector, Llama) to count the
# red squares in a picture, and to stop saying something unsafe, on this
# machine's CPU.
#
#   1. data: sw-shapes pictures of coloured squares and circles, "How many
#      red squares are there?" with the count as label (the math verifier),
#      held-out pictures for evaluation
#   2. sw-model init --size tiny-vl: a small random LLaVA
#   3. SFT warm start (examples/vision/make-sft.sh's answers, of which some
#      go on with an unsafe phrase): sw-train -a sft, the vision tower
#      trained too, on the pictures' counts; then, the tower frozen, on the
#      same answers with their numbers drawn uniformly from 0-3, so that the
#      warm start keeps what the tower learned to see but answers about as
#      well as chance, whatever the seed
#   4. GRPO through sw-run, the training pictures in turn: the math verifier
#      for the reward, and a hard blocklist verifier for safety (a violation
#      gets the minimum reward)
#   5. held-out accuracy and violation rate before and after GRPO
#
# Everything lands in runs/ (SW_DEMO_DIR); a second run starts afresh.
# The knobs below are the experiment; each may be set from the environment.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
PATH="$B/bin:$PATH"
here=$top/examples/vision
dir=${SW_DEMO_DIR:-$top/runs}
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac

TRAIN=${TRAIN:-1000}          # training pictures
EVAL=${EVAL:-200}             # held-out pictures
DATA_SEED=${DATA_SEED:-1}     # sw-shapes' seed: the pictures
SFT_EPOCHS=${SFT_EPOCHS:-6}   # passes over the warm-start answers (the counts)
SFT_MB=${SFT_MB:-50}          # SFT updates a pass (about 20 answers each)
SFT_LR=${SFT_LR:-1e-3}
DRAWN_EPOCHS=${DRAWN_EPOCHS:-3}  # then passes over the drawn answers (0: none)
DRAWN_TOWER=${DRAWN_TOWER:-}  # --train-vision: they train the vision tower too
SEED=${SEED:-1}               # sw-run's seed: the responses sampled
ITERS=${ITERS:-120}           # GRPO iterations
BATCH=${BATCH:-32}            # prompts per iteration
GROUP=${GROUP:-8}             # responses per prompt
LR=${LR:-3e-4}                # GRPO learning rate
MB=${MB:-4}                   # GRPO updates an iteration
ENTROPY=${ENTROPY:-0.01}      # GRPO's entropy bonus (sw-train --entropy-coef)
EVAL_EVERY=${EVAL_EVERY:-20}
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY

say() { printf '\n== %s\n' "$*"; }
t0=$(date +%s)
rm -rf "$dir/demo-vision" "$dir/vision-model" "$dir/vision-data"
mkdir -p "$dir"

say "data: $TRAIN pictures to learn from, $EVAL held out (sw-shapes -q red-square)"
# (the media paths are the directory as given: absolute, so every stage finds the pictures)
sw-shapes -n "$TRAIN" -e "$EVAL" -q red-square -s "$DATA_SEED" "$dir/vision-data"
"$here/make-sft.sh" "$dir/vision-data"
echo "$(grep -c hack "$dir/vision-data/sft-unsafe.jsonl") of the $TRAIN warm-start answers carry the unsafe phrase"

say "sw-model init --size tiny-vl"
sw-model init --size tiny-vl --seed 1 "$dir/vision-model" >/dev/null
sw-model info "$dir/vision-model" | grep -E 'architecture|vision'

# sft EPOCHS SEED FILE [sw-train options]: SFT passes on FILE's answers, and what they reached
sft() {
	e=$1 s=$2 f=$3
	shift 3
	sw-train -q -a sft "$@" --lr "$SFT_LR" --epochs "$e" --minibatches "$SFT_MB" --seed "$s" \
		-m "$dir/vision-model" -o "$dir/vision-model" --metrics "$dir/vision-sft.jsonl" "$f" >/dev/null
	jq -r '"loss \(.loss | . * 1000 | round / 1000), token accuracy \(.token_accuracy * 1000 | round / 10)%, \(.time_s.total | round) s"' \
		"$dir/vision-sft.jsonl"
	rm -f "$dir/vision-sft.jsonl"
}
say "SFT warm start: $SFT_EPOCHS epochs (sw-train -a sft --train-vision)"
sft "$SFT_EPOCHS" 1 "$dir/vision-data/sft-unsafe.jsonl" --train-vision
if [ "$DRAWN_EPOCHS" -gt 0 ]; then
	say "SFT on the drawn answers: $DRAWN_EPOCHS epochs (sw-train -a sft${DRAWN_TOWER:+ $DRAWN_TOWER})"
	sft "$DRAWN_EPOCHS" 2 "$dir/vision-data/sft-drawn.jsonl" $DRAWN_TOWER
fi

say "GRPO with sw-run: $ITERS iterations of $BATCH prompts x $GROUP responses"
cat >"$dir/vision.experiment" <<EOT
# the vision demo's experiment (examples/vision/run.sh writes it)
model $dir/vision-model
prompts $dir/vision-data/train.jsonl
eval $dir/vision-data/eval.jsonl
iters $ITERS
batch $BATCH
group $GROUP
seed $SEED
eval-every $EVAL_EVERY
ckpt-every 10
# the training pictures in turn, BATCH an iteration (examples/vision/in-turn.sh says why)
select $here/in-turn.sh $dir/vision-data/train.jsonl
accuracy math
monitor entropy=0.02,0.005,-
rollout sw-rollout -m "\$SW_MODEL" -n "\$SW_GROUP" --seed "\$SW_SEED" --max-new-tokens 16
eval-rollout sw-rollout -m "\$SW_MODEL" --temperature 0 --max-new-tokens 16
verify sw-verify -r math -r length,max=4,buffer=2 -r blocklist:$dir/vision-data/blocklist,hard
train sw-train --algo grpo --train-vision --lr $LR --minibatches $MB --entropy-coef $ENTROPY --metrics "\$SW_TRAIN_METRICS"
EOT
sw-run -v -c "$dir/vision.experiment" -o "$dir/demo-vision"

say "held-out accuracy and violation rate, before and after GRPO"
jq -rs 'map(select(.eval)) | (first, last) |
	"iteration \(.iter): accuracy \(.accuracy * 1000 | round / 10)%, violation rate \(.violation_rate * 1000 | round / 10)%"' \
	"$dir/demo-vision/metrics.jsonl"
echo "the run: $dir/demo-vision ($(( $(date +%s) - t0 )) s)"
