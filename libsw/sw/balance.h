/*
 * sw/balance.h - partition work across ranks and into micro-batches, and
 * order samples by cost: sw-balance and sw-sort are these objects.
 *
 * The partitioners are pure computation on arrays, no I/O: a caller prices
 * the items with sw/cost.h and hands the numbers here.  The balancer
 * (sw_balancer) does that for a whole batch of records: the abnormal-sample
 * rules, the placement, the micro-batches, the summaries.  The sorter
 * (sw_sorter) orders whole records, spilling to temporary files when they
 * outgrow memory.  An "item" is whatever must stay together: a sample, or a
 * whole group of them.
 *
 * Capacities are relative speeds: a rank of capacity 0.5 should get half the
 * work of a rank of capacity 1.  Every partitioner aims at the target
 * load_r = total * capacity_r / sum(capacity).  Internally a rank of smaller
 * capacity starts with a pinned phantom load that makes all the targets
 * equal, so Karmarkar-Karp and LPT balance "load + phantom" as they would
 * balance equal ranks.
 *
 * Ownership: the partitioners write only into the arrays the caller
 * passes and keep nothing between calls; an object (sw_groups,
 * sw_balancer, sw_sorter) is the caller's from new to free, and free(NULL)
 * is a no-op.
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
 * The balancer: a training batch held in memory, abnormal samples set
 * aside with their reasons, the rest placed on ranks by cost and cut into
 * micro-batches, the same number on every rank.
 *
 *   sw_balancer_add() each sample; sw_balancer_run(); then the samples,
 *   the kept ones in output order, and the summaries.
 */
typedef enum sw_drop {
	SW_DROP_KEPT,           /* not dropped */
	SW_DROP_MALFORMED,      /* a field of the wrong type or shape, or one the cost model cannot read */
	SW_DROP_NON_FINITE,     /* a reward, advantage or logprob that is nan or infinite */
	SW_DROP_VERIFIER_ERROR, /* verifier_error is set */
	SW_DROP_EMPTY,          /* no tokens, or an empty response */
	SW_DROP_TOO_LONG,       /* more tokens than max_len */
	SW_DROP_NO_REWARD,      /* drop_uniform, and no reward to judge the group by */
	SW_DROP_UNIFORM,        /* drop_uniform, and every reward of the group the same */
	SW_DROP_N
} sw_drop;

/* "kept", "malformed", "non_finite", "verifier_error", "empty", "too_long", "no_reward", "uniform_group". */
const char *sw_drop_name(sw_drop r);

/* One sample judged by the rules that need no other sample. */
typedef struct sw_sample_check {
	sw_drop reason;
	char detail[320];  /* why, in a phrase, when dropped */
	uint64_t tokens;   /* T of the cost model */
	double cost;       /* the cost as an f32 holds it, as written into records */
	double reward;     /* the field reward, when has_reward */
	int has_reward;
} sw_sample_check;

/*
 * The rules, in order of precedence: the cost model reads the sample;
 * token arrays of token ids; logprobs one finite number a response token;
 * reward, advantage and rewards finite numbers; no verifier_error; some
 * tokens and a response; at most max_len tokens (0: no limit).  Returns
 * c->reason.
 */
sw_drop sw_sample_check_rec(const sw_cost_model *cm, sw_rec *rec, uint64_t max_len, sw_sample_check *c);

typedef struct sw_balancer sw_balancer;

typedef struct sw_balance_opts {
	size_t ranks;              /* >= 1 */
	const double *capacity;    /* ranks relative speeds (copied), or NULL for equal ranks */
	sw_part_method method;
	int split_groups;          /* place samples one by one, not whole groups */
	uint64_t max_tokens;       /* cut each rank's share into micro-batches of at most this; 0: one */
	uint64_t max_len;          /* drop samples of more tokens; 0: no limit */
	int drop_uniform;          /* drop groups whose rewards are all equal */
	const sw_cost_model *cost; /* prices the samples; the caller's, read only */
} sw_balance_opts;

/* NULL and err when out of memory, or with no ranks or no cost model (SW_EINVAL). */
sw_balancer *sw_balancer_new(const sw_balance_opts *o, sw_error *err);
void sw_balancer_free(sw_balancer *b);
/* Take a sample (its bytes copied) and judge it; file and record are the caller's, kept for its messages. */
int sw_balancer_add(sw_balancer *b, sw_rec *rec, uint32_t file, uint64_t record, sw_error *err);
/* Drop the uniform groups, place the rest, cut the micro-batches; err says why not. */
int sw_balancer_run(sw_balancer *b, sw_error *err);

typedef struct sw_balance_sample {
	const uint8_t *bytes;   /* the record as it came, msgpack; valid until the balancer is freed */
	size_t len;
	sw_drop reason;
	const char *detail;     /* why it was dropped, or NULL */
	uint32_t file;          /* as given to sw_balancer_add */
	uint64_t record;
	uint32_t rank, micro;   /* where it goes, when kept */
	uint64_t tokens;
	double cost;
} sw_balance_sample;

/* The samples, in input order: i < sw_balancer_count(). */
size_t sw_balancer_count(const sw_balancer *b);
void sw_balancer_sample(const sw_balancer *b, size_t i, sw_balance_sample *out);
/* After run: the kept samples in output order (by rank, micro-batch, then input): sample numbers. */
size_t sw_balancer_kept(const sw_balancer *b);
size_t sw_balancer_at(const sw_balancer *b, size_t j);

typedef struct sw_balance_summary {
	size_t ranks, samples, kept, dropped, groups, items;
	uint64_t drops[SW_DROP_N];      /* samples by reason; drops[SW_DROP_KEPT] is kept */
	sw_part_stats part;
	double cost_max, cost_mean;     /* the largest rank's cost, and the mean */
	size_t micro_batches, over_budget, empty_micro_batches;
} sw_balance_summary;

typedef struct sw_rank_summary {
	double capacity, capacity_share; /* the rank's capacity, and its share of all */
	double cost, share;              /* its cost, and its share of the total */
	size_t samples, groups;
	uint64_t tokens;
} sw_rank_summary;

/* After run: the batch as a whole, and rank r < ranks. */
void sw_balancer_summary(const sw_balancer *b, sw_balance_summary *out);
void sw_balancer_rank(const sw_balancer *b, size_t r, sw_rank_summary *out);
/*
 * After run: the summaries as one line of JSON (sw-balance --stats; the
 * fields are sw-balance(1)'s), malloc'd and NUL-terminated, *len bytes
 * with the newline; NULL and err when out of memory.
 */
char *sw_balancer_stats_json(const sw_balancer *b, size_t *len, sw_error *err);

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
