#!/usr/bin/env bats
# sw-rollout data parallel under mpirun: the ranks share the prompts out and
# rank 0 writes the stream one process writes, byte for byte (generation,
# --score, standard input, skipped and bad prompts); a bad prompt on any rank
# stops every rank with its message; ranks above 0 write nothing.
load helpers

M=$TOP/tests/fixtures/models/tiny-llama

# 7 prompts with ids, 2 without (named by their record number)
prompts() {
	for i in $(seq 1 7); do printf '{"id":"p%d","prompt":"prompt number %d"}\n' "$i" "$i"; done
	printf '%s\n' '{"prompt":"a"}' '{"prompt":"bb","max_new_tokens":3}'
}

@test "mpirun -np 2 and 3: the very bytes one process writes, generating and scoring, from a file and from stdin" {
	need_mpirun
	prompts >in.jsonl
	sw-rollout -m "$M" -n 3 --max-new-tokens 12 in.jsonl >one.msgpack
	for np in 2 3; do
		run -0 --separate-stderr sw_mpirun -np $np sw-rollout -m "$M" -n 3 --max-new-tokens 12 in.jsonl
		[ "$stderr" = "" ]
		sw_mpirun -np $np sw-rollout -m "$M" -n 3 --max-new-tokens 12 in.jsonl >np$np.msgpack
		cmp one.msgpack np$np.msgpack
	done
	# 27 samples, every prompt's 3 together and in input order
	run -0 sh -c 'sw-cat -f json np2.msgpack | jq -r .group | uniq -c | awk "{print \$1 \$2}" | tr "\n" " "'
	[ "$output" = "3p1 3p2 3p3 3p4 3p5 3p6 3p7 38 39 " ]
	# standard input reaches rank 0 only, and is all the ranks share
	sw_mpirun -np 2 sw-rollout -m "$M" -n 3 --max-new-tokens 12 <in.jsonl >stdin.msgpack
	cmp one.msgpack stdin.msgpack
	# --score: the log-probs of the samples, under the same policy, the same bits
	sw-rollout -m "$M" --score one.msgpack >s1.msgpack
	sw_mpirun -np 2 sw-rollout -m "$M" --score one.msgpack >s2.msgpack
	cmp s1.msgpack s2.msgpack
	# (more ranks than prompts: the idle ones wait for the end)
	head -1 in.jsonl >one-prompt.jsonl
	sw-rollout -m "$M" -n 2 --max-new-tokens 6 one-prompt.jsonl >few1.msgpack
	sw_mpirun -np 3 sw-rollout -m "$M" -n 2 --max-new-tokens 6 one-prompt.jsonl >few3.msgpack
	cmp few1.msgpack few3.msgpack
}

@test "an id given twice across the ranks' blocks: refused as one process refuses it" {
	need_mpirun
	# with 2 ranks, records 1-3 are rank 0's, 4-6 rank 1's: the second 'p2' is rank 1's
	{ prompts | head -5; echo '{"id":"p2","prompt":"another"}'; } >dup.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -n 2 --max-new-tokens 8 -o one.msgpack dup.jsonl
	[ "$stderr" = "sw-rollout: dup.jsonl: record 6: id 'p2' is record 2's too: an id names one prompt" ]
	run -1 --separate-stderr sw_mpirun -np 2 sw-rollout -m "$M" -n 2 --max-new-tokens 8 -o two.msgpack dup.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: rank 1: dup.jsonl: record 6: id 'p2' is record 2's too: an id names one prompt" ]
	cmp one.msgpack two.msgpack
	[ "$(sw-cat -c two.msgpack)" = 10 ]
}

@test "a bad prompt on rank 1: the samples before it, then every rank exits 1 with its message" {
	need_mpirun
	{ prompts | head -5; echo '{"id":"bad","prompt":5}'; prompts | tail -3; } >bad.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -n 2 --max-new-tokens 8 -o one.msgpack bad.jsonl
	[ "$stderr" = "sw-rollout: bad.jsonl: record 6: field 'prompt' is a uint, not a string" ]
	run -1 --separate-stderr sw_mpirun -np 2 sw-rollout -m "$M" -n 2 --max-new-tokens 8 -o two.msgpack bad.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: rank 1: bad.jsonl: record 6: field 'prompt' is a uint, not a string" ]
	# (the rest is mpirun's own note that a rank exited 1)
	[ "$(grep -c '^sw-rollout:' <<<"$stderr")" -eq 1 ]
	cmp one.msgpack two.msgpack
	[ "$(sw-cat -c two.msgpack)" = 10 ]
	# skipped instead: named by the rank that met it, counted by rank 0
	sw-rollout -m "$M" -n 2 --max-new-tokens 8 --skip-invalid bad.jsonl 2>/dev/null >k1.msgpack
	run -0 --separate-stderr sw_mpirun -np 2 sw-rollout -m "$M" -n 2 --max-new-tokens 8 --skip-invalid -o k2.msgpack bad.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: bad.jsonl: record 6: field 'prompt' is a uint, not a string (skipped)" ]
	[ "${stderr_lines[1]}" = "sw-rollout: skipped 1 invalid record" ]
	[ "${#stderr_lines[@]}" -eq 2 ]
	cmp k1.msgpack k2.msgpack
}

@test "an input that breaks off: the samples before, then rank 0's message as one process says it" {
	need_mpirun
	{ prompts; printf '{"id":"x","prompt":'; } >cut.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -n 2 --max-new-tokens 6 -o one.msgpack cut.jsonl
	one=$stderr
	[[ $one == "sw-rollout: cut.jsonl: line 10"* ]]
	run -1 --separate-stderr sw_mpirun -np 2 sw-rollout -m "$M" -n 2 --max-new-tokens 6 -o two.msgpack cut.jsonl
	[ "${stderr_lines[0]}" = "$one" ]
	cmp one.msgpack two.msgpack
	[ "$(sw-cat -c two.msgpack)" = 18 ]
}

@test "ranks above 0 write nothing: standard output is rank 0's alone, -o is written once" {
	need_mpirun
	prompts >in.jsonl
	sw-rollout -m "$M" -n 2 --max-new-tokens 6 -f json in.jsonl >one.jsonl
	# a JSON Lines stream: rank 1 writing too would double every line
	run -0 --separate-stderr sw_mpirun -np 2 sw-rollout -m "$M" -n 2 --max-new-tokens 6 -f json in.jsonl
	[ "$output" = "$(cat one.jsonl)" ]
	# -v: progress and the summary from rank 0 only
	run -0 --separate-stderr sw_mpirun -np 2 sw-rollout -v -m "$M" -n 2 --max-new-tokens 6 -o out.msgpack in.jsonl
	[ "$(grep -c 'samples, .* tokens/s' <<<"$stderr")" -eq 1 ]
	[ "$(sw-cat -c out.msgpack)" = 18 ]
}
