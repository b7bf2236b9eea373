#!/usr/bin/env bats
# sw-run --ranks N: the rollout (and an evaluation's) and the train stage as
# N ranks under mpirun (or srun inside a Slurm allocation, or --launcher CMD),
# the generator ranks reading the run's one weight store, the trainer's rank 0
# training it in place; the samples those of a run without ranks, the weights
# within the data-parallel tolerance of them (and the same bits run to run);
# the config, the audit log and the metrics (rank_imbalance) say how it ran;
# a signal ends every rank and removes the stores.
load helpers

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	need_mpirun
	# what sw_mpirun sets on its command line, for the mpirun sw-run starts (under make check,
	# LeakSanitizer would report what Open MPI keeps until exit); the shared-memory transport's
	# backing files in the test's directory, where a user's own setting goes (sw-run leaves it as
	# it is); the tests of sw-run's own directory for them, /dev/shm/NAME.mpi, unset it
	export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
		OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
		OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_btl_vader_backing_directory="$BATS_TEST_TMPDIR"
	unset SLURM_JOB_ID
	sw-model init --size tiny m >/dev/null
	for i in 1 2 3 4 5 6; do
		printf '{"id":"q%d","prompt":"%d+1=","label":"%d"}\n' "$i" "$i" $((i + 1))
	done >prompts.jsonl
}

ROLLOUT='sw-rollout -m "$SW_MODEL" -n "$SW_GROUP" --seed "$SW_SEED" --max-new-tokens 6'
# a trainer whose step moves the weights (GRPO's advantages are all 0 on the tiny model's samples)
SFT='sw-train --algo sft --lr 1e-3 --metrics "$SW_TRAIN_METRICS"'
# a stand-in trainer that runs as ranks: rank 0 passes the samples through (the others have no input)
CAT='sh -c '\''[ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ] || exec sw-cat'\'

# The stores a run in directory $1 used (its sort stage notes them), and how many of them still exist.
noting_sort='echo "$SW_WEIGHTS" >>"$SW_RUN/stores"; cat'
left() {
	local w
	for w in $(sort -u "$1/stores"); do ls -d /dev/shm/"${w#shm:}"{,.opt,.ref} 2>/dev/null; done | wc -l
}

# bin/srun: a stand-in for Slurm's, which notes its command line and starts the ranks with mpirun
fake_srun() {
	mkdir -p bin
	cat >bin/srun <<-'EOF'
		#!/bin/sh
		echo "srun $*" >>"$SW_RUN/launched"
		[ "$1 $3 $4 $5" = "-n --overlap --input=0 --kill-on-bad-exit=1" ] || exit 9
		n=$2
		shift 5
		exec mpirun -np "$n" "$@"
	EOF
	chmod +x bin/srun
}

@test "--ranks 2: the samples of one process; ranks, launcher and the ranks' imbalance in config, audit log and metrics" {
	run -0 sw-run -q -m m -p prompts.jsonl -o one --iters 2 -b 4 -n 2 --rollout "$ROLLOUT" --train "$CAT"
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o two --iters 2 -b 4 -n 2 --ranks 2 \
		--rollout "$ROLLOUT" --train "$CAT"
	[ "$output" = "" ]
	for i in 1 2; do
		cmp <(zstd -dc one/samples/iter-000$i.msgpack.zst) <(zstd -dc two/samples/iter-000$i.msgpack.zst)
	done
	grep -qx 'ranks 2' two/config
	run ! grep '^ranks' one/config
	# the stages ran as the audit log says, the launcher before the ranked ones
	run -0 sh -c "grep -o '\"cmd\":\"[^\"]*' two/audit.log | sort -u"
	[[ $output == *'"cmd":"mpirun -np \'* ]]
	grep -q '"cmd":"mpirun -np \\"$SW_RANKS\\" sw-rollout -m' two/audit.log
	grep -q '"cmd":"mpirun -np \\"$SW_RANKS\\" sh -c ' two/audit.log
	grep -q '"cmd":"sw-balance -n \\"$SW_RANKS\\" --stats' two/audit.log
	grep -q '"cmd":"sh -c ' one/audit.log
	run ! grep -q '"cmd":"mpirun' one/audit.log
	# the generator's ranks said how long each worked
	run -0 jq -c 'select(.eval | not) | [(.rank_imbalance.rollout >= 1 and .rank_imbalance.rollout < 10)]' two/metrics.jsonl
	[ "$output" = "$(printf '[true]\n[true]')" ]
	run -0 jq -c 'select(.eval | not) | .rank_imbalance' one/metrics.jsonl
	[ "$output" = "$(printf 'null\nnull')" ]
	run -0 sw-audit verify two
	# (sw-run(1)'s example of --ranks 2 runs as written in man-examples.bats)
	# the config repeats the run, ranks and all
	run -0 sw-run -q -c two/config -o three
	cmp <(zstd -dc two/samples/iter-0002.msgpack.zst) <(zstd -dc three/samples/iter-0002.msgpack.zst)
}

@test "--ranks 2 end to end with the tiny model and the real stages: the trainer as 2 ranks, the weights of one process" {
	# GRPO as it comes: every stage real, the trainer's ranks on the run's store
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o grpo --iters 2 -b 4 -n 2 --ranks 2 --rollout "$ROLLOUT"
	[ "$output" = "" ]
	grep -q '"cmd":"mpirun -np \\"$SW_RANKS\\" sw-train --algo grpo' grpo/audit.log
	[ "$(jq -s 'map(select(.eval | not) | .loss | type) | unique' grpo/metrics.jsonl | jq -c .)" = '["number"]' ]
	run -0 sw-audit verify grpo
	# a step that moves the weights: one process on the stream balanced for 2 ranks, and 2 ranks,
	# each rank noting itself
	train="sh -c 'echo \"\$OMPI_COMM_WORLD_RANK \$\$\" >>\"\$SW_RUN/trainers\"; exec $SFT'"
	run -0 sw-run -q -m m -p prompts.jsonl -o one --iters 2 -b 4 -n 2 --rollout "$ROLLOUT" --train "$SFT" \
		--balance 'sw-balance -n 2 --stats "$SW_BALANCE_STATS"'
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o two --iters 2 -b 4 -n 2 --ranks 2 \
		--rollout "$ROLLOUT" --train "$train"
	[ "$output" = "" ]
	# N train processes an iteration, ranks 0 and 1
	[ "$(wc -l <two/trainers)" = 4 ]
	[ "$(cut -d' ' -f1 two/trainers | sort | uniq -c | awk '{ print $1 "x" $2 }' | tr '\n' ' ')" = "2x0 2x1 " ]
	[ "$(cut -d' ' -f2 two/trainers | sort -u | wc -l)" = 4 ]
	# iteration 1 (the same samples): the pass-through of one process, the weights within the
	# tolerance of tests/sw-train-mpi.bats, the training moved them
	cmp <(zstd -dc one/samples/iter-0001.msgpack.zst) <(zstd -dc two/samples/iter-0001.msgpack.zst)
	cmp <(zstd -dc one/samples/iter-0001.train.msgpack.zst) <(zstd -dc two/samples/iter-0001.train.msgpack.zst)
	d=$(maxdiff one/ckpt/iter-0001 two/ckpt/iter-0001)
	echo "max |w1 - w2| = $d"
	awk -v d="$d" 'BEGIN { exit !(d <= 2e-5) }'
	d=$(maxdiff m two/ckpt/iter-0001)
	awk -v d="$d" 'BEGIN { exit !(d > 1e-4) }'
	# the store went on from version to version: rank 0 trained it in place
	[ "$(jq -c -s 'map(select(.eval | not) | .weight_version)' two/metrics.jsonl)" = '[1,2]' ]
	[ "$(jq -s 'map(select(.eval | not) | .loss | type) | unique' two/metrics.jsonl | jq -c .)" = '["number"]' ]
	# the trainer's ranks said how long each worked
	[ "$(jq -c -s 'map(select(.eval | not) | .rank_imbalance | keys) | unique' two/metrics.jsonl)" = '[["rollout","train"]]' ]
	run -0 jq -c 'select(.eval | not) | .rank_imbalance.train >= 1 and .rank_imbalance.train < 10' two/metrics.jsonl
	[ "$output" = "$(printf 'true\ntrue')" ]
	# at a fixed number of ranks the same bits, run after run
	run -0 sw-run -q -m m -p prompts.jsonl -o three --iters 2 -b 4 -n 2 --ranks 2 --rollout "$ROLLOUT" --train "$SFT"
	cmp two/ckpt/iter-0002/model.safetensors three/ckpt/iter-0002/model.safetensors
	cmp two/ckpt/iter-0002/optimizer.bin three/ckpt/iter-0002/optimizer.bin
	run -0 sw-audit verify two
}

@test "--ranks 2: a bad sample of rank 1's stops the run with rank 1's message on the terminal" {
	# balance hands rank 1 samples with a token outside the vocabulary
	bad='sw-balance -n "$SW_RANKS" -f json --stats "$SW_BALANCE_STATS" | jq -c "if .rank == 1 then .response_tokens = [99999] else . end"'
	run -1 --separate-stderr sw-run -q -m m -p prompts.jsonl -o run --iters 1 -b 4 -n 2 --ranks 2 --rollout "$ROLLOUT" \
		--sort "$noting_sort" --balance "$bad"
	[ "$output" = "" ]
	[ "$(grep '^sw-train:' <<<"$stderr" | sort -u)" = "sw-train: rank 1: stdin: record 5: field 'response_tokens' holds token 99999, outside the model's vocabulary of 261" ]
	[[ $stderr == *"sw-run: iteration 1: stage 'train' exited with status 1 (mpirun -np \"\$SW_RANKS\" sw-train --algo grpo"* ]]
	[ "$(left run)" = 0 ]
}

@test "--launcher CMD starts the ranks; inside a Slurm allocation the default is srun" {
	cat >launch <<-'EOF'
		#!/bin/sh
		echo "launch $*" >>"$SW_RUN/launched"
		exec mpirun -np "$SW_RANKS" "$@"
	EOF
	chmod +x launch
	run -0 sw-run -q -m m -p prompts.jsonl -o run --iters 1 -b 2 -n 2 --ranks 2 --launcher "$PWD/launch" \
		--rollout "$ROLLOUT" --train "$CAT"
	[ "$(grep -c '^launch sw-rollout -m ' run/launched)" = 1 ]
	[ "$(grep -c '^launch sh -c ' run/launched)" = 1 ]
	[ "$(wc -l <run/launched)" = 2 ]
	grep -qx "launcher $PWD/launch" run/config
	# srun as Slurm has it: -n N, steps sharing the CPUs, standard input to task 0, the step ended when a task fails
	fake_srun
	run -0 env SLURM_JOB_ID=42 PATH="$PWD/bin:$PATH" sw-run -q -m m -p prompts.jsonl -o slurm --iters 1 -b 2 -n 2 \
		--ranks 2 --rollout "$ROLLOUT" --train "$CAT"
	[ "$(grep -c '^srun -n 2 --overlap --input=0 --kill-on-bad-exit=1 sw-rollout' slurm/launched)" = 1 ]
	[ "$(grep -c '^srun -n 2 --overlap --input=0 --kill-on-bad-exit=1 sh -c ' slurm/launched)" = 1 ]
	grep -q '"cmd":"srun -n \\"$SW_RANKS\\" --overlap --input=0 --kill-on-bad-exit=1 sw-rollout' slurm/audit.log
	cmp <(zstd -dc run/samples/iter-0001.msgpack.zst) <(zstd -dc slurm/samples/iter-0001.msgpack.zst)
	# a launcher that fails is a stage that fails, named with its command line
	run -1 --separate-stderr sw-run -q -m m -p prompts.jsonl -o bad --iters 1 -b 2 -n 2 --ranks 2 --launcher false
	[[ $stderr == *"iteration 1: stage 'rollout' exited with status 1 (false sw-rollout -m "* ]]
	run -2 --separate-stderr sw-run -m m -p prompts.jsonl -o x --ranks 0
	[ "${stderr_lines[0]}" = "sw-run: option '--ranks' wants a whole number from 1 to 4096, not '0'" ]
	[ "$output" = "" ]
	run -2 --separate-stderr sw-run -m m -p prompts.jsonl -o x --launcher ''
	[[ $stderr == "sw-run: --launcher: the command is empty"* ]]
}

# A stage's ranks each note their process id: the generators in RUN/pids, the trainers in RUN/tpids.
noting_rollout="sh -c 'echo \$\$ >>\"\$SW_RUN/pids\"; exec $ROLLOUT --max-new-tokens 200'"
noting_train="sh -c 'echo \$\$ >>\"\$SW_RUN/tpids\"; sleep 0.3; [ \"\${OMPI_COMM_WORLD_RANK:-0}\" != 0 ] || exec sw-cat'"

# Iteration 1 done, and iteration 2's generator and train ranks started, in run directory $1.
iter2_started() {
	[ -e "$1/samples/iter-0001.msgpack.zst" ] || return 1
	[ "$(cat "$1/pids" 2>/dev/null | wc -l)" -ge 4 ] || return 1
	[ "$(cat "$1/tpids" 2>/dev/null | wc -l)" -ge 4 ]
}
wait_iter2() {
	for i in $(seq 300); do
		if iter2_started "$1"; then break; fi
		sleep 0.05
	done
	[ "$(wc -l <"$1/pids")" -ge 4 ]
	[ "$(wc -l <"$1/tpids")" -ge 4 ]
}

# sw-run with ranks in directory $1 in the background ($pid; its standard error to $2, default
# /dev/null), once its iteration 2's ranks are under way.
start_ranked_run() {
	sw-run -q -m m -p prompts.jsonl -o "$1" --iters 50 -b 4 -n 2 --ranks 2 --sort "$noting_sort" \
		--rollout "$noting_rollout" --train "$noting_train" 2>"${2:-/dev/null}" &
	pid=$!
	wait_iter2 "$1"
}

# The directory of the shared memory of the ranks of the run in $1 (its sort stage noted the stores).
mpi_dir() {
	local w
	w=$(sort -u "$1/stores")
	echo "/dev/shm/${w#shm:}.mpi"
}

@test "--ranks 2: Open MPI's shared-memory files and session directories in a directory of the run's own beside its stores, gone when the run ends" {
	unset OMPI_MCA_btl_vader_backing_directory
	# a train stage (not MPI itself) that notes where the ranks are told to keep it, and what the
	# generator ranks (MPI programs) put there while they run
	local watch="sh -c 'echo \"\$OMPI_MCA_btl_vader_backing_directory \$OMPI_MCA_btl_sm_backing_directory\" >>\"\$SW_RUN/mpidir\"
		echo \"\$OMPI_MCA_orte_tmpdir_base \$PRTE_MCA_prte_top_session_dir\" >>\"\$SW_RUN/tmpdir\"
		for i in \$(seq 200); do ls \"\$OMPI_MCA_btl_vader_backing_directory\" | grep -q ^vader_segment && break; sleep 0.05; done
		ls \"\$OMPI_MCA_btl_vader_backing_directory\" >>\"\$SW_RUN/mpifiles\"
		[ \"\${OMPI_COMM_WORLD_RANK:-0}\" != 0 ] || exec sw-cat'"
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o run --iters 1 -b 4 -n 2 --ranks 2 \
		--sort "$noting_sort" --rollout "$noting_rollout" --train "$watch"
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	d=$(mpi_dir run)
	[ "$(sort -u run/mpidir)" = "$d $d" ]
	[ "$(sort -u run/tmpdir)" = "$d $d" ]
	grep -q '^vader_segment\.' run/mpifiles
	# the train stage's own launcher's session directory
	grep -q '^ompi\.' run/mpifiles
	[ ! -e "$d" ]
	# a user's own setting wins
	run -0 --separate-stderr env OMPI_MCA_btl_vader_backing_directory="$BATS_TEST_TMPDIR" sw-run -q -m m \
		-p prompts.jsonl -o own --iters 1 -b 4 -n 2 --ranks 2 --sort "$noting_sort" --rollout "$ROLLOUT" --train "$watch"
	[ "$(sort -u own/mpidir)" = "$BATS_TEST_TMPDIR $(mpi_dir own)" ]
}

@test "the next sw-run sweeps a killed run's shared-memory directory, not a running run's" {
	unset OMPI_MCA_btl_vader_backing_directory
	# a killed run's: no store of that name left
	stale=/dev/shm/sw-run-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n').mpi
	mkdir -m 700 "$stale"
	: >"$stale/vader_segment.x.0"
	# a running one's
	start_ranked_run live
	d=$(mpi_dir live)
	[ -d "$d" ]
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o other --iters 1 -b 4 -n 2 --rollout "$ROLLOUT" --train "$CAT"
	[ ! -e "$stale" ]
	[ -d "$d" ]
	kill -TERM $pid
	status=0
	wait $pid || status=$?
	[ "$status" -eq 143 ]
	[ ! -e "$d" ]
}

# The run in $1 goes on after its kill: the real trainer's ranks train iteration 3 on, no store is left.
resumes() {
	run -0 sw-run -q --resume "$1" --iters 3 --rollout "$ROLLOUT" --train "$SFT"
	[ "$(left "$1")" = 0 ]
	[ "$(jq -s 'map(select(.eval | not)) | last | .iter' "$1/metrics.jsonl")" = 3 ]
	[ "$(jq -s 'map(select(.eval | not)) | last | .loss | type' "$1/metrics.jsonl")" = '"number"' ]
	grep -q '"event":"resume"' "$1/audit.log"
	grep -q '"cmd":"mpirun -np \\"$SW_RANKS\\" sw-train --algo sft' "$1/audit.log"
}

@test "--ranks 2 and SIGTERM mid-run: every rank's process ends, no store is left; --resume goes on" {
	start_ranked_run run err
	kill -TERM $pid
	status=0
	wait $pid || status=$?
	[ "$status" -eq 143 ]
	[ "$(left run)" = 0 ]
	for p in $(cat run/pids run/tpids); do
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		run ! kill -0 "$p"
	done
	run -0 cat err
	[[ $output == *"sw-run: interrupted (Terminated) in iteration "*"; the run goes on from run/ckpt/iter-000"*" with: sw-run --resume run" ]]
	resumes run
}

@test "README: running under MPI on one machine, as written, from the top of a tree" {
	# a tree of its own (setup made a model m here)
	mkdir tree
	cd tree
	readme_block_k "Data parallel: MPI and Slurm" 1 >mpi.sh
	grep -q '^mpirun -np 2 sw-rollout -m m ' mpi.sh
	grep -q '^mpirun -np 2 sw-train -m m -o m2 --shard-moments ' mpi.sh
	grep -q '^sw-run -m m -p examples/prompts.jsonl -o runs/dp .* --ranks 2 ' mpi.sh
	ln -s "${SW_BIN%/bin}" build
	ln -s "$TOP/examples" examples
	run -0 --separate-stderr env PATH=/usr/bin:/bin bash -eo pipefail mpi.sh
	[ "$(sw-cat -c dp.msgpack)" = 32 ]
	# the two trainer ranks: one metrics record that says so (the block prints it), every sample through
	[ "$(jq -c .ranks <<<"$output")" = 2 ]
	[ "$(jq .ranks metrics.jsonl)" = 2 ]
	[ "$(sw-cat -c trained.msgpack)" = 32 ]
	[ "$(jq .version m2/trainer_state.json)" = 1 ]
	run -0 sw-audit verify runs/dp
	[ "$(jq -c -s 'map(select(.eval | not) | .rank_imbalance | keys) | unique' runs/dp/metrics.jsonl)" = '[["rollout","train"]]' ]
}

@test "examples/slurm/sw-run.sbatch in an allocation (srun standing in): sw-run --ranks SLURM_NTASKS, then a requeue resumes" {
	fake_srun
	run -0 --separate-stderr env SLURM_JOB_ID=7 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=1 PATH="$PWD/bin:$PATH" \
		bash "$TOP/examples/slurm/sw-run.sbatch" m prompts.jsonl runs/slurm -q --iters 1 -b 2 -n 2 \
		--rollout "$ROLLOUT" --train "$CAT"
	grep -qx 'ranks 2' runs/slurm/config
	[ "$(grep -c '^srun -n 2 --overlap --input=0 --kill-on-bad-exit=1 sw-rollout ' runs/slurm/launched)" = 1 ]
	# the job again, as a requeue runs it: the run goes on
	run -0 --separate-stderr env SLURM_JOB_ID=7 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=1 PATH="$PWD/bin:$PATH" \
		bash "$TOP/examples/slurm/sw-run.sbatch" m prompts.jsonl runs/slurm -q --iters 2
	[ "$(jq -s 'map(select(.eval | not)) | length' runs/slurm/metrics.jsonl)" = 2 ]
	grep -q '"event":"resume"' runs/slurm/audit.log
	run -2 --separate-stderr bash "$TOP/examples/slurm/sw-run.sbatch" m
	[[ $stderr == *"usage: sbatch sw-run.sbatch MODEL PROMPTS RUNDIR"* ]]
}

@test "--ranks 2 and SIGKILL: the guard ends the launchers, the launchers' ranks die with them, the stores and their shared memory go" {
	unset OMPI_MCA_btl_vader_backing_directory
	# where Open MPI's launcher would keep its session directory were it not in the run's
	export TMPDIR=$BATS_TEST_TMPDIR/tmp
	mkdir "$TMPDIR"
	start_ranked_run run
	d=$(mpi_dir run)
	[ -d "$d" ]
	kill -KILL $pid
	wait $pid || true
	# (the guard waits up to 10 s for the stages' group to be gone before it removes anything: under a
	# loaded make test 5 s of polling was once too few)
	for i in $(seq 300); do [ "$(left run)" = 0 ] && [ ! -e "$d" ] && break; sleep 0.05; done
	[ "$(left run)" = 0 ]
	# the launchers died by SIGKILL: their ranks' shared-memory files and their session directories
	# were in the run's directory, gone with it
	[ ! -e "$d" ]
	[ "$(ls -A "$TMPDIR")" = "" ]
	for p in $(cat run/pids run/tpids); do
		for i in $(seq 50); do ended "$p" && break; sleep 0.1; done
		ended "$p"
	done
	resumes run
	[ "$(ls -A "$TMPDIR")" = "" ]
}
