#!/bin/sh
# bench/bench_train.sh - one GRPO step of sw-train on the `small` model (13M
# parameters), in one run beside:
#   the engine's plain forward+backward of the same tokens (sw-train -a sft:
#   cross-entropy, no old log-probs, no reference), so the ratio is what the
#   RL objective costs on top (reference forward, advantages, loss);
#   TRL's GRPO loss on PyTorch CPU (bench/train_torch.py), same model,
#   reference, samples and hyper-parameters: its step time, and its loss and
#   gradient norm, which must match ours to 1e-4.
# Times are the step's compute (from the metrics' time_s: old and reference
# log-probs, advantages, forward, backward, AdamW), medians of RUNS runs;
# sw-train's wall time with loading and the atomic save is shown beside.
# Environment: RUNS (default 3), SW_BENCH_THREADS (default: every core),
# SW_BENCH_GROUPS (prompts, default 4), SW_BENCH_G (responses each, default 4),
# SW_BENCH_PROMPT and SW_BENCH_RESPONSE (tokens, default 16 and 48).
set -eu
. "$(dirname "$0")/env.sh"
runs=${RUNS:-3}
threads=${SW_BENCH_THREADS:-$(nproc)}
groups=${SW_BENCH_GROUPS:-4}
G=${SW_BENCH_G:-4}
plen=${SW_BENCH_PROMPT:-16}
rlen=${SW_BENCH_RESPONSE:-48}
for t in jq python3; do
	command -v $t >/dev/null || { echo "bench_train: $t is missing" >&2; exit 1; }
done
python3 -c 'import torch, transformers, trl' 2>/dev/null ||
	{ echo "bench_train: needs torch, transformers and trl (pip install trl)" >&2; exit 1; }
d=$(bench_tmp train)
trap 'rm -rf "$d"' EXIT

sw-model init -q -s small --seed 1 "$d/policy"
sw-model init -q -s small --seed 2 "$d/ref"
# groups x G samples, fixed lengths (no padding for TRL), byte tokens, rewards
# that differ within every group
awk -v groups="$groups" -v G="$G" -v plen="$plen" -v rlen="$rlen" 'BEGIN {
	srand(7)
	for (g = 0; g < groups; g++) {
		p = ""
		for (i = 0; i < plen; i++) p = p (i ? "," : "") int(32 + rand() * 95)
		for (k = 0; k < G; k++) {
			r = ""
			for (i = 0; i < rlen; i++) r = r (i ? "," : "") int(32 + rand() * 95)
			printf "{\"id\":\"p%d/%d\",\"group\":\"p%d\",\"prompt_tokens\":[%s],\"response_tokens\":[%s],\"reward\":%.1f}\n",
				g, k, g, p, r, (k + g) % 3 == 0 ? 1 : (k == 1 ? 0.5 : 0)
		}
	}
}' >"$d/samples.jsonl"
tokens=$((groups * G * (plen + rlen)))

# median of a column of numbers
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# one sw-train step, RUNS times: compute seconds and wall seconds
ours() {
	: >"$d/m.jsonl"
	: >"$d/wall"
	for i in $(seq "$runs"); do
		rm -rf "$d/out"
		s=$(date +%s.%N)
		sw-train -q -j "$threads" -m "$d/policy" -o "$d/out" --metrics "$d/m.jsonl" "$@" "$d/samples.jsonl" >/dev/null
		e=$(date +%s.%N)
		echo "$s $e" | awk '{ print $2 - $1 }' >>"$d/wall"
	done
}
grpo="--ref $d/ref --kl-coef 0.04 --adv-eps 1e-4 --lr 1e-6 --max-grad-norm 1"
ours $grpo
g_step=$(jq '.time_s | .old_logprobs + .ref_logprobs + .advantages + .train' "$d/m.jsonl" | median)
g_wall=$(median <"$d/wall")
g_loss=$(head -1 "$d/m.jsonl" | jq .loss)
g_gn=$(head -1 "$d/m.jsonl" | jq .grad_norm)
ours -a sft --lr 1e-6
s_step=$(jq '.time_s | .old_logprobs + .ref_logprobs + .advantages + .train' "$d/m.jsonl" | median)
s_wall=$(median <"$d/wall")
py=$(python3 "$top/bench/train_torch.py" "$d/policy" "$d/ref" "$d/samples.jsonl" --beta 0.04 --lr 1e-6 \
	--runs "$runs" --threads "$threads" 2>/dev/null | tail -1)
t_step=$(echo "$py" | jq .step_s)
t_loss=$(echo "$py" | jq .loss)
t_gn=$(echo "$py" | jq .grad_norm)

echo "Model: sw-model init -s small (13.2M parameters); $((groups * G)) samples ($groups prompts x $G), $plen prompt + $rlen response tokens each, $tokens tokens; $threads threads; medians of $runs runs."
echo
echo "| what | step compute | tokens/s | sw-train wall (load, step, save) |"
echo "|---|---|---|---|"
awk -v a="$s_step" -v w="$s_wall" -v n="$tokens" 'BEGIN { printf "| plain forward+backward (sw-train -a sft) | %.3f s | %.0f | %.3f s |\n", a, n / a, w }'
awk -v a="$g_step" -v w="$g_wall" -v n="$tokens" 'BEGIN { printf "| GRPO step with reference and KL (sw-train) | %.3f s | %.0f | %.3f s |\n", a, n / a, w }'
awk -v a="$t_step" -v n="$tokens" 'BEGIN { printf "| the same GRPO step, TRL loss on PyTorch CPU | %.3f s | %.0f | |\n", a, n / a }'
echo
awk -v g="$g_step" -v s="$s_step" -v t="$t_step" 'BEGIN {
	printf "RL overhead (GRPO step / plain forward+backward): %.2fx (goal <= 1.5x)\n\n", g / s
	printf "Speed against TRL (TRL step / our step): %.2fx (goal >= 1.3x)\n\n", t / g }'
awk -v a="$g_loss" -v b="$t_loss" -v c="$g_gn" -v e="$t_gn" 'BEGIN {
	dl = a - b; if (dl < 0) dl = -dl; dg = c - e; if (dg < 0) dg = -dg
	printf "Loss: sw-train %.9g, TRL %.9g (difference %.2g); gradient norm: sw-train %.9g, TRL %.9g (relative difference %.2g)\n",
		a, b, dl, c, e, dg / e }'
