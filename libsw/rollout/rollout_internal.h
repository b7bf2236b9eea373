/*
 * rollout_internal.h - what the files of libsw/rollout share: the
 * scheduler's state (scheduler.c generates, score.c scores), and the
 * in-order output (order.c).
 */
#ifndef SW_ROLLOUT_INTERNAL_H
#define SW_ROLLOUT_INTERNAL_H

#include <time.h>
#include "common/internal.h"
#include "sw/rollout.h"

/* ---- the in-order output (order.c) ---- */
typedef struct sw_rollout_order sw_rollout_order;
sw_rollout_order *sw_rollout_order_new(uint64_t G);
void sw_rollout_order_free(sw_rollout_order *o);
/* Sample key (index * G + k) is finished: hand out what is due through io->put. */
int sw_rollout_order_put(sw_rollout_order *o, uint64_t key, const uint8_t *p, size_t n,
                         const sw_rollout_io *io, sw_error *err);
/* Prompt idx gives no samples (it was skipped). */
int sw_rollout_order_skip(sw_rollout_order *o, uint64_t idx, const sw_rollout_io *io, sw_error *err);
/* Samples handed out so far. */
uint64_t sw_rollout_order_out(const sw_rollout_order *o);
/* Every sample still held, in key order. */
int sw_rollout_order_drain(sw_rollout_order *o, const sw_rollout_io *io, sw_error *err);

/* ---- the scheduler ---- */

typedef struct sw_rollout_group sw_rollout_group;
typedef struct sw_rollout_sample sw_rollout_sample;
typedef struct sw_rollout_item sw_rollout_item;

struct sw_rollout {
	sw_rollout_config c;       /* stops, score_field, store_name: our copies */
	const sw_model *m;
	const sw_tokenizer *tok;
	int V, C;                  /* vocabulary, context */
	int32_t stop_ids[64];
	int nstop_ids;
	size_t max_stop_len;
	sw_rec *in;                /* the record pulled last (the program's) */
	sw_rec *out;               /* the record being built */
	uint64_t nread;            /* records pulled */
	uint64_t skipped, gen_tokens;
	bool input_done;
	bool halted;               /* an invalid record ended the reading */
	char halt_msg[sizeof ((sw_error *)0)->msg];
	bool started, done;
	int failed;                /* the SW_E* code of a failed step, or 0 */
	char fail_msg[sizeof ((sw_error *)0)->msg];

	/* generation (scheduler.c) */
	sw_rollout_order *order;
	sw_decoder *d;
	sw_sampler *sampler;
	/* A step's draws, made ahead over the threads (one sampler each):
	 * the row's uniform, token (< 0: failed, drawn again in order) and log-prob. */
	sw_sampler **samplers;
	int nsamplers;
	double *pre_u;
	int32_t *pre_t;
	float *pre_lp;
	int max_seqs;
	sw_rollout_sample **by_id;  /* live responses by decoder id */
	sw_rollout_group **root_of; /* roots by decoder id */
	sw_rollout_group *groups, **groups_tail; /* groups with responses still to start */
	int live;
	int64_t cap_tok, reserved;
	int *pad_left;             /* --static: pad tokens a finished row may still take, -1: none */
	int64_t *pad_res;          /* its KV reservation */
	int npad;
	int32_t pad_tok;
	uint64_t last_seq;
	struct timespec t0;
	double last_flush;
	uint64_t flushed;          /* samples handed out at the last flush */

	/* scoring (score.c) */
	sw_engine *e;
	sw_rollout_item *items;
	int nitems, nimg;          /* records batched, and their images */
	int64_t ntok, budget;
	float *lp;
	size_t lpcap;
};

/* An invalid record (the one pulled last): counted and skipped, or it ends the reading. */
void sw_rollout_invalid(sw_rollout *r, const sw_rollout_io *io, const char *msg);
/* The weights' read sequence (0 without a store). */
int sw_rollout_read_begin(sw_rollout *r, uint64_t *seq, sw_error *err);
bool sw_rollout_read_retry(const sw_rollout *r, uint64_t seq);
/* Wrap a failure of a callee (whose message is in *inner) as "PREFIX: MSG". */
int sw_rollout_fail(sw_error *err, const sw_error *inner, int code, const char *prefix);

int sw_rollout_score_new(sw_rollout *r, sw_error *err);
int sw_rollout_score_step(sw_rollout *r, const sw_rollout_io *io, sw_error *err);
void sw_rollout_score_free(sw_rollout *r);

#endif
