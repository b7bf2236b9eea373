/* test_stream.c - the reader's detection and errors, the writer (and a file written whole), the JSON mapping. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include "common/internal.h"
#include "tap.h"
#include "tmpfiles.h"

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

/* A map of n keys "k0".."k{n-1}" (str 8 from the 50th on, so both encodings are
 * compared), "k{twin}" once more at the end when twin >= 0, each value nil. */
static size_t many_keys_(uint8_t *b, int n, int twin)
{
	size_t o = 0;
	int all = n + (twin >= 0);
	b[o++] = 0xde, b[o++] = (uint8_t)(all >> 8), b[o++] = (uint8_t)all;
	for (int i = 0; i < all; i++) {
		char k[16];
		int kl = snprintf(k, sizeof k, "k%d", i < n ? i : twin);
		if (i >= 50)
			b[o++] = 0xd9, b[o++] = (uint8_t)kl;
		else
			b[o++] = (uint8_t)(0xa0 | kl);
		memcpy(b + o, k, (size_t)kl), o += (size_t)kl;
		b[o++] = 0xc0;
	}
	return o;
}

static void test_dupkeys(void)
{
	uint64_t n;
	sw_error e;
	/* {"a":1,"a":2}: the second "a" at byte 4 */
	is_int(read_all_("\x82\xa1" "a\x01\xa1" "a\x02", 7, &n, &e), SW_EFORMAT, "a key twice: SW_EFORMAT");
	ok(n == 0 && e.record == 1 && e.offset == 0 && strstr(e.msg, "key \"a\" appears twice") &&
	   strstr(e.msg, "again at byte 4"),
	   "names the key and where it comes again: %s", e.msg);
	/* after a good record: record 2, the key's byte in the stream */
	is_int(read_all_("\x81\xa1x\x01\x82\xa1" "a\x01\xd9\x01" "a\x02", 12, &n, &e), SW_EFORMAT,
	       "a fixstr and a str 8 of the same bytes are one key");
	ok(n == 1 && e.record == 2 && e.offset == 4 && strstr(e.msg, "again at byte 8"), "record 2: %s", e.msg);
	/* integer keys by value: 1 as a fixint and a uint 64, -1 as a fixint and an int 8 */
	is_int(read_all_("\x82\x01\xc0\xcf\0\0\0\0\0\0\0\x01\xc0", 13, &n, &e), SW_EFORMAT, "1 and 1 as a uint 64");
	ok(strstr(e.msg, "key 1 appears twice") != NULL, "shows the integer: %s", e.msg);
	is_int(read_all_("\x82\xff\xc0\xd0\xff\xc0", 6, &n, &e), SW_EFORMAT, "-1 and -1 as an int 8");
	ok(strstr(e.msg, "key -1 appears twice") != NULL, "shows it: %s", e.msg);
	/* not twins: 1 and -1, "1" and 1, a bin "a" and a str "a", the same key in two maps */
	is_int(read_all_("\x84\x01\xc0\xff\xc0\xa1" "1\xc0\xc4\x01" "1\xc0", 12, &n, &e), 0,
	       "1, -1, the str \"1\", the bin \"1\": four keys");
	is_int(read_all_("\x82\xa1" "a\x81\xa1x\x01\xa1" "b\x81\xa1x\x02", 13, &n, &e), 0,
	       "\"x\" in two sibling maps");
	is_int(read_all_("\x81\xa1x\x81\xa1x\x81\xa1x\x01", 10, &n, &e), 0, "\"x\" in maps inside each other");
	/* at depth: {"m":[1,{"r":1,"r":2}]} */
	is_int(read_all_("\x81\xa1m\x92\x01\x82\xa1r\x01\xa1r\x02", 12, &n, &e), SW_EFORMAT,
	       "a map inside an array inside the record");
	ok(strstr(e.msg, "\"r\"") && strstr(e.msg, "again at byte 9"), "%s", e.msg);
	/* many keys: sorted, not compared pair by pair */
	uint8_t *big = malloc(1 << 16);
	size_t bn = many_keys_(big, 2000, -1);
	is_int(read_all_(big, bn, &n, &e), 0, "2000 different keys");
	bn = many_keys_(big, 2000, 1234);
	is_int(read_all_(big, bn, &n, &e), SW_EFORMAT, "2000 keys and one of them again");
	ok(strstr(e.msg, "key \"k1234\" appears twice") != NULL, "%s", e.msg);
	free(big);
	/* maps nested deeper than SW_MP_MAX_DEPTH, the record's counted, are refused (the walk
	 * keeps a frame a level), and so are arrays: JSON's writer and reader stop there and
	 * Python's msgpack at 1024 */
	big = malloc(1 << 16);
	for (int deep = SW_MP_MAX_DEPTH; deep <= SW_MP_MAX_DEPTH + 1; deep++) {
		bn = 0;
		for (int i = 0; i < deep - 1; i++) /* {"": {"": ... {}}}: deep maps, the record one of them */
			big[bn++] = 0x81, big[bn++] = 0xa0;
		big[bn++] = 0x80;
		is_int(read_all_(big, bn, &n, &e), deep > SW_MP_MAX_DEPTH ? SW_EFORMAT : 0, "maps %d deep", deep);
	}
	ok(strstr(e.msg, "values nest deeper than 256 levels") != NULL, "%s", e.msg);
	/* {"x":[[...[1]...]]}, {"x":[[...[]...]]}: arrays in arrays, the record's map one level */
	for (int deep = SW_MP_MAX_DEPTH - 1; deep <= SW_MP_MAX_DEPTH; deep++)
		for (int empty = 0; empty < 2; empty++) {
			bn = 0;
			big[bn++] = 0x81, big[bn++] = 0xa1, big[bn++] = 'x';
			for (int i = 0; i < deep - 1; i++)
				big[bn++] = 0x91;
			big[bn++] = empty ? 0x90 : 0x91;
			if (!empty)
				big[bn++] = 0x01;
			e.msg[0] = 0;
			is_int(read_all_(big, bn, &n, &e), deep >= SW_MP_MAX_DEPTH ? SW_EFORMAT : 0,
			       "%d arrays (the last %s) in the record", deep, empty ? "empty" : "holding 1");
			ok(deep < SW_MP_MAX_DEPTH || strstr(e.msg, "values nest deeper than 256 levels"), "%s", e.msg);
		}
	/* 100000 arrays deep: refused at once, not read whole by a walk of every level */
	uint8_t *huge = malloc(100010);
	bn = 0;
	huge[bn++] = 0x81, huge[bn++] = 0xa1, huge[bn++] = 'x';
	memset(huge + bn, 0x91, 100000), bn += 100000;
	huge[bn++] = 0x01;
	is_int(read_all_(huge, bn, &n, &e), SW_EFORMAT, "100000 arrays deep");
	free(huge);
	/* many arrays, shallow: 5000 pairs in one array, then a twin under 200 arrays */
	bn = 0;
	big[bn++] = 0x82, big[bn++] = 0xa1, big[bn++] = 'p', big[bn++] = 0xdd;
	big[bn++] = 0, big[bn++] = 0, big[bn++] = 0x13, big[bn++] = 0x88;
	for (int i = 0; i < 5000; i++)
		big[bn++] = 0x92, big[bn++] = 0x01, big[bn++] = 0x02;
	big[bn++] = 0xa1, big[bn++] = 'x';
	size_t at = bn;
	for (int i = 0; i < 200; i++)
		big[bn++] = 0x91;
	memcpy(big + bn, "\x82\xa1" "a\x01\xa1" "a\x02", 7), bn += 7;
	is_int(read_all_(big, bn, &n, &e), SW_EFORMAT, "5000 pairs, then a twin under 200 arrays");
	char want[64];
	snprintf(want, sizeof want, "again at byte %zu", at + 200 + 4);
	ok(strstr(e.msg, "key \"a\" appears twice") && strstr(e.msg, want), "%s", e.msg);
	big[bn - 7] = 0x80; /* the twin's map now {}, the record's last byte */
	bn -= 6;
	is_int(read_all_(big, bn, &n, &e), 0, "5000 pairs and {} under 200 arrays");
	free(big);
	/* JSON: an object with a name twice, written alike or not; the line of its record */
	const char *js = "{\"a\":1}\n{\"id\":\"x\",\"reward\":1,\"reward\":0}\n";
	is_int(read_all_(js, strlen(js), &n, &e), SW_EFORMAT, "JSON: a name twice");
	ok(n == 1 && e.record == 2 && e.line == 2 && strstr(e.msg, "key \"reward\" appears twice in an object"),
	   "line 2: %s", e.msg);
	js = "{\"r\":{\"a\":1,\"\\u0061\":2}}\n";
	is_int(read_all_(js, strlen(js), &n, &e), SW_EFORMAT, "JSON: \\u0061 is \"a\", in a nested object");
	const char *ctl = "{\"a\\n\\\"b\":1,\"a\\n\\\"b\":2}\n";
	is_int(read_all_(ctl, strlen(ctl), &n, &e), SW_EFORMAT, "JSON: a name with a newline and a quote");
	ok(strstr(e.msg, "key \"a\\x0a\\x22b\"") != NULL, "shown escaped: %s", e.msg);

	/* sw_mp_dupkey and sw_mp_scan_record themselves: where, what, scratch reused */
	sw_mp_dups d = { 0 };
	sw_mp_twin t = { 0 };
	const uint8_t *nx;
	size_t bad;
	is_int(sw_mp_dupkey(&d, (const uint8_t *)"\x82\xc4\x01z\x01\xc4\x01z\x02", 9, &t), 1, "a bin key twice");
	ok(t.at == 5 && t.kind == 'b' && t.klen == 1 && *t.key == 'z', "at byte %zu, kind %c", t.at, t.kind);
	is_int(sw_mp_dupkey(&d, (const uint8_t *)"\x82\xa1" "a\x01\xa1" "b\x02", 7, &t), 0, "then two keys");
	is_int(sw_mp_dupkey(&d, (const uint8_t *)"\x82\xa1" "a\x01", 4, &t), SW_EFORMAT,
	       "bytes cut short: SW_EFORMAT, not a read past them");
	/* {"t":[1,2,3],"m":{"a":1,"a":2},"z":0}: the twin inside "m" at byte 13 of the record */
	const uint8_t rec[] = "\x83\xa1t\x93\x01\x02\x03\xa1m\x82\xa1" "a\x01\xa1" "a\x02\xa1z\x00";
	is_int(sw_mp_scan_record(&d, rec, rec + sizeof rec - 1, 100, &nx, &bad, &t), 1, "scan: a twin in a value");
	ok(t.at == 13 && t.kind == 's' && t.klen == 1 && *t.key == 'a', "at byte %zu of the record", t.at);
	is_int(sw_mp_scan_record(&d, rec, rec + 12, 100, &nx, &bad, &t), SW_ETRUNC, "scan: cut short, SW_ETRUNC");
	is_int(sw_mp_scan_record(&d, rec, rec + sizeof rec - 1, 10, &nx, &bad, &t), SW_ETOOBIG,
	       "scan: over the size limit, SW_ETOOBIG");
	const uint8_t u8[] = "\x82\xa1k\xa2\xc3\x28\xa1j\x01";
	ok(sw_mp_scan_record(&d, u8, u8 + sizeof u8 - 1, 100, &nx, &bad, &t) == SW_EFORMAT && bad == 4,
	   "scan: bad UTF-8 at byte %zu of the record", bad);
	const uint8_t fine[] = "\x82\xa1k\xa2ok\xa1j\x92\x81\xa1x\x01\x81\xa1x\x02";
	ok(sw_mp_scan_record(&d, fine, fine + sizeof fine - 1, 100, &nx, &bad, &t) == 0 && nx == fine + sizeof fine - 1,
	   "scan: a record without twins, to its end");
	sw_mp_dups_release(&d);
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
	is_int(sw_mp_put_str(&b, "a\xff", 2), SW_EFORMAT, "a str that is not UTF-8 is not written");
	put_key_(&b, "raw"); sw_mp_put_str(&b, "a\xc3\xa9", 3);
	put_key_(&b, "ext"); sw_mp_put_ext(&b, -1, "\1\2\3\4", 4);
	put_key_(&b, "nan"); sw_mp_put_f32(&b, NAN);
	put_key_(&b, "inf"); sw_mp_put_f64(&b, -INFINITY);
	put_key_(&b, "esc"); sw_mp_put_str(&b, "\"\\\n\x01", 4);
	is_int(roundtrip_(b.p, b.len, js, sizeof js), 0, "bin, UTF-8, ext, non-finite round-trip");
	ok(!strcmp(js, "{\"bin\":{\"$bin\":\"AP8=\"},\"raw\":\"a\xc3\xa9\",\"ext\":{\"$ext\":[-1,\"AQIDBA==\"]},"
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

/*
 * Every str is UTF-8: the checker and the lossy decoder against what Rust's
 * from_utf8_lossy (tokenizers' decode) and CPython's errors="replace" make of
 * each kind of bad sequence; the reader, the JSON $str form and set_raw
 * refuse a str that is not UTF-8.
 */
static void test_utf8(void)
{
	static const struct { const char *in, *out; } cases[] = {
		{ "plain ascii", "plain ascii" },
		{ "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" },
		{ "cut \xe2\x82", "cut \xef\xbf\xbd" },                        /* a character cut: one U+FFFD */
		{ "\xf0\x9f\x98", "\xef\xbf\xbd" },
		{ "\xe2\x82x", "\xef\xbf\xbdx" },
		{ "\x82\xac", "\xef\xbf\xbd\xef\xbf\xbd" },                   /* lone continuation bytes */
		{ "\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd" },                   /* overlong: never a lead */
		{ "\xe0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* a surrogate */
		{ "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xf5\xff", "\xef\xbf\xbd\xef\xbf\xbd" },
		{ "a\xf0\x9f\x98\xe2\x82\xac" "b", "a\xef\xbf\xbd\xe2\x82\xac" "b" },
	};
	int good = 0, checks = 0;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sw_buf b = { 0 };
		size_t n = strlen(cases[i].in), bad = 99;
		int valid = !strcmp(cases[i].in, cases[i].out);
		good += sw_utf8_lossy(&b, cases[i].in, n) == 0 && b.len == strlen(cases[i].out) &&
		        !memcmp(b.p, cases[i].out, b.len);
		checks += (sw_utf8_check(cases[i].in, n, &bad) == 0) == valid && (valid || bad < n);
		sw_buf_release(&b);
	}
	is_int(good, sizeof cases / sizeof *cases, "lossy decoding: U+FFFD for each maximal invalid subpart");
	is_int(checks, sizeof cases / sizeof *cases, "the checker agrees, and says where");
	size_t bad = 0;
	is_int(sw_utf8_check("0123456789\xc3\xa9" "abcdef\xff", 19, &bad), SW_EFORMAT, "past the ASCII fast path");
	is_int(bad, 18, "the bad byte's offset");

	uint64_t n;
	sw_error e;
	const char two[] = "\x81\xa1x\xa1" "a\x81\xa1y\x92\x01\xa2\xc3\x28";
	is_int(read_all_(two, sizeof two - 1, &n, &e), SW_EFORMAT, "a record with a str that is not UTF-8 is refused");
	ok(n == 1 && e.record == 2 && e.offset == 5 && strstr(e.msg, "UTF-8 at byte 11"), "named: %s", e.msg);
	const char key[] = "\x81\xa2\xc3\x28\x01";
	is_int(read_all_(key, sizeof key - 1, &n, &e), SW_EFORMAT, "a key too");
	const char *js = "{\"a\":{\"$str\":\"Yf8=\"}}\n";
	is_int(read_all_(js, strlen(js), &n, &e), SW_EFORMAT, "a $str form holding bytes that are not UTF-8");
	ok(strstr(e.msg, "$bin") != NULL, "says where raw bytes go: %s", e.msg);
	js = "{\"a\":{\"$str\":\"YcOp\"}}\n";
	is_int(read_all_(js, strlen(js), &n, &e), 0, "a $str form holding UTF-8 is a str");
	sw_rec *r = sw_rec_new();
	is_int(sw_rec_set_raw(r, "x", "\xa2\xc3\x28", 3), SW_EFORMAT, "set_raw refuses a str that is not UTF-8");
	is_int(sw_rec_set_str(r, "x", "\xc3", 1), SW_EFORMAT, "so does set_str");
	is_int(sw_rec_set_bin(r, "x", "\xc3", 1), 0, "raw bytes go in a bin");
	sw_rec_free(r);
}

/* The refill hook: each call notes the records returned so far, then feeds the pipe its next part. */
typedef struct refill_ {
	sw_reader *r;
	int wfd, next, calls;
	uint64_t seen[8];
	const char *const *parts;
	int nparts;
} refill_;

static void refill_cb_(void *arg)
{
	refill_ *t = arg;
	if (t->calls < 8)
		t->seen[t->calls] = sw_reader_records(t->r);
	t->calls++;
	if (t->next < t->nparts) {
		const char *p = t->parts[t->next++];
		if (write(t->wfd, p, strlen(p)) != (ssize_t)strlen(p))
			t->next = t->nparts;
	} else if (t->wfd >= 0) {
		close(t->wfd);
		t->wfd = -1;
	}
}

/* A pipe fed only from the hook: the hook runs before each read of the source, after every whole
 * record already read was returned, so a consumer can hand on a batch before the reader waits. */
static void test_refill(void)
{
	static const char *const parts[] = {
		"{\"a\":1}\n{\"a\":2}\n", /* two records */
		"{\"a\":3}\n{\"a\"",       /* one, and half of the next */
		":4}\n",                     /* its end */
	};
	int fds[2];
	if (pipe(fds)) {
		ok(0, "pipe");
		return;
	}
	sw_error e;
	refill_ t = { .wfd = fds[1], .parts = parts, .nparts = 3 };
	t.r = sw_reader_fdopen(fds[0], "pipe", &e);
	sw_reader_set_refill(t.r, refill_cb_, &t);
	sw_rec *rec = sw_rec_new();
	int rc;
	while ((rc = sw_reader_next(t.r, rec)) == 1)
		;
	is_int(rc, 0, "the pipe's records to its end");
	is_int(sw_reader_records(t.r), 4, "four records");
	is_int(t.calls, 4, "the hook before each of the four reads (three parts and the end)");
	ok(t.seen[0] == 0 && t.seen[1] == 2 && t.seen[2] == 3 && t.seen[3] == 4,
	   "each time after the whole records read so far: %llu %llu %llu %llu", (unsigned long long)t.seen[0],
	   (unsigned long long)t.seen[1], (unsigned long long)t.seen[2], (unsigned long long)t.seen[3]);
	sw_rec_free(rec);
	sw_reader_free(t.r);
	close(fds[0]);
	if (t.wfd >= 0)
		close(t.wfd);

	uint8_t mem[] = "{\"a\":1}\n";
	t = (refill_){ .wfd = -1 };
	t.r = sw_reader_memopen(mem, sizeof mem - 1, "mem", &e);
	sw_reader_set_refill(t.r, refill_cb_, &t);
	rec = sw_rec_new();
	while (sw_reader_next(t.r, rec) == 1)
		;
	is_int(t.calls, 0, "never for a reader of memory");
	sw_rec_free(rec);
	sw_reader_free(t.r);
}

/* sw_show_text: what a message may show of a name or a line from elsewhere */
static void test_show_text(void)
{
	static const struct { const char *in; int quoted; size_t size; const char *want; } cases[] = {
		{ "plain caf\xc3\xa9 \xe2\x82\xac", 0, 64, "plain caf\xc3\xa9 \xe2\x82\xac" },
		{ "a\nb\tc\x1b[2J\x7f", 0, 64, "a\\x0ab\\x09c\\x1b[2J\\x7f" },
		{ "C1 \xc2\x9b, NBSP \xc2\xa0", 0, 64, "C1 \\xc2\\x9b, NBSP \xc2\xa0" },
		{ "no char \xff \xc3( \xe2\x82", 0, 64, "no char \\xff \\xc3( \\xe2\\x82" },
		{ "say \"hi\" \\", 0, 64, "say \"hi\" \\" },
		{ "say \"hi\" \\", 1, 64, "say \\x22hi\\x22 \\x5c" },
		/* cut where it does not fit, at a character's start, "..." after it */
		{ "abcdefghij", 0, 8, "abcd..." },
		{ "ab\xe2\x82\xac\xe2\x82\xac", 0, 10, "ab\xe2\x82\xac..." },
		{ "ab\x1b", 0, 9, "ab..." },
		{ "ab", 0, 3, "" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char out[64];
		memset(out, 'Z', sizeof out);
		sw_show_text(out, cases[i].size, cases[i].in, strlen(cases[i].in), cases[i].quoted);
		ok(!strcmp(out, cases[i].want), "show_text case %zu: %s", i, out);
	}
	char one[1] = { 'Z' };
	sw_show_text(one, 1, "abc", 3, 0);
	ok(one[0] == 0, "a 1-byte buffer gets its NUL");
}

/* The entries of the scratch directory, sorted, as "a b c". */
static const char *ls_(void)
{
	static char out[512];
	struct dirent **e;
	int n = scandir(tmp_dir_, &e, NULL, alphasort);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		if (e[i]->d_name[0] != '.') {
			size_t k = strlen(out);
			snprintf(out + k, sizeof out - k, "%s%s", k ? " " : "", e[i]->d_name);
		}
		free(e[i]);
	}
	free(e);
	return out;
}

static sw_writer *whole_(const char *path, int nrec)
{
	sw_error e = { 0 };
	sw_writer_opts o = { SW_FMT_JSON, 0 };
	sw_writer *w = sw_writer_open_whole(path, &o, &e);
	sw_rec *rec = sw_rec_new();
	for (int i = 0; w && i < nrec; i++) {
		sw_rec_clear(rec);
		sw_rec_set_i64(rec, "i", i);
		sw_writer_put(w, rec);
	}
	sw_rec_free(rec);
	return w;
}

/* sw_writer_open_whole: the file changes at close, all at once; until then it is as it was. */
static void test_whole(void)
{
	char path[512], link[512], buf[256];
	struct stat st;
	if (tmp_open("stream"))
		abort();
	snprintf(path, sizeof path, "%s/out", tmp_dir_);
	tmp_put(path, "old\n", 4);
	chmod(path, 0640);
	sw_writer *w = whole_(path, 2);
	ok(w && sw_writer_pending(w) && !strncmp(sw_writer_pending(w), path, strlen(path)) &&
	   !strncmp(sw_writer_pending(w) + strlen(path), ".tmp.", 5), "records go to a temporary beside it: %s",
	   w ? sw_writer_pending(w) : "");
	ok(!strcmp(tmp_get(path, buf, sizeof buf, NULL), "old\n"), "the file is as it was while it is written");
	is_int(sw_writer_close(w), 0, "closed");
	ok(!sw_writer_pending(w), "nothing pending after");
	sw_writer_free(w);
	ok(!strcmp(tmp_get(path, buf, sizeof buf, NULL), "{\"i\":0}\n{\"i\":1}\n"), "then it is the new one");
	ok(!stat(path, &st) && (st.st_mode & 07777) == 0640, "with the mode it had (%o)", st.st_mode & 07777);
	ok(!strcmp(ls_(), "out"), "and no temporary is left: %s", ls_());

	w = whole_(path, 3);
	sw_writer_free(w); /* never closed: an error, a program that stopped */
	ok(!strcmp(tmp_get(path, buf, sizeof buf, NULL), "{\"i\":0}\n{\"i\":1}\n"), "a writer freed unclosed changes nothing");
	ok(!strcmp(ls_(), "out"), "and removes its temporary: %s", ls_());

	/* a new file gets the umask's mode; a symbolic link's target is replaced, the link kept */
	snprintf(path, sizeof path, "%s/new", tmp_dir_);
	mode_t um = umask(027);
	w = whole_(path, 1);
	ok(w && !sw_writer_close(w) && !stat(path, &st) && (st.st_mode & 07777) == 0640, "a new file: 0666 less the umask (%o)",
	   st.st_mode & 07777);
	umask(um);
	sw_writer_free(w);
	snprintf(link, sizeof link, "%s/link", tmp_dir_);
	if (symlink("new", link))
		abort();
	w = whole_(link, 3);
	ok(w && !sw_writer_close(w), "written through a link");
	sw_writer_free(w);
	ok(!lstat(link, &st) && S_ISLNK(st.st_mode), "the link is still a link");
	size_t n = 0;
	tmp_get(path, buf, sizeof buf, &n);
	is_int(n, 24, "its target holds the three records");
	ok(!strcmp(ls_(), "link new out"), "no temporary left: %s", ls_());

	/* not a regular file: written directly, nothing pending */
	w = whole_("/dev/null", 1);
	ok(w && !sw_writer_pending(w) && !sw_writer_close(w), "/dev/null is written directly");
	sw_writer_free(w);
	sw_error e = { 0 };
	snprintf(path, sizeof path, "%s/no/such/dir/f", tmp_dir_);
	sw_writer_opts o = { SW_FMT_JSON, 0 };
	ok(!sw_writer_open_whole(path, &o, &e) && e.code == SW_EIO && e.sys_errno == ENOENT, "no directory: %s", e.msg);
	tmp_close();
}

int main(void)
{
	test_show_text();
	test_errors();
	test_dupkeys();
	test_zstd();
	test_json_mapping();
	test_writer();
	test_whole();
	test_utf8();
	test_refill();
	return tap_done();
}
