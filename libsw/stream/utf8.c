/*
 * utf8.c - the UTF-8 rule of streams: every msgpack str is valid UTF-8
 * (sw-stream(5)).  sw_utf8_check finds the first byte that breaks it;
 * sw_utf8_lossy replaces what is invalid with U+FFFD exactly as Hugging
 * Face tokenizers' decode does (Rust's String::from_utf8_lossy), so that
 * text decoded from tokens here equals tokenizers' text byte for byte.
 */
#include <string.h>
#include "common/internal.h"

/*
 * The length of the valid UTF-8 sequence at p[0..n), or 0 when it is not
 * one; *bad is then the length of the maximal subpart that one U+FFFD
 * replaces (Unicode's "substitution of maximal subparts", which Rust and
 * CPython follow): the lead byte and every continuation byte that could
 * still have begun a valid sequence.
 */
static size_t seq_(const uint8_t *p, size_t n, size_t *bad)
{
	uint8_t c = p[0];
	size_t w = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	*bad = 1;
	if (c < 0x80)
		return 1;
	if (!w || n < 2)
		return 0;
	/* the second byte's range depends on the lead: no overlong forms, surrogates or > U+10FFFF */
	uint8_t lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
	uint8_t hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < w; i++) {
		*bad = i;
		if (i >= n || (p[i] & 0xc0) != 0x80)
			return 0;
	}
	return w;
}

int sw_utf8_check(const void *vp, size_t n, size_t *bad_at)
{
	const uint8_t *p = vp;
	size_t i = 0, bad;
	for (;;) {
		/* text is mostly ASCII: step over it 32 bytes at a time */
		while (i + 32 <= n) {
			uint64_t x[4];
			memcpy(x, p + i, 32);
			if ((x[0] | x[1] | x[2] | x[3]) & 0x8080808080808080ull)
				break;
			i += 32;
		}
		while (i + 8 <= n) {
			uint64_t x;
			memcpy(&x, p + i, 8);
			if (x & 0x8080808080808080ull)
				break;
			i += 8;
		}
		while (i < n && p[i] < 0x80)
			i++;
		if (i == n)
			return 0;
		size_t k = seq_(p + i, n - i, &bad);
		if (!k) {
			if (bad_at)
				*bad_at = i;
			return SW_EFORMAT;
		}
		i += k;
	}
}

int sw_utf8_lossy(sw_buf *out, const void *vp, size_t n)
{
	const uint8_t *p = vp;
	size_t i = 0, from = 0, bad;
	while (i < n) {
		size_t k = seq_(p + i, n - i, &bad);
		if (k) {
			i += k;
			continue;
		}
		if (sw_buf_put(out, p + from, i - from) || sw_buf_put(out, "\xef\xbf\xbd", 3))
			return SW_ENOMEM;
		i += bad;
		from = i;
	}
	return sw_buf_put(out, p + from, n - from) ? SW_ENOMEM : 0;
}
