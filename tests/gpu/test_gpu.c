/*
 * test_gpu.c - the CUDA backend against the CPU backend, the reference (as
 * llm.c's dev/cuda and ggml's test-backend-ops check each kernel): every op
 * from the same inputs on both, compared with a tolerance stated per op
 * (|gpu - cpu| <= atol + rtol |cpu| for every element, the largest errors
 * printed); the GPU's own promises (batch invariance, the same bits every
 * run); and a whole model: the engine's forward, backward and AdamW step,
 * greedy decoding token for token, and the rollout's log-probs against
 * the trainer's forward on the GPU.
 *
 * Where the CUDA backend cannot be had (no GPU, no driver, built without
 * CUDA) every check is a TAP skip with the reason, so make test counts them
 * skipped; SW_GPU_REQUIRED=1 (make test-gpu) makes that a failure.
 * SW_GPU_DEVICE names the device (default "cuda").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compute/backend.h"
#include "compute/cpu/gemm.h"
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "tap.h"
#include "tiny_model.h"

static const sw_backend *cpu_, *gpu_;

/* ---- inputs and comparison ---- */

static void fill_(float *x, size_t n, uint64_t seed, float lo, float hi)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = lo + (hi - lo) * (float)((double)(s >> 11) / 9007199254740992.0);
	}
}

static void *up_(const sw_backend *be, const void *h, size_t bytes)
{
	sw_error err = { 0 };
	void *d = be->alloc(bytes, &err);
	if (d && be->upload(d, h, bytes, &err)) {
		be->free(d);
		d = NULL;
	}
	if (!d)
		printf("# %s: %s\n", be->name, err.msg);
	return d;
}

static void down_(const sw_backend *be, void *h, const void *d, size_t bytes)
{
	sw_error err = { 0 };
	if (!d || be->download(h, d, bytes, &err)) {
		memset(h, 0xff, bytes); /* NaN: the comparison fails */
		printf("# %s: download failed: %s\n", be->name, err.msg);
	}
}

/* Every element within atol + rtol |ref|; the largest errors printed on a
 * line the device check collects ("# tol NAME ..."). */
static void close_(const char *name, const float *got, const float *ref, size_t n, double atol,
                   double rtol)
{
	double maxabs = 0, maxrel = 0;
	size_t bad = 0, worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		if (!(d <= atol + rtol * fabs(ref[i]))) /* a NaN is out too */
			worst = bad++ ? worst : i;
		if (d > maxabs || d != d)
			maxabs = d;
		if (fabs(ref[i]) > 1e-30 && d / fabs(ref[i]) > maxrel)
			maxrel = d / fabs(ref[i]);
	}
	printf("# tol %s: n %zu max_abs %.3g max_rel %.3g (atol %.1g rtol %.1g) %s\n", name, n, maxabs,
	       maxrel, atol, rtol, bad ? "FAIL" : "PASS");
	ok(bad == 0, "%s: gpu = cpu within %.1g + %.1g |cpu| (%zu elements, max abs err %.3g)", name,
	   atol, rtol, n, maxabs);
	if (bad)
		printf("#   %zu elements out; first at %zu: gpu %.9g cpu %.9g\n", bad, worst,
		       (double)got[worst], (double)ref[worst]);
}

/* The parameters after two AdamW steps of learning rate ADAMW_LR with one
 * gradient g (clipped by gs).  Each step moves an element by
 * lr g / (|g| + eps): a gradient error d moves it by lr eps d / (gs g^2)
 * more.  So where the gradient check lets g differ by d = GRAD_ATOL +
 * GRAD_RTOL |g|, the parameters may differ by 2 lr eps d / (gs g^2) on top
 * of 1e-5 + 1e-4 |p|, and by at most 2 lr a step (a sign flipped).  The
 * elements left at that cap (a gradient near zero: nothing but its sign
 * decides) are held to 1% of the model.  A gradient of exactly 0 (the
 * embedding rows of tokens not in the batch) moves nothing: tight. */
#define GRAD_ATOL 1e-4
#define GRAD_RTOL 1e-3
#define ADAMW_LR 1e-2
#define ADAMW_CLIP 0.5
static void close_adamw_(const char *name, const float *got, const float *ref, const float *grad,
                         size_t n, double gnorm)
{
	double eps = sw_adamw_defaults((float)ADAMW_LR).eps, cap = 2 * 2 * ADAMW_LR;
	double gs = gnorm > ADAMW_CLIP ? ADAMW_CLIP / (gnorm + 1e-6) : 1;
	double maxabs = 0, maxcap = 0;
	size_t bad = 0, worst = 0, capped = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]), g = fabs(grad[i]), extra = 0;
		if (g > 0) {
			extra = 2 * ADAMW_LR * eps * (GRAD_ATOL + GRAD_RTOL * g) / (gs * g * g);
			if (extra >= cap)
				extra = cap, capped++, maxcap = d > maxcap ? d : maxcap;
		}
		if (!(d <= 1e-5 + 1e-4 * fabs(ref[i]) + extra))
			worst = bad++ ? worst : i;
		if (extra < cap && (d > maxabs || d != d))
			maxabs = d;
	}
	printf("# tol %s: n %zu max_abs %.3g (atol 1e-05 rtol 0.0001 + what the gradient's tolerance "
	       "allows); %zu elements with a gradient too small for its sign to be sure, max_abs %.3g "
	       "(atol %.2g) %s\n",
	       name, n, maxabs, capped, maxcap, cap, bad ? "FAIL" : "PASS");
	ok(bad == 0 && capped <= n / 100,
	   "%s: gpu = cpu within 1e-05 + 0.0001 |cpu| + what the gradient's tolerance allows "
	   "(%zu elements, max abs err %.3g), within %.2g where it allows any sign (%zu, at most 1%%)",
	   name, n - capped, maxabs, cap, capped);
	if (bad)
		printf("#   %zu elements out; first at %zu: gpu %.9g cpu %.9g, gradient %.3g\n", bad, worst,
		       (double)got[worst], (double)ref[worst], (double)grad[worst]);
}

/* ---- each op: run(be, out) computes from fixed inputs into host out ---- */

typedef void (*op_fn)(const sw_backend *be, float *out);

static void compare_(const char *name, op_fn run, size_t nout, double atol, double rtol)
{
	float *a = calloc(nout, sizeof(float)), *b = calloc(nout, sizeof(float));
	sw_error err = { 0 };
	run(cpu_, a);
	run(gpu_, b);
	int rc = gpu_->sync(&err);
	if (rc)
		printf("# %s: gpu sync: %s\n", name, err.msg);
	if (rc)
		memset(b, 0xff, nout * sizeof(float));
	close_(name, b, a, nout, atol, rtol);
	free(a), free(b);
}

enum { T = 37, D = 300, V = 1001, H = 4, KVH = 2, HD = 64, FF = 96 };

#define RUN_IN_(n, seed, lo, hi)                                                  \
	float *in = malloc(sizeof(float) * (n));                                  \
	fill_(in, (n), (seed), (lo), (hi));                                       \
	float *x = up_(be, in, sizeof(float) * (n));                              \
	free(in)

static void op_gemm_(const sw_backend *be, float *out, int ta, int tb)
{
	int M = 67, N = 45, K = 129;
	RUN_IN_((size_t)M * K + (size_t)K * N + (size_t)M * N, 1, -1, 1);
	float *A = x, *B = x + M * K, *C = B + K * N;
	be->gemm(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 0.25f, C, N);
	down_(be, out, C, sizeof(float) * M * N);
	be->free(x);
}
static void op_gemm_nn_(const sw_backend *be, float *out) { op_gemm_(be, out, 0, 0); }
static void op_gemm_nt_(const sw_backend *be, float *out) { op_gemm_(be, out, 0, 1); }
static void op_gemm_tn_(const sw_backend *be, float *out) { op_gemm_(be, out, 1, 0); }

static void op_linear_(const sw_backend *be, float *out, int K)
{
	int M = 19, N = 77;
	RUN_IN_((size_t)M * K + (size_t)N * K + (size_t)M * N, 2, -1, 1);
	float *A = x, *W = x + M * K, *C = W + N * K;
	be->linear_rows(C, A, W, M, N, K, 0.5f);
	down_(be, out, C, sizeof(float) * M * N);
	be->free(x);
}
static void op_linear_896_(const sw_backend *be, float *out) { op_linear_(be, out, 896); }
static void op_linear_301_(const sw_backend *be, float *out) { op_linear_(be, out, 301); }
/* K cut among 4 and 8 warps on the GPU (a decoding step's down projection) */
static void op_linear_1100_(const sw_backend *be, float *out) { op_linear_(be, out, 1100); }
static void op_linear_4864_(const sw_backend *be, float *out) { op_linear_(be, out, 4864); }

static void op_rows_(const sw_backend *be, float *out)
{
	RUN_IN_((size_t)50 * D, 3, -2, 2);
	int32_t r[T];
	for (int i = 0; i < T; i++)
		r[i] = (i * 13 + 5) % 50;
	int32_t *dr = up_(be, r, sizeof r);
	float *o = be->alloc(sizeof(float) * T * D, NULL);
	be->rows_gather(o, x, dr, T, D);
	down_(be, out, o, sizeof(float) * T * D);
	be->free(x), be->free(dr), be->free(o);
}

static void op_embed_bwd_(const sw_backend *be, float *out)
{
	RUN_IN_((size_t)50 * D + (size_t)T * D, 4, -1, 1);
	int32_t tok[T];
	for (int i = 0; i < T; i++)
		tok[i] = (i * 7) % 11; /* repeats */
	int32_t *dt = up_(be, tok, sizeof tok);
	be->embed_bwd(x, x + 50 * D, dt, T, D);
	down_(be, out, x, sizeof(float) * 50 * D);
	be->free(x), be->free(dt);
}

static void op_kv_write_(const sw_backend *be, float *out)
{
	enum { NP = 6, PG = 4, KD = 40, NR = 9 }; /* 5 heads of 8 */
	float zero[NP * PG * KD * 2] = { 0 };
	float *pool = up_(be, zero, sizeof zero);
	RUN_IN_((size_t)NR * KD * 2, 5, -1, 1);
	int32_t idx[6 + NR + NR];
	int32_t ptab[] = { 3, 1, 5, 0, 2, 4 };
	memcpy(idx, ptab, sizeof ptab);
	for (int j = 0; j < NR; j++)
		idx[6 + j] = j < 5 ? 0 : 3, idx[6 + NR + j] = j < 5 ? j * 2 : j - 5;
	int32_t *di = up_(be, idx, sizeof idx);
	be->kv_write(pool, pool + NP * PG * KD, x, x + NR * KD, NR, KD, 8, PG, (size_t)PG * KD, di, di + 6,
	             di + 6 + NR);
	down_(be, out, pool, sizeof zero);
	be->free(pool), be->free(x), be->free(di);
}

static void op_rmsnorm_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * D;
	RUN_IN_(3 * n + 2 * D, 6, -2, 2);
	float *y = be->alloc(sizeof(float) * (n + T), NULL);
	float *w = x + 3 * n, *dw = w + D;
	be->rmsnorm_fwd(y, y + n, x, w, T, D, 1e-6f);
	be->rmsnorm_bwd(x + n, dw, x + 2 * n, x, w, y + n, T, D);
	down_(be, out, y, sizeof(float) * (n + T));
	down_(be, out + n + T, x + n, sizeof(float) * n);
	down_(be, out + 2 * n + T, dw, sizeof(float) * D);
	be->free(x), be->free(y);
}

static void op_layernorm_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * D;
	RUN_IN_(3 * n + 4 * D, 8, -2, 2);
	float *w = x + 3 * n, *b = w + D, *dw = b + D, *db = dw + D;
	float *y = be->alloc(sizeof(float) * (n + 2 * T), NULL);
	be->layernorm_fwd(y, y + n, y + n + T, x, w, b, T, D, 1e-5f);
	be->layernorm_bwd(x + n, dw, db, x + 2 * n, x, w, y + n, y + n + T, T, D);
	down_(be, out, y, sizeof(float) * (n + 2 * T));
	down_(be, out + n + 2 * T, x + n, sizeof(float) * n);
	down_(be, out + 2 * n + 2 * T, dw, sizeof(float) * 2 * D);
	be->free(x), be->free(y);
}

static void op_act_(const sw_backend *be, float *out)
{
	size_t n = 5000;
	RUN_IN_(2 * n, 9, -6, 6);
	float *y = be->alloc(sizeof(float) * 8 * n, NULL);
	for (int a = 0; a < 4; a++) {
		be->act_fwd(y + 2 * a * n, x, n, a);
		be->act_bwd(y + (2 * a + 1) * n, x + n, x, n, a);
	}
	down_(be, out, y, sizeof(float) * 8 * n);
	be->free(x), be->free(y);
}

static void op_rope_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * H * HD;
	RUN_IN_(n + HD / 2, 10, -1, 1);
	float inv[HD / 2];
	for (int i = 0; i < HD / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * i / HD);
	int32_t pos[T];
	for (int t = 0; t < T; t++)
		pos[t] = t * 37 % 500;
	float *di = up_(be, inv, sizeof inv);
	int32_t *dp = up_(be, pos, sizeof pos);
	be->rope(x, dp, T, H, HD, di, 0);
	down_(be, out, x, sizeof(float) * n);
	be->rope(x, dp, T, H, HD, di, 1);
	down_(be, out + n, x, sizeof(float) * n);
	be->free(x), be->free(di), be->free(dp);
}

/* Attention over 3 packed sequences (lengths 17, 1, 19), forward and backward. */
static void op_attn_(const sw_backend *be, float *out, int causal)
{
	size_t nq = (size_t)T * H * HD, nk = (size_t)T * KVH * HD;
	RUN_IN_(nq * 2 + nk * 2, 11 + causal, -1, 1);
	float *q = x, *dout = x + nq, *k = dout + nq, *v = k + nk;
	int32_t cu[] = { 0, 17, 18, T };
	int32_t *dcu = up_(be, cu, sizeof cu);
	float *sc = be->alloc(sizeof(float) * be->attn_scratch(19), NULL);
	float *o = be->alloc(sizeof(float) * (nq * 2 + nk * 2 + (size_t)T * H), NULL);
	float *lse = o + nq, *dq = lse + (size_t)T * H, *dk = dq + nq, *dv = dk + nk;
	be->attn_fwd(o, lse, q, k, v, dcu, 3, H, KVH, HD, causal, sc);
	be->attn_bwd(dq, dk, dv, dout, o, lse, q, k, v, dcu, 3, H, KVH, HD, causal, sc);
	down_(be, out, o, sizeof(float) * (nq * 2 + nk * 2 + (size_t)T * H));
	be->free(x), be->free(dcu), be->free(sc), be->free(o);
}
static void op_attn_causal_(const sw_backend *be, float *out) { op_attn_(be, out, 1); }
static void op_attn_full_(const sw_backend *be, float *out) { op_attn_(be, out, 0); }

/* The same 3 sequences, the second and third continuing the first (a shared
 * prompt and two responses): their queries see its 17 keys, then their own;
 * its dk and dv gather the three sequences' terms. */
static void op_attn_prefix_(const sw_backend *be, float *out, int causal)
{
	size_t nq = (size_t)T * H * HD, nk = (size_t)T * KVH * HD;
	RUN_IN_(nq * 2 + nk * 2, 14 + causal, -1, 1);
	float *q = x, *dout = x + nq, *k = dout + nq, *v = k + nk;
	int32_t cu[] = { 0, 17, 18, T, /* prefix */ -1, 0, 0 };
	int32_t *dcu = up_(be, cu, sizeof cu);
	float *sc = be->alloc(sizeof(float) * be->attn_scratch(17 + 19), NULL);
	float *o = be->alloc(sizeof(float) * (nq * 2 + nk * 2 + (size_t)T * H), NULL);
	float *lse = o + nq, *dq = lse + (size_t)T * H, *dk = dq + nq, *dv = dk + nk;
	be->attn_prefix_fwd(o, lse, q, k, v, dcu, dcu + 4, 3, H, KVH, HD, causal, sc);
	be->attn_prefix_bwd(dq, dk, dv, dout, o, lse, q, k, v, dcu, dcu + 4, 3, H, KVH, HD, causal, sc);
	down_(be, out, o, sizeof(float) * (nq * 2 + nk * 2 + (size_t)T * H));
	be->free(x), be->free(dcu), be->free(sc), be->free(o);
}
static void op_attn_prefix_causal_(const sw_backend *be, float *out) { op_attn_prefix_(be, out, 1); }
static void op_attn_prefix_full_(const sw_backend *be, float *out) { op_attn_prefix_(be, out, 0); }

/* Paged decoding attention: 5 queries over pages of 4, shared pages too;
 * the last sees 45 keys (the GPU's kernel takes them 32 at a time). */
enum { PQ = 5, PPG = 4, PNP = 12 };
static const int32_t pidx_[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, /* pages */
	                         0, 3, 0, 6, 0, /* page_off */ 11, 1, 9, 22, 45 /* nkeys */ };

/* Queries q0 .. q0+n-1 of the PQ, each with the page table idx gives its row. */
static void paged_(const sw_backend *be, float *out, const int32_t *idx, int n, int q0)
{
	size_t pool = (size_t)PNP * PPG * KVH * HD;
	RUN_IN_(2 * pool + (size_t)PQ * H * HD, 13, -1, 1);
	int32_t *di = up_(be, idx, sizeof(int32_t) * (12 + 2 * PQ));
	sw_kv_view kv = { x, x + pool, PPG, di, di + 12, di + 12 + PQ, (size_t)PPG * KVH * HD };
	float *o = be->alloc(sizeof(float) * PQ * H * HD, NULL);
	float *sc = be->alloc(sizeof(float) * be->attn_paged_scratch(45), NULL);
	be->attn_paged(o, x + 2 * pool + (size_t)q0 * H * HD, n, H, KVH, HD, &kv, sc);
	down_(be, out, o, sizeof(float) * n * H * HD);
	be->free(x), be->free(di), be->free(o), be->free(sc);
}
static void op_paged_(const sw_backend *be, float *out) { paged_(be, out, pidx_, PQ, 0); }

static void op_swiglu_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * FF;
	RUN_IN_(3 * n, 14, -5, 5);
	float *y = be->alloc(sizeof(float) * 3 * n, NULL);
	be->swiglu_fwd(y, x, x + n, n);
	be->swiglu_bwd(y + n, y + 2 * n, x + 2 * n, x, x + n, n);
	down_(be, out, y, sizeof(float) * 3 * n);
	be->free(x), be->free(y);
}

static void op_add_bias_scale_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * D;
	RUN_IN_(2 * n + 2 * D, 15, -1, 1);
	float *b = x + 2 * n, *db = b + D;
	be->add(x, x + n, n);
	be->bias_fwd(x, b, T, D);
	be->bias_bwd(db, x + n, T, D);
	be->scale(x, 0.75f, n);
	down_(be, out, x, sizeof(float) * n);
	down_(be, out + n, db, sizeof(float) * D);
	be->free(x);
}

static void op_logprob_(const sw_backend *be, float *out)
{
	size_t n = (size_t)T * V;
	RUN_IN_(n + 2 * T, 16, -8, 8);
	int32_t tgt[T];
	for (int t = 0; t < T; t++)
		tgt[t] = t % 5 == 4 ? -1 : (t * 97) % V;
	int32_t *dt = up_(be, tgt, sizeof tgt);
	float *y = be->alloc(sizeof(float) * 3 * T, NULL);
	float *dlp = x + n, *dent = dlp + T;
	be->logprob_fwd(y, y + T, y + 2 * T, x, dt, T, V);
	be->logprob_bwd(x, y + 2 * T, y + T, dlp, dent, dt, T, V);
	down_(be, out, y, sizeof(float) * 3 * T);
	down_(be, out + 3 * T, x, sizeof(float) * n);
	be->free(x), be->free(dt), be->free(y);
}

static void op_adamw_(const sw_backend *be, float *out)
{
	size_t n = 10007;
	RUN_IN_(4 * n, 17, -1, 1);
	float *p = x, *g = x + n, *m = g + n, *v = m + n;
	be->scale(v, 0.0f, n); /* v >= 0 */
	be->adamw(p, g, 0.5f, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f);
	be->adamw(p, g, 1.0f, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f);
	down_(be, out, x, sizeof(float) * 3 * n);
	be->free(x);
}

static void op_sumsq_(const sw_backend *be, float *out)
{
	size_t n = 1000003;
	RUN_IN_(n, 18, -1, 1);
	out[0] = (float)be->sumsq(x, n);
	out[1] = (float)be->sumsq(x + 5, 17);
	be->free(x);
}

static void op_nonfinite_(const sw_backend *be, float *out)
{
	RUN_IN_((size_t)40 * 33, 19, -1, 1);
	out[0] = (float)be->first_nonfinite(x, 40, 33);
	float nan = NAN;
	sw_error err = { 0 };
	be->upload(x + 29 * 33 + 32, &nan, sizeof nan, &err);
	be->upload(x + 35 * 33, &nan, sizeof nan, &err);
	out[1] = (float)be->first_nonfinite(x, 40, 33);
	be->free(x);
	/* Rows longer than a block's slice: an Inf in row 3's last column,
	 * a NaN at row 5's first. */
	{
		RUN_IN_((size_t)7 * 9001, 23, -1, 1);
		float inf = INFINITY;
		be->upload(x + 3 * 9001 + 9000, &inf, sizeof inf, &err);
		be->upload(x + 5 * 9001, &nan, sizeof nan, &err);
		out[2] = (float)be->first_nonfinite(x, 7, 9001);
		be->free(x);
	}
}

/*
 * argmax of rows: the CPU has no such op, so its side is the scan the engine
 * and the sampler make on the host (the first of equals, NaN never taken,
 * column 0 kept when it is NaN).  Rows: random; a tie (the first wins);
 * NaN at column 0; NaNs elsewhere, one where the largest would be; all
 * -inf; the largest last.
 */
static void op_argmax_(const sw_backend *be, float *out)
{
	enum { R = 6, C = 3001 };
	float *h = malloc(sizeof(float) * R * C);
	fill_(h, (size_t)R * C, 21, -4, 4);
	h[1 * C + 100] = h[1 * C + 2900] = 9;
	h[2 * C + 0] = NAN;
	for (int k = 7; k < C; k += 97)
		h[3 * C + k] = NAN;
	h[3 * C + 7] = NAN, h[3 * C + 8] = 5;
	for (int k = 0; k < C; k++)
		h[4 * C + k] = -INFINITY;
	h[5 * C + C - 1] = 10;
	if (!be->argmax) {
		for (int r = 0; r < R; r++) {
			int best = 0;
			for (int k = 1; k < C; k++)
				if (h[r * C + k] > h[r * C + best])
					best = k;
			out[r] = (float)best;
		}
		free(h);
		return;
	}
	float *x = up_(be, h, sizeof(float) * R * C);
	int32_t *d = be->alloc(sizeof(int32_t) * R, NULL), got[R];
	be->argmax(d, x, R, C);
	down_(be, got, d, sizeof got);
	for (int r = 0; r < R; r++)
		out[r] = (float)got[r];
	be->free(d), be->free(x);
	free(h);
}

/* ---- the GPU's own promises ---- */

/* Each row's bits are the same alone as among others (linear_rows, attn_paged). */
static void test_batch_invariance_(void)
{
	/* K: its dot products cut among 2, 8 and 1 warps (lr_split_) */
	static const int Ks[] = { 896, 4864, 301 };
	int M = 33, N = 130, same = 1;
	for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
		int K = Ks[ki];
		size_t na = (size_t)M * K, nw = (size_t)N * K;
		float *h = malloc(sizeof(float) * (na + nw)), *all = malloc(sizeof(float) * M * N),
		      *one = malloc(sizeof(float) * N);
		fill_(h, na + nw, 20, -1, 1);
		float *x = up_(gpu_, h, sizeof(float) * (na + nw)),
		      *c = gpu_->alloc(sizeof(float) * M * N, NULL);
		gpu_->linear_rows(c, x, x + na, M, N, K, 0);
		down_(gpu_, all, c, sizeof(float) * M * N);
		for (int r = 0; r < M; r += 8) {
			gpu_->linear_rows(c, x + (size_t)r * K, x + na, 1, N, K, 0);
			down_(gpu_, one, c, sizeof(float) * N);
			same &= !memcmp(one, all + (size_t)r * N, sizeof(float) * N);
		}
		gpu_->free(x), gpu_->free(c);
		free(h), free(all), free(one);
	}
	ok(same, "linear_rows is batch-invariant on the GPU: rows alone = rows among 33, bit for bit "
	         "(K 896, 4864, 301)");

	/* linear_rows_parts: q, k and v of one call = each its own call, bit for bit */
	{
		int Mq = 17, K = 896, Np[3] = { 896, 128, 128 }, Nt = 896 + 128 + 128;
		size_t na = (size_t)Mq * K, nw = (size_t)Nt * K;
		float *h = malloc(sizeof(float) * (na + nw)), *r1 = malloc(sizeof(float) * Mq * Nt),
		      *r2 = malloc(sizeof(float) * Mq * Nt);
		fill_(h, na + nw, 21, -1, 1);
		float *x = up_(gpu_, h, sizeof(float) * (na + nw)),
		      *c = gpu_->alloc(sizeof(float) * Mq * Nt, NULL);
		sw_rows_part p[3];
		size_t wo = na, co = 0;
		for (int i = 0; i < 3; i++) {
			p[i] = (sw_rows_part){ c + co, x + wo, Np[i] };
			gpu_->linear_rows(p[i].C, x, p[i].W, Mq, Np[i], K, 0);
			wo += (size_t)Np[i] * K, co += (size_t)Mq * Np[i];
		}
		down_(gpu_, r1, c, sizeof(float) * Mq * Nt);
		gpu_->memset(c, 0, sizeof(float) * Mq * Nt, NULL);
		gpu_->linear_rows_parts(p, 3, x, Mq, K, 0);
		down_(gpu_, r2, c, sizeof(float) * Mq * Nt);
		ok(!memcmp(r1, r2, sizeof(float) * Mq * Nt),
		   "linear_rows_parts on the GPU: 3 parts in one call = each part's linear_rows, bit for bit");
		gpu_->free(x), gpu_->free(c);
		free(h), free(r1), free(r2);
	}

	/* attn_paged: query 3 alone (its own page table) = query 3 among 5 */
	float a5[PQ * H * HD], a1[H * HD];
	paged_(gpu_, a5, pidx_, PQ, 0);
	int32_t solo[12 + 2 * PQ];
	memcpy(solo, pidx_, sizeof solo);
	solo[12] = pidx_[12 + 3], solo[12 + PQ] = pidx_[12 + PQ + 3];
	paged_(gpu_, a1, solo, 1, 3);
	ok(!memcmp(a1, a5 + 3 * H * HD, sizeof a1),
	   "attn_paged is batch-invariant on the GPU: a query alone = the same query among 5, bit for bit");
}

/* The same inputs give the same bits every run (no atomics in sums). */
static void test_determinism_(void)
{
	size_t n = (size_t)T * H * HD * 2 + (size_t)T * KVH * HD * 2 + (size_t)T * H;
	float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
	op_attn_causal_(gpu_, a);
	op_attn_causal_(gpu_, b);
	ok(!memcmp(a, b, sizeof(float) * n), "attention forward and backward: the same bits twice");
	float g1[67 * 45], g2[67 * 45], s1[2], s2[2];
	op_gemm_nt_(gpu_, g1), op_gemm_nt_(gpu_, g2);
	op_sumsq_(gpu_, s1), op_sumsq_(gpu_, s2);
	ok(!memcmp(g1, g2, sizeof g1) && !memcmp(s1, s2, sizeof s1), "gemm and sumsq: the same bits twice");
	free(a), free(b);
}

/* ---- a whole model ---- */

typedef struct mrun_ {
	float lp[40], ent[40];
	float *grad, *params;      /* after backward; after two AdamW steps */
	int32_t greedy[2][24];     /* greedy tokens of two prompts decoded together */
	float glp[2][24];          /* their log-probs as decoding computed them */
	float flp[2][24];          /* the same tokens' log-probs by the engine's forward */
	double gnorm;
	int rc;
} mrun_;

/*
 * sw_backend_matmul "bf16": gemm's operands rounded to bf16 (to nearest,
 * ties to even, as the CPU's), products summed in f32.  The reference is
 * the product in double of the operands so rounded; it must be met to f32
 * summing's error, and be far from the f32 product (bf16 engaged).  Then
 * "f32" again gives sgemm's bits.  The operands are rounded once, by the
 * CPU backend's own conversion (gemm.h).
 */
static void test_bf16_(void)
{
	enum { M = 96, N = 80, K = 512 };
	sw_error err = { 0 };
	size_t na = (size_t)M * K, nb = (size_t)N * K;
	float *h = malloc(sizeof(float) * (na + nb)), *c = malloc(sizeof(float) * M * N),
	      *c32 = malloc(sizeof(float) * M * N), *c32b = malloc(sizeof(float) * M * N);
	double *ref = malloc(sizeof(double) * M * N), *ref32 = malloc(sizeof(double) * M * N);
	fill_(h, na + nb, 7, -1, 1);
	float *x = up_(gpu_, h, sizeof(float) * (na + nb)), *y = gpu_->alloc(sizeof(float) * M * N, &err);
	const float *A = h, *B = h + na; /* C = A B^T */
	uint16_t *hb = malloc(sizeof(uint16_t) * (na + nb));
	float *r16 = malloc(sizeof(float) * (na + nb)); /* the operands in bf16, as floats */
	sw_bf16_from_f32_scalar(hb, h, na + nb);
	for (size_t i = 0; i < na + nb; i++) {
		uint32_t u = (uint32_t)hb[i] << 16;
		memcpy(&r16[i], &u, 4);
	}
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double r = 0, r32 = 0;
			for (int k = 0; k < K; k++) {
				r += (double)r16[(size_t)i * K + k] * r16[na + (size_t)j * K + k];
				r32 += (double)A[(size_t)i * K + k] * B[(size_t)j * K + k];
			}
			ref[(size_t)i * N + j] = r, ref32[(size_t)i * N + j] = r32;
		}
	free(hb), free(r16);
	int rc = x && y ? 0 : -1;
	if (!rc) {
		gpu_->gemm(0, 1, M, N, K, 1, x, K, x + na, K, 0, y, N);
		down_(gpu_, c32, y, sizeof(float) * M * N);
		rc = sw_backend_matmul(gpu_, "bf16", &err);
	}
	if (!rc) {
		gpu_->gemm(0, 1, M, N, K, 1, x, K, x + na, K, 0, y, N);
		down_(gpu_, c, y, sizeof(float) * M * N);
		rc = sw_backend_matmul(gpu_, "f32", &err);
		gpu_->gemm(0, 1, M, N, K, 1, x, K, x + na, K, 0, y, N);
		down_(gpu_, c32b, y, sizeof(float) * M * N);
	}
	if (rc)
		printf("# bf16: %s\n", err.msg);
	double e_bf = 0, e_32 = 0;
	for (size_t i = 0; i < (size_t)M * N; i++) {
		double d = fabs(c[i] - ref[i]), d32 = fabs(c[i] - ref32[i]);
		e_bf = d > e_bf || d != d ? d : e_bf;
		e_32 = d32 > e_32 ? d32 : e_32;
	}
	printf("# tol gemm bf16: max |err| %.3g against bf16-rounded operands, %.3g against f32's\n", e_bf,
	       e_32);
	/* f32 sums of K products of size ~1: a few K ulp of the sum at most */
	ok(!rc && e_bf < 5e-4, "gemm under matmul bf16: the product of bf16-rounded operands (max err %.2g)",
	   e_bf);
	ok(!rc && e_32 > 1e-3 && !memcmp(c32, c32b, sizeof(float) * M * N),
	   "gemm under matmul bf16 is not the f32 product (%.2g off it), and f32 again is sgemm's bits", e_32);
	gpu_->free(x), gpu_->free(y);
	free(h), free(c), free(c32), free(c32b), free(ref), free(ref32);
}

static void run_model_(const sw_backend *be, const sw_model_config *c, mrun_ *r)
{
	sw_error err = { 0 };
	memset(r, 0, sizeof *r);
	sw_model *m = sw_model_new_on(be, c, &err), *g = sw_model_new_on(be, c, &err);
	sw_model *mo = sw_model_new_on(be, c, &err), *vo = sw_model_new_on(be, c, &err);
	size_t np = sw_model_config_nparams(c);
	r->grad = malloc(sizeof(float) * np), r->params = malloc(sizeof(float) * np);
	if (!m || !g || !mo || !vo || !r->grad || !r->params) {
		printf("# %s: %s\n", be->name, err.msg);
		r->rc = -1;
		goto out;
	}
	r->rc |= sw_model_init_random(m, 5, 0.2f);
	int32_t tok[40], tgt[40], cu[] = { 0, 23, 24, 40 };
	for (int i = 0; i < 40; i++)
		tok[i] = (i * 11 + 2) % c->vocab_size, tgt[i] = (i * 5 + 1) % c->vocab_size;
	float dlp[40], dent[40];
	for (int i = 0; i < 40; i++)
		dlp[i] = (float)((i % 7) - 3) * 0.1f, dent[i] = (float)((i % 3) - 1) * 0.05f;
	sw_engine *e = sw_engine_new(m, &err);
	sw_batch b = { 3, tok, cu, tgt, NULL };
	r->rc |= !e || sw_engine_forward(e, &b, true, r->lp, r->ent, &err) ||
	         sw_engine_backward(e, dlp, dent, g, &err) || sw_model_read(g, r->grad, &err);

	/* Greedy decoding of two prompts in one batch, 24 tokens each. */
	sw_decoder *d = sw_decoder_new(m, 4, 200, &err);
	int id[2] = { -1, -1 };
	for (int s = 0; s < 2 && d; s++)
		id[s] = sw_decoder_add(d, tok + 5 * s, 6 + s, &err);
	for (int step = 0; step < 24 && d && id[0] >= 0 && id[1] >= 0 && !r->rc; step++) {
		int n;
		const int *ids;
		const float *z;
		r->rc |= sw_decoder_step(d, &n, &ids, &z, &err);
		for (int j = 0; j < n && !r->rc; j++) {
			int s = ids[j] == id[0] ? 0 : 1, best = 0;
			const float *row = z + (size_t)j * c->vocab_size;
			for (int v = 1; v < c->vocab_size; v++)
				best = row[v] > row[best] ? v : best;
			r->greedy[s][step] = best;
			r->glp[s][step] = sw_logprob_of(row, c->vocab_size, best);
			r->rc |= sw_decoder_append(d, ids[j], &r->greedy[s][step], 1, &err);
		}
	}
	sw_decoder_free(d);
	/* The trainer's forward over each prompt and its greedy tokens. */
	for (int s = 0; s < 2 && e && !r->rc; s++) {
		int np_ = 6 + s, L = np_ + 24;
		int32_t seq[32], t2[32], c2[] = { 0, L };
		float lp[32];
		memcpy(seq, tok + 5 * s, sizeof(int32_t) * np_);
		memcpy(seq + np_, r->greedy[s], sizeof(int32_t) * 24);
		for (int i = 0; i < L; i++)
			t2[i] = i + 1 < L ? seq[i + 1] : -1;
		sw_batch b2 = { 1, seq, c2, t2, NULL };
		r->rc |= sw_engine_forward(e, &b2, false, lp, NULL, &err);
		memcpy(r->flp[s], lp + np_ - 1, sizeof(float) * 24);
	}
	sw_engine_free(e);

	sw_adamw_config ac = sw_adamw_defaults((float)ADAMW_LR);
	ac.max_grad_norm = (float)ADAMW_CLIP;
	sw_adamw_stats st = { 0 };
	r->rc |= sw_model_zero(mo, &err) || sw_model_zero(vo, &err) ||
	         sw_adamw_step(&ac, m, g, mo->arena, vo->arena, 0, &st, &err) ||
	         sw_adamw_step(&ac, m, g, mo->arena, vo->arena, 1, &st, &err) ||
	         sw_model_read(m, r->params, &err);
	r->gnorm = st.grad_norm;
	if (r->rc)
		printf("# %s: %s\n", be->name, err.msg);
out:
	sw_model_free(m), sw_model_free(g), sw_model_free(mo), sw_model_free(vo);
}

static void test_model_(const char *what, sw_model_config c)
{
	static mrun_ a, b;
	char name[160];
	run_model_(cpu_, &c, &a);
	run_model_(gpu_, &c, &b);
	ok(a.rc == 0 && b.rc == 0, "%s: forward, backward, greedy decoding and AdamW run on cpu and gpu", what);
	size_t np = sw_model_config_nparams(&c);
	snprintf(name, sizeof name, "%s: forward log-probs", what);
	close_(name, b.lp, a.lp, 40, 1e-4, 1e-4);
	snprintf(name, sizeof name, "%s: forward entropies", what);
	close_(name, b.ent, a.ent, 40, 1e-4, 1e-4);
	snprintf(name, sizeof name, "%s: gradients", what);
	close_(name, b.grad, a.grad, np, GRAD_ATOL, GRAD_RTOL);
	snprintf(name, sizeof name, "%s: parameters after two AdamW steps", what);
	close_adamw_(name, b.params, a.params, a.grad, np, a.gnorm);
	int same = !memcmp(a.greedy, b.greedy, sizeof a.greedy);
	ok(same, "%s: greedy decoding, 2 x 24 tokens in one batch, token for token", what);
	if (!same)
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < 24; i++)
				if (a.greedy[s][i] != b.greedy[s][i]) {
					printf("#   sequence %d differs first at token %d: gpu %d cpu %d\n", s, i,
					       b.greedy[s][i], a.greedy[s][i]);
					break;
				}
	/* Item 2: the rollout's log-probs against the trainer's, both on the GPU. */
	snprintf(name, sizeof name, "%s: rollout log-probs = trainer forward on the gpu", what);
	close_(name, b.flp[0], b.glp[0], 48, 1e-4, 1e-4);
	free(a.grad), free(a.params), free(b.grad), free(b.params);
}

/* ---- the plan ---- */

typedef struct op_ {
	const char *name;
	op_fn run;
	size_t nout;
	double atol, rtol;
} op_;

#define NQ ((size_t)T * H * HD)
#define NK ((size_t)T * KVH * HD)
/* Tolerances: products and sums in another order than the CPU's drift by
 * ~1e-6 relative per addition; exp/erf/tanh of CUDA's libm differ by a few
 * ulp from glibc's; attention compounds both. */
static const op_ ops_[] = {
	{ "gemm (N, N)", op_gemm_nn_, 67 * 45, 1e-5, 1e-4 },
	{ "gemm (N, T)", op_gemm_nt_, 67 * 45, 1e-5, 1e-4 },
	{ "gemm (T, N)", op_gemm_tn_, 67 * 45, 1e-5, 1e-4 },
	{ "linear_rows K 896", op_linear_896_, 19 * 77, 1e-5, 1e-4 },
	{ "linear_rows K 301", op_linear_301_, 19 * 77, 1e-5, 1e-4 },
	{ "linear_rows K 1100", op_linear_1100_, 19 * 77, 1e-5, 1e-4 },
	{ "linear_rows K 4864", op_linear_4864_, 19 * 77, 2e-5, 1e-4 },
	{ "rows_gather", op_rows_, (size_t)T * D, 0, 0 },
	{ "embed_bwd", op_embed_bwd_, (size_t)50 * D, 0, 0 },
	{ "kv_write", op_kv_write_, 6 * 4 * 40 * 2, 0, 0 },
	{ "rmsnorm fwd, bwd", op_rmsnorm_, (size_t)2 * T * D + T + D, 1e-5, 1e-4 },
	{ "layernorm fwd, bwd", op_layernorm_, (size_t)2 * T * D + 2 * T + 2 * D, 1e-5, 1e-4 },
	{ "act fwd, bwd (4 activations)", op_act_, 8 * 5000, 1e-6, 1e-5 },
	{ "rope and its inverse", op_rope_, 2 * NQ, 1e-6, 1e-5 },
	{ "attention causal fwd, bwd", op_attn_causal_, 2 * NQ + 2 * NK + (size_t)T * H, 1e-5, 1e-4 },
	{ "attention full fwd, bwd", op_attn_full_, 2 * NQ + 2 * NK + (size_t)T * H, 1e-5, 1e-4 },
	{ "attention with a shared prefix, causal fwd, bwd", op_attn_prefix_causal_,
	  2 * NQ + 2 * NK + (size_t)T * H, 1e-5, 1e-4 },
	{ "attention with a shared prefix, full fwd, bwd", op_attn_prefix_full_,
	  2 * NQ + 2 * NK + (size_t)T * H, 1e-5, 1e-4 },
	{ "attn_paged", op_paged_, (size_t)PQ * H * HD, 1e-5, 1e-4 },
	{ "swiglu fwd, bwd", op_swiglu_, (size_t)3 * T * FF, 1e-6, 1e-5 },
	{ "add, bias fwd, bwd, scale", op_add_bias_scale_, (size_t)T * D + D, 1e-6, 1e-5 },
	{ "logprob fwd, bwd", op_logprob_, (size_t)T * V + 3 * T, 1e-5, 1e-5 },
	{ "adamw", op_adamw_, 3 * 10007, 1e-6, 1e-5 },
	{ "sumsq", op_sumsq_, 2, 0, 1e-6 },
	{ "first_nonfinite", op_nonfinite_, 3, 0, 0 },
	{ "argmax", op_argmax_, 6, 0, 0 },
};
#define NOPS (sizeof ops_ / sizeof ops_[0])
/* Checks after the ops: batch invariance 3 (linear_rows_parts among them),
 * determinism 2, bf16 2, models 3 x 7, the last sync. */
#define NREST (3 + 2 + 2 + 3 * 7 + 1)

static sw_model_config cfg_(const char *type, bool bias, bool qk, bool tied)
{
	sw_model_config c = tiny_config(type, 97, 128, 160, 32, 128);
	c.attention_bias = bias, c.qk_norm = qk, c.tie_word_embeddings = tied;
	return c;
}

int main(void)
{
	sw_error err = { 0 };
	const char *dev = getenv("SW_GPU_DEVICE") ? getenv("SW_GPU_DEVICE") : "cuda";
	sw_engine_threads(2);
	cpu_ = sw_backend_cpu();
	if (!(gpu_ = sw_backend_get(dev, &err))) {
		if (getenv("SW_GPU_REQUIRED") && atoi(getenv("SW_GPU_REQUIRED"))) {
			ok(0, "the GPU backend '%s': %s", dev, err.msg);
			return tap_done();
		}
		for (size_t i = 0; i < NOPS + NREST; i++)
			printf("ok %d - gpu: %s # skip no CUDA backend here: %s\n", ++tap_n_,
			       i < NOPS ? ops_[i].name : "batch invariance, determinism, bf16 products, whole models", err.msg);
		return tap_done();
	}
	printf("# device %s\n", gpu_->name);
	for (size_t i = 0; i < NOPS; i++)
		compare_(ops_[i].name, ops_[i].run, ops_[i].nout, ops_[i].atol, ops_[i].rtol);
	test_batch_invariance_();
	test_determinism_();
	test_bf16_();
	test_model_("llama", cfg_("llama", false, false, false));
	test_model_("qwen2 (bias, tied)", cfg_("qwen2", true, false, true));
	test_model_("qwen3 (q/k norm)", cfg_("qwen3", false, true, false));
	ok(gpu_->sync(&err) == 0, "gpu: the last sync is clean (%s)", err.msg);
	return tap_done();
}
