/*
 * trainer.c - sw_trainer's step (rl.h): the samples read and checked, the
 * old and reference log-prob passes, advantages over the whole stream,
 * then epochs x minibatches AdamW updates, each over micro batches, and the
 * statistics and metrics record of the step.  Where the weights live and
 * how a step is committed is trainer_state.c's.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rl/trainer_internal.h"

struct tsample {
	sw_rec *rec;
	char *file;         /* for messages */
	uint64_t recno;     /* 1-based within file */
	int32_t *tok;       /* prompt then response */
	size_t np, nr;
	uint64_t phash;     /* of the prompt's tokens (prompt_hash_): a prompt's samples side by side */
	sw_sample_pixels px;  /* a LLaVA sample's images (tok holds their expanded placeholders) */
	float *behav;       /* the rollout's log-probs of the response, or NULL */
	double reward;
	char *group;        /* as text */
	uint64_t gid;
	int valid;          /* 0: verifier_error, masked out */
	int mine;           /* valid, of our rank */
	long long micro, rank, version; /* -1: absent */
	long long owner;    /* the rank that trains it; -1: not known */
	size_t nloss;       /* tokens the loss is over */
	size_t goff;        /* its first token in the flat per-token arrays */
	double adv;
};

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int oom_(sw_error *err)
{
	return sw_fail(err, SW_ENOMEM, "out of memory");
}

/* An error about sample s: "FILE: record N: ...". */
static int rec_fail_(sw_error *err, const tsample *s, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int rec_fail_(sw_error *err, const tsample *s, int code, const char *fmt, ...)
{
	char m[sizeof err->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	sw_fail(err, code, "%s: record %llu: %s", s->file, (unsigned long long)s->recno, m);
	if (err)
		err->record = s->recno;
	return code;
}

static int grow_(void *pp, size_t n, size_t size)
{
	void **p = pp;
	if (n && size > SIZE_MAX / n)
		return SW_ENOMEM;
	void *q = realloc(*p, n && size ? n * size : 1);
	if (!q)
		return SW_ENOMEM;
	*p = q;
	return 0;
}

/* ---- the object --------------------------------------------------------------------------- */

sw_trainer_config sw_trainer_defaults(void)
{
	sw_trainer_config c;
	memset(&c, 0, sizeof c);
	c.algo = SW_RL_GRPO;
	c.agg = sw_rl_algo_default_agg(c.algo);
	c.adam = sw_adamw_defaults(1e-6f);
	c.adam.max_grad_norm = 1.0f;
	c.loss.clip_low = 0.2;
	c.loss.clip_high = 0.2;
	c.loss.kl_kind = SW_RL_K3;
	c.epochs = 1;
	c.minibatches = 1;
	c.micro_tokens = 0; /* sized by micro_budget_ */
	c.rank = -1;
	return c;
}

sw_trainer *sw_trainer_new(const sw_trainer_config *c, sw_error *err)
{
	if (c->epochs < 1 || c->minibatches < 1) {
		sw_fail(err, SW_EINVAL, "trainer: epochs and minibatches must be at least 1");
		return NULL;
	}
	sw_trainer *t = calloc(1, sizeof *t);
	if (!t || (c->ref && !(t->ref = strdup(c->ref)))) {
		free(t);
		oom_(err);
		return NULL;
	}
	t->c = *c;
	t->c.ref = t->ref;
	t->be = c->backend ? c->backend : sw_backend_get(NULL, NULL);
	t->c.loss.algo = c->algo;
	t->rank = sw_comm_rank(c->comm);
	t->t0 = now_();
	return t;
}

static void sample_release_(tsample *s)
{
	sw_rec_free(s->rec);
	free(s->file), free(s->tok), free(s->behav), free(s->group);
	sw_sample_pixels_free(&s->px);
}

void sw_trainer_free(sw_trainer *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		sample_release_(&t->s[i]);
	free(t->s);
	sw_tokenizer_free(t->tok);
	sw_image_proc_free(t->proc);
	free(t->media_dir);
	if (t->own_model)
		sw_model_free(t->model); /* gives the weight store's arena back first */
	sw_model_free(t->mm);
	sw_model_free(t->vm);
	if (t->o_dev)
		t->be->unborrow(t->o_dev);
	sw_store_close(t->o);
	sw_store_close(t->w);
	free(t->ref), free(t->model_dir), free(t->out), free(t->tok_dir), free(t->w_spec), free(t->o_spec);
	free(t);
}

int sw_trainer_load_dir(sw_trainer *t, const char *model_dir, const char *out, sw_error *err)
{
	sw_error e2 = { 0 };
	int rc;
	if (t->model)
		return sw_fail(err, SW_EINVAL, "the trainer has its weights already");
	if ((rc = sw_trainer_check_out(out, err)))
		return rc;
	if (!(t->model_dir = strdup(model_dir)) || !(t->out = strdup(out)) || !(t->tok_dir = strdup(model_dir)))
		return oom_(err);
	if (!(t->model = sw_model_load_on(t->be, model_dir, &e2)))
		return sw_fail(err, e2.code, "cannot load the model: %s", e2.msg);
	t->own_model = 1;
	return sw_trainer_state_load(t, model_dir, err);
}

int sw_trainer_attach(sw_trainer *t, sw_model *model, float *m, float *v, uint64_t version, uint64_t updates,
                      const uint64_t *rng4, sw_error *err)
{
	if (t->model)
		return sw_fail(err, SW_EINVAL, "the trainer has its weights already");
	if (!model || !m || !v)
		return sw_fail(err, SW_EINVAL, "trainer: no weights or moments to attach");
	t->model = model;
	t->be = model->backend; /* the moments are on it too */
	t->m = m;
	t->v = v;
	t->version = version;
	t->updates = updates;
	if (rng4)
		memcpy(t->rng.s, rng4, sizeof t->rng.s);
	else
		sw_rng_seed(&t->rng, t->c.seed);
	return 0;
}

sw_model *sw_trainer_model(sw_trainer *t)
{
	return t->model;
}

uint64_t sw_trainer_version(const sw_trainer *t)
{
	return t->version;
}

size_t sw_trainer_nsamples(const sw_trainer *t)
{
	return t->n;
}

sw_rec *sw_trainer_sample(sw_trainer *t, size_t i)
{
	return i < t->n ? t->s[i].rec : NULL;
}

/* ---- the samples --------------------------------------------------------------------------- */

/* A token array of a field that holds ids (the vocabulary is checked later, with the positions). */
static int tokens_(tsample *s, const char *key, int32_t **ids, size_t *n, sw_error *err)
{
	sw_error e2 = { 0 };
	int rc = sw_sample_tokens(s->rec, key, 0, ids, n, &e2);
	if (rc == SW_ETYPE || rc == SW_ERANGE)
		return rec_fail_(err, s, rc, "field '%s' is not an array of token ids", key);
	if (rc)
		return rec_fail_(err, s, rc, "field '%s': %s", key, sw_strerror(rc));
	return 0;
}

/* The tokenizer of the model directory, loaded at the first text. */
static int tokenizer_(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	if (t->tok || !t->tok_dir)
		return 0; /* a store has none: the accessor says the text needs one */
	if (!(t->tok = sw_tokenizer_load(t->tok_dir, &e2)))
		return sw_fail(err, e2.code, "cannot load the tokenizer of '%s': %s", t->tok_dir, e2.msg);
	return 0;
}

/* The image processor of the model directory, loaded at the first LLaVA sample (a store has none). */
static int image_proc_(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	const char *dir = t->media_dir ? t->media_dir : t->tok_dir;
	if (t->proc || !dir || !t->model->cfg.vision.model_type[0])
		return 0;
	if (sw_image_proc_load(dir, &t->proc, &e2))
		return sw_fail(err, e2.code, "%s", e2.msg);
	return 0;
}

int sw_trainer_media_dir(sw_trainer *t, const char *dir, sw_error *err)
{
	char *d = strdup(dir);
	if (!d)
		return oom_(err);
	free(t->media_dir);
	t->media_dir = d;
	return 0;
}

/* An array of numbers (any msgpack number type), as floats. */
static int numbers_(tsample *s, const char *key, float **out, size_t *n, int *present, sw_error *err)
{
	sw_val v, e;
	int rc = sw_rec_get(s->rec, key, &v);
	*out = NULL;
	*present = rc != SW_ENOENT;
	if (rc == SW_ENOENT)
		return 0;
	if (rc || v.type != SW_T_ARRAY)
		return rec_fail_(err, s, SW_ETYPE, "field '%s' is not an array of numbers", key);
	float *a = calloc(v.v.count ? v.v.count : 1, sizeof *a);
	if (!a)
		return oom_(err);
	sw_iter it;
	sw_iter_init(&it, &v);
	size_t i = 0;
	double x;
	while ((rc = sw_iter_next(&it, &e)) == 1) {
		if (sw_val_number(&e, &x)) {
			free(a);
			return rec_fail_(err, s, SW_ETYPE, "field '%s' value %zu is a %s, not a number", key, i + 1,
			                 sw_type_name(e.type));
		}
		a[i++] = (float)x;
	}
	if (rc < 0) {
		free(a);
		return rec_fail_(err, s, rc, "field '%s': %s", key, sw_strerror(rc));
	}
	*out = a;
	*n = i;
	return 0;
}

static int uint_field_(tsample *s, const char *key, long long *out, sw_error *err)
{
	uint64_t u;
	int rc = sw_rec_get_u64(s->rec, key, &u);
	*out = -1;
	if (rc == SW_ENOENT)
		return 0;
	if (rc || u > (uint64_t)INT64_MAX)
		return rec_fail_(err, s, SW_ETYPE, "field '%s' is not a whole number >= 0", key);
	*out = (long long)u;
	return 0;
}

static int group_(const sw_trainer *t, tsample *s, sw_error *err)
{
	sw_val v;
	char num[32];
	int rc = sw_rec_get(s->rec, "group", &v);
	if (rc == SW_ENOENT)
		return rec_fail_(err, s, rc, "field 'group' is missing (%s compares the responses of one prompt)",
		                 sw_rl_algo_name(t->c.algo));
	if (rc)
		return rec_fail_(err, s, rc, "field 'group': %s", sw_strerror(rc));
	if (v.type == SW_T_STR) {
		if (!(s->group = calloc(v.v.str.len + 1, 1)))
			return oom_(err);
		memcpy(s->group, v.v.str.ptr, v.v.str.len);
		return 0;
	}
	if (v.type == SW_T_UINT)
		snprintf(num, sizeof num, "%llu", (unsigned long long)v.v.u);
	else if (v.type == SW_T_INT)
		snprintf(num, sizeof num, "%lld", (long long)v.v.i);
	else
		return rec_fail_(err, s, SW_ETYPE, "field 'group' is a %s, not a string", sw_type_name(v.type));
	return (s->group = strdup(num)) ? 0 : oom_(err);
}

/*
 * An error of the sample accessor, prefixed with the sample.  Text in a
 * sample trained on a store (no model directory, no tokenizer) is said as
 * sw-train has always said it.
 */
static int text_fail_(const sw_trainer *t, const tsample *s, int rc, sw_error *e2, sw_error *err)
{
	static const char none[] = " is text, and there is no tokenizer: give token ids";
	size_t n = strlen(e2->msg), k = sizeof none - 1;
	if (!t->tok_dir && n > k && !strcmp(e2->msg + n - k, none))
		return rec_fail_(err, s, rc, "%.*s is text, and a store has no tokenizer: give token ids", (int)(n - k),
		                 e2->msg);
	return rec_fail_(err, s, rc, "%s", e2->msg);
}

/* FNV-1a of a prompt's tokens: sorted by it, equal prompts come side by side. */
static uint64_t prompt_hash_(const int32_t *tok, size_t np)
{
	uint64_t h = 1469598103934665603ull;
	const unsigned char *b = (const unsigned char *)tok;
	for (size_t i = 0; i < np * sizeof *tok; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* The prompt and the response as one token sequence, checked against the model. */
static int sequence_(sw_trainer *t, tsample *s, sw_error *err)
{
	const sw_model_config *cfg = &t->model->cfg;
	sw_error e2 = { 0 };
	int32_t *p = NULL, *r = NULL;
	size_t np = 0, nr = 0;
	int rc;
	if (!sw_sample_prompt_is_text(s->rec))
		rc = tokens_(s, "prompt_tokens", &p, &np, err);
	else if ((rc = tokenizer_(t, err)) == 0 &&
	         (rc = sw_sample_prompt(s->rec, t->tok, cfg->vocab_size, &p, &np, &e2)) != 0)
		rc = rc == SW_ENOENT ? rec_fail_(err, s, rc, "no prompt: the record has no 'prompt_tokens', 'messages' "
		                                             "or 'prompt' field")
		                     : text_fail_(t, s, rc, &e2, err);
	/* a sample's pictures and its prompt's placeholders, as the rollout takes them */
	if (!rc && !(rc = image_proc_(t, err)) &&
	    (rc = sw_sample_pixels_of(s->rec, cfg, t->proc, &p, &np, &s->px, &e2)) != 0)
		rc = rec_fail_(err, s, rc, "%s", e2.msg);
	if (rc)
		goto out;
	if (!sw_sample_response_is_text(s->rec))
		rc = tokens_(s, "response_tokens", &r, &nr, err);
	else if ((rc = tokenizer_(t, err)) == 0 &&
	         (rc = sw_sample_response(s->rec, t->tok, cfg->vocab_size, &r, &nr, &e2)) != 0)
		rc = text_fail_(t, s, rc, &e2, err);
	if (rc)
		goto out;
	if (np == 0) {
		rc = rec_fail_(err, s, SW_EINVAL, "the prompt is empty: the first response token needs a token before it");
		goto out;
	}
	if (cfg->vision.model_type[0] && sw_image_count_tokens(r, nr, cfg->vision.image_token_id)) {
		rc = rec_fail_(err, s, SW_EINVAL, "the response holds the image token (%d): only a prompt takes pictures",
		               cfg->vision.image_token_id);
		goto out;
	}
	if (np + nr > (size_t)cfg->max_position_embeddings) {
		rc = rec_fail_(err, s, SW_ERANGE, "%zu prompt and %zu response tokens exceed the model's %d positions", np, nr,
		          cfg->max_position_embeddings);
		goto out;
	}
	if (!(s->tok = malloc((np + nr) * sizeof *s->tok))) {
		rc = oom_(err);
		goto out;
	}
	for (size_t i = 0; i < np + nr; i++) {
		int32_t x = i < np ? p[i] : r[i - np];
		if (x >= cfg->vocab_size) {
			rc = rec_fail_(err, s, SW_ERANGE, "field '%s' holds token %u, outside the model's vocabulary of %d",
			          i < np ? "prompt_tokens" : "response_tokens", (unsigned)x, cfg->vocab_size);
			goto out;
		}
		s->tok[i] = x;
	}
	s->np = np;
	s->nr = nr;
	s->phash = prompt_hash_(s->tok, np);
	rc = 0;
out:
	free(p);
	free(r);
	return rc;
}

/* Read and check one sample. */
static int load_sample_(sw_trainer *t, tsample *s, sw_error *err)
{
	sw_val v;
	int rc, present;
	if ((rc = uint_field_(s, "micro", &s->micro, err)) || (rc = uint_field_(s, "rank", &s->rank, err)) ||
	    (rc = uint_field_(s, "policy_version", &s->version, err)))
		return rc;
	/* a failed verifier masks the sample: it is never given a default reward */
	s->valid = !(sw_rec_get(s->rec, "verifier_error", &v) == 0 && v.type != SW_T_NIL);
	s->mine = s->valid && (t->c.rank < 0 || s->rank == t->c.rank);
	if (t->c.comm) {
		long long size = sw_comm_size(t->c.comm);
		if (s->rank >= size)
			return rec_fail_(err, s, SW_ERANGE, "field 'rank' is %lld, but there are %lld ranks "
			                 "(balance the stream with sw-balance -n %lld)", s->rank, size, size);
		s->owner = s->rank >= 0 ? s->rank : (long long)((size_t)(s - t->s) % (size_t)size);
		s->mine = s->valid && s->owner == sw_comm_rank(t->c.comm);
	} else
		s->owner = 0;
	if (t->c.rank >= 0 && s->valid && s->rank < 0)
		return rec_fail_(err, s, SW_ENOENT,
		                 "field 'rank' is missing (--rank %lld trains the samples sw-balance gave that rank)",
		                 t->c.rank);
	if (!s->valid)
		return 0;
	if ((rc = sequence_(t, s, err)))
		return rc;
	s->nloss = t->c.train_all ? s->np + s->nr - 1 : s->nr;
	if (t->c.algo == SW_RL_SFT)
		return 0;

	size_t nlp = 0;
	if ((rc = numbers_(s, "logprobs", &s->behav, &nlp, &present, err)))
		return rc;
	if (present && nlp != s->nr)
		return rec_fail_(err, s, SW_EINVAL, "field 'logprobs' has %zu values, 'response_tokens' has %zu", nlp,
		                 s->nr);
	for (size_t i = 0; s->behav && i < nlp; i++)
		if (!isfinite(s->behav[i]) || s->behav[i] > 0)
			return rec_fail_(err, s, SW_ERANGE, "field 'logprobs' value %zu is %g, not a log-probability", i + 1,
			                 (double)s->behav[i]);
	rc = sw_rec_get_f64(s->rec, "reward", &s->reward);
	if (rc == SW_ENOENT)
		return rec_fail_(err, s, rc, "field 'reward' is missing (score the samples with sw-verify first)");
	if (rc)
		return rec_fail_(err, s, rc, "field 'reward' is not a number");
	if (!isfinite(s->reward))
		return rec_fail_(err, s, SW_ERANGE, "field 'reward' is %s", isnan(s->reward) ? "NaN" : "infinite");
	if (t->c.algo != SW_RL_REINFORCE_PP)
		return group_(t, s, err);
	return 0;
}

int sw_trainer_add(sw_trainer *t, sw_rec *rec, const char *file, uint64_t recno, sw_error *err)
{
	if (!t->model) {
		sw_rec_free(rec);
		return sw_fail(err, SW_EINVAL, "the trainer has no weights to check the sample against");
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		if (grow_(&t->s, cap, sizeof *t->s)) {
			sw_rec_free(rec);
			return oom_(err);
		}
		t->cap = cap;
	}
	tsample *s = &t->s[t->n++];
	memset(s, 0, sizeof *s);
	s->owner = -1;
	s->rec = rec;
	s->recno = recno;
	if (!(s->file = strdup(file)))
		return oom_(err);
	return load_sample_(t, s, err);
}

long long sw_trainer_sample_owner(const sw_trainer *t, size_t i)
{
	return i < t->n ? t->s[i].owner : -1;
}

/* Number the groups: equal strings, equal ids, whatever their order in the
 * stream (within a group, in the stream's order). */
static int cmp_group_(const void *a, const void *b)
{
	const tsample *const *x = a, *const *y = b;
	int c = strcmp((*x)->group, (*y)->group);
	return c ? c : *x < *y ? -1 : *x > *y;
}

/* Whether samples a and b were given the same prompt: its tokens, and its images' pixels. */
static int same_prompt_of_(const tsample *a, const tsample *b)
{
	if (a->np != b->np || a->phash != b->phash || memcmp(a->tok, b->tok, a->np * sizeof *a->tok) ||
	    a->px.n != b->px.n || a->px.size != b->px.size)
		return 0;
	return !a->px.n || !memcmp(a->px.pixels, b->px.pixels, sizeof(float) * 3 * (size_t)a->px.n * a->px.size * a->px.size);
}

/* A group is one prompt's responses: one holding two prompts (two prompts of
 * one id, say) would take each one's advantage against the other's rewards,
 * and is an error naming the first sample that differs. */
static int number_groups_(sw_trainer *t, sw_error *err)
{
	tsample **v = calloc(t->n ? t->n : 1, sizeof *v);
	size_t n = 0;
	if (!v)
		return oom_(err);
	for (size_t i = 0; i < t->n; i++)
		if (t->s[i].group)
			v[n++] = &t->s[i];
	qsort(v, n, sizeof *v, cmp_group_);
	uint64_t id = 0;
	size_t lead = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && strcmp(v[i]->group, v[i - 1]->group))
			id++, lead = i;
		else if (i && !same_prompt_of_(v[i], v[lead])) {
			int rc = rec_fail_(err, v[i], SW_EINVAL,
			                   "group '%.100s' holds another prompt than record %llu%s%s (a group is one "
			                   "prompt's responses: give each prompt an id of its own)",
			                   v[i]->group, (unsigned long long)v[lead]->recno,
			                   strcmp(v[lead]->file, v[i]->file) ? " of " : "",
			                   strcmp(v[lead]->file, v[i]->file) ? v[lead]->file : "");
			free(v);
			return rc;
		}
		v[i]->gid = id;
	}
	free(v);
	return 0;
}

/* ---- forward and backward over micro batches ------------------------------------------------ */

/* The loss tokens of sample s start at row first_row_(s) of its sequence. */
static size_t first_row_(const sw_trainer *t, const tsample *s)
{
	return t->c.train_all ? 0 : s->np - 1;
}

typedef struct packed {
	int32_t *tokens, *cu;
	int32_t *pre;          /* [nseq] the sequence each continues (sw_batch.prefix), or -1 */
	int32_t *tgt;          /* per row: the next token on the loss's rows, else -1 */
	size_t *base;          /* per sample: the row of its token 0, as if it ran whole (see pack_) */
	size_t *lead;          /* per sample: the first sample of the micro batch with its prompt */
	int32_t *pseq;         /* per sample that leads a shared prompt: its prefix's sequence */
	float *px;             /* the micro batch's images, in their placeholders' order */
	int nimg, nseq, shared;
	size_t cap_px;
	float *lp, *ent;       /* per row */
	size_t rows, whole, cap_rows, cap_seq;
} packed;

/*
 * Whether s may share its prompt with the micro batch's other samples of the
 * same prompt: the backend can (attn_prefix_*), sharing is not turned off,
 * the loss is over the response alone (not train_all: then nloss = nr) and
 * there are no images.
 */
static int shareable_(const sw_trainer *t, const tsample *s)
{
	return !t->c.no_prompt_sharing && t->be->attn_prefix_fwd && t->be->attn_prefix_bwd && !t->c.train_all &&
	       s->np >= 2 && s->nr >= 1 && !s->px.n;
}

static int same_prompt_(const tsample *a, const tsample *b)
{
	return a->phash == b->phash && a->np == b->np && !memcmp(a->tok, b->tok, a->np * sizeof *a->tok);
}

/*
 * The micro batch v[0..n) as one packed batch.  Samples of one prompt
 * (shareable_) run the prompt's tokens once: a sequence of the prompt but
 * its last token, then one sequence for each sample, the prompt's last
 * token and the response, continuing it (sw_batch.prefix), so that its
 * first row still gives the response's first log-prob.  A shareable sample
 * alone in its micro batch takes the same form (no row more than whole):
 * its log-probs are then the same bits whichever micro batch it is in, so
 * at the first step the reference's and the policy's are equal (KL 0) as
 * they were before prompts were shared.  Any other sample is one sequence,
 * prompt then response.  base[i] is the row sample i's token 0 would have
 * run whole: its rows from np - 1 on (every loss row) are base[i] + r
 * either way.
 */
static int pack_(const sw_trainer *t, packed *pk, tsample *const *v, size_t n, sw_error *err)
{
	size_t rows = 0, whole = 0, groups = 0;
	if (n > pk->cap_seq) {
		if (grow_(&pk->cu, 2 * n + 1, sizeof *pk->cu) || grow_(&pk->pre, 2 * n, sizeof *pk->pre) ||
		    grow_(&pk->base, n, sizeof *pk->base) || grow_(&pk->lead, n, sizeof *pk->lead) ||
		    grow_(&pk->pseq, n, sizeof *pk->pseq))
			return oom_(err);
		pk->cap_seq = n;
	}
	/* lead: the first sample of the micro batch with each prompt */
	for (size_t i = 0; i < n; i++) {
		pk->lead[i] = i;
		for (size_t j = 0; j < i && shareable_(t, v[i]); j++)
			if (pk->lead[j] == j && shareable_(t, v[j]) && same_prompt_(v[i], v[j])) {
				pk->lead[i] = j;
				break;
			}
	}
	for (size_t i = 0; i < n; i++) {
		whole += v[i]->np + v[i]->nr;
		if (!shareable_(t, v[i])) {
			rows += v[i]->np + v[i]->nr;
			continue;
		}
		rows += v[i]->nr + 1;
		if (pk->lead[i] == i)
			rows += v[i]->np - 1, groups++;
	}
	if (rows > INT32_MAX)
		return sw_fail(err, SW_ETOOBIG, "a micro batch of %zu tokens is too large", rows);
	if (rows > pk->cap_rows) {
		if (grow_(&pk->tokens, rows, sizeof *pk->tokens) || grow_(&pk->tgt, rows, sizeof *pk->tgt) ||
		    grow_(&pk->lp, rows, sizeof *pk->lp) ||
		    grow_(&pk->ent, rows, sizeof *pk->ent))
			return oom_(err);
		pk->cap_rows = rows;
	}
	size_t nimg = 0, each = 0;
	for (size_t i = 0; i < n; i++)
		nimg += (size_t)v[i]->px.n;
	if (nimg) {
		/* (a sample with images is of a LLaVA model: its tower's size) */
		int S = 0;
		for (size_t i = 0; i < n && !S; i++)
			S = v[i]->px.n ? v[i]->px.size : 0;
		each = (size_t)3 * (size_t)S * (size_t)S;
		if (nimg * each > pk->cap_px) {
			if (grow_(&pk->px, nimg * each, sizeof *pk->px))
				return oom_(err);
			pk->cap_px = nimg * each;
		}
	}
	int q = 0;
	pk->cu[0] = 0;
	for (size_t i = 0, k = 0; i < n; i++) {
		size_t len = v[i]->np + v[i]->nr, from = 0; /* the sample's tokens this sequence runs */
		int shared = shareable_(t, v[i]);
		if (shared && pk->lead[i] == i) { /* the prompt but its last token, once */
			int32_t *tok = pk->tokens + pk->cu[q];
			memcpy(tok, v[i]->tok, (v[i]->np - 1) * sizeof *tok);
			for (size_t r = 0; r + 1 < v[i]->np; r++)
				pk->tgt[pk->cu[q] + r] = -1;
			pk->pre[q] = -1;
			pk->cu[q + 1] = pk->cu[q] + (int32_t)(v[i]->np - 1);
			pk->pseq[i] = q++;
		}
		if (shared)
			from = v[i]->np - 1;
		pk->pre[q] = shared ? pk->pseq[pk->lead[i]] : -1;
		pk->base[i] = (size_t)pk->cu[q] - from;
		int32_t *tok = pk->tokens + pk->base[i], *tgt = pk->tgt + pk->base[i];
		memcpy(tok + from, v[i]->tok + from, (len - from) * sizeof *pk->tokens);
		/* the loss's rows are the last nloss but the sequence's last (first_row_) */
		for (size_t r = from; r < len; r++)
			tgt[r] = r + 1 < len && r + 1 + v[i]->nloss >= len ? v[i]->tok[r + 1] : -1;
		pk->cu[q + 1] = pk->cu[q] + (int32_t)(len - from);
		q++;
		if (v[i]->px.n)
			memcpy(pk->px + k * each, v[i]->px.pixels, (size_t)v[i]->px.n * each * sizeof *pk->px);
		k += (size_t)v[i]->px.n;
	}
	pk->nseq = q;
	pk->shared = groups > 0;
	pk->nimg = (int)nimg;
	pk->rows = rows;
	pk->whole = whole;
	return 0;
}

static void packed_release_(packed *pk)
{
	free(pk->tokens), free(pk->tgt), free(pk->cu), free(pk->lp), free(pk->ent);
	free(pk->pre), free(pk->base), free(pk->lead), free(pk->pseq);
	free(pk->px);
}

static int forward_(const sw_trainer *t, sw_engine *e, packed *pk, tsample *const *v, size_t n, int for_backward,
                    int want_ent, const char *what, sw_error *err)
{
	sw_error e2 = { 0 };
	int rc = pack_(t, pk, v, n, err);
	if (rc)
		return rc;
	sw_batch b = { pk->nseq, pk->tokens, pk->cu, pk->tgt, pk->shared ? pk->pre : NULL };
	sw_images im = { pk->nimg, pk->px };
	if (sw_engine_forward_images(e, &b, &im, for_backward, pk->lp, want_ent ? pk->ent : NULL, &e2))
		return sw_fail(err, e2.code, "%s: %s (micro batch starting at %s record %llu)", what, e2.msg, v[0]->file,
		               (unsigned long long)v[0]->recno);
	return 0;
}

/*
 * Micro batches: by the samples' `micro` field (sw-balance's, which places
 * work on ranks and knows nothing of this rank's memory: one over the token
 * budget is cut again, in its order), else cut by sw_micro_split() under
 * the token budget.  v is reordered so that each
 * micro batch is a run of it: mb[i] .. mb[i] + len[i].
 */
typedef struct micro_list {
	tsample ***mb;
	size_t *len;
	size_t n;
} micro_list;

typedef struct mkey_ {
	uint64_t key, prompt; /* the micro batch, then (samples of one prompt side by side) the prompt's hash */
	size_t tie;
	tsample *s;
} mkey_;

static int cmp_mkey_(const void *a, const void *b)
{
	const mkey_ *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->prompt != y->prompt)
		return x->prompt < y->prompt ? -1 : 1;
	return x->tie < y->tie ? -1 : x->tie > y->tie;
}

/*
 * Without the `micro` field, items of work for sw_micro_split: one sample,
 * or (when prompts are shared) a run of samples of one prompt, as many as
 * fit the budget with the prompt counted once: a GRPO group, or the group
 * cut in pieces.  unit[i] is sample v[order[i]]'s item; cost the items'
 * tokens; the number of items.
 */
static size_t units_(const sw_trainer *t, tsample **v, size_t n, size_t budget, size_t *order, size_t *unit,
                     uint64_t *cost, mkey_ *k)
{
	for (size_t i = 0; i < n; i++)
		k[i] = (mkey_){ shareable_(t, v[i]) ? v[i]->phash : 0, 0, i, v[i] };
	qsort(k, n, sizeof *k, cmp_mkey_);
	size_t nu = 0;
	for (size_t i = 0; i < n; i++) {
		tsample *s = v[k[i].tie];
		order[i] = k[i].tie;
		size_t alone = s->np + s->nr;
		if (i && shareable_(t, s)) {
			tsample *p = v[k[i - 1].tie];
			if (shareable_(t, p) && same_prompt_(s, p) && cost[nu - 1] + s->nr + 1 <= budget) {
				/* the first sample's prompt counts once: np - 1 tokens, then nr + 1 a sample */
				cost[nu - 1] += s->nr + 1;
				unit[i] = nu - 1;
				continue;
			}
		}
		unit[i] = nu;
		cost[nu++] = alone;
	}
	return nu;
}

static int micro_split_(const sw_trainer *t, tsample **v, size_t n, int by_field, size_t budget, micro_list *ml,
                        sw_error *err)
{
	mkey_ *k = calloc(n ? n : 1, sizeof *k);
	uint64_t *tok = calloc(n ? n : 1, sizeof *tok);
	uint32_t *id = calloc(n ? n : 1, sizeof *id);
	size_t *order = calloc(n ? n : 1, sizeof *order), *unit = calloc(n ? n : 1, sizeof *unit);
	int rc = 0;
	ml->n = 0;
	ml->mb = calloc(n ? n : 1, sizeof *ml->mb);
	ml->len = calloc(n ? n : 1, sizeof *ml->len);
	if (!k || !tok || !id || !order || !unit || !ml->mb || !ml->len) {
		rc = oom_(err);
		goto out;
	}
	if (!by_field && n) {
		size_t nu = units_(t, v, n, budget, order, unit, tok, k);
		if ((rc = sw_micro_split(tok, nu, budget, sw_micro_count(tok, nu, budget), id, NULL, NULL, err)))
			goto out;
	}
	/* a batch's samples in stream order (by field; a prompt's samples side by side when shared) or
	 * in the order units_ gave (the minibatch's, a prompt's samples side by side) */
	for (size_t i = 0; i < n; i++) {
		size_t j = by_field ? i : order[i];
		uint64_t h = by_field && shareable_(t, v[j]) ? v[j]->phash : 0;
		k[i] = (mkey_){ by_field ? (uint64_t)v[j]->micro : id[unit[i]], h,
		                by_field ? (size_t)(uintptr_t)v[j] : i, v[j] };
	}
	qsort(k, n, sizeof *k, cmp_mkey_);
	size_t held = 0; /* tokens of the micro batch being filled, a shared prompt counted once */
	for (size_t i = 0; i < n; i++) {
		v[i] = k[i].s;
		size_t tk = v[i]->np + v[i]->nr;
		if (by_field && i && k[i].key == k[i - 1].key && held && shareable_(t, v[i]) &&
		    shareable_(t, v[i - 1]) && same_prompt_(v[i], v[i - 1]))
			tk = v[i]->nr + 1;
		if (i == 0 || k[i].key != k[i - 1].key || (by_field && held + tk > budget)) {
			tk = v[i]->np + v[i]->nr;
			ml->mb[ml->n] = v + i;
			ml->len[ml->n++] = 0;
			held = 0;
		}
		ml->len[ml->n - 1]++;
		held += tk;
	}
out:
	free(k), free(tok), free(id), free(order), free(unit);
	return rc;
}

static void micro_free_(micro_list *ml)
{
	free(ml->mb);
	free(ml->len);
	ml->mb = NULL;
	ml->len = NULL;
}

/* ---- the step ------------------------------------------------------------------------------- */

/*
 * An engine for m that holds, beside the 16 B a parameter of the weights,
 * gradient and moments, 3 B a parameter more and the backward's scratch
 * (the goal: the step's peak within 16 B + 25%, the process's own memory
 * and the samples included): logits at most nparams / 8 floats at once in
 * any forward (no pass wants more than log-probs and the greedy tokens;
 * the training forward differentiates each chunk of them while it is there,
 * micro_, so a micro batch over it does not run the head twice),
 * and the activations 5 nparams / 8 floats (2.5 B), over which layers are
 * run again in the backward from their inputs (sw_engine_act_budget: the
 * same bits).  The micro batches are cut to what that budget holds
 * (sw_trainer_micro_tokens).  At SmolLM2-135M's shapes the step peaked at
 * 0.95-0.97 of that goal; with 1.5 B of activations at 0.92, but a micro
 * batch of 384 tokens ran 7 or 8 of the 30 layers again and fewer of a
 * GRPO group's samples shared their prompt: 4.2-4.6% more products' work,
 * the train pass 1.02-1.05x slower (bench/RESULTS.md, "act").
 */
static size_t act_floats_(size_t nparams)
{
	return nparams / 8 * 5;
}

static sw_engine *engine_(const sw_model *m, sw_error *err)
{
	sw_engine *e = sw_engine_new(m, err);
	if (e) {
		sw_engine_keep_logits(e, false);
		/* the vocabulary's head over the loss's rows only (not a prompt's) */
		sw_engine_head_targets_only(e, true);
		sw_engine_logits_budget(e, m->nparams / 8);
		sw_engine_act_budget(e, act_floats_(m->nparams));
	}
	return e;
}

/*
 * The token budget of a training micro batch: --micro-tokens where given,
 * lowered to what the activation budget holds at all (every layer but its
 * input run again in the backward).  Otherwise chosen: within the budget a
 * smaller micro batch keeps more layers and runs fewer of them again, but
 * its products have fewer rows and run further from the GEMM's rate, and
 * fewer of a GRPO group's samples share their prompt.  On SmolLM2-135M's
 * shapes (2 cores, bench/bench_micro.sh; bench/RESULTS.md "acts", under
 * the budget of 1.5 B a parameter then) micro batches of up to 384 tokens
 * trained 1.01x faster than 287, the most with every layer kept then, and
 * 1.04x faster than 560, a whole group of 8 samples (layers run again);
 * before the activations were slimmed 256 beat 186, 512 and 1916.  So the
 * most with every layer kept (479 tokens there now), but not under
 * MICRO_MIN_TOKENS, and never over what fits.
 */
#define MICRO_MIN_TOKENS 384

size_t sw_trainer_micro_tokens(const sw_model_config *c, size_t nparams, size_t micro_tokens)
{
	if (!c)
		return 1;
	size_t a = act_floats_(nparams);
	size_t fit = sw_engine_tokens_within(c, a), kept = sw_engine_tokens_kept(c, a);
	size_t b = micro_tokens ? micro_tokens : kept > MICRO_MIN_TOKENS ? kept : MICRO_MIN_TOKENS;
	return b < fit ? b : fit;
}

static size_t micro_budget_(const sw_trainer *t)
{
	return sw_trainer_micro_tokens(&t->model->cfg, t->model->nparams, t->c.micro_tokens);
}

/* The token budget of a micro batch of a pass without backward (the old
 * and the reference log-probs): one layer's activations at a time. */
static size_t score_budget_(const sw_trainer *t)
{
	size_t fit = sw_engine_tokens_scored(&t->model->cfg, act_floats_(t->model->nparams));
	return t->c.micro_tokens && t->c.micro_tokens < fit ? t->c.micro_tokens : fit;
}

typedef struct totals {
	double loss, pg_loss, kl_loss, entropy_loss, grad_norm, grad_norm_max, lr;
	sw_rl_stats rl;
	uint64_t updates, clipped_updates, tokens_trained, micro_batches, tokens_shared;
	double mis_sum, mis_max, mis_kl;
	uint64_t mis_tokens, offpolicy;
	uint64_t acc_right, acc_tokens;
} totals;

/*
 * Greedy token accuracy, as TRL's SFT trainer logs it: the share of loss
 * tokens that are the argmax of their row's logits (the first of equals,
 * as greedy decoding takes it).  Every token right means greedy decoding
 * from the prompt gives the response back.
 */
static void accuracy_(const sw_trainer *t, const sw_engine *e, const packed *pk, tsample *const *v, size_t n,
                      totals *tot)
{
	const int32_t *best = sw_engine_argmax(e);
	if (!best)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t r0 = pk->base[i] + first_row_(t, v[i]);
		for (size_t j = 0; j < v[i]->nloss; j++) {
			tot->acc_right += best[r0 + j] == pk->tokens[r0 + j + 1];
			tot->acc_tokens++;
		}
	}
}

static void add_stats_(totals *tot, const sw_rl_stats *rs, const sw_adamw_stats *ast)
{
	tot->updates++;
	tot->loss += rs->loss;
	tot->pg_loss += rs->pg_loss;
	tot->kl_loss += rs->kl_loss;
	tot->entropy_loss += rs->entropy;
	tot->grad_norm += ast->grad_norm;
	tot->grad_norm_max = ast->grad_norm > tot->grad_norm_max ? ast->grad_norm : tot->grad_norm_max;
	tot->clipped_updates += ast->clipped;
	tot->lr = ast->lr;
	tot->rl.tokens += rs->tokens;
	tot->rl.clip_low += rs->clip_low;
	tot->rl.clip_high += rs->clip_high;
	tot->rl.clip_dual += rs->clip_dual;
	tot->rl.tis_truncated += rs->tis_truncated;
	tot->rl.kl_sum += rs->kl_sum;
	tot->rl.entropy_sum += rs->entropy_sum;
	tot->rl.ratio_sum += rs->ratio_sum;
	tot->rl.tis_sum += rs->tis_sum;
	tot->rl.ppo_kl_sum += rs->ppo_kl_sum;
	tot->rl.ratio_max = rs->ratio_max > tot->rl.ratio_max ? rs->ratio_max : tot->rl.ratio_max;
}

/* What one step holds while it runs. */
typedef struct step_ {
	sw_trainer *t;
	int rl, by_micro, old_pass, use_tis;
	size_t ntok, nT;
	float *old, *ref, *kl_pen, *adv;
	tsample **pre, **T;
	sw_engine *eng;
	packed pk;
	micro_list ml;
	sw_model *grad;
	bool grad_zero;         /* grad holds zeros (as allocated): the next update need not zero it */
	size_t cap;
	float *m_lp, *m_old, *m_beh, *m_ref, *m_ent, *m_adv;
	unsigned char *m_bold;  /* per token: the behaviour's log-probs are the old ones */
	double *m_w, *wmini;
	size_t *moff, *wpos;
	totals tot;
	sw_rl_adv_stats as;
	/* data parallel (t->c.comm) */
	tsample **own;          /* a minibatch's samples of this rank */
	float *host;            /* nparams floats: gradients and weights on their way between ranks */
	double tcomm;
} step_;

/* A sample the step trains: every rank's under a communicator (the minibatches, the loss
 * weights and the statistics are the whole stream's), else those of --rank (or all). */
static int trains_(const step_ *k, const tsample *s)
{
	return k->t->c.comm ? s->valid : s->mine;
}

static void step_release_(step_ *k)
{
	free(k->old), free(k->ref), free(k->kl_pen), free(k->adv), free(k->pre), free(k->T);
	sw_engine_free(k->eng);
	packed_release_(&k->pk);
	micro_free_(&k->ml);
	sw_model_free(k->grad);
	free(k->m_lp), free(k->m_old), free(k->m_beh), free(k->m_ref), free(k->m_ent), free(k->m_adv);
	free(k->m_bold), free(k->m_w), free(k->wmini), free(k->moff), free(k->wpos);
	free(k->own), free(k->host);
}

/* The reference model: a directory, or a store read in place (it is frozen). */
static int ref_pass_(step_ *k, sw_error *err)
{
	sw_trainer *t = k->t;
	sw_error e2 = { 0 };
	sw_store *rs = NULL;
	sw_model *rm = NULL;
	sw_engine *re = NULL;
	uint64_t seq = 0;
	int rc = 0;
	if (strncmp(t->ref, "shm:", 4) && strncmp(t->ref, "cuda:", 5)) {
		if (!(rm = sw_model_load_on(t->be, t->ref, &e2)))
			return sw_fail(err, e2.code, "cannot load the reference model: %s", e2.msg);
	} else {
		const sw_model_config *c;
		if (!(rs = sw_store_open(t->ref, false, &e2)))
			return sw_fail(err, e2.code, "the reference model: %s", e2.msg);
		if (!(c = sw_store_config(rs)) || sw_store_nfloats(rs) < sw_model_config_nparams(c))
			rc = sw_fail(err, SW_EFORMAT, "store '%s' holds no model", t->ref);
		else if (sw_store_read_begin(rs, &seq, &e2) || sw_store_usable_on(rs, t->be, &e2) ||
		         !(rm = sw_model_view_on(t->be, c, sw_store_arena(rs), &e2)))
			rc = sw_fail(err, e2.code, "store '%s': %s", t->ref, e2.msg);
		if (rc)
			goto out;
	}
	if (rm->cfg.vocab_size != t->model->cfg.vocab_size) {
		rc = sw_fail(err, SW_EINVAL, "the reference model's vocabulary (%d) is not the model's (%d)",
		             rm->cfg.vocab_size, t->model->cfg.vocab_size);
		goto out;
	}
	if (!(re = engine_(rm, &e2))) {
		rc = sw_fail(err, e2.code, "cannot start the engine: %s", e2.msg);
		goto out;
	}
	for (size_t b = 0; b < k->ml.n; b++) {
		if ((rc = forward_(t, re, &k->pk, k->ml.mb[b], k->ml.len[b], 0, 0, "reference log-probs", err)))
			goto out;
		for (size_t i = 0; i < k->ml.len[b]; i++) {
			tsample *s = k->ml.mb[b][i];
			memcpy(k->ref + s->goff, k->pk.lp + k->pk.base[i] + first_row_(t, s), s->nloss * sizeof *k->ref);
		}
	}
	if (rs && sw_store_read_retry(rs, seq))
		rc = sw_fail(err, SW_EIO, "the reference store '%s' changed while it was read", t->ref);
out:
	sw_engine_free(re);
	sw_model_free(rm);
	sw_store_close(rs);
	return rc;
}

/* The samples counted and checked as a whole; their places in the flat per-token arrays. */
static int survey_(step_ *k, sw_trainer_stats *st, sw_error *err)
{
	sw_trainer *t = k->t;
	size_t nvalid = 0, nmine = 0;
	for (size_t i = 0; i < t->n; i++) {
		tsample *s = &t->s[i];
		s->goff = k->ntok;
		k->ntok += s->valid ? s->nloss : 0;
		nvalid += s->valid;
		nmine += s->mine;
		st->masked += !s->valid;
		k->by_micro |= trains_(k, s) && s->micro >= 0;
	}
	if (!t->n)
		return sw_fail(err, SW_EEMPTY, "no samples to train on");
	if (!nvalid)
		return sw_fail(err, SW_EEMPTY, "%s: every one of the %zu samples is masked out by its 'verifier_error'",
		               t->s[0].file, t->n);
	if (!nmine && !t->c.comm) /* a rank may have nothing to add to the sum */
		return sw_fail(err, SW_EEMPTY, "%s: no sample of rank %lld among the %zu", t->s[0].file, t->c.rank, t->n);
	for (size_t i = 0; k->by_micro && i < t->n; i++)
		if (t->s[i].mine && t->s[i].micro < 0)
			return rec_fail_(err, &t->s[i], SW_ENOENT,
			                 "field 'micro' is missing (other samples have it: they were balanced together)");
	return 0;
}

/* The old (and reference) log-probs, the KL penalty, the advantages. */
static int before_training_(step_ *k, sw_trainer_stats *st, sw_error *err)
{
	sw_trainer *t = k->t;
	sw_error e2 = { 0 };
	int rc, need_all = t->c.kl_in_reward; /* the penalty enters every group's baseline */
	size_t npre = 0, ntok = k->ntok ? k->ntok : 1;
	k->rl = t->c.algo != SW_RL_SFT;
	/* With one update per step, the weights that give the training forward
	 * its log-probs are those that start the step: they are the old
	 * log-probs, and a separate pass would only recompute them (TRL skips
	 * it the same way). */
	k->old_pass = k->rl && (t->c.epochs * t->c.minibatches > 1 || need_all);
	if ((k->rl && (!(k->old = calloc(ntok, sizeof(float))) || !(k->adv = calloc(ntok, sizeof(float))))) ||
	    (t->ref && !(k->ref = calloc(ntok, sizeof(float)))) ||
	    (t->c.kl_in_reward && !(k->kl_pen = calloc(ntok, sizeof(float)))) ||
	    !(k->pre = calloc(t->n, sizeof *k->pre)))
		return oom_(err);
	for (size_t i = 0; i < t->n; i++)
		if (t->s[i].valid && t->s[i].nloss && (need_all || t->s[i].mine))
			k->pre[npre++] = &t->s[i];
	if (!(k->eng = engine_(t->model, &e2)))
		return sw_fail(err, e2.code, "cannot start the engine: %s", e2.msg);
	/* a LLaVA model: the projector learns, the tower only when AdamW is to update it */
	sw_engine_train_vision(k->eng, true, t->c.adam.train_vision_tower);
	if ((rc = micro_split_(t, k->pre, npre, 0, score_budget_(t), &k->ml, err)))
		return rc;
	double t1 = now_();
	if (k->old_pass) {
		for (size_t b = 0; b < k->ml.n; b++) {
			if ((rc = forward_(t, k->eng, &k->pk, k->ml.mb[b], k->ml.len[b], 0, 0, "old log-probs", err)))
				return rc;
			for (size_t i = 0; i < k->ml.len[b]; i++) {
				tsample *s = k->ml.mb[b][i];
				memcpy(k->old + s->goff, k->pk.lp + k->pk.base[i] + first_row_(t, s), s->nloss * sizeof *k->old);
			}
		}
		st->time_old = now_() - t1;
	}
	if (t->ref) {
		double t2 = now_();
		if ((rc = ref_pass_(k, err)))
			return rc;
		st->time_ref = now_() - t2;
	}
	micro_free_(&k->ml);
	if (k->kl_pen)
		for (size_t i = 0; i < npre; i++)
			for (size_t j = k->pre[i]->goff; j < k->pre[i]->goff + k->pre[i]->nloss; j++)
				k->kl_pen[j] = (float)sw_rl_kl_value(t->c.loss.kl_kind, k->old[j], k->ref[j], NULL);

	/* advantages over the whole stream, every rank's samples included */
	double ta = now_();
	if (k->rl) {
		size_t n = t->n;
		size_t *off = calloc(n + 1, sizeof *off);
		double *rew = calloc(n, sizeof *rew), *seq = calloc(n, sizeof *seq);
		uint64_t *grp = calloc(n, sizeof *grp);
		unsigned char *tr = calloc(n, 1);
		rc = off && rew && seq && grp && tr ? 0 : oom_(err);
		for (size_t i = 0; !rc && i < n; i++) {
			off[i] = t->s[i].goff;
			rew[i] = t->s[i].valid ? t->s[i].reward : NAN;
			grp[i] = t->s[i].gid;
			tr[i] = (unsigned char)t->s[i].valid;
		}
		if (!rc) {
			off[n] = k->ntok;
			sw_rl_batch rb = { n, off, rew, grp, tr, k->kl_pen, t->c.kl_in_reward ? t->c.loss.kl_coef : 0 };
			sw_rl_adv_opts ao = { t->c.adv_eps, t->c.gamma };
			if (sw_rl_advantages(t->c.algo, &rb, &ao, k->adv, seq, &k->as, &e2))
				rc = e2.record ? rec_fail_(err, &t->s[e2.record - 1], e2.code, "%s", e2.msg)
				               : sw_fail(err, e2.code, "advantages: %s", e2.msg);
		}
		for (size_t i = 0; !rc && i < n; i++)
			t->s[i].adv = seq[i];
		free(off), free(rew), free(seq), free(grp), free(tr);
		if (rc)
			return rc;
	}
	st->time_adv = now_() - ta;
	return 0;
}

/*
 * The loss of one micro batch, taken chunk by chunk as the engine's head
 * runs (sw_engine_forward_loss): the head's rows are the micro batch's loss
 * tokens, sample after sample (pack_), so head row r is token r of the
 * m_* arrays.  What does not depend on the log-probs is in place before
 * the forward; the first forward of a step takes its own log-probs as the
 * old ones (and as the behaviour's, bold, where those are the old).
 */
typedef struct mloss_ {
	step_ *k;
	const sw_rl_loss_opts *lo;
	sw_rl_stats *rs;
	tsample **V;
	size_t nv;
	tsample *bad;            /* the sample of a token the loss refused, and the token */
	size_t bad_tok;
	sw_error e2;
} mloss_;

static int mloss_cb_(void *ud, int r0, int n, const float *lp, const float *ent, float *dlp, float *dent,
                     sw_error *err)
{
	mloss_ *x = ud;
	step_ *k = x->k;
	size_t q = (size_t)r0;
	memcpy(k->m_lp + q, lp, (size_t)n * sizeof *lp);
	memcpy(k->m_ent + q, ent, (size_t)n * sizeof *ent);
	if (k->rl && !k->old_pass) /* no old pass: old = these log-probs */
		for (int i = 0; i < n; i++) {
			k->m_old[q + i] = lp[i];
			if (k->m_bold[q + i])
				k->m_beh[q + i] = lp[i];
		}
	sw_rl_tokens tk = { (size_t)n, k->m_lp + q, k->m_old + q, k->m_beh + q, k->m_ref + q, k->m_ent + q,
		            k->m_adv + q, k->m_w + q };
	if (!sw_rl_loss(x->lo, &tk, dlp, dent, x->rs, &x->e2))
		return 0;
	/* the token back to its sample */
	size_t j = q + x->e2.offset, i = 0;
	while (i + 1 < x->nv && j >= x->V[i]->nloss)
		j -= x->V[i++]->nloss;
	x->bad = x->V[i], x->bad_tok = j;
	return sw_fail(err, x->e2.code, "%s", x->e2.msg);
}

/* One micro batch of a minibatch: forward with the loss and its gradient, backward into k->grad. */
static int micro_(step_ *k, tsample **V, size_t nv, long ep, const sw_rl_loss_opts *lo, sw_rl_stats *rs,
                  sw_error *err)
{
	sw_trainer *t = k->t;
	sw_error e2 = { 0 };
	size_t nl = 0;
	int rc;
	for (size_t i = 0; i < nv; i++)
		nl += V[i]->nloss;
	if (nl > k->cap) {
		if (grow_(&k->m_lp, nl, sizeof(float)) || grow_(&k->m_old, nl, sizeof(float)) ||
		    grow_(&k->m_beh, nl, sizeof(float)) || grow_(&k->m_ref, nl, sizeof(float)) ||
		    grow_(&k->m_ent, nl, sizeof(float)) || grow_(&k->m_adv, nl, sizeof(float)) ||
		    grow_(&k->m_bold, nl, 1) || grow_(&k->m_w, nl, sizeof(double)))
			return oom_(err);
		k->cap = nl;
	}
	/* what the loss takes besides the log-probs, token by token */
	size_t q = 0;
	for (size_t i = 0; i < nv; i++) {
		tsample *s = V[i];
		size_t n = s->nloss;
		memcpy(k->m_w + q, k->wmini + k->wpos[s - t->s], n * sizeof *k->m_w);
		if (k->rl) {
			int off_policy = s->behav && s->version >= 0 && (uint64_t)s->version < t->version;
			int bold = !(off_policy && k->use_tis); /* the behaviour's log-probs are the old ones */
			memset(k->m_bold + q, bold, n);
			if (k->old_pass)
				memcpy(k->m_old + q, k->old + s->goff, n * sizeof *k->m_old);
			if (!bold || k->old_pass)
				memcpy(k->m_beh + q, bold ? k->old + s->goff : s->behav, n * sizeof *k->m_beh);
			memcpy(k->m_adv + q, k->adv + s->goff, n * sizeof *k->m_adv);
		}
		if (k->ref)
			memcpy(k->m_ref + q, k->ref + s->goff, n * sizeof *k->m_ref);
		q += n;
	}
	mloss_ x = { k, lo, rs, V, nv, NULL, 0, { 0 } };
	rc = pack_(t, &k->pk, V, nv, err);
	if (rc)
		return rc;
	packed *pk = &k->pk;
	sw_batch b = { pk->nseq, pk->tokens, pk->cu, pk->tgt, pk->shared ? pk->pre : NULL };
	sw_images im = { pk->nimg, pk->px };
	/* (the loss's calls have the log-probs and entropies: none to download again) */
	if (sw_engine_forward_loss(k->eng, &b, &im, mloss_cb_, &x, lo->entropy_coef > 0, k->grad, NULL, NULL, &e2)) {
		if (x.bad)
			return rec_fail_(err, x.bad, e2.code, "token %zu: %s", x.bad_tok + 1, e2.msg);
		return sw_fail(err, e2.code, "training forward: %s (micro batch starting at %s record %llu)", e2.msg,
		               V[0]->file, (unsigned long long)V[0]->recno);
	}
	if (ep == 0)
		accuracy_(t, k->eng, pk, V, nv, &k->tot);
	q = 0;
	for (size_t i = 0; k->rl && i < nv; i++) {
		tsample *s = V[i];
		size_t n = s->nloss;
		if (!k->old_pass) /* the first forward of the step: these are the old log-probs */
			memcpy(k->old + s->goff, k->m_lp + q, n * sizeof *k->old);
		/* the rollout's log-probs: compared once, and the truncated IS
		 * weights of the samples of older weights */
		if (s->behav && ep == 0) {
			double mean, mx, kl;
			sw_rl_mismatch(s->behav, k->old + s->goff, n, &mean, &mx, &kl, NULL);
			k->tot.mis_sum += mean * (double)n;
			k->tot.mis_kl += kl * (double)n;
			k->tot.mis_max = mx > k->tot.mis_max ? mx : k->tot.mis_max;
			k->tot.mis_tokens += n;
		}
		if (ep == 0 && s->behav && s->version >= 0 && (uint64_t)s->version < t->version)
			k->tot.offpolicy++;
		q += n;
	}
	if (sw_engine_backward(k->eng, NULL, NULL, k->grad, &e2))
		return sw_fail(err, e2.code, "backward: %s", e2.msg);
	k->tot.tokens_trained += pk->whole; /* the samples' tokens, whether their prompts were shared or not */
	k->tot.micro_batches++;
	k->tot.tokens_shared += pk->whole - pk->rows;
	return 0;
}

/* One minibatch M[0..nm): the gradient over its micro batches, then one AdamW update. */
static int update_(step_ *k, tsample **M, size_t nm, long ep, const sw_rl_loss_opts *lo, double max_len,
                   sw_error *err)
{
	sw_trainer *t = k->t;
	sw_error e2 = { 0 };
	int rc;
	/* the aggregation weights of this minibatch, which one update trains */
	k->moff[0] = 0;
	for (size_t i = 0; i < nm; i++)
		k->moff[i + 1] = k->moff[i] + M[i]->nloss;
	if (grow_(&k->wmini, k->moff[nm], sizeof *k->wmini))
		return oom_(err);
	if (sw_rl_weights(t->c.agg, nm, k->moff, NULL, max_len, k->wmini, &e2))
		return sw_fail(err, e2.code, "loss weights: %s", e2.msg);
	for (size_t i = 0; i < nm; i++)
		k->wpos[M[i] - t->s] = k->moff[i];
	if (!k->grad_zero && sw_model_zero(k->grad, &e2))
		return sw_fail(err, e2.code, "cannot zero the gradients: %s", e2.msg);
	k->grad_zero = false;
	sw_rl_stats rs = { 0 };
	micro_list mm = { 0 };
	rc = micro_split_(t, M, nm, k->by_micro, micro_budget_(t), &mm, err);
	if (!rc && t->c.comm) {
		/* M is now in the order one process trains it (the next pass shuffles from it); this
		 * rank's share is split again into micro batches of its own */
		size_t no = 0;
		for (size_t i = 0; i < nm; i++)
			if (M[i]->mine)
				k->own[no++] = M[i];
		micro_free_(&mm);
		rc = micro_split_(t, k->own, no, k->by_micro, micro_budget_(t), &mm, err);
	}
	for (size_t b = 0; !rc && b < mm.n; b++)
		rc = micro_(k, mm.mb[b], mm.len[b], ep, lo, &rs, err);
	micro_free_(&mm);
	/* a rank that failed stops every rank, before the sum that would wait for it */
	if (t->c.comm && (rc = sw_comm_agree(t->c.comm, rc, err)) == 0)
		rc = sw_trainer_dist_reduce_stats(t->c.comm, &rs, err);
	if (rc)
		return rc;
	/* weights in a store change from here on: readers wait for the publish */
	if (t->w && (rc = sw_trainer_store_begin(t, err)))
		return rc;
	sw_adamw_stats ast = { 0 };
	if (t->c.comm ? sw_trainer_dist_update(t, k->grad, k->host, &ast, &k->tcomm, &e2)
	              : sw_adamw_step(&t->c.adam, t->model, k->grad, t->m, t->v, (int64_t)t->updates, &ast, &e2))
		return sw_fail(err, e2.code, "update %llu: %s (the model is left as it was)",
		               (unsigned long long)t->updates + 1, e2.msg);
	t->updates++;
	add_stats_(&k->tot, &rs, &ast);
	if (t->c.on_update)
		t->c.on_update(t->c.ctx, t->updates, &rs, &ast);
	return 0;
}

/* The counts micro_ kept of this rank's samples, summed over the ranks. */
static int reduce_totals_(step_ *k, sw_error *err)
{
	totals *o = &k->tot;
	double x[9] = { (double)o->tokens_trained, o->mis_sum, o->mis_kl, (double)o->mis_tokens, (double)o->offpolicy,
		        (double)o->acc_right, (double)o->acc_tokens, (double)o->micro_batches, (double)o->tokens_shared };
	int rc;
	if ((rc = sw_comm_allreduce_sum_f64(k->t->c.comm, x, 9, err)) ||
	    (rc = sw_comm_allreduce_max_f64(k->t->c.comm, &o->mis_max, 1, err)))
		return rc;
	o->tokens_trained = (uint64_t)x[0], o->mis_sum = x[1], o->mis_kl = x[2], o->mis_tokens = (uint64_t)x[3];
	o->offpolicy = (uint64_t)x[4], o->acc_right = (uint64_t)x[5], o->acc_tokens = (uint64_t)x[6];
	o->micro_batches = (uint64_t)x[7], o->tokens_shared = (uint64_t)x[8];
	return 0;
}

static int train_(step_ *k, sw_trainer_stats *st, sw_error *err)
{
	sw_trainer *t = k->t;
	sw_error e2 = { 0 };
	size_t maxresp = 0;
	int rc;
	if (!(k->T = calloc(t->n, sizeof *k->T)))
		return oom_(err);
	for (size_t i = 0; i < t->n; i++)
		if (trains_(k, &t->s[i]) && t->s[i].nloss) {
			k->T[k->nT++] = &t->s[i];
			maxresp = t->s[i].nloss > maxresp ? t->s[i].nloss : maxresp;
		}
	if (!k->nT)
		return sw_fail(err, SW_EEMPTY, "%s: the samples to train on have no tokens to learn", t->s[0].file);
	double max_len = t->c.max_len ? t->c.max_len : (double)maxresp;
	if (t->c.agg == SW_RL_SEQ_MEAN_TOKEN_SUM_NORM && t->c.max_len && maxresp > t->c.max_len)
		return sw_fail(err, SW_ERANGE, "a response of %zu tokens is longer than --max-len %.0f", maxresp,
		               t->c.max_len);
	if (!(k->grad = sw_model_new_on(t->be, &t->model->cfg, &e2)))
		return sw_fail(err, e2.code, "cannot allocate the gradients: %s", e2.msg);
	k->grad_zero = true; /* allocated zeroed: the first update's zeroing would touch 4 B a parameter again */
	if (!(k->moff = calloc(k->nT + 1, sizeof *k->moff)) || !(k->wpos = calloc(t->n, sizeof *k->wpos)))
		return oom_(err);
	if (t->c.comm && (!(k->own = calloc(k->nT, sizeof *k->own)) ||
	                  !(k->host = malloc(t->model->nparams * sizeof *k->host))))
		return oom_(err);
	if (t->c.comm && t->c.zero1 && (rc = sw_trainer_dist_zero_begin(t, err)))
		return rc;
	double tt = now_();
	k->use_tis = t->c.loss.tis_cap > 0;
	sw_rl_loss_opts lo = t->c.loss;
	if (t->c.kl_in_reward)
		lo.kl_coef = 0; /* charged in the reward already */
	size_t nT = k->nT, nmb = (size_t)t->c.minibatches;
	for (long ep = 0; ep < t->c.epochs; ep++) {
		/* PPO's reuse: a fresh order every pass, when there is more than one minibatch */
		if (nmb > 1)
			for (size_t i = nT; i > 1; i--) {
				size_t j = (size_t)(sw_rng_next(&t->rng) % i);
				tsample *x = k->T[i - 1];
				k->T[i - 1] = k->T[j];
				k->T[j] = x;
			}
		size_t per = nT / nmb, extra = nT % nmb, at = 0;
		for (size_t mbi = 0; mbi < nmb; mbi++) {
			size_t nm = per + (mbi < extra);
			tsample **M = k->T + at;
			at += nm;
			if (nm && (rc = update_(k, M, nm, ep, &lo, max_len, err)))
				return rc;
		}
	}
	if (t->c.comm && ((t->c.zero1 && (rc = sw_trainer_dist_zero_end(t, k->host, err))) ||
	                  (rc = sw_trainer_dist_check_weights(t, k->host, err)) || (rc = reduce_totals_(k, err))))
		return rc;
	st->time_train = now_() - tt;
	st->time_allreduce = k->tcomm;
	return 0;
}

static void summarise_(step_ *k, sw_trainer_stats *st)
{
	sw_trainer *t = k->t;
	const totals *tot = &k->tot;
	double nt = tot->rl.tokens ? (double)tot->rl.tokens : 1, nu = (double)tot->updates;
	st->step = t->version + 1;
	st->samples = t->n;
	st->trained = k->nT;
	st->updates = tot->updates;
	st->tokens = tot->rl.tokens;
	st->loss = tot->loss / nu;
	st->pg_loss = tot->pg_loss / nu;
	st->kl_loss = tot->kl_loss / nu;
	st->entropy_loss = tot->entropy_loss / nu;
	st->kl = tot->rl.kl_sum / nt;
	if (t->c.kl_in_reward) {
		double s = 0;
		size_t n = 0;
		for (size_t i = 0; i < t->n; i++)
			if (trains_(k, &t->s[i]))
				for (size_t j = t->s[i].goff; j < t->s[i].goff + t->s[i].nloss; j++, n++)
					s += k->kl_pen[j];
		st->kl = n ? s / (double)n : 0;
	}
	st->entropy = tot->rl.entropy_sum / nt;
	/* not measured (the engine kept no logits to compare): null in the metrics, not 0 */
	st->token_accuracy = tot->acc_tokens ? (double)tot->acc_right / (double)tot->acc_tokens : NAN;
	st->clip_frac_low = (double)tot->rl.clip_low / nt;
	st->clip_frac_high = (double)tot->rl.clip_high / nt;
	st->clip_frac = (double)(tot->rl.clip_low + tot->rl.clip_high) / nt;
	st->clip_frac_dual = (double)tot->rl.clip_dual / nt;
	st->ratio_mean = tot->rl.ratio_sum / nt;
	st->ratio_max = tot->rl.ratio_max;
	st->ppo_kl = tot->rl.ppo_kl_sum / nt;
	st->off_policy_samples = tot->offpolicy;
	st->tis_mean = tot->rl.tis_sum / nt;
	st->tis_truncated_frac = (double)tot->rl.tis_truncated / nt;
	st->grad_norm = tot->grad_norm / nu;
	st->grad_norm_max = tot->grad_norm_max;
	st->grad_clipped = tot->clipped_updates;
	st->lr = tot->lr;
	st->adv = k->as;
	size_t rmin = SIZE_MAX, rmax = 0;
	double rsum = 0;
	for (size_t i = 0; i < k->nT; i++) {
		const tsample *s = k->T[i];
		rsum += (double)s->nr;
		rmin = s->nr < rmin ? s->nr : rmin;
		rmax = s->nr > rmax ? s->nr : rmax;
		st->tokens_total += s->np + s->nr;
	}
	st->response_len_mean = rsum / (double)k->nT;
	st->response_len_min = rmin;
	st->response_len_max = rmax;
	st->mismatch_tokens = tot->mis_tokens;
	if (tot->mis_tokens) {
		st->mismatch_mean = tot->mis_sum / (double)tot->mis_tokens;
		st->mismatch_max = tot->mis_max;
		st->mismatch_kl = tot->mis_kl / (double)tot->mis_tokens;
	}
	st->tokens_per_s = st->time_train > 0 ? (double)tot->tokens_trained / st->time_train : 0;
	st->micro_batches = tot->micro_batches;
	st->tokens_shared = tot->tokens_shared;
}

int sw_trainer_step(sw_trainer *t, sw_trainer_stats *st, sw_error *err)
{
	step_ k;
	int rc;
	memset(st, 0, sizeof *st);
	memset(&k, 0, sizeof k);
	k.t = t;
	if (!t->model)
		return sw_fail(err, SW_EINVAL, "the trainer has no weights");
	if (t->stepped)
		return sw_fail(err, SW_EINVAL, "the trainer has made its step: commit it, and start another");
	st->time_read = now_() - t->t0;
	/* under a communicator each phase that may fail on one rank ends in a verdict of all */
	sw_comm *c = t->c.comm;
	if (!(rc = sw_comm_agree(c, number_groups_(t, err), err)) && !(rc = sw_comm_agree(c, survey_(&k, st, err), err)) &&
	    !(rc = sw_comm_agree(c, before_training_(&k, st, err), err)) && !(rc = train_(&k, st, err))) {
		st->ranks = sw_comm_size(c);
		summarise_(&k, st);
		/* the samples pass through with the advantage they were trained with */
		for (size_t i = 0; !rc && i < t->n; i++)
			if (k.rl && t->s[i].valid && sw_rec_set_f32(t->s[i].rec, "advantage", (float)t->s[i].adv))
				rc = oom_(err);
		t->stepped = !rc;
	}
	step_release_(&k);
	return rc;
}

int sw_trainer_commit(sw_trainer *t, sw_trainer_stats *st, sw_error *err)
{
	double tw = now_();
	int rc = 0;
	if (!t->stepped)
		return sw_fail(err, SW_EINVAL, "the trainer has no step to commit");
	t->version++;
	if (t->w)
		rc = sw_trainer_commit_store(t, err);
	else if (t->out)
		rc = sw_trainer_commit_dir(t, err);
	if (rc) {
		t->version--;
		return rc;
	}
	t->stepped = 0;
	if (st) {
		st->time_write = now_() - tw;
		st->time_total = now_() - t->t0;
	}
	return 0;
}

/* ---- the metrics record -------------------------------------------------------------------------- */

/* A number as sw-train has always written it (9 significant digits); JSON has no NaN: null. */
static int num_(sw_rec *r, const char *key, double x)
{
	char b[32];
	if (!isfinite(x))
		return sw_rec_set_nil(r, key);
	snprintf(b, sizeof b, "%.9g", x);
	return sw_rec_set_f64(r, key, strtod(b, NULL));
}

/* One field of the metrics record: a count (whole) or a measure; on 0 leaves it out. */
typedef struct mfield_ {
	const char *key;
	double x;
	int on, whole;
} mfield_;

int sw_trainer_metrics(const sw_trainer *t, const sw_trainer_stats *st, sw_rec *r, sw_error *err)
{
	const sw_trainer_config *c = &t->c;
	const sw_rl_adv_stats *a = &st->adv;
	int rl = c->algo != SW_RL_SFT, tis = rl && c->loss.tis_cap > 0, grp = rl && c->algo != SW_RL_REINFORCE_PP;
	int mis = st->mismatch_tokens > 0, e = 0;
	const char *algo = sw_rl_algo_name(c->algo), *agg = sw_rl_agg_name(c->agg);
	/* in the order sw-train has always written them */
	const mfield_ f[] = {
		{ "samples", (double)st->samples, 1, 1 }, { "trained", (double)st->trained, 1, 1 },
		{ "masked", (double)st->masked, 1, 1 }, { "updates", (double)st->updates, 1, 1 },
		{ "tokens", (double)st->tokens, 1, 1 }, { "loss", st->loss, 1, 0 }, { "pg_loss", st->pg_loss, 1, 0 },
		{ "kl_loss", st->kl_loss, c->loss.kl_coef && !c->kl_in_reward, 0 },
		{ "entropy_loss", st->entropy_loss, 1, 0 }, { "kl", st->kl, c->ref || c->kl_in_reward, 0 },
		{ "entropy", st->entropy, 1, 0 }, { "token_accuracy", st->token_accuracy, 1, 0 },
		{ "clip_frac_low", st->clip_frac_low, rl, 0 }, { "clip_frac_high", st->clip_frac_high, rl, 0 },
		{ "clip_frac", st->clip_frac, rl, 0 }, { "clip_frac_dual", st->clip_frac_dual, rl && c->loss.clip_dual, 0 },
		{ "ratio_mean", st->ratio_mean, rl, 0 }, { "ratio_max", st->ratio_max, rl, 0 },
		{ "ppo_kl", st->ppo_kl, rl, 0 }, { "off_policy_samples", (double)st->off_policy_samples, tis, 1 },
		{ "tis_mean", st->tis_mean, tis, 0 }, { "tis_truncated_frac", st->tis_truncated_frac, tis, 0 },
		{ "grad_norm", st->grad_norm, 1, 0 }, { "grad_norm_max", st->grad_norm_max, 1, 0 },
		{ "grad_clipped", (double)st->grad_clipped, 1, 1 }, { "lr", st->lr, 1, 0 },
		{ "reward_mean", a->reward_mean, rl, 0 }, { "reward_std", a->reward_std, rl, 0 },
		{ "reward_min", a->reward_min, rl, 0 }, { "reward_max", a->reward_max, rl, 0 },
		{ "adv_mean", a->adv_mean, rl, 0 }, { "adv_std", a->adv_std, rl, 0 }, { "adv_min", a->adv_min, rl, 0 },
		{ "adv_max", a->adv_max, rl, 0 }, { "groups", (double)a->groups, grp, 1 },
		{ "zero_std_groups", (double)a->zero_std_groups, grp, 1 },
		{ "singleton_groups", (double)a->singleton_groups, grp, 1 },
		{ "response_len_mean", st->response_len_mean, 1, 0 },
		{ "response_len_min", (double)st->response_len_min, 1, 1 },
		{ "response_len_max", (double)st->response_len_max, 1, 1 },
		{ "logprob_mismatch_mean", st->mismatch_mean, mis, 0 }, { "logprob_mismatch_max", st->mismatch_max, mis, 0 },
		{ "logprob_mismatch_kl", st->mismatch_kl, mis, 0 }, { "tokens_per_s", st->tokens_per_s, 1, 0 },
		{ "micro_batches", (double)st->micro_batches, 1, 1 },
		{ "tokens_shared", (double)st->tokens_shared, 1, 1 },
	};
	sw_rec *tm = sw_rec_new();
	if (!tm)
		return oom_(err);
	sw_rec_clear(r);
	e |= sw_rec_set_u64(r, "step", st->step);
	e |= sw_rec_set_str(r, "algo", algo, strlen(algo));
	e |= sw_rec_set_str(r, "loss_agg", agg, strlen(agg));
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		if (f[i].on)
			e |= f[i].whole ? sw_rec_set_u64(r, f[i].key, (uint64_t)f[i].x) : num_(r, f[i].key, f[i].x);
	/* seconds to the microsecond, as before */
	const char *tk[] = { "read", "old_logprobs", "ref_logprobs", "advantages", "train", "write", "total" };
	const double tv[] = { st->time_read, st->time_old, st->time_ref, st->time_adv, st->time_train,
		              st->time_write, st->time_total };
	for (int i = 0; i < 7; i++)
		e |= sw_rec_set_f64(tm, tk[i], round(tv[i] * 1e6) / 1e6);
	if (st->ranks > 1) { /* data parallel: how many ranks, and what summing across them cost */
		e |= sw_rec_set_f64(tm, "allreduce", round(st->time_allreduce * 1e6) / 1e6);
		e |= sw_rec_set_u64(r, "ranks", (uint64_t)st->ranks);
	}
	e |= sw_rec_set_map(r, "time_s", tm);
	sw_rec_free(tm);
	return e ? oom_(err) : 0;
}
