/*
 * prof_bench.c - bench/bench_profile.sh's driver: what the profiling backend
 * (backend.h's sw_backend_prof) adds to one op.  The CPU backend's add of 16
 * floats, CALLS times straight and CALLS times through the profiler, the two
 * taking turns in ROUNDS rounds; the medians of the rounds' nanoseconds a
 * call, one line:
 *
 *   prof_bench CALLS ROUNDS   ->  calls=N plain_ns=X profiled_ns=Y added_ns=Y-X
 *
 * The table goes to a temporary file under $TMPDIR (else /tmp), removed at once.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "compute/backend.h"
#include "bench_stats.h"

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double ns_(const sw_backend *be, float *y, const float *x, long calls)
{
	double t = now_();
	for (long i = 0; i < calls; i++)
		be->add(y, x, 16);
	return (now_() - t) / (double)calls * 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atol(argv[1]) <= 0 || atoi(argv[2]) <= 0 || atoi(argv[2]) > 1000) {
		fprintf(stderr, "usage: prof_bench CALLS ROUNDS (ROUNDS <= 1000)\n");
		return 2;
	}
	long calls = atol(argv[1]);
	int rounds = atoi(argv[2]);
	char path[4096];
	snprintf(path, sizeof path, "%s/sw-prof-bench.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	int fd = mkstemp(path);
	if (fd < 0) {
		perror("prof_bench: mkstemp");
		return 1;
	}
	close(fd);
	sw_error err = { 0 };
	const sw_backend *cpu = sw_backend_cpu(), *prof = sw_backend_prof(cpu, path, &err);
	unlink(path); /* the table is written to the open file at exit, then gone */
	if (!prof) {
		fprintf(stderr, "prof_bench: %s\n", err.msg);
		return 1;
	}
	float x[16], y[16] = { 0 };
	for (int i = 0; i < 16; i++)
		x[i] = 1e-3f * (float)i;
	double *a = malloc(sizeof(double) * rounds), *b = malloc(sizeof(double) * rounds);
	if (!a || !b)
		return 1;
	ns_(cpu, y, x, calls / 10 + 1), ns_(prof, y, x, calls / 10 + 1); /* warm */
	for (int r = 0; r < rounds; r++) {
		a[r] = ns_(cpu, y, x, calls);
		b[r] = ns_(prof, y, x, calls);
	}
	double pa = bench_median(a, rounds), pb = bench_median(b, rounds);
	printf("calls=%ld plain_ns=%.1f profiled_ns=%.1f added_ns=%.1f check=%g\n", calls, pa, pb, pb - pa,
	       (double)y[15]);
	free(a), free(b);
	return 0;
}
