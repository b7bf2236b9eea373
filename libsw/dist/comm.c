/*
 * dist/comm.c - the ranks of a data-parallel job over MPI (sw/dist.h).
 *
 * Built with -DSW_HAVE_MPI where the Makefile found mpicc; without it every
 * call is the one-rank case and sw_comm_open refuses a multi-rank launch.
 * MPI_Init is called only when a launcher's environment says there are
 * several ranks, so a program started by hand never loads MPI's runtime.
 *
 * The sums are done by hand on point-to-point messages rather than with
 * MPI_Allreduce, whose order of additions (and so the rounding) depends on
 * the algorithm Open MPI picks for the message size and the number of
 * ranks.  Here each rank owns a contiguous shard, receives every rank's
 * slice of it, adds them in rank order, and sends the sum back out: a
 * reduce-scatter and an all-gather, each moving (size-1)/size of the vector
 * per rank, as a ring does.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "sw/dist.h"
#include "dist/dist_internal.h"
#ifdef SW_HAVE_MPI
#include <mpi.h>
#endif

struct sw_comm {
	int rank, size;
	size_t chunk; /* most bytes in one message */
	const struct sw_backend *coll; /* the backend whose NCCL ranks this job joined (sw_dist_sum_device) */
	double secs;  /* spent in the collectives (sw_comm_seconds) */
#ifdef SW_HAVE_MPI
	MPI_Comm comm;
#endif
};

/* The launcher's word on the number of ranks: 0 when no launcher started
 * us, -1 when one did but does not say how many (PMIx). */
static long launched_size_(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return strtol(v, NULL, 10);
	}
	if (getenv("PMIX_RANK"))
		return -1;
	return 0;
}

/* What a collective moves and how it combines: the element size follows. */
typedef enum { KIND_F32_SUM_, KIND_F64_SUM_, KIND_F64_MAX_ } kind_;

static size_t kind_size_(kind_ k)
{
	return k == KIND_F32_SUM_ ? sizeof(float) : sizeof(double);
}

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A collective's result rc, the time since t0 added to c's.  t0 is taken in a statement of
 * its own before the collective (the order in which arguments are evaluated is unspecified). */
static int timed_(sw_comm *c, double t0, int rc)
{
	if (c)
		c->secs += now_() - t0;
	return rc;
}

double sw_comm_seconds(const sw_comm *c)
{
	return c ? c->secs : 0;
}

int sw_comm_launched(void)
{
	return launched_size_() != 0;
}

int sw_comm_have_mpi(void)
{
#ifdef SW_HAVE_MPI
	return 1;
#else
	return 0;
#endif
}

/* Largest message: counts are ints in MPI, and a gigabyte per message keeps
 * the chunks far from INT_MAX bytes. */
#define CHUNK_BYTES_ ((size_t)1 << 30)

void sw_dist_set_chunk(sw_comm *c, size_t bytes)
{
	if (c)
		c->chunk = bytes && bytes < CHUNK_BYTES_ ? bytes : CHUNK_BYTES_;
}

int sw_comm_rank(const sw_comm *c) { return c ? c->rank : 0; }
int sw_comm_size(const sw_comm *c) { return c ? c->size : 1; }

void sw_comm_shard(const sw_comm *c, int r, size_t n, size_t *off, size_t *len)
{
	size_t size = (size_t)sw_comm_size(c), q = n / size, rem = n % size, ur = (size_t)r;
	*off = ur * q + (ur < rem ? ur : rem);
	*len = q + (ur < rem);
}

#ifndef SW_HAVE_MPI

int sw_comm_open(sw_comm **out, sw_error *err)
{
	*out = NULL;
	long n = launched_size_();
	if (n > 1 || n < 0)
		return sw_fail(err, SW_EINVAL, "started by an MPI launcher as one of several ranks, "
		                               "but libsw was built without MPI (install libopenmpi-dev "
		                               "and rebuild)");
	return SW_OK;
}

void sw_comm_close(sw_comm *c) { free(c); }

/* Never reached: without MPI every communicator is NULL. */
static int reduce_scatter_(sw_comm *c, void *x, size_t n, kind_ k, sw_error *err)
{
	(void)c, (void)x, (void)n, (void)k, (void)kind_size_;
	return sw_fail(err, SW_EINVAL, "libsw was built without MPI");
}
#define allgather_ reduce_scatter_
#define agree_(c, rc, err) ((void)(c), (void)(err), (rc))

#else

enum { TAG_RS_ = 101, TAG_AG_, TAG_GATHER_ };

static int mpi_fail_(sw_error *err, int rc, const char *what)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", rc);
	return sw_fail(err, SW_EIO, "mpi: %s: %s", what, s);
}

int sw_comm_open(sw_comm **out, sw_error *err)
{
	*out = NULL;
	long n = launched_size_();
	if (n == 0 || n == 1)
		return SW_OK;
	int inited = 0, rc;
	MPI_Initialized(&inited);
	if (!inited && (rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS)
		return sw_fail(err, SW_EIO, "mpi: MPI_Init failed (error %d)", rc);
	sw_comm *c = calloc(1, sizeof *c);
	if (!c)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	c->chunk = CHUNK_BYTES_;
	/* Errors come back as codes, so that the library can report them. */
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm)) != MPI_SUCCESS) {
		free(c);
		return mpi_fail_(err, rc, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(c->comm, &c->rank);
	MPI_Comm_size(c->comm, &c->size);
	*out = c;
	return SW_OK;
}

void sw_comm_close(sw_comm *c)
{
	if (!c)
		return;
	MPI_Comm_free(&c->comm);
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
	free(c);
}

static int agree_(sw_comm *c, int rc, sw_error *err)
{
	int *rcs = malloc((size_t)c->size * sizeof *rcs), m;
	if (!rcs)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if ((m = MPI_Allgather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, c->comm)) != MPI_SUCCESS) {
		free(rcs);
		return mpi_fail_(err, m, "MPI_Allgather");
	}
	int bad = -1;
	for (int r = 0; r < c->size && bad < 0; r++)
		if (rcs[r] < 0)
			bad = r;
	int brc = bad >= 0 ? rcs[bad] : SW_OK;
	free(rcs);
	if (bad < 0)
		return SW_OK;
	sw_error e;
	if (c->rank == bad)
		e = *err;
	else
		memset(&e, 0, sizeof e);
	if ((m = MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, bad, c->comm)) != MPI_SUCCESS)
		return mpi_fail_(err, m, "MPI_Bcast");
	/* The prefix goes in front; a message at the limit loses its tail. */
	char pre[24];
	int k = snprintf(pre, sizeof pre, "rank %d: ", bad);
	size_t keep = sizeof e.msg - 1 - (size_t)k;
	e.msg[sizeof e.msg - 1] = 0;
	if (strlen(e.msg) > keep)
		e.msg[keep] = 0;
	memmove(e.msg + k, e.msg, strlen(e.msg) + 1);
	memcpy(e.msg, pre, (size_t)k);
	*err = e;
	return brc;
}

/* My shard's piece of round `at` summed in rank order from the slices in
 * tmp (rank r's at tmp + r * piece elements), into dst. */
static void sum_(kind_ kind, const char *tmp, size_t piece, int size, size_t mine, char *dst)
{
	size_t esz = kind_size_(kind);
	for (size_t i = 0; i < mine; i++) {
		if (kind == KIND_F32_SUM_) {
			float s = ((const float *)(const void *)tmp)[i];
			for (int r = 1; r < size; r++)
				s += ((const float *)(const void *)(tmp + (size_t)r * piece * esz))[i];
			((float *)(void *)dst)[i] = s;
		} else {
			double s = ((const double *)(const void *)tmp)[i];
			for (int r = 1; r < size; r++) {
				double y = ((const double *)(const void *)(tmp + (size_t)r * piece * esz))[i];
				s = kind == KIND_F64_MAX_ ? (y > s ? y : s) : s + y;
			}
			((double *)(void *)dst)[i] = s;
		}
	}
}

/*
 * The two halves of the allreduce, in rounds of at most c->chunk bytes per
 * message.  Reduce-scatter (gather = 0): each rank sends its slice of every
 * other rank's shard and receives every rank's slice of its own, then sums
 * them in rank order into its shard.  All-gather (gather = 1): each rank
 * sends its shard to every other and receives theirs in place.
 */
static int exchange_(sw_comm *c, void *x, size_t n, kind_ kind, int gather, sw_error *err)
{
	size_t esz = kind_size_(kind);
	MPI_Datatype t = kind == KIND_F32_SUM_ ? MPI_FLOAT : MPI_DOUBLE;
	size_t myoff, mylen, maxlen, per = c->chunk / esz ? c->chunk / esz : 1;
	sw_comm_shard(c, c->rank, n, &myoff, &mylen);
	sw_comm_shard(c, 0, n, &(size_t){0}, &maxlen);
	size_t piece = maxlen < per ? maxlen : per;
	char *tmp = gather ? NULL : malloc(piece * esz * (size_t)c->size + 1);
	MPI_Request *req = malloc(2 * (size_t)c->size * sizeof *req);
	if ((!gather && !tmp) || !req) {
		free(tmp);
		free(req);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	char *base = x;
	int rc = SW_OK, tag = gather ? TAG_AG_ : TAG_RS_;
	for (size_t at = 0; at < maxlen && rc == SW_OK; at += per) {
		int nreq = 0, m = MPI_SUCCESS;
		size_t mine = at < mylen ? (mylen - at < per ? mylen - at : per) : 0;
		char *my = base + (myoff + at) * esz;
		for (int r = 0; r < c->size && m == MPI_SUCCESS; r++) {
			if (r == c->rank)
				continue;
			size_t off, len;
			sw_comm_shard(c, r, n, &off, &len);
			size_t k = at < len ? (len - at < per ? len - at : per) : 0;
			char *theirs = base + (off + at) * esz;
			if (gather)
				m = MPI_Irecv(theirs, (int)k, t, r, tag, c->comm, &req[nreq++]);
			else
				m = MPI_Irecv(tmp + (size_t)r * piece * esz, (int)mine, t, r, tag, c->comm, &req[nreq++]);
			if (m == MPI_SUCCESS)
				m = MPI_Isend(gather ? my : theirs, (int)(gather ? mine : k), t, r, tag, c->comm,
				              &req[nreq++]);
		}
		if (m == MPI_SUCCESS)
			m = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
		if (m != MPI_SUCCESS)
			rc = mpi_fail_(err, m, gather ? "all-gather" : "reduce-scatter");
		else if (!gather) {
			/* my own slice joins in its rank's place */
			memcpy(tmp + (size_t)c->rank * piece * esz, my, mine * esz);
			sum_(kind, tmp, piece, c->size, mine, my);
		}
	}
	free(tmp);
	free(req);
	return rc;
}
#define reduce_scatter_(c, x, n, kind, err) exchange_(c, x, n, kind, 0, err)
#define allgather_(c, x, n, kind, err) exchange_(c, x, n, kind, 1, err)

#endif /* SW_HAVE_MPI */

int sw_comm_agree(sw_comm *c, int rc, sw_error *err)
{
	if (!c)
		return rc;
	double t0 = now_();
	return timed_(c, t0, agree_(c, rc, err));
}

int sw_comm_reduce_scatter_sum_f32(sw_comm *c, float *x, size_t n, sw_error *err)
{
	if (!c)
		return SW_OK;
	double t0 = now_();
	return timed_(c, t0, reduce_scatter_(c, x, n, KIND_F32_SUM_, err));
}

int sw_comm_allgather_f32(sw_comm *c, float *x, size_t n, sw_error *err)
{
	if (!c)
		return SW_OK;
	double t0 = now_();
	return timed_(c, t0, allgather_(c, x, n, KIND_F32_SUM_, err));
}

/* Both halves, for a vector of any of the kinds. */
static int allreduce_(sw_comm *c, void *x, size_t n, kind_ k, sw_error *err)
{
	if (!c)
		return SW_OK;
	double t0 = now_();
	int rc = reduce_scatter_(c, x, n, k, err);
	return timed_(c, t0, rc ? rc : allgather_(c, x, n, k, err));
}

int sw_comm_allreduce_sum_f32(sw_comm *c, float *x, size_t n, sw_error *err)
{
	return allreduce_(c, x, n, KIND_F32_SUM_, err);
}

int sw_comm_allreduce_sum_f64(sw_comm *c, double *x, size_t n, sw_error *err)
{
	return allreduce_(c, x, n, KIND_F64_SUM_, err);
}

int sw_comm_allreduce_max_f64(sw_comm *c, double *x, size_t n, sw_error *err)
{
	return allreduce_(c, x, n, KIND_F64_MAX_, err);
}

int sw_comm_bcast(sw_comm *c, void *buf, size_t n, int root, sw_error *err)
{
	if (root < 0 || root >= sw_comm_size(c))
		return sw_fail(err, SW_EINVAL, "broadcast from rank %d of %d", root, sw_comm_size(c));
#ifdef SW_HAVE_MPI
	double t0 = now_();
	if (c)
		for (size_t at = 0; at < n; at += c->chunk) {
			size_t k = n - at < c->chunk ? n - at : c->chunk;
			int m = MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, c->comm);
			if (m != MPI_SUCCESS)
				return timed_(c, t0, mpi_fail_(err, m, "MPI_Bcast"));
		}
	timed_(c, t0, 0);
#endif
	(void)buf, (void)n;
	return SW_OK;
}

static int gather_(sw_comm *c, const void *mine, size_t n, int root, void **all, size_t *len, sw_error *err)
{
	*all = NULL;
	int size = sw_comm_size(c), rank = sw_comm_rank(c);
	if (root < 0 || root >= size)
		return sw_fail(err, SW_EINVAL, "gather to rank %d of %d", root, size);
	if (!c) {
		if (!(*all = malloc(n ? n : 1)))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		if (n)
			memcpy(*all, mine, n);
		len[0] = n;
		return SW_OK;
	}
#ifdef SW_HAVE_MPI
	uint64_t me = n, *lens = NULL;
	if (rank == root && !(lens = malloc((size_t)size * sizeof *lens)))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	int m = MPI_Gather(&me, 1, MPI_UINT64_T, lens, 1, MPI_UINT64_T, root, c->comm);
	if (m != MPI_SUCCESS) {
		free(lens);
		return mpi_fail_(err, m, "MPI_Gather");
	}
	if (rank != root) {
		for (size_t at = 0; at < n; at += c->chunk) {
			size_t k = n - at < c->chunk ? n - at : c->chunk;
			if ((m = MPI_Send((const char *)mine + at, (int)k, MPI_BYTE, root, TAG_GATHER_, c->comm)) != MPI_SUCCESS)
				return mpi_fail_(err, m, "MPI_Send");
		}
		return SW_OK;
	}
	size_t total = 0;
	for (int r = 0; r < size; r++)
		total += (len[r] = (size_t)lens[r]);
	free(lens);
	char *out = malloc(total ? total : 1);
	if (!out)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	/* Messages between two ranks on one tag arrive in order, so the chunks
	 * of each rank land one after the other. */
	size_t pos = 0;
	for (int r = 0; r < size; r++) {
		if (r == rank) {
			if (n)
				memcpy(out + pos, mine, n);
		} else
			for (size_t at = 0; at < len[r]; at += c->chunk) {
				size_t k = len[r] - at < c->chunk ? len[r] - at : c->chunk;
				m = MPI_Recv(out + pos + at, (int)k, MPI_BYTE, r, TAG_GATHER_, c->comm, MPI_STATUS_IGNORE);
				if (m != MPI_SUCCESS) {
					free(out);
					return mpi_fail_(err, m, "MPI_Recv");
				}
			}
		pos += len[r];
	}
	*all = out;
	return SW_OK;
#else
	(void)rank;
	return SW_OK;
#endif
}

int sw_comm_gather_bytes(sw_comm *c, const void *mine, size_t n, int root, void **all,
                         size_t *len, sw_error *err)
{
	double t0 = now_();
	return timed_(c, t0, gather_(c, mine, n, root, all, len, err));
}

int sw_comm_barrier(sw_comm *c, sw_error *err)
{
#ifdef SW_HAVE_MPI
	if (c) {
		double t0 = now_();
		int m = MPI_Barrier(c->comm);
		if (m != MPI_SUCCESS)
			return timed_(c, t0, mpi_fail_(err, m, "MPI_Barrier"));
		timed_(c, t0, 0);
	}
#endif
	(void)c, (void)err;
	return SW_OK;
}

/*
 * A barrier whose waiting ranks sleep between looks rather than poll: Open
 * MPI's blocking calls spin on the core while they wait, which for a wait
 * of seconds (on input another rank reads, behind a pipeline's other
 * stages) takes a core those stages need.  The looks start at once and
 * back off to a millisecond apart, so a short wait stays short.
 */
int sw_comm_barrier_idle(sw_comm *c, sw_error *err)
{
#ifdef SW_HAVE_MPI
	if (c) {
		double t0 = now_();
		MPI_Request req;
		int m = MPI_Ibarrier(c->comm, &req), done = 0;
		long ns = 1000;
		while (m == MPI_SUCCESS && !(m = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) && !done) {
			nanosleep(&(struct timespec){ 0, ns }, NULL);
			ns = ns < 1000000 ? ns * 2 : 1000000;
		}
		return timed_(c, t0, m == MPI_SUCCESS ? SW_OK : mpi_fail_(err, m, "MPI_Ibarrier"));
	}
#endif
	(void)c, (void)err;
	return SW_OK;
}

/*
 * Gradients on a GPU: summed there by the backend's collective (NCCL) when
 * it has one, so they never cross to the host.  The ranks join it at the
 * first call, as llm.c does: every rank loads the collective's library
 * (all agree that they can join before any blocks in joining), rank 0
 * makes the id, the communicator here broadcasts it, every rank joins.
 * Not rank order: the additions are in NCCL's order (the same bits on
 * every rank, as NCCL reduces each element once and copies it; the
 * rank-order sum's bits for 2 ranks, where a + b is b + a).  Without a collective: through host, in rank order.
 */
int sw_dist_sum_device(sw_comm *c, const struct sw_backend *be, float *x, float *host, size_t n, sw_error *err)
{
	int rc;
	if (!c || c->size == 1)
		return SW_OK;
	if (!be->coll_sum) {
		if ((rc = be->download(host, x, n * sizeof *host, err)) || (rc = sw_comm_allreduce_sum_f32(c, host, n, err)))
			return rc;
		return be->upload(x, host, n * sizeof *host, err);
	}
	if (c->coll != be) {
		unsigned char id[SW_COLL_ID] = { 0 };
		if ((rc = sw_comm_agree(c, be->coll_open(err), err)))
			return rc;
		rc = c->rank == 0 ? be->coll_id(id, err) : SW_OK;
		if ((rc = sw_comm_agree(c, rc, err)) || (rc = sw_comm_bcast(c, id, sizeof id, 0, err)))
			return rc;
		if ((rc = sw_comm_agree(c, be->coll_init(id, c->rank, c->size, err), err)))
			return rc;
		c->coll = be;
	}
	return be->coll_sum(x, n, err);
}
