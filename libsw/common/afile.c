/*
 * afile.c - a file written atomically: a temporary file beside its final
 * name, fsync'd, renamed over it, and the directory fsync'd, so a reader
 * (or a restart after a crash) sees the old file or the new one, never a
 * part.  Every file libsw commits (models, trainer state, checkpoints,
 * pools, audit heads) goes through here.  A large file may also be
 * digested as it is written and written around the page cache
 * (sw_afile_set, sw/save.h).  Its sibling for files that grow by whole
 * records (the audit log, metrics.jsonl): sw_fd_cut_back undoes an append
 * that failed part way.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"

/* O_DIRECT wants the buffer, the file offset and the length aligned to the device's logical block: 4 KiB covers
 * 512-byte and 4 KiB devices.  A direct file's buffer holds 8 MiB: each flush is a whole number of blocks. */
#define ALIGN_ 4096
#define DIRECT_CAP_ ((size_t)8 << 20)

static int sys_fail_(sw_error *err, const char *path, const char *what)
{
	int e = errno;
	sw_fail(err, SW_EIO, "%s: %s: %s", path, what, strerror(e));
	if (err)
		err->sys_errno = e;
	return SW_EIO;
}

int sw_afile_open(sw_afile *f, const char *path, sw_error *err)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	size_t n = strlen(path);
	f->path = malloc(n + 1);
	f->tmp = calloc(1, n + 16);
	f->cap = (size_t)1 << 20;
	f->buf = malloc(f->cap);
	if (!f->path || !f->tmp || !f->buf) {
		free(f->path), free(f->tmp), free(f->buf); /* nothing on disk yet */
		memset(f, 0, sizeof *f);
		f->fd = -1;
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	}
	memcpy(f->path, path, n + 1);
	snprintf(f->tmp, n + 16, "%s.tmp.XXXXXX", path);
	f->fd = mkstemp(f->tmp);
	if (f->fd < 0) {
		int rc = sys_fail_(err, path, "cannot create");
		free(f->tmp); /* nothing to remove */
		free(f->path);
		free(f->buf);
		memset(f, 0, sizeof *f);
		f->fd = -1;
		return rc;
	}
	/* mkstemp makes it 0600; the file we replace would have had the umask's mode */
	mode_t um = umask(022);
	umask(um);
	if (fchmod(f->fd, 0666 & ~um)) {
		int rc = sys_fail_(err, path, "cannot set the mode");
		sw_afile_abort(f);
		return rc;
	}
	return 0;
}

int sw_afile_set(sw_afile *f, const sw_save_opts *o, int hash, sw_error *err)
{
	if (!o)
		return 0;
	if (o->digests && hash) {
		if (posix_memalign(&f->hs, 64, sizeof(crypto_generichash_state))) /* the state wants 64-byte alignment */
			return f->hs = NULL, sw_fail(err, SW_ENOMEM, "%s: out of memory", f->path);
		crypto_generichash_init(f->hs, NULL, 0, SW_DIGEST_LEN);
	}
	f->dg = o->digests;
	if (o->direct && !f->size && !f->len) {
		void *b;
		int fl = fcntl(f->fd, F_GETFL);
		if (posix_memalign(&b, ALIGN_, DIRECT_CAP_))
			return sw_fail(err, SW_ENOMEM, "%s: out of memory", f->path);
		/* where the file system refuses O_DIRECT (tmpfs), the page cache it is */
		if (fl < 0 || fcntl(f->fd, F_SETFL, fl | O_DIRECT)) {
			free(b);
			return 0;
		}
		free(f->buf);
		f->buf = b, f->cap = DIRECT_CAP_, f->direct = 1;
	}
	return 0;
}

/* Back to the page cache: for a tail that is no whole block, or a file system that took O_DIRECT but refuses
 * the writes. */
static int undirect_(sw_afile *f, sw_error *err)
{
	int fl = fcntl(f->fd, F_GETFL);
	if (fl < 0 || fcntl(f->fd, F_SETFL, fl & ~O_DIRECT))
		return sys_fail_(err, f->path, "cannot write it through the page cache");
	f->direct = 0;
	return 0;
}

/* sw_fd_write_all's, where a direct file whose writes are refused (EINVAL) goes on through the page cache. */
static int write_all_(sw_afile *f, const unsigned char *p, size_t n, sw_error *err)
{
	for (;;) {
		size_t done = 0;
		int e = sw_fd_write_all(f->fd, p, n, &done);
		if (!e)
			return 0;
		p += done, n -= done;
		if (e != EINVAL || !f->direct) {
			errno = e;
			return sys_fail_(err, f->path, "write error");
		}
		int rc = undirect_(f, err);
		if (rc)
			return rc;
	}
}

static int flush_(sw_afile *f, sw_error *err)
{
	int rc = write_all_(f, f->buf, f->len, err);
	f->len = 0;
	return rc;
}

int sw_afile_write(sw_afile *f, const void *p, size_t n, sw_error *err)
{
	const unsigned char *s = p;
	if (f->hs)
		crypto_generichash_update(f->hs, s, n);
	f->size += n;
	if (n >= f->cap && !f->direct) {
		/* a tensor's worth: straight from the caller's memory, no copy through the buffer */
		int rc = flush_(f, err);
		return rc ? rc : write_all_(f, s, n, err);
	}
	while (n) {
		if (f->len == f->cap) {
			int rc = flush_(f, err);
			if (rc)
				return rc;
		}
		size_t k = f->cap - f->len < n ? f->cap - f->len : n;
		memcpy(f->buf + f->len, s, k);
		f->len += k;
		s += k;
		n -= k;
	}
	return 0;
}

int sw_afile_commit(sw_afile *f, sw_error *err)
{
	int rc = 0;
	if (f->direct) { /* the whole blocks as they are, the tail through the page cache */
		size_t whole = f->len / ALIGN_ * ALIGN_;
		if (!(rc = write_all_(f, f->buf, whole, err)) && f->direct)
			rc = undirect_(f, err);
		if (!rc)
			rc = write_all_(f, f->buf + whole, f->len - whole, err);
		f->len = 0;
	} else {
		rc = flush_(f, err);
	}
	if (rc)
		return rc;
	if (fsync(f->fd))
		return sys_fail_(err, f->path, "fsync failed");
	if (close(f->fd)) {
		f->fd = -1;
		return sys_fail_(err, f->path, "close failed");
	}
	f->fd = -1;
	if (rename(f->tmp, f->path))
		return sys_fail_(err, f->path, "cannot rename the temporary file to it");
	free(f->tmp);
	f->tmp = NULL;
	/* the rename itself is durable only once the directory is synced */
	char *dir = strdup(f->path);
	if (dir) {
		char *slash = strrchr(dir, '/');
		const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
		int dfd = open(d, O_RDONLY);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
		free(dir);
	}
	if (f->hs) {
		unsigned char h[SW_DIGEST_LEN];
		crypto_generichash_final(f->hs, h, SW_DIGEST_LEN);
		rc = sw_digests_note(f->dg, f->path, f->size, h, err);
	}
	sw_afile_abort(f); /* frees what is left */
	return rc;
}

void sw_afile_abort(sw_afile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	if (f->tmp)
		unlink(f->tmp);
	free(f->tmp);
	free(f->path);
	free(f->buf);
	free(f->hs);
	f->tmp = f->path = NULL;
	f->buf = NULL;
	f->hs = NULL;
	f->len = f->cap = 0;
}

int sw_fd_write_all(int fd, const void *p, size_t n, size_t *done)
{
	size_t at = 0;
	int e = 0;
	while (at < n && !e) {
		ssize_t w = write(fd, (const char *)p + at, n - at);
		if (w > 0)
			at += (size_t)w;
		else if (w == 0)
			e = EIO;
		else if (errno != EINTR)
			e = errno;
	}
	if (done)
		*done = at;
	return e;
}

int sw_fd_cut_back(int fd, off_t size)
{
	int rc;
	do
		rc = ftruncate(fd, size);
	while (rc && errno == EINTR);
	return rc || fsync(fd) ? errno : 0;
}
