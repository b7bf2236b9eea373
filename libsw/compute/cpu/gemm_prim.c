/*
 * gemm_prim.c - the CPU backend's products by oneDNN's matmul primitive
 * (gemm.h): C = alpha op(A) op(B) + beta C on the brgemm kernels, a
 * primitive made once per shape, transpose, alpha and beta and kept (a
 * small cache, the least recently used one replaced).  Two uses, one
 * object each:
 *
 * f32, the products A B^T (a Linear's forward: activations by the weights
 * as they are stored, [out, in]).  dnnl_sgemm packs a transposed B slowly:
 * on SmolLM2-135M's shapes with 256 rows it ran 165-209 GFLOP/s where the
 * primitive (brg:avx512_core) ran 206-222 and sgemm's own A B 225-229
 * (2 cores, bench/RESULTS.md "nt").  A B and A^T B stay with dnnl_sgemm,
 * which runs them faster than the primitive.  The operands are used in
 * place; a shape the primitive would not run on its brg kernels is left to
 * dnnl_sgemm (sw_gemm_prim_run says no), as is any failure here: the
 * product is the same f32 product either way.
 *
 * bf16 (sw_gemm_matmul "bf16"): A and B rounded to bf16 (to nearest, ties
 * to even), products accumulated and written in f32, on oneDNN's bf16
 * dot-product kernels (brg:avx512_core_bf16).  The caller's matrices
 * (weights, gradients, activations) stay f32: only the operands of a
 * product are rounded, into scratch buffers, the scheme of llm.c and of
 * PyTorch's autocast.  Why a primitive and not dnnl_sgemm with a bf16 math
 * mode: oneDNN 2.6's f32 matmul keeps its f32 kernels under
 * dnnl_fpmath_mode_bf16; only bf16 memory descriptors reach the bf16
 * kernels.  The operands are packed in their own layout (op(X) transposed
 * or not: the brg kernels take both), so converting one is a row-by-row
 * copy.  A failure here is kept (sw_gemm_prim_error) and the products run
 * in f32 from then on, which the backend's sync reports.
 *
 * Either way C with ld != N goes through a dense buffer, since the brg
 * kernels want a dense destination, as do a bf16 product's padded rows
 * (PAD_ROWS_).  One product at a time goes through an object (a mutex; the
 * callers make one outside a parallel region).
 */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "compute/cpu/gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_ 1
#endif

/*
 * bf16 products run their rows in multiples of PAD_ROWS_.  oneDNN 2.6.3's
 * AMX kernels (brg:avx512_core_amx_bf16) run some row counts 4-9x slower
 * than their neighbours, the same impl chosen: 424, 413, 427 rows of
 * 576 x 1536 at 52-61 GFLOP/s where 425 and 440 ran 460, 928 and 992 where
 * 960 ran 613; every multiple of 64 scanned ran at the fast rate (64 to
 * 4608 rows on a layer's four forward and dx shapes, to 16384 on one; the
 * head's to 1024: bench/RESULTS.md, "pad").  So the first rows, a multiple
 * of 64, are one product in place and the rest (under 64) another of 64
 * rows, A's extra rows zeros and C's dropped: at most 63 rows of arithmetic
 * more and a scratch C of 64 rows, not of M (the vocabulary head's C is
 * 64 MiB at 342 rows).  Each row of C is its own row of A against B, so
 * the rows kept are the product of the rows given (to the last bit they
 * may differ from an unsplit product's: oneDNN's blocks differ).  A strided
 * C (through the scratch anyway) is one product of M rows padded.
 */
#define PAD_ROWS_ 64

/* Primitives kept: a training step uses about 20 shapes a micro batch
 * size (7 Linear layers and the lm_head, forward and two backward
 * products); a new one costs about 0.3 ms to make. */
#define NPRIM_ 64

typedef struct prim_ {
	int M, N, K, ta, tb;
	float alpha, beta;
	unsigned long used; /* 0: empty */
	dnnl_primitive_t p; /* NULL: f32 only, a shape left to dnnl_sgemm */
	dnnl_memory_t a, b, c;
} prim_;

struct sw_gemm_prim {
	bool bf16;
	pthread_mutex_t mu;
	dnnl_engine_t eng;
	dnnl_stream_t st;
	prim_ prim[NPRIM_];
	unsigned long tick;
	unsigned long runs; /* products run here */
	uint16_t *a, *b; /* the operands in bf16 */
	float *c;        /* a dense C, when ld != N */
	size_t acap, bcap, ccap;
	char impl[64]; /* the kernel of the last primitive made */
	sw_error err;  /* the first failure; the products since ran with dnnl_sgemm */
};

/* ---- f32 -> bf16 ---- */

/*
 * One value as VCVTNE2PS2BF16 rounds it: a denormal input is a zero of its
 * sign (the instruction treats them as zero), a NaN stays a NaN, made
 * quiet, everything else is rounded to nearest, ties to even (which takes
 * a value past bf16's largest to infinity, as it should).
 */
static inline uint16_t bf16_1_(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if (!(u & 0x7f800000u))
		return (uint16_t)((u >> 16) & 0x8000u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

void sw_bf16_from_f32_scalar(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_1_(src[i]);
}

#ifdef HAVE_X86_
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
bf16_avx512_(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
		_mm512_storeu_si512((void *)(dst + i), (__m512i)v);
	}
	for (; i < n; i += 16) {
		size_t r = n - i < 16 ? n - i : 16;
		__mmask16 m = (__mmask16)((1u << r) - 1u);
		__m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
		_mm256_mask_storeu_epi16(dst + i, m, (__m256i)v);
	}
}
#endif

bool sw_bf16_simd(void)
{
#ifdef HAVE_X86_
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl");
#else
	return false;
#endif
}

void sw_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
#ifdef HAVE_X86_
	/* The CPU's features as libgcc read them once: asking costs a load. */
	if (sw_bf16_simd()) {
		bf16_avx512_(dst, src, n);
		return;
	}
#endif
	sw_bf16_from_f32_scalar(dst, src, n);
}

/* rows x cols of src (row stride ld) into the first rows x cols of dst,
 * drows x dcols dense, the rest of dst zeros; over OpenMP's threads when big. */
static void pack_(uint16_t *dst, int drows, int dcols, const float *src, int rows, int cols, int ld)
{
#pragma omp parallel for schedule(static) if ((size_t)drows * dcols >= 65536)
	for (int r = 0; r < drows; r++) {
		uint16_t *d = dst + (size_t)r * dcols;
		int n = r < rows ? cols : 0;
		if (n)
			sw_bf16_from_f32(d, src + (size_t)r * ld, (size_t)n);
		memset(d + n, 0, sizeof *d * (size_t)(dcols - n));
	}
}

/* ---- the object ---- */

static const char *what_(const sw_gemm_prim *b)
{
	return b->bf16 ? "bf16 matmul" : "f32 matmul";
}

static int dnnl_fail_(const sw_gemm_prim *b, sw_error *err, dnnl_status_t s, const char *what)
{
	return sw_fail(err, s == dnnl_out_of_memory ? SW_ENOMEM : SW_EINVAL, "%s: oneDNN %s failed (status %d)",
	               what_(b), what, (int)s);
}

static void prim_free_(prim_ *p)
{
	if (!p->used)
		return;
	if (p->p) {
		dnnl_memory_destroy(p->a);
		dnnl_memory_destroy(p->b);
		dnnl_memory_destroy(p->c);
		dnnl_primitive_destroy(p->p);
	}
	memset(p, 0, sizeof *p);
}

void sw_gemm_prim_free(sw_gemm_prim *b)
{
	if (!b)
		return;
	for (int i = 0; i < NPRIM_; i++)
		prim_free_(&b->prim[i]);
	if (b->st)
		dnnl_stream_destroy(b->st);
	if (b->eng)
		dnnl_engine_destroy(b->eng);
	pthread_mutex_destroy(&b->mu);
	free(b->a), free(b->b), free(b->c);
	free(b);
}

sw_gemm_prim *sw_gemm_prim_new(bool bf16, sw_error *err)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	if (bf16 && (isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
		sw_fail(err, SW_EINVAL,
		        "bf16 matmul needs a CPU with bf16 dot products (AVX512-BF16, oneDNN's "
		        "avx512_core_bf16); oneDNN runs %s here",
		        sw_dnnl_isa_name(isa));
		return NULL;
	}
	sw_gemm_prim *b = calloc(1, sizeof *b);
	if (!b) {
		sw_fail(err, SW_ENOMEM, "%s: out of memory", bf16 ? "bf16 matmul" : "f32 matmul");
		return NULL;
	}
	b->bf16 = bf16;
	pthread_mutex_init(&b->mu, NULL);
	dnnl_status_t s;
	if ((s = dnnl_engine_create(&b->eng, dnnl_cpu, 0)) ||
	    (s = dnnl_stream_create(&b->st, b->eng, dnnl_stream_default_flags))) {
		dnnl_fail_(b, err, s, "engine");
		sw_gemm_prim_free(b);
		return NULL;
	}
	return b;
}

const char *sw_gemm_prim_impl(const sw_gemm_prim *b)
{
	return b->impl[0] ? b->impl
	                  : b->bf16 ? "brg:avx512_core_bf16 (expected; no product yet)" : "(no product yet)";
}

unsigned long sw_gemm_prim_runs(sw_gemm_prim *b)
{
	pthread_mutex_lock(&b->mu);
	unsigned long n = b->runs;
	pthread_mutex_unlock(&b->mu);
	return n;
}

const sw_error *sw_gemm_prim_error(const sw_gemm_prim *b)
{
	return b && b->err.code ? &b->err : NULL;
}

/* Grow *p to n elements of size sz; false when out of memory. */
static bool grow_(void **p, size_t *cap, size_t n, size_t sz)
{
	if (n <= *cap)
		return true;
	void *q = aligned_alloc(64, (n * sz + 63) & ~(size_t)63);
	if (!q)
		return false;
	free(*p);
	*p = q;
	*cap = n;
	return true;
}

/* Make the primitive for a key in slot p: SW_OK (p->p NULL when an f32
 * shape is left to dnnl_sgemm) or err filled. */
static int prim_make_(sw_gemm_prim *b, prim_ *p, sw_error *err)
{
	dnnl_data_type_t dt = b->bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_memory_desc_t a, w, c;
	dnnl_dims_t da = { p->M, p->K }, dw = { p->K, p->N }, dc = { p->M, p->N };
	/* the operands dense in their own layout: bf16 packs them so, f32 takes only such */
	dnnl_dims_t sa = { p->ta ? 1 : p->K, p->ta ? p->M : 1 };
	dnnl_dims_t sw = { p->tb ? 1 : p->N, p->tb ? p->K : 1 };
	dnnl_dims_t sc = { p->N, 1 };
	dnnl_matmul_desc_t md;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	const char *impl = NULL;
	dnnl_status_t s;
	int rc = SW_OK;
	if ((s = dnnl_memory_desc_init_by_strides(&a, 2, da, dt, sa)) ||
	    (s = dnnl_memory_desc_init_by_strides(&w, 2, dw, dt, sw)) ||
	    (s = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc)) ||
	    (s = dnnl_matmul_desc_init(&md, &a, &w, NULL, &c)) ||
	    (s = dnnl_primitive_attr_create(&attr)) ||
	    (p->alpha != 1 && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha))) ||
	    (p->beta != 0 && ((s = dnnl_post_ops_create(&po)) || (s = dnnl_post_ops_append_sum(po, p->beta)) ||
	                      (s = dnnl_primitive_attr_set_post_ops(attr, po)))) ||
	    (s = dnnl_primitive_desc_create(&pd, &md, attr, b->eng, NULL)) ||
	    (s = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl))) {
		rc = dnnl_fail_(b, err, s, "matmul descriptor");
		goto out;
	}
	snprintf(b->impl, sizeof b->impl, "%s", impl);
	/* Only the brg kernels are what was asked for: oneDNN's reference or
	 * an emulation would be slower, silently.  In f32 dnnl_sgemm runs
	 * the shape instead; in bf16 it is a failure. */
	if (strncmp(impl, "brg:", 4) || (b->bf16 && !strstr(impl, "bf16"))) {
		if (b->bf16)
			rc = sw_fail(err, SW_EINVAL,
			             "bf16 matmul: oneDNN chose '%s', not its bf16 kernels, for %dx%dx%d %c%c",
			             impl, p->M, p->N, p->K, p->ta ? 'T' : 'N', p->tb ? 'T' : 'N');
		goto out;
	}
	if ((s = dnnl_primitive_create(&p->p, pd))) {
		p->p = NULL;
		rc = dnnl_fail_(b, err, s, "primitive");
		goto out;
	}
	if ((s = dnnl_memory_create(&p->a, &a, b->eng, DNNL_MEMORY_NONE)) ||
	    (s = dnnl_memory_create(&p->b, &w, b->eng, DNNL_MEMORY_NONE)) ||
	    (s = dnnl_memory_create(&p->c, &c, b->eng, DNNL_MEMORY_NONE))) {
		rc = dnnl_fail_(b, err, s, "memory");
		dnnl_memory_destroy(p->a), dnnl_memory_destroy(p->b), dnnl_memory_destroy(p->c);
		dnnl_primitive_destroy(p->p);
		p->p = NULL;
	}
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* The kept primitive for this product, made (in the least recently used slot) if new. */
static prim_ *prim_get_(sw_gemm_prim *b, int ta, int tb, int M, int N, int K, float alpha,
                        float beta, sw_error *err)
{
	prim_ *old = &b->prim[0];
	for (int i = 0; i < NPRIM_; i++) {
		prim_ *p = &b->prim[i];
		if (p->used && p->M == M && p->N == N && p->K == K && p->ta == ta && p->tb == tb &&
		    p->alpha == alpha && p->beta == beta) {
			p->used = ++b->tick;
			return p;
		}
		if (p->used < old->used)
			old = p;
	}
	prim_free_(old);
	prim_ n = { .M = M, .N = N, .K = K, .ta = ta, .tb = tb, .alpha = alpha, .beta = beta };
	if (prim_make_(b, &n, err))
		return NULL;
	n.used = ++b->tick;
	*old = n;
	return old;
}

/* One product of p: false (err kept) when oneDNN refuses, which it does
 * before it computes (c is then as it was). */
static bool exec_(sw_gemm_prim *b, prim_ *p, const void *a, const void *w, float *c)
{
	dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, p->a }, { DNNL_ARG_WEIGHTS, p->b },
		                    { DNNL_ARG_DST, p->c } };
	dnnl_status_t s;
	if ((s = dnnl_memory_set_data_handle(p->a, (void *)a)) ||
	    (s = dnnl_memory_set_data_handle(p->b, (void *)w)) ||
	    (s = dnnl_memory_set_data_handle(p->c, c)) ||
	    (s = dnnl_primitive_execute(p->p, b->st, 3, args)) || (s = dnnl_stream_wait(b->st))) {
		dnnl_fail_(b, &b->err, s, "execute");
		return false;
	}
	return true;
}

/* n rows of cols floats from x (row stride ldx) to y (row stride ldy). */
static void rows_copy_(float *y, int ldy, const float *x, int ldx, int n, int cols)
{
	for (int i = 0; i < n; i++)
		memcpy(y + (size_t)i * ldy, x + (size_t)i * ldx, sizeof *y * (size_t)cols);
}

static bool run_(sw_gemm_prim *b, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	if (b->err.code)
		return false;
	/* f32 takes the operands in place: only dense ones (the descriptors say so) */
	if (!b->bf16 && (lda != (ta ? M : K) || ldb != (tb ? K : N)))
		return false;
	/*
	 * bf16 into a dense C: the first Mm rows (a multiple of PAD_ROWS_) in
	 * place, the last Mt (fewer than PAD_ROWS_) as a product of PAD_ROWS_
	 * rows, A's padded with zeros, through the scratch C.  bf16 into a
	 * strided C: the M rows padded to Mp, through the scratch C.  f32: the M
	 * rows as they are.
	 */
	bool dense = ldc == N;
	int Mt = b->bf16 && dense ? M % PAD_ROWS_ : 0, Mm = M - Mt;
	int Mp = b->bf16 ? (Mm + PAD_ROWS_ - 1) / PAD_ROWS_ * PAD_ROWS_ : Mm;
	int br = tb ? N : K, bc = tb ? K : N;
	size_t crows = dense ? (Mt ? PAD_ROWS_ : 0) : (size_t)Mp;
	if ((b->bf16 && (!grow_((void **)&b->a, &b->acap, (size_t)(Mp > PAD_ROWS_ ? Mp : PAD_ROWS_) * K,
	                        sizeof *b->a) ||
	                 !grow_((void **)&b->b, &b->bcap, (size_t)K * N, sizeof *b->b))) ||
	    (crows && !grow_((void **)&b->c, &b->ccap, crows * N, sizeof *b->c))) {
		sw_fail(&b->err, SW_ENOMEM, "%s: out of memory for %dx%dx%d", what_(b), M, N, K);
		return false;
	}
	/* both primitives first: the second made cannot push out the first (just used) */
	prim_ *pt = Mt ? prim_get_(b, ta, tb, PAD_ROWS_, N, K, alpha, beta, &b->err) : NULL;
	if (Mt && (!pt || !pt->p))
		return false;
	prim_ *pm = Mm ? prim_get_(b, ta, tb, Mp, N, K, alpha, beta, &b->err) : NULL;
	if (Mm && (!pm || !pm->p))
		return false;
	const void *w = B;
	if (b->bf16) {
		pack_(b->b, br, bc, B, br, bc, ldb);
		w = b->b;
	}
	/* The tail first, into the scratch C: a failure of either product leaves C as it was. */
	if (Mt) {
		/* op(A)'s rows from Mm: A's rows (ta 0) or its columns (ta 1) */
		if (ta)
			pack_(b->a, K, PAD_ROWS_, A + Mm, K, Mt, lda);
		else
			pack_(b->a, PAD_ROWS_, K, A + (size_t)Mm * lda, Mt, K, lda);
		if (beta != 0) {
			rows_copy_(b->c, N, C + (size_t)Mm * ldc, ldc, Mt, N);
			memset(b->c + (size_t)Mt * N, 0, sizeof *b->c * (size_t)(PAD_ROWS_ - Mt) * N);
		}
		if (!exec_(b, pt, b->a, w, b->c))
			return false;
	}
	if (Mm) {
		const void *a = A;
		if (b->bf16) {
			pack_(b->a, ta ? K : Mp, ta ? Mp : K, A, ta ? K : Mm, ta ? Mm : K, lda);
			a = b->a;
		}
		float *c = dense ? C : b->c;
		if (!dense && beta != 0) {
			rows_copy_(c, N, C, ldc, Mm, N);
			memset(c + (size_t)Mm * N, 0, sizeof *c * (size_t)(Mp - Mm) * N);
		}
		if (!exec_(b, pm, a, w, c))
			return false;
		if (!dense)
			rows_copy_(C, ldc, c, N, Mm, N);
	}
	if (Mt)
		rows_copy_(C + (size_t)Mm * ldc, ldc, b->c, N, Mt, N);
	b->runs++;
	return true;
}

bool sw_gemm_prim_run(sw_gemm_prim *b, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
	pthread_mutex_lock(&b->mu);
	bool done = run_(b, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	pthread_mutex_unlock(&b->mu);
	return done;
}
