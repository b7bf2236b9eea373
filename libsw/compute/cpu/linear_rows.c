/*
 * linear_rows.c - the batch-invariant product (linear_rows.h): decoding's
 * matrix products.  C[M,N] = A[M,K] W[N,K]^T + beta C, where every element
 * is the same computation whatever M is and wherever its row sits, so a
 * sequence's logits have the same bits in any batch.
 *
 * Portable and AVX2: 8 running sums over k = j mod 8, each a chain of fused
 * multiply-adds, then added pairwise in a fixed order, then the k % 8 tail.
 * Tiles of 2 rows of A by 4 rows of W share the loads; a short tile repeats
 * a row, which does not change any element's arithmetic.  The portable
 * version makes the same fmaf calls in the same order as the AVX2 one, so
 * it gives the same bits.
 *
 * AVX-512: 16 running sums over k = j mod 16, then a fixed tree (lane l
 * plus lane l + 8, then l + 4, l + 2, l + 1), then the k % 16 tail.  The
 * lane count differs from the AVX2 kernel's, so the bits differ between
 * machines with and without AVX-512; on one machine one kernel is used for
 * every call, which is what batch invariance needs.  The tree is the one
 * a transposing reduction of 16 accumulators at once computes (red16_), so
 * finishing 16 elements costs 30 shuffles and 15 adds, not 240 scalar adds.
 * Three kernels, the same arithmetic: one row of A against 16 rows of W
 * (decoding one sequence: bound by reading W, so each W load feeds one
 * FMA, and W is read in memory order, a row at a time, asked for ahead
 * into L1 or L2 by CPU: two versions of it); 4 rows of A by 6
 * of W (a batch: 10 loads feed 24 FMAs, 28 of the 32 vector registers);
 * and 4 by 4, for what is left over (short tiles, k % 16 tails).  Threads
 * take blocks of 48 rows of W (16 for one sequence), so W is read from
 * memory once a call; a group of 6 of them stays in L1 while every tile of
 * A passes over it, and A streams from L2.  With groups of 4 (the 4x4
 * tiles alone) A was read from L2 once per 4 rows of W and the products
 * ran at 130-165 GFLOP/s inside the decoder, barely more at 128 rows than
 * at 32; read once per 6 they run about 1.09x faster (bench/RESULTS.md,
 * "tile46").  Past K = 1024 a group of 6 rows no longer fits L1 beside A,
 * so K is taken in shares of 1024, each tile's sums kept in memory between
 * shares (the same chains of multiply-adds, stopped and taken up again).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "compute/cpu/linear_rows.h"

/* Worth a parallel region (as backend_cpu.c's ops). */
#define BIG_(n) ((n) >= 32768)

static inline float lanes_sum_(const float *t)
{
	return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
}

static void linear_tile_generic_(float *C, int ldc, const float *const *a, int na,
                                 const float *const *w, int nw, int K, float beta)
{
	int K8 = K / 8 * 8;
	for (int i = 0; i < na; i++)
		for (int j = 0; j < nw; j++) {
			float acc[8] = { 0 };
			for (int k = 0; k < K8; k += 8)
				for (int l = 0; l < 8; l++)
					acc[l] = fmaf(a[i][k + l], w[j][k + l], acc[l]);
			float s = lanes_sum_(acc);
			for (int k = K8; k < K; k++)
				s = fmaf(a[i][k], w[j][k], s);
			float *c = C + (size_t)i * ldc + j;
			*c = beta == 0 ? s : s + beta * *c;
		}
}

/*
 * The parts' blocks of bs rows of W, numbered as one range (part i's from
 * first[i]): a thread takes a run of them, whichever matrices they are in.
 */
typedef struct {
	const sw_rows_part *p;
	int bs, first[SW_ROWS_PARTS_MAX + 1];
	size_t rows; /* the parts' rows of W in all */
} blocks_;

static int blocks_init_(blocks_ *b, const sw_rows_part *p, int n, int bs)
{
	b->p = p, b->bs = bs, b->first[0] = 0, b->rows = 0;
	for (int i = 0; i < n; i++) {
		b->first[i + 1] = b->first[i] + (p[i].N + bs - 1) / bs;
		b->rows += (size_t)p[i].N;
	}
	return b->first[n];
}

/* Block k's part (its index returned), first row n0 and rows nw. */
static int block_at_(const blocks_ *b, int k, int *n0, int *nw)
{
	int i = 0;
	while (k >= b->first[i + 1])
		i++;
	*n0 = (k - b->first[i]) * b->bs;
	*nw = b->p[i].N - *n0 < b->bs ? b->p[i].N - *n0 : b->bs;
	return i;
}

/* Whether the products are worth a parallel region (as backend_cpu.c's ops). */
static int big_(const blocks_ *b, int M, int K)
{
	return BIG_(b->rows * (size_t)K * (size_t)(M < 8 ? M : 8) / 4);
}

/* 0: portable, 1: AVX2 + FMA, 2: AVX-512; lowered by sw_linear_rows_simd(). */
static int simd_cap_ = -1;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static void linear_tile_avx2_(float *C, int ldc,
                                                                   const float *const *a, int na,
                                                                   const float *const *w, int nw,
                                                                   int K, float beta)
{
	const float *a0 = a[0], *a1 = a[na > 1 ? 1 : 0];
	const float *w0 = w[0], *w1 = w[nw > 1 ? 1 : 0], *w2 = w[nw > 2 ? 2 : 0],
		    *w3 = w[nw > 3 ? 3 : 0];
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
	__m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
	int K8 = K / 8 * 8;
	for (int k = 0; k < K8; k += 8) {
		__m256 x0 = _mm256_loadu_ps(a0 + k), x1 = _mm256_loadu_ps(a1 + k);
		__m256 y = _mm256_loadu_ps(w0 + k);
		c00 = _mm256_fmadd_ps(x0, y, c00), c10 = _mm256_fmadd_ps(x1, y, c10);
		y = _mm256_loadu_ps(w1 + k);
		c01 = _mm256_fmadd_ps(x0, y, c01), c11 = _mm256_fmadd_ps(x1, y, c11);
		y = _mm256_loadu_ps(w2 + k);
		c02 = _mm256_fmadd_ps(x0, y, c02), c12 = _mm256_fmadd_ps(x1, y, c12);
		y = _mm256_loadu_ps(w3 + k);
		c03 = _mm256_fmadd_ps(x0, y, c03), c13 = _mm256_fmadd_ps(x1, y, c13);
	}
	float t[8][8];
	_mm256_storeu_ps(t[0], c00), _mm256_storeu_ps(t[1], c01), _mm256_storeu_ps(t[2], c02);
	_mm256_storeu_ps(t[3], c03), _mm256_storeu_ps(t[4], c10), _mm256_storeu_ps(t[5], c11);
	_mm256_storeu_ps(t[6], c12), _mm256_storeu_ps(t[7], c13);
	for (int i = 0; i < na; i++)
		for (int j = 0; j < nw; j++) {
			float s = lanes_sum_(t[i * 4 + j]);
			for (int k = K8; k < K; k++)
				s = fmaf(a[i][k], w[j][k], s);
			float *c = C + (size_t)i * ldc + j;
			*c = beta == 0 ? s : s + beta * *c;
		}
}

#define T512_ __attribute__((target("avx512f")))

/*
 * The 16 sums of 16 accumulators at once: lane 4j + i of the result is
 * c[4i + j]'s lanes added as the tree above says (l + 8, l + 4, l + 2,
 * l + 1; an add's two operands in either order give the same bits).
 */
T512_ static inline __m512 red16_(const __m512 *c)
{
	__m512 r[8], s[4], x0, x1;
	/* unrolled, so that the 16 sums stay in registers */
#pragma GCC unroll 8
	for (int p = 0; p < 8; p++) /* lane l + lane l + 8: two accumulators a vector */
		r[p] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * p], c[2 * p + 1], 0x44),
		                     _mm512_shuffle_f32x4(c[2 * p], c[2 * p + 1], 0xee));
#pragma GCC unroll 4
	for (int q = 0; q < 4; q++) /* + lane l + 4: four a vector, one a 128-bit block */
		s[q] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * q], r[2 * q + 1], 0x88),
		                     _mm512_shuffle_f32x4(r[2 * q], r[2 * q + 1], 0xdd));
	/* + lane l + 2 within each block, then + lane l + 1 */
	x0 = _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], 0x44), _mm512_shuffle_ps(s[0], s[1], 0xee));
	x1 = _mm512_add_ps(_mm512_shuffle_ps(s[2], s[3], 0x44), _mm512_shuffle_ps(s[2], s[3], 0xee));
	return _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x88), _mm512_shuffle_ps(x0, x1, 0xdd));
}

/* out = s + beta out, as the scalar code rounds it (a multiply, then an add). */
T512_ static inline void put4_(float *out, __m128 s, float beta)
{
	if (beta != 0)
		s = _mm_add_ps(s, _mm_mul_ps(_mm_set1_ps(beta), _mm_loadu_ps(out)));
	_mm_storeu_ps(out, s);
}

/*
 * Finish what a kernel could not store as vectors: a short tile or a K
 * that is not a multiple of 16.  sum[4j + i] is element (a[i], w[j]).
 */
static void finish_(float *C, int ldc, const float *sum, const float *const *a, int na,
                    const float *const *w, int nw, int K16, int K, float beta)
{
	for (int i = 0; i < na; i++)
		for (int j = 0; j < nw; j++) {
			float s = sum[4 * j + i];
			for (int k = K16; k < K; k++)
				s = fmaf(a[i][k], w[j][k], s);
			float *c = C + (size_t)i * ldc + j;
			*c = beta == 0 ? s : s + beta * *c;
		}
}

/* npf cache lines from pf on into L2, spread over the k loop's steps (a
 * tile's share of the next block of W, see tiles_). */
#define PF_STEP_()                                                                     \
	for (int p_ = 0; p_ < pf_per && j_ < npf; p_++, j_++)                          \
		_mm_prefetch((const char *)(pf + 16 * (size_t)j_), _MM_HINT_T1)

/* One row of W (16 of its elements, at p) against the tile's 4 rows of A
 * (x0 .. x3): acc[i .. i + 3] += x0 .. x3 times it. */
#define ROW4_(acc, i, p)                                                                \
	do {                                                                            \
		__m512 y_ = _mm512_loadu_ps(p);                                         \
		acc[i] = _mm512_fmadd_ps(x0, y_, acc[i]);                               \
		acc[i + 1] = _mm512_fmadd_ps(x1, y_, acc[i + 1]);                       \
		acc[i + 2] = _mm512_fmadd_ps(x2, y_, acc[i + 2]);                       \
		acc[i + 3] = _mm512_fmadd_ps(x3, y_, acc[i + 3]);                       \
	} while (0)

/*
 * A tile's share of K: its sums over k0 .. k1 (k0 a multiple of 16), from
 * zero where k0 is 0, else from st, and left in st where k1 < K, else
 * finished into C.  A lane's sum is one chain of multiply-adds in order
 * of k either way: stopping it in memory between shares does not change
 * a bit.  (st NULL: the whole of K, k0 0 and k1 K.)
 */
typedef struct {
	int k0, k1;
	__m512 *st;
} share_;

/* 4 rows of A by 4 of W (a short tile repeats a row), over sh's share of
 * K; pf, npf: lines to bring into L2 meanwhile. */
T512_ static void tile44_(float *C, int ldc, const float *const *a, int na,
                          const float *const *w, int nw, int K, share_ sh, float beta,
                          const float *pf, int npf)
{
	/* c[4i + j]: W row i by A row j, so that block j of the sums is A row j's. */
	__m512 c[16];
#pragma GCC unroll 16
	for (int i = 0; i < 16; i++)
		c[i] = sh.k0 ? sh.st[i] : _mm512_setzero_ps();
	const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
	const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
	int K16 = K / 16 * 16, ke = sh.k1 < K16 ? sh.k1 : K16, steps = (ke - sh.k0) / 16;
	int j_ = 0, pf_per = steps > 0 ? (npf + steps - 1) / steps : 0;
	for (int k = sh.k0; k < ke; k += 16) {
		PF_STEP_();
		__m512 x0 = _mm512_loadu_ps(a0 + k), x1 = _mm512_loadu_ps(a1 + k);
		__m512 x2 = _mm512_loadu_ps(a2 + k), x3 = _mm512_loadu_ps(a3 + k);
		ROW4_(c, 0, w0 + k);
		ROW4_(c, 4, w1 + k);
		ROW4_(c, 8, w2 + k);
		ROW4_(c, 12, w3 + k);
	}
	if (sh.k1 < K) {
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			sh.st[i] = c[i];
		return;
	}
	__m512 s = red16_(c);
	if (na == 4 && nw == 4 && K16 == K) {
		put4_(C, _mm512_extractf32x4_ps(s, 0), beta);
		put4_(C + ldc, _mm512_extractf32x4_ps(s, 1), beta);
		put4_(C + 2 * (size_t)ldc, _mm512_extractf32x4_ps(s, 2), beta);
		put4_(C + 3 * (size_t)ldc, _mm512_extractf32x4_ps(s, 3), beta);
		return;
	}
	/* sum[4j + i] = (a[j], w[i]): finish_ reads it with a and w swapped */
	float t[16], u[16];
	_mm512_storeu_ps(t, s);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			u[4 * i + j] = t[4 * j + i];
	finish_(C, ldc, u, a, na, w, nw, K16, K, beta);
}

/* 4 rows of A by 6 of W, whole (K a multiple of 16): the sums of tile44_,
 * two more rows of W against each load of A, over sh's share of K (st:
 * c, then d's first 8). */
T512_ static void tile46_(float *C, int ldc, const float *const *a, const float *const *w, int K,
                          share_ sh, float beta, const float *pf, int npf)
{
	/* c as in tile44_ (W rows 0-3); d[4i + j]: W row 4 + i by A row j, d[8..15] zero */
	__m512 c[16], d[16];
#pragma GCC unroll 16
	for (int i = 0; i < 16; i++) {
		c[i] = sh.k0 ? sh.st[i] : _mm512_setzero_ps();
		d[i] = sh.k0 && i < 8 ? sh.st[16 + i] : _mm512_setzero_ps();
	}
	const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
	const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3], *w4 = w[4], *w5 = w[5];
	int steps = (sh.k1 - sh.k0) / 16, j_ = 0, pf_per = steps > 0 ? (npf + steps - 1) / steps : 0;
	for (int k = sh.k0; k < sh.k1; k += 16) {
		PF_STEP_();
		__m512 x0 = _mm512_loadu_ps(a0 + k), x1 = _mm512_loadu_ps(a1 + k);
		__m512 x2 = _mm512_loadu_ps(a2 + k), x3 = _mm512_loadu_ps(a3 + k);
		ROW4_(c, 0, w0 + k);
		ROW4_(c, 4, w1 + k);
		ROW4_(c, 8, w2 + k);
		ROW4_(c, 12, w3 + k);
		ROW4_(d, 0, w4 + k);
		ROW4_(d, 4, w5 + k);
	}
	if (sh.k1 < K) {
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++) {
			sh.st[i] = c[i];
			if (i < 8)
				sh.st[16 + i] = d[i];
		}
		return;
	}
	/* lane 4j + i: A row j by W row i (s), by W row 4 + i (t, i < 2) */
	__m512 s = red16_(c), t = red16_(d);
	float u[16];
	_mm512_storeu_ps(u, t);
	put4_(C, _mm512_extractf32x4_ps(s, 0), beta);
	put4_(C + ldc, _mm512_extractf32x4_ps(s, 1), beta);
	put4_(C + 2 * (size_t)ldc, _mm512_extractf32x4_ps(s, 2), beta);
	put4_(C + 3 * (size_t)ldc, _mm512_extractf32x4_ps(s, 3), beta);
	for (int j = 0; j < 4; j++)
		for (int i = 0; i < 2; i++) {
			float *o = C + (size_t)j * ldc + 4 + i;
			*o = beta == 0 ? u[4 * j + i] : u[4 * j + i] + beta * *o;
		}
}

/* How far ahead row16_ asks for W: 1024 floats, 4 KiB. */
#define PF_AHEAD_ 1024

/*
 * The cache level row16_ asks for W into: 1 (prefetcht0) or 2 (prefetcht1);
 * by default 2 on AMD CPUs, 1 on the others; sw_linear_rows_prefetch()
 * chooses (pf_cap_; -1 the default).  An element's arithmetic is the same
 * either way.
 */
static int pf_cap_ = -1;

static int row_pf_level_(void)
{
	static int amd = -1;
	if (amd < 0) {
		__builtin_cpu_init();
		amd = __builtin_cpu_is("amd") ? 1 : 0;
	}
	return pf_cap_ > 0 ? pf_cap_ : amd ? 2 : 1;
}

/* One row of A by 16 consecutive rows of W (W, W + K, ...): one sequence
 * decoding; l2: ask for W into L2, else into L1 (a constant: row16_l1_
 * and row16_l2_ below are this body with each, the test folded away; each
 * call names its hint, which compilers want as a literal). */
T512_ static inline __attribute__((always_inline)) void row16_(float *C, const float *a, const float *W,
                                                               int K, float beta, const int l2)
{
	/* c[4i + j]: W row 4j + i, so that lane n of the sums is row n's. */
	__m512 c[16];
	int K16 = K / 16 * 16;
	size_t ld = (size_t)K;
	/* Row by row: the block is read as one run of memory.  Walking the
	 * 16 rows side by side (16 streams, or even 2) read measurably slower
	 * on an AMD EPYC.  The hardware prefetcher alone did not keep that run
	 * at the memory's rate on an Intel Xeon (Sapphire Rapids, 2 vCPUs):
	 * each cache line is asked for PF_AHEAD_ floats ahead (4 KiB, the next
	 * page, where the hardware's stream stops), which took decoding one
	 * sequence from 0.8 to 0.9 of the read bandwidth there, asked into L1
	 * (bench/RESULTS.md, "prefetch").  On an AMD EPYC (Zen 4) asking into
	 * L1 made one sequence's step 2-10% slower than asking into L2, the
	 * fastest of L1, L2 and non-temporal there (section "pfl2").  A
	 * prefetch past W's end (its address made as an integer, not as a
	 * pointer past the array) is dropped by the CPU.  An element's
	 * arithmetic is the same either way: its 16 sums over k in order. */
#pragma GCC unroll 16
	for (int n = 0; n < 16; n++) {
		const float *w = W + n * ld;
		__m512 acc = _mm512_setzero_ps();
		for (int k = 0; k < K16; k += 16) {
			const char *ahead = (const char *)((uintptr_t)(w + k) + PF_AHEAD_ * sizeof(float));
			if (l2)
				_mm_prefetch(ahead, _MM_HINT_T1);
			else
				_mm_prefetch(ahead, _MM_HINT_T0);
			acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(w + k), acc);
		}
		c[4 * (n % 4) + n / 4] = acc;
	}
	__m512 s = red16_(c);
	if (K16 == K) {
		if (beta != 0)
			s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(C)));
		_mm512_storeu_ps(C, s);
		return;
	}
	float t[16];
	_mm512_storeu_ps(t, s);
	for (int n = 0; n < 16; n++) {
		float v = t[n];
		for (int k = K16; k < K; k++)
			v = fmaf(a[k], W[n * ld + k], v);
		C[n] = beta == 0 ? v : v + beta * C[n];
	}
}

T512_ static void row16_l1_(float *C, const float *a, const float *W, int K, float beta)
{
	row16_(C, a, W, K, beta, 0);
}

T512_ static void row16_l2_(float *C, const float *a, const float *W, int K, float beta)
{
	row16_(C, a, W, K, beta, 1);
}

/* Rows of W a thread's block holds in a batch: 8 groups of 6, 3 runs of 16. */
#define BLOCK_ 48
/* Shares of K a group of W is taken in, floats: 6 rows of KC_ (24 KiB)
 * stay in L1 beside the rows of A streaming past (48 KiB on the Xeons
 * here).  With all of K = 2048 (48 KiB a group) the batch's product ran
 * at 65-75 GFLOP/s a thread against 104-127 for K <= 1024 (bench/RESULTS.md,
 * "kshare"). */
#define KC_ 1024
/* Tiles of A whose sums are kept between shares: 16 (64 rows of A; their
 * sums 32 KiB, on the stack). */
#define SB_ 16

/*
 * Tiles of 4 rows of A (a short one repeats a row) by groups of 6 of W's
 * rows n0 .. n0 + nw; what is not a whole 4x6 tile goes through tile44_.
 * K is taken in shares of KC_, each group's share passing over up to SB_
 * tiles before the next share.  The tiles share out the prefetch of the
 * next block of W (next, its rows nnext; NULL at the end), each its part
 * of the block's lines, so that the block is in L2 when the first tile
 * reaches it and the memory is asked at an even pace.
 */
T512_ static void tiles_(float *C, int N, const float *A, int M, const float *W, int n0,
                         int nw, int K, float beta, const float *next, int nnext)
{
	int K16 = K / 16 * 16, nsh = K16 > KC_ ? (K16 + KC_ - 1) / KC_ : 1;
	int ntiles = (nw + 5) / 6 * ((M + 3) / 4) * nsh, t = 0;
	long lines = next ? (long)nnext * K / 16 : 0;
	__m512 st[SB_ * 32]; /* a tile's sums: tile46_'s 24, or two tile44_'s 16 */
	for (int q = 0; q < nw; q += 6) {
		int nq = nw - q < 6 ? nw - q : 6;
		const float *w[6];
		for (int j = 0; j < 6; j++)
			w[j] = W + (size_t)(n0 + q + (j < nq ? j : 0)) * K;
		for (int mb = 0; mb < M; mb += 4 * SB_)
			for (int s = 0; s < nsh; s++) {
				share_ sh = { s * KC_, s == nsh - 1 ? K : (s + 1) * KC_, NULL };
				for (int m0 = mb; m0 < M && m0 < mb + 4 * SB_; m0 += 4, t++) {
					int na = M - m0 < 4 ? M - m0 : 4;
					const float *a[4];
					for (int i = 0; i < 4; i++)
						a[i] = A + (size_t)(m0 + (i < na ? i : 0)) * K;
					long l0 = lines * t / ntiles, l1 = lines * (t + 1) / ntiles;
					const float *pf = next ? next + 16 * l0 : NULL;
					int npf = (int)(l1 - l0);
					float *c = C + (size_t)m0 * N + n0 + q;
					sh.st = nsh > 1 ? st + (m0 - mb) / 4 * 32 : NULL;
					if (na == 4 && nq == 6 && K % 16 == 0) {
						tile46_(c, N, a, w, K, sh, beta, pf, npf);
						continue;
					}
					tile44_(c, N, a, na, w, nq < 4 ? nq : 4, K, sh, beta, pf, npf);
					if (nq > 4) {
						/* (w[5] is w[q] when nq is 5) */
						const float *w45[4] = { w[4], w[5], w[4], w[4] };
						share_ sh2 = { sh.k0, sh.k1, sh.st ? sh.st + 16 : NULL };
						tile44_(c + 4, N, a, na, w45, nq - 4, K, sh2, beta, NULL, 0);
					}
				}
			}
	}
}

static void rows_avx512_(const sw_rows_part *p, int np, const float *A, int M, int K, float beta)
{
	/* one sequence: blocks of 16, each one run of row16_ */
	blocks_ bl;
	int bs = M == 1 ? 16 : BLOCK_, nblk = blocks_init_(&bl, p, np, bs);
	void (*row16)(float *, const float *, const float *, int, float) =
		row_pf_level_() == 2 ? row16_l2_ : row16_l1_;
#pragma omp parallel for schedule(static) if (big_(&bl, M, K))
	for (int b = 0; b < nblk; b++) {
		int n0, nw, i = block_at_(&bl, b, &n0, &nw), N = p[i].N;
		float *C = p[i].C;
		const float *W = p[i].W;
		/* the next whole block to bring into L2 meanwhile: this matrix's,
		 * else the next one's first */
		const float *next = N - n0 >= 2 * bs ? W + (size_t)(n0 + bs) * K
		                  : i + 1 < np && p[i + 1].N >= bs ? p[i + 1].W : NULL;
		/* A last row alone (decoding one sequence; a batch of 4n + 1): row16_
		 * against each whole 16 rows of the block, a tile of that row alone
		 * for the rest */
		int mt = M % 4 == 1 ? M - 1 : M;
		if (mt)
			tiles_(C, N, A, mt, W, n0, nw, K, beta, next, bs);
		if (mt < M) {
			float *c = C + (size_t)mt * N;
			const float *a = A + (size_t)mt * K;
			int n16 = nw / 16 * 16;
			for (int r = 0; r < n16; r += 16)
				row16(c + n0 + r, a, W + (size_t)(n0 + r) * K, K, beta);
			if (n16 < nw)
				tiles_(c, N, a, 1, W, n0 + n16, nw - n16, K, beta, NULL, 0);
		}
	}
}

static int simd_level_(void)
{
	static int v = -1;
	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx512f") ? 2
		  : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
	}
	return simd_cap_ >= 0 && simd_cap_ < v ? simd_cap_ : v;
}
#else
static void linear_tile_avx2_(float *C, int ldc, const float *const *a, int na,
                              const float *const *w, int nw, int K, float beta)
{
	linear_tile_generic_(C, ldc, a, na, w, nw, K, beta);
}
static int simd_level_(void)
{
	return 0;
}
#endif

void sw_linear_rows_parts(const sw_rows_part *p, int np, const float *A, int M, int K, float beta)
{
	for (; np > SW_ROWS_PARTS_MAX; np -= SW_ROWS_PARTS_MAX, p += SW_ROWS_PARTS_MAX)
		sw_linear_rows_parts(p, SW_ROWS_PARTS_MAX, A, M, K, beta);
	int level = simd_level_();
#if defined(__x86_64__) && defined(__GNUC__)
	if (level == 2) {
		rows_avx512_(p, np, A, M, K, beta);
		return;
	}
#endif
	void (*tile)(float *, int, const float *const *, int, const float *const *, int, int,
	             float) = level == 1 ? linear_tile_avx2_ : linear_tile_generic_;
	blocks_ bl;
	int nblk = blocks_init_(&bl, p, np, 4);
	/* Threads take blocks of W's rows, so W is read from memory once and
	 * each block stays in cache while every row of A passes over it. */
#pragma omp parallel for schedule(static) if (big_(&bl, M, K))
	for (int nb = 0; nb < nblk; nb++) {
		int n0, nw, i = block_at_(&bl, nb, &n0, &nw), N = p[i].N;
		const float *w[4];
		for (int j = 0; j < nw; j++)
			w[j] = p[i].W + (size_t)(n0 + j) * K;
		for (int m0 = 0; m0 < M; m0 += 2) {
			int na = M - m0 < 2 ? M - m0 : 2;
			const float *a[2] = { A + (size_t)m0 * K, A + (size_t)(m0 + na - 1) * K };
			tile(p[i].C + (size_t)m0 * N + n0, N, a, na, w, nw, K, beta);
		}
	}
}

void sw_linear_rows(float *C, const float *A, const float *W, int M, int N, int K, float beta)
{
	sw_rows_part p = { C, W, N };
	sw_linear_rows_parts(&p, 1, A, M, K, beta);
}

int sw_linear_rows_simd(int cap)
{
	simd_cap_ = cap;
	return simd_level_();
}

int sw_linear_rows_prefetch(int level)
{
#if defined(__x86_64__) && defined(__GNUC__)
	pf_cap_ = level == 1 || level == 2 ? level : -1;
	return simd_level_() == 2 ? row_pf_level_() : 0;
#else
	(void)level;
	return 0;
#endif
}
