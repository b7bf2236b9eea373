/*
 * fuzz_image.c - libFuzzer target for the PNG and JPEG decoders.
 *
 * The input is a file's bytes.  What must hold:
 *
 *  - a refused input gets a negative code, the same in the error, a
 *    message, and no pixels;
 *  - an accepted one is 1 to 2^20 pixels (the limit this target sets, so
 *    that an input claiming a huge picture cannot eat the memory) of 1, 3 or
 *    4 channels, every byte of it readable (ASan sees a short buffer);
 *  - preprocessed by the tiny-vl model's processor (CLIP, 30 x 30), every
 *    value is finite and within what 8-bit pixels normalised can give,
 *    however long and thin it is (tests/fuzz/crashes/fuzz_image/ keeps a
 *    29989 x 23 picture once refused: resized to 39116 x 30, of which the
 *    processor now makes only the crop).
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_image -dict=tests/fuzz/fuzz_image.dict build-fuzz/corpus-fuzz_image
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "image/image_internal.h"

#define LIMIT ((uint64_t)1 << 20)

#define FUZZ_NAME "fuzz_image"
#include "fuzz_check.h"

static const char clip30_[] =
	"{\"crop_size\": {\"height\": 30, \"width\": 30}, \"do_center_crop\": true, \"do_normalize\": true,"
	" \"do_rescale\": true, \"do_resize\": true, \"image_mean\": [0.48145466, 0.4578275, 0.40821073],"
	" \"image_processor_type\": \"CLIPImageProcessor\", \"image_std\": [0.26862954, 0.26130258, 0.27577711],"
	" \"resample\": 3, \"rescale_factor\": 0.00392156862745098, \"size\": {\"shortest_edge\": 30}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sw_image_proc *proc;
	sw_error err = { 0 };
	if (!proc)
		CHECK(sw_image_proc_parse(clip30_, strlen(clip30_), "clip30", &proc, &err) == 0, "%s", err.msg);
	sw_image im;
	int rc = sw_image_decode_limit(data, size, LIMIT, &im, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && err.msg[0], "return %d, error code %d, '%s'", rc, err.code, err.msg);
		CHECK(!im.data && !im.w, "pixels left after an error");
		return 0;
	}
	CHECK(im.w >= 1 && im.h >= 1 && (uint64_t)im.w * im.h <= LIMIT, "%d x %d", im.w, im.h);
	CHECK(im.c == 1 || im.c == 3 || im.c == 4, "%d channels", im.c);
	unsigned sum = 0;
	for (size_t i = 0; i < (size_t)im.w * im.h * im.c; i++)
		sum += im.data[i];
	float *out = malloc(3 * 30 * 30 * sizeof *out);
	CHECK(out != NULL, "out of memory");
	rc = sw_image_preprocess(proc, &im, out, &err);
	CHECK(rc == 0, "a decoded picture is not preprocessed: %s", err.msg);
	for (int i = 0; i < 3 * 30 * 30; i++)
		CHECK(isfinite(out[i]) && out[i] > -2.0f && out[i] < 2.2f, "value %d is %g (sum %u)", i, out[i], sum);
	free(out);
	sw_image_release(&im);
	return 0;
}
