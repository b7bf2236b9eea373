/*
 * sw/run.h - the pieces of a training run's loop (sw-run(1)): the
 * experiment file, the tally of an iteration's samples and what the
 * monitors see of it, the pipeline of stage processes, the metrics
 * records, the run directory and its checkpoints.
 *
 * A run directory holds config (the resolved experiment), pool, state (the
 * name of the latest whole checkpoint), metrics.jsonl, audit.log, samples/,
 * ckpt/iter-NNNN/ and tmp/; HALT when a monitor stopped the run.  A
 * checkpoint is a model directory (config.json, model.safetensors, the
 * start model's tokenizer files) with the trainer's state in sw-train's
 * format (trainer_state.json, optimizer.bin: sw_trainer_state_export), plus
 * pool and state.json (the loop's own state).
 *
 * Nothing here prints or exits: errors come back as SW_E* codes with a
 * message in sw_error, written to be printed after "PROG: ".
 *
 * Ownership: an experiment owns its strings (sw_experiment_release frees
 * them); a pipeline is the caller's to sw_pipeline_free (NULL is a no-op)
 * and the stage records it hands out live as long as it; records built
 * here are the caller's.
 */
#ifndef SW_RUN_H
#define SW_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "monitor.h"
#include "record.h"
#include "store.h"
#include "audit.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/* ---- the experiment ---------------------------------------------------------------- */

/* The stages, in the order of sw-run's options; the tap (a copy of the verified samples) is not replaceable. */
enum {
	SW_STAGE_SELECT, SW_STAGE_SORT, SW_STAGE_ROLLOUT, SW_STAGE_VERIFY, SW_STAGE_BALANCE, SW_STAGE_TRAIN,
	SW_STAGE_EVAL_ROLLOUT, SW_STAGE_TAP, SW_NSTAGE
};
/* "select", "sort", ..., "eval-rollout", "tap"; NULL out of range. */
const char *sw_stage_name(int stage);

typedef struct sw_experiment {
	char *model, *prompts, *out, *eval, *accuracy;   /* NULL: not given */
	char *device;                                    /* the stages' SW_DEVICE ("cpu", "guard"); NULL: not given */
	uint64_t iters, batch, group, seed, eval_every, ckpt_every;
	int ref, keep;
	uint64_t keep_ckpt;                              /* checkpoints kept besides the best; 0: every one */
	char *workdir;                                   /* where the run started; stages run there */
	char *cmd[SW_NSTAGE];                            /* NULL until given or sw_experiment_check */
	uint64_t ranks;                                  /* rollout as this many ranks (1: one process) */
	char *launcher;                                  /* what starts them; NULL: mpirun, or srun under Slurm */
	char **monitor;                                  /* "NAME=W,D,H" specs in the order given */
	size_t nmonitor;
} sw_experiment;

/* The defaults of sw-run(1): 10 iterations of 16 prompts, 8 responses each, seed 1, ... */
void sw_experiment_init(sw_experiment *x);
void sw_experiment_release(sw_experiment *x);

/*
 * One setting: name is one of sw-run's long options that an experiment may
 * hold ("iters", "rollout", "ref", ...), value its argument (NULL or "" for
 * a flag).  SW_EINVAL with a message for an unknown name, a bad number, an
 * empty command or a monitor spec sw_monitor_set refuses.
 */
int sw_experiment_set(sw_experiment *x, const char *name, const char *value, sw_error *err);
/*
 * The same, for an option given with --resume: the model, the prompts and
 * the run directory are the run's own once it started (its weights come
 * from its checkpoint, its prompts from its pool), and are SW_EINVAL.
 */
int sw_experiment_set_resumed(sw_experiment *x, const char *name, const char *value, sw_error *err);

/*
 * Read an experiment file: "NAME VALUE" a line (NAME with or without its
 * dashes, VALUE the rest of the line, a command keeps its spaces and
 * quotes), a flag alone, '#' starts a comment line.  A setting that is
 * wrong is SW_EINVAL naming "PATH: line N" (a bad number names the
 * option too); a file that cannot be read is SW_EIO.
 */
int sw_experiment_read(sw_experiment *x, const char *path, sw_error *err);

/* Fill in the default stage commands, then check that model, prompts and the run directory are there. */
int sw_experiment_check(sw_experiment *x, sw_error *err);

/*
 * Check what the run reads before anything is made: the model is a model
 * directory, the prompts (and the held-out prompts) are streams of records
 * each with a prompt; an error names the file and the line (or record).
 */
int sw_experiment_inputs(const sw_experiment *x, sw_error *err);

/*
 * Enter the experiment's working directory: where it started, so that its
 * relative paths and commands mean what they meant (a resumed run may be
 * started from anywhere); the run directory, if relative, is taken from
 * the caller's directory first.  No workdir yet: the current one is it.
 */
int sw_experiment_enter(sw_experiment *x, sw_error *err);

/*
 * The command line each stage runs: the experiment's, and with more than
 * one rank the launcher before those of the rollout and eval-rollout
 * stages: x->launcher, else `srun -n "$SW_RANKS" ...` inside a Slurm
 * allocation (SLURM_JOB_ID set), else `mpirun -np "$SW_RANKS"`.  (The train
 * stage stays one process: sw-train trains a store only as one.)
 * cmds[s] are malloc'd (sw_experiment_stage_cmds_free).
 */
int sw_experiment_stage_cmds(const sw_experiment *x, char *cmds[], sw_error *err);
void sw_experiment_stage_cmds_free(char *cmds[]);

/* Write the resolved experiment in the file format, atomically, so that `sw-run -c PATH` repeats it. */
int sw_experiment_write(const sw_experiment *x, const char *path, sw_error *err);

/* ---- the tally of an iteration's samples ------------------------------------------------ */

#define SW_TALLY_MAX_COMP 16

typedef struct sw_tally {
	uint64_t n;                     /* samples */
	uint64_t rewarded;              /* with a finite reward */
	uint64_t violations;            /* with a non-empty violations array */
	uint64_t errors;                /* with a verifier_error */
	uint64_t acc_n, correct;        /* scored by the accuracy verifier, and of those its full score */
	uint64_t prompt_tokens, response_tokens;
	uint64_t nonfinite;             /* NaN or Inf rewards and verifier scores */
	double reward_sum;
	struct { char name[64]; double sum, sumsq; uint64_t n; } comp[SW_TALLY_MAX_COMP]; /* per verifier */
	int ncomp;
	char acc[64];                   /* the verifier whose full score is "correct" */
	double secs;                    /* time spent tallying: part of the monitoring overhead */
} sw_tally;

/* accuracy: the verifier that counts as correct; NULL: the first one the samples show. */
void sw_tally_init(sw_tally *t, const char *accuracy);
void sw_tally_add(sw_tally *t, sw_rec *sample);

/* a / b, or NAN when b is not positive (a figure with nothing to measure). */
double sw_ratio(double a, double b);
double sw_tally_accuracy(const sw_tally *t);
/*
 * The largest share of one verifier in the reward's spread: each
 * verifier's variance over the samples, over their sum; NAN when fewer
 * than two verifiers vary.
 */
double sw_tally_dominance(const sw_tally *t);
/* What the monitors see of the samples; kl, entropy and eval_accuracy are NAN. */
sw_mon_obs sw_tally_obs(const sw_tally *t);
/* Add the trainer's figures (its last metrics record, NULL: none): kl, entropy, and non-finite numbers. */
void sw_tally_train_obs(sw_mon_obs *o, sw_rec *train);

/*
 * Tally the samples of the file tap and copy them to samples (zstd
 * msgpack), or to samples.failed when a stage failed (failed set): then a
 * missing or cut tap is no error, what was whole is kept.
 */
int sw_tally_file(sw_tally *t, const char *tap, const char *samples, int failed, sw_error *err);

/* ---- the pipeline of stage processes ------------------------------------------------------ */

/* One stage process of a pipeline. */
typedef struct sw_stage_proc {
	int stage;              /* SW_STAGE_* */
	const char *cmd;        /* its shell command line */
	long pid;
	double t0, t1;          /* started, ended (monotonic seconds) */
	double cpu;             /* user + system seconds, its children included */
	double rss_mb;          /* peak resident memory of its largest process, MB */
	int status;             /* wait status */
	int done;
} sw_stage_proc;

typedef struct sw_pipeline sw_pipeline;

/*
 * A pipeline.  While its stages run, their process group is kept in
 * *pgid (may be NULL), 0 otherwise, so that a signal handler can end them.
 */
sw_pipeline *sw_pipeline_new(volatile sig_atomic_t *pgid);
void sw_pipeline_free(sw_pipeline *pl);

/*
 * Run the stages (each cmds[stages[i]] under /bin/sh) connected by pipes,
 * the first reading in_fd, as one process group; every stage dies with the
 * caller (PR_SET_PDEATHSIG), and once every stage has ended, whatever else
 * is left of the group is killed and collected (with a guard started, the
 * caller is its subreaper).  What the last stage prints is written to
 * samples.part (zstd msgpack) and tallied into t (NULL: not), then renamed
 * to samples, or samples.failed when a stage failed.  0 when the pipeline
 * ran (sw_pipeline_failed then says whether a stage failed); an error
 * when its output could not be kept or was no stream.
 */
int sw_pipeline_run(sw_pipeline *pl, const int *stages, int n, char *const cmds[SW_NSTAGE], int in_fd,
                    const char *samples, sw_tally *t, sw_error *err);
int sw_pipeline_count(const sw_pipeline *pl);
const sw_stage_proc *sw_pipeline_proc(const sw_pipeline *pl, int i);
/* The stage that made the last run fail, or NULL; a stage killed by SIGPIPE only saw a later one go first. */
const sw_stage_proc *sw_pipeline_failed(const sw_pipeline *pl);

/*
 * The guard of a run: a process that outlives the run by moments and, once
 * the run has ended however it ended (SIGKILL included), kills what is left
 * of the stages' process group, waits for it to be gone, then removes the
 * stores it was told of.  Starting it also makes the caller the subreaper
 * of its descendants, so that a pipeline collects the commands its stages'
 * shells forked.  The calls after start are async-signal-safe.
 */
typedef struct sw_run_guard sw_run_guard;
sw_run_guard *sw_run_guard_start(sw_error *err);
/* A store to remove at the end (its spec, shm:NAME); sw_run_guard_keep: remove none. */
void sw_run_guard_store(sw_run_guard *g, const char *spec);
void sw_run_guard_keep(sw_run_guard *g);
/* A directory to remove at the end, with what is in it (kept by no sw_run_guard_keep). */
void sw_run_guard_dir(sw_run_guard *g, const char *path);
/* The process group of the stages running now; 0: none. */
void sw_run_guard_pgid(sw_run_guard *g, long pgid);
/* Close the caller's end (the guard then does its work and exits); NULL is a no-op. */
void sw_run_guard_free(sw_run_guard *g);
/*
 * on: the stages' standard error goes through a pipe, relayed to ours as it
 * comes: their messages still show, but they see no terminal, so a
 * terminal shows the run's own progress and not every stage's.
 */
void sw_pipeline_relay_stderr(sw_pipeline *pl, int on);
/* Tell g the group of each run of the pipeline (NULL: none). */
void sw_pipeline_set_guard(sw_pipeline *pl, sw_run_guard *g);

/* What every stage finds in its environment for an iteration (sw-run(1), ENVIRONMENT). */
typedef struct sw_stage_env {
	const char *weights, *opt;      /* the stores' specs */
	const char *ref;                /* the reference store's, NULL: none */
	const char *rundir;
	uint64_t iter, seed, group, batch; /* seed: the run's; SW_SEED is the iteration's own */
	double lr_scale;
	const char *device;             /* SW_DEVICE; NULL: as inherited */
	const char *model;              /* SW_MODEL: the run's model directory, for its tokenizer */
	uint64_t ranks;                 /* SW_RANKS: data-parallel ranks of the rollout */
	const char *mpi_dir;            /* where Open MPI's ranks keep their shared memory; NULL: its own */
	int eval;                       /* SW_EVAL=1: the stages of an evaluation (unset for an iteration's) */
} sw_stage_env;
/* Set it in this process's environment, which the stages inherit (and
 * GOMP_SPINCOUNT=2000 where neither it nor OMP_WAIT_POLICY is set; mpi_dir as
 * OMPI_MCA_btl_vader_backing_directory and OMPI_MCA_btl_sm_backing_directory,
 * Open MPI 4's name and 5's, each where it is not set). */
int sw_stage_env_set(const sw_stage_env *e, sw_error *err);

/* "exited with status 4", "was killed by signal 6 (Aborted)", ... */
void sw_status_describe(int status, char *buf, size_t n);
/* An exit code for a wait status: the status, or 128 + the signal. */
int sw_status_code(int status);

/*
 * Run a program to its end without a shell (paths pass as they are); it
 * dies with the caller.  0 when it succeeded, else -1 and what happened in why.
 */
int sw_run_program(char *const argv[], char *why, size_t n);
/* The run's prompt pool between iterations: sw-pool -q VERB RUNDIR/pool FILE, as sw_run_program. */
int sw_run_pool(const char *rundir, const char *verb, const char *file, char *why, size_t n);

/* ---- metrics records ------------------------------------------------------------------------- */

/* Append one record to a JSON Lines file (metrics.jsonl), synced. */
int sw_metrics_append(const char *path, sw_rec *rec, sw_error *err);
/*
 * The last record of a JSON Lines or msgpack file a stage wrote; NULL when
 * there is none or the file cannot be opened.  A stream broken after some
 * records gives the last whole one, with err set.
 */
sw_rec *sw_metrics_last(const char *path, sw_error *err);
/* Keep only the records whose iter is at most iter (a resumed run writes the rest again); tmp: a scratch path. */
int sw_metrics_trim(const char *path, const char *tmp, uint64_t iter, sw_error *err);

/* Whether the file holds the record of an evaluation after iteration iter. */
int sw_metrics_has_eval(const char *path, uint64_t iter);

/* An iteration's figures, for its metrics.jsonl record. */
typedef struct sw_iter_figures {
	uint64_t iter;
	const sw_tally *tally;
	const sw_mon_obs *obs;          /* the monitors' view (sw_tally_obs, sw_tally_train_obs) */
	sw_rec *train;                  /* the trainer's last metrics record, or NULL */
	sw_rec *balance;                /* the balancer's --stats record, or NULL */
	const sw_pipeline *pl;          /* the stages' time, CPU and memory */
	double pool_update_s, wall_s;
	double eval_s;                  /* NAN: no evaluation after this iteration */
	double monitor_s;               /* time spent on figures and monitors */
	uint64_t weight_version;
	double lr_scale;
	const sw_mon_event *ev;         /* the tripped monitors */
	size_t nev;
	sw_rec *ranks;                  /* sw_run_rank_times, or NULL */
} sw_iter_figures;

/*
 * The trainer's and the balancer's last records of the iteration (from
 * rundir/tmp; NULL: none).  Not 0: a file was broken, what was whole is
 * given and warn says what broke.
 */
int sw_run_stage_records(const char *rundir, sw_rec **train, sw_rec **bal, char *warn, size_t n);

/*
 * A data-parallel program's word on its ranks: rank 0 appends
 * {"program": PROGRAM, "busy_s": [each rank's seconds at work, not waiting
 * on the others]} to the file $SW_RANK_TIMES names (sw-run sets it for
 * its stages); nothing when it is not set.
 */
int sw_run_rank_times_put(const char *program, const double *busy, int n, sw_error *err);
/*
 * What the stages of the iteration said (rundir/tmp/rank-times.jsonl,
 * removed once read): a map program ("rollout", "train") -> the ranks'
 * imbalance, their largest busy time over the mean; NULL when none said.
 */
sw_rec *sw_run_rank_times(const char *rundir);

/* An iteration's progress line: "iter 3/10: reward ..., elapsed 1m05s, ETA 2m10s". */
typedef struct sw_progress {
	uint64_t iter, iters;
	const sw_tally *tally;
	const sw_mon_obs *obs;
	double wall_s, elapsed_s, eta_s;
	const sw_mon_event *ev;
	size_t nev;
} sw_progress;
void sw_run_progress_line(char *buf, size_t n, const sw_progress *p);

/* The fields of an iteration's metrics record, in the order sw-run(1) documents. */
int sw_metrics_iteration(sw_rec *m, const sw_iter_figures *f);
/* An evaluation's record: held-out accuracy, violation rate, reward, length, samples, time. */
int sw_metrics_eval(sw_rec *m, uint64_t iter, const sw_tally *t, double secs);
/* The record of an iteration a hard monitor halted while a stage had failed. */
int sw_metrics_halted(sw_rec *m, uint64_t iter, const sw_tally *t, const sw_mon_obs *o, const char *monitor,
                      const char *failed_stage);

/* ---- the run directory and its checkpoints ------------------------------------------------------ */

/*
 * Lock the run directory dir (made first, with its parents, when create)
 * for the rest of this process's life: an exclusive flock on the directory
 * itself, on a descriptor closed on exec and never closed, so the kernel
 * lets it go when the process ends, however it ends.  A directory another
 * process holds is SW_EIO (sys_errno EWOULDBLOCK) with a message that says
 * so: one sw-run at a time in a run directory (a resume while the run goes
 * on, a requeued job beside the one it replaces, two starts at once).  A
 * second lock of the same directory in one process is refused too.  On a
 * file system that has no such locks (Lustre mounted without flock, some
 * FUSE ones) it is 0 with *locked 0 and err saying why, for a warning;
 * else *locked is 1.
 */
int sw_rundir_lock(const char *dir, int create, int *locked, sw_error *err);
/*
 * Make a run directory with samples/, ckpt/ and tmp/.  One that exists must
 * be empty, or hold a run that completed no iteration (a failed or killed
 * start): that one is emptied and started again.
 */
int sw_rundir_create(const char *dir, sw_error *err);
/* Whether --resume can go on in dir: 0, or a message that says what can be done with it. */
int sw_rundir_check_resume(const char *dir, sw_error *err);
/* Make a run directory ready to go on after iteration iter: its tmp/, metrics.jsonl trimmed to iter, no HALT. */
int sw_rundir_resume(const char *dir, uint64_t iter, sw_error *err);
/* Remove the files the stages of an iteration write in DIR/tmp; tap gets the tap's path, also set as $SW_TAP. */
int sw_run_scratch_reset(const char *dir, char *tap, size_t n, sw_error *err);
/* Write DIR/HALT: "iteration N: reason". */
int sw_rundir_halt(const char *dir, uint64_t iter, const char *reason, sw_error *err);

/* The stores of a run: weights, optimiser state, frozen reference (sw/store.h); and, for a run
 * with ranks, the directory of the MPI transport's shared-memory files, /dev/shm/NAME.mpi. */
typedef struct sw_run_stores {
	sw_store *w, *opt, *ref;        /* NULL until loaded (opt: until the trainer has made it) */
	char spec[SW_STORE_NAME_MAX + 16], opt_spec[SW_STORE_NAME_MAX + 32], ref_spec[SW_STORE_NAME_MAX + 32];
	char mpi_dir[SW_STORE_NAME_MAX + 32]; /* "": none */
} sw_run_stores;
/* Name them at random: PREFIX-..., and .opt, .ref beside it; on_gpu: the
 * weights and the reference are cuda: stores (the optimiser state stays a
 * shm: store, which the trainer, not the run, creates and which must outlive
 * the trainer: a cuda: store's memory lives as long as its creator). */
int sw_run_stores_name(sw_run_stores *s, const char *prefix, int on_gpu, sw_error *err);
/* Load the weights from a model directory at version; the reference from ref_model (NULL: none). */
int sw_run_stores_load(sw_run_stores *s, const char *weights_from, uint64_t version, const char *ref_model,
                       sw_error *err);
/* Name them for x (cuda: where x's device is cuda), tell the guard to remove them (unless x->keep), then
 * load them (as the two calls above; the reference is x->model when x->ref); with x->ranks above 1, make
 * the MPI directory (0700), which the guard removes however the run ends (x->keep or not). */
int sw_run_stores_make(sw_run_stores *s, sw_run_guard *g, const sw_experiment *x, const char *weights_from,
                       uint64_t version, sw_error *err);
/* The optimiser store, opened once the trainer has made it (it knows its size); NULL before. */
sw_store *sw_run_stores_opt(sw_run_stores *s);
/* Close the stores, and remove them unless keep; remove the MPI directory. */
void sw_run_stores_release(sw_run_stores *s, int keep);

/* What a checkpoint restores of the loop itself (state.json). */
typedef struct sw_ckpt_state {
	uint64_t iter;                  /* the last iteration completed */
	double lr_scale;
	uint64_t weight_version;        /* of the weights saved */
	uint64_t opt_version;           /* of the optimiser state saved */
	uint64_t opt_floats;            /* its size; 0: the trainer had not yet made it */
	sw_mon_history history;
} sw_ckpt_state;

/*
 * Save rundir/ckpt/iter-NNNN (NNNN: st->iter): the weights w as a model
 * directory with the tokenizer files of model, the optimiser store opt
 * (NULL: none yet), rundir/pool, and st (its versions and size taken from
 * the stores).  Made in a temporary directory and renamed into place, so
 * a checkpoint is whole or absent.  name gets "ckpt/iter-NNNN".  The
 * weights and the optimiser state are written around the page cache where
 * the file system allows (sw/save.h), and *written (when not NULL) gets
 * their digests as written, for sw_runlog_checkpoint (the caller frees it).
 * It is not yet the resume point: record it in the audit log
 * (sw_runlog_checkpoint), then sw_checkpoint_mark it, so that a run killed
 * between the two resumes from the checkpoint before, which the log
 * vouches for.
 */
int sw_checkpoint_save(const char *rundir, const char *model, sw_store *w, sw_store *opt,
                       const sw_ckpt_state *st, char *name, size_t size, sw_digests **written, sw_error *err);
/* Make checkpoint name the run's resume point: rundir/state names it (written whole, or not at all). */
int sw_checkpoint_mark(const char *rundir, const char *name, sw_error *err);
/* The latest whole checkpoint of a run, from rundir/state: "ckpt/iter-NNNN" (SW_EFORMAT for another name). */
int sw_checkpoint_latest(const char *rundir, char *name, size_t size, sw_error *err);
/* Read a checkpoint's state.json (ckdir: the checkpoint directory); lr_scale must be in (0, 1]. */
int sw_checkpoint_state(const char *ckdir, sw_ckpt_state *st, sw_error *err);

/* The checkpoint a run resumes from. */
typedef struct sw_ckpt_point {
	char name[64];                  /* "ckpt/iter-NNNN" */
	char dir[4160];                 /* rundir/name */
	char digest[SW_DIGEST_HEX];     /* the directory's digest, as the audit log recorded it */
	sw_ckpt_state st;               /* its state.json */
	int ended;                      /* the audit log's last record is the run's end ("run_end") */
	char model_digest[SW_DIGEST_HEX]; /* the run's start record's digest of the model it started from */
	sw_dir_seal *seal;              /* its files as they were before the check read them (sw_checkpoint_loaded) */
} sw_ckpt_point;
/*
 * Find and check the resume point of the run in rundir: the checkpoint
 * rundir/state names (sw_checkpoint_latest), checked against the audit
 * log's record of it (sw_audit_check_checkpoint: the chain, then the
 * directory's digest), then its state.json.  Nothing of a checkpoint is to
 * be used before this succeeds.  The message of a checkpoint that does not
 * match says so, naming it and the file.  The checkpoint's files are sealed
 * (sw_dir_seal) before the check reads them: once everything of it is
 * loaded, sw_checkpoint_loaded says whether what was loaded is what was
 * checked.
 */
int sw_checkpoint_resume_point(const char *rundir, sw_ckpt_point *p, sw_error *err);
/*
 * After the weights, the optimiser state and the pool are loaded from p:
 * SW_EFORMAT if a file of the checkpoint was changed, replaced, removed or
 * added since its seal ("cannot resume: 'run/ckpt/iter-0003' changed while
 * it was read: file 'model.safetensors' was changed"), so the log's digest
 * vouches for what was loaded.  Frees p's seal either way.
 */
int sw_checkpoint_loaded(sw_ckpt_point *p, sw_error *err);
/*
 * Settle the experiment x (the run's config with the options given with
 * --resume over it) of the run in rundir resumed from p, before anything
 * is touched.  iters below the iterations p has done is SW_EINVAL.  A run
 * that has done its iters and whose log has its end has nothing to do:
 * *done is 1 and nothing is written.  Else x is written as rundir/config
 * (atomically), so the options given with --resume stay the run's for any
 * later resume, and the config (and the "resume" record's digest of it)
 * says what the run runs.  The model the run started from must be what the
 * run's start record says (its reference and tokenizer come from it): its
 * digest is model_job's, begun with sw_digest_dir_begin(x's model) while
 * the caller checked the checkpoint, and ended here whatever the outcome;
 * NULL: taken here.
 */
int sw_experiment_resume(const sw_experiment *x, const char *rundir, const sw_ckpt_point *p,
                         sw_digest_job *model_job, int *done, sw_error *err);
/*
 * Put back what a checkpoint holds besides the weights (which the caller
 * loaded from ckdir into w): the optimiser state into *opt, created as
 * opt_spec when *opt is NULL, or removed when the checkpoint has none (it
 * was made before the trainer's first step); and the pool into
 * rundir/pool.  The weights' version must be the checkpoint's.
 */
int sw_checkpoint_restore(const char *ckdir, const char *rundir, const sw_ckpt_state *st, sw_store *w,
                          sw_store **opt, const char *opt_spec, sw_error *err);

/*
 * Keep the newest keep checkpoints (0: every one), the best (the highest
 * held-out accuracy, else mean reward, of a checkpointed iteration) and the
 * one rundir/state names; remove the rest, each recorded first in log (NULL:
 * none) as "checkpoint_removed" at iteration it.
 */
typedef struct sw_runlog sw_runlog;
int sw_checkpoint_prune(const char *rundir, uint64_t keep, sw_runlog *log, uint64_t it, sw_error *err);
/* Whether iteration it (from 1) ends with a checkpoint: every ckpt_every, and the last. */
int sw_checkpoint_due(const sw_experiment *x, uint64_t it);
/*
 * Whether the file system of rundir has room for the checkpoints x's run
 * writes after iteration from (and iteration 0's, with start): 0 when it
 * has (or when the model or the file system cannot be looked at: loading
 * and writing say so); 1 with what they will take and what is free in msg.
 * A checkpoint is counted as 12 B a parameter (the weights in f32 and the
 * AdamW moments) and the start model's files it carries; with keep_ckpt K,
 * as the K + 2 there may be at once (the newest, the best, the one being
 * written), less those there already.  An estimate, for a warning: the
 * disk may be freed, or fill with other things, while the run goes on.
 */
int sw_checkpoint_room(const sw_experiment *x, const char *rundir, uint64_t from, int start, char *msg, size_t n);

/* ---- the run's audit records --------------------------------------------------------------------- */

/*
 * The audit log of a run directory (sw/audit.h) and the records sw-run
 * writes to it, each with its iteration.  An error's message names the
 * log or the file whose digest failed.
 */
sw_runlog *sw_runlog_open(const char *rundir, sw_error *err);
void sw_runlog_close(sw_runlog *l);
const char *sw_runlog_head(const sw_runlog *l);

/* What run_start and resume record besides the config's digest. */
typedef struct sw_run_start {
	int argc;
	char *const *argv;
	const char *model;              /* the start model (its directory's digest is taken) */
	const char *weights;            /* the weight store's spec */
	uint64_t iter;
	const sw_monitor *mon;          /* the monitors' settings, or NULL */
	const char *checkpoint;         /* resume: the checkpoint resumed from ("ckpt/iter-NNNN"), else NULL */
	const char *checkpoint_digest;  /* and its digest, checked against the log (sw_audit_check_checkpoint) */
	const char *model_digest;       /* the start model's digest, taken already (a start: while the stores
	                                 * loaded; a resume: checked against the run's start record,
	                                 * sw_experiment_resume); NULL: taken here */
} sw_run_start;
int sw_runlog_start(sw_runlog *l, const char *event, const sw_run_start *s, sw_error *err);
/* A "stage" record for each stage of the pipeline's last run; of: "iteration" or "eval". */
int sw_runlog_stages(sw_runlog *l, const sw_pipeline *pl, uint64_t it, const char *of, sw_error *err);
int sw_runlog_failure(sw_runlog *l, uint64_t it, const sw_stage_proc *bad, const char *why, sw_error *err);
int sw_runlog_eval(sw_runlog *l, uint64_t it, const sw_tally *t, const char *samples, sw_error *err);
/* The iteration (its samples' and weights' digests), then a "monitor" record per tripped monitor. */
int sw_runlog_iteration(sw_runlog *l, uint64_t it, const char *samples, uint64_t version_before, sw_store *w,
                        const sw_mon_event *ev, size_t nev, sw_error *err);
/* name: the checkpoint's path in the run ("ckpt/iter-0003"), its digest and files recorded; written:
 * the digests sw_checkpoint_save took (NULL: every file is read). */
int sw_runlog_checkpoint(sw_runlog *l, uint64_t it, const char *why, uint64_t weight_version, const char *name,
                         double wall_s, const sw_digests *written, sw_error *err);
/* A record with one string field (key NULL: none): "halt" with its "reason", ... */
int sw_runlog_event(sw_runlog *l, const char *event, uint64_t it, const char *key, const char *value,
                    sw_error *err);
int sw_runlog_end(sw_runlog *l, uint64_t it, uint64_t weight_version, sw_error *err);

#pragma GCC visibility pop

#endif
