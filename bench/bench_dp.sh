#!/bin/sh
# bench/bench_dp.sh - sw-train data parallel: one SFT step on the `small`
# model (13M parameters) as 2 ranks under mpirun (one compute thread each),
# beside its peers in the same run: one process on both cores (-j 2, with
# OpenMP's default wait policy, threads that spin a while at each barrier,
# and with OMP_WAIT_POLICY=passive, threads that sleep at once) and one
# process on one core (-j 1).  Figures: the step's training time (the
# metrics' time_s.train: forward, backward, the gradient sums, AdamW), the
# tokens trained per second (the job's, and per rank), and the time the
# ranks spent summing gradients once they had met (time_s.allreduce) as a
# share of it.
# Where the kernel groups processes by session (sched_autogroup_enabled), other
# sessions' nice 19 does not leave the cores to it: RESULTS.md's figures were
# taken with the benchmark's session at autogroup nice -20 (setsid, then
# echo -20 >/proc/self/autogroup).
# Medians of RUNS runs.  Environment: RUNS (default 3), SW_BENCH_SIZE (small),
# SW_BENCH_SAMPLES (16), SW_BENCH_PROMPT and SW_BENCH_RESPONSE (16 and 48 tokens).
set -eu
. "$(dirname "$0")/env.sh"
runs=${RUNS:-3}
size=${SW_BENCH_SIZE:-small}
n=${SW_BENCH_SAMPLES:-16}
plen=${SW_BENCH_PROMPT:-16}
rlen=${SW_BENCH_RESPONSE:-48}
for t in jq mpirun; do
	command -v $t >/dev/null || { echo "bench_dp: $t is missing (make deps)" >&2; exit 1; }
done
d=$(bench_tmp dp)
trap 'rm -rf "$d"' EXIT
# as tests/helpers.bash's sw_mpirun: root, a container, ranks not pinned
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
	OMPI_MCA_mpi_yield_when_idle=1
mpi() { mpirun --oversubscribe --bind-to none "$@"; }

sw-model init -q -s "$size" --seed 1 "$d/m"
awk -v n="$n" -v plen="$plen" -v rlen="$rlen" 'BEGIN {
	srand(7)
	for (s = 0; s < n; s++) {
		p = ""; r = ""
		for (i = 0; i < plen; i++) p = p (i ? "," : "") int(32 + rand() * 95)
		for (i = 0; i < rlen; i++) r = r (i ? "," : "") int(32 + rand() * 95)
		printf "{\"id\":\"s%d\",\"prompt_tokens\":[%s],\"response_tokens\":[%s]}\n", s, p, r
	}
}' | sw-balance -n 2 >"$d/samples.msgpack"

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# step LABEL THREADS LAUNCH...: RUNS steps, the metrics in $d/LABEL.jsonl
step() {
	label=$1 j=$2
	shift 2
	: >"$d/$label.jsonl"
	for i in $(seq "$runs"); do
		rm -rf "$d/out"
		"$@" sw-train -q -j "$j" -a sft --lr 1e-5 -m "$d/m" -o "$d/out" --metrics "$d/$label.jsonl" \
			"$d/samples.msgpack" >/dev/null
	done
}
step one2 2 env
step one2p 2 env OMP_WAIT_POLICY=passive
step one1 1 env
step two 1 mpi -np 2
train() { jq '.time_s.train' "$d/$1.jsonl" | median; }
tps() { jq '.tokens_per_s' "$d/$1.jsonl" | median; }
ar=$(jq '.time_s.allreduce' "$d/two.jsonl" | median)
share=$(jq '.time_s.allreduce / .time_s.train * 100' "$d/two.jsonl" | median)
t2=$(train one2) t2p=$(train one2p) t1=$(train one1) tt=$(train two)
p2=$(tps one2) p2p=$(tps one2p) p1=$(tps one1) pt=$(tps two)
tokens=$(head -1 "$d/two.jsonl" | jq .tokens)
echo "load: $(uptime | sed 's/.*load average: //')"
echo "model: $size ($(sw-model info --json "$d/m" | jq .parameters) parameters); $n samples, $plen + $rlen tokens; $tokens loss tokens; medians of $runs"
echo
echo "| run | step training time | tokens/s (job) | tokens/s per rank | allreduce | share of the step |"
echo "|---|---|---|---|---|---|"
printf '| one process, 2 threads | %.3f s | %.0f | %.0f | - | - |\n' "$t2" "$p2" "$p2"
printf '| one process, 2 threads, OMP_WAIT_POLICY=passive | %.3f s | %.0f | %.0f | - | - |\n' "$t2p" "$p2p" "$p2p"
printf '| one process, 1 thread | %.3f s | %.0f | %.0f | - | - |\n' "$t1" "$p1" "$p1"
printf '| mpirun -np 2, 1 thread each | %.3f s | %.0f | %.0f | %.3f s | %.1f%% |\n' "$tt" "$pt" "$(echo "$pt" | awk '{ print $1 / 2 }')" "$ar" "$share"
echo
printf 'speed-up of 2 ranks: %.2fx over one process on 1 thread, %.2fx over one process on 2 threads\n' \
	"$(echo "$t1 $tt" | awk '{ print $1 / $2 }')" "$(echo "$t2 $tt" | awk '{ print $1 / $2 }')"
printf 'speed-up of 2 threads: %.2fx (default wait policy), %.2fx (passive) over 1 thread\n' \
	"$(echo "$t1 $t2" | awk '{ print $1 / $2 }')" "$(echo "$t1 $t2p" | awk '{ print $1 / $2 }')"
