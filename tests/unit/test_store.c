/*
 * test_store.c - shm weight stores: names, modes, the header checks, the
 * seqlock under a writer in another process, a writer that dies inside its
 * update, the sweep of stores whose creator is gone, and mappings that come
 * with their page tables filled.  Every store made
 * here has a random name and is removed before the test ends.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "tap.h"

static sw_model_config small_cfg_(void)
{
	sw_model_config c = { 0 };
	strcpy(c.model_type, "llama");
	c.vocab_size = 256;
	c.hidden_size = 64;
	c.intermediate_size = 128;
	c.num_hidden_layers = 2;
	c.num_attention_heads = 4;
	c.num_key_value_heads = 2;
	c.head_dim = 16;
	c.max_position_embeddings = 128;
	c.rms_norm_eps = 1e-5f;
	c.rope_theta = 10000.0f;
	c.bos_token_id = -1;
	return c;
}

/* A fresh random spec "shm:swtest-<hex>". */
static void spec_(char *buf, size_t n)
{
	sw_error e = { 0 };
	if (sw_store_name_random("swtest", buf, n, &e))
		abort();
}

static void test_names_(void)
{
	static const struct { const char *spec, *want; } bad[] = {
		{ "", "no store given" },
		{ "weights", "expected shm:NAME or cuda:NAME" },
		{ "shm:", "a name is 1 to" },
		{ "shm:a/b", "a name is 1 to" },
		{ "shm:.hidden", "a name is 1 to" },
		{ "nfs:x", "unknown kind 'nfs'" },
		{ "cuda:", "a name is 1 to" },
		/* a refused spec is shown escaped: one line, whatever it holds */
		{ "shm:a\nb", "store 'shm:a\\x0ab': a name is 1 to" },
		{ "n\x1b[2J:x", "store 'n\\x1b[2J:x': unknown kind 'n\\x1b[2J'" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		sw_error e = { 0 };
		sw_store *s = sw_store_open(bad[i].spec, false, &e);
		ok(!s && e.code == SW_EINVAL && strstr(e.msg, bad[i].want), "open bad spec %zu refused: %s", i, e.msg);
		sw_error e2 = { 0 };
		ok(!sw_store_create(bad[i].spec, NULL, 16, &e2) && e2.code == SW_EINVAL && !strcmp(e2.msg, e.msg),
		   "create bad spec %zu refused alike", i);
	}
	char a[128], b[128], small[20];
	sw_error e = { 0 };
	is_int(sw_store_name_random("sw", a, sizeof a, &e), 0, "a random name");
	sw_store_name_random("sw", b, sizeof b, &e);
	ok(!strncmp(a, "shm:sw-", 7) && strlen(a) == 7 + 32, "'%s' is shm:sw- and 32 hex digits", a);
	ok(strcmp(a, b), "two random names differ");
	is_int(sw_store_name_random("sw", small, sizeof small, &e), SW_ERANGE, "a short buffer is SW_ERANGE");
	is_int(sw_store_name_random("a/b", a, sizeof a, &e), SW_EINVAL, "a bad prefix is SW_EINVAL");
}

/*
 * cuda:NAME without a GPU: create and open fail with SW_ENOENT naming what
 * is missing (libsw-cuda.so, the driver), and leave nothing in /dev/shm.
 * With a GPU, tests/gpu/test_store_ipc.c checks the store itself.
 */
static void test_cuda_without_gpu_(void)
{
	char spec[128], cspec[140], path[160];
	spec_(spec, sizeof spec);
	snprintf(cspec, sizeof cspec, "cuda:%s", spec + 4);
	snprintf(path, sizeof path, "/dev/shm/%s", spec + 4);
	sw_error e = { 0 };
	sw_store *s = sw_store_create(cspec, NULL, 64, &e);
	if (s || e.code != SW_ENOENT || strstr(e.msg, "no usable GPU") || strstr(e.msg, "no CUDA device on")) {
		if (s) {
			sw_store_close(s);
			sw_store_unlink(cspec, NULL);
		}
		for (int i = 0; i < 4; i++)
			printf("ok %d - cuda: without a GPU # skip this machine has one (tests/gpu checks cuda: stores)\n",
			       ++tap_n_);
		return;
	}
	char want[300];
	snprintf(want, sizeof want, "store '%s': ", cspec);
	ok(!strncmp(e.msg, want, strlen(want)) && (strstr(e.msg, "no NVIDIA driver") || strstr(e.msg, "built without CUDA")),
	   "create %s without a GPU: %s", cspec, e.msg);
	ok(access(path, F_OK) != 0, "nothing left in /dev/shm");
	sw_error e2 = { 0 };
	ok(!sw_store_open(cspec, true, &e2) && e2.code == SW_ENOENT && !strcmp(e2.msg, e.msg),
	   "open: the same message: %s", e2.msg);
	/* the GPU is asked for before the name is looked up: a shm: store of that name changes nothing */
	sw_store *w = sw_store_create(spec, NULL, 64, &e2);
	sw_error e3 = { 0 };
	ok(w && !sw_store_open(cspec, false, &e3) && e3.code == SW_ENOENT, "open beside a shm: store: %s", e3.msg);
	sw_store_close(w);
	sw_store_unlink(spec, NULL);
}

static void test_create_open_(void)
{
	char spec[128];
	spec_(spec, sizeof spec);
	sw_model_config cfg = small_cfg_();
	size_t np = sw_model_config_nparams(&cfg);
	sw_error e = { 0 };
	sw_store *w = sw_store_create(spec, &cfg, 0, &e);
	ok(w != NULL, "create %s: %s", spec, e.msg);
	if (!w)
		return;
	struct stat st;
	char path[256];
	snprintf(path, sizeof path, "/dev/shm/%s", spec + 4);
	ok(!stat(path, &st) && (st.st_mode & 0777) == 0600, "created with mode 0600 (%o)", st.st_mode & 0777);
	is_int(sw_store_nfloats(w), np, "a model store holds exactly the model's parameters");
	ok(((uintptr_t)sw_store_arena(w) & 4095) == 0, "the arena is page-aligned");
	ok(!memcmp(sw_store_config(w), &cfg, sizeof cfg), "the config is kept");
	is_int(sw_store_creator(w), getpid(), "the creator is recorded");

	sw_error e2 = { 0 };
	ok(!sw_store_create(spec, &cfg, 0, &e2) && e2.sys_errno == EEXIST, "a second create of the name fails: %s",
	   e2.msg);
	ok(!sw_store_create(spec + 0, &cfg, np - 1, &e2) && e2.code != 0, "too small an arena for the model refused");

	/* a model viewed over the arena, in place */
	sw_model *m = sw_model_view(sw_store_config(w), sw_store_arena(w), &e);
	ok(m && m->arena == sw_store_arena(w) && m->nparams == np, "sw_model_view works over the arena in place");
	if (m) {
		sw_model_init_random(m, 7, 0.02f);
		sw_model_free(m);
	}
	is_int(sw_store_write_begin(w, &e), 0, "write_begin inside the creation update is a no-op");
	is_int(sw_store_publish(w, 0, &e), 0, "the creator's first publish may be version 0");
	is_int(sw_store_publish(w, 1, &e), SW_EINVAL, "publish without an open update refused");

	e = (sw_error){ 0 };
	sw_store *r = sw_store_open(spec, false, &e);
	ok(r != NULL, "open read-only: %s", e.msg);
	if (r) {
		uint64_t q;
		is_int(sw_store_read_begin(r, &q, &e), 0, "read_begin after publish");
		ok(!memcmp(sw_store_arena(r), sw_store_arena(w), np * sizeof(float)), "the reader sees the weights");
		ok(!sw_store_read_retry(r, q), "no retry without a write");
		is_int(sw_store_write_begin(r, &e), SW_EINVAL, "a read-only handle cannot write");
		ok(sw_store_config(r) && sw_store_config(r)->hidden_size == 64, "the reader has the config");
	}
	is_int(sw_store_write_begin(w, &e), 0, "write_begin");
	is_int(sw_store_write_begin(w, &e), SW_EINVAL, "a second write_begin on the handle refused");
	sw_store_arena(w)[0] = 42.0f;
	is_int(sw_store_publish(w, 0, &e), SW_EINVAL, "a version that does not go forward is refused");
	is_int(sw_store_publish(w, 5, &e), 0, "publish 5");
	{
		char h1[65], h2[65];
		sw_digest_mem(sw_store_arena(w), np * sizeof(float), h2);
		ok(!sw_store_digest(w, h1, &e) && !strcmp(h1, h2), "the store's digest is its arena's");
	}
	if (r) {
		is_int(sw_store_version(r), 5, "the reader sees version 5");
		ok(sw_store_arena(r)[0] == 42.0f, "and the new weight, in place");
	}
	sw_store_close(r);
	sw_store_close(w);
	sw_store_close(NULL);
	is_int(sw_store_unlink(spec, &e), 0, "unlink");
	sw_error e3 = { 0 };
	ok(!sw_store_open(spec, false, &e3) && e3.sys_errno == ENOENT, "gone after unlink: %s", e3.msg);
	is_int(sw_store_unlink(spec, &e3), SW_EIO, "a second unlink fails");

	/* a store with no model: optimiser state */
	spec_(spec, sizeof spec);
	char opt[160];
	snprintf(opt, sizeof opt, "%s.opt", spec);
	w = sw_store_create(opt, NULL, 1000, &e);
	ok(w && !sw_store_config(w) && sw_store_nfloats(w) == 1000, "a store of 1000 plain floats (%s)", opt);
	sw_store_close(w);
	sw_store_unlink(opt, &e);
}

/* Rss, in KiB, of the mapping of this process that holds p (-1: none). */
static long rss_kb_of_(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[512];
	long rss = -1;
	int in = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
			break;
	}
	fclose(f);
	return rss;
}

/* A stage's first touch of each page of the weights would be a fault (about
 * 1 us here, bench/RESULTS.md "populate"): the store's mapping comes with
 * its page tables filled, on create and on open, read-only or not, before
 * any byte is touched. */
static void test_populated_(void)
{
	char spec[128];
	spec_(spec, sizeof spec);
	size_t n = 1u << 20; /* 4 MiB of floats */
	sw_error e = { 0 };
	sw_store *w = sw_store_create(spec, NULL, n, &e);
	ok(w != NULL, "create a 4 MiB store: %s", e.msg);
	if (!w)
		return;
	long kb = (long)(n * sizeof(float) / 1024);
	long c = rss_kb_of_(sw_store_arena(w));
	ok(c >= kb, "the creator's mapping is resident untouched: %ld of %ld KiB", c, kb);
	sw_store *r = sw_store_open(spec, false, &e), *rw = sw_store_open(spec, true, &e);
	ok(r && rw, "opened read-only and writable: %s", e.msg);
	if (r && rw) {
		long a = rss_kb_of_(sw_store_arena(r)), b = rss_kb_of_(sw_store_arena(rw));
		ok(a >= kb, "a reader's mapping is resident untouched: %ld of %ld KiB", a, kb);
		ok(b >= kb, "a writer's mapping is resident untouched: %ld of %ld KiB", b, kb);
	}
	sw_store_close(r);
	sw_store_close(rw);
	sw_store_close(w);
	is_int(sw_store_unlink(spec, &e), 0, "unlink");
}

/* What /dev/shm has room for, said before stores are made, and a store it has no room for. */
static void test_room_(void)
{
	sw_error e = { 0 };
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	ok(sw_store_shm_bytes(0) == pg && sw_store_shm_bytes(1u << 20) == pg + (4u << 20),
	   "a store's bytes: a page of header, its floats: %zu, %zu", sw_store_shm_bytes(0), sw_store_shm_bytes(1u << 20));
	is_int(sw_store_shm_room(0, "nothing needs", &e), 0, "room for nothing");
	struct statvfs v;
	if (statvfs("/dev/shm", &v) || !v.f_blocks || (double)v.f_blocks * (double)v.f_frsize >= 0x1p45) {
		for (int i = 0; i < 3; i++)
			ok(1, "# skip /dev/shm has no size below 32 TiB to be out of");
		return;
	}
	ok(sw_store_shm_room((size_t)1 << 45, "the test needs", &e) == SW_EIO && e.sys_errno == ENOSPC &&
	       strstr(e.msg, "the test needs 35184.37 GB of shared memory, and /dev/shm has ") &&
	       strstr(e.msg, "(a container's size is set by --shm-size)"),
	   "no room for 32 TiB: %s", e.msg);
	/* fallocate refuses more than the file system's size at once (nothing is reserved first) */
	char spec[128];
	spec_(spec, sizeof spec);
	sw_store *w = sw_store_create(spec, NULL, (size_t)1 << 43, &e);
	ok(!w && e.code == SW_EIO && e.sys_errno == ENOSPC && strstr(e.msg, "cannot reserve 35184.37 GB of shared memory: /dev/shm has "),
	   "a store /dev/shm has no room for says what it has: %s", e.msg);
	ok(sw_store_unlink(spec, &e) == SW_EIO && e.sys_errno == ENOENT, "and is not left behind");
}

/* A shm object with these bytes, made 0600 (or mode). */
static void raw_(const char *spec, const void *p, size_t n, mode_t mode)
{
	char path[256];
	snprintf(path, sizeof path, "/%s", spec + 4);
	int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || fchmod(fd, mode) || write(fd, p, n) != (ssize_t)n)
		abort();
	close(fd);
}

static void test_refused_(void)
{
	char spec[128], buf[8192];
	sw_error e = { 0 };
	memset(buf, 'x', sizeof buf);
	spec_(spec, sizeof spec);
	raw_(spec, buf, sizeof buf, 0600);
	ok(!sw_store_open(spec, false, &e) && e.code == SW_EFORMAT && strstr(e.msg, "bad magic"), "bad magic: %s",
	   e.msg);
	sw_store_unlink(spec, &e);

	spec_(spec, sizeof spec);
	raw_(spec, buf, 100, 0600);
	ok(!sw_store_open(spec, false, &e) && strstr(e.msg, "shorter than a header"), "too short: %s", e.msg);
	sw_store_unlink(spec, &e);

	/* a real store whose layout field is changed: another build's */
	spec_(spec, sizeof spec);
	sw_store *w = sw_store_create(spec, NULL, 64, &e);
	sw_store_publish(w, 0, &e);
	char path[256];
	snprintf(path, sizeof path, "/%s", spec + 4);
	int fd = shm_open(path, O_RDWR, 0);
	uint32_t layout = 99;
	ok(fd >= 0 && pwrite(fd, &layout, 4, 8) == 4, "poke the layout");
	close(fd);
	ok(!sw_store_open(spec, false, &e) && e.code == SW_EFORMAT && strstr(e.msg, "layout 99"),
	   "another layout refused: %s", e.msg);
	/* a kind this build does not know, and a cuda: store's header opened as shm: */
	layout = 2;
	uint32_t kind = 7;
	fd = shm_open(path, O_RDWR, 0);
	ok(fd >= 0 && pwrite(fd, &layout, 4, 8) == 4 && pwrite(fd, &kind, 4, 84) == 4, "poke the kind");
	ok(!sw_store_open(spec, false, &e) && e.code == SW_EFORMAT && strstr(e.msg, "unknown kind 7"),
	   "an unknown kind refused: %s", e.msg);
	kind = 1;
	ok(pwrite(fd, &kind, 4, 84) == 4, "poke the cuda: kind");
	close(fd);
	char want[300];
	snprintf(want, sizeof want, "it is a cuda: (device memory) store: open it as cuda:%s", spec + 4);
	ok(!sw_store_open(spec, false, &e) && e.code == SW_EFORMAT && strstr(e.msg, want),
	   "a cuda: header opened as shm: refused: %s", e.msg);
	kind = 0;
	fd = shm_open(path, O_RDWR, 0);
	ok(fd >= 0 && pwrite(fd, &kind, 4, 84) == 4, "poke the shm: kind back");
	close(fd);
	/* and a size the object does not have */
	uint64_t huge = 1ull << 40;
	fd = shm_open(path, O_RDWR, 0);
	ok(fd >= 0 && pwrite(fd, &layout, 4, 8) == 4 && pwrite(fd, &huge, 8, 24) == 8, "poke the size");
	ok(!sw_store_open(spec, false, &e) && strstr(e.msg, "header says"), "a size beyond the object: %s", e.msg);
	/* open to others */
	fchmod(fd, 0644);
	close(fd);
	ok(!sw_store_open(spec, false, &e) && strstr(e.msg, "mode 0644"), "mode 0644 refused: %s", e.msg);
	sw_store_close(w);
	sw_store_unlink(spec, &e);
}

/*
 * The seqlock: a writer process fills the whole arena with v, version after
 * version, one float at a time; the reader must never accept a read that
 * mixes two versions.
 */
static void test_seqlock_(void)
{
	enum { N = 1 << 16, VERSIONS = 400 };
	char spec[128];
	sw_error e = { 0 };
	spec_(spec, sizeof spec);
	sw_store *w = sw_store_create(spec, NULL, N, &e);
	if (!w) {
		ok(0, "create: %s", e.msg);
		return;
	}
	sw_store_publish(w, 0, &e);
	pid_t pid = fork();
	if (pid == 0) {
		sw_store *cw = sw_store_open(spec, true, &e);
		if (!cw)
			_exit(2);
		volatile float *a = sw_store_arena(cw);
		for (uint64_t v = 1; v <= VERSIONS; v++) {
			if (sw_store_write_begin(cw, &e))
				_exit(3);
			for (size_t i = 0; i < N; i++)
				a[i] = (float)v;
			if (sw_store_publish(cw, v, &e))
				_exit(4);
		}
		_exit(0);
	}
	sw_store *r = sw_store_open(spec, false, &e);
	const volatile float *a = sw_store_arena(r);
	uint64_t accepted = 0, retried = 0, mixed = 0, backwards = 0, last = 0;
	for (;;) {
		uint64_t q;
		if (sw_store_read_begin(r, &q, &e))
			break;
		uint64_t ver = sw_store_version(r);
		float first = a[0];
		int same = 1;
		for (size_t i = 1; i < N; i++)
			same &= a[i] == first;
		if (sw_store_read_retry(r, q)) {
			retried++;
			continue;
		}
		accepted++;
		mixed += !same;
		backwards += (uint64_t)first < last || (uint64_t)first != ver;
		last = (uint64_t)first;
		if (last == VERSIONS)
			break;
	}
	int st;
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the writer process published %d versions", VERSIONS);
	ok(accepted > 0 && last == VERSIONS, "the reader saw the last version (%llu reads accepted)",
	   (unsigned long long)accepted);
	is_int(mixed, 0, "no accepted read mixed two versions (%llu reads retried)", (unsigned long long)retried);
	is_int(backwards, 0, "accepted reads match their version and never go back");
	sw_store_close(r);
	sw_store_close(w);
	sw_store_unlink(spec, &e);
}

/* A second writer is refused while the first is alive, and takes over when it has died mid-update. */
static void test_dead_writer_(void)
{
	char spec[128];
	sw_error e = { 0 };
	spec_(spec, sizeof spec);
	sw_store *w = sw_store_create(spec, NULL, 1024, &e);
	sw_store_publish(w, 3, &e);
	sw_store_close(w);
	int pfd[2];
	if (pipe(pfd))
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		sw_store *cw = sw_store_open(spec, true, &e);
		if (!cw || sw_store_write_begin(cw, &e))
			_exit(2);
		sw_store_arena(cw)[0] = -1.0f;
		if (write(pfd[1], "x", 1) != 1)
			_exit(3);
		pause(); /* dies inside its update */
		_exit(0);
	}
	char c;
	ok(read(pfd[0], &c, 1) == 1, "the child is inside its update");
	sw_store *me = sw_store_open(spec, true, &e);
	sw_error e2 = { 0 };
	ok(me && sw_store_write_begin(me, &e2) == SW_EIO && e2.sys_errno == EBUSY, "a live writer blocks a second: %s",
	   e2.msg);
	kill(pid, SIGKILL);
	/* not reaped yet: a zombie counts as dead */
	struct timespec ts = { 0, 50000000 };
	nanosleep(&ts, NULL);
	uint64_t q;
	sw_error e3 = { 0 };
	ok(sw_store_read_begin(me, &q, &e3) == SW_EFORMAT && strstr(e3.msg, "died while updating"),
	   "a reader is told the writer died: %s", e3.msg);
	waitpid(pid, NULL, 0);
	is_int(sw_store_write_begin(me, &e), 0, "a new writer takes the store over");
	sw_store_arena(me)[0] = 1.0f;
	is_int(sw_store_publish(me, 4, &e), 0, "and publishes");
	is_int(sw_store_read_begin(me, &q, &e), 0, "readers go on");
	is_int(sw_store_version(me), 4, "at the new version");
	sw_store_close(me);
	sw_store_unlink(spec, &e);
	close(pfd[0]);
	close(pfd[1]);
}

static void test_sweep_(void)
{
	char pre[64], dead[128], live[128], junk[128];
	sw_error e = { 0 };
	/* a prefix of our own so other runs' stores are never touched */
	snprintf(pre, sizeof pre, "swsweep%ld", (long)getpid());
	sw_store_name_random(pre, dead, sizeof dead, &e);
	sw_store_name_random(pre, live, sizeof live, &e);
	sw_store_name_random(pre, junk, sizeof junk, &e);
	pid_t pid = fork();
	if (pid == 0) {
		sw_store *s = sw_store_create(dead, NULL, 64, &e);
		_exit(s ? 0 : 1); /* killed runs leave their stores behind */
	}
	int st;
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child made a store and exited");
	sw_store *l = sw_store_create(live, NULL, 64, &e);
	char buf[8192] = { 0 };
	raw_(junk, buf, sizeof buf, 0600);
	size_t n = 99;
	is_int(sw_store_sweep(pre, &n, &e), 0, "sweep");
	is_int(n, 1, "one stale store removed");
	sw_error e2 = { 0 };
	ok(!sw_store_open(dead, false, &e2) && e2.sys_errno == ENOENT, "the dead creator's store is gone");
	sw_store *l2 = sw_store_open(live, false, &e2);
	ok(l2 != NULL, "a live creator's store stays");
	char path[256];
	snprintf(path, sizeof path, "/dev/shm/%s", junk + 4);
	ok(access(path, F_OK) == 0, "an object that is not a store stays");
	/* a companion made by a process that has exited stays with its live run */
	char opt[160];
	snprintf(opt, sizeof opt, "%s.opt", live);
	pid = fork();
	if (pid == 0) {
		sw_store *s = sw_store_create(opt, NULL, 64, &e);
		_exit(s ? 0 : 1);
	}
	waitpid(pid, &st, 0);
	is_int(sw_store_sweep(pre, &n, &e), 0, "sweep again");
	is_int(n, 0, "NAME.opt stays while NAME's creator runs");
	sw_store_close(l2);
	sw_store_close(l);
	sw_store_unlink(live, &e);
	is_int(sw_store_sweep(pre, &n, &e), 0, "sweep once NAME is gone");
	is_int(n, 1, "and NAME.opt goes too");
	sw_store_unlink(junk, &e);
}

/* A model directory into a store and back out, bit for bit. */
static void test_model_dir_(void)
{
	char tmp[256], d1[300], d2[300], spec[128];
	sw_error e = { 0 };
	snprintf(tmp, sizeof tmp, "%s/sw-test-store.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmp))
		abort();
	snprintf(d1, sizeof d1, "%s/m1", tmp);
	snprintf(d2, sizeof d2, "%s/m2", tmp);
	sw_model_config cfg = small_cfg_();
	sw_model *m = sw_model_new(&cfg, &e);
	sw_model_init_random(m, 11, 0.02f);
	ok(m && !sw_model_save(m, d1, SW_DT_F32, &e), "a model directory: %s", e.msg);
	spec_(spec, sizeof spec);
	sw_store *s = sw_store_create_from_model(spec, d1, 7, &e);
	ok(s != NULL, "a store from the directory: %s", e.msg);
	if (s) {
		is_int(sw_store_version(s), 7, "published as version 7");
		ok(!memcmp(sw_store_arena(s), m->arena, m->nparams * sizeof(float)), "the same weights, bit for bit");
		is_int(sw_store_save_model(s, d2, SW_DT_F32, &e), 0, "saved back: %s", e.msg);
		sw_model *m2 = sw_model_load(d2, &e);
		ok(m2 && !memcmp(m2->arena, m->arena, m->nparams * sizeof(float)), "and loaded again, the same");
		sw_model_free(m2);
		sw_store_close(s);
		sw_store_unlink(spec, &e);
	}
	sw_error e2 = { 0 };
	char cfgp[320];
	snprintf(cfgp, sizeof cfgp, "%s/model.safetensors", d1);
	if (truncate(cfgp, 100))
		abort();
	spec_(spec, sizeof spec);
	ok(!sw_store_create_from_model(spec, d1, 0, &e2) && e2.code, "a damaged model is refused: %s", e2.msg);
	sw_error e3 = { 0 };
	ok(!sw_store_open(spec, false, &e3) && e3.sys_errno == ENOENT, "and leaves no store behind");
	s = sw_store_create(spec, NULL, 16, &e);
	sw_store_publish(s, 0, &e);
	is_int(sw_store_save_model(s, d2, SW_DT_F32, &e), SW_EINVAL, "a store without a model cannot be saved");
	sw_store_close(s);
	sw_store_unlink(spec, &e);
	sw_model_free(m);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	if (system(cmd))
		printf("# could not remove %s\n", tmp);
}

int main(void)
{
	test_names_();
	test_cuda_without_gpu_();
	test_create_open_();
	test_populated_();
	test_room_();
	test_refused_();
	test_seqlock_();
	test_dead_writer_();
	test_sweep_();
	test_model_dir_();
	return tap_done();
}
