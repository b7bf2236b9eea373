/*
 * gemm.h - the CPU backend's matrix products and who computes them: a
 * provider (oneDNN's dnnl_sgemm or OpenBLAS's cblas_sgemm) chosen at run
 * time, held in a sw_gemm that the CPU backend owns (backend_cpu.c keeps the
 * one the process uses; tests and bench/gemm_bench.c make their own).
 *
 * Threads: both providers run on OpenMP's one pool of threads.  oneDNN here
 * is built on the same libgomp and threads a product itself (one thread
 * when called inside a parallel region); OpenBLAS (the pthread build) is
 * kept single-threaded and a product is split into blocks over OpenMP's
 * threads, so no second pool spins against the first.
 */
#ifndef SW_CPU_GEMM_H
#define SW_CPU_GEMM_H

#include "sw/error.h"

typedef enum sw_gemm_kind {
	SW_GEMM_ONEDNN,
	SW_GEMM_OPENBLAS,
} sw_gemm_kind;

typedef struct sw_gemm {
	sw_gemm_kind kind;
	char kernels[96]; /* what runs: "onednn 2.6.3 avx512_core_bf16", "openblas 0.3.21 SkylakeX" */
} sw_gemm;

/* The providers sw_gemm_init knows, as an error message lists them. */
#define SW_GEMM_NAMES "onednn, openblas"

/*
 * g for the provider of that name ("onednn", "openblas"; NULL or "": the
 * default, oneDNN); an unknown name is SW_EINVAL and g is left as it was.
 * Choosing OpenBLAS first fixes its kernels up where the distribution's
 * OpenBLAS does not know the CPU (see gemm.c), unless OPENBLAS_CORETYPE is
 * set: that is the user's choice.
 */
int sw_gemm_init(sw_gemm *g, const char *name, sw_error *err);

/*
 * C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when tX; M x N
 * result, K inner.  On OpenMP's threads; called inside a parallel region
 * (attention's tiles), on the calling thread alone.
 */
void sw_gemm_run(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
