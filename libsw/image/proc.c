/*
 * proc.c - a model's image processor (sw/image.h): preprocessor_config.json
 * read, and a picture turned into the pixel_values transformers' CLIP and
 * SigLIP processors give.
 *
 * transformers' Pillow backend converts to RGB, resizes with Pillow (13.0's
 * libImaging/Resample.c: 8-bit pixels, two separable passes with fixed-point
 * coefficients), crops with
 * numpy, rescales in float64 and casts to float32, and normalises in
 * float32.  Each step here is that step, operation for operation, so the
 * floats come out equal, not merely close.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "image/image_internal.h"

#define MAX_CONFIG_BYTES (1 << 20)
#define MAX_OUT_SIDE SW_IMAGE_PROC_MAX_SIDE
/* The resize's long side: only the crop's window of it is made, so this
 * bounds the arithmetic (positions in int), not the memory. */
#define MAX_RESIZED_SIDE (1 << 30)
#define PI_ 3.14159265358979323846

struct sw_image_proc {
	int shortest;          /* > 0: the shortest edge is resized to it; else to rh x rw */
	int rh, rw;
	int do_resize, resample;
	int do_crop, ch, cw;
	int do_rescale;
	double scale;
	int do_normalize;
	float mean[3], std[3];
	int convert_rgb;       /* 0: a picture that is not RGB is refused */
	int oh, ow;            /* the output's size */
};

/* ---- preprocessor_config.json ---- */

typedef struct cfg_ {
	const char *path;
	yyjson_val *root;
	sw_error *err;
} cfg_;

static int bad_(cfg_ *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad_(cfg_ *x, int code, const char *fmt, ...)
{
	char m[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	return sw_fail(x->err, code, "%s: %s", x->path, m);
}

static yyjson_val *need_(cfg_ *x, const char *key, int *rc)
{
	yyjson_val *v = yyjson_obj_get(x->root, key);
	if (!v || yyjson_is_null(v))
		*rc = bad_(x, SW_ENOENT, "no field '%s', which the image processor needs", key);
	return v && !yyjson_is_null(v) ? v : NULL;
}

static int bool_(cfg_ *x, const char *key, int *out)
{
	int rc = 0;
	yyjson_val *v = need_(x, key, &rc);
	if (rc)
		return rc;
	if (!yyjson_is_bool(v))
		return bad_(x, SW_ETYPE, "field '%s' is %s, not true or false", key, yyjson_get_type_desc(v));
	*out = yyjson_get_bool(v);
	return 0;
}

static int side_(cfg_ *x, const char *what, yyjson_val *v, int *out)
{
	if (!v || !yyjson_is_int(v))
		return bad_(x, v ? SW_ETYPE : SW_ENOENT, "%s is %s, not an integer", what,
		            v ? yyjson_get_type_desc(v) : "missing");
	int64_t i = yyjson_get_sint(v);
	if (yyjson_is_uint(v) && yyjson_get_uint(v) > MAX_OUT_SIDE)
		i = MAX_OUT_SIDE + 1;
	if (i < 1 || i > MAX_OUT_SIDE)
		return bad_(x, SW_ERANGE, "%s is %lld, not from 1 to %d", what, (long long)i, MAX_OUT_SIDE);
	*out = (int)i;
	return 0;
}

/* {height, width} (or an integer: a square); shortest may be NULL where that form is refused. */
static int size_(cfg_ *x, const char *key, int *shortest, int *h, int *w)
{
	int rc = 0;
	yyjson_val *v = need_(x, key, &rc);
	char what[64];
	if (rc)
		return rc;
	if (yyjson_is_int(v)) {
		if ((rc = side_(x, key, v, h)))
			return rc;
		if (shortest)
			*shortest = *h, *h = 0;
		else
			*w = *h;
		return 0;
	}
	if (!yyjson_is_obj(v))
		return bad_(x, SW_ETYPE, "field '%s' is %s, not an object", key, yyjson_get_type_desc(v));
	yyjson_val *se = yyjson_obj_get(v, "shortest_edge");
	if (se && !yyjson_is_null(se)) {
		yyjson_val *le = yyjson_obj_get(v, "longest_edge");
		if (!shortest || (le && !yyjson_is_null(le)))
			return bad_(x, SW_EINVAL, "field '%s': %s is not supported", key,
			            shortest ? "a longest_edge" : "a shortest_edge");
		snprintf(what, sizeof what, "field '%s.shortest_edge'", key);
		return side_(x, what, se, shortest);
	}
	if (shortest)
		*shortest = 0;
	snprintf(what, sizeof what, "field '%s.height'", key);
	if ((rc = side_(x, what, yyjson_obj_get(v, "height"), h)))
		return rc;
	snprintf(what, sizeof what, "field '%s.width'", key);
	return side_(x, what, yyjson_obj_get(v, "width"), w);
}

static int triple_(cfg_ *x, const char *key, float out[3], int positive)
{
	int rc = 0;
	yyjson_val *v = need_(x, key, &rc), *e;
	if (rc)
		return rc;
	double d[3];
	if (yyjson_is_num(v)) {
		d[0] = d[1] = d[2] = yyjson_get_num(v);
	} else if (yyjson_is_arr(v) && yyjson_arr_size(v) == 3) {
		size_t i, n;
		yyjson_arr_foreach(v, i, n, e) {
			if (!yyjson_is_num(e))
				return bad_(x, SW_ETYPE, "field '%s': element %zu is %s, not a number", key, i,
				            yyjson_get_type_desc(e));
			d[i] = yyjson_get_num(e);
		}
	} else {
		return bad_(x, SW_ETYPE, "field '%s' is %s, not 3 numbers (one a channel)", key,
		            yyjson_is_arr(v) ? "an array of another length" : yyjson_get_type_desc(v));
	}
	for (int i = 0; i < 3; i++) {
		if (!isfinite(d[i]) || (positive && !(d[i] > 0)))
			return bad_(x, SW_ERANGE, "field '%s': %g is not a %snumber", key, d[i],
			            positive ? "positive " : "finite ");
		out[i] = (float)d[i]; /* numpy's np.array(mean, dtype=float32) */
	}
	return 0;
}

static int parse_(cfg_ *x, sw_image_proc *p)
{
	int rc = 0, siglip;
	yyjson_val *t = yyjson_obj_get(x->root, "image_processor_type");
	if (!t || yyjson_is_null(t))
		t = yyjson_obj_get(x->root, "feature_extractor_type");
	if (!t || yyjson_is_null(t))
		return bad_(x, SW_ENOENT, "no field 'image_processor_type'");
	const char *type = yyjson_get_str(t);
	if (!type)
		return bad_(x, SW_ETYPE, "field 'image_processor_type' is %s, not a string",
		            yyjson_get_type_desc(t));
	static const char *const clip[] = { "CLIPImageProcessor", "CLIPImageProcessorFast",
		                            "CLIPImageProcessorPil", "CLIPFeatureExtractor" };
	static const char *const sig[] = { "SiglipImageProcessor", "SiglipImageProcessorFast",
		                           "SiglipImageProcessorPil" };
	int known = 0;
	for (size_t i = 0; i < 4; i++)
		known |= !strcmp(type, clip[i]);
	siglip = 0;
	for (size_t i = 0; i < 3; i++)
		siglip |= !strcmp(type, sig[i]);
	if (!known && !siglip)
		return bad_(x, SW_EINVAL, "image processor '%.60s' is not supported: CLIPImageProcessor or "
		                          "SiglipImageProcessor", type);
	yyjson_val *v = yyjson_obj_get(x->root, "do_pad");
	if (v && yyjson_is_true(v))
		return bad_(x, SW_EINVAL, "do_pad is not supported");
	v = yyjson_obj_get(x->root, "do_convert_rgb");
	if (v && !yyjson_is_null(v) && !yyjson_is_bool(v))
		return bad_(x, SW_ETYPE, "field 'do_convert_rgb' is %s, not true or false",
		            yyjson_get_type_desc(v));
	/* absent (older SigLIP configs): only RGB works in the tower, so convert */
	p->convert_rgb = !v || yyjson_is_null(v) || yyjson_is_true(v);
	if ((rc = bool_(x, "do_resize", &p->do_resize)))
		return rc;
	if (p->do_resize) {
		if ((rc = size_(x, "size", &p->shortest, &p->rh, &p->rw)))
			return rc;
		yyjson_val *r = need_(x, "resample", &rc);
		if (rc)
			return rc;
		if (!yyjson_is_int(r))
			return bad_(x, SW_ETYPE, "field 'resample' is %s, not an integer", yyjson_get_type_desc(r));
		int64_t k = yyjson_get_sint(r);
		if (k < 0 || k > 5 || (yyjson_is_uint(r) && yyjson_get_uint(r) > 5))
			return bad_(x, SW_EINVAL, "resample %lld is not supported: 0 (NEAREST), 1 (LANCZOS), "
			                          "2 (BILINEAR), 3 (BICUBIC), 4 (BOX) or 5 (HAMMING)", (long long)k);
		p->resample = (int)k;
	}
	v = yyjson_obj_get(x->root, "do_center_crop");
	if (siglip && (!v || yyjson_is_null(v)))
		p->do_crop = 0; /* SigLIP's processor has no crop */
	else if ((rc = bool_(x, "do_center_crop", &p->do_crop)))
		return rc;
	if (p->do_crop && (rc = size_(x, "crop_size", NULL, &p->ch, &p->cw)))
		return rc;
	if ((rc = bool_(x, "do_rescale", &p->do_rescale)))
		return rc;
	if (p->do_rescale) {
		v = need_(x, "rescale_factor", &rc);
		if (rc)
			return rc;
		if (!yyjson_is_num(v) || !isfinite(yyjson_get_num(v)) || !(yyjson_get_num(v) > 0))
			return bad_(x, SW_ETYPE, "field 'rescale_factor' is not a positive number");
		p->scale = yyjson_get_num(v);
	}
	if ((rc = bool_(x, "do_normalize", &p->do_normalize)))
		return rc;
	if (p->do_normalize &&
	    ((rc = triple_(x, "image_mean", p->mean, 0)) || (rc = triple_(x, "image_std", p->std, 1))))
		return rc;
	if (p->do_crop)
		p->oh = p->ch, p->ow = p->cw;
	else if (p->do_resize && !p->shortest)
		p->oh = p->rh, p->ow = p->rw;
	else
		return bad_(x, SW_EINVAL, "the output's size would depend on the picture's (%s without a "
		                          "center crop): a vision tower takes one size",
		            p->do_resize ? "a shortest_edge resize" : "no resize");
	return 0;
}

int sw_image_proc_parse(const char *text, size_t len, const char *path, sw_image_proc **out,
                        sw_error *err)
{
	*out = NULL;
	yyjson_read_err je;
	yyjson_doc *doc = yyjson_read_opts((char *)text, len, YYJSON_READ_NOFLAG, NULL, &je);
	if (!doc)
		return sw_fail(err, SW_EFORMAT, "%s: byte %zu: %s", path, je.pos, len ? je.msg : "empty file");
	cfg_ x = { path, yyjson_doc_get_root(doc), err };
	sw_image_proc *p = calloc(1, sizeof *p);
	int rc;
	if (!p)
		rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	else if (!yyjson_is_obj(x.root))
		rc = bad_(&x, SW_EFORMAT, "the document is %s, not an object", yyjson_get_type_desc(x.root));
	else if (!(rc = sw_json_refuse_twins(x.root, path, err)))
		rc = parse_(&x, p);
	yyjson_doc_free(doc);
	if (rc)
		free(p);
	else
		*out = p;
	return rc;
}

int sw_image_proc_load(const char *model_dir, sw_image_proc **out, sw_error *err)
{
	*out = NULL;
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/preprocessor_config.json", model_dir) >= sizeof path)
		return sw_fail(err, SW_EINVAL, "%s: path too long", model_dir);
	sw_buf b = { 0 };
	int rc = sw_image_slurp(path, MAX_CONFIG_BYTES, "a preprocessor_config.json", &b, err);
	if (!rc)
		rc = sw_image_proc_parse((const char *)b.p, b.len, path, out, err);
	sw_buf_release(&b);
	return rc;
}

void sw_image_proc_free(sw_image_proc *p)
{
	free(p);
}

void sw_image_proc_size(const sw_image_proc *p, int *h, int *w)
{
	*h = p->oh;
	*w = p->ow;
}

/* ---- Pillow's resampling (libImaging/Resample.c) on 8-bit RGB ---- */

static double bicubic_(double x)
{
	const double a = -0.5;
	if (x < 0.0)
		x = -x;
	if (x < 1.0)
		return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
	if (x < 2.0)
		return (((x - 5) * x + 8) * x - 4) * a;
	return 0.0;
}

static double bilinear_(double x)
{
	if (x < 0.0)
		x = -x;
	return x < 1.0 ? 1.0 - x : 0.0;
}

static double box_(double x)
{
	return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}

static double hamming_(double x)
{
	if (x < 0.0)
		x = -x;
	if (x == 0.0)
		return 1.0;
	if (x >= 1.0)
		return 0.0;
	x = x * PI_;
	return sin(x) / x * (0.54f + 0.46f * cos(x)); /* float constants, as Pillow has them */
}

static double sinc_(double x)
{
	if (x == 0.0)
		return 1.0;
	x = x * PI_;
	return sin(x) / x;
}

static double lanczos_(double x)
{
	return -3.0 <= x && x < 3.0 ? sinc_(x) * sinc_(x / 3) : 0.0;
}

#define PRECISION_BITS (32 - 8 - 2)

typedef struct coeffs_ {
	int ksize;
	int *bounds;  /* xmin, count for each output pixel */
	int32_t *k;   /* ksize fixed-point weights for each output pixel */
} coeffs_;

/* precompute_coeffs and normalize_coeffs_8bpc of Pillow, for the box [0,
 * in) resized to out, kept for the output pixels o0 .. o0 + n - 1 alone
 * (each pixel's weights depend on its own position only). */
static int coeffs_make_(coeffs_ *c, int in, int out, int resample, int o0, int n)
{
	double (*f)(double);
	double support;
	switch (resample) {
	case 1: f = lanczos_, support = 3.0; break;
	case 2: f = bilinear_, support = 1.0; break;
	case 4: f = box_, support = 0.5; break;
	case 5: f = hamming_, support = 1.0; break;
	default: f = bicubic_, support = 2.0; break;
	}
	double scale = (double)((float)in - 0.0f) / out, filterscale = scale < 1.0 ? 1.0 : scale;
	support *= filterscale;
	c->ksize = (int)ceil(support) * 2 + 1;
	c->bounds = malloc(sizeof *c->bounds * 2 * (size_t)n);
	c->k = malloc(sizeof *c->k * (size_t)c->ksize * n);
	double *kk = malloc(sizeof *kk * (size_t)c->ksize);
	if (!c->bounds || !c->k || !kk) {
		free(kk);
		return SW_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		int xx = o0 + i;
		double center = 0.0 + (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
		int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5), x;
		if (xmin < 0)
			xmin = 0;
		if (xmax > in)
			xmax = in;
		xmax -= xmin;
		for (x = 0; x < xmax; x++) {
			double w = f((x + xmin - center + 0.5) * ss);
			kk[x] = w;
			ww += w;
		}
		for (x = 0; x < xmax; x++)
			if (ww != 0.0)
				kk[x] /= ww;
		for (; x < c->ksize; x++)
			kk[x] = 0;
		for (x = 0; x < c->ksize; x++)
			c->k[(size_t)i * c->ksize + x] = kk[x] < 0 ? (int32_t)(-0.5 + kk[x] * (1 << PRECISION_BITS))
			                                           : (int32_t)(0.5 + kk[x] * (1 << PRECISION_BITS));
		c->bounds[2 * i] = xmin;
		c->bounds[2 * i + 1] = xmax;
	}
	free(kk);
	return 0;
}

static inline uint8_t clip8_(int64_t ss)
{
	if (ss < 0)
		return 0;
	ss >>= PRECISION_BITS;
	return (uint8_t)(ss > 255 ? 255 : ss);
}

/*
 * One pass over 3-channel rows: along x (step 3, rows of w pixels) or
 * along y.  src is h x w x 3; dst is h x ow x 3 (along x) or oh x w x 3.
 */
static void pass_x_(const uint8_t *src, int w, int h, uint8_t *dst, int ow, const coeffs_ *c)
{
	for (int y = 0; y < h; y++)
		for (int xx = 0; xx < ow; xx++) {
			const int32_t *k = c->k + (size_t)xx * c->ksize;
			int xmin = c->bounds[2 * xx], xmax = c->bounds[2 * xx + 1];
			const uint8_t *s = src + ((size_t)y * w + xmin) * 3;
			int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
			for (int x = 0; x < xmax; x++) {
				s0 += s[3 * x] * (int64_t)k[x];
				s1 += s[3 * x + 1] * (int64_t)k[x];
				s2 += s[3 * x + 2] * (int64_t)k[x];
			}
			uint8_t *d = dst + ((size_t)y * ow + xx) * 3;
			d[0] = clip8_(s0), d[1] = clip8_(s1), d[2] = clip8_(s2);
		}
}

static void pass_y_(const uint8_t *src, int w, uint8_t *dst, int oh, const coeffs_ *c)
{
	for (int yy = 0; yy < oh; yy++) {
		const int32_t *k = c->k + (size_t)yy * c->ksize;
		int ymin = c->bounds[2 * yy], ymax = c->bounds[2 * yy + 1];
		for (int x = 0; x < w * 3; x++) {
			int64_t ss = 1 << (PRECISION_BITS - 1);
			for (int y = 0; y < ymax; y++)
				ss += src[(size_t)(y + ymin) * w * 3 + x] * (int64_t)k[y];
			dst[(size_t)yy * w * 3 + x] = clip8_(ss);
		}
	}
}

/*
 * NEAREST: Pillow's affine scaling (Geometry.c, ImagingScaleAffine): the
 * source position of each output pixel's centre, accumulated in double
 * from one pixel to the next as Pillow does, truncated.  The output is
 * ow x oh; only the window x0 .. x0 + nx, y0 .. y0 + ny is written (nx x ny).
 */
static void nearest_(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, int x0,
                     int nx, int y0, int ny)
{
	double ax = (double)((float)w - 0.0f) / ow, ay = (double)((float)h - 0.0f) / oh;
	double yo = 0.0 + ay * 0.5;
	for (int y = 0; y < y0 + ny; y++, yo += ay) {
		if (y < y0)
			continue; /* the sum goes on: Pillow's positions are accumulated */
		int yi = yo < 0.0 ? -1 : (int)yo;
		double xo = 0.0 + ax * 0.5;
		for (int x = 0; x < x0 + nx; x++, xo += ax) {
			if (x < x0)
				continue;
			int xi = xo < 0.0 ? -1 : (int)xo;
			uint8_t *d = dst + ((size_t)(y - y0) * nx + (x - x0)) * 3;
			if (yi >= 0 && yi < h && xi >= 0 && xi < w)
				memcpy(d, src + ((size_t)yi * w + xi) * 3, 3);
			else
				memset(d, 0, 3); /* Pillow fills what maps outside with zeros */
		}
	}
}

/*
 * Pillow's Image.resize((ow, oh), resample) of an RGB picture, of which
 * only the window x0 .. x0 + nx, y0 .. y0 + ny is made: *out is nx x ny,
 * malloc'd.  Every output pixel is computed from its own weights, so the
 * window's pixels are the whole resize's; a center crop needs no more, and
 * a long thin picture resized to a long side of 100,000 costs its crop.
 */
static int resize_(const uint8_t *src, int w, int h, int ow, int oh, int resample, int x0, int nx,
                   int y0, int ny, uint8_t **out)
{
	int need_x = ow != w, need_y = oh != h, rc = 0;
	coeffs_ cx = { 0 }, cy = { 0 };
	uint8_t *tmp = NULL, *dst = NULL;
	size_t n = (size_t)nx * ny * 3;
	if (!(dst = malloc(n)))
		return SW_ENOMEM;
	if (!need_x && !need_y) {
		for (int y = 0; y < ny; y++)
			memcpy(dst + (size_t)y * nx * 3, src + ((size_t)(y0 + y) * w + x0) * 3, (size_t)nx * 3);
		*out = dst;
		return 0;
	}
	if (resample == 0) {
		nearest_(src, w, h, dst, ow, oh, x0, nx, y0, ny);
		*out = dst;
		return 0;
	}
	/* A pass that does not resize still takes the window: weights of one
	 * pixel, 1.0, where the output is the input. */
	if ((rc = coeffs_make_(&cx, w, ow, need_x ? resample : 4, x0, nx)) ||
	    (rc = coeffs_make_(&cy, h, oh, need_y ? resample : 4, y0, ny)))
		goto done;
	/* Pillow 13 runs the vertical pass first when the height shrinks by more
	 * than twice what the width does; the order changes the rounding */
	int x_first = !(h - oh > 0 && h - oh > (w - ow) * 2);
	if (x_first) {
		/* the window's columns of every source row, then its rows */
		if (!(tmp = malloc((size_t)nx * h * 3))) {
			rc = SW_ENOMEM;
			goto done;
		}
		pass_x_(src, w, h, tmp, nx, &cx);
		pass_y_(tmp, nx, dst, ny, &cy);
	} else {
		if (!(tmp = malloc((size_t)w * ny * 3))) {
			rc = SW_ENOMEM;
			goto done;
		}
		pass_y_(src, w, tmp, ny, &cy);
		pass_x_(tmp, w, ny, dst, nx, &cx);
	}
done:
	free(cx.bounds), free(cx.k), free(cy.bounds), free(cy.k), free(tmp);
	if (rc)
		free(dst);
	else
		*out = dst;
	return rc;
}

/* ---- the processing ---- */

/* Pillow's convert("RGB"); with alpha, alpha_composite over opaque white first. */
static int to_rgb_(const sw_image *im, uint8_t **out)
{
	size_t n = (size_t)im->w * im->h;
	uint8_t *d = malloc(n * 3 + 1);
	if (!d)
		return SW_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *s = im->data + i * im->c;
		if (im->c == 1) {
			d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = s[0];
		} else if (im->c == 3 || s[3] == 0) {
			for (int k = 0; k < 3; k++)
				d[3 * i + k] = im->c == 3 ? s[k] : 255;
		} else {
			/* AlphaComposite.c with dst white and opaque: coef1 = a * 128, coef2 = (255 - a) * 128 */
			uint32_t a = s[3], c1 = a * 255 * 255 * 128 / (255 * 255), c2 = 255 * 128 - c1;
			for (int k = 0; k < 3; k++) {
				uint32_t t = s[k] * c1 + 255 * c2 + (0x80 << 7);
				d[3 * i + k] = (uint8_t)((((t >> 8) + t) >> 8) >> 7);
			}
		}
	}
	*out = d;
	return 0;
}

int sw_image_preprocess(const sw_image_proc *p, const sw_image *im, float *out, sw_error *err)
{
	if (!im->data || im->w < 1 || im->h < 1 || (im->c != 1 && im->c != 3 && im->c != 4))
		return sw_fail(err, SW_EINVAL, "not a picture: %d x %d x %d", im->w, im->h, im->c);
	if ((uint64_t)im->w * im->h > SW_IMAGE_MAX_PIXELS)
		return sw_fail(err, SW_ETOOBIG, "a picture of %d x %d pixels: larger than the limit of %llu "
		               "pixels", im->w, im->h, (unsigned long long)SW_IMAGE_MAX_PIXELS);
	if (im->c != 3 && !p->convert_rgb)
		return sw_fail(err, SW_EINVAL, "a picture of %d channels, and the processor's do_convert_rgb "
		               "is false: give RGB", im->c);
	uint8_t *rgb = NULL, *rs = NULL;
	int w = im->w, h = im->h;
	if (to_rgb_(im, &rgb))
		return sw_fail(err, SW_ENOMEM, "out of memory for a %d x %d picture", w, h);
	/* The resize's size (ow x oh), and the window of it the center crop
	 * keeps (x0, y0, nx x ny): only that window is made. */
	int ow = w, oh = h;
	if (p->do_resize) {
		oh = p->rh, ow = p->rw;
		if (p->shortest) {
			/* transformers' get_resize_output_image_size: the long side truncated */
			int s = w <= h ? w : h, l = w <= h ? h : w;
			double nl = (double)((int64_t)p->shortest * l) / s;
			if (nl < 1 || nl > MAX_RESIZED_SIDE) {
				free(rgb);
				return sw_fail(err, SW_ERANGE, "a picture of %d x %d pixels resizes to a side of %.0f, "
				               "over %d", w, h, nl, MAX_RESIZED_SIDE);
			}
			oh = w <= h ? (int)nl : p->shortest;
			ow = w <= h ? p->shortest : (int)nl;
		}
	}
	/* numpy's center crop: where the picture is smaller, zero padding around it */
	int top = 0, left = 0;
	if (p->do_crop) {
		top = oh >= p->oh ? (oh - p->oh) / 2 : -((p->oh - oh + 1) / 2);
		left = ow >= p->ow ? (ow - p->ow) / 2 : -((p->ow - ow + 1) / 2);
	}
	int y0 = top > 0 ? top : 0, x0 = left > 0 ? left : 0;
	/* (numpy's centring overlaps the picture: nx, ny >= 1) */
	int ny = (oh < top + p->oh ? oh : top + p->oh) - y0, nx = (ow < left + p->ow ? ow : left + p->ow) - x0;
	/* without a resize ow x oh is w x h: resize_ copies the window */
	int rc = resize_(rgb, w, h, ow, oh, p->resample, x0, nx, y0, ny, &rs);
	free(rgb);
	if (rc)
		return sw_fail(err, SW_ENOMEM, "out of memory resizing a %d x %d picture", w, h);
	/* rs holds the window: the crop's pixel (y, x) is rs's (y + top - y0, x + left - x0) */
	rgb = rs, top -= y0, left -= x0, w = nx, h = ny;
	for (int k = 0; k < 3; k++)
		for (int y = 0; y < p->oh; y++)
			for (int x = 0; x < p->ow; x++) {
				int sy = y + top, sx = x + left;
				uint8_t u = sy >= 0 && sy < h && sx >= 0 && sx < w ? rgb[((size_t)sy * w + sx) * 3 + k] : 0;
				/* rescale: float64 product cast to float32; normalise: float32 */
				float v = p->do_rescale ? (float)((double)u * p->scale) : (float)u;
				if (p->do_normalize)
					v = (v - p->mean[k]) / p->std[k];
				out[((size_t)k * p->oh + y) * p->ow + x] = v;
			}
	free(rgb);
	return SW_OK;
}
