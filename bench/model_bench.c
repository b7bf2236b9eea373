/*
 * model_bench.c - time libsw's safetensors load and save of one model
 * directory in process, for bench/bench_model.sh.
 *
 *   model_bench DIR OUTDIR RUNS   prints "load SECONDS" and "save_f32 SECONDS",
 *                                 "save_bf16 SECONDS": medians of RUNS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sw/sw.h"

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median_(double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, cmp_);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: model_bench DIR OUTDIR RUNS\n");
		return 2;
	}
	int runs = atoi(argv[3]);
	double load[64], f32[64], bf16[64];
	if (runs < 1 || runs > 64)
		return 2;
	sw_error err = { 0 };
	sw_model *m = NULL;
	for (int i = 0; i < runs; i++) {
		sw_model_free(m);
		double t0 = now_();
		m = sw_model_load(argv[1], &err);
		load[i] = now_() - t0;
		if (!m) {
			fprintf(stderr, "model_bench: %s\n", err.msg);
			return 1;
		}
	}
	for (int i = 0; i < runs; i++) {
		double t0 = now_();
		if (sw_model_save(m, argv[2], SW_DT_F32, &err)) {
			fprintf(stderr, "model_bench: %s\n", err.msg);
			return 1;
		}
		f32[i] = now_() - t0;
		t0 = now_();
		if (sw_model_save(m, argv[2], SW_DT_BF16, &err)) {
			fprintf(stderr, "model_bench: %s\n", err.msg);
			return 1;
		}
		bf16[i] = now_() - t0;
	}
	printf("params %zu\nload %.6f\nsave_f32 %.6f\nsave_bf16 %.6f\n", m->nparams, median_(load, runs),
	       median_(f32, runs), median_(bf16, runs));
	sw_model_free(m);
	return 0;
}
