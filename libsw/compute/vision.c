/*
 * vision.c - a LLaVA model's vision tower (CLIP or SigLIP) and projector,
 * forward and backward over a batch of images, on the model's backend
 * (backend.h): the host only cuts the images into patches and uploads them.
 *
 * As transformers computes LlavaModel.get_image_features, with V the
 * tower's width, L its tokens per image (the patches, and CLIP's class token):
 *   x0 = patches W_patch^T (+ b, SigLIP) with CLIP's class embedding in
 *        front, + position embeddings;  hs[0] = pre_layrnorm(x0) (CLIP) or x0;
 *   hs[l+1] = encoder layer l (hs[l]):  mid = hs + out_proj(attn(ln1(hs)))
 *        (non-causal, per image, q/k/v with biases); hs' = mid + fc2(act(fc1(ln2(mid))));
 *   features = hs[vision_feature_layer] (CLS dropped under "default"; a
 *        list of layers concatenated along the width), then
 *        linear_2(act(linear_1(features))).
 * Only the layers up to the deepest feature layer run.  The patch
 * embedding is a convolution with stride = kernel = patch, so it is a
 * product of the flattened patches [L, channels * p * p] with the weight.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "compute/vision.h"

typedef struct vacts_ {
	float *in;                 /* [Tv, V] hs[l] */
	float *ln1, *mean1, *rstd1;
	float *q, *k, *v, *att, *lse;
	float *mid;
	float *ln2, *mean2, *rstd2;
	float *f1, *a;             /* [Tv, VI] fc1's output, and after the activation */
} vacts_;

struct sw_vision_run {
	const sw_model *m;
	const sw_backend *be;
	int nimg, Tv, M;           /* images, tower rows, feature rows of the last forward */
	int nrun;                  /* layers run: the deepest feature layer */
	int fl[SW_MAX_FEATURE_LAYERS]; /* the feature layers as hidden-state indices 0..nl */
	bool kept;
	float *block;              /* forward activations */
	size_t block_floats;
	float *bblock;             /* backward scratch */
	size_t bblock_floats;
	int32_t *cu;               /* [nimg + 1] device */
	float *h_pat;              /* the patches, host staging */
	size_t h_pat_floats;
	/* carved from block */
	float *pat, *x0, *pmean, *prstd, *scratch;
	vacts_ *acts;              /* [nrun] */
	float *hs_last;            /* hs[nrun] */
	float *xs[SW_MAX_FEATURE_LAYERS], *y1, *a1, *feat;
	size_t scratch_floats;
};

static bool clip_(const sw_model_config *c)
{
	return !strcmp(c->vision.model_type, "clip_vision_model");
}

sw_vision_run *sw_vision_run_new(const sw_model *m, sw_error *err)
{
	if (!m || !m->cfg.vision.model_type[0]) {
		sw_fail(err, SW_EINVAL, "the model has no vision tower");
		return NULL;
	}
	sw_vision_run *v = calloc(1, sizeof *v);
	if (!v) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	v->m = m;
	v->be = m->backend;
	const sw_vision_config *vc = &m->cfg.vision;
	int nl = vc->num_hidden_layers;
	for (int j = 0; j < vc->n_feature_layers; j++) {
		int l = vc->feature_layers[j];
		v->fl[j] = l < 0 ? nl + 1 + l : l;
		v->nrun = v->fl[j] > v->nrun ? v->fl[j] : v->nrun;
	}
	if (!(v->acts = calloc((size_t)(v->nrun + 1), sizeof *v->acts))) {
		free(v);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	return v;
}

void sw_vision_run_free(sw_vision_run *v)
{
	if (!v)
		return;
	v->be->free(v->block);
	v->be->free(v->bblock);
	v->be->free(v->cu);
	free(v->h_pat);
	free(v->acts);
	free(v);
}

/* hs[i]: the input of layer i, or the last layer's output. */
static float *hs_(const sw_vision_run *v, int i)
{
	return i < v->nrun ? v->acts[i].in : v->hs_last;
}

static int carve_(sw_vision_run *v, int nimg, sw_error *err)
{
	const sw_model_config *c = &v->m->cfg;
	const sw_vision_config *vc = &c->vision;
	size_t side = (size_t)(vc->image_size / vc->patch_size), P = side * side;
	size_t L = P + (clip_(c) ? 1 : 0), Tv = (size_t)nimg * L, V = (size_t)vc->hidden_size;
	size_t VI = (size_t)vc->intermediate_size, NH = (size_t)vc->num_attention_heads;
	size_t CPP = (size_t)vc->num_channels * vc->patch_size * vc->patch_size;
	size_t M = (size_t)nimg * (size_t)sw_model_image_tokens(c), H = (size_t)c->hidden_size;
	size_t per = Tv * (V * 8 + VI * 2 + NH + 4), scratch = v->be->attn_scratch((int)L);
	size_t need = (size_t)nimg * P * CPP + Tv * (V + 2) + per * (size_t)v->nrun + Tv * V +
	              M * V * (size_t)vc->n_feature_layers + M * H * 3 + scratch + 64;
	if (need > v->block_floats) {
		v->be->free(v->block);
		v->block_floats = 0;
		if (!(v->block = v->be->alloc(need * sizeof(float), err)))
			return SW_ENOMEM;
		v->block_floats = need;
	}
	v->be->free(v->cu);
	if (!(v->cu = v->be->alloc(sizeof(int32_t) * (size_t)(nimg + 1), err)))
		return SW_ENOMEM;
	float *p = v->block;
#define TAKE_(n) (p += (n), p - (n))
	v->pat = TAKE_((size_t)nimg * P * CPP);
	v->x0 = TAKE_(Tv * V), v->pmean = TAKE_(Tv), v->prstd = TAKE_(Tv);
	for (int l = 0; l < v->nrun; l++) {
		vacts_ *a = &v->acts[l];
		a->in = TAKE_(Tv * V), a->ln1 = TAKE_(Tv * V), a->mean1 = TAKE_(Tv), a->rstd1 = TAKE_(Tv);
		a->q = TAKE_(Tv * V), a->k = TAKE_(Tv * V), a->v = TAKE_(Tv * V), a->att = TAKE_(Tv * V);
		a->lse = TAKE_(Tv * NH), a->mid = TAKE_(Tv * V), a->ln2 = TAKE_(Tv * V);
		a->mean2 = TAKE_(Tv), a->rstd2 = TAKE_(Tv), a->f1 = TAKE_(Tv * VI), a->a = TAKE_(Tv * VI);
	}
	v->hs_last = TAKE_(Tv * V);
	for (int j = 0; j < vc->n_feature_layers; j++)
		v->xs[j] = TAKE_(M * V);
	v->y1 = TAKE_(M * H), v->a1 = TAKE_(M * H), v->feat = TAKE_(M * H);
	v->scratch = TAKE_(scratch);
	v->scratch_floats = scratch;
#undef TAKE_
	v->nimg = nimg, v->Tv = (int)Tv, v->M = (int)M;
	int32_t *cu = malloc(sizeof *cu * (size_t)(nimg + 1));
	if (!cu)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (int i = 0; i <= nimg; i++)
		cu[i] = i * (int32_t)L;
	int rc = v->be->upload(v->cu, cu, sizeof *cu * (size_t)(nimg + 1), err);
	free(cu);
	return rc;
}

/* The images cut into patches [nimg * P][channels][p][p], in the conv weight's order. */
static int patches_(sw_vision_run *v, const float *px, int nimg, sw_error *err)
{
	const sw_vision_config *vc = &v->m->cfg.vision;
	int S = vc->image_size, p = vc->patch_size, C = vc->num_channels, side = S / p;
	size_t CPP = (size_t)C * p * p, n = (size_t)nimg * side * side * CPP;
	if (n > v->h_pat_floats) {
		free(v->h_pat);
		v->h_pat_floats = 0;
		if (!(v->h_pat = malloc(n * sizeof(float))))
			return sw_fail(err, SW_ENOMEM, "out of memory for the patches of %d images", nimg);
		v->h_pat_floats = n;
	}
	for (int i = 0; i < nimg; i++) {
		const float *img = px + (size_t)i * C * S * S;
		for (size_t j = 0; j < (size_t)C * S * S; j++)
			if (!isfinite(img[j]))
				return sw_fail(err, SW_EINVAL, "image %d: pixel value %zu is not finite", i, j);
		for (int py = 0; py < side; py++)
			for (int pxi = 0; pxi < side; pxi++) {
				float *o = v->h_pat + ((size_t)i * side * side + (size_t)py * side + pxi) * CPP;
				for (int ch = 0; ch < C; ch++)
					for (int ky = 0; ky < p; ky++)
						memcpy(o + ((size_t)ch * p + ky) * p,
						       img + ((size_t)ch * S + (size_t)py * p + ky) * S + (size_t)pxi * p,
						       sizeof(float) * (size_t)p);
			}
	}
	return v->be->upload(v->pat, v->h_pat, n * sizeof(float), err);
}

int sw_vision_run_forward(sw_vision_run *v, const float *pixels, int nimg, bool keep,
                          const float **features, sw_error *err)
{
	if (!v || nimg < 1 || !pixels)
		return sw_fail(err, SW_EINVAL, "no images");
	const sw_model *m = v->m;
	const sw_model_config *c = &m->cfg;
	const sw_vision_config *vc = &c->vision;
	const sw_vision_weights *w = &m->vision;
	const sw_backend *o = v->be;
	int rc;
	v->kept = false;
	if ((rc = carve_(v, nimg, err)) || (rc = patches_(v, pixels, nimg, err)))
		return rc;
	bool clip = clip_(c);
	int side = vc->image_size / vc->patch_size, P = side * side, L = P + (clip ? 1 : 0);
	int V = vc->hidden_size, VI = vc->intermediate_size, NH = vc->num_attention_heads, hd = V / NH;
	int CPP = vc->num_channels * vc->patch_size * vc->patch_size, Tv = v->Tv, M = v->M;
	int H = c->hidden_size, N = sw_model_image_tokens(c), act = sw_act_code(vc->hidden_act);
	float eps = vc->layer_norm_eps;
	size_t TV = (size_t)Tv * V;

	/* embeddings */
	for (int i = 0; i < nimg; i++) {
		float *x = v->x0 + (size_t)i * L * V;
		if (clip && (rc = o->copy(x, w->class_embedding, sizeof(float) * (size_t)V, err)))
			return rc;
		o->gemm(0, 1, P, V, CPP, 1, v->pat + (size_t)i * P * CPP, CPP, w->patch_w, CPP, 0,
		        x + (clip ? V : 0), V);
		if (w->patch_b)
			o->bias_fwd(x + (clip ? V : 0), w->patch_b, P, V);
		o->add(x, w->pos, (size_t)L * V);
	}
	float *h0 = hs_(v, 0);
	if (clip)
		o->layernorm_fwd(h0, v->pmean, v->prstd, v->x0, w->pre_w, w->pre_b, Tv, V, eps);
	else if ((rc = o->copy(h0, v->x0, TV * sizeof(float), err)))
		return rc;

	for (int l = 0; l < v->nrun; l++) {
		const sw_vision_layer *Y = &w->layers[l];
		vacts_ *a = &v->acts[l];
		float *out = hs_(v, l + 1);
		o->layernorm_fwd(a->ln1, a->mean1, a->rstd1, a->in, Y->ln1_w, Y->ln1_b, Tv, V, eps);
		o->gemm(0, 1, Tv, V, V, 1, a->ln1, V, Y->wq, V, 0, a->q, V);
		o->gemm(0, 1, Tv, V, V, 1, a->ln1, V, Y->wk, V, 0, a->k, V);
		o->gemm(0, 1, Tv, V, V, 1, a->ln1, V, Y->wv, V, 0, a->v, V);
		o->bias_fwd(a->q, Y->bq, Tv, V);
		o->bias_fwd(a->k, Y->bk, Tv, V);
		o->bias_fwd(a->v, Y->bv, Tv, V);
		o->attn_fwd(a->att, a->lse, a->q, a->k, a->v, v->cu, nimg, NH, NH, hd, 0, v->scratch);
		if ((rc = o->copy(a->mid, a->in, TV * sizeof(float), err)))
			return rc;
		o->gemm(0, 1, Tv, V, V, 1, a->att, V, Y->wo, V, 1, a->mid, V);
		o->bias_fwd(a->mid, Y->bo, Tv, V);
		o->layernorm_fwd(a->ln2, a->mean2, a->rstd2, a->mid, Y->ln2_w, Y->ln2_b, Tv, V, eps);
		o->gemm(0, 1, Tv, VI, V, 1, a->ln2, V, Y->fc1_w, V, 0, a->f1, VI);
		o->bias_fwd(a->f1, Y->fc1_b, Tv, VI);
		o->act_fwd(a->a, a->f1, (size_t)Tv * VI, act);
		if ((rc = o->copy(out, a->mid, TV * sizeof(float), err)))
			return rc;
		o->gemm(0, 1, Tv, V, VI, 1, a->a, VI, Y->fc2_w, VI, 1, out, V);
		o->bias_fwd(out, Y->fc2_b, Tv, V);
	}

	/* the selected hidden states, then the projector (linear_1 over the
	 * concatenation: one product per feature layer, with its columns of W1) */
	int nf = vc->n_feature_layers, off = L - N;
	for (int j = 0; j < nf; j++) {
		for (int i = 0; i < nimg; i++)
			if ((rc = o->copy(v->xs[j] + (size_t)i * N * V, hs_(v, v->fl[j]) + ((size_t)i * L + off) * V,
			                  sizeof(float) * (size_t)N * V, err)))
				return rc;
		o->gemm(0, 1, M, H, V, 1, v->xs[j], V, w->proj1_w + (size_t)j * V, V * nf, j ? 1 : 0, v->y1, H);
	}
	if (w->proj1_b)
		o->bias_fwd(v->y1, w->proj1_b, M, H);
	o->act_fwd(v->a1, v->y1, (size_t)M * H, sw_act_code(vc->projector_hidden_act));
	o->gemm(0, 1, M, H, H, 1, v->a1, H, w->proj2_w, H, 0, v->feat, H);
	if (w->proj2_b)
		o->bias_fwd(v->feat, w->proj2_b, M, H);
	if ((rc = o->sync(err)))
		return rc;
	v->kept = keep;
	*features = v->feat;
	return SW_OK;
}

int sw_vision_run_backward(sw_vision_run *v, const float *dfeat, sw_model *g, bool tower,
                           sw_error *err)
{
	if (!v || !v->kept)
		return sw_fail(err, SW_EINVAL, "vision backward without a forward that kept its activations");
	const sw_model *m = v->m;
	const sw_model_config *c = &m->cfg;
	const sw_vision_config *vc = &c->vision;
	const sw_vision_weights *w = &m->vision;
	sw_vision_weights *G = &g->vision;
	const sw_backend *o = v->be;
	bool clip = clip_(c);
	int nimg = v->nimg, side = vc->image_size / vc->patch_size, P = side * side, L = P + (clip ? 1 : 0);
	int V = vc->hidden_size, VI = vc->intermediate_size, NH = vc->num_attention_heads, hd = V / NH;
	int CPP = vc->num_channels * vc->patch_size * vc->patch_size, Tv = v->Tv, M = v->M;
	int H = c->hidden_size, N = sw_model_image_tokens(c), nf = vc->n_feature_layers, off = L - N;
	int act = sw_act_code(vc->hidden_act), rc;
	size_t TV = (size_t)Tv * V;
	if (v->be->attn_scratch(L) > v->scratch_floats)
		return sw_fail(err, SW_EINVAL, "the thread count grew between forward and backward");

	size_t need = (size_t)M * H * 2 + (size_t)M * V + TV * 7 + (size_t)Tv * VI + 64;
	if (need > v->bblock_floats) {
		o->free(v->bblock);
		v->bblock_floats = 0;
		if (!(v->bblock = o->alloc(need * sizeof(float), err)))
			return SW_ENOMEM;
		v->bblock_floats = need;
	}
	float *p = v->bblock;
	float *da1 = p, *dy1 = da1 + (size_t)M * H, *dxs = dy1 + (size_t)M * H, *dres = dxs + (size_t)M * V;
	float *dln = dres + TV, *datt = dln + TV, *dq = datt + TV, *dk = dq + TV, *dv = dk + TV;
	float *dx0 = dv + TV, *da = dx0 + TV;

	/* the projector */
	o->gemm(1, 0, H, H, M, 1, dfeat, H, v->a1, H, 1, G->proj2_w, H);
	if (G->proj2_b)
		o->bias_bwd(G->proj2_b, dfeat, M, H);
	o->gemm(0, 0, M, H, H, 1, dfeat, H, w->proj2_w, H, 0, da1, H);
	o->act_bwd(dy1, da1, v->y1, (size_t)M * H, sw_act_code(vc->projector_hidden_act));
	if (G->proj1_b)
		o->bias_bwd(G->proj1_b, dy1, M, H);
	for (int j = 0; j < nf; j++)
		o->gemm(1, 0, H, V, M, 1, dy1, H, v->xs[j], V, 1, G->proj1_w + (size_t)j * V, V * nf);
	if (!tower)
		return o->sync(err);

	/* d(hs[i]) from the feature layers that read hidden state i */
#define FEED_(i)                                                                                \
	for (int j = 0; j < nf; j++) {                                                          \
		if (v->fl[j] != (i))                                                            \
			continue;                                                               \
		o->gemm(0, 0, M, V, H, 1, dy1, H, w->proj1_w + (size_t)j * V, V * nf, 0, dxs, V); \
		for (int im = 0; im < nimg; im++)                                               \
			o->add(dres + ((size_t)im * L + off) * V, dxs + (size_t)im * N * V,     \
			       (size_t)N * V);                                                  \
	}
	if ((rc = o->memset(dres, 0, TV * sizeof(float), err)))
		return rc;
	FEED_(v->nrun)
	for (int l = v->nrun - 1; l >= 0; l--) {
		const sw_vision_layer *Y = &w->layers[l];
		sw_vision_layer *GY = &G->layers[l];
		vacts_ *a = &v->acts[l];
		/* MLP: dres is d(out); it becomes d(mid) */
		o->gemm(1, 0, V, VI, Tv, 1, dres, V, a->a, VI, 1, GY->fc2_w, VI);
		o->bias_bwd(GY->fc2_b, dres, Tv, V);
		o->gemm(0, 0, Tv, VI, V, 1, dres, V, Y->fc2_w, VI, 0, da, VI);
		o->act_bwd(da, da, a->f1, (size_t)Tv * VI, act);
		o->gemm(1, 0, VI, V, Tv, 1, da, VI, a->ln2, V, 1, GY->fc1_w, V);
		o->bias_bwd(GY->fc1_b, da, Tv, VI);
		o->gemm(0, 0, Tv, V, VI, 1, da, VI, Y->fc1_w, V, 0, dln, V);
		o->layernorm_bwd(dres, GY->ln2_w, GY->ln2_b, dln, a->mid, Y->ln2_w, a->mean2, a->rstd2, Tv, V);
		/* attention: dres becomes d(in) */
		o->gemm(1, 0, V, V, Tv, 1, dres, V, a->att, V, 1, GY->wo, V);
		o->bias_bwd(GY->bo, dres, Tv, V);
		o->gemm(0, 0, Tv, V, V, 1, dres, V, Y->wo, V, 0, datt, V);
		o->attn_bwd(dq, dk, dv, datt, a->att, a->lse, a->q, a->k, a->v, v->cu, nimg, NH, NH, hd, 0,
		            v->scratch);
		o->bias_bwd(GY->bq, dq, Tv, V);
		o->bias_bwd(GY->bk, dk, Tv, V);
		o->bias_bwd(GY->bv, dv, Tv, V);
		o->gemm(1, 0, V, V, Tv, 1, dq, V, a->ln1, V, 1, GY->wq, V);
		o->gemm(1, 0, V, V, Tv, 1, dk, V, a->ln1, V, 1, GY->wk, V);
		o->gemm(1, 0, V, V, Tv, 1, dv, V, a->ln1, V, 1, GY->wv, V);
		o->gemm(0, 0, Tv, V, V, 1, dq, V, Y->wq, V, 0, dln, V);
		o->gemm(0, 0, Tv, V, V, 1, dk, V, Y->wk, V, 1, dln, V);
		o->gemm(0, 0, Tv, V, V, 1, dv, V, Y->wv, V, 1, dln, V);
		o->layernorm_bwd(dres, GY->ln1_w, GY->ln1_b, dln, a->in, Y->ln1_w, a->mean1, a->rstd1, Tv, V);
		FEED_(l)
	}
#undef FEED_
	float *dx = dres;
	if (clip) {
		if ((rc = o->memset(dx0, 0, TV * sizeof(float), err)))
			return rc;
		o->layernorm_bwd(dx0, G->pre_w, G->pre_b, dres, v->x0, w->pre_w, v->pmean, v->prstd, Tv, V);
		dx = dx0;
	}
	for (int i = 0; i < nimg; i++) {
		const float *x = dx + (size_t)i * L * V;
		o->add(G->pos, x, (size_t)L * V);
		if (clip)
			o->add(G->class_embedding, x, (size_t)V);
		o->gemm(1, 0, V, CPP, P, 1, x + (clip ? V : 0), V, v->pat + (size_t)i * P * CPP, CPP, 1,
		        G->patch_w, CPP);
		if (G->patch_b)
			o->bias_bwd(G->patch_b, x + (clip ? V : 0), P, V);
	}
	return o->sync(err);
}
