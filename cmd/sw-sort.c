/*
 * sw-sort - order samples by estimated cost (or any field), each prompt's
 * group kept together, streams larger than memory included.
 *
 * It works the way sort(1) does: records gather in a buffer of -S bytes;
 * when it fills, it is sorted and spilled as a zstd-compressed run to a
 * temporary file (unlinked at once, so a crash leaves nothing behind), and
 * the runs are merged with a heap at the end, at most MERGE_FAN_IN at a time.
 * Ties keep input order everywhere (the merge breaks them by run number,
 * and runs are cut from the input in order), so the output is the same
 * whatever -S is.
 *
 * Groups complicate this: a record's place depends on its group's total,
 * known only at the end.  So with groups the spilled chunks are written in
 * input order, and once the input is read and every group's total known,
 * each chunk is read back, sorted by its groups' final order and written as
 * a run; a small array per run (4 bytes a record) carries each record's
 * group order into the merge.
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

#define MERGE_FAN_IN 64

enum { OPT_NO_GROUP = 0x100, OPT_BUCKET, OPT_MODEL, OPT_STAGE, OPT_FORCE };

static const cli_opt opts[] = {
	{ 'k', 'k', "key", "field", NULL, "sort by this numeric or string field instead of the cost" },
	{ 'r', 'r', "reverse", NULL, NULL, "largest first" },
	{ OPT_NO_GROUP, 0, "no-group", NULL, NULL, "sort samples one by one, not groups by their total" },
	{ 'S', 'S', "buffer-size", "size", NULL, "sort in memory up to size bytes (K, M, G), then spill (default 256M)" },
	{ 'T', 'T', "temporary-directory", "dir", "dir", "spill runs to dir (default $TMPDIR, else /tmp)" },
	{ OPT_BUCKET, 0, "bucket", "num", NULL, "split the sorted output into num buckets of equal count" },
	{ OPT_MODEL, 0, "model", "dir", "dir", "price samples for the model in dir (config.json, tokenizer)" },
	{ OPT_STAGE, 0, "stage", "stage", "generate|train", "price for generation (default) or training" },
	{ 'o', 'o', "output", "file", "file", "write to file; with --bucket, a %d in the name makes a file per bucket" },
	{ 'f', 'f', "format", "format", "msgpack|json", "write msgpack or json (JSON Lines); default msgpack, json on a terminal" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the output with zstd" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-sort", "[file ...]", "file",
	"Sort samples by estimated cost or by a field, keeping each group together.",
	opts
};

/* ---- settings and state shared by the passes ---- */

static const char *key_;   /* NULL: the cost */
static int reverse_, grouped_ = 1;
static int key_string_ = -1; /* -1 until the first record says */
static sw_cost_model *cm_;
static sw_groups *groups_;
static double *gsum_;       /* numeric keys: each group's total */
static char **gstr_;        /* string keys: each group's first key in the order (min, or max with -r) */
static size_t *gstrlen_;
static uint64_t *gfirst_;   /* the group's first record */
static uint32_t *gorder_;   /* the group's place in the output */
static size_t gcap_;
static const char *tmpdir_;

/* One record in the buffer. */
typedef struct ent_ {
	size_t off;
	uint32_t len;
	uint32_t group;
	uint64_t seq;
	double key;
	uint32_t skey_off, skey_len; /* a string key: where in the record's bytes */
} ent_;

typedef struct buf_ {
	uint8_t *p;
	size_t len, cap;
	ent_ *e;
	size_t n, ecap;
} buf_;

static void buf_put_(buf_ *b, const void *p, size_t n)
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

static ent_ *buf_ent_(buf_ *b)
{
	if (b->n == b->ecap) {
		b->ecap = b->ecap ? 2 * b->ecap : 4096;
		ent_ *e = realloc(b->e, b->ecap * sizeof *e);
		if (!e)
			cli_die("out of memory");
		b->e = e;
	}
	return &b->e[b->n++];
}

/* ---- keys ---- */

/* Fill err as libsw does (the programs have no sw_fail); returns code. */
static int sw_fail_(sw_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sw_fail_(sw_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return code;
}

static int cmp_str_(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);
	return c ? c : (an > bn) - (an < bn);
}

static int cmp_num_(double a, double b)
{
	return (a > b) - (a < b);
}

/*
 * The key of a record: a number into num, or a string view into s and n.
 * Errors go into err for the caller to place.
 */
static int record_key_(sw_rec *rec, double *num, const char **s, size_t *n, sw_error *err)
{
	if (!key_) {
		sw_cost c;
		if (sw_cost_sample(cm_, rec, &c, err))
			return -1;
		float f = (float)c.total;
		int rc = sw_rec_set_f32(rec, "cost", f);
		if (rc)
			return sw_fail_(err, rc, "cannot set 'cost'");
		*num = f; /* the key is what is written, so a re-read run compares the same */
		return 0;
	}
	sw_val v;
	int rc = sw_rec_get(rec, key_, &v);
	if (rc == SW_ENOENT)
		return sw_fail_(err, SW_ENOENT, "no field '%s' to sort by", key_);
	if (rc)
		return sw_fail_(err, rc, "field '%s': %s", key_, sw_strerror(rc));
	int is_str = v.type == SW_T_STR;
	if (!is_str && sw_val_number(&v, num))
		return sw_fail_(err, SW_ETYPE, "field '%s' is a %s, not a number or a str", key_, sw_type_name(v.type));
	if (key_string_ < 0)
		key_string_ = is_str;
	if (is_str != key_string_)
		return sw_fail_(err, SW_ETYPE, "field '%s' is a %s, where the first record's is a %s", key_,
		                sw_type_name(v.type), key_string_ ? "str" : "number");
	if (is_str) {
		*s = v.v.str.ptr;
		*n = v.v.str.len;
	} else if (isnan(*num)) {
		return sw_fail_(err, SW_EFORMAT, "field '%s' is nan", key_);
	}
	return 0;
}

/* The key of a record read back from a run: the cost field written in pass 1, or the field. */
static void run_key_(sw_rec *rec, double *num, const char **str, size_t *n)
{
	int rc = key_ && key_string_ ? sw_rec_get_str(rec, key_, str, n) : sw_rec_get_f64(rec, key_ ? key_ : "cost", num);
	if (rc)
		cli_die("a spilled run lost its key field: %s", sw_strerror(rc));
}

static int cmp_keys_(double a, const char *as, size_t an, double b, const char *bs, size_t bn)
{
	int c = key_string_ == 1 ? cmp_str_(as, an, bs, bn) : cmp_num_(a, b);
	return reverse_ ? -c : c;
}

/* ---- groups ---- */

static uint32_t *gidx_; /* each record's group, by input number (grouped mode) */
static size_t gidx_cap_;

static uint32_t group_of_(sw_rec *rec, uint64_t seq, double key, const char *s, size_t sn, sw_error *err, int *bad)
{
	const char *g;
	size_t glen;
	char own[40];
	uint32_t gi;
	int rc = sw_rec_get_str(rec, "group", &g, &glen);
	*bad = 0;
	if (rc == SW_ETYPE) {
		sw_fail_(err, SW_ETYPE, "field 'group' is not a str");
		*bad = 1;
		return 0;
	}
	if (rc) {
		/* no group: alone, under a name no group string can have */
		glen = (size_t)snprintf(own, sizeof own, "%c#%llu", 0, (unsigned long long)seq);
		g = own;
	}
	int isnew = sw_groups_add(groups_, g, glen, &gi);
	if (isnew < 0)
		cli_die("out of memory");
	if (isnew) {
		if (gi >= gcap_) {
			gcap_ = gcap_ ? 2 * gcap_ : 4096;
			gsum_ = realloc(gsum_, gcap_ * sizeof *gsum_);
			gstr_ = realloc(gstr_, gcap_ * sizeof *gstr_);
			gstrlen_ = realloc(gstrlen_, gcap_ * sizeof *gstrlen_);
			gfirst_ = realloc(gfirst_, gcap_ * sizeof *gfirst_);
			if (!gsum_ || !gstr_ || !gstrlen_ || !gfirst_)
				cli_die("out of memory");
		}
		gsum_[gi] = 0;
		gstr_[gi] = NULL;
		gstrlen_[gi] = 0;
		gfirst_[gi] = seq;
	}
	if (key_string_ == 1) {
		if (!gstr_[gi] || cmp_keys_(0, s, sn, 0, gstr_[gi], gstrlen_[gi]) < 0) {
			free(gstr_[gi]);
			if (!(gstr_[gi] = malloc(sn ? sn : 1)))
				cli_die("out of memory");
			memcpy(gstr_[gi], s, sn);
			gstrlen_[gi] = sn;
		}
	} else {
		gsum_[gi] += key;
	}
	if (seq >= gidx_cap_) {
		gidx_cap_ = gidx_cap_ ? 2 * gidx_cap_ : 65536;
		if (!(gidx_ = realloc(gidx_, gidx_cap_ * sizeof *gidx_)))
			cli_die("out of memory");
	}
	gidx_[seq] = gi;
	return gi;
}

static int cmp_group_(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = cmp_keys_(gsum_[x], gstr_[x], gstrlen_[x], gsum_[y], gstr_[y], gstrlen_[y]);
	return c ? c : (gfirst_[x] > gfirst_[y]) - (gfirst_[x] < gfirst_[y]);
}

/* Each group's place in the output, from the totals. */
static void order_groups_(void)
{
	size_t ng = sw_groups_count(groups_);
	uint32_t *by = malloc((ng ? ng : 1) * sizeof *by);
	gorder_ = malloc((ng ? ng : 1) * sizeof *gorder_);
	if (!by || !gorder_)
		cli_die("out of memory");
	for (size_t g = 0; g < ng; g++)
		by[g] = (uint32_t)g;
	qsort(by, ng, sizeof *by, cmp_group_);
	for (size_t i = 0; i < ng; i++)
		gorder_[by[i]] = (uint32_t)i;
	free(by);
}

/* ---- sorting the buffer ---- */

static const uint8_t *cmp_base_;

static int cmp_ent_(const void *a, const void *b)
{
	const ent_ *x = a, *y = b;
	int c;
	if (grouped_)
		c = (gorder_[x->group] > gorder_[y->group]) - (gorder_[x->group] < gorder_[y->group]);
	else
		c = cmp_keys_(x->key, (const char *)cmp_base_ + x->off + x->skey_off, x->skey_len, y->key,
		              (const char *)cmp_base_ + y->off + y->skey_off, y->skey_len);
	return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static void sort_buf_(buf_ *b)
{
	cmp_base_ = b->p;
	qsort(b->e, b->n, sizeof *b->e, cmp_ent_);
}

/* ---- runs: zstd msgpack in unlinked temporary files ---- */

typedef struct run_ {
	int fd;
	uint64_t n;
	uint32_t *ord; /* grouped: each record's group place, in run order */
} run_;

static run_ *runs_;
static size_t nruns_, runs_cap_;

static int tmpfile_(void)
{
	size_t n = strlen(tmpdir_) + 32;
	char *path = malloc(n);
	if (!path)
		cli_die("out of memory");
	snprintf(path, n, "%s/sw-sort.XXXXXX", tmpdir_);
	int fd = mkstemp(path), e = errno;
	if (fd >= 0)
		unlink(path); /* gone when we are, however we end */
	free(path);
	if (fd < 0)
		cli_die("cannot create a temporary file in '%s': %s", tmpdir_, strerror(e));
	return fd;
}

static sw_writer *run_writer_(int fd)
{
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 1 };
	sw_writer *w = sw_writer_fdopen(fd, "run", &wo, &err);
	if (!w)
		cli_die("cannot write a run: %s", err.msg);
	return w;
}

static void run_close_(sw_writer *w)
{
	if (sw_writer_close(w))
		cli_die("cannot write a run to '%s': %s", tmpdir_,
		        sw_writer_error(w)->sys_errno ? strerror(sw_writer_error(w)->sys_errno) : sw_writer_error(w)->msg);
	sw_writer_free(w);
}

static run_ *run_new_(void)
{
	if (nruns_ == runs_cap_) {
		runs_cap_ = runs_cap_ ? 2 * runs_cap_ : 16;
		if (!(runs_ = realloc(runs_, runs_cap_ * sizeof *runs_)))
			cli_die("out of memory");
	}
	run_ *r = &runs_[nruns_++];
	memset(r, 0, sizeof *r);
	r->fd = tmpfile_();
	return r;
}

/* Write the buffer's records as a run: sorted, or (chunk) as they are. */
static void spill_(buf_ *b, int sorted)
{
	if (sorted)
		sort_buf_(b);
	run_ *r = run_new_();
	sw_writer *w = run_writer_(r->fd);
	if (sorted && grouped_ && !(r->ord = malloc((b->n ? b->n : 1) * sizeof *r->ord)))
		cli_die("out of memory");
	for (size_t i = 0; i < b->n; i++) {
		if (sw_writer_put_raw(w, b->p + b->e[i].off, b->e[i].len))
			cli_die("cannot write a run to '%s': %s", tmpdir_, strerror(sw_writer_error(w)->sys_errno));
		if (r->ord)
			r->ord[i] = gorder_[b->e[i].group];
	}
	r->n = b->n;
	run_close_(w);
	b->len = b->n = 0;
}

static sw_reader *run_reader_(int fd)
{
	sw_error err = { 0 };
	if (lseek(fd, 0, SEEK_SET) < 0)
		cli_die("cannot read a run back: %s", strerror(errno));
	sw_reader *r = sw_reader_fdopen(fd, "run", &err);
	if (!r)
		cli_die("cannot read a run back: %s", err.msg);
	sw_reader_set_max_record(r, cli_max_record());
	return r;
}

/* ---- output ---- */

static const char *out_;
static int per_bucket_, force_;
static sw_writer_opts wo_ = { SW_FMT_MSGPACK, 0 };
static sw_writer *w_;
static char *wname_;
static uint64_t total_, nout_, nbuckets_, bytes_out_;
static uint64_t bucket_ = UINT64_MAX;
static uint64_t last_group_ = UINT64_MAX;
static sw_rec *orec_;

static void open_out_(const char *name)
{
	sw_error err = { 0 };
	if (!strcmp(name, "-") && !cli_binary_ok(1, force_) && (wo_.format == SW_FMT_MSGPACK || wo_.zstd_level))
		cli_usage("refusing to write binary to a terminal (use -f json, -o FILE or --force)");
	if (!(w_ = sw_writer_open(name, &wo_, &err)))
		cli_die("cannot write '%s': %s", name, err.sys_errno ? strerror(err.sys_errno) : err.msg);
}

static const char *shown_(const char *name)
{
	return strcmp(name, "-") ? name : "stdout";
}

static void close_out_(void)
{
	bytes_out_ += sw_writer_bytes_out(w_);
	if (sw_writer_close(w_))
		cli_die_stream(shown_(wname_ ? wname_ : out_), sw_writer_error(w_));
	sw_writer_free(w_);
	w_ = NULL;
}

static void open_bucket_(uint64_t b)
{
	size_t n = strlen(out_) + 24;
	free(wname_);
	if (!(wname_ = malloc(n)))
		cli_die("out of memory");
	snprintf(wname_, n, out_, (int)b); /* checked: one %d and no other conversion */
	open_out_(wname_);
}

/* One record out, in order; group is its group's place (or the record's own number without groups). */
static void emit_(const uint8_t *p, size_t n, uint64_t group)
{
	if (nbuckets_) {
		if (group != last_group_) {
			/* a group goes to the bucket where its first record falls */
			uint64_t b = nout_ * nbuckets_ / (total_ ? total_ : 1);
			if (b >= nbuckets_)
				b = nbuckets_ - 1;
			if (per_bucket_)
				while (bucket_ == UINT64_MAX || bucket_ < b) {
					if (w_)
						close_out_();
					bucket_ = bucket_ == UINT64_MAX ? 0 : bucket_ + 1;
					open_bucket_(bucket_);
				}
			bucket_ = b;
			last_group_ = group;
		}
		if (sw_rec_load(orec_, p, n))
			cli_die("a record changed on the way");
		int rc = sw_rec_set_u64(orec_, "bucket", bucket_);
		if (rc)
			cli_die("cannot set 'bucket': %s", sw_strerror(rc));
		if (sw_writer_put(w_, orec_))
			cli_die_stream(shown_(wname_ ? wname_ : out_), sw_writer_error(w_));
	} else if (sw_writer_put_raw(w_, p, n)) {
		cli_die_stream(shown_(out_), sw_writer_error(w_));
	}
	nout_++;
}

/* ---- the merge ---- */

typedef struct head_ {
	sw_reader *r;
	sw_rec *rec;
	const uint32_t *ord;
	uint64_t pos;
	double key;
	const char *s;
	size_t sn;
	size_t run; /* its number: ties go to the earlier run, which holds earlier input */
} head_;

static int head_less_(const head_ *a, const head_ *b)
{
	int c;
	if (grouped_)
		c = (a->ord[a->pos] > b->ord[b->pos]) - (a->ord[a->pos] < b->ord[b->pos]);
	else
		c = cmp_keys_(a->key, a->s, a->sn, b->key, b->s, b->sn);
	return c ? c < 0 : a->run < b->run;
}

static int head_next_(head_ *h)
{
	int rc = sw_reader_next(h->r, h->rec);
	if (rc < 0)
		cli_die("cannot read a run back: %s", sw_reader_error(h->r)->msg);
	if (rc == 1 && !grouped_)
		run_key_(h->rec, &h->key, &h->s, &h->sn);
	return rc;
}

static void sift_(head_ **heap, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && head_less_(heap[l], heap[m]))
			m = l;
		if (l + 1 < n && head_less_(heap[l + 1], heap[m]))
			m = l + 1;
		if (m == i)
			return;
		head_ *t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

/*
 * Merge runs[lo, hi): into a new run (to != NULL), or out.  The runs'
 * files are closed.
 */
static void merge_(size_t lo, size_t hi, run_ *to)
{
	size_t k = hi - lo, n = 0;
	head_ *h = calloc(k, sizeof *h);
	head_ **heap = malloc(k * sizeof *heap);
	sw_writer *w = to ? run_writer_(to->fd) : NULL;
	if (!h || !heap)
		cli_die("out of memory");
	uint64_t total = 0;
	for (size_t i = 0; i < k; i++)
		total += runs_[lo + i].n;
	if (to && grouped_ && !(to->ord = malloc((total ? total : 1) * sizeof *to->ord)))
		cli_die("out of memory");
	for (size_t i = 0; i < k; i++) {
		h[i].r = run_reader_(runs_[lo + i].fd);
		h[i].rec = sw_rec_new();
		h[i].ord = runs_[lo + i].ord;
		h[i].run = lo + i;
		if (!h[i].rec)
			cli_die("out of memory");
		if (head_next_(&h[i]) == 1)
			heap[n++] = &h[i];
	}
	for (size_t i = n; i-- > 0;)
		sift_(heap, n, i);
	uint64_t done = 0;
	while (n) {
		head_ *t = heap[0];
		const uint8_t *p;
		size_t len;
		if (sw_rec_bytes(t->rec, &p, &len))
			cli_die("out of memory");
		if (w) {
			if (sw_writer_put_raw(w, p, len))
				cli_die("cannot write a run to '%s': %s", tmpdir_, strerror(sw_writer_error(w)->sys_errno));
			if (to->ord)
				to->ord[done] = t->ord[t->pos];
		} else {
			emit_(p, len, grouped_ ? t->ord[t->pos] : nout_);
			cli_progress(nout_, bytes_out_ + sw_writer_bytes_out(w_));
		}
		done++;
		t->pos++;
		if (head_next_(t) != 1)
			heap[0] = heap[--n];
		sift_(heap, n, 0);
	}
	for (size_t i = 0; i < k; i++) {
		sw_reader_free(h[i].r);
		sw_rec_free(h[i].rec);
		close(runs_[lo + i].fd);
		free(runs_[lo + i].ord);
	}
	if (w) {
		to->n = done;
		run_close_(w);
	}
	free(h);
	free(heap);
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
		cli_usage("option '-o' wants one %%d for the bucket and no other %% conversion, not '%s'", pattern);
	return d;
}

int main(int argc, char **argv)
{
	const char *arg, *model = NULL;
	int c, optind_, train = 0, fmt_set = 0;
	uint64_t bufsize = (uint64_t)256 << 20;
	out_ = "-";
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'k':
			if (!*arg)
				cli_usage("option '-k' wants a field name");
			key_ = arg;
			break;
		case 'r':
			reverse_ = 1;
			break;
		case OPT_NO_GROUP:
			grouped_ = 0;
			break;
		case 'S':
			bufsize = parse_size_(arg);
			break;
		case 'T':
			tmpdir_ = arg;
			break;
		case OPT_BUCKET:
			nbuckets_ = cli_uint("--bucket", arg, 1, 1u << 20);
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
			out_ = arg;
			break;
		case 'f':
			wo_.format = cli_format(arg);
			fmt_set = 1;
			break;
		case 'z':
			wo_.zstd_level = 3;
			break;
		case OPT_FORCE:
			force_ = 1;
			break;
		}
	}
	per_bucket_ = check_pattern_(out_);
	/* as sw-cat: JSON Lines on a terminal unless a format or compression is asked for */
	if (!strcmp(out_, "-") && isatty(1) && !fmt_set && !wo_.zstd_level)
		wo_.format = SW_FMT_JSON;
	if (per_bucket_ && !nbuckets_)
		cli_usage("a %%d in the output name needs --bucket");
	if (!tmpdir_)
		tmpdir_ = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if (!key_) {
		sw_error err = { 0 };
		cm_ = model ? sw_cost_model_load(model, &err) : sw_cost_model_new();
		if (!cm_)
			cli_die("%s: %s", model ? model : "cost model", err.msg[0] ? err.msg : sw_strerror(err.code));
		sw_cost_model_set_train(cm_, train);
		key_string_ = 0;
	}
	if (!(groups_ = sw_groups_new()) || !(orec_ = sw_rec_new()))
		cli_die("out of memory");
	/* a terminal is refused at once; the output is opened only once the
	 * input is read, so that it may be one of the inputs, as with sort(1) */
	if (!per_bucket_ && !strcmp(out_, "-") && !cli_binary_ok(1, force_) &&
	    (wo_.format == SW_FMT_MSGPACK || wo_.zstd_level))
		cli_usage("refusing to write binary to a terminal (use -f json, -o FILE or --force)");

	char **files = argv + optind_;
	int nfiles = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}

	/* pass 1: read, key, buffer; spill when the buffer is full */
	buf_ b = { 0 };
	sw_rec *rec = sw_rec_new();
	sw_error err = { 0 };
	uint64_t seq = 0, bytes_in = 0;
	size_t max_record = cli_max_record();
	if (!rec)
		cli_die("out of memory");
	for (int fi = 0; fi < nfiles; fi++) {
		const char *name = strcmp(files[fi], "-") ? files[fi] : "stdin";
		sw_reader *r = sw_reader_open(files[fi], &err);
		if (!r)
			cli_die("cannot open '%s': %s", files[fi], strerror(err.sys_errno));
		sw_reader_set_max_record(r, max_record);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			double key = 0;
			const char *s = NULL;
			size_t sn = 0;
			const uint8_t *p;
			size_t len;
			int bad = 0;
			memset(&err, 0, sizeof err);
			if (record_key_(rec, &key, &s, &sn, &err) == 0 && grouped_)
				group_of_(rec, seq, key, s, sn, &err, &bad);
			else if (err.code)
				bad = 1;
			if (bad)
				cli_die("%s: record %llu: %s", name, (unsigned long long)sw_reader_records(r), err.msg);
			if (sw_rec_bytes(rec, &p, &len) || len > UINT32_MAX)
				cli_die("out of memory");
			size_t skey_off = s ? (size_t)((const uint8_t *)s - p) : 0;
			if (s && skey_off + sn > len)
				cli_die("internal error: key outside its record");
			/* the buffer holds the bytes and an entry a record */
			if (b.n && b.len + len + (b.n + 1) * sizeof(ent_) > bufsize)
				spill_(&b, !grouped_);
			ent_ *e = buf_ent_(&b);
			e->off = b.len;
			e->len = (uint32_t)len;
			e->seq = seq;
			e->key = key;
			e->skey_off = (uint32_t)skey_off;
			e->skey_len = (uint32_t)sn;
			e->group = grouped_ ? gidx_[seq] : 0;
			buf_put_(&b, p, len);
			seq++;
			cli_progress(seq, bytes_in + sw_reader_bytes_in(r));
		}
		if (rc < 0) {
			cli_die_stream(name, sw_reader_error(r));
		}
		bytes_in += sw_reader_bytes_in(r);
		sw_reader_free(r);
	}
	sw_rec_free(rec);
	total_ = seq;
	if (grouped_)
		order_groups_();
	if (!per_bucket_)
		open_out_(out_);

	if (!nruns_) {
		/* it all fit: sort and write */
		sort_buf_(&b);
		for (size_t i = 0; i < b.n; i++) {
			emit_(b.p + b.e[i].off, b.e[i].len, grouped_ ? gorder_[b.e[i].group] : nout_);
			cli_progress(nout_, bytes_out_);
		}
	} else {
		spill_(&b, !grouped_);
		if (grouped_) {
			/* pass 2: each chunk, in input order, read back and sorted into a run */
			size_t nchunks = nruns_;
			run_ *chunks = runs_;
			runs_ = NULL;
			nruns_ = runs_cap_ = 0;
			uint64_t base = 0;
			sw_rec *cr = sw_rec_new();
			for (size_t i = 0; i < nchunks; i++) {
				sw_reader *r = run_reader_(chunks[i].fd);
				int rc;
				while ((rc = sw_reader_next(r, cr)) == 1) {
					const uint8_t *p;
					size_t len;
					sw_rec_bytes(cr, &p, &len);
					ent_ *e = buf_ent_(&b);
					e->off = b.len;
					e->len = (uint32_t)len;
					e->seq = base;
					e->group = gidx_[base++];
					buf_put_(&b, p, len);
				}
				if (rc < 0)
					cli_die("cannot read a run back: %s", sw_reader_error(r)->msg);
				sw_reader_free(r);
				close(chunks[i].fd);
				spill_(&b, 1);
			}
			sw_rec_free(cr);
			free(chunks);
		}
		free(b.p);
		free(b.e);
		b = (buf_){ 0 };
		/* merge down to MERGE_FAN_IN runs, then out */
		while (nruns_ > MERGE_FAN_IN) {
			size_t first = nruns_ - MERGE_FAN_IN;
			run_ merged = { .fd = tmpfile_() };
			merge_(first, nruns_, &merged);
			nruns_ = first;
			/* the merged run holds the latest input: it goes last, keeping ties in order */
			runs_[nruns_++] = merged;
		}
		merge_(0, nruns_, NULL);
	}
	if (per_bucket_) {
		/* every bucket has its file, empty ones too */
		while (bucket_ == UINT64_MAX || bucket_ + 1 < nbuckets_) {
			if (w_)
				close_out_();
			bucket_ = bucket_ == UINT64_MAX ? 0 : bucket_ + 1;
			open_bucket_(bucket_);
		}
	}
	close_out_();
	cli_summary(seq, bytes_in, bytes_out_);
	free(b.p);
	free(b.e);
	cli_exit(0);
}
