/*
 * test_model.c - the model configuration, the parameter arena and its
 * views, random initialisation, and safetensors in and out.
 *
 * The fixtures of tests/fixtures/models/ were written by transformers'
 * save_pretrained (tests/fixtures/make_models.py); the test finds them
 * through SW_TOP, or from the working directory, and skips their checks
 * when they are absent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"

static char tmpdir_[256];

static const char *tmp_(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir_, name);
	return buf[k];
}

static void write_file_(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(text, f);
	fclose(f);
}

/* Load a config from text: the return code, and the message in err. */
static int load_text_(const char *text, sw_model_config *c, sw_error *err)
{
	const char *p = tmp_("config.json");
	write_file_(p, text);
	memset(err, 0, sizeof *err);
	return sw_model_config_load(p, c, err);
}

#define TINY_LLAMA                                                                              \
	"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"          \
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"   \
	" \"vocab_size\": 300, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"            \
	" \"tie_word_embeddings\": false, \"max_position_embeddings\": 2048"
/* the fields every config must give, without a default (model_type first) */
#define REQUIRED_ ", \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"max_position_embeddings\": 512," \
	" \"rms_norm_eps\": 1e-06"
/* the same, less the fields the bad cases below set themselves */
#define TINY_REST                                                                               \
	"{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2,"     \
	" \"num_attention_heads\": 4, \"vocab_size\": 300, \"max_position_embeddings\": 2048"

static void test_config_(void)
{
	sw_model_config c;
	sw_error err;
	int rc = load_text_(TINY_LLAMA ", \"eos_token_id\": [5, 7], \"rope_scaling\": {\"rope_type\": "
	                    "\"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
	                    "4.0, \"original_max_position_embeddings\": 64}}",
	                    &c, &err);
	is_int(rc, 0, "llama config loads (%s)", err.msg);
	ok(!strcmp(c.model_type, "llama"), "model_type llama");
	is_int(c.hidden_size, 64, "hidden_size");
	is_int(c.head_dim, 16, "head_dim defaults to hidden / heads");
	is_int(c.num_key_value_heads, 2, "kv heads");
	is_int(c.max_position_embeddings, 2048, "max_position_embeddings");
	is_int(c.bos_token_id, 1, "bos defaults to 1 for llama");
	is_int(c.n_eos, 2, "eos_token_id as an array");
	is_int(c.eos_token_ids[1], 7, "second eos id");
	ok(c.rms_norm_eps == 1e-5f, "rms_norm_eps");
	ok(c.rope_theta == 500000.0f, "rope_theta");
	ok(c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f &&
	   c.rope_original_max_position == 64, "llama3 rope scaling");
	ok(!c.attention_bias && !c.qk_norm && !c.tie_word_embeddings, "llama: no biases, no qk norm, untied");

	/* transformers 5 writes rope_parameters with rope_theta inside */
	rc = load_text_("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
	                " \"rope_parameters\": {\"rope_theta\": 1234.0, \"rope_type\": \"default\"},"
	                " \"num_key_value_heads\": null, \"head_dim\": null, \"eos_token_id\": 9,"
	                " \"vocab_size\": 32000" REQUIRED_ "}",
	                &c, &err);
	is_int(rc, 0, "rope_parameters form loads (%s)", err.msg);
	ok(c.rope_theta == 1234.0f && c.rope_factor == 0, "rope_theta from rope_parameters, no scaling");
	is_int(c.num_key_value_heads, 4, "null kv heads: = heads");
	is_int(c.vocab_size, 32000, "vocab");
	is_int(c.n_eos, 1, "eos_token_id as an integer");
	is_int(c.eos_token_ids[0], 9, "its value");

	rc = load_text_("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
	                " \"num_key_value_heads\": 2, \"vocab_size\": 300, \"tie_word_embeddings\": true,"
	                " \"use_sliding_window\": false, \"sliding_window\": 32768, \"max_window_layers\": 21,"
	                " \"bos_token_id\": null" REQUIRED_ "}",
	                &c, &err);
	is_int(rc, 0, "qwen2 config loads (%s)", err.msg);
	ok(c.attention_bias && !c.qk_norm && c.tie_word_embeddings, "qwen2: qkv bias, tied");
	is_int(c.bos_token_id, -1, "null bos is -1");
	is_int(c.max_position_embeddings, 512, "qwen2 max positions");

	rc = load_text_("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
	                " \"vocab_size\": 300, \"layer_types\": [\"full_attention\", \"full_attention\"]"
	                REQUIRED_ "}",
	                &c, &err);
	is_int(rc, 0, "qwen3 config loads (%s)", err.msg);
	ok(!c.attention_bias && c.qk_norm, "qwen3: qk norm");
	is_int(c.head_dim, 128, "qwen3 head_dim defaults to 128 as Qwen3Config's");
	is_int(c.num_hidden_layers, 2, "layers");

	/* a missing shape, or the norm's epsilon, is an error naming the field: never a default */
	static const char *const required[] = { "vocab_size", "hidden_size", "intermediate_size",
		"num_hidden_layers", "num_attention_heads", "max_position_embeddings", "rms_norm_eps" };
	static const char *const values[] = { "300", "64", "128", "2", "4", "2048", "1e-05" };
	int named = 0, named_null = 0;
	for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
		for (int null = 0; null < 2; null++) {
			char text[1024], want[128];
			size_t n = (size_t)snprintf(text, sizeof text, "{\"model_type\": \"llama\"");
			for (size_t j = 0; j < sizeof required / sizeof *required; j++)
				if (j != i || null)
					n += (size_t)snprintf(text + n, sizeof text - n, ", \"%s\": %s", required[j],
					                      j == i ? "null" : values[j]);
			snprintf(text + n, sizeof text - n, "}");
			snprintf(want, sizeof want, "field '%s' is %s; it is required", required[i], null ? "null" : "missing");
			int r = load_text_(text, &c, &err) == SW_EFORMAT && strstr(err.msg, want) != NULL;
			if (!r)
				printf("#   %s: got '%s'\n", text, err.msg);
			*(null ? &named_null : &named) += r;
		}
	}
	is_int(named, 7, "each of the 7 required fields missing: refused, named");
	is_int(named_null, 7, "and each null");

	/* what is refused, with the field named */
	static const struct {
		const char *text, *want;
	} bad[] = {
		{ TINY_LLAMA ", \"hidden_act\": \"gelu\"}", "field 'hidden_act' is 'gelu'" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}",
		  "field 'rope_scaling.rope_type' is 'yarn'" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
		  "field 'rope_scaling.low_freq_factor' is missing" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
		  " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 2147483648}}",
		  "field 'rope_scaling.original_max_position_embeddings' is not a whole number below 2^31" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
		  " \"high_freq_factor\": 1, \"original_max_position_embeddings\": 64}}",
		  "field 'rope_scaling.high_freq_factor' is not above low_freq_factor" },
		{ TINY_LLAMA ", \"rope_parameters\": {\"rope_type\": \"dynamic\"}}",
		  "field 'rope_parameters.rope_type' is 'dynamic'" },
		{ "{\"model_type\": \"qwen2\", \"use_sliding_window\": true}", "field 'use_sliding_window'" },
		{ "{\"model_type\": \"qwen3\", \"layer_types\": [\"sliding_attention\"]}",
		  "field 'layer_types' has 'sliding_attention'" },
		{ TINY_LLAMA ", \"num_local_experts\": 8}", "field 'num_local_experts'" },
		{ TINY_LLAMA ", \"mlp_bias\": true}", "field 'mlp_bias'" },
		{ TINY_LLAMA ", \"attention_bias\": true}", "field 'attention_bias'" },
		{ "{\"model_type\": \"gpt2\"}", "field 'model_type' is 'gpt2'" },
		{ "{\"hidden_size\": 64}", "field 'model_type' is missing" },
		{ TINY_REST ", \"hidden_size\": \"64\"}", "field 'hidden_size' is string, not an integer" },
		{ TINY_REST ", \"hidden_size\": 64.5}", "field 'hidden_size' is real, not an integer" },
		{ TINY_REST ", \"hidden_size\": -1}", "field 'hidden_size' is -1" },
		{ TINY_REST ", \"hidden_size\": 64, \"num_key_value_heads\": 3, \"rms_norm_eps\": 1e-6}",
		  "not a multiple of 'num_key_value_heads'" },
		{ TINY_LLAMA ", \"eos_token_id\": [1, \"x\"]}", "field 'eos_token_id' has an element" },
		{ TINY_LLAMA ", \"eos_token_id\": 300}", "field 'eos_token_id' has 300" },
		{ TINY_REST ", \"hidden_size\": 64, \"rms_norm_eps\": 0}", "field 'rms_norm_eps' is not positive" },
		{ TINY_REST ", \"tie_word_embeddings\": 1}", "field 'tie_word_embeddings' is uint" },
		{ TINY_LLAMA ", \"quantization_config\": {\"bits\": 4}}", "field 'quantization_config'" },
		{ TINY_LLAMA ", \"hidden_size\": 128}", "the name \"hidden_size\" appears twice in an object" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"rope_type\": \"default\"}}",
		  "the name \"rope_type\" appears twice in an object" },
		{ "[1, 2]", "the document is array" },
		{ TINY_LLAMA ",}", "line 1, column" },
		{ "", "empty file" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		rc = load_text_(bad[i].text, &c, &err);
		ok(rc == SW_EFORMAT && strstr(err.msg, bad[i].want) && strstr(err.msg, "config.json: "),
		   "refused: %s", bad[i].want);
		if (!strstr(err.msg, bad[i].want))
			printf("#   got '%s'\n", err.msg);
	}
	memset(&err, 0, sizeof err);
	rc = sw_model_config_load(tmp_("no-such-config.json"), &c, &err);
	ok(rc == SW_EIO && strstr(err.msg, "no-such-config.json: cannot open: No such file"),
	   "a missing file: %s", err.msg);
}

static void test_config_save_(void)
{
	sw_model_config c, d;
	sw_error err;
	int rc = load_text_(TINY_LLAMA ", \"eos_token_id\": [5, 7], \"rope_scaling\": "
	                    "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
	                    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}",
	                    &c, &err);
	is_int(rc, 0, "load");
	const char *p = tmp_("saved.json");
	rc = sw_model_config_save(&c, p, &err);
	is_int(rc, 0, "save (%s)", err.msg);
	rc = sw_model_config_load(p, &d, &err);
	is_int(rc, 0, "load what was saved (%s)", err.msg);
	ok(!memcmp(&c, &d, sizeof c), "the configuration survives save and load");
	FILE *f = fopen(p, "r");
	char text[4096] = { 0 };
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f)
		fclose(f);
	ok(n > 0 && strstr(text, "\"rms_norm_eps\": 1e-05,") && strstr(text, "\"rope_theta\": 500000.0,") &&
	   strstr(text, "\"eos_token_id\": [5, 7],") && strstr(text, "\"LlamaForCausalLM\""),
	   "floats in their shortest form, eos as an array, the architecture");
	struct stat st;
	ok(stat(p, &st) == 0 && (st.st_mode & 0777) == (0666 & ~(umask(022), umask(022))),
	   "mode from the umask, not mkstemp's 0600");
	c.num_key_value_heads = 3;
	rc = sw_model_config_save(&c, tmp_("bad.json"), &err);
	ok(rc == SW_EFORMAT && strstr(err.msg, "bad.json: "), "an inconsistent config is not saved");
	ok(access(tmp_("bad.json"), F_OK) != 0, "and leaves no file");
}

/* Qwen2.5-0.5B: 494,032,768 parameters, as its model card and PyTorch count them. */
static sw_model_config qwen05_(void)
{
	sw_model_config c = { 0 };
	strcpy(c.model_type, "qwen2");
	c.vocab_size = 151936;
	c.hidden_size = 896;
	c.intermediate_size = 4864;
	c.num_hidden_layers = 24;
	c.num_attention_heads = 14;
	c.num_key_value_heads = 2;
	c.head_dim = 64;
	c.max_position_embeddings = 32768;
	c.rms_norm_eps = 1e-6f;
	c.rope_theta = 1000000.0f;
	c.tie_word_embeddings = true;
	c.attention_bias = true;
	c.bos_token_id = -1;
	c.eos_token_ids[0] = 151643;
	c.n_eos = 1;
	return c;
}

static void test_arena_(void)
{
	sw_model_config c = qwen05_();
	sw_error err = { 0 };
	is_int(sw_model_config_nparams(&c), 494032768, "Qwen2.5-0.5B's shapes: 494,032,768 parameters");
	sw_model *m = sw_model_new(&c, &err);
	ok(m != NULL, "a Qwen2.5-0.5B-shaped model is created (%s)", err.msg);
	if (m) {
		is_int(m->nparams, 494032768, "its nparams");
		is_int(m->ntensors, 1 + 24 * 12 + 1, "embed, 12 tensors a layer, the final norm; no lm_head");
		ok(((uintptr_t)m->arena & 63) == 0, "the arena is 64-byte aligned");
		ok(m->lm_head == m->embed, "tied: lm_head is the embedding");
		const sw_tensor *t = sw_model_tensor(m, "model.layers.23.mlp.down_proj.weight");
		ok(t && t->shape[0] == 896 && t->shape[1] == 4864 && t->data == m->layers[23].w_down &&
		   t->offset + t->numel == m->nparams - 896, "the last layer's down_proj, just before model.norm");
		ok(sw_model_tensor(m, "lm_head.weight") == NULL, "no lm_head tensor when tied");
		t = sw_model_tensor(m, "model.layers.0.self_attn.k_proj.bias");
		ok(t && t->ndim == 1 && t->shape[0] == 128 && t->data == m->layers[0].bk, "k_proj bias [128]");
		ok(m->arena[0] == 0 && m->arena[m->nparams - 1] == 0, "zeroed");
		sw_model_free(m);
	}

	/* order and contiguity for each family */
	static const char *types[] = { "llama", "qwen2", "qwen3" };
	for (int k = 0; k < 3; k++) {
		sw_model_config s = { 0 };
		strcpy(s.model_type, types[k]);
		s.vocab_size = 300, s.hidden_size = 64, s.intermediate_size = 128, s.num_hidden_layers = 2;
		s.num_attention_heads = 4, s.num_key_value_heads = 2, s.head_dim = 16;
		s.max_position_embeddings = 128, s.rms_norm_eps = 1e-6f, s.rope_theta = 10000;
		s.attention_bias = k == 1, s.qk_norm = k == 2, s.tie_word_embeddings = k == 1, s.bos_token_id = -1;
		size_t n = sw_model_config_nparams(&s);
		size_t per = 64 + 64 * 64 + 32 * 64 * 2 + 64 * 64 + 64 + 3 * 128 * 64;
		if (k == 1)
			per += 64 + 32 + 32;
		if (k == 2)
			per += 16 + 16;
		size_t want = 300 * 64 + 2 * per + 64 + (k == 1 ? 0 : 300 * 64);
		is_int(n, want, "%s: nparams counted by hand", types[k]);
		float *arena = calloc(n, sizeof *arena);
		sw_model *v = sw_model_view(&s, arena, &err);
		ok(v && v->arena == arena && !v->owns_arena, "%s: a view borrows the arena", types[k]);
		if (!v)
			continue;
		size_t off = 0;
		int contiguous = 1;
		for (size_t i = 0; i < v->ntensors; i++) {
			contiguous &= v->tensors[i].offset == off && v->tensors[i].data == arena + off;
			off += v->tensors[i].numel;
		}
		ok(contiguous && off == n, "%s: tensors tile the arena in order", types[k]);
		const char *want1 = k == 1 ? "model.layers.0.self_attn.q_proj.bias"
		                   : k == 2 ? "model.layers.0.self_attn.k_proj.weight"
		                            : "model.layers.0.self_attn.k_proj.weight";
		ok(!strcmp(v->tensors[3].name, want1), "%s: tensor 3 is %s", types[k], v->tensors[3].name);
		if (k == 2)
			ok(!strcmp(v->tensors[5].name, "model.layers.0.self_attn.q_norm.weight") &&
			   v->layers[0].q_norm == v->tensors[5].data && v->layers[0].k_norm == v->tensors[6].data,
			   "qwen3: q_norm and k_norm after v_proj");
		ok(!strcmp(v->tensors[v->ntensors - 1].name, k == 1 ? "model.norm.weight" : "lm_head.weight"),
		   "%s: the last tensor", types[k]);

		sw_model_init_random(v, 42, 0.02f);
		double sum = 0, sq = 0;
		const sw_tensor *w = sw_model_tensor(v, "model.embed_tokens.weight");
		for (size_t i = 0; i < w->numel; i++)
			sum += w->data[i], sq += (double)w->data[i] * w->data[i];
		double mean = sum / (double)w->numel, sd = sqrt(sq / (double)w->numel - mean * mean);
		ok(fabs(mean) < 0.001 && fabs(sd - 0.02) < 0.001, "%s: embedding ~ normal(0, 0.02): mean %g sd %g",
		   types[k], mean, sd);
		ok(v->layers[1].attn_norm[0] == 1 && v->final_norm[63] == 1, "%s: norms are 1", types[k]);
		if (k == 1)
			ok(v->layers[0].bq[0] == 0 && v->layers[1].bv[31] == 0, "qwen2: biases are 0");
		float *again = calloc(n, sizeof *again);
		sw_model *v2 = sw_model_view(&s, again, &err);
		sw_model_init_random(v2, 42, 0.02f);
		ok(!memcmp(arena, again, n * sizeof *arena), "%s: the same seed, the same bits", types[k]);
		sw_model_init_random(v2, 43, 0.02f);
		ok(memcmp(arena, again, n * sizeof *arena) != 0, "%s: another seed, other numbers", types[k]);
		sw_model_free(v2);
		free(again);
		sw_model_free(v);
		ok(arena[0] != 0, "freeing a view leaves its arena");
		free(arena);
	}
	sw_model_free(NULL);
	ok(1, "sw_model_free(NULL) is a no-op");

	ok(sw_model_view(&c, NULL, &err) == NULL && err.code == SW_EINVAL, "a view needs an arena");
	c.num_key_value_heads = 5;
	ok(sw_model_new(&c, &err) == NULL && strstr(err.msg, "num_key_value_heads"), "bad config: %s", err.msg);
	is_int(sw_model_config_nparams(&c), 0, "nparams of a bad config is 0");
}

/* ---- safetensors ---- */

static char top_[512];

static const char *fixture_(const char *model)
{
	static char buf[4][700];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/tests/fixtures/models/%s", top_, model);
	return buf[k];
}

static unsigned char *slurp_(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *p = malloc((size_t)len + 1);
	*n = p ? fread(p, 1, (size_t)len, f) : 0;
	fclose(f);
	return p;
}

static int same_file_(const char *a, const char *b)
{
	size_t na = 0, nb = 0;
	unsigned char *pa = slurp_(a, &na), *pb = slurp_(b, &nb);
	int same = pa && pb && na == nb && !memcmp(pa, pb, na);
	free(pa);
	free(pb);
	return same;
}

/* Each tensor's count, sum and first element against what safetensors.torch read. */
static void check_sums_(const sw_model *m, const char *model)
{
	char path[700], line[512];
	snprintf(path, sizeof path, "%s/tests/fixtures/models/checksums.txt", top_);
	FILE *f = fopen(path, "r");
	ok(f != NULL, "%s: checksums.txt is there", model);
	if (!f)
		return;
	size_t seen = 0, good = 0;
	while (fgets(line, sizeof line, f)) {
		char mod[64], name[128];
		unsigned long long numel;
		double sum, first;
		if (line[0] == '#' || sscanf(line, "%63s %127s %llu %lf %lf", mod, name, &numel, &sum, &first) != 5 ||
		    strcmp(mod, model))
			continue;
		seen++;
		const sw_tensor *t = sw_model_tensor(m, name);
		double s = 0;
		if (t)
			for (size_t i = 0; i < t->numel; i++)
				s += t->data[i];
		/* float32 values summed in float64 in another order: equal to rounding */
		if (t && t->numel == numel && (float)first == t->data[0] && fabs(s - sum) <= 1e-9 * (1 + fabs(sum)))
			good++;
		else
			printf("#   %s %s: numel %zu sum %.17g first %.9g; want %llu %.17g %.9g\n", model, name,
			       t ? t->numel : 0, s, t ? t->data[0] : 0, numel, sum, first);
	}
	fclose(f);
	ok(seen == m->ntensors && good == seen, "%s: %zu of %zu tensors match safetensors.torch", model, good,
	   m->ntensors);
}

static void test_fixtures_(void)
{
	static const char *models[] = { "tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama-bf16",
		                        "tiny-qwen2-bf16", "tiny-llama-sharded" };
	for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
		sw_error err = { 0 };
		sw_model *m = sw_model_load(fixture_(models[k]), &err);
		ok(m != NULL, "%s loads (%s)", models[k], err.msg);
		if (!m)
			continue;
		check_sums_(m, models[k]);
		if (k < 3) {
			/* loaded then saved: the very bytes transformers wrote */
			const char *dir = tmp_(models[k]);
			int rc = sw_model_save(m, dir, SW_DT_F32, &err);
			is_int(rc, 0, "%s saves (%s)", models[k], err.msg);
			char a[700], b[700];
			snprintf(a, sizeof a, "%s/model.safetensors", dir);
			snprintf(b, sizeof b, "%s/model.safetensors", fixture_(models[k]));
			ok(same_file_(a, b), "%s: loaded then saved in f32 is bit-identical", models[k]);
			sw_model *m2 = sw_model_load(dir, &err);
			ok(m2 && !memcmp(&m2->cfg, &m->cfg, sizeof m->cfg), "%s: its config.json reads back the same",
			   models[k]);
			sw_model_free(m2);
		}
		if (k == 0 || k == 1) {
			/* and in bf16: transformers' .to(torch.bfloat16) file, byte for byte */
			const char *dir = tmp_("bf16");
			int rc = sw_model_save(m, dir, SW_DT_BF16, &err);
			is_int(rc, 0, "%s saves in bf16 (%s)", models[k], err.msg);
			char a[700], b[700];
			snprintf(a, sizeof a, "%s/model.safetensors", dir);
			snprintf(b, sizeof b, "%s-bf16/model.safetensors", fixture_(models[k]));
			ok(same_file_(a, b), "%s: saved in bf16 is the file torch's bf16 rounding wrote", models[k]);
		}
		sw_model_free(m);
	}
	sw_error err = { 0 };
	sw_model *a = sw_model_load(fixture_("tiny-llama"), &err), *b = sw_model_load(fixture_("tiny-llama-sharded"), &err);
	ok(a && b && a->nparams == b->nparams && !memcmp(a->arena, b->arena, a->nparams * 4),
	   "the sharded copy loads the same arena");
	sw_model_free(b);
	/* a view of another arena loads in place */
	float *arena = malloc(a->nparams * sizeof *arena);
	sw_model *v = sw_model_view(&a->cfg, arena, &err);
	int rc = sw_model_load_weights(v, fixture_("tiny-llama"), &err);
	ok(rc == 0 && !memcmp(arena, a->arena, a->nparams * 4), "load_weights fills a borrowed arena");
	sw_model_free(v);
	free(arena);
	sw_model_free(a);
	a = sw_model_load(fixture_("tiny-qwen2"), &err);
	rc = a ? sw_model_save(a, tmp_("x"), SW_DT_F16, &err) : -99;
	ok(rc == SW_EINVAL && strstr(err.msg, "F32 or BF16"), "f16 is not written: %s", err.msg);
	sw_model_free(a);
}

/* Published config.json files: the parameter count transformers builds from each. */
static void test_real_configs_(void)
{
	char path[700], line[256];
	snprintf(path, sizeof path, "%s/tests/fixtures/models/configs/nparams.txt", top_);
	FILE *f = fopen(path, "r");
	ok(f != NULL, "configs/nparams.txt is there");
	if (!f)
		return;
	int n = 0;
	while (fgets(line, sizeof line, f)) {
		char name[128];
		unsigned long long want;
		if (line[0] == '#' || sscanf(line, "%127s %llu", name, &want) != 2)
			continue;
		n++;
		snprintf(path, sizeof path, "%s/tests/fixtures/models/configs/%s", top_, name);
		sw_model_config c;
		sw_error err = { 0 };
		int rc = sw_model_config_load(path, &c, &err);
		is_int(rc, 0, "%s loads (%s)", name, err.msg);
		is_int(sw_model_config_nparams(&c), want, "%s: %llu parameters, as transformers counts them", name, want);
		if (!strcmp(name, "llama-3.2-1b.json"))
			ok(c.rope_factor == 32 && c.rope_original_max_position == 8192 && c.n_eos == 3 &&
			   c.eos_token_ids[2] == 128009 && c.head_dim == 64 && c.tie_word_embeddings,
			   "llama 3.2: llama3 rope, three eos ids, tied");
		if (!strcmp(name, "qwen2.5-0.5b.json"))
			ok(c.attention_bias && c.head_dim == 64 && c.rope_theta == 1e6f && c.bos_token_id == 151643,
			   "qwen2.5: biases, head_dim 64, theta 1e6, and a sliding_window that is not in use");
		if (!strcmp(name, "qwen3-0.6b.json"))
			ok(c.qk_norm && !c.attention_bias && c.head_dim == 128 && c.num_attention_heads * c.head_dim == 2048,
			   "qwen3: q/k norm, head_dim 128 apart from hidden/heads");
	}
	fclose(f);
	is_int(n, 6, "six published configs");
}

/* A safetensors file from parts: a header text and data bytes. */
static void write_st_(const char *path, const char *header, size_t data_bytes, float fill)
{
	FILE *f = fopen(path, "wb");
	uint64_t n = strlen(header);
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)(n >> (8 * i));
	fwrite(len, 1, 8, f);
	fwrite(header, 1, n, f);
	for (size_t i = 0; i < data_bytes / 4; i++)
		fwrite(&fill, 4, 1, f);
	fclose(f);
}

#include "model/model_io.h"

static void test_f16_(void)
{
	/* half bit patterns and their exact values (numpy.float16) */
	static const uint16_t h[] = { 0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x3555, 0x8000, 0x0400 };
	static const float want[] = { 1.0f, -2.0f, 5.9604644775390625e-08f, 6.0975551605224609e-05f, 65504.0f,
		                      0.333251953125f, -0.0f, 6.103515625e-05f };
	unsigned char file[8 + 80 + 16];
	const char *hdr = "{\"x\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]}}";
	size_t hn = strlen(hdr);
	memset(file, 0, sizeof file);
	file[0] = (unsigned char)hn;
	memcpy(file + 8, hdr, hn);
	for (int i = 0; i < 8; i++) {
		file[8 + hn + 2 * i] = (unsigned char)(h[i] & 0xff);
		file[8 + hn + 2 * i + 1] = (unsigned char)(h[i] >> 8);
	}
	sw_st_file f;
	sw_error err = { 0 };
	int rc = sw_st_open_mem(&f, file, 8 + hn + 16, "mem", &err);
	is_int(rc, 0, "an F16 file parses (%s)", err.msg);
	if (rc)
		return;
	ok(f.n == 1 && f.t[0].ndim == 2 && f.t[0].shape[1] == 4 && f.t[0].dtype == SW_DT_F16, "its one tensor");
	float x[8];
	rc = sw_st_read_f32(&f, 0, x, &err);
	ok(rc == 0 && !memcmp(x, want, sizeof x), "F16 to F32: normal, subnormal, max, signed zero");
	sw_st_close(&f);
	/* NaN is refused */
	file[8 + hn + 2] = 0x00, file[8 + hn + 3] = 0x7e;
	rc = sw_st_open_mem(&f, file, 8 + hn + 16, "mem", &err);
	rc = rc ? rc : sw_st_read_f32(&f, 0, x, &err);
	ok(rc == SW_EFORMAT && strstr(err.msg, "mem: tensor 'x': element 1 is NaN"), "NaN: %s", err.msg);
	sw_st_close(&f);
}

/* Each defect of a safetensors header, refused with its own message (16 bytes of data after the header). */
static void test_st_header_(void)
{
#define T_(shape, off) "{\"x\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" off "}}"
	static const struct {
		const char *hdr, *msg;
		int code;
	} c[] = {
		{ "{\"x\":5}", "mem: tensor 'x': its entry is uint, not an object", SW_EFORMAT },
		{ "{\"x\":{\"shape\":[4],\"data_offsets\":[0,16]}}", "mem: tensor 'x': 'dtype' is missing", SW_EFORMAT },
		{ "{\"x\":{\"dtype\":3,\"shape\":[4],\"data_offsets\":[0,16]}}", "mem: tensor 'x': 'dtype' is not a string",
		  SW_EFORMAT },
		{ "{\"x\":{\"dtype\":\"I8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
		  "mem: tensor 'x': dtype 'I8' is not supported (F32, F16 or BF16)", SW_EFORMAT },
		{ "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", "mem: tensor 'x': 'shape' is missing", SW_EFORMAT },
		{ T_("4", "[0,16]"), "mem: tensor 'x': 'shape' is not an array", SW_EFORMAT },
		{ T_("[1,1,1,1,1,1,1,1,4]", "[0,16]"), "mem: tensor 'x': 'shape' has 9 dimensions, more than 8", SW_EFORMAT },
		{ T_("[-4]", "[0,16]"), "mem: tensor 'x': 'shape' has an element that is not a size", SW_EFORMAT },
		{ T_("[4.0]", "[0,16]"), "mem: tensor 'x': 'shape' has an element that is not a size", SW_EFORMAT },
		{ T_("[1099511627777]", "[0,16]"), "mem: tensor 'x': 'shape' is too large", SW_EFORMAT },
		{ T_("[1073741824,1073741824,1073741824]", "[0,16]"), "mem: tensor 'x': 'shape' is too large", SW_EFORMAT },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[4]}}", "mem: tensor 'x': 'data_offsets' is missing", SW_EFORMAT },
		{ T_("[4]", "[0]"), "mem: tensor 'x': 'data_offsets' is not two byte offsets", SW_EFORMAT },
		{ T_("[4]", "[0,-16]"), "mem: tensor 'x': 'data_offsets' is not two byte offsets", SW_EFORMAT },
		{ T_("[1]", "[8,4]"), "mem: tensor 'x': data_offsets [8, 4] end before they begin", SW_EFORMAT },
		{ T_("[8]", "[0,32]"),
		  "mem: tensor 'x': data_offsets end at byte 32, past the 16 bytes of data in the file (truncated?)",
		  SW_ETRUNC },
		{ T_("[3]", "[0,16]"), "mem: tensor 'x': F32 of 3 elements is 12 bytes, data_offsets give 16", SW_EFORMAT },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		  "mem: tensor 'y': its data overlaps that of 'x'", SW_EFORMAT },
		{ "[{\"x\":1}]", "mem: the header does not start with '{'; not a safetensors file", SW_EFORMAT },
		{ "{\"x\":", "mem: bad header JSON at byte", SW_EFORMAT },
		{ "{\"__metadata__\":5}", "mem: '__metadata__' is uint, not an object", SW_EFORMAT },
		{ "{\"__metadata__\":{\"format\":1}}", "mem: '__metadata__' value of 'format' is uint, not a string",
		  SW_EFORMAT },
		{ "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
		  "mem: a tensor name holds a NUL byte", SW_EFORMAT },
		{ "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
		  "mem: the name \"x\" appears twice in an object", SW_EFORMAT },
		/* and one that is whole: metadata of strings, a tensor of every byte of the data */
		{ "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]}}",
		  NULL, 0 },
	};
#undef T_
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		size_t hn = strlen(c[i].hdr);
		unsigned char *file = calloc(1, 8 + hn + 16);
		for (int b = 0; b < 8; b++)
			file[b] = (unsigned char)((uint64_t)hn >> (8 * b));
		memcpy(file + 8, c[i].hdr, hn);
		sw_st_file f;
		sw_error err = { 0 };
		int rc = sw_st_open_mem(&f, file, 8 + hn + 16, "mem", &err);
		if (!c[i].msg)
			ok(rc == 0 && f.n == 1 && f.t[0].numel == 8, "header %zu is whole: %s", i, rc ? err.msg : "parsed");
		else
			ok(rc == c[i].code && !strncmp(err.msg, c[i].msg, strlen(c[i].msg)), "header %zu refused: %s", i,
			   err.msg);
		if (!rc)
			sw_st_close(&f);
		free(file);
	}
}

/* Resident kB of the mapping that contains p, from /proc/self/smaps; -1 if not found. */
static long map_rss_kb_(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	long rss = -1;
	int in = 0;
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's first line */
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
			break;
	}
	if (f)
		fclose(f);
	return rss;
}

/*
 * Loading must not keep a file's pages resident beside the arena they were
 * copied into (a 438 MB model peaked at twice its size): sw_st_read_f32()
 * gives a mapped file's pages back as it goes.
 */
static void test_map_released_(void)
{
	const char *path = tmp_("big.safetensors");
	size_t n = (size_t)3 << 20; /* two tensors of 12 MiB */
	char hdr[200];
	snprintf(hdr, sizeof hdr,
	         "{\"a\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[0,%zu]},"
	         "\"b\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}}",
	         n, 4 * n, n, 4 * n, 8 * n);
	write_st_(path, hdr, 8 * n, 0.5f);
	sw_st_file f;
	sw_error err = { 0 };
	float *x = malloc(4 * n);
	int rc = x ? sw_st_open_file(&f, path, &err) : SW_ENOMEM;
	is_int(rc, 0, "a 24 MiB file opens (%s)", err.msg);
	if (rc) {
		free(x);
		return;
	}
	ok(f.mapped, "it is mapped");
	for (size_t i = 0; i < f.n && !rc; i++)
		rc = sw_st_read_f32(&f, i, x, &err);
	long kb = map_rss_kb_(f.map);
	ok(rc == 0 && x[0] == 0.5f && x[n - 1] == 0.5f, "both tensors read");
	ok(kb >= 0 && kb <= 64, "the file's pages are given back once read: %ld kB resident of 24 MiB", kb);
	sw_st_close(&f);
	free(x);
}

/* A one-layer llama in a directory, its weights in a safetensors of our making. */
#define SMALL_CONFIG                                                                             \
	"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 8,"              \
	" \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"   \
	" \"vocab_size\": 16, \"tie_word_embeddings\": %s, \"bos_token_id\": 1, \"eos_token_id\": 2,"         \
	" \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-06}"

static const char *small_names_[] = {
	"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
	"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.gate_proj.weight",
	"model.layers.0.mlp.up_proj.weight", "model.layers.0.post_attention_layernorm.weight",
	"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.o_proj.weight",
	"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight", "model.norm.weight"
};
static const int small_rows_[] = { 16, 16, 8, 8, 8, 8, 8, 4, 8, 8, 4, 8 };
static const int small_cols_[] = { 8, 8, 0, 8, 8, 8, 0, 8, 8, 8, 8, 0 };

/*
 * Write dir with config.json and model.safetensors, tensor `which` changed
 * by how: 0 none, 1 drop, 2 rename, 3 shape, 4 dtype I32, 5 overlap the
 * previous one, 6 end past the data, 7 keep (lm_head.weight of a tied model).
 */
static const char *small_dir_(const char *name, int which, int how, const char *tied)
{
	const char *dir = tmp_(name);
	char path[700], text[4096];
	mkdir(dir, 0777);
	snprintf(path, sizeof path, "%s/config.json", dir);
	snprintf(text, sizeof text, SMALL_CONFIG, tied);
	write_file_(path, text);
	size_t off = 0, len = 0;
	len += (size_t)snprintf(text + len, sizeof text - len, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int i = 0; i < 12; i++) {
		size_t numel = (size_t)small_rows_[i] * (size_t)(small_cols_[i] ? small_cols_[i] : 1);
		if (i == which && how == 1)
			continue;
		if (i == 0 && !strcmp(tied, "true") && !(which == 0 && how == 7))
			continue;
		char shape[32];
		if (small_cols_[i])
			snprintf(shape, sizeof shape, "%d,%d", small_rows_[i] + (i == which && how == 3),
			         small_cols_[i]);
		else
			snprintf(shape, sizeof shape, "%d", small_rows_[i] + (i == which && how == 3));
		if (i == which && how == 3)
			numel += small_cols_[i] ? (size_t)small_cols_[i] : 1;
		size_t b = off - (i == which && how == 5 ? 4 : 0), e = b + numel * 4 + (i == which && how == 6 ? 4096 : 0);
		len += (size_t)snprintf(text + len, sizeof text - len,
		                        ",\"%s%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
		                        small_names_[i], i == which && how == 2 ? "_x" : "",
		                        i == which && how == 4 ? "I32" : "F32", shape, b, e);
		off += numel * 4;
	}
	len += (size_t)snprintf(text + len, sizeof text - len, "}");
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	write_st_(path, text, off, 0.5f);
	return dir;
}

static void expect_load_fail_(const char *dir, int code, const char *want, const char *what)
{
	sw_error err = { 0 };
	sw_model *m = sw_model_load(dir, &err);
	ok(m == NULL && err.code == code && strstr(err.msg, want), "%s: %s", what, err.msg);
	if (m || !strstr(err.msg, want))
		printf("#   want '%s' (code %d), got code %d\n", want, code, err.code);
	sw_model_free(m);
}

static void test_bad_files_(void)
{
	sw_error err = { 0 };
	sw_model *m = sw_model_load(small_dir_("good", -1, 0, "false"), &err);
	ok(m && m->layers[0].wk[31] == 0.5f, "the hand-made small model loads (%s)", err.msg);
	sw_model_free(m);
	m = sw_model_load(small_dir_("good-tied", -1, 0, "true"), &err);
	ok(m && m->lm_head == m->embed, "and tied, without lm_head (%s)", err.msg);
	sw_model_free(m);

	expect_load_fail_(small_dir_("drop", 8, 1, "false"), SW_EFORMAT,
	                  "model.safetensors: tensor 'model.layers.0.self_attn.o_proj.weight' is missing",
	                  "a missing tensor");
	expect_load_fail_(small_dir_("rename", 3, 2, "false"), SW_EFORMAT,
	                  "tensor 'model.layers.0.mlp.down_proj.weight_x': is not a tensor of this llama model",
	                  "an unexpected tensor");
	expect_load_fail_(small_dir_("shape", 7, 3, "false"), SW_EFORMAT,
	                  "tensor 'model.layers.0.self_attn.k_proj.weight': shape [5, 8], but config.json makes it [4, 8]",
	                  "a wrong shape");
	expect_load_fail_(small_dir_("dtype", 2, 4, "false"), SW_EFORMAT,
	                  "tensor 'model.layers.0.input_layernorm.weight': dtype 'I32' is not supported",
	                  "a wrong dtype");
	expect_load_fail_(small_dir_("overlap", 5, 5, "false"), SW_EFORMAT,
	                  "tensor 'model.layers.0.mlp.up_proj.weight': its data overlaps that of "
	                  "'model.layers.0.mlp.gate_proj.weight'",
	                  "overlapping offsets");
	expect_load_fail_(small_dir_("range", 11, 6, "false"), SW_ETRUNC,
	                  "tensor 'model.norm.weight': data_offsets end at byte", "offsets out of range");
	/* the tied model with an lm_head: accepted only as a copy of the embedding */
	const char *dir = small_dir_("tied-extra", 0, 7, "true");
	m = sw_model_load(dir, &err);
	ok(m && m->lm_head == m->embed && m->embed[0] == 0.5f, "tied, with an lm_head equal to the embedding (%s)",
	   err.msg);
	sw_model_free(m);
	char path[700];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	size_t n;
	unsigned char *good = slurp_(path, &n);
	uint64_t hn = 0;
	for (int i = 7; i >= 0; i--)
		hn = hn << 8 | good[i];
	float quarter = 0.25f;
	memcpy(good + 8 + hn, &quarter, 4); /* lm_head.weight sorts first: its first element */
	FILE *f = fopen(path, "wb");
	fwrite(good, 1, n, f);
	fclose(f);
	free(good);
	expect_load_fail_(dir, SW_EFORMAT, "tensor 'lm_head.weight' differs from model.embed_tokens.weight",
	                  "tied, with an lm_head that is no copy");

	/* byte-level damage to a good file */
	dir = small_dir_("damage", -1, 0, "false");
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	good = slurp_(path, &n);
	f = fopen(path, "wb");
	fwrite(good, 1, n - 3, f);
	fclose(f);
	expect_load_fail_(dir, SW_ETRUNC, "past the", "truncated data");
	f = fopen(path, "wb");
	fwrite(good, 1, 5, f);
	fclose(f);
	expect_load_fail_(dir, SW_ETRUNC, "model.safetensors: 5 bytes, too short", "a file of 5 bytes");
	memcpy(path + strlen(path), "", 1);
	unsigned char *bad = malloc(n);
	memcpy(bad, good, n);
	bad[5] = 1; /* header length far past the end */
	f = fopen(path, "wb");
	fwrite(bad, 1, n, f);
	fclose(f);
	expect_load_fail_(dir, SW_ETRUNC, "header length 1099511628", "header length past EOF");
	memcpy(bad, good, n);
	bad[8 + 1] = '\''; /* {"__ -> {'_ */
	f = fopen(path, "wb");
	fwrite(bad, 1, n, f);
	fclose(f);
	expect_load_fail_(dir, SW_EFORMAT, "model.safetensors: bad header JSON at byte 9", "bad header JSON");
	memcpy(bad, good, n);
	float nan = NAN;
	memcpy(bad + n - 8, &nan, 4);
	f = fopen(path, "wb");
	fwrite(bad, 1, n, f);
	fclose(f);
	expect_load_fail_(dir, SW_EFORMAT, "tensor 'model.norm.weight': element 6 is NaN", "a NaN weight");
	free(bad);
	free(good);
	unlink(path);
	expect_load_fail_(dir, SW_EIO, "no model.safetensors or model.safetensors.index.json", "no weights");
	snprintf(path, sizeof path, "%s/config.json", dir);
	unlink(path);
	expect_load_fail_(dir, SW_EIO, "config.json: cannot open: No such file or directory", "no config.json");

	/* the index of a sharded model */
	dir = small_dir_("index", -1, 0, "false");
	char a[700], b[700];
	snprintf(a, sizeof a, "%s/model.safetensors", dir);
	snprintf(b, sizeof b, "%s/shard-1.safetensors", dir);
	rename(a, b);
	snprintf(a, sizeof a, "%s/model.safetensors.index.json", dir);
	char text[4096];
	size_t len = (size_t)snprintf(text, sizeof text, "{\"metadata\": {}, \"weight_map\": {");
	for (int i = 0; i < 12; i++)
		len += (size_t)snprintf(text + len, sizeof text - len, "%s\"%s\": \"shard-1.safetensors\"", i ? ", " : "",
		                        small_names_[i]);
	snprintf(text + len, sizeof text - len, "}}");
	write_file_(a, text);
	m = sw_model_load(dir, &err);
	ok(m != NULL, "an index with one shard loads (%s)", err.msg);
	sw_model_free(m);
	char *p = strstr(text, "\"model.norm.weight\": \"shard-1");
	memcpy(p + 22, "../1", 4);
	write_file_(a, text);
	expect_load_fail_(dir, SW_EFORMAT, "tensor 'model.norm.weight': shard is a path", "a shard outside the dir");
	memcpy(p + 22, "shar", 4);
	for (char *q = text; (q = strstr(q, "shard-1")); q++)
		memcpy(q, "zzzz", 4);
	write_file_(a, text);
	expect_load_fail_(dir, SW_EIO, "zzzzd-1.safetensors: cannot open: No such file", "a missing shard");
	for (char *q = text; (q = strstr(q, "zzzzd-1")); q++)
		memcpy(q, "shar", 4);
	*(p - 2) = 0; /* the index without model.norm.weight */
	strcat(text, "}}");
	write_file_(a, text);
	expect_load_fail_(dir, SW_EFORMAT, "tensor 'model.norm.weight': is in this shard but", "a tensor the index omits");
	write_file_(a, "{\"weight_map\": [1]}");
	expect_load_fail_(dir, SW_EFORMAT, "model.safetensors.index.json: 'weight_map' is not an object", "bad index");
}

int main(void)
{
	snprintf(tmpdir_, sizeof tmpdir_, "%s/sw-test-model.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir_)) {
		perror("mkdtemp");
		return 2;
	}
	test_config_();
	test_config_save_();
	test_arena_();
	const char *top = getenv("SW_TOP");
	snprintf(top_, sizeof top_, "%s", top ? top : ".");
	test_real_configs_();
	test_fixtures_();
	test_f16_();
	test_st_header_();
	test_map_released_();
	test_bad_files_();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_);
	if (system(cmd))
		printf("# could not remove %s\n", tmpdir_);
	return tap_done();
}
