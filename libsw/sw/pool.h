/*
 * sw/pool.h - the central task pool: every prompt with its history, handed
 * out by learning signal.
 *
 * A pool is a file holding a stream of prompt records (sw-stream(5)
 * msgpack), each with a `pool` map of its statistics.  Opening a pool takes
 * a lock on PATH.lock (shared to read, exclusive to change it), so two
 * programs changing one pool never lose each other's updates; committing
 * writes a temporary file beside it, syncs it and renames it over PATH, so
 * a crash leaves either the old pool or the new one, never a torn one.
 *
 * The priority rule (sw-pool(1) documents it for users):
 *   unseen prompts come first, in the order they were added;
 *   a seen prompt with pass rate p and reward standard deviation s has the
 *   signal S = max(4 p (1 - p), min(1, 2 s)), the floor F = 0.1 / 2^streak
 *   (streak: how many updates in a row found it solved, p = 1), and
 *   priority (max(S, F)) * (1 + age / 10), where age is the number of
 *   update rounds since it was last seen.
 *
 * Ownership: the caller owns a pool from open to sw_pool_free (free(NULL)
 * is a no-op), which releases the lock and drops what was not committed.
 * Records passed in are copied.
 */
#ifndef SW_POOL_H
#define SW_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_pool_stats {
	uint64_t added;      /* order of addition, from 0 */
	uint64_t seen;       /* updates that included the prompt */
	uint64_t samples;    /* samples counted over all updates */
	uint64_t last_seen;  /* the round of its last update; 0: never */
	uint64_t streak;     /* updates in a row in which every sample passed */
	double pass_rate;    /* of the last update */
	double reward_mean;  /* of the last update */
	double reward_var;   /* of the last update (population variance) */
} sw_pool_stats;

typedef struct sw_pool sw_pool;

/* How sw_pool_open takes a pool. */
enum {
	SW_POOL_READ = 0,   /* no lock (writers replace the file whole), to take from it; the pool must exist */
	SW_POOL_CREATE = 1, /* an exclusive lock, to add to it; a missing file is an empty pool */
	SW_POOL_UPDATE = 2  /* an exclusive lock, to update it from scores; the pool must exist */
};

/*
 * Open and lock the pool at path, as mode (SW_POOL_READ, _CREATE or
 * _UPDATE) says.  Where the pool must exist and does not: SW_EIO with
 * sys_errno ENOENT, and no lock file is made for it (only _CREATE makes a
 * pool, and its lock, "PATH.lock").  A malformed pool file is SW_EFORMAT
 * with the record in err.
 */
sw_pool *sw_pool_open(const char *path, int mode, sw_error *err);
void sw_pool_free(sw_pool *p);

size_t sw_pool_count(const sw_pool *p);
/* The round of the latest update (0 before any). */
uint64_t sw_pool_round(const sw_pool *p);

/* Add a prompt (it must have an `id` string): 1 added, 0 already there (the
 * same fields, but for a `pool` map), < 0 error, SW_EFORMAT where the id is
 * another prompt's already (none is dropped unsaid). */
int sw_pool_add(sw_pool *p, sw_rec *prompt, sw_error *err);

/*
 * Count one scored sample towards its prompt (its `group` string is the
 * prompt's id): 1 counted, 0 skipped because `verifier_error` is set (no
 * trustworthy reward), < 0 error (no group, a group not in the pool, a
 * reward that is missing, not a number, or not finite).  A sample passes
 * when reward >= pass.  Nothing changes until sw_pool_update().
 */
int sw_pool_observe(sw_pool *p, sw_rec *sample, double pass, sw_error *err);
/* Apply what was observed as one round; returns the number of prompts updated. */
size_t sw_pool_update(sw_pool *p);

/* The priority of a seen prompt at the given round (unseen prompts precede all). */
double sw_pool_priority(const sw_pool_stats *s, uint64_t round);

/*
 * The indices of the (at most) n prompts to hand out, highest priority
 * first, into idx; returns how many.  Ties go to the prompt seen fewer
 * times, then to the one added first.
 */
size_t sw_pool_take(const sw_pool *p, size_t n, size_t *idx);

/* Prompt i as a record with its `pool` map, into out (owned by the caller); and its statistics. */
int sw_pool_get(const sw_pool *p, size_t i, sw_rec *out, sw_pool_stats *st);

/* Write the pool back, atomically; SW_EIO with sys_errno on failure. */
int sw_pool_commit(sw_pool *p, sw_error *err);

#pragma GCC visibility pop

#endif
