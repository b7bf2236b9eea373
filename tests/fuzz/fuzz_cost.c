/*
 * fuzz_cost.c - libFuzzer target for what the cost model reads from files
 * (libsw/balance/cost.c, behind sw-sort and sw-balance --model): a
 * model's config.json of any family, and the headers of the pictures
 * (PNG, JPEG) and sounds (WAV) that samples name by path.
 *
 * The input's first byte says what the rest is (its value mod 3): a
 * config.json, an image file or a WAV file.  What must hold:
 *
 *  - config.json: refused with a negative code and a message that starts
 *    with the file's path; or accepted with coefficients that
 *    sw_cost_model_from accepts (finite, >= 0, sizes >= 1), and a sample
 *    of text, a picture and a video priced at a finite cost >= 0;
 *  - a picture or sound: a sample naming the file is refused with a
 *    message that names the file, or priced at a finite cost >= 0 (a
 *    picture: with at least one patch).
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_cost/)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/cost.h"
#include "sw/error.h"
#include "sw/record.h"
#include "sw/stream.h"
#include "sw/tokenizer.h"

#define FUZZ_NAME "fuzz_cost"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

/* The sample of JSON text json, priced by m: its rc, and the cost. */
static int price_(const sw_cost_model *m, const char *json, sw_cost *c, sw_error *err)
{
	sw_error e = { 0 };
	sw_reader *rd = sw_reader_memopen(json, strlen(json), "sample", &e);
	sw_rec *rec = sw_rec_new();
	CHECK(rd && rec && sw_reader_next(rd, rec) == 1, "the sample does not read: %s", e.msg);
	memset(err, 0, sizeof *err);
	int rc = sw_cost_sample(m, rec, c, err);
	sw_rec_free(rec);
	sw_reader_free(rd);
	if (rc)
		CHECK(rc < 0 && rc == err->code && err->msg[0], "return %d, error code %d", rc, err->code);
	else
		CHECK(isfinite(c->total) && c->total >= 0 && c->linear >= 0 && c->attention >= 0 && c->media >= 0,
		      "cost %g (%g + %g + %g)", c->total, c->linear, c->attention, c->media);
	return rc;
}

static void config_(const uint8_t *p, size_t n)
{
	char path[320];
	snprintf(path, sizeof path, "%s/config.json", fuzz_tmp());
	tmp_put(path, p, n);
	sw_error err = { 0 };
	sw_cost_model *m = sw_cost_model_load(fuzz_tmp(), &err);
	if (!m) {
		CHECK(err.code < 0 && !strncmp(err.msg, path, strlen(path)), "refused, but the message does not "
		      "name the file: %s", err.msg);
		return;
	}
	sw_cost_params cp;
	sw_cost_model_params(m, &cp);
	sw_cost_model *again = sw_cost_model_from(&cp, &err);
	CHECK(again != NULL, "accepted, with coefficients sw_cost_model_from refuses: %s", err.msg);
	sw_cost_model_free(again);
	sw_cost c;
	int rc = price_(m,
	                "{\"prompt\": \"h\\u00e9llo\", \"response\": \"x\", \"media\": [{\"type\": \"image\", \"w\": 640, "
	                "\"h\": 480}, {\"type\": \"video\", \"frames\": [{\"w\": 64, \"h\": 64}]}]}",
	                &c, &err);
	CHECK(rc == 0 && c.patches >= 2 && c.tokens >= 2, "a plain sample: rc %d (%s), %llu patches", rc, err.msg,
	      (unsigned long long)c.patches);
	sw_cost_model_free(m);
}

static void media_(const uint8_t *p, size_t n, int image)
{
	static sw_cost_model *m;
	if (!m)
		CHECK((m = sw_cost_model_new()) != NULL, "out of memory");
	char path[320], json[480];
	snprintf(path, sizeof path, "%s/media", fuzz_tmp());
	tmp_put(path, p, n);
	snprintf(json, sizeof json, "{\"prompt\": \"x\", \"media\": [{\"type\": \"%s\", \"path\": \"%s\"}]}",
	         image ? "image" : "audio", path);
	sw_cost c;
	sw_error err;
	if (price_(m, json, &c, &err)) {
		CHECK(strstr(err.msg, path) != NULL, "refused, but the message does not name the file: %s", err.msg);
		return;
	}
	if (image)
		CHECK(c.patches >= 1, "a picture of no patches");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int tok;
	if (!tok++) {
		sw_error err = { 0 };
		CHECK(sw_tokenizer_save_byte(fuzz_tmp(), &err) == 0, "cannot write a tokenizer: %s", err.msg);
	}
	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		config_(data + 1, size - 1);
		break;
	default:
		media_(data + 1, size - 1, data[0] % 3 == 1);
	}
	return 0;
}
