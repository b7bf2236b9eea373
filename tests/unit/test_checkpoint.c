/*
 * test_checkpoint.c - a run directory's checkpoints: saved from the
 * stores, the pool and the loop's state; restored into fresh stores with
 * the same bytes; a damaged one an error naming the file.  Every store
 * made here has a random name and is removed before the test ends.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tmpfiles.h"

#define dir_ tmp_dir_

static void spec_(char *buf, size_t n)
{
	sw_error e = { 0 };
	if (sw_store_name_random("swtest", buf, n, &e))
		abort();
}

int main(void)
{
	if (tmp_open("ckpt"))
		return 1;
	char run[512], model[512], p[800], q[800], name[64], ck[600];
	sw_error e = { 0 };
	snprintf(run, sizeof run, "%s/run", dir_);
	const char *top = getenv("SW_TOP");
	snprintf(model, sizeof model, "%s/tests/fixtures/models/tiny-llama", top ? top : ".");

	is_int(sw_rundir_create(run, &e), 0, "a run directory: %s", e.msg);
	snprintf(p, sizeof p, "%s/samples", run);
	ok(access(p, F_OK) == 0, "with samples/");
	snprintf(p, sizeof p, "%s/empty", dir_);
	mkdir(p, 0755);
	is_int(sw_rundir_create(p, &e), 0, "an empty directory may be one");
	snprintf(p, sizeof p, "%s/pool", run);
	tmp_put(p, "pool bytes", 10);
	is_int(sw_rundir_create(run, &e), SW_EINVAL, "one that holds something may not");
	ok(strstr(e.msg, "exists and is not empty") != NULL, "%s", e.msg);

	/* the stores of a run after some steps */
	char ws[128], os[128], ws2[128], os2[128];
	spec_(ws, sizeof ws), spec_(os, sizeof os), spec_(ws2, sizeof ws2), spec_(os2, sizeof os2);
	sw_store *w = sw_store_create_from_model(ws, model, 3, &e), *opt = sw_store_create(os, NULL, 1000, &e);
	ok(w && opt, "stores made: %s", e.msg);
	if (!w || !opt)
		return tap_done();
	/* sw-train's optimiser store: "SWADAMW1", parameters, updates, version, the shuffle's state; the moments */
	float *oa = sw_store_arena(opt);
	uint64_t hdr[8] = { 0, 492, 7, 5, 11, 22, 33, 44 };
	memcpy(hdr, "SWADAMW1", 8);
	memcpy(oa, hdr, sizeof hdr);
	for (size_t i = 16; i < 1000; i++)
		oa[i] = (float)i * 0.25f;
	ok(!sw_store_publish(opt, 5, &e), "published");

	sw_ckpt_state st = { .iter = 2, .lr_scale = 0.5, .history = { 12, NAN, 0.75 } };
	sw_digests *wd = NULL;
	is_int(sw_checkpoint_save(run, model, w, opt, &st, name, sizeof name, &wd, &e), 0, "saved: %s", e.msg);
	ok(!strcmp(name, "ckpt/iter-0002"), "named %s", name);
	/* the weights and the optimiser state with their digests as written: those of the files saved */
	for (int i = 0; i < 2 && wd; i++) {
		static const char *const big[] = { "model.safetensors", "optimizer.bin" };
		unsigned char h[SW_DIGEST_LEN];
		char hx[SW_DIGEST_HEX], fx[SW_DIGEST_HEX];
		uint64_t size;
		struct stat sb;
		snprintf(p, sizeof p, "%s/%s/%s", run, name, big[i]);
		ok(!sw_digests_get(wd, big[i], &size, h) && !stat(p, &sb) && size == (uint64_t)sb.st_size,
		   "%s: noted with its size", big[i]);
		for (int k = 0; k < SW_DIGEST_LEN; k++)
			snprintf(hx + 2 * k, 3, "%02x", h[k]);
		ok(!sw_digest_file(p, fx, &e) && !strcmp(hx, fx), "%s: its digest as written is the file's", big[i]);
	}
	uint64_t size0;
	unsigned char h0[SW_DIGEST_LEN];
	ok(wd && sw_digests_get(wd, "state.json", &size0, h0) == SW_ENOENT, "the small files are not noted: read");
	sw_digests_free(wd);
	static const char *const files[] = { "config.json", "model.safetensors", "generation_config.json",
	                                     "optimizer.bin", "trainer_state.json", "pool", "state.json" };
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		snprintf(p, sizeof p, "%s/%s/%s", run, name, files[i]);
		ok(access(p, F_OK) == 0, "it holds %s", files[i]);
	}
	snprintf(p, sizeof p, "%s/ckpt/.iter-0002.tmp", run);
	ok(access(p, F_OK) != 0, "no temporary left");
	char latest[64] = "";
	is_int(sw_checkpoint_latest(run, latest, sizeof latest, &e), SW_EIO, "not the resume point before it is marked");
	is_int(sw_checkpoint_mark(run, name, &e), 0, "marked: %s", e.msg);
	is_int(sw_checkpoint_latest(run, latest, sizeof latest, &e), 0, "the latest");
	ok(!strcmp(latest, name), "is it: %s", latest);
	/* state names a checkpoint of the run and nothing else */
	static const char *const bad[] = { "../other/ckpt/iter-0002", "ckpt/iter-0002/../../x", "ckpt/iter-02",
	                                   "ckpt/iter-", "/tmp/ckpt/iter-0002", "ckpt/iter-0002x", "" };
	snprintf(p, sizeof p, "%s/state", run);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		tmp_put(p, bad[i], strlen(bad[i]));
		int rc = sw_checkpoint_latest(run, latest, sizeof latest, &e);
		ok(rc == SW_EFORMAT || (!*bad[i] && rc == SW_EIO), "state '%s' refused: %d", bad[i], rc);
		ok(rc == SW_EIO || strstr(e.msg, "not a checkpoint of the run (ckpt/iter-NNNN)"), "%s", e.msg);
	}
	is_int(sw_checkpoint_mark(run, name, &e), 0, "marked again");

	/* the resume point: only once the audit log records the checkpoint, and only as recorded */
	static sw_ckpt_point pt;
	is_int(sw_checkpoint_resume_point(run, &pt, &e), SW_EIO, "no audit log: no resume point");
	sw_runlog *log = sw_runlog_open(run, &e);
	ok(log != NULL, "a log: %s", e.msg);
	is_int(sw_checkpoint_resume_point(run, &pt, &e), SW_EEMPTY, "an empty log vouches for nothing");
	is_int(sw_runlog_event(log, "run_start", 0, NULL, NULL, &e), 0, "a first record");
	is_int(sw_checkpoint_resume_point(run, &pt, &e), SW_EFORMAT, "a checkpoint the log does not record");
	ok(strstr(e.msg, "cannot resume from ") && strstr(e.msg, "no record of the audit log names it"), "%s", e.msg);
	is_int(sw_runlog_checkpoint(log, 2, "test", 3, name, 0.1, NULL, &e), 0, "recorded: %s", e.msg);
	is_int(sw_checkpoint_resume_point(run, &pt, &e), 0, "now it is the resume point: %s", e.msg);
	snprintf(p, sizeof p, "%s/%s", run, name);
	char dg[SW_DIGEST_HEX];
	ok(!strcmp(pt.name, name) && !strcmp(pt.dir, p) && !sw_digest_dir(p, dg, &e) && !strcmp(pt.digest, dg) &&
	   pt.st.iter == 2 && pt.st.lr_scale == 0.5 && pt.st.weight_version == 3, "its name, path, digest and state");
	is_int(pt.ended, 0, "the run has not ended");
	ok(pt.seal != NULL, "its files sealed");
	is_int(sw_checkpoint_loaded(&pt, &e), 0, "nothing changed since: %s", e.msg);
	ok(pt.seal == NULL, "the seal freed");
	is_int(sw_runlog_end(log, 2, 3, &e), 0, "its end: %s", e.msg);
	is_int(sw_checkpoint_resume_point(run, &pt, &e), 0, "still the resume point: %s", e.msg);
	is_int(pt.ended, 1, "of a run that ended");
	/* a file changed after the check (the bytes the check read are not those loaded) */
	snprintf(p, sizeof p, "%s/%s/pool", run, name);
	tmp_put(p, "pool bytes", 10);
	is_int(sw_checkpoint_loaded(&pt, &e), SW_EFORMAT, "a file written to after the check");
	snprintf(p, sizeof p, "cannot resume: '%s/%s' changed while it was read: file 'pool' was changed", run, name);
	ok(!strcmp(e.msg, p), "%s", e.msg);
	ok(pt.seal == NULL && sw_checkpoint_loaded(&pt, &e) == 0, "the seal freed either way");
	snprintf(p, sizeof p, "%s/%s/pool", run, name);
	tmp_put(p, "pool bytez", 10);
	is_int(sw_checkpoint_resume_point(run, &pt, &e), SW_EFORMAT, "a changed file refused");
	ok(pt.seal == NULL, "and its seal freed");
	ok(strstr(e.msg, "does not match its digest: file 'pool' changed") != NULL, "%s", e.msg);
	tmp_put(p, "pool bytes", 10);
	sw_runlog_close(log);

	/* restore into fresh stores, as a resumed run does */
	snprintf(ck, sizeof ck, "%s/%s", run, name);
	sw_ckpt_state got;
	is_int(sw_checkpoint_state(ck, &got, &e), 0, "its state: %s", e.msg);
	ok(got.iter == 2 && got.lr_scale == 0.5 && got.weight_version == 3 && got.opt_version == 5 &&
	   got.opt_floats == 1000, "iteration, scale, versions, size");
	ok(got.history.first_len == 12 && isnan(got.history.eval_reward) && got.history.eval_accuracy == 0.75,
	   "the monitors' history, NaN as none");
	snprintf(p, sizeof p, "%s/pool", run);
	tmp_put(p, "changed since", 13);
	sw_store *w2 = sw_store_create_from_model(ws2, ck, got.weight_version, &e), *opt2 = NULL;
	ok(w2 != NULL, "weights loaded from it: %s", e.msg);
	is_int(sw_checkpoint_restore(ck, run, &got, w2, &opt2, os2, &e), 0, "restored: %s", e.msg);
	ok(w2 && !memcmp(sw_store_arena(w2), sw_store_arena(w), sw_store_nfloats(w) * sizeof(float)),
	   "the same weight bytes");
	ok(opt2 && sw_store_nfloats(opt2) == 1000 && sw_store_version(opt2) == 5 &&
	   !memcmp(sw_store_arena(opt2), sw_store_arena(opt), 1000 * sizeof(float)),
	   "the same optimiser bytes and version");
	char buf[64] = "";
	size_t n = 0;
	tmp_get(p, buf, sizeof buf, &n);
	ok(n == 10 && !memcmp(buf, "pool bytes", 10), "the pool as it was");

	/* damage */
	got.weight_version = 4;
	is_int(sw_checkpoint_restore(ck, run, &got, w2, &opt2, os2, &e), SW_EINVAL, "weights of another version");
	ok(strstr(e.msg, "the weights are version 3, the checkpoint says 4") != NULL, "%s", e.msg);
	got.weight_version = 3;
	snprintf(q, sizeof q, "%s/optimizer.bin", ck);
	if (truncate(q, 3999))
		abort();
	is_int(sw_checkpoint_restore(ck, run, &got, w2, &opt2, os2, &e), SW_EFORMAT, "a cut optimizer.bin");
	ok(strstr(e.msg, q) != NULL, "names it: %s", e.msg);
	if (truncate(q, 4001))
		abort();
	is_int(sw_checkpoint_restore(ck, run, &got, w2, &opt2, os2, &e), SW_EFORMAT, "a padded one");
	snprintf(q, sizeof q, "%s/state.json", ck);
	tmp_put(q, "{\"iter\":2,\"lr_scale\":1}\n", 24);
	is_int(sw_checkpoint_state(ck, &got, &e), SW_EFORMAT, "a state.json without its versions");
	ok(strstr(e.msg, q) && strstr(e.msg, ": field 'weight_version' is missing or not a count"), "names it: %s", e.msg);
	tmp_put(q, "{\"iter\":2,\"lr_scale\":\"1\",\"weight_version\":3,\"opt_version\":5,\"opt_floats\":1}\n", 76);
	is_int(sw_checkpoint_state(ck, &got, &e), SW_EFORMAT, "a state.json whose lr_scale is a string");
	ok(strstr(e.msg, ": field 'lr_scale' is missing or not a number") != NULL, "names it: %s", e.msg);
	tmp_put(q, "{\"iter\":", 8);
	ok(sw_checkpoint_state(ck, &got, &e) < 0, "a cut state.json");
	ok(strstr(e.msg, "cannot read the checkpoint's state: ") && strstr(e.msg, q), "names it and why: %s", e.msg);
	static const char *const scales[] = { "0", "-0.5", "1.5", "1.0000001", "null" };
	for (size_t i = 0; i < sizeof scales / sizeof *scales; i++) {
		char js[200];
		int len = snprintf(js, sizeof js, "{\"iter\":2,\"lr_scale\":%s,\"weight_version\":3,\"opt_version\":5,"
		                   "\"opt_floats\":1000}\n", scales[i]);
		tmp_put(q, js, (size_t)len);
		is_int(sw_checkpoint_state(ck, &got, &e), SW_EFORMAT, "lr_scale %s refused", scales[i]);
		ok(strstr(e.msg, q) && (strstr(e.msg, "not in (0, 1]") || strstr(e.msg, "field 'lr_scale' is missing or not a number")), "%s", e.msg);
	}

	/* a checkpoint from before the trainer's first step: no optimiser state, and a later one is removed */
	st.iter = 0;
	is_int(sw_checkpoint_save(run, model, w, NULL, &st, name, sizeof name, NULL, &e), 0, "saved without one");
	snprintf(ck, sizeof ck, "%s/%s", run, name);
	snprintf(p, sizeof p, "%s/optimizer.bin", ck);
	ok(access(p, F_OK) != 0, "no optimizer.bin");
	ok(!sw_checkpoint_state(ck, &got, &e) && got.opt_floats == 0, "opt_floats 0");
	is_int(sw_checkpoint_restore(ck, run, &got, w2, &opt2, os2, &e), 0, "restored: %s", e.msg);
	ok(opt2 == NULL && !sw_store_open(os2, false, NULL), "the optimiser store is gone");
	ok(!sw_checkpoint_latest(run, latest, sizeof latest, &e) && !strcmp(latest, "ckpt/iter-0002"),
	   "state names the one marked, not the newest saved");
	is_int(sw_checkpoint_mark(run, name, &e), 0, "marked");
	ok(!sw_checkpoint_latest(run, latest, sizeof latest, &e) && !strcmp(latest, "ckpt/iter-0000"),
	   "state names the newest");
	snprintf(p, sizeof p, "%s/nowhere", dir_);
	is_int(sw_checkpoint_latest(p, latest, sizeof latest, &e), SW_EIO, "no run there");
	ok(strstr(e.msg, "is no run directory sw-run can resume") != NULL, "%s", e.msg);

	is_int(sw_rundir_halt(run, 3, "monitor 'kl' at 9", &e), 0, "a HALT");
	snprintf(p, sizeof p, "%s/HALT", run);
	tmp_get(p, buf, sizeof buf, NULL);
	ok(!strcmp(buf, "iteration 3: monitor 'kl' at 9\n"), "saying why: %s", buf);
	is_int(sw_rundir_resume(run, 2, &e), 0, "ready to resume");
	ok(access(p, F_OK) != 0, "HALT gone");

	sw_store_close(w), sw_store_close(opt), sw_store_close(w2), sw_store_close(opt2);
	sw_store_unlink(ws, NULL), sw_store_unlink(os, NULL), sw_store_unlink(ws2, NULL), sw_store_unlink(os2, NULL);
	tmp_close();
	return tap_done();
}
