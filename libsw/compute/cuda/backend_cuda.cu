/*
 * backend_cuda.cu - the CUDA backend (compute/backend.h), built into its own
 * shared object, libsw-cuda.so, which libsw dlopens when a program asks for
 * "cuda" or "cuda:N" (compute/backend.c): libsw and the programs link no
 * CUDA library, so they start on machines that have none.
 *
 * f32 data throughout; the products' operands may be taken to bf16 (matmul
 * "bf16", below; written, not yet run on a GPU).  One device per process,
 * one stream: ops are queued on it in order and return nothing; a failed
 * launch or call is kept (the first one) and reported by the next sync,
 * then cleared.  Memory comes from the stream-ordered pool
 * (cudaMallocAsync), which keeps what is freed for the next allocation
 * instead of handing it back to the driver.
 *
 * Products: cuBLAS sgemm in its default math mode, which for f32 does not
 * use TF32 (so results stay near the CPU's); under matmul "bf16",
 * cublasGemmEx on the same f32 matrices with CUBLAS_COMPUTE_32F_FAST_16BF:
 * cuBLAS rounds the operands to bf16 for the tensor cores and sums in f32,
 * as the CPU's bf16 products do (gemm.h); linear_rows (decoding) stays
 * f32.  Everything else is a kernel here, each in three layers: a static
 * __global__ kernel, a launcher taking the stream that checks the launch,
 * and the backend entry.
 *
 * Determinism: no kernel adds with atomics; every reduction is a fixed tree
 * (a block's shared-memory halving, a warp's xor butterfly) over a fixed
 * split of the work, so a call gives the same bits every run.  Batch
 * invariance: linear_rows, attn_paged, kv_write, rows_gather and the
 * row-wise ops compute each row with arithmetic that depends on that row
 * (and the weights) only, never on how many rows share the call.
 *
 * Beyond the ops: shareable device memory for cuda: weight stores (CUDA
 * IPC, run/store.c), NCCL's sums for data-parallel training (dlopen'ed,
 * dist/comm.c), and an argmax of rows for greedy tokens.
 *
 * tests/gpu/test_gpu.c checks each op against the CPU backend where a GPU
 * is present; it has run on one H200 (2026-12-04, bench/RESULTS.md "GPU"),
 * never on two (NCCL).  Written since, and not yet run on a GPU: the bf16
 * products and attention over a shared prefix (attn_prefix_*).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

extern "C" {
#include "compute/backend.h"
}

#define WARP 32
#define TPB 256 /* threads per block of the row and elementwise kernels */

/* ---- the device's state ---- */

static struct {
	pthread_mutex_t mu;
	int ready, dev;
	char name[32];
	cudaStream_t stream;
	cublasHandle_t blas;
	sw_error err;         /* the first failure since the last sync */
	double *partial;      /* sumsq's per-block sums [SUMSQ_BLOCKS + 1] */
	int *first;           /* first_nonfinite's answer */
	float *work;          /* the column sums' partials, grown on demand (work_n floats) */
	size_t work_n;
	bool bf16;            /* gemm's operands to bf16 (matmul_) */
} st_ = { PTHREAD_MUTEX_INITIALIZER, 0, -1, "cuda", 0, 0, {}, 0, 0, 0, 0, false };

static int vfail_(sw_error *e, int code, const char *fmt, va_list ap)
{
	if (e) {
		memset(e, 0, sizeof *e);
		e->code = code;
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	}
	return code;
}

static int fail_(sw_error *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail_(e, code, fmt, ap);
	va_end(ap);
	return code;
}

/* Keep the first failure for sync; true when there was one. */
static bool keep_(const char *what, cudaError_t rc)
{
	if (rc == cudaSuccess)
		return false;
	pthread_mutex_lock(&st_.mu);
	if (!st_.err.code)
		fail_(&st_.err, SW_EIO, "cuda: %s: %s", what, cudaGetErrorString(rc));
	pthread_mutex_unlock(&st_.mu);
	return true;
}

static void keep_blas_(const char *what, cublasStatus_t rc)
{
	if (rc == CUBLAS_STATUS_SUCCESS)
		return;
	pthread_mutex_lock(&st_.mu);
	if (!st_.err.code)
		fail_(&st_.err, SW_EIO, "cuda: %s: cuBLAS status %d", what, (int)rc);
	pthread_mutex_unlock(&st_.mu);
}

/* After a launch: a bad configuration or an earlier fault shows here. */
#define LAUNCHED_(what) keep_(what, cudaGetLastError())

/* Blocks for n items at TPB a block, capped (grid-stride loops do the rest). */
static unsigned blocks_(size_t n)
{
	size_t b = (n + TPB - 1) / TPB;
	return (unsigned)(b > 65535 * 16 ? 65535 * 16 : b);
}

/* ---- reductions: fixed trees ---- */

__device__ __forceinline__ float warp_sum_(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over a block of TPB threads; every thread gets the result.  sh holds
 * TPB values of T. */
template <typename T> __device__ T block_sum_(T v, T *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = TPB / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	T r = sh[0];
	__syncthreads();
	return r;
}

/* The same with warp shuffles: each warp's sum by a xor butterfly, then
 * the TPB / 32 warp sums by the first warp (a fixed order too), for the
 * kernels a decoding step runs once a row (rmsnorm: 8 barriers took most
 * of its 5 us). */
__device__ float block_sum_w_(float v, float *sh)
{
	int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
	v = warp_sum_(v);
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float t = lane < TPB / WARP ? sh[lane] : 0.0f;
		t = warp_sum_(t);
		if (lane == 0)
			sh[TPB / WARP] = t;
	}
	__syncthreads();
	float r = sh[TPB / WARP];
	__syncthreads();
	return r;
}

__device__ float block_max_(float v, float *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = TPB / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}

/* ---- memory ---- */

static void *alloc_(size_t bytes, sw_error *err)
{
	void *p = NULL;
	cudaError_t rc = cudaMallocAsync(&p, bytes ? bytes : 1, st_.stream);
	if (rc != cudaSuccess) {
		cudaGetLastError(); /* an allocation failure is not sticky: clear it */
		fail_(err, SW_ENOMEM, "cuda: cannot allocate %zu bytes of device memory: %s", bytes,
		      cudaGetErrorString(rc));
		return NULL;
	}
	if ((uintptr_t)p & 63) { /* the pool aligns to 256 bytes; the contract wants 64 */
		cudaFreeAsync(p, st_.stream);
		fail_(err, SW_ENOMEM, "cuda: the memory pool gave a pointer that is not 64-byte aligned");
		return NULL;
	}
	return p;
}

static void free_(void *p)
{
	if (p)
		keep_("free", cudaFreeAsync(p, st_.stream));
}

/* Is p device memory already (a cuda: store's arena, ours or mapped from another process)? */
static bool on_device_(const void *p)
{
	cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError();
		return false;
	}
	return a.type == cudaMemoryTypeDevice;
}

/* Host memory lent to the device: pinned and mapped, read over the bus.
 * Device memory (a cuda: store's arena) is lent as it is: no copy. */
static void *borrow_(void *host, size_t bytes, sw_error *err)
{
	if (on_device_(host))
		return host;
	cudaError_t rc = cudaHostRegister(host, bytes, cudaHostRegisterMapped);
	void *d = NULL;
	if (rc == cudaSuccess && (rc = cudaHostGetDevicePointer(&d, host, 0)) != cudaSuccess)
		cudaHostUnregister(host);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		fail_(err, SW_EIO, "cuda: cannot lend %zu bytes of host memory to the device: %s", bytes,
		      cudaGetErrorString(rc));
		return NULL;
	}
	return d;
}

static void unborrow_(void *p)
{
	/* Ops still queued may read it. */
	keep_("unborrow", cudaStreamSynchronize(st_.stream));
	if (on_device_(p))
		return; /* device memory lent as it was: its owner frees it */
	void *host = NULL;
	cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.hostPointer)
		host = a.hostPointer;
	keep_("unborrow", cudaHostUnregister(host ? host : p));
}

static int call_(const char *what, cudaError_t rc, sw_error *err)
{
	if (rc == cudaSuccess)
		return SW_OK;
	keep_(what, rc);
	return fail_(err, SW_EIO, "cuda: %s: %s", what, cudaGetErrorString(rc));
}

static int memset_(void *dst, int byte, size_t n, sw_error *err)
{
	return call_("memset", cudaMemsetAsync(dst, byte, n, st_.stream), err);
}

/* From pageable host memory the copy has taken the bytes when it returns. */
static int upload_(void *dst, const void *host, size_t n, sw_error *err)
{
	return call_("upload", cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, st_.stream), err);
}

static int download_(void *host, const void *src, size_t n, sw_error *err)
{
	int rc = call_("download", cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, st_.stream), err);
	return rc ? rc : call_("download", cudaStreamSynchronize(st_.stream), err);
}

static int copy_(void *dst, const void *src, size_t n, sw_error *err)
{
	return call_("copy", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, st_.stream), err);
}

static const void *host_view_(const void *p)
{
	(void)p;
	return NULL;
}

static int sync_(sw_error *err)
{
	keep_("sync", cudaStreamSynchronize(st_.stream));
	pthread_mutex_lock(&st_.mu);
	int rc = st_.err.code;
	if (rc && err)
		*err = st_.err;
	memset(&st_.err, 0, sizeof st_.err);
	pthread_mutex_unlock(&st_.mu);
	return rc;
}

/* ---- KV cache and rows ---- */

/* Row j's element d (head d / hd, its element d % hd) goes to its head's
 * run of the page: [kd / hd][page slots][hd], pages stride floats apart. */
static __global__ void kv_write_k_(float *kpool, float *vpool, const float *k, const float *v, int kd,
                                   int hd, int page, size_t stride, const int32_t *ptab,
                                   const int32_t *poff, const int32_t *pos)
{
	int j = blockIdx.x;
	size_t at = (size_t)ptab[poff[j] + pos[j] / page] * stride + (size_t)(pos[j] % page) * hd;
	for (int d = threadIdx.x; d < kd; d += blockDim.x) {
		size_t o = at + (size_t)(d / hd) * page * hd + d % hd;
		kpool[o] = k[(size_t)j * kd + d];
		vpool[o] = v[(size_t)j * kd + d];
	}
}

static void kv_write_launch_(cudaStream_t s, float *kpool, float *vpool, const float *k,
                             const float *v, int n, int kd, int hd, int page, size_t stride,
                             const int32_t *ptab, const int32_t *poff, const int32_t *pos)
{
	if (n <= 0 || kd <= 0 || hd <= 0)
		return;
	kv_write_k_<<<n, TPB, 0, s>>>(kpool, vpool, k, v, kd, hd, page, stride, ptab, poff, pos);
	LAUNCHED_("kv_write");
}

static void kv_write_(float *kpool, float *vpool, const float *k, const float *v, int n, int kd,
                      int hd, int page, size_t stride, const int32_t *ptab, const int32_t *poff,
                      const int32_t *pos)
{
	kv_write_launch_(st_.stream, kpool, vpool, k, v, n, kd, hd, page, stride, ptab, poff, pos);
}

static __global__ void rows_gather_k_(float *out, const float *src, const int32_t *rows, int D)
{
	int j = blockIdx.x;
	const float *s = src + (size_t)rows[j] * D;
	for (int d = threadIdx.x; d < D; d += blockDim.x)
		out[(size_t)j * D + d] = s[d];
}

static void rows_gather_launch_(cudaStream_t s, float *out, const float *src, const int32_t *rows,
                                int n, int D)
{
	if (n <= 0 || D <= 0)
		return;
	rows_gather_k_<<<n, TPB, 0, s>>>(out, src, rows, D);
	LAUNCHED_("rows_gather");
}

static void rows_gather_(float *out, const float *src, const int32_t *rows, int n, int D)
{
	rows_gather_launch_(st_.stream, out, src, rows, n, D);
}

/* The smallest row holding a NaN or Inf: atomicMin, whose result does not
 * depend on the order the rows are looked at.  A row is cut into slices of
 * FN_SLICE, a block each (one block a row of 150k logits took 230 us). */
#define FN_SLICE (TPB * 16)
static __global__ void first_nonfinite_k_(int *first, const float *x, int r0, int cols)
{
	int j = r0 + (int)blockIdx.y;
	const float *z = x + (size_t)j * cols;
	int c1 = (int)blockIdx.x * FN_SLICE + FN_SLICE, bad = 0;
	c1 = c1 < cols ? c1 : cols;
	for (int c = (int)blockIdx.x * FN_SLICE + threadIdx.x; c < c1; c += blockDim.x)
		bad |= !isfinite(z[c]);
	if (__syncthreads_or(bad) && threadIdx.x == 0)
		atomicMin(first, j);
}

static int first_nonfinite_(const float *x, int rows, int cols)
{
	if (rows <= 0 || cols <= 0)
		return -1;
	int none = 0x7f7f7f7f, got = none;
	keep_("first_nonfinite", cudaMemsetAsync(st_.first, 0x7f, sizeof(int), st_.stream));
	/* gridDim.y is at most 65535 rows a launch */
	for (int r0 = 0; r0 < rows; r0 += 65535) {
		int nr = rows - r0 < 65535 ? rows - r0 : 65535;
		dim3 grid((unsigned)((cols + FN_SLICE - 1) / FN_SLICE), (unsigned)nr);
		first_nonfinite_k_<<<grid, TPB, 0, st_.stream>>>(st_.first, x, r0, cols);
	}
	LAUNCHED_("first_nonfinite");
	keep_("first_nonfinite", cudaMemcpyAsync(&got, st_.first, sizeof got, cudaMemcpyDeviceToHost,
	                                         st_.stream));
	keep_("first_nonfinite", cudaStreamSynchronize(st_.stream));
	return got == none ? -1 : got;
}

/* ---- products ---- */

/* Row-major C = alpha op(A) op(B) + beta C is column-major
 * C^T = alpha op(B)^T op(A)^T + beta C^T: the operands swap. */
static void gemm_(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	if (st_.bf16) {
		keep_blas_("gemm (bf16)",
		           cublasGemmEx(st_.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
		                        N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
		                        CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
		return;
	}
	keep_blas_("gemm", cublasSgemm(st_.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
	                               ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
	                               lda, &beta, C, ldc));
}

/* The products' precision: "f32", or "bf16" where the tensor cores have it
 * (compute capability 8.0, Ampere, and newer). */
static int matmul_(const char *prec, sw_error *err)
{
	if (!strcmp(prec, "f32")) {
		st_.bf16 = false;
		return SW_OK;
	}
	int major = 0, minor = 0;
	cudaError_t rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, st_.dev);
	if (rc == cudaSuccess)
		rc = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, st_.dev);
	if (rc != cudaSuccess)
		return fail_(err, SW_EIO, "%s: cannot read the compute capability: %s", st_.name,
		             cudaGetErrorString(rc));
	if (major < 8)
		return fail_(err, SW_EINVAL, "%s: bf16 products need compute capability 8.0 or newer; this "
		                             "GPU has %d.%d", st_.name, major, minor);
	st_.bf16 = true;
	return SW_OK;
}

/*
 * The batch-invariant product.  An output column n (a row of W) is one dot
 * product per row of A, shared by S warps of a block, S fixed by K alone
 * (lr_split_): K is cut into chunks of 128, warp w of the S takes chunks w,
 * w + S, ...  Within a chunk element k goes to lane (k / 4) % 32, partial
 * k % 4; each partial adds its products in increasing k.  A warp adds its
 * partials ((0+1)+(2+3)), then its lanes by a xor butterfly; the S warps'
 * sums are added in warp order.  The rows of A go through in tiles of
 * LR_TILE, or of 1 where M is 1 (W's chunk is read once a tile).  That
 * arithmetic is the same for every (m, n) whatever M, the tile a row falls
 * in or the vector path, so a row gets the same bits alone or in a batch.
 * Splitting K lets a short output (N of a few hundred, K in the thousands:
 * a decoding step's down projection) keep enough warps reading W.
 */
#define LR_TILE 8
#define LR_WARPS 8
#define LR_CHUNK (WARP * 4)

static int lr_split_(int K)
{
	int chunks = (K + LR_CHUNK - 1) / LR_CHUNK;
	return chunks >= 16 ? 8 : chunks >= 8 ? 4 : chunks >= 4 ? 2 : 1;
}

template <bool VEC, int S, int T>
static __global__ void linear_rows_k_(float *C, const float *A, const float *W, int M, int N, int K,
                                      float beta)
{
	__shared__ float part[LR_WARPS][T];
	int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, wi = warp % S;
	int n = blockIdx.x * (LR_WARPS / S) + warp / S;
	bool live = n < N; /* no early return: the block meets at barriers */
	const float *w = W + (size_t)(live ? n : 0) * K;
	int kend = live ? K : 0;
	for (int m0 = 0; m0 < M; m0 += T) {
		int mt = M - m0 < T ? M - m0 : T;
		float acc[T][4];
#pragma unroll
		for (int r = 0; r < T; r++)
			acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
		/* Unrolled so that several loads are in flight: each partial
		 * still takes its products in increasing k. */
#pragma unroll(T == 1 ? 8 : 2)
		for (int k0 = (wi * WARP + lane) * 4; k0 < kend; k0 += S * LR_CHUNK) {
			float wv[4], av[T][4];
			if (VEC) {
				float4 t = *(const float4 *)(w + k0);
				wv[0] = t.x, wv[1] = t.y, wv[2] = t.z, wv[3] = t.w;
			} else {
#pragma unroll
				for (int c = 0; c < 4; c++)
					wv[c] = k0 + c < K ? w[k0 + c] : 0.0f;
			}
			/* Every row's loads first, then the products. */
#pragma unroll
			for (int r = 0; r < T; r++) {
				const float *a = A + (size_t)(m0 + r) * K;
				if (r < mt && VEC) {
					float4 t = *(const float4 *)(a + k0);
					av[r][0] = t.x, av[r][1] = t.y, av[r][2] = t.z, av[r][3] = t.w;
				} else if (r < mt) {
#pragma unroll
					for (int c = 0; c < 4; c++)
						av[r][c] = k0 + c < K ? a[k0 + c] : 0.0f;
				}
			}
#pragma unroll
			for (int r = 0; r < T; r++)
				if (r < mt)
#pragma unroll
					for (int c = 0; c < 4; c++)
						if (VEC || k0 + c < K)
							acc[r][c] = fmaf(av[r][c], wv[c], acc[r][c]);
		}
#pragma unroll
		for (int r = 0; r < T; r++) {
			float sum = warp_sum_((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]));
			if (lane == 0)
				part[warp][r] = sum;
		}
		__syncthreads();
		if (live && wi == 0 && lane < mt) {
			float sum = part[warp][lane];
#pragma unroll
			for (int j = 1; j < S; j++)
				sum += part[warp + j][lane];
			float *c = C + (size_t)(m0 + lane) * N + n;
			*c = beta == 0 ? sum : sum + beta * *c;
		}
		__syncthreads(); /* part is written again by the next tile */
	}
}

/* One row (a sequence decoding alone) in tiles of one: fewer registers,
 * more loads in flight; the arithmetic of an element is the same. */
template <bool VEC, int S>
static void linear_rows_tile_(cudaStream_t s, unsigned grid, float *C, const float *A,
                              const float *W, int M, int N, int K, float beta)
{
	if (M == 1)
		linear_rows_k_<VEC, S, 1><<<grid, LR_WARPS * WARP, 0, s>>>(C, A, W, M, N, K, beta);
	else
		linear_rows_k_<VEC, S, LR_TILE><<<grid, LR_WARPS * WARP, 0, s>>>(C, A, W, M, N, K, beta);
}

template <bool VEC>
static void linear_rows_split_(cudaStream_t s, float *C, const float *A, const float *W, int M,
                               int N, int K, float beta)
{
	int S = lr_split_(K);
	unsigned grid = (unsigned)((N + LR_WARPS / S - 1) / (LR_WARPS / S));
	switch (S) {
	case 1:
		linear_rows_tile_<VEC, 1>(s, grid, C, A, W, M, N, K, beta);
		break;
	case 2:
		linear_rows_tile_<VEC, 2>(s, grid, C, A, W, M, N, K, beta);
		break;
	case 4:
		linear_rows_tile_<VEC, 4>(s, grid, C, A, W, M, N, K, beta);
		break;
	default:
		linear_rows_tile_<VEC, 8>(s, grid, C, A, W, M, N, K, beta);
		break;
	}
}

static void linear_rows_launch_(cudaStream_t s, float *C, const float *A, const float *W, int M,
                                int N, int K, float beta)
{
	if (M <= 0 || N <= 0)
		return;
	/* Same arithmetic either way (see above): only the loads differ. */
	bool vec = K % 4 == 0 && ((uintptr_t)A & 15) == 0 && ((uintptr_t)W & 15) == 0;
	if (vec)
		linear_rows_split_<true>(s, C, A, W, M, N, K, beta);
	else
		linear_rows_split_<false>(s, C, A, W, M, N, K, beta);
	LAUNCHED_("linear_rows");
}

static void linear_rows_(float *C, const float *A, const float *W, int M, int N, int K, float beta)
{
	linear_rows_launch_(st_.stream, C, A, W, M, N, K, beta);
}

/* One launch a part, in order on the stream: a launch costs no thread's wake
 * here, and each element is linear_rows' own. */
static void linear_rows_parts_(const sw_rows_part *p, int n, const float *A, int M, int K, float beta)
{
	for (int i = 0; i < n; i++)
		linear_rows_launch_(st_.stream, p[i].C, A, p[i].W, M, p[i].N, K, beta);
}

/* ---- embedding ---- */

/* Tokens repeat: a thread owns a column and adds the rows in token order
 * (the CPU's order), so no two threads touch one element. */
static __global__ void embed_bwd_k_(float *dtable, const float *dout, const int32_t *tok, int T,
                                    int D)
{
	int d = blockIdx.x * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	for (int t = 0; t < T; t++)
		dtable[(size_t)tok[t] * D + d] += dout[(size_t)t * D + d];
}

static void embed_bwd_launch_(cudaStream_t s, float *dtable, const float *dout, const int32_t *tok,
                              int T, int D)
{
	if (T <= 0 || D <= 0)
		return;
	embed_bwd_k_<<<(D + TPB - 1) / TPB, TPB, 0, s>>>(dtable, dout, tok, T, D);
	LAUNCHED_("embed_bwd");
}

static void embed_bwd_(float *dtable, const float *dout, const int32_t *tok, int T, int D)
{
	embed_bwd_launch_(st_.stream, dtable, dout, tok, T, D);
}

/* ---- sums over rows, per column (weight and bias gradients) ----
 *
 * A column's sum over T rows in two passes with a fixed split: COL_CHUNKS
 * chunks of rows, each summed in row order by one thread into a partial,
 * then the partials added to the destination in chunk order.  The split
 * does not depend on the device, so the bits do not either; and there are
 * COL_CHUNKS times more threads than columns to hide the loads' latency.
 */
#define COL_CHUNKS 64

enum { COL_RMS_W, COL_LN_W, COL_SUM };

/* What row t adds to column d. */
template <int KIND>
__device__ __forceinline__ float col_term_(const float *a, const float *b, const float *s1,
                                           const float *s2, size_t t, int D, int d)
{
	size_t i = t * D + d;
	if (KIND == COL_RMS_W) /* dw of RMSNorm: dout * x * rstd */
		return a[i] * b[i] * s1[t];
	if (KIND == COL_LN_W) /* dw of LayerNorm: dout * (x - mean) * rstd */
		return a[i] * ((b[i] - s1[t]) * s2[t]);
	return a[i]; /* a plain column sum: a bias's gradient */
}

template <int KIND>
static __global__ void col_part_k_(float *part, const float *a, const float *b, const float *s1,
                                   const float *s2, int T, int D)
{
	int d = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
	if (d >= D)
		return;
	size_t t0 = (size_t)T * c / COL_CHUNKS, t1 = (size_t)T * (c + 1) / COL_CHUNKS;
	float acc = 0;
	for (size_t t = t0; t < t1; t++)
		acc += col_term_<KIND>(a, b, s1, s2, t, D, d);
	part[(size_t)c * D + d] = acc;
}

static __global__ void col_add_k_(float *dst, const float *part, int D)
{
	int d = blockIdx.x * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	float acc = 0;
	for (int c = 0; c < COL_CHUNKS; c++)
		acc += part[(size_t)c * D + d];
	dst[d] += acc;
}

/* The workspace, at least n floats; stream-ordered, so the ops queued
 * before a regrowth finish with the old one first. */
static float *work_(size_t n)
{
	pthread_mutex_lock(&st_.mu);
	cudaError_t rc = cudaSuccess;
	if (n > st_.work_n) {
		if (st_.work)
			rc = cudaFreeAsync(st_.work, st_.stream);
		st_.work = NULL, st_.work_n = 0;
		if (rc == cudaSuccess &&
		    (rc = cudaMallocAsync((void **)&st_.work, n * sizeof(float), st_.stream)) == cudaSuccess)
			st_.work_n = n;
	}
	float *w = st_.work;
	pthread_mutex_unlock(&st_.mu);
	keep_("workspace", rc); /* takes the lock itself */
	return rc == cudaSuccess ? w : NULL;
}

/* dst[d] += sum over rows t of KIND's term. */
template <int KIND>
static void col_sum_launch_(cudaStream_t s, const char *what, float *dst, const float *a,
                            const float *b, const float *s1, const float *s2, int T, int D)
{
	float *part = work_((size_t)COL_CHUNKS * D);
	if (!part)
		return;
	dim3 grid((unsigned)((D + TPB - 1) / TPB), COL_CHUNKS);
	col_part_k_<KIND><<<grid, TPB, 0, s>>>(part, a, b, s1, s2, T, D);
	LAUNCHED_(what);
	col_add_k_<<<(D + TPB - 1) / TPB, TPB, 0, s>>>(dst, part, D);
	LAUNCHED_(what);
}

/* ---- RMSNorm, LayerNorm: a block per row; weight gradients by column sums ---- */

static __global__ void rmsnorm_fwd_k_(float *out, float *rstd, const float *x, const float *w, int D,
                                      float eps)
{
	__shared__ float sh[TPB];
	int t = blockIdx.x;
	const float *xr = x + (size_t)t * D;
	float ss = 0;
	for (int d = threadIdx.x; d < D; d += TPB)
		ss += xr[d] * xr[d];
	ss = block_sum_w_(ss, sh);
	float r = 1.0f / sqrtf(ss / (float)D + eps);
	if (threadIdx.x == 0)
		rstd[t] = r;
	for (int d = threadIdx.x; d < D; d += TPB)
		out[(size_t)t * D + d] = w[d] * (xr[d] * r);
}

static void rmsnorm_fwd_launch_(cudaStream_t s, float *out, float *rstd, const float *x,
                                const float *w, int T, int D, float eps)
{
	if (T <= 0 || D <= 0)
		return;
	rmsnorm_fwd_k_<<<T, TPB, 0, s>>>(out, rstd, x, w, D, eps);
	LAUNCHED_("rmsnorm_fwd");
}

static void rmsnorm_fwd_(float *out, float *rstd, const float *x, const float *w, int T, int D,
                         float eps)
{
	rmsnorm_fwd_launch_(st_.stream, out, rstd, x, w, T, D, eps);
}

static __global__ void rmsnorm_bwd_dx_k_(float *dx, const float *dout, const float *x,
                                         const float *w, const float *rstd, int D)
{
	__shared__ float sh[TPB];
	int t = blockIdx.x;
	const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
	float r = rstd[t], dot = 0;
	for (int d = threadIdx.x; d < D; d += TPB)
		dot += g[d] * w[d] * xr[d];
	dot = block_sum_(dot, sh);
	float c = dot * r * r * r / (float)D;
	for (int d = threadIdx.x; d < D; d += TPB)
		dx[(size_t)t * D + d] += g[d] * w[d] * r - c * xr[d];
}

static void rmsnorm_bwd_launch_(cudaStream_t s, float *dx, float *dw, const float *dout,
                                const float *x, const float *w, const float *rstd, int T, int D)
{
	if (T <= 0 || D <= 0)
		return;
	rmsnorm_bwd_dx_k_<<<T, TPB, 0, s>>>(dx, dout, x, w, rstd, D);
	LAUNCHED_("rmsnorm_bwd");
	col_sum_launch_<COL_RMS_W>(s, "rmsnorm_bwd", dw, dout, x, rstd, NULL, T, D);
}

static void rmsnorm_bwd_(float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int T, int D)
{
	rmsnorm_bwd_launch_(st_.stream, dx, dw, dout, x, w, rstd, T, D);
}

/* Mean and variance in double, two passes, as the CPU does. */
static __global__ void layernorm_fwd_k_(float *out, float *mean, float *rstd, const float *x,
                                        const float *w, const float *b, int D, float eps)
{
	__shared__ double sh[TPB];
	int t = blockIdx.x;
	const float *xr = x + (size_t)t * D;
	double s = 0;
	for (int d = threadIdx.x; d < D; d += TPB)
		s += xr[d];
	s = block_sum_(s, sh);
	float mu = (float)(s / D);
	double ss = 0;
	for (int d = threadIdx.x; d < D; d += TPB)
		ss += ((double)xr[d] - mu) * ((double)xr[d] - mu);
	ss = block_sum_(ss, sh);
	float r = (float)(1.0 / sqrt(ss / D + (double)eps));
	if (threadIdx.x == 0)
		mean[t] = mu, rstd[t] = r;
	for (int d = threadIdx.x; d < D; d += TPB) {
		float y = (xr[d] - mu) * r * w[d];
		out[(size_t)t * D + d] = b ? y + b[d] : y;
	}
}

static void layernorm_fwd_launch_(cudaStream_t s, float *out, float *mean, float *rstd,
                                  const float *x, const float *w, const float *b, int T, int D,
                                  float eps)
{
	if (T <= 0 || D <= 0)
		return;
	layernorm_fwd_k_<<<T, TPB, 0, s>>>(out, mean, rstd, x, w, b, D, eps);
	LAUNCHED_("layernorm_fwd");
}

static void layernorm_fwd_(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, int T, int D, float eps)
{
	layernorm_fwd_launch_(st_.stream, out, mean, rstd, x, w, b, T, D, eps);
}

static __global__ void layernorm_bwd_dx_k_(float *dx, const float *dout, const float *x,
                                           const float *w, const float *mean, const float *rstd,
                                           int D)
{
	__shared__ double sh[TPB];
	int t = blockIdx.x;
	const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
	float mu = mean[t], r = rstd[t];
	double sg = 0, sgx = 0;
	for (int d = threadIdx.x; d < D; d += TPB) {
		float gw = g[d] * w[d];
		sg += gw;
		sgx += (double)gw * ((xr[d] - mu) * r);
	}
	sg = block_sum_(sg, sh);
	sgx = block_sum_(sgx, sh);
	float mg = (float)(sg / D), mgx = (float)(sgx / D);
	for (int d = threadIdx.x; d < D; d += TPB)
		dx[(size_t)t * D + d] += r * (g[d] * w[d] - mg - (xr[d] - mu) * r * mgx);
}

static void layernorm_bwd_launch_(cudaStream_t s, float *dx, float *dw, float *db,
                                  const float *dout, const float *x, const float *w,
                                  const float *mean, const float *rstd, int T, int D)
{
	if (T <= 0 || D <= 0)
		return;
	layernorm_bwd_dx_k_<<<T, TPB, 0, s>>>(dx, dout, x, w, mean, rstd, D);
	LAUNCHED_("layernorm_bwd");
	col_sum_launch_<COL_LN_W>(s, "layernorm_bwd", dw, dout, x, mean, rstd, T, D);
	if (db)
		col_sum_launch_<COL_SUM>(s, "layernorm_bwd", db, dout, NULL, NULL, NULL, T, D);
}

static void layernorm_bwd_(float *dx, float *dw, float *db, const float *dout, const float *x,
                           const float *w, const float *mean, const float *rstd, int T, int D)
{
	layernorm_bwd_launch_(st_.stream, dx, dw, db, dout, x, w, mean, rstd, T, D);
}

/* ---- elementwise ---- */

__device__ __forceinline__ float act1_(float x, int act)
{
	switch (act) {
	case SW_ACT_GELU:
		return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
	case SW_ACT_GELU_TANH:
		return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
	case SW_ACT_QUICK_GELU:
		return x / (1.0f + expf(-1.702f * x));
	default:
		return x / (1.0f + expf(-x));
	}
}

__device__ __forceinline__ float dact1_(float x, int act)
{
	switch (act) {
	case SW_ACT_GELU:
		return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
		       x * 0.39894228040143268f * expf(-0.5f * x * x);
	case SW_ACT_GELU_TANH: {
		float u = 0.79788456080286536f * (x + 0.044715f * x * x * x), th = tanhf(u);
		return 0.5f * (1.0f + th) +
		       0.5f * x * (1.0f - th * th) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
	}
	case SW_ACT_QUICK_GELU: {
		float s = 1.0f / (1.0f + expf(-1.702f * x));
		return s + 1.702f * x * s * (1.0f - s);
	}
	default: {
		float s = 1.0f / (1.0f + expf(-x));
		return s * (1.0f + x * (1.0f - s));
	}
	}
}

#define FOR_EACH_(i, n) \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

static __global__ void act_fwd_k_(float *y, const float *x, size_t n, int act)
{
	FOR_EACH_(i, n)
		y[i] = act1_(x[i], act);
}

static __global__ void act_bwd_k_(float *dx, const float *dy, const float *x, size_t n, int act)
{
	FOR_EACH_(i, n)
		dx[i] = dy[i] * dact1_(x[i], act);
}

static void act_fwd_launch_(cudaStream_t s, float *y, const float *x, size_t n, int act)
{
	if (!n)
		return;
	act_fwd_k_<<<blocks_(n), TPB, 0, s>>>(y, x, n, act);
	LAUNCHED_("act_fwd");
}

static void act_bwd_launch_(cudaStream_t s, float *dx, const float *dy, const float *x, size_t n,
                            int act)
{
	if (!n)
		return;
	act_bwd_k_<<<blocks_(n), TPB, 0, s>>>(dx, dy, x, n, act);
	LAUNCHED_("act_bwd");
}

static void act_fwd_(float *y, const float *x, size_t n, int act)
{
	act_fwd_launch_(st_.stream, y, x, n, act);
}

static void act_bwd_(float *dx, const float *dy, const float *x, size_t n, int act)
{
	act_bwd_launch_(st_.stream, dx, dy, x, n, act);
}

static __global__ void swiglu_fwd_k_(float *h, const float *gate, const float *up, size_t n)
{
	FOR_EACH_(i, n) {
		float g = gate[i];
		h[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

static __global__ void swiglu_bwd_k_(float *dgate, float *dup, const float *dh, const float *gate,
                                     const float *up, size_t n)
{
	FOR_EACH_(i, n) {
		float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
		float d = dh[i], u = up[i];
		dup[i] = d * silu;
		dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
	}
}

static void swiglu_fwd_launch_(cudaStream_t s, float *h, const float *gate, const float *up,
                               size_t n)
{
	if (!n)
		return;
	swiglu_fwd_k_<<<blocks_(n), TPB, 0, s>>>(h, gate, up, n);
	LAUNCHED_("swiglu_fwd");
}

static void swiglu_bwd_launch_(cudaStream_t s, float *dgate, float *dup, const float *dh,
                               const float *gate, const float *up, size_t n)
{
	if (!n)
		return;
	swiglu_bwd_k_<<<blocks_(n), TPB, 0, s>>>(dgate, dup, dh, gate, up, n);
	LAUNCHED_("swiglu_bwd");
}

static void swiglu_fwd_(float *h, const float *gate, const float *up, size_t n)
{
	swiglu_fwd_launch_(st_.stream, h, gate, up, n);
}

static void swiglu_bwd_(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t n)
{
	swiglu_bwd_launch_(st_.stream, dgate, dup, dh, gate, up, n);
}

static __global__ void add_k_(float *y, const float *x, size_t n)
{
	FOR_EACH_(i, n)
		y[i] += x[i];
}

static __global__ void scale_k_(float *x, float s, size_t n)
{
	FOR_EACH_(i, n)
		x[i] *= s;
}

static __global__ void bias_fwd_k_(float *y, const float *b, size_t n, int N)
{
	FOR_EACH_(i, n)
		y[i] += b[i % N];
}

static void add_launch_(cudaStream_t s, float *y, const float *x, size_t n)
{
	if (!n)
		return;
	add_k_<<<blocks_(n), TPB, 0, s>>>(y, x, n);
	LAUNCHED_("add");
}

static void scale_launch_(cudaStream_t s, float *x, float f, size_t n)
{
	if (!n)
		return;
	scale_k_<<<blocks_(n), TPB, 0, s>>>(x, f, n);
	LAUNCHED_("scale");
}

static void bias_fwd_launch_(cudaStream_t s, float *y, const float *b, int T, int N)
{
	if (T <= 0 || N <= 0)
		return;
	size_t n = (size_t)T * N;
	bias_fwd_k_<<<blocks_(n), TPB, 0, s>>>(y, b, n, N);
	LAUNCHED_("bias_fwd");
}

static void bias_bwd_launch_(cudaStream_t s, float *db, const float *dy, int T, int N)
{
	if (T <= 0 || N <= 0)
		return;
	col_sum_launch_<COL_SUM>(s, "bias_bwd", db, dy, NULL, NULL, NULL, T, N);
}

static void add_(float *y, const float *x, size_t n)
{
	add_launch_(st_.stream, y, x, n);
}

static void scale_(float *x, float s, size_t n)
{
	scale_launch_(st_.stream, x, s, n);
}

static void bias_fwd_(float *y, const float *b, int T, int N)
{
	bias_fwd_launch_(st_.stream, y, b, T, N);
}

static void bias_bwd_(float *db, const float *dy, int T, int N)
{
	bias_bwd_launch_(st_.stream, db, dy, T, N);
}

/* ---- RoPE ---- */

/* A thread per (token, pair, head): a decoding step of one token is 32
 * pairs of 14 heads, and one thread walking the heads took 6 us.  Each
 * thread computes its own angle (the same for every head: the same bits). */
static __global__ void rope_k_(float *x, const int32_t *pos, int T, int nh, int hd,
                               const float *inv_freq, int inverse)
{
	int half = hd / 2;
	size_t n = (size_t)T * half * nh;
	FOR_EACH_(tih, n) {
		int h = (int)(tih % nh);
		size_t ti = tih / nh;
		int t = (int)(ti / half), i = (int)(ti % half);
		/* The angle in float32, as transformers computes it. */
		float ang = (float)pos[t] * inv_freq[i];
		double sd, cd;
		sincos((double)ang, &sd, &cd);
		float c = (float)cd, s = (float)sd;
		if (inverse)
			s = -s;
		float *r = x + ((size_t)t * nh + h) * hd;
		float a = r[i], b = r[i + half];
		r[i] = a * c - b * s;
		r[i + half] = b * c + a * s;
	}
}

static void rope_launch_(cudaStream_t s, float *x, const int32_t *pos, int T, int nh, int hd,
                         const float *inv_freq, int inverse)
{
	if (T <= 0 || nh <= 0 || hd < 2)
		return;
	rope_k_<<<blocks_((size_t)T * (hd / 2) * nh), TPB, 0, s>>>(x, pos, T, nh, hd, inv_freq,
	                                                            inverse);
	LAUNCHED_("rope");
}

static void rope_(float *x, const int32_t *pos, int T, int nh, int hd, const float *inv_freq,
                  int inverse)
{
	rope_launch_(st_.stream, x, pos, T, nh, hd, inv_freq, inverse);
}

/* ---- attention: a warp per (query, head), keys streamed with an online softmax ----
 *
 * With a shared prefix (attn_prefix_*; prefix NULL in attn_fwd/attn_bwd):
 * sequence s with prefix[s] >= 0 comes after every token of sequence
 * prefix[s], so its queries see that sequence's keys (all of them) first,
 * then their own; a prefix's keys gather dk and dv from its own queries,
 * then from each sequence continuing it, in order (as the CPU backend's).
 */

/* Head dimensions up to 32 * ATT_E (lane l holds elements l, l + 32, ...). */
#define ATT_E 8
#define ATT_WARPS 4

__device__ __forceinline__ float dot_(const float *q, const float *k, int hd, int lane)
{
	float s = 0;
#pragma unroll
	for (int e = 0; e < ATT_E; e++) {
		int d = lane + e * WARP;
		if (d < hd)
			s = fmaf(q[e], k[d], s);
	}
	return warp_sum_(s);
}

/* A row of hd floats into lanes (lane l holds l, l + 32, ...; 0 past hd), and back times f. */
__device__ __forceinline__ void lanes_load_(float *r, const float *src, int hd, int lane)
{
#pragma unroll
	for (int e = 0; e < ATT_E; e++) {
		int d = lane + e * WARP;
		r[e] = d < hd ? src[d] : 0.0f;
	}
}

__device__ __forceinline__ void lanes_store_(float *dst, const float *r, float f, int hd, int lane)
{
#pragma unroll
	for (int e = 0; e < ATT_E; e++) {
		int d = lane + e * WARP;
		if (d < hd)
			dst[d] = r[e] * f;
	}
}

/* The sequence row t is in: the last s with cu[s] <= t. */
__device__ __forceinline__ int seq_of_(const int32_t *cu, int nseq, int t)
{
	int lo = 0, hi = nseq - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (cu[mid] <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* This thread's warp among the attention kernels' (ATT_WARPS a block). */
__device__ __forceinline__ size_t att_warp_(void)
{
	return (size_t)blockIdx.x * ATT_WARPS + threadIdx.x / WARP;
}

/* The keys row t's query sees: [r[0], r[1]) of its prefix sequence (empty
 * where it has none), then [r[2], r[3]) of its own. */
__device__ __forceinline__ void keys_of_(int *r, const int32_t *cu, const int32_t *prefix, int nseq,
                                         int t, int causal)
{
	int s = seq_of_(cu, nseq, t), p = prefix ? prefix[s] : -1;
	r[0] = p >= 0 ? cu[p] : 0, r[1] = p >= 0 ? cu[p + 1] : 0;
	r[2] = cu[s], r[3] = causal ? t + 1 : cu[s + 1];
}

static __global__ void attn_fwd_k_(float *out, float *lse, const float *q, const float *k,
                                   const float *v, const int32_t *cu, const int32_t *prefix,
                                   int nseq, int T, int H, int KVH, int hd, int causal, float scale)
{
	int lane = threadIdx.x % WARP;
	size_t wi = att_warp_();
	if (wi >= (size_t)T * H)
		return;
	int t = (int)(wi / H), h = (int)(wi % H), g = h / (H / KVH), r[4];
	keys_of_(r, cu, prefix, nseq, t, causal);
	int qs = H * hd, ks = KVH * hd;
	float qr[ATT_E], o[ATT_E] = { 0 };
	lanes_load_(qr, q + (size_t)t * qs + (size_t)h * hd, hd, lane);
	float m = -INFINITY, l = 0;
	for (int part = 0; part < 4; part += 2)
		for (int j = r[part]; j < r[part + 1]; j++) {
			const float *kr = k + (size_t)j * ks + (size_t)g * hd;
			const float *vr = v + (size_t)j * ks + (size_t)g * hd;
			float sc = dot_(qr, kr, hd, lane) * scale;
			float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
			l = l * corr + p;
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd)
					o[e] = o[e] * corr + p * vr[d];
			}
			m = mn;
		}
	lanes_store_(out + (size_t)t * qs + (size_t)h * hd, o, 1.0f / l, hd, lane);
	if (lane == 0)
		lse[(size_t)t * H + h] = m + logf(l);
}

/* dq: a warp per (query, head) over its keys. */
static __global__ void attn_bwd_dq_k_(float *dq, const float *dout, const float *out,
                                      const float *lse, const float *q, const float *k,
                                      const float *v, const int32_t *cu, const int32_t *prefix,
                                      int nseq, int T, int H, int KVH, int hd, int causal,
                                      float scale)
{
	int lane = threadIdx.x % WARP;
	size_t wi = att_warp_();
	if (wi >= (size_t)T * H)
		return;
	int t = (int)(wi / H), h = (int)(wi % H), g = h / (H / KVH), r[4];
	keys_of_(r, cu, prefix, nseq, t, causal);
	int qs = H * hd, ks = KVH * hd;
	size_t qo = (size_t)t * qs + (size_t)h * hd;
	float qr[ATT_E], gr[ATT_E], acc[ATT_E] = { 0 };
	lanes_load_(qr, q + qo, hd, lane);
	lanes_load_(gr, dout + qo, hd, lane);
	float di = dot_(gr, out + qo, hd, lane);
	float L = lse[(size_t)t * H + h];
	for (int part = 0; part < 4; part += 2)
		for (int j = r[part]; j < r[part + 1]; j++) {
			const float *kr = k + (size_t)j * ks + (size_t)g * hd;
			const float *vr = v + (size_t)j * ks + (size_t)g * hd;
			float sq = 0, sv = 0;
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd) {
					sq = fmaf(qr[e], kr[d], sq);
					sv = fmaf(gr[e], vr[d], sv);
				}
			}
			sq = warp_sum_(sq), sv = warp_sum_(sv);
			float p = expf(sq * scale - L), ds = p * (sv - di);
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd)
					acc[e] = fmaf(ds, kr[d], acc[e]);
			}
		}
	lanes_store_(dq + qo, acc, scale, hd, lane);
}

/* The terms of queries i0 .. i1 - 1 (heads h0 .. h1 - 1) to one key's dk
 * and dv (ak, av; the key's k and v in kr, vr, lane-wise). */
__device__ __forceinline__ void dkv_terms_(float *ak, float *av, const float *kr, const float *vr,
                                           const float *dout, const float *out, const float *lse,
                                           const float *q, int i0, int i1, int h0, int h1, int H,
                                           int hd, float scale, int lane)
{
	int qs = H * hd;
	for (int h = h0; h < h1; h++)
		for (int i = i0; i < i1; i++) {
			size_t qo = (size_t)i * qs + (size_t)h * hd;
			const float *qr = q + qo, *gr = dout + qo, *orow = out + qo;
			float sq = 0, sv = 0, di = 0;
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd) {
					sq = fmaf(qr[d], kr[e], sq);
					sv = fmaf(gr[d], vr[e], sv);
					di = fmaf(gr[d], orow[d], di);
				}
			}
			sq = warp_sum_(sq), sv = warp_sum_(sv), di = warp_sum_(di);
			float p = expf(sq * scale - lse[(size_t)i * H + h]), ds = p * (sv - di);
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd) {
					av[e] = fmaf(p, gr[d], av[e]);
					ak[e] = fmaf(ds, qr[d], ak[e]);
				}
			}
		}
}

/* dk, dv: a warp per (key, key/value head) over the queries that see it,
 * head by head of its group (then those of the sequences continuing its
 * own, each whole): each key's rows are one warp's own, so no atomics. */
static __global__ void attn_bwd_dkv_k_(float *dk, float *dv, const float *dout, const float *out,
                                       const float *lse, const float *q, const float *k,
                                       const float *v, const int32_t *cu, const int32_t *prefix,
                                       int nseq, int T, int H, int KVH, int hd, int causal,
                                       float scale)
{
	int lane = threadIdx.x % WARP;
	size_t wi = att_warp_();
	if (wi >= (size_t)T * KVH)
		return;
	int j = (int)(wi / KVH), g = (int)(wi % KVH), grp = H / KVH;
	int s = seq_of_(cu, nseq, j), i0 = causal ? j : cu[s], i1 = cu[s + 1];
	size_t ko = (size_t)j * KVH * hd + (size_t)g * hd;
	float kr[ATT_E], vr[ATT_E], ak[ATT_E] = { 0 }, av[ATT_E] = { 0 };
	lanes_load_(kr, k + ko, hd, lane);
	lanes_load_(vr, v + ko, hd, lane);
	dkv_terms_(ak, av, kr, vr, dout, out, lse, q, i0, i1, g * grp, (g + 1) * grp, H, hd, scale, lane);
	for (int c = s + 1; prefix && c < nseq; c++)
		if (prefix[c] == s)
			dkv_terms_(ak, av, kr, vr, dout, out, lse, q, cu[c], cu[c + 1], g * grp, (g + 1) * grp,
			           H, hd, scale, lane);
	lanes_store_(dk + ko, ak, scale, hd, lane);
	lanes_store_(dv + ko, av, 1.0f, hd, lane);
}

static bool attn_shape_ok_(const char *what, int H, int KVH, int hd)
{
	if (hd <= 32 * ATT_E && KVH > 0 && H % KVH == 0)
		return true;
	pthread_mutex_lock(&st_.mu);
	if (!st_.err.code)
		fail_(&st_.err, SW_EINVAL, "cuda: %s: head_dim %d over the kernel's %d, or %d heads over %d",
		      what, hd, 32 * ATT_E, H, KVH);
	pthread_mutex_unlock(&st_.mu);
	return false;
}

/* The rows of a packed batch: cu[nseq], read back (sizes the grid). */
static int rows_of_(const int32_t *cu, int nseq)
{
	int32_t T = 0;
	if (keep_("attention", cudaMemcpyAsync(&T, cu + nseq, sizeof T, cudaMemcpyDeviceToHost, st_.stream)) ||
	    keep_("attention", cudaStreamSynchronize(st_.stream)))
		return 0;
	return T;
}

static void attn_fwd_launch_(cudaStream_t s, float *out, float *lse, const float *q, const float *k,
                             const float *v, const int32_t *cu, const int32_t *prefix, int nseq,
                             int T, int H, int KVH, int hd, int causal)
{
	if (T <= 0 || nseq <= 0 || !attn_shape_ok_("attn_fwd", H, KVH, hd))
		return;
	size_t warps = (size_t)T * H;
	attn_fwd_k_<<<(unsigned)((warps + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * WARP, 0, s>>>(
		out, lse, q, k, v, cu, prefix, nseq, T, H, KVH, hd, causal, 1.0f / sqrtf((float)hd));
	LAUNCHED_("attn_fwd");
}

static void attn_prefix_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH,
                             int hd, int causal, float *scratch)
{
	(void)scratch;
	if (nseq > 0)
		attn_fwd_launch_(st_.stream, out, lse, q, k, v, cu, prefix, nseq, rows_of_(cu, nseq), H,
		                 KVH, hd, causal);
}

static void attn_fwd_(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	attn_prefix_fwd_(out, lse, q, k, v, cu, nullptr, nseq, H, KVH, hd, causal, scratch);
}

static void attn_bwd_launch_(cudaStream_t s, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q, const float *k,
                             const float *v, const int32_t *cu, const int32_t *prefix, int nseq,
                             int T, int H, int KVH, int hd, int causal)
{
	if (T <= 0 || nseq <= 0 || !attn_shape_ok_("attn_bwd", H, KVH, hd))
		return;
	float scale = 1.0f / sqrtf((float)hd);
	size_t wq = (size_t)T * H, wk = (size_t)T * KVH;
	attn_bwd_dq_k_<<<(unsigned)((wq + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * WARP, 0, s>>>(
		dq, dout, out, lse, q, k, v, cu, prefix, nseq, T, H, KVH, hd, causal, scale);
	LAUNCHED_("attn_bwd");
	attn_bwd_dkv_k_<<<(unsigned)((wk + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * WARP, 0, s>>>(
		dk, dv, dout, out, lse, q, k, v, cu, prefix, nseq, T, H, KVH, hd, causal, scale);
	LAUNCHED_("attn_bwd");
}

static void attn_prefix_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const int32_t *cu, const int32_t *prefix, int nseq, int H, int KVH,
                             int hd, int causal, float *scratch)
{
	(void)scratch;
	if (nseq > 0)
		attn_bwd_launch_(st_.stream, dq, dk, dv, dout, out, lse, q, k, v, cu, prefix, nseq,
		                 rows_of_(cu, nseq), H, KVH, hd, causal);
}

static void attn_bwd_(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int32_t *cu, int nseq, int H, int KVH, int hd, int causal,
                      float *scratch)
{
	attn_prefix_bwd_(dq, dk, dv, dout, out, lse, q, k, v, cu, nullptr, nseq, H, KVH, hd, causal,
	                 scratch);
}

/* The kernels keep their state in registers: no scratch (one float, so
 * that a caller's allocation is never of zero bytes). */
static size_t attn_scratch_(int maxlen)
{
	(void)maxlen;
	return 1;
}

__device__ __forceinline__ float warp_max_(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/*
 * Decoding: a warp per (query, head).  Its keys go 32 at a time, a key a
 * lane: the lane takes the whole dot product (in increasing d), the warp
 * the largest score and the sum of the exponentials (xor butterflies), and
 * the values are then added in key order, a lane per element of the head.
 * That order is fixed by the number of keys alone, so a query gets the
 * same bits whatever else is in the batch.  (A warp that walked its keys
 * one by one, a warp-wide sum each, took 19 us a layer for ~18 keys on an
 * H200; this takes 14, still slow: each lane's dot product waits on its
 * key row's loads one after another.  A block of 4 warps splitting the
 * chunks, or a dot product shared by the lanes, measured slower.)
 */
template <bool VEC>
static __global__ void attn_paged_k_(float *out, const float *q, int n, int H, int KVH, int hd,
                                     sw_kv_view kv, float scale)
{
	__shared__ float qs[ATT_WARPS][WARP * ATT_E];
	int lane = threadIdx.x % WARP, wl = threadIdx.x / WARP;
	size_t wi = (size_t)blockIdx.x * ATT_WARPS + wl;
	if (wi >= (size_t)n * H) /* a whole warp: no block barrier follows */
		return;
	int i = (int)(wi / H), h = (int)(wi % H), g = h / (H / KVH), P = kv.page;
	const int32_t *pt = kv.pages + kv.page_off[i];
	int nk = kv.nkeys[i];
	size_t qo = ((size_t)i * H + h) * hd;
	float *qw = qs[wl];
	for (int d = lane; d < hd; d += WARP)
		qw[d] = q[qo + d];
	__syncwarp();
	float o[ATT_E] = { 0 }, m = -INFINITY, l = 0;
	for (int j0 = 0; j0 < nk; j0 += WARP) {
		int j = j0 + lane, cnt = nk - j0 < WARP ? nk - j0 : WARP;
		float sc = -INFINITY;
		size_t row = 0;
		if (j < nk) {
			row = (size_t)pt[j / P] * kv.stride + ((size_t)g * P + j % P) * hd;
			const float *kr = kv.k + row;
			float sum = 0;
			if (VEC) {
				for (int d = 0; d < hd; d += 4) {
					float4 t = *(const float4 *)(kr + d);
					sum = fmaf(qw[d], t.x, sum);
					sum = fmaf(qw[d + 1], t.y, sum);
					sum = fmaf(qw[d + 2], t.z, sum);
					sum = fmaf(qw[d + 3], t.w, sum);
				}
			} else {
				for (int d = 0; d < hd; d++)
					sum = fmaf(qw[d], kr[d], sum);
			}
			sc = sum * scale;
		}
		float mn = fmaxf(m, warp_max_(sc)), corr = expf(m - mn);
		float p = j < nk ? expf(sc - mn) : 0.0f;
		l = l * corr + warp_sum_(p);
#pragma unroll
		for (int e = 0; e < ATT_E; e++)
			o[e] *= corr;
#pragma unroll 4
		for (int t = 0; t < cnt; t++) {
			float pk = __shfl_sync(0xffffffffu, p, t);
			const float *vr = kv.v + __shfl_sync(0xffffffffu, row, t);
#pragma unroll
			for (int e = 0; e < ATT_E; e++) {
				int d = lane + e * WARP;
				if (d < hd)
					o[e] = fmaf(pk, vr[d], o[e]);
			}
		}
		m = mn;
	}
	lanes_store_(out + qo, o, nk > 0 ? 1.0f / l : 0.0f, hd, lane);
}

static void attn_paged_launch_(cudaStream_t s, float *out, const float *q, int n, int H, int KVH,
                               int hd, const sw_kv_view *kv)
{
	if (n <= 0 || !attn_shape_ok_("attn_paged", H, KVH, hd))
		return;
	size_t warps = (size_t)n * H;
	unsigned grid = (unsigned)((warps + ATT_WARPS - 1) / ATT_WARPS);
	float scale = 1.0f / sqrtf((float)hd);
	/* The same sums either way: only the loads of the keys differ (4 floats
	 * at a time where every key's row starts on 16 bytes: its page's start
	 * and the pages' stride both multiples of 4 floats). */
	if (hd % 4 == 0 && kv->stride % 4 == 0 && ((uintptr_t)kv->k & 15) == 0)
		attn_paged_k_<true><<<grid, ATT_WARPS * WARP, 0, s>>>(out, q, n, H, KVH, hd, *kv, scale);
	else
		attn_paged_k_<false><<<grid, ATT_WARPS * WARP, 0, s>>>(out, q, n, H, KVH, hd, *kv, scale);
	LAUNCHED_("attn_paged");
}

static void attn_paged_(float *out, const float *q, int n, int H, int KVH, int hd,
                        const sw_kv_view *kv, float *scratch)
{
	(void)scratch;
	attn_paged_launch_(st_.stream, out, q, n, H, KVH, hd, kv);
}

static size_t attn_paged_scratch_(int maxkeys)
{
	(void)maxkeys;
	return 1;
}

/* ---- log-probabilities: a block per row of logits ---- */

static __global__ void logprob_fwd_k_(float *lp, float *ent, float *lse, const float *logits,
                                      const int32_t *target, int V)
{
	__shared__ float shf[TPB];
	__shared__ double shd[TPB];
	int t = blockIdx.x;
	const float *z = logits + (size_t)t * V;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < V; j += TPB)
		m = z[j] > m ? z[j] : m;
	m = block_max_(m, shf);
	double sum = 0, zsum = 0;
	for (int j = threadIdx.x; j < V; j += TPB) {
		float d = z[j] - m, e = expf(d);
		sum += (double)e;
		zsum += (double)(e * d);
	}
	sum = block_sum_(sum, shd);
	zsum = block_sum_(zsum, shd);
	if (threadIdx.x == 0) {
		double l = (double)m + log(sum);
		lse[t] = (float)l;
		if (ent)
			ent[t] = (float)(log(sum) - zsum / sum);
		if (lp)
			lp[t] = target[t] >= 0 ? (float)((double)z[target[t]] - l) : 0.0f;
	}
}

static void logprob_fwd_launch_(cudaStream_t s, float *lp, float *ent, float *lse,
                                const float *logits, const int32_t *target, int T, int V)
{
	if (T <= 0 || V <= 0)
		return;
	logprob_fwd_k_<<<T, TPB, 0, s>>>(lp, ent, lse, logits, target, V);
	LAUNCHED_("logprob_fwd");
}

static void logprob_fwd_(float *lp, float *ent, float *lse, const float *logits,
                         const int32_t *target, int T, int V)
{
	logprob_fwd_launch_(st_.stream, lp, ent, lse, logits, target, T, V);
}

static __global__ void logprob_bwd_k_(float *logits, const float *lse, const float *ent,
                                      const float *dlp, const float *dent, const int32_t *target,
                                      int V)
{
	int t = blockIdx.x;
	float *z = logits + (size_t)t * V;
	float a = dlp && target[t] >= 0 ? dlp[t] : 0;
	float b = dent ? dent[t] : 0, Hn = b != 0 ? ent[t] : 0, l = lse[t];
	for (int j = threadIdx.x; j < V; j += TPB) {
		float lpj = z[j] - l, p = expf(lpj);
		z[j] = -a * p - b * p * (lpj + Hn);
	}
	__syncthreads();
	if (threadIdx.x == 0 && a != 0)
		z[target[t]] += a;
}

static void logprob_bwd_launch_(cudaStream_t s, float *logits, const float *lse, const float *ent,
                                const float *dlp, const float *dent, const int32_t *target, int T,
                                int V)
{
	if (T <= 0 || V <= 0)
		return;
	logprob_bwd_k_<<<T, TPB, 0, s>>>(logits, lse, ent, dlp, dent, target, V);
	LAUNCHED_("logprob_bwd");
}

static void logprob_bwd_(float *logits, const float *lse, const float *ent, const float *dlp,
                         const float *dent, const int32_t *target, int T, int V)
{
	logprob_bwd_launch_(st_.stream, logits, lse, ent, dlp, dent, target, T, V);
}

/* ---- the optimiser and the norms ---- */

static __global__ void adamw_k_(float *p, const float *g, float gs, float *m, float *v, size_t n,
                                float b1, float b2, float eps, float step, float sbc2, float decay)
{
	FOR_EACH_(i, n) {
		float gi = g[i] * gs;
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * decay - step * mi / (sqrtf(vi) / sbc2 + eps);
	}
}

static void adamw_launch_(cudaStream_t s, float *p, const float *g, float gs, float *m, float *v,
                          size_t n, float b1, float b2, float eps, float step, float sbc2,
                          float decay)
{
	if (!n)
		return;
	adamw_k_<<<blocks_(n), TPB, 0, s>>>(p, g, gs, m, v, n, b1, b2, eps, step, sbc2, decay);
	LAUNCHED_("adamw");
}

static void adamw_(float *p, const float *g, float gs, float *m, float *v, size_t n, float lr,
                   float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	adamw_launch_(st_.stream, p, g, gs, m, v, n, b1, b2, eps, lr / bc1, sqrtf(bc2), 1.0f - lr * wd);
}

/* A fixed grid whatever the device, so the sum's tree is fixed too. */
#define SUMSQ_BLOCKS 1024

static __global__ void sumsq_part_k_(double *part, const float *x, size_t n)
{
	__shared__ double sh[TPB];
	double s = 0;
	FOR_EACH_(i, n)
		s += (double)x[i] * x[i];
	s = block_sum_(s, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

static __global__ void sumsq_total_k_(double *part)
{
	__shared__ double sh[TPB];
	double s = 0;
	for (int b = threadIdx.x; b < SUMSQ_BLOCKS; b += TPB)
		s += part[b];
	s = block_sum_(s, sh);
	if (threadIdx.x == 0)
		part[SUMSQ_BLOCKS] = s;
}

static double sumsq_(const float *x, size_t n)
{
	if (!n)
		return 0;
	double got = 0;
	sumsq_part_k_<<<SUMSQ_BLOCKS, TPB, 0, st_.stream>>>(st_.partial, x, n);
	LAUNCHED_("sumsq");
	sumsq_total_k_<<<1, TPB, 0, st_.stream>>>(st_.partial);
	LAUNCHED_("sumsq");
	keep_("sumsq", cudaMemcpyAsync(&got, st_.partial + SUMSQ_BLOCKS, sizeof got,
	                               cudaMemcpyDeviceToHost, st_.stream));
	keep_("sumsq", cudaStreamSynchronize(st_.stream));
	return got;
}

/* ---- device memory other processes map: cuda: stores (run/store.c) ---- */

/* What ipc_alloc hands out and ipc_open takes (SW_IPC_TICKET bytes): the
 * CUDA IPC handle, and the PCI address of the GPU the memory is on, so that
 * a process on another GPU is told so instead of mapping a wrong device. */
struct ticket_ {
	char magic[8];
	cudaIpcMemHandle_t handle;
	char bus[24];
	uint64_t bytes;
};
static_assert(sizeof(ticket_) <= SW_IPC_TICKET, "a ticket outgrew SW_IPC_TICKET");
static const char ticket_magic_[8] = "SWIPC1";

static int bus_(char *bus, size_t n, sw_error *err)
{
	cudaError_t rc = cudaDeviceGetPCIBusId(bus, (int)n, st_.dev);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		return fail_(err, SW_EIO, "cuda:%d: cannot read the GPU's PCI address: %s", st_.dev,
		             cudaGetErrorString(rc));
	}
	return SW_OK;
}

/* cudaMalloc, not the stream-ordered pool: cudaIpcGetMemHandle takes only
 * memory of cudaMalloc. */
static void *ipc_alloc_(size_t bytes, void *ticket, sw_error *err)
{
	ticket_ t;
	memset(&t, 0, sizeof t);
	memcpy(t.magic, ticket_magic_, sizeof t.magic);
	t.bytes = bytes;
	void *p = NULL;
	cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
	if (rc == cudaSuccess && (rc = cudaMemsetAsync(p, 0, bytes, st_.stream)) == cudaSuccess &&
	    (rc = cudaStreamSynchronize(st_.stream)) == cudaSuccess)
		rc = cudaIpcGetMemHandle(&t.handle, p);
	if (rc != cudaSuccess) {
		if (p)
			cudaFree(p);
		cudaGetLastError();
		fail_(err, SW_ENOMEM, "cuda: cannot make %zu bytes of shareable device memory: %s", bytes,
		      cudaGetErrorString(rc));
		return NULL;
	}
	if (bus_(t.bus, sizeof t.bus, err)) {
		cudaFree(p);
		return NULL;
	}
	memset(ticket, 0, SW_IPC_TICKET);
	memcpy(ticket, &t, sizeof t);
	return p;
}

/* After the ops still queued that may use it: free our memory, or unmap another process's. */
static void let_go_(void *p, bool ours)
{
	if (!p)
		return;
	keep_("ipc", cudaStreamSynchronize(st_.stream));
	keep_("ipc", ours ? cudaFree(p) : cudaIpcCloseMemHandle(p));
}

static void ipc_free_(void *p)
{
	let_go_(p, true);
}

static void *ipc_open_(const void *ticket, sw_error *err)
{
	ticket_ t;
	char bus[24] = { 0 };
	memcpy(&t, ticket, sizeof t);
	t.bus[sizeof t.bus - 1] = 0;
	if (memcmp(t.magic, ticket_magic_, sizeof t.magic)) {
		fail_(err, SW_EINVAL, "cuda: not a ticket of this backend's shareable memory");
		return NULL;
	}
	if (bus_(bus, sizeof bus, err))
		return NULL;
	/* Another GPU could map it only with peer access: refused, said plainly. */
	if (strcasecmp(bus, t.bus)) {
		fail_(err, SW_EINVAL, "cuda: the memory is on the GPU at PCI %s, this process computes on %s (%s)",
		      t.bus, bus, st_.name);
		return NULL;
	}
	void *p = NULL;
	cudaError_t rc = cudaIpcOpenMemHandle(&p, t.handle, cudaIpcMemLazyEnablePeerAccess);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		fail_(err, SW_EIO, "cuda: cannot map another process's device memory (%llu bytes): %s",
		      (unsigned long long)t.bytes, cudaGetErrorString(rc));
		return NULL;
	}
	return p;
}

static void ipc_close_(void *p)
{
	let_go_(p, false);
}

/* ---- sums across ranks: NCCL, loaded when first asked for ---- */

/*
 * NCCL is dlopen'ed (libnccl.so.2), not linked: the backend loads on a GPU
 * machine without NCCL, and only data parallel training needs it.  The few
 * types are NCCL's stable ABI (nccl.h since 2.0): the 128-byte unique id,
 * ncclSuccess 0, ncclFloat32 7, ncclSum 0.
 */
typedef struct {
	char internal[128];
} nccl_id_;
typedef struct nccl_opaque_ *nccl_comm_;
static_assert(sizeof(nccl_id_) == SW_COLL_ID, "NCCL's unique id is 128 bytes");

static struct {
	void *so;
	nccl_comm_ comm;
	int (*get_id)(nccl_id_ *);
	int (*init_rank)(nccl_comm_ *, int, nccl_id_, int);
	int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_, cudaStream_t);
	const char *(*what)(int);
} nccl_ = {};

static int nccl_load_(sw_error *err)
{
	if (nccl_.so)
		return SW_OK;
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!so)
		return fail_(err, SW_ENOENT, "cuda: summing gradients on the GPUs needs NCCL: %s", dlerror());
	nccl_.get_id = (int (*)(nccl_id_ *))dlsym(so, "ncclGetUniqueId");
	nccl_.init_rank = (int (*)(nccl_comm_ *, int, nccl_id_, int))dlsym(so, "ncclCommInitRank");
	nccl_.all_reduce =
	    (int (*)(const void *, void *, size_t, int, int, nccl_comm_, cudaStream_t))dlsym(so, "ncclAllReduce");
	nccl_.what = (const char *(*)(int))dlsym(so, "ncclGetErrorString");
	if (!nccl_.get_id || !nccl_.init_rank || !nccl_.all_reduce || !nccl_.what) {
		dlclose(so);
		return fail_(err, SW_ENOENT, "cuda: libnccl.so.2 lacks ncclGetUniqueId, ncclCommInitRank, "
		                             "ncclAllReduce or ncclGetErrorString");
	}
	nccl_.so = so;
	return SW_OK;
}

static int coll_id_(void *id, sw_error *err)
{
	int rc = nccl_load_(err);
	if (rc)
		return rc;
	nccl_id_ u;
	int r = nccl_.get_id(&u);
	if (r)
		return fail_(err, SW_EIO, "cuda: ncclGetUniqueId: %s", nccl_.what(r));
	memcpy(id, &u, sizeof u);
	return SW_OK;
}

static int coll_init_(const void *id, int rank, int nranks, sw_error *err)
{
	int rc = nccl_load_(err);
	if (rc)
		return rc;
	if (nccl_.comm)
		return fail_(err, SW_EINVAL, "cuda: this process has joined its ranks already");
	nccl_id_ u;
	memcpy(&u, id, sizeof u);
	int r = nccl_.init_rank(&nccl_.comm, nranks, u, rank);
	if (r) {
		nccl_.comm = NULL;
		return fail_(err, SW_EIO, "cuda: ncclCommInitRank (rank %d of %d on %s): %s", rank, nranks,
		             st_.name, nccl_.what(r));
	}
	return SW_OK;
}

/* On the backend's stream, after the ops that made x, and waited for. */
static int coll_sum_(float *x, size_t n, sw_error *err)
{
	if (!nccl_.comm)
		return fail_(err, SW_EINVAL, "cuda: coll_sum before coll_init");
	int r = nccl_.all_reduce(x, x, n, 7 /* ncclFloat32 */, 0 /* ncclSum */, nccl_.comm, st_.stream);
	if (r)
		return fail_(err, SW_EIO, "cuda: ncclAllReduce of %zu floats: %s", n, nccl_.what(r));
	return sync_(err);
}

/* ---- argmax of rows: greedy decoding's token without the logits' download ---- */

/*
 * One block a row.  The CPU's scan (engine.c, sampler.c) keeps the first of
 * equals and never moves to a NaN (x > best is false), and stays on column
 * 0 when that is NaN; the same here: each thread keeps its columns' first
 * largest non-NaN, the block merges by (value, then lower index).
 */
static __global__ void argmax_k_(int32_t *out, const float *x, int cols)
{
	__shared__ float sv[TPB];
	__shared__ int si[TPB];
	const float *z = x + (size_t)blockIdx.x * cols;
	float bv = -INFINITY;
	int bi = INT32_MAX;
	for (int k = threadIdx.x; k < cols; k += blockDim.x) {
		float v = z[k];
		if (!isnan(v) && (v > bv || (v == bv && k < bi)))
			bv = v, bi = k;
	}
	sv[threadIdx.x] = bv;
	si[threadIdx.x] = bi;
	__syncthreads();
	for (int s = TPB / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s) {
			float v = sv[threadIdx.x + s];
			int i = si[threadIdx.x + s];
			if (v > sv[threadIdx.x] || (v == sv[threadIdx.x] && i < si[threadIdx.x]))
				sv[threadIdx.x] = v, si[threadIdx.x] = i;
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = isnan(z[0]) || si[0] == INT32_MAX ? 0 : si[0];
}

static void argmax_launch_(cudaStream_t s, int32_t *out, const float *x, int rows, int cols)
{
	if (rows <= 0 || cols <= 0)
		return;
	argmax_k_<<<rows, TPB, 0, s>>>(out, x, cols);
	LAUNCHED_("argmax");
}

static void argmax_(int32_t *out, const float *x, int rows, int cols)
{
	argmax_launch_(st_.stream, out, x, rows, cols);
}

/* The pool keeps what is freed (release threshold: all of it): give it back. */
static int trim_(sw_error *err)
{
	cudaMemPool_t pool;
	cudaError_t rc = cudaStreamSynchronize(st_.stream);
	if (rc == cudaSuccess && (rc = cudaDeviceGetDefaultMemPool(&pool, st_.dev)) == cudaSuccess)
		rc = cudaMemPoolTrimTo(pool, 0);
	return call_("trim", rc, err);
}

/* ---- the backend ---- */

static sw_backend cuda_ = {
	.name = st_.name,
	.host_memory = false,
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
	.embed_fwd = rows_gather_, /* the same gather */
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
	.attn_prefix_fwd = attn_prefix_fwd_,
	.attn_prefix_bwd = attn_prefix_bwd_,
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
	.ipc_alloc = ipc_alloc_,
	.ipc_free = ipc_free_,
	.ipc_open = ipc_open_,
	.ipc_close = ipc_close_,
	.coll_open = nccl_load_,
	.coll_id = coll_id_,
	.coll_init = coll_init_,
	.coll_sum = coll_sum_,
	.argmax = argmax_,
	.trim = trim_,
	.matmul = matmul_,
};

/* Set the device up, once; the caller holds st_.mu. */
static int init_(int dev, sw_error *err)
{
	/* The runtime loads the driver itself and says only "insufficient
	 * driver" when there is none: look for it first, to name it. */
	if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL))
		return fail_(err, SW_ENOENT, "cuda: no NVIDIA driver on this machine: %s", dlerror());
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess)
		return fail_(err, SW_ENOENT, "cuda: no usable GPU: %s", cudaGetErrorString(rc));
	if (n == 0)
		return fail_(err, SW_ENOENT, "cuda: no CUDA device on this machine");
	if (dev <= -2) /* an MPI rank's plain "cuda": its local index, modulo the GPUs */
		dev = (-2 - dev) % n;
	if (dev >= n)
		return fail_(err, SW_ENOENT, "cuda:%d: this machine has %d CUDA device%s (cuda:0%s)", dev,
		             n, n > 1 ? "s" : "", n > 1 ? " to cuda:N-1" : "");
	cudaMemPool_t pool;
	uint64_t keep = UINT64_MAX;
	cublasStatus_t bs;
	if ((rc = cudaSetDevice(dev)) ||
	    (rc = cudaStreamCreateWithFlags(&st_.stream, cudaStreamNonBlocking)) ||
	    (rc = cudaDeviceGetDefaultMemPool(&pool, dev)) ||
	    (rc = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) ||
	    (rc = cudaMalloc((void **)&st_.partial, sizeof(double) * (SUMSQ_BLOCKS + 1))) ||
	    (rc = cudaMalloc((void **)&st_.first, sizeof(int))))
		return fail_(err, SW_EIO, "cuda:%d: cannot set the device up: %s", dev,
		             cudaGetErrorString(rc));
	if ((bs = cublasCreate(&st_.blas)) || (bs = cublasSetStream(st_.blas, st_.stream)) ||
	    (bs = cublasSetMathMode(st_.blas, CUBLAS_DEFAULT_MATH)))
		return fail_(err, SW_EIO, "cuda:%d: cannot start cuBLAS (status %d)", dev, (int)bs);
	st_.dev = dev;
	snprintf(st_.name, sizeof st_.name, dev ? "cuda:%d" : "cuda", dev);
	st_.ready = 1;
	return SW_OK;
}

/*
 * The one entry libsw looks up (dlsym): the backend on device dev, set up
 * on the first call (dev -1: the device already in use, else 0; -2 - R:
 * the one in use, else local rank R's modulo the GPUs, backend.c); abi is
 * sizeof(struct sw_backend) as libsw was built,
 * so that a libsw-cuda.so from another build is refused, not called into.
 */
extern "C" __attribute__((visibility("default"))) const sw_backend *
sw_cuda_backend_open(int dev, size_t abi, sw_error *err)
{
	if (abi != sizeof(sw_backend)) {
		fail_(err, SW_EINVAL, "cuda: libsw-cuda.so was built for another libsw (interface of %zu "
		                      "bytes, this libsw's %zu): rebuild both", sizeof(sw_backend), abi);
		return NULL;
	}
	pthread_mutex_lock(&st_.mu);
	int rc = SW_OK;
	if (dev < 0 && st_.ready) /* whichever this process computes on (a cuda: store's) */
		dev = st_.dev;
	else if (dev == -1)
		dev = 0;
	if (!st_.ready)
		rc = init_(dev, err);
	else if (dev != st_.dev)
		rc = fail_(err, SW_EINVAL, "cuda:%d: this process already computes on cuda:%d (one device "
		                           "a process)", dev, st_.dev);
	pthread_mutex_unlock(&st_.mu);
	return rc ? NULL : &cuda_;
}
