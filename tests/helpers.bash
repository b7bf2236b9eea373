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

# need_mpirun: skip the test where Open MPI's mpirun is absent (make deps installs it).
need_mpirun() {
	command -v mpirun >/dev/null 2>&1 || skip "mpirun not found (make deps installs openmpi-bin)"
}

# sw_mpirun ARGS...: mpirun with the settings the tests need here: as root Open MPI
# wants its two allow-run-as-root variables; in a container the shared-memory
# transport cannot use cross-memory attach (single_copy_mechanism=none); ranks may
# outnumber the cores (--oversubscribe) and must not be pinned to one of them.
# Under make check, LeakSanitizer would report what Open MPI keeps until exit.
sw_mpirun() {
	ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
	OMPI_MCA_hwloc_base_binding_policy=none \
		mpirun --oversubscribe --bind-to none "$@"
}
