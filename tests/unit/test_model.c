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
	" \"tie_word_embeddings\": false"
/* the same, less the fields the bad cases below set themselves */
#define TINY_REST                                                                               \
	"{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2,"     \
	" \"num_attention_heads\": 4, \"vocab_size\": 300"

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
	is_int(c.max_position_embeddings, 2048, "max_position_embeddings defaults to LlamaConfig's 2048");
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
	                " \"num_key_value_heads\": null, \"head_dim\": null, \"eos_token_id\": 9}",
	                &c, &err);
	is_int(rc, 0, "rope_parameters form loads (%s)", err.msg);
	ok(c.rope_theta == 1234.0f && c.rope_factor == 0, "rope_theta from rope_parameters, no scaling");
	is_int(c.num_key_value_heads, 4, "null kv heads: = heads");
	is_int(c.vocab_size, 32000, "vocab defaults to 32000 for llama");
	is_int(c.n_eos, 1, "eos_token_id as an integer");
	is_int(c.eos_token_ids[0], 9, "its value");

	rc = load_text_("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
	                " \"num_key_value_heads\": 2, \"vocab_size\": 300, \"tie_word_embeddings\": true,"
	                " \"use_sliding_window\": false, \"sliding_window\": 32768, \"max_window_layers\": 21,"
	                " \"bos_token_id\": null}",
	                &c, &err);
	is_int(rc, 0, "qwen2 config loads (%s)", err.msg);
	ok(c.attention_bias && !c.qk_norm && c.tie_word_embeddings, "qwen2: qkv bias, tied");
	is_int(c.bos_token_id, -1, "null bos is -1");
	is_int(c.max_position_embeddings, 32768, "qwen2 default max positions");

	rc = load_text_("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
	                " \"vocab_size\": 300, \"layer_types\": [\"full_attention\", \"full_attention\"]}",
	                &c, &err);
	is_int(rc, 0, "qwen3 config loads (%s)", err.msg);
	ok(!c.attention_bias && c.qk_norm, "qwen3: qk norm");
	is_int(c.head_dim, 128, "qwen3 head_dim defaults to 128 as Qwen3Config's");
	is_int(c.num_hidden_layers, 32, "layers default to 32");

	/* what is refused, with the field named */
	static const struct {
		const char *text, *want;
	} bad[] = {
		{ TINY_LLAMA ", \"hidden_act\": \"gelu\"}", "field 'hidden_act' is 'gelu'" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}",
		  "field 'rope_scaling.rope_type' is 'yarn'" },
		{ TINY_LLAMA ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
		  "field 'rope_scaling.low_freq_factor' is missing" },
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
		{ TINY_REST ", \"hidden_size\": 64, \"num_key_value_heads\": 3}", "not a multiple of 'num_key_value_heads'" },
		{ TINY_LLAMA ", \"eos_token_id\": [1, \"x\"]}", "field 'eos_token_id' has an element" },
		{ TINY_LLAMA ", \"eos_token_id\": 300}", "field 'eos_token_id' has 300" },
		{ TINY_REST ", \"rms_norm_eps\": 0}", "field 'rms_norm_eps' is not positive" },
		{ TINY_REST ", \"tie_word_embeddings\": 1}", "field 'tie_word_embeddings' is uint" },
		{ TINY_LLAMA ", \"quantization_config\": {\"bits\": 4}}", "field 'quantization_config'" },
		{ TINY_LLAMA ", \"hidden_size\": 128}", "field 'hidden_size' appears twice" },
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
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_);
	if (system(cmd))
		printf("# could not remove %s\n", tmpdir_);
	return tap_done();
}
