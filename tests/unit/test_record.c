/* test_record.c - the msgpack scanner (against msgpack-c) and the record API. */
#include <math.h>
#include <stdlib.h>
#include <msgpack.h>
#include "common/internal.h"
#include "tap.h"

static uint64_t rng_ = 88172645463325252ull;
static uint64_t rnd_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return rng_;
}

/* A random value packed by msgpack-c, nesting at most depth levels. */
static void pack_random_(msgpack_packer *pk, int depth)
{
	switch (rnd_() % (depth > 0 ? 12 : 9)) {
	case 0: msgpack_pack_nil(pk); break;
	case 1: msgpack_pack_true(pk); break;
	case 2: msgpack_pack_uint64(pk, rnd_() >> (rnd_() % 64)); break;
	case 3: msgpack_pack_int64(pk, -(int64_t)(rnd_() >> (1 + rnd_() % 63))); break;
	case 4: msgpack_pack_float(pk, (float)(rnd_() % 10000) / 7.0f); break;
	case 5: msgpack_pack_double(pk, (double)(rnd_() % 10000) / 3.0); break;
	case 6: {
		size_t n = rnd_() % 3 == 0 ? 40 + rnd_() % 300 : rnd_() % 20;
		char s[400];
		for (size_t i = 0; i < n; i++)
			s[i] = (char)('a' + rnd_() % 26);
		msgpack_pack_str(pk, n);
		msgpack_pack_str_body(pk, s, n);
		break;
	}
	case 7: {
		unsigned char b[5] = { 0, 1, 2, 0xff, 0x80 };
		msgpack_pack_bin(pk, 5);
		msgpack_pack_bin_body(pk, b, 5);
		break;
	}
	case 8: msgpack_pack_ext(pk, 4, 7); msgpack_pack_ext_body(pk, "abcd", 4); break;
	case 9: case 10: {
		size_t n = rnd_() % 20;
		msgpack_pack_array(pk, n);
		for (size_t i = 0; i < n; i++)
			pack_random_(pk, depth - 1);
		break;
	}
	default: {
		size_t n = rnd_() % 6;
		msgpack_pack_map(pk, n);
		for (size_t i = 0; i < n; i++) {
			char k[8];
			int kl = snprintf(k, sizeof k, "k%zu", i);
			msgpack_pack_str(pk, (size_t)kl);
			msgpack_pack_str_body(pk, k, (size_t)kl);
			pack_random_(pk, depth - 1);
		}
	}
	}
}

static void test_scanner_vs_msgpack_c(void)
{
	int bad_len = 0, bad_trunc = 0, bad_type = 0;
	for (int round = 0; round < 2000; round++) {
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		msgpack_packer pk;
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		pack_random_(&pk, 4);
		const uint8_t *p = (const uint8_t *)sb.data, *next;
		if (sw_mp_skip(p, p + sb.size, sb.size, &next) || next != p + sb.size)
			bad_len++;
		/* every proper prefix is incomplete, never an error or a value */
		for (size_t cut = 0; cut < sb.size; cut += 1 + cut / 8)
			if (sw_mp_skip(p, p + cut, sb.size, &next) != SW_ETRUNC)
				bad_trunc++;
		/* the decoded type agrees with msgpack-c's */
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		size_t off = 0;
		sw_val v;
		if (msgpack_unpack_next(&u, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS ||
		    off != sb.size || sw_val_decode(p, sb.size, &v))
			bad_type++;
		else {
			static const sw_type map[] = {
				[MSGPACK_OBJECT_NIL] = SW_T_NIL, [MSGPACK_OBJECT_BOOLEAN] = SW_T_BOOL,
				[MSGPACK_OBJECT_POSITIVE_INTEGER] = SW_T_UINT,
				[MSGPACK_OBJECT_NEGATIVE_INTEGER] = SW_T_INT,
				[MSGPACK_OBJECT_FLOAT32] = SW_T_F32, [MSGPACK_OBJECT_FLOAT64] = SW_T_F64,
				[MSGPACK_OBJECT_STR] = SW_T_STR, [MSGPACK_OBJECT_ARRAY] = SW_T_ARRAY,
				[MSGPACK_OBJECT_MAP] = SW_T_MAP, [MSGPACK_OBJECT_BIN] = SW_T_BIN,
				[MSGPACK_OBJECT_EXT] = SW_T_EXT,
			};
			if (map[u.data.type] != v.type)
				bad_type++;
			else if (v.type == SW_T_UINT && v.v.u != u.data.via.u64)
				bad_type++;
			else if (v.type == SW_T_INT && v.v.i != u.data.via.i64)
				bad_type++;
			else if ((v.type == SW_T_ARRAY && v.v.count != u.data.via.array.size) ||
			         (v.type == SW_T_MAP && v.v.count != u.data.via.map.size))
				bad_type++;
		}
		msgpack_unpacked_destroy(&u);
		msgpack_sbuffer_destroy(&sb);
	}
	is_int(bad_len, 0, "scanner finds the end of 2000 random values as msgpack-c packed them");
	is_int(bad_trunc, 0, "every proper prefix of them is reported as truncated");
	is_int(bad_type, 0, "decoded types and values agree with msgpack-c's unpacker");

	const uint8_t c1[] = { 0x92, 0x01, 0xc1 };
	const uint8_t *next;
	is_int(sw_mp_skip(c1, c1 + 3, 100, &next), SW_EFORMAT, "0xc1 is no msgpack");
	ok(next == c1 + 2, "and the scanner points at it");
	const uint8_t big[] = { 0xdb, 0x10, 0x00, 0x00, 0x00 }; /* str32 of 256 MiB */
	is_int(sw_mp_skip(big, big + 5, 1 << 20, &next), SW_ETOOBIG, "a string over the limit is refused from its header");
	const uint8_t arr[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
	is_int(sw_mp_skip(arr, arr + 5, 1 << 20, &next), SW_ETOOBIG, "so is an array claiming 4G elements");
}

static sw_rec *sample_(void)
{
	sw_rec *r = sw_rec_new();
	uint32_t toks[3] = { 5, 70000, 3 };
	float lp[3] = { -0.5f, -1.25f, -3.0f };
	sw_rec_set_str(r, "id", "p1/0", 4);
	sw_rec_set_u32s(r, "response_tokens", toks, 3);
	sw_rec_set_f32s(r, "logprobs", lp, 3);
	sw_rec_set_f32(r, "reward", 1.0f);
	sw_rec_set_i64(r, "neg", -7);
	sw_rec_set_bin(r, "blob", "\0\1\2", 3);
	sw_rec_set_raw(r, "mine", "\x92\xa1x\xc3", 4); /* ["x", true]: a user's own field */
	return r;
}

static void test_record_api(void)
{
	sw_rec *r = sample_();
	const uint8_t *p;
	size_t n;
	ok(sw_rec_bytes(r, &p, &n) == 0 && p[0] == 0x87, "seven fields encode as a fixmap of 7");

	/* reload the bytes as a borrowed view */
	uint8_t *copy = malloc(n);
	memcpy(copy, p, n);
	sw_rec *q = sw_rec_new();
	is_int(sw_rec_load(q, copy, n), 0, "the encoding loads back");
	is_int(sw_rec_count(q), 7, "with 7 fields");
	const char *s;
	size_t sn;
	ok(sw_rec_get_str(q, "id", &s, &sn) == 0 && sn == 4 && !memcmp(s, "p1/0", 4), "get_str");
	ok((const uint8_t *)s > copy && (const uint8_t *)s < copy + n, "get_str is a view, not a copy");
	uint32_t t[3];
	float f[3];
	size_t tn;
	is_int(sw_rec_get_u32s(q, "response_tokens", t, 2, &tn), SW_ERANGE, "u32s into a short buffer: SW_ERANGE");
	is_int(tn, 3, "and it says how many are needed");
	ok(sw_rec_get_u32s(q, "response_tokens", t, 3, &tn) == 0 && t[1] == 70000, "u32s");
	ok(sw_rec_get_f32s(q, "logprobs", f, 3, &tn) == 0 && f[1] == -1.25f, "f32s");
	is_int(sw_rec_get_u32s(q, "logprobs", t, 3, &tn), SW_ETYPE, "floats are not uints");
	double d;
	ok(sw_rec_get_f64(q, "reward", &d) == 0 && d == 1.0, "get_f64 of a float32");
	int64_t i64;
	uint64_t u64;
	ok(sw_rec_get_i64(q, "neg", &i64) == 0 && i64 == -7, "get_i64");
	is_int(sw_rec_get_u64(q, "neg", &u64), SW_ERANGE, "a negative is out of the uint range");
	is_int(sw_rec_get_str(q, "missing", &s, &sn), SW_ENOENT, "an absent field is SW_ENOENT");
	is_int(sw_rec_get_str(q, "reward", &s, &sn), SW_ETYPE, "a float is not a string");
	const void *bp;
	ok(sw_rec_get_bin(q, "blob", &bp, &sn) == 0 && sn == 3 && !memcmp(bp, "\0\1\2", 3), "get_bin");

	/* an unedited record is its bytes, untouched */
	const uint8_t *p2;
	size_t n2;
	ok(sw_rec_bytes(q, &p2, &n2) == 0 && p2 == copy && n2 == n, "unedited: the original bytes, no copy");

	/* editing keeps the other fields byte for byte and in place */
	sw_rec_set_f32(q, "reward", 0.25f);
	sw_rec_set_str(q, "new", "v", 1);
	sw_rec_bytes(q, &p2, &n2);
	sw_rec *e = sw_rec_new();
	uint8_t *c2 = malloc(n2);
	memcpy(c2, p2, n2);
	sw_rec_load(e, c2, n2);
	const char *k;
	size_t kl;
	sw_val v;
	sw_rec_field(e, 3, &k, &kl, &v);
	ok(kl == 6 && !memcmp(k, "reward", 6) && v.type == SW_T_F32 && v.v.f32 == 0.25f,
	   "a set field keeps its place (4th) with the new value");
	sw_rec_field(e, 7, &k, &kl, &v);
	ok(kl == 3 && !memcmp(k, "new", 3), "a new field goes at the end");
	sw_val a, b;
	sw_rec_get(e, "mine", &a);
	sw_rec_get(q, "mine", &b);
	ok(a.rawlen == 4 && !memcmp(a.raw, "\x92\xa1x\xc3", 4), "a user's own field survives byte for byte");

	is_int(sw_rec_del(e, "blob"), 0, "del");
	is_int(sw_rec_del(e, "blob"), SW_ENOENT, "del of an absent field");
	const char *keep[] = { "new", "id" };
	sw_rec_keep(e, keep, 2);
	is_int(sw_rec_count(e), 2, "keep leaves two fields");
	sw_rec_field(e, 0, &k, &kl, &v);
	ok(kl == 2 && !memcmp(k, "id", 2), "in the record's order");

	/* nested maps */
	sw_rec *sub = sw_rec_new(), *m = sw_rec_new();
	sw_rec_set_f32(sub, "math", 1.0f);
	sw_rec_set_map(m, "rewards", sub);
	sw_rec *view = sw_rec_new();
	ok(sw_rec_get_map(m, "rewards", view) == 0 && sw_rec_get_f64(view, "math", &d) == 0 && d == 1.0,
	   "set_map / get_map");
	/* a map set from a view into the same record's arena */
	is_int(sw_rec_set_map(m, "copy", view), 0, "set_map from a view of the record itself");
	sw_rec_get_map(m, "copy", view);
	ok(sw_rec_get_f64(view, "math", &d) == 0 && d == 1.0, "and the copy reads back");

	is_int(sw_rec_load(e, "\x93\x01\x02\x03", 4), SW_EFORMAT, "an array is not a record");
	is_int(sw_rec_load(e, "\x81\xa1x", 3), SW_EFORMAT, "a cut map is not a record");
	is_int(sw_rec_set_raw(e, "x", "\xc1", 1), SW_EFORMAT, "set_raw checks its bytes");

	/* own: outlive the buffer */
	sw_rec_load(q, copy, n);
	sw_rec_own(q);
	memset(copy, 0, n);
	ok(sw_rec_get_str(q, "id", &s, &sn) == 0 && sn == 4 && !memcmp(s, "p1/0", 4), "own copies the bytes");

	free(copy);
	free(c2);
	sw_rec_free(r);
	sw_rec_free(q);
	sw_rec_free(e);
	sw_rec_free(sub);
	sw_rec_free(m);
	sw_rec_free(view);
	sw_rec_free(NULL);
}

int main(void)
{
	test_scanner_vs_msgpack_c();
	test_record_api();
	return tap_done();
}
