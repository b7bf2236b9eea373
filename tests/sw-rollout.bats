#!/usr/bin/env bats
# sw-rollout: G samples per prompt with their ids and groups, pass-through,
# determinism whatever the batch, end tokens, stop strings, length limits,
# chat messages, --score against generation, weight stores, and every kind
# of bad input named by file and record.
load helpers

# The tiny Llama fixture: vocab 300 (the byte tokenizer's 261 and 39 ids
# without text), context 256, EOS 2 in config.json; the byte tokenizer adds
# 257 (<|eos|>) and 260 (<|im_end|>).
M=$TOP/tests/fixtures/models/tiny-llama

# jq over sw-rollout's JSON output: r FILTER ARGS...
r() {
	local f=$1
	shift
	set -o pipefail
	sw-rollout -f json "$@" | jq -c "$f"
}

prompts() {
	for i in $(seq 1 "$1"); do printf '{"id":"p%d","prompt":"prompt number %d"}\n' "$i" "$i"; done
}

@test "G samples per prompt: ids PROMPTID/k, group, every field set" {
	prompts 3 >in.jsonl
	run -0 --separate-stderr r '[.id, .group]' -m "$M" -n 4 --max-new-tokens 8 in.jsonl
	[ "$stderr" = "" ]
	[ "${#lines[@]}" -eq 12 ]
	for p in 1 2 3; do
		for k in 0 1 2 3; do
			printf '%s\n' "${lines[@]}" | grep -qxF "[\"p$p/$k\",\"p$p\"]" || { echo "no p$p/$k"; false; }
		done
	done
	# (text is always UTF-8: bytes that are not come out as U+FFFD, as tokenizers decodes them)
	run -0 r '[(.response|type == "string"), (.response_tokens|length) == (.logprobs|length), (.finish|IN("stop","length")),
	          .policy_version, (.prompt_tokens == [112,114,111,109,112,116,32,110,117,109,98,101,114,32,49])]' \
		-m "$M" -n 2 --max-new-tokens 8 <(prompts 1)
	[ "${lines[0]}" = '[true,true,true,0,true]' ]
	[ "${lines[1]}" = '[true,true,true,0,true]' ]
}

@test "a prompt without id is named by its record number; an integer id in decimal" {
	printf '%s\n' '{"prompt":"a"}' '{"id":41,"prompt":"b"}' '{"prompt":"c"}' >in.jsonl
	run -0 r '.id' -m "$M" -n 2 --max-new-tokens 3 in.jsonl
	[ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = '"1/0" "1/1" "3/0" "3/1" "41/0" "41/1" ' ]
	# numbered over all inputs together
	printf '%s\n' '{"prompt":"d"}' '{"id":"x","prompt":"e"}' '{"prompt":"f"}' >in2.jsonl
	run -0 r '.group' -m "$M" --max-new-tokens 3 in.jsonl in2.jsonl
	[ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = '"1" "3" "4" "41" "6" "x" ' ]
}

@test "an id names one prompt: a second prompt of an id is refused, named with where the id came first" {
	dup() { # the second file's lines, the expected message
		printf '%s\n' '{"id":"a","prompt":"one"}' '{"prompt":"two"}' >in.jsonl
		printf '%s\n' "$1" >in2.jsonl
		run -1 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 3 -n 2 in.jsonl in2.jsonl
		[ "$stderr" = "sw-rollout: in2.jsonl: record 1: $2" ] || { echo "got: $stderr"; false; }
		# the samples before it are written
		[ "$(jq -r .id <<<"$output" | sort | tr '\n' ' ')" = "2/0 2/1 a/0 a/1 " ]
	}
	dup '{"id":"a","prompt":"one"}' "id 'a' is in.jsonl's record 1's too: an id names one prompt"
	dup '{"id":"a","prompt":"other"}' "id 'a' is in.jsonl's record 1's too: an id names one prompt"
	# a prompt without an id is named by its place: the second has '2', so has this one
	dup '{"id":2,"prompt":"three"}' "id '2' is in.jsonl's record 2's too: an id names one prompt (without an id, a prompt's place names it, from 1)"
	# in one file, "record N" alone; with --skip-invalid it is skipped, the id's first prompt kept
	printf '%s\n' '{"id":"a","prompt":"one"}' '{"id":"é","prompt":"two"}' '{"id":"é","prompt":"three"}' '{"id":"b","prompt":"four"}' >in.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 3 in.jsonl
	[ "$stderr" = "sw-rollout: in.jsonl: record 3: id 'é' is record 2's too: an id names one prompt" ]
	[ "$(jq -r .id <<<"$output" | tr '\n' ' ')" = "a/0 é/0 " ]
	run -0 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 3 --skip-invalid in.jsonl
	[ "$(jq -r .id <<<"$output" | tr '\n' ' ')" = "a/0 é/0 b/0 " ]
	[ "$(jq -r .prompt <<<"$output" | tr '\n' ' ')" = "one two four " ]
	[ "${stderr_lines[0]}" = "sw-rollout: in.jsonl: record 3: id 'é' is record 2's too: an id names one prompt (skipped)" ]
	[ "${stderr_lines[1]}" = "sw-rollout: skipped 1 invalid record" ]
	# --score takes samples, whose group ids repeat: not compared
	sw-rollout -m "$M" -n 2 --max-new-tokens 3 --skip-invalid in.jsonl 2>/dev/null >s.msgpack
	run -0 --separate-stderr sw-rollout -m "$M" --score -f json s.msgpack
	[ "$(jq -r .id <<<"$output" | tr '\n' ' ')" = "a/0 a/1 é/0 é/1 b/0 b/1 " ]
	[ "$stderr" = "" ]
	# an id is the input's: one given to a record skipped as invalid is taken too (as with ranks, which cannot know)
	printf '%s\n' '{"id":"x","prompt":""}' '{"id":"x","prompt":"fixed"}' >in.jsonl
	run -0 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 3 --skip-invalid in.jsonl
	[ "$output" = "" ]
	[ "${stderr_lines[0]}" = "sw-rollout: in.jsonl: record 1: the prompt is empty (no tokens) (skipped)" ]
	[ "${stderr_lines[1]}" = "sw-rollout: in.jsonl: record 2: id 'x' is record 1's too: an id names one prompt (skipped)" ]
}

@test "every other field passes through untouched, in its place" {
	printf '%s\n' '{"x":1,"prompt":"hi","label":{"a":[1,2.5,"z"]},"reward":null,"id":"q","f":1.5}' >in.jsonl
	sw-rollout -m "$M" -n 2 --max-new-tokens 4 in.jsonl >out.msgpack
	run -0 sh -c 'sw-cat -f json out.msgpack | jq -c "del(.group, .prompt_tokens, .response, .response_tokens, .logprobs, .finish, .policy_version) | del(.id)"'
	[ "${lines[0]}" = '{"x":1,"prompt":"hi","label":{"a":[1,2.5,"z"]},"reward":null,"f":1.5}' ]
	[ "${lines[1]}" = "${lines[0]}" ]
	# the input's own fields keep their order, the id its place
	run -0 sh -c 'sw-cat -f json out.msgpack | jq -c "keys_unsorted" | head -1'
	[ "$output" = '["x","prompt","label","reward","id","f","group","prompt_tokens","response","response_tokens","logprobs","finish","policy_version"]' ]
}

@test "the same seed and input give the same samples whatever --batch, --static, --threads or the order" {
	prompts 12 >in.jsonl
	for b in 1 5 64; do
		r '[.id, .response_tokens, .response, .finish]' -m "$M" -n 3 --seed 9 --max-new-tokens 60 \
			--batch $b in.jsonl | sort >b$b.txt
		r '[.id, .logprobs]' -m "$M" -n 3 --seed 9 --max-new-tokens 60 --batch $b in.jsonl | sort >l$b.txt
	done
	r '[.id, .response_tokens, .response, .finish]' -m "$M" -n 3 --seed 9 --max-new-tokens 60 \
		--batch 7 --static in.jsonl | sort >static.txt
	[ "$(wc -l <b1.txt)" -eq 36 ]
	cmp b1.txt b5.txt
	cmp b1.txt b64.txt
	cmp b1.txt static.txt
	# the log-probs too, bit for bit (the decoder is batch-invariant)
	cmp l1.txt l5.txt
	cmp l1.txt l64.txt
	# on one thread or two (a step's draws are made over the threads)
	for t in 1 2; do
		r '[.id, .response_tokens, .response, .finish, .logprobs]' -m "$M" -n 3 --seed 9 \
			--max-new-tokens 60 --batch 64 --threads $t in.jsonl | sort >t$t.txt
	done
	[ "$(wc -l <t1.txt)" -eq 36 ]
	cmp t1.txt t2.txt
	# another seed, other samples; both finish kinds occur on this data
	r '[.id, .response_tokens, .response, .finish]' -m "$M" -n 3 --seed 10 --max-new-tokens 60 in.jsonl | sort >s10.txt
	run ! cmp -s b1.txt s10.txt
	grep -q '"stop"\]$' b1.txt
	grep -q '"length"\]$' b1.txt
}

@test "samples go out in input order whatever finishes first, with continuous batching or --static" {
	# C finishes long before B (its slot is B's neighbour's), yet B goes out first:
	# the order must not depend on timing, or a trainer downstream would sum in
	# another order and a repeated run would not reach the same weights
	printf '%s\n' '{"id":"A","prompt":"a","max_new_tokens":2}' '{"id":"B","prompt":"b","max_new_tokens":40}' \
		'{"id":"C","prompt":"c","max_new_tokens":2}' >in.jsonl
	run -0 r '[.id, (.response_tokens | length)]' -m "$M" --batch 2 --max-new-tokens 40 --temperature 0 in.jsonl
	[ "$(printf '%s ' "${lines[@]}")" = '["A/0",2] ["B/0",40] ["C/0",2] ' ]
	run -0 r '[.id, (.response_tokens | length)]' -m "$M" --batch 2 --max-new-tokens 40 --temperature 0 --static in.jsonl
	[ "$(printf '%s ' "${lines[@]}")" = '["A/0",2] ["B/0",40] ["C/0",2] ' ]
	# with --skip-invalid a skipped prompt leaves no gap that holds the rest back
	printf '%s\n' '{"id":"A","prompt":"a","max_new_tokens":2}' '{"id":"X"}' '{"id":"C","prompt":"c","max_new_tokens":2}' >in2.jsonl
	run -0 --separate-stderr r '.id' -m "$M" -n 2 --max-new-tokens 4 --skip-invalid in2.jsonl
	[ "$(printf '%s ' "${lines[@]}")" = '"A/0" "A/1" "C/0" "C/1" ' ]
}

@test "end tokens: kept in response_tokens and logprobs, not in the text" {
	prompts 20 >in.jsonl
	run -0 r 'select(.finish == "stop") | [.response_tokens[-1], (.response_tokens | length), (.response | length)]' \
		-m "$M" -n 2 --max-new-tokens 200 in.jsonl
	[ "${#lines[@]}" -gt 0 ]
	for l in "${lines[@]}"; do
		last=$(jq '.[0]' <<<"$l")
		[[ $last == 2 || $last == 257 || $last == 260 ]] || { echo "ends in $last: $l"; false; }
	done
	# a response of ASCII bytes: its text is those bytes, without the end token
	run -0 r 'select(.finish == "stop" and (.response_tokens[:-1] | all(. < 128)))
	          | .response == (.response_tokens[:-1] | implode)' -m "$M" -n 8 --max-new-tokens 200 in.jsonl
	[ "${#lines[@]}" -gt 0 ]
	for l in "${lines[@]}"; do [ "$l" = true ]; done
}

@test "--max-new-tokens and a record's max_new_tokens end responses with finish length" {
	prompts 4 >in.jsonl
	run -0 --separate-stderr r '[(.response_tokens | length), .finish]' -m "$M" -n 2 --max-new-tokens 1 --temperature 0 in.jsonl
	for l in "${lines[@]}"; do [[ $l == '[1,"length"]' || $l == '[1,"stop"]' ]]; done
	# (greedy decoding gives a prompt's responses alike: said)
	[ "$stderr" = "sw-rollout: warning: -n 2 with greedy decoding (--temperature 0): a prompt's 2 responses are the same" ]
	run -0 r 'select(.finish == "length") | .response_tokens | length' -m "$M" -n 4 --max-new-tokens 5 in.jsonl
	for l in "${lines[@]}"; do [ "$l" = 5 ]; done
	printf '%s\n' '{"id":"a","prompt":"x","max_new_tokens":3}' '{"id":"b","prompt":"y"}' >in2.jsonl
	run -0 r 'select(.finish == "length") | [.group, (.response_tokens | length), .max_new_tokens]' \
		-m "$M" -n 4 --max-new-tokens 7 --seed 3 in2.jsonl
	for l in "${lines[@]}"; do [[ $l == '["a",3,3]' || $l == '["b",7,null]' ]] || { echo "$l"; false; }; done
	# the model's context ends a response too: 250 prompt tokens, room for 6
	python3 -c 'import json; print(json.dumps({"id": "long", "prompt": "x" * 250}))' >long.jsonl
	run -0 r '[(.response_tokens | length), .finish]' -m "$M" --max-new-tokens 100 --min-p 0.5 long.jsonl
	[[ $output == '[6,"length"]' || $output =~ ^\[[1-6],\"stop\"\]$ ]]
}

@test "a stop string cuts the text before it and keeps the tokens up to the one completing it" {
	prompts 8 >in.jsonl
	r '.' -m "$M" -n 2 --seed 4 --max-new-tokens 120 in.jsonl >all.jsonl
	# a sample with two printable byte tokens at j, j+1 whose pair is not in the text before
	jq -c 'select(.response_tokens | length > 6) | . as $s | .response_tokens as $t |
		[range(1; ($t | length) - 1) as $j |
		 select(($t[:$j + 2] | all(. < 128)) and
		        ($t[$j] | . > 32 and . < 127) and ($t[$j + 1] | . > 32 and . < 127) and
		        (($t[:$j + 2] | implode | index($t[$j:$j + 2] | implode)) == $j)) | $j]
		| first | select(. != null) | {id: $s.id, j: ., t: $t, lp: $s.logprobs}' all.jsonl | head -1 >pick.json
	[ -s pick.json ]
	id=$(jq -r .id pick.json)
	j=$(jq .j pick.json)
	stop=$(jq -r '.t[.j:.j + 2] | implode' pick.json)
	r "select(.id == \"$id\")" -m "$M" -n 2 --seed 4 --max-new-tokens 120 --stop "$stop" --stop "never-in-it" in.jsonl >cut.json
	run -0 jq -c --slurpfile p pick.json '[.finish, (.response == ($p[0].t[:$p[0].j] | implode)),
	        (.response_tokens == $p[0].t[:$p[0].j + 2]), (.logprobs == $p[0].lp[:$p[0].j + 2])]' cut.json
	[ "$output" = '["stop",true,true,true]' ]
}

@test "--stop takes escapes: \\n\\n is a blank line, \\xHH a byte; an unknown escape is a usage error" {
	prompts 8 >in.jsonl
	# a newline the tiny model writes: the escapes stop where the bytes themselves do
	r '[.id, .finish, .response]' -m "$M" -n 4 --seed 2 --max-new-tokens 200 --stop $'\n' in.jsonl >raw.jsonl
	grep -q '"stop"' raw.jsonl
	r '[.id, .finish, .response]' -m "$M" -n 4 --seed 2 --max-new-tokens 200 --stop '\n' in.jsonl >esc.jsonl
	cmp raw.jsonl esc.jsonl
	r '[.id, .finish, .response]' -m "$M" -n 4 --seed 2 --max-new-tokens 200 --stop '\x0a' in.jsonl >hex.jsonl
	cmp raw.jsonl hex.jsonl
	r '[.id, .finish, .response]' -m "$M" -n 4 --seed 2 --max-new-tokens 200 --stop $'\n\n' in.jsonl >raw2.jsonl
	r '[.id, .finish, .response]' -m "$M" -n 4 --seed 2 --max-new-tokens 200 --stop '\n\n' in.jsonl >esc2.jsonl
	cmp raw2.jsonl esc2.jsonl
	[ "$(jq -r '.[2]' esc2.jsonl | grep -c .)" -gt 0 ]
	run -0 jq -e 'all(.[2]; contains("\n\n") | not)' esc2.jsonl
	run -2 --separate-stderr sw-rollout -m "$M" --stop '\q' in.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: option '--stop': '\\q': unknown escape '\\q' (known: \\n \\t \\r \\\\ \\xHH, not \\x00)" ]
	run -2 --separate-stderr sw-rollout -m "$M" --stop '\x0' in.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: option '--stop': '\\x0': unknown escape '\\x' (known: \\n \\t \\r \\\\ \\xHH, not \\x00)" ]
}

@test "messages are rendered with the chat template; prompt_tokens are used as they are" {
	printf '%s\n' '{"id":"m","messages":[{"role":"user","content":"hi"}]}' \
		'{"id":"t","prompt_tokens":[5,299,7],"prompt":"ignored"}' >in.jsonl
	run -0 r '[.id, .prompt_tokens]' -m "$M" --max-new-tokens 2 in.jsonl
	# <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
	printf '%s\n' "${lines[@]}" | grep -qxF '["m/0",[259,117,115,101,114,10,104,105,260,10,259,97,115,115,105,115,116,97,110,116,10]]'
	printf '%s\n' "${lines[@]}" | grep -qxF '["t/0",[5,299,7]]'
}

@test "--score gives generation's log-probs (1e-5), at its temperature, into --as" {
	prompts 6 >in.jsonl
	sw-rollout -m "$M" -n 3 --max-new-tokens 40 --temperature 0.7 --top-k 50 in.jsonl >gen.msgpack
	sw-rollout -m "$M" --score --temperature 0.7 --as ref_logprobs --batch 4 gen.msgpack >scored.msgpack
	run -0 sh -c 'sw-cat -f json scored.msgpack | jq -s "map([.logprobs, .ref_logprobs] | transpose | map((.[0]-.[1])|fabs)) | flatten | [length > 100, max < 1e-5]" -c'
	[ "$output" = '[true,true]' ]
	# order and every other field kept
	run -0 sh -c 'sw-cat -f json gen.msgpack | jq -c "del(.ref_logprobs)" >a; sw-cat -f json scored.msgpack | jq -c "del(.ref_logprobs)" >b; cmp a b'
	# at another temperature they differ
	run -0 sh -c 'sw-rollout -m "$1" --score --as x gen.msgpack | sw-cat -f json | jq -s "map([.logprobs, .x] | transpose | map((.[0]-.[1])|fabs)) | flatten | max > 0.01"' _ "$M"
	[ "$output" = true ]
	# from response text: tokenised and written as response_tokens too
	printf '%s\n' '{"prompt":"ab","response":"cd"}' >t.jsonl
	run -0 r '[.response_tokens, (.logprobs | length), (.logprobs | all(. < 0))]' -m "$M" --score t.jsonl
	[ "$output" = '[[99,100],2,true]' ]
	# an empty response gets an empty array
	printf '%s\n' '{"prompt":"ab","response_tokens":[]}' >e.jsonl
	run -0 r '.logprobs' -m "$M" --score e.jsonl
	[ "$output" = '[]' ]
}

@test "greedy decoding with -n above 1 says the responses are alike (not under -q, not for one, not scoring)" {
	prompts 2 >in.jsonl
	run -0 --separate-stderr sw-rollout -m "$M" -n 3 --top-k 1 --max-new-tokens 6 -f json in.jsonl
	[ "$stderr" = "sw-rollout: warning: -n 3 with greedy decoding (--top-k 1): a prompt's 3 responses are the same" ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -c '[.group, .response_tokens]' | sort -u | wc -l)" = 2 ]
	run -0 --separate-stderr sw-rollout -q -m "$M" -n 3 --temperature 0 --max-new-tokens 6 -o g.msgpack in.jsonl
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-rollout -m "$M" --temperature 0 --max-new-tokens 6 -o one.msgpack in.jsonl
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-rollout -m "$M" --score --temperature 0 -o s.msgpack g.msgpack
	[ "$stderr" = "" ]
	# min-p 1 and a top-p below 1/k keep the most probable token alone: greedy too
	run -0 --separate-stderr sw-rollout -m "$M" -n 2 --min-p 1 --max-new-tokens 6 -o mp.msgpack in.jsonl
	[ "$stderr" = "sw-rollout: warning: -n 2 with greedy decoding (--min-p 1): a prompt's 2 responses are the same" ]
	[ "$(sw-cat -f json mp.msgpack | jq -c '[.group, .response_tokens]' | sort -u | wc -l)" = 2 ]
	run -0 --separate-stderr sw-rollout -m "$M" -n 2 --top-k 40 --top-p 0.02 --max-new-tokens 6 -o tp.msgpack in.jsonl
	[ "$stderr" = "sw-rollout: warning: -n 2 with greedy decoding (--top-p 0.02, below 1/40, keeps the most probable token alone): a prompt's 2 responses are the same" ]
	[ "$(sw-cat -f json tp.msgpack | jq -c '[.group, .response_tokens]' | sort -u | wc -l)" = 2 ]
	# at 1/k and above, or min-p below 1, sampling can differ: nothing said
	run -0 --separate-stderr sw-rollout -m "$M" -n 2 --top-k 40 --top-p 0.025 --min-p 0.99 --max-new-tokens 6 -o s2.msgpack in.jsonl
	[ "$stderr" = "" ]
}

@test "greedy decoding equals --score's argmax path: temperature 0 log-probs at T 1" {
	prompts 2 >in.jsonl
	sw-rollout -m "$M" -n 2 --temperature 0 --max-new-tokens 20 in.jsonl >g.msgpack
	# both responses of a greedy group are the same
	run -0 sh -c 'sw-cat -f json g.msgpack | jq -s -c "group_by(.group) | map(map(.response_tokens) | unique | length)"'
	[ "$output" = '[1,1]' ]
	run -0 sh -c 'sw-rollout -m "$1" --score --as s g.msgpack | sw-cat -f json | jq -s "map([.logprobs, .s] | transpose | map((.[0]-.[1])|fabs)) | flatten | max < 1e-5"' _ "$M"
	[ "$output" = true ]
}

@test "output streams out while the input is still open" {
	mkfifo fifo
	prompts 2 >in.jsonl
	( cat in.jsonl; sleep 3; echo '{"id":"late","prompt":"z"}' ) >fifo &
	start=$(date +%s)
	sw-rollout -m "$M" -f json --max-new-tokens 5 fifo | { read -r first; echo "$(( $(date +%s) - start ))" >t; cat >/dev/null; }
	wait
	[ "$(cat t)" -lt 3 ]
}

# mkstore MODEL SPECFILE [OUT PROGRAM ARGS...]: a store holding MODEL's
# weights, published as version 7, its spec written to SPECFILE.  With OUT,
# it runs PROGRAM with SW_WEIGHTS set to the store and its stdout into a pipe
# of one page, and at the first bytes stops reading and publishes the same
# weights as version 8 (then copies the rest to OUT and exits with the
# program's status).  sw-rollout flushes 50 ms into generating (its input,
# one read of a small file, all queued by then) and blocks in that write or
# in one soon after, before it can end: the hand-off lands mid-run, with
# responses in flight, however loaded the machine (one that generates the
# test's 384 responses in under 50 ms would see it at the end).
mkstore() {
	cat >mkstore.c <<-'EOF'
	#define _GNU_SOURCE
	#include <fcntl.h>
	#include <stdio.h>
	#include <stdlib.h>
	#include <string.h>
	#include <sys/wait.h>
	#include <unistd.h>
	#include "sw/sw.h"
	int main(int argc, char **argv) {
		sw_error e = { 0 };
		sw_model *m = sw_model_load(argv[1], &e);
		char spec[256];
		if (!m || sw_store_name_random("sw-rollout-test", spec, sizeof spec, &e)) return 1;
		sw_store *s = sw_store_create(spec, &m->cfg, 0, &e);
		if (!s) { fprintf(stderr, "%s\n", e.msg); return 1; }
		memcpy(sw_store_arena(s), m->arena, m->nparams * sizeof(float));
		if (sw_store_publish(s, 7, &e)) return 1;
		FILE *f = fopen(argv[2], "w");
		fprintf(f, "%s\n", spec);
		fclose(f);
		int status = 0;
		if (argc > 4) {
			int p[2];
			if (pipe(p) || fcntl(p[0], F_SETPIPE_SZ, 4096) < 0) { perror("pipe"); return 1; }
			pid_t pid = fork();
			if (pid == 0) {
				dup2(p[1], 1);
				close(p[0]);
				close(p[1]);
				setenv("SW_WEIGHTS", spec, 1);
				execvp(argv[4], argv + 4);
				_exit(127);
			}
			close(p[1]);
			FILE *out = fopen(argv[3], "w");
			if (!out) { perror(argv[3]); return 1; }
			char buf[4096];
			ssize_t n = read(p[0], buf, 1);
			if (n != 1) { fprintf(stderr, "mkstore: no output before the end\n"); return 1; }
			if (sw_store_write_begin(s, &e)) return 1;
			memcpy(sw_store_arena(s), m->arena, m->nparams * sizeof(float));
			if (sw_store_publish(s, 8, &e)) return 1;
			do
				fwrite(buf, 1, (size_t)n, out);
			while ((n = read(p[0], buf, sizeof buf)) > 0);
			fclose(out);
			if (waitpid(pid, &status, 0) != pid) return 1;
			status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
		}
		sw_store_close(s);
		sw_model_free(m);
		return status;
	}
	EOF
	cc $SW_SAN -std=c11 -D_POSIX_C_SOURCE=200809L -fopenmp -I"$TOP/libsw" -o mkstore mkstore.c "$SW_BIN/../lib/libsw.a" \
		-lmsgpackc -lzstd -ldnnl -lpcre2-8 -lutf8proc -lsodium -lseccomp -ldl -lpthread -lm
}

# A store of $M's weights as version 7, its spec in $spec.
store_of_m() {
	command -v cc >/dev/null || skip "no C compiler"
	mkstore
	./mkstore "$M" spec.txt
	spec=$(cat spec.txt)
}

@test "a weight store: the same samples as the files, policy_version from the store" {
	store_of_m
	prompts 3 >in.jsonl
	run -0 r '[.id, .response_tokens, .policy_version]' -m "$M" --weights "$spec" -n 2 --max-new-tokens 10 in.jsonl
	mapfile -t st < <(printf '%s\n' "${lines[@]}" | sort)
	SW_WEIGHTS=$spec run -0 r '[.id, .response_tokens, .policy_version]' -m "$M" -n 2 --max-new-tokens 10 in.jsonl
	mapfile -t env_out < <(printf '%s\n' "${lines[@]}" | sort)
	rm -f "/dev/shm/${spec#shm:}"
	run -0 r '[.id, .response_tokens, .policy_version]' -m "$M" -n 2 --max-new-tokens 10 in.jsonl
	[ "${#lines[@]}" -eq 6 ]
	mapfile -t files < <(printf '%s\n' "${lines[@]}" | sort)
	for i in "${!files[@]}"; do
		[ "${st[$i]}" = "$(jq -c '.[2] = 7' <<<"${files[$i]}")" ]
		[ "${env_out[$i]}" = "${st[$i]}" ]
	done
}

@test "--device guard: the same bytes as cpu, generating from a store with G > 1 and scoring" {
	store_of_m
	prompts 5 >in.jsonl
	for d in cpu guard; do
		sw-rollout --device $d -m "$M" --weights "$spec" -n 3 --max-new-tokens 12 --batch 4 --seed 3 in.jsonl >$d.gen
		SW_DEVICE=$d sw-rollout -m "$M" -n 2 --max-new-tokens 12 --temperature 0.8 --top-k 40 in.jsonl >$d.dir
		# (--batch 1: a scoring batch is what the input had sent when it paused, and the packed
		# forward's bits depend on the batch, so only batches of one give the same bytes every run)
		sw-rollout --device $d -m "$M" --score --batch 1 --temperature 0.7 --as ref_logprobs cpu.gen >$d.score
	done
	rm -f "/dev/shm/${spec#shm:}"
	[ "$(sw-cat -f json cpu.gen | jq -s 'map(.policy_version) | [length, unique]' -c)" = '[15,[7]]' ]
	cmp cpu.gen guard.gen
	cmp cpu.dir guard.dir
	cmp cpu.score guard.score
}

@test "weights updated during a rollout: responses in flight abort, later ones carry the new version" {
	command -v cc >/dev/null || skip "no C compiler"
	mkstore
	prompts 96 >in.jsonl
	./mkstore "$M" spec.txt out.msgpack sw-rollout -m "$M" -n 4 --batch 8 --max-new-tokens 30 --min-p 0.9 in.jsonl
	spec=$(cat spec.txt)
	rm -f "/dev/shm/${spec#shm:}"
	sw-rollout -m "$M" -n 4 --batch 8 --max-new-tokens 30 --min-p 0.9 -o files.msgpack in.jsonl
	sw-cat -f json out.msgpack | jq -c '[.id, .finish, .policy_version, .response_tokens]' | sort >store.txt
	sw-cat -f json files.msgpack | jq -c '[.id, .finish, .policy_version, .response_tokens]' | sort >files.txt
	[ "$(wc -l <store.txt)" -eq 384 ]
	# aborted responses were made by version 7, and are a prefix of what the files give
	grep -q '"abort",7' store.txt
	grep -q '"length",8' store.txt
	run ! grep -q '"abort",8' store.txt
	run -0 jq -s -c --slurpfile f files.txt '[., $f] | transpose | map(.[0] as $s | .[1] as $g |
		if $s[1] == "abort" then ($g[3][:($s[3] | length)] == $s[3]) else ($s[1] == $g[1] and $s[3] == $g[3]) end) | all' store.txt
	[ "$output" = true ]
}

@test "bad prompts are named by file and record; the samples before them are written" {
	bad() { # JSON line, expected message tail
		printf '%s\n' '{"id":"ok","prompt":"fine"}' "$1" >in.jsonl
		run -1 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 3 -n 2 in.jsonl
		[ "$stderr" = "sw-rollout: in.jsonl: record 2: $2" ] || { echo "got: $stderr"; false; }
		[ "$(jq -r .id <<<"$output" | sort | tr '\n' ' ')" = "ok/0 ok/1 " ]
	}
	bad '{"id":"x"}' "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field"
	bad '{"id":"x","question":"2+2?","answer":"#### 4"}' "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field; it has 'question': jq -c '.prompt = .question' names it the prompt"
	bad '{"prompt":5}' "field 'prompt' is a uint, not a string"
	bad '{"prompt":[{"role":"user","content":"hi"}]}' "field 'prompt' is an array, not a string: a conversation goes in 'messages' (jq -c '.messages = .prompt | del(.prompt)' moves it there)"
	bad '{"prompt":""}' "the prompt is empty (no tokens)"
	bad '{"prompt_tokens":"abc"}' "field 'prompt_tokens' is a str, not an array of token ids"
	bad '{"prompt_tokens":[1,300]}' "field 'prompt_tokens': token 1 is 300, outside the model's vocabulary of 300"
	bad '{"prompt_tokens":[1,-4]}' "field 'prompt_tokens': token 1 is -4, outside the model's vocabulary of 300"
	bad '{"prompt_tokens":[1,2.5]}' "field 'prompt_tokens': token 1 is the number 2.5, not a token id"
	bad '{"prompt_tokens":[[1]]}' "field 'prompt_tokens': token 0 is a array, not a token id"
	bad '{"messages":"hi"}' "field 'messages' is a str, not an array of {role, content} maps"
	bad '{"messages":[{"role":"user"}]}' "field 'messages': message 0 has no 'content'"
	bad '{"messages":[{"role":"user","content":3}]}' "field 'messages': message 0: 'content' is a uint, not a string"
	bad '{"messages":[]}' "field 'messages' is empty"
	bad '{"id":[1],"prompt":"a"}' "field 'id' is a array, not a string or an integer"
	bad '{"prompt":"a","max_new_tokens":4}' "field 'max_new_tokens' is 4, not from 1 to --max-new-tokens 3"
	bad '{"prompt":"a","max_new_tokens":"2"}' "field 'max_new_tokens' is str, not a whole number"
	bad "{\"prompt\":\"$(printf 'x%.0s' $(seq 300))\"}" "prompt has 300 tokens, the model's context is 256"
	bad "{\"prompt\":\"$(printf 'x%.0s' $(seq 256))\"}" "prompt has 256 tokens, the model's context is 256 (no room for a response)"
}

@test "NaN in prompt_tokens (msgpack float) is an error" {
	# {"prompt_tokens": [1, NaN as float32]}
	mp in.msgpack '\x81\xadprompt_tokens\x92\x01\xca\x7f\xc0\x00\x00'
	run -1 --separate-stderr sw-rollout -m "$M" in.msgpack
	[ "$stderr" = "sw-rollout: in.msgpack: record 1: field 'prompt_tokens': token 1 is the number nan, not a token id" ]
	[ "$output" = "" ]
}

@test "--skip-invalid skips, names and counts bad prompts; -q keeps only the samples" {
	printf '%s\n' '{"id":"a","prompt":"x"}' '{"id":"b"}' '{"id":"c","prompt":"y"}' '{"prompt":7}' >in.jsonl
	run -0 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 2 --skip-invalid in.jsonl
	[ "$(jq -r .id <<<"$output" | sort | tr '\n' ' ')" = "a/0 c/0 " ]
	[ "${stderr_lines[0]}" = "sw-rollout: in.jsonl: record 2: no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field (skipped)" ]
	[ "${stderr_lines[1]}" = "sw-rollout: in.jsonl: record 4: field 'prompt' is a uint, not a string (skipped)" ]
	[ "${stderr_lines[2]}" = "sw-rollout: skipped 2 invalid records" ]
	run -0 --separate-stderr sw-rollout -q -m "$M" -f json --max-new-tokens 2 --skip-invalid in.jsonl
	[ "$stderr" = "" ]
}

@test "--score: bad records are named" {
	printf '%s\n' '{"prompt":"a","response_tokens":[1]}' '{"prompt":"a"}' >in.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -f json --score in.jsonl
	[ "$stderr" = "sw-rollout: in.jsonl: record 2: nothing to score: the record has no 'response_tokens' or 'response' field" ]
	[ "$(jq -c '.logprobs | length' <<<"$output")" = 1 ]
	printf '%s\n' '{"prompt":"a","response_tokens":[1,777]}' >in.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" --score in.jsonl
	[ "$stderr" = "sw-rollout: in.jsonl: record 1: field 'response_tokens': token 1 is 777, outside the model's vocabulary of 300" ]
	python3 -c 'import json; print(json.dumps({"prompt": "x" * 200, "response": "y" * 57}))' >in.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" --score in.jsonl
	[ "$stderr" = "sw-rollout: in.jsonl: record 1: prompt and response have 257 tokens, the model's context is 256" ]
}

@test "a model or store that cannot be loaded, a corrupt stream" {
	echo '{"prompt":"a"}' >in.jsonl
	run -1 --separate-stderr sw-rollout -m no-such-dir in.jsonl
	[[ $stderr == "sw-rollout: no-such-dir/config.json: "* ]] || { echo "$stderr"; false; }
	run -1 --separate-stderr sw-rollout --weights shm:sw-rollout-no-such-store in.jsonl
	[ "$stderr" = "sw-rollout: store 'shm:sw-rollout-no-such-store': cannot open: No such file or directory" ]
	SW_WEIGHTS=shm:sw-rollout-no-such-store run -1 --separate-stderr sw-rollout in.jsonl
	[ "$stderr" = "sw-rollout: store 'shm:sw-rollout-no-such-store': cannot open: No such file or directory" ]
	run -1 --separate-stderr sw-rollout -m "$M" no-such-file
	[ "$stderr" = "sw-rollout: cannot open 'no-such-file': No such file or directory" ]
	printf '{"prompt":"a"}\n{"prompt":' >cut.jsonl
	run -1 --separate-stderr sw-rollout -m "$M" -f json --max-new-tokens 2 cut.jsonl
	[[ $stderr == "sw-rollout: cut.jsonl: "* ]]
}

@test "usage errors exit 2" {
	run -2 --separate-stderr sw-rollout in.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: no model: give -m DIR or --weights STORE" ]
	run -2 --separate-stderr sw-rollout -m "$M" --score -n 2
	[ "${stderr_lines[0]}" = "sw-rollout: option '-n' is for generation; --score generates nothing" ]
	run -2 --separate-stderr sw-rollout -m "$M" --as ref
	[ "${stderr_lines[0]}" = "sw-rollout: option '--as' goes with --score" ]
	run -2 --separate-stderr sw-rollout -m "$M" --top-p 0
	[ "${stderr_lines[0]}" = "sw-rollout: option '--top-p' wants a number above 0 and at most 1, not '0'" ]
	run -2 --separate-stderr sw-rollout -m "$M" --temperature -1
	[ "${stderr_lines[0]}" = "sw-rollout: option '--temperature' wants a number from 0 to 1e+06, not '-1'" ]
	run -2 --separate-stderr sw-rollout -m "$M" --temperature nan
	[ "${stderr_lines[0]}" = "sw-rollout: option '--temperature' wants a number from 0 to 1e+06, not 'nan'" ]
	run -2 --separate-stderr sw-rollout -m "$M" -n 0
	[ "${stderr_lines[0]}" = "sw-rollout: option '-n' wants a whole number from 1 to 65536, not '0'" ]
	run -2 --separate-stderr sw-rollout -m "$M" --stop ''
	[ "${stderr_lines[0]}" = "sw-rollout: option '--stop' wants a non-empty string" ]
	run -2 --separate-stderr sw-rollout -m "$M" --device tpu in.jsonl
	[ "${stderr_lines[0]}" = "sw-rollout: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)" ]
	[ "${#stderr_lines[@]}" = 2 ]
	run -1 --separate-stderr env SW_DEVICE=tpu sw-rollout -m "$M" in.jsonl
	[ "$stderr" = "sw-rollout: SW_DEVICE: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)" ]
}

@test "SW_GEMM chooses who computes the products: the same samples either way, another name is exit 1" {
	prompts 3 >in.jsonl
	SW_GEMM=onednn sw-rollout -m "$M" -n 2 --max-new-tokens 8 --seed 5 in.jsonl >onednn.gen
	SW_GEMM=openblas sw-rollout -m "$M" -n 2 --max-new-tokens 8 --seed 5 in.jsonl >openblas.gen
	[ "$(sw-cat -f json onednn.gen | jq -s length)" = 6 ]
	# Decoding's products are the backend's own batch-invariant kernel, whoever does the GEMMs.
	cmp onednn.gen openblas.gen
	for dev in "" "--device cpu" "--device guard"; do
		run -1 --separate-stderr env SW_GEMM=mkl sw-rollout $dev -m "$M" in.jsonl
		[ "$output" = "" ]
		[ "$stderr" = "sw-rollout: SW_GEMM: unknown GEMM provider 'mkl' (known: onednn, openblas)" ]
	done
}

@test "SW_PROFILE appends a table of the device's ops at exit; the same samples; a file it cannot open is exit 1" {
	prompts 3 >in.jsonl
	sw-rollout -m "$M" -n 2 --max-new-tokens 8 --seed 5 in.jsonl >plain.gen
	for dev in cpu guard; do
		run -0 --separate-stderr env SW_PROFILE=prof.txt sw-rollout --device $dev -m "$M" -n 2 --max-new-tokens 8 \
			--seed 5 -o $dev.gen in.jsonl
		[ "$stderr" = "" ]
		cmp plain.gen $dev.gen
	done
	# two processes, two tables, each headed by its program, pid and device
	run -0 grep -c '^# SW_PROFILE: ' prof.txt
	[ "$output" = 2 ]
	grep -Eq '^# SW_PROFILE: sw-rollout, pid [0-9]+, device cpu: [0-9.]+ s since the device was opened, [0-9.]+ s in [0-9]+ operations \([0-9.]+%\)$' prof.txt
	grep -Eq '^# SW_PROFILE: sw-rollout, pid [0-9]+, device guard: ' prof.txt
	# the decoder's products by shape (the tiny model: hidden 64, vocabulary 300), with their rate
	grep -Eq '^linear_rows +\(all shapes\) +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+$' prof.txt
	grep -Eq '^linear_rows +M=[0-9]+ N=300 K=64 ' prof.txt
	grep -Eq '^attn_paged +n=[0-9]+ H=[0-9]+ KVH=[0-9]+ hd=[0-9]+ ' prof.txt
	run -1 --separate-stderr env SW_PROFILE=/nonexistent-sw-dir/p sw-rollout -m "$M" in.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-rollout: SW_PROFILE: /nonexistent-sw-dir/p: No such file or directory" ]
	# a table that cannot be written whole (a file size limit, a full disk) leaves no part of it
	cp prof.txt before.txt
	run -0 --separate-stderr bash -c "ulimit -f $(( ($(stat -c %s prof.txt) + 1024) / 1024 )); SW_PROFILE=prof.txt exec sw-rollout -m \"$M\" -n 2 --max-new-tokens 8 --seed 5 -o lim.gen in.jsonl"
	[ "$stderr" = "sw-rollout: SW_PROFILE: prof.txt: File too large" ]
	cmp prof.txt before.txt
	cmp plain.gen lim.gen
}

@test "a closed pipe ends quietly; -z and -o write compressed and to a file" {
	prompts 40 >in.jsonl
	run -0 --separate-stderr bash -c 'sw-rollout -m "$1" -n 4 -f json in.jsonl | head -1 >/dev/null; echo "${PIPESTATUS[0]}"' _ "$M"
	[ "$output" = 141 ]
	[ "$stderr" = "" ]
	prompts 3 >in.jsonl
	run -0 --separate-stderr sw-rollout -m "$M" -n 2 --max-new-tokens 4 -z -o out.zst in.jsonl
	[ "$output" = "" ]
	[ "$(head -c 4 out.zst | od -An -tx1 | tr -d ' ')" = 28b52ffd ]
	run -0 sw-cat -c out.zst
	[ "$output" = 6 ]
}

# Python's msgpack reader, as a user of the stream has it (raw=False: every str must be UTF-8).
PY=/usr/bin/python3

@test "every str is UTF-8: a standard msgpack reader takes the stream; the text is the ids' lossy decode" {
	# the tiny model's random weights pick byte tokens that form no character, and responses end
	# inside characters: the text holds U+FFFD where the bytes are not UTF-8, the ids stay as made
	prompts 8 >in.jsonl
	run -0 sw-rollout -m "$M" -n 6 --max-new-tokens 24 -o out.msgpack in.jsonl
	run -0 --separate-stderr "$PY" - out.msgpack <<-'PYEOF'
	import sys, msgpack
	recs = list(msgpack.Unpacker(open(sys.argv[1], "rb"), raw=False))
	names = {256: "<|bos|>", 257: "<|eos|>", 258: "<|pad|>", 259: "<|im_start|>", 260: "<|im_end|>"}
	bad = 0
	for r in recs:
	    ids = r["response_tokens"][:-1] if r["finish"] == "stop" else r["response_tokens"]
	    b = b"".join(bytes([i]) if i < 256 else names.get(i, "").encode() for i in ids)
	    if r["response"] != b.decode("utf-8", "replace"):
	        print("differs:", r["id"], repr(r["response"]), ids)
	        bad += 1
	print(len(recs), sum("\ufffd" in r["response"] for r in recs), bad)
	PYEOF
	[ "$stderr" = "" ]
	read -r n fffd bad <<<"$output"
	[ "$n" = 48 ]
	[ "$bad" = 0 ]
	[ "$fffd" -gt 24 ]
}

@test "every str is UTF-8 with a byte-level BPE tokenizer.json (Llama 3's pre-tokenizer and specials)" {
	jq '.vocab_size = 1500 | .bos_token_id = 1494 | .eos_token_id = 1499' "$M/config.json" >config.json
	run -0 sw-model init -c config.json l3
	cp "$TOP"/tests/fixtures/tokenizers/llama3/tokenizer.json "$TOP"/tests/fixtures/tokenizers/llama3/tokenizer_config.json l3/
	prompts 8 >in.jsonl
	run -0 sw-rollout -m l3 -n 4 --max-new-tokens 16 -o out.msgpack in.jsonl
	run -0 --separate-stderr "$PY" -c '
import sys, msgpack
recs = list(msgpack.Unpacker(open(sys.argv[1], "rb"), raw=False))
print(len(recs), sum("\ufffd" in r["response"] for r in recs), sum(len(r["response_tokens"]) == len(r["logprobs"]) for r in recs))' out.msgpack
	[ "$stderr" = "" ]
	read -r n fffd same <<<"$output"
	[ "$n" = 32 ]
	[ "$same" = 32 ]
	[ "$fffd" -gt 0 ]
	# and a stream holding a str that is not UTF-8 is refused where it is read, named by record
	mp bad.msgpack '\x81\xa1x\xa1a\x81\xa8response\xa3a\xffb'
	run -1 --separate-stderr sw-cat bad.msgpack
	[ "$stderr" = "sw-cat: bad.msgpack: record 2 (byte 5): a string is not valid UTF-8 at byte 17; raw bytes belong in a bin" ]
}

@test "progress on a terminal: samples, tokens/s and ETA on standard error; nothing when it is not one" {
	command -v script >/dev/null || skip "script(1) (util-linux) is not installed"
	prompts 10 >in.jsonl
	# script(1) gives the program a terminal; the samples go to a file
	run -0 script -qc "sw-rollout -m '$M' -n 4 --max-new-tokens 48 -o out.msgpack in.jsonl" /dev/null
	line=$(printf '%s' "$output" | tr '\r' '\n' | grep -a 'samples, ' | tail -1)
	[[ $line =~ ^sw-rollout:\ 40/40\ samples,\ [0-9]+\ tokens/s,\ ETA\ 0:00 ]]
	printf '%s' "$output" | tr '\r' '\n' | grep -aq '^sw-rollout: 40 records'
	run -0 sw-cat -c out.msgpack
	[ "$output" = 40 ]
	# not a terminal: quiet, unless -v; -q silences the terminal too
	run -0 --separate-stderr sw-rollout -m "$M" -n 4 --max-new-tokens 8 -o out.msgpack in.jsonl
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-rollout -v -m "$M" -n 4 --max-new-tokens 8 -o out.msgpack in.jsonl
	[[ $stderr == *"sw-rollout: 40/40 samples, "*" tokens/s, ETA 0:00 "* ]]
	run -0 script -qc "sw-rollout -q -m '$M' -n 4 --max-new-tokens 8 -o out.msgpack in.jsonl" /dev/null
	[ "$output" = "" ]
}

# Start sw-rollout -o FILE in the background with SIGINT as it is on a terminal (a background job of
# a script has it ignored), wait until FILE's temporary (FILE.tmp.*: -o writes a file whole) holds 4
# samples, send the signal, and print the exit status.
interrupt() {
	local sig=$1 file=$2
	shift 2
	/usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
		sw-rollout "$@" -o "$file" 2>err.txt &
	local pid=$! i
	for i in $(seq 1 300); do
		# (the records before the end a live zstd frame has so far)
		[ "$(cat "$file".tmp.* 2>/dev/null | sw-cat 2>/dev/null | sw-cat -c 2>/dev/null || :)" -ge 4 ] 2>/dev/null && break
		sleep 0.1
	done
	kill -"$sig" "$pid"
	wait "$pid" && echo 0 || echo $?
}

@test "sw-rollout -o FILE interrupted (SIGINT, SIGTERM) keeps every sample it wrote, whole, zstd frame ended" {
	prompts 100 >in.jsonl
	run -0 interrupt INT out.msgpack -m "$M" -n 4 --max-new-tokens 256 --batch 16 in.jsonl
	[ "$output" = 130 ]
	run -0 --separate-stderr sw-cat -c out.msgpack
	n=$output
	[ "$n" -ge 4 ]
	[ "$n" -lt 400 ]
	[[ $(cat err.txt) =~ ^sw-rollout:\ interrupted\ \(SIGINT\):\ ([0-9]+)\ samples?\ written\ to\ out.msgpack$ ]]
	[ "${BASH_REMATCH[1]}" = "$n" ]
	# the samples are the first ones, in input order, each whole
	run -0 sh -c 'sw-cat -f json out.msgpack | jq -r .id | head -5 | tr "\n" " "'
	[ "$output" = "p1/0 p1/1 p1/2 p1/3 p2/0 " ]
	run -0 ls
	[[ $output != *.tmp.* ]]
	run -0 interrupt TERM out.zst -m "$M" -n 4 --max-new-tokens 256 --batch 16 -z in.jsonl
	[ "$output" = 143 ]
	[[ $(cat err.txt) == "sw-rollout: interrupted (SIGTERM): "*" written to out.zst" ]]
	run -0 --separate-stderr zstd -tq out.zst
	run -0 --separate-stderr sw-cat -c out.zst
	[ "$output" -ge 1 ]
}

@test "a config.json without a required field is an error naming it, never a default" {
	printf '{"prompt":"a"}\n' >in.jsonl
	for f in hidden_size rms_norm_eps num_attention_heads vocab_size intermediate_size num_hidden_layers \
		max_position_embeddings; do
		rm -rf m && cp -r "$M" m
		jq "del(.$f)" "$M/config.json" >m/config.json
		run -1 --separate-stderr sw-rollout -m m -f json in.jsonl
		[ "$output" = "" ]
		[ "$stderr" = "sw-rollout: m/config.json: field '$f' is missing; it is required" ]
	done
	jq '.rms_norm_eps = null' "$M/config.json" >m/config.json
	run -1 --separate-stderr sw-rollout -m m -f json in.jsonl
	[ "$stderr" = "sw-rollout: m/config.json: field 'rms_norm_eps' is null; it is required" ]
}
