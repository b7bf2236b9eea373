/*
 * sw-plot - draw a run's curves from its metrics.jsonl as one SVG of small
 * multiples (a panel a metric, one shared iteration axis), or as PNG when a
 * converter is at hand.
 *
 * The drawing is libsw's (sw/plot.h); this file finds each run's metrics,
 * reads them, and writes the SVG, or hands it to rsvg-convert or
 * ImageMagick for a PNG.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"
#include "sw/plot.h"

static const cli_opt opts[] = {
	CLI_OPT_OUTPUT("write to file (.svg; .png through rsvg-convert or ImageMagick) instead of standard output"),
	{ 't', 't', "title", "text", NULL, "the picture's title (default: the runs' names)" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-plot", "[file ...]", "file",
	"Plot runs' curves (reward, accuracy, violations, KL, entropy, length, throughput) from metrics.jsonl\n"
	"(or a run directory) to SVG or PNG.",
	opts, NULL
};

/* A run: arg is its directory or its metrics file. */
static void read_run_(sw_plot *plot, const char *arg)
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

	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(path, &err);
	if (!r)
		cli_die("cannot open '%s': %s", path, strerror(err.sys_errno));
	sw_reader_set_max_record(r, cli_max_record());
	sw_rec *rec = sw_rec_new();
	if (!rec || sw_plot_run(plot, name, &err))
		cli_die("out of memory");
	int rc;
	while ((rc = sw_reader_next(r, rec)) == 1) {
		if ((rc = sw_plot_add(plot, rec, &err)) == SW_ENOMEM)
			cli_die("out of memory");
		if (rc)
			cli_die("%s: record %llu: %s", file, (unsigned long long)sw_reader_records(r), err.msg);
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
}

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
		char *dup = cli_strdup(path ? path : "/usr/bin:/bin"), *save, *dir;
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
	int nfiles;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);
	size_t ol = strlen(out);
	int png = ol > 4 && !strcasecmp(out + ol - 4, ".png");
	if (strcmp(out, "-") && !png && !(ol > 4 && !strcasecmp(out + ol - 4, ".svg")))
		cli_usage("the output '%s' is neither .svg nor .png", out);

	sw_plot *plot = sw_plot_new();
	if (!plot)
		cli_die("out of memory");
	for (int i = 0; i < nfiles; i++)
		read_run_(plot, files[i]);
	/* nothing to draw is an error before any output exists */
	if (sw_plot_empty(plot))
		cli_die("%s: no metrics to plot (none of reward_mean, rewards, accuracy, violation_rate, kl, entropy, time_s, "
		        "response_len_mean, tokens_per_s)",
		        nfiles == 1 ? files[0] : "the inputs");
	char *svg;
	size_t len;
	sw_error err = { 0 };
	if (sw_plot_svg(plot, title, &svg, &len, &err))
		cli_die("out of memory");
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
	fwrite(svg, 1, len, f);
	free(svg);
	if (f != stdout) {
		int bad = fflush(f) || ferror(f);
		int e = errno;
		if (fclose(f) || bad)
			cli_die("cannot write '%s': %s", png ? tmp : out, strerror(e ? e : errno));
	}
	if (png)
		to_png_(tmp, out);
	if (cli_verbosity > 0)
		cli_note("%d run%s, %zu points, to %s", nfiles, nfiles == 1 ? "" : "s",
		         sw_plot_points(plot), cli_output_name(out));
	sw_plot_free(plot);
	cli_exit(0);
}
