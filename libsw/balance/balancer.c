/*
 * balancer.c - the batch behind sw-balance (see sw/balance.h): abnormal
 * samples set aside with their reasons, the rest placed on ranks by cost
 * (whole groups, or sample by sample) and cut into micro-batches under a
 * token budget, the same number on every rank.
 *
 * The whole batch is held in memory (a training batch is): the records'
 * bytes in one buffer, a small struct per sample.  Every dropped sample
 * keeps its reason and a sentence saying why, so the caller can count,
 * report and write them: nothing is lost.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "sw/balance.h"

static const char *const drop_name_[SW_DROP_N] = {
	"kept", "malformed", "non_finite", "verifier_error", "empty", "too_long", "no_reward", "uniform_group"
};

const char *sw_drop_name(sw_drop r)
{
	return (unsigned)r < SW_DROP_N ? drop_name_[r] : "?";
}

/* ---- the rules ---- */

static sw_drop fail_(sw_sample_check *c, sw_drop reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sw_drop fail_(sw_sample_check *c, sw_drop reason, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof c->detail, fmt, ap);
	va_end(ap);
	c->reason = reason;
	return reason;
}

/* An array of token ids: its length (-1 when absent), or a reason. */
static sw_drop token_array_(sw_sample_check *c, sw_rec *rec, const char *key, int64_t *count)
{
	sw_val v, x;
	sw_iter it;
	int rc = sw_rec_get(rec, key, &v);
	*count = -1;
	if (rc == SW_ENOENT)
		return SW_DROP_KEPT;
	if (rc || v.type != SW_T_ARRAY)
		return fail_(c, SW_DROP_MALFORMED, "field '%s' is a %s, not an array", key,
		             rc ? "bad value" : sw_type_name(v.type));
	sw_iter_init(&it, &v);
	for (uint32_t i = 0; (rc = sw_iter_next(&it, &x)) == 1; i++)
		if (x.type != SW_T_UINT || x.v.u > UINT32_MAX)
			return fail_(c, SW_DROP_MALFORMED, "field '%s': value %u is a %s, not a token id", key, i,
			             sw_type_name(x.type));
	if (rc < 0)
		return fail_(c, SW_DROP_MALFORMED, "field '%s' is corrupt", key);
	*count = v.v.count;
	return SW_DROP_KEPT;
}

/* A finite number, when present. */
static sw_drop number_(sw_sample_check *c, sw_rec *rec, const char *key, double *out, int *has)
{
	sw_val v;
	int rc = sw_rec_get(rec, key, &v);
	*has = 0;
	if (rc == SW_ENOENT)
		return SW_DROP_KEPT;
	if (rc || sw_val_number(&v, out))
		return fail_(c, SW_DROP_MALFORMED, "field '%s' is a %s, not a number", key,
		             rc ? "bad value" : sw_type_name(v.type));
	if (!isfinite(*out))
		return fail_(c, SW_DROP_NON_FINITE, "field '%s' is %g", key, *out);
	*has = 1;
	return SW_DROP_KEPT;
}

/* logprobs: one finite number a response token. */
static sw_drop logprobs_(sw_sample_check *c, sw_rec *rec, int64_t nresp)
{
	sw_val v, x;
	sw_iter it;
	double d;
	if (sw_rec_get(rec, "logprobs", &v))
		return SW_DROP_KEPT;
	if (v.type != SW_T_ARRAY)
		return fail_(c, SW_DROP_MALFORMED, "field 'logprobs' is a %s, not an array", sw_type_name(v.type));
	if (nresp < 0)
		return fail_(c, SW_DROP_MALFORMED, "field 'logprobs' without 'response_tokens'");
	if ((int64_t)v.v.count != nresp)
		return fail_(c, SW_DROP_MALFORMED, "field 'logprobs' has %u values, 'response_tokens' has %lld", v.v.count,
		             (long long)nresp);
	sw_iter_init(&it, &v);
	for (uint32_t i = 0; sw_iter_next(&it, &x) == 1; i++) {
		if (sw_val_number(&x, &d))
			return fail_(c, SW_DROP_MALFORMED, "field 'logprobs': value %u is a %s, not a number", i,
			             sw_type_name(x.type));
		if (!isfinite(d))
			return fail_(c, SW_DROP_NON_FINITE, "field 'logprobs': value %u is %g", i, d);
	}
	return SW_DROP_KEPT;
}

/* rewards: a map of verifier to a finite number. */
static sw_drop rewards_(sw_sample_check *c, sw_rec *rec)
{
	sw_val v, k, x;
	sw_iter it;
	double d;
	if (sw_rec_get(rec, "rewards", &v))
		return SW_DROP_KEPT;
	if (v.type != SW_T_MAP)
		return fail_(c, SW_DROP_MALFORMED, "field 'rewards' is a %s, not a map", sw_type_name(v.type));
	sw_iter_init(&it, &v);
	while (sw_iter_next(&it, &k) == 1 && sw_iter_next(&it, &x) == 1) {
		int klen = k.type == SW_T_STR ? (int)(k.v.str.len > 64 ? 64 : k.v.str.len) : 1;
		const char *kp = k.type == SW_T_STR ? k.v.str.ptr : "?";
		if (sw_val_number(&x, &d))
			return fail_(c, SW_DROP_MALFORMED, "field 'rewards': '%.*s' is a %s, not a number", klen, kp,
			             sw_type_name(x.type));
		if (!isfinite(d))
			return fail_(c, SW_DROP_NON_FINITE, "field 'rewards': '%.*s' is %g", klen, kp, d);
	}
	return SW_DROP_KEPT;
}

sw_drop sw_sample_check_rec(const sw_cost_model *cm, sw_rec *rec, uint64_t max_len, sw_sample_check *c)
{
	sw_val v;
	sw_error e = { 0 };
	sw_cost cost;
	int64_t nresp, nprompt;
	double d;
	int has;

	memset(c, 0, sizeof *c);
	if (sw_cost_sample(cm, rec, &cost, &e))
		return fail_(c, SW_DROP_MALFORMED, "%s", e.msg);
	c->tokens = cost.tokens;
	c->cost = (double)(float)cost.total; /* as written, so that a re-run agrees */
	if (token_array_(c, rec, "prompt_tokens", &nprompt) || token_array_(c, rec, "response_tokens", &nresp) ||
	    logprobs_(c, rec, nresp) || number_(c, rec, "reward", &c->reward, &c->has_reward) ||
	    number_(c, rec, "advantage", &d, &has) || rewards_(c, rec))
		return c->reason;
	if (sw_rec_get(rec, "verifier_error", &v) == 0 && v.type != SW_T_NIL) {
		if (v.type == SW_T_STR)
			return fail_(c, SW_DROP_VERIFIER_ERROR, "%.*s", (int)(v.v.str.len > 200 ? 200 : v.v.str.len),
			             v.v.str.ptr);
		return fail_(c, SW_DROP_VERIFIER_ERROR, "verifier_error is set");
	}
	const char *resp;
	size_t rlen;
	int empty_resp = nresp == 0 || (nresp < 0 && sw_rec_get_str(rec, "response", &resp, &rlen) == 0 && rlen == 0);
	if (cost.tokens == 0 || empty_resp)
		return fail_(c, SW_DROP_EMPTY, cost.tokens == 0 ? "no tokens" : "empty response");
	if (max_len && cost.tokens > max_len)
		return fail_(c, SW_DROP_TOO_LONG, "%llu tokens, more than --max-len %llu", (unsigned long long)cost.tokens,
		             (unsigned long long)max_len);
	return SW_DROP_KEPT;
}

/* ---- the batch ---- */

typedef struct samp_ {
	size_t off;        /* its bytes in the store */
	uint32_t len;
	uint32_t group;    /* index into the groups */
	uint32_t file;     /* where the caller says it came from */
	uint64_t record;
	uint64_t tokens;
	double cost;
	double reward;
	int has_reward;
	sw_drop reason;
	char *detail;      /* why, when dropped */
	uint32_t rank, micro;
} samp_;

struct sw_balancer {
	sw_balance_opts o;
	double *cap;          /* the capacities, copied; NULL for equal ranks */
	sw_buf store;         /* the records' bytes, back to back */
	samp_ *s;
	size_t n, scap;
	sw_groups *groups;
	int ran;
	/* after sw_balancer_run */
	size_t nitems, nmicro, over, empty;
	uint64_t drops[SW_DROP_N];
	double *load;
	sw_part_stats st;
	size_t *order;        /* the kept samples, by rank, micro-batch and input order */
};

static int oom_(sw_error *err)
{
	return sw_fail(err, SW_ENOMEM, "out of memory");
}

sw_balancer *sw_balancer_new(const sw_balance_opts *o, sw_error *err)
{
	if (o->ranks < 1 || !o->cost) {
		sw_fail(err, SW_EINVAL, "a balancer needs ranks and a cost model");
		return NULL;
	}
	sw_balancer *b = calloc(1, sizeof *b);
	if (!b || !(b->groups = sw_groups_new()) ||
	    (o->capacity && !(b->cap = malloc(o->ranks * sizeof *b->cap)))) {
		sw_balancer_free(b);
		oom_(err);
		return NULL;
	}
	b->o = *o;
	if (b->cap)
		memcpy(b->cap, o->capacity, o->ranks * sizeof *b->cap);
	b->o.capacity = b->cap;
	return b;
}

void sw_balancer_free(sw_balancer *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++)
		free(b->s[i].detail);
	free(b->s);
	free(b->cap);
	sw_buf_release(&b->store);
	sw_groups_free(b->groups);
	free(b->load);
	free(b->order);
	free(b);
}

/* Drop sample x for reason, keeping the detail. */
static int drop_(samp_ *x, const sw_sample_check *c)
{
	x->reason = c->reason;
	return (x->detail = strdup(c->detail)) ? 0 : SW_ENOMEM;
}

int sw_balancer_add(sw_balancer *b, sw_rec *rec, uint32_t file, uint64_t record, sw_error *err)
{
	const uint8_t *p;
	size_t len;
	if (b->ran)
		return sw_fail(err, SW_EINVAL, "the balancer has run");
	if (b->n == b->scap) {
		size_t cap = b->scap ? 2 * b->scap : 1024;
		samp_ *s = realloc(b->s, cap * sizeof *s);
		if (!s)
			return oom_(err);
		b->s = s;
		b->scap = cap;
	}
	if (sw_rec_bytes(rec, &p, &len) || len > UINT32_MAX || sw_buf_put(&b->store, p, len))
		return oom_(err);
	samp_ *x = &b->s[b->n];
	sw_sample_check c;
	memset(x, 0, sizeof *x);
	x->file = file;
	x->record = record;
	x->off = b->store.len - len;
	x->len = (uint32_t)len;
	sw_sample_check_rec(b->o.cost, rec, b->o.max_len, &c);
	x->tokens = c.tokens;
	x->cost = c.cost;
	x->reward = c.reward;
	x->has_reward = c.has_reward;
	/* the group: its name, or the sample alone under a name no group string can have */
	const char *g;
	size_t glen;
	char own[40];
	int grc = sw_rec_get_str(rec, "group", &g, &glen);
	if (grc == SW_ETYPE && c.reason == SW_DROP_KEPT)
		fail_(&c, SW_DROP_MALFORMED, "field 'group' is not a str");
	if (c.reason != SW_DROP_KEPT && drop_(x, &c))
		return oom_(err);
	if (grc) {
		glen = (size_t)snprintf(own, sizeof own, "%c#%zu", 0, b->n);
		g = own;
	}
	b->n++; /* counted now, so that free frees the detail */
	if (sw_groups_add(b->groups, g, glen, &x->group) < 0)
		return oom_(err);
	return 0;
}

/* Groups without learning signal: every reward the same. */
static int drop_uniform_(sw_balancer *b)
{
	size_t ng = sw_groups_count(b->groups);
	double *first = malloc((ng ? ng : 1) * sizeof *first);
	unsigned char *state = calloc(ng ? ng : 1, 1); /* 0 none yet, 1 all equal, 2 differ */
	sw_sample_check c;
	int rc = first && state ? 0 : SW_ENOMEM;
	for (size_t i = 0; !rc && i < b->n; i++) {
		samp_ *x = &b->s[i];
		if (x->reason != SW_DROP_KEPT)
			continue;
		if (!x->has_reward) {
			fail_(&c, SW_DROP_NO_REWARD, "no 'reward' to judge the group by");
			rc = drop_(x, &c);
		} else if (state[x->group] == 0) {
			first[x->group] = x->reward;
			state[x->group] = 1;
		} else if (x->reward != first[x->group]) {
			state[x->group] = 2;
		}
	}
	for (size_t i = 0; !rc && i < b->n; i++)
		if (b->s[i].reason == SW_DROP_KEPT && state[b->s[i].group] == 1) {
			fail_(&c, SW_DROP_UNIFORM, "every reward of the group is %g", first[b->s[i].group]);
			rc = drop_(&b->s[i], &c);
		}
	free(first);
	free(state);
	return rc;
}

/* The items to place (whole groups, or single samples), their costs, and each sample's rank. */
static int place_(sw_balancer *b, sw_error *err)
{
	size_t n = b->n, ngroups = sw_groups_count(b->groups), k = b->o.ranks;
	int split = b->o.split_groups;
	uint32_t *item_of = malloc((split ? (n ? n : 1) : (ngroups ? ngroups : 1)) * sizeof *item_of);
	double *icost = malloc((n ? n : 1) * sizeof *icost);
	uint32_t *ipart = malloc((n ? n : 1) * sizeof *ipart);
	int rc = 0;
	b->load = calloc(k, sizeof *b->load);
	if (!item_of || !icost || !ipart || !b->load) {
		rc = oom_(err);
		goto out;
	}
	if (!split)
		for (size_t g = 0; g < ngroups; g++)
			item_of[g] = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		if (b->s[i].reason != SW_DROP_KEPT)
			continue;
		uint32_t *slot = split ? &item_of[i] : &item_of[b->s[i].group];
		if (split || *slot == UINT32_MAX) {
			*slot = (uint32_t)b->nitems;
			icost[b->nitems++] = 0;
		}
		icost[*slot] += b->s[i].cost;
	}
	if ((rc = sw_partition(icost, b->nitems, k, b->cap, b->o.method, ipart, err))) {
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		rc = sw_fail(err, rc, "cannot partition: %s", msg);
		goto out;
	}
	if ((rc = sw_partition_stats(icost, b->nitems, k, b->cap, ipart, b->load, &b->st))) {
		rc = oom_(err);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (b->s[i].reason == SW_DROP_KEPT)
			b->s[i].rank = ipart[split ? item_of[i] : item_of[b->s[i].group]];
out:
	free(item_of);
	free(icost);
	free(ipart);
	return rc;
}

/* Micro-batches: as many on every rank as the fullest rank needs. */
static int cut_(sw_balancer *b, sw_error *err)
{
	size_t n = b->n, k = b->o.ranks;
	uint64_t budget = b->o.max_tokens;
	uint64_t *tok = malloc((n ? n : 1) * sizeof *tok);
	uint32_t *idx = malloc((n ? n : 1) * sizeof *idx), *mic = malloc((n ? n : 1) * sizeof *mic);
	size_t *start = calloc(k + 1, sizeof *start), *fill = calloc(k, sizeof *fill);
	int rc = 0;
	if (!tok || !idx || !mic || !start || !fill) {
		rc = oom_(err);
		goto out;
	}
	/* samples bucketed by rank, in input order */
	for (size_t i = 0; i < n; i++)
		if (b->s[i].reason == SW_DROP_KEPT)
			start[b->s[i].rank + 1]++;
	for (size_t r = 0; r < k; r++)
		start[r + 1] += start[r];
	for (size_t i = 0; i < n; i++)
		if (b->s[i].reason == SW_DROP_KEPT) {
			size_t at = start[b->s[i].rank] + fill[b->s[i].rank]++;
			idx[at] = (uint32_t)i;
			tok[at] = b->s[i].tokens;
		}
	b->nmicro = 0;
	for (size_t r = 0; r < k; r++) {
		size_t m = sw_micro_count(tok + start[r], start[r + 1] - start[r], budget);
		b->nmicro = m > b->nmicro ? m : b->nmicro;
	}
	if (!b->nmicro)
		b->nmicro = 1;
	for (size_t r = 0; r < k && !rc; r++) {
		size_t nr = start[r + 1] - start[r], e = 0, o = 0;
		if ((rc = sw_micro_split(tok + start[r], nr, budget, b->nmicro, mic, &e, &o, err))) {
			char msg[sizeof err->msg];
			snprintf(msg, sizeof msg, "%s", err->msg);
			sw_fail(err, rc, "cannot cut rank %zu into micro-batches: %s", r, msg);
			break;
		}
		for (size_t j = 0; j < nr; j++)
			b->s[idx[start[r] + j]].micro = mic[j];
		b->empty += e;
		b->over += o;
	}
out:
	free(tok);
	free(idx);
	free(mic);
	free(start);
	free(fill);
	return rc;
}

/* By rank, then micro-batch, then input order: a counting sort, stable. */
static int order_(sw_balancer *b)
{
	size_t nk = b->drops[SW_DROP_KEPT], nkeys = b->o.ranks * b->nmicro;
	size_t *at = calloc(nkeys + 1, sizeof *at);
	b->order = malloc((nk ? nk : 1) * sizeof *b->order);
	if (!b->order || !at) {
		free(at);
		return SW_ENOMEM;
	}
	for (size_t i = 0; i < b->n; i++)
		if (b->s[i].reason == SW_DROP_KEPT)
			at[(size_t)b->s[i].rank * b->nmicro + b->s[i].micro + 1]++;
	for (size_t j = 0; j < nkeys; j++)
		at[j + 1] += at[j];
	for (size_t i = 0; i < b->n; i++)
		if (b->s[i].reason == SW_DROP_KEPT)
			b->order[at[(size_t)b->s[i].rank * b->nmicro + b->s[i].micro]++] = i;
	free(at);
	return 0;
}

int sw_balancer_run(sw_balancer *b, sw_error *err)
{
	int rc;
	if (b->ran)
		return sw_fail(err, SW_EINVAL, "the balancer has run");
	b->ran = 1;
	if (b->o.drop_uniform && drop_uniform_(b))
		return oom_(err);
	for (size_t i = 0; i < b->n; i++)
		b->drops[b->s[i].reason]++;
	if ((rc = place_(b, err)))
		return rc;
	b->nmicro = 1;
	if (b->o.max_tokens && (rc = cut_(b, err)))
		return rc;
	return order_(b) ? oom_(err) : 0;
}

size_t sw_balancer_count(const sw_balancer *b)
{
	return b->n;
}

void sw_balancer_sample(const sw_balancer *b, size_t i, sw_balance_sample *out)
{
	const samp_ *x = &b->s[i];
	*out = (sw_balance_sample){
		.bytes = b->store.p + x->off, .len = x->len, .reason = x->reason, .detail = x->detail,
		.file = x->file, .record = x->record, .rank = x->rank, .micro = x->micro,
		.tokens = x->tokens, .cost = x->cost,
	};
}

size_t sw_balancer_kept(const sw_balancer *b)
{
	return b->ran ? b->drops[SW_DROP_KEPT] : 0;
}

size_t sw_balancer_at(const sw_balancer *b, size_t j)
{
	return b->order[j];
}

void sw_balancer_summary(const sw_balancer *b, sw_balance_summary *out)
{
	size_t k = b->o.ranks;
	memset(out, 0, sizeof *out);
	out->ranks = k;
	out->samples = b->n;
	out->kept = b->drops[SW_DROP_KEPT];
	out->dropped = b->n - out->kept;
	memcpy(out->drops, b->drops, sizeof out->drops);
	out->groups = sw_groups_count(b->groups);
	out->items = b->nitems;
	out->part = b->st;
	out->cost_mean = b->st.total / (double)k;
	for (size_t r = 0; b->load && r < k; r++)
		out->cost_max = b->load[r] > out->cost_max ? b->load[r] : out->cost_max;
	out->micro_batches = b->nmicro;
	out->over_budget = b->over;
	out->empty_micro_batches = b->empty;
}

void sw_balancer_rank(const sw_balancer *b, size_t r, sw_rank_summary *out)
{
	double csum = 0;
	uint32_t last = UINT32_MAX;
	memset(out, 0, sizeof *out);
	for (size_t q = 0; q < b->o.ranks; q++)
		csum += b->cap ? b->cap[q] : 1;
	out->capacity = b->cap ? b->cap[r] : 1;
	out->capacity_share = out->capacity / csum;
	out->cost = b->load ? b->load[r] : 0;
	out->share = b->st.total > 0 ? out->cost / b->st.total : 0;
	for (size_t i = 0; i < b->n; i++) {
		const samp_ *x = &b->s[i];
		if (x->reason != SW_DROP_KEPT || x->rank != r)
			continue;
		out->samples++;
		out->tokens += x->tokens;
		/* samples of a group are on one rank unless split: count where the group changes */
		if (x->group != last)
			out->groups++;
		last = x->group;
	}
}

/* A double as %.17g gives it (whole numbers without a point, as the stats file always had). */
static yyjson_mut_val *g17_(yyjson_mut_doc *d, double x)
{
	char buf[40];
	snprintf(buf, sizeof buf, "%.17g", x);
	return yyjson_mut_rawcpy(d, buf);
}

static void add_g17_(yyjson_mut_doc *d, yyjson_mut_val *o, const char *key, double x)
{
	yyjson_mut_obj_add_val(d, o, key, g17_(d, x));
}

char *sw_balancer_stats_json(const sw_balancer *b, size_t *len, sw_error *err)
{
	sw_balance_summary su;
	sw_balancer_summary(b, &su);
	yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
	yyjson_mut_val *o = d ? yyjson_mut_obj(d) : NULL;
	if (!o) {
		yyjson_mut_doc_free(d);
		oom_(err);
		return NULL;
	}
	yyjson_mut_doc_set_root(d, o);
	yyjson_mut_obj_add_uint(d, o, "ranks", su.ranks);
	yyjson_mut_obj_add_str(d, o, "method", sw_part_method_name(b->o.method));
	yyjson_mut_obj_add_uint(d, o, "samples", su.samples);
	yyjson_mut_obj_add_uint(d, o, "kept", su.kept);
	yyjson_mut_obj_add_uint(d, o, "dropped", su.dropped);
	yyjson_mut_val *drops = yyjson_mut_obj_add_obj(d, o, "drops");
	for (int r = 1; r < SW_DROP_N; r++)
		yyjson_mut_obj_add_uint(d, drops, drop_name_[r], su.drops[r]);
	yyjson_mut_obj_add_uint(d, o, "groups", su.groups);
	yyjson_mut_obj_add_uint(d, o, "items", su.items);
	yyjson_mut_val *cost = yyjson_mut_obj_add_obj(d, o, "cost");
	add_g17_(d, cost, "total", su.part.total);
	add_g17_(d, cost, "max", su.cost_max);
	add_g17_(d, cost, "mean", su.cost_mean);
	yyjson_mut_val *imb = yyjson_mut_obj_add_obj(d, o, "imbalance");
	add_g17_(d, imb, "max_over_mean", su.part.imbalance);
	add_g17_(d, imb, "max_over_lower_bound", su.part.over_bound);
	add_g17_(d, imb, "lower_bound_over_mean", su.part.lower_bound);
	yyjson_mut_obj_add_uint(d, o, "micro_batches", su.micro_batches);
	yyjson_mut_obj_add_uint(d, o, "over_budget", su.over_budget);
	yyjson_mut_obj_add_uint(d, o, "empty_micro_batches", su.empty_micro_batches);
	yyjson_mut_val *per = yyjson_mut_obj_add_arr(d, o, "per_rank");
	for (size_t r = 0; r < su.ranks; r++) {
		sw_rank_summary rs;
		sw_balancer_rank(b, r, &rs);
		yyjson_mut_val *x = yyjson_mut_arr_add_obj(d, per);
		yyjson_mut_obj_add_uint(d, x, "rank", r);
		add_g17_(d, x, "capacity", rs.capacity);
		yyjson_mut_obj_add_uint(d, x, "samples", rs.samples);
		yyjson_mut_obj_add_uint(d, x, "groups", rs.groups);
		yyjson_mut_obj_add_uint(d, x, "tokens", rs.tokens);
		add_g17_(d, x, "cost", rs.cost);
		add_g17_(d, x, "share", rs.share);
		add_g17_(d, x, "capacity_share", rs.capacity_share);
	}
	size_t n = 0;
	char *text = yyjson_mut_write(d, 0, &n);
	yyjson_mut_doc_free(d);
	char *out = text ? realloc(text, n + 2) : NULL;
	if (!out) {
		free(text);
		oom_(err);
		return NULL;
	}
	out[n] = '\n';
	out[n + 1] = 0;
	if (len)
		*len = n + 1;
	return out;
}
