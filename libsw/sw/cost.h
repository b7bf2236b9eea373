/*
 * sw/cost.h - the estimated compute cost of a sample, for sorting and
 * balancing (sw-sort, sw-balance: one function, so both agree).
 *
 * The cost is in floating-point operations (FLOPs):
 *
 *   T    = prompt tokens + response tokens + media tokens
 *   cost = s * (linear * T + attention * T^2)
 *        + s * sum over media items m of (enc_linear * P_m + enc_attention * P_m^2)
 *
 * linear = 2 * N (N: the parameters of the decoder layers and the output
 * head, the matrices every token passes through); attention = 2 * layers *
 * heads * head_dim (causal QK^T and AV); P_m the patches (or audio
 * positions) of media item m in its encoder, and enc_* the same
 * coefficients of that encoder (full, not causal, attention: 4 * layers *
 * width).  s = 1 for generation or scoring, 3 for training (forward and
 * backward).  A media item adds P_m / merge^2 tokens to T.  The defaults, and
 * how config.json sets each coefficient, are in sw-balance(1).
 *
 * Tokens come from prompt_tokens/response_tokens when present, else from
 * the model's tokenizer when the model was loaded from a directory, else
 * are estimated as ceil(bytes / 4) of the text.
 *
 * Ownership: the caller owns a model from new/load until sw_cost_model_free
 * (free(NULL) is a no-op); sw_cost_sample only reads the record.  A model is
 * read-only after setup, so threads may share it.
 */
#ifndef SW_COST_H
#define SW_COST_H

#include <stdint.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/* The coefficients; see the formula above. */
typedef struct sw_cost_params {
	double linear;          /* FLOPs per decoder token: 2 * N */
	double attention;       /* FLOPs per token^2 of one sequence: 2 * layers * heads * head_dim */
	double enc_linear;      /* FLOPs per image patch in the vision encoder */
	double enc_attention;   /* FLOPs per patch^2 of one image: 4 * layers * width */
	double audio_linear;    /* FLOPs per audio position in the audio encoder */
	double audio_attention; /* FLOPs per position^2 of one clip */
	int patch_size;         /* pixels per patch side */
	int merge;              /* patches merged per token side (spatial_merge_size) */
	int temporal_patch;     /* video frames per patch (temporal_patch_size) */
	int image_tokens;       /* a tower that takes every picture at one size (LLaVA's, resized and
	                         * cropped to its image_size): patches and tokens of any image; 0: from
	                         * the picture's size as above */
	double audio_frames_per_s;   /* mel frames a second (100: a 10 ms hop) */
	int audio_stride;       /* mel frames per encoder position (2) */
	int audio_pool;         /* encoder positions per decoder token (2) */
	double bytes_per_token; /* for text without tokens and no tokenizer */
	double scale;           /* s: 1, or 3 when training */
} sw_cost_params;

/* What one sample comes to. */
typedef struct sw_cost {
	uint64_t prompt_tokens, response_tokens, media_tokens;
	uint64_t tokens;        /* T, their sum */
	uint64_t patches;       /* encoder patches and audio positions, all media together */
	double linear, attention, media; /* the three terms of the formula, scaled by s */
	double total;           /* FLOPs */
	int estimated;          /* some text was measured in bytes, not tokenised */
} sw_cost;

typedef struct sw_cost_model sw_cost_model;

/* The default model (a 7B Llama-2 shape, a Qwen2-VL vision tower, a Whisper-large-sized audio encoder). */
sw_cost_model *sw_cost_model_new(void);
/* The coefficients of dir/config.json and dir's tokenizer; NULL and err on failure. */
sw_cost_model *sw_cost_model_load(const char *dir, sw_error *err);
/* Exactly these coefficients (checked: finite, non-negative, sizes >= 1); NULL and err if bad. */
sw_cost_model *sw_cost_model_from(const sw_cost_params *p, sw_error *err);
void sw_cost_model_free(sw_cost_model *m);

/* 1: training (s = 3), 0: generation or scoring (s = 1, the default). */
void sw_cost_model_set_train(sw_cost_model *m, int train);
/* A stage's name, "generate" (0) or "train" (1), into *train; SW_EINVAL for another. */
int sw_cost_stage_parse(const char *name, int *train);
/* The model of dir (NULL: the default one) priced for the stage: new or load, then set_train. */
sw_cost_model *sw_cost_model_for(const char *dir, int train, sw_error *err);
void sw_cost_model_params(const sw_cost_model *m, sw_cost_params *p);

/*
 * The cost of the sample rec.  A field of the wrong type (prompt_tokens not
 * an array, a media item without sizes, ...) is SW_ETYPE or SW_EFORMAT with
 * err->msg naming the field; err->record is left for the caller to fill.
 */
int sw_cost_sample(const sw_cost_model *m, sw_rec *rec, sw_cost *out, sw_error *err);

#pragma GCC visibility pop

#endif
