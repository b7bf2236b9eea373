/*
 * gemm.c - the CPU backend's matrix products (gemm.h): the provider chosen
 * by name, the OpenBLAS kernel fix-up, and how a product is spread over
 * OpenMP's threads for each provider.
 *
 * Why two providers: a distribution's OpenBLAS picks its kernels from a
 * table of CPUs frozen at its release, and Debian 12's 0.3.21 runs its
 * SSE3 ("Prescott") kernels on CPUs newer than the table, at a fifth of the
 * machine's rate.  oneDNN dispatches on the CPU's features at run time (it
 * is what PyTorch uses on CPU), so it is the default; OpenBLAS stays the
 * other choice, with its kernels fixed up.
 *
 * OpenBLAS is loaded (dlopen) when it is chosen, not linked: a pthreads
 * build such as Debian's starts its thread pool when the library is loaded,
 * and those threads spin with sched_yield for about 0.1 s before they
 * sleep (0.13 s of CPU for every program that started, on the cores the
 * program's own threads want), though the products never run on them.
 */
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "compute/cpu/gemm.h"

/*
 * OpenBLAS's entries, once loaded (the prototypes are cblas.h's).
 *
 * Its run-time dispatch (a DYNAMIC_ARCH build such as Debian's) chooses its
 * kernels when the library is loaded, from OPENBLAS_CORETYPE or its table
 * of CPUs.  gotoblas_dynamic_quit and _init (exported by such a build,
 * though not in cblas.h) drop the choice and make it again, reading
 * OPENBLAS_CORETYPE: the one way to change the kernels of a library that is
 * already loaded.  A build for one CPU has neither, and is left as it is.
 */
static struct {
	__typeof__(&cblas_sgemm) sgemm;
	__typeof__(&cblas_sgemv) sgemv;
	__typeof__(&openblas_get_config) get_config;
	__typeof__(&openblas_get_corename) get_corename;
	__typeof__(&openblas_set_num_threads) set_num_threads;
	void (*dynamic_init)(void), (*dynamic_quit)(void); /* NULL in a build for one CPU */
	char err[160];
	int rc;
} ob_;
static pthread_once_t ob_once_ = PTHREAD_ONCE_INIT;

#define OPENBLAS_SONAME_ "libopenblas.so.0"

static void openblas_load_once_(void)
{
	void *h = dlopen(OPENBLAS_SONAME_, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(ob_.err, sizeof ob_.err, "%s", e ? e : "cannot load " OPENBLAS_SONAME_);
		ob_.rc = SW_ENOENT;
		return;
	}
	/* dlsym's void * to a function pointer: POSIX's way, through memcpy */
#define SYM_(f, name)                                                                          \
	do {                                                                                   \
		void *p_ = dlsym(h, name);                                                     \
		memcpy(&ob_.f, &p_, sizeof p_);                                                \
	} while (0)
	SYM_(sgemm, "cblas_sgemm");
	SYM_(sgemv, "cblas_sgemv");
	SYM_(get_config, "openblas_get_config");
	SYM_(get_corename, "openblas_get_corename");
	SYM_(set_num_threads, "openblas_set_num_threads");
	SYM_(dynamic_init, "gotoblas_dynamic_init");
	SYM_(dynamic_quit, "gotoblas_dynamic_quit");
#undef SYM_
	if (!ob_.sgemm || !ob_.sgemv || !ob_.get_config || !ob_.get_corename || !ob_.set_num_threads) {
		snprintf(ob_.err, sizeof ob_.err, OPENBLAS_SONAME_ " lacks the CBLAS and OpenBLAS entries");
		ob_.rc = SW_EINVAL;
		return;
	}
	/* Single-threaded inside OpenMP's blocks (blocks_ below); an OpenMP
	 * build of OpenBLAS would set OpenMP's count too: put it back. */
	int nt = omp_get_max_threads();
	ob_.set_num_threads(1);
	omp_set_num_threads(nt);
}

/* OpenBLAS loaded, or an error naming why not. */
static int openblas_load_(sw_error *err)
{
	pthread_once(&ob_once_, openblas_load_once_);
	return ob_.rc ? sw_fail(err, ob_.rc, "openblas: %s", ob_.err) : SW_OK;
}

/* The OpenBLAS core whose kernels the CPU can run best, or NULL. */
static const char *openblas_best_core_(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
#endif
	return NULL;
}

/* Whether OpenBLAS's core name is one with kernels as wide as best's. */
static bool openblas_core_ok_(const char *core, const char *best)
{
	static const char *const avx512[] = { "SkylakeX", "Cooperlake", "SapphireRapids", NULL };
	static const char *const avx2[] = { "SkylakeX", "Cooperlake", "SapphireRapids", "Haswell",
		                            "Zen", NULL };
	const char *const *ok = !strcmp(best, "SkylakeX") ? avx512 : avx2;
	for (; *ok; ok++)
		if (!strcasecmp(core, *ok))
			return true;
	return false;
}

/*
 * Once per process (OpenBLAS's kernels are the process's): where OpenBLAS
 * runs kernels narrower than the CPU allows and the user has not chosen
 * with OPENBLAS_CORETYPE, choose the right ones.  Done before the first
 * OpenBLAS product of the backend (the library is idle: it keeps no
 * per-core state between calls).
 */
static void openblas_fixup_(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	const char *best = openblas_best_core_(), *core = ob_.get_corename();
	if (!best || !core || openblas_core_ok_(core, best) || getenv("OPENBLAS_CORETYPE") ||
	    !ob_.dynamic_init || !ob_.dynamic_quit)
		return;
	setenv("OPENBLAS_CORETYPE", best, 0);
	ob_.dynamic_quit();
	ob_.dynamic_init();
	unsetenv("OPENBLAS_CORETYPE");
}

const char *sw_dnnl_isa_name(int isa)
{
	switch ((dnnl_cpu_isa_t)isa) {
	case dnnl_cpu_isa_sse41: return "sse41";
	case dnnl_cpu_isa_avx: return "avx";
	case dnnl_cpu_isa_avx2: return "avx2";
	case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
	case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
	case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
	case dnnl_cpu_isa_avx512_core: return "avx512_core";
	case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
	case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
	case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
	default: return "isa?";
	}
}

int sw_gemm_provider(sw_gemm *g, const char *name, sw_error *err)
{
	sw_gemm n = { .bf16 = g->bf16, .bf16_chunk = g->bf16_chunk };
	if (!name || !*name || !strcmp(name, "onednn")) {
		const dnnl_version_t *v = dnnl_version();
		n.kind = SW_GEMM_ONEDNN;
		/* without it (out of memory) the products A B^T run on dnnl_sgemm: slower, the same */
		n.nt = g->nt ? g->nt : sw_gemm_prim_new(false, NULL);
		snprintf(n.kernels, sizeof n.kernels, "onednn %d.%d.%d %s%s", v->major, v->minor, v->patch,
		         sw_dnnl_isa_name(dnnl_get_effective_cpu_isa()), n.nt ? ", A B^T by matmul primitive" : "");
	} else if (!strcmp(name, "openblas")) {
		int rc = openblas_load_(err);
		if (rc)
			return rc;
		openblas_fixup_();
		/* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64": the version. */
		const char *cfg = ob_.get_config(), *core = ob_.get_corename();
		int vl = 0;
		if (cfg && !strncmp(cfg, "OpenBLAS ", 9))
			vl = (int)strcspn(cfg + 9, " ");
		n.kind = SW_GEMM_OPENBLAS;
		snprintf(n.kernels, sizeof n.kernels, "openblas %.*s %s", vl, vl ? cfg + 9 : "",
		         core ? core : "?");
		sw_gemm_prim_free(g->nt);
	} else {
		return sw_fail(err, SW_EINVAL, "unknown GEMM provider '%s' (known: " SW_GEMM_NAMES ")",
		               name);
	}
	*g = n;
	return SW_OK;
}

int sw_gemm_init(sw_gemm *g, const char *name, sw_error *err)
{
	sw_gemm n = { 0 };
	int rc = sw_gemm_provider(&n, name, err);
	if (!rc)
		*g = n;
	return rc;
}

/* One thread's product with OpenBLAS (sgemv when the result has one row:
 * decoding's case, where sgemm's packing costs more than the product). */
static void openblas1_(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
	if (M == 1) {
		/* c[N] = a[K] op(B): a matrix-vector product over B. */
		int inca = ta ? lda : 1;
		if (tb)
			ob_.sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, B, ldb, A, inca, beta, C, 1);
		else
			ob_.sgemv(CblasRowMajor, CblasTrans, K, N, alpha, B, ldb, A, inca, beta, C, 1);
		return;
	}
	ob_.sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	          M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* One thread's product with the provider (called inside a parallel region,
 * oneDNN keeps to the calling thread): 0, or oneDNN's failure (its packing
 * buffers are allocated in the call: out of memory there, C is untouched). */
static int one_(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	if (g->kind == SW_GEMM_OPENBLAS) {
		openblas1_(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
		return 0;
	}
	return (int)dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
	                       C, ldc);
}

/*
 * The product over OpenMP's threads by blocks of columns of C (or of rows,
 * when C is narrow), each block one single-threaded call.  OpenBLAS always
 * goes this way: its own threads would spin against OpenMP's between every
 * op (on 2 cores that made decoding eight times slower than the machine
 * allows).  oneDNN threads a product itself on OpenMP's pool, but splits
 * one of few rows badly (16 x 2048 x 768 ran at half of what two blocks
 * do), so those go this way too.
 */
static int blocks_(const sw_gemm *g, int nt, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc)
{
	bool by_cols = N >= 16 * nt;
	int span = by_cols ? N : M;
	/* Blocks a multiple of 16 wide, so each starts on a cache line. */
	int blk = ((span + nt - 1) / nt + 15) / 16 * 16;
	int nb = (span + blk - 1) / blk, st = 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(max : st)
	for (int b = 0; b < nb; b++) {
		int o = b * blk, w = span - o < blk ? span - o : blk, s;
		if (by_cols)
			s = one_(g, ta, tb, M, w, K, alpha, A, lda, tb ? B + (size_t)o * ldb : B + o, ldb,
			         beta, C + o, ldc);
		else
			s = one_(g, ta, tb, w, N, K, alpha, ta ? A + o : A + (size_t)o * lda, lda, B, ldb,
			         beta, C + (size_t)o * ldc, ldc);
		st = s > st ? s : st;
	}
	return st;
}

/* The product in f32 on the provider, over OpenMP's threads unless inside a
 * parallel region: 0, or oneDNN's failure. */
static int f32_(const sw_gemm *g, bool inside, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	bool big = M >= 32 && N >= 32 && (double)M * N * K >= 64.0 * 64 * 64;
	/* oneDNN's A B^T by primitive from 64 rows, where it outran dnnl_sgemm and its blocks */
	if (g->nt && !ta && tb && !inside && big && M >= 64 &&
	    sw_gemm_prim_run(g->nt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
		return 0;
	int nt = inside ? 1 : omp_get_max_threads();
	if (nt > 1 && (double)M * N * K < 64.0 * 64 * 64)
		nt = 1;
	if (nt > 1 && (g->kind == SW_GEMM_OPENBLAS || M < 64))
		return blocks_(g, nt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	return one_(g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The length along span of a chunk of B holding at most chunk elements
 * (chunk / other along span, and at least 16), the chunks as even as that
 * allows, each a multiple of 16 long (a column chunk starts on a cache line
 * where B does) but the last. */
static int chunk_len_(int span, int other, size_t chunk)
{
	size_t most = chunk / (size_t)other / 16 * 16;
	if (most < 16)
		most = 16;
	size_t n = ((size_t)span + most - 1) / most;
	return (int)((((size_t)span + n - 1) / n + 15) / 16 * 16);
}

/*
 * The product in bf16, B in chunks of at most g's bf16_chunk elements:
 * along K (each chunk's product added to C) when K is the longer of B's
 * sides, else along N (each chunk a block of C's columns).  A chunk is
 * converted just before its product reads it, from the cache, where the
 * whole of a big B (the vocabulary head's 49152 x 576 weight) went to
 * memory in bf16 and was read back from there (bench/RESULTS.md "chunk").
 * A chunk the bf16 products cannot run (after a failure, which the
 * backend's sync reports) runs in f32: it is the same product either way.
 */
static int bf16_(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	size_t chunk = g->bf16_chunk ? g->bf16_chunk : SW_GEMM_BF16_CHUNK;
	bool by_k = K >= N;
	int span = by_k ? K : N;
	int len = (size_t)K * N <= chunk ? span : chunk_len_(span, by_k ? N : K, chunk);
	for (int o = 0; o < span; o += len) {
		int w = span - o < len ? span - o : len;
		const float *a = A, *b;
		float *c = C, be = beta;
		if (by_k) {
			a = ta ? A + (size_t)o * lda : A + o;
			b = tb ? B + o : B + (size_t)o * ldb;
			be = o ? 1.0f : beta;
		} else {
			b = tb ? B + (size_t)o * ldb : B + o;
			c = C + o;
		}
		int m = M, n = by_k ? N : w, k = by_k ? w : K;
		int s = 0;
		if (!sw_gemm_prim_run(g->bf16, ta, tb, m, n, k, alpha, a, lda, b, ldb, be, c, ldc))
			s = f32_(g, false, ta, tb, m, n, k, alpha, a, lda, b, ldb, be, c, ldc);
		if (s)
			return s;
	}
	return 0;
}

/*
 * Room for what oneDNN maps in a call, under a limit on the address space
 * (RLIMIT_AS: `ulimit -v`, a batch system's virtual memory limit): there
 * its buffers' allocations fail cleanly (a status, C untouched), but the
 * code of a kernel it makes for a new shape cannot be had and oneDNN 2.6
 * does not check: it crashes.  So under a limit a product runs only with
 * AS_ROOM_ of it left, and is SW_ENOMEM otherwise.  Without one (the usual
 * case) the limit is asked again at most every 10 ms: attention's tiles make
 * hundreds of thousands of products a training step, and getrlimit costs
 * about 0.4 us.  The process's limit is the one thing cached here.
 */
#define AS_ROOM_ ((size_t)32 << 20)
#define AS_RECHECK_NS_ 10000000LL
static _Atomic long long as_unlimited_until_;

static int as_room_(int M, int N, int K, sw_error *err)
{
	struct timespec ts;
	long long now = clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) ? 0 : ts.tv_sec * 1000000000LL + ts.tv_nsec;
	if (now && now < atomic_load_explicit(&as_unlimited_until_, memory_order_relaxed))
		return SW_OK;
	struct rlimit r;
	if (getrlimit(RLIMIT_AS, &r) || r.rlim_cur == RLIM_INFINITY) {
		if (now)
			atomic_store_explicit(&as_unlimited_until_, now + AS_RECHECK_NS_, memory_order_relaxed);
		return SW_OK;
	}
	/* the process's size in pages, statm's first field (read without malloc: there may be none);
	 * without /proc it cannot be known, and the product runs as it would have */
	char buf[64];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno != ENOMEM)
		return SW_OK;
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
	if (fd >= 0)
		close(fd);
	size_t used = n > 0 ? (buf[n] = 0, (size_t)strtoull(buf, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE)) : 0;
	if (n > 0 && used + AS_ROOM_ <= (size_t)r.rlim_cur)
		return SW_OK;
	return sw_fail(err, SW_ENOMEM,
	               "a %dx%dx%d matrix product: out of memory: %zu MiB of the address space's limit of "
	               "%zu MiB (ulimit -v) in use, and oneDNN needs %zu MiB more for its code and buffers",
	               M, N, K, used >> 20, (size_t)r.rlim_cur >> 20, AS_ROOM_ >> 20);
}

int sw_gemm_run(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                sw_error *err)
{
	if (M <= 0 || N <= 0)
		return SW_OK;
	if (K <= 0) {
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
		return SW_OK;
	}
	int rc = g->kind == SW_GEMM_ONEDNN || g->bf16 ? as_room_(M, N, K, err) : SW_OK;
	if (rc)
		return rc;
	bool inside = omp_in_parallel();
	bool big = M >= 32 && N >= 32 && (double)M * N * K >= 64.0 * 64 * 64;
	/* bf16 where the conversion, O(MK + KN), is small beside the product, O(MNK):
	 * a result of fewer than 32 rows or columns ran slower than f32 (bench/RESULTS.md). */
	int s = g->bf16 && !inside && big ? bf16_(g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
	                                  : f32_(g, inside, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	if (!s)
		return SW_OK;
	if (s == dnnl_out_of_memory)
		return sw_fail(err, SW_ENOMEM, "a %dx%dx%d matrix product: oneDNN's sgemm: out of memory", M, N, K);
	return sw_fail(err, SW_EINVAL, "a %dx%dx%d matrix product: oneDNN's sgemm failed (status %d)", M, N, K, s);
}

int sw_gemm_matmul(sw_gemm *g, const char *prec, sw_error *err)
{
	if (!prec || !*prec || !strcmp(prec, "f32")) {
		sw_gemm_prim_free(g->bf16);
		g->bf16 = NULL;
		return SW_OK;
	}
	if (strcmp(prec, "bf16"))
		return sw_fail(err, SW_EINVAL, "unknown matmul precision '%s' (known: " SW_MATMUL_NAMES ")",
		               prec);
	if (g->bf16)
		return SW_OK;
	sw_gemm_prim *b = sw_gemm_prim_new(true, err);
	if (!b)
		return err ? err->code : SW_EINVAL;
	g->bf16 = b;
	return SW_OK;
}

const char *sw_gemm_matmul_name(const sw_gemm *g, char *buf, size_t size)
{
	snprintf(buf, size, "%s%s", g->bf16 ? "bf16 " : "f32", g->bf16 ? sw_gemm_prim_impl(g->bf16) : "");
	return buf;
}

const sw_error *sw_gemm_error(const sw_gemm *g)
{
	return g ? sw_gemm_prim_error(g->bf16) : NULL;
}

void sw_gemm_release(sw_gemm *g)
{
	if (!g)
		return;
	sw_gemm_prim_free(g->bf16);
	sw_gemm_prim_free(g->nt);
	g->bf16 = g->nt = NULL;
}
