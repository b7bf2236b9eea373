/*
 * test_rollout_vision.c - the rollout with images (libsw/rollout/pixels.c
 * and the scheduler's image prompts) on transformers' tiny LLaVA
 * (tests/fixtures/llava/tiny-llava-clip): a sample's picture preprocessed
 * and its placeholder expanded to the tower's 25 tokens; the log-probs the
 * rollout hands out with a picture are the bits sw_decoder_score_images
 * gives for the same sample, and what the trainer's forward
 * (sw_engine_forward_images) gives to rounding; and the errors.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/engine.h"
#include "sw/image.h"
#include "sw/model.h"
#include "sw/rollout.h"
#include "sw/tokenizer.h"
#include "rec.h"
#include "tap.h"
#include "tmpfiles.h"

enum { MAXS = 8, MAXT = 64 };

typedef struct out_ {
	sw_rec *in;
	int at, nin;
	char json[2][1024];
	int ns;
	uint32_t pt[MAXS][MAXT], rt[MAXS][MAXT];
	float lp[MAXS][MAXT];
	size_t npt[MAXS], nrt[MAXS], nlp[MAXS];
	char bad[256];
} out_;

static int next_(void *ctx, bool block, sw_rec **rec)
{
	(void)block;
	out_ *o = ctx;
	if (o->at == o->nin)
		return 0;
	sw_rec_free(o->in);
	o->in = json_rec(o->json[o->at++]);
	*rec = o->in;
	return 1;
}

static int put_(void *ctx, const uint8_t *mp, size_t n)
{
	out_ *o = ctx;
	sw_rec *r = sw_rec_new();
	int k = o->ns++;
	if (k >= MAXS || sw_rec_load(r, mp, n))
		return SW_EFORMAT;
	sw_rec_get_u32s(r, "prompt_tokens", o->pt[k], MAXT, &o->npt[k]);
	sw_rec_get_u32s(r, "response_tokens", o->rt[k], MAXT, &o->nrt[k]);
	sw_rec_get_f32s(r, "logprobs", o->lp[k], MAXT, &o->nlp[k]);
	sw_rec_free(r);
	return 0;
}

static void invalid_(void *ctx, const char *msg)
{
	out_ *o = ctx;
	snprintf(o->bad, sizeof o->bad, "%s", msg);
}

static int run_(const sw_model *m, const sw_tokenizer *tok, const sw_image_proc *proc, out_ *o, sw_error *err)
{
	sw_rollout_config c = sw_rollout_config_defaults();
	c.G = 3, c.batch = 4, c.max_new = 6, c.seed = 9, c.kv_bytes = 16 << 20;
	c.image_proc = proc;
	sw_rollout *r = sw_rollout_new(m, tok, &c, err);
	if (!r)
		return SW_EINVAL;
	sw_rollout_io io = { .ctx = o, .next = next_, .put = put_, .invalid = invalid_ };
	int rc = sw_rollout_run(r, &io, err);
	sw_rollout_free(r);
	return rc;
}

int main(void)
{
	sw_engine_threads(2);
	const char *top = getenv("SW_TOP");
	char dir[400], png[400];
	snprintf(dir, sizeof dir, "%s/tests/fixtures/llava/tiny-llava-clip/model", top ? top : ".");
	sw_error err = { 0 };
	sw_model *m = sw_model_load(dir, &err);
	if (!m || tmp_open("rollout-vision")) {
		printf("Bail out! %s\n", err.msg);
		return 1;
	}
	sw_image_proc *proc = NULL;
	ok(sw_image_proc_write_clip(tmp_dir_, 30, &err) == 0 && sw_image_proc_load(tmp_dir_, &proc, &err) == 0,
	   "a CLIP processor of 30 pixels: %s", err.msg);
	/* a 40 x 34 picture of a gradient: resized, cropped, normalised */
	sw_image im = { 40, 34, 3, malloc(40 * 34 * 3) };
	for (int i = 0; i < 40 * 34 * 3; i++)
		im.data[i] = (uint8_t)(i * 7 % 251);
	snprintf(png, sizeof png, "%s/p.png", tmp_dir_);
	ok(sw_image_write_png(png, &im, &err) == 0, "picture written");
	sw_tokenizer *tok = sw_tokenizer_byte();

	/* ---- sw_sample_pixels_of: the placeholder expanded, the pixels the processor's ---- */
	out_ o = { 0 };
	snprintf(o.json[0], sizeof o.json[0],
	         "{\"id\": \"a\", \"prompt_tokens\": [1, 127, 5, 6, 7], \"media\": [{\"type\": \"image\", \"path\": \"%s\"}]}",
	         png);
	o.nin = 1;
	sw_rec *rec = json_rec(o.json[0]);
	int32_t *ids = malloc(5 * sizeof *ids);
	memcpy(ids, (int32_t[]){ 1, 127, 5, 6, 7 }, sizeof(int32_t) * 5);
	size_t n = 5;
	sw_sample_pixels px = { 0 };
	int rc = sw_sample_pixels_of(rec, &m->cfg, proc, &ids, &n, &px, &err);
	ok(rc == 0 && n == 29 && px.n == 1, "one image, 5 tokens become 29: %s", err.msg);
	ok(n == 29 && ids[0] == 1 && ids[1] == 127 && ids[25] == 127 && ids[26] == 5 && ids[28] == 7,
	   "the placeholder is 25 image tokens in its place");
	float *want = malloc(sizeof(float) * 3 * 30 * 30);
	sw_image_preprocess(proc, &im, want, NULL);
	ok(px.n == 1 && !memcmp(px.pixels, want, sizeof(float) * 3 * 30 * 30), "the pixels are sw_image_preprocess's");
	/* already expanded (a rollout's prompt_tokens): left as it is */
	sw_sample_pixels px2 = { 0 };
	ok(sw_sample_pixels_of(rec, &m->cfg, proc, &ids, &n, &px2, &err) == 0 && n == 29 && px2.n == 1,
	   "an expanded prompt is taken as it is");
	sw_sample_pixels_free(&px2);
	sw_sample_pixels_free(&px2);
	/* a text-only model, and a LLaVA model without a processor */
	sw_model_config tc = m->cfg;
	tc.vision.model_type[0] = 0;
	rc = sw_sample_pixels_of(rec, &tc, proc, &ids, &n, &px2, &err);
	ok(rc == SW_EFORMAT && !strcmp(err.msg, "the sample has 1 image and the model is text only (not LLaVA)"),
	   "text-only model: %s", err.msg);
	rc = sw_sample_pixels_of(rec, &m->cfg, NULL, &ids, &n, &px2, &err);
	ok(rc == SW_EINVAL && px2.n == 0 && px2.pixels == NULL, "no processor: %s", err.msg);
	sw_rec_free(rec);
	free(ids);

	/* ---- the rollout's log-probs are the decoder's and the trainer's ---- */
	rc = run_(m, tok, proc, &o, &err);
	ok(rc == 0 && o.ns == 3, "rollout: 3 samples of a prompt with a picture: %s", err.msg);
	sw_decoder *d = sw_decoder_new(m, 4, 4096, &err);
	sw_engine *e = sw_engine_new(m, &err);
	sw_images imgs = { 1, px.pixels };
	bool same_bits = o.ns == 3, close = o.ns == 3, expanded = o.ns == 3;
	double worst = 0;
	for (int k = 0; k < o.ns && k < 3; k++) {
		int pl = (int)o.npt[k], rl = (int)o.nrt[k], T = pl + rl;
		int32_t tk[MAXT * 2], tg[MAXT * 2], cu[2] = { 0, T };
		float lp[MAXT * 2], elp[MAXT * 2];
		expanded = expanded && pl == 29 && o.nlp[k] == (size_t)rl;
		for (int i = 0; i < pl; i++)
			tk[i] = (int32_t)o.pt[k][i];
		for (int i = 0; i < rl; i++)
			tk[pl + i] = (int32_t)o.rt[k][i];
		for (int i = 0; i < T; i++)
			tg[i] = i + 1 < T ? tk[i + 1] : 0;
		if (sw_decoder_score_images(d, tk, T, &imgs, lp, NULL, &err)) {
			printf("# score: %s\n", err.msg);
			same_bits = close = false;
			break;
		}
		sw_batch b = { 1, tk, cu, tg, NULL };
		if (sw_engine_forward_images(e, &b, &imgs, false, elp, NULL, &err)) {
			printf("# forward: %s\n", err.msg);
			close = false;
		}
		for (int j = 0; j < rl; j++) {
			same_bits = same_bits && lp[pl - 1 + j] == o.lp[k][j];
			worst = fmax(worst, fabs((double)elp[pl - 1 + j] - o.lp[k][j]));
		}
	}
	ok(expanded, "samples: prompt_tokens expanded (29), a log-prob per response token");
	ok(same_bits, "rollout log-probs with a picture: sw_decoder_score_images's bits");
	ok(close && worst < 1e-5, "and the trainer's forward with the picture to 1e-5 (%.2g)", worst);

	/* ---- bad media: the record is invalid, named ---- */
	out_ b = { 0 };
	snprintf(b.json[0], sizeof b.json[0],
	         "{\"prompt_tokens\": [1, 127, 127, 5], \"media\": [{\"type\": \"image\", \"path\": \"%s\"}]}", png);
	b.nin = 1;
	rc = run_(m, tok, proc, &b, &err);
	ok(rc == SW_EFORMAT && !strcmp(b.bad, "the prompt has 2 image placeholders for 1 image in 'media'"),
	   "two placeholders, one image: %s", b.bad);
	out_ c = { 0 };
	snprintf(c.json[0], sizeof c.json[0],
	         "{\"prompt_tokens\": [1, 127, 5], \"media\": [{\"type\": \"image\", \"path\": \"%s/none.png\"}]}",
	         tmp_dir_);
	c.nin = 1;
	rc = run_(m, tok, proc, &c, &err);
	ok(rc == SW_EFORMAT && strstr(c.bad, "media[0]: file '") && strstr(c.bad, "none.png': No such file"),
	   "a missing file: %s", c.bad);

	sw_rec_free(o.in), sw_rec_free(b.in), sw_rec_free(c.in);
	sw_decoder_free(d);
	sw_engine_free(e);
	sw_sample_pixels_free(&px);
	free(want), free(im.data);
	sw_tokenizer_free(tok);
	sw_image_proc_free(proc);
	sw_model_free(m);
	tmp_close();
	return tap_done();
}
