#!/bin/sh
# bench/bench_micro.sh - the train stage of bench_grpo.sh's GRPO iteration,
# sw-train alone on the samples one iteration gives it, by the size of its
# micro batches, and (BEFORE=TREE) beside the sw-train of a checkout built
# with make, in the same run.
#
# Model: a random Llama of SmolLM2-135M's shapes (bench/grpo_trl.py make;
# hidden 576, 30 layers, vocab 49152, f32); samples: sw-rollout's 8 prompts x
# 8 responses of 64 tokens, scored by sw-verify's overlong reward and put
# through sw-balance (which gives them all one `micro` number, as it does in
# sw-run's pipeline), the model itself as the reference (KL 0.04), 2 threads.
# Under the activation budget of 2.5 B a parameter a micro batch keeps every
# layer's activations up to 479 tokens at this shape; beyond, the backward
# runs the layers it could not keep again.
#
# SW_BENCH_MODEL=sw takes bench_profile.sh's model instead (sw-model init:
# the same shapes, random weights, a byte tokenizer, so the prompts are
# longer and the micro batches other sizes).
# SW_BENCH_MATMUL=bf16 gives every run `--matmul bf16` (the products' operands
# rounded to bf16, AMX or AVX512-BF16 kernels); the default is f32.
#
# Figures, medians of SW_BENCH_RUNS (default 3) runs of each: sw-train's
# time_s.train (forward, backward, AdamW) and time_s.ref_logprobs, its
# micro_batches (the build before this metric has none: "-"), the whole
# process's peak RSS, and the loss and gradient norm (the same step, so they
# must agree).  SW_BENCH_MICRO="479 560 ..." adds runs of this build with
# --micro-tokens set to each value, the samples' micro field removed.
# SW_BENCH_WHOLE=1 adds runs of this build with --no-prompt-sharing (each
# sample runs its prompt itself), alternating with the others, and prints
# whole / shared; the figure tokens_shared says what sharing saved.
# Needs torch and transformers (for the model) and the programs in $B/bin.
set -euf
. "$(dirname "$0")/env.sh"
runs=${SW_BENCH_RUNS:-3}
matmul=${SW_BENCH_MATMUL:-f32}
model=${SW_BENCH_MODEL:-hf}
case $model in hf | sw) ;; *) echo "bench_micro: SW_BENCH_MODEL='$model' is not hf or sw" >&2; exit 1 ;; esac
case $matmul in f32 | bf16) ;; *) echo "bench_micro: SW_BENCH_MATMUL='$matmul' is not f32 or bf16" >&2; exit 1 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "bench_micro: needs torch and transformers" >&2; exit 1; }
if [ -n "${BEFORE:-}" ] && [ ! -x "$BEFORE/build/bin/sw-train" ]; then
	echo "bench_micro: $BEFORE/build/bin/sw-train is missing (make in that checkout)" >&2
	exit 1
fi
tmp=$(bench_tmp micro)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
. "$here/smol_prompts.sh"
if [ "$model" = sw ]; then
	. "$here/smol_model.sh"
	smol_model m
	smol_prompt_file
else
	smol_prompts
fi
sw-rollout -m m -n 8 --seed 1 --max-new-tokens 64 --threads 2 p.jsonl |
	sw-verify -r length,max=120,buffer=60,unit=chars | sw-balance -n 1 >train.msgpack
sw-cat -f json train.msgpack | jq -c 'del(.micro)' >nomicro.jsonl
ntok=$(sw-cat -f json train.msgpack | jq -s 'map((.prompt_tokens | length) + (.response_tokens | length)) | add')

# one BIN LABEL INPUT [ARGS]: a run, its figures appended to LABEL.runs
one() {
	bin=$1 label=$2 in=$3
	shift 3
	rm -rf out met.jsonl
	/usr/bin/time -f '%M' -o rss "$bin" -q -m m -o out --algo grpo --lr 1e-6 --kl-coef 0.04 --ref m -j 2 \
		--matmul "$matmul" --metrics met.jsonl "$@" "$in" >/dev/null
	jq -r --arg rss "$(cat rss)" '[.time_s.train, .time_s.ref_logprobs, (.micro_batches // "-"), ($rss | tonumber / 1024),
		.loss, .grad_norm, (.tokens_shared // "-")] | @tsv' met.jsonl >>"$label.runs"
}
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row() {
	f=$1.runs
	printf '| %s | %.2f s | %.2f s | %s | %s | %.0f | %s | %s |\n' "$2" "$(cut -f1 "$f" | med)" "$(cut -f2 "$f" | med)" \
		"$(cut -f3 "$f" | head -n 1)" "$(cut -f7 "$f" | head -n 1)" "$(cut -f4 "$f" | med)" "$(cut -f5 "$f" | head -n 1)" \
		"$(cut -f6 "$f" | head -n 1)"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
labels=
r=0
while [ "$r" -lt "$runs" ]; do
	r=$((r + 1))
	[ -z "${BEFORE:-}" ] || one "$BEFORE/build/bin/sw-train" before train.msgpack
	one "$B/bin/sw-train" now train.msgpack
	[ -z "${SW_BENCH_WHOLE:-}" ] || one "$B/bin/sw-train" whole train.msgpack --no-prompt-sharing
	for n in ${SW_BENCH_MICRO:-}; do
		one "$B/bin/sw-train" "micro$n" nomicro.jsonl --micro-tokens "$n"
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo "sw-train's GRPO step on one iteration's samples: 64 samples, $ntok tokens, SmolLM2-135M's shapes (f32; products $matmul; model $model),"
echo "KL 0.04 to a reference, 2 threads; medians of $runs runs; load average before $load0, after $load1"
echo
echo "| build, micro batches | train (fwd+bwd+AdamW) | reference log-probs | micro batches | tokens shared | peak RSS (MB) | loss | grad norm |"
echo "|---|---|---|---|---|---|---|---|"
[ -z "${BEFORE:-}" ] || row before "before ($BEFORE), sw-balance's micro field"
row now "now, sw-balance's micro field"
[ -z "${SW_BENCH_WHOLE:-}" ] || row whole "now, --no-prompt-sharing, sw-balance's micro field"
for n in ${SW_BENCH_MICRO:-}; do
	row "micro$n" "now, --micro-tokens $n, no micro field"
done
if [ -n "${SW_BENCH_WHOLE:-}" ]; then
	echo
	awk -v a="$(cut -f1 whole.runs | med)" -v b="$(cut -f1 now.runs | med)" -v c="$(cut -f2 whole.runs | med)" \
		-v d="$(cut -f2 now.runs | med)" \
		'BEGIN { printf "train: whole / shared %.2fx; reference log-probs: whole / shared %.2fx\n", a / b, c / d }'
fi
if [ -n "${BEFORE:-}" ]; then
	echo
	awk -v a="$(cut -f1 before.runs | med)" -v b="$(cut -f1 now.runs | med)" \
		'BEGIN { printf "train: before / now %.2fx\n", a / b }'
fi
