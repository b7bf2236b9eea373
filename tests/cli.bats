#!/usr/bin/env bats
# The discipline every program shares (cmd/cli.c): help, version, usage
# errors, and one option table that --help, the man page SYNOPSIS and
# OPTIONS, and the completions all agree with.  Each test loops over every
# program, so programs added later are held to it too.
load helpers

@test "every program: --help to stdout, exit 0" {
	for p in $(programs); do
		run -0 --separate-stderr "$p" --help
		[[ ${lines[0]} == "usage: $p "* ]] || { echo "$p: ${lines[0]}"; false; }
		[ "$stderr" = "" ]
		run -0 "$p" -h
	done
}

@test "every program: --version" {
	for p in $(programs); do
		run -0 "$p" --version
		[[ $output =~ ^$p\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "$p: $output"; false; }
	done
}

@test "every program: a stack limit below 256 KiB (ulimit -s) is an error saying so, exit 1, not a crash" {
	[ -z "$SW_SAN" ] || skip "the sanitizers need stacks of their own size"
	for p in $(programs); do
		run -1 --separate-stderr bash -c "ulimit -s 128; exec $p --version"
		[ "$output" = "" ]
		[ "$stderr" = "$p: the stack limit (ulimit -s) is 128 KiB: the programs need 256 KiB at least" ]
		run -0 --separate-stderr bash -c "ulimit -s 256; exec $p --version"
		[[ $output =~ ^$p\ [0-9] ]]
	done
	# and at 256 KiB the work runs: a rollout, a step, a verification
	sw-model init --size tiny m >/dev/null
	run -0 --separate-stderr bash -c 'ulimit -s 256; printf "{\"id\":\"q\",\"prompt\":\"hello\"}\n" |
		sw-rollout -m m -n 2 --max-new-tokens 4 | sw-verify -r length,max=8,buffer=2 | sw-train -m m -o out >/dev/null'
	[ -e out/model.safetensors ]
}

@test "every program: an unknown option is a usage error, exit 2" {
	for p in $(programs); do
		run -2 --separate-stderr "$p" --no-such-option
		[ "$output" = "" ]
		[[ ${stderr_lines[0]} == "$p: unknown option '--no-such-option'" ]]
		[[ ${stderr_lines[1]} == "usage: $p "* ]]
		run -2 --separate-stderr "$p" -@
		[[ ${stderr_lines[0]} == "$p: unknown option '-@'" ]]
	done
}

@test "every program: an option missing its argument is a usage error" {
	for p in $(programs); do
		opt=$("$p" --completion-helper | awk -F'\t' '$1 == "option" && $4 != "-" { print "--" $3; exit }')
		[ -n "$opt" ] || continue
		run -2 --separate-stderr "$p" "$opt"
		[[ ${stderr_lines[0]} == "$p: option '$opt' needs an argument" ]] || { echo "${stderr_lines[0]}"; false; }
	done
}

# The man SYNOPSIS, read back as the usage line it renders to.
man_usage() {
	awk '
	/^\.Sh / { on = ($2 == "SYNOPSIS"); next }
	!on { next }
	/^\.Nm / { printf "usage: %s", $2; next }
	/^\.Op Ar$/ { printf " [file ...]"; next }
	/^\.Op Ar ./ { s = $0; sub(/^\.Op Ar /, "", s); printf " [%s]", s; next }
	/^\.Ar / { s = $0; sub(/^\.Ar /, "", s); printf " %s", s; next }
	/^\.Op Fl / {
		s = " [-" $3
		for (i = 4; i <= NF; i++) if ($i != "Ar") s = s " " $i
		gsub(/\\-/, "-", s)
		printf "%s]", s
	}
	END { print "" }' "$1"
}

@test "every program: the man SYNOPSIS is the usage line of --help" {
	for p in $(programs); do
		page=$TOP/man/$p.1
		[ -f "$page" ] || { echo "no man page for $p"; false; }
		want=$("$p" --help | head -1)
		got=$(man_usage "$page")
		[ "$got" = "$want" ] || { printf 'help: %s\nman:  %s\n' "$want" "$got"; false; }
	done
}

@test "every program: each option is in --help, the man OPTIONS and the completions" {
	for p in $(programs); do
		page=$TOP/man/$p.1
		help=$("$p" --help)
		while IFS=$(printf '\t') read -r kind short long arg complete text; do
			[ "$kind" = option ] || continue
			[[ $help == *"--$long"* ]] || { echo "$p --help lacks --$long"; false; }
			if [ "$short" != - ]; then
				item=".It Fl $short , Fl \\-$long"
				[[ $help == *"-$short, --$long"* ]] || { echo "$p --help lacks -$short"; false; }
			else
				item=".It Fl \\-$long"
			fi
			[ "$arg" = - ] || item="$item Ar $arg"
			grep -qxF -- "$item" "$page" || { echo "$page lacks: $item"; false; }
			grep -qF -- "--$long" "$TOP/completions/sw.bash" || { echo "bash completion lacks --$long"; false; }
			grep -qF -- "--$long" "$TOP/completions/_sw" || { echo "zsh completion lacks --$long"; false; }
		done < <("$p" --completion-helper)
		# and the man page names no option the program lacks
		for it in $(grep -o '^\.It Fl \\-[a-z-]*' "$page" | sed 's/.*\\-//'); do
			"$p" --completion-helper | cut -f3 | grep -qx -- "$it" || { echo "$page has --$it, $p has not"; false; }
		done
	done
}

@test "the committed completions are what completions/gen writes from the tables" {
	mkdir out
	SW_COMPLETIONS_OUT=$PWD/out "$TOP/completions/gen" $(for p in $(programs); do echo "$SW_BIN/$p"; done)
	diff -u "$TOP/completions/sw.bash" out/sw.bash
	diff -u "$TOP/completions/_sw" out/_sw
	bash -n "$TOP/completions/sw.bash"
}

# What bash completion offers for each command line given, one line each:
# the completions are sourced into a bash with bash-completion loaded, and the
# line is handed over as bash does (_init_completion reads COMP_LINE too).
bash_complete() {
	[ -f /usr/share/bash-completion/bash_completion ] || skip "bash-completion is not installed"
	run -0 bash -c '
		source /usr/share/bash-completion/bash_completion
		source "$1"
		shift
		for l; do
			COMP_LINE=$l; COMP_POINT=${#l}; read -ra COMP_WORDS <<<"$l"
			[[ $l == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
			COMPREPLY=(); _sw; echo "${COMPREPLY[*]}"
		done
	' _ "$TOP/completions/sw.bash" "$@"
}

@test "bash completion completes options and their arguments" {
	bash_complete "sw-cat --for" "sw-cat -f "
	[ "${lines[0]}" = "--format --force" ]
	[ "${lines[1]}" = "msgpack json" ]
}

@test "bash completion completes subcommands, verifier names after -r, monitor names after --monitor" {
	bash_complete "sw-model " "sw-model i" "sw-audit " "sw-pool t" "sw-verify -r m" "sw-verify --verifier " \
		"sw-run --monitor reward_h" "sw-model --seed 3 "
	[ "${lines[0]}" = "init info convert" ]
	[ "${lines[1]}" = "init info" ]
	[ "${lines[2]}" = "verify show log digest keygen" ]
	[ "${lines[3]}" = "take" ]
	[ "${lines[4]}" = "math" ]
	[ "${lines[5]}" = "exact math regex blocklist length json countdown exec code plugin" ]
	[ "${lines[6]}" = "reward_hacking=" ]
	[ "${lines[7]}" = "init info convert" ]
	# the zsh completion names the same subcommands
	grep -qF "'1:command:(init info convert)'" "$TOP/completions/_sw"
}

@test "the man pages are mandoc -T lint clean" {
	for m in "$TOP"/man/*.[157]; do
		run -0 mandoc -T lint -W warning "$m"
		[ "$output" = "" ] || { echo "$output"; false; }
	done
	[ -f "$TOP/man/sw-stream.5" ]
	[ -f "$TOP/man/sw.7" ]
}

@test "the shared output options (cli.h's CLI_OPT_*): the same words in every program that has them" {
	want_f=$'f\tformat\tformat\tmsgpack|json\twrite msgpack or json (JSON Lines); default msgpack, json on a terminal'
	want_z=$'z\tzstd\t-\t-\tcompress the output with zstd'
	want_force=$'-\tforce\t-\t-\twrite msgpack even to a terminal'
	for p in sw-cat sw-sort sw-balance sw-verify; do
		t=$("$p" --completion-helper | awk -F'\t' '$1 == "option"' | cut -f2-)
		f=$(grep -P '^f\tformat\t' <<<"$t" || true)
		z=$(grep -P '^z\tzstd\t' <<<"$t" || true)
		force=$(grep -P '^-\tforce\t' <<<"$t" || true)
		[ "$f" = "$want_f" ] || { echo "$p: $f"; false; }
		[ "$z" = "$want_z" ] || { echo "$p: $z"; false; }
		[ "$force" = "$want_force" ] || { echo "$p: $force"; false; }
		grep -qP '^o\toutput\tfile\tfile\t' <<<"$t" || { echo "$p: no -o FILE"; false; }
	done
}

@test "the shared output options: binary refused on a terminal, JSON Lines there by default" {
	command -v script >/dev/null || skip "script(1) is not installed"
	sw-datagen -n 2 >d.msgpack
	for p in sw-cat sw-sort sw-balance; do
		run -0 script -qec "$p d.msgpack" /dev/null
		[[ ${lines[0]} == '{"id":"p0/'* ]] || { echo "$p: ${lines[0]}"; false; }
		run -2 script -qec "$p -z d.msgpack" /dev/null
		[[ $output == "$p: refusing to write binary to a terminal"* ]] || { echo "$p: $output"; false; }
		run -0 script -qec "$p -z --force d.msgpack" /dev/null
	done
}

@test "the programs stay thin: none over 600 lines, cmd/ at most 20% of the C" {
	for f in "$TOP"/cmd/*.c; do
		n=$(wc -l <"$f")
		[ "$n" -le 600 ] || { echo "$f: $n lines"; false; }
	done
	cmd=$(cat "$TOP"/cmd/*.[ch] | wc -l)
	all=$(find "$TOP/libsw" "$TOP/cmd" -name '*.[ch]' -exec cat {} + | wc -l)
	[ $((cmd * 100)) -le $((all * 20)) ] || { echo "cmd/ is $cmd of $all lines"; false; }
}

@test "a file size limit (ulimit -f) is a write error a program reports, exit 1, not a signal that kills it" {
	cd "$BATS_TEST_TMPDIR"
	for i in $(seq 1 2000); do printf '{"id":"p%d","prompt":"%0100d"}\n' "$i" 0; done >big.jsonl
	run -1 --separate-stderr bash -c 'ulimit -f 64; exec sw-cat -f msgpack big.jsonl >out.msgpack'
	[ "$output" = "" ]
	[ "$stderr" = "sw-cat: stdout: write error: File too large" ]
	# sw-run's stages too: the train stage's optimiser store (the model's twice) is the first file past the limit
	sw-model init --size tiny m >/dev/null
	printf '{"id":"q1","prompt":"1+1=","label":"2"}\n' >p.jsonl
	run -1 --separate-stderr bash -c 'ulimit -f 5000; exec sw-run -q -m m -p p.jsonl -o run --iters 1 -b 1 -n 2'
	[ "$output" = "" ]
	[[ ${stderr_lines[0]} =~ ^"sw-train: cannot create the optimiser store: store 'shm:sw-run-"[0-9a-f]+".opt': cannot size: File too large"$ ]]
	[[ ${stderr_lines[1]} == "sw-run: iteration 1: stage 'train' exited with status 1 ("*"); the samples so far are in run/samples, the weights are those of the last checkpoint; continue with sw-run --resume run" ]]
	run -0 sw-run -q --resume run
	run -0 sw-audit verify run
	# sw-run's own failures say how to go on: after its first checkpoint, with --resume (its second
	# checkpoint's optimiser state is past a soft limit the train stage lifts for itself) ...
	run -1 --separate-stderr bash -c 'ulimit -S -f 5000; exec sw-run -q -m m -p p.jsonl -o run2 --iters 2 -b 1 -n 2 --train "ulimit -S -f unlimited; exec sw-train --algo grpo --metrics \"\$SW_TRAIN_METRICS\""'
	[ "$stderr" = "sw-run: checkpoint 'run2/ckpt/iter-0001': run2/ckpt/.iter-0001.tmp/optimizer.bin: write error: File too large; continue with sw-run --resume run2" ]
	run -0 sw-run -q --resume run2
	run -0 sw-audit verify run2
	# ... and before it, with the same command (the weight store is past the limit)
	run -1 --separate-stderr bash -c 'ulimit -S -f 1000; exec sw-run -q -m m -p p.jsonl -o run3 --iters 1 -b 1 -n 2'
	[[ $stderr =~ ^"sw-run: cannot load 'm' into a weight store: store 'shm:sw-run-"[0-9a-f]+"': cannot size: File too large; the run has not started: the same command starts it again"$ ]]
	run -0 sw-run -q -m m -p p.jsonl -o run3 --iters 1 -b 1 -n 2
	run -0 sw-audit verify run3
}

@test "an address-space limit (ulimit -v) is an out-of-memory error a program reports, exit 1, at every size: never a crash" {
	[ -z "$SW_SAN" ] || skip "the sanitizers' allocator does not run under an address-space limit"
	cd "$BATS_TEST_TMPDIR"
	sw-model init --size tiny m >/dev/null
	printf '{"id":"q","prompt":"hello"}\n' | sw-rollout -m m -n 2 --max-new-tokens 4 | sw-verify -r length,max=8,buffer=2 >s.msgpack
	# from where the loader itself fails up to where the step runs: under oneDNN 2.6 limits of 75-90 MB
	# crashed sw-train (oneDNN could not map a kernel's code), and its sgemm left products unwritten
	ok=0 product=0
	for kb in $(seq 40000 4000 140000); do
		rm -rf o
		# 127 (the loader's own failure) as 100: bats reads 127 as a command not found
		run --separate-stderr bash -c "ulimit -v $kb; sw-train -q -m m -o o --algo grpo s.msgpack; s=\$?; exit \$((s == 127 ? 100 : s))"
		case $status in
		0) ok=$((ok + 1)) ;;
		1) [[ $stderr =~ ^("sw-train: "|"libgomp: Thread creation failed: ").*("out of memory"|"Cannot allocate memory"|"Resource temporarily unavailable") ]] ||
			{ echo "$kb kB: $stderr"; false; }
			[ ! -e o ]
			[[ $stderr =~ "matrix product: out of memory: "[0-9]+" MiB of the address space's limit of "[0-9]+" MiB (ulimit -v) in use, and oneDNN needs 32 MiB more for its code and buffers" ]] &&
				product=$((product + 1)) ;;
		100) [[ $stderr == *"error while loading shared libraries"* ]] || { echo "$kb kB: $stderr"; false; } ;;
		*) echo "$kb kB: status $status: $stderr"; false ;;
		esac
	done
	[ "$ok" -gt 0 ]
	[ "$product" -gt 0 ]
}

@test "-o FILE is written whole: the file changes only when the output is complete (so it may be an input too); an error or a signal leaves it as it was" {
	mkdir "$BATS_TEST_TMPDIR/d"
	cd "$BATS_TEST_TMPDIR/d"
	for i in $(seq 1 400); do
		printf '{"id":"q%d/0","group":"q%d","prompt":"%d+1=","response":"%0200d","prompt_tokens":[1,2],"response_tokens":[3,4,5],"logprobs":[-1.0,-1.0,-1.0]}\n' "$i" "$i" "$i" 7
	done | sw-cat -f msgpack -o orig.msgpack
	for p in "sw-cat" "sw-sort" "sw-balance -n 1" "sw-verify -r json"; do
		# the output is one of the inputs: every record read before the file is replaced
		cp orig.msgpack s.msgpack
		chmod 640 s.msgpack
		run -0 --separate-stderr $p -o s.msgpack s.msgpack
		[ "$stderr" = "" ]
		run -0 sw-cat -c s.msgpack
		[ "$output" = 400 ] || { echo "$p: $output records"; false; }
		[ "$(stat -c %a s.msgpack)" = 640 ]
		# a write that cannot finish: the error, exit 1, the file as it was, no temporary left
		cp orig.msgpack s.msgpack
		run -1 --separate-stderr bash -c "ulimit -f 20; exec $p -o s.msgpack orig.msgpack"
		[ "$output" = "" ]
		[ "$stderr" = "${p%% *}: s.msgpack: write error: File too large" ]
		cmp s.msgpack orig.msgpack
		run -0 ls
		[ "$output" = "$(printf 'orig.msgpack\ns.msgpack')" ] || { echo "$output"; false; }
	done
	# a file one may write in a directory where one may make no file (a non-root user's case; root may
	# make the temporary anyway): written either way, nothing left beside it
	mkdir ro
	cp orig.msgpack ro/s.msgpack
	chmod 555 ro
	run -0 --separate-stderr sw-cat -f json -o ro/s.msgpack orig.msgpack
	chmod 755 ro
	[ "$stderr" = "" ]
	run -0 ls ro
	[ "$output" = s.msgpack ]
	[ "$(head -c 1 ro/s.msgpack)" = "{" ]
	run -0 sw-cat -c ro/s.msgpack
	[ "$output" = 400 ]
	# SIGTERM while it writes: the temporary goes, the file stays as it was
	echo old >kept
	mkfifo in
	sw-cat -f msgpack -o kept <in 3>&- &
	pid=$!
	exec 5>in
	head -c 20000 orig.msgpack >&5
	for i in $(seq 1 100); do [ -n "$(ls kept.tmp.* 2>/dev/null)" ] && break; sleep 0.1; done
	[ -n "$(ls kept.tmp.* 2>/dev/null)" ]
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	exec 5>&-
	[ "$st" = 143 ]
	[ "$(cat kept)" = old ]
	[ -z "$(ls kept.tmp.* 2>/dev/null)" ]
}
