/*
 * sw/engine.h - compute on an sw_model: forward and backward over packed
 * sequences (training and scoring), batched incremental decoding with a
 * paged KV cache (generation), and AdamW.
 *
 * sw-rollout and sw-train run the same code: the log-probabilities the
 * decoder computes for a token equal those of a full forward over the same
 * tokens to float rounding (~1e-6; tested to 1e-5), and sw_decoder_score
 * reproduces them exactly.  Decoding is batch-invariant: a sequence's
 * logits have the same bits whatever else is in the batch.  All compute
 * runs on the model's backend (sw/backend.h, sw_model.backend): the engine
 * and the decoder keep their activations, KV cache and logits there, and
 * every host array below (tokens, log-probs, logits returned) is copied to
 * or from it, so the same calls work on any backend, bit for bit the same
 * on "cpu" and "guard".
 *
 * Ownership: an engine or decoder borrows its model (and reads the weights
 * at every call, so weights updated in place are seen at once); everything
 * else a call is given belongs to the caller, and what a call returns a
 * pointer to belongs to the engine or decoder, valid until its next call.
 * sw_engine_free(NULL) and sw_decoder_free(NULL) are no-ops.  Functions
 * return SW_OK or a negative SW_E* code and fill err when it is not NULL.
 */
#ifndef SW_ENGINE_H
#define SW_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include "error.h"
#include "model.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/*
 * Threads for the compute of the CPU backends (cpu, guard); n <= 0: all cores.  One OpenMP pool runs
 * everything (OpenBLAS single-threaded inside it).  On a machine shared
 * with other busy processes, OMP_WAIT_POLICY=passive in the environment
 * keeps idle threads from spinning on the cores the working ones need.
 */
void sw_engine_threads(int n);

/* ---- forward and backward over a packed batch ------------------------------ */

/*
 * A batch of nseq sequences back to back, without padding: sequence s is
 * tokens[cu_seqlens[s] .. cu_seqlens[s+1]-1], and each attends causally to
 * itself only, at positions 0, 1, ... .  targets[t] is the token whose
 * log-probability row t gives (its next token, for a language model), or
 * < 0 for none; NULL means "the next token of the same sequence", so the
 * last row of each sequence has none.
 *
 * A shared prefix (prefix not NULL): sequence s with prefix[s] >= 0
 * continues sequence p = prefix[s], an earlier one with no prefix of its
 * own: s's tokens come after all of p's, at positions len(p), len(p) + 1,
 * ..., and attend to p's tokens and then causally to their own, so p's
 * forward (and its backward's work) is done once for every sequence that
 * continues it: a GRPO group's prompt for its responses.  The result is
 * that of each continuing sequence run whole, up to the order of sums.  A
 * backend without it (sw_backend_ops' attn_prefix_*) refuses the batch.
 */
typedef struct sw_batch {
	int nseq;
	const int32_t *tokens;
	const int32_t *cu_seqlens;  /* [nseq + 1], cu_seqlens[0] = 0, increasing */
	const int32_t *targets;     /* [ntokens] or NULL */
	const int32_t *prefix;      /* [nseq] or NULL: the sequence each one continues, or -1 */
} sw_batch;

typedef struct sw_engine sw_engine;

sw_engine *sw_engine_new(const sw_model *m, sw_error *err);
void sw_engine_free(sw_engine *e);

/*
 * Run the model over b.  logprobs[t] (if not NULL) gets log p(targets[t] |
 * tokens of its sequence up to t), 0 where there is no target; entropy[t]
 * (if not NULL) the entropy of row t's next-token distribution.  With
 * for_backward the activations are kept for sw_engine_backward (memory
 * grows with the batch's total tokens); without, only one layer's worth is
 * held.  Tokens outside the vocabulary, positions beyond the model's
 * context, or a malformed cu_seqlens are SW_EINVAL.
 */
int sw_engine_forward(sw_engine *e, const sw_batch *b, bool for_backward, float *logprobs,
                      float *entropy, sw_error *err);

/*
 * A LLaVA model's images for a batch: pixel_values [n][channels][size][size]
 * (float32, host memory, as the image processor gives them), in the order
 * their image tokens appear in the batch.  Each image takes
 * sw_model_image_tokens() consecutive image tokens (image_token_id) of the
 * prompt, whose embeddings its projected features replace, as transformers'
 * LlavaModel does.  A count of image tokens other than n times that is
 * SW_EINVAL ("too many" or "too few" images), as is an image for a text model.
 */
typedef struct sw_images {
	int n;
	const float *pixels;
} sw_images;

/* sw_engine_forward with images (im NULL or im->n 0: none); the backward
 * then carries the gradient into the projector (and the tower: see
 * sw_engine_train_vision). */
int sw_engine_forward_images(sw_engine *e, const sw_batch *b, const sw_images *im, bool for_backward,
                             float *logprobs, float *entropy, sw_error *err);

/*
 * The logits [ntokens, vocab] of the last forward, or NULL if none (or if
 * a training forward was too large to keep them: see below).
 */
const float *sw_engine_logits(const sw_engine *e);

/*
 * At most this many floats of logits are held by a forward for backward
 * (default 2^28, 1 GiB); a larger batch keeps only per-token log-sum-exps
 * and the backward computes the logits again in chunks, one more
 * vocabulary-sized GEMM for less memory.  A forward without backward
 * keeps all of its logits, unless sw_engine_keep_logits(e, false) said
 * that the budget holds for it too (a scorer that wants only log-probs).
 */
void sw_engine_logits_budget(sw_engine *e, size_t floats);
void sw_engine_keep_logits(sw_engine *e, bool all);

/*
 * With only (default false), a forward runs the vocabulary's head (the
 * output projection, log-softmax and their backward) over the rows that
 * have a target alone: a prompt's rows, which a policy-gradient or SFT
 * loss does not score, cost the layers but not the head.  Rows without a
 * target then get logprob 0, entropy 0 and argmax -1, sw_engine_logits is
 * NULL, and a d(loss) given for them is ignored.  The rows with a target
 * get what they get without it to float rounding (the products have other
 * shapes, so their sums may round otherwise).
 */
void sw_engine_head_targets_only(sw_engine *e, bool only);

/*
 * The greedy token (argmax of the logits, the first of equals) of every
 * row of the last forward for backward, whatever the logits budget kept,
 * or NULL (no such forward, or its backward has run).
 */
const int32_t *sw_engine_argmax(const sw_engine *e);

/*
 * At most about this many floats of activations are kept by a forward for
 * backward (default SIZE_MAX: every layer's).  Over it, the first layers
 * that fit keep theirs and the others only their input; the backward runs
 * those layers' forward again, one at a time, before differentiating them.
 * The gradients are the same bits either way; the cost is up to one more
 * forward of the layers (not of the vocabulary's head).  0: the least
 * memory (every layer's input and one layer's activations).
 */
void sw_engine_act_budget(sw_engine *e, size_t floats);

/*
 * The most tokens a training forward of a model of config c fits in an
 * activation budget of this many floats (at least 1), every layer but its
 * input run again in the backward: what a caller splits its batches by to
 * stay under the budget.  The backward's scratch (about 2 hidden + 3
 * intermediate widths a token) and the logits' budget come on top.
 */
size_t sw_engine_tokens_within(const sw_model_config *c, size_t floats);

/*
 * The most tokens (at least 1) whose every layer's activations fit in an
 * activation budget of this many floats: a training forward of that many
 * runs no layer again in its backward.
 */
size_t sw_engine_tokens_kept(const sw_model_config *c, size_t floats);

/*
 * The most tokens (at least 1) a forward without backward (a scorer's:
 * one layer's activations at a time, and the hidden states between them)
 * holds in this many floats, the logits' budget on top.
 */
size_t sw_engine_tokens_scored(const sw_model_config *c, size_t floats);

/*
 * THE training interface.  After sw_engine_forward(..., for_backward =
 * true, ...), given d(loss)/d(logprobs[t]) (dlogprob, [ntokens]) and
 * optionally d(loss)/d(entropy[t]) (dentropy, or NULL), ADD d(loss)/d(theta)
 * for every parameter to grad: a model of the same configuration viewing a
 * gradient arena (sw_model_view), zeroed by the caller before the first
 * micro-batch and accumulated over the rest.  Any loss that is a function
 * of per-token log-probabilities (and entropies) - cross-entropy, PPO/GRPO
 * surrogates, KL to a reference - is trained this way: the caller computes
 * the loss and its derivative per token from the logprobs the forward gave.
 * Tied embeddings get both gradients in one tensor.  The backward uses up
 * the forward's logits (sw_engine_logits is NULL after it), so one forward
 * is differentiated once.
 */
int sw_engine_backward(sw_engine *e, const float *dlogprob, const float *dentropy,
                       sw_model *grad, sw_error *err);

/*
 * A loss that is a sum of per-token terms (all of the above are), for
 * sw_engine_forward_loss: called for rows r0 .. r0+n-1 of the head's rows
 * (the rows with a target under sw_engine_head_targets_only, else every
 * row), in order, as each chunk of them is computed, with their log-probs
 * lp[0..n) and entropies ent[0..n) (finite: a row that is not stops the
 * forward first); it writes dlp[0..n) = d(loss)/d(lp) and, when dent is not
 * NULL, dent[0..n) = d(loss)/d(entropy).  A return other than 0 stops the
 * forward with that code, err saying why.
 */
typedef int (*sw_engine_loss_fn)(void *ud, int r0, int n, const float *lp, const float *ent, float *dlp,
                                 float *dent, sw_error *err);

/*
 * A forward for backward (sw_engine_forward_images with for_backward) that
 * differentiates the loss as the vocabulary's head runs: each chunk of
 * logits gets fn's derivatives (of the entropy too with want_dent) and adds
 * its part of the gradient to grad while it is still in memory, so a batch
 * over the logits' budget does not run the head's product twice.  The
 * sw_engine_backward that follows takes NULL d(logprobs) and d(entropy) and
 * the same grad; the gradient is the same bits as the two-call way's.
 */
int sw_engine_forward_loss(sw_engine *e, const sw_batch *b, const sw_images *im, sw_engine_loss_fn fn,
                           void *ud, bool want_dent, sw_model *grad, float *logprobs, float *entropy,
                           sw_error *err);

/*
 * Which of a LLaVA model's vision parameters the backward differentiates:
 * the projector (default true) and the tower (default false: frozen, as
 * LLaVA trains).  A part not trained gets no gradient added (its slice of
 * grad is left as it is, 0 when zeroed).
 */
void sw_engine_train_vision(sw_engine *e, bool projector, bool tower);

/*
 * Cross-entropy of the batch's targets, weighted per token:
 * loss = -sum_t weight[t] * logprobs[t] / norm, where weight NULL means 1
 * for every row with a target and norm <= 0 means the sum of the weights
 * (the mean over weighted tokens, as transformers computes it).  Runs the
 * forward, and the backward into grad when grad is not NULL.  logprobs
 * (if not NULL, [ntokens]) gets the per-token log-probabilities.
 */
int sw_engine_cross_entropy(sw_engine *e, const sw_batch *b, const float *weight, double norm,
                            sw_model *grad, double *loss, float *logprobs, sw_error *err);

/* log softmax(logits)[token], the same arithmetic as the forward's log-probs. */
float sw_logprob_of(const float *logits, int vocab, int token);

/* ---- batched incremental decoding ----------------------------------------------- */

/*
 * A decoder holds many sequences in a paged KV cache of a fixed number of
 * tokens.  A sequence is added with its prompt; sw_decoder_step() runs every
 * sequence that has tokens not yet in the cache (a prompt, or the token
 * just appended) in one batch, and gives the next-token logits of each.
 * sw_decoder_fork() makes a sequence that shares another's cache pages (the
 * G responses of one prompt: prefill once, fork G times; a shared page is
 * copied only when a fork writes into it).  sw_decoder_remove() frees a
 * finished sequence's pages at once, so its slot can take the next prompt
 * (continuous batching).  Sampling is the caller's: it reads the logits and
 * appends the token it chose.
 */
typedef struct sw_decoder sw_decoder;

/* max_seqs live sequences, KV cache room for max_tokens tokens in all (shared pages count once). */
sw_decoder *sw_decoder_new(const sw_model *m, int max_seqs, int64_t max_tokens, sw_error *err);
void sw_decoder_free(sw_decoder *d);

/* A new sequence with n >= 1 pending tokens; returns its id (>= 0) or an SW_E* code. */
int sw_decoder_add(sw_decoder *d, const int32_t *tokens, int n, sw_error *err);
/*
 * sw_decoder_add with a LLaVA model's images (im as for
 * sw_engine_forward_images: as many as the prompt's image tokens take):
 * their features are computed here and take the places of the image
 * tokens when the prompt is prefilled.  The cache then holds the image's
 * keys and values like any prompt's, so sw_decoder_fork shares them.
 */
int sw_decoder_add_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                          sw_error *err);
/* Append n tokens to sequence id (pending until the next step). */
int sw_decoder_append(sw_decoder *d, int id, const int32_t *tokens, int n, sw_error *err);
/*
 * A new sequence sharing id's cached tokens; id must have nothing pending.
 * The fork starts with the same last logits (sw_decoder_last_logits).
 */
int sw_decoder_fork(sw_decoder *d, int id, sw_error *err);
/* Forget sequence id and release its pages; unknown ids are SW_EINVAL. */
int sw_decoder_remove(sw_decoder *d, int id);

/*
 * Feed every sequence's pending tokens through the model.  On return
 * *n is the number of sequences that ran, ids[0..n-1] (decoder-owned) their
 * ids and logits [n, vocab] (decoder-owned) the next-token logits after
 * each one's last token; both valid until the next call on d.  The cache
 * full is SW_ERANGE and changes nothing (remove a sequence and step again);
 * nothing pending gives *n = 0.  Logits that are not finite (weights gone
 * to NaN) are SW_ERANGE too, after the tokens went into the cache.
 */
int sw_decoder_step(sw_decoder *d, int *n, const int **ids, const float **logits, sw_error *err);

/*
 * Score a whole sequence with the decoder's own arithmetic: logprobs[t] =
 * log p(tokens[t+1] | tokens[0..t]) for t < n-1, and 0 for t = n-1;
 * entropy[t] (if not NULL) that row's entropy.  The values have exactly the
 * bits decoding computed for the same tokens (sw_logprob_of on the step's
 * logits), which a full sw_engine_forward matches only to rounding (~1e-6):
 * this is sw-rollout --score.  Needs a free slot and room for n tokens
 * (released again before it returns); other sequences are left as they are.
 */
int sw_decoder_score(sw_decoder *d, const int32_t *tokens, int n, float *logprobs,
                     float *entropy, sw_error *err);

/*
 * The same pass, giving the logits themselves: fn is called with rows
 * row0 .. row0+nrows-1 of the sequence's next-token logits ([nrows,
 * vocab], valid during the call), in order, in chunks of at most 32 rows;
 * row t has the bits the decoder's step gave after token t.  A non-zero
 * return from fn stops the pass and is returned.  For log-probs under a
 * sampling temperature, say.
 */
typedef int (*sw_rows_fn)(void *ctx, int row0, int nrows, const float *logits);
int sw_decoder_rows(sw_decoder *d, const int32_t *tokens, int n, sw_rows_fn fn, void *ctx,
                    sw_error *err);

/* sw_decoder_score and sw_decoder_rows of a prompt with a LLaVA model's
 * images (im as for sw_decoder_add_images). */
int sw_decoder_score_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                            float *logprobs, float *entropy, sw_error *err);
int sw_decoder_rows_images(sw_decoder *d, const int32_t *tokens, int n, const sw_images *im,
                           sw_rows_fn fn, void *ctx, sw_error *err);

/* The next-token logits of id after its last step ([vocab], decoder-owned), or NULL. */
const float *sw_decoder_last_logits(const sw_decoder *d, int id);
/* Tokens of id in the cache (its length, not counting pending ones); -1 for an unknown id. */
int sw_decoder_len(const sw_decoder *d, int id);
/* Tokens the cache can still take without freeing anything. */
int64_t sw_decoder_room(const sw_decoder *d);

/* ---- optimisation ------------------------------------------------------------------ */

typedef enum sw_lr_schedule {
	SW_LR_CONSTANT,            /* lr after warm-up */
	SW_LR_COSINE,              /* cosine from lr to lr * min_lr_ratio over total_steps */
	SW_LR_LINEAR               /* linear from lr to lr * min_lr_ratio over total_steps */
} sw_lr_schedule;

typedef struct sw_adamw_config {
	float lr, beta1, beta2, eps;
	float weight_decay;        /* decoupled, as torch.optim.AdamW */
	bool decay_1d;             /* decay 1-D tensors (norms, biases) too; off is the usual choice */
	float max_grad_norm;       /* clip the global gradient norm to this; <= 0: no clipping */
	sw_lr_schedule schedule;
	int64_t warmup_steps;      /* linear warm-up from 0 over these steps */
	int64_t total_steps;       /* length of the decay (warm-up included) */
	float min_lr_ratio;
	/* A LLaVA model's vision tower ("vision_tower.*") is updated only when
	 * this is true (false, the default: frozen, no decay either). */
	bool train_vision_tower;
} sw_adamw_config;

/* lr, beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01, no clipping, constant. */
sw_adamw_config sw_adamw_defaults(float lr);

/* The learning rate of step (0-based) under c's schedule. */
float sw_lr_at(const sw_adamw_config *c, int64_t step);

typedef struct sw_adamw_stats {
	double grad_norm;          /* global L2 norm before clipping */
	float lr;                  /* the rate applied */
	bool clipped;
} sw_adamw_stats;

/*
 * One AdamW step number step (0-based; state m and v have seen step
 * earlier ones) on params with grad (both models of one configuration, on
 * one backend); m and v are arenas of params->nparams floats in that
 * backend's memory, zeroed before step 0, that the caller keeps: host
 * memory on "cpu", else the arena of a model of the same configuration
 * made by sw_model_new_on() or, over a store's arena,
 * sw_model_view_on(params->backend, cfg, arena).  grad is
 * read, not changed (clipping scales it inside the update).  A non-finite
 * gradient norm is SW_ERANGE and leaves params, m and v untouched.
 */
int sw_adamw_step(const sw_adamw_config *c, sw_model *params, sw_model *grad, float *m,
                  float *v, int64_t step, sw_adamw_stats *stats, sw_error *err);

#pragma GCC visibility pop

#endif
