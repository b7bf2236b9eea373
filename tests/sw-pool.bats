#!/usr/bin/env bats
# sw-pool: add (once each prompt; an id's clash an error), take by the
# priority rule, update from scored samples, the pool untouched by bad
# input, concurrent calls losing nothing, take | ... | update not waiting on
# itself.
load helpers

prompts() {
	printf '%s\n' '{"id":"p0","prompt":"zero"}' '{"id":"p1","prompt":"one"}' '{"id":"p2","prompt":"two"}' \
		'{"id":"p3","prompt":"three"}' >prompts.jsonl
}

ids() {
	sw-pool take "$@" -f json | jq -r .id | tr '\n' ' '
}

@test "add: creates the pool, keeps fields, adds a prompt once; another prompt of an id already there is an error" {
	prompts
	run -0 --separate-stderr sw-pool -v add pool.mp prompts.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-pool: pool.mp: added 4 of 4 prompts (0 already there), 4 in all" ]
	printf '%s\n' '{"id":"p1","prompt":"one"}' '{"id":"p4","prompt":"four","mine":[1,2]}' '{"id":"p4","prompt":"four","mine":[1,2]}' >more.jsonl
	run -0 --separate-stderr sw-pool -v add pool.mp more.jsonl
	[ "$stderr" = "sw-pool: pool.mp: added 1 of 3 prompts (2 already there), 5 in all" ]
	# the pool's own records (with their pool maps) added again: all there already; so is a file
	# written again with its fields in another order
	sw-pool take pool.mp >taken.mp
	run -0 --separate-stderr sw-pool -v add pool.mp taken.mp
	[ "$stderr" = "sw-pool: pool.mp: added 0 of 5 prompts (5 already there), 5 in all" ]
	jq -c '{prompt, id}' prompts.jsonl >reordered.jsonl
	run -0 --separate-stderr sw-pool -v add pool.mp reordered.jsonl
	[ "$stderr" = "sw-pool: pool.mp: added 0 of 4 prompts (4 already there), 5 in all" ]
	# another prompt under an id the pool has, or one earlier in the input has: an error, nothing added
	cp pool.mp before.mp
	printf '%s\n' '{"id":"p9","prompt":"nine"}' '{"id":"p1","prompt":"again"}' >clash.jsonl
	run -1 --separate-stderr sw-pool add pool.mp clash.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-pool: clash.jsonl: record 2: id 'p1' is the pool's already, for another prompt (an id names one prompt: give this one an id of its own)" ]
	cmp pool.mp before.mp
	printf '%s\n' '{"id":"p9","prompt":"nine"}' '{"id":"p9","prompt":"nine","label":"9"}' >clash2.jsonl
	run -1 --separate-stderr sw-pool add pool.mp clash2.jsonl
	[ "$stderr" = "sw-pool: clash2.jsonl: record 2: id 'p9' is the pool's already, for another prompt (an id names one prompt: give this one an id of its own)" ]
	cmp pool.mp before.mp
	run -0 sw-pool take pool.mp -f json
	[ "${#lines[@]}" -eq 5 ]
	[ "$(echo "$output" | jq -r 'select(.id == "p1") | .prompt')" = "one" ]
	[ "$(echo "$output" | jq -c 'select(.id == "p4") | .mine')" = "[1,2]" ]
	echo "$output" | jq -c 'select(.id == "p4")' | jq -e '.pool | .seen == 0 and .added == 4 and .priority == null'
	# the pool is a stream any tool reads
	[ "$(sw-cat -c pool.mp)" -eq 5 ]
	# quiet without -v when stderr is no terminal
	run -0 --separate-stderr sw-pool add pool.mp more.jsonl
	[ "$stderr" = "" ]
}

@test "the reports show a pool's name escaped: a name cannot drive the terminal or forge a line" {
	prompts
	f=$(printf 'p\nsw-pool: fake\033]0;x\007.mp')
	run -0 --separate-stderr sw-pool -v add "$f" prompts.jsonl
	[ "$output" = "" ]
	[ "$stderr" = 'sw-pool: p\x0asw-pool: fake\x1b]0;x\x07.mp: added 4 of 4 prompts (0 already there), 4 in all' ]
	printf '%s\n' '{"group":"p0","reward":1}' '{"group":"p1","reward":0}' >r.jsonl
	run -0 --separate-stderr sw-pool -v update "$f" r.jsonl
	[ "$stderr" = 'sw-pool: p\x0asw-pool: fake\x1b]0;x\x07.mp: round 1: 2 samples, 2 prompts updated' ]
	# other text is left as it is
	run -0 --separate-stderr sw-pool -v add 'pâté.mp' prompts.jsonl
	[ "$stderr" = "sw-pool: pâté.mp: added 4 of 4 prompts (0 already there), 4 in all" ]
}

@test "take: unseen first in order added, then by learning signal; -n limits" {
	prompts
	sw-pool add pool.mp prompts.jsonl
	[ "$(ids pool.mp)" = "p0 p1 p2 p3 " ]
	[ "$(ids -n 2 pool.mp)" = "p0 p1 " ]
	# p0 solved, p1 half right, p2 never right, p3 unseen
	cat >s.jsonl <<'EOF'
{"id":"p0/0","group":"p0","reward":1.0}
{"id":"p0/1","group":"p0","reward":1.0}
{"id":"p1/0","group":"p1","reward":1.0}
{"id":"p1/1","group":"p1","reward":0.0}
{"id":"p2/0","group":"p2","reward":0.0}
{"id":"p2/1","group":"p2","reward":0.0}
EOF
	run -0 --separate-stderr sw-pool -v update pool.mp s.jsonl
	[ "$stderr" = "sw-pool: pool.mp: round 1: 6 samples, 3 prompts updated" ]
	# p3 (unseen), p1 (signal 1), p2 (floor 0.1), p0 (solved: 0.05)
	[ "$(ids pool.mp)" = "p3 p1 p2 p0 " ]
	run -0 sw-pool take pool.mp -f json
	echo "$output" | jq -c 'select(.id == "p1")' | jq -e '.pool | .seen == 1 and .samples == 2 and .pass_rate == 0.5 and .reward_mean == 0.5 and .reward_var == 0.25 and .last_seen == 1 and .streak == 0 and .priority == 1'
	echo "$output" | jq -c 'select(.id == "p0")' | jq -e '.pool | .streak == 1 and .priority == 0.05'
	echo "$output" | jq -c 'select(.id == "p2")' | jq -e '.pool | .priority == 0.1'
}

@test "the priority rule: solved prompts decay, unseen age raises priority, --pass sets passing" {
	prompts
	sw-pool add pool.mp prompts.jsonl
	printf '%s\n' '{"group":"p0","reward":1}' '{"group":"p1","reward":0}' '{"group":"p2","reward":0.6}' '{"group":"p3","reward":0.6}' >r1.jsonl
	sw-pool update pool.mp r1.jsonl
	# p2, p3 did not pass at the default --pass 1: floor 0.1 like p1; p0 solved 0.05
	run -0 sw-pool take pool.mp -f json
	echo "$output" | jq -c 'select(.id == "p2")' | jq -e '.pool.pass_rate == 0'
	# with --pass 0.5 the same reward passes
	printf '%s\n' '{"group":"p2","reward":0.6}' '{"group":"p2","reward":0.2}' >r2.jsonl
	sw-pool update --pass 0.5 pool.mp r2.jsonl
	run -0 sw-pool take pool.mp -f json
	echo "$output" | jq -c 'select(.id == "p2")' | jq -e '.pool.pass_rate == 0.5 and .pool.priority == 1'
	# round 2: p0, p1, p3 unseen for one round: x 1.1
	echo "$output" | jq -c 'select(.id == "p1")' | jq -e '.pool.priority == 0.11000000000000001'
	# p0 solved again and again: its priority halves each time
	printf '%s\n' '{"group":"p0","reward":1}' >r3.jsonl
	sw-pool update pool.mp r3.jsonl
	a=$(sw-pool take pool.mp -f json | jq 'select(.id == "p0") | .pool.priority')
	sw-pool update pool.mp r3.jsonl
	b=$(sw-pool take pool.mp -f json | jq 'select(.id == "p0") | .pool.priority')
	[ "$a" = "0.025" ]
	[ "$b" = "0.0125" ]
	[ "$(ids pool.mp | awk '{print $NF}')" = "p0" ]
}

@test "bad input leaves the pool byte for byte as it was" {
	prompts
	sw-pool add pool.mp prompts.jsonl
	cp pool.mp before.mp
	printf '%s\n' '{"id":"x","prompt":"fine"}' '{"prompt":"no id"}' >noid.jsonl
	run -1 --separate-stderr sw-pool add pool.mp noid.jsonl
	[ "$stderr" = "sw-pool: noid.jsonl: record 2: no 'id' field" ]
	cmp pool.mp before.mp
	printf '%s\n' '{"group":"p0","reward":1}' '{"group":"nope","reward":1}' >unknown.jsonl
	run -1 --separate-stderr sw-pool update pool.mp unknown.jsonl
	[ "$stderr" = "sw-pool: unknown.jsonl: record 2: prompt 'nope' is not in the pool" ]
	cmp pool.mp before.mp
	printf '%s\n' '{"group":"p0","reward":{"$f32":"nan"}}' >nan.jsonl
	run -1 --separate-stderr sw-pool update pool.mp nan.jsonl
	[ "$stderr" = "sw-pool: nan.jsonl: record 1: field 'reward' is nan" ]
	printf '%s\n' '{"group":"p0","reward":"yes"}' >str.jsonl
	run -1 --separate-stderr sw-pool update pool.mp str.jsonl
	[ "$stderr" = "sw-pool: str.jsonl: record 1: field 'reward' is a str, not a number" ]
	printf '%s\n' '{"group":"p0"}' >none.jsonl
	run -1 --separate-stderr sw-pool update pool.mp none.jsonl
	[ "$stderr" = "sw-pool: none.jsonl: record 1: no 'reward' field" ]
	printf '\x81\xa2id' >torn.mp
	run -1 --separate-stderr sw-pool add pool.mp torn.mp
	[[ $stderr == "sw-pool: torn.mp: record 1 (byte 0): "* ]]
	cmp pool.mp before.mp
	[ -z "$(ls | grep tmp)" ]
	# a damaged pool file is named
	printf '{"id":"a"}\n{"id":"a"}\n' >dup.mp
	run -1 --separate-stderr sw-pool take dup.mp
	[ "$stderr" = "sw-pool: dup.mp: record 2: a second prompt of the same id" ]
	run -1 --separate-stderr sw-pool take missing.mp
	[ "$stderr" = "sw-pool: cannot open pool 'missing.mp': No such file or directory" ]
	[ ! -e missing.mp.lock ]
	# update needs a pool too (only add makes one), and leaves nothing either
	printf '%s\n' '{"group":"p0","reward":1}' >u.jsonl
	run -1 --separate-stderr sw-pool update missing.mp u.jsonl
	[ "$stderr" = "sw-pool: cannot open pool 'missing.mp': No such file or directory" ]
	[ ! -e missing.mp ]
	[ ! -e missing.mp.lock ]
	# a pool that exists gets its lock from an update, as from an add; a take takes none
	cp before.mp kept.mp
	sw-pool take kept.mp >/dev/null
	[ ! -e kept.mp.lock ]
	run -0 --separate-stderr sw-pool update kept.mp u.jsonl
	[ -e kept.mp.lock ]
}

@test "samples with verifier_error are not counted, and that is said" {
	prompts
	sw-pool add pool.mp prompts.jsonl
	printf '%s\n' '{"group":"p0","reward":1}' '{"group":"p0","reward":0,"verifier_error":"timeout"}' >v.jsonl
	run -0 --separate-stderr sw-pool update pool.mp v.jsonl
	[ "$stderr" = "sw-pool: pool.mp: 1 samples with verifier_error not counted (they have no trustworthy reward)" ]
	sw-pool take pool.mp -f json | jq -c 'select(.id == "p0")' | jq -e '.pool.samples == 1 and .pool.pass_rate == 1'
}

@test "concurrent adds and updates lose nothing (flock)" {
	for k in 0 1 2 3 4 5 6 7; do
		for i in $(seq 0 19); do echo "{\"id\":\"w$k-$i\"}"; done >w$k.jsonl
	done
	for k in 0 1 2 3 4 5 6 7; do
		( for i in $(seq 0 19); do sed -n "$((i + 1))p" w$k.jsonl | sw-pool add pool.mp || exit 1; done ) &
	done
	wait
	[ "$(sw-cat -c pool.mp)" -eq 160 ]
	[ "$(sw-cat -f json pool.mp | jq -r .id | sort -u | wc -l)" -eq 160 ]
	# eight updates at once: eight rounds, each prompt seen once
	for k in 0 1 2 3 4 5 6 7; do
		jq -c '{group: .id, reward: 1}' w$k.jsonl | sw-pool update pool.mp &
	done
	wait
	sw-cat -f json pool.mp | jq -s -e 'map(.pool.seen) | all(. == 1)'
	sw-cat -f json pool.mp | jq -s -e 'map(.pool.last_seen) | unique | length == 8'
	[ -z "$(ls | grep tmp)" ]
}

@test "take | rollout | verify | update of one pool never waits on itself, whichever locks first" {
	prompts
	sw-pool add pool.mp prompts.jsonl
	sw-model init -s tiny m >/dev/null
	# the update starts first and holds its lock while it reads; the take comes after it
	run -0 --separate-stderr timeout 60 bash -eo pipefail -c '(sleep 0.5; sw-pool take pool.mp) |
		sw-rollout -m m -n 2 --max-new-tokens 4 | sw-verify -r length,max=8,buffer=2 | sw-pool -v update pool.mp'
	[ "$output" = "" ]
	[ "$stderr" = "sw-pool: pool.mp: round 1: 8 samples, 4 prompts updated" ]
	sw-cat -f json pool.mp | jq -s -e 'map(.pool.seen) | all(. == 1)'
}

@test "usage errors" {
	run -2 --separate-stderr sw-pool
	[ "${stderr_lines[0]}" = "sw-pool: a command is needed: add, take or update" ]
	run -2 --separate-stderr sw-pool drop pool.mp
	[ "${stderr_lines[0]}" = "sw-pool: unknown command 'drop' (add, take or update)" ]
	run -2 --separate-stderr sw-pool add
	[ "${stderr_lines[0]}" = "sw-pool: 'add' needs a pool file" ]
	run -2 --separate-stderr sw-pool take pool.mp x.jsonl
	[ "${stderr_lines[0]}" = "sw-pool: 'take' reads no files, only the pool" ]
	run -2 --separate-stderr sw-pool update --pass abc pool.mp
	[ "${stderr_lines[0]}" = "sw-pool: option '--pass' wants a number, not 'abc'" ]
}
