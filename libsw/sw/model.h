/*
 * sw/model.h - a Llama-family decoder, or a LLaVA model (that decoder with a
 * CLIP or SigLIP vision tower and a projector): its configuration, and its
 * parameters in one arena with named views.
 *
 * Every parameter is float32 in memory, whatever the file held (f32, f16 or
 * bf16 are converted on load), laid out in one contiguous block in a fixed
 * order (the order of sw_model.tensors), so that a shared-memory or CUDA IPC
 * store can hold the whole model, and a second arena of the same size can
 * hold its gradients or optimiser moments with the same views
 * (sw_model_view()).  Matrices keep Hugging Face's layout: a Linear of
 * in_features -> out_features is [out, in], row-major.
 *
 * A model lives on a backend (sw/backend.h): its arena, and every pointer
 * into it (sw_tensor.data, sw_layer, embed, ...), is that backend's device
 * memory.  sw_model_new(), _view() and _load() put it on the CPU backend,
 * whose memory is host memory, so those pointers may be read and written
 * directly; on any other backend the host reaches the parameters only
 * through the functions here (sw_model_read/_write/_zero/_copy, save, load).
 *
 * Ownership: a model made by sw_model_view*() borrows its arena; one made by
 * sw_model_new*()/sw_model_load*() owns it.  sw_model_free(NULL) is a no-op.
 */
#ifndef SW_MODEL_H
#define SW_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "error.h"
#include "save.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_dtype { SW_DT_F32, SW_DT_F16, SW_DT_BF16 } sw_dtype;

#define SW_MAX_EOS 8
#define SW_MAX_FEATURE_LAYERS 8

/*
 * The vision half of a LLaVA model (LlavaForConditionalGeneration): its
 * tower (CLIP or SigLIP, config.json's vision_config) and how its features
 * reach the language model (the LLaVA fields of config.json).  model_type
 * "" is a text-only model.
 */
typedef struct sw_vision_config {
	char model_type[32];       /* "clip_vision_model" or "siglip_vision_model"; "" none */
	int hidden_size;
	int intermediate_size;
	int num_hidden_layers;
	int num_attention_heads;
	int image_size;            /* the square the processor gives (pixel_values [3][size][size]) */
	int patch_size;
	int num_channels;
	float layer_norm_eps;
	char hidden_act[24];       /* "quick_gelu", "gelu", "gelu_pytorch_tanh", "silu" */
	/* LLaVA */
	int image_token_id;        /* image_token_index (older) or image_token_id */
	int feature_layers[SW_MAX_FEATURE_LAYERS]; /* vision_feature_layer: hidden-state indices, < 0 from the end */
	int n_feature_layers;      /* 1 for an int in config.json; a list's features are concatenated */
	bool select_full;          /* vision_feature_select_strategy "full"; false: "default" (CLS dropped) */
	char projector_hidden_act[24];
	bool projector_bias;       /* multimodal_projector_bias */
	int image_seq_length;      /* what config.json says (the processor's count), informational */
} sw_vision_config;

typedef struct sw_model_config {
	char model_type[32];       /* "llama", "qwen2", "qwen3", ... as in config.json */
	int vocab_size;
	int hidden_size;
	int intermediate_size;
	int num_hidden_layers;
	int num_attention_heads;
	int num_key_value_heads;   /* grouped-query attention; == heads when absent */
	int head_dim;              /* hidden_size / heads when absent */
	int max_position_embeddings;
	float rms_norm_eps;
	float rope_theta;
	/* rope_scaling {"rope_type": "llama3", ...}; factor 0 when absent */
	float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_original_max_position;
	bool tie_word_embeddings;
	bool attention_bias;       /* q/k/v projections have biases (Qwen2) */
	bool qk_norm;              /* per-head RMSNorm of q and k (Qwen3) */
	int bos_token_id;          /* -1 when absent */
	int eos_token_ids[SW_MAX_EOS];
	int n_eos;
	sw_vision_config vision;   /* a LLaVA model's tower; vision.model_type "" for text only */
} sw_model_config;

/* One named parameter: a view into the arena. */
typedef struct sw_tensor {
	char name[96];             /* Hugging Face name, "model.layers.0.self_attn.q_proj.weight" */
	int ndim;
	int64_t shape[4];          /* a conv's weight (the patch embedding) has 4 */
	size_t numel;
	size_t offset;             /* in floats from the start of the arena */
	float *data;
} sw_tensor;

typedef struct sw_layer {
	float *attn_norm;          /* input_layernorm.weight [hidden] */
	float *wq, *wk, *wv;       /* q_proj [heads*head_dim, hidden], k/v_proj [kv_heads*head_dim, hidden] */
	float *bq, *bk, *bv;       /* their biases, NULL without attention_bias */
	float *q_norm, *k_norm;    /* [head_dim], NULL without qk_norm */
	float *wo;                 /* o_proj [hidden, heads*head_dim] */
	float *mlp_norm;           /* post_attention_layernorm.weight [hidden] */
	float *w_gate, *w_up;      /* [intermediate, hidden] */
	float *w_down;             /* [hidden, intermediate] */
} sw_layer;

/* One encoder layer of a vision tower (every Linear has a bias). */
typedef struct sw_vision_layer {
	float *ln1_w, *ln1_b;      /* layer_norm1 [vh] */
	float *wq, *bq, *wk, *bk, *wv, *bv; /* self_attn.{q,k,v}_proj [vh, vh], [vh] */
	float *wo, *bo;            /* self_attn.out_proj */
	float *ln2_w, *ln2_b;      /* layer_norm2 */
	float *fc1_w, *fc1_b;      /* mlp.fc1 [vi, vh] */
	float *fc2_w, *fc2_b;      /* mlp.fc2 [vh, vi] */
} sw_vision_layer;

/*
 * A LLaVA model's vision parameters, after the language model's in the
 * same arena.  In-memory names: "vision_tower.X" and
 * "multi_modal_projector.X" (X as transformers names it inside the tower);
 * the language model's keep the text model's names ("model.X", "lm_head.weight").
 */
typedef struct sw_vision_weights {
	float *class_embedding;    /* [vh], CLIP only */
	float *patch_w, *patch_b;  /* patch_embedding [vh, channels, p, p]; bias SigLIP only */
	float *pos;                /* position_embedding [npos, vh] */
	float *pre_w, *pre_b;      /* pre_layrnorm, CLIP only */
	sw_vision_layer *layers;   /* [vision.num_hidden_layers] */
	float *post_w, *post_b;    /* post_layernorm (kept, not used by LLaVA's features) */
	float *proj1_w, *proj1_b;  /* multi_modal_projector.linear_1 [hidden, vh * n_feature_layers] */
	float *proj2_w, *proj2_b;  /* linear_2 [hidden, hidden]; biases NULL without projector_bias */
} sw_vision_weights;

typedef struct sw_model {
	sw_model_config cfg;
	float *arena;              /* every parameter, one block of nparams floats */
	size_t nparams;
	bool owns_arena;
	sw_tensor *tensors;        /* the named views, in arena order */
	size_t ntensors;
	float *embed;              /* model.embed_tokens.weight [vocab, hidden] */
	sw_layer *layers;          /* [num_hidden_layers] */
	float *final_norm;         /* model.norm.weight [hidden] */
	float *lm_head;            /* lm_head.weight [vocab, hidden]; == embed when tied */
	const sw_backend *backend; /* where the arena lives (never NULL) */
	sw_vision_weights vision;  /* a LLaVA model's (cfg.vision.model_type set), else all NULL */
} sw_model;

/*
 * The messages of the functions below that read or write files start with
 * the file they are about ("m/config.json: field 'hidden_act' ..."), since a
 * model is several files; those about a configuration in memory name the
 * field.
 */

/*
 * Read a Hugging Face config.json (model_type llama, qwen2 or qwen3; SmolLM
 * and TinyLlama are "llama") into c, with the defaults transformers applies
 * to what is absent.  Both forms of the RoPE settings are read: rope_theta
 * with rope_scaling (transformers 4) and rope_parameters (transformers 5).
 * A feature this engine does not implement (another hidden_act, a rope type
 * other than default or llama3, sliding-window attention in use, mixture of
 * experts, biases on o_proj or the MLP) is SW_EFORMAT naming the field.
 *
 * model_type "llava" (LlavaForConditionalGeneration) is read into c and
 * c->vision: text_config as above, vision_config (clip_vision_model or
 * siglip_vision_model without its pooling head) and the LLaVA fields.
 * transformers 5 writes every field; transformers 4 wrote these configs as
 * a diff against their classes' defaults, so what is absent there takes
 * the default of LlavaConfig (image_token_index 32000, vision_feature_layer
 * -2, strategy "default", projector_hidden_act "gelu", projector bias,
 * image_seq_length 576), of CLIPVisionConfig / SiglipVisionConfig (hidden
 * 768, intermediate 3072, 12 layers, 12 heads, 3 channels, image 224, patch
 * 32 / 16, quick_gelu / gelu_pytorch_tanh, epsilon 1e-5 / 1e-6) and, in
 * text_config alone, of LlamaConfig / Qwen2Config / Qwen3Config (vocabulary
 * 32000 / 151936, hidden 4096, intermediate 11008 / 22016, 32 layers and
 * heads, 2048 / 32768 positions, epsilon 1e-6).  text_config and
 * vision_config themselves are required.
 */
int sw_model_config_load(const char *config_json_path, sw_model_config *c, sw_error *err);
/* Check the sizes of c (positive, heads divisible by kv heads, no overflow). */
int sw_model_config_check(const sw_model_config *c, sw_error *err);
/* Write c as a config.json transformers loads; atomically (temp file, rename). */
int sw_model_config_save(const sw_model_config *c, const char *path, sw_error *err);
/*
 * Image tokens one image takes in a LLaVA prompt (each <image> of the text
 * expanded to this many, as transformers' processor does): the tower's
 * patches, plus CLIP's class token under vision_feature_select_strategy
 * "full"; 0 for a text model.
 */
int sw_model_image_tokens(const sw_model_config *c);
/* The number of floats in the arena of a model of this configuration. */
size_t sw_model_config_nparams(const sw_model_config *c);

/* A model on the CPU backend whose tensors view arena (nparams floats), which it borrows. */
sw_model *sw_model_view(const sw_model_config *c, float *arena, sw_error *err);
/* A model on the CPU backend that owns a zeroed, 64-byte-aligned arena. */
sw_model *sw_model_new(const sw_model_config *c, sw_error *err);
/* The same on backend be (NULL: cpu): a zeroed arena of be's memory. */
sw_model *sw_model_new_on(const sw_backend *be, const sw_model_config *c, sw_error *err);
/*
 * A model on be over host memory it borrows (a shared-memory store's arena,
 * page-aligned): the backend's memory for as long as the model lives (on
 * "guard", out of the host's reach until sw_model_free() gives it back).
 * Only a backend whose memory is host memory can borrow (cpu, guard);
 * another is SW_EINVAL.  A model of the same configuration viewing a second
 * arena is how a gradient or an AdamW moment lives on a backend too.
 */
sw_model *sw_model_view_on(const sw_backend *be, const sw_model_config *c, float *arena,
                           sw_error *err);
/*
 * Fill the parameters: matrices (and the embedding) from normal(0, std),
 * RMSNorm weights 1, biases 0.  The same seed gives the same bits on every
 * machine (splitmix64 and Box-Muller, not rand()).  SW_OK, or an SW_E* code
 * when a device model could not be written.
 */
int sw_model_init_random(sw_model *m, uint64_t seed, float std);
/* Every parameter set to 0 (a gradient before its first micro-batch). */
int sw_model_zero(sw_model *m, sw_error *err);
/* The whole arena (nparams floats) to host memory, or from it. */
int sw_model_read(const sw_model *m, float *host, sw_error *err);
int sw_model_write(sw_model *m, const float *host, sw_error *err);
/* dst's parameters := src's (same configuration; the backends may differ). */
int sw_model_copy(sw_model *dst, const sw_model *src, sw_error *err);
/* The tensor of that Hugging Face name, or NULL. */
const sw_tensor *sw_model_tensor(const sw_model *m, const char *name);
void sw_model_free(sw_model *m);

/*
 * A model directory in the Hugging Face layout: config.json and either
 * model.safetensors or model.safetensors.index.json with its shards (the
 * single file wins when both are there, as in transformers).  F32, F16 and
 * BF16 tensors are read through mmap and converted to float32, the file's pages
 * given back as they are copied (loading peaks at the arena, not twice it).  Every
 * tensor of the configuration must be there once, with its shape; a tensor
 * the model does not have, a NaN or Inf, a damaged header or truncated data
 * is an error naming the file and the tensor.  Two things are accepted and
 * not loaded: "*.rotary_emb.inv_freq" (derived from config.json) and, in a
 * tied model, an lm_head.weight equal to the embedding.
 */
sw_model *sw_model_load(const char *dir, sw_error *err);
/* The same onto backend be (NULL: cpu): the one call a program needs for --device. */
sw_model *sw_model_load_on(const sw_backend *be, const char *dir, sw_error *err);
/* Only the weights of dir, into m's arena (a view of a shared store, say), on any backend. */
int sw_model_load_weights(sw_model *m, const char *dir, sw_error *err);
/*
 * Write dir/model.safetensors (dt SW_DT_F32 or SW_DT_BF16, names as Hugging
 * Face's, tensors sorted by name, __metadata__ {"format": "pt"}) and
 * dir/config.json, each atomically; dir is created when missing.  An f32
 * model loaded from a file the safetensors library wrote is saved as the
 * same bytes.
 */
int sw_model_save(const sw_model *m, const char *dir, sw_dtype dt, sw_error *err);
/* The same, the weights' file written as o says (sw/save.h: its digest noted, around the page cache). */
int sw_model_save_with(const sw_model *m, const char *dir, sw_dtype dt, const sw_save_opts *o, sw_error *err);
/*
 * Beside a LLaVA model with a CLIP tower in dir, the files a processor
 * needs: image_token (the text, "<image>") added to dir/tokenizer.json at
 * the config's image_token_id, which must be the tokenizer's next id, and
 * to tokenizer_config.json (extra_special_tokens); preprocessor_config.json
 * (CLIPImageProcessor: resize the shortest edge to image_size, bicubic,
 * centre crop to image_size, rescale by 1/255, CLIP's mean and std) and
 * processor_config.json (LlavaProcessor, which expands each image token to
 * sw_model_image_tokens()).
 */
int sw_model_save_vision_files(const sw_model_config *c, const char *dir, const char *image_token,
                               sw_error *err);
/* Only the safetensors file, to path. */
int sw_model_save_weights(const sw_model *m, const char *path, sw_dtype dt, sw_error *err);

#pragma GCC visibility pop

#endif
