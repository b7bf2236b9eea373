/* util.c - the growable buffer, error strings, text shown in them, the version. */
#include <stdbool.h>
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

/* Bytes of the UTF-8 character at k[0..n), 0 when what is there is none. */
static size_t char_len_(const unsigned char *k, size_t n)
{
	size_t len = k[0] < 0x80 ? 1 : k[0] >= 0xc2 && k[0] <= 0xdf ? 2 : k[0] >= 0xe0 && k[0] <= 0xef ? 3
	           : k[0] >= 0xf0 && k[0] <= 0xf4                   ? 4
	                                                             : 0;
	return len && len <= n && !sw_utf8_check(k, len, NULL) ? len : 0;
}

char *sw_show_text(char *out, size_t size, const void *text, size_t n, int quoted)
{
	const unsigned char *k = text;
	size_t o = 0, i = 0;
	if (!size)
		return out;
	while (i < n) {
		size_t len = char_len_(k + i, n - i);
		/* C0, DEL, C1 (U+0080..U+009F), a byte of no character: each byte as \xHH */
		bool esc = !len || k[i] < 0x20 || k[i] == 0x7f || (k[i] == 0xc2 && k[i + 1] < 0xa0) ||
		           (quoted && (k[i] == '"' || k[i] == '\\'));
		size_t bytes = len ? len : 1, need = esc ? 4 * bytes : bytes;
		if (o + need + 4 > size) /* room for "..." and the NUL after it */
			break;
		for (size_t b = 0; b < bytes; b++)
			o += esc ? (size_t)snprintf(out + o, size - o, "\\x%02x", k[i + b]) : (out[o] = (char)k[i + b], 1);
		i += bytes;
	}
	snprintf(out + o, size - o, "%s", i < n && size >= 4 ? "..." : "");
	return out;
}

const char *sw_version(void)
{
	return SW_VERSION;
}
