/*
 * sw/stream.h - reading and writing sample streams.
 *
 * A stream is a sequence of records: msgpack maps back to back, or JSON
 * values one a line, either of them optionally zstd-compressed (several
 * frames may follow each other).  The reader detects which from the first
 * bytes.  The writer emits msgpack (optionally zstd) or JSON Lines.
 *
 * The reader refuses a record that is not one map of valid msgpack (or
 * JSON), a str that is not UTF-8, a map (at any depth) that holds a key
 * twice (other readers keep the last of two, a field lookup the first), and
 * arrays and maps nested more than 256 levels deep (no JSON is written of
 * them).
 *
 * Ownership: a reader or writer owns the descriptor it opened by path and
 * closes it when freed; a descriptor handed to *_fdopen stays the caller's.
 * The record filled by sw_reader_next() borrows the reader's buffer until
 * the next call (sw_rec_own() keeps it longer).
 */
#ifndef SW_STREAM_H
#define SW_STREAM_H

#include <stdint.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_format { SW_FMT_AUTO, SW_FMT_MSGPACK, SW_FMT_JSON } sw_format;

/* Records and fields larger than this are refused, before they are read. */
#define SW_MAX_RECORD_DEFAULT ((size_t)64 << 20)

typedef struct sw_reader sw_reader;

/* path "-" is standard input. On failure returns NULL and fills err. */
sw_reader *sw_reader_open(const char *path, sw_error *err);
sw_reader *sw_reader_fdopen(int fd, const char *name, sw_error *err);
/* Read from memory (not copied; must outlive the reader). */
sw_reader *sw_reader_memopen(const void *p, size_t n, const char *name, sw_error *err);
void sw_reader_free(sw_reader *r); /* NULL is a no-op */

/* 1: a record is in rec; 0: end of stream; < 0: error (see sw_reader_error). */
int sw_reader_next(sw_reader *r, sw_rec *rec);
const sw_error *sw_reader_error(const sw_reader *r);
const char *sw_reader_name(const sw_reader *r);
sw_format sw_reader_format(const sw_reader *r); /* AUTO until the first read */
int sw_reader_compressed(const sw_reader *r);
uint64_t sw_reader_records(const sw_reader *r);  /* records returned so far */
uint64_t sw_reader_bytes_in(const sw_reader *r); /* bytes consumed from the source */

void sw_reader_set_max_record(sw_reader *r, size_t bytes);
/*
 * Called before the reader blocks waiting for input (a pipe with nothing
 * in it yet): the place for a filter to flush its output, so that records
 * flow on promptly without a flush after every record.
 */
void sw_reader_set_idle(sw_reader *r, void (*fn)(void *arg), void *arg);
/*
 * Called before every read of the source (a file or pipe; never for
 * memory), once what the reader holds is used up: every whole record in it
 * has been returned.  The place for a consumer that hands records on in
 * batches to hand on the batch, before the reader may wait.
 */
void sw_reader_set_refill(sw_reader *r, void (*fn)(void *arg), void *arg);

typedef struct sw_writer sw_writer;

typedef struct sw_writer_opts {
	sw_format format; /* SW_FMT_MSGPACK (default for AUTO) or SW_FMT_JSON */
	int zstd_level;   /* 0: uncompressed; 1..19: zstd at that level */
} sw_writer_opts;

sw_writer *sw_writer_open(const char *path, const sw_writer_opts *o, sw_error *err);
sw_writer *sw_writer_fdopen(int fd, const char *name, const sw_writer_opts *o, sw_error *err);
/*
 * A file written whole: the records go to a new file beside path (named
 * path, ".tmp." and six random characters; the umask's mode, or the mode of
 * the file it replaces), which sw_writer_close syncs and renames over path; until then path is as
 * it was (so it may also be one of the inputs), and a writer freed without a
 * successful close removes its temporary.  A symbolic link's target is
 * replaced.  "-", and a path that is not a regular file (a FIFO, a
 * terminal, /dev/null), are written directly as sw_writer_open does; so is
 * an existing file in a directory where no file can be made.
 */
sw_writer *sw_writer_open_whole(const char *path, const sw_writer_opts *o, sw_error *err);
/* The temporary file of a sw_writer_open_whole not yet closed (for a signal handler to remove), else NULL. */
const char *sw_writer_pending(const sw_writer *w);
/* Frees without finishing; use sw_writer_close() to end cleanly. */
void sw_writer_free(sw_writer *w);

int sw_writer_put(sw_writer *w, sw_rec *rec);
/* A record already encoded as one msgpack map (not checked). */
int sw_writer_put_raw(sw_writer *w, const void *mp, size_t n);
/* Hand everything written so far to the descriptor, ending a zstd block. */
int sw_writer_flush(sw_writer *w);
/* Finish the zstd frame, flush, and (for sw_writer_open) close the file; for sw_writer_open_whole, sync and rename it over its path. */
int sw_writer_close(sw_writer *w);
const sw_error *sw_writer_error(const sw_writer *w);
uint64_t sw_writer_records(const sw_writer *w);
uint64_t sw_writer_bytes_out(const sw_writer *w);

#pragma GCC visibility pop

#endif
