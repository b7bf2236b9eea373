/*
 * fuzz_experiment.c - libFuzzer target for the experiment file reader
 * (sw_experiment_read in libsw/run/experiment.c): what `sw-run -c FILE`
 * reads, and what a run writes as its config and reads back on --resume.
 *
 * The input is the file.  What must hold:
 *
 *  - refused: a negative code, the error's, and a message that names the
 *    file and the line ("PATH: line N: ...");
 *  - accepted (with model, prompts and a run directory given where the file
 *    lacks them): written out as a run's config and read back, the same
 *    experiment, setting for setting, and written again the same bytes.
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_experiment/)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/error.h"
#include "sw/run.h"

#define FUZZ_NAME "fuzz_experiment"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

/* A file written here, whole (the inputs are at most a few hundred KiB). */
static char *slurp_(const char *path, size_t *n)
{
	static char buf[2][1 << 20];
	static int k;
	char *b = buf[k++ % 2];
	tmp_get(path, b, sizeof buf[0], n);
	CHECK(*n < sizeof buf[0] - 1, "%s is larger than the buffer", path);
	return b;
}

static int same_str_(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char in[320], out1[320], out2[320], where[340];
	snprintf(in, sizeof in, "%s/exp", fuzz_tmp());
	snprintf(out1, sizeof out1, "%s/config1", fuzz_tmp());
	snprintf(out2, sizeof out2, "%s/config2", fuzz_tmp());
	tmp_put(in, data, size);
	sw_experiment a, b;
	sw_error err = { 0 };
	sw_experiment_init(&a);
	sw_experiment_init(&b);
	int rc = sw_experiment_read(&a, in, &err);
	if (rc) {
		snprintf(where, sizeof where, "%s: line ", in);
		CHECK(rc < 0 && rc == err.code, "return %d, error code %d", rc, err.code);
		CHECK(!strncmp(err.msg, where, strlen(where)), "the message does not name the file and line: %s",
		      err.msg);
		goto out;
	}
	/* what the file lacks, from the command line (as sw-run's options) */
	if ((!a.model && sw_experiment_set(&a, "model", "m", &err)) ||
	    (!a.prompts && sw_experiment_set(&a, "prompts", "p", &err)) || sw_experiment_set(&a, "out", "o", &err))
		CHECK(0, "a setting from the command line refused: %s", err.msg);
	CHECK(sw_experiment_check(&a, &err) == 0, "accepted, but the check refuses it: %s", err.msg);
	CHECK(sw_experiment_write(&a, out1, &err) == 0, "not written: %s", err.msg);
	rc = sw_experiment_read(&b, out1, &err);
	size_t n1, n2;
	char *t1 = slurp_(out1, &n1);
	CHECK(rc == 0, "written, then refused: %s\n%.*s", err.msg, (int)n1, t1);
	CHECK(!sw_experiment_set(&b, "out", "o", &err) && !sw_experiment_check(&b, &err), "read back, then "
	      "refused: %s", err.msg);
	CHECK(same_str_(a.model, b.model) && same_str_(a.prompts, b.prompts) && same_str_(a.eval, b.eval) &&
	              same_str_(a.accuracy, b.accuracy) && same_str_(a.device, b.device) &&
	              same_str_(a.workdir, b.workdir) && same_str_(a.launcher, b.launcher),
	      "a name changed in the round trip");
	CHECK(a.iters == b.iters && a.batch == b.batch && a.group == b.group && a.seed == b.seed &&
	              a.eval_every == b.eval_every && a.ckpt_every == b.ckpt_every && a.ref == b.ref &&
	              a.keep_ckpt == b.keep_ckpt && a.ranks == b.ranks,
	      "a number or flag changed in the round trip");
	for (int s = 0; s < SW_STAGE_TAP; s++)
		CHECK(same_str_(a.cmd[s], b.cmd[s]), "stage %s: '%s' became '%s'", sw_stage_name(s), a.cmd[s], b.cmd[s]);
	CHECK(a.nmonitor == b.nmonitor, "%zu monitors became %zu", a.nmonitor, b.nmonitor);
	for (size_t i = 0; i < a.nmonitor; i++)
		CHECK(!strcmp(a.monitor[i], b.monitor[i]), "monitor '%s' became '%s'", a.monitor[i], b.monitor[i]);
	CHECK(sw_experiment_write(&b, out2, &err) == 0, "not written again: %s", err.msg);
	char *t2 = slurp_(out2, &n2);
	CHECK(n1 == n2 && !memcmp(t1, t2, n1), "written again, other bytes");
out:
	sw_experiment_release(&a);
	sw_experiment_release(&b);
	return 0;
}
