/*
 * reader.c - records out of a byte source: detects the encoding from the
 * first bytes (zstd, then msgpack or JSON inside), decompresses, finds each
 * record's end in place and hands it out without copying.
 *
 * Input is read into one buffer that grows with the record being read; a
 * record that is cut short asks for at least as much again as is buffered,
 * so even a record near the size limit is scanned a logarithmic number of
 * times, not once per read.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include "common/internal.h"

#define CHUNK ((size_t)128 << 10)

void sw_rec_load_trusted_(sw_rec *r, const uint8_t *p, size_t n);

struct sw_reader {
	char *name;
	int fd, own_fd;
	const uint8_t *mem;      /* memopen source */
	size_t memlen, mempos;
	int src_eof;             /* the source has no more bytes */
	uint64_t bytes_in;

	int detected;
	sw_format fmt;
	ZSTD_DCtx *dctx;         /* non-NULL: the source is zstd */
	sw_buf zin;              /* compressed bytes not yet decompressed */
	size_t zpos;
	size_t zret;             /* last ZSTD_decompressStream result: 0 between frames */

	sw_buf buf;              /* decoded bytes */
	size_t pos;              /* start of what is not yet handed out */
	uint64_t base;           /* stream offset of buf.p[0] */
	uint64_t line;           /* JSON: line number at pos */
	uint64_t col;            /* and its column (a record may end mid-line: two on a line) */
	uint64_t records;
	size_t max;
	sw_json_parser *jp;
	sw_buf jrec;             /* JSON: the current record as msgpack */
	sw_mp_dups dups;         /* scratch of the check for keys that appear twice */

	void (*idle)(void *);
	void *idle_arg;
	void (*refill)(void *);
	void *refill_arg;
	sw_error err;
};

static sw_reader *new_(const char *name, sw_error *err)
{
	sw_reader *r = calloc(1, sizeof *r);
	if (!r || !(r->name = strdup(name))) {
		free(r);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	r->fd = -1;
	r->max = SW_MAX_RECORD_DEFAULT;
	r->line = 1;
	r->col = 1;
	return r;
}

sw_reader *sw_reader_fdopen(int fd, const char *name, sw_error *err)
{
	sw_reader *r = new_(name, err);
	if (r)
		r->fd = fd;
	return r;
}

sw_reader *sw_reader_open(const char *path, sw_error *err)
{
	if (!strcmp(path, "-"))
		return sw_reader_fdopen(0, "stdin", err);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (err) {
			memset(err, 0, sizeof *err);
			err->sys_errno = errno;
		}
		sw_fail(err, SW_EIO, "cannot open: %s", strerror(errno));
		return NULL;
	}
	sw_reader *r = sw_reader_fdopen(fd, path, err);
	if (!r)
		close(fd);
	else
		r->own_fd = 1;
	return r;
}

sw_reader *sw_reader_memopen(const void *p, size_t n, const char *name, sw_error *err)
{
	sw_reader *r = new_(name, err);
	if (r) {
		r->mem = p;
		r->memlen = n;
	}
	return r;
}

void sw_reader_free(sw_reader *r)
{
	if (!r)
		return;
	if (r->own_fd)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	sw_json_parser_free(r->jp);
	sw_buf_release(&r->zin);
	sw_buf_release(&r->buf);
	sw_buf_release(&r->jrec);
	sw_mp_dups_release(&r->dups);
	free(r->name);
	free(r);
}

const sw_error *sw_reader_error(const sw_reader *r) { return &r->err; }
const char *sw_reader_name(const sw_reader *r) { return r->name; }
sw_format sw_reader_format(const sw_reader *r) { return r->fmt; }
int sw_reader_compressed(const sw_reader *r) { return r->dctx != NULL; }
uint64_t sw_reader_records(const sw_reader *r) { return r->records; }
uint64_t sw_reader_bytes_in(const sw_reader *r) { return r->bytes_in; }
void sw_reader_set_max_record(sw_reader *r, size_t bytes) { r->max = bytes; }

void sw_reader_set_idle(sw_reader *r, void (*fn)(void *), void *arg)
{
	r->idle = fn;
	r->idle_arg = arg;
}

void sw_reader_set_refill(sw_reader *r, void (*fn)(void *), void *arg)
{
	r->refill = fn;
	r->refill_arg = arg;
}

/* Fail at the current record, whose first byte is at offset. */
__attribute__((format(printf, 4, 5)))
static int fail_at_(sw_reader *r, int code, uint64_t offset, const char *fmt, ...)
{
	va_list ap;
	r->err.code = code;
	r->err.record = r->records + 1;
	r->err.offset = offset;
	va_start(ap, fmt);
	vsnprintf(r->err.msg, sizeof r->err.msg, fmt, ap);
	va_end(ap);
	return code;
}

/* Append up to room source bytes to b; 0 at the end of the source. */
static ssize_t read_src_(sw_reader *r, sw_buf *b, size_t room)
{
	if (r->src_eof)
		return 0;
	if (sw_buf_reserve(b, room))
		return sw_fail(&r->err, SW_ENOMEM, "out of memory");
	ssize_t n;
	if (r->mem) {
		n = (ssize_t)(r->memlen - r->mempos < room ? r->memlen - r->mempos : room);
		memcpy(b->p + b->len, r->mem + r->mempos, (size_t)n);
		r->mempos += (size_t)n;
	} else {
		if (r->refill)
			r->refill(r->refill_arg);
		if (r->idle) {
			struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
			if (poll(&pfd, 1, 0) == 0)
				r->idle(r->idle_arg);
		}
		do
			n = read(r->fd, b->p + b->len, room);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			r->err.sys_errno = errno;
			return sw_fail(&r->err, SW_EIO, "read error: %s", strerror(errno));
		}
	}
	if (n == 0)
		r->src_eof = 1;
	b->len += (size_t)n;
	r->bytes_in += (uint64_t)n;
	return n;
}

/* Decode more zstd input into buf; 0 at the end, < 0 on error. */
static ssize_t unzstd_(sw_reader *r, size_t room)
{
	if (sw_buf_reserve(&r->buf, room))
		return sw_fail(&r->err, SW_ENOMEM, "out of memory");
	for (;;) {
		if (r->zpos == r->zin.len) {
			r->zin.len = r->zpos = 0;
			ssize_t n = read_src_(r, &r->zin, CHUNK);
			if (n < 0)
				return n;
			if (n == 0) {
				if (r->zret != 0) {
					r->err.offset = r->base + r->buf.len;
					return sw_fail(&r->err, SW_ETRUNC,
					               "zstd frame cut short: the input ends inside it");
				}
				return 0;
			}
		}
		ZSTD_inBuffer in = { r->zin.p, r->zin.len, r->zpos };
		ZSTD_outBuffer out = { r->buf.p + r->buf.len, room, 0 };
		size_t ret = ZSTD_decompressStream(r->dctx, &out, &in);
		r->zpos = in.pos;
		if (ZSTD_isError(ret)) {
			r->err.offset = r->base + r->buf.len;
			return sw_fail(&r->err, SW_EFORMAT, "corrupt zstd data: %s", ZSTD_getErrorName(ret));
		}
		r->zret = ret;
		r->buf.len += out.pos;
		if (out.pos)
			return (ssize_t)out.pos;
	}
}

/*
 * More decoded bytes in buf, at least as many as are buffered past pos, so
 * rescanning a long record stays cheap.  0 at the end of input.
 */
static ssize_t more_(sw_reader *r)
{
	size_t pending = r->buf.len - r->pos;
	if (r->pos && pending < r->pos) {
		/* hand-outs before pos are dead: slide the rest to the front */
		memmove(r->buf.p, r->buf.p + r->pos, pending);
		r->base += r->pos;
		r->buf.len = pending;
		r->pos = 0;
	}
	size_t room = pending > CHUNK ? pending : CHUNK;
	if (r->dctx)
		return unzstd_(r, room);
	ssize_t got = 0, n;
	/* fill the room, or stop at a short read so that pipes stay prompt */
	while ((size_t)got < room) {
		if ((n = read_src_(r, &r->buf, room - (size_t)got)) <= 0)
			return n < 0 ? n : got;
		got += n;
		if (got >= (ssize_t)CHUNK || !r->mem)
			break;
	}
	return got;
}

static int is_zstd_(const uint8_t *p)
{
	return (p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd) ||
	       ((p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18);
}

/* No control bytes but tab, newline and carriage return in p[0..n): text, as far as it goes. */
static int text_(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' && p[i] != '\r') || p[i] == 0x7f)
			return 0;
	return 1;
}

static int detect_(sw_reader *r)
{
	ssize_t n;
	while (r->buf.len < 4 && (n = read_src_(r, &r->buf, CHUNK)) > 0)
		;
	if (!r->err.code && r->buf.len >= 4 && is_zstd_(r->buf.p)) {
		if (!(r->dctx = ZSTD_createDCtx()))
			return sw_fail(&r->err, SW_ENOMEM, "out of memory");
		/* what was read is compressed: it moves to zin */
		sw_buf t = r->zin;
		r->zin = r->buf;
		r->buf = t;
		r->buf.len = 0;
		r->zpos = 0;
		r->zret = 1;
		while (r->buf.len == 0 && (n = unzstd_(r, CHUNK)) > 0)
			;
	}
	if (r->err.code)
		return r->err.code;
	if (r->buf.len == 0)
		return sw_fail(&r->err, SW_EEMPTY, "empty input: no records");
	const uint8_t *p = r->buf.p;
	if (r->buf.len >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) {
		r->fmt = SW_FMT_JSON; /* a UTF-8 byte order mark: skip it */
		r->pos = 3;
	} else if (p[0] == '{' || p[0] == ' ' || p[0] == '\t' || p[0] == '\n' || p[0] == '\r' ||
	           (p[0] > 0x20 && p[0] < 0x7f && text_(p, r->buf.len < 64 ? r->buf.len : 64))) {
		/* '{' and space begin JSON Lines; any other text ('[' of a JSON array, a CSV's header) is no
		 * record either way, and the JSON reader says what it is by line and column (as msgpack it
		 * would be a record "not a map but uint"); binary bytes go to msgpack, which says so at once */
		r->fmt = SW_FMT_JSON;
	} else {
		r->fmt = SW_FMT_MSGPACK;
	}
	if (r->fmt == SW_FMT_JSON && !(r->jp = sw_json_parser_new()))
		return sw_fail(&r->err, SW_ENOMEM, "out of memory");
	r->detected = 1;
	return 0;
}

/*
 * A record whose map (or a map inside it) holds a key twice is refused
 * (sw_mp_scan_record finds it): Python's msgpack and jq keep the last
 * value, a field lookup here the first, so the programs of a pipeline and
 * the tools that inspect it would read different records.  r->err gets the
 * message naming the key (the caller places it); json: the record came as
 * JSON text (an object, no byte offset into the msgpack made of it), else
 * at is the record's offset in the stream.
 */
static int twin_fail_(sw_reader *r, const sw_mp_twin *t, bool json, uint64_t at)
{
	const uint8_t *k = t->key;
	size_t kn = t->klen;
	char shown[84], where[64];
	sw_val v;
	int bad = t->kind == 'v' ? sw_val_decode(k, kn, &v) : 0;
	if (t->kind == 's') {
		shown[0] = '"';
		sw_show_text(shown + 1, sizeof shown - 2, k, kn, 1);
		strcat(shown, "\"");
	} else if (t->kind == 'b') {
		snprintf(shown, sizeof shown, "(a bin of %zu bytes)", kn);
	} else if (!bad && v.type == SW_T_UINT) {
		snprintf(shown, sizeof shown, "%llu", (unsigned long long)v.v.u);
	} else if (!bad && v.type == SW_T_INT) {
		snprintf(shown, sizeof shown, "%lld", (long long)v.v.i);
	} else {
		snprintf(shown, sizeof shown, "(a %s)", bad ? "value" : sw_type_name(v.type));
	}
	if (json)
		snprintf(where, sizeof where, "an object");
	else
		snprintf(where, sizeof where, "a map (again at byte %llu)", (unsigned long long)(at + t->at));
	return sw_fail(&r->err, SW_EFORMAT, "key %s appears twice in %s: readers keep different ones "
	               "(Python's msgpack and jq the last), so the record is refused", shown, where);
}

static int next_msgpack_(sw_reader *r, sw_rec *rec)
{
	for (;;) {
		const uint8_t *p = r->buf.p + r->pos, *end = r->buf.p + r->buf.len, *next;
		uint64_t at = r->base + r->pos;
		if (p < end) {
			uint8_t c = *p;
			sw_val v;
			if (c == 0xc1)
				return fail_at_(r, SW_EFORMAT, at, "byte 0xc1 is no msgpack");
			if (!((c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf)) {
				if (sw_val_decode(p, (size_t)(end - p), &v) == 0)
					return fail_at_(r, SW_EFORMAT, at, "record is not a map but %s",
					                sw_type_name(v.type));
				return fail_at_(r, SW_EFORMAT, at, "record is not a map (it starts with byte 0x%02x)", c);
			}
			size_t badu;
			sw_mp_twin twin;
			int rc = sw_mp_scan_record(&r->dups, p, end, r->max, &next, &badu, &twin);
			if (rc == SW_EFORMAT && badu != SIZE_MAX)
				return fail_at_(r, SW_EFORMAT, at, "a string is not valid UTF-8 at byte %llu; "
				                "raw bytes belong in a bin", (unsigned long long)(at + badu));
			if (rc == 1) {
				rc = twin_fail_(r, &twin, false, at);
				r->err.record = r->records + 1;
				r->err.offset = at;
				return rc;
			}
			if (rc == SW_ENOMEM)
				return fail_at_(r, rc, at, "out of memory");
			if (rc == SW_ERANGE)
				return fail_at_(r, SW_EFORMAT, at, "values nest deeper than %d levels", SW_MP_MAX_DEPTH);
			if (rc == 0) {
				r->pos += (size_t)(next - p);
				r->records++;
				sw_rec_load_trusted_(rec, p, (size_t)(next - p));
				return 1;
			}
			unsigned long long bad = at + (uint64_t)(next - p);
			if (rc == SW_EFORMAT)
				return fail_at_(r, rc, at, "byte 0x%02x at offset %llu is no msgpack", *next, bad);
			if (rc == SW_ETOOBIG)
				return fail_at_(r, rc, at, "record exceeds the size limit of %zu bytes "
				                "(the value at byte %llu is too large; see SW_MAX_RECORD)", r->max, bad);
		}
		ssize_t n = more_(r);
		if (n < 0) {
			r->err.record = r->records + 1;
			return (int)n;
		}
		if (n == 0) {
			if (r->pos == r->buf.len)
				return 0;
			return fail_at_(r, SW_ETRUNC, r->base + r->pos,
			                "truncated record: the input ends %zu bytes into it", r->buf.len - r->pos);
		}
	}
}

/* Line and column of offset off past pos, for a JSON error. */
static int json_fail_(sw_reader *r, size_t off)
{
	const uint8_t *p = r->buf.p + r->pos;
	uint64_t line = r->line, col = r->col;
	for (size_t i = 0; i < off && r->pos + i < r->buf.len; i++) {
		if (p[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	r->err.line = line;
	r->err.column = col;
	r->err.record = r->records + 1;
	r->err.offset = r->base + r->pos + off;
	return r->err.code;
}

static int next_json_(sw_reader *r, sw_rec *rec)
{
	size_t span = 0; /* bytes offered to the parser: whole lines */
	for (;;) {
		while (span == 0 && r->pos < r->buf.len) { /* blank space between records */
			uint8_t c = r->buf.p[r->pos];
			if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
				break;
			r->line += c == '\n';
			r->col = c == '\n' ? 1 : r->col + 1;
			r->pos++;
		}
		size_t have = r->buf.len - r->pos;
		const uint8_t *nl = have > span ? memchr(r->buf.p + r->pos + span, '\n', have - span) : NULL;
		if (have == 0 || (!nl && !r->src_eof) || (have == span && !r->src_eof)) {
			if (have == 0 && r->src_eof)
				return 0;
			ssize_t n = more_(r);
			if (n < 0) {
				r->err.record = r->records + 1;
				return (int)n;
			}
			continue;
		}
		span = nl ? (size_t)(nl - (r->buf.p + r->pos)) + 1 : have;
		if (span > r->max) {
			sw_fail(&r->err, SW_ETOOBIG, "record exceeds the size limit of %zu bytes (see SW_MAX_RECORD)",
			        r->max);
			return json_fail_(r, 0);
		}
		size_t used;
		r->jrec.len = 0;
		memset(&r->err, 0, sizeof r->err);
		int rc = sw_json_to_mp(r->jp, (const char *)r->buf.p + r->pos, span, &used, &r->jrec, &r->err);
		if (rc == 0) {
			const uint8_t *jend;
			size_t badu;
			sw_mp_twin twin;
			rc = sw_mp_scan_record(&r->dups, r->jrec.p, r->jrec.p + r->jrec.len, r->jrec.len, &jend, &badu,
			                       &twin);
			if (rc == 1)
				rc = twin_fail_(r, &twin, true, 0);
			else if (rc == SW_ERANGE) /* an empty object one level below JSON's own limit */
				rc = sw_fail(&r->err, SW_EFORMAT, "values nest deeper than %d levels", SW_MP_MAX_DEPTH);
			else if (rc)
				rc = sw_fail(&r->err, rc == SW_ENOMEM ? rc : SW_EFORMAT, "%s",
				             rc == SW_ENOMEM ? "out of memory" : "the record made of it is no msgpack");
			if (rc)
				return json_fail_(r, 0);
		}
		if (rc == 0) {
			for (size_t i = 0; i < used; i++) {
				r->line += r->buf.p[r->pos + i] == '\n';
				r->col = r->buf.p[r->pos + i] == '\n' ? 1 : r->col + 1;
			}
			r->pos += used;
			r->records++;
			sw_rec_load_trusted_(rec, r->jrec.p, r->jrec.len);
			return 1;
		}
		if (rc == SW_ETRUNC && (span < have || !r->src_eof)) {
			memset(&r->err, 0, sizeof r->err);
			continue; /* the value goes on past this line: offer more */
		}
		size_t off = (size_t)r->err.offset;
		if (rc == SW_ETRUNC)
			sw_fail(&r->err, SW_ETRUNC, "truncated record: the input ends inside a JSON value");
		return json_fail_(r, off < span ? off : span);
	}
}

int sw_reader_next(sw_reader *r, sw_rec *rec)
{
	if (r->err.code)
		return r->err.code;
	if (!r->detected) {
		int rc = detect_(r);
		if (rc)
			return rc;
	}
	return r->fmt == SW_FMT_JSON ? next_json_(r, rec) : next_msgpack_(r, rec);
}
