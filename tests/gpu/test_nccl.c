/*
 * test_nccl.c - gradients summed on the GPUs with NCCL (dist/comm.c's
 * sw_dist_sum_device over the CUDA backend's coll_* entries), the way
 * sw-train sums them under mpirun --device cuda: each rank on its own GPU
 * (a plain "cuda" is the rank's local GPU), rank 0 makes NCCL's id and the
 * communicator broadcasts it.  Two ranks: the sum must be the bits of the
 * host's rank-order sum (a + b is b + a), the same on both ranks, for a
 * small vector, an odd-sized one and one of 64 Mi floats, and again after
 * the ranks have joined.
 *
 * Started by hand (make test) it needs two GPUs, MPI and mpirun, and
 * starts itself under `mpirun -np 2`; without them every check is a TAP
 * skip with the reason (one GPU: "needs 2 GPUs").  SW_GPU_REQUIRED=1 makes
 * a missing backend a failure (one GPU stays a skip: the H200 lent to
 * sessions is one).
 *
 * NOT YET RUN ACROSS TWO GPUS: the only GPU machine it met (an H200,
 * 2026-12-04) had one, where every check is the skip above.
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "compute/backend.h"
#include "dist/dist_internal.h"
#include "sw/backend.h"
#include "sw/dist.h"
#include "tap.h"

extern char **environ;

#define NCHECKS 5

static float val_(size_t i, int rank)
{
	return (float)((i * 2654435761u + (size_t)rank * 40503u) % 100003) * 1e-3f - 50.0f;
}

/* Rank r sums n floats; 0 when every rank got the host's rank-order bits. */
static size_t sum_check_(sw_comm *c, const sw_backend *be, size_t n, sw_error *err)
{
	int size = sw_comm_size(c), me = sw_comm_rank(c);
	float *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want), *x = be->alloc(n * sizeof *h, err);
	size_t bad = n;
	if (h && want && x) {
		for (size_t i = 0; i < n; i++) {
			h[i] = val_(i, me);
			float s = val_(i, 0);
			for (int r = 1; r < size; r++)
				s += val_(i, r);
			want[i] = s;
		}
		if (!be->upload(x, h, n * sizeof *h, err) && !sw_dist_sum_device(c, be, x, h, n, err) &&
		    !be->download(h, x, n * sizeof *h, err))
			for (size_t i = bad = 0; i < n; i++)
				bad += memcmp(&h[i], &want[i], sizeof *h) != 0;
	}
	be->free(x);
	free(h), free(want);
	return bad;
}

/* One rank under mpirun: rank 0 prints the TAP. */
static int rank_(void)
{
	sw_error err = { 0 };
	sw_comm *c = NULL;
	if (sw_comm_open(&c, &err) || !c) {
		printf("not ok 1 - join the ranks: %s\n1..1\n", c ? err.msg : "not started by a launcher");
		return 1;
	}
	const sw_backend *be = sw_backend_get("cuda", &err);
	int rc = sw_comm_agree(c, be ? 0 : SW_ENOENT, &err);
	int me = sw_comm_rank(c);
	if (me == 0)
		ok(!rc, "every rank has its GPU: %s", rc ? err.msg : be->name);
	static const size_t ns[] = { 1000, 1000003, (size_t)64 << 20, 4097 };
	for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
		size_t bad = rc ? ns[k] : sum_check_(c, be, ns[k], &err);
		double b = (double)bad;
		sw_error e2 = { 0 };
		sw_comm_allreduce_max_f64(c, &b, 1, &e2);
		if (me == 0)
			ok(b == 0, "%zu floats summed by NCCL = the rank-order sum on every rank (%.0f wrong%s%s)", ns[k], b,
			   err.code ? ": " : "", err.code ? err.msg : "");
	}
	sw_comm_close(c);
	return me == 0 ? tap_done() : 0;
}

int main(void)
{
	if (sw_comm_launched())
		return rank_();
	sw_error err = { 0 };
	const char *why = NULL;
	char msg[600], self[4096];
	/* cuda:1 exists: two GPUs at least (this process then holds a context there, harmlessly) */
	const sw_backend *be = sw_backend_get("cuda:1", &err);
	if (!be && strstr(err.msg, "this machine has 1 CUDA device")) {
		snprintf(msg, sizeof msg, "needs 2 GPUs: %s", err.msg);
		why = msg;
	} else if (!be) {
		if (getenv("SW_GPU_REQUIRED") && atoi(getenv("SW_GPU_REQUIRED"))) {
			ok(0, "the GPU backend: %s", err.msg);
			return tap_done();
		}
		snprintf(msg, sizeof msg, "no CUDA backend here: %s", err.msg);
		why = msg;
	} else if (!sw_comm_have_mpi()) {
		why = "libsw was built without MPI";
	} else if (system("command -v mpirun >/dev/null 2>&1")) {
		why = "no mpirun";
	}
	ssize_t n = why ? 0 : readlink("/proc/self/exe", self, sizeof self - 1);
	if (!why && n <= 0)
		why = "cannot find this program (/proc/self/exe)";
	if (why) {
		for (int i = 0; i < NCHECKS; i++)
			printf("ok %d - NCCL sums across 2 GPUs # skip %s\n", ++tap_n_, why);
		return tap_done();
	}
	self[n] = 0;
	fflush(stdout);
	/* as root Open MPI wants these; the ranks print rank 0's TAP on this stdout */
	setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
	setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
	char *argv[] = { "mpirun", "-np", "2", "--bind-to", "none", self, NULL };
	pid_t pid;
	int st;
	if (posix_spawnp(&pid, "mpirun", NULL, NULL, argv, environ) || waitpid(pid, &st, 0) != pid) {
		printf("not ok 1 - mpirun -np 2 %s could not be started\n1..1\n", self);
		return 1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
