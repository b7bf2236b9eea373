/*
 * record.c - a sample record: its msgpack bytes, a lazily built index of its
 * top-level fields, and the edits made to it.
 *
 * The index holds offsets, not pointers: a field's key and value lie either
 * in the original bytes (base) or in the arena where setters encode new
 * values, and the arena may move as it grows.  Until the first edit the
 * record's encoding is the original bytes themselves, so reading a stream
 * and writing it on costs no re-encoding.
 */
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"

typedef struct field_ {
	uint32_t kofs, klen;     /* the encoded key */
	uint32_t sofs, slen;     /* the key's string bytes, if it is a string */
	uint32_t vofs, vlen;     /* the encoded value */
	uint8_t kin, vin;        /* 1: in the arena, 0: in base */
	uint8_t kstr;            /* the key is a string */
} field_;

struct sw_rec {
	const uint8_t *base;
	size_t baselen;
	sw_buf own;              /* base, when the record owns its bytes */
	sw_buf arena;            /* keys and values set since loading */
	sw_buf out;              /* the re-encoded record */
	field_ *f;
	size_t nf, capf;
	int indexed, dirty;
};

static const uint8_t empty_map_[1] = { 0x80 };

sw_rec *sw_rec_new(void)
{
	sw_rec *r = calloc(1, sizeof *r);
	if (r)
		sw_rec_clear(r);
	return r;
}

void sw_rec_free(sw_rec *r)
{
	if (!r)
		return;
	sw_buf_release(&r->own);
	sw_buf_release(&r->arena);
	sw_buf_release(&r->out);
	free(r->f);
	free(r);
}

static void reset_(sw_rec *r, const uint8_t *p, size_t n)
{
	r->base = p;
	r->baselen = n;
	r->arena.len = 0;
	r->nf = 0;
	r->indexed = 0;
	r->dirty = 0;
}

void sw_rec_clear(sw_rec *r)
{
	reset_(r, empty_map_, 1);
}

/* For the reader, which has already scanned the bytes. */
void sw_rec_load_trusted_(sw_rec *r, const uint8_t *p, size_t n)
{
	reset_(r, p, n);
}

int sw_rec_load(sw_rec *r, const void *vp, size_t n)
{
	const uint8_t *p = vp, *next;
	if (n == 0 || n > UINT32_MAX)
		return SW_EFORMAT;
	if (sw_mp_skip(p, p + n, n, &next) || next != p + n)
		return SW_EFORMAT;
	if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
		return SW_EFORMAT;
	reset_(r, p, n);
	return 0;
}

int sw_rec_own(sw_rec *r)
{
	if (r->base == r->own.p || r->base == empty_map_)
		return 0;
	r->own.len = 0;
	if (sw_buf_put(&r->own, r->base, r->baselen))
		return SW_ENOMEM;
	r->base = r->own.p;
	return 0;
}

static inline const uint8_t *kptr_(const sw_rec *r, const field_ *f)
{
	return (f->kin ? r->arena.p : r->base) + f->kofs;
}

static inline const uint8_t *vptr_(const sw_rec *r, const field_ *f)
{
	return (f->vin ? r->arena.p : r->base) + f->vofs;
}

static int grow_(sw_rec *r)
{
	if (r->nf < r->capf)
		return 0;
	size_t cap = r->capf ? 2 * r->capf : 16;
	field_ *f = realloc(r->f, cap * sizeof *f);
	if (!f)
		return SW_ENOMEM;
	r->f = f;
	r->capf = cap;
	return 0;
}

/* Fill in where a key's string bytes are. */
static void keystr_(field_ *f, const uint8_t *k)
{
	sw_val v;
	f->kstr = 0;
	if (sw_val_decode(k, f->klen, &v) == 0 && v.type == SW_T_STR) {
		f->kstr = 1;
		f->sofs = f->kofs + (uint32_t)((const uint8_t *)v.v.str.ptr - k);
		f->slen = v.v.str.len;
	}
}

static int index_(sw_rec *r)
{
	if (r->indexed)
		return 0;
	sw_val m;
	if (sw_val_decode(r->base, r->baselen, &m) || m.type != SW_T_MAP)
		return SW_EFORMAT;
	const uint8_t *p = m.body, *end = r->base + r->baselen, *next;
	r->nf = 0;
	for (uint32_t i = 0; i < m.v.count; i++) {
		if (grow_(r))
			return SW_ENOMEM;
		field_ *f = &r->f[r->nf];
		memset(f, 0, sizeof *f);
		if (sw_mp_skip(p, end, (size_t)(end - p), &next))
			return SW_EFORMAT;
		f->kofs = (uint32_t)(p - r->base);
		f->klen = (uint32_t)(next - p);
		keystr_(f, p);
		p = next;
		if (sw_mp_skip(p, end, (size_t)(end - p), &next))
			return SW_EFORMAT;
		f->vofs = (uint32_t)(p - r->base);
		f->vlen = (uint32_t)(next - p);
		p = next;
		r->nf++;
	}
	r->indexed = 1;
	return 0;
}

static field_ *find_(sw_rec *r, const char *key)
{
	if (index_(r))
		return NULL;
	size_t n = strlen(key);
	for (size_t i = 0; i < r->nf; i++) {
		field_ *f = &r->f[i];
		if (f->kstr && f->slen == n &&
		    memcmp((f->kin ? r->arena.p : r->base) + f->sofs, key, n) == 0)
			return f;
	}
	return NULL;
}

int sw_rec_bytes(sw_rec *r, const uint8_t **p, size_t *n)
{
	if (!r->dirty) {
		*p = r->base;
		*n = r->baselen;
		return 0;
	}
	r->out.len = 0;
	if (r->nf > UINT32_MAX || sw_mp_put_map(&r->out, (uint32_t)r->nf))
		return SW_ENOMEM;
	for (size_t i = 0; i < r->nf; i++) {
		field_ *f = &r->f[i];
		if (sw_buf_put(&r->out, kptr_(r, f), f->klen) ||
		    sw_buf_put(&r->out, vptr_(r, f), f->vlen))
			return SW_ENOMEM;
	}
	*p = r->out.p;
	*n = r->out.len;
	return 0;
}

size_t sw_rec_count(sw_rec *r)
{
	if (!r->dirty) {
		sw_val m;
		if (sw_val_decode(r->base, r->baselen, &m) == 0 && m.type == SW_T_MAP)
			return m.v.count;
	}
	return index_(r) ? 0 : r->nf;
}

int sw_rec_field(sw_rec *r, size_t i, const char **key, size_t *klen, sw_val *v)
{
	int rc = index_(r);
	if (rc)
		return rc;
	if (i >= r->nf)
		return SW_ERANGE;
	field_ *f = &r->f[i];
	*key = f->kstr ? (const char *)(f->kin ? r->arena.p : r->base) + f->sofs : NULL;
	*klen = f->kstr ? f->slen : 0;
	return sw_val_decode(vptr_(r, f), f->vlen, v) ? SW_EFORMAT : 0;
}

int sw_rec_get(sw_rec *r, const char *key, sw_val *v)
{
	field_ *f = find_(r, key);
	if (!f)
		return r->indexed ? SW_ENOENT : SW_EFORMAT;
	return sw_val_decode(vptr_(r, f), f->vlen, v) ? SW_EFORMAT : 0;
}

static int get_typed_(sw_rec *r, const char *key, sw_val *v, sw_type t)
{
	int rc = sw_rec_get(r, key, v);
	if (rc)
		return rc;
	return v->type == t ? 0 : SW_ETYPE;
}

int sw_rec_get_str(sw_rec *r, const char *key, const char **s, size_t *n)
{
	sw_val v;
	int rc = get_typed_(r, key, &v, SW_T_STR);
	if (rc)
		return rc;
	*s = v.v.str.ptr;
	*n = v.v.str.len;
	return 0;
}

int sw_rec_get_bin(sw_rec *r, const char *key, const void **p, size_t *n)
{
	sw_val v;
	int rc = get_typed_(r, key, &v, SW_T_BIN);
	if (rc)
		return rc;
	*p = v.v.str.ptr;
	*n = v.v.str.len;
	return 0;
}

int sw_rec_get_i64(sw_rec *r, const char *key, int64_t *out)
{
	sw_val v;
	int rc = sw_rec_get(r, key, &v);
	if (rc)
		return rc;
	if (v.type == SW_T_INT)
		*out = v.v.i;
	else if (v.type == SW_T_UINT && v.v.u <= INT64_MAX)
		*out = (int64_t)v.v.u;
	else
		return v.type == SW_T_UINT ? SW_ERANGE : SW_ETYPE;
	return 0;
}

int sw_rec_get_u64(sw_rec *r, const char *key, uint64_t *out)
{
	sw_val v;
	int rc = sw_rec_get(r, key, &v);
	if (rc)
		return rc;
	if (v.type == SW_T_UINT)
		*out = v.v.u;
	else
		return v.type == SW_T_INT ? SW_ERANGE : SW_ETYPE;
	return 0;
}

int sw_rec_get_f64(sw_rec *r, const char *key, double *out)
{
	sw_val v;
	int rc = sw_rec_get(r, key, &v);
	return rc ? rc : sw_val_number(&v, out);
}

/* Shared by the array getters: check the type and the room, then walk. */
static int get_array_(sw_rec *r, const char *key, size_t cap, size_t *n, sw_iter *it)
{
	sw_val v;
	int rc = get_typed_(r, key, &v, SW_T_ARRAY);
	if (rc)
		return rc;
	*n = v.v.count;
	if (v.v.count > cap)
		return SW_ERANGE;
	sw_iter_init(it, &v);
	return 0;
}

int sw_rec_get_u32s(sw_rec *r, const char *key, uint32_t *dst, size_t cap, size_t *n)
{
	sw_iter it;
	sw_val e;
	int rc = get_array_(r, key, cap, n, &it);
	for (size_t i = 0; !rc && (rc = sw_iter_next(&it, &e)) == 1; i++) {
		if (e.type != SW_T_UINT)
			return SW_ETYPE;
		if (e.v.u > UINT32_MAX)
			return SW_ERANGE;
		dst[i] = (uint32_t)e.v.u;
		rc = 0;
	}
	return rc;
}

int sw_rec_get_f32s(sw_rec *r, const char *key, float *dst, size_t cap, size_t *n)
{
	sw_iter it;
	sw_val e;
	int rc = get_array_(r, key, cap, n, &it);
	for (size_t i = 0; !rc && (rc = sw_iter_next(&it, &e)) == 1; i++) {
		if (e.type == SW_T_F32)
			dst[i] = e.v.f32;
		else if (e.type == SW_T_F64)
			dst[i] = (float)e.v.f64;
		else
			return SW_ETYPE;
		rc = 0;
	}
	return rc;
}

int sw_rec_get_map(sw_rec *r, const char *key, sw_rec *sub)
{
	sw_val v;
	int rc = get_typed_(r, key, &v, SW_T_MAP);
	if (rc)
		return rc;
	reset_(sub, v.raw, v.rawlen);
	return 0;
}

/*
 * The field to set: the existing one, or a new one at the end whose key is
 * encoded into the arena.  The value is then encoded into the arena by the
 * caller between begin_ and end_.
 */
static field_ *begin_(sw_rec *r, const char *key, int *rc)
{
	field_ *f = find_(r, key);
	*rc = 0;
	if (!f) {
		if (!r->indexed) {
			*rc = SW_EFORMAT;
			return NULL;
		}
		size_t n = strlen(key);
		size_t at = r->arena.len;
		if (grow_(r) || sw_mp_put_str(&r->arena, key, n) || r->arena.len > UINT32_MAX) {
			*rc = SW_ENOMEM;
			return NULL;
		}
		f = &r->f[r->nf++];
		memset(f, 0, sizeof *f);
		f->kin = 1;
		f->kofs = (uint32_t)at;
		f->klen = (uint32_t)(r->arena.len - at);
		keystr_(f, r->arena.p + at);
	}
	f->vofs = (uint32_t)r->arena.len; /* the value starts here */
	return f;
}

static int end_(sw_rec *r, field_ *f, int rc)
{
	if (rc)
		return rc;
	if (r->arena.len > UINT32_MAX)
		return SW_ETOOBIG;
	f->vin = 1;
	f->vlen = (uint32_t)(r->arena.len - f->vofs);
	r->dirty = 1;
	return 0;
}

#define SETTER(name, decl, enc)                                    \
	int name decl                                              \
	{                                                          \
		int rc;                                            \
		field_ *f = begin_(r, key, &rc);                   \
		if (!f)                                            \
			return rc;                                 \
		return end_(r, f, enc);                            \
	}

SETTER(sw_rec_set_nil, (sw_rec *r, const char *key), sw_mp_put_nil(&r->arena))
SETTER(sw_rec_set_bool, (sw_rec *r, const char *key, bool b), sw_mp_put_bool(&r->arena, b))
SETTER(sw_rec_set_i64, (sw_rec *r, const char *key, int64_t x), sw_mp_put_i64(&r->arena, x))
SETTER(sw_rec_set_u64, (sw_rec *r, const char *key, uint64_t x), sw_mp_put_u64(&r->arena, x))
SETTER(sw_rec_set_f32, (sw_rec *r, const char *key, float x), sw_mp_put_f32(&r->arena, x))
SETTER(sw_rec_set_f64, (sw_rec *r, const char *key, double x), sw_mp_put_f64(&r->arena, x))
SETTER(sw_rec_set_str, (sw_rec *r, const char *key, const char *s, size_t n),
       sw_mp_put_str(&r->arena, s, n))
SETTER(sw_rec_set_bin, (sw_rec *r, const char *key, const void *p, size_t n),
       sw_mp_put_bin(&r->arena, p, n))

static int put_u32s_(sw_buf *b, const uint32_t *a, size_t n)
{
	if (n > UINT32_MAX || sw_mp_put_array(b, (uint32_t)n))
		return SW_ERANGE;
	for (size_t i = 0; i < n; i++)
		if (sw_mp_put_u64(b, a[i]))
			return SW_ENOMEM;
	return 0;
}

static int put_f32s_(sw_buf *b, const float *a, size_t n)
{
	if (n > UINT32_MAX || sw_mp_put_array(b, (uint32_t)n))
		return SW_ERANGE;
	for (size_t i = 0; i < n; i++)
		if (sw_mp_put_f32(b, a[i]))
			return SW_ENOMEM;
	return 0;
}

SETTER(sw_rec_set_u32s, (sw_rec *r, const char *key, const uint32_t *a, size_t n),
       put_u32s_(&r->arena, a, n))
SETTER(sw_rec_set_f32s, (sw_rec *r, const char *key, const float *a, size_t n),
       put_f32s_(&r->arena, a, n))

int sw_rec_set_raw(sw_rec *r, const char *key, const void *mp, size_t n)
{
	const uint8_t *p = mp, *next;
	size_t bad;
	if (n == 0 || sw_mp_skip_utf8(p, p + n, n, &next, &bad) || next != p + n)
		return SW_EFORMAT;
	int rc;
	field_ *f = begin_(r, key, &rc);
	if (!f)
		return rc;
	return end_(r, f, sw_buf_put(&r->arena, mp, n));
}

int sw_rec_set_map(sw_rec *r, const char *key, sw_rec *sub)
{
	const uint8_t *p;
	size_t n;
	int rc = sw_rec_bytes(sub, &p, &n);
	if (rc)
		return rc;
	/* sub may borrow r's arena, which begin_ can move: take a copy first */
	sw_buf tmp = { 0 };
	if (r->arena.p && p >= r->arena.p && p < r->arena.p + r->arena.cap) {
		if (sw_buf_put(&tmp, p, n))
			return SW_ENOMEM;
		p = tmp.p;
	}
	field_ *f = begin_(r, key, &rc);
	if (f)
		rc = end_(r, f, sw_buf_put(&r->arena, p, n));
	sw_buf_release(&tmp);
	return rc;
}

int sw_rec_del(sw_rec *r, const char *key)
{
	field_ *f = find_(r, key);
	if (!f)
		return r->indexed ? SW_ENOENT : SW_EFORMAT;
	size_t i = (size_t)(f - r->f);
	memmove(f, f + 1, (r->nf - i - 1) * sizeof *f);
	r->nf--;
	r->dirty = 1;
	return 0;
}

int sw_rec_keep(sw_rec *r, const char *const *keys, size_t nkeys)
{
	int rc = index_(r);
	if (rc)
		return rc;
	size_t j = 0;
	for (size_t i = 0; i < r->nf; i++) {
		field_ *f = &r->f[i];
		int keep = 0;
		for (size_t k = 0; f->kstr && k < nkeys && !keep; k++)
			keep = strlen(keys[k]) == f->slen &&
			       memcmp((f->kin ? r->arena.p : r->base) + f->sofs, keys[k], f->slen) == 0;
		if (keep)
			r->f[j++] = *f;
	}
	if (j != r->nf)
		r->dirty = 1;
	r->nf = j;
	return 0;
}
