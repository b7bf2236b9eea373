/*
 * cli_output.c - the output every sw-* program shares (see cli.h): the
 * -o, -f, -z and --force options, names of a file per part, and the
 * files written whole, whose temporaries a program that dies removes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

sw_format cli_format(const char *arg)
{
	if (!strcmp(arg, "msgpack"))
		return SW_FMT_MSGPACK;
	if (!strcmp(arg, "json"))
		return SW_FMT_JSON;
	cli_usage("unknown format '%s' (msgpack or json)", arg);
}

void cli_output_format(const char *out, sw_writer_opts *wo, int fmt_set, int force)
{
	int tty = !strcmp(out, "-") && isatty(1);
	if (tty && !fmt_set && !wo->zstd_level)
		wo->format = SW_FMT_JSON;
	if (tty && (wo->format == SW_FMT_MSGPACK || wo->zstd_level) && !force)
		cli_usage("refusing to write binary to a terminal (use -f json, -o FILE or --force)");
}

int cli_output_opt(cli_output *o, int c, const char *arg)
{
	switch (c) {
	case 'o':
		o->path = arg;
		return 1;
	case 'f':
		o->wo.format = cli_format(arg);
		o->fmt_set = 1;
		return 1;
	case 'z':
		if (!o->wo.zstd_level) /* a level chosen before stays */
			o->wo.zstd_level = 3;
		return 1;
	case CLI_OPT_FORCE:
		o->force = 1;
		return 1;
	}
	return 0;
}

void cli_output_settle(cli_output *o)
{
	cli_output_format(o->path, &o->wo, o->fmt_set, o->force);
}

int cli_output_pattern(const char *pattern, const char *what)
{
	int d = 0, other = 0;
	for (const char *p = pattern; *p; p++) {
		if (*p != '%')
			continue;
		if (p[1] == '%')
			p++;
		else if (p[1] == 'd')
			d++, p++;
		else
			other++;
	}
	if (d > 1 || other)
		cli_usage("option '-o' wants one %%d for the %s and no other %% conversion, not '%s'", what, pattern);
	return d;
}

char *cli_output_nth(const char *pattern, uint64_t i)
{
	size_t n = strlen(pattern) + 24;
	char *s = cli_malloc(n);
	snprintf(s, n, pattern, (int)i); /* checked by cli_output_pattern: one %d, no other conversion */
	return s;
}

const char *cli_output_name(const char *path)
{
	return strcmp(path, "-") ? path : "stdout";
}

/*
 * The outputs written whole (sw_writer_open_whole) not yet closed: a program
 * that dies (cli_die, a signal, a closed pipe) removes their temporaries, and
 * each file it was writing is as it was.
 */
static sw_writer *pending_[8];

void cli_output_drop_pending(void)
{
	for (size_t i = 0; i < sizeof pending_ / sizeof *pending_; i++)
		if (pending_[i] && sw_writer_pending(pending_[i]))
			unlink(sw_writer_pending(pending_[i]));
}

static void on_fatal_signal_(int sig)
{
	cli_output_drop_pending();
	signal(sig, SIG_DFL);
	raise(sig);
}

sw_writer *cli_writer_open(const char *path, const sw_writer_opts *wo)
{
	static int hooked;
	sw_error err = { 0 };
	sw_writer *w = sw_writer_open_whole(path, wo, &err);
	if (!w)
		cli_die("cannot write '%s': %s", path, err.sys_errno ? strerror(err.sys_errno) : err.msg);
	if (!sw_writer_pending(w))
		return w;
	size_t i = 0;
	while (i < sizeof pending_ / sizeof *pending_ && pending_[i])
		i++;
	if (i == sizeof pending_ / sizeof *pending_) {
		sw_writer_free(w);
		cli_die("cannot write '%s': more than %zu outputs open at once", path, i);
	}
	pending_[i] = w;
	if (!hooked) {
		hooked = 1;
		atexit(cli_output_drop_pending);
		/* a signal ignored, or one the program handles itself, is left alone */
		int sigs[] = { SIGINT, SIGTERM, SIGHUP };
		for (size_t k = 0; k < sizeof sigs / sizeof *sigs; k++) {
			struct sigaction old;
			if (!sigaction(sigs[k], NULL, &old) && old.sa_handler == SIG_DFL)
				signal(sigs[k], on_fatal_signal_);
		}
	}
	return w;
}

sw_writer *cli_output_open(const cli_output *o, const char *path)
{
	if (!strcmp(path, "-") && !cli_binary_ok(1, o->force) && (o->wo.format == SW_FMT_MSGPACK || o->wo.zstd_level))
		cli_usage("refusing to write binary to a terminal (use -f json, -o FILE or --force)");
	return cli_writer_open(path, &o->wo);
}

void cli_output_end(sw_writer *w, const char *path)
{
	for (size_t i = 0; i < sizeof pending_ / sizeof *pending_; i++)
		if (pending_[i] == w)
			pending_[i] = NULL;
	if (sw_writer_close(w))
		cli_die_stream(cli_output_name(path), sw_writer_error(w));
}

void cli_output_put(sw_writer *w, const char *path, sw_rec *rec)
{
	if (sw_writer_put(w, rec))
		cli_die_stream(cli_output_name(path), sw_writer_error(w));
}

void cli_output_close(sw_writer *w, const char *path)
{
	cli_output_end(w, path);
	sw_writer_free(w);
}
