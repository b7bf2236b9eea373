/*
 * sw/model.h - a Llama-family decoder: its configuration, and its parameters
 * in one arena with named views.
 *
 * Every parameter is float32 in memory, whatever the file held (f32, f16 or
 * bf16 are converted on load), laid out in one contiguous block in a fixed
 * order (the order of sw_model.tensors), so that a shared-memory or CUDA IPC
 * store can hold the whole model, and a second arena of the same size can
 * hold its gradients or optimiser moments with the same views
 * (sw_model_view()).  Matrices keep Hugging Face's layout: a Linear of
 * in_features -> out_features is [out, in], row-major.
 *
 * Ownership: a model made by sw_model_view() borrows its arena; one made by
 * sw_model_new()/sw_model_load() owns it.  sw_model_free(NULL) is a no-op.
 */
#ifndef SW_MODEL_H
#define SW_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

typedef enum sw_dtype { SW_DT_F32, SW_DT_F16, SW_DT_BF16 } sw_dtype;

#define SW_MAX_EOS 8

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
} sw_model_config;

/* One named parameter: a view into the arena. */
typedef struct sw_tensor {
	char name[96];             /* Hugging Face name, "model.layers.0.self_attn.q_proj.weight" */
	int ndim;
	int64_t shape[2];
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
} sw_model;

#endif
