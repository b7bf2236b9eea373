/*
 * checkpoint.c - the checkpoints of a run.  ckpt/iter-NNNN is a model
 * directory (config, weights, the start model's tokenizer files), so any
 * program that takes a model can start from it, plus what resuming needs:
 * optimizer.bin (the optimiser store's floats, raw), pool (the task pool)
 * and state.json (the loop's own state).  It is made in a temporary
 * directory and renamed into place, so a checkpoint is whole or absent;
 * then the file `state` of the run names it as the resume point.  Its
 * digest is the audit log's (sw_audit_rec_checkpoint).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
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

/* The optimiser's floats, read consistently (a trainer may be publishing). */
static int save_opt_(sw_store *opt, const char *path, const char *final, sw_error *err)
{
	sw_error e = { 0 };
	uint64_t seq;
	if (sw_store_read_begin(opt, &seq, &e))
		return sw_fail(err, e.code, "checkpoint '%s': optimiser state: %s", final, e.msg);
	if (sw_run_put_file(path, sw_store_arena(opt), sw_store_nfloats(opt) * sizeof(float), &e) ||
	    sw_store_read_retry(opt, seq))
		return sw_fail(err, SW_EIO, "checkpoint '%s': cannot write '%s'", final, path);
	return 0;
}

int sw_checkpoint_save(const char *rundir, const char *model, sw_store *w, sw_store *opt,
                       const sw_ckpt_state *st0, char *name, size_t size, sw_error *err)
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
	if (sw_store_save_model(w, tmp, SW_DT_F32, &e))
		return sw_fail(err, e.code, "checkpoint '%s': %s", final, e.msg);
	for (int i = 0; !rc && model_extras_[i]; i++) {
		if ((rc = sw_run_path(from, sizeof from, err, "%s/%s", model, model_extras_[i])) ||
		    (rc = sw_run_path(to, sizeof to, err, "%s/%s", tmp, model_extras_[i])))
			break;
		if (!access(from, F_OK) && sw_run_copy_file(from, to, &e))
			rc = sw_fail(err, SW_EIO, "checkpoint '%s': cannot copy '%s': %s", final, from,
			             strerror(e.sys_errno));
	}
	if (!rc && opt && !(rc = sw_run_path(to, sizeof to, err, "%s/optimizer.bin", tmp)))
		rc = save_opt_(opt, to, final, err);
	if (!rc && !(rc = sw_run_path(from, sizeof from, err, "%s/pool", rundir)) &&
	    !(rc = sw_run_path(to, sizeof to, err, "%s/pool", tmp)) && !access(from, F_OK) &&
	    sw_run_copy_file(from, to, &e))
		rc = sw_fail(err, SW_EIO, "checkpoint '%s': cannot copy the pool: %s", final, strerror(e.sys_errno));
	if (!rc && !(rc = sw_run_path(to, sizeof to, err, "%s/state.json", tmp)))
		rc = state_json_(&st, to, err);
	if (rc)
		return rc;
	sw_run_rmtree(final);
	if (rename(tmp, final))
		return sw_fail(err, SW_EIO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
	/* the directory entry itself must survive a crash too */
	if ((rc = sw_run_path(to, sizeof to, err, "%s/ckpt", rundir)))
		return rc;
	int dfd = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	/* the resume point: which checkpoint is the latest whole one */
	if ((rc = sw_run_path(to, sizeof to, err, "%s/state", rundir)))
		return rc;
	if (sw_run_put_file(to, name, strlen(name), &e))
		return sw_fail(err, SW_EIO, "cannot write '%s': %s", to, strerror(e.sys_errno));
	return 0;
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
	return 0;
}

int sw_checkpoint_state(const char *ckdir, sw_ckpt_state *st, sw_error *err)
{
	char path[SW_RUN_PATH_MAX];
	int rc = sw_run_path(path, sizeof path, err, "%s/state.json", ckdir);
	if (rc)
		return rc;
	sw_rec *s = sw_metrics_last(path, NULL);
	if (!s)
		return sw_fail(err, SW_EIO, "%s: cannot read the checkpoint's state", path);
	if (sw_rec_get_u64(s, "iter", &st->iter) || sw_rec_get_f64(s, "lr_scale", &st->lr_scale) ||
	    sw_rec_get_u64(s, "weight_version", &st->weight_version) ||
	    sw_rec_get_u64(s, "opt_version", &st->opt_version) || sw_rec_get_u64(s, "opt_floats", &st->opt_floats))
		rc = sw_fail(err, SW_EFORMAT, "%s: a field is missing or of the wrong type", path);
	st->history.first_len = num_of_(s, "first_len");
	st->history.eval_reward = num_of_(s, "eval_reward");
	st->history.eval_accuracy = num_of_(s, "eval_accuracy");
	sw_rec_free(s);
	return rc;
}

int sw_checkpoint_restore(const char *ckdir, const char *rundir, const sw_ckpt_state *st, sw_store *w,
                          sw_store **optp, const char *opt_spec, sw_error *err)
{
	char from[SW_RUN_PATH_MAX], to[SW_RUN_PATH_MAX];
	sw_error e = { 0 };
	if (sw_store_version(w) != st->weight_version)
		return sw_fail(err, SW_EINVAL, "restoring '%s': the weights are version %llu, the checkpoint says %llu",
		               ckdir, (unsigned long long)sw_store_version(w), (unsigned long long)st->weight_version);
	int rc = sw_run_path(from, sizeof from, err, "%s/optimizer.bin", ckdir);
	if (rc)
		return rc;
	if (st->opt_floats && !*optp && !(*optp = sw_store_create(opt_spec, NULL, st->opt_floats, &e)))
		return sw_fail(err, e.code, "restoring '%s': %s", from, e.msg);
	if (!st->opt_floats && *optp) {
		/* a checkpoint from before the first step: the trainer starts afresh */
		sw_store_close(*optp);
		*optp = NULL;
		sw_store_unlink(opt_spec, NULL);
	}
	sw_store *opt = *optp;
	if (st->opt_floats) {
		FILE *f = fopen(from, "rb");
		size_t n = (size_t)st->opt_floats;
		/* whole and no more: a checkpoint cut or padded is not the one that was saved */
		if (!f || !opt || sw_store_nfloats(opt) != n || sw_store_write_begin(opt, &e) ||
		    fread(sw_store_arena(opt), sizeof(float), n, f) != n || fgetc(f) != EOF ||
		    sw_store_publish(opt, st->opt_version, &e))
			rc = sw_fail(err, SW_EFORMAT, "restoring '%s': it does not match the optimiser store", from);
		if (f)
			fclose(f);
		if (rc)
			return rc;
	}
	if ((rc = sw_run_path(from, sizeof from, err, "%s/pool", ckdir)) ||
	    (rc = sw_run_path(to, sizeof to, err, "%s/pool", rundir)))
		return rc;
	if (sw_run_copy_file(from, to, &e))
		return sw_fail(err, SW_EIO, "restoring '%s': cannot copy the pool: %s", ckdir, strerror(e.sys_errno));
	return 0;
}
