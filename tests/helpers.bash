# helpers.bash - loaded by every bats file: the programs on PATH, a scratch
# directory, and small makers of test streams.
bats_require_minimum_version 1.5.0
# Debian's bats 1.8.2: `run` with flags calls bats_version_lt, whose loop variable i is not local, so
# every `run -N ...` sets the caller's $i to 2.  A loop that runs a command must not count in i.

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
# outnumber the cores (--oversubscribe), must not be pinned to one of them, and
# give the core away while they wait (yield_when_idle) rather than spin on it.
# Under make check, LeakSanitizer would report what Open MPI keeps until exit.
sw_mpirun() {
	ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
	OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1 \
		command mpirun --oversubscribe --bind-to none "$@"
}

# The largest |a - b| over the weights of two model directories
# (tests/sw-train-mpi.bats, tests/sw-run-ranks.bats).
maxdiff() {
	python3 - "$1/model.safetensors" "$2/model.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
                             b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
print('%.3g' % max(abs(x - y) for k in a for x, y in zip(a[k], b[k])))
PY
}

# The K-th block of indented lines of the README's section HEADING, as a script:
# readme_block_k HEADING K (tests/sw-run-ranks.bats, tests/mpi-netns.bats).
readme_block_k() {
	awk -v h="## $1" -v k="$2" '$0 == h { on = 1; next } on && /^## / { exit }
		on && /^    / { if (!inblk) { n++; inblk = 1 } if (n == k) print substr($0, 5); next }
		on && /^$/ { if (n == k && inblk) print; next } on { inblk = 0 }' "$TOP/README.md"
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

# A store made from a model directory, and a store saved to one: the C API,
# since sw-run is what makes stores in a real run.
mkstore() {
	command -v cc >/dev/null || skip "no C compiler"
	cat >mkstore.c <<-'EOF'
	#include <stdio.h>
	#include <string.h>
	#include "sw/sw.h"
	int main(int argc, char **argv) {
		sw_error e = { 0 };
		char spec[256];
		sw_store *s;
		if (argc == 3 && !strcmp(argv[1], "create")) {
			if (sw_store_name_random("sw-train-test", spec, sizeof spec, &e) ||
			    !(s = sw_store_create_from_model(spec, argv[2], 0, &e)))
				return fprintf(stderr, "%s\n", e.msg), 1;
			printf("%s\n", spec);
		} else if (argc == 4 && !strcmp(argv[1], "save")) {
			if (!(s = sw_store_open(argv[2], false, &e)) || sw_store_save_model(s, argv[3], SW_DT_F32, &e))
				return fprintf(stderr, "%s\n", e.msg), 1;
			printf("%llu\n", (unsigned long long)sw_store_version(s));
		} else {
			return 2;
		}
		sw_store_close(s);
		return 0;
	}
	EOF
	cc $SW_SAN -std=c11 -D_POSIX_C_SOURCE=200809L -fopenmp -I"$TOP/libsw" -o mkstore mkstore.c "$SW_BIN/../lib/libsw.a" \
		-lmsgpackc -lzstd -ldnnl -lpcre2-8 -lutf8proc -lsodium -lseccomp -ldl -lpthread -lm
}

# Process $1 has ended: gone, or a zombie.  A killed sw-run's children go to
# init, or to a container's first process, which may never collect them.
ended() {
	local s
	s=$(sed -n 's/.*) \(.\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || true
	[ -z "$s" ] || [ "$s" = Z ] || [ "$s" = X ]
}
