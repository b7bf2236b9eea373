#!/bin/sh
# bench/bench_backend.sh - what the device seam costs: the engine's training
# step and decoding on the cpu backend beside the same on the guard backend
# (every tensor behind mprotect, opened around each op), and, with BASE=REV,
# beside the engine of another revision built from a scratch worktree (to
# check that a change to the seam left the CPU path's speed alone).
#
#   B=build BASE=094dc06 ROUNDS=5 sh bench/bench_backend.sh
#
# Model: bench/engine_bench.c's (Llama, hidden 768, 12 layers, vocab 32000,
# 109.5M parameters, f32); training batch 4 x 256 tokens; decoding 1 and 32
# sequences, NEW new tokens.  The variants run in turn, ROUNDS times, so load
# that comes and goes falls on each alike; medians of the rounds.  The
# training step is given in wall seconds and in CPU seconds of all threads,
# which a shared machine distorts less.
set -eu
. "$(dirname "$0")/env.sh"
bin=$B/bench/engine_bench
ROUNDS=${ROUNDS:-5}
NEW=${NEW:-16}
STEPS=${STEPS:-1}
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_WAIT_POLICY
[ -x "$bin" ] || { echo "bench_backend: $bin is missing (make bench builds it)" >&2; exit 1; }

base=
if [ -n "${BASE:-}" ]; then
	wt=$(bench_tmp base)
	trap 'git -C "$top" worktree remove --force "$wt/src" >/dev/null 2>&1; rm -rf "$wt"' EXIT
	git -C "$top" worktree add -q --detach "$wt/src" "$BASE"
	make -s -C "$wt/src" B="$wt/build" "$wt/build/bench/engine_bench" >/dev/null
	base=$wt/build/bench/engine_bench
fi

field() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

out=$(bench_tmp -f backend)
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds"
r=0
while [ $r -lt "$ROUNDS" ]; do
	r=$((r + 1))
	for v in cpu guard ${base:+base}; do
		case $v in
		base) run() { "$base" "$@"; } ;;
		*) run() { SW_DEVICE=$v "$bin" "$@"; } ;;
		esac
		t=$(run train "$STEPS")
		d1=$(run decode 1 "$NEW")
		d32=$(run decode 32 "$NEW")
		printf '%s train_s %s\n%s train_cpu %s\n%s d1 %s\n%s d32 %s\n' \
			"$v" "$(field step_s "$t")" "$v" "$(field cpu_s "$t")" \
			"$v" "$(field step_s "$d1")" "$v" "$(field step_s "$d32")" >>"$out"
	done
done
m() { awk -v v="$1" -v k="$2" '$1 == v && $2 == k { print $3 }' "$out" | median; }
echo "| measure (median of $ROUNDS) | cpu | guard | guard / cpu |${base:+ base $BASE | cpu / base |}"
echo "|---|---|---|---|${base:+---|---|}"
for k in train_s train_cpu d1 d32; do
	case $k in
	train_s) what="training step, wall s" ;;
	train_cpu) what="training step, CPU s of all threads" ;;
	d1) what="decode step, 1 sequence, s" ;;
	d32) what="decode step, 32 sequences, s" ;;
	esac
	c=$(m cpu $k) g=$(m guard $k)
	line="| $what | $c | $g | $(ratio "$g" "$c")x |"
	[ -n "$base" ] && { b=$(m base $k); line="$line $b | $(ratio "$c" "$b")x |"; }
	echo "$line"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$out"
