/*
 * test_afile.c - files libsw writes atomically (common/afile.c) as its
 * savers write the large ones (sw/save.h): through the page cache or
 * around it (O_DIRECT, whole aligned blocks, the tail through the cache),
 * with the digest of the bytes noted at commit.  Whatever the path and the
 * sizes of the writes, the file holds the bytes written and the digest
 * noted is theirs (libsodium's BLAKE2b-256, as b2sum -l 256).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/internal.h"
#include "tap.h"
#include "tmpfiles.h"

#define dir_ tmp_dir_

static unsigned char *bytes_(size_t n, unsigned seed)
{
	unsigned char *p = malloc(n ? n : 1);
	if (!p)
		abort();
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		p[i] = (unsigned char)x;
	}
	return p;
}

/* The file's bytes equal p[0..n). */
static int holds_(const char *path, const unsigned char *p, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	unsigned char *got = malloc(n + 1);
	size_t k = got ? fread(got, 1, n + 1, f) : 0;
	fclose(f);
	int same = got && k == n && !memcmp(got, p, n);
	free(got);
	return same;
}

/* Write n bytes in pieces of chunk (the savers write headers, tensors and 16 KiB runs) as o says. */
static int write_(const char *path, const unsigned char *p, size_t n, size_t chunk, const sw_save_opts *o, int *direct,
                  sw_error *e)
{
	sw_afile f;
	int rc = sw_afile_open(&f, path, e);
	if (rc)
		return rc;
	if ((rc = sw_afile_set(&f, o, 1, e))) {
		sw_afile_abort(&f);
		return rc;
	}
	*direct = f.direct;
	for (size_t i = 0; !rc && i < n; i += chunk)
		rc = sw_afile_write(&f, p + i, n - i < chunk ? n - i : chunk, e);
	rc = rc ? rc : sw_afile_commit(&f, e);
	if (rc)
		sw_afile_abort(&f);
	return rc;
}

static void test_sizes_(const char *where, int want_direct)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 65536 + 3, ((size_t)8 << 20) - 1, (size_t)8 << 20,
	                                ((size_t)8 << 20) + 4096, ((size_t)19 << 20) + 777 };
	static const size_t chunks[] = { 1000, (size_t)1 << 20, (size_t)32 << 20 };
	sw_digests *d = sw_digests_new(where);
	ok(d != NULL, "digests of %s", where);
	if (!d)
		return;
	int seen_direct = 0, bad = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
			char path[600], rel[64];
			sw_error e = { 0 };
			snprintf(rel, sizeof rel, "f-%zu-%zu", i, c);
			snprintf(path, sizeof path, "%s/%s", where, rel);
			unsigned char *p = bytes_(sizes[i], (unsigned)(i * 7 + c)), want[SW_DIGEST_LEN], h[SW_DIGEST_LEN];
			sw_save_opts o = { d, 1 };
			int direct = -1;
			crypto_generichash(want, sizeof want, p, sizes[i], NULL, 0);
			uint64_t size = 0;
			if (write_(path, p, sizes[i], chunks[c], &o, &direct, &e) || !holds_(path, p, sizes[i]) ||
			    sw_digests_get(d, rel, &size, h) || size != sizes[i] || memcmp(h, want, sizeof h)) {
				printf("# %s: %zu bytes in pieces of %zu: %s\n", where, sizes[i], chunks[c], e.msg);
				bad++;
			}
			seen_direct |= direct == 1;
			free(p);
		}
	}
	is_int(bad, 0, "%s: every size, in every size of piece: the bytes written and their digest noted", where);
	if (want_direct)
		ok(seen_direct, "%s: written around the page cache (O_DIRECT)", where);
	else
		ok(!seen_direct, "%s: through the page cache where O_DIRECT is refused", where);
	/* a temporary file left? none: each was renamed into place */
	char cmd[700];
	snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '\\.tmp\\.' >/dev/null", where);
	ok(system(cmd) != 0, "%s: no temporary file left", where);
	sw_digests_free(d);
}

static void test_digests_(void)
{
	sw_error e = { 0 };
	unsigned char h[SW_DIGEST_LEN], g[SW_DIGEST_LEN];
	uint64_t size;
	memset(h, 7, sizeof h);
	sw_digests *d = sw_digests_new("/x/dir/");
	ok(d && !strcmp(sw_digests_dir(d), "/x/dir"), "the directory, without its trailing slash");
	is_int(sw_digests_note(d, "/x/dirt/a", 1, h, &e), SW_EINVAL, "a path beside it is not under it");
	is_int(sw_digests_note(d, "/x/dir/", 1, h, &e), SW_EINVAL, "nor the directory itself");
	is_int(sw_digests_note(d, "/x/dir/a/b", 5, h, &e), 0, "a path under it");
	is_int(sw_digests_get(d, "a/b", &size, g), 0, "found by its relative path");
	ok(size == 5 && !memcmp(g, h, sizeof h), "with its size and digest");
	is_int(sw_digests_get(d, "a", &size, g), SW_ENOENT, "another is not there");
	memset(h, 9, sizeof h);
	is_int(sw_digests_note(d, "/x/dir/a/b", 6, h, &e), 0, "noted again");
	ok(!sw_digests_get(d, "a/b", &size, g) && size == 6 && g[0] == 9, "the later entry counts");
	for (int i = 0; i < 40; i++) {
		char p[64];
		snprintf(p, sizeof p, "/x/dir/f%d", i);
		if (sw_digests_note(d, p, (uint64_t)i, h, &e))
			break;
	}
	ok(!sw_digests_get(d, "f39", &size, g) && size == 39 && !sw_digests_get(d, "f0", &size, g) && size == 0,
	   "many entries");
	sw_digests_free(d);
	sw_digests_free(NULL);

	/* without digests or direct: the file as ever, nothing noted */
	char path[600];
	snprintf(path, sizeof path, "%s/plain", dir_);
	int direct = -1;
	unsigned char *p = bytes_(10000, 3);
	is_int(write_(path, p, 10000, 4096, NULL, &direct, &e), 0, "a plain file: %s", e.msg);
	ok(direct == 0 && holds_(path, p, 10000), "written through the page cache, whole");
	/* digested but not direct */
	d = sw_digests_new(dir_);
	sw_save_opts o = { d, 0 };
	is_int(write_(path, p, 10000, 4096, &o, &direct, &e), 0, "digested only: %s", e.msg);
	crypto_generichash(h, sizeof h, p, 10000, NULL, 0);
	ok(direct == 0 && !sw_digests_get(d, "plain", &size, g) && size == 10000 && !memcmp(g, h, sizeof h),
	   "its digest noted, through the page cache");
	/* a file aborted notes nothing */
	sw_afile f;
	snprintf(path, sizeof path, "%s/aborted", dir_);
	ok(!sw_afile_open(&f, path, &e) && !sw_afile_set(&f, &o, 1, &e) && !sw_afile_write(&f, p, 100, &e), "opened");
	sw_afile_abort(&f);
	ok(sw_digests_get(d, "aborted", &size, g) == SW_ENOENT && access(path, F_OK) && errno == ENOENT,
	   "aborted: no file, no digest");
	sw_digests_free(d);
	free(p);
}

/* Whether the file system of dir takes O_DIRECT as afile asks for it: set on an open file with fcntl. */
static int direct_ok_(const char *dir)
{
	char probe[600];
	snprintf(probe, sizeof probe, "%s/probe", dir);
	int fd = open(probe, O_WRONLY | O_CREAT, 0600), fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
	int ok = fl >= 0 && !fcntl(fd, F_SETFL, fl | O_DIRECT);
	if (fd >= 0)
		close(fd);
	unlink(probe);
	return ok;
}

/* sw_fd_write_all: every byte through a pipe read 4 KiB at a time, the errno of a
 * full device or a closed descriptor, and how many bytes went before it */
static void test_write_all_(void)
{
	int pf[2];
	if (pipe(pf))
		abort();
	size_t n = 1 << 20; /* 16 pipe buffers */
	unsigned char *p = bytes_(n, 7), *q = malloc(n);
	pid_t pid = fork();
	if (pid == 0) {
		close(pf[1]);
		size_t got = 0;
		while (got < n) {
			ssize_t r = read(pf[0], q + got, n - got < 4096 ? n - got : 4096);
			if (r <= 0)
				_exit(2);
			got += (size_t)r;
		}
		_exit(memcmp(p, q, n) != 0 || read(pf[0], q, 1) != 0);
	}
	close(pf[0]);
	size_t done = 0;
	is_int(sw_fd_write_all(pf[1], p, n, &done), 0, "write_all: 1 MiB through a pipe");
	ok(done == n, "write_all: every byte counted (%zu)", done);
	close(pf[1]);
	int st = -1;
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "write_all: the reader got the bytes in order, and no more");
	int full = open("/dev/full", O_WRONLY);
	if (full >= 0) {
		done = 99;
		is_int(sw_fd_write_all(full, p, 10, &done), ENOSPC, "write_all: a full device's ENOSPC");
		ok(done == 0, "write_all: nothing written to a full device (%zu)", done);
		close(full);
	}
	is_int(sw_fd_write_all(full, p, 10, NULL), EBADF, "write_all: a closed descriptor's EBADF");
	is_int(sw_fd_write_all(-1, p, 0, &done), 0, "write_all: nothing to write is done");
	free(p);
	free(q);
}

int main(void)
{
	if (tmp_open("afile") || sodium_init() < 0)
		return 1;
	test_digests_();
	test_write_all_();
	/* this test's directory: O_DIRECT where its file system takes it (ext4, xfs; tmpfs since Linux 6.6) */
	test_sizes_(dir_, direct_ok_(dir_));
	/* /dev/shm is tmpfs: O_DIRECT refused before Linux 6.6 (the page cache it is), taken since */
	char shm[64];
	snprintf(shm, sizeof shm, "/dev/shm/sw-test-afile.%ld", (long)getpid());
	if (!mkdir(shm, 0700)) {
		test_sizes_(shm, direct_ok_(shm));
		char cmd[200];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm);
		if (system(cmd))
			printf("# cannot remove %s\n", shm);
	}
	tmp_close();
	return tap_done();
}
