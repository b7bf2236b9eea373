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
	const char *complete; /* what completes the argument: "file", "dir", "a|b|c", or NULL */
	const char *help;
} cli_opt;

typedef struct cli_prog {
	const char *name;
	const char *operands;  /* "[file ...]" */
	const char *operands_complete; /* "file" or NULL */
	const char *summary;   /* one line: what the program does */
	const cli_opt *opts;   /* terminated by an entry with id 0 */
} cli_prog;

extern int cli_verbosity; /* -1 quiet, 0 normal, 1 verbose */

/* Parse the next option: its id, 0 when options end (then *optind is the first operand). */
int cli_next(const cli_prog *p, int argc, char **argv, const char **arg, int *optind_out);

noreturn void cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PROG: FILE: record 17 (byte 3456): MSG", exit 1; quietly die of SIGPIPE for a closed pipe. */
/* Allocation that dies with "PROG: out of memory" (exit 1); a size of 0 still gives a pointer. */
void *cli_malloc(size_t n);
void *cli_calloc(size_t n, size_t size);
void *cli_realloc(void *p, size_t n, size_t size);  /* n * size bytes, overflow checked */
char *cli_strndup(const char *s, size_t n);
char *cli_strdup(const char *s);
noreturn void cli_die_stream(const char *file, const sw_error *e);

/* Numbers from option arguments, or a usage error naming the option. */
uint64_t cli_uint(const char *opt, const char *s, uint64_t min, uint64_t max);

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

/* Progress: a line on standard error, refreshed a few times a second, only
 * when it is a terminal (or -v); then a one-line summary. */
void cli_progress(uint64_t records, uint64_t bytes);
void cli_summary(uint64_t records, uint64_t bytes_in, uint64_t bytes_out);

/* Flush and check standard output, then exit. */
noreturn void cli_exit(int status);

#endif
