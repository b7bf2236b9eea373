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

# Drop from $stderr the line about stores another killed run left (any start may sweep them, and
# other test suites may be running): what is left is this run's own.
unswept() {
	stderr=$(grep -v 'weight stores\? a killed run left behind' <<<"$stderr" || true)
	mapfile -t stderr_lines <<<"$stderr"
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
	  "checkpoint=4 eval=3 iteration=3 run_end=1 run_start=1 stage=27 verifiers=6 " ]
	# the config is the resolved experiment, and reads back
	grep -qx 'group 2' run/config
	grep -qx 'select sw-pool take "$SW_POOL" -n "$SW_BATCH"' run/config
	[ -s run/stores ]
	[ "$(left run)" = 0 ]
}

@test "the stages get the run's environment" {
	# this test's sort stage in place of setup's (a file sets each option once)
	grep -v '^sort ' exp >exp.new && mv exp.new exp
	cat >>exp <<-'EOF2'
		sort env | grep '^SW_\|^OMP_WAIT_POLICY=\|^GOMP_SPINCOUNT=' | sort >"$SW_RUN/env-$SW_ITER"; cat
	EOF2
	run -0 env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT sw-run -q -c exp -o run --iters 1 --seed 7
	grep -qx 'SW_ITER=1' run/env-1
	# an iteration's stages: no SW_EVAL (an evaluation's stages get SW_EVAL=1: the verifiers records test)
	run ! grep -q '^SW_EVAL=' run/env-1
	# OpenMP's threads spin briefly before they sleep, unless the user says otherwise
	grep -qx 'GOMP_SPINCOUNT=2000' run/env-1
	run ! grep -q '^OMP_WAIT_POLICY=' run/env-1
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
	run -0 env SW_DEVICE=cpu OMP_WAIT_POLICY=passive sw-run -q -c exp -o run2 --iters 1 --device guard
	grep -qx 'SW_DEVICE=guard' run2/env-1
	grep -qx 'device guard' run2/config
	grep -qx 'OMP_WAIT_POLICY=passive' run2/env-1
	run ! grep -q '^GOMP_SPINCOUNT=' run2/env-1
	run -0 env GOMP_SPINCOUNT=7 sw-run -q -c exp -o run3 --iters 1
	grep -qx 'GOMP_SPINCOUNT=7' run3/env-1
}

@test "a stage that fails stops the run, names itself, keeps the samples; --resume goes on" {
	run -1 --separate-stderr sw-run -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then echo "boom" >&2; exit 4; fi; sw-cat'
	unswept
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
	# the start record names the start model's digest (taken while the stores loaded it), and the
	# resume record the digest it was checked against: the start record's
	start=$(jq -r 'select(.event == "run_start") | .model_digest' run/audit.log)
	[ "$start" = "$(sw-audit digest m | cut -d' ' -f1)" ]
	[ "$(jq -r 'select(.event == "resume") | .model_digest' run/audit.log)" = "$start" ]
}

@test "a model directory of links to its files (a Hugging Face cache's snapshot) starts a run, which resumes" {
	mkdir -p hub/blobs hub/snap
	for f in m/*; do
		cp "$f" hub/blobs/
		ln -s "../blobs/${f##*/}" "hub/snap/${f##*/}"
	done
	run -0 --separate-stderr sw-run -q -c exp -o run -m hub/snap --iters 1
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	# the start record's digest is that of the files the links name
	[ "$(jq -r 'select(.event == "run_start") | .model_digest' run/audit.log)" = "$(sw-audit digest m | cut -d' ' -f1)" ]
	run -0 sw-audit verify run
	run -0 --separate-stderr sw-run -q --resume run --iters 2
	[ "$stderr" = "" ]
	run -0 jq -c 'select(.eval | not) | .iter' run/metrics.jsonl
	[ "$(echo $output)" = "1 2" ]
	run -0 sw-audit verify run
	# a link to a directory in it is not a model file: refused before the run starts
	ln -s ../blobs hub/snap/more
	run -1 --separate-stderr sw-run -q -c exp -o run2 -m hub/snap --iters 1
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: hub/snap: hub/snap/more: not a regular file, a directory or a symbolic link to a regular file, so not digested; the run has not started: the same command starts it again" ]
	# as it says: without the link, the same command starts it
	rm hub/snap/more
	run -0 --separate-stderr sw-run -q -c exp -o run2 -m hub/snap --iters 1
	[ "$stderr" = "" ]
	run -0 sw-audit verify run2
}

@test "a /dev/shm too small for the run's stores is said before the run starts, and a store it cannot make names its room" {
	[ "$(id -u)" = 0 ] || skip "mounts a small /dev/shm in a mount namespace: needs root"
	unshare -m true 2>/dev/null || skip "no mount namespaces here"
	# 4 MiB: the weights (3.4 MB) fit, not with the optimiser state the first train stage makes (a container's is 64 MB)
	run -1 --separate-stderr unshare -m sh -c 'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec sw-run -q -c exp -o run --iters 1'
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: the run's stores (the weights and the optimiser state) need 10.3 MB of shared memory, and /dev/shm has 4.2 MB free of 4.2 MB (a container's size is set by --shm-size); the run has not started: the same command starts it again" ]
	[ -z "$(ls run/ckpt)" ]
	[ ! -s run/audit.log ]
	# room at the start, taken before the trainer makes its store (the sort stage fills /dev/shm)
	run -1 --separate-stderr unshare -m sh -c 'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec sw-run -q -c exp -o run --iters 1 \
		--rollout "sw-rollout -m m -n \"\$SW_GROUP\" --max-new-tokens 4" --train "sw-train --algo grpo" \
		--sort "head -c 64M /dev/zero >/dev/shm/fill 2>/dev/null; cat"'
	[ "$output" = "" ]
	[[ ${stderr_lines[0]} =~ ^"sw-train: cannot create the optimiser store: store 'shm:sw-run-"[0-9a-f]+".opt': cannot reserve 6.8 MB of shared memory: /dev/shm has 0.0 MB free of 16.8 MB (a container's size is set by --shm-size)"$ ]]
	[[ ${stderr_lines[1]} == "sw-run: iteration 1: stage 'train' exited with status 1 (sw-train --algo grpo); "* ]]
}

@test "a disk too small for the checkpoints to come is said at the start (and not at a resume that has the room); the run goes on until it fills" {
	[ "$(id -u)" = 0 ] || skip "mounts a small file system in a mount namespace: needs root"
	unshare -m true 2>/dev/null || skip "no mount namespaces here"
	# the tiny model's 0.86M parameters: 3.4 MB of weights, 10.3 MB with sw-train's AdamW moments
	cat >disk.sh <<-'EOF2'
		mkdir d && mount -t tmpfs -o size=12m tmpfs d || exit 9
		sw-run -q -c exp -o d/run --iters 2 --rollout "sw-rollout -m m -n \"\$SW_GROUP\" --max-new-tokens 4" \
			--train "sw-train --algo grpo" 2>first.err
		echo "first $?"
		ls d/run/ckpt
		mount -o remount,size=40m d && sw-run -q --resume d/run 2>second.err
		echo "second $?"
		ls d/run/ckpt
		sw-audit verify d/run >/dev/null && echo verified
	EOF2
	run -0 unshare -m sh disk.sh
	[ "$(echo $output)" = "first 1 iter-0000 second 0 iter-0000 iter-0001 iter-0002 verified" ]
	run cat first.err
	[[ ${lines[0]} == "sw-run: warning: the run's checkpoints will take about 24 MB (3 of 10 MB each, every one kept: --keep-ckpt K keeps the newest K), and the file system of 'd/run' has "*" MB free" ]]
	# (the weights and the optimiser state are written on two threads: either, or a small file after
	# them, may meet the full disk first; in 12 tries by hand: optimizer.bin 10, model.safetensors 1, config.json 1)
	[[ ${lines[1]} =~ ^"sw-run: checkpoint 'd/run/ckpt/iter-0001': d/run/ckpt/.iter-0001.tmp/"[a-z_.]+": write error: No space left on device; continue with sw-run --resume d/run"$ ]]
	[ "${#lines[@]}" -eq 2 ]
	[ ! -s second.err ]
}

@test "--resume: the options given become the run's config; model, prompts and directory are the run's own; a finished run has nothing to do" {
	run -0 sw-run -q -c exp -o run --iters 1
	run -0 sw-run -q --resume run --iters 2 --monitor violation_rate=0.9,0.95,0.99 --monitor violation_rate=off
	[ "$output" = "" ]
	grep -qx 'iters 2' run/config
	# one line a monitor, the last given
	[ "$(grep -c "^monitor violation_rate" run/config)" = 1 ]
	grep -qx 'monitor violation_rate=off' run/config
	# the resume record's digest is that of the config the resumed run ran under
	run -0 jq -r 'select(.event == "resume") | .config_digest' run/audit.log
	[ "$output" = "$(b2sum -l 256 run/config | cut -d" " -f1)" ]
	run -0 jq -r 'select(.event == "run_start") | .config_digest' run/audit.log
	[ "$output" != "$(b2sum -l 256 run/config | cut -d" " -f1)" ]

	# done and ended: nothing to do, nothing touched, however often asked (a requeued job)
	before=$(cat run/audit.log run/config run/state | sha256sum)
	run -0 --separate-stderr sw-run --resume run
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: the run in run has done its 2 iterations and ended: nothing to do (more with --iters)" ]
	run -0 --separate-stderr sw-run -q --resume run
	[ "$stderr" = "" ]
	[ "$(cat run/audit.log run/config run/state | sha256sum)" = "$before" ]
	run -1 --separate-stderr sw-run --resume run --iters 1
	[ "$stderr" = "sw-run: iters 1 is fewer than the 2 iterations the run in 'run' has done: give --iters 2 or more" ]
	[ "$(cat run/audit.log run/config run/state | sha256sum)" = "$before" ]

	# what the run started from cannot change: its weights come from the checkpoint, its prompts from the pool
	cp -r m m2
	for o in "-m m2" "--model m2" "-p eval.jsonl" "-o elsewhere"; do
		run -2 --separate-stderr sw-run --resume run --iters 3 $o
		long=$(case $o in -m*|--model*) echo model ;; -p*) echo prompts ;; *) echo out ;; esac)
		[ "${stderr_lines[0]}" = "sw-run: --$long cannot be given with --resume: the run goes on from its checkpoint with its own model, prompts and directory" ]
		[ "$(cat run/audit.log run/config run/state | sha256sum)" = "$before" ]
	done
	[ ! -e elsewhere ]

	# the model it started from must be what it was: it is the reference, the tokenizer, the checkpoints' tokenizer files
	cp m/config.json m.config.json
	jq '.rms_norm_eps = 0.001' m.config.json >m/config.json
	run -1 --separate-stderr sw-run --resume run --iters 3
	[[ $stderr == "sw-run: the model the run started from, 'm', is not what it was (its digest is "*"..., the run's start record says "*"...): its reference, its tokenizer and its checkpoints' tokenizer files come from it" ]]
	[ "$(cat run/audit.log run/config run/state | sha256sum)" = "$before" ]
	cp m.config.json m/config.json

	# a stage replaced on resume stays replaced: a later plain resume runs it too
	run -1 sw-run -q --resume run --iters 3 --train 'if [ "$SW_ITER" = 3 ]; then exit 4; fi; sw-cat'
	run -1 --separate-stderr sw-run -q --resume run
	[[ $stderr == "sw-run: iteration 3: stage 'train' exited with status 4"* ]]
	run -0 sw-run -q --resume run --train sw-cat
	grep -qx 'train sw-cat' run/config
	run -0 jq -c 'select(.eval | not) | .iter' run/metrics.jsonl
	[ "$(echo $output)" = "1 2 3" ]
	run -0 sw-audit verify run
}

@test "one sw-run at a time in a run directory: a resume or a start beside a live run is refused, nothing touched" {
	# a run whose train stage waits, in iteration 2, until told to go on (at most 60 s: a failed test leaves
	# nothing); it says so once it has read its input, so the stages before it are done (the verify stage
	# appends its record to the audit log as it starts)
	sw-run -q -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then cat >"$SW_RUN/../in2"; touch "$SW_RUN/../waiting"; i=0; while [ ! -e "$SW_RUN/../go" ] && [ $((i += 1)) -lt 1200 ]; do sleep 0.05; done; sw-cat "$SW_RUN/../in2"; else sw-cat; fi' &
	pid=$!
	for _ in $(seq 400); do [ -e waiting ] && break; sleep 0.05; done
	[ -e waiting ]
	before=$(cat run/audit.log run/config run/state | sha256sum)
	# (a timeout: without the lock they would run, and wait on the same stage)
	run -1 --separate-stderr timeout 30 sw-run --resume run --iters 4
	[ "$stderr" = "sw-run: 'run' is in use by another sw-run (one at a time in a run directory)" ]
	run -1 --separate-stderr timeout 30 sw-run -c exp -o run
	[ "$stderr" = "sw-run: 'run' is in use by another sw-run (one at a time in a run directory)" ]
	[ "$(cat run/audit.log run/config run/state | sha256sum)" = "$before" ]
	touch go
	wait "$pid"
	# the run went on undisturbed, and once it ended the directory is free
	run -0 jq -c 'select(.eval | not) | .iter' run/metrics.jsonl
	[ "$(echo $output)" = "1 2 3" ]
	run -0 sw-audit verify run
	[ "$(jq -r 'select(.event == "resume") | .event' run/audit.log)" = "" ]
	run -0 sw-run -q --resume run --iters 4 --train sw-cat
	grep -q '"event":"resume"' run/audit.log
}

@test "--resume checks its checkpoint against the audit log first: a changed, foreign or unrecorded one is refused, nothing touched" {
	run -1 sw-run -q -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then exit 4; fi; sw-cat'
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	cp run/audit.log audit.before
	cp run/ckpt/iter-0001/model.safetensors weights.orig
	# one byte of the weights changed
	printf 'Z' | dd of=run/ckpt/iter-0001/model.safetensors bs=1 seek=200 conv=notrunc status=none
	run -1 --separate-stderr sw-run --resume run --train sw-cat
	unswept
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: cannot resume from run/ckpt/iter-0001: checkpoint 'ckpt/iter-0001' does not match its digest: file 'model.safetensors' changed" ]
	cmp run/audit.log audit.before
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	cp weights.orig run/ckpt/iter-0001/model.safetensors
	# a file added to it
	echo '{}' >run/ckpt/iter-0001/extra.json
	run -1 --separate-stderr sw-run --resume run --train sw-cat
	unswept
	[ "$stderr" = "sw-run: cannot resume from run/ckpt/iter-0001: checkpoint 'ckpt/iter-0001' does not match its digest: file 'extra.json' was added" ]
	rm run/ckpt/iter-0001/extra.json
	# a checkpoint the run never recorded, and a resume point outside the run
	cp -r run/ckpt/iter-0001 run/ckpt/iter-0009
	echo ckpt/iter-0009 >run/state
	run -1 --separate-stderr sw-run --resume run --train sw-cat
	unswept
	[ "$stderr" = "sw-run: cannot resume from run/ckpt/iter-0009: checkpoint 'ckpt/iter-0009': no record of the audit log names it: not a checkpoint this run recorded" ]
	rm -r run/ckpt/iter-0009
	echo ../elsewhere/ckpt/iter-0001 >run/state
	run -1 --separate-stderr sw-run --resume run --train sw-cat
	unswept
	[ "$stderr" = "sw-run: 'run/state' names '../elsewhere/ckpt/iter-0001', not a checkpoint of the run (ckpt/iter-NNNN)" ]
	cmp run/audit.log audit.before
	[ "$(left run)" = 0 ]
	# put back as it was, it resumes, and the log says from which checkpoint, with its digest
	echo ckpt/iter-0001 >run/state
	run -0 sw-run -q --resume run --train sw-cat
	[ "$(cat run/state)" = "ckpt/iter-0003" ]
	run -0 jq -r 'select(.event == "checkpoint" and .path == "ckpt/iter-0001") | .digest' audit.before
	want=$output
	[ ${#want} = 64 ]
	run -0 jq -r 'select(.event == "resume") | [.checkpoint, .checkpoint_digest] | join(" ")' run/audit.log
	[ "$output" = "ckpt/iter-0001 $want" ]
	run -0 sw-audit verify run
}

# tamper.so, for LD_PRELOAD: the Nth open(2) of a path ending in $TAMPER (N: $TAMPER_AT) first flips
# a bit of that file's last byte, as a writer racing the program would between two of its reads.
tamper_so() {
	command -v cc >/dev/null || skip "no C compiler"
	[ -z "${SW_SAN:-}" ] || skip "LD_PRELOAD beside the sanitizers' runtime"
	cat >tamper.c <<-'EOF'
	#define _GNU_SOURCE
	#include <dlfcn.h>
	#include <fcntl.h>
	#include <stdarg.h>
	#include <stdlib.h>
	#include <string.h>
	#include <unistd.h>
	static int seen_;
	static int (*real_(void))(const char *, int, ...) { return (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open"); }
	static void tamper_(const char *path) {
		const char *t = getenv("TAMPER"), *at = getenv("TAMPER_AT");
		size_t n = strlen(path), k = t ? strlen(t) : 0;
		if (!t || !at || n < k || strcmp(path + n - k, t) || ++seen_ != atoi(at))
			return;
		int fd = real_()(path, O_RDWR);
		off_t end = lseek(fd, 0, SEEK_END);
		unsigned char c;
		if (pread(fd, &c, 1, end - 1) == 1) {
			c ^= 1;
			if (pwrite(fd, &c, 1, end - 1) != 1)
				abort();
		}
		close(fd);
	}
	static int open_(const char *path, int flags, va_list ap) {
		mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
		tamper_(path);
		return real_()(path, flags, mode);
	}
	int open(const char *path, int flags, ...) { va_list ap; va_start(ap, flags); int fd = open_(path, flags, ap); va_end(ap); return fd; }
	int open64(const char *path, int flags, ...) { va_list ap; va_start(ap, flags); int fd = open_(path, flags, ap); va_end(ap); return fd; }
	EOF
	cc -shared -fPIC -o tamper.so tamper.c -ldl
}

@test "what a start, a resume or an iteration reads of the start model and the checkpoint is what was digested: a file changed meanwhile is found, nothing recorded" {
	tamper_so
	# the start model's weights changed as the weights store or the digest opens them, whichever is second
	ls /dev/shm | grep '^sw-run' | sort >shm.before || true
	run -1 --separate-stderr env LD_PRELOAD="$PWD/tamper.so" TAMPER=m/model.safetensors TAMPER_AT=2 sw-run -c exp -o run
	unswept
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: 'm' changed while it was read: file 'model.safetensors' was changed; the run has not started: the same command starts it again" ]
	[ ! -e run/audit.log ] || [ "$(jq -s 'map(select(.event == "run_start")) | length' run/audit.log)" = 0 ]
	# the weights store it made is gone
	run -0 bash -c "ls /dev/shm | grep '^sw-run' | sort | comm -13 shm.before -"
	[ "$output" = "" ]
	# the bit flipped back, the same command starts it
	env LD_PRELOAD="$PWD/tamper.so" TAMPER=m/model.safetensors TAMPER_AT=1 cat m/model.safetensors >/dev/null
	run -1 sw-run -q -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then exit 4; fi; sw-cat'
	cp run/audit.log audit.before
	# a resume: the checkpoint's weights changed after the check against the audit log read them, as
	# the weights store opens them (the check's read is the first open, the store's the second)
	run -1 --separate-stderr env LD_PRELOAD="$PWD/tamper.so" TAMPER=ckpt/iter-0001/model.safetensors TAMPER_AT=2 \
		sw-run --resume run --train sw-cat
	unswept
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: cannot resume: 'run/ckpt/iter-0001' changed while it was read: file 'model.safetensors' was changed" ]
	cmp run/audit.log audit.before
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	[ "$(left run)" = 0 ]
	# changed, it stays refused (by its digest now); put back as it was, the run goes on
	run -1 --separate-stderr sw-run --resume run --train sw-cat
	unswept
	[ "$stderr" = "sw-run: cannot resume from run/ckpt/iter-0001: checkpoint 'ckpt/iter-0001' does not match its digest: file 'model.safetensors' changed" ]
	env LD_PRELOAD="$PWD/tamper.so" TAMPER=ckpt/iter-0001/model.safetensors TAMPER_AT=1 cat run/ckpt/iter-0001/model.safetensors >/dev/null
	run -0 sw-run -q --resume run --train sw-cat
	[ "$(cat run/state)" = "ckpt/iter-0003" ]
	run -0 sw-audit verify run
	# the start model written to during a run (its tokenizer, which the stages read): the iteration is not
	# recorded, the run stops; the same bytes, so it resumes
	run -1 --separate-stderr sw-run -c exp -o run3 --sort 'if [ "$SW_ITER" = 2 ]; then touch m/tokenizer.json; fi; cat'
	unswept
	[ "$output" = "" ]
	[ "${stderr_lines[-1]}" = "sw-run: 'm' changed while it was read: file 'tokenizer.json' was changed; continue with sw-run --resume run3" ]
	[ "$(jq -s 'map(select(.event == "iteration")) | length' run3/audit.log)" = 1 ]
	[ "$(jq -s 'map(select(.eval | not)) | length' run3/metrics.jsonl)" = 1 ]
	run -0 sw-run -q --resume run3 --sort cat
	[ "$(cat run3/state)" = "ckpt/iter-0003" ]
	run -0 sw-audit verify run3
	# a run with a KL reference loads the start model again at a resume: changed after its digest read it
	run -1 sw-run -q -c exp --ref -o run2 --train 'if [ "$SW_ITER" = 2 ]; then exit 4; fi; sw-cat'
	cp run2/audit.log audit.before
	run -1 --separate-stderr env LD_PRELOAD="$PWD/tamper.so" TAMPER=m/model.safetensors TAMPER_AT=2 sw-run --resume run2 --train sw-cat
	unswept
	[ "$stderr" = "sw-run: 'm' changed while it was read: file 'model.safetensors' was changed" ]
	cmp run2/audit.log audit.before
	[ "$(left run2)" = 0 ]
}

@test "each iteration's verifiers are in the audit log: their specs and the digests of the files they read, a changed blocklist seen" {
	printf 'badword\n' >rules.txt
	run -0 sw-run -q -c exp -o run --iters 2 --eval-every 5 \
		--verify 'if [ "$SW_ITER" = 2 ]; then printf "otherword\n" >rules.txt; fi; sw-verify -r math -r blocklist:rules.txt,hard'
	# the evaluations before the first iteration and after the last verify too (eval-verify is verify),
	# their records marked as the evaluation's stage records are ("of")
	run -0 jq -c 'select(.event == "verifiers") | [.iter, .of, .specs]' run/audit.log
	[ "${#lines[@]}" = 4 ]
	[ "${lines[0]}" = '[0,"eval",["math","blocklist:rules.txt,hard"]]' ]
	[ "${lines[1]}" = '[1,"iteration",["math","blocklist:rules.txt,hard"]]' ]
	[ "${lines[2]}" = '[2,"iteration",["math","blocklist:rules.txt,hard"]]' ]
	[ "${lines[3]}" = '[2,"eval",["math","blocklist:rules.txt,hard"]]' ]
	run -0 sh -c "jq -c 'select(.event == \"stage\" and .stage == \"verify\") | [.iter, .of]' run/audit.log | sort"
	[ "$(echo $output)" = '[0,"eval"] [1,"iteration"] [2,"eval"] [2,"iteration"]' ]
	run -0 jq -r 'select(.event == "verifiers") | .files["rules.txt"]' run/audit.log
	[ "${lines[1]}" = "$(printf 'badword\n' | b2sum -l 256 | cut -d' ' -f1)" ]
	[ "${lines[2]}" = "$(b2sum -l 256 rules.txt | cut -d' ' -f1)" ]
	[ "${lines[1]}" != "${lines[2]}" ]
	# each before its iteration's stage records, in the chain
	run -0 jq -r 'select(.iter == 1) | .event' run/audit.log
	[ "${lines[0]}" = verifiers ]
	run -0 sw-audit verify run
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

# Wait (up to 10 s) until file $1 exists.
await() {
	for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done
	return 1
}

@test "SIGTERM, SIGINT, SIGHUP: the stages end, every store goes, the log records it, the message says how to resume" {
	for sig in TERM INT HUP; do
		rm -rf run
		sw-run -q -c exp -o run --iters 50 --train 'sleep 0.2; sw-cat' 2>err &
		pid=$!
		await run/samples/iter-0001.msgpack.zst
		kill -$sig $pid
		status=0
		wait $pid || status=$?
		[ "$status" -eq $((128 + $(kill -l $sig))) ]
		[ -s run/stores ]
		[ "$(left run)" = 0 ]
		run -0 cat err
		# (what it said, where it said something else: a failure here has been seen once, as a user, not since)
		[[ $output == "sw-run: interrupted ("*") in iteration "*"; the run goes on from run/ckpt/iter-000"*" with: sw-run --resume run" ]] ||
			{ printf 'SIG%s: %s\n' "$sig" "$output"; false; }
		grep -q "\"event\":\"interrupted\".*\"signal\":\"$sig\"" run/audit.log
		run -0 sw-audit verify run
	done
	run -0 sw-run -q --resume run --iters 3 --train sw-cat
	[ "$(left run)" = 0 ]
}

@test "SIGKILL: the run's guard ends the stages and removes the stores; a run killed with its guard is swept at the next start" {
	sw-run -q -c exp -o run2 --iters 50 --train 'echo $$ >"$SW_RUN/train.pid"; sleep 0.5; sw-cat' &
	pid=$!
	for i in $(seq 200); do [ -e run2/samples/iter-0001.msgpack.zst ] && [ -s run2/train.pid ] && break; sleep 0.05; done
	[ -s run2/train.pid ]
	stage=$(cat run2/train.pid)
	kill -KILL $pid
	wait $pid || true
	for i in $(seq 100); do [ "$(left run2)" = 0 ] && break; sleep 0.05; done
	[ "$(left run2)" = 0 ]
	for i in $(seq 50); do ended "$stage" && break; sleep 0.1; done
	ended "$stage"
	# sw-run and its guard killed together (its whole process group): the stores stay, the next start sweeps them
	setsid sw-run -q -c exp -o run3 --iters 50 --train 'sleep 0.2; sw-cat' &
	pid=$!
	await run3/samples/iter-0001.msgpack.zst
	kill -KILL -- -$pid
	wait $pid || true
	[ "$(left run3)" -ge 1 ]
	run -0 --separate-stderr sw-run -c exp -o run4 --iters 1
	[[ $stderr == *"removed "*" weight store"*" a killed run left behind"* ]]
	[ "$(left run3)" = 0 ]
	[ "$(left run4)" = 0 ]
	# and the killed runs resume
	run -0 sw-run -q --resume run2 --iters 2 --train sw-cat
	run -0 sw-audit verify run2
	run -0 sw-run -q --resume run3 --iters 2 --train sw-cat
	[ "$(left run2)" = 0 ]
	[ "$(left run3)" = 0 ]
}

@test "the prompts are checked before the run starts (a prompt each, an id each): each error names the file and the line; nothing is made" {
	# refused FILE MESSAGE: sw-run -p FILE fails with MESSAGE alone, before anything is made
	refused() {
		run -1 --separate-stderr sw-run -c exp -o run -p "$1"
		unswept
		[ "$stderr" = "$2" ]
		[ ! -e run ]
	}
	printf '{"id":"q1","prompt":"1+1=","label":"2"}\n{"id":"q2","promt":"2+1=","label":"3"}\n' >typo.jsonl
	refused typo.jsonl "sw-run: typo.jsonl: line 2: no prompt: a record needs 'prompt' (a string) or 'messages' (an array)"
	: >empty.jsonl
	refused empty.jsonl "sw-run: empty.jsonl: no prompts in it"
	# TRL's conversational prompts (an array of messages in 'prompt'): said, and how to move them
	printf '{"id":"q1","prompt":[{"role":"user","content":"1+1="}],"label":"2"}\n' >conv.jsonl
	refused conv.jsonl "sw-run: conv.jsonl: line 1: no prompt: a record needs 'prompt' (a string) or 'messages' (an array); its 'prompt' is an array: jq -c '.messages = .prompt | del(.prompt)' moves it"
	# another data set's name for it (MATH's 'problem'): said, and how to rename it
	printf '{"id":"m1","problem":"1+1=","solution":"2"}\n' >math.jsonl
	refused math.jsonl "sw-run: math.jsonl: line 1: no prompt: a record needs 'prompt' (a string) or 'messages' (an array); it has 'problem': jq -c '.prompt = .problem' names it the prompt"
	printf '{"id":"q1","prompt":"1+1=","label":"2"}\n{"id":"q2","prompt":}\n' >broken.jsonl
	run -1 --separate-stderr sw-run -c exp -o run -p broken.jsonl
	unswept
	[[ $stderr == "sw-run: broken.jsonl: line 2"* ]]
	[ ! -e run ]
	run -1 --separate-stderr sw-run -c exp -o run --eval typo.jsonl
	unswept
	[ "$stderr" = "sw-run: typo.jsonl: line 2: no prompt: a record needs 'prompt' (a string) or 'messages' (an array)" ]
	[ ! -e run ]
	# each training prompt has an id of its own (the pool's key; a GRPO group's name)
	printf '{"id":"q1","prompt":"1+1="}\n{"id":"q2","prompt":"2+1="}\n{"id":"q1","prompt":"3+1="}\n' >twice.jsonl
	run -1 --separate-stderr sw-run -c exp -o run -p twice.jsonl
	unswept
	[ "$stderr" = "sw-run: twice.jsonl: line 3: id 'q1' is line 1's too: an id names one prompt" ]
	[ ! -e run ]
	printf '{"id":"q1","prompt":"1+1="}\n{"prompt":"2+1="}\n' >noid.jsonl
	run -1 --separate-stderr sw-run -c exp -o run -p noid.jsonl
	[ "$stderr" = "sw-run: noid.jsonl: line 2: no id: each prompt needs one of its own (a string)" ]
	printf '{"id":7,"prompt":"1+1="}\n' >numid.jsonl
	run -1 --separate-stderr sw-run -c exp -o run -p numid.jsonl
	[ "$stderr" = "sw-run: numid.jsonl: line 1: its id is no string: each prompt needs one of its own (a string)" ]
	[ ! -e run ]
	# held-out prompts need no id (sw-rollout numbers them), but two may not have one
	printf '{"id":"e1","prompt":"1+1="}\n{"prompt":"2+1="}\n{"id":2,"prompt":"3+1="}\n' >evtwice.jsonl
	run -1 --separate-stderr sw-run -c exp -o run --eval evtwice.jsonl
	[ "$stderr" = "sw-run: evtwice.jsonl: line 3: id '2' is line 2's too: an id names one prompt" ]
	[ ! -e run ]
}

@test "a start that failed leaves nothing in the way: the same command starts again; --resume says what it can do" {
	# a model whose weights are broken fails after the run directory is made
	cp -r m broken
	printf 'not safetensors' >broken/model.safetensors
	run -1 --separate-stderr sw-run -c exp -o run -m broken
	unswept
	[[ $stderr == "sw-run: cannot load 'broken' into a weight store: "* ]]
	[ -e run/config ]
	run -1 --separate-stderr sw-run --resume run
	unswept
	[ "$stderr" = "sw-run: cannot resume 'run': the run never reached its first checkpoint; start it again with sw-run -c run/config -o run" ]
	cp m/model.safetensors broken/
	run -0 sw-run -q -c run/config -o run --iters 1
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	# a start that failed after its first checkpoint (the evaluation before the first iteration): the same command again
	run -1 sw-run -q -c exp -o again --eval-rollout 'exit 3'
	[ "$(cat again/state)" = "ckpt/iter-0000" ]
	run -0 --separate-stderr sw-run -c exp -o again --iters 1
	[ "$(cat again/state)" = "ckpt/iter-0001" ]
	run -0 sw-audit verify again
	[ "$(grep -c '"event":"run_start"' again/audit.log)" = 1 ]
	# a run that completed an iteration is not started over
	run -1 --separate-stderr sw-run -c exp -o again --iters 1
	unswept
	[ "$stderr" = "sw-run: 'again' exists and is not empty (continue a run there with --resume again)" ]
	mkdir plain
	run -1 --separate-stderr sw-run --resume plain
	unswept
	[ "$stderr" = "sw-run: cannot resume 'plain': it is no run directory (it has no config)" ]
	[ "$(left run)" = 0 ]
	[ "$(left again)" = 0 ]
}

@test "-o makes the directories above the run directory, as mkdir -p" {
	run -0 --separate-stderr sw-run -q -c exp -o new/parents/run --iters 1
	unswept
	[ "$stderr" = "" ]
	[ "$(cat new/parents/run/state)" = "ckpt/iter-0001" ]
}

@test "--resume from another directory: the run goes on where it started (its paths and commands as they were)" {
	run -1 sw-run -q -c exp -o run --train 'if [ "$SW_ITER" = 2 ]; then exit 4; fi; sw-cat'
	grep -qx "workdir $PWD" run/config
	mkdir -p elsewhere/deeper
	cd elsewhere/deeper
	run -0 --separate-stderr sw-run -v --resume ../../run --train sw-cat
	[[ $stderr == *"iter 3/3"* ]]
	cd ../..
	[ "$(cat run/state)" = "ckpt/iter-0003" ]
	[ ! -e elsewhere/deeper/run ]
	run -0 sw-audit verify run
	[ "$(left run)" = 0 ]
}

@test "--keep-ckpt K keeps the newest K checkpoints, the best and the latest; the log records what it removed" {
	# no evaluation, and iteration 2's rewards are the best: its checkpoint stays beside the newest one
	grep -v '^eval' exp >noeval
	run -0 sw-run -q -c noeval -o run --iters 5 --keep-ckpt 1 \
		--verify 'sw-verify -r math | sw-cat -f json | jq -c --argjson it "$SW_ITER" "if \$it == 2 then .reward = 1 else . end" | sw-cat'
	run -0 ls run/ckpt
	[ "$(echo $output)" = "iter-0002 iter-0005" ]
	grep -qx 'keep-ckpt 1' run/config
	[ "$(jq -r 'select(.event == "checkpoint_removed") | .path' run/audit.log | sort | tr '\n' ' ')" = \
	  "ckpt/iter-0000 ckpt/iter-0001 ckpt/iter-0003 ckpt/iter-0004 " ]
	run -0 sw-audit verify run
	[[ $output == "run/audit.log: ok: "*" records, 2 checkpoints, head "* ]]
	# with evaluations the best is the highest held-out accuracy (a tie: the later)
	run -0 sw-run -q -c exp -o evals --iters 3 --keep-ckpt 1 --eval-every 1 \
		--eval-rollout 'if [ "$SW_ITER" = 1 ]; then export SW_GROUP=1; fi; '"$STAGES/rollout.sh"
	run -0 ls evals/ckpt
	[ "$(echo $output)" = "iter-0001 iter-0003" ]
	# the default keeps every one
	run -0 sw-run -q -c exp -o all --iters 2
	run -0 ls all/ckpt
	[ "$(echo $output)" = "iter-0000 iter-0001 iter-0002" ]
}

@test "progress: one line per iteration with elapsed time and ETA; no kl where there is none" {
	run -0 --separate-stderr sw-run -v -c exp -o run
	[ "$(grep -c 'sw-run: iter ' <<<"$stderr")" = 3 ]
	[[ $stderr == *"sw-run: iter 2/3: reward 0.500, accuracy 50.0%, violations 0.0%, len "*" s; elapsed "*", ETA "* ]]
	[[ $stderr != *"kl nan"* ]]
	[[ $stderr != *" kl "* ]]
}

@test "on a terminal: a line per iteration and evaluation, the stages' messages but not their progress" {
	command -v script >/dev/null || skip "no script(1) to give sw-run a terminal"
	# sw-rollout on a terminal prints its progress; through sw-run it must not
	script -qec "sw-run -c exp -o run --rollout 'sw-rollout -m \"\$SW_MODEL\" -n 2 --max-new-tokens 4' \
		--train 'echo a word from the trainer >&2; sw-cat'" /dev/null </dev/null | tr -d '\r' >tty.out
	# (a line about stores another killed run left, which any start may sweep, aside)
	run -0 grep -vc 'weight stores\? a killed run left behind' tty.out
	[ "$output" = 10 ]
	[ "$(grep -c '^sw-run: iter [123]/3: .*; elapsed .*, ETA ' tty.out)" = 3 ]
	[ "$(grep -c '^sw-run: eval after iteration ' tty.out)" = 3 ]
	[ "$(grep -cx 'a word from the trainer' tty.out)" = 3 ]
	grep -q '^sw-run: 3 iterations done' tty.out
	# sw-rollout alone on the same terminal does print progress
	script -qec "sw-rollout -m m -n 2 --max-new-tokens 4 -o out.mp prompts.jsonl" /dev/null </dev/null | tr -d '\r' >alone.out
	[ -s alone.out ]
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
	[ "${stderr_lines[0]}" = "sw-run: bad: line 1: option '--iters' wants a whole number from 1 to 1000000, not 'three'" ]
	printf 'ref 1\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 1: 'ref' takes no value" ]
	printf 'iters 3\nbatch 4\niters 30\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 3: 'iters' is set again (first at line 1); a file sets each once" ]
	run -2 --separate-stderr sw-run -c exp -o run --monitor kl=3,2,1
	[ "${stderr_lines[0]}" = "sw-run: monitor 'kl=3,2,1': the levels must rise from warn to hard" ]
	run -2 --separate-stderr sw-run -c exp -o run --monitor nope=1,2,3
	[ "${stderr_lines[0]}" = "sw-run: no monitor named 'nope'" ]
	run -1 --separate-stderr sw-run -c nonexistent -o run
	[ "${stderr_lines[0]}" = "sw-run: cannot open 'nonexistent': No such file or directory" ]
	mkdir full && touch full/x
	run -1 --separate-stderr sw-run -c exp -o full
	unswept
	[ "${stderr_lines[0]}" = "sw-run: 'full' exists and is not empty (continue a run there with --resume full)" ]
	touch afile
	run -1 --separate-stderr sw-run -c exp -o afile/run
	unswept
	[ "$stderr" = "sw-run: cannot create 'afile/run': Not a directory" ]
	run -1 --separate-stderr sw-run -c exp -o run -m nomodel
	unswept
	[ "$stderr" = "sw-run: 'nomodel' is no model directory: cannot read 'nomodel/config.json': No such file or directory" ]
	[ ! -e run ]
	run -1 --separate-stderr sw-run --resume nowhere
	[ "$stderr" = "sw-run: cannot resume 'nowhere': No such file or directory" ]
	run -2 --separate-stderr sw-run -c exp --resume run
	[[ ${stderr_lines[0]} == "sw-run: --resume continues a run with its own config: give one of -c and --resume" ]]
	run -2 --separate-stderr sw-run -c exp -o run --device tpu
	[ "${stderr_lines[0]}" = "sw-run: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)" ]
	printf 'device tpu\n' >bad
	run -2 --separate-stderr sw-run -c bad -o run
	[ "${stderr_lines[0]}" = "sw-run: bad: line 1: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)" ]
	run -1 --separate-stderr env SW_DEVICE=tpu sw-run -c exp -o fresh
	[ "$stderr" = "sw-run: SW_DEVICE: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)" ]
	[ ! -e fresh ]
}
