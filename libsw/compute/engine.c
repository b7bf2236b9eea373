/*
 * engine.c - forward and backward of a Llama-family decoder over a packed
 * batch of variable-length sequences (no padding), for training and for
 * scoring.  Every computation, and every touch of tensor memory, goes
 * through the model's backend (backend.h): the host checks the batch,
 * uploads its indices, and downloads what the caller asked for.
 *
 * Layer by layer, with T tokens, D hidden, I intermediate:
 *   xn1 = rmsnorm(res_l); q,k,v = xn1 W^T (+ bias); [q,k per-head rmsnorm];
 *   rope(q,k); att = causal attention per sequence;
 *   mid = res_l + att Wo^T; xn2 = rmsnorm(mid);
 *   h = silu(xn2 Wg^T) * (xn2 Wu^T); res_{l+1} = mid + h Wd^T
 * then logits = rmsnorm(res_L) Wlm^T and per-token log-probs and entropy.
 * A LLaVA model's images go through vision.c first; their projected
 * features replace the embeddings of the image tokens (in order, one
 * image's N tokens after another), and the backward hands those rows'
 * gradient to vision.c (the image token's embedding row gets none).
 * For backward the activations of every layer are kept in one block sized
 * from the batch's token count; scoring keeps one layer's worth.  Under an
 * activation budget (sw_engine_act_budget) a training forward keeps all of
 * the first layers' activations that fit and only the input (res) of the
 * rest; the backward runs each of those layers' forward again from its
 * input before differentiating it (the same ops on the same inputs: the
 * same bits), trading a forward of those layers for their memory.  What
 * is cheap to make again is not kept at all: the normed inputs xn1 and
 * xn2 and the MLP's h live in one layer's scratch (xn, h), and the
 * backward makes them again from res, mid, gate and up (the same ops: the
 * same bits) where its weight gradients need them; a kept layer is a
 * third smaller so (SmolLM2-135M's shapes: 5771 floats a token, was 8459),
 * at the cost of two norms and one SwiGLU a layer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "compute/vision.h"
#include "sw/engine.h"

/* One layer's saved activations (pointers into the activation block);
 * its normed inputs and MLP hidden are the engine's one-layer scratch
 * (sw_engine's xn and h), not kept. */
typedef struct acts_ {
	float *res;                /* [T,D] the layer's input */
	float *rstd1;              /* [T] */
	float *qpre, *qrstd;       /* [T,QD], [T*H]   q before its norm (qk_norm only) */
	float *kpre, *krstd;       /* [T,KD], [T*KVH] */
	float *q, *k, *v;          /* [T,QD], [T,KD], [T,KD] as attention saw them */
	float *att, *lse;          /* [T,QD], [T*H] */
	float *mid;                /* [T,D] */
	float *rstd2;              /* [T] */
	float *gate, *up;          /* [T,I] */
} acts_;

struct sw_engine {
	const sw_model *m;
	const sw_backend *be;      /* the model's; every pointer below but h_* is its memory */
	float *inv_freq;
	/* The activation block and what is carved from it. */
	float *block;
	size_t block_floats;
	int T, nslots, nseq, maxlen;
	size_t scratch_floats;     /* the attention scratch carved (it depends on the threads) */
	bool have_fwd, for_backward;
	/* A forward with the loss (sw_engine_forward_loss) ran the head's
	 * backward too: into head_grad, its d(rows) left in the backward's
	 * scratch where the backward takes them. */
	bool head_done;
	const sw_model *head_grad;
	acts_ *acts;               /* [nslots] (host: the pointers) */
	/* Layers 0 .. nfull-1 keep their activations in acts[l]; the others
	 * share acts[nfull], their inputs kept in ckres [nl - nfull][T, D]. */
	int nfull;
	float *ckres;
	size_t act_budget;         /* in floats; SIZE_MAX: every layer kept */
	float *xn, *h;             /* [T,D], [T,I] one layer's normed input and MLP hidden */
	float *resL, *xf, *rstdf;  /* final norm input [T,D] and output */
	float *logits, *lse, *ent; /* [lrows,V], [T], [T] */
	float *lp;                 /* [T] the log-probs, until downloaded */
	/* Rows of logits held at once in a training forward: a batch with more
	 * keeps none (the backward computes them again, chunk by chunk). */
	size_t logits_budget;      /* in floats */
	bool keep_logits;          /* a forward without backward keeps all its logits */
	/* Rows without a target skip the head (sw_engine_head_targets_only):
	 * the head then runs over nh rows, the runs of rows with a target
	 * (h_hruns: start, length) gathered into xh [nh, D]; hx is xh or xf,
	 * htargets the rows' targets, compact (in idx). */
	bool head_targets;
	int nh;
	int32_t *h_hruns;
	int nhruns;
	size_t hruns_cap;
	float *xh;
	const float *hx;
	int32_t *htargets;
	int32_t *h_argmax;         /* [T] a training forward's greedy token of each row (host) */
	size_t argmax_n;
	int lrows;                 /* rows the last forward held (T: all of them) */
	float *attn_scratch;
	/* The batch's indices: built on the host (h_*), uploaded into idx. */
	int32_t *tokens, *pos, *targets, *cu;
	int32_t *prefix;           /* [nseq] the sequence each continues (sw_batch), or NULL: none */
	int32_t *idx, *h_idx;
	size_t idx_n;
	const int32_t *h_targets;  /* within h_idx */
	float *h_logits;           /* sw_engine_logits' host copy where the backend needs one */
	/* Backward scratch, carved on first use. */
	float *bblock;
	size_t bblock_floats;
	/* A LLaVA model's images: the tower's run, what is trained, and where
	 * the batch's image tokens are (runs of consecutive rows: start, length). */
	sw_vision_run *vis;
	bool train_proj, train_tower;
	int nimages;
	int32_t *h_runs;
	int nruns;
	size_t runs_cap;
	const float *feat;         /* [nimages * N, D] the last forward's features (the run's) */
	float *dfeat;              /* their gradient */
	size_t dfeat_floats;
};

void sw_rope_inv_freq(const struct sw_model_config *c, float *inv)
{
	int dim = c->head_dim, half = dim / 2;
	for (int i = 0; i < half; i++)
		inv[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)dim);
	if (c->rope_factor <= 0)
		return;
	/* transformers' _compute_llama3_parameters, in float32 as it is there. */
	float factor = c->rope_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
	float old = (float)c->rope_original_max_position;
	float lo_wl = old / lo, hi_wl = old / hi;
	for (int i = 0; i < half; i++) {
		float f = inv[i], wl = 6.2831853071795865f / f; /* (float)(2 pi) / f */
		float fl = wl > lo_wl ? f / factor : f;
		float smooth = (old / wl - lo) / (hi - lo);
		float sm = (1.0f - smooth) * fl / factor + smooth * fl;
		bool medium = !(wl < hi_wl) && !(wl > lo_wl);
		inv[i] = medium ? sm : fl;
	}
}

float *sw_rope_upload(const sw_backend *be, const struct sw_model_config *c, sw_error *err)
{
	size_t bytes = sizeof(float) * (size_t)(c->head_dim / 2 + 1);
	float *h = malloc(bytes), *d = h ? be->alloc(bytes, err) : NULL;
	if (!h)
		sw_fail(err, SW_ENOMEM, "out of memory");
	else if (d) {
		h[c->head_dim / 2] = 0;
		sw_rope_inv_freq(c, h);
		if (be->upload(d, h, bytes, err))
			be->free(d), d = NULL;
	}
	free(h);
	return d;
}

void sw_engine_threads(int n)
{
	sw_backend_cpu_threads(n);
}

sw_engine *sw_engine_new(const sw_model *m, sw_error *err)
{
	if (!m || !m->arena) {
		sw_fail(err, SW_EINVAL, "no model");
		return NULL;
	}
	sw_engine *e = calloc(1, sizeof *e);
	if (!e) {
		sw_fail(err, SW_ENOMEM, "out of memory for the engine");
		return NULL;
	}
	e->m = m;
	e->be = m->backend;
	e->logits_budget = (size_t)1 << 28; /* 1 GiB */
	e->act_budget = SIZE_MAX;
	e->keep_logits = true;
	e->train_proj = true;
	if (!(e->inv_freq = sw_rope_upload(e->be, &m->cfg, err))) {
		free(e);
		return NULL;
	}
	if (m->cfg.vision.model_type[0] && !(e->vis = sw_vision_run_new(m, err))) {
		sw_engine_free(e);
		return NULL;
	}
	return e;
}

void sw_engine_free(sw_engine *e)
{
	if (!e)
		return;
	e->be->free(e->inv_freq);
	e->be->free(e->block);
	e->be->free(e->bblock);
	e->be->free(e->idx);
	free(e->acts);
	free(e->h_idx);
	free(e->h_logits);
	free(e->h_argmax);
	sw_vision_run_free(e->vis);
	e->be->free(e->dfeat);
	free(e->h_runs);
	free(e->h_hruns);
	free(e);
}

void sw_engine_train_vision(sw_engine *e, bool projector, bool tower)
{
	if (e)
		e->train_proj = projector, e->train_tower = tower;
}

/*
 * The runs of image tokens in tokens[0..T) (start, length pairs into
 * *runs, grown as needed), checked against nimages images of N tokens
 * each.  Shared with the decoder through vision.h.
 */
int sw_image_runs(const sw_model_config *c, const int32_t *tokens, int T, int nimages,
                  int32_t **runs, size_t *cap, int *nruns, sw_error *err)
{
	int N = sw_model_image_tokens(c), img = c->vision.image_token_id, count = 0;
	*nruns = 0;
	if (nimages < 0)
		return sw_fail(err, SW_EINVAL, "%d images", nimages);
	if (!N) {
		if (nimages)
			return sw_fail(err, SW_EINVAL, "%d images for a model without a vision tower", nimages);
		return SW_OK;
	}
	for (int t = 0; t < T; t++) {
		if (tokens[t] != img)
			continue;
		if (t == 0 || tokens[t - 1] != img) {
			if ((size_t)(*nruns + 1) * 2 > *cap) {
				size_t nc = *cap ? 2 * *cap : 16;
				int32_t *r = realloc(*runs, sizeof *r * nc);
				if (!r)
					return sw_fail(err, SW_ENOMEM, "out of memory");
				*runs = r, *cap = nc;
			}
			(*runs)[2 * *nruns] = t, (*runs)[2 * *nruns + 1] = 0;
			(*nruns)++;
		}
		(*runs)[2 * *nruns - 1]++;
		count++;
	}
	if (count != nimages * N)
		return sw_fail(err, SW_EINVAL,
		               "%d image tokens (id %d) for %d images of %d tokens each: %s images", count, img,
		               nimages, N, count > nimages * N ? "too few" : "too many");
	return SW_OK;
}

/*
 * Rows of x [T, D] in runs (start, length pairs) and the same rows packed
 * one after another in p: dir > 0 copies p into the rows, dir < 0 the rows
 * into p (and clear: zeroes them after).
 */
static int copy_runs_(const sw_engine *e, const int32_t *runs, int nruns, float *x, float *p, int dir,
                      bool clear, sw_error *err)
{
	size_t D = (size_t)e->m->cfg.hidden_size, f = 0;
	int rc = SW_OK;
	for (int r = 0; r < nruns && !rc; r++) {
		size_t at = (size_t)runs[2 * r] * D, n = (size_t)runs[2 * r + 1] * D;
		if (dir > 0)
			rc = e->be->copy(x + at, p + f, n * sizeof(float), err);
		else if (!(rc = e->be->copy(p + f, x + at, n * sizeof(float), err)) && clear)
			rc = e->be->memset(x + at, 0, n * sizeof(float), err);
		f += n;
	}
	return rc;
}

/* Copy the features into the embeddings at the image tokens (dir 1), or
 * the embeddings' gradient there out into dfeat and zero it (dir -1). */
static int scatter_(const sw_engine *e, float *x, float *feat, int dir, sw_error *err)
{
	return copy_runs_(e, e->h_runs, e->nruns, x, feat, dir, dir < 0, err);
}

void sw_engine_logits_budget(sw_engine *e, size_t floats)
{
	if (e)
		e->logits_budget = floats;
}

void sw_engine_keep_logits(sw_engine *e, bool all)
{
	if (e)
		e->keep_logits = all;
}

void sw_engine_head_targets_only(sw_engine *e, bool only)
{
	if (e)
		e->head_targets = only;
}

/* Spread the head's nh compact values (of sz bytes) at the front of
 * x[0..T) to their rows (the last run first: a row is never below its
 * compact place), and put *fill in every row without a target. */
static void spread_(const sw_engine *e, void *x, size_t sz, const void *fill)
{
	char *c = x;
	int k = e->nh, end = e->T;
	for (int r = e->nhruns; r >= 0; r--) {
		int at = r ? e->h_hruns[2 * (r - 1)] : 0, n = r ? e->h_hruns[2 * (r - 1) + 1] : 0;
		k -= n;
		memmove(c + (size_t)at * sz, c + (size_t)k * sz, (size_t)n * sz);
		for (int i = at + n; i < end; i++)
			memcpy(c + (size_t)i * sz, fill, sz);
		end = at;
	}
}

/* The row of the head's compact row j. */
static int head_row_(const sw_engine *e, int j)
{
	if (e->nh == e->T)
		return j;
	for (int r = 0; r < e->nhruns; r++) {
		if (j < e->h_hruns[2 * r + 1])
			return e->h_hruns[2 * r] + j;
		j -= e->h_hruns[2 * r + 1];
	}
	return -1;
}

const int32_t *sw_engine_argmax(const sw_engine *e)
{
	return e && e->have_fwd && e->for_backward ? e->h_argmax : NULL;
}

/*
 * The first k of row[0..n) with row[k] > row[j] for every j < k that it
 * passes, as the scalar scan "if (row[k] > row[best]) best = k" finds it
 * (NaNs skipped; a NaN first is kept), in two passes the compiler turns
 * into vector loops: the largest value in 16 lanes, then its first place.
 */
static int row_argmax_(const float *row, int n)
{
	float mx[16], m = row[0];
	if (m != m)
		return 0;
	for (int l = 0; l < 16; l++)
		mx[l] = m;
	int n16 = n / 16 * 16;
	for (int k = 0; k < n16; k += 16)
		for (int l = 0; l < 16; l++)
			mx[l] = row[k + l] > mx[l] ? row[k + l] : mx[l];
	for (int l = 0; l < 16; l++)
		m = mx[l] > m ? mx[l] : m;
	for (int k = n16; k < n; k++)
		m = row[k] > m ? row[k] : m;
	for (int k = 0; k < n; k++)
		if (row[k] == m)
			return k;
	return 0;
}

/*
 * The greedy token of rows r0 .. r0+nr-1 from their logits (the first of
 * equals, as greedy decoding takes it): the logits of a large batch are
 * gone after the forward, so what the caller wants of them is taken here.
 */
static int argmax_(sw_engine *e, int r0, int nr, sw_error *err)
{
	int V = e->m->cfg.vocab_size;
	const float *z = e->be->host_view(e->logits);
	if (!z && e->be->argmax) { /* on the device (cuda): nr ints cross, not nr * V floats */
		int32_t *d = e->be->alloc((size_t)nr * sizeof *d, err);
		if (!d)
			return err ? err->code : SW_ENOMEM;
		e->be->argmax(d, e->logits, nr, V);
		int rc = e->be->download(e->h_argmax + r0, d, (size_t)nr * sizeof *d, err);
		e->be->free(d);
		return rc;
	}
	if (!z) {
		size_t bytes = (size_t)nr * V * sizeof(float);
		free(e->h_logits);
		if (!(e->h_logits = malloc(bytes)))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		int rc = e->be->download(e->h_logits, e->logits, bytes, err);
		if (rc)
			return rc;
		z = e->h_logits;
	}
	for (int j = 0; j < nr; j++)
		e->h_argmax[r0 + j] = row_argmax_(z + (size_t)j * V, V);
	return SW_OK;
}

void sw_engine_act_budget(sw_engine *e, size_t floats)
{
	if (e)
		e->act_budget = floats;
}

const float *sw_engine_logits(const sw_engine *e)
{
	if (!e || !e->have_fwd || e->lrows != e->T || e->nh != e->T)
		return NULL;
	const float *h = e->be->host_view(e->logits);
	if (h)
		return h;
	/* A device's logits come down once, on demand (the engine is the
	 * caller's, handed here as const only to promise the logits stay). */
	sw_engine *w = (sw_engine *)e;
	size_t bytes = (size_t)e->T * e->m->cfg.vocab_size * sizeof(float);
	free(w->h_logits);
	if (!(w->h_logits = malloc(bytes)) || e->be->download(w->h_logits, e->logits, bytes, NULL)) {
		free(w->h_logits);
		w->h_logits = NULL;
	}
	return w->h_logits;
}

/* Check the batch and copy its indices (the caller's arrays may go away
 * before the backward). */
static int take_batch_(sw_engine *e, const sw_batch *b, const sw_images *im, sw_error *err)
{
	const sw_model_config *c = &e->m->cfg;
	if (!b || b->nseq < 1 || !b->tokens || !b->cu_seqlens)
		return sw_fail(err, SW_EINVAL, "empty batch");
	if (b->cu_seqlens[0] != 0)
		return sw_fail(err, SW_EINVAL, "cu_seqlens[0] is %d, not 0", b->cu_seqlens[0]);
	int maxlen = 0, shared = 0;
	for (int s = 0; s < b->nseq; s++) {
		int len = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
		if (len < 1)
			return sw_fail(err, SW_EINVAL, "sequence %d has %d tokens", s, len);
		if (b->cu_seqlens[s + 1] > (1 << 30))
			return sw_fail(err, SW_EINVAL, "batch too large");
		int p = b->prefix ? b->prefix[s] : -1;
		if (p >= s || p < -1 || (p >= 0 && b->prefix[p] != -1))
			return sw_fail(err, SW_EINVAL,
			               "sequence %d continues sequence %d: not an earlier sequence without a prefix", s, p);
		if (p >= 0)
			len += b->cu_seqlens[p + 1] - b->cu_seqlens[p], shared = 1;
		if (len > c->max_position_embeddings)
			return sw_fail(err, SW_EINVAL,
			               "sequence %d has %d tokens, more than the model's %d positions", s,
			               len, c->max_position_embeddings);
		maxlen = len > maxlen ? len : maxlen;
	}
	if (shared && (!e->be->attn_prefix_fwd || !e->be->attn_prefix_bwd))
		return sw_fail(err, SW_EINVAL, "the %s backend has no attention over a shared prefix", e->be->name);
	int T = b->cu_seqlens[b->nseq];
	size_t n = 4 * (size_t)T + 2 * (size_t)b->nseq + 1;
	if (n > e->idx_n) {
		e->be->free(e->idx);
		free(e->h_idx);
		e->idx_n = 0;
		e->h_idx = malloc(sizeof *e->h_idx * n);
		if (!(e->idx = e->be->alloc(sizeof *e->idx * n, err)) || !e->h_idx) {
			free(e->h_idx);
			e->h_idx = NULL;
			return sw_fail(err, SW_ENOMEM, "out of memory for a batch of %d tokens", T);
		}
		e->idx_n = n;
	}
	int32_t *tok = e->h_idx, *pos = tok + T, *tgt = pos + T, *cu = tgt + T;
	for (int s = 0; s < b->nseq; s++) {
		int p = b->prefix ? b->prefix[s] : -1;
		int32_t first = p >= 0 ? b->cu_seqlens[s] - (b->cu_seqlens[p + 1] - b->cu_seqlens[p]) : b->cu_seqlens[s];
		for (int t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) {
			int bad = -1;
			if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size)
				bad = b->tokens[t];
			else if (b->targets && b->targets[t] >= c->vocab_size)
				bad = b->targets[t];
			if (bad != -1)
				return sw_fail(err, SW_EINVAL, "token %d at %d is outside the vocabulary of %d",
				               bad, t, c->vocab_size);
			tok[t] = b->tokens[t];
			pos[t] = t - first;
			if (b->targets)
				tgt[t] = b->targets[t] < 0 ? -1 : b->targets[t];
			else
				tgt[t] = t + 1 < b->cu_seqlens[s + 1] ? b->tokens[t + 1] : -1;
		}
	}
	memcpy(cu, b->cu_seqlens, sizeof *cu * (b->nseq + 1));
	/* The rows the head runs over: all, or (head_targets) the runs of
	 * rows with a target, their targets compact after cu. */
	int32_t *ctg = cu + b->nseq + 1;
	e->nh = T, e->nhruns = 0;
	if (e->head_targets) {
		/* at most a run a two rows (a row with a target after one without) */
		size_t most = 2 * ((size_t)T / 2 + 1);
		if (most > e->hruns_cap) {
			int32_t *r = realloc(e->h_hruns, sizeof *r * most);
			if (!r)
				return sw_fail(err, SW_ENOMEM, "out of memory for a batch of %d tokens", T);
			e->h_hruns = r, e->hruns_cap = most;
		}
		int nh = 0, nr = 0;
		for (int t = 0; t < T; t++)
			if (tgt[t] >= 0) {
				if (t == 0 || tgt[t - 1] < 0)
					e->h_hruns[2 * nr] = t, e->h_hruns[2 * nr + 1] = 0, nr++;
				e->h_hruns[2 * nr - 1]++;
				ctg[nh++] = tgt[t];
			}
		e->nh = nh, e->nhruns = nr;
	}
	int nimg = im ? im->n : 0;
	int rc = sw_image_runs(c, b->tokens, T, nimg, &e->h_runs, &e->runs_cap, &e->nruns, err);
	if (rc)
		return rc;
	if (nimg && !im->pixels)
		return sw_fail(err, SW_EINVAL, "%d images without their pixels", nimg);
	e->nimages = nimg;
	e->tokens = e->idx, e->pos = e->idx + T, e->targets = e->idx + 2 * (size_t)T;
	e->cu = e->idx + 3 * (size_t)T;
	e->htargets = e->nh < T ? e->cu + b->nseq + 1 : e->targets;
	/* the prefixes after the head's targets (at most T of them) */
	e->prefix = NULL;
	if (shared) {
		memcpy(cu + b->nseq + 1 + T, b->prefix, sizeof *cu * (size_t)b->nseq);
		e->prefix = e->cu + b->nseq + 1 + T;
	}
	e->h_targets = tgt;
	e->T = T, e->nseq = b->nseq, e->maxlen = maxlen;
	return e->be->upload(e->idx, e->h_idx, sizeof *e->idx * n, err);
}

/* Floats of one layer's saved activations for T tokens. */
static size_t layer_floats_(const sw_model_config *c, size_t T)
{
	size_t D = c->hidden_size, I = c->intermediate_size, H = c->num_attention_heads;
	size_t KVH = c->num_key_value_heads, QD = H * c->head_dim, KD = KVH * c->head_dim;
	size_t qk = c->qk_norm ? 1 : 0;
	/* res, mid; q, att; k, v; gate, up; lse; rstd1, rstd2 (carve_'s slot) */
	return T * (D * 2 + QD * 2 + KD * 2 + I * 2 + H + 2) + qk * T * (QD + KD + H + KVH);
}

/* The one layer's scratch: xn [T,D] and h [T,I]. */
static size_t scratch_floats_(const sw_model_config *c, size_t T)
{
	return T * ((size_t)c->hidden_size + (size_t)c->intermediate_size);
}

/* How many tokens of per floats each fit in floats: at least 1. */
static size_t tokens_of_(size_t floats, size_t per)
{
	return floats / per > 1 ? floats / per : 1;
}

size_t sw_engine_tokens_within(const sw_model_config *c, size_t floats)
{
	if (!c || c->num_hidden_layers < 1)
		return 1;
	/* The least a training forward keeps: every layer's input and one layer's activations. */
	return tokens_of_(floats, layer_floats_(c, 1) + scratch_floats_(c, 1) +
	                                  (size_t)c->num_hidden_layers * c->hidden_size);
}

size_t sw_engine_tokens_kept(const sw_model_config *c, size_t floats)
{
	if (!c || c->num_hidden_layers < 1)
		return 1;
	/* as layers_kept_ counts */
	return tokens_of_(floats, layer_floats_(c, 1) * (size_t)c->num_hidden_layers + scratch_floats_(c, 1));
}

size_t sw_engine_tokens_scored(const sw_model_config *c, size_t floats)
{
	if (!c || c->num_hidden_layers < 1)
		return 1;
	/* and carve_'s rows */
	return tokens_of_(floats, layer_floats_(c, 1) + scratch_floats_(c, 1) + 2 * (size_t)c->hidden_size + 4);
}

/*
 * Layers whose activations a training forward keeps whole, under the
 * budget: k whole layers, the inputs of the nl - k others and one shared
 * layer's worth to run those again in; the one layer's scratch besides.
 */
static int layers_kept_(const sw_engine *e)
{
	const sw_model_config *c = &e->m->cfg;
	size_t per = layer_floats_(c, (size_t)e->T), in = (size_t)e->T * c->hidden_size;
	size_t sc = scratch_floats_(c, (size_t)e->T);
	int nl = c->num_hidden_layers;
	if (e->act_budget == SIZE_MAX || per * nl + sc <= e->act_budget)
		return nl;
	int k = nl - 1;
	while (k > 0 && k * per + (nl - k) * in + per + sc > e->act_budget)
		k--;
	return k;
}

/* Carve (and grow when needed) the activation block for T tokens, nslots
 * layers of activations and nck layers' inputs. */
static int carve_(sw_engine *e, int nslots, int nck, sw_error *err)
{
	const sw_model_config *c = &e->m->cfg;
	size_t T = (size_t)e->T, D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
	size_t H = c->num_attention_heads, KVH = c->num_key_value_heads, hd = c->head_dim;
	size_t QD = H * hd, KD = KVH * hd, qk = c->qk_norm ? 1 : 0;
	size_t per = layer_floats_(c, T);
	size_t scratch = e->be->attn_scratch(e->maxlen);
	size_t nhx = e->nh < e->T ? (size_t)e->nh * D : 0;
	size_t need = per * nslots + scratch_floats_(c, T) + T * D * (size_t)nck + T * (2 * D + 4) + nhx +
	              (size_t)e->lrows * V + scratch + 64;
	if (need > e->block_floats) {
		e->be->free(e->block);
		e->block = NULL, e->block_floats = 0;
		if (!(e->block = e->be->alloc(need * sizeof(float), NULL)))
			return sw_fail(err, SW_ENOMEM, "out of memory for the activations of %zu tokens",
			               T);
		e->block_floats = need;
	}
	if (nslots > e->nslots || !e->acts) {
		acts_ *a = realloc(e->acts, sizeof *a * nslots);
		if (!a)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		e->acts = a;
	}
	e->nslots = nslots;
	float *p = e->block;
#define TAKE_(n) (p += (n), p - (n))
	e->xn = TAKE_(T * D), e->h = TAKE_(T * I);
	for (int l = 0; l < nslots; l++) {
		acts_ *a = &e->acts[l];
		a->res = TAKE_(T * D), a->rstd1 = TAKE_(T);
		a->q = TAKE_(T * QD), a->k = TAKE_(T * KD), a->v = TAKE_(T * KD);
		a->att = TAKE_(T * QD), a->lse = TAKE_(T * H);
		a->mid = TAKE_(T * D), a->rstd2 = TAKE_(T);
		a->gate = TAKE_(T * I), a->up = TAKE_(T * I);
		a->qpre = a->kpre = a->qrstd = a->krstd = NULL;
		if (qk)
			a->qpre = TAKE_(T * QD), a->kpre = TAKE_(T * KD), a->qrstd = TAKE_(T * H),
			a->krstd = TAKE_(T * KVH);
	}
	e->ckres = nck ? TAKE_(T * D * (size_t)nck) : NULL;
	e->resL = TAKE_(T * D), e->xf = TAKE_(T * D), e->rstdf = TAKE_(T);
	e->xh = nhx ? TAKE_(nhx) : NULL;
	e->logits = TAKE_((size_t)e->lrows * V), e->lse = TAKE_(T), e->ent = TAKE_(T);
	e->lp = TAKE_(T);
	e->attn_scratch = TAKE_(scratch);
	e->scratch_floats = scratch;
#undef TAKE_
	return SW_OK;
}

/* q/k/v projections with bias, q/k norm and rope: what attention sees. */
static void qkv_(const sw_engine *e, const sw_layer *L, acts_ *a, const float *xn, int T,
                 const int32_t *pos)
{
	const sw_backend *o = e->be;
	const sw_model_config *c = &e->m->cfg;
	int D = c->hidden_size, H = c->num_attention_heads, KVH = c->num_key_value_heads,
	    hd = c->head_dim, QD = H * hd, KD = KVH * hd;
	float *q = c->qk_norm ? a->qpre : a->q, *k = c->qk_norm ? a->kpre : a->k;
	o->gemm(0, 1, T, QD, D, 1, xn, D, L->wq, D, 0, q, QD);
	o->gemm(0, 1, T, KD, D, 1, xn, D, L->wk, D, 0, k, KD);
	o->gemm(0, 1, T, KD, D, 1, xn, D, L->wv, D, 0, a->v, KD);
	if (c->attention_bias) {
		o->bias_fwd(q, L->bq, T, QD);
		o->bias_fwd(k, L->bk, T, KD);
		o->bias_fwd(a->v, L->bv, T, KD);
	}
	if (c->qk_norm) {
		o->rmsnorm_fwd(a->q, a->qrstd, a->qpre, L->q_norm, T * H, hd, c->rms_norm_eps);
		o->rmsnorm_fwd(a->k, a->krstd, a->kpre, L->k_norm, T * KVH, hd, c->rms_norm_eps);
	}
	o->rope(a->q, pos, T, H, hd, e->inv_freq, 0);
	o->rope(a->k, pos, T, KVH, hd, e->inv_freq, 0);
}

/* Where layer l's input is kept (fb: a training forward's layout). */
static float *input_(const sw_engine *e, int l, bool fb)
{
	if (!fb)
		return e->acts[0].res;
	if (l == e->m->cfg.num_hidden_layers)
		return e->resL;
	if (l < e->nfull)
		return e->acts[l].res;
	return e->ckres + (size_t)(l - e->nfull) * e->T * e->m->cfg.hidden_size;
}

/* The activations of layer l, their res pointed at its input. */
static acts_ *slot_(sw_engine *e, int l, bool fb)
{
	acts_ *a = &e->acts[fb ? (l < e->nfull ? l : e->nfull) : 0];
	a->res = input_(e, l, fb);
	return a;
}

/* Layer l forward from a->res; out = its output (NULL: stop where the
 * backward's needs end, before the down projection's output). */
static int layer_fwd_(sw_engine *e, int l, acts_ *a, float *out, sw_error *err)
{
	const sw_backend *o = e->be;
	const sw_model_config *c = &e->m->cfg;
	const sw_layer *L = &e->m->layers[l];
	int T = e->T, D = c->hidden_size, I = c->intermediate_size;
	int H = c->num_attention_heads, KVH = c->num_key_value_heads, hd = c->head_dim, QD = H * hd;
	float eps = c->rms_norm_eps;
	size_t TD = (size_t)T * D;
	int rc;
	o->rmsnorm_fwd(e->xn, a->rstd1, a->res, L->attn_norm, T, D, eps);
	qkv_(e, L, a, e->xn, T, e->pos);
	if (e->prefix)
		o->attn_prefix_fwd(a->att, a->lse, a->q, a->k, a->v, e->cu, e->prefix, e->nseq, H, KVH, hd, 1,
		                   e->attn_scratch);
	else
		o->attn_fwd(a->att, a->lse, a->q, a->k, a->v, e->cu, e->nseq, H, KVH, hd, 1, e->attn_scratch);
	if ((rc = o->copy(a->mid, a->res, TD * sizeof(float), err)))
		return rc;
	o->gemm(0, 1, T, D, QD, 1, a->att, QD, L->wo, QD, 1, a->mid, D);
	o->rmsnorm_fwd(e->xn, a->rstd2, a->mid, L->mlp_norm, T, D, eps);
	o->gemm(0, 1, T, I, D, 1, e->xn, D, L->w_gate, D, 0, a->gate, I);
	o->gemm(0, 1, T, I, D, 1, e->xn, D, L->w_up, D, 0, a->up, I);
	o->swiglu_fwd(e->h, a->gate, a->up, (size_t)T * I);
	if (!out)
		return SW_OK;
	if ((rc = o->copy(out, a->mid, TD * sizeof(float), err)))
		return rc;
	o->gemm(0, 1, T, D, I, 1, e->h, I, L->w_down, I, 1, out, D);
	return SW_OK;
}

/* The loss a forward differentiates as its head runs (sw_engine_forward_loss). */
typedef struct loss_ {
	sw_engine_loss_fn fn;
	void *ud;
	bool want_dent;
	sw_model *g;
} loss_;

/* Whether g can take the model's gradient. */
static int grad_ok_(const sw_engine *e, const sw_model *g, sw_error *err)
{
	const sw_model *m = e->m;
	if (!g || g->nparams != m->nparams || g->cfg.num_hidden_layers != m->cfg.num_hidden_layers)
		return sw_fail(err, SW_EINVAL, "the gradient model does not match the model");
	if (g->backend != m->backend)
		return sw_fail(err, SW_EINVAL, "the gradient model is on %s, the model on %s",
		               g->backend->name, m->backend->name);
	return SW_OK;
}

/*
 * The backward's scratch for the batch's T tokens (carved on first use and
 * kept): its first floats, and where the head's d(rows) go (dxh) and the
 * head's d(logprobs) and d(entropy) are uploaded (dlp, dent, T each).
 */
static float *bblock_(sw_engine *e, float **dxh, float **dlp, float **dent, sw_error *err)
{
	const sw_model_config *c = &e->m->cfg;
	size_t T = (size_t)e->T, D = c->hidden_size, I = c->intermediate_size;
	size_t QD = (size_t)c->num_attention_heads * c->head_dim, KD = (size_t)c->num_key_value_heads * c->head_dim;
	size_t need = T * (2 * D + 2 * QD + 3 * KD + 3 * I + 2) + 64;
	if (need > e->bblock_floats) {
		e->be->free(e->bblock);
		e->bblock_floats = 0;
		if (!(e->bblock = e->be->alloc(need * sizeof(float), NULL))) {
			sw_fail(err, SW_ENOMEM, "out of memory for the backward of %zu tokens", T);
			return NULL;
		}
		e->bblock_floats = need;
	}
	/* over the rows with a target alone the head's d(rows) go to dres first (the
	 * backward spreads them into dxn), else straight to dxn */
	*dxh = e->nh < e->T ? e->bblock : e->bblock + T * D;
	*dlp = e->bblock + need - 2 * T, *dent = e->bblock + need - T;
	return e->bblock;
}

/* The head's backward of rows r0 .. r0+nr-1, their logits in e->logits:
 * d(logits) in place from dlp and dent (device, nh each, or NULL), then the
 * rows' d(hidden) into dxh and the head's gradient added to g. */
static void head_bwd_(sw_engine *e, int r0, int nr, const float *dlp, const float *dent, float *dxh,
                      const sw_model *g)
{
	const sw_backend *o = e->be;
	int D = e->m->cfg.hidden_size, V = e->m->cfg.vocab_size;
	const float *xf = e->hx + (size_t)r0 * D;
	o->logprob_bwd(e->logits, e->lse + r0, e->ent + r0, dlp ? dlp + r0 : NULL, dent ? dent + r0 : NULL,
	               e->htargets + r0, nr, V);
	o->gemm(0, 0, nr, D, V, 1, e->logits, V, e->m->lm_head, D, 0, dxh + (size_t)r0 * D, D);
	o->gemm(1, 0, V, D, nr, 1, e->logits, V, xf, D, 1, g->lm_head, D);
}

/*
 * The loss of head rows r0 .. r0+nr-1 (their log-probs and entropies just
 * computed): the caller's fn on host copies, its derivatives uploaded to
 * dlp and dent, then the rows' head backward.  The logits must be finite
 * first: fn is not asked about a NaN.
 */
static int head_loss_(sw_engine *e, const loss_ *ls, int r0, int nr, float *host, float *dxh, float *dlp,
                      float *dent, sw_error *err)
{
	const sw_backend *o = e->be;
	float *lp = host, *ent = lp + nr, *glp = ent + nr, *gent = glp + nr;
	size_t bytes = (size_t)nr * sizeof(float);
	int rc, bad = o->first_nonfinite(e->lse + r0, nr, 1);
	if (bad >= 0)
		return sw_fail(err, SW_ERANGE, "the logits of token %d are not finite", head_row_(e, r0 + bad));
	if ((rc = o->download(lp, e->lp + r0, bytes, err)) || (rc = o->download(ent, e->ent + r0, bytes, err)))
		return rc;
	if ((rc = ls->fn(ls->ud, r0, nr, lp, ent, glp, ls->want_dent ? gent : NULL, err)))
		return rc;
	if ((rc = o->upload(dlp + r0, glp, bytes, err)) || (ls->want_dent && (rc = o->upload(dent + r0, gent, bytes, err))))
		return rc;
	head_bwd_(e, r0, nr, dlp, ls->want_dent ? dent : NULL, dxh, ls->g);
	return SW_OK;
}

static int forward_(sw_engine *e, const sw_batch *b, const sw_images *im, bool for_backward, const loss_ *ls,
                    float *logprobs, float *entropy, sw_error *err)
{
	if (!e)
		return sw_fail(err, SW_EINVAL, "no engine");
	e->have_fwd = false;
	e->head_done = false;
	e->nimages = 0;
	int rc = ls ? grad_ok_(e, ls->g, err) : SW_OK;
	if (!rc)
		rc = take_batch_(e, b, im, err);
	const sw_model *m = e->m;
	const sw_model_config *c = &m->cfg;
	int nl = c->num_hidden_layers;
	if (!rc) {
		size_t fit = e->logits_budget / (size_t)c->vocab_size;
		e->lrows = (!for_backward && e->keep_logits) || (size_t)e->nh <= fit ? e->nh
		         : fit > 0                                                  ? (int)fit
		                                                                    : 1;
		e->lrows = e->lrows > 0 ? e->lrows : 1;
		if (for_backward && (size_t)e->T > e->argmax_n) {
			free(e->h_argmax);
			e->argmax_n = 0;
			if (!(e->h_argmax = malloc(sizeof *e->h_argmax * (size_t)e->T)))
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
			else
				e->argmax_n = (size_t)e->T;
		}
	}
	if (!rc)
		e->nfull = for_backward ? layers_kept_(e) : 1;
	if (rc || (rc = carve_(e, !for_backward ? 1 : e->nfull < nl ? e->nfull + 1 : nl,
	                       for_backward ? nl - e->nfull : 0, err)))
		return rc;
	const sw_backend *o = e->be;
	int T = e->T, D = c->hidden_size, V = c->vocab_size;
	float eps = c->rms_norm_eps;

	o->embed_fwd(input_(e, 0, for_backward), m->embed, e->tokens, T, D);
	if (e->nimages) {
		bool keep = for_backward && (e->train_proj || e->train_tower);
		if ((rc = sw_vision_run_forward(e->vis, im->pixels, e->nimages, keep, &e->feat, err)) ||
		    (rc = scatter_(e, input_(e, 0, for_backward), (float *)e->feat, 1, err)))
			return rc;
	}
	for (int l = 0; l < nl; l++) {
		acts_ *a = slot_(e, l, for_backward);
		float *out = l + 1 == nl ? e->resL : input_(e, l + 1, for_backward);
		if ((rc = layer_fwd_(e, l, a, out, err)))
			return rc;
	}
	o->rmsnorm_fwd(e->xf, e->rstdf, e->resL, m->final_norm, T, D, eps);
	/* The head: over every row, or over the rows with a target gathered;
	 * with the loss, each chunk's backward while its logits are here. */
	int nh = e->nh;
	e->hx = e->xf;
	if (nh < T) {
		if ((rc = copy_runs_(e, e->h_hruns, e->nhruns, e->xf, e->xh, -1, false, err)))
			return rc;
		e->hx = e->xh;
	}
	float *dxh = NULL, *dlp = NULL, *dent = NULL, *host = NULL;
	if (ls && nh > 0) {
		if (!bblock_(e, &dxh, &dlp, &dent, err))
			return SW_ENOMEM;
		/* a chunk's log-probs, entropies and their derivatives, on the host */
		if (!(host = malloc(sizeof *host * 4 * (size_t)(e->lrows < nh ? e->lrows : nh))))
			return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	for (int r0 = 0; r0 < nh; r0 += e->lrows) {
		int nr = nh - r0 < e->lrows ? nh - r0 : e->lrows;
		o->gemm(0, 1, nr, V, D, 1, e->hx + (size_t)r0 * D, D, m->lm_head, D, 0, e->logits, V);
		o->logprob_fwd(logprobs || ls ? e->lp + r0 : NULL, e->ent + r0, e->lse + r0, e->logits,
		               e->htargets + r0, nr, V);
		if (for_backward && ((rc = o->sync(err)) || (rc = argmax_(e, r0, nr, err)) ||
		                     (ls && (rc = head_loss_(e, ls, r0, nr, host, dxh, dlp, dent, err))))) {
			free(host);
			return rc;
		}
	}
	free(host);
	if ((rc = o->sync(err)))
		return rc;
	int bad = nh > 0 && !ls ? o->first_nonfinite(e->lse, nh, 1) : -1; /* (with the loss: chunk by chunk) */
	if (bad >= 0)
		return sw_fail(err, SW_ERANGE, "the logits of token %d are not finite", head_row_(e, bad));
	if (logprobs && (rc = o->download(logprobs, e->lp, (size_t)nh * sizeof(float), err)))
		return rc;
	if (entropy && (rc = o->download(entropy, e->ent, (size_t)nh * sizeof(float), err)))
		return rc;
	if (nh < T) {
		const float zero = 0;
		const int32_t none = -1;
		if (logprobs)
			spread_(e, logprobs, sizeof zero, &zero);
		if (entropy)
			spread_(e, entropy, sizeof zero, &zero);
		if (for_backward)
			spread_(e, e->h_argmax, sizeof none, &none);
	}
	e->have_fwd = true;
	e->for_backward = for_backward;
	e->head_done = ls != NULL;
	e->head_grad = ls ? ls->g : NULL;
	return SW_OK;
}

int sw_engine_forward(sw_engine *e, const sw_batch *b, bool for_backward, float *logprobs,
                      float *entropy, sw_error *err)
{
	return forward_(e, b, NULL, for_backward, NULL, logprobs, entropy, err);
}

int sw_engine_forward_images(sw_engine *e, const sw_batch *b, const sw_images *im, bool for_backward,
                             float *logprobs, float *entropy, sw_error *err)
{
	return forward_(e, b, im, for_backward, NULL, logprobs, entropy, err);
}

int sw_engine_forward_loss(sw_engine *e, const sw_batch *b, const sw_images *im, sw_engine_loss_fn fn, void *ud,
                           bool want_dent, sw_model *grad, float *logprobs, float *entropy, sw_error *err)
{
	if (!fn)
		return sw_fail(err, SW_EINVAL, "no loss");
	loss_ ls = { fn, ud, want_dent, grad };
	return forward_(e, b, im, true, &ls, logprobs, entropy, err);
}

/* Upload the head's rows of x[0..T) (a host array a row) to dst. */
static int up_head_(const sw_engine *e, float *dst, const float *x, sw_error *err)
{
	if (e->nh == e->T)
		return e->be->upload(dst, x, (size_t)e->T * sizeof(float), err);
	float *h = malloc(sizeof *h * (size_t)(e->nh > 0 ? e->nh : 1));
	if (!h)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (int r = 0, k = 0; r < e->nhruns; r++) {
		memcpy(h + k, x + e->h_hruns[2 * r], sizeof *h * (size_t)e->h_hruns[2 * r + 1]);
		k += e->h_hruns[2 * r + 1];
	}
	int rc = e->be->upload(dst, h, (size_t)e->nh * sizeof(float), err);
	free(h);
	return rc;
}

int sw_engine_backward(sw_engine *e, const float *dlogprob, const float *dentropy,
                       sw_model *g, sw_error *err)
{
	if (!e || !e->have_fwd || !e->for_backward)
		return sw_fail(err, SW_EINVAL, "backward without a forward that kept its activations");
	if (e->be->attn_scratch(e->maxlen) > e->scratch_floats)
		return sw_fail(err, SW_EINVAL, "the thread count grew between forward and backward");
	const sw_model *m = e->m;
	const sw_model_config *c = &m->cfg;
	int rc = grad_ok_(e, g, err);
	if (rc)
		return rc;
	if (e->head_done && (dlogprob || dentropy || g != e->head_grad))
		return sw_fail(err, SW_EINVAL, "the forward took the loss: its backward takes no d(logprobs) and the "
		               "forward's gradient model");
	const sw_backend *o = e->be;
	int T = e->T, D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
	int H = c->num_attention_heads, KVH = c->num_key_value_heads, hd = c->head_dim;
	int QD = H * hd, KD = KVH * hd, nl = c->num_hidden_layers;
	size_t TD = (size_t)T * D;

	float *dxh, *up_lp, *up_ent, *p = bblock_(e, &dxh, &up_lp, &up_ent, err);
	if (!p)
		return SW_ENOMEM;
	/* d(loss)/d(logprobs) and d(loss)/d(entropy) come from the host, the
	 * head's rows of them (all, or those with a target). */
	float *dlp = NULL, *dent = NULL;
	int nh = e->nh;
	if (dlogprob && (rc = up_head_(e, dlp = up_lp, dlogprob, err)))
		return rc;
	if (dentropy && (rc = up_head_(e, dent = up_ent, dentropy, err)))
		return rc;
	float *dres = p, *dxn = dres + TD, *datt = dxn + TD, *dq = datt + (size_t)T * QD;
	float *dk = dq + (size_t)T * QD, *dv = dk + (size_t)T * KD, *dkn = dv + (size_t)T * KD;
	float *dgate = dkn + (size_t)T * KD, *dup = dgate + (size_t)T * I, *dh = dup + (size_t)T * I;
	float *dqn = datt; /* datt is free again once attention's backward has run */

	/* The head (unless the forward ran it with the loss): logits ->
	 * d(logits) in place (so the logits are gone after this), chunk by
	 * chunk, computed again when the forward could not keep them all.  Over
	 * the rows with a target alone, the head's d(rows) go to dres first,
	 * then to their rows of dxn (the others 0). */
	for (int r0 = 0; r0 < nh && !e->head_done; r0 += e->lrows) {
		int nr = nh - r0 < e->lrows ? nh - r0 : e->lrows;
		if (e->lrows < nh)
			o->gemm(0, 1, nr, V, D, 1, e->hx + (size_t)r0 * D, D, m->lm_head, D, 0, e->logits, V);
		head_bwd_(e, r0, nr, dlp, dent, dxh, g);
	}
	if (nh < T && ((rc = o->memset(dxn, 0, TD * sizeof(float), err)) ||
	               (rc = copy_runs_(e, e->h_hruns, e->nhruns, dxn, dxh, 1, false, err))))
		return rc;
	e->have_fwd = false;
	if ((rc = o->memset(dres, 0, TD * sizeof(float), err)))
		return rc;
	o->rmsnorm_bwd(dres, g->final_norm, dxn, e->resL, m->final_norm, e->rstdf, T, D);

	for (int l = nl - 1; l >= 0; l--) {
		const sw_layer *L = &m->layers[l];
		sw_layer *G = &g->layers[l];
		acts_ *a = slot_(e, l, true);
		/* A layer kept only by its input runs again (the last one's
		 * activations are still in the shared slot from the forward). */
		if (l >= e->nfull && l + 1 < nl && (rc = layer_fwd_(e, l, a, NULL, err)))
			return rc;
		/* MLP (h and xn2 made again: the scratch holds another layer's) */
		o->gemm(0, 0, T, I, D, 1, dres, D, L->w_down, I, 0, dh, I);
		o->swiglu_fwd(e->h, a->gate, a->up, (size_t)T * I);
		o->gemm(1, 0, D, I, T, 1, dres, D, e->h, I, 1, G->w_down, I);
		o->swiglu_bwd(dgate, dup, dh, a->gate, a->up, (size_t)T * I);
		o->gemm(0, 0, T, D, I, 1, dgate, I, L->w_gate, D, 0, dxn, D);
		o->gemm(0, 0, T, D, I, 1, dup, I, L->w_up, D, 1, dxn, D);
		o->rmsnorm_fwd(e->xn, a->rstd2, a->mid, L->mlp_norm, T, D, c->rms_norm_eps);
		o->gemm(1, 0, I, D, T, 1, dgate, I, e->xn, D, 1, G->w_gate, D);
		o->gemm(1, 0, I, D, T, 1, dup, I, e->xn, D, 1, G->w_up, D);
		o->rmsnorm_bwd(dres, G->mlp_norm, dxn, a->mid, L->mlp_norm, a->rstd2, T, D);
		/* attention */
		o->gemm(0, 0, T, QD, D, 1, dres, D, L->wo, QD, 0, datt, QD);
		o->gemm(1, 0, D, QD, T, 1, dres, D, a->att, QD, 1, G->wo, QD);
		if (e->prefix)
			o->attn_prefix_bwd(dq, dk, dv, datt, a->att, a->lse, a->q, a->k, a->v, e->cu, e->prefix,
			                   e->nseq, H, KVH, hd, 1, e->attn_scratch);
		else
			o->attn_bwd(dq, dk, dv, datt, a->att, a->lse, a->q, a->k, a->v, e->cu, e->nseq, H,
			            KVH, hd, 1, e->attn_scratch);
		o->rope(dq, e->pos, T, H, hd, e->inv_freq, 1);
		o->rope(dk, e->pos, T, KVH, hd, e->inv_freq, 1);
		float *gq = dq, *gk = dk;
		if (c->qk_norm) {
			if ((rc = o->memset(dqn, 0, (size_t)T * QD * sizeof(float), err)) ||
			    (rc = o->memset(dkn, 0, (size_t)T * KD * sizeof(float), err)))
				return rc;
			o->rmsnorm_bwd(dqn, G->q_norm, dq, a->qpre, L->q_norm, a->qrstd, T * H, hd);
			o->rmsnorm_bwd(dkn, G->k_norm, dk, a->kpre, L->k_norm, a->krstd, T * KVH, hd);
			gq = dqn, gk = dkn;
		}
		if (c->attention_bias) {
			o->bias_bwd(G->bq, gq, T, QD);
			o->bias_bwd(G->bk, gk, T, KD);
			o->bias_bwd(G->bv, dv, T, KD);
		}
		o->gemm(0, 0, T, D, QD, 1, gq, QD, L->wq, D, 0, dxn, D);
		o->gemm(0, 0, T, D, KD, 1, gk, KD, L->wk, D, 1, dxn, D);
		o->gemm(0, 0, T, D, KD, 1, dv, KD, L->wv, D, 1, dxn, D);
		o->rmsnorm_fwd(e->xn, a->rstd1, a->res, L->attn_norm, T, D, c->rms_norm_eps);
		o->gemm(1, 0, QD, D, T, 1, gq, QD, e->xn, D, 1, G->wq, D);
		o->gemm(1, 0, KD, D, T, 1, gk, KD, e->xn, D, 1, G->wk, D);
		o->gemm(1, 0, KD, D, T, 1, dv, KD, e->xn, D, 1, G->wv, D);
		o->rmsnorm_bwd(dres, G->attn_norm, dxn, a->res, L->attn_norm, a->rstd1, T, D);
	}
	/* The image tokens' rows: their gradient goes to the features (the
	 * image token's embedding got none, transformers' masked_scatter). */
	if (e->nimages) {
		size_t nf = (size_t)e->nimages * sw_model_image_tokens(c) * D;
		if (nf > e->dfeat_floats) {
			o->free(e->dfeat);
			e->dfeat_floats = 0;
			if (!(e->dfeat = o->alloc(nf * sizeof(float), err)))
				return SW_ENOMEM;
			e->dfeat_floats = nf;
		}
		if ((rc = scatter_(e, dres, e->dfeat, -1, err)))
			return rc;
	}
	o->embed_bwd(g->embed, dres, e->tokens, T, D);
	if (e->nimages && (e->train_proj || e->train_tower) &&
	    (rc = sw_vision_run_backward(e->vis, e->dfeat, g, e->train_tower, err)))
		return rc;
	return o->sync(err);
}

int sw_engine_cross_entropy(sw_engine *e, const sw_batch *b, const float *weight, double norm,
                            sw_model *grad, double *loss, float *logprobs, sw_error *err)
{
	if (!e || !b)
		return sw_fail(err, SW_EINVAL, "no engine or batch");
	int T = b->nseq > 0 && b->cu_seqlens ? b->cu_seqlens[b->nseq] : 0;
	float *lp = malloc(sizeof *lp * (T > 0 ? T : 1));
	if (!lp)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	int rc = sw_engine_forward(e, b, grad != NULL, lp, NULL, err);
	if (rc) {
		free(lp);
		return rc;
	}
	double sw = 0, s = 0;
	for (int t = 0; t < T; t++) {
		float w = e->h_targets[t] < 0 ? 0 : weight ? weight[t] : 1;
		sw += w;
		s += (double)w * lp[t];
	}
	if (norm <= 0)
		norm = sw;
	if (norm <= 0) {
		free(lp);
		return sw_fail(err, SW_EINVAL, "no token has a target and a weight");
	}
	if (loss)
		*loss = -s / norm;
	if (logprobs)
		memcpy(logprobs, lp, sizeof *lp * T);
	if (grad) {
		for (int t = 0; t < T; t++)
			lp[t] = e->h_targets[t] < 0 ? 0 : -(float)((weight ? weight[t] : 1) / norm);
		rc = sw_engine_backward(e, lp, NULL, grad, err);
	}
	free(lp);
	return rc;
}

float sw_logprob_of(const float *z, int V, int token)
{
	/* The arithmetic of the CPU logprob_fwd op, so that a decoder's
	 * log-probabilities are the forward's to the last bit of the row sums. */
	float lp, lse;
	int32_t tgt = token;
	sw_backend_cpu()->logprob_fwd(&lp, NULL, &lse, z, &tgt, 1, V);
	return lp;
}
