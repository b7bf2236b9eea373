/* util.c - the growable buffer, error strings, the version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"

int sw_buf_reserve(sw_buf *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return 0;
	if (extra > SIZE_MAX / 2 - b->len)
		return SW_ENOMEM;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < extra)
		cap *= 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return SW_ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int sw_buf_put(sw_buf *b, const void *p, size_t n)
{
	if (sw_buf_reserve(b, n))
		return SW_ENOMEM;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

void sw_buf_release(sw_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

int sw_fail(sw_error *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		e->code = code;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *sw_strerror(int code)
{
	switch (code) {
	case SW_OK: return "success";
	case SW_EIO: return "input/output error";
	case SW_ENOMEM: return "out of memory";
	case SW_EFORMAT: return "malformed data";
	case SW_ETRUNC: return "truncated data";
	case SW_ETYPE: return "wrong type";
	case SW_ENOENT: return "no such field";
	case SW_ERANGE: return "value out of range";
	case SW_ETOOBIG: return "too large";
	case SW_EEMPTY: return "empty input";
	case SW_EINVAL: return "invalid argument";
	case SW_EPIPE: return "broken pipe";
	default: return "unknown error";
	}
}

char *sw_error_str(const sw_error *e, char *buf, size_t size)
{
	const char *msg = e->msg[0] ? e->msg : sw_strerror(e->code);
	if (e->line)
		snprintf(buf, size, "line %llu, column %llu: %s",
		         (unsigned long long)e->line, (unsigned long long)e->column, msg);
	else if (e->record)
		snprintf(buf, size, "record %llu (byte %llu): %s",
		         (unsigned long long)e->record, (unsigned long long)e->offset, msg);
	else
		snprintf(buf, size, "%s", msg);
	return buf;
}

const char *sw_version(void)
{
	return SW_VERSION;
}
