/*
 * test_vision.c - a LLaVA model (sw/model.h's vision part, compute/vision.c,
 * the merge in engine.c and decoder.c) against what transformers computes
 * with the same tiny random model (tests/fixtures/llava/, made by
 * tests/fixtures/make_llava_refs.py): config.json and the weights as
 * transformers 5 saves them, the projected image features, logits and
 * log-probs with images in the prompt, gradients of a cross-entropy into
 * the language model, the projector and (when trained) the tower, greedy
 * generation; the same on the guard backend, bit for bit; and the errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "compute/backend.h"
#include "compute/vision.h"
#include "model/model_io.h"
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "tap.h"

static char fix_[300];

static void *slurp_(const char *name, size_t sz, size_t *n)
{
	char path[400];
	snprintf(path, sizeof path, "%s/%s", fix_, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "test_vision: cannot open %s\n", path);
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *p = malloc((size_t)len + 1);
	if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "test_vision: cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
	*n = (size_t)len / sz;
	return p;
}

static double maxdiff_(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

static float *host_(const sw_model *m)
{
	float *h = malloc(sizeof(float) * m->nparams);
	if (!h || sw_model_read(m, h, NULL))
		exit(1);
	return h;
}

/* The fixtures of one model. */
typedef struct ref_ {
	int32_t *cu, *tok, *tgt, *nimg;
	float *px, *feat, *logits, *lp;
	size_t nseq, T, npx, nfeat;
	double loss;
} ref_;

static void load_ref_(ref_ *r)
{
	size_t n;
	r->cu = slurp_("cu.i32", 4, &n), r->nseq = n - 1;
	r->tok = slurp_("tokens.i32", 4, &r->T);
	r->tgt = slurp_("targets.i32", 4, &n);
	r->nimg = slurp_("images.i32", 4, &n);
	r->px = slurp_("pixels.f32", 4, &r->npx);
	r->feat = slurp_("features.f32", 4, &r->nfeat);
	r->logits = slurp_("logits.f32", 4, &n);
	r->lp = slurp_("logprobs.f32", 4, &n);
	double *l = slurp_("loss.f64", 8, &n);
	r->loss = l[0];
	free(l);
}

static void free_ref_(ref_ *r)
{
	free(r->cu), free(r->tok), free(r->tgt), free(r->nimg), free(r->px), free(r->feat);
	free(r->logits), free(r->lp);
}

static void test_config_(const sw_model *m)
{
	const sw_model_config *c = &m->cfg;
	const sw_vision_config *v = &c->vision;
	ok(!strcmp(c->model_type, "llama") && c->vocab_size == 128 && c->hidden_size == 48 &&
	   c->num_hidden_layers == 2 && c->num_key_value_heads == 2,
	   "llava config.json: text_config read as the llama it is");
	ok(!strcmp(v->model_type, "clip_vision_model") && v->image_size == 30 && v->patch_size == 6 &&
	   v->hidden_size == 32 && v->num_hidden_layers == 3 && !strcmp(v->hidden_act, "quick_gelu") &&
	   v->layer_norm_eps == 1e-5f,
	   "vision_config read (CLIP, image 30, patch 6, quick_gelu)");
	ok(v->image_token_id == 127 && v->n_feature_layers == 1 && v->feature_layers[0] == -2 &&
	   !v->select_full && !strcmp(v->projector_hidden_act, "gelu") && v->projector_bias,
	   "the LLaVA fields: image_token_index, vision_feature_layer, strategy, projector");
	is_int(sw_model_image_tokens(c), 25, "an image takes 25 tokens (5 x 5 patches, CLS dropped)");
	const sw_tensor *t = sw_model_tensor(m, "vision_tower.embeddings.patch_embedding.weight");
	ok(t && t->ndim == 4 && t->shape[0] == 32 && t->shape[1] == 3 && t->shape[3] == 6 &&
	   t->data == m->vision.patch_w, "the patch embedding is a 4-d conv weight");
	ok(sw_model_tensor(m, "multi_modal_projector.linear_1.weight") &&
	   sw_model_tensor(m, "model.layers.1.mlp.down_proj.weight"), "projector and text tensors by name");
}

/* llava-hf/llava-1.5-7b-hf's config.json as transformers 4 wrote it: a diff against the classes' defaults. */
static void test_llava15_(void)
{
	char path[400];
	const char *top = getenv("SW_TOP");
	snprintf(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_model_config/llava-1.5-7b.json", top ? top : ".");
	sw_model_config c;
	sw_error err = { 0 };
	int rc = sw_model_config_load(path, &c, &err);
	const sw_vision_config *v = &c.vision;
	ok(rc == 0 && c.hidden_size == 4096 && c.intermediate_size == 11008 && c.num_hidden_layers == 32 &&
	   c.num_attention_heads == 32 && c.num_key_value_heads == 32 && c.vocab_size == 32064 &&
	   c.max_position_embeddings == 4096 && c.rms_norm_eps == 1e-5f,
	   "llava-1.5's text_config: what it leaves out is LlamaConfig's (%s)", err.msg);
	ok(rc == 0 && v->hidden_size == 1024 && v->num_hidden_layers == 24 && v->image_size == 336 &&
	   v->patch_size == 14 && !strcmp(v->hidden_act, "quick_gelu") && v->layer_norm_eps == 1e-5f &&
	   v->num_channels == 3 && v->image_token_id == 32000 && v->projector_bias && v->image_seq_length == 576,
	   "its vision_config and LLaVA fields: CLIPVisionConfig's and LlavaConfig's defaults");
	is_int(sw_model_image_tokens(&c), 576, "an image takes 576 tokens (24 x 24 patches)");
	is_int((long long)sw_model_config_nparams(&c), 7063427072LL, "7,063,427,072 parameters, as transformers counts them");

	/* A vision_config's layer_norm_eps of 0 is refused when read, naming the file (make fuzz found it
	 * accepted, then failing sw_model_config_check without the file's name). */
	FILE *f = fopen(path, "r");
	char text[8192];
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f)
		fclose(f);
	text[n] = 0;
	char *vc = strstr(text, "\"vision_config\": {");
	char bad[8400];
	if (vc) {
		vc += strlen("\"vision_config\": {");
		snprintf(bad, sizeof bad, "%.*s\"layer_norm_eps\": 0e-05, %s", (int)(vc - text), text, vc);
	}
	memset(&err, 0, sizeof err);
	rc = vc ? sw_model_config_parse(bad, strlen(bad), "x/config.json", &c, &err) : 0;
	ok(vc && rc == SW_EFORMAT && !strcmp(err.msg, "x/config.json: vision_config: field 'layer_norm_eps' is not positive"),
	   "vision_config: layer_norm_eps 0 refused, naming the file (%s)", err.msg);
}

static void test_features_(const sw_model *m, const ref_ *r)
{
	sw_error err = { 0 };
	int nimg = (int)(r->npx / (3 * 30 * 30));
	sw_vision_run *v = sw_vision_run_new(m, &err);
	const float *f = NULL;
	int rc = v ? sw_vision_run_forward(v, r->px, nimg, false, &f, &err) : -1;
	ok(rc == 0 && (size_t)nimg * 25 * 48 == r->nfeat, "%s: the tower and projector run on %d images (%s)",
	   m->backend->name, nimg, err.msg);
	float *h = malloc(sizeof(float) * r->nfeat);
	if (!rc)
		m->backend->download(h, f, sizeof(float) * r->nfeat, &err);
	double d = rc ? 1 : maxdiff_(h, r->feat, r->nfeat);
	ok(d < 1e-4, "%s: image features = transformers' get_image_features (max err %.2g)", m->backend->name, d);
	free(h);
	sw_vision_run_free(v);
}

typedef struct out_ {
	float *logits, *lp, *grad, *grad_frozen;
	size_t nlogits;
} out_;

static void run_engine_(const sw_model *m, const ref_ *r, out_ *o)
{
	sw_error err = { 0 };
	sw_engine *e = sw_engine_new(m, &err);
	int T = (int)r->T, V = m->cfg.vocab_size, nimg = 0;
	for (size_t s = 0; s < r->nseq; s++)
		nimg += r->nimg[s];
	sw_batch b = { (int)r->nseq, r->tok, r->cu, r->tgt, NULL };
	sw_images im = { nimg, r->px };
	o->lp = calloc((size_t)T, sizeof(float));
	int rc = e ? sw_engine_forward_images(e, &b, &im, false, o->lp, NULL, &err) : -1;
	ok(rc == 0, "%s: forward with %d images in %zu sequences (%s)", m->backend->name, nimg, r->nseq, err.msg);
	const float *z = rc ? NULL : sw_engine_logits(e);
	o->nlogits = (size_t)T * V;
	o->logits = malloc(sizeof(float) * o->nlogits);
	if (z)
		memcpy(o->logits, z, sizeof(float) * o->nlogits);
	/* gradients of the mean cross-entropy, the tower trained, then frozen */
	float *dlp = calloc((size_t)T, sizeof(float));
	int count = 0;
	for (int t = 0; t < T; t++)
		count += r->tgt[t] >= 0;
	for (int t = 0; t < T; t++)
		dlp[t] = r->tgt[t] >= 0 ? -1.0f / count : 0;
	for (int pass = 0; pass < 2; pass++) {
		sw_model *g = sw_model_new_on(m->backend, &m->cfg, &err);
		sw_engine_train_vision(e, true, pass == 0);
		rc = sw_engine_forward_images(e, &b, &im, true, NULL, NULL, &err);
		rc = rc ? rc : sw_engine_backward(e, dlp, NULL, g, &err);
		ok(rc == 0, "%s: backward with the tower %s (%s)", m->backend->name, pass ? "frozen" : "trained", err.msg);
		*(pass ? &o->grad_frozen : &o->grad) = host_(g);
		sw_model_free(g);
	}
	free(dlp);
	sw_engine_free(e);
}

static void free_out_(out_ *o)
{
	free(o->logits), free(o->lp), free(o->grad), free(o->grad_frozen);
}

static void test_parity_(const sw_model *m, const ref_ *r, const out_ *o)
{
	double d = maxdiff_(o->logits, r->logits, o->nlogits);
	ok(d < 1e-4, "logits with images = transformers' (max err %.2g)", d);
	d = maxdiff_(o->lp, r->lp, r->T);
	ok(d < 1e-4, "log-probs of the targets = transformers' (max err %.2g)", d);
	double loss = 0;
	int count = 0;
	for (size_t t = 0; t < r->T; t++)
		if (r->tgt[t] >= 0)
			loss -= o->lp[t], count++;
	loss /= count;
	ok(fabs(loss - r->loss) < 1e-4, "the cross-entropy %.6f = transformers' %.6f", loss, r->loss);

	char gdir[400];
	snprintf(gdir, sizeof gdir, "%s/grad", fix_);
	sw_error err = { 0 };
	sw_model *gr = sw_model_load(gdir, &err);
	ok(gr != NULL, "the reference gradients load (transformers' in-memory names) (%s)", err.msg);
	if (!gr)
		return;
	double worst[3] = { 0 }, scale = 1e-12, frozen_tower = 0, frozen_rest = 0;
	const char *part[3] = { "language model", "projector", "tower" };
	for (size_t i = 0; i < m->ntensors; i++) {
		const sw_tensor *t = &m->tensors[i];
		int k = !strncmp(t->name, "vision_tower.", 13) ? 2 : !strncmp(t->name, "multi_modal_projector.", 22) ? 1 : 0;
		for (size_t j = 0; j < t->numel; j++) {
			double want = gr->arena[t->offset + j];
			worst[k] = fmax(worst[k], fabs(o->grad[t->offset + j] - want));
			scale = fmax(scale, fabs(want));
			if (k == 2)
				frozen_tower = fmax(frozen_tower, fabs(o->grad_frozen[t->offset + j]));
			else
				frozen_rest = fmax(frozen_rest, fabs(o->grad_frozen[t->offset + j] - want));
		}
	}
	for (int k = 0; k < 3; k++)
		ok(worst[k] < 1e-4, "gradients of the %s = PyTorch's (max err %.2g, largest gradient %.2g)", part[k],
		   worst[k], scale);
	ok(frozen_tower == 0, "a frozen tower gets no gradient");
	ok(frozen_rest < 1e-4, "and the language model and projector get the same (max err %.2g)", frozen_rest);
	sw_model_free(gr);
}

/* AdamW leaves a frozen tower as it is (no decay either), and moves it when trained. */
static void test_adamw_(const sw_model *m, const float *grad)
{
	sw_error err = { 0 };
	size_t n = m->nparams;
	const sw_tensor *tw = sw_model_tensor(m, "vision_tower.encoder.layers.0.mlp.fc1.weight");
	const sw_tensor *pj = sw_model_tensor(m, "multi_modal_projector.linear_1.weight");
	for (int train = 0; train < 2; train++) {
		sw_model *p = sw_model_new(&m->cfg, &err), *g = sw_model_new(&m->cfg, &err);
		float *before = host_(m), *mo = calloc(n, sizeof(float)), *vo = calloc(n, sizeof(float));
		sw_model_write(p, before, &err);
		sw_model_write(g, grad, &err);
		sw_adamw_config c = sw_adamw_defaults(1e-2f);
		c.weight_decay = 0.1f;
		c.train_vision_tower = train;
		int rc = sw_adamw_step(&c, p, g, mo, vo, 0, NULL, &err);
		bool tower_same = !memcmp(p->arena + tw->offset, before + tw->offset, tw->numel * sizeof(float));
		bool proj_same = !memcmp(p->arena + pj->offset, before + pj->offset, pj->numel * sizeof(float));
		ok(rc == 0 && tower_same == !train && !proj_same, "AdamW: the tower %s, the projector moved",
		   train ? "trained moves" : "frozen stays, bit for bit");
		sw_model_free(p), sw_model_free(g);
		free(before), free(mo), free(vo);
	}
}

static void test_greedy_(const sw_model *m)
{
	size_t n, npx;
	int32_t *rec = slurp_("generate.i32", 4, &n);
	float *px = slurp_("pixels.f32", 4, &npx);
	sw_error err = { 0 };
	int k = 0;
	for (size_t at = 0; at < n; k++) {
		int plen = rec[at], nnew = rec[at + 1];
		const int32_t *prompt = rec + at + 2, *want = prompt + plen;
		sw_decoder *d = sw_decoder_new(m, 2, 256, &err);
		sw_images im = { 1, px };
		int id = d ? sw_decoder_add_images(d, prompt, plen, &im, &err) : -1;
		int same = id >= 0;
		for (int i = 0; i < nnew && same; i++) {
			int nout;
			const int *ids;
			const float *z;
			if (sw_decoder_step(d, &nout, &ids, &z, &err)) {
				same = 0;
				break;
			}
			int best = 0;
			for (int j = 1; j < m->cfg.vocab_size; j++)
				if (z[j] > z[best])
					best = j;
			same = best == want[i];
			int32_t t = best;
			sw_decoder_append(d, id, &t, 1, &err);
		}
		ok(same, "%s: greedy decoding with an image, prompt %d (%d tokens): transformers' %d tokens (%s)",
		   m->backend->name, k, plen, nnew, err.msg);
		sw_decoder_free(d);
		at += 2 + (size_t)plen + (size_t)nnew;
	}
	free(rec), free(px);
}

/* Scoring a prompt with its image: the decoder's arithmetic, transformers' log-probs. */
static void test_score_(const sw_model *m, const ref_ *r)
{
	sw_error err = { 0 };
	sw_decoder *d = sw_decoder_new(m, 2, 256, &err);
	int n = r->cu[1];
	float *lp = calloc((size_t)n, sizeof(float));
	sw_images im = { r->nimg[0], r->px };
	int rc = d ? sw_decoder_score_images(d, r->tok, n, &im, lp, NULL, &err) : -1;
	double worst = 0;
	for (int t = 0; t < n; t++)
		if (r->tgt[t] >= 0)
			worst = fmax(worst, fabs(lp[t] - r->lp[t]));
	ok(rc == 0 && worst < 1e-4, "%s: sw_decoder_score_images = transformers' log-probs (max err %.2g) (%s)",
	   m->backend->name, worst, err.msg);
	sw_images none = { 0, NULL };
	rc = sw_decoder_score_images(d, r->tok, n, &none, lp, NULL, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "too few images"), "scoring without the image: %s", err.msg);
	free(lp);
	sw_decoder_free(d);
}

static void test_errors_(const sw_model *m, const ref_ *r)
{
	sw_error err = { 0 };
	sw_engine *e = sw_engine_new(m, &err);
	sw_batch b = { (int)r->nseq, r->tok, r->cu, r->tgt, NULL };
	sw_images few = { 2, r->px }, many = { 4, r->px };
	int rc = sw_engine_forward_images(e, &b, &few, false, NULL, NULL, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "too few images"), "too few images for the placeholders: %s", err.msg);
	rc = sw_engine_forward_images(e, &b, &many, false, NULL, NULL, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "too many images"), "too many: %s", err.msg);
	rc = sw_engine_forward(e, &b, false, NULL, NULL, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "75 image tokens"), "none at all: %s", err.msg);
	float *bad = malloc(sizeof(float) * r->npx);
	memcpy(bad, r->px, sizeof(float) * r->npx);
	bad[2 * 2700 + 5] = NAN;
	sw_images nan = { 3, bad };
	rc = sw_engine_forward_images(e, &b, &nan, false, NULL, NULL, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "image 2"), "a pixel that is not finite names its image: %s", err.msg);
	free(bad);
	sw_engine_free(e);
}

static void test_save_(const sw_model *m)
{
	char dir[] = "/tmp/sw-test-vision.XXXXXX";
	sw_error err = { 0 };
	if (!mkdtemp(dir)) {
		ok(0, "a temporary directory");
		return;
	}
	int rc = sw_model_save(m, dir, SW_DT_F32, &err);
	sw_model *l = rc ? NULL : sw_model_load(dir, &err);
	float *a = host_(m), *b = l ? host_(l) : NULL;
	ok(l && !memcmp(&l->cfg, &m->cfg, sizeof m->cfg) && !memcmp(a, b, sizeof(float) * m->nparams),
	   "a LLaVA model saved and loaded again: the same config and bits (%s)", err.msg);
	/* the same tensors under the same names and shapes as transformers' own file */
	char path[400], ref[400];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	snprintf(ref, sizeof ref, "%s/model/model.safetensors", fix_);
	sw_st_file fa, fb;
	memset(&fa, 0, sizeof fa), memset(&fb, 0, sizeof fb);
	int same = !sw_st_open_file(&fa, path, &err) && !sw_st_open_file(&fb, ref, &err) && fa.n == fb.n;
	for (size_t i = 0; same && i < fa.n; i++) {
		size_t j = 0;
		while (j < fb.n && strcmp(fa.t[i].name, fb.t[j].name))
			j++;
		same = j < fb.n && fa.t[i].ndim == fb.t[j].ndim &&
		       !memcmp(fa.t[i].shape, fb.t[j].shape, sizeof(int64_t) * (size_t)fa.t[i].ndim);
	}
	ok(same, "saved as transformers 5 saves it: the same %zu names and shapes (the patch embedding 4-d)", fa.n);
	sw_st_close(&fa), sw_st_close(&fb);
	free(a), free(b);
	sw_model_free(l);
	unlink(path);
	snprintf(path, sizeof path, "%s/config.json", dir);
	unlink(path);
	rmdir(dir);
}

static void test_model_(const char *name)
{
	const char *top = getenv("SW_TOP");
	snprintf(fix_, sizeof fix_, "%s/tests/fixtures/llava/%s", top ? top : ".", name);
	printf("# %s\n", name);
	char mdir[400];
	snprintf(mdir, sizeof mdir, "%s/model", fix_);
	sw_error err = { 0 };
	sw_model *m = sw_model_load(mdir, &err);
	ok(m != NULL, "%s: the tiny LLaVA transformers saved loads (%s)", name, err.msg);
	if (!m)
		return;
	sw_model *mg = sw_model_load_on(sw_backend_guard(), mdir, &err);
	ref_ r;
	load_ref_(&r);
	if (!strcmp(m->cfg.vision.model_type, "clip_vision_model")) {
		test_config_(m);
		snprintf(mdir, sizeof mdir, "%s/model-hf", fix_);
		sw_model *hf = sw_model_load(mdir, &err);
		float *a = host_(m), *b = hf ? host_(hf) : NULL;
		ok(b && !memcmp(a, b, sizeof(float) * m->nparams),
		   "llava-hf's names (the tower under vision_tower.vision_model.) load the same weights (%s)", err.msg);
		free(a), free(b);
		sw_model_free(hf);
	} else {
		const sw_vision_config *v = &m->cfg.vision;
		ok(!strcmp(m->cfg.model_type, "qwen2") && m->cfg.attention_bias && !strcmp(v->hidden_act, "gelu_pytorch_tanh") &&
		   v->select_full && v->n_feature_layers == 2 && v->feature_layers[0] == -1 && v->feature_layers[1] == -3 &&
		   !v->projector_bias && !m->vision.proj1_b && m->vision.patch_b && !m->vision.class_embedding &&
		   !m->vision.pre_w,
		   "SigLIP: no class token or pre-layernorm, a patch bias; two feature layers, a projector without biases");
		is_int(sw_model_image_tokens(&m->cfg), 25, "SigLIP under \"full\": 25 image tokens");
	}
	test_features_(m, &r);
	test_features_(mg, &r);
	out_ oc = { 0 }, og = { 0 };
	run_engine_(m, &r, &oc);
	run_engine_(mg, &r, &og);
	test_parity_(m, &r, &oc);
	ok(!memcmp(oc.logits, og.logits, sizeof(float) * oc.nlogits) && !memcmp(oc.lp, og.lp, sizeof(float) * r.T),
	   "guard: logits and log-probs with images, bit for bit the CPU's");
	ok(!memcmp(oc.grad, og.grad, sizeof(float) * m->nparams) &&
	   !memcmp(oc.grad_frozen, og.grad_frozen, sizeof(float) * m->nparams),
	   "guard: every gradient, bit for bit the CPU's");
	test_adamw_(m, oc.grad);
	test_greedy_(m);
	test_greedy_(mg);
	test_score_(m, &r);
	test_score_(mg, &r);
	test_errors_(m, &r);
	test_save_(m);
	free_out_(&oc), free_out_(&og);
	free_ref_(&r);
	sw_model_free(m), sw_model_free(mg);
}

int main(void)
{
	sw_engine_threads(2);
	test_llava15_();
	test_model_("tiny-llava-clip");
	test_model_("tiny-llava-siglip");
	return tap_done();
}
