/*
 * test_gemm.c - the CPU backend's GEMM providers (compute/cpu/gemm.h):
 * choice by name and by $SW_GEMM, every transpose and the paths a product
 * takes (one row, few rows in blocks, many rows, inside a parallel region,
 * K = 0, beta) against a double-precision reference, and the OpenBLAS
 * kernel fix-up, seen from a child process started with OpenBLAS forced
 * onto its SSE3 kernels; a product oneDNN cannot allocate for (a child
 * under an address-space limit) is an error the backend's sync reports,
 * not a result.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cblas.h>
#include "compute/backend.h"
#include "compute/cpu/gemm.h"
#include "gemm_case.h"
#include "tap.h"

static float *rand_(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (float)((seed >> 9) & 1023) / 512.0f - 1.0f;
	}
	return p;
}

/* The largest |C - reference| over |reference| + 1 for one product, its
 * operands strided as gemm_case_run says. */
static double errs_(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha, float beta,
                    int strided, int in_parallel)
{
	gemm_case c = gemm_case_run(g, ta, tb, M, N, K, alpha, beta, strided, in_parallel, rand_);
	double worst = 0;
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)gemm_case_a(&c, i, k) * gemm_case_b(&c, k, j);
			double want = alpha * s + (beta == 0 ? 0 : beta * (double)c.C0[(size_t)i * c.ldc + j]);
			double e = fabs(c.C[(size_t)i * c.ldc + j] - want) / (fabs(want) + 1);
			worst = e > worst ? e : worst;
		}
	if (!gemm_case_tail_ok(&c) || c.rc)
		worst = INFINITY;
	gemm_case_free(&c);
	return worst;
}

static double err_(const sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha, float beta,
                   int in_parallel)
{
	return errs_(g, ta, tb, M, N, K, alpha, beta, GEMM_CASE_AB | GEMM_CASE_C, in_parallel);
}

static void products_(const char *name)
{
	sw_gemm g;
	sw_error err = { 0 };
	ok(sw_gemm_init(&g, name, &err) == SW_OK, "%s: chosen", name);
	/* M = 1 (a matrix-vector product), 5 (few rows: blocks), 130 (many rows). */
	static const int shapes[][3] = { { 1, 300, 70 }, { 5, 300, 70 }, { 130, 90, 200 },
		                         { 70, 33, 129 } };
	for (int s = 0; s < 4; s++)
		for (int t = 0; t < 4; t++) {
			int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t >> 1, tb = t & 1;
			double e = err_(&g, ta, tb, M, N, K, 0.5f, s % 2 ? 0.0f : 0.25f, 0);
			ok(e < 1e-5, "%s: %dx%dx%d %c%c, alpha and beta, 2 threads (err %.1e)", name, M, N,
			   K, ta ? 'T' : 'N', tb ? 'T' : 'N', e);
		}
	double e = err_(&g, 0, 1, 64, 128, 64, 1, 0, 1);
	ok(e < 1e-5, "%s: inside a parallel region (err %.1e)", name, e);
	e = err_(&g, 1, 0, 9, 40, 0, 1, 0.5f, 0);
	ok(e == 0, "%s: K = 0 scales C by beta", name);
	/* The same call twice: the same bits. */
	float *A = rand_(128 * 96, 4), *B = rand_(96 * 200, 5), *C1 = malloc(sizeof(float) * 128 * 200),
	      *C2 = malloc(sizeof(float) * 128 * 200);
	int rc = sw_gemm_run(&g, 0, 0, 128, 200, 96, 1, A, 96, B, 200, 0, C1, 200, NULL);
	rc |= sw_gemm_run(&g, 0, 0, 128, 200, 96, 1, A, 96, B, 200, 0, C2, 200, NULL);
	ok(rc == SW_OK && !memcmp(C1, C2, sizeof(float) * 128 * 200), "%s: deterministic", name);
	free(A), free(B), free(C1), free(C2);
	sw_gemm_release(&g);
}

/* Whether one product of g ran on its f32 primitive (g.nt's count went up),
 * and its error against the reference. */
static int by_prim_(sw_gemm *g, int ta, int tb, int M, int N, int K, float alpha, float beta, int strided,
                    int in_parallel, double *e)
{
	unsigned long n0 = sw_gemm_prim_runs(g->nt);
	*e = errs_(g, ta, tb, M, N, K, alpha, beta, strided, in_parallel);
	return sw_gemm_prim_runs(g->nt) > n0;
}

/* oneDNN's f32 products A B^T by its matmul primitive (gemm_prim.c), and
 * every product that stays with dnnl_sgemm. */
static void nt_prim_(void)
{
	sw_gemm g;
	sw_error err = { 0 };
	double e;
	ok(sw_gemm_init(&g, "onednn", &err) == SW_OK && g.nt && !g.bf16, "oneDNN has its f32 primitives");
	/* A B^T from 64 rows, operands dense: alpha, beta 0, 1 and 0.25 (the sum post-op) */
	static const float ab[][2] = { { 1, 0 }, { 0.5f, 1 }, { 0.5f, 0.25f } };
	for (int i = 0; i < 3; i++) {
		int ran = by_prim_(&g, 0, 1, 130, 90, 200, ab[i][0], ab[i][1], 0, 0, &e);
		ok(ran && e < 1e-5, "130x90x200 NT alpha %g beta %g: by primitive (%d), err %.1e", ab[i][0],
		   ab[i][1], ran, e);
	}
	ok(!strncmp(sw_gemm_prim_impl(g.nt), "brg:", 4), "on oneDNN's brg kernels (%s)", sw_gemm_prim_impl(g.nt));
	int ran = by_prim_(&g, 0, 1, 67, 93, 65, 0.5f, 0.25f, GEMM_CASE_C, 0, &e);
	ok(ran && e < 1e-5, "a strided C goes through a dense one, its tail untouched (%d, err %.1e)", ran, e);
	ran = by_prim_(&g, 0, 1, 130, 90, 200, 0.5f, 0.25f, GEMM_CASE_AB, 0, &e);
	ok(!ran && e < 1e-5, "strided A and B stay with dnnl_sgemm (%d, err %.1e)", ran, e);
	for (int t = 0; t < 4; t++) {
		int ta = t >> 1, tb = t & 1;
		if (!ta && tb)
			continue;
		ran = by_prim_(&g, ta, tb, 130, 90, 200, 1, 0, 0, 0, &e);
		ok(!ran && e < 1e-5, "%c%c stays with dnnl_sgemm (%d, err %.1e)", ta ? 'T' : 'N', tb ? 'T' : 'N', ran,
		   e);
	}
	ran = by_prim_(&g, 0, 1, 63, 300, 257, 1, 0, 0, 0, &e);
	ok(!ran && e < 1e-5, "63 rows stay with dnnl_sgemm's blocks (%d, err %.1e)", ran, e);
	ran = by_prim_(&g, 0, 1, 130, 90, 200, 1, 0, 0, 1, &e);
	ok(!ran && e < 1e-5, "inside a parallel region, dnnl_sgemm on the thread (%d, err %.1e)", ran, e);
	/* many shapes, past the cache's 64 primitives, then the first again: the same bits */
	float *A = rand_(200 * 96, 4), *B = rand_(96 * 120, 5), *C1 = malloc(sizeof(float) * 200 * 120),
	      *C2 = malloc(sizeof(float) * 200 * 120);
	int rc = sw_gemm_run(&g, 0, 1, 200, 120, 96, 1, A, 96, B, 96, 0, C1, 120, NULL);
	for (int m = 64; m < 200; m += 2)
		rc |= sw_gemm_run(&g, 0, 1, m, 120, 96, 1, A, 96, B, 96, 0, C2, 120, NULL);
	rc |= sw_gemm_run(&g, 0, 1, 200, 120, 96, 1, A, 96, B, 96, 0, C2, 120, NULL);
	ok(rc == SW_OK && !memcmp(C1, C2, sizeof(float) * 200 * 120),
	   "after 68 other shapes, the same product gives the same bits");
	free(A), free(B), free(C1), free(C2);
	ok(sw_gemm_error(&g) == NULL, "no failure recorded");
	ok(sw_gemm_provider(&g, "openblas", &err) == SW_OK && !g.nt, "OpenBLAS has none");
	ok(sw_gemm_provider(&g, "onednn", &err) == SW_OK && g.nt, "oneDNN again has them");
	sw_gemm_release(&g);
	ok(!g.nt && !g.bf16, "released");
}

/* Run this program again as CMD (with env before it); its one line of output. */
static void child_(const char *env, const char *arg, char *out, size_t n)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "%s /proc/%d/exe %s 2>&1", env, (int)getpid(), arg);
	FILE *p = popen(cmd, "r");
	out[0] = 0;
	if (p) {
		if (!fgets(out, (int)n, p))
			out[0] = 0;
		pclose(p);
	}
	out[strcspn(out, "\n")] = 0;
}

/* The child's side: OpenBLAS's core before and after choosing it. */
static int fixup_child_(int keep)
{
	char before[64];
	snprintf(before, sizeof before, "%s", openblas_get_corename());
	if (!keep)
		unsetenv("OPENBLAS_CORETYPE"); /* only forced the library's load-time choice */
	sw_gemm g;
	if (sw_gemm_init(&g, "openblas", NULL))
		return 1;
	/* The new kernels must compute right too. */
	double e = err_(&g, 0, 1, 70, 90, 100, 1, 0, 0);
	printf("before=%s after=%s kernels=%s ok=%d\n", before, openblas_get_corename(), g.kernels,
	       e < 1e-5);
	return 0;
}

static int backend_child_(void)
{
	sw_error err = { 0 };
	const sw_backend *be = sw_backend_get("cpu", &err);
	sw_error e2 = { 0 };
	int rc = sw_backend_cpu()->sync(&e2);
	printf("get=%s rc=%d msg=%s\n", be ? "ok" : "null", rc, err.msg);
	return 0;
}

#ifndef __SANITIZE_ADDRESS__
/* This process's address space, bytes (VmSize). */
static size_t vm_size_(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb << 10;
}
#endif

/* The child's side: the backend's product of n x n x n (A B^T where tb,
 * else A B) with the address space limited to what the process has and
 * room MiB more, then the limit lifted. */
static int oom_child_(int room, int tb, int n)
{
#ifdef __SANITIZE_ADDRESS__
	(void)room, (void)tb, (void)n;
	printf("skip: ASan's allocator does not run under an address-space limit\n");
	return 0;
#else
	const sw_backend *be = sw_backend_cpu();
	float *A = rand_((size_t)n * n, 1), *B = rand_((size_t)n * n, 2), *C = calloc((size_t)n * n, sizeof *C);
	be->gemm(0, 0, 64, 64, 64, 1, A, n, B, n, 0, C, n); /* oneDNN's kernels made, its threads started */
	sw_error e = { 0 };
	int rc0 = be->sync(&e);
	struct rlimit was, r;
	getrlimit(RLIMIT_AS, &was);
	r = was;
	r.rlim_cur = vm_size_() + ((size_t)room << 20);
	setrlimit(RLIMIT_AS, &r);
	usleep(30000); /* past the 10 ms for which the products take the last look at the limit as still good */
	C[0] = 12345;
	be->gemm(0, tb, n, n, n, 1, A, n, B, n, 0, C, n);
	setrlimit(RLIMIT_AS, &was);
	int rc1 = be->sync(&e);
	/* the failure stays: a later product that runs does not make it done */
	be->gemm(0, 0, 64, 64, 64, 1, A, n, B, n, 0, C + 1, n);
	sw_error e2 = { 0 };
	int rc2 = be->sync(&e2);
	printf("rc0=%d rc1=%d c0=%g rc2=%d same=%d msg=%s\n", rc0, rc1, C[0], rc2, !strcmp(e.msg, e2.msg), e.msg);
	return 0;
#endif
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "fixup"))
		return fixup_child_(0);
	if (argc > 1 && !strcmp(argv[1], "fixup-keep"))
		return fixup_child_(1);
	if (argc > 1 && !strcmp(argv[1], "backend"))
		return backend_child_();
	if (argc > 4 && !strcmp(argv[1], "oom"))
		return oom_child_(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	omp_set_num_threads(2);
	openblas_set_num_threads(1);

	sw_gemm g = { 0 }, g0;
	sw_error err = { 0 };
	ok(sw_gemm_init(&g, NULL, &err) == SW_OK && g.kind == SW_GEMM_ONEDNN &&
	   !strncmp(g.kernels, "onednn ", 7), "the default is oneDNN (%s)", g.kernels);
	g0 = g;
	ok(sw_gemm_init(&g, "mkl", &err) == SW_EINVAL && strstr(err.msg, "'mkl'") &&
	   strstr(err.msg, "onednn, openblas") && !memcmp(&g, &g0, sizeof g),
	   "an unknown provider is SW_EINVAL naming it and the known ones, g untouched");
	sw_gemm_release(&g);
	products_("onednn");
	products_("openblas");
	nt_prim_();

	/* The backend's choice: $SW_GEMM, and sw_backend_cpu_gemm. */
	ok(sw_backend_cpu_gemm("openblas", &err) == SW_OK &&
	   !strncmp(sw_backend_cpu_gemm_kernels(), "openblas ", 9), "the backend switched to OpenBLAS");
	ok(sw_backend_cpu_gemm("x", &err) == SW_EINVAL &&
	   !strncmp(sw_backend_cpu_gemm_kernels(), "openblas ", 9), "a bad name keeps the provider");
	ok(sw_backend_cpu_gemm(NULL, &err) == SW_OK &&
	   !strncmp(sw_backend_cpu_gemm_kernels(), "onednn ", 7), "NULL is the default again");
	char line[512];
	child_("SW_GEMM=bogus", "backend", line, sizeof line);
	ok(strstr(line, "get=null") && strstr(line, "rc=") && !strstr(line, "rc=0") &&
	   strstr(line, "SW_GEMM: unknown GEMM provider 'bogus'"),
	   "SW_GEMM=bogus: sw_backend_get and sync fail with the reason (%s)", line);
	child_("SW_GEMM=openblas", "backend", line, sizeof line);
	ok(strstr(line, "get=ok rc=0"), "SW_GEMM=openblas is taken (%s)", line);
	/* Under an address-space limit: with 1 MiB left a product is SW_ENOMEM
	 * (oneDNN would crash making a kernel's code for the new shape), C as it
	 * was, and the failure stays for every later sync; with 64 MiB it runs. */
	for (int tb = 0; tb < 2; tb++) {
		child_("OMP_NUM_THREADS=2", tb ? "oom 1 1 1500" : "oom 1 0 1500", line, sizeof line);
		if (!strncmp(line, "skip: ", 6)) {
			printf("ok %d - a product under an address-space limit # skip %s\n", ++tap_n_, line + 6);
			continue;
		}
		ok(strstr(line, "rc0=0 rc1=-2 c0=12345 rc2=-2 same=1 msg=cpu: a 1500x1500x1500 matrix product: "
		                "out of memory: ") && strstr(line, "(ulimit -v) in use, and oneDNN needs 32 MiB more"),
		   "A B%s with 1 MiB of address space left: C untouched, SW_ENOMEM from sync and every sync after (%s)",
		   tb ? "^T" : "", line);
		child_("OMP_NUM_THREADS=2", tb ? "oom 64 1 1500" : "oom 64 0 1500", line, sizeof line);
		ok(strstr(line, "rc0=0 rc1=0 ") && !strstr(line, "c0=12345") && strstr(line, "rc2=0"),
		   "A B%s with 64 MiB left: done (%s)", tb ? "^T" : "", line);
	}

	/* The fix-up: OpenBLAS loaded on its SSE3 kernels gets the CPU's. */
	__builtin_cpu_init();
	const char *best = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	                   __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
	                 ? "SkylakeX"
	                 : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
	                                                                                : NULL;
	child_("OPENBLAS_CORETYPE=Prescott", "fixup", line, sizeof line);
	char want[128];
	snprintf(want, sizeof want, "before=Prescott after=%s ", best ? best : "Prescott");
	ok(!strncmp(line, want, strlen(want)) && strstr(line, "ok=1"),
	   "OpenBLAS on Prescott kernels is moved to %s, and computes right (%s)",
	   best ? best : "nothing", line);
	child_("OPENBLAS_CORETYPE=Prescott", "fixup-keep", line, sizeof line);
	ok(!strncmp(line, "before=Prescott after=Prescott ", 31) && strstr(line, "ok=1"),
	   "OPENBLAS_CORETYPE set by the user is kept (%s)", line);
	return tap_done();
}
