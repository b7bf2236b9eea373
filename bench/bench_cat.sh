#!/bin/sh
# bench/bench_cat.sh - sw-cat beside its peers on the same bytes, in one run:
#   msgpack -> msgpack pass-through of a ~1 GB stream   vs  cat through a pipe
#   JSON Lines -> msgpack, msgpack -> JSON              vs  jq -c .
#   zstd level 3 output                                  vs  zstd -3
#   zstd input                                           vs  zstd -dc
# The data are sw-datagen's realistic samples (prompt text, ~300 response
# tokens with f32 log-probs, rewards).  Medians of hyperfine runs (wall and
# CPU time); ratios are peer time / our time, so > 1 means sw-cat is faster.
# Environment: SW_BENCH_BYTES (default 1G), SW_BENCH_JQ_BYTES (default 64M:
# jq is slow, so the JSON comparisons use a smaller file, the same for both).
# BEFORE=TREE (a checkout built with make): instead of the peers, that
# checkout's sw-cat beside this one's on the msgpack pass-through and on JSON
# Lines -> msgpack, ROUNDS rounds (default 5) of RUNS runs each taking turns,
# medians of the rounds, now / before:
#
#   BEFORE=/tmp/old SW_BENCH_BYTES=256M sh bench/bench_cat.sh
set -eu
. "$(dirname "$0")/env.sh"
if [ -n "${BEFORE:-}" ] && [ ! -x "$BEFORE/build/bin/sw-cat" ]; then
	echo "bench_cat: $BEFORE/build/bin/sw-cat is missing (make in that checkout)" >&2
	exit 1
fi
big=${SW_BENCH_BYTES:-1G}
small=${SW_BENCH_JQ_BYTES:-64M}
for t in hyperfine jq zstd; do
	command -v $t >/dev/null || { echo "bench_cat: $t is missing (make deps-bench)" >&2; exit 1; }
done
d=$(bench_tmp cat)
trap 'rm -rf "$d"' EXIT

sw-datagen -b "$big" >"$d/big.msgpack"
zstd -q -3 -c "$d/big.msgpack" >"$d/big.msgpack.zst"
sw-datagen -b "$small" >"$d/small.msgpack"
sw-cat -f json "$d/small.msgpack" >"$d/small.jsonl"
bytes=$(stat -c %s "$d/big.msgpack")
jbytes=$(stat -c %s "$d/small.jsonl")
mbytes=$(stat -c %s "$d/small.msgpack")

# "WALL CPU": median wall seconds and mean CPU seconds (user + system, all
# processes of the pipeline; hyperfine keeps only their mean) of a command, from hyperfine's JSON export.  On a
# shared machine the CPU time is the steadier of the two.
t() {
	hyperfine -N --style none --warmup 1 --runs "${RUNS:-5}" --export-json "$d/h.json" \
		"sh -c '$1'" >/dev/null 2>&1 || { echo "bench_cat: failed: $1" >&2; exit 1; }
	jq -r '.results[0] | "\(.median) \(.user + .system)"' "$d/h.json"
}
row() { # what, "ours", "peer", MB
	awk -v w="$1" -v a="$2" -v b="$3" -v mb="$4" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		printf "| %s | %.3f s (%.0f MB/s), cpu %.3f s | %.3f s (%.0f MB/s), cpu %.3f s | %.2f | %.2f |\n",
			w, x[1], mb / x[1], x[2], y[1], mb / y[1], y[2], y[1] / x[1], y[2] / x[2] }'
}
MB=$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')
JMB=$(awk -v b="$jbytes" 'BEGIN { print b / 1e6 }')
MMB=$(awk -v b="$mbytes" 'BEGIN { print b / 1e6 }')

echo "Stream: $bytes bytes of msgpack ($(sw-cat -c "$d/big.msgpack") records); JSON comparisons on $jbytes bytes of JSON Lines."
echo
if [ -n "${BEFORE:-}" ]; then
	# both builds' wall and cpu, ROUNDS rounds taking turns; the medians and now / before
	old=$BEFORE/build/bin/sw-cat now=$(command -v sw-cat)
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); before: $old"
	echo
	echo "| what | before: wall, cpu (medians) | now: wall, cpu | now / before wall | now / before cpu |"
	echo "|---|---|---|---|---|"
	for what in msgpack json; do
		case $what in
		msgpack) in=$d/big.msgpack label="msgpack -> msgpack, $MB MB" ;;
		json) in=$d/small.jsonl label="JSON Lines -> msgpack, $JMB MB" ;;
		esac
		: >"$d/b" && : >"$d/n"
		r=0
		while [ $r -lt "${ROUNDS:-5}" ]; do
			t "$old $in >/dev/null" >>"$d/b"
			t "$now $in >/dev/null" >>"$d/n"
			r=$((r + 1))
		done
		med() { sort -g -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
		awk -v w="$label" -v bw="$(med "$d/b" 1)" -v bc="$(med "$d/b" 2)" -v nw="$(med "$d/n" 1)" -v nc="$(med "$d/n" 2)" \
			'BEGIN { printf "| %s | %.3f s, %.3f s | %.3f s, %.3f s | %.2f | %.2f |\n", w, bw, bc, nw, nc, nw / bw, nc / bc }'
	done
	echo
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	exit 0
fi
echo "| what | sw-cat: wall median (rate), cpu mean | peer: wall median (rate), cpu mean | peer/ours wall | peer/ours cpu |"
echo "|---|---|---|---|---|"
a=$(t "sw-cat $d/big.msgpack | cat >/dev/null"); b=$(t "cat $d/big.msgpack | cat >/dev/null")
row "msgpack -> msgpack, piped (peer: cat \\| cat)" "$a" "$b" "$MB"
a=$(RUNS=3 t "sw-cat -z $d/big.msgpack >/dev/null"); b=$(RUNS=3 t "zstd -q -3 -c $d/big.msgpack >/dev/null")
row "msgpack -> zstd -3 (peer: zstd -3)" "$a" "$b" "$MB"
a=$(t "sw-cat $d/big.msgpack.zst >/dev/null"); b=$(t "zstd -q -dc $d/big.msgpack.zst >/dev/null")
row "zstd msgpack in -> msgpack (peer: zstd -dc)" "$a" "$b" "$MB"
a=$(RUNS=3 t "sw-cat $d/small.jsonl >/dev/null"); b=$(RUNS=3 t "jq -c . $d/small.jsonl >/dev/null")
row "JSON Lines -> msgpack (peer: jq -c .)" "$a" "$b" "$JMB"
a=$(RUNS=3 t "sw-cat -f json $d/small.msgpack >/dev/null"); b=$(RUNS=3 t "jq -c . $d/small.jsonl >/dev/null")
row "msgpack -> JSON Lines (peer: jq -c . on the JSON)" "$a" "$b" "$MMB"
