/*
 * sw/rl.h - the RL post-training objective: advantages, the per-token policy
 * loss and its gradient, loss aggregation, and the statistics a trainer
 * reports.  Pure arithmetic on plain arrays; no model, no I/O.
 *
 * The definitions follow verl (verl/trainer/ppo/core_algos.py: advantage
 * estimators, compute_policy_loss_vanilla, kl_penalty, agg_loss) and TRL
 * (trl/trainer/grpo_trainer.py: clip statistics, the Dr. GRPO normaliser,
 * truncated importance sampling); where the two differ, rl.c says which one
 * is followed and why.  tests/fixtures/make_rl_refs.py recomputes every
 * quantity with PyTorch autograd, and tests/unit/test_rl.c holds this code
 * to it.
 *
 * A batch is nseq sequences whose tokens lie back to back in flat arrays:
 * sequence i owns tokens off[i] .. off[i+1]-1 (off has nseq+1 entries,
 * off[0] == 0, off[nseq] == the token count).  A sequence may be masked out
 * (train[i] == 0: sw-verify's verifier_error); a masked sequence is left out
 * of every statistic, gets advantage 0 and weight 0, and its reward is never
 * read, so it may be NaN.
 *
 * Errors: SW_EEMPTY for an empty batch (or one with every sequence masked),
 * SW_EINVAL for offsets that do not describe the arrays, SW_ERANGE for a
 * NaN or infinite input.  err->record is then the 1-based index of the
 * sequence concerned (0 when none), err->offset the 0-based index of the
 * token concerned within the arrays passed; the caller maps them back to
 * records of its stream.
 *
 * Ownership: every array is the caller's; the library keeps no pointer past
 * the call and allocates nothing the caller must free.
 */
#ifndef SW_RL_H
#define SW_RL_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_rl_algo {
	SW_RL_SFT,        /* cross-entropy: the loss of a token is -logp */
	SW_RL_GRPO,       /* (r - group mean) / (group std + eps) */
	SW_RL_DR_GRPO,    /* r - group mean (no std), constant-length aggregation */
	SW_RL_DAPO,       /* GRPO's advantage, clip-higher, token-mean aggregation */
	SW_RL_RLOO,       /* r - mean of the other responses of the prompt */
	SW_RL_REINFORCE_PP /* returns whitened over every token of the batch */
} sw_rl_algo;

/*
 * How per-token losses l_t become one number: L = sum_t w_t l_t, with w_t
 * from sw_rl_weights().  N is the number of trained tokens, S the number of
 * trained sequences (with at least one token), n_i the length of sequence i.
 */
typedef enum sw_rl_agg {
	SW_RL_TOKEN_MEAN,          /* w = 1/N */
	SW_RL_SEQ_MEAN_TOKEN_SUM,  /* w = 1/S */
	SW_RL_SEQ_MEAN_TOKEN_MEAN, /* w = 1/(S n_i) */
	SW_RL_SEQ_MEAN_TOKEN_SUM_NORM /* w = 1/(S max_len): Dr. GRPO's constant normaliser */
} sw_rl_agg;

/* Estimators of KL(pi || ref) from one token, d = logp - ref (Schulman's k1, k2, k3). */
typedef enum sw_rl_kl {
	SW_RL_K1, /* d */
	SW_RL_K2, /* d^2 / 2 */
	SW_RL_K3  /* exp(-d) + d - 1, clamped to [-10, 10] as verl's low_var_kl */
} sw_rl_kl;

/* Names as the command line spells them ("grpo", "seq-mean-token-mean", "k3"). */
const char *sw_rl_algo_name(sw_rl_algo a);
const char *sw_rl_agg_name(sw_rl_agg a);
const char *sw_rl_kl_name(sw_rl_kl k);
/* 0 and *out set, or SW_EINVAL for a name that is none of them. */
int sw_rl_algo_parse(const char *s, sw_rl_algo *out);
int sw_rl_agg_parse(const char *s, sw_rl_agg *out);
int sw_rl_kl_parse(const char *s, sw_rl_kl *out);
/* Each algorithm's usual aggregation: token-mean for SFT, DAPO, RLOO and
 * REINFORCE++; seq-mean-token-mean for GRPO (its paper, TRL's "grpo");
 * seq-mean-token-sum-norm for Dr. GRPO. */
sw_rl_agg sw_rl_algo_default_agg(sw_rl_algo a);

/*
 * One token's KL estimate between the policy (logp) and the reference
 * (ref_logp); *dlogp (if not NULL) is its derivative with respect to logp,
 * 0 where a clamp holds the value.
 */
double sw_rl_kl_value(sw_rl_kl k, double logp, double ref_logp, double *dlogp);

/* --- advantages --------------------------------------------------------------- */

typedef struct sw_rl_batch {
	size_t nseq;
	const size_t *off;        /* [nseq+1] token offsets */
	const double *reward;     /* [nseq] each sequence's reward */
	const uint64_t *group;    /* [nseq] the prompt: equal ids form a group, in any order */
	const unsigned char *train; /* [nseq] 0: masked out; NULL: every sequence trains */
	/*
	 * KL as a reward penalty (kl_coef != 0): kl[t] is each token's estimate,
	 * usually sw_rl_kl_value() of the old against the reference log-probs.
	 * The outcome estimators (GRPO, Dr. GRPO, DAPO, RLOO) take the reward
	 * r - kl_coef * sum_t kl[t]; REINFORCE++ charges each token its own.
	 */
	const float *kl;          /* [off[nseq]] or NULL */
	double kl_coef;
} sw_rl_batch;

typedef struct sw_rl_adv_opts {
	double eps;    /* GRPO/DAPO: added to the group std; verl's 1e-6 when 0 */
	double gamma;  /* REINFORCE++: discount of token rewards; 1 when 0 */
} sw_rl_adv_opts;

/* What the advantage pass saw; every statistic is over trained sequences. */
typedef struct sw_rl_adv_stats {
	size_t nseq, masked, groups;
	size_t singleton_groups; /* one trained response: no baseline, advantage 0 */
	size_t zero_std_groups;  /* every response scored the same: advantage 0 */
	double reward_mean, reward_std, reward_min, reward_max; /* std: population */
	double adv_mean, adv_std, adv_min, adv_max;  /* over sequences (adv_seq) */
} sw_rl_adv_stats;

/*
 * Advantages of algorithm a (not SW_RL_SFT): adv_tok[t] for every token
 * (0 for masked sequences), and, when adv_seq is not NULL, one number per
 * sequence: the outcome advantage, or for REINFORCE++ the advantage of the
 * sequence's first token (the whole return).  Statistics go to st when it
 * is not NULL.
 *
 * Groups are made of trained sequences only.  The group std is the sample
 * std (Bessel's correction, as torch.std); a group of one has no baseline
 * and gets advantage 0 (TRL's nanstd of one value is NaN, turned into 0),
 * and a group whose rewards are all equal gets exactly 0.  REINFORCE++
 * whitens the returns over all trained tokens: (x - mean) / sqrt(var +
 * 1e-8), var the sample variance (verl's masked_whiten); a batch of one
 * trained token has variance 0.
 */
int sw_rl_advantages(sw_rl_algo a, const sw_rl_batch *b, const sw_rl_adv_opts *o,
                     float *adv_tok, double *adv_seq, sw_rl_adv_stats *st, sw_error *err);

/* --- aggregation ---------------------------------------------------------------- */

/*
 * The per-token weights w[t] of mode m over a (mini)batch of nseq sequences
 * (train as in sw_rl_batch; NULL: all).  max_len is the constant of
 * SW_RL_SEQ_MEAN_TOKEN_SUM_NORM (the longest response the rollout may produce)
 * and is ignored by the other modes.  Compute the weights over the whole
 * minibatch that makes one optimiser step, then split its tokens into micro
 * batches as you like: the sum of the micro-batch losses is the loss.
 */
int sw_rl_weights(sw_rl_agg m, size_t nseq, const size_t *off, const unsigned char *train,
                  double max_len, double *w, sw_error *err);

/* --- the loss ----------------------------------------------------------------------- */

typedef struct sw_rl_loss_opts {
	sw_rl_algo algo;      /* SW_RL_SFT: l = -logp; the others: the PPO surrogate */
	double clip_low;      /* the ratio is clipped to [1 - clip_low, 1 + clip_high] */
	double clip_high;
	double clip_dual;     /* > 1: dual-clip bound for negative advantages; 0: off */
	double tis_cap;       /* > 0: weight each token's surrogate by
	                       * min(exp(old - behaviour), tis_cap); needs behav_logp */
	double kl_coef;       /* > 0: add kl_coef * KL(pi || ref) to each token; needs ref_logp */
	sw_rl_kl kl_kind;
	double entropy_coef;  /* > 0: subtract entropy_coef * entropy; needs entropy */
} sw_rl_loss_opts;

/* One slice of tokens (a micro batch, or the whole batch), flat arrays of n. */
typedef struct sw_rl_tokens {
	size_t n;
	const float *logp;       /* under the weights being trained */
	const float *old_logp;   /* under the weights that began the step (not SFT) */
	const float *behav_logp; /* the rollout's; needed when tis_cap > 0 */
	const float *ref_logp;   /* the reference model's; needed when kl_coef > 0 */
	const float *entropy;    /* needed when entropy_coef > 0; else only for statistics */
	const float *adv;        /* advantage of each token (not SFT) */
	const double *w;         /* aggregation weights from sw_rl_weights() */
} sw_rl_tokens;

/*
 * Sums over the tokens seen, accumulated across calls (start from all
 * zeros).  The weighted sums add up to the aggregated values of the
 * minibatch; the counts give token means: clip fraction low = clip_low /
 * tokens, mean KL = kl_sum / tokens, and so on.
 */
typedef struct sw_rl_stats {
	double loss;       /* sum w l: the objective */
	double pg_loss;    /* sum w (IS weight) surrogate; -sum w logp for SFT */
	double kl_loss;    /* sum w kl (before kl_coef) */
	double entropy;    /* sum w entropy (when given) */
	uint64_t tokens;   /* tokens with w > 0 */
	uint64_t clip_low;   /* ratio < 1 - clip_low with advantage < 0 (TRL's low clip) */
	uint64_t clip_high;  /* ratio > 1 + clip_high with advantage > 0 */
	uint64_t clip_dual;  /* held at -adv * clip_dual by the dual clip */
	uint64_t tis_truncated; /* IS weights cut to tis_cap */
	double kl_sum, entropy_sum, ratio_sum, ratio_max, tis_sum;
	double ppo_kl_sum; /* sum (old - logp): verl's ppo_kl */
} sw_rl_stats;

/*
 * The loss of the tokens in t under o: dlogp[t] = dL/dlogp[t] (required)
 * and, when dentropy is not NULL, dentropy[t] = dL/dentropy[t]; both with
 * the aggregation weights applied, so they are the gradient of L itself.
 * Tokens with w == 0 get zero gradients and are not read further.
 * Statistics are added to st when it is not NULL.  A NaN or infinite input
 * is SW_ERANGE with err->offset the token.
 *
 * Per token (verl's compute_policy_loss_vanilla): ratio = exp(clamp(logp -
 * old, -20, 20)); pg = max(-A ratio, -A clip(ratio, 1 - clip_low, 1 +
 * clip_high)), and with the dual clip, for A < 0, min(pg, -A clip_dual);
 * l = tis pg + kl_coef kl - entropy_coef entropy.
 */
int sw_rl_loss(const sw_rl_loss_opts *o, const sw_rl_tokens *t, float *dlogp, float *dentropy,
               sw_rl_stats *st, sw_error *err);

/*
 * How far the rollout's log-probs (behav) are from the trainer's (old) over
 * n tokens: mean and max of |behav - old|, and the k3 estimate of
 * KL(behaviour || trainer) averaged over the tokens.  Any of the outputs may
 * be NULL.  SW_ERANGE (err->offset the token) for a NaN or infinite value.
 */
int sw_rl_mismatch(const float *behav, const float *old, size_t n, double *mean_abs,
                   double *max_abs, double *kl, sw_error *err);

#pragma GCC visibility pop

#endif
