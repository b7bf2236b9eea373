/*
 * sw-cat - concatenate, convert, select and count sample streams.
 *
 * Each input's encoding is detected on its own; records go out in one
 * encoding.  Records pass through as their original bytes unless fields are
 * dropped with -k or the output is JSON, so msgpack to msgpack runs at the
 * speed of the scanner.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

static const cli_opt opts[] = {
	CLI_OPT_FORMAT,
	CLI_OPT_ZSTD,
	{ 'l', 'l', "level", "level", NULL, "zstd level, 1 to 19 (default 3); implies -z" },
	{ 'k', 'k', "keep", "field,...", NULL, "keep only these fields (repeatable)" },
	{ 'n', 'n', "head", "num", NULL, "stop after the first num records" },
	{ 'c', 'c', "count", NULL, NULL, "print the number of records instead of the records" },
	CLI_OPT_OUTPUT("write to file instead of standard output"),
	CLI_OPT_FORCE_ENTRY,
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-cat", "[file ...]", "file",
	"Concatenate sample streams, converting between msgpack, JSON Lines and zstd.",
	opts, NULL
};

static void flush_(void *w)
{
	/* the input has paused: let what we have flow on (errors show at the next put) */
	sw_writer_flush(w);
}

int main(int argc, char **argv)
{
	const char *arg;
	const char **keep = NULL;
	size_t nkeep = 0;
	int c, optind_, count = 0;
	uint64_t head = UINT64_MAX;
	cli_output o = CLI_OUTPUT_INIT;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		if (cli_output_opt(&o, c, arg))
			continue;
		switch (c) {
		case 'l':
			o.wo.zstd_level = (int)cli_uint("-l", arg, 1, 19);
			break;
		case 'k': {
			/* split in place: the names then live as long as argv */
			char *s = (char *)arg, *tok, *save;
			for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				keep = cli_realloc(keep, nkeep + 1, sizeof *keep);
				keep[nkeep++] = tok;
			}
			if (!nkeep)
				cli_usage("option '-k' wants field names");
			break;
		}
		case 'n':
			head = cli_uint("-n", arg, 0, UINT64_MAX);
			break;
		case 'c':
			count = 1;
			break;
		}
	}
	int nfiles;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);

	sw_error err = { 0 };
	sw_writer *w = NULL;
	const char *out = o.path;
	if (!count) {
		cli_output_settle(&o);
		w = cli_output_open(&o, out);
	}

	size_t max_record = cli_max_record();
	sw_rec *rec = sw_rec_new();
	uint64_t n = 0, bytes_in = 0;
	if (!rec)
		cli_die("out of memory");
	for (int i = 0; i < nfiles && n < head; i++) {
		sw_reader *r = sw_reader_open(files[i], &err);
		const char *name = strcmp(files[i], "-") ? files[i] : "stdin";
		if (!r) {
			if (w) /* the records of the inputs before it are out */
				cli_output_end(w, out);
			cli_die("cannot open '%s': %s", files[i], strerror(err.sys_errno));
		}
		sw_reader_set_max_record(r, max_record);
		if (w)
			sw_reader_set_idle(r, flush_, w);
		int rc = 0;
		while (n < head && (rc = sw_reader_next(r, rec)) == 1) {
			if (nkeep && (rc = sw_rec_keep(rec, keep, nkeep))) {
				err = (sw_error){ .code = rc, .record = sw_reader_records(r) };
				snprintf(err.msg, sizeof err.msg, "cannot select fields: %s", sw_strerror(rc));
				break;
			}
			if (w)
				cli_output_put(w, out, rec);
			n++;
			cli_progress(n, bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0 && !err.code)
			err = *sw_reader_error(r);
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
		if (rc < 0) {
			/* the good records before the bad one still go out */
			if (w)
				cli_output_end(w, out);
			cli_die_stream(name, &err);
		}
	}
	sw_rec_free(rec);
	free(keep);
	if (count) {
		printf("%llu\n", (unsigned long long)n);
	} else {
		uint64_t bytes_out = sw_writer_bytes_out(w);
		cli_output_close(w, out);
		cli_summary(n, bytes_in, bytes_out);
	}
	cli_exit(0);
}
