/*
 * fuzz_audit_log.c - libFuzzer target for the audit log's verifier
 * (sw_audit_verify in libsw/run/audit.c).  The log is what someone who
 * tampers with a run edits, so its verifier reads bytes nobody vouches for,
 * and `sw-audit show` puts what it reads on a terminal.
 *
 * The input is written as the audit.log of an empty run directory and
 * verified.  What must hold:
 *
 *  - the result is 0 or the error's code, negative, with a message that
 *    holds no control byte; a refusal of a record names it (err.record
 *    from 1) and the byte its line starts (err.offset, inside the input);
 *  - verified twice, the same result and report;
 *  - accepted, the input is whole lines, one record each: the callback saw
 *    records 1, 2, ... in order, each its own line of the input, with an
 *    event of a-z, 0-9 and _, a time, a hash and fields free of control
 *    bytes; the report counts them and its head is the last line's hash;
 *  - the resume check (sw_audit_check_checkpoint) of a checkpoint that is not
 *    there refuses it, with a message free of control bytes; of a log verify
 *    accepts, because no record names it or its directory is missing;
 *  - accepted, the log with one byte changed (chosen from the input's
 *    bytes, anywhere but in a signature's hex digits, which nothing checks
 *    without a public key) is refused: the chain makes every edit show.
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_audit_log/)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/audit.h"
#include "sw/error.h"

#define FUZZ_NAME "fuzz_audit_log"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

typedef struct seen {
	const char *data;
	size_t size;
	uint64_t n;     /* records seen */
	size_t next;    /* where the next record's line must start */
	char last[SW_DIGEST_HEX];
} seen;

static int no_controls_(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20)
			return 0;
	return 1;
}

static int entry_(const sw_audit_entry *e, void *ud)
{
	seen *s = ud;
	CHECK(e->seq == s->n + 1, "record %llu after %llu", (unsigned long long)e->seq, (unsigned long long)s->n);
	CHECK(s->next + e->len < s->size && !memcmp(e->line, s->data + s->next, e->len) &&
	              s->data[s->next + e->len] == '\n' && !memchr(e->line, '\n', e->len),
	      "record %llu is not the input's next whole line", (unsigned long long)e->seq);
	size_t ne = strlen(e->event);
	CHECK(ne >= 1 && ne <= 64 && strspn(e->event, "abcdefghijklmnopqrstuvwxyz0123456789_") == ne,
	      "event '%s'", e->event);
	CHECK(no_controls_(e->time) && no_controls_(e->fields), "a control byte shown: time or fields");
	CHECK(strlen(e->hash) == 64 && strspn(e->hash, "0123456789abcdef") == 64, "hash '%s'", e->hash);
	memcpy(s->last, e->hash, SW_DIGEST_HEX);
	s->n++;
	s->next += e->len + 1;
	return 0;
}

/* The log at path holds data; verify it, check what every verification must give. */
static int verify_(const char *dir, const char *path, const uint8_t *data, size_t size, seen *s,
                   sw_audit_report *rep, sw_error *err)
{
	tmp_put(path, data, size);
	*s = (seen){ (const char *)data, size, 0, 0, "" };
	memset(err, 0, sizeof *err);
	memset(rep, 0, sizeof *rep);
	int rc = sw_audit_verify(dir, NULL, entry_, s, rep, err);
	if (rc) {
		CHECK(rc < 0 && rc == err->code, "return %d, error code %d", rc, err->code);
		CHECK(err->msg[0] && no_controls_(err->msg), "message '%s'", err->msg);
		if (rc != SW_EEMPTY && rc != SW_ENOMEM)
			CHECK(err->record >= 1 && err->offset < size, "refused at record %llu, byte %llu of %zu",
			      (unsigned long long)err->record, (unsigned long long)err->offset, size);
	}
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[320];
	const char *dir = fuzz_tmp();
	snprintf(path, sizeof path, "%s/audit.log", dir);
	seen s, s2;
	sw_audit_report r, r2;
	sw_error e, e2;
	int rc = verify_(dir, path, data, size, &s, &r, &e);
	int rc2 = verify_(dir, path, data, size, &s2, &r2, &e2);
	CHECK(rc == rc2 && !memcmp(&r, &r2, sizeof r) && !strcmp(e.msg, e2.msg), "verified twice, differently");
	/* the resume check's reading of the same log (sw-run --resume): no checkpoint directory exists here,
	 * so whatever the log says it is refused, with a message fit for a terminal */
	char dg[SW_DIGEST_HEX];
	sw_error e3 = { 0 };
	int rc3 = sw_audit_check_checkpoint(dir, "ckpt/iter-0001", dg, NULL, &e3);
	CHECK(rc3 < 0 && rc3 == e3.code && e3.msg[0] && no_controls_(e3.msg), "a checkpoint that is not there: %d: %s",
	      rc3, e3.msg);
	CHECK(rc || (rc3 == SW_EFORMAT && (strstr(e3.msg, "no record of the audit log names it") ||
	                                   strstr(e3.msg, "is missing"))),
	      "a log verify accepts, but the resume check says: %s", e3.msg);
	if (!rc) {
		CHECK(size > 0 && data[size - 1] == '\n' && s.next == size, "accepted, but not whole lines");
		CHECK(r.records == s.n && s.n >= 1, "report of %llu records, %llu seen", (unsigned long long)r.records,
		      (unsigned long long)s.n);
		CHECK(!strcmp(r.head, s.last), "head %s, last record's hash %s", r.head, s.last);
		/* one byte changed, where the input's bytes say, outside a signature's hex digits */
		uint64_t h = 1469598103934665603ull;
		for (size_t i = 0; i < size; i++)
			h = (h ^ data[i]) * 1099511628211ull;
		size_t at = (size_t)(h % size);
		const char *sig = NULL;
		for (const char *q = (const char *)data; (q = memmem(q, size - (size_t)(q - (const char *)data),
		                                                   ",\"sig\":\"", 8));
		     q += 8)
			if ((size_t)(q + 8 - (const char *)data) <= at && at < (size_t)(q + 8 + 128 - (const char *)data))
				sig = q;
		if (!sig) {
			uint8_t *t = malloc(size);
			CHECK(t != NULL, "out of memory");
			memcpy(t, data, size);
			t[at] ^= 1;
			rc = verify_(dir, path, t, size, &s2, &r2, &e2);
			CHECK(rc != 0, "byte %zu changed (0x%02x to 0x%02x), the log still verifies", at, data[at], t[at]);
			free(t);
		}
	}
	return 0;
}
