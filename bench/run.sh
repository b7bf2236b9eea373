#!/bin/sh
# bench/run.sh - run the benchmarks of bench/ one after another (or those
# named: bench/run.sh cat balance).  Each bench/bench_NAME.sh measures one
# program beside its peer in the same run and prints a Markdown section of
# medians and ratios; bench/RESULTS.md keeps the figures with the command
# that produced them.  B is the build directory (make bench sets it; as
# for each script, bench/env.sh).
set -eu
. "$(dirname "$0")/env.sh"
if [ $# -eq 0 ]; then
	set -- $(cd "$top/bench" && ls bench_*.sh 2>/dev/null | sed 's/^bench_//; s/\.sh$//')
fi
for name in "$@"; do
	echo "## $name ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m))"
	sh "$top/bench/bench_$name.sh"
	echo
done
