/*
 * plot.c - a run's curves from its metrics.jsonl as one SVG of small
 * multiples (a panel a metric, one shared iteration axis): sw-plot's
 * drawing (see sw/plot.h).
 *
 * Several runs are drawn over each other, a colour a run, so two runs
 * compare at a glance.  Records with eval: true are the held-out
 * evaluations and are drawn as marked points on the accuracy and
 * violation panels.  A field that no record has is simply no panel; a
 * field with a value that is not a number is an error naming the field.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/plot.h"

/* --- the data ------------------------------------------------------------------- */

enum { M_REWARD, M_ACC, M_VIOL, M_KL, M_ENT, M_LEN, M_TPS, NM };

static const struct {
	const char *field, *title;
	int frac;      /* a share: axis in percent, from 0 */
	int has_eval;  /* eval records carry it */
} metric_[NM] = {
	{ "reward_mean", "reward (mean)", 0, 0 },
	{ "accuracy", "accuracy", 1, 1 },
	{ "violation_rate", "safety violation rate", 1, 1 },
	{ "kl", "KL to the reference", 0, 0 },
	{ "entropy", "entropy", 0, 0 },
	{ "response_len_mean", "response length (tokens, mean)", 0, 0 },
	{ "tokens_per_s", "throughput (tokens/s)", 0, 0 },
};

typedef struct pt_ {
	double x, y;
} pt_;

typedef struct ser_ {
	char *name;    /* a verifier's, for the rewards panel */
	pt_ *p;
	size_t n, cap;
	size_t bad;    /* values that were not finite, not drawn */
} ser_;

/* Fields that are maps of name to number: a line a name. */
enum { MP_REWARDS, MP_TIME, NMAP };

static const struct {
	const char *field, *title, *what;
} map_[NMAP] = {
	{ "rewards", "reward by verifier (mean)", "a map of verifier to mean reward" },
	{ "time_s", "seconds per iteration, by stage", "a map of stage to seconds" },
};

typedef struct mset_ {
	ser_ *s;       /* one series a name, in the order first seen */
	size_t n;
} mset_;

typedef struct run_ {
	char *name;
	ser_ train[NM], eval[NM];
	mset_ maps[NMAP];
} run_;

struct sw_plot {
	run_ *runs;
	size_t n;
};

static int add_(ser_ *s, double x, double y)
{
	if (!isfinite(y)) {
		s->bad++;
		return 0;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		pt_ *p = realloc(s->p, cap * sizeof *p);
		if (!p)
			return SW_ENOMEM;
		s->p = p;
		s->cap = cap;
	}
	s->p[s->n++] = (pt_){ x, y };
	return 0;
}

/* Insertion order is kept for equal iterations (a resumed run): a stable sort. */
static void sort_(ser_ *s)
{
	for (size_t i = 1; i < s->n; i++)
		if (s->p[i].x < s->p[i - 1].x) {
			/* rare: only when records come out of order */
			for (size_t j = i; j > 0 && s->p[j].x < s->p[j - 1].x; j--) {
				pt_ t = s->p[j];
				s->p[j] = s->p[j - 1];
				s->p[j - 1] = t;
			}
		}
}

/* What a value is, in words, for messages: "a string". */
static const char *kind_(sw_type t)
{
	switch (t) {
	case SW_T_NIL: return "null";
	case SW_T_BOOL: return "a boolean";
	case SW_T_STR: return "a string";
	case SW_T_BIN: return "binary data";
	case SW_T_ARRAY: return "an array";
	case SW_T_MAP: return "a map";
	case SW_T_EXT: return "an extension value";
	default: return "a number";
	}
}

/* A field's number: 1, or 0 when absent or null; a value of another type is an error. */
static int number_(sw_rec *rec, const char *key, double *x, sw_error *err)
{
	sw_val v;
	int rc = sw_rec_get(rec, key, &v);
	if (rc == SW_ENOENT || (!rc && v.type == SW_T_NIL))
		return 0;
	if (rc)
		return sw_fail(err, rc, "cannot read field '%s': %s", key, sw_strerror(rc));
	if (sw_val_number(&v, x))
		return sw_fail(err, SW_ETYPE, "field '%s' is %s, not a number", key, kind_(v.type));
	return 1;
}

/* The map field k of a record: each name's number, at iteration it. */
static int read_map_(sw_rec *rec, int k, mset_ *ms, double it, sw_error *err)
{
	sw_val mv;
	if (sw_rec_get(rec, map_[k].field, &mv) || mv.type == SW_T_NIL)
		return 0;
	if (mv.type != SW_T_MAP)
		return sw_fail(err, SW_ETYPE, "field '%s' is %s, not %s", map_[k].field, kind_(mv.type), map_[k].what);
	sw_iter iter;
	sw_val key, v;
	sw_iter_init(&iter, &mv);
	while (sw_iter_next(&iter, &key) == 1 && sw_iter_next(&iter, &v) == 1) {
		double x;
		if (key.type != SW_T_STR)
			return sw_fail(err, SW_ETYPE, "field '%s' has a key that is not a string", map_[k].field);
		if (sw_val_number(&v, &x))
			return sw_fail(err, SW_ETYPE, "field '%s': '%.*s' is %s, not a number", map_[k].field,
			               (int)key.v.str.len, key.v.str.ptr, kind_(v.type));
		size_t i = 0;
		while (i < ms->n && (strlen(ms->s[i].name) != key.v.str.len ||
		                     memcmp(ms->s[i].name, key.v.str.ptr, key.v.str.len)))
			i++;
		if (i == ms->n) {
			ser_ *s = realloc(ms->s, (ms->n + 1) * sizeof *s);
			if (!s)
				return sw_fail(err, SW_ENOMEM, "out of memory");
			ms->s = s;
			ms->s[i] = (ser_){ 0 };
			if (!(ms->s[i].name = strndup(key.v.str.ptr, key.v.str.len)))
				return sw_fail(err, SW_ENOMEM, "out of memory");
			ms->n++;
		}
		if (add_(&ms->s[i], it, x))
			return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	return 0;
}

sw_plot *sw_plot_new(void)
{
	return calloc(1, sizeof(sw_plot));
}

void sw_plot_free(sw_plot *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		run_ *r = &p->runs[i];
		for (int m = 0; m < NM; m++) {
			free(r->train[m].p);
			free(r->eval[m].p);
		}
		for (int k = 0; k < NMAP; k++) {
			for (size_t v = 0; v < r->maps[k].n; v++) {
				free(r->maps[k].s[v].p);
				free(r->maps[k].s[v].name);
			}
			free(r->maps[k].s);
		}
		free(r->name);
	}
	free(p->runs);
	free(p);
}

int sw_plot_run(sw_plot *p, const char *name, sw_error *err)
{
	run_ *r = realloc(p->runs, (p->n + 1) * sizeof *r);
	if (!r)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	p->runs = r;
	memset(&r[p->n], 0, sizeof *r);
	if (!(r[p->n].name = strdup(name)))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	p->n++;
	return 0;
}

int sw_plot_add(sw_plot *p, sw_rec *rec, sw_error *err)
{
	if (!p->n)
		return sw_fail(err, SW_EINVAL, "no run to add to");
	run_ *run = &p->runs[p->n - 1];
	double it, y;
	int rc = number_(rec, "iter", &it, err);
	if (rc < 0)
		return rc;
	if (!rc)
		return sw_fail(err, SW_ENOENT, "no field 'iter'");
	if (!isfinite(it))
		return sw_fail(err, SW_EFORMAT, "field 'iter' is not finite");
	sw_val ev;
	int is_eval = 0;
	int erc = sw_rec_get(rec, "eval", &ev);
	if (!erc && ev.type == SW_T_BOOL)
		is_eval = ev.v.b;
	else if (!erc && ev.type != SW_T_NIL)
		return sw_fail(err, SW_ETYPE, "field 'eval' is %s, not true or false", kind_(ev.type));
	for (int m = 0; m < NM; m++) {
		if ((rc = number_(rec, metric_[m].field, &y, err)) < 0)
			return rc;
		if (rc && add_(is_eval ? &run->eval[m] : &run->train[m], it, y))
			return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	for (int k = 0; k < NMAP && !is_eval; k++)
		if ((rc = read_map_(rec, k, &run->maps[k], it, err)))
			return rc;
	return 0;
}

int sw_plot_empty(const sw_plot *p)
{
	for (size_t i = 0; i < p->n; i++) {
		for (int k = 0; k < NMAP; k++)
			if (p->runs[i].maps[k].n > 0)
				return 0;
		for (int m = 0; m < NM; m++)
			if (p->runs[i].train[m].n || p->runs[i].eval[m].n || p->runs[i].train[m].bad || p->runs[i].eval[m].bad)
				return 0;
	}
	return 1;
}

size_t sw_plot_points(const sw_plot *p)
{
	size_t pts = 0;
	for (size_t i = 0; i < p->n; i++)
		for (int m = 0; m < NM; m++)
			pts += p->runs[i].train[m].n + p->runs[i].eval[m].n;
	return pts;
}

/* --- axes ---------------------------------------------------------------------------- */

/* A step of 1, 2 or 5 times a power of ten, giving about n intervals over span. */
static double nice_step_(double span, int n)
{
	double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
	return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

typedef struct axis_ {
	double lo, hi, step;
} axis_;

static axis_ axis_of_(double lo, double hi, int frac, int n, int pad)
{
	int nonneg = lo >= 0;
	axis_ a;
	if (frac) {
		lo = 0;
		if (hi <= 0)
			hi = 0.01;
	}
	if (hi - lo < 1e-12 * (fabs(hi) + fabs(lo)) || hi == lo) {
		double d = fabs(hi) * 0.1 + (hi == 0 ? 1 : 0);
		lo -= d;
		hi += d;
		if (frac)
			lo = 0;
	}
	if (pad) {
		/* a little room, so a curve does not run along the frame; never below 0 for what cannot be */
		double d = (hi - lo) * 0.04;
		lo -= d;
		hi += d;
		if (nonneg && lo < 0)
			lo = 0;
	}
	a.step = nice_step_(hi - lo, n);
	a.lo = floor(lo / a.step + 1e-9) * a.step;
	a.hi = ceil(hi / a.step - 1e-9) * a.step;
	if (frac && a.hi > 1 && hi <= 1)
		a.hi = 1;
	return a;
}

static void fmt_tick_(char *buf, size_t n, double v, double step, int frac)
{
	if (fabs(v) < step * 1e-9)
		v = 0;
	if (frac) {
		int d = step * 100 >= 1 ? 0 : step * 100 >= 0.1 ? 1 : 2;
		snprintf(buf, n, "%.*f%%", d, v * 100);
		return;
	}
	double s = step;
	const char *suffix = "";
	if (step >= 1000 && fabs(v) >= 1000) {
		v /= 1000;
		s /= 1000;
		suffix = "k";
	}
	int d = s >= 1 ? 0 : (int)ceil(-log10(s) - 1e-9);
	if (d > 6)
		d = 6;
	snprintf(buf, n, "%.*f%s", d, v, suffix);
}

/* --- SVG ------------------------------------------------------------------------------- */

static const char *const color_[] = { "#1f6fb4", "#d0452b", "#2a9d4b", "#8a56b8", "#e08a00", "#6b4c3b", "#d04f9c",
	                               "#4a4a4a" };
#define NCOLOR (sizeof color_ / sizeof *color_)
static const char *const dash_[] = { "", "6 3", "2 3", "8 3 2 3" };
/* a map panel's names, one run: ten colours that stay apart */
static const char *const key_color_[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
	                                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf" };
#define NKEY (sizeof key_color_ / sizeof *key_color_)

static void xml_(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default:
			/* control characters are not allowed in XML 1.0 */
			fputc((unsigned char)*s < 0x20 && *s != '\t' ? '?' : *s, f);
		}
	}
}

enum { PW = 470, PH = 230, ML = 64, MR = 18, MT = 34, MB = 40, COLS = 2, HEAD = 78 };

typedef struct panel_ {
	const char *id, *title;
	int metric;     /* index into metric_, or -1 for the rewards panel */
} panel_;

static void polyline_(FILE *f, const ser_ *s, axis_ xa, axis_ ya, double x0, double y0, double w, double h,
                      const char *cls, const char *color, const char *dash, const char *metric, const char *extra)
{
	if (s->n == 0)
		return;
	double sx = w / (xa.hi - xa.lo), sy = h / (ya.hi - ya.lo);
	if (s->n > 1) {
		fprintf(f, "<polyline class=\"%s\" data-metric=\"%s\"%s fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"",
		        cls, metric, extra, color, strcmp(cls, "eval") ? "1.8" : "1.2");
		if (*dash)
			fprintf(f, " stroke-dasharray=\"%s\"", dash);
		fputs(" stroke-linejoin=\"round\" points=\"", f);
		for (size_t i = 0; i < s->n; i++)
			fprintf(f, "%s%.1f,%.1f", i ? " " : "", x0 + (s->p[i].x - xa.lo) * sx,
			        y0 + h - (s->p[i].y - ya.lo) * sy);
		fputs("\"/>\n", f);
	}
	/* points: always for held-out evaluations, and for short series so a lone value shows */
	int eval = !strcmp(cls, "eval");
	if (eval || s->n <= 25)
		for (size_t i = 0; i < s->n; i++)
			fprintf(f,
			        "<circle class=\"%s-point\" data-metric=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\" "
			        "stroke=\"%s\" stroke-width=\"1.5\"><title>iter %g: %g</title></circle>\n",
			        cls, metric, x0 + (s->p[i].x - xa.lo) * sx, y0 + h - (s->p[i].y - ya.lo) * sy,
			        eval ? "4.5" : "2.2", eval ? "#fff" : color, color, s->p[i].x, s->p[i].y);
}

static void draw_(FILE *f, run_ *runs, size_t nruns, const char *title)
{
	panel_ panels[NM + NMAP];
	size_t np = 0;
	double xlo = INFINITY, xhi = -INFINITY;
	for (int m = 0; m < NM; m++) {
		int any = 0;
		for (size_t r = 0; r < nruns; r++)
			any |= runs[r].train[m].n || runs[r].eval[m].n || runs[r].train[m].bad || runs[r].eval[m].bad;
		if (any)
			panels[np++] = (panel_){ metric_[m].field, metric_[m].title, m };
		/* each verifier's reward beside the combined one; the time by stage last */
		int k = m == M_REWARD ? MP_REWARDS : m == NM - 1 ? MP_TIME : -1;
		int present = 0;
		for (size_t r = 0; k >= 0 && r < nruns; r++)
			present |= runs[r].maps[k].n > 0;
		if (present)
			panels[np++] = (panel_){ map_[k].field, map_[k].title, -1 - k };
	}
	for (size_t r = 0; r < nruns; r++) {
		for (int m = 0; m < NM; m++)
			for (int e = 0; e < 2; e++) {
				ser_ *s = e ? &runs[r].eval[m] : &runs[r].train[m];
				for (size_t i = 0; i < s->n; i++) {
					xlo = fmin(xlo, s->p[i].x);
					xhi = fmax(xhi, s->p[i].x);
				}
			}
		for (int k = 0; k < NMAP; k++)
			for (size_t v = 0; v < runs[r].maps[k].n; v++)
				for (size_t i = 0; i < runs[r].maps[k].s[v].n; i++) {
					xlo = fmin(xlo, runs[r].maps[k].s[v].p[i].x);
					xhi = fmax(xhi, runs[r].maps[k].s[v].p[i].x);
				}
	}
	if (!isfinite(xlo)) /* only non-finite values: empty panels that say so */
		xlo = 0, xhi = 1;
	axis_ xa = axis_of_(xlo, xhi, 0, 6, 0);
	if (xlo >= 0 && xa.lo < 0)
		xa.lo = 0;
	size_t rows = (np + COLS - 1) / COLS;
	int W = COLS * PW, H = HEAD + (int)rows * PH + 10;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	           "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
	           "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
	        W, H, W, H);
	fputs("<title>", f);
	xml_(f, title);
	fputs("</title>\n", f);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
	fputs("<text class=\"title\" x=\"16\" y=\"26\" font-size=\"17\" font-weight=\"bold\" fill=\"#222\">", f);
	xml_(f, title);
	fputs("</text>\n", f);

	/* the legend: a colour a run, then the key to lines and points */
	double lx = 16;
	fputs("<g class=\"legend\">\n", f);
	for (size_t r = 0; r < nruns; r++) {
		fprintf(f, "<line x1=\"%.0f\" y1=\"48\" x2=\"%.0f\" y2=\"48\" stroke=\"%s\" stroke-width=\"3\"/>", lx,
		        lx + 22, color_[r % NCOLOR]);
		fprintf(f, "<text class=\"run\" x=\"%.0f\" y=\"52\" fill=\"#222\">", lx + 28);
		xml_(f, runs[r].name);
		fputs("</text>\n", f);
		lx += 28 + 7.0 * (double)strlen(runs[r].name) + 24;
	}
	fprintf(f,
	        "<text x=\"16\" y=\"70\" fill=\"#555\" font-size=\"11\">lines: training iterations \xc2\xb7 "
	        "</text><circle cx=\"%d\" cy=\"66\" r=\"4.5\" fill=\"#fff\" stroke=\"#555\" stroke-width=\"1.5\"/>"
	        "<text x=\"%d\" y=\"70\" fill=\"#555\" font-size=\"11\">held-out evaluation (greedy)</text>\n",
	        186, 196);
	fputs("</g>\n", f);

	for (size_t p = 0; p < np; p++) {
		int m = panels[p].metric, frac = m >= 0 && metric_[m].frac;
		double px = (double)(p % COLS) * PW, py = HEAD + (double)(p / COLS) * PH;
		double x0 = px + ML, y0 = py + MT, w = PW - ML - MR, h = PH - MT - MB;
		double lo = INFINITY, hi = -INFINITY;
		size_t bad = 0;
		for (size_t r = 0; r < nruns; r++) {
			ser_ *ss[64];
			size_t ns = 0;
			if (m >= 0) {
				ss[ns++] = &runs[r].train[m];
				ss[ns++] = &runs[r].eval[m];
			} else {
				const mset_ *ms = &runs[r].maps[-1 - m];
				for (size_t v = 0; v < ms->n && ns < 64; v++)
					ss[ns++] = &ms->s[v];
			}
			for (size_t k = 0; k < ns; k++) {
				bad += ss[k]->bad;
				for (size_t i = 0; i < ss[k]->n; i++) {
					lo = fmin(lo, ss[k]->p[i].y);
					hi = fmax(hi, ss[k]->p[i].y);
				}
			}
		}
		if (!isfinite(lo))
			lo = hi = 0;
		axis_ ya = axis_of_(lo, hi, frac, 4, 1);
		fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", panels[p].id);
		fprintf(f, "<text class=\"panel-title\" x=\"%.0f\" y=\"%.0f\" font-size=\"13\" font-weight=\"bold\" "
		           "fill=\"#222\">",
		        x0, py + 22);
		xml_(f, panels[p].title);
		fputs("</text>\n", f);
		if (bad)
			fprintf(f, "<text class=\"nonfinite\" x=\"%.0f\" y=\"%.0f\" fill=\"#c00\" "
			           "font-size=\"11\">%zu non-finite value%s not drawn</text>\n",
			        x0 + 8.0 * (double)strlen(panels[p].title) + 12, py + 22, bad, bad == 1 ? "" : "s");
		/* a map panel's key: the names of all runs, in the order first seen; one
		 * run draws a colour a name, several a dash a name in the run's colour */
		const char *names[64];
		size_t nn = 0;
		if (m < 0) {
			for (size_t r = 0; r < nruns; r++) {
				const mset_ *ms = &runs[r].maps[-1 - m];
				for (size_t v = 0; v < ms->n; v++) {
					size_t i = 0;
					while (i < nn && strcmp(names[i], ms->s[v].name))
						i++;
					if (i == nn && nn < 64)
						names[nn++] = ms->s[v].name;
				}
			}
			/* right-aligned from the title row, wrapping into rows that push the plot down */
			double kx0 = x0 + 8.0 * (double)strlen(panels[p].title) + 24, kx = kx0, ky = py + 22;
			for (size_t i = 0; i < nn; i++) {
				double wi = 26 + 6.5 * (double)strlen(names[i]) + 12;
				if (kx + wi > x0 + w && kx > kx0) {
					kx = kx0 = x0;
					ky += 14;
				}
				const char *cv = nruns == 1 ? key_color_[(i + 2) % NKEY] : "#444";
				const char *d = nruns == 1 ? "" : dash_[i % 4];
				fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
				           "stroke-width=\"2\"%s%s%s/>",
				        kx, ky - 4, kx + 20, ky - 4, cv, *d ? " stroke-dasharray=\"" : "", d, *d ? "\"" : "");
				fprintf(f, "<text class=\"key\" x=\"%.0f\" y=\"%.0f\" fill=\"#333\" font-size=\"11\">", kx + 26,
				        ky);
				xml_(f, names[i]);
				fputs("</text>\n", f);
				kx += wi;
			}
			y0 += ky - (py + 22);
			h -= ky - (py + 22);
		}
		fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
		        x0, y0, w, h);
		/* grid and ticks */
		for (double t = ya.lo; t <= ya.hi + ya.step * 1e-6; t += ya.step) {
			double y = y0 + h - (t - ya.lo) / (ya.hi - ya.lo) * h;
			char lab[32];
			fmt_tick_(lab, sizeof lab, t, ya.step, frac);
			fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
			           "<text class=\"ytick\" x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\" "
			           "font-size=\"11\">%s</text>\n",
			        x0, y, x0 + w, y, x0 - 6, y + 4, lab);
		}
		for (double t = xa.lo; t <= xa.hi + xa.step * 1e-6; t += xa.step) {
			double x = x0 + (t - xa.lo) / (xa.hi - xa.lo) * w;
			char lab[32];
			fmt_tick_(lab, sizeof lab, t, xa.step, 0);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#e4e4e4\"/>"
			           "<text class=\"xtick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555\" "
			           "font-size=\"11\">%s</text>\n",
			        x, y0, x, y0 + h, x, y0 + h + 15, lab);
		}
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#777\" font-size=\"11\">iteration"
		           "</text>\n",
		        x0 + w / 2, y0 + h + 31);
		for (size_t r = 0; r < nruns; r++) {
			const char *c = color_[r % NCOLOR];
			if (m >= 0) {
				polyline_(f, &runs[r].train[m], xa, ya, x0, y0, w, h, "train", c, "", panels[p].id, "");
				polyline_(f, &runs[r].eval[m], xa, ya, x0, y0, w, h, "eval", c, "4 3", panels[p].id, "");
				continue;
			}
			const mset_ *ms = &runs[r].maps[-1 - m];
			for (size_t v = 0; v < ms->n; v++) {
				size_t i = 0; /* its place in the key */
				while (i < nn && strcmp(names[i], ms->s[v].name))
					i++;
				const char *cv = nruns == 1 ? key_color_[(i + 2) % NKEY] : c;
				const char *d = nruns == 1 ? "" : dash_[i % 4];
				char extra[300], *q = extra;
				q += snprintf(extra, sizeof extra, " data-name=\"");
				for (const char *t = ms->s[v].name; *t && q < extra + sizeof extra - 8; t++)
					*q++ = (*t == '"' || *t == '<' || *t == '&' || (unsigned char)*t < 0x20) ? '_' : *t;
				snprintf(q, (size_t)(extra + sizeof extra - q), "\"");
				polyline_(f, &ms->s[v], xa, ya, x0, y0, w, h, "train", cv, d, panels[p].id, extra);
			}
		}
		fputs("</g>\n", f);
	}
	fputs("</svg>\n", f);
}


int sw_plot_svg(sw_plot *p, const char *title, char **svg, size_t *len, sw_error *err)
{
	char deftitle[512] = "";
	if (!title) {
		size_t n = 0;
		for (size_t i = 0; i < p->n && n < sizeof deftitle - 64; i++)
			n += (size_t)snprintf(deftitle + n, sizeof deftitle - n, "%s%.200s", i ? " vs " : "", p->runs[i].name);
		title = deftitle;
	}
	/* records may come out of order (a resumed run): each series by iteration */
	for (size_t i = 0; i < p->n; i++) {
		for (int m = 0; m < NM; m++) {
			sort_(&p->runs[i].train[m]);
			sort_(&p->runs[i].eval[m]);
		}
		for (int k = 0; k < NMAP; k++)
			for (size_t v = 0; v < p->runs[i].maps[k].n; v++)
				sort_(&p->runs[i].maps[k].s[v]);
	}
	*svg = NULL;
	*len = 0;
	FILE *f = open_memstream(svg, len);
	if (!f)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	draw_(f, p->runs, p->n, title);
	int bad = ferror(f);
	if (fclose(f) || bad) {
		free(*svg);
		*svg = NULL;
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	return 0;
}
