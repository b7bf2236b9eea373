#!/bin/sh
# bench/bench_faults.sh - the page faults of a GRPO run of sw-run, and what a
# fault costs beside a page mapped at once (the store's MAP_POPULATE):
#
#   fault_bench      a 512 MiB shared-memory object, its pages in memory:
#                    first touch of each page through a fresh mapping (a
#                    fault a page) against a mapping made with MAP_POPULATE
#                    (the mmap call timed with the touch); 5 rounds, medians
#   sw-run           SW_BENCH_ITERS iterations (default 2) of bench_grpo.sh's
#                    run (SmolLM2-135M's shapes written by sw-model init, 8 x 8
#                    x 64, --ref, 2 threads): the page faults taken by sw-run
#                    and its stages together (perf stat's page-faults: the
#                    CPU's exceptions; getrusage would also count the pages
#                    MAP_POPULATE maps), its wall, each iteration's
#                    rollout and train ends; with BEFORE=DIR (a build whose
#                    DIR/bin runs instead) the same run of that build first,
#                    rounds alternating (SW_BENCH_ROUNDS, default 1).
set -eu
. "$(dirname "$0")/env.sh"
iters=${SW_BENCH_ITERS:-2}
rounds=${SW_BENCH_ROUNDS:-1}
command -v perf >/dev/null || { echo "bench_faults: needs perf (linux-perf)" >&2; exit 1; }
d=$(bench_tmp faults)
trap 'rm -rf "$d"' EXIT
unset SW_PROFILE
export OMP_NUM_THREADS=2
. "$top/bench/smol_model.sh"
smol_model "$d/m"
i=0
while [ "$i" -lt $((8 * iters)) ]; do
	printf '{"id":"p%d","prompt":"Question %d: tell a short story about the number %d."}\n' $i $i $((7 * i))
	i=$((i + 1))
done >"$d/p.jsonl"

run() { # run NAME BINDIR: one sw-run, a line of figures
	rm -rf "$d/run"
	t0=$(date +%s.%N)
	env PATH="$2:$PATH" perf stat -e page-faults -x, -o "$d/faults" sw-run -q -m "$d/m" -p "$d/p.jsonl" -o "$d/run" \
		--iters "$iters" -b 8 -n 8 --ref --ckpt-every "$iters" \
		--rollout "sw-rollout -m $d/m -n \"\$SW_GROUP\" --seed \"\$SW_SEED\" --max-new-tokens 64 --threads 2" \
		--verify 'sw-verify -r length,max=120,buffer=60,unit=chars' \
		--train "sw-train --algo grpo --lr 1e-6 --kl-coef 0.04 -j 2 --metrics \"\$SW_TRAIN_METRICS\""
	wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	printf '| %s | %s | %s | %s | %s |\n' "$1" "$(sed -n 's/^\([0-9]*\),.*page-faults.*/\1/p' "$d/faults")" "$wall" \
		"$(jq -r 'select(.eval | not) | .time_s.rollout | . * 100 | round / 100' "$d/run/metrics.jsonl" | paste -sd' ')" \
		"$(jq -r 'select(.eval | not) | .time_s.train | . * 100 | round / 100' "$d/run/metrics.jsonl" | paste -sd' ')"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$B/bench/fault_bench" 512 5
echo
echo "| build | page faults, sw-run and stages | wall s | rollout ends, s (each iteration) | train ends, s (each iteration) |"
echo "|---|---|---|---|---|"
r=0
while [ "$r" -lt "$rounds" ]; do
	r=$((r + 1))
	[ -z "${BEFORE:-}" ] || run "BEFORE ($BEFORE)" "$BEFORE/bin"
	run "this build" "$B/bin"
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
