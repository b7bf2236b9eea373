#!/usr/bin/env bats
# The test runner itself (tests/run): a unit test or a bats run that stops
# early, or a bats that fails without a failed test, is counted as a failure,
# never as a clean pass.  A fake build directory and a fake bats on PATH play
# the parts.
load helpers

# A unit test script: fake_unit FILE STATUS LINES...
fake_unit() {
	local f=$1 rc=$2
	shift 2
	{ echo '#!/bin/sh'; for l in "$@"; do echo "echo '$l'"; done; echo "exit $rc"; } >"$f"
	chmod +x "$f"
}

@test "tests/run: a unit test without its plan, a crashed one, a bats that stops short all fail the run" {
	mkdir -p b/tests fake
	fake_unit b/tests/test_good 0 'ok 1 - fine' '1..1'
	fake_unit b/tests/test_noplan 0 'ok 1 - fine'
	fake_unit b/tests/test_crash 139 'ok 1 - fine'
	for t in test_engine test_rollout test_trainer; do fake_unit "b/tests/$t" 0 'ok 1 - fine' '1..1'; done
	# bats announces 3 tests, reports one, and dies.
	printf '#!/bin/sh\necho 1..3\necho "ok 1 first"\nexit 1\n' >fake/bats
	chmod +x fake/bats
	PATH="$PWD/fake:$PATH" B="$PWD/b" run -1 "$TOP/tests/run"
	[[ $output == *"FAIL: not ok - test_noplan ended without its plan"* ]]
	[[ $output == *"FAIL: not ok - test_crash exited with status 139"* ]]
	[[ $output == *"FAIL: not ok - bats: bats ran 1 of the 3 tests it planned (status 1)"* ]]
	[[ $output == *"FAIL: not ok - bats [guard]: bats ran 1 of the 3 tests it planned (status 1)"* ]]
	[ "${lines[-1]}" = "11 passed, 4 failed, 0 skipped" ]
}

@test "tests/run: a bats that exits non-zero with every planned test ok fails the run" {
	mkdir -p b/tests fake
	printf '#!/bin/sh\necho 1..1\necho "ok 1 only"\nexit 1\n' >fake/bats
	chmod +x fake/bats
	PATH="$PWD/fake:$PATH" B="$PWD/b" run -1 "$TOP/tests/run"
	[[ $output == *"FAIL: not ok - bats: bats exited with status 1 with no failed test"* ]]
	[[ $output == *"FAIL: not ok - test_engine on guard: "*"/tests/test_engine is missing"* ]]
}

@test "tests/run: all plans met and bats clean: exit 0 and the count line" {
	mkdir -p b/tests fake
	for t in test_engine test_rollout test_trainer; do fake_unit "b/tests/$t" 0 'ok 1 - fine' 'ok 2 - fine' '1..2'; done
	printf '#!/bin/sh\necho 1..2\necho "ok 1 a"\necho "ok 2 b # skip no GPU"\n' >fake/bats
	chmod +x fake/bats
	PATH="$PWD/fake:$PATH" B="$PWD/b" run -0 "$TOP/tests/run"
	[ "${lines[-1]}" = "14 passed, 0 failed, 2 skipped" ]
}

@test "tests/run: an argument is an error, not a file silently ignored" {
	run -1 --separate-stderr "$TOP/tests/run" tests/sw-cat.bats
	[ "$output" = "" ]
	[ "$stderr" = "tests/run: takes no arguments (it runs every test; bats tests/NAME.bats runs one file)" ]
}
