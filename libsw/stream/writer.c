/*
 * writer.c - records into a descriptor as msgpack, zstd-compressed msgpack
 * or JSON Lines.
 *
 * Output is gathered in a buffer and written in large pieces; it reaches
 * the descriptor when the buffer fills, on sw_writer_flush() (which also
 * ends a zstd block, so the reader downstream can decode every record
 * written so far), and on close.  Records are never split across a flush.
 * sw_writer_open_whole writes a file through a temporary beside it, renamed
 * over it at close: the file is its old self until the output is whole.
 * The temporary is an sw_afile's (common/afile.c: made, synced, renamed and
 * removed as every file libsw commits); the writer writes its descriptor.
 */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include "common/internal.h"

#define HIGH ((size_t)256 << 10)

struct sw_writer {
	char *name;
	int fd, own_fd;
	int whole;         /* sw_writer_open_whole: fd is af's temporary until af is committed at close */
	sw_afile af;
	sw_format fmt;
	ZSTD_CCtx *cctx;
	sw_buf buf;   /* encoded records not yet written */
	sw_buf zout;  /* compressed bytes */
	uint64_t records, bytes_out;
	sw_error err;
};

sw_writer *sw_writer_fdopen(int fd, const char *name, const sw_writer_opts *o, sw_error *err)
{
	sw_writer *w = calloc(1, sizeof *w);
	if (!w || !(w->name = strdup(name))) {
		free(w);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	w->fd = fd;
	w->fmt = o && o->format == SW_FMT_JSON ? SW_FMT_JSON : SW_FMT_MSGPACK;
	if (o && o->zstd_level) {
		if (o->zstd_level < 1 || o->zstd_level > ZSTD_maxCLevel()) {
			sw_writer_free(w);
			sw_fail(err, SW_EINVAL, "zstd level %d is not in 1..%d", o->zstd_level, ZSTD_maxCLevel());
			return NULL;
		}
		w->cctx = ZSTD_createCCtx();
		if (!w->cctx || sw_buf_reserve(&w->zout, ZSTD_CStreamOutSize()) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, o->zstd_level))) {
			sw_writer_free(w);
			sw_fail(err, SW_ENOMEM, "cannot set up zstd");
			return NULL;
		}
	}
	return w;
}

static sw_writer *cannot_create_(sw_error *err, int e)
{
	if (err) {
		memset(err, 0, sizeof *err);
		err->sys_errno = e;
	}
	sw_fail(err, SW_EIO, "cannot create: %s", strerror(e));
	return NULL;
}

sw_writer *sw_writer_open(const char *path, const sw_writer_opts *o, sw_error *err)
{
	if (!strcmp(path, "-"))
		return sw_writer_fdopen(1, "stdout", o, err);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return cannot_create_(err, errno);
	sw_writer *w = sw_writer_fdopen(fd, path, o, err);
	if (!w)
		close(fd);
	else
		w->own_fd = 1;
	return w;
}

sw_writer *sw_writer_open_whole(const char *path, const sw_writer_opts *o, sw_error *err)
{
	struct stat st, lst;
	int exists = !stat(path, &st);
	/* standard output, a FIFO, a terminal, /dev/null: written as they are */
	if (!strcmp(path, "-") || (exists && !S_ISREG(st.st_mode)) || (!exists && !lstat(path, &lst)))
		return sw_writer_open(path, o, err);
	char dest[PATH_MAX];
	/* a symbolic link: its target is replaced, and the link stays (a dangling one was written through above) */
	int link = exists && !lstat(path, &lst) && S_ISLNK(lst.st_mode);
	if (link ? !realpath(path, dest) : (size_t)snprintf(dest, sizeof dest, "%s", path) >= sizeof dest)
		return sw_writer_open(path, o, err);
	sw_afile af;
	sw_error e = { 0 };
	if (sw_afile_open(&af, dest, &e)) {
		if (exists && (e.sys_errno == EACCES || e.sys_errno == EROFS || e.sys_errno == EPERM))
			return sw_writer_open(path, o, err); /* a file we may write in a directory we may not */
		return cannot_create_(err, e.sys_errno ? e.sys_errno : ENOMEM);
	}
	if (exists && fchmod(af.fd, st.st_mode & 07777)) {
		int se = errno;
		sw_afile_abort(&af);
		return cannot_create_(err, se);
	}
	sw_writer *w = sw_writer_fdopen(af.fd, path, o, err);
	if (!w) {
		sw_afile_abort(&af);
		return NULL;
	}
	w->whole = 1;
	w->af = af;
	return w;
}

const char *sw_writer_pending(const sw_writer *w)
{
	return w->whole ? w->af.tmp : NULL;
}

void sw_writer_free(sw_writer *w)
{
	if (!w)
		return;
	if (w->own_fd)
		close(w->fd);
	if (w->whole)
		sw_afile_abort(&w->af); /* never closed whole: the file is as it was */
	ZSTD_freeCCtx(w->cctx);
	sw_buf_release(&w->buf);
	sw_buf_release(&w->zout);
	free(w->name);
	free(w);
}

const sw_error *sw_writer_error(const sw_writer *w) { return &w->err; }
uint64_t sw_writer_records(const sw_writer *w) { return w->records; }
uint64_t sw_writer_bytes_out(const sw_writer *w) { return w->bytes_out; }

static int write_all_(sw_writer *w, const uint8_t *p, size_t n)
{
	size_t done = 0;
	int e = sw_fd_write_all(w->fd, p, n, &done);
	w->bytes_out += done;
	if (e) {
		w->err.sys_errno = e;
		return sw_fail(&w->err, e == EPIPE ? SW_EPIPE : SW_EIO, "write error: %s", strerror(e));
	}
	return 0;
}

/* Write out the buffer, compressing it with the given end directive. */
static int drain_(sw_writer *w, ZSTD_EndDirective mode)
{
	int rc = 0;
	if (!w->cctx) {
		rc = write_all_(w, w->buf.p, w->buf.len);
		w->buf.len = 0;
		return rc;
	}
	ZSTD_inBuffer in = { w->buf.p, w->buf.len, 0 };
	for (;;) {
		ZSTD_outBuffer out = { w->zout.p, w->zout.cap, 0 };
		size_t left = ZSTD_compressStream2(w->cctx, &out, &in, mode);
		if (ZSTD_isError(left))
			return sw_fail(&w->err, SW_EIO, "zstd: %s", ZSTD_getErrorName(left));
		if ((rc = write_all_(w, w->zout.p, out.pos)))
			return rc;
		if (mode == ZSTD_e_continue ? in.pos == in.size : left == 0)
			break;
	}
	w->buf.len = 0;
	return 0;
}

int sw_writer_put_raw(sw_writer *w, const void *mp, size_t n)
{
	int rc;
	if (w->err.code)
		return w->err.code;
	if (w->fmt == SW_FMT_JSON) {
		if ((rc = sw_mp_to_json(mp, n, &w->buf, &w->err))) {
			w->err.record = w->records + 1;
			return rc;
		}
	} else if (sw_buf_put(&w->buf, mp, n)) {
		return sw_fail(&w->err, SW_ENOMEM, "out of memory");
	}
	w->records++;
	return w->buf.len >= HIGH ? drain_(w, ZSTD_e_continue) : 0;
}

int sw_writer_put(sw_writer *w, sw_rec *rec)
{
	const uint8_t *p;
	size_t n;
	int rc = sw_rec_bytes(rec, &p, &n);
	if (rc)
		return sw_fail(&w->err, rc, "cannot encode record: %s", sw_strerror(rc));
	return sw_writer_put_raw(w, p, n);
}

int sw_writer_flush(sw_writer *w)
{
	if (w->err.code)
		return w->err.code;
	return drain_(w, ZSTD_e_flush);
}

int sw_writer_close(sw_writer *w)
{
	int rc = w->err.code ? w->err.code : drain_(w, ZSTD_e_end);
	if (w->whole) {
		/* synced, closed, renamed over the file (the afile's buffer is empty: we wrote its descriptor) */
		sw_error e = { 0 };
		if (!rc && sw_afile_commit(&w->af, &e)) {
			size_t n = strlen(w->af.path); /* its messages name the file, as the caller's do */
			const char *m = !strncmp(e.msg, w->af.path, n) && e.msg[n] == ':' ? e.msg + n + 2 : e.msg;
			rc = sw_fail(&w->err, SW_EIO, "%s", m);
			w->err.sys_errno = e.sys_errno;
		}
		sw_afile_abort(&w->af); /* removes the temporary of a failed one; frees what is left */
		w->whole = 0;
	}
	if (w->own_fd) {
		w->own_fd = 0;
		if (close(w->fd) && !rc) {
			w->err.sys_errno = errno;
			rc = sw_fail(&w->err, SW_EIO, "close: %s", strerror(errno));
		}
	}
	return rc;
}
