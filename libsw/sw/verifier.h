/*
 * sw/verifier.h - the C ABI of a verifier plug-in for sw-verify
 * (`-r plugin:LIB.so[,ARG]`).  It stands alone: a plug-in includes this
 * header and nothing else of libsw, and needs no libsw to link.
 *
 * A plug-in is a shared object that exports one function,
 *
 *     const sw_verifier_plugin *sw_verifier_entry(void);
 *
 * returning a table whose abi field is SW_VERIFIER_ABI.  sw-verify calls
 * init once with the argument of the spec (or NULL), score once per sample,
 * and free once at the end; calls on one state never overlap.  A plug-in runs
 * inside sw-verify, unsandboxed: it is trusted code, unlike an exec verifier.
 *
 * Ownership: the sample and everything it points to belong to sw-verify and
 * live only during the score call; the result is sw-verify's, filled by the
 * plug-in; the state belongs to the plug-in from init until free.
 */
#ifndef SW_VERIFIER_H
#define SW_VERIFIER_H

#include <stddef.h>
#include <stdint.h>

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/* Raised whenever a field of the structures below changes meaning or place. */
#define SW_VERIFIER_ABI 1

#define SW_VERIFIER_MAX_VIOLATIONS 16 /* violations one sample may report */
#define SW_VERIFIER_NAME_MAX 64       /* bytes of a violation name, with its NUL */

typedef struct sw_verifier_sample {
	uint64_t index;            /* 1-based record number in the input */
	const uint8_t *msgpack;    /* the whole record, one msgpack map */
	size_t msgpack_len;
	const char *json;          /* the same record as one line of JSON (sw-stream(5)), no newline */
	size_t json_len;
	const char *response;      /* the "response" field (not NUL-terminated), NULL if absent */
	size_t response_len;
	const char *label;         /* the label field as JSON text (not NUL-terminated), NULL if absent */
	size_t label_len;
} sw_verifier_sample;

typedef struct sw_verifier_result {
	double score;              /* must be finite */
	unsigned nviolations;      /* names set in violations[0..nviolations) */
	char violations[SW_VERIFIER_MAX_VIOLATIONS][SW_VERIFIER_NAME_MAX];
	char error[256];           /* why, when score() returns nonzero */
} sw_verifier_result;

typedef struct sw_verifier_plugin {
	uint32_t abi;              /* SW_VERIFIER_ABI */
	const char *name;          /* the default name of its rewards entry */
	/* 0 and *state set, or nonzero with the reason in err (errlen bytes). */
	int (*init)(const char *arg, void **state, char *err, size_t errlen);
	/* 0 with res->score set (res arrives zeroed), or nonzero with res->error:
	 * the sample then gets verifier_error, never a default score. */
	int (*score)(void *state, const sw_verifier_sample *sample, sw_verifier_result *res);
	void (*free)(void *state); /* state may be NULL */
} sw_verifier_plugin;

typedef const sw_verifier_plugin *(*sw_verifier_entry_fn)(void);
#define SW_VERIFIER_ENTRY "sw_verifier_entry"

#pragma GCC visibility pop

#endif
