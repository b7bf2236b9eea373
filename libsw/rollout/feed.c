/*
 * feed.c - a program's ends of the rollout scheduler (sw/rollout.h): the
 * input read by a thread of its own into a queue of record copies, handed
 * on a read of the input at a time (a waiting scheduler wakes to all the
 * prompts that read gave); the samples handed back in order, invalid
 * records named by file and record; and, under an MPI launcher, the input
 * shared out among the ranks.
 *
 * Data parallel, the input goes in chunks.  Rank 0 reads up to
 * SW_ROLLOUT_CHUNK records (or to the end) and broadcasts them; rank r
 * takes the contiguous block [n r / N, n (r + 1) / N) of the chunk, so a
 * prompt's G responses stay on one rank, and tells the scheduler each
 * prompt's place in the whole input (its draws and its default id, so a
 * sample is what one process makes of it).  A rank's samples wait in a
 * buffer until its block is done; then every rank meets in the exchange:
 * the buffers are gathered to rank 0, which puts them in rank order, that
 * is input order, and says whether the job goes on.  An invalid record
 * (or a failure) on rank r ends the job after the samples that come
 * before it: those of ranks below r and r's own, as one process writes
 * them before it stops at that record.
 *
 * The exchange happens when the scheduler asks for input it cannot have
 * yet with nothing else to do (every sample of the block is out), or,
 * when the scheduler stopped (an invalid record, a failure), in
 * sw_rollout_feed_finish: each rank goes through it once per chunk.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/balance.h"
#include "sw/dist.h"
#include "sw/stream.h"
#include "rollout_internal.h"

enum { QCAP_ = 256 };

typedef struct item_ {
	uint8_t *bytes;
	size_t n;
	uint32_t file;             /* index into files: the record's name */
	uint64_t recno;            /* in its file, from 1 */
	uint32_t was_file;         /* where its id came before (was_recno 0: it did not) */
	uint64_t was_recno;
	bool was_placed;           /* one of the two has no id: its place names it */
} item_;

/* What each rank sends to rank 0 ahead of its samples at an exchange. */
typedef struct status_ {
	int32_t rc;                /* 0, or the SW_E* code that stopped the rank */
	int32_t halted;            /* rc is an invalid record's: the samples before it count */
	uint64_t skipped;          /* invalid records skipped in this chunk */
	double busy;               /* seconds spent on the chunk */
	char msg[sizeof ((sw_error *)0)->msg];
} status_;

/* What rank 0 broadcasts after an exchange. */
typedef struct verdict_ {
	int32_t rc;
	char msg[sizeof ((sw_error *)0)->msg];
} verdict_;

struct sw_rollout_feed {
	sw_comm *comm;
	int rank, size;
	sw_rollout_feed_io io;
	uint64_t per;              /* samples a valid record gives: G, or 1 in score mode */
	bool skip_invalid;
	char **files;              /* the feed's own copy: its reading thread may outlive the caller's */
	int nfiles;
	size_t max_record;
	const volatile sig_atomic_t *stop;

	/* the reading thread (rank 0) and its queue */
	pthread_t reader;
	bool reading;
	atomic_bool orphaned;      /* sw_rollout_feed_free came while it read: it frees the feed at its end */
	pthread_mutex_t m;
	pthread_cond_t room, ready;
	item_ q[QCAP_];
	int qhead, qcount;
	bool qdone;
	char qerr[640];            /* why the input ended early, or empty */
	uint64_t nread, bytes_in;
	item_ stage[QCAP_];        /* the reading thread's own: records read, not yet queued */
	int nstage;

	/* what the scheduler sees */
	sw_rollout_io sio;
	sw_rec *rec;
	item_ cur;                 /* the record in rec */
	uint64_t place;            /* its place in the whole input */
	uint64_t pulled;           /* records handed out (one process) */
	char fatal[sizeof ((sw_error *)0)->msg]; /* the invalid record that halts, or the input's failure */
	int fatal_code;
	uint64_t written, skipped;

	/* the prompts' ids so far (generating), each with where it came first */
	sw_groups *ids;
	struct { uint32_t file; uint64_t recno; bool placed; } *first;
	size_t first_cap;
	char was[128];             /* earlier_'s answer */

	/* data parallel */
	item_ *blk;                /* this rank's block of the chunk */
	size_t nblk, blkcap, at;   /* at: the next to hand out */
	uint64_t blk_place;        /* the place of blk[0] */
	uint64_t base;             /* the place of the next chunk's first record */
	bool started, last, over;  /* a chunk came; it is the input's last; the verdict is final */
	verdict_ v;
	sw_buf out;                /* this rank's samples of the chunk, each after its length (u32) */
	uint64_t produced, invalid, skipped_chunk;
	bool halted;
	char halt_msg[sizeof ((sw_error *)0)->msg];
	double t0, busy_chunk;
	double *rank_busy;         /* rank 0: seconds per rank, summed over the chunks */
};

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* src into dst[0..n), cut where it must be */
static void copy_(char *dst, size_t n, const char *src)
{
	size_t k = strlen(src);
	if (k >= n)
		k = n - 1;
	memcpy(dst, src, k);
	dst[k] = 0;
}

static const char *name_(const sw_rollout_feed *f, uint32_t file)
{
	return (int)file < f->nfiles && strcmp(f->files[file], "-") ? f->files[file] : "stdin";
}

/* ---- the reading thread ----------------------------------------------------------------- */

/* The staged records into the queue, as room allows, then one wake-up: the
 * scheduler waiting for input wakes to all that one read of the input gave
 * (every prompt of a small file), not to the first of them alone. */
static void hand_on_(void *arg)
{
	sw_rollout_feed *f = arg;
	if (!f->nstage)
		return;
	pthread_mutex_lock(&f->m);
	for (int i = 0; i < f->nstage; i++) {
		while (f->qcount == QCAP_ && !f->orphaned) {
			pthread_cond_signal(&f->ready);
			pthread_cond_wait(&f->room, &f->m);
		}
		if (f->orphaned) { /* no one takes them */
			free(f->stage[i].bytes);
			continue;
		}
		f->q[(f->qhead + f->qcount++) % QCAP_] = f->stage[i];
		f->bytes_in += f->stage[i].n;
		f->nread++;
	}
	f->nstage = 0;
	pthread_cond_signal(&f->ready);
	pthread_mutex_unlock(&f->m);
}

/* The input's end, or why it ended early (msg, or none): after the records before it.
 * Whether the feed was freed meanwhile (then it is the reading thread's to free). */
static bool end_input_(sw_rollout_feed *f, const char *msg)
{
	hand_on_(f);
	pthread_mutex_lock(&f->m);
	if (msg && !f->qerr[0])
		copy_(f->qerr, sizeof f->qerr, msg);
	f->qdone = true;
	bool orphaned = f->orphaned;
	pthread_cond_signal(&f->ready);
	pthread_mutex_unlock(&f->m);
	return orphaned;
}

/* Whether sw_rollout_feed_free has come: the reading thread stops reading (read at
 * every record, so a load, not the queue's lock). */
static bool orphaned_(sw_rollout_feed *f)
{
	return atomic_load_explicit(&f->orphaned, memory_order_relaxed);
}

static void release_(sw_rollout_feed *f);

static void *reader_main_(void *arg)
{
	sw_rollout_feed *f = arg;
	sw_error err = { 0 };
	sw_rec *rec = sw_rec_new();
	char buf[512], msg[sizeof f->qerr] = "";
	if (!rec)
		snprintf(msg, sizeof msg, "out of memory");
	for (int i = 0; rec && i < f->nfiles && !msg[0] && !orphaned_(f); i++) {
		sw_reader *r = sw_reader_open(f->files[i], &err);
		if (!r) {
			snprintf(msg, sizeof msg, "cannot open '%s': %s", f->files[i], strerror(err.sys_errno));
			break;
		}
		if (f->max_record)
			sw_reader_set_max_record(r, f->max_record);
		sw_reader_set_refill(r, hand_on_, f);
		int rc = 0;
		while (!orphaned_(f) && (rc = sw_reader_next(r, rec)) == 1) {
			const uint8_t *p;
			size_t n;
			uint8_t *copy = NULL;
			if (sw_rec_bytes(rec, &p, &n) == 0 && (copy = malloc(n ? n : 1)))
				memcpy(copy, p, n);
			if (!copy) {
				snprintf(msg, sizeof msg, "out of memory");
				break;
			}
			if (f->nstage == QCAP_)
				hand_on_(f);
			f->stage[f->nstage++] = (item_){ .bytes = copy, .n = n, .file = (uint32_t)i, .recno = sw_reader_records(r) };
		}
		if (rc < 0)
			snprintf(msg, sizeof msg, "%s: %s", name_(f, (uint32_t)i),
			         sw_error_str(sw_reader_error(r), buf, sizeof buf));
		sw_reader_free(r);
	}
	sw_rec_free(rec);
	if (end_input_(f, msg[0] ? msg : NULL)) {
		pthread_detach(pthread_self());
		release_(f);
	}
	return NULL;
}

/* The next record of the queue: 1; 0 at its end (a failure of the input noted in fatal);
 * SW_ROLLOUT_WAIT when none is there and !block; SW_EIO when *stop ended the wait. */
static int take_(sw_rollout_feed *f, bool block, item_ *it)
{
	pthread_mutex_lock(&f->m);
	if (!f->qcount && !f->qdone) {
		if (!block) {
			pthread_mutex_unlock(&f->m);
			return SW_ROLLOUT_WAIT;
		}
		while (!f->qcount && !f->qdone && !(f->stop && *f->stop)) {
			/* a signal does not end a condition wait: look for one every 100 ms */
			struct timespec t;
			clock_gettime(CLOCK_REALTIME, &t);
			t.tv_nsec += 100000000;
			t.tv_sec += t.tv_nsec / 1000000000;
			t.tv_nsec %= 1000000000;
			pthread_cond_timedwait(&f->ready, &f->m, &t);
		}
		if (!f->qcount && !f->qdone) {
			pthread_mutex_unlock(&f->m);
			return SW_EIO; /* stopped; the program knows why */
		}
	}
	if (!f->qcount) {
		if (f->qerr[0] && !f->fatal[0]) {
			copy_(f->fatal, sizeof f->fatal, f->qerr);
			f->fatal_code = SW_EIO;
		}
		pthread_mutex_unlock(&f->m);
		return 0;
	}
	*it = f->q[f->qhead];
	f->qhead = (f->qhead + 1) % QCAP_;
	f->qcount--;
	pthread_cond_signal(&f->room);
	pthread_mutex_unlock(&f->m);
	return 1;
}

/* ---- ids: an id names one prompt -------------------------------------------------------- */

/*
 * The record in f->rec, at place, is it: its id (the scheduler's
 * sw_sample_group_id) into the ids so far, or where it came before into
 * its was_*.  A record the scheduler refuses anyway (not a map, an id of
 * another type) is left to it.  Every rank goes through every record of a
 * chunk in order, so the ids of a rank's block are compared with those of
 * the ranks before it, as in one process.
 */
static int seen_(sw_rollout_feed *f, uint64_t place, item_ *it)
{
	it->was_recno = 0;
	if (!f->ids)
		return 0;
	const char *bad;
	char *id = sw_sample_group_id(f->rec, place, &bad);
	if (!id)
		return bad ? 0 : SW_ENOMEM;
	uint32_t at;
	int added = sw_groups_add(f->ids, id, strlen(id), &at);
	free(id);
	if (added < 0)
		return SW_ENOMEM;
	sw_val v;
	bool placed = sw_rec_get(f->rec, "id", &v) != 0;
	if (!added) {
		it->was_file = f->first[at].file;
		it->was_recno = f->first[at].recno;
		it->was_placed = placed || f->first[at].placed;
		return 0;
	}
	if (at >= f->first_cap) {
		size_t cap = f->first_cap ? 2 * f->first_cap : 256;
		void *x = realloc(f->first, sizeof *f->first * cap);
		if (!x)
			return SW_ENOMEM;
		f->first = x;
		f->first_cap = cap;
	}
	f->first[at].file = it->file;
	f->first[at].recno = it->recno;
	f->first[at].placed = placed;
	return 0;
}

static const char *earlier_(void *ctx, bool *placed)
{
	sw_rollout_feed *f = ctx;
	if (!f->cur.was_recno)
		return NULL;
	*placed = f->cur.was_placed;
	if (f->cur.was_file == f->cur.file)
		snprintf(f->was, sizeof f->was, "record %llu", (unsigned long long)f->cur.was_recno);
	else
		snprintf(f->was, sizeof f->was, "%.80s's record %llu", name_(f, f->cur.was_file),
		         (unsigned long long)f->cur.was_recno);
	return f->was;
}

/* ---- one process: the queue straight to the scheduler ----------------------------------- */

static int load_(sw_rollout_feed *f, sw_rec **rec)
{
	if (sw_rec_load(f->rec, f->cur.bytes, f->cur.n)) {
		snprintf(f->fatal, sizeof f->fatal, "%s: record %llu: not a map", name_(f, f->cur.file),
		         (unsigned long long)f->cur.recno);
		return SW_EFORMAT;
	}
	*rec = f->rec;
	return 1;
}

static int next1_(void *ctx, bool block, sw_rec **rec)
{
	sw_rollout_feed *f = ctx;
	free(f->cur.bytes);
	f->cur.bytes = NULL;
	int rc = take_(f, false, &f->cur);
	if (rc == SW_ROLLOUT_WAIT && block) {
		/* about to wait: let what we have flow on downstream */
		if (f->io.flush && (rc = f->io.flush(f->io.ctx)))
			return rc < 0 ? rc : SW_EIO;
		rc = take_(f, true, &f->cur);
	}
	if (rc != 1)
		return rc;
	f->place = f->pulled++;
	rc = load_(f, rec);
	return rc == 1 && seen_(f, f->place, &f->cur) ? SW_ENOMEM : rc;
}

static int put1_(void *ctx, const uint8_t *mp, size_t n)
{
	sw_rollout_feed *f = ctx;
	int rc = f->io.put(f->io.ctx, mp, n);
	f->written += !rc;
	return rc;
}

static int flush1_(void *ctx)
{
	sw_rollout_feed *f = ctx;
	return f->io.flush ? f->io.flush(f->io.ctx) : 0;
}

static uint64_t place_(void *ctx)
{
	return ((sw_rollout_feed *)ctx)->place;
}

/* An invalid record: "FILE: record N: why", skipped and counted, or it halts the reading. */
static void invalid_(void *ctx, const char *msg)
{
	sw_rollout_feed *f = ctx;
	char bad[sizeof f->fatal];
	snprintf(bad, sizeof bad, "%s: record %llu: %s", name_(f, f->cur.file), (unsigned long long)f->cur.recno, msg);
	if (f->skip_invalid) {
		f->skipped++;
		f->skipped_chunk++;
		f->invalid++;
		if (f->io.skipped)
			f->io.skipped(f->io.ctx, bad);
		return;
	}
	f->invalid++;
	f->halted = true;
	copy_(f->halt_msg, sizeof f->halt_msg, bad);
	if (!f->fatal[0]) {
		copy_(f->fatal, sizeof f->fatal, bad);
		f->fatal_code = SW_EFORMAT;
	}
}

/* ---- data parallel: chunks, blocks, the exchange --------------------------------------- */

static int put_u32_(sw_buf *b, uint32_t x)
{
	return sw_buf_put(b, &x, sizeof x);
}

static int putdp_(void *ctx, const uint8_t *mp, size_t n)
{
	sw_rollout_feed *f = ctx;
	if (n > UINT32_MAX || put_u32_(&f->out, (uint32_t)n) || sw_buf_put(&f->out, mp, n))
		return SW_ENOMEM;
	f->produced++;
	return 0;
}

static void clear_block_(sw_rollout_feed *f)
{
	for (size_t i = f->at; i < f->nblk; i++)
		free(f->blk[i].bytes);
	f->nblk = f->at = 0;
}

/*
 * Rank 0: the next chunk from the queue, serialized: u64 count, u8 last,
 * then per record u32 file, u64 recno, u64 size, the bytes.  SW_EIO when
 * *stop ended the wait.
 */
static int read_chunk_(sw_rollout_feed *f, sw_buf *b)
{
	uint64_t n = 0;
	uint8_t last = 0;
	size_t bytes = 0;
	int rc = sw_buf_put(b, &n, sizeof n) || sw_buf_put(b, &last, 1) ? SW_ENOMEM : 0;
	while (!rc && n < SW_ROLLOUT_CHUNK && bytes < ((size_t)64 << 20)) {
		item_ it;
		int got = take_(f, true, &it);
		if (got < 0)
			return got;
		if (got == 0) {
			last = 1;
			break;
		}
		uint64_t len = it.n;
		if (sw_buf_put(b, &it.file, sizeof it.file) || sw_buf_put(b, &it.recno, sizeof it.recno) ||
		    sw_buf_put(b, &len, sizeof len) || sw_buf_put(b, it.bytes, it.n))
			rc = SW_ENOMEM;
		free(it.bytes);
		n++;
		bytes += it.n;
	}
	if (!rc && !last) {
		/* at the end already?  then this chunk is the last (no empty chunk after it) */
		pthread_mutex_lock(&f->m);
		last = !f->qcount && f->qdone;
		if (last && f->qerr[0] && !f->fatal[0]) { /* (as take_ notes it at the end) */
			copy_(f->fatal, sizeof f->fatal, f->qerr);
			f->fatal_code = SW_EIO;
		}
		pthread_mutex_unlock(&f->m);
	}
	if (!rc) {
		memcpy(b->p, &n, sizeof n);
		b->p[sizeof n] = last;
	}
	return rc;
}

/* Every rank: the next chunk from rank 0; this rank's block of it into blk. */
static int next_chunk_(sw_rollout_feed *f, sw_error *err)
{
	sw_buf b = { 0 };
	uint64_t size = 0;
	int rc = 0;
	if (f->rank == 0) {
		if ((rc = read_chunk_(f, &b)))
			size = UINT64_MAX; /* the others stop too */
		else
			size = b.len;
	}
	if ((rc = sw_comm_bcast(f->comm, &size, sizeof size, 0, err)) || size == UINT64_MAX) {
		sw_buf_release(&b);
		return rc ? rc : SW_EIO;
	}
	if (f->rank != 0 && sw_buf_reserve(&b, size)) {
		sw_buf_release(&b);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	if ((rc = sw_comm_bcast(f->comm, b.p, size, 0, err))) {
		sw_buf_release(&b);
		return rc;
	}
	uint64_t n;
	memcpy(&n, b.p, sizeof n);
	f->last = b.p[sizeof n];
	uint64_t lo = n * (uint64_t)f->rank / (uint64_t)f->size, hi = n * (uint64_t)(f->rank + 1) / (uint64_t)f->size;
	const uint8_t *p = b.p + sizeof n + 1;
	clear_block_(f);
	if (hi - lo > f->blkcap) {
		item_ *x = realloc(f->blk, sizeof *x * (size_t)(hi - lo));
		if (!x) {
			sw_buf_release(&b);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
		f->blk = x;
		f->blkcap = (size_t)(hi - lo);
	}
	for (uint64_t i = 0; i < n; i++) {
		item_ it = { 0 }; /* (was_* set by seen_, which a record that is no map skips) */
		uint64_t len;
		memcpy(&it.file, p, sizeof it.file), p += sizeof it.file;
		memcpy(&it.recno, p, sizeof it.recno), p += sizeof it.recno;
		memcpy(&len, p, sizeof len), p += sizeof len;
		if (!sw_rec_load(f->rec, p, len) && seen_(f, f->base + i, &it)) {
			sw_buf_release(&b);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
		if (i >= lo && i < hi) {
			if (!(it.bytes = malloc(len ? len : 1))) {
				sw_buf_release(&b);
				return sw_fail(err, SW_ENOMEM, "out of memory");
			}
			memcpy(it.bytes, p, len);
			it.n = len;
			f->blk[f->nblk++] = it;
		}
		p += len;
	}
	f->blk_place = f->base + lo;
	f->base += n;
	f->started = true;
	f->produced = f->invalid = f->skipped_chunk = 0;
	f->out.len = 0;
	f->t0 = now_();
	sw_buf_release(&b);
	return 0;
}

/*
 * The exchange at the end of a chunk, rc this rank's (0, or what stopped
 * it): the samples to rank 0, which puts them in order up to the first
 * rank that stopped, and every rank learns the verdict.  0 to go on; else
 * the verdict's code with its message in err.
 */
static int exchange_(sw_rollout_feed *f, int rc, const char *msg, sw_error *err)
{
	status_ st = { .rc = rc, .halted = rc && f->halted, .skipped = f->skipped_chunk,
	               .busy = f->started ? now_() - f->t0 : 0 };
	copy_(st.msg, sizeof st.msg, msg ? msg : "");
	sw_buf send = { 0 };
	void *all = NULL;
	size_t *len = f->rank == 0 ? calloc((size_t)f->size, sizeof *len) : NULL;
	int crc = (f->rank == 0 && !len) || sw_buf_put(&send, &st, sizeof st) || sw_buf_put(&send, f->out.p, f->out.len)
	        ? sw_fail(err, SW_ENOMEM, "out of memory") : 0;
	/* (a rank out of memory here still joins the gather, with nothing, so that no one waits) */
	int grc = sw_comm_gather_bytes(f->comm, crc ? NULL : send.p, crc ? 0 : send.len, 0, &all, len, err);
	sw_buf_release(&send);
	f->out.len = 0;
	verdict_ v = { 0 };
	if (f->rank == 0) {
		const uint8_t *p = all;
		bool stopped = grc || crc;
		if (stopped) {
			v.rc = grc ? grc : crc;
			copy_(v.msg, sizeof v.msg, err->msg);
		}
		for (int r = 0; r < f->size && !grc; p += len[r], r++) {
			if (len[r] < sizeof(status_)) {
				if (!stopped) {
					v.rc = SW_ENOMEM;
					snprintf(v.msg, sizeof v.msg, "rank %d: out of memory", r);
				}
				stopped = true;
				continue;
			}
			status_ s;
			memcpy(&s, p, sizeof s);
			f->skipped += s.skipped;
			if (f->rank_busy)
				f->rank_busy[r] += s.busy;
			if (stopped)
				continue;
			/* a rank's samples go out when it finished its block, or stopped at an invalid record */
			if (!s.rc || s.halted) {
				const uint8_t *q = p + sizeof s, *end = p + len[r];
				while (q + sizeof(uint32_t) <= end && !v.rc) {
					uint32_t k;
					memcpy(&k, q, sizeof k);
					q += sizeof k;
					if (f->io.put(f->io.ctx, q, k)) {
						v.rc = SW_EIO;
						snprintf(v.msg, sizeof v.msg, "the output refused a sample");
					}
					f->written += !v.rc;
					q += k;
				}
			}
			if (s.rc && !v.rc) {
				v.rc = s.rc;
				int k = snprintf(v.msg, sizeof v.msg, "rank %d: ", r);
				copy_(v.msg + k, sizeof v.msg - (size_t)k, s.msg);
			}
			stopped = stopped || s.rc || v.rc;
		}
		/* the input's own failure comes after every record it gave */
		if (!v.rc && f->last && f->fatal[0]) {
			v.rc = f->fatal_code;
			copy_(v.msg, sizeof v.msg, f->fatal);
		}
		if (!v.rc && f->io.flush && f->io.flush(f->io.ctx)) {
			v.rc = SW_EIO;
			snprintf(v.msg, sizeof v.msg, "the output cannot be flushed");
		}
	}
	free(all);
	free(len);
	int brc = sw_comm_bcast(f->comm, &v, sizeof v, 0, err);
	if (brc) {
		v.rc = brc;
		copy_(v.msg, sizeof v.msg, err->msg);
	}
	if (v.rc || f->last) {
		f->over = true;
		f->v = v;
	}
	return v.rc ? sw_fail(err, v.rc, "%s", v.msg) : 0;
}

static int nextdp_(void *ctx, bool block, sw_rec **rec)
{
	sw_rollout_feed *f = ctx;
	sw_error err = { 0 };
	free(f->cur.bytes);
	f->cur.bytes = NULL;
	for (;;) {
		if (f->over)
			return f->v.rc ? SW_EIO : 0;
		if (f->started && f->at < f->nblk) {
			f->place = f->blk_place + f->at;
			f->cur = f->blk[f->at++];
			return load_(f, rec);
		}
		/* the block is handed out: the exchange once every sample of it is out */
		if (f->started && (!block || f->produced != f->per * (f->at - f->invalid)))
			return SW_ROLLOUT_WAIT;
		if (f->started && exchange_(f, 0, NULL, &err))
			return SW_EIO; /* (finish says why) */
		if (f->over)
			continue;
		if (next_chunk_(f, &err)) {
			f->over = true;
			f->v.rc = err.code ? err.code : SW_EIO;
			copy_(f->v.msg, sizeof f->v.msg, err.msg);
			return SW_EIO;
		}
	}
}

/* ---- the feed ------------------------------------------------------------------------------ */

sw_rollout_feed *sw_rollout_feed_new(sw_comm *comm, char *const *files, int nfiles, size_t max_record,
                                     const sw_rollout_config *c, const sw_rollout_feed_io *io,
                                     const volatile sig_atomic_t *stop, sw_error *err)
{
	sw_rollout_feed *f = calloc(1, sizeof *f);
	if (!f || !(f->rec = sw_rec_new())) {
		free(f);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	f->comm = comm;
	f->rank = sw_comm_rank(comm);
	f->size = sw_comm_size(comm);
	f->io = *io;
	f->per = c->score ? 1 : (uint64_t)c->G;
	f->skip_invalid = c->skip_invalid;
	f->nfiles = nfiles;
	f->max_record = max_record;
	f->stop = stop;
	pthread_mutex_init(&f->m, NULL);
	pthread_cond_init(&f->room, NULL);
	pthread_cond_init(&f->ready, NULL);
	bool dp = f->size > 1;
	if (nfiles > 0 && !(f->files = calloc((size_t)nfiles, sizeof *f->files))) {
		sw_rollout_feed_free(f);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	for (int i = 0; i < nfiles; i++)
		if (!(f->files[i] = strdup(files[i]))) {
			sw_rollout_feed_free(f);
			sw_fail(err, SW_ENOMEM, "out of memory");
			return NULL;
		}
	f->sio = dp ? (sw_rollout_io){ f, nextdp_, putdp_, NULL, invalid_, place_, earlier_ }
	            : (sw_rollout_io){ f, next1_, put1_, flush1_, invalid_, place_, earlier_ };
	if (!c->score && !(f->ids = sw_groups_new())) {
		sw_rollout_feed_free(f);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	if (dp && f->rank == 0 && !(f->rank_busy = calloc((size_t)f->size, sizeof *f->rank_busy))) {
		sw_rollout_feed_free(f);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	if (f->rank == 0) {
		int e = pthread_create(&f->reader, NULL, reader_main_, f);
		if (e) {
			sw_rollout_feed_free(f);
			sw_fail(err, SW_EIO, "cannot start the input thread: %s", strerror(e));
			return NULL;
		}
		f->reading = true;
	}
	return f;
}

const sw_rollout_io *sw_rollout_feed_io_of(sw_rollout_feed *f)
{
	return &f->sio;
}

int sw_rollout_feed_finish(sw_rollout_feed *f, int rc, sw_error *err)
{
	if (f->size <= 1) {
		if (rc && !(rc == SW_EFORMAT && f->halted))
			return rc;
		if (f->reading) {
			/* the reading thread: to its end, unless an invalid record ended the run early */
			pthread_mutex_lock(&f->m);
			bool done = f->qdone;
			pthread_mutex_unlock(&f->m);
			if (done || !f->halted) {
				pthread_join(f->reader, NULL);
				f->reading = false;
			}
		}
		return f->fatal[0] ? sw_fail(err, f->fatal_code, "%s", f->fatal) : 0;
	}
	if (!f->over) {
		/* the scheduler stopped in this chunk (an invalid record, a failure): the exchange here */
		char msg[sizeof f->fatal];
		copy_(msg, sizeof msg, rc == SW_EFORMAT && f->halted ? f->halt_msg : err->msg);
		int xrc = exchange_(f, rc ? rc : SW_EINVAL, msg, err);
		(void)xrc;
	}
	if (f->rank == 0 && f->reading && f->v.rc == 0) {
		pthread_join(f->reader, NULL);
		f->reading = false;
	}
	return f->v.rc ? sw_fail(err, f->v.rc, "%s", f->v.msg) : 0;
}

void sw_rollout_feed_counts(sw_rollout_feed *f, uint64_t *records, uint64_t *bytes, int *ended,
                            uint64_t *written, uint64_t *skipped)
{
	pthread_mutex_lock(&f->m);
	*records = f->nread;
	*bytes = f->bytes_in;
	*ended = f->qdone;
	pthread_mutex_unlock(&f->m);
	*written = f->written;
	*skipped = f->skipped;
}

int sw_rollout_feed_busy(const sw_rollout_feed *f, double *busy, int size)
{
	if (!f->rank_busy || size < f->size)
		return 0;
	memcpy(busy, f->rank_busy, sizeof *busy * (size_t)f->size);
	return f->size;
}

void sw_rollout_feed_free(sw_rollout_feed *f)
{
	if (!f)
		return;
	if (f->reading) {
		pthread_mutex_lock(&f->m);
		bool done = f->qdone;
		if (!done) { /* its thread may be in a read: it frees the feed when that ends */
			f->orphaned = true;
			pthread_cond_signal(&f->room);
		}
		pthread_mutex_unlock(&f->m);
		if (!done)
			return;
		pthread_join(f->reader, NULL);
	}
	release_(f);
}

static void release_(sw_rollout_feed *f)
{
	for (int i = 0; i < f->qcount; i++)
		free(f->q[(f->qhead + i) % QCAP_].bytes);
	clear_block_(f);
	free(f->blk);
	free(f->cur.bytes);
	sw_buf_release(&f->out);
	free(f->rank_busy);
	sw_rec_free(f->rec);
	sw_groups_free(f->ids);
	free(f->first);
	for (int i = 0; f->files && i < f->nfiles; i++)
		free(f->files[i]);
	free(f->files);
	pthread_mutex_destroy(&f->m);
	pthread_cond_destroy(&f->room);
	pthread_cond_destroy(&f->ready);
	free(f);
}
