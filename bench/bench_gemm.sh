#!/bin/sh
# bench/bench_gemm.sh - the CPU backend's GEMM providers side by side on the
# training step's shapes (Llama 110M, 1024 tokens: each Linear's forward NT,
# its backward NN and TN) and on decoding's 1 to 32 rows, with PyTorch's
# matmul (MKL) as the peer: GFLOP/s medians, which kernels ran, and each
# provider's rate over the best f32 one's on every shape.
#
#   ROUNDS=3 REPS=5 sh bench/bench_gemm.sh
#   SW_BENCH_SHAPES=smol ROUNDS=3 REPS=5 sh bench/bench_gemm.sh
#
# SW_BENCH_SHAPES=smol: SmolLM2-135M's step at 256 tokens instead (the
# micro batches of bench_grpo.sh's train stage; gemm_bench.c).
# Three processes a round: oneDNN (dnnl_sgemm, its matmul primitive for the
# products A B^T), oneDNN's dnnl_sgemm alone, OpenBLAS (kernels fixed up) and the
# backend's bf16 products (sw-train --matmul bf16: operands rounded to bf16,
# conversion included, f32 sums; a CPU without bf16 dot products fails the
# run) and oneDNN's bf16 matmul with the operands converted and B in its
# kernels' layout before the clock (onednn-bf16-kept: what keeping bf16
# weights between products would approach) taking turns call by call in
# one, so the load of a shared machine falls on all alike; OpenBLAS as the
# distribution's library comes (its own kernel choice and threads) in a
# second, since the fix-up changes a process's OpenBLAS for good; PyTorch in
# a third (f32, and matmul on bf16 tensors).  Each figure is the median over ROUNDS rounds of a process's
# median of REPS calls.  The provider the backend uses is $SW_GEMM's, else
# oneDNN.
#
# SW_BENCH_SHAPES=rows: SmolLM2-135M's forward and dx products at the row
# counts of a GRPO step's micro batches (375-440, 4558, 342: not multiples of
# 64).  BEFORE=TREE (a checkout built with make whose gemm_bench knows
# SW_BENCH_LABEL): that build's oneDNN providers (onednn, onednn-bf16) beside
# this build's, the two processes taking turns a round, and now / before on
# every shape instead of the peers:
#
#   BEFORE=/tmp/old SW_BENCH_SHAPES=rows ROUNDS=5 REPS=5 sh bench/bench_gemm.sh
set -eu
. "$(dirname "$0")/env.sh"
bin=$B/bench/gemm_bench
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-3}
SW_THREADS=${SW_THREADS:-$(nproc)}
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
used=${SW_GEMM:-onednn}
export SW_THREADS OMP_WAIT_POLICY
[ -x "$bin" ] || { echo "bench_gemm: $bin is missing (make bench builds it)" >&2; exit 1; }
out=$(bench_tmp -f gemm)
trap 'rm -f "$out"' EXIT

echo "threads $SW_THREADS, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# ending: the load average at the end and the kernels that ran.
ending() {
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	echo "Kernels that ran:"
	sed -n 's/^kernels provider=\([^ ]*\) threads=[0-9]* what=/- \1: /p' "$out" | sort -u
	echo
}
# Reads gemm_bench's lines: shapes in order[1..n] (what[]), providers in
# prov[1..np], med(shape, provider) the median GFLOP/s over the rounds.
read_awk='
/^provider=/ {
	for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	w = $0; sub(/.* what=/, "", w)
	key = f["shape"] " " f["op"]
	if (!(key in seen)) { seen[key] = 1; order[++n] = key; what[key] = w }
	if (!(f["provider"] in pseen)) { pseen[f["provider"]] = 1; prov[++np] = f["provider"] }
	c = ++cnt[key, f["provider"]]
	all[key, f["provider"], c] = f["gflops"] + 0
}
# The median of a (key, provider) over the rounds.
function med(k, p,    m, i, j, v, x) {
	m = cnt[k, p]
	for (i = 1; i <= m; i++) v[i] = all[k, p, i]
	for (i = 2; i <= m; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
	return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
'
if [ -n "${BEFORE:-}" ]; then
	old=$BEFORE/build/bench/gemm_bench
	[ -x "$old" ] || { echo "bench_gemm: $old is missing (make bench in that checkout)" >&2; exit 1; }
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		# each build first in every other round
		if [ $((r % 2)) = 0 ]; then first=$old second=$bin; else first=$bin second=$old; fi
		for b in "$first" "$second"; do
			label=now
			[ "$b" = "$bin" ] || label=before
			SW_BENCH_LABEL=$label "$b" "$REPS" onednn onednn-bf16 >>"$out"
		done
		r=$((r + 1))
	done
	ending
	awk "$read_awk"'
END {
	np = split("onednn onednn-bf16", prov, " ")
	printf "| shape MxNxK | op | what |"
	for (p = 1; p <= np; p++) printf " %s before | now | now / before |", prov[p]
	printf "\n|---|---|---|"
	for (p = 1; p <= np; p++) printf "---|---|---|"
	print ""
	for (i = 1; i <= n; i++) {
		k = order[i]; split(k, s, " "); split(s[1], d, "x")
		flop = 2 * d[1] * d[2] * d[3]; tf += flop
		printf "| %s | %s | %s |", s[1], s[2], what[k]
		for (p = 1; p <= np; p++) {
			b = med(k, prov[p] "@before"); a = med(k, prov[p] "@now")
			tb[p] += flop / (b * 1e9); ta[p] += flop / (a * 1e9)
			printf " %.2f | %.2f | **%.2f** |", b, a, a / b
		}
		print ""
	}
	printf "| the %d shapes, once each | | total FLOPs / total time |", n
	for (p = 1; p <= np; p++) printf " %.2f | %.2f | **%.2f** |", tf / tb[p] / 1e9, tf / ta[p] / 1e9, tb[p] / ta[p]
	print ""
}' "$out"
	exit 0
fi
have_torch=1
python3 -c 'import torch' 2>/dev/null || have_torch=0
r=0
while [ $r -lt "$ROUNDS" ]; do
	"$bin" "$REPS" onednn onednn-sgemm openblas onednn-bf16 onednn-bf16-kept >>"$out"
	"$bin" "$REPS" openblas-asis >>"$out"
	[ $have_torch = 0 ] || python3 "$top/bench/gemm_torch.py" "$REPS" >>"$out"
	r=$((r + 1))
done
ending

# The table: a row a shape, a column a provider (GFLOP/s), then the used
# provider over the best f32 one (the bf16 columns are another precision: on
# a CPU with AMX they run several times f32's rate); the step's shapes summed
# as a step does them.
awk -v used="$used" "$read_awk"'
END {
	for (i = 1; i <= n; i++) for (p = 1; p <= np; p++) g[order[i], prov[p]] = med(order[i], prov[p])
	printf "| shape MxNxK | op | what |"
	for (p = 1; p <= np; p++) printf " %s |", prov[p]
	printf " %s / best f32 |\n|---|---|---|", used
	for (p = 1; p <= np; p++) printf "---|"
	print "---|"
	for (i = 1; i <= n; i++) {
		k = order[i]; split(k, s, " "); split(s[1], d, "x")
		flop = 2 * d[1] * d[2] * d[3]
		best = 0
		printf "| %s | %s | %s |", s[1], s[2], what[k]
		for (p = 1; p <= np; p++) {
			v = g[k, prov[p]]; printf " %.2f |", v
			if (v > best && prov[p] !~ /bf16/) best = v
			if (what[k] != "decode") t[prov[p]] += flop / (v * 1e9)
			if (what[k] != "decode") tf += (p == 1) * flop
		}
		nstep += what[k] != "decode"
		printf " **%.2f** |\n", g[k, used] / best
	}
	bestall = 0
	printf "| the step'"'"'s %d shapes, once each | | total FLOPs / total time |", nstep
	for (p = 1; p <= np; p++) { r = tf / t[prov[p]] / 1e9; printf " %.2f |", r; if (r > bestall && prov[p] !~ /bf16/) bestall = r }
	printf " **%.2f** |\n", tf / t[used] / 1e9 / bestall
}' "$out"
