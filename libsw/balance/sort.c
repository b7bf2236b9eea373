/*
 * sort.c - the external sort behind sw-sort (see sw/balance.h): samples
 * ordered by estimated cost or by a field, each group kept together,
 * streams larger than memory included.
 *
 * It works the way sort(1) does: records gather in a buffer of a given
 * size; when it fills, it is sorted and spilled as a zstd-compressed run to
 * a temporary file (unlinked at once, so a crash leaves nothing behind),
 * and the runs are merged with a heap at the end, at most MERGE_FAN_IN at a
 * time.  Ties keep input order everywhere (the merge breaks them by run
 * number, and runs are cut from the input in order), so the output is the
 * same whatever the buffer's size.
 *
 * A run is an open descriptor (its file has no name), so the runs are kept
 * few as they come: whenever the last MERGE_FAN_IN runs are of one level,
 * they are merged into one run of the next (settle_), as a log-structured
 * merge does.  At most MERGE_FAN_IN - 1 runs a level are open, and every
 * record is written once a level: a few dozen descriptors however large the
 * input, where a descriptor a spill ran into the open file limit (1024 by
 * default: 16 GB at -S 16M).
 *
 * Groups complicate this: a record's place depends on its group's total,
 * known only at the end.  So with groups the input is spilled as it comes,
 * in input order, to one file, and once the input is read and every group's
 * total known, it is read back a buffer at a time, each sorted by its
 * groups' final order and written as a run; a small array per run (4 bytes
 * a record) carries each record's group order into the merge.
 */
#define _GNU_SOURCE /* qsort_r: the comparisons need the sorter */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/internal.h"
#include "sw/balance.h"
#include "sw/cost.h"

#define MERGE_FAN_IN 64

/* One record in the buffer. */
typedef struct ent_ {
	size_t off;
	uint32_t len;
	uint32_t group;
	uint64_t seq;
	double key;
	uint32_t skey_off, skey_len; /* a string key: where in the record's bytes */
} ent_;

typedef struct run_ {
	int fd;
	uint64_t n;
	uint32_t *ord; /* grouped: each record's group place, in run order */
	unsigned level; /* 0 a spill; L + 1 a merge of MERGE_FAN_IN runs of level L */
} run_;

/* A run being merged: its reader and its current record. */
typedef struct head_ {
	sw_reader *r;
	sw_rec *rec;
	const uint32_t *ord;
	uint64_t pos;
	double key;
	const char *s;
	size_t sn;
	size_t run; /* its number: ties go to the earlier run, which holds earlier input */
} head_;

typedef struct merge_ {
	head_ *h;
	head_ **heap;
	size_t k, n;
	size_t lo;     /* the runs it reads: [lo, lo + k) */
	head_ *taken;  /* the head whose record the caller holds: advanced on the next call */
} merge_;

struct sw_sorter {
	char *key;          /* NULL: the cost */
	char *tmpdir;
	int reverse, grouped;
	int key_string;     /* -1 until the first record says */
	uint64_t memory;
	size_t max_record;
	const sw_cost_model *cm;
	sw_rec *scratch;    /* a record edited in memory, read again from its bytes */

	sw_groups *groups;
	double *gsum;       /* numeric keys: each group's total */
	char **gstr;        /* string keys: each group's first key in the order (min, or max with reverse) */
	size_t *gstrlen;
	uint64_t *gfirst;   /* the group's first record */
	uint32_t *gorder;   /* the group's place in the output */
	size_t gcap;
	uint32_t *gidx;     /* each record's group, by input number */
	size_t gidx_cap;

	sw_buf b;           /* the buffer's bytes */
	ent_ *e;
	size_t n, ecap;

	run_ *runs;
	size_t nruns, runs_cap;
	uint64_t seq;
	int spill_fd;       /* grouped: the input spilled in its order, or -1 */
	sw_writer *spill_w; /* its writer while the input comes */

	int finished;
	size_t pos;         /* in memory: the next entry out */
	uint64_t nout;
	merge_ m;           /* on disk: the final merge */
};

static int oom_(sw_error *err)
{
	return sw_fail(err, SW_ENOMEM, "out of memory");
}

/* ---- keys ---- */

static int cmp_str_(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);
	return c ? c : (an > bn) - (an < bn);
}

static int cmp_keys_(const sw_sorter *s, double a, const char *as, size_t an, double b, const char *bs, size_t bn)
{
	int c = s->key_string == 1 ? cmp_str_(as, an, bs, bn) : (a > b) - (a < b);
	return s->reverse ? -c : c;
}

/* The key of a record: a number into num, or a string view into str and n. */
static int record_key_(sw_sorter *s, sw_rec *rec, double *num, const char **str, size_t *n, sw_error *err)
{
	if (!s->key) {
		sw_cost c;
		if (sw_cost_sample(s->cm, rec, &c, err))
			return err->code ? err->code : SW_EFORMAT;
		float f = (float)c.total;
		int rc = sw_rec_set_f32(rec, "cost", f);
		if (rc)
			return sw_fail(err, rc, "cannot set 'cost'");
		*num = f; /* the key is what is written, so a re-read run compares the same */
		return 0;
	}
	sw_val v;
	int rc = sw_rec_get(rec, s->key, &v);
	if (rc == SW_ENOENT)
		return sw_fail(err, SW_ENOENT, "no field '%s' to sort by", s->key);
	if (rc)
		return sw_fail(err, rc, "field '%s': %s", s->key, sw_strerror(rc));
	int is_str = v.type == SW_T_STR;
	if (!is_str && sw_val_number(&v, num))
		return sw_fail(err, SW_ETYPE, "field '%s' is a %s, not a number or a str", s->key, sw_type_name(v.type));
	if (s->key_string < 0)
		s->key_string = is_str;
	if (is_str != s->key_string)
		return sw_fail(err, SW_ETYPE, "field '%s' is a %s, where the first record's is a %s", s->key,
		               sw_type_name(v.type), s->key_string ? "str" : "number");
	if (is_str) {
		*str = v.v.str.ptr;
		*n = v.v.str.len;
	} else if (isnan(*num)) {
		return sw_fail(err, SW_EFORMAT, "field '%s' is nan", s->key);
	}
	return 0;
}

/* The key of a record read back from a run: the cost field written when it came in, or the field. */
static int run_key_(const sw_sorter *s, sw_rec *rec, double *num, const char **str, size_t *n, sw_error *err)
{
	int rc = s->key && s->key_string ? sw_rec_get_str(rec, s->key, str, n)
	                                 : sw_rec_get_f64(rec, s->key ? s->key : "cost", num);
	return rc ? sw_fail(err, rc, "a spilled run lost its key field: %s", sw_strerror(rc)) : 0;
}

/* ---- groups ---- */

static int grow_groups_(sw_sorter *s)
{
	size_t cap = s->gcap ? 2 * s->gcap : 4096;
	double *sum = realloc(s->gsum, cap * sizeof *sum);
	if (sum)
		s->gsum = sum;
	char **str = realloc(s->gstr, cap * sizeof *str);
	if (str)
		s->gstr = str;
	size_t *len = realloc(s->gstrlen, cap * sizeof *len);
	if (len)
		s->gstrlen = len;
	uint64_t *first = realloc(s->gfirst, cap * sizeof *first);
	if (first)
		s->gfirst = first;
	if (!sum || !str || !len || !first)
		return SW_ENOMEM;
	s->gcap = cap;
	return 0;
}

/* The group of record number seq, its key counted into the group's. */
static int group_of_(sw_sorter *s, sw_rec *rec, double key, const char *str, size_t sn, sw_error *err)
{
	const char *g;
	size_t glen;
	char own[40];
	uint32_t gi;
	int rc = sw_rec_get_str(rec, "group", &g, &glen);
	if (rc == SW_ETYPE)
		return sw_fail(err, SW_ETYPE, "field 'group' is not a str");
	if (rc) {
		/* no group: alone, under a name no group string can have */
		glen = (size_t)snprintf(own, sizeof own, "%c#%llu", 0, (unsigned long long)s->seq);
		g = own;
	}
	int isnew = sw_groups_add(s->groups, g, glen, &gi);
	if (isnew < 0)
		return oom_(err);
	if (isnew) {
		if (gi >= s->gcap && grow_groups_(s))
			return oom_(err);
		s->gsum[gi] = 0;
		s->gstr[gi] = NULL;
		s->gstrlen[gi] = 0;
		s->gfirst[gi] = s->seq;
	}
	if (s->key_string == 1) {
		if (!s->gstr[gi] || cmp_keys_(s, 0, str, sn, 0, s->gstr[gi], s->gstrlen[gi]) < 0) {
			free(s->gstr[gi]);
			if (!(s->gstr[gi] = malloc(sn ? sn : 1)))
				return oom_(err);
			memcpy(s->gstr[gi], str, sn);
			s->gstrlen[gi] = sn;
		}
	} else {
		s->gsum[gi] += key;
	}
	if (s->seq >= s->gidx_cap) {
		size_t cap = s->gidx_cap ? 2 * s->gidx_cap : 65536;
		uint32_t *p = realloc(s->gidx, cap * sizeof *p);
		if (!p)
			return oom_(err);
		s->gidx = p;
		s->gidx_cap = cap;
	}
	s->gidx[s->seq] = gi;
	return 0;
}

static int cmp_group_(const void *a, const void *b, void *ctx)
{
	const sw_sorter *s = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = cmp_keys_(s, s->gsum[x], s->gstr[x], s->gstrlen[x], s->gsum[y], s->gstr[y], s->gstrlen[y]);
	return c ? c : (s->gfirst[x] > s->gfirst[y]) - (s->gfirst[x] < s->gfirst[y]);
}

/* Each group's place in the output, from the totals. */
static int order_groups_(sw_sorter *s)
{
	size_t ng = sw_groups_count(s->groups);
	uint32_t *by = malloc((ng ? ng : 1) * sizeof *by);
	s->gorder = malloc((ng ? ng : 1) * sizeof *s->gorder);
	if (!by || !s->gorder) {
		free(by);
		return SW_ENOMEM;
	}
	for (size_t g = 0; g < ng; g++)
		by[g] = (uint32_t)g;
	qsort_r(by, ng, sizeof *by, cmp_group_, s);
	for (size_t i = 0; i < ng; i++)
		s->gorder[by[i]] = (uint32_t)i;
	free(by);
	return 0;
}

/* ---- the buffer ---- */

static int cmp_ent_(const void *a, const void *b, void *ctx)
{
	const sw_sorter *s = ctx;
	const ent_ *x = a, *y = b;
	const char *base = (const char *)s->b.p;
	int c;
	if (s->grouped)
		c = (s->gorder[x->group] > s->gorder[y->group]) - (s->gorder[x->group] < s->gorder[y->group]);
	else
		c = cmp_keys_(s, x->key, base + x->off + x->skey_off, x->skey_len, y->key, base + y->off + y->skey_off,
		              y->skey_len);
	return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static ent_ *ent_new_(sw_sorter *s)
{
	if (s->n == s->ecap) {
		size_t cap = s->ecap ? 2 * s->ecap : 4096;
		ent_ *e = realloc(s->e, cap * sizeof *e);
		if (!e)
			return NULL;
		s->e = e;
		s->ecap = cap;
	}
	return &s->e[s->n++];
}

/* Append a record's bytes to the buffer as entry seq. */
static int buffer_(sw_sorter *s, const uint8_t *p, size_t len, uint64_t seq, uint32_t group, sw_error *err)
{
	ent_ *e = ent_new_(s);
	if (!e || sw_buf_put(&s->b, p, len))
		return oom_(err);
	*e = (ent_){ .off = s->b.len - len, .len = (uint32_t)len, .group = group, .seq = seq };
	return 0;
}

/* ---- runs: zstd msgpack in unlinked temporary files ---- */

static int tmpfile_(const sw_sorter *s, int *fd, sw_error *err)
{
	size_t n = strlen(s->tmpdir) + 32;
	char *path = malloc(n);
	if (!path)
		return oom_(err);
	snprintf(path, n, "%s/sw-sort.XXXXXX", s->tmpdir);
	*fd = mkstemp(path);
	int e = errno;
	if (*fd >= 0)
		unlink(path); /* gone when we are, however we end */
	free(path);
	if (*fd < 0) {
		sw_fail(err, SW_EIO, "cannot create a temporary file in '%s': %s", s->tmpdir, strerror(e));
		err->sys_errno = e;
		return SW_EIO;
	}
	return 0;
}

static int run_write_fail_(const sw_sorter *s, const sw_writer *w, sw_error *err)
{
	const sw_error *we = sw_writer_error(w);
	sw_fail(err, SW_EIO, "cannot write a run to '%s': %s", s->tmpdir,
	        we->sys_errno ? strerror(we->sys_errno) : we->msg);
	err->sys_errno = we->sys_errno;
	return SW_EIO;
}

static sw_writer *run_writer_(int fd, sw_error *err)
{
	sw_error e = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 1 };
	sw_writer *w = sw_writer_fdopen(fd, "run", &wo, &e);
	if (!w)
		sw_fail(err, e.code ? e.code : SW_ENOMEM, "cannot write a run: %s", e.msg);
	return w;
}

static int run_close_(const sw_sorter *s, sw_writer *w, sw_error *err)
{
	int rc = sw_writer_close(w) ? run_write_fail_(s, w, err) : 0;
	sw_writer_free(w);
	return rc;
}

static run_ *run_new_(sw_sorter *s, sw_error *err)
{
	if (s->nruns == s->runs_cap) {
		size_t cap = s->runs_cap ? 2 * s->runs_cap : 16;
		run_ *r = realloc(s->runs, cap * sizeof *r);
		if (!r) {
			oom_(err);
			return NULL;
		}
		s->runs = r;
		s->runs_cap = cap;
	}
	run_ *r = &s->runs[s->nruns];
	*r = (run_){ .fd = -1 };
	if (tmpfile_(s, &r->fd, err))
		return NULL;
	s->nruns++;
	return r;
}

static int merge_to_(sw_sorter *s, size_t lo, size_t hi, run_ *to, sw_error *err);

/* The last MERGE_FAN_IN runs merged into one, of the level after the first's;
 * settle_: while the last MERGE_FAN_IN runs are of one level, merge them into one of
 * the next.  The levels never rise along the runs (a merge replaces the
 * last ones), so the first and the last of them being of one level is
 * enough.  The merged run holds the latest input: it goes last, keeping
 * ties in order. */
static int merge_last_(sw_sorter *s, sw_error *err)
{
	size_t first = s->nruns - MERGE_FAN_IN;
	run_ merged = { .fd = -1, .level = s->runs[first].level + 1 };
	int rc = tmpfile_(s, &merged.fd, err);
	if (rc)
		return rc;
	rc = merge_to_(s, first, s->nruns, &merged, err);
	s->nruns = first;
	s->runs[s->nruns++] = merged;
	return rc;
}

static int settle_(sw_sorter *s, sw_error *err)
{
	int rc = 0;
	while (!rc && s->nruns >= MERGE_FAN_IN && s->runs[s->nruns - MERGE_FAN_IN].level == s->runs[s->nruns - 1].level)
		rc = merge_last_(s, err);
	return rc;
}

/* Whether a record of len bytes more would take the buffer past its size
 * (the buffer holds the bytes and an entry a record; one record always fits). */
static int full_(const sw_sorter *s, size_t len)
{
	return s->n && s->b.len + len + (s->n + 1) * sizeof(ent_) > s->memory;
}

/* The buffer's records appended, as they are, to the grouped input's spill. */
static int spill_input_(sw_sorter *s, sw_error *err)
{
	if (s->spill_fd < 0 && tmpfile_(s, &s->spill_fd, err))
		return err->code;
	if (!s->spill_w && !(s->spill_w = run_writer_(s->spill_fd, err)))
		return err->code;
	for (size_t i = 0; i < s->n; i++)
		if (sw_writer_put_raw(s->spill_w, s->b.p + s->e[i].off, s->e[i].len))
			return run_write_fail_(s, s->spill_w, err);
	s->b.len = s->n = 0;
	return 0;
}

/* Write the buffer's records as a run, sorted (then settle the runs); or,
 * grouped while the input comes, append them to the input's spill. */
static int spill_(sw_sorter *s, int sorted, sw_error *err)
{
	if (!sorted)
		return spill_input_(s, err);
	qsort_r(s->e, s->n, sizeof *s->e, cmp_ent_, s);
	run_ *r = run_new_(s, err);
	if (!r)
		return err->code;
	sw_writer *w = run_writer_(r->fd, err);
	if (!w)
		return err->code;
	if (s->grouped && !(r->ord = malloc((s->n ? s->n : 1) * sizeof *r->ord))) {
		sw_writer_free(w);
		return oom_(err);
	}
	for (size_t i = 0; i < s->n; i++) {
		if (sw_writer_put_raw(w, s->b.p + s->e[i].off, s->e[i].len)) {
			run_write_fail_(s, w, err);
			sw_writer_free(w);
			return SW_EIO;
		}
		if (r->ord)
			r->ord[i] = s->gorder[s->e[i].group];
	}
	r->n = s->n;
	s->b.len = s->n = 0;
	int rc = run_close_(s, w, err);
	return rc ? rc : settle_(s, err);
}

static sw_reader *run_reader_(const sw_sorter *s, int fd, sw_error *err)
{
	sw_error e = { 0 };
	if (lseek(fd, 0, SEEK_SET) < 0) {
		sw_fail(err, SW_EIO, "cannot read a run back: %s", strerror(errno));
		return NULL;
	}
	sw_reader *r = sw_reader_fdopen(fd, "run", &e);
	if (!r) {
		sw_fail(err, e.code ? e.code : SW_ENOMEM, "cannot read a run back: %s", e.msg);
		return NULL;
	}
	sw_reader_set_max_record(r, s->max_record);
	return r;
}

/* ---- the merge ---- */

static int head_less_(const sw_sorter *s, const head_ *a, const head_ *b)
{
	int c;
	if (s->grouped)
		c = (a->ord[a->pos] > b->ord[b->pos]) - (a->ord[a->pos] < b->ord[b->pos]);
	else
		c = cmp_keys_(s, a->key, a->s, a->sn, b->key, b->s, b->sn);
	return c ? c < 0 : a->run < b->run;
}

/* The head's next record: 1, 0 at the run's end, or an error. */
static int head_next_(const sw_sorter *s, head_ *h, sw_error *err)
{
	int rc = sw_reader_next(h->r, h->rec);
	if (rc < 0)
		return sw_fail(err, sw_reader_error(h->r)->code, "cannot read a run back: %s", sw_reader_error(h->r)->msg);
	if (rc == 1 && !s->grouped && run_key_(s, h->rec, &h->key, &h->s, &h->sn, err))
		return err->code;
	return rc;
}

static void sift_(const sw_sorter *s, head_ **heap, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && head_less_(s, heap[l], heap[m]))
			m = l;
		if (l + 1 < n && head_less_(s, heap[l + 1], heap[m]))
			m = l + 1;
		if (m == i)
			return;
		head_ *t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

/* Open runs[lo, hi) for merging. */
static int merge_open_(sw_sorter *s, merge_ *m, size_t lo, size_t hi, sw_error *err)
{
	*m = (merge_){ .k = hi - lo, .lo = lo };
	m->h = calloc(m->k, sizeof *m->h);
	m->heap = malloc(m->k * sizeof *m->heap);
	if (!m->h || !m->heap)
		return oom_(err);
	for (size_t i = 0; i < m->k; i++) {
		head_ *h = &m->h[i];
		h->ord = s->runs[lo + i].ord;
		h->run = lo + i;
		if (!(h->r = run_reader_(s, s->runs[lo + i].fd, err)))
			return err->code;
		if (!(h->rec = sw_rec_new()))
			return oom_(err);
		int rc = head_next_(s, h, err);
		if (rc < 0)
			return rc;
		if (rc == 1)
			m->heap[m->n++] = h;
	}
	for (size_t i = m->n; i-- > 0;)
		sift_(s, m->heap, m->n, i);
	return 0;
}

/* The next record of the merge: 1 with *top, 0 when done. */
static int merge_next_(sw_sorter *s, merge_ *m, head_ **top, sw_error *err)
{
	if (m->taken) {
		head_ *t = m->taken;
		m->taken = NULL;
		t->pos++;
		int rc = head_next_(s, t, err);
		if (rc < 0)
			return rc;
		if (rc != 1)
			m->heap[0] = m->heap[--m->n];
		sift_(s, m->heap, m->n, 0);
	}
	if (!m->n)
		return 0;
	*top = m->taken = m->heap[0];
	return 1;
}

/* Close the merge and the runs it read. */
static void merge_close_(sw_sorter *s, merge_ *m)
{
	for (size_t i = 0; m->h && i < m->k; i++) {
		sw_reader_free(m->h[i].r);
		sw_rec_free(m->h[i].rec);
		close(s->runs[m->lo + i].fd);
		s->runs[m->lo + i].fd = -1;
		free(s->runs[m->lo + i].ord);
		s->runs[m->lo + i].ord = NULL;
	}
	free(m->h);
	free(m->heap);
	*m = (merge_){ 0 };
}

/* Merge runs[lo, hi) into the run to. */
static int merge_to_(sw_sorter *s, size_t lo, size_t hi, run_ *to, sw_error *err)
{
	merge_ m;
	uint64_t total = 0, done = 0;
	head_ *t;
	int rc = merge_open_(s, &m, lo, hi, err);
	sw_writer *w = rc ? NULL : run_writer_(to->fd, err);
	if (!w) {
		merge_close_(s, &m);
		return err->code;
	}
	for (size_t i = lo; i < hi; i++)
		total += s->runs[i].n;
	if (s->grouped && !(to->ord = malloc((total ? total : 1) * sizeof *to->ord)))
		rc = oom_(err);
	while (!rc) {
		const uint8_t *p;
		size_t len;
		int got = merge_next_(s, &m, &t, err);
		if (got <= 0)
			rc = got;
		else if (sw_rec_bytes(t->rec, &p, &len))
			rc = oom_(err);
		else if (sw_writer_put_raw(w, p, len))
			rc = run_write_fail_(s, w, err);
		else if (to->ord)
			to->ord[done] = t->ord[t->pos];
		if (got <= 0)
			break;
		done++;
	}
	merge_close_(s, &m);
	to->n = done;
	if (rc) {
		sw_writer_free(w);
		return rc;
	}
	return run_close_(s, w, err);
}

/* ---- the sorter ---- */

sw_sorter *sw_sorter_new(const sw_sort_opts *o, sw_error *err)
{
	sw_error spare;
	if (!err)
		err = &spare;
	sw_sorter *s = calloc(1, sizeof *s);
	if (!s) {
		oom_(err);
		return NULL;
	}
	s->spill_fd = -1;
	s->reverse = o->reverse;
	s->grouped = !o->no_group;
	s->key_string = o->key ? -1 : 0;
	s->memory = o->memory ? o->memory : (uint64_t)256 << 20;
	s->max_record = o->max_record ? o->max_record : SW_MAX_RECORD_DEFAULT;
	s->cm = o->cost;
	const char *td = o->tmpdir;
	if (!td)
		td = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if (!o->key && !o->cost) {
		sw_fail(err, SW_EINVAL, "no key and no cost model to sort by");
		free(s);
		return NULL;
	}
	s->key = o->key ? strdup(o->key) : NULL;
	s->tmpdir = strdup(td);
	s->groups = sw_groups_new();
	if ((o->key && !s->key) || !s->tmpdir || !s->groups) {
		sw_sorter_free(s);
		oom_(err);
		return NULL;
	}
	return s;
}

void sw_sorter_free(sw_sorter *s)
{
	if (!s)
		return;
	if (s->m.h)
		merge_close_(s, &s->m);
	for (size_t i = 0; i < s->nruns; i++) {
		if (s->runs[i].fd >= 0)
			close(s->runs[i].fd);
		free(s->runs[i].ord);
	}
	free(s->runs);
	sw_writer_free(s->spill_w);
	if (s->spill_fd >= 0)
		close(s->spill_fd);
	size_t ng = s->groups ? sw_groups_count(s->groups) : 0;
	for (size_t g = 0; s->gstr && g < ng; g++)
		free(s->gstr[g]);
	sw_groups_free(s->groups);
	free(s->gsum);
	free(s->gstr);
	free(s->gstrlen);
	free(s->gfirst);
	free(s->gorder);
	free(s->gidx);
	sw_buf_release(&s->b);
	free(s->e);
	free(s->key);
	free(s->tmpdir);
	sw_rec_free(s->scratch);
	free(s);
}

int sw_sorter_add(sw_sorter *s, sw_rec *rec, sw_error *err)
{
	sw_error spare;
	if (!err)
		err = &spare;
	double key = 0;
	const char *str = NULL;
	size_t sn = 0, len;
	const uint8_t *p;
	int rc;
	if (s->finished)
		return sw_fail(err, SW_EINVAL, "the sorter is finished");
	if ((rc = record_key_(s, rec, &key, &str, &sn, err)))
		return rc;
	if (s->grouped && (rc = group_of_(s, rec, key, str, sn, err)))
		return rc;
	if (sw_rec_bytes(rec, &p, &len) || len > UINT32_MAX)
		return oom_(err);
	if (str && ((const uint8_t *)str < p || (const uint8_t *)str + sn > p + len)) {
		/* an edited record's bytes are put together anew: find the key in them */
		if ((!s->scratch && !(s->scratch = sw_rec_new())) || sw_rec_load(s->scratch, p, len) ||
		    sw_rec_get_str(s->scratch, s->key, &str, &sn))
			return oom_(err);
	}
	size_t skey_off = str ? (size_t)((const uint8_t *)str - p) : 0;
	if (str && skey_off + sn > len)
		return sw_fail(err, SW_EINVAL, "internal error: key outside its record");
	if (full_(s, len) && (rc = spill_(s, !s->grouped, err)))
		return rc;
	if ((rc = buffer_(s, p, len, s->seq, s->grouped ? s->gidx[s->seq] : 0, err)))
		return rc;
	ent_ *e = &s->e[s->n - 1];
	e->key = key;
	e->skey_off = (uint32_t)skey_off;
	e->skey_len = (uint32_t)sn;
	s->seq++;
	return 0;
}

/* With groups: the input's spill read back a buffer at a time, each sorted into a run. */
static int input_to_runs_(sw_sorter *s, sw_error *err)
{
	uint64_t base = 0;
	int rc = run_close_(s, s->spill_w, err), got = 0;
	s->spill_w = NULL;
	sw_rec *cr = rc ? NULL : sw_rec_new();
	sw_reader *r = NULL;
	if (!rc && !cr)
		rc = oom_(err);
	if (!rc && !(r = run_reader_(s, s->spill_fd, err)))
		rc = err->code;
	while (!rc && (got = sw_reader_next(r, cr)) == 1) {
		const uint8_t *p;
		size_t len;
		if (sw_rec_bytes(cr, &p, &len))
			rc = oom_(err);
		else if (!(rc = full_(s, len) ? spill_(s, 1, err) : 0) && !(rc = buffer_(s, p, len, base, s->gidx[base], err)))
			base++;
	}
	if (!rc && got < 0)
		rc = sw_fail(err, sw_reader_error(r)->code, "cannot read a run back: %s", sw_reader_error(r)->msg);
	if (!rc && s->n)
		rc = spill_(s, 1, err);
	sw_reader_free(r);
	sw_rec_free(cr);
	close(s->spill_fd);
	s->spill_fd = -1;
	return rc;
}

int sw_sorter_finish(sw_sorter *s, sw_error *err)
{
	sw_error spare;
	if (!err)
		err = &spare;
	int rc;
	if (s->finished)
		return sw_fail(err, SW_EINVAL, "the sorter is finished");
	s->finished = 1;
	if (s->grouped && order_groups_(s))
		return oom_(err);
	if (!s->nruns && s->spill_fd < 0) {
		/* it all fit: sort in memory */
		qsort_r(s->e, s->n, sizeof *s->e, cmp_ent_, s);
		return 0;
	}
	if ((rc = spill_(s, !s->grouped, err)))
		return rc;
	if (s->grouped && (rc = input_to_runs_(s, err)))
		return rc;
	sw_buf_release(&s->b);
	free(s->e);
	s->e = NULL;
	s->n = s->ecap = 0;
	/* merge down to MERGE_FAN_IN runs */
	while (s->nruns > MERGE_FAN_IN)
		if ((rc = merge_last_(s, err)))
			return rc;
	return merge_open_(s, &s->m, 0, s->nruns, err);
}

int sw_sorter_next(sw_sorter *s, const uint8_t **p, size_t *n, uint64_t *group, sw_error *err)
{
	sw_error spare;
	if (!err)
		err = &spare;
	if (!s->finished)
		return sw_fail(err, SW_EINVAL, "the sorter is not finished");
	if (!s->nruns) {
		if (s->pos == s->n)
			return 0;
		const ent_ *e = &s->e[s->pos++];
		*p = s->b.p + e->off;
		*n = e->len;
		*group = s->grouped ? s->gorder[e->group] : s->nout;
		s->nout++;
		return 1;
	}
	head_ *t;
	int rc = merge_next_(s, &s->m, &t, err);
	if (rc != 1)
		return rc;
	if (sw_rec_bytes(t->rec, p, n))
		return oom_(err);
	*group = s->grouped ? t->ord[t->pos] : s->nout;
	s->nout++;
	return 1;
}

uint64_t sw_sorter_count(const sw_sorter *s)
{
	return s->seq;
}
