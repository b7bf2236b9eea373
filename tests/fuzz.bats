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
