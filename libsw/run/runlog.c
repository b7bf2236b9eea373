/*
 * runlog.c - the audit records of a run (audit.log in the run directory):
 * its start or resume, each stage process, a failure, an evaluation, an
 * iteration with its samples' and weights' digests and the monitors that
 * tripped, a checkpoint with its digest, a halt, the end.  sw-audit(1)
 * reads them back; sw-run(1), AUDIT LOG, lists the fields.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "run/run_internal.h"

struct sw_runlog {
	sw_audit *audit;
	char *dir;
};

sw_runlog *sw_runlog_open(const char *rundir, sw_error *err)
{
	char p[SW_RUN_PATH_MAX];
	if (sw_run_path(p, sizeof p, err, "%s/audit.log", rundir))
		return NULL;
	sw_runlog *l = calloc(1, sizeof *l);
	if (!l || !(l->dir = strdup(rundir))) {
		free(l);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	sw_error e = { 0 };
	if (!(l->audit = sw_audit_open(p, &e))) {
		sw_fail(err, e.code, "%s: %s", p, e.msg);
		sw_runlog_close(l);
		return NULL;
	}
	return l;
}

void sw_runlog_close(sw_runlog *l)
{
	if (!l)
		return;
	sw_audit_close(l->audit);
	free(l->dir);
	free(l);
}

const char *sw_runlog_head(const sw_runlog *l)
{
	return sw_audit_head(l->audit);
}

/* A record of event for iteration it; NULL when out of memory (err says so). */
static sw_audit_rec *new_(const char *event, uint64_t it, sw_error *err)
{
	sw_audit_rec *a = sw_audit_rec_new(event);
	if (a && !sw_audit_rec_int(a, "iter", (int64_t)it))
		return a;
	sw_audit_rec_free(a);
	sw_fail(err, SW_ENOMEM, "out of memory");
	return NULL;
}

/* Append a (built with fields rc) and free it. */
static int put_(sw_runlog *l, sw_audit_rec *a, int rc, sw_error *err)
{
	sw_error e = { 0 };
	if (rc)
		rc = sw_fail(err, rc, "cannot build an audit record: %s", sw_strerror(rc));
	else if ((rc = sw_audit_append(l->audit, a, &e))) /* libsw's I/O messages name their file */
		sw_fail(err, rc, "%s%s%s", rc == SW_EIO ? "" : l->dir, rc == SW_EIO ? "" : "/audit.log: ", e.msg);
	sw_audit_rec_free(a);
	return rc;
}

/* The samples file's path in the run and its digest; a field that cannot be added goes to *f. */
static int samples_(sw_runlog *l, sw_audit_rec *a, const char *path, int *f, sw_error *err)
{
	char hex[SW_DIGEST_HEX];
	sw_error e = { 0 };
	size_t n = strlen(l->dir);
	if (sw_digest_file(path, hex, &e))
		return sw_fail(err, e.code, "%s: %s", path, e.msg);
	*f = *f ? *f : sw_audit_rec_str(a, "samples", !strncmp(path, l->dir, n) && path[n] == '/' ? path + n + 1 : path);
	*f = *f ? *f : sw_audit_rec_str(a, "samples_digest", hex);
	return 0;
}

int sw_runlog_start(sw_runlog *l, const char *event, const sw_run_start *s, sw_error *err)
{
	char hex[SW_DIGEST_HEX], cfg[SW_RUN_PATH_MAX], desc[1024];
	sw_error e = { 0 };
	sw_audit_rec *a = sw_audit_rec_new(event);
	if (!a)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	int rc = sw_audit_rec_argv(a, "argv", s->argc, s->argv);
	if (!rc && (rc = sw_run_path(cfg, sizeof cfg, err, "%s/config", l->dir)))
		goto fail;
	if (!rc && sw_digest_file(cfg, hex, &e)) {
		rc = sw_fail(err, e.code, "%s: %s", cfg, e.msg);
		goto fail;
	}
	rc = rc ? rc : sw_audit_rec_str(a, "config_digest", hex);
	rc = rc ? rc : sw_audit_rec_str(a, "model", s->model);
	if (!rc && s->model_digest) /* taken already: the model is not read a second time */
		snprintf(hex, sizeof hex, "%s", s->model_digest);
	else if (!rc && sw_digest_dir(s->model, hex, &e)) {
		rc = sw_fail(err, e.code, "%s: %s", s->model, e.msg);
		goto fail;
	}
	rc = rc ? rc : sw_audit_rec_str(a, "model_digest", hex);
	rc = rc ? rc : sw_audit_rec_str(a, "weights", s->weights);
	rc = rc ? rc : sw_audit_rec_int(a, "iter", (int64_t)s->iter);
	if (!rc && s->checkpoint)
		rc = sw_audit_rec_str(a, "checkpoint", s->checkpoint);
	if (!rc && s->checkpoint_digest)
		rc = sw_audit_rec_str(a, "checkpoint_digest", s->checkpoint_digest);
	if (!rc && s->mon && !sw_monitor_describe(s->mon, desc, sizeof desc))
		rc = sw_audit_rec_str(a, "monitors", desc);
	return put_(l, a, rc, err);
fail:
	sw_audit_rec_free(a);
	return rc;
}

int sw_runlog_stages(sw_runlog *l, const sw_pipeline *pl, uint64_t it, const char *of, sw_error *err)
{
	int rc = 0;
	for (int i = 0; !rc && i < sw_pipeline_count(pl); i++) {
		const sw_stage_proc *p = sw_pipeline_proc(pl, i);
		sw_audit_rec *a = new_("stage", it, err);
		if (!a)
			return SW_ENOMEM;
		int f = sw_audit_rec_str(a, "of", of);
		f = f ? f : sw_audit_rec_str(a, "stage", sw_stage_name(p->stage));
		f = f ? f : sw_audit_rec_str(a, "cmd", p->cmd);
		f = f ? f : sw_audit_rec_int(a, "status", sw_status_code(p->status));
		f = f ? f : sw_audit_rec_num(a, "wall_s", p->t1 - p->t0);
		f = f ? f : sw_audit_rec_num(a, "cpu_s", p->cpu);
		rc = put_(l, a, f, err);
	}
	return rc;
}

int sw_runlog_failure(sw_runlog *l, uint64_t it, const sw_stage_proc *bad, const char *why, sw_error *err)
{
	sw_audit_rec *a = new_("failure", it, err);
	if (!a)
		return SW_ENOMEM;
	int f = sw_audit_rec_str(a, "stage", sw_stage_name(bad->stage));
	f = f ? f : sw_audit_rec_str(a, "reason", why);
	return put_(l, a, f, err);
}

int sw_runlog_eval(sw_runlog *l, uint64_t it, const sw_tally *t, const char *samples, sw_error *err)
{
	double acc = sw_tally_accuracy(t), viol = sw_ratio((double)t->violations, (double)t->n);
	sw_audit_rec *a = new_("eval", it, err);
	if (!a)
		return SW_ENOMEM;
	int f = isnan(acc) ? 0 : sw_audit_rec_num(a, "accuracy", acc);
	f = f || isnan(viol) ? f : sw_audit_rec_num(a, "violation_rate", viol);
	int rc = samples_(l, a, samples, &f, err);
	if (rc) {
		sw_audit_rec_free(a);
		return rc;
	}
	return put_(l, a, f, err);
}

int sw_runlog_iteration(sw_runlog *l, uint64_t it, const char *samples, uint64_t version_before, sw_store *w,
                        const sw_mon_event *ev, size_t nev, sw_error *err)
{
	char hex[SW_DIGEST_HEX];
	sw_audit_rec *a = new_("iteration", it, err);
	if (!a)
		return SW_ENOMEM;
	int f = 0, rc = samples_(l, a, samples, &f, err);
	if (rc) {
		sw_audit_rec_free(a);
		return rc;
	}
	f = f ? f : sw_audit_rec_int(a, "weight_version_before", (int64_t)version_before);
	f = f ? f : sw_audit_rec_int(a, "weight_version", (int64_t)sw_store_version(w));
	if ((rc = sw_store_digest(w, hex, err))) { /* a cuda: store's through a host copy */
		sw_audit_rec_free(a);
		return rc;
	}
	f = f ? f : sw_audit_rec_str(a, "weights_digest", hex);
	rc = put_(l, a, f, err);
	for (size_t i = 0; !rc && i < nev; i++) {
		if (!(a = new_("monitor", it, err)))
			return SW_ENOMEM;
		f = sw_audit_rec_str(a, "monitor", ev[i].name);
		f = f ? f : sw_audit_rec_str(a, "level", sw_mon_level_name(ev[i].level));
		f = f ? f : sw_audit_rec_num(a, "value", ev[i].value);
		f = f ? f : sw_audit_rec_num(a, "threshold", ev[i].threshold);
		rc = put_(l, a, f, err);
	}
	return rc;
}

int sw_runlog_checkpoint(sw_runlog *l, uint64_t it, const char *why, uint64_t weight_version, const char *name,
                         double wall_s, const sw_digests *written, sw_error *err)
{
	sw_error e = { 0 };
	sw_audit_rec *a = new_("checkpoint", it, err);
	if (!a)
		return SW_ENOMEM;
	int f = sw_audit_rec_str(a, "why", why);
	f = f ? f : sw_audit_rec_int(a, "weight_version", (int64_t)weight_version);
	if (!f && sw_audit_rec_checkpoint(a, l->dir, name, written, &e)) {
		sw_audit_rec_free(a);
		return sw_fail(err, e.code, "checkpoint '%s/%s': %s", l->dir, name, e.msg);
	}
	f = f ? f : sw_audit_rec_num(a, "wall_s", wall_s);
	return put_(l, a, f, err);
}

int sw_runlog_event(sw_runlog *l, const char *event, uint64_t it, const char *key, const char *value,
                    sw_error *err)
{
	sw_audit_rec *a = new_(event, it, err);
	if (!a)
		return SW_ENOMEM;
	return put_(l, a, key ? sw_audit_rec_str(a, key, value) : 0, err);
}

int sw_runlog_end(sw_runlog *l, uint64_t it, uint64_t weight_version, sw_error *err)
{
	sw_audit_rec *a = new_("run_end", it, err);
	if (!a)
		return SW_ENOMEM;
	return put_(l, a, sw_audit_rec_int(a, "weight_version", (int64_t)weight_version), err);
}
