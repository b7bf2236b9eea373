/*
 * sw/verify.h - scoring samples with verifiers and combining the scores
 * into a reward: what sw-verify(1) does, as a library.
 *
 * A set of verifiers is built from specs, NAME[:ARG][,KEY=VALUE...] (see
 * sw-verify(1) for the names and keys).  Samples go in with sw_verify_push
 * and come back out, in the order they went in, from sw_verify_pop, with
 * `rewards`, `reward` and `violations` set, or with `verifier_error` (and no
 * `reward`) when a verifier failed on them.  Built-in verifiers score a
 * sample during push; exec verifiers answer later, so many samples are in
 * flight at once: that is what makes a pool of slow external programs fast.
 *
 * Ownership: push copies the record; the record filled by pop is the set's
 * and lives until the next pop.  sw_verify_free ends every worker process.
 */
#ifndef SW_VERIFY_H
#define SW_VERIFY_H

#include <stdint.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_verify sw_verify;

typedef struct sw_verify_opts {
	const char *label_field;  /* field holding the ground truth; NULL: "label" */
	size_t window;            /* samples in flight at most; 0: 4096 */
	int min_reward_set;       /* use min_reward as the reward of a hard violation */
	double min_reward;        /* else the lowest weighted sum the verifiers can give */
	int worker_stderr;        /* fd exec workers' standard error lines go on to, prefixed
	                             with the verifier's name and rate-limited; -1: dropped */
	/* Called with a warning the caller may show (the library prints nothing). */
	void (*warn)(void *arg, const char *msg);
	/*
	 * Called, where set, with what the caller should show at a level:
	 * 0 a detail (what holds a verifier's box as a whole); 2 a verifier
	 * runs in a weaker sandbox than strict because its spec asked for one
	 * (sandbox=basic or none): show it even when asked to be quiet.
	 * Unset: level 2 goes to warn, level 0 nowhere.  arg is warn_arg.
	 */
	void (*note)(void *arg, int level, const char *msg);
	void *warn_arg;
} sw_verify_opts;

/* An empty set; NULL on failure (err filled). */
sw_verify *sw_verify_new(const sw_verify_opts *o, sw_error *err);
void sw_verify_free(sw_verify *v); /* NULL is a no-op */

/*
 * Add a verifier from its spec: SW_EINVAL with the reason for a bad spec,
 * SW_EIO for a file (blocklist, plug-in) that cannot be read.  Exec workers
 * start at the first sample that needs them.
 */
int sw_verify_add(sw_verify *v, const char *spec, sw_error *err);
size_t sw_verify_count(const sw_verify *v);
/* The i-th verifier's name (its key in `rewards`). */
const char *sw_verify_name(const sw_verify *v, size_t i);
/* The verifier kinds a spec may name ("math", "regex", ...), NULL-terminated. */
const char *const *sw_verify_names(void);
/*
 * The files the verifiers' specs name, whose bytes decide the rewards: a
 * blocklist's file, a plug-in's shared object, and each word of an exec
 * verifier's command that names a regular file by a path (a script); in
 * the order added, a file as often as it is named.  Up to cap of them into
 * out (valid while v lives); returns how many there are.
 */
size_t sw_verify_files(const sw_verify *v, const char **out, size_t cap);

/*
 * Take a sample (record number index, for messages).  A sample that lacks a
 * field a verifier needs, or has one of the wrong type, is bad input: an
 * error (SW_ENOENT, SW_ETYPE, SW_EFORMAT, SW_EINVAL) with record and msg set,
 * and the sample is not taken.  SW_ERANGE when the window is full: pop first.
 */
int sw_verify_push(sw_verify *v, sw_rec *rec, uint64_t index, sw_error *err);
/*
 * The oldest sample, once every verifier has answered for it: 1 and *out
 * pointed at it; 0 when none is ready (block: when none is pending at all);
 * < 0 on an internal error (out of memory, poll failure).
 */
int sw_verify_pop(sw_verify *v, sw_rec **out, int block, sw_error *err);
size_t sw_verify_pending(const sw_verify *v);
int sw_verify_full(const sw_verify *v);

/* Samples popped so far, and how many of them carry verifier_error. */
uint64_t sw_verify_done(const sw_verify *v);
uint64_t sw_verify_failed(const sw_verify *v);
/* The verifier_error of the first of them (NULL when none failed), and its
 * place among the samples popped, from 0. */
const char *sw_verify_first_failure(const sw_verify *v, uint64_t *index);

/*
 * The reply parser of exec verifiers, public for the fuzz target and the
 * tests: one line (no newline) {"score": x, "violations": [...]} or
 * {"error": "why"}.  0 and *score set, the violation names NUL-separated in
 * names (*nnames of them, at most max); SW_EFORMAT with the reason in err
 * for anything else, including an "error" reply.
 */
int sw_verify_parse_reply(const char *line, size_t n, double *score, char *names,
                          size_t names_size, unsigned *nnames, unsigned max, char *err,
                          size_t errlen);

#pragma GCC visibility pop

#endif
