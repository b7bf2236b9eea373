/*
 * gen_confusables.c - writes libsw/verify/confusables.h, the letters of
 * other scripts that read as a Latin letter (Cyrillic "о" as "o", Greek
 * "Ι" as "I"), from ICU's copy of Unicode's confusables (UTS #39).  Run by
 * `make confusables` (needs libicu-dev); tests/sw-verify.bats checks the
 * committed table is what this writes.
 *
 * The rule: a code point c above ASCII, a letter (General Category L*),
 * that NFKC leaves as it is and that is not default-ignorable (the fold
 * has already changed or removed every other one), whose UTS #39 skeleton
 * is the skeleton of an ASCII letter x, maps to x.  Skeletons of ASCII
 * letters are not always the letters ("I" and "l" are both "l", "m" is
 * "rn"): where two letters share c's skeleton, the one of c's case is
 * taken (Greek capital iota is "I", not "l").  A skeleton two letters of
 * one case share would stop the generator.  Digits are not targets (the
 * Cyrillic "З" is not read as "3"), and marks are not sources.
 */
#include <stdio.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uspoof.h>
#include <unicode/utf8.h>

static USpoofChecker *sc_;

/* c's UTS #39 skeleton, UTF-8, in out; its length, or -1. */
static int skeleton_(UChar32 c, char *out, int cap)
{
	char in[8];
	int n = 0;
	UBool bad = 0;
	U8_APPEND(in, n, (int)sizeof in, c, bad);
	if (bad)
		return -1;
	UErrorCode st = U_ZERO_ERROR;
	int m = uspoof_getSkeletonUTF8(sc_, 0, in, n, out, cap - 1, &st);
	if (U_FAILURE(st))
		return -1;
	out[m] = 0;
	return m;
}

static int is_letter_(int8_t t)
{
	return t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER ||
	       t == U_MODIFIER_LETTER || t == U_OTHER_LETTER;
}

int main(void)
{
	UErrorCode st = U_ZERO_ERROR;
	sc_ = uspoof_open(&st);
	const UNormalizer2 *nfkc = unorm2_getNFKCInstance(&st);
	if (U_FAILURE(st)) {
		fprintf(stderr, "gen_confusables: ICU: %s\n", u_errorName(st));
		return 1;
	}
	static char ascii[128][16];
	for (int a = 'A'; a <= 'z'; a++)
		if (skeleton_(a, ascii[a], sizeof ascii[a]) < 0) {
			fprintf(stderr, "gen_confusables: no skeleton for '%c'\n", a);
			return 1;
		}
	printf("/*\n * confusables.h - written by tools/gen_confusables.c from ICU %s\n"
	       " * (Unicode %s): letters of other scripts that read as an ASCII letter,\n"
	       " * by UTS #39's skeletons; what the blocklist's confusables fold maps.\n"
	       " * Do not edit: `make confusables` writes it again.\n */\n",
	       U_ICU_VERSION, U_UNICODE_VERSION);
	printf("static const struct {\n\tunsigned cp;\n\tchar to;\n} confusables_[] = {\n");
	int count = 0;
	for (UChar32 c = 0x80; c <= 0x10ffff; c++) {
		int8_t t = u_charType(c);
		if (!is_letter_(t) || u_hasBinaryProperty(c, UCHAR_DEFAULT_IGNORABLE_CODE_POINT))
			continue;
		UChar u[2];
		int32_t un = 0;
		U16_APPEND_UNSAFE(u, un, c);
		if (!unorm2_isNormalized(nfkc, u, un, &st) || U_FAILURE(st))
			continue;
		char s[64];
		if (skeleton_(c, s, sizeof s) < 0)
			continue;
		/* the ASCII letters of c's skeleton; of two, the one of c's case */
		int up = t == U_UPPERCASE_LETTER || t == U_TITLECASE_LETTER, cand[52], nc = 0, pick = 0;
		for (int a = 'A'; a <= 'z'; a++)
			if ((a <= 'Z' || a >= 'a') && !strcmp(ascii[a], s))
				cand[nc++] = a;
		for (int i = 0; i < nc; i++)
			if (nc == 1 || up == (cand[i] <= 'Z')) {
				if (pick) {
					fprintf(stderr, "gen_confusables: U+%04X reads as both '%c' and '%c'\n",
					        (unsigned)c, pick, cand[i]);
					return 1;
				}
				pick = cand[i];
			}
		if (!pick)
			continue;
		char name[128];
		u_charName(c, U_UNICODE_CHAR_NAME, name, (int32_t)sizeof name, &st);
		if (U_FAILURE(st))
			return 1;
		printf("\t{ 0x%04X, '%c' }, /* %s */\n", (unsigned)c, pick, name);
		count++;
	}
	printf("};\n");
	uspoof_close(sc_);
	fprintf(stderr, "gen_confusables: %d letters\n", count);
	return 0;
}
