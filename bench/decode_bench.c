/*
 * decode_bench.c - bench/bench_decode.sh's driver: greedy decoding of a model
 * directory beside the machine's memory bandwidth, measured in the same
 * process by reading the weights' own memory, before the steps and after.
 *
 *   decode_bench DIR NSEQ NEW    NSEQ sequences (16-token prompts), NEW tokens each
 *   decode_bench attn NSEQ KEYS  the CPU backend's paged attention alone: one decoding
 *                                query of each of NSEQ sequences against KEYS keys
 *   decode_bench rows M N K      the CPU backend's batch-invariant product (linear_rows)
 *                                alone: C[M,N] = A[M,K] W[N,K]^T
 *
 * One line of KEY=VALUE pairs: the weights' MiB, the read bandwidth (GB/s,
 * median of 5 passes over the weights' memory, every thread; the higher of
 * the reading before the steps and the one after, both printed; probe=buffer
 * where the device's memory is not the host's and a buffer of the weights'
 * size is read instead), the median decode step (wall and CPU
 * seconds), tokens/s of the steps, and for one sequence the bound a step
 * cannot beat (reading every weight once: weights / bandwidth) and what
 * the step spends beyond it (the fixed cost of a token).  Threads from
 * $SW_THREADS, else every core.
 *
 * $SW_BENCH_ROW_PF (l1 or l2; unset: the CPU's default) chooses the cache
 * level the CPU's one-row product asks for W ahead into
 * (sw_backend_cpu_row_prefetch); the line says which ran (row_prefetch=l1,
 * l2; none where no kernel asks; fixed where the libsw linked has no
 * choice, as before 2026-12-07).
 *
 * The device is $SW_DEVICE's (the CPU by default); with $SW_PROFILE=FILE
 * the table of its ops (backend.h's sw_backend_prof) is appended to FILE:
 * the time of each product inside the decoder, by shape.
 *
 * attn: one layer of the 110M model's attention (12 heads of 64, no
 * grouping), pages of 16 keys placed at random in the pool (laid out as
 * the decoder's cache: a page's keys, then its values), random keys,
 * values and queries; the median of 50 calls of the op (a layer's call),
 * after 5 unmeasured: attn nseq=N keys=K layer_ms=MEDIAN.
 *
 * rows: GFLOP/s of linear_rows with W in cache (one W, 50 calls after 5)
 * and with W from memory (calls over copies of W filling 512 MiB at least,
 * each read once a pass, as the decoder reads a layer's weights once a
 * step; 5 passes after 1), medians: rows m=M n=N k=K cached_gflops=G
 * streamed_gflops=G row_prefetch=L.
 */
#define _DEFAULT_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/rng.h"
#include "compute/backend.h"
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"

/* A value in [-0.5, 0.5) from the library's splitmix64 stream *s. */
static float rnd_(uint64_t *s)
{
	return (float)((sw_splitmix64(s) >> 40) & 0xffff) / 65536.0f - 0.5f;
}

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

/* Read bandwidth of x[0..n) (STREAM-like: every thread sums its share),
 * median of 5 timed passes after one. */
static double read_gbs_(const float *x, size_t n)
{
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
	return keep == -1 ? 0 : (double)n * sizeof(float) / bench_median(t, 5) / 1e9;
}

/* A buffer of n floats, written (what is read where the device's memory
 * is not the host's). */
static float *buffer_(size_t n)
{
	float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
	if (x) {
#pragma omp parallel for schedule(static)
		for (size_t i = 0; i < n; i++)
			x[i] = (float)(i & 255);
	}
	return x;
}

static void die_(const char *what, const sw_error *e)
{
	fprintf(stderr, "decode_bench: %s: %s\n", what, e->msg);
	exit(1);
}

/* The decoding attention op alone (see the top). */
static int attn_(int nseq, int keys)
{
	enum { H = 12, KVH = 12, HD = 64, PG = 16, CALLS = 50, WARM = 5 };
	const sw_backend *be = sw_backend_cpu();
	int per = (keys + PG - 1) / PG, npages = nseq * per;
	/* laid out as the decoder's cache (one layer): a page's K then its V,
	 * each [KVH][PG][HD], in the backend's memory (huge pages where the
	 * system gives them) */
	size_t run = (size_t)PG * KVH * HD, pool = (size_t)npages * 2 * run;
	float *k = be->alloc(pool * sizeof *k, NULL), *v = k ? k + run : NULL;
	float *q = malloc(sizeof(float) * nseq * H * HD), *out = malloc(sizeof(float) * nseq * H * HD);
	float *scratch = malloc(be->attn_paged_scratch(keys) * sizeof(float));
	int32_t *pages = malloc(sizeof(int32_t) * npages), *off = malloc(sizeof(int32_t) * nseq),
		*nk = malloc(sizeof(int32_t) * nseq);
	double *t = malloc(sizeof(double) * CALLS);
	if (!k || !v || !q || !out || !scratch || !pages || !off || !nk || !t) {
		fprintf(stderr, "decode_bench: out of memory\n");
		return 1;
	}
	uint64_t r = 777;
	for (size_t i = 0; i < pool; i++)
		k[i] = rnd_(&r);
	for (int i = 0; i < nseq * H * HD; i++)
		q[i] = rnd_(&r);
	for (int i = 0; i < npages; i++)
		pages[i] = i;
	for (int i = npages - 1; i > 0; i--) { /* the pages shuffled, as a cache's are */
		int j = (int)(sw_splitmix64(&r) % (uint64_t)(i + 1)), x = pages[i];
		pages[i] = pages[j], pages[j] = x;
	}
	for (int s = 0; s < nseq; s++)
		off[s] = s * per, nk[s] = keys;
	sw_kv_view kv = { k, v, PG, pages, off, nk, 2 * run };
	for (int c = 0; c < WARM + CALLS; c++) {
		double t0 = now_(CLOCK_MONOTONIC);
		be->attn_paged(out, q, nseq, H, KVH, HD, &kv, scratch);
		if (c >= WARM)
			t[c - WARM] = now_(CLOCK_MONOTONIC) - t0;
	}
	printf("attn nseq=%d keys=%d layer_ms=%.4f\n", nseq, keys, bench_median(t, CALLS) * 1e3);
	be->free(k);
	free(q), free(out), free(scratch), free(pages), free(off), free(nk), free(t);
	return 0;
}

/* bytes rounded up to whole cache lines (aligned_alloc's size) */
static size_t lines_(size_t bytes)
{
	return (bytes + 63) & ~(size_t)63;
}

static int rows_(int M, int N, int K, const char *pf)
{
	enum { CALLS = 50, WARM = 5, PASSES = 5 };
	const sw_backend *be = sw_backend_cpu();
	size_t wn = (size_t)N * K;
	int nw = (int)((512u << 20) / (wn * sizeof(float))) + 1;
	/* on cache lines, as the decoder's weights and buffers are (malloc's,
	 * 16 bytes off one, split every load: bench/RESULTS.md, "lines") */
	float *A = aligned_alloc(64, lines_(sizeof(float) * (size_t)M * K)),
	      *C = aligned_alloc(64, lines_(sizeof(float) * (size_t)M * N));
	float **W = calloc((size_t)nw, sizeof *W);
	double *t = malloc(sizeof(double) * CALLS);
	int ok = A && C && W && t;
	for (int i = 0; ok && i < nw; i++)
		ok = (W[i] = aligned_alloc(64, lines_(sizeof(float) * wn))) != NULL;
	if (!ok) {
		fprintf(stderr, "decode_bench: out of memory\n");
		return 1;
	}
	uint64_t r = 777;
	for (size_t i = 0; i < (size_t)M * K; i++)
		A[i] = rnd_(&r);
	for (int w = 0; w < nw; w++)
		for (size_t i = 0; i < wn; i++)
			W[w][i] = rnd_(&r);
	double flop = 2.0 * M * N * K;
	for (int c = 0; c < WARM + CALLS; c++) {
		double t0 = now_(CLOCK_MONOTONIC);
		be->linear_rows(C, A, W[0], M, N, K, 0);
		if (c >= WARM)
			t[c - WARM] = now_(CLOCK_MONOTONIC) - t0;
	}
	double cached = flop / bench_median(t, CALLS) / 1e9;
	for (int p = 0; p <= PASSES; p++) {
		double t0 = now_(CLOCK_MONOTONIC);
		for (int w = 0; w < nw; w++)
			be->linear_rows(C, A, W[w], M, N, K, 0);
		if (p > 0)
			t[p - 1] = (now_(CLOCK_MONOTONIC) - t0) / nw;
	}
	printf("rows m=%d n=%d k=%d cached_gflops=%.1f streamed_gflops=%.1f row_prefetch=%s\n", M, N, K, cached,
	       flop / bench_median(t, PASSES) / 1e9, pf);
	for (int w = 0; w < nw; w++)
		free(W[w]);
	free(W), free(A), free(C), free(t);
	return 0;
}

/* Declared here and weak: bench_decode.sh's BEFORE builds this driver
 * against older trees' libsw, which had one level (L1 where the AVX-512
 * kernel ran) and no such function. */
int sw_backend_cpu_row_prefetch(int level);
#pragma weak sw_backend_cpu_row_prefetch

/* The one-row product's prefetch level from $SW_BENCH_ROW_PF, as the output names it. */
static const char *row_pf_(void)
{
	const char *v = getenv("SW_BENCH_ROW_PF");
	int want = !v || !*v ? -1 : !strcmp(v, "l1") ? 1 : !strcmp(v, "l2") ? 2 : 0;
	if (!want || (want > 0 && !sw_backend_cpu_row_prefetch)) {
		fprintf(stderr, "decode_bench: SW_BENCH_ROW_PF='%s': %s\n", v,
		        want ? "this libsw has no choice of level" : "l1 or l2");
		exit(2);
	}
	if (!sw_backend_cpu_row_prefetch)
		return "fixed";
	int got = sw_backend_cpu_row_prefetch(want);
	return got == 1 ? "l1" : got == 2 ? "l2" : "none";
}

int main(int argc, char **argv)
{
	const char *pf = row_pf_();
	if (argc == 4 && !strcmp(argv[1], "attn")) {
		if (atoi(argv[2]) < 1 || atoi(argv[3]) < 1 || atoi(argv[2]) > 4096 || atoi(argv[3]) > 1 << 20) {
			fprintf(stderr, "decode_bench: attn NSEQ KEYS: 1 to 4096 sequences, 1 to 2^20 keys\n");
			return 2;
		}
		const char *th = getenv("SW_THREADS");
		sw_engine_threads(th ? atoi(th) : 0);
		return attn_(atoi(argv[2]), atoi(argv[3]));
	}
	if (argc == 5 && !strcmp(argv[1], "rows")) {
		int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
		if (M < 1 || N < 1 || K < 1 || M > 4096 || N > 1 << 20 || K > 1 << 16 ||
		    (double)N * K > (double)(1 << 28)) {
			fprintf(stderr, "decode_bench: rows M N K: M 1 to 4096, K 1 to 65536, N * K up to 2^28\n");
			return 2;
		}
		const char *th = getenv("SW_THREADS");
		sw_engine_threads(th ? atoi(th) : 0);
		return rows_(M, N, K, pf);
	}
	if (argc != 4) {
		fprintf(stderr, "usage: decode_bench DIR NSEQ NEW | attn NSEQ KEYS | rows M N K\n");
		return 2;
	}
	int nseq = atoi(argv[2]), nnew = atoi(argv[3]), plen = 16;
	const char *th = getenv("SW_THREADS");
	sw_engine_threads(th ? atoi(th) : 0);
	sw_error err = { 0 };
	/* the device by $SW_DEVICE (cpu), so that $SW_PROFILE's table can say where a step goes */
	const sw_backend *be = sw_backend_get(getenv("SW_DEVICE"), &err);
	sw_model *m = be ? sw_model_load_on(be, argv[1], &err) : NULL;
	if (!m)
		die_("load", &err);
	int V = m->cfg.vocab_size;
	double wbytes = (double)m->nparams * sizeof(float);
	/* The bound's bandwidth: the weights' own memory read (where the host
	 * can read it), before the steps and again after them, the higher of
	 * the two: this VM's bandwidth moves from minute to minute, and a
	 * buffer of fresh pages read at another moment moved the bound more
	 * than the steps moved. */
	const float *w = be->host_view(m->arena);
	float *own = w ? NULL : buffer_(m->nparams);
	const float *x = w ? w : own;
	double bw0 = x ? read_gbs_(x, m->nparams) : 0;
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
	double bw1 = x ? read_gbs_(x, m->nparams) : 0, bw = bw0 > bw1 ? bw0 : bw1;
	free(own);
	double step = bench_median(tw, nnew), cpu = bench_median(tc, nnew), bound = wbytes / (bw * 1e9);
	printf("nseq=%d new=%d threads=%d weight_mb=%.1f bandwidth_gbs=%.2f bandwidth_before_gbs=%.2f "
	       "bandwidth_after_gbs=%.2f probe=%s step_s=%.5f step_cpu_s=%.5f tokens_per_s=%.2f "
	       "bound_step_s=%.5f of_bound=%.3f fixed_ms=%.3f row_prefetch=%s\n",
	       nseq, nnew, omp_get_max_threads(), wbytes / 1048576, bw, bw0, bw1, w ? "weights" : "buffer",
	       step, cpu, nseq / step, bound, bound / step, (step - bound) * 1e3, pf);
	free(tw), free(tc);
	sw_decoder_free(d);
	sw_model_free(m);
	return 0;
}
