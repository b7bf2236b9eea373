/*
 * score.c - the rollout scheduler's score mode: the log-probabilities of
 * the responses already in the records, under the policy at the sampling
 * temperature, from one packed forward per batch of records.  A record
 * goes out with them in its field (score_field), and with
 * response_tokens when the response was given as text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/sample.h"
#include "rollout_internal.h"

struct sw_rollout_item {
	uint8_t *bytes;
	size_t nbytes;
	int32_t *tok;              /* prompt then response */
	int plen, rlen;
	bool set_tokens;           /* response_tokens came from the text: write them too */
	sw_sample_pixels px;       /* a LLaVA prompt's images */
};

int sw_rollout_score_new(sw_rollout *r, sw_error *err)
{
	if (!(r->e = sw_engine_new(r->m, err)))
		return err && err->code ? err->code : SW_ENOMEM;
	/* logits of a batch are [tokens, vocab]: keep them near 256 MB */
	r->budget = ((int64_t)256 << 20) / ((int64_t)r->V * 4);
	if (r->budget < r->C)
		r->budget = r->C;
	if (!(r->items = calloc((size_t)r->c.batch, sizeof *r->items)))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	return 0;
}

static void clear_(sw_rollout *r)
{
	for (int i = 0; i < r->nitems; i++)
		free(r->items[i].bytes), free(r->items[i].tok), sw_sample_pixels_free(&r->items[i].px);
	r->nitems = 0;
	r->ntok = 0;
	r->nimg = 0;
}

void sw_rollout_score_free(sw_rollout *r)
{
	if (r->items)
		clear_(r);
	free(r->items);
	free(r->lp);
	sw_engine_free(r->e);
}

/* The output record of item it, its log-probs in r->lp. */
static int put_(sw_rollout *r, const sw_rollout_io *io, const sw_rollout_item *it, sw_error *err)
{
	int rc = sw_rec_load(r->out, it->bytes, it->nbytes) ? SW_EFORMAT : 0;
	if (rc)
		return sw_fail(err, rc, "cannot rebuild a record");
	if (it->set_tokens) {
		uint32_t *rt = malloc(sizeof *rt * (size_t)(it->rlen ? it->rlen : 1));
		if (!rt)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		for (int j = 0; j < it->rlen; j++)
			rt[j] = (uint32_t)it->tok[it->plen + j];
		rc = sw_rec_set_u32s(r->out, "response_tokens", rt, (size_t)it->rlen);
		free(rt);
	}
	if (!rc)
		rc = sw_rec_set_f32s(r->out, r->c.score_field, r->lp, (size_t)it->rlen);
	const uint8_t *p;
	size_t n;
	if (!rc)
		rc = sw_rec_bytes(r->out, &p, &n);
	if (rc)
		return sw_fail(err, rc, "cannot build a sample: %s", sw_strerror(rc));
	if ((rc = io->put(io->ctx, p, n)))
		return sw_fail(err, rc < 0 ? rc : SW_EIO, "the output refused a sample");
	return 0;
}

/* Score the batch and hand it out, then flush. */
static int flush_(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	if (!r->nitems)
		return 0;
	sw_error e = { 0 };
	int rc = 0;
	int32_t *tokens = malloc(sizeof *tokens * (size_t)r->ntok);
	int32_t *cu = malloc(sizeof *cu * (size_t)(r->nitems + 1));
	if (!tokens || !cu) {
		free(tokens), free(cu);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	/* the batch's images, in the order of their placeholders */
	size_t each = (size_t)3 * (size_t)r->m->cfg.vision.image_size * (size_t)r->m->cfg.vision.image_size;
	float *pixels = r->nimg ? malloc(sizeof *pixels * each * (size_t)r->nimg) : NULL;
	if (r->nimg && !pixels) {
		free(tokens), free(cu);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	cu[0] = 0;
	for (int i = 0, k = 0; i < r->nitems; i++) {
		int len = r->items[i].plen + r->items[i].rlen;
		memcpy(tokens + cu[i], r->items[i].tok, sizeof *tokens * (size_t)len);
		cu[i + 1] = cu[i] + len;
		if (r->items[i].px.n)
			memcpy(pixels + (size_t)k * each, r->items[i].px.pixels,
			       sizeof *pixels * each * (size_t)r->items[i].px.n);
		k += r->items[i].px.n;
	}
	sw_batch b = { r->nitems, tokens, cu, NULL, NULL };
	sw_images im = { r->nimg, pixels };
	for (bool retry = true; retry && !rc;) {
		retry = false;
		uint64_t seq;
		if ((rc = sw_rollout_read_begin(r, &seq, err)))
			break;
		if (sw_engine_forward_images(r->e, &b, &im, false, NULL, NULL, &e)) {
			rc = sw_rollout_fail(err, &e, 0, "scoring failed");
			break;
		}
		const float *logits = sw_engine_logits(r->e);
		if (!logits) {
			rc = sw_fail(err, SW_EINVAL, "scoring failed: the engine kept no logits");
			break;
		}
		for (int i = 0; i < r->nitems && !rc; i++) {
			sw_rollout_item *it = &r->items[i];
			if ((size_t)it->rlen > r->lpcap) {
				float *lp = realloc(r->lp, sizeof *lp * (size_t)it->rlen * 2);
				if (!lp) {
					rc = sw_fail(err, SW_ENOMEM, "out of memory");
					break;
				}
				r->lp = lp;
				r->lpcap = (size_t)it->rlen * 2;
			}
			for (int j = 0; j < it->rlen; j++) {
				size_t row = (size_t)cu[i] + (size_t)it->plen - 1 + (size_t)j;
				r->lp[j] = sw_sampling_logprob(logits + row * (size_t)r->V, r->V,
				                               r->c.sampling.temperature, it->tok[it->plen + j]);
			}
			/* a write overlapped the forward: do it again before anything goes out */
			if (i == 0 && sw_rollout_read_retry(r, seq)) {
				retry = true;
				break;
			}
			rc = put_(r, io, it, err);
		}
	}
	free(tokens), free(cu), free(pixels);
	clear_(r);
	if (!rc && io->flush && (rc = io->flush(io->ctx)))
		rc = sw_fail(err, rc < 0 ? rc : SW_EIO, "the output cannot be flushed");
	return rc;
}

/* The record pulled last into the batch; *msg set when it is invalid. */
static int take_(sw_rollout *r, const sw_rollout_io *io, char *msg, size_t size, sw_error *err)
{
	int32_t *ptok = NULL, *rtok = NULL;
	size_t plen = 0, rlen = 0;
	bool from_text = false;
	sw_error e = { 0 };
	sw_val v;
	int rc = sw_sample_prompt(r->in, r->tok, r->V, &ptok, &plen, &e);
	if (!rc && plen == 0) {
		snprintf(msg, size, "the prompt is empty (no tokens)");
	} else if (!rc && sw_rec_get(r->in, "response_tokens", &v) && sw_rec_get(r->in, "response", &v)) {
		snprintf(msg, size, "nothing to score: the record has no 'response_tokens' or 'response' field");
	} else if (!rc) {
		from_text = sw_sample_response_is_text(r->in);
		rc = sw_sample_response(r->in, r->tok, r->V, &rtok, &rlen, &e);
	}
	sw_sample_pixels px = { 0 };
	if (!rc && !msg[0])
		rc = sw_sample_pixels_of(r->in, &r->m->cfg, r->c.image_proc, &ptok, &plen, &px, &e);
	if (rc == SW_ENOMEM) {
		rc = sw_rollout_fail(err, &e, SW_ENOMEM, NULL);
	} else if (rc) {
		snprintf(msg, size, "%s", e.msg);
		rc = 0;
	} else if (!msg[0] && r->m->cfg.vision.model_type[0] &&
	           sw_image_count_tokens(rtok, rlen, r->m->cfg.vision.image_token_id)) {
		snprintf(msg, size, "the response holds the image token (%d): only a prompt takes pictures",
		         r->m->cfg.vision.image_token_id);
	} else if (!msg[0] && plen + rlen > (size_t)r->C) {
		snprintf(msg, size, "prompt and response have %zu tokens, the model's context is %d", plen + rlen, r->C);
	}
	if (rc || msg[0]) {
		free(ptok), free(rtok), sw_sample_pixels_free(&px);
		return rc;
	}
	if (r->nitems == r->c.batch || (r->nitems && r->ntok + (int64_t)(plen + rlen) > r->budget))
		rc = flush_(r, io, err);
	const uint8_t *p;
	size_t n;
	sw_rollout_item *it = &r->items[r->nitems];
	int32_t *tok = rc ? NULL : malloc(sizeof *tok * (plen + rlen));
	uint8_t *bytes = !tok || sw_rec_bytes(r->in, &p, &n) ? NULL : malloc(n ? n : 1);
	if (!rc && !bytes)
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	if (!rc) {
		memcpy(bytes, p, n);
		memcpy(tok, ptok, sizeof *ptok * plen);
		if (rlen)
			memcpy(tok + plen, rtok, sizeof *rtok * rlen);
		*it = (sw_rollout_item){ bytes, n, tok, (int)plen, (int)rlen, from_text, px };
		r->nitems++;
		r->ntok += (int64_t)(plen + rlen);
		r->nimg += px.n;
	} else {
		free(tok), sw_sample_pixels_free(&px);
	}
	free(ptok), free(rtok);
	return rc;
}

int sw_rollout_score_step(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	int rc = io->next(io->ctx, false, &r->in);
	if (rc == SW_ROLLOUT_WAIT) {
		/* the input pauses: what is batched goes out first */
		if ((rc = flush_(r, io, err)))
			return rc;
		rc = io->next(io->ctx, true, &r->in);
	}
	if (rc < 0)
		return sw_fail(err, rc, "cannot read the input: %s", sw_strerror(rc));
	if (rc == 1) {
		char msg[sizeof r->halt_msg] = "";
		r->nread++;
		if ((rc = take_(r, io, msg, sizeof msg, err)))
			return rc;
		if (!msg[0])
			return 1;
		sw_rollout_invalid(r, io, msg);
		if (!r->halted)
			return 1;
	}
	r->done = true;
	return flush_(r, io, err);
}
