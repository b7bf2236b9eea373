/*
 * test_cost_llava.c - the cost model (libsw/balance/cost.c) of a LLaVA
 * model: every picture, whatever its size, is the tower's patch count
 * (sw_model_image_tokens: the processor resizes and crops it to the
 * tower's square), in patches and in the decoder's tokens; the tower's
 * sizes from vision_config (CLIP's names).
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/cost.h"
#include "sw/model.h"
#include "sw/tokenizer.h"
#include "rec.h"
#include "tap.h"
#include "tmpfiles.h"

static int cost_(sw_cost_model *m, const char *json, sw_cost *c, sw_error *e)
{
	sw_rec *r = json_rec(json);
	int rc = sw_cost_sample(m, r, c, e);
	sw_rec_free(r);
	return rc;
}

int main(void)
{
	const char *top = getenv("SW_TOP");
	char src[400], path[600];
	static char buf[1 << 16];
	size_t n;
	snprintf(src, sizeof src, "%s/tests/fixtures/llava/tiny-llava-clip/model/config.json", top ? top : ".");
	if (tmp_open("cost-llava")) {
		printf("Bail out! no scratch directory\n");
		return 1;
	}
	tmp_get(src, buf, sizeof buf, &n);
	snprintf(path, sizeof path, "%s/config.json", tmp_dir_);
	tmp_put(path, buf, n);
	sw_error e = { 0 };
	ok(n > 0 && sw_tokenizer_save_byte(tmp_dir_, &e) == 0, "a LLaVA directory (transformers' tiny CLIP LLaVA)");
	sw_cost_model *m = sw_cost_model_load(tmp_dir_, &e);
	ok(m != NULL, "its cost model loads: %s", e.msg);
	if (m) {
		sw_cost_params p;
		sw_cost_model_params(m, &p);
		/* tower: 3 layers, hidden 32, intermediate 37 (the fixture's CLIP) */
		ok(p.image_tokens == 25 && p.merge == 1, "an image is 25 patches, unmerged (%d, merge %d)", p.image_tokens,
		   p.merge);
		sw_cost c;
		ok(cost_(m, "{\"prompt_tokens\":[1,2],\"media\":[{\"type\":\"image\",\"w\":640,\"h\":480}]}", &c, &e) == 0 &&
		   c.patches == 25 && c.media_tokens == 25, "a 640 x 480 picture: 25 patches, 25 tokens (%llu, %llu)",
		   (unsigned long long)c.patches, (unsigned long long)c.media_tokens);
		ok(cost_(m, "{\"prompt_tokens\":[1],\"media\":[{\"type\":\"image\",\"w\":12,\"h\":12},"
		            "{\"type\":\"image\",\"w\":30,\"h\":30}]}", &c, &e) == 0 &&
		   c.patches == 50 && c.media_tokens == 50 &&
		   c.media == 2 * (p.enc_linear * 25 + p.enc_attention * 25 * 25),
		   "two pictures of any size: 50, priced per picture");
		ok(cost_(m, "{\"prompt_tokens\":[1],\"media\":[{\"type\":\"image\"}]}", &c, &e) == SW_EFORMAT,
		   "a picture without a size or a path is still an error: %s", e.msg);
		sw_cost_model_free(m);
	}
	/* the default model (Qwen2-VL's tower) still counts by the picture's size */
	sw_cost_model *d = sw_cost_model_new();
	sw_cost c;
	ok(d && cost_(d, "{\"prompt_tokens\":[1],\"media\":[{\"type\":\"image\",\"w\":56,\"h\":56}]}", &c, &e) == 0 &&
	   c.patches == 16 && c.media_tokens == 4, "the default: 56 x 56 in 14-pixel patches is 16, 4 tokens");
	sw_cost_model_free(d);
	tmp_close();
	return tap_done();
}
