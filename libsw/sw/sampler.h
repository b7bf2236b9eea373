/*
 * sw/sampler.h - choosing the next token from a row of logits: temperature,
 * top-k, top-p (nucleus), min-p, greedy at temperature 0, driven by a
 * counter-based random number generator.
 *
 * The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; the one PyTorch and JAX use): a pure function
 * of a key (the seed) and a counter, so the draw for token `step` of
 * response `k` of prompt `stream` is the same whichever batch it ran in and
 * in whatever order sequences finish.  Nothing is carried from one draw to
 * the next.
 *
 * Log-probabilities are those of the sampling policy: log softmax(logits /
 * T) at temperature T > 0 (T = 0, greedy, counts as T = 1), before top-k,
 * top-p and min-p cut the distribution - the convention of verl and TRL,
 * whose trainers divide the logits by the rollout temperature.
 *
 * Ownership: a sampler owns its scratch buffers; sw_sampler_free(NULL) is a
 * no-op.  One sampler serves one thread.
 */
#ifndef SW_SAMPLER_H
#define SW_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_sampling {
	double temperature;        /* 0: greedy; else > 0 */
	int top_k;                 /* keep the k most probable; 0: off */
	double top_p;              /* keep the smallest set of probability >= top_p; 1: off */
	double min_p;              /* keep tokens of probability >= min_p * the largest; 0: off */
} sw_sampling;

/* Temperature 1, no truncation. */
sw_sampling sw_sampling_defaults(void);
/* SW_EINVAL naming the setting when one is out of range (or not finite). */
int sw_sampling_check(const sw_sampling *p, sw_error *err);

/* Philox4x32-10 of counter ctr under key: four 32-bit words into out. */
void sw_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/*
 * A uniform double in [0, 1) (53 random bits) for (seed, stream, k, step):
 * the counter is (step, k, stream low, stream high), the key the seed.
 */
double sw_rng_uniform(uint64_t seed, uint64_t stream, uint32_t k, uint32_t step);

typedef struct sw_sampler sw_sampler;

sw_sampler *sw_sampler_new(int vocab, const sw_sampling *p, sw_error *err);
void sw_sampler_free(sw_sampler *s);

/*
 * The token drawn from logits[0..vocab) with the uniform u in [0, 1), and
 * in *logprob (if not NULL) its log-probability under the sampling policy
 * (see above).  Ties in greedy decoding and in the truncation order go to
 * the lower id.  Among the kept tokens, u picks by inverse CDF in id order.
 * Returns the token (>= 0) or SW_ERANGE when a logit is NaN or +Inf, or all
 * are -Inf.
 */
int sw_sampler_pick(sw_sampler *s, const float *logits, double u, float *logprob, sw_error *err);

/*
 * The set sampling draws from: kept tokens in ids[] (in id order), each
 * with its renormalised probability in probs[] (both [vocab]); returns how
 * many (>= 1), or SW_ERANGE as above.  Greedy keeps the one argmax.
 */
int sw_sampler_support(sw_sampler *s, const float *logits, int32_t *ids, double *probs,
                       sw_error *err);

/*
 * log softmax(logits / T)[token] (T = 0 as 1); the value sw_sampler_pick
 * gives for token.  At T = 1 it is sw_logprob_of's (sw/engine.h: the
 * arithmetic of the decoder's scoring and the trainer's forward, bit for
 * bit), at other temperatures computed in double.  NaN when token is out
 * of range.
 */
float sw_sampling_logprob(const float *logits, int vocab, double temperature, int token);

#pragma GCC visibility pop

#endif
