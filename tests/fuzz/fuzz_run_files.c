/*
 * fuzz_run_files.c - libFuzzer target for the small files a run and a
 * generator read besides streams and models: a model directory's
 * generation_config.json (its end tokens, read by sw-rollout from any model,
 * libsw/rollout/genconfig.c), a checkpoint's state.json and a run's `state`
 * (the resume point, libsw/run/checkpoint.c; sw-run --resume).
 *
 * The input's first byte says what the rest is (its value mod 3).  What must
 * hold:
 *
 *  - generation_config.json: refused with a negative code and a message
 *    that names the file; or accepted with at most the room given of end
 *    tokens, each inside the vocabulary;
 *  - state.json: refused with a negative code and a message that names the
 *    file; or accepted with a learning-rate scale in (0, 1];
 *  - state: refused with a negative code and a message; or accepted as
 *    "ckpt/iter-" and 4 to 20 digits, nothing else (a resume point outside
 *    the run is never taken).
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_run_files/)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/error.h"
#include "sw/rollout.h"
#include "sw/run.h"

#define FUZZ_NAME "fuzz_run_files"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

static void genconfig_(const uint8_t *p, size_t n)
{
	char path[320];
	snprintf(path, sizeof path, "%s/generation_config.json", fuzz_tmp());
	tmp_put(path, p, n);
	int32_t ids[8];
	int got = 0, vocab = 1000;
	sw_error err = { 0 };
	int rc = sw_rollout_generation_eos(fuzz_tmp(), vocab, ids, 8, &got, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && strstr(err.msg, path), "return %d, code %d: %s", rc, err.code, err.msg);
		return;
	}
	CHECK(got >= 0 && got <= 8, "%d end tokens in room for 8", got);
	for (int i = 0; i < got; i++)
		CHECK(ids[i] >= 0 && ids[i] < vocab, "end token %d outside the vocabulary", ids[i]);
}

static void state_json_(const uint8_t *p, size_t n)
{
	char path[320];
	snprintf(path, sizeof path, "%s/state.json", fuzz_tmp());
	tmp_put(path, p, n);
	sw_ckpt_state st;
	sw_error err = { 0 };
	int rc = sw_checkpoint_state(fuzz_tmp(), &st, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && strstr(err.msg, path), "return %d, code %d: %s", rc, err.code, err.msg);
		return;
	}
	CHECK(st.lr_scale > 0 && st.lr_scale <= 1, "learning-rate scale %g", st.lr_scale);
}

static void state_(const uint8_t *p, size_t n)
{
	char path[320], name[256];
	snprintf(path, sizeof path, "%s/state", fuzz_tmp());
	tmp_put(path, p, n);
	sw_error err = { 0 };
	int rc = sw_checkpoint_latest(fuzz_tmp(), name, sizeof name, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && err.msg[0], "return %d, code %d", rc, err.code);
		return;
	}
	size_t d = strspn(name + 10, "0123456789");
	CHECK(!strncmp(name, "ckpt/iter-", 10) && d >= 4 && d <= 20 && !name[10 + d], "accepted '%s'", name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0: genconfig_(data + 1, size - 1); break;
	case 1: state_json_(data + 1, size - 1); break;
	default: state_(data + 1, size - 1); break;
	}
	return 0;
}
