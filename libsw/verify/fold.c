/*
 * fold.c - the text a safety rule reads.
 *
 * A blocklist rule written "make a bomb" must not be passed by the same
 * words written in fullwidth letters, mathematical bold, with a zero-width
 * space or a soft hyphen inside, or with no-break spaces between: each
 * reads the same to a person and differs byte for byte.  The blocklist
 * matches its rules against the response folded here:
 *
 *  - bytes that are not UTF-8 are dropped (PCRE2 would never match across
 *    them), and so are control characters other than whitespace (TAB, LF,
 *    VT, FF, CR, NEL): NUL, ESC, DEL, the C1 controls;
 *  - then Unicode NFKC (compatibility characters become their plain form:
 *    fullwidth and mathematical letters, ligatures, no-break and em spaces,
 *    superscripts) with default-ignorable code points removed (zero-width
 *    spaces and joiners, soft hyphens, variation selectors, bidi controls,
 *    word joiners), by utf8proc.
 *
 * Case is left to the rule (its ci flag), and marks and look-alike letters
 * of other scripts (Cyrillic "о" for Latin "o") are not folded: see
 * sw-verify(1).
 *
 * The exact verifier compares a response with its label folded less: in
 * NFC (the same text, composed or not, compares equal), with ci in
 * Unicode's full case folding ("STRASSE" and "Straße", "ΣΟΦΌΣ" and
 * "σοφός").
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "common/internal.h"
#include "verify/verify_internal.h"

#define RULES_OPTS_ (UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_IGNORE)
#define NFC_OPTS_ (UTF8PROC_STABLE | UTF8PROC_COMPOSE)

/* Does a control character that is not whitespace start at cp? */
static int dropped_control_(utf8proc_int32_t cp)
{
	if (cp >= 0x09 && cp <= 0x0d)
		return 0;
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f && cp != 0x85);
}

/* Is s[0..n) printable ASCII and whitespace only, which the fold leaves as it is? */
static int plain_(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x7f || (c < 0x20 && (c < 0x09 || c > 0x0d)))
			return 0;
	}
	return 1;
}

int sw_fold_text(const char *s, size_t n, int how, sw_buf *out, const char **text, size_t *len)
{
	if (plain_(s, n)) {
		if (!(how & SW_FOLD_CASE)) {
			*text = s;
			*len = n;
			return 0;
		}
		out->len = 0;
		if (sw_buf_reserve(out, n + 1))
			return SW_ENOMEM;
		for (size_t i = 0; i < n; i++)
			out->p[i] = (uint8_t)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
		out->p[n] = 0;
		*text = (const char *)out->p;
		*len = n;
		return 0;
	}
	out->len = 0;
	const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
	size_t i = 0;
	while (i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &cp);
		if (k <= 0) {
			i++; /* not UTF-8: one byte dropped, the next tried */
			continue;
		}
		if (!((how & SW_FOLD_RULES) && dropped_control_(cp)) && sw_buf_put(out, s + i, (size_t)k))
			return SW_ENOMEM;
		i += (size_t)k;
	}
	if (!out->len) {
		*text = "";
		*len = 0;
		return 0;
	}
	utf8proc_uint8_t *dst = NULL;
	utf8proc_option_t opts = (how & SW_FOLD_RULES ? RULES_OPTS_ : NFC_OPTS_) |
	                         (how & SW_FOLD_CASE ? UTF8PROC_CASEFOLD : 0);
	utf8proc_ssize_t m = utf8proc_map(out->p, (utf8proc_ssize_t)out->len, &dst, opts);
	if (m < 0)
		return SW_ENOMEM; /* valid UTF-8 by now: only memory or size can fail */
	out->len = 0;
	int rc = sw_buf_put(out, dst, (size_t)m) || sw_buf_put(out, "", 1) ? SW_ENOMEM : 0;
	free(dst);
	if (rc)
		return rc;
	*text = (const char *)out->p;
	*len = (size_t)m;
	return 0;
}
