/*
 * test_fold.c - the folds of libsw/verify/fold.c (what a blocklist's rules
 * read; what exact and exact,ci compare) against
 * tests/fixtures/fold/refs.txt, made by tests/fixtures/make_fold_refs.py
 * with Python's unicodedata (NFKC, NFC), str.casefold, the regex module
 * (default-ignorable code points) and ICU's UTS #39 skeletons (PyICU, for
 * the confusables fold), with and without marks: every code point Python's
 * Unicode assigns, alone, and whole texts (composition across code points,
 * ignorables between a letter and its mark, bytes that are not UTF-8,
 * letters made Latin before a mark).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "common/internal.h"
#include "verify/verify_internal.h"
#include "tap.h"

#define MAP_MAX_ 12000

typedef struct map_ {
	uint32_t cp;
	char out[80]; /* UTF-8 of what it becomes */
	size_t n;
} map_;

/* the fixture's modes, and how sw_fold_text is asked for each */
static const char *const modes_[] = { "rules", "nfc", "case", "conf", "marks" };
static const int how_[] = { SW_FOLD_RULES, SW_FOLD_NFC, SW_FOLD_CASE,
                            SW_FOLD_RULES | SW_FOLD_CONFUSABLES, SW_FOLD_RULES | SW_FOLD_NOMARKS };
#define NMODES_ 5

static map_ maps_[NMODES_][MAP_MAX_];
static size_t nmaps_[NMODES_];

static int mode_(const char *name)
{
	for (int i = 0; i < NMODES_; i++)
		if (!strcmp(name, modes_[i]))
			return i;
	return -1;
}

static size_t put_utf8_(char *p, uint32_t cp)
{
	return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)p);
}

static const map_ *find_(int mode, uint32_t cp)
{
	const map_ *m = maps_[mode];
	size_t lo = 0, hi = nmaps_[mode];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nmaps_[mode] && m[lo].cp == cp ? &m[lo] : NULL;
}

/* hex text ("-" for none) into bytes; its length, or -1 */
static long unhex_(const char *h, char *out, size_t cap)
{
	if (!strcmp(h, "-"))
		return 0;
	size_t n = strlen(h);
	if (n % 2 || n / 2 > cap)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned x;
		if (sscanf(h + 2 * i, "%2x", &x) != 1)
			return -1;
		out[i] = (char)x;
	}
	return (long)(n / 2);
}

/* Fold every code point of [first, last] alone, each way; how many differ from the reference. */
static size_t range_(uint32_t first, uint32_t last, sw_buf *b, size_t *shown)
{
	size_t bad = 0;
	for (uint32_t cp = first; cp <= last; cp++)
		for (int mode = 0; mode < NMODES_; mode++) {
			char in[8];
			size_t n = put_utf8_(in, cp);
			const char *t;
			size_t tn;
			if (sw_fold_text(in, n, how_[mode], b, &t, &tn)) {
				bad++;
				continue;
			}
			const map_ *m = find_(mode, cp);
			const char *want = m ? m->out : in;
			size_t wn = m ? m->n : n;
			if (tn != wn || memcmp(t, want, wn)) {
				bad++;
				if ((*shown)++ < 10)
					printf("#   %s: U+%04X folds to %zu bytes, the reference to %zu\n", modes_[mode],
					       (unsigned)cp, tn, wn);
			}
		}
	return bad;
}

int main(void)
{
	const char *top = getenv("SW_TOP");
	char path[512];
	snprintf(path, sizeof path, "%s/tests/fixtures/fold/refs.txt", top ? top : ".");
	FILE *fp = fopen(path, "r");
	ok(fp != NULL, "open %s", path);
	if (!fp)
		return tap_done();

	/* the code points the fold changes, then the ranges and texts against them */
	char line[4096];
	while (fgets(line, sizeof line, fp)) {
		char name[16];
		int k, mode;
		if (sscanf(line, "cp %15s %n", name, &k) != 1 || (mode = mode_(name)) < 0 ||
		    nmaps_[mode] == MAP_MAX_)
			continue;
		map_ *m = &maps_[mode][nmaps_[mode]++];
		char *p = line + k, *end;
		m->cp = (uint32_t)strtoul(p, &end, 16);
		for (p = end; *p == ' ';) {
			uint32_t o = (uint32_t)strtoul(p, &end, 16);
			if (end == p || m->n + 4 > sizeof m->out)
				break;
			m->n += put_utf8_(m->out + m->n, o);
			p = end;
		}
	}
	for (int mode = 0; mode < NMODES_; mode++) {
		int order = 1;
		for (size_t i = 1; i < nmaps_[mode]; i++)
			order &= maps_[mode][i].cp > maps_[mode][i - 1].cp;
		ok(order && nmaps_[mode] > 1000 && nmaps_[mode] < MAP_MAX_, "%s: %zu code points the fold changes, "
		   "in order", modes_[mode], nmaps_[mode]);
	}

	rewind(fp);
	sw_buf b = { 0 };
	size_t checked = 0, bad = 0, shown = 0, texts = 0;
	unsigned plane = 0;
	while (fgets(line, sizeof line, fp)) {
		line[strcspn(line, "\n")] = 0;
		unsigned first, last;
		char hin[2048], hout[2048], name[16];
		int mode;
		if (!strncmp(line, "unicode ", 8)) {
			printf("# references: Unicode %s (Python); utf8proc %s: Unicode %s\n", line + 8,
			       utf8proc_version(), utf8proc_unicode_version());
		} else if (sscanf(line, "assigned %x %x", &first, &last) == 2) {
			for (uint32_t lo = first; lo <= last;) {
				uint32_t hi = lo | 0xffff;
				if (hi > last)
					hi = last;
				if (lo >> 16 != plane) {
					ok(!bad && checked, "plane %u: %zu code points fold as the reference", plane, checked);
					plane = lo >> 16, checked = bad = 0;
				}
				bad += range_(lo, hi, &b, &shown);
				checked += hi - lo + 1;
				lo = hi + 1;
			}
		} else if (sscanf(line, "text %15s %2047s %2047s", name, hin, hout) == 3 && (mode = mode_(name)) >= 0) {
			char in[1024], want[1024];
			long n = unhex_(hin, in, sizeof in), wn = unhex_(hout, want, sizeof want);
			const char *t = NULL;
			size_t tn = 0;
			int rc = n >= 0 && wn >= 0 ? sw_fold_text(in, (size_t)n, how_[mode], &b, &t, &tn) : -1;
			ok(!rc && tn == (size_t)wn && !memcmp(t, want, tn), "%s: text %zu (%.40s...) folds as the "
			   "reference", name, ++texts, hin);
		}
	}
	ok(!bad && checked, "plane %u: %zu code points fold as the reference", plane, checked);
	ok(texts == NMODES_ * 21, "%zu texts", texts);
	fclose(fp);

	/* what the fold leaves alone comes back as it is, without a copy */
	const char *s = "make a bomb\tnow\r\n", *t;
	size_t tn;
	ok(!sw_fold_text(s, strlen(s), SW_FOLD_RULES, &b, &t, &tn) && t == s && tn == strlen(s), "plain text is its own fold");
	/* a text that folds to nothing */
	ok(!sw_fold_text("\xe2\x80\x8b\x01", 4, SW_FOLD_RULES, &b, &t, &tn) && tn == 0, "a zero-width space and SOH fold to nothing");

	/* what the fold copies without utf8proc (fold.c's inert_at_) holds only where every code
	 * point that is second in a canonical decomposition, but the first, is a mark or a Hangul
	 * jamo (U+1100-U+11FF): so a letter or symbol never composes with the one before it */
	size_t seconds = 0, others = 0;
	for (utf8proc_int32_t cp = 0; cp <= 0x10ffff; cp++) {
		utf8proc_int32_t d[32];
		int last = 0;
		utf8proc_ssize_t k = utf8proc_decompose_char(cp, d, 32, UTF8PROC_DECOMPOSE, &last);
		for (utf8proc_ssize_t i = 1; i < k && k <= 32; i++) {
			utf8proc_category_t c = utf8proc_category(d[i]);
			seconds++;
			others += !(c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
			            c == UTF8PROC_CATEGORY_ME || (d[i] >= 0x1100 && d[i] <= 0x11ff));
		}
	}
	ok(seconds > 1000 && !others, "decompositions: %zu code points after the first, %zu neither a mark "
	   "nor a Hangul jamo", seconds, others);

	/* the confusables table: letters above ASCII made ASCII letters; none of those the fold
	 * copies without looking them up (ASCII, CJK ideographs U+4E00 to U+9FFF) */
	size_t letters = 0, inert = 0, other = 0;
	for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
		int to = sw_fold_confusable(cp);
		if (!to)
			continue;
		letters++;
		inert += cp < 0x80 || (cp >= 0x4e00 && cp <= 0x9fff);
		other += !((to >= 'a' && to <= 'z') || (to >= 'A' && to <= 'Z'));
	}
	ok(letters == 325 && !inert && !other, "confusables: %zu letters, %zu ASCII or CJK, %zu made other "
	   "than an ASCII letter", letters, inert, other);
	ok(sw_fold_confusable(0x043e) == 'o' && sw_fold_confusable(0x0399) == 'I' &&
	   sw_fold_confusable(0x03b9) == 'i' && !sw_fold_confusable(0x0417) && !sw_fold_confusable(0x00e9),
	   "confusables: Cyrillic o, Greek capital and small iota; not Cyrillic Ze (a digit's) nor e-acute");
	sw_buf_release(&b);
	return tap_done();
}
