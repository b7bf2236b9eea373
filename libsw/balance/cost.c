/*
 * cost.c - the cost model of sw/cost.h: coefficients from a config.json (or
 * the defaults), tokens and media patches from a sample.
 *
 * The decoder's sizes come from sw_model_config_load() for the model types
 * the engine runs (llama, qwen2, qwen3); a multimodal config (qwen2_vl and
 * its kin, with the decoder's sizes at the top level or under text_config)
 * is read here, since only seven sizes and the encoders' matter for a cost.
 * Image and audio sizes come from the record, or from the file's header
 * (PNG, JPEG, WAV) when the item names a path: nothing is guessed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "sw/cost.h"
#include "sw/model.h"
#include "sw/tokenizer.h"

struct sw_cost_model {
	sw_cost_params p;
	sw_tokenizer *tok; /* NULL: no model directory, text is estimated */
};

/* Decoder: N and the attention width of a Llama-family shape. */
static void decoder_(sw_cost_params *p, double hidden, double layers, double inter, double heads, double kv,
                     double head_dim, double vocab)
{
	double attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2; /* q, o; k, v */
	double mlp = 3 * hidden * inter;                                          /* gate, up, down */
	double n = layers * (attn + mlp) + hidden * vocab;                        /* + the output head */
	p->linear = 2 * n;
	p->attention = 2 * layers * heads * head_dim;
}

/* A ViT-style encoder of this depth, width and MLP width: per position and per position^2. */
static void encoder_(double *lin, double *att, double layers, double width, double ffn)
{
	*lin = 2 * layers * (4 * width * width + 2 * width * ffn);
	*att = 4 * layers * width;
}

static void defaults_(sw_cost_params *p)
{
	memset(p, 0, sizeof *p);
	/* Llama-2-7B: hidden 4096, 32 layers, MLP 11008, 32 heads of 128, vocabulary 32000 */
	decoder_(p, 4096, 32, 11008, 32, 32, 128, 32000);
	/* Qwen2-VL's vision tower: 32 layers, width 1280, MLP 5120, 14-pixel patches, 2x2 merge */
	encoder_(&p->enc_linear, &p->enc_attention, 32, 1280, 5120);
	p->patch_size = 14;
	p->merge = 2;
	p->temporal_patch = 2;
	/* Whisper-large's encoder: 32 layers, width 1280, MLP 5120; 100 mel frames a
	 * second, stride 2, pooled 2 more into decoder tokens (as Qwen2-Audio) */
	encoder_(&p->audio_linear, &p->audio_attention, 32, 1280, 5120);
	p->audio_frames_per_s = 100;
	p->audio_stride = 2;
	p->audio_pool = 2;
	p->bytes_per_token = 4;
	p->scale = 1;
}

sw_cost_model *sw_cost_model_new(void)
{
	sw_cost_model *m = calloc(1, sizeof *m);
	if (m)
		defaults_(&m->p);
	return m;
}

static int check_params_(const sw_cost_params *p, sw_error *err)
{
	const double v[] = { p->linear, p->attention, p->enc_linear, p->enc_attention, p->audio_linear,
	                     p->audio_attention, p->audio_frames_per_s, p->bytes_per_token, p->scale };
	for (size_t i = 0; i < sizeof v / sizeof *v; i++)
		if (!isfinite(v[i]) || v[i] < 0)
			return sw_fail(err, SW_EINVAL, "cost coefficient %zu is %g, not a finite number >= 0", i, v[i]);
	if (p->patch_size < 1 || p->merge < 1 || p->temporal_patch < 1 || p->audio_stride < 1 || p->audio_pool < 1 ||
	    p->bytes_per_token <= 0 || p->audio_frames_per_s <= 0 || p->image_tokens < 0)
		return sw_fail(err, SW_EINVAL, "cost sizes must be at least 1");
	return 0;
}

sw_cost_model *sw_cost_model_from(const sw_cost_params *p, sw_error *err)
{
	if (check_params_(p, err))
		return NULL;
	sw_cost_model *m = calloc(1, sizeof *m);
	if (!m) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	m->p = *p;
	return m;
}

void sw_cost_model_free(sw_cost_model *m)
{
	if (!m)
		return;
	sw_tokenizer_free(m->tok);
	free(m);
}

void sw_cost_model_set_train(sw_cost_model *m, int train)
{
	m->p.scale = train ? 3 : 1;
}

int sw_cost_stage_parse(const char *name, int *train)
{
	if (!strcmp(name, "train"))
		*train = 1;
	else if (!strcmp(name, "generate"))
		*train = 0;
	else
		return SW_EINVAL;
	return 0;
}

sw_cost_model *sw_cost_model_for(const char *dir, int train, sw_error *err)
{
	sw_cost_model *m = dir ? sw_cost_model_load(dir, err) : sw_cost_model_new();
	if (m)
		sw_cost_model_set_train(m, train);
	else if (!dir)
		sw_fail(err, SW_ENOMEM, "out of memory");
	return m;
}

void sw_cost_model_params(const sw_cost_model *m, sw_cost_params *p)
{
	*p = m->p;
}

/* ---- config.json ---- */

/* The largest size a config.json field may give: no model's is near it, and
 * every coefficient made of such sizes stays finite. */
#define SIZE_MAX_ 4294967296.0 /* 2^32 */

/* A whole number from 1 to SIZE_MAX_ from obj[key] into *out; 0 when absent, 1 when read, < 0 when bad. */
static int json_size_(yyjson_val *obj, const char *key, double *out, const char *path, sw_error *err)
{
	yyjson_val *v = obj ? yyjson_obj_get(obj, key) : NULL;
	if (!v || yyjson_is_null(v))
		return 0;
	double x;
	if (yyjson_is_uint(v))
		x = (double)yyjson_get_uint(v);
	else if (yyjson_is_real(v) && yyjson_get_real(v) == floor(yyjson_get_real(v)))
		x = yyjson_get_real(v);
	else
		return sw_fail(err, SW_EFORMAT, "%s: field '%s' is not a whole number", path, key);
	if (x < 1 || x > SIZE_MAX_)
		return sw_fail(err, SW_EFORMAT, "%s: field '%s' is %g, not a size from 1 to 2^32", path, key, x);
	*out = x;
	return 1;
}

static int need_(yyjson_val *obj, const char *key, double *out, const char *path, const char *where,
                 sw_error *err)
{
	int rc = json_size_(obj, key, out, path, err);
	if (rc == 0)
		return sw_fail(err, SW_EFORMAT, "%s: %sno field '%s'", path, where, key);
	return rc < 0 ? rc : 0;
}

/* The first of two names that is present (configs name the same size differently). */
static int either_(yyjson_val *obj, const char *a, const char *b, double *out, const char *path, sw_error *err)
{
	int rc = json_size_(obj, a, out, path, err);
	return rc ? rc : json_size_(obj, b, out, path, err);
}

static int read_config_(sw_cost_params *p, const char *path, sw_error *err)
{
	yyjson_read_err je;
	yyjson_doc *doc = yyjson_read_file(path, 0, NULL, &je);
	if (!doc) {
		if (je.code == YYJSON_READ_ERROR_FILE_OPEN)
			return sw_fail(err, SW_EIO, "%s: cannot open", path);
		return sw_fail(err, SW_EFORMAT, "%s: byte %zu: %s", path, je.pos, je.msg);
	}
	yyjson_val *root = yyjson_doc_get_root(doc), *text = root;
	int rc = SW_EFORMAT;
	if (!yyjson_is_obj(root)) {
		sw_fail(err, rc, "%s: not a JSON object", path);
		goto out;
	}
	if ((rc = sw_json_refuse_twins(root, path, err)))
		goto out;
	rc = SW_EFORMAT;
	yyjson_val *tc = yyjson_obj_get(root, "text_config");
	const char *type = yyjson_get_str(yyjson_obj_get(root, "model_type"));
	if (yyjson_is_obj(tc))
		text = tc;
	if (text == root && type && (!strcmp(type, "llama") || !strcmp(type, "qwen2") || !strcmp(type, "qwen3"))) {
		/* what the engine runs: its own reading, defaults and checks */
		sw_model_config c;
		if ((rc = sw_model_config_load(path, &c, err)))
			goto out;
		decoder_(p, c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.num_attention_heads,
		         c.num_key_value_heads, c.head_dim, c.vocab_size);
	} else {
		const char *where = text == root ? "" : "text_config: ";
		double hidden, layers, inter, heads, kv, hd, vocab;
		if ((rc = need_(text, "hidden_size", &hidden, path, where, err)) ||
		    (rc = need_(text, "num_hidden_layers", &layers, path, where, err)) ||
		    (rc = need_(text, "intermediate_size", &inter, path, where, err)) ||
		    (rc = need_(text, "num_attention_heads", &heads, path, where, err)))
			goto out;
		/* vocab_size may sit at the top level when text_config lacks it */
		if ((rc = json_size_(text, "vocab_size", &vocab, path, err)) == 0 &&
		    (rc = need_(root, "vocab_size", &vocab, path, "", err)) == 0)
			rc = 1;
		if (rc < 0)
			goto out;
		kv = heads;
		hd = floor(hidden / heads);
		if ((rc = json_size_(text, "num_key_value_heads", &kv, path, err)) < 0 ||
		    (rc = json_size_(text, "head_dim", &hd, path, err)) < 0)
			goto out;
		decoder_(p, hidden, layers, inter, heads, kv, hd, vocab);
	}
	yyjson_val *vc = yyjson_obj_get(root, "vision_config");
	if (yyjson_is_obj(vc)) {
		double depth = 32, width = 1280, ffn = 0, ratio = 4, ps = p->patch_size, merge = p->merge,
		       tp = p->temporal_patch;
		/* Qwen2-VL names the ViT's width embed_dim (its hidden_size is the decoder's) */
		if ((rc = either_(vc, "depth", "num_hidden_layers", &depth, path, err)) < 0 ||
		    (rc = either_(vc, "embed_dim", "hidden_size", &width, path, err)) < 0 ||
		    (rc = json_size_(vc, "intermediate_size", &ffn, path, err)) < 0 ||
		    (rc = json_size_(vc, "mlp_ratio", &ratio, path, err)) < 0 ||
		    (rc = json_size_(vc, "patch_size", &ps, path, err)) < 0 ||
		    (rc = json_size_(vc, "spatial_merge_size", &merge, path, err)) < 0 ||
		    (rc = json_size_(vc, "temporal_patch_size", &tp, path, err)) < 0)
			goto out;
		encoder_(&p->enc_linear, &p->enc_attention, depth, width, ffn ? ffn : ratio * width);
		/* sizes a picture's patches are counted in: bounded, so that those counts fit 64 bits */
		const char *big = ps > (1 << 20) ? "patch_size" : merge > (1 << 10) ? "spatial_merge_size"
		                : tp > (1 << 10) ? "temporal_patch_size" : NULL;
		if (big) {
			rc = sw_fail(err, SW_EFORMAT, "%s: vision_config: field '%s' is %g, more than %d", path, big,
			             !strcmp(big, "patch_size") ? ps : !strcmp(big, "spatial_merge_size") ? merge : tp,
			             !strcmp(big, "patch_size") ? 1 << 20 : 1 << 10);
			goto out;
		}
		p->patch_size = (int)ps;
		p->merge = (int)merge;
		p->temporal_patch = (int)tp;
		if (type && !strcmp(type, "llava")) {
			/* LLaVA resizes every picture to the tower's square: the patch count the model itself gives */
			sw_model_config c;
			if ((rc = sw_model_config_load(path, &c, err)))
				goto out;
			p->image_tokens = sw_model_image_tokens(&c);
			p->merge = 1;
		}
	}
	yyjson_val *ac = yyjson_obj_get(root, "audio_config");
	if (yyjson_is_obj(ac)) {
		double layers = 32, width = 1280, ffn = 5120;
		if ((rc = either_(ac, "encoder_layers", "num_hidden_layers", &layers, path, err)) < 0 ||
		    (rc = either_(ac, "d_model", "hidden_size", &width, path, err)) < 0 ||
		    (rc = either_(ac, "encoder_ffn_dim", "intermediate_size", &ffn, path, err)) < 0)
			goto out;
		encoder_(&p->audio_linear, &p->audio_attention, layers, width, ffn);
	}
	sw_error e2 = { 0 };
	rc = check_params_(p, &e2) ? sw_fail(err, SW_EFORMAT, "%s: %s", path, e2.msg) : 0;
out:
	yyjson_doc_free(doc);
	return rc;
}

sw_cost_model *sw_cost_model_load(const char *dir, sw_error *err)
{
	sw_cost_model *m = sw_cost_model_new();
	char path[4096];
	if (!m) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) {
		sw_fail(err, SW_EINVAL, "model directory name too long");
		goto fail;
	}
	if (read_config_(&m->p, path, err))
		goto fail;
	if (!(m->tok = sw_tokenizer_load(dir, err)))
		goto fail;
	return m;
fail:
	sw_cost_model_free(m);
	return NULL;
}

/* ---- media sizes ---- */

/* v[key] of the map v: 1 and *out, 0 when absent, < 0 when the map is corrupt. */
static int map_get_(const sw_val *map, const char *key, sw_val *out)
{
	sw_iter it;
	sw_val k;
	size_t kl = strlen(key);
	sw_iter_init(&it, map);
	for (;;) {
		int rc = sw_iter_next(&it, &k);
		if (rc <= 0)
			return rc;
		if ((rc = sw_iter_next(&it, out)) <= 0)
			return rc < 0 ? rc : SW_EFORMAT;
		if (k.type == SW_T_STR && k.v.str.len == kl && !memcmp(k.v.str.ptr, key, kl))
			return 1;
	}
}

/* A positive whole number at map[key]: 1 read, 0 absent, < 0 (with err) bad. */
static int map_size_(const sw_val *map, const char *key, uint64_t *out, const char *what, sw_error *err)
{
	sw_val v;
	int rc = map_get_(map, key, &v);
	if (rc <= 0)
		return rc < 0 ? sw_fail(err, rc, "%s: corrupt map", what) : 0;
	if (v.type != SW_T_UINT || v.v.u == 0 || v.v.u > (1u << 30))
		return sw_fail(err, SW_ETYPE, "%s: field '%s' is not a whole number from 1 to 2^30", what, key);
	*out = v.v.u;
	return 1;
}

static uint32_t be32_(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Width and height from a PNG's IHDR or a JPEG's SOF marker. */
static int image_file_size_(const char *path, uint64_t *w, uint64_t *h, const char *what, sw_error *err)
{
	FILE *f = fopen(path, "rb");
	unsigned char b[24];
	int rc = SW_EFORMAT;
	if (!f)
		return sw_fail(err, SW_EIO, "%s: cannot open '%s'", what, path);
	size_t n = fread(b, 1, sizeof b, f);
	if (n >= 24 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4)) {
		*w = be32_(b + 16);
		*h = be32_(b + 20);
		rc = 0;
	} else if (n >= 4 && b[0] == 0xff && b[1] == 0xd8) {
		/* walk the markers to the first start-of-frame */
		if (fseek(f, 2, SEEK_SET) == 0)
			for (;;) {
				unsigned char m[9];
				if (fread(m, 1, 4, f) != 4 || m[0] != 0xff)
					break;
				unsigned len = (unsigned)m[2] << 8 | m[3];
				int sof = m[1] >= 0xc0 && m[1] <= 0xcf && m[1] != 0xc4 && m[1] != 0xc8 && m[1] != 0xcc;
				if (sof) {
					if (fread(m, 1, 5, f) == 5) {
						*h = (uint64_t)m[1] << 8 | m[2];
						*w = (uint64_t)m[3] << 8 | m[4];
						rc = 0;
					}
					break;
				}
				if (len < 2 || fseek(f, (long)len - 2, SEEK_CUR))
					break;
			}
	}
	fclose(f);
	if (rc || *w == 0 || *h == 0)
		return sw_fail(err, SW_EFORMAT, "%s: '%s' is not a PNG or JPEG whose size can be read", what, path);
	return 0;
}

/* Seconds of a PCM WAV file, from its fmt and data chunks. */
static int wav_seconds_(const char *path, double *sec, const char *what, sw_error *err)
{
	FILE *f = fopen(path, "rb");
	unsigned char b[12];
	uint32_t rate = 0, block = 0;
	int rc = SW_EFORMAT;
	if (!f)
		return sw_fail(err, SW_EIO, "%s: cannot open '%s'", what, path);
	if (fread(b, 1, 12, f) == 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WAVE", 4))
		while (fread(b, 1, 8, f) == 8) {
			uint32_t len = b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
			if (!memcmp(b, "fmt ", 4) && len >= 16) {
				unsigned char fm[16];
				if (fread(fm, 1, 16, f) != 16)
					break;
				rate = fm[4] | (uint32_t)fm[5] << 8 | (uint32_t)fm[6] << 16 | (uint32_t)fm[7] << 24;
				block = fm[12] | (uint32_t)fm[13] << 8;
				len -= 16;
			} else if (!memcmp(b, "data", 4)) {
				if (rate && block) {
					*sec = (double)len / block / rate;
					rc = 0;
				}
				break;
			}
			if (fseek(f, (long)len + (len & 1), SEEK_CUR))
				break;
		}
	fclose(f);
	if (rc)
		return sw_fail(err, SW_EFORMAT, "%s: '%s' is not a WAV file whose length can be read", what, path);
	return 0;
}

/* The path of a media item, NUL-terminated into buf; 0 when it has none. */
static int item_path_(const sw_val *item, char *buf, size_t size, const char *what, sw_error *err)
{
	sw_val v;
	int rc = map_get_(item, "path", &v);
	if (rc <= 0)
		return rc;
	if (v.type != SW_T_STR || v.v.str.len == 0 || v.v.str.len >= size || memchr(v.v.str.ptr, 0, v.v.str.len))
		return sw_fail(err, SW_ETYPE, "%s: field 'path' is not a file name", what);
	memcpy(buf, v.v.str.ptr, v.v.str.len);
	buf[v.v.str.len] = 0;
	return 1;
}

/* An image's patches: both sides rounded up to whole merged tokens. */
static int image_patches_(const sw_cost_params *p, const sw_val *item, uint64_t *patches, const char *what,
                          sw_error *err)
{
	uint64_t w = 0, h = 0;
	int hw = map_size_(item, "w", &w, what, err), hh;
	if (hw < 0 || (hh = map_size_(item, "h", &h, what, err)) < 0)
		return SW_ETYPE;
	if (!hw || !hh) {
		char path[4096];
		int rc = item_path_(item, path, sizeof path, what, err);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return sw_fail(err, SW_EFORMAT, "%s: an image needs 'w' and 'h', or a 'path'", what);
		if ((rc = image_file_size_(path, &w, &h, what, err)))
			return rc;
	}
	if (p->image_tokens) {
		*patches = (uint64_t)p->image_tokens;
		return 0;
	}
	uint64_t unit = (uint64_t)p->patch_size * (uint64_t)p->merge;
	*patches = ((h + unit - 1) / unit * p->merge) * ((w + unit - 1) / unit * p->merge);
	return 0;
}

static int audio_positions_(const sw_cost_params *p, const sw_val *item, uint64_t *pos, const char *what,
                            sw_error *err)
{
	double sec = 0;
	sw_val data;
	int rc = map_get_(item, "data", &data);
	if (rc < 0)
		return sw_fail(err, rc, "%s: corrupt map", what);
	if (rc) {
		uint64_t rate;
		if (data.type != SW_T_BIN || data.v.str.len % 4)
			return sw_fail(err, SW_ETYPE, "%s: field 'data' is not bin of float32 samples", what);
		if ((rc = map_size_(item, "rate", &rate, what, err)) <= 0)
			return rc < 0 ? rc : sw_fail(err, SW_EFORMAT, "%s: audio 'data' needs a 'rate'", what);
		sec = (double)(data.v.str.len / 4) / (double)rate;
	} else {
		char path[4096];
		if ((rc = item_path_(item, path, sizeof path, what, err)) < 0)
			return rc;
		if (rc == 0)
			return sw_fail(err, SW_EFORMAT, "%s: audio needs 'data' and 'rate', or a 'path'", what);
		if ((rc = wav_seconds_(path, &sec, what, err)))
			return rc;
	}
	double frames = ceil(sec * p->audio_frames_per_s);
	*pos = (uint64_t)ceil(frames / p->audio_stride);
	return 0;
}

static int media_(const sw_cost_params *p, const sw_val *media, sw_cost *c, sw_error *err)
{
	sw_iter it;
	sw_val item;
	char what[64];
	uint64_t merge2 = (uint64_t)p->merge * (uint64_t)p->merge;
	sw_iter_init(&it, media);
	for (uint32_t i = 0;; i++) {
		int rc = sw_iter_next(&it, &item);
		if (rc < 0)
			return sw_fail(err, rc, "field 'media' is corrupt");
		if (rc == 0)
			return 0;
		snprintf(what, sizeof what, "media %u", i);
		if (item.type != SW_T_MAP)
			return sw_fail(err, SW_ETYPE, "%s is a %s, not a map", what, sw_type_name(item.type));
		sw_val type;
		if ((rc = map_get_(&item, "type", &type)) <= 0 || type.type != SW_T_STR)
			return sw_fail(err, SW_EFORMAT, "%s has no 'type' string", what);
		const char *t = type.v.str.ptr;
		size_t tl = type.v.str.len;
		uint64_t n = 0;
		if (tl == 5 && !memcmp(t, "image", 5)) {
			if ((rc = image_patches_(p, &item, &n, what, err)))
				return rc;
			c->media_tokens += n / merge2;
			c->media += p->enc_linear * (double)n + p->enc_attention * (double)n * (double)n;
		} else if (tl == 5 && !memcmp(t, "video", 5)) {
			sw_val frames, fr;
			sw_iter fi;
			if ((rc = map_get_(&item, "frames", &frames)) <= 0 || frames.type != SW_T_ARRAY || !frames.v.count)
				return sw_fail(err, SW_EFORMAT, "%s: a video needs a non-empty 'frames' array", what);
			sw_iter_init(&fi, &frames);
			uint64_t sum = 0;
			for (uint32_t j = 0; (rc = sw_iter_next(&fi, &fr)) == 1; j++) {
				char fw[96];
				uint64_t fp;
				snprintf(fw, sizeof fw, "%s: frame %u", what, j);
				if (fr.type != SW_T_MAP)
					return sw_fail(err, SW_ETYPE, "%s is not a map", fw);
				if ((rc = image_patches_(p, &fr, &fp, fw, err)))
					return rc;
				sum += fp;
			}
			if (rc < 0)
				return sw_fail(err, rc, "%s: corrupt frames", what);
			n = (sum + (uint64_t)p->temporal_patch - 1) / (uint64_t)p->temporal_patch;
			c->media_tokens += n / merge2;
			c->media += p->enc_linear * (double)n + p->enc_attention * (double)n * (double)n;
		} else if (tl == 5 && !memcmp(t, "audio", 5)) {
			if ((rc = audio_positions_(p, &item, &n, what, err)))
				return rc;
			c->media_tokens += (n + (uint64_t)p->audio_pool - 1) / (uint64_t)p->audio_pool;
			c->media += p->audio_linear * (double)n + p->audio_attention * (double)n * (double)n;
		} else {
			return sw_fail(err, SW_EFORMAT, "%s: unknown type '%.*s' (image, video or audio)", what,
			               (int)(tl > 32 ? 32 : tl), t);
		}
		c->patches += n;
	}
}

/* ---- text ---- */

static int encode_len_(const sw_cost_model *m, const char *s, size_t n, int special, uint64_t *out, sw_error *err)
{
	uint32_t *ids;
	size_t k;
	int rc = sw_tokenizer_encode(m->tok, s, n, special, &ids, &k, err);
	if (rc)
		return rc;
	free(ids);
	*out = k;
	return 0;
}

static uint64_t estimate_(const sw_cost_model *m, size_t bytes)
{
	return (uint64_t)ceil((double)bytes / m->p.bytes_per_token);
}

/* The tokens of a field: an array of token ids, else text to tokenise or measure. */
static int tokens_(const sw_cost_model *m, sw_rec *rec, const char *tok_key, const char *text_key, uint64_t *out,
                   sw_cost *c, sw_error *err)
{
	sw_val v;
	int rc = sw_rec_get(rec, tok_key, &v);
	*out = 0;
	if (rc == 0) {
		if (v.type != SW_T_ARRAY)
			return sw_fail(err, SW_ETYPE, "field '%s' is a %s, not an array", tok_key, sw_type_name(v.type));
		*out = v.v.count;
		return 0;
	}
	if (rc != SW_ENOENT)
		return sw_fail(err, rc, "field '%s': %s", tok_key, sw_strerror(rc));
	if ((rc = sw_rec_get(rec, text_key, &v)) == SW_ENOENT)
		return 0;
	if (rc)
		return sw_fail(err, rc, "field '%s': %s", text_key, sw_strerror(rc));
	if (v.type != SW_T_STR)
		return sw_fail(err, SW_ETYPE, "field '%s' is a %s, not a str", text_key, sw_type_name(v.type));
	if (m->tok)
		return encode_len_(m, v.v.str.ptr, v.v.str.len, 0, out, err);
	*out = estimate_(m, v.v.str.len);
	c->estimated = 1;
	return 0;
}

/* A chat prompt: rendered with the template and tokenised, or its contents measured. */
static int messages_(const sw_cost_model *m, const sw_val *msgs, uint64_t *out, sw_cost *c, sw_error *err)
{
	sw_iter it;
	sw_val msg, role, content;
	size_t n = msgs->v.count, bytes = 0, i = 0;
	sw_chat_msg *cm = m->tok ? calloc(n ? n : 1, sizeof *cm) : NULL;
	char **own = m->tok ? calloc(2 * (n ? n : 1), sizeof *own) : NULL;
	int rc = 0;
	if (m->tok && (!cm || !own)) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	sw_iter_init(&it, msgs);
	for (; (rc = sw_iter_next(&it, &msg)) == 1; i++) {
		if (msg.type != SW_T_MAP || map_get_(&msg, "content", &content) != 1 || content.type != SW_T_STR ||
		    map_get_(&msg, "role", &role) != 1 || role.type != SW_T_STR) {
			rc = sw_fail(err, SW_EFORMAT, "field 'messages': message %zu is not a map of 'role' and 'content' strings", i);
			goto out;
		}
		bytes += content.v.str.len;
		if (cm) {
			own[2 * i] = strndup(role.v.str.ptr, role.v.str.len);
			own[2 * i + 1] = strndup(content.v.str.ptr, content.v.str.len);
			if (!own[2 * i] || !own[2 * i + 1]) {
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
				goto out;
			}
			cm[i] = (sw_chat_msg){ own[2 * i], own[2 * i + 1] };
		}
	}
	if (rc < 0) {
		sw_fail(err, rc, "field 'messages' is corrupt");
		goto out;
	}
	if (m->tok) {
		char *text;
		size_t len;
		if ((rc = sw_tokenizer_chat(m->tok, cm, n, 1, &text, &len, err)))
			goto out;
		rc = encode_len_(m, text, len, 1, out, err);
		free(text);
	} else {
		/* the contents, and about 4 tokens of template around each message */
		*out = estimate_(m, bytes) + 4 * (uint64_t)n;
		c->estimated = 1;
		rc = 0;
	}
out:
	if (own)
		for (size_t j = 0; j < 2 * n; j++)
			free(own[j]);
	free(own);
	free(cm);
	return rc;
}

int sw_cost_sample(const sw_cost_model *m, sw_rec *rec, sw_cost *out, sw_error *err)
{
	const sw_cost_params *p = &m->p;
	sw_cost c = { 0 };
	sw_val v;
	int rc;
	if (sw_rec_get(rec, "prompt_tokens", &v) == SW_ENOENT && sw_rec_get(rec, "prompt", &v) == SW_ENOENT &&
	    sw_rec_get(rec, "messages", &v) == 0) {
		if (v.type != SW_T_ARRAY)
			return sw_fail(err, SW_ETYPE, "field 'messages' is a %s, not an array", sw_type_name(v.type));
		if ((rc = messages_(m, &v, &c.prompt_tokens, &c, err)))
			return rc;
	} else if ((rc = tokens_(m, rec, "prompt_tokens", "prompt", &c.prompt_tokens, &c, err))) {
		return rc;
	}
	if ((rc = tokens_(m, rec, "response_tokens", "response", &c.response_tokens, &c, err)))
		return rc;
	if ((rc = sw_rec_get(rec, "media", &v)) == 0) {
		if (v.type != SW_T_ARRAY)
			return sw_fail(err, SW_ETYPE, "field 'media' is a %s, not an array", sw_type_name(v.type));
		if ((rc = media_(p, &v, &c, err)))
			return rc;
	} else if (rc != SW_ENOENT) {
		return sw_fail(err, rc, "field 'media': %s", sw_strerror(rc));
	}
	c.tokens = c.prompt_tokens + c.response_tokens + c.media_tokens;
	double t = (double)c.tokens;
	c.linear = p->scale * p->linear * t;
	c.attention = p->scale * p->attention * t * t;
	c.media *= p->scale;
	c.total = c.linear + c.attention + c.media;
	*out = c;
	return 0;
}
