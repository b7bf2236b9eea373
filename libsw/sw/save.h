/*
 * sw/save.h - how libsw writes the large files it saves (a model's
 * weights, a trainer's state, a run's checkpoints).
 *
 * A saver given sw_save_opts notes each file's digest as its bytes are
 * written (digests), so that whoever vouches for the files afterwards (the
 * audit log's checkpoint record, sw_audit_rec_checkpoint) need not read
 * them back: a record of a file's digest then says what was written, and
 * a later change to the file fails the check of it.  With direct, the
 * bytes go to the file around the page cache (O_DIRECT) where the file
 * system allows it, and through the page cache where it does not: a
 * checkpoint of gigabytes, rarely read again, neither evicts what the
 * machine caches nor waits for fresh page-cache memory.
 */
#ifndef SW_SAVE_H
#define SW_SAVE_H
#include <stddef.h>
#include <stdint.h>
#include "error.h"

#pragma GCC visibility push(default)

#define SW_DIGEST_LEN 32 /* BLAKE2b-256, as b2sum -l 256 */

/* Files written under a directory, each with its size and the digest of its bytes; savers on several threads
 * may note into one. */
typedef struct sw_digests sw_digests;
/* Digests of the files to be written under dir (NULL on ENOMEM). */
sw_digests *sw_digests_new(const char *dir);
void sw_digests_free(sw_digests *d);
/* The directory the paths are under. */
const char *sw_digests_dir(const sw_digests *d);
/* Note path (dir/REL: SW_EINVAL for one outside dir) as written: size bytes whose digest is h; a path noted
 * again replaces its entry. */
int sw_digests_note(sw_digests *d, const char *path, uint64_t size, const unsigned char h[SW_DIGEST_LEN],
                    sw_error *err);
/* The entry of rel (a path relative to dir): 0, or SW_ENOENT when none was noted. */
int sw_digests_get(const sw_digests *d, const char *rel, uint64_t *size, unsigned char h[SW_DIGEST_LEN]);

typedef struct sw_save_opts {
	sw_digests *digests; /* where the large files' digests are noted (NULL: nowhere) */
	int direct;          /* write them around the page cache where possible */
} sw_save_opts;

#pragma GCC visibility pop
#endif
