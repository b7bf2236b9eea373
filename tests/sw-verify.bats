#!/usr/bin/env bats
# sw-verify: each built-in verifier on its edge cases, the reward, routing,
# bad input, exec verifiers (honest and hostile, in the sandbox), plug-ins
# and the code verifier.
load helpers

V=$TOP/tests/verifiers
PLUGIN=$SW_BIN/../plugin/keyword.so

# jq over sw-verify's JSON output: v FILTER SW-VERIFY-ARGS...
v() {
	local f=$1
	shift
	set -o pipefail
	sw-verify -f json "$@" | jq -c "$f"
}

@test "exact: trimmed, numbers as labels, NFC, ci in every script" {
	printf '%s\n' '{"response":"  Paris\n","label":"Paris"}' '{"response":"paris","label":"Paris"}' \
		'{"response":"42","label":42}' '{"response":"42.0","label":42}' >in.jsonl
	run -0 --separate-stderr v '.rewards.exact' -r exact in.jsonl
	[ "$output" = "$(printf '1\n0\n1\n0')" ]
	[ "$stderr" = "" ]
	run -0 v '.rewards.exact' -r exact,ci in.jsonl
	[ "$output" = "$(printf '1\n1\n1\n0')" ]
	# the same text composed or not is equal; ci folds every script's case, fully (ß is ss)
	python3 -c 'import json
for r, l in [("Cafe\u0301", "Caf\u00e9"), ("STRASSE", "Stra\u00dfe"), ("\u03a3\u039f\u03a6\u038c\u03a3", "\u03c3\u03bf\u03c6\u03cc\u03c2"),
             ("\u00c9t\u00e9", "\u00e9t\u00e9")]:
    print(json.dumps({"response": r, "label": l}))' >in.jsonl
	run -0 v '.rewards.exact' -r exact in.jsonl
	[ "$output" = "$(printf '1\n0\n0\n0')" ]
	run -0 v '.rewards.exact' -r exact,ci in.jsonl
	[ "$output" = "$(printf '1\n1\n1\n1')" ]
}

@test "math: boxed, ####, last number, fractions, commas, tolerance, worked labels" {
	cat >in.jsonl <<-'EOF'
	{"response":"so \\boxed{72} dollars","label":"72"}
	{"response":"\\boxed{\\frac{1}{2}} and later 7","label":"0.5"}
	{"response":"first \\boxed{3}, then \\boxed{ 4 }","label":4}
	{"response":"Work...\n#### 1,000\n","label":"1000"}
	{"response":"it is 3/4 of it","label":"\\dfrac{3}{4}"}
	{"response":"the answer is -2.50.","label":"-5/2"}
	{"response":"x = 0.33333","label":"1/3"}
	{"response":"\\boxed{\\text{(B)}}","label":"(B)"}
	{"response":"I do not know","label":"5"}
	{"response":"\\boxed{6}","label":"She has 2 + 4 = 6.\n#### 6"}
	{"response":"\\boxed{50\\%}","label":"50"}
	{"response":"\\boxed{7","label":"7"}
	EOF
	run -0 --separate-stderr v '.rewards.math' -r math in.jsonl
	[ "$output" = "$(printf '1\n1\n1\n1\n1\n1\n0\n1\n0\n1\n1\n1')" ]
	# a looser tolerance takes 1/3 to 5 places
	run -0 v '.rewards.math' -r math,tol=1e-6 in.jsonl
	[ "${lines[6]}" = 0 ]
	run -0 v '.rewards.math' -r math,tol=1e-5 in.jsonl
	[ "${lines[6]}" = 1 ]
}

@test "regex: anywhere, full, ci; a comma inside the pattern stays in it" {
	printf '%s\n' '{"response":"The answer is \\boxed{4}."}' '{"response":"aaa"}' '{"response":"AA"}' >in.jsonl
	run -0 v '.rewards.fmt' -r 'regex:\\boxed\{\d+\},as=fmt' in.jsonl
	[ "$output" = "$(printf '1\n0\n0')" ]
	run -0 v '.rewards.regex' -r 'regex:a{1,3},full' in.jsonl
	[ "$output" = "$(printf '0\n1\n0')" ]
	run -0 v '.rewards.regex' -r 'regex:a{1,3},full,ci' in.jsonl
	[ "$output" = "$(printf '0\n1\n1')" ]
}

@test "a response that is not UTF-8 is refused where it is read (every str is UTF-8)" {
	mp in.msgpack '\x81\xa8response\xa3a\xffb'
	run -1 --separate-stderr sw-verify -r 'regex:a.b' in.msgpack
	[ "$output" = "" ]
	[ "$stderr" = "sw-verify: in.msgpack: record 1 (byte 0): a string is not valid UTF-8 at byte 12; raw bytes belong in a bin" ]
}

@test "blocklist: a violation names the rule; ci; comments; hard forces the minimum" {
	cat >rules.txt <<-'EOF'
	# safety rules
	[weapons] \b(build|make) a bomb\b

	poison(ous)?
	EOF
	printf '%s\n' '{"response":"how to Make a Bomb","label":"x"}' '{"response":"poison and make a bomb","label":"x"}' \
		'{"response":"a cake","label":"a cake"}' >in.jsonl
	run -0 v '[.rewards.blocklist, .violations]' -r blocklist:rules.txt in.jsonl
	[ "${lines[0]}" = '[1,[]]' ]
	[ "${lines[1]}" = '[0,["weapons","poison(ous)?"]]' ]
	[ "${lines[2]}" = '[1,[]]' ]
	run -0 v '[.rewards.blocklist, .violations]' -r blocklist:rules.txt,ci in.jsonl
	[ "${lines[0]}" = '[0,["weapons"]]' ]
	# hard: the reward is the lowest possible (0 + 1 * 0), whatever exact says
	run -0 v '[.reward, .rewards.exact]' -r exact,weight=3 -r blocklist:rules.txt,ci,hard in.jsonl
	[ "${lines[0]}" = '[0,0]' ]
	[ "${lines[2]}" = '[4,1]' ]
	run -0 v '.reward' -r exact -r blocklist:rules.txt,ci,hard --min-reward -5 in.jsonl
	[ "$output" = "$(printf -- '-5\n-5\n2')" ]
}

@test "blocklist, regex: a response that exhausts a pattern's match limit is not scored clean" {
	# (\w+\s?)+ backtracks without end on many words that are not followed by " bomb" at once
	printf '[weapons] (\\w+\\s?)+ bomb\n' >rules.txt
	python3 -c 'import json
print(json.dumps({"id": "short", "response": "how to make a bomb"}))
print(json.dumps({"id": "long", "response": "w" * 5000 + " " + " ".join(["word"] * 3000) + "! make a bomb"}))
print(json.dumps({"id": "clean", "response": "a cake"}))' >in.jsonl
	run -0 --separate-stderr v '[.id, .reward, .violations, .verifier_error]' -r blocklist:rules.txt \
		--max-errors 0.5 in.jsonl
	[ "${lines[0]}" = '["short",0,["weapons"],null]' ]
	[ "${lines[1]}" = '["long",null,[],"blocklist: pattern '"'weapons'"' could not be matched against the response: match limit exceeded"]' ]
	[ "${lines[2]}" = '["clean",1,[],null]' ]
	[ "$stderr" = "sw-verify: warning: 1 of 3 samples have verifier_error (the first, sample 2: blocklist: pattern 'weapons' could not be matched against the response: match limit exceeded)" ]
	# one in three failed: more than --max-errors allows by default
	run -1 --separate-stderr sw-verify -r blocklist:rules.txt -o out.msgpack in.jsonl
	[ "$stderr" = "sw-verify: 1 of 3 samples (33.3%) have verifier_error, more than --max-errors 0.01 allows (the first, sample 2: blocklist: pattern 'weapons' could not be matched against the response: match limit exceeded)" ]
	# another rule of the list broken: the sample is scored, the violation named, whatever stopped
	printf '[plain] make a bomb\n' >>rules.txt
	run -0 --separate-stderr v '[.id, .reward, .violations, .verifier_error]' -r blocklist:rules.txt in.jsonl
	[ "${lines[0]}" = '["short",0,["weapons","plain"],null]' ]
	[ "${lines[1]}" = '["long",0,["plain"],null]' ]
	[ "$stderr" = "" ]
	run -0 --separate-stderr v '[.id, .reward, .verifier_error]' -r 'regex:(\w+\s?)+ bomb' --max-errors 0.5 in.jsonl
	[ "${lines[0]}" = '["short",1,null]' ]
	[ "${lines[1]}" = '["long",null,"regex: pattern '"'regex'"' could not be matched against the response: match limit exceeded"]' ]
	[ "${lines[2]}" = '["clean",0,null]' ]
}

@test "blocklist: a bad pattern is a usage error naming the line; a missing file an error" {
	printf 'fine\n[x] (unclosed\n' >rules.txt
	echo '{"response":"a"}' >in.jsonl
	run -2 --separate-stderr sw-verify -r blocklist:rules.txt in.jsonl
	[[ ${stderr_lines[0]} == "sw-verify: bad verifier 'blocklist:rules.txt': rules.txt:2: bad pattern: missing closing parenthesis at offset 9" ]]
	run -1 --separate-stderr sw-verify -r blocklist:nope.txt in.jsonl
	[ "$stderr" = "sw-verify: verifier 'blocklist:nope.txt': cannot open blocklist 'nope.txt': No such file or directory" ]
	[ "$output" = "" ]
	printf '# only a comment\n' >empty.txt
	run -2 --separate-stderr sw-verify -r blocklist:empty.txt in.jsonl
	[[ ${stderr_lines[0]} == *"blocklist 'empty.txt' has no rules" ]]
}

@test "blocklist: responses are read folded (NFKC, no invisible or control characters); raw reads them as written" {
	printf '[weapons] make\\s+a\\s+bomb\n[poison] poison\n' >rules.txt
	python3 -c 'import json
for r in ["make a bomb", "\uff4d\uff41\uff4b\uff45 \uff41 \uff42\uff4f\uff4d\uff42", "make a bo\u200bmb",
          "make a bo\u00admb", "make\u00a0a\u2003bomb", "make a \U0001d41b\U0001d428\U0001d426\U0001d41b",
          "poi\u0000so\u001bn", "poi\u2060son\ufe0f", "a cake"]:
    print(json.dumps({"response": r}))' >in.jsonl
	run -0 --separate-stderr v '[.rewards.blocklist, .violations]' -r blocklist:rules.txt in.jsonl
	[ "$output" = "$(printf '%s\n' '[0,["weapons"]]' '[0,["weapons"]]' '[0,["weapons"]]' '[0,["weapons"]]' \
		'[0,["weapons"]]' '[0,["weapons"]]' '[0,["poison"]]' '[0,["poison"]]' '[1,[]]')" ]
	[ "$stderr" = "" ]
	# as written, only the plain text and the spaces (Unicode's \s) are caught
	run -0 --separate-stderr v '[.rewards.blocklist, .violations]' -r blocklist:rules.txt,raw in.jsonl
	[ "$output" = "$(printf '%s\n' '[0,["weapons"]]' '[1,[]]' '[1,[]]' '[1,[]]' '[0,["weapons"]]' '[1,[]]' \
		'[1,[]]' '[1,[]]' '[1,[]]')" ]
	# a pattern the fold changes could never match: refused, unless raw
	printf '[fire] \xef\xac\x81re\n' >lig.txt
	run -2 --separate-stderr sw-verify -r blocklist:lig.txt in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:lig.txt': lig.txt:1: pattern '$(printf '\xef\xac\x81')re' would never match: responses are read in NFKC without invisible characters, where it is 'fire'; write it so, or add ,raw" ]
	[ "$output" = "" ]
	run -0 v '.rewards.blocklist' -r blocklist:lig.txt,raw in.jsonl
	[ "${lines[8]}" = 1 ]
	# marks are not folded away: a rule names them (sw-verify(1)'s example), or nomarks removes them
	printf '[plain] bomb\n[marks] b\\p{M}*o\\p{M}*m\\p{M}*b\n' >marks.txt
	python3 -c 'import json; print(json.dumps({"response": "b\u0336o\u0336m\u0336b\u0336"}))' >in.jsonl
	run -0 v '.violations' -r blocklist:marks.txt in.jsonl
	[ "$output" = '["marks"]' ]
	run -0 v '.violations' -r blocklist:marks.txt,nomarks in.jsonl
	[ "$output" = '["plain","marks"]' ]
}

@test "blocklist: nomarks reads the response without marks (accents, overlays, enclosing circles)" {
	printf '[bomb] \\bbomb\\b\n' >rules.txt
	# a strike-through overlay; accents precomposed and combining; an enclosing circle; Devanagari;
	# a plain word beside an accented one
	python3 -c 'import json
for r in ["b\u0336o\u0336m\u0336b\u0336", "b\u00f6mb", "\u1e03\u00f3\u1e3f\u1e03", "bo\u0301mb", "bomb\u20dd",
          "\u0928\u093f\u0937", "caf\u00e9 bomb"]:
    print(json.dumps({"response": r}))' >in.jsonl
	run -0 --separate-stderr v '.violations' -r blocklist:rules.txt in.jsonl
	[ "$output" = "$(printf '%s\n' '[]' '[]' '[]' '[]' '["bomb"]' '[]' '["bomb"]')" ]
	run -0 --separate-stderr v '.violations' -r blocklist:rules.txt,nomarks in.jsonl
	[ "$output" = "$(printf '%s\n' '["bomb"]' '["bomb"]' '["bomb"]' '["bomb"]' '["bomb"]' '[]' '["bomb"]')" ]
	[ "$stderr" = "" ]
	# with confusables: a Cyrillic o with an acute, Cyrillic capitals with a diaeresis
	python3 -c 'import json
for r in ["b\u043e\u0301mb", "\u0412\u0308\u041e\u041c\u0412"]: print(json.dumps({"response": r}))' >cy.jsonl
	run -0 v '.violations' -r blocklist:rules.txt,ci,nomarks,confusables cy.jsonl
	[ "$output" = "$(printf '%s\n' '["bomb"]' '["bomb"]')" ]
	run -0 v '.violations' -r blocklist:rules.txt,ci,confusables cy.jsonl
	[ "$output" = "$(printf '%s\n' '[]' '[]')" ]
	# a pattern with an accent could never match: refused; only its marks: drop nomarks
	printf 'caf\xc3\xa9\n' >cafe.txt
	run -2 --separate-stderr sw-verify -r blocklist:cafe.txt,nomarks in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:cafe.txt,nomarks': cafe.txt:1: pattern 'café' would never match: responses are read in NFKC without invisible characters or marks, where it is 'cafe'; write it so, or drop ,nomarks" ]
	[ "$output" = "" ]
	run -2 --separate-stderr sw-verify -r blocklist:rules.txt,nomarks,raw in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:rules.txt,nomarks,raw': 'raw' and 'nomarks' do not go together: raw reads the response unfolded" ]
}

@test "blocklist: confusables reads letters of other scripts that look Latin as the Latin letters; Latin rules only" {
	printf '[weapons] make\\s+a\\s+bomb\n[kill] \\bkill\\b\n' >rules.txt
	# Cyrillic a and o inside; Greek capitals; Armenian o; Cherokee K and Ukrainian i;
	# Cyrillic o with an acute (the mark stays); Russian; Greek; a Latin text with accents
	python3 -c 'import json
for r in ["m\u0430ke a b\u043emb", "\u039c\u0391\u039a\u0395 \u0391 \u0392\u039f\u039c\u0392",
          "make a b\u0585mb", "\u13e6\u0456ll", "make a b\u043e\u0301mb",
          "\u041a\u0430\u043a \u0441\u0434\u0435\u043b\u0430\u0442\u044c \u0431\u043e\u043c\u0431\u0443",
          "\u03ba\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1", "caf\u00e9 cr\u00e8me"]:
    print(json.dumps({"response": r}))' >in.jsonl
	run -0 --separate-stderr v '.violations' -r blocklist:rules.txt,ci,confusables in.jsonl
	[ "$output" = "$(printf '%s\n' '["weapons"]' '["weapons"]' '["weapons"]' '["kill"]' '[]' '[]' '[]' '[]')" ]
	[ "$stderr" = "" ]
	# without it, only the fold's NFKC: none of them
	run -0 v '.violations' -r blocklist:rules.txt,ci in.jsonl
	[ "$output" = "$(printf '[]\n%.0s' {1..8})" ]
	# case is the rule's: the Greek capitals read "MAKE A BOMB"
	run -0 v '.violations' -r blocklist:rules.txt,confusables in.jsonl
	[ "$output" = "$(printf '%s\n' '["weapons"]' '[]' '["weapons"]' '[]' '[]' '[]' '[]' '[]')" ]
	# a pattern holding such a letter could never match it: refused, naming it
	printf '[ru] \xd0\xb1\xd0\xbe\xd0\xbc\xd0\xb1\n' >ru.txt
	run -2 --separate-stderr sw-verify -r blocklist:ru.txt,confusables in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:ru.txt,confusables': ru.txt:1: pattern '$(printf '\xd0\xb1\xd0\xbe\xd0\xbc\xd0\xb1')' would never match: with confusables, '$(printf '\xd0\xbe')' (U+043E) is read as 'o'; write 'o', or drop ,confusables" ]
	[ "$output" = "" ]
	run -0 v '.violations' -r blocklist:ru.txt in.jsonl
	[ "${lines[5]}" = '["ru"]' ]
	# a letter that reads as I and l becomes the one of its case (the palochka: I), the dotless i i
	printf '[plain] \\bkill\\b\n[both] \\bki[Il]{2}\\b\n' >il.txt
	python3 -c 'import json
for r in ["ki\u04c0\u04c0", "k\u0131ll"]: print(json.dumps({"response": r}))' >il.jsonl
	run -0 v '.violations' -r blocklist:il.txt,confusables il.jsonl
	[ "$output" = "$(printf '%s\n' '["both"]' '["plain","both"]')" ]
	# raw reads the response unfolded: the two do not go together; regex does not take it
	run -2 --separate-stderr sw-verify -r blocklist:rules.txt,raw,confusables in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:rules.txt,raw,confusables': 'raw' and 'confusables' do not go together: raw reads the response unfolded" ]
	run -2 --separate-stderr sw-verify -r regex:bomb,confusables in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'regex:bomb,confusables': key 'confusables' does not apply to 'regex'" ]
}

@test "blocklist: a character a pattern writes by its number is read as if written" {
	# a Russian word; a ligature; an accent; plain text
	python3 -c 'import json
for r in ["\u0431\u043e\u043c\u0431 b\u043emb", "\ufb01re", "caf\u00e9", "bomb"]: print(json.dumps({"response": r}))' >in.jsonl
	# without a flag that folds it away, the escape is the letter: Cyrillic o matches Cyrillic o
	printf '[esc] b\\x{43e}mb\n' >esc.txt
	run -0 --separate-stderr v '.violations' -r blocklist:esc.txt in.jsonl
	[ "$output" = "$(printf '%s\n' '["esc"]' '[]' '[]' '[]')" ]
	[ "$stderr" = "" ]
	# with confusables that letter is read as 'o': each of PCRE2's forms of it is refused, naming it
	for e in '\x{43e}' '\x{43E}' '\o{2076}' '\N{U+43E}'; do
		printf 'b%smb\n' "$e" >esc.txt
		run -2 --separate-stderr sw-verify -r blocklist:esc.txt,confusables in.jsonl
		[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:esc.txt,confusables': esc.txt:1: pattern 'b${e}mb' would never match: with confusables, '$e' (U+043E) is read as 'o'; write 'o', or drop ,confusables" ]
		[ "$output" = "" ]
	done
	# the fold's NFKC and its removals: a ligature, a zero-width space
	printf '%s\n' '\x{fb01}re' >lig.txt
	run -2 --separate-stderr sw-verify -r blocklist:lig.txt in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:lig.txt': lig.txt:1: pattern '\x{fb01}re' would never match: responses are read in NFKC without invisible characters, where '\x{fb01}' (U+FB01) is 'fi'; write it so, or add ,raw" ]
	[ "$output" = "" ]
	run -0 v '.violations' -r blocklist:lig.txt,raw in.jsonl
	[ "$output" = "$(printf '%s\n' '[]' '["\\x{fb01}re"]' '[]' '[]')" ]
	printf '%s\n' 'b\x{200b}omb' >zw.txt
	run -2 --separate-stderr sw-verify -r blocklist:zw.txt in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:zw.txt': zw.txt:1: pattern 'b\x{200b}omb' would never match: responses are read in NFKC without invisible characters, where '\x{200b}' (U+200B) is ''; write it so, or add ,raw" ]
	# with nomarks, an accented letter and a mark alone
	printf '%s\n' 'caf\xe9' >cafe.txt
	run -0 v '.violations' -r blocklist:cafe.txt in.jsonl
	[ "$output" = "$(printf '%s\n' '[]' '[]' '["caf\\xe9"]' '[]')" ]
	run -2 --separate-stderr sw-verify -r blocklist:cafe.txt,nomarks in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:cafe.txt,nomarks': cafe.txt:1: pattern 'caf\xe9' would never match: responses are read in NFKC without invisible characters or marks, where '\xe9' (U+00E9) is 'e'; write it so, or drop ,nomarks" ]
	printf '%s\n' 'cafe\x{301}' >mark.txt
	run -2 --separate-stderr sw-verify -r blocklist:mark.txt,nomarks in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:mark.txt,nomarks': mark.txt:1: pattern 'cafe\x{301}' would never match: responses are read in NFKC without invisible characters or marks, where '\x{301}' (U+0301) is ''; write it so, or drop ,nomarks" ]
	# not a character by number: a backslash escaped, text quoted by \Q...\E, a Latin letter, a tab
	printf '%s\n' '[a] \\x{43e}' '[b] \Q\x{43e}\E' '[c] b\x{6f}mb' '[d] \x09' >ok.txt
	run -0 --separate-stderr v '.violations' -r blocklist:ok.txt,ci,confusables,nomarks in.jsonl
	[ "$output" = "$(printf '%s\n' '["c"]' '[]' '[]' '["c"]')" ]
	[ "$stderr" = "" ]
}

@test "blocklist: libsw/verify/confusables.h is what tools/gen_confusables.c writes from this ICU" {
	pkg-config --exists icu-i18n || skip "no ICU (libicu-dev)"
	have=$(sed -n 's/.* from ICU \([0-9.]*\)$/\1/p' "$TOP/libsw/verify/confusables.h")
	[ -n "$have" ]
	[ "$(pkg-config --modversion icu-i18n)" = "$have" ] || skip "the table is from ICU $have, this machine has $(pkg-config --modversion icu-i18n)"
	cc -std=c11 -O2 -Wall -Wextra -Werror -o gen "$TOP/tools/gen_confusables.c" $(pkg-config --cflags --libs icu-i18n icu-uc)
	run -0 --separate-stderr ./gen
	[ "$stderr" = "gen_confusables: 325 letters" ]
	[ "$output" = "$(cat "$TOP/libsw/verify/confusables.h")" ]
}

@test "blocklist, regex: \\w and \\b are Unicode's; rule names are whole UTF-8 characters" {
	printf '%s\n' '{"response":"naïve"}' '{"response":"bombé"}' >in.jsonl
	run -0 v '.rewards.regex' -r 'regex:\w+,full' in.jsonl
	[ "$output" = "$(printf '1\n1')" ]
	printf '[bomb] \\bbomb\\b\n' >rules.txt
	run -0 v '.violations' -r blocklist:rules.txt in.jsonl
	[ "$output" = "$(printf '[]\n[]')" ]
	# a pattern that is its own name is cut to 63 bytes at a character's start; a given name may not be longer
	e=$(printf 'é%.0s' {1..40})
	printf '%s\n' "$e" >rules.txt
	echo "{\"response\":\"$e\"}" >in.jsonl
	run -0 v '.violations' -r blocklist:rules.txt in.jsonl
	[ "$output" = "[\"$(printf 'é%.0s' {1..31})\"]" ]
	printf '[%s] bomb\n' "$(printf 'x%.0s' {1..64})" >rules.txt
	run -2 --separate-stderr sw-verify -r blocklist:rules.txt in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:rules.txt': rules.txt:1: rule name is longer than 63 bytes" ]
	printf '[\xff] bomb\n' >rules.txt
	run -2 --separate-stderr sw-verify -r blocklist:rules.txt in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'blocklist:rules.txt': rules.txt:1: rule name is not UTF-8" ]
}

@test "length: DAPO's overlong penalty at its edges; chars; hard" {
	for n in 0 6 7 8 9 10 11; do
		jq -nc --argjson n "$n" '{response: ([range($n)] | map("é") | join("")), response_tokens: [range($n)]}'
	done >in.jsonl
	# max 10, buffer 4: 0 up to 6, then (6 - n) / 4 down to -1 at 10, -1 beyond
	run -0 v '.rewards.length' -r length,max=10,buffer=4 in.jsonl
	[ "$output" = "$(printf '0\n0\n-0.25\n-0.5\n-0.75\n-1\n-1')" ]
	run -0 v '.rewards.length' -r length,max=10,buffer=4,unit=chars in.jsonl
	[ "$output" = "$(printf '0\n0\n-0.25\n-0.5\n-0.75\n-1\n-1')" ]
	run -0 v '.violations' -r length,max=10,buffer=4,hard in.jsonl
	[ "${lines[1]}" = '[]' ]
	[ "${lines[2]}" = '["length"]' ]
	run -2 --separate-stderr sw-verify -r length,max=4,buffer=5 in.jsonl
	[[ ${stderr_lines[0]} == *"buffer=5 is larger than max=4" ]]
}

@test "json: valid JSON, a fenced block, and not JSON" {
	printf '%s\n' '{"response":" {\"a\": [1, 2]} "}' '{"response":"```json\n{\"a\": 1}\n```"}' \
		'{"response":"{\"a\": 1,}"}' '{"response":""}' '{"response":"[1] [2]"}' >in.jsonl
	run -0 v '.rewards.json' -r json in.jsonl
	[ "$output" = "$(printf '1\n1\n0\n0\n0')" ]
}

@test "countdown: exact arithmetic, each number once" {
	cat >in.jsonl <<-'EOF'
	{"response":"<answer>(6 - 2) * 5 + 1</answer>","label":{"target":21,"numbers":[1,2,5,6]}}
	{"response":"<answer>(6 - 2) * 5</answer>","label":{"target":20,"numbers":[1,2,5,6]}}
	{"response":"<answer>6 * 6 - 15</answer>","label":{"target":21,"numbers":[6,15,2]}}
	{"response":"<answer>1 / 3 * 3 * 7</answer>","label":{"target":7,"numbers":[1,3,3,7]}}
	{"response":"thinking...\n(2 + 5) * 3 = 21","label":{"target":21,"numbers":[2,5,3]}}
	{"response":"<answer>6 / (2 - 2)</answer>","label":{"target":1,"numbers":[6,2,2]}}
	{"response":"<answer>import os</answer>","label":{"target":1,"numbers":[1]}}
	{"response":"<answer>(2 + 5) * 3</answer>","label":{"target":22,"numbers":[2,5,3]}}
	EOF
	run -0 v '.rewards.countdown' -r countdown in.jsonl
	[ "$output" = "$(printf '1\n0\n0\n1\n1\n0\n0\n0')" ]
	echo '{"response":"<answer>1</answer>","label":{"numbers":[1]}}' >bad.jsonl
	run -1 --separate-stderr sw-verify -r countdown bad.jsonl
	[ "$stderr" = "sw-verify: bad.jsonl: record 1: field 'label' lacks 'target'" ]
}

@test "the reward is the weighted sum; rewards, reward, violations for each sample" {
	echo '{"id":"a","response":"\\boxed{4}","label":"4","mine":[1,{"x":null}]}' >in.jsonl
	run -0 --separate-stderr sw-verify -f json -r math,weight=0.8 -r 'regex:boxed,as=format,weight=0.2' \
		-r length,max=1,buffer=1,weight=0.5,unit=chars in.jsonl
	[ "$output" = '{"id":"a","response":"\\boxed{4}","label":"4","mine":[1,{"x":null}],"rewards":{"math":1.0,"format":1.0,"length":-1.0},"violations":[],"reward":0.5}' ]
	[ "$stderr" = "" ]
}

@test "fields already there are replaced; a stale verifier_error and reward go" {
	echo '{"id":"a","response":"x","label":"x","reward":9.0,"rewards":{"old":1.0},"violations":["old"],"verifier_error":"old"}' >in.jsonl
	run -0 sw-verify -f json -r exact in.jsonl
	[ "$output" = '{"id":"a","response":"x","label":"x","reward":1.0,"rewards":{"exact":1.0},"violations":[]}' ]
}

@test "msgpack in, msgpack out: the fields we do not set keep their bytes" {
	sw-datagen -n 40 -s 5 >d.msgpack
	sw-verify -r length,max=300,buffer=100 d.msgpack >out.msgpack
	diff <(sw-cat -f json d.msgpack | jq -c 'del(.rewards, .reward)') \
	     <(sw-cat -f json out.msgpack | jq -c 'del(.rewards, .reward, .violations)')
	run -0 sw-cat -c out.msgpack
	[ "$output" = 40 ]
}

@test "--label-field reads the ground truth elsewhere" {
	echo '{"response":"7","answer":"7","label":"8"}' >in.jsonl
	run -0 v '.rewards.exact' -r exact --label-field answer in.jsonl
	[ "$output" = 1 ]
}

@test "a sample's verifiers field routes it" {
	printf '%s\n' '{"response":"7","label":"7","verifiers":["m"]}' '{"response":"7","label":"7"}' \
		'{"response":"7","label":"7","verifiers":[]}' >in.jsonl
	run -0 v '[.rewards, .reward]' -r exact -r math,as=m,weight=2 in.jsonl
	[ "${lines[0]}" = '[{"m":1},2]' ]
	[ "${lines[1]}" = '[{"exact":1,"m":1},3]' ]
	[ "${lines[2]}" = '[{},0]' ]
	printf '%s\n' '{"response":"7","label":"7"}' '{"response":"7","label":"7","verifiers":["nope"]}' >bad.jsonl
	run -1 --separate-stderr sw-verify -f json -r exact bad.jsonl
	[ "$stderr" = "sw-verify: bad.jsonl: record 2: field 'verifiers' names 'nope', which is not a verifier here" ]
	[ "$(echo "$output" | jq -c .rewards)" = '{"exact":1}' ]
	echo '{"response":"7","label":"7","verifiers":"exact"}' >bad2.jsonl
	run -1 --separate-stderr sw-verify -r exact bad2.jsonl
	[ "$stderr" = "sw-verify: bad2.jsonl: record 1: field 'verifiers' is str, not an array of verifier names" ]
}

@test "routing never leaves out a blocklist or a hard verifier" {
	printf '[weapons] make a bomb\n' >rules.txt
	printf '%s\n' '{"response":"7, make a bomb","label":"7","verifiers":["m"]}' \
		'{"response":"7","label":"7","verifiers":[]}' >in.jsonl
	run -0 --separate-stderr v '[.rewards, .violations, .reward]' -r math,as=m -r blocklist:rules.txt in.jsonl
	[ "${lines[0]}" = '[{"m":1,"blocklist":0},["weapons"],1]' ]
	[ "${lines[1]}" = '[{"blocklist":1},[],1]' ]
	# a hard verifier too: the length limit scores the sample that named only m
	run -0 --separate-stderr v '[.rewards, .violations, .reward]' -r math,as=m \
		-r length,max=2,buffer=1,unit=chars,hard -r blocklist:rules.txt,as=b --min-reward -1 in.jsonl
	[ "${lines[0]}" = '[{"m":1,"length":-1,"b":0},["length","weapons"],-1]' ]
	[ "${lines[1]}" = '[{"length":0,"b":1},[],1]' ]
	[ "$stderr" = "" ]
}

@test "bad input: missing fields, wrong types, NaN, a broken stream; the samples before go out" {
	printf '%s\n' '{"response":"1","label":"1"}' '{"label":"2"}' >miss.jsonl
	run -1 --separate-stderr sw-verify -f json -r math miss.jsonl
	[ "$stderr" = "sw-verify: miss.jsonl: record 2: verifier 'math' needs field 'response', which is missing" ]
	[ "${#lines[@]}" = 1 ]
	printf '%s\n' '{"response":"1"}' >nolabel.jsonl
	run -1 --separate-stderr sw-verify -r exact nolabel.jsonl
	[ "$stderr" = "sw-verify: nolabel.jsonl: record 1: verifier 'exact' needs field 'label', which is missing" ]
	# GSM8K's name for the label: said, and the option that reads it
	printf '%s\n' '{"response":"so 72","answer":"48 + 24 = 72\n#### 72"}' >gsm.jsonl
	run -1 --separate-stderr sw-verify -r math gsm.jsonl
	[ "$stderr" = "sw-verify: gsm.jsonl: record 1: verifier 'math' needs field 'label', which is missing; it has 'answer': --label-field answer reads it" ]
	run -0 --separate-stderr sw-verify -r math --label-field answer -f json gsm.jsonl
	[ "$(jq -c .rewards <<<"$output")" = '{"math":1}' ]
	printf '%s\n' '{"response":5,"label":"5"}' >type.jsonl
	run -1 --separate-stderr sw-verify -r exact type.jsonl
	[ "$stderr" = "sw-verify: type.jsonl: record 1: field 'response' is uint, verifier 'exact' wants a string" ]
	printf '%s\n' '{"response":"5","label":[5]}' >type2.jsonl
	run -1 --separate-stderr sw-verify -r math type2.jsonl
	[ "$stderr" = "sw-verify: type2.jsonl: record 1: field 'label' is array, verifier 'math' wants a string or a number" ]
	printf '%s\n' '{"response":"5","label":{"$f64":"nan"}}' >nan.jsonl
	run -1 --separate-stderr sw-verify -r math nan.jsonl
	[ "$stderr" = "sw-verify: nan.jsonl: record 1: field 'label' is NaN, verifier 'math' wants a finite number" ]
	printf '%s\n' '{"response":"5"}' >tok.jsonl
	run -1 --separate-stderr sw-verify -r length tok.jsonl
	[[ $stderr == "sw-verify: tok.jsonl: record 1: verifier 'length' needs field 'response_tokens', which is missing"* ]]
	# a truncated msgpack stream: the reader's error, after the good record
	sw-cat -o two.msgpack miss.jsonl
	head -c -3 two.msgpack >cut.msgpack
	run -1 --separate-stderr sw-verify -f json -r exact cut.msgpack
	[[ $stderr == "sw-verify: cut.msgpack: record 2 (byte "*"): "* ]]
	[ "${#lines[@]}" = 1 ]
}

@test "usage errors: no verifier, unknown ones, keys that do not apply, bad values" {
	echo '{"response":"a"}' >in.jsonl
	run -2 --separate-stderr sw-verify in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: no verifier: give at least one -r SPEC" ]
	run -2 --separate-stderr sw-verify -r nosuch in.jsonl
	[[ ${stderr_lines[0]} == "sw-verify: bad verifier 'nosuch': unknown verifier 'nosuch' "* ]]
	run -2 --separate-stderr sw-verify -r math,workers=2 in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'math,workers=2': key 'workers' does not apply to 'math'" ]
	run -2 --separate-stderr sw-verify -r math,weight=abc in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'math,weight=abc': 'weight' wants a number from -1e+06 to 1e+06, not 'abc'" ]
	run -2 --separate-stderr sw-verify -r math,bogus in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'math,bogus': unknown key 'bogus' in 'math,bogus'" ]
	run -2 --separate-stderr sw-verify -r regex in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'regex': 'regex' needs an argument: regex:PATTERN" ]
	run -2 --separate-stderr sw-verify -r math -r math in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'math': two verifiers are named 'math': tell them apart with as=NAME" ]
	run -2 --separate-stderr sw-verify -r exact --max-errors 2 in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: option '--max-errors' wants a number from 0 to 1, not '2'" ]
}

@test "output flows while the input pauses" {
	# the first sample must come out before the second goes in: the second
	# is written only once the first's result has been read (a sw-verify
	# that held its output until more input came would time the read out);
	# no clock, so a loaded machine cannot fail it
	mkfifo in out
	sw-verify -f json -r "exec:python3 $V/echo.py" <in >out &
	pid=$!
	exec 5>in 6<out
	echo '{"response":"a","label":"a"}' >&5
	first= second=
	read -r -t 120 first <&6 || true
	echo '{"response":"b","label":"b"}' >&5
	exec 5>&-
	read -r -t 120 second <&6 || true
	exec 6<&-
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ]
	[[ $first == *'"response":"a"'* ]]
	[[ $second == *'"response":"b"'* ]]
}

@test "exec: a pool of workers answers every sample, in input order" {
	for i in $(seq 1 300); do
		printf '{"id":"%d","response":"%d","label":"%d"}\n' "$i" $((i % 7)) $((i % 5))
	done >in.jsonl
	run -0 --separate-stderr v '[.id, .rewards.exec]' -r "exec:python3 $V/echo.py,workers=3" in.jsonl
	[ "$stderr" = "" ]
	want=$(v '[.id, .rewards.exact]' -r exact in.jsonl | sed 's/^\(.*\)$/\1/')
	[ "$output" = "$want" ]
	[ "${#lines[@]}" = 300 ]
}

@test "exec: violations and errors the verifier reports" {
	cat >v.py <<-'EOF'
	import json, sys
	for line in sys.stdin:
	    s = json.loads(line)
	    if s["response"] == "?":
	        print(json.dumps({"error": "cannot judge this"}), flush=True)
	    else:
	        print(json.dumps({"score": 0.25, "violations": ["pii", "toxicity"], "note": "ignored"}), flush=True)
	EOF
	printf '%s\n' '{"response":"x"}' '{"response":"?"}' >in.jsonl
	run -0 --separate-stderr v '[.rewards, .violations, .verifier_error, .reward]' -r "exec:python3 v.py,as=judge" --max-errors 0.5 in.jsonl
	[ "${lines[0]}" = '[{"judge":0.25},["pii","toxicity"],null,0.25]' ]
	[ "${lines[1]}" = '[{},[],"judge: the verifier says: cannot judge this",null]' ]
	[ "$stderr" = "sw-verify: warning: 1 of 2 samples have verifier_error (the first, sample 2: judge: the verifier says: cannot judge this)" ]
}

@test "exec: a command the shell cannot find or run says so, with its own message on stderr" {
	printf '%s\n' '{"id":"1","response":"x"}' '{"id":"2","response":"y"}' >in.jsonl
	run -1 --separate-stderr v '.verifier_error' -r "exec:$PWD/no-such-judge" in.jsonl
	[ "${lines[0]}" = '"exec: worker exited with status 127 (the shell'"'"'s status for a command not found)"' ]
	[ "${#lines[@]}" = 2 ]
	[[ $stderr == *"[exec] "*"no-such-judge: not found"* ]]
	[[ $stderr == *"sw-verify: 2 of 2 samples (100.0%) have verifier_error, more than --max-errors 0.01 allows (the first, sample 1: exec: worker exited with status 127 (the shell's status for a command not found))" ]]
	printf '#!/bin/sh\nwhile read -r l; do echo "{\\"score\\": 1}"; done\n' >judge.sh
	chmod 644 judge.sh
	run -1 --separate-stderr v '.verifier_error' -r "exec:$PWD/judge.sh" in.jsonl
	[ "${lines[0]}" = '"exec: worker exited with status 126 (the shell'"'"'s status for a command it cannot run)"' ]
	[[ $stderr == *"[exec] "*"judge.sh: Permission denied"* ]]
	# the same script, executable: it answers
	chmod 755 judge.sh
	run -0 --separate-stderr v '.rewards.exec' -r "exec:$PWD/judge.sh" in.jsonl
	[ "$output" = "$(printf '1\n1')" ]
}

hostile() { # hostile NAME [KEYS]: the attack sample fails, the others score
	printf '%s\n' '{"id":"1","response":"ok"}' "{\"id\":\"2\",\"response\":\"attack\",\"target\":\"$PWD/escaped\"}" \
		'{"id":"3","response":"ok"}' >in.jsonl
	run -0 --separate-stderr v '[.id, .reward, .verifier_error, .violations]' -q --max-errors 0.5 \
		-r "exec:python3 $V/$1.py,timeout=1,nproc=16,mem=512M${2:+,$2}" in.jsonl
	[ "${lines[0]}" = '["1",1,null,[]]' ]
	[ "${lines[2]}" = '["3",1,null,[]]' ]
	[ "${#lines[@]}" = 3 ]
	[ "$stderr" = "" ]
}

@test "sandbox: what the verifier sees of its box" {
	echo '{"response":"x"}' >in.jsonl
	run -0 v '.violations[]' -r "exec:python3 $V/probe.py,nproc=16,mem=512M,fsize=1M,cpu=60" in.jsonl
	[ "${lines[0]}" = '"uid=1000"' ]
	[ "${lines[1]}" = '"net=lo"' ]
	[ "${lines[2]}" = '"root=ro:Read-only file system"' ]
	# /tmp is its own directory; it works there (no file it names is in ours)
	[ "${lines[3]}" = '"tmp=rw"' ]
	[ "${lines[4]}" = '"cwd=rw"' ]
	[ "${lines[5]}" = '"tmpdir=rw"' ]
	[ "${lines[6]}" = '"home_is_tmpdir=True"' ]
	[ "${lines[7]}" = '"ppid=1"' ]
	[ "${lines[8]}" = '"nproc=16"' ]
	[ "${lines[9]}" = '"as=536870912"' ]
	[ "${lines[10]}" = '"fsize=1048576"' ]
	[ "${lines[11]}" = '"cpu=60"' ]
	[ "${lines[12]}" = '"capeff=0000000000000000"' ]
}

@test "sandbox: where user namespaces are refused, root's namespaces, no capabilities, no new processes" {
	unshare -U -r true 2>/dev/null || skip "cannot make a user namespace to test in"
	# no new processes in there: not even a python3 that is a shell script (pyenv's shims)
	[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
	printf '%s\n' '{"id":"1","response":"ok"}' '{"id":"2","response":"attack"}' >in.jsonl
	# a user namespace that maps only root and allows no more user namespaces: a rootless container
	run -0 --separate-stderr unshare -U -r sh -c 'echo 0 >/proc/sys/user/max_user_namespaces &&
		exec sw-verify -f json -r "exec:/usr/bin/python3 $1/forkbomb.py,timeout=5" \
			-r "exec:/usr/bin/python3 $1/probe.py,as=probe,timeout=5" in.jsonl' _ "$V"
	[ "$(echo "$output" | jq -c '.rewards.exec')" = "$(printf '1\n0')" ]
	facts=$(echo "$output" | jq -r '.violations[]' | head -13)
	[[ $facts == *"net=lo"*"root=ro:Read-only file system"*"tmpdir=rw"*"capeff=0000000000000000"* ]]
	[ "${stderr_lines[0]}" = "sw-verify: warning: exec verifier 'exec': no user namespace (No space left on device): the sandbox runs in mount, network and pid namespaces as our own user id, with no new processes" ]
	[ "${#stderr_lines[@]}" = 2 ]
}

@test "hostile: a socket is refused" {
	hostile open_socket
	[ "${lines[1]}" = '["2",null,"exec: worker exited with status 1",[]]' ]
	# and without the sandbox the same verifier does get one: the test can tell
	run -0 --separate-stderr v '.violations' -q -r "exec:python3 $V/open_socket.py,sandbox=none" in.jsonl
	[ "${lines[1]}" = '["ESCAPED: made an AF_INET socket"]' ]
	# a sandbox turned off is said, -q or not
	[ "$stderr" = "sw-verify: warning: exec verifier 'exec': sandbox=none: it runs with no sandbox, as a plain child with our user, files and network" ]
}

@test "hostile: writing outside its directory is refused" {
	hostile write_outside
	[ "${lines[1]}" = '["2",null,"exec: worker exited with status 1",[]]' ]
	[ ! -e escaped ]
	run -0 v '.violations' -r "exec:python3 $V/write_outside.py,sandbox=none" in.jsonl
	[ -e escaped ]
}

@test "hostile: a fork bomb stops at nproc, and nothing of it outlives the run" {
	hostile forkbomb
	# it answers with the number of children it got: python and sh take 2 of the 16
	[ "${lines[1]}" = '["2",14,null,[]]' ]
	run pgrep -f "$V/forkbomb.py"
	[ "$output" = "" ]
}

@test "hostile: a verifier that loops forever is killed at the timeout and restarted" {
	hostile loop
	[ "${lines[1]}" = '["2",null,"exec: worker gave no reply within 1 s (timeout)",[]]' ]
}

@test "hostile: allocating 10 GB fails under the memory limit" {
	hostile alloc
	[ "${lines[1]}" = '["2",null,"exec: worker exited with status 1",[]]' ]
}

@test "hostile: garbage replies cost one sample each, and the worker goes on" {
	hostile garbage
	[[ ${lines[1]} == '["2",null,"exec: garbage reply '"'"'this is not json {'"'"': '* ]]
	echo '{"response":"attack2"}' >in2.jsonl
	run -1 --separate-stderr v '.verifier_error' -r "exec:python3 $V/garbage.py" in2.jsonl
	[ "$output" = '"exec: bad reply: '"'"'score'"'"' is not a number"' ]
	[ "$stderr" = "sw-verify: 1 of 1 samples (100.0%) have verifier_error, more than --max-errors 0.01 allows (the first, sample 1: exec: bad reply: 'score' is not a number)" ]
}

@test "hostile: a worker that exits early costs the sample it was on; the rest go to its successor" {
	for i in 1 2 3 4 5 6 7; do printf '{"id":"%d","response":"x"}\n' $i; done >in.jsonl
	run -0 v '[.id, .verifier_error]' -q --max-errors 0.5 -r "exec:python3 $V/early_exit.py" in.jsonl
	[ "$output" = "$(printf '%s\n' '["1",null]' '["2",null]' '["3","exec: worker exited with status 3"]' \
		'["4",null]' '["5",null]' '["6","exec: worker exited with status 3"]' '["7",null]')" ]
}

@test "a verifier whose workers never answer is marked broken; --max-errors decides the exit" {
	for i in 1 2 3 4 5; do printf '{"id":"%d","response":"x"}\n' $i; done >in.jsonl
	run -1 --separate-stderr v '.verifier_error' -r "exec:exit 4" in.jsonl
	[ "${lines[0]}" = '"exec: worker exited with status 4"' ]
	[ "${lines[4]}" = '"exec: broken: 3 workers in a row ended before answering (last exited with status 4)"' ]
	[ "$stderr" = "sw-verify: 5 of 5 samples (100.0%) have verifier_error, more than --max-errors 0.01 allows (the first, sample 1: exec: worker exited with status 4)" ]
	run -0 --separate-stderr sw-verify -f json -r "exec:exit 4" --max-errors 1 in.jsonl
	[ "$stderr" = "sw-verify: warning: 5 of 5 samples have verifier_error (the first, sample 1: exec: worker exited with status 4)" ]
}

@test "no sandbox directory is left behind" {
	export TMPDIR=$PWD/tmp
	mkdir tmp
	echo '{"response":"attack"}' >in.jsonl
	sw-verify -q -f json --max-errors 1 -r "exec:python3 $V/loop.py,timeout=0.5,workers=2" in.jsonl >/dev/null
	run -0 ls tmp
	[ "$output" = "" ]
}

@test "plugin: the example keyword plug-in; its errors mark the sample" {
	[ -f "$PLUGIN" ]
	printf '%s\n' '{"response":"The ANSWER is 4"}' '{"response":"  "}' '{"label":"no response"}' >in.jsonl
	run -0 --separate-stderr v '[.rewards, .violations, .verifier_error]' -r "plugin:$PLUGIN,answer,weight=2" --max-errors 0.5 in.jsonl
	[ "${lines[0]}" = '[{"keyword":1},[],null]' ]
	[ "${lines[1]}" = '[{"keyword":0},["empty-response"],null]' ]
	[ "${lines[2]}" = '[{},[],"keyword: record 3 has no response"]' ]
	run -0 --separate-stderr v '.rewards' -r "plugin:$PLUGIN,arg=the,as=kw" -r "plugin:$PLUGIN,nope,as=kw2" in.jsonl --max-errors 1
	[ "${lines[0]}" = '{"kw":1,"kw2":0}' ]
	run -2 --separate-stderr sw-verify -r "plugin:$PLUGIN" in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'plugin:$PLUGIN': plugin '$PLUGIN' refused to start: keyword needs the word to look for: plugin:keyword.so,WORD" ]
	run -1 --separate-stderr sw-verify -r plugin:./nope.so in.jsonl
	[[ $stderr == "sw-verify: verifier 'plugin:./nope.so': cannot load plugin: ./nope.so: cannot open shared object file"* ]]
}

@test "plugin: another ABI version, or no entry point, is refused" {
	cat >old.c <<-'EOF'
	#include "sw/verifier.h"
	static int score(void *s, const sw_verifier_sample *x, sw_verifier_result *r) { (void)s; (void)x; r->score = 1; return 0; }
	static const sw_verifier_plugin p = { SW_VERIFIER_ABI + 1, "old", 0, score, 0 };
	const sw_verifier_plugin *sw_verifier_entry(void) { return &p; }
	int unrelated(void) { return 0; }
	EOF
	cc -shared -fPIC -I"$TOP/libsw" -o old.so old.c
	echo 'int unrelated(void) { return 0; }' >none.c
	cc -shared -fPIC -o none.so none.c
	echo '{"response":"a"}' >in.jsonl
	run -2 --separate-stderr sw-verify -r plugin:old.so in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'plugin:old.so': plugin 'old.so' is built for verifier ABI 2, this is ABI 1" ]
	run -2 --separate-stderr sw-verify -r plugin:none.so in.jsonl
	[ "${stderr_lines[0]}" = "sw-verify: bad verifier 'plugin:none.so': 'none.so' is no verifier plug-in: it lacks sw_verifier_entry()" ]
}

@test "code: Python, C and shell programs on their tests, in the sandbox" {
	tests='[{"input":"2 3\n","output":"5\n"},{"input":"10 -4\n","output":"6"},{"input":"0 0","output":"0\n\n"}]'
	py=$'```python\na, b = map(int, input().split())\nprint(a + b)\n```'
	pywrong=$'```python\na, b = map(int, input().split())\nprint(a * b)\n```'
	c=$'Here:\n```c\n#include <stdio.h>\nint main(void) { long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 1; printf("%ld\\n", a + b); return 0; }\n```'
	cbad=$'```c\nint main(void) { return syntax error; }\n```'
	sh=$'```sh\nread a b\necho $((a + b))\n```'
	loop=$'```python\nwhile True: pass\n```'
	net=$'```python\nimport socket\nsocket.create_connection(("1.1.1.1", 53), 1)\nprint(5)\n```'
	for r in "$py" "$pywrong" "$c" "$cbad" "$sh" "$loop" "$net"; do
		jq -nc --arg r "$r" --argjson t "$tests" '{response: $r, label: $t}'
	done >in.jsonl
	run -0 --separate-stderr v '.rewards.code' -r code,timeout=1 in.jsonl
	[ "$output" = "$(printf '1\n0.33333334\n1\n0\n1\n0\n0')" ]
	[ "$stderr" = "" ]
	echo '{"response":"print(1)","label":[{"input":"x"}]}' >bad.jsonl
	run -1 --separate-stderr sw-verify -r code bad.jsonl
	[ "$stderr" = "sw-verify: bad.jsonl: record 1: field 'label': test 1 has no 'output'" ]
}

@test "a verifier's reply that is not UTF-8: verifier_error holds U+FFFD, every str of the output is UTF-8" {
	cat >v.py <<-'PYEOF'
	import json, sys
	for line in sys.stdin:
	    s = json.loads(line)
	    if s["response"] == "bad":
	        sys.stdout.buffer.write(b"\xff\xfe not json \xe2\x82\n")
	    else:
	        sys.stdout.buffer.write(b'{"score": 1}\n')
	    sys.stdout.flush()
	PYEOF
	printf '%s\n' '{"id":"1","response":"ok"}' '{"id":"2","response":"bad"}' >in.jsonl
	run -0 --separate-stderr sw-verify -q --max-errors 0.5 -r "exec:python3 v.py" -o out.msgpack in.jsonl
	run -0 /usr/bin/python3 -c '
import sys, msgpack
for r in msgpack.Unpacker(open(sys.argv[1], "rb"), raw=False):
    print(r["id"], ascii(r.get("verifier_error")))' out.msgpack
	[ "${lines[0]}" = "1 None" ]
	[[ ${lines[1]} == "2 \"exec: garbage reply '\\ufffd\\ufffd not json \\ufffd': "*" at byte 0\"" ]]
}

@test "under sw-run (\$SW_RUN with an audit log): a verifiers record of the specs and the digests of the files they read" {
	printf '%s\n' '{"response":"the answer","label":"x"}' >in.jsonl
	printf 'badword\n' >rules.txt
	# no run, or a directory without a log: nothing recorded, nothing made
	run -0 --separate-stderr v '.reward' -r blocklist:rules.txt in.jsonl
	[ "$output" = 1 ]
	mkdir norun
	SW_RUN=$PWD/norun run -0 --separate-stderr v '.reward' -r blocklist:rules.txt in.jsonl
	[ "$output" = 1 ]
	[ ! -e norun/audit.log ]
	# a run's log: one record, before the samples, with the plug-in, the list and the exec script
	mkdir r
	sw-audit log r run_start
	SW_RUN=$PWD/r SW_ITER=7 run -0 --separate-stderr v '.reward' -r blocklist:rules.txt -r "plugin:$PLUGIN,answer" \
		-r "exec:python3 $V/echo.py" in.jsonl
	[ "$stderr" = "" ]
	run -0 jq -c 'select(.event == "verifiers") | [.seq, .iter, .specs]' r/audit.log
	[ "$output" = "[2,7,[\"blocklist:rules.txt\",\"plugin:$PLUGIN,answer\",\"exec:python3 $V/echo.py\"]]" ]
	run -0 jq -r 'select(.event == "verifiers") | .files | to_entries[] | "\(.value)  \(.key)"' r/audit.log
	[ "$output" = "$(b2sum -l 256 rules.txt "$PLUGIN" "$V/echo.py")" ]
	run -0 sw-audit verify r
	# a log signed by a key this process lacks: refused before any sample
	sw-audit keygen k
	mkdir s
	SW_SIGN_KEY=$PWD/k sw-audit log s run_start
	SW_RUN=$PWD/s run -1 --separate-stderr sw-verify -r blocklist:rules.txt in.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-verify: cannot record the verifiers in $PWD/s/audit.log: its records are signed, and one appended without the key would break the log's signatures: give the signing key (\$SW_SIGN_KEY; sw-run --sign-key)" ]
	SW_RUN=$PWD/s SW_SIGN_KEY=$PWD/k run -0 sw-verify -r blocklist:rules.txt -o /dev/null in.jsonl
	run -0 sw-audit verify --pubkey k.pub s
	[[ $output == "s/audit.log: ok: 2 records (every one signed by k.pub), "* ]]
}
