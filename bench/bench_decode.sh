#!/bin/sh
# bench/bench_decode.sh - greedy decoding against the memory-bandwidth bound
# measured in the same process on the weights' own memory, before the steps
# and after, the higher taken (bench/decode_bench.c), and batched decoding
# against one sequence, with BEFORE=TREE the same driver built against that
# tree's build/lib/libsw.a (a checkout built with make) in the same run.
#
# Models (random normal(0, 0.02), f32, tied, vocab 32000): the shapes of
# llama2.c's stories15M (hidden 288, 6 layers, 6 heads, intermediate 768)
# and stories110M (hidden 768, 12 layers, 12 heads, intermediate 2048).
# Workloads: one sequence x 256 new tokens at both sizes; 32 sequences x 128
# at 110M; with SW_BENCH_LONG=1 also 32 x 512 at 110M (the paged attention's
# keys grow to 528, so it is a larger part of the step).  Then the paged
# attention op alone (decode_bench attn: one layer of the 110M model's heads,
# 32 queries against 128, 512 and 2048 keys each), and the batch-invariant
# product alone (decode_bench rows: 32 rows by the 110M model's shapes and
# Qwen2.5-0.5B's down projection, 896 x 4864; W in cache and W read from
# memory).  Each workload runs SW_BENCH_ROUNDS rounds (default 3; 5 for
# the attention op), the builds taking turns within a round, and each
# figure is the median of the rounds'
# (each run's own is a median over its steps): the whole step moves with the
# machine's memory bandwidth and its neighbours from minute to minute (a
# shared VM), more than by most changes, so both builds must see the same
# minutes.  Figures: the median decode step (wall; CPU of every thread beside
# it), tokens/s, and for one sequence the bound (weights / bandwidth: each
# weight read once a token) as a share of the step and the step's time
# beyond it (the fixed cost of a token).  Threads: SW_BENCH_THREADS (default
# 2).  SW_BENCH_WAIT: passive (the default: OMP_WAIT_POLICY=PASSIVE, an idle
# thread sleeps at once: the most conservative, as bench_engine.sh gives
# both sides; on a shared machine spinning threads take the cores the
# working ones need), spin (GOMP_SPINCOUNT=2000: a short spin, then sleep,
# what sw-run gives its stages), default (libgomp's own: a long spin before
# it sleeps, what sw-rollout run alone gets) or active.  SW_BENCH_ROW_PF:
# l1 or l2, the cache level the one-row product asks for W ahead into
# (decode_bench's; unset: the CPU's default), or both: this build on two
# sides taking turns, l1 and l2, in place of BEFORE.  The build column
# names the level each side's runs used.
set -eu
. "$(dirname "$0")/env.sh"
TH=${SW_BENCH_THREADS:-2}
d=$(bench_tmp decode)
trap 'rm -rf "$d"' EXIT
export SW_THREADS="$TH"
unset GOMP_SPINCOUNT
case ${SW_BENCH_WAIT:=passive} in
passive) export OMP_WAIT_POLICY=PASSIVE ;;
spin) unset OMP_WAIT_POLICY; export GOMP_SPINCOUNT=2000 ;;
active) export OMP_WAIT_POLICY=ACTIVE ;;
default) unset OMP_WAIT_POLICY ;;
*) echo "bench_decode: SW_BENCH_WAIT must be passive, spin, default or active" >&2; exit 1 ;;
esac
drivers="now:$B/bench/decode_bench"
if [ -n "${BEFORE:-}" ]; then
	# the libraries the Makefile links (MPI's where mpicc is there), and OpenBLAS, which a build
	# before 2026-12-05 linked (now loaded when chosen)
	mpi=$(mpicc --showme:link 2>/dev/null || :)
	cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -fopenmp -I"$BEFORE/libsw" -o "$d/before" \
		"$top/bench/decode_bench.c" "$BEFORE/build/lib/libsw.a" $mpi -lmsgpackc -lzstd -lpng -lz \
		-ljpeg -ldnnl -lopenblas -lpcre2-8 -lutf8proc -lsodium -lseccomp -ldl -lpthread -lm
	drivers="$drivers before:$d/before"
fi
case ${SW_BENCH_ROW_PF:-} in
'' | l1 | l2) ;;
both)
	[ -z "${BEFORE:-}" ] || { echo "bench_decode: SW_BENCH_ROW_PF=both takes the place of BEFORE" >&2; exit 1; }
	unset SW_BENCH_ROW_PF
	for l in l1 l2; do
		printf '#!/bin/sh\nSW_BENCH_ROW_PF=%s exec "%s" "$@"\n' "$l" "$B/bench/decode_bench" >"$d/$l"
		chmod +x "$d/$l"
	done
	drivers="l1:$d/l1 l2:$d/l2"
	;;
*) echo "bench_decode: SW_BENCH_ROW_PF must be l1, l2 or both" >&2; exit 1 ;;
esac

"$B/bin/sw-model" init -q -s tiny "$d/t"
mk() {
	jq --argjson h "$2" --argjson l "$3" --argjson n "$4" --argjson i "$5" \
		'.hidden_size = $h | .num_hidden_layers = $l | .num_attention_heads = $n |
		.num_key_value_heads = $n | .head_dim = ($h / $n) | .intermediate_size = $i |
		.vocab_size = 32000 | .tie_word_embeddings = true | .max_position_embeddings = 1024' \
		"$d/t/config.json" >"$d/$1.json"
	"$B/bin/sw-model" init -q -c "$d/$1.json" "$d/$1"
}
mk m15 288 6 6 768
mk m110 768 12 12 2048

echo "Threads $TH, OpenMP wait policy $SW_BENCH_WAIT, load before: $(cut -d' ' -f1-3 /proc/loadavg)."
# the products' kernels (libsw/compute/cpu/linear_rows.c picks by what the CPU has)
if grep -qw avx512f /proc/cpuinfo; then k="AVX-512 (now: 1 row by 16 rows of W, row by row; 4x6 tiles, 4x4 for what is left)"
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then k="AVX2 + FMA"
else k="portable"; fi
echo "linear_rows kernels: $k; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')."
echo
echo "| build | model | sequences x new tokens | step (CPU) | tokens/s | bandwidth | bound / step | fixed cost a token |"
echo "|---|---|---|---|---|---|---|---|"
for w in "m15 1 256" "m110 1 256" "m110 32 128" ${SW_BENCH_LONG:+"m110 32 512"}; do
	set -- $w
	rm -f "$d/out."*
	i=0
	while [ $i -lt "${SW_BENCH_ROUNDS:-3}" ]; do
		i=$((i + 1))
		for dr in $drivers; do
			"${dr#*:}" "$d/$1" "$2" "$3" >>"$d/out.${dr%%:*}"
		done
	done
	for dr in $drivers; do
		# the median of the rounds, field by field
		awk -v nm="${dr%%:*}" -v m="$1" -v allf="$d/all" '
		function med(k,   n, i, j, t, a) {
			n = split(all[k], a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2]; all[kv[1]] = all[kv[1]] " " kv[2] } }
		END {
			one = v["nseq"] == 1
			printf "| %s (W ahead: %s) | %s (%s MiB) | %d x %d | %.2f ms (%.2f) | %.1f | %.2f GB/s | %s | %s |\n", nm, v["row_prefetch"], m,
				v["weight_mb"], v["nseq"], v["new"], med("step_s") * 1e3, med("step_cpu_s") * 1e3,
				med("tokens_per_s"), med("bandwidth_gbs"), one ? sprintf("%.2f", med("of_bound")) : "-",
				one ? sprintf("%.2f ms", med("fixed_ms")) : "-"
			printf "nseq=%s new=%s weight_mb=%s tokens_per_s=%s build=%s\n", v["nseq"], v["new"],
				v["weight_mb"], med("tokens_per_s"), nm >> allf
		}' "$d/out.${dr%%:*}"
	done
done
echo
echo "| paged attention, one layer (12 heads of 64), 32 queries x keys | $(for dr in $drivers; do printf '%s | ' "${dr%%:*}"; done)"
echo "|---|$(for dr in $drivers; do printf -- '---|'; done)"
for keys in 128 512 2048; do
	rm -f "$d/attn."*
	i=0
	while [ $i -lt "${SW_BENCH_ROUNDS:-5}" ]; do
		i=$((i + 1))
		for dr in $drivers; do
			"${dr#*:}" attn 32 "$keys" | sed -n 's/.*layer_ms=//p' >>"$d/attn.${dr%%:*}"
		done
	done
	printf '| %s |' "$keys"
	for dr in $drivers; do
		sort -g "$d/attn.${dr%%:*}" | awk '{ v[NR] = $1 } END { printf " %.3f ms |", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
	done
	echo
done
echo
echo "| the product alone (decode_bench rows), 32 rows, N x K: GFLOP/s, W in cache / W from memory | $(for dr in $drivers; do printf '%s | ' "${dr%%:*}"; done)"
echo "|---|$(for dr in $drivers; do printf -- '---|'; done)"
for nk in "2048 768" "768 768" "768 2048" "32000 768" "896 4864"; do
	rm -f "$d/rows."*
	i=0
	while [ $i -lt "${SW_BENCH_ROUNDS:-3}" ]; do
		i=$((i + 1))
		for dr in $drivers; do
			"${dr#*:}" rows 32 $nk >>"$d/rows.${dr%%:*}"
		done
	done
	printf '| %s x %s |' $nk
	for dr in $drivers; do
		awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "cached_gflops") c[NR] = kv[2]; if (kv[1] == "streamed_gflops") s[NR] = kv[2] } }
			function med(a, n,  i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
				return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
			END { printf " %.1f / %.1f |", med(c, NR), med(s, NR) }' "$d/rows.${dr%%:*}"
	done
	echo
done
echo
echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
	v["nseq"] == 1 && v["weight_mb"] > 100 { one[v["build"]] = v["tokens_per_s"] }
	v["nseq"] == 32 && v["new"] == 128 { many[v["build"]] = v["tokens_per_s"] }
	END { n = split("now before", bs, " ")
		for (i = 1; i <= n; i++) if (bs[i] in many)
			printf "32 sequences / 1 sequence at 110M (%s): %.2fx\n", bs[i], many[bs[i]] / one[bs[i]] }' "$d/all"
