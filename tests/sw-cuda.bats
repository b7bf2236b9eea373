#!/usr/bin/env bats
# --device cuda where it cannot be had: the programs start without any CUDA
# library, and asking for the GPU fails with exit 1 and a message naming
# what is missing (the backend not built, a library it needs, the driver);
# an unknown device name stays a usage error.  make without nvcc skips the
# CUDA build in one line; make install installs libsw-cuda.so where built.
# The GPU itself is tested by tests/gpu/ (make test-gpu).
load helpers

B_=${SW_BIN%/bin}
SO=$B_/lib/libsw-cuda.so

# The NVIDIA driver's library, where the loader can find it.
have_driver() {
	ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '
}

# A copy of sw-train in DIR/bin, where ../lib is DIR/lib.
solo() {
	mkdir -p "$1/bin" "$1/lib"
	cp "$SW_BIN/sw-train" "$1/bin/"
}

@test "--device cuda without a GPU driver: exit 1, the driver's library named" {
	[ -f "$SO" ] || skip "built without CUDA (no $SO)"
	if have_driver; then skip "this machine has a GPU driver"; fi
	msg="cuda: no NVIDIA driver on this machine: libcuda.so.1: cannot open shared object file: No such file or directory"
	for p in sw-train sw-rollout sw-run; do
		run -1 --separate-stderr "$p" --device cuda
		[ "$output" = "" ]
		[ "$stderr" = "$p: $msg" ]
	done
	SW_DEVICE=cuda:0 run -1 --separate-stderr sw-train
	[ "$stderr" = "sw-train: SW_DEVICE: $msg" ]
}

@test "--weights cuda:NAME without a GPU driver: exit 1, the driver named, nothing left in /dev/shm" {
	[ -f "$SO" ] || skip "built without CUDA (no $SO)"
	if have_driver; then skip "this machine has a GPU driver"; fi
	msg="store 'cuda:swt-$$': cuda: no NVIDIA driver on this machine: libcuda.so.1: cannot open shared object file: No such file or directory"
	run -1 --separate-stderr sw-train --weights "cuda:swt-$$" </dev/null
	[ "$output" = "" ]
	[ "$stderr" = "sw-train: $msg" ]
	for dev in cpu cuda; do
		SW_WEIGHTS="cuda:swt-$$" run -1 --separate-stderr sw-train --device "$dev" </dev/null
		if [ "$dev" = cpu ]; then
			[ "$stderr" = "sw-train: $msg" ]
		else
			[ "$stderr" = "sw-train: ${msg#*: }" ]
		fi
	done
	run -1 --separate-stderr sw-rollout --weights "cuda:swt-$$" </dev/null
	[ "$output" = "" ]
	[ "$stderr" = "sw-rollout: $msg" ]
	# a cuda: store is looked for only once the GPU is there: a shm: store of that name changes nothing
	[ ! -e "/dev/shm/swt-$$" ]
	[ ! -e "/dev/shm/swt-$$.opt" ]
}

@test "sw-run --device cuda without a GPU driver: exit 1 before the run directory is made" {
	[ -f "$SO" ] || skip "built without CUDA (no $SO)"
	if have_driver; then skip "this machine has a GPU driver"; fi
	sw-model init --size tiny m >/dev/null
	printf '{"id":"q1","prompt":"1+1=","label":"2"}\n' >p.jsonl
	run -1 --separate-stderr sw-run -m m -p p.jsonl -o r --iters 1 --device cuda
	[ "$output" = "" ]
	[ "$stderr" = "sw-run: cuda: no NVIDIA driver on this machine: libcuda.so.1: cannot open shared object file: No such file or directory" ]
	[ ! -e r ] # (its stores are named after the device check; other tests' come and go in /dev/shm meanwhile)
	printf 'model m\nprompts p.jsonl\niters 1\ndevice cuda\n' >exp
	run -1 --separate-stderr sw-run -c exp -o r
	[[ "$stderr" == "sw-run: exp: line 4: cuda: no NVIDIA driver on this machine: "* ]]
	[ ! -e r ]
}

@test "--device cuda from a program with no libsw-cuda.so beside it: exit 1, built without CUDA" {
	[ ! -e /usr/local/lib/libsw-cuda.so ] || skip "an installed libsw-cuda.so would be found"
	d=$(pwd -P)/t
	solo "$d"
	run -1 --separate-stderr "$d/bin/sw-train" --device cuda
	[[ "$stderr" == "sw-train: device 'cuda': built without CUDA (no $d/lib/libsw-cuda.so, no "*"/libsw-cuda.so)" ]]
	SW_DEVICE=cuda:3 run -1 --separate-stderr "$d/bin/sw-train"
	[[ "$stderr" == "sw-train: SW_DEVICE: device 'cuda:3': built without CUDA (no $d/lib/"* ]]
}

@test "a libsw-cuda.so that cannot be loaded: exit 1, the missing library named" {
	d=$(pwd -P)/t
	solo "$d"
	# A backend that needs a library which is not there (as libcublas.so.13 on a machine without it).
	echo 'int sw_gone_;' >gone.c
	cc -shared -fPIC -o libswgone.so gone.c
	echo 'extern int sw_gone_; int *p_ = &sw_gone_;' >so.c
	cc -shared -fPIC -o "$d/lib/libsw-cuda.so" so.c -L. -lswgone
	rm libswgone.so
	run -1 --separate-stderr "$d/bin/sw-train" --device cuda
	[ "$stderr" = "sw-train: device 'cuda': cannot load $d/lib/libsw-cuda.so: libswgone.so: cannot open shared object file: No such file or directory" ]
	# One that loads but is not the backend.
	cc -shared -fPIC -o "$d/lib/libsw-cuda.so" gone.c
	run -1 --separate-stderr "$d/bin/sw-train" --device cuda:0
	[ "$stderr" = "sw-train: device 'cuda:0': $d/lib/libsw-cuda.so has no sw_cuda_backend_open" ]
}

@test "an unknown device is a usage error (exit 2), cuda among the known ones" {
	for dev in cuda:x cuda: cuda9 gpu; do
		run -2 --separate-stderr sw-train --device "$dev"
		[ "${stderr_lines[0]}" = "sw-train: unknown device '$dev' (known: cpu, guard, cuda, cuda:N)" ]
	done
}

@test "the programs and libsw.so link no CUDA library" {
	for f in "$SW_BIN"/sw-* "$B_/lib/libsw.so.0"; do
		run -0 readelf -d "$f"
		[ -n "$output" ]
		run -1 grep -iE 'NEEDED.*(cuda|cublas|nccl)' <<<"$output"
	done
}

@test "libsw-cuda.so exports its one entry and links cuBLAS, not libsw" {
	[ -f "$SO" ] || skip "built without CUDA (no $SO)"
	run -0 nm -D --defined-only "$SO"
	run -0 awk '$2 == "T" { print $3 }' <<<"$output"
	[ "$output" = "sw_cuda_backend_open" ]
	run -0 readelf -d "$SO"
	[[ "$output" == *"[libcublas.so."* ]]
	[[ "$output" != *"[libsw.so"* ]]
	[[ "$output" != *"[libcudart.so"* ]] # the runtime is linked in (static)
	[[ "$output" != *"[libnccl.so"* ]]   # NCCL is dlopen'ed when data parallel training asks for it
}

@test "make without nvcc skips the CUDA build in one line" {
	run -0 --separate-stderr make -s -C "$TOP" B="$B_" cuda NVCC=
	[ "$output" = "sw: nvcc not found, skipping the CUDA build" ]
}

@test "make install installs libsw-cuda.so, and the installed programs find it" {
	[ -f "$SO" ] || skip "built without CUDA (no $SO)"
	run -0 make -s -C "$TOP" B="$B_" install PREFIX="$PWD/inst"
	[ -x inst/lib/libsw-cuda.so ]
	cmp "$SO" inst/lib/libsw-cuda.so
	if have_driver; then skip "this machine has a GPU driver"; fi
	run -1 --separate-stderr inst/bin/sw-train --device cuda
	[[ "$stderr" == "sw-train: cuda: no NVIDIA driver on this machine: "* ]]
}
