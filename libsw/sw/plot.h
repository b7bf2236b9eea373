/*
 * sw/plot.h - a run's curves as one SVG of small multiples: sw-plot's
 * drawing, from the records of metrics.jsonl.
 *
 * A panel a metric (reward_mean, accuracy, violation_rate, kl, entropy,
 * response_len_mean, tokens_per_s, and the maps rewards and time_s, a line
 * a name), one shared iteration axis; several runs over each other, a
 * colour a run; records with eval: true drawn as marked points.  Values
 * that are not finite are counted on their panel, not drawn.
 *
 *   sw_plot_run() for each run, then sw_plot_add() each of its records;
 *   sw_plot_svg().
 *
 * Ownership: the caller owns a plot from new to free (free(NULL) is a
 * no-op); the plot copies what it is given; the SVG is the caller's to free.
 */
#ifndef SW_PLOT_H
#define SW_PLOT_H

#include <stddef.h>
#include "error.h"
#include "record.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_plot sw_plot;

sw_plot *sw_plot_new(void); /* NULL when out of memory */
void sw_plot_free(sw_plot *p);
/* Begin a run, named in the legend and the default title. */
int sw_plot_run(sw_plot *p, const char *name, sw_error *err);
/*
 * One record of the latest run: its iteration (the field iter, required,
 * finite), eval, and every metric it has.  A field of the wrong type is
 * SW_ETYPE, no iter SW_ENOENT, with err->msg naming the field; the caller
 * names the record.
 */
int sw_plot_add(sw_plot *p, sw_rec *rec, sw_error *err);
/* 1 when no run has any metric to draw. */
int sw_plot_empty(const sw_plot *p);
/* The points of the metric panels, all runs together. */
size_t sw_plot_points(const sw_plot *p);
/*
 * The picture: *svg (malloc'd, *len bytes), titled title, or with NULL the
 * runs' names joined by " vs ".
 */
int sw_plot_svg(sw_plot *p, const char *title, char **svg, size_t *len, sw_error *err);

#pragma GCC visibility pop

#endif
