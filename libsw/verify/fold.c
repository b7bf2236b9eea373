/*
 * fold.c - text folded for comparing: what a safety rule reads, what
 * exact compares.
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
 *  - with SW_FOLD_NOMARKS (the blocklist's nomarks flag), the marks
 *    removed in that NFKC (utf8proc's STRIPMARK: the text decomposed, its
 *    nonspacing, spacing and enclosing marks dropped, composed again):
 *    accents, strike-through and underline overlays, enclosing circles;
 *  - with SW_FOLD_CONFUSABLES (the blocklist's confusables flag), then the
 *    letters of other scripts that read as an ASCII letter become that
 *    letter (Cyrillic "о", Greek "ο" and Armenian "օ" become "o"): the 325
 *    of confusables.h, from Unicode's confusables (UTS #39) by
 *    tools/gen_confusables.c; and NFKC again, so that a letter made Latin
 *    composes with a mark after it as the Latin letter does.
 *
 * Case is left to the rule (its ci flag): see sw-verify(1).
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
#include "verify/confusables.h"

#define RULES_OPTS_ (UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_IGNORE)
#define NFC_OPTS_ (UTF8PROC_STABLE | UTF8PROC_COMPOSE)

/* Is cp a control character other than white space (what the rules' fold drops)? */
static int dropped_control_(utf8proc_int32_t cp)
{
	if (cp >= 0x09 && cp <= 0x0d)
		return 0;
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f && cp != 0x85);
}

/*
 * The length of the code point at s[0..n) when the fold leaves it as it
 * is whatever stands beside it ("inert"), else 0: ASCII but the controls
 * the rules' fold drops, and the letters, numbers, punctuation, symbols
 * and spaces (General Categories L, N, P, S, Z) without a decomposition
 * or a combining class that are not ignorable (Cyrillic, Hebrew, Arabic,
 * Devanagari, kana and CJK letters, Hangul syllables; not "é" nor "й"),
 * but for the Hangul jamo; with SW_FOLD_CASE only those without a case
 * folding (the confusables map those copied after, confusables_map_).
 * *cp: the code point.
 * None is the second of a composition (those that are, in Unicode 15,
 * are marks and Hangul's vowel and final jamo), so the code point before
 * one does not change with it.
 * Between two of them the text is folded in pieces, each by utf8proc, the
 * inert code point before a piece taken into it (it may be the first of a
 * composition), and a short run between two pieces folded with them (one
 * call of utf8proc for a line of accented words, not one a word): what
 * the whole text folded at once gives, without its cost (fuzz_blocklist
 * checks the two agree).
 */
static size_t inert_at_(const unsigned char *s, size_t n, int how, utf8proc_int32_t *cp)
{
	*cp = s[0];
	if (s[0] < 0x80)
		return !dropped_control_(s[0]);
	if (n >= 3 && s[0] >= 0xe4 && s[0] <= 0xe9 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
		*cp = (s[0] & 0x0f) << 12 | (s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		if (*cp >= 0x4e00 && *cp <= 0x9fff) /* CJK ideographs: at once */
			return 3;
	}
	utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)n, cp);
	if (k < 2 || (*cp >= 0x1100 && *cp <= 0x11ff) || (*cp >= 0xa960 && *cp <= 0xa97f) ||
	    (*cp >= 0xd7b0 && *cp <= 0xd7ff))
		return 0;
	const utf8proc_property_t *p = utf8proc_get_property(*cp);
	switch (p->category) {
	case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC:
	case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
	case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
	case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
	case UTF8PROC_CATEGORY_SO: case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP:
		break;
	default: /* marks, controls, format characters, unassigned, private use */
		return 0;
	}
	if (p->decomp_seqindex != UINT16_MAX || p->combining_class || p->ignorable ||
	    ((how & SW_FOLD_CASE) && p->casefold_seqindex != UINT16_MAX))
		return 0;
	return (size_t)k;
}

int sw_fold_confusable(uint32_t cp)
{
	size_t lo = 0, hi = sizeof confusables_ / sizeof *confusables_;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (confusables_[mid].cp == cp)
			return confusables_[mid].to;
		if (confusables_[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/*
 * The letters of d[0..*n) that read as an ASCII letter made that letter,
 * in place (each takes two bytes or more, its letter one).  1 when a mark
 * follows a letter so made: the text may be in NFKC no more (every
 * composition with an ASCII letter first has a mark second); else 0.
 */
static int confusables_map_(utf8proc_uint8_t *d, utf8proc_ssize_t *n)
{
	utf8proc_ssize_t i = 0, o = 0;
	int made = 0, renorm = 0;
	while (i < *n) {
		utf8proc_int32_t cp = d[i];
		utf8proc_ssize_t k = d[i] < 0x80 ? 1 : utf8proc_iterate(d + i, *n - i, &cp);
		if (k < 1)
			k = 1, cp = -1; /* not UTF-8 (utf8proc wrote it: never), kept as it is */
		if (made && cp >= 0x300) {
			utf8proc_category_t c = utf8proc_category(cp);
			renorm |= c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
			          c == UTF8PROC_CATEGORY_ME;
		}
		int to = k > 1 ? sw_fold_confusable((uint32_t)cp) : 0;
		made = to != 0;
		if (to) {
			d[o++] = (utf8proc_uint8_t)to;
		} else {
			if (o != i)
				memmove(d + o, d + i, (size_t)k);
			o += k;
		}
		i += k;
	}
	*n = o;
	return renorm;
}

/* Inert runs shorter than this, between two code points the fold may change, are folded with them. */
#define SHORT_RUN_ 16

/* Append the fold of the valid UTF-8 in seg to out. */
static int map_(sw_buf *seg, int how, sw_buf *out)
{
	utf8proc_uint8_t *dst = NULL;
	utf8proc_option_t opts = (how & SW_FOLD_RULES ? RULES_OPTS_ : NFC_OPTS_) |
	                         (how & SW_FOLD_CASE ? UTF8PROC_CASEFOLD : 0) |
	                         (how & SW_FOLD_NOMARKS ? UTF8PROC_STRIPMARK : 0);
	utf8proc_ssize_t m = utf8proc_map(seg->p, (utf8proc_ssize_t)seg->len, &dst, opts);
	if (m < 0)
		return SW_ENOMEM; /* valid UTF-8: only memory or size can fail */
	if ((how & SW_FOLD_CONFUSABLES) && confusables_map_(dst, &m)) {
		/* a letter made Latin composes with the mark after it (Cyrillic "о"
		 * and U+0301 become "ó", as Latin "o" and U+0301 do) */
		utf8proc_uint8_t *again = NULL;
		utf8proc_ssize_t m2 = utf8proc_map(dst, m, &again, opts);
		free(dst);
		if (m2 < 0)
			return SW_ENOMEM;
		dst = again, m = m2;
	}
	int rc = sw_buf_put(out, dst, (size_t)m) ? SW_ENOMEM : 0;
	free(dst);
	return rc;
}

/* Is s[0..n) ASCII the fold leaves as it is (no control it drops)? */
static int plain_(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80 || dropped_control_((unsigned char)s[i]))
			return 0;
	return 1;
}

int sw_fold_text(const char *s, size_t n, int how, sw_buf *out, const char **text, size_t *len)
{
	if (!(how & SW_FOLD_CASE) && plain_(s, n)) {
		*text = s; /* nothing to change: no copy */
		*len = n;
		return 0;
	}
	out->len = 0;
	sw_buf seg = { 0 };
	int rc = 0;
	/* the inert code point out ends with: its bytes there (0 when none), and as written */
	size_t tail = 0, tail_n = 0;
	const char *tail_s = NULL;
	for (size_t i = 0; i < n && !rc;) {
		/* a run of inert code points, at once */
		size_t j = i, k;
		utf8proc_int32_t cp, last = 0;
		int wide = 0; /* a code point above ASCII in the run */
		while (j < n && (k = inert_at_((const unsigned char *)s + j, n - j, how, &cp)))
			tail = k, tail_s = s + j, tail_n = k, last = cp, wide |= k > 1, j += k;
		if (j > i && seg.len && j < n && j - i < SHORT_RUN_) {
			/* a short run inside a piece (the space between two accented words)
			 * goes into the piece: one call of utf8proc, not one a word */
			if ((rc = sw_buf_put(&seg, s + i, j - i) ? SW_ENOMEM : 0))
				break;
			tail = 0;
			i = j;
			continue;
		}
		if (j > i) {
			if (seg.len && (rc = map_(&seg, how, out)))
				break;
			seg.len = 0;
			size_t at = out->len;
			if ((rc = sw_buf_put(out, s + i, j - i) ? SW_ENOMEM : 0))
				break;
			for (size_t q = at; (how & SW_FOLD_CASE) && q < out->len; q++)
				if (out->p[q] >= 'A' && out->p[q] <= 'Z')
					out->p[q] = (uint8_t)(out->p[q] - 'A' + 'a');
			if ((how & SW_FOLD_CONFUSABLES) && wide) {
				/* no mark in the run: it stays in NFKC (its last code point may yet
				 * go into the next piece, as written: out holds its letter) */
				utf8proc_ssize_t m = (utf8proc_ssize_t)(out->len - at);
				confusables_map_(out->p + at, &m);
				out->len = at + (size_t)m;
				if (sw_fold_confusable((uint32_t)last))
					tail = 1;
			}
			i = j;
			continue;
		}
		utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		if (len <= 0) {
			i++; /* not UTF-8: one byte dropped, the next tried */
			continue;
		}
		if (!((how & SW_FOLD_RULES) && dropped_control_(cp))) {
			/* the inert code point before it may compose with it (e + U+0301; Cyrillic
			 * "а" + U+0308 is "ӓ", no confusable): it goes along, as written */
			if (!seg.len && tail) {
				out->len -= tail;
				rc = sw_buf_put(&seg, tail_s, tail_n) ? SW_ENOMEM : 0;
			}
			tail = 0;
			if (!rc)
				rc = sw_buf_put(&seg, s + i, (size_t)len) ? SW_ENOMEM : 0;
		}
		i += (size_t)len;
	}
	if (!rc && seg.len)
		rc = map_(&seg, how, out);
	if (!rc)
		rc = sw_buf_put(out, "", 1) ? SW_ENOMEM : 0;
	sw_buf_release(&seg);
	if (rc)
		return rc;
	*text = (const char *)out->p;
	*len = --out->len; /* the NUL after it, not counted */
	return 0;
}
