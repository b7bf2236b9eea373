/*
 * scheduler.c - the rollout scheduler (sw/rollout.h): continuous batching
 * over one sw_decoder.  Up to `batch` responses decode together; a
 * finished one leaves the cache at once and its slot goes to the next.
 * A prompt is prefilled once as a root that is never extended, and its G
 * responses are forks of it.
 *
 * KV cache room is reserved before a sequence is started (a root: its
 * prompt; a response: its longest possible length), so a step never finds
 * the cache full; one response's worth is always kept free for the roots
 * already admitted, so the roots cannot starve their own responses.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sample.h"
#include "rollout_internal.h"

struct sw_rollout_group {
	uint8_t *bytes;            /* the prompt record */
	size_t nbytes;
	char *gid;
	int32_t *ptok;
	int plen, max_new;         /* max_new: for this prompt, within the context */
	sw_sample_pixels px;       /* a LLaVA prompt's images (ptok holds their expanded placeholders) */
	uint64_t index;            /* 0-based among the records this scheduler pulled: its output order */
	uint64_t place;            /* 0-based place in the whole input: the RNG stream, the default id */
	int root;                  /* decoder id of the prompt-only sequence; -1 when gone */
	float *root_logits;        /* its next-token logits once prefilled */
	uint64_t version;          /* of the weights that prefilled it */
	int started, finished;
	bool first_reserved;       /* room for the first response is held already */
	sw_rollout_group *next;    /* the list of groups with responses to start */
};

struct sw_rollout_sample {
	sw_rollout_group *g;
	int k, id;
	int32_t *tok;
	float *lp;
	int n, cap;
	char *text;
	size_t tlen, tcap;
	int64_t reserved;
	uint64_t version;          /* of the weights it was generated with */
};

typedef sw_rollout_group group_;
typedef sw_rollout_sample sample_;

sw_rollout_config sw_rollout_config_defaults(void)
{
	return (sw_rollout_config){ .G = 1, .batch = 64, .max_new = 256, .sampling = sw_sampling_defaults(),
	                            .score_field = "logprobs" };
}

int sw_rollout_fail(sw_error *err, const sw_error *inner, int code, const char *prefix)
{
	char msg[sizeof inner->msg];
	memcpy(msg, inner->msg, sizeof msg);
	msg[sizeof msg - 1] = 0;
	if (!code)
		code = inner->code ? inner->code : SW_EINVAL;
	return prefix ? sw_fail(err, code, "%s: %s", prefix, msg) : sw_fail(err, code, "%s", msg);
}

void sw_rollout_invalid(sw_rollout *r, const sw_rollout_io *io, const char *msg)
{
	if (r->c.skip_invalid) {
		r->skipped++;
	} else {
		r->halted = true;
		snprintf(r->halt_msg, sizeof r->halt_msg, "%s", msg);
	}
	if (io->invalid)
		io->invalid(io->ctx, msg);
}

int sw_rollout_read_begin(sw_rollout *r, uint64_t *seq, sw_error *err)
{
	sw_error e = { 0 };
	*seq = 0;
	if (r->c.store && sw_store_read_begin(r->c.store, seq, &e)) {
		char p[200];
		snprintf(p, sizeof p, "store '%s'", r->c.store_name ? r->c.store_name : "");
		return sw_rollout_fail(err, &e, 0, p);
	}
	return 0;
}

bool sw_rollout_read_retry(const sw_rollout *r, uint64_t seq)
{
	return r->c.store && sw_store_read_retry(r->c.store, seq);
}

static uint64_t version_(const sw_rollout *r)
{
	return r->c.store ? sw_store_version(r->c.store) : 0;
}

static int hexval_(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int sw_rollout_stop_parse(const char *arg, char **out, sw_error *err)
{
	size_t n = arg ? strlen(arg) : 0, k = 0;
	char *s = arg ? malloc(n + 1) : NULL;
	*out = NULL;
	if (!s)
		return sw_fail(err, arg ? SW_ENOMEM : SW_EINVAL, arg ? "out of memory" : "no stop string");
	for (size_t i = 0; i < n; i++) {
		if (arg[i] != '\\') {
			s[k++] = arg[i];
			continue;
		}
		char c = arg[++i];
		int hi, lo;
		if (c == 'n' || c == 't' || c == 'r' || c == '\\') {
			s[k++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : '\\';
		} else if (c == 'x' && (hi = hexval_(arg[i + 1])) >= 0 && (lo = hexval_(arg[i + 2])) >= 0 && (hi | lo)) {
			s[k++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			free(s);
			return sw_fail(err, SW_EINVAL, "'%s': unknown escape '\\%.1s' (known: \\n \\t \\r \\\\ \\xHH, not \\x00)",
			               arg, c ? &arg[i] : "");
		}
	}
	s[k] = 0;
	if (!k) {
		free(s);
		return sw_fail(err, SW_EINVAL, "an empty stop string");
	}
	*out = s;
	return 0;
}

static void add_stop_id_(sw_rollout *r, int64_t id)
{
	if (id < 0 || id >= r->V)
		return;
	for (int i = 0; i < r->nstop_ids; i++)
		if (r->stop_ids[i] == id)
			return;
	if (r->nstop_ids < (int)(sizeof r->stop_ids / sizeof *r->stop_ids))
		r->stop_ids[r->nstop_ids++] = (int32_t)id;
}

static bool is_stop_id_(const sw_rollout *r, int32_t t)
{
	for (int i = 0; i < r->nstop_ids; i++)
		if (r->stop_ids[i] == t)
			return true;
	return false;
}

static int64_t sample_need_(const sw_rollout *r, const group_ *g)
{
	/* static: a finished response keeps its row, padded, up to the longest any may be */
	int most = r->c.max_new < r->C - g->plen ? r->c.max_new : r->C - g->plen;
	return (r->c.padded ? most : g->max_new) + 32;
}

static int64_t root_need_(const group_ *g)
{
	return (int64_t)g->plen + 16;
}

/* The decoder, its cache sized to the batch within the memory budget, and the token sampler. */
static int gen_new_(sw_rollout *r, sw_error *err)
{
	const sw_rollout_config *c = &r->c;
	/* Cache room: the batch's responses at their longest, the prompts of the groups in flight, and one spare. */
	int64_t sm = (int64_t)(c->max_new < r->C ? c->max_new : r->C) + 32;
	int64_t groups = c->batch / c->G + 2;
	int64_t cap = (int64_t)c->batch * sm + groups * ((int64_t)r->C + 16) + 2 * sm;
	const sw_model_config *mc = &r->m->cfg;
	double per_tok = 2.0 * mc->num_hidden_layers * mc->num_key_value_heads * mc->head_dim * sizeof(float);
	double budget = c->kv_bytes;
	if (budget <= 0) {
		budget = 8.0 * (1 << 30);
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		if (pages > 0 && psz > 0 && (double)pages * (double)psz / 2 < budget)
			budget = (double)pages * (double)psz / 2;
	}
	int64_t floor_ = (int64_t)r->C + 16 + 3 * sm;
	if ((double)cap * per_tok > budget)
		cap = (int64_t)(budget / per_tok);
	if (cap < floor_)
		cap = floor_;
	r->cap_tok = cap;
	r->max_seqs = 2 * c->batch + c->G + 2;
	if (!(r->d = sw_decoder_new(r->m, r->max_seqs, r->cap_tok, err)))
		return err && err->code ? err->code : SW_ENOMEM;
	if (!(r->sampler = sw_sampler_new(r->V, &c->sampling, err)))
		return err && err->code ? err->code : SW_ENOMEM;
	r->nsamplers = omp_get_max_threads();
	r->samplers = calloc((size_t)r->nsamplers, sizeof *r->samplers);
	for (int i = 0; r->samplers && i < r->nsamplers; i++)
		if (!(r->samplers[i] = sw_sampler_new(r->V, &c->sampling, err)))
			return err && err->code ? err->code : SW_ENOMEM;
	r->pre_u = malloc(sizeof *r->pre_u * (size_t)r->max_seqs);
	r->pre_t = malloc(sizeof *r->pre_t * (size_t)r->max_seqs);
	r->pre_lp = malloc(sizeof *r->pre_lp * (size_t)r->max_seqs);
	if (!r->samplers || !r->pre_u || !r->pre_t || !r->pre_lp)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	r->by_id = calloc((size_t)r->max_seqs, sizeof *r->by_id);
	r->root_of = calloc((size_t)r->max_seqs, sizeof *r->root_of);
	r->pad_left = malloc(sizeof *r->pad_left * (size_t)r->max_seqs);
	r->pad_res = calloc((size_t)r->max_seqs, sizeof *r->pad_res);
	r->order = sw_rollout_order_new((uint64_t)c->G);
	if (!r->by_id || !r->root_of || !r->pad_left || !r->pad_res || !r->order)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (int i = 0; i < r->max_seqs; i++)
		r->pad_left[i] = -1;
	int pad = sw_tokenizer_pad(r->tok);
	r->pad_tok = pad >= 0 && pad < r->V ? pad : 0;
	r->groups_tail = &r->groups;
	return 0;
}

sw_rollout *sw_rollout_new(const sw_model *m, const sw_tokenizer *tok, const sw_rollout_config *c,
                           sw_error *err)
{
	if (c->G < 1 || c->batch < 1 || c->max_new < 1) {
		sw_fail(err, SW_EINVAL, "G, batch and max_new must be at least 1");
		return NULL;
	}
	sw_rollout *r = calloc(1, sizeof *r);
	if (!r) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	r->c = *c;
	r->m = m;
	r->tok = tok;
	r->V = m->cfg.vocab_size;
	r->C = m->cfg.max_position_embeddings;
	r->c.stops = NULL;
	r->c.stop_ids = NULL;
	r->c.score_field = strdup(c->score_field ? c->score_field : "logprobs");
	r->c.store_name = c->store_name ? strdup(c->store_name) : NULL;
	char **stops = c->nstops ? calloc(c->nstops, sizeof *stops) : NULL;
	r->c.stops = (const char *const *)stops;
	bool oom = !r->c.score_field || (c->store_name && !r->c.store_name) || (c->nstops && !stops);
	for (size_t i = 0; stops && i < c->nstops; i++) {
		if (!(stops[i] = strdup(c->stops[i])))
			oom = true;
		else if (strlen(stops[i]) > r->max_stop_len)
			r->max_stop_len = strlen(stops[i]);
	}
	if (oom || !(r->out = sw_rec_new())) {
		sw_rollout_free(r);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	for (int i = 0; i < m->cfg.n_eos; i++)
		add_stop_id_(r, m->cfg.eos_token_ids[i]);
	uint32_t ids[16];
	size_t n = sw_tokenizer_stop_ids(tok, ids, 16);
	for (size_t i = 0; i < n && i < 16; i++)
		add_stop_id_(r, ids[i]);
	for (int i = 0; i < c->nstop_ids; i++)
		add_stop_id_(r, c->stop_ids[i]);
	if (c->score ? sw_rollout_score_new(r, err) : gen_new_(r, err)) {
		sw_rollout_free(r);
		return NULL;
	}
	return r;
}

static void free_sample_(sample_ *s)
{
	free(s->tok), free(s->lp), free(s->text), free(s);
}

static void free_group_(group_ *g)
{
	sw_sample_pixels_free(&g->px);
	free(g->bytes), free(g->gid), free(g->ptok), free(g->root_logits), free(g);
}

void sw_rollout_free(sw_rollout *r)
{
	if (!r)
		return;
	for (int i = 0; r->by_id && i < r->max_seqs; i++)
		if (r->by_id[i]) {
			sample_ *s = r->by_id[i];
			/* a group is freed with its last sample (one still starting
			 * responses never gets there), or from the list below */
			if (++s->g->finished == r->c.G)
				free_group_(s->g);
			free_sample_(s);
		}
	for (group_ *g = r->groups, *nx; g; g = nx) {
		nx = g->next;
		free_group_(g);
	}
	sw_decoder_free(r->d);
	sw_sampler_free(r->sampler);
	for (int i = 0; r->samplers && i < r->nsamplers; i++)
		sw_sampler_free(r->samplers[i]);
	free(r->samplers);
	free(r->pre_u), free(r->pre_t), free(r->pre_lp);
	sw_rollout_order_free(r->order);
	free(r->by_id), free(r->root_of), free(r->pad_left), free(r->pad_res);
	sw_rollout_score_free(r);
	sw_rec_free(r->out);
	for (size_t i = 0; r->c.stops && i < r->c.nstops; i++)
		free((char *)r->c.stops[i]);
	free((void *)r->c.stops);
	free((char *)r->c.score_field);
	free((char *)r->c.store_name);
	free(r);
}

uint64_t sw_rollout_skipped(const sw_rollout *r)
{
	return r->skipped;
}

uint64_t sw_rollout_tokens(const sw_rollout *r)
{
	return r->gen_tokens;
}

/* ---- the batch ---------------------------------------------------------------- */

/*
 * Static batching emulates a padded batch (transformers' generate() on a
 * batch): a finished response stays in the batch, fed a pad token at every
 * step, its output discarded, until the whole batch has finished.
 */
static int pad_feed_(sw_rollout *r, int id, sw_error *err)
{
	sw_error e = { 0 };
	if (r->pad_left[id] > 0) {
		if (sw_decoder_append(r->d, id, &r->pad_tok, 1, &e))
			return sw_rollout_fail(err, &e, 0, "decoder");
		r->pad_left[id]--;
	}
	return 0;
}

static void pad_clear_(sw_rollout *r)
{
	for (int i = 0; r->npad && i < r->max_seqs; i++)
		if (r->pad_left[i] >= 0) {
			sw_decoder_remove(r->d, i);
			r->pad_left[i] = -1;
			r->reserved -= r->pad_res[i];
			r->npad--;
		}
}

static void remove_root_(sw_rollout *r, group_ *g)
{
	if (g->root < 0)
		return;
	sw_decoder_remove(r->d, g->root);
	r->root_of[g->root] = NULL;
	g->root = -1;
	r->reserved -= root_need_(g);
}

static void unlink_group_(sw_rollout *r, group_ *g)
{
	for (group_ **pp = &r->groups; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			if (r->groups_tail == &g->next)
				r->groups_tail = pp;
			g->next = NULL;
			return;
		}
}

static int set_(int rc, sw_error *err)
{
	return rc ? sw_fail(err, rc, "cannot build a sample: %s", sw_strerror(rc)) : 0;
}

/* The sample's record: the prompt record with the response's fields set. */
static int build_(sw_rollout *r, const sample_ *s, const char *why, sw_error *err)
{
	const group_ *g = s->g;
	if (sw_rec_load(r->out, g->bytes, g->nbytes))
		return sw_fail(err, SW_EFORMAT, "cannot rebuild the prompt record");
	size_t gl = strlen(g->gid);
	char *full = malloc(gl + 24);
	uint32_t *pt = malloc(sizeof *pt * (size_t)g->plen);
	uint32_t *rt = malloc(sizeof *rt * (size_t)(s->n ? s->n : 1));
	int rc = full && pt && rt ? 0 : sw_fail(err, SW_ENOMEM, "out of memory");
	if (!rc) {
		snprintf(full, gl + 24, "%s/%d", g->gid, s->k);
		for (int i = 0; i < g->plen; i++)
			pt[i] = (uint32_t)g->ptok[i];
		for (int i = 0; i < s->n; i++)
			rt[i] = (uint32_t)s->tok[i];
		rc = set_(sw_rec_set_str(r->out, "id", full, strlen(full)), err);
	}
	if (!rc)
		rc = set_(sw_rec_set_str(r->out, "group", g->gid, gl), err);
	if (!rc)
		rc = set_(sw_rec_set_u32s(r->out, "prompt_tokens", pt, (size_t)g->plen), err);
	if (!rc) {
		/*
		 * s->text holds the tokens' bytes (stop strings are matched in them);
		 * the response is their text as tokenizers' decode makes it, invalid
		 * UTF-8 (a response cut inside a character, byte tokens) as U+FFFD.
		 * Added tokens need no pieces of their own: their text is UTF-8, so a
		 * sequence cut before or after one is invalid either way.
		 */
		sw_buf txt = { 0 };
		rc = sw_utf8_lossy(&txt, s->text ? s->text : "", s->tlen) ? sw_fail(err, SW_ENOMEM, "out of memory")
		   : set_(sw_rec_set_str(r->out, "response", txt.p ? (const char *)txt.p : "", txt.len), err);
		sw_buf_release(&txt);
	}
	if (!rc)
		rc = set_(sw_rec_set_u32s(r->out, "response_tokens", rt, (size_t)s->n), err);
	if (!rc)
		rc = set_(sw_rec_set_f32s(r->out, "logprobs", s->lp, (size_t)s->n), err);
	if (!rc)
		rc = set_(sw_rec_set_str(r->out, "finish", why, strlen(why)), err);
	if (!rc)
		rc = set_(sw_rec_set_u64(r->out, "policy_version", s->version), err);
	free(full), free(pt), free(rt);
	return rc;
}

/* s ends (why: stop, length or abort): its record goes to the in-order output, its row leaves the batch. */
static int finish_(sw_rollout *r, const sw_rollout_io *io, sample_ *s, const char *why, sw_error *err)
{
	group_ *g = s->g;
	const uint8_t *p;
	size_t n;
	int rc = build_(r, s, why, err);
	if (!rc)
		rc = set_(sw_rec_bytes(r->out, &p, &n), err);
	if (!rc)
		rc = sw_rollout_order_put(r->order, g->index * (uint64_t)r->c.G + (uint64_t)s->k, p, n, io, err);
	if (rc)
		return rc;
	r->gen_tokens += (uint64_t)s->n;

	if (s->id >= 0) {
		r->by_id[s->id] = NULL;
		r->live--;
	}
	if (s->id >= 0 && r->c.padded && strcmp(why, "abort")) {
		/* its row stays in the batch as padding: the last token it may take
		 * is the longest response's, or the context's end */
		int most = (int)(sample_need_(r, g) - 32);
		r->pad_left[s->id] = most - s->n;
		r->pad_res[s->id] = s->reserved;
		r->npad++;
		rc = pad_feed_(r, s->id, err);
	} else {
		if (s->id >= 0)
			sw_decoder_remove(r->d, s->id);
		r->reserved -= s->reserved;
	}
	free_sample_(s);
	if (++g->finished == r->c.G) {
		remove_root_(r, g);
		free_group_(g);
	}
	return rc;
}

/*
 * Add token t (log-prob lp) to s: 1 when s is finished (and handed on), 0
 * when not, < 0 on failure.  The stop-id token stays in response_tokens,
 * not in the text; a stop string cuts the text before it, keeping every
 * token up to the one that completed it.
 */
static int push_token_(sw_rollout *r, const sw_rollout_io *io, sample_ *s, int32_t t, float lp,
                       sw_error *err)
{
	int rc;
	/* a LLaVA model's image token drawn: a picture's place, which no response can fill (the trainer's
	 * forward would want a picture for it); the response ends before it, as at an end token */
	if (r->m->cfg.vision.model_type[0] && t == r->m->cfg.vision.image_token_id)
		return (rc = finish_(r, io, s, "stop", err)) ? rc : 1;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 32;
		int32_t *tok = realloc(s->tok, sizeof *tok * (size_t)cap);
		if (tok)
			s->tok = tok;
		float *l = realloc(s->lp, sizeof *l * (size_t)cap);
		if (l)
			s->lp = l;
		if (!tok || !l)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		s->cap = cap;
	}
	s->tok[s->n] = t;
	s->lp[s->n++] = lp;
	if (is_stop_id_(r, t))
		return (rc = finish_(r, io, s, "stop", err)) ? rc : 1;
	if ((size_t)t < sw_tokenizer_vocab(r->tok)) {
		/* ids the tokenizer lacks (padding rows of a larger embedding) have no text */
		uint32_t id = (uint32_t)t;
		char *txt;
		size_t len;
		sw_error e = { 0 };
		if (sw_tokenizer_decode_bytes(r->tok, &id, 1, 0, &txt, &len, &e)) {
			char p[40];
			snprintf(p, sizeof p, "cannot decode token %d", t);
			return sw_rollout_fail(err, &e, 0, p);
		}
		size_t before = s->tlen;
		if (s->tlen + len + 1 > s->tcap) {
			size_t cap = (s->tlen + len + 1) * 2;
			char *x = realloc(s->text, cap);
			if (!x) {
				free(txt);
				return sw_fail(err, SW_ENOMEM, "out of memory");
			}
			s->text = x;
			s->tcap = cap;
		}
		memcpy(s->text + s->tlen, txt, len);
		s->tlen += len;
		s->text[s->tlen] = 0;
		free(txt);
		if (r->c.nstops && len) {
			/* a stop string can only end in the new bytes: search from where it could start */
			size_t from = before > r->max_stop_len ? before - r->max_stop_len : 0, cut = SIZE_MAX;
			for (size_t i = 0; i < r->c.nstops; i++) {
				size_t sl = strlen(r->c.stops[i]);
				for (size_t p = from; p + sl <= s->tlen && p < cut; p++)
					if (!memcmp(s->text + p, r->c.stops[i], sl)) {
						cut = p;
						break;
					}
			}
			if (cut != SIZE_MAX) {
				s->tlen = cut;
				s->text[cut] = 0;
				return (rc = finish_(r, io, s, "stop", err)) ? rc : 1;
			}
		}
	}
	if (s->n >= s->g->max_new)
		return (rc = finish_(r, io, s, "length", err)) ? rc : 1;
	return 0;
}

/* Token t goes into s's sequence unless it finished s. */
static int push_append_(sw_rollout *r, const sw_rollout_io *io, sample_ *s, int32_t t, float lp,
                        sw_error *err)
{
	int id = s->id, rc = push_token_(r, io, s, t, lp, err);
	sw_error e = { 0 };
	if (rc < 0)
		return rc;
	if (rc == 0 && sw_decoder_append(r->d, id, &t, 1, &e))
		return sw_rollout_fail(err, &e, 0, "decoder");
	return 0;
}

/*
 * Draw the step's rows ahead, over the threads: a draw is a function of its
 * row of logits and its uniform alone, so draw_ takes the token made here
 * wherever the uniform it computes is the one drawn with (what happens to
 * the samples between, in order, cannot change a token, only whether it
 * is used).  Sampling over the vocabulary is a token's largest host cost.
 */
static void predraw_(sw_rollout *r, int n, const int *ids, const float *logits)
{
	int nt = r->nsamplers < omp_get_max_threads() ? r->nsamplers : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (n > 1 && nt > 1)
	for (int i = 0; i < n; i++) {
		int id = ids[i];
		const sample_ *s = id >= 0 && id < r->max_seqs && !r->root_of[id] && r->pad_left[id] < 0
		                 ? r->by_id[id] : NULL;
		r->pre_t[i] = -1;
		r->pre_u[i] = -1;
		if (!s)
			continue;
		sw_error e = { 0 };
		r->pre_u[i] = sw_rng_uniform(r->c.seed, s->g->place, (uint32_t)s->k, (uint32_t)s->n);
		r->pre_t[i] = sw_sampler_pick(r->samplers[omp_get_thread_num()],
		                              logits + (size_t)i * r->V, r->pre_u[i], &r->pre_lp[i], &e);
	}
}

/* row: the step's row of logits drawn ahead by predraw_, or -1. */
static int draw_(sw_rollout *r, const group_ *g, int k, int step, const float *logits, int row,
                 float *lp, sw_error *err)
{
	sw_error e = { 0 };
	double u = sw_rng_uniform(r->c.seed, g->place, (uint32_t)k, (uint32_t)step);
	if (row >= 0 && r->pre_u[row] == u && r->pre_t[row] >= 0) {
		*lp = r->pre_lp[row];
		return r->pre_t[row];
	}
	int t = sw_sampler_pick(r->sampler, logits, u, lp, &e);
	if (t < 0) {
		char p[sizeof r->halt_msg];
		snprintf(p, sizeof p, "group '%s': cannot sample", g->gid);
		return sw_rollout_fail(err, &e, 0, p);
	}
	return t;
}

/*
 * Start the next response of g from its root's logits: 0 when there is no
 * room for it, 1 when it started and g has more to start, 2 when it was
 * g's last (g may then be gone already: its responses may all have ended).
 */
static int start_sample_(sw_rollout *r, const sw_rollout_io *io, group_ *g, sw_error *err)
{
	int64_t need = sample_need_(r, g);
	if (!g->first_reserved && r->reserved + need > r->cap_tok)
		return 0;
	sample_ *s = calloc(1, sizeof *s);
	if (!s)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (g->first_reserved)
		g->first_reserved = false;
	else
		r->reserved += need;
	s->g = g;
	s->k = g->started++;
	s->reserved = need;
	s->version = g->version;
	s->id = -1;
	float lp;
	int32_t t = draw_(r, g, s->k, 0, g->root_logits, -1, &lp, err);
	sw_error e = { 0 };
	int id = t < 0 ? -1 : sw_decoder_fork(r->d, g->root, &e);
	if (t >= 0 && (id < 0 || id >= r->max_seqs))
		sw_rollout_fail(err, &e, SW_EINVAL, "decoder");
	if (t < 0 || id < 0 || id >= r->max_seqs) {
		free_sample_(s);
		return err && err->code ? err->code : SW_EINVAL;
	}
	s->id = id;
	r->by_id[id] = s;
	r->live++;
	bool last = g->started == r->c.G;
	if (last) {
		/* every response has started: the prompt's pages stay with the forks */
		unlink_group_(r, g);
		remove_root_(r, g);
	}
	int rc = push_append_(r, io, s, t, lp, err);
	return rc ? rc : last ? 2 : 1;
}


/* The prompt record pulled last, when valid: a new group (NULL with *msg set when not). */
static group_ *group_of_(sw_rollout *r, const sw_rollout_io *io, char *msg, size_t size, sw_error *err)
{
	const char *badtype;
	/* where the input is shared out among ranks, its place in the whole input */
	uint64_t place = io->place ? io->place(io->ctx) : r->nread - 1;
	char *gid = sw_sample_group_id(r->in, place, &badtype);
	if (!gid) {
		if (badtype)
			snprintf(msg, size, "field 'id' is a %s, not a string or an integer", badtype);
		else
			sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	bool placed = false;
	const char *was = io->earlier ? io->earlier(io->ctx, &placed) : NULL;
	if (was) {
		snprintf(msg, size, "id '%.40s' is %.100s's too: an id names one prompt%s", gid, was,
		         placed ? " (without an id, a prompt's place names it, from 1)" : "");
		free(gid);
		return NULL;
	}
	int32_t *ptok = NULL;
	size_t n = 0;
	int max_new = r->c.max_new;
	sw_error e = { 0 };
	sw_val v;
	group_ *g = NULL;
	sw_sample_pixels px = { 0 };
	int rc = sw_sample_prompt(r->in, r->tok, r->V, &ptok, &n, &e);
	if (!rc)
		rc = sw_sample_pixels_of(r->in, &r->m->cfg, r->c.image_proc, &ptok, &n, &px, &e);
	if (rc == SW_ENOMEM) {
		sw_rollout_fail(err, &e, SW_ENOMEM, NULL);
	} else if (rc) {
		snprintf(msg, size, "%s", e.msg);
	} else if (n == 0) {
		snprintf(msg, size, "the prompt is empty (no tokens)");
	} else if (n >= (size_t)r->C) {
		snprintf(msg, size, "prompt has %zu tokens, the model's context is %d%s", n, r->C,
		         n == (size_t)r->C ? " (no room for a response)" : "");
	} else if (sw_rec_get(r->in, "max_new_tokens", &v) == 0 && v.type != SW_T_UINT) {
		snprintf(msg, size, "field 'max_new_tokens' is %s, not a whole number",
		         v.type == SW_T_INT ? "negative" : sw_type_name(v.type));
	} else if (sw_rec_get(r->in, "max_new_tokens", &v) == 0 && (v.v.u < 1 || v.v.u > (uint64_t)r->c.max_new)) {
		snprintf(msg, size, "field 'max_new_tokens' is %llu, not from 1 to --max-new-tokens %d",
		         (unsigned long long)v.v.u, r->c.max_new);
	} else {
		if (sw_rec_get(r->in, "max_new_tokens", &v) == 0)
			max_new = (int)v.v.u;
		const uint8_t *p;
		size_t nb;
		g = calloc(1, sizeof *g);
		if (!g || sw_rec_bytes(r->in, &p, &nb) || !(g->bytes = malloc(nb ? nb : 1))) {
			free(g);
			sw_fail(err, SW_ENOMEM, "out of memory");
			g = NULL;
		} else {
			memcpy(g->bytes, p, nb);
			g->nbytes = nb;
			g->gid = gid;
			g->ptok = ptok;
			g->plen = (int)n;
			g->max_new = max_new < r->C - g->plen ? max_new : r->C - g->plen;
			g->index = r->nread - 1;
			g->place = place;
			g->root = -1;
			g->px = px;
			return g;
		}
	}
	free(gid);
	free(ptok);
	sw_sample_pixels_free(&px);
	return NULL;
}

/*
 * Pull prompts until one is valid (*out, a new group) or the input ends
 * or pauses (*out NULL); < 0 on failure.
 */
static int admit_(sw_rollout *r, const sw_rollout_io *io, bool block, group_ **out, sw_error *err)
{
	*out = NULL;
	while (!r->input_done && !r->halted) {
		int rc = io->next(io->ctx, block, &r->in);
		if (rc == SW_ROLLOUT_WAIT)
			return 0;
		if (rc < 0)
			return sw_fail(err, rc, "cannot read the input: %s", sw_strerror(rc));
		if (rc == 0) {
			r->input_done = true;
			return 0;
		}
		r->nread++;
		char msg[sizeof r->halt_msg] = "";
		group_ *g = group_of_(r, io, msg, sizeof msg, err);
		if (g) {
			*out = g;
			return 0;
		}
		if (!msg[0])
			return err && err->code ? err->code : SW_ENOMEM;
		sw_rollout_invalid(r, io, msg);
		/* with skip_invalid its place in the output order is empty */
		if (r->c.skip_invalid && (rc = sw_rollout_order_skip(r->order, r->nread - 1, io, err)))
			return rc;
	}
	return 0;
}

static int add_root_(sw_rollout *r, group_ *g, sw_error *err)
{
	sw_error e = { 0 };
	/* the images' features go into the root's cache: the G forks share them with the text */
	sw_images im = { g->px.n, g->px.pixels };
	int id = im.n ? sw_decoder_add_images(r->d, g->ptok, g->plen, &im, &e) : sw_decoder_add(r->d, g->ptok, g->plen, &e);
	if (id < 0 || id >= r->max_seqs)
		return sw_rollout_fail(err, &e, SW_EINVAL, "decoder");
	g->root = id;
	r->root_of[id] = g;
	free(g->root_logits);
	g->root_logits = NULL;
	r->reserved += root_need_(g);
	return 0;
}

/* Responses still to start, over the groups admitted. */
static int64_t demand_(const sw_rollout *r)
{
	int64_t n = 0;
	for (const group_ *g = r->groups; g; g = g->next)
		n += r->c.G - g->started;
	return n;
}

/* Fill the batch: fork prefilled roots, admit prompts (roots to prefill) while responses are wanted. */
static int fill_(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	int rc;
	if (r->c.padded && r->live > 0)
		return 0;
	pad_clear_(r);
	for (group_ *g = r->groups, *nx; g; g = nx) {
		nx = g->next;
		while (g->root_logits && r->live < r->c.batch)
			if ((rc = start_sample_(r, io, g, err)) != 1) {
				if (rc < 0)
					return rc;
				break;
			}
	}
	while (r->live + demand_(r) < r->c.batch && !r->input_done && !r->halted) {
		int64_t sm = (int64_t)r->c.max_new + 32;
		/* room for the prompt, its first response, and one more response of anyone's */
		if (r->groups && r->reserved + (int64_t)r->C + 16 + 2 * sm > r->cap_tok)
			break;
		group_ *g;
		if ((rc = admit_(r, io, r->c.padded || (r->live == 0 && !r->groups), &g, err)))
			return rc;
		if (!g)
			break;
		if (r->reserved + root_need_(g) + sample_need_(r, g) > r->cap_tok) {
			rc = sw_fail(err, SW_ERANGE,
			             "the KV cache of %lld tokens cannot hold a prompt of %d tokens and a response",
			             (long long)r->cap_tok, g->plen);
			free_group_(g);
			return rc;
		}
		*r->groups_tail = g;
		r->groups_tail = &g->next;
		if ((rc = add_root_(r, g, err)))
			return rc;
		r->reserved += sample_need_(r, g);
		g->first_reserved = true;
	}
	return 0;
}

/* The weights changed under us: what the cache holds is stale.  Live
 * responses end as abort; roots are prefilled again. */
static int invalidate_(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	int rc;
	for (int i = 0; i < r->max_seqs; i++)
		if (r->by_id[i] && (rc = finish_(r, io, r->by_id[i], "abort", err)))
			return rc;
	for (group_ *g = r->groups; g; g = g->next) {
		if (g->root >= 0) {
			remove_root_(r, g);
			if ((rc = add_root_(r, g, err)))
				return rc;
		}
	}
	return 0;
}

static double now_(const sw_rollout *r)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - r->t0.tv_sec) + (double)(t.tv_nsec - r->t0.tv_nsec) * 1e-9;
}

static int gen_step_(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	sw_error e = { 0 };
	int rc;
	if (!r->started) {
		r->started = true;
		if ((rc = sw_rollout_read_begin(r, &r->last_seq, err)))
			return rc;
		clock_gettime(CLOCK_MONOTONIC, &r->t0);
	}
	if ((rc = fill_(r, io, err)))
		return rc;
	if (!r->live && !r->groups) {
		r->done = true;
		if ((rc = sw_rollout_order_drain(r->order, io, err)))
			return rc;
		return 0;
	}
	uint64_t seq;
	if ((rc = sw_rollout_read_begin(r, &seq, err)))
		return rc;
	if (seq != r->last_seq) {
		/* the weights changed between steps: the cache is of the old ones */
		r->last_seq = seq;
		return (rc = invalidate_(r, io, err)) ? rc : 1;
	}
	uint64_t ver = version_(r);
	int n;
	const int *ids;
	const float *logits;
	if (sw_decoder_step(r->d, &n, &ids, &logits, &e))
		return sw_rollout_fail(err, &e, 0, "decoding failed");
	if (sw_rollout_read_retry(r, seq)) {
		/* a write overlapped the step: nothing it computed is used */
		if ((rc = invalidate_(r, io, err)))
			return rc;
		return (rc = sw_rollout_read_begin(r, &r->last_seq, err)) ? rc : 1;
	}
	if (n == 0 && r->live == 0)
		return sw_fail(err, SW_EINVAL, "internal error: no response can start (KV cache of %lld tokens, %lld reserved)",
		               (long long)r->cap_tok, (long long)r->reserved);
	predraw_(r, n, ids, logits);
	for (int i = 0; i < n; i++) {
		int id = ids[i];
		const float *row = logits + (size_t)i * (size_t)r->V;
		if (id < 0 || id >= r->max_seqs)
			return sw_fail(err, SW_EINVAL, "decoder returned an unknown sequence %d", id);
		if (r->root_of[id]) {
			group_ *g = r->root_of[id];
			if (!g->root_logits && !(g->root_logits = malloc(sizeof(float) * (size_t)r->V)))
				return sw_fail(err, SW_ENOMEM, "out of memory");
			memcpy(g->root_logits, row, sizeof(float) * (size_t)r->V);
			g->version = ver;
			continue;
		}
		if (r->pad_left[id] >= 0) {
			if ((rc = pad_feed_(r, id, err)))
				return rc;
			continue;
		}
		sample_ *s = r->by_id[id];
		if (!s)
			return sw_fail(err, SW_EINVAL, "decoder returned a sequence %d that is not live", id);
		float lp;
		int32_t t = draw_(r, s->g, s->k, s->n, row, i, &lp, err);
		if (t < 0)
			return t;
		if ((rc = push_append_(r, io, s, t, lp, err)))
			return rc;
	}
	uint64_t out = sw_rollout_order_out(r->order);
	if (out != r->flushed && io->flush) {
		/* samples flow on while generation goes on: what finished is
		 * flushed within 50 ms (and a step), not after every sample */
		double now = now_(r);
		if (now - r->last_flush >= 0.05) {
			if ((rc = io->flush(io->ctx)))
				return sw_fail(err, rc < 0 ? rc : SW_EIO, "the output cannot be flushed");
			r->last_flush = now;
			r->flushed = out;
		}
	}
	return 1;
}

int sw_rollout_step(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	if (r->failed)
		return sw_fail(err, r->failed, "%s", r->fail_msg);
	if (r->done)
		return r->halted ? sw_fail(err, SW_EFORMAT, "%s", r->halt_msg) : 0;
	int rc = r->c.score ? sw_rollout_score_step(r, io, err) : gen_step_(r, io, err);
	if (rc < 0) {
		/* the state is of no use after a failure: every later step says so */
		r->failed = rc;
		snprintf(r->fail_msg, sizeof r->fail_msg, "%s", err ? err->msg : sw_strerror(rc));
	} else if (rc == 0 && r->halted) {
		rc = sw_fail(err, SW_EFORMAT, "%s", r->halt_msg);
	}
	return rc;
}

int sw_rollout_run(sw_rollout *r, const sw_rollout_io *io, sw_error *err)
{
	int rc;
	while ((rc = sw_rollout_step(r, io, err)) == 1)
		;
	return rc;
}
