/*
 * sw/backend.h - the devices a model can live and compute on.
 *
 * A backend owns device memory and runs the compute on it; the engine, the
 * decoder and the optimiser use the backend of their model.  "cpu" is the
 * reference (its device memory is host memory, so a model on it is read and
 * written as before); "guard" runs the CPU's arithmetic, bit for bit, over
 * memory the host cannot touch (any direct access faults), which proves
 * that nothing bypasses the backend.  "cuda" (or "cuda:N", the Nth GPU) is
 * the CUDA backend, a shared object (libsw-cuda.so) loaded on the first
 * request from the program's ../lib, then the installed lib directory; one
 * GPU a process.  Under an MPI launcher a plain "cuda" is the GPU of the
 * rank's local index, modulo the GPUs (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
 * SLURM_LOCALID), so that data-parallel ranks take one GPU each.  It has
 * run on one H200 (tests/gpu/device-check.sh); never on several GPUs.
 *
 * Backends are process-wide and never freed: sw_backend_get() returns the
 * same object for a name every time.  Models are put on one with
 * sw_model_new_on(), sw_model_view_on() and sw_model_load_on() (sw/model.h).
 */
#ifndef SW_BACKEND_PUBLIC_H
#define SW_BACKEND_PUBLIC_H

#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_backend sw_backend;

/*
 * The backend of that name: "cpu", "guard", "cuda" or "cuda:N"; NULL or ""
 * is "cpu".  An unknown name is NULL with SW_EINVAL, the message listing the
 * known ones; a CUDA backend that cannot be had (not built, a library, the
 * driver or the GPU missing) is NULL with SW_ENOENT, the message naming
 * what is missing.
 */
const sw_backend *sw_backend_get(const char *name, sw_error *err);
/*
 * Give the memory this process has freed back to the device, so that the
 * next process on the same GPU can have it (CUDA's stream-ordered pool keeps
 * it otherwise); a no-op on the CPU backends and for NULL.  sw-rollout calls
 * it once its decoder (the KV cache) is freed and before it closes its
 * output, so a trainer downstream of it in sw-run starts with that memory.
 */
int sw_backend_trim(const sw_backend *be, sw_error *err);
/*
 * The precision of be's matrix products: "f32" (the default; NULL or "" the
 * same) or "bf16": operands rounded to bf16 (to nearest even), products
 * accumulated and written in f32; the weights, gradients and optimiser
 * state stay f32 (PyTorch's torch.set_float32_matmul_precision("medium")).
 * On the CPU backends (cpu and guard, which share it: the setting is the
 * process's) oneDNN's bf16 dot products; on cuda cuBLAS's bf16 tensor-core
 * products (CUBLAS_COMPUTE_32F_FAST_16BF, compute capability 8.0 or newer;
 * written, never yet run on a GPU).  On a CPU without bf16 dot products, an
 * older GPU, another backend or for an unknown name it is SW_EINVAL, the
 * message saying what is missing, and nothing changes.  Not while ops run.
 */
int sw_backend_matmul(const sw_backend *be, const char *prec, sw_error *err);
/* Its name ("cpu", "guard", "cuda", "cuda:1"); "cpu" for NULL. */
const char *sw_backend_name(const sw_backend *be);

#pragma GCC visibility pop

#endif
