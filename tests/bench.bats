#!/usr/bin/env bats
# bench.bats - the benchmark scripts start as bench/RESULTS.md's commands run
# them: alone, from the top of the tree or from elsewhere, whatever the
# caller's PATH (bench/env.sh).  The figures themselves are `make bench`'s.

load helpers

@test "bench: every bench/bench_*.sh starts from bench/env.sh, right after its set -eu" {
	n=0
	for f in "$TOP"/bench/bench_*.sh; do
		first=$(grep -v '^#' "$f" | grep -v '^$' | head -2 | tr '\n' '|')
		if [ "$first" != 'set -eu|. "$(dirname "$0")/env.sh"|' ] && [ "$first" != 'set -euf|. "$(dirname "$0")/env.sh"|' ]; then
			echo "$f starts: $first"
			return 1
		fi
		n=$((n + 1))
	done
	[ "$n" -ge 27 ]
}

@test "bench: bench/env.sh makes B absolute, puts its bin/ first on PATH, sets SW_BENCH_TMP" {
	mkdir -p tree/bench work
	cp "$TOP/bench/env.sh" tree/bench/
	printf 'set -eu\n. "$(dirname "$0")/env.sh"\necho "$top|$B|${PATH%%%%:*}|$SW_BENCH_TMP"\n' >tree/bench/bench_x.sh
	t=$(cd tree && pwd)
	run -0 --separate-stderr env -u B -u SW_BENCH_TMP TMPDIR=/var/tmp sh tree/bench/bench_x.sh
	[ "$output" = "$t|$t/build|$t/build/bin|/var/tmp" ]
	[ "$stderr" = "" ]
	# a relative B is the caller's directory's, as a path on a command line is
	cd work
	run -0 --separate-stderr env B=b2 SW_BENCH_TMP=/s sh ../tree/bench/bench_x.sh
	[ "$output" = "$t|$PWD/b2|$PWD/b2/bin|/s" ]
	run -0 env -u TMPDIR -u SW_BENCH_TMP B=/abs sh "$t/bench/bench_x.sh"
	[ "$output" = "$t|/abs|/abs/bin|/tmp" ]
	# bench_tmp: a new directory (or with -f a file) of a script's scratch in SW_BENCH_TMP
	printf 'set -eu\n. "$(dirname "$0")/env.sh"\nbench_tmp x\nbench_tmp -f y\n' >"$t/bench/bench_y.sh"
	mkdir s
	run -0 --separate-stderr env SW_BENCH_TMP="$PWD/s" sh "$t/bench/bench_y.sh"
	[[ "${lines[0]}" == "$PWD/s/sw-bench-x."?????? ]]
	[ -d "${lines[0]}" ]
	[[ "${lines[1]}" == "$PWD/s/sw-bench-y."?????? ]]
	[ -f "${lines[1]}" ]
	[ "$stderr" = "" ]
}

@test "bench: bench_cat.sh runs as RESULTS.md gives it, from the top, without the build on PATH" {
	command -v hyperfine >/dev/null || skip "no hyperfine (make deps-test installs it)"
	cd "$TOP"
	run -0 --separate-stderr env PATH=/usr/local/bin:/usr/bin:/bin B="$(dirname "$SW_BIN")" SW_BENCH_TMP="$BATS_TEST_TMPDIR" \
		SW_BENCH_BYTES=256K SW_BENCH_JQ_BYTES=64K RUNS=2 sh bench/bench_cat.sh
	[ "$stderr" = "" ]
	[[ "${lines[0]}" =~ ^Stream:\ [0-9]+\ bytes\ of\ msgpack\ \([0-9]+\ records\) ]]
	[ "${lines[1]}" = "| what | sw-cat: wall median (rate), cpu mean | peer: wall median (rate), cpu mean | peer/ours wall | peer/ours cpu |" ]
	[[ "${lines[3]}" =~ ^\|\ msgpack\ -\>\ msgpack,\ piped ]]
	# its scratch directory is gone
	run -0 find "$BATS_TEST_TMPDIR" -maxdepth 1 -name 'sw-bench-cat.*'
	[ "$output" = "" ]
}
