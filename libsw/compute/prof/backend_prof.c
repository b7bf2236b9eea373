/*
 * backend_prof.c - the profiling backend: another backend's ops, each timed,
 * and a table of where the time went written when the process exits
 * ($SW_PROFILE, backend.h's sw_backend_prof).
 *
 * Every op and device copy of the backend it wraps (its "inner") goes
 * through here: the clock is read before and after the inner call, and the
 * seconds are added to the op's row for that shape (the sizes it was given:
 * a product's M, N and K, an attention's heads and sequences, an
 * elementwise op's length).  The results are the inner's, bit for bit: the
 * arguments pass through untouched.  Where the inner runs its ops
 * asynchronously (no host memory: cuda), each op is followed by the inner's
 * sync, so that its time is its own: the queue is serialised, so the whole
 * runs slower than it would, and a failure that sync reports is kept and
 * handed to the caller's next sync, as the contract says.
 *
 * The table, appended to the file in one write (several processes of a run
 * may share it): a header (program, pid, device, seconds since the backend
 * was opened and seconds inside its ops), every op's total, then every
 * (op, shape) row, longest first, with the GFLOP/s of the products.
 *
 * Like the backend it wraps, this is one process-wide device (ops take no
 * handle): its table, file and pending error live in one object behind a
 * mutex, and its entry table is filled once, under that mutex, when the
 * device is wrapped; nothing else here changes.
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "compute/backend.h"

/* The ops timed, in the order of backend.h, with how a row names its shape. */
enum {
	OP_MEMSET, OP_UPLOAD, OP_DOWNLOAD, OP_COPY, OP_KV_WRITE, OP_ROWS_GATHER, OP_FIRST_NONFINITE,
	OP_GEMM, OP_LINEAR_ROWS, OP_LINEAR_ROWS_PARTS, OP_EMBED_FWD, OP_EMBED_BWD, OP_RMSNORM_FWD,
	OP_RMSNORM_BWD, OP_LAYERNORM_FWD, OP_LAYERNORM_BWD, OP_ACT_FWD, OP_ACT_BWD, OP_ROPE,
	OP_ATTN_FWD, OP_ATTN_BWD, OP_ATTN_PREFIX_FWD, OP_ATTN_PREFIX_BWD, OP_ATTN_PAGED, OP_SWIGLU_FWD, OP_SWIGLU_BWD, OP_ADD,
	OP_BIAS_FWD, OP_BIAS_BWD, OP_LOGPROB_FWD, OP_LOGPROB_BWD, OP_ADAMW, OP_SUMSQ, OP_SCALE,
	OP_ARGMAX, OP_COLL_SUM, NOPS_
};

static const struct {
	const char *name, *shape; /* shape: a printf format of the row's 5 ints */
} ops_[NOPS_] = {
	[OP_MEMSET] = { "memset", "bytes=%d" },
	[OP_UPLOAD] = { "upload", "bytes=%d" },
	[OP_DOWNLOAD] = { "download", "bytes=%d" },
	[OP_COPY] = { "copy", "bytes=%d" },
	[OP_KV_WRITE] = { "kv_write", "n=%d kd=%d" },
	[OP_ROWS_GATHER] = { "rows_gather", "n=%d D=%d" },
	[OP_FIRST_NONFINITE] = { "first_nonfinite", "rows=%d cols=%d" },
	[OP_GEMM] = { "gemm", "ta=%d tb=%d M=%d N=%d K=%d" },
	[OP_LINEAR_ROWS] = { "linear_rows", "M=%d N=%d K=%d" },
	[OP_LINEAR_ROWS_PARTS] = { "linear_rows_parts", "parts=%d M=%d N=%d K=%d" },
	[OP_EMBED_FWD] = { "embed_fwd", "T=%d D=%d" },
	[OP_EMBED_BWD] = { "embed_bwd", "T=%d D=%d" },
	[OP_RMSNORM_FWD] = { "rmsnorm_fwd", "T=%d D=%d" },
	[OP_RMSNORM_BWD] = { "rmsnorm_bwd", "T=%d D=%d" },
	[OP_LAYERNORM_FWD] = { "layernorm_fwd", "T=%d D=%d" },
	[OP_LAYERNORM_BWD] = { "layernorm_bwd", "T=%d D=%d" },
	[OP_ACT_FWD] = { "act_fwd", "n=%d act=%d" },
	[OP_ACT_BWD] = { "act_bwd", "n=%d act=%d" },
	[OP_ROPE] = { "rope", "T=%d nh=%d hd=%d inverse=%d" },
	[OP_ATTN_FWD] = { "attn_fwd", "nseq=%d H=%d KVH=%d hd=%d causal=%d" },
	[OP_ATTN_BWD] = { "attn_bwd", "nseq=%d H=%d KVH=%d hd=%d causal=%d" },
	[OP_ATTN_PREFIX_FWD] = { "attn_prefix_fwd", "nseq=%d H=%d KVH=%d hd=%d causal=%d" },
	[OP_ATTN_PREFIX_BWD] = { "attn_prefix_bwd", "nseq=%d H=%d KVH=%d hd=%d causal=%d" },
	[OP_ATTN_PAGED] = { "attn_paged", "n=%d H=%d KVH=%d hd=%d" },
	[OP_SWIGLU_FWD] = { "swiglu_fwd", "n=%d" },
	[OP_SWIGLU_BWD] = { "swiglu_bwd", "n=%d" },
	[OP_ADD] = { "add", "n=%d" },
	[OP_BIAS_FWD] = { "bias_fwd", "T=%d N=%d" },
	[OP_BIAS_BWD] = { "bias_bwd", "T=%d N=%d" },
	[OP_LOGPROB_FWD] = { "logprob_fwd", "T=%d V=%d" },
	[OP_LOGPROB_BWD] = { "logprob_bwd", "T=%d V=%d" },
	[OP_ADAMW] = { "adamw", "n=%d" },
	[OP_SUMSQ] = { "sumsq", "n=%d" },
	[OP_SCALE] = { "scale", "n=%d" },
	[OP_ARGMAX] = { "argmax", "rows=%d cols=%d" },
	[OP_COLL_SUM] = { "coll_sum", "n=%d" },
};

/* One (op, shape)'s row. */
typedef struct row_ {
	int op;                    /* -1: an empty slot */
	int d[5];
	uint64_t calls;
	double s, flops;
} row_;

typedef struct prof_ {
	pthread_mutex_t lock;
	const sw_backend *inner;   /* NULL until sw_backend_prof */
	int fd;                    /* the table's file, opened for appending */
	char *path;
	pid_t pid;                 /* the process that opened it (a fork's child writes nothing) */
	double t0;                 /* when */
	row_ *rows;                /* open addressing, nrows < cap / 2 */
	size_t nrows, cap;
	sw_error pending;          /* the first failure since the last sync */
} prof_;

static prof_ p_ = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

static double clock_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t hash_(int op, const int d[5])
{
	uint64_t h = 1469598103934665603u ^ (uint64_t)op;
	for (int i = 0; i < 5; i++)
		h = (h ^ (uint32_t)d[i]) * 1099511628211u;
	return (size_t)h;
}

static row_ *find_(row_ *rows, size_t cap, int op, const int d[5])
{
	for (size_t i = hash_(op, d) & (cap - 1);; i = (i + 1) & (cap - 1))
		if (rows[i].op < 0 || (rows[i].op == op && !memcmp(rows[i].d, d, sizeof rows[i].d)))
			return &rows[i];
}

/* Keep the first failure for the next sync (the lock held). */
static void keep_(int code, const char *msg)
{
	if (!p_.pending.code)
		sw_fail(&p_.pending, code, "%s", msg);
}

/* Add t seconds (and flops) to the row of (op, d). */
static void note_(int op, const int d[5], double t, double flops)
{
	pthread_mutex_lock(&p_.lock);
	if (2 * (p_.nrows + 1) > p_.cap) {
		size_t cap = p_.cap ? 2 * p_.cap : 256;
		row_ *r = malloc(cap * sizeof *r);
		if (!r) {
			keep_(SW_ENOMEM, "SW_PROFILE: out of memory for the profile's table");
			pthread_mutex_unlock(&p_.lock);
			return;
		}
		for (size_t i = 0; i < cap; i++)
			r[i].op = -1;
		for (size_t i = 0; i < p_.cap; i++)
			if (p_.rows[i].op >= 0)
				*find_(r, cap, p_.rows[i].op, p_.rows[i].d) = p_.rows[i];
		free(p_.rows);
		p_.rows = r, p_.cap = cap;
	}
	row_ *w = find_(p_.rows, p_.cap, op, d);
	if (w->op < 0) {
		*w = (row_){ .op = op };
		memcpy(w->d, d, sizeof w->d);
		p_.nrows++;
	}
	w->calls++;
	w->s += t;
	w->flops += flops;
	pthread_mutex_unlock(&p_.lock);
}

/* After an inner op: wait for it where the inner queues its ops, so that
 * the time read next is the op's own. */
static void wait_(void)
{
	if (p_.inner->host_memory)
		return;
	sw_error e = { 0 };
	if (p_.inner->sync(&e)) {
		pthread_mutex_lock(&p_.lock);
		if (!p_.pending.code)
			p_.pending = e;
		pthread_mutex_unlock(&p_.lock);
	}
}

/* Size arguments as the table's ints (a count past INT32_MAX shows as INT32_MAX). */
static int n_(size_t n)
{
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

#define IN_ (p_.inner)
/* Time CALL as op OP of shape d0..d4, with FLOPS floating-point operations. */
#define TIMED_(OP, FLOPS, CALL, d0, d1, d2, d3, d4)                                    \
	do {                                                                           \
		double t_ = clock_();                                                  \
		CALL;                                                                  \
		wait_();                                                               \
		note_(OP, (const int[5]){ d0, d1, d2, d3, d4 }, clock_() - t_, FLOPS); \
	} while (0)

/* ---- memory: passed through, the copies timed ---- */

static void *alloc_(size_t bytes, sw_error *err)
{
	return IN_->alloc(bytes, err);
}

static void free_(void *p)
{
	IN_->free(p);
}

static void *borrow_(void *host, size_t bytes, sw_error *err)
{
	return IN_->borrow(host, bytes, err);
}

static void unborrow_(void *p)
{
	IN_->unborrow(p);
}

static int memset_(void *dst, int byte, size_t n, sw_error *err)
{
	int rc;
	TIMED_(OP_MEMSET, 0, rc = IN_->memset(dst, byte, n, err), n_(n), 0, 0, 0, 0);
	return rc;
}

static int upload_(void *dst, const void *host, size_t n, sw_error *err)
{
	int rc;
	TIMED_(OP_UPLOAD, 0, rc = IN_->upload(dst, host, n, err), n_(n), 0, 0, 0, 0);
	return rc;
}

static int download_(void *host, const void *src, size_t n, sw_error *err)
{
	int rc;
	TIMED_(OP_DOWNLOAD, 0, rc = IN_->download(host, src, n, err), n_(n), 0, 0, 0, 0);
	return rc;
}

static int copy_(void *dst, const void *src, size_t n, sw_error *err)
{
	int rc;
	TIMED_(OP_COPY, 0, rc = IN_->copy(dst, src, n, err), n_(n), 0, 0, 0, 0);
	return rc;
}

static const void *host_view_(const void *p)
{
	return IN_->host_view(p);
}

static int sync_(sw_error *err)
{
	int rc = IN_->sync(err);
	pthread_mutex_lock(&p_.lock);
	sw_error e = p_.pending;
	memset(&p_.pending, 0, sizeof p_.pending);
	pthread_mutex_unlock(&p_.lock);
	if (e.code) { /* the earlier failure is the first */
		if (err)
			*err = e;
		return e.code;
	}
	return rc;
}

/* ---- the ops ---- */

static void kv_write_(float *kpool, float *vpool, const float *k, const float *v, int n, int kd,
                      int hd, int page, size_t stride, const int32_t *ptab, const int32_t *poff,
                      const int32_t *pos)
{
	TIMED_(OP_KV_WRITE, 0, IN_->kv_write(kpool, vpool, k, v, n, kd, hd, page, stride, ptab, poff, pos), n, kd,
	       0, 0, 0);
}

static void rows_gather_(float *out, const float *src, const int32_t *rows, int n, int D)
{
	TIMED_(OP_ROWS_GATHER, 0, IN_->rows_gather(out, src, rows, n, D), n, D, 0, 0, 0);
}

static int first_nonfinite_(const float *x, int rows, int cols)
{
	int r;
	TIMED_(OP_FIRST_NONFINITE, 0, r = IN_->first_nonfinite(x, rows, cols), rows, cols, 0, 0, 0);
	return r;
}

static void gemm_(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
	TIMED_(OP_GEMM, 2.0 * M * N * K,
	       IN_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), ta, tb, M, N, K);
}

static void linear_rows_(float *C, const float *A, const float *W, int M, int N, int K, float beta)
{
	TIMED_(OP_LINEAR_ROWS, 2.0 * M * N * K, IN_->linear_rows(C, A, W, M, N, K, beta), M, N, K, 0,
	       0);
}

/* shown as one product: its parts' rows added up (N) */
static void linear_rows_parts_(const sw_rows_part *p, int n, const float *A, int M, int K, float beta)
{
	int N = 0;
	for (int i = 0; i < n; i++)
		N += p[i].N;
	TIMED_(OP_LINEAR_ROWS_PARTS, 2.0 * M * N * K, IN_->linear_rows_parts(p, n, A, M, K, beta), n, M,
	       N, K, 0);
}

static void embed_fwd_(float *out, const float *table, const int32_t *tok, int T, int D)
{
	TIMED_(OP_EMBED_FWD, 0, IN_->embed_fwd(out, table, tok, T, D), T, D, 0, 0, 0);
}

static void embed_bwd_(float *dtable, const float *dout, const int32_t *tok, int T, int D)
{
	TIMED_(OP_EMBED_BWD, 0, IN_->embed_bwd(dtable, dout, tok, T, D), T, D, 0, 0, 0);
}

static void rmsnorm_fwd_(float *out, float *rstd, const float *x, const float *w, int T, int D,
                         float eps)
{
	TIMED_(OP_RMSNORM_FWD, 0, IN_->rmsnorm_fwd(out, rstd, x, w, T, D, eps), T, D, 0, 0, 0);
}

static void rmsnorm_bwd_(float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int T, int D)
{
	TIMED_(OP_RMSNORM_BWD, 0, IN_->rmsnorm_bwd(dx, dw, dout, x, w, rstd, T, D), T, D, 0, 0, 0);
}

static void layernorm_fwd_(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, int T, int D, float eps)
{
	TIMED_(OP_LAYERNORM_FWD, 0, IN_->layernorm_fwd(out, mean, rstd, x, w, b, T, D, eps), T, D, 0,
	       0, 0);
}

static void layernorm_bwd_(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int T, int D)
{
	TIMED_(OP_LAYERNORM_BWD, 0, IN_->layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, T, D), T, D,
	       0, 0, 0);
}

static void act_fwd_(float *y, const float *x, size_t n, int act)
{
	TIMED_(OP_ACT_FWD, 0, IN_->act_fwd(y, x, n, act), n_(n), act, 0, 0, 0);
}

static void act_bwd_(float *dx, const float *dy, const float *x, size_t n, int act)
{
	TIMED_(OP_ACT_BWD, 0, IN_->act_bwd(dx, dy, x, n, act), n_(n), act, 0, 0, 0);
}

static void rope_(float *x, const int32_t *pos, int T, int nh, int hd, const float *inv_freq,
                  int inverse)
{
	TIMED_(OP_ROPE, 0, IN_->rope(x, pos, T, nh, hd, inv_freq, inverse), T, nh, hd, inverse, 0);
}

static void attn_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	TIMED_(OP_ATTN_FWD, 0, IN_->attn_fwd(out, lse, q, k, v, cu, nseq, H, KVH, hd, causal, scratch),
	       nseq, H, KVH, hd, causal);
}

static void attn_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	TIMED_(OP_ATTN_BWD, 0,
	       IN_->attn_bwd(dq, dk, dv, dout, out, lse, q, k, v, cu, nseq, H, KVH, hd, causal,
	                     scratch),
	       nseq, H, KVH, hd, causal);
}

static size_t attn_scratch_(int maxlen)
{
	return IN_->attn_scratch(maxlen);
}

static void attn_prefix_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH,
                             int hd, int causal, float *scratch)
{
	TIMED_(OP_ATTN_PREFIX_FWD, 0,
	       IN_->attn_prefix_fwd(out, lse, q, k, v, cu, prefix, nseq, H, KVH, hd, causal, scratch),
	       nseq, H, KVH, hd, causal);
}

static void attn_prefix_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH,
                             int hd, int causal, float *scratch)
{
	TIMED_(OP_ATTN_PREFIX_BWD, 0,
	       IN_->attn_prefix_bwd(dq, dk, dv, dout, out, lse, q, k, v, cu, prefix, nseq, H, KVH,
	                            hd, causal, scratch),
	       nseq, H, KVH, hd, causal);
}

static void attn_paged_(float *out, const float *q, int n, int H, int KVH, int hd,
                        const sw_kv_view *kv, float *scratch)
{
	TIMED_(OP_ATTN_PAGED, 0, IN_->attn_paged(out, q, n, H, KVH, hd, kv, scratch), n, H, KVH, hd,
	       0);
}

static size_t attn_paged_scratch_(int maxkeys)
{
	return IN_->attn_paged_scratch(maxkeys);
}

static void swiglu_fwd_(float *h, const float *gate, const float *up, size_t n)
{
	TIMED_(OP_SWIGLU_FWD, 0, IN_->swiglu_fwd(h, gate, up, n), n_(n), 0, 0, 0, 0);
}

static void swiglu_bwd_(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t n)
{
	TIMED_(OP_SWIGLU_BWD, 0, IN_->swiglu_bwd(dgate, dup, dh, gate, up, n), n_(n), 0, 0, 0, 0);
}

static void add_(float *y, const float *x, size_t n)
{
	TIMED_(OP_ADD, 0, IN_->add(y, x, n), n_(n), 0, 0, 0, 0);
}

static void bias_fwd_(float *y, const float *b, int T, int N)
{
	TIMED_(OP_BIAS_FWD, 0, IN_->bias_fwd(y, b, T, N), T, N, 0, 0, 0);
}

static void bias_bwd_(float *db, const float *dy, int T, int N)
{
	TIMED_(OP_BIAS_BWD, 0, IN_->bias_bwd(db, dy, T, N), T, N, 0, 0, 0);
}

static void logprob_fwd_(float *lp, float *ent, float *lse, const float *logits,
                         const int32_t *target, int T, int V)
{
	TIMED_(OP_LOGPROB_FWD, 0, IN_->logprob_fwd(lp, ent, lse, logits, target, T, V), T, V, 0, 0, 0);
}

static void logprob_bwd_(float *logits, const float *lse, const float *ent, const float *dlp,
                         const float *dent, const int32_t *target, int T, int V)
{
	TIMED_(OP_LOGPROB_BWD, 0, IN_->logprob_bwd(logits, lse, ent, dlp, dent, target, T, V), T, V, 0,
	       0, 0);
}

static void adamw_(float *p, const float *g, float gs, float *m, float *v, size_t n, float lr,
                   float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	TIMED_(OP_ADAMW, 0, IN_->adamw(p, g, gs, m, v, n, lr, b1, b2, eps, wd, bc1, bc2), n_(n), 0, 0,
	       0, 0);
}

static double sumsq_(const float *x, size_t n)
{
	double r;
	TIMED_(OP_SUMSQ, 0, r = IN_->sumsq(x, n), n_(n), 0, 0, 0, 0);
	return r;
}

static void scale_(float *x, float s, size_t n)
{
	TIMED_(OP_SCALE, 0, IN_->scale(x, s, n), n_(n), 0, 0, 0, 0);
}

/* ---- the optional entries: there when the inner has them ---- */

static void *ipc_alloc_(size_t bytes, void *ticket, sw_error *err)
{
	return IN_->ipc_alloc(bytes, ticket, err);
}

static void ipc_free_(void *p)
{
	IN_->ipc_free(p);
}

static void *ipc_open_(const void *ticket, sw_error *err)
{
	return IN_->ipc_open(ticket, err);
}

static void ipc_close_(void *p)
{
	IN_->ipc_close(p);
}

static int coll_open_(sw_error *err)
{
	return IN_->coll_open(err);
}

static int coll_id_(void *id, sw_error *err)
{
	return IN_->coll_id(id, err);
}

static int coll_init_(const void *id, int rank, int nranks, sw_error *err)
{
	return IN_->coll_init(id, rank, nranks, err);
}

static int coll_sum_(float *x, size_t n, sw_error *err)
{
	int rc;
	TIMED_(OP_COLL_SUM, 0, rc = IN_->coll_sum(x, n, err), n_(n), 0, 0, 0, 0);
	return rc;
}

static void argmax_(int32_t *out, const float *x, int rows, int cols)
{
	TIMED_(OP_ARGMAX, 0, IN_->argmax(out, x, rows, cols), rows, cols, 0, 0, 0);
}

static int trim_(sw_error *err)
{
	return IN_->trim(err);
}

/* Always there: the CPU's precision is set apart from its table (sw_backend_matmul). */
static int matmul_(const char *prec, sw_error *err)
{
	return sw_backend_matmul(IN_, prec, err);
}

static sw_backend be_ = {
	.memset = memset_,
	.upload = upload_,
	.download = download_,
	.copy = copy_,
	.host_view = host_view_,
	.sync = sync_,
	.alloc = alloc_,
	.free = free_,
	.borrow = borrow_,
	.unborrow = unborrow_,
	.kv_write = kv_write_,
	.rows_gather = rows_gather_,
	.first_nonfinite = first_nonfinite_,
	.gemm = gemm_,
	.linear_rows = linear_rows_,
	.linear_rows_parts = linear_rows_parts_,
	.embed_fwd = embed_fwd_,
	.embed_bwd = embed_bwd_,
	.rmsnorm_fwd = rmsnorm_fwd_,
	.rmsnorm_bwd = rmsnorm_bwd_,
	.layernorm_fwd = layernorm_fwd_,
	.layernorm_bwd = layernorm_bwd_,
	.act_fwd = act_fwd_,
	.act_bwd = act_bwd_,
	.rope = rope_,
	.attn_fwd = attn_fwd_,
	.attn_bwd = attn_bwd_,
	.attn_scratch = attn_scratch_,
	.attn_paged = attn_paged_,
	.attn_paged_scratch = attn_paged_scratch_,
	.swiglu_fwd = swiglu_fwd_,
	.swiglu_bwd = swiglu_bwd_,
	.add = add_,
	.bias_fwd = bias_fwd_,
	.bias_bwd = bias_bwd_,
	.logprob_fwd = logprob_fwd_,
	.logprob_bwd = logprob_bwd_,
	.adamw = adamw_,
	.sumsq = sumsq_,
	.scale = scale_,
	.matmul = matmul_,
};

/* ---- the table ---- */

static int by_time_(const void *a, const void *b)
{
	const row_ *x = a, *y = b;
	return x->s < y->s ? 1 : x->s > y->s ? -1 : x->op - y->op;
}

/* The table's text, and whether memory ran out making it. */
typedef struct out_ {
	sw_buf b;
	int bad;
} out_;

static void put_(out_ *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_(out_ *o, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n < 0 || sw_buf_put(&o->b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1))
		o->bad = 1;
}

static void row_line_(out_ *o, const row_ *r, const char *shape, double total)
{
	put_(o, "%-17s %-37s %9llu %10.4f %6.1f%% %11.1f", ops_[r->op].name, shape,
	     (unsigned long long)r->calls, r->s, total > 0 ? 100 * r->s / total : 0.0,
	     r->s / (double)r->calls * 1e6);
	if (r->flops > 0 && r->s > 0)
		put_(o, " %8.1f", r->flops / r->s * 1e-9);
	put_(o, "\n");
}

/* The table as text (the lock held); NULL out of memory. */
static char *table_(size_t *len)
{
	row_ *all = malloc((p_.nrows + 1) * sizeof *all), byop[NOPS_];
	if (!all)
		return NULL;
	size_t n = 0, nop = 0;
	double total = 0;
	uint64_t calls = 0;
	for (int i = 0; i < NOPS_; i++)
		byop[i] = (row_){ .op = i };
	for (size_t i = 0; i < p_.cap; i++)
		if (p_.rows[i].op >= 0) {
			const row_ *r = &p_.rows[i];
			all[n++] = *r;
			total += r->s, calls += r->calls;
			byop[r->op].calls += r->calls;
			byop[r->op].s += r->s;
			byop[r->op].flops += r->flops;
		}
	for (int i = 0; i < NOPS_; i++) /* the ops called, at the front */
		if (byop[i].calls)
			byop[nop++] = byop[i];
	qsort(all, n, sizeof *all, by_time_);
	qsort(byop, nop, sizeof *byop, by_time_);
	out_ o = { 0 };
	double wall = clock_() - p_.t0;
	put_(&o, "# SW_PROFILE: %s, pid %ld, device %s: %.3f s since the device was opened, %.3f s in %llu "
	         "operations (%.1f%%)\n",
	     program_invocation_short_name, (long)p_.pid, p_.inner->name, wall, total,
	     (unsigned long long)calls, wall > 0 ? 100 * total / wall : 0.0);
	put_(&o, "# %-15s %-37s %9s %10s %7s %11s %8s\n", "op", "", "calls", "seconds", "share",
	     "us/call", "GFLOP/s");
	for (size_t i = 0; i < nop; i++)
		row_line_(&o, &byop[i], "(all shapes)", total);
	put_(&o, "# %-15s %-37s\n", "op", "shape");
	for (size_t i = 0; i < n; i++) {
		char shape[128];
		const int *d = all[i].d;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(shape, sizeof shape, ops_[all[i].op].shape, d[0], d[1], d[2], d[3], d[4]);
#pragma GCC diagnostic pop
		row_line_(&o, &all[i], shape, total);
	}
	free(all);
	if (o.bad || !o.b.p) {
		sw_buf_release(&o.b);
		return NULL;
	}
	*len = o.b.len;
	return (char *)o.b.p;
}

/* The table appended whole: a file under its lock (the processes of a run
 * share one SW_PROFILE file), a write cut short continued, and a table that
 * could not be written whole cut off again (a full disk leaves no part of
 * one); a pipe or a terminal only written.  0, or the errno. */
static int append_whole_(int fd, const char *t, size_t len)
{
	struct stat st;
	int reg = !fstat(fd, &st) && S_ISREG(st.st_mode), e = 0;
	if (reg && flock(fd, LOCK_EX))
		return errno;
	if (reg && fstat(fd, &st)) /* its size under the lock */
		e = errno;
	if (!e)
		e = sw_fd_write_all(fd, t, len, NULL);
	if (e && reg)
		sw_fd_cut_back(fd, st.st_size);
	if (reg)
		flock(fd, LOCK_UN);
	return e;
}

/* At exit: append the table to the file. */
static void report_(void)
{
	pthread_mutex_lock(&p_.lock);
	if (p_.fd < 0 || getpid() != p_.pid) {
		pthread_mutex_unlock(&p_.lock);
		return;
	}
	if (!p_.nrows) { /* a process that ran no op (sw-run, checking its --device) writes nothing */
		close(p_.fd);
		p_.fd = -1;
		pthread_mutex_unlock(&p_.lock);
		return;
	}
	size_t len = 0;
	char *t = table_(&len);
	int e = t ? append_whole_(p_.fd, t, len) : 0;
	if (!t)
		fprintf(stderr, "%s: SW_PROFILE: out of memory for the table\n", program_invocation_short_name);
	else if (e)
		fprintf(stderr, "%s: SW_PROFILE: %s: %s\n", program_invocation_short_name, p_.path, strerror(e));
	free(t);
	close(p_.fd);
	p_.fd = -1;
	pthread_mutex_unlock(&p_.lock);
}

const sw_backend *sw_backend_prof(const sw_backend *inner, const char *path, sw_error *err)
{
	pthread_mutex_lock(&p_.lock);
	if (p_.inner) {
		const sw_backend *r = p_.inner == inner ? &be_ : NULL;
		if (!r)
			sw_fail(err, SW_EINVAL, "SW_PROFILE: this process profiles device %s already, not %s",
			        p_.inner->name, inner->name);
		pthread_mutex_unlock(&p_.lock);
		return r;
	}
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	char *dup = fd >= 0 ? strdup(path) : NULL;
	if (fd < 0 || !dup || atexit(report_)) {
		if (fd < 0)
			sw_fail(err, SW_EIO, "SW_PROFILE: %s: %s", path, strerror(errno));
		else
			sw_fail(err, SW_ENOMEM, "SW_PROFILE: out of memory");
		if (fd >= 0)
			close(fd);
		free(dup);
		pthread_mutex_unlock(&p_.lock);
		return NULL;
	}
	p_.fd = fd, p_.path = dup, p_.pid = getpid(), p_.t0 = clock_();
	be_.name = inner->name;
	be_.host_memory = inner->host_memory;
	/* the optional entries are there only where the inner has them */
	be_.ipc_alloc = inner->ipc_alloc ? ipc_alloc_ : NULL;
	be_.ipc_free = inner->ipc_free ? ipc_free_ : NULL;
	be_.ipc_open = inner->ipc_open ? ipc_open_ : NULL;
	be_.ipc_close = inner->ipc_close ? ipc_close_ : NULL;
	be_.coll_open = inner->coll_open ? coll_open_ : NULL;
	be_.coll_id = inner->coll_id ? coll_id_ : NULL;
	be_.coll_init = inner->coll_init ? coll_init_ : NULL;
	be_.coll_sum = inner->coll_sum ? coll_sum_ : NULL;
	be_.argmax = inner->argmax ? argmax_ : NULL;
	be_.trim = inner->trim ? trim_ : NULL;
	be_.attn_prefix_fwd = inner->attn_prefix_fwd ? attn_prefix_fwd_ : NULL;
	be_.attn_prefix_bwd = inner->attn_prefix_bwd ? attn_prefix_bwd_ : NULL;
	p_.inner = inner;
	pthread_mutex_unlock(&p_.lock);
	return &be_;
}
