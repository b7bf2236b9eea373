/*
 * fuzz_image_proc.c - libFuzzer target for the preprocessor_config.json reader.
 *
 * The input is a preprocessor_config.json.  What must hold:
 *
 *  - a refused input gets a negative code and a message that starts with
 *    the file's name;
 *  - an accepted one has an output of 1 to 8192 pixels a side, and
 *    preprocesses a small gray, RGB and RGBA picture into that many finite
 *    floats (the output is sized exactly: ASan sees a write past it).
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_image_proc -dict=tests/fuzz/fuzz_image_proc.dict build-fuzz/corpus-fuzz_image_proc
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/image.h"

#define MAX_OUT (512 * 512) /* larger outputs are only checked for their size */

#define FUZZ_NAME "fuzz_image_proc"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sw_image_proc *p = NULL;
	sw_error err = { 0 };
	int rc = sw_image_proc_parse((const char *)data, size, "fuzz/pc.json", &p, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && !p, "return %d, error code %d", rc, err.code);
		CHECK(!strncmp(err.msg, "fuzz/pc.json: ", 14), "message without the file: %s", err.msg);
		return 0;
	}
	int h = 0, w = 0;
	sw_image_proc_size(p, &h, &w);
	CHECK(h >= 1 && w >= 1 && h <= 8192 && w <= 8192, "output %d x %d", h, w);
	if ((size_t)h * w <= MAX_OUT) {
		uint8_t px[7 * 5 * 4];
		for (size_t i = 0; i < sizeof px; i++)
			px[i] = (uint8_t)(i * 53);
		for (int c = 1; c <= 4; c++) {
			if (c == 2)
				continue;
			sw_image im = { 7, 5, c, px };
			float *out = malloc((size_t)3 * h * w * sizeof *out);
			CHECK(out != NULL, "out of memory");
			rc = sw_image_preprocess(p, &im, out, &err);
			CHECK(rc == 0 || (c != 3 && rc == SW_EINVAL), "%d channels not preprocessed: %s", c, err.msg);
			for (size_t i = 0; !rc && i < (size_t)3 * h * w; i++)
				CHECK(!isnan(out[i]), "value %zu is NaN", i);
			free(out);
		}
	}
	sw_image_proc_free(p);
	return 0;
}
