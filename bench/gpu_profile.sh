#!/bin/sh
# bench/gpu_profile.sh [BIN] - where the GPU's time goes, kernel by kernel:
# Nsight Compute's duration of every kernel (clocks left alone), added up
# by kernel and launch shape, for (1) two decoding steps after the prefill
# of 1 and of 64 sequences and (2) the model's start and two training steps
# (8 x 512 tokens) of gpu_bench's Qwen2.5-0.5B-shaped model.  Needs
# ncu and hardware counters (a Firecracker machine, not gVisor).
#   bench/gpu_profile.sh build/bench      (BIN: where gpu_bench is)
set -u
bin=${1:-build/bench}
command -v ncu >/dev/null || { echo "gpu_profile: no ncu here" >&2; exit 1; }
sum() { # the CSV of ncu on stdin -> kernel, shape, launches, total and mean us, share
	python3 -c '
import csv, sys, collections
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith("\""))]
head, rows = rows[0], rows[1:]
ix = {k: i for i, k in enumerate(head)}
tot = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    if r[ix["Metric Name"]] != "gpu__time_duration.sum":
        continue
    v = float(r[ix["Metric Value"]].replace(",", ""))
    u = r[ix["Metric Unit"]]
    v *= {"ns": 1e-3, "us": 1, "usecond": 1, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(u, 1)
    name = r[ix["Kernel Name"]].split("(")[0][:48]
    k = (name, r[ix["Grid Size"]] if "Grid Size" in ix else "")
    tot[k][0] += 1
    tot[k][1] += v
all_ = sum(t for _, t in tot.values())
print("%-48s %-16s %6s %10s %9s %6s" % ("kernel", "grid", "n", "total_us", "mean_us", "share"))
for (name, grid), (n, t) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print("%-48s %-16s %6d %10.1f %9.2f %5.1f%%" % (name, grid, n, t, t / n, 100 * t / all_))
print("all kernels: %.1f us" % all_)
'
}
prof() { # SKIP COUNT ARGS...
	local skip=$1 count=$2
	shift 2
	ncu --clock-control none --launch-skip "$skip" --launch-count "$count" --csv \
		--metrics gpu__time_duration.sum "$bin/gpu_bench" "$@" 2>/dev/null | sum
}
for n in 1 64; do
	echo "== decode, $n sequences: two steps after the prefill"
	# The prefill runs q, k and v as three products (16 kernels a layer,
	# 24 layers, 4 after them); a step of one row fuses them where it can.
	prof $((24 * 16 + 4)) $((2 * (24 * 16 + 4))) decode "$n" 4 || exit 1
done
echo "== training, 8 x 512 tokens: every kernel of the model's start and 2 steps"
prof 0 100000 train 1 8 512 || exit 1
