#!/bin/sh
# bench/bench_rows.sh - decoding's matrix products (libsw/compute/cpu/
# linear_rows.c) of this tree against BEFORE=TREE's (another checkout; by
# default this tree's own, the A/A control) in one process, taking turns
# (bench/rows_ab.c): every product of a 110M-model decode step, weights
# streaming from memory, at 1, 8, 32 and 64 rows (sequences decoding at
# once).  A whole decode step (bench_decode.sh) moves with the VM's memory
# bandwidth by more than a kernel change does from run to run; here the two
# builds alternate step by step, so a slow spell of the machine falls on
# both.  Figures: median step of each (ROUNDS steps a build, default 15),
# GFLOP/s, and before / now.  Threads: SW_THREADS (default 2), OpenMP wait
# policy passive, as sw-run gives its stages.
set -eu
: "${B:=build}" "${SW_BENCH_TMP:=${TMPDIR:-/tmp}}"
top=$(cd "$(dirname "$0")/.." && pwd)
case $B in /*) ;; *) B=$top/$B ;; esac
before=${BEFORE:-$top}
[ -f "$before/libsw/compute/cpu/linear_rows.c" ] || {
	echo "bench_rows: $before/libsw/compute/cpu/linear_rows.c is missing (BEFORE names a checkout)" >&2
	exit 1
}
[ -f "$B/lib/libsw.a" ] || { echo "bench_rows: $B/lib/libsw.a is missing (make builds it)" >&2; exit 1; }
d=$(mktemp -d "$SW_BENCH_TMP/sw-bench-rows.XXXXXX")
trap 'rm -rf "$d"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="${SW_THREADS:-2}"
flags="-std=c11 -O2 -D_POSIX_C_SOURCE=200809L -fopenmp"
# BEFORE's kernels under another name, so that both link into one driver
cp "$before/libsw/compute/cpu/linear_rows.c" "$d/before.c"
cc $flags -I"$before/libsw" -Dsw_linear_rows=sw_linear_rows_before \
	-Dsw_linear_rows_simd=sw_linear_rows_simd_before -c "$d/before.c" -o "$d/before.o"
cc $flags -DROWS_BEFORE -I"$top/libsw" -I"$top/bench" -o "$d/rows_ab" "$top/bench/rows_ab.c" \
	"$d/before.o" "$B/lib/libsw.a" -lm
echo "Threads $OMP_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE; before: $before ($(git -C "$before" log -1 --format=%h 2>/dev/null || echo '?')), now: $top ($(git -C "$top" log -1 --format=%h 2>/dev/null || echo '?')); load before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| rows | now: step, GFLOP/s | before: step, GFLOP/s | before / now |"
echo "|---|---|---|---|"
for m in 1 8 32 64; do
	"$d/rows_ab" "$m" "${ROUNDS:-15}" | awk '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		printf "| %s | %.2f ms, %.1f | %.2f ms, %.1f | **%.3fx** |\n", v["rows"], v["now_ms"],
			v["now_gflops"], v["before_ms"], v["before_gflops"], v["speedup"] }'
done
echo
echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
