/*
 * backend_cpu.c - the CPU backend (backend.h): the reference.  Its device
 * memory is host memory (aligned_alloc), so copies are memcpy and a model's
 * arena is read in place: nothing costs more than before the seam.
 *
 * GEMMs go to a provider of gemm.h's (oneDNN, or OpenBLAS by $SW_GEMM), on
 * OpenMP's one pool of threads; decoding's products to linear_rows.h's
 * batch-invariant kernels; everything else is plain C parallelised with
 * OpenMP.
 * Training attention is tiled into blocks of query rows and done with
 * GEMMs (scores, then probabilities times values): it is a few percent of a
 * step's FLOPs, and plain loops would make it a third of the time.
 */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif
#include "common/internal.h"
#include "compute/backend.h"
#include "compute/cpu/gemm.h"
#include "compute/cpu/linear_rows.h"
#include "compute/cpu/vmath.h"

/* Query rows per attention tile: bounds scratch to 2 * QB * maxlen floats. */
#define QB 128

/* Worth a parallel region: below this many elements the barrier costs more
 * than the threads win (decoding one token runs hundreds of tiny ops). */
#define BIG_(n) ((n) >= 32768)

/*
 * The backend's state: the one CPU device of the process (ops take no
 * handle, backend.h), set up once by sw_backend_cpu().  gemm is the
 * provider of the products (gemm.h), from $SW_GEMM; a name it does not know
 * leaves the default in place, so no op runs on garbage, and gemm_err,
 * which every sync reports, so no computation is taken for done.  The first
 * product that failed (oneDNN out of memory: its result was never written)
 * is kept in run_err, under mu (products run on several threads inside
 * attention's parallel regions), and every sync after it reports it.  The
 * precision of the products is f32 unless sw_backend_matmul asks for bf16
 * (a bf16 product's failure is also reported by every sync).
 */
static struct {
	pthread_once_t once;
	pthread_mutex_t mu;
	sw_gemm gemm;
	sw_error gemm_err, run_err;
} st_ = { .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER };

static void gemm_(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
	sw_error e;
	if (!sw_gemm_run(&st_.gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, &e))
		return;
	pthread_mutex_lock(&st_.mu);
	if (!st_.run_err.code)
		sw_fail(&st_.run_err, e.code, "cpu: %s", e.msg);
	pthread_mutex_unlock(&st_.mu);
}

/* ---- memory: host memory ---- */

/*
 * Past 8 MiB, memory in huge pages (2 MiB) where the kernel gives them
 * (transparent huge pages "always" or "madvise"; a hint, nothing where they
 * are off): a training step's arenas (weights, gradients, moments,
 * activations) and the decoder's KV cache are read and written across
 * hundreds of MiB, and with 4 KiB pages a page walk came with every few
 * runs (a KV head's page run is 4 KiB: kv_write took 96 us a layer at 32
 * rows with 4 KiB pages, 46 with huge ones; bench/RESULTS.md, "hugepages").
 * A huge page is committed whole at its first touch: the decoder's cache
 * is laid out so that the pages in use are one run (decoder.c).
 */
#define HUGE_PAGE_ ((size_t)2 << 20)
static void *alloc_(size_t bytes, sw_error *err)
{
	void *p;
	if (bytes >= 4 * HUGE_PAGE_) {
		size_t n = (bytes + HUGE_PAGE_ - 1) & ~(HUGE_PAGE_ - 1);
		if ((p = aligned_alloc(HUGE_PAGE_, n)))
			madvise(p, n, MADV_HUGEPAGE);
	} else {
		p = aligned_alloc(64, ((bytes ? bytes : 1) + 63) & ~(size_t)63);
	}
	if (!p)
		sw_fail(err, SW_ENOMEM, "cpu: out of memory for %zu bytes", bytes);
	return p;
}

static void free_(void *p)
{
	free(p);
}

static void *borrow_(void *host, size_t bytes, sw_error *err)
{
	(void)bytes, (void)err;
	return host;
}

static void unborrow_(void *p)
{
	(void)p;
}

/* Fills and copies of a megabyte and more go over the threads, in pieces of
 * 256 KiB: one thread fills a gradient arena (438 MB at 110M parameters) at
 * about half the rate two reach, and a fresh arena's page faults are taken
 * by both (bench/RESULTS.md "profile"). */
#define MEM_PAR_ ((size_t)1 << 20)
#define MEM_PIECE_ ((size_t)256 << 10)

/* Bytes of piece i of n bytes (the last may be short). */
static inline size_t piece_(size_t n, size_t i)
{
	size_t at = i * MEM_PIECE_;
	return n - at < MEM_PIECE_ ? n - at : MEM_PIECE_;
}

static int memset_(void *dst, int byte, size_t n, sw_error *err)
{
	(void)err;
#pragma omp parallel for schedule(static) if (n >= MEM_PAR_)
	for (size_t i = 0; i < (n + MEM_PIECE_ - 1) / MEM_PIECE_; i++)
		memset((char *)dst + i * MEM_PIECE_, byte, piece_(n, i));
	return SW_OK;
}

static int memcpy_(void *dst, const void *src, size_t n, sw_error *err)
{
	(void)err;
#pragma omp parallel for schedule(static) if (n >= MEM_PAR_)
	for (size_t i = 0; i < (n + MEM_PIECE_ - 1) / MEM_PIECE_; i++)
		memcpy((char *)dst + i * MEM_PIECE_, (const char *)src + i * MEM_PIECE_, piece_(n, i));
	return SW_OK;
}

static const void *host_view_(const void *p)
{
	return p;
}

static int sync_(sw_error *err)
{
	const sw_error *bf = sw_gemm_error(&st_.gemm);
	if (bf) {
		if (err)
			*err = *bf;
		return bf->code;
	}
	if (st_.gemm_err.code) {
		if (err)
			*err = st_.gemm_err;
		return st_.gemm_err.code;
	}
	pthread_mutex_lock(&st_.mu);
	int rc = st_.run_err.code;
	if (rc && err)
		*err = st_.run_err;
	pthread_mutex_unlock(&st_.mu);
	return rc;
}

/*
 * One row's head (hd floats) into its slot of a page.  Where the slot is
 * whole cache lines (64-byte aligned, hd a multiple of 16), with stores that
 * bypass the cache: the slot's lines were last touched pages ago, so an
 * ordinary store first reads each line from memory (a read for ownership),
 * and a decoding step's 32 rows x heads x K and V queued on those reads
 * (128 us a layer for 32 rows of the 110M model, 3% of its step).  A
 * streamed line is written whole, without that read; the attention that
 * follows reads the slot from memory as it reads every other.
 */
static void put_head_(float *dst, const float *src, int hd)
{
#if defined(__x86_64__) && defined(__SSE2__)
	if (hd % 16 == 0 && (uintptr_t)dst % 64 == 0) {
		for (int i = 0; i < hd; i += 4)
			_mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
		return;
	}
#endif
	memcpy(dst, src, sizeof(float) * hd);
}

static void kv_write_(float *kpool, float *vpool, const float *k, const float *v, int n, int kd,
                      int hd, int page, size_t stride, const int32_t *ptab, const int32_t *poff,
                      const int32_t *pos)
{
	size_t hs = (size_t)page * hd;
	for (int j = 0; j < n; j++) {
		size_t at = (size_t)ptab[poff[j] + pos[j] / page] * stride + (size_t)(pos[j] % page) * hd;
		for (int g = 0; g < kd / hd; g++) {
			put_head_(kpool + at + g * hs, k + (size_t)j * kd + (size_t)g * hd, hd);
			put_head_(vpool + at + g * hs, v + (size_t)j * kd + (size_t)g * hd, hd);
		}
	}
#if defined(__x86_64__) && defined(__SSE2__)
	_mm_sfence(); /* streamed stores are weakly ordered: done before any thread reads them */
#endif
}

/* Whether z[0..n) are all finite: 0 * Inf and anything * NaN are NaN, so
 * one multiply-add per element, in 16 lanes (the order of the adds does not
 * matter: the sum is 0 or NaN), one clone per vector width (vmath.h).  A
 * single chain of adds took 35 us a row of 49152 logits here, 16 lanes 8 us
 * (reading the row at the memory's rate). */
#define FIN_LANES_ 16
SW_VEC static int row_finite_(const float *z, int n)
{
	float acc[FIN_LANES_] = { 0 };
	int n16 = n / FIN_LANES_ * FIN_LANES_;
	for (int c = 0; c < n16; c += FIN_LANES_)
		for (int l = 0; l < FIN_LANES_; l++)
			acc[l] += z[c + l] * 0.0f;
	float a = 0;
	for (int l = 0; l < FIN_LANES_; l++)
		a += acc[l];
	for (int c = n16; c < n; c++)
		a += z[c] * 0.0f;
	return a == 0.0f;
}

static int first_nonfinite_(const float *x, int rows, int cols)
{
	for (int j = 0; j < rows; j++)
		if (!row_finite_(x + (size_t)j * cols, cols))
			return j;
	return -1;
}

/* ---- ops ---- */

static void embed_fwd_(float *out, const float *table, const int32_t *tok, int T, int D)
{
#pragma omp parallel for if (BIG_((size_t)T * D))
	for (int t = 0; t < T; t++)
		memcpy(out + (size_t)t * D, table + (size_t)tok[t] * D, (size_t)D * sizeof(float));
}

static void embed_bwd_(float *dtable, const float *dout, const int32_t *tok, int T, int D)
{
	/* Tokens repeat, so threads split the columns, not the tokens. */
#pragma omp parallel if (BIG_((size_t)T * D))
	{
		int nt = omp_get_num_threads(), me = omp_get_thread_num();
		int chunk = (D + nt - 1) / nt, d0 = me * chunk, d1 = d0 + chunk < D ? d0 + chunk : D;
		for (int t = 0; t < T; t++) {
			float *dst = dtable + (size_t)tok[t] * D;
			const float *src = dout + (size_t)t * D;
			for (int d = d0; d < d1; d++)
				dst[d] += src[d];
		}
	}
}

static void rmsnorm_fwd_(float *out, float *rstd, const float *x, const float *w, int T, int D,
                         float eps)
{
#pragma omp parallel for if (BIG_((size_t)T * D))
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * D;
		float *o = out + (size_t)t * D;
		float ss = 0;
#pragma omp simd reduction(+ : ss)
		for (int d = 0; d < D; d++)
			ss += xr[d] * xr[d];
		float r = 1.0f / sqrtf(ss / (float)D + eps);
		rstd[t] = r;
		/* In Hugging Face's order: normalise, then scale by the weight. */
		for (int d = 0; d < D; d++)
			o[d] = w[d] * (xr[d] * r);
	}
}

static void rmsnorm_bwd_(float *dx, float *dw, const float *dout, const float *x,
                         const float *w, const float *rstd, int T, int D)
{
#pragma omp parallel for if (BIG_((size_t)T * D))
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
		float *dxr = dx + (size_t)t * D;
		float r = rstd[t], dot = 0;
#pragma omp simd reduction(+ : dot)
		for (int d = 0; d < D; d++)
			dot += g[d] * w[d] * xr[d];
		float c = dot * r * r * r / (float)D;
		for (int d = 0; d < D; d++)
			dxr[d] += g[d] * w[d] * r - c * xr[d];
	}
	/* dw sums over rows: split the columns so no two threads share one. */
#pragma omp parallel if (BIG_((size_t)T * D))
	{
		int nt = omp_get_num_threads(), me = omp_get_thread_num();
		int chunk = (D + nt - 1) / nt, d0 = me * chunk, d1 = d0 + chunk < D ? d0 + chunk : D;
		for (int t = 0; t < T; t++) {
			const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
			float r = rstd[t];
			for (int d = d0; d < d1; d++)
				dw[d] += g[d] * xr[d] * r;
		}
	}
}

/* Mean and variance in double, two passes: the rows are short (a vision
 * tower's width) and PyTorch's own are exact to float rounding. */
static void layernorm_fwd_(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, int T, int D, float eps)
{
#pragma omp parallel for if (BIG_((size_t)T * D))
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * D;
		float *o = out + (size_t)t * D;
		double s = 0, ss = 0;
		for (int d = 0; d < D; d++)
			s += xr[d];
		float mu = (float)(s / D);
		for (int d = 0; d < D; d++)
			ss += ((double)xr[d] - mu) * ((double)xr[d] - mu);
		float r = (float)(1.0 / sqrt(ss / D + (double)eps));
		mean[t] = mu, rstd[t] = r;
		for (int d = 0; d < D; d++) {
			float y = (xr[d] - mu) * r * w[d];
			o[d] = b ? y + b[d] : y;
		}
	}
}

static void layernorm_bwd_(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int T, int D)
{
#pragma omp parallel for if (BIG_((size_t)T * D))
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
		float *dxr = dx + (size_t)t * D;
		float mu = mean[t], r = rstd[t];
		double sg = 0, sgx = 0;
		for (int d = 0; d < D; d++) {
			float gw = g[d] * w[d];
			sg += gw;
			sgx += (double)gw * ((xr[d] - mu) * r);
		}
		float mg = (float)(sg / D), mgx = (float)(sgx / D);
		for (int d = 0; d < D; d++)
			dxr[d] += r * (g[d] * w[d] - mg - (xr[d] - mu) * r * mgx);
	}
	/* dw, db sum over rows: split the columns so no two threads share one. */
#pragma omp parallel if (BIG_((size_t)T * D))
	{
		int nt = omp_get_num_threads(), me = omp_get_thread_num();
		int chunk = (D + nt - 1) / nt, d0 = me * chunk, d1 = d0 + chunk < D ? d0 + chunk : D;
		for (int t = 0; t < T; t++) {
			const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
			float mu = mean[t], r = rstd[t];
			for (int d = d0; d < d1; d++) {
				dw[d] += g[d] * ((xr[d] - mu) * r);
				if (db)
					db[d] += g[d];
			}
		}
	}
}

/* The cos and sin of position p's angles i0 .. i0 + n into c and s: the
 * angle in float32, as transformers computes it. */
static void rope_cs_(int32_t p, const float *inv_freq, int i0, int n, float *c, float *s)
{
	for (int i = 0; i < n; i++) {
		float ang = (float)p * inv_freq[i0 + i];
		c[i] = (float)cos((double)ang), s[i] = (float)sin((double)ang);
	}
}

/* Rotate pairs i0 .. i0 + n of one token's heads by the angles of cos c and
 * sin sn: a head's pairs side by side (pair i touches r[i] and
 * r[i + hd / 2] alone: no two overlap), one clone per vector width. */
SW_VEC static void rope_heads_(float *x, int nh, int hd, int i0, int n, const float *c,
                               const float *sn, int inverse)
{
	int half = hd / 2;
	for (int h = 0; h < nh; h++) {
		float *r = x + (size_t)h * hd + i0;
#pragma omp simd
		for (int i = 0; i < n; i++) {
			float a = r[i], b = r[i + half], s = inverse ? -sn[i] : sn[i];
			r[i] = a * c[i] - b * s;
			r[i + half] = b * c[i] + a * s;
		}
	}
}

/*
 * Tokens share positions (a GRPO group's responses decode side by side, the
 * samples of a micro batch each start at 0), so where the positions span no
 * more than the tokens, each position's cos and sin are made once, into a
 * table the tokens read: the same values, so the same bits, with fewer
 * calls of libm's cos and sin (most of this op's time).  Elsewhere, or
 * without memory for the table, each token makes its own, RC_ pairs at a
 * time.
 */
#define RC_ 64
static void rope_(float *x, const int32_t *pos, int T, int nh, int hd, const float *inv_freq,
                  int inverse)
{
	int half = hd / 2;
	bool big = BIG_((size_t)T * nh * hd);
	int32_t lo = T > 0 ? pos[0] : 0, hi = lo;
	for (int t = 1; t < T; t++) {
		lo = pos[t] < lo ? pos[t] : lo;
		hi = pos[t] > hi ? pos[t] : hi;
	}
	size_t span = T > 1 ? (size_t)((int64_t)hi - lo + 1) : 0;
	float *tab = span > 0 && span <= (size_t)T ? malloc(sizeof *tab * 2 * half * span) : NULL;
	unsigned char *seen = tab ? calloc(span, 1) : NULL;
	if (!seen) {
		free(tab);
#pragma omp parallel for if (big)
		for (int t = 0; t < T; t++)
			for (int i0 = 0; i0 < half; i0 += RC_) {
				int n = half - i0 < RC_ ? half - i0 : RC_;
				float c[RC_], sn[RC_];
				rope_cs_(pos[t], inv_freq, i0, n, c, sn);
				rope_heads_(x + (size_t)t * nh * hd, nh, hd, i0, n, c, sn, inverse);
			}
		return;
	}
	for (int t = 0; t < T; t++)
		seen[pos[t] - lo] = 1;
#pragma omp parallel if (big)
	{
		/* row of position lo + u: its half cos, then its half sin */
#pragma omp for
		for (size_t u = 0; u < span; u++)
			if (seen[u])
				rope_cs_(lo + (int32_t)u, inv_freq, 0, half, tab + u * 2 * half,
				         tab + u * 2 * half + half);
#pragma omp for
		for (int t = 0; t < T; t++) {
			const float *c = tab + (size_t)(pos[t] - lo) * 2 * half;
			rope_heads_(x + (size_t)t * nh * hd, nh, hd, 0, half, c, c + half, inverse);
		}
	}
	free(tab), free(seen);
}

static size_t attn_scratch_(int maxlen)
{
	/* Two QB x maxlen tiles for each thread. */
	return (size_t)omp_get_max_threads() * 2 * QB * (size_t)(maxlen > 0 ? maxlen : 1);
}

/*
 * The loops of the softmaxes (attention's rows, the vocabulary's), one
 * clone per vector width (vmath.h).  Sums run in LANES_ fixed lanes, added
 * up in a fixed order, so every clone gives the same bits.
 */
#define LANES_ 16

/* The largest of x[0..n) (NaNs skipped). */
SW_VEC static float row_max_(const float *x, int n)
{
	float mx[LANES_];
	for (int l = 0; l < LANES_; l++)
		mx[l] = -INFINITY;
	int n16 = n / LANES_ * LANES_;
	for (int j = 0; j < n16; j += LANES_)
		for (int l = 0; l < LANES_; l++)
			mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];
	float m = -INFINITY;
	for (int j = n16; j < n; j++)
		m = x[j] > m ? x[j] : m;
	for (int l = 0; l < LANES_; l++)
		m = mx[l] > m ? mx[l] : m;
	return m;
}

static double lanes_dsum_(const double *t)
{
	double s = 0;
	for (int l = 0; l < LANES_; l++)
		s += t[l];
	return s;
}

/* sum = sum_j e^(x_j - m), zsum = sum_j e^(x_j - m) (x_j - m), in double. */
SW_VEC static void row_expsum_(const float *x, int n, float m, double *sum, double *zsum)
{
	double s[LANES_] = { 0 }, zs[LANES_] = { 0 };
	int n16 = n / LANES_ * LANES_;
	for (int j = 0; j < n16; j += LANES_)
		for (int l = 0; l < LANES_; l++) {
			float d = x[j + l] - m, e = sw_expf(d);
			s[l] += (double)e;
			zs[l] += (double)(e * d);
		}
	double a = lanes_dsum_(s), b = lanes_dsum_(zs);
	for (int j = n16; j < n; j++) {
		float d = x[j] - m, e = sw_expf(d);
		a += (double)e;
		b += (double)(e * d);
	}
	*sum = a, *zsum = b;
}

/* sum_j e^(x_j - m) in double: row_expsum_'s sum, the same bits, without
 * the entropy's zsum (attention has no use for it). */
SW_VEC static double row_sumexp_(const float *x, int n, float m)
{
	double s[LANES_] = { 0 };
	int n16 = n / LANES_ * LANES_;
	for (int j = 0; j < n16; j += LANES_)
		for (int l = 0; l < LANES_; l++)
			s[l] += (double)sw_expf(x[j + l] - m);
	double a = lanes_dsum_(s);
	for (int j = n16; j < n; j++)
		a += (double)sw_expf(x[j] - m);
	return a;
}

/* x_j = e^(x_j - l): the probabilities, given the log-sum-exp l. */
SW_VEC static void row_exp_(float *x, int n, float l)
{
#pragma omp simd
	for (int j = 0; j < n; j++)
		x[j] = sw_expf(x[j] - l);
}

/* Scores of query rows i0..i0+nb-1 against keys 0..nk-1, turned into the
 * softmax P in place (row r sees keys 0..i0+r when causal, else all nk).
 * With have_lse the normaliser is taken from lse (backward), else computed
 * and stored. */
static void softmax_rows_(float *S, int nb, int nk, int i0, float *lse, int lse_stride,
                          int have_lse, int causal)
{
	for (int r = 0; r < nb; r++) {
		float *s = S + (size_t)r * nk;
		int last = causal ? i0 + r : nk - 1;
		float l;
		if (have_lse) {
			l = lse[(size_t)r * lse_stride];
		} else {
			float m = row_max_(s, last + 1);
			l = m + (float)log(row_sumexp_(s, last + 1, m));
			lse[(size_t)r * lse_stride] = l;
		}
		row_exp_(s, last + 1, l);
		for (int j = last + 1; j < nk; j++)
			s[j] = 0;
	}
}

/*
 * Attention is parallel over (sequence, key/value head) pairs, each thread
 * with its own tiles and single-threaded GEMMs: the tiles are small, and
 * splitting each of them across threads would cost a barrier per product.
 * A pair owns its rows of dk and dv, so the backward needs no atomics.
 *
 * With a shared prefix (prefix[s] >= 0), sequence s comes after the tokens
 * of sequence p = prefix[s]: a tile's scores are p's keys (all of them)
 * then s's own (causally), side by side in one row of Lp + nk.  In the
 * backward the pair (p, g) adds, after its own queries' terms, those of
 * each of its children's queries to p's dk and dv, children in order: the
 * same sums in the same order whatever the threads.  A sequence without a
 * prefix runs exactly the products it did before prefixes were added.
 */

/* Sequence s's prefix: its offset and length (0 when none). */
static int prefix_of_(const int32_t *cu, const int32_t *prefix, int s, int *po)
{
	int p = prefix ? prefix[s] : -1;
	*po = p >= 0 ? cu[p] : 0;
	return p >= 0 ? cu[p + 1] - cu[p] : 0;
}

/* The most keys a query sees: its sequence's length, with its prefix's. */
static int max_keys_(const int32_t *cu, const int32_t *prefix, int nseq)
{
	int most = 1, po;
	for (int s = 0; s < nseq; s++) {
		int n = prefix_of_(cu, prefix, s, &po) + cu[s + 1] - cu[s];
		most = n > most ? n : most;
	}
	return most;
}

static void attn_fwd_prefix_(float *out, float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
                             int causal, float *scratch)
{
	int qs = H * hd, ks = KVH * hd, grp = H / KVH, maxlen = max_keys_(cu, prefix, nseq);
	float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (BIG_((size_t)cu[nseq] * qs))
	for (int s = 0; s < nseq; s++)
		for (int g = 0; g < KVH; g++) {
			float *S = scratch + (size_t)omp_get_thread_num() * 2 * QB * maxlen;
			int o = cu[s], L = cu[s + 1] - cu[s], po, Lp = prefix_of_(cu, prefix, s, &po);
			const float *K = k + (size_t)o * ks + (size_t)g * hd;
			const float *V = v + (size_t)o * ks + (size_t)g * hd;
			const float *Kp = k + (size_t)po * ks + (size_t)g * hd;
			const float *Vp = v + (size_t)po * ks + (size_t)g * hd;
			for (int h = g * grp; h < (g + 1) * grp; h++)
				for (int i0 = 0; i0 < L; i0 += QB) {
					int nb = L - i0 < QB ? L - i0 : QB, nk = causal ? i0 + nb : L, ld = Lp + nk;
					const float *Q = q + (size_t)(o + i0) * qs + (size_t)h * hd;
					float *O = out + (size_t)(o + i0) * qs + (size_t)h * hd;
					if (Lp)
						gemm_(0, 1, nb, Lp, hd, scale, Q, qs, Kp, ks, 0, S, ld);
					gemm_(0, 1, nb, nk, hd, scale, Q, qs, K, ks, 0, S + Lp, ld);
					softmax_rows_(S, nb, ld, Lp + i0, lse + (size_t)(o + i0) * H + h, H, 0, causal);
					if (Lp)
						gemm_(0, 0, nb, hd, Lp, 1, S, ld, Vp, ks, 0, O, qs);
					gemm_(0, 0, nb, hd, nk, 1, S + Lp, ld, V, ks, Lp ? 1 : 0, O, qs);
				}
		}
}

static void attn_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	attn_fwd_prefix_(out, lse, q, k, v, cu, NULL, nseq, H, KVH, hd, causal, scratch);
}

/*
 * One tile of the backward: queries Q (nb rows, their dout, out and lse)
 * against nk keys K, V of which row r sees the first last0 + r + 1 (all nk
 * when last0 < 0).  P and dP get the probabilities and dS; dv and dk (if
 * not NULL) get their terms added; dq (if not NULL) gets dS K, added to it
 * when acc.
 */
static void attn_bwd_tile_(float *P, float *dP, int nb, int nk, int ld, int last0, const float *Q,
                           const float *dout, const float *out, const float *lse, int qs, int H,
                           const float *K, const float *V, int ks, int hd, float scale, float *dk,
                           float *dv, float *dq, int acc)
{
	gemm_(0, 1, nb, nk, hd, scale, Q, qs, K, ks, 0, P, ld);
	softmax_rows_(P, nb, ld, last0, (float *)lse, H, 1, last0 >= 0);
	gemm_(0, 1, nb, nk, hd, 1, dout, qs, V, ks, 0, dP, ld);
	for (int r = 0; r < nb; r++) {
		const float *g_ = dout + (size_t)r * qs;
		const float *o_ = out + (size_t)r * qs;
		float di = 0;
#pragma omp simd reduction(+ : di)
		for (int d = 0; d < hd; d++)
			di += g_[d] * o_[d];
		float *pr = P + (size_t)r * ld, *dpr = dP + (size_t)r * ld;
		for (int j = 0; j < nk; j++)
			dpr[j] = pr[j] * (dpr[j] - di);
	}
	if (dv)
		gemm_(1, 0, nk, hd, nb, 1, P, ld, dout, qs, 1, dv, ks);
	if (dq)
		gemm_(0, 0, nb, hd, nk, scale, dP, ld, K, ks, acc ? 1 : 0, dq, qs);
	if (dk)
		gemm_(1, 0, nk, hd, nb, scale, dP, ld, Q, qs, 1, dk, ks);
}

static void attn_bwd_prefix_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
                             int causal, float *scratch)
{
	int qs = H * hd, ks = KVH * hd, grp = H / KVH, maxlen = max_keys_(cu, prefix, nseq);
	float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (BIG_((size_t)cu[nseq] * qs))
	for (int s = 0; s < nseq; s++)
		for (int g = 0; g < KVH; g++) {
			float *P = scratch + (size_t)omp_get_thread_num() * 2 * QB * maxlen;
			float *dP = P + (size_t)QB * maxlen;
			int o = cu[s], L = cu[s + 1] - cu[s], po, Lp = prefix_of_(cu, prefix, s, &po);
			size_t kvo = (size_t)o * ks + (size_t)g * hd, pvo = (size_t)po * ks + (size_t)g * hd;
			for (int j = 0; j < L; j++) {
				memset(dk + kvo + (size_t)j * ks, 0, sizeof(float) * hd);
				memset(dv + kvo + (size_t)j * ks, 0, sizeof(float) * hd);
			}
			for (int h = g * grp; h < (g + 1) * grp; h++)
				for (int i0 = 0; i0 < L; i0 += QB) {
					int nb = L - i0 < QB ? L - i0 : QB, nk = causal ? i0 + nb : L;
					size_t qo = (size_t)(o + i0) * qs + (size_t)h * hd;
					const float *l = lse + (size_t)(o + i0) * H + h;
					/* dq's terms of the prefix's keys first (their dk, dv are the prefix's pair's) */
					if (Lp)
						attn_bwd_tile_(P, dP, nb, Lp, Lp, -1, q + qo, dout + qo, out + qo, l, qs, H,
						               k + pvo, v + pvo, ks, hd, scale, NULL, NULL, dq + qo, 0);
					attn_bwd_tile_(P, dP, nb, nk, nk, causal ? i0 : -1, q + qo, dout + qo, out + qo, l, qs, H,
					               k + kvo, v + kvo, ks, hd, scale, dk + kvo, dv + kvo, dq + qo, Lp > 0);
				}
			/* the terms of the sequences that continue this one, to its keys */
			for (int c = s + 1; prefix && c < nseq; c++) {
				if (prefix[c] != s)
					continue;
				int oc = cu[c], Lc = cu[c + 1] - cu[c];
				for (int h = g * grp; h < (g + 1) * grp; h++)
					for (int i0 = 0; i0 < Lc; i0 += QB) {
						int nb = Lc - i0 < QB ? Lc - i0 : QB;
						size_t qo = (size_t)(oc + i0) * qs + (size_t)h * hd;
						attn_bwd_tile_(P, dP, nb, L, L, -1, q + qo, dout + qo, out + qo,
						               lse + (size_t)(oc + i0) * H + h, qs, H, k + kvo, v + kvo, ks, hd,
						               scale, dk + kvo, dv + kvo, NULL, 0);
					}
			}
		}
}

static void attn_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	attn_bwd_prefix_(dq, dk, dv, dout, out, lse, q, k, v, cu, NULL, nseq, H, KVH, hd, causal, scratch);
}

/* The query heads of one KV group that one task of attn_paged_ takes at once. */
#define PAGED_HEADS_ 4

static size_t attn_paged_scratch_(int maxkeys)
{
	return (size_t)omp_get_max_threads() * PAGED_HEADS_ * (size_t)(maxkeys > 0 ? maxkeys : 1);
}

/* 16 floats as one value of GCC's and clang's vector extension: its
 * arithmetic is lane by lane, as the scalar code's, at every width. */
typedef float v16f_ __attribute__((vector_size(64)));

/*
 * The 16 x 16 transpose of a[0..16) (a[r] lane l -> a[l] lane r): four
 * rounds, each swapping the off-diagonal blocks of b x b (b = 8, 4, 2, 1).
 */
#define SWAP_(r, b, lo, hi)                                                           \
	do {                                                                              \
		v16f_ x_ = a[r], y_ = a[(r) + (b)];                                           \
		a[r] = __builtin_shufflevector(x_, y_, lo);                                   \
		a[(r) + (b)] = __builtin_shufflevector(x_, y_, hi);                           \
	} while (0)
#define LO8_ 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI8_ 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO4_ 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define HI4_ 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define LO2_ 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define HI2_ 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define LO1_ 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define HI1_ 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
static inline void transpose16_(v16f_ *a)
{
	/* unrolled, so that a[] stays in registers */
#pragma GCC unroll 8
	for (int r = 0; r < 8; r++)
		SWAP_(r, 8, LO8_, HI8_);
#pragma GCC unroll 2
	for (int r = 0; r < 16; r += 8)
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			SWAP_(r + i, 4, LO4_, HI4_);
#pragma GCC unroll 4
	for (int r = 0; r < 16; r += 4)
#pragma GCC unroll 2
		for (int i = 0; i < 2; i++)
			SWAP_(r + i, 2, LO2_, HI2_);
#pragma GCC unroll 8
	for (int r = 0; r < 16; r += 2)
		SWAP_(r, 1, LO1_, HI1_);
}

/*
 * One page of keys (nj rows ks floats apart): s_j = (q . k_j) scale.  Each
 * dot is summed in LANES_ fixed lanes (lane l: the products of elements
 * l, l + 16, ... in order), then acc_0 + acc_1, acc_2 + acc_3, ... added in
 * that order to 0, then the hd % 16 tail in order: the same bits at every
 * vector width.  Keys go 16 at a time: their 16 sums are transposed, so
 * the lanes' additions of the 16 keys are vector additions, each key's in
 * the order above; the keys left over go one by one, the same arithmetic.
 */
SW_VEC static void qk_page_(float *s, const float *q, const float *k, int nj, int ks, int hd,
                            float scale)
{
	int h16 = hd / LANES_ * LANES_, j = 0;
	for (; h16 > 0 && j + 16 <= nj; j += 16) {
		v16f_ a[16];
#pragma GCC unroll 16
		for (int r = 0; r < 16; r++)
			a[r] = (v16f_){ 0 };
		for (int d = 0; d < h16; d += 16) {
			v16f_ x;
			memcpy(&x, q + d, 64);
#pragma GCC unroll 16
			for (int r = 0; r < 16; r++) {
				v16f_ y;
				memcpy(&y, k + (size_t)(j + r) * ks + d, 64);
				a[r] += x * y;
			}
		}
		transpose16_(a);
		v16f_ dot = { 0 };
#pragma GCC unroll 8
		for (int l = 0; l < LANES_; l += 2)
			dot += a[l] + a[l + 1];
		float t[16];
		memcpy(t, &dot, 64);
		for (int r = 0; r < 16; r++) {
			const float *kr = k + (size_t)(j + r) * ks;
			float v = t[r];
			for (int d = h16; d < hd; d++)
				v += q[d] * kr[d];
			s[j + r] = v * scale;
		}
	}
	for (; j < nj; j++) {
		const float *kr = k + (size_t)j * ks;
		float acc[LANES_] = { 0 };
		for (int d = 0; d < h16; d += LANES_)
			for (int l = 0; l < LANES_; l++)
				acc[l] += q[d + l] * kr[d + l];
		float dot = 0;
		for (int l = 0; l < LANES_; l += 2)
			dot += acc[l] + acc[l + 1];
		for (int d = h16; d < hd; d++)
			dot += q[d] * kr[d];
		s[j] = dot * scale;
	}
}

/*
 * Ask for the run of keys j0 .. j0 + P - 1 (pool: the head's run in page 0;
 * its keys are nk; nothing past them), a cache line at a time: pages lie
 * anywhere in the pool, so the hardware's prefetchers, which follow a run,
 * do not find the next one.  Into L2 (prefetcht1): asked into L1, a page's
 * 64 lines at once held the core's few line fill buffers, and the op took
 * 0.9 of the time it took without asking; asked into L2, 0.6.  Always
 * inlined: as a function of its own, with nothing in it but prefetches, GCC
 * finds it free of side effects and drops every call (until 2026-12-07 the
 * op asked for nothing; tests/kernels.bats checks the objects).  Measured
 * on an AMD EPYC (Zen 4): bench/RESULTS.md, "kvl2".
 */
static inline __attribute__((always_inline)) void ask_run_(const float *pool, const int32_t *pt,
                                                          int j0, int P, int nk, size_t stride,
                                                          int hd)
{
	if (j0 >= nk)
		return;
	const float *r = pool + (size_t)pt[j0 / P] * stride;
	size_t n = (size_t)(nk - j0 < P ? nk - j0 : P) * hd;
	for (size_t i = 0; i < n; i += 16)
		__builtin_prefetch(r + i, 0, 2);
}

/*
 * o = sum_j p_j v_j over nk keys in their pages, in order of j: the sums of
 * 64 (then 16, then 1) floats of o at a time are held in registers across
 * the keys, each element a multiply and an add a key, as o[d] += p_j v_j[d].
 * (Accumulating in o itself made each key wait for the last one's store.)
 * v: the head's run in page 0, a key's values hd floats after the last's.
 */
SW_VEC static void pv_keys_(float *o, const float *p, const float *v, const int32_t *pt, int P, int nk,
                            size_t stride, int hd)
{
	int d0 = 0;
	for (; d0 + 64 <= hd; d0 += 64) {
		v16f_ a0 = { 0 }, a1 = a0, a2 = a0, a3 = a0;
		for (int j0 = 0; j0 < nk; j0 += P) {
			const float *vp = v + (size_t)pt[j0 / P] * stride + d0;
			int nj = nk - j0 < P ? nk - j0 : P;
			if (d0 == 0)
				ask_run_(v, pt, j0 + P, P, nk, stride, hd);
			for (int j = 0; j < nj; j++) {
				const float *vr = vp + (size_t)j * hd;
				float pj = p[j0 + j];
				v16f_ x0, x1, x2, x3;
				memcpy(&x0, vr, 64), memcpy(&x1, vr + 16, 64);
				memcpy(&x2, vr + 32, 64), memcpy(&x3, vr + 48, 64);
				a0 += pj * x0, a1 += pj * x1, a2 += pj * x2, a3 += pj * x3;
			}
		}
		memcpy(o + d0, &a0, 64), memcpy(o + d0 + 16, &a1, 64);
		memcpy(o + d0 + 32, &a2, 64), memcpy(o + d0 + 48, &a3, 64);
	}
	for (; d0 + 16 <= hd; d0 += 16) {
		v16f_ a = { 0 };
		for (int j0 = 0; j0 < nk; j0 += P) {
			const float *vp = v + (size_t)pt[j0 / P] * stride + d0;
			int nj = nk - j0 < P ? nk - j0 : P;
			if (d0 == 0)
				ask_run_(v, pt, j0 + P, P, nk, stride, hd);
			for (int j = 0; j < nj; j++) {
				v16f_ x;
				memcpy(&x, vp + (size_t)j * hd, 64);
				a += p[j0 + j] * x;
			}
		}
		memcpy(o + d0, &a, 64);
	}
	for (; d0 < hd; d0++) {
		float a = 0;
		for (int j = 0; j < nk; j++)
			a += p[j] * v[(size_t)pt[j / P] * stride + (size_t)(j % P) * hd + d0];
		o[d0] = a;
	}
}

/*
 * A task is one sequence and up to PAGED_HEADS_ query heads of one KV group
 * (grouped-query attention): their keys and values are read from memory
 * once, a page of keys staying in L1 while each head's scores are made,
 * not once a head.  Each head's arithmetic is the same as alone.  A head's
 * keys (values) of a page are one run of memory (sw_kv_view), the next
 * page's asked for while this one's are used: with pages laid out
 * [page][KVH * hd], a head's were 16 pieces of hd floats KVH * hd apart,
 * and one layer's call for 32 queries against 2048 keys took 1.31-1.39x
 * as long (bench/RESULTS.md, "kvruns").
 */
static void attn_paged_(float *out, const float *q, int n, int H, int KVH, int hd,
                        const sw_kv_view *kv, float *scratch)
{
	int grp = H / KVH, P = kv->page, maxk = 1;
	int per_g = (grp + PAGED_HEADS_ - 1) / PAGED_HEADS_, ntask = KVH * per_g;
	int chunk = grp < 4 ? 4 / grp : 1; /* about 4 heads a grab, as one head a task took */
	float scale = 1.0f / sqrtf((float)hd);
	for (int i = 0; i < n; i++)
		maxk = kv->nkeys[i] > maxk ? kv->nkeys[i] : maxk;
#pragma omp parallel if (BIG_((size_t)n * H * maxk * hd / 8))
	{
		float *sc = scratch + (size_t)omp_get_thread_num() * PAGED_HEADS_ * maxk;
#pragma omp for collapse(2) schedule(dynamic, chunk)
		for (int i = 0; i < n; i++)
			for (int b = 0; b < ntask; b++) {
				int g = b / per_g, h0 = g * grp + b % per_g * PAGED_HEADS_;
				int nh = (g + 1) * grp - h0 < PAGED_HEADS_ ? (g + 1) * grp - h0 : PAGED_HEADS_;
				const int32_t *pt = kv->pages + kv->page_off[i];
				int nk = kv->nkeys[i];
				/* Page by page: a key's address without a division. */
				const float *kg = kv->k + (size_t)g * P * hd, *vg = kv->v + (size_t)g * P * hd;
				for (int j0 = 0; j0 < nk; j0 += P) {
					const float *kp = kg + (size_t)pt[j0 / P] * kv->stride;
					int nj = nk - j0 < P ? nk - j0 : P;
					ask_run_(kg, pt, j0 + P, P, nk, kv->stride, hd);
					for (int t = 0; t < nh; t++)
						qk_page_(sc + (size_t)t * maxk + j0, q + ((size_t)i * H + h0 + t) * hd, kp,
						         nj, hd, hd, scale);
				}
				for (int t = 0; t < nh; t++) {
					float *s = sc + (size_t)t * maxk, m = row_max_(s, nk);
					/* The softmax of the training forward's loops (vectorised
					 * exp, sums in double lanes): no libm call a key. */
					float l = m + (float)log(row_sumexp_(s, nk, m));
					row_exp_(s, nk, l);
					pv_keys_(out + ((size_t)i * H + h0 + t) * hd, s, vg, pt, P, nk, kv->stride, hd);
				}
			}
	}
}

/* Elementwise ops go over spans of SPAN_ elements, a span a call of a
 * vectorised loop, the spans shared among the threads. */
#define SPAN_ ((size_t)16384)
#define SPANS_(n) (((n) + SPAN_ - 1) / SPAN_)
#define SPAN_LEN_(n, c) ((n) - (c) * SPAN_ < SPAN_ ? (n) - (c) * SPAN_ : SPAN_)

SW_VEC static void swiglu_fwd_span_(float *h, const float *gate, const float *up, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];
		h[i] = g / (1.0f + sw_expf(-g)) * up[i];
	}
}

static void swiglu_fwd_(float *h, const float *gate, const float *up, size_t n)
{
#pragma omp parallel for if (BIG_(n))
	for (size_t c = 0; c < SPANS_(n); c++) {
		size_t o = c * SPAN_;
		swiglu_fwd_span_(h + o, gate + o, up + o, SPAN_LEN_(n, c));
	}
}

SW_VEC static void swiglu_bwd_span_(float *dgate, float *dup, const float *dh, const float *gate,
                                    const float *up, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float g = gate[i], sg = 1.0f / (1.0f + sw_expf(-g)), silu = g * sg;
		dup[i] = dh[i] * silu;
		dgate[i] = dh[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
	}
}

static void swiglu_bwd_(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t n)
{
#pragma omp parallel for if (BIG_(n))
	for (size_t c = 0; c < SPANS_(n); c++) {
		size_t o = c * SPAN_;
		swiglu_bwd_span_(dgate + o, dup + o, dh + o, gate + o, up + o, SPAN_LEN_(n, c));
	}
}

/* The activations in libm's erff/tanhf/expf (the span loops are not
 * cloned per vector width: libm calls do not vectorise). */
static float act1_(float x, int act)
{
	switch (act) {
	case SW_ACT_GELU:
		return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
	case SW_ACT_GELU_TANH:
		return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
	case SW_ACT_QUICK_GELU:
		return x / (1.0f + expf(-1.702f * x));
	default:
		return x / (1.0f + expf(-x));
	}
}

static float dact1_(float x, int act)
{
	switch (act) {
	case SW_ACT_GELU:
		return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
		       x * 0.39894228040143268f * expf(-0.5f * x * x);
	case SW_ACT_GELU_TANH: {
		float u = 0.79788456080286536f * (x + 0.044715f * x * x * x), th = tanhf(u);
		return 0.5f * (1.0f + th) +
		       0.5f * x * (1.0f - th * th) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
	}
	case SW_ACT_QUICK_GELU: {
		float s = 1.0f / (1.0f + expf(-1.702f * x));
		return s + 1.702f * x * s * (1.0f - s);
	}
	default: {
		float s = 1.0f / (1.0f + expf(-x));
		return s * (1.0f + x * (1.0f - s));
	}
	}
}

static void act_fwd_(float *y, const float *x, size_t n, int act)
{
#pragma omp parallel for if (BIG_(n))
	for (size_t i = 0; i < n; i++)
		y[i] = act1_(x[i], act);
}

static void act_bwd_(float *dx, const float *dy, const float *x, size_t n, int act)
{
#pragma omp parallel for if (BIG_(n))
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * dact1_(x[i], act);
}

static void add_(float *y, const float *x, size_t n)
{
#pragma omp parallel for simd if (BIG_(n))
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void bias_fwd_(float *y, const float *b, int T, int N)
{
#pragma omp parallel for if (BIG_((size_t)T * N))
	for (int t = 0; t < T; t++)
		for (int j = 0; j < N; j++)
			y[(size_t)t * N + j] += b[j];
}

static void bias_bwd_(float *db, const float *dy, int T, int N)
{
#pragma omp parallel for if (BIG_((size_t)T * N))
	for (int j = 0; j < N; j++) {
		float s = 0;
		for (int t = 0; t < T; t++)
			s += dy[(size_t)t * N + j];
		db[j] += s;
	}
}

static void logprob_fwd_(float *lp, float *ent, float *lse, const float *logits,
                         const int32_t *target, int T, int V)
{
#pragma omp parallel for if (BIG_((size_t)T * V))
	for (int t = 0; t < T; t++) {
		const float *z = logits + (size_t)t * V;
		float m = row_max_(z, V);
		double sum, zsum;
		row_expsum_(z, V, m, &sum, &zsum);
		double l = (double)m + log(sum);
		lse[t] = (float)l;
		/* H = lse - E[z] */
		if (ent)
			ent[t] = (float)(log(sum) - zsum / sum);
		if (lp)
			lp[t] = target[t] >= 0 ? (float)((double)z[target[t]] - l) : 0.0f;
	}
}

/* d lp / d z_j = [j = target] - p_j;  d H / d z_j = -p_j (log p_j + H): the
 * row's -a p_j - b p_j (log p_j + H), the target's a added by the caller. */
SW_VEC static void logprob_bwd_row_(float *z, int V, float a, float b, float H, float l)
{
#pragma omp simd
	for (int j = 0; j < V; j++) {
		float lpj = z[j] - l, p = sw_expf(lpj);
		z[j] = -a * p - b * p * (lpj + H);
	}
}

static void logprob_bwd_(float *logits, const float *lse, const float *ent, const float *dlp,
                         const float *dent, const int32_t *target, int T, int V)
{
#pragma omp parallel for if (BIG_((size_t)T * V))
	for (int t = 0; t < T; t++) {
		float *z = logits + (size_t)t * V;
		float a = dlp && target[t] >= 0 ? dlp[t] : 0;
		float b = dent ? dent[t] : 0, H = b != 0 ? ent[t] : 0, l = lse[t];
		logprob_bwd_row_(z, V, a, b, H, l);
		if (a != 0)
			z[target[t]] += a;
	}
}

SW_VEC static void adamw_span_(float *restrict p, const float *restrict g, float gs,
                               float *restrict m, float *restrict v, size_t n, float b1, float b2,
                               float eps, float step, float sbc2, float decay)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * gs; /* exact when gs is 1 */
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * decay - step * mi / (sqrtf(vi) / sbc2 + eps);
	}
}

static void adamw_(float *p, const float *g, float gs, float *m, float *v, size_t n, float lr,
                   float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	float step = lr / bc1, sbc2 = sqrtf(bc2), decay = 1.0f - lr * wd;
#pragma omp parallel for if (BIG_(n))
	for (size_t c = 0; c < SPANS_(n); c++) {
		size_t o = c * SPAN_;
		adamw_span_(p + o, g + o, gs, m + o, v + o, SPAN_LEN_(n, c), b1, b2, eps, step, sbc2,
		            decay);
	}
}

/* sum x^2 over a span, in LANES_ lanes of double. */
SW_VEC static double sumsq_span_(const float *x, size_t n)
{
	double s[LANES_] = { 0 };
	size_t n16 = n / LANES_ * LANES_;
	for (size_t i = 0; i < n16; i += LANES_)
		for (int l = 0; l < LANES_; l++)
			s[l] += (double)x[i + l] * x[i + l];
	double a = lanes_dsum_(s);
	for (size_t i = n16; i < n; i++)
		a += (double)x[i] * x[i];
	return a;
}

/* The spans' sums added in the spans' order, so the result does not depend
 * on the threads (a reduction clause adds them in the order threads end). */
static double sumsq_(const float *x, size_t n)
{
	double part[64] = { 0 };
	size_t ns = SPANS_(n), per = (ns + 63) / 64;
#pragma omp parallel for schedule(static, 1) if (BIG_(n))
	for (size_t b = 0; b < 64; b++)
		for (size_t c = b * per; c < (b + 1) * per && c < ns; c++)
			part[b] += sumsq_span_(x + c * SPAN_, SPAN_LEN_(n, c));
	double s = 0;
	for (int b = 0; b < 64; b++)
		s += part[b];
	return s;
}

static void scale_(float *x, float s, size_t n)
{
#pragma omp parallel for simd if (BIG_(n))
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

static const sw_backend cpu_ = {
	.name = "cpu",
	.host_memory = true,
	.alloc = alloc_,
	.free = free_,
	.borrow = borrow_,
	.unborrow = unborrow_,
	.memset = memset_,
	.upload = memcpy_,
	.download = memcpy_,
	.copy = memcpy_,
	.host_view = host_view_,
	.sync = sync_,
	.kv_write = kv_write_,
	.rows_gather = embed_fwd_,
	.first_nonfinite = first_nonfinite_,
	.gemm = gemm_,
	.linear_rows = sw_linear_rows,
	.linear_rows_parts = sw_linear_rows_parts,
	.embed_fwd = embed_fwd_,
	.embed_bwd = embed_bwd_,
	.rmsnorm_fwd = rmsnorm_fwd_,
	.rmsnorm_bwd = rmsnorm_bwd_,
	.layernorm_fwd = layernorm_fwd_,
	.layernorm_bwd = layernorm_bwd_,
	.act_fwd = act_fwd_,
	.act_bwd = act_bwd_,
	.rope = rope_,
	.attn_fwd = attn_fwd_,
	.attn_bwd = attn_bwd_,
	.attn_prefix_fwd = attn_fwd_prefix_,
	.attn_prefix_bwd = attn_bwd_prefix_,
	.attn_scratch = attn_scratch_,
	.attn_paged = attn_paged_,
	.attn_paged_scratch = attn_paged_scratch_,
	.swiglu_fwd = swiglu_fwd_,
	.swiglu_bwd = swiglu_bwd_,
	.add = add_,
	.bias_fwd = bias_fwd_,
	.bias_bwd = bias_bwd_,
	.logprob_fwd = logprob_fwd_,
	.logprob_bwd = logprob_bwd_,
	.adamw = adamw_,
	.sumsq = sumsq_,
	.scale = scale_,
};

static void init_(void)
{
	sw_gemm_init(&st_.gemm, NULL, NULL);
	const char *name = getenv("SW_GEMM");
	sw_error e = { 0 };
	if (name && sw_gemm_provider(&st_.gemm, name, &e))
		sw_fail(&st_.gemm_err, e.code, "SW_GEMM: %s", e.msg);
}

const sw_backend *sw_backend_cpu(void)
{
	pthread_once(&st_.once, init_);
	return &cpu_;
}

int sw_backend_cpu_gemm(const char *name, sw_error *err)
{
	pthread_once(&st_.once, init_);
	int rc = sw_gemm_provider(&st_.gemm, name, err);
	if (!rc)
		memset(&st_.gemm_err, 0, sizeof st_.gemm_err);
	return rc;
}

int sw_backend_cpu_matmul(const char *prec, sw_error *err)
{
	pthread_once(&st_.once, init_);
	return sw_gemm_matmul(&st_.gemm, prec, err);
}

const char *sw_backend_cpu_gemm_kernels(void)
{
	pthread_once(&st_.once, init_);
	return st_.gemm.kernels;
}

int sw_backend_cpu_simd(int level)
{
	return sw_linear_rows_simd(level);
}

int sw_backend_cpu_row_prefetch(int level)
{
	return sw_linear_rows_prefetch(level);
}

void sw_backend_cpu_threads(int n)
{
	if (n <= 0)
		n = omp_get_num_procs();
	omp_set_num_threads(n);
}
