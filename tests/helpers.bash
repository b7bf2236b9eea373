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
		command mpirun --oversubscribe --bind-to none "$@"
}

# The sample sets of sw-train's tests (tests/sw-train.bats, tests/sw-train-mpi.bats).
# Byte token ids of a string, comma-separated: tok "ab" -> 97,98
tok() { printf '%s' "$1" | od -An -tu1 -v | tr -s ' \n' ',,' | sed 's/^,//; s/,$//'; }

# Eight prompts "kN=" each with its own colour word and <|eos|> (257).
sft_set() {
	local i=0
	for r in red green blue cyan pink gold gray teal; do
		printf '{"id":"s%d","prompt_tokens":[%s],"response_tokens":[%s,257]}\n' \
			$i "$(tok "k$i=")" "$(tok "$r")"
		i=$((i + 1))
	done
}

# Four prompts, four candidate responses each; the k-th prompt rewards its k-th.
grpo_set() {
	for k in 0 1 2 3; do
		i=0
		for r in red blue gold teal; do
			rew=0
			[ $i -eq $k ] && rew=1
			printf '{"id":"p%d/%d","group":"p%d","prompt_tokens":[%s],"response_tokens":[%s,257],"reward":%d.0}\n' \
				$k $i $k "$(tok "k$k=")" "$(tok "$r")" $rew
			i=$((i + 1))
		done
	done
}
