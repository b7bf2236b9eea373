/*
 * experiment.c - the experiment of a run: the settings sw-run(1) takes as
 * options or from an experiment file (one "NAME VALUE" a line), checked,
 * with the default stage commands filled in, and written back in the same
 * form as RUNDIR/config so that `sw-run -c RUNDIR/config` repeats a run.
 *
 * The library owns the table of settings; sw-run hands each option it is
 * given to sw_experiment_set by its long name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run/run_internal.h"
#include "sw/balance.h"
#include "sw/sample.h"

static const char *const stage_name_[SW_NSTAGE] = {
	"select", "sort", "rollout", "verify", "balance", "train", "eval-rollout", "tap"
};

/*
 * The default stages.  They read what sw-run hands every stage from the
 * environment (see sw-run(1), ENVIRONMENT), so the same lines work in a
 * user's own commands.
 */
static const char *const stage_default_[SW_NSTAGE] = {
	"sw-pool take \"$SW_POOL\" -n \"$SW_BATCH\"",
	"sw-sort",
	"sw-rollout -m \"$SW_MODEL\" -n \"$SW_GROUP\" --seed \"$SW_SEED\"",
	"sw-verify -r math",
	"sw-balance -n \"$SW_RANKS\" --stats \"$SW_BALANCE_STATS\"",
	"sw-train --algo grpo --metrics \"$SW_TRAIN_METRICS\"",
	"sw-rollout -m \"$SW_MODEL\" -n 1 --temperature 0",
	/*
	 * Between verify and balance, a copy of the verified samples: every
	 * sample the iteration made, with its scores, before balance sets the
	 * abnormal ones aside.  The run's figures and saved samples come from it.
	 */
	"tee \"$SW_TAP\"",
};

const char *sw_stage_name(int stage)
{
	return stage >= 0 && stage < SW_NSTAGE ? stage_name_[stage] : NULL;
}

/* What a setting is: a string, a whole number in a range, a flag, a stage command, a monitor spec, a device. */
enum { K_STR, K_NUM, K_FLAG, K_CMD, K_MON, K_DEV };

typedef struct key_ {
	const char *name;
	int kind;
	size_t off;              /* of the field in sw_experiment */
	uint64_t min, max;       /* K_NUM */
} key_;

#define F_(f) offsetof(sw_experiment, f)
static const key_ keys_[] = {
	{ "model", K_STR, F_(model), 0, 0 },
	{ "prompts", K_STR, F_(prompts), 0, 0 },
	{ "out", K_STR, F_(out), 0, 0 },
	{ "iters", K_NUM, F_(iters), 1, 1000000 },
	{ "batch", K_NUM, F_(batch), 1, 1000000 },
	{ "group", K_NUM, F_(group), 1, 65536 },
	{ "seed", K_NUM, F_(seed), 0, UINT32_MAX },
	{ "eval", K_STR, F_(eval), 0, 0 },
	{ "eval-every", K_NUM, F_(eval_every), 1, 1000000 },
	{ "ckpt-every", K_NUM, F_(ckpt_every), 1, 1000000 },
	{ "device", K_DEV, F_(device), 0, 0 },
	{ "ref", K_FLAG, F_(ref), 0, 0 },
	{ "accuracy", K_STR, F_(accuracy), 0, 0 },
	{ "select", K_CMD, F_(cmd[SW_STAGE_SELECT]), 0, 0 },
	{ "sort", K_CMD, F_(cmd[SW_STAGE_SORT]), 0, 0 },
	{ "rollout", K_CMD, F_(cmd[SW_STAGE_ROLLOUT]), 0, 0 },
	{ "verify", K_CMD, F_(cmd[SW_STAGE_VERIFY]), 0, 0 },
	{ "balance", K_CMD, F_(cmd[SW_STAGE_BALANCE]), 0, 0 },
	{ "train", K_CMD, F_(cmd[SW_STAGE_TRAIN]), 0, 0 },
	{ "eval-rollout", K_CMD, F_(cmd[SW_STAGE_EVAL_ROLLOUT]), 0, 0 },
	{ "monitor", K_MON, 0, 0, 0 },
	{ "keep-stores", K_FLAG, F_(keep), 0, 0 },
	{ "keep-ckpt", K_NUM, F_(keep_ckpt), 0, 1000000 },
	{ "workdir", K_STR, F_(workdir), 0, 0 },
	{ "ranks", K_NUM, F_(ranks), 1, 4096 },
	{ "launcher", K_CMD, F_(launcher), 0, 0 },
};
#undef F_

void sw_experiment_init(sw_experiment *x)
{
	memset(x, 0, sizeof *x);
	x->iters = 10;
	x->batch = 16;
	x->group = 8;
	x->seed = 1;
	x->eval_every = 5;
	x->ckpt_every = 1;
	x->ranks = 1;
}

void sw_experiment_release(sw_experiment *x)
{
	if (!x)
		return;
	free(x->model), free(x->prompts), free(x->out), free(x->eval), free(x->accuracy), free(x->device);
	free(x->workdir), free(x->launcher);
	for (int s = 0; s < SW_NSTAGE; s++)
		free(x->cmd[s]);
	for (size_t i = 0; i < x->nmonitor; i++)
		free(x->monitor[i]);
	free(x->monitor);
	memset(x, 0, sizeof *x);
}

static const key_ *key_of_(const char *name)
{
	for (size_t i = 0; i < sizeof keys_ / sizeof *keys_; i++)
		if (!strcmp(keys_[i].name, name))
			return &keys_[i];
	return NULL;
}

static int set_str_(char **dst, const char *v, sw_error *err)
{
	char *d = strdup(v);
	if (!d)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	free(*dst);
	*dst = d;
	return 0;
}

/* One setting; where ("PATH: line N") prefixes what is wrong with its value, NULL on the command line. */
static int apply_(sw_experiment *x, const key_ *k, const char *v, const char *where, sw_error *err)
{
	const char *w = where ? where : "", *sep = where ? ": " : "";
	void *field = (char *)x + k->off;
	switch (k->kind) {
	case K_STR:
		return set_str_(field, v, err);
	case K_NUM: {
		/* a number names the option it was given to (as cli_uint does), after the file and line it is on */
		char *end;
		errno = 0;
		unsigned long long n = strtoull(v, &end, 10);
		if (!*v || *end || errno || v[0] == '-' || n < k->min || n > k->max)
			return sw_fail(err, SW_EINVAL, "%s%soption '--%s' wants a whole number from %llu to %llu, not '%s'",
			               w, sep, k->name, (unsigned long long)k->min, (unsigned long long)k->max, v);
		*(uint64_t *)field = n;
		return 0;
	}
	case K_FLAG:
		*(int *)field = 1;
		return 0;
	case K_DEV: { /* a name sw_backend_get knows, and a device this machine has */
		sw_error e = { 0 };
		/* SW_ENOENT (cuda without a GPU) and SW_EIO ($SW_PROFILE's file) are not usage errors */
		if (!sw_backend_get(v, &e) || !*v)
			return sw_fail(err, *v && (e.code == SW_ENOENT || e.code == SW_EIO) ? e.code : SW_EINVAL, "%s%s%s", w, sep, *v ? e.msg : "option '--device' wants a device: cpu or guard");
		return set_str_(field, v, err);
	}
	case K_CMD:
		if (!*v)
			return sw_fail(err, SW_EINVAL, "%s%s--%s: the command is empty", w, sep, k->name);
		return set_str_(field, v, err);
	default: { /* K_MON: checked now, applied by the program to its monitor set */
		sw_error e = { 0 };
		sw_monitor *m = sw_monitor_new();
		if (!m)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		int rc = sw_monitor_set(m, v, &e);
		sw_monitor_free(m);
		if (rc)
			return sw_fail(err, SW_EINVAL, "%s%s%s", w, sep, e.msg);
		/* one entry a monitor, the last given: a config rewritten on resume does not grow */
		size_t i = 0, nl = strcspn(v, "=");
		while (i < x->nmonitor && (strncmp(x->monitor[i], v, nl) || x->monitor[i][nl] != '='))
			i++;
		char **mv = i < x->nmonitor ? x->monitor : realloc(x->monitor, (i + 1) * sizeof *mv);
		if (mv)
			x->monitor = mv;
		char *s = mv ? strdup(v) : NULL;
		if (!s)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		if (i < x->nmonitor)
			free(mv[i]);
		else
			x->nmonitor++;
		mv[i] = s;
		return 0;
	}
	}
}

int sw_experiment_set(sw_experiment *x, const char *name, const char *value, sw_error *err)
{
	const key_ *k = key_of_(name);
	if (!k)
		return sw_fail(err, SW_EINVAL, "unknown setting '%s'", name);
	return apply_(x, k, value ? value : "", NULL, err);
}

int sw_experiment_set_resumed(sw_experiment *x, const char *name, const char *value, sw_error *err)
{
	if (!strcmp(name, "model") || !strcmp(name, "prompts") || !strcmp(name, "out"))
		return sw_fail(err, SW_EINVAL, "--%s cannot be given with --resume: the run goes on from its checkpoint "
		               "with its own model, prompts and directory", name);
	return sw_experiment_set(x, name, value, err);
}

int sw_experiment_resume(const sw_experiment *x, const char *rundir, const sw_ckpt_point *p,
                         sw_digest_job *model_job, int *done, sw_error *err)
{
	char cfg[SW_RUN_PATH_MAX], hex[SW_DIGEST_HEX];
	sw_error e = { 0 };
	int mrc = model_job ? sw_digest_dir_end(model_job, hex, &e) : 0;
	*done = 0;
	if (x->iters < p->st.iter)
		return sw_fail(err, SW_EINVAL, "iters %llu is fewer than the %llu iterations the run in '%s' has done: "
		               "give --iters %llu or more", (unsigned long long)x->iters, (unsigned long long)p->st.iter,
		               rundir, (unsigned long long)p->st.iter);
	if (x->iters == p->st.iter && p->ended) {
		*done = 1;
		return 0;
	}
	/* the model it started from is the KL reference, the stages' tokenizer, the checkpoints' tokenizer files */
	if (model_job ? mrc : sw_digest_dir(x->model, hex, &e))
		return sw_fail(err, e.code, "the model the run started from: %s", e.msg);
	if (strcmp(hex, p->model_digest))
		return sw_fail(err, SW_EFORMAT, "the model the run started from, '%s', is not what it was (its digest is %.12s..., "
		               "the run's start record says %.12s...): its reference, its tokenizer and its checkpoints' "
		               "tokenizer files come from it", x->model, hex, p->model_digest[0] ? p->model_digest : "none");
	int rc = sw_run_path(cfg, sizeof cfg, err, "%s/config", rundir);
	return rc ? rc : sw_experiment_write(x, cfg, err);
}

int sw_experiment_read(sw_experiment *x, const char *path, sw_error *err)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int e = errno;
		sw_fail(err, SW_EIO, "cannot open '%s': %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned lineno = 0, first[sizeof keys_ / sizeof *keys_] = { 0 }; /* the line each setting is on */
	int rc = 0;
	while (!rc && (len = getline(&line, &cap, f)) >= 0) {
		char where[600];
		lineno++;
		if (memchr(line, 0, (size_t)len)) {
			rc = sw_fail(err, SW_EINVAL, "%s: line %u: a NUL byte: not a text file", path, lineno);
			break;
		}
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
		               line[len - 1] == '\t'))
			line[--len] = 0;
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == '#')
			continue;
		snprintf(where, sizeof where, "%s: line %u", path, lineno);
		char *name = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '=')
			p++;
		if (*p)
			*p++ = 0;
		while (*p == ' ' || *p == '\t' || *p == '=')
			p++;
		while (*name == '-')
			name++;
		const key_ *k = key_of_(name);
		if (!k)
			rc = sw_fail(err, SW_EINVAL, "%s: unknown setting '%s'", where, name);
		else if (k->kind == K_FLAG && *p)
			rc = sw_fail(err, SW_EINVAL, "%s: '%s' takes no value", where, name);
		else if (k->kind != K_FLAG && !*p)
			rc = sw_fail(err, SW_EINVAL, "%s: '%s' needs a value", where, name);
		else if (k->kind != K_MON && first[k - keys_])
			/* which of two a reader of the file takes is a guess: the file says one thing */
			rc = sw_fail(err, SW_EINVAL, "%s: '%s' is set again (first at line %u); a file sets each once",
			             where, name, first[k - keys_]);
		else
			first[k - keys_] = lineno, rc = apply_(x, k, p, where, err);
	}
	if (!rc && ferror(f)) {
		int e = errno;
		rc = sw_fail(err, SW_EIO, "cannot read '%s': %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
	}
	free(line);
	fclose(f);
	return rc;
}

int sw_experiment_check(sw_experiment *x, sw_error *err)
{
	for (int s = 0; s < SW_NSTAGE; s++)
		if (!x->cmd[s] && set_str_(&x->cmd[s], stage_default_[s], err))
			return SW_ENOMEM;
	if (!x->model)
		return sw_fail(err, SW_EINVAL, "no model: give --model DIR (or 'model DIR' in the experiment)");
	if (!x->prompts)
		return sw_fail(err, SW_EINVAL, "no prompts: give --prompts FILE (or 'prompts FILE' in the experiment)");
	if (!x->out)
		return sw_fail(err, SW_EINVAL, "no run directory: give --out DIR");
	return 0;
}

static int put_(sw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put_(sw_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || sw_buf_reserve(b, (size_t)n + 1))
		return SW_ENOMEM;
	va_start(ap, fmt);
	vsnprintf((char *)b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

int sw_experiment_write(const sw_experiment *x, const char *path, sw_error *err)
{
	sw_buf b = { 0 };
	int rc = put_(&b, "# the resolved experiment of this run (sw-run -c reads it back)\n");
	rc |= put_(&b, "model %s\nprompts %s\n", x->model, x->prompts);
	if (x->eval)
		rc |= put_(&b, "eval %s\n", x->eval);
	rc |= put_(&b, "iters %llu\nbatch %llu\ngroup %llu\nseed %llu\neval-every %llu\nckpt-every %llu\n",
	           (unsigned long long)x->iters, (unsigned long long)x->batch, (unsigned long long)x->group,
	           (unsigned long long)x->seed, (unsigned long long)x->eval_every,
	           (unsigned long long)x->ckpt_every);
	if (x->device)
		rc |= put_(&b, "device %s\n", x->device);
	if (x->keep_ckpt)
		rc |= put_(&b, "keep-ckpt %llu\n", (unsigned long long)x->keep_ckpt);
	if (x->workdir)
		rc |= put_(&b, "workdir %s\n", x->workdir);
	if (x->ref)
		rc |= put_(&b, "ref\n");
	if (x->accuracy)
		rc |= put_(&b, "accuracy %s\n", x->accuracy);
	if (x->ranks > 1)
		rc |= put_(&b, "ranks %llu\n", (unsigned long long)x->ranks);
	if (x->launcher)
		rc |= put_(&b, "launcher %s\n", x->launcher);
	for (int s = 0; s < SW_STAGE_TAP; s++)
		rc |= put_(&b, "%s %s\n", stage_name_[s], x->cmd[s] ? x->cmd[s] : stage_default_[s]);
	for (size_t i = 0; i < x->nmonitor; i++)
		rc |= put_(&b, "monitor %s\n", x->monitor[i]);
	if (rc)
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	else
		rc = sw_run_put_file(path, b.p, b.len, err);
	sw_buf_release(&b);
	return rc;
}

/* One prompt file: readable, some records, each with a prompt; what is wrong
 * names the file and the line.  No two prompts may have one id (sw-rollout's
 * rule: a number where there is none): their responses would be one group.
 * The training prompts (pooled) go into the run's pool, so each needs an id
 * of its own that is a string (sw-pool's key). */
static int prompts_ok_(const char *path, int pooled, sw_error *err)
{
	sw_error e = { 0 };
	sw_reader *rd = sw_reader_open(path, &e);
	if (!rd)
		return sw_fail(err, SW_EIO, "cannot open '%s': %s", path, e.sys_errno ? strerror(e.sys_errno) : e.msg);
	sw_rec *rec = sw_rec_new();
	sw_groups *ids = sw_groups_new();
	uint64_t *first = NULL; /* where each id came first */
	size_t cap = 0;
	int rc = rec && ids ? 0 : sw_fail(err, SW_ENOMEM, "out of memory"), got = 0;
	while (!rc && (got = sw_reader_next(rd, rec)) == 1) {
		sw_val v;
		int json = sw_reader_format(rd) == SW_FMT_JSON;
		const char *unit = json ? "line" : "record";
		uint64_t n = sw_reader_records(rd);
		if ((sw_rec_get(rec, "prompt", &v) || v.type != SW_T_STR) &&
		    (sw_rec_get(rec, "messages", &v) || v.type != SW_T_ARRAY) &&
		    (sw_rec_get(rec, "prompt_tokens", &v) || v.type != SW_T_ARRAY)) {
			int conv = !sw_rec_get(rec, "prompt", &v) && v.type == SW_T_ARRAY; /* TRL's conversational form */
			const char *alias = sw_sample_prompt_alias(rec);
			char hint[128] = "";
			if (conv)
				snprintf(hint, sizeof hint, "; its 'prompt' is an array: jq -c '.messages = .prompt | del(.prompt)' "
				         "moves it");
			else if (alias)
				snprintf(hint, sizeof hint, "; it has '%s': jq -c '.prompt = .%s' names it the prompt", alias, alias);
			rc = sw_fail(err, SW_EFORMAT, "%s: %s %llu: no prompt: a record needs 'prompt' (a string) or "
			             "'messages' (an array)%s", path, unit, (unsigned long long)n, hint);
			break;
		}
		uint32_t at;
		int added = 0;
		const char *bad;
		char *id = NULL;
		if (pooled && (sw_rec_get(rec, "id", &v) || v.type != SW_T_STR)) {
			rc = sw_fail(err, SW_EFORMAT, "%s: %s %llu: %s: each prompt needs one of its own (a string)", path,
			             unit, (unsigned long long)n, sw_rec_get(rec, "id", &v) ? "no id" : "its id is no string");
		} else if (!(id = sw_sample_group_id(rec, n - 1, &bad))) {
			rc = bad ? sw_fail(err, SW_EFORMAT, "%s: %s %llu: field 'id' is a %s, not a string or an integer", path,
			                   unit, (unsigned long long)n, bad)
			         : sw_fail(err, SW_ENOMEM, "out of memory");
		} else if ((added = sw_groups_add(ids, id, strlen(id), &at)) < 0) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
		} else if (!added) {
			rc = sw_fail(err, SW_EFORMAT, "%s: %s %llu: id '%.100s' is %s %llu's too: an id names one prompt", path,
			             unit, (unsigned long long)n, id, unit, (unsigned long long)first[at]);
		} else if (at >= cap) {
			uint64_t *f = realloc(first, sizeof *f * (cap = cap ? 2 * cap : 256));
			if (!f)
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
			else
				first = f, first[at] = n;
		} else {
			first[at] = n;
		}
		free(id);
	}
	if (!rc && got < 0 && sw_reader_error(rd)->code != SW_EEMPTY) {
		char where[300];
		rc = sw_fail(err, SW_EFORMAT, "%s: %s", path, sw_error_str(sw_reader_error(rd), where, sizeof where));
	}
	if (!rc && !sw_reader_records(rd))
		rc = sw_fail(err, SW_EEMPTY, "%s: no prompts in it", path);
	free(first);
	sw_groups_free(ids);
	sw_rec_free(rec);
	sw_reader_free(rd);
	return rc;
}

int sw_experiment_inputs(const sw_experiment *x, sw_error *err)
{
	char cfg[SW_RUN_PATH_MAX];
	int rc = sw_run_path(cfg, sizeof cfg, err, "%s/config.json", x->model);
	if (!rc && access(cfg, R_OK))
		rc = sw_fail(err, SW_EIO, "'%s' is no model directory: cannot read '%s': %s", x->model, cfg, strerror(errno));
	rc = rc ? rc : prompts_ok_(x->prompts, 1, err);
	return rc || !x->eval ? rc : prompts_ok_(x->eval, 0, err);
}

int sw_experiment_enter(sw_experiment *x, sw_error *err)
{
	char cwd[SW_RUN_PATH_MAX], *abs;
	if (!getcwd(cwd, sizeof cwd))
		return sw_fail(err, SW_EIO, "cannot tell the working directory: %s", strerror(errno));
	if (!x->workdir)
		return set_str_(&x->workdir, cwd, err);
	if (!strcmp(x->workdir, cwd))
		return 0;
	/* the run directory as the caller named it, before the move */
	if (x->out && x->out[0] != '/') {
		if (asprintf(&abs, "%s/%s", cwd, x->out) < 0)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		free(x->out);
		x->out = abs;
	}
	if (chdir(x->workdir))
		return sw_fail(err, SW_EIO, "cannot enter the run's working directory '%s': %s", x->workdir, strerror(errno));
	return 0;
}

/*
 * The launcher goes before the stage's command line as it is (not around a
 * shell of its own): the outer shell expands $SW_MODEL and the rest, so the
 * ranks get the values whatever the launcher passes on; what follows a pipe
 * in a user's command runs once, after the ranks.  Under Slurm, srun hands
 * standard input to task 0 only (as mpirun does), ends the step when a
 * task fails, and lets the rollout's and the train's steps share the
 * allocation's CPUs (--overlap: they run at once, as the pipeline's stages).
 */
int sw_experiment_stage_cmds(const sw_experiment *x, char *cmds[], sw_error *err)
{
	const char *slurm = getenv("SLURM_JOB_ID");
	const char *launcher = x->launcher ? x->launcher
	                     : slurm && *slurm ? "srun -n \"$SW_RANKS\" --overlap --input=0 --kill-on-bad-exit=1"
	                                       : "mpirun -np \"$SW_RANKS\"";
	for (int s = 0; s < SW_NSTAGE; s++)
		cmds[s] = NULL;
	for (int s = 0; s < SW_NSTAGE; s++) {
		const char *c = x->cmd[s] ? x->cmd[s] : stage_default_[s];
		/* the generators and the trainer: under a launcher sw-train's rank 0 trains the run's
		 * store in place, the others a copy, each the samples balance gave its rank */
		bool ranked = x->ranks > 1 && (s == SW_STAGE_ROLLOUT || s == SW_STAGE_EVAL_ROLLOUT || s == SW_STAGE_TRAIN);
		if (ranked ? asprintf(&cmds[s], "%s %s", launcher, c) < 0 : !(cmds[s] = strdup(c))) {
			cmds[s] = NULL;
			sw_experiment_stage_cmds_free(cmds);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
	}
	return 0;
}

void sw_experiment_stage_cmds_free(char *cmds[])
{
	for (int s = 0; s < SW_NSTAGE; s++) {
		free(cmds[s]);
		cmds[s] = NULL;
	}
}
