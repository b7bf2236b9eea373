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
 *
 * The pieces are libsw's (sw/run.h): the experiment file, the tally of the
 * samples, the pipeline of stage processes, the stores, the metrics and
 * audit records, the checkpoints.  This program turns options into an
 * experiment, runs the loop over those pieces and says what happened.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

enum {
	OPT_ITERS = 0x100, OPT_EVAL, OPT_EVAL_EVERY, OPT_CKPT_EVERY, OPT_SEED, OPT_REF, OPT_SELECT,
	OPT_SORT, OPT_ROLLOUT, OPT_VERIFY, OPT_BALANCE, OPT_TRAIN, OPT_EVAL_ROLLOUT, OPT_MONITOR,
	OPT_RESUME, OPT_ACCURACY, OPT_KEEP, OPT_DEVICE, OPT_KEEP_CKPT, OPT_SIGN_KEY, OPT_RANKS, OPT_LAUNCHER
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
	{ OPT_KEEP_CKPT, 0, "keep-ckpt", "k", NULL, "keep the newest k checkpoints, the best and the latest (default 0: all)" },
	CLI_OPT_DEVICE(OPT_DEVICE),
	{ OPT_REF, 0, "ref", NULL, NULL, "keep a frozen copy of the start weights as the KL reference, $SW_REF" },
	{ OPT_ACCURACY, 0, "accuracy", "verifier", NULL, "the verifier whose full score counts as correct (default: the first in 'rewards')" },
	{ OPT_SELECT, 0, "select", "cmd", NULL, "the command that selects an iteration's prompts" },
	{ OPT_SORT, 0, "sort", "cmd", NULL, "the sort stage" },
	{ OPT_ROLLOUT, 0, "rollout", "cmd", NULL, "the rollout stage" },
	{ OPT_VERIFY, 0, "verify", "cmd", NULL, "the verify stage (also scores the evaluations)" },
	{ OPT_BALANCE, 0, "balance", "cmd", NULL, "the balance stage" },
	{ OPT_TRAIN, 0, "train", "cmd", NULL, "the train stage" },
	{ OPT_EVAL_ROLLOUT, 0, "eval-rollout", "cmd", NULL, "the generation of an evaluation" },
	{ OPT_MONITOR, 0, "monitor", "name=w,d,h", "@monitors", "set a monitor's warn, degrade and hard thresholds (repeatable)" },
	{ OPT_RANKS, 0, "ranks", "n", NULL, "generate and train as n data-parallel ranks (rollout, eval-rollout, train), $SW_RANKS (default 1)" },
	{ OPT_LAUNCHER, 0, "launcher", "cmd", NULL, "what starts the ranks (default: mpirun -np \"$SW_RANKS\", srun under Slurm)" },
	{ OPT_KEEP, 0, "keep-stores", NULL, NULL, "leave the weight stores in place when the run ends (for inspection)" },
	{ OPT_RESUME, 0, "resume", "dir", "dir", "continue the run in dir after a crash, a failure or a halt" },
	{ OPT_SIGN_KEY, 0, "sign-key", "file", "file", "sign every audit record with this key of sw-audit keygen (default $SW_SIGN_KEY)" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-run", NULL, NULL,
	"Run an experiment: iterations of select, sort, rollout, verify, balance and train.",
	opts, NULL
};

/* ---- the stores, and what a signal handler needs of them -------------------------------- */

/*
 * The only file-scope state: what on_signal_ must reach.  The first signal
 * ends the stages and asks the loop to stop where it is (stop_point_); a
 * second one ends sw-run at once, and its guard (sw_run_guard) then kills
 * what is left of the stages and removes the stores, as after a SIGKILL.
 */
static volatile sig_atomic_t child_pgid_, stop_sig_;

static void on_signal_(int sig)
{
	if (child_pgid_ > 0)
		kill(-child_pgid_, stop_sig_ ? SIGKILL : SIGTERM);
	if (stop_sig_) {
		signal(sig, SIG_DFL);
		raise(sig);
	}
	stop_sig_ = sig;
}

/* ---- the run ------------------------------------------------------------------------------ */

typedef struct run_ {
	sw_experiment x;
	char *dir;                 /* the run directory */
	sw_run_stores s;           /* weights, optimiser state, frozen reference */
	sw_runlog *log;            /* audit.log */
	sw_monitor *mon;
	sw_pipeline *pl, *eval_pl; /* the stages of an iteration, of an evaluation */
	char *cmds[SW_NSTAGE];     /* the stages' command lines, the launcher before the ranked ones */
	sw_run_guard *guard;
	sw_dir_seal *model_seal;   /* the start model's files: checked after each iteration (the stages read it) */
	double t0;                 /* when this process started the loop */
	uint64_t first;            /* the first iteration it ran */
	double lr_scale;           /* halved by each degrade */
	double last_eval_accuracy; /* of an evaluation run after the current iteration, else NAN */
	uint64_t iter;             /* the last iteration completed */
	int argc;
	char **argv;
} run_;

/* rc 0 (an audit record written, a file saved, ...), or the end of the run with err's message. */
static void must_(int rc, const sw_error *err)
{
	if (rc)
		cli_die("%s", err->msg);
}

static sw_rec *rec_new_(void)
{
	sw_rec *m = sw_rec_new();
	return m ? m : (cli_die("out of memory"), NULL);
}

/* Append m, built with result rc, to metrics.jsonl; m is freed. */
static void metrics_(run_ *r, sw_rec *m, int rc)
{
	sw_error err = { 0 };
	char *p = cli_path(r->dir, "metrics.jsonl");
	if (rc)
		cli_die("cannot build a metrics record: %s", sw_strerror(rc));
	must_(sw_metrics_append(p, m, &err), &err);
	free(p);
	sw_rec_free(m);
}

/* What every stage finds in its environment for iteration it. */
static void stage_env_(run_ *r, uint64_t it, int eval)
{
	sw_error err = { 0 };
	sw_stage_env e = { r->s.spec, r->s.opt_spec, r->s.ref ? r->s.ref_spec : NULL, r->dir, it, r->x.seed,
	                   r->x.group, r->x.batch, r->lr_scale, r->x.device, r->x.model, r->x.ranks,
	                   r->s.mpi_dir[0] ? r->s.mpi_dir : NULL, eval };
	must_(sw_stage_env_set(&e, &err), &err);
}

static void cleanup_(void);

/* A signal asked the run to stop: say how to go on, record it, remove the stores, end as the signal says. */
static void stop_point_(run_ *r, uint64_t it)
{
	int sig = stop_sig_;
	sw_error err = { 0 };
	char name[256];
	if (!sig)
		return;
	if (r->log && sw_runlog_event(r->log, "interrupted", it, "signal", sigabbrev_np(sig), &err))
		cli_warn("%s", err.msg);
	if (!sw_checkpoint_latest(r->dir, name, sizeof name, NULL))
		cli_warn("interrupted (%s) in iteration %llu; the run goes on from %s/%s with: sw-run --resume %s",
		         strsignal(sig), (unsigned long long)it, r->dir, name, r->dir);
	else
		cli_warn("interrupted (%s) before the run's first checkpoint; start it again with the same command",
		         strsignal(sig));
	cleanup_();
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

/* Run stages over in_fd into samples; the stage that failed, or NULL. */
static const sw_stage_proc *run_stages_(run_ *r, sw_pipeline *pl, const int *stages, int n, int in_fd, const char *samples,
                                         sw_tally *t, uint64_t it)
{
	sw_error err = { 0 };
	int rc = sw_pipeline_run(pl, stages, n, r->cmds, in_fd, samples, t, &err);
	stop_point_(r, it);
	if (rc)
		cli_die("%s", err.msg);
	return sw_pipeline_failed(pl);
}

static noreturn void stage_failed_(run_ *r, const sw_pipeline *pl, const sw_stage_proc *bad, uint64_t it, const char *what)
{
	char why[160];
	sw_error err = { 0 };
	sw_status_describe(bad->status, why, sizeof why);
	must_(sw_runlog_stages(r->log, pl, it, what, &err), &err);
	must_(sw_runlog_failure(r->log, it, bad, why, &err), &err);
	cli_die("iteration %llu: stage '%s' %s (%s); the samples so far are in %s/samples, the weights are "
	        "those of the last checkpoint", (unsigned long long)it, sw_stage_name(bad->stage), why, bad->cmd, r->dir);
}

/* An evaluation: greedy generation of the held-out prompts, scored by the verify stage. */
static void evaluate_(run_ *r, uint64_t it)
{
	static const int stages[] = { SW_STAGE_EVAL_ROLLOUT, SW_STAGE_VERIFY };
	sw_error err = { 0 };
	sw_tally t;
	if (!r->x.eval)
		return;
	sw_tally_init(&t, r->x.accuracy);
	int fd = open(r->x.eval, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		cli_die("cannot open '%s': %s", r->x.eval, strerror(errno));
	stage_env_(r, it, 1);
	double t0 = cli_now();
	char *samples = cli_path(r->dir, "samples/eval-%04llu.msgpack.zst", (unsigned long long)it);
	sw_pipeline *pl = r->eval_pl;
	const sw_stage_proc *bad = run_stages_(r, pl, stages, 2, fd, samples, &t, it);
	close(fd);
	if (bad)
		stage_failed_(r, pl, bad, it, "eval");
	must_(sw_runlog_stages(r->log, pl, it, "eval", &err), &err);
	sw_rec *m = rec_new_();
	metrics_(r, m, sw_metrics_eval(m, it, &t, cli_now() - t0));

	must_(sw_runlog_eval(r->log, it, &t, samples, &err), &err);
	free(samples);
	double acc = sw_tally_accuracy(&t), viol = sw_ratio((double)t.violations, (double)t.n);
	if (cli_progress_on())
		fprintf(stderr, "sw-run: eval after iteration %llu: accuracy %.1f%%, violation rate %.1f%% (%llu prompts)\n",
		        (unsigned long long)it, 100 * acc, 100 * viol, (unsigned long long)t.n);
	/* the monitors see the held-out accuracy with the iteration it follows */
	r->last_eval_accuracy = acc;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

static void checkpoint_(run_ *r, const char *why)
{
	sw_error err = { 0 };
	double t0 = cli_now();
	char name[64];
	sw_ckpt_state st = { .iter = r->iter, .lr_scale = r->lr_scale };
	sw_monitor_get_history(r->mon, &st.history);
	sw_digests *dg = NULL; /* the large files' digests as written: the record need not read them back */
	if (sw_checkpoint_save(r->dir, r->x.model, r->s.w, sw_run_stores_opt(&r->s), &st, name, sizeof name, &dg, &err))
		cli_die("%s", err.msg);
	must_(sw_runlog_checkpoint(r->log, r->iter, why, sw_store_version(r->s.w), name, cli_now() - t0, dg, &err), &err);
	sw_digests_free(dg);
	/* the resume point only once the log vouches for it: resuming checks the checkpoint against its record */
	must_(sw_checkpoint_mark(r->dir, name, &err), &err);
	must_(sw_checkpoint_prune(r->dir, r->x.keep_ckpt, r->log, r->iter, &err), &err);
}

static void halt_(run_ *r, uint64_t it, const char *reason)
{
	sw_error err = { 0 };
	must_(sw_rundir_halt(r->dir, it, reason, &err), &err);
	must_(sw_runlog_event(r->log, "halt", it, "reason", reason, &err), &err);
	cli_warn("halted: %s (see %s/HALT; continue with sw-run --resume %s)", reason, r->dir, r->dir);
}

/* ---- one iteration ----------------------------------------------------------------------- */

/* A stage failed: a monitor that would halt on what was verified speaks first, it says why. */
static noreturn void iteration_failed_(run_ *r, uint64_t it, const sw_tally *t, const sw_stage_proc *bad)
{
	sw_mon_obs ob = sw_tally_obs(t);
	sw_mon_event ev[8];
	size_t nev;
	const char *stage = sw_stage_name(bad->stage);
	if (sw_monitor_check(r->mon, &ob, ev, 8, &nev) == SW_MON_HARD) {
		char why[300];
		sw_rec *m = rec_new_();
		metrics_(r, m, sw_metrics_halted(m, it, t, &ob, ev[0].name, stage));
		sw_error err = { 0 };
		must_(sw_runlog_stages(r->log, r->pl, it, "iteration", &err), &err);
		snprintf(why, sizeof why, "monitor '%s' at %.4g, past its hard threshold %.4g (and stage '%s' failed)",
		         ev[0].name, ev[0].value, ev[0].threshold, stage);
		halt_(r, it, why);
		cli_exit(EXIT_HALT);
	}
	stage_failed_(r, r->pl, bad, it, "iteration");
}

/* Returns the worst monitor level of the iteration, and its worst event in *worst. */
static sw_mon_level iterate_(run_ *r, uint64_t it, sw_mon_event *worst)
{
	static const int stages[] = { SW_STAGE_SELECT, SW_STAGE_SORT, SW_STAGE_ROLLOUT, SW_STAGE_VERIFY,
	                              SW_STAGE_TAP, SW_STAGE_BALANCE, SW_STAGE_TRAIN };
	sw_tally t;
	sw_error err = { 0 };
	sw_tally_init(&t, r->x.accuracy);
	stage_env_(r, it, 0);
	char tap[4200], warn[600] = "";
	must_(sw_run_scratch_reset(r->dir, tap, sizeof tap, &err), &err);
	uint64_t v0 = sw_store_version(r->s.w);
	double t0 = cli_now();
	char *samples = cli_path(r->dir, "samples/iter-%04llu.msgpack.zst", (unsigned long long)it);
	char *trained = cli_path(r->dir, "samples/iter-%04llu.train.msgpack.zst", (unsigned long long)it);
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* the figures come from the tap; the trainer's pass-through is only kept */
	const sw_stage_proc *bad = run_stages_(r, r->pl, stages, 7, devnull, trained, NULL, it);
	close(devnull);
	double wall = cli_now() - t0;
	must_(sw_tally_file(&t, tap, samples, bad != NULL, &err), &err);
	unlink(tap);
	if (bad)
		iteration_failed_(r, it, &t, bad);

	/* the pool learns which prompts still teach something */
	double tp = cli_now();
	char why[160];
	if (sw_run_pool(r->dir, "update", samples, why, sizeof why) && (stop_point_(r, it), 1))
		cli_die("iteration %llu: sw-pool update %s/pool %s %s", (unsigned long long)it, r->dir, samples, why);
	tp = cli_now() - tp;
	r->iter = it;

	/* figures; an evaluation due after this iteration runs before the monitors decide */
	double tm0 = cli_now();
	sw_rec *train, *bal, *ranks = sw_run_rank_times(r->dir);
	if (sw_run_stage_records(r->dir, &train, &bal, warn, sizeof warn))
		cli_warn("%s (its figures are left out)", warn);
	sw_mon_obs o = sw_tally_obs(&t);
	sw_tally_train_obs(&o, train);
	r->last_eval_accuracy = NAN;
	double te = cli_now();
	if (r->x.eval && (it % r->x.eval_every == 0 || it == r->x.iters))
		evaluate_(r, it);
	te = cli_now() - te;
	o.eval_accuracy = r->last_eval_accuracy;
	sw_mon_event ev[8];
	size_t nev;
	sw_mon_level lv = sw_monitor_check(r->mon, &o, ev, 8, &nev);
	if (nev > 8)
		nev = 8;
	if (nev)
		*worst = ev[0];
	sw_iter_figures f = {
		.iter = it, .tally = &t, .obs = &o, .train = train, .balance = bal, .pl = r->pl,
		.pool_update_s = tp, .wall_s = wall,
		.eval_s = r->x.eval && !isnan(r->last_eval_accuracy) ? te : NAN,
		.monitor_s = t.secs + (cli_now() - tm0) - te,
		.weight_version = sw_store_version(r->s.w), .lr_scale = r->lr_scale, .ev = ev, .nev = nev, .ranks = ranks,
	};
	must_(sw_dir_seal_check(r->model_seal, &err), &err); /* the start model the stages read, as recorded */
	sw_rec *m = rec_new_();
	metrics_(r, m, sw_metrics_iteration(m, &f));

	/* the audit trail of the iteration */
	must_(sw_runlog_stages(r->log, r->pl, it, "iteration", &err), &err);
	must_(sw_runlog_iteration(r->log, it, samples, v0, r->s.w, ev, nev, &err), &err);

	if (cli_progress_on()) {
		char line[1024];
		double el = cli_now() - r->t0;
		sw_progress pr = { it, r->x.iters, &t, &o, wall, el, el / (double)(it - r->first + 1) * (double)(r->x.iters - it), ev, nev };
		sw_run_progress_line(line, sizeof line, &pr);
		cli_note("%s", line);
	}
	sw_rec_free(train), sw_rec_free(bal), sw_rec_free(ranks), free(samples), free(trained);

	for (size_t i = 0; i < nev; i++)
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
	sw_run_stores_release(&r->s, r->x.keep);
	sw_runlog_close(r->log);
	r->log = NULL;
	sw_run_guard_free(r->guard); /* it finds nothing left to do */
	r->guard = NULL;
}

/* The stores, from iteration from (start: a new run); a disk too small for the checkpoints to come said, not refused */
static void create_stores_(run_ *r, const char *weights_from, uint64_t version, uint64_t from, int start)
{
	sw_error err = { 0 };
	char why[400];
	if (sw_checkpoint_room(&r->x, r->dir, from, start, why, sizeof why))
		cli_warn("%s", why);
	must_(sw_run_stores_make(&r->s, r->guard, &r->x, weights_from, version, &err), &err);
}

static void audit_start_(run_ *r, const char *event, const char *ckpt, const char *ckpt_digest, const char *model_digest)
{
	sw_error err = { 0 };
	sw_run_start st = { r->argc, r->argv, r->x.model, r->s.spec, r->iter, r->mon, ckpt, ckpt_digest, model_digest };
	must_(sw_runlog_start(r->log, event, &st, &err), &err);
}

/* The run directory ours alone (sw_rundir_lock); on a file system without locks, said and not refused. */
static int lock_(run_ *r, int create, sw_error *err)
{
	int locked, rc = sw_rundir_lock(r->dir, create, &locked, err);
	if (!rc && !locked)
		cli_warn("%s", err->msg);
	return rc;
}

static void start_(run_ *r)
{
	sw_error err = { 0 };
	/* the directory locked before it is looked at: a start beside a live run must not empty it */
	if (sw_experiment_inputs(&r->x, &err) || lock_(r, 1, &err) || sw_rundir_create(r->dir, &err))
		cli_die("%s", err.msg);
	char *cfg = cli_path(r->dir, "config");
	if (sw_experiment_write(&r->x, cfg, &err))
		cli_die("cannot write '%s': %s", cfg, err.sys_errno ? strerror(err.sys_errno) : err.msg);
	free(cfg);
	if (!(r->log = sw_runlog_open(r->dir, &err)))
		cli_die("%s", err.msg);
	cli_die_hint("the run has not started: the same command starts it again");
	/* the start model's digest for the start record, taken while the stores load it; sealed before either
	 * reads it, so that what the stores hold is what was digested */
	sw_dir_seal *ms = r->model_seal = sw_dir_seal_take(r->x.model, &err);
	sw_digest_job *dj = ms ? sw_digest_dir_begin(r->x.model, &err) : NULL;
	char model_digest[SW_DIGEST_HEX];
	if (!dj)
		cli_die("%s: %s", r->x.model, err.msg);
	create_stores_(r, r->x.model, 0, 0, 1);
	if (sw_digest_dir_end(dj, model_digest, &err))
		cli_die("%s: %s", r->x.model, err.msg);
	must_(sw_dir_seal_check(ms, &err), &err);
	stop_point_(r, 0);
	audit_start_(r, "run_start", NULL, NULL, model_digest);

	char why[160];
	if (sw_run_pool(r->dir, "add", r->x.prompts, why, sizeof why) && (stop_point_(r, 0), 1))
		cli_die("sw-pool add %s/pool %s %s", r->dir, r->x.prompts, why);
	r->iter = 0;
	checkpoint_(r, "start");
	cli_die_hint("continue with sw-run --resume %s", r->dir); /* a checkpoint to go on from */
	evaluate_(r, 0);
}

/* Put the weights, the optimiser state, the pool and the loop's state back as the latest checkpoint left them. */
static void resume_(run_ *r)
{
	sw_error err = { 0 }, se = { 0 };
	static sw_ckpt_point ck;
	int done; /* the options given with --resume become the run's config first */
	sw_digest_job *dj = NULL; /* the start model's digest, taken while the checkpoint's is */
	sw_dir_seal *ms = r->model_seal = sw_dir_seal_take(r->x.model, &se); /* before it is read, as the checkpoint */
	if (lock_(r, 0, &err) || !(r->log = sw_runlog_open(r->dir, &err)) ||
	    !(dj = sw_digest_dir_begin(r->x.model, &err)) || sw_checkpoint_resume_point(r->dir, &ck, &err) ||
	    sw_experiment_resume(&r->x, r->dir, &ck, dj, &done, &err))
		cli_die("%s", err.msg); /* (a job not ended: its thread ends with the process) */
	if (done) { /* nothing touched */
		if (cli_verbosity >= 0)
			cli_note("the run in %s has done its %llu iterations and ended: nothing to do (more with --iters)",
			         r->dir, (unsigned long long)ck.st.iter);
		cli_exit(0);
	}
	if (!ms) /* what the digest could read, the seal could not: the directory changed meanwhile */
		cli_die("the model the run started from: %s", se.msg);
	create_stores_(r, ck.dir, ck.st.weight_version, ck.st.iter, 0);
	r->iter = ck.st.iter;
	r->lr_scale = ck.st.lr_scale;
	sw_monitor_set_history(r->mon, &ck.st.history);
	sw_run_stores_opt(&r->s);
	if (sw_checkpoint_restore(ck.dir, r->dir, &ck.st, r->s.w, &r->s.opt, r->s.opt_spec, &err) ||
	    sw_checkpoint_loaded(&ck, &err) || sw_dir_seal_check(ms, &err) || sw_rundir_resume(r->dir, r->iter, &err))
		cli_die("%s", err.msg);
	audit_start_(r, "resume", ck.name, ck.digest, ck.model_digest);
	cli_die_hint("continue with sw-run --resume %s", r->dir); /* a checkpoint to go on from */
	/* killed during the evaluation before the first iteration: it is what comes next */
	char *metrics = cli_path(r->dir, "metrics.jsonl");
	if (!r->iter && !sw_metrics_has_eval(metrics, 0))
		evaluate_(r, 0);
	free(metrics);
}

int main(int argc, char **argv)
{
	const char *arg, *config = NULL, *resume = NULL;
	int c, optind_, ngiven = 0;
	struct given_ { const char *name, *arg; } given[128];
	sw_error err = { 0 };
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		const cli_opt *o = opts;
		while (o->id && o->id != c)
			o++;
		if (c == 'c')
			config = arg;
		else if (c == OPT_RESUME)
			resume = arg;
		else if (c == OPT_SIGN_KEY) {
			if (sw_audit_sign_env(arg, &err))
				cli_die("%s", err.msg);
		} else if (ngiven < 128)
			given[ngiven++] = (struct given_){ o->name, arg };
		else
			cli_usage("too many options");
	}
	if (optind_ < argc)
		cli_usage("unexpected argument '%s'", argv[optind_]);
	if (config && resume)
		cli_usage("--resume continues a run with its own config: give one of -c and --resume");

	/* the experiment: the file (a resumed run's own), then the options over it */
	static run_ run;
	run_ *r = &run;
	sw_experiment *x = &r->x;
	sw_experiment_init(x);
	r->lr_scale = 1;
	r->argc = argc, r->argv = argv;
	if (resume && sw_rundir_check_resume(resume, &err))
		cli_die("%s", err.msg);
	char *cfg = resume ? cli_path(resume, "config") : config ? cli_strdup(config) : NULL;
	int rc = cfg ? sw_experiment_read(x, cfg, &err) : 0;
	for (int i = 0; !rc && i < ngiven; i++)
		rc = (resume ? sw_experiment_set_resumed : sw_experiment_set)(x, given[i].name, given[i].arg, &err);
	if (!rc && resume)
		rc = sw_experiment_set(x, "out", resume, &err);
	if (!rc && !x->device) /* the config records the device the stages compute on */
		rc = sw_experiment_set(x, "device", sw_backend_name(cli_device(NULL)), &err);
	rc = rc ? rc : sw_experiment_check(x, &err);
	rc = rc ? rc : sw_experiment_stage_cmds(x, r->cmds, &err);
	rc = rc ? rc : sw_experiment_enter(x, &err); /* where the run started: a resumed one goes there first */
	if (rc == SW_EINVAL)
		cli_usage("%s", err.msg);
	if (rc)
		cli_die("%s", err.msg);
	free(cfg);
	r->dir = x->out;
	if (!(r->mon = sw_monitor_new()) || !(r->pl = sw_pipeline_new(&child_pgid_)) ||
	    !(r->eval_pl = sw_pipeline_new(&child_pgid_)))
		cli_die("out of memory");
	for (size_t i = 0; i < x->nmonitor; i++)
		if (sw_monitor_set(r->mon, x->monitor[i], &err))
			cli_usage("%s", err.msg);

	/* stores a killed run left behind go first; ours go however this run ends */
	size_t swept = 0;
	if (sw_store_sweep("sw-run", &swept, &err))
		cli_warn("cannot sweep stale stores: %s", err.msg);
	else if (swept && cli_verbosity >= 0)
		cli_warn("removed %zu weight store%s a killed run left behind", swept, swept == 1 ? "" : "s");
	if (!(r->guard = sw_run_guard_start(&err)))
		cli_die("%s", err.msg);
	sw_pipeline_set_guard(r->pl, r->guard);
	sw_pipeline_set_guard(r->eval_pl, r->guard);
	/* on a terminal, the run's progress; the stages' own messages still come through */
	sw_pipeline_relay_stderr(r->pl, isatty(2));
	sw_pipeline_relay_stderr(r->eval_pl, isatty(2));
	run_global_ = r;
	atexit(cleanup_);
	for (int i = 0, sigs[] = { SIGINT, SIGTERM, SIGHUP }; i < 3; i++)
		signal(sigs[i], on_signal_);
	signal(SIGPIPE, SIG_IGN);

	if (resume)
		resume_(r);
	else
		start_(r);
	r->t0 = cli_now();
	r->first = r->iter + 1;

	for (uint64_t it = r->iter + 1; it <= x->iters; it++) {
		sw_mon_event worst;
		stop_point_(r, it);
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
		if (sw_checkpoint_due(x, it))
			checkpoint_(r, "periodic");
	}
	must_(sw_runlog_end(r->log, r->iter, sw_store_version(r->s.w), &err), &err);
	if (cli_verbosity >= 0)
		cli_note("%llu iterations done; the run is in %s (audit head %s)",
		         (unsigned long long)r->iter, r->dir, sw_runlog_head(r->log));
	cli_exit(0);
}
