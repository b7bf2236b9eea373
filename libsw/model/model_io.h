/*
 * model_io.h - what model.c and safetensors.c share and do not export:
 * config.json written with the dtype of the weights beside it, and the
 * safetensors reader.
 */
#ifndef SW_MODEL_IO_H
#define SW_MODEL_IO_H

#include <stddef.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "sw/model.h"

/* config.json from memory; path only names it in messages. */
int sw_model_config_parse(const char *text, size_t len, const char *path, sw_model_config *c, sw_error *err);
/* The text of config.json, appended to b; path only names it in messages. */
int sw_model_config_text(const sw_model_config *c, const char *path, const char *torch_dtype, sw_buf *b,
                          sw_error *err);
/* config.json with "torch_dtype" (NULL: none) beside the other fields. */
int sw_model_config_write(const sw_model_config *c, const char *path, const char *torch_dtype,
                           sw_error *err);

/* sw_model_new_on() without zeroing the arena, for a caller that fills all of it. */
sw_model *sw_model_new_uninit(const sw_backend *be, const sw_model_config *c, sw_error *err);

/*
 * The host-side model functions (load, save, init_random) reach a device
 * model's arena in place where the backend's memory is host memory
 * (host_view), else tensor by tensor through a buffer of the largest
 * tensor's size, so a device model never costs a whole host copy.
 */
size_t sw_model_max_numel(const sw_model *m);

/* The shortest decimal that reads back as x, with ".0" when it looks like an integer. */
void sw_fmt_float(char *buf, size_t size, float x);

/*
 * A safetensors file read in place: the header parsed and checked (dtypes,
 * shapes, offsets inside the data, no two tensors overlapping), the data
 * converted to float32 on request.  open_mem_ borrows p; open_file_ maps
 * the file and unmaps it on close_.  path is only for messages.
 */
typedef struct sw_st_tensor {
	char *name;
	sw_dtype dtype;
	int ndim;
	int64_t shape[8];
	uint64_t numel;
	uint64_t begin, end;   /* byte offsets into the data, after the header */
} sw_st_tensor;

typedef struct sw_st_file {
	char *path;
	const unsigned char *map;  /* the whole file */
	size_t size;
	int mapped;
	const unsigned char *data; /* after the header */
	size_t data_size;
	sw_st_tensor *t;
	size_t n;
} sw_st_file;

#define SW_ST_MAX_HEADER (100u << 20) /* as the safetensors library limits it */

int sw_st_open_mem(sw_st_file *f, const void *p, size_t size, const char *path, sw_error *err);
int sw_st_open_file(sw_st_file *f, const char *path, sw_error *err);
/* Convert tensor i to float32 into dst (numel floats); SW_EFORMAT on NaN or Inf. */
int sw_st_read_f32(const sw_st_file *f, size_t i, float *dst, sw_error *err);
void sw_st_close(sw_st_file *f);
/* Every tensor of m from f, as sw_model_load_weights() reads one file. */
int sw_st_load_into(sw_model *m, const sw_st_file *f, sw_error *err);

#endif
