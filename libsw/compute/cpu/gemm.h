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
 *
 * oneDNN's f32 products A B^T (a Linear's forward) run on its matmul
 * primitive, the others on dnnl_sgemm, whichever is faster (gemm_prim.c).
 *
 * Precision (sw_gemm_matmul): "f32" (the default) or "bf16", where the
 * products' operands are rounded to bf16 and multiplied on oneDNN's bf16
 * dot-product kernels, accumulating and writing f32 (gemm_prim.c), whatever
 * the provider.  Under bf16 these products stay f32: those called inside a
 * parallel region (training attention's per-head tiles, gemm_run's blocks),
 * those with fewer than 32 rows or columns in the result and those under
 * 64^3 multiply-adds (the conversion would cost more than bf16 saves);
 * decoding never comes here (linear_rows.h).  A bf16 product over a big B
 * runs in chunks of it (SW_GEMM_BF16_CHUNK, gemm.c).
 */
#ifndef SW_CPU_GEMM_H
#define SW_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sw/error.h"

typedef enum sw_gemm_kind {
	SW_GEMM_ONEDNN,
	SW_GEMM_OPENBLAS,
} sw_gemm_kind;

/* Products by oneDNN's matmul primitive: their primitives and scratch (gemm_prim.c). */
typedef struct sw_gemm_prim sw_gemm_prim;

/* A provider and a precision; nt and bf16 are owned (sw_gemm_release frees them). */
typedef struct sw_gemm {
	sw_gemm_kind kind;
	char kernels[96]; /* what runs: "onednn 2.6.3 avx512_core_bf16", "openblas 0.3.21 SkylakeX" */
	sw_gemm_prim *nt;   /* oneDNN's f32 A B^T by primitive; NULL: by dnnl_sgemm */
	sw_gemm_prim *bf16; /* NULL: every product in f32 */
	size_t bf16_chunk;  /* bf16: B's elements converted and multiplied at once (0: the default) */
} sw_gemm;

/* bf16 products over a B of more elements (4 MiB in bf16) run in chunks of
 * B, each converted just before its product: the vocabulary head's weight
 * (gemm.c).  A sw_gemm's bf16_chunk chooses another size (for tests and
 * benchmarks; SIZE_MAX: never in chunks). */
#define SW_GEMM_BF16_CHUNK ((size_t)1 << 21)

/* The providers sw_gemm_init knows, as an error message lists them. */
#define SW_GEMM_NAMES "onednn, openblas"

/*
 * g, a new one in f32, for the provider of that name ("onednn",
 * "openblas"; NULL or "": the default, oneDNN); an unknown name is
 * SW_EINVAL and g is left as it was.  sw_gemm_provider chooses again for a
 * g made so, keeping its precision.  A g made so is released with
 * sw_gemm_release.  Choosing OpenBLAS first fixes its
 * kernels up where the distribution's OpenBLAS does not know the CPU (see
 * gemm.c), unless OPENBLAS_CORETYPE is set: that is the user's choice.
 */
int sw_gemm_init(sw_gemm *g, const char *name, sw_error *err);
int sw_gemm_provider(sw_gemm *g, const char *name, sw_error *err);

/* The precisions sw_gemm_matmul knows, as an error message lists them. */
#define SW_MATMUL_NAMES "f32, bf16"

/*
 * The precision of g's products: "f32" (NULL or "": the same) or "bf16".
 * bf16 on a CPU without bf16 dot products (oneDNN's ISA below
 * avx512_core_bf16; DNNL_MAX_CPU_ISA can lower it) is SW_EINVAL naming what
 * is missing, as is an unknown name; g is then left as it was.
 */
int sw_gemm_matmul(sw_gemm *g, const char *prec, sw_error *err);
/* "f32", or "bf16 " and the kernel oneDNN chose for the last new shape. */
const char *sw_gemm_matmul_name(const sw_gemm *g, char *buf, size_t size);
/* The failure of a bf16 product, or NULL: after one, the products run in f32
 * and this says why (the backend's sync reports it: nothing is silent). */
const sw_error *sw_gemm_error(const sw_gemm *g);
/* Free what g owns (its primitives); g then runs every product in f32 on
 * its provider's own call.  NULL is a no-op. */
void sw_gemm_release(sw_gemm *g);

/*
 * C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when tX; M x N
 * result, K inner.  On OpenMP's threads; called inside a parallel region
 * (attention's tiles), on the calling thread alone.  Products by
 * primitive (g's nt and bf16) take turns: one at a time a primitive.
 * SW_ENOMEM (or SW_EINVAL with oneDNN's status) and err where oneDNN's
 * sgemm refused: it allocates its packing buffers in the call, and out of
 * memory it returns with C as it was, which is then no result.
 */
int sw_gemm_run(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                sw_error *err);

/* oneDNN's name for an ISA ("avx512_core_bf16"). */
const char *sw_dnnl_isa_name(int isa);

/* ---- gemm_prim.c, for gemm.c and the tests ---- */
/* f32 to bf16, rounded to nearest even as AVX512-BF16's VCVTNE2PS2BF16 does
 * (denormal inputs are zeros, NaNs stay NaNs); _scalar gives the same bits
 * without the instruction, which sw_bf16_simd says the CPU has. */
void sw_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void sw_bf16_from_f32_scalar(uint16_t *dst, const float *src, size_t n);
bool sw_bf16_simd(void);
/* Products by primitive in bf16 (NULL and err where the CPU has no bf16
 * dot products) or in f32. */
sw_gemm_prim *sw_gemm_prim_new(bool bf16, sw_error *err);
void sw_gemm_prim_free(sw_gemm_prim *b);
/* The kernel oneDNN chose for the last new shape. */
const char *sw_gemm_prim_impl(const sw_gemm_prim *b);
const sw_error *sw_gemm_prim_error(const sw_gemm_prim *b);
/* How many products b has run. */
unsigned long sw_gemm_prim_runs(sw_gemm_prim *b);
/* The product on the calling thread's OpenMP pool; false, C untouched, when
 * it is not done here: after a failure (which sw_gemm_prim_error then
 * holds), and in f32 for operands not dense in their layout or a shape
 * oneDNN would not run on its brg kernels. */
bool sw_gemm_prim_run(sw_gemm_prim *b, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);

#endif
