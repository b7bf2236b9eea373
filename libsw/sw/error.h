/*
 * sw/error.h - error codes and the error record libsw fills.
 *
 * libsw never prints and never exits.  A call that fails returns a negative
 * SW_E* code and, where it is given an sw_error, says where and why in it;
 * the programs turn that into a message.  Records are numbered from 1, as
 * lines are; byte offsets count from 0 in the (decompressed) stream.
 */
#ifndef SW_ERROR_H
#define SW_ERROR_H

#include <stddef.h>
#include <stdint.h>

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

enum {
	SW_OK = 0,
	SW_EIO = -1,     /* read or write failed; sys_errno says why */
	SW_ENOMEM = -2,  /* out of memory */
	SW_EFORMAT = -3, /* malformed stream or record */
	SW_ETRUNC = -4,  /* the stream ends inside a record or frame */
	SW_ETYPE = -5,   /* a value has another type than asked for */
	SW_ENOENT = -6,  /* no such field */
	SW_ERANGE = -7,  /* a value does not fit, or a buffer is too small */
	SW_ETOOBIG = -8, /* a record or field exceeds the size limit */
	SW_EEMPTY = -9,  /* the input holds no data at all */
	SW_EINVAL = -10, /* bad argument */
	SW_EPIPE = -11   /* the reader of our output went away */
};

typedef struct sw_error {
	int code;        /* SW_E*, or SW_OK */
	int sys_errno;   /* errno for SW_EIO/SW_EPIPE, else 0 */
	uint64_t record; /* 1-based record number, 0 when not about a record */
	uint64_t offset; /* byte offset of the problem in the stream */
	uint64_t line;   /* 1-based line for JSON input, else 0 */
	uint64_t column; /* 1-based column for JSON input, else 0 */
	char msg[240];   /* what went wrong, lowercase, no location */
} sw_error;

/* A short constant description of an SW_E* code. */
const char *sw_strerror(int code);

/*
 * Write "record 17 (byte 3456): MSG" or "line 5, column 3: MSG" into buf
 * (always NUL-terminated); returns buf.
 */
char *sw_error_str(const sw_error *e, char *buf, size_t size);

/*
 * text[0..n) as a one-line message may show it, into out (always
 * NUL-terminated; returns out): each byte of a control character (C0 and
 * tab among them, DEL, C1) or of no UTF-8 character, and with quoted a
 * double quote or a backslash, as \xHH, so that a name or a line from
 * elsewhere can neither break the line nor drive the terminal.  Cut at a
 * character's start where it does not fit, "..." after it.
 */
char *sw_show_text(char *out, size_t size, const void *text, size_t n, int quoted);

#pragma GCC visibility pop

#endif
