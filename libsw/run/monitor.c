/*
 * monitor.c - the run's monitors (see sw/monitor.h): a table of rules, each
 * reading one figure of an iteration and comparing it with three thresholds.
 * Figures derived from history (length growth, the reward-hacking sign) are
 * computed here, so sw-run only reports what it measured.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/monitor.h"

enum { R_NONFINITE, R_KL, R_ENTROPY, R_VIOLATIONS, R_VERIFIER_ERRORS, R_LENGTH, R_DOMINANCE,
       R_HACKING, R_COUNT };

typedef struct rule_ {
	const char *name;
	bool lower;                 /* trips below the threshold instead of above */
	double t[3];                /* warn, degrade, hard; NAN = off */
} rule_;

/*
 * The defaults: a NaN anywhere halts; a verifier that fails on many samples
 * degrades then halts (its scores cannot be trusted); the rest warn and
 * degrade early and halt only when the run has clearly gone wrong.  Entropy
 * and reward dominance depend too much on the task for a default halt.
 */
static const rule_ defaults_[R_COUNT] = {
	[R_NONFINITE] = { "nonfinite", false, { NAN, NAN, 0 } },
	[R_KL] = { "kl", false, { 0.5, 1.0, 5.0 } },
	[R_ENTROPY] = { "entropy", true, { 0.05, 0.01, NAN } },
	[R_VIOLATIONS] = { "violation_rate", false, { 0.25, 0.5, 0.8 } },
	[R_VERIFIER_ERRORS] = { "verifier_errors", false, { 0.01, 0.05, 0.2 } },
	[R_LENGTH] = { "length_growth", false, { 2.0, 3.0, 5.0 } },
	[R_DOMINANCE] = { "reward_dominance", false, { 0.95, NAN, NAN } },
	[R_HACKING] = { "reward_hacking", false, { 0.05, 0.1, 0.2 } },
};

struct sw_monitor {
	rule_ r[R_COUNT];
	sw_mon_history h;
};

const char *const *sw_monitor_names(void)
{
	static const char *names[R_COUNT + 1];
	for (int i = 0; i < R_COUNT; i++)
		names[i] = defaults_[i].name;
	return names;
}

sw_monitor *sw_monitor_new(void)
{
	sw_monitor *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	memcpy(m->r, defaults_, sizeof m->r);
	m->h.first_len = m->h.eval_reward = m->h.eval_accuracy = NAN;
	return m;
}

void sw_monitor_free(sw_monitor *m)
{
	free(m);
}

void sw_monitor_get_history(const sw_monitor *m, sw_mon_history *h)
{
	*h = m->h;
}

void sw_monitor_set_history(sw_monitor *m, const sw_mon_history *h)
{
	m->h = *h;
}

const char *sw_mon_level_name(sw_mon_level l)
{
	static const char *const n[] = { "ok", "warn", "degrade", "hard" };
	return l <= SW_MON_HARD ? n[l] : "?";
}

static int threshold_(const char *s, size_t n, double *out)
{
	char buf[64], *end;
	if (n == 1 && s[0] == '-') {
		*out = NAN;
		return 0;
	}
	if (n == 0 || n >= sizeof buf)
		return -1;
	memcpy(buf, s, n);
	buf[n] = 0;
	*out = strtod(buf, &end);
	return *end || !isfinite(*out) ? -1 : 0;
}

int sw_monitor_set(sw_monitor *m, const char *spec, sw_error *err)
{
	const char *eq = strchr(spec, '=');
	int which = -1;
	if (!eq)
		return sw_fail(err, SW_EINVAL, "monitor '%s' wants NAME=WARN,DEGRADE,HARD or NAME=off", spec);
	for (int i = 0; i < R_COUNT; i++)
		if (strlen(defaults_[i].name) == (size_t)(eq - spec) && !strncmp(spec, defaults_[i].name, (size_t)(eq - spec)))
			which = i;
	if (which < 0)
		return sw_fail(err, SW_EINVAL, "no monitor named '%.*s'", (int)(eq - spec), spec);
	rule_ *r = &m->r[which];
	const char *v = eq + 1;
	if (!strcmp(v, "off")) {
		r->t[0] = r->t[1] = r->t[2] = NAN;
		return 0;
	}
	double t[3];
	for (int i = 0; i < 3; i++) {
		const char *c = strchr(v, ',');
		size_t n = c ? (size_t)(c - v) : strlen(v);
		if ((i < 2) != (c != NULL) || threshold_(v, n, &t[i]))
			return sw_fail(err, SW_EINVAL,
			               "monitor '%s': thresholds are three numbers or '-', WARN,DEGRADE,HARD", spec);
		v = c ? c + 1 : v + n;
	}
	/* the levels must be ordered: a hard limit milder than the warning is a typo */
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (!isnan(t[i]) && !isnan(t[j]) && (r->lower ? t[j] > t[i] : t[j] < t[i]))
				return sw_fail(err, SW_EINVAL, "monitor '%s': the levels must %s from warn to hard",
				               spec, r->lower ? "fall" : "rise");
	memcpy(r->t, t, sizeof t);
	return 0;
}

int sw_monitor_describe(const sw_monitor *m, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < R_COUNT; i++) {
		char t[3][32];
		for (int k = 0; k < 3; k++)
			if (isnan(m->r[i].t[k]))
				strcpy(t[k], "-");
			else
				snprintf(t[k], sizeof t[k], "%g", m->r[i].t[k]);
		int n = snprintf(buf + used, size - used, "%s%s=%s,%s,%s", i ? " " : "", m->r[i].name,
		                 t[0], t[1], t[2]);
		if (n < 0 || (size_t)n >= size - used)
			return SW_ERANGE;
		used += (size_t)n;
	}
	return 0;
}

sw_mon_level sw_monitor_check(sw_monitor *m, const sw_mon_obs *o, sw_mon_event *ev, size_t cap,
                              size_t *n)
{
	double v[R_COUNT];
	v[R_NONFINITE] = o->nonfinite > 0 ? o->nonfinite : NAN;
	v[R_KL] = o->kl;
	v[R_ENTROPY] = o->entropy;
	v[R_VIOLATIONS] = o->violation_rate;
	v[R_VERIFIER_ERRORS] = o->verifier_error_rate;
	v[R_DOMINANCE] = o->max_component_share;
	/* growth of the mean response length over the first iteration's */
	if (isnan(m->h.first_len) && o->response_len_mean > 0)
		m->h.first_len = o->response_len_mean;
	v[R_LENGTH] = m->h.first_len > 0 ? o->response_len_mean / m->h.first_len : NAN;
	/*
	 * The reward-hacking sign: since the last evaluation the training
	 * reward rose while the held-out accuracy fell; the figure is the fall.
	 */
	v[R_HACKING] = NAN;
	if (!isnan(o->eval_accuracy)) {
		if (!isnan(m->h.eval_accuracy) && o->reward_mean > m->h.eval_reward &&
		    o->eval_accuracy < m->h.eval_accuracy)
			v[R_HACKING] = m->h.eval_accuracy - o->eval_accuracy;
		m->h.eval_accuracy = o->eval_accuracy;
		m->h.eval_reward = o->reward_mean;
	}

	sw_mon_event all[R_COUNT];
	size_t k = 0;
	sw_mon_level worst = SW_MON_OK;
	for (int i = 0; i < R_COUNT; i++) {
		const rule_ *r = &m->r[i];
		if (isnan(v[i]))
			continue;
		for (int lv = 2; lv >= 0; lv--) {
			double t = r->t[lv];
			if (isnan(t) || (r->lower ? !(v[i] < t) : !(v[i] > t)))
				continue;
			sw_mon_event *e = &all[k++];
			snprintf(e->name, sizeof e->name, "%s", r->name);
			e->level = (sw_mon_level)(lv + 1);
			e->value = v[i];
			e->threshold = t;
			if (e->level > worst)
				worst = e->level;
			break;
		}
	}
	/* the worst first, in rule order within a level */
	size_t out = 0;
	for (int lv = SW_MON_HARD; lv >= SW_MON_WARN; lv--)
		for (size_t i = 0; i < k; i++)
			if ((int)all[i].level == lv && out < cap)
				ev[out++] = all[i];
	*n = k;
	return worst;
}
