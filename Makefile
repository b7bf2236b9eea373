# SafeWork: libsw, the sw-* programs, their docs and tests.
#
#   make            build libsw (static and shared) and every program
#   make test       build, then run the C unit tests and the bats CLI tests
#   make check      the same suite under AddressSanitizer and UBSan
#   make test-gpu   the GPU tests (tests/gpu/), on a machine with a GPU
#   make demo       build, then the main job: examples/arith (SFT, then GRPO with a safety verifier)
#   make demo-vision  the same for pictures: examples/vision (a tiny LLaVA learns to count)
#   make bench      the benchmarks of bench/ (figures go to bench/RESULTS.md)
#   make fuzz       run every fuzz target of tests/fuzz/ (FUZZ_SECONDS each)
#   make deps       install the Debian packages that are missing
#   make install    PREFIX=/usr/local DESTDIR=
#
# Every target that builds first checks for its Debian packages and installs
# only those that are missing, so each works on a machine that has never
# seen the project.

VERSION   := 0.1.0
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
B         ?= build
OPT       ?= -O2 -g
SAN       ?=
CFLAGS_SW := -std=c11 $(OPT) -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L \
             -fPIC -fopenmp -Ilibsw -Ithird_party $(SAN) $(CFLAGS)
# MPI (libsw/dist/, sw/dist.h): on where mpicc is (Open MPI's --showme gives its flags), off
# in one line where not, and then every program runs as one process.  Expanded late (=) so
# that the first `make` of a fresh machine, whose deps-build installs Open MPI, sees it.
MPICC_     = $(shell command -v mpicc 2>/dev/null)
MPI_CFLAGS = $(if $(MPICC_),-DSW_HAVE_MPI $(shell mpicc --showme:compile))
MPI_LIBS   = $(if $(MPICC_),$(shell mpicc --showme:link))
# OpenBLAS is not linked: libsw loads it when it is chosen (compute/cpu/gemm.c); the two
# drivers that call it themselves link it (LDLIBS_BLAS).
LDLIBS_SW  = $(MPI_LIBS) -lmsgpackc -lzstd -lpng -lz -ljpeg -ldnnl -lpcre2-8 -lutf8proc -lsodium -lseccomp -ldl -lpthread -lm -fopenmp
LDLIBS_BLAS = -lopenblas
LDFLAGS_SW:= $(SAN) $(LDFLAGS)

PROGRAMS  := $(patsubst cmd/%.c,%,$(wildcard cmd/sw-*.c))
# libsw is one folder per concern (stream, model, tokenizer, compute, rl, rollout, verify,
# balance, run, common); every .c under it is part of the library.
LIB_SRC   := $(sort $(shell find libsw -name '*.c'))
LIB_OBJ   := $(LIB_SRC:libsw/%.c=$(B)/obj/libsw/%.o)
CLI_OBJ   := $(B)/obj/cmd/cli.o $(B)/obj/cmd/cli_output.o
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
HEADERS   := $(wildcard libsw/sw/*.h)
LIB_HDR   := $(sort $(shell find libsw -name '*.h'))
MANPAGES  := $(wildcard man/*.[157])

DEPS_BUILD := gcc make libc6-dev libmsgpack-dev libzstd-dev libopenblas-dev libdnnl-dev libpcre2-dev libutf8proc-dev libsodium-dev libseccomp-dev libpng-dev libjpeg62-turbo-dev \
              libopenmpi-dev openmpi-bin
DEPS_TEST  := bats bash-completion mandoc jq zstd pkg-config libxml2-utils librsvg2-bin uidmap python3-msgpack python3-pil \
              libicu-dev hyperfine clang libomp-dev
DEPS_BENCH := jq zstd hyperfine strace
DEPS_DEMO  := jq librsvg2-bin
DEPS_FUZZ  := clang libomp-dev

NVCC := $(shell command -v nvcc 2>/dev/null)
CU_SRC := $(wildcard libsw/compute/cuda/*.cu)

.PHONY: all deps deps-build deps-test deps-bench deps-fuzz deps-demo test check demo demo-vision bench fuzz \
        install clean completions confusables cuda mpi mpi-flags-check test-gpu
.DELETE_ON_ERROR:
.SECONDARY:

all: deps-build $(PROGRAMS:%=$(B)/bin/%) $(B)/lib/libsw.a $(B)/lib/libsw.so $(B)/lib/libsw.pc cuda mpi

# --- dependencies -----------------------------------------------------------
define need
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "sw: installing$$missing"; \
		if [ "$$(id -u)" = 0 ]; then s=; else s=sudo; fi; \
		$$s apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$s apt-get install -y -qq $$missing >/dev/null; \
	fi
endef
deps: deps-build deps-test deps-bench deps-fuzz deps-demo
deps-build: ; $(call need,$(DEPS_BUILD))
deps-test:  ; $(call need,$(DEPS_TEST))
deps-bench: ; $(call need,$(DEPS_BENCH))
deps-fuzz:  ; $(call need,$(DEPS_FUZZ))
deps-demo:  ; $(call need,$(DEPS_DEMO))

# --- the library and the programs -------------------------------------------
# Only the public API (libsw/sw/*.h) is exported from libsw.so: not the shared
# internals, not the yyjson compiled into stream/json.c.
$(B)/obj/libsw/%.o: libsw/%.c $(LIB_HDR) | deps-build
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -fvisibility=hidden -Dyyjson_api= -c $< -o $@
$(B)/obj/libsw/stream/json.o: third_party/yyjson/yyjson.c third_party/yyjson/yyjson.h
# The CPU ops' loops (compute/cpu/vmath.h) vectorise only where sqrtf need not set errno and
# a comparison may be made whichever way a select goes (neither changes a result).
$(B)/obj/libsw/compute/cpu/%.o: CFLAGS_SW += -fno-math-errno -fno-trapping-math
$(B)/obj/libsw/dist/%.o: CFLAGS_SW += $(MPI_CFLAGS)
# The MPI flags of the last build, rewritten only when they change (mpicc installed or
# removed since), so that the communicator is compiled again and the programs relinked.
$(B)/mpi.flags: mpi-flags-check
	@mkdir -p $(@D)
	@echo '$(MPI_CFLAGS) | $(MPI_LIBS)' | cmp -s - $@ || echo '$(MPI_CFLAGS) | $(MPI_LIBS)' >$@
mpi-flags-check:
$(B)/obj/libsw/dist/comm.o: $(B)/mpi.flags
$(B)/obj/cmd/%.o: cmd/%.c cmd/cli.h $(HEADERS) | deps-build
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -c $< -o $@
$(B)/lib/libsw.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(B)/lib/libsw.so: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libsw.so.0 $(LDFLAGS_SW) -o $(B)/lib/libsw.so.0 $^ $(LDLIBS_SW)
	ln -sf libsw.so.0 $@
$(B)/lib/libsw.pc: libsw/libsw.pc.in Makefile
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LDLIBS_SW)|' $< > $@
$(B)/bin/%: $(B)/obj/cmd/%.o $(CLI_OBJ) $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_SW) -o $@ $^ $(LDLIBS_SW)

# The GPU half: built with nvcc where there is one, skipped in one line where not.
# libsw finds libsw-cuda.so next to the programs (../lib), then in PREFIX/lib.
$(B)/obj/libsw/compute/backend.o: CFLAGS_SW += -DSW_LIBDIR='"$(PREFIX)/lib"'
cuda:
ifeq ($(NVCC),)
	@echo "sw: nvcc not found, skipping the CUDA build"
else ifeq ($(CU_SRC),)
	@echo "sw: no CUDA sources in libsw/compute/cuda/ yet, nothing to build with $(NVCC)"
else
	@$(MAKE) --no-print-directory -f libsw/compute/cuda/cuda.mk B=$(B) NVCC=$(NVCC)
endif

mpi:
	@$(if $(MPICC_),:,echo "sw: mpicc not found, building without MPI (every program runs as one process)")

# The example verifier plug-in of examples/plugin/ (tests/sw-verify.bats loads it).
all: $(B)/plugin/keyword.so
$(B)/plugin/%.so: examples/plugin/%.c libsw/sw/verifier.h
	@mkdir -p $(@D)
	$(CC) -std=c11 $(OPT) -Wall -Wextra -Werror -fPIC -shared -Ilibsw -o $@ $<

# --- tests --------------------------------------------------------------------
$(B)/tests/%: tests/unit/%.c $(wildcard tests/unit/*.h) $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -Ilibsw -o $@ $< $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW) $(LDLIBS_EXTRA)
$(B)/bin/sw-datagen: tests/datagen.c $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -o $@ $< $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW)

# The vision demo's picture generator (examples/vision/shapes.c), like sw-datagen a
# program of the examples, not of cmd/.
all: $(B)/bin/sw-shapes
$(B)/bin/sw-shapes: examples/vision/shapes.c $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -o $@ $< $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW)

# Each fuzz target, linked with tests/fuzz/replay.c instead of libFuzzer.
$(B)/fuzz/%: tests/fuzz/%.c tests/fuzz/replay.c $(wildcard tests/fuzz/*.h) $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -o $@ $< tests/fuzz/replay.c $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW)

GPU_BIN := $(B)/tests/test_gpu $(B)/tests/test_store_ipc $(B)/tests/test_nccl
test: all deps-test $(UNIT_BIN) $(GPU_BIN) $(B)/bin/sw-datagen $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%) $(B)/bench/gpu_bench
	@B=$(B) SW_SAN="$(SAN)" tests/run

# The GPU tests (tests/gpu/): make test runs them too, as skips where there is no GPU;
# test-gpu runs them where there is one, a missing GPU a failure.
$(GPU_BIN): $(B)/tests/%: tests/gpu/%.c $(wildcard tests/unit/*.h) $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -Itests/unit -o $@ $< $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW)
test-gpu: all $(GPU_BIN) $(B)/tests/test_engine $(B)/tests/test_rollout $(B)/tests/test_trainer
	@B=$(B) tests/gpu/run

check:
	$(MAKE) --no-print-directory B=build-san OPT="-O1 -g -fno-omit-frame-pointer" \
	        SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" test

# --- the rest -------------------------------------------------------------------
demo: all deps-demo
	@B=$(B) examples/arith/run.sh
demo-vision: all deps-demo
	@B=$(B) examples/vision/run.sh

# Bench drivers: bench/NAME.c linked against libsw, as $(B)/bench/NAME.
BENCH_BIN := $(patsubst bench/%.c,$(B)/bench/%,$(wildcard bench/*.c))
$(B)/bench/%: bench/%.c bench/bench_stats.h $(B)/lib/libsw.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SW) -o $@ $< $(B)/lib/libsw.a $(LDFLAGS_SW) $(LDLIBS_SW) $(LDLIBS_EXTRA)
$(B)/bench/gemm_bench $(B)/tests/test_gemm: LDLIBS_EXTRA = $(LDLIBS_BLAS)

bench: all deps-bench $(B)/bin/sw-datagen $(BENCH_BIN)
	@B=$(B) bench/run.sh

FUZZ_SECONDS ?= 60
fuzz: deps-fuzz deps-build
	@mkdir -p build-fuzz
	@for f in $(FUZZ_SRC); do \
		n=$$(basename $$f .c); \
		clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -Ilibsw -Ithird_party -fopenmp -fsanitize=fuzzer,address,undefined \
			-o build-fuzz/$$n $$f $(LIB_SRC) $(LDLIBS_SW) || exit 1; \
		mkdir -p build-fuzz/corpus-$$n tests/fuzz/seeds/$$n; \
		dict=; [ -f tests/fuzz/$$n.dict ] && dict=-dict=tests/fuzz/$$n.dict; \
		echo "sw: fuzzing $$n for $(FUZZ_SECONDS) s"; \
		build-fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $$dict \
			build-fuzz/corpus-$$n tests/fuzz/seeds/$$n 2>build-fuzz/$$n.log || \
			{ tail -40 build-fuzz/$$n.log; exit 1; }; \
		tail -1 build-fuzz/$$n.log; \
	done

completions: all
	completions/gen $(PROGRAMS:%=$(B)/bin/%)

# The blocklist's confusables table, written again from this machine's ICU (libicu-dev);
# tests/sw-verify.bats checks the committed one is what ICU of its version gives.
confusables: deps-test
	@mkdir -p $(B)/tools
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -o $(B)/tools/gen_confusables tools/gen_confusables.c \
		$$(pkg-config --cflags --libs icu-i18n icu-uc)
	$(B)/tools/gen_confusables >libsw/verify/confusables.h.tmp
	mv libsw/verify/confusables.h.tmp libsw/verify/confusables.h

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/sw $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions
	install -m 755 $(PROGRAMS:%=$(B)/bin/%) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/lib/libsw.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/lib/libsw.so.0 $(DESTDIR)$(PREFIX)/lib/
	if [ -f $(B)/lib/libsw-cuda.so ]; then install -m 755 $(B)/lib/libsw-cuda.so $(DESTDIR)$(PREFIX)/lib/; fi
	ln -sf libsw.so.0 $(DESTDIR)$(PREFIX)/lib/libsw.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LDLIBS_SW)|' libsw/libsw.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/libsw.pc
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/sw/
	for m in $(MANPAGES); do s=$${m##*.}; install -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$s/; done
	install -m 644 completions/sw.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/sw
	for p in $(PROGRAMS); do ln -sf sw $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$p; done
	install -m 644 completions/_sw $(DESTDIR)$(PREFIX)/share/zsh/site-functions/

clean:
	rm -rf build build-san build-fuzz
