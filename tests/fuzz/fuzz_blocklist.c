/*
 * fuzz_blocklist.c - libFuzzer target for sw-verify's safety blocklist
 * (blocklist:FILE in libsw/verify/verify.c): the rules file, then each rule
 * against a response, the check a policy relies on to keep what it forbids
 * out of training.
 *
 * The input is the rules file, a NUL, and the response (made UTF-8, as
 * every str of a stream is); the rules file's length modulo 4 chooses the
 * flags: 1 confusables, 2 nomarks, 3 both (blocklist:FILE,confusables,
 * nomarks).  What must hold:
 *
 *  - a rules file is refused with a negative code and a message naming it,
 *    or loaded, each of its patterns then as the fold leaves it (with
 *    confusables, holding no letter the fold makes Latin);
 *  - the response's fold (NFKC, no invisible or control characters; with
 *    nomarks, no marks; with confusables, the letters that read as Latin
 *    ones made them, and NFKC again) is UTF-8, its own fold, and what
 *    utf8proc gives folding the whole text at once (fold.c folds it in
 *    pieces);
 *  - the sample comes back with verifier_error and no reward (a rule could
 *    not be matched to the end), or with reward 1 and no violations, or
 *    reward 0 and at least one;
 *  - each rule, read and matched here alone against the folded response
 *    as the verifier reads and matches it: one that matches is among the violations (and the sample
 *    scored, whatever other rules did); when none matches, one that could
 *    not be matched to the end (PCRE2's match limit, its JIT stack) gives
 *    verifier_error, never a clean score (what a response built to slip
 *    past a rule would break); a verifier_error only then;
 *  - the same sample scored again comes back the same.
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_blocklist/)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/internal.h"
#include "verify/verify_internal.h"
#include "sw/verify.h"
#include "sw/verifier.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#define FUZZ_NAME "fuzz_blocklist"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

/* The sample scored: its JSON text (the caller frees it). */
static char *score_(sw_verify *v, const char *resp, size_t n)
{
	sw_error err = { 0 };
	sw_rec *r = sw_rec_new(), *done = NULL;
	CHECK(r && !sw_rec_set_str(r, "response", resp, n), "cannot make the sample");
	CHECK(sw_verify_push(v, r, 1, &err) == 0, "the sample refused: %s", err.msg);
	CHECK(sw_verify_pop(v, &done, 1, &err) == 1, "no sample back: %s", err.msg);
	const uint8_t *p;
	size_t k;
	sw_buf b = { 0 };
	CHECK(!sw_rec_bytes(done, &p, &k) && !sw_mp_to_json(p, k, &b, &err) && !sw_buf_put(&b, "", 1),
	      "cannot read the sample back");
	sw_rec_free(r);
	return (char *)b.p;
}

/* The rules' fold of the UTF-8 text s, the whole text at once (the caller frees it); its length in *m.
 * how: fold.c's flags (SW_FOLD_CONFUSABLES, SW_FOLD_NOMARKS). */
static uint8_t *whole_fold_(const char *s, size_t n, int how, utf8proc_ssize_t *m)
{
	utf8proc_option_t opts = UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_IGNORE |
	                         (how & SW_FOLD_NOMARKS ? UTF8PROC_STRIPMARK : 0);
	sw_buf c = { 0 };
	for (size_t i = 0; i < n;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		CHECK(k > 0, "the response is not UTF-8 at byte %zu", i);
		int ctl = (cp < 0x20 && (cp < 0x09 || cp > 0x0d)) || (cp >= 0x7f && cp <= 0x9f && cp != 0x85);
		CHECK(ctl || !sw_buf_put(&c, s + i, (size_t)k), "out of memory");
		i += (size_t)k;
	}
	utf8proc_uint8_t *dst = NULL;
	*m = c.len ? utf8proc_map(c.p, (utf8proc_ssize_t)c.len, &dst, opts) : 0;
	CHECK(*m >= 0, "utf8proc_map: %s", utf8proc_errmsg(*m));
	sw_buf_release(&c);
	if (!(how & SW_FOLD_CONFUSABLES) || !*m)
		return dst;
	sw_buf l = { 0 };
	for (utf8proc_ssize_t i = 0; i < *m;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate(dst + i, *m - i, &cp);
		CHECK(k > 0, "utf8proc's fold is not UTF-8");
		char to = (char)sw_fold_confusable((uint32_t)cp);
		CHECK(to ? !sw_buf_put(&l, &to, 1) : !sw_buf_put(&l, dst + i, (size_t)k), "out of memory");
		i += k;
	}
	free(dst);
	dst = NULL;
	*m = utf8proc_map(l.p, (utf8proc_ssize_t)l.len, &dst, opts);
	CHECK(*m >= 0, "utf8proc_map: %s", utf8proc_errmsg(*m));
	sw_buf_release(&l);
	return dst;
}

/*
 * The file's rules, read as the loader reads them ("[name] pattern", the
 * pattern its own name otherwise), each matched against resp as the
 * verifier matches (the same flags, JIT, an 8 MiB JIT stack): 1 when one
 * matches, else -1 when one could not be matched to the end, else 0.
 * *name: the first rule that matched.
 */
static int oracle_(const char *t, size_t tn, const char *resp, size_t rn, int how, char *name,
                   size_t size, sw_buf *fold)
{
	pcre2_match_data *md = pcre2_match_data_create(32, NULL);
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8u << 20, NULL);
	CHECK(md && mc && js, "out of memory");
	pcre2_jit_stack_assign(mc, NULL, js);
	int got = 0;
	for (const char *p = t, *end = t + tn, *nl; p < end; p = nl + 1) {
		if (!(nl = memchr(p, '\n', (size_t)(end - p))))
			nl = end;
		const char *a = p, *z = nl, *na, *nz;
		while (z > a && (z[-1] == '\r' || z[-1] == '\n'))
			z--;
		while (a < z && (*a == ' ' || *a == '\t'))
			a++;
		if (a == z || *a == '#')
			continue;
		na = a, nz = z;
		if (*a == '[') {
			const char *c = memchr(a, ']', (size_t)(z - a));
			CHECK(c && c > a + 1, "the loader took a rule name that is not closed or empty");
			na = a + 1, nz = c;
			for (a = c + 1; a < z && (*a == ' ' || *a == '\t');)
				a++;
		}
		int ec;
		PCRE2_SIZE off;
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)a, (size_t)(z - a),
		                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &off, NULL);
		CHECK(re != NULL, "the loader took a pattern PCRE2 refuses: %.*s", (int)(z - a), a);
		const char *ft;
		size_t fn;
		CHECK(!sw_fold_text(a, (size_t)(z - a), how & ~SW_FOLD_CONFUSABLES, fold, &ft, &fn), "out of memory");
		CHECK(fn == (size_t)(z - a) && !memcmp(ft, a, fn), "the loader took a pattern the fold changes: %.*s",
		      (int)(z - a), a);
		for (const char *q = a; (how & SW_FOLD_CONFUSABLES) && q < z;) {
			utf8proc_int32_t cp;
			utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)q, z - q, &cp);
			CHECK(k > 0 && !sw_fold_confusable((uint32_t)cp), "the loader took, with confusables, a "
			      "pattern holding a letter the fold makes Latin: %.*s", (int)(z - a), a);
			q += k;
		}
		CHECK(nz - na < SW_VERIFIER_NAME_MAX || na == a, "the loader took a rule name of %d bytes",
		      (int)(nz - na));
		pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
		int r = pcre2_match(re, (PCRE2_SPTR)resp, rn, 0, 0, md, mc);
		pcre2_code_free(re);
		if (r >= 0 && got <= 0) {
			/* the name as the sample's JSON has it, where that is the text itself (printable ASCII,
			 * no quote or backslash, not cut to the longest name); else none to look for */
			int plain = nz - na < SW_VERIFIER_NAME_MAX;
			for (const char *q = na; plain && q < nz; q++)
				plain = *q >= 0x20 && *q < 0x7f && *q != '"' && *q != '\\';
			got = 1;
			snprintf(name, size, plain ? "\"%.*s\"" : "", (int)(nz - na), na);
		} else if (r < 0 && r != PCRE2_ERROR_NOMATCH && !got) {
			got = -1;
		}
	}
	pcre2_jit_stack_free(js);
	pcre2_match_context_free(mc);
	pcre2_match_data_free(md);
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[320], spec[360];
	snprintf(path, sizeof path, "%s/rules.txt", fuzz_tmp());
	const uint8_t *nul = memchr(data, 0, size);
	size_t tn = nul ? (size_t)(nul - data) : size;
	int how = SW_FOLD_RULES | (tn % 2 ? SW_FOLD_CONFUSABLES : 0) | (tn / 2 % 2 ? SW_FOLD_NOMARKS : 0);
	snprintf(spec, sizeof spec, "blocklist:%s%s%s", path, how & SW_FOLD_CONFUSABLES ? ",confusables" : "",
	         how & SW_FOLD_NOMARKS ? ",nomarks" : "");
	tmp_put(path, data, tn);
	sw_buf resp = { 0 };
	const char *rp = nul ? (const char *)nul + 1 : "";
	size_t rn = nul ? size - tn - 1 : 0;
	CHECK(!sw_utf8_lossy(&resp, rp, rn), "out of memory");
	sw_error err = { 0 };
	sw_verify *v = sw_verify_new(&(sw_verify_opts){ .worker_stderr = -1 }, &err);
	CHECK(v != NULL, "sw_verify_new: %s", err.msg);
	int rc = sw_verify_add(v, spec, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code && strstr(err.msg, path), "refused, not naming the file: %d %s", rc,
		      err.msg);
		goto out;
	}
	const char *r = resp.len ? (const char *)resp.p : "";
	char *a = score_(v, r, resp.len), *b = score_(v, r, resp.len);
	CHECK(!strcmp(a, b), "scored twice, differently:\n%s\n%s", a, b);
	int failed = strstr(a, "\"verifier_error\":") != NULL;
	if (failed) {
		CHECK(!strstr(a, "\"reward\":"), "a verifier_error with a reward: %s", a);
	} else {
		int none = strstr(a, "\"violations\":[]") != NULL;
		CHECK(strstr(a, none ? "\"reward\":1" : "\"reward\":0"), "reward and violations disagree: %s", a);
	}
	/* the response as the rules read it: UTF-8, folded once for all */
	sw_buf fb = { 0 }, fb2 = { 0 };
	const char *f, *f2;
	size_t fn, fn2;
	CHECK(!sw_fold_text(r, resp.len, how, &fb, &f, &fn), "out of memory");
	CHECK(!sw_utf8_check(f, fn, NULL), "the fold is not UTF-8");
	CHECK(!sw_fold_text(f, fn, how, &fb2, &f2, &fn2) && fn2 == fn && !memcmp(f, f2, fn), "the fold of a fold "
	      "differs: %zu bytes, then %zu", fn, fn2);
	utf8proc_ssize_t wn;
	uint8_t *w = whole_fold_(r, resp.len, how, &wn);
	CHECK((size_t)wn == fn && (!fn || !memcmp(w, f, fn)), "folded in pieces, %zu bytes; at once, %zd", fn, wn);
	free(w);
	/* what the rules say of it, matched here alone */
	char name[300] = "";
	sw_buf scratch = { 0 };
	int o = oracle_((const char *)data, tn, f, fn, how, name, sizeof name, &scratch);
	sw_buf_release(&scratch);
	sw_buf_release(&fb);
	sw_buf_release(&fb2);
	CHECK(o >= 0 || failed, "a rule could not be matched to the end, none matched, yet the response was "
	      "scored: %s", a);
	CHECK(o <= 0 || (!failed && strstr(a, name)), "rule %s matches, the sample does not say so: %s", name, a);
	CHECK(o != 0 || !failed, "every rule matched to the end, yet a verifier_error: %s", a);
	free(a);
	free(b);
out:
	sw_verify_free(v);
	sw_buf_release(&resp);
	return 0;
}
