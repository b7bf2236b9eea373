/*
 * sw-verify - score samples with verifiers and combine the scores into a
 * reward: built-in rules, external programs in a sandbox, shared-object
 * plug-ins (see sw/verify.h for the library that does the work).
 *
 * Samples leave in the order they came.  Many are in flight at once so that
 * exec verifiers stay busy; whenever the input pauses, everything in flight
 * is finished and flushed, so a pipeline behind us never waits on a sample
 * we already have.  A verifier that fails on a sample marks it with
 * verifier_error and the stream goes on; bad input stops us with the
 * record named, after the samples before it are written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

enum { OPT_LABEL = 0x100, OPT_MAX_ERRORS, OPT_MIN_REWARD, OPT_WINDOW };

static const cli_opt opts[] = {
	{ 'r', 'r', "verifier", "spec", "@verifiers",
	  "add a verifier, NAME[:ARG][,KEY=VALUE...] (repeatable; exec and code run in "
	  "sandbox=strict unless the spec names basic or none; see sw-verify(1))" },
	{ OPT_LABEL, 0, "label-field", "field", NULL, "the field holding the ground truth (default label)" },
	{ OPT_MAX_ERRORS, 0, "max-errors", "fraction", NULL,
	  "exit 1 when more than this fraction of samples fail (default 0.01)" },
	{ OPT_MIN_REWARD, 0, "min-reward", "reward", NULL,
	  "the reward of a sample that breaks a hard rule (default: the lowest possible)" },
	{ OPT_WINDOW, 0, "window", "num", NULL, "samples in flight at most (default 4096)" },
	CLI_OPT_FORMAT,
	CLI_OPT_ZSTD,
	CLI_OPT_OUTPUT("write to file instead of standard output"),
	CLI_OPT_FORCE_ENTRY,
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-verify", "[file ...]", "file",
	"Score samples with verifiers and combine the scores into a reward.",
	opts, NULL
};

static sw_verify *v_;
static sw_writer *w_;
static const char *out_name_ = "stdout";

/* Workers and their directories go at any exit, cli_die's included. */
static void cleanup_(void)
{
	sw_verify_free(v_);
	v_ = NULL;
}

static void warn_(void *arg, const char *msg)
{
	(void)arg;
	if (cli_verbosity >= 0)
		cli_warn("warning: %s", msg);
}

/* A weaker sandbox the spec asked for is said even under -q; details with -v. */
static void note_(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level >= 2 || cli_verbosity > 0)
		cli_warn("%s: %s", level >= 2 ? "warning" : "note", msg);
}

static void put_(sw_rec *rec)
{
	cli_output_put(w_, out_name_, rec);
}

/* Finish every sample in flight and write it. */
static void drain_(void)
{
	sw_error err = { 0 };
	sw_rec *rec;
	int rc;
	while ((rc = sw_verify_pop(v_, &rec, 1, &err)) == 1)
		put_(rec);
	if (rc < 0)
		cli_die("%s", err.msg);
}

static void idle_(void *arg)
{
	(void)arg;
	drain_();
	sw_writer_flush(w_);
}

static double fraction_(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	double x = strtod(s, &end);
	if (!*s || *end || !isfinite(x) || x < lo || x > hi)
		cli_usage("option '%s' wants a number from %g to %g, not '%s'", opt, lo, hi, s);
	return x;
}

/*
 * Under sw-run ($SW_RUN, a run directory with its audit log): a "verifiers"
 * record of this iteration's specs and the digests of the files they name
 * (blocklists, plug-ins, exec scripts), so that the log says which reward
 * each iteration was trained on; "of" says whether the stage is an
 * iteration's or an evaluation's ($SW_EVAL=1), as sw-run's stage records do.  Signed when $SW_SIGN_KEY is set, as
 * sw-run hands it to its stages.
 */
static void record_(const char **specs, size_t nspecs)
{
	const char *run = getenv("SW_RUN"), *it = getenv("SW_ITER");
	char log[4200];
	if (!run || !*run || (size_t)snprintf(log, sizeof log, "%s/audit.log", run) >= sizeof log || access(log, F_OK))
		return;
	const char *files[512];
	size_t nf = sw_verify_files(v_, files, 512);
	if (nf > 512)
		cli_die("cannot record the verifiers in %s: they name more than 512 files", log);
	sw_error err = { 0 };
	sw_audit *a = sw_audit_open(log, &err);
	if (!a)
		cli_die("cannot record the verifiers in %s: %s", log, err.msg);
	sw_audit_rec *r = sw_audit_rec_new("verifiers");
	const char *ev = getenv("SW_EVAL"); /* an evaluation's verify stage, as its stage records say */
	if (!r || (it && sw_audit_rec_int(r, "iter", strtoll(it, NULL, 10))) ||
	    sw_audit_rec_str(r, "of", ev && !strcmp(ev, "1") ? "eval" : "iteration") ||
	    sw_audit_rec_argv(r, "specs", (int)nspecs, (char *const *)specs))
		cli_die("cannot record the verifiers in %s: out of memory, or a spec that is not UTF-8 text", log);
	if (sw_audit_rec_files(r, "files", files, nf, &err) || sw_audit_append(a, r, &err)) /* I/O messages name their file */
		cli_die("cannot record the verifiers%s%s: %s", err.code == SW_EIO ? "" : " in ", err.code == SW_EIO ? "" : log,
		        err.msg);
	sw_audit_rec_free(r);
	sw_audit_close(a);
}

int main(int argc, char **argv)
{
	const char *arg;
	const char **specs = NULL;
	size_t nspecs = 0;
	int c, optind_;
	double max_errors = 0.01;
	cli_output o = CLI_OUTPUT_INIT;
	sw_verify_opts vo = { 0 };
	vo.warn = warn_;
	vo.note = note_;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		if (cli_output_opt(&o, c, arg))
			continue;
		switch (c) {
		case 'r':
			specs = cli_realloc(specs, nspecs + 1, sizeof *specs);
			specs[nspecs++] = arg;
			break;
		case OPT_LABEL:
			if (!*arg)
				cli_usage("option '--label-field' wants a field name");
			vo.label_field = arg;
			break;
		case OPT_MAX_ERRORS:
			max_errors = fraction_("--max-errors", arg, 0, 1);
			break;
		case OPT_MIN_REWARD:
			vo.min_reward = fraction_("--min-reward", arg, -1e9, 1e9);
			vo.min_reward_set = 1;
			break;
		case OPT_WINDOW:
			vo.window = (size_t)cli_uint("--window", arg, 1, 1 << 20);
			break;
		}
	}
	if (!nspecs)
		cli_usage("no verifier: give at least one -r SPEC");
	vo.worker_stderr = cli_verbosity < 0 ? -1 : 2;

	sw_error err = { 0 };
	if (!(v_ = sw_verify_new(&vo, &err)))
		cli_die("%s", err.msg);
	atexit(cleanup_);
	for (size_t i = 0; i < nspecs; i++) {
		int rc = sw_verify_add(v_, specs[i], &err);
		if (rc == SW_EINVAL)
			cli_usage("bad verifier '%s': %s", specs[i], err.msg);
		if (rc)
			cli_die("verifier '%s': %s", specs[i], err.msg);
	}
	record_(specs, nspecs);

	int nfiles;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);
	cli_output_settle(&o);
	w_ = cli_output_open(&o, o.path);
	out_name_ = cli_output_name(o.path);

	size_t max_record = cli_max_record();
	sw_rec *rec = sw_rec_new(), *done;
	uint64_t bytes_in = 0;
	if (!rec)
		cli_die("out of memory");
	for (int i = 0; i < nfiles; i++) {
		const char *name = strcmp(files[i], "-") ? files[i] : "stdin";
		sw_reader *r = sw_reader_open(files[i], &err);
		if (!r) {
			drain_();
			cli_output_end(w_, o.path);
			cli_die("cannot open '%s': %s", files[i], strerror(err.sys_errno));
		}
		sw_reader_set_max_record(r, max_record);
		sw_reader_set_idle(r, idle_, NULL);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			while (sw_verify_full(v_)) {
				if ((rc = sw_verify_pop(v_, &done, 1, &err)) < 0)
					cli_die("%s", err.msg);
				put_(done);
			}
			if ((rc = sw_verify_push(v_, rec, sw_reader_records(r), &err))) {
				/* bad input: what came before it still goes out, properly ended */
				drain_();
				cli_output_end(w_, o.path);
				cli_die("%s: record %llu: %s", name, (unsigned long long)err.record, err.msg);
			}
			while ((rc = sw_verify_pop(v_, &done, 0, &err)) == 1)
				put_(done);
			if (rc < 0)
				cli_die("%s", err.msg);
			cli_progress(sw_verify_done(v_), bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0) {
			sw_error e = *sw_reader_error(r);
			drain_();
			cli_output_end(w_, o.path);
			cli_die_stream(name, &e);
		}
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
	}
	drain_();
	cli_output_end(w_, o.path);
	uint64_t n = sw_verify_done(v_), failed = sw_verify_failed(v_);
	cli_summary(n, bytes_in, sw_writer_bytes_out(w_));
	sw_writer_free(w_);
	sw_rec_free(rec);
	free(specs);
	uint64_t first = 0;
	const char *why = sw_verify_first_failure(v_, &first);
	if (failed && (double)failed > max_errors * (double)n)
		cli_die("%llu of %llu samples (%.1f%%) have verifier_error, more than --max-errors %g allows "
		        "(the first, sample %llu: %s)",
		        (unsigned long long)failed, (unsigned long long)n, 100.0 * (double)failed / (double)n,
		        max_errors, (unsigned long long)first + 1, why);
	if (failed && cli_verbosity >= 0)
		cli_warn("warning: %llu of %llu samples have verifier_error (the first, sample %llu: %s)",
		         (unsigned long long)failed, (unsigned long long)n, (unsigned long long)first + 1, why);
	cli_exit(0);
}
