/*
 * tiny_model.h - the configuration the unit tests build their small random
 * models from: 2 layers, 4 query heads over 2 key/value heads (so grouped-
 * query attention is exercised), RoPE theta 1e4, RMSNorm eps 1e-6, no BOS,
 * no EOS; the family and the sizes as given, the rest off (a caller sets
 * attention_bias, qk_norm, tie_word_embeddings or end tokens itself).
 */
#ifndef SW_TEST_TINY_MODEL_H
#define SW_TEST_TINY_MODEL_H
#include <stdio.h>
#include <string.h>
#include "sw/model.h"

static inline sw_model_config tiny_config(const char *type, int vocab, int hidden, int inter,
                                          int head_dim, int max_pos)
{
	sw_model_config c;
	memset(&c, 0, sizeof c);
	snprintf(c.model_type, sizeof c.model_type, "%s", type);
	c.vocab_size = vocab;
	c.hidden_size = hidden;
	c.intermediate_size = inter;
	c.num_hidden_layers = 2;
	c.num_attention_heads = 4;
	c.num_key_value_heads = 2;
	c.head_dim = head_dim;
	c.max_position_embeddings = max_pos;
	c.rms_norm_eps = 1e-6f;
	c.rope_theta = 10000;
	c.bos_token_id = -1;
	return c;
}

/* SmolLM2-135M's shapes (hidden 576, 30 layers, 9 heads over 3 key/value
 * heads of 64, intermediate 1536, vocabulary 49152, tied: SMOL135_PARAMS
 * parameters), for the tests of what budgets hold at a real size. */
#define SMOL135_PARAMS ((size_t)134515008)
static inline sw_model_config smol135_config(void)
{
	sw_model_config c = tiny_config("llama", 49152, 576, 1536, 64, 2048);
	c.num_hidden_layers = 30;
	c.num_attention_heads = 9;
	c.num_key_value_heads = 3;
	c.tie_word_embeddings = true;
	return c;
}
#endif
