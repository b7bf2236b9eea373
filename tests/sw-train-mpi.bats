#!/usr/bin/env bats
# sw-train data parallel: under mpirun -np N each rank trains its own samples
# and the gradients are summed across the ranks; the step is one process's on
# the whole stream to within rounding (the tolerance below), the same bits at a
# fixed N run after run, the same bits with the moments sharded (--shard-moments), and
# bad input on one rank stops every rank with that rank's message.
load helpers

TINY=$TOP/tests/fixtures/models/tiny-llama

# Stores a test made go, also when it fails half-way.
teardown() {
	[ -f "$BATS_TEST_TMPDIR/stores" ] || return 0
	while read -r spec; do rm -f "/dev/shm/${spec#shm:}" "/dev/shm/${spec#shm:}.opt"; done <"$BATS_TEST_TMPDIR/stores"
}

# each_rank ARGS...: run under mpirun -np 2, every rank's standard error in
# err.RANK and its exit status in status.RANK (mpirun tells only the first
# failure, and may drop what the other ranks print as it stops the job).
each_rank() {
	sw_mpirun -np 2 sh -c 'r=$OMPI_COMM_WORLD_RANK; "$@" 2>err.$r; echo $? >status.$r' sh "$@"
}

# |a - b| <= tol * max(|a|, |b|) + abs
near() {
	awk -v a="$1" -v b="$2" -v t="$3" -v f="${4:-0}" 'BEGIN {
		d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; n = b < 0 ? -b : b; if (n > m) m = n
		exit !(d <= t * m + f) }'
}

# The tolerance against one process: the sums are the same numbers added in
# another order, and AdamW's first steps (m / sqrt(v) is about the sign of the
# gradient) amplify the last bit of a near-zero gradient element up to the
# learning rate; at lr 1e-3 every weight is within 5e-5 (5% of lr) of one
# process's (the most seen: 3.12e-5, Dr. GRPO, whose loss and gradient are
# near 0 but for rounding, in make check's ASan build since the micro
# batches' budget grew to 2.5 B a parameter, 2.33e-5 before; one process cuts
# sw-balance's micro groups of both ranks' samples under its token budget and
# each rank its own), and the loss and gradient norm within
# 1e-6 of theirs (a loss that is 0 but for rounding, as Dr. GRPO's can be,
# within 1e-12).  Where a run makes more than one update (--epochs,
# --minibatches) its loss is partly that of weights the first update left
# apart by the amplified rounding above, so LOSS_TOL (the third argument)
# is wider there: 5e-6 (the most seen: 1.0e-6, GRPO with the KL in the
# reward over 2 epochs, micro batches of the 2.5 B a parameter budget).
same_step() {
	local a=$1 b=$2 lt=${3:-1e-6}
	d=$(maxdiff "$a" "$b")
	echo "max |w1 - w2| = $d"
	awk -v d="$d" 'BEGIN { exit !(d <= 5e-5) }'
	near "$(jq .loss "$a.jsonl")" "$(jq .loss "$b.jsonl")" "$lt" 1e-12
	near "$(jq .grad_norm "$a.jsonl")" "$(jq .grad_norm "$b.jsonl")" 1e-6
	# the same shuffle state, schedule position and version
	[ "$(jq -c 'del(.optimizer_blake2b)' "$a/trainer_state.json")" = "$(jq -c 'del(.optimizer_blake2b)' "$b/trainer_state.json")" ]
}

@test "mpirun -np 2 on a balanced stream: one process's step, rank 0 alone writes" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	[ "$(jq -s 'map(select(.rank == 1)) | length' bal.jsonl)" = 8 ]
	sw-train -m "$TINY" -o one --lr 1e-3 --metrics one.jsonl bal.jsonl >one.out
	sw_mpirun -np 2 sw-train -m "$TINY" -o two --lr 1e-3 --metrics two.jsonl bal.jsonl >two.out 2>two.err
	[ ! -s two.err ]
	same_step one two
	# the samples pass through once, with the advantages one process gives them
	cmp one.out two.out
	# one metrics record, which says it took two ranks
	[ "$(wc -l <two.jsonl)" = 1 ]
	[ "$(jq .ranks two.jsonl)" = 2 ]
	[ "$(jq .samples two.jsonl)" = 16 ]
	[ "$(jq .trained two.jsonl)" = 16 ]
	[ "$(jq .tokens two.jsonl)" = "$(jq .tokens one.jsonl)" ]
	jq -e '.time_s.allreduce >= 0' two.jsonl
	[ "$(jq .ranks one.jsonl)" = null ]
}

@test "at a fixed number of ranks every run gives the same bits; standard input as a file" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	sw_mpirun -np 2 sw-train -m "$TINY" -o a --lr 1e-3 bal.jsonl >a.out
	sw_mpirun -np 2 sw-train -m "$TINY" -o b --lr 1e-3 bal.jsonl >b.out
	cmp a/model.safetensors b/model.safetensors
	cmp a/optimizer.bin b/optimizer.bin
	cmp a/trainer_state.json b/trainer_state.json
	# mpirun gives standard input to rank 0 only; it hands the stream on
	sw_mpirun -np 2 sw-train -m "$TINY" -o c --lr 1e-3 <bal.jsonl >c.out
	cmp a/model.safetensors c/model.safetensors
	cmp a.out c.out
}

@test "no rank fields: the samples are dealt round the ranks; epochs and minibatches as one process" {
	need_mpirun
	sft_set >sft.jsonl
	sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m "$TINY" -o one --metrics one.jsonl sft.jsonl >/dev/null
	for n in 2 3; do
		sw_mpirun -np $n sw-train -a sft --lr 1e-3 --epochs 3 --minibatches 2 -m "$TINY" -o n$n \
			--metrics n$n.jsonl sft.jsonl >/dev/null
		same_step one n$n
		[ "$(jq .updates n$n.jsonl)" = 6 ]
		[ "$(jq .token_accuracy n$n.jsonl)" = "$(jq .token_accuracy one.jsonl)" ]
	done
}

@test "every algorithm, a reference and the KL in the reward: 2 ranks give one process's step" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	i=0
	for opts in "-a sft" "-a grpo --ref $TINY --kl-coef 0.1" "-a dr_grpo" "-a dapo --minibatches 2" "-a rloo" \
		"-a reinforce++ --gamma 0.9" "-a grpo --ref $TINY --kl-coef 0.1 --kl-in-reward --epochs 2"; do
		i=$((i + 1))
		sw-train $opts -m "$TINY" -o one$i --lr 1e-3 --metrics one$i.jsonl bal.jsonl >one$i.out
		sw_mpirun -np 2 sw-train $opts -m "$TINY" -o two$i --lr 1e-3 --metrics two$i.jsonl bal.jsonl >two$i.out
		echo "$opts"
		case $opts in
		*--epochs* | *--minibatches*) same_step one$i two$i 5e-6 ;;
		*) same_step one$i two$i ;;
		esac
		cmp one$i.out two$i.out
	done
}

@test "--shard-moments: the moments sharded give the same bits, and the saved state continues the same" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	sw_mpirun -np 2 sw-train -m "$TINY" -o u --lr 1e-3 --epochs 2 --minibatches 2 --metrics u.jsonl bal.jsonl >u.out
	sw_mpirun -np 2 sw-train -m "$TINY" -o z --lr 1e-3 --epochs 2 --minibatches 2 --shard-moments --metrics z.jsonl bal.jsonl >z.out
	cmp u/model.safetensors z/model.safetensors
	cmp u/optimizer.bin z/optimizer.bin
	cmp u/trainer_state.json z/trainer_state.json
	cmp u.out z.out
	[ "$(jq -c 'del(.time_s, .tokens_per_s)' u.jsonl)" = "$(jq -c 'del(.time_s, .tokens_per_s)' z.jsonl)" ]
	# the next step from each: the gathered moments are the moments
	sw_mpirun -np 2 sw-train -m u -o u2 --lr 1e-3 --shard-moments bal.jsonl >/dev/null
	sw_mpirun -np 2 sw-train -m z -o z2 --lr 1e-3 bal.jsonl >/dev/null
	cmp u2/model.safetensors z2/model.safetensors
	cmp u2/optimizer.bin z2/optimizer.bin
	# and three ranks, with shards that do not fall on tensor boundaries
	sw-balance -n 3 -f json bal.jsonl >bal3.jsonl
	sw_mpirun -np 3 sw-train -m "$TINY" -o u3 --lr 1e-3 bal3.jsonl >/dev/null
	sw_mpirun -np 3 sw-train -m "$TINY" -o z3 --lr 1e-3 --shard-moments bal3.jsonl >/dev/null
	cmp u3/model.safetensors z3/model.safetensors
	cmp u3/optimizer.bin z3/optimizer.bin
	# one process has nothing to shard: --shard-moments changes nothing
	sw-train -m "$TINY" -o p --lr 1e-3 bal.jsonl >/dev/null
	sw-train -m "$TINY" -o pz --lr 1e-3 --shard-moments bal.jsonl >/dev/null
	cmp p/model.safetensors pz/model.safetensors
}

@test "a weight store under 2 ranks: rank 0 trains it in place, the others a copy; the directory's steps" {
	need_mpirun
	mkstore
	sft_set >sft.jsonl
	spec=$(./mkstore create "$TINY")
	echo "$spec" >>"$BATS_TEST_TMPDIR/stores"
	opts="-a sft --lr 1e-3 --epochs 3 --minibatches 2"
	sw_mpirun -np 2 sw-train $opts --weights "$spec" --metrics m.jsonl sft.jsonl >/dev/null
	[ -f "/dev/shm/${spec#shm:}.opt" ]
	# the second step finds the store in the environment, as sw-run hands it over, the moments sharded
	SW_WEIGHTS=$spec sw_mpirun -np 2 sw-train $opts --shard-moments --metrics m.jsonl sft.jsonl >/dev/null
	[ "$(./mkstore save "$spec" saved)" = 2 ]
	[ "$(jq -s 'map(.ranks) | unique' m.jsonl)" = "$(printf '[\n  2\n]')" ]
	# the same two steps on a model directory: the same bits
	sw_mpirun -np 2 sw-train $opts -m "$TINY" -o d sft.jsonl >/dev/null
	sw_mpirun -np 2 sw-train $opts -m d -o d sft.jsonl >/dev/null
	cmp d/model.safetensors saved/model.safetensors
}

@test "a bad record on rank 1: every rank exits 1 with rank 1's message, nothing written" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	n=$(jq -s 'map(.rank) | index(1) + 2' bal.jsonl) # the second sample of rank 1
	jq -c --argjson n "$n" 'if input_line_number == $n then .response_tokens = [99999] else . end' bal.jsonl >bad.jsonl
	[ "$(sed -n "${n}p" bad.jsonl | jq .rank)" = 1 ]
	run -1 --separate-stderr sw_mpirun -np 2 sw-train -m "$TINY" -o out bad.jsonl
	[ -z "$output" ]
	want="sw-train: rank 1: bad.jsonl: record $n: field 'response_tokens' holds token 99999, outside the model's vocabulary of 300"
	[ "$(grep '^sw-train:' <<<"$stderr" | sort -u)" = "$want" ]
	[ ! -e out ]
	# every rank says it, and exits 1
	each_rank sw-train -m "$TINY" -o out bad.jsonl >/dev/null
	for r in 0 1; do
		[ "$(cat status.$r)" = 1 ]
		[ "$(cat err.$r)" = "$want" ]
	done
	# one on rank 0 is rank 0's
	jq -c 'if input_line_number == 1 then .reward = "x" else . end' bal.jsonl >bad0.jsonl
	run -1 --separate-stderr sw_mpirun -np 2 sw-train -m "$TINY" -o out bad0.jsonl
	[ "$(grep '^sw-train:' <<<"$stderr" | sort -u)" = "sw-train: rank 0: bad0.jsonl: record 1: field 'reward' is not a number" ]
	# a rank that is not there
	sw-balance -n 3 -f json bal.jsonl >bal3.jsonl
	run -1 --separate-stderr sw_mpirun -np 2 sw-train -m "$TINY" -o out bal3.jsonl
	grep -q "^sw-train: rank 0: bal3.jsonl: record [0-9]*: field 'rank' is 2, but there are 2 ranks (balance the stream with sw-balance -n 2)$" <<<"$stderr"
	[ ! -e out ]
}

@test "under mpirun: --rank is a usage error on every rank" {
	need_mpirun
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	each_rank sw-train -m "$TINY" -o out --rank 1 bal.jsonl
	for r in 0 1; do
		[ "$(cat status.$r)" = 2 ]
		[ "$(cat err.$r)" = "sw-train: --rank is for one process: under mpirun each rank trains its own samples" ]
	done
	[ ! -e out ]
}
