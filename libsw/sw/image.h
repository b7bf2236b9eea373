/*
 * sw/image.h - images: PNG and JPEG decoded to 8-bit pixels (libpng,
 * libjpeg-turbo), PNG written, a model's image processor
 * (preprocessor_config.json) turning a picture into the pixel_values
 * transformers' CLIPImageProcessor or SiglipImageProcessor gives, and the
 * images of a sample's `media` array.
 *
 * Ownership: a filled sw_image owns its data (malloc'd) until
 * sw_image_release, which also accepts a zeroed or released image.
 * Functions return SW_OK or a negative SW_E* code and fill err when it is
 * not NULL; messages of sw_image_read and sw_image_write_png start with the
 * file's name, sw_image_decode's say what is wrong with the bytes.
 */
#ifndef SW_IMAGE_H
#define SW_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/* The largest image decoded: 2^26 pixels (8192 x 8192), each side at most 2^16 - 1. */
#define SW_IMAGE_MAX_PIXELS ((uint64_t)1 << 26)
#define SW_IMAGE_MAX_SIDE 65535

/* Interleaved 8-bit pixels, row-major: c = 1 (gray), 3 (RGB) or 4 (RGBA). */
typedef struct sw_image {
	int w, h, c;
	uint8_t *data;
} sw_image;

/*
 * Decode a PNG or a JPEG, told apart by their first bytes.  PNG: gray,
 * gray+alpha (to RGBA), RGB, RGBA, palette (to RGB, or RGBA with a tRNS
 * chunk), 1-16 bits, interlaced or not; 16-bit samples become 8-bit as
 * Pillow makes them (the high byte; 16-bit gray without alpha is clamped
 * to 255, as Pillow's I;16 -> L conversion does).  JPEG: baseline and
 * progressive, gray, YCbCr and RGB; CMYK and YCCK become RGB as Pillow's
 * convert("RGB") makes them (Adobe's inverted CMYK); the orientation of
 * its EXIF segment (2 to 8) turns the picture upright as Pillow's
 * ImageOps.exif_transpose does (transformers' load_image applies it; a
 * PNG's eXIf chunk is not read).  A truncated file,
 * bytes that are not an image or a picture larger than
 * SW_IMAGE_MAX_PIXELS are SW_ETRUNC, SW_EFORMAT and SW_ETOOBIG.
 */
int sw_image_decode(const void *buf, size_t n, sw_image *out, sw_error *err);
/* The file at path decoded ("PATH: truncated PNG"; a missing file is SW_EIO with sys_errno). */
int sw_image_read(const char *path, sw_image *out, sw_error *err);
/* im as an 8-bit PNG (gray, RGB or RGBA), written atomically. */
int sw_image_write_png(const char *path, const sw_image *im, sw_error *err);
void sw_image_release(sw_image *im);

/*
 * A model's image processor, read from MODEL_DIR/preprocessor_config.json:
 * CLIPImageProcessor or SiglipImageProcessor (the Fast and Pil names too).
 * Every field the processing uses must be there (do_resize, size,
 * resample, do_center_crop and crop_size where a crop is done, do_rescale,
 * rescale_factor, do_normalize, image_mean, image_std): none is defaulted.
 * size is {shortest_edge} or {height, width} (an integer: shortest_edge);
 * resample is 0 (NEAREST), 1 (LANCZOS), 2 (BILINEAR), 3 (BICUBIC), 4 (BOX)
 * or 5 (HAMMING), computed as Pillow 13 does on 8-bit pixels; others (6 and
 * 7, Pillow's MKS filters) are refused.
 * A configuration whose output size would depend on the picture (a
 * shortest-edge resize without a crop) is refused: a vision tower takes
 * one size.
 */
typedef struct sw_image_proc sw_image_proc;

int sw_image_proc_load(const char *model_dir, sw_image_proc **out, sw_error *err);
/* The same from the file's text; path names it in messages. */
int sw_image_proc_parse(const char *text, size_t len, const char *path, sw_image_proc **out,
                        sw_error *err);
void sw_image_proc_free(sw_image_proc *p);
/* The height and width of the pixel_values sw_image_preprocess writes. */
void sw_image_proc_size(const sw_image_proc *p, int *h, int *w);

/*
 * pixel_values as transformers' processor (its Pillow backend) gives them
 * for im: float [3][h][w] (CHW) after convert-to-RGB (alpha composited on
 * white, as Pillow's alpha_composite), resize, center crop, rescale and
 * normalise.  out holds 3 * h * w floats (sw_image_proc_size).
 */
int sw_image_preprocess(const sw_image_proc *p, const sw_image *im, float *out, sw_error *err);

/*
 * Write MODEL_DIR/preprocessor_config.json for a CLIPImageProcessor that
 * resizes the shortest edge to size with BICUBIC, center-crops size x
 * size, rescales by 1/255 and normalises with OpenAI CLIP's mean and std:
 * what transformers writes for CLIPImageProcessor(size=..., crop_size=...).
 */
int sw_image_proc_write_clip(const char *model_dir, int size, sw_error *err);

/*
 * The images of a sample, in the order of its `media` array: items
 * {type: "image", path} (a file, relative to the current directory) and
 * {type: "image", w, h, c, data: bin} (c = 1, 3 or 4, w * h * c bytes).
 * Items of other types (audio, video) are skipped.  No media field gives
 * no images.  *ims (malloc'd, free with sw_images_free) and *n are set on
 * success.  Messages name the item but not the record, as sample.h's:
 * "media[1]: file 'x.png': truncated PNG"; the caller prefixes
 * "FILE: record N: ".
 */
int sw_sample_images(sw_rec *r, sw_image **ims, size_t *n, sw_error *err);
void sw_images_free(sw_image *ims, size_t n);

/* How many of ids[0..n) are token: the image placeholders of a prompt. */
size_t sw_image_count_tokens(const int32_t *ids, size_t n, int32_t token);

#pragma GCC visibility pop

#endif
