#!/bin/sh
# bench/bench_run.sh - what sw-run's colocation buys, in one run, side by side:
#
#   colocated   sw-run: each iteration select | sort | rollout | verify | tee |
#               balance | train as one pipeline of processes, the weights in a
#               shared store that the trainer updates in place and the next
#               rollout reads in place (plus sw-run's own work: samples saved,
#               pool update, metrics, monitors, a checkpoint, the audit log)
#   sequential  the same programs with the same options, one after another,
#               files between them, the weights handed over through a model
#               directory that `sw-train -m M -o M` writes and `sw-rollout -m M`
#               reads (the copy the store avoids); no checkpoints beyond that
#
# Both start from the same model and pool and run SW_BENCH_ITERS iterations
# (same seeds), SW_BENCH_ROUNDS times, alternating (colocated, sequential,
# colocated, ...) so that a change in the load of a shared machine falls on
# both.  Figures: the median over every iteration of every round of an
# iteration's wall time (colocated: sw-run's time_s.iteration, the pipeline;
# sequential: the sum of its stages) and CPU time (user + system of every
# stage: sw-run's cpu_s, GNU time's %U + %S); a run's whole wall time over its
# iterations (colocated: with its start, a checkpoint every iteration,
# samples and audit log); peak memory, sampled every 50 ms as the sum of the PSS of every
# process of the run (proportional set size: the shared store's pages are
# counted once, not once per process that maps them) beside the largest
# single stage's peak RSS (GNU time's %M) in the sequential run; and sw-run's
# monitor_overhead (median share of an iteration).
#
# Environment: SW_BENCH_SIZE (sw-model init --size, default small),
# SW_BENCH_ITERS (default 5), SW_BENCH_ROUNDS (default 2), SW_BENCH_BATCH (prompts, default 4),
# SW_BENCH_GROUP (responses per prompt, default 4), SW_BENCH_TOKENS
# (max-new-tokens, default 16), SW_BENCH_TMP (scratch).
set -euf
. "$(dirname "$0")/env.sh"
size=${SW_BENCH_SIZE:-small}
iters=${SW_BENCH_ITERS:-5}
rounds=${SW_BENCH_ROUNDS:-2}
batch=${SW_BENCH_BATCH:-4}
group=${SW_BENCH_GROUP:-4}
tokens=${SW_BENCH_TOKENS:-16}
# threads that wait for their team sleep at once, in sw-run's stages and in
# the sequential ones alike (set, it also keeps sw-run from giving its
# stages their default short spin, GOMP_SPINCOUNT=2000: bench/RESULTS.md
# "spin"), so both sides compute alike
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY
tmp=$(bench_tmp run)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

sw-model init --size "$size" --seed 1 m >/dev/null
awk 'BEGIN { for (i = 1; i <= 64; i++) printf "{\"id\":\"q%d\",\"prompt\":\"%d+%d=\",\"label\":\"%d\"}\n", i, 10 + i % 50, i % 10, 10 + i % 50 + i % 10 }' >prompts.jsonl
printf '[unsafe] hack\n' >blocklist
verify="sw-verify -r math -r regex:[0-9] -r blocklist:$tmp/blocklist"
train_opts="--algo grpo --lr 1e-3"
# one response at a time keeps both runs' samples in the same order (see tests/run-e2e.bats)
roll_opts="--max-new-tokens $tokens --batch 1"

# Sum the PSS (kB) of the processes of session $1 every 50 ms while its leader
# runs (an ended leader stays a zombie until waited for); print the peak.
pss_peak() {
	peak=0
	while ps -o stat= -p "$1" | grep -q '^[^Z]'; do
		now=0
		for p in $(ps -o pid= -s "$1"); do
			k=$(awk '/^Pss:/ { print $2; exit }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
			now=$((now + ${k:-0}))
		done
		[ "$now" -gt "$peak" ] && peak=$now
		sleep 0.05
	done
	echo "$peak"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
now() { date +%s.%N; }

# --- colocated: sw-run ---------------------------------------------------------------
cat >exp <<EOF
model $tmp/m
prompts $tmp/prompts.jsonl
iters $iters
batch $batch
group $group
seed 7
monitor violation_rate=off
rollout sw-rollout -n "\$SW_GROUP" --seed "\$SW_SEED" $roll_opts
verify $verify
train sw-train $train_opts --metrics "\$SW_TRAIN_METRICS"
EOF
: >run.iter; : >run.wholek; : >run.cpu; : >run.whole; : >run.overhead; : >run.monms; : >run.ckpt; : >run.pss
colocated() {
	rm -rf run
	t0=$(now)
	setsid sw-run -q -c exp -o run &
	pid=$!
	pss_peak "$pid" >>run.pss
	wait "$pid"
	awk -v a="$t0" -v b="$(now)" -v n="$iters" 'BEGIN { print (b - a) / n }' >>run.whole
	jq 'select(.eval | not) | .time_s.iteration' run/metrics.jsonl >>run.iter
	jq 'select(.eval | not) | .cpu_s | add' run/metrics.jsonl >>run.cpu
	jq 'select(.eval | not) | .monitor_overhead' run/metrics.jsonl >>run.overhead
	jq 'select(.eval | not) | .monitor_overhead * .time_s.iteration * 1000' run/metrics.jsonl >>run.monms
	jq -r 'select(.event == "checkpoint") | .wall_s' run/audit.log >>run.ckpt
	# the same with a checkpoint only at the end (and the start): what the checkpoints cost
	rm -rf runk
	t0=$(now)
	sw-run -q -c exp -o runk --ckpt-every "$iters"
	awk -v a="$t0" -v b="$(now)" -v n="$iters" 'BEGIN { print (b - a) / n }' >>run.wholek
}

# --- sequential: files and a model directory ---------------------------------------------
: >seq.iter; : >seq.cpu; : >seq.whole
seq_stage_rss=0
seq_big=
sequential() {
	rm -rf seqm pool pool.lock
	cp -r m seqm
	sw-pool add pool prompts.jsonl
	t0=$(now)
	for it in $(seq 1 "$iters"); do
		seed=$(( (7 * 1000003 + it) % 4294967296 ))
		ti=$(now)
		cpu=0
		# each stage under GNU time: its own peak RSS and CPU time
		for st in take sort rollout verify balance train update; do
			case $st in
			take) cmd="sw-pool take pool -n $batch" in=/dev/null out=p.mp ;;
			sort) cmd="sw-sort" in=p.mp out=s.mp ;;
			rollout) cmd="sw-rollout -m seqm -n $group --seed $seed $roll_opts" in=s.mp out=r.mp ;;
			verify) cmd="$verify" in=r.mp out=v.mp ;;
			balance) cmd="sw-balance -n 1" in=v.mp out=b.mp ;;
			train) cmd="sw-train -m seqm -o seqm $train_opts" in=b.mp out=t.mp ;;
			update) cmd="sw-pool update pool v.mp" in=/dev/null out=/dev/null ;;
			esac
			/usr/bin/time -f '%M %U %S' -o stage.time $cmd <"$in" >"$out"
			set -- $(tail -1 stage.time)
			[ "$1" -gt "$seq_stage_rss" ] && { seq_stage_rss=$1; seq_big=$st; }
			cpu=$(awk -v c="$cpu" -v u="$2" -v s="$3" 'BEGIN { print c + u + s }')
		done
		awk -v a="$ti" -v b="$(now)" 'BEGIN { print b - a }' >>seq.iter
		echo "$cpu" >>seq.cpu
	done
	awk -v a="$t0" -v b="$(now)" -v n="$iters" 'BEGIN { print (b - a) / n }' >>seq.whole
}

for r in $(seq 1 "$rounds"); do
	colocated
	sequential
done
# GNU time's %M of sw-run: the largest RSS of one process of its tree (wait4's ru_maxrss)
/usr/bin/time -f %M -o run2.rss sw-run -q -c exp -o run2 --iters 1
run_maxrss=$(tail -1 run2.rss)
same=no
[ "$(sw-audit digest seqm/model.safetensors | cut -d' ' -f1)" = \
  "$(sw-audit digest "run/ckpt/iter-$(printf %04d "$iters")/model.safetensors" | cut -d' ' -f1)" ] && same=yes

nparams=$(sw-model info m | awk '/parameters/ { print $2; exit }')
echo "Model \`$size\` ($nparams parameters), $iters iterations of $batch prompts x $group responses of $tokens tokens,"
echo "GRPO (one update a step), verify math + regex + blocklist; $rounds rounds each, alternating; medians over"
echo "every iteration of every round (whole run and peak memory: over the rounds)."
echo "The sequential run's final weights equal the colocated run's, bit for bit: $same."
echo
echo "| what | colocated (sw-run) | sequential (files, model dir) | sequential / colocated |"
echo "|---|---|---|---|"
awk -v ri="$(median <run.iter)" -v si="$(median <seq.iter)" -v rc="$(median <run.cpu)" -v sc="$(median <seq.cpu)" \
    -v n="$iters" -v rw="$(median <run.whole)" -v sw="$(median <seq.whole)" -v ck="$(median <run.ckpt)" \
    -v rk="$(median <run.wholek)" -v rp="$(median <run.pss)" -v sr="$seq_stage_rss" -v big="$seq_big" -v rm="$run_maxrss" 'BEGIN {
	printf "| iteration, wall (colocated: the pipeline, time_s.iteration) | %.3f s | %.3f s | %.2fx |\n", ri, si, si / ri
	printf "| iteration, CPU of its stages (user + system) | %.3f s | %.3f s | %.2fx |\n", rc, sc, sc / rc
	printf "| whole run / iterations (colocated: its start, a checkpoint every iteration, median %.3f s, samples, audit) | %.3f s | %.3f s | %.2fx |\n", ck, rw, sw, sw / rw
	printf "| whole run / iterations, colocated with --ckpt-every %d (a checkpoint at the start and the end) | %.3f s | %.3f s | %.2fx |\n", n, rk, sw, sw / rk
	printf "| peak memory: whole run, sum of PSS (sampled 50 ms) | %.1f MB | largest stage (%s) RSS %.1f MB | %.2fx |\n", rp / 1024, big, sr / 1024, sr / rp
	printf "| peak RSS of the largest single process (GNU time %%M) | %.1f MB | %.1f MB (%s) | %.2fx |\n", rm / 1024, sr / 1024, big, sr / rm
}'
echo
# every figure the medians come from, in the order measured, so an outlier shows
echo "Iteration wall times (s), colocated: $(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' run.iter);" \
     "sequential: $(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' seq.iter)."
echo "Whole runs / iterations (s), colocated: $(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' run.whole);" \
     "colocated, --ckpt-every $iters: $(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' run.wholek);" \
     "sequential: $(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 }' seq.whole)."
echo
awk -v o="$(median <run.overhead)" -v ms="$(median <run.monms)" -v mx="$(sort -g run.overhead | tail -1)" 'BEGIN {
	printf "Monitoring overhead (sw-run metrics.jsonl monitor_overhead, median): %.3f%% of an iteration (%.2f ms; largest %.3f%%); target <= 2%%: %s.\n",
		100 * o, ms, 100 * mx, (o <= 0.02 ? "met" : "missed") }'
