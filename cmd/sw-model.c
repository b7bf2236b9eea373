/*
 * sw-model - create, inspect and convert model directories.
 *
 *   sw-model init [-s size | -c config.json] [--seed n] [--dtype t] DIR
 *       a randomly initialised Llama-family model with the byte tokenizer
 *       (tiny-vl: a LLaVA, CLIP tower and Llama, with "<image>" added to it)
 *   sw-model info [--json] [--batch n] [--seq n] DIR
 *       its shapes, parameter count and the memory to train and generate
 *   sw-model convert [--dtype t] SRC DST
 *       SRC's weights (any dtype, sharded or not) as one safetensors file
 *
 * The work is libsw's (sw/model.h, sw/tokenizer.h); this file parses and
 * prints.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "yyjson/yyjson.h"
#include "cli.h"

enum { OPT_SEED = 0x100, OPT_DTYPE, OPT_JSON, OPT_BATCH, OPT_SEQ };

static const cli_opt opts[] = {
	{ 's', 's', "size", "size", "tiny|small|base|tiny-vl",
	  "init: the named size, tiny (~1M parameters), small (~13M), base (~100M) or tiny-vl (tiny\n"
	  "with a CLIP tower: a LLaVA); default tiny" },
	{ 'c', 'c', "config", "file", "file", "init: the shapes of this config.json instead of a named size" },
	{ OPT_SEED, 0, "seed", "n", NULL, "init: the seed of the random weights (default 0)" },
	{ OPT_DTYPE, 0, "dtype", "type", "f32|bf16", "init, convert: write the weights as f32 (default) or bf16" },
	{ OPT_JSON, 0, "json", NULL, NULL, "info: print one JSON object instead of text" },
	{ OPT_BATCH, 0, "batch", "n", NULL, "info: sequences per step in the memory estimates (default 4)" },
	{ OPT_SEQ, 0, "seq", "n", NULL, "info: tokens per sequence in the memory estimates (default 256)" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-model", "command dir [dir]", "dir",
	"Create a random model (init DIR), describe one (info DIR), or rewrite its weights as one\n"
	"safetensors file (convert SRC DST).",
	opts, "init|info|convert"
};

/* The named sizes: Llama shapes over the byte tokenizer's vocabulary. */
static const struct size_ {
	const char *name;
	int hidden, inter, layers, heads, kv_heads, max_pos;
} sizes_[] = {
	{ "tiny", 128, 384, 4, 4, 2, 1024 },
	{ "small", 384, 1536, 6, 6, 2, 2048 },
	{ "base", 768, 2560, 12, 12, 12, 2048 },
	{ "tiny-vl", 128, 384, 4, 4, 2, 1024 },
};

/* tiny-vl's vision half: CLIP, image 30 in patches of 6 (25 image tokens), as LLaVA wires it. */
static void tiny_vl_(sw_model_config *c)
{
	sw_vision_config *v = &c->vision;
	strcpy(v->model_type, "clip_vision_model");
	v->hidden_size = 64, v->intermediate_size = 256, v->num_hidden_layers = 3, v->num_attention_heads = 4;
	v->image_size = 30, v->patch_size = 6, v->num_channels = 3, v->layer_norm_eps = 1e-5f;
	strcpy(v->hidden_act, "quick_gelu");
	v->image_token_id = c->vocab_size++; /* "<image>", after the byte tokenizer's specials */
	v->feature_layers[0] = -2, v->n_feature_layers = 1;
	strcpy(v->projector_hidden_act, "gelu");
	v->projector_bias = true;
	v->image_seq_length = sw_model_image_tokens(c);
}

static void die_(const sw_error *e)
{
	cli_die("%s", e->msg[0] ? e->msg : sw_strerror(e->code));
}

/*
 * JSON goes out through yyjson (escaping included).  Numbers whose text is
 * chosen here go in raw: the shortest decimal of a float (g_), whole
 * numbers of a double (%.0f), so the output keeps the bytes it always had.
 */
static yyjson_mut_val *raw_(yyjson_mut_doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static yyjson_mut_val *raw_(yyjson_mut_doc *d, const char *fmt, ...)
{
	char buf[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return yyjson_mut_rawcpy(d, buf);
}

static yyjson_mut_doc *doc_new_(yyjson_mut_val **root)
{
	yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
	if (!d || !(*root = yyjson_mut_obj(d)))
		cli_die("out of memory");
	yyjson_mut_doc_set_root(d, *root);
	return d;
}

/* The document as text (malloc'd), freed with it. */
static char *doc_text_(yyjson_mut_doc *d, yyjson_write_flag flags)
{
	char *text = yyjson_mut_write(d, flags, NULL);
	yyjson_mut_doc_free(d);
	if (!text)
		cli_die("out of memory");
	return text;
}

static int exists_(const char *dir, const char *name)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return stat(p, &st) == 0;
}

/* A model directory we would write over: refuse, the user's weights are not ours to lose. */
static void refuse_existing_(const char *dir)
{
	static const char *names[] = { "config.json", "model.safetensors", "model.safetensors.index.json" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (exists_(dir, names[i]))
			cli_die("%s: already holds a model (%s); choose a new directory", dir, names[i]);
}

static void make_dir_(const char *dir)
{
	if (mkdir(dir, 0777) && errno != EEXIST)
		cli_die("%s: cannot create the directory: %s", dir, strerror(errno));
	struct stat st;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode))
		cli_die("%s: not a directory", dir);
}

/* Write text to dir/name through a temporary file and rename, so no half file is left. */
static void write_text_(const char *dir, const char *name, const char *text)
{
	char path[4200], tmp[4300];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		cli_die("%s: cannot create: %s", tmp, strerror(errno));
	int bad = fputs(text, f) < 0;
	bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		cli_die("%s: cannot write: %s", path, strerror(e));
	}
}

static void init_(const char *dir, const char *size, const char *config, uint64_t seed, sw_dtype dt)
{
	sw_error err = { 0 };
	sw_tokenizer *tok = sw_tokenizer_byte();
	if (!tok)
		cli_die("out of memory");
	int vocab = (int)sw_tokenizer_vocab(tok);
	sw_model_config c = { 0 };
	if (config) {
		if (sw_model_config_load(config, &c, &err))
			die_(&err);
		if (c.vocab_size < vocab)
			cli_die("%s: field 'vocab_size' is %d, smaller than the byte tokenizer's %d", config,
			        c.vocab_size, vocab);
		/* a LLaVA: "<image>" is added to the byte tokenizer at the next id, processors for CLIP only */
		if (c.vision.model_type[0] && c.vision.image_token_id != vocab)
			cli_die("%s: field 'image_token_index' is %d; the byte tokenizer's image token is %d", config,
			        c.vision.image_token_id, vocab);
		if (c.vision.model_type[0] && strcmp(c.vision.model_type, "clip_vision_model"))
			cli_die("%s: a %s tower: init writes the image processor of a CLIP tower only", config,
			        c.vision.model_type);
	} else {
		const struct size_ *s = NULL;
		for (size_t i = 0; i < sizeof sizes_ / sizeof *sizes_; i++)
			if (!strcmp(sizes_[i].name, size))
				s = &sizes_[i];
		if (!s)
			cli_usage("unknown size '%s' (tiny, small, base or tiny-vl)", size);
		strcpy(c.model_type, "llama");
		c.vocab_size = vocab;
		c.hidden_size = s->hidden;
		c.intermediate_size = s->inter;
		c.num_hidden_layers = s->layers;
		c.num_attention_heads = s->heads;
		c.num_key_value_heads = s->kv_heads;
		c.head_dim = s->hidden / s->heads;
		c.max_position_embeddings = s->max_pos;
		c.rms_norm_eps = 1e-5f;
		c.rope_theta = 10000.0f;
		if (!strcmp(size, "tiny-vl"))
			tiny_vl_(&c);
	}
	/* the tokenizer written beside the weights is the byte one: its specials rule */
	c.bos_token_id = sw_tokenizer_bos(tok);
	uint32_t stop[SW_MAX_EOS];
	size_t nstop = sw_tokenizer_stop_ids(tok, stop, SW_MAX_EOS);
	c.n_eos = 0;
	for (size_t i = 0; i < nstop && i < SW_MAX_EOS; i++)
		c.eos_token_ids[c.n_eos++] = (int)stop[i];
	int pad = sw_tokenizer_pad(tok);
	sw_tokenizer_free(tok);

	make_dir_(dir);
	refuse_existing_(dir);
	sw_model *m = sw_model_new(&c, &err);
	if (!m)
		die_(&err);
	sw_model_init_random(m, seed, 0.02f);
	if (sw_model_save(m, dir, dt, &err))
		die_(&err);
	if (sw_tokenizer_save_byte(dir, &err))
		die_(&err);
	if (c.vision.model_type[0] && sw_model_save_vision_files(&c, dir, "<image>", &err))
		die_(&err);
	/* transformers' layout, but the stop ids on one line: [1, 2] */
	char eos[128] = "";
	for (int i = 0; i < c.n_eos; i++)
		snprintf(eos + strlen(eos), sizeof eos - strlen(eos), "%s%d", i ? ", " : "", c.eos_token_ids[i]);
	yyjson_mut_val *g;
	yyjson_mut_doc *d = doc_new_(&g);
	yyjson_mut_obj_add_int(d, g, "bos_token_id", c.bos_token_id);
	yyjson_mut_obj_add_bool(d, g, "do_sample", false);
	yyjson_mut_obj_add_val(d, g, "eos_token_id", raw_(d, "%s%s%s", c.n_eos > 1 ? "[" : "", c.n_eos ? eos : "null",
	                                                  c.n_eos > 1 ? "]" : ""));
	yyjson_mut_obj_add_int(d, g, "pad_token_id", pad);
	char *text = doc_text_(d, YYJSON_WRITE_PRETTY_TWO_SPACES | YYJSON_WRITE_NEWLINE_AT_END);
	write_text_(dir, "generation_config.json", text);
	free(text);
	if (cli_progress_on())
		cli_note("%s: %s, %zu parameters, %s, seed %llu", dir,
		         config ? config : size, m->nparams, dt == SW_DT_F32 ? "f32" : "bf16",
		         (unsigned long long)seed);
	sw_model_free(m);
}

/* The shortest decimal that reads back as x: 1e-05, not 9.99999975e-06. */
static const char *g_(float x, char *buf, size_t n)
{
	if (x == (float)(long long)x && x < 1e15f && x > -1e15f) {
		snprintf(buf, n, "%.0f", (double)x); /* 500000, not 5e+05 */
		return buf;
	}
	for (int p = 1; p <= 9; p++) {
		snprintf(buf, n, "%.*g", p, (double)x);
		if (strtof(buf, NULL) == x)
			break;
	}
	return buf;
}

/* "1.2 MB": bytes in the largest unit that keeps a number at least 1. */
static const char *human_(double b, char *buf, size_t n)
{
	static const char *u[] = { "B", "KB", "MB", "GB", "TB" };
	int i = 0;
	while (b >= 1000 && i < 4)
		b /= 1000, i++;
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
	return buf;
}

static void info_(const char *dir, int json, uint64_t batch, uint64_t seq)
{
	sw_error err = { 0 };
	sw_model *m = sw_model_load(dir, &err);
	if (!m)
		die_(&err);
	const sw_model_config *c = &m->cfg;
	const double L = c->num_hidden_layers, H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
	const double Q = (double)c->num_attention_heads * c->head_dim, KV = (double)c->num_key_value_heads * c->head_dim;
	const double P = (double)m->nparams, tokens = (double)batch * (double)seq;
	/*
	 * Training: f32 weights, gradients and AdamW's m and v, 16 bytes a
	 * parameter; plus the activations a backward pass keeps, per token: in
	 * each layer both norms' inputs and outputs (4H), q, k, v and the
	 * attention output (2Q + 2KV), gate, up, silu(gate) and their product
	 * (4I), and a row of attention probabilities per head (heads x seq);
	 * after the layers the final norm (2H) and the logits with their
	 * softmax (2V); 4 bytes each.
	 */
	const double act_tok = L * (4 * H + 2 * Q + 2 * KV + 4 * I + (double)c->num_attention_heads * (double)seq) +
	                       2 * H + 2 * V;
	const double state = 16 * P, act = 4 * act_tok * tokens;
	/* Generation: f32 weights and a key and a value per layer, token and kv head. */
	const double kv_tok = 2 * L * KV * 4, kv = kv_tok * tokens;
	const sw_vision_config *v = &c->vision;
	const char *arch = v->model_type[0]                  ? "LlavaForConditionalGeneration"
	                   : !strcmp(c->model_type, "llama") ? "LlamaForCausalLM"
	                   : !strcmp(c->model_type, "qwen2") ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
	char fl[96] = "";
	for (int i = 0; i < v->n_feature_layers; i++)
		snprintf(fl + strlen(fl), sizeof fl - strlen(fl), "%s%d", i ? ", " : "", v->feature_layers[i]);
	char eos[128] = "", f1[32], f2[32], f3[32], f4[32];
	for (int i = 0; i < c->n_eos; i++)
		snprintf(eos + strlen(eos), sizeof eos - strlen(eos), "%s%d", i ? ", " : "", c->eos_token_ids[i]);
	if (json) {
		yyjson_mut_val *o, *x;
		yyjson_mut_doc *j = doc_new_(&o);
		yyjson_mut_obj_add_strcpy(j, o, "model_type", c->model_type);
		yyjson_mut_obj_add_str(j, o, "architecture", arch);
		yyjson_mut_obj_add_int(j, o, "vocab_size", c->vocab_size);
		yyjson_mut_obj_add_int(j, o, "hidden_size", c->hidden_size);
		yyjson_mut_obj_add_int(j, o, "intermediate_size", c->intermediate_size);
		yyjson_mut_obj_add_int(j, o, "num_hidden_layers", c->num_hidden_layers);
		yyjson_mut_obj_add_int(j, o, "num_attention_heads", c->num_attention_heads);
		yyjson_mut_obj_add_int(j, o, "num_key_value_heads", c->num_key_value_heads);
		yyjson_mut_obj_add_int(j, o, "head_dim", c->head_dim);
		yyjson_mut_obj_add_int(j, o, "max_position_embeddings", c->max_position_embeddings);
		yyjson_mut_obj_add_bool(j, o, "tie_word_embeddings", c->tie_word_embeddings);
		yyjson_mut_obj_add_bool(j, o, "attention_bias", c->attention_bias);
		yyjson_mut_obj_add_bool(j, o, "qk_norm", c->qk_norm);
		yyjson_mut_obj_add_val(j, o, "rope_theta", raw_(j, "%s", g_(c->rope_theta, f1, sizeof f1)));
		if (c->rope_factor > 0) {
			x = yyjson_mut_obj_add_obj(j, o, "rope_scaling");
			yyjson_mut_obj_add_str(j, x, "rope_type", "llama3");
			yyjson_mut_obj_add_val(j, x, "factor", raw_(j, "%s", g_(c->rope_factor, f1, sizeof f1)));
			yyjson_mut_obj_add_val(j, x, "low_freq_factor", raw_(j, "%s", g_(c->rope_low_freq_factor, f1, sizeof f1)));
			yyjson_mut_obj_add_val(j, x, "high_freq_factor",
			                       raw_(j, "%s", g_(c->rope_high_freq_factor, f1, sizeof f1)));
			yyjson_mut_obj_add_int(j, x, "original_max_position_embeddings", c->rope_original_max_position);
		} else {
			yyjson_mut_obj_add_null(j, o, "rope_scaling");
		}
		yyjson_mut_obj_add_val(j, o, "rms_norm_eps", raw_(j, "%s", g_(c->rms_norm_eps, f1, sizeof f1)));
		if (c->bos_token_id >= 0)
			yyjson_mut_obj_add_int(j, o, "bos_token_id", c->bos_token_id);
		else
			yyjson_mut_obj_add_null(j, o, "bos_token_id");
		x = yyjson_mut_obj_add_arr(j, o, "eos_token_id");
		for (int i = 0; i < c->n_eos; i++)
			yyjson_mut_arr_add_int(j, x, c->eos_token_ids[i]);
		if (v->model_type[0]) {
			x = yyjson_mut_obj_add_obj(j, o, "vision");
			yyjson_mut_obj_add_strcpy(j, x, "model_type", v->model_type);
			yyjson_mut_obj_add_int(j, x, "image_size", v->image_size);
			yyjson_mut_obj_add_int(j, x, "patch_size", v->patch_size);
			yyjson_mut_obj_add_int(j, x, "image_tokens", sw_model_image_tokens(c));
			yyjson_mut_obj_add_int(j, x, "image_token_id", v->image_token_id);
			yyjson_mut_obj_add_int(j, x, "num_hidden_layers", v->num_hidden_layers);
			yyjson_mut_obj_add_int(j, x, "hidden_size", v->hidden_size);
			yyjson_mut_obj_add_int(j, x, "intermediate_size", v->intermediate_size);
			yyjson_mut_obj_add_int(j, x, "num_attention_heads", v->num_attention_heads);
			yyjson_mut_obj_add_strcpy(j, x, "hidden_act", v->hidden_act);
			yyjson_mut_obj_add_val(j, x, "vision_feature_layer", raw_(j, "%s%s%s", v->n_feature_layers > 1 ? "[" : "",
			                                                         fl, v->n_feature_layers > 1 ? "]" : ""));
			yyjson_mut_obj_add_str(j, x, "vision_feature_select_strategy", v->select_full ? "full" : "default");
			yyjson_mut_obj_add_strcpy(j, x, "projector_hidden_act", v->projector_hidden_act);
		}
		yyjson_mut_obj_add_val(j, o, "parameters", raw_(j, "%.0f", P));
		yyjson_mut_obj_add_val(j, o, "weights_bytes", raw_(j, "%.0f", 4 * P));
		x = yyjson_mut_obj_add_obj(j, o, "train");
		yyjson_mut_obj_add_uint(j, x, "batch", batch);
		yyjson_mut_obj_add_uint(j, x, "seq", seq);
		yyjson_mut_obj_add_val(j, x, "state_bytes", raw_(j, "%.0f", state));
		yyjson_mut_obj_add_val(j, x, "activation_bytes", raw_(j, "%.0f", act));
		yyjson_mut_obj_add_val(j, x, "total_bytes", raw_(j, "%.0f", state + act));
		x = yyjson_mut_obj_add_obj(j, o, "generate");
		yyjson_mut_obj_add_uint(j, x, "batch", batch);
		yyjson_mut_obj_add_uint(j, x, "seq", seq);
		yyjson_mut_obj_add_val(j, x, "kv_bytes_per_token", raw_(j, "%.0f", kv_tok));
		yyjson_mut_obj_add_val(j, x, "kv_bytes", raw_(j, "%.0f", kv));
		yyjson_mut_obj_add_val(j, x, "total_bytes", raw_(j, "%.0f", 4 * P + kv));
		char *text = doc_text_(j, 0);
		printf("%s\n", text);
		free(text);
	} else {
		char a[32], b[32], d[32];
		printf("%s\n", dir);
		printf("  architecture    %s (model_type %s)\n", arch, c->model_type);
		printf("  layers          %d, hidden %d, intermediate %d\n", c->num_hidden_layers, c->hidden_size,
		       c->intermediate_size);
		printf("  attention       %d heads, %d key/value heads, head_dim %d%s%s\n", c->num_attention_heads,
		       c->num_key_value_heads, c->head_dim, c->attention_bias ? ", q/k/v bias" : "",
		       c->qk_norm ? ", q/k norm" : "");
		if (c->rope_factor > 0)
			printf("  rope            theta %s, llama3 scaling: factor %s, low %s, high %s, original %d\n",
			       g_(c->rope_theta, f1, sizeof f1), g_(c->rope_factor, f2, sizeof f2),
			       g_(c->rope_low_freq_factor, f3, sizeof f3), g_(c->rope_high_freq_factor, f4, sizeof f4),
			       c->rope_original_max_position);
		else
			printf("  rope            theta %s\n", g_(c->rope_theta, f1, sizeof f1));
		printf("  rms_norm_eps    %s\n", g_(c->rms_norm_eps, f1, sizeof f1));
		printf("  vocabulary      %d%s, bos %d, eos %s\n", c->vocab_size,
		       c->tie_word_embeddings ? ", tied embeddings" : "", c->bos_token_id, c->n_eos ? eos : "none");
		printf("  context         %d positions\n", c->max_position_embeddings);
		if (v->model_type[0]) {
			printf("  vision          %s, image %d, patch %d: %d tokens an image (id %d); %d layers, hidden %d, "
			       "intermediate %d, %d heads, %s\n",
			       v->model_type, v->image_size, v->patch_size, sw_model_image_tokens(c), v->image_token_id,
			       v->num_hidden_layers, v->hidden_size, v->intermediate_size, v->num_attention_heads,
			       v->hidden_act);
			printf("  projector       %s, from hidden state %s, strategy %s (the estimates below leave "
			       "the tower out)\n",
			       v->projector_hidden_act, fl, v->select_full ? "full" : "default");
		}
		printf("  parameters      %.0f (%.2fM)\n", P, P / 1e6);
		printf("  weights         %s in f32\n", human_(4 * P, a, sizeof a));
		printf("  train           %s: %s weights, gradients, AdamW m and v (16 B/param) + %s activations "
		       "(%llu x %llu tokens)\n",
		       human_(state + act, a, sizeof a), human_(state, b, sizeof b), human_(act, d, sizeof d),
		       (unsigned long long)batch, (unsigned long long)seq);
		printf("  generate        %s: %s weights + %s KV cache (%.0f B/token, %llu x %llu tokens)\n",
		       human_(4 * P + kv, a, sizeof a), human_(4 * P, b, sizeof b), human_(kv, d, sizeof d), kv_tok,
		       (unsigned long long)batch, (unsigned long long)seq);
	}
	sw_model_free(m);
}

/* Copy the files of src that are not the weights or config.json (tokenizer, generation config). */
static void copy_others_(const char *src, const char *dst)
{
	DIR *d = opendir(src);
	if (!d)
		cli_die("%s: cannot open the directory: %s", src, strerror(errno));
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		size_t len = strlen(n);
		if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
		    (len > 12 && !strcmp(n + len - 12, ".safetensors")))
			continue;
		char from[4200], to[4200];
		struct stat st;
		snprintf(from, sizeof from, "%s/%s", src, n);
		snprintf(to, sizeof to, "%s/%s", dst, n);
		if (stat(from, &st) || !S_ISREG(st.st_mode))
			continue;
		FILE *in = fopen(from, "rb");
		if (!in)
			cli_die("%s: cannot open: %s", from, strerror(errno));
		char *buf = malloc((size_t)st.st_size + 1);
		if (!buf)
			cli_die("out of memory");
		size_t got = fread(buf, 1, (size_t)st.st_size, in);
		if (ferror(in) || got != (size_t)st.st_size)
			cli_die("%s: read error", from);
		fclose(in);
		buf[got] = 0;
		FILE *out = fopen(to, "wb");
		if (!out || fwrite(buf, 1, got, out) != got || fclose(out))
			cli_die("%s: cannot write: %s", to, strerror(errno));
		free(buf);
	}
	closedir(d);
}

static void convert_(const char *src, const char *dst, sw_dtype dt)
{
	sw_error err = { 0 };
	sw_model *m = sw_model_load(src, &err);
	if (!m)
		die_(&err);
	make_dir_(dst);
	refuse_existing_(dst);
	copy_others_(src, dst);
	if (sw_model_save(m, dst, dt, &err))
		die_(&err);
	if (cli_progress_on())
		cli_note("%s -> %s: %zu parameters, %s", src, dst, m->nparams,
		         dt == SW_DT_F32 ? "f32" : "bf16");
	sw_model_free(m);
}

int main(int argc, char **argv)
{
	const char *arg, *size = NULL, *config = NULL;
	int c, optind_, json = 0, seed_set = 0, dtype_set = 0, batch_set = 0, seq_set = 0;
	uint64_t seed = 0, batch = 4, seq = 256;
	sw_dtype dt = SW_DT_F32;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 's':
			size = arg;
			break;
		case 'c':
			config = arg;
			break;
		case OPT_SEED:
			seed = cli_uint("--seed", arg, 0, UINT64_MAX);
			seed_set = 1;
			break;
		case OPT_DTYPE:
			if (!strcmp(arg, "f32"))
				dt = SW_DT_F32;
			else if (!strcmp(arg, "bf16"))
				dt = SW_DT_BF16;
			else
				cli_usage("unknown dtype '%s' (f32 or bf16)", arg);
			dtype_set = 1;
			break;
		case OPT_JSON:
			json = 1;
			break;
		case OPT_BATCH:
			batch = cli_uint("--batch", arg, 1, 1 << 20);
			batch_set = 1;
			break;
		case OPT_SEQ:
			seq = cli_uint("--seq", arg, 1, 1 << 24);
			seq_set = 1;
			break;
		}
	}
	char **args = argv + optind_;
	int n = argc - optind_;
	if (n < 1)
		cli_usage("no command (init, info or convert)");
	const char *cmd = args[0];
	args++, n--;
	/* an option another command takes is a mistake, not something to ignore */
	int is_init = !strcmp(cmd, "init"), is_info = !strcmp(cmd, "info"), is_conv = !strcmp(cmd, "convert");
	if (!is_init && !is_info && !is_conv)
		cli_usage("unknown command '%s' (init, info or convert)", cmd);
	const char *bad = !is_init && size ? "--size" : !is_init && config ? "--config" : !is_init && seed_set ? "--seed"
	                  : is_info && dtype_set ? "--dtype" : !is_info && json ? "--json"
	                  : !is_info && batch_set ? "--batch" : !is_info && seq_set ? "--seq" : NULL;
	if (bad)
		cli_usage("option '%s' does not apply to '%s'", bad, cmd);
	if (is_conv) {
		if (n != 2)
			cli_usage("convert takes a source and a destination directory");
		convert_(args[0], args[1], dt);
	} else {
		if (n != 1)
			cli_usage("%s takes one model directory", cmd);
		if (is_init) {
			if (size && config)
				cli_usage("options '--size' and '--config' exclude each other");
			init_(args[0], size ? size : "tiny", config, seed, dt);
		} else {
			info_(args[0], json, batch, seq);
		}
	}
	cli_exit(0);
}
