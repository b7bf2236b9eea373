#!/bin/sh
# bench/bench_model.sh - libsw's safetensors I/O beside safetensors.torch
# (the library transformers calls), on the same files, in one run:
#   load an f32 model.safetensors into float32 memory
#   load a bf16 one into float32 memory (the conversion included)
#   save the float32 weights as f32, and as bf16 (rounding included)
# The model is `sw-model init -s base` (99.5M parameters, 398 MB in f32).
# Both sides end with every tensor float32 in the process's own memory
# (load_file alone may leave f32 tensors on the file's pages; that figure is
# printed below the table).  Both time in process (Python's import and
# start are not counted),
# medians of RUNS (default 5), the page cache warm.  libsw's load also
# checks every header and every value for NaN/Inf; its saves fsync and
# rename (safetensors.torch's do neither).  Ratio = their time / ours, so
# > 1 means libsw is faster.
set -eu
. "$(dirname "$0")/env.sh"
runs=${RUNS:-5}
python3 -c 'import torch, safetensors' 2>/dev/null ||
	{ echo "bench_model: python3 with torch and safetensors is needed" >&2; exit 1; }
make -s -C "$top" B="$B" "$B/lib/libsw.a" "$B/bin/sw-model" >/dev/null
libs=$(make -s -C "$top" --no-print-directory --eval 'sw-print-libs: ; @echo $(LDLIBS_SW)' sw-print-libs)
mkdir -p "$B/bench"
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -fopenmp -I"$top/libsw" \
	-o "$B/bench/model_bench" "$top/bench/model_bench.c" "$B/lib/libsw.a" $libs
d=$(bench_tmp model)
trap 'rm -rf "$d"' EXIT

"$B/bin/sw-model" init -q -s base --seed 1 "$d/f32"
"$B/bin/sw-model" convert -q --dtype bf16 "$d/f32" "$d/bf16"
for dt in f32 bf16; do
	"$B/bench/model_bench" "$d/$dt" "$d/out-sw" "$runs" >"$d/sw-$dt.txt"
	python3 "$top/bench/model_torch.py" "$d/$dt" "$d/out-py" "$runs" >"$d/py-$dt.txt" 2>/dev/null
done
p=$(awk '$1 == "params" { print $2 }' "$d/sw-f32.txt")
echo "Model: sw-model init -s base, $p parameters; threads: ${OMP_NUM_THREADS:-$(nproc)}; medians of $runs runs."
echo
echo "| what | libsw | safetensors.torch | theirs/ours |"
echo "|---|---|---|---|"
row() { # label, dtype file, key, bytes
	a=$(awk -v k="$3" '$1 == k { print $2 }' "$d/sw-$2.txt")
	b=$(awk -v k="$3" '$1 == k { print $2 }' "$d/py-$2.txt")
	awk -v w="$1" -v a="$a" -v b="$b" -v by="$4" 'BEGIN {
		printf "| %s | %.3f s (%.2f GB/s) | %.3f s (%.2f GB/s) | %.2f |\n", w, a, by / a / 1e9, b, by / b / 1e9, b / a }'
}
row "load f32 file -> f32 memory" f32 load $((p * 4))
row "load bf16 file -> f32 memory" bf16 load $((p * 2))
row "save f32 memory -> f32 file" f32 save_f32 $((p * 4))
row "save f32 memory -> bf16 file" f32 save_bf16 $((p * 2))
echo
awk '$1 == "load_lazy" { printf "safetensors.torch.load_file alone, tensors left on the file'"'"'s mmap (no copy; f32): %.3f s.\n", $2 }' "$d/py-f32.txt"
