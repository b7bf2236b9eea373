/*
 * test_run.c - the pieces of sw-run's loop that issue 15 added: the guard
 * that ends a dead run's stages and removes its stores, the prompt check
 * before a start, a run directory whose start failed started again and
 * what --resume says of one, keeping the last K checkpoints, and the
 * progress line; what /proc says of the stages' processes.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <seccomp.h>
#include "run/run_internal.h"
#include "sw/sw.h"
#include "tap.h"
#include "tmpfiles.h"

#define dir_ tmp_dir_

static void put_(const char *path, const char *text)
{
	tmp_put(path, text, strlen(text));
}

static void nap_(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

/* A process group of two sleepers, as a pipeline's stages; its id. */
static pid_t sleepers_(void)
{
	pid_t lead = fork();
	if (lead == 0) {
		setpgid(0, 0);
		if (fork() == 0) { /* a command its stage's shell forked */
			execlp("sleep", "sleep", "30", (char *)NULL);
			_exit(127);
		}
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	setpgid(lead, lead);
	return lead;
}

static void guard_(void)
{
	sw_error e = { 0 };
	char spec[128], path[200];
	if (sw_store_name_random("swtest", spec, sizeof spec, &e))
		abort();
	snprintf(path, sizeof path, "/dev/shm/%s", spec + 4);
	sw_store *s = sw_store_create(spec, NULL, 16, &e);
	ok(s != NULL, "a store: %s", e.msg);
	sw_store_close(s);
	/* the guard lives in a child that stands for sw-run: it dies with its pipe still open */
	int sync[2];
	if (pipe(sync))
		abort();
	fflush(stdout); /* the child's guard flushes what it inherits: not the lines so far twice */
	pid_t run = fork();
	if (run == 0) {
		sw_run_guard *g = sw_run_guard_start(&e);
		if (!g)
			_exit(2);
		pid_t pg = sleepers_();
		sw_run_guard_store(g, spec);
		sw_run_guard_pgid(g, pg);
		if (write(sync[1], &pg, sizeof pg) != sizeof pg)
			_exit(3);
		pause(); /* killed */
		_exit(0);
	}
	pid_t pg = 0;
	ok(read(sync[0], &pg, sizeof pg) == sizeof pg && pg > 0, "the run started its stages");
	ok(kill(-pg, 0) == 0, "they run");
	ok(access(path, F_OK) == 0, "the store is there");
	kill(run, SIGKILL);
	waitpid(run, NULL, 0);
	int gone = 0;
	for (int i = 0; i < 500 && !gone; i++) {
		gone = !sw_procs_group_alive(pg) && access(path, F_OK); /* (zombies, where nobody collects, have ended) */
		if (!gone)
			nap_();
	}
	ok(gone, "killed with SIGKILL: its stages are ended and its store removed");
	close(sync[0]), close(sync[1]);

	/* --keep-stores: the guard ends the stages but keeps the store */
	s = sw_store_create(spec, NULL, 16, &e);
	sw_store_close(s);
	sw_run_guard *g = sw_run_guard_start(&e);
	ok(g != NULL, "a guard: %s", e.msg);
	sw_run_guard_store(g, spec);
	sw_run_guard_keep(g);
	sw_run_guard_free(g);
	for (int i = 0; i < 50; i++)
		nap_();
	ok(access(path, F_OK) == 0, "kept");
	sw_store_unlink(spec, NULL);
	sw_run_guard_free(NULL);
}

/* A zombie has ended; a child in a group of its own that outlives its parent is collected. */
static void procs_(void)
{
	pid_t z = fork();
	if (z == 0) {
		setpgid(0, 0);
		_exit(0);
	}
	setpgid(z, z);
	pid_t live = sleepers_();
	int zombie = 0;
	for (int i = 0; i < 500 && !zombie; i++) {
		zombie = !sw_procs_group_alive(z);
		if (!zombie)
			nap_();
	}
	ok(zombie && kill(-z, 0) == 0, "a group whose one process is a zombie: ended, though kill -0 still finds it");
	ok(sw_procs_group_alive(live), "a group of sleepers runs");
	waitpid(z, NULL, 0);
	kill(-live, SIGKILL);
	waitpid(live, NULL, 0);

	/* p stands for sw-run: its stage (a) starts a rank (b) in a group of its own, with a child, and ends */
	int sync[2];
	if (pipe(sync))
		abort();
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		pid_t a = fork();
		if (a == 0) {
			pid_t b = fork();
			if (b == 0) {
				setpgid(0, 0);
				if (fork() == 0) {
					execlp("sleep", "sleep", "30", (char *)NULL);
					_exit(127);
				}
				execlp("sleep", "sleep", "30", (char *)NULL);
				_exit(127);
			}
			setpgid(b, b);
			_exit(write(sync[1], &b, sizeof b) == sizeof b ? 0 : 1);
		}
		pid_t b = 0;
		int st;
		if (read(sync[0], &b, sizeof b) != sizeof b || waitpid(a, &st, 0) != a || st)
			_exit(10);
		nap_(), nap_(); /* b's child forked */
		if (kill(b, 0) || sw_procs_collect_orphans() < 2) /* b and its sleeper */
			_exit(11);
		_exit(kill(b, 0) == 0 || errno != ESRCH || kill(-b, 0) == 0 ? 12 : 0);
	}
	int st = -1;
	waitpid(p, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "a rank in a group of its own that outlived its launcher: killed with its child and collected (%d)",
	   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	close(sync[0]), close(sync[1]);
}

static void inputs_(void)
{
	char model[600], p[600], q[700];
	sw_error e = { 0 };
	const char *top = getenv("SW_TOP");
	snprintf(model, sizeof model, "%s/tests/fixtures/models/tiny-llama", top ? top : ".");
	sw_experiment x;
	sw_experiment_init(&x);
	x.model = strdup(model);
	snprintf(p, sizeof p, "%s/p.jsonl", dir_);
	x.prompts = strdup(p);
	put_(p, "{\"id\":\"a\",\"prompt\":\"1+1=\"}\n{\"id\":\"b\",\"messages\":[]}\n");
	is_int(sw_experiment_inputs(&x, &e), 0, "prompts and messages: %s", e.msg);
	put_(p, "{\"id\":\"a\",\"prompt\":\"1+1=\"}\n{\"id\":\"b\",\"promt\":\"x\"}\n");
	is_int(sw_experiment_inputs(&x, &e), SW_EFORMAT, "a misspelt prompt");
	snprintf(q, sizeof q, "%s: line 2: no prompt:", p);
	ok(!strncmp(e.msg, q, strlen(q)), "%s", e.msg);
	tmp_put(p, "", 0);
	is_int(sw_experiment_inputs(&x, &e), SW_EEMPTY, "no prompts");
	snprintf(q, sizeof q, "%s: no prompts in it", p);
	ok(!strcmp(e.msg, q), "%s", e.msg);
	free(x.model);
	x.model = strdup(dir_);
	is_int(sw_experiment_inputs(&x, &e), SW_EIO, "no model directory");
	ok(strstr(e.msg, "is no model directory") != NULL, "%s", e.msg);
	sw_experiment_release(&x);
}

static void rundir_(void)
{
	char run[600], p[700];
	sw_error e = { 0 };
	snprintf(run, sizeof run, "%s/run", dir_);
	is_int(sw_rundir_create(run, &e), 0, "made: %s", e.msg);
	is_int(sw_rundir_check_resume(run, &e), SW_EIO, "no config: no run");
	ok(strstr(e.msg, "it is no run directory (it has no config)") != NULL, "%s", e.msg);
	snprintf(p, sizeof p, "%s/config", run);
	tmp_put(p, "iters 1\n", 8);
	snprintf(p, sizeof p, "%s/audit.log", run);
	tmp_put(p, "", 0);
	is_int(sw_rundir_check_resume(run, &e), SW_EINVAL, "no checkpoint: nothing to resume");
	ok(strstr(e.msg, "never reached its first checkpoint; start it again with sw-run -c") != NULL, "%s", e.msg);
	snprintf(p, sizeof p, "%s/samples/eval-0000.msgpack.zst.part", run);
	tmp_put(p, "x", 1);
	is_int(sw_rundir_create(run, &e), 0, "a start that failed is started again: %s", e.msg);
	ok(access(p, F_OK) != 0, "what it left is gone");
	snprintf(p, sizeof p, "%s/config", run);
	ok(access(p, F_OK) != 0, "config too");
	/* one that completed an iteration is not */
	tmp_put(p, "iters 1\n", 8);
	snprintf(p, sizeof p, "%s/audit.log", run);
	tmp_put(p, "", 0);
	snprintf(p, sizeof p, "%s/state", run);
	tmp_put(p, "ckpt/iter-0001", 14);
	is_int(sw_rundir_create(run, &e), SW_EINVAL, "a run with an iteration stays");
	ok(access(p, F_OK) == 0, "untouched");
	is_int(sw_rundir_check_resume(run, &e), 0, "and resumes");
}

/* One process at a time in a run directory: the lock of sw_rundir_lock, against another process and this one. */
static void lock_(void)
{
	char run[600], p[700];
	sw_error e = { 0 };
	int locked = -1;
	snprintf(run, sizeof run, "%s/locked/deep/run", dir_);
	/* another process holds it: refused here, with what the message says; free once it ends */
	int go[2], ready[2];
	char c = 0;
	if (pipe(go) || pipe(ready))
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (sw_rundir_lock(run, 1, &locked, NULL) || write(ready[1], &c, 1) != 1)
			_exit(1);
		_exit(read(go[0], &c, 1) < 0); /* holds it until told */
	}
	close(go[0]);
	close(ready[1]);
	ok(read(ready[0], &c, 1) == 1, "the other process holds it");
	close(ready[0]);
	is_int(sw_rundir_lock(run, 0, &locked, &e), SW_EIO, "held by another process: refused");
	snprintf(p, sizeof p, "'%s' is in use by another sw-run (one at a time in a run directory)", run);
	ok(!strcmp(e.msg, p) && e.sys_errno == EWOULDBLOCK, "%s", e.msg);
	close(go[1]);
	int st;
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other process made and locked it (with its parents)");
	is_int(sw_rundir_lock(run, 0, &locked, &e), 0, "free once it ended: %s", e.msg);
	is_int(locked, 1, "and locked");
	is_int(sw_rundir_lock(run, 0, &locked, &e), SW_EIO, "locked once a process: a second lock is refused too");
	is_int(sw_rundir_lock(run, 1, &locked, &e), SW_EIO, "with create as well");
	snprintf(p, sizeof p, "%s/nowhere", dir_);
	is_int(sw_rundir_lock(p, 0, &locked, &e), SW_EIO, "a directory that is not there, without create");
	ok(access(p, F_OK) != 0, "is not made");
	snprintf(p, sizeof p, "%s/afile", dir_);
	tmp_put(p, "x", 1);
	is_int(sw_rundir_lock(p, 1, &locked, &e), SW_EIO, "a file is no directory: %s", e.msg);

	/* a file system without locks (flock is ENOSYS on Lustre mounted without it): not refused, said */
	snprintf(p, sizeof p, "%s/nolocks", dir_);
	if (!(pid = fork())) {
		scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
		if (!f || seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(flock), 0) || seccomp_load(f))
			_exit(2);
		sw_error e2 = { 0 };
		char want[800];
		snprintf(want, sizeof want, "cannot lock '%s' (%s): nothing keeps another sw-run out of it", p,
		         strerror(ENOSYS));
		int l = -1, rc = sw_rundir_lock(p, 1, &l, &e2);
		_exit(rc == 0 && l == 0 && e2.code == 0 && e2.sys_errno == ENOSYS && !strcmp(e2.msg, want) ? 0 : 1);
	}
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "no locks on its file system: 0, not locked, and why (status %d)",
	   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void prune_(void)
{
	char run[600], p[700], m[4096];
	sw_error e = { 0 };
	snprintf(run, sizeof run, "%s/prune", dir_);
	is_int(sw_rundir_create(run, &e), 0, "made: %s", e.msg);
	size_t used = 0;
	for (int i = 0; i <= 6; i++) {
		snprintf(p, sizeof p, "%s/ckpt/iter-%04d", run, i);
		mkdir(p, 0755);
		/* iteration 3 has the best reward; nothing was evaluated */
		used += (size_t)snprintf(m + used, sizeof m - used, "{\"iter\":%d,\"reward_mean\":%s}\n", i,
		                         i == 3 ? "0.9" : i == 4 ? "null" : "0.1");
	}
	snprintf(p, sizeof p, "%s/metrics.jsonl", run);
	tmp_put(p, m, used);
	snprintf(p, sizeof p, "%s/state", run);
	tmp_put(p, "ckpt/iter-0006", 14);
	is_int(sw_checkpoint_prune(run, 0, NULL, 6, &e), 0, "keep 0: every one");
	snprintf(p, sizeof p, "%s/ckpt/iter-0000", run);
	ok(access(p, F_OK) == 0, "all there");
	is_int(sw_checkpoint_prune(run, 2, NULL, 6, &e), 0, "keep 2: %s", e.msg);
	const int want[] = { 0, 0, 0, 1, 0, 1, 1 };
	for (int i = 0; i <= 6; i++) {
		snprintf(p, sizeof p, "%s/ckpt/iter-%04d", run, i);
		ok((access(p, F_OK) == 0) == want[i], "iter-%04d %s", i, want[i] ? "kept" : "removed");
	}
	/* the latest is kept even when the newest by number is another (a resumed run's older state) */
	snprintf(p, sizeof p, "%s/state", run);
	tmp_put(p, "ckpt/iter-0003", 14);
	is_int(sw_checkpoint_prune(run, 1, NULL, 3, &e), 0, "keep 1");
	snprintf(p, sizeof p, "%s/ckpt/iter-0003", run);
	ok(access(p, F_OK) == 0, "the latest and best stays");
	snprintf(p, sizeof p, "%s/ckpt/iter-0006", run);
	ok(access(p, F_OK) == 0, "the newest stays");
	snprintf(p, sizeof p, "%s/ckpt/iter-0005", run);
	ok(access(p, F_OK) != 0, "the one before it goes");
}

/* The room sw-run asks of the run directory's file system for the checkpoints to come. */
static void room_(void)
{
	char run[600], m[600], p[700], msg[1000], want[1000], each_s[32], need_s[32];
	sw_error e = { 0 };
	snprintf(run, sizeof run, "%s/room", dir_);
	snprintf(m, sizeof m, "%s/room-model", dir_);
	is_int(sw_rundir_create(run, &e), 0, "made: %s", e.msg);
	mkdir(m, 0755);
	/* a 70B model's shapes: no test machine has the room for even one of its checkpoints */
	const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":8192,\"intermediate_size\":28672,"
	                  "\"num_hidden_layers\":80,\"num_attention_heads\":64,\"num_key_value_heads\":8,"
	                  "\"vocab_size\":128256,\"max_position_embeddings\":8192,\"rms_norm_eps\":1e-5}";
	snprintf(p, sizeof p, "%s/config.json", m);
	put_(p, cfg);
	snprintf(p, sizeof p, "%s/tokenizer.json", m);
	put_(p, "{}");
	sw_model_config c;
	snprintf(p, sizeof p, "%s/config.json", m);
	is_int(sw_model_config_load(p, &c, &e), 0, "the config: %s", e.msg);
	double np = (double)sw_model_config_nparams(&c), each = 12.0 * np + (double)strlen(cfg) + 2;
	snprintf(each_s, sizeof each_s, "%.1f GB", each / 1e9);
	sw_experiment x;
	sw_experiment_init(&x);
	x.model = m;
	x.iters = 10;
	/* a start: iteration 0's checkpoint (no optimiser state yet) and one an iteration, every one kept */
	is_int(sw_checkpoint_room(&x, run, 0, 1, msg, sizeof msg), 1, "no room: said");
	snprintf(need_s, sizeof need_s, "%.1f GB", (11 * each - 8 * np) / 1e9);
	snprintf(want, sizeof want, "warning: the run's checkpoints will take about %s (11 of %s each, every one kept: "
	         "--keep-ckpt K keeps the newest K), and the file system of '%s' has ", need_s, each_s, run);
	ok(!strncmp(msg, want, strlen(want)) && strstr(msg, " free"), "%s", msg);
	/* every 3 iterations: 0, 3, 6, 9 and the last */
	x.ckpt_every = 3;
	sw_checkpoint_room(&x, run, 0, 1, msg, sizeof msg);
	ok(strstr(msg, "(5 of ") != NULL, "every 3 of 10: %s", msg);
	x.ckpt_every = 1;
	/* keep 3: at most 5 at once */
	x.keep_ckpt = 3;
	sw_checkpoint_room(&x, run, 0, 1, msg, sizeof msg);
	snprintf(want, sizeof want, "(5 at once of %s each: the newest 3, the best and the one being written)", each_s);
	ok(strstr(msg, want) != NULL, "keep 3: %s", msg);
	/* a resume from iteration 4 with 5 there: one more at a time (the oldest pruned as each comes) */
	for (int i = 0; i <= 4; i++) {
		snprintf(p, sizeof p, "%s/ckpt/iter-%04d", run, i);
		mkdir(p, 0755);
	}
	snprintf(need_s, sizeof need_s, "%.1f GB", each / 1e9);
	sw_checkpoint_room(&x, run, 4, 0, msg, sizeof msg);
	snprintf(want, sizeof want, "about %s (1 more at once of %s each", need_s, each_s);
	ok(strstr(msg, want) != NULL, "resumed, keep 3: %s", msg);
	/* every one kept: the 6 still to come */
	x.keep_ckpt = 0;
	sw_checkpoint_room(&x, run, 4, 0, msg, sizeof msg);
	ok(strstr(msg, "(6 of ") != NULL, "resumed, every one kept: %s", msg);
	/* none to come, or a model that fits (the tiny one: 0.86M parameters), or none to look at: nothing said */
	is_int(sw_checkpoint_room(&x, run, 10, 0, msg, sizeof msg), 0, "none to come");
	ok(msg[0] == 0, "nothing said");
	char tiny[600];
	snprintf(tiny, sizeof tiny, "%s/tests/fixtures/models/tiny-llama", getenv("SW_TOP") ? getenv("SW_TOP") : ".");
	x.model = tiny;
	is_int(sw_checkpoint_room(&x, run, 0, 1, msg, sizeof msg), 0, "a tiny model fits");
	x.model = run; /* no config.json */
	is_int(sw_checkpoint_room(&x, run, 0, 1, msg, sizeof msg), 0, "no model to look at: said by its load");
}

static void progress_(void)
{
	char line[512];
	sw_tally t;
	sw_tally_init(&t, NULL);
	t.acc_n = 4, t.correct = 1;
	sw_mon_obs o = sw_tally_obs(&t);
	o.reward_mean = 0.5, o.violation_rate = 0, o.response_len_mean = 7;
	sw_progress pr = { 2, 10, &t, &o, 1.25, 65, 3 * 3600 + 125, NULL, 0 };
	sw_run_progress_line(line, sizeof line, &pr);
	ok(!strcmp(line, "iter 2/10: reward 0.500, accuracy 25.0%, violations 0.0%, len 7.0, 1.2 s; elapsed 1m05s, "
	                 "ETA 3h02m"), "%s", line);
	o.kl = 0.012;
	sw_run_progress_line(line, sizeof line, &pr);
	ok(strstr(line, ", kl 0.0120, len") != NULL, "kl when measured: %s", line);
}

int main(void)
{
	if (tmp_open("run"))
		return 1;
	guard_();
	procs_();
	inputs_();
	rundir_();
	lock_();
	prune_();
	room_();
	progress_();
	tmp_close();
	return tap_done();
}
