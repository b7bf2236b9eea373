/*
 * verify_reply.c - the parser of what an exec verifier answers: one line,
 * {"score": x, "violations": ["name", ...]}, or {"error": "why"} when the
 * verifier itself cannot score the sample.  Everything else is refused with
 * a reason, because a reply we misread would turn into a reward: a score
 * must be a finite number, violations an array of non-empty strings, and
 * nothing may follow the object on the line.  Unknown keys are allowed, so
 * a verifier can say more (for its own logs) without breaking us.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"

#define REPLY_MAX_DEPTH_NOTE "a reply is one JSON object"

/* A printable excerpt of the line for messages: at most 40 bytes, controls as '?'. */
static void excerpt_(const char *s, size_t n, char *out, size_t size)
{
	size_t k = 0, lim = size - 4 < 40 ? size - 4 : 40;
	for (size_t i = 0; i < n && k < lim; i++)
		out[k++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (n > lim)
		out[k++] = '.', out[k++] = '.', out[k++] = '.';
	out[k] = 0;
}

int sw_verify_parse_reply(const char *line, size_t n, double *score, char *names,
                          size_t names_size, unsigned *nnames, unsigned max, char *err,
                          size_t errlen)
{
	char ex[48];
	yyjson_read_err re;
	*nnames = 0;
	if (names_size)
		names[0] = 0;
	while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	/* yyjson reads without changing the text when not told INSITU */
	yyjson_doc *doc = yyjson_read_opts((char *)(uintptr_t)line, n, 0, NULL, &re);
	if (!doc) {
		excerpt_(line, n, ex, sizeof ex);
		snprintf(err, errlen, "garbage reply '%s': %s at byte %zu", ex, re.msg, re.pos);
		return SW_EFORMAT;
	}
	int rc = SW_EFORMAT;
	yyjson_val *root = yyjson_doc_get_root(doc);
	if (!yyjson_is_obj(root)) {
		excerpt_(line, n, ex, sizeof ex);
		snprintf(err, errlen, "garbage reply '%s': %s", ex, REPLY_MAX_DEPTH_NOTE);
		goto out;
	}
	const char *tw;
	size_t twn;
	int tr = sw_json_twin(root, &tw, &twn);
	if (tr) {
		/* {"score": 1, "score": 0}: which one the verifier meant is not ours to guess */
		if (tr == 1)
			excerpt_(tw, twn, ex, sizeof ex);
		snprintf(err, errlen, tr == 1 ? "bad reply: the name '%s' appears twice in an object" : "%s",
		         tr == 1 ? ex : "out of memory");
		rc = tr == 1 ? SW_EFORMAT : tr;
		goto out;
	}
	yyjson_val *e = yyjson_obj_get(root, "error");
	if (e) {
		if (yyjson_is_str(e)) {
			excerpt_(yyjson_get_str(e), yyjson_get_len(e), ex, sizeof ex);
			snprintf(err, errlen, "the verifier says: %s", ex);
		} else {
			snprintf(err, errlen, "bad reply: 'error' is not a string");
		}
		goto out;
	}
	yyjson_val *s = yyjson_obj_get(root, "score");
	if (!s) {
		excerpt_(line, n, ex, sizeof ex);
		snprintf(err, errlen, "bad reply '%s': no 'score'", ex);
		goto out;
	}
	if (!yyjson_is_num(s)) {
		snprintf(err, errlen, "bad reply: 'score' is not a number");
		goto out;
	}
	double x = yyjson_get_num(s);
	if (!isfinite(x)) {
		snprintf(err, errlen, "bad reply: 'score' is not finite");
		goto out;
	}
	yyjson_val *v = yyjson_obj_get(root, "violations");
	size_t used = 0;
	if (v && !yyjson_is_null(v)) {
		if (!yyjson_is_arr(v)) {
			snprintf(err, errlen, "bad reply: 'violations' is not an array");
			goto out;
		}
		size_t i, cnt;
		yyjson_val *it;
		yyjson_arr_foreach(v, i, cnt, it) {
			if (!yyjson_is_str(it) || yyjson_get_len(it) == 0) {
				snprintf(err, errlen, "bad reply: violation %zu is not a non-empty string", i + 1);
				goto out;
			}
			if (*nnames >= max) {
				snprintf(err, errlen, "bad reply: more than %u violations", max);
				goto out;
			}
			size_t len = yyjson_get_len(it);
			const char *str = yyjson_get_str(it);
			if (memchr(str, 0, len)) {
				snprintf(err, errlen, "bad reply: violation %zu holds a NUL byte", i + 1);
				goto out;
			}
			if (used + len + 1 > names_size) {
				snprintf(err, errlen, "bad reply: violation names longer than %zu bytes", names_size);
				goto out;
			}
			memcpy(names + used, str, len);
			names[used + len] = 0;
			used += len + 1;
			++*nnames;
		}
	}
	*score = x;
	rc = 0;
out:
	yyjson_doc_free(doc);
	return rc;
}
