#!/bin/sh
# bench/bench_start.sh - the CPU a stage spends before its work, while it
# waits on its input: the programs as they are (OpenBLAS loaded only when
# SW_GEMM=openblas chooses it) beside the same programs with OpenBLAS loaded
# at start (LD_PRELOAD), as they were when libsw linked it: the pthreads
# build's thread pool starts with the library and spins with sched_yield for
# about 0.1 s before it sleeps, on the cores the program's threads want.
#
#   ROUNDS=5 B=build sh bench/bench_start.sh
#
# Each program reads 256 samples (sw-datagen) that arrive after 1 s, as a
# stage of sw-run gets its input when the stage before it writes; the
# figure is the pipeline's CPU seconds, user + system (bash's `time`; the
# sleep's and cat's are ~0), the median of ROUNDS, the two ways taking
# turns.  Needs bash and the programs in $B/bin (make bench builds them).
set -eu
. "$(dirname "$0")/env.sh"
rounds=${ROUNDS:-5}
ob=$(/sbin/ldconfig -p | awk '/libopenblas\.so\.0 / { print $NF; exit }')
[ -n "$ob" ] || { echo "bench_start: no libopenblas.so.0 to preload" >&2; exit 1; }
tmp=$(bench_tmp start)
trap 'rm -rf "$tmp"' EXIT
sw-datagen -n 256 -s 7 >"$tmp/in.msgpack"

# cpu PRELOAD PROGRAM ARGS...: CPU seconds of `sleep 1; cat in | PROGRAM ARGS`
cpu() {
	pre=$1
	shift
	PRE=$pre IN=$tmp/in.msgpack bash -c 'TIMEFORMAT="%U %S"
		time ( (sleep 1; cat "$IN") | env ${PRE:+LD_PRELOAD=$PRE} "$@" >/dev/null )' sh "$@" 2>&1 |
		awk 'END { printf "%.3f\n", $1 + $2 }'
}
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "| program (input after 1 s) | OpenBLAS loaded at start: CPU s | as now: CPU s | saved, CPU s |"
echo "|---|---|---|---|"
for p in "sw-cat" "sw-sort" "sw-verify -r length,max=120,buffer=60,unit=chars" "sw-balance -n 1"; do
	: >"$tmp/pre" && : >"$tmp/now"
	r=0
	while [ "$r" -lt "$rounds" ]; do
		r=$((r + 1))
		# shellcheck disable=SC2086
		cpu "$ob" $p >>"$tmp/pre"
		# shellcheck disable=SC2086
		cpu "" $p >>"$tmp/now"
	done
	a=$(med <"$tmp/pre") b=$(med <"$tmp/now")
	echo "| \`$p\` | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a - b }') |"
done
echo
echo "Medians of $rounds rounds; load average before $load0, after $(cut -d' ' -f1-3 /proc/loadavg); preloaded: $ob."
