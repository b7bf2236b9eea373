/*
 * model.c - a Llama-family model's configuration (config.json in, and out)
 * and its parameters: one arena of floats, carved into named views in the
 * order sw/model.h gives, so that a shared store can hold the model whole
 * and a second arena of the same size holds its gradients.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "model/model_io.h"
#include "common/rng.h"
#include "sw/image.h"

/* Sizes beyond any released Llama-family model, small enough that no count overflows. */
#define MAX_VOCAB (1 << 24)
#define MAX_HIDDEN (1 << 16)
#define MAX_INTER (1 << 18)
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 4096
#define MAX_LAYERS 4096
#define MAX_CONFIG_BYTES (16 << 20)

/* ---- reading config.json ---- */

typedef struct cfg_ctx_ {
	const char *path;
	yyjson_val *root;
	sw_error *err;
} cfg_ctx_;

static int bad_(cfg_ctx_ *x, const char *fmt, const char *field, const char *what)
{
	char m[200];
	snprintf(m, sizeof m, fmt, field, what);
	return sw_fail(x->err, SW_EFORMAT, "%s: %s", x->path, m);
}

/* An integer field: absent or null keeps *out (the default). */
static int get_int_(cfg_ctx_ *x, const char *key, int lo, int hi, int *out)
{
	yyjson_val *v = yyjson_obj_get(x->root, key);
	if (!v || yyjson_is_null(v))
		return 0;
	if (!yyjson_is_int(v))
		return bad_(x, "field '%s' is %s, not an integer", key, yyjson_get_type_desc(v));
	int64_t i = yyjson_get_sint(v);
	if (yyjson_is_uint(v) && yyjson_get_uint(v) > INT64_MAX)
		i = INT64_MAX;
	if (i < lo || i > hi) {
		char r[64];
		snprintf(r, sizeof r, "%lld, not from %d to %d", (long long)i, lo, hi);
		return bad_(x, "field '%s' is %s", key, r);
	}
	*out = (int)i;
	return 0;
}

static int num_of_(cfg_ctx_ *x, yyjson_val *v, const char *key, float *out)
{
	if (!yyjson_is_num(v))
		return bad_(x, "field '%s' is %s, not a number", key, yyjson_get_type_desc(v));
	double d = yyjson_get_num(v);
	if (!isfinite(d) || !isfinite((float)d))
		return bad_(x, "field '%s' is %s", key, "not a finite float");
	*out = (float)d;
	return 0;
}

static int get_float_(cfg_ctx_ *x, yyjson_val *obj, const char *key, float *out)
{
	yyjson_val *v = yyjson_obj_get(obj, key);
	if (!v || yyjson_is_null(v))
		return 0;
	return num_of_(x, v, key, out);
}

static int get_bool_(cfg_ctx_ *x, const char *key, bool *out)
{
	yyjson_val *v = yyjson_obj_get(x->root, key);
	if (!v || yyjson_is_null(v))
		return 0;
	if (!yyjson_is_bool(v))
		return bad_(x, "field '%s' is %s, not true or false", key, yyjson_get_type_desc(v));
	*out = yyjson_get_bool(v);
	return 0;
}

/* rope_scaling (transformers 4) or rope_parameters (5): default, or llama3. */
static int rope_(cfg_ctx_ *x, sw_model_config *c, const char *key)
{
	yyjson_val *r = yyjson_obj_get(x->root, key);
	if (!r || yyjson_is_null(r))
		return 0;
	if (!yyjson_is_obj(r))
		return bad_(x, "field '%s' is %s, not an object", key, yyjson_get_type_desc(r));
	int rc;
	if ((rc = get_float_(x, r, "rope_theta", &c->rope_theta)))
		return rc;
	yyjson_val *t = yyjson_obj_get(r, "rope_type");
	if (!t)
		t = yyjson_obj_get(r, "type");
	const char *type = t ? yyjson_get_str(t) : "default";
	if (!type)
		return bad_(x, "field '%s.rope_type' is %s, not a string", key, yyjson_get_type_desc(t));
	if (!strcmp(type, "default"))
		return 0;
	if (strcmp(type, "llama3"))
		return bad_(x, "field '%s.rope_type' is '%s': only 'default' and 'llama3' are supported",
		            key, type);
	static const char *need[] = { "factor", "low_freq_factor", "high_freq_factor",
	                              "original_max_position_embeddings" };
	float f[4];
	for (int i = 0; i < 4; i++) {
		char k[96];
		snprintf(k, sizeof k, "%s.%s", key, need[i]);
		yyjson_val *v = yyjson_obj_get(r, need[i]);
		if (!v || yyjson_is_null(v))
			return bad_(x, "field '%s' is %s", k, "missing (llama3 rope scaling needs it)");
		if ((rc = num_of_(x, v, k, &f[i])))
			return rc;
		if (f[i] <= 0)
			return bad_(x, "field '%s' is %s", k, "not positive");
	}
	if (f[2] <= f[1])
		return bad_(x, "field '%s.high_freq_factor' is %s", key, "not above low_freq_factor");
	if (f[3] != floorf(f[3]) || f[3] >= 2147483648.0f) /* (int) of it must not overflow */
		return bad_(x, "field '%s.original_max_position_embeddings' is %s", key,
		            "not a whole number below 2^31");
	c->rope_factor = f[0];
	c->rope_low_freq_factor = f[1];
	c->rope_high_freq_factor = f[2];
	c->rope_original_max_position = (int)f[3];
	return 0;
}

/* A field that names a feature we do not implement, when it is in use. */
static int refuse_(cfg_ctx_ *x, const char *key, const char *why)
{
	yyjson_val *v = yyjson_obj_get(x->root, key);
	if (!v || yyjson_is_null(v) || (yyjson_is_bool(v) && !yyjson_get_bool(v)) ||
	    (yyjson_is_num(v) && yyjson_get_num(v) == 0))
		return 0;
	return bad_(x, "field '%s': %s is not supported", key, why);
}

/*
 * diff: a LLaVA file's text_config, which transformers 4 wrote as a diff
 * against the text model's config class (to_diff_dict): a field it leaves
 * out has that class's default (LlamaConfig's, Qwen2Config's or
 * Qwen3Config's), so none is missing.
 */
static int parse_config_(cfg_ctx_ *x, sw_model_config *c, bool diff)
{
	yyjson_val *root = x->root;
	int rc;
	memset(c, 0, sizeof *c);
	/* a field twice, at any depth, was refused when the text was read (sw_json_refuse_twins) */
	if (yyjson_obj_size(root) > 4096)
		return bad_(x, "%s has %s", "the document", "more than 4096 fields; not a config.json");
	yyjson_val *mt = yyjson_obj_get(root, "model_type");
	if (!mt)
		return bad_(x, "field '%s' is %s", "model_type", "missing");
	const char *type = yyjson_get_str(mt);
	if (!type)
		return bad_(x, "field '%s' is %s, not a string", "model_type", yyjson_get_type_desc(mt));
	bool llama = !strcmp(type, "llama"), qwen2 = !strcmp(type, "qwen2"), qwen3 = !strcmp(type, "qwen3");
	if (!llama && !qwen2 && !qwen3)
		return bad_(x, "field '%s' is '%s': only llama, qwen2 and qwen3 are supported",
		            "model_type", type);
	snprintf(c->model_type, sizeof c->model_type, "%s", type);

	/*
	 * The defaults of LlamaConfig, Qwen2Config and Qwen3Config where the format
	 * itself defines one (older configs leave these out and mean them); the
	 * shapes and the norm's epsilon have none: see required below.
	 */
	c->num_key_value_heads = 0; /* = heads */
	c->head_dim = qwen3 ? 128 : 0; /* 0: hidden / heads */
	c->rope_theta = 10000.0f;
	c->tie_word_embeddings = false;
	c->attention_bias = qwen2; /* Qwen2 has q/k/v biases whatever the config says */
	c->qk_norm = qwen3;
	c->bos_token_id = llama ? 1 : -1;
	c->n_eos = 0;
	if (llama) {
		c->eos_token_ids[0] = 2;
		c->n_eos = 1;
	}
	if (diff) {
		c->vocab_size = llama ? 32000 : 151936;
		c->hidden_size = 4096;
		c->intermediate_size = llama ? 11008 : 22016;
		c->num_hidden_layers = c->num_attention_heads = 32;
		c->max_position_embeddings = llama ? 2048 : 32768;
		c->rms_norm_eps = 1e-6f;
	}

	if ((rc = get_int_(x, "vocab_size", 1, MAX_VOCAB, &c->vocab_size)) ||
	    (rc = get_int_(x, "hidden_size", 1, MAX_HIDDEN, &c->hidden_size)) ||
	    (rc = get_int_(x, "intermediate_size", 1, MAX_INTER, &c->intermediate_size)) ||
	    (rc = get_int_(x, "num_hidden_layers", 1, MAX_LAYERS, &c->num_hidden_layers)) ||
	    (rc = get_int_(x, "num_attention_heads", 1, MAX_HEADS, &c->num_attention_heads)) ||
	    (rc = get_int_(x, "num_key_value_heads", 1, MAX_HEADS, &c->num_key_value_heads)) ||
	    (rc = get_int_(x, "head_dim", 1, MAX_HEAD_DIM, &c->head_dim)) ||
	    (rc = get_int_(x, "max_position_embeddings", 1, INT_MAX, &c->max_position_embeddings)) ||
	    (rc = get_float_(x, root, "rms_norm_eps", &c->rms_norm_eps)) ||
	    (rc = get_float_(x, root, "rope_theta", &c->rope_theta)) ||
	    (rc = get_bool_(x, "tie_word_embeddings", &c->tie_word_embeddings)))
		return rc;
	if (!yyjson_is_null(yyjson_obj_get(root, "rms_norm_eps")) && yyjson_obj_get(root, "rms_norm_eps") &&
	    !(c->rms_norm_eps > 0))
		return bad_(x, "field '%s' is %s", "rms_norm_eps", "not positive");
	if ((rc = rope_(x, c, "rope_scaling")) || (rc = rope_(x, c, "rope_parameters")))
		return rc;
	if (!(c->rope_theta > 0))
		return bad_(x, "field '%s' is %s", "rope_theta", "not positive");

	/* what the engine does not implement, named */
	yyjson_val *act = yyjson_obj_get(root, "hidden_act");
	if (act && !yyjson_is_null(act)) {
		const char *a = yyjson_get_str(act);
		if (!a)
			return bad_(x, "field '%s' is %s, not a string", "hidden_act", yyjson_get_type_desc(act));
		if (strcmp(a, "silu"))
			return bad_(x, "field '%s' is '%s': only 'silu' is supported", "hidden_act", a);
	}
	if (!qwen2) {
		bool ab = false;
		if ((rc = get_bool_(x, "attention_bias", &ab)))
			return rc;
		if (ab)
			return bad_(x, "field '%s': %s is not supported", "attention_bias",
			            "a bias on q/k/v/o_proj in a llama or qwen3 model");
	}
	if ((rc = refuse_(x, "mlp_bias", "a bias on the MLP projections")) ||
	    (rc = refuse_(x, "use_sliding_window", "sliding-window attention")) ||
	    (rc = refuse_(x, "num_experts", "a mixture of experts")) ||
	    (rc = refuse_(x, "num_local_experts", "a mixture of experts")) ||
	    (rc = refuse_(x, "n_routed_experts", "a mixture of experts")) ||
	    (rc = refuse_(x, "num_experts_per_tok", "a mixture of experts")) ||
	    (rc = refuse_(x, "moe_intermediate_size", "a mixture of experts")) ||
	    (rc = refuse_(x, "quantization_config", "a quantized checkpoint")))
		return rc;
	yyjson_val *lt = yyjson_obj_get(root, "layer_types");
	if (lt && !yyjson_is_null(lt)) {
		if (!yyjson_is_arr(lt))
			return bad_(x, "field '%s' is %s, not an array", "layer_types", yyjson_get_type_desc(lt));
		size_t i, n;
		yyjson_val *e;
		yyjson_arr_foreach(lt, i, n, e) {
			const char *s = yyjson_get_str(e);
			if (!s || strcmp(s, "full_attention"))
				return bad_(x, "field '%s' has '%s': only full_attention layers are supported",
				            "layer_types", s ? s : yyjson_get_type_desc(e));
		}
	}

	/* a missing shape is an error, never a default a model could silently run with (after the
	 * checks above, so that an unsupported feature is named first) */
	static const char *const required[] = { "vocab_size", "hidden_size", "intermediate_size",
		"num_hidden_layers", "num_attention_heads", "max_position_embeddings", "rms_norm_eps" };
	for (size_t i = 0; i < sizeof required / sizeof *required && !diff; i++) {
		yyjson_val *v = yyjson_obj_get(root, required[i]);
		if (!v || yyjson_is_null(v))
			return bad_(x, "field '%s' is %s", required[i], v ? "null; it is required" : "missing; it is required");
	}
	if (!c->num_key_value_heads)
		c->num_key_value_heads = c->num_attention_heads;
	if (!c->head_dim) {
		if (c->hidden_size % c->num_attention_heads)
			return bad_(x, "field '%s' is %s", "head_dim",
			            "missing, and hidden_size is not a multiple of num_attention_heads");
		c->head_dim = c->hidden_size / c->num_attention_heads;
	}

	yyjson_val *bos = yyjson_obj_get(root, "bos_token_id");
	if (bos) {
		c->bos_token_id = -1;
		if (!yyjson_is_null(bos) && (rc = get_int_(x, "bos_token_id", 0, MAX_VOCAB - 1, &c->bos_token_id)))
			return rc;
	}
	yyjson_val *eos = yyjson_obj_get(root, "eos_token_id");
	if (eos) {
		c->n_eos = 0;
		if (yyjson_is_arr(eos)) {
			size_t i, n;
			yyjson_val *e;
			if (yyjson_arr_size(eos) > SW_MAX_EOS)
				return bad_(x, "field '%s' has %s", "eos_token_id", "more than 8 ids");
			yyjson_arr_foreach(eos, i, n, e) {
				if (!yyjson_is_int(e) || yyjson_get_sint(e) < 0 || yyjson_get_sint(e) >= MAX_VOCAB)
					return bad_(x, "field '%s' has %s", "eos_token_id", "an element that is no token id");
				c->eos_token_ids[c->n_eos++] = (int)yyjson_get_sint(e);
			}
		} else if (!yyjson_is_null(eos)) {
			if ((rc = get_int_(x, "eos_token_id", 0, MAX_VOCAB - 1, &c->eos_token_ids[0])))
				return rc;
			c->n_eos = 1;
		}
	}
	sw_error e2 = { 0 };
	if ((rc = sw_model_config_check(c, &e2)))
		return sw_fail(x->err, rc, "%s: %.200s", x->path, e2.msg);
	return 0;
}

/* ---- a LLaVA config.json: text_config, vision_config and the wiring ---- */

/* A string field (absent or null keeps *out); among the names in ok when ok is given. */
static int get_str_(cfg_ctx_ *x, const char *key, char *out, size_t size, const char *const *ok)
{
	yyjson_val *v = yyjson_obj_get(x->root, key);
	if (!v || yyjson_is_null(v))
		return 0;
	const char *str = yyjson_get_str(v);
	if (!str)
		return bad_(x, "field '%s' is %s, not a string", key, yyjson_get_type_desc(v));
	if (ok) {
		size_t i = 0;
		while (ok[i] && strcmp(ok[i], str))
			i++;
		if (!ok[i]) {
			char m[96];
			snprintf(m, sizeof m, "'%.40s', which is not supported", str);
			return bad_(x, "field '%s' is %s", key, m);
		}
	}
	snprintf(out, size, "%s", str);
	return 0;
}

static const char *const acts_[] = { "quick_gelu", "gelu", "gelu_pytorch_tanh", "silu", NULL };

/*
 * vision_config, with the defaults of CLIPVisionConfig / SiglipVisionConfig
 * for what is absent (transformers 4 wrote a diff against them; 5 writes
 * every field).
 */
static int parse_vision_(cfg_ctx_ *x, sw_vision_config *v)
{
	int rc;
	yyjson_val *mt = yyjson_obj_get(x->root, "model_type");
	const char *type = mt ? yyjson_get_str(mt) : NULL;
	if (!type)
		return bad_(x, "field '%s' is %s", "model_type", mt ? "not a string" : "missing");
	bool clip = !strcmp(type, "clip_vision_model"), siglip = !strcmp(type, "siglip_vision_model");
	if (!clip && !siglip)
		return bad_(x, "field '%s' is '%s': only clip_vision_model and siglip_vision_model are supported",
		            "model_type", type);
	snprintf(v->model_type, sizeof v->model_type, "%s", type);
	v->hidden_size = 768, v->intermediate_size = 3072, v->num_hidden_layers = 12;
	v->num_attention_heads = 12, v->num_channels = 3, v->image_size = 224;
	v->patch_size = clip ? 32 : 16;
	v->layer_norm_eps = clip ? 1e-5f : 1e-6f;
	snprintf(v->hidden_act, sizeof v->hidden_act, "%s", clip ? "quick_gelu" : "gelu_pytorch_tanh");
	if ((rc = get_int_(x, "hidden_size", 1, MAX_HIDDEN, &v->hidden_size)) ||
	    (rc = get_int_(x, "intermediate_size", 1, MAX_INTER, &v->intermediate_size)) ||
	    (rc = get_int_(x, "num_hidden_layers", 1, MAX_LAYERS, &v->num_hidden_layers)) ||
	    (rc = get_int_(x, "num_attention_heads", 1, MAX_HEADS, &v->num_attention_heads)) ||
	    (rc = get_int_(x, "num_channels", 1, 16, &v->num_channels)) ||
	    (rc = get_int_(x, "image_size", 1, 1 << 14, &v->image_size)) ||
	    (rc = get_int_(x, "patch_size", 1, 1 << 14, &v->patch_size)) ||
	    (rc = get_float_(x, x->root, "layer_norm_eps", &v->layer_norm_eps)) ||
	    (rc = get_str_(x, "hidden_act", v->hidden_act, sizeof v->hidden_act, acts_)))
		return rc;
	/* refused here, with the file's name, not only by sw_model_config_check (fuzz_model_config) */
	if (!(v->layer_norm_eps > 0))
		return bad_(x, "field '%s' is %s", "layer_norm_eps", "not positive");
	if (siglip && (rc = refuse_(x, "vision_use_head", "SigLIP's attention-pooling head")))
		return rc;
	return 0;
}

static int vision_check_(const sw_vision_config *v, int vocab, sw_error *err)
{
	if (!v->model_type[0])
		return 0;
	if (v->hidden_size % v->num_attention_heads)
		return sw_fail(err, SW_EFORMAT, "vision_config: hidden_size %d is not a multiple of num_attention_heads %d",
		               v->hidden_size, v->num_attention_heads);
	if (v->image_size % v->patch_size)
		return sw_fail(err, SW_EFORMAT, "vision_config: image_size %d is not a multiple of patch_size %d",
		               v->image_size, v->patch_size);
	if ((int64_t)(v->image_size / v->patch_size) * (v->image_size / v->patch_size) > 1 << 20)
		return sw_fail(err, SW_EFORMAT, "vision_config: too many patches");
	if (v->image_token_id < 0 || v->image_token_id >= vocab)
		return sw_fail(err, SW_EFORMAT, "field 'image_token_index' is %d, outside the vocabulary of %d",
		               v->image_token_id, vocab);
	if (v->n_feature_layers < 1 || v->n_feature_layers > SW_MAX_FEATURE_LAYERS)
		return sw_fail(err, SW_EFORMAT, "field 'vision_feature_layer' has %d layers, not 1 to %d",
		               v->n_feature_layers, SW_MAX_FEATURE_LAYERS);
	for (int i = 0; i < v->n_feature_layers; i++) {
		int l = v->feature_layers[i];
		if (l < -(v->num_hidden_layers + 1) || l > v->num_hidden_layers)
			return sw_fail(err, SW_EFORMAT,
			               "field 'vision_feature_layer' is %d; the tower has hidden states 0 to %d", l,
			               v->num_hidden_layers);
	}
	return 0;
}

static int parse_llava_(cfg_ctx_ *x, sw_model_config *c)
{
	yyjson_val *root = x->root, *tc = yyjson_obj_get(root, "text_config"),
		   *vc = yyjson_obj_get(root, "vision_config");
	if (!tc || !yyjson_is_obj(tc))
		return bad_(x, "field '%s' is %s", "text_config", tc ? "not an object" : "missing");
	if (!vc || !yyjson_is_obj(vc))
		return bad_(x, "field '%s' is %s", "vision_config", vc ? "not an object" : "missing");
	char tpath[300], vpath[300];
	snprintf(tpath, sizeof tpath, "%.280s: text_config", x->path);
	snprintf(vpath, sizeof vpath, "%.280s: vision_config", x->path);
	cfg_ctx_ xt = { tpath, tc, x->err }, xv = { vpath, vc, x->err };
	int rc;
	if ((rc = parse_config_(&xt, c, true)))
		return rc;
	/* a tie in the outer config wins, as LlavaConfig passes it down */
	if ((rc = get_bool_(x, "tie_word_embeddings", &c->tie_word_embeddings)))
		return rc;
	sw_vision_config *v = &c->vision;
	if ((rc = parse_vision_(&xv, v)))
		return rc;
	/* LlavaConfig's defaults for what transformers 4 left out */
	v->image_token_id = 32000;
	v->feature_layers[0] = -2, v->n_feature_layers = 1;
	v->select_full = false;
	snprintf(v->projector_hidden_act, sizeof v->projector_hidden_act, "gelu");
	v->projector_bias = true;
	v->image_seq_length = 576;
	if (yyjson_obj_get(root, "image_token_index") && yyjson_obj_get(root, "image_token_id"))
		return bad_(x, "fields '%s' and %s both given", "image_token_index", "'image_token_id'");
	if ((rc = get_int_(x, "image_token_index", 0, MAX_VOCAB - 1, &v->image_token_id)) ||
	    (rc = get_int_(x, "image_token_id", 0, MAX_VOCAB - 1, &v->image_token_id)) ||
	    (rc = get_int_(x, "image_seq_length", 0, INT_MAX, &v->image_seq_length)) ||
	    (rc = get_bool_(x, "multimodal_projector_bias", &v->projector_bias)) ||
	    (rc = get_str_(x, "projector_hidden_act", v->projector_hidden_act, sizeof v->projector_hidden_act,
	                   acts_)))
		return rc;
	char strat[16] = "default";
	static const char *const strats[] = { "default", "full", NULL };
	if ((rc = get_str_(x, "vision_feature_select_strategy", strat, sizeof strat, strats)))
		return rc;
	v->select_full = !strcmp(strat, "full");
	yyjson_val *fl = yyjson_obj_get(root, "vision_feature_layer");
	if (fl && yyjson_is_arr(fl)) {
		size_t i, n;
		yyjson_val *e;
		if (yyjson_arr_size(fl) < 1 || yyjson_arr_size(fl) > SW_MAX_FEATURE_LAYERS)
			return bad_(x, "field '%s' has %s", "vision_feature_layer", "not 1 to 8 layers");
		v->n_feature_layers = 0;
		yyjson_arr_foreach(fl, i, n, e) {
			/* a non-negative integer is yyjson's uint, a negative one its sint */
			if (!yyjson_is_int(e) || (yyjson_is_uint(e) ? yyjson_get_uint(e) > MAX_LAYERS
			                                             : yyjson_get_sint(e) < -MAX_LAYERS))
				return bad_(x, "field '%s' has %s", "vision_feature_layer", "an element that is no layer");
			v->feature_layers[v->n_feature_layers++] = (int)yyjson_get_sint(e);
		}
	} else if ((rc = get_int_(x, "vision_feature_layer", -MAX_LAYERS, MAX_LAYERS, &v->feature_layers[0]))) {
		return rc;
	}
	sw_error e2 = { 0 };
	if ((rc = vision_check_(v, c->vocab_size, &e2)))
		return sw_fail(x->err, rc, "%s: %.200s", x->path, e2.msg);
	return 0;
}

int sw_model_config_check(const sw_model_config *c, sw_error *err)
{
#define RANGE_(f, lo, hi)                                                                      \
	if (c->f < (lo) || c->f > (hi))                                                        \
		return sw_fail(err, SW_EFORMAT, "field '" #f "' is %d, not from %d to %d", c->f, \
		               (int)(lo), (int)(hi));
	RANGE_(vocab_size, 1, MAX_VOCAB)
	RANGE_(hidden_size, 1, MAX_HIDDEN)
	RANGE_(intermediate_size, 1, MAX_INTER)
	RANGE_(num_hidden_layers, 1, MAX_LAYERS)
	RANGE_(num_attention_heads, 1, MAX_HEADS)
	RANGE_(num_key_value_heads, 1, MAX_HEADS)
	RANGE_(head_dim, 1, MAX_HEAD_DIM)
	RANGE_(max_position_embeddings, 1, INT_MAX)
	RANGE_(n_eos, 0, SW_MAX_EOS)
#undef RANGE_
	if (c->num_attention_heads % c->num_key_value_heads)
		return sw_fail(err, SW_EFORMAT,
		               "field 'num_attention_heads' (%d) is not a multiple of 'num_key_value_heads' (%d)",
		               c->num_attention_heads, c->num_key_value_heads);
	if (c->head_dim % 2)
		return sw_fail(err, SW_EFORMAT, "field 'head_dim' is %d; rotary embeddings need it even",
		               c->head_dim);
	if ((size_t)c->num_attention_heads * (size_t)c->head_dim > MAX_HIDDEN * 4u)
		return sw_fail(err, SW_EFORMAT, "num_attention_heads * head_dim is %zu, too large",
		               (size_t)c->num_attention_heads * (size_t)c->head_dim);
	if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
		return sw_fail(err, SW_EFORMAT, "field 'rms_norm_eps' is not a positive number");
	if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
		return sw_fail(err, SW_EFORMAT, "field 'rope_theta' is not a positive number");
	if (c->bos_token_id >= c->vocab_size)
		return sw_fail(err, SW_EFORMAT, "field 'bos_token_id' is %d, past the vocabulary of %d",
		               c->bos_token_id, c->vocab_size);
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_token_ids[i] < 0 || c->eos_token_ids[i] >= c->vocab_size)
			return sw_fail(err, SW_EFORMAT, "field 'eos_token_id' has %d, past the vocabulary of %d",
			               c->eos_token_ids[i], c->vocab_size);
	const sw_vision_config *v = &c->vision;
	if (v->model_type[0]) {
		if (strcmp(v->model_type, "clip_vision_model") && strcmp(v->model_type, "siglip_vision_model"))
			return sw_fail(err, SW_EFORMAT, "vision_config: model_type '%.31s' is not supported",
			               v->model_type);
#define VRANGE_(f, lo, hi)                                                                       \
	if (v->f < (lo) || v->f > (hi))                                                          \
		return sw_fail(err, SW_EFORMAT, "vision_config: field '" #f "' is %d, not from %d to %d", \
		               v->f, (int)(lo), (int)(hi));
		VRANGE_(hidden_size, 1, MAX_HIDDEN)
		VRANGE_(intermediate_size, 1, MAX_INTER)
		VRANGE_(num_hidden_layers, 1, MAX_LAYERS)
		VRANGE_(num_attention_heads, 1, MAX_HEADS)
		VRANGE_(num_channels, 1, 16)
		VRANGE_(image_size, 1, 1 << 14)
		VRANGE_(patch_size, 1, 1 << 14)
#undef VRANGE_
		if (!(v->layer_norm_eps > 0) || !isfinite(v->layer_norm_eps))
			return sw_fail(err, SW_EFORMAT, "vision_config: field 'layer_norm_eps' is not a positive number");
		if (sw_act_code(v->hidden_act) < 0 || sw_act_code(v->projector_hidden_act) < 0)
			return sw_fail(err, SW_EFORMAT, "an activation '%.23s' or '%.23s' that is not supported",
			               v->hidden_act, v->projector_hidden_act);
		return vision_check_(v, c->vocab_size, err);
	}
	return 0;
}

int sw_model_config_load(const char *path, sw_model_config *c, sw_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		sw_fail(err, SW_EIO, "%s: cannot open: %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	sw_buf b = { 0 };
	char chunk[65536];
	size_t n;
	int rc = 0;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if (b.len + n > MAX_CONFIG_BYTES) {
			rc = sw_fail(err, SW_ETOOBIG, "%s: larger than %d MB; not a config.json", path,
			             MAX_CONFIG_BYTES >> 20);
			break;
		}
		if (sw_buf_put(&b, chunk, n)) {
			rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
			break;
		}
	}
	if (!rc && ferror(f)) {
		int e = errno;
		rc = sw_fail(err, SW_EIO, "%s: read error: %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
	}
	fclose(f);
	if (rc) {
		sw_buf_release(&b);
		return rc;
	}
	rc = sw_model_config_parse((const char *)b.p, b.len, path, c, err);
	sw_buf_release(&b);
	return rc;
}

int sw_model_config_parse(const char *text, size_t len, const char *path, sw_model_config *c, sw_error *err)
{
	yyjson_read_err je;
	yyjson_doc *doc = yyjson_read_opts((char *)text, len, YYJSON_READ_NOFLAG, NULL, &je);
	if (!doc) {
		size_t line = 1, col = 1;
		for (size_t i = 0; i < je.pos && i < len; i++, col++)
			if (text[i] == '\n')
				line++, col = 0;
		return sw_fail(err, SW_EFORMAT, "%s: line %zu, column %zu: %s", path, line, col,
		               len ? je.msg : "empty file");
	}
	int rc = sw_json_refuse_twins(yyjson_doc_get_root(doc), path, err);
	if (rc) {
		yyjson_doc_free(doc);
		return rc;
	}
	cfg_ctx_ x = { path, yyjson_doc_get_root(doc), err };
	yyjson_val *mt = yyjson_is_obj(x.root) ? yyjson_obj_get(x.root, "model_type") : NULL;
	if (!yyjson_is_obj(x.root))
		rc = bad_(&x, "%s is %s, not an object", "the document", yyjson_get_type_desc(x.root));
	else if (mt && yyjson_is_str(mt) && !strcmp(yyjson_get_str(mt), "llava"))
		rc = parse_llava_(&x, c);
	else
		rc = parse_config_(&x, c, false);
	yyjson_doc_free(doc);
	return rc;
}

/* ---- writing it ---- */

void sw_fmt_float(char *buf, size_t size, float x)
{
	if (x == floorf(x) && fabsf(x) < 1e15f) {
		snprintf(buf, size, "%.1f", (double)x); /* 500000.0 as Python writes it, not 5e+05 */
		return;
	}
	for (int p = 1; p <= 9; p++) {
		snprintf(buf, size, "%.*g", p, (double)x);
		if (strtof(buf, NULL) == x)
			break;
	}
	if (!strpbrk(buf, ".eEn"))
		strncat(buf, ".0", size - strlen(buf) - 1);
}

int sw_model_config_write(const sw_model_config *c, const char *path, const char *torch_dtype,
                           sw_error *err)
{
	sw_buf b = { 0 };
	int rc = sw_model_config_text(c, path, torch_dtype, &b, err);
	sw_afile f;
	if (!rc && ((rc = sw_afile_open(&f, path, err)) || (rc = sw_afile_write(&f, b.p, b.len, err)) ||
	            (rc = sw_afile_commit(&f, err))))
		sw_afile_abort(&f);
	sw_buf_release(&b);
	return rc;
}

static int text_config_text_(const sw_model_config *c, const char *path, const char *torch_dtype, sw_buf *b,
                             sw_error *err);

/* A float as JSON: the shortest decimal that reads back as x (sw_fmt_float), raw. */
static yyjson_mut_val *jfloat_(yyjson_mut_doc *d, float x)
{
	char t[64];
	sw_fmt_float(t, sizeof t, x);
	return yyjson_mut_rawcpy(d, t);
}

/*
 * A LLaVA config.json as transformers 5 writes LlavaForConditionalGeneration's:
 * the text model's config.json as text_config, vision_config, the wiring; keys sorted.
 */
static int llava_config_text_(const sw_model_config *c, const char *path, const char *torch_dtype, sw_buf *b,
                              sw_error *err)
{
	sw_model_config tc = *c;
	memset(&tc.vision, 0, sizeof tc.vision);
	sw_buf tb = { 0 };
	int rc = text_config_text_(&tc, path, NULL, &tb, err);
	if (rc) {
		sw_buf_release(&tb);
		return rc;
	}
	yyjson_doc *td = yyjson_read((const char *)tb.p, tb.len, 0);
	sw_buf_release(&tb);
	yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
	const sw_vision_config *v = &c->vision;
	if (!td || !d)
		goto oom;
	yyjson_mut_val *r = yyjson_mut_obj(d), *vc = yyjson_mut_obj(d), *arch = yyjson_mut_arr(d);
	yyjson_mut_val *text = yyjson_val_mut_copy(d, yyjson_doc_get_root(td));
	if (!r || !vc || !arch || !text)
		goto oom;
	yyjson_mut_obj_remove_key(text, "architectures");
	yyjson_mut_doc_set_root(d, r);
	yyjson_mut_arr_add_str(d, arch, "LlavaForConditionalGeneration");
	bool ok = yyjson_mut_obj_add_val(d, r, "architectures", arch);
	if (torch_dtype)
		ok = ok && yyjson_mut_obj_add_str(d, r, "dtype", torch_dtype);
	ok = ok && yyjson_mut_obj_add_int(d, r, "image_seq_length", v->image_seq_length) &&
	     yyjson_mut_obj_add_int(d, r, "image_token_index", v->image_token_id) &&
	     yyjson_mut_obj_add_str(d, r, "model_type", "llava") &&
	     yyjson_mut_obj_add_bool(d, r, "multimodal_projector_bias", v->projector_bias) &&
	     yyjson_mut_obj_add_str(d, r, "projector_hidden_act", v->projector_hidden_act) &&
	     yyjson_mut_obj_add_val(d, r, "text_config", text) &&
	     yyjson_mut_obj_add_bool(d, r, "tie_word_embeddings", c->tie_word_embeddings);
	bool clip = !strcmp(v->model_type, "clip_vision_model");
	ok = ok && yyjson_mut_obj_add_real(d, vc, "attention_dropout", 0.0) &&
	     yyjson_mut_obj_add_str(d, vc, "hidden_act", v->hidden_act) &&
	     yyjson_mut_obj_add_int(d, vc, "hidden_size", v->hidden_size) &&
	     yyjson_mut_obj_add_int(d, vc, "image_size", v->image_size) &&
	     yyjson_mut_obj_add_int(d, vc, "intermediate_size", v->intermediate_size) &&
	     yyjson_mut_obj_add_val(d, vc, "layer_norm_eps", jfloat_(d, v->layer_norm_eps)) &&
	     yyjson_mut_obj_add_str(d, vc, "model_type", v->model_type) &&
	     yyjson_mut_obj_add_int(d, vc, "num_attention_heads", v->num_attention_heads) &&
	     yyjson_mut_obj_add_int(d, vc, "num_channels", v->num_channels) &&
	     yyjson_mut_obj_add_int(d, vc, "num_hidden_layers", v->num_hidden_layers) &&
	     yyjson_mut_obj_add_int(d, vc, "patch_size", v->patch_size);
	if (!clip)
		ok = ok && yyjson_mut_obj_add_bool(d, vc, "vision_use_head", false);
	ok = ok && yyjson_mut_obj_add_val(d, r, "vision_config", vc);
	if (v->n_feature_layers == 1) {
		ok = ok && yyjson_mut_obj_add_int(d, r, "vision_feature_layer", v->feature_layers[0]);
	} else {
		yyjson_mut_val *fl = yyjson_mut_arr_with_sint32(d, v->feature_layers, (size_t)v->n_feature_layers);
		ok = ok && fl && yyjson_mut_obj_add_val(d, r, "vision_feature_layer", fl);
	}
	ok = ok && yyjson_mut_obj_add_str(d, r, "vision_feature_select_strategy", v->select_full ? "full" : "default");
	if (!ok)
		goto oom;
	size_t len;
	char *json = yyjson_mut_write(d, YYJSON_WRITE_PRETTY_TWO_SPACES, &len);
	rc = !json || sw_buf_put(b, json, len) || sw_buf_put(b, "\n", 1);
	free(json);
	yyjson_doc_free(td);
	yyjson_mut_doc_free(d);
	return rc ? sw_fail(err, SW_ENOMEM, "%s: out of memory", path) : 0;
oom:
	yyjson_doc_free(td);
	yyjson_mut_doc_free(d);
	return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
}

int sw_model_config_text(const sw_model_config *c, const char *path, const char *torch_dtype, sw_buf *b,
                          sw_error *err)
{
	int rc;
	sw_error e2 = { 0 };
	if ((rc = sw_model_config_check(c, &e2)))
		return sw_fail(err, rc, "%s: %.200s", path, e2.msg);
	if (c->vision.model_type[0])
		return llava_config_text_(c, path, torch_dtype, b, err);
	return text_config_text_(c, path, torch_dtype, b, err);
}

static int text_config_text_(const sw_model_config *c, const char *path, const char *torch_dtype, sw_buf *b,
                             sw_error *err)
{
	int rc;
	sw_error e2 = { 0 };
	if ((rc = sw_model_config_check(c, &e2)))
		return sw_fail(err, rc, "%s: %.200s", path, e2.msg);
	bool llama = !strcmp(c->model_type, "llama"), qwen2 = !strcmp(c->model_type, "qwen2");
	if (!llama && !qwen2 && strcmp(c->model_type, "qwen3"))
		return sw_fail(err, SW_EINVAL, "%s: model_type '%s' is not llama, qwen2 or qwen3", path,
		               c->model_type);
	if (llama + qwen2 == 0 && c->attention_bias)
		return sw_fail(err, SW_EINVAL, "%s: qwen3 with attention biases is not supported", path);
	char t[64], line[256];
#define PUT_(...)                                                  \
	do {                                                       \
		snprintf(line, sizeof line, __VA_ARGS__);          \
		if (sw_buf_put(b, line, strlen(line)))             \
			goto oom;                                  \
	} while (0)
	const char *arch = llama ? "LlamaForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
	/* keys in sorted order, as transformers writes them */
	PUT_("{\n  \"architectures\": [\n    \"%s\"\n  ],\n", arch);
	if (!qwen2)
		PUT_("  \"attention_bias\": false,\n");
	PUT_("  \"attention_dropout\": 0.0,\n");
	if (c->bos_token_id >= 0)
		PUT_("  \"bos_token_id\": %d,\n", c->bos_token_id);
	else
		PUT_("  \"bos_token_id\": null,\n");
	if (c->n_eos == 0)
		PUT_("  \"eos_token_id\": null,\n");
	else if (c->n_eos == 1)
		PUT_("  \"eos_token_id\": %d,\n", c->eos_token_ids[0]);
	else {
		PUT_("  \"eos_token_id\": [");
		for (int i = 0; i < c->n_eos; i++)
			PUT_("%s%d", i ? ", " : "", c->eos_token_ids[i]);
		PUT_("],\n");
	}
	PUT_("  \"head_dim\": %d,\n", c->head_dim);
	PUT_("  \"hidden_act\": \"silu\",\n");
	PUT_("  \"hidden_size\": %d,\n", c->hidden_size);
	PUT_("  \"initializer_range\": 0.02,\n");
	PUT_("  \"intermediate_size\": %d,\n", c->intermediate_size);
	PUT_("  \"max_position_embeddings\": %d,\n", c->max_position_embeddings);
	if (llama)
		PUT_("  \"mlp_bias\": false,\n");
	PUT_("  \"model_type\": \"%s\",\n", c->model_type);
	PUT_("  \"num_attention_heads\": %d,\n", c->num_attention_heads);
	PUT_("  \"num_hidden_layers\": %d,\n", c->num_hidden_layers);
	PUT_("  \"num_key_value_heads\": %d,\n", c->num_key_value_heads);
	sw_fmt_float(t, sizeof t, c->rms_norm_eps);
	PUT_("  \"rms_norm_eps\": %s,\n", t);
	if (c->rope_factor > 0) {
		sw_fmt_float(t, sizeof t, c->rope_factor);
		PUT_("  \"rope_scaling\": {\n    \"factor\": %s,\n", t);
		sw_fmt_float(t, sizeof t, c->rope_high_freq_factor);
		PUT_("    \"high_freq_factor\": %s,\n", t);
		sw_fmt_float(t, sizeof t, c->rope_low_freq_factor);
		PUT_("    \"low_freq_factor\": %s,\n", t);
		PUT_("    \"original_max_position_embeddings\": %d,\n", c->rope_original_max_position);
		PUT_("    \"rope_type\": \"llama3\"\n  },\n");
	} else {
		PUT_("  \"rope_scaling\": null,\n");
	}
	sw_fmt_float(t, sizeof t, c->rope_theta);
	PUT_("  \"rope_theta\": %s,\n", t);
	PUT_("  \"tie_word_embeddings\": %s,\n", c->tie_word_embeddings ? "true" : "false");
	if (torch_dtype)
		PUT_("  \"torch_dtype\": \"%s\",\n", torch_dtype);
	PUT_("  \"use_cache\": true,\n");
	if (!llama)
		PUT_("  \"use_sliding_window\": false,\n");
	PUT_("  \"vocab_size\": %d\n}\n", c->vocab_size);
#undef PUT_
	return 0;
oom:
	return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
}

int sw_model_config_save(const sw_model_config *c, const char *path, sw_error *err)
{
	return sw_model_config_write(c, path, NULL, err);
}

int sw_model_image_tokens(const sw_model_config *c)
{
	const sw_vision_config *v = &c->vision;
	if (!v->model_type[0] || v->patch_size < 1)
		return 0;
	int side = v->image_size / v->patch_size, L = side * side + (!strcmp(v->model_type, "clip_vision_model") ? 1 : 0);
	return v->select_full ? L : L - 1;
}

/* ---- a LLaVA directory's other files ---- */

/* Read dir/name as a mutable JSON document (NULL with err filled). */
static yyjson_mut_doc *read_mut_(const char *path, sw_error *err)
{
	yyjson_read_err je;
	yyjson_doc *d = yyjson_read_file(path, 0, NULL, &je);
	if (!d) {
		sw_fail(err, SW_EFORMAT, "%s: %s", path, je.msg);
		return NULL;
	}
	yyjson_mut_doc *m = yyjson_doc_mut_copy(d, NULL);
	yyjson_doc_free(d);
	if (!m)
		sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	return m;
}

/* Write a JSON document to path atomically (pretty, two spaces, as transformers). */
static int write_mut_(yyjson_mut_doc *d, const char *path, sw_error *err)
{
	size_t len;
	char *json = yyjson_mut_write(d, YYJSON_WRITE_PRETTY_TWO_SPACES | YYJSON_WRITE_NEWLINE_AT_END, &len);
	if (!json)
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	sw_afile f;
	int rc;
	if ((rc = sw_afile_open(&f, path, err)) || (rc = sw_afile_write(&f, json, len, err)) ||
	    (rc = sw_afile_commit(&f, err)))
		sw_afile_abort(&f);
	free(json);
	return rc;
}

int sw_model_save_vision_files(const sw_model_config *c, const char *dir, const char *image_token,
                               sw_error *err)
{
	const sw_vision_config *v = &c->vision;
	if (!v->model_type[0])
		return sw_fail(err, SW_EINVAL, "%s: not a LLaVA model", dir);
	if (strcmp(v->model_type, "clip_vision_model"))
		return sw_fail(err, SW_EINVAL, "%s: only a CLIP tower's image processor is written", dir);
	char path[4200];
	int rc = 0;
	/* tokenizer.json: the image token, added at its id (the next one) */
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	yyjson_mut_doc *d = read_mut_(path, err);
	if (!d)
		return err ? err->code : SW_EFORMAT;
	yyjson_mut_val *added = yyjson_mut_obj_get(yyjson_mut_doc_get_root(d), "added_tokens");
	size_t i, n;
	yyjson_mut_val *e;
	int64_t next = -1;
	yyjson_mut_arr_foreach(added, i, n, e) {
		int64_t id = yyjson_mut_get_sint(yyjson_mut_obj_get(e, "id"));
		next = id > next ? id : next;
	}
	if (!yyjson_mut_is_arr(added) || next + 1 != v->image_token_id) {
		yyjson_mut_doc_free(d);
		return sw_fail(err, SW_EINVAL, "%s: the image token's id %d is not the tokenizer's next (%lld)", path,
		               v->image_token_id, (long long)next + 1);
	}
	yyjson_mut_val *t = yyjson_mut_arr_add_obj(d, added);
	bool ok = t && yyjson_mut_obj_add_int(d, t, "id", v->image_token_id) &&
	          yyjson_mut_obj_add_strcpy(d, t, "content", image_token) &&
	          yyjson_mut_obj_add_bool(d, t, "single_word", false) && yyjson_mut_obj_add_bool(d, t, "lstrip", false) &&
	          yyjson_mut_obj_add_bool(d, t, "rstrip", false) && yyjson_mut_obj_add_bool(d, t, "normalized", false) &&
	          yyjson_mut_obj_add_bool(d, t, "special", true);
	rc = ok ? write_mut_(d, path, err) : sw_fail(err, SW_ENOMEM, "out of memory");
	yyjson_mut_doc_free(d);
	if (rc)
		return rc;
	/* tokenizer_config.json: where transformers finds it (extra_special_tokens) */
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	if (!(d = read_mut_(path, err)))
		return err ? err->code : SW_EFORMAT;
	yyjson_mut_val *x = yyjson_mut_obj(d);
	ok = x && yyjson_mut_obj_add_strcpy(d, x, "image_token", image_token) &&
	     yyjson_mut_obj_add_val(d, yyjson_mut_doc_get_root(d), "extra_special_tokens", x);
	rc = ok ? write_mut_(d, path, err) : sw_fail(err, SW_ENOMEM, "out of memory");
	yyjson_mut_doc_free(d);
	if (rc)
		return rc;
	/* preprocessor_config.json: CLIPImageProcessor at the tower's size, as transformers writes it */
	if ((rc = sw_image_proc_write_clip(dir, v->image_size, err)))
		return rc;
	/* processor_config.json: LlavaProcessor's expansion of <image> */
	d = yyjson_mut_doc_new(NULL);
	yyjson_mut_val *r = d ? yyjson_mut_obj(d) : NULL;
	ok = r != NULL;
	if (ok) {
		yyjson_mut_doc_set_root(d, r);
		ok = yyjson_mut_obj_add_strcpy(d, r, "image_token", image_token) &&
		     yyjson_mut_obj_add_int(d, r, "num_additional_image_tokens", 1) &&
		     yyjson_mut_obj_add_int(d, r, "patch_size", v->patch_size) &&
		     yyjson_mut_obj_add_str(d, r, "processor_class", "LlavaProcessor") &&
		     yyjson_mut_obj_add_str(d, r, "vision_feature_select_strategy", v->select_full ? "full" : "default");
	}
	snprintf(path, sizeof path, "%s/processor_config.json", dir);
	rc = ok ? write_mut_(d, path, err) : sw_fail(err, SW_ENOMEM, "out of memory");
	yyjson_mut_doc_free(d);
	return rc;
}

/* ---- the arena ---- */

/* Walk the tensors in arena order: fill t (when not NULL) and the model's pointers. */
static size_t layout_(const sw_model_config *c, sw_model *m, sw_tensor *t)
{
	size_t off = 0, nt = 0;
	const size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)c->intermediate_size;
	const size_t Q = (size_t)c->num_attention_heads * (size_t)c->head_dim;
	const size_t KV = (size_t)c->num_key_value_heads * (size_t)c->head_dim;
	const size_t D = (size_t)c->head_dim;
#define ADD_(ptr, r, cols, ...)                                                          \
	do {                                                                             \
		if (t) {                                                                 \
			sw_tensor *x_ = &t[nt];                                          \
			snprintf(x_->name, sizeof x_->name, __VA_ARGS__);                \
			x_->ndim = (cols) ? 2 : 1;                                       \
			x_->shape[0] = (int64_t)(r);                                     \
			x_->shape[1] = (cols) ? (int64_t)(cols) : 0;                     \
			x_->numel = (size_t)(r) * ((cols) ? (size_t)(cols) : 1);         \
			x_->offset = off;                                                \
			x_->data = m->arena ? m->arena + off : NULL;                     \
			ptr = x_->data;                                                  \
		}                                                                        \
		off += (size_t)(r) * ((cols) ? (size_t)(cols) : 1);                      \
		nt++;                                                                    \
	} while (0)
	ADD_(m->embed, V, H, "model.embed_tokens.weight");
	for (int l = 0; l < c->num_hidden_layers; l++) {
		sw_layer *y = t ? &m->layers[l] : NULL; /* used only when t is */
		const char *p = "model.layers";
		ADD_(y->attn_norm, H, 0, "%s.%d.input_layernorm.weight", p, l);
		ADD_(y->wq, Q, H, "%s.%d.self_attn.q_proj.weight", p, l);
		if (c->attention_bias)
			ADD_(y->bq, Q, 0, "%s.%d.self_attn.q_proj.bias", p, l);
		ADD_(y->wk, KV, H, "%s.%d.self_attn.k_proj.weight", p, l);
		if (c->attention_bias)
			ADD_(y->bk, KV, 0, "%s.%d.self_attn.k_proj.bias", p, l);
		ADD_(y->wv, KV, H, "%s.%d.self_attn.v_proj.weight", p, l);
		if (c->attention_bias)
			ADD_(y->bv, KV, 0, "%s.%d.self_attn.v_proj.bias", p, l);
		if (c->qk_norm) {
			ADD_(y->q_norm, D, 0, "%s.%d.self_attn.q_norm.weight", p, l);
			ADD_(y->k_norm, D, 0, "%s.%d.self_attn.k_norm.weight", p, l);
		}
		ADD_(y->wo, H, Q, "%s.%d.self_attn.o_proj.weight", p, l);
		ADD_(y->mlp_norm, H, 0, "%s.%d.post_attention_layernorm.weight", p, l);
		ADD_(y->w_gate, I, H, "%s.%d.mlp.gate_proj.weight", p, l);
		ADD_(y->w_up, I, H, "%s.%d.mlp.up_proj.weight", p, l);
		ADD_(y->w_down, H, I, "%s.%d.mlp.down_proj.weight", p, l);
	}
	ADD_(m->final_norm, H, 0, "model.norm.weight");
	if (!c->tie_word_embeddings)
		ADD_(m->lm_head, V, H, "lm_head.weight");
	else if (t)
		m->lm_head = m->embed;

	/* A LLaVA model's tower and projector, after the language model. */
	const sw_vision_config *v = &c->vision;
	if (v->model_type[0]) {
		bool clip = !strcmp(v->model_type, "clip_vision_model");
		sw_vision_weights *w = t ? &m->vision : NULL; /* used only when t is */
		const size_t VH = (size_t)v->hidden_size, VI = (size_t)v->intermediate_size;
		const size_t side = (size_t)(v->image_size / v->patch_size), np = side * side + (clip ? 1 : 0);
		const size_t pp = (size_t)v->num_channels * v->patch_size * v->patch_size;
		const char *p = "vision_tower";
		if (clip)
			ADD_(w->class_embedding, VH, 0, "%s.embeddings.class_embedding", p);
		ADD_(w->patch_w, VH, pp, "%s.embeddings.patch_embedding.weight", p);
		if (t) { /* a conv's weight: [out, channels, p, p] */
			t[nt - 1].ndim = 4;
			t[nt - 1].shape[1] = v->num_channels;
			t[nt - 1].shape[2] = t[nt - 1].shape[3] = v->patch_size;
		}
		if (!clip)
			ADD_(w->patch_b, VH, 0, "%s.embeddings.patch_embedding.bias", p);
		ADD_(w->pos, np, VH, "%s.embeddings.position_embedding.weight", p);
		if (clip) {
			ADD_(w->pre_w, VH, 0, "%s.pre_layrnorm.weight", p);
			ADD_(w->pre_b, VH, 0, "%s.pre_layrnorm.bias", p);
		}
		for (int l = 0; l < v->num_hidden_layers; l++) {
			sw_vision_layer *y = t ? &m->vision.layers[l] : NULL;
			const char *q = "vision_tower.encoder.layers";
			ADD_(y->ln1_w, VH, 0, "%s.%d.layer_norm1.weight", q, l);
			ADD_(y->ln1_b, VH, 0, "%s.%d.layer_norm1.bias", q, l);
			ADD_(y->wq, VH, VH, "%s.%d.self_attn.q_proj.weight", q, l);
			ADD_(y->bq, VH, 0, "%s.%d.self_attn.q_proj.bias", q, l);
			ADD_(y->wk, VH, VH, "%s.%d.self_attn.k_proj.weight", q, l);
			ADD_(y->bk, VH, 0, "%s.%d.self_attn.k_proj.bias", q, l);
			ADD_(y->wv, VH, VH, "%s.%d.self_attn.v_proj.weight", q, l);
			ADD_(y->bv, VH, 0, "%s.%d.self_attn.v_proj.bias", q, l);
			ADD_(y->wo, VH, VH, "%s.%d.self_attn.out_proj.weight", q, l);
			ADD_(y->bo, VH, 0, "%s.%d.self_attn.out_proj.bias", q, l);
			ADD_(y->ln2_w, VH, 0, "%s.%d.layer_norm2.weight", q, l);
			ADD_(y->ln2_b, VH, 0, "%s.%d.layer_norm2.bias", q, l);
			ADD_(y->fc1_w, VI, VH, "%s.%d.mlp.fc1.weight", q, l);
			ADD_(y->fc1_b, VI, 0, "%s.%d.mlp.fc1.bias", q, l);
			ADD_(y->fc2_w, VH, VI, "%s.%d.mlp.fc2.weight", q, l);
			ADD_(y->fc2_b, VH, 0, "%s.%d.mlp.fc2.bias", q, l);
		}
		ADD_(w->post_w, VH, 0, "%s.post_layernorm.weight", p);
		ADD_(w->post_b, VH, 0, "%s.post_layernorm.bias", p);
		const char *j = "multi_modal_projector";
		const size_t FIN = VH * (size_t)v->n_feature_layers;
		ADD_(w->proj1_w, H, FIN, "%s.linear_1.weight", j);
		if (v->projector_bias)
			ADD_(w->proj1_b, H, 0, "%s.linear_1.bias", j);
		ADD_(w->proj2_w, H, H, "%s.linear_2.weight", j);
		if (v->projector_bias)
			ADD_(w->proj2_b, H, 0, "%s.linear_2.bias", j);
	}
#undef ADD_
	if (m)
		m->ntensors = nt;
	return off;
}

size_t sw_model_config_nparams(const sw_model_config *c)
{
	if (sw_model_config_check(c, NULL))
		return 0;
	return layout_(c, NULL, NULL);
}

static sw_model *make_(const sw_backend *be, const sw_model_config *c, float *arena, bool own,
                       bool zero, sw_error *err)
{
	int rc = sw_model_config_check(c, err);
	if (rc)
		return NULL;
	if (!be)
		be = sw_backend_cpu();
	sw_model *m = calloc(1, sizeof *m);
	if (!m) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	m->cfg = *c;
	m->backend = be;
	m->nparams = layout_(c, NULL, NULL);
	m->ntensors = 0;
	layout_(c, m, NULL); /* counts the tensors */
	size_t nt = m->ntensors, bytes = m->nparams * sizeof(float);
	m->tensors = calloc(nt, sizeof *m->tensors);
	m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
	if (c->vision.model_type[0] &&
	    !(m->vision.layers = calloc((size_t)c->vision.num_hidden_layers, sizeof *m->vision.layers)))
		goto oom;
	if (!m->tensors || !m->layers)
		goto oom;
	if (own) {
		if (!(arena = be->alloc(bytes, err))) {
			sw_model_free(m);
			return NULL;
		}
		m->arena = arena;
		m->owns_arena = true;
		if (zero && be->memset(arena, 0, bytes, err)) {
			sw_model_free(m);
			return NULL;
		}
	} else {
		/* host memory lent to the backend (the identity on the CPU) */
		if (!(m->arena = be->borrow(arena, bytes, err))) {
			sw_model_free(m);
			return NULL;
		}
	}
	layout_(c, m, m->tensors);
	return m;
oom:
	sw_fail(err, SW_ENOMEM, "out of memory for a model of %zu parameters", m->nparams);
	sw_model_free(m);
	return NULL;
}

sw_model *sw_model_view_on(const sw_backend *be, const sw_model_config *c, float *arena,
                           sw_error *err)
{
	if (!arena) {
		sw_fail(err, SW_EINVAL, "no arena to view");
		return NULL;
	}
	return make_(be, c, arena, false, false, err);
}

sw_model *sw_model_view(const sw_model_config *c, float *arena, sw_error *err)
{
	return sw_model_view_on(NULL, c, arena, err);
}

sw_model *sw_model_new_on(const sw_backend *be, const sw_model_config *c, sw_error *err)
{
	return make_(be, c, NULL, true, true, err);
}

sw_model *sw_model_new(const sw_model_config *c, sw_error *err)
{
	return make_(NULL, c, NULL, true, true, err);
}

sw_model *sw_model_new_uninit(const sw_backend *be, const sw_model_config *c, sw_error *err)
{
	return make_(be, c, NULL, true, false, err);
}

void sw_model_free(sw_model *m)
{
	if (!m)
		return;
	if (m->arena && m->owns_arena)
		m->backend->free(m->arena);
	else if (m->arena)
		m->backend->unborrow(m->arena);
	free(m->tensors);
	free(m->layers);
	free(m->vision.layers);
	free(m);
}

size_t sw_model_max_numel(const sw_model *m)
{
	size_t most = 0;
	for (size_t i = 0; i < m->ntensors; i++)
		most = m->tensors[i].numel > most ? m->tensors[i].numel : most;
	return most;
}

static int same_shape_(const sw_model *a, const sw_model *b, sw_error *err)
{
	if (!a || !b || a->nparams != b->nparams || a->ntensors != b->ntensors)
		return sw_fail(err, SW_EINVAL, "the two models do not have the same parameters");
	return SW_OK;
}

int sw_model_zero(sw_model *m, sw_error *err)
{
	if (!m)
		return sw_fail(err, SW_EINVAL, "no model");
	return m->backend->memset(m->arena, 0, m->nparams * sizeof(float), err);
}

int sw_model_read(const sw_model *m, float *host, sw_error *err)
{
	if (!m || !host)
		return sw_fail(err, SW_EINVAL, "no model or buffer");
	return m->backend->download(host, m->arena, m->nparams * sizeof(float), err);
}

int sw_model_write(sw_model *m, const float *host, sw_error *err)
{
	if (!m || !host)
		return sw_fail(err, SW_EINVAL, "no model or buffer");
	return m->backend->upload(m->arena, host, m->nparams * sizeof(float), err);
}

int sw_model_copy(sw_model *dst, const sw_model *src, sw_error *err)
{
	int rc = same_shape_(dst, src, err);
	if (rc)
		return rc;
	size_t bytes = src->nparams * sizeof(float);
	if (dst->backend == src->backend)
		return src->backend->copy(dst->arena, src->arena, bytes, err);
	/* between backends, through the host: in place where one side is host memory */
	const float *sv = src->backend->host_view(src->arena);
	float *dv = (float *)dst->backend->host_view(dst->arena), *h = NULL;
	if (sv)
		return sw_model_write(dst, sv, err);
	if (dv)
		return sw_model_read(src, dv, err);
	if (!(h = malloc(bytes + 1)))
		return sw_fail(err, SW_ENOMEM, "out of memory for a host copy of %zu parameters", src->nparams);
	rc = sw_model_read(src, h, err);
	rc = rc ? rc : sw_model_write(dst, h, err);
	free(h);
	return rc;
}

const sw_tensor *sw_model_tensor(const sw_model *m, const char *name)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (!strcmp(m->tensors[i].name, name))
			return &m->tensors[i];
	return NULL;
}

/* ---- random initialisation ---- */

static bool ends_with_(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

#define CHUNK_ 4096 /* each chunk its own stream, so threads do not change the numbers */

/* Tensor i of the arena's order into data (host memory). */
static void fill_(const sw_tensor *t, size_t i, float *data, uint64_t seed, float std)
{
	if (ends_with_(t->name, "norm.weight") || ends_with_(t->name, "norm1.weight") ||
	    ends_with_(t->name, "norm2.weight")) {
		for (size_t j = 0; j < t->numel; j++)
			data[j] = 1.0f;
		return;
	}
	if (ends_with_(t->name, ".bias")) {
		memset(data, 0, t->numel * sizeof(float));
		return;
	}
	size_t nchunks = (t->numel + CHUNK_ - 1) / CHUNK_;
	#pragma omp parallel for schedule(static)
	for (size_t ch = 0; ch < nchunks; ch++) {
		uint64_t s = seed ^ (0x51afd7ed558ccd1dull * (i + 1));
		s = sw_splitmix64(&s) ^ (0xd6e8feb86659fd93ull * (ch + 1));
		size_t lo = ch * CHUNK_, hi = lo + CHUNK_ < t->numel ? lo + CHUNK_ : t->numel;
		for (size_t j = lo; j < hi; j += 2) {
			/* Box-Muller: u1 in (0, 1] so that the log is finite */
			double u1 = ((double)(sw_splitmix64(&s) >> 11) + 1.0) * 0x1p-53;
			double u2 = (double)(sw_splitmix64(&s) >> 11) * 0x1p-53;
			double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
			data[j] = (float)(r * cos(a)) * std;
			if (j + 1 < hi)
				data[j + 1] = (float)(r * sin(a)) * std;
		}
	}
}

int sw_model_init_random(sw_model *m, uint64_t seed, float std)
{
	/* In place where the host reaches the arena; else tensor by tensor
	 * through one host buffer (not a copy of the whole model). */
	const sw_backend *be = m->backend;
	float *direct = (float *)be->host_view(m->arena), *buf = NULL;
	if (!direct && !(buf = malloc(sw_model_max_numel(m) * sizeof(float) + 1)))
		return SW_ENOMEM;
	int rc = SW_OK;
	for (size_t i = 0; i < m->ntensors && !rc; i++) {
		const sw_tensor *t = &m->tensors[i];
		fill_(t, i, direct ? direct + t->offset : buf, seed, std);
		if (!direct)
			rc = be->upload(t->data, buf, t->numel * sizeof(float), NULL);
	}
	free(buf);
	return rc;
}
