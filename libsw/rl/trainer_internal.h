/*
 * trainer_internal.h - what trainer.c (the step) and trainer_state.c (where
 * the weights and the optimiser state live, and how a step is committed)
 * share: the trainer object itself.
 */
#ifndef SW_TRAINER_INTERNAL_H
#define SW_TRAINER_INTERNAL_H

#include "common/internal.h"
#include "common/rng.h"
#include "compute/backend.h"

typedef struct tsample tsample;

struct sw_trainer {
	sw_trainer_config c;
	const sw_backend *be;   /* c.backend, or cpu */
	char *ref;
	double t0;              /* creation: the step's time_s.read counts from here */

	/* the weights and the optimiser state (see rl.h: a directory, a store or the caller's) */
	sw_model *model;
	float *m, *v;           /* AdamW moments, be's memory; NULL in a store that has none yet (made at the first update) */
	sw_model *mm, *vm;      /* a model directory's moments: models on be that own them */
	float *o_dev;           /* the optimiser store's arena, borrowed by be */
	int own_model;
	uint64_t version;       /* steps trained: the policy_version of these weights */
	uint64_t updates;       /* AdamW's step and the schedule's position */
	sw_rng rng;             /* the minibatch shuffle */
	int stepped;

	/* directory: where from, where to */
	char *model_dir, *out;
	/* stores: in place */
	sw_store *w, *o;
	char *w_spec, *o_spec;
	uint64_t start_version;
	int updating;           /* inside an update of both stores */

	/* text samples are tokenised with the model directory's tokenizer */
	char *tok_dir;
	sw_tokenizer *tok;
	sw_image_proc *proc;    /* a LLaVA model's image processor, from the same directory or media_dir */
	char *media_dir;

	tsample *s;
	size_t n, cap;

	int rank;               /* sw_comm_rank(c.comm) */
	/* ZeRO-1 (c.zero1): this rank's shard of the moments, be's memory, while a step runs */
	float *zm, *zv;
};

/* trainer_state.c */
int sw_trainer_state_load(sw_trainer *t, const char *dir, sw_error *err);
int sw_trainer_check_out(const char *out, sw_error *err);
int sw_trainer_commit_dir(sw_trainer *t, sw_error *err);
/* Open the update of both stores, before the first in-place change. */
int sw_trainer_store_begin(sw_trainer *t, sw_error *err);
int sw_trainer_commit_store(sw_trainer *t, sw_error *err);

/*
 * trainer_dist.c: the data-parallel pieces of a step under c.comm.
 * dist_update: one AdamW update from this rank's gradient: the gradients
 * summed across the ranks (host: nparams floats of scratch), the norm as
 * the rank-order sum of the shards' sums of squares, then every shard
 * updated (zero1: only this rank's, and the weights all-gathered), so
 * sharded and unsharded give the same bits; *tcomm gets the seconds spent
 * moving data.  zero_begin/zero_end: the moments' shard taken from t->m, v
 * (ranks above 0 then free their full copies) and given back to rank 0's
 * for the commit.  check_weights: every rank holds the same weights (a
 * digest compared across the ranks).  reduce_stats: an update's loss
 * statistics summed over the ranks.
 */
int sw_trainer_dist_update(sw_trainer *t, sw_model *grad, float *host, sw_adamw_stats *ast, double *tcomm,
                           sw_error *err);
int sw_trainer_dist_zero_begin(sw_trainer *t, sw_error *err);
int sw_trainer_dist_zero_end(sw_trainer *t, float *host, sw_error *err);
int sw_trainer_dist_check_weights(sw_trainer *t, float *host, sw_error *err);
int sw_trainer_dist_reduce_stats(sw_comm *c, sw_rl_stats *rs, sw_error *err);

#endif
