/*
 * test_engine.c - the engine (sw/engine.h) on whole models: gradients of
 * random models by finite differences, packing (a sequence's results do
 * not depend on its neighbours), the PyTorch + transformers references of
 * tests/fixtures/engine/ (made by tests/fixtures/make_engine_refs.py),
 * AdamW and its schedules, and batched decoding against the full forward.
 * Every model is on the backend SW_TEST_DEVICE names ("cpu" when unset;
 * tests/run runs this test again with "guard"), so the test reaches the
 * parameters only through sw_model_read/_write: on guard a direct touch
 * faults.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "tap.h"
#include "tiny_model.h"

/* The fixtures, under $SW_TOP (the source tree; "." when unset). */
static char fix_[256];
/* The backend the models are on. */
static const sw_backend *be_;

static sw_model *new_(const sw_model_config *c, sw_error *err)
{
	return sw_model_new_on(be_, c, err);
}

static sw_model *load_(const char *dir, sw_error *err)
{
	return sw_model_load_on(be_, dir, err);
}

/* A host copy of m's parameters (the caller frees it). */
static float *host_(const sw_model *m)
{
	float *h = malloc(sizeof(float) * m->nparams);
	if (!h || sw_model_read(m, h, NULL)) {
		fprintf(stderr, "test_engine: cannot read a model\n");
		exit(1);
	}
	return h;
}

static void put_(sw_model *m, const float *h)
{
	if (sw_model_write(m, h, NULL)) {
		fprintf(stderr, "test_engine: cannot write a model\n");
		exit(1);
	}
}

static uint64_t rng_ = 0x2545F4914F6CDD1Dull;
static double urand_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return (double)(rng_ >> 11) / 9007199254740992.0;
}

static sw_model_config small_cfg_(const char *type, bool bias, bool qk, bool tied)
{
	sw_model_config c = tiny_config(type, 37, 24, 40, 6, 64);
	c.tie_word_embeddings = tied;
	c.attention_bias = bias;
	c.qk_norm = qk;
	return c;
}

/* Norm weights and biases moved off 1 and 0, so their gradients matter. */
static void shake_(sw_model *m)
{
	float *h = host_(m);
	for (size_t i = 0; i < m->ntensors; i++) {
		sw_tensor *t = &m->tensors[i];
		if (t->ndim != 1)
			continue;
		for (size_t j = 0; j < t->numel; j++)
			h[t->offset + j] += (float)(urand_() - 0.5) * 0.4f;
	}
	put_(m, h);
	free(h);
}

/* ---- gradients of a whole model by finite differences ---------------------- */

struct fd_ctx {
	sw_engine *e;
	sw_batch b;
	float *lp, *ent, *a, *c;
	int T;
};
/* loss = sum_t a_t lp_t + c_t H_t: exercises both backward inputs. */
static double fd_loss_(struct fd_ctx *x)
{
	if (sw_engine_forward(x->e, &x->b, false, x->lp, x->ent, NULL))
		return NAN;
	double s = 0;
	for (int t = 0; t < x->T; t++)
		s += (double)x->a[t] * x->lp[t] + (double)x->c[t] * x->ent[t];
	return s;
}

static void test_fd_model_(const char *what, sw_model_config cfg)
{
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err), *g = new_(&cfg, &err);
	ok(m && g, "%s: models made (%s)", what, err.msg);
	if (!m || !g)
		return;
	sw_model_init_random(m, 7, 0.25f);
	shake_(m);
	int32_t tok[] = { 1, 5, 9, 30, 2, 2, 7, 11, 36, 0, 3, 4, 8 };
	int32_t cu[] = { 0, 5, 6, 13 };
	int T = 13;
	float lp[13], ent[13], a[13], c[13];
	for (int t = 0; t < T; t++)
		a[t] = (float)(urand_() * 2 - 1), c[t] = (float)(urand_() * 2 - 1) * 0.5f;
	struct fd_ctx x = { sw_engine_new(m, &err), { 3, tok, cu, NULL, NULL }, lp, ent, a, c, T };
	int rc = sw_engine_forward(x.e, &x.b, true, lp, ent, &err);
	rc = rc ? rc : sw_engine_backward(x.e, a, c, g, &err);
	is_int(rc, 0, "%s: forward and backward run (%s)", what, err.msg);
	/* Every tensor, a few entries each. */
	double worst = 0;
	const char *worst_name = "";
	float *gh = host_(g), *mh = host_(m);
	for (size_t i = 0; i < m->ntensors; i++) {
		sw_tensor *t = &m->tensors[i];
		const float *gt = gh + t->offset;
		float *td = mh + t->offset;
		double gmax = 0;
		for (size_t j = 0; j < t->numel; j++)
			gmax = fabs(gt[j]) > gmax ? fabs(gt[j]) : gmax;
		for (int k = 0; k < 6; k++) {
			size_t j = (size_t)(urand_() * t->numel);
			float x0 = td[j], h = 1e-2f;
			td[j] = x0 + h;
			put_(m, mh);
			double lpl = fd_loss_(&x);
			td[j] = x0 - h;
			put_(m, mh);
			double lm = fd_loss_(&x);
			td[j] = x0;
			put_(m, mh);
			double num = (lpl - lm) / (2.0 * h);
			double e = fabs(num - gt[j]) / (gmax > 1e-3 ? gmax : 1e-3);
			if (e > worst)
				worst = e, worst_name = t->name;
		}
	}
	free(gh), free(mh);
	ok(worst < 1e-2, "%s: every parameter's gradient by finite differences (worst rel err %.2g, %s)",
	   what, worst, worst_name);

	/* Packing: each sequence alone gives the same log-probs as in the pack. */
	sw_engine_forward(x.e, &x.b, false, lp, ent, &err);
	int same = 1;
	for (int s = 0; s < 3; s++) {
		float lp1[13];
		int32_t cu1[2] = { 0, cu[s + 1] - cu[s] };
		sw_batch b1 = { 1, tok + cu[s], cu1, NULL, NULL };
		sw_engine_forward(x.e, &b1, false, lp1, NULL, &err);
		for (int t = 0; t < cu1[1]; t++)
			same &= fabsf(lp1[t] - lp[cu[s] + t]) < 1e-5f;
	}
	ok(same, "%s: a packed sequence's log-probs do not depend on its neighbours", what);

	/* Backward accumulates: a second one doubles the gradient. */
	float *g1 = host_(g);
	sw_engine_forward(x.e, &x.b, true, lp, ent, &err);
	sw_engine_backward(x.e, a, c, g, &err);
	float *g2 = host_(g);
	double d = 0;
	for (size_t i = 0; i < g->nparams; i++)
		d = fmax(d, fabs(g2[i] - 2 * g1[i]));
	ok(d < 1e-5, "%s: backward accumulates into the gradient (err %.2g)", what, d);
	free(g1), free(g2);
	sw_engine_free(x.e);
	sw_model_free(m);
	sw_model_free(g);
}


/* ---- against PyTorch + transformers ---------------------------------------- */

/* A whole fixture file; *n its size in elements of size sz. */
static void *slurp_(const char *dir, const char *name, size_t sz, size_t *n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *p = malloc(len > 0 ? (size_t)len : 1);
	if (fread(p, 1, (size_t)len, f) != (size_t)len) {
		free(p);
		p = NULL;
	}
	fclose(f);
	*n = (size_t)len / sz;
	return p;
}

/* max |a - b| / max |b|: the relative error of a whole tensor. */
static double relerr_(const float *a, const float *b, size_t n)
{
	double e = 0, s = 1e-30;
	for (size_t i = 0; i < n; i++) {
		e = fmax(e, fabs((double)a[i] - b[i]));
		s = fmax(s, fabs((double)b[i]));
	}
	return e / s;
}

/* ---- a shared prefix ---------------------------------------------------------- */

/*
 * Three responses of one prompt and an unrelated sequence, run whole and
 * with the prompt shared (all of it but its last token, which each
 * response's sequence starts with, so that its row gives the response's
 * first log-prob): the same log-probs, entropies and gradients, up to the
 * order of sums; with every layer kept, and with the layers run again.
 */
static void test_prefix_(const char *what, sw_model_config cfg)
{
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err), *g[2] = { new_(&cfg, &err), new_(&cfg, &err) };
	ok(m && g[0] && g[1], "%s: prefix: models made (%s)", what, err.msg);
	if (!m || !g[0] || !g[1])
		goto out;
	sw_model_init_random(m, 11, 0.25f);
	shake_(m);
	enum { NP = 7 };
	const int32_t P[NP] = { 3, 14, 15, 9, 26, 5, 35 };
	const int32_t R[3][5] = { { 8, 9, 7, 9, 3 }, { 2, 3, 8 }, { 4 } };
	const int nr[3] = { 5, 3, 1 };
	const int32_t Q[4] = { 27, 18, 28, 18 };
	/* whole: P+R0, Q, P+R1, P+R2; shared: P[..NP-2], P[NP-1]+R0, Q, P[NP-1]+R1, P[NP-1]+R2 */
	int32_t wt[40], wg[40], st[40], sg[40], wcu[5] = { 0 }, scu[6] = { 0 };
	int32_t pre[5] = { -1, 0, -1, 0, 0 };
	int map[40]; /* the whole batch's row of each shared row, or -1 */
	int W = 0, S = 0, ws = 0, ss = 0;
	for (int j = 0; j < NP - 1; j++)
		st[S] = P[j], sg[S] = -1, map[S++] = -1;
	scu[++ss] = S;
	for (int i = 0; i < 4; i++) {
		int k = i < 1 ? 0 : i - 1; /* the response of sequence i (i != 1) */
		if (i == 1) {
			for (int j = 0; j < 4; j++) {
				wt[W] = st[S] = Q[j];
				wg[W] = sg[S] = j + 1 < 4 ? Q[j + 1] : -1;
				map[S++] = W++;
			}
			wcu[++ws] = W, scu[++ss] = S;
			continue;
		}
		int w0 = W;
		for (int j = 0; j < NP; j++)
			wt[W] = P[j], wg[W++] = j + 1 < NP ? -1 : R[k][0];
		for (int j = 0; j < nr[k]; j++)
			wt[W] = R[k][j], wg[W++] = j + 1 < nr[k] ? R[k][j + 1] : -1;
		wcu[++ws] = W;
		for (int r = w0 + NP - 1; r < W; r++)
			st[S] = wt[r], sg[S] = wg[r], map[S++] = r;
		scu[++ss] = S;
	}
	sw_batch bw = { 4, wt, wcu, wg, NULL }, bs = { 5, st, scu, sg, pre };
	float a[40], c[40], sa[40], sc[40];
	for (int t = 0; t < W; t++)
		a[t] = wg[t] >= 0 ? (float)(urand_() * 2 - 1) : 0, c[t] = (float)(urand_() - 0.5);
	for (int t = 0; t < S; t++)
		sa[t] = map[t] >= 0 ? a[map[t]] : 0, sc[t] = map[t] >= 0 ? c[map[t]] : 0;
	for (int again = 0; again < 2; again++) {
		float lp[2][40], ent[2][40], *gh[2] = { NULL, NULL };
		int rc = 0;
		for (int sh = 0; sh < 2; sh++) {
			sw_engine *e = sw_engine_new(m, &err);
			sw_model_zero(g[sh], &err);
			sw_engine_head_targets_only(e, true);
			if (again)
				sw_engine_act_budget(e, 1); /* no layer kept: each runs again in the backward */
			const float *da = sh ? sa : a, *dc = sh ? sc : c;
			rc = rc ? rc : sw_engine_forward(e, sh ? &bs : &bw, true, lp[sh], ent[sh], &err);
			rc = rc ? rc : sw_engine_backward(e, da, dc, g[sh], &err);
			gh[sh] = host_(g[sh]);
			sw_engine_free(e);
		}
		const char *how = again ? "layers run again" : "every layer kept";
		ok(rc == 0, "%s (%s): forward and backward with a shared prefix (%s)", what, how, err.msg);
		double dl = 0;
		int rows = 0;
		for (int t = 0; t < S; t++)
			if (map[t] >= 0 && sg[t] >= 0) {
				dl = fmax(dl, fabs((double)lp[1][t] - lp[0][map[t]]) + fabs((double)ent[1][t] - ent[0][map[t]]));
				rows++;
			}
		ok(rows == 4 + 3 + 2 + 1 - 1 + 3 && dl < 1e-5,
		   "%s (%s): %d rows' log-probs and entropies as run whole (max diff %.2g)", what, how, rows, dl);
		double ge = relerr_(gh[1], gh[0], m->nparams);
		ok(ge < 1e-5, "%s (%s): every gradient as run whole (rel err %.2g)", what, how, ge);
		free(gh[0]), free(gh[1]);
	}
	/* what a prefix cannot be */
	sw_engine *e = sw_engine_new(m, &err);
	float lp[40];
	int32_t later[5] = { -1, 3, -1, 0, 0 }, chain[5] = { -1, 0, 1, 0, 0 };
	sw_batch b1 = { 5, st, scu, sg, later }, b2 = { 5, st, scu, sg, chain };
	int r1 = sw_engine_forward(e, &b1, false, lp, NULL, &err);
	ok(r1 == SW_EINVAL && strstr(err.msg, "sequence 1 continues sequence 3"), "%s: a later prefix: %s", what,
	   err.msg);
	int r2 = sw_engine_forward(e, &b2, false, lp, NULL, &err);
	ok(r2 == SW_EINVAL && strstr(err.msg, "sequence 2 continues sequence 1"),
	   "%s: a prefix that has one: %s", what, err.msg);
	/* positions count the prefix's tokens: 6 + 58 fill the model's 64, 6 + 59 are one too many */
	int32_t lt[65], lcu[3] = { 0, 6, 64 }, lpre[2] = { -1, 0 };
	for (int t = 0; t < 65; t++)
		lt[t] = t % 30;
	sw_batch b3 = { 2, lt, lcu, NULL, lpre };
	int r3 = sw_engine_forward(e, &b3, false, NULL, NULL, &err);
	lcu[2] = 65;
	int r4 = sw_engine_forward(e, &b3, false, NULL, NULL, &err);
	ok(r3 == 0 && r4 == SW_EINVAL && strstr(err.msg, "sequence 1 has 65 tokens, more than the model's 64"),
	   "%s: 6 + 58 tokens at 64 positions run, 6 + 59 do not: %s", what, err.msg);
	sw_engine_free(e);
out:
	sw_model_free(m);
	sw_model_free(g[0]);
	sw_model_free(g[1]);
}


static void test_reference_(const char *name)
{
	char dir[400], mdir[400], gdir[420];
	snprintf(dir, sizeof dir, "%s/engine/%s", fix_, name);
	snprintf(mdir, sizeof mdir, "%s/models/%s", fix_, name);
	snprintf(gdir, sizeof gdir, "%s/grad", dir);
	sw_error err = { 0 };
	sw_model *m = load_(mdir, &err);
	sw_model *ref = sw_model_load(gdir, &err);
	size_t ncu, T, nl, nlp, nent, nloss;
	int32_t *cu = slurp_(dir, "cu.i32", 4, &ncu), *tok = slurp_(dir, "tokens.i32", 4, &T);
	float *logits = slurp_(dir, "logits.f32", 4, &nl), *rlp = slurp_(dir, "logprobs.f32", 4, &nlp);
	float *rent = slurp_(dir, "entropy.f32", 4, &nent);
	double *rloss = slurp_(dir, "loss.f64", 8, &nloss);
	ok(m && ref && cu && tok && logits && rlp && rent && rloss, "%s: model, gradients and references load (%s)",
	   name, err.msg);
	if (!(m && ref && cu && tok && logits && rlp && rent && rloss))
		goto out;
	sw_model *g = new_(&m->cfg, &err);
	sw_engine *e = sw_engine_new(m, &err);
	sw_batch b = { (int)ncu - 1, tok, cu, NULL, NULL };
	float *lp = calloc(T, sizeof *lp), *ent = calloc(T, sizeof *ent);
	int rc = sw_engine_forward(e, &b, true, lp, ent, &err);
	is_int(rc, 0, "%s: forward (%s)", name, err.msg);
	double el = relerr_(sw_engine_logits(e), logits, nl);
	ok(nl == T * (size_t)m->cfg.vocab_size && el < 1e-4, "%s: logits of a packed batch of %zu sequences (rel err %.2g)",
	   name, ncu - 1, el);
	/* the greedy token of every row, as the logits have it (the first of equals) */
	const float *lg = sw_engine_logits(e);
	const int32_t *am = sw_engine_argmax(e);
	int amok = lg && am;
	for (size_t t = 0; amok && t < T; t++) {
		const float *row = lg + t * (size_t)m->cfg.vocab_size;
		int best = 0;
		for (int v = 1; v < m->cfg.vocab_size; v++)
			if (row[v] > row[best])
				best = v;
		amok = am[t] == best;
	}
	ok(amok, "%s: sw_engine_argmax is the argmax of every row's logits", name);
	int32_t *am1 = amok ? malloc(sizeof *am1 * T) : NULL;
	if (am1)
		memcpy(am1, am, sizeof *am1 * T);
	double elp = relerr_(lp, rlp, T), eent = relerr_(ent, rent, T);
	ok(elp < 1e-4, "%s: per-token log-probs (rel err %.2g)", name, elp);
	ok(eent < 1e-4, "%s: per-token entropy (rel err %.2g)", name, eent);
	double loss = 0;
	rc = sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss, NULL, &err);
	is_int(rc, 0, "%s: cross-entropy and backward (%s)", name, err.msg);
	ok(fabs(loss - rloss[0]) < 1e-4 * fabs(rloss[0]), "%s: loss %.7f, transformers %.7f", name, loss, rloss[0]);
	double worst = 0;
	const char *wn = "";
	int nt = 0;
	float *gh = host_(g);
	for (size_t i = 0; i < g->ntensors; i++) {
		const sw_tensor *t = &g->tensors[i], *r = sw_model_tensor(ref, t->name);
		if (!r || r->numel != t->numel) {
			worst = INFINITY, wn = t->name;
			continue;
		}
		double x = relerr_(gh + t->offset, r->data, t->numel);
		if (x > worst)
			worst = x, wn = t->name;
		nt++;
	}
	free(gh);
	ok(worst < 1e-4, "%s: all %d parameters' gradients (worst rel err %.2g, %s)", name, nt, worst, wn);

	/* Again with room for 5 rows of logits: the backward computes them again in chunks. */
	sw_model *g2 = new_(&m->cfg, &err);
	float *lp2 = calloc(T, sizeof *lp2);
	sw_engine_logits_budget(e, (size_t)5 * m->cfg.vocab_size);
	double loss2 = 0;
	rc = sw_engine_forward(e, &b, true, lp2, NULL, &err);
	ok(rc == 0 && sw_engine_logits(e) == NULL && relerr_(lp2, rlp, T) < 1e-4,
	   "%s: a training forward over its logits budget keeps none, log-probs the same", name);
	ok(am1 && sw_engine_argmax(e) && !memcmp(am1, sw_engine_argmax(e), sizeof *am1 * T),
	   "%s: and its argmax of every row is the same, taken chunk by chunk", name);
	free(am1);
	sw_engine_keep_logits(e, false);
	rc = sw_engine_forward(e, &b, false, lp2, NULL, &err);
	ok(rc == 0 && sw_engine_logits(e) == NULL && sw_engine_argmax(e) == NULL &&
	   relerr_(lp2, rlp, T) < 1e-4,
	   "%s: told so, a scoring forward keeps no more logits than the budget either", name);
	sw_engine_keep_logits(e, true);
	rc = sw_engine_cross_entropy(e, &b, NULL, 0, g2, &loss2, NULL, &err);
	double w2 = 0;
	gh = host_(g2);
	for (size_t i = 0; i < g2->ntensors; i++) {
		const sw_tensor *t = &g2->tensors[i], *r = sw_model_tensor(ref, t->name);
		w2 = fmax(w2, r ? relerr_(gh + t->offset, r->data, t->numel) : INFINITY);
	}
	free(gh);
	ok(rc == 0 && fabs(loss2 - rloss[0]) < 1e-4 * fabs(rloss[0]) && w2 < 1e-4,
	   "%s: loss and every gradient with the logits recomputed in chunks (worst rel err %.2g)", name, w2);
	sw_engine_logits_budget(e, (size_t)1 << 28);
	free(lp2);
	sw_model_free(g2);

	/* Under activation budgets (the least memory, and one between) the
	 * backward runs layers again from their inputs: the same bits. */
	float *g1h = host_(g);
	size_t budgets[2] = { 0, T * (size_t)m->cfg.hidden_size * 12 };
	for (int k = 0; k < 2; k++) {
		sw_model *g3 = new_(&m->cfg, &err);
		double loss3 = 0;
		sw_engine_act_budget(e, budgets[k]);
		rc = sw_engine_cross_entropy(e, &b, NULL, 0, g3, &loss3, NULL, &err);
		float *g3h = host_(g3);
		ok(rc == 0 && loss3 == loss && !memcmp(g1h, g3h, g->nparams * sizeof(float)),
		   "%s: activation budget %zu floats: loss and every gradient bit for bit (%s)", name,
		   budgets[k], err.msg);
		free(g3h);
		sw_model_free(g3);
	}
	sw_engine_act_budget(e, SIZE_MAX);
	free(g1h);
	free(lp), free(ent);
	sw_engine_free(e);
	sw_model_free(g);
out:
	sw_model_free(m), sw_model_free(ref);
	free(cu), free(tok), free(logits), free(rlp), free(rent), free(rloss);
}

/* A fixture model and its batch, each sequence's first third a prompt: no
 * target there, nor on its last row (tg, *nt of them with one); NULL when
 * they do not load (said as what's check). */
typedef struct fixb_ {
	sw_model *m;
	int32_t *cu, *tok, *tg;
	size_t ncu, T;
	int nt;
	sw_batch b;           /* the sequences with those targets */
} fixb_;

static int fixb_load_(fixb_ *f, const char *name, const char *what)
{
	char mdir[400], dir[400];
	snprintf(mdir, sizeof mdir, "%s/models/%s", fix_, name);
	snprintf(dir, sizeof dir, "%s/engine/%s", fix_, name);
	sw_error err = { 0 };
	memset(f, 0, sizeof *f);
	f->m = load_(mdir, &err);
	f->cu = slurp_(dir, "cu.i32", 4, &f->ncu), f->tok = slurp_(dir, "tokens.i32", 4, &f->T);
	ok(f->m && f->cu && f->tok, "%s: %s: model and batch load (%s)", name, what, err.msg);
	if (!f->m || !f->cu || !f->tok)
		return 0;
	f->tg = malloc(sizeof *f->tg * f->T);
	for (size_t s = 0; s + 1 < f->ncu; s++) {
		int a = f->cu[s], z = f->cu[s + 1], p = a + (z - a) / 3;
		for (int t = a; t < z; t++) {
			f->tg[t] = t >= p && t + 1 < z ? f->tok[t + 1] : -1;
			f->nt += f->tg[t] >= 0;
		}
	}
	f->b = (sw_batch){ (int)f->ncu - 1, f->tok, f->cu, f->tg, NULL };
	return 1;
}

static void fixb_free_(fixb_ *f)
{
	sw_model_free(f->m);
	free(f->cu), free(f->tok), free(f->tg);
}

/*
 * sw_engine_head_targets_only: a prompt's rows (no target) skip the
 * vocabulary's head.  Against the same batch with the head over every row:
 * the rows with a target get the same log-probs, entropies and argmax,
 * the others 0, 0 and -1; the loss and every gradient agree, with all the
 * logits kept and with them computed again in chunks.
 */
static void test_head_targets_(const char *name)
{
	fixb_ f;
	sw_error err = { 0 };
	if (!fixb_load_(&f, name, "head over the target rows"))
		goto out;
	sw_model *m = f.m;
	size_t T = f.T;
	int32_t *tg = f.tg;
	int nt = f.nt;
	sw_batch b = f.b;
	int V = m->cfg.vocab_size;
	for (int chunked = 0; chunked < 2; chunked++) {
		float *lp[2], *ent[2], *gh[2];
		int32_t *am[2];
		double loss[2] = { 0, 0 };
		int rc[2];
		for (int only = 0; only < 2; only++) {
			sw_engine *e = sw_engine_new(m, &err);
			sw_model *g = new_(&m->cfg, &err);
			sw_engine_head_targets_only(e, only);
			if (chunked)
				sw_engine_logits_budget(e, (size_t)3 * V);
			lp[only] = calloc(T, sizeof(float)), ent[only] = calloc(T, sizeof(float));
			am[only] = calloc(T, sizeof(int32_t));
			rc[only] = sw_engine_forward(e, &b, true, lp[only], ent[only], &err);
			if (!rc[only]) {
				memcpy(am[only], sw_engine_argmax(e), sizeof(int32_t) * T);
				if (only)
					ok(sw_engine_logits(e) == NULL, "%s: head over %d of %zu rows: no logits to give",
					   name, nt, T);
				rc[only] = sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss[only], NULL, &err);
			}
			gh[only] = host_(g);
			sw_model_free(g);
			sw_engine_free(e);
		}
		const char *how = chunked ? "logits again in chunks" : "logits kept";
		ok(!rc[0] && !rc[1], "%s (%s): forward and backward both ways (%s)", name, how, err.msg);
		int same = 1, zero = 1;
		double dl = 0;
		for (size_t t = 0; t < T; t++)
			if (tg[t] >= 0) {
				dl = fmax(dl, fabs((double)lp[0][t] - lp[1][t]) + fabs((double)ent[0][t] - ent[1][t]));
				same &= am[0][t] == am[1][t];
			} else
				zero &= lp[1][t] == 0 && ent[1][t] == 0 && am[1][t] == -1;
		ok(dl < 1e-6 && same, "%s (%s): the target rows' log-probs, entropies (max diff %.2g) and argmax",
		   name, how, dl);
		ok(zero, "%s (%s): the other rows' log-probs and entropies 0, argmax -1", name, how);
		double ge = relerr_(gh[1], gh[0], m->nparams);
		ok(fabs(loss[1] - loss[0]) <= 1e-6 * fabs(loss[0]) && ge < 1e-5,
		   "%s (%s): loss %.7f against %.7f, every gradient (rel err %.2g)", name, how, loss[1], loss[0], ge);
		for (int i = 0; i < 2; i++)
			free(lp[i]), free(ent[i]), free(am[i]), free(gh[i]);
	}
	/* no row with a target: the layers run, the head does not */
	for (size_t t = 0; t < T; t++)
		tg[t] = -1;
	sw_engine *e = sw_engine_new(m, &err);
	sw_model *g = new_(&m->cfg, &err);
	sw_engine_head_targets_only(e, true);
	float *lp = calloc(T, sizeof *lp);
	lp[0] = 1;
	int r = sw_engine_forward(e, &b, true, lp, NULL, &err);
	ok(r == 0 && lp[0] == 0 && lp[T - 1] == 0, "%s: a batch without targets: forward, log-probs 0 (%s)", name,
	   err.msg);
	r = r ? r : sw_engine_backward(e, lp, NULL, g, &err);
	float *h = host_(g);
	double s = 0;
	for (size_t i = 0; i < g->nparams; i++)
		s += fabs(h[i]);
	ok(r == 0 && s == 0, "%s: and its backward, every gradient 0 (%s)", name, err.msg);
	free(h), free(lp);
	sw_model_free(g);
	sw_engine_free(e);
out:
	fixb_free_(&f);
}

/* ---- the loss taken as the head runs (sw_engine_forward_loss) -------------------- */

/* A made-up per-token loss of the head's compact row k: d/dlp and d/dentropy. */
static float dlp_of_(int k)
{
	return -(float)(1 + k % 5) / 100;
}
static float dent_of_(int k)
{
	return 0.01f * (float)(k % 3 - 1);
}

struct loss_ctx {
	int next, calls, stop_at; /* the row expected next; calls; fail at this call (-1: never) */
	int in_order;
	float *lp, *ent;          /* what the calls were given, by compact row */
};

static int loss_cb_(void *ud, int r0, int n, const float *lp, const float *ent, float *dlp, float *dent,
                    sw_error *err)
{
	struct loss_ctx *x = ud;
	if (x->calls++ == x->stop_at) {
		err->code = SW_EINVAL;
		snprintf(err->msg, sizeof err->msg, "the loss refuses call %d", x->stop_at);
		return SW_EINVAL;
	}
	x->in_order &= r0 == x->next && n > 0;
	x->next = r0 + n;
	for (int i = 0; i < n; i++) {
		x->lp[r0 + i] = lp[i], x->ent[r0 + i] = ent[i];
		dlp[i] = dlp_of_(r0 + i);
		if (dent)
			dent[i] = dent_of_(r0 + i);
	}
	return 0;
}

static void test_forward_loss_(const char *name)
{
	fixb_ f;
	sw_error err = { 0 };
	if (!fixb_load_(&f, name, "the loss as the head runs"))
		goto out;
	sw_model *m = f.m;
	size_t T = f.T;
	int32_t *tg = f.tg;
	sw_batch b = f.b;
	int V = m->cfg.vocab_size;
	for (int chunked = 0; chunked < 2; chunked++)
		for (int only = 0; only < 2; only++) {
			const char *how = chunked ? "logits in chunks of 3 rows" : "logits kept";
			float *lp[2], *ent[2], *gh[2];
			int rc[2] = { 0, 0 };
			int32_t *am[2] = { calloc(T, sizeof(int32_t)), calloc(T, sizeof(int32_t)) };
			struct loss_ctx x = { 0, 0, -1, 1, calloc(T, sizeof(float)), calloc(T, sizeof(float)) };
			for (int fused = 0; fused < 2; fused++) {
				sw_engine *e = sw_engine_new(m, &err);
				sw_model *g = new_(&m->cfg, &err);
				sw_engine_head_targets_only(e, only);
				if (chunked)
					sw_engine_logits_budget(e, (size_t)3 * V);
				lp[fused] = calloc(T, sizeof(float)), ent[fused] = calloc(T, sizeof(float));
				if (fused) {
					rc[1] = sw_engine_forward_loss(e, &b, NULL, loss_cb_, &x, true, g, lp[1], ent[1], &err);
					if (!rc[1])
						memcpy(am[1], sw_engine_argmax(e), sizeof(int32_t) * T);
					rc[1] = rc[1] ? rc[1] : sw_engine_backward(e, NULL, NULL, g, &err);
				} else {
					/* the two-call way: the same derivatives, by the head's compact row */
					float *dl = calloc(T, sizeof(float)), *de = calloc(T, sizeof(float));
					rc[0] = sw_engine_forward(e, &b, true, lp[0], ent[0], &err);
					if (!rc[0])
						memcpy(am[0], sw_engine_argmax(e), sizeof(int32_t) * T);
					for (size_t t = 0, k = 0; t < T; t++)
						if (!only || tg[t] >= 0)
							dl[t] = dlp_of_((int)k), de[t] = dent_of_((int)k), k++;
					rc[0] = rc[0] ? rc[0] : sw_engine_backward(e, dl, de, g, &err);
					free(dl), free(de);
				}
				gh[fused] = host_(g);
				sw_model_free(g);
				sw_engine_free(e);
			}
			ok(!rc[0] && !rc[1], "%s (%s, %s rows): forward and backward both ways (%s)", name, how,
			   only ? "target" : "all", err.msg);
			size_t nh = 0;
			int seen = 1;
			for (size_t t = 0; t < T; t++)
				if (!only || tg[t] >= 0) {
					seen &= x.lp[nh] == lp[1][t] && x.ent[nh] == ent[1][t];
					nh++;
				}
			ok(x.in_order && x.next == (int)nh && x.calls == (chunked ? (int)(nh + 2) / 3 : 1) && seen,
			   "%s (%s): the loss saw the %zu head rows once, in order, in %d calls, as the forward gives them",
			   name, how, nh, x.calls);
			ok(!memcmp(lp[0], lp[1], T * sizeof(float)) && !memcmp(ent[0], ent[1], T * sizeof(float)) &&
			   !memcmp(am[0], am[1], sizeof(int32_t) * T),
			   "%s (%s): log-probs, entropies and argmax the same bits", name, how);
			ok(!memcmp(gh[0], gh[1], m->nparams * sizeof(float)),
			   "%s (%s, %s rows): every gradient the same bits as the two-call way's", name, how,
			   only ? "target" : "all");
			for (int i = 0; i < 2; i++)
				free(lp[i]), free(ent[i]), free(gh[i]), free(am[i]);
			free(x.lp), free(x.ent);
		}
	/* the loss refusing a chunk stops the forward with its error; no backward then */
	sw_engine *e = sw_engine_new(m, &err);
	sw_model *g = new_(&m->cfg, &err), *g2 = new_(&m->cfg, &err);
	sw_engine_head_targets_only(e, true);
	sw_engine_logits_budget(e, (size_t)3 * V);
	struct loss_ctx x = { 0, 0, 1, 1, calloc(T, sizeof(float)), calloc(T, sizeof(float)) };
	memset(&err, 0, sizeof err);
	ok(sw_engine_forward_loss(e, &b, NULL, loss_cb_, &x, false, g, NULL, NULL, &err) == SW_EINVAL &&
	   !strcmp(err.msg, "the loss refuses call 1"), "%s: the loss's error stops the forward: %s", name, err.msg);
	ok(sw_engine_backward(e, NULL, NULL, g, &err) == SW_EINVAL, "%s: and no backward follows it", name);
	x.stop_at = -1, x.calls = 0, x.next = 0;
	ok(sw_engine_forward_loss(e, &b, NULL, NULL, &x, false, g, NULL, NULL, &err) == SW_EINVAL, "%s: no loss", name);
	ok(sw_engine_forward_loss(e, &b, NULL, loss_cb_, &x, false, g, NULL, NULL, &err) == 0, "%s: then it runs",
	   name);
	float *d = calloc(T, sizeof *d);
	ok(sw_engine_backward(e, d, NULL, g, &err) == SW_EINVAL && strstr(err.msg, "takes no d(logprobs)"),
	   "%s: its backward refuses d(logprobs): %s", name, err.msg);
	ok(sw_engine_backward(e, NULL, NULL, g2, &err) == SW_EINVAL, "%s: and another gradient model", name);
	memset(&err, 0, sizeof err);
	ok(sw_engine_backward(e, NULL, NULL, g, &err) == 0, "%s: and takes its own (%s)", name, err.msg);
	/* logits that are not finite stop the forward before the loss is asked about them */
	float *w = host_(m), *nan = malloc(sizeof *nan * m->nparams);
	for (size_t i = 0; i < m->nparams; i++)
		nan[i] = NAN;
	put_(m, nan);
	x.calls = 0, x.next = 0;
	char want[80];
	int t0 = 0;
	while (tg[t0] < 0)
		t0++;
	snprintf(want, sizeof want, "the logits of token %d are not finite", t0);
	ok(sw_engine_forward_loss(e, &b, NULL, loss_cb_, &x, false, g, NULL, NULL, &err) == SW_ERANGE &&
	   !strcmp(err.msg, want) && x.calls == 0, "%s: NaN weights: %s, the loss not called", name, err.msg);
	put_(m, w);
	free(w), free(nan);
	free(d), free(x.lp), free(x.ent);
	sw_model_free(g), sw_model_free(g2);
	sw_engine_free(e);
out:
	fixb_free_(&f);
}

/* ---- AdamW, clipping and schedules ------------------------------------------ */

static void test_schedule_(void)
{
	sw_adamw_config c = sw_adamw_defaults(1.0f);
	ok(sw_lr_at(&c, 0) == 1.0f && sw_lr_at(&c, 1000) == 1.0f, "constant schedule");
	c.warmup_steps = 4;
	ok(sw_lr_at(&c, 0) == 0.25f && sw_lr_at(&c, 3) == 1.0f && sw_lr_at(&c, 9) == 1.0f,
	   "linear warm-up reaches the rate at its last step");
	c.schedule = SW_LR_COSINE, c.total_steps = 14, c.min_lr_ratio = 0.1f;
	ok(sw_lr_at(&c, 4) == 1.0f && fabsf(sw_lr_at(&c, 9) - 0.55f) < 1e-6f &&
	   fabsf(sw_lr_at(&c, 14) - 0.1f) < 1e-6f && fabsf(sw_lr_at(&c, 100) - 0.1f) < 1e-6f,
	   "cosine from the rate to its floor (%g %g %g)", sw_lr_at(&c, 4), sw_lr_at(&c, 9), sw_lr_at(&c, 14));
	c.schedule = SW_LR_LINEAR;
	ok(fabsf(sw_lr_at(&c, 9) - 0.55f) < 1e-6f && fabsf(sw_lr_at(&c, 14) - 0.1f) < 1e-6f,
	   "linear decay to its floor");
}

/* Four steps of forward, backward, clipping and AdamW against torch's. */
static void test_adamw_reference_(void)
{
	char dir[400], mdir[400], adir[420];
	snprintf(dir, sizeof dir, "%s/engine/tiny-qwen2", fix_);
	snprintf(mdir, sizeof mdir, "%s/models/tiny-qwen2", fix_);
	snprintf(adir, sizeof adir, "%s/adamw", dir);
	sw_error err = { 0 };
	sw_model *m = load_(mdir, &err), *ref = sw_model_load(adir, &err);
	size_t ncu, T, ns;
	int32_t *cu = slurp_(dir, "cu.i32", 4, &ncu), *tok = slurp_(dir, "tokens.i32", 4, &T);
	double *st = slurp_(dir, "adamw.f64", 8, &ns);
	ok(m && ref && cu && tok && st && ns == 8, "adamw references load (%s)", err.msg);
	if (!(m && ref && cu && tok && st && ns == 8))
		goto out;
	sw_model *g = new_(&m->cfg, &err);
	/* The moments: arenas on the model's backend, zeroed. */
	sw_model *mmod = new_(&m->cfg, &err), *vmod = new_(&m->cfg, &err);
	float *mm = mmod->arena, *vv = vmod->arena;
	sw_engine *e = sw_engine_new(m, &err);
	sw_batch b = { (int)ncu - 1, tok, cu, NULL, NULL };
	sw_adamw_config c = sw_adamw_defaults(1e-2f);
	c.beta2 = 0.95f, c.weight_decay = 0.1f, c.max_grad_norm = 0.3f;
	c.schedule = SW_LR_COSINE, c.warmup_steps = 2, c.total_steps = 5, c.min_lr_ratio = 0.1f;
	int good = 1;
	for (int step = 0; step < 4; step++) {
		sw_model_zero(g, NULL);
		double loss;
		sw_adamw_stats s;
		int rc = sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss, NULL, &err);
		rc = rc ? rc : sw_adamw_step(&c, m, g, mm, vv, step, &s, &err);
		good &= rc == 0 && fabs(s.grad_norm - st[2 * step]) < 1e-4 * st[2 * step] &&
		        fabs(s.lr - st[2 * step + 1]) < 1e-9 && s.clipped;
		if (!good)
			printf("# step %d: rc %d norm %.7g (torch %.7g) lr %g (torch %g)\n", step, rc,
			       s.grad_norm, st[2 * step], s.lr, st[2 * step + 1]);
	}
	ok(good, "each step's gradient norm, clipping and rate are torch's");
	double worst = 0;
	const char *wn = "";
	float *mh = host_(m);
	for (size_t i = 0; i < m->ntensors; i++) {
		const sw_tensor *t = &m->tensors[i], *r = sw_model_tensor(ref, t->name);
		double x = r ? relerr_(mh + t->offset, r->data, t->numel) : INFINITY;
		if (x > worst)
			worst = x, wn = t->name;
	}
	/* Adam divides each gradient entry by its own running size, so an entry
	 * near zero carries its last-bit rounding into the step at full size:
	 * the trajectory gets a looser bound than one gradient's 1e-4. */
	ok(worst < 5e-4, "parameters after 4 AdamW steps are torch's (worst rel err %.2g, %s)", worst, wn);
	/* A NaN gradient is refused and changes nothing. */
	float keep = mh[5], *gh = host_(g);
	gh[3] = NAN;
	put_(g, gh);
	is_int(sw_adamw_step(&c, m, g, mm, vv, 4, NULL, &err), SW_ERANGE, "a NaN gradient is refused: %s", err.msg);
	free(mh);
	mh = host_(m);
	ok(mh[5] == keep, "and the weights are untouched");
	free(mh), free(gh);
	sw_model_free(mmod), sw_model_free(vmod);
	sw_engine_free(e);
	sw_model_free(g);
out:
	sw_model_free(m), sw_model_free(ref);
	free(cu), free(tok), free(st);
}

/* ---- batched decoding ---------------------------------------------------------- */

static int argmax_(const float *z, int V)
{
	int b = 0;
	for (int j = 1; j < V; j++)
		if (z[j] > z[b])
			b = j;
	return b;
}

/* Greedy decoding, token for token as transformers' generate(). */
static void test_greedy_(const char *name)
{
	char dir[400], mdir[400];
	snprintf(dir, sizeof dir, "%s/engine/%s", fix_, name);
	snprintf(mdir, sizeof mdir, "%s/models/%s", fix_, name);
	sw_error err = { 0 };
	sw_model *m = load_(mdir, &err);
	size_t n;
	int32_t *rec = slurp_(dir, "generate.i32", 4, &n);
	ok(m && rec, "%s: model and generate() references load (%s)", name, err.msg);
	if (!m || !rec)
		goto out;
	sw_decoder *d = sw_decoder_new(m, 4, 256, &err);
	/* Both prompts in one decoder at once: batched decoding is what is checked. */
	int id[2], plen[2], nnew[2], *ref[2], got[2][64], k = 0;
	size_t at = 0;
	for (int i = 0; i < 2; i++) {
		plen[i] = rec[at], nnew[i] = rec[at + 1];
		ref[i] = rec + at + 2 + plen[i];
		id[i] = sw_decoder_add(d, rec + at + 2, plen[i], &err);
		at += 2 + (size_t)plen[i] + nnew[i];
	}
	int rc = 0;
	for (k = 0; k < nnew[0] && !rc; k++) {
		int nout;
		const int *ids;
		const float *lg;
		rc = sw_decoder_step(d, &nout, &ids, &lg, &err);
		for (int j = 0; j < nout && !rc; j++) {
			int which = ids[j] == id[0] ? 0 : 1, tk = argmax_(lg + (size_t)j * m->cfg.vocab_size, m->cfg.vocab_size);
			got[which][k] = tk;
			if (k + 1 < nnew[which])
				rc = sw_decoder_append(d, ids[j], &tk, 1, &err);
		}
	}
	is_int(rc, 0, "%s: decoding runs (%s)", name, err.msg);
	for (int i = 0; i < 2; i++) {
		int same = 1;
		for (int j = 0; j < nnew[i]; j++)
			same &= got[i][j] == ref[i][j];
		ok(same, "%s: greedy decoding of a %d-token prompt, %d tokens, as transformers generate()", name,
		   plen[i], nnew[i]);
	}
	sw_decoder_free(d);
out:
	sw_model_free(m);
	free(rec);
}

struct rows_chk {
	const int32_t *tok;
	int n, V, plen;
	const float *lps;
	int same, rows;
};
static int rows_cb_(void *p, int r0, int nr, const float *lg)
{
	struct rows_chk *c = p;
	for (int j = 0; j < nr; j++) {
		int t = r0 + j;
		if (t != c->rows++)
			c->same = 0;
		if (t + 1 >= c->plen && t + 1 < c->n)
			c->same &= sw_logprob_of(lg + (size_t)j * c->V, c->V, c->tok[t + 1]) == c->lps[t + 1];
	}
	return 0;
}

/*
 * The decoder's log-probs against a full forward over the same tokens:
 * a shared prompt forked four ways (one fork copies the shared last page on
 * its first write), a sequence removed half-way and a new prompt joining,
 * every response crossing page boundaries.
 */
static void test_decode_vs_forward_(const char *what, sw_model_config cfg)
{
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err);
	sw_model_init_random(m, 11, 0.3f);
	shake_(m);
	int V = cfg.vocab_size;
	sw_decoder *d = sw_decoder_new(m, 8, 512, &err);
	enum { NS = 6, MAXT = 64 };
	int32_t toks[NS][MAXT];
	float lps[NS][MAXT];
	int len[NS] = { 0 }, plen[NS] = { 0 }, id2s[8], want[NS] = { 0, 24, 30, 9, 27, 20 };
	for (int i = 0; i < 8; i++)
		id2s[i] = -1;
	int32_t prompt[13];
	for (int i = 0; i < 13; i++)
		prompt[i] = (int32_t)(urand_() * V);
	int root = sw_decoder_add(d, prompt, 13, &err), nout, rc;
	const int *ids;
	const float *lg;
	rc = sw_decoder_step(d, &nout, &ids, &lg, &err);
	int64_t room = sw_decoder_room(d);
	/* Sequences 1..4 fork the prompt; 0 is the root (kept, no response). */
	for (int s = 1; s <= 4; s++) {
		int f = sw_decoder_fork(d, root, &err);
		id2s[f] = s;
		memcpy(toks[s], prompt, sizeof prompt);
		len[s] = plen[s] = 13;
	}
	ok(rc == 0 && sw_decoder_room(d) == room, "%s: forks share the prompt's pages", what);
	ok(sw_decoder_last_logits(d, root) != NULL, "%s: a fork starts from its prompt's logits", what);
	/* Each fork samples its first token from the shared logits. */
	for (int f = 0; f < 8; f++)
		if (id2s[f] > 0) {
			const float *z = sw_decoder_last_logits(d, f);
			int32_t tk = (int32_t)(urand_() * V);
			lps[id2s[f]][len[id2s[f]]] = sw_logprob_of(z, V, tk);
			toks[id2s[f]][len[id2s[f]]++] = tk;
			sw_decoder_append(d, f, &tk, 1, &err);
		}
	sw_decoder_remove(d, root);
	for (int it = 0; it < 40 && !rc; it++) {
		if (it == 6) { /* sequence 5 joins with its own prompt */
			int32_t p5[7];
			for (int i = 0; i < 7; i++)
				toks[5][i] = p5[i] = (int32_t)(urand_() * V);
			int f = sw_decoder_add(d, p5, 7, &err);
			id2s[f] = 5, len[5] = plen[5] = 7;
		}
		rc = sw_decoder_step(d, &nout, &ids, &lg, &err);
		if (rc || nout == 0)
			break;
		for (int j = 0; j < nout; j++) {
			int f = ids[j], s = id2s[f];
			if (len[s] - plen[s] >= want[s]) {
				sw_decoder_remove(d, f);
				id2s[f] = -1;
				continue;
			}
			int32_t tk = (int32_t)(urand_() * V);
			lps[s][len[s]] = sw_logprob_of(lg + (size_t)j * V, V, tk);
			toks[s][len[s]++] = tk;
			rc = sw_decoder_append(d, f, &tk, 1, &err);
		}
	}
	is_int(rc, 0, "%s: decoding with forks, removal and a late prompt runs (%s)", what, err.msg);
	/* One packed forward over the five finished sequences. */
	sw_engine *e = sw_engine_new(m, &err);
	int32_t all[NS * MAXT], cu[NS + 1] = { 0 };
	int ns = 0;
	for (int s = 1; s < NS; s++) {
		memcpy(all + cu[ns], toks[s], sizeof(int32_t) * len[s]);
		cu[ns + 1] = cu[ns] + len[s];
		ns++;
	}
	float flp[NS * MAXT];
	sw_batch b = { ns, all, cu, NULL, NULL };
	rc = sw_engine_forward(e, &b, false, flp, NULL, &err);
	double worst = 0;
	int count = 0, full = 1;
	for (int s = 1; s < NS; s++) {
		full &= len[s] - plen[s] == want[s];
		for (int t = plen[s]; t < len[s]; t++, count++)
			worst = fmax(worst, fabs(lps[s][t] - flp[cu[s - 1] + t - 1]));
	}
	ok(rc == 0 && full && worst < 1e-5,
	   "%s: the decoder's log-probs of %d tokens equal a full forward's (max diff %.2g)", what,
	   count, worst);
	/* Scoring through the decoder gives generation's log-probs bit for bit. */
	int exact = 1;
	for (int s = 1; s < NS; s++) {
		float slp[MAXT];
		rc |= sw_decoder_score(d, toks[s], len[s], slp, NULL, &err);
		for (int t = plen[s]; t < len[s]; t++)
			exact &= slp[t - 1] == lps[s][t];
	}
	ok(rc == 0 && exact, "%s: sw_decoder_score gives decoding's log-probs exactly (%s)", what, err.msg);
	/* And the logits rows are the steps' logits: checked through the log-probs of every row. */
	struct rows_chk rc5 = { toks[5], len[5], V, plen[5], lps[5], 1, 0 };
	int rr = sw_decoder_rows(d, toks[5], len[5], rows_cb_, &rc5, &err);
	ok(rr == 0 && rc5.same && rc5.rows == len[5], "%s: sw_decoder_rows gives every row's logits in order", what);
	is_int(sw_decoder_room(d), 512 / 16 * 16 + 8 * 16, "%s: every page is free again at the end", what);
	sw_engine_free(e);
	sw_decoder_free(d);
	sw_model_free(m);
}

/* A sequence's logits have the same bits alone as beside others in a step. */
static void test_batch_invariance_(void)
{
	sw_model_config cfg = small_cfg_("qwen2", true, false, true);
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err);
	sw_model_init_random(m, 5, 0.3f);
	int V = cfg.vocab_size;
	int32_t p[9] = { 3, 1, 4, 1, 5, 9, 2, 6, 5 }, q[20];
	for (int i = 0; i < 20; i++)
		q[i] = (int32_t)(urand_() * V);
	float alone[6][37];
	int nout, same = 1;
	const int *ids;
	const float *lg;
	sw_decoder *d = sw_decoder_new(m, 8, 400, &err);
	int a = sw_decoder_add(d, p, 9, &err);
	for (int k = 0; k < 6; k++) {
		sw_decoder_step(d, &nout, &ids, &lg, &err);
		memcpy(alone[k], lg, sizeof(float) * V);
		int32_t t = argmax_(lg, V);
		sw_decoder_append(d, a, &t, 1, &err);
	}
	sw_decoder_free(d);
	/* Again, with other sequences (a long prompt among them) in every step. */
	d = sw_decoder_new(m, 8, 400, &err);
	sw_decoder_add(d, q, 20, &err);
	sw_decoder_add(d, q + 3, 5, &err);
	a = sw_decoder_add(d, p, 9, &err);
	for (int k = 0; k < 6; k++) {
		if (k == 2)
			sw_decoder_add(d, q + 1, 17, &err);
		sw_decoder_step(d, &nout, &ids, &lg, &err);
		for (int j = 0; j < nout; j++) {
			int32_t t = argmax_(lg + (size_t)j * V, V);
			if (ids[j] == a)
				same &= memcmp(alone[k], lg + (size_t)j * V, sizeof(float) * V) == 0;
			sw_decoder_append(d, ids[j], &t, 1, &err);
		}
	}
	ok(same, "a sequence's logits have the same bits alone and in a batch of %d", nout);
	sw_decoder_free(d);
	sw_model_free(m);
}

/*
 * A logits budget of 100 rows over 150 in three sequences: the backward
 * computes the logits again in chunks of 100 and 50 rows, across the
 * sequences' ends, and the log-probs, loss and gradients are those of the
 * logits kept whole.
 */
static void test_chunks_across_sequences_(void)
{
	sw_model_config cfg = small_cfg_("llama", false, false, false);
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err);
	sw_model_init_random(m, 7, 0.3f);
	enum { T = 150 };
	int32_t tok[T];
	int32_t cu[4] = { 0, 60, 110, T }; /* sequences within the 64 positions */
	for (int i = 0; i < T; i++)
		tok[i] = (int32_t)(urand_() * cfg.vocab_size);
	sw_batch b = { 3, tok, cu, NULL, NULL };
	float lp[2][T];
	double loss[2] = { 0, 0 };
	float *gh[2];
	int rc[2];
	for (int chunked = 0; chunked < 2; chunked++) {
		sw_engine *e = sw_engine_new(m, &err);
		sw_model *g = new_(&cfg, &err);
		if (chunked)
			sw_engine_logits_budget(e, (size_t)100 * cfg.vocab_size);
		rc[chunked] = sw_engine_forward(e, &b, true, lp[chunked], NULL, &err) ||
		              sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss[chunked], NULL, &err);
		if (chunked)
			ok(!rc[chunked] && sw_engine_logits(e) == NULL, "a budget of 100 rows of logits keeps none of 150 (%s)",
			   err.msg);
		gh[chunked] = host_(g);
		sw_model_free(g);
		sw_engine_free(e);
	}
	double w = relerr_(gh[1], gh[0], m->nparams);
	ok(!rc[0] && !rc[1] && relerr_(lp[1], lp[0], T) < 1e-6 && fabs(loss[1] - loss[0]) <= 1e-6 * fabs(loss[0]) &&
	           w < 1e-5,
	   "in chunks across the sequences: log-probs (%.1e), loss (%.1e) and gradients (%.1e) as kept whole",
	   relerr_(lp[1], lp[0], T), fabs(loss[1] - loss[0]) / fabs(loss[0]), w);
	free(gh[0]), free(gh[1]);
	sw_model_free(m);
}

static void test_decoder_limits_(void)
{
	sw_model_config cfg = small_cfg_("llama", false, false, false);
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err);
	sw_model_init_random(m, 3, 0.1f);
	/* 32 tokens of room: 2 pages + 2 slack pages for 2 sequences. */
	sw_decoder *d = sw_decoder_new(m, 2, 32, &err);
	int32_t p[40] = { 0 }, bad = 37;
	int a = sw_decoder_add(d, p, 40, &err), nout;
	const int *ids;
	const float *lg;
	ok(a >= 0 && sw_decoder_room(d) == 64, "decoder made with 4 pages");
	int b = sw_decoder_add(d, p, 30, &err);
	is_int(sw_decoder_step(d, &nout, &ids, &lg, &err), SW_ERANGE, "a step the cache cannot hold is refused: %s", err.msg);
	is_int(sw_decoder_len(d, a), 0, "and changes nothing");
	sw_decoder_remove(d, b);
	is_int(sw_decoder_step(d, &nout, &ids, &lg, &err), 0, "after a removal it runs");
	ok(nout == 1 && sw_decoder_len(d, a) == 40, "the sequence is in the cache");
	is_int(sw_decoder_add(d, p, 3, &err) >= 0, 1, "a second slot");
	ok(sw_decoder_add(d, p, 3, &err) == SW_ERANGE, "a third is refused: %s", err.msg);
	is_int(sw_decoder_append(d, a, &bad, 1, &err), SW_EINVAL, "a token outside the vocabulary is refused: %s", err.msg);
	is_int(sw_decoder_append(d, 7, p, 1, &err), SW_EINVAL, "an unknown sequence is refused: %s", err.msg);
	is_int(sw_decoder_append(d, a, p, 25, &err), SW_ERANGE, "going past the context is refused: %s", err.msg);
	sw_decoder_append(d, a, p, 1, &err);
	is_int(sw_decoder_fork(d, a, &err), SW_EINVAL, "forking with tokens pending is refused: %s", err.msg);
	is_int(sw_decoder_remove(d, 5), SW_EINVAL, "removing an unknown sequence is refused");
	/* A NaN weight: the step says so instead of handing out NaN logits. */
	sw_decoder_remove(d, a);
	float *mh = host_(m);
	mh[sw_model_tensor(m, "model.norm.weight")->offset + 3] = NAN;
	put_(m, mh);
	free(mh);
	int c = sw_decoder_add(d, p, 2, &err);
	is_int(sw_decoder_step(d, &nout, &ids, &lg, &err), SW_ERANGE, "non-finite logits are refused: %s", err.msg);
	(void)c;
	sw_decoder_free(d);
	sw_decoder_free(NULL);
	sw_model_free(m);
}

static void test_bad_input_(void)
{
	sw_model_config cfg = small_cfg_("llama", false, false, false);
	sw_error err = { 0 };
	sw_model *m = new_(&cfg, &err);
	sw_model_init_random(m, 1, 0.02f);
	sw_engine *e = sw_engine_new(m, &err);
	int32_t tok[] = { 1, 2, 37, 4 }, cu[] = { 0, 4 }, cu0[] = { 1, 4 }, cu2[] = { 0, 2, 2 };
	float lp[4];
	sw_batch b = { 1, tok, cu, NULL, NULL };
	is_int(sw_engine_forward(e, &b, false, lp, NULL, &err), SW_EINVAL, "a token outside the vocabulary is refused");
	ok(strstr(err.msg, "37") != NULL, "and named: %s", err.msg);
	tok[2] = 3;
	sw_batch b0 = { 1, tok, cu0, NULL, NULL };
	is_int(sw_engine_forward(e, &b0, false, lp, NULL, &err), SW_EINVAL, "cu_seqlens not from 0 is refused: %s", err.msg);
	sw_batch b2 = { 2, tok, cu2, NULL, NULL };
	is_int(sw_engine_forward(e, &b2, false, lp, NULL, &err), SW_EINVAL, "an empty sequence is refused: %s", err.msg);
	int32_t *big = calloc(65, sizeof *big), cub[] = { 0, 65 };
	sw_batch bb = { 1, big, cub, NULL, NULL };
	is_int(sw_engine_forward(e, &bb, false, NULL, NULL, &err), SW_EINVAL, "a sequence beyond the context is refused: %s", err.msg);
	free(big);
	is_int(sw_engine_backward(e, lp, NULL, m, &err), SW_EINVAL, "backward after a forward without activations is refused");
	sw_engine_free(e);
	sw_engine_free(NULL);
	sw_model_free(m);
}

/* The tokens a training forward fits in an activation budget: every
 * layer's input, one layer's activations and the one layer's scratch a
 * token, counted by hand. */
static void test_tokens_within_(void)
{
	sw_model_config c = smol135_config();
	/* a layer: 2 D (res, mid) + 2 QD (q, att) + 2 KD (k, v) + 2 I (gate, up) + H + 2;
	 * the scratch: D (xn1, then xn2) + I (h); and 30 inputs */
	size_t layer = 2 * 576 + 2 * 576 + 2 * 192 + 2 * 1536 + 9 + 2, sc = 576 + 1536;
	size_t per = layer + sc + 30 * 576;
	is_int((int)per, 25163, "SmolLM2-135M's shape: %zu floats a token", per);
	is_int((int)sw_engine_tokens_within(&c, 7 * per), 7, "7 tokens' worth holds 7 tokens");
	is_int((int)sw_engine_tokens_within(&c, 8 * per - 1), 7, "a float short of 8 holds 7");
	is_int((int)sw_engine_tokens_within(&c, SMOL135_PARAMS / 8 * 3), 2004, "3/8 float a parameter holds 2004 tokens");
	is_int((int)sw_engine_tokens_within(&c, 0), 1, "no budget still holds one token");
	c.qk_norm = true;
	is_int((int)sw_engine_tokens_within(&c, 7 * (per + 576 + 192 + 9 + 3)), 7,
	       "q/k norms: their inputs and norms counted too");
	is_int((int)sw_engine_tokens_within(NULL, 100), 1, "no config: 1");
	/* every layer's activations kept: 30 layers of them and the scratch a token, no inputs beside */
	c.qk_norm = false;
	is_int((int)sw_engine_tokens_kept(&c, 5 * (30 * layer + sc)), 5, "5 tokens with every layer kept");
	is_int((int)sw_engine_tokens_kept(&c, 5 * (30 * layer + sc) - 1), 4, "a float short of 5 keeps 4");
	is_int((int)sw_engine_tokens_kept(&c, SMOL135_PARAMS / 8 * 3), 287, "3/8 float a parameter keeps 287 tokens whole");
	is_int((int)sw_engine_tokens_kept(&c, 0), 1, "no budget still keeps one token");
	/* a forward without backward: one layer, the scratch and the hidden states (2 D + 4 a token) */
	is_int((int)sw_engine_tokens_scored(&c, 9 * (layer + sc + 2 * 576 + 4)), 9, "9 tokens scored");
	is_int((int)sw_engine_tokens_scored(&c, 9 * (layer + sc + 2 * 576 + 4) - 1), 8, "a float short of 9 scores 8");
	is_int((int)sw_engine_tokens_scored(&c, SMOL135_PARAMS / 8 * 3), 5580, "3/8 float a parameter scores 5580 tokens");
	is_int((int)sw_engine_tokens_scored(NULL, 100), 1, "no config: 1");
	is_int((int)sw_engine_tokens_kept(NULL, 100), 1, "no config: 1");
}

int main(void)
{
	sw_error err = { 0 };
	if (!(be_ = sw_backend_get(getenv("SW_TEST_DEVICE"), &err))) {
		fprintf(stderr, "test_engine: %s\n", err.msg);
		return 1;
	}
	printf("# on the %s backend\n", sw_backend_name(be_));
	sw_engine_threads(2);
	const char *top = getenv("SW_TOP");
	snprintf(fix_, sizeof fix_, "%s/tests/fixtures", top ? top : ".");
	test_fd_model_("llama (untied)", small_cfg_("llama", false, false, false));
	test_fd_model_("qwen2 (qkv bias, tied)", small_cfg_("qwen2", true, false, true));
	test_fd_model_("qwen3 (q/k norm)", small_cfg_("qwen3", false, true, false));
	test_prefix_("llama (untied)", small_cfg_("llama", false, false, false));
	test_prefix_("qwen2 (qkv bias, tied)", small_cfg_("qwen2", true, false, true));
	test_prefix_("qwen3 (q/k norm)", small_cfg_("qwen3", false, true, false));
	test_bad_input_();
	test_tokens_within_();
	test_reference_("tiny-llama");
	test_reference_("tiny-qwen2");
	test_reference_("tiny-qwen3");
	test_head_targets_("tiny-llama");
	test_head_targets_("tiny-qwen2");
	test_forward_loss_("tiny-llama");
	test_forward_loss_("tiny-qwen2");
	test_schedule_();
	test_adamw_reference_();
	test_greedy_("tiny-llama");
	test_greedy_("tiny-qwen2");
	test_greedy_("tiny-qwen3");
	test_decode_vs_forward_("llama", small_cfg_("llama", false, false, false));
	test_decode_vs_forward_("qwen2", small_cfg_("qwen2", true, false, true));
	test_decode_vs_forward_("qwen3", small_cfg_("qwen3", false, true, false));
	test_decoder_limits_();
	test_batch_invariance_();
	test_chunks_across_sequences_();
	return tap_done();
}
