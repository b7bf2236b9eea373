/*
 * dist/dist_internal.h - what the unit tests (and later rooms) may reach in
 * the communicator without it being public.
 */
#ifndef SW_DIST_INTERNAL_H
#define SW_DIST_INTERNAL_H

#include <stddef.h>
#include "sw/dist.h"

/* Cap the bytes of one message (default 1 GiB), so that a test can drive
 * the chunked transfers with small vectors; 0 restores the default. */
void sw_dist_set_chunk(sw_comm *c, size_t bytes);

/*
 * Sum x[0..n), device memory of be, across the ranks in place: with the
 * backend's collective (NCCL on CUDA) on the device, joined at the first
 * call (a collective: every rank calls it); else through host (n floats of
 * the caller's) in rank order.  NULL or one rank: nothing to do.
 */
struct sw_backend;
int sw_dist_sum_device(sw_comm *c, const struct sw_backend *be, float *x, float *host, size_t n, sw_error *err);

#endif
