/*
 * sw-plot - draw a run's curves from its metrics.jsonl as one SVG of small
 * multiples (a panel a metric, one shared iteration axis), or as PNG when a
 * converter is at hand.
 *
 * Several runs given together are drawn over each other, a colour a run,
 * so two runs compare at a glance.  Records with eval: true are the
 * held-out evaluations and are drawn as marked points on the accuracy and
 * violation panels.  A field that no record has is simply no panel; a
 * field with a value that is not a number is an error naming the record.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"

static const cli_opt opts[] = {
	{ 'o', 'o', "output", "file", "file",
	  "write to file (.svg; .png through rsvg-convert or ImageMagick) instead of standard output" },
	{ 't', 't', "title", "text", NULL, "the picture's title (default: the runs' names)" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-plot", "[file ...]", "file",
	"Plot runs' curves (reward, accuracy, violations, KL, entropy, length, throughput) from metrics.jsonl\n"
	"(or a run directory) to SVG or PNG.",
	opts
};

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

static void *xrealloc_(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		cli_die("out of memory");
	return q;
}

static void add_(ser_ *s, double x, double y)
{
	if (!isfinite(y)) {
		s->bad++;
		return;
	}
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->p = xrealloc_(s->p, s->cap * sizeof *s->p);
	}
	s->p[s->n++] = (pt_){ x, y };
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

/* A field's number, or 0 when absent or null; a value of another type dies naming the record. */
static int number_(sw_rec *rec, const char *key, double *x, const char *file, uint64_t n)
{
	sw_val v;
	int rc = sw_rec_get(rec, key, &v);
	if (rc == SW_ENOENT || (!rc && v.type == SW_T_NIL))
		return 0;
	if (rc)
		cli_die("%s: record %llu: cannot read field '%s': %s", file, (unsigned long long)n, key, sw_strerror(rc));
	if (sw_val_number(&v, x))
		cli_die("%s: record %llu: field '%s' is %s, not a number", file, (unsigned long long)n, key, kind_(v.type));
	return 1;
}

/* The map field k of a record: each name's number, at iteration it. */
static void read_map_(sw_rec *rec, int k, mset_ *ms, double it, const char *file, uint64_t n)
{
	sw_val mv;
	if (sw_rec_get(rec, map_[k].field, &mv) || mv.type == SW_T_NIL)
		return;
	if (mv.type != SW_T_MAP)
		cli_die("%s: record %llu: field '%s' is %s, not %s", file, (unsigned long long)n, map_[k].field,
		        kind_(mv.type), map_[k].what);
	sw_iter iter;
	sw_val key, v;
	sw_iter_init(&iter, &mv);
	while (sw_iter_next(&iter, &key) == 1 && sw_iter_next(&iter, &v) == 1) {
		double x;
		if (key.type != SW_T_STR)
			cli_die("%s: record %llu: field '%s' has a key that is not a string", file, (unsigned long long)n,
			        map_[k].field);
		if (sw_val_number(&v, &x))
			cli_die("%s: record %llu: field '%s': '%.*s' is %s, not a number", file, (unsigned long long)n,
			        map_[k].field, (int)key.v.str.len, key.v.str.ptr, kind_(v.type));
		size_t i = 0;
		while (i < ms->n && (strlen(ms->s[i].name) != key.v.str.len ||
		                     memcmp(ms->s[i].name, key.v.str.ptr, key.v.str.len)))
			i++;
		if (i == ms->n) {
			ms->s = xrealloc_(ms->s, (ms->n + 1) * sizeof *ms->s);
			ms->s[i] = (ser_){ 0 };
			if (!(ms->s[i].name = strndup(key.v.str.ptr, key.v.str.len)))
				cli_die("out of memory");
			ms->n++;
		}
		add_(&ms->s[i], it, x);
	}
}

static void read_run_(run_ *run, const char *arg)
{
	char path[4200];
	struct stat st;
	if (strcmp(arg, "-") && !stat(arg, &st) && S_ISDIR(st.st_mode)) {
		size_t l = strlen(arg);
		snprintf(path, sizeof path, "%s%smetrics.jsonl", arg, l && arg[l - 1] == '/' ? "" : "/");
	} else {
		snprintf(path, sizeof path, "%s", arg);
	}
	const char *file = strcmp(path, "-") ? path : "stdin";
	/* the run's name: its directory, or the file */
	char name[4200];
	snprintf(name, sizeof name, "%s", strcmp(arg, "-") ? arg : "stdin");
	size_t l = strlen(name);
	while (l > 1 && name[l - 1] == '/')
		name[--l] = 0;
	if (l > 14 && !strcmp(name + l - 14, "/metrics.jsonl"))
		name[l - 14] = 0;
	run->name = strdup(name);

	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(path, &err);
	if (!r)
		cli_die("cannot open '%s': %s", path, strerror(err.sys_errno));
	sw_reader_set_max_record(r, cli_max_record());
	sw_rec *rec = sw_rec_new();
	if (!rec || !run->name)
		cli_die("out of memory");
	int rc;
	while ((rc = sw_reader_next(r, rec)) == 1) {
		uint64_t n = sw_reader_records(r);
		double it, y;
		if (!number_(rec, "iter", &it, file, n))
			cli_die("%s: record %llu: no field 'iter'", file, (unsigned long long)n);
		if (!isfinite(it))
			cli_die("%s: record %llu: field 'iter' is not finite", file, (unsigned long long)n);
		sw_val ev;
		int is_eval = 0;
		int erc = sw_rec_get(rec, "eval", &ev);
		if (!erc && ev.type == SW_T_BOOL)
			is_eval = ev.v.b;
		else if (!erc && ev.type != SW_T_NIL)
			cli_die("%s: record %llu: field 'eval' is %s, not true or false", file, (unsigned long long)n,
			        kind_(ev.type));
		for (int m = 0; m < NM; m++)
			if (number_(rec, metric_[m].field, &y, file, n))
				add_(is_eval ? &run->eval[m] : &run->train[m], it, y);
		for (int k = 0; k < NMAP && !is_eval; k++)
			read_map_(rec, k, &run->maps[k], it, file, n);
	}
	if (rc < 0) {
		const sw_error *e = sw_reader_error(r);
		if (e->code == SW_EEMPTY)
			cli_die("%s: no records", file);
		cli_die_stream(file, e);
	}
	if (sw_reader_records(r) == 0)
		cli_die("%s: no records", file);
	sw_rec_free(rec);
	sw_reader_free(r);
	for (int m = 0; m < NM; m++) {
		sort_(&run->train[m]);
		sort_(&run->eval[m]);
	}
	for (int k = 0; k < NMAP; k++)
		for (size_t i = 0; i < run->maps[k].n; i++)
			sort_(&run->maps[k].s[i]);
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

/* The SVG on its way to a converter; removed however the program ends. */
static char tmp_[4200];

static void rm_tmp_(void)
{
	if (*tmp_)
		unlink(tmp_);
}

/* --- PNG --------------------------------------------------------------------------------- */

/* The first converter found on PATH that is the real thing. */
static const char *converter_(void)
{
	const char *path = getenv("PATH");
	static const char *const names[] = { "rsvg-convert", "magick", "convert" };
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		char *dup = strdup(path ? path : "/usr/bin:/bin"), *save, *dir;
		if (!dup)
			cli_die("out of memory");
		for (dir = strtok_r(dup, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
			char full[4200];
			snprintf(full, sizeof full, "%s/%s", *dir ? dir : ".", names[k]);
			if (access(full, X_OK))
				continue;
			if (k > 0) {
				/* only ImageMagick itself: "Version: ImageMagick ..." */
				char cmd[4300], line[256] = "";
				snprintf(cmd, sizeof cmd, "'%s' -version 2>/dev/null", full);
				FILE *p = strchr(full, '\'') ? NULL : popen(cmd, "r");
				if (p) {
					if (!fgets(line, sizeof line, p))
						line[0] = 0;
					pclose(p);
				}
				if (!strstr(line, "Version: ImageMagick"))
					continue;
			}
			free(dup);
			return names[k];
		}
		free(dup);
	}
	return NULL;
}

static void to_png_(const char *svg, const char *png)
{
	const char *conv = converter_();
	if (!conv)
		cli_die("cannot write '%s': no SVG to PNG converter found (rsvg-convert from librsvg2-bin, or "
		        "ImageMagick); write .svg instead",
		        png);
	pid_t pid = fork();
	if (pid < 0)
		cli_die("cannot run %s: %s", conv, strerror(errno));
	if (pid == 0) {
		if (!strcmp(conv, "rsvg-convert"))
			execlp(conv, conv, "-f", "png", "-o", png, svg, (char *)NULL);
		else
			execlp(conv, conv, "-density", "110", svg, png, (char *)NULL);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			cli_die("cannot wait for %s: %s", conv, strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		cli_die("cannot write '%s': %s failed (%s %d)", png, conv, WIFEXITED(st) ? "exit status" : "signal",
		        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

int main(int argc, char **argv)
{
	const char *arg, *out = "-", *title = NULL;
	int c, optind_;
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'o':
			out = arg;
			break;
		case 't':
			title = arg;
			break;
		}
	}
	char **files = argv + optind_;
	int nfiles = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}
	size_t ol = strlen(out);
	int png = ol > 4 && !strcasecmp(out + ol - 4, ".png");
	if (strcmp(out, "-") && !png && !(ol > 4 && !strcasecmp(out + ol - 4, ".svg")))
		cli_usage("the output '%s' is neither .svg nor .png", out);

	run_ *runs = xrealloc_(NULL, (size_t)nfiles * sizeof *runs);
	memset(runs, 0, (size_t)nfiles * sizeof *runs);
	for (int i = 0; i < nfiles; i++)
		read_run_(&runs[i], files[i]);
	char deftitle[512] = "";
	if (!title) {
		size_t n = 0;
		for (int i = 0; i < nfiles && n < sizeof deftitle - 64; i++)
			n += (size_t)snprintf(deftitle + n, sizeof deftitle - n, "%s%.200s", i ? " vs " : "", runs[i].name);
		title = deftitle;
	}

	/* nothing to draw is an error before any output exists */
	int any = 0;
	for (int i = 0; i < nfiles; i++) {
		for (int k = 0; k < NMAP; k++)
			any |= runs[i].maps[k].n > 0;
		for (int m = 0; m < NM; m++)
			any |= runs[i].train[m].n || runs[i].eval[m].n || runs[i].train[m].bad || runs[i].eval[m].bad;
	}
	if (!any)
		cli_die("%s: no metrics to plot (none of reward_mean, rewards, accuracy, violation_rate, kl, entropy, time_s, "
		        "response_len_mean, tokens_per_s)",
		        nfiles == 1 ? files[0] : "the inputs");
	char *tmp = tmp_;
	FILE *f = stdout;
	if (png) {
		const char *td = getenv("TMPDIR");
		snprintf(tmp, sizeof tmp_, "%s/sw-plot.XXXXXX", td && *td ? td : "/tmp");
		int fd = mkstemp(tmp);
		if (fd >= 0)
			atexit(rm_tmp_);
		else
			*tmp = 0;
		if (fd < 0 || !(f = fdopen(fd, "w")))
			cli_die("cannot make a temporary file in '%s': %s", td && *td ? td : "/tmp", strerror(errno));
	} else if (strcmp(out, "-") && !(f = fopen(out, "w"))) {
		cli_die("cannot write '%s': %s", out, strerror(errno));
	}
	draw_(f, runs, (size_t)nfiles, title);
	if (f != stdout) {
		int bad = fflush(f) || ferror(f);
		int e = errno;
		if (fclose(f) || bad)
			cli_die("cannot write '%s': %s", png ? tmp : out, strerror(e ? e : errno));
	}
	if (png)
		to_png_(tmp, out);
	if (cli_verbosity > 0) {
		size_t pts = 0;
		for (int i = 0; i < nfiles; i++)
			for (int m = 0; m < NM; m++)
				pts += runs[i].train[m].n + runs[i].eval[m].n;
		fprintf(stderr, "sw-plot: %d run%s, %zu points, to %s\n", nfiles, nfiles == 1 ? "" : "s", pts,
		        strcmp(out, "-") ? out : "stdout");
	}
	for (int i = 0; i < nfiles; i++) {
		for (int m = 0; m < NM; m++) {
			free(runs[i].train[m].p);
			free(runs[i].eval[m].p);
		}
		for (int k = 0; k < NMAP; k++) {
			for (size_t v = 0; v < runs[i].maps[k].n; v++) {
				free(runs[i].maps[k].s[v].p);
				free(runs[i].maps[k].s[v].name);
			}
			free(runs[i].maps[k].s);
		}
		free(runs[i].name);
	}
	free(runs);
	cli_exit(0);
}
