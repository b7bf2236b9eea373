#!/bin/sh
# bench/bench_store.sh - the weight hand-off from trainer to generator
# through a shared store (sw/store.h), beside copying the weights through a
# file and through a pipe, at the tiny (~1M), small (~15M) and base (~110M
# parameter) sizes, all in one run.  The driver is bench/store_handoff.c
# (built as $B/bench/store_handoff); each figure is the median over its
# repetitions, from the trainer's step end to the generator having read
# weights of the new version (and, for the store, to it holding the new
# version whole, before it reads any).  Ratios are copy time / store time.
# Environment: SW_BENCH_TMP (where the file copy goes), SW_BENCH_REPS (the
# store's repetitions, default 51; the copies get 9, or 5 at base size).
set -eu
. "$(dirname "$0")/env.sh"
drv=$B/bench/store_handoff
[ -x "$drv" ] || { echo "bench_store: $drv is missing (make B=$B $drv)" >&2; exit 1; }
reps=${SW_BENCH_REPS:-51}

echo "Hand-off: the trainer publishes (store) or writes the weights (file: write + read, no fsync; pipe: 1 MiB"
echo "buffer); the generator process then reads 64 floats from each of 64 tensors through its model view."
echo "Medians of $reps hand-offs through the store, of 9 copies (5 at base size) through file and pipe."
echo
echo "| size | parameters (MB) | store: seen | store: seen and used | file copy | pipe copy | file / store | pipe / store |"
echo "|---|---|---|---|---|---|---|---|"
for size in tiny small base; do
	n=9
	[ "$size" = base ] && n=5
	s=$("$drv" "$size" shm "$reps")
	f=$("$drv" "$size" file "$n" "$SW_BENCH_TMP")
	p=$("$drv" "$size" pipe "$n")
	echo "$s $f $p" | awk '{
		# SIZE MODE NPARAMS MEDIAN P10 P90 SEEN, three times
		printf "| %s | %.1fM (%.0f MB) | %.1f us | %.1f us | %.1f ms | %.1f ms | %.0fx | %.0fx |\n",
			$1, $3 / 1e6, $3 * 4 / 1e6, $7, $4, $11 / 1e3, $18 / 1e3, $11 / $4, $18 / $4 }'
done
