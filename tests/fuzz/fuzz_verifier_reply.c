/*
 * fuzz_verifier_reply.c - libFuzzer target for the parser of exec verifier
 * replies (sw_verify_parse_reply in libsw/verify_reply.c): the bytes a
 * program we do not trust writes back, one line per sample.
 *
 * The input is split at newlines, as the pool splits a worker's output, and
 * each line is parsed.  What must hold:
 *
 *  - the result is 0 or SW_EFORMAT, and the same when parsed again;
 *  - on success the score is finite, and names holds exactly nnames
 *    non-empty NUL-terminated strings, at most the maximum, within the buffer;
 *  - on failure the reason is a NUL-terminated line with no control bytes
 *    (it ends up in a sample's verifier_error and on a terminal);
 *  - a reply accepted is accepted again, with the same score and names,
 *    after writing it out anew as {"score": %.17g, "violations": [...]}.
 *
 *   make fuzz                  (builds into build-fuzz/)
 *   make test                  (replays tests/fuzz/seeds/fuzz_verifier_reply/)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"

#define MAXV 16

#define CHECK(cond, ...)                                                                \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "fuzz_verifier_reply: %s:%d: check failed: %s: ",   \
			        __FILE__, __LINE__, #cond);                             \
			fprintf(stderr, __VA_ARGS__);                                   \
			fputc('\n', stderr);                                            \
			abort();                                                        \
		}                                                                       \
	} while (0)

typedef struct parsed {
	int rc;
	double score;
	unsigned n;
	char names[1024];
	char why[300];
} parsed;

static void parse_(const char *p, size_t n, parsed *r)
{
	memset(r, 0x55, sizeof *r); /* what the parser leaves alone shows */
	r->rc = sw_verify_parse_reply(p, n, &r->score, r->names, sizeof r->names, &r->n, MAXV, r->why,
	                              sizeof r->why);
}

/* The names as a JSON array, escaped. */
static void put_names_(sw_buf *b, const parsed *r)
{
	size_t off = 0;
	sw_buf_put(b, "[", 1);
	for (unsigned i = 0; i < r->n; i++) {
		const char *s = r->names + off;
		size_t len = strlen(s);
		if (i)
			sw_buf_put(b, ",", 1);
		sw_buf_put(b, "\"", 1);
		for (size_t k = 0; k < len; k++) {
			unsigned char c = (unsigned char)s[k];
			char esc[8];
			if (c == '"' || c == '\\') {
				esc[0] = '\\';
				esc[1] = (char)c;
				sw_buf_put(b, esc, 2);
			} else if (c < 0x20) {
				snprintf(esc, sizeof esc, "\\u%04x", c);
				sw_buf_put(b, esc, 6);
			} else {
				sw_buf_put(b, &s[k], 1);
			}
		}
		sw_buf_put(b, "\"", 1);
		off += len + 1;
	}
	sw_buf_put(b, "]", 1);
}

static void line_(const char *p, size_t n)
{
	parsed a, b;
	parse_(p, n, &a);
	CHECK(a.rc == 0 || a.rc == SW_EFORMAT, "rc %d", a.rc);
	parse_(p, n, &b);
	CHECK(a.rc == b.rc, "parsed twice: %d, then %d", a.rc, b.rc);
	if (a.rc) {
		CHECK(memchr(a.why, 0, sizeof a.why) != NULL, "reason not terminated");
		for (const char *w = a.why; *w; w++)
			CHECK((unsigned char)*w >= 0x20 && *w != 0x7f, "control byte %02x in the reason", (unsigned char)*w);
		return;
	}
	CHECK(isfinite(a.score), "score %g", a.score);
	CHECK(a.n <= MAXV, "%u names", a.n);
	size_t off = 0;
	for (unsigned i = 0; i < a.n; i++) {
		CHECK(off < sizeof a.names, "name %u starts past the buffer", i);
		const char *end = memchr(a.names + off, 0, sizeof a.names - off);
		CHECK(end != NULL, "name %u not terminated", i);
		CHECK(end > a.names + off, "name %u is empty", i);
		off = (size_t)(end - a.names) + 1;
	}
	CHECK(a.score == b.score && a.n == b.n && !memcmp(a.names, b.names, off), "parsed twice, differently");

	sw_buf out = { 0 };
	char num[64];
	snprintf(num, sizeof num, "{\"score\": %.17g, \"violations\": ", a.score);
	sw_buf_put(&out, num, strlen(num));
	put_names_(&out, &a);
	sw_buf_put(&out, "}", 1);
	parse_((const char *)out.p, out.len, &b);
	CHECK(b.rc == 0, "written anew, refused: %s: %.*s", b.why, (int)out.len, (const char *)out.p);
	CHECK(b.score == a.score, "score %.17g became %.17g", a.score, b.score);
	CHECK(b.n == a.n && !memcmp(a.names, b.names, off), "names changed when written anew");
	sw_buf_release(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	while (p <= end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		line_(p, n);
		if (!nl)
			break;
		p = nl + 1;
	}
	return 0;
}
