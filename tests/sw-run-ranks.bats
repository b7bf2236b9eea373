#!/usr/bin/env bats
# sw-run --ranks N: the rollout (and an evaluation's) as N ranks under mpirun
# (or srun inside a Slurm allocation, or --launcher CMD), the ranks reading
# the run's one weight store; the samples and the weights those of a run
# without ranks; the config, the audit log and the metrics (rank_imbalance)
# say how it ran; a signal ends every rank and removes the stores.
load helpers

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	need_mpirun
	# what sw_mpirun sets on its command line, for the mpirun sw-run starts (under make check,
	# LeakSanitizer would report what Open MPI keeps until exit)
	export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
		OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
		OMPI_MCA_hwloc_base_binding_policy=none
	unset SLURM_JOB_ID
	sw-model init --size tiny m >/dev/null
	for i in 1 2 3 4 5 6; do
		printf '{"id":"q%d","prompt":"%d+1=","label":"%d"}\n' "$i" "$i" $((i + 1))
	done >prompts.jsonl
}

ROLLOUT='sw-rollout -m "$SW_MODEL" -n "$SW_GROUP" --seed "$SW_SEED" --max-new-tokens 6'

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
	run -0 sw-run -q -m m -p prompts.jsonl -o one --iters 2 -b 4 -n 2 --rollout "$ROLLOUT" --train sw-cat
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o two --iters 2 -b 4 -n 2 --ranks 2 \
		--rollout "$ROLLOUT" --train sw-cat
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
	grep -q '"cmd":"sw-cat"' two/audit.log
	run ! grep -q '"cmd":"mpirun' one/audit.log
	# the generator's ranks said how long each worked
	run -0 jq -c 'select(.eval | not) | [(.rank_imbalance.rollout >= 1 and .rank_imbalance.rollout < 10)]' two/metrics.jsonl
	[ "$output" = "$(printf '[true]\n[true]')" ]
	run -0 jq -c 'select(.eval | not) | .rank_imbalance' one/metrics.jsonl
	[ "$output" = "$(printf 'null\nnull')" ]
	run -0 sw-audit verify two
	# sw-run(1)'s EXAMPLE, as written but for the short run
	run -0 sh -c "grep -x 'sw-run -m model -p prompts.jsonl -o runs/dp --iters 20 --ranks 2' '$TOP/man/sw-run.1'"
	cp -r m model
	run -0 sw-run -q -m model -p prompts.jsonl -o runs/dp --iters 20 --ranks 2 --iters 1 -b 2 -n 2 \
		--rollout "$ROLLOUT" --train sw-cat
	# the config repeats the run, ranks and all
	run -0 sw-run -q -c two/config -o three
	cmp <(zstd -dc two/samples/iter-0002.msgpack.zst) <(zstd -dc three/samples/iter-0002.msgpack.zst)
}

@test "--ranks 2 end to end with the tiny model and the real stages: the weights of a run without ranks, bit for bit" {
	run -0 sw-run -q -m m -p prompts.jsonl -o one --iters 2 -b 4 -n 2 --rollout "$ROLLOUT"
	run -0 --separate-stderr sw-run -q -m m -p prompts.jsonl -o two --iters 2 -b 4 -n 2 --ranks 2 --rollout "$ROLLOUT"
	[ "$output" = "" ]
	for i in 1 2; do
		cmp <(zstd -dc one/samples/iter-000$i.train.msgpack.zst) <(zstd -dc two/samples/iter-000$i.train.msgpack.zst)
	done
	cmp one/ckpt/iter-0002/model.safetensors two/ckpt/iter-0002/model.safetensors
	# the trainer trained (its loss is in the metrics), as one process beside the generator's two ranks
	[ "$(jq -s 'map(select(.eval | not) | .loss | type) | unique' one/metrics.jsonl | jq -c .)" = '["number"]' ]
	grep -q '"cmd":"sw-train --algo grpo' two/audit.log
	run -0 sw-audit verify two
}

@test "--launcher CMD starts the ranks; inside a Slurm allocation the default is srun" {
	cat >launch <<-'EOF'
		#!/bin/sh
		echo "launch $*" >>"$SW_RUN/launched"
		exec mpirun -np "$SW_RANKS" "$@"
	EOF
	chmod +x launch
	run -0 sw-run -q -m m -p prompts.jsonl -o run --iters 1 -b 2 -n 2 --ranks 2 --launcher "$PWD/launch" \
		--rollout "$ROLLOUT" --train sw-cat
	[ "$(grep -c '^launch sw-rollout -m ' run/launched)" = 1 ]
	[ "$(wc -l <run/launched)" = 1 ]
	grep -qx "launcher $PWD/launch" run/config
	# srun as Slurm has it: -n N, steps sharing the CPUs, standard input to task 0, the step ended when a task fails
	fake_srun
	run -0 env SLURM_JOB_ID=42 PATH="$PWD/bin:$PATH" sw-run -q -m m -p prompts.jsonl -o slurm --iters 1 -b 2 -n 2 \
		--ranks 2 --rollout "$ROLLOUT" --train sw-cat
	[ "$(grep -c '^srun -n 2 --overlap --input=0 --kill-on-bad-exit=1 sw-rollout' slurm/launched)" = 1 ]
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

@test "--ranks 2 and SIGTERM mid-run: every rank's process ends, no store is left; --resume goes on" {
	# each rank notes its process id
	rollout="sh -c 'echo \$\$ >>\"\$SW_RUN/pids\"; exec $ROLLOUT --max-new-tokens 200'"
	train="sh -c 'echo \$\$ >>\"\$SW_RUN/pids\"; sleep 0.3; exec sw-cat'"
	sw-run -q -m m -p prompts.jsonl -o run --iters 50 -b 4 -n 2 --ranks 2 --sort "$noting_sort" \
		--rollout "$rollout" --train "$train" 2>err &
	pid=$!
	# iteration 1's two generator ranks and trainer, iteration 2's generator ranks
	for i in $(seq 300); do [ -e run/samples/iter-0001.msgpack.zst ] && [ "$(wc -l <run/pids)" -ge 5 ] && break; sleep 0.05; done
	[ "$(wc -l <run/pids)" -ge 5 ]
	kill -TERM $pid
	status=0
	wait $pid || status=$?
	[ "$status" -eq 143 ]
	[ "$(left run)" = 0 ]
	for p in $(cat run/pids); do
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		run ! kill -0 "$p"
	done
	run -0 cat err
	[[ $output == *"sw-run: interrupted (Terminated) in iteration "*"; the run goes on from run/ckpt/iter-000"*" with: sw-run --resume run" ]]
	run -0 sw-run -q --resume run --iters 2 --rollout "$ROLLOUT" --train sw-cat
	[ "$(left run)" = 0 ]
}

# The K-th block of indented lines of the README's section on MPI, as a script: mpi_block K.
mpi_block() {
	awk -v k="$1" '$0 == "## Running under MPI and Slurm" { on = 1; next } on && /^## / { exit }
		on && /^    / { if (!inblk) { n++; inblk = 1 } if (n == k) print substr($0, 5); next }
		on && /^$/ { if (n == k && inblk) print; next } on { inblk = 0 }' "$TOP/README.md"
}

@test "README: running under MPI on one machine, as written, from the top of a tree" {
	# a tree of its own (setup made a model m here)
	mkdir tree
	cd tree
	mpi_block 1 >mpi.sh
	grep -q '^mpirun -np 2 sw-rollout -m m ' mpi.sh
	grep -q '^sw-run -m m -p examples/prompts.jsonl -o runs/dp .* --ranks 2 ' mpi.sh
	ln -s "${SW_BIN%/bin}" build
	ln -s "$TOP/examples" examples
	run -0 --separate-stderr env PATH=/usr/bin:/bin bash -eo pipefail mpi.sh
	[ "$(sw-cat -c dp.msgpack)" = 32 ]
	run -0 sw-audit verify runs/dp
	[ "$(jq -c -s 'map(select(.eval | not) | .rank_imbalance | keys) | unique' runs/dp/metrics.jsonl)" = '[["rollout"]]' ]
}

@test "examples/slurm/sw-run.sbatch in an allocation (srun standing in): sw-run --ranks SLURM_NTASKS, then a requeue resumes" {
	fake_srun
	run -0 --separate-stderr env SLURM_JOB_ID=7 SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=1 PATH="$PWD/bin:$PATH" \
		bash "$TOP/examples/slurm/sw-run.sbatch" m prompts.jsonl runs/slurm -q --iters 1 -b 2 -n 2 \
		--rollout "$ROLLOUT" --train sw-cat
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

@test "--ranks 2 and SIGKILL: the guard ends the launcher, the launcher's ranks die with it, the stores go" {
	rollout="sh -c 'echo \$\$ >>\"\$SW_RUN/pids\"; exec $ROLLOUT --max-new-tokens 200'"
	sw-run -q -m m -p prompts.jsonl -o run --iters 50 -b 4 -n 2 --ranks 2 --sort "$noting_sort" \
		--rollout "$rollout" --train 'sleep 0.3; sw-cat' 2>/dev/null &
	pid=$!
	for i in $(seq 300); do [ -e run/samples/iter-0001.msgpack.zst ] && [ "$(wc -l <run/pids 2>/dev/null)" -ge 4 ] && break; sleep 0.05; done
	[ "$(wc -l <run/pids)" -ge 4 ]
	kill -KILL $pid
	wait $pid || true
	for i in $(seq 100); do [ "$(left run)" = 0 ] && break; sleep 0.05; done
	[ "$(left run)" = 0 ]
	for p in $(cat run/pids); do
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		run ! kill -0 "$p"
	done
	run -0 sw-run -q --resume run --iters 2 --rollout "$ROLLOUT" --train sw-cat
	[ "$(left run)" = 0 ]
}
