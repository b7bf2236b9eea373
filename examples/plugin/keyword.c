/*
 * keyword.c - an example verifier plug-in for sw-verify (the C ABI of
 * sw/verifier.h): scores 1 when the response contains a keyword, given as
 * the plug-in's argument, ignoring ASCII case; 0 otherwise.  A response that
 * is empty or only white space is a violation, "empty-response".  A sample
 * without a response cannot be scored: the plug-in says so, and sw-verify
 * marks the sample with verifier_error rather than give it a score.
 *
 *   make                    (builds build/plugin/keyword.so)
 *   sw-verify -r plugin:build/plugin/keyword.so,answer samples.msgpack
 *
 * It includes sw/verifier.h and nothing else of libsw, and links nothing.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/verifier.h"

typedef struct state {
	char *word;
	size_t len;
} state;

static int init_(const char *arg, void **out, char *err, size_t errlen)
{
	if (!arg || !*arg) {
		snprintf(err, errlen, "keyword needs the word to look for: plugin:keyword.so,WORD");
		return 1;
	}
	state *s = malloc(sizeof *s);
	size_t n = strlen(arg);
	if (!s || !(s->word = malloc(n + 1))) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return 1;
	}
	memcpy(s->word, arg, n + 1);
	s->len = n;
	*out = s;
	return 0;
}

static int contains_(const char *h, size_t hn, const char *w, size_t wn)
{
	for (size_t i = 0; wn <= hn && i <= hn - wn; i++) {
		size_t k = 0;
		while (k < wn && tolower((unsigned char)h[i + k]) == tolower((unsigned char)w[k]))
			k++;
		if (k == wn)
			return 1;
	}
	return 0;
}

static int score_(void *st, const sw_verifier_sample *smp, sw_verifier_result *res)
{
	const state *s = st;
	if (!smp->response) {
		snprintf(res->error, sizeof res->error, "record %llu has no response",
		         (unsigned long long)smp->index);
		return 1;
	}
	size_t blank = 0;
	while (blank < smp->response_len && isspace((unsigned char)smp->response[blank]))
		blank++;
	if (blank == smp->response_len)
		snprintf(res->violations[res->nviolations++], SW_VERIFIER_NAME_MAX, "empty-response");
	res->score = contains_(smp->response, smp->response_len, s->word, s->len) ? 1.0 : 0.0;
	return 0;
}

static void free_(void *st)
{
	state *s = st;
	if (s)
		free(s->word);
	free(s);
}

static const sw_verifier_plugin plugin_ = { SW_VERIFIER_ABI, "keyword", init_, score_, free_ };

const sw_verifier_plugin *sw_verifier_entry(void);
const sw_verifier_plugin *sw_verifier_entry(void)
{
	return &plugin_;
}
