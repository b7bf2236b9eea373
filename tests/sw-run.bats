#!/usr/bin/env bats
# sw-run: the iteration loop with stand-in stages (tests/run-stages/), so
# that what sw-run itself does is tested on its own: the run directory,
# metrics, evaluations, checkpoints, the audit log, stage failures, the
# monitors' degrade and halt, resuming, and the stores it must remove
# however a run ends.  tests/run-e2e.bats runs the real programs.
load helpers

STAGES=$TOP/tests/run-stages

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	sw-model init --size tiny m >/dev/null
	for i in 1 2 3 4 5 6; do
		printf '{"id":"q%d","prompt":"%d+1=","label":"%d"}\n' "$i" "$i" $((i + 1))
	done >prompts.jsonl
	head -2 prompts.jsonl >eval.jsonl
	cat >exp <<-EOF2
		# a small experiment with stand-in stages
		model m
		prompts prompts.jsonl
		eval eval.jsonl
		iters 3
		batch 2
		--group 2
		eval-every 2
		rollout $STAGES/rollout.sh
		eval-rollout $STAGES/rollout.sh
		verify sw-verify -r math
		train sw-cat
		sort $noting_sort
	EOF2
}

# The stores a run in directory $1 used (its sort stage notes them), and how many of them still exist.
noting_sort='echo "$SW_WEIGHTS" >>"$SW_RUN/stores"; cat'
left() {
	local n=0 w
	for w in $(sort -u "$1/stores"); do
		for f in "/dev/shm/${w#shm:}" "/dev/shm/${w#shm:}.opt" "/dev/shm/${w#shm:}.ref"; do
			[ -e "$f" ] && n=$((n + 1))
		done
	done
	echo $n
}

@test "a run: the run directory, metrics, evaluations, checkpoints, a valid audit log" {
	run -0 --separate-stderr sw-run -v -c exp -o run
	[ "$output" = "" ]
	[[ ${stderr_lines[0]} == "sw-run: eval after iteration 0: accuracy 50.0%, violation rate 0.0% (4 prompts)" ]]
	[[ $stderr == *"sw-run: iter 3/3: reward 0.500, accuracy 50.0%, violations 0.0%"* ]]
	[[ ${stderr_lines[-1]} == "sw-run: 3 iterations done; the run is in run (audit head "*")" ]]
	for f in config metrics.jsonl audit.log pool state samples/iter-0001.msgpack.zst \
	         samples/iter-0003.msgpack.zst samples/eval-0000.msgpack.zst ckpt/iter-0003/config.json \
	         ckpt/iter-0003/model.safetensors ckpt/iter-0003/tokenizer.json ckpt/iter-0003/state.json; do
		[ -e "run/$f" ] || { echo "missing $f"; false; }
	done
	[ ! -e run/HALT ]
	# evaluations before the first iteration, every 2, after the last
	run -0 jq -c 'select(.eval) | .iter' run/metrics.jsonl
	[ "$(echo $output)" = "0 2 3" ]
	run -0 jq -c 'select(.eval | not) | [.iter, .reward_mean, .accuracy, .samples, .rewards.math]' run/metrics.jsonl
	[ "${lines[0]}" = "[1,0.5,0.5,4,0.5]" ]
	[ "${#lines[@]}" -eq 3 ]
	run -0 jq -e 'select(.eval | not) | .time_s.rollout > 0 and .time_s.iteration > 0 and .rss_mb.rollout > 1 and
		.monitor_overhead >= 0 and .monitor_overhead < 0.5 and .tokens_per_s > 0 and (.kl == null)' run/metrics.jsonl
	# every iteration's samples, whole
	run -0 sw-cat -c run/samples/iter-0002.msgpack.zst
	[ "$output" = 4 ]
	# a checkpoint is a model directory the programs load
	run -0 sw-model info ckpt=run/ckpt/iter-0003 2>/dev/null || run -0 sw-model info run/ckpt/iter-0003
	run -0 sw-audit verify run
	[[ $output == "run/audit.log: ok: "*" records, 4 checkpoints, head "* ]]
	[ "$(jq -r .event run/audit.log | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')" = \
	  "checkpoint=4 eval=3 iteration=3 run_end=1 run_start=1 stage=27 " ]
	# the config is the resolved experiment, and reads back
	grep -qx 'group 2' run/config
	grep -qx 'select sw-pool take "$SW_POOL" -n "$SW_BATCH"' run/config
	[ -s run/stores ]
	[ "$(left run)" = 0 ]
}

@test "the stages get the run's environment" {
	cat >>exp <<-'EOF2'
		sort env | grep '^SW_' | sort >"$SW_RUN/env-$SW_ITER"; cat
	EOF2
	run -0 sw-run -q -c exp -o run --iters 1 --seed 7
	grep -qx 'SW_ITER=1' run/env-1
	grep -qx "SW_RUN=run" run/env-1
	grep -qx 'SW_GROUP=2' run/env-1
	grep -qx 'SW_BATCH=2' run/env-1
	grep -qx 'SW_SEED=7000022' run/env-1
	grep -qx 'SW_LR_SCALE=1' run/env-1
	grep -q '^SW_WEIGHTS=shm:sw-run-[0-9a-f]\{32\}$' run/env-1
	w=$(sed -n 's/^SW_WEIGHTS=//p' run/env-1)
	grep -qx "SW_OPT=$w.opt" run/env-1
	# the store is gone with the run
	[ ! -e "/dev/shm/${w#shm:}" ]
	# the device: $SW_DEVICE's (else cpu), or --device's, passed on and kept in the config
	grep -qx "SW_DEVICE=${SW_DEVICE:-cpu}" run/env-1
	grep -qx "device ${SW_DEVICE:-cpu}" run/config
	run -0 env SW_DEVICE=cpu sw-run -q -c exp -o run2 --iters 1 --device guard
	grep -qx 'SW_DEVICE=guard' run2/env-1
	grep -qx 'device guard' run2/config
}

@test "a stage that fails stops the run, names itself, keeps the samples; --resume goes on" {
	run -1 --separate-stderr sw-run -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then echo "boom" >&2; exit 4; fi; sw-cat'
	[ "$output" = "" ]
	[ "${stderr_lines[0]}" = "boom" ]
	[[ ${stderr_lines[1]} == "sw-run: iteration 2: stage 'train' exited with status 4 (if [ \"\$SW_ITER\" = 2 ]"*"); the samples so far are in run/samples, the weights are those of the last checkpoint; continue with sw-run --resume run" ]]
	[ -e run/samples/iter-0002.msgpack.zst.failed ]
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	[ "$(left run)" = 0 ]
	run -0 sw-audit verify run
	grep -q '"event":"failure".*"stage":"train"' run/audit.log
	# the failed stage's line stays in run/config; replace it and continue
	run -0 --separate-stderr sw-run -v --resume run --train sw-cat
	[[ $stderr == *"iter 2/3"* && $stderr == *"iter 3/3"* && $stderr != *"iter 1/3"* ]]
	run -0 jq -c 'select(.eval | not) | .iter' run/metrics.jsonl
	[ "$(echo $output)" = "1 2 3" ]
	run -0 sw-audit verify run
	grep -q '"event":"resume"' run/audit.log
}

@test "a verifier that goes bad mid-run: degrade, then halt with exit 3 and HALT" {
	# iteration 2: one prompt of two fails (50%); iteration 3: all of them
	run -3 --separate-stderr sw-run -c exp -o run --iters 5 \
		--monitor verifier_errors=0.01,0.3,0.9 \
		--verify 'sw-verify -r math | sw-cat -f json | jq -c --argjson it "$SW_ITER" "if (\$it == 2 and .group == \"q3\") or \$it >= 3 then . + {verifier_error: \"worker died\"} else . end" | sw-cat'
	[[ $stderr == *"sw-run: iteration 2: monitor 'verifier_errors' at 0.5 degrades the run: learning rate scale now 0.5"* ]]
	[[ $stderr == *"sw-run: halted: monitor 'verifier_errors' at 1, past its hard threshold 0.9"*"(see run/HALT; continue with sw-run --resume run)"* ]]
	[[ "$(cat run/HALT)" == "iteration 3: monitor 'verifier_errors' at 1, past its hard threshold 0.9"* ]]
	run -0 jq -c 'select(.eval | not) | [.iter, .verifier_error_rate, .monitors, .lr_scale]' run/metrics.jsonl
	[ "${lines[0]}" = '[1,0,null,1]' ]
	[ "${lines[1]}" = '[2,0.5,"verifier_errors:degrade",1]' ]
	# every sample failed: balance set them all aside and the trainer had none, but the monitor says why
	[ "${lines[2]}" = '[3,1,"verifier_errors:hard",null]' ]
	[[ "$(cat run/HALT)" == *"(and stage 'train' failed)" ]]
	grep -q '"event":"halt"' run/audit.log
	[ "$(cat run/state)" = "ckpt/iter-0002" ]
	[ "$(left run)" = 0 ]
	run -0 sw-audit verify run
}

@test "stores are removed when a run is interrupted, and a killed run's at the next start" {
	sw-run -q -c exp -o run --iters 50 --train 'sleep 0.2; sw-cat' &
	pid=$!
	for i in $(seq 100); do [ -e run/samples/iter-0001.msgpack.zst ] && break; sleep 0.1; done
	kill -TERM $pid
	wait $pid || status=$?
	[ "$status" -eq 143 ]
	[ "$(left run)" = 0 ]
	# SIGKILL leaves the stores; the next sw-run sweeps them.  The stages die with sw-run.
	sw-run -q -c exp -o run2 --iters 50 --train 'echo $$ >"$SW_RUN/train.pid"; sleep 0.5; sw-cat' &
	pid=$!
	for i in $(seq 100); do [ -e run2/samples/iter-0001.msgpack.zst ] && [ -s run2/train.pid ] && break; sleep 0.1; done
	kill -KILL $pid
	wait $pid || true
	[ "$(left run2)" -ge 1 ]
	stage=$(cat run2/train.pid)
	for i in $(seq 50); do kill -0 "$stage" 2>/dev/null || break; sleep 0.1; done
	run ! kill -0 "$stage"
	run -0 --separate-stderr sw-run -c exp -o run3 --iters 1
	[[ $stderr == *"removed "*" weight store"*" a killed run left behind"* ]]
	[ "$(left run2)" = 0 ]
	[ "$(left run3)" = 0 ]
	# and the killed run resumes
	run -0 sw-run -q --resume run2 --iters 2 --train sw-cat
	run -0 sw-audit verify run2
}

@test "bad input: each a clear error" {
	run -2 --separate-stderr sw-run -o run -p prompts.jsonl
	[ "${stderr_lines[0]}" = "sw-run: no model: give --model DIR (or 'model DIR' in the experiment)" ]
	run -2 --separate-stderr sw-run -m m -o run
	[ "${stderr_lines[0]}" = "sw-run: no prompts: give --prompts FILE (or 'prompts FILE' in the experiment)" ]
	run -2 --separate-stderr sw-run -m m -p prompts.jsonl
	[ "${stderr_lines[0]}" = "sw-run: no run directory: give --out DIR" ]
	printf 'iters 3\nbogus 1\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 2: unknown setting 'bogus'" ]
	printf 'iters three\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: option '--iters' wants a whole number from 1 to 1000000, not 'three'" ]
	printf 'ref 1\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 1: 'ref' takes no value" ]
	run -2 --separate-stderr sw-run -c exp -o run --monitor kl=3,2,1
	[ "${stderr_lines[0]}" = "sw-run: monitor 'kl=3,2,1': the levels must rise from warn to hard" ]
	run -2 --separate-stderr sw-run -c exp -o run --monitor nope=1,2,3
	[ "${stderr_lines[0]}" = "sw-run: no monitor named 'nope'" ]
	run -1 --separate-stderr sw-run -c nonexistent -o run
	[ "${stderr_lines[0]}" = "sw-run: cannot open 'nonexistent': No such file or directory" ]
	mkdir full && touch full/x
	run -1 --separate-stderr sw-run -c exp -o full
	[ "${stderr_lines[0]}" = "sw-run: 'full' exists and is not empty (continue a run there with --resume full)" ]
	run -1 --separate-stderr sw-run -c exp -o run -m nomodel
	[[ ${stderr_lines[0]} == "sw-run: cannot load 'nomodel' into a weight store: "* ]]
	[ ! -e run/state ]
	run -1 --separate-stderr sw-run --resume nowhere
	[[ ${stderr_lines[0]} == "sw-run: cannot open 'nowhere/config': No such file or directory" ]]
	run -2 --separate-stderr sw-run -c exp --resume run
	[[ ${stderr_lines[0]} == "sw-run: --resume continues a run with its own config: give one of -c and --resume" ]]
	run -2 --separate-stderr sw-run -c exp -o run --device tpu
	[ "${stderr_lines[0]}" = "sw-run: unknown device 'tpu' (known: cpu, guard)" ]
	printf 'device tpu\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 1: unknown device 'tpu' (known: cpu, guard)" ]
	run -1 --separate-stderr env SW_DEVICE=tpu sw-run -c exp -o fresh
	[ "$stderr" = "sw-run: SW_DEVICE: unknown device 'tpu' (known: cpu, guard)" ]
	[ ! -e fresh ]
}
