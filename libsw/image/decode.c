/*
 * decode.c - PNG (libpng) and JPEG (libjpeg-turbo) to 8-bit pixels, and
 * PNG out (sw/image.h).
 *
 * Both libraries report errors by longjmp.  Everything a decode allocates
 * hangs off a context struct that outlives the setjmp, never off a local
 * variable changed after it, so the error path frees it all.  What the
 * pixels become follows Pillow (what transformers' processors are fed), so
 * that a picture read here and one read by PIL.Image.open give the model
 * the same numbers.
 */
#include <errno.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <png.h>
#include <jpeglib.h>
#include <jerror.h>
#include "common/internal.h"
#include "image/image_internal.h"

#define MAX_FILE_BYTES ((size_t)1 << 28) /* 256 MB: more than any picture within the pixel limit */

int sw_image_alloc(sw_image *im, int w, int h, int c, sw_error *err)
{
	im->w = im->h = im->c = 0;
	im->data = malloc((size_t)w * (size_t)h * (size_t)c + 1);
	if (!im->data)
		return sw_fail(err, SW_ENOMEM, "out of memory for a %d x %d picture", w, h);
	im->w = w, im->h = h, im->c = c;
	return SW_OK;
}

void sw_image_release(sw_image *im)
{
	if (!im)
		return;
	free(im->data);
	*im = (sw_image){ 0 };
}

static int too_big_(uint32_t w, uint32_t h, uint64_t max_pixels, const char *kind, sw_error *err)
{
	if (w == 0 || h == 0)
		return sw_fail(err, SW_EFORMAT, "%s of %u x %u pixels: empty", kind, w, h);
	if (w > SW_IMAGE_MAX_SIDE || h > SW_IMAGE_MAX_SIDE || (uint64_t)w * h > max_pixels)
		return sw_fail(err, SW_ETOOBIG, "%s of %u x %u pixels: larger than the limit of %llu pixels",
		               kind, w, h, (unsigned long long)max_pixels);
	return SW_OK;
}

/* ---- PNG ---- */

typedef struct png_ctx_ {
	const uint8_t *p;
	size_t n, pos;
	int truncated;
	char msg[160];
	png_bytep *rows;
	uint8_t *wide;  /* 16-bit gray, read as it is and clamped after */
	sw_image im;
	int rc;
	int oom;        /* a chunk could not be kept: out of memory */
	int pixels;     /* png_read_info has returned: chunks now come after the image data */
	int has_exif[2];
	sw_buf exif[2]; /* the last eXIf chunk before the image data, the last after it */
} png_ctx_;

static void png_err_(png_structp png, png_const_charp msg)
{
	png_ctx_ *x = png_get_error_ptr(png);
	if (!x->msg[0])
		snprintf(x->msg, sizeof x->msg, "%s", msg);
	png_longjmp(png, 1);
}

static void png_warn_(png_structp png, png_const_charp msg)
{
	(void)png, (void)msg; /* an ancillary chunk's trouble: the pixels are still right */
}

static void png_read_(png_structp png, png_bytep out, size_t len)
{
	png_ctx_ *x = png_get_io_ptr(png);
	if (len > x->n - x->pos) {
		x->truncated = 1;
		png_error(png, "truncated PNG");
	}
	memcpy(out, x->p + x->pos, len);
	x->pos += len;
}

/* eXIf chunks, handed over as unknown ones: libpng's own handler keeps the
 * first and refuses a payload with the "Exif\0\0" prefix, where Pillow keeps
 * the last and strips it. */
static int png_chunk_(png_structp png, png_unknown_chunkp ch)
{
	png_ctx_ *x = png_get_user_chunk_ptr(png);
	if (memcmp(ch->name, "eXIf", 4))
		return 0;
	sw_buf *b = &x->exif[x->pixels];
	b->len = 0;
	if (ch->size && sw_buf_put(b, ch->data, ch->size)) {
		x->oom = 1;
		png_error(png, "out of memory for an eXIf chunk");
	}
	x->has_exif[x->pixels] = 1;
	return 1;
}

static int png_orientation_(png_ctx_ *x, png_structp png, png_infop info, png_infop end, int *o, sw_error *err);
static int exif_transpose_(sw_image *im, int o, sw_error *err);

static int png_decode_(const uint8_t *buf, size_t n, uint64_t max_pixels, sw_image *out, sw_error *err)
{
	/* on the heap: what libpng's longjmp leaves behind must not be a local changed after setjmp */
	png_ctx_ *x = calloc(1, sizeof *x);
	if (!x)
		return sw_fail(err, SW_ENOMEM, "out of memory for a PNG decoder");
	x->p = buf, x->n = n;
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, x, png_err_, png_warn_);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	png_infop end = info ? png_create_info_struct(png) : NULL;
	if (!end) {
		png_destroy_read_struct(&png, &info, NULL);
		free(x);
		return sw_fail(err, SW_ENOMEM, "out of memory for a PNG decoder");
	}
	if (setjmp(png_jmpbuf(png))) {
		if (x->oom)
			x->rc = sw_fail(err, SW_ENOMEM, "out of memory for a PNG's EXIF data");
		else if (x->truncated || !strcmp(x->msg, "Not enough image data"))
			x->rc = sw_fail(err, SW_ETRUNC, "truncated PNG");
		else
			x->rc = sw_fail(err, SW_EFORMAT, "bad PNG: %s", x->msg);
		goto done;
	}
	png_set_read_fn(png, x, png_read_);
	/* the pixel limit below says more than libpng's "exceeds user limit" */
	png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
	png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_ALWAYS, (png_const_bytep) "eXIf", 1);
	png_set_read_user_chunk_fn(png, x, png_chunk_);
	png_read_info(png, info);
	x->pixels = 1;
	png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
	if ((x->rc = too_big_(w, h, max_pixels, "a PNG", err)))
		goto done;
	int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
	int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
	/* Pillow keeps 16-bit gray as I;16 and its conversion to 8 bits clamps: read it whole */
	int gray16 = ct == PNG_COLOR_TYPE_GRAY && depth == 16 && !trns;
	if (ct == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(png);
	if (ct == PNG_COLOR_TYPE_GRAY && depth < 8)
		png_set_expand_gray_1_2_4_to_8(png);
	if (trns)
		png_set_tRNS_to_alpha(png);
	if (depth == 16 && !gray16)
		png_set_strip_16(png); /* the high byte, as Pillow's RGB;16B and friends */
	if (ct == PNG_COLOR_TYPE_GRAY_ALPHA || (ct == PNG_COLOR_TYPE_GRAY && trns))
		png_set_gray_to_rgb(png); /* gray with alpha: Pillow reads it as LA, converts to RGBA */
	png_set_interlace_handling(png);
	png_read_update_info(png, info);
	int c = png_get_channels(png, info);
	size_t rowbytes = png_get_rowbytes(png, info);
	if ((c != 1 && c != 3 && c != 4) || rowbytes != (size_t)w * c * (gray16 ? 2 : 1)) {
		x->rc = sw_fail(err, SW_EFORMAT, "bad PNG: %d channels, rows of %zu bytes", c, rowbytes);
		goto done;
	}
	if ((x->rc = sw_image_alloc(&x->im, (int)w, (int)h, c, err)))
		goto done;
	uint8_t *pix = x->im.data;
	if (gray16 && !(pix = x->wide = malloc((size_t)w * h * 2))) {
		x->rc = sw_fail(err, SW_ENOMEM, "out of memory for a %u x %u PNG", w, h);
		goto done;
	}
	if (!(x->rows = malloc(sizeof *x->rows * h))) {
		x->rc = sw_fail(err, SW_ENOMEM, "out of memory for a %u x %u PNG", w, h);
		goto done;
	}
	for (png_uint_32 y = 0; y < h; y++)
		x->rows[y] = pix + (size_t)y * rowbytes;
	png_read_image(png, x->rows);
	png_read_end(png, end);
	if (gray16)
		for (size_t i = 0; i < (size_t)w * h; i++)
			x->im.data[i] = x->wide[2 * i] ? 255 : x->wide[2 * i + 1];
	int orientation = 1;
	if (!(x->rc = png_orientation_(x, png, info, end, &orientation, err)))
		x->rc = exif_transpose_(&x->im, orientation, err);
done:
	png_destroy_read_struct(&png, &info, &end);
	int rc = x->rc;
	if (rc)
		sw_image_release(&x->im);
	else
		*out = x->im;
	free(x->rows);
	free(x->wide);
	sw_buf_release(&x->exif[0]);
	sw_buf_release(&x->exif[1]);
	free(x);
	return rc;
}

/* ---- EXIF orientation ---- */

static unsigned exif_u16_(const uint8_t *p, int le)
{
	return le ? (unsigned)p[0] | (unsigned)p[1] << 8 : (unsigned)p[0] << 8 | p[1];
}

static uint32_t exif_u32_(const uint8_t *p, int le)
{
	return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
		  : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The Orientation tag (0x0112) of IFD0 of a TIFF header and what follows (EXIF
 * data without its "Exif\0\0" prefix): 1 when there is none or it cannot be
 * read, -1 when t does not start with one of the headers Pillow's
 * Exif.load takes (big- or little-endian, 42 in either byte order), and -2
 * for BigTIFF's, which is not read here. */
static int tiff_orientation_(const uint8_t *t, size_t tn)
{
	if (tn < 8)
		return -1;
	int le = t[0] == 'I' && t[1] == 'I';
	if (!le && !(t[0] == 'M' && t[1] == 'M'))
		return -1;
	if (le ? t[2] == 43 && t[3] == 0 : t[2] == 0 && t[3] == 43)
		return -2;
	if (!((t[2] == 0 && t[3] == 42) || (t[2] == 42 && t[3] == 0)))
		return -1;
	uint32_t ifd = exif_u32_(t + 4, le);
	if (ifd > tn || tn - ifd < 2)
		return 1;
	unsigned count = exif_u16_(t + ifd, le);
	for (unsigned i = 0; i < count; i++) {
		size_t e = (size_t)ifd + 2 + (size_t)i * 12;
		if (e + 12 > tn)
			return 1;
		if (exif_u16_(t + e, le) != 0x0112)
			continue;
		unsigned type = exif_u16_(t + e + 2, le);
		if (exif_u32_(t + e + 4, le) != 1) /* Pillow reads a tuple then: no orientation */
			return 1;
		/* a value of one item sits left-aligned in the entry's 4 bytes */
		switch (type) {
		case 1: /* BYTE */
			return t[e + 8];
		case 3: /* SHORT */
			return (int)exif_u16_(t + e + 8, le);
		case 4: /* LONG */
			return exif_u32_(t + e + 8, le) > 8 ? 1 : (int)exif_u32_(t + e + 8, le);
		default:
			return 1;
		}
	}
	return 1;
}

/* The orientation of an APP1 "Exif\0\0" segment, 1 when there is none or it
 * cannot be read: Pillow's getexif() on a JPEG reads the first such segment,
 * and a damaged one gives no orientation. */
static int exif_orientation_(const uint8_t *s, size_t n)
{
	if (n < 6 || memcmp(s, "Exif\0\0", 6))
		return 1;
	int o = tiff_orientation_(s + 6, n - 6);
	return o < 0 ? 1 : o;
}

/* The orientation of a PNG's EXIF data as Pillow's exif_transpose finds it
 * (exif_transpose loads the whole file first, then Image.getexif and
 * Exif.load, in Pillow 13): the last eXIf chunk, after the image data or
 * before it, else the last text chunk (tEXt, zTXt or iTXt) "Raw profile type
 * exif" (ImageMagick's: three lines of header, then hexadecimal), after the
 * image data or before it; one or two "Exif\0\0" prefixes
 * stripped; none, or empty data, is orientation 1.  Data that is not TIFF,
 * and text that is not hexadecimal, make Pillow raise, and are errors here. */
static int png_text_exif_(png_structp png, png_infop info, sw_buf *b, int *found, sw_error *err)
{
	png_textp text = NULL;
	int n = 0;
	png_get_text(png, info, &text, &n);
	const png_text *t = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(text[i].key, "Raw profile type exif"))
			t = &text[i];
	if (!t)
		return SW_OK;
	*found = 1;
	b->len = 0;
	const char *s = t->text;
	size_t len = t->text_length ? t->text_length : (t->itxt_length ? t->itxt_length : strlen(s));
	const char *e = s + len;
	for (int nl = 0; nl < 3 && s < e; s++) /* what follows the third line break */
		nl += *s == '\n';
	int hi = -1;
	for (; s < e; s++) {
		int c = (unsigned char)*s, v;
		if (c == '\n') /* the lines are joined as they are */
			continue;
		if (hi < 0 && (c == ' ' || (c >= '\t' && c <= '\r'))) /* bytes.fromhex: spaces between bytes */
			continue;
		if (c >= '0' && c <= '9')
			v = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v = (c | 0x20) - 'a' + 10;
		else
			return sw_fail(err, SW_EFORMAT, "bad PNG: its \"Raw profile type exif\" text is not hexadecimal");
		if (hi < 0) {
			hi = v;
			continue;
		}
		uint8_t byte = (uint8_t)(hi << 4 | v);
		hi = -1;
		if (sw_buf_put(b, &byte, 1))
			return sw_fail(err, SW_ENOMEM, "out of memory for a PNG's EXIF data");
	}
	if (hi >= 0)
		return sw_fail(err, SW_EFORMAT, "bad PNG: its \"Raw profile type exif\" text is not hexadecimal");
	return SW_OK;
}

static int png_orientation_(png_ctx_ *x, png_structp png, png_infop info, png_infop end, int *o, sw_error *err)
{
	*o = 1;
	sw_buf text = { 0 };
	const sw_buf *b = x->has_exif[1] ? &x->exif[1] : x->has_exif[0] ? &x->exif[0] : NULL;
	const char *what = "its eXIf chunk";
	int rc = SW_OK, found = 0;
	if (!b) {
		what = "its \"Raw profile type exif\" text";
		if (!(rc = png_text_exif_(png, end, &text, &found, err)) && !found)
			rc = png_text_exif_(png, info, &text, &found, err);
		b = found ? &text : NULL;
	}
	if (!rc && b) {
		const uint8_t *p = b->p;
		size_t n = b->len;
		for (int k = 0; k < 2 && n >= 6 && !memcmp(p, "Exif\0\0", 6); k++)
			p += 6, n -= 6;
		int t = n ? tiff_orientation_(p, n) : 1;
		if (t == -1)
			rc = sw_fail(err, SW_EFORMAT, "bad PNG: %s is not EXIF data (no TIFF header)", what);
		else if (t == -2)
			rc = sw_fail(err, SW_EFORMAT, "PNG: %s is EXIF data in BigTIFF form, which is not read", what);
		else
			*o = t;
	}
	sw_buf_release(&text);
	return rc;
}

/* im turned upright as Pillow's ImageOps.exif_transpose does for orientation o
 * (transformers' load_image applies it): 2 mirror, 3 rotate 180, 4 flip,
 * 5 transpose, 6 rotate 270 (clockwise 90), 7 transverse, 8 rotate 90. */
static int exif_transpose_(sw_image *im, int o, sw_error *err)
{
	if (o < 2 || o > 8)
		return SW_OK;
	const int W = im->w, H = im->h, c = im->c, swap = o >= 5;
	sw_image t;
	int rc = sw_image_alloc(&t, swap ? H : W, swap ? W : H, c, err);
	if (rc)
		return rc;
	for (int y = 0; y < t.h; y++)
		for (int x = 0; x < t.w; x++) {
			int sx, sy; /* the source pixel of output (x, y) */
			switch (o) {
			case 2: sx = W - 1 - x, sy = y; break;
			case 3: sx = W - 1 - x, sy = H - 1 - y; break;
			case 4: sx = x, sy = H - 1 - y; break;
			case 5: sx = y, sy = x; break;
			case 6: sx = y, sy = H - 1 - x; break;
			case 7: sx = W - 1 - y, sy = H - 1 - x; break;
			default: sx = W - 1 - y, sy = x; break;
			}
			memcpy(t.data + ((size_t)y * t.w + x) * c, im->data + ((size_t)sy * W + sx) * c, (size_t)c);
		}
	sw_image_release(im);
	*im = t;
	return SW_OK;
}

/* ---- JPEG ---- */

typedef struct jpg_ctx_ {
	struct jpeg_decompress_struct ci;
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int truncated, rc;
	char msg[JMSG_LENGTH_MAX];
	uint8_t *row;
	sw_image im;
} jpg_ctx_;

static void jpg_exit_(j_common_ptr ci)
{
	jpg_ctx_ *x = (jpg_ctx_ *)((char *)ci->err - offsetof(jpg_ctx_, pub));
	if (!x->msg[0])
		ci->err->format_message(ci, x->msg);
	longjmp(x->jb, 1);
}

/* Warnings: a file that ends early is an error (Pillow says "image file is
 * truncated"), the rest (extraneous bytes and such) decode as Pillow does. */
static void jpg_message_(j_common_ptr ci, int level)
{
	jpg_ctx_ *x = (jpg_ctx_ *)((char *)ci->err - offsetof(jpg_ctx_, pub));
	if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) {
		x->truncated = 1;
		longjmp(x->jb, 1);
	}
}

static inline uint8_t muldiv255_(int a, int b)
{
	int t = a * b + 128;
	return (uint8_t)(((t >> 8) + t) >> 8);
}

static int jpg_decode_(const uint8_t *buf, size_t n, uint64_t max_pixels, sw_image *out, sw_error *err)
{
	/* on the heap, as the PNG decoder's context, for the longjmp */
	jpg_ctx_ *x = calloc(1, sizeof *x);
	if (!x)
		return sw_fail(err, SW_ENOMEM, "out of memory for a JPEG decoder");
	struct jpeg_decompress_struct *ci = &x->ci;
	ci->err = jpeg_std_error(&x->pub);
	x->pub.error_exit = jpg_exit_;
	x->pub.emit_message = jpg_message_;
	if (setjmp(x->jb)) {
		if (x->truncated)
			x->rc = sw_fail(err, SW_ETRUNC, "truncated JPEG");
		else
			x->rc = sw_fail(err, SW_EFORMAT, "bad JPEG: %s", x->msg);
		goto done;
	}
	jpeg_create_decompress(ci);
	jpeg_mem_src(ci, buf, n);
	jpeg_save_markers(ci, JPEG_APP0 + 1, 0xffff); /* EXIF, for the orientation */
	jpeg_read_header(ci, TRUE);
	if ((x->rc = too_big_(ci->image_width, ci->image_height, max_pixels, "a JPEG", err)))
		goto done;
	int c, cmyk = 0;
	switch (ci->jpeg_color_space) {
	case JCS_GRAYSCALE:
		ci->out_color_space = JCS_GRAYSCALE, c = 1;
		break;
	case JCS_CMYK:
	case JCS_YCCK:
		ci->out_color_space = JCS_CMYK, c = 3, cmyk = 1;
		break;
	default:
		ci->out_color_space = JCS_RGB, c = 3;
		break;
	}
	jpeg_start_decompress(ci);
	if (ci->output_components != (cmyk ? 4 : c)) {
		x->rc = sw_fail(err, SW_EFORMAT, "bad JPEG: %d components", ci->output_components);
		goto done;
	}
	if ((x->rc = sw_image_alloc(&x->im, (int)ci->output_width, (int)ci->output_height, c, err)))
		goto done;
	if (cmyk && !(x->row = malloc((size_t)ci->output_width * 4))) {
		x->rc = sw_fail(err, SW_ENOMEM, "out of memory for a JPEG row");
		goto done;
	}
	while (ci->output_scanline < ci->output_height) {
		uint8_t *dst = x->im.data + (size_t)ci->output_scanline * x->im.w * c;
		JSAMPROW row = cmyk ? x->row : dst;
		if (jpeg_read_scanlines(ci, &row, 1) != 1) {
			x->rc = sw_fail(err, SW_ETRUNC, "truncated JPEG");
			goto done;
		}
		/* Pillow reads a CMYK JPEG with Adobe's inverted polarity (CMYK;I) and
		 * converts to RGB with its cmyk2rgb: channel = k' - k' * c / 255 rounded */
		for (int i = 0; cmyk && i < x->im.w; i++) {
			const uint8_t *q = x->row + 4 * i;
			int nk = q[3];
			for (int k = 0; k < 3; k++) {
				int v = nk - muldiv255_(255 - q[k], nk);
				dst[3 * i + k] = (uint8_t)(v < 0 ? 0 : v);
			}
		}
	}
	int orientation = 1;
	for (jpeg_saved_marker_ptr m = ci->marker_list; m; m = m->next)
		if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6)) {
			orientation = exif_orientation_(m->data, m->data_length);
			break;
		}
	jpeg_finish_decompress(ci);
	x->rc = exif_transpose_(&x->im, orientation, err);
done:
	jpeg_destroy_decompress(ci);
	int rc = x->rc;
	if (rc)
		sw_image_release(&x->im);
	else
		*out = x->im;
	free(x->row);
	free(x);
	return rc;
}

/* ---- by magic bytes ---- */

int sw_image_decode_limit(const void *buf, size_t n, uint64_t max_pixels, sw_image *out, sw_error *err)
{
	static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	const uint8_t *p = buf;
	*out = (sw_image){ 0 };
	if (n >= 8 && !memcmp(p, png_sig, 8))
		return png_decode_(p, n, max_pixels, out, err);
	if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
		return jpg_decode_(p, n, max_pixels, out, err);
	if (n < 8 && n > 0 && (!memcmp(p, png_sig, n) || (p[0] == 0xff && (n < 2 || p[1] == 0xd8))))
		return sw_fail(err, SW_ETRUNC, "truncated image: %zu bytes", n);
	if (n == 0)
		return sw_fail(err, SW_EFORMAT, "not an image: empty");
	return sw_fail(err, SW_EFORMAT, "not an image: neither PNG nor JPEG");
}

int sw_image_decode(const void *buf, size_t n, sw_image *out, sw_error *err)
{
	return sw_image_decode_limit(buf, n, SW_IMAGE_MAX_PIXELS, out, err);
}

int sw_image_slurp(const char *path, size_t max, const char *what, sw_buf *b, sw_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		sw_fail(err, SW_EIO, "%s: %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	uint8_t chunk[65536];
	size_t got;
	int rc = SW_OK;
	while (!rc && (got = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if (b->len + got > max)
			rc = sw_fail(err, SW_ETOOBIG, "%s: larger than %zu KB; not %s", path, max >> 10, what);
		else if (sw_buf_put(b, chunk, got))
			rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	}
	if (!rc && ferror(f)) {
		int e = errno;
		rc = sw_fail(err, SW_EIO, "%s: read error: %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
	}
	fclose(f);
	if (rc)
		sw_buf_release(b);
	return rc;
}

int sw_image_read(const char *path, sw_image *out, sw_error *err)
{
	*out = (sw_image){ 0 };
	sw_buf b = { 0 };
	int rc = sw_image_slurp(path, MAX_FILE_BYTES, "a picture", &b, err);
	sw_error e2 = { 0 };
	if (!rc && (rc = sw_image_decode(b.p, b.len, out, &e2)))
		sw_fail(err, rc, "%s: %s", path, e2.msg);
	sw_buf_release(&b);
	return rc;
}

/* ---- PNG out, through libpng's simplified API (no longjmp reaches us) ---- */

int sw_image_write_png(const char *path, const sw_image *im, sw_error *err)
{
	if (!im->data || im->w <= 0 || im->h <= 0 || (im->c != 1 && im->c != 3 && im->c != 4))
		return sw_fail(err, SW_EINVAL, "%s: not an image to write (%d x %d x %d)", path, im->w, im->h,
		               im->c);
	png_image pi = { .version = PNG_IMAGE_VERSION, .width = (png_uint_32)im->w,
	                 .height = (png_uint_32)im->h };
	pi.format = im->c == 1 ? PNG_FORMAT_GRAY : im->c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
	png_alloc_size_t len = 0;
	if (!png_image_write_to_memory(&pi, NULL, &len, 0, im->data, 0, NULL))
		return sw_fail(err, SW_EINVAL, "%s: cannot encode a PNG: %s", path, pi.message);
	void *mem = malloc(len);
	if (!mem)
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	int rc = SW_OK;
	if (!png_image_write_to_memory(&pi, mem, &len, 0, im->data, 0, NULL))
		rc = sw_fail(err, SW_EINVAL, "%s: cannot encode a PNG: %s", path, pi.message);
	sw_afile f;
	if (!rc && ((rc = sw_afile_open(&f, path, err)) || (rc = sw_afile_write(&f, mem, len, err)) ||
	            (rc = sw_afile_commit(&f, err))))
		sw_afile_abort(&f);
	free(mem);
	return rc;
}
