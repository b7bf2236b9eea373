#!/usr/bin/env bats
# Every fuzz target of tests/fuzz/ replays its seeds and every input that
# once crashed or hung it (built without libFuzzer by tests/fuzz/replay.c),
# so a fixed bug stays fixed; `make check` runs the same under the sanitizers.
load helpers

@test "every fuzz target replays its seeds and past crashes" {
	n=0
	for src in "$TOP"/tests/fuzz/fuzz_*.c; do
		name=$(basename "$src" .c)
		bin="$SW_BIN/../fuzz/$name"
		[ -x "$bin" ] || { echo "$name was not built"; false; }
		set -- "$TOP"/tests/fuzz/seeds/"$name"/* "$TOP"/tests/fuzz/crashes/"$name"/*
		files=()
		for f in "$@"; do [ -f "$f" ] && files+=("$f"); done
		[ ${#files[@]} -gt 0 ] || { echo "$name has no seeds in tests/fuzz/seeds/$name"; false; }
		run -0 timeout 120 "$bin" "${files[@]}"
		[ "$output" = "ok ${#files[@]} inputs" ] || { echo "$name: $output"; false; }
		n=$((n + 1))
	done
	[ "$n" -ge 1 ]
}

@test "libsw and the fuzz targets compile with clang, make fuzz's compiler (clang -fsyntax-only)" {
	# make fuzz builds every target with libsw's sources by clang, which
	# make test and make check (GCC) do not: an intrinsic's argument that
	# GCC folds and clang wants literal broke it once (2026-12-07)
	command -v clang >/dev/null || skip "no clang (make deps-test installs it)"
	n=0
	while IFS= read -r src; do
		run -0 --separate-stderr clang -std=c11 -fsyntax-only -D_POSIX_C_SOURCE=200809L -I"$TOP/libsw" \
			-I"$TOP/third_party" -fopenmp "$src"
		[[ "$stderr" != *"error"* ]] || { echo "$src: $stderr"; false; }
		n=$((n + 1))
	done < <(find "$TOP/libsw" "$TOP"/tests/fuzz -name '*.c' | sort)
	[ "$n" -ge 40 ]
}
