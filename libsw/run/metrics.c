/*
 * metrics.c - the records of metrics.jsonl: one per iteration and one per
 * evaluation, built as records and written with the stream writer (JSON
 * Lines), so numbers and escaping are the JSON library's; a figure that
 * was not measured is null.  Also the reading side: the last record of a
 * file a stage wrote, and trimming the file back for a resumed run.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "run/run_internal.h"

/* A number, or nil when it was not measured. */
static int num_(sw_rec *r, const char *key, double x)
{
	return isnan(x) ? sw_rec_set_nil(r, key) : sw_rec_set_f64(r, key, x);
}

static double num_of_(sw_rec *r, const char *key)
{
	double x;
	return r && !sw_rec_get_f64(r, key, &x) ? x : NAN;
}

int sw_metrics_append(const char *path, sw_rec *rec, sw_error *err)
{
	sw_error e = { 0 };
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	struct stat st;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), se = 0, reg = 0;
	/* a file: appended under its lock, synced, and cut back when the append fails; a pipe or a
	 * terminal (--metrics /dev/stderr) is only written */
	if (fd < 0 || fstat(fd, &st) || ((reg = S_ISREG(st.st_mode)) && flock(fd, LOCK_EX))) {
		se = errno;
		sw_fail(err, SW_EIO, "cannot %s '%s': %s", fd < 0 ? "open" : "lock", path, strerror(se));
		if (err)
			err->sys_errno = se;
		if (fd >= 0)
			close(fd);
		return SW_EIO;
	}
	sw_writer *w = sw_writer_fdopen(fd, path, &wo, &e);
	int rc = 0;
	if (!w || sw_writer_put(w, rec) || sw_writer_close(w))
		rc = sw_fail(err, SW_EIO, "cannot write '%s': %s", path, w ? sw_writer_error(w)->msg : e.msg);
	else if (reg && fsync(fd))
		se = errno, rc = sw_fail(err, SW_EIO, "cannot write '%s': fsync: %s", path, strerror(se));
	if (rc && reg) {
		/* the file ends with its last whole record again: a full disk leaves no part of one */
		int c = sw_fd_cut_back(fd, st.st_size);
		if (c && err) {
			size_t n = strlen(err->msg);
			snprintf(err->msg + n, sizeof err->msg - n, "; nor cut the part written off again: %s", strerror(c));
		}
	}
	sw_writer_free(w);
	close(fd);
	return rc;
}

sw_rec *sw_metrics_last(const char *path, sw_error *err)
{
	sw_reader *r = sw_reader_open(path, NULL);
	if (!r)
		return NULL;
	sw_rec *rec = sw_rec_new(), *last = NULL;
	int rc = 0;
	while (rec && (rc = sw_reader_next(r, rec)) == 1) {
		sw_rec_free(last);
		last = rec;
		if (sw_rec_own(last)) {
			rec = NULL;
			break;
		}
		rec = sw_rec_new();
	}
	if (!rec)
		sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	else if (rc < 0) {
		char where[300];
		sw_fail(err, sw_reader_error(r)->code, "%s: %s", path,
		        sw_error_str(sw_reader_error(r), where, sizeof where));
	}
	sw_rec_free(rec);
	sw_reader_free(r);
	return last;
}

int sw_metrics_trim(const char *path, const char *tmp, uint64_t iter, sw_error *err)
{
	sw_error e = { 0 };
	sw_reader *rd = sw_reader_open(path, &e);
	if (!rd)
		return 0; /* no metrics yet */
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	sw_writer *w = sw_writer_open(tmp, &wo, &e);
	sw_rec *rec = sw_rec_new();
	int rc = 0, got;
	uint64_t it;
	if (!w || !rec)
		rc = sw_fail(err, SW_EIO, "cannot write '%s': %s", tmp, e.msg);
	while (!rc && (got = sw_reader_next(rd, rec)) == 1)
		if (!sw_rec_get_u64(rec, "iter", &it) && it <= iter && sw_writer_put(w, rec))
			rc = sw_fail(err, SW_EIO, "cannot write '%s': %s", tmp, sw_writer_error(w)->msg);
	if (!rc && got < 0) {
		char msg[300];
		rc = sw_fail(err, SW_EFORMAT, "%s: %s", path, sw_error_str(sw_reader_error(rd), msg, sizeof msg));
	}
	if (!rc && (sw_writer_close(w) || rename(tmp, path)))
		rc = sw_fail(err, SW_EIO, "cannot write '%s'", path);
	sw_writer_free(w);
	sw_reader_free(rd);
	sw_rec_free(rec);
	return rc;
}

int sw_metrics_iteration(sw_rec *m, const sw_iter_figures *f)
{
	const sw_tally *t = f->tally;
	const sw_mon_obs *o = f->obs;
	sw_rec *rw = sw_rec_new(), *ts = sw_rec_new(), *cpu = sw_rec_new(), *rss = sw_rec_new(), *ib = sw_rec_new();
	int rc = !rw || !ts || !cpu || !rss || !ib ? SW_ENOMEM : 0;
	if (rc)
		goto out;
	rc |= sw_rec_set_u64(m, "iter", f->iter);
	rc |= num_(m, "reward_mean", o->reward_mean);
	for (int c = 0; c < t->ncomp; c++)
		rc |= num_(rw, t->comp[c].name, sw_ratio(t->comp[c].sum, (double)t->comp[c].n));
	rc |= sw_rec_set_map(m, "rewards", rw);
	rc |= num_(m, "accuracy", sw_tally_accuracy(t));
	rc |= num_(m, "violation_rate", o->violation_rate);
	rc |= num_(m, "verifier_error_rate", o->verifier_error_rate);
	rc |= num_(m, "kl", o->kl);
	rc |= num_(m, "entropy", o->entropy);
	double clip = num_of_(f->train, "clip_frac");
	if (isnan(clip) && !isnan(num_of_(f->train, "clip_frac_low")))
		clip = num_of_(f->train, "clip_frac_low") + num_of_(f->train, "clip_frac_high");
	rc |= num_(m, "clip_frac", clip);
	rc |= num_(m, "loss", num_of_(f->train, "loss"));
	rc |= num_(m, "grad_norm", num_of_(f->train, "grad_norm"));
	rc |= num_(m, "lr", num_of_(f->train, "lr"));
	rc |= num_(m, "response_len_mean", o->response_len_mean);
	rc |= num_(m, "tokens_per_s", sw_ratio((double)(t->prompt_tokens + t->response_tokens), f->wall_s));
	for (int i = 0; f->pl && i < sw_pipeline_count(f->pl); i++) {
		const sw_stage_proc *p = sw_pipeline_proc(f->pl, i);
		const char *name = sw_stage_name(p->stage);
		if (p->stage == SW_STAGE_TAP)
			continue;
		rc |= num_(ts, name, p->t1 - p->t0);
		rc |= num_(cpu, name, p->cpu);
		rc |= num_(rss, name, p->rss_mb);
	}
	rc |= num_(ts, "pool_update", f->pool_update_s);
	rc |= num_(ts, "iteration", f->wall_s);
	if (!isnan(f->eval_s))
		rc |= num_(ts, "eval", f->eval_s);
	rc |= sw_rec_set_map(m, "time_s", ts);
	rc |= sw_rec_set_map(m, "cpu_s", cpu);
	rc |= sw_rec_set_map(m, "rss_mb", rss);
	/* sw-balance --stats: {"imbalance": {"max_over_mean": ...}} */
	double imb = NAN;
	if (f->balance && !sw_rec_get_map(f->balance, "imbalance", ib))
		imb = num_of_(ib, "max_over_mean");
	rc |= num_(m, "imbalance", imb);
	/* measured: the data-parallel stages' ranks, largest busy time over the mean */
	rc |= f->ranks ? sw_rec_set_map(m, "rank_imbalance", f->ranks) : sw_rec_set_nil(m, "rank_imbalance");
	rc |= num_(m, "monitor_overhead", sw_ratio(f->monitor_s, f->wall_s));
	rc |= sw_rec_set_u64(m, "samples", t->n);
	rc |= sw_rec_set_u64(m, "weight_version", f->weight_version);
	rc |= sw_rec_set_f64(m, "lr_scale", f->lr_scale);
	if (f->nev) {
		char buf[512] = "";
		size_t used = 0;
		for (size_t i = 0; i < f->nev && used < sizeof buf; i++)
			used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s:%s", i ? "," : "", f->ev[i].name,
			                         sw_mon_level_name(f->ev[i].level));
		rc |= sw_rec_set_str(m, "monitors", buf, strlen(buf));
	}
out:
	sw_rec_free(rw), sw_rec_free(ts), sw_rec_free(cpu), sw_rec_free(rss), sw_rec_free(ib);
	return rc ? SW_ENOMEM : 0;
}

int sw_metrics_eval(sw_rec *m, uint64_t iter, const sw_tally *t, double secs)
{
	int rc = sw_rec_set_u64(m, "iter", iter);
	rc |= sw_rec_set_bool(m, "eval", true);
	rc |= num_(m, "accuracy", sw_tally_accuracy(t));
	rc |= num_(m, "violation_rate", sw_ratio((double)t->violations, (double)t->n));
	rc |= num_(m, "reward_mean", sw_ratio(t->reward_sum, (double)t->rewarded));
	rc |= num_(m, "response_len_mean", sw_ratio((double)t->response_tokens, (double)t->n));
	rc |= sw_rec_set_u64(m, "samples", t->n);
	rc |= num_(m, "time_s", secs);
	return rc ? SW_ENOMEM : 0;
}

int sw_metrics_halted(sw_rec *m, uint64_t iter, const sw_tally *t, const sw_mon_obs *o, const char *monitor,
                      const char *failed_stage)
{
	char mons[64];
	snprintf(mons, sizeof mons, "%s:hard", monitor);
	int rc = sw_rec_set_u64(m, "iter", iter);
	rc |= num_(m, "reward_mean", o->reward_mean);
	rc |= num_(m, "violation_rate", o->violation_rate);
	rc |= num_(m, "verifier_error_rate", o->verifier_error_rate);
	rc |= sw_rec_set_u64(m, "samples", t->n);
	rc |= sw_rec_set_str(m, "monitors", mons, strlen(mons));
	rc |= sw_rec_set_str(m, "failed", failed_stage, strlen(failed_stage));
	return rc ? SW_ENOMEM : 0;
}

int sw_metrics_has_eval(const char *path, uint64_t iter)
{
	sw_reader *rd = sw_reader_open(path, NULL);
	sw_rec *rec = sw_rec_new();
	uint64_t it;
	sw_val v;
	int found = 0;
	while (rd && rec && !found && sw_reader_next(rd, rec) == 1)
		found = !sw_rec_get_u64(rec, "iter", &it) && it == iter && !sw_rec_get(rec, "eval", &v) &&
		        v.type == SW_T_BOOL && v.v.b;
	sw_rec_free(rec);
	sw_reader_free(rd);
	return found;
}

int sw_run_stage_records(const char *rundir, sw_rec **train, sw_rec **bal, char *warn, size_t n)
{
	char p[SW_RUN_PATH_MAX];
	sw_error e = { 0 };
	*train = *bal = NULL;
	if (!sw_run_path(p, sizeof p, &e, "%s/tmp/train-metrics.jsonl", rundir))
		*train = sw_metrics_last(p, &e);
	if (!e.code && !sw_run_path(p, sizeof p, &e, "%s/tmp/balance-stats.json", rundir))
		*bal = sw_metrics_last(p, &e);
	if (e.code)
		snprintf(warn, n, "%s", e.msg);
	return e.code;
}

/* Seconds as "42 s", "3m05s" or "2h07m". */
static void span_(char *buf, size_t n, double s)
{
	long x = isfinite(s) && s > 0 ? (long)(s + 0.5) : 0;
	if (x < 60)
		snprintf(buf, n, "%ld s", x);
	else if (x < 3600)
		snprintf(buf, n, "%ldm%02lds", x / 60, x % 60);
	else
		snprintf(buf, n, "%ldh%02ldm", x / 3600, x % 3600 / 60);
}

void sw_run_progress_line(char *buf, size_t n, const sw_progress *p)
{
	char el[32], eta[32];
	size_t used = 0;
#define PUT_(...) (used < n ? used += (size_t)snprintf(buf + used, n - used, __VA_ARGS__) : 0)
	span_(el, sizeof el, p->elapsed_s);
	span_(eta, sizeof eta, p->eta_s);
	PUT_("iter %llu/%llu: reward %.3f, accuracy %.1f%%, violations %.1f%%", (unsigned long long)p->iter,
	     (unsigned long long)p->iters, p->obs->reward_mean, 100 * sw_tally_accuracy(p->tally),
	     100 * p->obs->violation_rate);
	/* a figure not measured is left out, not printed as nan */
	if (!isnan(p->obs->kl))
		PUT_(", kl %.4f", p->obs->kl);
	PUT_(", len %.1f, %.1f s; elapsed %s, ETA %s", p->obs->response_len_mean, p->wall_s, el, eta);
	for (size_t i = 0; i < p->nev; i++)
		PUT_("%s%s %s (%.4g past %.4g)", i ? ", " : "; ", p->ev[i].name, sw_mon_level_name(p->ev[i].level),
		     p->ev[i].value, p->ev[i].threshold);
#undef PUT_
}
