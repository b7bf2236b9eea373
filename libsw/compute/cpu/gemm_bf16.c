/*
 * gemm_bf16.c - the CPU backend's bf16 matrix products (gemm.h,
 * sw_gemm_matmul): C = alpha op(A) op(B) + beta C with A and B rounded to
 * bf16 (to nearest, ties to even), products accumulated and written in f32,
 * by oneDNN's matmul primitive on its bf16 dot-product kernels
 * (brg:avx512_core_bf16).  The caller's matrices (weights, gradients,
 * activations) stay f32: only the operands of a product are rounded, into
 * scratch buffers, the scheme of llm.c and of PyTorch's autocast.
 *
 * Why a primitive and not dnnl_sgemm with a bf16 math mode: oneDNN 2.6's f32
 * matmul keeps its f32 kernels under dnnl_fpmath_mode_bf16; only bf16
 * memory descriptors reach the bf16 kernels.  The operands are packed in
 * their own layout (op(X) transposed or not: the brg kernels take both),
 * so converting one is a row-by-row copy.  A primitive is made once per
 * shape, transpose, alpha and beta and kept (a small cache, the least
 * recently used one replaced); C with ld != N goes through a dense buffer,
 * since the brg kernels want a dense destination.
 */
#include <dnnl.h>
#include <omp.h>
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

/* Primitives kept: a training step uses about 20 shapes (7 Linear layers
 * and the lm_head, forward and two backward products, and a last micro
 * batch's shorter ones). */
#define NPRIM_ 48

typedef struct prim_ {
	int M, N, K, ta, tb;
	float alpha, beta;
	unsigned long used; /* 0: empty */
	dnnl_primitive_t p;
	dnnl_memory_t a, b, c;
} prim_;

struct sw_gemm_bf16 {
	dnnl_engine_t eng;
	dnnl_stream_t st;
	prim_ prim[NPRIM_];
	unsigned long tick;
	uint16_t *a, *b; /* the operands in bf16 */
	float *c;        /* a dense C, when ld != N */
	size_t acap, bcap, ccap;
	char impl[64]; /* the kernel of the last primitive made */
	sw_error err;  /* the first failure; the products since ran in f32 */
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

/* rows x cols of src (row stride ld) into dst, dense, over OpenMP's threads when big. */
static void pack_(uint16_t *dst, const float *src, int rows, int cols, int ld)
{
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= 65536)
	for (int r = 0; r < rows; r++)
		sw_bf16_from_f32(dst + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols);
}

/* ---- the object ---- */

static int dnnl_fail_(sw_error *err, dnnl_status_t s, const char *what)
{
	return sw_fail(err, s == dnnl_out_of_memory ? SW_ENOMEM : SW_EINVAL,
	               "bf16 matmul: oneDNN %s failed (status %d)", what, (int)s);
}

static void prim_free_(prim_ *p)
{
	if (!p->used)
		return;
	dnnl_memory_destroy(p->a);
	dnnl_memory_destroy(p->b);
	dnnl_memory_destroy(p->c);
	dnnl_primitive_destroy(p->p);
	memset(p, 0, sizeof *p);
}

void sw_gemm_bf16_free(sw_gemm_bf16 *b)
{
	if (!b)
		return;
	for (int i = 0; i < NPRIM_; i++)
		prim_free_(&b->prim[i]);
	if (b->st)
		dnnl_stream_destroy(b->st);
	if (b->eng)
		dnnl_engine_destroy(b->eng);
	free(b->a), free(b->b), free(b->c);
	free(b);
}

sw_gemm_bf16 *sw_gemm_bf16_new(sw_error *err)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
		sw_fail(err, SW_EINVAL,
		        "bf16 matmul needs a CPU with bf16 dot products (AVX512-BF16, oneDNN's "
		        "avx512_core_bf16); oneDNN runs %s here",
		        sw_dnnl_isa_name(isa));
		return NULL;
	}
	sw_gemm_bf16 *b = calloc(1, sizeof *b);
	if (!b) {
		sw_fail(err, SW_ENOMEM, "bf16 matmul: out of memory");
		return NULL;
	}
	dnnl_status_t s;
	if ((s = dnnl_engine_create(&b->eng, dnnl_cpu, 0)) ||
	    (s = dnnl_stream_create(&b->st, b->eng, dnnl_stream_default_flags))) {
		dnnl_fail_(err, s, "engine");
		sw_gemm_bf16_free(b);
		return NULL;
	}
	return b;
}

const char *sw_gemm_bf16_impl(const sw_gemm_bf16 *b)
{
	return b->impl[0] ? b->impl : "brg:avx512_core_bf16 (expected; no product yet)";
}

const sw_error *sw_gemm_bf16_error(const sw_gemm_bf16 *b)
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

/* Make the primitive for a key in slot p; SW_OK or err filled. */
static int prim_make_(sw_gemm_bf16 *b, prim_ *p, sw_error *err)
{
	dnnl_memory_desc_t a, w, c;
	dnnl_dims_t da = { p->M, p->K }, dw = { p->K, p->N }, dc = { p->M, p->N };
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
	if ((s = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa)) ||
	    (s = dnnl_memory_desc_init_by_strides(&w, 2, dw, dnnl_bf16, sw)) ||
	    (s = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc)) ||
	    (s = dnnl_matmul_desc_init(&md, &a, &w, NULL, &c)) ||
	    (s = dnnl_primitive_attr_create(&attr)) ||
	    (p->alpha != 1 && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha))) ||
	    (p->beta != 0 && ((s = dnnl_post_ops_create(&po)) || (s = dnnl_post_ops_append_sum(po, p->beta)) ||
	                      (s = dnnl_primitive_attr_set_post_ops(attr, po)))) ||
	    (s = dnnl_primitive_desc_create(&pd, &md, attr, b->eng, NULL)) ||
	    (s = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl))) {
		rc = dnnl_fail_(err, s, "matmul descriptor");
		goto out;
	}
	snprintf(b->impl, sizeof b->impl, "%s", impl);
	/* Only the bf16 dot-product kernels are what was asked for: oneDNN's
	 * reference or an emulation would be slower than f32, silently. */
	if (strncmp(impl, "brg:", 4) || !strstr(impl, "bf16")) {
		rc = sw_fail(err, SW_EINVAL,
		             "bf16 matmul: oneDNN chose '%s', not its bf16 kernels, for %dx%dx%d %c%c", impl,
		             p->M, p->N, p->K, p->ta ? 'T' : 'N', p->tb ? 'T' : 'N');
		goto out;
	}
	if ((s = dnnl_primitive_create(&p->p, pd))) {
		rc = dnnl_fail_(err, s, "primitive");
		goto out;
	}
	if ((s = dnnl_memory_create(&p->a, &a, b->eng, DNNL_MEMORY_NONE)) ||
	    (s = dnnl_memory_create(&p->b, &w, b->eng, DNNL_MEMORY_NONE)) ||
	    (s = dnnl_memory_create(&p->c, &c, b->eng, DNNL_MEMORY_NONE))) {
		rc = dnnl_fail_(err, s, "memory");
		dnnl_memory_destroy(p->a), dnnl_memory_destroy(p->b), dnnl_memory_destroy(p->c);
		dnnl_primitive_destroy(p->p);
	}
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* The kept primitive for this product, made (in the least recently used slot) if new. */
static prim_ *prim_get_(sw_gemm_bf16 *b, int ta, int tb, int M, int N, int K, float alpha,
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

bool sw_gemm_bf16_run(sw_gemm_bf16 *b, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
	if (b->err.code)
		return false;
	int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	bool dense = ldc == N;
	if (!grow_((void **)&b->a, &b->acap, (size_t)M * K, sizeof *b->a) ||
	    !grow_((void **)&b->b, &b->bcap, (size_t)K * N, sizeof *b->b) ||
	    (!dense && !grow_((void **)&b->c, &b->ccap, (size_t)M * N, sizeof *b->c))) {
		sw_fail(&b->err, SW_ENOMEM, "bf16 matmul: out of memory for %dx%dx%d", M, N, K);
		return false;
	}
	prim_ *p = prim_get_(b, ta, tb, M, N, K, alpha, beta, &b->err);
	if (!p)
		return false;
	pack_(b->a, A, ar, ac, lda);
	pack_(b->b, B, br, bc, ldb);
	float *c = dense ? C : b->c;
	if (!dense && beta != 0)
		for (int i = 0; i < M; i++)
			memcpy(c + (size_t)i * N, C + (size_t)i * ldc, sizeof *c * N);
	dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, p->a }, { DNNL_ARG_WEIGHTS, p->b },
		                    { DNNL_ARG_DST, p->c } };
	dnnl_status_t s;
	if ((s = dnnl_memory_set_data_handle(p->a, b->a)) ||
	    (s = dnnl_memory_set_data_handle(p->b, b->b)) ||
	    (s = dnnl_memory_set_data_handle(p->c, c)) ||
	    (s = dnnl_primitive_execute(p->p, b->st, 3, args)) || (s = dnnl_stream_wait(b->st))) {
		dnnl_fail_(&b->err, s, "execute");
		return false;
	}
	if (!dense)
		for (int i = 0; i < M; i++)
			memcpy(C + (size_t)i * ldc, c + (size_t)i * N, sizeof *c * N);
	return true;
}
