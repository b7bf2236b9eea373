/*
 * run_internal.h - what the files of the run room (experiment, tally,
 * pipeline, metrics, checkpoints) share and do not export: paths under a
 * run directory, whole-file copies and writes through the atomic file,
 * the monotonic clock.
 */
#ifndef SW_RUN_INTERNAL_H
#define SW_RUN_INTERNAL_H

#include <stddef.h>
#include "common/internal.h"
#include "sw/run.h"

/* Paths in a run are at most this long (a longer one is SW_ERANGE). */
#define SW_RUN_PATH_MAX 4096

/* snprintf into buf: 0, or SW_ERANGE in err when the path does not fit. */
int sw_run_path(char *buf, size_t size, sw_error *err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Write data to path atomically (sw_afile). */
int sw_run_put_file(const char *path, const void *data, size_t n, sw_error *err);
/* Copy a file, atomically at the destination; err names the file that failed. */
int sw_run_copy_file(const char *from, const char *to, sw_error *err);
/* Remove a directory tree we made (checkpoint temporaries); errors are ignored. */
void sw_run_rmtree(const char *path);
/* Monotonic seconds. */
double sw_run_now(void);

#endif
