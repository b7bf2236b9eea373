/*
 * sw-sort - order samples by estimated cost (or any field), each prompt's
 * group kept together, streams larger than memory included.
 *
 * The sorting is libsw's (sw_sorter in sw/balance.h: runs spilled to
 * temporary files and merged, ties in input order, so the output is the
 * same whatever -S is); this file parses the options, reads the inputs and
 * writes the result, cut into buckets when asked.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sw/balance.h"
#include "sw/cost.h"

enum { OPT_NO_GROUP = 0x100, OPT_BUCKET, OPT_MODEL, OPT_STAGE };

static const cli_opt opts[] = {
	{ 'k', 'k', "key", "field", NULL, "sort by this numeric or string field instead of the cost" },
	{ 'r', 'r', "reverse", NULL, NULL, "largest first" },
	{ OPT_NO_GROUP, 0, "no-group", NULL, NULL, "sort samples one by one, not groups by their total" },
	{ 'S', 'S', "buffer-size", "size", NULL, "sort in memory up to size bytes (K, M, G), then spill (default 256M)" },
	{ 'T', 'T', "temporary-directory", "dir", "dir", "spill runs to dir (default $TMPDIR, else /tmp)" },
	{ OPT_BUCKET, 0, "bucket", "num", NULL, "split the sorted output into num buckets of equal count" },
	{ OPT_MODEL, 0, "model", "dir", "dir", "price samples for the model in dir (config.json, tokenizer)" },
	{ OPT_STAGE, 0, "stage", "stage", "generate|train", "price for generation (default) or training" },
	CLI_OPT_OUTPUT("write to file; with --bucket, a %d in the name makes a file per bucket"),
	CLI_OPT_FORMAT,
	CLI_OPT_ZSTD,
	CLI_OPT_FORCE_ENTRY,
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-sort", "[file ...]", "file",
	"Sort samples by estimated cost or by a field, keeping each group together.",
	opts, NULL
};

/* ---- output, cut into buckets ---- */

typedef struct out_ {
	cli_output o;
	int per_bucket;
	sw_writer *w;
	char *wname;         /* the open bucket's file */
	uint64_t total, nout, nbuckets, bytes_out;
	uint64_t bucket, last_group;
	sw_rec *rec;
} out_;

static const char *wname_(const out_ *o)
{
	return o->wname ? o->wname : o->o.path;
}

static void close_out_(out_ *o)
{
	o->bytes_out += sw_writer_bytes_out(o->w);
	cli_output_close(o->w, wname_(o));
	o->w = NULL;
}

/* Close the open bucket's file, and open the next's. */
static void next_bucket_(out_ *o)
{
	if (o->w)
		close_out_(o);
	o->bucket = o->bucket == UINT64_MAX ? 0 : o->bucket + 1;
	free(o->wname);
	o->wname = cli_output_nth(o->o.path, o->bucket);
	o->w = cli_output_open(&o->o, o->wname);
}

/* One record out, in order; group is its group's place (or the record's own without groups). */
static void emit_(out_ *o, const uint8_t *p, size_t n, uint64_t group)
{
	if (o->nbuckets) {
		if (group != o->last_group) {
			/* a group goes to the bucket where its first record falls */
			uint64_t b = o->nout * o->nbuckets / (o->total ? o->total : 1);
			if (b >= o->nbuckets)
				b = o->nbuckets - 1;
			while (o->per_bucket && (o->bucket == UINT64_MAX || o->bucket < b))
				next_bucket_(o);
			o->bucket = b;
			o->last_group = group;
		}
		if (sw_rec_load(o->rec, p, n))
			cli_die("a record changed on the way");
		int rc = sw_rec_set_u64(o->rec, "bucket", o->bucket);
		if (rc)
			cli_die("cannot set 'bucket': %s", sw_strerror(rc));
		cli_output_put(o->w, wname_(o), o->rec);
	} else if (sw_writer_put_raw(o->w, p, n)) {
		cli_die_stream(cli_output_name(o->o.path), sw_writer_error(o->w));
	}
	o->nout++;
}

/* ---- main ---- */

static uint64_t parse_size_(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (!*s || *s == '-' || errno || *end || x > (UINT64_MAX >> shift) || (x << shift) < (64u << 10))
		cli_usage("option '-S' wants a size of at least 64K (bytes, or with K, M or G), not '%s'", s);
	return x << shift;
}

int main(int argc, char **argv)
{
	const char *arg, *model = NULL;
	int c, optind_, train = 0;
	sw_sort_opts so = { .memory = (uint64_t)256 << 20 };
	out_ o = { .o = CLI_OUTPUT_INIT, .bucket = UINT64_MAX, .last_group = UINT64_MAX };
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		if (cli_output_opt(&o.o, c, arg))
			continue;
		switch (c) {
		case 'k':
			if (!*arg)
				cli_usage("option '-k' wants a field name");
			so.key = arg;
			break;
		case 'r':
			so.reverse = 1;
			break;
		case OPT_NO_GROUP:
			so.no_group = 1;
			break;
		case 'S':
			so.memory = parse_size_(arg);
			break;
		case 'T':
			so.tmpdir = arg;
			break;
		case OPT_BUCKET:
			o.nbuckets = cli_uint("--bucket", arg, 1, 1u << 20);
			break;
		case OPT_MODEL:
			model = arg;
			break;
		case OPT_STAGE:
			if (sw_cost_stage_parse(arg, &train))
				cli_usage("unknown stage '%s' (generate or train)", arg);
			break;
		}
	}
	o.per_bucket = cli_output_pattern(o.o.path, "bucket");
	if (o.per_bucket && !o.nbuckets)
		cli_usage("a %%d in the output name needs --bucket");
	sw_error err = { 0 };
	sw_cost_model *cm = NULL;
	if (!so.key && !(cm = sw_cost_model_for(model, train, &err)))
		cli_die("%s: %s", model ? model : "cost model", err.msg[0] ? err.msg : sw_strerror(err.code));
	so.cost = cm;
	so.max_record = cli_max_record();
	sw_sorter *s = sw_sorter_new(&so, &err);
	if (!s || !(o.rec = sw_rec_new()))
		cli_die("out of memory");
	/* as sw-cat: JSON Lines on a terminal unless a format or compression is
	 * asked for; binary there is refused at once, though the output is
	 * opened only once the input is read, so that it may be one of the
	 * inputs, as with sort(1) */
	cli_output_settle(&o.o);

	int nfiles;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);
	sw_rec *rec = sw_rec_new();
	uint64_t bytes_in = 0;
	if (!rec)
		cli_die("out of memory");
	for (int fi = 0; fi < nfiles; fi++) {
		const char *name = strcmp(files[fi], "-") ? files[fi] : "stdin";
		sw_reader *r = sw_reader_open(files[fi], &err);
		if (!r)
			cli_die("cannot open '%s': %s", files[fi], strerror(err.sys_errno));
		sw_reader_set_max_record(r, so.max_record);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			memset(&err, 0, sizeof err);
			if ((rc = sw_sorter_add(s, rec, &err)) == SW_EIO || rc == SW_ENOMEM)
				cli_die("%s", err.msg);
			if (rc)
				cli_die("%s: record %llu: %s", name, (unsigned long long)sw_reader_records(r), err.msg);
			cli_progress(sw_sorter_count(s), bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0)
			cli_die_stream(name, sw_reader_error(r));
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
	}
	sw_rec_free(rec);
	if (sw_sorter_finish(s, &err))
		cli_die("%s", err.msg);
	o.total = sw_sorter_count(s);
	if (!o.per_bucket)
		o.w = cli_output_open(&o.o, o.o.path);
	const uint8_t *p;
	size_t len;
	uint64_t group;
	int rc;
	while ((rc = sw_sorter_next(s, &p, &len, &group, &err)) == 1) {
		emit_(&o, p, len, group);
		cli_progress(o.nout, o.bytes_out + sw_writer_bytes_out(o.w));
	}
	if (rc < 0)
		cli_die("%s", err.msg);
	/* every bucket has its file, empty ones too */
	while (o.per_bucket && (o.bucket == UINT64_MAX || o.bucket + 1 < o.nbuckets))
		next_bucket_(&o);
	close_out_(&o);
	cli_summary(o.total, bytes_in, o.bytes_out);
	sw_sorter_free(s);
	sw_cost_model_free(cm);
	sw_rec_free(o.rec);
	free(o.wname);
	cli_exit(0);
}
