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

#endif
