/*
 * sw-balance - set abnormal samples aside, then place the rest on ranks so
 * that every rank does equal work, and cut each rank's share into
 * micro-batches under a token budget, the same number on every rank.
 *
 * The whole batch is held in memory (a training batch is): the records'
 * bytes in one buffer, a small struct per sample.  Costs come from the cost
 * model shared with sw-sort (sw/cost.h); the partitioners are libsw's
 * (sw/balance.h).  Every dropped sample is counted by reason and, with
 * --rejects, written out with the reason: nothing is lost.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sw/balance.h"
#include "sw/cost.h"

enum {
	OPT_CAPACITY = 0x100, OPT_SPLIT, OPT_MAX_TOKENS, OPT_MAX_LEN, OPT_UNIFORM, OPT_REJECTS, OPT_STATS,
	OPT_MODEL, OPT_STAGE, OPT_FORCE
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
	{ 'o', 'o', "output", "file", "file", "write to file; a %d in the name makes one file per rank" },
	{ 'f', 'f', "format", "format", "msgpack|json", "write msgpack or json (JSON Lines); default msgpack, json on a terminal" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the output with zstd" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-balance", "[file ...]", "file",
	"Drop abnormal samples and partition the rest across ranks and micro-batches by cost.",
	opts
};

/* Why a sample was dropped; KEPT for the others.  The names are the output's. */
enum { KEPT, R_MALFORMED, R_NON_FINITE, R_VERIFIER_ERROR, R_EMPTY, R_TOO_LONG, R_NO_REWARD, R_UNIFORM, NREASONS };
static const char *const reason_name_[NREASONS] = {
	"kept", "malformed", "non_finite", "verifier_error", "empty", "too_long", "no_reward", "uniform_group"
};

typedef struct samp_ {
	size_t off;        /* its bytes in the store */
	uint32_t len;
	uint32_t group;    /* index into the groups */
	uint32_t file;     /* which input, and its record number there, for messages */
	uint64_t record;
	uint64_t tokens;
	double cost;
	double reward;
	int has_reward;
	int reason;
	char *detail;      /* why, for the rejects; malloc'd or NULL */
	uint32_t rank, micro;
} samp_;

static char **files_;

/* The records' bytes, back to back. */
typedef struct store_ {
	uint8_t *p;
	size_t len, cap;
} store_;

static void store_put_(store_ *b, const void *p, size_t n)
{
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 1 << 20;
		while (cap - b->len < n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q)
			cli_die("out of memory");
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* ---- checks ---- */

static int fail_(samp_ *s, int reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_(samp_ *s, int reason, const char *fmt, ...)
{
	char buf[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	s->reason = reason;
	s->detail = strdup(buf);
	if (!s->detail)
		cli_die("out of memory");
	return reason;
}

/* An array of token ids: its length, or a reason. */
static int token_array_(samp_ *s, sw_rec *rec, const char *key, int64_t *count)
{
	sw_val v, x;
	sw_iter it;
	int rc = sw_rec_get(rec, key, &v);
	*count = -1;
	if (rc == SW_ENOENT)
		return 0;
	if (rc || v.type != SW_T_ARRAY)
		return fail_(s, R_MALFORMED, "field '%s' is a %s, not an array", key, rc ? "bad value" : sw_type_name(v.type));
	sw_iter_init(&it, &v);
	for (uint32_t i = 0; (rc = sw_iter_next(&it, &x)) == 1; i++)
		if (x.type != SW_T_UINT || x.v.u > UINT32_MAX)
			return fail_(s, R_MALFORMED, "field '%s': value %u is a %s, not a token id", key, i,
			             sw_type_name(x.type));
	if (rc < 0)
		return fail_(s, R_MALFORMED, "field '%s' is corrupt", key);
	*count = v.v.count;
	return 0;
}

/* A finite number, when present. */
static int number_(samp_ *s, sw_rec *rec, const char *key, double *out, int *has)
{
	sw_val v;
	int rc = sw_rec_get(rec, key, &v);
	*has = 0;
	if (rc == SW_ENOENT)
		return 0;
	if (rc || sw_val_number(&v, out))
		return fail_(s, R_MALFORMED, "field '%s' is a %s, not a number", key, rc ? "bad value" : sw_type_name(v.type));
	if (!isfinite(*out))
		return fail_(s, R_NON_FINITE, "field '%s' is %g", key, *out);
	*has = 1;
	return 0;
}

/* Every check of one sample, in order of precedence; sets s->reason. */
static void check_(samp_ *s, sw_rec *rec, const sw_cost_model *cm, uint64_t max_len)
{
	sw_val v, x;
	sw_iter it;
	sw_error e = { 0 };
	sw_cost c;
	int64_t nresp, nprompt;
	double d;
	int has;

	if (sw_cost_sample(cm, rec, &c, &e)) {
		fail_(s, R_MALFORMED, "%s", e.msg);
		return;
	}
	s->tokens = c.tokens;
	s->cost = (double)(float)c.total; /* as written, so that a re-run agrees */
	if (token_array_(s, rec, "prompt_tokens", &nprompt) || token_array_(s, rec, "response_tokens", &nresp))
		return;
	if (sw_rec_get(rec, "logprobs", &v) == 0) {
		if (v.type != SW_T_ARRAY) {
			fail_(s, R_MALFORMED, "field 'logprobs' is a %s, not an array", sw_type_name(v.type));
			return;
		}
		if (nresp < 0) {
			fail_(s, R_MALFORMED, "field 'logprobs' without 'response_tokens'");
			return;
		}
		if ((int64_t)v.v.count != nresp) {
			fail_(s, R_MALFORMED, "field 'logprobs' has %u values, 'response_tokens' has %lld", v.v.count,
			      (long long)nresp);
			return;
		}
		sw_iter_init(&it, &v);
		for (uint32_t i = 0; sw_iter_next(&it, &x) == 1; i++) {
			if (sw_val_number(&x, &d)) {
				fail_(s, R_MALFORMED, "field 'logprobs': value %u is a %s, not a number", i, sw_type_name(x.type));
				return;
			}
			if (!isfinite(d)) {
				fail_(s, R_NON_FINITE, "field 'logprobs': value %u is %g", i, d);
				return;
			}
		}
	}
	if (number_(s, rec, "reward", &s->reward, &s->has_reward) || number_(s, rec, "advantage", &d, &has))
		return;
	if (sw_rec_get(rec, "rewards", &v) == 0) {
		if (v.type != SW_T_MAP) {
			fail_(s, R_MALFORMED, "field 'rewards' is a %s, not a map", sw_type_name(v.type));
			return;
		}
		sw_val k;
		sw_iter_init(&it, &v);
		while (sw_iter_next(&it, &k) == 1 && sw_iter_next(&it, &x) == 1) {
			int klen = k.type == SW_T_STR ? (int)(k.v.str.len > 64 ? 64 : k.v.str.len) : 1;
			const char *kp = k.type == SW_T_STR ? k.v.str.ptr : "?";
			if (sw_val_number(&x, &d)) {
				fail_(s, R_MALFORMED, "field 'rewards': '%.*s' is a %s, not a number", klen, kp, sw_type_name(x.type));
				return;
			}
			if (!isfinite(d)) {
				fail_(s, R_NON_FINITE, "field 'rewards': '%.*s' is %g", klen, kp, d);
				return;
			}
		}
	}
	if (sw_rec_get(rec, "verifier_error", &v) == 0 && v.type != SW_T_NIL) {
		if (v.type == SW_T_STR)
			fail_(s, R_VERIFIER_ERROR, "%.*s", (int)(v.v.str.len > 200 ? 200 : v.v.str.len), v.v.str.ptr);
		else
			fail_(s, R_VERIFIER_ERROR, "verifier_error is set");
		return;
	}
	const char *resp;
	size_t rlen;
	int empty_resp = nresp == 0 || (nresp < 0 && sw_rec_get_str(rec, "response", &resp, &rlen) == 0 && rlen == 0);
	if (c.tokens == 0 || empty_resp) {
		fail_(s, R_EMPTY, c.tokens == 0 ? "no tokens" : "empty response");
		return;
	}
	if (max_len && c.tokens > max_len)
		fail_(s, R_TOO_LONG, "%llu tokens, more than --max-len %llu", (unsigned long long)c.tokens,
		      (unsigned long long)max_len);
}

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
		double *c = realloc(cap, (k + 1) * sizeof *c);
		if (!c)
			cli_die("out of memory");
		cap = c;
		cap[k++] = x;
		if (!*end)
			break;
		p = end + 1;
	}
	*n = k;
	return cap;
}

/* The output name of rank r: the pattern with its %d filled in. */
static char *rank_name_(const char *pattern, uint32_t r)
{
	size_t n = strlen(pattern) + 16;
	char *s = malloc(n);
	if (!s)
		cli_die("out of memory");
	snprintf(s, n, pattern, (int)r); /* checked by check_pattern_: one %d, no other conversion */
	return s;
}

/* 1 when pattern holds one %d (and %% only besides), 0 when no %, else a usage error. */
static int check_pattern_(const char *pattern)
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
		cli_usage("option '-o' wants one %%d for the rank and no other %% conversion, not '%s'", pattern);
	return d;
}

/* ---- output ---- */

static sw_writer *open_out_(const char *name, const sw_writer_opts *wo, int force)
{
	sw_error err = { 0 };
	if (!strcmp(name, "-") && !cli_binary_ok(1, force) && (wo->format == SW_FMT_MSGPACK || wo->zstd_level))
		cli_usage("refusing to write binary to a terminal (use -f json, -o FILE or --force)");
	sw_writer *w = sw_writer_open(name, wo, &err);
	if (!w)
		cli_die("cannot write '%s': %s", name, err.sys_errno ? strerror(err.sys_errno) : err.msg);
	return w;
}

static void close_out_(sw_writer *w, const char *name)
{
	if (sw_writer_close(w))
		cli_die_stream(strcmp(name, "-") ? name : "stdout", sw_writer_error(w));
	sw_writer_free(w);
}

static void put_(sw_writer *w, const char *name, sw_rec *rec)
{
	if (sw_writer_put(w, rec))
		cli_die_stream(strcmp(name, "-") ? name : "stdout", sw_writer_error(w));
}

static void set_(int rc)
{
	if (rc)
		cli_die("cannot set a field: %s", sw_strerror(rc));
}

/* ---- statistics ---- */

static void stats_(const char *path, size_t k, const double *cap, sw_part_method method, size_t nsamp,
                   const samp_ *s, const uint64_t *drops, size_t ngroups, size_t nitems, const double *load,
                   const sw_part_stats *st, size_t micro, size_t over, size_t empty_micro)
{
	FILE *f = fopen(path, "w");
	if (!f)
		cli_die("cannot write '%s': %s", path, strerror(errno));
	size_t *count = calloc(k, sizeof *count), *groups = calloc(k, sizeof *groups);
	uint64_t *tokens = calloc(k, sizeof *tokens), kept = 0, dropped = 0;
	uint32_t *last = malloc(k * sizeof *last);
	if (!count || !groups || !tokens || !last)
		cli_die("out of memory");
	for (size_t r = 0; r < k; r++)
		last[r] = UINT32_MAX;
	for (size_t i = 0; i < nsamp; i++) {
		if (s[i].reason != KEPT)
			continue;
		count[s[i].rank]++;
		tokens[s[i].rank] += s[i].tokens;
		kept++;
	}
	/* groups per rank: samples of a group are on one rank unless split; count distinct */
	for (size_t i = 0; i < nsamp; i++)
		if (s[i].reason == KEPT && last[s[i].rank] != s[i].group) {
			groups[s[i].rank]++;
			last[s[i].rank] = s[i].group;
		}
	double csum = 0, mean = st->total / (double)k, max = 0;
	for (size_t r = 0; r < k; r++) {
		csum += cap ? cap[r] : 1;
		max = load[r] > max ? load[r] : max;
	}
	for (int r = 1; r < NREASONS; r++)
		dropped += drops[r];
	fprintf(f, "{\"ranks\":%zu,\"method\":\"%s\",\"samples\":%zu,\"kept\":%llu,\"dropped\":%llu,\"drops\":{",
	        k, sw_part_method_name(method), nsamp, (unsigned long long)kept, (unsigned long long)dropped);
	for (int r = 1; r < NREASONS; r++)
		fprintf(f, "%s\"%s\":%llu", r > 1 ? "," : "", reason_name_[r], (unsigned long long)drops[r]);
	fprintf(f, "},\"groups\":%zu,\"items\":%zu,", ngroups, nitems);
	fprintf(f, "\"cost\":{\"total\":%.17g,\"max\":%.17g,\"mean\":%.17g},", st->total, max, mean);
	fprintf(f, "\"imbalance\":{\"max_over_mean\":%.17g,\"max_over_lower_bound\":%.17g,\"lower_bound_over_mean\":%.17g},",
	        st->imbalance, st->over_bound, st->lower_bound);
	fprintf(f, "\"micro_batches\":%zu,\"over_budget\":%zu,\"empty_micro_batches\":%zu,\"per_rank\":[", micro, over,
	        empty_micro);
	for (size_t r = 0; r < k; r++)
		fprintf(f, "%s{\"rank\":%zu,\"capacity\":%.17g,\"samples\":%zu,\"groups\":%zu,\"tokens\":%llu,"
		        "\"cost\":%.17g,\"share\":%.17g,\"capacity_share\":%.17g}",
		        r ? "," : "", r, cap ? cap[r] : 1.0, count[r], groups[r], (unsigned long long)tokens[r], load[r],
		        st->total > 0 ? load[r] / st->total : 0.0, (cap ? cap[r] : 1.0) / csum);
	fprintf(f, "]}\n");
	if (fflush(f) || ferror(f) || fclose(f))
		cli_die("cannot write '%s': %s", path, strerror(errno));
	free(count);
	free(groups);
	free(tokens);
	free(last);
}

int main(int argc, char **argv)
{
	const char *arg, *out = "-", *rejects = NULL, *stats = NULL, *model = NULL;
	int c, optind_, force = 0, split = 0, uniform = 0, train = 1, fmt_set = 0;
	size_t k = 0, ncap = 0;
	double *cap = NULL;
	uint64_t max_tokens = 0, max_len = 0;
	sw_part_method method = SW_PART_KK;
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'n':
			k = cli_uint("-n", arg, 1, 65536);
			break;
		case 'm':
			if (sw_part_method_parse(arg, &method))
				cli_usage("unknown method '%s' (kk, lpt or seq)", arg);
			break;
		case OPT_CAPACITY:
			free(cap);
			cap = parse_capacity_(arg, &ncap);
			break;
		case OPT_SPLIT:
			split = 1;
			break;
		case OPT_MAX_TOKENS:
			max_tokens = cli_uint("--max-tokens", arg, 1, UINT64_MAX);
			break;
		case OPT_MAX_LEN:
			max_len = cli_uint("--max-len", arg, 1, UINT64_MAX);
			break;
		case OPT_UNIFORM:
			uniform = 1;
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
			if (!strcmp(arg, "train"))
				train = 1;
			else if (!strcmp(arg, "generate"))
				train = 0;
			else
				cli_usage("unknown stage '%s' (generate or train)", arg);
			break;
		case 'o':
			out = arg;
			break;
		case 'f':
			wo.format = cli_format(arg);
			fmt_set = 1;
			break;
		case 'z':
			wo.zstd_level = 3;
			break;
		case OPT_FORCE:
			force = 1;
			break;
		}
	}
	if (cap && ncap > 65536)
		cli_usage("option '--capacity' gives %zu capacities, more than 65536 ranks", ncap);
	if (cap && k && ncap != k)
		cli_usage("option '--capacity' gives %zu capacities for %zu ranks", ncap, k);
	if (!k)
		k = cap ? ncap : 1;
	int per_rank = check_pattern_(out);
	/* as sw-cat: JSON Lines on a terminal unless a format or compression is asked for */
	if (!strcmp(out, "-") && isatty(1) && !fmt_set && !wo.zstd_level)
		wo.format = SW_FMT_JSON;

	files_ = argv + optind_;
	int nfiles = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles == 0) {
		files_ = stdin_only;
		nfiles = 1;
	}

	sw_error err = { 0 };
	sw_cost_model *cm = model ? sw_cost_model_load(model, &err) : sw_cost_model_new();
	if (!cm)
		cli_die("%s: %s", model ? model : "cost model", err.msg[0] ? err.msg : sw_strerror(err.code));
	sw_cost_model_set_train(cm, train);

	/* read every sample; check it as it comes */
	store_ store = { 0 };
	samp_ *s = NULL;
	size_t n = 0, scap = 0;
	uint64_t bytes_in = 0;
	sw_groups *groups = sw_groups_new();
	sw_rec *rec = sw_rec_new();
	if (!groups || !rec)
		cli_die("out of memory");
	size_t max_record = cli_max_record();
	for (int fi = 0; fi < nfiles; fi++) {
		const char *name = strcmp(files_[fi], "-") ? files_[fi] : "stdin";
		sw_reader *r = sw_reader_open(files_[fi], &err);
		if (!r)
			cli_die("cannot open '%s': %s", files_[fi], strerror(err.sys_errno));
		sw_reader_set_max_record(r, max_record);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			const uint8_t *p;
			size_t len;
			if (n == scap) {
				scap = scap ? 2 * scap : 1024;
				samp_ *ns = realloc(s, scap * sizeof *s);
				if (!ns)
					cli_die("out of memory");
				s = ns;
			}
			samp_ *x = &s[n];
			memset(x, 0, sizeof *x);
			x->file = (uint32_t)fi;
			x->record = sw_reader_records(r);
			x->off = store.len;
			if (sw_rec_bytes(rec, &p, &len) || len > UINT32_MAX)
				cli_die("out of memory");
			store_put_(&store, p, len);
			x->len = (uint32_t)len;
			check_(x, rec, cm, max_len);
			/* the group: its name, or the sample alone under a name no group string can have */
			const char *g;
			size_t glen;
			char own[40];
			int grc = sw_rec_get_str(rec, "group", &g, &glen);
			if (grc == SW_ETYPE && x->reason == KEPT)
				fail_(x, R_MALFORMED, "field 'group' is not a str");
			if (grc) {
				glen = (size_t)snprintf(own, sizeof own, "%c#%zu", 0, n);
				g = own;
			}
			if (sw_groups_add(groups, g, glen, &x->group) < 0)
				cli_die("out of memory");
			n++;
			cli_progress(n, bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0)
			cli_die_stream(name, sw_reader_error(r));
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
	}
	size_t ngroups = sw_groups_count(groups);

	/* groups without learning signal: every reward the same */
	if (uniform) {
		double *first = malloc((ngroups ? ngroups : 1) * sizeof *first);
		unsigned char *state = calloc(ngroups ? ngroups : 1, 1); /* 0 none yet, 1 all equal, 2 differ */
		if (!first || !state)
			cli_die("out of memory");
		for (size_t i = 0; i < n; i++) {
			if (s[i].reason != KEPT)
				continue;
			if (!s[i].has_reward) {
				fail_(&s[i], R_NO_REWARD, "no 'reward' to judge the group by");
				continue;
			}
			uint32_t g = s[i].group;
			if (state[g] == 0) {
				first[g] = s[i].reward;
				state[g] = 1;
			} else if (s[i].reward != first[g]) {
				state[g] = 2;
			}
		}
		for (size_t i = 0; i < n; i++)
			if (s[i].reason == KEPT && state[s[i].group] == 1)
				fail_(&s[i], R_UNIFORM, "every reward of the group is %g", first[s[i].group]);
		free(first);
		free(state);
	}

	uint64_t drops[NREASONS] = { 0 };
	for (size_t i = 0; i < n; i++)
		drops[s[i].reason]++;

	/* the items to place: whole groups, or single samples */
	uint32_t *item_of = malloc((split ? (n ? n : 1) : (ngroups ? ngroups : 1)) * sizeof *item_of);
	double *icost = malloc((n ? n : 1) * sizeof *icost);
	uint32_t *ipart = malloc((n ? n : 1) * sizeof *ipart);
	if (!item_of || !icost || !ipart)
		cli_die("out of memory");
	size_t nitems = 0;
	if (!split)
		for (size_t g = 0; g < ngroups; g++)
			item_of[g] = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		if (s[i].reason != KEPT)
			continue;
		uint32_t *slot = split ? &item_of[i] : &item_of[s[i].group];
		if (split || *slot == UINT32_MAX) {
			*slot = (uint32_t)nitems;
			icost[nitems++] = 0;
		}
		icost[*slot] += s[i].cost;
	}
	if (sw_partition(icost, nitems, k, cap, method, ipart, &err))
		cli_die("cannot partition: %s", err.msg);
	double *load = calloc(k, sizeof *load);
	sw_part_stats st;
	if (!load || sw_partition_stats(icost, nitems, k, cap, ipart, load, &st))
		cli_die("out of memory");
	for (size_t i = 0; i < n; i++)
		if (s[i].reason == KEPT)
			s[i].rank = ipart[split ? item_of[i] : item_of[s[i].group]];

	/* micro-batches: as many on every rank as the fullest rank needs */
	size_t nmicro = 1, over = 0, empty_micro = 0;
	if (max_tokens) {
		uint64_t *tok = malloc((n ? n : 1) * sizeof *tok);
		uint32_t *idx = malloc((n ? n : 1) * sizeof *idx), *mic = malloc((n ? n : 1) * sizeof *mic);
		size_t *start = calloc(k + 1, sizeof *start);
		if (!tok || !idx || !mic || !start)
			cli_die("out of memory");
		/* samples bucketed by rank, in input order */
		for (size_t i = 0; i < n; i++)
			if (s[i].reason == KEPT)
				start[s[i].rank + 1]++;
		for (size_t r = 0; r < k; r++)
			start[r + 1] += start[r];
		size_t *fill = calloc(k, sizeof *fill);
		if (!fill)
			cli_die("out of memory");
		for (size_t i = 0; i < n; i++)
			if (s[i].reason == KEPT) {
				size_t at = start[s[i].rank] + fill[s[i].rank]++;
				idx[at] = (uint32_t)i;
				tok[at] = s[i].tokens;
			}
		nmicro = 0;
		for (size_t r = 0; r < k; r++) {
			size_t m = sw_micro_count(tok + start[r], start[r + 1] - start[r], max_tokens);
			nmicro = m > nmicro ? m : nmicro;
		}
		if (!nmicro)
			nmicro = 1;
		for (size_t r = 0; r < k; r++) {
			size_t nr = start[r + 1] - start[r], e = 0, o = 0;
			if (sw_micro_split(tok + start[r], nr, max_tokens, nmicro, mic, &e, &o, &err))
				cli_die("cannot cut rank %zu into micro-batches: %s", r, err.msg);
			for (size_t j = 0; j < nr; j++)
				s[idx[start[r] + j]].micro = mic[j];
			empty_micro += e;
			over += o;
		}
		free(tok);
		free(idx);
		free(mic);
		free(start);
		free(fill);
	}

	/* report the drops (not silently), then write */
	uint64_t ndropped = n - drops[KEPT];
	if (ndropped && cli_verbosity >= 0) {
		int shown = 0;
		for (size_t i = 0; i < n && shown < 10; i++)
			if (s[i].reason != KEPT) {
				const char *f = strcmp(files_[s[i].file], "-") ? files_[s[i].file] : "stdin";
				cli_warn("%s: record %llu: dropped (%s): %s", f, (unsigned long long)s[i].record,
				         reason_name_[s[i].reason], s[i].detail);
				shown++;
			}
		char line[512];
		int len = snprintf(line, sizeof line, "dropped %llu of %zu samples:", (unsigned long long)ndropped, n);
		for (int r = 1, first = 1; r < NREASONS; r++)
			if (drops[r] && len < (int)sizeof line - 40) {
				len += snprintf(line + len, sizeof line - (size_t)len, "%s %llu %s", first ? "" : ",",
				                (unsigned long long)drops[r], reason_name_[r]);
				first = 0;
			}
		cli_warn("%s%s", line, rejects ? "" : " (keep them with --rejects FILE)");
	}
	if (over && cli_verbosity >= 0)
		cli_warn("%zu samples over --max-tokens %llu, each in a micro-batch of its own", over,
		         (unsigned long long)max_tokens);
	if (empty_micro && cli_verbosity >= 0)
		cli_warn("%zu micro-batches are empty: a rank has fewer samples than the %zu micro-batches", empty_micro,
		         nmicro);

	if (rejects) {
		sw_writer *rw = open_out_(rejects, &wo, 1);
		for (size_t i = 0; i < n; i++) {
			if (s[i].reason == KEPT)
				continue;
			if (sw_rec_load(rec, store.p + s[i].off, s[i].len))
				cli_die("cannot reload a sample");
			set_(sw_rec_set_str(rec, "drop_reason", reason_name_[s[i].reason], strlen(reason_name_[s[i].reason])));
			set_(sw_rec_set_str(rec, "drop_detail", s[i].detail, strlen(s[i].detail)));
			put_(rw, rejects, rec);
		}
		close_out_(rw, rejects);
	}

	/* by rank, then micro-batch, then input order: a counting sort, stable */
	size_t nk = drops[KEPT], nkeys = k * nmicro;
	samp_ **order = malloc((nk ? nk : 1) * sizeof *order);
	size_t *at = calloc(nkeys + 1, sizeof *at);
	if (!order || !at)
		cli_die("out of memory");
	for (size_t i = 0; i < n; i++)
		if (s[i].reason == KEPT)
			at[(size_t)s[i].rank * nmicro + s[i].micro + 1]++;
	for (size_t j = 0; j < nkeys; j++)
		at[j + 1] += at[j];
	for (size_t i = 0; i < n; i++)
		if (s[i].reason == KEPT)
			order[at[(size_t)s[i].rank * nmicro + s[i].micro]++] = &s[i];
	free(at);
	sw_writer *w = NULL;
	char *wname = NULL;
	uint64_t bytes_out = 0;
	if (!per_rank)
		w = open_out_(out, &wo, force);
	for (size_t r = 0, j = 0; r < (per_rank ? k : 1); r++) {
		if (per_rank) {
			wname = rank_name_(out, (uint32_t)r);
			w = open_out_(wname, &wo, force);
		}
		for (; j < nk && (!per_rank || order[j]->rank == r); j++) {
			samp_ *x = order[j];
			if (sw_rec_load(rec, store.p + x->off, x->len))
				cli_die("cannot reload a sample");
			set_(sw_rec_set_f32(rec, "cost", (float)x->cost));
			set_(sw_rec_set_u64(rec, "rank", x->rank));
			set_(sw_rec_set_u64(rec, "micro", x->micro));
			put_(w, per_rank ? wname : out, rec);
		}
		if (per_rank) {
			bytes_out += sw_writer_bytes_out(w);
			close_out_(w, wname);
			free(wname);
		}
	}
	if (!per_rank) {
		bytes_out = sw_writer_bytes_out(w);
		close_out_(w, out);
	}
	if (stats)
		stats_(stats, k, cap, method, n, s, drops, ngroups, nitems, load, &st, max_tokens ? nmicro : 1, over,
		       empty_micro);
	cli_summary(n, bytes_in, bytes_out);

	for (size_t i = 0; i < n; i++)
		free(s[i].detail);
	free(s);
	free(order);
	free(item_of);
	free(icost);
	free(ipart);
	free(load);
	free(cap);
	free(store.p);
	sw_groups_free(groups);
	sw_rec_free(rec);
	sw_cost_model_free(cm);
	cli_exit(0);
}
