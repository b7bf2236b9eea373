/*
 * tally.c - what an iteration's samples say: counts and sums over the
 * verified samples (rewards, each verifier's score, violations, verifier
 * errors, tokens), the figures made of them, and the view of them the
 * monitors check.  One pass, constant memory: a tally is fed the samples
 * as they stream by.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "run/run_internal.h"

void sw_tally_init(sw_tally *t, const char *accuracy)
{
	memset(t, 0, sizeof *t);
	if (accuracy)
		snprintf(t->acc, sizeof t->acc, "%s", accuracy);
}

static uint64_t array_len_(sw_rec *r, const char *key)
{
	sw_val v;
	return !sw_rec_get(r, key, &v) && v.type == SW_T_ARRAY ? v.v.count : 0;
}

static int same_(const char *name, const sw_val *k)
{
	return strlen(name) == k->v.str.len && !memcmp(name, k->v.str.ptr, k->v.str.len);
}

/* One verifier's score x under name k. */
static void score_(sw_tally *t, const sw_val *k, double x)
{
	int c;
	for (c = 0; c < t->ncomp; c++)
		if (same_(t->comp[c].name, k))
			break;
	if (c == t->ncomp && t->ncomp < SW_TALLY_MAX_COMP && k->v.str.len < sizeof t->comp[0].name) {
		memcpy(t->comp[c].name, k->v.str.ptr, k->v.str.len);
		t->comp[c].name[k->v.str.len] = 0;
		t->ncomp++;
	}
	if (c < t->ncomp) {
		t->comp[c].sum += x;
		t->comp[c].sumsq += x * x;
		t->comp[c].n++;
	}
	/* accuracy: the named verifier, else the first one the run saw */
	if (!t->acc[0] && k->v.str.len < sizeof t->acc) {
		memcpy(t->acc, k->v.str.ptr, k->v.str.len);
		t->acc[k->v.str.len] = 0;
	}
	if (same_(t->acc, k)) {
		t->acc_n++;
		t->correct += x >= 1.0 - 1e-6;
	}
}

void sw_tally_add(sw_tally *t, sw_rec *r)
{
	double t0 = sw_run_now(), x;
	sw_val v;
	t->n++;
	t->prompt_tokens += array_len_(r, "prompt_tokens");
	t->response_tokens += array_len_(r, "response_tokens");
	if (array_len_(r, "violations"))
		t->violations++;
	if (!sw_rec_get(r, "verifier_error", &v))
		t->errors++;
	if (!sw_rec_get_f64(r, "reward", &x)) {
		if (isfinite(x)) {
			t->rewarded++;
			t->reward_sum += x;
		} else {
			t->nonfinite++;
		}
	}
	if (!sw_rec_get(r, "rewards", &v) && v.type == SW_T_MAP) {
		sw_iter it;
		sw_val k, s;
		sw_iter_init(&it, &v);
		while (sw_iter_next(&it, &k) == 1 && sw_iter_next(&it, &s) == 1) {
			if (k.type != SW_T_STR || sw_val_number(&s, &x))
				continue;
			if (!isfinite(x))
				t->nonfinite++;
			else
				score_(t, &k, x);
		}
	}
	t->secs += sw_run_now() - t0;
}

double sw_ratio(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

double sw_tally_accuracy(const sw_tally *t)
{
	return sw_ratio((double)t->correct, (double)t->acc_n);
}

/* A score that never changes teaches nothing and dominates nothing. */
double sw_tally_dominance(const sw_tally *t)
{
	double sum = 0, max = 0;
	int used = 0;
	for (int c = 0; c < t->ncomp; c++) {
		double n = (double)t->comp[c].n, m = sw_ratio(t->comp[c].sum, n);
		double var = sw_ratio(t->comp[c].sumsq, n) - m * m;
		if (!(var > 1e-12))
			continue;
		used++;
		sum += var;
		if (var > max)
			max = var;
	}
	return used >= 2 ? max / sum : NAN;
}

sw_mon_obs sw_tally_obs(const sw_tally *t)
{
	sw_mon_obs o = {
		.nonfinite = (int)t->nonfinite,
		.kl = NAN,
		.entropy = NAN,
		.reward_mean = sw_ratio(t->reward_sum, (double)t->rewarded),
		.violation_rate = sw_ratio((double)t->violations, (double)t->n),
		.verifier_error_rate = sw_ratio((double)t->errors, (double)t->n),
		.response_len_mean = sw_ratio((double)t->response_tokens, (double)t->n),
		.max_component_share = sw_tally_dominance(t),
		.eval_accuracy = NAN,
	};
	return o;
}

static double num_of_(sw_rec *r, const char *key)
{
	double x;
	return r && !sw_rec_get_f64(r, key, &x) ? x : NAN;
}

void sw_tally_train_obs(sw_mon_obs *o, sw_rec *train)
{
	o->kl = num_of_(train, "kl");
	o->entropy = num_of_(train, "entropy");
	/* a NaN or Inf the trainer reports (a number that is there but not finite) */
	static const char *const nums[] = { "loss", "grad_norm", "kl", "entropy" };
	for (size_t i = 0; train && i < sizeof nums / sizeof *nums; i++) {
		double x;
		if (!sw_rec_get_f64(train, nums[i], &x) && !isfinite(x))
			o->nonfinite++;
	}
}

int sw_tally_file(sw_tally *t, const char *tap, const char *samples, int failed, sw_error *err)
{
	sw_error e = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 3 };
	char path[SW_RUN_PATH_MAX];
	int rc = sw_run_path(path, sizeof path, err, "%s%s", samples, failed ? ".failed" : "");
	if (rc)
		return rc;
	samples = path;
	sw_writer *w = sw_writer_open(samples, &wo, &e);
	if (!w)
		return sw_fail(err, SW_EIO, "cannot write '%s': %s", samples, e.msg);
	sw_reader *rd = sw_reader_open(tap, &e);
	sw_rec *rec = sw_rec_new();
	int got = 0;
	if (!rd && !failed)
		rc = sw_fail(err, SW_EIO, "cannot open '%s': %s", tap, strerror(e.sys_errno));
	else if (!rec)
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	while (!rc && rd && (got = sw_reader_next(rd, rec)) == 1) {
		sw_tally_add(t, rec);
		if (sw_writer_put(w, rec))
			rc = sw_fail(err, SW_EIO, "%s: %s", samples, sw_writer_error(w)->msg);
	}
	if (!rc && got < 0 && !failed && sw_reader_error(rd)->code != SW_EEMPTY) {
		char msg[300];
		rc = sw_fail(err, SW_EFORMAT, "the verified samples are not a stream: %s: %s", tap,
		             sw_error_str(sw_reader_error(rd), msg, sizeof msg));
	}
	sw_reader_free(rd);
	sw_rec_free(rec);
	if (sw_writer_close(w) && !rc)
		rc = sw_fail(err, SW_EIO, "%s: %s", samples, sw_writer_error(w)->msg);
	sw_writer_free(w);
	return rc;
}
