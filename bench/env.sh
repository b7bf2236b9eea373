# bench/env.sh - the start every bench/bench_*.sh shares, sourced after its
# `set -eu`: top, the tree; B, the build whose programs are measured
# (default the tree's build/; a relative one is taken from the current
# directory), made absolute; its bin/ first on PATH; SW_BENCH_TMP, where the
# scratch files go (default $TMPDIR, else /tmp).  So each command of
# bench/RESULTS.md runs as written from the top of the tree, alone or under
# bench/run.sh, whatever the caller's PATH.
top=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$top/build}
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
SW_BENCH_TMP=${SW_BENCH_TMP:-${TMPDIR:-/tmp}}
PATH=$B/bin:$PATH
export B PATH SW_BENCH_TMP

# bench_tmp NAME: a new directory of NAME's scratch files in SW_BENCH_TMP,
# sw-bench-NAME. and mktemp's random suffix; bench_tmp -f NAME: a new file.
bench_tmp() {
	if [ "$1" = -f ]; then
		mktemp "$SW_BENCH_TMP/sw-bench-$2.XXXXXX"
	else
		mktemp -d "$SW_BENCH_TMP/sw-bench-$1.XXXXXX"
	fi
}
