/*
 * fault_bench.c - bench/bench_faults.sh's driver: what the first touch of a
 * shared-memory object's pages costs through a plain mapping (a page fault
 * each 4 KiB) against a mapping made with MAP_POPULATE, as sw_store_open
 * makes a store's.  An object of MIB MiB under /dev/shm, its pages in memory
 * (written once before the clock, as a store's are); each round maps it
 * both ways, the two taking turns, and times the map and a write of one
 * byte every 4 KiB; the medians of ROUNDS rounds, one line:
 *
 *   fault_bench MIB ROUNDS  ->  mib=N faulted_s=X populated_s=Y
 *                               faulted_us_per_page=... populated_us_per_page=... ratio=X/Y
 */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "bench_stats.h"

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Map the object (flags beside MAP_SHARED), touch every page, unmap: seconds. */
static double touch_(int fd, size_t n, int flags)
{
	double t = now_();
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
	if (p == MAP_FAILED) {
		perror("fault_bench: mmap");
		exit(1);
	}
	for (size_t i = 0; i < n; i += 4096)
		p[i]++;
	t = now_() - t;
	munmap(p, n);
	return t;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65536 || atoi(argv[2]) <= 0 || atoi(argv[2]) > 1000) {
		fprintf(stderr, "usage: fault_bench MIB ROUNDS (MIB <= 65536, ROUNDS <= 1000)\n");
		return 2;
	}
	size_t n = (size_t)atoi(argv[1]) << 20;
	int rounds = atoi(argv[2]);
	char name[64];
	snprintf(name, sizeof name, "/sw-fault-bench-%ld", (long)getpid());
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || shm_unlink(name) || ftruncate(fd, (off_t)n)) {
		perror("fault_bench: shm");
		return 1;
	}
	/* the pages in memory first, as a store's are when a stage maps it */
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("fault_bench: mmap");
		return 1;
	}
	memset(p, 1, n);
	munmap(p, n);
	double *f = malloc(sizeof *f * (size_t)rounds), *q = malloc(sizeof *q * (size_t)rounds);
	if (!f || !q)
		return 1;
	for (int r = 0; r < rounds; r++) {
		f[r] = touch_(fd, n, 0);
		q[r] = touch_(fd, n, MAP_POPULATE);
	}
	double fm = bench_median(f, rounds), qm = bench_median(q, rounds), pages = (double)(n / 4096);
	printf("mib=%d faulted_s=%.4f populated_s=%.4f faulted_us_per_page=%.3f populated_us_per_page=%.3f "
	       "ratio=%.2f\n",
	       atoi(argv[1]), fm, qm, fm / pages * 1e6, qm / pages * 1e6, fm / qm);
	close(fd);
	free(f), free(q);
	return 0;
}
