/*
 * media.c - the images of a sample's `media` array (sw/image.h): files read
 * and decoded, inline pixels checked and copied.  Other media types (audio,
 * video) are left to their own readers, so this one skips them.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "image/image_internal.h"

#define MAX_PATH_LEN 4096

static bool is_(const sw_val *k, const char *s)
{
	size_t n = strlen(s);
	return k->type == SW_T_STR && k->v.str.len == n && !memcmp(k->v.str.ptr, s, n);
}

void sw_images_free(sw_image *ims, size_t n)
{
	for (size_t i = 0; ims && i < n; i++)
		sw_image_release(&ims[i]);
	free(ims);
}

size_t sw_image_count_tokens(const int32_t *ids, size_t n, int32_t token)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ids[i] == token;
	return c;
}

/* A non-negative integer field of an inline image, at most max. */
static int dim_(const sw_val *v, const char *key, size_t i, long max, int *out, sw_error *err)
{
	if (!v)
		return sw_fail(err, SW_ENOENT, "media[%zu]: an inline image has no '%s'", i, key);
	if (v->type != SW_T_UINT || v->v.u < 1 || v->v.u > (uint64_t)max)
		return sw_fail(err, SW_ERANGE, "media[%zu]: '%s' is not an integer from 1 to %ld", i, key, max);
	*out = (int)v->v.u;
	return 0;
}

/* One {type: "image", ...} item, whose fields are given. */
static int image_(size_t i, const sw_val *path, const sw_val *w, const sw_val *h, const sw_val *c,
                  const sw_val *data, sw_image *im, sw_error *err)
{
	if (path && data)
		return sw_fail(err, SW_EINVAL, "media[%zu]: an image has both 'path' and 'data'", i);
	if (path) {
		if (path->type != SW_T_STR)
			return sw_fail(err, SW_ETYPE, "media[%zu]: 'path' is a %s, not a string", i,
			               sw_type_name(path->type));
		if (path->v.str.len == 0 || path->v.str.len >= MAX_PATH_LEN ||
		    memchr(path->v.str.ptr, 0, path->v.str.len))
			return sw_fail(err, SW_EINVAL, "media[%zu]: 'path' is not a file name", i);
		char name[MAX_PATH_LEN];
		memcpy(name, path->v.str.ptr, path->v.str.len);
		name[path->v.str.len] = 0;
		sw_error e = { 0 };
		sw_image_read(name, im, &e);
		if (!e.code)
			return 0;
		/* sw_image_read's message starts with the file's name: say it once, quoted */
		const char *why = e.msg;
		size_t nl = strlen(name);
		if (!strncmp(why, name, nl) && !strncmp(why + nl, ": ", 2))
			why += nl + 2;
		sw_fail(err, e.code, "media[%zu]: file '%s': %s", i, name, why);
		if (err)
			err->sys_errno = e.sys_errno;
		return e.code;
	}
	if (!data)
		return sw_fail(err, SW_EINVAL, "media[%zu]: an image has neither 'path' nor 'data'", i);
	int iw, ih, ic, rc;
	if ((rc = dim_(w, "w", i, SW_IMAGE_MAX_SIDE, &iw, err)) ||
	    (rc = dim_(h, "h", i, SW_IMAGE_MAX_SIDE, &ih, err)) || (rc = dim_(c, "c", i, 4, &ic, err)))
		return rc;
	if (ic == 2)
		return sw_fail(err, SW_ERANGE, "media[%zu]: 'c' is 2: 1 (gray), 3 (RGB) or 4 (RGBA)", i);
	if ((uint64_t)iw * ih > SW_IMAGE_MAX_PIXELS)
		return sw_fail(err, SW_ETOOBIG, "media[%zu]: %d x %d pixels: larger than the limit of %llu pixels",
		               i, iw, ih, (unsigned long long)SW_IMAGE_MAX_PIXELS);
	if (data->type != SW_T_BIN)
		return sw_fail(err, SW_ETYPE, "media[%zu]: 'data' is a %s, not bin", i, sw_type_name(data->type));
	size_t want = (size_t)iw * ih * ic;
	if (data->v.str.len != want)
		return sw_fail(err, SW_ERANGE, "media[%zu]: 'data' has %u bytes, %d x %d x %d is %zu", i,
		               data->v.str.len, iw, ih, ic, want);
	if ((rc = sw_image_alloc(im, iw, ih, ic, err)))
		return rc;
	memcpy(im->data, data->v.str.ptr, want);
	return 0;
}

int sw_sample_images(sw_rec *r, sw_image **ims, size_t *n, sw_error *err)
{
	sw_val v, m, k, x;
	*ims = NULL;
	*n = 0;
	if (sw_rec_get(r, "media", &v))
		return 0;
	if (v.type != SW_T_ARRAY)
		return sw_fail(err, SW_ETYPE, "field 'media' is a %s, not an array", sw_type_name(v.type));
	sw_image *out = calloc(v.v.count ? v.v.count : 1, sizeof *out);
	if (!out)
		return sw_fail(err, SW_ENOMEM, "field 'media': out of memory");
	size_t got = 0, i = 0;
	int rc = 0, more = 0;
	sw_iter it;
	sw_iter_init(&it, &v);
	for (; !rc && (more = sw_iter_next(&it, &m)) == 1; i++) {
		if (m.type != SW_T_MAP) {
			rc = sw_fail(err, SW_ETYPE, "media[%zu] is a %s, not a map", i, sw_type_name(m.type));
			break;
		}
		sw_val f[6]; /* type, path, w, h, c, data */
		bool has[6] = { 0 };
		static const char *const keys[6] = { "type", "path", "w", "h", "c", "data" };
		sw_iter mi;
		sw_iter_init(&mi, &m);
		while (sw_iter_next(&mi, &k) == 1 && sw_iter_next(&mi, &x) == 1)
			for (int j = 0; j < 6; j++)
				if (is_(&k, keys[j]))
					f[j] = x, has[j] = true;
		if (!has[0]) {
			rc = sw_fail(err, SW_EINVAL, "media[%zu] has no 'type'", i);
			break;
		}
		if (f[0].type != SW_T_STR) {
			rc = sw_fail(err, SW_ETYPE, "media[%zu]: 'type' is a %s, not a string", i,
			             sw_type_name(f[0].type));
			break;
		}
		if (!is_(&f[0], "image"))
			continue;
		rc = image_(i, has[1] ? &f[1] : NULL, has[2] ? &f[2] : NULL, has[3] ? &f[3] : NULL,
		            has[4] ? &f[4] : NULL, has[5] ? &f[5] : NULL, &out[got], err);
		if (!rc)
			got++;
	}
	if (!rc && more < 0)
		rc = sw_fail(err, SW_EFORMAT, "field 'media' is corrupt");
	if (rc) {
		sw_images_free(out, got);
		return rc;
	}
	*ims = out;
	*n = got;
	return 0;
}
