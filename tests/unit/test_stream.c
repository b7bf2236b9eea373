/* test_stream.c - the reader's detection and errors, the writer, the JSON mapping. */
#include <math.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>
#include "common/internal.h"
#include "tap.h"

/* All records of a memory stream: count, and the error code at the end. */
static int read_all_(const void *p, size_t n, uint64_t *count, sw_error *err)
{
	sw_error e0;
	sw_reader *r = sw_reader_memopen(p, n, "mem", &e0);
	sw_rec *rec = sw_rec_new();
	int rc;
	while ((rc = sw_reader_next(r, rec)) == 1)
		;
	*count = sw_reader_records(r);
	if (err)
		*err = *sw_reader_error(r);
	sw_rec_free(rec);
	sw_reader_free(r);
	return rc;
}

static void test_errors(void)
{
	uint64_t n;
	sw_error e;
	const char two[] = "\x81\xa1x\x01\x81\xa1y\x02";
	is_int(read_all_(two, 8, &n, &e), 0, "two msgpack records read to the end");
	is_int(n, 2, "two records");
	is_int(read_all_(two, 7, &n, &e), SW_ETRUNC, "truncated msgpack: SW_ETRUNC");
	ok(n == 1 && e.record == 2 && e.offset == 4, "after the good record, at record 2, byte 4");
	is_int(read_all_("\x81\xa1x\x01\xc1", 5, &n, &e), SW_EFORMAT, "0xc1 after a record: SW_EFORMAT");
	ok(n == 1 && e.record == 2 && strstr(e.msg, "0xc1"), "names the byte: %s", e.msg);
	is_int(read_all_("\x81\xa1x\x01\x05", 5, &n, &e), SW_EFORMAT, "a record that is not a map");
	ok(strstr(e.msg, "not a map") != NULL, "says so: %s", e.msg);
	is_int(read_all_("", 0, &n, &e), SW_EEMPTY, "empty input: SW_EEMPTY");

	const char *js = "{\"a\":1}\n{\"a\":2}\n{\"a\": [1,2,}\n{\"a\":4}\n";
	is_int(read_all_(js, strlen(js), &n, &e), SW_EFORMAT, "invalid JSON: SW_EFORMAT");
	ok(n == 2 && e.line == 3 && e.record == 3, "at line 3, record 3 (line %llu)", (unsigned long long)e.line);
	ok(e.column == 12, "column 12 (%llu): %s", (unsigned long long)e.column, e.msg);
	const char bad8[] = "{\"a\":\"\xff\xfe\"}\n";
	is_int(read_all_(bad8, strlen(bad8), &n, &e), SW_EFORMAT, "invalid UTF-8 in JSON: SW_EFORMAT");
	ok(e.line == 1 && strstr(e.msg, "UTF-8"), "says UTF-8: %s", e.msg);
	const char *multi = "{\"a\":\n [1,\n 2]}\n  {\"b\":2} {\"c\":3}\n\n";
	is_int(read_all_(multi, strlen(multi), &n, &e), 0, "values over several lines and several a line");
	is_int(n, 3, "three records");
	is_int(read_all_("{\"a\":1", 6, &n, &e), SW_ETRUNC, "JSON cut short");
	is_int(read_all_("[1]\n", 4, &n, &e), SW_EFORMAT, "a JSON array is not a record");

	/* size limit */
	sw_reader *r = sw_reader_memopen("\x81\xa1x\xda\x01\x00", 6, "mem", &e);
	sw_rec *rec = sw_rec_new();
	sw_reader_set_max_record(r, 100);
	is_int(sw_reader_next(r, rec), SW_ETOOBIG, "a 256-byte string over a 100-byte limit, from its header");
	sw_reader_free(r);
	sw_rec_free(rec);
}

static size_t zstd_(const void *p, size_t n, uint8_t *out, size_t cap)
{
	return ZSTD_compress(out, cap, p, n, 3);
}

static void test_zstd(void)
{
	uint8_t z[256], zz[512];
	uint64_t n;
	sw_error e;
	const char rec[] = "\x82\xa2id\xa1" "a\xa1x\xca\x3f\x80\x00\x00";
	size_t zn = zstd_(rec, sizeof rec - 1, z, sizeof z);
	is_int(read_all_(z, zn, &n, &e), 0, "zstd msgpack");
	is_int(n, 1, "one record");
	memcpy(zz, z, zn);
	memcpy(zz + zn, z, zn);
	/* a skippable frame between */
	const uint8_t skip[] = { 0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c' };
	memcpy(zz + 2 * zn, skip, sizeof skip);
	memcpy(zz + 2 * zn + sizeof skip, z, zn);
	is_int(read_all_(zz, 3 * zn + sizeof skip, &n, &e), 0, "three frames and a skippable one");
	is_int(n, 3, "three records");
	is_int(read_all_(z, zn - 3, &n, &e), SW_ETRUNC, "a frame cut short: SW_ETRUNC");
	ok(strstr(e.msg, "zstd") != NULL, "says zstd: %s", e.msg);
	const char *js = "{\"a\":1}\n";
	zn = zstd_(js, strlen(js), z, sizeof z);
	is_int(read_all_(z, zn, &n, &e), 0, "zstd JSON");
	z[zn / 2] ^= 0x55;
	ok(read_all_(z, zn, &n, &e) < 0, "a corrupt frame is an error: %s", e.msg);
}

/* msgpack -> JSON -> msgpack */
static int roundtrip_(const uint8_t *mp, size_t n, char *json, size_t jcap)
{
	sw_buf j = { 0 }, back = { 0 };
	sw_error e = { 0 };
	size_t used;
	int rc = sw_mp_to_json(mp, n, &j, &e);
	if (!rc) {
		sw_json_parser *jp = sw_json_parser_new();
		rc = sw_json_to_mp(jp, (const char *)j.p, j.len, &used, &back, &e);
		sw_json_parser_free(jp);
		if (!rc && (back.len != n || memcmp(back.p, mp, n)))
			rc = -100;
	}
	if (json) {
		size_t k = j.len < jcap - 1 ? j.len : jcap - 1;
		memcpy(json, j.p, k);
		json[k] = 0;
		if (k && json[k - 1] == '\n')
			json[k - 1] = 0;
	}
	sw_buf_release(&j);
	sw_buf_release(&back);
	return rc;
}

static void put_key_(sw_buf *b, const char *k)
{
	sw_mp_put_str(b, k, strlen(k));
}

static void test_json_mapping(void)
{
	char js[1024];
	sw_buf b = { 0 };
	/* {"f32": 0.1f, "f64": 0.1, "one": 1.0 f64, "i": -5, "u": 2^64-1} */
	sw_mp_put_map(&b, 7);
	put_key_(&b, "f32"); sw_mp_put_f32(&b, 0.1f);
	put_key_(&b, "f64"); sw_mp_put_f64(&b, 0.1);
	put_key_(&b, "one"); sw_mp_put_f64(&b, 1.0);
	put_key_(&b, "tiny"); sw_mp_put_f32(&b, 1e-10f);
	put_key_(&b, "i"); sw_mp_put_i64(&b, -5);
	put_key_(&b, "u"); sw_mp_put_u64(&b, UINT64_MAX);
	put_key_(&b, "third"); sw_mp_put_f64(&b, 1.0 / 3);
	is_int(roundtrip_(b.p, b.len, js, sizeof js), 0, "numbers round-trip byte-exactly");
	ok(!strcmp(js, "{\"f32\":0.1,\"f64\":0.10,\"one\":1.00,\"tiny\":1e-10,\"i\":-5,"
	               "\"u\":18446744073709551615,\"third\":0.3333333333333333}"),
	   "float32 shortest, float64 marked by a trailing zero: %s", js);

	b.len = 0;
	sw_mp_put_map(&b, 6);
	put_key_(&b, "bin"); sw_mp_put_bin(&b, "\0\xff", 2);
	put_key_(&b, "raw"); sw_mp_put_str(&b, "a\xff", 2);
	put_key_(&b, "ext"); sw_mp_put_ext(&b, -1, "\1\2\3\4", 4);
	put_key_(&b, "nan"); sw_mp_put_f32(&b, NAN);
	put_key_(&b, "inf"); sw_mp_put_f64(&b, -INFINITY);
	put_key_(&b, "esc"); sw_mp_put_str(&b, "\"\\\n\x01", 4);
	is_int(roundtrip_(b.p, b.len, js, sizeof js), 0, "bin, non-UTF-8, ext, non-finite round-trip");
	ok(!strcmp(js, "{\"bin\":{\"$bin\":\"AP8=\"},\"raw\":{\"$str\":\"Yf8=\"},\"ext\":{\"$ext\":[-1,\"AQIDBA==\"]},"
	               "\"nan\":{\"$f32\":\"nan\"},\"inf\":{\"$f64\":\"-inf\"},\"esc\":\"\\\"\\\\\\n\\u0001\"}"),
	   "as $ forms: %s", js);

	b.len = 0;
	sw_mp_put_map(&b, 2);
	put_key_(&b, "m"); sw_mp_put_map(&b, 1); sw_mp_put_u64(&b, 7); sw_mp_put_nil(&b);
	put_key_(&b, "fake"); sw_mp_put_map(&b, 1); put_key_(&b, "$bin"); put_key_(&b, "x");
	is_int(roundtrip_(b.p, b.len, js, sizeof js), 0, "non-string keys and a map that looks like a $ form");
	ok(!strcmp(js, "{\"m\":{\"$map\":[[7,null]]},\"fake\":{\"$map\":[[\"$bin\",\"x\"]]}}"), "as $map: %s", js);

	/* JSON text -> widths */
	sw_json_parser *jp = sw_json_parser_new();
	sw_error e = { 0 };
	size_t used;
	const char *in = "{\"a\":0.1,\"b\":0.30000000000000004,\"c\":1e400}";
	b.len = 0;
	is_int(sw_json_to_mp(jp, in, strlen(in), &used, &b, &e), SW_ERANGE, "1e400 is out of range");
	in = "{\"a\":0.1,\"b\":0.30000000000000004,\"c\":100000000000000000000}";
	is_int(sw_json_to_mp(jp, in, strlen(in), &used, &b, &e), SW_ERANGE, "so is an integer over 2^64");
	in = "{\"a\":0.1,\"b\":0.30000000000000004}";
	b.len = 0;
	is_int(sw_json_to_mp(jp, in, strlen(in), &used, &b, &e), 0, "JSON numbers");
	sw_rec *r = sw_rec_new();
	sw_rec_load(r, b.p, b.len);
	sw_val v;
	ok(sw_rec_get(r, "a", &v) == 0 && v.type == SW_T_F32, "0.1 reads as float32");
	ok(sw_rec_get(r, "b", &v) == 0 && v.type == SW_T_F64, "0.30000000000000004 keeps its digits as float64");
	in = "{\"x\":{\"$bin\":\"not base64!\"}}";
	is_int(sw_json_to_mp(jp, in, strlen(in), &used, &b, &e), SW_EFORMAT, "a bad $bin is an error");
	sw_rec_free(r);
	sw_json_parser_free(jp);
	sw_buf_release(&b);
}

static void test_writer(void)
{
	char path[] = "/tmp/sw-test-XXXXXX";
	int fd = mkstemp(path);
	sw_error e;
	sw_writer_opts o = { SW_FMT_MSGPACK, 3 };
	sw_writer *w = sw_writer_fdopen(fd, "tmp", &o, &e);
	sw_rec *rec = sw_rec_new();
	for (int i = 0; i < 1000; i++) {
		sw_rec_clear(rec);
		sw_rec_set_i64(rec, "i", i);
		sw_rec_set_str(rec, "s", "some text that compresses", 25);
		sw_writer_put(w, rec);
		if (i == 500)
			sw_writer_flush(w);
	}
	is_int(sw_writer_close(w), 0, "writer closes");
	is_int(sw_writer_records(w), 1000, "1000 records written");
	sw_writer_free(w);
	close(fd);
	sw_reader *r = sw_reader_open(path, &e);
	int rc, last = -1;
	int64_t x;
	while ((rc = sw_reader_next(r, rec)) == 1)
		if (sw_rec_get_i64(rec, "i", &x) == 0 && x == last + 1)
			last = (int)x;
	ok(rc == 0 && last == 999 && sw_reader_compressed(r), "a flushed zstd stream reads back whole and in order");
	sw_reader_free(r);

	fd = open(path, O_WRONLY | O_TRUNC);
	o = (sw_writer_opts){ SW_FMT_JSON, 0 };
	w = sw_writer_fdopen(fd, "tmp", &o, &e);
	sw_rec_clear(rec);
	sw_rec_set_f32(rec, "r", 0.5f);
	sw_writer_put(w, rec);
	sw_writer_close(w);
	sw_writer_free(w);
	close(fd);
	FILE *f = fopen(path, "r");
	char line[64] = "";
	ok(fgets(line, sizeof line, f) && !strcmp(line, "{\"r\":0.5}\n"), "JSON Lines out: %s", line);
	fclose(f);
	unlink(path);
	o = (sw_writer_opts){ SW_FMT_MSGPACK, 42 };
	ok(sw_writer_fdopen(1, "x", &o, &e) == NULL && e.code == SW_EINVAL, "zstd level 42 is refused");
	sw_rec_free(rec);
}

int main(void)
{
	test_errors();
	test_zstd();
	test_json_mapping();
	test_writer();
	return tap_done();
}
