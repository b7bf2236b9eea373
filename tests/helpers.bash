# helpers.bash - loaded by every bats file: the programs on PATH, a scratch
# directory, and small makers of test streams.
bats_require_minimum_version 1.5.0

TOP=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
: "${SW_BIN:=$TOP/build/bin}"
PATH="$SW_BIN:$PATH"
export PATH LC_ALL=C

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
}

# The programs that exist: one per cmd/sw-*.c.
programs() {
	for f in "$TOP"/cmd/sw-*.c; do basename "$f" .c; done
}

# Bytes from printf escapes, to a file: mp FILE '\x81\xa1x\x01' ...
mp() {
	local out=$1
	shift
	printf "$@" >"$out"
}
