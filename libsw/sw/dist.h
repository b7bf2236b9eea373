/*
 * sw/dist.h - the ranks of a data-parallel job: who am I, how many are we,
 * and the few collectives the programs need (sums of gradients, a verdict
 * every rank agrees on, a broadcast, a gather of records to rank 0).
 *
 * MPI is a build-time option and a run-time choice.  sw_comm_open joins the
 * ranks only when an MPI launcher (mpirun, srun) started the process with
 * more than one rank; otherwise it hands back NULL, and every call here
 * takes NULL as the one-rank job: rank 0 of 1, collectives are copies or
 * no-ops.  A program therefore has one code path, and without a launcher it
 * never touches MPI.
 *
 * The sums do not use MPI_Allreduce, whose order of additions depends on the
 * algorithm Open MPI picks: each element is summed in rank order by the rank
 * that owns its shard, then copied to every rank, so the result is the same
 * bits on every rank and from run to run at a fixed number of ranks.
 *
 * Ownership: the sw_comm is the caller's from open to close; buffers passed
 * in stay the caller's; sw_comm_gather_bytes mallocs *all for the caller.
 */
#ifndef SW_DIST_H
#define SW_DIST_H

#include <stddef.h>
#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_comm sw_comm;

/*
 * Join the ranks when an MPI launcher started this process with more than
 * one rank (Open MPI's OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE, PMIx's
 * PMIX_RANK, Slurm's SLURM_STEP_NUM_TASKS under srun); else *out = NULL,
 * one process.  Launched with several ranks by a libsw built without MPI:
 * SW_EINVAL saying so (each rank would otherwise redo the whole job).
 */
int sw_comm_open(sw_comm **out, sw_error *err);
/* 1 when a launcher (mpirun, srun) started this process, with any number of
 * ranks: its standard streams are then the launcher's, not a terminal's. */
int sw_comm_launched(void);
/* Leave the ranks (MPI_Finalize); NULL is a no-op. */
void sw_comm_close(sw_comm *c);
int sw_comm_rank(const sw_comm *c);
int sw_comm_size(const sw_comm *c);
/* 1 when libsw was built with MPI. */
int sw_comm_have_mpi(void);

/*
 * Collective: every rank passes its own rc and err; every rank returns the
 * rc of the lowest rank whose rc < 0, with err set to that rank's error
 * and its message prefixed "rank R: " (SW_OK, err untouched, when no rank
 * failed).  With NULL, rc itself.  A failure inside the collective is
 * returned in its place.
 */
int sw_comm_agree(sw_comm *c, int rc, sw_error *err);

/*
 * Sum x[0..n) across the ranks in place; every rank gets the same bits,
 * each element summed in rank order ((x_0 + x_1) + x_2) + ...  n may
 * exceed INT_MAX (the transfers are chunked).
 */
int sw_comm_allreduce_sum_f32(sw_comm *c, float *x, size_t n, sw_error *err);
int sw_comm_allreduce_sum_f64(sw_comm *c, double *x, size_t n, sw_error *err);
/* The element-wise maximum, in place, on every rank. */
int sw_comm_allreduce_max_f64(sw_comm *c, double *x, size_t n, sw_error *err);

/*
 * The shard of an n-element vector that rank r owns: [*off, *off + *len),
 * contiguous, in rank order, the first n % size ranks one longer.
 */
void sw_comm_shard(const sw_comm *c, int r, size_t n, size_t *off, size_t *len);
/*
 * The two halves of the allreduce, for an optimizer that keeps only its
 * own shard (ZeRO-1).  reduce_scatter: afterwards this rank's shard of x
 * holds the rank-order sum (the same bits sw_comm_allreduce_sum_f32 gives),
 * the rest of x is unchanged.  allgather: every rank's shard of x is
 * copied from the rank that owns it.
 */
int sw_comm_reduce_scatter_sum_f32(sw_comm *c, float *x, size_t n, sw_error *err);
int sw_comm_allgather_f32(sw_comm *c, float *x, size_t n, sw_error *err);

/* Copy root's buf[0..n) to every rank. */
int sw_comm_bcast(sw_comm *c, void *buf, size_t n, int root, sw_error *err);

/*
 * root receives every rank's bytes concatenated in rank order: *all is
 * malloc'd (the caller frees it; non-NULL even when empty), len[r] the
 * bytes of rank r (len has sw_comm_size entries).  Other ranks get
 * *all = NULL and may pass len = NULL.  Sizes may differ per rank and
 * exceed 2 GiB.
 */
int sw_comm_gather_bytes(sw_comm *c, const void *mine, size_t n, int root, void **all,
                         size_t *len, sw_error *err);

int sw_comm_barrier(sw_comm *c, sw_error *err);
/* A barrier for a wait that may be long (a rank reading input the others
 * wait on): the waiting ranks sleep between looks instead of spinning. */
int sw_comm_barrier_idle(sw_comm *c, sw_error *err);

/*
 * Seconds this rank has spent in the collectives above since open: waiting
 * for the others and exchanging with them (0 for NULL).  A step's wall time
 * less what this grew by is the rank's time at work.
 */
double sw_comm_seconds(const sw_comm *c);

#pragma GCC visibility pop

#endif
