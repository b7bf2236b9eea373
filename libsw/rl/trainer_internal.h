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

	tsample *s;
	size_t n, cap;
};

/* trainer_state.c */
int sw_trainer_state_load(sw_trainer *t, const char *dir, sw_error *err);
int sw_trainer_check_out(const char *out, sw_error *err);
int sw_trainer_commit_dir(sw_trainer *t, sw_error *err);
/* Open the update of both stores, before the first in-place change. */
int sw_trainer_store_begin(sw_trainer *t, sw_error *err);
int sw_trainer_commit_store(sw_trainer *t, sw_error *err);

#endif
