/*
 * linear_rows.h - the CPU backend's batch-invariant product (backend.h's
 * linear_rows): C[M,N] = A[M,K] W[N,K]^T + beta C, each element computed
 * the same way whatever M is, so a row's bits do not depend on the rows
 * beside it.  Decoding's products, one row (bound by reading W) or a batch
 * of rows (bound by the FMAs).
 */
#ifndef SW_CPU_LINEAR_ROWS_H
#define SW_CPU_LINEAR_ROWS_H

#include "compute/backend.h"

void sw_linear_rows(float *C, const float *A, const float *W, int M, int N, int K, float beta);

/* The products of one A by n matrices (backend.h's linear_rows_parts): the
 * parts' blocks of rows shared out over the threads as one range. */
void sw_linear_rows_parts(const sw_rows_part *p, int n, const float *A, int M, int K, float beta);

/* Cap the vector level (0 portable, 1 AVX2 + FMA, 2 AVX-512; < 0 none);
 * returns the level used from now on. */
int sw_linear_rows_simd(int cap);

/* The cache level the AVX-512 kernel of one row asks for W ahead into: 1
 * or 2, any other value the CPU's default (2 on AMD, 1 on the others);
 * returns the level used from now on (0: no kernel asks, as where the
 * AVX-512 kernels do not run). */
int sw_linear_rows_prefetch(int level);

#endif
