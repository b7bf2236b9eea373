/*
 * test_dist.c - the communicator of sw/dist.h.  Run by hand (tests/run) it
 * checks the one-rank case, the NULL communicator every program gets
 * without a launcher.  Run under `mpirun -np N` (tests/dist-mpi.bats) it
 * checks the collectives across the ranks: rank-order sums that are the
 * same bits everywhere, the chunked transfers, the verdict of sw_comm_agree,
 * the gather to a root, and how sw_dist_sum_device joins a device's
 * collective (a stand-in backend's coll_* entries).  Every rank prints its
 * own TAP lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/sw.h"
#include "sw/dist.h"
#include "common/internal.h"
#include "compute/backend.h"
#include "dist/dist_internal.h"
#include "tap.h"

static void test_one_rank(void)
{
	sw_error err;
	memset(&err, 0, sizeof err);
	is_int(sw_comm_rank(NULL), 0, "NULL: rank 0");
	is_int(sw_comm_size(NULL), 1, "NULL: size 1");
	float f[3] = {1.5f, -2, 3};
	double d[2] = {0.25, 7};
	is_int(sw_comm_allreduce_sum_f32(NULL, f, 3, &err), SW_OK, "NULL: f32 sum");
	ok(f[0] == 1.5f && f[1] == -2 && f[2] == 3, "NULL: f32 sum leaves x as it is");
	is_int(sw_comm_allreduce_sum_f64(NULL, d, 2, &err), SW_OK, "NULL: f64 sum");
	ok(d[0] == 0.25 && d[1] == 7, "NULL: f64 sum leaves x as it is");
	is_int(sw_comm_allreduce_max_f64(NULL, d, 2, &err), SW_OK, "NULL: f64 max");
	ok(d[0] == 0.25 && d[1] == 7, "NULL: f64 max leaves x as it is");
	is_int(sw_comm_reduce_scatter_sum_f32(NULL, f, 3, &err), SW_OK, "NULL: reduce-scatter");
	is_int(sw_comm_allgather_f32(NULL, f, 3, &err), SW_OK, "NULL: all-gather");
	size_t off = 9, len = 9;
	sw_comm_shard(NULL, 0, 10, &off, &len);
	ok(off == 0 && len == 10, "NULL: the one shard is everything");
	char b[4] = "abc";
	is_int(sw_comm_bcast(NULL, b, 4, 0, &err), SW_OK, "NULL: bcast from 0");
	is_int(sw_comm_bcast(NULL, b, 4, 1, &err), SW_EINVAL, "NULL: bcast from rank 1 of 1 refused");
	ok(strstr(err.msg, "rank 1 of 1") != NULL, "the refusal says why: %s", err.msg);
	void *all = NULL;
	size_t lens[1] = {99};
	is_int(sw_comm_gather_bytes(NULL, "xyz", 3, 0, &all, lens, &err), SW_OK, "NULL: gather");
	ok(all && lens[0] == 3 && memcmp(all, "xyz", 3) == 0, "NULL: gather copies");
	free(all);
	is_int(sw_comm_gather_bytes(NULL, NULL, 0, 0, &all, lens, &err), SW_OK, "NULL: gather of nothing");
	ok(all != NULL && lens[0] == 0, "NULL: an empty gather still mallocs");
	free(all);
	is_int(sw_comm_barrier(NULL, &err), SW_OK, "NULL: barrier");
	is_int(sw_comm_barrier_idle(NULL, &err), SW_OK, "NULL: idle barrier");
	ok(sw_comm_seconds(NULL) == 0, "NULL: no time in collectives");
	sw_error e2;
	sw_fail(&e2, SW_EFORMAT, "bad thing");
	is_int(sw_comm_agree(NULL, SW_EFORMAT, &e2), SW_EFORMAT, "NULL: agree returns rc");
	ok(strcmp(e2.msg, "bad thing") == 0, "NULL: agree leaves the message alone");
	is_int(sw_comm_agree(NULL, SW_OK, &e2), SW_OK, "NULL: agree on success");
	sw_comm_close(NULL);
	ok(1, "close(NULL) is a no-op");
}

/* Without MPI, a launch as several ranks is refused, not run N times over. */
static void test_no_mpi_refuses(void)
{
	if (sw_comm_have_mpi())
		return;
	sw_error err;
	sw_comm *c = (sw_comm *)1;
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	is_int(sw_comm_open(&c, &err), SW_EINVAL, "built without MPI: a 2-rank launch is refused");
	ok(c == NULL && strstr(err.msg, "without MPI"), "and says why: %s", err.msg);
	setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
	is_int(sw_comm_open(&c, &err), SW_OK, "a 1-rank launch is one process");
	unsetenv("OMPI_COMM_WORLD_SIZE");
}

/* Shards cover [0, n) once, in rank order, sizes differing by at most one. */
static void test_shards(sw_comm *c)
{
	size_t ns[] = {0, 1, 2, 3, 7, 100, 101};
	int good = 1;
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		size_t at = 0;
		for (int r = 0; r < sw_comm_size(c); r++) {
			size_t off, len;
			sw_comm_shard(c, r, ns[i], &off, &len);
			good &= off == at && len <= ns[i] / (size_t)sw_comm_size(c) + 1;
			at += len;
		}
		good &= at == ns[i];
	}
	ok(good, "shards tile the vector in rank order");
}

/* Every rank holds the same bytes: gathered to rank 0 and compared there. */
static int same_everywhere_(sw_comm *c, const void *x, size_t n)
{
	void *all;
	size_t *len = calloc((size_t)sw_comm_size(c), sizeof *len);
	sw_error err;
	int same = 1;
	if (sw_comm_gather_bytes(c, x, n, 0, &all, len, &err) != SW_OK)
		same = 0;
	if (sw_comm_rank(c) == 0 && same)
		for (int r = 0; r < sw_comm_size(c); r++)
			same &= len[r] == n && memcmp((char *)all + (size_t)r * n, x, n) == 0;
	free(all);
	free(len);
	int v = same;
	sw_comm_bcast(c, &v, sizeof v, 0, &err);
	return v;
}

static void test_sums(sw_comm *c, size_t chunk)
{
	int rank = sw_comm_rank(c), size = sw_comm_size(c);
	sw_error err;
	sw_dist_set_chunk(c, chunk);
	size_t ns[] = {0, 1, (size_t)size - 1, 5, 1001};
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		size_t n = ns[k];
		float *f = malloc(n * sizeof *f + 1);
		double *d = malloc(n * sizeof *d + 1);
		for (size_t i = 0; i < n; i++) {
			f[i] = (float)(rank + 1) * (float)(i % 13) + 0.5f;
			d[i] = (double)(rank + 1) * (double)i - 0.25;
		}
		int rc = sw_comm_allreduce_sum_f32(c, f, n, &err);
		rc |= sw_comm_allreduce_sum_f64(c, d, n, &err);
		/* sum over ranks of (r+1) = size(size+1)/2; all values exact in binary */
		double t = size * (size + 1) / 2.0;
		int good = rc == SW_OK;
		for (size_t i = 0; i < n; i++)
			good &= f[i] == (float)(t * (double)(i % 13) + 0.5 * size) &&
			        d[i] == t * (double)i - 0.25 * size;
		ok(good, "chunk %zu, n %zu: sums are right on rank %d", chunk, n, rank);
		ok(same_everywhere_(c, f, n * sizeof *f) && same_everywhere_(c, d, n * sizeof *d),
		   "chunk %zu, n %zu: the same bits on every rank", chunk, n);
		free(f);
		free(d);
	}
	/* Rank order: 1e8 + 1 rounds back to 1e8 in float, so ((1e8 + 1) - 1e8)
	 * is 0 where (1e8 - 1e8) + 1 would be 1. */
	if (size == 3) {
		float v[4];
		const float mine[3] = {1e8f, 1, -1e8f};
		for (int i = 0; i < 4; i++)
			v[i] = mine[rank];
		sw_comm_allreduce_sum_f32(c, v, 4, &err);
		ok(v[0] == 0 && v[1] == 0 && v[2] == 0 && v[3] == 0, "the sum is in rank order: %g", v[0]);
	}
	/* The maximum: rank r holds r at i == r % 7 and -i elsewhere. */
	double mx[7];
	for (int i = 0; i < 7; i++)
		mx[i] = i == rank % 7 ? 100.0 + rank : -(double)i;
	is_int(sw_comm_allreduce_max_f64(c, mx, 7, &err), SW_OK, "max");
	int gm = 1;
	for (int i = 0; i < 7; i++)
		gm &= i < size ? mx[i] == 100.0 + i : mx[i] == -(double)i;
	ok(gm, "max: element-wise across the ranks");
	/* The halves: reduce-scatter fills only my shard, all-gather the rest. */
	size_t n = 11, off, len;
	float x[11], y[11];
	for (size_t i = 0; i < n; i++)
		x[i] = y[i] = (float)rank * 0.1f + (float)i;
	sw_comm_allreduce_sum_f32(c, y, n, &err);
	is_int(sw_comm_reduce_scatter_sum_f32(c, x, n, &err), SW_OK, "reduce-scatter");
	sw_comm_shard(c, rank, n, &off, &len);
	int good = 1;
	for (size_t i = 0; i < n; i++)
		good &= i >= off && i < off + len ? x[i] == y[i] : x[i] == (float)rank * 0.1f + (float)i;
	ok(good, "reduce-scatter: my shard summed, the rest untouched");
	is_int(sw_comm_allgather_f32(c, x, n, &err), SW_OK, "all-gather");
	ok(memcmp(x, y, sizeof x) == 0, "reduce-scatter + all-gather = allreduce, bit for bit");
	sw_dist_set_chunk(c, 0);
}

static void test_agree(sw_comm *c)
{
	int rank = sw_comm_rank(c), size = sw_comm_size(c);
	sw_error err;
	memset(&err, 0, sizeof err);
	is_int(sw_comm_agree(c, SW_OK, &err), SW_OK, "agree: nobody failed");
	int rc = SW_OK;
	if (rank == size - 1)
		rc = sw_fail(&err, SW_EFORMAT, "bad record on the last rank");
	rc = sw_comm_agree(c, rc, &err);
	is_int(rc, SW_EFORMAT, "agree: every rank gets the last rank's code");
	char want[64];
	snprintf(want, sizeof want, "rank %d: bad record on the last rank", size - 1);
	ok(strcmp(err.msg, want) == 0, "agree: and its message: %s", err.msg);
	/* Two ranks fail: the lowest one speaks. */
	rc = rank >= size - 2 ? sw_fail(&err, rank == size - 1 ? SW_EIO : SW_ERANGE, "from %d", rank) : SW_OK;
	err.record = (uint64_t)rank + 40;
	rc = sw_comm_agree(c, rc, &err);
	int low = size - 2;
	is_int(rc, SW_ERANGE, "agree: the lowest failing rank's code");
	snprintf(want, sizeof want, "rank %d: from %d", low, low);
	ok(strcmp(err.msg, want) == 0 && err.record == (uint64_t)low + 40,
	   "agree: its message and record: %s", err.msg);
}

static void test_bcast_gather(sw_comm *c)
{
	int rank = sw_comm_rank(c), size = sw_comm_size(c);
	sw_error err;
	sw_dist_set_chunk(c, 3);
	char b[10];
	memset(b, rank == size - 1 ? 'z' : '.', sizeof b);
	is_int(sw_comm_bcast(c, b, sizeof b, size - 1, &err), SW_OK, "bcast from the last rank, in chunks of 3");
	ok(memcmp(b, "zzzzzzzzzz", 10) == 0, "bcast: every rank has the root's bytes");
	/* rank r sends r*3 bytes of 'a'+r (rank 0 sends none), to the last rank */
	char mine[64];
	memset(mine, 'a' + rank, sizeof mine);
	void *all;
	size_t *len = calloc((size_t)size, sizeof *len);
	int root = size - 1;
	is_int(sw_comm_gather_bytes(c, mine, (size_t)rank * 3, root, &all, rank == root ? len : NULL, &err),
	       SW_OK, "gather of uneven sizes in chunks of 3");
	if (rank == root) {
		int good = all != NULL;
		size_t pos = 0;
		for (int r = 0; r < size && good; r++) {
			good &= len[r] == (size_t)r * 3;
			for (size_t i = 0; i < len[r]; i++)
				good &= ((char *)all)[pos + i] == 'a' + r;
			pos += len[r];
		}
		ok(good, "gather: the root has every rank's bytes in rank order");
	} else
		ok(all == NULL, "gather: a non-root gets nothing");
	free(all);
	free(len);
	sw_dist_set_chunk(c, 0);
	is_int(sw_comm_barrier(c, &err), SW_OK, "barrier");
}

/*
 * A stand-in for a device backend's collective (NCCL's place): records
 * what sw_dist_sum_device asked of it, fails coll_open on the rank told
 * to, and sums through the communicator (as NCCL would, on the device).
 */
static struct {
	sw_comm *c;
	int fail_open_rank;
	int opened, ids, inits;
	unsigned char id[SW_COLL_ID];
} coll_;

static int coll_open_(sw_error *err)
{
	coll_.opened++;
	if (sw_comm_rank(coll_.c) == coll_.fail_open_rank)
		return sw_fail(err, SW_ENOENT, "no collective library here");
	return SW_OK;
}

static int coll_id_(void *id, sw_error *err)
{
	(void)err;
	coll_.ids++;
	memset(id, 0x5a, SW_COLL_ID);
	return SW_OK;
}

static int coll_init_(const void *id, int rank, int nranks, sw_error *err)
{
	coll_.inits++;
	memcpy(coll_.id, id, SW_COLL_ID);
	if (rank != sw_comm_rank(coll_.c) || nranks != sw_comm_size(coll_.c))
		return sw_fail(err, SW_EINVAL, "joined as rank %d of %d", rank, nranks);
	return SW_OK;
}

static int coll_sum_(float *x, size_t n, sw_error *err)
{
	return sw_comm_allreduce_sum_f32(coll_.c, x, n, err);
}

static void test_device_collective(sw_comm *c)
{
	int rank = sw_comm_rank(c), size = sw_comm_size(c);
	/* static: the communicator remembers the backend it joined */
	static struct sw_backend be = { .name = "stand-in", .coll_open = coll_open_, .coll_id = coll_id_,
		                 .coll_init = coll_init_, .coll_sum = coll_sum_ };
	sw_error err;
	memset(&err, 0, sizeof err);
	float x[3] = { 1, (float)rank, 2 }, host[3];

	/* One rank cannot load the library: every rank hears so, and none joins
	 * (a rank joining would wait inside NCCL for the one that never comes). */
	memset(&coll_, 0, sizeof coll_);
	coll_.c = c, coll_.fail_open_rank = size - 1;
	int rc = sw_dist_sum_device(c, &be, x, host, 3, &err);
	is_int(rc, SW_ENOENT, "device sum: a rank without the library fails every rank");
	char want[64];
	snprintf(want, sizeof want, "rank %d: no collective library here", size - 1);
	ok(strcmp(err.msg, want) == 0, "device sum: with its message: %s", err.msg);
	ok(coll_.opened == 1 && coll_.ids == 0 && coll_.inits == 0,
	   "device sum: no rank made an id or joined after a failed open (open %d, id %d, init %d)",
	   coll_.opened, coll_.ids, coll_.inits);

	/* Every rank can: rank 0 alone makes the id, every rank joins with it once. */
	memset(&coll_, 0, sizeof coll_);
	coll_.c = c, coll_.fail_open_rank = -1;
	memset(&err, 0, sizeof err);
	rc = sw_dist_sum_device(c, &be, x, host, 3, &err);
	is_int(rc, SW_OK, "device sum: joined and summed");
	ok(coll_.ids == (rank == 0) && coll_.inits == 1 && coll_.id[0] == 0x5a &&
	       coll_.id[SW_COLL_ID - 1] == 0x5a,
	   "device sum: the id made on rank 0 reached rank %d (ids %d, inits %d)", rank, coll_.ids, coll_.inits);
	ok(x[0] == (float)size && x[1] == (float)size * (size - 1) / 2 && x[2] == 2.0f * size,
	   "device sum: the sums (%g %g %g)", x[0], x[1], x[2]);
	rc = sw_dist_sum_device(c, &be, x, host, 3, &err);
	ok(rc == SW_OK && coll_.opened == 1 && coll_.inits == 1, "device sum: joined once, then only sums");
}

static double clock_(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Rank 0 arrives 0.3 s late: the others wait asleep (little CPU), and the wait is counted in
 * sw_comm_seconds.  Only lower bounds on the waits: on a loaded machine every wait may be
 * longer, and the last to arrive may wait too (for a rank that is not on a core). */
static void test_idle(sw_comm *c)
{
	sw_error err = { 0 };
	int rank = sw_comm_rank(c);
	double s0 = sw_comm_seconds(c);
	if (rank == 0)
		nanosleep(&(struct timespec){ 0, 300000000 }, NULL);
	double w0 = clock_(CLOCK_MONOTONIC), c0 = clock_(CLOCK_THREAD_CPUTIME_ID);
	is_int(sw_comm_barrier_idle(c, &err), SW_OK, "idle barrier %s", err.msg);
	double wall = clock_(CLOCK_MONOTONIC) - w0, cpu = clock_(CLOCK_THREAD_CPUTIME_ID) - c0, in = sw_comm_seconds(c) - s0;
	if (rank > 0) {
		ok(wall > 0.25, "idle barrier: the others wait for rank 0: %.3f s", wall);
		ok(cpu < 0.1 * wall, "idle barrier: asleep while they wait: %.3f s of CPU in %.3f s", cpu, wall);
		ok(in > 0.25 && in <= wall, "idle barrier: the wait counts as time in collectives: %.3f s", in);
	}
	/* every collective counts its wait: rank 0 comes 0.2 s late to each (the gather's root is
	 * the last rank: a sender need not wait for it) */
	int last = sw_comm_size(c) - 1;
	const char *names[] = { "agree", "allreduce", "reduce-scatter", "all-gather", "bcast", "gather", "barrier" };
	for (int k = 0; k < 7; k++) {
		float x[4] = { 1, 2, 3, 4 };
		void *all = NULL;
		size_t len[64];
		if (rank == 0)
			nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
		s0 = sw_comm_seconds(c);
		int rc = k == 0 ? sw_comm_agree(c, SW_OK, &err)
		       : k == 1 ? sw_comm_allreduce_sum_f32(c, x, 4, &err)
		       : k == 2 ? sw_comm_reduce_scatter_sum_f32(c, x, 4, &err)
		       : k == 3 ? sw_comm_allgather_f32(c, x, 4, &err)
		       : k == 4 ? sw_comm_bcast(c, x, sizeof x, 0, &err)
		       : k == 5 ? sw_comm_gather_bytes(c, x, sizeof x, last, &all, rank == last && last < 64 ? len : NULL, &err)
		                : sw_comm_barrier(c, &err);
		free(all);
		in = sw_comm_seconds(c) - s0;
		is_int(rc, SW_OK, "%s: %s", names[k], err.msg);
		if (rank > 0 && (k != 5 || rank == last))
			ok(in > 0.15, "%s: the wait for rank 0 counts as time in collectives: %.3f s", names[k], in);
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_one_rank();
	test_no_mpi_refuses();
	sw_error err;
	sw_comm *c = NULL;
	is_int(sw_comm_open(&c, &err), SW_OK, "open: %s", c ? "launched as several ranks" : "one process");
	test_shards(c);
	is_int(sw_comm_launched(), c != NULL, "launched by mpirun exactly when there are ranks here");
	if (c) {
		ok(sw_comm_size(c) > 1 && sw_comm_rank(c) < sw_comm_size(c), "rank %d of %d", sw_comm_rank(c),
		   sw_comm_size(c));
		test_sums(c, 0);
		test_sums(c, 8); /* two floats, one double per message */
		test_agree(c);
		test_bcast_gather(c);
		test_device_collective(c);
		test_idle(c);
	}
	sw_comm_close(c);
	return tap_done();
}
