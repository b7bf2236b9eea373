/*
 * image_internal.h - what the files of libsw/image share and do not export.
 */
#ifndef SW_IMAGE_INTERNAL_H
#define SW_IMAGE_INTERNAL_H

#include "common/internal.h"
#include "sw/image.h"

/* The largest side an image processor may ask for (proc.c, write_clip.c). */
#define SW_IMAGE_PROC_MAX_SIDE 8192

/* sw_image_decode with a smaller pixel limit (the fuzz targets keep their allocations small). */
int sw_image_decode_limit(const void *buf, size_t n, uint64_t max_pixels, sw_image *out,
                          sw_error *err);

/* Make im an image of w x h x c uninitialised pixels; SW_ENOMEM says so. */
int sw_image_alloc(sw_image *im, int w, int h, int c, sw_error *err);

/* The file at path into b (empty), at most max bytes ("PATH: larger than N KB; not WHAT"). */
int sw_image_slurp(const char *path, size_t max, const char *what, sw_buf *b, sw_error *err);

#endif
