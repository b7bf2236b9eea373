/*
 * backend.c - the backends by name (sw/backend.h): the one place a program's
 * --device word becomes a backend.  "cuda" and "cuda:N" load the CUDA
 * backend, a shared object built apart (compute/cuda/, libsw-cuda.so), on
 * the first request: libsw links no CUDA library, so the programs start on
 * machines without one and fail only when asked for a GPU they cannot have.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/internal.h"
#include "compute/backend.h"

/* Where `make install` puts libraries (the Makefile sets it from PREFIX). */
#ifndef SW_LIBDIR
#define SW_LIBDIR "/usr/local/lib"
#endif
#define CUDA_SO "libsw-cuda.so"

/* libsw-cuda.so's one entry (compute/cuda/backend_cuda.cu). */
typedef const sw_backend *(*cuda_open_fn)(int dev, size_t abi, sw_error *err);

/* The directory above the running program's: its build or install tree
 * (build/bin/sw-train -> build). */
static int exe_top_(char *dir, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", dir, size - 1);
	if (n <= 0)
		return -1;
	dir[n] = 0;
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(dir, '/');
		if (!slash)
			return -1;
		*slash = 0;
	}
	return 0;
}

/*
 * The rank's index among the ranks of its machine under an MPI launcher
 * (Open MPI, MPICH/Hydra, Slurm), else -1.  A plain "cuda" is then the GPU
 * of that index modulo the machine's GPUs, so that the ranks of a
 * data-parallel job take one GPU each, as NCCL wants.
 */
static int local_rank_(void)
{
	static const char *vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID" };
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
		const char *v = getenv(vars[i]);
		char *end;
		long r = v && *v ? strtol(v, &end, 10) : -1;
		if (v && *v && !*end && r >= 0 && r <= 255)
			return (int)r;
	}
	return -1;
}

/* The device number libsw-cuda.so's entry takes: N >= 0 that GPU; -1 the
 * one this process computes on already, else 0; -2 - R the one in use,
 * else local rank R's (modulo the GPUs). */
static const sw_backend *cuda_(const char *name, int dev, sw_error *err)
{
	int r = local_rank_();
	if (!dev && !name[4] && r >= 0)
		dev = -2 - r;
	if (name[4] == ':') {
		char *end;
		long v = strtol(name + 5, &end, 10);
		if (name[5] < '0' || name[5] > '9' || *end || v > 255) {
			sw_fail(err, SW_EINVAL, "unknown device '%s' (known: cpu, guard, cuda, cuda:N)", name);
			return NULL;
		}
		dev = (int)v;
	}
	/* Next to the program (../lib), then the installed one. */
	char top[PATH_MAX], path[2][PATH_MAX + 32];
	int np = 0;
	if (!exe_top_(top, sizeof top))
		snprintf(path[np++], sizeof path[0], "%s/lib/%s", top, CUDA_SO);
	snprintf(path[np++], sizeof path[0], "%s/%s", SW_LIBDIR, CUDA_SO);
	for (int i = 0; i < np; i++) {
		if (access(path[i], F_OK))
			continue;
		void *h = dlopen(path[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			/* dlerror names the library that is missing (libcublas.so.13, ...). */
			sw_fail(err, SW_ENOENT, "device '%s': cannot load %s: %s", name, path[i], dlerror());
			return NULL;
		}
		cuda_open_fn open = (cuda_open_fn)(uintptr_t)dlsym(h, "sw_cuda_backend_open");
		if (!open) {
			sw_fail(err, SW_ENOENT, "device '%s': %s has no sw_cuda_backend_open", name, path[i]);
			return NULL;
		}
		/* The handle stays open: the backend is process-wide (backend.h). */
		return open(dev, sizeof(sw_backend), err);
	}
	sw_fail(err, SW_ENOENT, "device '%s': built without CUDA (no %s%s%s)", name, path[0],
	        np > 1 ? ", no " : "", np > 1 ? path[1] : "");
	return NULL;
}

/* be, or its profiling wrapper where $SW_PROFILE names a file. */
static const sw_backend *profiled_(const sw_backend *be, sw_error *err)
{
	const char *path = getenv("SW_PROFILE");
	return be && path && *path ? sw_backend_prof(be, path, err) : be;
}

const sw_backend *sw_backend_get(const char *name, sw_error *err)
{
	/* Both compute with the CPU's ops: a bad $SW_GEMM fails them here. */
	if (!name || !*name || !strcmp(name, "cpu"))
		return sw_backend_cpu()->sync(err) ? NULL : profiled_(sw_backend_cpu(), err);
	if (!strcmp(name, "guard"))
		return sw_backend_cpu()->sync(err) ? NULL : profiled_(sw_backend_guard(), err);
	if (!strncmp(name, "cuda", 4) && (!name[4] || name[4] == ':'))
		return profiled_(cuda_(name, 0, err), err);
	sw_fail(err, SW_EINVAL, "unknown device '%s' (known: cpu, guard, cuda, cuda:N)", name);
	return NULL;
}

const sw_backend *sw_backend_cuda_current(sw_error *err)
{
	return profiled_(cuda_("cuda", -1, err), err);
}

int sw_backend_trim(const sw_backend *be, sw_error *err)
{
	return be && be->trim ? be->trim(err) : SW_OK;
}

int sw_backend_matmul(const sw_backend *be, const char *prec, sw_error *err)
{
	if (!be || be == sw_backend_cpu() || be == sw_backend_guard())
		return sw_backend_cpu_matmul(prec, err);
	if (prec && *prec && strcmp(prec, "f32") && strcmp(prec, "bf16"))
		return sw_fail(err, SW_EINVAL, "unknown matmul precision '%s' (known: f32, bf16)", prec);
	if (be->matmul)
		return be->matmul(prec && *prec ? prec : "f32", err);
	if (prec && !strcmp(prec, "bf16"))
		return sw_fail(err, SW_EINVAL, "bf16 matmul is not written for the '%s' backend", be->name);
	return SW_OK;
}

const char *sw_backend_name(const sw_backend *be)
{
	return be ? be->name : "cpu";
}

int sw_act_code(const char *name)
{
	static const struct { const char *name; int code; } map[] = {
		{ "gelu", SW_ACT_GELU }, { "gelu_pytorch_tanh", SW_ACT_GELU_TANH },
		{ "quick_gelu", SW_ACT_QUICK_GELU }, { "silu", SW_ACT_SILU },
	};
	for (size_t i = 0; name && i < sizeof map / sizeof *map; i++)
		if (!strcmp(name, map[i].name))
			return map[i].code;
	return -1;
}
