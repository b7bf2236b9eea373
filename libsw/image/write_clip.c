/*
 * write_clip.c - sw_image_proc_write_clip (sw/image.h): a CLIPImageProcessor's
 * preprocessor_config.json as transformers writes it.  A file of its own so
 * that sw_model_save_vision_files (libsw/model), which calls it, does not
 * pull the PNG and JPEG decoders into a program linked statically.
 */
#include <stdio.h>
#include <stdlib.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "image/image_internal.h"

int sw_image_proc_write_clip(const char *model_dir, int size, sw_error *err)
{
	if (size < 1 || size > SW_IMAGE_PROC_MAX_SIDE)
		return sw_fail(err, SW_EINVAL, "image size %d is not from 1 to %d", size, SW_IMAGE_PROC_MAX_SIDE);
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/preprocessor_config.json", model_dir) >= sizeof path)
		return sw_fail(err, SW_EINVAL, "%s: path too long", model_dir);
	/* OpenAI CLIP's mean and std, as transformers writes them (OPENAI_CLIP_MEAN, _STD) */
	static const double mean[3] = { 0.48145466, 0.4578275, 0.40821073 };
	static const double std[3] = { 0.26862954, 0.26130258, 0.27577711 };
	yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
	yyjson_mut_val *o = d ? yyjson_mut_obj(d) : NULL;
	if (!o) {
		yyjson_mut_doc_free(d);
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	}
	yyjson_mut_doc_set_root(d, o);
	yyjson_mut_val *crop = yyjson_mut_obj(d), *sz = yyjson_mut_obj(d);
	yyjson_mut_obj_add_int(d, crop, "height", size);
	yyjson_mut_obj_add_int(d, crop, "width", size);
	yyjson_mut_obj_add_int(d, sz, "shortest_edge", size);
	/* keys in sorted order, as transformers writes them */
	yyjson_mut_obj_add_val(d, o, "crop_size", crop);
	yyjson_mut_obj_add_bool(d, o, "do_center_crop", true);
	yyjson_mut_obj_add_bool(d, o, "do_convert_rgb", true);
	yyjson_mut_obj_add_bool(d, o, "do_normalize", true);
	yyjson_mut_obj_add_bool(d, o, "do_rescale", true);
	yyjson_mut_obj_add_bool(d, o, "do_resize", true);
	yyjson_mut_obj_add_val(d, o, "image_mean", yyjson_mut_arr_with_real(d, mean, 3));
	yyjson_mut_obj_add_str(d, o, "image_processor_type", "CLIPImageProcessor");
	yyjson_mut_obj_add_val(d, o, "image_std", yyjson_mut_arr_with_real(d, std, 3));
	yyjson_mut_obj_add_int(d, o, "resample", 3);
	yyjson_mut_obj_add_real(d, o, "rescale_factor", 1.0 / 255);
	yyjson_mut_obj_add_val(d, o, "size", sz);
	size_t n = 0;
	char *text = yyjson_mut_write(d, YYJSON_WRITE_PRETTY_TWO_SPACES, &n);
	yyjson_mut_doc_free(d);
	if (!text)
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	sw_afile f;
	int rc;
	if ((rc = sw_afile_open(&f, path, err)) || (rc = sw_afile_write(&f, text, n, err)) ||
	    (rc = sw_afile_write(&f, "\n", 1, err)) || (rc = sw_afile_commit(&f, err)))
		sw_afile_abort(&f);
	free(text);
	return rc;
}
