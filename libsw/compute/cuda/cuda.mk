# cuda.mk - the CUDA backend, libsw-cuda.so, built by the Makefile's cuda
# target where nvcc exists (make -f libsw/compute/cuda/cuda.mk B=build NVCC=...).
#
# One shared object that libsw dlopens on demand (compute/backend.c): it links
# cuBLAS and the CUDA runtime (static), libsw and the programs link neither.
# Machine code for Hopper (sm_90) plus its PTX, which newer GPUs' drivers
# compile at start.  Host code is compiled with -Wall -Wextra -Werror.

B       ?= build
NVCC    ?= nvcc
CUDA_LIB := $(abspath $(dir $(NVCC))../lib64)
CU_SRC  := $(wildcard libsw/compute/cuda/*.cu)
CU_OBJ  := $(CU_SRC:libsw/%.cu=$(B)/obj/libsw/%.o)
CU_HDR  := libsw/compute/backend.h $(wildcard libsw/sw/*.h) $(wildcard libsw/compute/cuda/*.h)
CU_ARCH ?= -gencode arch=compute_90,code=[sm_90,compute_90]
NVFLAGS := -std=c++20 -O2 $(CU_ARCH) -Ilibsw -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror \
           -Werror all-warnings

$(B)/lib/libsw-cuda.so: $(CU_OBJ)
	@mkdir -p $(@D)
	$(NVCC) -shared $(CU_ARCH) -o $@ $^ -lcublas -cudart static \
		-Xlinker -rpath,'$$ORIGIN',-rpath,$(CUDA_LIB)

$(B)/obj/libsw/compute/cuda/%.o: libsw/compute/cuda/%.cu $(CU_HDR) libsw/compute/cuda/cuda.mk
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@
