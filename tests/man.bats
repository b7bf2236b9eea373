#!/usr/bin/env bats
# The manual pages: mandoc -T lint clean, and rendered without the runs a
# misplaced macro leaves (a .Fl inside a line takes every word after it as a
# flag: "--accuracy -verifier -scores -in"; a macro name not at the start of
# a line is printed as a word: "the samples' Sy rewards"); every option in
# each SYNOPSIS; every file of the repository they name there; the
# experiment file of sw-run(1) runs as written.
load helpers

# The rendered text of a page (or of mdoc on stdin) with the suspicious runs in it, one a line.
garbled() {
	mandoc -T utf8 "$@" | col -b | tr -s ' \n\t' '   ' |
		grep -oE '.{0,20}( -[a-z0-9]+[,.;:)]?)( -[a-z]{2,}[,.;:)]?)+.{0,10}|.{0,20}[ (](Sy|Fl|Ar|Pa|Ev|Xr|Li|Ql|Dq|Pq|Cm|Nm|Dv|Em|Vt|Ic|Ns|Op|Sq|Qq|Po|Pc) [^ ]+.{0,10}' || :
}

@test "the check finds the runs a misplaced macro leaves" {
	page='.Dd December 3, 2026
.Dt X 1
.Os
.Sh NAME
.Nm x
.Nd y
.Sh DESCRIPTION
.Pq the share of samples the Fl \-accuracy verifier scores in full, 1 ;
by default the first verifier of the samples'"'"' Sy rewards ,'
	run -0 garbled <<<"$page"
	[[ ${lines[0]} == *"--accuracy -verifier -scores -in -full"* ]]
	[[ ${lines[1]} == *"samples' Sy rewards"* ]]
	[ "${#lines[@]}" = 2 ]
}

@test "every page is mandoc -T lint clean and renders without garbled runs" {
	n=0
	for m in "$TOP"/man/*.[157]; do
		run -0 --separate-stderr mandoc -T lint -W warning "$m"
		[ "$output$stderr" = "" ] || { echo "$m: $output$stderr"; false; }
		run -0 garbled "$m"
		[ "$output" = "" ] || { echo "$m: $output"; false; }
		n=$((n + 1))
	done
	[ "$n" -ge 13 ]
}

@test "every SYNOPSIS names every option of its program" {
	for p in $(programs); do
		syn=$(mandoc -T utf8 "$TOP/man/$p.1" | col -b | awk '/^SYNOPSIS/ { on = 1; next } /^[A-Z]/ { on = 0 } on' | tr -s ' \n\t' '   ')
		while IFS=$'\t' read -r kind short long _; do
			[ "$kind" = option ] || continue
			case $long in help | version | quiet | verbose) continue ;; esac
			if [ "$short" != - ]; then
				[[ $syn =~ -[a-zA-Z]*$short ]] || { echo "$p: -$short is not in its SYNOPSIS"; false; }
			else
				[[ $syn == *"--$long"* ]] || { echo "$p: --$long is not in its SYNOPSIS"; false; }
			fi
		done < <("$p" --completion-helper)
	done
}

@test "the files of the repository the pages and README name are there" {
	n=0
	while read -r path; do
		path=${path%[.,]}
		[ -e "$TOP/$path" ] || { echo "$path is named but not there"; false; }
		n=$((n + 1))
	done < <(grep -ohE '(examples|tests|tools|bench|man|completions)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]' \
		"$TOP"/man/*.[157] "$TOP"/README.md | sort -u)
	[ "$n" -ge 3 ]
}

@test "sw-run(1): the experiment file runs as written" {
	# the literal block of the page, from its first line to .Ed
	awk '/^# exp: / { on = 1 } on && /^\.Ed/ { exit } on' "$TOP/man/sw-run.1" >exp
	[ "$(head -1 exp)" = "# exp: the demo's data, a new model" ]
	grep -q '^verify sw-verify -r math -r blocklist:data/blocklist,hard$' exp
	# with what the page says comes before it, and shorter (the command line overrides the file)
	run -0 "$TOP/examples/arith/make-data.sh" data
	run -0 sw-model init m
	run -0 --separate-stderr sw-run -c exp -o runs/arith --iters 1 --batch 2 --group 2 --eval-every 5 \
		--rollout 'sw-rollout -n "$SW_GROUP" --max-new-tokens 8' --eval-rollout 'sw-rollout --temperature 0 --max-new-tokens 8'
	run -0 sw-audit verify runs/arith
	[ "$(jq -r 'select(.eval | not) | .iter' runs/arith/metrics.jsonl)" = 1 ]
}
