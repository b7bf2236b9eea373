/*
 * sampler_bench.c - sw-rollout's token sampler (sw/sampler.h) on one row of
 * logits: the median time of sw_sampler_pick (the kept set, the draw and
 * the token's log-prob) over REPS draws.  bench/bench_sampler.sh runs it
 * beside transformers' logits warpers and torch.multinomial on the same
 * logits.
 *
 *   sampler_bench LOGITS V TEMP TOP_K TOP_P REPS
 *
 * LOGITS: V float32 (little-endian), as bench_sampler.sh writes them.
 * Prints one line: KEY=VALUE pairs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_stats.h"
#include "sw/engine.h"
#include "sw/sampler.h"

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: sampler_bench LOGITS V TEMP TOP_K TOP_P REPS\n");
		return 1;
	}
	int V = atoi(argv[2]), reps = atoi(argv[6]);
	if (V < 1 || reps < 1) {
		fprintf(stderr, "sampler_bench: V and REPS must be positive\n");
		return 1;
	}
	float *z = malloc(sizeof(float) * (size_t)V);
	FILE *f = fopen(argv[1], "rb");
	if (!z || !f || fread(z, sizeof(float), (size_t)V, f) != (size_t)V) {
		fprintf(stderr, "sampler_bench: cannot read %d logits from %s\n", V, argv[1]);
		return 1;
	}
	fclose(f);
	sw_sampling par = sw_sampling_defaults();
	par.temperature = atof(argv[3]), par.top_k = atoi(argv[4]), par.top_p = atof(argv[5]);
	sw_error err = { 0 };
	sw_sampler *s = sw_sampler_new(V, &par, &err);
	if (!s) {
		fprintf(stderr, "sampler_bench: %s\n", err.msg);
		return 1;
	}
	double *t = malloc(sizeof(double) * (size_t)reps);
	long sum = 0;
	for (int i = 0; i < reps; i++) {
		float lp;
		double t0 = now_();
		int tok = sw_sampler_pick(s, z, sw_rng_uniform(7, 1, 0, (uint32_t)i), &lp, &err);
		t[i] = now_() - t0;
		if (tok < 0) {
			fprintf(stderr, "sampler_bench: %s\n", err.msg);
			return 1;
		}
		sum += tok;
	}
	printf("side=libsw V=%d temp=%g top_k=%d top_p=%g ms_per_pick=%.4f token_sum=%ld\n", V,
	       par.temperature, par.top_k, par.top_p, 1e3 * bench_median(t, reps), sum);
	sw_sampler_free(s);
	free(z), free(t);
	return 0;
}
