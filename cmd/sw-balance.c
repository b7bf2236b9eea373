/*
 * sw-balance - set abnormal samples aside, then place the rest on ranks so
 * that every rank does equal work, and cut each rank's share into
 * micro-batches under a token budget, the same number on every rank.
 *
 * The work is libsw's (sw_balancer in sw/balance.h, priced by the cost
 * model of sw/cost.h shared with sw-sort); this file parses the options,
 * reads the batch, reports the drops and writes the samples, the rejects
 * and the statistics.  Every dropped sample is counted by reason and, with
 * --rejects, written out with the reason: nothing is lost.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sw/balance.h"
#include "sw/cost.h"

enum {
	OPT_CAPACITY = 0x100, OPT_SPLIT, OPT_MAX_TOKENS, OPT_MAX_LEN, OPT_UNIFORM, OPT_REJECTS, OPT_STATS,
	OPT_MODEL, OPT_STAGE
};

static const cli_opt opts[] = {
	{ 'n', 'n', "ranks", "num", NULL, "number of ranks (default: as many as capacities, else 1)" },
	{ 'm', 'm', "method", "method", "kk|lpt|seq", "partitioner: kk (Karmarkar-Karp, default), lpt or seq" },
	{ OPT_CAPACITY, 0, "capacity", "list", NULL, "relative capacity of each rank, comma-separated" },
	{ OPT_SPLIT, 0, "split-groups", NULL, NULL, "place samples one by one instead of whole groups" },
	{ OPT_MAX_TOKENS, 0, "max-tokens", "num", NULL, "cut each rank's share into micro-batches of at most num tokens" },
	{ OPT_MAX_LEN, 0, "max-len", "num", NULL, "drop samples of more than num tokens" },
	{ OPT_UNIFORM, 0, "drop-uniform-groups", NULL, NULL, "drop groups whose rewards are all equal" },
	{ OPT_REJECTS, 0, "rejects", "file", "file", "write every dropped sample, with its reason, to file" },
	{ OPT_STATS, 0, "stats", "file", "file", "write the balance and the drops as JSON to file" },
	{ OPT_MODEL, 0, "model", "dir", "dir", "price samples for the model in dir (config.json, tokenizer)" },
	{ OPT_STAGE, 0, "stage", "stage", "generate|train", "price for generation or training (default train)" },
	CLI_OPT_OUTPUT("write to file; a %d in the name makes one file per rank"),
	CLI_OPT_FORMAT,
	CLI_OPT_ZSTD,
	CLI_OPT_FORCE_ENTRY,
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-balance", "[file ...]", "file",
	"Drop abnormal samples and partition the rest across ranks and micro-batches by cost.",
	opts, NULL
};

/* ---- options ---- */

static double *parse_capacity_(const char *arg, size_t *n)
{
	double *cap = NULL;
	size_t k = 0;
	const char *p = arg;
	for (;;) {
		char *end;
		errno = 0;
		double x = strtod(p, &end);
		if (end == p || errno || !isfinite(x) || x <= 0 || (*end && *end != ','))
			cli_usage("option '--capacity' wants positive numbers separated by commas, not '%s'", arg);
		cap = cli_realloc(cap, k + 1, sizeof *cap);
		cap[k++] = x;
		if (!*end)
			break;
		p = end + 1;
	}
	*n = k;
	return cap;
}

static void set_(int rc)
{
	if (rc)
		cli_die("cannot set a field: %s", sw_strerror(rc));
}

static const char *in_name_(const char *file)
{
	return strcmp(file, "-") ? file : "stdin";
}

/* A sample's bytes into rec. */
static void load_(sw_rec *rec, const sw_balance_sample *x)
{
	if (sw_rec_load(rec, x->bytes, x->len))
		cli_die("cannot reload a sample");
}

/* ---- reports ---- */

/* The drops, not silently: the first few by name, then the count by reason. */
static void report_(const sw_balancer *b, char **files, int rejects, uint64_t max_tokens)
{
	sw_balance_summary su;
	sw_balancer_summary(b, &su);
	if (cli_verbosity < 0)
		return;
	if (su.dropped) {
		int shown = 0;
		for (size_t i = 0; i < su.samples && shown < 10; i++) {
			sw_balance_sample x;
			sw_balancer_sample(b, i, &x);
			if (x.reason == SW_DROP_KEPT)
				continue;
			cli_warn("%s: record %llu: dropped (%s): %s", in_name_(files[x.file]), (unsigned long long)x.record,
			         sw_drop_name(x.reason), x.detail);
			shown++;
		}
		char line[512];
		int len = snprintf(line, sizeof line, "dropped %zu of %zu samples:", su.dropped, su.samples);
		for (int r = 1, first = 1; r < SW_DROP_N; r++)
			if (su.drops[r] && len < (int)sizeof line - 40) {
				len += snprintf(line + len, sizeof line - (size_t)len, "%s %llu %s", first ? "" : ",",
				                (unsigned long long)su.drops[r], sw_drop_name((sw_drop)r));
				first = 0;
			}
		cli_warn("%s%s", line, rejects ? "" : " (keep them with --rejects FILE)");
	}
	if (su.over_budget)
		cli_warn("%zu samples over --max-tokens %llu, each in a micro-batch of its own", su.over_budget,
		         (unsigned long long)max_tokens);
	if (su.empty_micro_batches)
		cli_warn("%zu micro-batches are empty: a rank has fewer samples than the %zu micro-batches",
		         su.empty_micro_batches, su.micro_batches);
}

static void stats_(const sw_balancer *b, const char *path)
{
	sw_error err = { 0 };
	size_t len;
	char *json = sw_balancer_stats_json(b, &len, &err);
	if (!json)
		cli_die("out of memory");
	FILE *f = fopen(path, "w");
	if (!f)
		cli_die("cannot write '%s': %s", path, strerror(errno));
	fwrite(json, 1, len, f);
	if (fflush(f) || ferror(f) || fclose(f))
		cli_die("cannot write '%s': %s", path, strerror(errno));
	free(json);
}

int main(int argc, char **argv)
{
	const char *arg, *rejects = NULL, *stats = NULL, *model = NULL;
	int c, optind_, train = 1;
	size_t ncap = 0;
	sw_balance_opts bo = { .method = SW_PART_KK };
	double *cap = NULL;
	cli_output o = CLI_OUTPUT_INIT;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		if (cli_output_opt(&o, c, arg))
			continue;
		switch (c) {
		case 'n':
			bo.ranks = cli_uint("-n", arg, 1, 65536);
			break;
		case 'm':
			if (sw_part_method_parse(arg, &bo.method))
				cli_usage("unknown method '%s' (kk, lpt or seq)", arg);
			break;
		case OPT_CAPACITY:
			free(cap);
			cap = parse_capacity_(arg, &ncap);
			break;
		case OPT_SPLIT:
			bo.split_groups = 1;
			break;
		case OPT_MAX_TOKENS:
			bo.max_tokens = cli_uint("--max-tokens", arg, 1, UINT64_MAX);
			break;
		case OPT_MAX_LEN:
			bo.max_len = cli_uint("--max-len", arg, 1, UINT64_MAX);
			break;
		case OPT_UNIFORM:
			bo.drop_uniform = 1;
			break;
		case OPT_REJECTS:
			rejects = arg;
			break;
		case OPT_STATS:
			stats = arg;
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
	if (cap && ncap > 65536)
		cli_usage("option '--capacity' gives %zu capacities, more than 65536 ranks", ncap);
	if (cap && bo.ranks && ncap != bo.ranks)
		cli_usage("option '--capacity' gives %zu capacities for %zu ranks", ncap, bo.ranks);
	if (!bo.ranks)
		bo.ranks = cap ? ncap : 1;
	bo.capacity = cap;
	int per_rank = cli_output_pattern(o.path, "rank");
	/* as sw-cat: JSON Lines on a terminal unless a format or compression is
	 * asked for; binary there is refused at once, before the batch is read */
	cli_output_settle(&o);

	int nfiles;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);

	sw_error err = { 0 };
	sw_cost_model *cm = sw_cost_model_for(model, train, &err);
	if (!cm)
		cli_die("%s: %s", model ? model : "cost model", err.msg[0] ? err.msg : sw_strerror(err.code));
	bo.cost = cm;
	sw_balancer *b = sw_balancer_new(&bo, &err);
	sw_rec *rec = sw_rec_new();
	if (!b || !rec)
		cli_die("out of memory");

	/* read every sample; it is judged as it comes */
	uint64_t bytes_in = 0;
	size_t max_record = cli_max_record();
	for (int fi = 0; fi < nfiles; fi++) {
		const char *name = in_name_(files[fi]);
		sw_reader *r = sw_reader_open(files[fi], &err);
		if (!r)
			cli_die("cannot open '%s': %s", files[fi], strerror(err.sys_errno));
		sw_reader_set_max_record(r, max_record);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			if (sw_balancer_add(b, rec, (uint32_t)fi, sw_reader_records(r), &err))
				cli_die("out of memory");
			cli_progress(sw_balancer_count(b), bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0)
			cli_die_stream(name, sw_reader_error(r));
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
	}
	if (sw_balancer_run(b, &err))
		cli_die("%s", err.msg);
	report_(b, files, rejects != NULL, bo.max_tokens);

	size_t n = sw_balancer_count(b), nk = sw_balancer_kept(b);
	sw_balance_sample x;
	if (rejects) {
		cli_output ro = o;
		ro.force = 1;
		sw_writer *rw = cli_output_open(&ro, rejects);
		for (size_t i = 0; i < n; i++) {
			sw_balancer_sample(b, i, &x);
			if (x.reason == SW_DROP_KEPT)
				continue;
			load_(rec, &x);
			const char *why = sw_drop_name(x.reason);
			set_(sw_rec_set_str(rec, "drop_reason", why, strlen(why)));
			set_(sw_rec_set_str(rec, "drop_detail", x.detail, strlen(x.detail)));
			cli_output_put(rw, rejects, rec);
		}
		cli_output_close(rw, rejects);
	}

	sw_writer *w = NULL;
	char *wname = NULL;
	uint64_t bytes_out = 0;
	if (!per_rank)
		w = cli_output_open(&o, o.path);
	for (size_t r = 0, j = 0; r < (per_rank ? bo.ranks : 1); r++) {
		if (per_rank) {
			wname = cli_output_nth(o.path, r);
			w = cli_output_open(&o, wname);
		}
		for (; j < nk; j++) {
			sw_balancer_sample(b, sw_balancer_at(b, j), &x);
			if (per_rank && x.rank != r)
				break;
			load_(rec, &x);
			set_(sw_rec_set_f32(rec, "cost", (float)x.cost));
			set_(sw_rec_set_u64(rec, "rank", x.rank));
			set_(sw_rec_set_u64(rec, "micro", x.micro));
			cli_output_put(w, per_rank ? wname : o.path, rec);
		}
		bytes_out += sw_writer_bytes_out(w);
		cli_output_close(w, per_rank ? wname : o.path);
		free(wname);
		wname = NULL;
	}
	if (stats)
		stats_(b, stats);
	cli_summary(n, bytes_in, bytes_out);

	free(cap);
	sw_balancer_free(b);
	sw_rec_free(rec);
	sw_cost_model_free(cm);
	cli_exit(0);
}
