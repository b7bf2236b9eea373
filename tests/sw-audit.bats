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

# A log of the given records (event, JSON fields) whose chain is whole:
# anyone can compute it (tests/fuzz/forge_audit_log.py's chain).
# forge RECORDS [TIME]
forge() {
	python3 -c 'import json, sys
sys.path.insert(0, sys.argv[1])
from forge_audit_log import chain
sys.stdout.write(chain([(e, list(f.items())) for e, f in json.loads(sys.argv[2])], *sys.argv[3:]))' \
		"$TOP/tests/fuzz" "$@"
}

@test "verify refuses records its writer never writes, whole chain or not; show escapes control bytes" {
	# a checkpoint outside the run directory, its digest right: never followed
	mkdir -p run outside/ck
	printf 'w' >outside/ck/weights
	d=$(sw-audit digest outside/ck | cut -d' ' -f1)
	forge '[["run_start", {}], ["checkpoint", {"path": "\"../outside/ck\"", "digest": "\"'"$d"'\""}]]' >run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[ "$output" = "" ]
	[ "$stderr" = "sw-audit: run/audit.log: record 2 (byte 212): checkpoint '../outside/ck': not a path inside the run directory, as a checkpoint record's must be: forged" ]
	forge '[["run_start", {}], ["checkpoint", {"path": "\"'"$PWD"'/outside/ck\"", "digest": "\"'"$d"'\""}]]' >run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 2 (byte 212): checkpoint '/"*"/outside/ck': not a path inside the run directory, as a checkpoint record's must be: forged" ]]
	# the same directory inside the run verifies
	mv outside/ck run/ck
	forge '[["run_start", {}], ["checkpoint", {"path": "\"ck\"", "digest": "\"'"$d"'\""}]]' >run/audit.log
	run -0 sw-audit verify run
	[[ $output == "run/audit.log: ok: 2 records, 1 checkpoint, head "* ]]
	# an event with ESC [2J in it; a time that is not the writer's
	forge '[["run_start", {}], ["stage\u001b[2J", {}]]' >run/audit.log
	run -1 --separate-stderr sw-audit show run
	[ "${#lines[@]}" -eq 1 ]
	[ "$stderr" = "sw-audit: run/audit.log: record 2 (byte 212): its event or time is not one the log's writer writes (an event of a-z, 0-9 and _; a time as 2026-01-31T23:59:59.999Z): forged" ]
	forge '[["run_start", {}]]' 'yesterday' >run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[[ $stderr == "sw-audit: run/audit.log: record 1 (byte 0): its event or time is not one the log's writer writes"* ]]
	forge '[["run_start", {}]]' '2026-12-06T03:10:49Z' >run/audit.log
	run -1 sw-audit verify run
	forge '[["run_start", {}]]' '2026-12-06T03:10:49.123Z' >run/audit.log
	run -0 sw-audit verify run
	# a name twice ("seq" 1, then 5): Python's json reads the last, a lookup here the first
	forge '[["run_start", {"seq": "5"}]]' >run/audit.log
	run -0 python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["seq"])' run/audit.log
	[ "$output" = 5 ]
	run -1 --separate-stderr sw-audit verify run
	[ "$stderr" = 'sw-audit: run/audit.log: record 1 (byte 0): the name "seq" appears twice in it, though its hash matches: forged' ]
	# a checkpoint's path quoted in a message: its control bytes escaped as the programs' messages show them
	forge '[["run_start", {}], ["checkpoint", {"path": "\"ck\\u001b[2J\"", "digest": "\"'"$d"'\""}]]' >run/audit.log
	run -1 --separate-stderr sw-audit verify run
	[ "$stderr" = "sw-audit: run/audit.log: record 2 (byte 212): checkpoint 'ck\x1b[2J' is missing" ]
	# control bytes in a key and a value (the writer takes any UTF-8): shown as JSON, escaped
	forge '[["run_start", {"k\u001b]0;x": "\"v\\u0007\"", "note": "\"\"", "ok": "\"plain\""}]]' >run/audit.log
	run -0 sw-audit show run
	[[ ${lines[0]} == *' run_start          "k\u001B]0;x"="v\u0007" note="" ok=plain' ]]
	[ "$(printf '%s' "$output" | tr -d '\n' | LC_ALL=C tr -d '[:print:]' | wc -c)" -eq 0 ]
}

@test "usage errors" {
	run -2 --separate-stderr sw-audit
	[ "${stderr_lines[0]}" = "sw-audit: no command (verify, show, digest, log or keygen)" ]
	run -2 --separate-stderr sw-audit frob x
	[ "${stderr_lines[0]}" = "sw-audit: unknown command 'frob' (verify, show, digest, log or keygen)" ]
	run -2 --separate-stderr sw-audit show --pubkey k.pub run
	[ "${stderr_lines[0]}" = "sw-audit: option '--pubkey' is for verify" ]
	run -2 --separate-stderr sw-audit keygen
	[ "${stderr_lines[0]}" = "sw-audit: keygen takes the path of the secret key to write (the public key goes to PATH.pub)" ]
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

# Rewrite audit.log's line N with jq filter F, then recompute every hash and prev from there on, as
# someone with write access but without the key would: rechain LOG N F.  Signatures are left as they were.
rechain() {
	/usr/bin/python3 - "$@" <<-'PYEOF'
	import hashlib, json, re, subprocess, sys
	log, n, f = sys.argv[1], int(sys.argv[2]), sys.argv[3]
	lines = open(log).read().splitlines()
	prev = "0" * 64
	out = []
	for i, line in enumerate(lines, 1):
	    m = re.fullmatch(r'(.*),"hash":"([0-9a-f]{64})"(,"sig":"[0-9a-f]{128}")?\}', line)
	    body, sig = m.group(1), m.group(3) or ""
	    if i == n:
	        rec = json.loads(body + "}")
	        rec = json.loads(subprocess.run(["jq", "-c", f], input=json.dumps(rec), capture_output=True,
	                                        text=True, check=True).stdout)
	        body = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)[:-1]
	    body = re.sub(r'"prev":"[0-9a-f]{64}"', '"prev":"%s"' % prev, body, count=1)
	    prev = hashlib.blake2b(body.encode(), digest_size=32).hexdigest()
	    out.append('%s,"hash":"%s"%s}' % (body, prev, sig))
	open(log, "w").write("\n".join(out) + "\n")
	PYEOF
}

@test "keygen: a secret key (0600) and KEY.pub, each one line of hex; never over an existing file" {
	run -0 --separate-stderr sw-audit keygen k
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	[ "$(stat -c %a k)" = 600 ]
	[[ $(cat k) =~ ^[0-9a-f]{128}$ ]]
	[[ $(cat k.pub) =~ ^[0-9a-f]{64}$ ]]
	run -1 --separate-stderr sw-audit keygen k
	[ "$stderr" = "sw-audit: k: cannot create: File exists" ]
	run -0 sw-audit keygen other
	[ "$(cat other.pub)" != "$(cat k.pub)" ]
}

@test "a signed log: every record signed; an unsigned, foreign or re-chained record fails verify --pubkey" {
	sw-audit keygen k
	sw-audit keygen other
	export SW_SIGN_KEY=$PWD/k
	make_run
	[ "$(stat -c %a run/audit.log)" = 600 ]
	[ "$(grep -c '"sig":"[0-9a-f]\{128\}"}$' run/audit.log)" = 5 ]
	run -0 --separate-stderr sw-audit verify --pubkey k.pub run
	[[ $output =~ ^run/audit.log:\ ok:\ 5\ records\ \(every\ one\ signed\ by\ k.pub\),\ 1\ checkpoint,\ head\ [0-9a-f]{64}$ ]]
	[ "$stderr" = "" ]
	run -0 sw-audit verify run
	[[ $output == "run/audit.log: ok: 5 records (5 signed, not checked: give --pubkey), 1 checkpoint, head "* ]]
	run -1 --separate-stderr sw-audit verify --pubkey other.pub run
	[[ $stderr == "sw-audit: run/audit.log: record 1 (byte 0): its signature does not verify with the public key: the record was written or re-chained without the signing key" ]]

	# edited and re-chained by hand: the chain holds, the signature does not
	cp -r run copy
	rechain copy/audit.log 4 '.name = "benign step"'
	[ "$(sed -n 4p copy/audit.log | jq -r .name)" = "benign step" ]
	run -0 sw-audit verify copy
	run -1 --separate-stderr sw-audit verify --pubkey k.pub copy
	[[ $stderr == "sw-audit: copy/audit.log: record 4 (byte "*"): its signature does not verify with the public key: the record was written or re-chained without the signing key" ]]
	# and re-signed with another key: still not ours
	rm -r copy && cp -r run copy
	sed -i '$d' copy/audit.log
	SW_SIGN_KEY=$PWD/other run -1 --separate-stderr sw-audit log copy run_end
	[[ $stderr == "sw-audit: copy/audit.log: record 1 (byte 0): its signature does not verify"* ]]

	# an unsigned record: sw-audit log refuses to write one without the key, so chain one by hand; named
	run -1 --separate-stderr env SW_SIGN_KEY= sw-audit log run stage x=1
	[ "$stderr" = "sw-audit: run/audit.log: its records are signed, and one appended without the key would break the log's signatures: give the signing key (\$SW_SIGN_KEY; sw-run --sign-key)" ]
	tail -1 run/audit.log | sed 's/,"sig":"[0-9a-f]*"}$/}/; s/"seq":5,/"seq":6,/' >>run/audit.log
	rechain run/audit.log 6 '.event = "stage" | .x = "1"'
	run -0 sw-audit verify run
	run -1 --separate-stderr sw-audit verify --pubkey k.pub run
	[[ $stderr == "sw-audit: run/audit.log: record 6 (byte "*"): it is not signed, and every record must be (a public key was given): written without the signing key" ]]
	# a secret key others can read is refused; a public key that is no key too
	chmod 644 k
	run -1 --separate-stderr sw-audit log other.log stage
	[[ $stderr == *"k: the secret key is readable by others (mode 0644): chmod 600 it" ]]
	run -1 --separate-stderr sw-audit verify --pubkey k run
	[ "$stderr" = "sw-audit: k: not an audit public key (one line of 64 hex digits, as sw-audit keygen writes)" ]
}

@test "sw-run --sign-key (or \$SW_SIGN_KEY): a signed log (0600); a finished run cut before its end record fails" {
	sw-model init --size tiny m >/dev/null
	for i in 1 2 3 4; do printf '{"id":"q%d","prompt":"%d+1=","label":"%d"}\n' "$i" "$i" $((i + 1)); done >p.jsonl
	sw-audit keygen k
	run -0 sw-run -q -m m -p p.jsonl -o r --iters 2 --batch 2 --group 2 --eval-every 5 --sign-key k \
		--rollout "$TOP/tests/run-stages/rollout.sh" --verify 'sw-verify -r math' --train sw-cat \
		--balance 'sh -c "sw-audit log \"\$SW_RUN\" stage note=from-a-stage; cat"'
	[ "$(stat -c %a r/audit.log)" = 600 ]
	[ "$(grep -c '"note":"from-a-stage"' r/audit.log)" = 2 ]
	run -0 sw-audit verify --pubkey k.pub r
	[[ $output == "r/audit.log: ok: "*" records (every one signed by k.pub), "* ]]
	[ "$(tail -1 r/audit.log | jq -r .event)" = run_end ]
	# cut at a line end: the chain is whole, but the run finished and its end is gone
	sed -i '$d' r/audit.log
	run -0 sw-audit verify r
	run -1 --separate-stderr sw-audit verify --pubkey k.pub r
	[[ $stderr == "sw-audit: r/audit.log: record "*": the run finished (a HALT file, or metrics.jsonl holds iteration 2 of 2) but its log lacks its signed end record (run_end or halt): the log was cut" ]]
	# the key from the environment; a key that is not there is an error before anything runs
	run -0 env SW_SIGN_KEY=k sw-run -q -m m -p p.jsonl -o r2 --iters 1 --batch 2 --group 2 --eval-every 5 \
		--rollout "$TOP/tests/run-stages/rollout.sh" --verify 'sw-verify -r math' --train sw-cat
	run -0 sw-audit verify --pubkey k.pub r2
	run -1 --separate-stderr sw-run -m m -p p.jsonl -o r3 --sign-key nokey
	[ "$stderr" = "sw-run: nokey: cannot open: No such file or directory" ]
	[ ! -e r3 ]
}

@test "a signed run's log is never extended unsigned: --resume and sw-audit log without the key are refused, with it they go on" {
	sw-model init --size tiny m >/dev/null
	for i in 1 2 3 4; do printf '{"id":"q%d","prompt":"%d+1=","label":"%d"}\n' "$i" "$i" $((i + 1)); done >p.jsonl
	sw-audit keygen k
	run -0 sw-run -q -m m -p p.jsonl -o r --iters 1 --batch 2 --group 2 --eval-every 5 --sign-key k \
		--rollout "$TOP/tests/run-stages/rollout.sh" --verify 'sw-verify -r math' --train sw-cat
	cp r/audit.log before.log
	run -1 --separate-stderr sw-run --resume r --iters 2
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: r/audit.log: its records are signed, and one appended without the key would break the log's signatures: give the signing key (\$SW_SIGN_KEY; sw-run --sign-key)" ]
	run -1 --separate-stderr sw-audit log r note by=hand
	[[ $stderr == "sw-audit: "*"its records are signed, and one appended without the key would break the log's signatures"* ]]
	cmp r/audit.log before.log
	# resumed for more iterations than its config says, its stages still append (sw-verify's record, a
	# stage's own sw-audit log): the finished-run check is verify's, not an appender's
	run -0 sw-run -q --resume r --iters 2 --sign-key k --train 'sw-audit log "$SW_RUN" note by=stage && sw-cat'
	run -0 jq -r 'select(.event == "note") | .by' r/audit.log
	[ "$output" = stage ]
	run -0 sw-audit verify --pubkey k.pub r
	[[ $output == "r/audit.log: ok: "*" records (every one signed by k.pub), "* ]]
}
