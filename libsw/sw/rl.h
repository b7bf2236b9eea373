/*
 * sw/rl.h - RL post-training: the objective (advantages, the per-token
 * policy loss and its gradient, loss aggregation, the statistics a trainer
 * reports: pure arithmetic on plain arrays, no model, no I/O), and at the
 * end the trainer that runs a whole step with them (sw_trainer).
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
#include "dist.h"
#include "engine.h"
#include "model.h"
#include "record.h"
#include "store.h"

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

/* ---- the trainer: one optimisation step over a batch of sample records ------------ */

/*
 * sw_trainer runs sw-train's step as an object: the samples are added one
 * record at a time (each checked as it comes, against the model), then
 * sw_trainer_step() computes the old log-probabilities under the weights
 * that start the step (and the reference's, when there is a KL term), the
 * advantages over every sample, then epochs x minibatches AdamW updates,
 * each accumulating gradients over micro batches (the samples' `micro`
 * field from sw-balance, else sw_micro_split(), under a token budget), and
 * fills its statistics.  sw_trainer_commit() makes the result durable.
 *
 * Where the weights live, one of:
 *  - sw_trainer_load_dir(): a model directory, loaded into memory the
 *    trainer owns with its trainer state (trainer_state.json,
 *    optimizer.bin); commit writes the model, its state and the files
 *    beside it into out, replacing out in one rename.
 *  - sw_trainer_open_store(): a weight store and its optimiser store
 *    (shm:NAME and, by sw-run's convention, shm:NAME.opt), trained IN
 *    PLACE: the engine computes on the store's arena and AdamW updates the
 *    moments in the optimiser store; nothing is copied.  The old and
 *    reference log-prob passes read the weights before the first update,
 *    when they cannot change (the trainer is the store's one writer, and a
 *    second is refused), so they need no copy either.  Just before the
 *    first update the trainer opens an update on both stores
 *    (sw_store_write_begin: readers wait, and a reader that overlapped
 *    discards what it read), and commit publishes them as the next
 *    version.  A step that fails or is killed after that point leaves
 *    both stores inside an open update: readers wait while the process
 *    lives and are told the writer died (SW_EFORMAT) once it has gone, so
 *    they never take the half-updated weights for a version; the weights
 *    must be restored from a checkpoint before training goes on (sw-run
 *    --resume does it).  A step that fails before its first update (a bad
 *    sample, a bad reference) leaves the stores untouched.  No part of the
 *    step is copied: what must not be seen before the publish is hidden
 *    by the seqlock, not by a private copy.
 *  - sw_trainer_attach(): arenas the caller owns (a model, its moments,
 *    on the model's backend) and their state; commit then only advances
 *    the state.
 *
 * Everything the step computes on lives on the config's backend: a model
 * directory and the reference are loaded onto it, a store is borrowed by
 * it (its arena is then device memory: on guard the process must not touch
 * it while the trainer lives), the gradients and the moments are its
 * memory.  The files of the trainer state are read and written through it
 * (in place on the CPU, through a bounded host buffer elsewhere).
 *
 * Errors are SW_E* with sw_error's message as sw-train prints it after its
 * name, a sample's prefixed "FILE: record N: ".  The library prints
 * nothing; progress goes to the on_update callback.
 *
 * Ownership: the trainer copies the config's strings; sw_trainer_add takes
 * the record, error or not; sw_trainer_sample lends it back (with
 * `advantage` set after the step) until sw_trainer_free (NULL: a no-op).
 */
typedef struct sw_trainer sw_trainer;

typedef struct sw_trainer_config {
	sw_rl_algo algo;
	sw_rl_agg agg;               /* resolved by the caller: sw_rl_algo_default_agg() */
	sw_adamw_config adam;
	sw_rl_loss_opts loss;        /* loss.algo is set from algo */
	int kl_in_reward;            /* charge the KL as a reward penalty */
	int train_all;               /* SFT learns the prompt too */
	double max_len;              /* seq-mean-token-sum-norm's constant; 0: the longest response */
	double adv_eps, gamma;       /* sw_rl_adv_opts */
	long epochs, minibatches;
	size_t micro_tokens;         /* token budget of a micro batch, lowered to what 2.5 B a parameter
	                              * of activations holds; 0: chosen by the trainer
	                              * (sw_trainer_micro_tokens) */
	int no_prompt_sharing;       /* 1: every sample runs its prompt itself; 0: a micro batch's samples
	                              * of one prompt (a GRPO group) run it once (sw_batch.prefix), and
	                              * micro batches are cut so that they keep such samples together */
	long long rank;              /* train only this rank's samples; -1: all */
	uint64_t seed;               /* the shuffle's seed for weights without trainer state */
	const char *ref;             /* reference model for the KL: a directory or a store; NULL: none */
	const sw_backend *backend;   /* where the model, the reference, the gradients and the moments live
	                              * and compute (sw_backend_get()); NULL: cpu */
	/* called after each update (may be NULL): the update's number, its loss statistics and AdamW's */
	void (*on_update)(void *ctx, uint64_t update, const sw_rl_stats *rs, const sw_adamw_stats *as);
	void *ctx;
	/* Data parallel (sw/dist.h): NULL is one process.  Under a communicator every rank adds
	 * the whole stream, trains the samples it owns (field `rank`, else sample i goes to rank
	 * i % size), and the gradients are summed across the ranks before each update, so every
	 * rank ends the step with the same weights; the loss weights, minibatches and statistics
	 * are those of the whole stream, as one process computes them.  Only rank 0 should commit.
	 * Over a store (sw_trainer_open_store), rank 0 trains it in place and every other rank a
	 * copy of its own, taken when it opens it. */
	sw_comm *comm;
	int zero1;                   /* with comm: each rank keeps only its shard of AdamW's moments */
} sw_trainer_config;

typedef struct sw_trainer_stats {
	uint64_t step;               /* the version the step makes (policy_version) */
	size_t samples, trained, masked;
	uint64_t updates, tokens;    /* tokens: loss tokens with weight */
	size_t tokens_total;         /* prompt and response tokens of the trained samples */
	double loss, pg_loss, kl_loss, entropy_loss; /* means over updates */
	double kl, entropy, token_accuracy;
	double clip_frac_low, clip_frac_high, clip_frac, clip_frac_dual, ratio_mean, ratio_max, ppo_kl;
	uint64_t off_policy_samples;
	double tis_mean, tis_truncated_frac;
	double grad_norm, grad_norm_max, lr;
	uint64_t grad_clipped;
	sw_rl_adv_stats adv;
	double response_len_mean;
	size_t response_len_min, response_len_max;
	uint64_t mismatch_tokens;    /* tokens with the rollout's log-probs */
	double mismatch_mean, mismatch_max, mismatch_kl;
	double tokens_per_s;
	uint64_t micro_batches;      /* forward and backward passes the updates were accumulated over (every rank's) */
	uint64_t tokens_shared;      /* prompt tokens they did not run again: shared in a micro batch (every rank's) */
	/* seconds: creation to the step (loading, reading), the passes, commit, creation to commit */
	double time_read, time_old, time_ref, time_adv, time_train, time_write, time_total;
	int ranks;                   /* the communicator's size (1: one process) */
	double time_allreduce;       /* seconds of time_train spent summing gradients and gathering weights
	                              * across the ranks, once they have met (not the wait for the slowest) */
} sw_trainer_stats;

/* sw-train's defaults: grpo, lr 1e-6, max grad norm 1, clip 0.2, k3, one epoch
 * and minibatch, micro batches sized by the trainer, every rank. */
sw_trainer_config sw_trainer_defaults(void);
/* The token budget of a training micro batch for a model of config c and
 * nparams parameters: micro_tokens where given (0: chosen, the most tokens
 * that keep every layer's activations within the trainer's budget of 2.5 B
 * a parameter, but not under 384), lowered to what that budget holds at
 * all.  1 without a config. */
size_t sw_trainer_micro_tokens(const sw_model_config *c, size_t nparams, size_t micro_tokens);
sw_trainer *sw_trainer_new(const sw_trainer_config *c, sw_error *err);
void sw_trainer_free(sw_trainer *t);

/* out is checked first (a directory of plain files that is a model, or
 * nothing yet); text samples are tokenised with model_dir's tokenizer. */
int sw_trainer_load_dir(sw_trainer *t, const char *model_dir, const char *out, sw_error *err);
int sw_trainer_open_store(sw_trainer *t, const char *weights, const char *opt, sw_error *err);
/* A trainer on a store has no model directory: dir is where a LLaVA model's
 * image processor (preprocessor_config.json) is read from, at the first
 * sample with pictures (sw-run's $SW_MODEL).  A directory's own is used
 * without it.  Copies dir. */
int sw_trainer_media_dir(sw_trainer *t, const char *dir, sw_error *err);
/*
 * A weight store's optimiser store (STORE.opt) as a model directory's
 * trainer state (trainer_state.json and optimizer.bin, the format
 * sw_trainer_load_dir reads), and back into a store created as spec when
 * *opt is NULL: sw-run's checkpoints are model directories sw-train
 * continues from.  Export fails if a trainer publishes meanwhile.
 */
int sw_trainer_state_export(sw_store *opt, const char *dir, sw_error *err);
/* The same, optimizer.bin written as o says (sw/save.h: its digest noted, around the page cache). */
int sw_trainer_state_export_with(sw_store *opt, const char *dir, const sw_save_opts *o, sw_error *err);
int sw_trainer_state_import(const char *dir, const char *spec, sw_store **opt, sw_error *err);
/* Borrowed: model and m, v (model->nparams floats each, memory of the model's backend, which
 * the trainer then computes on); rng4 NULL seeds from c->seed. */
int sw_trainer_attach(sw_trainer *t, sw_model *model, float *m, float *v, uint64_t version,
                      uint64_t updates, const uint64_t *rng4, sw_error *err);
/* The weights being trained (the store's arena in place), their version. */
sw_model *sw_trainer_model(sw_trainer *t);
uint64_t sw_trainer_version(const sw_trainer *t);

/* Add one sample; file and recno (1-based) name it in messages. */
int sw_trainer_add(sw_trainer *t, sw_rec *rec, const char *file, uint64_t recno, sw_error *err);
size_t sw_trainer_nsamples(const sw_trainer *t);
/* The rank that trains sample i (0 without a communicator); -1 when that is not known
 * (its `rank` field was unreadable): an error about it is then every rank's. */
long long sw_trainer_sample_owner(const sw_trainer *t, size_t i);
sw_rec *sw_trainer_sample(sw_trainer *t, size_t i);

int sw_trainer_step(sw_trainer *t, sw_trainer_stats *st, sw_error *err);
/* After the step: the directory written, or the stores published; st's
 * write and total times are filled in. */
int sw_trainer_commit(sw_trainer *t, sw_trainer_stats *st, sw_error *err);
/* The metrics record of a step (sw-train --metrics), into rec (cleared). */
int sw_trainer_metrics(const sw_trainer *t, const sw_trainer_stats *st, sw_rec *rec, sw_error *err);

#pragma GCC visibility pop

#endif
