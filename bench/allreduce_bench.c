/*
 * allreduce_bench.c - the time of sw_comm_allreduce_sum_f32 (sw/dist.h) on
 * a vector of MB megabytes across the ranks an MPI launcher started, the
 * sum data-parallel training does every step.  Rank 0 prints one line:
 *   RANKS BYTES MEDIAN_S P10_S P90_S ALGBW_GBPS BUSBW_GBPS
 * algbw is bytes over time; busbw is algbw * 2 (N - 1) / N, what each link
 * carries in a ring (reduce-scatter then all-gather), comparable across N.
 * Usage: mpirun -np N allreduce_bench [MB [REPS]] (default 64 MB, 15).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sw/dist.h"
#include "bench_stats.h"

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	double mb = argc > 1 ? atof(argv[1]) : 64;
	int reps = argc > 2 ? atoi(argv[2]) : 15;
	sw_error err = { 0 };
	sw_comm *c = NULL;
	if (mb <= 0 || reps < 1) {
		fprintf(stderr, "usage: allreduce_bench [MB [REPS]]\n");
		return 2;
	}
	if (sw_comm_open(&c, &err)) {
		fprintf(stderr, "allreduce_bench: %s\n", err.msg);
		return 1;
	}
	size_t n = (size_t)(mb * 1e6 / sizeof(float));
	float *x = malloc(sizeof *x * (n ? n : 1));
	double *t = malloc(sizeof *t * (size_t)reps);
	if (!x || !t) {
		fprintf(stderr, "allreduce_bench: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(i % 1000) * 1e-3f;
	/* one untimed round: connections made, pages touched */
	int rc = sw_comm_allreduce_sum_f32(c, x, n, &err);
	for (int r = 0; !rc && r < reps; r++) {
		rc = sw_comm_barrier(c, &err);
		double t0 = now_();
		rc = rc ? rc : sw_comm_allreduce_sum_f32(c, x, n, &err);
		t[r] = now_() - t0;
	}
	if (rc) {
		fprintf(stderr, "allreduce_bench: %s\n", err.msg);
		return 1;
	}
	int size = sw_comm_size(c);
	if (sw_comm_rank(c) == 0) {
		double bytes = (double)n * sizeof(float);
		double med = bench_median(t, reps), p10 = t[reps / 10], p90 = t[reps - 1 - reps / 10];
		double alg = bytes / med / 1e9;
		printf("%d %.0f %.6f %.6f %.6f %.3f %.3f\n", size, bytes, med, p10, p90, alg,
		       size > 1 ? alg * 2 * (size - 1) / size : 0.0);
	}
	free(x);
	free(t);
	sw_comm_close(c);
	return 0;
}
