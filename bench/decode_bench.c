/*
 * decode_bench.c - bench/bench_decode.sh's driver: greedy decoding of a model
 * directory beside the machine's memory bandwidth, measured in the same
 * process on a buffer the size of the weights.
 *
 *   decode_bench DIR NSEQ NEW    NSEQ sequences (16-token prompts), NEW tokens each
 *
 * One line of KEY=VALUE pairs: the weights' MiB, the read bandwidth (GB/s,
 * median of 5 passes, every thread), the median decode step (wall and CPU
 * seconds), tokens/s of the steps, and for one sequence the bound a step
 * cannot beat (reading every weight once: weights / bandwidth) and what
 * the step spends beyond it (the fixed cost of a token).  Threads from
 * $SW_THREADS, else every core.
 */
#define _DEFAULT_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/engine.h"
#include "sw/model.h"

static double now_(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One thread's sum of n floats: four vector accumulators, so that the
 * loads, not the adds' latency, set the pace. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "bench_stats.h"
__attribute__((target("avx2"))) static float sum_(const float *x, size_t n)
{
	__m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a = _mm256_add_ps(a, _mm256_loadu_ps(x + i));
		b = _mm256_add_ps(b, _mm256_loadu_ps(x + i + 8));
		c = _mm256_add_ps(c, _mm256_loadu_ps(x + i + 16));
		d = _mm256_add_ps(d, _mm256_loadu_ps(x + i + 24));
	}
	float t[8], s = 0;
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
	for (int j = 0; j < 8; j++)
		s += t[j];
	for (; i < n; i++)
		s += x[i];
	return s;
}
#else
static float sum_(const float *x, size_t n)
{
	float s[4] = { 0 };
	size_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int j = 0; j < 4; j++)
			s[j] += x[i + j];
	for (; i < n; i++)
		s[0] += x[i];
	return s[0] + s[1] + s[2] + s[3];
}
#endif

/* Read bandwidth over n floats (STREAM-like: every thread sums its share),
 * median of 5 timed passes. */
static double bandwidth_(size_t n)
{
	float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
	if (!x)
		return 0;
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(i & 255);
	double t[5];
	float keep = 0;
	for (int r = 0; r < 6; r++) {
		double t0 = now_(CLOCK_MONOTONIC);
		float acc = 0;
#pragma omp parallel reduction(+ : acc)
		{
			size_t nt = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num();
			size_t lo = n * me / nt, hi = n * (me + 1) / nt;
			acc += sum_(x + lo, hi - lo);
		}
		if (r)
			t[r - 1] = now_(CLOCK_MONOTONIC) - t0;
		keep += acc;
	}
	free(x);
	return keep == -1 ? 0 : (double)n * sizeof(float) / bench_median(t, 5) / 1e9;
}

static void die_(const char *what, const sw_error *e)
{
	fprintf(stderr, "decode_bench: %s: %s\n", what, e->msg);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: decode_bench DIR NSEQ NEW\n");
		return 2;
	}
	int nseq = atoi(argv[2]), nnew = atoi(argv[3]), plen = 16;
	const char *th = getenv("SW_THREADS");
	sw_engine_threads(th ? atoi(th) : 0);
	sw_error err = { 0 };
	sw_model *m = sw_model_load(argv[1], &err);
	if (!m)
		die_("load", &err);
	int V = m->cfg.vocab_size;
	double wbytes = (double)m->nparams * sizeof(float);
	double bw = bandwidth_(m->nparams);
	sw_decoder *d = sw_decoder_new(m, nseq, (int64_t)nseq * (plen + nnew), &err);
	if (!d)
		die_("decoder", &err);
	uint64_t r = 12345;
	for (int s = 0; s < nseq; s++) {
		int32_t p[16];
		for (int i = 0; i < plen; i++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			p[i] = (int32_t)((r >> 33) % (uint64_t)V);
		}
		if (sw_decoder_add(d, p, plen, &err) < 0)
			die_("add", &err);
	}
	int nout;
	const int *ids;
	const float *lg;
	if (sw_decoder_step(d, &nout, &ids, &lg, &err))
		die_("prefill", &err);
	double *tw = malloc(sizeof(double) * (size_t)nnew), *tc = malloc(sizeof(double) * (size_t)nnew);
	for (int k = 0; k < nnew; k++) {
		double w0 = now_(CLOCK_MONOTONIC), c0 = now_(CLOCK_PROCESS_CPUTIME_ID);
		for (int j = 0; j < nout; j++) {
			const float *z = lg + (size_t)j * V;
			int32_t b = 0;
			for (int v = 1; v < V; v++)
				if (z[v] > z[b])
					b = v;
			if (sw_decoder_append(d, ids[j], &b, 1, &err))
				die_("append", &err);
		}
		if (sw_decoder_step(d, &nout, &ids, &lg, &err))
			die_("step", &err);
		tw[k] = now_(CLOCK_MONOTONIC) - w0;
		tc[k] = now_(CLOCK_PROCESS_CPUTIME_ID) - c0;
	}
	double step = bench_median(tw, nnew), cpu = bench_median(tc, nnew), bound = wbytes / (bw * 1e9);
	printf("nseq=%d new=%d threads=%d weight_mb=%.1f bandwidth_gbs=%.2f step_s=%.5f step_cpu_s=%.5f "
	       "tokens_per_s=%.2f bound_step_s=%.5f of_bound=%.3f fixed_ms=%.3f\n",
	       nseq, nnew, omp_get_max_threads(), wbytes / 1048576, bw, step, cpu, nseq / step, bound,
	       bound / step, (step - bound) * 1e3);
	free(tw), free(tc);
	sw_decoder_free(d);
	sw_model_free(m);
	return 0;
}
