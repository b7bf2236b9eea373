#!/bin/sh
# bench/bench_spin.sh - how OpenMP's idle threads wait, the choice sw-run
# makes for its stages: asleep at once (OMP_WAIT_POLICY=passive, sw-run's
# choice before) beside a short spin first (GOMP_SPINCOUNT=2000, its choice
# now), on a quiet machine and beside two busy loops (another stage, or
# another user's work, on the two cores).
#
#   ROUNDS=3 B=build sh bench/bench_spin.sh
#
# Quiet: bench_grpo.sh's rollout (a random Llama of SmolLM2-135M's shapes, 8
# prompts x 8 responses of 64 tokens, sw-rollout --threads 2), wall time.
# Busy: sw-train's GRPO step on 8 of its samples with two shell loops
# spinning beside it, time_s.train.  The two waits take turns in each round;
# medians of ROUNDS, and spin / passive.  Needs torch and transformers (for
# the model) and the programs in $B/bin.
set -euf
. "$(dirname "$0")/env.sh"
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "bench_spin: needs torch and transformers" >&2; exit 1; }
tmp=$(bench_tmp spin)
busy=
trap '[ -z "$busy" ] || kill $busy 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
. "$here/smol_prompts.sh"
smol_prompts
head -n 1 p.jsonl | sw-rollout -m m -n 8 --seed 1 --max-new-tokens 64 --threads 2 |
	sw-verify -r length,max=120,buffer=60,unit=chars | sw-cat -f json >small.jsonl

now() { date +%s.%N; }
# roll LABEL ENV: the rollout's wall time, appended to LABEL.roll
roll() {
	t0=$(now)
	env "$2" sw-rollout -m m -n 8 --seed 1 --max-new-tokens 64 --threads 2 p.jsonl >/dev/null
	echo "$(now) - $t0" | bc >>"$1.roll"
}
# step LABEL ENV: the training step's time_s.train, appended to LABEL.step
step() {
	rm -rf out met.jsonl
	env "$2" sw-train -q -m m -o out --algo grpo --lr 1e-6 -j 2 --metrics met.jsonl small.jsonl >/dev/null
	jq .time_s.train met.jsonl >>"$1.step"
}
med() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# turns MEASURE: $rounds rounds of MEASURE, the two waits taking turns
turns() {
	r=0
	while [ "$r" -lt "$rounds" ]; do
		r=$((r + 1))
		"$1" passive OMP_WAIT_POLICY=passive
		"$1" spin GOMP_SPINCOUNT=2000
	done
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
turns roll
sh -c 'while :; do :; done' &
busy=$!
sh -c 'while :; do :; done' &
busy="$busy $!"
turns step
kill $busy
busy=
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo "load average $load0 at the start, $load1 at the end; $rounds rounds; $(sw-run --version)"
echo
echo "| wait | rollout, quiet (s) | training step beside two busy loops (s) |"
echo "|---|---|---|"
printf '| OMP_WAIT_POLICY=passive | %.2f | %.2f |\n' "$(med passive.roll)" "$(med passive.step)"
printf '| GOMP_SPINCOUNT=2000 | %.2f | %.2f |\n' "$(med spin.roll)" "$(med spin.step)"
echo
echo "every rollout: passive $(tr '\n' ' ' <passive.roll); spin $(tr '\n' ' ' <spin.roll)"
echo "every step: passive $(tr '\n' ' ' <passive.step); spin $(tr '\n' ' ' <spin.step)"
awk -v a="$(med passive.roll)" -v b="$(med spin.roll)" -v c="$(med passive.step)" -v d="$(med spin.step)" \
	'BEGIN { printf "passive / spin: rollout %.2fx, busy step %.2fx\n", a / b, c / d }'
