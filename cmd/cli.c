#define _GNU_SOURCE /* program_invocation_short_name */
/* cli.c - the shared discipline of the sw-* programs (see cli.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

/* The least stack (RLIMIT_STACK) the programs run with: twice what the
 * largest of them took (sw-rollout, sw-train and sw-verify ran at 128 KiB
 * and crashed at 64). */
#define MIN_STACK_ ((rlim_t)256 << 10)

/* A stack limit too small for the programs' frames (64 KiB read buffers, a
 * product's 33 KiB tile on each thread, whose stacks take the limit's size;
 * some mains' own frames) is said before main, where it would be a SIGSEGV
 * on the first of them. */
__attribute__((constructor)) static void stack_check_(void)
{
	struct rlimit st;
	if (!getrlimit(RLIMIT_STACK, &st) && st.rlim_cur != RLIM_INFINITY && st.rlim_cur < MIN_STACK_) {
		fprintf(stderr, "%s: the stack limit (ulimit -s) is %llu KiB: the programs need %llu KiB at least\n",
		        program_invocation_short_name, (unsigned long long)st.rlim_cur >> 10,
		        (unsigned long long)MIN_STACK_ >> 10);
		exit(1);
	}
}

int cli_verbosity;
static const cli_prog *prog_;

/*
 * A program that stops on an error exits holding what it had: that is no
 * leak.  LeakSanitizer (make check) asks this function, where it is linked
 * in, whether to look; it looks at every other exit.  Without the
 * sanitizer nothing calls it.
 */
static volatile int dying_;
static char *die_hint_; /* cli_die_hint's */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return dying_;
}

enum { OPT_HELP = 'h', OPT_QUIET = 'q', OPT_VERBOSE = 'v', OPT_VERSION = 0x1000, OPT_COMPLETION };

static const cli_opt common_[] = {
	{ OPT_HELP, 'h', "help", NULL, NULL, "print this help and exit" },
	{ OPT_QUIET, 'q', "quiet", NULL, NULL, "print nothing but errors" },
	{ OPT_VERBOSE, 'v', "verbose", NULL, NULL, "print progress and a summary even when not on a terminal" },
	{ OPT_VERSION, 0, "version", NULL, NULL, "print the version and exit" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const char *name_(void)
{
	return prog_ ? prog_->name : "sw";
}

/* All options, the program's then the common ones, via one index. */
static const cli_opt *opt_at_(const cli_prog *p, size_t i)
{
	size_t n = 0;
	while (p->opts[n].id)
		n++;
	if (i < n)
		return &p->opts[i];
	i -= n;
	return i < sizeof common_ / sizeof *common_ - 1 ? &common_[i] : NULL;
}

static int cmp_short_(const void *a, const void *b)
{
	int x = *(const char *)a, y = *(const char *)b;
	/* BSD order: letters case-insensitively, lowercase first */
	int lx = x | 0x20, ly = y | 0x20;
	return lx != ly ? lx - ly : y - x;
}

/* "usage: sw-cat [-cqvz] [-f format] [--level n] [file ...]" */
static void usage_line_(const cli_prog *p, FILE *f)
{
	char flags[64];
	size_t nf = 0;
	const cli_opt *o;
	for (size_t i = 0; (o = opt_at_(p, i)); i++)
		if (o->shortname && !o->arg && o->id != OPT_HELP && nf < sizeof flags - 1)
			flags[nf++] = o->shortname;
	qsort(flags, nf, 1, cmp_short_);
	flags[nf] = 0;
	fprintf(f, "usage: %s", p->name);
	if (nf)
		fprintf(f, " [-%s]", flags);
	for (size_t i = 0; (o = opt_at_(p, i)); i++) {
		if (o->arg && o->shortname)
			fprintf(f, " [-%c %s]", o->shortname, o->arg);
		else if (o->arg)
			fprintf(f, " [--%s %s]", o->name, o->arg);
		else if (!o->shortname && o->id != OPT_VERSION) /* a long flag: a SYNOPSIS names it too */
			fprintf(f, " [--%s]", o->name);
	}
	if (p->operands)
		fprintf(f, " %s", p->operands);
	fputc('\n', f);
}

static void help_(const cli_prog *p)
{
	const cli_opt *o;
	usage_line_(p, stdout);
	printf("\n%s\n\n", p->summary);
	for (size_t i = 0; (o = opt_at_(p, i)); i++) {
		char left[64];
		snprintf(left, sizeof left, "%s%c%s--%s%s%s",
		         o->shortname ? "-" : "   ", o->shortname ? o->shortname : ' ',
		         o->shortname ? ", " : " ", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		if (!o->shortname)
			memmove(left, left + 1, strlen(left)); /* keep long options aligned */
		printf("  %-24s %s\n", left, o->help);
	}
	printf("\nSee %s(1).\n", p->name);
}

/* An option's completion words: the library's own name lists for "@..." (so
 * a verifier or monitor added there completes without a table to update). */
static void print_complete_(const char *c)
{
	const char *const *names = NULL;
	const char *suffix = "";
	if (!c) {
		fputs("-", stdout);
		return;
	}
	if (!strcmp(c, "@verifiers"))
		names = sw_verify_names();
	else if (!strcmp(c, "@monitors"))
		names = sw_monitor_names(), suffix = "=";
	if (!names) {
		fputs(c, stdout);
		return;
	}
	for (size_t i = 0; names[i]; i++)
		printf("%s%s%s", i ? "|" : "", names[i], suffix);
}

/*
 * One line the program (name, operands, their completion, subcommands), then
 * one an option (short, long, argument, completion, help); tab-separated, -
 * for none.  completions/gen turns these into the shells' completions.
 */
static void completion_helper_(const cli_prog *p)
{
	const cli_opt *o;
	printf("program\t%s\t%s\t%s\t%s\n", p->name, p->operands ? p->operands : "-",
	       p->operands_complete ? p->operands_complete : "-", p->commands ? p->commands : "-");
	for (size_t i = 0; (o = opt_at_(p, i)); i++) {
		printf("option\t%c\t%s\t%s\t", o->shortname ? o->shortname : '-', o->name, o->arg ? o->arg : "-");
		print_complete_(o->complete);
		printf("\t%s\n", o->help);
	}
}

int cli_next(const cli_prog *p, int argc, char **argv, const char **arg, int *optind_out)
{
	static struct option longs[64];
	static char shorts[128];
	static int ready;
	const cli_opt *o;
	prog_ = p;
	if (!ready) {
		size_t nl = 0, ns = 0;
		shorts[ns++] = ':'; /* report a missing argument as ':' */
		for (size_t i = 0; (o = opt_at_(p, i)) && nl < 62; i++) {
			longs[nl++] = (struct option){ o->name, o->arg ? required_argument : no_argument, NULL, o->id };
			if (o->shortname) {
				shorts[ns++] = o->shortname;
				if (o->arg)
					shorts[ns++] = ':';
			}
		}
		longs[nl++] = (struct option){ "completion-helper", no_argument, NULL, OPT_COMPLETION };
		longs[nl] = (struct option){ 0, 0, 0, 0 };
		shorts[ns] = 0;
		opterr = 0;
		ready = 1;
		/* a file size limit (ulimit -f) is a write error the program reports (EFBIG) and
		 * cleans up after, not a signal that kills it with a file half written */
		signal(SIGXFSZ, SIG_IGN);
	}
	for (;;) {
		int c = getopt_long(argc, argv, shorts, longs, NULL);
		*arg = optarg;
		*optind_out = optind;
		switch (c) {
		case -1:
			return 0;
		case OPT_HELP:
			help_(p);
			cli_exit(0);
		case OPT_VERSION:
			printf("%s %s\n", p->name, sw_version());
			cli_exit(0);
		case OPT_COMPLETION:
			completion_helper_(p);
			cli_exit(0);
		case OPT_QUIET:
			cli_verbosity = -1;
			continue;
		case OPT_VERBOSE:
			cli_verbosity = 1;
			continue;
		case ':':
			if (!strncmp(argv[optind - 1], "--", 2))
				cli_usage("option '%s' needs an argument", argv[optind - 1]);
			cli_usage("option '-%c' needs an argument", optopt);
		case '?':
			/* optopt: 0 for an unknown long option, the id of a flag given
			 * an argument (--count=3), else the unknown letter */
			if (optopt == 0)
				cli_usage("unknown option '%s'", argv[optind - 1]);
			for (size_t i = 0; (o = opt_at_(p, i)); i++)
				if (o->id == optopt)
					cli_usage("option '--%s' takes no argument", o->name);
			cli_usage("unknown option '-%c'", optopt);
		default:
			return c;
		}
	}
}

/* One line on stderr: what the message quotes (a file's name, a field, a
 * spec) may hold anything, so its control characters are shown escaped. */
static void vmsg_(const char *fmt, va_list ap, const char *hint)
{
	char small[1024], *msg = small, *shown = NULL;
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	size_t len = n < 0 ? 0 : (size_t)n;
	if (len >= sizeof small && (msg = malloc(len + 1)))
		vsnprintf(msg, len + 1, fmt, again);
	va_end(again);
	if (!msg) /* no memory for the whole of it: what fitted */
		msg = small, len = sizeof small - 1;
	char *whole = hint ? malloc(len + strlen(hint) + 3) : NULL;
	if (whole) { /* the message, then how to go on */
		len = (size_t)sprintf(whole, "%.*s; %s", (int)len, msg, hint);
		if (msg != small)
			free(msg);
		msg = whole;
	}
	fflush(stdout);
	if (!(shown = malloc(4 * len + 8)))
		fprintf(stderr, "%s: (a message, with no memory left to show it)\n", name_());
	else
		fprintf(stderr, "%s: %s\n", name_(), sw_show_text(shown, 4 * len + 8, msg, len, 0));
	free(shown);
	if (msg != small)
		free(msg);
}

void cli_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg_(fmt, ap, NULL);
	va_end(ap);
	if (prog_)
		usage_line_(prog_, stderr);
	dying_ = 1;
	exit(EXIT_USAGE);
}

void cli_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg_(fmt, ap, NULL);
	va_end(ap);
}

void cli_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg_(fmt, ap, NULL);
	va_end(ap);
}

void cli_die_hint(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(die_hint_);
	if (vasprintf(&die_hint_, fmt, ap) < 0)
		die_hint_ = NULL; /* no memory: no hint, the message alone */
	va_end(ap);
}

void cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg_(fmt, ap, die_hint_);
	va_end(ap);
	dying_ = 1;
	exit(EXIT_DATA);
}

/* The reader of our output is gone: end as if SIGPIPE had not been ignored. */
static noreturn void die_pipe_(void)
{
	cli_output_drop_pending();
	signal(SIGPIPE, SIG_DFL);
	raise(SIGPIPE);
	_exit(128 + SIGPIPE);
}

void cli_die_stream(const char *file, const sw_error *e)
{
	char buf[512];
	if (e->code == SW_EPIPE)
		die_pipe_();
	cli_die("%s: %s", file, sw_error_str(e, buf, sizeof buf));
}

char **cli_inputs(int argc, char **argv, int first, int *n)
{
	static char *stdin_only[] = { "-", NULL };
	*n = argc - first;
	if (*n > 0)
		return argv + first;
	*n = 1;
	return stdin_only;
}

uint64_t cli_uint(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-' || x < min || x > max)
		cli_usage("option '%s' wants a whole number from %llu to %llu, not '%s'", opt,
		          (unsigned long long)min, (unsigned long long)max, s);
	return x;
}

size_t cli_max_record(void)
{
	const char *s = getenv("SW_MAX_RECORD");
	if (!s || !*s)
		return SW_MAX_RECORD_DEFAULT;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	if (shift)
		end++;
	if (errno || *end || s[0] == '-' || x == 0 || x > (SIZE_MAX >> shift) || (x << shift) > UINT32_MAX)
		cli_usage("SW_MAX_RECORD='%s' is not a size from 1 to 4G (bytes, or with K, M or G)", s);
	return (size_t)(x << shift);
}

int cli_binary_ok(int fd, int force)
{
	return force || !isatty(fd);
}

int cli_progress_on(void)
{
	static int on = -1;
	if (on < 0)
		on = cli_verbosity > 0 || (cli_verbosity == 0 && isatty(2));
	return on;
}

double cli_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double start_;
static int shown_;

void cli_progress(uint64_t records, uint64_t bytes)
{
	static double last;
	if (!start_)
		start_ = cli_now();
	if ((records & 1023) || !cli_progress_on() || !isatty(2))
		return;
	double t = cli_now();
	if (t - last < 0.25)
		return;
	last = t;
	shown_ = 1;
	fprintf(stderr, "\r%s: %llu records, %.1f MB ", name_(), (unsigned long long)records, (double)bytes / 1e6);
}

void cli_summary(uint64_t records, uint64_t bytes_in, uint64_t bytes_out)
{
	if (!cli_progress_on())
		return;
	double t = start_ ? cli_now() - start_ : 0;
	fprintf(stderr, "%s%s: %llu records, %.1f MB in, %.1f MB out, %.2f s\n", shown_ ? "\r" : "", name_(),
	        (unsigned long long)records, (double)bytes_in / 1e6, (double)bytes_out / 1e6, t);
}

void cli_exit(int status)
{
	/* sbase's fshut: a full disk shows only at the last flush */
	if (fflush(stdout) || ferror(stdout) || fclose(stdout)) {
		if (errno == EPIPE)
			die_pipe_();
		fprintf(stderr, "%s: write error: %s\n", name_(), strerror(errno));
		dying_ = 1;
		exit(EXIT_DATA);
	}
	if (status)
		dying_ = 1;
	exit(status);
}

const sw_backend *cli_device(const char *arg)
{
	sw_error err = { 0 };
	const sw_backend *be = sw_backend_get(arg ? arg : getenv("SW_DEVICE"), &err);
	if (!be && (!strncmp(err.msg, "SW_GEMM: ", 9) || !strncmp(err.msg, "SW_PROFILE: ", 12)))
		/* not the device's name: it names itself */
		cli_die("%s", err.msg);
	if (!be && arg && err.code == SW_EINVAL) /* a name no backend has */
		cli_usage("%s", err.msg);
	if (!be && arg) /* a backend this machine cannot give (SW_ENOENT: cuda without a GPU) */
		cli_die("%s", err.msg);
	if (!be)
		cli_die("SW_DEVICE: %s", err.msg);
	return be;
}

void *cli_malloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

void *cli_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

void *cli_realloc(void *p, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		cli_die("out of memory");
	size_t bytes = n * size;
	void *q = realloc(p, bytes ? bytes : 1);
	if (!q)
		cli_die("out of memory");
	return q;
}

char *cli_strndup(const char *s, size_t n)
{
	char *p = cli_malloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *cli_strdup(const char *s)
{
	return cli_strndup(s, strlen(s));
}

char *cli_path(const char *dir, const char *fmt, ...)
{
	char rel[512], *p;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rel, sizeof rel, fmt, ap);
	va_end(ap);
	if (asprintf(&p, "%s/%s", dir, rel) < 0)
		cli_die("out of memory");
	return p;
}
