/*
 * rows_ab.c - decoding's matrix products (linear_rows.h) of two builds in one
 * process, taking turns: every product of a Llama-110M-shaped decode step
 * (12 layers of q, k, v, o at 768 x 768, gate and up at 2048 x 768, down at
 * 768 x 2048, then the 32000 x 768 head), each layer's weights its own
 * memory, so they stream from memory as a decode step's do, and A written
 * by the threads before each product, as a decode step's ops write it.
 *
 *   rows_ab ROWS ROUNDS
 *
 * ROWS: the batch (sequences decoding at once); ROUNDS: steps a build, the
 * two alternating (which goes first swaps each round).  Prints the median
 * step of each and now / before as a ratio of times.  Built by make, both
 * are this tree's sw_linear_rows (the A/A control: the ratio is the
 * method's spread); bench/bench_rows.sh builds it with -DROWS_BEFORE and a
 * second tree's linear_rows.c renamed to sw_linear_rows_before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_stats.h"
#include "compute/cpu/linear_rows.h"

#ifdef ROWS_BEFORE
void sw_linear_rows_before(float *C, const float *A, const float *W, int M, int N, int K,
                           float beta);
#define BEFORE_ sw_linear_rows_before
#else
#define BEFORE_ sw_linear_rows
#endif

typedef void (*rows_fn_)(float *, const float *, const float *, int, int, int, float);

enum { H_ = 768, I_ = 2048, V_ = 32000, L_ = 12, MAXR_ = 99 };

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A written by the threads, as the op before a product (a norm, the
 * attention) writes its input: the product does not find it in the cache
 * where the last product left it. */
static void touch_(float *A, int M, int K)
{
	size_t n = (size_t)M * K;
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		A[i] = -A[i];
}

/* y = A W^T after A is written (touch_). */
static void prod_(rows_fn_ f, float *C, float *A, const float *W, int M, int N, int K)
{
	touch_(A, M, K);
	f(C, A, W, M, N, K, 0);
}

/* One decode step's products by f: C = A W^T for every weight of the model. */
static void step_(rows_fn_ f, float *C, float *A, const float *W, int M)
{
	size_t per = (size_t)4 * H_ * H_ + (size_t)3 * I_ * H_;
	for (int l = 0; l < L_; l++) {
		const float *w = W + per * l;
		for (int p = 0; p < 4; p++)
			prod_(f, C, A, w + (size_t)p * H_ * H_, M, H_, H_);
		w += (size_t)4 * H_ * H_;
		prod_(f, C, A, w, M, I_, H_);
		prod_(f, C, A, w + (size_t)I_ * H_, M, I_, H_);
		prod_(f, C, A, w + (size_t)2 * I_ * H_, M, H_, I_);
	}
	prod_(f, C, A, W + per * L_, M, V_, H_);
}

int main(int argc, char **argv)
{
	int M = argc == 3 ? atoi(argv[1]) : 0, R = argc == 3 ? atoi(argv[2]) : 0;
	if (M < 1 || M > 512 || R < 1 || R > MAXR_) {
		fprintf(stderr, "usage: rows_ab ROWS ROUNDS (ROWS 1..512, ROUNDS 1..%d)\n", MAXR_);
		return 1;
	}
	size_t per = (size_t)4 * H_ * H_ + (size_t)3 * I_ * H_, nw = per * L_ + (size_t)V_ * H_;
	float *W = malloc(nw * sizeof *W), *A = malloc((size_t)M * I_ * sizeof *A);
	float *C = malloc((size_t)M * V_ * sizeof *C);
	if (!W || !A || !C) {
		fprintf(stderr, "rows_ab: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < nw; i++)
		W[i] = (float)((i * 2654435761u) % 1000) * 1e-5f - 0.005f;
	for (size_t i = 0; i < (size_t)M * I_; i++)
		A[i] = (float)(i % 97) * 0.01f;
	memset(C, 0, (size_t)M * V_ * sizeof *C);
	rows_fn_ f[2] = { sw_linear_rows, BEFORE_ };
	double t[2][MAXR_];
	step_(f[0], C, A, W, M); /* first touch of W and the threads, off the clock */
	step_(f[1], C, A, W, M);
	for (int r = 0; r < R; r++)
		for (int i = 0; i < 2; i++) {
			int b = r % 2 ? 1 - i : i;
			double t0 = now_();
			step_(f[b], C, A, W, M);
			t[b][r] = now_() - t0;
		}
	double a = bench_median(t[0], R), b = bench_median(t[1], R);
	double gf = 2.0 * M * (double)nw * 1e-9;
	printf("rows=%d rounds=%d now_ms=%.2f before_ms=%.2f now_gflops=%.1f before_gflops=%.1f "
	       "speedup=%.3f\n", M, R, a * 1e3, b * 1e3, gf / a, gf / b, b / a);
	free(W), free(A), free(C);
	return 0;
}
