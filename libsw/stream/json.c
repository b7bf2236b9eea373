/*
 * json.c - the JSON face of a stream: msgpack values to JSON text and back,
 * so that `sw-cat -f json | sw-cat -f msgpack` gives back the same bytes.
 *
 * What plain JSON cannot say is written as a one-key object whose key starts
 * with '$' (sw-stream(5) lists them): bin, ext, maps with keys that are not
 * strings, and non-finite floats.  A str is always UTF-8 (the reader and
 * sw_mp_put_str refuse any other): {"$str": base64} is read when its bytes
 * are UTF-8, and written only for a str that is not, which no stream this
 * library reads holds.  Floats keep
 * their width through the text alone: a float32 is written as the shortest
 * decimal that reads back as that float32, and a JSON number is read as a
 * float32 exactly when its text is that shortest form of a float32; a
 * float64 whose shortest text would read as a float32 gets one trailing
 * zero ("0.10"), which changes no value but marks the width.
 *
 * yyjson is compiled into this file so that its reader and its shortest
 * float writers (write_f32_raw, write_f64_raw, write_string) serve us.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#include "yyjson/yyjson.c"
#pragma GCC diagnostic pop

#include "common/internal.h"

#define MAX_DEPTH 256

/* ---- base64 (RFC 4648, with padding) ---- */

static const char b64_[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_put_(sw_buf *out, const uint8_t *p, size_t n)
{
	if (sw_buf_reserve(out, (n + 2) / 3 * 4 + 2))
		return SW_ENOMEM;
	uint8_t *o = out->p + out->len;
	*o++ = '"';
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = (uint8_t)b64_[v >> 18];
		*o++ = (uint8_t)b64_[(v >> 12) & 63];
		*o++ = (uint8_t)b64_[(v >> 6) & 63];
		*o++ = (uint8_t)b64_[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
		*o++ = (uint8_t)b64_[v >> 18];
		*o++ = (uint8_t)b64_[(v >> 12) & 63];
		*o++ = i + 1 < n ? (uint8_t)b64_[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o++ = '"';
	out->len = (size_t)(o - out->p);
	return 0;
}

static int b64_val_(int c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	if (c == '+') return 62;
	if (c == '/') return 63;
	return -1;
}

/* Decode into a fresh buffer; -1 if s is not canonical padded base64. */
static int b64_get_(const char *s, size_t n, sw_buf *dst)
{
	dst->len = 0;
	if (n % 4 || sw_buf_reserve(dst, n / 4 * 3 + 1))
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		int a = b64_val_((uint8_t)s[i]), b = b64_val_((uint8_t)s[i + 1]);
		int last = i + 4 == n;
		int c = last && s[i + 2] == '=' ? -2 : b64_val_((uint8_t)s[i + 2]);
		int d = last && s[i + 3] == '=' ? -2 : b64_val_((uint8_t)s[i + 3]);
		if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2))
			return -1;
		dst->p[dst->len++] = (uint8_t)(a << 2 | b >> 4);
		if (c >= 0)
			dst->p[dst->len++] = (uint8_t)((b & 15) << 4 | c >> 2);
		if (d >= 0)
			dst->p[dst->len++] = (uint8_t)((c & 3) << 6 | d);
	}
	return 0;
}

/* ---- numbers ---- */

/* The shortest text of a float32, as yyjson writes it ("1.0", "1.5e-7"). */
static size_t f32_text_(float f, char *buf)
{
	double d = f;
	uint64_t raw;
	memcpy(&raw, &d, 8);
	return (size_t)((char *)write_f32_raw((u8 *)buf, raw, 0) - buf);
}

static size_t f64_text_(double d, char *buf)
{
	uint64_t raw;
	memcpy(&raw, &d, 8);
	return (size_t)((char *)write_f64_raw((u8 *)buf, raw, 0) - buf);
}

/* Is text t exactly the shortest form of a float32?  If so, set *f. */
static int is_f32_text_(const char *t, size_t n, float *f)
{
	char buf[48];
	char *end;
	*f = strtof(t, &end);
	if (!isfinite(*f))
		return 0;
	return f32_text_(*f, buf) == n && memcmp(buf, t, n) == 0;
}

/* A non-finite float as the string of its {"$f32": ...} or {"$f64": ...} form. */
static int put_nonfinite_(sw_buf *out, int wide, uint64_t bits, int neg, int inf)
{
	char s[64];
	if (inf)
		snprintf(s, sizeof s, "{\"$f%d\":\"%sinf\"}", wide ? 64 : 32, neg ? "-" : "");
	else if ((!wide && bits == 0x7fc00000u) || (wide && bits == 0x7ff8000000000000ull))
		snprintf(s, sizeof s, "{\"$f%d\":\"nan\"}", wide ? 64 : 32);
	else if (wide)
		snprintf(s, sizeof s, "{\"$f64\":\"0x%016llx\"}", (unsigned long long)bits);
	else
		snprintf(s, sizeof s, "{\"$f32\":\"0x%08x\"}", (unsigned)bits);
	return sw_buf_put(out, s, strlen(s));
}

static int put_f32_(sw_buf *out, float f)
{
	if (!isfinite(f)) {
		uint32_t bits;
		memcpy(&bits, &f, 4);
		return put_nonfinite_(out, 0, bits, signbit(f) != 0, isinf(f));
	}
	if (sw_buf_reserve(out, 48))
		return SW_ENOMEM;
	out->len += f32_text_(f, (char *)out->p + out->len);
	return 0;
}

static int put_f64_(sw_buf *out, double d)
{
	if (!isfinite(d)) {
		uint64_t bits;
		memcpy(&bits, &d, 8);
		return put_nonfinite_(out, 1, bits, signbit(d) != 0, isinf(d));
	}
	if (sw_buf_reserve(out, 48))
		return SW_ENOMEM;
	char *t = (char *)out->p + out->len, tmp[48];
	size_t n = f64_text_(d, t);
	float f;
	memcpy(tmp, t, n);
	tmp[n] = 0;
	if (is_f32_text_(tmp, n, &f)) {
		/* mark the width: one more zero at the end of the mantissa */
		char *e = memchr(t, 'e', n);
		size_t m = e ? (size_t)(e - t) : n;
		int dot = memchr(t, '.', m) != NULL;
		memmove(t + m + (dot ? 1 : 2), t + m, n - m);
		if (dot) {
			t[m] = '0';
			n += 1;
		} else {
			t[m] = '.';
			t[m + 1] = '0';
			n += 2;
		}
	}
	out->len += n;
	return 0;
}

/* ---- msgpack -> JSON ---- */

static int put_lit_(sw_buf *out, const char *s)
{
	return sw_buf_put(out, s, strlen(s));
}

/* A string as JSON; 1 if it is not valid UTF-8 (nothing written then). */
static int put_str_(sw_buf *out, const char *s, size_t n)
{
	if (n > (SIZE_MAX - 16) / 6 || sw_buf_reserve(out, n * 6 + 16))
		return SW_ENOMEM;
	u8 *end = write_string(out->p + out->len, false, false, (const u8 *)s, n, enc_table_cpy);
	if (!end)
		return 1;
	out->len = (size_t)(end - out->p);
	return 0;
}

/* Map keys are nearly always short ASCII: check that before trying harder. */
static int is_utf8_str_(const sw_val *k)
{
	const uint8_t *s = (const uint8_t *)k->v.str.ptr;
	size_t i = 0;
	while (i < k->v.str.len && s[i] < 0x80)
		i++;
	if (i == k->v.str.len)
		return 1;
	sw_buf tmp = { 0 };
	int ok = put_str_(&tmp, k->v.str.ptr, k->v.str.len) == 0;
	sw_buf_release(&tmp);
	return ok;
}

static int reserved_key_(const char *s, size_t n)
{
	static const char *const keys[] = { "$bin", "$str", "$ext", "$map", "$f32", "$f64" };
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		if (n == strlen(keys[i]) && memcmp(s, keys[i], n) == 0)
			return 1;
	return 0;
}

static int to_json_(const sw_val *v, sw_buf *out, int depth, sw_error *err);

static int map_to_json_(const sw_val *v, sw_buf *out, int depth, sw_error *err)
{
	sw_iter it;
	sw_val k, x;
	int rc, plain = 1;
	/* Plain JSON object unless a key is not a UTF-8 string or it would read as a $ form. */
	sw_iter_init(&it, v);
	while (plain && (rc = sw_iter_next(&it, &k)) == 1) {
		if (sw_iter_next(&it, &x) != 1)
			return sw_fail(err, SW_EFORMAT, "corrupt map");
		if (k.type != SW_T_STR || (v->v.count == 1 && reserved_key_(k.v.str.ptr, k.v.str.len)))
			plain = 0;
		else if (!is_utf8_str_(&k))
			plain = 0;
	}
	if (put_lit_(out, plain ? "{" : "{\"$map\":["))
		return SW_ENOMEM;
	sw_iter_init(&it, v);
	for (uint32_t i = 0; (rc = sw_iter_next(&it, &k)) == 1; i++) {
		if (sw_iter_next(&it, &x) != 1)
			return sw_fail(err, SW_EFORMAT, "corrupt map");
		if (i && sw_buf_put(out, ",", 1))
			return SW_ENOMEM;
		if (!plain && sw_buf_put(out, "[", 1))
			return SW_ENOMEM;
		if ((rc = to_json_(&k, out, depth + 1, err)))
			return rc;
		if (sw_buf_put(out, plain ? ":" : ",", 1))
			return SW_ENOMEM;
		if ((rc = to_json_(&x, out, depth + 1, err)))
			return rc;
		if (!plain && sw_buf_put(out, "]", 1))
			return SW_ENOMEM;
	}
	if (rc < 0)
		return sw_fail(err, SW_EFORMAT, "corrupt map");
	return put_lit_(out, plain ? "}" : "]}");
}

static int to_json_(const sw_val *v, sw_buf *out, int depth, sw_error *err)
{
	char num[32];
	sw_iter it;
	sw_val e;
	int rc;
	if (depth > MAX_DEPTH)
		return sw_fail(err, SW_ETOOBIG, "values nest deeper than %d levels", MAX_DEPTH);
	switch (v->type) {
	case SW_T_NIL: return put_lit_(out, "null");
	case SW_T_BOOL: return put_lit_(out, v->v.b ? "true" : "false");
	case SW_T_UINT: /* yyjson's digit writer: snprintf was a fifth of msgpack -> JSON */
		return sw_buf_put(out, num, (size_t)((char *)write_u64(v->v.u, (u8 *)num) - num));
	case SW_T_INT:
		num[0] = '-'; /* SW_T_INT is always negative */
		return sw_buf_put(out, num, (size_t)((char *)write_u64(0 - (uint64_t)v->v.i, (u8 *)num + 1) - num));
	case SW_T_F32: return put_f32_(out, v->v.f32);
	case SW_T_F64: return put_f64_(out, v->v.f64);
	case SW_T_STR:
		rc = put_str_(out, v->v.str.ptr, v->v.str.len);
		if (rc != 1)
			return rc;
		if (put_lit_(out, "{\"$str\":") || b64_put_(out, (const uint8_t *)v->v.str.ptr, v->v.str.len))
			return SW_ENOMEM;
		return put_lit_(out, "}");
	case SW_T_BIN:
		if (put_lit_(out, "{\"$bin\":") || b64_put_(out, (const uint8_t *)v->v.str.ptr, v->v.str.len))
			return SW_ENOMEM;
		return put_lit_(out, "}");
	case SW_T_EXT:
		snprintf(num, sizeof num, "{\"$ext\":[%d,", v->ext_type);
		if (put_lit_(out, num) || b64_put_(out, (const uint8_t *)v->v.str.ptr, v->v.str.len))
			return SW_ENOMEM;
		return put_lit_(out, "]}");
	case SW_T_ARRAY:
		if (sw_buf_put(out, "[", 1))
			return SW_ENOMEM;
		sw_iter_init(&it, v);
		for (uint32_t i = 0; (rc = sw_iter_next(&it, &e)) == 1; i++) {
			if (i && sw_buf_put(out, ",", 1))
				return SW_ENOMEM;
			if ((rc = to_json_(&e, out, depth + 1, err)))
				return rc;
		}
		if (rc < 0)
			return sw_fail(err, SW_EFORMAT, "corrupt array");
		return sw_buf_put(out, "]", 1);
	case SW_T_MAP:
		return map_to_json_(v, out, depth, err);
	}
	return sw_fail(err, SW_EFORMAT, "unknown value type");
}

int sw_mp_to_json(const uint8_t *p, size_t n, sw_buf *out, sw_error *err)
{
	sw_val v;
	size_t mark = out->len;
	int rc = sw_val_decode(p, n, &v);
	if (rc)
		return sw_fail(err, rc, "corrupt record");
	rc = to_json_(&v, out, 0, err);
	if (!rc)
		rc = sw_buf_put(out, "\n", 1);
	if (rc)
		out->len = mark;
	return rc;
}

/* ---- JSON -> msgpack ---- */

struct sw_json_parser {
	yyjson_alc *alc;
	sw_buf tmp;
};

sw_json_parser *sw_json_parser_new(void)
{
	sw_json_parser *jp = calloc(1, sizeof *jp);
	if (jp && !(jp->alc = yyjson_alc_dyn_new())) {
		free(jp);
		jp = NULL;
	}
	return jp;
}

void sw_json_parser_free(sw_json_parser *jp)
{
	if (!jp)
		return;
	yyjson_alc_dyn_free(jp->alc);
	sw_buf_release(&jp->tmp);
	free(jp);
}

static int num_to_mp_(const char *t, size_t n, sw_buf *out, sw_error *err)
{
	char small[128], *s = small, *end;
	int rc;
	if (n >= sizeof small && !(s = malloc(n + 1)))
		return SW_ENOMEM;
	memcpy(s, t, n);
	s[n] = 0;
	if (!memchr(s, '.', n) && !memchr(s, 'e', n) && !memchr(s, 'E', n)) {
		errno = 0;
		if (s[0] == '-') {
			long long x = strtoll(s, &end, 10);
			rc = errno ? sw_fail(err, SW_ERANGE, "integer %s is out of the int64 range", s)
			           : sw_mp_put_i64(out, x);
		} else {
			unsigned long long x = strtoull(s, &end, 10);
			rc = errno ? sw_fail(err, SW_ERANGE, "integer %s is out of the uint64 range", s)
			           : sw_mp_put_u64(out, x);
		}
	} else {
		float f;
		if (is_f32_text_(s, n, &f)) {
			rc = sw_mp_put_f32(out, f);
		} else {
			double d = strtod(s, &end);
			rc = isfinite(d) ? sw_mp_put_f64(out, d)
			                 : sw_fail(err, SW_ERANGE, "number %s is out of the float64 range", s);
		}
	}
	if (s != small)
		free(s);
	return rc;
}

/* {"$f32": "nan"} and kin; bits of the float, or -1 */
static int nonfinite_(const char *s, size_t n, int wide, sw_buf *out)
{
	char buf[24];
	if (n >= sizeof buf)
		return -1;
	memcpy(buf, s, n);
	buf[n] = 0;
	double d;
	if (!strcmp(buf, "nan"))
		d = NAN;
	else if (!strcmp(buf, "inf"))
		d = INFINITY;
	else if (!strcmp(buf, "-inf"))
		d = -INFINITY;
	else if (n == (wide ? 18u : 10u) && buf[0] == '0' && buf[1] == 'x' &&
	         strspn(buf + 2, "0123456789abcdef") == n - 2) {
		unsigned long long bits = strtoull(buf + 2, NULL, 16);
		if (wide) {
			memcpy(&d, &bits, 8);
			if (isfinite(d))
				return -1;
			return sw_mp_put_f64(out, d);
		}
		uint32_t b32 = (uint32_t)bits;
		float f;
		memcpy(&f, &b32, 4);
		if (isfinite(f))
			return -1;
		return sw_mp_put_f32(out, f);
	} else {
		return -1;
	}
	return wide ? sw_mp_put_f64(out, d) : sw_mp_put_f32(out, (float)d);
}

static int val_to_mp_(sw_json_parser *jp, yyjson_val *v, sw_buf *out, int depth, sw_error *err);

static int special_to_mp_(sw_json_parser *jp, const char *k, yyjson_val *x, sw_buf *out,
                          int depth, sw_error *err)
{
	if (!strcmp(k, "$bin") || !strcmp(k, "$str")) {
		if (!yyjson_is_str(x) || b64_get_(yyjson_get_str(x), yyjson_get_len(x), &jp->tmp))
			return sw_fail(err, SW_EFORMAT, "'%s' must hold a base64 string", k);
		if (k[1] == 's' && sw_utf8_check(jp->tmp.p, jp->tmp.len, NULL))
			return sw_fail(err, SW_EFORMAT, "'$str' holds bytes that are not UTF-8 (a str must be "
			               "UTF-8: raw bytes go in '$bin')");
		return k[1] == 'b' ? sw_mp_put_bin(out, jp->tmp.p, jp->tmp.len)
		                   : sw_mp_put_str(out, (const char *)jp->tmp.p, jp->tmp.len);
	}
	if (!strcmp(k, "$ext")) {
		yyjson_val *t = yyjson_arr_get(x, 0), *d = yyjson_arr_get(x, 1);
		if (!yyjson_is_arr(x) || yyjson_arr_size(x) != 2 || !yyjson_is_raw(t) || !yyjson_is_str(d))
			return sw_fail(err, SW_EFORMAT, "'$ext' must hold [type, base64 string]");
		char *end;
		long type = strtol(yyjson_get_raw(t), &end, 10);
		if (end != yyjson_get_raw(t) + yyjson_get_len(t) || type < -128 || type > 127 ||
		    b64_get_(yyjson_get_str(d), yyjson_get_len(d), &jp->tmp))
			return sw_fail(err, SW_EFORMAT, "'$ext' must hold [type -128..127, base64 string]");
		return sw_mp_put_ext(out, (int8_t)type, jp->tmp.p, jp->tmp.len);
	}
	if (!strcmp(k, "$f32") || !strcmp(k, "$f64")) {
		int rc = yyjson_is_str(x) ? nonfinite_(yyjson_get_str(x), yyjson_get_len(x), k[2] == '6', out) : -1;
		if (rc < 0)
			return sw_fail(err, SW_EFORMAT, "'%s' must hold \"nan\", \"inf\", \"-inf\" or the hex bits of a NaN", k);
		return rc;
	}
	/* $map: [[key, value], ...] */
	if (!yyjson_is_arr(x) || yyjson_arr_size(x) > UINT32_MAX)
		return sw_fail(err, SW_EFORMAT, "'$map' must hold an array of [key, value] pairs");
	size_t i, max;
	yyjson_val *pair;
	if (sw_mp_put_map(out, (uint32_t)yyjson_arr_size(x)))
		return SW_ENOMEM;
	yyjson_arr_foreach(x, i, max, pair) {
		if (!yyjson_is_arr(pair) || yyjson_arr_size(pair) != 2)
			return sw_fail(err, SW_EFORMAT, "'$map' must hold an array of [key, value] pairs");
		int rc = val_to_mp_(jp, yyjson_arr_get(pair, 0), out, depth + 1, err);
		if (!rc)
			rc = val_to_mp_(jp, yyjson_arr_get(pair, 1), out, depth + 1, err);
		if (rc)
			return rc;
	}
	return 0;
}

static int val_to_mp_(sw_json_parser *jp, yyjson_val *v, sw_buf *out, int depth, sw_error *err)
{
	size_t i, max;
	int rc;
	if (depth > MAX_DEPTH)
		return sw_fail(err, SW_ETOOBIG, "values nest deeper than %d levels", MAX_DEPTH);
	switch (yyjson_get_type(v)) {
	case YYJSON_TYPE_NULL: return sw_mp_put_nil(out);
	case YYJSON_TYPE_BOOL: return sw_mp_put_bool(out, yyjson_get_bool(v));
	case YYJSON_TYPE_RAW: return num_to_mp_(yyjson_get_raw(v), yyjson_get_len(v), out, err);
	case YYJSON_TYPE_STR: return sw_mp_put_str(out, yyjson_get_str(v), yyjson_get_len(v));
	case YYJSON_TYPE_ARR: {
		yyjson_val *e;
		if (yyjson_arr_size(v) > UINT32_MAX || sw_mp_put_array(out, (uint32_t)yyjson_arr_size(v)))
			return SW_ENOMEM;
		yyjson_arr_foreach(v, i, max, e) {
			if ((rc = val_to_mp_(jp, e, out, depth + 1, err)))
				return rc;
		}
		return 0;
	}
	case YYJSON_TYPE_OBJ: {
		yyjson_val *k, *x;
		if (yyjson_obj_size(v) == 1) {
			k = unsafe_yyjson_get_first(v);
			if (reserved_key_(yyjson_get_str(k), yyjson_get_len(k)))
				return special_to_mp_(jp, yyjson_get_str(k), k + 1, out, depth, err);
		}
		if (yyjson_obj_size(v) > UINT32_MAX || sw_mp_put_map(out, (uint32_t)yyjson_obj_size(v)))
			return SW_ENOMEM;
		yyjson_obj_foreach(v, i, max, k, x) {
			if (sw_mp_put_str(out, yyjson_get_str(k), yyjson_get_len(k)) ||
			    (rc = val_to_mp_(jp, x, out, depth + 1, err)))
				return rc ? rc : SW_ENOMEM;
		}
		return 0;
	}
	default:
		return sw_fail(err, SW_EFORMAT, "unsupported JSON value");
	}
}

int sw_json_to_mp(sw_json_parser *jp, const char *text, size_t n, size_t *used,
                  sw_buf *out, sw_error *err)
{
	yyjson_read_err yerr;
	yyjson_doc *doc = yyjson_read_opts((char *)text, n,
	                                   YYJSON_READ_STOP_WHEN_DONE | YYJSON_READ_NUMBER_AS_RAW,
	                                   jp->alc, &yerr);
	if (!doc) {
		err->offset = yerr.pos;
		if (yerr.code == YYJSON_READ_ERROR_UNEXPECTED_END)
			return sw_fail(err, SW_ETRUNC, "unexpected end of JSON");
		return sw_fail(err, SW_EFORMAT, "invalid JSON: %s", yerr.msg);
	}
	size_t mark = out->len;
	yyjson_val *root = yyjson_doc_get_root(doc);
	int rc;
	*used = yyjson_doc_get_read_size(doc);
	if (yyjson_is_arr(root)) /* a .json file of an array: what a record is, and how to have them */
		rc = sw_fail(err, SW_EFORMAT, "record is a JSON array, not an object (records are JSON Lines, an "
		             "object a line: jq -c '.[]' makes them of an array)");
	else if (!yyjson_is_obj(root))
		rc = sw_fail(err, SW_EFORMAT, "record is a JSON %s, not an object",
		             yyjson_is_raw(root) || yyjson_is_num(root) ? "number" : yyjson_get_type_desc(root));
	else if (!(rc = val_to_mp_(jp, root, out, 0, err))) {
		/* an object may be a {"$str": ...} form of a scalar: a record must still be a map */
		uint8_t c = out->p[mark];
		if (!((c & 0xf0) == 0x80 || c == 0xde || c == 0xdf))
			rc = sw_fail(err, SW_EFORMAT, "record is a {\"%s\": ...} form, not a map",
			             yyjson_get_str(unsafe_yyjson_get_first(root)));
	}
	yyjson_doc_free(doc);
	if (rc) {
		out->len = mark;
		err->offset = 0;
	}
	return rc;
}

/* ---- names twice in an object ---- */

int sw_json_twin(struct yyjson_val *root, const char **name, size_t *len)
{
	/* the containers still to look into, and an object's names (sw_key, as msgpack's) */
	sw_buf st = { 0 }, ks = { 0 };
	int rc = 0;
	if (yyjson_is_ctn(root) && sw_buf_put(&st, &root, sizeof root))
		return SW_ENOMEM;
	while (st.len && !rc) {
		yyjson_val *v = ((yyjson_val **)st.p)[st.len / sizeof v - 1], *k, *e;
		size_t i, max;
		st.len -= sizeof v;
		ks.len = 0;
		if (yyjson_is_arr(v)) {
			yyjson_arr_foreach(v, i, max, e) if (yyjson_is_ctn(e) && sw_buf_put(&st, &e, sizeof e)) rc = SW_ENOMEM;
			continue;
		}
		yyjson_obj_foreach(v, i, max, k, e) {
			sw_key key = { (const uint8_t *)yyjson_get_str(k), yyjson_get_len(k), 0, i, 's' };
			if (sw_buf_put(&ks, &key, sizeof key) || (yyjson_is_ctn(e) && sw_buf_put(&st, &e, sizeof e)))
				rc = SW_ENOMEM;
		}
		const sw_key *t = rc ? NULL : sw_key_twin((sw_key *)ks.p, ks.len / sizeof(sw_key));
		if (t) {
			*name = (const char *)t->b;
			*len = (size_t)t->n;
			rc = 1;
		}
	}
	sw_buf_release(&st);
	sw_buf_release(&ks);
	return rc;
}

int sw_json_refuse_twins(struct yyjson_val *root, const char *what, sw_error *err)
{
	const char *name;
	size_t n;
	int rc = sw_json_twin(root, &name, &n);
	if (rc <= 0)
		return rc ? sw_fail(err, rc, "%s: out of memory", what) : SW_OK;
	char shown[80];
	sw_show_text(shown, sizeof shown, name, n, 1);
	return sw_fail(err, SW_EFORMAT, "%s: the name \"%s\" appears twice in an object: readers keep "
	               "different ones (Python's json the last), so the file is refused", what, shown);
}
