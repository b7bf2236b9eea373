/*
 * afile.c - a file written atomically: a temporary file beside its final
 * name, fsync'd, renamed over it, and the directory fsync'd, so a reader
 * (or a restart after a crash) sees the old file or the new one, never a
 * part.  Every file libsw commits (models, trainer state, checkpoints,
 * pools, audit heads) goes through here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"

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

static int write_all_(sw_afile *f, const unsigned char *p, size_t n, sw_error *err);

static int flush_(sw_afile *f, sw_error *err)
{
	int rc = write_all_(f, f->buf, f->len, err);
	f->len = 0;
	return rc;
}

static int write_all_(sw_afile *f, const unsigned char *p, size_t n, sw_error *err)
{
	while (n) {
		ssize_t w = write(f->fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return sys_fail_(err, f->path, "write error");
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int sw_afile_write(sw_afile *f, const void *p, size_t n, sw_error *err)
{
	const unsigned char *s = p;
	if (n >= f->cap) {
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
	int rc = flush_(f, err);
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
	sw_afile_abort(f); /* frees what is left */
	return 0;
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
	f->tmp = f->path = NULL;
	f->buf = NULL;
	f->len = f->cap = 0;
}
