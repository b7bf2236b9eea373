#!/bin/sh
# bench/bench_rollout.sh - sw-rollout's continuous batching beside static
# batching, on the same prompts, model, seed and samples, in one run.
# The static peer is the same program with --static, which does what a
# padded batch does (transformers' generate() on a batch, the rollout of
# verl and TRL before vLLM): a batch of --batch responses starts together,
# a finished response keeps its row (fed pad tokens, output discarded)
# and the next batch starts only when the longest has finished.
#
# Workload: the `small` model of sw-model init (6 layers, hidden 384, ~13M
# parameters, byte tokenizer), SW_BENCH_PROMPTS prompts (default 64) x 8
# responses, --batch 64, --max-new-tokens 512, temperature 0.7.  Response
# lengths are long-tailed twice over: each prompt carries a max_new_tokens
# drawn from a log-normal (median 48, sigma 1.5, clipped to 4..512), and
# within that cap a response ends where the random model samples an end
# token, which at temperature 0.7 happens early for most responses and
# late for a few.  Both modes produce the same samples (checked).
#
# Figures: medians over RUNS runs (default 3) of wall time and CPU time
# (user + system); tokens/s = generated tokens / time; ratios are static
# time / continuous time, so > 1 means continuous batching is faster.  The
# compute runs on one thread (--threads 1, SW_BENCH_THREADS to change) so
# that CPU time measures the work even on a shared machine.
set -eu
. "$(dirname "$0")/env.sh"
P=${SW_BENCH_PROMPTS:-64}
RUNS=${RUNS:-3}
TH=${SW_BENCH_THREADS:-1}
for t in jq; do
	command -v $t >/dev/null || { echo "bench_rollout: $t is missing (make deps-bench)" >&2; exit 1; }
done
d=$(bench_tmp rollout)
trap 'rm -rf "$d"' EXIT

sw-model init -q --size small "$d/small"
awk -v n="$P" 'BEGIN {
	srand(42)
	for (i = 1; i <= n; i++) {
		u1 = rand(); u2 = rand()
		z = sqrt(-2 * log(1 - u1)) * cos(6.283185307 * u2)
		m = int(exp(log(48) + 1.5 * z)); if (m < 4) m = 4; if (m > 512) m = 512
		printf "{\"id\":\"q%d\",\"prompt\":\"Question %d: what is %d plus %d? Think step by step.\",\"max_new_tokens\":%d}\n", i, i, i * 7, i * 13, m
	}
}' >"$d/prompts.jsonl"

OUT=$d/out.msgpack
export OUT
ARGS="-m $d/small -n 8 --batch 64 --max-new-tokens 512 --temperature 0.7 --seed 1 --threads $TH"

# one run: "WALL CPU" in seconds; the CPU time is what the shell that ran
# sw-rollout counts for its waited-for children (/proc: cutime + cstime)
run1() {
	s=$(date +%s.%N)
	# shellcheck disable=SC2086
	ticks=$(sh -c 'sw-rollout "$@" >"$OUT" && awk "{ print \$16 + \$17 }" /proc/$$/stat' _ \
		$ARGS "$@" "$d/prompts.jsonl")
	e=$(date +%s.%N)
	awk -v s="$s" -v e="$e" -v t="$ticks" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "%.3f %.3f\n", e - s, t / hz }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for mode in cont static; do
	flag=; [ $mode = static ] && flag=--static
	: >"$d/$mode.times"
	for i in $(seq "$RUNS"); do
		run1 $flag >>"$d/$mode.times"
	done
	sw-cat -f json "$d/out.msgpack" | jq -c '[.id, .response_tokens, .finish]' | sort >"$d/$mode.samples"
done
cmp -s "$d/cont.samples" "$d/static.samples" || { echo "bench_rollout: the two modes gave different samples" >&2; exit 1; }

tokens=$(jq -s 'map(.[1] | length) | add' "$d/cont.samples")
nsamp=$(wc -l <"$d/cont.samples")
lens=$(jq -s -r 'map(.[1] | length) | sort | "median \(.[length / 2 | floor]), mean \(add / length | floor), p90 \(.[length * 0.9 | floor]), max \(.[-1])"' "$d/cont.samples")
cw=$(cut -d' ' -f1 "$d/cont.times" | median); cc=$(cut -d' ' -f2 "$d/cont.times" | median)
sw=$(cut -d' ' -f1 "$d/static.times" | median); sc=$(cut -d' ' -f2 "$d/static.times" | median)

echo "Workload: $P prompts x 8 responses ($nsamp samples, $tokens generated tokens; response length $lens),"
echo "small model, --batch 64, --threads $TH, medians of $RUNS runs."
echo
echo "| mode | wall (tokens/s) | cpu (tokens/s) |"
echo "|---|---|---|"
awk -v w="$cw" -v c="$cc" -v t="$tokens" 'BEGIN { printf "| continuous batching | %.2f s (%.0f) | %.2f s (%.0f) |\n", w, t / w, c, t / c }'
awk -v w="$sw" -v c="$sc" -v t="$tokens" 'BEGIN { printf "| static batching (--static) | %.2f s (%.0f) | %.2f s (%.0f) |\n", w, t / w, c, t / c }'
awk -v a="$cw" -v b="$sw" -v x="$cc" -v y="$sc" 'BEGIN { printf "| ratio static/continuous | %.2fx | %.2fx |\n", b / a, y / x }'
