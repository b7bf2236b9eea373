/*
 * sw-pool - the central task pool: add prompts, take the ones with the most
 * learning signal, update their history from scored samples.
 *
 * The pool logic, the lock and the atomic rewrite (through libsw's one
 * atomic file) are libsw's (sw/pool.h); this program reads the streams,
 * reports, and turns errors into messages.
 * A bad record anywhere leaves the pool as it was: nothing is committed
 * until every input has been read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sw/pool.h"

enum { OPT_PASS = 0x100, OPT_FORCE };

static const cli_opt opts[] = {
	{ 'n', 'n', "count", "num", NULL, "take: how many prompts to hand out (default all, best first)" },
	{ OPT_PASS, 0, "pass", "reward", NULL, "update: a sample passes when its reward is at least this (default 1)" },
	{ 'o', 'o', "output", "file", "file", "take: write to file instead of standard output" },
	{ 'f', 'f', "format", "format", "msgpack|json", "take: write msgpack or json; default msgpack, json on a terminal" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "take: write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-pool", "command pool [file ...]", "file",
	"Keep a pool of prompts with their history: add, take by learning signal, update from scores.",
	opts, "add|take|update"
};

static sw_pool *open_(const char *path, int mode)
{
	sw_error err = { 0 };
	char buf[512];
	sw_pool *p = sw_pool_open(path, mode, &err);
	if (!p) {
		if (err.code == SW_EIO && err.msg[0] && !err.record)
			cli_die("%s", err.msg);
		/* a record-level message already says "record N"; the reader's need sw_error_str */
		if (!strncmp(err.msg, "record ", 7))
			cli_die("%s: %s", path, err.msg);
		cli_die("%s: %s", path, sw_error_str(&err, buf, sizeof buf));
	}
	return p;
}

static void commit_(sw_pool *p, const char *path)
{
	sw_error err = { 0 };
	if (sw_pool_commit(p, &err))
		cli_die("%s: %s", path, err.msg);
}

/* Feed every record of the inputs to fn; a bad stream or record ends the program, the pool untouched. */
static uint64_t each_(char **files, int nfiles, int (*fn)(sw_pool *, sw_rec *, void *, sw_error *), sw_pool *p,
                      void *arg)
{
	static char *stdin_only[] = { "-", NULL };
	static sw_rec *rec; /* static: still reachable when an error ends the program here */
	sw_error err = { 0 };
	rec = sw_rec_new();
	uint64_t n = 0;
	if (!rec)
		cli_die("out of memory");
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}
	for (int i = 0; i < nfiles; i++) {
		const char *name = strcmp(files[i], "-") ? files[i] : "stdin";
		sw_reader *r = sw_reader_open(files[i], &err);
		if (!r)
			cli_die("cannot open '%s': %s", files[i], strerror(err.sys_errno));
		sw_reader_set_max_record(r, cli_max_record());
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			memset(&err, 0, sizeof err);
			if (fn(p, rec, arg, &err) < 0)
				cli_die("%s: record %llu: %s", name, (unsigned long long)sw_reader_records(r), err.msg);
			n++;
		}
		if (rc < 0)
			cli_die_stream(name, sw_reader_error(r));
		sw_reader_free(r);
	}
	sw_rec_free(rec);
	return n;
}

static int add_one_(sw_pool *p, sw_rec *rec, void *arg, sw_error *err)
{
	int rc = sw_pool_add(p, rec, err);
	if (rc == 1)
		++*(uint64_t *)arg;
	if (rc < 0 && !strncmp(err->msg, "record 0: ", 10))
		memmove(err->msg, err->msg + 10, strlen(err->msg + 10) + 1); /* the caller names the record */
	return rc;
}

typedef struct obs_ {
	double pass;
	uint64_t skipped;
} obs_;

static int observe_one_(sw_pool *p, sw_rec *rec, void *arg, sw_error *err)
{
	obs_ *o = arg;
	int rc = sw_pool_observe(p, rec, o->pass, err);
	if (rc == 0)
		o->skipped++;
	return rc;
}

int main(int argc, char **argv)
{
	const char *arg, *out = "-";
	int c, optind_, force = 0, fmt_set = 0, have_n = 0;
	uint64_t count = 0;
	double pass = 1;
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'n':
			count = cli_uint("-n", arg, 0, UINT64_MAX);
			have_n = 1;
			break;
		case OPT_PASS: {
			char *end;
			errno = 0;
			pass = strtod(arg, &end);
			if (!*arg || *end || errno || pass != pass)
				cli_usage("option '--pass' wants a number, not '%s'", arg);
			break;
		}
		case 'o':
			out = arg;
			break;
		case 'f':
			wo.format = cli_format(arg);
			fmt_set = 1;
			break;
		case OPT_FORCE:
			force = 1;
			break;
		}
	}
	if (argc - optind_ < 1)
		cli_usage("a command is needed: add, take or update");
	const char *cmd = argv[optind_];
	if (strcmp(cmd, "add") && strcmp(cmd, "take") && strcmp(cmd, "update"))
		cli_usage("unknown command '%s' (add, take or update)", cmd);
	if (argc - optind_ < 2)
		cli_usage("'%s' needs a pool file", cmd);
	const char *path = argv[optind_ + 1];
	char **files = argv + optind_ + 2;
	int nfiles = argc - optind_ - 2;

	if (!strcmp(cmd, "add")) {
		sw_pool *p = open_(path, SW_POOL_CREATE);
		uint64_t added = 0, n = each_(files, nfiles, add_one_, p, &added);
		commit_(p, path);
		if (cli_progress_on())
			cli_note("%s: added %llu of %llu prompts (%llu already there), %zu in all", path,
			         (unsigned long long)added, (unsigned long long)n, (unsigned long long)(n - added),
			         sw_pool_count(p));
		sw_pool_free(p);
	} else if (!strcmp(cmd, "update")) {
		sw_pool *p = open_(path, SW_POOL_UPDATE);
		obs_ o = { pass, 0 };
		uint64_t n = each_(files, nfiles, observe_one_, p, &o);
		size_t k = sw_pool_update(p);
		commit_(p, path);
		if (o.skipped && cli_verbosity >= 0)
			cli_warn("%s: %llu samples with verifier_error not counted (they have no trustworthy reward)", path,
			         (unsigned long long)o.skipped);
		if (cli_progress_on())
			cli_note("%s: round %llu: %llu samples, %zu prompts updated", path,
			         (unsigned long long)sw_pool_round(p), (unsigned long long)(n - o.skipped), k);
		sw_pool_free(p);
	} else {
		if (nfiles)
			cli_usage("'take' reads no files, only the pool");
		sw_pool *p = open_(path, SW_POOL_READ);
		size_t total = sw_pool_count(p), want = have_n && count < total ? (size_t)count : total;
		size_t *idx = cli_calloc(want, sizeof *idx);
		sw_rec *rec = sw_rec_new();
		if (!rec)
			cli_die("out of memory");
		cli_output_format(out, &wo, fmt_set, force);
		sw_writer *w = cli_writer_open(out, &wo);
		size_t got = sw_pool_take(p, want, idx);
		if (got != want)
			cli_die("out of memory");
		for (size_t i = 0; i < got; i++) {
			int rc = sw_pool_get(p, idx[i], rec, NULL);
			if (rc)
				cli_die("cannot read prompt %zu: %s", idx[i] + 1, sw_strerror(rc));
			if (sw_writer_put(w, rec))
				cli_die_stream(strcmp(out, "-") ? out : "stdout", sw_writer_error(w));
		}
		cli_output_close(w, out);
		sw_rec_free(rec);
		free(idx);
		sw_pool_free(p);
	}
	cli_exit(0);
}
