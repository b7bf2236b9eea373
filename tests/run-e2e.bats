#!/usr/bin/env bats
# sw-run end to end with the real programs (sw-pool, sw-sort, sw-rollout,
# sw-verify, sw-balance, sw-train --weights) on a tiny random model and a few
# sums: a whole run and what it leaves; every stage deterministic; sw-run
# killed with SIGKILL at chosen and at random moments, then resumed to the
# same weights, bit for bit, as a run that never stopped; a trainer that
# crashes mid-step.  tests/sw-run.bats tests sw-run itself with stand-ins.
#
# Kept small (a 4-layer model, 3 prompts x 4 responses of 8 tokens, 3
# iterations): each run takes about a second.  The model is random, so the
# rewards that give GRPO a gradient are a regex for a digit (about half the
# responses have one) and a blocklist that a response breaks now and then;
# math scores accuracy (0, as it should be for a random model).
#
# The rollout decodes one response at a time (--batch 1).  With a wider batch
# sw-rollout writes the samples in the order they finish, and that order
# depends on when the prompts reached it (the same seed, prompts and tokens,
# a different order from one run to the next); sw-balance breaks ties between
# groups of equal cost by input order and sw-train sums in input order, so
# the weights would then differ in their last bits from run to run, and no
# resumed run could match.  --batch 1 makes the order the input's.
load helpers

# The experiment, with every path absolute; $1 is the fixture directory.
experiment() {
	cat <<-EOF
		model $1/m
		prompts $1/prompts.jsonl
		eval $1/eval.jsonl
		iters 3
		batch 3
		group 4
		eval-every 2
		seed 5
		ref
		accuracy math
		monitor violation_rate=off
		monitor reward_dominance=off
		sort echo "\$SW_WEIGHTS" >>"\$SW_RUN/stores"; exec sw-sort
		rollout sw-rollout -n "\$SW_GROUP" --seed "\$SW_SEED" --max-new-tokens 8 --batch 1
		eval-rollout sw-rollout --temperature 0 --max-new-tokens 8
		verify sw-verify -r math -r regex:[0-9] -r blocklist:$1/blocklist
		balance sw-balance -n 2 --stats "\$SW_BALANCE_STATS"
		train sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics "\$SW_TRAIN_METRICS"
	EOF
}

# One model, data, and a reference run that nothing interrupts, for every test.
setup_file() {
	FIX=$BATS_FILE_TMPDIR
	export FIX
	cd "$FIX" || return 1
	sw-model init --size tiny --seed 1 m >/dev/null
	for i in 1 2 3 4 5 6 7 8; do
		printf '{"id":"q%d","prompt":"%d+%d=","label":"%d"}\n' "$i" $((i * 7)) "$i" $((i * 8))
	done >prompts.jsonl
	printf '{"id":"e1","prompt":"12+3=","label":"15"}\n{"id":"e2","prompt":"40+9=","label":"49"}\n' >eval.jsonl
	printf '[unsafe] [a-f]\n' >blocklist
	experiment "$FIX" >exp
	ref_status=0
	t0=$(date +%s.%N)
	sw-run -v -c exp -o ref 2>ref.err || ref_status=$?
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >ref.wall
	echo "$ref_status" >ref.status
	# the same at the rollout's default batch, 16 prompts, 8 an iteration (issue 15, item 1)
	for i in $(seq 9 16); do
		printf '{"id":"q%d","prompt":"%d+%d=","label":"%d"}\n' "$i" $((i * 7)) "$i" $((i * 8))
	done | cat prompts.jsonl - >prompts16.jsonl
	sed -e 's/ --batch 1$//' -e 's/^batch 3$/batch 8/' -e "s|/prompts.jsonl$|/prompts16.jsonl|" exp >exp8
	sw-run -q -c exp8 -o ref8 2>ref8.err || echo $? >ref8.status
}

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
}

digest() {
	sw-audit digest "$1" | cut -d' ' -f1
}

# How many of the stores a run in directory $1 used (its sort stage notes them) still exist.
left() {
	local n=0 w
	for w in $(sort -u "$1/stores"); do
		for f in "/dev/shm/${w#shm:}" "/dev/shm/${w#shm:}.opt" "/dev/shm/${w#shm:}.ref"; do
			[ -e "$f" ] && n=$((n + 1))
		done
	done
	echo $n
}

# Run sw-run in a session of its own, killed with SIGKILL after $1 seconds
# ("-": not killed by us); then wait until every process of the session has
# ended (a killed sw-run's stages go on until their pipes close, and may still
# write to the run directory).  Its exit status in $status, stderr in $stderr.
in_session() {
	local after=$1 pid
	shift
	setsid "$@" 2>session.err &
	pid=$!
	if [ "$after" != - ]; then
		sleep "$after"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	status=0
	wait "$pid" || status=$?
	# every process of the session ended (a zombie has: what a killed sw-run leaves goes to init, or to a
	# container's first process, which may never collect it)
	for _ in $(seq 600); do
		[ -z "$(ps -o stat= -s "$pid" | grep -v '^Z')" ] && break
		sleep 0.05
	done
	[ -z "$(ps -o stat= -s "$pid" | grep -v '^Z')" ]
	stderr=$(cat session.err)
}

# Resume run directory $1 and check that it ends where the reference ended:
# the same weights bit for bit, the metrics of iterations 1 to 3 once each, a
# valid audit log that records the resumption (or, of a run that had ended,
# is left as it was: nothing to do), and no store left.
resume_matches_reference() {
	local ended=no log
	log=$(cat "$1/audit.log" 2>/dev/null) || true
	[ "$(tail -1 "$1/audit.log" 2>/dev/null | jq -r .event)" != run_end ] || ended=yes
	run -0 --separate-stderr sw-run -q --resume "$1"
	[ "$stderr" = "" ]
	[ "$(cat "$1/state")" = "ckpt/iter-0003" ]
	[ "$(digest "$1/ckpt/iter-0003/model.safetensors")" = "$(digest "$FIX/ref/ckpt/iter-0003/model.safetensors")" ]
	[ "$(digest "$1/ckpt/iter-0003/optimizer.bin")" = "$(digest "$FIX/ref/ckpt/iter-0003/optimizer.bin")" ]
	run -0 jq -c 'select(.eval | not) | [.iter, .weight_version]' "$1/metrics.jsonl"
	[ "$(echo $output)" = "[1,1] [2,2] [3,3]" ]
	run -0 jq -c 'select(.eval) | .iter' "$1/metrics.jsonl"
	[ "$(echo $output)" = "0 2 3" ]
	run -0 sw-audit verify "$1"
	[[ $output == "$1/audit.log: ok: "* ]]
	if [ $ended = yes ]; then
		[ "$(cat "$1/audit.log")" = "$log" ]
	else
		grep -q '"event":"resume"' "$1/audit.log"
	fi
	[ "$(left "$1")" = 0 ]
}

@test "an end-to-end run: run directory, metrics from every stage, weights that move, a valid audit log, no store left" {
	r=$FIX/ref
	[ "$(cat "$FIX/ref.status")" = 0 ]
	grep -q '^sw-run: iter 3/3: reward ' "$FIX/ref.err"
	[[ "$(tail -1 "$FIX/ref.err")" == "sw-run: 3 iterations done; the run is in ref (audit head "*")" ]]
	for f in config metrics.jsonl audit.log pool samples/eval-0000.msgpack.zst samples/eval-0002.msgpack.zst \
	         samples/eval-0003.msgpack.zst; do
		[ -s "$r/$f" ] || { echo "missing $f"; false; }
	done
	for i in 1 2 3; do
		[ -s "$r/samples/iter-000$i.msgpack.zst" ]
		[ -s "$r/samples/iter-000$i.train.msgpack.zst" ]
	done
	for i in 0 1 2 3; do
		for f in config.json model.safetensors tokenizer.json state.json pool; do
			[ -s "$r/ckpt/iter-000$i/$f" ] || { echo "missing ckpt/iter-000$i/$f"; false; }
		done
	done
	# the optimiser state exists from the first step on
	[ ! -e "$r/ckpt/iter-0000/optimizer.bin" ]
	[ -s "$r/ckpt/iter-0001/optimizer.bin" ]
	[ "$(cat "$r/state")" = "ckpt/iter-0003" ]
	[ ! -e "$r/HALT" ]
	# figures of every stage: the trainer's kl, entropy and loss, balance's imbalance, verify's scores
	run -0 jq -c 'select(.eval | not) | [.iter, .samples, .weight_version, (.rewards | keys)]' "$r/metrics.jsonl"
	[ "${lines[0]}" = '[1,12,1,["blocklist","math","regex"]]' ]
	[ "${lines[1]}" = '[2,12,2,["blocklist","math","regex"]]' ]
	[ "${lines[2]}" = '[3,12,3,["blocklist","math","regex"]]' ]
	run -0 jq -e 'select(.eval | not) |
		(.kl | type == "number" and . >= 0) and (.entropy > 1 and .entropy < 6) and (.loss | type == "number") and
		(.grad_norm > 0) and (.lr > 0.0099 and .lr < 0.0101) and (.imbalance >= 1 and .imbalance < 2) and
		(.accuracy == 0) and (.violation_rate >= 0 and .violation_rate <= 1) and
		(.reward_mean > 0) and (.response_len_mean == 8) and (.tokens_per_s > 0) and
		(.time_s | .rollout > 0 and .verify > 0 and .balance > 0 and .train > 0 and .iteration > 0) and
		(.monitor_overhead >= 0 and .monitor_overhead < 0.5)' "$r/metrics.jsonl"
	# the start weights are the reference: no KL at the first step (to the last bits: the reference pass and
	# the training forward group a prompt's samples in different micro batches, and the sanitizer build's
	# -O1 code gave 3.6e-15 where -O2's gives 0), some after
	[ "$(jq -c 'select(.iter == 1 and (.eval | not)) | .kl | fabs < 1e-12' "$r/metrics.jsonl")" = true ]
	[ "$(jq -c 'select(.iter == 3 and (.eval | not)) | .kl > 0' "$r/metrics.jsonl")" = true ]
	# some violation, somewhere: the blocklist verifier did flag samples
	[ "$(jq -s 'map(select(.eval | not) | .violation_rate) | add > 0' "$r/metrics.jsonl")" = true ]
	run -0 jq -c 'select(.eval) | [.iter, .samples, .accuracy]' "$r/metrics.jsonl"
	[ "$(echo $output)" = "[0,2,0] [2,2,0] [3,2,0]" ]
	# the generator read the weights the trainer published the iteration before
	run -0 sw-cat -f json "$r/samples/iter-0002.msgpack.zst"
	[ "${#lines[@]}" = 12 ]
	[ "$(sw-cat -f json "$r/samples/iter-0002.msgpack.zst" | jq -s -c 'map(.policy_version) | unique')" = "[1]" ]
	[ "$(sw-cat -f json "$r/samples/iter-0002.msgpack.zst" |
		jq -s -c 'map(.logprobs | length) | unique')" = "[8]" ]
	# the trainer's pass-through carries each sample's advantage and balance's rank
	[ "$(sw-cat -f json "$r/samples/iter-0002.train.msgpack.zst" |
		jq -s -c 'map((.advantage | type), (.rank | type)) | unique')" = '["number"]' ]
	# the weights moved at every step
	d0=$(digest "$r/ckpt/iter-0000/model.safetensors")
	d1=$(digest "$r/ckpt/iter-0001/model.safetensors")
	d2=$(digest "$r/ckpt/iter-0002/model.safetensors")
	d3=$(digest "$r/ckpt/iter-0003/model.safetensors")
	[ "$d0" != "$d1" ]
	[ "$d1" != "$d2" ]
	[ "$d2" != "$d3" ]
	[ "$d0" = "$(digest "$FIX/m/model.safetensors")" ]
	# a checkpoint is a model the programs load
	run -0 sw-rollout -m "$r/ckpt/iter-0003" --temperature 0 --max-new-tokens 4 -f json "$FIX/eval.jsonl"
	[ "${#lines[@]}" = 2 ]
	run -0 sw-audit verify "$r"
	[[ $output == "$r/audit.log: ok: $(wc -l <"$r/audit.log") records, 4 checkpoints, head "* ]]
	[ "$(left "$r")" = 0 ]
}

@test "each iteration's weights_digest is sw-audit digest --weights of its checkpoint; the weights move; a lossless copy has the same" {
	r=$FIX/ref
	prev=$(sw-audit digest --weights "$FIX/m" | cut -d' ' -f1)
	[ "$(sw-audit digest -w "$r/ckpt/iter-0000" | cut -d' ' -f1)" = "$prev" ]
	for it in 1 2 3; do
		run -0 jq -r "select(.event == \"iteration\" and .iter == $it) | .weights_digest" "$r/audit.log"
		want=$output
		[ ${#want} = 64 ]
		run -0 --separate-stderr sw-audit digest --weights "$r/ckpt/iter-000$it"
		[ "$output" = "$want  $r/ckpt/iter-000$it" ]
		[ "$stderr" = "" ]
		[ "$want" != "$prev" ]
		prev=$want
	done
	# the weights, not the files: a copy converted without loss has them, one rounded to bf16 not
	sw-model convert "$r/ckpt/iter-0003" f32
	[ "$(sw-audit digest -w f32 | cut -d' ' -f1)" = "$prev" ]
	sw-model convert --dtype bf16 "$r/ckpt/iter-0003" bf16
	[ "$(sw-audit digest -w bf16 | cut -d' ' -f1)" != "$prev" ]
	# not a model directory, and the option elsewhere
	run -1 --separate-stderr sw-audit digest -w "$r/audit.log"
	[ "$output" = "" ]
	[ "$stderr" = "sw-audit: $r/audit.log/config.json: cannot open: Not a directory" ]
	run -2 --separate-stderr sw-audit verify -w "$r"
	[ "${stderr_lines[0]}" = "sw-audit: option '--weights' is for digest" ]
}

@test "--device: a run on the other device reaches the reference's weights bit for bit; the config records it" {
	d=guard
	[ "${SW_DEVICE:-cpu}" = guard ] && d=cpu
	grep -qx "device ${SW_DEVICE:-cpu}" "$FIX/ref/config"
	run -0 --separate-stderr sw-run -q -c "$FIX/exp" -o run --iters 1 --device $d
	[ "$stderr" = "" ]
	grep -qx "device $d" run/config
	for f in model.safetensors optimizer.bin; do
		[ "$(digest run/ckpt/iter-0001/$f)" = "$(digest "$FIX/ref/ckpt/iter-0001/$f")" ]
	done
	[ "$(left run)" = 0 ]
}

@test "SW_PROFILE: each computing stage appends its table of device ops, sw-run none; the weights are the reference's" {
	run -0 --separate-stderr env SW_PROFILE="$PWD/prof" sw-run -q -c "$FIX/exp" -o run --iters 1
	[ "$stderr" = "" ]
	for f in model.safetensors optimizer.bin; do
		[ "$(digest run/ckpt/iter-0001/$f)" = "$(digest "$FIX/ref/ckpt/iter-0001/$f")" ]
	done
	# the evaluations' rollouts (before iteration 1 and after it), the iteration's rollout, the trainer
	run -0 sed -n 's/^# SW_PROFILE: \([a-z-]*\), pid [0-9]*, device \([a-z]*\): .*/\1 \2/p' prof
	[ "$(sort <<<"$output" | uniq -c | awk '{ print $1, $2, $3 }' | paste -sd,)" = "3 sw-rollout ${SW_DEVICE:-cpu},1 sw-train ${SW_DEVICE:-cpu}" ]
	# the trainer's products and AdamW, the rollout's batch-invariant products
	[ "$(awk '/^# SW_PROFILE: sw-train/ { t = 1; next } /^# SW_PROFILE/ { t = 0 } t && /^(gemm|adamw) +\(all shapes\)/ { print $1 }' prof | sort | paste -sd,)" = adamw,gemm ]
	grep -Eq '^linear_rows +M=[0-9]+ N=[0-9]+ K=[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+$' prof
	[ "$(left run)" = 0 ]
}

@test "every stage is deterministic: the same input twice gives the same bytes, and a second run the same weights" {
	r=$FIX/ref
	p="$FIX/prompts.jsonl"
	sw-rollout -m "$FIX/m" -n 4 --seed 9 --max-new-tokens 8 "$p" >a.mp
	sw-rollout -m "$FIX/m" -n 4 --seed 9 --max-new-tokens 8 "$p" >b.mp
	cmp a.mp b.mp
	sw-rollout -m "$FIX/m" -n 4 --seed 10 --max-new-tokens 8 "$p" >c.mp
	run ! cmp -s a.mp c.mp
	for f in a b; do sw-verify -r math -r regex:[0-9] a.mp >v$f.mp; done
	cmp va.mp vb.mp
	for f in a b; do sw-balance -q -n 2 va.mp >bal$f.mp; done
	cmp bala.mp balb.mp
	for f in a b; do sw-train --algo grpo --lr 1e-2 --seed 3 -m "$FIX/m" -o t$f bala.mp >/dev/null; done
	[ "$(digest ta/model.safetensors)" = "$(digest tb/model.safetensors)" ]
	[ "$(digest ta/optimizer.bin)" = "$(digest tb/optimizer.bin)" ]
	# the whole run, again: the same weights at every checkpoint
	run -0 sw-run -q -c "$FIX/exp" -o again
	for i in 1 2 3; do
		[ "$(digest again/ckpt/iter-000$i/model.safetensors)" = "$(digest "$r/ckpt/iter-000$i/model.safetensors")" ]
	done
	cmp <(sw-cat -f json again/samples/iter-0003.msgpack.zst) <(sw-cat -f json "$r/samples/iter-0003.msgpack.zst")
	# and another seed, other weights
	run -0 sw-run -q -c "$FIX/exp" -o other --seed 6 --iters 1
	[ "$(digest other/ckpt/iter-0001/model.safetensors)" != "$(digest "$r/ckpt/iter-0001/model.safetensors")" ]
	[ "$(left again)" = 0 ]
	[ "$(left other)" = 0 ]
}

# A hook that kills sw-run ($PPID of a stage's shell) once, in iteration $1.
hook() {
	echo "if [ \"\$SW_ITER\" = $1 ] && [ ! -e \"\$SW_RUN/killed\" ]; then touch \"\$SW_RUN/killed\"; kill -KILL \$PPID; fi;"
}

# A run killed by a hook in the stage $1 ($2: its command, with the hook).
# $3: the checkpoint the killed run leaves as its state.
killed() {
	in_session - sw-run -q -c "$FIX/exp" -o run --"$1" "$2"
	[ "$status" = 137 ]
	[ -e run/killed ]
	[ "$(cat run/state)" = "$3" ]
	[ ! -e run/ckpt/iter-0003 ]
	# SIGKILL leaves the stores behind for the next sw-run to sweep (not
	# counted here: any other user's sw-run starting meanwhile sweeps them too)
}

@test "sw-run killed (SIGKILL) as iteration 2's rollout starts: --resume reaches the same weights bit for bit" {
	killed rollout "$(hook 2) exec sw-rollout -n \"\$SW_GROUP\" --seed \"\$SW_SEED\" --max-new-tokens 8 --batch 1" ckpt/iter-0001
	resume_matches_reference run
}

@test "sw-run killed mid-train (the trainer has its input and is stepping): --resume reaches the same weights" {
	killed train "{ cat; $(hook 2) } | sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics \"\$SW_TRAIN_METRICS\"" \
		ckpt/iter-0001
	resume_matches_reference run
}

@test "sw-run killed after the trainer published new weights, before the checkpoint: --resume reaches the same weights" {
	killed train "sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics \"\$SW_TRAIN_METRICS\"; $(hook 2)" \
		ckpt/iter-0001
	# the killed run's trainer had finished its step (the weights' version 2) when sw-run died
	[ "$(jq -c .step run/tmp/train-metrics.jsonl)" = 2 ]
	resume_matches_reference run
}

@test "sw-run killed between iterations (after checkpoint 2, as iteration 3 selects prompts): --resume reaches the same weights" {
	killed select "$(hook 3) exec sw-pool take \"\$SW_POOL\" -n \"\$SW_BATCH\"" ckpt/iter-0002
	resume_matches_reference run
}

@test "sw-run killed during the evaluation before the first iteration: --resume evaluates, then reaches the same weights" {
	killed eval-rollout "$(hook 0) exec sw-rollout --temperature 0 --max-new-tokens 8" ckpt/iter-0000
	[ ! -e run/samples/eval-0000.msgpack.zst ]
	resume_matches_reference run
	cmp <(sw-cat -f json run/samples/eval-0000.msgpack.zst) <(sw-cat -f json "$FIX/ref/samples/eval-0000.msgpack.zst")
}

@test "sw-run killed at random moments, twice over: --resume reaches the same weights each time" {
	wall=$(cat "$FIX/ref.wall")
	for k in 1 2; do
		rm -rf run
		# a moment from the first checkpoint to about the end of an uninterrupted run
		after=$(awk -v w="$wall" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", 0.1 + rand() * w }')
		in_session "$after" sw-run -q -c "$FIX/exp" -o run
		echo "# kill $k after $after s: status $status, state $(cat run/state 2>/dev/null)," \
		     "last audit event $(tail -1 run/audit.log 2>/dev/null | jq -r .event)" >&3
		if [ ! -e run/state ]; then
			# killed before the first checkpoint: nothing to resume, which sw-run must say; the same command starts again
			run -1 --separate-stderr sw-run -q --resume run
			[ "${stderr_lines[-1]}" = "sw-run: cannot resume 'run': the run never reached its first checkpoint; start it again with sw-run -c run/config -o run" ]
			run -0 sw-run -q -c run/config -o run
		fi
		[ "$status" = 137 ] || [ "$status" = 0 ]
		resume_matches_reference run
	done
}

@test "a trainer that crashes mid-step: a clear error, exit 1, the last checkpoint's weights unchanged; --resume goes on" {
	# balance, once it has handed over every sample, kills the trainer (pid noted by its stage) with
	# SIGABRT (not SIGSEGV, which AddressSanitizer would turn into an exit under make check)
	crash='[ "$SW_ITER" = 2 ] && [ ! -e "$SW_RUN/crashed" ] && touch "$SW_RUN/crashed" && kill -ABRT $(cat "$SW_RUN/train.pid")'
	run -1 --separate-stderr sw-run -q -c "$FIX/exp" -o run \
		--balance "sw-balance -n 2 --stats \"\$SW_BALANCE_STATS\" && { $crash; true; }" \
		--train 'echo $$ >"$SW_RUN/train.pid"; exec sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics "$SW_TRAIN_METRICS"'
	[ "$output" = "" ]
	[ -e run/crashed ]
	[[ ${stderr_lines[-1]} == "sw-run: iteration 2: stage 'train' was killed by signal 6 (Aborted) (echo "*"); the samples so far are in run/samples, the weights are those of the last checkpoint; continue with sw-run --resume run" ]]
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	[ ! -e run/ckpt/iter-0002 ]
	[ -e run/samples/iter-0002.msgpack.zst.failed ]
	[ "$(digest run/ckpt/iter-0001/model.safetensors)" = "$(digest "$FIX/ref/ckpt/iter-0001/model.safetensors")" ]
	[ "$(left run)" = 0 ]
	run -0 sw-audit verify run
	grep -q '"event":"failure".*"stage":"train"' run/audit.log
	# the crash is disarmed (run/crashed): the run goes on with the same commands
	resume_matches_reference run
	[ "$(digest run/ckpt/iter-0001/model.safetensors)" = "$(digest "$FIX/ref/ckpt/iter-0001/model.safetensors")" ]
}

@test "sw-train killed (SIGKILL) inside its in-place update: readers refuse the torn weights; --resume reaches the same weights" {
	# iteration 2's trainer, once: a long step (many updates) killed while it updates the store in place;
	# then a reader (sw-rollout --weights) tries the store, and the stage fails
	# (one line: sw-run keeps the command in the run's config, which --resume reads)
	kill='[ "$SW_ITER" = 2 ] && [ ! -e "$SW_RUN/killed" ] && { touch "$SW_RUN/killed"; cat >"$SW_RUN/in.mp";'
	kill+=' ( sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --epochs 1000 --minibatches 2 <"$SW_RUN/in.mp" >/dev/null & p=$!;'
	kill+=' sleep 2; kill -KILL $p; wait $p; echo $? >"$SW_RUN/train.status" ) 2>"$SW_RUN/train.err";'
	kill+=' sw-rollout --weights "$SW_WEIGHTS" --max-new-tokens 2 <"'"$FIX"'/eval.jsonl" >/dev/null 2>"$SW_RUN/reader.err";'
	kill+=' echo $? >"$SW_RUN/reader.status"; exit 1; }'
	run -1 --separate-stderr sw-run -q -c "$FIX/exp" -o run \
		--train "$kill; exec sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --metrics \"\$SW_TRAIN_METRICS\""
	[ "$(cat run/train.status)" = 137 ]
	[ "$(cat run/reader.status)" = 1 ]
	grep -q "died while updating the weights; they are torn until a writer restores them" run/reader.err
	[[ $stderr == "sw-run: iteration 2: stage 'train' exited with status 1 ("*"); the samples so far are in run/samples, the weights are those of the last checkpoint; continue with sw-run --resume run" ]]
	[ "$(cat run/state)" = "ckpt/iter-0001" ]
	[ "$(digest run/ckpt/iter-0001/model.safetensors)" = "$(digest "$FIX/ref/ckpt/iter-0001/model.safetensors")" ]
	[ "$(left run)" = 0 ]
	resume_matches_reference run
}

# The command of stage $1 in the default-batch reference run's config.
cmd_of() {
	sed -n "s/^$1 //p" "$FIX/ref8/config"
}

@test "at the rollout's default batch: sw-run killed (SIGKILL) in each stage of an iteration, then resumed, ends with the uninterrupted run's weights bit for bit" {
	[ ! -e "$FIX/ref8.status" ]
	[ "$(cat "$FIX/ref8/state")" = ckpt/iter-0003 ]
	for point in select sort rollout verify balance train published eval-rollout; do
		rm -rf run
		stage=$point it=2 after=
		case $point in
		published) stage=train after=1 ;;
		eval-rollout) it=2 ;;
		esac
		if [ -n "$after" ]; then
			cmd="$(cmd_of "$stage"); $(hook $it)"
		else
			cmd="$(hook $it) $(cmd_of "$stage")"
		fi
		in_session - sw-run -q -c "$FIX/exp8" -o run --"$stage" "$cmd"
		echo "# killed in $point: status $status, state $(cat run/state)" >&3
		[ "$status" = 137 ]
		[ -e run/killed ]
		[ ! -e run/ckpt/iter-0003 ]
		# the guard removed the stores and left no stage running
		[ "$(left run)" = 0 ]
		run -0 --separate-stderr sw-run -q --resume run
		[ "$stderr" = "" ]
		for f in model.safetensors optimizer.bin trainer_state.json; do
			[ "$(digest run/ckpt/iter-0003/$f)" = "$(digest "$FIX/ref8/ckpt/iter-0003/$f")" ]
		done
		run -0 jq -c 'select(.eval | not) | .iter' run/metrics.jsonl
		[ "$(echo $output)" = "1 2 3" ]
		run -0 sw-audit verify run
		[ "$(left run)" = 0 ]
	done
}

@test "a run's checkpoint is a model directory sw-train continues from: iteration 3 trained again from checkpoint 2 gives checkpoint 3 bit for bit" {
	r=$FIX/ref
	[ -s "$r/ckpt/iter-0002/trainer_state.json" ]
	[ "$(jq -c '[.format, .version, .updates]' "$r/ckpt/iter-0002/trainer_state.json")" = '["sw-train 1",2,2]' ]
	run -0 sw-train -q --algo grpo --lr 1e-2 --kl-coef 0.01 --ref "$FIX/m" -m "$r/ckpt/iter-0002" -o cont \
		"$r/samples/iter-0003.train.msgpack.zst"
	for f in model.safetensors optimizer.bin; do
		[ "$(digest cont/$f)" = "$(digest "$r/ckpt/iter-0003/$f")" ]
	done
	[ "$(jq -c '[.version, .updates]' cont/trainer_state.json)" = '[3,3]' ]
	# and the programs that take a model load it
	run -0 sw-rollout -m "$r/ckpt/iter-0002" --temperature 0 --max-new-tokens 4 -f json "$FIX/eval.jsonl"
	[ "${#lines[@]}" = 2 ]
	run -0 sw-model info "$r/ckpt/iter-0002"
	# a damaged trainer state is refused, not trained on
	cp -r "$r/ckpt/iter-0002" bad
	printf 'x' >>bad/optimizer.bin
	run -1 --separate-stderr sw-train -q --algo grpo --lr 1e-2 -m bad -o out "$r/samples/iter-0003.train.msgpack.zst"
	[[ $stderr == "sw-train: bad/optimizer.bin: "* ]]
}

@test "an overridden --train without --metrics: the trainer's figures still reach metrics.jsonl" {
	run -0 sw-run -q -c "$FIX/exp" -o run --iters 1 --train 'sw-train --algo grpo --lr 1e-2 --kl-coef 0.01'
	run -0 jq -e 'select(.eval | not) | (.loss | type == "number") and (.grad_norm > 0) and (.lr > 0) and
		(.kl | type == "number") and (.entropy > 0) and (.clip_frac | type == "number")' run/metrics.jsonl
	[ "$(left run)" = 0 ]
}

@test "the default stages get the run's model: its tokenizer, never the byte fallback; a store without one is an error" {
	run -0 sw-run -q -m "$FIX/m" -p "$FIX/prompts.jsonl" -o run --iters 1 --batch 2 -n 2 \
		--sort 'env >"$SW_RUN/env"; exec sw-sort'
	grep -qx "SW_MODEL=$FIX/m" run/env
	grep -qx 'rollout sw-rollout -m "$SW_MODEL" -n "$SW_GROUP" --seed "$SW_SEED"' run/config
	grep -qx 'eval-rollout sw-rollout -m "$SW_MODEL" -n 1 --temperature 0' run/config
	[ "$(left run)" = 0 ]
	# a model of another vocabulary than the byte tokenizer's, from a store with no directory: refused
	jq '.vocab_size = 300' "$FIX/m/config.json" >big.json
	sw-model init -c big.json big >/dev/null
	run -1 --separate-stderr sw-run -q -m big -p "$FIX/prompts.jsonl" -o run300 --iters 1 --batch 2 -n 2 \
		--rollout 'sw-rollout -n "$SW_GROUP" --max-new-tokens 4'
	[[ $stderr == *"sw-rollout: store 'shm:sw-run-"*"' holds a model of 300 tokens and no tokenizer came with it: give -m DIR, the model's directory (the built-in byte tokenizer has 261)"* ]]
	[[ $stderr == *"stage 'rollout' exited with status 1"* ]]
}

@test "SIGTERM, SIGINT or SIGHUP while the trainer steps: no store of the run is left in /dev/shm, the optimiser's included" {
	# iteration 1's trainer makes the optimiser's store as it steps; iteration 2's has it from the start
	for try in TERM:1 INT:2 HUP:2; do
		sig=${try%:*} it=${try#*:}
		rm -rf run
		# the trainer notes that it has started, then steps slowly enough to be caught at it
		sw-run -q -c "$FIX/exp" -o run --train 'e=1; if [ "$SW_ITER" = '$it' ] && [ ! -e "$SW_RUN/done" ]; then touch "$SW_RUN/training"; e=50; fi; sw-train --algo grpo --lr 1e-2 --kl-coef 0.01 --epochs $e --metrics "$SW_TRAIN_METRICS"' 2>err &
		pid=$!
		for _ in $(seq 400); do [ -e run/training ] && break; sleep 0.05; done
		[ -e run/training ]
		w=$(sort -u run/stores | head -1)
		w=${w#shm:}
		# the weights, the frozen reference and (after iteration 1) the optimiser's store are there
		run -0 ls /dev/shm
		[[ " $(echo $output) " == *" $w "* ]]
		[[ " $(echo $output) " == *" $w.ref "* ]]
		[ "$it" = 1 ] || [[ " $(echo $output) " == *" $w.opt "* ]]
		kill -$sig $pid
		status=0
		wait $pid || status=$?
		[ "$status" -eq $((128 + $(kill -l $sig))) ]
		run -0 ls /dev/shm
		[[ " $(echo $output) " != *" $w"* ]]
		grep -q "^sw-run: interrupted (.*) in iteration $it; the run goes on from run/ckpt/iter-000$((it - 1)) with: sw-run --resume run$" err
	done
	# the slow step disarmed, the run goes on to the reference's weights
	touch run/done
	resume_matches_reference run
}
