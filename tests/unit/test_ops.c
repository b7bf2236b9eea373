/*
 * test_ops.c - the CPU op table (libsw/compute/backend.h): each forward against a
 * plain double-precision reference written out here, and each backward
 * against central finite differences of a scalar loss sum(R * out).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compute/backend.h"
#include "tap.h"

static const sw_backend *ops;

static uint64_t rng_ = 0x9E3779B97F4A7C15ull;
static double urand_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return (double)(rng_ >> 11) / 9007199254740992.0;
}
static float *rnd_(size_t n, float a)
{
	float *x = malloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((urand_() * 2 - 1) * a);
	return x;
}
static float *zeros_(size_t n)
{
	return calloc(n, sizeof(float));
}
static double dot_(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}
static double maxdiff_(const float *a, const double *b, size_t n, double *scale)
{
	double m = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs(a[i] - b[i]);
		m = d > m ? d : m;
		s = fabs(b[i]) > s ? fabs(b[i]) : s;
	}
	*scale = s;
	return m;
}

/*
 * Finite differences: loss() is evaluated with x[i] moved by +-h for the
 * indices idx (all when idx is NULL); the result is compared with the
 * analytic gradient g.  Returns the largest error over the largest
 * gradient magnitude.
 */
typedef double (*loss_fn)(void *ctx);
static double fd_check_(loss_fn loss, void *ctx, float *x, const float *g, size_t n,
                        const size_t *idx, size_t nidx, float h)
{
	double err = 0, gmax = 1e-6;
	size_t m = idx ? nidx : n;
	for (size_t c = 0; c < m; c++) {
		size_t i = idx ? idx[c] : c;
		float x0 = x[i];
		x[i] = x0 + h;
		double lp = loss(ctx);
		x[i] = x0 - h;
		double lm = loss(ctx);
		x[i] = x0;
		double num = (lp - lm) / (2.0 * h);
		double e = fabs(num - g[i]);
		err = e > err ? e : err;
		gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
	}
	return err / gmax;
}

/* ---- gemm ---------------------------------------------------------------- */
static void test_gemm_(void)
{
	int shapes[][3] = { { 5, 7, 3 }, { 1, 9, 6 }, { 4, 1, 5 }, { 33, 17, 40 } };
	for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
		for (int ta = 0; ta < 2; ta++)
			for (int tb = 0; tb < 2; tb++) {
				int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
				float *A = rnd_((size_t)M * K, 1), *B = rnd_((size_t)K * N, 1);
				float *C = rnd_((size_t)M * N, 1);
				double *R = malloc((size_t)M * N * sizeof *R);
				int lda = ta ? M : K, ldb = tb ? K : N;
				for (int i = 0; i < M; i++)
					for (int j = 0; j < N; j++) {
						double s = 0;
						for (int k = 0; k < K; k++) {
							double a = ta ? A[k * lda + i] : A[i * lda + k];
							double b = tb ? B[j * ldb + k] : B[k * ldb + j];
							s += a * b;
						}
						R[i * N + j] = 0.5 * s + 0.25 * C[i * N + j];
					}
				ops->gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, C, N);
				double sc, d = maxdiff_(C, R, (size_t)M * N, &sc);
				ok(d < 1e-5 * (1 + sc), "gemm %dx%dx%d ta=%d tb=%d matches (err %.2g)", M, N, K,
				   ta, tb, d);
				free(A), free(B), free(C), free(R);
			}
}

/* ---- the batch-invariant product ----------------------------------------- */
static void test_linear_rows_(int level)
{
	/* AVX-512 paths too: blocks of 48 rows of W (16 for one row) whole and
	 * short; a last row alone against a block (its whole 16s, then tiles of
	 * that row) with and without a k % 16 tail; 4x6 tiles, and 4x4 tiles of
	 * 4, 3, 2 and 1 rows for short tiles, groups of W short of 6 and k % 16
	 * tails; in parallel and not; K in shares of 1024 (a last share of a
	 * k % 16 tail alone, of 16 and a tail, of 16 whole) over 1 and 2 runs
	 * of 16 tiles. */
	int shapes[][3] = { { 1, 9, 16 }, { 7, 13, 37 }, { 33, 64, 96 }, { 5, 3, 5 },
		            { 1, 48, 40 }, { 6, 37, 50 }, { 9, 32, 16 }, { 3, 70, 33 },
		            { 18, 40, 1043 }, { 17, 24, 64 }, { 8, 48, 64 }, { 12, 200, 160 },
		            { 21, 96, 48 }, { 13, 100, 80 }, { 4, 30, 32 }, { 32, 136, 256 },
		            { 1, 100, 64 }, { 9, 120, 96 }, { 24, 200, 64 }, { 70, 60, 2064 },
		            { 33, 50, 2051 }, { 5, 13, 2048 }, { 8, 12, 1031 } };
	for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
		int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
		float *A = rnd_((size_t)M * K, 1), *W = rnd_((size_t)N * K, 1);
		float *C = rnd_((size_t)M * N, 1), *C1 = malloc(sizeof(float) * N);
		double *R = malloc(sizeof *R * M * N);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				R[i * N + j] = dot_(A + i * K, W + j * K, K) + C[i * N + j];
		ops->linear_rows(C, A, W, M, N, K, 1);
		double sc, d = maxdiff_(C, R, (size_t)M * N, &sc);
		ok(d < 1e-5 * (1 + sc), "linear_rows (simd %d) %dx%dx%d matches (err %.2g)", level, M, N, K, d);
		/* Bit for bit: every row alone equals the same row in the batch. */
		float *C0 = malloc(sizeof(float) * M * N);
		ops->linear_rows(C0, A, W, M, N, K, 0);
		int same = 1;
		for (int i = 0; i < M; i++) {
			ops->linear_rows(C1, A + i * K, W, 1, N, K, 0);
			same &= memcmp(C1, C0 + i * N, sizeof(float) * N) == 0;
		}
		ok(same, "linear_rows (simd %d) %dx%dx%d: each row alone has the bits it has in the batch",
		   level, M, N, K);
		free(A), free(W), free(C), free(C1), free(C0), free(R);
	}
}

/* ---- embedding ----------------------------------------------------------- */
static void test_embed_(void)
{
	int V = 11, D = 6, T = 9;
	int32_t tok[9] = { 3, 0, 3, 10, 5, 3, 0, 7, 10 };
	float *tab = rnd_((size_t)V * D, 1), *out = zeros_((size_t)T * D);
	ops->embed_fwd(out, tab, tok, T, D);
	int good = 1;
	for (int t = 0; t < T; t++)
		good &= memcmp(out + t * D, tab + tok[t] * D, D * sizeof(float)) == 0;
	ok(good, "embedding forward gathers the rows");
	float *dout = rnd_((size_t)T * D, 1), *dtab = zeros_((size_t)V * D);
	double *ref = calloc((size_t)V * D, sizeof *ref);
	for (int t = 0; t < T; t++)
		for (int d = 0; d < D; d++)
			ref[tok[t] * D + d] += dout[t * D + d];
	ops->embed_bwd(dtab, dout, tok, T, D);
	double sc;
	ok(maxdiff_(dtab, ref, (size_t)V * D, &sc) < 1e-6, "embedding backward sums repeated tokens");
	free(tab), free(out), free(dout), free(dtab), free(ref);
}

/* ---- rmsnorm ------------------------------------------------------------- */
struct rms_ctx { float *x, *w, *R, *out, *rstd; int T, D; };
static double rms_loss_(void *p)
{
	struct rms_ctx *c = p;
	ops->rmsnorm_fwd(c->out, c->rstd, c->x, c->w, c->T, c->D, 1e-5f);
	return dot_(c->out, c->R, (size_t)c->T * c->D);
}
static void test_rmsnorm_(void)
{
	int T = 5, D = 24;
	struct rms_ctx c = { rnd_(T * D, 2), rnd_(D, 1), rnd_(T * D, 1), zeros_(T * D), zeros_(T), T, D };
	rms_loss_(&c);
	int good = 1;
	for (int t = 0; t < T; t++) {
		double ss = 0;
		for (int d = 0; d < D; d++)
			ss += (double)c.x[t * D + d] * c.x[t * D + d];
		double r = 1 / sqrt(ss / D + 1e-5);
		for (int d = 0; d < D; d++)
			good &= fabs(c.out[t * D + d] - c.w[d] * c.x[t * D + d] * r) < 1e-5;
	}
	ok(good, "rmsnorm forward matches x / rms(x) * w");
	float *dx = rnd_(T * D, 1), *dx0 = malloc(T * D * sizeof(float)), *dw = zeros_(D);
	memcpy(dx0, dx, T * D * sizeof(float));
	ops->rmsnorm_bwd(dx, dw, c.R, c.x, c.w, c.rstd, T, D);
	for (int i = 0; i < T * D; i++)
		dx[i] -= dx0[i]; /* the op accumulates: take back what was there */
	double ex = fd_check_(rms_loss_, &c, c.x, dx, T * D, NULL, 0, 1e-2f);
	double ew = fd_check_(rms_loss_, &c, c.w, dw, D, NULL, 0, 1e-2f);
	ok(ex < 2e-3, "rmsnorm d/dx by finite differences (rel err %.2g)", ex);
	ok(ew < 2e-3, "rmsnorm d/dw by finite differences (rel err %.2g)", ew);
	free(c.x), free(c.w), free(c.R), free(c.out), free(c.rstd), free(dx), free(dx0), free(dw);
}

/* ---- rope ------------------------------------------------------------------ */
static void test_rope_(void)
{
	int T = 4, nh = 3, hd = 8, half = 4;
	int32_t pos[4] = { 0, 1, 7, 1000 };
	float invf[4];
	for (int i = 0; i < half; i++)
		invf[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd));
	float *x = rnd_(T * nh * hd, 1), *y = malloc(T * nh * hd * sizeof(float));
	memcpy(y, x, T * nh * hd * sizeof(float));
	ops->rope(y, pos, T, nh, hd, invf, 0);
	int good = 1;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < hd; i++) {
				const float *r = x + (t * nh + h) * hd;
				double a = (double)(float)(pos[t] * invf[i % half]);
				/* rotate_half: x*cos + cat(-x2, x1)*sin */
				double rh = i < half ? -r[i + half] : r[i - half];
				double want = r[i] * cos(a) + rh * sin(a);
				good &= fabs(y[(t * nh + h) * hd + i] - want) < 1e-5;
			}
	ok(good, "rope forward is Hugging Face's rotate_half rotation");
	/* The backward of a rotation is its inverse: <R, rope(x)> = <rope^-1(R), x>. */
	float *R = rnd_(T * nh * hd, 1), *g = malloc(T * nh * hd * sizeof(float));
	memcpy(g, R, T * nh * hd * sizeof(float));
	ops->rope(g, pos, T, nh, hd, invf, 1);
	double l1 = dot_(R, y, T * nh * hd), l2 = dot_(g, x, T * nh * hd);
	ok(fabs(l1 - l2) < 1e-5, "rope inverse is the adjoint of rope (%.9g vs %.9g)", l1, l2);
	ops->rope(y, pos, T, nh, hd, invf, 1);
	double sc, d;
	double *xd = malloc(T * nh * hd * sizeof *xd);
	for (int i = 0; i < T * nh * hd; i++)
		xd[i] = x[i];
	d = maxdiff_(y, xd, T * nh * hd, &sc);
	ok(d < 1e-5, "rope then inverse gives x back (err %.2g)", d);
	free(x), free(y), free(R), free(g), free(xd);
	/* Tokens sharing positions (the op's table of each position's angles),
	 * as 4 samples x 64 tokens from position 37 and as a short run, against
	 * the op on each token alone (no table): the same bits, both ways,
	 * over threads and not. */
	static const struct { int T, nh, hd, mod, base; } sh[] = { { 256, 4, 64, 64, 37 }, { 12, 3, 8, 5, 2 },
								  { 6, 2, 160, 3, 0 } };
	for (int k = 0; k < 3; k++) {
		int TT = sh[k].T, n = TT * sh[k].nh * sh[k].hd, hh = sh[k].hd / 2, same = 1;
		int32_t *ps = malloc(sizeof *ps * TT);
		float *iv = malloc(sizeof *iv * hh), *a = rnd_(n, 3), *b = malloc(sizeof *b * n);
		for (int t = 0; t < TT; t++)
			ps[t] = sh[k].base + t % sh[k].mod;
		for (int i = 0; i < hh; i++)
			iv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / sh[k].hd));
		for (int inv = 0; inv < 2; inv++) {
			memcpy(b, a, sizeof *b * n);
			ops->rope(a, ps, TT, sh[k].nh, sh[k].hd, iv, inv);
			for (int t = 0; t < TT; t++)
				ops->rope(b + (size_t)t * sh[k].nh * sh[k].hd, ps + t, 1, sh[k].nh, sh[k].hd, iv, inv);
			same &= !memcmp(a, b, sizeof *b * n);
		}
		ok(same, "rope over %d tokens at %d positions: the bits of each token's own, forward and inverse",
		   TT, sh[k].mod);
		free(ps), free(iv), free(a), free(b);
	}
}

/* ---- attention ------------------------------------------------------------- */
struct att_ctx {
	float *q, *k, *v, *out, *lse, *R, *scratch;
	const int32_t *cu;
	int nseq, H, KVH, hd, causal;
};
static double att_loss_(void *p)
{
	struct att_ctx *c = p;
	ops->attn_fwd(c->out, c->lse, c->q, c->k, c->v, c->cu, c->nseq, c->H, c->KVH, c->hd,
	              c->causal, c->scratch);
	return dot_(c->out, c->R, (size_t)c->cu[c->nseq] * c->H * c->hd);
}
/* Plain attention per sequence (causal or not), in double. */
static void att_ref_(double *out, const struct att_ctx *c)
{
	int H = c->H, KVH = c->KVH, hd = c->hd;
	double *s = malloc(4096 * sizeof *s);
	for (int q = 0; q < c->nseq; q++) {
		int o = c->cu[q], L = c->cu[q + 1] - o;
		for (int i = 0; i < L; i++)
			for (int h = 0; h < H; h++) {
				int g = h / (H / KVH), last = c->causal ? i : L - 1;
				double m = -1e300, sum = 0;
				for (int j = 0; j <= last; j++) {
					double d = 0;
					for (int e = 0; e < hd; e++)
						d += (double)c->q[((o + i) * H + h) * hd + e] *
						     c->k[((o + j) * KVH + g) * hd + e];
					s[j] = d / sqrt(hd);
					m = s[j] > m ? s[j] : m;
				}
				for (int j = 0; j <= last; j++)
					sum += (s[j] = exp(s[j] - m));
				for (int e = 0; e < hd; e++) {
					double a = 0;
					for (int j = 0; j <= last; j++)
						a += s[j] / sum * c->v[((o + j) * KVH + g) * hd + e];
					out[((o + i) * H + h) * hd + e] = a;
				}
			}
	}
	free(s);
}
/* c's keys and values in a paged cache of pages of `page` keys, the pages
 * out of order: the decoding attention must give every query the causal
 * forward's output (ref). */
static void paged_check_(const struct att_ctx *c, const double *ref, int maxlen, int page)
{
	const int32_t *cu = c->cu;
	int nseq = c->nseq, H = c->H, KVH = c->KVH, hd = c->hd, T = cu[nseq], npages = 0;
	for (int s = 0; s < nseq; s++)
		npages += (cu[s + 1] - cu[s] + page - 1) / page;
	float *kp = zeros_((size_t)npages * page * KVH * hd), *vp = zeros_((size_t)npages * page * KVH * hd);
	int32_t *pages = malloc(npages * sizeof *pages), *poff = malloc(T * sizeof *poff),
		*nkeys = malloc(T * sizeof *nkeys);
	int np = 0;
	for (int s = 0; s < nseq; s++) {
		int L = cu[s + 1] - cu[s], first = np;
		for (int j = 0; j < L; j += page, np++)
			pages[np] = npages - 1 - np; /* reversed */
		for (int j = 0; j < L; j++) {
			/* [page][KVH][page's slots][hd] (sw_kv_view) */
			for (int g = 0; g < KVH; g++) {
				size_t dst = (size_t)pages[first + j / page] * page * KVH * hd +
				             ((size_t)g * page + j % page) * hd;
				size_t src = ((size_t)(cu[s] + j) * KVH + g) * hd;
				memcpy(kp + dst, c->k + src, hd * sizeof(float));
				memcpy(vp + dst, c->v + src, hd * sizeof(float));
			}
			poff[cu[s] + j] = first;
			nkeys[cu[s] + j] = j + 1;
		}
	}
	sw_kv_view kv = { kp, vp, page, pages, poff, nkeys, (size_t)page * KVH * hd };
	float *po = zeros_(T * H * hd), *ps = zeros_(ops->attn_paged_scratch(maxlen));
	ops->attn_paged(po, c->q, T, H, KVH, hd, &kv, ps);
	double sc, d = maxdiff_(po, ref, (size_t)T * H * hd, &sc);
	ok(d < 1e-5, "paged decoding attention matches, pages of %d (err %.2g)", page, d);
	{
		/* The decoder's layout: a page of one pool holds K then V (and other
		 * layers' pages between): stride past a page's own size, the
		 * same bits. */
		size_t per = (size_t)page * KVH * hd, stride = 3 * per + 16;
		float *kv2 = zeros_(npages * stride), *po2 = zeros_(T * H * hd);
		for (int p = 0; p < npages; p++) {
			memcpy(kv2 + p * stride, kp + p * per, per * sizeof(float));
			memcpy(kv2 + p * stride + per, vp + p * per, per * sizeof(float));
		}
		sw_kv_view kvs = { kv2, kv2 + per, page, pages, poff, nkeys, stride };
		ops->attn_paged(po2, c->q, T, H, KVH, hd, &kvs, ps);
		ok(!memcmp(po2, po, sizeof(float) * T * H * hd),
		   "paged decoding attention, pages of %d, %zu floats from a page to the next (its K, V, a gap): "
		   "the same bits",
		   page, stride);
		free(kv2), free(po2);
	}
	free(kp), free(vp), free(pages), free(poff), free(nkeys), free(po), free(ps);
}

/*
 * The decoding attention takes up to 4 query heads of one KV group at a
 * time (their keys and values read once): each head must get the bits it
 * gets alone (the same keys and values as a one-head cache).  Sequences of
 * 5, 21 and 40 keys in pages of 16, every token a query of its sequence.
 */
static void test_paged_heads_(int H, int KVH, int hd)
{
	enum { NS = 3, P = 16 };
	const int len[NS] = { 5, 21, 40 };
	int T = 0, npages = 0, ks = KVH * hd, grp = H / KVH;
	for (int s = 0; s < NS; s++)
		T += len[s], npages += (len[s] + P - 1) / P;
	float *k = rnd_((size_t)npages * P * ks, 1.5), *v = rnd_((size_t)npages * P * ks, 1);
	float *q = rnd_((size_t)T * H * hd, 1.5), *out = zeros_((size_t)T * H * hd);
	float *kg = zeros_((size_t)npages * P * hd), *vg = zeros_((size_t)npages * P * hd);
	float *qh = zeros_((size_t)T * hd), *oh = zeros_((size_t)T * hd);
	float *sc = zeros_(ops->attn_paged_scratch(40));
	int32_t *pages = malloc(sizeof *pages * npages), *poff = malloc(sizeof *poff * T),
		*nkeys = malloc(sizeof *nkeys * T);
	for (int i = 0; i < npages; i++)
		pages[i] = npages - 1 - i; /* reversed */
	for (int s = 0, t = 0, first = 0; s < NS; first += (len[s] + P - 1) / P, s++)
		for (int j = 0; j < len[s]; j++, t++)
			poff[t] = first, nkeys[t] = j + 1;
	sw_kv_view kv = { k, v, P, pages, poff, nkeys, (size_t)P * ks },
		   kv1 = { kg, vg, P, pages, poff, nkeys, (size_t)P * hd };
	ops->attn_paged(out, q, T, H, KVH, hd, &kv, sc);
	int same = 1;
	for (int h = 0; h < H; h++) {
		int g = h / grp;
		for (size_t p = 0; p < (size_t)npages; p++) /* head g's run of each page */
			for (int j = 0; j < P; j++) {
				size_t at = p * P * ks + ((size_t)g * P + j) * hd;
				memcpy(kg + (p * P + j) * hd, k + at, sizeof(float) * hd);
				memcpy(vg + (p * P + j) * hd, v + at, sizeof(float) * hd);
			}
		for (int t = 0; t < T; t++)
			memcpy(qh + (size_t)t * hd, q + ((size_t)t * H + h) * hd, sizeof(float) * hd);
		ops->attn_paged(oh, qh, T, 1, 1, hd, &kv1, sc);
		for (int t = 0; t < T; t++)
			same &= !memcmp(oh + (size_t)t * hd, out + ((size_t)t * H + h) * hd, sizeof(float) * hd);
	}
	ok(same, "paged attention, %d query heads over %d KV heads (head size %d): each head's bits as alone",
	   H, KVH, hd);
	free(k), free(v), free(q), free(out), free(kg), free(vg), free(qh), free(oh), free(sc);
	free(pages), free(poff), free(nkeys);
}

/*
 * Attention over a shared prefix against attention over each sequence run
 * whole: sequences [prefix Lp | child c] for each child, and one sequence
 * of its own.  The prefix's own queries are in the first whole sequence
 * only (their dout 0 in the others), so its dk, dv are the sum over the
 * whole sequences' prefix rows, its dq the first's.  Lengths past one
 * 128-row tile on either side of the prefix.
 */
static void test_attention_prefix_(int Lp, const int *Lc, int nc, int Lo, int H, int KVH, int hd)
{
	int qs = H * hd, ks = KVH * hd;
	/* shared: prefix, child 0 .. nc-1, other; whole: prefix + child c each, other */
	int32_t cs[10], cw[10], pre[10];
	int ns = nc + 2, nw = nc + 1;
	cs[0] = 0, cs[1] = Lp, pre[0] = -1, cw[0] = 0;
	for (int c = 0; c < nc; c++) {
		cs[c + 2] = cs[c + 1] + Lc[c], pre[c + 1] = 0;
		cw[c + 1] = cw[c] + Lp + Lc[c];
	}
	cs[ns] = cs[ns - 1] + Lo, pre[ns - 1] = -1;
	cw[nw] = cw[nw - 1] + Lo;
	int TS = cs[ns], TW = cw[nw], most = 0;
	for (int c = 0; c < nc; c++)
		most = Lp + Lc[c] > most ? Lp + Lc[c] : most;
	most = Lo > most ? Lo : most;
	float *q = rnd_((size_t)TS * qs, 1.5), *k = rnd_((size_t)TS * ks, 1.5), *v = rnd_((size_t)TS * ks, 1);
	float *R = rnd_((size_t)TS * qs, 1);
	float *qw = zeros_((size_t)TW * qs), *kw = zeros_((size_t)TW * ks), *vw = zeros_((size_t)TW * ks);
	float *Rw = zeros_((size_t)TW * qs);
	/* row r of whole sequence w is row map(w, r) of the shared layout */
	int *map = malloc(sizeof *map * TW);
	for (int w = 0; w < nw; w++)
		for (int r = 0; r < cw[w + 1] - cw[w]; r++)
			map[cw[w] + r] = w == nc ? cs[ns - 1] + r : r < Lp ? r : cs[w + 1] + r - Lp;
	for (int t = 0; t < TW; t++) {
		int m = map[t], gets_dout = t < Lp || map[t] >= Lp; /* not a copy of the prefix */
		memcpy(qw + (size_t)t * qs, q + (size_t)m * qs, sizeof(float) * qs);
		memcpy(kw + (size_t)t * ks, k + (size_t)m * ks, sizeof(float) * ks);
		memcpy(vw + (size_t)t * ks, v + (size_t)m * ks, sizeof(float) * ks);
		if (gets_dout)
			memcpy(Rw + (size_t)t * qs, R + (size_t)m * qs, sizeof(float) * qs);
	}
	float *sc = zeros_(ops->attn_scratch(most));
	float *os = zeros_((size_t)TS * qs), *ls = zeros_((size_t)TS * H), *ow = zeros_((size_t)TW * qs);
	float *lw = zeros_((size_t)TW * H);
	ops->attn_prefix_fwd(os, ls, q, k, v, cs, pre, ns, H, KVH, hd, 1, sc);
	ops->attn_fwd(ow, lw, qw, kw, vw, cw, nw, H, KVH, hd, 1, sc);
	double eo = 0, el = 0;
	for (int t = 0; t < TW; t++) {
		for (int i = 0; i < qs; i++)
			eo = fmax(eo, fabs((double)os[(size_t)map[t] * qs + i] - ow[(size_t)t * qs + i]));
		for (int h = 0; h < H; h++)
			el = fmax(el, fabs((double)ls[(size_t)map[t] * H + h] - lw[(size_t)t * H + h]));
	}
	ok(eo < 1e-5 && el < 1e-5, "attention over a shared prefix of %d, %d continuing (%d..%d), %d/%d heads of %d: "
	   "out (err %.2g) and lse (%.2g) as each run whole", Lp, nc, Lc[0], Lc[nc - 1], H, KVH, hd, eo, el);
	float *dqs = zeros_((size_t)TS * qs), *dks = rnd_((size_t)TS * ks, 1), *dvs = rnd_((size_t)TS * ks, 1);
	float *dqw = zeros_((size_t)TW * qs), *dkw = zeros_((size_t)TW * ks), *dvw = zeros_((size_t)TW * ks);
	ops->attn_prefix_bwd(dqs, dks, dvs, R, os, ls, q, k, v, cs, pre, ns, H, KVH, hd, 1, sc);
	ops->attn_bwd(dqw, dkw, dvw, Rw, ow, lw, qw, kw, vw, cw, nw, H, KVH, hd, 1, sc);
	/* the whole sequences' rows summed into the shared layout's */
	double *sq = calloc((size_t)TS * qs, sizeof *sq), *sk = calloc((size_t)TS * ks, sizeof *sk);
	double *sv = calloc((size_t)TS * ks, sizeof *sv);
	for (int t = 0; t < TW; t++) {
		for (int i = 0; i < qs; i++)
			sq[(size_t)map[t] * qs + i] += dqw[(size_t)t * qs + i];
		for (int i = 0; i < ks; i++) {
			sk[(size_t)map[t] * ks + i] += dkw[(size_t)t * ks + i];
			sv[(size_t)map[t] * ks + i] += dvw[(size_t)t * ks + i];
		}
	}
	double s1, s2, s3;
	double eq = maxdiff_(dqs, sq, (size_t)TS * qs, &s1), ek = maxdiff_(dks, sk, (size_t)TS * ks, &s2);
	double ev = maxdiff_(dvs, sv, (size_t)TS * ks, &s3);
	ok(eq < 1e-5 * (1 + s1) && ek < 1e-5 * (1 + s2) && ev < 1e-5 * (1 + s3),
	   "and its backward: dq (err %.2g), dk (%.2g), dv (%.2g) the sums over the whole sequences", eq, ek, ev);
	free(q), free(k), free(v), free(R), free(qw), free(kw), free(vw), free(Rw), free(map), free(sc);
	free(os), free(ls), free(ow), free(lw), free(dqs), free(dks), free(dvs), free(dqw), free(dkw), free(dvw);
	free(sq), free(sk), free(sv);
}

static void test_attention_(int nseq, const int32_t *cu, int H, int KVH, int hd, int nsample,
                            int causal)
{
	int T = cu[nseq], maxlen = 0;
	for (int s = 0; s < nseq; s++)
		maxlen = cu[s + 1] - cu[s] > maxlen ? cu[s + 1] - cu[s] : maxlen;
	struct att_ctx c = { rnd_(T * H * hd, 1.5), rnd_(T * KVH * hd, 1.5), rnd_(T * KVH * hd, 1),
	                     zeros_(T * H * hd), zeros_(T * H), rnd_(T * H * hd, 1),
	                     zeros_(ops->attn_scratch(maxlen)), cu, nseq, H, KVH, hd, causal };
	double *ref = malloc((size_t)T * H * hd * sizeof *ref), sc;
	att_ref_(ref, &c);
	att_loss_(&c);
	double d = maxdiff_(c.out, ref, (size_t)T * H * hd, &sc);
	ok(d < 1e-5, "%s attention forward, %d sequences up to %d tokens, %d/%d heads: matches (err %.2g)",
	   causal ? "causal" : "non-causal", nseq, maxlen, H, KVH, d);

	float *dq = zeros_(T * H * hd), *dk = rnd_(T * KVH * hd, 1), *dv = rnd_(T * KVH * hd, 1);
	ops->attn_bwd(dq, dk, dv, c.R, c.out, c.lse, c.q, c.k, c.v, cu, nseq, H, KVH, hd, causal,
	              c.scratch);
	size_t *idx = NULL, nq = (size_t)T * H * hd, nk = (size_t)T * KVH * hd;
	size_t *iq = NULL, *ik = NULL;
	if (nsample) {
		iq = malloc(nsample * sizeof *iq), ik = malloc(nsample * sizeof *ik);
		for (int i = 0; i < nsample; i++)
			iq[i] = (size_t)(urand_() * nq), ik[i] = (size_t)(urand_() * nk);
	}
	double eq = fd_check_(att_loss_, &c, c.q, dq, nq, iq, nsample, 1e-2f);
	double ek = fd_check_(att_loss_, &c, c.k, dk, nk, ik, nsample, 1e-2f);
	double ev = fd_check_(att_loss_, &c, c.v, dv, nk, ik, nsample, 1e-2f);
	ok(eq < 5e-3, "attention d/dq by finite differences (rel err %.2g)", eq);
	ok(ek < 5e-3, "attention d/dk by finite differences (rel err %.2g)", ek);
	ok(ev < 5e-3, "attention d/dv by finite differences (rel err %.2g)", ev);

	/* The same keys and values in a paged cache, pages out of order: the
	 * decoding attention must give every query the same output. */
	if (!causal) {
		free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.R), free(c.scratch);
		free(ref), free(dq), free(dk), free(dv), free(iq), free(ik);
		return;
	}
	/* Pages of 4 keys, and of 16 (the decoder's: the scores go 16 keys at a time). */
	paged_check_(&c, ref, maxlen, 4);
	paged_check_(&c, ref, maxlen, 16);

	free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.R), free(c.scratch);
	free(ref), free(dq), free(dk), free(dv), free(idx), free(iq), free(ik);
}

/* ---- layernorm, activations --------------------------------------------- */
struct ln_ctx { float *x, *w, *b, *out, *mean, *rstd, *R; int T, D; };
static double ln_loss_(void *p)
{
	struct ln_ctx *c = p;
	ops->layernorm_fwd(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->T, c->D, 1e-5f);
	return dot_(c->out, c->R, (size_t)c->T * c->D);
}
static void test_layernorm_(int with_bias)
{
	int T = 5, D = 24;
	struct ln_ctx c = { rnd_(T * D, 2), rnd_(D, 1.5), with_bias ? rnd_(D, 1) : NULL, zeros_(T * D),
	                    zeros_(T), zeros_(T), rnd_(T * D, 1), T, D };
	for (int i = 0; i < T * D; i++)
		c.x[i] += 3.0f; /* a mean far from 0 */
	ln_loss_(&c);
	double *ref = malloc((size_t)T * D * sizeof *ref), sc;
	for (int t = 0; t < T; t++) {
		double mu = 0, var = 0;
		for (int d = 0; d < D; d++)
			mu += c.x[t * D + d];
		mu /= D;
		for (int d = 0; d < D; d++)
			var += (c.x[t * D + d] - mu) * (c.x[t * D + d] - mu);
		var /= D;
		for (int d = 0; d < D; d++)
			ref[t * D + d] = (c.x[t * D + d] - mu) / sqrt(var + 1e-5) * c.w[d] + (c.b ? c.b[d] : 0);
	}
	double d = maxdiff_(c.out, ref, (size_t)T * D, &sc);
	ok(d < 1e-5, "layernorm forward%s matches (err %.2g)", with_bias ? "" : " without bias", d);
	float *dx = rnd_(T * D, 1), *dx0 = malloc(T * D * sizeof(float)), *dw = rnd_(D, 1),
	      *dw0 = malloc(D * sizeof(float)), *db = rnd_(D, 1), *db0 = malloc(D * sizeof(float));
	memcpy(dx0, dx, T * D * sizeof(float)), memcpy(dw0, dw, D * sizeof(float));
	memcpy(db0, db, D * sizeof(float));
	ops->layernorm_bwd(dx, dw, c.b ? db : NULL, c.R, c.x, c.w, c.mean, c.rstd, T, D);
	/* The accumulated part alone, for the finite differences. */
	for (int i = 0; i < T * D; i++)
		dx[i] -= dx0[i];
	for (int i = 0; i < D; i++)
		dw[i] -= dw0[i], db[i] -= db0[i];
	double ex = fd_check_(ln_loss_, &c, c.x, dx, (size_t)T * D, NULL, 0, 1e-2f);
	double ew = fd_check_(ln_loss_, &c, c.w, dw, D, NULL, 0, 1e-2f);
	ok(ex < 5e-3, "layernorm d/dx by finite differences, accumulated (rel err %.2g)", ex);
	ok(ew < 5e-3, "layernorm d/dw by finite differences, accumulated (rel err %.2g)", ew);
	if (c.b) {
		double eb = fd_check_(ln_loss_, &c, c.b, db, D, NULL, 0, 1e-2f);
		ok(eb < 5e-3, "layernorm d/db by finite differences, accumulated (rel err %.2g)", eb);
	}
	free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R), free(ref);
	free(dx), free(dx0), free(dw), free(dw0), free(db), free(db0);
}

/* PyTorch's values (torch 2.15: F.gelu, F.gelu(approximate="tanh"),
 * x * sigmoid(1.702 x), F.silu, and the gradient of their sum). */
static void test_act_(void)
{
	static const float x[11] = { -6.0f, -3.1f, -1.7f, -0.9f, -0.25f, 0, 0.3f, 0.8f, 1.5f, 2.9f, 5.5f };
	static const float want[4][2][11] = {
		{ { -0.0f, -0.00299953506f, -0.075761348f, -0.165654108f, -0.100323416f, 0, 0.18537344f, 0.630515695f, 1.39978909f, 2.89458919f, 5.5f },
		  { -2.98023224e-08f, -0.00915947556f, -0.115317971f, -0.0554166436f, 0.304626703f, 0.5f, 0.732327759f, 1.01989794f, 1.12746918f, 1.01539648f, 1.0000006f } },
		{ { -0.0f, -0.00262656808f, -0.0758940876f, -0.165771484f, -0.100324646f, 0, 0.185370937f, 0.630431712f, 1.39957154f, 2.89503336f, 5.5f },
		  { 0, -0.00873925537f, -0.115914613f, -0.0550672263f, 0.304645896f, 0.5f, 0.732295513f, 1.0195837f, 1.12771082f, 1.01512551f, 1 } },
		{ { -0.00022035357f, -0.0157660488f, -0.089217335f, -0.159957424f, -0.0988003463f, 0, 0.187484145f, 0.636815727f, 1.39166224f, 2.87931299f, 5.4995265f },
		  { -0.00033830243f, -0.0216115192f, -0.0913980156f, -0.0461303741f, 0.293499529f, 0.5f, 0.744625747f, 1.01710594f, 1.09884799f, 1.02782476f, 1.00071955f } },
		{ { -0.0148357386f, -0.133632496f, -0.262590945f, -0.260145456f, -0.109455876f, 0, 0.172332764f, 0.551979601f, 1.22636163f, 2.74875474f, 5.4776144f },
		  { -0.0123264315f, -0.0847647116f, -0.0675645098f, 0.104100212f, 0.376289994f, 0.5f, 0.647780061f, 0.861102223f, 1.04129422f, 1.09120369f, 1.01822436f } },
	};
	static const char *names[4] = { "gelu", "gelu_tanh", "quick_gelu", "silu" };
	static const int acts[4] = { SW_ACT_GELU, SW_ACT_GELU_TANH, SW_ACT_QUICK_GELU, SW_ACT_SILU };
	float ones[11], y[11], dx[11];
	for (int i = 0; i < 11; i++)
		ones[i] = 1;
	for (int a = 0; a < 4; a++) {
		ops->act_fwd(y, x, 11, acts[a]);
		ops->act_bwd(dx, ones, x, 11, acts[a]);
		double ey = 0, ed = 0;
		for (int i = 0; i < 11; i++) {
			ey = fmax(ey, fabs(y[i] - want[a][0][i]));
			ed = fmax(ed, fabs(dx[i] - want[a][1][i]));
		}
		ok(ey < 1e-6, "act %s forward equals PyTorch's (err %.2g)", names[a], ey);
		ok(ed < 1e-6, "act %s backward equals PyTorch's gradient (err %.2g)", names[a], ed);
	}
	/* Backward overwrites dx and scales by dy. */
	float dy[11];
	for (int i = 0; i < 11; i++)
		dy[i] = 0.5f * (float)i - 2, dx[i] = 1e9f;
	ops->act_bwd(dx, dy, x, 11, SW_ACT_GELU);
	double e = 0;
	for (int i = 0; i < 11; i++)
		e = fmax(e, fabs(dx[i] - dy[i] * want[0][1][i]));
	ok(e < 1e-5, "act backward overwrites dx with dy * act'(x) (err %.2g)", e);
}

/* ---- swiglu, bias ------------------------------------------------------- */
struct sg_ctx { float *g, *u, *h, *R; size_t n; };
static double sg_loss_(void *p)
{
	struct sg_ctx *c = p;
	ops->swiglu_fwd(c->h, c->g, c->u, c->n);
	return dot_(c->h, c->R, c->n);
}
static void test_swiglu_(void)
{
	size_t n = 64;
	struct sg_ctx c = { rnd_(n, 4), rnd_(n, 2), zeros_(n), rnd_(n, 1), n };
	sg_loss_(&c);
	int good = 1;
	for (size_t i = 0; i < n; i++)
		good &= fabs(c.h[i] - c.g[i] / (1 + exp(-(double)c.g[i])) * c.u[i]) < 1e-5;
	ok(good, "swiglu forward is silu(gate) * up");
	float *dg = zeros_(n), *du = zeros_(n);
	ops->swiglu_bwd(dg, du, c.R, c.g, c.u, n);
	double e1 = fd_check_(sg_loss_, &c, c.g, dg, n, NULL, 0, 1e-2f);
	double e2 = fd_check_(sg_loss_, &c, c.u, du, n, NULL, 0, 1e-2f);
	ok(e1 < 2e-3, "swiglu d/dgate by finite differences (rel err %.2g)", e1);
	ok(e2 < 2e-3, "swiglu d/dup by finite differences (rel err %.2g)", e2);
	free(c.g), free(c.u), free(c.h), free(c.R), free(dg), free(du);
}

static void test_bias_(void)
{
	int T = 7, N = 5;
	float *y = rnd_(T * N, 1), *b = rnd_(N, 1), *y0 = malloc(T * N * sizeof(float));
	memcpy(y0, y, T * N * sizeof(float));
	ops->bias_fwd(y, b, T, N);
	int good = 1;
	for (int i = 0; i < T * N; i++)
		good &= y[i] == y0[i] + b[i % N];
	ok(good, "bias forward adds the bias to each row");
	float *db = rnd_(N, 1), *db0 = malloc(N * sizeof(float));
	memcpy(db0, db, N * sizeof(float));
	ops->bias_bwd(db, y0, T, N);
	good = 1;
	for (int j = 0; j < N; j++) {
		double s = db0[j];
		for (int t = 0; t < T; t++)
			s += y0[t * N + j];
		good &= fabs(db[j] - s) < 1e-5;
	}
	ok(good, "bias backward accumulates the column sums");
	float x[3] = { 1, 2, 3 }, z[3] = { 10, 20, 30 };
	ops->add(z, x, 3);
	ok(z[0] == 11 && z[1] == 22 && z[2] == 33, "add accumulates");
	ops->scale(z, 0.5f, 3);
	ok(z[0] == 5.5f && z[2] == 16.5f, "scale multiplies");
	ok(fabs(ops->sumsq(z, 3) - (5.5 * 5.5 + 11 * 11 + 16.5 * 16.5)) < 1e-9, "sumsq");
	free(y), free(b), free(y0), free(db), free(db0);
}

/* ---- log-probabilities and entropy --------------------------------------- */
struct lp_ctx { float *z, *lp, *ent, *lse, *a, *b; int32_t *tgt; int T, V; };
static double lp_loss_(void *p)
{
	struct lp_ctx *c = p;
	ops->logprob_fwd(c->lp, c->ent, c->lse, c->z, c->tgt, c->T, c->V);
	return dot_(c->lp, c->a, c->T) + dot_(c->ent, c->b, c->T);
}
static void test_logprob_(void)
{
	int T = 6, V = 13;
	int32_t tgt[6] = { 3, -1, 12, 0, 5, 5 };
	struct lp_ctx c = { rnd_(T * V, 3), zeros_(T), zeros_(T), zeros_(T), rnd_(T, 1), rnd_(T, 1),
	                    tgt, T, V };
	lp_loss_(&c);
	int good = 1;
	for (int t = 0; t < T; t++) {
		double m = -1e300, s = 0, h = 0;
		for (int j = 0; j < V; j++)
			m = c.z[t * V + j] > m ? c.z[t * V + j] : m;
		for (int j = 0; j < V; j++)
			s += exp(c.z[t * V + j] - m);
		for (int j = 0; j < V; j++) {
			double lpj = c.z[t * V + j] - m - log(s);
			h -= exp(lpj) * lpj;
		}
		double lp = tgt[t] < 0 ? 0 : c.z[t * V + tgt[t]] - m - log(s);
		good &= fabs(c.lp[t] - lp) < 1e-5 && fabs(c.ent[t] - h) < 1e-5;
	}
	ok(good, "log-probabilities and entropy match (ignored target gives 0)");
	float *g = malloc(T * V * sizeof(float));
	memcpy(g, c.z, T * V * sizeof(float));
	ops->logprob_bwd(g, c.lse, c.ent, c.a, c.b, tgt, T, V);
	double e = fd_check_(lp_loss_, &c, c.z, g, T * V, NULL, 0, 1e-2f);
	ok(e < 2e-3, "d(lp, entropy)/d(logits) by finite differences (rel err %.2g)", e);
	memcpy(g, c.z, T * V * sizeof(float));
	ops->logprob_bwd(g, c.lse, NULL, c.a, NULL, tgt, T, V);
	double s = 0;
	for (int j = 0; j < V; j++)
		s += fabs(g[1 * V + j]);
	ok(s == 0, "an ignored target gets no gradient");
	free(c.z), free(c.lp), free(c.ent), free(c.lse), free(c.a), free(c.b), free(g);
}

/* ---- AdamW ------------------------------------------------------------------ */
static void test_adamw_(void)
{
	size_t n = 50;
	float *p = rnd_(n, 1), *m = zeros_(n), *v = zeros_(n);
	double *P = malloc(n * sizeof *P), *M = calloc(n, sizeof *M), *Vv = calloc(n, sizeof *Vv);
	for (size_t i = 0; i < n; i++)
		P[i] = p[i];
	double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
	for (int step = 1; step <= 5; step++) {
		float *g = rnd_(n, 1);
		double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
		for (size_t i = 0; i < n; i++) {
			P[i] *= 1 - lr * wd;
			M[i] = b1 * M[i] + (1 - b1) * g[i];
			Vv[i] = b2 * Vv[i] + (1 - b2) * (double)g[i] * g[i];
			P[i] -= lr / bc1 * M[i] / (sqrt(Vv[i]) / sqrt(bc2) + eps);
		}
		/* Steps 2 and 4 clip: the op sees the unclipped gradient and the coefficient. */
		float gs = step % 2 ? 1.0f : 0.5f;
		for (size_t i = 0; i < n; i++)
			g[i] /= gs;
		ops->adamw(p, g, gs, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
		           (float)bc1, (float)bc2);
		free(g);
	}
	double sc, d = maxdiff_(p, P, n, &sc);
	ok(d < 1e-6, "adamw follows torch.optim.AdamW's update over 5 steps (err %.2g)", d);
	free(p), free(m), free(v), free(P), free(M), free(Vv);
}

/*
 * Several matrices in one call: each part's C the bits of its own
 * linear_rows call, C's beside untouched.  Parts of whole and short blocks
 * (48 rows of W, 16 for one row), of none, past K's share of 1024, more
 * parts than one call takes (chunked), with beta 0 and 1.
 */
static void test_linear_rows_parts_(int level)
{
	int cases[][7] = { /* M, K, n, then n parts' rows */
		{ 32, 64, 3, 96, 48, 48 }, { 1, 80, 3, 64, 16, 16 }, { 5, 37, 2, 50, 70 },
		{ 9, 1040, 3, 20, 0, 33 }, { 64, 96, 2, 192, 100 }, { 13, 48, 1, 61 },
		{ 4, 32, 4, 7, 1, 48, 5 }, { 2, 16, 3, 3, 0, 0 },
	};
	for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
		int M = cases[ci][0], K = cases[ci][1], n = cases[ci][2], *N = cases[ci] + 3;
		sw_rows_part p[4];
		float *W[4], *C[4], *R[4];
		float *A = rnd_((size_t)M * K, 1);
		for (int i = 0; i < n; i++) {
			W[i] = rnd_((size_t)N[i] * K + 1, 1);
			C[i] = rnd_((size_t)M * N[i] + 1, 1), R[i] = malloc(sizeof(float) * ((size_t)M * N[i] + 1));
			memcpy(R[i], C[i], sizeof(float) * ((size_t)M * N[i] + 1));
		}
		for (int beta = 0; beta <= 1; beta++) {
			for (int i = 0; i < n; i++) {
				p[i] = (sw_rows_part){ C[i], W[i], N[i] };
				ops->linear_rows(R[i], A, W[i], M, N[i], K, (float)beta);
			}
			ops->linear_rows_parts(p, n, A, M, K, (float)beta);
			int same = 1;
			for (int i = 0; i < n; i++)
				same &= memcmp(C[i], R[i], sizeof(float) * ((size_t)M * N[i] + 1)) == 0;
			ok(same, "linear_rows_parts (simd %d) M=%d K=%d, %d parts, beta %d: each part the bits of its own call",
			   level, M, K, n, beta);
		}
		free(A);
		for (int i = 0; i < n; i++)
			free(W[i]), free(C[i]), free(R[i]);
	}
	/* more parts than a call takes: the rest in another (CPU: chunks of 4) */
	int M = 6, K = 40, n = SW_ROWS_PARTS_MAX + 2;
	float *A = rnd_((size_t)M * K, 1), *W = rnd_((size_t)n * 20 * K, 1);
	float *C = zeros_((size_t)n * M * 20), *R = zeros_((size_t)n * M * 20);
	sw_rows_part p[SW_ROWS_PARTS_MAX + 2];
	for (int i = 0; i < n; i++) {
		p[i] = (sw_rows_part){ C + (size_t)i * M * 20, W + (size_t)i * 20 * K, 20 };
		ops->linear_rows(R + (size_t)i * M * 20, A, p[i].W, M, 20, K, 0);
	}
	ops->linear_rows_parts(p, n, A, M, K, 0);
	ok(memcmp(C, R, sizeof(float) * (size_t)n * M * 20) == 0,
	   "linear_rows_parts (simd %d): %d parts, past the %d a call takes, each its own bits", level, n,
	   SW_ROWS_PARTS_MAX);
	free(A), free(W), free(C), free(R);
}

/* Whether /proc/cpuinfo names an AMD CPU (-1: not readable). */
static int cpuinfo_amd_(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return -1;
	char line[256];
	int amd = 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "vendor_id", 9)) {
			amd = strstr(line, "AuthenticAMD") != NULL;
			break;
		}
	fclose(f);
	return amd;
}

/* The AVX-512 one-row kernel asks for W into L1 or L2 (two versions of it):
 * the choice, its default by CPU, and each version's products. */
static void test_row_prefetch_(void)
{
	ok(sw_backend_cpu_row_prefetch(1) == 1, "row prefetch: L1 chosen");
	test_linear_rows_(2);
	test_linear_rows_parts_(2);
	ok(sw_backend_cpu_row_prefetch(2) == 2, "row prefetch: L2 chosen");
	test_linear_rows_(2);
	test_linear_rows_parts_(2);
	int amd = cpuinfo_amd_(), def = sw_backend_cpu_row_prefetch(-1);
	if (amd < 0)
		ok(def == 1 || def == 2, "row prefetch: a default level (%d; no /proc/cpuinfo)", def);
	else
		ok(def == (amd ? 2 : 1), "row prefetch: the default is L%d on this %s CPU", def,
		   amd ? "AMD" : "non-AMD");
	ok(sw_backend_cpu_row_prefetch(7) == def, "row prefetch: a level not 1 or 2 is the default");
	sw_backend_cpu_simd(1);
	ok(sw_backend_cpu_row_prefetch(2) == 0, "row prefetch: none below AVX-512 (its kernels alone ask)");
	sw_backend_cpu_simd(2);
	ok(sw_backend_cpu_row_prefetch(-1) == def, "row prefetch: the default again at AVX-512");
}

int main(void)
{
	ops = sw_backend_cpu();
	sw_backend_cpu_threads(2);
	test_gemm_();
	/* Every vector level this machine has, and portable = AVX2 bit for bit. */
	int top = sw_backend_cpu_simd(-1);
	for (int level = 0; level <= top; level++) {
		sw_backend_cpu_simd(level);
		test_linear_rows_(level);
		test_linear_rows_parts_(level);
	}
	if (top == 2)
		test_row_prefetch_();
	if (top >= 1) {
		int M = 6, N = 11, K = 45;
		float *A = rnd_(M * K, 1), *W = rnd_(N * K, 1), *C0 = zeros_(M * N), *C1 = zeros_(M * N);
		sw_backend_cpu_simd(0);
		ops->linear_rows(C0, A, W, M, N, K, 0);
		sw_backend_cpu_simd(1);
		ops->linear_rows(C1, A, W, M, N, K, 0);
		ok(memcmp(C0, C1, sizeof(float) * M * N) == 0, "linear_rows: portable and AVX2 give the same bits");
		free(A), free(W), free(C0), free(C1);
	}
	sw_backend_cpu_simd(-1);
	test_embed_();
	test_rmsnorm_();
	test_rope_();
	int32_t cu1[4] = { 0, 5, 6, 14 };
	test_attention_(3, cu1, 4, 2, 8, 0, 1);
	test_attention_(3, cu1, 4, 2, 8, 0, 0);
	int32_t cu2[2] = { 0, 9 };
	test_attention_(1, cu2, 3, 3, 4, 0, 1);
	/* Longer than one 128-row tile: checked on a sample of entries. */
	int32_t cu3[3] = { 0, 300, 431 };
	test_attention_(2, cu3, 2, 1, 8, 40, 1);
	test_attention_(2, cu3, 2, 1, 8, 40, 0);
	/* A head of 20: the paged attention's 16 lanes and a tail. */
	test_attention_(3, cu1, 4, 2, 20, 0, 1);
	/* Heads of 64 and 88: the paged attention's values 64, 16 and 1 at a time. */
	test_attention_(3, cu1, 4, 2, 64, 40, 1);
	test_attention_(3, cu1, 2, 1, 88, 40, 1);
	/* 40 and 17 keys, a head of 72: whole pages of 16 and part pages, a tail. */
	int32_t cu4[3] = { 0, 40, 57 };
	test_attention_(2, cu4, 2, 1, 72, 20, 1);
	/* Groups of 7 and 9 query heads a KV head: more than one task's 4 heads. */
	test_attention_(3, cu1, 14, 2, 16, 0, 1);
	test_paged_heads_(14, 2, 64);
	test_paged_heads_(9, 1, 20);
	test_paged_heads_(9, 3, 64);
	test_paged_heads_(2, 2, 64);
	/* a shared prefix: short ones, and a prefix and a child each past one tile */
	const int lc1[3] = { 5, 3, 1 }, lc2[2] = { 140, 7 };
	test_attention_prefix_(6, lc1, 3, 4, 4, 2, 8);
	test_attention_prefix_(150, lc2, 2, 130, 2, 1, 16);
	test_attention_prefix_(1, lc1, 3, 2, 3, 3, 20);
	test_layernorm_(1);
	test_layernorm_(0);
	test_act_();
	test_swiglu_();
	test_bias_();
	test_logprob_();
	test_adamw_();
	return tap_done();
}
