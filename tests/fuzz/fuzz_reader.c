/*
 * fuzz_reader.c - libFuzzer target for the stream reader and the record API.
 *
 * The input is a whole stream (msgpack, JSON Lines, either zstd-compressed).
 * Every record the reader hands out is exercised through the record API,
 * edited, reloaded, and converted to JSON and back.  What must hold:
 *
 *  - a record the reader returned is one well-formed map: every field
 *    decodes, every array and map in it iterates to exactly its count, and
 *    every string key is found again by name, at its own place (the reader
 *    refuses a map that holds a key twice);
 *  - the array getters agree with themselves: SW_ERANGE with the length,
 *    then success (or a type/range error) with a buffer of that length;
 *  - after sw_rec_set_f32("cost"), sw_rec_bytes() is a valid map that
 *    sw_rec_load() accepts, with the expected field count and cost;
 *  - JSON round trip (every record the reader accepted converts: it refuses
 *    values nested deeper than JSON's limit): JSON1 = json(orig), mp2 = parse(JSON1),
 *    JSON2 = json(mp2), mp3 = parse(JSON2); JSON1 == JSON2 and mp2 == mp3
 *    byte for byte (orig itself may be in a larger encoding than needed,
 *    so it is not compared with mp2).
 *
 * A property that fails calls abort().  Per-record work beyond the reader
 * is skipped for records over HEAVY_MAX bytes and after WORK_MAX bytes of
 * records per input, so that a zstd bomb costs what the reader itself
 * costs and no more.
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_reader -max_len=65536 build-fuzz/corpus-fuzz_reader tests/fuzz/seeds
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"

#define HEAVY_MAX ((size_t)1 << 20)  /* records larger than this: reader only */
#define WORK_MAX ((size_t)16 << 20)  /* record bytes per input given full work */
#define MAX_RECORDS 100000           /* records read per input */
#define WALK_DEPTH 64                /* nesting walked with sw_iter */
#define LOOKUP_MAX 64                /* fields looked up again by name */

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "fuzz_reader: %s:%d: check failed: %s: ", \
			        __FILE__, __LINE__, #cond);                     \
			fprintf(stderr, __VA_ARGS__);                           \
			fputc('\n', stderr);                                    \
			abort();                                                \
		}                                                               \
	} while (0)

static void dump_(const char *what, const uint8_t *p, size_t n)
{
	fprintf(stderr, "%s (%zu bytes):", what, n);
	for (size_t i = 0; i < n && i < 256; i++)
		fprintf(stderr, " %02x", p[i]);
	fprintf(stderr, n > 256 ? " ...\n" : "\n");
}

static void dump_text_(const char *what, const sw_buf *b)
{
	fprintf(stderr, "%s (%zu bytes): %.*s", what, b->len, b->len > 1024 ? 1024 : (int)b->len,
	        (const char *)b->p);
	if (b->len > 1024)
		fprintf(stderr, "...\n");
}

/* Walk a container with sw_iter: exactly count values (2*count for a map). */
static void walk_(const sw_val *c, int depth, size_t *budget)
{
	sw_iter it;
	sw_val e;
	uint64_t want = c->type == SW_T_MAP ? 2u * (uint64_t)c->v.count : c->v.count, got = 0;
	int rc;
	sw_iter_init(&it, c);
	while ((rc = sw_iter_next(&it, &e)) == 1) {
		got++;
		CHECK(e.raw >= c->raw && e.raw + e.rawlen <= c->raw + c->rawlen,
		      "element outside its container");
		double d;
		int nrc = sw_val_number(&e, &d);
		CHECK((nrc == 0) == (e.type == SW_T_INT || e.type == SW_T_UINT ||
		                     e.type == SW_T_F32 || e.type == SW_T_F64),
		      "sw_val_number %d for %s", nrc, sw_type_name(e.type));
		if (*budget)
			--*budget;
		if ((e.type == SW_T_ARRAY || e.type == SW_T_MAP) && depth < WALK_DEPTH && *budget)
			walk_(&e, depth + 1, budget);
	}
	CHECK(rc == 0, "sw_iter_next failed (%d) inside a record the reader accepted", rc);
	CHECK(got == want, "iterated %llu of %llu values", (unsigned long long)got,
	      (unsigned long long)want);
	CHECK(it.p == c->raw + c->rawlen, "iteration ended %td bytes before the container's end",
	      (c->raw + c->rawlen) - it.p);
	CHECK(sw_iter_next(&it, &e) == 0, "sw_iter_next after the end");
}

/* An array getter: a small buffer first, then one of the size it asks for. */
static void get_arrays_(sw_rec *rec)
{
	const char *s;
	size_t n, len;
	int rc = sw_rec_get_str(rec, "id", &s, &len);
	if (rc == 0 && len)
		CHECK(s != NULL, "id: NULL view");
	else
		CHECK(rc == 0 || rc == SW_ENOENT || rc == SW_ETYPE, "get_str id: %d", rc);

	float fsmall[4];
	rc = sw_rec_get_f32s(rec, "logprobs", fsmall, 4, &n);
	CHECK(rc == 0 || rc == SW_ENOENT || rc == SW_ETYPE || rc == SW_ERANGE, "get_f32s: %d", rc);
	if (rc == 0)
		CHECK(n <= 4, "get_f32s: %zu elements in a buffer of 4", n);
	if (rc == SW_ERANGE) {
		CHECK(n > 4, "get_f32s: SW_ERANGE with n = %zu", n);
		float *f = malloc(n * sizeof *f);
		CHECK(f != NULL, "out of memory for %zu floats", n);
		size_t n2 = 0;
		rc = sw_rec_get_f32s(rec, "logprobs", f, n, &n2);
		CHECK(rc == 0 || rc == SW_ETYPE, "get_f32s again: %d", rc);
		CHECK(n2 == n, "get_f32s: %zu, then %zu elements", n, n2);
		volatile float sink = 0;
		if (rc == 0)
			for (size_t i = 0; i < n; i++)
				sink += f[i];
		(void)sink;
		free(f);
	}

	uint32_t usmall[4];
	rc = sw_rec_get_u32s(rec, "response_tokens", usmall, 4, &n);
	CHECK(rc == 0 || rc == SW_ENOENT || rc == SW_ETYPE || rc == SW_ERANGE, "get_u32s: %d", rc);
	if (rc == SW_ERANGE && n > 4) {
		uint32_t *u = malloc(n * sizeof *u);
		CHECK(u != NULL, "out of memory for %zu u32s", n);
		size_t n2 = 0;
		rc = sw_rec_get_u32s(rec, "response_tokens", u, n, &n2);
		CHECK(rc == 0 || rc == SW_ETYPE || rc == SW_ERANGE, "get_u32s again: %d", rc);
		CHECK(n2 == n, "get_u32s: %zu, then %zu elements", n, n2);
		volatile uint32_t sink = 0;
		if (rc == 0)
			for (size_t i = 0; i < n; i++)
				sink += u[i];
		(void)sink;
		free(u);
	}
}

/* Fields: each decodes, containers iterate, string keys are found by name. */
static void fields_(sw_rec *rec, size_t count)
{
	size_t budget = (size_t)1 << 20;
	for (size_t i = 0; i < count; i++) {
		const char *key;
		size_t klen;
		sw_val v;
		int rc = sw_rec_field(rec, i, &key, &klen, &v);
		CHECK(rc == 0, "sw_rec_field %zu of %zu: %d", i, count, rc);
		if (v.type == SW_T_ARRAY || v.type == SW_T_MAP)
			walk_(&v, 0, &budget);
		if (key && i < LOOKUP_MAX && klen < 256 && !memchr(key, 0, klen)) {
			char k[256];
			memcpy(k, key, klen);
			k[klen] = 0;
			sw_val w;
			rc = sw_rec_get(rec, k, &w);
			CHECK(rc == 0, "field %zu \"%s\" not found by name: %d", i, k, rc);
			/* the reader refuses a map with a key twice: the field itself */
			CHECK(w.raw == v.raw, "field \"%s\" found at another position", k);
		}
	}
	const char *key;
	size_t klen;
	sw_val v;
	CHECK(sw_rec_field(rec, count, &key, &klen, &v) == SW_ERANGE, "field past the end");
}

/* set_f32 "cost", then check that the new bytes load as a map again. */
static void edit_(sw_rec *rec, size_t count, float cost)
{
	sw_val old;
	int had = sw_rec_get(rec, "cost", &old);
	CHECK(had == 0 || had == SW_ENOENT, "get cost: %d", had);
	int rc = sw_rec_set_f32(rec, "cost", cost);
	CHECK(rc == 0, "set_f32 cost: %d", rc);
	size_t want = count + (had == SW_ENOENT);
	CHECK(sw_rec_count(rec) == want, "count after set: %zu, want %zu", sw_rec_count(rec), want);

	const uint8_t *p;
	size_t n;
	rc = sw_rec_bytes(rec, &p, &n);
	CHECK(rc == 0, "sw_rec_bytes after set: %d", rc);
	uint8_t *copy = malloc(n ? n : 1);
	CHECK(copy != NULL, "out of memory");
	memcpy(copy, p, n);

	sw_rec *r2 = sw_rec_new();
	CHECK(r2 != NULL, "out of memory");
	rc = sw_rec_load(r2, copy, n);
	if (rc)
		dump_("edited record", copy, n);
	CHECK(rc == 0, "edited record does not load: %d", rc);
	CHECK(sw_rec_own(r2) == 0, "sw_rec_own");
	memset(copy, 0xc1, n); /* r2 must no longer look at it */
	free(copy);
	CHECK(sw_rec_count(r2) == want, "count after reload: %zu, want %zu", sw_rec_count(r2), want);
	sw_val c;
	rc = sw_rec_get(r2, "cost", &c);
	CHECK(rc == 0 && c.type == SW_T_F32, "cost after reload: %d, %s", rc, sw_type_name(c.type));
	CHECK(memcmp(&c.v.f32, &cost, 4) == 0, "cost changed on reload");
	sw_rec_free(r2);
}

/* JSON text of msgpack bytes; the return code of sw_mp_to_json. */
static int to_json_(const uint8_t *p, size_t n, sw_buf *out)
{
	sw_error err = { 0 };
	out->len = 0;
	return sw_mp_to_json(p, n, out, &err);
}

static void from_json_(sw_json_parser *jp, const sw_buf *json, sw_buf *mp, const uint8_t *orig,
                       size_t orign)
{
	sw_error err = { 0 };
	size_t used = 0;
	mp->len = 0;
	int rc = sw_json_to_mp(jp, (const char *)json->p, json->len, &used, mp, &err);
	if (rc) {
		dump_("record", orig, orign);
		dump_text_("json", json);
		fprintf(stderr, "error %d at %llu: %s\n", rc, (unsigned long long)err.offset, err.msg);
	}
	CHECK(rc == 0, "JSON written by sw_mp_to_json does not read back: %d", rc);
	CHECK(used <= json->len, "used %zu of %zu bytes", used, json->len);
	for (size_t i = used; i < json->len; i++)
		CHECK(json->p[i] == '\n', "JSON reading stopped %zu bytes early", json->len - i);
}

static void round_trip_(sw_json_parser *jp, const uint8_t *orig, size_t n)
{
	sw_buf j1 = { 0 }, j2 = { 0 }, m2 = { 0 }, m3 = { 0 };
	/* the reader refuses what nests beyond JSON's limit: every record converts */
	int rc = to_json_(orig, n, &j1);
	CHECK(rc == 0, "sw_mp_to_json of a record the reader accepted: %d", rc);
	CHECK(j1.len > 0 && j1.p[j1.len - 1] == '\n', "JSON line without its newline");
	CHECK(memchr(j1.p, '\n', j1.len) == j1.p + j1.len - 1, "newline inside the JSON line");
	from_json_(jp, &j1, &m2, orig, n);
	{
		sw_rec *r = sw_rec_new();
		CHECK(r && sw_rec_load(r, m2.p, m2.len) == 0, "msgpack from JSON is not one map");
		sw_rec_free(r);
	}
	rc = to_json_(m2.p, m2.len, &j2);
	CHECK(rc == 0, "sw_mp_to_json of msgpack read from JSON: %d", rc);
	if (j1.len != j2.len || memcmp(j1.p, j2.p, j1.len)) {
		dump_("record", orig, n);
		dump_text_("json1", &j1);
		dump_text_("json2", &j2);
		CHECK(0, "JSON -> msgpack -> JSON changed the text");
	}
	from_json_(jp, &j2, &m3, m2.p, m2.len);
	if (m2.len != m3.len || memcmp(m2.p, m3.p, m2.len)) {
		dump_("mp2", m2.p, m2.len);
		dump_("mp3", m3.p, m3.len);
		CHECK(0, "msgpack -> JSON -> msgpack changed the bytes");
	}
	sw_buf_release(&j1);
	sw_buf_release(&j2);
	sw_buf_release(&m2);
	sw_buf_release(&m3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sw_error err = { 0 };
	sw_reader *rd = sw_reader_memopen(data, size, "fuzz", &err);
	CHECK(rd != NULL, "memopen: %s", err.msg);
	sw_rec *rec = sw_rec_new();
	sw_json_parser *jp = sw_json_parser_new();
	CHECK(rec && jp, "out of memory");

	size_t work = 0;
	uint64_t nrec = 0;
	int rc;
	while (nrec < MAX_RECORDS && (rc = sw_reader_next(rd, rec)) == 1) {
		nrec++;
		CHECK(sw_reader_records(rd) == nrec, "records %llu, want %llu",
		      (unsigned long long)sw_reader_records(rd), (unsigned long long)nrec);
		const uint8_t *p;
		size_t n;
		CHECK(sw_rec_bytes(rec, &p, &n) == 0 && n > 0, "sw_rec_bytes of a fresh record");
		size_t count = sw_rec_count(rec);
		if (n > HEAVY_MAX || work > WORK_MAX)
			continue;
		work += n;
		{
			sw_val m;
			CHECK(sw_val_decode(p, n, &m) == 0 && m.type == SW_T_MAP && m.rawlen == n,
			      "the reader handed out something that is not one map");
			CHECK(m.v.count == count, "count %zu, header says %u", count, m.v.count);
		}
		fields_(rec, count);
		get_arrays_(rec);
		round_trip_(jp, p, n); /* p: the reader's bytes, which edits leave alone */
		uint32_t bits = (uint32_t)(n * 2654435761u) ^ (uint32_t)nrec;
		float cost;
		memcpy(&cost, &bits, 4);
		if (nrec % 2)
			cost = (float)n / 8.0f;
		edit_(rec, count, cost);
	}
	if (nrec < MAX_RECORDS) {
		const sw_error *e = sw_reader_error(rd);
		CHECK(rc <= 0, "reader: %d", rc);
		CHECK(rc == 0 || e->code == rc, "reader returned %d, error says %d", rc, e->code);
		if (rc < 0) {
			char buf[512];
			sw_error_str(e, buf, sizeof buf);
			CHECK(sw_reader_next(rd, rec) == rc, "error not sticky");
		}
	}
	sw_json_parser_free(jp);
	sw_rec_free(rec);
	sw_reader_free(rd);
	return 0;
}
