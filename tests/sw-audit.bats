#!/usr/bin/env bats
# sw-audit: a log built with `sw-audit log`, verified, listed, and tampered
# with in every way the chain must catch, each named by its record.
load helpers

# A run directory with five records, the third a checkpoint.
make_run() {
	mkdir -p run/ckpt/iter-2
	printf '{"hidden_size":64}\n' >run/ckpt/iter-2/config.json
	printf 'weights' >run/ckpt/iter-2/model.safetensors
	sw-audit log run run_start argv:='["sw-run","--iters","3"]' seed:=7
	sw-audit log run stage iter:=1 name=rollout
	sw-audit log -c ckpt/iter-2 run checkpoint iter:=2 version:=2
	sw-audit log run stage iter:=3 name='train step'
	sw-audit log run run_end status=ok
}

@test "verify: an intact log and its checkpoint, exit 0" {
	make_run
	run -0 --separate-stderr sw-audit verify run
	[[ $output =~ ^run/audit.log:\ ok:\ 5\ records,\ 1\ checkpoint,\ head\ [0-9a-f]{64}$ ]]
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-audit -q verify run/audit.log
	[ "$output" = "" ]
	# each line is JSON that jq reads, chained by prev
	run -0 sh -c 'jq -r ".seq" run/audit.log | tr "\n" " "'
	[ "$output" = "1 2 3 4 5 " ]
	[ "$(sed -n 2p run/audit.log | jq -r .prev)" = "$(sed -n 1p run/audit.log | jq -r .hash)" ]
}

@test "show lists every record with its fields" {
	make_run
	run -0 --separate-stderr sw-audit show run
	[ "${#lines[@]}" -eq 5 ]
	[[ ${lines[0]} =~ ^\ +1\ \ 20[0-9-]+T[0-9:.]+Z\ \ run_start\ +argv=\[\"sw-run\",\"--iters\",\"3\"\]\ seed=7$ ]]
	[[ ${lines[2]} == *" checkpoint "*"iter=2 version=2 path=ckpt/iter-2 digest="* ]]
	[[ ${lines[3]} == *'name="train step"' ]]
	run -0 sw-audit -v show run
	[[ ${lines[4]} =~ run_end\ +[0-9a-f]{64}\ \ status=ok$ ]]
}

@test "digest prints BLAKE2b-256 of files and directories" {
	printf abc >f
	run -0 sw-audit digest f
	[ "$output" = "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319  f" ]
	if command -v b2sum >/dev/null; then
		[ "$output" = "$(b2sum -l 256 f)" ]
	fi
	mkdir d
	printf abc >d/x
	run -0 sw-audit digest d
	a=$output
	printf abd >d/x
	run -0 sw-audit digest d
	[ "$output" != "$a" ]
	run -1 --separate-stderr sw-audit digest nope
	[ "$stderr" = "sw-audit: nope: cannot stat: No such file or directory" ]
}

@test "an edited byte names its record" {
	make_run
	sed -i '2s/"iter":1/"iter":7/' run/audit.log
	off=$(head -1 run/audit.log | wc -c)
	run -1 --separate-stderr sw-audit verify run
	[ "$output" = "" ]
	[ "$stderr" = "sw-audit: run/audit.log: record 2 (byte $off): its contents do not match its hash: the record was edited" ]
}

@test "an edited hash names its record" {
	make_run
	# the last hex digit of record 4's hash, changed to another
	last=$(sed -n 4p run/audit.log | tail -c 4 | head -c 1)
	if [ "$last" = 0 ]; then new=1; else new=0; fi
	sed -i "4s/${last}\"}\$/${new}\"}/" run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 4 (byte "*"): its contents do not match its hash: the record was edited" ]]
}

@test "a deleted line names the record that is gone" {
	make_run
	sed -i 3d run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 3 (byte "*"): seq is 4 where 3 was expected: record 3 was deleted, or records were moved" ]]
}

@test "two swapped lines are named" {
	make_run
	sed -i -n '1p;2{h;d};3{p;x;p};4,$p' run/audit.log
	[ "$(jq -r .seq run/audit.log | tr '\n' ' ')" = "1 3 2 4 5 " ]
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 2 (byte "*"): seq is 3 where 2 was expected"* ]]
}

@test "a log cut inside a line is named; one cut at a line end is caught by the head" {
	make_run
	head=$(sw-audit verify run | sed 's/.*head //')
	cp run/audit.log full.log
	truncate -s -20 run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 5 (byte "*"): the line has no end: the log was cut" ]]
	head -n 4 full.log >run/audit.log
	run -0 sw-audit verify run
	run -1 --separate-stderr sw-audit verify -H "$head" run
	[ "$stderr" = "sw-audit: run/audit.log: no record has the head hash $head: the log was cut before it, or rewritten" ]
	cp full.log run/audit.log
	run -0 sw-audit verify -H "$head" run
	[ "${lines[1]}" = "run/audit.log: the head is record 5" ]
}

@test "a checkpoint file changed, added or removed, or the checkpoint gone, is named" {
	make_run
	printf 'weightz' >run/ckpt/iter-2/model.safetensors
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 3 (byte "*"): checkpoint 'ckpt/iter-2' does not match its digest: file 'model.safetensors' changed" ]]
	printf 'weights' >run/ckpt/iter-2/model.safetensors
	run -0 sw-audit verify run
	touch run/ckpt/iter-2/extra
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == *"file 'extra' was added" ]]
	rm run/ckpt/iter-2/extra run/ckpt/iter-2/config.json
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == *"file 'config.json' was removed" ]]
	rm -r run/ckpt/iter-2
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == *"record 3 (byte "*"): checkpoint 'ckpt/iter-2' is missing" ]]
	# a removal the log records is not tampering
	sw-audit log run checkpoint_removed path=ckpt/iter-2
	run -0 sw-audit verify run
}

@test "show stops at the first bad record with the same message" {
	make_run
	sed -i '4s/train/drain/' run/audit.log
	run -1 --separate-stderr sw-audit show run
	[ "${#lines[@]}" -eq 3 ]
	[[ $stderr == "sw-audit: run/audit.log: record 4 (byte "*"): its contents do not match its hash: the record was edited" ]]
}

@test "log refuses to extend a tampered log, and bad fields" {
	make_run
	sed -i 2d run/audit.log
	run -1 --separate-stderr sw-audit log run stage
	[[ $stderr == "sw-audit: run/audit.log: record 2 (byte "*"): seq is 3 where 2 was expected"* ]]
	run -2 --separate-stderr sw-audit log new Stage
	[[ ${stderr_lines[0]} == "sw-audit: 'Stage' is not an event name (1 to 64 of a-z, 0-9 and _)" ]]
	run -2 --separate-stderr sw-audit log new stage x:='{"a":'
	[[ ${stderr_lines[0]} == "sw-audit: field 'x': '{\"a\":' is not JSON" ]]
	run -2 --separate-stderr sw-audit log new stage hash=abc
	[[ ${stderr_lines[0]} == "sw-audit: field 'hash': a reserved or repeated key, or a value that is not UTF-8" ]]
	run -2 --separate-stderr sw-audit log new stage novalue
	[[ ${stderr_lines[0]} == "sw-audit: 'novalue' is not KEY=VALUE or KEY:=JSON" ]]
	run -1 --separate-stderr sw-audit log new stage
	[ "$stderr" = "sw-audit: cannot open 'new': No such file or directory" ]
	[ ! -e new ]
	mkdir new
	run -1 --separate-stderr sw-audit log -c ../x new checkpoint
	[ "$stderr" = "sw-audit: checkpoint '../x': not a path inside the run directory" ]
	[ ! -e new/audit.log ]
	run -0 sw-audit log other.log stage
	run -0 sw-audit verify other.log
}

@test "usage errors" {
	run -2 --separate-stderr sw-audit
	[ "${stderr_lines[0]}" = "sw-audit: no command (verify, show, digest or log)" ]
	run -2 --separate-stderr sw-audit frob x
	[ "${stderr_lines[0]}" = "sw-audit: unknown command 'frob' (verify, show, digest or log)" ]
	run -2 --separate-stderr sw-audit verify
	[ "${stderr_lines[0]}" = "sw-audit: verify takes one run directory or audit log" ]
	run -2 --separate-stderr sw-audit verify -H abc run
	[ "${stderr_lines[0]}" = "sw-audit: option '-H' wants 64 lowercase hex digits, not 'abc'" ]
	run -2 --separate-stderr sw-audit show -H "$(printf '%064d' 0)" run
	[ "${stderr_lines[0]}" = "sw-audit: option '-H' is for verify" ]
	run -1 --separate-stderr sw-audit verify nowhere
	[ "$stderr" = "sw-audit: nowhere: cannot open: No such file or directory" ]
	mkdir empty && : >empty/audit.log
	run -1 --separate-stderr sw-audit verify empty
	[ "$stderr" = "sw-audit: empty/audit.log: the log holds no records" ]
}
