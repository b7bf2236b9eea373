/*
 * test_image.c - sw/image.h: decoding against what Pillow decodes, the
 * image processors against transformers' pixel_values (fixtures of
 * tests/fixtures/image/, made by tests/fixtures/make_image_refs.py), every
 * error a picture or a preprocessor_config.json can cause, PNG written and
 * read back, and the images of a sample's media.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tmpfiles.h"
#include "rec.h"

#define TOL 1e-5f

static char fix_[400];

/* A whole file, malloc'd; NULL when it cannot be read. */
static uint8_t *slurp_(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, len = 0, got;
	uint8_t *b = malloc(cap);
	while (b && (got = fread(b + len, 1, cap - len, f)) > 0)
		if ((len += got) == cap)
			b = realloc(b, cap *= 2);
	fclose(f);
	*n = len;
	return b;
}

static uint8_t *fixture_(const char *name, size_t *n)
{
	char p[1700];
	snprintf(p, sizeof p, "%s/%s", fix_, name);
	return slurp_(p, n);
}

static void test_decode_refs_(void)
{
	char p[1200], line[256];
	snprintf(p, sizeof p, "%s/refs.txt", fix_);
	FILE *f = fopen(p, "r");
	ok(f != NULL, "refs.txt is there (%s)", p);
	if (!f)
		return;
	int images = 0, cases = 0, refused = 0;
	while (fgets(line, sizeof line, f)) {
		char a[64], b[64];
		int w, h, c;
		if (sscanf(line, "refuse %63s %63s", a, b) == 2) {
			refused++;
			snprintf(p, sizeof p, "%s/%s", fix_, a);
			sw_image im = { 0 };
			sw_error e = { 0 };
			int rc = sw_image_read(p, &im, &e);
			ok(rc == SW_EFORMAT && strstr(e.msg, a) && strstr(e.msg, "bad PNG: its ") && !im.data,
			   "%s: refused as Pillow refuses it (%s): %d '%s'", a, b, rc, e.msg);
			sw_image_release(&im);
		} else if (sscanf(line, "image %63s %d %d %d", a, &w, &h, &c) == 4) {
			images++;
			snprintf(p, sizeof p, "%s/%s", fix_, a);
			sw_image im;
			sw_error e = { 0 };
			int rc = sw_image_read(p, &im, &e);
			ok(rc == 0, "%s decodes: %s", a, e.msg);
			if (rc)
				continue;
			ok(im.w == w && im.h == h && im.c == c, "%s is %d x %d x %d (Pillow: %d x %d x %d)", a, im.w,
			   im.h, im.c, w, h, c);
			size_t n = 0;
			snprintf(p, sizeof p, "%s.u8", a);
			uint8_t *want = fixture_(p, &n);
			size_t differ = 0;
			for (size_t i = 0; want && n == (size_t)w * h * c && im.w == w && i < n; i++)
				differ += want[i] != im.data[i];
			ok(want && n == (size_t)w * h * c && differ == 0, "%s: the pixels Pillow decodes (%zu of %zu differ)",
			   a, differ, n);
			free(want);
			sw_image_release(&im);
		} else if (sscanf(line, "case %63s %63s %d %d", a, b, &h, &w) == 4) {
			cases++;
			snprintf(p, sizeof p, "%s/%s", fix_, a);
			sw_image_proc *proc = NULL;
			sw_error e = { 0 };
			int rc = sw_image_proc_load(p, &proc, &e);
			ok(rc == 0, "%s: the processor loads: %s", a, e.msg);
			if (rc)
				continue;
			int ph, pw;
			sw_image_proc_size(proc, &ph, &pw);
			is_int(ph * 10000 + pw, h * 10000 + w, "%s: output %d x %d", a, h, w);
			snprintf(p, sizeof p, "%s/%s", fix_, b);
			sw_image im;
			rc = sw_image_read(p, &im, &e);
			size_t zn = 0, nf = (size_t)3 * h * w;
			snprintf(p, sizeof p, "%s.%s.f32.zst", b, a);
			uint8_t *z = fixture_(p, &zn);
			float *want = malloc(nf * sizeof *want), *got = malloc(nf * sizeof *got);
			int zok = z && ZSTD_decompress(want, nf * sizeof *want, z, zn) == nf * sizeof *want;
			ok(rc == 0 && zok, "%s on %s: picture and reference read", a, b);
			if (!rc && zok && ph == h && pw == w) {
				rc = sw_image_preprocess(proc, &im, got, &e);
				ok(rc == 0, "%s on %s: preprocessed: %s", a, b, e.msg);
				float worst = 0;
				size_t exact = 0;
				for (size_t i = 0; !rc && i < nf; i++) {
					float d = fabsf(got[i] - want[i]);
					worst = d > worst ? d : worst;
					exact += got[i] == want[i];
				}
				ok(!rc && worst <= TOL, "%s on %s: pixel_values as transformers' to %g (%zu of %zu equal)", a,
				   b, worst, exact, nf);
			}
			free(z), free(want), free(got);
			sw_image_release(&im);
			sw_image_proc_free(proc);
		}
	}
	fclose(f);
	ok(images >= 34 && cases >= 25 && refused >= 3, "%d pictures, %d processor cases, %d refused", images, cases,
	   refused);
}

/* sw_image_decode of bytes expecting code and a message containing what. */
static void refuse_(const void *p, size_t n, int code, const char *what, const char *label)
{
	sw_image im = { 0 };
	sw_error e = { 0 };
	int rc = sw_image_decode(p, n, &im, &e);
	ok(rc == code && e.code == code && strstr(e.msg, what) && !im.data, "%s: %d '%s'", label, rc, e.msg);
	sw_image_release(&im);
}

static void put_be32_(uint8_t *p, uint32_t x)
{
	p[0] = x >> 24, p[1] = x >> 16, p[2] = x >> 8, p[3] = x;
}

static void test_decode_errors_(void)
{
	size_t n = 0, jn = 0;
	uint8_t *png = fixture_("rgb.png", &n), *jpg = fixture_("baseline.jpg", &jn);
	ok(png && jpg, "the fixtures to break are there");
	if (!png || !jpg)
		return;
	refuse_(png, n / 2, SW_ETRUNC, "truncated PNG", "half a PNG");
	refuse_(png, 40, SW_ETRUNC, "truncated PNG", "a PNG cut in its header");
	refuse_(png, 5, SW_ETRUNC, "truncated image", "five bytes of a PNG");
	refuse_(png, n - 12, SW_ETRUNC, "truncated PNG", "a PNG without IEND");
	refuse_(jpg, jn / 2, SW_ETRUNC, "truncated JPEG", "half a JPEG");
	refuse_(jpg, 200, SW_ETRUNC, "truncated JPEG", "a JPEG cut in its tables");
	refuse_("hello, world\n", 13, SW_EFORMAT, "not an image", "text");
	refuse_("", 0, SW_EFORMAT, "not an image", "nothing");
	/* a PNG header of 100000 x 100000, its CRC made right: refused before any allocation */
	uint8_t *big = malloc(n);
	memcpy(big, png, n);
	put_be32_(big + 16, 100000);
	put_be32_(big + 20, 100000);
	uint32_t crc = 0xffffffffu;
	for (int i = 12; i < 29; i++) {
		crc ^= big[i];
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
	}
	put_be32_(big + 29, ~crc);
	refuse_(big, n, SW_ETOOBIG, "limit of 67108864 pixels", "a PNG of 10^10 pixels");
	/* a bit flipped in the header: its CRC fails */
	big[17] ^= 1;
	refuse_(big, n, SW_EFORMAT, "bad PNG", "a PNG whose header's CRC fails");
	free(big);
	/* a JPEG whose frame header says 60000 x 60000 */
	big = malloc(jn);
	memcpy(big, jpg, jn);
	size_t sof = 0;
	for (size_t i = 2; i + 9 < jn; i++)
		if (big[i] == 0xff && big[i + 1] == 0xc0) {
			sof = i;
			break;
		}
	ok(sof > 0, "the JPEG's SOF0 found");
	if (sof) {
		big[sof + 5] = 60000 >> 8, big[sof + 6] = 60000 & 255, big[sof + 7] = 60000 >> 8, big[sof + 8] = 60000 & 255;
		refuse_(big, jn, SW_ETOOBIG, "limit of 67108864 pixels", "a JPEG of 3.6 10^9 pixels");
		big[sof + 9] = 2; /* two components: neither gray nor colour */
		big[sof + 5] = 0, big[sof + 6] = 8, big[sof + 7] = 0, big[sof + 8] = 8;
		refuse_(big, jn, SW_EFORMAT, "bad JPEG", "a JPEG with a broken frame header");
	}
	free(big);
	/* the file's name in every message from sw_image_read */
	char path[600];
	snprintf(path, sizeof path, "%s/cut.png", tmp_dir_);
	tmp_put(path, png, n / 3);
	sw_image im;
	sw_error e = { 0 };
	int rc = sw_image_read(path, &im, &e);
	ok(rc == SW_ETRUNC && !strncmp(e.msg, path, strlen(path)) && strstr(e.msg, ": truncated PNG"),
	   "a truncated file: '%s'", e.msg);
	snprintf(path, sizeof path, "%s/none.png", tmp_dir_);
	e = (sw_error){ 0 };
	rc = sw_image_read(path, &im, &e);
	ok(rc == SW_EIO && e.sys_errno == ENOENT && !strncmp(e.msg, path, strlen(path)) &&
	   strstr(e.msg, "No such file"), "a missing file: '%s'", e.msg);
	free(png), free(jpg);
}

static void test_write_png_(void)
{
	for (int c = 1; c <= 4; c++) {
		if (c == 2)
			continue;
		sw_image im = { 5, 3, c, malloc(5 * 3 * c) }, back;
		for (int i = 0; i < 5 * 3 * c; i++)
			im.data[i] = (uint8_t)(i * 37 + c);
		char path[600];
		snprintf(path, sizeof path, "%s/w%d.png", tmp_dir_, c);
		sw_error e = { 0 };
		int rc = sw_image_write_png(path, &im, &e);
		ok(rc == 0, "%d channels written: %s", c, e.msg);
		rc = sw_image_read(path, &back, &e);
		ok(rc == 0 && back.w == 5 && back.h == 3 && back.c == c && !memcmp(back.data, im.data, 15 * c),
		   "%d channels read back the same", c);
		sw_image_release(&back);
		sw_image_release(&im);
		ok(im.data == NULL && im.w == 0, "released");
	}
	sw_image_release(NULL);
	sw_image bad = { 2, 2, 2, (uint8_t *)"abcdefgh" };
	sw_error e = { 0 };
	ok(sw_image_write_png("/nonexistent/x.png", &bad, &e) == SW_EINVAL && strstr(e.msg, "not an image"),
	   "two channels refused: %s", e.msg);
	bad.c = 1;
	ok(sw_image_write_png("/nonexistent/x.png", &bad, &e) < 0 && strstr(e.msg, "/nonexistent/x.png"),
	   "an unwritable place: %s", e.msg);
}

static const char clip_[] =
	"{\"crop_size\": {\"height\": 30, \"width\": 30}, \"do_center_crop\": true, \"do_convert_rgb\": true,"
	" \"do_normalize\": true, \"do_rescale\": true, \"do_resize\": true,"
	" \"image_mean\": [0.48145466, 0.4578275, 0.40821073], \"image_processor_type\": \"CLIPImageProcessor\","
	" \"image_std\": [0.26862954, 0.26130258, 0.27577711], \"resample\": 3,"
	" \"rescale_factor\": 0.00392156862745098, \"size\": {\"shortest_edge\": 30}}";

/* clip_ with the text of one key's value replaced (or, value NULL, the key removed). */
static void edited_(char *out, size_t cap, const char *key, const char *value)
{
	char k[64];
	snprintf(k, sizeof k, "\"%s\": ", key);
	const char *at = strstr(clip_, k);
	if (!at) {
		snprintf(out, cap, "%s", clip_);
		return;
	}
	const char *end = at + strlen(k);
	int depth = 0;
	for (; *end && (depth || (*end != ',' && *end != '}')); end++)
		depth += (*end == '{' || *end == '[') - (*end == '}' || *end == ']');
	if (value)
		snprintf(out, cap, "%.*s%s%s%s", (int)(at - clip_), clip_, k, value, end);
	else if (*end == ',')
		snprintf(out, cap, "%.*s%s", (int)(at - clip_), clip_, end + 2);
	else /* the last key: its comma goes before it */
		snprintf(out, cap, "%.*s%s", (int)(at - clip_ - 2), clip_, end);
}

static void proc_refuse_(const char *key, const char *value, int code, const char *what)
{
	char text[2048];
	edited_(text, sizeof text, key, value);
	sw_image_proc *p = (sw_image_proc *)1;
	sw_error e = { 0 };
	int rc = sw_image_proc_parse(text, strlen(text), "pc.json", &p, &e);
	ok(rc == code && p == NULL && !strncmp(e.msg, "pc.json: ", 9) && strstr(e.msg, what), "%s %s: '%s'", key,
	   value ? value : "removed", e.msg);
	sw_image_proc_free(p);
}

static void test_proc_errors_(void)
{
	sw_image_proc *p = NULL;
	sw_error e = { 0 };
	ok(sw_image_proc_parse(clip_, strlen(clip_), "pc.json", &p, &e) == 0, "the CLIP config parses: %s", e.msg);
	sw_image_proc_free(p);
	sw_image_proc_free(NULL);
	const char *need[] = { "do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale",
		               "rescale_factor", "do_normalize", "image_mean", "image_std",
		               "image_processor_type" };
	for (size_t i = 0; i < sizeof need / sizeof *need; i++)
		proc_refuse_(need[i], NULL, SW_ENOENT, need[i]);
	proc_refuse_("resample", "6", SW_EINVAL, "resample 6 is not supported");
	proc_refuse_("resample", "-1", SW_EINVAL, "resample -1 is not supported");
	proc_refuse_("resample", "\"bicubic\"", SW_ETYPE, "not an integer");
	proc_refuse_("do_center_crop", "false", SW_EINVAL, "would depend on the picture");
	proc_refuse_("size", "{\"shortest_edge\": 30, \"longest_edge\": 60}", SW_EINVAL, "longest_edge");
	proc_refuse_("size", "{\"height\": 30}", SW_ENOENT, "size.width");
	proc_refuse_("size", "0", SW_ERANGE, "not from 1 to 8192");
	proc_refuse_("crop_size", "{\"shortest_edge\": 30}", SW_EINVAL, "shortest_edge");
	proc_refuse_("image_mean", "[0.5, 0.5]", SW_ETYPE, "not 3 numbers");
	proc_refuse_("image_std", "[0.5, 0, 0.5]", SW_ERANGE, "not a positive number");
	proc_refuse_("do_rescale", "1", SW_ETYPE, "not true or false");
	proc_refuse_("rescale_factor", "\"1/255\"", SW_ETYPE, "rescale_factor");
	proc_refuse_("image_processor_type", "\"LlavaNextImageProcessor\"", SW_EINVAL, "not supported");
	proc_refuse_("do_convert_rgb", "\"yes\"", SW_ETYPE, "do_convert_rgb");
	proc_refuse_("do_convert_rgb", "true, \"do_pad\": true", SW_EINVAL, "do_pad");
	e = (sw_error){ 0 };
	ok(sw_image_proc_parse("[1]", 3, "pc.json", &p, &e) == SW_EFORMAT && strstr(e.msg, "not an object"),
	   "not an object: %s", e.msg);
	const char *twin = "{\"crop_size\":{\"height\":224,\"height\":336}}";
	ok(sw_image_proc_parse(twin, strlen(twin), "pc.json", &p, &e) == SW_EFORMAT &&
	   strstr(e.msg, "pc.json: the name \"height\" appears twice in an object"),
	   "a name twice, in a nested object: %s", e.msg);
	ok(sw_image_proc_parse("{", 1, "pc.json", &p, &e) == SW_EFORMAT && strstr(e.msg, "pc.json: byte"),
	   "not JSON: %s", e.msg);
	ok(sw_image_proc_load("/nonexistent", &p, &e) == SW_EIO && strstr(e.msg, "/nonexistent/preprocessor_config.json"),
	   "no file: %s", e.msg);
	/* SigLIP: no crop in its processor; do_convert_rgb absent in older configs */
	const char sig[] = "{\"do_normalize\": true, \"do_rescale\": true, \"do_resize\": true, \"image_mean\": 0.5,"
	                   " \"image_processor_type\": \"SiglipImageProcessor\", \"image_std\": [0.5, 0.5, 0.5],"
	                   " \"resample\": 2, \"rescale_factor\": 0.00392156862745098, \"size\": {\"height\": 16,"
	                   " \"width\": 12}}";
	ok(sw_image_proc_parse(sig, strlen(sig), "pc.json", &p, &e) == 0, "a SigLIP config without crop: %s", e.msg);
	int h = 0, w = 0;
	if (p)
		sw_image_proc_size(p, &h, &w);
	ok(h == 16 && w == 12, "its size is %d x %d", h, w);
	sw_image two = { 2, 2, 2, (uint8_t *)"abcdefgh" };
	float out[3 * 16 * 12];
	ok(p && sw_image_preprocess(p, &two, out, &e) == SW_EINVAL && strstr(e.msg, "2"), "two channels refused: %s",
	   e.msg);
	sw_image_proc_free(p);
	/* do_convert_rgb false: an RGB picture passes, a gray one is refused */
	char text[2048];
	edited_(text, sizeof text, "do_convert_rgb", "false");
	ok(sw_image_proc_parse(text, strlen(text), "pc.json", &p, &e) == 0, "do_convert_rgb false parses");
	uint8_t px[12] = { 0 };
	sw_image g = { 2, 2, 1, px }, rgb = { 2, 2, 3, px };
	float o2[3 * 30 * 30];
	ok(p && sw_image_preprocess(p, &rgb, o2, &e) == 0, "an RGB picture passes: %s", e.msg);
	ok(p && sw_image_preprocess(p, &g, o2, &e) == SW_EINVAL && strstr(e.msg, "do_convert_rgb"),
	   "a gray one is refused: %s", e.msg);
	sw_image_proc_free(p);
	/* A resize far past the pixel limit: only the crop's 30 x 30 of it is
	 * made (a black picture: every value the normalised 0).  A long side
	 * past 2^30 is refused. */
	edited_(text, sizeof text, "size", "{\"shortest_edge\": 8192}");
	ok(sw_image_proc_parse(text, strlen(text), "pc.json", &p, &e) == 0, "shortest_edge 8192 parses");
	uint8_t *wide = calloc(30 * 16 * 3, 1), *thin = calloc(2 * 4000, 1), *line = calloc(131073, 1);
	sw_image a = { 30, 16, 3, wide }, b = { 2, 4000, 1, thin }, c = { 131073, 1, 1, line };
	/* the black values: a black 2 x 2 picture's (padded with black) */
	int black = 1;
	static float zero[3 * 30 * 30];
	e.msg[0] = 0;
	ok(p && sw_image_preprocess(p, &rgb, zero, &e) == 0, "a black 2 x 2 picture passes: %s", e.msg);
	o2[0] = 1e9f;
	e.msg[0] = 0;
	ok(p && sw_image_preprocess(p, &a, o2, &e) == 0, "30 x 16 resized to 15360 x 8192, cropped: %s", e.msg);
	for (int i = 0; i < 3 * 30 * 30; i++)
		black &= o2[i] == zero[i];
	ok(black, "its crop is the black picture's values");
	o2[0] = 1e9f, black = 1;
	e.msg[0] = 0;
	ok(p && sw_image_preprocess(p, &b, o2, &e) == 0, "2 x 4000 resized to 8192 x 16384000, cropped: %s",
	   e.msg);
	for (int i = 0; i < 3 * 30 * 30; i++)
		black &= o2[i] == zero[i];
	ok(black, "its crop is the black picture's values");
	ok(p && sw_image_preprocess(p, &c, o2, &e) == SW_ERANGE && strstr(e.msg, "resizes to a side of"),
	   "131073 x 1 (a side of 2^30 and more) refused: %s", e.msg);
	free(line);
	free(wide), free(thin);
	sw_image_proc_free(p);
}

/* sw_image_proc_write_clip writes what transformers wrote for the clip30 fixture. */
static void test_proc_write_(void)
{
	sw_error e = { 0 };
	int rc = sw_image_proc_write_clip(tmp_dir_, 30, &e);
	ok(rc == 0, "CLIP 30 written: %s", e.msg);
	char path[600];
	snprintf(path, sizeof path, "%s/preprocessor_config.json", tmp_dir_);
	size_t n = 0, m = 0;
	uint8_t *got = slurp_(path, &n), *want = fixture_("clip30/preprocessor_config.json", &m);
	ok(got && want && n == m && !memcmp(got, want, n), "byte for byte what transformers writes");
	free(got), free(want);
	ok(sw_image_proc_write_clip(tmp_dir_, 0, &e) == SW_EINVAL, "size 0 refused: %s", e.msg);
}

static void test_media_(void)
{
	char json[2048];
	snprintf(json, sizeof json,
	         "{\"prompt\": \"<image> how many?\", \"media\": [{\"type\": \"image\", \"path\": \"%s/rgb.png\"},"
	         " {\"type\": \"audio\", \"rate\": 16000}, {\"type\": \"image\", \"w\": 2, \"h\": 1, \"c\": 3,"
	         " \"data\": {\"$bin\": \"AQIDBAUG\"}}, {\"type\": \"video\", \"frames\": []}]}",
	         fix_);
	sw_rec *r = json_rec(json);
	sw_image *ims = NULL;
	size_t n = 9;
	sw_error e = { 0 };
	int rc = sw_sample_images(r, &ims, &n, &e);
	ok(rc == 0 && n == 2, "two images, audio and video skipped: %s", e.msg);
	ok(n == 2 && ims[0].w == 37 && ims[0].h == 23 && ims[0].c == 3, "the file decoded");
	ok(n == 2 && ims[1].w == 2 && ims[1].h == 1 && ims[1].c == 3 && !memcmp(ims[1].data, "\1\2\3\4\5\6", 6),
	   "the inline pixels copied");
	sw_images_free(ims, n);
	sw_images_free(NULL, 0);
	sw_rec_free(r);
	r = json_rec("{\"prompt\": \"x\"}");
	ok(sw_sample_images(r, &ims, &n, &e) == 0 && n == 0 && ims == NULL, "no media: no images");
	sw_rec_free(r);

	struct {
		const char *media;
		int code;
		const char *what;
	} bad[] = {
		{ "\"x.png\"", SW_ETYPE, "field 'media' is a str, not an array" },
		{ "[1]", SW_ETYPE, "media[0] is a uint, not a map" },
		{ "[{\"path\": \"x.png\"}]", SW_EINVAL, "media[0] has no 'type'" },
		{ "[{\"type\": 3}]", SW_ETYPE, "media[0]: 'type' is a uint" },
		{ "[{\"type\": \"audio\"}, {\"type\": \"image\"}]", SW_EINVAL, "media[1]: an image has neither" },
		{ "[{\"type\": \"image\", \"path\": \"/nonexistent/x.png\"}]", SW_EIO,
		  "media[0]: file '/nonexistent/x.png': No such file or directory" },
		{ "[{\"type\": \"image\", \"path\": \"\"}]", SW_EINVAL, "media[0]: 'path' is not a file name" },
		{ "[{\"type\": \"image\", \"path\": 7}]", SW_ETYPE, "media[0]: 'path' is a uint" },
		{ "[{\"type\": \"image\", \"path\": \"a\", \"data\": {\"$bin\": \"AA==\"}}]", SW_EINVAL, "both" },
		{ "[{\"type\": \"image\", \"w\": 2, \"h\": 1, \"c\": 3, \"data\": {\"$bin\": \"AQID\"}}]", SW_ERANGE,
		  "media[0]: 'data' has 3 bytes, 2 x 1 x 3 is 6" },
		{ "[{\"type\": \"image\", \"w\": 1, \"h\": 1, \"c\": 2, \"data\": {\"$bin\": \"AQI=\"}}]", SW_ERANGE,
		  "'c' is 2" },
		{ "[{\"type\": \"image\", \"w\": 1, \"h\": 1, \"c\": 3, \"data\": \"abc\"}]", SW_ETYPE,
		  "'data' is a str, not bin" },
		{ "[{\"type\": \"image\", \"h\": 1, \"c\": 3, \"data\": {\"$bin\": \"AQID\"}}]", SW_ENOENT, "no 'w'" },
		{ "[{\"type\": \"image\", \"w\": 0, \"h\": 1, \"c\": 3, \"data\": {\"$bin\": \"AQID\"}}]", SW_ERANGE,
		  "'w' is not an integer from 1 to 65535" },
		{ "[{\"type\": \"image\", \"w\": 60000, \"h\": 60000, \"c\": 3, \"data\": {\"$bin\": \"AQID\"}}]",
		  SW_ETOOBIG, "limit of 67108864 pixels" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(json, sizeof json, "{\"media\": %s}", bad[i].media);
		r = json_rec(json);
		e = (sw_error){ 0 };
		ims = (sw_image *)1;
		rc = sw_sample_images(r, &ims, &n, &e);
		ok(rc == bad[i].code && ims == NULL && n == 0 && strstr(e.msg, bad[i].what), "%s: '%s'", bad[i].media,
		   e.msg);
		sw_rec_free(r);
	}
	/* a truncated file named in the message */
	char path[600];
	size_t fn = 0;
	uint8_t *png = fixture_("rgb.png", &fn);
	snprintf(path, sizeof path, "%s/half.png", tmp_dir_);
	tmp_put(path, png, fn / 2);
	free(png);
	snprintf(json, sizeof json, "{\"media\": [{\"type\": \"image\", \"w\": 1, \"h\": 1, \"c\": 1, \"data\": "
	         "{\"$bin\": \"AA==\"}}, {\"type\": \"image\", \"path\": \"%s\"}]}", path);
	r = json_rec(json);
	char want[700];
	snprintf(want, sizeof want, "media[1]: file '%s': truncated PNG", path);
	rc = sw_sample_images(r, &ims, &n, &e);
	ok(rc == SW_ETRUNC && !strcmp(e.msg, want), "'%s'", e.msg);
	sw_rec_free(r);
	int32_t ids[] = { 5, 32000, 7, 32000, 32000 };
	is_int(sw_image_count_tokens(ids, 5, 32000), 3, "three placeholders");
	is_int(sw_image_count_tokens(ids, 0, 32000), 0, "none in nothing");
}

int main(void)
{
	const char *top = getenv("SW_TOP");
	snprintf(fix_, sizeof fix_, "%s/tests/fixtures/image", top ? top : ".");
	if (tmp_open("image")) {
		printf("not ok 1 - cannot make a scratch directory\n");
		return 1;
	}
	test_decode_refs_();
	test_decode_errors_();
	test_write_png_();
	test_proc_errors_();
	test_proc_write_();
	test_media_();
	tmp_close();
	return tap_done();
}
