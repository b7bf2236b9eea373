/*
 * model_io.h - what model.c and safetensors.c share and do not export: a
 * file written atomically (a temporary file in the same directory, fsync,
 * rename), and config.json written with the dtype of the weights beside it.
 */
#ifndef SW_MODEL_IO_H
#define SW_MODEL_IO_H

#include <stddef.h>
#include "sw/model.h"

typedef struct sw_afile {
	int fd;
	char *path;            /* the name it will have */
	char *tmp;             /* the name it has until committed */
	unsigned char *buf;    /* output buffer */
	size_t len, cap;
} sw_afile;

/* Create PATH.tmp.XXXXXX beside path; on failure *f is left closed. */
int sw_afile_open(sw_afile *f, const char *path, sw_error *err);
int sw_afile_write(sw_afile *f, const void *p, size_t n, sw_error *err);
/* Flush, fsync, close, rename over path, fsync the directory. */
int sw_afile_commit(sw_afile *f, sw_error *err);
/* Close and remove the temporary file; a no-op on a closed or committed one. */
void sw_afile_abort(sw_afile *f);

/* config.json with "torch_dtype" (NULL: none) beside the other fields. */
int sw_model_config_write_(const sw_model_config *c, const char *path, const char *torch_dtype,
                           sw_error *err);

/* The shortest decimal that reads back as x, with ".0" when it looks like an integer. */
void sw_fmt_float_(char *buf, size_t size, float x);

#endif
