/*
 * cli.h - what every sw-* program shares: one option table that drives
 * parsing, --help, the completions and the man SYNOPSIS; messages in one
 * form; exit codes; progress on a terminal; the checked exit.
 *
 * A program lists its own options; -h/--help, --version, -q/--quiet and
 * -v/--verbose are added to every table.  `PROG --completion-helper`
 * prints the merged table, one option a line, for completions/gen and the
 * test that holds --help, the man page and the completions to it.
 */
#ifndef SW_CLI_H
#define SW_CLI_H

#include <stdint.h>
#include <stdnoreturn.h>
#include "sw/sw.h"

enum { EXIT_DATA = 1, EXIT_USAGE = 2, EXIT_HALT = 3 };

typedef struct cli_opt {
	int id;            /* returned by cli_next; the short letter when there is one */
	char shortname;    /* 0: long only */
	const char *name;  /* long name */
	const char *arg;   /* NULL: a flag; else the argument's name in help and man */
	/* what completes the argument: "file", "dir", "a|b|c", "@verifiers" (the
	 * verifier names), "@monitors" ("name=" of each monitor), or NULL */
	const char *complete;
	const char *help;
} cli_opt;

typedef struct cli_prog {
	const char *name;
	const char *operands;  /* "[file ...]" */
	const char *operands_complete; /* "file" or NULL */
	const char *summary;   /* one line: what the program does */
	const cli_opt *opts;   /* terminated by an entry with id 0 */
	const char *commands;  /* "a|b|c": the subcommands the first operand names, or NULL */
} cli_prog;

extern int cli_verbosity; /* -1 quiet, 0 normal, 1 verbose */

/* Parse the next option: its id, 0 when options end (then *optind is the first operand). */
int cli_next(const cli_prog *p, int argc, char **argv, const char **arg, int *optind_out);

noreturn void cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A program's own report on stderr ("PROG: wrote ..."), as cli_warn writes its
 * messages: one line, what it quotes (a path, a name) shown escaped. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* From now on cli_die ends its messages with "; " and fmt's text: a program's
 * word on how to go on after any failure (sw-run's resume). */
void cli_die_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PROG: FILE: record 17 (byte 3456): MSG", exit 1; quietly die of SIGPIPE for a closed pipe. */
/* Allocation that dies with "PROG: out of memory" (exit 1); a size of 0 still gives a pointer. */
void *cli_malloc(size_t n);
void *cli_calloc(size_t n, size_t size);
void *cli_realloc(void *p, size_t n, size_t size);  /* n * size bytes, overflow checked */
char *cli_strndup(const char *s, size_t n);
char *cli_strdup(const char *s);
/* "DIR/" and fmt's text, a new string (no memory: "PROG: out of memory", exit 1). */
char *cli_path(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
noreturn void cli_die_stream(const char *file, const sw_error *e);

/* The operands from argv[first] (*n of them), or "-" alone (standard input) when there are none. */
char **cli_inputs(int argc, char **argv, int first, int *n);

/* Numbers from option arguments, or a usage error naming the option. */
uint64_t cli_uint(const char *opt, const char *s, uint64_t min, uint64_t max);

/*
 * The compute device: --device's argument (arg), else $SW_DEVICE, else cpu.
 * An unknown name is a usage error for arg, an error (exit 1) for
 * SW_DEVICE; the message lists the known ones.  A device this machine
 * cannot give (cuda without the backend, the driver or a GPU) is an error
 * (exit 1) naming what is missing.
 */
const sw_backend *cli_device(const char *arg);
#define CLI_OPT_DEVICE(id) { id, 0, "device", "name", "cpu|guard|cuda", \
	                     "compute on this device: cpu, guard, cuda or cuda:N, the Nth GPU (default $SW_DEVICE, else cpu)" }

/* The record size limit: $SW_MAX_RECORD (bytes, or with K, M, G), else the default. */
size_t cli_max_record(void);

/* May binary go to fd?  Not to a terminal unless forced. */
int cli_binary_ok(int fd, int force);

/* The argument of -f: msgpack or json, else a usage error. */
sw_format cli_format(const char *arg);

/*
 * Settle the encoding of the output out ("-": standard output): JSON Lines
 * on a terminal unless -f (fmt_set) or -z chose; binary to a terminal is a
 * usage error unless forced.
 */
void cli_output_format(const char *out, sw_writer_opts *wo, int fmt_set, int force);

/*
 * The output options the stream programs share: their table entries (in the
 * order a program lists them) and their handling.  A program's -o help
 * differs (what a %d in the name does), so CLI_OPT_OUTPUT takes it.
 */
enum { CLI_OPT_FORCE = 0x0f00 };
#define CLI_OPT_OUTPUT(help) { 'o', 'o', "output", "file", "file", help }
#define CLI_OPT_FORMAT { 'f', 'f', "format", "format", "msgpack|json", \
	                 "write msgpack or json (JSON Lines); default msgpack, json on a terminal" }
#define CLI_OPT_ZSTD { 'z', 'z', "zstd", NULL, NULL, "compress the output with zstd" }
#define CLI_OPT_FORCE_ENTRY { CLI_OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" }

typedef struct cli_output {
	const char *path;     /* -o; "-" (standard output) unless given */
	sw_writer_opts wo;    /* -f and -z */
	int fmt_set, force;   /* -f was given; --force */
} cli_output;

#define CLI_OUTPUT_INIT { "-", { SW_FMT_MSGPACK, 0 }, 0, 0 }

/* Take option c (from cli_next) if it is -o, -f, -z or --force: 1, else 0. */
int cli_output_opt(cli_output *o, int c, const char *arg);
/* cli_output_format for o: JSON Lines on a terminal, binary refused there. */
void cli_output_settle(cli_output *o);
/*
 * Open path (o->path, or a name made from it) with o's encoding; binary to
 * a terminal is a usage error unless forced; "cannot write 'PATH': why"
 * when it cannot be created.  A file is written whole
 * (sw_writer_open_whole): it changes only when cli_output_end or
 * cli_output_close has finished it, and a program that dies first (an error,
 * SIGINT, SIGTERM, SIGHUP) removes the temporary and leaves the file as it was.
 */
sw_writer *cli_output_open(const cli_output *o, const char *path);
/* The same with an encoding of the program's own, no terminal check. */
sw_writer *cli_writer_open(const char *path, const sw_writer_opts *wo);
/* Put a record to w, named path in messages ("-": stdout), or die. */
void cli_output_put(sw_writer *w, const char *path, sw_rec *rec);
/* Finish and check w (the file is then in place), or die naming path. */
void cli_output_end(sw_writer *w, const char *path);
/* cli_output_end, then free w. */
void cli_output_close(sw_writer *w, const char *path);
/* Remove the temporaries of the outputs not finished (cli.c, as a program dies). */
void cli_output_drop_pending(void);
/*
 * An output name that makes a file per part (bucket, rank): 1 when pattern
 * holds one %d (and %% only besides), 0 when no %, else a usage error
 * saying what the %d is for.
 */
int cli_output_pattern(const char *pattern, const char *what);
/* The name of part i: the pattern with its %d filled in (malloc'd). */
char *cli_output_nth(const char *pattern, uint64_t i);
/* A file name as messages show it: "stdout" for "-". */
const char *cli_output_name(const char *path);

/* Seconds on the monotonic clock: what the programs time their work with. */
double cli_now(void);
/* Whether progress lines and summaries go to standard error: with -v, or
 * when it is a terminal and -q was not given. */
int cli_progress_on(void);
/* Progress: a line on standard error, refreshed a few times a second, only
 * when it is a terminal (or -v); then a one-line summary. */
void cli_progress(uint64_t records, uint64_t bytes);
void cli_summary(uint64_t records, uint64_t bytes_in, uint64_t bytes_out);

/* Flush and check standard output, then exit. */
noreturn void cli_exit(int status);

#endif
