#!/usr/bin/env bats
# sw-train: a step against PyTorch, learning (SFT memorises, GRPO makes the
# rewarded responses the greedy ones), the pass-through, exact resume, a
# killed step, micro batches, ranks, and bad input of every kind.
load helpers

FIX=$TOP/tests/fixtures
TINY=$FIX/models/tiny-llama

# Stores a test made go, also when it fails half-way.
teardown() {
	[ -f "$BATS_TEST_TMPDIR/stores" ] || return 0
	while read -r spec; do rm -f "/dev/shm/${spec#shm:}" "/dev/shm/${spec#shm:}.opt"; done <"$BATS_TEST_TMPDIR/stores"
}

# Greedy token accuracy of the model on a set: an SFT pass that changes nothing.
accuracy() {
	rm -rf acc.out acc.jsonl
	sw-train -a sft --lr 0 -m "$1" -o acc.out --metrics acc.jsonl "$2" >/dev/null
	jq -r .token_accuracy acc.jsonl
}

# |a - b| <= tol * max(|a|, |b|) + abs
near() {
	awk -v a="$1" -v b="$2" -v t="$3" -v f="${4:-0}" 'BEGIN {
		d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; n = b < 0 ? -b : b; if (n > m) m = n
		exit !(d <= t * m + f) }'
}

@test "the first update's loss and gradient norm are PyTorch's (transformers, autograd)" {
	n=$(jq '.cases | length' "$FIX/rl/step_refs.json")
	[ "$n" -ge 3 ]
	for c in $(seq 0 $((n - 1))); do
		# the options have no spaces; a reference is named by its fixture directory
		opts=$(jq -r ".cases[$c].options | join(\" \")" "$FIX/rl/step_refs.json" |
			sed "s|--ref |--ref $FIX/models/|")
		rm -rf out m.jsonl
		run -0 --separate-stderr sw-train -m "$TINY" -o out --metrics m.jsonl $opts "$FIX/rl/step_samples.jsonl"
		want_loss=$(jq ".cases[$c].loss" "$FIX/rl/step_refs.json")
		want_gn=$(jq ".cases[$c].grad_norm" "$FIX/rl/step_refs.json")
		got_loss=$(jq .loss m.jsonl)
		got_gn=$(jq .grad_norm m.jsonl)
		echo "case $c ($opts): loss $got_loss want $want_loss, grad norm $got_gn want $want_gn"
		near "$got_loss" "$want_loss" 1e-4 1e-7
		near "$got_gn" "$want_gn" 1e-4
		[ "$(jq .masked m.jsonl)" = 1 ]
		[ "$(jq .singleton_groups m.jsonl)" = 1 ]
	done
}

@test "SFT memorises a small set: greedy accuracy from 0 to 1" {
	sft_set >sft.jsonl
	[ "$(accuracy "$TINY" sft.jsonl)" = 0 ]
	run -0 --separate-stderr sw-train -a sft --lr 3e-3 --epochs 40 -m "$TINY" -o m1 --metrics m.jsonl sft.jsonl
	[ "$stderr" = "" ]
	[ "$(jq .updates m.jsonl)" = 40 ]
	[ "$(accuracy m1 sft.jsonl)" = 1 ]
	# the pass-through of SFT adds nothing
	sw-cat sft.jsonl | cmp - <(printf '%s' "$output")
	# the metrics to a pipe (neither locked nor synced, as a file is): the same record
	run -0 --separate-stderr bash -o pipefail -c "sw-train -a sft --lr 3e-3 --epochs 40 -m '$TINY' -o m2 --metrics /dev/fd/3 sft.jsonl 3>&1 >/dev/null | cat"
	[ "$stderr" = "" ]
	[ "$(printf '%s\n' "$output" | jq -c 'del(.time_s, .tokens_per_s)')" = "$(jq -c 'del(.time_s, .tokens_per_s)' m.jsonl)" ]
}

@test "SFT on text: prompts, chat messages and responses tokenised as sw-rollout does" {
	printf '%s\n' '{"prompt":"k0=","response":"red<|eos|>"}' \
		'{"messages":[{"role":"user","content":"k1?"}],"response":"green<|im_end|>"}' >text.jsonl
	sw-train -a sft --lr 3e-3 --epochs 40 -m "$TINY" -o m1 --metrics m.jsonl text.jsonl >/dev/null
	# red + <|eos|> and green + <|im_end|>: the special tokens are recognised
	[ "$(jq .tokens m.jsonl)" = $((40 * (4 + 6))) ]
	[ "$(accuracy m1 text.jsonl)" = 1 ]
	# the same tokens as sw-rollout's: its --score gives the response tokens
	sw-rollout --score -m "$TINY" -f json text.jsonl | jq -c .response_tokens >rt
	[ "$(cat rt | tr '\n' ' ')" = "[114,101,100,257] [103,114,101,101,110,260] " ]
}

@test "SFT on prompt and response learns the prompts too" {
	sft_set >sft.jsonl
	sw-train -a sft --train-on prompt+response --lr 3e-3 --epochs 60 -m "$TINY" -o m1 --metrics m.jsonl sft.jsonl >/dev/null
	# 8 prompts of 3 tokens (2 predicted each) and responses of 40 tokens in all
	[ "$(jq .tokens m.jsonl)" -eq $((60 * (8 * 2 + 40))) ]
	[ "$(accuracy m1 sft.jsonl)" = 1 ]
}

@test "GRPO makes the rewarded responses the greedy ones" {
	grpo_set >grpo.jsonl
	jq -c 'select(.reward == 1) | del(.reward, .group)' grpo.jsonl >best.jsonl
	[ "$(accuracy "$TINY" best.jsonl)" = 0 ]
	cp -r "$TINY" m
	for s in $(seq 15); do
		sw-train -m m -o m --lr 1e-3 --epochs 4 --minibatches 2 --metrics g.jsonl grpo.jsonl >/dev/null
	done
	[ "$(jq -s 'map(.step) | join(",")' g.jsonl)" = '"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"' ]
	[ "$(jq -s '.[0].reward_mean' g.jsonl)" = 0.25 ]
	[ "$(accuracy m best.jsonl)" = 1 ]
	[ "$(jq .version m/trainer_state.json)" = 15 ]
	[ "$(jq .updates m/trainer_state.json)" = 120 ]
}

@test "GRPO with a rule verifier raises the mean reward: rollout | verify | train" {
	# reward: the response starts with a lowercase letter, 26 of tiny-llama's 300 tokens
	for i in 0 1 2 3 4 5 6 7; do printf '{"id":"q%d","prompt":"q%d:"}\n' $i $i; done >prompts.jsonl
	cp -r "$TINY" m
	for s in $(seq 10); do
		sw-rollout -m m -n 8 --max-new-tokens 2 --seed $s prompts.jsonl | sw-verify -r 'regex:^[a-z]' |
			sw-train -m m -o m --lr 5e-3 --epochs 2 --metrics g.jsonl >/dev/null
	done
	[ "$(jq -s length g.jsonl)" = 10 ]
	first=$(jq -s '[.[0:3][].reward_mean] | add / 3' g.jsonl)
	last=$(jq -s '[.[7:10][].reward_mean] | add / 3' g.jsonl)
	echo "mean reward of the first three steps $first, of the last three $last"
	awk -v a="$first" -v b="$last" 'BEGIN { exit !(b >= 3 * a && b > 0.25) }'
	# the rollout's log-probs are the trainer's: same engine
	[ "$(jq -s 'map(.logprob_mismatch_max) | max < 1e-5' g.jsonl)" = true ]
}

@test "samples pass through with their advantage; a masked one untouched" {
	cat >in.jsonl <<-'EOF'
	{"id":"a","group":"g","prompt_tokens":[1,2],"response_tokens":[3,4],"reward":1.0,"mine":[true,{"x":null}]}
	{"id":"b","group":"g","prompt_tokens":[1,2],"response_tokens":[5],"reward":0.0}
	{"id":"c","group":"g","prompt_tokens":[1,2],"response_tokens":[6,7,8],"reward":0.0}
	{"id":"d","group":"g","prompt_tokens":[1,2],"response_tokens":[9],"reward":0.0}
	{"id":"e","group":"g","prompt_tokens":[1,2],"verifier_error":"timeout"}
	{"id":"f","group":"h","prompt_tokens":[1,2],"response_tokens":[3],"reward":0.5}
	EOF
	run -0 --separate-stderr sh -c 'sw-train -m "$1" -o out -f json in.jsonl' _ "$TINY"
	[ "$stderr" = "" ]
	[ "${#lines[@]}" = 6 ]
	# rewards 1,0,0,0: mean 0.25, sample std 0.5, so 0.75 / (0.5 + 1e-6) and
	# -0.25 / (0.5 + 1e-6) in float32; a group of one gets 0, a masked sample none
	[ "$(printf '%s\n' "$output" | jq -c '[.id, .advantage]' | tr '\n' ' ')" = \
		'["a",1.499997] ["b",-0.499999] ["c",-0.499999] ["d",-0.499999] ["e",null] ["f",0] ' ]
	# every other field, unknown ones included, as it came
	diff <(printf '%s\n' "$output" | jq -c 'del(.advantage)') <(jq -c . in.jsonl)
}

@test "a step run again from the same state gives the same bits; the state matters" {
	sft_set >sft.jsonl
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m "$TINY" -o s1 sft.jsonl >/dev/null
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m s1 -o a sft.jsonl >/dev/null
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m s1 -o b sft.jsonl >/dev/null
	cmp a/model.safetensors b/model.safetensors
	cmp a/optimizer.bin b/optimizer.bin
	cmp a/trainer_state.json b/trainer_state.json
	[ "$(jq .version a/trainer_state.json)" = 2 ]
	[ "$(jq .updates a/trainer_state.json)" = 12 ]
	# without the moments, the schedule position and the shuffle state, another result
	mkdir fresh
	cp s1/config.json s1/model.safetensors s1/generation_config.json fresh/
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m fresh -o c sft.jsonl >/dev/null
	run ! cmp -s a/model.safetensors c/model.safetensors
	# the files beside the weights travel along
	cmp "$TINY/generation_config.json" a/generation_config.json
}

@test "a damaged trainer state is refused" {
	sft_set >sft.jsonl
	sw-train -a sft --lr 1e-3 -m "$TINY" -o s1 sft.jsonl >/dev/null
	printf 'x' | dd of=s1/optimizer.bin bs=1 seek=100 conv=notrunc 2>/dev/null
	run -1 --separate-stderr sw-train -a sft -m s1 -o s2 sft.jsonl
	[ "$stderr" = "sw-train: s1/optimizer.bin: its BLAKE2b does not match 's1/trainer_state.json': the trainer state is damaged" ]
	[ ! -e s2 ]
	rm s1/trainer_state.json
	run -1 --separate-stderr sw-train -a sft -m s1 -o s2 sft.jsonl
	[ "$stderr" = "sw-train: 's1/optimizer.bin' is there but 's1/trainer_state.json' is not: a damaged trainer state" ]
}


@test "a trainer_state.json that is not the one sw-train wrote is refused, naming what is wrong" {
	sft_set >sft.jsonl
	sw-train -a sft --lr 1e-3 -m "$TINY" -o s1 sft.jsonl >/dev/null
	cp s1/trainer_state.json good.json
	# refused STATE-TEXT MESSAGE: s1 with that trainer_state.json is refused with that message, s2 not made
	refused() {
		printf '%s' "$1" >s1/trainer_state.json
		run -1 --separate-stderr sw-train -a sft -m s1 -o s2 sft.jsonl
		[ "$output" = "" ]
		[ "$stderr" = "sw-train: s1/trainer_state.json: $2" ]
		[ ! -e s2 ]
	}
	refused "" "empty input: no records"
	refused $'\n\nx' "line 3, column 1: invalid JSON: unexpected character, expected a valid root value"
	refused " " "empty: no trainer state in it"
	refused "$(jq -c 'del(.updates)' good.json)" "field 'updates' is missing"
	refused "$(jq -c '.nparams = -1' good.json)" "field 'nparams' is of type int, not an unsigned integer"
	refused "$(jq -c '.version = "1"' good.json)" "field 'version' is of type str, not an unsigned integer"
	refused "$(jq -c '.format = "sw-train 2"' good.json)" \
		"format 'sw-train 2', not 'sw-train 1': a trainer state of another version of sw-train"
	refused "$(jq -c 'del(.format)' good.json)" \
		"field 'format' is missing or not a string: not a trainer state of sw-train"
	refused "$(jq -c '.optimizer_blake2b = "00"' good.json)" "field 'optimizer_blake2b' is not 64 hex digits"
	refused "$(jq -c '.rng = [1, 2, 3]' good.json)" "field 'rng' is not 4 numbers"
	refused "$(jq -c '.nparams = 5' good.json)" "the optimiser state is for 5 parameters, the model has $(jq .nparams good.json)"
	# one JSON object: a second record, or anything else after it, was not written by sw-train
	refused "$(cat good.json)"$'\n{"x": 1}' "a second record after the state: a trainer state is one JSON object"
	refused "$(cat good.json)"$'\nx' "line 2, column 1: invalid JSON: unexpected character, expected a valid root value"
	refused '[1, 2]' "line 1, column 1: record is a JSON array, not an object (records are JSON Lines, an object a line: jq -c '.[]' makes them of an array)"
	# the one sw-train wrote is taken
	cp good.json s1/trainer_state.json
	run -0 --separate-stderr sw-train -a sft -m s1 -o s2 sft.jsonl
	[ -s s2/trainer_state.json ]
}
@test "a weight store is trained in place: the same bits as the model directory, the version bumped" {
	mkstore
	sft_set >sft.jsonl
	spec=$(./mkstore create "$TINY")
	echo "$spec" >>"$BATS_TEST_TMPDIR/stores"
	shm=/dev/shm/${spec#shm:}
	run -0 --separate-stderr sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 --weights "$spec" \
		--metrics m.jsonl sft.jsonl
	[ -f "$shm.opt" ]
	# the second step finds the store and its optimiser state in the environment, as sw-run hands them over
	SW_WEIGHTS=$spec sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 --metrics m.jsonl sft.jsonl >/dev/null
	[ "$(./mkstore save "$spec" saved)" = 2 ]
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m "$TINY" -o d sft.jsonl >/dev/null
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m d -o d sft.jsonl >/dev/null
	cmp d/model.safetensors saved/model.safetensors
	# a failed step leaves the store as it was
	printf '{"prompt_tokens":[1],"response_tokens":[999]}\n' >bad.jsonl
	run -1 --separate-stderr sw-train -a sft --weights "$spec" bad.jsonl
	[ "$(./mkstore save "$spec" again)" = 2 ]
	cmp saved/model.safetensors again/model.safetensors
	# an optimiser state of another version is refused
	cp "$shm.opt" keep.opt
	SW_WEIGHTS=$spec sw-train -a sft --lr 1e-3 sft.jsonl >/dev/null
	cp keep.opt "$shm.opt"
	run -1 --separate-stderr sw-train -a sft --weights "$spec" sft.jsonl
	rm -f "$shm" "$shm.opt"
	[ "$stderr" = "sw-train: store '$spec.opt' holds the optimiser state of version 2, the weights are at version 3" ]
}

@test "--device guard: the same samples, model files, trainer state and metrics as cpu" {
	mkstore
	grpo_set >grpo.jsonl
	sft_set >sft.jsonl
	for d in cpu guard; do
		# GRPO with a reference, then an SFT step that reads the optimiser state back through the device
		sw-train --device $d -a grpo --lr 1e-3 --kl-coef 0.1 --ref "$TINY" --epochs 2 --minibatches 2 \
			-m "$TINY" -o $d -f json --metrics $d.jsonl grpo.jsonl >$d.grpo.jsonl
		sw-train --device $d -a sft --lr 1e-3 -m $d -o $d -f json --metrics $d.jsonl sft.jsonl >$d.sft.jsonl
		# a store trained in place twice (the optimiser store made, then read back), the reference a store
		spec=$(./mkstore create "$TINY")
		ref=$(./mkstore create "$TINY")
		printf '%s\n' "$spec" "$ref" >>"$BATS_TEST_TMPDIR/stores"
		SW_DEVICE=$d sw-train -a grpo --lr 1e-3 --kl-coef 0.1 --ref "$ref" --weights "$spec" \
			--metrics $d.jsonl grpo.jsonl >/dev/null
		SW_DEVICE=$d sw-train -a sft --lr 1e-3 --weights "$spec" --metrics $d.jsonl sft.jsonl >/dev/null
		[ "$(./mkstore save "$spec" $d.store)" = 2 ]
		cp "/dev/shm/${spec#shm:}.opt" $d.opt
	done
	cmp cpu.grpo.jsonl guard.grpo.jsonl
	cmp cpu.sft.jsonl guard.sft.jsonl
	for f in cpu/*; do cmp "$f" "guard/${f#cpu/}"; done
	cmp cpu.store/model.safetensors guard.store/model.safetensors
	cmp -i 4096 cpu.opt guard.opt # the arena: after the store's own header (its creator's pid, ...)
	[ "$(wc -l <cpu.jsonl)" = 4 ]
	cmp <(jq -c 'del(.time_s, .tokens_per_s)' cpu.jsonl) <(jq -c 'del(.time_s, .tokens_per_s)' guard.jsonl)
}

@test "an unknown device: a usage error with --device, an error in SW_DEVICE" {
	sft_set >sft.jsonl
	run -2 --separate-stderr sw-train --device x -m "$TINY" -o out sft.jsonl
	[ "${stderr_lines[0]}" = "sw-train: unknown device 'x' (known: cpu, guard, cuda, cuda:N)" ]
	[[ ${stderr_lines[1]} == "usage: sw-train "* ]]
	[ "${#stderr_lines[@]}" = 2 ]
	run -1 --separate-stderr env SW_DEVICE=x sw-train -m "$TINY" -o out sft.jsonl
	[ "$stderr" = "sw-train: SW_DEVICE: unknown device 'x' (known: cpu, guard, cuda, cuda:N)" ]
	[ ! -e out ]
	# --device wins over the environment
	SW_DEVICE=x sw-train --device cpu -a sft -m "$TINY" -o out sft.jsonl >/dev/null
	[ -s out/model.safetensors ]
}

# Whether the CPU has bf16 dot products (oneDNN's avx512_core_bf16 needs AVX512-BF16).
have_bf16() {
	grep -qw avx512_bf16 /proc/cpuinfo
}

@test "--matmul bf16: the step within bf16's rounding of PyTorch's, the same samples out, SW_MATMUL" {
	have_bf16 || skip "the CPU has no AVX512-BF16"
	refs=$FIX/rl/step_refs.json
	opts=$(jq -r ".cases[0].options | join(\" \")" "$refs")
	sw-train -f json -m "$TINY" -o f32 --metrics f32.jsonl $opts "$FIX/rl/step_samples.jsonl" >f32.out
	run -0 --separate-stderr sw-train --matmul bf16 -f json -m "$TINY" -o bf16 --metrics bf16.jsonl $opts \
		"$FIX/rl/step_samples.jsonl"
	[ "$stderr" = "" ]
	printf '%s\n' "$output" | cmp - f32.out # the samples and their advantages do not depend on it
	want=$(jq ".cases[0].grad_norm" "$refs")
	got=$(jq .grad_norm bf16.jsonl)
	echo "grad norm: bf16 $got, f32 $(jq .grad_norm f32.jsonl), PyTorch $want"
	# bf16 operands (8-bit significands) move the norm by ~1e-3 at most here; 1e-2 allowed
	near "$got" "$want" 1e-2
	# and it did round: not f32's norm
	[ "$got" != "$(jq .grad_norm f32.jsonl)" ]
	run ! cmp -s f32/model.safetensors bf16/model.safetensors
	# SW_MATMUL is the default, --matmul wins over it
	SW_MATMUL=bf16 sw-train -m "$TINY" -o env --metrics env.jsonl $opts "$FIX/rl/step_samples.jsonl" >/dev/null
	cmp env/model.safetensors bf16/model.safetensors
	SW_MATMUL=bf16 sw-train --matmul f32 -m "$TINY" -o f32b $opts "$FIX/rl/step_samples.jsonl" >/dev/null
	cmp f32b/model.safetensors f32/model.safetensors
}

@test "--matmul: an unknown value is a usage error; bf16 without bf16 dot products an error naming them" {
	sft_set >sft.jsonl
	run -2 --separate-stderr sw-train --matmul bf17 -m "$TINY" -o out sft.jsonl
	[ "$output" = "" ]
	[ "${stderr_lines[0]}" = "sw-train: unknown --matmul 'bf17' (f32 or bf16)" ]
	[[ ${stderr_lines[1]} == "usage: sw-train "* ]]
	run -2 --separate-stderr env SW_MATMUL=fp16 sw-train -m "$TINY" -o out sft.jsonl
	[ "${stderr_lines[0]}" = "sw-train: SW_MATMUL='fp16' is not f32 or bf16" ]
	# oneDNN held below its bf16 kernels, as on a CPU without them
	run -1 --separate-stderr env DNNL_MAX_CPU_ISA=AVX512_CORE sw-train --matmul bf16 -m "$TINY" -o out sft.jsonl
	[ "$output" = "" ]
	# (avx512_core here; what the CPU has below that elsewhere)
	[[ $stderr == "sw-train: bf16 matmul needs a CPU with bf16 dot products (AVX512-BF16, oneDNN's avx512_core_bf16); oneDNN runs "*" here" ]]
	[ "${#stderr_lines[@]}" = 1 ]
	[ ! -e out ]
	# f32 needs nothing
	DNNL_MAX_CPU_ISA=AVX512_CORE sw-train --matmul f32 -a sft -m "$TINY" -o out sft.jsonl >/dev/null
	[ -s out/model.safetensors ]
}

@test "a killed step leaves the previous model whole" {
	sft_set >sft.jsonl
	cp -r "$TINY" m
	sw-train -a sft --lr 1e-3 -m m -o m sft.jsonl >/dev/null
	before=$(cd m && sha256sum * | sha256sum)
	# killed while training: the old model, whatever the moment
	for delay in 0.05 0.2 0.4; do
		sw-train -a sft --lr 1e-3 --epochs 1000 -m m -o m sft.jsonl >/dev/null &
		pid=$!
		sleep $delay
		kill -9 $pid
		wait $pid || true
		[ "$(cd m && sha256sum * | sha256sum)" = "$before" ]
	done
	# killed around the save: the old model or the new one, whole, never a mix
	# (a step is deterministic, so "the new one" is known bit for bit)
	cp -r m m.orig
	cp -r m m0
	sw-train -a sft --lr 1e-3 --epochs 4 -m m0 -o m0 sft.jsonl >/dev/null
	after=$(cd m0 && sha256sum * | sha256sum)
	[ "$after" != "$before" ]
	old=0 new=0
	for delay in 0.05 0.1 0.15 0.2 0.25 0.3 0.35 0.4 0.5 0.6 0.8 1.0; do
		sw-train -a sft --lr 1e-3 --epochs 4 -m m -o m sft.jsonl >/dev/null &
		pid=$!
		sleep $delay
		kill -9 $pid 2>/dev/null || true
		wait $pid || true
		now=$(cd m && sha256sum * | sha256sum)
		if [ "$now" = "$before" ]; then
			old=$((old + 1))
		else
			[ "$now" = "$after" ] || { echo "after ${delay}s: neither the old model nor the new"; false; }
			new=$((new + 1))
			rm -rf m
			cp -r m.orig m
		fi
		rm -rf m.tmp-*
	done
	echo "old model $old times, new model $new times"
	# the temporary directory of a writer that died is cleared by the next step
	mkdir m.tmp-4194303
	cp "$TINY/config.json" m.tmp-4194303/
	run -0 --separate-stderr sw-train -a sft --lr 1e-3 -m m -o m --metrics k.jsonl sft.jsonl
	[ -z "$(ls -d m.tmp-* 2>/dev/null)" ]
}

@test "micro batches change the memory, not the step" {
	grpo_set >grpo.jsonl
	sw-train -m "$TINY" -o a --lr 1e-3 --metrics a.jsonl grpo.jsonl >/dev/null
	sw-train -m "$TINY" -o b --lr 1e-3 --micro-tokens 1 --metrics b.jsonl grpo.jsonl >/dev/null
	# sw-balance's micro field: three micro batches
	jq -c '.micro = (input_line_number % 3)' grpo.jsonl >micro.jsonl
	sw-train -m "$TINY" -o c --lr 1e-3 --metrics c.jsonl micro.jsonl >/dev/null
	# one micro group over the token budget is cut again: memory's budget holds
	jq -c '.micro = 0' grpo.jsonl >one.jsonl
	sw-train -m "$TINY" -o d --lr 1e-3 --micro-tokens 1 --metrics d.jsonl one.jsonl >/dev/null
	for f in b c d; do
		near "$(jq .loss $f.jsonl)" "$(jq .loss a.jsonl)" 1e-5 1e-7
		near "$(jq .grad_norm $f.jsonl)" "$(jq .grad_norm a.jsonl)" 1e-5
	done
	# every sample a micro batch of its own under --micro-tokens 1, the field's group cut again too;
	# the field's three groups at least three
	n=$(jq .trained a.jsonl)
	[ "$n" -gt 3 ]
	[ "$(jq -s -c 'map(.micro_batches)' b.jsonl d.jsonl)" = "[$n,$n]" ]
	[ "$(jq .micro_batches c.jsonl)" -ge 3 ]
	[ "$(jq .micro_batches a.jsonl)" -ge 1 ]
}

@test "samples of one prompt run it once: the step as each run whole, tokens_shared counts it" {
	grpo_set >grpo.jsonl
	run -0 --separate-stderr sw-train -m "$TINY" -o a --lr 1e-3 --ref "$TINY" --kl-coef 0.1 --metrics a.jsonl \
		-f json grpo.jsonl
	a_out=$output
	run -0 --separate-stderr sw-train -m "$TINY" -o b --lr 1e-3 --ref "$TINY" --kl-coef 0.1 --metrics b.jsonl \
		--no-prompt-sharing -f json grpo.jsonl
	[ "$stderr" = "" ]
	near "$(jq .loss a.jsonl)" "$(jq .loss b.jsonl)" 1e-5 1e-7
	near "$(jq .grad_norm a.jsonl)" "$(jq .grad_norm b.jsonl)" 1e-5
	near "$(jq .kl a.jsonl)" "$(jq .kl b.jsonl)" 1e-4 1e-9
	# the same samples trained (the micro batches may differ: shared, a prompt's samples stay together)
	[ "$(jq .trained a.jsonl)" = 16 ]
	[ "$(jq .trained b.jsonl)" = 16 ]
	# the samples pass through alike (advantages to their printed digits)
	[ "$(jq -c '[.id, .advantage]' <<<"$a_out")" = "$(jq -c '[.id, .advantage]' <<<"$output")" ]
	# four prompts of four samples in one micro batch: (4 - 1) x (prompt - 1) tokens each not run again
	want=$(jq -s 'group_by(.prompt_tokens) | map((length - 1) * ((.[0].prompt_tokens | length) - 1)) | add' grpo.jsonl)
	[ "$want" -gt 0 ]
	[ "$(jq .tokens_shared a.jsonl)" = "$want" ]
	[ "$(jq .tokens_shared b.jsonl)" = 0 ]
	# sw-balance's one micro number, as in sw-run's pipeline: the samples of a prompt side by side, shared
	# in each run of them the budget holds (it cuts at most one prompt's samples a micro batch)
	jq -c '.micro = 0' grpo.jsonl >one.jsonl
	sw-train -m "$TINY" -o e --lr 1e-3 --ref "$TINY" --kl-coef 0.1 --metrics e.jsonl one.jsonl >/dev/null
	m=$(jq .micro_batches e.jsonl)
	[ "$(jq .tokens_shared e.jsonl)" -gt $((want - m * 3)) ]
	[ "$(jq .tokens_shared e.jsonl)" -le "$want" ]
	near "$(jq .loss e.jsonl)" "$(jq .loss b.jsonl)" 1e-5 1e-7
	near "$(jq .grad_norm e.jsonl)" "$(jq .grad_norm b.jsonl)" 1e-5
	# a micro batch a sample: nothing to share
	sw-train -m "$TINY" -o c --lr 1e-3 --micro-tokens 1 --metrics c.jsonl grpo.jsonl >/dev/null
	[ "$(jq .tokens_shared c.jsonl)" = 0 ]
	# SFT on prompt and response: the prompt is learnt, not shared
	sw-train -a sft -m "$TINY" -o d --train-on prompt+response --metrics d.jsonl grpo.jsonl >/dev/null
	[ "$(jq .tokens_shared d.jsonl)" = 0 ]
}

@test "--rank trains its own samples, with advantages over all of them" {
	grpo_set | jq -c '.rank = (if (.group == "p0" or .group == "p1") then 0 else 1 end)' >ranked.jsonl
	run -0 --separate-stderr sw-train -m "$TINY" -o r --rank 1 --metrics r.jsonl -f json ranked.jsonl
	[ "$(jq .trained r.jsonl)" = 8 ]
	[ "$(jq .samples r.jsonl)" = 16 ]
	[ "$(printf '%s\n' "$output" | jq -s 'map(select(.advantage > 1.49)) | length')" = 4 ]
	grpo_set >plain.jsonl
	run -1 --separate-stderr sw-train -m "$TINY" -o r2 --rank 1 plain.jsonl
	[ "$stderr" = "sw-train: plain.jsonl: record 1: field 'rank' is missing (--rank 1 trains the samples sw-balance gave that rank)" ]
	run -1 --separate-stderr sw-train -m "$TINY" -o r2 --rank 5 ranked.jsonl
	[ "$stderr" = "sw-train: ranked.jsonl: no sample of rank 5 among the 16" ]
}

@test "the metrics record" {
	grpo_set | jq -c '.logprobs = [.response_tokens[] | -1.5]' >lp.jsonl
	sw-train -m "$TINY" -o o --ref "$FIX/models/tiny-qwen3" --kl-coef 0.1 --clip-dual 3 --metrics m.jsonl lp.jsonl >/dev/null
	for k in step loss pg_loss kl_loss entropy_loss kl entropy token_accuracy clip_frac_low clip_frac_high clip_frac \
		clip_frac_dual ratio_mean ppo_kl grad_norm lr reward_mean reward_std adv_mean adv_std response_len_mean \
		logprob_mismatch_mean logprob_mismatch_max tokens_per_s time_s; do
		[ "$(jq "has(\"$k\")" m.jsonl)" = true ] || { echo "no $k"; false; }
	done
	[ "$(jq .ratio_mean m.jsonl)" = 1 ]
	[ "$(jq '.time_s | keys | join(",")' m.jsonl)" = '"advantages,old_logprobs,read,ref_logprobs,total,train,write"' ]
	# a second step appends a second record
	sw-train -m o -o o --metrics m.jsonl lp.jsonl >/dev/null
	[ "$(jq -s 'map(.step) | join(",")' m.jsonl)" = '"1,2"' ]
}

@test "each algorithm's advantage on rewards 1, 0, 0, 0" {
	grpo_set | jq -c 'select(.group == "p0")' >g.jsonl
	adv() { sw-train -a "$1" -m "$TINY" -o "o-$1" -f json g.jsonl | jq -c '[.advantage]' | tr -d '\n'; }
	[ "$(adv grpo)" = "[1.499997][-0.499999][-0.499999][-0.499999]" ]
	[ "$(adv dapo)" = "[1.499997][-0.499999][-0.499999][-0.499999]" ]
	# Dr. GRPO: r - mean; RLOO: r - the mean of the other three
	[ "$(adv dr_grpo)" = "[0.75][-0.25][-0.25][-0.25]" ]
	[ "$(adv rloo)" = "[1][-0.33333334][-0.33333334][-0.33333334]" ]
	# REINFORCE++: the return whitened over the 19 tokens (4 of the rewarded response, 5 of
	# each other), so the token-weighted mean is 0
	sw-train -a reinforce++ -m "$TINY" -o o-rpp -f json g.jsonl >rpp.jsonl
	[ "$(jq -s 'map(.advantage * (.response_tokens | length)) | add | fabs < 1e-5' rpp.jsonl)" = true ]
	[ "$(jq -s '.[0].advantage > 0 and .[1].advantage < 0' rpp.jsonl)" = true ]
}

@test "groups of one response each: the group-relative algorithms say their advantages are all 0" {
	# one response of each prompt (sw-rollout -n 1)
	grpo_set | jq -c 'select(.id | endswith("/0"))' >one.jsonl
	for a in grpo dr_grpo dapo rloo; do
		run -0 --separate-stderr sw-train -a "$a" -m "$TINY" -o "o-$a" --metrics "m-$a.jsonl" one.jsonl
		[ "$stderr" = "sw-train: warning: every group holds one response: $a compares a prompt's responses, so every advantage is 0 and the rewards teach nothing (sw-rollout -n 2 or more)" ]
		[ "$(jq -c '[.groups, .singleton_groups]' "m-$a.jsonl")" = "[4,4]" ]
	done
	# -q keeps it quiet; REINFORCE++ (advantages over the batch) and groups of two say nothing
	run -0 --separate-stderr sw-train -q -m "$TINY" -o o-q one.jsonl
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-train -a reinforce++ -m "$TINY" -o o-rpp one.jsonl
	[ "$stderr" = "" ]
	grpo_set | jq -c 'select(.id | test("/[01]$"))' >two.jsonl
	run -0 --separate-stderr sw-train -m "$TINY" -o o-two two.jsonl
	[ "$stderr" = "" ]
}

@test "every algorithm and option combination runs a step" {
	grpo_set | jq -c '.logprobs = [.response_tokens[] | -2.0] | .policy_version = 0' >s.jsonl
	for a in grpo dr_grpo dapo rloo reinforce++; do
		rm -rf o m.jsonl
		sw-train -a $a -m "$TINY" -o o --epochs 2 --minibatches 2 --metrics m.jsonl s.jsonl >/dev/null
		[ "$(jq .updates m.jsonl)" = 4 ] || { echo "$a"; false; }
	done
	rm -rf o m.jsonl
	sw-train -a reinforce++ --kl-in-reward --kl-coef 0.05 --ref "$FIX/models/tiny-qwen3" --gamma 0.9 \
		-m "$TINY" -o o --metrics m.jsonl s.jsonl >/dev/null
	[ "$(jq 'has("kl_loss")' m.jsonl)" = false ]
	[ "$(jq .kl m.jsonl)" != null ]
	# the samples come from version 0, the weights are at 1: off-policy, weighted
	sw-train -m o -o o --tis-cap 2 --schedule cosine --total-updates 10 --warmup 2 --metrics t.jsonl s.jsonl >/dev/null
	[ "$(jq .off_policy_samples t.jsonl)" = 16 ]
	[ "$(jq '.tis_mean > 0' t.jsonl)" = true ]
}

@test "bad input: a clear error naming the record and field, and no model written" {
	good='"group":"g","prompt_tokens":[1,2],"response_tokens":[3,4,5]'
	check() { # expected message, then the JSON line
		printf '%s\n' "{\"id\":\"ok\",$good,\"reward\":1.0}" "$2" >bad.jsonl
		run -1 --separate-stderr sw-train -m "$TINY" -o out bad.jsonl
		[ "$output" = "" ]
		[ "$stderr" = "sw-train: bad.jsonl: record 2: $1" ] || { echo "got: $stderr"; false; }
		[ ! -e out ]
	}
	check "field 'reward' is missing (score the samples with sw-verify first)" "{$good}"
	check "field 'reward' is NaN" "{$good,\"reward\":{\"\$f32\":\"nan\"}}"
	check "field 'reward' is not a number" "{$good,\"reward\":\"high\"}"
	check "field 'logprobs' has 2 values, 'response_tokens' has 3" "{$good,\"reward\":0.0,\"logprobs\":[-0.5,-1.0]}"
	check "field 'logprobs' value 2 is 0.5, not a log-probability" "{$good,\"reward\":0.0,\"logprobs\":[-0.5,0.5,-1.0]}"
	check "field 'group' is missing (grpo compares the responses of one prompt)" \
		'{"prompt_tokens":[1],"response_tokens":[2],"reward":0.0}'
	check "no response: the record has no 'response_tokens' or 'response' field" \
		'{"group":"g","prompt_tokens":[1],"reward":0.0}'
	check "no prompt: the record has no 'prompt_tokens', 'messages' or 'prompt' field" \
		'{"group":"g","response_tokens":[1],"reward":0.0}'
	check "field 'prompt' is a uint, not a string" '{"group":"g","prompt":5,"response_tokens":[1],"reward":0.0}'
	check "field 'messages': message 0 has no 'content'" \
		'{"group":"g","messages":[{"role":"user"}],"response_tokens":[1],"reward":0.0}'
	check "the prompt is empty: the first response token needs a token before it" \
		'{"group":"g","prompt_tokens":[],"response_tokens":[2],"reward":0.0}'
	check "field 'response_tokens' holds token 300, outside the model's vocabulary of 300" \
		'{"group":"g","prompt_tokens":[1],"response_tokens":[2,300],"reward":0.0}'
	check "field 'response_tokens' is not an array of token ids" \
		'{"group":"g","prompt_tokens":[1],"response_tokens":[2,-1],"reward":0.0}'
	check "field 'group' is a array, not a string" \
		'{"group":[1],"prompt_tokens":[1],"response_tokens":[2],"reward":0.0}'
	check "field 'micro' is not a whole number >= 0" "{$good,\"reward\":0.0,\"micro\":-1}"
	long=$(printf '1,%.0s' $(seq 299))1
	check "1 prompt and 300 response tokens exceed the model's 256 positions" \
		"{\"group\":\"g\",\"prompt_tokens\":[1],\"response_tokens\":[$long],\"reward\":0.0}"
}

@test "a group holding two prompts (two prompts given one id) is an error naming the sample, not one GRPO group" {
	# two rollouts of different prompts that were given one id
	{
		printf '%s\n' '{"id":"p1","prompt":"hello"}' '{"id":"p2","prompt":"x"}' | sw-rollout -m "$TINY" -n 2 --max-new-tokens 4
		printf '%s\n' '{"id":"p1","prompt":"world"}' | sw-rollout -m "$TINY" -n 2 --max-new-tokens 4
	} | sw-verify -r length,max=8,buffer=2 >s.msgpack
	[ "$(sw-cat -f json s.msgpack | jq -r .group | tr '\n' ' ')" = "p1 p1 p2 p2 p1 p1 " ]
	run -1 --separate-stderr sw-train -m "$TINY" -o out s.msgpack
	[ "$output" = "" ]
	[ "$stderr" = "sw-train: s.msgpack: record 5: group 'p1' holds another prompt than record 1 (a group is one prompt's responses: give each prompt an id of its own)" ]
	[ ! -e out ]
	# across files the other record's file is named
	sw-cat -f json s.msgpack | head -4 >a.jsonl
	sw-cat -f json s.msgpack | tail -2 >b.jsonl
	run -1 --separate-stderr sw-train -m "$TINY" -o out a.jsonl b.jsonl
	[ "$stderr" = "sw-train: b.jsonl: record 1: group 'p1' holds another prompt than record 1 of a.jsonl (a group is one prompt's responses: give each prompt an id of its own)" ]
	# the same prompt in two files is one group
	sw-cat -f json s.msgpack | sed -n 2p >c.jsonl
	run -0 --separate-stderr sw-train -q -m "$TINY" -o out a.jsonl c.jsonl
}

@test "bad input: empty, all masked, broken streams" {
	: >empty.msgpack
	run -1 --separate-stderr sw-train -m "$TINY" -o out empty.msgpack
	[ "$stderr" = "sw-train: empty.msgpack: no samples to train on (the input is empty)" ]
	run -1 --separate-stderr sh -c 'sw-train -m "$1" -o out </dev/null' _ "$TINY"
	[ "$stderr" = "sw-train: stdin: no samples to train on (the input is empty)" ]
	printf '%s\n' '{"id":"a","verifier_error":"x"}' '{"id":"b","verifier_error":"y"}' >masked.jsonl
	run -1 --separate-stderr sw-train -m "$TINY" -o out masked.jsonl
	[ "$stderr" = "sw-train: masked.jsonl: every one of the 2 samples is masked out by its 'verifier_error'" ]
	printf '{"id":"a",' >trunc.jsonl
	run -1 --separate-stderr sw-train -m "$TINY" -o out trunc.jsonl
	[[ $stderr == "sw-train: trunc.jsonl: line 1, column "* ]]
	[ ! -e out ]
	run -1 --separate-stderr sw-train -m nowhere -o out empty.msgpack
	[[ $stderr == "sw-train: cannot load the model: nowhere/config.json"* ]]
}

@test "--out is checked before any work: a directory that is not a model is not replaced" {
	sft_set >sft.jsonl
	mkdir notes
	echo keep >notes/todo.txt
	run -1 --separate-stderr sw-train -a sft -m "$TINY" -o notes sft.jsonl
	[ "$stderr" = "sw-train: refusing to replace 'notes': it is not a model directory (no config.json)" ]
	[ "$(cat notes/todo.txt)" = keep ]
	cp -r "$TINY" withsub
	mkdir withsub/sub
	run -1 --separate-stderr sw-train -a sft -m "$TINY" -o withsub sft.jsonl
	[ "$stderr" = "sw-train: refusing to replace 'withsub': 'sub' is not a plain file" ]
	echo x >afile
	run -1 --separate-stderr sw-train -a sft -m "$TINY" -o afile sft.jsonl
	[ "$stderr" = "sw-train: cannot write the model to 'afile': it is not a directory" ]
}

@test "usage errors" {
	run -2 --separate-stderr env -u SW_WEIGHTS sw-train -o out x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: no model: give --model DIR or --weights STORE" ]
	run -2 --separate-stderr sw-train -m "$TINY" --weights shm:x x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: --model and --weights are two places for the weights: give one" ]
	run -2 --separate-stderr sw-train --weights shm:x -o out x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: --out is for --model: a store is updated in place" ]
	run -2 --separate-stderr sw-train --weights nowhere x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: --weights wants a store, shm:NAME or cuda:NAME, not 'nowhere'" ]
	run -1 --separate-stderr sw-train --weights shm:sw-train-test-none x.jsonl
	[ "$stderr" = "sw-train: store 'shm:sw-train-test-none': cannot open: No such file or directory" ]
	run -2 --separate-stderr env SW_LR_SCALE=x sw-train -m "$TINY" -o out x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: SW_LR_SCALE='x' is not a number from 0 to 1e6" ]
	run -2 --separate-stderr env SW_SEED=-1 sw-train -m "$TINY" -o out x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: SW_SEED='-1' is not a whole number" ]
	run -2 --separate-stderr sw-train -m "$TINY" x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: no output: give --out DIR (it may be the same as --model)" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out --kl-coef 0.1 x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: --kl-coef needs a reference model: give --ref DIR" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out -a ppo x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: unknown algorithm 'ppo' (sft, grpo, dr_grpo, dapo, rloo or reinforce++)" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out --clip-dual 0.5 x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: option '--clip-dual' wants a bound above 1 (or 0 for none), not '0.5'" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out --schedule cosine x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: a cosine schedule needs --total-updates" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out --lr x x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: option '--lr' wants a number from 0 to 1, not 'x'" ]
	run -2 --separate-stderr sw-train -m "$TINY" -o out --train-on prompt+response x.jsonl
	[ "${stderr_lines[0]}" = "sw-train: --train-on prompt+response is for --algo sft" ]
}

@test "a config.json without a required field is an error naming it, never a default" {
	printf '{"prompt":"a","response":"b"}\n' >in.jsonl
	for f in hidden_size rms_norm_eps num_attention_heads; do
		rm -rf m && cp -r "$TINY" m
		jq "del(.$f)" "$TINY/config.json" >m/config.json
		run -1 --separate-stderr sw-train -m m -o out --algo sft in.jsonl
		[ "$output" = "" ]
		[ "$stderr" = "sw-train: cannot load the model: m/config.json: field '$f' is missing; it is required" ]
		[ ! -e out ]
	done
}
