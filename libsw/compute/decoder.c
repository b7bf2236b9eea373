/*
 * decoder.c - batched incremental decoding over a paged KV cache.
 *
 * The cache is one block of fixed-size pages (PAGE tokens of every layer's
 * keys and values); a sequence owns a page table, so sequences of any
 * lengths live side by side without padding, and a finished one gives its
 * pages back at once.  Forking a sequence (the G responses of one prompt)
 * copies its page table and counts a reference on each page: the prompt is
 * prefilled once and its keys and values are stored once.  A page shared by
 * several sequences is copied before one of them writes into it
 * (copy-on-write, which happens at most once per fork: only a prompt's last,
 * partly filled page is ever written again).
 *
 * A step runs every sequence with pending tokens in one batch of rows - a
 * new prompt's many tokens and a decoding sequence's one alike - through
 * the same ops the training forward uses, so the logits are the forward's
 * (to float rounding).  Its products are the batch-invariant linear_rows,
 * and every other op works row by row, so a sequence's logits have the
 * same bits whatever else shares the step: sampling with a seed gives the
 * same text at any batch size.
 *
 * A LLaVA prompt's images (sw_decoder_add_images) are run through the
 * tower when the prompt is added; their features take the image tokens'
 * rows at its prefill, and are let go after it: the cache then holds the
 * image like any prefix, so forks share it.
 *
 * The cache, the step's activations and the logits are the model's
 * backend's memory (backend.h); the host keeps the bookkeeping (page
 * tables, reference counts, pending tokens), uploads the step's indices and
 * downloads the logits the caller reads.
 */
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "compute/vision.h"
#include "sw/engine.h"

#define PAGE 16

typedef struct seq_ {
	bool live;
	int len;                   /* tokens in the cache */
	int32_t *pend;             /* tokens not yet in the cache */
	int npend, cpend;
	int32_t *pages;            /* page table */
	int npages, cpages;
	uint64_t stamp;            /* step whose logits row `row` is this sequence's */
	int row;
	/* A prompt's image features (device), put at its image tokens' rows
	 * (runs: start within the pending tokens, length) when it is prefilled. */
	float *feat;
	int32_t *runs;
	int nruns;
	size_t runs_cap;
	int t0;                    /* the step's row of its first pending token */
} seq_;

struct sw_decoder {
	const sw_model *m;
	const sw_backend *be;      /* the model's: kv, inv_freq, buf, ibuf, dlogits are its memory */
	float *inv_freq;
	int max_seqs;
	seq_ *seqs;
	/* The cache: [page][layer][k or v][KVH][PAGE][head_dim] (sw_kv_view):
	 * a page holds every layer's keys and values, so the pages in use are
	 * one run from the pool's start, as they are handed out (a pool
	 * [layer][k or v][page] had 2 x layers runs, each with its own partly
	 * used end: with huge pages, 2 MiB committed at each). */
	float *kv;
	int npages;
	int *refs;
	int32_t *free_pages;
	int nfree;
	/* Step buffers, grown to the largest step. */
	float *buf;
	size_t buf_floats;
	int32_t *ibuf, *h_ibuf;    /* a step's indices, built in h_ibuf and uploaded */
	size_t ibuf_n;
	int *ids, *rowend;
	float *dlogits;            /* [rows, vocab] the step's logits on the device */
	float *logits, *h_logits;  /* as the host reads them: host_view(dlogits), or h_logits */
	size_t logits_rows;
	float *x, *xl, *rl;        /* the last run's hidden states, carved from buf */
	int32_t *last;             /* [nout] the last run's last row of each sequence (in ibuf) */
	uint64_t stepno;
	sw_vision_run *vis;        /* a LLaVA model's tower, made at the first image */
};

static size_t kd_(const sw_model_config *c)
{
	return (size_t)c->num_key_value_heads * c->head_dim;
}

/* Floats from one page of the cache to the next: every layer's K and V. */
static size_t page_stride_(const sw_decoder *d)
{
	return (size_t)d->m->cfg.num_hidden_layers * 2 * PAGE * kd_(&d->m->cfg);
}

static float *page_ptr_(const sw_decoder *d, int layer, int which, int page)
{
	size_t per = (size_t)PAGE * kd_(&d->m->cfg);
	return d->kv + (size_t)page * page_stride_(d) + ((size_t)layer * 2 + which) * per;
}

sw_decoder *sw_decoder_new(const sw_model *m, int max_seqs, int64_t max_tokens, sw_error *err)
{
	if (!m || !m->arena || max_seqs < 1 || max_tokens < 1) {
		sw_fail(err, SW_EINVAL, "decoder: no model, or no room for sequences or tokens");
		return NULL;
	}
	const sw_model_config *c = &m->cfg;
	/* Room for max_tokens, plus one partly filled page per sequence. */
	int64_t np = (max_tokens + PAGE - 1) / PAGE + max_seqs;
	if (np > INT32_MAX / 2) {
		sw_fail(err, SW_ERANGE, "decoder: a cache of %lld tokens is too large", (long long)max_tokens);
		return NULL;
	}
	size_t floats = (size_t)c->num_hidden_layers * 2 * (size_t)np * PAGE * kd_(c);
	sw_decoder *d = calloc(1, sizeof *d);
	if (!d)
		goto oom;
	d->m = m;
	d->be = m->backend;
	d->max_seqs = max_seqs;
	d->npages = (int)np;
	d->seqs = calloc((size_t)max_seqs, sizeof *d->seqs);
	d->refs = calloc((size_t)np, sizeof *d->refs);
	d->free_pages = malloc(sizeof *d->free_pages * (size_t)np);
	if (!d->seqs || !d->refs || !d->free_pages || !(d->kv = d->be->alloc(floats * sizeof(float), NULL)))
		goto oom;
	if (!(d->inv_freq = sw_rope_upload(d->be, c, err))) {
		sw_decoder_free(d);
		return NULL;
	}
	/* Hand pages out from the low end first: the cache is touched in order. */
	for (int i = 0; i < d->npages; i++)
		d->free_pages[i] = d->npages - 1 - i;
	d->nfree = d->npages;
	return d;
oom:
	sw_fail(err, SW_ENOMEM, "decoder: out of memory for a KV cache of %lld tokens",
	        (long long)max_tokens);
	sw_decoder_free(d);
	return NULL;
}

void sw_decoder_free(sw_decoder *d)
{
	if (!d)
		return;
	if (d->seqs)
		for (int i = 0; i < d->max_seqs; i++) {
			free(d->seqs[i].pend), free(d->seqs[i].pages), free(d->seqs[i].runs);
			if (d->be)
				d->be->free(d->seqs[i].feat);
		}
	sw_vision_run_free(d->vis);
	free(d->seqs);
	free(d->refs);
	free(d->free_pages);
	if (d->be) {
		d->be->free(d->inv_freq);
		d->be->free(d->kv);
		d->be->free(d->buf);
		d->be->free(d->ibuf);
		d->be->free(d->dlogits);
	}
	free(d->h_ibuf);
	free(d->ids);
	free(d->rowend);
	free(d->h_logits);
	free(d);
}

static seq_ *get_(const sw_decoder *d, int id)
{
	if (!d || id < 0 || id >= d->max_seqs || !d->seqs[id].live)
		return NULL;
	return &d->seqs[id];
}

int sw_decoder_append(sw_decoder *d, int id, const int32_t *tokens, int n, sw_error *err)
{
	seq_ *s = get_(d, id);
	if (!s)
		return sw_fail(err, SW_EINVAL, "no sequence %d", id);
	if (n < 0 || (n > 0 && !tokens))
		return sw_fail(err, SW_EINVAL, "no tokens");
	const sw_model_config *c = &d->m->cfg;
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
			return sw_fail(err, SW_EINVAL, "token %d is outside the vocabulary of %d",
			               tokens[i], c->vocab_size);
	if ((int64_t)s->len + s->npend + n > c->max_position_embeddings)
		return sw_fail(err, SW_ERANGE, "sequence %d would have %lld tokens, more than the model's %d positions",
		               id, (long long)s->len + s->npend + n, c->max_position_embeddings);
	if (s->npend + n > s->cpend) {
		int cap = s->cpend ? s->cpend : 16;
		while (cap < s->npend + n)
			cap *= 2;
		int32_t *p = realloc(s->pend, sizeof *p * (size_t)cap);
		if (!p)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		s->pend = p, s->cpend = cap;
	}
	memcpy(s->pend + s->npend, tokens, sizeof *tokens * (size_t)n);
	s->npend += n;
	return SW_OK;
}

static int free_slot_(sw_decoder *d, sw_error *err)
{
	for (int i = 0; i < d->max_seqs; i++)
		if (!d->seqs[i].live)
			return i;
	return sw_fail(err, SW_ERANGE, "all %d sequence slots are in use", d->max_seqs);
}

int sw_decoder_add(sw_decoder *d, const int32_t *tokens, int n, sw_error *err)
{
	if (!d)
		return sw_fail(err, SW_EINVAL, "no decoder");
	if (n < 1)
		return sw_fail(err, SW_EINVAL, "a sequence needs at least one token");
	int id = free_slot_(d, err);
	if (id < 0)
		return id;
	seq_ *s = &d->seqs[id];
	s->live = true;
	s->len = s->npend = s->npages = 0;
	s->stamp = 0;
	int rc = sw_decoder_append(d, id, tokens, n, err);
	if (rc) {
		s->live = false;
		return rc;
	}
	return id;
}

/* Drop a sequence's image features (prefilled, or the sequence removed). */
static void drop_feat_(const sw_decoder *d, seq_ *s)
{
	d->be->free(s->feat);
	s->feat = NULL;
	s->nruns = 0;
}

int sw_decoder_add_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                          sw_error *err)
{
	if (!d)
		return sw_fail(err, SW_EINVAL, "no decoder");
	int nimg = im ? im->n : 0;
	if (nimg && !im->pixels)
		return sw_fail(err, SW_EINVAL, "%d images without their pixels", nimg);
	const sw_model_config *c = &d->m->cfg;
	int32_t *runs = NULL;
	size_t cap = 0;
	int nruns = 0, rc;
	if (n < 1 || !tokens)
		return sw_fail(err, SW_EINVAL, "a sequence needs at least one token");
	if ((rc = sw_image_runs(c, tokens, n, nimg, &runs, &cap, &nruns, err))) {
		free(runs);
		return rc;
	}
	float *feat = NULL;
	if (nimg) {
		const float *f;
		size_t bytes = sizeof(float) * (size_t)nimg * sw_model_image_tokens(c) * c->hidden_size;
		if ((!d->vis && !(d->vis = sw_vision_run_new(d->m, err))) ||
		    (rc = sw_vision_run_forward(d->vis, im->pixels, nimg, false, &f, err)) ||
		    !(feat = d->be->alloc(bytes, err)) || (rc = d->be->copy(feat, f, bytes, err))) {
			d->be->free(feat);
			free(runs);
			return rc ? rc : err ? err->code : SW_ENOMEM;
		}
	}
	int id = sw_decoder_add(d, tokens, n, err);
	if (id < 0) {
		d->be->free(feat);
		free(runs);
		return id;
	}
	seq_ *s = &d->seqs[id];
	free(s->runs);
	s->runs = runs, s->runs_cap = cap, s->nruns = nruns, s->feat = feat;
	return id;
}

static int reserve_pages_(seq_ *s, int n)
{
	if (n <= s->cpages)
		return 0;
	int cap = s->cpages ? s->cpages : 8;
	while (cap < n)
		cap *= 2;
	int32_t *p = realloc(s->pages, sizeof *p * (size_t)cap);
	if (!p)
		return -1;
	s->pages = p, s->cpages = cap;
	return 0;
}

int sw_decoder_fork(sw_decoder *d, int id, sw_error *err)
{
	seq_ *s = get_(d, id);
	if (!s)
		return sw_fail(err, SW_EINVAL, "no sequence %d", id);
	if (s->npend)
		return sw_fail(err, SW_EINVAL, "sequence %d has tokens pending: step before forking", id);
	int nid = free_slot_(d, err);
	if (nid < 0)
		return nid;
	seq_ *t = &d->seqs[nid];
	s = &d->seqs[id];
	if (reserve_pages_(t, s->npages))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memcpy(t->pages, s->pages, sizeof *t->pages * (size_t)s->npages);
	for (int i = 0; i < s->npages; i++)
		d->refs[s->pages[i]]++;
	t->npages = s->npages;
	t->len = s->len;
	t->npend = 0;
	t->stamp = s->stamp;
	t->row = s->row;
	t->live = true;
	return nid;
}

int sw_decoder_remove(sw_decoder *d, int id)
{
	seq_ *s = get_(d, id);
	if (!s)
		return SW_EINVAL;
	drop_feat_(d, s);
	for (int i = 0; i < s->npages; i++)
		if (--d->refs[s->pages[i]] == 0)
			d->free_pages[d->nfree++] = s->pages[i];
	s->live = false;
	s->npages = s->len = s->npend = 0;
	return SW_OK;
}

int sw_decoder_len(const sw_decoder *d, int id)
{
	const seq_ *s = get_(d, id);
	return s ? s->len : -1;
}

int64_t sw_decoder_room(const sw_decoder *d)
{
	return d ? (int64_t)d->nfree * PAGE : 0;
}

const float *sw_decoder_last_logits(const sw_decoder *d, int id)
{
	const seq_ *s = get_(d, id);
	if (!s || s->stamp == 0 || s->stamp != d->stepno || s->npend)
		return NULL;
	return d->logits + (size_t)s->row * d->m->cfg.vocab_size;
}

/* Pages a sequence needs before its pending tokens can be written. */
static int pages_needed_(const sw_decoder *d, const seq_ *s)
{
	int want = (s->len + s->npend + PAGE - 1) / PAGE, n = want - s->npages;
	/* Writing into a shared, partly filled last page copies it first. */
	if (s->len % PAGE && d->refs[s->pages[s->len / PAGE]] > 1)
		n++;
	return n;
}

static int take_page_(sw_decoder *d)
{
	int p = d->free_pages[--d->nfree];
	d->refs[p] = 1;
	return p;
}

static int grow_(sw_decoder *d, int ntok, int nout, int ntab, sw_error *err)
{
	const sw_backend *be = d->be;
	const sw_model_config *c = &d->m->cfg;
	size_t n = (size_t)ntok, D = c->hidden_size, I = c->intermediate_size;
	size_t QD = (size_t)c->num_attention_heads * c->head_dim, KD = kd_(c);
	size_t H = c->num_attention_heads, KVH = c->num_key_value_heads;
	size_t maxkeys = (size_t)c->max_position_embeddings;
	size_t need = n * (2 * D + 3 * QD + 3 * KD + 3 * I + 1 + H + KVH) + (size_t)nout * D + nout +
	              be->attn_paged_scratch((int)maxkeys) + 64;
	if (need > d->buf_floats) {
		be->free(d->buf);
		d->buf_floats = 0;
		if (!(d->buf = be->alloc(need * sizeof(float), NULL)))
			return sw_fail(err, SW_ENOMEM, "out of memory for a step of %d tokens", ntok);
		d->buf_floats = need;
	}
	/* tokens, positions, page-table offsets, key counts; the page tables (a
	 * page shared by forks is in each one's table); the rows to gather */
	size_t ineed = 4 * n + (size_t)ntab + (size_t)nout + 16;
	if (ineed > d->ibuf_n) {
		be->free(d->ibuf);
		free(d->h_ibuf);
		d->ibuf_n = 0;
		d->h_ibuf = malloc(ineed * sizeof(int32_t));
		if (!(d->ibuf = be->alloc(ineed * sizeof(int32_t), NULL)) || !d->h_ibuf)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		d->ibuf_n = ineed;
	}
	if ((size_t)nout > d->logits_rows) {
		be->free(d->dlogits), free(d->h_logits), free(d->ids), free(d->rowend);
		d->h_logits = NULL;
		d->logits_rows = 0;
		size_t bytes = sizeof(float) * (size_t)nout * c->vocab_size;
		d->dlogits = be->alloc(bytes, NULL);
		d->logits = d->dlogits ? (float *)be->host_view(d->dlogits) : NULL;
		if (d->dlogits && !d->logits)
			d->logits = d->h_logits = malloc(bytes);
		d->ids = malloc(sizeof(int) * (size_t)nout);
		d->rowend = malloc(sizeof(int) * (size_t)nout);
		if (!d->logits || !d->ids || !d->rowend)
			return sw_fail(err, SW_ENOMEM, "out of memory for %d rows of logits", nout);
		d->logits_rows = (size_t)nout;
	}
	return SW_OK;
}

/*
 * Run the pending tokens of every live sequence (only: of that one alone)
 * through the layers.  On success the final hidden states of the rows are
 * in d->x ([*ntok, D]), d->ids[0..*nout-1] are the sequences that ran and
 * d->rowend[j] the row after sequence j's last; their tokens are in the
 * cache.  A failure changes nothing.
 */
static int run_(sw_decoder *d, int only, int *ntok_p, int *nout_p, sw_error *err)
{
	const sw_model *m = d->m;
	const sw_model_config *c = &m->cfg;
	const sw_backend *o = d->be;
	size_t pstride = page_stride_(d);
	int ntok = 0, nout = 0, need = 0, ntab = 0;
#define SEL_(s, i) ((s)->live && (s)->npend && (only < 0 || (i) == only))
	for (int i = 0; i < d->max_seqs; i++) {
		seq_ *s = &d->seqs[i];
		if (!SEL_(s, i))
			continue;
		if (reserve_pages_(s, (s->len + s->npend + PAGE - 1) / PAGE))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		ntok += s->npend;
		nout++;
		need += pages_needed_(d, s);
		ntab += (s->len + s->npend + PAGE - 1) / PAGE;
	}
	*ntok_p = ntok, *nout_p = nout;
	if (nout == 0)
		return SW_OK;
	if (need > d->nfree)
		return sw_fail(err, SW_ERANGE, "the KV cache is full: %d pages needed, %d free", need,
		               d->nfree);
	int rc = grow_(d, ntok, nout, ntab, err);
	if (rc)
		return rc;

	int D = c->hidden_size, I = c->intermediate_size;
	int H = c->num_attention_heads, KVH = c->num_key_value_heads, hd = c->head_dim;
	int QD = H * hd, KD = KVH * hd, nl = c->num_hidden_layers;
	float eps = c->rms_norm_eps;
	int32_t *tok = d->h_ibuf, *pos = tok + ntok, *poff = pos + ntok, *nkeys = poff + ntok;
	int32_t *ptab = nkeys + ntok, *last = ptab + ntab;

	/* Pages: copy shared last pages, add new ones; then lay out the rows. */
	int t = 0, np = 0, r = 0;
	for (int i = 0; i < d->max_seqs; i++) {
		seq_ *s = &d->seqs[i];
		if (!SEL_(s, i))
			continue;
		int want = (s->len + s->npend + PAGE - 1) / PAGE;
		if (s->len % PAGE && d->refs[s->pages[s->len / PAGE]] > 1) {
			/* the whole page, every layer's K and V: one run */
			int old = s->pages[s->len / PAGE], p = take_page_(d);
			rc = o->copy(page_ptr_(d, 0, 0, p), page_ptr_(d, 0, 0, old), sizeof(float) * pstride, err);
			d->refs[old]--;
			s->pages[s->len / PAGE] = p;
		}
		while (s->npages < want)
			s->pages[s->npages++] = take_page_(d);
		memcpy(ptab + np, s->pages, sizeof *ptab * (size_t)s->npages);
		s->t0 = t;
		for (int j = 0; j < s->npend; j++, t++) {
			tok[t] = s->pend[j];
			pos[t] = s->len + j;
			poff[t] = np;
			nkeys[t] = s->len + j + 1;
		}
		np += s->npages;
		d->ids[r] = i;
		last[r] = t - 1;
		d->rowend[r++] = t;
	}
#undef SEL_
	/* The host's indices to the device, at the same offsets. */
	if (rc || (rc = o->upload(d->ibuf, d->h_ibuf, sizeof(int32_t) * (size_t)(last + nout - tok), err)))
		return rc;
	d->last = d->ibuf + (last - tok);
	tok = d->ibuf + (tok - d->h_ibuf), pos = tok + ntok, poff = pos + ntok, nkeys = poff + ntok;
	ptab = nkeys + ntok;

	size_t n = (size_t)ntok;
	float *p = d->buf;
#define TAKE_(k) (p += (k), p - (k))
	/* q, k, v back to back, and gate, up: one row's products may be one */
	float *x = TAKE_(n * D), *xn = TAKE_(n * D), *q = TAKE_(n * QD), *k = TAKE_(n * KD);
	float *v = TAKE_(n * KD), *att = TAKE_(n * QD), *gate = TAKE_(n * I), *up = TAKE_(n * I);
	float *h = TAKE_(n * I), *rstd = TAKE_(n), *qr = TAKE_(n * H), *kr = TAKE_(n * KVH);
	float *qpre = TAKE_(n * QD), *kpre = TAKE_(n * KD);
	d->xl = TAKE_((size_t)nout * D);
	d->rl = TAKE_(nout);
	float *scratch = p;
#undef TAKE_
	d->x = x;

	o->embed_fwd(x, m->embed, tok, ntok, D);
	/* A prompt's images: their features at its image tokens' rows. */
	for (int i = 0; i < d->max_seqs && !rc; i++) {
		seq_ *s = &d->seqs[i];
		if (!(s->live && s->npend && (only < 0 || i == only)) || !s->feat)
			continue;
		size_t f = 0;
		for (int r2 = 0; r2 < s->nruns && !rc; r2++) {
			size_t len = (size_t)s->runs[2 * r2 + 1] * D;
			rc = o->copy(x + (size_t)(s->t0 + s->runs[2 * r2]) * D, s->feat + f, len * sizeof(float), err);
			f += len;
		}
	}
	if (rc)
		return rc;
	for (int l = 0; l < nl; l++) {
		const sw_layer *L = &m->layers[l];
		o->rmsnorm_fwd(xn, rstd, x, L->attn_norm, ntok, D, eps);
		float *qq = c->qk_norm ? qpre : q, *kk = c->qk_norm ? kpre : k;
		/* q, k and v (below: gate and up) are one call: each product is
		 * a parallel region whose start and barrier cost most where the
		 * cores are shared, and k's and v's few rows (192 at SmolLM2's
		 * shapes) are too few to share out alone (each element the same
		 * arithmetic: the same bits). */
		sw_rows_part qkv[3] = { { qq, L->wq, QD }, { kk, L->wk, KD }, { v, L->wv, KD } };
		o->linear_rows_parts(qkv, 3, xn, ntok, D, 0);
		if (c->attention_bias) {
			o->bias_fwd(qq, L->bq, ntok, QD);
			o->bias_fwd(kk, L->bk, ntok, KD);
			o->bias_fwd(v, L->bv, ntok, KD);
		}
		if (c->qk_norm) {
			o->rmsnorm_fwd(q, qr, qpre, L->q_norm, ntok * H, hd, eps);
			o->rmsnorm_fwd(k, kr, kpre, L->k_norm, ntok * KVH, hd, eps);
		}
		o->rope(q, pos, ntok, H, hd, d->inv_freq, 0);
		o->rope(k, pos, ntok, KVH, hd, d->inv_freq, 0);
		float *kl = page_ptr_(d, l, 0, 0), *vl = page_ptr_(d, l, 1, 0);
		o->kv_write(kl, vl, k, v, ntok, KD, hd, PAGE, pstride, ptab, poff, pos);
		sw_kv_view kv = { kl, vl, PAGE, ptab, poff, nkeys, pstride };
		o->attn_paged(att, q, ntok, H, KVH, hd, &kv, scratch);
		o->linear_rows(x, att, L->wo, ntok, D, QD, 1);
		o->rmsnorm_fwd(xn, rstd, x, L->mlp_norm, ntok, D, eps);
		sw_rows_part gu[2] = { { gate, L->w_gate, I }, { up, L->w_up, I } };
		o->linear_rows_parts(gu, 2, xn, ntok, D, 0);
		o->swiglu_fwd(h, gate, up, n * I);
		o->linear_rows(x, h, L->w_down, ntok, D, I, 1);
	}
	if ((rc = o->sync(err)))
		return rc;
	for (int j = 0; j < nout; j++) {
		seq_ *s = &d->seqs[d->ids[j]];
		s->len += s->npend;
		s->npend = 0;
		drop_feat_(d, s);
	}
	return SW_OK;
}

int sw_decoder_step(sw_decoder *d, int *nout_p, const int **ids, const float **logits,
                    sw_error *err)
{
	if (!d || !nout_p)
		return sw_fail(err, SW_EINVAL, "no decoder");
	*nout_p = 0;
	int ntok, nout, rc = run_(d, -1, &ntok, &nout, err);
	if (rc || nout == 0)
		return rc;
	const sw_model *m = d->m;
	const sw_backend *o = d->be;
	int D = m->cfg.hidden_size, V = m->cfg.vocab_size;
	/* Only each sequence's last row needs logits. */
	o->rows_gather(d->xl, d->x, d->last, nout, D);
	float *xn = d->x; /* the hidden states are not needed again */
	o->rmsnorm_fwd(xn, d->rl, d->xl, m->final_norm, nout, D, m->cfg.rms_norm_eps);
	o->linear_rows(d->dlogits, xn, m->lm_head, nout, V, D, 0);
	d->stepno++;
	if ((rc = o->sync(err)))
		return rc;
	/* Weights gone to NaN or Inf (a diverged update) must not be sampled from. */
	int bad = o->first_nonfinite(d->dlogits, nout, V);
	if (bad >= 0)
		return sw_fail(err, SW_ERANGE, "the logits of sequence %d are not finite", d->ids[bad]);
	if (d->h_logits &&
	    (rc = o->download(d->h_logits, d->dlogits, sizeof(float) * (size_t)nout * V, err)))
		return rc;
	for (int j = 0; j < nout; j++) {
		seq_ *s = &d->seqs[d->ids[j]];
		s->stamp = d->stepno;
		s->row = j;
	}
	*nout_p = nout;
	if (ids)
		*ids = d->ids;
	if (logits)
		*logits = d->logits;
	return SW_OK;
}

int sw_decoder_rows(sw_decoder *d, const int32_t *tokens, int n, sw_rows_fn fn, void *ctx,
                    sw_error *err)
{
	return sw_decoder_rows_images(d, tokens, n, NULL, fn, ctx, err);
}

int sw_decoder_rows_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                           sw_rows_fn fn, void *ctx, sw_error *err)
{
	if (!d || !fn)
		return sw_fail(err, SW_EINVAL, "no decoder or callback");
	int id = sw_decoder_add_images(d, tokens, n, im, err);
	if (id < 0)
		return id;
	int ntok, nout, rc = run_(d, id, &ntok, &nout, err);
	const sw_model *m = d->m;
	const sw_backend *o = d->be;
	int D = m->cfg.hidden_size, V = m->cfg.vocab_size;
	enum { CH = 32 };
	size_t lgb = sizeof(float) * CH * (size_t)V;
	float *xn = NULL, *rstd = NULL, *lg = NULL, *hlg = NULL, *hbuf = NULL;
	if (!rc && (!(xn = o->alloc(sizeof(float) * CH * D, NULL)) ||
	            !(rstd = o->alloc(sizeof(float) * CH, NULL)) || !(lg = o->alloc(lgb, NULL)) ||
	            (!(hlg = (float *)o->host_view(lg)) && !(hlg = hbuf = malloc(lgb)))))
		rc = sw_fail(err, SW_ENOMEM, "out of memory for scoring");
	/* Row by row as a step computes the last row, in chunks to bound the logits. */
	for (int r0 = 0; !rc && r0 < n; r0 += CH) {
		int nr = n - r0 < CH ? n - r0 : CH;
		o->rmsnorm_fwd(xn, rstd, d->x + (size_t)r0 * D, m->final_norm, nr, D,
		               m->cfg.rms_norm_eps);
		o->linear_rows(lg, xn, m->lm_head, nr, V, D, 0);
		if ((rc = o->sync(err)) ||
		    (hbuf && (rc = o->download(hbuf, lg, sizeof(float) * (size_t)nr * V, err))))
			break;
		rc = fn(ctx, r0, nr, hlg);
		if (rc)
			sw_fail(err, rc, "scoring stopped by its callback (%d)", rc);
	}
	o->free(xn), o->free(rstd), o->free(lg), free(hbuf);
	sw_decoder_remove(d, id);
	return rc;
}

typedef struct score_ctx_ {
	const int32_t *tokens;
	int n, V;
	float *lp, *ent;
} score_ctx_;

static int score_rows_(void *p, int r0, int nr, const float *logits)
{
	score_ctx_ *c = p;
	int32_t tgt[32];
	float lse[32];
	for (int j = 0; j < nr; j++)
		tgt[j] = r0 + j + 1 < c->n ? c->tokens[r0 + j + 1] : -1;
	/* On the host, over the logits the caller would see: the CPU's arithmetic. */
	sw_backend_cpu()->logprob_fwd(c->lp + r0, c->ent ? c->ent + r0 : NULL, lse, logits, tgt, nr, c->V);
	return 0;
}

int sw_decoder_score(sw_decoder *d, const int32_t *tokens, int n, float *logprobs,
                     float *entropy, sw_error *err)
{
	return sw_decoder_score_images(d, tokens, n, NULL, logprobs, entropy, err);
}

int sw_decoder_score_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                            float *logprobs, float *entropy, sw_error *err)
{
	if (!d || !logprobs)
		return sw_fail(err, SW_EINVAL, "no decoder or output");
	score_ctx_ c = { tokens, n, d->m->cfg.vocab_size, logprobs, entropy };
	return sw_decoder_rows_images(d, tokens, n, im, score_rows_, &c, err);
}
