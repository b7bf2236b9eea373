#!/bin/sh
# bench/bench_profile.sh - SW_PROFILE (the profiling backend, backend.h's
# sw_backend_prof): what timing every device op costs, and where a GRPO
# iteration's two computing stages spend their time, op by op and shape by
# shape.
#
# The model: a random f32 model of SmolLM2-135M's shapes (hidden 576, 30
# layers, 9 heads, 3 KV heads, intermediate 1536, vocab 49152, tied; written
# by sw-model init, byte tokenizer), as bench_rollout_grpo.sh's.  The work:
# its rollout, sw-rollout of 8 prompts x 8 responses x 64 new tokens
# (temperature 1, seed 1, --threads 2, OMP_WAIT_POLICY=PASSIVE), RUNS times
# with SW_PROFILE and RUNS times without (default 3), alternating; the
# samples must be the same bytes either way.  Then one sw-train GRPO step on
# those samples (after sw-verify's length reward and sw-balance, as
# bench_micro.sh's; KL 0.04 to the model itself, -j 2) with SW_PROFILE.
# Figures: what the profiler adds to one op (prof_bench: the CPU's add of
# 16 floats a million times straight and through it, 7 rounds, medians),
# and that times the rollout's ops; the rollout's median wall seconds with
# and without the profile (on this shared VM runs differ by more than the
# profile costs); then each stage's table: every op's total, and the 10
# (op, shape) rows that took longest.
set -eu
. "$(dirname "$0")/env.sh"
RUNS=${RUNS:-3}
d=$(bench_tmp profile)
trap 'rm -rf "$d"' EXIT
export OMP_WAIT_POLICY=PASSIVE
unset SW_PROFILE
. "$top/bench/smol_model.sh"
smol_model "$d/m"
for i in 0 1 2 3 4 5 6 7; do
	printf '{"id":"p%d","prompt":"Question %d: tell a short story about the number %d."}\n' $i $i $((7 * i))
done >"$d/p.jsonl"

rollout() { # rollout OUT [PROFILE]: one run, its wall seconds appended to $d/wall.OUT
	t0=$(date +%s.%N)
	env ${2:+SW_PROFILE=$2} sw-rollout -m "$d/m" -n 8 --seed 1 --max-new-tokens 64 --threads 2 \
		-o "$d/$1.msgpack" "$d/p.jsonl"
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >>"$d/wall.$1"
}
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
per=$("$B/bench/prof_bench" 1000000 7)
steal0=$(awk '/^cpu / { print $9 }' /proc/stat)
r=0
while [ "$r" -lt "$RUNS" ]; do
	r=$((r + 1))
	rm -f "$d/rollout.prof"
	rollout plain
	rollout prof "$d/rollout.prof"
	cmp "$d/plain.msgpack" "$d/prof.msgpack" || { echo "bench_profile: the profiled rollout's samples differ" >&2; exit 1; }
done
sw-verify -r length,max=120,buffer=60,unit=chars "$d/plain.msgpack" | sw-balance -n 1 >"$d/train.msgpack"
SW_PROFILE=$d/train.prof sw-train -q -m "$d/m" -o "$d/out" --algo grpo --lr 1e-6 --kl-coef 0.04 --ref "$d/m" -j 2 \
	"$d/train.msgpack" >/dev/null
load1=$(cut -d' ' -f1-3 /proc/loadavg)
steal1=$(awk '/^cpu / { print $9 }' /proc/stat)

plain=$(med <"$d/wall.plain") prof=$(med <"$d/wall.prof")
nops=$(sed -n 's/^# SW_PROFILE: .* s in \([0-9]*\) operations .*/\1/p' "$d/rollout.prof")
added=$(echo "$per" | sed 's/.*added_ns=\([-0-9.]*\).*/\1/')
echo "Load average before $load0, after $load1; steal $(((steal1 - steal0) / $(getconf CLK_TCK))) s; $RUNS runs a side."
echo
echo "One op (prof_bench 1000000 7): $per"
echo "The rollout's $nops ops x $added ns: $(awk -v n="$nops" -v a="$added" -v w="$plain" 'BEGIN { printf "%.1f ms, %.3f%% of its median wall", n * a * 1e-6, 100 * n * a * 1e-9 / w }')"
echo
echo "| sw-rollout, 8 x 8 x 64 | wall s (runs) | median | profiled / plain |"
echo "|---|---|---|---|"
echo "| plain | $(paste -sd, "$d/wall.plain" | sed 's/,/, /g') | $plain | |"
echo "| SW_PROFILE | $(paste -sd, "$d/wall.prof" | sed 's/,/, /g') | $prof | $(awk -v a="$prof" -v b="$plain" 'BEGIN { printf "%.3f", a / b }') |"
for s in rollout train; do
	echo
	echo "The $s stage's table (the last run's): each op's total, then the 10 longest (op, shape) rows"
	echo
	echo '```'
	awk '/^# op +shape/ { n = 0; shapes = 1; print; next } shapes { if (++n <= 10) print; next } { print }' "$d/$s.prof"
	echo '```'
done
