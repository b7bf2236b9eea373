/*
 * backend.h - the device seam: what a compute backend is, and what it must
 * provide.  The engine, the decoder and the optimiser (and the model's
 * host-side functions) reach tensor memory only through a struct sw_backend:
 * they never dereference, malloc, memcpy or memset it themselves.  The CPU
 * backend (cpu/backend_cpu.c) is the reference; guard/ proves the seam (its
 * memory faults when the host touches it); a CUDA backend implements this
 * header and nothing else.
 *
 * THE CONTRACT a backend signs:
 *  - Memory.  alloc returns device memory (64-byte aligned, contents
 *    undefined) or NULL; free(NULL) is a no-op.  Every pointer an op or a
 *    device-side copy gets is device memory of THIS backend (or inside it:
 *    pointer arithmetic on device pointers is allowed and used), except the
 *    host side of upload/download and the sw_kv_view struct itself (passed
 *    by value, its pointer members device memory).  Indices (tokens,
 *    positions, cu_seqlens, page tables) are device memory too: the model
 *    code uploads them.  borrow makes host memory (a shared-memory store's
 *    arena) device memory for as long as it is borrowed; a backend whose
 *    memory is not host memory (host_memory false) returns NULL.
 *  - Copies.  upload/download/copy/memset return SW_OK or an SW_E* code with
 *    err filled; download is complete when it returns (the host may read
 *    dst), so is every other entry returning a value to the host (sumsq,
 *    first_nonfinite).  host_view gives a host-readable pointer to device
 *    memory only where device memory IS host memory (cpu), else NULL; the
 *    model code then downloads.  A backend may run ops asynchronously, in
 *    order, on one queue.
 *  - Errors.  Ops return nothing; a failure inside one (a launch that failed,
 *    a protection change refused, a pointer that is not this backend's) is
 *    kept and reported by the next sync (then cleared), which the model code
 *    calls before it returns from every public call.  Nothing is ignored.
 *  - Accumulation.  Backward ops ADD parameter gradients (dw += ...) so the
 *    gradients of micro-batches add up; each op says whether an input
 *    gradient is accumulated or overwritten.  Forward ops overwrite.
 *  - Batch invariance.  linear_rows, and every op the decoder uses (row-wise
 *    ops, attn_paged, kv_write, rows_gather), give a row the same bits
 *    whatever other rows share the call, so decoding with a seed does not
 *    depend on the batch.
 *  - Determinism.  The same inputs on the same backend, thread count and
 *    SIMD level give the same bits, every run (no atomics in reductions).
 *  - State.  A backend is a process-wide device, as a CUDA context is: ops
 *    take no handle, and what a backend keeps (guard's regions, a stream)
 *    is its own, behind a lock.  sw_backend_get() hands out the one
 *    instance of each.
 *  - Scratch.  attn_scratch/attn_paged_scratch may depend on the backend's
 *    parallelism (the CPU's threads); the engine sizes scratch at the
 *    forward and refuses a backward that would need more.
 *
 * Adding a backend (cuda/, say): implement every entry below in
 * compute/NAME/, name it in sw_backend_get() (backend.c), and run
 * tests/unit/test_backend.c's whole-model checks against the CPU's results
 * (bit for bit where the arithmetic is the CPU's, else with a tolerance).
 */
#ifndef SW_BACKEND_H
#define SW_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sw/backend.h"
#include "sw/error.h"

/* The elementwise activations of act_fwd/act_bwd (Hugging Face's names:
 * "gelu" is the erf form, "gelu_pytorch_tanh" the tanh one, "quick_gelu"
 * x * sigmoid(1.702 x), "silu" x * sigmoid(x)). */
enum { SW_ACT_GELU = 0, SW_ACT_GELU_TANH, SW_ACT_QUICK_GELU, SW_ACT_SILU };
/* The SW_ACT_* of a config.json name ("gelu", "gelu_pytorch_tanh", "quick_gelu", "silu"), or -1. */
int sw_act_code(const char *name);

/* One matrix of linear_rows_parts: C[M][N] = A W^T (+ beta C), W [N][K]. */
typedef struct sw_rows_part {
	float *C;
	const float *W;
	int N;
} sw_rows_part;

/* The most parts one linear_rows_parts call takes. */
#define SW_ROWS_PARTS_MAX 4

/*
 * The keys and values one decoding query sees, in a paged KV cache.  A
 * page holds `page` positions of every KV head, each head's in a run of
 * its own ([KVH][page][hd], as vLLM's blocks): decoding attention reads a
 * head's keys of a page as one run of memory (page * hd floats), not
 * page pieces of hd floats KVH * hd apart.
 */
typedef struct sw_kv_view {
	const float *k, *v;        /* this layer's page 0: each page [KVH][page][hd] */
	int page;                  /* tokens per page */
	const int32_t *pages;      /* page tables, concatenated */
	const int32_t *page_off;   /* [n]: query i's page table is pages + page_off[i] */
	const int32_t *nkeys;      /* [n]: query i sees positions 0 .. nkeys[i]-1 */
	size_t stride;             /* floats from a page to the next: KVH * page * hd where a
	                            * pool holds one layer's pages, more where a page of the
	                            * pool holds every layer's keys and values (decoder.c) */
} sw_kv_view;

/*
 * Ops conventions: tensors are float32, row-major; no op allocates (the
 * caller sizes scratch with the *_scratch query, in floats); "T" is a number
 * of tokens (rows), activations are [T, width]; a packed batch of sequences
 * is given cu_seqlens style (sequence s has rows cu[s] .. cu[s+1]-1, and
 * attention never crosses from one sequence into another);
 * q is [T, H, hd] and k, v are [T, KVH, hd] (grouped-query attention: query
 * head h reads key/value head h / (H / KVH)).
 */
struct sw_backend {
	const char *name;
	bool host_memory;          /* device memory is in the host's address space (borrow works) */

	/* ---- memory ---- */
	void *(*alloc)(size_t bytes, sw_error *err);
	void (*free)(void *p);
	/* Host memory as device memory until unborrow (NULL: cannot); p is page-aligned. */
	void *(*borrow)(void *host, size_t bytes, sw_error *err);
	void (*unborrow)(void *p);
	int (*memset)(void *dst, int byte, size_t n, sw_error *err);
	int (*upload)(void *dst, const void *host, size_t n, sw_error *err);
	int (*download)(void *host, const void *src, size_t n, sw_error *err);
	int (*copy)(void *dst, const void *src, size_t n, sw_error *err);
	const void *(*host_view)(const void *p);
	/* Wait for every op; SW_OK or the first failure since the last sync. */
	int (*sync)(sw_error *err);

	/* ---- ops the model code did by hand ---- */
	/*
	 * Write n rows of keys and values (k, v [n, kd], kd / hd heads of hd)
	 * into the paged pools kpool, vpool (each page [kd / hd][page][hd],
	 * stride floats from one page to the next, see sw_kv_view): row j goes
	 * to page ptab[poff[j] + pos[j] / page], slot pos[j] % page of each head.
	 */
	void (*kv_write)(float *kpool, float *vpool, const float *k, const float *v, int n, int kd,
	                 int hd, int page, size_t stride, const int32_t *ptab, const int32_t *poff,
	                 const int32_t *pos);
	/* out[j] = src[rows[j]]: n rows of width D (the embedding is the same op). */
	void (*rows_gather)(float *out, const float *src, const int32_t *rows, int n, int D);
	/* The first of rows rows of width cols holding a NaN or Inf, or -1. */
	int (*first_nonfinite)(const float *x, int rows, int cols);

	/* C = alpha op(A) op(B) + beta C; op(X) = X^T when tX; M x N result, K inner. */
	void (*gemm)(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
	             const float *B, int ldb, float beta, float *C, int ldc);

	/*
	 * C[m][n] = dot(A[m], W[n]) (+ beta C): a Linear layer on M rows, each
	 * row's result computed in the same order whatever M is and whatever
	 * else is in the batch (batch-invariant), so a sequence decoded alone
	 * or beside 31 others gets the same bits, and sampling with a seed does
	 * not depend on the batch.  The decoder uses it for every product.
	 */
	void (*linear_rows)(float *C, const float *A, const float *W, int M, int N, int K,
	                    float beta);
	/*
	 * linear_rows of one A by n (1 .. SW_ROWS_PARTS_MAX) matrices at once,
	 * each element the bits linear_rows gives it: a layer's q, k and v
	 * (its gate and up) as one call, so a batch's product is one parallel
	 * region over all their rows, not one a matrix.
	 */
	void (*linear_rows_parts)(const sw_rows_part *p, int n, const float *A, int M, int K,
	                          float beta);

	/* out[t] = table[tok[t]]; backward: dtable[tok[t]] += dout[t]. */
	void (*embed_fwd)(float *out, const float *table, const int32_t *tok, int T, int D);
	void (*embed_bwd)(float *dtable, const float *dout, const int32_t *tok, int T, int D);

	/* out = x / rms(x) * w per row, rstd[t] = 1/rms saved for backward;
	 * backward: dx += (accumulates), dw += . */
	void (*rmsnorm_fwd)(float *out, float *rstd, const float *x, const float *w, int T, int D,
	                    float eps);
	void (*rmsnorm_bwd)(float *dx, float *dw, const float *dout, const float *x,
	                    const float *w, const float *rstd, int T, int D);

	/* out = (x - mean) * rstd * w + b per row of width D; mean, rstd [T]
	 * saved for backward (b may be NULL: no bias).  Backward: dx +=
	 * (accumulates), dw +=, db += (db may be NULL). */
	void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *x, const float *w,
	                      const float *b, int T, int D, float eps);
	void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dout, const float *x,
	                      const float *w, const float *mean, const float *rstd, int T, int D);

	/* y = act(x) elementwise, act an SW_ACT_*; backward overwrites
	 * dx = dy * act'(x). */
	void (*act_fwd)(float *y, const float *x, size_t n, int act);
	void (*act_bwd)(float *dx, const float *dy, const float *x, size_t n, int act);

	/* Rotary embedding in place on x [T, nh, hd] at positions pos[t], in
	 * Hugging Face's rotate_half layout (pairs i and i + hd/2); inverse
	 * rotates back, which is the backward of the forward rotation. */
	void (*rope)(float *x, const int32_t *pos, int T, int nh, int hd, const float *inv_freq,
	             int inverse);

	/* Attention over packed sequences: out [T, H, hd], lse [T, H]
	 * (log-sum-exp of each query's scores, saved for backward).  causal: a
	 * query sees the keys of its sequence up to its own position; 0: every
	 * key of its sequence (a vision encoder). */
	void (*attn_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
	                 const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
	                 float *scratch);
	/* dq, dk, dv are overwritten. */
	void (*attn_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
	                 const float *lse, const float *q, const float *k, const float *v,
	                 const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
	                 float *scratch);
	/* Floats of scratch attn_fwd/attn_bwd need for sequences up to maxlen
	 * (with attn_prefix_*: keys up to maxlen, a prefix's included). */
	size_t (*attn_scratch)(int maxlen);
	/*
	 * attn_fwd/attn_bwd over sequences that share a prefix: sequence s with
	 * prefix[s] >= 0 continues sequence prefix[s] (an earlier one, itself
	 * without a prefix): its queries see every key of that sequence, then
	 * their own.  The prefix's dk and dv gather the terms of its own
	 * queries and of every sequence continuing it.  NULL in a backend
	 * without them (the engine then refuses such a batch).
	 */
	void (*attn_prefix_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
	                        const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
	                        int causal, float *scratch);
	void (*attn_prefix_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *out,
	                        const float *lse, const float *q, const float *k, const float *v,
	                        const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH, int hd,
	                        int causal, float *scratch);

	/* Decoding attention: n queries q [n, H, hd] against the paged cache. */
	void (*attn_paged)(float *out, const float *q, int n, int H, int KVH, int hd,
	                   const sw_kv_view *kv, float *scratch);
	size_t (*attn_paged_scratch)(int maxkeys);

	/* h = silu(gate) * up; backward overwrites dgate, dup. */
	void (*swiglu_fwd)(float *h, const float *gate, const float *up, size_t n);
	void (*swiglu_bwd)(float *dgate, float *dup, const float *dh, const float *gate,
	                   const float *up, size_t n);

	void (*add)(float *y, const float *x, size_t n);             /* y += x */
	void (*bias_fwd)(float *y, const float *b, int T, int N);    /* y[t] += b */
	void (*bias_bwd)(float *db, const float *dy, int T, int N);  /* db += sum_t dy[t] */

	/*
	 * From logits [T, V]: lse[t]; lp[t] = logits[t][target[t]] - lse[t]
	 * (0 where target[t] < 0); ent[t] the entropy of the row's softmax
	 * (lp, ent may be NULL).  Backward turns logits into d(loss)/d(logits)
	 * in place, given d(loss)/d(lp) and d(loss)/d(ent) (either may be NULL:
	 * zero); ent must be what the forward gave when dent is used.
	 */
	void (*logprob_fwd)(float *lp, float *ent, float *lse, const float *logits,
	                    const int32_t *target, int T, int V);
	void (*logprob_bwd)(float *logits, const float *lse, const float *ent, const float *dlp,
	                    const float *dent, const int32_t *target, int T, int V);

	/*
	 * One AdamW step (PyTorch's torch.optim.AdamW) on the gradient
	 * gs * g (gs: the clipping coefficient, folded in to save a pass):
	 * p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	 * p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), bc = 1 - beta^step.
	 */
	void (*adamw)(float *p, const float *g, float gs, float *m, float *v, size_t n, float lr,
	              float b1, float b2, float eps, float wd, float bc1, float bc2);
	double (*sumsq)(const float *x, size_t n);
	void (*scale)(float *x, float s, size_t n);

	/* ---- optional: NULL where the backend has none (cpu, guard) ---- */
	/*
	 * Device memory other processes map in place (a cuda: weight store,
	 * run/store.c).  ipc_alloc gives bytes of zeroed device memory and
	 * writes into ticket (SW_IPC_TICKET bytes) what another process needs
	 * to map it: ipc_open maps a ticket made by ANOTHER process (the same
	 * memory, no copy; SW_EINVAL when it names another device than this
	 * process's).  ipc_free / ipc_close let go (ops still queued finish
	 * first).  The memory lives while its allocating process holds it.
	 */
	void *(*ipc_alloc)(size_t bytes, void *ticket, sw_error *err);
	void (*ipc_free)(void *p);
	void *(*ipc_open)(const void *ticket, sw_error *err);
	void (*ipc_close)(void *p);
	/*
	 * Sums across the ranks of a data-parallel job on the device (NCCL),
	 * one communicator per process: coll_open loads what joining needs on
	 * this rank (every rank, before any joins: a rank that cannot join
	 * says so while the others can still hear it, not inside coll_init,
	 * where they would wait for it forever); coll_id makes the job's id on
	 * one rank (SW_COLL_ID bytes), which every rank passes to coll_init
	 * with its rank and the job's size (collective); coll_sum sums x[0..n)
	 * in place on every rank (complete when it returns: SW_OK or an error).
	 */
	int (*coll_open)(sw_error *err);
	int (*coll_id)(void *id, sw_error *err);
	int (*coll_init)(const void *id, int rank, int nranks, sw_error *err);
	int (*coll_sum)(float *x, size_t n, sw_error *err);
	/* out[r] = the index of the largest of row r of x [rows, cols] (the
	 * first of equals; NaN is never the largest), as the CPU's greedy
	 * sampler picks it, so the host downloads rows ints, not the logits. */
	void (*argmax)(int32_t *out, const float *x, int rows, int cols);
	/* Hand the memory freed so far back to the device (a pool keeps it for
	 * this process's next allocation), for the next process on the GPU. */
	int (*trim)(sw_error *err);
	/* The precision of gemm's products ("f32" or "bf16", sw_backend_matmul);
	 * NULL where the backend has f32 alone (the CPU's is gemm.h's). */
	int (*matmul)(const char *prec, sw_error *err);
};

/* Bytes of an ipc_alloc ticket and of a coll_id id. */
#define SW_IPC_TICKET 128
#define SW_COLL_ID 128

/* The reference backend; its memory is host memory. */
const sw_backend *sw_backend_cpu(void);
/* The guard backend (guard/): the CPU ops over memory the host cannot touch. */
const sw_backend *sw_backend_guard(void);

/*
 * The profiling backend (prof/): inner's ops, each timed by op and shape,
 * the results inner's bit for bit; when the process exits, a table of where
 * the time went is appended to the file at path (opened now: NULL with err
 * if it cannot be).  One per process: asking again for the same inner gives
 * the same wrapper, for another inner an error.  sw_backend_get and
 * sw_backend_cuda_current give it in place of the device itself when
 * $SW_PROFILE names a file.  On an inner that queues its ops (cuda) every
 * op is followed by the inner's sync, so its time is its own.
 */
const sw_backend *sw_backend_prof(const sw_backend *inner, const char *path, sw_error *err);

/* The CUDA backend on the GPU this process computes on already, else on
 * cuda:0 (a cuda: store's memory, run/store.c); NULL with err as
 * sw_backend_get("cuda") fails. */
const sw_backend *sw_backend_cuda_current(sw_error *err);

/* Threads for the CPU ops and OpenBLAS together (n <= 0: the machine's cores). */
void sw_backend_cpu_threads(int n);
/*
 * Cap the vector instructions linear_rows uses (0 portable, 1 AVX2+FMA,
 * 2 AVX-512; < 0 no cap) and return the level now in use.  Levels 0 and 1
 * give the same bits, 2 its own; for tests, and for runs that must match a
 * machine without AVX-512 bit for bit.
 */
int sw_backend_cpu_simd(int level);
/*
 * The cache level linear_rows' AVX-512 kernel of one row (decoding one
 * sequence, bound by reading W) asks for W ahead into: 1 (L1) or 2 (L2);
 * any other value the CPU's default, 2 on AMD CPUs and 1 on the others
 * (bench/RESULTS.md, "prefetch" and "pfl2").  Returns the level now in
 * use, 0 where no kernel asks (no AVX-512, or sw_backend_cpu_simd below
 * it).  The bits are the same either way; for benchmarks and tests.
 */
int sw_backend_cpu_row_prefetch(int level);
/*
 * The provider of the CPU's products (cpu/gemm.h): "onednn" (the default)
 * or "openblas", from $SW_GEMM when the backend is first used; a name it
 * does not know is an error every sync of the CPU backend reports (and
 * sw_backend_get).  sw_backend_cpu_gemm chooses again (not while ops run),
 * for tests and benchmarks; _kernels says what runs ("onednn 2.6.3
 * avx512_core_bf16", "openblas 0.3.21 SkylakeX").
 */
int sw_backend_cpu_gemm(const char *name, sw_error *err);
const char *sw_backend_cpu_gemm_kernels(void);
/* The precision of the CPU's products (cpu/gemm.h sw_gemm_matmul): "f32" or
 * "bf16", for cpu and guard alike (sw_backend_matmul's CPU half). */
int sw_backend_cpu_matmul(const char *prec, sw_error *err);

/*
 * What engine.c, decoder.c and optim.c share beside the ops: RoPE's
 * inverse frequencies [head_dim / 2] for c (rope_theta, and the Llama 3
 * scaling when c->rope_factor > 0), computed as transformers does in float32.
 */
struct sw_model_config;
void sw_rope_inv_freq(const struct sw_model_config *c, float *inv_freq);
/* The same in be's memory (be->free it); NULL with err filled on failure. */
float *sw_rope_upload(const sw_backend *be, const struct sw_model_config *c, sw_error *err);

#endif
