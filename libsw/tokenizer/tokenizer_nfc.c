/*
 * tokenizer_nfc.c - Unicode normalisation form C, for tokenizer.json files
 * whose normalizer is NFC (Qwen2's), by utf8proc (the same library
 * libsw/verify/fold.c folds with; tests/unit/test_fold.c checks its NFC of
 * every assigned code point against Python's unicodedata).
 */
#include <stdlib.h>
#include <utf8proc.h>
#include "common/internal.h"

int sw_tok_nfc_(const uint8_t *p, size_t n, sw_buf *out);

/* p[0..n) must be valid UTF-8 (the tokenizer hands over only such runs). */
int sw_tok_nfc_(const uint8_t *p, size_t n, sw_buf *out)
{
	size_t i = 0;
	while (i < n && p[i] < 0x80)
		i++;
	if (i == n) /* ASCII is its own NFC */
		return sw_buf_put(out, p, n);
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t m = utf8proc_map(p, (utf8proc_ssize_t)n, &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
	if (m < 0) /* valid UTF-8: only memory (or a size past SSIZE_MAX) can fail */
		return SW_ENOMEM;
	int rc = sw_buf_put(out, dst, (size_t)m) ? SW_ENOMEM : 0;
	free(dst);
	return rc;
}
