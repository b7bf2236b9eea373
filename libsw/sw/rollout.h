/*
 * sw/rollout.h - the rollout scheduler: G responses per prompt generated
 * with continuous batching over one sw_decoder, each with the per-token
 * log-probabilities of the sampling policy; or, in score mode, those
 * log-probabilities for responses already in the records.
 *
 * A prompt is prefilled once, as a "root" sequence that is never extended,
 * and each of its G responses is a fork of the root (the prompt's KV pages
 * are shared).  Every draw comes from the counter-based generator of
 * sw/sampler.h keyed by (seed, the prompt's place in the input, k, step),
 * so a sample does not depend on the batch size, on what shared its steps
 * or on the order in which responses finish.  Samples are handed out in the
 * order of the input (prompt by prompt, response k after k - 1) as soon as
 * those before them are out.
 *
 * The program drives it: it reads the input and hands records over when the
 * scheduler pulls them (sw_rollout_io.next), takes finished records in order
 * (put), and hears of invalid records (invalid).  With a weight store, a
 * write to the store while responses are in flight ends them as "abort" and
 * prefills the waiting prompts again with the new weights.
 *
 * Ownership: sw_rollout_new borrows the model, the tokenizer and the store
 * (they must outlive the scheduler) and copies the configuration, stop
 * strings included.  sw_rollout_free(NULL) is a no-op.  A scheduler has no
 * state outside its object: any number run in one process, each from one
 * thread at a time.
 */
#ifndef SW_ROLLOUT_H
#define SW_ROLLOUT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "image.h"
#include "model.h"
#include "record.h"
#include "sampler.h"
#include "store.h"
#include "tokenizer.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_rollout_config {
	int G;                     /* responses per prompt (>= 1) */
	int batch;                 /* responses decoded at once; in score mode, records per forward */
	int max_new;               /* longest response, in tokens */
	sw_sampling sampling;      /* score mode uses only its temperature */
	uint64_t seed;
	const char *const *stops;  /* stop strings, nstops of them (non-empty) */
	size_t nstops;
	/* End tokens besides the model's eos_token_ids and the tokenizer's stop
	 * tokens (both always count); ids outside the vocabulary are ignored. */
	const int32_t *stop_ids;
	int nstop_ids;
	bool padded;               /* static batching: a batch waits for its longest response */
	bool skip_invalid;         /* go on past an invalid record (else stop reading at it) */
	bool score;                /* score the records' responses; generate nothing */
	const char *score_field;   /* score mode: the field written (NULL: "logprobs") */
	double kv_bytes;           /* the KV cache's budget; 0: 8 GiB or half the memory */
	sw_store *store;           /* where the weights live, or NULL: they never change */
	const char *store_name;    /* the store as messages name it */
	/* A LLaVA model's image processor (sw_image_proc_load of its directory), borrowed; NULL: a
	 * sample with images is invalid ("no image processor"). */
	const sw_image_proc *image_proc;
} sw_rollout_config;

/* G 1, batch 64, max_new 256, sw_sampling_defaults(), score_field "logprobs". */
sw_rollout_config sw_rollout_config_defaults(void);

/*
 * A stop string as a user writes it (sw-rollout --stop "\n\n"): the escapes
 * \n, \t, \r, \\ and \xHH become their bytes, any other character stays.
 * *out is malloc'd (the caller frees).  SW_EINVAL for an unknown escape, a
 * \x without two hex digits, a \x00, or a string that comes out empty.
 */
int sw_rollout_stop_parse(const char *arg, char **out, sw_error *err);

/* sw_rollout_io.next's answer when no record is there yet and it was told not to block. */
enum { SW_ROLLOUT_WAIT = 2 };

typedef struct sw_rollout_io {
	void *ctx;
	/*
	 * The next input record into *rec (owned by the program, valid until the
	 * next call): 1; 0 when there are no more (where the input failed the
	 * program keeps the reason); SW_ROLLOUT_WAIT when none is there yet and
	 * block is false; a negative SW_E* code stops the scheduler with it.
	 * The scheduler blocks only when it has nothing else to do.
	 */
	int (*next)(void *ctx, bool block, sw_rec **rec);
	/* One output record (msgpack bytes, borrowed for the call); non-zero stops the scheduler. */
	int (*put)(void *ctx, const uint8_t *mp, size_t n);
	/* Let what was put flow on downstream: called within 50 ms (and a step) of a put
	 * while generating, after each scored batch; may be NULL. */
	int (*flush)(void *ctx);
	/* The record pulled last is invalid, and why (no location; the program knows
	 * which record it is).  It is then skipped or ends the reading (skip_invalid). */
	void (*invalid)(void *ctx, const char *msg);
	/* The 0-based place in the whole input of the record next gave last: the
	 * stream of its draws and, without an id, its name (place + 1).  Where
	 * ranks share an input out, a prompt thus draws what it draws in one
	 * process.  NULL: the records pulled before it, as in one process. */
	uint64_t (*place)(void *ctx);
	/* Where the id of the record next gave last was given before ("record 3",
	 * "a.jsonl's record 3"), or NULL where it was not: a second prompt of
	 * one id is invalid (an id names one prompt, whose responses are one
	 * group).  *placed: one of the two has no id (its place names it).
	 * NULL: ids are not compared. */
	const char *(*earlier)(void *ctx, bool *placed);
} sw_rollout_io;

typedef struct sw_rollout sw_rollout;

/*
 * A scheduler for model m and tokenizer tok: NULL with err set when the
 * configuration is out of range (SW_EINVAL; the sampling settings as
 * sw_sampling_check names them) or the decoder cannot be made.
 */
sw_rollout *sw_rollout_new(const sw_model *m, const sw_tokenizer *tok, const sw_rollout_config *c,
                           sw_error *err);
void sw_rollout_free(sw_rollout *r);

/*
 * One step: take in what input there is room for, decode (or score) one
 * batch, hand out what finished.  1 while there is more to do, 0 when the
 * input has ended and every sample is out, a negative SW_E* code on
 * failure (err says why; the output is then incomplete, and every later
 * step fails the same).  When an invalid
 * record stopped the reading (skip_invalid false), the samples before it
 * are finished and handed out, and the last step returns SW_EFORMAT.
 */
int sw_rollout_step(sw_rollout *r, const sw_rollout_io *io, sw_error *err);
/* Step until done: 0, or what the failing step returned. */
int sw_rollout_run(sw_rollout *r, const sw_rollout_io *io, sw_error *err);

/* Invalid records skipped, and response tokens generated, so far. */
uint64_t sw_rollout_skipped(const sw_rollout *r);
uint64_t sw_rollout_tokens(const sw_rollout *r);

/*
 * generation_config.json's eos_token_id in model directory dir (an id or a
 * list of them), where the file is there: the ids below vocab go to
 * ids[*n...].  0 also when there is no such file; SW_EFORMAT / SW_EIO naming
 * the file when it cannot be read or the field is neither an id nor a list
 * of ids; SW_ERANGE when more than cap ids in all would be there.
 */
int sw_rollout_generation_eos(const char *dir, int vocab, int32_t *ids, int cap, int *n, sw_error *err);

/*
 * A sample's images as model cfg takes them, for the rollout and the
 * trainer alike: its `media` pictures (sw_sample_images) preprocessed by
 * proc into px->pixels [px->n][3][S][S] (S the tower's image_size), and
 * the prompt ids[0..*n) with each image placeholder (cfg's image_token_id)
 * expanded to sw_model_image_tokens() copies, as LlavaProcessor does
 * (*ids realloc'd, *n updated).  A prompt that already holds that many
 * copies per image (the prompt_tokens a rollout wrote) is left as it is.
 * A sample without media on any model gives px->n 0 and leaves the
 * prompt.  SW_EFORMAT, with a message that names the item but not the
 * record ("media[0]: file 'x.png': truncated PNG"), for an image that
 * cannot be read, a count of placeholders that is neither, or images for a
 * text-only model; SW_EINVAL when the model has no processor or it gives
 * another size than the tower's.  Free px with sw_sample_pixels_free.
 */
typedef struct sw_sample_pixels {
	int n;
	int size;                  /* S: the side of each image's pixel_values (0 with none) */
	float *pixels;
} sw_sample_pixels;

int sw_sample_pixels_of(sw_rec *rec, const sw_model_config *cfg, const sw_image_proc *proc, int32_t **ids,
                        size_t *n, sw_sample_pixels *px, sw_error *err);
void sw_sample_pixels_free(sw_sample_pixels *px);

/* ---- the feed: a program's input and output around the scheduler ------------------------- */

typedef struct sw_comm sw_comm; /* sw/dist.h */

/*
 * The feed reads the input files in a thread of its own (so that decoding
 * never waits on a pipe that has nothing in it yet) and hands the records
 * to the scheduler through the sw_rollout_io it makes; samples come back
 * in input order through the program's put.  An invalid record is named
 * "FILE: record N: why".
 *
 * Under an MPI launcher (comm of more than one rank) the ranks share the
 * input out: rank 0 reads it in chunks of up to SW_ROLLOUT_CHUNK records
 * and broadcasts each; every rank generates a contiguous block of the
 * chunk (its prompts draw by their place in the whole input, so a sample
 * is what one process makes of it); the blocks' samples are gathered to
 * rank 0, which puts them in input order.  The output is thus the one
 * process's, byte for byte.  Only rank 0 reads files and calls put and
 * flush; skipped is called on the rank that found the record.
 */
enum { SW_ROLLOUT_CHUNK = 1024 };

typedef struct sw_rollout_feed_io {
	void *ctx;
	int (*put)(void *ctx, const uint8_t *mp, size_t n); /* a sample, in input order; non-zero: fail */
	int (*flush)(void *ctx);                             /* samples so far on downstream */
	void (*skipped)(void *ctx, const char *msg);         /* an invalid record skipped (skip_invalid) */
} sw_rollout_feed_io;

typedef struct sw_rollout_feed sw_rollout_feed;

/*
 * A feed of files[0..nfiles) ("-" standard input) for a scheduler made
 * with configuration c (its G, score and skip_invalid count here), over
 * comm (NULL: one process).  Records over max_record bytes are an error
 * (0: the reader's default).  *stop, when it becomes non-zero (a signal),
 * ends a wait for input: the scheduler then fails with SW_EINTR.  The
 * feed borrows files, comm, io and stop.  NULL with err set on failure.
 */
sw_rollout_feed *sw_rollout_feed_new(sw_comm *comm, char *const *files, int nfiles, size_t max_record,
                                     const sw_rollout_config *c, const sw_rollout_feed_io *io,
                                     const volatile sig_atomic_t *stop, sw_error *err);
/* The feed's io, for sw_rollout_step. */
const sw_rollout_io *sw_rollout_feed_io_of(sw_rollout_feed *f);
/*
 * After the steps, with what the last one returned (0, or < 0 with err
 * set): collective over the ranks.  0 when every record was read and
 * every sample put; else the first failure in input order (an invalid
 * record, a read error: SW_EFORMAT / SW_EIO, the samples before it put),
 * or a rank's failure, "rank R: " before its message under MPI.  Every
 * rank returns the same code.
 */
int sw_rollout_feed_finish(sw_rollout_feed *f, int rc, sw_error *err);
/* Input records read and their bytes, whether the input has ended, samples put, invalid records
 * skipped (of every rank: on rank 0 under MPI). */
void sw_rollout_feed_counts(sw_rollout_feed *f, uint64_t *records, uint64_t *bytes, int *ended,
                            uint64_t *written, uint64_t *skipped);
/* Rank 0 under MPI: each rank's seconds spent generating (not waiting on the others) in busy[0..size); 0 when not. */
int sw_rollout_feed_busy(const sw_rollout_feed *f, double *busy, int size);
/* After the input ended, or while its thread waits for room; a thread blocked in a read is left
 * behind with what it uses (the program is about to end). */
void sw_rollout_feed_free(sw_rollout_feed *f);

#pragma GCC visibility pop

#endif
