/*
 * sw-run - the iteration loop of a training run: select prompts from the
 * pool, then sort | rollout | verify | balance | train as real processes
 * connected by pipes, every stage a command line the user may replace.
 *
 * The weights live in a shared-memory store that sw-run creates from the
 * model and owns for the run: the trainer updates it in place and publishes
 * a new version, the generator of the next iteration reads the same pages,
 * so no weight byte is copied between them.  Around the pipeline sw-run
 * keeps what makes a run trustworthy: the samples of every iteration, a
 * metrics record per iteration and per evaluation, monitors with three
 * levels (warn, degrade, hard), checkpoints written atomically, a
 * hash-chained audit log, and a state file from which --resume continues
 * after a crash, a failed stage or a halt with the same result as a run
 * that never stopped (every stage is seeded by the iteration).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

enum {
	OPT_ITERS = 0x100, OPT_EVAL, OPT_EVAL_EVERY, OPT_CKPT_EVERY, OPT_SEED, OPT_REF, OPT_SELECT,
	OPT_SORT, OPT_ROLLOUT, OPT_VERIFY, OPT_BALANCE, OPT_TRAIN, OPT_EVAL_ROLLOUT, OPT_MONITOR,
	OPT_RESUME, OPT_ACCURACY, OPT_KEEP
};

static const cli_opt opts[] = {
	{ 'c', 'c', "config", "file", "file", "read the experiment from file: these options, one a line" },
	{ 'm', 'm', "model", "dir", "dir", "the model to start from (a model directory)" },
	{ 'p', 'p', "prompts", "file", "file", "the prompts: a stream of records with id and prompt (or messages)" },
	{ 'o', 'o', "out", "dir", "dir", "the run directory to create" },
	{ OPT_ITERS, 0, "iters", "n", NULL, "number of iterations (default 10)" },
	{ 'b', 'b', "batch", "n", NULL, "prompts per iteration (default 16)" },
	{ 'n', 'n', "group", "n", NULL, "responses per prompt, $SW_GROUP to the stages (default 8)" },
	{ OPT_SEED, 0, "seed", "n", NULL, "seed of the run; each stage gets $SW_SEED for its iteration (default 1)" },
	{ OPT_EVAL, 0, "eval", "file", "file", "held-out prompts scored by greedy generation" },
	{ OPT_EVAL_EVERY, 0, "eval-every", "k", NULL, "evaluate every k iterations, and before the first and after the last (default 5)" },
	{ OPT_CKPT_EVERY, 0, "ckpt-every", "k", NULL, "checkpoint every k iterations, and after the last (default 1)" },
	{ OPT_REF, 0, "ref", NULL, NULL, "keep a frozen copy of the start weights as the KL reference, $SW_REF" },
	{ OPT_ACCURACY, 0, "accuracy", "verifier", NULL, "the verifier whose full score counts as correct (default: the first in 'rewards')" },
	{ OPT_SELECT, 0, "select", "cmd", NULL, "the command that selects an iteration's prompts" },
	{ OPT_SORT, 0, "sort", "cmd", NULL, "the sort stage" },
	{ OPT_ROLLOUT, 0, "rollout", "cmd", NULL, "the rollout stage" },
	{ OPT_VERIFY, 0, "verify", "cmd", NULL, "the verify stage (also scores the evaluations)" },
	{ OPT_BALANCE, 0, "balance", "cmd", NULL, "the balance stage" },
	{ OPT_TRAIN, 0, "train", "cmd", NULL, "the train stage" },
	{ OPT_EVAL_ROLLOUT, 0, "eval-rollout", "cmd", NULL, "the generation of an evaluation" },
	{ OPT_MONITOR, 0, "monitor", "name=w,d,h", NULL, "set a monitor's warn, degrade and hard thresholds (repeatable)" },
	{ OPT_KEEP, 0, "keep-stores", NULL, NULL, "leave the weight stores in place when the run ends (for inspection)" },
	{ OPT_RESUME, 0, "resume", "dir", "dir", "continue the run in dir after a crash, a failure or a halt" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-run", NULL, NULL,
	"Run an experiment: iterations of select, sort, rollout, verify, balance and train.",
	opts
};

/* ---- the experiment ------------------------------------------------------------ */

/* The stages in the order of their options; the tap is sw-run's own (not replaceable). */
enum { S_SELECT, S_SORT, S_ROLLOUT, S_VERIFY, S_BALANCE, S_TRAIN, S_EVAL_ROLLOUT, S_TAP, NSTAGE };
static const char *const stage_name_[NSTAGE] = {
	"select", "sort", "rollout", "verify", "balance", "train", "eval-rollout", "tap"
};
/*
 * The default stages.  They read what sw-run hands every stage from the
 * environment (see sw-run(1), ENVIRONMENT), so the same lines work in a
 * user's own commands.
 */
static const char *const stage_default_[NSTAGE] = {
	"sw-pool take \"$SW_POOL\" -n \"$SW_BATCH\"",
	"sw-sort",
	"sw-rollout -n \"$SW_GROUP\" --seed \"$SW_SEED\"",
	"sw-verify -r math",
	"sw-balance -n 1 --stats \"$SW_BALANCE_STATS\"",
	"sw-train --algo grpo --metrics \"$SW_TRAIN_METRICS\"",
	"sw-rollout -n 1 --temperature 0",
	/*
	 * Between verify and balance, a copy of the verified samples: every
	 * sample the iteration made, with its scores, before balance sets the
	 * abnormal ones aside.  The run's figures and saved samples come from it.
	 */
	"tee \"$SW_TAP\"",
};

typedef struct exp_ {
	char *model, *prompts, *out, *eval, *accuracy;
	uint64_t iters, batch, group, seed, eval_every, ckpt_every;
	int ref, keep;
	char *cmd[NSTAGE];
	char **monitor;
	size_t nmonitor;
} exp_;

static char *xstrdup_(const char *s)
{
	char *d = strdup(s);
	if (!d)
		cli_die("out of memory");
	return d;
}

static void set_str_(char **dst, const char *v)
{
	free(*dst);
	*dst = xstrdup_(v);
}

static const cli_opt *opt_by_name_(const char *name)
{
	for (const cli_opt *o = opts; o->id; o++)
		if (!strcmp(o->name, name))
			return o;
	return NULL;
}

/* One option, from the command line or an experiment file (where = "file:line" or NULL). */
static void apply_(exp_ *x, int id, const char *arg, const char *where)
{
	char optname[48];
	const cli_opt *o = NULL;
	for (const cli_opt *p = opts; p->id; p++)
		if (p->id == id)
			o = p;
	snprintf(optname, sizeof optname, "--%s", o ? o->name : "?");
	switch (id) {
	case 'm': set_str_(&x->model, arg); break;
	case 'p': set_str_(&x->prompts, arg); break;
	case 'o': set_str_(&x->out, arg); break;
	case OPT_EVAL: set_str_(&x->eval, arg); break;
	case OPT_ACCURACY: set_str_(&x->accuracy, arg); break;
	case OPT_ITERS: x->iters = cli_uint(optname, arg, 1, 1000000); break;
	case 'b': x->batch = cli_uint(optname, arg, 1, 1000000); break;
	case 'n': x->group = cli_uint(optname, arg, 1, 65536); break;
	case OPT_SEED: x->seed = cli_uint(optname, arg, 0, UINT32_MAX); break;
	case OPT_EVAL_EVERY: x->eval_every = cli_uint(optname, arg, 1, 1000000); break;
	case OPT_CKPT_EVERY: x->ckpt_every = cli_uint(optname, arg, 1, 1000000); break;
	case OPT_REF: x->ref = 1; break;
	case OPT_KEEP: x->keep = 1; break;
	case OPT_SELECT: case OPT_SORT: case OPT_ROLLOUT: case OPT_VERIFY: case OPT_BALANCE:
	case OPT_TRAIN: case OPT_EVAL_ROLLOUT:
		if (!*arg)
			cli_usage("%s%s%s: the command is empty", where ? where : "", where ? ": " : "", optname);
		set_str_(&x->cmd[id - OPT_SELECT], arg);
		break;
	case OPT_MONITOR: {
		sw_monitor *m = sw_monitor_new();
		sw_error err = { 0 };
		if (!m)
			cli_die("out of memory");
		int rc = sw_monitor_set(m, arg, &err);
		sw_monitor_free(m);
		if (rc)
			cli_usage("%s%s%s", where ? where : "", where ? ": " : "", err.msg);
		char **v = realloc(x->monitor, (x->nmonitor + 1) * sizeof *v);
		if (!v)
			cli_die("out of memory");
		x->monitor = v;
		x->monitor[x->nmonitor++] = xstrdup_(arg);
		break;
	}
	default:
		cli_usage("%s: option '%s' cannot be used here", where ? where : "sw-run", optname);
	}
}

/*
 * An experiment file: "NAME VALUE" a line, NAME a long option with or
 * without its dashes, VALUE the rest of the line (a command keeps its
 * spaces and quotes); a flag stands alone; '#' starts a comment line.
 */
static void read_experiment_(exp_ *x, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		cli_die("cannot open '%s': %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned lineno = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		char where[600];
		lineno++;
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
		const cli_opt *o = opt_by_name_(name);
		if (!o || o->id == 'c' || o->id == OPT_RESUME) {
			fprintf(stderr, "sw-run: %s: unknown setting '%s'\n", where, name);
			exit(EXIT_USAGE);
		}
		if (!o->arg && *p) {
			fprintf(stderr, "sw-run: %s: '%s' takes no value\n", where, name);
			exit(EXIT_USAGE);
		}
		if (o->arg && !*p) {
			fprintf(stderr, "sw-run: %s: '%s' needs a value\n", where, name);
			exit(EXIT_USAGE);
		}
		apply_(x, o->id, p, where);
	}
	if (ferror(f))
		cli_die("cannot read '%s': %s", path, strerror(errno));
	free(line);
	fclose(f);
}

/* The resolved experiment, in the same form, so that `sw-run -c RUNDIR/config` repeats it. */
static int write_experiment_(const exp_ *x, FILE *f)
{
	fprintf(f, "# the resolved experiment of this run (sw-run -c reads it back)\n");
	fprintf(f, "model %s\nprompts %s\n", x->model, x->prompts);
	if (x->eval)
		fprintf(f, "eval %s\n", x->eval);
	fprintf(f, "iters %llu\nbatch %llu\ngroup %llu\nseed %llu\neval-every %llu\nckpt-every %llu\n",
	        (unsigned long long)x->iters, (unsigned long long)x->batch, (unsigned long long)x->group,
	        (unsigned long long)x->seed, (unsigned long long)x->eval_every,
	        (unsigned long long)x->ckpt_every);
	if (x->ref)
		fprintf(f, "ref\n");
	if (x->accuracy)
		fprintf(f, "accuracy %s\n", x->accuracy);
	for (int s = 0; s < S_TAP; s++)
		fprintf(f, "%s %s\n", stage_name_[s], x->cmd[s]);
	for (size_t i = 0; i < x->nmonitor; i++)
		fprintf(f, "monitor %s\n", x->monitor[i]);
	return ferror(f) ? -1 : 0;
}

/* ---- time, paths, small files ------------------------------------------------- */

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *path_(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *path_(const char *dir, const char *fmt, ...)
{
	char rel[512], *p;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rel, sizeof rel, fmt, ap);
	va_end(ap);
	if (asprintf(&p, "%s/%s", dir, rel) < 0)
		cli_die("out of memory");
	return p;
}

static void mkdir_(const char *path)
{
	if (mkdir(path, 0755) && errno != EEXIST)
		cli_die("cannot create '%s': %s", path, strerror(errno));
}

/* Remove a directory tree we made (checkpoint temporaries); errors are ignored. */
static void rmtree_(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char *p = path_(path, "%s", e->d_name);
			struct stat st;
			if (!lstat(p, &st) && S_ISDIR(st.st_mode))
				rmtree_(p);
			else
				unlink(p);
			free(p);
		}
		closedir(d);
	}
	rmdir(path);
}

/* Write data to path atomically: a temporary beside it, fsync, rename. */
static int write_file_(const char *path, const void *data, size_t n)
{
	char *tmp;
	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -1;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int rc = -1;
	if (fd >= 0) {
		const char *p = data;
		size_t left = n;
		while (left) {
			ssize_t w = write(fd, p, left);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			p += w;
			left -= (size_t)w;
		}
		if (!left && !fsync(fd) && !close(fd)) {
			fd = -1;
			rc = rename(tmp, path);
		}
		if (fd >= 0)
			close(fd);
	}
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc;
}

static int copy_file_(const char *from, const char *to)
{
	FILE *f = fopen(from, "rb");
	if (!f)
		return -1;
	char *buf = NULL;
	size_t len = 0, cap = 0, got;
	do {
		if (len == cap) {
			char *p = realloc(buf, cap = cap ? cap * 2 : 1 << 16);
			if (!p) {
				free(buf);
				fclose(f);
				return -1;
			}
			buf = p;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
	} while (got);
	int rc = ferror(f) ? -1 : write_file_(to, buf, len);
	fclose(f);
	free(buf);
	return rc;
}

/* ---- the stores ------------------------------------------------------------------ */

static char store_spec_[SW_STORE_NAME_MAX + 16];
/* /dev/shm paths of the run's stores, for a signal handler that may only unlink() */
static char store_path_[3][SW_STORE_NAME_MAX + 32];
static int nstore_path_;
static volatile sig_atomic_t child_pgid_;

static void forget_stores_(void)
{
	for (int i = 0; i < nstore_path_; i++)
		unlink(store_path_[i]);
	nstore_path_ = 0;
}

static void on_signal_(int sig)
{
	if (child_pgid_ > 0)
		kill(-child_pgid_, SIGTERM);
	forget_stores_();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void note_store_(const char *spec)
{
	if (nstore_path_ < 3 && !strncmp(spec, "shm:", 4))
		snprintf(store_path_[nstore_path_++], sizeof store_path_[0], "/dev/shm/%s", spec + 4);
}

/* ---- a pipeline of stages ---------------------------------------------------------- */

typedef struct proc_ {
	int stage;              /* S_* */
	const char *cmd;
	pid_t pid;
	double t0, t1;          /* started, ended (monotonic seconds) */
	double cpu;             /* user + system seconds, its children included */
	double rss_mb;          /* peak resident memory of its largest process, MB */
	int status;             /* wait status */
	int done;
} proc_;

typedef struct pipeline_ {
	proc_ p[NSTAGE];
	int n;
	int out;                /* the last stage's standard output, which sw-run reads */
} pipeline_;

/* Start the stages as one process group, stdin of the first from in_fd. */
static void spawn_(pipeline_ *pl, const int *stages, int n, const exp_ *x, int in_fd)
{
	int prev = in_fd;
	pid_t pgid = 0, self = getpid();
	pl->n = n;
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC))
			cli_die("cannot make a pipe: %s", strerror(errno));
		proc_ *p = &pl->p[i];
		p->stage = stages[i];
		p->cmd = x->cmd[stages[i]];
		p->done = 0;
		p->t0 = now_();
		pid_t pid = fork();
		if (pid < 0)
			cli_die("cannot start stage '%s': %s", stage_name_[p->stage], strerror(errno));
		if (pid == 0) {
			/* a stage dies with sw-run, even with a SIGKILLed one: none races a resumed run */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != self)
				_exit(127);
			setpgid(0, pgid);
			signal(SIGPIPE, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			if (dup2(prev, 0) < 0 || dup2(fds[1], 1) < 0)
				_exit(127);
			execl("/bin/sh", "sh", "-c", p->cmd, (char *)NULL);
			_exit(127);
		}
		if (!pgid)
			pgid = pid;
		setpgid(pid, pgid);
		p->pid = pid;
		if (prev != in_fd)
			close(prev);
		close(fds[1]);
		prev = fds[0];
	}
	child_pgid_ = pgid;
	pl->out = prev;
}

/*
 * The reaper: a thread that waits for the stages one by one as they end,
 * so each one's time is its own even though sw-run itself blocks reading
 * the last stage.  It ends when every stage has been collected.
 */
static void *reap_(void *arg)
{
	pipeline_ *pl = arg;
	for (int left = pl->n; left > 0;) {
		struct rusage ru;
		int status;
		pid_t r = wait4(-pl->p[0].pid, &status, 0, &ru);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break; /* ECHILD: nothing left to wait for */
		}
		double t = now_();
		for (int i = 0; i < pl->n; i++) {
			proc_ *p = &pl->p[i];
			if (p->pid != r || p->done)
				continue;
			p->done = 1;
			p->status = status;
			p->t1 = t;
			p->cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
			         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
			p->rss_mb = (double)ru.ru_maxrss / 1024; /* KiB on Linux */
			left--;
		}
	}
	child_pgid_ = 0;
	return NULL;
}

/*
 * The stage that made the pipeline fail, or NULL.  A stage killed by
 * SIGPIPE only saw a later stage go first, so the first other failure is
 * the cause.
 */
static const proc_ *failed_(const pipeline_ *pl)
{
	const proc_ *pipe_victim = NULL;
	for (int i = 0; i < pl->n; i++) {
		const proc_ *p = &pl->p[i];
		if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
			continue;
		/* killed by SIGPIPE, or a shell reporting that of its command (128 + 13) */
		if ((WIFSIGNALED(p->status) && WTERMSIG(p->status) == SIGPIPE) ||
		    (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 128 + SIGPIPE)) {
			if (!pipe_victim)
				pipe_victim = p;
			continue;
		}
		return p;
	}
	return pipe_victim;
}

static void describe_status_(const proc_ *p, char *buf, size_t n)
{
	if (WIFEXITED(p->status))
		snprintf(buf, n, "exited with status %d", WEXITSTATUS(p->status));
	else if (WIFSIGNALED(p->status))
		snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(p->status), strsignal(WTERMSIG(p->status)));
	else
		snprintf(buf, n, "ended oddly (status 0x%x)", p->status);
}

/* ---- what the samples say ------------------------------------------------------------ */

#define MAX_COMP 16

typedef struct tally_ {
	uint64_t n, rewarded, violations, errors, acc_n, correct, prompt_tokens, response_tokens, nonfinite;
	double reward_sum;
	struct { char name[64]; double sum, sumsq; uint64_t n; } comp[MAX_COMP];
	int ncomp;
	char acc[64];           /* the verifier whose full score is "correct" */
	double secs;            /* time spent here: part of the monitoring overhead */
} tally_;

static void tally_init_(tally_ *t, const char *accuracy)
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

static void tally_add_(tally_ *t, sw_rec *r)
{
	double t0 = now_(), x;
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
			if (!isfinite(x)) {
				t->nonfinite++;
				continue;
			}
			int c;
			for (c = 0; c < t->ncomp; c++)
				if (strlen(t->comp[c].name) == k.v.str.len &&
				    !memcmp(t->comp[c].name, k.v.str.ptr, k.v.str.len))
					break;
			if (c == t->ncomp && t->ncomp < MAX_COMP && k.v.str.len < sizeof t->comp[0].name) {
				memcpy(t->comp[c].name, k.v.str.ptr, k.v.str.len);
				t->comp[c].name[k.v.str.len] = 0;
				t->ncomp++;
			}
			if (c < t->ncomp) {
				t->comp[c].sum += x;
				t->comp[c].sumsq += x * x;
				t->comp[c].n++;
			}
			/* accuracy: the named verifier, else the first one the run saw */
			if (!t->acc[0] && k.v.str.len < sizeof t->acc) {
				memcpy(t->acc, k.v.str.ptr, k.v.str.len);
				t->acc[k.v.str.len] = 0;
			}
			if (strlen(t->acc) == k.v.str.len && !memcmp(t->acc, k.v.str.ptr, k.v.str.len)) {
				t->acc_n++;
				t->correct += x >= 1.0 - 1e-6;
			}
		}
	}
	t->secs += now_() - t0;
}

static double ratio_(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

/*
 * The largest share of one verifier in the reward's spread: each
 * verifier's variance over the samples, over their sum.  A score that
 * never changes teaches nothing and dominates nothing; NAN when fewer than
 * two verifiers vary.
 */
static double dominance_(const tally_ *t)
{
	double sum = 0, max = 0;
	int used = 0;
	for (int c = 0; c < t->ncomp; c++) {
		double n = (double)t->comp[c].n, m = ratio_(t->comp[c].sum, n);
		double var = ratio_(t->comp[c].sumsq, n) - m * m;
		if (!(var > 1e-12))
			continue;
		used++;
		sum += var;
		if (var > max)
			max = var;
	}
	return used >= 2 ? max / sum : NAN;
}

/* What the monitors see of an iteration's samples; the trainer's figures are added by the caller. */
static sw_mon_obs obs_of_(const tally_ *t)
{
	sw_mon_obs o = {
		.nonfinite = (int)t->nonfinite,
		.kl = NAN,
		.entropy = NAN,
		.reward_mean = ratio_(t->reward_sum, (double)t->rewarded),
		.violation_rate = ratio_((double)t->violations, (double)t->n),
		.verifier_error_rate = ratio_((double)t->errors, (double)t->n),
		.response_len_mean = ratio_((double)t->response_tokens, (double)t->n),
		.max_component_share = dominance_(t),
		.eval_accuracy = NAN,
	};
	return o;
}

/* ---- records of figures --------------------------------------------------------------- */

/* A number, or nil when it was not measured. */
static void set_num_(sw_rec *r, const char *key, double x)
{
	int rc = isnan(x) ? sw_rec_set_nil(r, key) : sw_rec_set_f64(r, key, x);
	if (rc)
		cli_die("cannot build a metrics record: %s", sw_strerror(rc));
}

/* The numbers of the last record of a JSON Lines or msgpack file a stage wrote (NULL: none). */
static sw_rec *last_record_(const char *path)
{
	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(path, &err);
	if (!r)
		return NULL;
	sw_rec *rec = sw_rec_new(), *last = NULL;
	if (!rec)
		cli_die("out of memory");
	int rc;
	while ((rc = sw_reader_next(r, rec)) == 1) {
		sw_rec_free(last);
		last = rec;
		if (sw_rec_own(last) || !(rec = sw_rec_new()))
			cli_die("out of memory");
	}
	if (rc < 0) {
		char where[300];
		cli_warn("%s: %s (its figures are left out)", path, sw_error_str(sw_reader_error(r), where, sizeof where));
	}
	sw_rec_free(rec);
	sw_reader_free(r);
	return last;
}

static double num_of_(sw_rec *r, const char *key)
{
	double x;
	return r && !sw_rec_get_f64(r, key, &x) ? x : NAN;
}

/* Append one record to metrics.jsonl. */
static void append_metrics_(const char *path, sw_rec *rec)
{
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		cli_die("cannot open '%s': %s", path, strerror(errno));
	sw_writer *w = sw_writer_fdopen(fd, path, &wo, &err);
	if (!w || sw_writer_put(w, rec) || sw_writer_close(w) || fsync(fd))
		cli_die("cannot write '%s': %s", path, w ? sw_writer_error(w)->msg : err.msg);
	sw_writer_free(w);
	close(fd);
}

/*
 * Run a program to its end, without a shell (paths pass as they are); 0 when
 * it succeeded, else a message in why.  Like a stage, it dies with sw-run.
 */
static int run_argv_(char *const argv[], char *why, size_t n)
{
	fflush(NULL);
	pid_t self = getpid(), pid = fork();
	if (pid < 0) {
		snprintf(why, n, "cannot start it: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			snprintf(why, n, "cannot wait for it: %s", strerror(errno));
			return -1;
		}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	proc_ p = { .status = st };
	describe_status_(&p, why, n);
	return -1;
}

/* ---- the run --------------------------------------------------------------------------- */

typedef struct run_ {
	exp_ x;
	char *dir;                 /* the run directory */
	sw_store *w, *opt, *ref;   /* weights, optimiser state, frozen reference */
	char opt_spec[SW_STORE_NAME_MAX + 32], ref_spec[SW_STORE_NAME_MAX + 32];
	sw_audit *audit;
	sw_monitor *mon;
	double lr_scale;           /* halved by each degrade */
	double last_eval_accuracy; /* of an evaluation run after the current iteration, else NAN */
	uint64_t iter;             /* the last iteration completed */
	int argc;
	char **argv;
} run_;

static void audit_(run_ *r, sw_audit_rec *rec)
{
	sw_error err = { 0 };
	if (!rec)
		cli_die("out of memory");
	if (sw_audit_append(r->audit, rec, &err))
		cli_die("%s/audit.log: %s", r->dir, err.msg);
	sw_audit_rec_free(rec);
}

static void audit_field_(int rc)
{
	if (rc)
		cli_die("cannot build an audit record: %s", sw_strerror(rc));
}

static sw_audit_rec *audit_new_(const char *event)
{
	sw_audit_rec *a = sw_audit_rec_new(event);
	if (!a)
		cli_die("out of memory");
	return a;
}

static void setenv_num_(const char *name, uint64_t v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
	setenv(name, buf, 1);
}

/* What every stage finds in its environment for iteration it. */
static void stage_env_(run_ *r, uint64_t it)
{
	char buf[64];
	setenv("SW_WEIGHTS", store_spec_, 1);
	setenv("SW_OPT", r->opt_spec, 1);
	if (r->ref)
		setenv("SW_REF", r->ref_spec, 1);
	else
		unsetenv("SW_REF");
	setenv("SW_RUN", r->dir, 1);
	setenv_num_("SW_ITER", it);
	/* one seed per iteration, so a resumed run draws what the original drew */
	setenv_num_("SW_SEED", (r->x.seed * 1000003ull + it) & 0xffffffffull);
	setenv_num_("SW_GROUP", r->x.group);
	setenv_num_("SW_BATCH", r->x.batch);
	char *p = path_(r->dir, "pool");
	setenv("SW_POOL", p, 1);
	free(p);
	p = path_(r->dir, "tmp/balance-stats.json");
	setenv("SW_BALANCE_STATS", p, 1);
	free(p);
	p = path_(r->dir, "tmp/train-metrics.jsonl");
	setenv("SW_TRAIN_METRICS", p, 1);
	free(p);
	snprintf(buf, sizeof buf, "%.17g", r->lr_scale);
	setenv("SW_LR_SCALE", buf, 1);
	/*
	 * Stages share the cores: a thread that spins waiting for its team
	 * burns the time another stage (or its own team-mate) needs.  Measured
	 * on two cores with a neighbour busy: a small training step took 16 s
	 * spinning, 0.4 s passive.  A user's own setting wins.
	 */
	setenv("OMP_WAIT_POLICY", "passive", 0);
}

/*
 * Run stages over in_fd, write what the last one prints to samples (zstd
 * msgpack) and tally it (t may be NULL).  Returns the failed stage or NULL; the stages'
 * times go to pl.
 */
static const proc_ *run_stages_(run_ *r, pipeline_ *pl, const int *stages, int n, int in_fd,
                                const char *samples, tally_ *t)
{
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 3 };
	char *tmp;
	if (asprintf(&tmp, "%s.part", samples) < 0)
		cli_die("out of memory");
	sw_writer *w = sw_writer_open(tmp, &wo, &err);
	if (!w)
		cli_die("cannot write '%s': %s", tmp, err.msg);
	spawn_(pl, stages, n, &r->x, in_fd);
	sw_reader *rd = sw_reader_fdopen(pl->out, stage_name_[stages[n - 1]], &err);
	if (!rd)
		cli_die("cannot read the pipeline: %s", err.msg);
	pthread_t reaper;
	if (pthread_create(&reaper, NULL, reap_, pl))
		cli_die("cannot start a thread: %s", strerror(errno));
	sw_rec *rec = sw_rec_new();
	if (!rec)
		cli_die("out of memory");
	int rc;
	while ((rc = sw_reader_next(rd, rec)) == 1) {
		if (t)
			tally_add_(t, rec);
		if (sw_writer_put(w, rec))
			cli_die("%s: %s", tmp, sw_writer_error(w)->msg);
	}
	char msg[400] = "";
	if (rc < 0)
		sw_error_str(sw_reader_error(rd), msg, sizeof msg);
	sw_reader_free(rd);
	close(pl->out);
	pthread_join(reaper, NULL);
	sw_rec_free(rec);
	if (sw_writer_close(w))
		cli_die("%s: %s", tmp, sw_writer_error(w)->msg);
	sw_writer_free(w);
	const proc_ *bad = failed_(pl);
	if (!bad && rc < 0)
		cli_die("the output of stage '%s' is not a stream: %s", stage_name_[stages[n - 1]], msg);
	/* the samples so far are kept either way; a failed iteration's under their own name */
	char *final;
	if (asprintf(&final, "%s%s", samples, bad ? ".failed" : "") < 0)
		cli_die("out of memory");
	if (rename(tmp, final))
		cli_die("cannot rename '%s': %s", tmp, strerror(errno));
	free(final);
	free(tmp);
	return bad;
}

/*
 * Tally the samples of the tap file and write them to samples (zstd
 * msgpack).  After a failed stage the tap may end inside a record: what was
 * whole is kept.
 */
static void tally_file_(const char *tap, const char *samples, tally_ *t, int failed)
{
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 3 };
	sw_writer *w = sw_writer_open(samples, &wo, &err);
	if (!w)
		cli_die("cannot write '%s': %s", samples, err.msg);
	sw_reader *rd = sw_reader_open(tap, &err);
	if (!rd && !failed)
		cli_die("cannot open '%s': %s", tap, strerror(err.sys_errno));
	sw_rec *rec = sw_rec_new();
	if (!rec)
		cli_die("out of memory");
	int rc = 0;
	while (rd && (rc = sw_reader_next(rd, rec)) == 1) {
		tally_add_(t, rec);
		if (sw_writer_put(w, rec))
			cli_die("%s: %s", samples, sw_writer_error(w)->msg);
	}
	if (rc < 0 && !failed && sw_reader_error(rd)->code != SW_EEMPTY) {
		char msg[300];
		cli_die("the verified samples are not a stream: %s: %s", tap,
		        sw_error_str(sw_reader_error(rd), msg, sizeof msg));
	}
	sw_reader_free(rd);
	sw_rec_free(rec);
	if (sw_writer_close(w))
		cli_die("%s: %s", samples, sw_writer_error(w)->msg);
	sw_writer_free(w);
}

static void audit_stages_(run_ *r, const pipeline_ *pl, uint64_t it, const char *what)
{
	for (int i = 0; i < pl->n; i++) {
		const proc_ *p = &pl->p[i];
		sw_audit_rec *a = audit_new_("stage");
		audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
		audit_field_(sw_audit_rec_str(a, "of", what));
		audit_field_(sw_audit_rec_str(a, "stage", stage_name_[p->stage]));
		audit_field_(sw_audit_rec_str(a, "cmd", p->cmd));
		audit_field_(sw_audit_rec_int(a, "status", WIFEXITED(p->status) ? WEXITSTATUS(p->status)
		                                                                   : 128 + WTERMSIG(p->status)));
		audit_field_(sw_audit_rec_num(a, "wall_s", p->t1 - p->t0));
		audit_field_(sw_audit_rec_num(a, "cpu_s", p->cpu));
		audit_(r, a);
	}
}

static void stage_failed_(run_ *r, const pipeline_ *pl, const proc_ *bad, uint64_t it, const char *what)
{
	char why[160];
	describe_status_(bad, why, sizeof why);
	audit_stages_(r, pl, it, what);
	sw_audit_rec *a = audit_new_("failure");
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
	audit_field_(sw_audit_rec_str(a, "stage", stage_name_[bad->stage]));
	audit_field_(sw_audit_rec_str(a, "reason", why));
	audit_(r, a);
	cli_die("iteration %llu: stage '%s' %s (%s); the samples so far are in %s/samples, the weights are "
	        "those of the last checkpoint; continue with sw-run --resume %s",
	        (unsigned long long)it, stage_name_[bad->stage], why, bad->cmd, r->dir, r->dir);
}

/* An evaluation: greedy generation of the held-out prompts, scored by the verify stage. */
static void evaluate_(run_ *r, uint64_t it)
{
	if (!r->x.eval)
		return;
	static const int stages[] = { S_EVAL_ROLLOUT, S_VERIFY };
	pipeline_ pl;
	tally_ t;
	tally_init_(&t, r->x.accuracy);
	int fd = open(r->x.eval, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		cli_die("cannot open '%s': %s", r->x.eval, strerror(errno));
	stage_env_(r, it);
	double t0 = now_();
	char *samples = path_(r->dir, "samples/eval-%04llu.msgpack.zst", (unsigned long long)it);
	const proc_ *bad = run_stages_(r, &pl, stages, 2, fd, samples, &t);
	close(fd);
	if (bad)
		stage_failed_(r, &pl, bad, it, "eval");
	audit_stages_(r, &pl, it, "eval");
	double secs = now_() - t0;
	double acc = ratio_((double)t.correct, (double)t.acc_n);
	double viol = ratio_((double)t.violations, (double)t.n);

	sw_rec *m = sw_rec_new();
	if (!m)
		cli_die("out of memory");
	sw_rec_set_u64(m, "iter", it);
	sw_rec_set_bool(m, "eval", true);
	set_num_(m, "accuracy", acc);
	set_num_(m, "violation_rate", viol);
	set_num_(m, "reward_mean", ratio_(t.reward_sum, (double)t.rewarded));
	set_num_(m, "response_len_mean", ratio_((double)t.response_tokens, (double)t.n));
	sw_rec_set_u64(m, "samples", t.n);
	set_num_(m, "time_s", secs);
	char *metrics = path_(r->dir, "metrics.jsonl");
	append_metrics_(metrics, m);
	free(metrics);
	sw_rec_free(m);

	sw_audit_rec *a = audit_new_("eval");
	char hex[SW_DIGEST_HEX];
	sw_error err = { 0 };
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
	if (!isnan(acc))
		audit_field_(sw_audit_rec_num(a, "accuracy", acc));
	if (!isnan(viol))
		audit_field_(sw_audit_rec_num(a, "violation_rate", viol));
	if (sw_digest_file(samples, hex, &err))
		cli_die("%s: %s", samples, err.msg);
	audit_field_(sw_audit_rec_str(a, "samples", samples + strlen(r->dir) + 1));
	audit_field_(sw_audit_rec_str(a, "samples_digest", hex));
	audit_(r, a);
	free(samples);
	if (cli_verbosity > 0 || (cli_verbosity == 0 && isatty(2)))
		fprintf(stderr, "sw-run: eval after iteration %llu: accuracy %.1f%%, violation rate %.1f%% (%llu prompts)\n",
		        (unsigned long long)it, 100 * acc, 100 * viol, (unsigned long long)t.n);
	/* the monitors see the held-out accuracy with the iteration it follows */
	r->last_eval_accuracy = acc;
}

/* ---- checkpoints and the state they restore ------------------------------------------------ */

/* The files of the start model a checkpoint carries besides the weights, so it is a model directory. */
static const char *const model_extras_[] = {
	"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json", NULL
};

static void save_state_json_(run_ *r, const char *path)
{
	sw_mon_history h;
	sw_monitor_get_history(r->mon, &h);
	sw_rec *s = sw_rec_new();
	if (!s)
		cli_die("out of memory");
	sw_rec_set_u64(s, "iter", r->iter);
	sw_rec_set_f64(s, "lr_scale", r->lr_scale);
	sw_rec_set_u64(s, "weight_version", sw_store_version(r->w));
	sw_rec_set_u64(s, "opt_version", r->opt ? sw_store_version(r->opt) : 0);
	sw_rec_set_u64(s, "opt_floats", r->opt ? sw_store_nfloats(r->opt) : 0);
	set_num_(s, "first_len", h.first_len);
	set_num_(s, "eval_reward", h.eval_reward);
	set_num_(s, "eval_accuracy", h.eval_accuracy);
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	char *tmp = path_(r->dir, "tmp/state.json");
	sw_writer *w = sw_writer_open(tmp, &wo, &err);
	if (!w || sw_writer_put(w, s) || sw_writer_close(w))
		cli_die("cannot write '%s': %s", tmp, w ? sw_writer_error(w)->msg : err.msg);
	sw_writer_free(w);
	sw_rec_free(s);
	if (copy_file_(tmp, path))
		cli_die("cannot write '%s': %s", path, strerror(errno));
	unlink(tmp);
	free(tmp);
}

/* The optimiser store, opened when the trainer has made it (it knows its size). */
static void open_opt_(run_ *r)
{
	sw_error err = { 0 };
	if (!r->opt && (r->opt = sw_store_open(r->opt_spec, true, &err)))
		note_store_(r->opt_spec);
}

/*
 * ckpt/iter-N: a model directory (config, weights, the start model's
 * tokenizer files) plus what resuming needs: optimizer.bin (the trainer's
 * store, raw), pool (the task pool), state.json (sw-run's own state).  Made
 * in a temporary directory and renamed into place, so a checkpoint is whole
 * or absent; the audit log records its digest.
 */
static void checkpoint_(run_ *r, const char *why)
{
	sw_error err = { 0 };
	double t0 = now_();
	char *name = path_("ckpt", "iter-%04llu", (unsigned long long)r->iter);
	char *final = path_(r->dir, "%s", name);
	char *tmp = path_(r->dir, "ckpt/.%s.tmp", name + 5);
	rmtree_(tmp);
	if (sw_store_save_model(r->w, tmp, SW_DT_F32, &err))
		cli_die("checkpoint '%s': %s", final, err.msg);
	for (int i = 0; model_extras_[i]; i++) {
		char *from = path_(r->x.model, "%s", model_extras_[i]), *to = path_(tmp, "%s", model_extras_[i]);
		if (!access(from, F_OK) && copy_file_(from, to))
			cli_die("checkpoint '%s': cannot copy '%s': %s", final, from, strerror(errno));
		free(from);
		free(to);
	}
	open_opt_(r);
	if (r->opt) {
		char *p = path_(tmp, "optimizer.bin");
		uint64_t seq;
		if (sw_store_read_begin(r->opt, &seq, &err))
			cli_die("checkpoint '%s': optimiser state: %s", final, err.msg);
		if (write_file_(p, sw_store_arena(r->opt), sw_store_nfloats(r->opt) * sizeof(float)) ||
		    sw_store_read_retry(r->opt, seq))
			cli_die("checkpoint '%s': cannot write '%s'", final, p);
		free(p);
	}
	char *pool = path_(r->dir, "pool"), *pool_to = path_(tmp, "pool");
	if (!access(pool, F_OK) && copy_file_(pool, pool_to))
		cli_die("checkpoint '%s': cannot copy the pool: %s", final, strerror(errno));
	free(pool);
	free(pool_to);
	char *state = path_(tmp, "state.json");
	save_state_json_(r, state);
	free(state);
	rmtree_(final);
	if (rename(tmp, final))
		cli_die("cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
	/* the directory entry itself must survive a crash too */
	char *ck = path_(r->dir, "ckpt");
	int dfd = open(ck, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	free(ck);
	/* the resume point: which checkpoint is the latest whole one */
	char *latest = path_(r->dir, "state");
	if (write_file_(latest, name, strlen(name)))
		cli_die("cannot write '%s': %s", latest, strerror(errno));
	free(latest);
	sw_audit_rec *a = audit_new_("checkpoint");
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)r->iter));
	audit_field_(sw_audit_rec_str(a, "why", why));
	audit_field_(sw_audit_rec_int(a, "weight_version", (int64_t)sw_store_version(r->w)));
	if (sw_audit_rec_checkpoint(a, r->dir, name, &err))
		cli_die("checkpoint '%s': %s", final, err.msg);
	audit_field_(sw_audit_rec_num(a, "wall_s", now_() - t0));
	audit_(r, a);
	free(name);
	free(final);
	free(tmp);
}

/* Put the optimiser state, pool and sw-run's state back as checkpoint dir left them. */
static void restore_(run_ *r, const char *name)
{
	sw_error err = { 0 };
	char *dir = path_(r->dir, "%s", name);
	char *state = path_(dir, "state.json");
	sw_rec *s = last_record_(state);
	if (!s)
		cli_die("%s: cannot read the checkpoint's state", state);
	uint64_t wv = 0, ov = 0, of = 0;
	if (sw_rec_get_u64(s, "iter", &r->iter) || sw_rec_get_f64(s, "lr_scale", &r->lr_scale) ||
	    sw_rec_get_u64(s, "weight_version", &wv) || sw_rec_get_u64(s, "opt_version", &ov) ||
	    sw_rec_get_u64(s, "opt_floats", &of))
		cli_die("%s: a field is missing or of the wrong type", state);
	sw_mon_history h = { num_of_(s, "first_len"), num_of_(s, "eval_reward"), num_of_(s, "eval_accuracy") };
	sw_monitor_set_history(r->mon, &h);
	sw_rec_free(s);

	/* the weights were loaded with the store (create_stores_), at their version */
	if (sw_store_version(r->w) != wv)
		cli_die("restoring '%s': the weights are version %llu, the checkpoint says %llu", dir,
		        (unsigned long long)sw_store_version(r->w), (unsigned long long)wv);

	char *opt = path_(dir, "optimizer.bin");
	open_opt_(r);
	if (of) {
		if (!r->opt) {
			if (!(r->opt = sw_store_create(r->opt_spec, NULL, of, &err)))
				cli_die("restoring '%s': %s", opt, err.msg);
			note_store_(r->opt_spec);
		}
		FILE *f = fopen(opt, "rb");
		if (!f || sw_store_nfloats(r->opt) != of || sw_store_write_begin(r->opt, &err) ||
		    fread(sw_store_arena(r->opt), sizeof(float), of, f) != of || sw_store_publish(r->opt, ov, &err))
			cli_die("restoring '%s': it does not match the optimiser store", opt);
		fclose(f);
	} else if (r->opt) {
		/* a checkpoint from before the first step: the trainer starts afresh */
		sw_store_close(r->opt);
		r->opt = NULL;
		sw_store_unlink(r->opt_spec, NULL);
	}
	free(opt);
	char *pool = path_(dir, "pool"), *pool_to = path_(r->dir, "pool");
	if (copy_file_(pool, pool_to))
		cli_die("restoring '%s': cannot copy the pool: %s", dir, strerror(errno));
	free(pool);
	free(pool_to);
	free(state);
	free(dir);
}

/* ---- one iteration ----------------------------------------------------------------------- */

static void halt_(run_ *r, uint64_t it, const char *reason)
{
	char *p = path_(r->dir, "HALT");
	char *text;
	if (asprintf(&text, "iteration %llu: %s\n", (unsigned long long)it, reason) < 0)
		cli_die("out of memory");
	if (write_file_(p, text, strlen(text)))
		cli_die("cannot write '%s': %s", p, strerror(errno));
	sw_audit_rec *a = audit_new_("halt");
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
	audit_field_(sw_audit_rec_str(a, "reason", reason));
	audit_(r, a);
	cli_warn("halted: %s (see %s; continue with sw-run --resume %s)", reason, p, r->dir);
	free(p);
	free(text);
}

/* Returns the worst monitor level of the iteration, and its worst event in *worst. */
static sw_mon_level iterate_(run_ *r, uint64_t it, sw_mon_event *worst)
{
	static const int stages[] = { S_SELECT, S_SORT, S_ROLLOUT, S_VERIFY, S_TAP, S_BALANCE, S_TRAIN };
	pipeline_ pl;
	tally_ t;
	sw_error err = { 0 };
	tally_init_(&t, r->x.accuracy);
	stage_env_(r, it);
	char *stats = path_(r->dir, "tmp/balance-stats.json"), *tm = path_(r->dir, "tmp/train-metrics.jsonl");
	char *tap = path_(r->dir, "tmp/verified.msgpack");
	setenv("SW_TAP", tap, 1);
	unlink(stats);
	unlink(tm);
	unlink(tap);
	uint64_t v0 = sw_store_version(r->w);
	double t0 = now_();
	char *samples = path_(r->dir, "samples/iter-%04llu.msgpack.zst", (unsigned long long)it);
	char *trained = path_(r->dir, "samples/iter-%04llu.train.msgpack.zst", (unsigned long long)it);
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* the figures come from the tap; the trainer's pass-through is only kept */
	const proc_ *bad = run_stages_(r, &pl, stages, 7, devnull, trained, NULL);
	close(devnull);
	double wall = now_() - t0;
	char *kept;
	if (asprintf(&kept, "%s%s", samples, bad ? ".failed" : "") < 0)
		cli_die("out of memory");
	tally_file_(tap, kept, &t, bad != NULL);
	free(kept);
	unlink(tap);
	free(tap);
	if (bad) {
		/* a monitor that would halt on what was verified speaks first: it says why */
		sw_mon_obs ob = obs_of_(&t);
		sw_mon_event ev[8];
		size_t nev;
		r->iter = it;
		if (sw_monitor_check(r->mon, &ob, ev, 8, &nev) == SW_MON_HARD) {
			char why[300], mons[64];
			sw_rec *m = sw_rec_new();
			if (!m)
				cli_die("out of memory");
			sw_rec_set_u64(m, "iter", it);
			set_num_(m, "reward_mean", ob.reward_mean);
			set_num_(m, "violation_rate", ob.violation_rate);
			set_num_(m, "verifier_error_rate", ob.verifier_error_rate);
			sw_rec_set_u64(m, "samples", t.n);
			snprintf(mons, sizeof mons, "%s:hard", ev[0].name);
			sw_rec_set_str(m, "monitors", mons, strlen(mons));
			sw_rec_set_str(m, "failed", stage_name_[bad->stage], strlen(stage_name_[bad->stage]));
			char *metrics = path_(r->dir, "metrics.jsonl");
			append_metrics_(metrics, m);
			free(metrics);
			sw_rec_free(m);
			audit_stages_(r, &pl, it, "iteration");
			snprintf(why, sizeof why, "monitor '%s' at %.4g, past its hard threshold %.4g (and stage '%s' failed)",
			         ev[0].name, ev[0].value, ev[0].threshold, stage_name_[bad->stage]);
			r->iter = it - 1;
			halt_(r, it, why);
			cli_exit(EXIT_HALT);
		}
		r->iter = it - 1;
		stage_failed_(r, &pl, bad, it, "iteration");
	}

	/* the pool learns which prompts still teach something */
	double tp = now_();
	{
		char why[160];
		char *pool = path_(r->dir, "pool");
		char *av[] = { "sw-pool", "update", pool, samples, NULL };
		if (run_argv_(av, why, sizeof why))
			cli_die("iteration %llu: sw-pool update %s %s %s", (unsigned long long)it, pool, samples, why);
		free(pool);
	}
	tp = now_() - tp;
	r->iter = it;

	/* figures */
	double tm0 = now_();
	sw_rec *train = last_record_(tm), *bal = last_record_(stats);
	sw_mon_obs o = obs_of_(&t);
	o.kl = num_of_(train, "kl");
	o.entropy = num_of_(train, "entropy");
	/* a NaN or Inf the trainer reports (a number that is there but not finite) */
	static const char *const train_nums[] = { "loss", "grad_norm", "kl", "entropy" };
	for (size_t i = 0; train && i < sizeof train_nums / sizeof *train_nums; i++) {
		double x;
		if (!sw_rec_get_f64(train, train_nums[i], &x) && !isfinite(x))
			o.nonfinite++;
	}
	/* an evaluation due after this iteration runs before the monitors decide */
	r->last_eval_accuracy = NAN;
	double te = now_();
	if (r->x.eval && (it % r->x.eval_every == 0 || it == r->x.iters))
		evaluate_(r, it);
	te = now_() - te;
	o.eval_accuracy = r->last_eval_accuracy;
	sw_mon_event ev[8];
	size_t nev;
	sw_mon_level lv = sw_monitor_check(r->mon, &o, ev, 8, &nev);
	if (nev)
		*worst = ev[0];
	double mon_secs = t.secs + (now_() - tm0) - te;

	sw_rec *m = sw_rec_new(), *rw = sw_rec_new(), *ts = sw_rec_new(), *cpu = sw_rec_new(), *rss = sw_rec_new();
	if (!m || !rw || !ts || !cpu || !rss)
		cli_die("out of memory");
	sw_rec_set_u64(m, "iter", it);
	set_num_(m, "reward_mean", o.reward_mean);
	for (int c = 0; c < t.ncomp; c++)
		set_num_(rw, t.comp[c].name, ratio_(t.comp[c].sum, (double)t.comp[c].n));
	sw_rec_set_map(m, "rewards", rw);
	set_num_(m, "accuracy", ratio_((double)t.correct, (double)t.acc_n));
	set_num_(m, "violation_rate", o.violation_rate);
	set_num_(m, "verifier_error_rate", o.verifier_error_rate);
	set_num_(m, "kl", o.kl);
	set_num_(m, "entropy", o.entropy);
	double clip = num_of_(train, "clip_frac");
	if (isnan(clip) && !isnan(num_of_(train, "clip_frac_low")))
		clip = num_of_(train, "clip_frac_low") + num_of_(train, "clip_frac_high");
	set_num_(m, "clip_frac", clip);
	set_num_(m, "loss", num_of_(train, "loss"));
	set_num_(m, "grad_norm", num_of_(train, "grad_norm"));
	set_num_(m, "lr", num_of_(train, "lr"));
	set_num_(m, "response_len_mean", o.response_len_mean);
	set_num_(m, "tokens_per_s", ratio_((double)(t.prompt_tokens + t.response_tokens), wall));
	for (int i = 0; i < pl.n; i++) {
		if (pl.p[i].stage == S_TAP)
			continue;
		set_num_(ts, stage_name_[pl.p[i].stage], pl.p[i].t1 - pl.p[i].t0);
		set_num_(cpu, stage_name_[pl.p[i].stage], pl.p[i].cpu);
		set_num_(rss, stage_name_[pl.p[i].stage], pl.p[i].rss_mb);
	}
	set_num_(ts, "pool_update", tp);
	set_num_(ts, "iteration", wall);
	if (r->x.eval && !isnan(r->last_eval_accuracy))
		set_num_(ts, "eval", te);
	sw_rec_set_map(m, "time_s", ts);
	sw_rec_set_map(m, "cpu_s", cpu);
	sw_rec_set_map(m, "rss_mb", rss);
	/* sw-balance --stats: {"imbalance": {"max_over_mean": ...}} */
	double imb = NAN;
	sw_rec *ib = sw_rec_new();
	if (bal && ib && !sw_rec_get_map(bal, "imbalance", ib))
		imb = num_of_(ib, "max_over_mean");
	sw_rec_free(ib);
	set_num_(m, "imbalance", imb);
	set_num_(m, "monitor_overhead", ratio_(mon_secs, wall));
	sw_rec_set_u64(m, "samples", t.n);
	sw_rec_set_u64(m, "weight_version", sw_store_version(r->w));
	sw_rec_set_f64(m, "lr_scale", r->lr_scale);
	if (nev) {
		char buf[512] = "";
		size_t used = 0;
		for (size_t i = 0; i < nev && i < 8; i++)
			used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s:%s", i ? "," : "", ev[i].name,
			                         sw_mon_level_name(ev[i].level));
		sw_rec_set_str(m, "monitors", buf, strlen(buf));
	}
	char *metrics = path_(r->dir, "metrics.jsonl");
	append_metrics_(metrics, m);
	free(metrics);

	/* the audit trail of the iteration */
	audit_stages_(r, &pl, it, "iteration");
	char hex[SW_DIGEST_HEX];
	sw_audit_rec *a = audit_new_("iteration");
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
	if (sw_digest_file(samples, hex, &err))
		cli_die("%s: %s", samples, err.msg);
	audit_field_(sw_audit_rec_str(a, "samples", samples + strlen(r->dir) + 1));
	audit_field_(sw_audit_rec_str(a, "samples_digest", hex));
	audit_field_(sw_audit_rec_int(a, "weight_version_before", (int64_t)v0));
	audit_field_(sw_audit_rec_int(a, "weight_version", (int64_t)sw_store_version(r->w)));
	sw_digest_mem(sw_store_arena(r->w), sw_store_nfloats(r->w) * sizeof(float), hex);
	audit_field_(sw_audit_rec_str(a, "weights_digest", hex));
	audit_(r, a);
	for (size_t i = 0; i < nev && i < 8; i++) {
		a = audit_new_("monitor");
		audit_field_(sw_audit_rec_int(a, "iter", (int64_t)it));
		audit_field_(sw_audit_rec_str(a, "monitor", ev[i].name));
		audit_field_(sw_audit_rec_str(a, "level", sw_mon_level_name(ev[i].level)));
		audit_field_(sw_audit_rec_num(a, "value", ev[i].value));
		audit_field_(sw_audit_rec_num(a, "threshold", ev[i].threshold));
		audit_(r, a);
	}

	if (cli_verbosity > 0 || (cli_verbosity == 0 && isatty(2))) {
		fprintf(stderr, "sw-run: iter %llu/%llu: reward %.3f, accuracy %.1f%%, violations %.1f%%, kl %.4f, "
		        "len %.1f, %.1f s",
		        (unsigned long long)it, (unsigned long long)r->x.iters, o.reward_mean,
		        100 * ratio_((double)t.correct, (double)t.acc_n), 100 * o.violation_rate, o.kl,
		        o.response_len_mean, wall);
		for (size_t i = 0; i < nev && i < 8; i++)
			fprintf(stderr, "%s%s %s (%.4g past %.4g)", i ? ", " : "; ", ev[i].name,
			        sw_mon_level_name(ev[i].level), ev[i].value, ev[i].threshold);
		fputc('\n', stderr);
	}
	sw_rec_free(m);
	sw_rec_free(rw);
	sw_rec_free(ts);
	sw_rec_free(cpu);
	sw_rec_free(rss);
	sw_rec_free(train);
	sw_rec_free(bal);
	free(stats);
	free(tm);
	free(samples);
	free(trained);

	if (lv >= SW_MON_WARN && nev)
		for (size_t i = 0; i < nev && i < 8; i++)
			if (ev[i].level == SW_MON_WARN)
				cli_warn("iteration %llu: monitor '%s' warns: %.4g past %.4g", (unsigned long long)it,
				         ev[i].name, ev[i].value, ev[i].threshold);
	return lv;
}

/* ---- start, resume, end ---------------------------------------------------------------------- */

static run_ *run_global_;

static void cleanup_(void)
{
	run_ *r = run_global_;
	if (!r)
		return;
	if (child_pgid_ > 0)
		kill(-child_pgid_, SIGTERM);
	sw_store_close(r->w);
	sw_store_close(r->opt);
	sw_store_close(r->ref);
	r->w = r->opt = r->ref = NULL;
	if (!r->x.keep)
		forget_stores_();
	sw_audit_close(r->audit);
	r->audit = NULL;
}

static void create_stores_(run_ *r, const char *weights_from, uint64_t version)
{
	sw_error err = { 0 };
	if (sw_store_name_random("sw-run", store_spec_, sizeof store_spec_, &err))
		cli_die("cannot name a store: %s", err.msg);
	snprintf(r->opt_spec, sizeof r->opt_spec, "%s.opt", store_spec_);
	snprintf(r->ref_spec, sizeof r->ref_spec, "%s.ref", store_spec_);
	note_store_(store_spec_);
	if (!(r->w = sw_store_create_from_model(store_spec_, weights_from, version, &err)))
		cli_die("cannot load '%s' into a weight store: %s", weights_from, err.msg);
	if (r->x.ref) {
		note_store_(r->ref_spec);
		if (!(r->ref = sw_store_create_from_model(r->ref_spec, r->x.model, 0, &err)))
			cli_die("cannot load '%s' into the reference store: %s", r->x.model, err.msg);
	}
}

static void audit_start_(run_ *r, const char *event)
{
	sw_error err = { 0 };
	char hex[SW_DIGEST_HEX];
	sw_audit_rec *a = audit_new_(event);
	audit_field_(sw_audit_rec_argv(a, "argv", r->argc, r->argv));
	char *cfg = path_(r->dir, "config");
	if (sw_digest_file(cfg, hex, &err))
		cli_die("%s: %s", cfg, err.msg);
	audit_field_(sw_audit_rec_str(a, "config_digest", hex));
	audit_field_(sw_audit_rec_str(a, "model", r->x.model));
	if (sw_digest_dir(r->x.model, hex, &err))
		cli_die("%s: %s", r->x.model, err.msg);
	audit_field_(sw_audit_rec_str(a, "model_digest", hex));
	audit_field_(sw_audit_rec_str(a, "weights", store_spec_));
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)r->iter));
	char desc[1024];
	if (!sw_monitor_describe(r->mon, desc, sizeof desc))
		audit_field_(sw_audit_rec_str(a, "monitors", desc));
	audit_(r, a);
	free(cfg);
}

static void open_audit_(run_ *r)
{
	sw_error err = { 0 };
	char *p = path_(r->dir, "audit.log");
	if (!(r->audit = sw_audit_open(p, &err)))
		cli_die("%s: %s", p, err.msg);
	free(p);
}

/* Keep only the metrics records of iterations up to r->iter (a resumed run writes the rest again). */
static void trim_metrics_(run_ *r)
{
	char *p = path_(r->dir, "metrics.jsonl"), *tmp = path_(r->dir, "tmp/metrics.jsonl");
	sw_error err = { 0 };
	sw_reader *rd = sw_reader_open(p, &err);
	if (!rd) {
		free(p);
		free(tmp);
		return;
	}
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	sw_writer *w = sw_writer_open(tmp, &wo, &err);
	sw_rec *rec = sw_rec_new();
	if (!w || !rec)
		cli_die("cannot write '%s': %s", tmp, err.msg);
	int rc;
	uint64_t it;
	while ((rc = sw_reader_next(rd, rec)) == 1)
		if (!sw_rec_get_u64(rec, "iter", &it) && it <= r->iter && sw_writer_put(w, rec))
			cli_die("cannot write '%s': %s", tmp, sw_writer_error(w)->msg);
	if (rc < 0) {
		char msg[300];
		cli_die("%s: %s", p, sw_error_str(sw_reader_error(rd), msg, sizeof msg));
	}
	if (sw_writer_close(w) || rename(tmp, p))
		cli_die("cannot write '%s'", p);
	sw_writer_free(w);
	sw_reader_free(rd);
	sw_rec_free(rec);
	free(p);
	free(tmp);
}

static void start_(run_ *r)
{
	exp_ *x = &r->x;
	struct stat st;
	if (!stat(r->dir, &st)) {
		DIR *d = opendir(r->dir);
		struct dirent *e;
		int empty = 1;
		while (d && (e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				empty = 0;
		if (d)
			closedir(d);
		if (!empty)
			cli_die("'%s' exists and is not empty (continue a run there with --resume %s)", r->dir, r->dir);
	}
	mkdir_(r->dir);
	static const char *const sub[] = { "samples", "ckpt", "tmp" };
	for (int i = 0; i < 3; i++) {
		char *p = path_(r->dir, "%s", sub[i]);
		mkdir_(p);
		free(p);
	}
	char *cfg = path_(r->dir, "config");
	FILE *f = fopen(cfg, "w");
	if (!f || write_experiment_(x, f) || fclose(f))
		cli_die("cannot write '%s': %s", cfg, strerror(errno));
	free(cfg);
	open_audit_(r);
	create_stores_(r, x->model, 0);
	audit_start_(r, "run_start");

	char why[160];
	char *pool = path_(r->dir, "pool");
	char *av[] = { "sw-pool", "add", pool, x->prompts, NULL };
	if (run_argv_(av, why, sizeof why))
		cli_die("sw-pool add %s %s %s", pool, x->prompts, why);
	free(pool);
	r->iter = 0;
	checkpoint_(r, "start");
	evaluate_(r, 0);
}

static void resume_(run_ *r)
{
	char *state = path_(r->dir, "state");
	char name[256] = "";
	FILE *f = fopen(state, "r");
	if (!f || !fgets(name, sizeof name, f))
		cli_die("'%s' is no run directory sw-run can resume: cannot read '%s'", r->dir, state);
	fclose(f);
	name[strcspn(name, "\n")] = 0;
	char *tmp = path_(r->dir, "tmp");
	mkdir_(tmp);
	free(tmp);
	open_audit_(r);
	char *ck = path_(r->dir, "%s", name), *st = path_(ck, "state.json");
	sw_rec *s = last_record_(st);
	uint64_t wv;
	if (!s || sw_rec_get_u64(s, "weight_version", &wv))
		cli_die("%s: cannot read the checkpoint's weight version", st);
	sw_rec_free(s);
	free(st);
	create_stores_(r, ck, wv);
	restore_(r, name);
	trim_metrics_(r);
	char *halt = path_(r->dir, "HALT");
	unlink(halt);
	free(halt);
	audit_start_(r, "resume");
	free(ck);
	free(state);
}

int main(int argc, char **argv)
{
	const char *arg;
	int c, optind_;
	const char *config = NULL, *resume = NULL;
	struct given_ { int id; const char *arg; } given[128];
	int ngiven = 0;
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		if (c == 'c')
			config = arg;
		else if (c == OPT_RESUME)
			resume = arg;
		else if (ngiven < 128)
			given[ngiven++] = (struct given_){ c, arg };
		else
			cli_usage("too many options");
	}
	if (optind_ < argc)
		cli_usage("unexpected argument '%s'", argv[optind_]);
	if (config && resume)
		cli_usage("--resume continues a run with its own config: give one of -c and --resume");

	static run_ run;
	run_ *r = &run;
	exp_ *x = &r->x;
	x->iters = 10;
	x->batch = 16;
	x->group = 8;
	x->seed = 1;
	x->eval_every = 5;
	x->ckpt_every = 1;
	r->lr_scale = 1;
	r->argc = argc;
	r->argv = argv;
	if (resume) {
		char *cfg = path_(resume, "config");
		read_experiment_(x, cfg);
		free(cfg);
	} else if (config) {
		read_experiment_(x, config);
	}
	for (int i = 0; i < ngiven; i++)
		apply_(x, given[i].id, given[i].arg, NULL);
	if (resume)
		set_str_(&x->out, resume);
	for (int s = 0; s < NSTAGE; s++)
		if (!x->cmd[s])
			x->cmd[s] = xstrdup_(stage_default_[s]);
	if (!x->model)
		cli_usage("no model: give --model DIR (or 'model DIR' in the experiment)");
	if (!x->prompts)
		cli_usage("no prompts: give --prompts FILE (or 'prompts FILE' in the experiment)");
	if (!x->out)
		cli_usage("no run directory: give --out DIR");
	r->dir = x->out;
	if (!(r->mon = sw_monitor_new()))
		cli_die("out of memory");
	for (size_t i = 0; i < x->nmonitor; i++) {
		sw_error err = { 0 };
		if (sw_monitor_set(r->mon, x->monitor[i], &err))
			cli_usage("%s", err.msg);
	}

	/* stores a killed run left behind go first; ours go however this run ends */
	sw_error err = { 0 };
	size_t swept = 0;
	if (sw_store_sweep("sw-run", &swept, &err))
		cli_warn("cannot sweep stale stores: %s", err.msg);
	else if (swept && cli_verbosity >= 0)
		cli_warn("removed %zu weight store%s a killed run left behind", swept, swept == 1 ? "" : "s");
	run_global_ = r;
	atexit(cleanup_);
	signal(SIGINT, on_signal_);
	signal(SIGTERM, on_signal_);
	signal(SIGHUP, on_signal_);
	signal(SIGPIPE, SIG_IGN);

	if (resume)
		resume_(r);
	else
		start_(r);

	for (uint64_t it = r->iter + 1; it <= x->iters; it++) {
		sw_mon_event worst;
		sw_mon_level lv = iterate_(r, it, &worst);
		if (lv == SW_MON_HARD) {
			char why[200];
			snprintf(why, sizeof why, "monitor '%s' at %.4g, past its hard threshold %.4g", worst.name,
			         worst.value, worst.threshold);
			/* weights a NaN went through are no place to resume from: the last checkpoint stays */
			if (strcmp(worst.name, "nonfinite"))
				checkpoint_(r, "halt");
			halt_(r, it, why);
			cli_exit(EXIT_HALT);
		}
		if (lv == SW_MON_DEGRADE) {
			r->lr_scale *= 0.5;
			cli_warn("iteration %llu: monitor '%s' at %.4g degrades the run: learning rate scale now %g",
			         (unsigned long long)it, worst.name, worst.value, r->lr_scale);
		}
		if (it % x->ckpt_every == 0 || it == x->iters)
			checkpoint_(r, "periodic");
	}
	sw_audit_rec *a = audit_new_("run_end");
	audit_field_(sw_audit_rec_int(a, "iter", (int64_t)r->iter));
	audit_field_(sw_audit_rec_int(a, "weight_version", (int64_t)sw_store_version(r->w)));
	audit_(r, a);
	if (cli_verbosity >= 0)
		fprintf(stderr, "sw-run: %llu iterations done; the run is in %s (audit head %s)\n",
		        (unsigned long long)r->iter, r->dir, sw_audit_head(r->audit));
	cli_exit(0);
}
