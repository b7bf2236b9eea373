/*
 * gemm_bench.c - the GEMM providers of the CPU backend side by side, on the
 * training step's shapes and on decoding's few rows (bench/bench_gemm.sh
 * puts PyTorch's matmul beside them and the ratios to the best).
 *
 *   gemm_bench REPS PROVIDER...
 *
 * One line of KEY=VALUE pairs per shape and provider:
 *   provider=NAME shape=MxNxK op=NT|NN|TN gflops=MEDIAN what=WORDS
 * each provider's first preceded by one saying which kernels it runs
 * (kernels provider=NAME threads=N what=WORDS).
 * Providers:
 *   onednn         the backend's default (sw_gemm: oneDNN's dnnl_sgemm, its
 *                  matmul primitive for A B^T from 64 rows)
 *   onednn-sgemm   oneDNN's dnnl_sgemm alone (the backend before the
 *                  primitive took A B^T)
 *   openblas       the backend's other choice (sw_gemm: OpenBLAS, its
 *                  kernels fixed up, blocks over OpenMP's threads)
 *   onednn-bf16    the backend's bf16 products (sw_gemm_matmul "bf16": the
 *                  operands rounded to bf16 into scratch, oneDNN's matmul
 *                  primitive, f32 sums and output); the conversion is timed
 *                  with the product, as the trainer pays it
 *   onednn-bf16-kept  oneDNN's bf16 matmul with its operands converted
 *                  before the clock, B in the blocked layout its kernels
 *                  choose (as torch-bf16's operands are converted before
 *                  its clock): the rate a bf16 copy of the weights kept
 *                  between products would approach where B is a weight
 *                  (the forward and dx shapes); not a backend provider
 *   openblas-asis  cblas_sgemm as the distribution's OpenBLAS comes, on its
 *                  own threads (what a program linking it gets); not in the
 *                  same run as openblas, whose fix-up changes the process's
 *                  OpenBLAS kernels for good
 * Shapes: $SW_BENCH_SHAPES: "110m" (the default) Llama 110M's step at 1024
 * tokens and decoding's rows; "smol" SmolLM2-135M's step at 256 tokens (a
 * micro batch of bench_grpo.sh's train stage), the head at 341 rows (the
 * logits budget's chunk); "rows" SmolLM2-135M's forward and dx products at
 * the row counts of a GRPO step's micro batches (not multiples of 64).
 * $SW_BENCH_LABEL, when set, follows each provider's name after an '@'
 * (bench_gemm.sh's BEFORE= tells two builds' figures apart so).
 * Threads: $SW_THREADS, else every core.  Each figure is the median of
 * REPS timed calls, the providers taking turns.
 */
#define _DEFAULT_SOURCE
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compute/cpu/gemm.h"

typedef struct shape_ {
	int ta, tb, M, N, K;
	const char *what;
} shape_;

/* The step of Llama 110M (hidden 768, intermediate 2048, vocab 32000, 1024
 * tokens): each Linear's forward (x W^T), its backward to the input (dy W)
 * and to the weight (dy^T x); then decoding's few rows against W^T. */
static const shape_ llama110m_[] = {
	{ 0, 1, 1024, 768, 768, "fwd q/k/v/o" },
	{ 0, 1, 1024, 2048, 768, "fwd gate/up" },
	{ 0, 1, 1024, 768, 2048, "fwd down" },
	{ 0, 1, 1024, 32000, 768, "fwd lm_head" },
	{ 0, 0, 1024, 768, 768, "bwd dx q/k/v/o" },
	{ 0, 0, 1024, 768, 2048, "bwd dx gate/up" },
	{ 0, 0, 1024, 2048, 768, "bwd dx down" },
	{ 0, 0, 1024, 768, 32000, "bwd dx lm_head" },
	{ 1, 0, 768, 768, 1024, "bwd dW q/k/v/o" },
	{ 1, 0, 2048, 768, 1024, "bwd dW gate/up" },
	{ 1, 0, 768, 2048, 1024, "bwd dW down" },
	{ 1, 0, 32000, 768, 1024, "bwd dW lm_head" },
	{ 0, 1, 1, 2048, 768, "decode" },
	{ 0, 1, 4, 2048, 768, "decode" },
	{ 0, 1, 8, 2048, 768, "decode" },
	{ 0, 1, 16, 2048, 768, "decode" },
	{ 0, 1, 32, 2048, 768, "decode" },
	{ 0, 1, 1, 32000, 768, "decode" },
	{ 0, 1, 8, 32000, 768, "decode" },
	{ 0, 1, 32, 32000, 768, "decode" },
};

/* SmolLM2-135M (hidden 576, 9 heads of 64, 3 KV heads, intermediate 1536,
 * vocab 49152) at 256 tokens, the head at 341 rows. */
static const shape_ smol_[] = {
	{ 0, 1, 256, 576, 576, "fwd q/o" },
	{ 0, 1, 256, 192, 576, "fwd k/v" },
	{ 0, 1, 256, 1536, 576, "fwd gate/up" },
	{ 0, 1, 256, 576, 1536, "fwd down" },
	{ 0, 1, 341, 49152, 576, "fwd lm_head" },
	{ 0, 0, 256, 576, 576, "bwd dx q/o" },
	{ 0, 0, 256, 576, 192, "bwd dx k/v" },
	{ 0, 0, 256, 576, 1536, "bwd dx gate/up" },
	{ 0, 0, 256, 1536, 576, "bwd dx down" },
	{ 0, 0, 341, 576, 49152, "bwd dx lm_head" },
	{ 1, 0, 576, 576, 256, "bwd dW q/o" },
	{ 1, 0, 192, 576, 256, "bwd dW k/v" },
	{ 1, 0, 1536, 576, 256, "bwd dW gate/up" },
	{ 1, 0, 576, 1536, 256, "bwd dW down" },
	{ 1, 0, 49152, 576, 341, "bwd dW lm_head" },
};

/* SmolLM2-135M's products at the row counts of a GRPO step's micro batches
 * (bench_profile.sh's samples: 375, 424, 425 and 440 rows, the reference's
 * whole batch at 4558, the head's chunks at 342): the row counts, not
 * powers of two, at which oneDNN 2.6.3's AMX kernels ran some products 4-9x
 * slower (bench/RESULTS.md "pad"). */
static const shape_ rows_[] = {
	{ 0, 1, 375, 1536, 576, "fwd gate/up" },  { 0, 1, 375, 576, 1536, "fwd down" },
	{ 0, 0, 375, 576, 1536, "bwd dx gate/up" }, { 0, 0, 375, 1536, 576, "bwd dx down" },
	{ 0, 1, 424, 1536, 576, "fwd gate/up" },  { 0, 1, 424, 576, 1536, "fwd down" },
	{ 0, 0, 424, 576, 1536, "bwd dx gate/up" }, { 0, 0, 424, 1536, 576, "bwd dx down" },
	{ 0, 1, 425, 1536, 576, "fwd gate/up" },  { 0, 1, 425, 576, 1536, "fwd down" },
	{ 0, 0, 425, 576, 1536, "bwd dx gate/up" }, { 0, 0, 425, 1536, 576, "bwd dx down" },
	{ 0, 1, 440, 1536, 576, "fwd gate/up" },  { 0, 1, 440, 576, 1536, "fwd down" },
	{ 0, 0, 440, 576, 1536, "bwd dx gate/up" }, { 0, 0, 440, 1536, 576, "bwd dx down" },
	{ 0, 1, 4558, 576, 576, "ref fwd q/o" },   { 0, 1, 4558, 1536, 576, "ref fwd gate/up" },
	{ 0, 1, 4558, 576, 1536, "ref fwd down" }, { 0, 1, 342, 49152, 576, "fwd lm_head" },
	{ 0, 0, 342, 576, 49152, "bwd dx lm_head" },
};

static const shape_ *shapes_ = llama110m_;
static int NSHAPES = (int)(sizeof llama110m_ / sizeof llama110m_[0]);

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static float *mat_(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof *p);
	if (!p) {
		fprintf(stderr, "gemm_bench: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (float)((seed >> 9) & 1023) / 1024.0f - 0.5f;
	}
	return p;
}

/* onednn-bf16-kept's product for one shape: its primitive and operands, made before the clock. */
typedef struct kept_ {
	dnnl_engine_t eng;
	dnnl_stream_t st;
	dnnl_primitive_t p;
	dnnl_memory_t a, b, c;
} kept_;

/* A provider to time: g, or NULL for cblas_sgemm on OpenBLAS's own threads. */
typedef struct prov_ {
	const char *name;
	char shown[96]; /* name, or name@$SW_BENCH_LABEL */
	sw_gemm g;
	int own;
	int kept; /* onednn-bf16-kept: k is the product */
	kept_ k;
} prov_;

static void dnnl_ok_(dnnl_status_t s, const char *what)
{
	if (s != dnnl_success) {
		fprintf(stderr, "gemm_bench: onednn-bf16-kept: %s failed (status %d)\n", what, (int)s);
		exit(1);
	}
}

/* The bf16 product of s made for k: A rounded to bf16 (plain, op(A) as given), B rounded and
 * laid out as the kernels want it (a oneDNN reorder), C f32; all before the clock. */
static void kept_make_(kept_ *k, const shape_ *s, const float *A, const float *B)
{
	int M = s->M, N = s->N, K = s->K;
	dnnl_memory_desc_t a, w, wf, c;
	dnnl_dims_t da = { M, K }, dw = { K, N }, dc = { M, N };
	dnnl_dims_t sa = { s->ta ? 1 : K, s->ta ? M : 1 }, sw = { s->tb ? 1 : N, s->tb ? K : 1 };
	dnnl_dims_t sc = { N, 1 };
	dnnl_matmul_desc_t md;
	dnnl_primitive_desc_t pd, rpd;
	dnnl_primitive_t r;
	dnnl_memory_t mf;
	dnnl_ok_(dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa), "src");
	dnnl_ok_(dnnl_memory_desc_init_by_tag(&w, 2, dw, dnnl_bf16, dnnl_format_tag_any), "weights");
	dnnl_ok_(dnnl_memory_desc_init_by_strides(&wf, 2, dw, dnnl_f32, sw), "f32 weights");
	dnnl_ok_(dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc), "dst");
	dnnl_ok_(dnnl_matmul_desc_init(&md, &a, &w, NULL, &c), "matmul");
	dnnl_ok_(dnnl_primitive_desc_create(&pd, &md, NULL, k->eng, NULL), "matmul descriptor");
	dnnl_ok_(dnnl_primitive_create(&k->p, pd), "matmul primitive");
	const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	dnnl_ok_(dnnl_memory_create(&k->a, &a, k->eng, DNNL_MEMORY_ALLOCATE), "src memory");
	dnnl_ok_(dnnl_memory_create(&k->b, wq, k->eng, DNNL_MEMORY_ALLOCATE), "weights memory");
	dnnl_ok_(dnnl_memory_create(&k->c, &c, k->eng, DNNL_MEMORY_ALLOCATE), "dst memory");
	void *ah;
	dnnl_ok_(dnnl_memory_get_data_handle(k->a, &ah), "src handle");
	sw_bf16_from_f32(ah, A, (size_t)M * K);
	dnnl_ok_(dnnl_memory_create(&mf, &wf, k->eng, (void *)B), "f32 weights memory");
	dnnl_ok_(dnnl_reorder_primitive_desc_create(&rpd, &wf, k->eng, wq, k->eng, NULL), "reorder");
	dnnl_ok_(dnnl_primitive_create(&r, rpd), "reorder primitive");
	dnnl_exec_arg_t ra[2] = { { DNNL_ARG_FROM, mf }, { DNNL_ARG_TO, k->b } };
	dnnl_ok_(dnnl_primitive_execute(r, k->st, 2, ra), "reorder");
	dnnl_ok_(dnnl_stream_wait(k->st), "stream");
	dnnl_primitive_destroy(r), dnnl_primitive_desc_destroy(rpd), dnnl_memory_destroy(mf);
	dnnl_primitive_desc_destroy(pd);
}

static void kept_free_(kept_ *k)
{
	dnnl_primitive_destroy(k->p);
	dnnl_memory_destroy(k->a), dnnl_memory_destroy(k->b), dnnl_memory_destroy(k->c);
	k->p = NULL, k->a = k->b = k->c = NULL;
}

/* One product of p on s (timed over a batch of calls when small, so that
 * the clock's resolution does not show); the seconds a call. */
static double once_(const prov_ *p, const shape_ *s, const float *A, const float *B, float *C)
{
	int M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K, ldb = s->tb ? K : N;
	double flop = 2.0 * M * N * K;
	int inner = flop < 1e8 ? (int)(1e8 / flop) : 1;
	double t0 = now_();
	dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, p->k.a }, { DNNL_ARG_WEIGHTS, p->k.b },
		                    { DNNL_ARG_DST, p->k.c } };
	for (int i = 0; i < inner; i++) {
		if (p->kept) {
			dnnl_ok_(dnnl_primitive_execute(p->k.p, p->k.st, 3, args), "matmul");
			dnnl_ok_(dnnl_stream_wait(p->k.st), "stream");
		} else if (!p->own) {
			sw_error e;
			if (sw_gemm_run(&p->g, s->ta, s->tb, M, N, K, 1, A, lda, B, ldb, 0, C, N, &e)) {
				fprintf(stderr, "gemm_bench: %s: %s\n", p->name, e.msg);
				exit(1);
			}
		} else
			cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
			            s->tb ? CblasTrans : CblasNoTrans, M, N, K, 1, A, lda, B, ldb, 0, C, N);
	}
	return (now_() - t0) / inner;
}

/*
 * Each shape: one warm-up call of every provider, then reps rounds that
 * call each provider once in turn, so that the load of a shared machine
 * falls on all of them alike; the median GFLOP/s of each.
 */
static void run_(prov_ *pv, int np, int reps)
{
	double *t = malloc(sizeof(double) * (size_t)reps * np);
	for (int i = 0; i < NSHAPES; i++) {
		const shape_ *s = &shapes_[i];
		int M = s->M, N = s->N, K = s->K;
		float *A = mat_((size_t)M * K, 1), *B = mat_((size_t)N * K, 2);
		float *C = mat_((size_t)M * N, 3);
		for (int p = 0; p < np; p++)
			if (pv[p].kept)
				kept_make_(&pv[p].k, s, A, B);
		for (int p = 0; p < np; p++)
			once_(&pv[p], s, A, B, C);
		for (int r = 0; r < reps; r++)
			for (int p = 0; p < np; p++) {
				/* OpenBLAS's own threads only while it runs: they would spin against OpenMP's. */
				openblas_set_num_threads(pv[p].own ? omp_get_max_threads() : 1);
				t[p * reps + r] = once_(&pv[p], s, A, B, C);
			}
		for (int p = 0; p < np; p++) {
			double *tp = t + p * reps;
			qsort(tp, (size_t)reps, sizeof *tp, cmp_);
			double med = reps % 2 ? tp[reps / 2] : 0.5 * (tp[reps / 2 - 1] + tp[reps / 2]);
			printf("provider=%s shape=%dx%dx%d op=%s%s gflops=%.2f what=%s\n", pv[p].shown, M, N,
			       K, s->ta ? "T" : "N", s->tb ? "T" : "N", 2.0 * M * N * K / med / 1e9, s->what);
		}
		fflush(stdout);
		for (int p = 0; p < np; p++)
			if (pv[p].kept)
				kept_free_(&pv[p].k);
		free(A), free(B), free(C);
	}
	free(t);
}

int main(int argc, char **argv)
{
	int reps = argc > 2 ? atoi(argv[1]) : 0;
	if (reps < 1) {
		fprintf(stderr, "usage: gemm_bench REPS PROVIDER...\n");
		return 2;
	}
	const char *set = getenv("SW_BENCH_SHAPES");
	if (set && !strcmp(set, "smol")) {
		shapes_ = smol_;
		NSHAPES = (int)(sizeof smol_ / sizeof smol_[0]);
	} else if (set && !strcmp(set, "rows")) {
		shapes_ = rows_;
		NSHAPES = (int)(sizeof rows_ / sizeof rows_[0]);
	} else if (set && *set && strcmp(set, "110m")) {
		fprintf(stderr, "gemm_bench: unknown SW_BENCH_SHAPES '%s' (known: 110m, smol, rows)\n", set);
		return 2;
	}
	const char *label = getenv("SW_BENCH_LABEL");
	if (label && !*label)
		label = NULL;
	const char *th = getenv("SW_THREADS");
	int nt = th && atoi(th) > 0 ? atoi(th) : omp_get_num_procs();
	omp_set_num_threads(nt);
	int np = argc - 2;
	prov_ *pv = calloc((size_t)np, sizeof *pv);
	/* The corename before any provider is set up: the distribution's choice. */
	const char *asis = openblas_get_corename();
	for (int p = 0; p < np; p++) {
		sw_error err = { 0 };
		pv[p].name = argv[p + 2];
		snprintf(pv[p].shown, sizeof pv[p].shown, "%s%s%s", pv[p].name, label ? "@" : "", label ? label : "");
		pv[p].own = !strcmp(pv[p].name, "openblas-asis");
		if ((pv[p].kept = !strcmp(pv[p].name, "onednn-bf16-kept"))) {
			if (!sw_bf16_simd()) {
				fprintf(stderr, "gemm_bench: onednn-bf16-kept needs a CPU with bf16 dot products\n");
				return 1;
			}
			dnnl_ok_(dnnl_engine_create(&pv[p].k.eng, dnnl_cpu, 0), "engine");
			dnnl_ok_(dnnl_stream_create(&pv[p].k.st, pv[p].k.eng, dnnl_stream_default_flags), "stream");
			continue;
		}
		int bf16 = !strcmp(pv[p].name, "onednn-bf16"), sg = !strcmp(pv[p].name, "onednn-sgemm");
		if (!pv[p].own && (sw_gemm_init(&pv[p].g, bf16 || sg ? "onednn" : pv[p].name, &err) ||
		                   (bf16 && sw_gemm_matmul(&pv[p].g, "bf16", &err)))) {
			fprintf(stderr, "gemm_bench: %s\n", err.msg);
			return 1;
		}
		if (sg) { /* dnnl_sgemm for every product */
			sw_gemm_prim_free(pv[p].g.nt);
			pv[p].g.nt = NULL;
			snprintf(pv[p].g.kernels, sizeof pv[p].g.kernels, "onednn dnnl_sgemm alone");
		}
	}
	for (int p = 0; p < np; p++)
		if (pv[p].kept)
			printf("kernels provider=%s threads=%d what=onednn %d.%d.%d %s, bf16 matmul, operands "
			       "converted and B blocked before the clock\n",
			       pv[p].shown, nt, dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch,
			       sw_dnnl_isa_name(dnnl_get_effective_cpu_isa()));
		else if (!pv[p].g.bf16)
			printf("kernels provider=%s threads=%d what=%s\n", pv[p].shown, nt,
			       pv[p].own ? asis : pv[p].g.kernels);
	int own = 0, fixed = 0;
	for (int p = 0; p < np; p++)
		own |= pv[p].own, fixed |= !pv[p].own && pv[p].g.kind == SW_GEMM_OPENBLAS;
	if (own && fixed) {
		fprintf(stderr, "gemm_bench: openblas-asis and openblas in one run: the fix-up of one "
		                "changes the other's kernels\n");
		return 2;
	}
	run_(pv, np, reps);
	/* bf16's kernel is the one oneDNN chose for the products (known once they ran); a product
	 * under 64^3 multiply-adds stays f32 (gemm.h). */
	for (int p = 0; p < np; p++) {
		char name[96];
		const sw_error *e = sw_gemm_error(&pv[p].g);
		if (e) {
			fprintf(stderr, "gemm_bench: %s\n", e->msg);
			return 1;
		}
		if (pv[p].g.bf16)
			printf("kernels provider=%s threads=%d what=%s, %s\n", pv[p].shown, nt, pv[p].g.kernels,
			       sw_gemm_matmul_name(&pv[p].g, name, sizeof name));
		if (pv[p].kept) {
			dnnl_stream_destroy(pv[p].k.st);
			dnnl_engine_destroy(pv[p].k.eng);
		}
		sw_gemm_release(&pv[p].g);
	}
	free(pv);
	return 0;
}
