#!/usr/bin/env bats
# make install: programs, library (static, shared, pkg-config), headers, man
# pages and completions land under PREFIX, and a program builds against them.
load helpers

@test "make install PREFIX=... installs everything a user needs" {
	B=${SW_BIN%/bin}
	run -0 make -s -C "$TOP" B="$B" install PREFIX="$PWD/inst"
	for f in bin/sw-cat lib/libsw.a lib/libsw.so.0 lib/pkgconfig/libsw.pc include/sw/sw.h \
	         include/sw/stream.h include/sw/record.h include/sw/error.h \
	         share/man/man1/sw-cat.1 share/man/man5/sw-stream.5 share/man/man7/sw.7 \
	         share/bash-completion/completions/sw share/bash-completion/completions/sw-cat \
	         share/zsh/site-functions/_sw; do
		[ -e "inst/$f" ] || { echo "missing $f"; false; }
	done
	run -0 inst/bin/sw-cat --version
}

@test "a program builds against the installed libsw with pkg-config" {
	B=${SW_BIN%/bin}
	make -s -C "$TOP" B="$B" install PREFIX="$PWD/inst" >/dev/null
	cat >use.c <<'C'
#include <stdio.h>
#include <sw/sw.h>
int main(void)
{
	sw_error err;
	sw_reader *r = sw_reader_open("-", &err);
	sw_rec *rec = sw_rec_new();
	double reward, sum = 0;
	while (sw_reader_next(r, rec) == 1)
		if (sw_rec_get_f64(rec, "reward", &reward) == 0)
			sum += reward;
	printf("%s %g\n", sw_version(), sum);
	sw_rec_free(rec);
	sw_reader_free(r);
	return 0;
}
C
	export PKG_CONFIG_PATH=$PWD/inst/lib/pkgconfig
	# static: the archive, and the libraries pkg-config says it needs
	run -0 sh -c 'cc $SW_SAN -std=c11 -o use use.c $(pkg-config --cflags libsw) inst/lib/libsw.a \
		$(pkg-config --libs --static libsw | sed "s/-lsw //; s/-L[^ ]* //")'
	run -0 sh -c './use <"$1"' _ "$TOP/examples/samples.jsonl"
	[ "$output" = "0.1.0 2" ]
	# and the shared library, found through the prefix
	run -0 sh -c 'cc $SW_SAN -std=c11 -o use-so use.c $(pkg-config --cflags --libs libsw) && LD_LIBRARY_PATH=$PWD/inst/lib ./use-so <"$1"' _ "$TOP/examples/samples.jsonl"
	[ "$output" = "0.1.0 2" ]
}

@test "every public header compiles on its own, as a user's program includes it" {
	n=0
	for h in "$TOP"/libsw/sw/*.h; do
		printf '#include <sw/%s>\nint main(void) { return 0; }\n' "$(basename "$h")" >one.c
		run -0 --separate-stderr cc -std=c11 -Wall -Wextra -Werror -I"$TOP/libsw" -fsyntax-only one.c
		[ "$stderr" = "" ] || { echo "sw/$(basename "$h"): $stderr"; false; }
		n=$((n + 1))
	done
	[ "$n" -ge 20 ]
}

@test "libsw.so exports its public API and nothing else" {
	so="${SW_BIN%/bin}/lib/libsw.so"
	run -0 nm -D --defined-only "$so"
	exported=$(printf '%s\n' "$output" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort -u)
	[ -n "$exported" ]
	# every exported name is declared in a public header, and is an sw_ name
	public=$(cat "$TOP"/libsw/sw/*.h)
	bad=""
	for s in $exported; do
		case "$s" in sw_*) ;; *) bad="$bad $s"; continue ;; esac
		grep -qw -- "$s" <<<"$public" || bad="$bad $s"
	done
	[ -z "$bad" ] || { echo "exported but not public:$bad"; false; }
	# and the shared internals are not exported
	for s in sw_buf_put sw_afile_open sw_fail sw_mp_skip yyjson_read_opts; do
		run ! grep -qx -- "$s" <<<"$exported"
	done
}
