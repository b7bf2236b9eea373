#!/bin/sh
# bench/bench_rollout_grpo.sh - the rollout stage of bench/bench_grpo.sh on its
# own: sw-rollout, 8 prompts x 8 responses x 64 new tokens (temperature 1,
# seed 1), on a random f32 model of SmolLM2-135M's shapes (hidden 576, 30
# layers, 9 heads, 3 KV heads, intermediate 1536, vocab 49152, tied; written
# by sw-model init, byte tokenizer), --threads 2, OMP_WAIT_POLICY=PASSIVE;
# with BEFORE=DIR the sw-rollout in DIR (a build's bin/) in the same run,
# the two alternating.  Figures: wall, user and system seconds of the whole
# process (load and prefill included) and peak RSS, every run, then the
# medians.  RUNS runs a side (default 3).
set -eu
. "$(dirname "$0")/env.sh"
RUNS=${RUNS:-3}
d=$(bench_tmp rollout-grpo)
trap 'rm -rf "$d"' EXIT
export OMP_WAIT_POLICY=PASSIVE
. "$top/bench/smol_model.sh"
smol_model "$d/m"
i=0
while [ $i -lt 8 ]; do
	printf '{"id":"p%d","prompt":"Question %d: tell a short story about the number %d."}\n' $i $i $((7 * i))
	i=$((i + 1))
done >"$d/p.jsonl"
sides="now:$B/bin/sw-rollout"
[ -n "${BEFORE:-}" ] && sides="$sides before:$BEFORE/sw-rollout"
echo "Load before: $(cut -d' ' -f1-3 /proc/loadavg)."
r=0
while [ $r -lt "$RUNS" ]; do
	r=$((r + 1))
	for s in $sides; do
		name=${s%%:*} bin=${s#*:}
		/usr/bin/time -f "$name %e %U %S %M" -o "$d/t.$name.$r" "$bin" -m "$d/m" -n 8 --seed 1 \
			--max-new-tokens 64 --threads 2 -o "$d/out.msgpack" "$d/p.jsonl"
		cat "$d/t.$name.$r" >>"$d/all"
	done
done
echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| build | wall s (runs) | median wall s | median user + sys s | peak RSS MiB |"
echo "|---|---|---|---|---|"
for s in $sides; do
	name=${s%%:*}
	awk -v nm="$name" '$1 == nm { w[++n] = $2; c[n] = $3 + $4; rss = $5 }
	function med(a, n,   i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END { runs = ""; for (i = 1; i <= n; i++) runs = runs (i > 1 ? ", " : "") w[i]
		printf "| %s | %s | %.2f | %.2f | %.0f |\n", nm, runs, med(w, n), med(c, n), rss / 1024 }' "$d/all"
done
