/*
 * test_tally.c - what an iteration's samples say: the tally of a few
 * hand-made sample records (means, rates, accuracy, each verifier's share
 * of the spread), the monitors' view of it with the trainer's figures, the
 * metrics records made of it (an append that fails part way leaves no part
 * of its record), a tap file tallied and kept, and the
 * pipeline of stage processes that makes the samples.
 */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tmpfiles.h"

#define dir_ tmp_dir_

#define near(a, b) (fabs((a) - (b)) < 1e-9)

/* A sample: reward (NAN: none given; INFINITY: a non-finite one), scores of math and fmt (NAN: not scored). */
static sw_rec *sample_(double reward, double math, double fmt, int resp, int violation, const char *verr)
{
	sw_rec *r = sw_rec_new(), *rw = sw_rec_new();
	uint32_t toks[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	if (!r || !rw)
		abort();
	sw_rec_set_str(r, "id", "q", 1);
	sw_rec_set_u32s(r, "prompt_tokens", toks, 2);
	sw_rec_set_u32s(r, "response_tokens", toks, (size_t)resp);
	if (!isnan(reward))
		sw_rec_set_f64(r, "reward", reward);
	if (!isnan(math))
		sw_rec_set_f64(rw, "math", math);
	if (!isnan(fmt))
		sw_rec_set_f64(rw, "fmt", fmt);
	sw_rec_set_map(r, "rewards", rw);
	if (violation)
		sw_rec_set_u32s(r, "violations", toks, 1);
	if (verr)
		sw_rec_set_str(r, "verifier_error", verr, strlen(verr));
	sw_rec_free(rw);
	return r;
}

static sw_rec *samples_[4];

static void make_samples_(void)
{
	samples_[0] = sample_(1, 1, 0.5, 3, 0, NULL);
	samples_[1] = sample_(0, 0, 1, 1, 1, NULL);
	samples_[2] = sample_(INFINITY, 1, 0.5, 0, 0, "boom");
	samples_[3] = sample_(NAN, NAN, NAN, 0, 0, NULL);
}

static void test_tally_(void)
{
	sw_tally t;
	sw_tally_init(&t, NULL);
	for (int i = 0; i < 4; i++)
		sw_tally_add(&t, samples_[i]);
	is_int(t.n, 4, "four samples");
	is_int(t.rewarded, 2, "two with a finite reward");
	is_int(t.nonfinite, 1, "one non-finite reward");
	is_int(t.violations, 1, "one violation");
	is_int(t.errors, 1, "one verifier error");
	is_int(t.prompt_tokens, 8, "prompt tokens");
	is_int(t.response_tokens, 4, "response tokens");
	is_int(t.ncomp, 2, "two verifiers");
	ok(!strcmp(t.acc, "math"), "accuracy is the first verifier seen: %s", t.acc);
	ok(near(sw_tally_accuracy(&t), 2.0 / 3), "accuracy 2/3: %g", sw_tally_accuracy(&t));
	/* math 1,0,1: variance 2/9; fmt .5,1,.5: 1/18; math's share (2/9)/(5/18) */
	ok(near(sw_tally_dominance(&t), 0.8), "dominance 0.8: %g", sw_tally_dominance(&t));
	sw_mon_obs o = sw_tally_obs(&t);
	ok(near(o.reward_mean, 0.5), "reward mean %g", o.reward_mean);
	ok(near(o.violation_rate, 0.25) && near(o.verifier_error_rate, 0.25), "rates");
	ok(near(o.response_len_mean, 1.0), "length %g", o.response_len_mean);
	ok(near(o.max_component_share, 0.8), "the monitors see the dominance");
	is_int(o.nonfinite, 1, "and the non-finite reward");
	ok(isnan(o.kl) && isnan(o.entropy) && isnan(o.eval_accuracy), "not the trainer's figures");

	sw_rec *train = sw_rec_new();
	sw_rec_set_f64(train, "kl", 0.125);
	sw_rec_set_f64(train, "entropy", NAN);
	sw_rec_set_f64(train, "loss", INFINITY);
	sw_rec_set_f64(train, "grad_norm", 2);
	sw_tally_train_obs(&o, train);
	ok(o.kl == 0.125 && isnan(o.entropy), "the trainer's kl and entropy");
	is_int(o.nonfinite, 3, "its NaN and Inf counted");
	sw_rec_free(train);
	sw_tally_train_obs(&o, NULL);
	ok(isnan(o.kl), "no trainer record: no kl");

	sw_tally u;
	sw_tally_init(&u, "fmt");
	for (int i = 0; i < 4; i++)
		sw_tally_add(&u, samples_[i]);
	ok(near(sw_tally_accuracy(&u), 1.0 / 3), "accuracy by the named verifier: %g", sw_tally_accuracy(&u));
	sw_tally_init(&u, NULL);
	sw_tally_add(&u, samples_[0]);
	sw_tally_add(&u, samples_[0]);
	ok(isnan(sw_tally_dominance(&u)), "no verifier varies: no dominance");
	ok(isnan(sw_tally_obs(&u).violation_rate) == 0 && near(sw_tally_obs(&u).violation_rate, 0), "no violations");
	sw_tally_init(&u, NULL);
	ok(isnan(sw_tally_obs(&u).reward_mean) && isnan(sw_tally_accuracy(&u)), "nothing tallied: nothing measured");
}

static void test_metrics_(void)
{
	sw_tally t;
	sw_error e = { 0 };
	char path[512];
	sw_tally_init(&t, NULL);
	for (int i = 0; i < 4; i++)
		sw_tally_add(&t, samples_[i]);
	sw_mon_obs o = sw_tally_obs(&t);
	sw_mon_event ev[2] = { { "kl", SW_MON_DEGRADE, 2, 1 }, { "entropy", SW_MON_WARN, 0.1, 0.2 } };
	sw_iter_figures f = { .iter = 1, .tally = &t, .obs = &o, .pool_update_s = 0.5, .wall_s = 2,
	                      .eval_s = NAN, .monitor_s = 0.5, .weight_version = 1, .lr_scale = 1, .ev = ev, .nev = 2 };
	sw_rec *m = sw_rec_new(), *v = sw_rec_new();
	is_int(sw_metrics_iteration(m, &f), 0, "an iteration's record");
	is_int(sw_metrics_eval(v, 2, &t, 1.5), 0, "an evaluation's record");
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir_);
	ok(!sw_metrics_append(path, m, &e) && !sw_metrics_append(path, v, &e), "appended: %s", e.msg);
	char textbuf[8192];
	const char *text = tmp_get(path, textbuf, sizeof textbuf, NULL);
	ok(!strncmp(text, "{\"iter\":1,\"reward_mean\":0.5", 27), "the iteration first: %.60s", text);
	static const char *const order[] = { "\"rewards\":{\"math\":0.66", "\"fmt\":0.66", "\"accuracy\":0.66",
	                                     "\"violation_rate\":0.25", "\"verifier_error_rate\":0.25", "\"kl\":null",
	                                     "\"entropy\":null", "\"clip_frac\":null", "\"loss\":null",
	                                     "\"response_len_mean\":1", "\"tokens_per_s\":6", "\"time_s\":{",
	                                     "\"pool_update\":0.5", "\"iteration\":2", "\"cpu_s\":{}", "\"rss_mb\":{}",
	                                     "\"imbalance\":null", "\"monitor_overhead\":0.25", "\"samples\":4",
	                                     "\"weight_version\":1", "\"lr_scale\":1",
	                                     "\"monitors\":\"kl:degrade,entropy:warn\"}\n{\"iter\":2,\"eval\":true" };
	const char *at = text;
	for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
		const char *p = strstr(at, order[i]);
		ok(p != NULL, "field %zu in its place", i);
		if (p)
			at = p;
	}
	ok(!strstr(text, "\"eval\":null") && !strstr(strstr(text, "time_s"), "\"eval\":0"), "no eval time without one");
	ok(sw_metrics_has_eval(path, 2) && !sw_metrics_has_eval(path, 1), "the evaluation after 2 is there, none after 1");
	sw_rec *last = sw_metrics_last(path, &e);
	uint64_t it = 0;
	ok(last && !sw_rec_get_u64(last, "iter", &it) && it == 2 && !e.code, "the last record is the evaluation's");
	sw_rec_free(last);
	char tmp[512];
	snprintf(tmp, sizeof tmp, "%s/metrics.tmp", dir_);
	is_int(sw_metrics_trim(path, tmp, 1, &e), 0, "trimmed to iteration 1");
	last = sw_metrics_last(path, &e);
	ok(last && !sw_rec_get_u64(last, "iter", &it) && it == 1, "the evaluation after it is gone");
	sw_rec_free(last);

	/* a full disk mid-append, played by a file size limit: the part written is cut off again */
	struct stat st0, st1;
	struct rlimit old, lim;
	if (stat(path, &st0) || getrlimit(RLIMIT_FSIZE, &old))
		abort();
	signal(SIGXFSZ, SIG_IGN);
	lim = old;
	lim.rlim_cur = (rlim_t)st0.st_size + 100; /* of a record of ~600 bytes */
	e = (sw_error){ 0 };
	ok(!setrlimit(RLIMIT_FSIZE, &lim) && sw_metrics_append(path, m, &e) == SW_EIO &&
	   strstr(e.msg, "metrics.jsonl': write error: File too large"), "an append that cannot finish fails: %s", e.msg);
	ok(!stat(path, &st1) && st1.st_size == st0.st_size, "and leaves the file as it was (%lld bytes, was %lld)",
	   (long long)st1.st_size, (long long)st0.st_size);
	ok(!setrlimit(RLIMIT_FSIZE, &old), "the limit lifted");
	signal(SIGXFSZ, SIG_DFL);
	e = (sw_error){ 0 };
	last = sw_metrics_last(path, &e);
	ok(last && !sw_rec_get_u64(last, "iter", &it) && it == 1 && !e.code, "its last record is whole: %s", e.msg);
	sw_rec_free(last);
	/* a pipe (sw-train --metrics /dev/stderr, a process substitution): written, neither locked nor synced */
	int pfd[2];
	char pp[64], line[16] = "";
	if (pipe(pfd))
		abort();
	snprintf(pp, sizeof pp, "/dev/fd/%d", pfd[1]);
	e = (sw_error){ 0 };
	ok(!sw_metrics_append(pp, m, &e), "appended to a pipe: %s", e.msg);
	close(pfd[1]);
	ok(read(pfd[0], line, 10) == 10 && !strncmp(line, "{\"iter\":1,", 10), "the record came through it: %.10s", line);
	close(pfd[0]);
	sw_rec_free(m);
	sw_rec_free(v);
}

static void test_tally_file_(void)
{
	sw_error e = { 0 };
	char tap[512], kept[512], failed[600];
	snprintf(tap, sizeof tap, "%s/tap.msgpack", dir_);
	snprintf(kept, sizeof kept, "%s/samples.msgpack.zst", dir_);
	snprintf(failed, sizeof failed, "%s.failed", kept);
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	sw_writer *w = sw_writer_open(tap, &wo, &e);
	for (int i = 0; i < 4; i++)
		sw_writer_put(w, samples_[i]);
	ok(w && !sw_writer_close(w), "a tap written");
	sw_writer_free(w);
	sw_tally t;
	sw_tally_init(&t, NULL);
	is_int(sw_tally_file(&t, tap, kept, 0, &e), 0, "tallied: %s", e.msg);
	is_int(t.n, 4, "every sample");
	sw_reader *r = sw_reader_open(kept, &e);
	sw_rec *rec = sw_rec_new();
	int n = 0;
	while (r && sw_reader_next(r, rec) == 1)
		n++;
	is_int(n, 4, "and kept");
	sw_reader_free(r);
	sw_rec_free(rec);
	unlink(tap);
	sw_tally_init(&t, NULL);
	is_int(sw_tally_file(&t, tap, kept, 1, &e), 0, "after a failed stage a missing tap is no error");
	ok(access(failed, F_OK) == 0, "the samples go under .failed");
	is_int(sw_tally_file(&t, tap, kept, 0, &e), SW_EIO, "otherwise it is");
	ok(strstr(e.msg, "tap.msgpack") != NULL, "naming it: %s", e.msg);
}

static void test_pipeline_(void)
{
	sw_error e = { 0 };
	char in[512], samples[512], why[200];
	volatile sig_atomic_t pgid = -1;
	snprintf(in, sizeof in, "%s/in.jsonl", dir_);
	snprintf(samples, sizeof samples, "%s/out.msgpack.zst", dir_);
	const char *three = "{\"id\":\"a\",\"reward\":1}\n{\"id\":\"b\",\"reward\":0}\n{\"id\":\"c\",\"reward\":1}\n";
	tmp_put(in, three, strlen(three));
	char *cmds[SW_NSTAGE] = { 0 };
	cmds[SW_STAGE_SORT] = "cat";
	cmds[SW_STAGE_VERIFY] = "sed -n '1,2p'";
	static const int stages[] = { SW_STAGE_SORT, SW_STAGE_VERIFY };
	sw_pipeline *pl = sw_pipeline_new(&pgid);
	sw_tally t;
	sw_tally_init(&t, NULL);
	int fd = open(in, O_RDONLY);
	is_int(sw_pipeline_run(pl, stages, 2, cmds, fd, samples, &t, &e), 0, "a pipeline ran: %s", e.msg);
	close(fd);
	is_int(t.n, 2, "what the last stage printed is tallied");
	ok(sw_pipeline_failed(pl) == NULL && access(samples, F_OK) == 0, "no stage failed, the samples are kept");
	is_int(sw_pipeline_count(pl), 2, "two stages");
	const sw_stage_proc *p = sw_pipeline_proc(pl, 1);
	ok(p && p->done && p->stage == SW_STAGE_VERIFY && p->t1 >= p->t0, "each stage collected with its times");
	is_int(pgid, 0, "no process group once they are done");

	cmds[SW_STAGE_VERIFY] = "cat; exit 4";
	fd = open(in, O_RDONLY);
	is_int(sw_pipeline_run(pl, stages, 2, cmds, fd, samples, NULL, &e), 0, "a failing pipeline still runs");
	close(fd);
	p = sw_pipeline_failed(pl);
	ok(p && p->stage == SW_STAGE_VERIFY, "the failed stage is named");
	sw_status_describe(p ? p->status : 0, why, sizeof why);
	ok(!strcmp(why, "exited with status 4"), "%s", why);
	char failed[600];
	snprintf(failed, sizeof failed, "%s.failed", samples);
	ok(access(failed, F_OK) == 0, "its samples kept as .failed");

	cmds[SW_STAGE_VERIFY] = "cat >/dev/null; echo not a stream";
	fd = open(in, O_RDONLY);
	is_int(sw_pipeline_run(pl, stages, 2, cmds, fd, samples, NULL, &e), SW_EFORMAT, "output that is no stream");
	close(fd);
	ok(strstr(e.msg, "the output of stage 'verify' is not a stream") != NULL, "%s", e.msg);
	sw_pipeline_free(pl);
	sw_pipeline_free(NULL);

	char *av[] = { "sh", "-c", "exit 3", NULL };
	is_int(sw_run_program(av, why, sizeof why), -1, "a program that fails");
	ok(!strcmp(why, "exited with status 3"), "%s", why);
	char *tru[] = { "true", NULL };
	is_int(sw_run_program(tru, why, sizeof why), 0, "one that succeeds");
}

/* The stages' environment (the device among it), and sw-pool run on the run's pool. */
static void test_stage_env_(void)
{
	sw_error err = { 0 };
	char bin[300], fake[350], args[350], got[600], path[1400], why[160];
	snprintf(bin, sizeof bin, "%s/bin", dir_);
	snprintf(fake, sizeof fake, "%s/sw-pool", bin);
	snprintf(args, sizeof args, "%s/args", dir_);
	snprintf(got, sizeof got, "#!/bin/sh\necho \"$*\" >'%s'\n", args);
	if (mkdir(bin, 0755))
		abort();
	tmp_put(fake, got, strlen(got));
	chmod(fake, 0755);
	snprintf(path, sizeof path, "%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	setenv("PATH", path, 1);
	is_int(sw_run_pool(dir_, "add", "p.jsonl", why, sizeof why), 0, "sw-pool runs");
	char want[600];
	snprintf(want, sizeof want, "-q add %s/pool p.jsonl\n", dir_);
	ok(!strcmp(tmp_get(args, got, sizeof got, NULL), want), "on the run's pool: %s", got);
	unlink(fake);

	sw_stage_env e = { "shm:w", "shm:w.opt", NULL, dir_, 2, 1, 4, 8, 1, "guard", "m", 3, NULL, 0 };
	unsetenv("OMPI_MCA_btl_vader_backing_directory");
	unsetenv("OMPI_MCA_btl_sm_backing_directory");
	unsetenv("SW_DEVICE");
	ok(!sw_stage_env_set(&e, &err) && getenv("SW_DEVICE") && !strcmp(getenv("SW_DEVICE"), "guard"),
	   "the stages' SW_DEVICE (%s)", err.msg);
	ok(getenv("SW_RANKS") && !strcmp(getenv("SW_RANKS"), "3"), "the stages' SW_RANKS");
	ok(getenv("SW_RANK_TIMES") && strstr(getenv("SW_RANK_TIMES"), "/tmp/rank-times.jsonl"), "where ranks say how long they worked");
	ok(!getenv("SW_EVAL"), "an iteration's stages: no SW_EVAL");
	e.eval = 1;
	ok(!sw_stage_env_set(&e, &err) && getenv("SW_EVAL") && !strcmp(getenv("SW_EVAL"), "1"), "an evaluation's: SW_EVAL=1");
	e.eval = 0;
	ok(!sw_stage_env_set(&e, &err) && !getenv("SW_EVAL"), "and the next iteration's none again");
	ok(!getenv("OMPI_MCA_btl_vader_backing_directory") && !getenv("OMPI_MCA_btl_sm_backing_directory"),
	   "no MPI directory: Open MPI's backing directory as inherited");
	e.device = NULL;
	ok(!sw_stage_env_set(&e, &err) && !strcmp(getenv("SW_DEVICE"), "guard"), "none given: as inherited");
	/* the ranks' shared memory in the run's directory for it, a user's own setting kept */
	e.mpi_dir = "/dev/shm/sw-run-x.mpi";
	setenv("OMPI_MCA_btl_vader_backing_directory", "/mine", 1);
	ok(!sw_stage_env_set(&e, &err) && !strcmp(getenv("OMPI_MCA_btl_vader_backing_directory"), "/mine") &&
	   getenv("OMPI_MCA_btl_sm_backing_directory") &&
	   !strcmp(getenv("OMPI_MCA_btl_sm_backing_directory"), "/dev/shm/sw-run-x.mpi"),
	   "the MPI directory where the user set none (Open MPI 5's name), theirs kept (4's)");
	unsetenv("OMPI_MCA_btl_vader_backing_directory");
	unsetenv("OMPI_MCA_btl_sm_backing_directory");
}

int main(void)
{
	if (tmp_open("tally"))
		return 1;
	make_samples_();
	test_tally_();
	test_metrics_();
	test_tally_file_();
	test_pipeline_();
	test_stage_env_();
	for (int i = 0; i < 4; i++)
		sw_rec_free(samples_[i]);
	tmp_close();
	return tap_done();
}
