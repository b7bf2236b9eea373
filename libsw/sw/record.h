/*
 * sw/record.h - one sample record: a msgpack map, read and edited in place.
 *
 * A record is held as its msgpack bytes plus an index of its top-level
 * fields, built on first use.  Reading a field decodes only that field;
 * strings and bin are returned as views into the record's bytes.  Setting a
 * field stores the new encoded value beside the original bytes, so every
 * field the caller does not touch, known or not, is written back unchanged,
 * byte for byte, in its original position; new fields go at the end.
 *
 * Ownership: sw_rec_load() borrows the caller's bytes until the next load,
 * clear or sw_rec_own(); views returned by getters live until the record is
 * next modified or loaded.  Everything passed to a setter is copied.
 */
#ifndef SW_RECORD_H
#define SW_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_type {
	SW_T_NIL, SW_T_BOOL,
	SW_T_INT,   /* negative integer (msgpack int 8..64, negative fixint) */
	SW_T_UINT,  /* non-negative integer */
	SW_T_F32, SW_T_F64,
	SW_T_STR, SW_T_BIN, SW_T_ARRAY, SW_T_MAP, SW_T_EXT
} sw_type;

/* A decoded view of one msgpack value; raw/rawlen span its whole encoding. */
typedef struct sw_val {
	sw_type type;
	union {
		bool b;
		int64_t i;
		uint64_t u;
		float f32;
		double f64;
		struct { const char *ptr; uint32_t len; } str; /* STR, BIN, EXT */
		uint32_t count; /* ARRAY: elements, MAP: pairs */
	} v;
	int8_t ext_type;
	const uint8_t *raw;
	size_t rawlen;
	const uint8_t *body; /* ARRAY/MAP: the first element */
} sw_val;

/* Walk the elements of an array (one value each) or a map (key, value, ...). */
typedef struct sw_iter {
	const uint8_t *p, *end;
	uint64_t left;
} sw_iter;

void sw_iter_init(sw_iter *it, const sw_val *container);
/* 1 and *out set, 0 at the end, SW_EFORMAT if the bytes are corrupt. */
int sw_iter_next(sw_iter *it, sw_val *out);

/* Decode the value at p (at most n bytes); SW_ETRUNC/SW_EFORMAT if bad. */
int sw_val_decode(const void *p, size_t n, sw_val *out);
/* The value as a double, from any integer or float type; SW_ETYPE otherwise. */
int sw_val_number(const sw_val *v, double *out);
const char *sw_type_name(sw_type t);

typedef struct sw_rec sw_rec;

sw_rec *sw_rec_new(void);
void sw_rec_free(sw_rec *r); /* NULL is a no-op */

/* Make r the map encoded in p[0..n) (borrowed); SW_EFORMAT if it is not one map.
 * Its keys are not checked for twins (the stream reader does that): a
 * field lookup finds the first of two. */
int sw_rec_load(sw_rec *r, const void *p, size_t n);
/* Copy borrowed bytes into r so that it outlives the buffer it was loaded from. */
int sw_rec_own(sw_rec *r);
/* Make r an empty map. */
void sw_rec_clear(sw_rec *r);

/* The record encoded as msgpack; the original bytes themselves when unedited. */
int sw_rec_bytes(sw_rec *r, const uint8_t **p, size_t *n);

size_t sw_rec_count(sw_rec *r); /* number of fields */
/* The i-th field (0-based): key (not NUL-terminated; NULL if not a string) and value. */
int sw_rec_field(sw_rec *r, size_t i, const char **key, size_t *klen, sw_val *v);

/* Getters: 0 on success, SW_ENOENT if absent, SW_ETYPE/SW_ERANGE if it does not fit. */
int sw_rec_get(sw_rec *r, const char *key, sw_val *v);
int sw_rec_get_str(sw_rec *r, const char *key, const char **s, size_t *n);
int sw_rec_get_bin(sw_rec *r, const char *key, const void **p, size_t *n);
int sw_rec_get_i64(sw_rec *r, const char *key, int64_t *out);
int sw_rec_get_u64(sw_rec *r, const char *key, uint64_t *out);
int sw_rec_get_f64(sw_rec *r, const char *key, double *out); /* any number */
/*
 * Arrays into caller buffers: *n is set to the array's length; if it
 * exceeds cap nothing is written and SW_ERANGE is returned, so the caller
 * can grow the buffer and ask again.
 */
int sw_rec_get_u32s(sw_rec *r, const char *key, uint32_t *dst, size_t cap, size_t *n);
int sw_rec_get_f32s(sw_rec *r, const char *key, float *dst, size_t cap, size_t *n);
/* A nested map as a record of its own, borrowing r's bytes. */
int sw_rec_get_map(sw_rec *r, const char *key, sw_rec *sub);

/* Setters replace the field in place, or append it. */
int sw_rec_set_nil(sw_rec *r, const char *key);
int sw_rec_set_bool(sw_rec *r, const char *key, bool b);
int sw_rec_set_i64(sw_rec *r, const char *key, int64_t x);
int sw_rec_set_u64(sw_rec *r, const char *key, uint64_t x);
int sw_rec_set_f32(sw_rec *r, const char *key, float x);
int sw_rec_set_f64(sw_rec *r, const char *key, double x);
int sw_rec_set_str(sw_rec *r, const char *key, const char *s, size_t n);
int sw_rec_set_bin(sw_rec *r, const char *key, const void *p, size_t n);
int sw_rec_set_u32s(sw_rec *r, const char *key, const uint32_t *a, size_t n);
int sw_rec_set_f32s(sw_rec *r, const char *key, const float *a, size_t n);
int sw_rec_set_map(sw_rec *r, const char *key, sw_rec *sub);
/* Any value, already encoded as one msgpack value (checked). */
int sw_rec_set_raw(sw_rec *r, const char *key, const void *mp, size_t n);

/* Remove a field; SW_ENOENT if it was absent. */
int sw_rec_del(sw_rec *r, const char *key);
/* Keep only the named fields (in the record's order). */
int sw_rec_keep(sw_rec *r, const char *const *keys, size_t nkeys);

#pragma GCC visibility pop

#endif
