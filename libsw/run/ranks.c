/*
 * ranks.c - how evenly a data-parallel stage's ranks worked.  Rank 0 of a
 * program run under an MPI launcher says how long each rank was at work
 * (not waiting on the others in a collective) by appending a record to the
 * file $SW_RANK_TIMES names; sw-run reads the iteration's records into the
 * metrics' rank_imbalance, each stage's largest busy time over the mean.
 * Measured, where sw-balance's `imbalance` is the partition's prediction.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run/run_internal.h"

int sw_run_rank_times_put(const char *program, const double *busy, int n, sw_error *err)
{
	const char *path = getenv("SW_RANK_TIMES");
	if (!path || !*path || n < 1)
		return 0;
	sw_rec *r = sw_rec_new();
	float *b = malloc(sizeof *b * (size_t)n);
	int rc = !r || !b ? SW_ENOMEM : 0;
	for (int i = 0; !rc && i < n; i++)
		b[i] = (float)busy[i];
	if (!rc)
		rc = sw_rec_set_str(r, "program", program, strlen(program)) || sw_rec_set_f32s(r, "busy_s", b, (size_t)n)
		   ? SW_ENOMEM : 0;
	rc = rc ? sw_fail(err, rc, "out of memory") : sw_metrics_append(path, r, err);
	free(b);
	sw_rec_free(r);
	return rc;
}

/* max over mean of a record's busy_s; NAN when it has none */
static double imbalance_(sw_rec *rec)
{
	sw_val v, x;
	sw_iter it;
	double sum = 0, max = 0;
	int n = 0;
	if (sw_rec_get(rec, "busy_s", &v) || v.type != SW_T_ARRAY)
		return NAN;
	sw_iter_init(&it, &v);
	while (sw_iter_next(&it, &x) == 1) {
		double t = x.type == SW_T_F32 ? x.v.f32 : x.type == SW_T_F64 ? x.v.f64 : x.type == SW_T_UINT ? (double)x.v.u : NAN;
		if (!isfinite(t) || t < 0)
			return NAN;
		sum += t;
		max = t > max ? t : max;
		n++;
	}
	return n && sum > 0 ? max / (sum / n) : NAN;
}

sw_rec *sw_run_rank_times(const char *rundir)
{
	char p[SW_RUN_PATH_MAX];
	if (sw_run_path(p, sizeof p, NULL, "%s/tmp/rank-times.jsonl", rundir))
		return NULL;
	sw_reader *rd = sw_reader_open(p, NULL);
	sw_rec *rec = sw_rec_new(), *out = sw_rec_new();
	int any = 0;
	while (rd && rec && out && sw_reader_next(rd, rec) == 1) {
		const char *prog;
		size_t n;
		double imb = imbalance_(rec);
		if (sw_rec_get_str(rec, "program", &prog, &n) || isnan(imb))
			continue;
		/* sw-rollout -> rollout: the stage's name for the stage's program */
		char key[64];
		if (n > 3 && !strncmp(prog, "sw-", 3)) {
			prog += 3;
			n -= 3;
		}
		if (n >= sizeof key)
			continue;
		memcpy(key, prog, n);
		key[n] = 0;
		any |= !sw_rec_set_f64(out, key, imb);
	}
	sw_reader_free(rd);
	sw_rec_free(rec);
	unlink(p); /* what an evaluation's stages add is not the next iteration's */
	if (!any) {
		sw_rec_free(out);
		return NULL;
	}
	return out;
}
