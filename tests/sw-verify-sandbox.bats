#!/usr/bin/env bats
# sw-verify's sandbox, probed from inside by tests/verifiers/escape.py: a
# verifier in a private directory starts; the environment is cleared; the
# box holds nothing of the caller's files, stores or sockets; system calls
# outside the allow-list fail; the box's limits; its stderr; sandbox=strict
# refuses what it cannot isolate.  Run as root and as a user (see README's
# "The verifier sandbox"); what the machine cannot do is skipped, saying why.
load helpers

V=$TOP/tests/verifiers

# The facts escape.py answers for the samples in.jsonl: facts [SPEC-KEYS] [OPTIONS]
facts() {
	local keys=$1
	shift
	set -o pipefail
	sw-verify -f json -r "exec:python3 $V/escape.py${keys:+,$keys}" "$@" in.jsonl | jq -r '.violations[]'
}

# Make namespaces fail for what runs under it: no_ns KINDS COMMAND...  (a
# user namespace whose limits allow none of KINDS, e.g. "user net")
no_ns() {
	local kinds=$1
	shift
	unshare -U -r true 2>/dev/null || skip "cannot make a user namespace to test in"
	unshare -U -r sh -c 'for k in $1; do echo 0 >/proc/sys/user/max_${k}_namespaces || exit 9; done; shift; exec "$@"' \
		_ "$kinds" "$@"
}

@test "a verifier in a private (0700) directory, its file 0600, starts" {
	mkdir -m 700 private
	cat >private/v.py <<-'EOF'
	import json, sys
	for line in sys.stdin:
	    print(json.dumps({"score": 0.5}), flush=True)
	EOF
	chmod 600 private/v.py
	echo '{"response":"x"}' >in.jsonl
	run -0 --separate-stderr sw-verify -f json -r "exec:python3 $PWD/private/v.py" in.jsonl
	[ "$(echo "$output" | jq -c .rewards)" = '{"exec":0.5}' ]
	[ "$stderr" = "" ]
	# named relative to where sw-verify runs, too
	cd private
	run -0 --separate-stderr sw-verify -f json -r "exec:python3 v.py" ../in.jsonl
	[ "$(echo "$output" | jq -c .rewards)" = '{"exec":0.5}' ]
}

@test "the environment is cleared: an allow-list, env=NAME passes one" {
	echo '{"response":"x","env":["API_KEY","OTHER","HOME","TMPDIR","PATH","LC_ALL","TZ"]}' >in.jsonl
	export API_KEY=s3cret OTHER=x TZ=UTC
	run -0 facts ""
	[ "${lines[0]}" = "env API_KEY=(unset)" ]
	[ "${lines[1]}" = "env OTHER=(unset)" ]
	[ "${lines[2]}" = "env HOME=/box" ]
	[ "${lines[3]}" = "env TMPDIR=/box" ]
	[ "${lines[4]}" = "env PATH=$PATH" ]
	[ "${lines[5]}" = "env LC_ALL=C" ]
	[ "${lines[6]}" = "env TZ=UTC" ]
	run -0 facts "env=API_KEY"
	[ "${lines[0]}" = "env API_KEY=s3cret" ]
	[ "${lines[1]}" = "env OTHER=(unset)" ]
	unset API_KEY
	run -2 --separate-stderr sw-verify -r "exec:python3 $V/escape.py,env=API_KEY" in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'exec:python3 $V/escape.py,env=API_KEY': env=API_KEY: the variable is not set" ]
	run -2 --separate-stderr sw-verify -r "exec:python3 $V/escape.py,env=A-B" in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'exec:python3 $V/escape.py,env=A-B': 'env' wants the name of a variable, not 'A-B'" ]
}

@test "the box holds nothing of the caller's: files, /home, /root, /tmp, /run, /dev/shm" {
	mkdir -m 700 private
	echo secret >private/key
	echo secret >"/dev/shm/sw-test-$$"
	jq -nc --arg k "$PWD/private/key" --arg s "/dev/shm/sw-test-$$" \
		'{response: "x", read: [$k, $s, "/etc/shadow", "/etc/hostname"], ls: ["/", "/dev"]}' >in.jsonl
	run -0 facts ""
	rm -f "/dev/shm/sw-test-$$"
	[ "${lines[0]}" = "read $PWD/private/key=ENOENT" ]
	[ "${lines[1]}" = "read /dev/shm/sw-test-$$=ENOENT" ]
	[ "${lines[2]}" = "read /etc/shadow=ENOENT" ]
	[ "${lines[3]}" = "read /etc/hostname=ENOENT" ]
	# its root: the system directories there are, its own (box, tmp -> box), the directories
	# leading to its own file; no home, root, run, or the caller's tmp
	[[ ${lines[4]} == "ls /=ok:"*box*dev*etc*proc*tmp*usr* ]]
	[[ ${lines[4]} != *home* ]]
	[[ ${lines[4]} != *root* ]]
	[[ ${lines[4]} != *run* ]]
	[ "${lines[5]}" = "ls /dev=ok:fd,full,null,random,stderr,stdin,stdout,urandom,zero" ]
}

@test "the box cannot reach the caller's Unix sockets, in /tmp or abstract" {
	sock=$(mktemp -u /tmp/sw-test-sock.XXXXXX)
	python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()
a = socket.socket(socket.AF_UNIX); a.bind("\0" + sys.argv[2]); a.listen()
time.sleep(30)' "$sock" "sw-test-$$" &
	pid=$!
	for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
	jq -nc --arg p "$sock" --arg a "sw-test-$$" '{response: "x", connect: [$p], abstract: [$a]}' >in.jsonl
	# the test can tell: without the box, both connect
	run -0 --separate-stderr facts "sandbox=none" -q
	open=$output
	run -0 facts ""
	kill "$pid"
	rm -f "$sock"
	[ "$open" = "$(printf '%s\n' "connect $sock=ok" "abstract sw-test-$$=ok")" ]
	[ "${lines[0]}" = "connect $sock=ENOENT" ]
	[ "${lines[1]}" = "abstract sw-test-$$=ECONNREFUSED" ]
}

@test "the box's user: no groups, and not the caller's id where the system has another" {
	echo '{"response":"x","ids":true}' >in.jsonl
	run -0 facts ""
	[ "${lines[0]}" = "uid=1000" ]
	# uid_map: 1000 inside is this id outside
	outside=$(echo "${lines[2]#uid_map=ok:}" | awk '{ for (i = 1; i < NF; i += 3) if ($i == "1000") print $(i + 1) }')
	[ -n "$outside" ]
	if [ "$(id -u)" != 0 ] && ! { command -v newuidmap >/dev/null && grep -q "^$(id -un):" /etc/subuid &&
		grep -q "^$(id -un):" /etc/subgid; }; then
		[ "$outside" = "$(id -u)" ]
		# a user may not drop its groups itself: the kernel keeps them (its own as 1000, the
		# others unmapped, 65534) for what the box holds
		[[ ${lines[1]} =~ ^groups=((1000|65534)(,(1000|65534))*)?$ ]]
		skip "no subordinate ids for $(id -un) (newuidmap, /etc/subuid, /etc/subgid): the box is our id, and keeps our groups as 65534, in its namespaces"
	fi
	[ "$outside" != "$(id -u)" ]
	[ "${lines[1]}" = "groups=" ]
}

@test "the box's host name is its own, not the machine's" {
	echo '{"response":"x","host":true}' >in.jsonl
	run -0 facts ""
	[ "$output" = "host=sandbox" ]
	# without the box the verifier sees the machine's
	run -0 --separate-stderr facts "sandbox=none" -q
	[ "$output" = "host=$(uname -n)" ]
}

@test "seccomp is an allow-list: calls outside it fail with ENOSYS" {
	[ "$(uname -m)" = x86_64 ] || skip "system call numbers of x86_64 only"
	# pidfd_getfd 438, kcmp 312, process_madvise 440, listmount 458; getpid 39 is allowed
	echo '{"response":"x","syscalls":[438,312,440,458,39]}' >in.jsonl
	run -0 facts ""
	[ "$output" = "$(printf 'syscall %s\n' 438=ENOSYS 312=ENOSYS 440=ENOSYS 458=ENOSYS 39=ok)" ]
	# without the box they reach the kernel, which answers otherwise
	run -0 --separate-stderr facts "sandbox=none" -q
	[ "${lines[0]}" != "syscall 438=ENOSYS" ]
	[ "${lines[1]}" != "syscall 312=ENOSYS" ]
}

@test "disk: its directory is a tmpfs of disk= bytes" {
	echo '{"response":"x","write":20}' >in.jsonl
	run -0 facts "disk=8M"
	[ "$output" = "write=ENOSPC" ]
	run -0 facts "disk=32M"
	[ "$output" = "write=ok" ]
}

@test "memory and processes of the whole box: its cgroup where cgroup v2 is ours, else said with -v" {
	echo '{"response":"x","children":6,"child_mib":100}' >in.jsonl
	run -0 --separate-stderr facts "mem=256M,nproc=32,timeout=60" -v
	[[ ${stderr_lines[0]} == "sw-verify: note: exec verifier 'exec': "* ]]
	if [[ ${stderr_lines[0]} != *"held to mem and nproc by its cgroup"* ]]; then
		[[ ${stderr_lines[0]} == *": mem and nproc hold per process (RLIMIT_AS, RLIMIT_NPROC), not for the box as a whole" ]]
		skip "no cgroup v2 with memory and pids delegated here: ${stderr_lines[0]#*: note: }"
	fi
	# 6 x 100 MiB under 256M for the box: some children fail
	[ "$output" != "children=ok:6" ]
	[[ $output == children=ok:* ]]
}

@test "a verifier's stderr: its own pipe, each line prefixed with its name, cut and rate-limited" {
	echo '{"response":"x","stderr":5000,"long":5000}' >in.jsonl
	run -0 --separate-stderr facts "as=judge"
	[ "${stderr_lines[0]}" = "[judge] line 0" ]
	[ "${stderr_lines[99]}" = "[judge] line 99" ]
	# far fewer than 5000 lines came through, and a count of what did not
	[ "${#stderr_lines[@]}" -lt 400 ]
	[[ ${stderr_lines[-1]} =~ ^\[judge\]\ \([0-9]+\ more\ lines\ of\ its\ standard\ error\ dropped\)$ ]]
	# a long line is cut
	echo '{"response":"x","long":5000}' >in.jsonl
	run -0 --separate-stderr facts "as=judge"
	[ "${stderr_lines[0]}" = "[judge] $(printf 'L%.0s' $(seq 1000)) [...]" ]
	# -q: nothing
	run -0 --separate-stderr facts "as=judge" -q
	[ "$stderr" = "" ]
}

@test "a verifier's stderr reaches the terminal with its control characters escaped: it cannot drive it" {
	# a title (OSC 0), a clear screen (CSI 2J), C1's CSI in UTF-8, a byte of no character, a tab; café stays
	jq -nc '{response: "x", raw: "t \u001b]0;pwned\u0007 \u001b[2J \u00c2\u009b \u00ff\tcaf\u00c3\u00a9\r"}' >in.jsonl
	run -0 --separate-stderr facts "as=judge"
	[ "$stderr" = '[judge] t \x1b]0;pwned\x07 \x1b[2J \xc2\x9b \xff\x09café' ]
}

@test "sandbox=strict refuses to run without namespaces; basic and none must be named, and say so under -q" {
	# without namespaces nor an id of its own it may start no processes: python3 itself, not a shim
	[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
	echo '{"response":"x","env":["HOME"]}' >in.jsonl
	run -1 --separate-stderr no_ns "user net" sw-verify -f json -r "exec:python3 $V/escape.py" in.jsonl
	[ "$output" = "" ]
	[[ $stderr == "sw-verify: verifier 'exec:python3 $V/escape.py': sandbox=strict cannot be had here: no user namespace (No space left on device); no namespaces as root (No space left on device); ask for less by name: sandbox=basic (seccomp, rlimits, its own directory) or sandbox=none" ]]
	run -0 --separate-stderr no_ns "user net" sw-verify -q -f json -r "exec:/usr/bin/python3 $V/escape.py,sandbox=basic" in.jsonl
	# its own directory is on the host then
	[[ $(echo "$output" | jq -r '.violations[]') == "env HOME=/"*"/sw-verify."* ]]
	[[ $stderr == "sw-verify: warning: exec verifier 'exec': sandbox=basic: no user namespace ("*"): no network, mount or pid isolation; relying on seccomp (no sockets but AF_UNIX"*"), rlimits and "* ]]
	run -0 --separate-stderr no_ns "user net" sw-verify -q -f json -r "exec:python3 $V/escape.py,sandbox=none" in.jsonl
	[ "$stderr" = "sw-verify: warning: exec verifier 'exec': sandbox=none: it runs with no sandbox, as a plain child with our user, files and network" ]
	# a level by name only
	run -2 --separate-stderr sw-verify -r "exec:true,sandbox=no" in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'exec:true,sandbox=no': 'sandbox' is strict, basic or none, not 'no'" ]
}

@test "code: the same box (strict refused without namespaces, the program's files in /src)" {
	tests='[{"input":"2 3\n","output":"5\n"}]'
	py=$'```python\nimport os\na, b = map(int, input().split())\nprint(a + b if os.getcwd() == "/src" and not os.path.exists("/home") else 0)\n```'
	jq -nc --arg r "$py" --argjson t "$tests" '{response: $r, label: $t}' >in.jsonl
	run -0 --separate-stderr sw-verify -f json -r code in.jsonl
	[ "$(echo "$output" | jq -c .rewards.code)" = 1 ]
	[ "$stderr" = "" ]
	run -1 --separate-stderr no_ns "user net" sw-verify -f json -r code in.jsonl
	[[ $stderr == "sw-verify: verifier 'code': sandbox=strict cannot be had here: "* ]]
}

@test "no sandbox directory is left behind, whatever the verifier left in it" {
	[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
	export TMPDIR=$PWD/tmp
	mkdir tmp
	touch keep
	# without namespaces (sandbox=basic) its directory is on the host: a 000 directory, a
	# link to ours
	cat >mess.py <<-'EOF'
	import os, sys
	t = os.environ["TMPDIR"]
	os.makedirs(t + "/d/e")
	open(t + "/d/e/f", "w").close()
	os.chmod(t + "/d/e", 0)
	os.chmod(t + "/d", 0)
	os.symlink(sys.argv[1], t + "/ours")
	for line in sys.stdin:
	    print('{"score": 1}', flush=True)
	EOF
	echo '{"response":"x"}' >in.jsonl
	run -0 --separate-stderr no_ns "user net" sw-verify -f json -r "exec:/usr/bin/python3 $PWD/mess.py $PWD,sandbox=basic" in.jsonl
	[ "$(echo "$output" | jq -c .rewards)" = '{"exec":1}' ]
	run -0 ls -A tmp
	[ "$output" = "" ]
	[ -e keep ]
	# and in namespaces, whatever it does in its tmpfs
	run -0 sw-verify -f json -r "exec:python3 $PWD/mess.py $PWD" in.jsonl
	run -0 ls -A tmp
	[ "$output" = "" ]
	[ -e keep ]
}

@test "an open file limit: a lower one than the box's stays; too low for the workers, fewer run, said once; too low for one, an error saying so" {
	[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
	cat >judge.py <<-'EOF2'
	import sys
	for line in sys.stdin:
	    print('{"score": 1}', flush=True)
	EOF2
	for i in $(seq 1 18); do echo "{\"id\":\"s$i\",\"response\":\"x\"}"; done >in.jsonl
	# the box's own limit (256) cannot be had under a hard limit of 64: 64 stays (it was "cannot limit open files")
	run -0 --separate-stderr bash -c "ulimit -n 64; exec sw-verify -f json -r 'exec:/usr/bin/python3 $PWD/judge.py,workers=2' in.jsonl"
	[ "${#lines[@]}" = 18 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -c .rewards | sort -u)" = '{"exec":1}' ]
	# eight workers where the limit lets some start: every sample scored, by fewer workers, said once
	run -0 --separate-stderr bash -c "ulimit -n 20; exec sw-verify -f json -r 'exec:/usr/bin/python3 $PWD/judge.py,workers=8' in.jsonl"
	[ "$(printf '%s\n' "${lines[@]}" | jq -c .rewards | sort -u)" = '{"exec":1}' ]
	[ "${#lines[@]}" = 18 ]
	# (our lines alone: under the sanitizers a box that fails to start also has ASan's warning)
	ours=$(grep '^sw-verify: ' <<<"$stderr")
	[ "$(grep -c '^sw-verify: ' <<<"$stderr")" = 1 ]
	[[ $ours =~ ^"sw-verify: warning: exec: "[1-7]" of its 8 workers run: the next cannot start (".*"Too many open files (the open file limit, ulimit -n, is too low for the workers))"$ ]] ||
		{ echo "$stderr"; false; }
	# whichever of the box's steps runs out first (its pipes, the seccomp filter's memfd, the child's
	# standard streams), the warning names the limit: CI's runner met the filter's where this machine met the streams'
	for n in 20 21 22 23 24 25 26 27; do
		run -0 --separate-stderr bash -c "ulimit -n $n; exec sw-verify -f json -r 'exec:/usr/bin/python3 $PWD/judge.py,workers=8' in.jsonl"
		[ "${#lines[@]}" = 18 ]
		ours=$(grep '^sw-verify: ' <<<"$stderr" || true)
		[[ -z $ours || $ours =~ ^"sw-verify: warning: exec: "[1-7]" of its 8 workers run: the next cannot start (".*"Too many open files (the open file limit, ulimit -n, is too low for the workers))"$ ]] ||
			{ echo "$n: $stderr"; false; }
	done
	# a limit no worker can start under: the error says which limit, not that the sandbox cannot be had
	run -1 --separate-stderr bash -c "ulimit -n 10; exec sw-verify -f json -r 'exec:/usr/bin/python3 $PWD/judge.py' in.jsonl"
	ours=$(grep '^sw-verify: ' <<<"$stderr")
	[[ $ours == "sw-verify: verifier 'exec:/usr/bin/python3 $PWD/judge.py': "*"Too many open files"* ]] || { echo "$stderr"; false; }
	[[ $stderr != *"sandbox=strict cannot be had"* ]]
}
