#!/bin/sh
# tests/gpu/pack.sh - what tests/gpu/device-check.sh needs from a build made
# on a machine without a GPU, in one folder to carry to a machine with one
# (the GPU machine may lack Debian's packages and cannot fetch them): the
# GPU tests and the bench driver, the programs of a run, libsw-cuda.so, and the
# shared libraries they need beyond the C and C++ runtimes (oneDNN,
# OpenBLAS, ...), compressed into rt.tar.xz.  cuBLAS is not packed (it is
# hundreds of MB): the check finds the GPU machine's own.
#
#   tests/gpu/pack.sh [DIR]      (default build-carry; B the build directory)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
B=${B:-build}
dst=${1:-build-carry}
bins="$B/tests/test_gpu $B/tests/test_engine $B/tests/test_rollout $B/tests/test_trainer $B/tests/test_store_ipc
$B/tests/test_nccl $B/bench/gpu_bench"
# sw-run's default stages and what run-e2e.sh makes its model with
progs="sw-train sw-rollout sw-run sw-pool sw-sort sw-verify sw-balance sw-model sw-cat"
make -s B="$B" all $bins
[ -f "$B/lib/libsw-cuda.so" ] || { echo "pack.sh: no $B/lib/libsw-cuda.so (built without nvcc?)" >&2; exit 1; }
rm -rf "$dst"
mkdir -p "$dst/bin" "$dst/lib" "$dst/tests" "$dst/bench" "$dst/rt"
for f in $bins; do
	d=$dst/$(basename "$(dirname "$f")")
	cp "$f" "$d/" && strip --strip-debug "$d/$(basename "$f")"
done
for p in $progs; do
	cp "$B/bin/$p" "$dst/bin/" && strip --strip-debug "$dst/bin/$p"
done
cp "$B/lib/libsw-cuda.so" "$dst/lib/"
# The libraries beyond glibc's and the C++ runtime's, as the loader resolves them here.
for f in $bins; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
	grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -L "$lib" "$dst/rt/"; done
tar -C "$dst/rt" -cJf "$dst/rt.tar.xz" .
rm -rf "$dst/rt"
git describe --always --dirty >"$dst/COMMIT" 2>/dev/null || true
nvcc --version 2>/dev/null | tail -1 >"$dst/NVCC" || true
du -sh "$dst"
