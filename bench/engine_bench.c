/*
 * engine_bench.c - the engine's side of bench/bench_engine.sh: one
 * measurement per run (so each run's peak RSS is its own), printed as one
 * line of KEY=VALUE pairs for the script to put beside PyTorch's.
 *
 *   engine_bench train STEPS [DIR]  fwd + bwd + AdamW of the GPT-2-small-size Llama, 4 x 256 tokens
 *                                 (DIR: engine_torch.py's weights and tokens, for the loss check)
 *   engine_bench sgemm            the CPU backend's GEMM rate ($SW_GEMM's provider) on the step's largest shapes
 *   engine_bench bandwidth        memory read bandwidth (a 1 GiB sum, all threads)
 *   engine_bench fma              the threads' f32 multiply-add peak (FMAs from registers only):
 *                                 what no f32 product on this machine can beat
 *   engine_bench decode NSEQ NEW  greedy decoding of NSEQ sequences, NEW tokens each; where the
 *                                 host can read the device's memory, also the weights' own read
 *                                 bandwidth before the steps and after (weights_gbs: the higher)
 *   engine_bench load-generate DIR NEW   load a model directory, decode NEW tokens greedily
 *
 * The model: hidden 768, 12 layers, 12 heads, intermediate 2048, vocab
 * 32000, tied embeddings (109.5M parameters), random normal(0, 0.02)
 * weights; threads from $SW_THREADS, else every core; models on the
 * backend $SW_DEVICE names ("cpu" when unset; "guard" to time the seam's
 * proof).
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "compute/backend.h" /* the CPU backend's GEMM provider: this bench links libsw.a */
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "bench_stats.h"

static const sw_backend *be_; /* from $SW_DEVICE */

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the whole process (every thread): less at the mercy of
 * other processes on a shared machine than the wall clock. */
static double cpu_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_mb_(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss / 1024;
}

static sw_model_config cfg_(void)
{
	sw_model_config c;
	memset(&c, 0, sizeof c);
	strcpy(c.model_type, "llama");
	c.vocab_size = 32000;
	c.hidden_size = 768;
	c.intermediate_size = 2048;
	c.num_hidden_layers = 12;
	c.num_attention_heads = 12;
	c.num_key_value_heads = 12;
	c.head_dim = 64;
	c.max_position_embeddings = 1024;
	c.rms_norm_eps = 1e-5f;
	c.rope_theta = 10000;
	c.tie_word_embeddings = true;
	c.bos_token_id = -1;
	return c;
}

static void die_(const char *what, const sw_error *e)
{
	fprintf(stderr, "engine_bench: %s: %s\n", what, e->msg);
	exit(1);
}

static uint64_t rng_ = 12345;
static int32_t tok_(int V)
{
	rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
	return (int32_t)((rng_ >> 33) % (uint64_t)V);
}

/*
 * dir NULL: random weights and tokens of our own.  Else the model and the
 * tokens engine_torch.py wrote there (config.json, model.safetensors,
 * tokens.i32), so that the first step's loss and gradient norm can be put
 * beside PyTorch's.
 */
static int train_(int steps, const char *dir)
{
	sw_model_config c = cfg_();
	sw_error err = { 0 };
	sw_model *m = dir ? sw_model_load_on(be_, dir, &err) : sw_model_new_on(be_, &c, &err);
	if (m)
		c = m->cfg;
	sw_model *g = m ? sw_model_new_on(be_, &c, &err) : NULL;
	/* AdamW's moments: zeroed arenas on the same backend */
	sw_model *mo = g ? sw_model_new_on(be_, &c, &err) : NULL, *vo = mo ? sw_model_new_on(be_, &c, &err) : NULL;
	if (!vo)
		die_("model", &err);
	if (!dir)
		sw_model_init_random(m, 1, 0.02f);
	float *mm = mo->arena, *vv = vo->arena;
	enum { NSEQ = 4, LEN = 256, T = NSEQ * LEN };
	int32_t *tok = malloc(sizeof(int32_t) * T), cu[NSEQ + 1];
	for (int i = 0; i < T; i++)
		tok[i] = tok_(c.vocab_size);
	if (dir) {
		char path[4096];
		snprintf(path, sizeof path, "%s/tokens.i32", dir);
		FILE *f = fopen(path, "rb");
		if (!f || fread(tok, sizeof(int32_t), T, f) != (size_t)T) {
			fprintf(stderr, "engine_bench: cannot read %d tokens from '%s'\n", T, path);
			exit(1);
		}
		fclose(f);
	}
	for (int s = 0; s <= NSEQ; s++)
		cu[s] = s * LEN;
	sw_batch b = { NSEQ, tok, cu, NULL, NULL };
	sw_engine *e = sw_engine_new(m, &err);
	sw_adamw_config oc = sw_adamw_defaults(1e-4f);
	oc.max_grad_norm = 1.0f;
	double *t = malloc(sizeof(double) * (size_t)(steps + 1)), loss = 0, loss0 = 0, gnorm0 = 0;
	sw_adamw_stats st;
	double *ct = malloc(sizeof(double) * (size_t)(steps + 1));
	for (int i = 0; i <= steps; i++) { /* step 0 warms up: first touch of every buffer */
		double t0 = now_(), c0 = cpu_();
		if (sw_model_zero(g, &err) || sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss, NULL, &err) ||
		    sw_adamw_step(&oc, m, g, mm, vv, i, &st, &err))
			die_("train step", &err);
		if (i == 0) /* before any update: what PyTorch's first step has too */
			loss0 = loss, gnorm0 = st.grad_norm;
		t[i] = now_() - t0;
		ct[i] = cpu_() - c0;
	}
	/* Model FLOPs of the step: every linear layer 2 (forward) + 4
	 * (backward) per weight and token, and causal attention's two
	 * products likewise over the L(L+1)/2 query-key pairs. */
	double D = c.hidden_size, In = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
	double lin = L * (4 * D * D + 3 * D * In) + V * D;
	double att = L * NSEQ * (LEN * (LEN + 1) / 2.0) * D * 2;
	double flops = 6 * lin * T + 3 * 2 * att;
	double med = bench_median(t + 1, steps);
	/* 16 bytes per parameter (weights, gradients, m, v) and the activations the engine keeps. */
	double KD = D, QD = D, H = c.num_attention_heads;
	double acts = T * (L * (5 * D + 2 * QD + 2 * KD + 3 * In + H + 2) + 2 * D + V + 3) +
	              T * (2 * D + 2 * QD + 3 * KD + 3 * In);
	double bound_mb = (16.0 * m->nparams + 4 * acts) / 1048576;
	double cmed = bench_median(ct + 1, steps);
	printf("params=%zu tokens=%d step_s=%.4f cpu_s=%.4f tokens_per_s=%.1f gflop=%.1f gflops=%.2f loss=%.4f loss0=%.7f gnorm0=%.7f rss_mb=%ld bound_mb=%.0f gemm=%s\n",
	       m->nparams, T, med, cmed, T / med, flops / 1e9, flops / med / 1e9, loss, loss0, gnorm0,
	       rss_mb_(), bound_mb, sw_backend_cpu_gemm_kernels());
	sw_engine_free(e);
	sw_model_free(m), sw_model_free(g), sw_model_free(mo), sw_model_free(vo);
	free(tok), free(t), free(ct);
	return 0;
}

static int sgemm_(void)
{
	/* The step's big products: tokens x hidden -> intermediate, and the vocabulary head. */
	int shapes[][3] = { { 1024, 2048, 768 }, { 1024, 768, 2048 }, { 1024, 32000, 768 } };
	double best = 0, sum_f = 0, sum_t = 0;
	for (int s = 0; s < 3; s++) {
		int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
		float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K),
		      *C = malloc(sizeof(float) * (size_t)M * N);
		for (size_t i = 0; i < (size_t)M * K; i++)
			A[i] = (float)(i % 7) * 0.1f;
		for (size_t i = 0; i < (size_t)N * K; i++)
			B[i] = (float)(i % 5) * 0.1f;
		double t[5];
		for (int r = 0; r < 6; r++) {
			double t0 = now_();
			sw_backend_cpu()->gemm(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);
			if (r)
				t[r - 1] = now_() - t0;
		}
		double med = bench_median(t, 5), f = 2.0 * M * N * K;
		best = fmax(best, f / med);
		sum_f += f, sum_t += med;
		free(A), free(B), free(C);
	}
	printf("sgemm_gflops=%.2f sgemm_best_gflops=%.2f gemm=%s\n", sum_f / sum_t / 1e9, best / 1e9,
	       sw_backend_cpu_gemm_kernels());
	return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* Four independent 256-bit accumulators: the loads, not the adds, set the
 * pace.  pf: each cache line is also asked for 4 KiB ahead (as
 * linear_rows.c's decoding kernel does; the hardware prefetcher alone did
 * not reach the memory's rate on every machine).  The address is made as
 * an integer: a prefetch past the array is dropped by the CPU. */
__attribute__((target("avx2"))) static uint64_t sum_avx2_(const uint64_t *x, size_t n, int pf)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 16 <= n; i += 16) {
		if (pf) {
			uintptr_t ahead = (uintptr_t)(x + i) + 4096;
			_mm_prefetch((const char *)ahead, _MM_HINT_T0);
			_mm_prefetch((const char *)(ahead + 64), _MM_HINT_T0);
		}
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(x + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(x + i + 4)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(x + i + 8)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(x + i + 12)));
	}
	uint64_t o[4];
	_mm256_storeu_si256((__m256i *)o, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
	return o[0] + o[1] + o[2] + o[3];
}
static int avx2_(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}
#else
static uint64_t sum_avx2_(const uint64_t *x, size_t n, int pf)
{
	(void)x, (void)n, (void)pf;
	return 0;
}
static int avx2_(void)
{
	return 0;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
/* n rounds of 16 independent 512-bit multiply-adds (lanes 16), or of 12
 * 256-bit ones without AVX-512 (lanes 8): enough chains in flight to keep
 * two FMA units busy through their latency; no memory operand (the chains
 * unrolled, so that they stay in registers). */
#define FMA_CHAINS_(T, ZERO, SET1, FMADD, ADD, n, accs)                                              \
	do {                                                                                           \
		T a_[accs], x_ = SET1(1.0000001f), y_ = SET1(0.9999999f);                              \
		for (int j_ = 0; j_ < accs; j_++)                                                      \
			a_[j_] = ZERO();                                                               \
		for (long i_ = 0; i_ < (n); i_++)                                                      \
			_Pragma("GCC unroll 16") for (int j_ = 0; j_ < accs; j_++)                     \
				a_[j_] = FMADD(a_[j_], x_, y_);                                        \
		for (int j_ = 1; j_ < accs; j_++)                                                      \
			a_[0] = ADD(a_[0], a_[j_]);                                                    \
		float o_[sizeof(T) / 4];                                                               \
		memcpy(o_, &a_[0], sizeof o_);                                                         \
		sink = o_[0];                                                                          \
	} while (0)
__attribute__((target("avx512f"))) static float fma512_(long n)
{
	float sink;
	FMA_CHAINS_(__m512, _mm512_setzero_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, n, 16);
	return sink;
}
__attribute__((target("avx2,fma"))) static float fma256_(long n)
{
	float sink;
	FMA_CHAINS_(__m256, _mm256_setzero_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, n, 12);
	return sink;
}
#endif

/* The f32 multiply-add peak of the threads, all at once: 6 rounds of 2^24
 * steps of the chains above on every thread, the first a warm-up; the
 * median round.  GFLOP/s counts a multiply-add as 2. */
static int fma_(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	int w512 = __builtin_cpu_supports("avx512f"), w256 = __builtin_cpu_supports("avx2") &&
	                                                     __builtin_cpu_supports("fma");
	if (!w512 && !w256) {
		fprintf(stderr, "engine_bench fma: needs AVX2 and FMA or AVX-512\n");
		return 1;
	}
	long n = 1L << 24;
	int threads = 1;
	double t[5];
	volatile float sink = 0;
	for (int r = 0; r < 6; r++) {
		double t0 = now_();
#pragma omp parallel reduction(+ : sink)
		{
#pragma omp single
			threads = omp_get_num_threads();
			sink += w512 ? fma512_(n) : fma256_(n);
		}
		if (r)
			t[r - 1] = now_() - t0;
	}
	double flops = 2.0 * (double)n * (w512 ? 16 * 16 : 12 * 8) * threads;
	printf("fma_gflops=%.2f threads=%d isa=%s check=%g\n", flops / bench_median(t, 5) / 1e9, threads,
	       w512 ? "avx512f" : "avx2+fma", (double)sink);
	return 0;
#else
	fprintf(stderr, "engine_bench fma: x86-64 only\n");
	return 1;
#endif
}

/* Words that may be any object's bytes (a model's floats read as words). */
typedef uint64_t __attribute__((may_alias)) word_;

/* One pass of the sum over x[0..n) on every thread: its seconds (the sum
 * added to *keep, so that it is not left out).  wide: the AVX2 loop (pf:
 * with software prefetch; its vector loads may read any type), else the
 * plain one. */
static double pass_(const word_ *x, size_t n, int wide, int pf, uint64_t *keep)
{
	double t0 = now_();
	uint64_t acc = 0;
	if (wide) {
#pragma omp parallel reduction(+ : acc)
		{
			int nt = omp_get_num_threads(), me = omp_get_thread_num();
			size_t chunk = (n / nt) & ~(size_t)15;
			size_t len = me == nt - 1 ? n - chunk * me : chunk;
			acc += sum_avx2_((const uint64_t *)(x + chunk * me), len, pf);
		}
	} else {
#pragma omp parallel for reduction(+ : acc)
		for (size_t i = 0; i < n; i++)
			acc += x[i];
	}
	*keep += acc;
	return now_() - t0;
}

/* The read bandwidth of memory already written (a model's weights), GB/s:
 * the median of 5 passes after one, the wide sum with prefetch where AVX2
 * is there. */
static double read_gbs_(const void *p, size_t bytes)
{
	const word_ *x = p;
	size_t n = bytes / sizeof *x;
	int wide = avx2_();
	double t[5];
	uint64_t keep = 0;
	for (int r = 0; r < 6; r++) {
		double s = pass_(x, n, wide, wide, &keep);
		if (r)
			t[r - 1] = s;
	}
	return keep == 1 ? 0 : n * sizeof *x / bench_median(t, 5) / 1e9;
}

/* Read bandwidth: a 1 GiB sum over every thread, STREAM-like.  With AVX2,
 * two loops taking turns, five passes each after one to warm up: the wide
 * sum and the same with software prefetch; the better median is the
 * figure (bandwidth_gbs), and both are printed.  Without AVX2, the plain
 * loop's median. */
static int bandwidth_(void)
{
	size_t n = (size_t)1 << 27; /* 1 GiB of uint64 */
	uint64_t *x = malloc(n * sizeof *x);
	if (!x)
		return 1;
#pragma omp parallel for
	for (size_t i = 0; i < n; i++)
		x[i] = i;
	double t[2][5];
	uint64_t s = 0;
	int wide = avx2_(), kinds = wide ? 2 : 1;
	for (int r = 0; r < 6; r++)
		for (int pf = 0; pf < kinds; pf++) {
			double sec = pass_(x, n, wide, pf, &s);
			if (r)
				t[pf][r - 1] = sec;
		}
	double gbs[2] = { 0, 0 };
	for (int pf = 0; pf < kinds; pf++)
		gbs[pf] = n * sizeof *x / bench_median(t[pf], 5) / 1e9;
	printf("bandwidth_gbs=%.2f plain_gbs=%.2f", gbs[1] > gbs[0] ? gbs[1] : gbs[0], gbs[0]);
	if (kinds == 2) /* without AVX2 only the plain loop ran */
		printf(" prefetch_gbs=%.2f", gbs[1]);
	printf(" check=%llu\n", (unsigned long long)(s & 0xff));
	free(x);
	return 0;
}

static int decode_(int nseq, int nnew)
{
	sw_model_config c = cfg_();
	sw_error err = { 0 };
	sw_model *m = sw_model_new_on(be_, &c, &err);
	if (!m)
		die_("model", &err);
	sw_model_init_random(m, 1, 0.02f);
	/* the weights' own memory read, before the steps and after (where the
	 * host can read it): the bound one sequence is judged against */
	const void *w = be_->host_view(m->arena);
	size_t wbytes = m->nparams * sizeof(float);
	double bw0 = w ? read_gbs_(w, wbytes) : 0;
	int plen = 16;
	sw_decoder *d = sw_decoder_new(m, nseq, (int64_t)nseq * (plen + nnew), &err);
	if (!d)
		die_("decoder", &err);
	for (int s = 0; s < nseq; s++) {
		int32_t p[16];
		for (int i = 0; i < plen; i++)
			p[i] = tok_(c.vocab_size);
		if (sw_decoder_add(d, p, plen, &err) < 0)
			die_("add", &err);
	}
	int nout;
	const int *ids;
	const float *lg;
	double tp = now_();
	if (sw_decoder_step(d, &nout, &ids, &lg, &err))
		die_("prefill", &err);
	tp = now_() - tp;
	double *t = malloc(sizeof(double) * (size_t)nnew), total = tp;
	int V = c.vocab_size;
	for (int k = 0; k < nnew; k++) {
		double t0 = now_();
		for (int j = 0; j < nout; j++) {
			const float *z = lg + (size_t)j * V;
			int32_t b = 0;
			for (int v = 1; v < V; v++)
				if (z[v] > z[b])
					b = v;
			sw_decoder_append(d, ids[j], &b, 1, &err);
		}
		if (sw_decoder_step(d, &nout, &ids, &lg, &err))
			die_("step", &err);
		t[k] = now_() - t0;
		total += t[k];
	}
	double med = bench_median(t, nnew);
	double kv_mb = (double)c.num_hidden_layers * 2 * nseq * (plen + nnew) * c.hidden_size * 4 / 1048576;
	/* tokens_per_s as generate() is timed: prefill and every step, over the new tokens. */
	printf("nseq=%d new=%d step_s=%.5f step_tokens_per_s=%.2f tokens_per_s=%.2f prefill_s=%.4f weight_mb=%.0f kv_mb=%.1f rss_mb=%ld",
	       nseq, nnew, med, nseq / med, nseq * nnew / total, tp, m->nparams * 4.0 / 1048576, kv_mb, rss_mb_());
	if (w) {
		double bw1 = read_gbs_(w, wbytes);
		printf(" weights_gbs=%.2f weights_before_gbs=%.2f weights_after_gbs=%.2f", bw0 > bw1 ? bw0 : bw1, bw0,
		       bw1);
	}
	printf("\n");
	free(t);
	sw_decoder_free(d);
	sw_model_free(m);
	return 0;
}

/* A model directory loaded as it is (f32, f16 or bf16), then greedy decoding. */
static int load_generate_(const char *dir, int nnew)
{
	sw_error err = { 0 };
	double t0 = now_();
	sw_model *m = sw_model_load_on(be_, dir, &err);
	if (!m)
		die_("load", &err);
	double tl = now_() - t0;
	int V = m->cfg.vocab_size, plen = 16, ok = 1;
	sw_decoder *d = sw_decoder_new(m, 1, plen + nnew, &err);
	if (!d)
		die_("decoder", &err);
	int32_t p[16];
	for (int i = 0; i < plen; i++)
		p[i] = tok_(V);
	int id = sw_decoder_add(d, p, plen, &err), nout;
	const int *ids;
	const float *lg;
	t0 = now_();
	for (int k = 0; k < nnew; k++) {
		if (sw_decoder_step(d, &nout, &ids, &lg, &err))
			die_("step", &err);
		int32_t b = 0;
		for (int v = 0; v < V; v++) {
			ok &= isfinite(lg[v]);
			if (lg[v] > lg[b])
				b = v;
		}
		if (k + 1 < nnew && sw_decoder_append(d, id, &b, 1, &err))
			die_("append", &err);
	}
	double tg = now_() - t0;
	printf("params=%zu load_s=%.2f new=%d tokens_per_s=%.2f finite=%d rss_mb=%ld\n", m->nparams, tl,
	       nnew, nnew / tg, ok, rss_mb_());
	sw_decoder_free(d);
	sw_model_free(m);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	sw_error err = { 0 };
	if (!(be_ = sw_backend_get(getenv("SW_DEVICE"), &err)))
		die_("SW_DEVICE", &err);
	const char *th = getenv("SW_THREADS");
	sw_engine_threads(th ? atoi(th) : 0);
	if (argc >= 3 && !strcmp(argv[1], "train"))
		return train_(atoi(argv[2]), argc >= 4 ? argv[3] : NULL);
	if (argc >= 2 && !strcmp(argv[1], "sgemm"))
		return sgemm_();
	if (argc >= 2 && !strcmp(argv[1], "bandwidth"))
		return bandwidth_();
	if (argc >= 2 && !strcmp(argv[1], "fma"))
		return fma_();
	if (argc >= 4 && !strcmp(argv[1], "decode"))
		return decode_(atoi(argv[2]), atoi(argv[3]));
	if (argc >= 4 && !strcmp(argv[1], "load-generate"))
		return load_generate_(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: engine_bench train STEPS | sgemm | bandwidth | fma | decode NSEQ NEW | "
	                "load-generate DIR NEW\n");
	return 2;
}
