/*
 * pixels.c - a sample's images for a LLaVA model (sw/rollout.h,
 * sw_sample_pixels): its `media` pictures decoded and preprocessed by the
 * model's image processor, and its prompt's image placeholders expanded
 * to the tower's patch count, as transformers' LlavaProcessor does.  The
 * rollout (generation and --score) and the trainer take images this way,
 * so the tokens and pixels each sees are the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/image.h"
#include "rollout_internal.h"

void sw_sample_pixels_free(sw_sample_pixels *px)
{
	if (!px)
		return;
	free(px->pixels);
	px->pixels = NULL;
	px->n = 0;
	px->size = 0;
}

/* Each image token of ids[0..*n) becomes per copies (*ids realloc'd). */
static int expand_(int32_t **ids, size_t *n, int32_t tok, int per, size_t count, sw_error *err)
{
	size_t nn = *n + count * (size_t)(per - 1);
	int32_t *out = malloc(sizeof *out * (nn ? nn : 1));
	if (!out)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	size_t j = 0;
	for (size_t i = 0; i < *n; i++)
		if ((*ids)[i] == tok)
			for (int k = 0; k < per; k++)
				out[j++] = tok;
		else
			out[j++] = (*ids)[i];
	free(*ids);
	*ids = out;
	*n = nn;
	return 0;
}

int sw_sample_pixels_of(sw_rec *rec, const sw_model_config *cfg, const sw_image_proc *proc, int32_t **ids,
                        size_t *n, sw_sample_pixels *px, sw_error *err)
{
	px->n = 0;
	px->size = 0;
	px->pixels = NULL;
	sw_image *ims = NULL;
	size_t nim = 0;
	int rc = sw_sample_images(rec, &ims, &nim, err);
	if (rc)
		return rc == SW_ENOMEM ? rc : SW_EFORMAT;
	bool llava = cfg->vision.model_type[0] != 0;
	if (!llava) {
		sw_images_free(ims, nim);
		return nim ? sw_fail(err, SW_EFORMAT, "the sample has %zu image%s and the model is text only (not LLaVA)",
		                     nim, nim == 1 ? "" : "s") : 0;
	}
	int32_t tok = cfg->vision.image_token_id;
	int per = sw_model_image_tokens(cfg);
	size_t count = sw_image_count_tokens(*ids, *n, tok);
	/* a prompt already expanded (prompt_tokens a rollout wrote) is taken as it is */
	if (count == nim * (size_t)per)
		rc = 0;
	else if (count == nim)
		rc = expand_(ids, n, tok, per, count, err);
	else
		rc = sw_fail(err, SW_EFORMAT, "the prompt has %zu image placeholder%s for %zu image%s in 'media'", count,
		             count == 1 ? "" : "s", nim, nim == 1 ? "" : "s");
	if (!rc && nim && !proc)
		rc = sw_fail(err, SW_EINVAL, "the model has no image processor (preprocessor_config.json)");
	int h = 0, w = 0;
	if (!rc && nim) {
		sw_image_proc_size(proc, &h, &w);
		if (h != cfg->vision.image_size || w != cfg->vision.image_size)
			rc = sw_fail(err, SW_EINVAL, "the image processor gives %dx%d pixels, the vision tower takes %dx%d",
			             w, h, cfg->vision.image_size, cfg->vision.image_size);
	}
	size_t each = (size_t)3 * (size_t)h * (size_t)w;
	if (!rc && nim && !(px->pixels = malloc(sizeof *px->pixels * each * nim)))
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < nim; i++) {
		sw_error e = { 0 };
		if ((rc = sw_image_preprocess(proc, &ims[i], px->pixels + i * each, &e)))
			rc = sw_fail(err, rc == SW_ENOMEM ? rc : SW_EFORMAT, "media[%zu]: %s", i, e.msg);
	}
	sw_images_free(ims, nim);
	if (rc) {
		sw_sample_pixels_free(px);
		return rc;
	}
	px->n = (int)nim;
	px->size = nim ? h : 0;
	return 0;
}
