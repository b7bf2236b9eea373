/*
 * backend_guard.c - the guard backend: the CPU backend's ops over memory
 * the host cannot touch, which proves that the model code reaches tensors
 * only through the backend (backend.h).
 *
 * Its device memory is mmap'd regions kept PROT_NONE.  Every entry (an op,
 * a copy, a memset) takes the guard's lock, checks that each pointer it was
 * given lies in one of its regions (a host pointer passed to an op is the
 * bug a CUDA backend would crash on: here it is reported by sync), opens
 * those regions - only those, so an op reaching beyond its arguments
 * faults too - runs the CPU code from the calling thread (OpenMP threads
 * inside it see the regions open: mprotect is process-wide), and closes
 * them again before it returns.  Any other touch of a tensor - a memcpy in
 * the engine, a read of sw_tensor.data - faults.  The arithmetic is the
 * CPU's, so the bits are the CPU backend's.
 *
 * mprotect's cost grows with the pages it changes, so regions of 2 MiB and
 * more are 2 MiB-aligned and asked for transparent huge pages: a 400 MB
 * arena is then 200 page-table entries to flip, not 100,000.
 *
 * Borrowed host memory (a store's arena) is protected the same way while
 * borrowed (its whole pages: a tail that shares a page with other data is
 * left alone) and given back read-write (read-only where the mapping allows
 * no writes) when the last borrower lets go.
 *
 * The guard is one process-wide device, as a CUDA context is: its regions
 * and its pending error live in one object behind a mutex, the only mutable
 * file-level state here, because mprotect itself is process-wide.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "common/internal.h"
#include "compute/backend.h"

typedef struct region_ {
	char *base;
	size_t len;                /* protected bytes: whole pages */
	size_t bytes;              /* what was asked for (pointers up to base + bytes are its) */
	int open_prot;             /* PROT_READ|PROT_WRITE, or PROT_READ for a read-only borrow */
	bool borrowed;
	int refs;                  /* borrowers of the same host memory */
} region_;

#define MAXOPEN_ 16            /* pointers an entry gets, at most */
#define HUGE_ ((size_t)2 << 20)

typedef struct dev_ {
	pthread_mutex_t lock;
	region_ *r;
	size_t n, cap;
	region_ *open[MAXOPEN_];   /* the regions the entry running now opened */
	int nopen;
	sw_error pending;          /* the first failure since the last sync */
} dev_;

static dev_ g_ = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, { NULL }, 0, { 0 } };

static size_t page_(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* Keep the first failure for sync (the lock is held). */
static void fail_(const char *fmt, const char *what, int e)
{
	if (g_.pending.code)
		return;
	sw_fail(&g_.pending, SW_EINVAL, fmt, what, e ? strerror(e) : "");
	g_.pending.sys_errno = e;
}

/* The region holding p; a pointer one past a region's end is that region's
 * only when no other region starts there (mappings can be adjacent). */
static region_ *find_(const void *p)
{
	const char *c = p;
	region_ *end = NULL;
	for (size_t i = 0; i < g_.n; i++) {
		if (c >= g_.r[i].base && c < g_.r[i].base + g_.r[i].bytes)
			return &g_.r[i];
		if (c == g_.r[i].base + g_.r[i].bytes)
			end = &g_.r[i];
	}
	return end;
}

/* Open or close the regions in g_.open (the lock is held). */
static void protect_(int open)
{
	for (int i = 0; i < g_.nopen; i++) {
		region_ *r = g_.open[i];
		if (r->len && mprotect(r->base, r->len, open ? r->open_prot : PROT_NONE))
			fail_("guard: cannot %s a region: %s", open ? "open" : "close", errno);
	}
}

/*
 * Lock, check the pointers an entry got (NULL is "none"), open the regions.
 * A foreign pointer is kept for sync (an op), or, where the entry returns
 * its own error (a copy: direct), only reported there.
 */
static bool enter_(const char *what, const void *const *p, size_t n, bool direct)
{
	pthread_mutex_lock(&g_.lock);
	g_.nopen = 0;
	for (size_t i = 0; i < n; i++) {
		region_ *r = p[i] ? find_(p[i]) : NULL;
		if (p[i] && !r) {
			if (!direct)
				fail_("guard: %s got a pointer that is not guard memory%s", what, 0);
			pthread_mutex_unlock(&g_.lock);
			return false;
		}
		int k = 0;
		while (k < g_.nopen && g_.open[k] != r)
			k++;
		if (r && k == g_.nopen && g_.nopen < MAXOPEN_)
			g_.open[g_.nopen++] = r;
	}
	protect_(1);
	return true;
}

static void leave_(void)
{
	protect_(0);
	g_.nopen = 0;
	pthread_mutex_unlock(&g_.lock);
}

#define ENTER_(what, ...) \
	const void *ps_[] = { __VA_ARGS__ }; \
	if (!enter_(what, ps_, sizeof ps_ / sizeof *ps_, false))

static int add_region_(char *base, size_t len, size_t bytes, int prot, bool borrowed)
{
	if (g_.n == g_.cap) {
		size_t cap = g_.cap ? 2 * g_.cap : 16;
		region_ *r = realloc(g_.r, sizeof *r * cap);
		if (!r)
			return -1;
		g_.r = r, g_.cap = cap;
	}
	g_.r[g_.n++] = (region_){ base, len, bytes, prot, borrowed, 1 };
	return 0;
}

static void drop_region_(region_ *r)
{
	*r = g_.r[--g_.n];
}

/* ---- memory ---- */

static void *alloc_(size_t bytes, sw_error *err)
{
	size_t pg = bytes >= HUGE_ ? HUGE_ : page_(), len = (bytes + pg - 1) / pg * pg;
	if (!len)
		len = pg;
	/* Map one alignment more, and give back what is before and after the aligned run. */
	size_t extra = pg > page_() ? pg : 0;
	char *m = mmap(NULL, len + extra, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		sw_fail(err, SW_ENOMEM, "guard: out of memory for %zu bytes", bytes);
		return NULL;
	}
	char *p = m;
	if (extra) {
		p = (char *)(((uintptr_t)m + pg - 1) & ~(uintptr_t)(pg - 1));
		if (p > m)
			munmap(m, (size_t)(p - m));
		if (m + extra > p)
			munmap(p + len, (size_t)(m + extra - p));
		madvise(p, len, MADV_HUGEPAGE); /* a hint: without it the guard is only slower */
	}
	pthread_mutex_lock(&g_.lock);
	int rc = add_region_(p, len, bytes, PROT_READ | PROT_WRITE, false);
	pthread_mutex_unlock(&g_.lock);
	if (rc) {
		munmap(p, len);
		sw_fail(err, SW_ENOMEM, "guard: out of memory");
		return NULL;
	}
	return p;
}

static void free_(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&g_.lock);
	region_ *r = find_(p);
	if (r && r->base == p && !r->borrowed) {
		munmap(r->base, r->len);
		drop_region_(r);
	} else {
		fail_("guard: %s of a pointer it did not allocate%s", "free", 0);
	}
	pthread_mutex_unlock(&g_.lock);
}

static void *borrow_(void *host, size_t bytes, sw_error *err)
{
	size_t pg = page_();
	if ((uintptr_t)host % pg) {
		sw_fail(err, SW_EINVAL, "guard: the memory to borrow is not page-aligned");
		return NULL;
	}
	pthread_mutex_lock(&g_.lock);
	region_ *r = find_(host);
	void *ret = host;
	if (r && r->base == host && r->borrowed && r->bytes == bytes) {
		r->refs++;
	} else if (r) {
		sw_fail(err, SW_EINVAL, "guard: that memory is lent to the guard already");
		ret = NULL;
	} else {
		size_t len = bytes / pg * pg;
		int prot = PROT_READ | PROT_WRITE;
		if (len && mprotect(host, len, prot)) {
			prot = PROT_READ; /* a read-only mapping: the ops may only read it */
			if (mprotect(host, len, prot))
				len = 0;
		}
		if ((len && mprotect(host, len, PROT_NONE)) || add_region_(host, len, bytes, prot, true)) {
			if (len)
				mprotect(host, len, prot);
			sw_fail(err, SW_ENOMEM, "guard: cannot borrow that memory: %s", strerror(errno));
			ret = NULL;
		}
	}
	pthread_mutex_unlock(&g_.lock);
	return ret;
}

static void unborrow_(void *p)
{
	pthread_mutex_lock(&g_.lock);
	region_ *r = find_(p);
	if (!r || r->base != p || !r->borrowed)
		fail_("guard: %s of memory it did not borrow%s", "unborrow", 0);
	else if (--r->refs == 0) {
		if (r->len && mprotect(r->base, r->len, r->open_prot))
			fail_("guard: cannot %s borrowed memory: %s", "give back", errno);
		drop_region_(r);
	}
	pthread_mutex_unlock(&g_.lock);
}

/* A copy entry: the pointers that must be the guard's, then the work. */
static int copy_entry_(const char *what, void *dst, const void *src, int byte, size_t n,
                       const void *mine1, const void *mine2, sw_error *err)
{
	const void *ps_[] = { mine1, mine2 };
	if (!enter_(what, ps_, 2, true))
		return sw_fail(err, SW_EINVAL, "guard: %s got a pointer that is not guard memory", what);
	if (src)
		memmove(dst, src, n);
	else
		memset(dst, byte, n);
	leave_();
	return SW_OK;
}

static int memset_(void *dst, int byte, size_t n, sw_error *err)
{
	return copy_entry_("memset", dst, NULL, byte, n, dst, NULL, err);
}

static int upload_(void *dst, const void *host, size_t n, sw_error *err)
{
	return copy_entry_("upload", dst, host, 0, n, dst, NULL, err);
}

static int download_(void *host, const void *src, size_t n, sw_error *err)
{
	return copy_entry_("download", host, src, 0, n, src, NULL, err);
}

static int copy_(void *dst, const void *src, size_t n, sw_error *err)
{
	return copy_entry_("copy", dst, src, 0, n, dst, src, err);
}

static const void *host_view_(const void *p)
{
	(void)p;
	return NULL;
}

static int sync_(sw_error *err)
{
	pthread_mutex_lock(&g_.lock);
	sw_error e = g_.pending;
	memset(&g_.pending, 0, sizeof g_.pending);
	pthread_mutex_unlock(&g_.lock);
	if (!e.code)
		return SW_OK;
	if (err)
		*err = e;
	return e.code;
}

/* ---- the ops: the CPU's, inside the guard ---- */

#define CPU_ (sw_backend_cpu())

static void kv_write_(float *kpool, float *vpool, const float *k, const float *v, int n, int kd,
                      int hd, int page, size_t stride, const int32_t *ptab, const int32_t *poff,
                      const int32_t *pos)
{
	ENTER_("kv_write", kpool, vpool, k, v, ptab, poff, pos) return;
	CPU_->kv_write(kpool, vpool, k, v, n, kd, hd, page, stride, ptab, poff, pos);
	leave_();
}

static void rows_gather_(float *out, const float *src, const int32_t *rows, int n, int D)
{
	ENTER_("rows_gather", out, src, rows) return;
	CPU_->rows_gather(out, src, rows, n, D);
	leave_();
}

static int first_nonfinite_(const float *x, int rows, int cols)
{
	ENTER_("first_nonfinite", x) return -1;
	int r = CPU_->first_nonfinite(x, rows, cols);
	leave_();
	return r;
}

static void gemm_(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
	ENTER_("gemm", A, B, C) return;
	CPU_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	leave_();
}

static void linear_rows_(float *C, const float *A, const float *W, int M, int N, int K, float beta)
{
	ENTER_("linear_rows", C, A, W) return;
	CPU_->linear_rows(C, A, W, M, N, K, beta);
	leave_();
}

static void linear_rows_parts_(const sw_rows_part *p, int n, const float *A, int M, int K, float beta)
{
	for (; n > SW_ROWS_PARTS_MAX; n -= SW_ROWS_PARTS_MAX, p += SW_ROWS_PARTS_MAX)
		linear_rows_parts_(p, SW_ROWS_PARTS_MAX, A, M, K, beta);
	const void *ps[2 * SW_ROWS_PARTS_MAX + 1] = { A };
	int np = n < 1 ? 0 : n;
	for (int i = 0; i < np; i++)
		ps[1 + 2 * i] = p[i].C, ps[2 + 2 * i] = p[i].W;
	if (!enter_("linear_rows_parts", ps, (size_t)(1 + 2 * np), false))
		return;
	CPU_->linear_rows_parts(p, np, A, M, K, beta);
	leave_();
}

static void embed_fwd_(float *out, const float *table, const int32_t *tok, int T, int D)
{
	ENTER_("embed_fwd", out, table, tok) return;
	CPU_->embed_fwd(out, table, tok, T, D);
	leave_();
}

static void embed_bwd_(float *dtable, const float *dout, const int32_t *tok, int T, int D)
{
	ENTER_("embed_bwd", dtable, dout, tok) return;
	CPU_->embed_bwd(dtable, dout, tok, T, D);
	leave_();
}

static void rmsnorm_fwd_(float *out, float *rstd, const float *x, const float *w, int T, int D,
                         float eps)
{
	ENTER_("rmsnorm_fwd", out, rstd, x, w) return;
	CPU_->rmsnorm_fwd(out, rstd, x, w, T, D, eps);
	leave_();
}

static void rmsnorm_bwd_(float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int T, int D)
{
	ENTER_("rmsnorm_bwd", dx, dw, dout, x, w, rstd) return;
	CPU_->rmsnorm_bwd(dx, dw, dout, x, w, rstd, T, D);
	leave_();
}

static void layernorm_fwd_(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, int T, int D, float eps)
{
	ENTER_("layernorm_fwd", out, mean, rstd, x, w, b) return;
	CPU_->layernorm_fwd(out, mean, rstd, x, w, b, T, D, eps);
	leave_();
}

static void layernorm_bwd_(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int T, int D)
{
	ENTER_("layernorm_bwd", dx, dw, db, dout, x, w, mean, rstd) return;
	CPU_->layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, T, D);
	leave_();
}

static void act_fwd_(float *y, const float *x, size_t n, int act)
{
	ENTER_("act_fwd", y, x) return;
	CPU_->act_fwd(y, x, n, act);
	leave_();
}

static void act_bwd_(float *dx, const float *dy, const float *x, size_t n, int act)
{
	ENTER_("act_bwd", dx, dy, x) return;
	CPU_->act_bwd(dx, dy, x, n, act);
	leave_();
}

static void rope_(float *x, const int32_t *pos, int T, int nh, int hd, const float *inv_freq,
                  int inverse)
{
	ENTER_("rope", x, pos, inv_freq) return;
	CPU_->rope(x, pos, T, nh, hd, inv_freq, inverse);
	leave_();
}

static void attn_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	ENTER_("attn_fwd", out, lse, q, k, v, cu, scratch) return;
	CPU_->attn_fwd(out, lse, q, k, v, cu, nseq, H, KVH, hd, causal, scratch);
	leave_();
}

static void attn_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	ENTER_("attn_bwd", dq, dk, dv, dout, out, lse, q, k, v, cu, scratch) return;
	CPU_->attn_bwd(dq, dk, dv, dout, out, lse, q, k, v, cu, nseq, H, KVH, hd, causal, scratch);
	leave_();
}

static void attn_prefix_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
                             int causal, float *scratch)
{
	ENTER_("attn_prefix_fwd", out, lse, q, k, v, cu, prefix, scratch) return;
	CPU_->attn_prefix_fwd(out, lse, q, k, v, cu, prefix, nseq, H, KVH, hd, causal, scratch);
	leave_();
}

static void attn_prefix_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
                             int causal, float *scratch)
{
	ENTER_("attn_prefix_bwd", dq, dk, dv, dout, out, lse, q, k, v, cu, prefix, scratch) return;
	CPU_->attn_prefix_bwd(dq, dk, dv, dout, out, lse, q, k, v, cu, prefix, nseq, H, KVH, hd, causal, scratch);
	leave_();
}

static size_t attn_scratch_(int maxlen)
{
	return CPU_->attn_scratch(maxlen);
}

static void attn_paged_(float *out, const float *q, int n, int H, int KVH, int hd,
                        const sw_kv_view *kv, float *scratch)
{
	ENTER_("attn_paged", out, q, kv->k, kv->v, kv->pages, kv->page_off, kv->nkeys, scratch) return;
	CPU_->attn_paged(out, q, n, H, KVH, hd, kv, scratch);
	leave_();
}

static size_t attn_paged_scratch_(int maxkeys)
{
	return CPU_->attn_paged_scratch(maxkeys);
}

static void swiglu_fwd_(float *h, const float *gate, const float *up, size_t n)
{
	ENTER_("swiglu_fwd", h, gate, up) return;
	CPU_->swiglu_fwd(h, gate, up, n);
	leave_();
}

static void swiglu_bwd_(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t n)
{
	ENTER_("swiglu_bwd", dgate, dup, dh, gate, up) return;
	CPU_->swiglu_bwd(dgate, dup, dh, gate, up, n);
	leave_();
}

static void add_(float *y, const float *x, size_t n)
{
	ENTER_("add", y, x) return;
	CPU_->add(y, x, n);
	leave_();
}

static void bias_fwd_(float *y, const float *b, int T, int N)
{
	ENTER_("bias_fwd", y, b) return;
	CPU_->bias_fwd(y, b, T, N);
	leave_();
}

static void bias_bwd_(float *db, const float *dy, int T, int N)
{
	ENTER_("bias_bwd", db, dy) return;
	CPU_->bias_bwd(db, dy, T, N);
	leave_();
}

static void logprob_fwd_(float *lp, float *ent, float *lse, const float *logits,
                         const int32_t *target, int T, int V)
{
	ENTER_("logprob_fwd", lp, ent, lse, logits, target) return;
	CPU_->logprob_fwd(lp, ent, lse, logits, target, T, V);
	leave_();
}

static void logprob_bwd_(float *logits, const float *lse, const float *ent, const float *dlp,
                         const float *dent, const int32_t *target, int T, int V)
{
	ENTER_("logprob_bwd", logits, lse, ent, dlp, dent, target) return;
	CPU_->logprob_bwd(logits, lse, ent, dlp, dent, target, T, V);
	leave_();
}

static void adamw_(float *p, const float *g, float gs, float *m, float *v, size_t n, float lr,
                   float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	ENTER_("adamw", p, g, m, v) return;
	CPU_->adamw(p, g, gs, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
	leave_();
}

static double sumsq_(const float *x, size_t n)
{
	ENTER_("sumsq", x) return 0;
	double s = CPU_->sumsq(x, n);
	leave_();
	return s;
}

static void scale_(float *x, float s, size_t n)
{
	ENTER_("scale", x) return;
	CPU_->scale(x, s, n);
	leave_();
}

static const sw_backend guard_ = {
	.name = "guard",
	.host_memory = true,
	.alloc = alloc_,
	.free = free_,
	.borrow = borrow_,
	.unborrow = unborrow_,
	.memset = memset_,
	.upload = upload_,
	.download = download_,
	.copy = copy_,
	.host_view = host_view_,
	.sync = sync_,
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
	.attn_prefix_fwd = attn_prefix_fwd_,
	.attn_prefix_bwd = attn_prefix_bwd_,
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
};

const sw_backend *sw_backend_guard(void)
{
	return &guard_;
}
