/*
 * mp.c - msgpack at the byte level: the in-place scanner that finds where a
 * value ends and decodes one value into an sw_val view, and the encoders.
 *
 * Encoding goes through msgpack-c's packer.  Decoding does not: msgpack-c's
 * unpacker builds an object tree per record, which a pass-through at memory
 * speed cannot afford and which cannot tell where each field's bytes lie;
 * zero-copy field views need exactly that, so we scan the bytes in place.
 * The unit tests check this scanner against msgpack-c's unpacker.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <msgpack.h>
#include "common/internal.h"

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/*
 * Header of the value at p: its size without payload (hdr), the payload
 * bytes that follow it (body), and how many values nest in it (items).
 * Returns 0, SW_ETRUNC or SW_EFORMAT.
 */
static inline int head_(const uint8_t *p, const uint8_t *end, size_t *hdr,
                        uint64_t *body, uint64_t *items)
{
	uint8_t c = *p;
	size_t avail = (size_t)(end - p);
	*body = 0;
	*items = 0;
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
		*hdr = 1;
		return 0;
	}
	if (c >= 0xa0 && c <= 0xbf) {
		*hdr = 1;
		*body = c & 0x1f;
		return 0;
	}
	if (c >= 0x80 && c <= 0x8f) {
		*hdr = 1;
		*items = 2u * (c & 0x0f);
		return 0;
	}
	if (c >= 0x90 && c <= 0x9f) {
		*hdr = 1;
		*items = c & 0x0f;
		return 0;
	}
	/* 0xc4..0xdf: sizes by table */
	static const uint8_t hsize[32] = {
		/* c4 bin8 */ 2, 3, 5, /* c7 ext8 */ 3, 4, 6, /* ca f32 */ 5, 9,
		/* cc u8 */ 2, 3, 5, 9, /* d0 i8 */ 2, 3, 5, 9,
		/* d4 fixext */ 2, 2, 2, 2, 2, /* d9 str8 */ 2, 3, 5,
		/* dc array16 */ 3, 5, /* de map16 */ 3, 5
	};
	if (c == 0xc1)
		return SW_EFORMAT;
	size_t h = hsize[c - 0xc4];
	*hdr = h;
	if (avail < h)
		return SW_ETRUNC;
	switch (c) {
	case 0xc4: case 0xd9: *body = p[1]; break;
	case 0xc5: case 0xda: *body = be16(p + 1); break;
	case 0xc6: case 0xdb: *body = be32(p + 1); break;
	case 0xc7: *body = p[1]; break;
	case 0xc8: *body = be16(p + 1); break;
	case 0xc9: *body = be32(p + 1); break;
	case 0xd4: *body = 1; break;
	case 0xd5: *body = 2; break;
	case 0xd6: *body = 4; break;
	case 0xd7: *body = 8; break;
	case 0xd8: *body = 16; break;
	case 0xdc: *items = be16(p + 1); break;
	case 0xdd: *items = be32(p + 1); break;
	case 0xde: *items = 2u * be16(p + 1); break;
	case 0xdf: *items = 2u * (uint64_t)be32(p + 1); break;
	default: break; /* numbers: fixed size, in the table */
	}
	return 0;
}

/*
 * The whole size of each value whose size its first byte tells and that
 * holds no text: numbers, nil, booleans and fixext; 0 for the rest
 * (containers, every str, whose UTF-8 the reader checks, bin, ext8+, and
 * the unused 0xc1).  Token-id and log-prob arrays are long runs of these,
 * so the scanner steps over them without decoding a header.
 */
static const uint8_t fixsize_[256] = {
	/* 00 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 10 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 20 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 30 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 40 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 50 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 60 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 70 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* 80 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 90 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* a0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* b0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* c0 */ 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 5, 9, 2, 3, 5, 9,
	/* d0 */ 2, 3, 5, 9, 3, 4, 6, 10, 18, 0, 0, 0, 0, 0, 0, 0,
	/* e0 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	/* f0 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/*
 * sw_mp_skip, and with text (bad_at not NULL) the check that every str in
 * the value is UTF-8, in the same pass: a str is then no fixed-size value
 * to step over but a body to look at; with maps not NULL, a count of the
 * maps in the value.  Inlined into each caller, so each loop is what its
 * caller needs.  With boxes not NULL, a count of the value's arrays and maps
 * (empty ones too, the value's own counted): a bound on how deep they nest.
 */
static inline __attribute__((always_inline)) int
skip_(const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next, size_t *bad_at, uint64_t *maps,
      uint64_t *boxes)
{
	const uint8_t *start = p;
	uint64_t left = 1;
	/*
	 * Nesting needs no stack: a container just adds its elements to the
	 * count of values still to skip.  Every value takes at least one byte,
	 * so a count beyond the size limit is refused at once.
	 */
	while (left) {
		size_t hdr, fs;
		while (left && p < end && (fs = fixsize_[*p]) != 0 && fs <= (size_t)(end - p)) {
			/*
			 * A run of values of one size (an f32 array, small token
			 * ids): the next address does not wait for this load, so
			 * the loop pipelines instead of chasing each header.
			 */
			do {
				p += fs;
				left--;
			} while (left && fs <= (size_t)(end - p) && fixsize_[*p] == fs);
		}
		if ((size_t)(p - start) > max) {
			*next = p;
			return SW_ETOOBIG;
		}
		if (!left)
			break;
		uint64_t body, items;
		if (p >= end) {
			*next = p;
			return SW_ETRUNC;
		}
		int rc = head_(p, end, &hdr, &body, &items);
		if (rc) {
			*next = p;
			return rc;
		}
		uint64_t used = (uint64_t)(p - start) + hdr;
		if (body > max || used + body > max || items > max) {
			*next = p;
			return SW_ETOOBIG;
		}
		/* head_ has checked that the header itself is here */
		if (body > (uint64_t)(end - p) - hdr) {
			*next = p;
			return SW_ETRUNC;
		}
		if (maps && ((*p & 0xf0) == 0x80 || *p == 0xde || *p == 0xdf))
			(*maps)++;
		if (boxes && ((*p & 0xe0) == 0x80 || (*p >= 0xdc && *p <= 0xdf)))
			(*boxes)++;
		size_t bad;
		if (bad_at && ((*p & 0xe0) == 0xa0 || (*p >= 0xd9 && *p <= 0xdb)) &&
		    sw_utf8_check(p + hdr, (size_t)body, &bad)) {
			*bad_at = (size_t)(p - start) + hdr + bad;
			*next = p;
			return SW_EFORMAT;
		}
		p += hdr + body;
		left += items - 1;
		if (left > max) {
			*next = p;
			return SW_ETOOBIG;
		}
	}
	*next = p;
	return 0;
}

int sw_mp_skip(const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next)
{
	return skip_(p, end, max, next, NULL, NULL, NULL);
}

int sw_mp_skip_utf8(const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next, size_t *bad_at)
{
	*bad_at = SIZE_MAX;
	return skip_(p, end, max, next, bad_at, NULL, NULL);
}

/* ---- keys that appear twice in a map ---- */

typedef struct frame_ {
	uint64_t left; /* values still to come: a map's keys and values both */
	size_t kstart; /* a map's first key in the key list */
	bool map;
} frame_;

static int key_cmp_(const sw_key *a, const sw_key *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->kind == 'u' || a->kind == 'i')
		return a->iv < b->iv ? -1 : a->iv > b->iv;
	if (a->n != b->n)
		return a->n < b->n ? -1 : 1;
	return memcmp(a->b, b->b, (size_t)a->n);
}

static int key_sort_(const void *x, const void *y)
{
	const sw_key *a = x, *b = y;
	int c = key_cmp_(a, b);
	return c ? c : a->off < b->off ? -1 : a->off > b->off;
}

/* Few keys (a record's fields) are compared pair by pair; many are sorted,
 * so a map of a million keys costs n log n, not n^2. */
const sw_key *sw_key_twin(sw_key *k, size_t n)
{
	if (n <= 16) {
		for (size_t j = 1; j < n; j++)
			for (size_t i = 0; i < j; i++)
				if (!key_cmp_(&k[i], &k[j]))
					return &k[j];
		return NULL;
	}
	qsort(k, n, sizeof *k, key_sort_);
	for (size_t i = 1; i < n; i++)
		if (!key_cmp_(&k[i - 1], &k[i]))
			return &k[i];
	return NULL;
}

/* The key whose header is at p (hdr, body from head_), off bytes into the value. */
static sw_key key_read_(const uint8_t *p, size_t hdr, uint64_t body, size_t off)
{
	uint8_t c = *p;
	if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb) || (c >= 0xc4 && c <= 0xc6))
		return (sw_key){ p + hdr, body, 0, off, c >= 0xc4 && c <= 0xc6 ? 'b' : 's' };
	if (c <= 0x7f || (c >= 0xcc && c <= 0xcf))
		return (sw_key){ p, hdr + body,
			         c <= 0x7f ? c : c == 0xcc ? p[1] : c == 0xcd ? be16(p + 1) : c == 0xce ? be32(p + 1) : be64(p + 1),
			         off, 'u' };
	int64_t s;
	if (c >= 0xe0)
		s = (int8_t)c;
	else if (c == 0xd0)
		s = (int8_t)p[1];
	else if (c == 0xd1)
		s = (int16_t)be16(p + 1);
	else if (c == 0xd2)
		s = (int32_t)be32(p + 1);
	else if (c == 0xd3)
		s = (int64_t)be64(p + 1);
	else
		return (sw_key){ p, hdr + body, 0, off, 'v' };
	return (sw_key){ p, hdr + body, (uint64_t)s, off, s < 0 ? 'i' : 'u' };
}

static void twin_out_(sw_mp_twin *t, const sw_key *k)
{
	t->at = k->off;
	t->key = k->b;
	t->klen = (size_t)k->n;
	t->kind = k->kind == 's' || k->kind == 'b' ? (char)k->kind : 'v';
}

/* The last element of an array of type kept in a sw_buf. */
#define TOP_(b, type) ((type *)(b)->p + (b)->len / sizeof(type) - 1)

int sw_mp_dupkey(sw_mp_dups *d, const uint8_t *p, size_t n, sw_mp_twin *t)
{
	const uint8_t *start = p, *end = p + n;
	sw_buf *fr = &d->frames, *ks = &d->keys;
	fr->len = ks->len = 0;
	if (sw_buf_put(fr, &(frame_){ .left = 1 }, sizeof(frame_)))
		return SW_ENOMEM;
	while (fr->len) {
		frame_ *f = TOP_(fr, frame_);
		if (!f->map) { /* an array's runs of numbers: stepped over as sw_mp_skip does */
			uint64_t left = f->left;
			size_t fs;
			while (left && p < end && (fs = fixsize_[*p]) != 0 && fs <= (size_t)(end - p))
				do {
					p += fs;
					left--;
				} while (left && fs <= (size_t)(end - p) && fixsize_[*p] == fs);
			f->left = left;
		}
		if (!f->left) {
			if (f->map) {
				size_t nk = ks->len / sizeof(sw_key);
				const sw_key *tw = sw_key_twin((sw_key *)ks->p + f->kstart, nk - f->kstart);
				if (tw) {
					twin_out_(t, tw);
					return 1;
				}
				ks->len = f->kstart * sizeof(sw_key);
			}
			fr->len -= sizeof(frame_);
			continue;
		}
		size_t hdr;
		uint64_t body, items;
		if (p >= end || head_(p, end, &hdr, &body, &items) || body > (uint64_t)(end - p) - hdr)
			return SW_EFORMAT; /* not a value sw_mp_skip took */
		if (f->map && f->left % 2 == 0) {
			sw_key k = key_read_(p, hdr, body, (size_t)(p - start));
			if (sw_buf_put(ks, &k, sizeof k))
				return SW_ENOMEM;
		}
		bool map = (*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf;
		bool box = map || (*p >= 0x90 && *p <= 0x9f) || *p == 0xdc || *p == 0xdd;
		f->left--;
		p += hdr + body;
		if (box) {
			/* a record's map and 255 levels in it, as JSON's 256 */
			if (fr->len / sizeof(frame_) >= SW_MP_MAX_DEPTH)
				return SW_ERANGE;
			/* (an empty one: nothing in it, no frame) */
			frame_ nf = { .left = items, .kstart = ks->len / sizeof(sw_key), .map = map };
			if (items && sw_buf_put(fr, &nf, sizeof nf))
				return SW_ENOMEM;
		}
	}
	return 0;
}

int sw_mp_scan_record(sw_mp_dups *d, const uint8_t *p, const uint8_t *end, size_t max, const uint8_t **next,
                      size_t *bad_at, sw_mp_twin *t)
{
	const uint8_t *start = p;
	size_t hdr;
	uint64_t body, items;
	*bad_at = SIZE_MAX;
	if (p >= end) {
		*next = p;
		return SW_ETRUNC;
	}
	if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
		return skip_(p, end, max, next, bad_at, NULL, NULL); /* not a map: no keys of its own */
	int rc = head_(p, end, &hdr, &body, &items);
	if (rc || items > max) {
		*next = p;
		return rc ? rc : SW_ETOOBIG;
	}
	/* The map's keys and values one by one, each scanned whole as sw_mp_skip_utf8
	 * does (runs of numbers at memory speed); a value holding a map is walked
	 * again for its keys, one of SW_MP_MAX_DEPTH arrays and maps for its depth,
	 * the rest never. */
	const uint8_t *q = p + hdr;
	d->top.len = 0;
	for (uint64_t i = 0; i < items; i++) {
		const uint8_t *v = q;
		size_t used = (size_t)(v - start), bad = SIZE_MAX;
		uint64_t maps = 0, boxes = 0;
		if (used > max) {
			*next = v;
			return SW_ETOOBIG;
		}
		size_t fs = fixsize_[*v];
		if (fs && fs <= (size_t)(end - v) && used + fs <= max) {
			q = v + fs; /* a number, nil or a boolean: nothing to look into */
			rc = 0;
		} else {
			rc = skip_(v, end, max - used, &q, &bad, &maps, &boxes);
		}
		if (rc) {
			if (rc == SW_EFORMAT && bad != SIZE_MAX)
				*bad_at = used + bad;
			*next = q;
			return rc;
		}
		/* boxes bound the value's depth: below the record's map, it is
		 * deeper than the limit only with SW_MP_MAX_DEPTH of them */
		if ((maps || boxes >= SW_MP_MAX_DEPTH) && (rc = sw_mp_dupkey(d, v, (size_t)(q - v), t)) != 0) {
			if (rc == 1)
				t->at += used;
			*next = q;
			return rc;
		}
		if (i % 2 == 0) {
			size_t kh;
			uint64_t kb, ki;
			head_(v, end, &kh, &kb, &ki);
			sw_key k = key_read_(v, kh, kb, used);
			if (sw_buf_put(&d->top, &k, sizeof k)) {
				*next = v;
				return SW_ENOMEM;
			}
		}
	}
	*next = q;
	const sw_key *tw = sw_key_twin((sw_key *)d->top.p, d->top.len / sizeof(sw_key));
	if (tw) {
		twin_out_(t, tw);
		return 1;
	}
	return 0;
}

void sw_mp_dups_release(sw_mp_dups *d)
{
	sw_buf_release(&d->frames);
	sw_buf_release(&d->keys);
	sw_buf_release(&d->top);
}

int sw_val_decode(const void *vp, size_t n, sw_val *v)
{
	const uint8_t *p = vp, *end = p + n, *next;
	if (n == 0)
		return SW_ETRUNC;
	int rc = sw_mp_skip(p, end, n, &next);
	if (rc)
		return rc == SW_ETOOBIG ? SW_ETRUNC : rc;
	memset(v, 0, sizeof *v);
	v->raw = p;
	v->rawlen = (size_t)(next - p);
	uint8_t c = *p;
	if (c <= 0x7f) { v->type = SW_T_UINT; v->v.u = c; return 0; }
	if (c >= 0xe0) { v->type = SW_T_INT; v->v.i = (int8_t)c; return 0; }
	if (c >= 0xa0 && c <= 0xbf) {
		v->type = SW_T_STR;
		v->v.str.ptr = (const char *)p + 1;
		v->v.str.len = c & 0x1f;
		return 0;
	}
	if (c >= 0x80 && c <= 0x9f) {
		v->type = c <= 0x8f ? SW_T_MAP : SW_T_ARRAY;
		v->v.count = c & 0x0f;
		v->body = p + 1;
		return 0;
	}
	switch (c) {
	case 0xc0: v->type = SW_T_NIL; return 0;
	case 0xc2: case 0xc3: v->type = SW_T_BOOL; v->v.b = c == 0xc3; return 0;
	case 0xc4: case 0xc5: case 0xc6: {
		size_t h = c == 0xc4 ? 2 : c == 0xc5 ? 3 : 5;
		v->type = SW_T_BIN;
		v->v.str.ptr = (const char *)p + h;
		v->v.str.len = (uint32_t)(v->rawlen - h);
		return 0;
	}
	case 0xd9: case 0xda: case 0xdb: {
		size_t h = c == 0xd9 ? 2 : c == 0xda ? 3 : 5;
		v->type = SW_T_STR;
		v->v.str.ptr = (const char *)p + h;
		v->v.str.len = (uint32_t)(v->rawlen - h);
		return 0;
	}
	case 0xc7: case 0xc8: case 0xc9: {
		size_t h = c == 0xc7 ? 3 : c == 0xc8 ? 4 : 6;
		v->type = SW_T_EXT;
		v->ext_type = (int8_t)p[h - 1];
		v->v.str.ptr = (const char *)p + h;
		v->v.str.len = (uint32_t)(v->rawlen - h);
		return 0;
	}
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
		v->type = SW_T_EXT;
		v->ext_type = (int8_t)p[1];
		v->v.str.ptr = (const char *)p + 2;
		v->v.str.len = (uint32_t)(v->rawlen - 2);
		return 0;
	case 0xca: {
		uint32_t b = be32(p + 1);
		v->type = SW_T_F32;
		memcpy(&v->v.f32, &b, 4);
		return 0;
	}
	case 0xcb: {
		uint64_t b = be64(p + 1);
		v->type = SW_T_F64;
		memcpy(&v->v.f64, &b, 8);
		return 0;
	}
	case 0xcc: v->type = SW_T_UINT; v->v.u = p[1]; return 0;
	case 0xcd: v->type = SW_T_UINT; v->v.u = be16(p + 1); return 0;
	case 0xce: v->type = SW_T_UINT; v->v.u = be32(p + 1); return 0;
	case 0xcf: v->type = SW_T_UINT; v->v.u = be64(p + 1); return 0;
	case 0xd0: v->v.i = (int8_t)p[1]; break;
	case 0xd1: v->v.i = (int16_t)be16(p + 1); break;
	case 0xd2: v->v.i = (int32_t)be32(p + 1); break;
	case 0xd3: v->v.i = (int64_t)be64(p + 1); break;
	case 0xdc: case 0xdd: case 0xde: case 0xdf: {
		size_t h = (c == 0xdc || c == 0xde) ? 3 : 5;
		uint32_t cnt = h == 3 ? be16(p + 1) : be32(p + 1);
		v->type = c <= 0xdd ? SW_T_ARRAY : SW_T_MAP;
		v->v.count = cnt;
		v->body = p + h;
		return 0;
	}
	default:
		return SW_EFORMAT;
	}
	/* signed encodings may hold non-negative values */
	if (v->v.i >= 0) {
		v->type = SW_T_UINT;
		v->v.u = (uint64_t)v->v.i;
	} else {
		v->type = SW_T_INT;
	}
	return 0;
}

int sw_val_number(const sw_val *v, double *out)
{
	switch (v->type) {
	case SW_T_INT: *out = (double)v->v.i; return 0;
	case SW_T_UINT: *out = (double)v->v.u; return 0;
	case SW_T_F32: *out = v->v.f32; return 0;
	case SW_T_F64: *out = v->v.f64; return 0;
	default: return SW_ETYPE;
	}
}

const char *sw_type_name(sw_type t)
{
	static const char *const names[] = {
		"nil", "bool", "int", "uint", "float32", "float64",
		"str", "bin", "array", "map", "ext"
	};
	return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

void sw_iter_init(sw_iter *it, const sw_val *c)
{
	it->p = c->body;
	it->end = c->raw + c->rawlen;
	it->left = c->type == SW_T_MAP ? 2u * (uint64_t)c->v.count
	         : c->type == SW_T_ARRAY ? c->v.count : 0;
}

int sw_iter_next(sw_iter *it, sw_val *out)
{
	if (it->left == 0)
		return 0;
	int rc = sw_val_decode(it->p, (size_t)(it->end - it->p), out);
	if (rc)
		return SW_EFORMAT;
	it->p += out->rawlen;
	it->left--;
	return 1;
}

/* Encoders: msgpack-c's packer writing into an sw_buf. */

static int buf_write_(void *data, const char *p, size_t n)
{
	return sw_buf_put(data, p, n) ? -1 : 0;
}

#define PACK(b, call)                                              \
	do {                                                       \
		msgpack_packer pk_;                                \
		msgpack_packer_init(&pk_, (b), buf_write_);        \
		return call ? SW_ENOMEM : 0;                       \
	} while (0)

int sw_mp_put_map(sw_buf *b, uint32_t n) { PACK(b, msgpack_pack_map(&pk_, n)); }
int sw_mp_put_array(sw_buf *b, uint32_t n) { PACK(b, msgpack_pack_array(&pk_, n)); }
int sw_mp_put_u64(sw_buf *b, uint64_t x) { PACK(b, msgpack_pack_uint64(&pk_, x)); }
int sw_mp_put_i64(sw_buf *b, int64_t x) { PACK(b, msgpack_pack_int64(&pk_, x)); }
int sw_mp_put_f32(sw_buf *b, float x) { PACK(b, msgpack_pack_float(&pk_, x)); }
int sw_mp_put_f64(sw_buf *b, double x) { PACK(b, msgpack_pack_double(&pk_, x)); }
int sw_mp_put_nil(sw_buf *b) { PACK(b, msgpack_pack_nil(&pk_)); }
int sw_mp_put_bool(sw_buf *b, int x) { PACK(b, (x ? msgpack_pack_true(&pk_) : msgpack_pack_false(&pk_))); }

int sw_mp_put_str(sw_buf *b, const char *s, size_t n)
{
	if (n > UINT32_MAX)
		return SW_ETOOBIG;
	if (sw_utf8_check(s, n, NULL))
		return SW_EFORMAT;
	PACK(b, (msgpack_pack_str(&pk_, n) || msgpack_pack_str_body(&pk_, s, n)));
}

int sw_mp_put_bin(sw_buf *b, const void *p, size_t n)
{
	if (n > UINT32_MAX)
		return SW_ETOOBIG;
	PACK(b, (msgpack_pack_bin(&pk_, n) || msgpack_pack_bin_body(&pk_, p, n)));
}

int sw_mp_put_ext(sw_buf *b, int8_t type, const void *p, size_t n)
{
	if (n > UINT32_MAX)
		return SW_ETOOBIG;
	PACK(b, (msgpack_pack_ext(&pk_, n, type) || msgpack_pack_ext_body(&pk_, p, n)));
}
