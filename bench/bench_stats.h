/*
 * bench_stats.h - the median the bench drivers report (their figures are
 * medians of repeated runs, so that one disturbed run does not move them).
 */
#ifndef SW_BENCH_STATS_H
#define SW_BENCH_STATS_H
#include <stdlib.h>

static int bench_cmp_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of v[0..n), n > 0; sorts v. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
#endif
