/*
 * run_internal.h - what the files of the run room (experiment, tally,
 * pipeline, metrics, checkpoints) share and do not export: paths under a
 * run directory, whole-file copies and writes through the atomic file,
 * the monotonic clock, the processes /proc lists.
 */
#ifndef SW_RUN_INTERNAL_H
#define SW_RUN_INTERNAL_H

#include <stddef.h>
#include <sys/types.h>
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
/* A size for a message into b: GB with digits + 1 decimals from 1e9 bytes, else MB with digits
 * ("1.08 GB", "538.1 MB" at 1; "1.1 GB", "538 MB" at 0). */
const char *sw_run_size(double bytes, int digits, char b[32]);

/* ---- procs.c: the processes /proc lists (async-signal-safe, no malloc) ---- */

typedef struct {
	pid_t pid, ppid, pgrp;
	char state; /* 'R', 'S', ...; 'Z' for one that ended and is not collected */
} sw_proc_info;
/* fn for each process until it returns nonzero (returned); 0 when all were seen, -1 when /proc cannot be read. */
int sw_procs_each(int (*fn)(const sw_proc_info *p, void *arg), void *arg);
/* v in decimal into out (room for 21 bytes), NUL-terminated; its length.  Async-signal-safe. */
size_t sw_run_utoa(char *out, unsigned long v);
/* Whether a process of group pgid still runs (a zombie has ended). */
int sw_procs_group_alive(pid_t pgid);
/*
 * Kill and collect each child of this process in a process group other
 * than its own, and what their deaths reparent to it, until none is left:
 * a subreaper's way to end what a stage started in a group of its own (an
 * MPI launcher's ranks).  How many it collected.
 */
int sw_procs_collect_orphans(void);

#endif
