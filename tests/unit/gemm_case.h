/*
 * gemm_case.h - one product for the tests of the CPU backend's GEMMs
 * (test_gemm.c, test_gemm_bf16.c): operands from the test's generator,
 * strided on purpose when asked (GEMM_CASE_AB: lda and ldb past the rows'
 * ends; GEMM_CASE_C: ldc),
 * C = alpha op(A) op(B) + beta C by sw_gemm_run, on the calling thread or
 * inside a parallel region, with C's first values kept for the reference
 * and what the call returned (rc).
 */
#ifndef SW_TEST_GEMM_CASE_H
#define SW_TEST_GEMM_CASE_H
#include <stdlib.h>
#include <string.h>
#include "compute/cpu/gemm.h"

#define GEMM_CASE_AB 1
#define GEMM_CASE_C 2

typedef struct gemm_case {
	int ta, tb, M, N, K, lda, ldb, ldc, rc;
	float *A, *B, *C, *C0;
} gemm_case;

static inline gemm_case gemm_case_run(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                                      float beta, int strided, int in_parallel,
                                      float *(*gen)(size_t n, unsigned seed))
{
	int ab = (strided & GEMM_CASE_AB) != 0, sc = (strided & GEMM_CASE_C) != 0;
	gemm_case c = { ta, tb, M, N, K, (ta ? M : K) + 3 * ab, (tb ? K : N) + 5 * ab, N + 7 * sc, 0,
		        NULL, NULL, NULL, NULL };
	size_t nc = (size_t)M * c.ldc;
	c.A = gen((size_t)(ta ? K : M) * c.lda, 1), c.B = gen((size_t)(tb ? N : K) * c.ldb, 2);
	c.C = gen(nc, 3), c.C0 = malloc(sizeof(float) * nc);
	memcpy(c.C0, c.C, sizeof(float) * nc);
	if (in_parallel) {
#pragma omp parallel num_threads(2)
#pragma omp single
		c.rc = sw_gemm_run(g, ta, tb, M, N, K, alpha, c.A, c.lda, c.B, c.ldb, beta, c.C, c.ldc, NULL);
	} else {
		c.rc = sw_gemm_run(g, ta, tb, M, N, K, alpha, c.A, c.lda, c.B, c.ldb, beta, c.C, c.ldc, NULL);
	}
	return c;
}

/* op(A)[i][k] and op(B)[k][j]. */
static inline float gemm_case_a(const gemm_case *c, int i, int k)
{
	return c->ta ? c->A[(size_t)k * c->lda + i] : c->A[(size_t)i * c->lda + k];
}

static inline float gemm_case_b(const gemm_case *c, int k, int j)
{
	return c->tb ? c->B[(size_t)j * c->ldb + k] : c->B[(size_t)k * c->ldb + j];
}

/* Whether the columns of C past N, the caller's, are untouched. */
static inline int gemm_case_tail_ok(const gemm_case *c)
{
	for (int i = 0; i < c->M; i++)
		for (int j = c->N; j < c->ldc; j++)
			if (c->C[(size_t)i * c->ldc + j] != c->C0[(size_t)i * c->ldc + j])
				return 0;
	return 1;
}

static inline void gemm_case_free(gemm_case *c)
{
	free(c->A), free(c->B), free(c->C), free(c->C0);
}
#endif
