/*
 * internal.h - what the files of libsw share and do not export: a growable
 * byte buffer, the msgpack scanner, the JSON transcoders, error helpers.
 */
#ifndef SW_INTERNAL_H
#define SW_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "sw/sw.h"

typedef struct sw_buf {
	uint8_t *p;
	size_t len, cap;
} sw_buf;

int sw_buf_reserve(sw_buf *b, size_t extra); /* room for extra more bytes */
int sw_buf_put(sw_buf *b, const void *p, size_t n);
void sw_buf_release(sw_buf *b);

/*
 * Find the end of the one msgpack value at p: 0 and *next set, SW_ETRUNC
 * when more bytes are needed, SW_EFORMAT on a byte that is no msgpack,
 * SW_ETOOBIG when a string, bin or the value as a whole would exceed max
 * bytes (*next then points at the offending header).
 */
int sw_mp_skip(const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next);

/*
 * UTF-8 (stream/utf8.c).  sw_utf8_check: 0 when p[0..n) is valid UTF-8,
 * else SW_EFORMAT and *bad_at (may be NULL) the offset of the first byte
 * that is not.  sw_utf8_lossy appends p[0..n) with each invalid sequence
 * replaced by U+FFFD, as Hugging Face tokenizers' decode does.
 */
int sw_utf8_check(const void *p, size_t n, size_t *bad_at);
int sw_utf8_lossy(sw_buf *out, const void *p, size_t n);

/*
 * sw_mp_skip that also checks that every str in the value (keys and values,
 * at any depth) is valid UTF-8: where one is not, SW_EFORMAT with *bad_at
 * the offset of its first bad byte from p; else *bad_at is SIZE_MAX.
 */
int sw_mp_skip_utf8(const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next, size_t *bad_at);

/*
 * Keys that appear twice in a map.  Keys are equal when they read the same,
 * however written (a str8 and a fixstr of the same bytes, 1 as a fixint and
 * as a uint64), as Python's msgpack and jq read them, keeping the last,
 * where a field lookup here finds the first.  A twin found: the second
 * key's offset from the value's first byte (at), its bytes (a str's or
 * bin's body, else its encoding) and kind ('s', 'b', or 'v' another value).
 * d is scratch kept between calls ({0} at first; sw_mp_dups_release).
 *
 * sw_mp_dupkey: whether a map anywhere in the value p[0..n) (one that
 * sw_mp_skip took whole) holds a key twice: 0 no, 1 yes (t filled),
 * SW_EFORMAT (bytes that are not such a value), SW_ERANGE (arrays and maps
 * nested deeper than SW_MP_MAX_DEPTH, the level the value is at counted as
 * one: the walk keeps a frame a level, JSON's readers and writers here stop
 * at 256 levels and Python's msgpack reads no deeper than 1024), SW_ENOMEM.
 * sw_mp_scan_record: sw_mp_skip_utf8 of the record at p, the same returns,
 * and 1 (t filled, *next past the value holding the twin) where a map in it
 * holds a key twice; in one pass over the bytes but for the values that hold
 * a map or SW_MP_MAX_DEPTH arrays and maps, which are walked again.
 */
#define SW_MP_MAX_DEPTH 256
typedef struct sw_mp_dups {
	sw_buf frames, keys, top;
} sw_mp_dups;
typedef struct sw_mp_twin {
	size_t at;
	const uint8_t *key;
	size_t klen;
	char kind;
} sw_mp_twin;
int sw_mp_dupkey(sw_mp_dups *d, const uint8_t *p, size_t n, sw_mp_twin *t);
/* A key as it reads (the msgpack walk's and the JSON files' check share it):
 * b[0..n) a str's or bin's bytes, or another value's encoding; iv an
 * integer's value (kind 'u' >= 0, 'i' < 0, as uint64); off where it is;
 * kind 's', 'b', 'u', 'i' or 'v'.  sw_key_twin: the later of two equal keys
 * among k[0..n) (k may be reordered), or NULL. */
typedef struct sw_key {
	const uint8_t *b;
	uint64_t n, iv;
	size_t off;
	uint8_t kind;
} sw_key;
const sw_key *sw_key_twin(sw_key *k, size_t n);
int sw_mp_scan_record(sw_mp_dups *d, const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next,
                      size_t *bad_at, sw_mp_twin *t);
void sw_mp_dups_release(sw_mp_dups *d);

/* msgpack encoders appending to a buffer (smallest encoding, as msgpack-c's).
 * sw_mp_put_str refuses (SW_EFORMAT) a string that is not valid UTF-8:
 * raw bytes go in a bin. */
int sw_mp_put_map(sw_buf *b, uint32_t n);
int sw_mp_put_array(sw_buf *b, uint32_t n);
int sw_mp_put_str(sw_buf *b, const char *s, size_t n);
int sw_mp_put_bin(sw_buf *b, const void *p, size_t n);
int sw_mp_put_ext(sw_buf *b, int8_t type, const void *p, size_t n);
int sw_mp_put_u64(sw_buf *b, uint64_t x);
int sw_mp_put_i64(sw_buf *b, int64_t x);
int sw_mp_put_f32(sw_buf *b, float x);
int sw_mp_put_f64(sw_buf *b, double x);
int sw_mp_put_nil(sw_buf *b);
int sw_mp_put_bool(sw_buf *b, int x);

/*
 * JSON <-> msgpack, as sw-stream(5) specifies.  sw_json_to_mp parses one
 * JSON value from text[0..n) and appends it as msgpack; *used is the bytes
 * consumed.  It returns SW_ETRUNC when the value is incomplete, so the
 * caller can read on.  err gets line and column relative to text.
 */
typedef struct sw_json_parser sw_json_parser;
sw_json_parser *sw_json_parser_new(void);
void sw_json_parser_free(sw_json_parser *jp);
int sw_json_to_mp(sw_json_parser *jp, const char *text, size_t n, size_t *used,
                  sw_buf *out, sw_error *err);
/*
 * Whether an object anywhere in a parsed JSON document (yyjson's value)
 * holds a name twice, names compared as they read (escapes decoded):
 * Python's json keeps the last of two, yyjson_obj_get the first, so a
 * config.json or a safetensors header would read as another model here
 * than in transformers.  0: none; 1: *name, *len the name (not
 * NUL-terminated); SW_ENOMEM.
 */
struct yyjson_val;
int sw_json_twin(struct yyjson_val *root, const char **name, size_t *len);
/* SW_OK, or SW_EFORMAT with err "WHAT: the name "X" appears twice ..." (SW_ENOMEM). */
int sw_json_refuse_twins(struct yyjson_val *root, const char *what, sw_error *err);
/* Append the JSON form of the msgpack value at p[0..n) and a newline. */
int sw_mp_to_json(const uint8_t *p, size_t n, sw_buf *out, sw_error *err);

/*
 * A file written atomically (common/afile.c): a temporary file in the same
 * directory, fsync, rename, fsync of the directory.
 */
typedef struct sw_afile {
	int fd;
	char *path;            /* the name it will have */
	char *tmp;             /* the name it has until committed */
	unsigned char *buf;    /* output buffer (aligned to SW_AFILE_ALIGN when direct) */
	size_t len, cap;
	int direct;            /* fd is O_DIRECT: only whole aligned blocks are written to it */
	uint64_t size;         /* bytes written so far */
	sw_digests *dg;        /* where the digest of the bytes is noted at commit (NULL: none) */
	void *hs;              /* the running BLAKE2b-256 of the bytes (with dg) */
} sw_afile;

/* Create PATH.tmp.XXXXXX beside path; on failure *f is left closed. */
int sw_afile_open(sw_afile *f, const char *path, sw_error *err);
/*
 * Right after open: o->direct writes the file around the page cache where
 * its file system allows (else through it, silently); o->digests gets the
 * file's size and the BLAKE2b-256 of its bytes at commit (hash: 1, the
 * default; 0 when the caller notes the digest itself).  NULL o: neither.
 */
int sw_afile_set(sw_afile *f, const sw_save_opts *o, int hash, sw_error *err);
int sw_afile_write(sw_afile *f, const void *p, size_t n, sw_error *err);
/* Flush, fsync, close, rename over path, fsync the directory. */
int sw_afile_commit(sw_afile *f, sw_error *err);
/* Close and remove the temporary file; a no-op on a closed or committed one. */
void sw_afile_abort(sw_afile *f);

/*
 * Write n bytes of p to fd, a write cut short or interrupted continued: 0, or
 * the errno that stopped it (EIO for a write of nothing).  done, if not NULL,
 * gets how many bytes were written, all of them or those before the error.
 */
int sw_fd_write_all(int fd, const void *p, size_t n, size_t *done);

/*
 * Undo a failed append (a full disk, a quota, a failed fsync): cut the file
 * back to size, the length it had before, and sync it, so that it ends with
 * its last whole record.  The caller holds the file's flock, so no other
 * writer's record is cut.  0, or an errno value.
 */
int sw_fd_cut_back(int fd, off_t size);

/*
 * For a record without a prompt: the name of a text field other data sets keep
 * theirs in ("question": GSM8K; "problem": MATH; "query", "instruction",
 * "input"), the first the record has, or NULL (sample.c).
 */
const char *sw_sample_prompt_alias(sw_rec *r);

int sw_fail(sw_error *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
