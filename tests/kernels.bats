#!/usr/bin/env bats
# kernels: what the compiler made of the CPU backend's hot loops.  A
# prefetch changes no result, so no numerical test sees one go missing: GCC
# drops every call of a function that holds nothing but prefetches (it finds
# it free of side effects), and decoding's attention asked for nothing that
# way from 8c057ae until 2026-12-07 (bench/RESULTS.md, "kvl2").  These read
# the built objects' instructions.
load helpers

# prefetches OBJ: "FUNCTION INSTRUCTION" for each prefetch in libsw's
# compute/cpu/OBJ.o, the function's name without its clone or OpenMP suffix
prefetches() {
	objdump -d --no-show-raw-insn "$SW_BIN/../obj/libsw/compute/cpu/$1.o" |
		awk '/^[0-9a-f]+ </ { f = $2; gsub(/[<>:]/, "", f); sub(/\..*/, "", f) }
			/\tprefetch/ { print f, $2 }' | sort -u
}

needs_x86_objdump() {
	[ "$(uname -m)" = x86_64 ] || skip "x86-64's prefetch instructions"
	command -v objdump >/dev/null || skip "no objdump"
}

@test "kernels: decoding attention asks for the next page's keys and values into L2" {
	needs_x86_objdump
	run -0 prefetches backend_cpu
	# the keys' next page (the op's task loop), the values' (the weighted sum)
	[[ "$output" == *"attn_paged_ prefetcht1"* ]]
	[[ "$output" == *"pv_keys_ prefetcht1"* ]]
	# and nothing into L1: a page's lines asked at once there waited for the fill buffers
	[[ "$output" != *"attn_paged_ prefetcht0"* ]]
	[[ "$output" != *"pv_keys_ prefetcht0"* ]]
}

@test "kernels: the decoding products ask for W ahead (one row: a version into L1, one into L2; a batch: the next block into L2)" {
	needs_x86_objdump
	run -0 prefetches linear_rows
	[[ "$output" == *"row16_l1_ prefetcht0"* ]]
	[[ "$output" == *"row16_l2_ prefetcht1"* ]]
	# each version asks into its own level alone
	[[ "$output" != *"row16_l1_ prefetcht1"* ]]
	[[ "$output" != *"row16_l2_ prefetcht0"* ]]
	[[ "$output" == *"tiles_ prefetcht1"* ]]
}

@test "kernels: the CPU backend's kernels compile at -O0 with cc and clang, and at -O1 as make fuzz builds them" {
	# make fuzz compiles libsw with clang -O1; an intrinsic's constant
	# argument passed through a parameter compiled with GCC at -O1 and up,
	# but neither with clang, which wants a literal at the call, nor with
	# GCC at -O0 (tests/fuzz.bats checks every source with clang)
	command -v clang >/dev/null || skip "no clang (make deps-test installs it)"
	for c in "cc -O0" "clang -O0" "clang -O1"; do
		for f in linear_rows backend_cpu; do
			# (warnings allowed: make fuzz does not ask -Werror, and clang says of one
			# omp simd loop that it was not vectorised)
			run -0 ${c% *} -std=c11 -g "${c#* }" -D_POSIX_C_SOURCE=200809L -I"$TOP/libsw" \
				-I"$TOP/third_party" -fopenmp -c "$TOP/libsw/compute/cpu/$f.c" -o "$BATS_TEST_TMPDIR/$f.o"
			[[ "$output" != *"error"* ]]
			[ -s "$BATS_TEST_TMPDIR/$f.o" ]
		done
	done
}
