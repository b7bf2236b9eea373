/*
 * test_experiment.c - the experiment file of sw-run(1): a good file read,
 * each kind of bad line an error naming the file and line (a bad number
 * names the option, as on the command line), the defaults and the checks,
 * and a resolved experiment written and read back unchanged.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tmpfiles.h"

#define dir_ tmp_dir_

static const char *file_(const char *name, const char *text)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", dir_, name);
	tmp_put(path, text, strlen(text));
	return path;
}

static char *slurp_(const char *path)
{
	static char buf[8192];
	return tmp_get(path, buf, sizeof buf, NULL);
}

static void test_good_(void)
{
	sw_experiment x;
	sw_error e = { 0 };
	sw_experiment_init(&x);
	is_int(x.iters, 10, "default iters");
	is_int(x.group, 8, "default group");
	const char *p = file_("good", "# a comment\n"
	                              "\n"
	                              "model m\n"
	                              "--prompts  p.jsonl \n"
	                              "iters=3\n"
	                              "group 2\n"
	                              "ref\n"
	                              "rollout sw-rollout -n \"$SW_GROUP\" --temperature 0.7\n"
	                              "monitor kl=1,2,3\n"
	                              "monitor entropy=off\n");
	is_int(sw_experiment_read(&x, p, &e), 0, "a good file reads: %s", e.msg);
	ok(x.model && !strcmp(x.model, "m"), "model");
	ok(x.prompts && !strcmp(x.prompts, "p.jsonl"), "dashes and trailing blanks go");
	is_int(x.iters, 3, "NAME=VALUE");
	is_int(x.group, 2, "group");
	is_int(x.ref, 1, "a flag");
	ok(x.cmd[SW_STAGE_ROLLOUT] && !strcmp(x.cmd[SW_STAGE_ROLLOUT], "sw-rollout -n \"$SW_GROUP\" --temperature 0.7"),
	   "a command keeps its spaces and quotes");
	is_int(x.nmonitor, 2, "monitors in order");
	ok(!x.out && !x.cmd[SW_STAGE_TRAIN], "what was not given is not there yet");
	is_int(sw_experiment_check(&x, &e), SW_EINVAL, "no run directory");
	ok(!strcmp(e.msg, "no run directory: give --out DIR"), "it says so: %s", e.msg);
	ok(x.cmd[SW_STAGE_TRAIN] && strstr(x.cmd[SW_STAGE_TRAIN], "sw-train"), "the default stages are filled in");
	is_int(sw_experiment_set(&x, "out", "run", &e), 0, "a setting from the command line");
	is_int(sw_experiment_check(&x, &e), 0, "then it checks");
	is_int(sw_experiment_set(&x, "config", "x", &e), SW_EINVAL, "config is no setting of an experiment");
	is_int(sw_experiment_set(&x, "iters", "0", &e), SW_EINVAL, "iters 0 refused");
	ok(!strcmp(e.msg, "option '--iters' wants a whole number from 1 to 1000000, not '0'"), "%s", e.msg);
	is_int(sw_experiment_set(&x, "train", "", &e), SW_EINVAL, "an empty command");
	ok(!strcmp(e.msg, "--train: the command is empty"), "%s", e.msg);
	sw_experiment_release(&x);
	sw_experiment_release(&x); /* a released experiment releases again */
}

static void test_bad_(void)
{
	static const struct { const char *text, *want; int code; } bad[] = {
		{ "model m\nbogus 1\n", "%s: line 2: unknown setting 'bogus'", SW_EINVAL },
		{ "ref yes\n", "%s: line 1: 'ref' takes no value", SW_EINVAL },
		{ "# c\n\nmodel\n", "%s: line 3: 'model' needs a value", SW_EINVAL },
		{ "config other\n", "%s: line 1: unknown setting 'config'", SW_EINVAL },
		{ "resume r\n", "%s: line 1: unknown setting 'resume'", SW_EINVAL },
		{ "iters three\n", "%s: line 1: option '--iters' wants a whole number from 1 to 1000000, not 'three'",
		  SW_EINVAL },
		{ "model m\ngroup 70000\n", "%s: line 2: option '--group' wants a whole number from 1 to 65536, not '70000'",
		  SW_EINVAL },
		{ "monitor kl=3,2,1\n", "%s: line 1: monitor 'kl=3,2,1': the levels must rise from warn to hard", SW_EINVAL },
		{ "monitor nope=1,2,3\n", "%s: line 1: no monitor named 'nope'", SW_EINVAL },
		{ "device tpu\n", "%s: line 1: unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)", SW_EINVAL },
		/* a setting twice: which one a reader of the file takes is a guess (monitor repeats) */
		{ "model m\niters 3\n# c\niters=4\n", "%s: line 4: 'iters' is set again (first at line 2); a file sets each once",
		  SW_EINVAL },
		{ "--model a\nmodel a\n", "%s: line 2: 'model' is set again (first at line 1); a file sets each once",
		  SW_EINVAL },
		{ "ref\nref\n", "%s: line 2: 'ref' is set again (first at line 1); a file sets each once", SW_EINVAL },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		sw_experiment x;
		sw_error e = { 0 };
		char want[600];
		sw_experiment_init(&x);
		const char *p = file_("bad", bad[i].text);
		snprintf(want, sizeof want, bad[i].want, p);
		is_int(sw_experiment_read(&x, p, &e), bad[i].code, "bad file %zu refused", i);
		ok(!strcmp(e.msg, want), "it says: %s", e.msg);
		sw_experiment_release(&x);
	}
	sw_experiment x;
	sw_error e = { 0 };
	char want[600];
	/* a NUL inside a line (once read as the text before it, "sort cmd " kept its space) */
	const char *p = file_("nul", "");
	tmp_put(p, "model m\nsort cmd \0x\n", 20);
	sw_experiment_init(&x);
	snprintf(want, sizeof want, "%s: line 2: a NUL byte: not a text file", p);
	is_int(sw_experiment_read(&x, p, &e), SW_EINVAL, "a NUL byte refused");
	ok(!strcmp(e.msg, want), "it says: %s", e.msg);
	sw_experiment_release(&x);
	sw_experiment_init(&x);
	snprintf(want, sizeof want, "cannot open '%s/none': No such file or directory", dir_);
	char path[512];
	snprintf(path, sizeof path, "%s/none", dir_);
	is_int(sw_experiment_read(&x, path, &e), SW_EIO, "a missing file is SW_EIO");
	ok(!strcmp(e.msg, want), "%s", e.msg);
	sw_experiment_release(&x);
}

static void test_round_trip_(void)
{
	sw_experiment a, b;
	sw_error e = { 0 };
	char p1[512], p2[512], first[8192];
	sw_experiment_init(&a);
	sw_experiment_init(&b);
	const char *p = file_("full", "model m\nprompts p\nout o\neval e.jsonl\niters 7\nbatch 3\nseed 0\n"
	                              "eval-every 2\nckpt-every 4\ndevice guard\nref\naccuracy fmt\ntrain sw-cat\nsort sort -r\n"
	                              "monitor kl=1,2,3\n");
	ok(!sw_experiment_read(&a, p, &e) && !sw_experiment_check(&a, &e), "read: %s", e.msg);
	snprintf(p1, sizeof p1, "%s/config1", dir_);
	snprintf(p2, sizeof p2, "%s/config2", dir_);
	is_int(sw_experiment_write(&a, p1, &e), 0, "written: %s", e.msg);
	snprintf(first, sizeof first, "%s", slurp_(p1));
	ok(!strncmp(first, "# the resolved experiment of this run (sw-run -c reads it back)\nmodel m\nprompts p\n"
	                   "eval e.jsonl\niters 7\nbatch 3\ngroup 8\nseed 0\neval-every 2\nckpt-every 4\ndevice guard\nref\n"
	                   "accuracy fmt\nselect sw-pool take",
	            strlen("# the resolved experiment of this run (sw-run -c reads it back)\nmodel m\nprompts p\n"
	                   "eval e.jsonl\niters 7\nbatch 3\ngroup 8\nseed 0\neval-every 2\nckpt-every 4\ndevice guard\nref\n"
	                   "accuracy fmt\nselect sw-pool take")),
	   "the resolved form");
	ok(strstr(first, "\ntrain sw-cat\n") && strstr(first, "\nmonitor kl=1,2,3\n") && !strstr(first, "tap"),
	   "commands and monitors written, the tap not");
	ok(!sw_experiment_read(&b, p1, &e), "read back: %s", e.msg);
	ok(!sw_experiment_set(&b, "out", "o", &e) && !sw_experiment_check(&b, &e), "checks");
	is_int(sw_experiment_write(&b, p2, &e), 0, "written again");
	ok(!strcmp(first, slurp_(p2)), "the same bytes");
	ok(b.iters == a.iters && b.seed == 0 && b.ref && !strcmp(b.accuracy, "fmt") && !strcmp(b.eval, "e.jsonl") &&
	   !strcmp(b.device, "guard"),
	   "the same settings");
	for (int s = 0; s < SW_NSTAGE; s++)
		ok(!strcmp(a.cmd[s], b.cmd[s]), "stage %s the same", sw_stage_name(s));
	sw_experiment_release(&a);
	sw_experiment_release(&b);
	sw_experiment_init(&a);
	ok(sw_experiment_set(&a, "device", "tpu", &e) == SW_EINVAL &&
	   !strcmp(e.msg, "unknown device 'tpu' (known: cpu, guard, cuda, cuda:N)") && !a.device, "an unknown device: %s", e.msg);
	ok(sw_experiment_set(&a, "device", "", &e) == SW_EINVAL && !a.device, "no device: %s", e.msg);
	ok(!sw_experiment_set(&a, "device", "cpu", &e) && !strcmp(a.device, "cpu"), "a device named");
	sw_experiment_release(&a);
	ok(sw_stage_name(SW_NSTAGE) == NULL && !strcmp(sw_stage_name(SW_STAGE_EVAL_ROLLOUT), "eval-rollout"),
	   "stage names");
}

/* What --resume does with the options over a run's config (sw-run's resume, before anything is touched). */
static void test_resume_(void)
{
	sw_experiment x;
	sw_error e = { 0 };
	sw_experiment_init(&x);
	char model[300], text0[600];
	snprintf(model, sizeof model, "%s/m", dir_);
	mkdir(model, 0755);
	file_("m/config.json", "{}\n");
	snprintf(text0, sizeof text0, "model %s\nprompts p\niters 2\nmonitor kl=1,2,3\nmonitor entropy=off\n", model);
	const char *p = file_("res", text0);
	is_int(sw_experiment_read(&x, p, &e), 0, "read: %s", e.msg);
	/* a monitor given again replaces its line, in its place */
	is_int(sw_experiment_set_resumed(&x, "monitor", "kl=off", &e), 0, "a monitor again: %s", e.msg);
	is_int(sw_experiment_set_resumed(&x, "monitor", "violation_rate=0.3,0.6,0.9", &e), 0, "a new one");
	is_int(x.nmonitor, 3, "one entry a monitor");
	ok(!strcmp(x.monitor[0], "kl=off") && !strcmp(x.monitor[1], "entropy=off") &&
	   !strcmp(x.monitor[2], "violation_rate=0.3,0.6,0.9"), "in their places: %s %s %s", x.monitor[0],
	   x.monitor[1], x.monitor[2]);
	is_int(sw_experiment_set_resumed(&x, "monitor", "kl=9,8,7", &e), SW_EINVAL, "a bad spec refused");
	ok(!strcmp(x.monitor[0], "kl=off"), "and the entry kept");
	/* what the run started from is its own */
	static const char *fixed[] = { "model", "prompts", "out" };
	for (int i = 0; i < 3; i++) {
		char want[300];
		snprintf(want, sizeof want, "--%s cannot be given with --resume: the run goes on from its checkpoint with "
		         "its own model, prompts and directory", fixed[i]);
		ok(sw_experiment_set_resumed(&x, fixed[i], "other", &e) == SW_EINVAL && !strcmp(e.msg, want), "%s: %s",
		   fixed[i], e.msg);
	}
	ok(!strcmp(x.model, model) && !strcmp(x.prompts, "p") && !x.out, "and unchanged");
	is_int(sw_experiment_set_resumed(&x, "iters", "5", &e), 0, "iters may change");
	ok(!sw_experiment_set(&x, "out", dir_, &e) && !sw_experiment_check(&x, &e), "checks: %s", e.msg);

	char cfg[600];
	snprintf(cfg, sizeof cfg, "%s/config", dir_);
	unlink(cfg);
	sw_ckpt_point pt;
	memset(&pt, 0, sizeof pt);
	pt.st.iter = 6;
	int done = -1;
	is_int(sw_experiment_resume(&x, dir_, &pt, NULL, &done, &e), SW_EINVAL, "iters below the iterations done");
	char want[900];
	snprintf(want, sizeof want, "iters 5 is fewer than the 6 iterations the run in '%s' has done: give --iters 6 or more",
	         dir_);
	ok(!strcmp(e.msg, want), "%s", e.msg);
	ok(access(cfg, F_OK) && errno == ENOENT, "nothing written");
	pt.st.iter = 5, pt.ended = 1;
	is_int(sw_experiment_resume(&x, dir_, &pt, NULL, &done, &e), 0, "done and ended");
	is_int(done, 1, "nothing to do");
	ok(access(cfg, F_OK) && errno == ENOENT, "nothing written");
	pt.ended = 0; /* done but killed before its end record: the resume finishes it */
	/* only from the model it started from: its digest as the run's start record has it */
	is_int(sw_digest_dir(model, pt.model_digest, &e), 0, "the model's digest");
	file_("m/config.json", "{\"changed\": 1}\n");
	is_int(sw_experiment_resume(&x, dir_, &pt, NULL, &done, &e), SW_EFORMAT, "a model that changed since the start");
	ok(strstr(e.msg, "is not what it was (its digest is ") && strstr(e.msg, "the run's start record says "),
	   "%s", e.msg);
	ok(access(cfg, F_OK) && errno == ENOENT, "nothing written");
	file_("m/config.json", "{}\n");
	is_int(sw_experiment_resume(&x, dir_, &pt, NULL, &done, &e), 0, "done, not ended: %s", e.msg);
	is_int(done, 0, "goes on");
	const char *text = slurp_(cfg);
	ok(strstr(text, "\niters 5\n") && strstr(text, "\nmonitor kl=off\nmonitor entropy=off\nmonitor "
	   "violation_rate=0.3,0.6,0.9\n") && !strstr(text, "kl=1,2,3"), "the config written with the options");
	pt.st.iter = 3, pt.ended = 1; /* more iterations than done: an ended run goes on */
	is_int(sw_experiment_resume(&x, dir_, &pt, NULL, &done, &e), 0, "ended, more to do");
	is_int(done, 0, "goes on");

	/* the model's digest taken by a job begun before (sw-run: while the checkpoint's is taken), the same checks */
	sw_digest_job *j = sw_digest_dir_begin(model, &e);
	ok(j != NULL, "a job begun");
	is_int(sw_experiment_resume(&x, dir_, &pt, j, &done, &e), 0, "by a job: the same model goes on: %s", e.msg);
	is_int(done, 0, "goes on");
	file_("m/config.json", "{\"changed\": 2}\n");
	unlink(cfg);
	j = sw_digest_dir_begin(model, &e);
	is_int(sw_experiment_resume(&x, dir_, &pt, j, &done, &e), SW_EFORMAT, "by a job: a model that changed");
	ok(strstr(e.msg, "is not what it was (its digest is ") != NULL, "%s", e.msg);
	ok(access(cfg, F_OK) && errno == ENOENT, "nothing written");
	char gone[600];
	snprintf(gone, sizeof gone, "%s/no-model", dir_);
	j = sw_digest_dir_begin(gone, &e);
	char *was = x.model;
	x.model = gone;
	is_int(sw_experiment_resume(&x, dir_, &pt, j, &done, &e), SW_EIO, "by a job: a model that is gone");
	ok(!strncmp(e.msg, "the model the run started from: ", 32), "%s", e.msg);
	x.model = was;
	/* a job is ended on every path: iters below those done, and done */
	j = sw_digest_dir_begin(gone, &e);
	pt.st.iter = 6;
	is_int(sw_experiment_resume(&x, dir_, &pt, j, &done, &e), SW_EINVAL, "by a job: iters below those done");
	j = sw_digest_dir_begin(model, &e);
	pt.st.iter = 5, pt.ended = 1;
	is_int(sw_experiment_resume(&x, dir_, &pt, j, &done, &e), 0, "by a job: done");
	is_int(done, 1, "nothing to do");
	file_("m/config.json", "{}\n");
	sw_experiment_release(&x);
}

int main(void)
{
	if (tmp_open("exp"))
		return 1;
	test_good_();
	test_bad_();
	test_round_trip_();
	test_resume_();
	tmp_close();
	return tap_done();
}
