/*
 * checkpoint.c - the checkpoints of a run.  ckpt/iter-NNNN is a model
 * directory (config, weights, the start model's tokenizer files), so any
 * program that takes a model can start from it, with the trainer's state
 * in sw-train's own format (trainer_state.json and optimizer.bin, so that
 * `sw-train -m CKPT` continues the optimiser, sw_trainer_state_export),
 * plus what resuming needs: pool (the task pool) and state.json (the
 * loop's own state).  It is made in a temporary
 * directory and renamed into place, so a checkpoint is whole or absent.
 * Its digest is the audit log's (sw_audit_rec_checkpoint); once the log
 * records it, sw_checkpoint_mark makes the file `state` of the run name it
 * as the resume point, so that the resume point is always a checkpoint the
 * log can vouch for (sw-run checks it against its record before resuming).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "run/run_internal.h"

/* The files of the start model a checkpoint carries besides the weights, so it is a model directory. */
static const char *const model_extras_[] = {
	"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json", NULL
};

static int num_(sw_rec *r, const char *key, double x)
{
	return isnan(x) ? sw_rec_set_nil(r, key) : sw_rec_set_f64(r, key, x);
}

static double num_of_(sw_rec *r, const char *key)
{
	double x;
	return r && !sw_rec_get_f64(r, key, &x) ? x : NAN;
}

static int state_json_(const sw_ckpt_state *st, const char *path, sw_error *err)
{
	sw_rec *s = sw_rec_new();
	if (!s)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	int rc = sw_rec_set_u64(s, "iter", st->iter);
	rc |= sw_rec_set_f64(s, "lr_scale", st->lr_scale);
	rc |= sw_rec_set_u64(s, "weight_version", st->weight_version);
	rc |= sw_rec_set_u64(s, "opt_version", st->opt_version);
	rc |= sw_rec_set_u64(s, "opt_floats", st->opt_floats);
	rc |= num_(s, "first_len", st->history.first_len);
	rc |= num_(s, "eval_reward", st->history.eval_reward);
	rc |= num_(s, "eval_accuracy", st->history.eval_accuracy);
	if (rc) {
		sw_rec_free(s);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	sw_error e = { 0 };
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	sw_writer *w = sw_writer_open(path, &wo, &e);
	if (!w || sw_writer_put(w, s) || sw_writer_close(w))
		rc = sw_fail(err, SW_EIO, "cannot write '%s': %s", path, w ? sw_writer_error(w)->msg : e.msg);
	sw_writer_free(w);
	sw_rec_free(s);
	return rc;
}

/* The optimiser state saved on a thread of its own beside the weights: each is hashed as it is written, and
 * hashing is what a checkpoint's time goes to. */
typedef struct opt_job_ {
	sw_store *opt;
	const char *dir;
	const sw_save_opts *so;
	sw_error e;
	int rc;
} opt_job_;

static void *opt_job_run_(void *p)
{
	opt_job_ *j = p;
	j->rc = sw_trainer_state_export_with(j->opt, j->dir, j->so, &j->e);
	return NULL;
}

int sw_checkpoint_save(const char *rundir, const char *model, sw_store *w, sw_store *opt,
                       const sw_ckpt_state *st0, char *name, size_t size, sw_digests **written, sw_error *err)
{
	char final[SW_RUN_PATH_MAX], tmp[SW_RUN_PATH_MAX], from[SW_RUN_PATH_MAX], to[SW_RUN_PATH_MAX];
	sw_error e = { 0 };
	sw_ckpt_state st = *st0;
	st.weight_version = sw_store_version(w);
	st.opt_version = opt ? sw_store_version(opt) : 0;
	st.opt_floats = opt ? sw_store_nfloats(opt) : 0;
	int rc = sw_run_path(name, size, err, "ckpt/iter-%04llu", (unsigned long long)st.iter);
	if (!rc)
		rc = sw_run_path(final, sizeof final, err, "%s/%s", rundir, name);
	if (!rc)
		rc = sw_run_path(tmp, sizeof tmp, err, "%s/ckpt/.%s.tmp", rundir, name + 5);
	if (rc)
		return rc;
	sw_run_rmtree(tmp);
	/* the large files around the page cache, their digests as written: nothing is read back to record them */
	sw_save_opts so = { sw_digests_new(tmp), 1 };
	if (!so.digests)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (mkdir(tmp, 0777) && errno != EEXIST) {
		int en = errno;
		sw_digests_free(so.digests);
		return sw_fail(err, SW_EIO, "cannot create '%s': %s", tmp, strerror(en));
	}
	opt_job_ oj = { opt, tmp, &so, { 0 }, 0 };
	pthread_t th;
	int threaded = opt && !pthread_create(&th, NULL, opt_job_run_, &oj);
	if (sw_store_save_model_with(w, tmp, SW_DT_F32, &so, &e))
		rc = sw_fail(err, e.code, "checkpoint '%s': %s", final, e.msg);
	if (threaded)
		pthread_join(th, NULL);
	else if (opt)
		opt_job_run_(&oj);
	if (!rc && oj.rc)
		rc = sw_fail(err, oj.e.code, "checkpoint '%s': %s", final, oj.e.msg);
	for (int i = 0; !rc && model_extras_[i]; i++) {
		if ((rc = sw_run_path(from, sizeof from, err, "%s/%s", model, model_extras_[i])) ||
		    (rc = sw_run_path(to, sizeof to, err, "%s/%s", tmp, model_extras_[i])))
			break;
		if (!access(from, F_OK) && sw_run_copy_file(from, to, &e))
			rc = sw_fail(err, SW_EIO, "checkpoint '%s': cannot copy '%s': %s", final, from,
			             strerror(e.sys_errno));
	}
	if (!rc && !(rc = sw_run_path(from, sizeof from, err, "%s/pool", rundir)) &&
	    !(rc = sw_run_path(to, sizeof to, err, "%s/pool", tmp)) && !access(from, F_OK) &&
	    sw_run_copy_file(from, to, &e))
		rc = sw_fail(err, SW_EIO, "checkpoint '%s': cannot copy the pool: %s", final, strerror(e.sys_errno));
	if (!rc && !(rc = sw_run_path(to, sizeof to, err, "%s/state.json", tmp)))
		rc = state_json_(&st, to, err);
	if (!rc) {
		sw_run_rmtree(final);
		if (rename(tmp, final))
			rc = sw_fail(err, SW_EIO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
	}
	if (rc || !written)
		sw_digests_free(so.digests);
	else
		*written = so.digests;
	if (rc)
		return rc;
	/* the directory entry itself must survive a crash too */
	if ((rc = sw_run_path(to, sizeof to, err, "%s/ckpt", rundir)))
		return rc;
	int dfd = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

int sw_checkpoint_mark(const char *rundir, const char *name, sw_error *err)
{
	char to[SW_RUN_PATH_MAX];
	sw_error e = { 0 };
	int rc = sw_run_path(to, sizeof to, err, "%s/state", rundir);
	if (rc)
		return rc;
	if (sw_run_put_file(to, name, strlen(name), &e))
		return sw_fail(err, SW_EIO, "cannot write '%s': %s", to, strerror(e.sys_errno));
	return 0;
}

/* Whether name is what sw_checkpoint_save names: "ckpt/iter-" and four or more digits. */
static int ckpt_name_ok_(const char *name)
{
	if (strncmp(name, "ckpt/iter-", 10))
		return 0;
	size_t n = strspn(name + 10, "0123456789");
	return n >= 4 && n <= 20 && !name[10 + n];
}

int sw_checkpoint_latest(const char *rundir, char *name, size_t size, sw_error *err)
{
	char state[SW_RUN_PATH_MAX];
	int rc = sw_run_path(state, sizeof state, err, "%s/state", rundir);
	if (rc)
		return rc;
	FILE *f = fopen(state, "r");
	if (!f || !fgets(name, (int)size, f)) {
		if (f)
			fclose(f);
		return sw_fail(err, SW_EIO, "'%s' is no run directory sw-run can resume: cannot read '%s'", rundir, state);
	}
	fclose(f);
	name[strcspn(name, "\n")] = 0;
	if (!ckpt_name_ok_(name))
		return sw_fail(err, SW_EFORMAT, "'%s' names '%.100s', not a checkpoint of the run (ckpt/iter-NNNN)", state,
		               name);
	return 0;
}

int sw_checkpoint_state(const char *ckdir, sw_ckpt_state *st, sw_error *err)
{
	char path[SW_RUN_PATH_MAX];
	int rc = sw_run_path(path, sizeof path, err, "%s/state.json", ckdir);
	if (rc)
		return rc;
	sw_error e = { 0 };
	sw_rec *s = sw_metrics_last(path, &e);
	if (!s)
		return e.code ? sw_fail(err, e.code, "cannot read the checkpoint's state: %s", e.msg)
		              : sw_fail(err, SW_EIO, "%s: cannot read the checkpoint's state", path);
	static const char *const u64s[] = { "iter", "weight_version", "opt_version", "opt_floats" };
	uint64_t *to[] = { &st->iter, &st->weight_version, &st->opt_version, &st->opt_floats };
	const char *bad = NULL;
	for (int i = 0; i < 4 && !bad; i++)
		bad = sw_rec_get_u64(s, u64s[i], to[i]) ? u64s[i] : NULL;
	if (bad || sw_rec_get_f64(s, "lr_scale", &st->lr_scale))
		rc = sw_fail(err, SW_EFORMAT, "%s: field '%s' is missing or not a %s", path, bad ? bad : "lr_scale",
		             bad ? "count" : "number");
	else if (!(st->lr_scale > 0 && st->lr_scale <= 1)) /* 1, halved by each degrade */
		rc = sw_fail(err, SW_EFORMAT, "%s: field 'lr_scale' is %g, not in (0, 1]", path, st->lr_scale);
	st->history.first_len = num_of_(s, "first_len");
	st->history.eval_reward = num_of_(s, "eval_reward");
	st->history.eval_accuracy = num_of_(s, "eval_accuracy");
	sw_rec_free(s);
	return rc;
}

int sw_checkpoint_resume_point(const char *rundir, sw_ckpt_point *p, sw_error *err)
{
	memset(p, 0, sizeof *p);
	int rc = sw_checkpoint_latest(rundir, p->name, sizeof p->name, err);
	if (!rc)
		rc = sw_run_path(p->dir, sizeof p->dir, err, "%s/%s", rundir, p->name);
	if (rc)
		return rc;
	sw_error e = { 0 }, se = { 0 };
	sw_audit_run_facts f;
	/* sealed before the check reads it, so that a file changed between the check and the load is found
	 * after; what cannot be sealed (a directory gone, a file of another kind) the check names first */
	p->seal = sw_dir_seal_take(p->dir, &se);
	if ((rc = sw_audit_check_checkpoint(rundir, p->name, p->digest, &f, &e))) {
		rc = sw_fail(err, rc, "cannot resume from %s: %s", p->dir, e.msg);
	} else if (!p->seal) {
		rc = sw_fail(err, se.code, "cannot resume from %s: %s", p->dir, se.msg);
	} else {
		p->ended = f.ended;
		memcpy(p->model_digest, f.model_digest, SW_DIGEST_HEX);
		rc = sw_checkpoint_state(p->dir, &p->st, err);
	}
	if (rc) {
		sw_dir_seal_free(p->seal);
		p->seal = NULL;
	}
	return rc;
}

int sw_checkpoint_loaded(sw_ckpt_point *p, sw_error *err)
{
	sw_error e = { 0 };
	int rc = p->seal ? sw_dir_seal_check(p->seal, &e) : 0;
	sw_dir_seal_free(p->seal);
	p->seal = NULL;
	return rc ? sw_fail(err, rc, "cannot resume: %s", e.msg) : 0;
}

int sw_checkpoint_restore(const char *ckdir, const char *rundir, const sw_ckpt_state *st, sw_store *w,
                          sw_store **optp, const char *opt_spec, sw_error *err)
{
	char from[SW_RUN_PATH_MAX], to[SW_RUN_PATH_MAX];
	sw_error e = { 0 };
	if (sw_store_version(w) != st->weight_version)
		return sw_fail(err, SW_EINVAL, "restoring '%s': the weights are version %llu, the checkpoint says %llu",
		               ckdir, (unsigned long long)sw_store_version(w), (unsigned long long)st->weight_version);
	int rc = 0;
	if (!st->opt_floats && *optp) {
		/* a checkpoint from before the first step: the trainer starts afresh */
		sw_store_close(*optp);
		*optp = NULL;
		sw_store_unlink(opt_spec, NULL);
	}
	if (st->opt_floats && sw_trainer_state_import(ckdir, opt_spec, optp, &e))
		return sw_fail(err, e.code, "restoring '%s': %s", ckdir, e.msg);
	if ((rc = sw_run_path(from, sizeof from, err, "%s/pool", ckdir)) ||
	    (rc = sw_run_path(to, sizeof to, err, "%s/pool", rundir)))
		return rc;
	if (sw_run_copy_file(from, to, &e))
		return sw_fail(err, SW_EIO, "restoring '%s': cannot copy the pool: %s", ckdir, strerror(e.sys_errno));
	return 0;
}

/* ---- keeping the last K ------------------------------------------------------------------------ */

static int cmp_u64_desc_(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

static int has_(const uint64_t *v, size_t n, uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/*
 * The best checkpoint: the highest held-out accuracy of an evaluation after
 * a checkpointed iteration, else the highest mean reward of one; the later
 * on a tie.  UINT64_MAX: none is measured.
 */
static uint64_t best_(const char *rundir, const uint64_t *have, size_t n)
{
	char path[SW_RUN_PATH_MAX];
	uint64_t best[2] = { UINT64_MAX, UINT64_MAX }, it;
	double top[2] = { -INFINITY, -INFINITY }, x;
	sw_val v;
	if (sw_run_path(path, sizeof path, NULL, "%s/metrics.jsonl", rundir))
		return UINT64_MAX;
	sw_reader *rd = sw_reader_open(path, NULL);
	sw_rec *rec = sw_rec_new();
	while (rd && rec && sw_reader_next(rd, rec) == 1) {
		int ev = !sw_rec_get(rec, "eval", &v) && v.type == SW_T_BOOL && v.v.b;
		if (sw_rec_get_u64(rec, "iter", &it) || !has_(have, n, it) ||
		    sw_rec_get_f64(rec, ev ? "accuracy" : "reward_mean", &x) || !isfinite(x) || x < top[ev])
			continue;
		top[ev] = x;
		best[ev] = it;
	}
	sw_rec_free(rec);
	sw_reader_free(rd);
	return best[1] != UINT64_MAX ? best[1] : best[0];
}

int sw_checkpoint_prune(const char *rundir, uint64_t keep, sw_runlog *log, uint64_t it, sw_error *err)
{
	char dir[SW_RUN_PATH_MAX], latest[256], name[64], path[SW_RUN_PATH_MAX];
	uint64_t *have = NULL, cur = UINT64_MAX, n = 0, cap = 0;
	int rc = sw_run_path(dir, sizeof dir, err, "%s/ckpt", rundir);
	if (rc || !keep)
		return rc;
	if (!sw_checkpoint_latest(rundir, latest, sizeof latest, NULL))
		sscanf(latest, "ckpt/iter-%" SCNu64, &cur);
	DIR *d = opendir(dir);
	if (!d)
		return sw_fail(err, SW_EIO, "cannot read '%s': %s", dir, strerror(errno));
	struct dirent *e;
	while ((e = readdir(d))) {
		uint64_t k;
		char tail;
		if (sscanf(e->d_name, "iter-%" SCNu64 "%c", &k, &tail) != 1)
			continue;
		if (n == cap) {
			uint64_t *v = realloc(have, (cap = cap ? 2 * cap : 16) * sizeof *v);
			if (!v) {
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
				break;
			}
			have = v;
		}
		have[n++] = k;
	}
	closedir(d);
	if (!rc)
		qsort(have, n, sizeof *have, cmp_u64_desc_);
	uint64_t best = rc ? 0 : best_(rundir, have, n);
	/* the newest keep, the best, and the one the run resumes from */
	for (uint64_t i = keep; !rc && i < n; i++) {
		if (have[i] == best || have[i] == cur)
			continue;
		snprintf(name, sizeof name, "ckpt/iter-%04llu", (unsigned long long)have[i]);
		if ((rc = sw_run_path(path, sizeof path, err, "%s/%s", rundir, name)))
			break;
		/* recorded first: a log that names a checkpoint as removed does not miss it */
		if (log && (rc = sw_runlog_event(log, "checkpoint_removed", it, "path", name, err)))
			break;
		sw_run_rmtree(path);
	}
	free(have);
	return rc;
}

/* ---- room for what is to come ---------------------------------------------------------------- */

int sw_checkpoint_due(const sw_experiment *x, uint64_t it)
{
	return it % x->ckpt_every == 0 || it == x->iters;
}

int sw_checkpoint_room(const sw_experiment *x, const char *rundir, uint64_t from, int start, char *msg, size_t n)
{
	char path[SW_RUN_PATH_MAX], a[32], b[32], c[32];
	sw_model_config cfg;
	struct stat st;
	struct statvfs v;
	*msg = 0;
	if (sw_run_path(path, sizeof path, NULL, "%s/config.json", x->model) || sw_model_config_load(path, &cfg, NULL) ||
	    statvfs(rundir, &v))
		return 0; /* (said where it matters: loading the model, writing the checkpoint) */
	/* one checkpoint: the weights in f32, the AdamW moments, config.json (path), the start model's other files */
	double np = (double)sw_model_config_nparams(&cfg), free_ = (double)v.f_bavail * (double)v.f_frsize;
	double each = 12.0 * np + (stat(path, &st) ? 0 : (double)st.st_size);
	for (int i = 0; model_extras_[i]; i++)
		if (!sw_run_path(path, sizeof path, NULL, "%s/%s", x->model, model_extras_[i]) && !stat(path, &st))
			each += (double)st.st_size;
	/* the checkpoints still to write (iteration 0's at the start), and those there now */
	uint64_t count = (uint64_t)(start != 0), have = 0;
	for (uint64_t it = from + 1; it <= x->iters; it++)
		count += sw_checkpoint_due(x, it) != 0;
	DIR *d = sw_run_path(path, sizeof path, NULL, "%s/ckpt", rundir) ? NULL : opendir(path);
	for (struct dirent *de; d && (de = readdir(d));)
		have += !sw_run_path(path, sizeof path, NULL, "ckpt/%s", de->d_name) && ckpt_name_ok_(path);
	if (d)
		closedir(d);
	/* kept: every one; else at most keep + 2 at once (the newest, the best, the one being written) */
	uint64_t more = count;
	if (x->keep_ckpt && count)
		more = have + count < x->keep_ckpt + 2 ? count : x->keep_ckpt + 2 > have + 1 ? x->keep_ckpt + 2 - have : 1;
	/* (iteration 0's has no optimiser state yet) */
	double need = each * (double)more - (start && more ? 8.0 * np : 0);
	if (need <= free_)
		return 0;
	char why[160];
	if (x->keep_ckpt)
		snprintf(why, sizeof why, "%llu%s at once of %s each: the newest %llu, the best and the one being written",
		         (unsigned long long)more, have ? " more" : "", sw_run_size(each, 0, b), (unsigned long long)x->keep_ckpt);
	else
		snprintf(why, sizeof why, "%llu of %s each, every one kept: --keep-ckpt K keeps the newest K",
		         (unsigned long long)count, sw_run_size(each, 0, b));
	snprintf(msg, n, "warning: the run's checkpoints will take about %s (%s), and the file system of '%.200s' has %s free",
	         sw_run_size(need, 0, a), why, rundir, sw_run_size(free_, 0, c));
	return 1;
}
