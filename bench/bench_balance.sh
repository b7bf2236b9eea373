#!/bin/sh
# bench/bench_balance.sh - sw-balance's partitioners beside the peer's, and
# sw-sort on a stream larger than its buffer.  Run by bench/run.sh (make
# bench) or alone (bench/env.sh sets B and SW_BENCH_TMP); prints a Markdown
# section.
#
# The peer is verl's Karmarkar-Karp and greedy partitioners
# (verl/utils/seqlen_balancing.py, the functions run as they are, loaded
# from an installed verl, or from the wheel in $SW_BENCH_VERL_WHL, or from
# `pip download verl --no-deps` when there is a network), fed verl's own
# workload 24576*T + T^2 (T = the sample's tokens) as verl's trainer does,
# and also our costs.  Every placement is judged by our cost model (FLOPs
# with attention and images), the work the ranks really do.  Without verl
# the peer's rows say so.
#
# Knobs: SW_BENCH_SORT_BYTES (default 2G) for the sw-sort stream.
set -eu
. "$(dirname "$0")/env.sh"
BB=$B/bench/balance_bench
T=$(bench_tmp balance)
trap 'rm -rf "$T"' EXIT INT TERM
SORT_BYTES=${SW_BENCH_SORT_BYTES:-2G}

# --- the peer ------------------------------------------------------------------
verl_src=
if python3 -c 'import verl.utils.seqlen_balancing' 2>/dev/null; then
	verl_src=$(python3 -c 'import verl.utils.seqlen_balancing as m; print(m.__file__)')
else
	whl=${SW_BENCH_VERL_WHL:-}
	if [ -z "$whl" ] && timeout 60 pip download verl --no-deps -q -d "$T/verl" >/dev/null 2>&1; then
		whl=$(ls "$T"/verl/verl-*.whl 2>/dev/null | head -1)
	fi
	if [ -n "$whl" ]; then
		python3 -m zipfile -e "$whl" "$T/verl-src" && verl_src=$T/verl-src/verl/utils/seqlen_balancing.py
	fi
fi
verl_version=
if [ -n "$verl_src" ]; then
	verl_version=$(python3 -c 'import importlib.metadata as m; print(m.version("verl"))' 2>/dev/null ||
		basename "${whl:-verl-unknown-}" | cut -d- -f2)
fi

# peer FILE K MODE: MODE verl-kk, verl-kk-equal, verl-greedy (verl's workload) or verl-kk-cost (our costs)
cat >"$T/peer.py" <<'EOF'
import ast, copy, heapq, statistics, sys, time
src, path, k, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tree = ast.parse(open(src).read())
ns = {"heapq": heapq, "copy": copy}
keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("karmarkar_karp", "greedy_partition")]
exec(compile(ast.Module(body=keep, type_ignores=[]), src, "exec"), ns)
tok, cost = [], []
for line in open(path):
    t, c = line.split()
    tok.append(int(t)); cost.append(float(c))
work = [24576 * t + t * t for t in tok]  # verl's calculate_workload
fn = ns["greedy_partition"] if mode == "verl-greedy" else ns["karmarkar_karp"]
vals = cost if mode == "verl-kk-cost" else work
times = []
for _ in range(3):
    t0 = time.perf_counter()
    parts = fn(vals, k, mode == "verl-kk-equal")
    times.append(time.perf_counter() - t0)
loads = [sum(cost[i] for i in p) for p in parts]
total = sum(cost); mean = total / k
lb = max(1.0, max(cost) / mean)
print("%s %.6f %.6f 0 %.6f" % (mode, max(loads) / mean, max(loads) / mean / lb, statistics.median(times)))
EOF
peer() {
	if [ -n "$verl_src" ]; then
		python3 "$T/peer.py" "$verl_src" "$@"
	else
		echo "$3 n/a n/a n/a n/a"
	fi
}

row() { awk -v w="$1" '{ if ($2 == "n/a") printf "| %s | %s | n/a | n/a | n/a |\n", w, $1;
	else printf "| %s | %s | %.6f | %.6f | %.4f |\n", w, $1, $2, $3, $5 }'; }

# --- 1. quality: 8 ranks x 512 samples -------------------------------------------
sw-datagen -n 4096 -l -s 7 | "$BB" price >"$T/text.costs"
sw-datagen -n 4096 -l -i 30 -s 7 | "$BB" price >"$T/mixed.costs"
echo "### 8 ranks x 512 samples (4096), log-normal lengths (median 300, tail to 8k)"
echo
echo "Placement judged by our cost (FLOPs, training); each sample placed alone. Medians of 5 (ours) or 3 (verl) runs."
echo
echo "| batch | partitioner | max/mean | max/lower bound | seconds |"
echo "|---|---|---|---|---|"
for batch in text mixed; do
	label=$batch; [ $batch = mixed ] && label="text+image (30% of prompts)"
	for m in kk lpt seq; do "$BB" part "$T/$batch.costs" 8 $m | row "$label"; done
	for m in verl-kk verl-kk-equal verl-greedy verl-kk-cost; do peer "$T/$batch.costs" 8 $m | row "$label"; done
done
echo
[ -n "$verl_src" ] && echo "verl $verl_version: verl-kk/verl-greedy partition by verl's workload 24576*T + T^2 (verl-kk-equal with equal_size=True, as verl's trainer balances ranks); verl-kk-cost runs verl's KK on our costs." && echo
[ -z "$verl_src" ] && echo "verl not found (no installed verl, no SW_BENCH_VERL_WHL, no network): peer rows n/a." && echo

# --- 2. capacities ------------------------------------------------------------------
caps=1,1,0.5,1,2,1,0.5,1
echo "### Capacities $caps (8 ranks, the text+image batch)"
echo
echo "| partitioner | worst relative error of a rank's cost share against its capacity share | seconds |"
echo "|---|---|---|"
for m in kk lpt seq; do
	"$BB" part "$T/mixed.costs" 8 $m $caps | awk '{ printf "| %s | %.4f%% | %.4f |\n", $1, 100 * $4, $5 }'
done
echo

# --- 3. scale -------------------------------------------------------------------------
echo "### 1,000,000 samples on 64 ranks"
echo
echo "The partitioner alone (libsw, costs in memory; median of 3):"
echo
echo "| partitioner | max/mean | max/lower bound | seconds |"
echo "|---|---|---|---|"
"$BB" large 1000000 64 1 | awk '{ printf "| %s | %.6f | %.6f | %.3f |\n", $1, $2, $3, $5 }'
echo
sw-datagen -n 16384 -l -s 9 | "$BB" price >"$T/mid.costs"
ours=$("$BB" part "$T/mid.costs" 64 kk)
theirs=$(peer "$T/mid.costs" 64 verl-kk)
echo "Beside verl at a size its Python KK handles (16384 samples, 64 ranks; it keeps a 64-subset State object per sample, so 1M was not tried):"
echo
echo "| partitioner | max/mean | seconds | time vs ours |"
echo "|---|---|---|---|"
echo "$ours" | awk '{ printf "| kk (ours) | %.6f | %.4f | 1 |\n", $2, $5 }'
echo "$theirs $ours" | awk '{ if ($2 == "n/a") print "| verl-kk | n/a | n/a | n/a |"; else printf "| verl-kk | %.6f | %.4f | %.0fx |\n", $2, $5, $5 / $10 }'
echo
"$BB" gen 1000000 1 >"$T/small.msgpack"
# wall and CPU (user + system) seconds: on a shared machine the CPU time is the steadier figure
wc_() { /usr/bin/time -f "%e %U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{ printf "%s %.2f\n", $1, $2 + $3 }'; }
e2e=$(for i in 1 2 3; do wc_ sw-balance -q -n 64 --max-tokens 4096 -o /dev/null "$T/small.msgpack"; done | sort -n | sed -n 2p)
cat_=$(for i in 1 2 3; do wc_ sw-cat -o /dev/null "$T/small.msgpack"; done | sort -n | sed -n 2p)
echo "End to end on a stream of 1,000,000 small samples ($(du -m "$T/small.msgpack" | cut -f1) MB), median of 3 (load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores):"
echo
echo "| command | wall seconds | CPU seconds |"
echo "|---|---|---|"
echo "$e2e" | awk '{ printf "| `sw-balance -n 64 --max-tokens 4096` | %s | %s |\n", $1, $2 }'
echo "$cat_" | awk '{ printf "| `sw-cat` (reading alone) | %s | %s |\n", $1, $2 }'
echo
rm -f "$T/small.msgpack"

# --- 4. sw-sort larger than memory -----------------------------------------------------
sw-datagen -b "$SORT_BYTES" >"$T/big.msgpack"
size=$(du -m "$T/big.msgpack" | cut -f1)
echo "### sw-sort of a $size MB stream with -S 256M"
echo
echo "One run each (the stream is large); peak memory is the maximum resident set."
echo
echo "| command | wall seconds | CPU seconds | peak MB |"
echo "|---|---|---|---|"
for cmd in "sw-cat -o /dev/null" "sw-sort -S 256M -T $T -o /dev/null" "sw-sort --no-group -S 256M -T $T -o /dev/null"; do
	/usr/bin/time -f "%e %U %S %M" $cmd "$T/big.msgpack" 2>"$T/time" >/dev/null
	tail -1 "$T/time" | awk -v c="$cmd" '{ sub(" -T [^ ]*", "", c); printf "| `%s` | %.1f | %.1f | %.0f |\n", c, $1, $2 + $3, $4 / 1024 }'
done
rm -f "$T/big.msgpack"
