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

@test "bench: gpu_bench's rates: the GPU's from SW_GPU_*, all three or none and positive, else the H200's, and the line says which" {
	# (device-check.sh sets them from the GPU's name; here the CPU backend
	# stands in for the GPU: the fractions are small, the keys the same)
	bin="$SW_BIN/../bench/gpu_bench"
	[ -x "$bin" ] || { echo "gpu_bench was not built"; false; }
	SW_GPU_HBM_TBS=3.35 run -2 --separate-stderr "$bin" decode 1 3
	[ -z "$output" ]
	[ "$stderr" = "gpu_bench: SW_GPU_F32_TFLOPS, SW_GPU_BF16_TFLOPS and SW_GPU_HBM_TBS: all three or none" ]
	SW_GPU_F32_TFLOPS=67 SW_GPU_BF16_TFLOPS=990 SW_GPU_HBM_TBS=-1 run -2 --separate-stderr "$bin" decode 1 3
	[ "$stderr" = "gpu_bench: SW_GPU_HBM_TBS='-1': a positive number (TFLOP/s or TB/s)" ]
	SW_GPU_F32_TFLOPS=67x SW_GPU_BF16_TFLOPS=990 SW_GPU_HBM_TBS=3.35 run -2 --separate-stderr "$bin" decode 1 3
	[ "$stderr" = "gpu_bench: SW_GPU_F32_TFLOPS='67x': a positive number (TFLOP/s or TB/s)" ]
	SW_DEVICE=cpu SW_GPU_F32_TFLOPS=67 SW_GPU_BF16_TFLOPS=990 SW_GPU_HBM_TBS=3.35 run -0 --separate-stderr \
		"$bin" decode 1 3
	[[ "$output" == "device=cpu params=494032768 nseq=1 new=3 "*" rates=env hbm_tbs=3.35" ]]
	# hbm_frac is the weights' bytes a step over 3.35 TB/s
	gbs=$(sed -n 's/.*weight_gb_per_s=\([0-9.]*\).*/\1/p' <<<"$output")
	frac=$(sed -n 's/.*hbm_frac=\([0-9.]*\).*/\1/p' <<<"$output")
	awk -v g="$gbs" -v f="$frac" 'BEGIN { d = g / 3350 - f; exit !(d < 0.0002 && d > -0.0002) }'
	SW_DEVICE=cpu run -0 --separate-stderr "$bin" decode 1 3
	[[ "$output" == *" rates=h200 hbm_tbs=4.80" ]]
}
