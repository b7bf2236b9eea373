/*
 * balance_bench.c - the C side of bench/bench_balance.sh.
 *
 *   balance_bench price [file]            each sample's tokens and cost (the cost model, training), one line each
 *   balance_bench part FILE K METHOD [CAPS]  partition the costs of FILE (from price) on K ranks;
 *                                         print imbalance, max/lower bound, worst capacity-share error, median seconds
 *   balance_bench large N K SEED          N log-normal samples priced by the default model, on K ranks,
 *                                         each method timed (median of 3)
 *   balance_bench gen N SEED              a stream of N small samples (log-normal prompt_tokens, median 16), for
 *                                         timing sw-balance end to end
 *
 * Everything random comes from a seeded xorshift, so runs repeat.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/sw.h"

static uint64_t rng_ = 88172645463325252ull;
static double unif_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return ((double)(rng_ >> 11) + 0.5) * 0x1.0p-53;
}

/* Log-normal tokens: median m, sigma 1, capped at 8192 (as sw-datagen -l). */
static double lognormal_(double m)
{
	double z = sqrt(-2 * log(unif_())) * cos(6.283185307179586 * unif_());
	double x = floor(m * exp(z));
	return x < 1 ? 1 : x > 8192 ? 8192 : x;
}

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void die_(const char *what)
{
	fprintf(stderr, "balance_bench: %s\n", what);
	exit(1);
}

static int price_(const char *file)
{
	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(file ? file : "-", &err);
	sw_cost_model *m = sw_cost_model_new();
	sw_rec *rec = sw_rec_new();
	if (!r || !m || !rec)
		die_("cannot open the input");
	sw_cost_model_set_train(m, 1);
	int rc;
	while ((rc = sw_reader_next(r, rec)) == 1) {
		sw_cost c;
		if (sw_cost_sample(m, rec, &c, &err))
			die_(err.msg);
		printf("%llu %.17g\n", (unsigned long long)c.tokens, (double)(float)c.total);
	}
	if (rc < 0)
		die_(sw_reader_error(r)->msg);
	sw_reader_free(r);
	sw_rec_free(rec);
	sw_cost_model_free(m);
	return 0;
}

/* imbalance, over_bound, worst relative share error, median seconds of reps runs */
static void run_(const double *cost, size_t n, size_t k, const double *cap, sw_part_method m, int reps)
{
	uint32_t *part = malloc(n * sizeof *part);
	double *load = malloc(k * sizeof *load), t[16];
	sw_error err = { 0 };
	if (!part || !load)
		die_("out of memory");
	for (int i = 0; i < reps; i++) {
		double t0 = now_();
		if (sw_partition(cost, n, k, cap, m, part, &err))
			die_(err.msg);
		t[i] = now_() - t0;
	}
	qsort(t, (size_t)reps, sizeof *t, cmp_d_);
	sw_part_stats st;
	sw_partition_stats(cost, n, k, cap, part, load, &st);
	double csum = 0, worst = 0;
	for (size_t r = 0; r < k; r++)
		csum += cap ? cap[r] : 1;
	for (size_t r = 0; r < k; r++) {
		double share = load[r] / st.total, want = (cap ? cap[r] : 1) / csum;
		worst = fmax(worst, fabs(share / want - 1));
	}
	printf("%s %.6f %.6f %.6f %.6f\n", sw_part_method_name(m), st.imbalance, st.over_bound, worst, t[reps / 2]);
	free(part);
	free(load);
}

static int part_(const char *file, size_t k, const char *method, const char *caps)
{
	FILE *f = fopen(file, "r");
	size_t n = 0, cap = 1024;
	double *cost = malloc(cap * sizeof *cost), *c = NULL, tok;
	sw_part_method m;
	if (!f || !cost || sw_part_method_parse(method, &m))
		die_("usage: part FILE K kk|lpt|seq [CAPS]");
	while (fscanf(f, "%lf %lf", &tok, &cost[n]) == 2)
		if (++n == cap && !(cost = realloc(cost, (cap *= 2) * sizeof *cost)))
			die_("out of memory");
	fclose(f);
	if (caps) {
		c = malloc(k * sizeof *c);
		const char *p = caps;
		for (size_t r = 0; r < k; r++) {
			char *end;
			c[r] = strtod(p, &end);
			if (end == p)
				die_("fewer capacities than ranks");
			p = *end ? end + 1 : end;
		}
	}
	run_(cost, n, k, c, m, 5);
	free(cost);
	free(c);
	return 0;
}

static int large_(size_t n, size_t k, uint64_t seed)
{
	sw_cost_model *cm = sw_cost_model_new();
	sw_cost_params p;
	double *cost = malloc(n * sizeof *cost);
	if (!cm || !cost)
		die_("out of memory");
	sw_cost_model_set_train(cm, 1);
	sw_cost_model_params(cm, &p);
	rng_ ^= seed * 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++) {
		double t = 100 + lognormal_(300); /* a prompt and a log-normal response */
		cost[i] = (double)(float)(p.scale * (p.linear * t + p.attention * t * t));
	}
	run_(cost, n, k, NULL, SW_PART_KK, 3);
	run_(cost, n, k, NULL, SW_PART_LPT, 3);
	run_(cost, n, k, NULL, SW_PART_SEQ, 3);
	free(cost);
	sw_cost_model_free(cm);
	return 0;
}

static int gen_(size_t n, uint64_t seed)
{
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	sw_writer *w = sw_writer_fdopen(1, "stdout", &wo, &err);
	sw_rec *rec = sw_rec_new();
	uint32_t tok[8192];
	char id[32], group[32];
	if (!w || !rec)
		die_("cannot write");
	rng_ ^= seed * 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < 8192; i++)
		tok[i] = (uint32_t)(unif_() * 32000);
	for (size_t i = 0; i < n; i++) {
		size_t t = (size_t)lognormal_(16);
		int il = snprintf(id, sizeof id, "p%zu/%zu", i / 8, i % 8), gl = snprintf(group, sizeof group, "p%zu", i / 8);
		sw_rec_clear(rec);
		if (sw_rec_set_str(rec, "id", id, (size_t)il) || sw_rec_set_str(rec, "group", group, (size_t)gl) ||
		    sw_rec_set_u32s(rec, "prompt_tokens", tok, t) || sw_rec_set_f32(rec, "reward", (float)(i % 3) / 2) ||
		    sw_writer_put(w, rec))
			die_("cannot write");
	}
	if (sw_writer_close(w))
		die_("cannot write");
	sw_writer_free(w);
	sw_rec_free(rec);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "price"))
		return price_(argc > 2 ? argv[2] : NULL);
	if (argc >= 5 && !strcmp(argv[1], "part"))
		return part_(argv[2], strtoul(argv[3], NULL, 10), argv[4], argc > 5 ? argv[5] : NULL);
	if (argc == 5 && !strcmp(argv[1], "large"))
		return large_(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
	if (argc == 4 && !strcmp(argv[1], "gen"))
		return gen_(strtoul(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
	fprintf(stderr, "usage: balance_bench price [file] | part FILE K METHOD [CAPS] | large N K SEED | gen N SEED\n");
	return 2;
}
