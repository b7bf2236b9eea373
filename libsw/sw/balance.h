/*
 * sw/balance.h - partition work across ranks and into micro-batches.
 *
 * The partitioners are pure computation on arrays, no I/O: the programs
 * read the samples, price them with sw/cost.h, and hand the numbers here.
 * The sorter (sw_sorter, below) orders whole records, spilling to
 * temporary files when they outgrow memory.
 * An "item" is whatever must stay together: a sample, or a whole group of
 * them.
 *
 * Capacities are relative speeds: a rank of capacity 0.5 should get half the
 * work of a rank of capacity 1.  Every partitioner aims at the target
 * load_r = total * capacity_r / sum(capacity).  Internally a rank of smaller
 * capacity starts with a pinned phantom load that makes all the targets
 * equal, so Karmarkar-Karp and LPT balance "load + phantom" as they would
 * balance equal ranks.
 *
 * Ownership: the partitioners write only into the arrays the caller
 * passes and keep nothing between calls; an object (sw_groups, sw_sorter)
 * is the caller's from new to free, and free(NULL) is a no-op.
 */
#ifndef SW_BALANCE_H
#define SW_BALANCE_H

#include <stddef.h>
#include <stdint.h>
#include "cost.h"
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_part_method {
	SW_PART_KK,  /* Karmarkar-Karp largest differencing, k-way */
	SW_PART_LPT, /* greedy: largest item first onto the least loaded rank */
	SW_PART_SEQ  /* contiguous chunks of equal count (by capacity), costs ignored: the baseline */
} sw_part_method;

/* "kk", "lpt", "seq"; SW_EINVAL (-10) for another name. */
int sw_part_method_parse(const char *name, sw_part_method *m);
const char *sw_part_method_name(sw_part_method m);

/*
 * Place n items of cost[i] (finite, >= 0) on k ranks: part[i] in [0, k).
 * capacity: k finite positive numbers, or NULL for equal ranks.  Every item
 * is placed exactly once.  SW_EINVAL for k == 0, a bad cost or capacity,
 * SW_ENOMEM.  Deterministic: the same input gives the same placement.
 */
int sw_partition(const double *cost, size_t n, size_t k, const double *capacity,
                 sw_part_method method, uint32_t *part, sw_error *err);

typedef struct sw_part_stats {
	double total;       /* sum of all costs */
	double imbalance;   /* max over ranks of load / target; max/mean with equal capacities */
	double lower_bound; /* no placement can have imbalance below this: max(1, largest item / largest target) */
	double over_bound;  /* imbalance / lower_bound: 1 is optimal */
} sw_part_stats;

/*
 * Loads of a placement: load[r] (k of them; may be NULL) and the figures
 * above.  With total 0 every ratio is 1.  SW_EINVAL for a part[i] >= k.
 */
int sw_partition_stats(const double *cost, size_t n, size_t k, const double *capacity,
                       const uint32_t *part, double *load, sw_part_stats *st);

/*
 * The number of micro-batches of at most budget tokens that first-fit
 * decreasing packs n items of tokens[i] into; an item over budget takes one
 * of its own.  0 for n == 0.
 */
size_t sw_micro_count(const uint64_t *tokens, size_t n, uint64_t budget);

/*
 * Split n items into exactly count micro-batches (count >= 1, and at least
 * sw_micro_count() unless the caller accepts over-budget batches, which it
 * cannot: SW_EINVAL), each of at most budget tokens unless it is a single
 * item over budget, and balanced by tokens as far as the budget allows.
 * micro[i] is the batch of item i, numbered so that batches go small, large,
 * small, large... (the smallest first, then the largest, and so on inwards).
 * When n < count some batches stay empty: *empty (may be NULL) says how
 * many; *over (may be NULL) counts the items over budget.
 */
int sw_micro_split(const uint64_t *tokens, size_t n, uint64_t budget, size_t count,
                   uint32_t *micro, size_t *empty, size_t *over, sw_error *err);

/*
 * Groups: an index of names (a sample's group, a prompt's id), each numbered
 * 0, 1, 2... in the order first seen.  The set copies the names it is given.
 */
typedef struct sw_groups sw_groups;

sw_groups *sw_groups_new(void);
void sw_groups_free(sw_groups *g); /* NULL is a no-op */
/* *index of name[0..len): 1 when it is new, 0 when seen before, SW_ENOMEM. */
int sw_groups_add(sw_groups *g, const char *name, size_t len, uint32_t *index);
/* 1 and *index when present, else 0. */
int sw_groups_find(const sw_groups *g, const char *name, size_t len, uint32_t *index);
size_t sw_groups_count(const sw_groups *g);
/* The name numbered index (NUL-terminated, *len bytes), valid until the set is freed. */
const char *sw_groups_name(const sw_groups *g, uint32_t index, size_t *len);

/*
 * The sorter: records in, the same records out in order of their key (the
 * estimated cost, or a numeric or string field), each group (the field
 * "group"; a record without one is a group of its own) kept together and
 * placed by its total (or, for a string key, by its smallest key; largest
 * with reverse).  Ties keep input order, so the output is the same whatever
 * the memory: what does not fit is sorted into runs in unlinked temporary
 * files (zstd msgpack) and merged, at most 64 at a time.
 *
 *   sw_sorter_add() each record; sw_sorter_finish(); sw_sorter_next()
 *   until it returns 0.
 */
typedef struct sw_sorter sw_sorter;

typedef struct sw_sort_opts {
	const char *key;    /* the field to sort by; NULL: the cost, written into each record as "cost" (f32) */
	const sw_cost_model *cost; /* prices the records when key is NULL; the caller's, read only */
	int reverse;        /* largest first */
	int no_group;       /* each record by its own key, groups ignored */
	uint64_t memory;    /* bytes to sort in memory before spilling (0: 256M) */
	const char *tmpdir; /* where runs go (NULL: $TMPDIR, else /tmp) */
	size_t max_record;  /* the size limit when reading runs back (0: SW_MAX_RECORD_DEFAULT) */
} sw_sort_opts;

/* NULL and err when out of memory, or with neither a key nor a cost model (SW_EINVAL). */
sw_sorter *sw_sorter_new(const sw_sort_opts *o, sw_error *err);
void sw_sorter_free(sw_sorter *s);
/*
 * Take one record (its bytes are copied; with the cost as key, rec gains
 * the field "cost").  A record that cannot be keyed is SW_ENOENT (no such
 * field), SW_ETYPE or SW_EFORMAT (a bad key or group, a nan), or the cost
 * model's error, with err->msg saying why and the caller naming the record;
 * a run that cannot be spilled is SW_EIO, with err->msg naming the directory.
 */
int sw_sorter_add(sw_sorter *s, sw_rec *rec, sw_error *err);
/* The input is complete: order the groups and merge what was spilled. */
int sw_sorter_finish(sw_sorter *s, sw_error *err);
/*
 * The next record in order: 1 with its msgpack bytes in p[0..n) (valid
 * until the next call) and *group its group's place in the output (without
 * groups, the record's own place), 0 at the end, or an error.
 */
int sw_sorter_next(sw_sorter *s, const uint8_t **p, size_t *n, uint64_t *group, sw_error *err);
/* The records added so far. */
uint64_t sw_sorter_count(const sw_sorter *s);

#pragma GCC visibility pop

#endif
