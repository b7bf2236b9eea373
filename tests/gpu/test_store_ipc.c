/*
 * test_store_ipc.c - cuda: weight stores across two processes (sw/store.h):
 * the creator's device arena is what another process maps (CUDA IPC), the
 * same memory both ways (what one writes the other reads, no copy), the
 * seqlock and version as for shm:, the refusals (a CPU process, the
 * creator opening its own store), and the lifetime rules (0600, removed,
 * a dead creator's header swept).  Each second process is this program
 * again (posix_spawn of /proc/self/exe with "reader SPEC" or "maker
 * SPEC"): CUDA does not survive fork.
 *
 * "bench" times the hand-off at three sizes (SW_IPC_MB, default "64 1024
 * 4096" MB): the reader's open (map) and its first use, against a copy of
 * the same bytes device to device; tests/gpu/device-check.sh runs it.
 *
 * Where the CUDA backend cannot be had every check is a TAP skip with the
 * reason (make test); SW_GPU_REQUIRED=1 makes that a failure.
 *
 * Run on an H200 (2026-12-04, tests/gpu/device-check.sh): 15 of 15 ok.
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "compute/backend.h"
#include "sw/backend.h"
#include "sw/model.h"
#include "sw/store.h"
#include "tap.h"
#include "tiny_model.h"

extern char **environ;

#define NCHECKS 15

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The value of element i at version v: what the writer of v put there. */
static float val_(size_t i, uint64_t v)
{
	return (float)((i * 7 + v * 1000) % 65521) * 0.5f;
}

static int fill_(const sw_backend *be, float *dev, size_t n, uint64_t v, sw_error *err)
{
	float *h = malloc(n * sizeof *h);
	if (!h)
		return SW_ENOMEM;
	for (size_t i = 0; i < n; i++)
		h[i] = val_(i, v);
	int rc = be->upload(dev, h, n * sizeof *h, err);
	rc = rc ? rc : be->sync(err);
	free(h);
	return rc;
}

/* How many of the n floats at dev are not version v's. */
static size_t wrong_(const sw_backend *be, const float *dev, size_t n, uint64_t v)
{
	sw_error err = { 0 };
	float *h = malloc(n * sizeof *h);
	size_t bad = n;
	if (h && !be->download(h, dev, n * sizeof *h, &err))
		for (size_t i = bad = 0; i < n; i++)
			bad += h[i] != val_(i, v);
	if (err.code)
		printf("# download: %s\n", err.msg);
	free(h);
	return bad;
}

/* Run this program again with two words; its exit status (or 128 + signal). */
static int spawn_(const char *what, const char *spec)
{
	char *argv[] = { "test_store_ipc", (char *)what, (char *)spec, NULL };
	pid_t pid;
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ))
		return 127;
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return 127;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * The second process: open the store writable, check it holds version 1,
 * check the model view is in place, write version 2 over it and publish.
 * Exit 0 when all held, else the number of the first check that failed.
 */
static int reader_(const char *spec)
{
	sw_error err = { 0 };
	const sw_backend *be = sw_backend_get("cuda", &err);
	sw_store *s = be ? sw_store_open(spec, true, &err) : NULL;
	if (!s) {
		printf("# reader: %s\n", err.msg);
		return 2;
	}
	size_t n = sw_store_nfloats(s);
	uint64_t q;
	if (sw_store_version(s) != 1 || sw_store_read_begin(s, &q, &err) || wrong_(be, sw_store_arena(s), n, 1) ||
	    sw_store_read_retry(s, q))
		return 3;
	/* a model over it, in place: its first tensor is the arena's first float */
	sw_model *m = sw_model_view_on(be, sw_store_config(s), sw_store_arena(s), &err);
	if (!m || m->arena != sw_store_arena(s))
		return 4;
	sw_model_free(m);
	/* a CPU process must not take device memory for host memory */
	sw_error e2 = { 0 };
	if (!sw_store_usable_on(s, sw_backend_cpu(), &e2) || !strstr(e2.msg, "computes on cpu"))
		return 5;
	if (sw_store_write_begin(s, &err) || fill_(be, sw_store_arena(s), n, 2, &err) || sw_store_publish(s, 2, &err)) {
		printf("# reader: %s\n", err.msg);
		return 6;
	}
	sw_store_close(s);
	return 0;
}

/* A creator that dies with its store: the header is left for the sweep. */
static int maker_(const char *spec)
{
	sw_error err = { 0 };
	sw_store *s = sw_backend_get("cuda", &err) ? sw_store_create(spec, NULL, 1024, &err) : NULL;
	if (!s || sw_store_publish(s, 0, &err))
		return 2;
	_exit(0); /* no close, no unlink */
}

static void spec_(char *buf, size_t n, const char *prefix)
{
	sw_error e = { 0 };
	char shm[128];
	if (sw_store_name_random(prefix, shm, sizeof shm, &e))
		abort();
	snprintf(buf, n, "cuda:%s", shm + 4);
}

static void test_handoff_(const sw_backend *be)
{
	sw_error err = { 0 };
	sw_model_config cfg = tiny_config("llama", 97, 128, 160, 32, 128);
	char spec[160], path[200];
	spec_(spec, sizeof spec, "swgpu");
	snprintf(path, sizeof path, "/dev/shm/%s", spec + 5);
	sw_store *s = sw_store_create(spec, &cfg, 0, &err);
	ok(s != NULL, "create %s: %s", spec, err.msg);
	if (!s) {
		for (int i = 1; i < NCHECKS - 1; i++)
			ok(0, "(no store)");
		return;
	}
	size_t n = sw_store_nfloats(s);
	struct stat st;
	ok(!stat(path, &st) && (st.st_mode & 0777) == 0600 && st.st_size == 4096,
	   "the header alone in /dev/shm, mode 0600 (%o, %lld bytes)", (unsigned)(st.st_mode & 0777),
	   (long long)st.st_size);
	ok(sw_store_backend(s) == be, "its arena is the CUDA backend's memory");
	ok(!fill_(be, sw_store_arena(s), n, 1, &err) && !sw_store_publish(s, 1, &err), "version 1 written: %s",
	   err.msg);
	sw_error e2 = { 0 };
	ok(!sw_store_open(spec, false, &e2) && strstr(e2.msg, "its creator cannot open it"),
	   "the creator cannot open its own: %s", e2.msg);
	int rc = spawn_("reader", spec);
	is_int(rc, 0, "another process read version 1 in place and wrote version 2 (exit 0)");
	is_int(sw_store_version(s), 2, "the version it published is the creator's");
	ok(wrong_(be, sw_store_arena(s), n, 2) == 0, "the creator's arena holds what the other wrote: the same memory");
	char hex[65];
	ok(!sw_store_digest(s, hex, &err) && strlen(hex) == 64, "digest through a host copy: %s", err.msg);
	char dir[] = "/tmp/sw-ipc-XXXXXX";
	ok(mkdtemp(dir) && !sw_store_save_model(s, dir, SW_DT_F32, &err), "save_model through a host copy: %s",
	   err.msg);
	sw_model *back = sw_model_load_on(sw_backend_cpu(), dir, &err);
	size_t bad = back ? 0 : 1;
	for (size_t i = 0; back && i < back->nparams; i++)
		bad += back->arena[i] != val_(i, 2);
	ok(bad == 0, "the saved model is version 2 (%zu wrong)", bad);
	sw_model_free(back);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		printf("# could not remove %s\n", dir);
	sw_store_close(s);
	ok(!sw_store_unlink(spec, &err) && access(path, F_OK), "closed and removed: nothing left");

	/* a creator killed: its header goes at the next sweep, its memory went with it */
	char dead[160];
	spec_(dead, sizeof dead, "swgpudead");
	is_int(spawn_("maker", dead), 0, "a creator that exits without closing");
	size_t removed = 0;
	snprintf(path, sizeof path, "/dev/shm/%s", dead + 5);
	ok(!sw_store_sweep("swgpudead", &removed, &err) && removed == 1 && access(path, F_OK),
	   "the sweep removed its header (%zu)", removed);
	ok(be->sync(&err) == 0, "the last sync is clean: %s", err.msg);
}

/* The hand-off timed: a reader's open (the map) and its first read, against a device copy of the bytes. */
static int bench_(const sw_backend *be)
{
	const char *env = getenv("SW_IPC_MB");
	char sizes[128];
	snprintf(sizes, sizeof sizes, "%s", env && *env ? env : "64 1024 4096");
	for (char *save, *w = strtok_r(sizes, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		size_t mb = strtoull(w, NULL, 10), n = mb << 18; /* floats */
		sw_error err = { 0 };
		char spec[160];
		spec_(spec, sizeof spec, "swbench");
		sw_store *s = sw_store_create(spec, NULL, n, &err);
		if (!s || sw_store_publish(s, 0, &err)) {
			printf("handoff MB=%zu FAIL %s\n", mb, err.msg);
			sw_store_close(s);
			sw_store_unlink(spec, NULL);
			continue;
		}
		double t0 = now_();
		int rc = spawn_("open", spec);
		double t_proc = now_() - t0;
		/* the copy a packing hand-off makes: the same bytes, device to device */
		float *dst = be->alloc(n * sizeof(float), &err);
		double t1 = now_();
		int crc = dst ? be->copy(dst, sw_store_arena(s), n * sizeof(float), &err) : -1;
		crc = crc ? crc : be->sync(&err);
		double t_copy = now_() - t1;
		be->free(dst);
		printf("handoff MB=%zu reader_process_s=%.4f (exit %d: spawn, start CUDA, open, map, read 1 float) "
		       "device_copy_s=%.4f (%s)\n",
		       mb, t_proc, rc, t_copy, crc ? err.msg : "ok");
		sw_store_close(s);
		sw_store_unlink(spec, NULL);
	}
	return 0;
}

/* bench's reader: the time of its open and first read, on its own stdout line. */
static int open_(const char *spec)
{
	sw_error err = { 0 };
	const sw_backend *be = sw_backend_get("cuda", &err);
	double t0 = now_();
	sw_store *s = be ? sw_store_open(spec, false, &err) : NULL;
	float x;
	int rc = s ? be->download(&x, sw_store_arena(s), sizeof x, &err) : 1;
	printf("  reader: open+map+first read %.6f s (%s)\n", now_() - t0, rc ? err.msg : "ok");
	sw_store_close(s);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "reader"))
		return reader_(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "maker"))
		return maker_(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "open"))
		return open_(argv[2]);
	sw_error err = { 0 };
	const sw_backend *be = sw_backend_get(getenv("SW_GPU_DEVICE") ? getenv("SW_GPU_DEVICE") : "cuda", &err);
	if (!be && argc == 2 && !strcmp(argv[1], "bench")) {
		printf("handoff FAIL: no CUDA backend here: %s\n", err.msg);
		return 1;
	}
	if (!be) {
		if (getenv("SW_GPU_REQUIRED") && atoi(getenv("SW_GPU_REQUIRED"))) {
			ok(0, "the GPU backend: %s", err.msg);
			return tap_done();
		}
		for (int i = 0; i < NCHECKS; i++)
			printf("ok %d - cuda: store hand-off # skip no CUDA backend here: %s\n", ++tap_n_, err.msg);
		return tap_done();
	}
	if (argc == 2 && !strcmp(argv[1], "bench"))
		return bench_(be);
	test_handoff_(be);
	return tap_done();
}
