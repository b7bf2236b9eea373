/*
 * sw/audit.h - the run's tamper-evident audit log, and the digests it
 * records.
 *
 * audit.log holds one JSON object a line.  Each line is
 *
 *     BODY,"hash":"H"}\n
 *
 * where BODY begins {"seq":N,"time":"...","event":"...","prev":"P" and goes
 * on with the record's own fields, H is the BLAKE2b-256 (libsodium's
 * crypto_generichash, 32 bytes, lowercase hex) of the bytes of BODY, and P
 * is the H of the record before (64 zeros for the first).  seq counts from
 * 1; time is UTC, ISO 8601 with milliseconds.  A changed byte breaks that
 * record's hash; a deleted, inserted or moved record breaks seq and prev;
 * a cut line has no end.  Cutting whole records off the end leaves a valid
 * shorter chain: only a head hash kept elsewhere (sw_audit_head(), the
 * --head of sw-audit(1)) shows that.  Someone able to rewrite the file can
 * rewrite every hash after an edit, too; the head kept elsewhere, or a
 * signature, is what catches that.
 *
 * Signed logs: a line signed with an Ed25519 key (libsodium) is
 *
 *     BODY,"hash":"H","sig":"S"}\n
 *
 * where S (128 lowercase hex) signs the bytes BODY,"hash":"H".  A log
 * opened while $SW_SIGN_KEY names a secret key (sw_audit_keygen's) signs
 * every record it appends; sw-run hands the variable to its stages, so a
 * stage's `sw-audit log` signs too.  sw_audit_verify_signed with the public
 * key then refuses a record that is unsigned or whose signature fails (a
 * log edited and re-chained by anyone without the key), and a finished run
 * (a HALT file, or metrics.jsonl holding config's last iteration) whose log
 * has no run_end or halt record after its last start: a log cut at a line
 * end.  The log is created 0600.
 *
 * Digests are BLAKE2b-256 in hex.  A file's is of its bytes.  A directory's
 * (a checkpoint) is over its regular files, found recursively and sorted by
 * relative path (bytewise, '/' between levels): for each, the path, a NUL,
 * the size as 8 bytes little-endian, and the 32-byte digest of the file.
 * A symbolic link to a regular file counts as that file under the link's
 * name (a Hugging Face cache's snapshot is a directory of links to its
 * blobs); any other link (to a directory, or dangling) or kind of file in it
 * is an error.
 *
 * Appends are one write() of the whole line to a file opened O_APPEND,
 * under flock(), then fsync(); a record another process appended meanwhile
 * is read and checked before ours follows it.  An append that fails (a full
 * disk: a write cut short, or a failed fsync) is cut off the file again, so
 * the log still ends with its last whole record, as the handle's head says.
 *
 * Ownership: sw_audit_open returns a handle for sw_audit_close (NULL is a
 * no-op); a record built with sw_audit_rec_new is the caller's to
 * sw_audit_rec_free, appended or not.
 */
#ifndef SW_AUDIT_H
#define SW_AUDIT_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "save.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

#define SW_DIGEST_HEX 65 /* 64 hex digits and a NUL */

void sw_digest_mem(const void *p, size_t n, char hex[SW_DIGEST_HEX]);
int sw_digest_file(const char *path, char hex[SW_DIGEST_HEX], sw_error *err);
int sw_digest_dir(const char *dir, char hex[SW_DIGEST_HEX], sw_error *err);
/* A file's or a directory's digest, whichever path is. */
int sw_digest_path(const char *path, char hex[SW_DIGEST_HEX], sw_error *err);

/*
 * A directory's digest taken on a thread of its own while the caller does
 * other work (sw-run digests the start model while it loads the weights
 * stores): begin starts it (NULL only out of memory; where no thread can
 * start, end takes the digest itself), end waits for it, gives what
 * sw_digest_dir would have and frees the job.  Every begun job must be
 * ended once.
 */
typedef struct sw_digest_job sw_digest_job;
sw_digest_job *sw_digest_dir_begin(const char *dir, sw_error *err);
int sw_digest_dir_end(sw_digest_job *j, char hex[SW_DIGEST_HEX], sw_error *err);

/*
 * A seal: what the files under a directory were (the files its digest
 * reads: each one's identity, size and change times), taken before the
 * directory is digested and read, and checked once it has been, so that
 * what was digested is known to be what was loaded.  A file written to
 * (its ctime moves with any write, and no system call sets it back), replaced,
 * removed or added since makes check SW_EFORMAT, naming it ("'run/ckpt/
 * iter-0003' changed while it was read: file 'model.safetensors' was
 * changed"); a directory that cannot be read is the walk's error.  take
 * returns NULL on error (err says why); free(NULL) is a no-op.
 */
typedef struct sw_dir_seal sw_dir_seal;
sw_dir_seal *sw_dir_seal_take(const char *dir, sw_error *err);
int sw_dir_seal_check(const sw_dir_seal *s, sw_error *err);
void sw_dir_seal_free(sw_dir_seal *s);

/* --- building a record ------------------------------------------------------ */

typedef struct sw_audit_rec sw_audit_rec;

/* A record of this event ("run_start", "stage", "checkpoint", "halt",
 * "resume", ...: 1 to 64 of [a-z0-9_]); NULL when out of memory or bad. */
sw_audit_rec *sw_audit_rec_new(const char *event);
void sw_audit_rec_free(sw_audit_rec *r);
/* Add a field.  SW_EINVAL for a key used already, one of seq, time, event,
 * prev and hash, a string that is not UTF-8, or a number that is not finite. */
int sw_audit_rec_str(sw_audit_rec *r, const char *key, const char *value);
int sw_audit_rec_int(sw_audit_rec *r, const char *key, int64_t value);
int sw_audit_rec_num(sw_audit_rec *r, const char *key, double value);
int sw_audit_rec_argv(sw_audit_rec *r, const char *key, int argc, char *const argv[]);
/* Any JSON value, given as text (SW_EFORMAT when it does not parse). */
int sw_audit_rec_json(sw_audit_rec *r, const char *key, const char *json);
/*
 * The checkpoint directory rundir/relpath: adds "path" (relpath, which must
 * be relative and stay inside rundir), "digest" (the directory's) and
 * "files" (a map of each file's relative path to its digest), which
 * sw_audit_verify() checks the directory against.  A file written (NULL:
 * none) notes, by its path relative to the checkpoint, is not read: its
 * digest is the one taken as it was written (sw/save.h), so the record says
 * what was written; one whose size is no longer the size written is
 * SW_EFORMAT (changed since).
 */
int sw_audit_rec_checkpoint(sw_audit_rec *r, const char *rundir, const char *relpath, const sw_digests *written,
                            sw_error *err);
/* key: an object of the n files' digests by their paths as given (a path named twice, once);
 * SW_EIO (sys_errno set, the message naming it) for a file that cannot be read. */
int sw_audit_rec_files(sw_audit_rec *r, const char *key, const char *const *paths, size_t n, sw_error *err);

/* --- appending ------------------------------------------------------------------ */

typedef struct sw_audit sw_audit;

/* Open path for appending, creating it (0600) when absent.  An existing log
 * is verified first: a broken chain is refused, naming the record, so a
 * resumed run never extends a log that was tampered with.  With
 * $SW_SIGN_KEY set (a secret key file, mode 0600 or stricter), every record
 * appended is signed, and every record already there must carry a valid
 * signature by that key; without it, a log that holds signed records is
 * refused (SW_EINVAL), since an unsigned record would break it. */
sw_audit *sw_audit_open(const char *path, sw_error *err);
/* Append r (seq, time and prev are filled in); fsync'd when it returns 0. */
int sw_audit_append(sw_audit *a, const sw_audit_rec *r, sw_error *err);
/* The number of records and the hash of the last ("" before the first). */
uint64_t sw_audit_seq(const sw_audit *a);
const char *sw_audit_head(const sw_audit *a);
void sw_audit_close(sw_audit *a);

/* --- verifying -------------------------------------------------------------------- */

/* A record as sw_audit_verify() passes it on; valid during the call. */
typedef struct sw_audit_entry {
	uint64_t seq;
	const char *time, *event, *hash;
	const char *fields;   /* the other fields, "key=value ..." for a listing */
	const char *line;     /* the whole line, without its newline */
	size_t len;
} sw_audit_entry;

typedef struct sw_audit_report {
	uint64_t records;
	uint64_t signed_records;       /* records that carry a signature */
	int ended;                     /* a run_end or halt record follows the last run_start or resume */
	uint64_t checkpoints;          /* checkpoint directories checked */
	uint64_t head_record;          /* the record the given head names, 0 when none was given */
	char head[SW_DIGEST_HEX];      /* the hash of the last record */
} sw_audit_report;

/*
 * Check the log at path (a run directory: its audit.log; or the log file),
 * record by record, calling fn (may be NULL) for each good one; a non-zero
 * return from fn stops and is returned.  Then check each checkpoint the log
 * names (relative paths against the log's directory) against its digest,
 * unless a later "checkpoint_removed" record with the same path says it was
 * deleted on purpose.  When head is not NULL, some record must have that
 * hash.  The first problem is the error: err->record is the record (line)
 * number, err->offset the byte where its line starts, and err->msg what is
 * wrong (SW_EFORMAT; SW_ETRUNC for a cut line; SW_EEMPTY for a log with no
 * records; SW_EIO when the log or a checkpoint cannot be read).
 */
typedef int (*sw_audit_fn)(const sw_audit_entry *e, void *ud);
int sw_audit_verify(const char *path, const char *head, sw_audit_fn fn, void *ud, sw_audit_report *rep,
                    sw_error *err);
/* The same, and with pubkey (a public key file; NULL: as sw_audit_verify)
 * every record's signature, and a finished run's end record (see above). */
int sw_audit_verify_signed(const char *path, const char *head, const char *pubkey, sw_audit_fn fn, void *ud,
                           sw_audit_report *rep, sw_error *err);

/*
 * Check one checkpoint of a run before it is used: the log at path (as
 * sw_audit_verify takes it) is read and its chain checked (not its other
 * checkpoints), then the directory relpath (relative to the log's
 * directory) against the last "checkpoint" record that names it.
 * SW_EFORMAT when no record names it (or a later "checkpoint_removed"
 * does), or when the directory does not match that record's digest (the
 * message names the file changed, removed or added; err->record is the
 * record); SW_EINVAL for a relpath not inside the directory.  On success
 * digest gets the directory's digest, and *facts (when not NULL) what the
 * log says of the run.
 */
typedef struct sw_audit_run_facts {
	int ended;                        /* the log's last record is a run's end ("run_end") */
	char model_digest[SW_DIGEST_HEX]; /* the first "run_start" record's digest of the model, "" when none */
} sw_audit_run_facts;
int sw_audit_check_checkpoint(const char *path, const char *relpath, char digest[SW_DIGEST_HEX],
                              sw_audit_run_facts *facts, sw_error *err);

/* --- signing keys ------------------------------------------------------------------- */

#define SW_AUDIT_KEY_ENV "SW_SIGN_KEY"

/* A new Ed25519 key pair: the secret key to path (mode 0600), the public key
 * to path.pub, each one line of hex; neither may exist already. */
int sw_audit_keygen(const char *path, sw_error *err);
/* Check that path is a secret key sw_audit_open can sign with, then set
 * $SW_SIGN_KEY to its absolute path, for this process's logs and for the
 * processes it starts (sw-run's --sign-key). */
int sw_audit_sign_env(const char *path, sw_error *err);

#pragma GCC visibility pop

#endif
