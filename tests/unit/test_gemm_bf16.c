/*
 * test_gemm_bf16.c - the CPU backend's bf16 products (compute/cpu/gemm.h,
 * sw_gemm_matmul; gemm_prim.c): the f32 -> bf16 rounding, vector against
 * scalar and against known bits; every transpose, alpha and beta, odd and
 * strided shapes, against two references; the products that stay f32; the
 * choice by name; and a training step in bf16 against the same step in f32.
 * On a CPU without bf16 dot products the checks that need them are skipped,
 * with the reason, and the refusal is checked instead.
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compute/backend.h"
#include "compute/cpu/gemm.h"
#include "gemm_case.h"
#include "sw/sw.h"
#include "tap.h"
#include "tiny_model.h"

#define skip(why, ...)                                                      \
	do {                                                                \
		printf("ok %d - ", ++tap_n_);                               \
		printf(__VA_ARGS__);                                        \
		printf(" # skip %s\n", why);                                \
	} while (0)

static float *rand_(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f; /* 16 bits: not bf16-exact */
	}
	return p;
}

static double bf16_value_(float f)
{
	uint16_t h;
	sw_bf16_from_f32_scalar(&h, &f, 1);
	uint32_t u = (uint32_t)h << 16;
	float r;
	memcpy(&r, &u, sizeof r);
	return r;
}

static uint16_t bits_(uint32_t u)
{
	float f;
	uint16_t h;
	memcpy(&f, &u, sizeof f);
	sw_bf16_from_f32_scalar(&h, &f, 1);
	return h;
}

static void test_rounding_(void)
{
	/* Ties go to even, NaN stays NaN (quiet), a denormal is a zero of its sign, overflow is inf. */
	ok(bits_(0x3f800000u) == 0x3f80 && bits_(0x3f808000u) == 0x3f80 && bits_(0x3f818000u) == 0x3f82 &&
	   bits_(0x3f808001u) == 0x3f81 && bits_(0x3f807fffu) == 0x3f80,
	   "scalar rounding: to nearest, ties to even");
	ok(bits_(0x7fc00000u) == 0x7fc0 && bits_(0x7f800001u) == 0x7fc0 && bits_(0xff800001u) == 0xffc0 &&
	   bits_(0x7f800000u) == 0x7f80 && bits_(0x7f7fffffu) == 0x7f80 && bits_(0x00000001u) == 0 &&
	   bits_(0x807fffffu) == 0x8000,
	   "scalar rounding: NaN, inf, overflow, denormals");
	if (!sw_bf16_simd()) {
		skip("the CPU has no AVX512-BF16", "vector rounding is the scalar one");
		return;
	}
	/* Every bit pattern whose low 16 bits are one of a few (ties, just under, just over, zero),
	 * with every high half: each exponent, sign and NaN; then random ones; odd lengths for the tail. */
	static const uint32_t lows[] = { 0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234 };
	size_t n = 65536 * 7 + 13;
	float *src = malloc(n * sizeof *src);
	uint16_t *v = malloc(n * sizeof *v), *s = malloc(n * sizeof *s);
	uint32_t x = 1;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		if (i < 65536 * 7)
			u = (uint32_t)(i % 65536) << 16 | lows[i / 65536];
		else
			u = x = x * 1664525u + 1013904223u;
		memcpy(&src[i], &u, sizeof u);
	}
	size_t bad = 0;
	for (size_t len = n - 13; len <= n; len += 3) { /* tails of 0..15 elements */
		memset(v, 0, n * sizeof *v);
		sw_bf16_from_f32(v, src, len);
		sw_bf16_from_f32_scalar(s, src, len);
		for (size_t i = 0; i < len; i++)
			bad += v[i] != s[i];
		for (size_t i = len; i < n; i++)
			bad += v[i] != 0; /* nothing written past the end */
	}
	ok(bad == 0, "vector rounding (VCVTNE2PS2BF16) gives the scalar one's bits on %zu values (%zu differ)",
	   n, bad);
	free(src), free(v), free(s);
}

/*
 * One product: the largest |C - ref| / (|ref| + 1) against two references in
 * double, ref16 (the inputs rounded to bf16 first) and ref32 (as they are);
 * the columns of C past N must be untouched.
 */
static void err_(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha, float beta,
                 int strided, int in_parallel, double *e16, double *e32)
{
	gemm_case c = gemm_case_run(g, ta, tb, M, N, K, alpha, beta, strided ? GEMM_CASE_AB | GEMM_CASE_C : 0,
	                            in_parallel, rand_);
	*e16 = *e32 = 0;
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s16 = 0, s32 = 0;
			for (int k = 0; k < K; k++) {
				float a = gemm_case_a(&c, i, k), b = gemm_case_b(&c, k, j);
				s16 += bf16_value_(a) * bf16_value_(b);
				s32 += (double)a * b;
			}
			double c0 = beta == 0 ? 0 : beta * (double)c.C0[(size_t)i * c.ldc + j];
			double w16 = alpha * s16 + c0, w32 = alpha * s32 + c0, v = c.C[(size_t)i * c.ldc + j];
			*e16 = fmax(*e16, fabs(v - w16) / (fabs(w16) + 1));
			*e32 = fmax(*e32, fabs(v - w32) / (fabs(w32) + 1));
		}
	if (!gemm_case_tail_ok(&c) || c.rc)
		*e16 = *e32 = INFINITY;
	gemm_case_free(&c);
}

static void test_products_(void)
{
	sw_gemm g;
	sw_error err = { 0 };
	char name[96];
	ok(sw_gemm_init(&g, NULL, &err) == SW_OK && sw_gemm_matmul(&g, "bf16", &err) == SW_OK && g.bf16,
	   "bf16 chosen (%s)", err.msg);
	/* Odd sizes, all over the 64^3 multiply-adds and the 32 rows and columns under which a
	 * product stays f32, strided (the 4th number) or not.  gemm_prim.c runs the rows as a
	 * multiple of 64 and a tail of its own padded to 64 (into a dense C: 67 = 64 + 3,
	 * 130 = 128 + 2, 424 = 384 + 40; 33 a tail alone; 128 no tail), or all padded
	 * (into a strided C); 424 rows ran 8x slower unpadded on oneDNN 2.6.3's AMX kernels. */
	static const int shapes[][4] = { { 67, 93, 65, 1 },   { 130, 90, 200, 0 }, { 33, 300, 257, 1 },
		                         { 128, 70, 96, 0 },  { 424, 48, 80, 0 },  { 424, 48, 80, 1 },
		                         { 67, 40, 128, 0 } };
	int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
	/*
	 * Against ref16 the tolerance is f32's (1e-5, as test_gemm.c's): a product
	 * of two bf16 values (8-bit significands) is exact in f32, so only the
	 * f32 accumulation differs.  Against ref32 it is bf16's: each operand is
	 * off by up to 2^-9 relative, so a sum of K random terms by about
	 * 2^-8 sqrt(K) of a term, and the largest over some 10^4 elements by
	 * four times that: 3e-2 at K = 257, under the 1e-1 allowed; and the
	 * error must be above 1e-4, or the product did not round to bf16 at all.
	 */
	for (int s = 0; s < nshapes; s++)
		for (int t = 0; t < 4; t++)
			for (int ab = 0; ab < 2; ab++) {
				int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t >> 1, tb = t & 1;
				float alpha = ab ? 0.5f : 1.0f, beta = ab ? 1.0f : 0.0f;
				double e16, e32;
				int strided = shapes[s][3];
				err_(&g, ta, tb, M, N, K, alpha, beta, strided, 0, &e16, &e32);
				ok(e16 < 1e-5 && e32 < 1e-1 && e32 > 1e-4,
				   "%dx%dx%d %c%c alpha %g beta %g%s: against bf16 inputs %.1e, against f32 %.1e", M, N,
				   K, ta ? 'T' : 'N', tb ? 'T' : 'N', alpha, beta, strided ? ", strided" : "", e16, e32);
			}
	sw_gemm_matmul_name(&g, name, sizeof name);
	ok(!strncmp(name, "bf16 brg:", 9) && strstr(name + 5, "bf16"), "the kernel: %s", name);
	double e16, e32;
	/* beta 0.25 on a fresh shape: another primitive, its sum post-op scaled. */
	err_(&g, 0, 1, 70, 80, 90, 0.5f, 0.25f, 1, 0, &e16, &e32);
	ok(e16 < 1e-5 && e32 > 1e-4, "beta 0.25 (%.1e, %.1e)", e16, e32);
	/* Inside a parallel region (attention's tiles) and under 64^3: f32. */
	err_(&g, 0, 1, 130, 90, 200, 0.5f, 1.0f, 1, 1, &e16, &e32);
	ok(e32 < 1e-5, "inside a parallel region the product is f32 (against f32 %.1e)", e32);
	err_(&g, 1, 0, 30, 40, 50, 0.5f, 1.0f, 1, 0, &e16, &e32);
	ok(e32 < 1e-5, "a product under 64^3 multiply-adds is f32 (against f32 %.1e)", e32);
	err_(&g, 0, 1, 31, 300, 257, 1, 0, 1, 0, &e16, &e32);
	ok(e32 < 1e-5, "a result of 31 rows is f32 (against f32 %.1e)", e32);
	err_(&g, 0, 1, 300, 31, 257, 1, 0, 1, 0, &e16, &e32);
	ok(e32 < 1e-5, "a result of 31 columns is f32 (against f32 %.1e)", e32);
	/*
	 * A B of more elements than bf16_chunk runs in chunks of it (gemm.c):
	 * along K where K is B's longer side, each chunk's product added to C
	 * (beta on the first alone), else along N, blocks of C's columns (the
	 * columns past N untouched: err_ checks).  Each chunk is a product of
	 * its own (the count of bf16 products says how many ran; a product whose
	 * rows are not a multiple of 64 counts once, though it runs as two).  With chunks
	 * of 4096 elements: K 200 by N 93 in 7 chunks of K (6 of 32, 8), N 300
	 * by K 65 in 7 of N (6 of 48, 12; C's column blocks are strided).
	 */
	g.bf16_chunk = 4096;
	static const int chunked[][5] = { { 67, 93, 200, 1, 7 }, { 130, 93, 200, 0, 7 }, { 130, 300, 65, 0, 7 },
		                          { 40, 300, 65, 1, 7 } };
	for (int s = 0; s < 4; s++)
		for (int t = 0; t < 4; t++)
			for (int ab = 0; ab < 2; ab++) {
				int M = chunked[s][0], N = chunked[s][1], K = chunked[s][2], ta = t >> 1, tb = t & 1;
				float alpha = ab ? 0.5f : 1.0f, beta = ab ? 1.0f : 0.0f;
				unsigned long r0 = sw_gemm_prim_runs(g.bf16);
				err_(&g, ta, tb, M, N, K, alpha, beta, chunked[s][3], 0, &e16, &e32);
				unsigned long runs = sw_gemm_prim_runs(g.bf16) - r0;
				ok(e16 < 1e-5 && e32 < 1e-1 && e32 > 1e-4 && runs == (unsigned long)chunked[s][4],
				   "in chunks along %c: %dx%dx%d %c%c alpha %g beta %g%s: %lu products, against bf16 inputs "
				   "%.1e, against f32 %.1e",
				   K >= N ? 'K' : 'N', M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N', alpha, beta,
				   chunked[s][3] ? ", strided" : "", runs, e16, e32);
			}
	/* The default: 2^21 elements; N 60000 by K 40 is two chunks of 30000, not one. */
	g.bf16_chunk = 0;
	unsigned long r0 = sw_gemm_prim_runs(g.bf16);
	err_(&g, 0, 1, 40, 60000, 40, 1, 0, 0, 0, &e16, &e32);
	ok(e16 < 1e-5 && e32 < 1e-1 && e32 > 1e-4 && sw_gemm_prim_runs(g.bf16) - r0 == 2,
	   "a B of 2.4M elements runs in 2 chunks by default (%lu; %.1e, %.1e)",
	   sw_gemm_prim_runs(g.bf16) - r0, e16, e32);
	g.bf16_chunk = SIZE_MAX;
	r0 = sw_gemm_prim_runs(g.bf16);
	err_(&g, 0, 1, 40, 60000, 40, 1, 0, 0, 0, &e16, &e32);
	ok(e16 < 1e-5 && sw_gemm_prim_runs(g.bf16) - r0 == 1, "and in one with bf16_chunk SIZE_MAX (%lu; %.1e)",
	   sw_gemm_prim_runs(g.bf16) - r0, e16);
	g.bf16_chunk = 0;
	ok(sw_gemm_error(&g) == NULL, "no failure recorded");
	ok(sw_gemm_matmul(&g, "bf17", &err) == SW_EINVAL && g.bf16 && strstr(err.msg, "'bf17'") &&
	   strstr(err.msg, "f32, bf16"),
	   "an unknown precision is refused, naming the known ones, and bf16 stays (%s)", err.msg);
	ok(sw_gemm_provider(&g, "openblas", &err) == SW_OK && g.bf16, "choosing a provider again keeps the precision");
	err_(&g, 0, 0, 67, 93, 65, 1, 0, 1, 0, &e16, &e32);
	ok(e16 < 1e-5 && e32 > 1e-4, "bf16 with OpenBLAS as the f32 provider (%.1e, %.1e)", e16, e32);
	ok(sw_gemm_matmul(&g, "f32", &err) == SW_OK && !g.bf16, "f32 again");
	err_(&g, 0, 0, 67, 93, 65, 1, 0, 1, 0, &e16, &e32);
	ok(e32 < 1e-5, "and the products are f32 (%.1e)", e32);
	sw_gemm_release(&g);
	sw_gemm_release(NULL);
}

/* ---- a training step, bf16 against f32 ---- */

static sw_rec *sample_(int i)
{
	sw_rec *r = sw_rec_new();
	uint32_t p[24], q[40];
	for (int j = 0; j < 24; j++)
		p[j] = (uint32_t)(1 + (i * 13 + j * 7) % 500);
	for (int j = 0; j < 40; j++)
		q[j] = (uint32_t)(1 + (i * 31 + j * 11) % 500);
	if (!r || sw_rec_set_u32s(r, "prompt_tokens", p, 24) || sw_rec_set_u32s(r, "response_tokens", q, 40))
		abort();
	return r;
}

/* One SFT step on the model in dir; its loss and gradient norm. */
static int step_(const char *dir, const char *prec, double *loss, double *gnorm, sw_error *err)
{
	if (sw_backend_matmul(sw_backend_get("cpu", NULL), prec, err))
		return -1;
	sw_trainer_config c = sw_trainer_defaults();
	c.algo = c.loss.algo = SW_RL_SFT;
	c.agg = sw_rl_algo_default_agg(SW_RL_SFT);
	c.adam.lr = 1e-4f;
	c.micro_tokens = 256;
	char out[600];
	snprintf(out, sizeof out, "%s-%s", dir, prec);
	sw_trainer_stats st;
	sw_trainer *t = sw_trainer_new(&c, err);
	int rc = !t || sw_trainer_load_dir(t, dir, out, err);
	for (int i = 0; !rc && i < 8; i++)
		rc = sw_trainer_add(t, sample_(i), "set", (uint64_t)i + 1, err);
	rc = rc || sw_trainer_step(t, &st, err);
	if (!rc)
		*loss = st.loss, *gnorm = st.grad_norm;
	sw_trainer_free(t);
	return rc ? -1 : 0;
}

static void test_step_(void)
{
	char dir[256], cmd[600];
	snprintf(dir, sizeof dir, "%s/sw-test-bf16-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		abort();
	char m0[300];
	snprintf(m0, sizeof m0, "%s/m0", dir);
	/* hidden 128 and 128 tokens a micro batch: its Linear products are over 64^3, so bf16 */
	sw_model_config cfg = tiny_config("llama", 512, 128, 256, 32, 256);
	sw_error err = { 0 };
	sw_model *m = sw_model_new(&cfg, &err);
	sw_model_init_random(m, 7, 0.05f);
	ok(m && !sw_model_save(m, m0, SW_DT_F32, &err), "a random model, hidden 128 (%s)", err.msg);
	sw_model_free(m);
	double l32 = 0, g32 = 0, l16 = 0, g16 = 0;
	int rc32 = step_(m0, "f32", &l32, &g32, &err);
	ok(!rc32, "an SFT step in f32: loss %.6f, gradient norm %.6f (%s)", l32, g32, err.msg);
	int rc16 = step_(m0, "bf16", &l16, &g16, &err);
	ok(!rc16, "the same step in bf16: loss %.6f, gradient norm %.6f (%s)", l16, g16, err.msg);
	/*
	 * The loss is a mean of 8 x 63 token NLLs near ln 512; bf16 operands move
	 * each logit by about 2^-8 of its size, so the mean by far less than 1e-3
	 * relative, the gradient norm (a sum of products over the same rounded
	 * operands) by less than 1e-2.  They must differ, or bf16 never ran.
	 */
	ok(!rc32 && !rc16 && fabs(l16 - l32) <= 1e-3 * fabs(l32) && fabs(g16 - g32) <= 1e-2 * fabs(g32) &&
	   (l16 != l32 || g16 != g32),
	   "bf16 and f32 agree: loss %.2e, gradient norm %.2e relative", fabs(l16 - l32) / fabs(l32),
	   fabs(g16 - g32) / fabs(g32));
	sw_backend_matmul(sw_backend_get("cpu", NULL), "f32", &err);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd))
		printf("# cannot remove %s\n", dir);
}

int main(void)
{
	sw_engine_threads(2);
	test_rounding_();
	sw_gemm g;
	sw_error err = { 0 };
	int have = sw_gemm_init(&g, NULL, &err) == SW_OK && sw_gemm_matmul(&g, "bf16", &err) == SW_OK;
	sw_gemm_release(&g);
	if (!have) {
		ok(err.code == SW_EINVAL && strstr(err.msg, "avx512_core_bf16"),
		   "without bf16 dot products bf16 is refused, saying what is missing (%s)", err.msg);
		skip(err.msg, "bf16 products against references");
		skip(err.msg, "a training step in bf16 against f32");
		return tap_done();
	}
	test_products_();
	test_step_();
	return tap_done();
}
