#!/bin/sh
# tests/gpu/run-e2e.sh [BIN] - sw-run --device cuda end to end on one GPU:
# a tiny random model, 2 iterations of the real stages (sw-pool, sw-sort,
# sw-rollout, sw-verify, sw-balance, sw-train, with a reference), run once
# with --device cpu and once with --device cuda.  The cuda run must end
# with exit 0, its stages must have been handed cuda: weight and reference
# stores (the sort stage records $SW_WEIGHTS and $SW_REF), and no store may
# be left in /dev/shm; the last iteration's metrics of both runs are
# printed side by side (a GPU's sums differ from the CPU's in their last
# bits, and a random model's sampled tokens follow them: no equality is
# asked of them).  Exit 0 when the cuda run held to all of that.
# tests/gpu/device-check.sh runs it; BIN defaults to build/bin.
#
# Run on an H200 on 2026-12-04: passed.
set -u
bin=$(cd "${1:-build/bin}" && pwd) || exit 1
PATH="$bin:$PATH"
export PATH
d=$(mktemp -d "${TMPDIR:-/tmp}/sw-gpu-e2e.XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
cd "$d" || exit 1
sw-model init --size tiny --seed 1 m >/dev/null || exit 1
for i in 1 2 3 4 5 6; do
	printf '{"id":"q%d","prompt":"%d+%d=","label":"%d"}\n' "$i" $((i * 7)) "$i" $((i * 8))
done >prompts.jsonl
cat >exp <<EOF
model $d/m
prompts $d/prompts.jsonl
iters 2
batch 3
group 4
seed 5
ref
monitor violation_rate=off
monitor reward_dominance=off
sort echo "\$SW_WEIGHTS \$SW_REF" >>"\$SW_RUN/stores"; exec sw-sort
rollout sw-rollout -n "\$SW_GROUP" --seed "\$SW_SEED" --max-new-tokens 8 --batch 1
verify sw-verify -r math -r regex:[0-9]
balance sw-balance -n 1 --stats "\$SW_BALANCE_STATS"
train sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics "\$SW_TRAIN_METRICS"
EOF
shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^sw-run-')
fail=0
for dev in cpu cuda; do
	t0=$(date +%s.%N)
	sw-run -q -c exp --device "$dev" -o "run-$dev" 2>"err-$dev"
	rc=$?
	wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	echo "device $dev: exit $rc in ${wall}s"
	sed 's/^/  stderr: /' "err-$dev" | tail -n 5
	[ -f "run-$dev/stores" ] && sort -u "run-$dev/stores" | sed 's/^/  stores handed to the stages: /'
	[ -f "run-$dev/metrics.jsonl" ] && tail -n 1 "run-$dev/metrics.jsonl" | cut -c 1-400 | sed 's/^/  last metrics: /'
	if [ "$dev" = cuda ]; then
		[ "$rc" -eq 0 ] || { echo "FAIL: sw-run --device cuda exited $rc"; fail=1; }
		if ! grep -q '^cuda:sw-run-[0-9a-f]* cuda:sw-run-[0-9a-f]*\.ref$' "run-$dev/stores" 2>/dev/null; then
			echo "FAIL: the stages were not handed cuda: weight and reference stores"
			fail=1
		fi
	fi
done
shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^sw-run-')
echo "stores in /dev/shm: $shm_before before, $shm_after after"
[ "$shm_after" -le "$shm_before" ] || { echo "FAIL: a store was left in /dev/shm"; fail=1; }
exit $fail
