#!/bin/bash
# tests/gpu/device-check.sh - the one-shot check on a machine with a GPU (an
# H200 lent for minutes): it builds where it can, runs the GPU tests, and
# times (a) a training step of a Qwen2.5-0.5B-shaped model (f32, then with
# the products' operands in bf16, SW_MATMUL=bf16; MFU against the GPU's
# datasheet f32 and dense bf16 rates), (b) decoding of 1 and of 64
# sequences against its HBM bandwidth (the rates by the GPU's name, below:
# H200 67 and 990 TFLOP/s, 4.8 TB/s; H100 SXM 3.35 TB/s; H100 PCIe and
# NVL theirs), (c) the cuda: store hand-off at three sizes (a second process
# mapping the trainer's weights through CUDA IPC, against a device copy of
# the same bytes), (d) the same training step in PyTorch on the same GPU (f32
# and bf16).  It also runs the two-process cuda: store test, the NCCL test
# (a skip on one GPU) and sw-run --device cuda end to end
# (tests/gpu/run-e2e.sh); last, where time allows, Nsight Compute's
# duration of every kernel of decoding and training (bench/gpu_profile.sh,
# into $OUT/profile.txt).
#
#   tests/gpu/device-check.sh          (from the top of the tree; $OUT: where results go)
#
# Every part has its own timeout and the whole a budget (SW_CHECK_BUDGET
# seconds, default 450): a part that fails or runs out of time is reported
# and the next one runs; parts that no longer fit are skipped, and said so.
# Results: $OUT/summary.txt (what passed and failed, the figures), the GPU
# tests' TAP ($OUT/gpu-tap.txt: per op the max abs/rel error against the CPU
# backend, the tolerance, PASS/FAIL) and every part's output ($OUT/logs.txt).
#
# Which binaries: a fresh build (make -j16 into build-dev) where the whole
# toolchain is there (nvcc, a C compiler, the -dev packages' headers), else
# the ones tests/gpu/pack.sh packed on a machine without a GPU and carried
# here (build-carry/, with the shared libraries they need in rt.tar.xz,
# unpacked into a temporary folder for the run).
# The summary says which; SW_CHECK_NO_BUILD=1 skips the rebuild, and with
# carried binaries SW_CHECK_NVCC=1 also compiles libsw-cuda.so there.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
out=${OUT:-$top/build-devcheck}
mkdir -p "$out"
sum=$out/summary.txt
logs=$out/logs.txt
: >"$sum"
: >"$logs"
budget=${SW_CHECK_BUDGET:-450}
start=$(date +%s)
carry=${SW_CARRY:-build-carry}

say() { echo "$*" | tee -a "$sum"; }
left() { echo $((budget - ($(date +%s) - start))); }

# part NAME SECONDS CMD...: run CMD with a timeout (capped by what is left
# of the budget), its output into logs.txt and NAME's own file if asked
# (PART_OUT), one line in the summary.  Returns CMD's status.
part() {
	local name=$1 secs=$2 rem t0 rc st n0
	shift 2
	rem=$(($(left) - 10))
	if [ "$rem" -lt 15 ]; then
		say "[SKIP] $name: no time left in the ${budget}s budget"
		return 125
	fi
	[ "$secs" -gt "$rem" ] && secs=$rem
	t0=$(date +%s)
	n0=$(wc -l <"$logs")
	echo "===== $name (timeout ${secs}s): $*" >>"$logs"
	if [ -n "${PART_OUT:-}" ]; then
		timeout -k 5 "$secs" "$@" >"$PART_OUT" 2>>"$logs"
		rc=$?
		cat "$PART_OUT" >>"$logs"
	else
		timeout -k 5 "$secs" "$@" >>"$logs" 2>&1
		rc=$?
	fi
	case $rc in
	0) st=PASS ;;
	124 | 137) st="TIMEOUT after ${secs}s" ;;
	*) st="FAIL (exit $rc)" ;;
	esac
	say "[$st] $name ($(($(date +%s) - t0))s)"
	# A failure's last words (its stderr is in logs.txt), so the summary says why.
	[ "$rc" -eq 0 ] || sed -n "$((n0 + 2)),\$p" "$logs" | tail -n 3 | sed 's/^/    /' | tee -a "$sum"
	return $rc
}

say "# SafeWork device check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), tree $(git describe --always --dirty 2>/dev/null || echo '?')"
say "# budget ${budget}s"

# ---- the machine ----
{
	echo "===== environment"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
	command -v nvcc && nvcc --version | tail -2
	python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1
	uname -a
	nproc
} >>"$logs" 2>&1
say "# gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"

# ---- the datasheet rates the fractions are against (gpu_bench, gpu_torch.py), by the GPU's name ----
# f32 TFLOP/s, dense bf16 TFLOP/s, HBM TB/s; a GPU not named here: the H200's, and the summary says so
gname=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
case $gname in
*H200*) rates="67 990 4.8" ;;
*H100*PCIe*) rates="51 756 2.0" ;;
*H100*NVL*) rates="60 835 3.9" ;;
*H100*) rates="67 990 3.35" ;;
*) rates= ;;
esac
if [ -n "$rates" ]; then
	read -r f32 bf16 hbm <<<"$rates"
	export SW_GPU_F32_TFLOPS=$f32 SW_GPU_BF16_TFLOPS=$bf16 SW_GPU_HBM_TBS=$hbm
	say "# rates ($gname's datasheet): f32 $f32 TFLOP/s, bf16 $bf16 TFLOP/s dense, HBM $hbm TB/s"
else
	unset SW_GPU_F32_TFLOPS SW_GPU_BF16_TFLOPS SW_GPU_HBM_TBS
	say "# rates: none known here for '$gname': MFU and HBM fractions are against the H200's (67, 990, 4.8)"
fi
say "# nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"

# ---- which binaries ----
have_toolchain() {
	command -v nvcc >/dev/null && command -v cc >/dev/null && command -v make >/dev/null || return 1
	local h
	for h in msgpack.h zstd.h cblas.h oneapi/dnnl/dnnl.h pcre2.h sodium.h seccomp.h; do
		[ -e "/usr/include/$h" ] || [ -e "/usr/include/x86_64-linux-gnu/$h" ] || return 1
	done
}
bins=""
if [ -n "${SW_CHECK_NO_BUILD:-}" ]; then
	say "# SW_CHECK_NO_BUILD: no rebuild"
elif have_toolchain; then
	if part "build (make -j16, B=build-dev)" 150 make -j16 -o deps-build -o deps-test B=build-dev all \
		build-dev/tests/test_gpu build-dev/tests/test_engine build-dev/tests/test_rollout \
		build-dev/tests/test_trainer build-dev/tests/test_store_ipc build-dev/tests/test_nccl \
		build-dev/bench/gpu_bench; then
		bins=build-dev
	fi
else
	say "# no full toolchain here (nvcc, cc and the -dev headers): no rebuild"
fi
if [ -z "$bins" ]; then
	if [ -d "$carry" ]; then
		bins=$carry
		# The libraries unpacked outside the tree: left in $carry they would
		# travel with the next call and pass its 64 MiB (they did once).
		rt=$(mktemp -d "${TMPDIR:-/tmp}/sw-carry-rt.XXXXXX")
		trap 'rm -rf "$rt"' EXIT
		if [ -f "$carry/rt.tar.xz" ]; then
			python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
				"$carry/rt.tar.xz" "$rt" >>"$logs" 2>&1 || say "# could not unpack $carry/rt.tar.xz"
		fi
		say "# using the carried binaries in $carry (built at $(cat "$carry/COMMIT" 2>/dev/null), $(cat "$carry/NVCC" 2>/dev/null))"
		# Their libraries where this machine lacks them.
		if ldd "$carry/tests/test_gpu" | grep -q 'not found'; then
			export LD_LIBRARY_PATH="$rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
			say "# with the carried libraries (unpacked from $carry/rt.tar.xz) on LD_LIBRARY_PATH"
		fi
		if [ -n "${SW_CHECK_NVCC:-}" ] && command -v nvcc >/dev/null; then
			part "libsw-cuda.so compiles here with nvcc (not used)" 60 \
				make -f libsw/compute/cuda/cuda.mk B=build-nvcc NVCC="$(command -v nvcc)"
		fi
	else
		say "[FAIL] no binaries: no toolchain to build with, and no $carry (run tests/gpu/pack.sh where there is nvcc and carry it)"
		exit 1
	fi
fi
say "# binaries: $bins"
# cuBLAS, where the loader does not find it by itself (pip's nvidia packages, another CUDA).
if ldd "$bins/lib/libsw-cuda.so" 2>/dev/null | grep -q 'libcublas.*not found'; then
	cb=$(timeout 30 find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -n 1)
	if [ -n "$cb" ]; then
		export LD_LIBRARY_PATH="$(dirname "$cb")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		say "# cuBLAS from $(dirname "$cb")"
	else
		say "# libcublas.so.13 not found on this machine: the CUDA backend will not load"
	fi
fi
ldd "$bins/lib/libsw-cuda.so" >>"$logs" 2>&1
ldd "$bins/tests/test_gpu" >>"$logs" 2>&1

# ---- the GPU tests: every op against the CPU backend, whole models ----
PART_OUT=$out/gpu-tap.txt part "GPU tests (tests/gpu/test_gpu.c)" 120 \
	env SW_GPU_REQUIRED=1 "$bins/tests/test_gpu"
unset PART_OUT
tap=$out/gpu-tap.txt
if [ -s "$tap" ]; then
	say "# $(grep -c '^ok' "$tap") ok, $(grep -c '^not ok' "$tap") not ok of $(grep -E '^1\.\.' "$tap" | tail -n 1)"
	say "# per op (tolerance |gpu - cpu| <= atol + rtol |cpu|):"
	grep '^# tol ' "$tap" | sed 's/^# tol /  /' | tee -a "$sum"
	grep -E '^not ok' "$tap" | sed 's/^/  /' | tee -a "$sum"
	grep -E '^#   ' "$tap" | head -n 20 | sed 's/^/  /' | tee -a "$sum"
fi

# ---- cuda: stores across two processes; NCCL across two GPUs (a skip on one) ----
# tap NAME SECONDS PROGRAM...: a TAP test as a part, its counts and failures in the summary.
tap() {
	local name=$1 secs=$2 f=$out/.tap
	shift 2
	PART_OUT=$f part "$name" "$secs" env SW_GPU_REQUIRED=1 "$@"
	if [ -s "$f" ]; then
		say "  $(grep -c '^ok' "$f") ok ($(grep -c '# skip' "$f") skipped), $(grep -c '^not ok' "$f") not ok"
		grep -E '^not ok|# skip' "$f" | head -n 8 | sed 's/^/  /' | tee -a "$sum"
	fi
	rm -f "$f"
}
tap "cuda: store hand-off between two processes (tests/gpu/test_store_ipc.c)" 60 "$bins/tests/test_store_ipc"
tap "NCCL sums across 2 GPUs (tests/gpu/test_nccl.c)" 60 "$bins/tests/test_nccl"

# ---- the model code's own unit tests with every model on the GPU ----
for t in test_engine test_rollout test_trainer; do
	f=$out/.unit
	PART_OUT=$f part "$t with SW_TEST_DEVICE=cuda" 45 env SW_TEST_DEVICE=cuda "$bins/tests/$t"
	[ -s "$f" ] && say "  $(grep -c '^ok' "$f") ok, $(grep -c '^not ok' "$f") not ok"
	grep '^not ok' "$f" 2>/dev/null | head -n 10 | sed 's/^/  /' | tee -a "$sum"
	rm -f "$f"
done

# ---- sw-run --device cuda end to end: cuda: stores between the stages ----
f=$out/.e2e
PART_OUT=$f part "sw-run --device cuda end to end, against --device cpu (tests/gpu/run-e2e.sh)" 90 \
	tests/gpu/run-e2e.sh "$bins/bin"
[ -s "$f" ] && tail -n 12 "$f" | sed 's/^/  /' | tee -a "$sum"
rm -f "$f"

# ---- timings ----
bench() { # NAME SECONDS ARGS...: gpu_bench's KEY=VALUE line into the summary
	local name=$1 secs=$2 f=$out/.bench
	shift 2
	PART_OUT=$f part "$name" "$secs" "$bins/bench/gpu_bench" "$@"
	[ -s "$f" ] && say "  $(tail -n 1 "$f")"
	rm -f "$f"
}
bench "(a) training step, Qwen2.5-0.5B shape, f32, 8 x 512 tokens" 100 train 3 8 512
SW_MATMUL=bf16 bench "(a) training step, the same, products' operands in bf16 (SW_MATMUL=bf16)" 80 train 3 8 512
bench "(b) decoding, 1 sequence, 64 tokens" 50 decode 1 64
bench "(b) decoding, 1 sequence, 256 tokens" 40 decode 1 256
bench "(b) decoding, 64 sequences, 32 tokens" 60 decode 64 32
f=$out/.ipc
PART_OUT=$f part "(c) cuda: store hand-off, 64 MB, 1 GB, 4 GB (a reader process maps the arena)" 60 \
	env SW_IPC_MB="64 1024 4096" "$bins/tests/test_store_ipc" bench
[ -s "$f" ] && sed 's/^/  /' "$f" | tee -a "$sum"
rm -f "$f"
for dt in bf16 f32; do
	f=$out/.torch
	PART_OUT=$f part "(d) PyTorch training step, same model, $dt" 75 \
		env PYTHONUNBUFFERED=1 python3 bench/gpu_torch.py 3 8 512 --dtype "$dt"
	[ -s "$f" ] && say "  $(tail -n 1 "$f")"
	rm -f "$f"
done

# ---- out-of-bounds accesses and races, where the sanitizer works (not on gVisor) ----
if command -v compute-sanitizer >/dev/null; then
	part "compute-sanitizer memcheck of the GPU tests" 90 env SW_GPU_REQUIRED=1 compute-sanitizer \
		--tool memcheck --print-limit 20 --error-exitcode 9 "$bins/tests/test_gpu"
	grep -E '^========= (Invalid|ERROR SUMMARY)' "$logs" | head -n 5 | sed 's/^/  /' | tee -a "$sum"
fi

# ---- a program asked for the GPU ----
part "sw-train --device cuda starts and reaches its input check" 20 \
	sh -c "'$bins/bin/sw-train' --device cuda -m /nonexistent </dev/null 2>&1 | grep -v 'no NVIDIA driver\|cannot load\|built without'"

# ---- where the time goes: every kernel's duration (Nsight Compute), last: it is the slowest part ----
if command -v ncu >/dev/null; then
	PART_OUT=$out/profile.txt part "kernel profile of decoding and training (bench/gpu_profile.sh)" 100 \
		bench/gpu_profile.sh "$bins/bench"
	unset PART_OUT
fi

say "# done in $(($(date +%s) - start))s"
