/*
 * pool.c - the task pool of sw/pool.h: a locked, atomically rewritten
 * stream of prompts with their statistics, and the priority rule.
 *
 * The whole pool is held in memory while it is open (prompts are small and
 * a pool of a million is a few hundred MB at most); the records keep their
 * own bytes, untouched but for the `pool` map, which is written fresh at
 * each commit.
 */
#define _DEFAULT_SOURCE /* flock */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"
#include "sw/balance.h"
#include "sw/pool.h"

typedef struct ent_ {
	size_t off;
	uint32_t len;
	sw_pool_stats st;
	/* this round's observations (Welford) */
	uint64_t on, opass;
	double omean, om2;
} ent_;

struct sw_pool {
	char *path;
	int lockfd;
	int mode; /* SW_POOL_READ, _CREATE or _UPDATE */
	sw_buf bytes;
	ent_ *e;
	size_t n, cap;
	sw_groups *ids;
	uint64_t round;
	sw_rec *tmp, *sub, *cmp;
};

static int grow_(sw_pool *p)
{
	if (p->n < p->cap)
		return 0;
	size_t cap = p->cap ? 2 * p->cap : 256;
	ent_ *e = realloc(p->e, cap * sizeof *e);
	if (!e)
		return SW_ENOMEM;
	p->e = e;
	p->cap = cap;
	return 0;
}

/* A whole number or a finite number from the pool map, into the stats. */
static int stat_u64_(sw_rec *sub, const char *key, uint64_t *out, uint64_t rec, sw_error *err)
{
	int rc = sw_rec_get_u64(sub, key, out);
	if (rc)
		return sw_fail(err, SW_EFORMAT, "record %llu: pool field '%s' is %s", (unsigned long long)rec, key,
		               rc == SW_ENOENT ? "missing" : "not a whole number");
	return 0;
}

static int stat_f64_(sw_rec *sub, const char *key, double *out, uint64_t rec, sw_error *err)
{
	int rc = sw_rec_get_f64(sub, key, out);
	if (rc || !isfinite(*out))
		return sw_fail(err, SW_EFORMAT, "record %llu: pool field '%s' is %s", (unsigned long long)rec, key,
		               rc == SW_ENOENT ? "missing" : "not a finite number");
	return 0;
}

/* Append rec (bytes copied) with these stats; 1 added, 0 a duplicate id, < 0 error. */
static int append_(sw_pool *p, sw_rec *rec, const sw_pool_stats *st, uint64_t recno, sw_error *err)
{
	const char *id;
	size_t idlen;
	uint32_t idx;
	int rc = sw_rec_get_str(rec, "id", &id, &idlen);
	if (rc)
		return sw_fail(err, SW_EFORMAT, "record %llu: %s", (unsigned long long)recno,
		               rc == SW_ENOENT ? "no 'id' field" : "field 'id' is not a str");
	if ((rc = sw_groups_add(p->ids, id, idlen, &idx)) < 0)
		return sw_fail(err, rc, "out of memory");
	if (rc == 0)
		return 0;
	const uint8_t *b;
	size_t n;
	if ((rc = grow_(p)) || (rc = sw_rec_bytes(rec, &b, &n)))
		return sw_fail(err, rc, "out of memory");
	if (n > UINT32_MAX)
		return sw_fail(err, SW_ETOOBIG, "record %llu is too large", (unsigned long long)recno);
	ent_ *e = &p->e[p->n++];
	memset(e, 0, sizeof *e);
	e->off = p->bytes.len;
	e->len = (uint32_t)n;
	e->st = *st;
	if (sw_buf_put(&p->bytes, b, n))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	return 1;
}

static int load_(sw_pool *p, sw_error *err)
{
	sw_error e = { 0 };
	sw_reader *r = sw_reader_open(p->path, &e);
	if (!r) {
		if (e.sys_errno == ENOENT && p->mode == SW_POOL_CREATE)
			return 0; /* a new pool */
		if (err)
			*err = e;
		return e.code ? e.code : SW_EIO;
	}
	sw_rec *rec = sw_rec_new();
	int rc;
	uint64_t k = 0;
	if (!rec) {
		sw_reader_free(r);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	while ((rc = sw_reader_next(r, rec)) == 1) {
		sw_pool_stats st = { .added = k };
		k++;
		if (sw_rec_get_map(rec, "pool", p->sub) == 0) {
			if ((rc = stat_u64_(p->sub, "added", &st.added, k, err)) ||
			    (rc = stat_u64_(p->sub, "seen", &st.seen, k, err)) ||
			    (rc = stat_u64_(p->sub, "samples", &st.samples, k, err)) ||
			    (rc = stat_u64_(p->sub, "last_seen", &st.last_seen, k, err)) ||
			    (rc = stat_u64_(p->sub, "streak", &st.streak, k, err)) ||
			    (rc = stat_f64_(p->sub, "pass_rate", &st.pass_rate, k, err)) ||
			    (rc = stat_f64_(p->sub, "reward_mean", &st.reward_mean, k, err)) ||
			    (rc = stat_f64_(p->sub, "reward_var", &st.reward_var, k, err)))
				break;
			if (st.pass_rate < 0 || st.pass_rate > 1 || st.reward_var < 0) {
				rc = sw_fail(err, SW_EFORMAT, "record %llu: pool statistics out of range", (unsigned long long)k);
				break;
			}
		}
		if ((rc = append_(p, rec, &st, k, err)) < 0)
			break;
		if (rc == 0) {
			rc = sw_fail(err, SW_EFORMAT, "record %llu: a second prompt of the same id", (unsigned long long)k);
			break;
		}
		if (st.last_seen > p->round)
			p->round = st.last_seen;
		rc = 0;
	}
	if (rc < 0 && !err->code) {
		const sw_error *re = sw_reader_error(r);
		if (re->code == SW_EEMPTY)
			rc = 0; /* an empty file is an empty pool */
		else
			*err = *re;
	}
	if (rc < 0 && err && !err->record)
		err->record = k;
	sw_rec_free(rec);
	sw_reader_free(r);
	return rc < 0 ? rc : 0;
}

sw_pool *sw_pool_open(const char *path, int mode, sw_error *err)
{
	sw_error dummy;
	if (!err)
		err = &dummy;
	memset(err, 0, sizeof *err);
	if (mode != SW_POOL_READ && mode != SW_POOL_CREATE && mode != SW_POOL_UPDATE) {
		sw_fail(err, SW_EINVAL, "pool '%s': unknown mode %d", path, mode);
		return NULL;
	}
	int write = mode != SW_POOL_READ;
	sw_pool *p = calloc(1, sizeof *p);
	size_t n = strlen(path);
	char *lock = malloc(n + 6);
	if (!p || !lock || !(p->path = strdup(path)) || !(p->ids = sw_groups_new()) || !(p->tmp = sw_rec_new()) ||
	    !(p->sub = sw_rec_new()) || !(p->cmp = sw_rec_new())) {
		free(lock);
		sw_pool_free(p);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	p->mode = mode;
	p->lockfd = -1;
	memcpy(lock, path, n);
	memcpy(lock + n, ".lock", 6);
	/* Only _CREATE makes a pool: a take or an update of one that does not
	 * exist leaves nothing behind, not even a lock. */
	if (mode != SW_POOL_CREATE && access(path, F_OK) && errno == ENOENT) {
		err->sys_errno = ENOENT;
		sw_fail(err, SW_EIO, "cannot open pool '%s': %s", path, strerror(ENOENT));
		free(lock);
		sw_pool_free(p);
		return NULL;
	}
	/* A reader takes no lock: a writer replaces the file whole (rename), so a
	 * read sees one pool or the next.  Waiting for a writer's lock would wait
	 * on itself in `take | ... | update` of one pool whenever the update,
	 * which holds its lock while it reads, started first.  The lock lives in
	 * its own file, made where it is missing (a pool copied alone), and never
	 * removed: one removed while another process waits on it would let a
	 * third lock a new file beside the waiter. */
	if (write && ((p->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0 || flock(p->lockfd, LOCK_EX))) {
		err->sys_errno = errno;
		sw_fail(err, SW_EIO, "cannot lock '%s': %s", lock, strerror(errno));
		free(lock);
		sw_pool_free(p);
		return NULL;
	}
	free(lock);
	if (load_(p, err)) {
		sw_pool_free(p);
		return NULL;
	}
	return p;
}

void sw_pool_free(sw_pool *p)
{
	if (!p)
		return;
	if (p->lockfd >= 0)
		close(p->lockfd); /* releases the lock */
	free(p->path);
	sw_buf_release(&p->bytes);
	free(p->e);
	sw_groups_free(p->ids);
	sw_rec_free(p->tmp);
	sw_rec_free(p->sub);
	sw_rec_free(p->cmp);
	free(p);
}

size_t sw_pool_count(const sw_pool *p)
{
	return p->n;
}

uint64_t sw_pool_round(const sw_pool *p)
{
	return p->round;
}

/* 1 where rec (which has no pool map) is prompt e of the pool but for e's
 * pool map: the same fields with the same values' bytes, in whatever order
 * (a file written again by another tool may order them otherwise); 0 where
 * they differ, < 0 where e cannot be read. */
static int same_prompt_(sw_pool *p, const ent_ *e, sw_rec *rec, sw_error *err)
{
	int rc = sw_rec_load(p->cmp, p->bytes.p + e->off, e->len);
	if (rc)
		return sw_fail(err, rc, "the pool's prompt %zu cannot be read", (size_t)(e - p->e) + 1);
	sw_val v, w;
	size_t n = sw_rec_count(p->cmp) - (sw_rec_get(p->cmp, "pool", &v) == 0);
	if (sw_rec_count(rec) != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const char *key;
		size_t klen;
		char name[256];
		if (sw_rec_field(rec, i, &key, &klen, &v) || !key || klen >= sizeof name)
			return 0; /* a key sw_rec_get could not look up: compared as different */
		memcpy(name, key, klen);
		name[klen] = 0;
		if (sw_rec_get(p->cmp, name, &w) || w.rawlen != v.rawlen || memcmp(w.raw, v.raw, v.rawlen))
			return 0;
	}
	return 1;
}

int sw_pool_add(sw_pool *p, sw_rec *prompt, sw_error *err)
{
	sw_pool_stats st = { .added = p->n ? p->e[p->n - 1].st.added + 1 : 0 };
	/* the record is stored without a pool map of its own: the pool writes it */
	sw_val v;
	sw_rec *rec = prompt;
	if (sw_rec_get(prompt, "pool", &v) == 0) {
		const uint8_t *b;
		size_t n;
		int rc = sw_rec_bytes(prompt, &b, &n);
		if (rc || (rc = sw_rec_load(p->tmp, b, n)) || (rc = sw_rec_own(p->tmp)))
			return sw_fail(err, rc, "out of memory");
		sw_rec_del(p->tmp, "pool");
		rec = p->tmp;
	}
	/* a prompt the pool holds already is not added again, and one of the same id
	 * that is another prompt is an error: dropping it would lose it unsaid */
	const char *id;
	size_t idlen;
	uint32_t idx;
	if (sw_rec_get_str(rec, "id", &id, &idlen) == 0 && sw_groups_find(p->ids, id, idlen, &idx)) {
		int same = same_prompt_(p, &p->e[idx], rec, err);
		if (same < 0)
			return same;
		if (!same)
			return sw_fail(err, SW_EFORMAT,
			               "id '%.*s' is the pool's already, for another prompt (an id names one prompt: "
			               "give this one an id of its own)",
			               (int)(idlen > 100 ? 100 : idlen), id);
	}
	return append_(p, rec, &st, 0, err);
}

int sw_pool_observe(sw_pool *p, sw_rec *sample, double pass, sw_error *err)
{
	const char *g;
	size_t glen;
	uint32_t idx;
	sw_val v;
	double r;
	if (sw_rec_get(sample, "verifier_error", &v) == 0 && v.type != SW_T_NIL)
		return 0;
	int rc = sw_rec_get_str(sample, "group", &g, &glen);
	if (rc)
		return sw_fail(err, SW_EFORMAT, "%s", rc == SW_ENOENT ? "no 'group' field" : "field 'group' is not a str");
	if (!sw_groups_find(p->ids, g, glen, &idx))
		return sw_fail(err, SW_ENOENT, "prompt '%.*s' is not in the pool", (int)(glen > 100 ? 100 : glen), g);
	if ((rc = sw_rec_get(sample, "reward", &v)))
		return sw_fail(err, SW_EFORMAT, "%s", rc == SW_ENOENT ? "no 'reward' field" : "field 'reward' is corrupt");
	if (sw_val_number(&v, &r))
		return sw_fail(err, SW_ETYPE, "field 'reward' is a %s, not a number", sw_type_name(v.type));
	if (!isfinite(r))
		return sw_fail(err, SW_EFORMAT, "field 'reward' is %g", r);
	ent_ *e = &p->e[idx];
	e->on++;
	e->opass += r >= pass;
	double d = r - e->omean;
	e->omean += d / (double)e->on;
	e->om2 += d * (r - e->omean);
	return 1;
}

size_t sw_pool_update(sw_pool *p)
{
	size_t k = 0;
	uint64_t round = p->round + 1;
	for (size_t i = 0; i < p->n; i++) {
		ent_ *e = &p->e[i];
		if (!e->on)
			continue;
		e->st.seen++;
		e->st.samples += e->on;
		e->st.pass_rate = (double)e->opass / (double)e->on;
		e->st.reward_mean = e->omean;
		e->st.reward_var = e->om2 / (double)e->on;
		e->st.last_seen = round;
		e->st.streak = e->opass == e->on ? e->st.streak + 1 : 0;
		e->on = e->opass = 0;
		e->omean = e->om2 = 0;
		k++;
	}
	if (k)
		p->round = round;
	return k;
}

double sw_pool_priority(const sw_pool_stats *s, uint64_t round)
{
	double pr = s->pass_rate, sd = sqrt(s->reward_var);
	double signal = fmax(4 * pr * (1 - pr), fmin(1, 2 * sd));
	double floor_ = 0.1 * pow(0.5, (double)(s->streak > 1000 ? 1000 : s->streak));
	double age = round > s->last_seen ? (double)(round - s->last_seen) : 0;
	return fmax(signal, floor_) * (1 + age / 10);
}

typedef struct rank_ {
	double prio;
	uint64_t seen, added;
	size_t i;
} rank_;

static int cmp_rank_(const void *a, const void *b)
{
	const rank_ *x = a, *y = b;
	int xu = x->seen == 0, yu = y->seen == 0;
	if (xu != yu)
		return yu - xu; /* unseen first */
	if (!xu && x->prio != y->prio)
		return x->prio > y->prio ? -1 : 1;
	if (x->seen != y->seen)
		return x->seen < y->seen ? -1 : 1;
	return (x->added > y->added) - (x->added < y->added);
}

size_t sw_pool_take(const sw_pool *p, size_t n, size_t *idx)
{
	rank_ *r = malloc((p->n ? p->n : 1) * sizeof *r);
	if (!r)
		return 0;
	for (size_t i = 0; i < p->n; i++)
		r[i] = (rank_){ p->e[i].st.seen ? sw_pool_priority(&p->e[i].st, p->round) : 0, p->e[i].st.seen,
			        p->e[i].st.added, i };
	qsort(r, p->n, sizeof *r, cmp_rank_);
	if (n > p->n)
		n = p->n;
	for (size_t i = 0; i < n; i++)
		idx[i] = r[i].i;
	free(r);
	return n;
}

/* rec := the prompt's own fields and its pool map. */
static int with_stats_(const sw_pool *p, const ent_ *e, sw_rec *rec)
{
	const sw_pool_stats *s = &e->st;
	int rc = sw_rec_load(rec, p->bytes.p + e->off, e->len);
	if (rc || (rc = sw_rec_own(rec)))
		return rc;
	sw_rec_clear(p->sub);
	if ((rc = sw_rec_set_u64(p->sub, "added", s->added)) || (rc = sw_rec_set_u64(p->sub, "seen", s->seen)) ||
	    (rc = sw_rec_set_u64(p->sub, "samples", s->samples)) ||
	    (rc = sw_rec_set_f64(p->sub, "pass_rate", s->pass_rate)) ||
	    (rc = sw_rec_set_f64(p->sub, "reward_mean", s->reward_mean)) ||
	    (rc = sw_rec_set_f64(p->sub, "reward_var", s->reward_var)) ||
	    (rc = sw_rec_set_u64(p->sub, "last_seen", s->last_seen)) ||
	    (rc = sw_rec_set_u64(p->sub, "streak", s->streak)) ||
	    (rc = s->seen ? sw_rec_set_f64(p->sub, "priority", sw_pool_priority(s, p->round))
	                  : sw_rec_set_nil(p->sub, "priority")))
		return rc;
	return sw_rec_set_map(rec, "pool", p->sub);
}

int sw_pool_get(const sw_pool *p, size_t i, sw_rec *out, sw_pool_stats *st)
{
	if (i >= p->n)
		return SW_EINVAL;
	if (st)
		*st = p->e[i].st;
	return with_stats_(p, &p->e[i], out);
}

int sw_pool_commit(sw_pool *p, sw_error *err)
{
	if (p->mode == SW_POOL_READ)
		return sw_fail(err, SW_EINVAL, "the pool was opened for reading");
	/* written beside the pool and renamed over it (common/afile.c): the old pool or the new, never a part */
	sw_afile f;
	int rc = sw_afile_open(&f, p->path, err);
	if (rc)
		return rc;
	/* keep the old pool's mode, or the usual 0644 */
	struct stat old;
	if (fchmod(f.fd, stat(p->path, &old) == 0 ? old.st_mode & 07777 : 0644)) {
		/* not fatal: the pool is then private to its owner */
	}
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	sw_error e = { 0 };
	sw_writer *w = sw_writer_fdopen(f.fd, f.tmp, &wo, &e); /* the writer leaves the fd to the afile */
	sw_rec *rec = sw_rec_new();
	if (!w || !rec) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < p->n; i++) {
		if ((rc = with_stats_(p, &p->e[i], rec))) {
			sw_fail(err, rc, "cannot build record %zu: %s", i + 1, sw_strerror(rc));
			goto fail;
		}
		if ((rc = sw_writer_put(w, rec)))
			break;
	}
	if (rc || (rc = sw_writer_close(w))) {
		e = *sw_writer_error(w);
		rc = sw_fail(err, SW_EIO, "cannot write '%s': %s", f.tmp, e.sys_errno ? strerror(e.sys_errno) : e.msg);
		if (err)
			err->sys_errno = e.sys_errno;
		goto fail;
	}
	if ((rc = sw_afile_commit(&f, err)))
		goto fail;
	sw_writer_free(w);
	sw_rec_free(rec);
	return 0;
fail:
	sw_writer_free(w);
	sw_rec_free(rec);
	sw_afile_abort(&f);
	return rc;
}
