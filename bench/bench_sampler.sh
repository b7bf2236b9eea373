#!/bin/sh
# bench/bench_sampler.sh - sw-rollout's token sampler beside transformers'
# sampling step (its logits warpers, softmax, torch.multinomial; CPU, a
# batch of one row), on the same logits, in one run; with BEFORE=TREE the
# same driver built against that tree's build/lib/libsw.a too.
#
# Logits: vocabularies of 49152 (SmolLM2) and 151936 (Qwen2.5); "zipf":
# p proportional to rank^-1.1 (a trained model's peaked distribution),
# "flat": normal(0, 1) (a random model's).  Settings: plain sampling
# (T 1), nucleus (T 0.7, top-p 0.9), top-k 50, greedy (T 0: transformers'
# argmax).  Figures: the median time a
# token (REPS draws, default 200) and the ratio torch / libsw (> 1: libsw
# faster).  Threads: SW_BENCH_THREADS (default 2) for both.
set -eu
. "$(dirname "$0")/env.sh"
reps=${REPS:-200}
TH=${SW_BENCH_THREADS:-2}
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "bench_sampler: python3 with torch and transformers is needed" >&2; exit 1; }
make -s -C "$top" B="$B" "$B/lib/libsw.a" >/dev/null
libs=$(make -s -C "$top" --no-print-directory --eval 'sw-print-libs: ; @echo $(LDLIBS_SW)' sw-print-libs)
d=$(bench_tmp sampler)
trap 'rm -rf "$d"' EXIT
build() { # NAME TREE LIBSW_A: the driver against that tree's headers and library
	${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -fopenmp -I"$2/libsw" \
		-o "$d/$1" "$top/bench/sampler_bench.c" "$3" $libs
}
build now "$top" "$B/lib/libsw.a"
sides="now"
if [ -n "${BEFORE:-}" ]; then
	build before "$BEFORE" "$BEFORE/build/lib/libsw.a"
	sides="before now"
fi
python3 - "$d" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(20261204)
for V in (49152, 151936):
    zipf = -1.1 * np.log(rng.permutation(V) + 1.0)
    zipf.astype("<f4").tofile(f"{sys.argv[1]}/zipf{V}")
    rng.standard_normal(V).astype("<f4").tofile(f"{sys.argv[1]}/flat{V}")
PY
export SW_THREADS=$TH OMP_NUM_THREADS=$TH
printf '%-6s %-7s %-22s' dist V setting
for s in $sides; do printf ' %12s' "libsw $s"; done
printf ' %12s %s\n' torch "torch / libsw now"
for V in 49152 151936; do
	for dist in zipf flat; do
		for set in "1 0 1 plain" "0.7 0 0.9 top-p_0.9_T_0.7" "1 50 1 top-k_50" "0 0 1 greedy"; do
			# shellcheck disable=SC2086
			set -- $set
			printf '%-6s %-7s %-22s' "$dist" "$V" "$4"
			for s in $sides; do
				ms=$("$d/$s" "$d/$dist$V" "$V" "$1" "$2" "$3" "$reps" | sed 's/.*ms_per_pick=\([^ ]*\).*/\1/')
				printf ' %9s ms' "$ms"
			done
			tm=$(python3 "$top/bench/sampler_torch.py" "$d/$dist$V" "$V" "$1" "$2" "$3" "$reps" |
				sed 's/.*ms_per_pick=\([^ ]*\).*/\1/')
			printf ' %9s ms %s\n' "$tm" "$(awk -v a="$tm" -v b="$ms" 'BEGIN { printf "%.2f", a / b }')"
		done
	done
done
