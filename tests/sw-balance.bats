#!/usr/bin/env bats
# sw-balance: placement (groups intact, even cost, capacities), micro-batches
# under a token budget, one file per rank, every kind of abnormal sample
# dropped with its reason and kept with --rejects, statistics, bad input.
load helpers

# A small batch as JSON Lines: two groups of two, and a loner.
small() {
	cat >small.jsonl <<'EOF'
{"id":"a/0","group":"a","prompt_tokens":[1,2,3],"response_tokens":[4,5],"logprobs":[-0.5,-1.0],"reward":1.0,"mine":{"x":[1,true]}}
{"id":"a/1","group":"a","prompt_tokens":[1,2,3],"response_tokens":[6],"logprobs":[-0.25],"reward":0.0}
{"id":"b/0","group":"b","prompt":"a prompt of some forty bytes, more or less","response":"short","reward":0.5}
{"id":"b/1","group":"b","prompt":"a prompt of some forty bytes, more or less","response":"a longer answer here","reward":0.0}
{"id":"c","prompt_tokens":[9,9,9,9,9,9,9,9],"response_tokens":[1,2,3,4,5,6,7,8,9,10]}
EOF
}

@test "every sample comes out once, with cost, rank and micro, other fields unchanged" {
	small
	run -0 --separate-stderr sw-balance -n 2 -f json small.jsonl
	[ "$stderr" = "" ]
	[ "${#lines[@]}" -eq 5 ]
	# the same samples, whatever order, once the three fields are taken away
	diff <(echo "$output" | jq -c 'del(.cost, .rank, .micro)' | sort) <(jq -c . small.jsonl | sort)
	[ -z "$(echo "$output" | jq -c 'select((.rank | type) != "number" or .rank > 1 or .micro != 0 or .cost <= 0)')" ]
	# a group's samples share a rank
	[ "$(echo "$output" | jq -r 'select(.group == "a") | .rank' | sort -u | wc -l)" -eq 1 ]
	[ "$(echo "$output" | jq -r 'select(.group == "b") | .rank' | sort -u | wc -l)" -eq 1 ]
	# ordered by rank
	[ "$(echo "$output" | jq -r .rank | tr -d '\n')" = "$(echo "$output" | jq -r .rank | sort | tr -d '\n')" ]
}

@test "the cost is the documented formula with the default coefficients" {
	printf '%s\n' '{"prompt_tokens":[1,2,3],"response_tokens":[4,5,6,7,8]}' >one.jsonl
	run -0 sw-balance --stage generate -f json one.jsonl
	# 8 tokens: 8 * 13214154752 + 64 * 262144, as float32
	want=$(echo '{"c": 105713238016}' | jq '.c + 64 * 262144')
	got=$(echo "$output" | jq .cost)
	awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d / b < 1e-6) }'
	run -0 sw-balance --stage train -f json one.jsonl
	awk -v a="$(echo "$output" | jq .cost)" -v b="$want" 'BEGIN { d = a - 3 * b; if (d < 0) d = -d; exit !(d / b < 1e-6) }'
}

@test "kk balances a real batch within 2%, better than sequential chunks" {
	sw-datagen -n 512 -s 5 >d.msgpack
	for m in kk lpt seq; do
		run -0 --separate-stderr sw-balance -n 8 -m $m --split-groups --stats $m.json -o /dev/null d.msgpack
		[ "$stderr" = "" ]
	done
	jq -e '.method == "kk" and .samples == 512 and .kept == 512 and .items == 512' kk.json
	jq -e '.imbalance.max_over_mean <= 1.02' kk.json
	jq -e '.imbalance.max_over_mean <= 1.02' lpt.json
	kk=$(jq .imbalance.max_over_mean kk.json) seq=$(jq .imbalance.max_over_mean seq.json)
	awk -v k="$kk" -v s="$seq" 'BEGIN { exit !(k < s) }'
	jq -e '[.per_rank[].samples] | add == 512' seq.json
	jq -e '[.per_rank[].samples] | all(. == 64)' seq.json
}

@test "groups stay whole unless --split-groups" {
	sw-datagen -n 200 -s 2 >d.msgpack
	run -0 sw-balance -n 3 -f json d.msgpack
	[ "$(echo "$output" | jq -r '"\(.group) \(.rank)"' | sort -u | wc -l)" -eq 25 ]
	run -0 sw-balance -n 3 --split-groups -f json d.msgpack
	[ "$(echo "$output" | jq -r '"\(.group) \(.rank)"' | sort -u | wc -l)" -gt 25 ]
}

@test "--capacity: each rank's share of the cost follows its capacity" {
	sw-datagen -n 600 -s 9 >d.msgpack
	run -0 sw-balance --capacity 1,1,0.5 --split-groups --stats st.json -o /dev/null d.msgpack
	jq -e '.ranks == 3' st.json
	jq -e '[.per_rank[] | (.share / .capacity_share - 1) | fabs] | max < 0.02' st.json
	jq -e '.per_rank[2].capacity_share == 0.2' st.json
	# as many capacities as ranks, or a usage error
	run -2 --separate-stderr sw-balance -n 2 --capacity 1,1,0.5 d.msgpack
	[ "${stderr_lines[0]}" = "sw-balance: option '--capacity' gives 3 capacities for 2 ranks" ]
	run -2 --separate-stderr sw-balance --capacity 1,0,2 d.msgpack
	[ "${stderr_lines[0]}" = "sw-balance: option '--capacity' wants positive numbers separated by commas, not '1,0,2'" ]
	run -2 --separate-stderr sw-balance --capacity 1,nan d.msgpack
	[[ ${stderr_lines[0]} == *"wants positive numbers"* ]]
}

@test "--max-tokens: the same micro-batch count on every rank, each under budget" {
	sw-datagen -n 256 -s 4 >d.msgpack
	run -0 --separate-stderr sw-balance -n 4 --max-tokens 3000 --stats st.json -f json d.msgpack
	[ "$stderr" = "" ]
	echo "$output" >out.jsonl
	m=$(jq .micro_batches st.json)
	[ "$m" -gt 1 ]
	# every rank uses micro-batches 0..m-1
	for r in 0 1 2 3; do
		[ "$(jq -r "select(.rank == $r) | .micro" out.jsonl | sort -u | wc -l)" -eq "$m" ]
	done
	# tokens of each (rank, micro) within budget
	jq -s -e 'group_by([.rank, .micro]) | map(map((.prompt_tokens | length) + (.response_tokens | length)) | add) | max <= 3000' out.jsonl
	# small, large, small, large within each rank
	jq -s -e 'group_by(.rank) | map(group_by(.micro) | map(map((.prompt_tokens | length) + (.response_tokens | length)) | add)
		| . as $t | [range(0; length)] | map(select(. % 2 == 0)) | map($t[.]) | max <= ([range(0; ($t | length))] | map(select(. % 2 == 1)) | map($t[.]) | min)) | all' out.jsonl
}

@test "--max-tokens: a sample over budget gets a micro-batch of its own, and is reported" {
	small
	run -0 --separate-stderr sw-balance -n 1 --max-tokens 10 --stats st.json -f json small.jsonl
	# b/0 and b/1 have 11 + 2 and 11 + 5 tokens, estimated; c has 18
	[ "$stderr" = "sw-balance: 3 samples over --max-tokens 10, each in a micro-batch of its own" ]
	jq -e '.over_budget == 3 and .micro_batches == 4' st.json
	big=$(echo "$output" | jq -r 'select(.id == "c") | .micro')
	[ "$(echo "$output" | jq -r "select(.micro == $big) | .id")" = "c" ]
}

@test "-o with %d writes one file per rank" {
	sw-datagen -n 80 -s 1 >d.msgpack
	run -0 sw-balance -n 3 -o 'shard-%d.msgpack' d.msgpack
	[ "$output" = "" ]
	total=0
	for r in 0 1 2; do
		[ -s shard-$r.msgpack ]
		[ "$(sw-cat -f json shard-$r.msgpack | jq -r .rank | sort -u)" = "$r" ]
		total=$((total + $(sw-cat -c shard-$r.msgpack)))
	done
	[ "$total" -eq 80 ]
	[ ! -e shard-3.msgpack ]
	run -2 --separate-stderr sw-balance -n 2 -o 'x-%s.msgpack' d.msgpack
	[ "${stderr_lines[0]}" = "sw-balance: option '-o' wants one %d for the rank and no other % conversion, not 'x-%s.msgpack'" ]
}

@test "abnormal samples: each reason, counted, reported, and kept by --rejects" {
	cat >bad.jsonl <<'EOF'
{"id":"ok1","group":"g","response_tokens":[1,2],"logprobs":[-1,-2],"reward":1.0}
{"id":"mismatch","group":"g","response_tokens":[1,2,3],"logprobs":[-1,-2],"reward":0.0}
{"id":"nan","group":"g","response_tokens":[1],"logprobs":[{"$f32":"nan"}],"reward":0.0}
{"id":"inf-reward","group":"g","response_tokens":[1],"reward":{"$f64":"inf"}}
{"id":"verr","group":"g","response_tokens":[1],"reward":0.0,"verifier_error":"exec:check timed out"}
{"id":"empty","group":"g","prompt":"q","response":"","reward":0.0}
{"id":"long","group":"g","response_tokens":[1,2,3,4,5,6,7,8,9,10,11,12],"reward":0.0}
{"id":"type","group":"g","response_tokens":"1 2 3","reward":0.0}
{"id":"badtok","group":"g","response_tokens":[1,-2],"reward":0.0}
{"id":"badgroup","group":7,"response_tokens":[1],"reward":0.0}
{"id":"ok2","group":"g","response_tokens":[3],"reward":0.0}
EOF
	run -0 --separate-stderr sw-balance -n 2 --max-len 10 --rejects rej.jsonl -f json --stats st.json bad.jsonl
	[ "${#lines[@]}" -eq 2 ]
	[ "$(echo "$output" | jq -r .id | tr '\n' ' ')" != "" ]
	[ "${stderr_lines[0]}" = "sw-balance: bad.jsonl: record 2: dropped (malformed): field 'logprobs' has 2 values, 'response_tokens' has 3" ]
	[ "${stderr_lines[1]}" = "sw-balance: bad.jsonl: record 3: dropped (non_finite): field 'logprobs': value 0 is nan" ]
	[ "${stderr_lines[2]}" = "sw-balance: bad.jsonl: record 4: dropped (non_finite): field 'reward' is inf" ]
	[ "${stderr_lines[3]}" = "sw-balance: bad.jsonl: record 5: dropped (verifier_error): exec:check timed out" ]
	[ "${stderr_lines[4]}" = "sw-balance: bad.jsonl: record 6: dropped (empty): empty response" ]
	[ "${stderr_lines[5]}" = "sw-balance: bad.jsonl: record 7: dropped (too_long): 12 tokens, more than --max-len 10" ]
	[ "${stderr_lines[6]}" = "sw-balance: bad.jsonl: record 8: dropped (malformed): field 'response_tokens' is a str, not an array" ]
	[ "${stderr_lines[7]}" = "sw-balance: bad.jsonl: record 9: dropped (malformed): field 'response_tokens': value 1 is a int, not a token id" ]
	[ "${stderr_lines[8]}" = "sw-balance: bad.jsonl: record 10: dropped (malformed): field 'group' is not a str" ]
	[ "${stderr_lines[9]}" = "sw-balance: dropped 9 of 11 samples: 4 malformed, 2 non_finite, 1 verifier_error, 1 empty, 1 too_long" ]
	# nothing lost: the rejects are the dropped samples, whole, with the reason
	[ "$(jq -r .id rej.jsonl | tr '\n' ' ')" = "mismatch nan inf-reward verr empty long type badtok badgroup " ]
	[ "$(jq -r .drop_reason rej.jsonl | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')" = "empty=1 malformed=4 non_finite=2 too_long=1 verifier_error=1 " ]
	diff <(jq -c 'del(.drop_reason, .drop_detail)' rej.jsonl) <(grep -v '"ok' bad.jsonl | jq -c .)
	jq -e '.drops == {"malformed":4,"non_finite":2,"verifier_error":1,"empty":1,"too_long":1,"no_reward":0,"uniform_group":0}' st.json
	jq -e '.kept == 2 and .dropped == 9 and .samples == 11' st.json
	# -q keeps quiet about it
	run -0 --separate-stderr sw-balance -q -n 2 --max-len 10 -o /dev/null bad.jsonl
	[ "$stderr" = "" ]
}

@test "--drop-uniform-groups drops groups without learning signal, and samples without reward" {
	cat >g.jsonl <<'EOF'
{"id":"s/0","group":"solved","response_tokens":[1],"reward":1.0}
{"id":"s/1","group":"solved","response_tokens":[1],"reward":1.0}
{"id":"m/0","group":"mixed","response_tokens":[1],"reward":1.0}
{"id":"m/1","group":"mixed","response_tokens":[1],"reward":0.0}
{"id":"m/2","group":"mixed","response_tokens":[1]}
{"id":"alone","response_tokens":[1],"reward":0.5}
EOF
	run -0 --separate-stderr sw-balance --drop-uniform-groups --rejects rej.jsonl -f json g.jsonl
	[ "$(echo "$output" | jq -r .id | tr '\n' ' ')" = "m/0 m/1 " ]
	[ "$(jq -r '"\(.id):\(.drop_reason)"' rej.jsonl | tr '\n' ' ')" = "s/0:uniform_group s/1:uniform_group m/2:no_reward alone:uniform_group " ]
	[ "${stderr_lines[2]}" = "sw-balance: g.jsonl: record 5: dropped (no_reward): no 'reward' to judge the group by" ]
	[ "${stderr_lines[4]}" = "sw-balance: dropped 4 of 6 samples: 1 no_reward, 3 uniform_group" ]
	# without the option, all stay
	run -0 sw-balance -f json g.jsonl
	[ "${#lines[@]}" -eq 6 ]
}

@test "--model prices samples for that model and tokenises text with its tokenizer" {
	printf '%s\n' '{"prompt":"hello","response":"ab"}' >t.jsonl
	run -0 sw-balance --stage generate --model "$TOP/tests/fixtures/models/tiny-llama" -f json t.jsonl
	# tiny-llama: hidden 64, 2 layers, MLP 128, 4 heads of 16, 2 kv heads, vocab 300; the byte tokenizer: 7 tokens
	n=$(( 2 * (2*64*64 + 2*64*32 + 3*64*128) + 64*300 ))
	want=$(( 7 * 2 * n + 49 * 2 * 2 * 4 * 16 ))
	[ "$(echo "$output" | jq .cost)" = "$want" ]
	run -1 --separate-stderr sw-balance --model /no/such/model t.jsonl
	[ "$stderr" = "sw-balance: /no/such/model: /no/such/model/config.json: cannot open" ]
}

@test "the same input gives the same output" {
	sw-datagen -n 100 -s 6 >d.msgpack
	sw-balance -n 5 --max-tokens 4000 d.msgpack >a.msgpack
	sw-balance -n 5 --max-tokens 4000 d.msgpack >b.msgpack
	cmp a.msgpack b.msgpack
	sw-balance -n 5 --max-tokens 4000 -z d.msgpack | sw-cat | cmp - a.msgpack
}

@test "bad input: a broken stream is an error naming file and record" {
	sw-datagen -n 3 >d.msgpack
	cat d.msgpack >bad.msgpack
	printf '\xc1' >>bad.msgpack
	run -1 --separate-stderr sw-balance -n 2 bad.msgpack
	[ "$output" = "" ]
	[[ $stderr == "sw-balance: bad.msgpack: record 4 (byte "*"): "* ]]
	run -1 --separate-stderr sw-balance nonexistent.msgpack
	[ "$stderr" = "sw-balance: cannot open 'nonexistent.msgpack': No such file or directory" ]
	: >empty.msgpack
	run -1 --separate-stderr sw-balance empty.msgpack
	[[ $stderr == "sw-balance: empty.msgpack: "*"empty input"* ]]
}

@test "usage errors" {
	run -2 --separate-stderr sw-balance -m best
	[ "${stderr_lines[0]}" = "sw-balance: unknown method 'best' (kk, lpt or seq)" ]
	run -2 --separate-stderr sw-balance --stage eval
	[ "${stderr_lines[0]}" = "sw-balance: unknown stage 'eval' (generate or train)" ]
	run -2 --separate-stderr sw-balance -n 0
	[ "${stderr_lines[0]}" = "sw-balance: option '-n' wants a whole number from 1 to 65536, not '0'" ]
	run -2 --separate-stderr sw-balance --max-tokens x
	[[ ${stderr_lines[0]} == "sw-balance: option '--max-tokens' wants a whole number"* ]]
}

@test "a mixed text+image batch with log-normal lengths: images are priced, kk stays within 2%" {
	sw-datagen -n 512 -l -i 30 -s 11 >m.msgpack
	sw-datagen -n 512 -l -i 30 -s 11 | cmp - m.msgpack
	[ "$(sw-cat -f json m.msgpack | jq -c 'select(.media != null)' | wc -l)" -gt 50 ]
	run -0 sw-balance -n 8 --split-groups --stats st.json -o /dev/null m.msgpack
	# an image's cost: its patches in the encoder, and patches / 4 more tokens in the decoder
	run -0 sw-balance --stage generate -f json m.msgpack
	echo "$output" | jq -c 'select(.media != null) | {t: ((.prompt_tokens | length) + (.response_tokens | length)),
		p: ((((.media[0].h + 27) / 28 | floor) * 2) * (((.media[0].w + 27) / 28 | floor) * 2)), c: .cost}' | head -1 >img.json
	jq -e '(.t + .p / 4) as $T | (13214154752 * $T + 262144 * $T * $T + 1258291200 * .p + 163840 * .p * .p) as $want
		| ((.c - $want) / $want | fabs) < 1e-6' img.json
	jq -e '.imbalance.max_over_mean <= 1.02 and .imbalance.max_over_lower_bound <= 1.02' st.json
}

@test "on a terminal: JSON Lines by default, binary refused" {
	command -v script >/dev/null || skip "script(1) is not installed"
	sw-datagen -n 3 >d.msgpack
	run -0 script -qec "sw-balance -n 2 d.msgpack" /dev/null
	[[ ${lines[0]} == '{"id":"p0/'* ]]
	run -2 script -qec "sw-balance -f msgpack d.msgpack" /dev/null
	[[ $output == "sw-balance: refusing to write binary to a terminal"* ]]
}
