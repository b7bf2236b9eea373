/*
 * tokenizer_nfc.c - Unicode normalisation form C, for tokenizer.json files
 * whose normalizer is NFC (Qwen2's): canonical decomposition, canonical
 * ordering, canonical composition, as UAX #15 defines them.  The tables
 * (tokenizer_nfc_data.h) are generated from Python's unicodedata by
 * tools/gen_tokenizer_nfc.py; Hangul syllables are computed.
 */
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"

#include "tokenizer/tokenizer_nfc_data.h"

int sw_tok_nfc_(const uint8_t *p, size_t n, sw_buf *out);

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

enum { SBASE = 0xac00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11a7, LCOUNT = 19, VCOUNT = 21,
       TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static int ccc_(uint32_t c)
{
	if (c < 0x300)
		return 0;
	size_t lo = 0, hi = NELEM(nfc_ccc_);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (nfc_ccc_[mid][0] < c)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < NELEM(nfc_ccc_) && nfc_ccc_[lo][0] == c ? (int)nfc_ccc_[lo][1] : 0;
}

static const uint32_t *decomp_(uint32_t c, size_t *len)
{
	if (c < 0xc0)
		return NULL;
	size_t lo = 0, hi = NELEM(nfc_dec_);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (nfc_dec_[mid][0] < c)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == NELEM(nfc_dec_) || nfc_dec_[lo][0] != c)
		return NULL;
	*len = nfc_dec_[lo][2];
	return nfc_dec_seq_ + nfc_dec_[lo][1];
}

/* The primary composite of a + b, or 0. */
static uint32_t compose_(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
	    b < TBASE + TCOUNT)
		return a + (b - TBASE);
	size_t lo = 0, hi = NELEM(nfc_comp_);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (nfc_comp_[mid][0] < a || (nfc_comp_[mid][0] == a && nfc_comp_[mid][1] < b))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < NELEM(nfc_comp_) && nfc_comp_[lo][0] == a && nfc_comp_[lo][1] == b)
		return nfc_comp_[lo][2];
	return 0;
}

static int push_(uint32_t **v, size_t *n, size_t *cap, uint32_t c)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		uint32_t *q = realloc(*v, nc * sizeof *q);
		if (!q)
			return SW_ENOMEM;
		*v = q;
		*cap = nc;
	}
	(*v)[(*n)++] = c;
	return 0;
}

/* p[0..n) must be valid UTF-8 (the tokenizer hands over only such runs). */
int sw_tok_nfc_(const uint8_t *p, size_t n, sw_buf *out)
{
	size_t i = 0;
	while (i < n && p[i] < 0x80)
		i++;
	if (i == n) /* ASCII is its own NFC */
		return sw_buf_put(out, p, n);

	uint32_t *v = NULL;
	size_t m = 0, cap = 0;
	int rc = 0;
	/* decode and decompose */
	for (i = 0; i < n && !rc;) {
		uint32_t c = p[i];
		size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
		if (k > 1) {
			c &= k == 2 ? 0x1f : k == 3 ? 0x0f : 0x07;
			for (size_t j = 1; j < k && i + j < n; j++)
				c = c << 6 | (p[i + j] & 0x3f);
		}
		i += k;
		size_t dl;
		const uint32_t *d;
		if (c >= SBASE && c < SBASE + SCOUNT) {
			uint32_t s = c - SBASE;
			rc = push_(&v, &m, &cap, LBASE + s / NCOUNT);
			rc |= push_(&v, &m, &cap, VBASE + (s % NCOUNT) / TCOUNT);
			if (s % TCOUNT)
				rc |= push_(&v, &m, &cap, TBASE + s % TCOUNT);
		} else if ((d = decomp_(c, &dl))) {
			for (size_t j = 0; j < dl && !rc; j++)
				rc = push_(&v, &m, &cap, d[j]);
		} else {
			rc = push_(&v, &m, &cap, c);
		}
	}
	if (rc) {
		free(v);
		return SW_ENOMEM;
	}
	/* canonical ordering: a stable sort of each run of non-starters by class */
	for (i = 1; i < m; i++) {
		int cc = ccc_(v[i]);
		if (!cc)
			continue;
		uint32_t c = v[i];
		size_t j = i;
		while (j > 0 && ccc_(v[j - 1]) > cc) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = c;
	}
	/* canonical composition */
	size_t o = 0;
	long starter = -1;
	int last = -1; /* class of the last character kept after the starter; -1: none yet */
	for (i = 0; i < m; i++) {
		uint32_t c = v[i], comp;
		int cc = ccc_(c);
		if (starter >= 0 && (last == -1 || (last != 0 && last < cc)) &&
		    (comp = compose_(v[starter], c))) {
			v[starter] = comp;
			continue;
		}
		if (cc == 0) {
			starter = (long)o;
			last = -1;
		} else {
			last = cc;
		}
		v[o++] = c;
	}
	/* encode */
	if (sw_buf_reserve(out, o * 4)) {
		free(v);
		return SW_ENOMEM;
	}
	uint8_t *w = out->p + out->len;
	for (i = 0; i < o; i++) {
		uint32_t c = v[i];
		if (c < 0x80) {
			*w++ = (uint8_t)c;
		} else if (c < 0x800) {
			*w++ = (uint8_t)(0xc0 | c >> 6);
			*w++ = (uint8_t)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			*w++ = (uint8_t)(0xe0 | c >> 12);
			*w++ = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
			*w++ = (uint8_t)(0x80 | (c & 0x3f));
		} else {
			*w++ = (uint8_t)(0xf0 | c >> 18);
			*w++ = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
			*w++ = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
			*w++ = (uint8_t)(0x80 | (c & 0x3f));
		}
	}
	out->len = (size_t)(w - out->p);
	free(v);
	return 0;
}
