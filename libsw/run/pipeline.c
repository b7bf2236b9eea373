/*
 * pipeline.c - the stages of an iteration as real processes: each a shell
 * command line, connected by pipes, in one process group.  Each stage's
 * shell dies with its parent (PR_SET_PDEATHSIG), but the commands a shell
 * forks do not: when every stage has ended, what is left of the group is
 * killed and collected (the caller is its subreaper), and when the caller
 * is SIGKILLed its guard (guard.c) kills the group, so nothing of an
 * iteration races the next or a resumed run.  A reaper thread collects each
 * stage as it ends, so each one's time, CPU and memory are its own while
 * the caller blocks reading the last stage's output.
 *
 * The library forks and execs here (as the verifiers' exec pool does) but
 * never prints: a stage's own messages go to the inherited standard error,
 * or through a pipe the caller relays (sw_pipeline_relay_stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "run/run_internal.h"

struct sw_pipeline {
	sw_stage_proc p[SW_NSTAGE];
	int n;
	int out;                        /* the last stage's standard output */
	volatile sig_atomic_t *pgid;    /* the caller's, for its signal handler; may be NULL */
	sw_run_guard *guard;            /* told the group too; may be NULL */
	int relay;                      /* the stages' standard error through a pipe (sw_pipeline_relay_stderr) */
	int err_w, err_r;               /* its ends while the stages run; -1 otherwise */
	pthread_t relayer;
};

void sw_pipeline_relay_stderr(sw_pipeline *pl, int on)
{
	pl->relay = on;
}

/* The relay: what the stages say, on to our standard error as it comes. */
static void *relay_(void *arg)
{
	sw_pipeline *pl = arg;
	char buf[4096];
	for (;;) {
		ssize_t k = read(pl->err_r, buf, sizeof buf);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		(void)sw_fd_write_all(2, buf, (size_t)k, NULL); /* a stderr that fails drops the message, not the relay */
	}
	return NULL;
}

sw_pipeline *sw_pipeline_new(volatile sig_atomic_t *pgid)
{
	sw_pipeline *pl = calloc(1, sizeof *pl);
	if (pl) {
		pl->out = -1;
		pl->err_w = pl->err_r = -1;
		pl->pgid = pgid;
	}
	return pl;
}

void sw_pipeline_free(sw_pipeline *pl)
{
	free(pl);
}

int sw_pipeline_count(const sw_pipeline *pl)
{
	return pl->n;
}

const sw_stage_proc *sw_pipeline_proc(const sw_pipeline *pl, int i)
{
	return i >= 0 && i < pl->n ? &pl->p[i] : NULL;
}

void sw_pipeline_set_guard(sw_pipeline *pl, sw_run_guard *g)
{
	pl->guard = g;
}

static void note_pgid_(sw_pipeline *pl, pid_t pgid)
{
	if (pl->pgid)
		*pl->pgid = pgid;
	sw_run_guard_pgid(pl->guard, pgid);
}

/* In a child: die with the parent (checked, in case it died before the prctl). */
static void die_with_(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
}

static void *reap_(void *arg);

/* A pipeline that could not be started whole: end and collect the stages that were. */
static int unwind_(sw_pipeline *pl, pid_t pgid, int prev, int in_fd, int rc)
{
	if (prev != in_fd)
		close(prev);
	if (pgid)
		kill(-pgid, SIGTERM);
	reap_(pl);
	if (pl->err_w >= 0) { /* the relay never started */
		close(pl->err_w);
		close(pl->err_r);
		pl->err_w = pl->err_r = -1;
	}
	return rc;
}

/* Start the stages as one process group, stdin of the first from in_fd (signals blocked: spawn_). */
static int spawn_group_(sw_pipeline *pl, const int *stages, int n, char *const cmds[], int in_fd,
                        const sigset_t *mask, sw_error *err)
{
	int prev = in_fd;
	pid_t pgid = 0, self = getpid();
	pl->n = 0;
	if (pl->relay) {
		int e[2];
		if (pipe2(e, O_CLOEXEC))
			return sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(errno));
		pl->err_r = e[0], pl->err_w = e[1];
	}
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC))
			return unwind_(pl, pgid, prev, in_fd, sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(errno)));
		sw_stage_proc *p = &pl->p[i];
		memset(p, 0, sizeof *p);
		p->stage = stages[i];
		p->cmd = cmds[stages[i]];
		p->t0 = sw_run_now();
		pid_t pid = fork();
		if (pid < 0) {
			int e = errno;
			close(fds[0]), close(fds[1]);
			return unwind_(pl, pgid, prev, in_fd,
			               sw_fail(err, SW_EIO, "cannot start stage '%s': %s", sw_stage_name(p->stage), strerror(e)));
		}
		if (pid == 0) {
			die_with_(self);
			setpgid(0, pgid);
			signal(SIGPIPE, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGHUP, SIG_DFL);
			pthread_sigmask(SIG_SETMASK, mask, NULL);
			if (dup2(prev, 0) < 0 || dup2(fds[1], 1) < 0 || (pl->err_w >= 0 && dup2(pl->err_w, 2) < 0))
				_exit(127);
			execl("/bin/sh", "sh", "-c", p->cmd, (char *)NULL);
			_exit(127);
		}
		if (!pgid)
			pgid = pid;
		setpgid(pid, pgid);
		p->pid = pid;
		pl->n++;
		if (prev != in_fd)
			close(prev);
		close(fds[1]);
		prev = fds[0];
	}
	note_pgid_(pl, pgid);
	if (pl->err_w >= 0) {
		/* without the relay the stages' first message would kill them (SIGPIPE) */
		int e = pthread_create(&pl->relayer, NULL, relay_, pl);
		if (e)
			return unwind_(pl, pgid, prev, in_fd,
			               sw_fail(err, SW_EIO, "cannot start the thread that relays the stages' messages: %s",
			                       strerror(e)));
		close(pl->err_w);
		pl->err_w = -1;
	}
	pl->out = prev;
	return 0;
}

/*
 * spawn_group_ with every signal blocked until the group is whole and its
 * id noted: a caller's handler that ends the stages (sw-run's, on SIGTERM)
 * then reaches all of them.  Before, a signal in the middle of the forks
 * ended the stages started so far, and the later ones ran on, read their
 * killed neighbours' end of input and said so ("empty input").  The
 * threads the pipeline starts (the relay, the reaper) block every signal
 * too (the mask is inherited), so that a handler runs in the caller's
 * thread, never during these forks.
 */
static int spawn_(sw_pipeline *pl, const int *stages, int n, char *const cmds[], int in_fd, sw_error *err)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = spawn_group_(pl, stages, n, cmds, in_fd, &old, err);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* The relay has seen every stage's last word (or there is none). */
static void relay_end_(sw_pipeline *pl)
{
	if (pl->err_w >= 0)
		close(pl->err_w);
	if (pl->err_r >= 0) {
		pthread_join(pl->relayer, NULL);
		close(pl->err_r);
	}
	pl->err_w = pl->err_r = -1;
}

/*
 * The reaper: waits for the stages one by one as they end.  When every one
 * has been collected, what is left of their group (a command a stage's
 * shell forked and did not wait for) is killed and collected too: the
 * caller is the group's subreaper (sw_run_guard_start), so those come back
 * to it.  So is what a stage started in a group of its own (mpirun puts
 * each rank in one) and that outlived the stage: it came back to the caller
 * too (sw_procs_collect_orphans).  Nothing of an iteration outlives it to
 * write into the next, or the run.
 */
static void *reap_(void *arg)
{
	sw_pipeline *pl = arg;
	pid_t pgid = (pid_t)pl->p[0].pid;
	for (int left = pl->n, swept = 0;;) {
		struct rusage ru;
		int status;
		if (!left && !swept) {
			kill(-pgid, SIGKILL);
			swept = 1;
		}
		pid_t r = wait4(-pgid, &status, 0, &ru);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break; /* ECHILD: nothing left to wait for */
		}
		double t = sw_run_now();
		for (int i = 0; i < pl->n; i++) {
			sw_stage_proc *p = &pl->p[i];
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
	/* what left the group (an MPI launcher's ranks, each in a group of its own) and outlived it */
	sw_procs_collect_orphans();
	note_pgid_(pl, 0);
	return NULL;
}

const sw_stage_proc *sw_pipeline_failed(const sw_pipeline *pl)
{
	const sw_stage_proc *pipe_victim = NULL;
	for (int i = 0; i < pl->n; i++) {
		const sw_stage_proc *p = &pl->p[i];
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

void sw_status_describe(int status, char *buf, size_t n)
{
	if (WIFEXITED(status))
		snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, n, "ended oddly (status 0x%x)", status);
}

int sw_status_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int sw_pipeline_run(sw_pipeline *pl, const int *stages, int n, char *const cmds[SW_NSTAGE], int in_fd,
                    const char *samples, sw_tally *t, sw_error *err)
{
	sw_error e = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 3 };
	char tmp[SW_RUN_PATH_MAX], final[SW_RUN_PATH_MAX];
	const char *last = sw_stage_name(stages[n - 1]);
	int rc = sw_run_path(tmp, sizeof tmp, err, "%s.part", samples);
	if (rc)
		return rc;
	sw_writer *w = sw_writer_open(tmp, &wo, &e);
	if (!w)
		return sw_fail(err, SW_EIO, "cannot write '%s': %s", tmp, e.msg);
	sw_rec *rec = sw_rec_new();
	if (!rec) {
		sw_writer_free(w);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	if ((rc = spawn_(pl, stages, n, cmds, in_fd, err))) {
		sw_writer_free(w);
		sw_rec_free(rec);
		return rc;
	}
	pthread_t reaper;
	sw_reader *rd = sw_reader_fdopen(pl->out, last, &e);
	/* the reaper blocks every signal: a handler runs in this thread */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int te = rd ? pthread_create(&reaper, NULL, reap_, pl) : 0, started = rd && !te;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		rc = rd ? sw_fail(err, SW_EIO, "cannot start a thread: %s", strerror(te))
		        : sw_fail(err, SW_EIO, "cannot read the pipeline: %s", e.msg);
		sw_reader_free(rd);
		unwind_(pl, (pid_t)pl->p[0].pid, pl->out, -1, 0);
		relay_end_(pl);
		sw_writer_free(w);
		sw_rec_free(rec);
		return rc;
	}
	int got;
	while ((got = sw_reader_next(rd, rec)) == 1) {
		if (t)
			sw_tally_add(t, rec);
		if (!rc && sw_writer_put(w, rec))
			rc = sw_fail(err, SW_EIO, "%s: %s", tmp, sw_writer_error(w)->msg);
		if (rc)
			break;
	}
	char msg[400] = "";
	if (got < 0)
		sw_error_str(sw_reader_error(rd), msg, sizeof msg);
	sw_reader_free(rd);
	close(pl->out);
	pl->out = -1;
	pthread_join(reaper, NULL);
	relay_end_(pl);
	sw_rec_free(rec);
	if (sw_writer_close(w) && !rc)
		rc = sw_fail(err, SW_EIO, "%s: %s", tmp, sw_writer_error(w)->msg);
	sw_writer_free(w);
	if (rc)
		return rc;
	const sw_stage_proc *bad = sw_pipeline_failed(pl);
	if (!bad && got < 0)
		return sw_fail(err, SW_EFORMAT, "the output of stage '%s' is not a stream: %s", last, msg);
	/* the samples so far are kept either way; a failed iteration's under their own name */
	if ((rc = sw_run_path(final, sizeof final, err, "%s%s", samples, bad ? ".failed" : "")))
		return rc;
	if (rename(tmp, final))
		return sw_fail(err, SW_EIO, "cannot rename '%s': %s", tmp, strerror(errno));
	return 0;
}

int sw_run_program(char *const argv[], char *why, size_t n)
{
	fflush(NULL);
	pid_t self = getpid(), pid = fork();
	if (pid < 0) {
		snprintf(why, n, "cannot start it: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		die_with_(self);
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
	sw_status_describe(st, why, n);
	return -1;
}

int sw_run_pool(const char *rundir, const char *verb, const char *file, char *why, size_t n)
{
	char pool[SW_RUN_PATH_MAX];
	if (sw_run_path(pool, sizeof pool, NULL, "%s/pool", rundir)) {
		snprintf(why, n, "cannot start it: the run directory's name is too long");
		return -1;
	}
	/* quiet: on a terminal a run prints one line per iteration; the pool's errors still show */
	char *av[] = { "sw-pool", "-q", (char *)verb, pool, (char *)file, NULL };
	return sw_run_program(av, why, n);
}

static int setenv_(const char *name, const char *value, sw_error *err)
{
	if (setenv(name, value, 1))
		return sw_fail(err, SW_ENOMEM, "cannot set %s: %s", name, strerror(errno));
	return 0;
}

int sw_stage_env_set(const sw_stage_env *e, sw_error *err)
{
	char buf[SW_RUN_PATH_MAX];
	int rc = setenv_("SW_WEIGHTS", e->weights, err);
	if (!rc && e->model)
		rc = setenv_("SW_MODEL", e->model, err);
	rc = rc ? rc : setenv_("SW_OPT", e->opt, err);
	if (!rc && e->ref)
		rc = setenv_("SW_REF", e->ref, err);
	else if (!rc)
		unsetenv("SW_REF");
	rc = rc ? rc : setenv_("SW_RUN", e->rundir, err);
	/* one seed per iteration, so a resumed run draws what the original drew */
	const struct { const char *name; uint64_t v; } nums[] = {
		{ "SW_ITER", e->iter },
		{ "SW_SEED", (e->seed * 1000003ull + e->iter) & 0xffffffffull },
		{ "SW_GROUP", e->group },
		{ "SW_BATCH", e->batch },
	};
	for (size_t i = 0; !rc && i < sizeof nums / sizeof *nums; i++) {
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)nums[i].v);
		rc = setenv_(nums[i].name, buf, err);
	}
	static const char *const files[][2] = {
		{ "SW_POOL", "pool" },
		{ "SW_BALANCE_STATS", "tmp/balance-stats.json" },
		{ "SW_TRAIN_METRICS", "tmp/train-metrics.jsonl" },
		{ "SW_RANK_TIMES", "tmp/rank-times.jsonl" },
	};
	for (size_t i = 0; !rc && i < sizeof files / sizeof *files; i++)
		if (!(rc = sw_run_path(buf, sizeof buf, err, "%s/%s", e->rundir, files[i][1])))
			rc = setenv_(files[i][0], buf, err);
	snprintf(buf, sizeof buf, "%.17g", e->lr_scale);
	rc = rc ? rc : setenv_("SW_LR_SCALE", buf, err);
	if (!rc && e->device)
		rc = setenv_("SW_DEVICE", e->device, err);
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)(e->ranks ? e->ranks : 1));
	rc = rc ? rc : setenv_("SW_RANKS", buf, err);
	if (!rc && e->eval)
		rc = setenv_("SW_EVAL", "1", err);
	else if (!rc)
		unsetenv("SW_EVAL");
	/*
	 * Stages share the cores: a thread that spins long waiting for its
	 * team burns the time another stage (or its own team-mate) needs.
	 * Measured on two cores with a neighbour busy: a small training step
	 * took 16 s with libgomp's default spin, 0.4 s passive.  Sleeping at
	 * once costs a wake-up at every op instead: on bench_grpo.sh's shapes
	 * the rollout took 10.1 s passive, 9.1 s spinning 2000 rounds
	 * (GOMP_SPINCOUNT, tens of microseconds) before sleeping; a training
	 * step beside two busy loops 6.7 s passive, 7.5 s so (its runs 6.3 to
	 * 8.5 s either way; bench/RESULTS.md "spin").  So a short spin.  A
	 * user's own setting of either wins.
	 */
	if (!rc && !getenv("OMP_WAIT_POLICY") && setenv("GOMP_SPINCOUNT", "2000", 0))
		rc = sw_fail(err, SW_ENOMEM, "cannot set GOMP_SPINCOUNT: %s", strerror(errno));
	/* the ranks' shared memory and the launcher's session directory in the run's directory for
	 * them (run/stores.c); a user's own setting wins */
	if (!rc && e->mpi_dir && (setenv("OMPI_MCA_btl_vader_backing_directory", e->mpi_dir, 0) ||
	                          setenv("OMPI_MCA_btl_sm_backing_directory", e->mpi_dir, 0) ||
	                          setenv("OMPI_MCA_orte_tmpdir_base", e->mpi_dir, 0) ||
	                          setenv("PRTE_MCA_prte_top_session_dir", e->mpi_dir, 0)))
		rc = sw_fail(err, SW_ENOMEM, "cannot set Open MPI's directories: %s", strerror(errno));
	return rc;
}
