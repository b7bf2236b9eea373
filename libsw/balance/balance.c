/*
 * balance.c - the partitioners behind sw-balance (see sw/balance.h):
 * k-way Karmarkar-Karp, LPT and sequential chunking, and the micro-batch
 * packer.  Pure computation; no I/O.
 *
 * Karmarkar-Karp for k ranks (Korf's formulation): each partial solution is
 * a k-tuple of subsets kept in descending order of their sums; the two
 * tuples whose spread (largest sum minus smallest) is largest are combined,
 * the largest subset of one with the smallest of the other, and so on.  A
 * single item is the tuple (c, 0, ..., 0); it is never materialised: the
 * items wait in one sorted array, which keeps memory near one tuple per k
 * items instead of one per item (1M items on 64 ranks would otherwise take
 * a gigabyte).
 */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/balance.h"

#define NONE UINT32_MAX

int sw_part_method_parse(const char *name, sw_part_method *m)
{
	if (!strcmp(name, "kk"))
		*m = SW_PART_KK;
	else if (!strcmp(name, "lpt"))
		*m = SW_PART_LPT;
	else if (!strcmp(name, "seq"))
		*m = SW_PART_SEQ;
	else
		return SW_EINVAL;
	return 0;
}

const char *sw_part_method_name(sw_part_method m)
{
	return m == SW_PART_KK ? "kk" : m == SW_PART_LPT ? "lpt" : m == SW_PART_SEQ ? "seq" : "?";
}

/* The keys order_ sorts by: costs (d) or token counts (u), one of the two, or neither (all equal). */
typedef struct keys_ {
	const double *d;
	const uint64_t *u;
	int asc;
} keys_;

static int cmp_keys_(const void *a, const void *b, void *ctx)
{
	const keys_ *k = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = k->d ? (k->d[x] > k->d[y]) - (k->d[x] < k->d[y]) : (k->u[x] > k->u[y]) - (k->u[x] < k->u[y]);
	c = k->asc ? c : -c;
	return c ? c : (x > y) - (x < y);
}

/*
 * The indices 0..n-1 in order of their keys, largest first (smallest with
 * asc); equal keys in index order, so the result does not depend on qsort.
 */
static uint32_t *order_(const double *d, const uint64_t *u, size_t n, int asc)
{
	keys_ k = { d, u, asc };
	uint32_t *o = malloc((n ? n : 1) * sizeof *o);
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++)
		o[i] = (uint32_t)i;
	if (d || u)
		qsort_r(o, n, sizeof *o, cmp_keys_, &k);
	return o;
}

/*
 * The rank at the top of a min-heap of k ranks by load (ties to the lower
 * rank) has grown: sift it down.
 */
static void heap_down_(uint32_t *heap, size_t k, keys_ *load)
{
	uint32_t r = heap[0];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= k)
			break;
		if (c + 1 < k && cmp_keys_(&heap[c + 1], &heap[c], load) < 0)
			c++;
		if (cmp_keys_(&heap[c], &r, load) >= 0)
			break;
		heap[i] = heap[c];
		i = c;
	}
	heap[i] = r;
}

/*
 * The phantom load of each rank, which makes the targets equal:
 * d_r = total * (cmax - c_r) / sum(c).  All zero for equal capacities.
 */
static int phantoms_(const double *cost, size_t n, size_t k, const double *cap, double *d)
{
	double total = 0, csum = 0, cmax = 0;
	int any = 0;
	for (size_t i = 0; i < n; i++)
		total += cost[i];
	for (size_t r = 0; r < k; r++) {
		d[r] = 0;
		if (cap) {
			csum += cap[r];
			if (cap[r] > cmax)
				cmax = cap[r];
		}
	}
	if (!cap)
		return 0;
	for (size_t r = 0; r < k; r++) {
		d[r] = total * (cmax - cap[r]) / csum;
		if (d[r] > 0)
			any = 1;
	}
	return any;
}

/* ---- Karmarkar-Karp ---- */

typedef struct kk_ {
	size_t k;
	double *sum;           /* [tuple * k + j], descending in j */
	uint32_t *head, *tail; /* the subsets' item lists, NONE when empty */
	uint32_t *next;        /* [n + k]: items, then the k phantoms */
	size_t ntup, cap;
	uint32_t *freel;
	size_t nfree;
	uint32_t *heap; /* tuple ids, a max-heap by spread */
	size_t nheap;
	struct sub_ *tmp; /* [k], for merge_ */
} kk_;

static double spread_(const kk_ *s, uint32_t t)
{
	return s->sum[(size_t)t * s->k] - s->sum[(size_t)t * s->k + s->k - 1];
}

/* Larger spread first; equal ones by id, so the order is deterministic. */
static int above_(const kk_ *s, uint32_t a, uint32_t b)
{
	double x = spread_(s, a), y = spread_(s, b);
	return x != y ? x > y : a < b;
}

static void heap_push_(kk_ *s, uint32_t t)
{
	size_t i = s->nheap++;
	while (i && above_(s, t, s->heap[(i - 1) / 2])) {
		s->heap[i] = s->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->heap[i] = t;
}

static uint32_t heap_pop_(kk_ *s)
{
	uint32_t top = s->heap[0], t = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && above_(s, s->heap[c + 1], s->heap[c]))
			c++;
		if (!above_(s, s->heap[c], t))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = t;
	return top;
}

static int tuple_new_(kk_ *s, uint32_t *out)
{
	if (s->nfree) {
		*out = s->freel[--s->nfree];
	} else {
		if (s->ntup == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 64, k = s->k;
			double *sum = realloc(s->sum, cap * k * sizeof *sum);
			if (sum)
				s->sum = sum;
			uint32_t *h = realloc(s->head, cap * k * sizeof *h);
			if (h)
				s->head = h;
			uint32_t *t = realloc(s->tail, cap * k * sizeof *t);
			if (t)
				s->tail = t;
			uint32_t *f = realloc(s->freel, cap * sizeof *f);
			if (f)
				s->freel = f;
			uint32_t *hp = realloc(s->heap, cap * sizeof *hp);
			if (hp)
				s->heap = hp;
			if (!sum || !h || !t || !f || !hp)
				return SW_ENOMEM;
			s->cap = cap;
		}
		*out = (uint32_t)s->ntup++;
	}
	size_t b = (size_t)*out * s->k;
	for (size_t j = 0; j < s->k; j++) {
		s->sum[b + j] = 0;
		s->head[b + j] = s->tail[b + j] = NONE;
	}
	return 0;
}

static void append_(kk_ *s, size_t slot, uint32_t h, uint32_t t)
{
	if (h == NONE)
		return;
	if (s->head[slot] == NONE)
		s->head[slot] = h;
	else
		s->next[s->tail[slot]] = h;
	s->tail[slot] = t;
}

/* Put item x of cost c into the smallest subset of tuple t, then restore the order. */
static void add_item_(kk_ *s, uint32_t t, uint32_t x, double c)
{
	size_t b = (size_t)t * s->k, j = s->k - 1;
	s->next[x] = NONE;
	append_(s, b + j, x, x);
	s->sum[b + j] += c;
	while (j > 0 && s->sum[b + j] > s->sum[b + j - 1]) {
		double ts = s->sum[b + j];
		uint32_t th = s->head[b + j], tt = s->tail[b + j];
		s->sum[b + j] = s->sum[b + j - 1];
		s->head[b + j] = s->head[b + j - 1];
		s->tail[b + j] = s->tail[b + j - 1];
		s->sum[b + j - 1] = ts;
		s->head[b + j - 1] = th;
		s->tail[b + j - 1] = tt;
		j--;
	}
}

/* One subset while a combined tuple is re-sorted. */
typedef struct sub_ {
	double sum;
	uint32_t head, tail, j;
} sub_;

/* Largest sum first; equal sums by position, so the order is deterministic. */
static int cmp_sub_(const void *a, const void *b)
{
	const sub_ *x = a, *y = b;
	if (x->sum != y->sum)
		return x->sum > y->sum ? -1 : 1;
	return x->j < y->j ? -1 : x->j > y->j;
}

/* a := a combined with b (largest of a with smallest of b, ...); b is freed. */
static void merge_(kk_ *s, uint32_t a, uint32_t bt)
{
	size_t k = s->k, A = (size_t)a * k, B = (size_t)bt * k;
	sub_ *t = s->tmp;
	for (size_t j = 0; j < k; j++) {
		size_t from = B + k - 1 - j;
		t[j] = (sub_){ s->sum[A + j] + s->sum[from], s->head[A + j], s->tail[A + j], (uint32_t)j };
		if (t[j].head == NONE) {
			t[j].head = s->head[from];
			t[j].tail = s->tail[from];
		} else if (s->head[from] != NONE) {
			s->next[t[j].tail] = s->head[from];
			t[j].tail = s->tail[from];
		}
	}
	qsort(t, k, sizeof *t, cmp_sub_);
	for (size_t j = 0; j < k; j++) {
		s->sum[A + j] = t[j].sum;
		s->head[A + j] = t[j].head;
		s->tail[A + j] = t[j].tail;
	}
	s->freel[s->nfree++] = bt;
}

static void kk_free_(kk_ *s)
{
	free(s->sum);
	free(s->head);
	free(s->tail);
	free(s->next);
	free(s->freel);
	free(s->heap);
	free(s->tmp);
}

/*
 * No more items than ranks: one item a rank, the largest on the rank of
 * largest capacity, is optimal (no rank can be below the largest item over
 * its capacity), and spares KK its O(n k) work on k-wide tuples.
 */
static int one_each_(const double *cost, size_t n, size_t k, const double *cap, uint32_t *part)
{
	uint32_t *it = order_(cost, NULL, n, 0), *rk = order_(cap, NULL, k, 0);
	if (!it || !rk) {
		free(it);
		free(rk);
		return SW_ENOMEM;
	}
	for (size_t j = 0; j < n; j++)
		part[it[j]] = rk[j];
	free(it);
	free(rk);
	return 0;
}

static int karmarkar_karp_(const double *cost, size_t n, size_t k, const double *cap, uint32_t *part)
{
	if (n <= k)
		return one_each_(cost, n, k, cap, part);
	kk_ s = { .k = k };
	uint32_t *it = order_(cost, NULL, n, 0);
	double *d = malloc(k * sizeof *d);
	s.next = malloc((n + k) * sizeof *s.next);
	s.tmp = malloc(k * sizeof *s.tmp);
	int rc = SW_ENOMEM;
	if (!it || !d || !s.next || !s.tmp)
		goto out;
	int pinned = phantoms_(cost, n, k, cap, d);
	if (pinned) {
		/* the phantoms, one a subset, in one tuple: they end on distinct ranks */
		uint32_t t;
		if ((rc = tuple_new_(&s, &t)))
			goto out;
		for (size_t r = 0; r < k; r++)
			s.tmp[r] = (sub_){ d[r], (uint32_t)(n + r), (uint32_t)(n + r), (uint32_t)r };
		qsort(s.tmp, k, sizeof *s.tmp, cmp_sub_);
		for (size_t j = 0; j < k; j++) {
			uint32_t ph = s.tmp[j].head;
			s.next[ph] = NONE;
			s.sum[(size_t)t * k + j] = s.tmp[j].sum;
			s.head[(size_t)t * k + j] = s.tail[(size_t)t * k + j] = ph;
		}
		heap_push_(&s, t);
	}
	size_t si = 0;
	while (s.nheap + (n - si) >= 2) {
		/* the two largest spreads, from the tuples and the waiting items */
		int is_item[2];
		uint32_t id[2];
		for (int w = 0; w < 2; w++) {
			int use_item = si < n && (!s.nheap || cost[it[si]] > spread_(&s, s.heap[0]));
			is_item[w] = use_item;
			id[w] = use_item ? (uint32_t)si++ : heap_pop_(&s);
		}
		uint32_t t;
		if (is_item[0] && is_item[1]) {
			if ((rc = tuple_new_(&s, &t)))
				goto out;
			add_item_(&s, t, it[id[0]], cost[it[id[0]]]);
			add_item_(&s, t, it[id[1]], cost[it[id[1]]]);
		} else if (is_item[0] || is_item[1]) {
			int w = is_item[0] ? 0 : 1;
			t = id[1 - w];
			add_item_(&s, t, it[id[w]], cost[it[id[w]]]);
		} else {
			t = id[0];
			merge_(&s, t, id[1]);
		}
		heap_push_(&s, t);
	}
	if (s.nheap == 1) {
		size_t b = (size_t)s.heap[0] * k;
		for (size_t j = 0; j < k; j++) {
			uint32_t rank = (uint32_t)j;
			if (pinned)
				for (uint32_t x = s.head[b + j]; x != NONE; x = s.next[x])
					if (x >= n)
						rank = (uint32_t)(x - n);
			for (uint32_t x = s.head[b + j]; x != NONE; x = s.next[x])
				if (x < n)
					part[x] = rank;
		}
	} else if (si < n) {
		part[it[si]] = 0; /* one item alone, all ranks equal */
	}
	rc = 0;
out:
	free(it);
	free(d);
	kk_free_(&s);
	return rc;
}

/* ---- LPT ---- */

static int lpt_(const double *cost, size_t n, size_t k, const double *cap, uint32_t *part)
{
	uint32_t *it = order_(cost, NULL, n, 0);
	double *load = malloc(k * sizeof *load);
	uint32_t *heap = malloc(k * sizeof *heap);
	if (!it || !load || !heap) {
		free(it);
		free(load);
		free(heap);
		return SW_ENOMEM;
	}
	phantoms_(cost, n, k, cap, load);
	/* a min-heap of ranks by load (phantom included); ties to the lower rank */
	keys_ by_load = { load, NULL, 1 };
	for (size_t r = 0; r < k; r++) {
		size_t i = r;
		uint32_t x = (uint32_t)r;
		while (i && cmp_keys_(&x, &heap[(i - 1) / 2], &by_load) < 0) {
			heap[i] = heap[(i - 1) / 2];
			i = (i - 1) / 2;
		}
		heap[i] = x;
	}
	for (size_t j = 0; j < n; j++) {
		uint32_t r = heap[0];
		part[it[j]] = r;
		load[r] += cost[it[j]];
		heap_down_(heap, k, &by_load);
	}
	free(it);
	free(load);
	free(heap);
	return 0;
}

/* ---- sequential chunks ---- */

static void seq_(size_t n, size_t k, const double *cap, uint32_t *part)
{
	double csum = 0, acc = 0;
	for (size_t r = 0; r < k; r++)
		csum += cap ? cap[r] : 1;
	size_t start = 0;
	for (size_t r = 0; r < k; r++) {
		acc += cap ? cap[r] : 1;
		size_t end = r + 1 == k ? n : (size_t)floor((double)n * acc / csum + 0.5);
		if (end > n)
			end = n;
		for (size_t i = start; i < end; i++)
			part[i] = (uint32_t)r;
		if (end > start)
			start = end;
	}
}

int sw_partition(const double *cost, size_t n, size_t k, const double *capacity,
                 sw_part_method method, uint32_t *part, sw_error *err)
{
	if (k == 0 || k > UINT32_MAX / 2 || n > UINT32_MAX / 2 - k)
		return sw_fail(err, SW_EINVAL, "cannot place %zu items on %zu ranks", n, k);
	for (size_t i = 0; i < n; i++)
		if (!isfinite(cost[i]) || cost[i] < 0)
			return sw_fail(err, SW_EINVAL, "item %zu has cost %g, not a finite number >= 0", i, cost[i]);
	if (capacity)
		for (size_t r = 0; r < k; r++)
			if (!isfinite(capacity[r]) || capacity[r] <= 0)
				return sw_fail(err, SW_EINVAL, "rank %zu has capacity %g, not a finite number > 0", r,
				               capacity[r]);
	int rc;
	switch (method) {
	case SW_PART_KK:
		rc = karmarkar_karp_(cost, n, k, capacity, part);
		break;
	case SW_PART_LPT:
		rc = lpt_(cost, n, k, capacity, part);
		break;
	case SW_PART_SEQ:
		seq_(n, k, capacity, part);
		rc = 0;
		break;
	default:
		return sw_fail(err, SW_EINVAL, "unknown partition method %d", (int)method);
	}
	if (rc)
		return sw_fail(err, rc, "out of memory placing %zu items on %zu ranks", n, k);
	return 0;
}

int sw_partition_stats(const double *cost, size_t n, size_t k, const double *capacity,
                       const uint32_t *part, double *load, sw_part_stats *st)
{
	double *l = load ? load : calloc(k ? k : 1, sizeof *l);
	if (!l)
		return SW_ENOMEM;
	double total = 0, biggest = 0, csum = 0, cmax = 0;
	for (size_t r = 0; r < k; r++) {
		l[r] = 0;
		double c = capacity ? capacity[r] : 1;
		csum += c;
		if (c > cmax)
			cmax = c;
	}
	for (size_t i = 0; i < n; i++) {
		if (part[i] >= k) {
			if (!load)
				free(l);
			return SW_EINVAL;
		}
		l[part[i]] += cost[i];
		total += cost[i];
		if (cost[i] > biggest)
			biggest = cost[i];
	}
	st->total = total;
	st->imbalance = st->lower_bound = st->over_bound = 1;
	if (total > 0) {
		double worst = 0;
		for (size_t r = 0; r < k; r++) {
			double target = total * (capacity ? capacity[r] : 1) / csum;
			if (l[r] / target > worst)
				worst = l[r] / target;
		}
		double lb = biggest / (total * cmax / csum);
		st->imbalance = worst;
		st->lower_bound = lb > 1 ? lb : 1;
		st->over_bound = worst / st->lower_bound;
	}
	if (!load)
		free(l);
	return 0;
}

/* ---- micro-batches ---- */

/*
 * First-fit decreasing, items in the order it (largest first): bin[i] for every item; returns the number of
 * bins, or 0 with *oom set.  A segment tree over the bins' room finds the
 * leftmost bin with room for an item in O(log n); an item over budget gets
 * a fresh bin of its own, which then has no room.
 */
static size_t ffd_(const uint32_t *it, const uint64_t *tokens, size_t n, uint64_t budget, uint32_t *bin, int *oom)
{
	size_t leaves = 1;
	while (leaves < n)
		leaves *= 2;
	uint64_t *room = malloc(2 * leaves * sizeof *room);
	*oom = 0;
	if (!room) {
		*oom = 1;
		return 0;
	}
	for (size_t i = 0; i < 2 * leaves; i++)
		room[i] = budget;
	size_t used = 0;
	for (size_t j = 0; j < n; j++) {
		uint64_t t = tokens[it[j]];
		size_t node = 1;
		if (t > budget) {
			/* the leftmost bin never used is the first of the still-full ones past used */
			node = leaves + used;
			t = budget;
		} else {
			while (node < leaves)
				node = room[2 * node] >= t ? 2 * node : 2 * node + 1;
		}
		size_t b = node - leaves;
		bin[it[j]] = (uint32_t)b;
		if (b + 1 > used)
			used = b + 1;
		room[node] -= t;
		for (node /= 2; node; node /= 2)
			room[node] = room[2 * node] > room[2 * node + 1] ? room[2 * node] : room[2 * node + 1];
	}
	free(room);
	return used;
}

size_t sw_micro_count(const uint64_t *tokens, size_t n, uint64_t budget)
{
	if (n == 0)
		return 0;
	uint32_t *it = order_(NULL, tokens, n, 0);
	uint32_t *bin = malloc(n * sizeof *bin);
	int oom = 1;
	size_t m = it && bin ? ffd_(it, tokens, n, budget, bin, &oom) : 0;
	free(it);
	free(bin);
	return oom ? 0 : m;
}

int sw_micro_split(const uint64_t *tokens, size_t n, uint64_t budget, size_t count,
                   uint32_t *micro, size_t *empty, size_t *over, sw_error *err)
{
	if (count == 0 || count > UINT32_MAX || n > UINT32_MAX)
		return sw_fail(err, SW_EINVAL, "cannot split %zu items into %zu micro-batches", n, count);
	uint32_t *it = order_(NULL, tokens, n, 0), *order = NULL;
	uint64_t *load = calloc(count, sizeof *load);
	uint32_t *items = calloc(count, sizeof *items);
	uint32_t *heap = malloc(count * sizeof *heap);
	int rc = SW_ENOMEM;
	if (!it || !load || !items || !heap)
		goto out;
	size_t nover = 0;
	for (size_t i = 0; i < n; i++)
		nover += tokens[i] > budget;

	/* first try: LPT into count batches, the most even split there is */
	keys_ by_load = { NULL, load, 1 };
	for (size_t r = 0; r < count; r++)
		heap[r] = (uint32_t)r; /* all zero: already a heap */
	for (size_t j = 0; j < n; j++) {
		uint32_t r = heap[0];
		micro[it[j]] = r;
		load[r] += tokens[it[j]];
		items[r]++;
		heap_down_(heap, count, &by_load);
	}
	int fits = 1;
	for (size_t r = 0; r < count; r++)
		if (load[r] > budget && items[r] > 1)
			fits = 0;

	if (!fits) {
		/* LPT broke the budget: pack first-fit decreasing, then split the
		 * fullest batches of several items in two until there are count */
		int oom;
		size_t m = ffd_(it, tokens, n, budget, micro, &oom);
		if (oom)
			goto out;
		if (m > count) {
			rc = sw_fail(err, SW_EINVAL, "%zu items need %zu micro-batches of %llu tokens, more than %zu",
			             n, m, (unsigned long long)budget, count);
			goto out;
		}
		memset(load, 0, count * sizeof *load);
		memset(items, 0, count * sizeof *items);
		for (size_t i = 0; i < n; i++) {
			load[micro[i]] += tokens[i];
			items[micro[i]]++;
		}
		while (m < count) {
			size_t best = count;
			for (size_t r = 0; r < m; r++)
				if (items[r] > 1 && (best == count || load[r] > load[best]))
					best = r;
			if (best == count)
				break; /* every batch holds one item: the rest stay empty */
			/* the two halves by LPT over the batch's items, largest first */
			uint64_t l0 = 0, l1 = 0;
			uint32_t nb = (uint32_t)m++;
			load[best] = 0;
			items[best] = 0;
			for (size_t j = 0; j < n; j++) {
				uint32_t x = it[j];
				if (micro[x] != best)
					continue;
				if (l1 < l0) {
					micro[x] = nb;
					l1 += tokens[x];
					items[nb]++;
				} else {
					l0 += tokens[x];
					items[best]++;
				}
			}
			load[best] = l0;
			load[nb] = l1;
		}
	}

	/* number the batches small, large, small, large... (by tokens, equal ones by number) */
	size_t nempty = 0;
	for (size_t r = 0; r < count; r++)
		nempty += items[r] == 0;
	if (!(order = order_(NULL, load, count, 1)))
		goto out;
	for (size_t p = 0, lo = 0, hi = count; p < count; p++) {
		uint32_t b = p % 2 == 0 ? order[lo++] : order[--hi];
		heap[b] = (uint32_t)p; /* heap is free now: it maps old number to new */
	}
	for (size_t i = 0; i < n; i++)
		micro[i] = heap[micro[i]];
	if (empty)
		*empty = nempty;
	if (over)
		*over = nover;
	rc = 0;
out:
	if (rc == SW_ENOMEM)
		sw_fail(err, rc, "out of memory splitting %zu items into micro-batches", n);
	free(it);
	free(load);
	free(items);
	free(order);
	free(heap);
	return rc;
}

/* ---- groups: open addressing over FNV-1a hashes, names in one arena ---- */

struct sw_groups {
	uint32_t *slot;   /* index + 1, 0 for empty */
	size_t nslot;     /* a power of two */
	size_t *off;      /* each name's start in the arena */
	uint32_t *len;
	uint64_t *hash;
	size_t n, cap;
	sw_buf names;
};

sw_groups *sw_groups_new(void)
{
	sw_groups *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->nslot = 1024;
	if (!(g->slot = calloc(g->nslot, sizeof *g->slot))) {
		free(g);
		return NULL;
	}
	return g;
}

void sw_groups_free(sw_groups *g)
{
	if (!g)
		return;
	free(g->slot);
	free(g->off);
	free(g->len);
	free(g->hash);
	sw_buf_release(&g->names);
	free(g);
}

static uint64_t fnv_(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

/* The slot holding name, or the empty one where it would go. */
static size_t probe_(const sw_groups *g, const char *name, size_t len, uint64_t h)
{
	size_t mask = g->nslot - 1, i = (size_t)h & mask;
	for (;; i = (i + 1) & mask) {
		uint32_t s = g->slot[i];
		if (!s)
			return i;
		s--;
		if (g->hash[s] == h && g->len[s] == len && !memcmp(g->names.p + g->off[s], name, len))
			return i;
	}
}

int sw_groups_find(const sw_groups *g, const char *name, size_t len, uint32_t *index)
{
	size_t i = probe_(g, name, len, fnv_(name, len));
	if (!g->slot[i])
		return 0;
	*index = g->slot[i] - 1;
	return 1;
}

int sw_groups_add(sw_groups *g, const char *name, size_t len, uint32_t *index)
{
	uint64_t h = fnv_(name, len);
	size_t i = probe_(g, name, len, h);
	if (g->slot[i]) {
		*index = g->slot[i] - 1;
		return 0;
	}
	if (g->n >= UINT32_MAX - 1 || len > UINT32_MAX)
		return SW_ENOMEM;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 256;
		size_t *off = realloc(g->off, cap * sizeof *off);
		if (off)
			g->off = off;
		uint32_t *l = realloc(g->len, cap * sizeof *l);
		if (l)
			g->len = l;
		uint64_t *hs = realloc(g->hash, cap * sizeof *hs);
		if (hs)
			g->hash = hs;
		if (!off || !l || !hs)
			return SW_ENOMEM;
		g->cap = cap;
	}
	size_t at = g->names.len;
	if (sw_buf_put(&g->names, name, len) || sw_buf_put(&g->names, "", 1))
		return SW_ENOMEM;
	g->off[g->n] = at;
	g->len[g->n] = (uint32_t)len;
	g->hash[g->n] = h;
	g->slot[i] = (uint32_t)++g->n;
	*index = (uint32_t)(g->n - 1);
	if (g->n * 2 > g->nslot) {
		/* keep the table at most half full */
		size_t ns = g->nslot * 2;
		uint32_t *slot = calloc(ns, sizeof *slot);
		if (!slot)
			return SW_ENOMEM;
		for (size_t j = 0; j < g->n; j++) {
			size_t k = (size_t)g->hash[j] & (ns - 1);
			while (slot[k])
				k = (k + 1) & (ns - 1);
			slot[k] = (uint32_t)(j + 1);
		}
		free(g->slot);
		g->slot = slot;
		g->nslot = ns;
	}
	return 1;
}

size_t sw_groups_count(const sw_groups *g)
{
	return g->n;
}

const char *sw_groups_name(const sw_groups *g, uint32_t index, size_t *len)
{
	if (len)
		*len = g->len[index];
	return (const char *)g->names.p + g->off[index];
}
