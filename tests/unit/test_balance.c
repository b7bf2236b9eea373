/*
 * test_balance.c - the partitioners and the micro-batch packer of
 * sw/balance.h: exact small cases, and properties checked on many random
 * inputs (every item placed once, capacities met, budgets kept, the
 * small-large order of micro-batches, determinism); the abnormal-sample
 * rules and their reasons, and the balancer that puts it all together.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sw/sw.h"
#include "sw/balance.h"
#include "rec.h"
#include "tap.h"

static uint64_t rng_ = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return rng_;
}
static double unif_(void)
{
	return ((double)(rnd_() >> 11) + 0.5) * 0x1.0p-53;
}
/* Log-normal lengths: median 300, a long tail, capped at 8192, as in the benchmark. */
static double lognormal_(void)
{
	double z = sqrt(-2 * log(unif_())) * cos(6.283185307179586 * unif_());
	double x = 300 * exp(0.9 * z);
	return x < 1 ? 1 : x > 8192 ? 8192 : floor(x);
}

static const sw_part_method methods_[] = { SW_PART_KK, SW_PART_LPT, SW_PART_SEQ };

static void test_small_exact(void)
{
	/* the textbook case: KK differences {8,7,6,5,4} to 16/14 and LPT gets 17/13, where 15/15 is best */
	double c[] = { 8, 7, 6, 5, 4 };
	uint32_t part[5];
	double load[2];
	sw_part_stats st;
	ok(sw_partition(c, 5, 2, NULL, SW_PART_KK, part, NULL) == 0, "kk on {8,7,6,5,4}");
	sw_partition_stats(c, 5, 2, NULL, part, load, &st);
	ok(fabs(load[0] - load[1]) == 2, "kk leaves the classic difference of 2 (got %g/%g)", load[0], load[1]);
	ok(sw_partition(c, 5, 2, NULL, SW_PART_LPT, part, NULL) == 0, "lpt on {8,7,6,5,4}");
	sw_partition_stats(c, 5, 2, NULL, part, load, &st);
	ok(fabs(load[0] - load[1]) == 4, "lpt leaves 17/13 (got %g/%g)", load[0], load[1]);
	ok(st.total == 30, "total is the sum");

	/* sequential: contiguous, equal counts */
	uint32_t p6[6];
	double c6[] = { 1, 1, 1, 1, 1, 100 };
	sw_partition(c6, 6, 3, NULL, SW_PART_SEQ, p6, NULL);
	ok(p6[0] == 0 && p6[1] == 0 && p6[2] == 1 && p6[3] == 1 && p6[4] == 2 && p6[5] == 2,
	   "seq cuts 6 items into 3 runs of 2 in input order");
	sw_partition_stats(c6, 6, 3, NULL, p6, NULL, &st);
	ok(fabs(st.imbalance - 101.0 / (105.0 / 3)) < 1e-12, "seq's imbalance is max/mean (%g)", st.imbalance);
	ok(fabs(st.lower_bound - 100.0 / 35.0) < 1e-12, "the lower bound is the largest item over the mean");

	/* one huge item: the others go around it, and the bound says it is optimal */
	double c4[] = { 100, 10, 10, 10 };
	uint32_t p4[4];
	sw_partition(c4, 4, 2, NULL, SW_PART_KK, p4, NULL);
	ok(p4[1] == p4[2] && p4[2] == p4[3] && p4[0] != p4[1], "the huge item sits alone");
	sw_partition_stats(c4, 4, 2, NULL, p4, NULL, &st);
	ok(fabs(st.over_bound - 1) < 1e-12, "and that meets the lower bound");
}

static void test_edges(void)
{
	uint32_t part[4] = { 9, 9, 9, 9 };
	double c[4] = { 0, 0, 0, 0 };
	sw_error e = { 0 };
	for (size_t m = 0; m < 3; m++) {
		ok(sw_partition(c, 0, 4, NULL, methods_[m], part, &e) == 0, "%s: no items is fine",
		   sw_part_method_name(methods_[m]));
		ok(sw_partition(c, 1, 4, NULL, methods_[m], part, &e) == 0 && part[0] < 4, "%s: one item",
		   sw_part_method_name(methods_[m]));
		ok(sw_partition(c, 4, 1, NULL, methods_[m], part, &e) == 0 && part[0] == 0 && part[3] == 0,
		   "%s: one rank takes all", sw_part_method_name(methods_[m]));
		ok(sw_partition(c, 4, 8, NULL, methods_[m], part, &e) == 0 && part[3] < 8,
		   "%s: more ranks than items", sw_part_method_name(methods_[m]));
	}
	/* fewer items than ranks: one each, the largest on the rank of largest capacity */
	double few[3] = { 5, 9, 1 }, fcap[6] = { 1, 1, 3, 1, 2, 1 };
	uint32_t fp[3];
	ok(sw_partition(few, 3, 6, fcap, SW_PART_KK, fp, &e) == 0 && fp[1] == 2 && fp[0] == 4 && fp[2] == 0,
	   "kk, 3 items on 6 ranks: 9 on capacity 3, 5 on capacity 2, 1 on the first of the rest (%u %u %u)", fp[0],
	   fp[1], fp[2]);
	sw_part_stats st;
	sw_partition(c, 4, 2, NULL, SW_PART_KK, part, &e);
	ok(sw_partition_stats(c, 4, 2, NULL, part, NULL, &st) == 0 && st.imbalance == 1 && st.over_bound == 1, "zero total: ratios are 1");

	double bad[2] = { 1, NAN };
	ok(sw_partition(bad, 2, 2, NULL, SW_PART_KK, part, &e) == SW_EINVAL, "NaN cost refused");
	ok(strstr(e.msg, "item 1") != NULL, "and the message names the item: %s", e.msg);
	bad[1] = -1;
	ok(sw_partition(bad, 2, 2, NULL, SW_PART_LPT, part, &e) == SW_EINVAL, "negative cost refused");
	bad[1] = INFINITY;
	ok(sw_partition(bad, 2, 2, NULL, SW_PART_SEQ, part, &e) == SW_EINVAL, "infinite cost refused");
	double one[2] = { 1, 1 }, cap[2] = { 1, 0 };
	ok(sw_partition(one, 2, 2, cap, SW_PART_KK, part, &e) == SW_EINVAL, "zero capacity refused: %s", e.msg);
	ok(sw_partition(one, 2, 0, NULL, SW_PART_KK, part, &e) == SW_EINVAL, "zero ranks refused");
	uint32_t badpart[2] = { 0, 5 };
	ok(sw_partition_stats(one, 2, 2, NULL, badpart, NULL, &st) == SW_EINVAL, "stats refuse a rank out of range");

	sw_part_method m;
	ok(sw_part_method_parse("kk", &m) == 0 && m == SW_PART_KK, "parse kk");
	ok(sw_part_method_parse("lpt", &m) == 0 && m == SW_PART_LPT, "parse lpt");
	ok(sw_part_method_parse("seq", &m) == 0 && m == SW_PART_SEQ, "parse seq");
	ok(sw_part_method_parse("best", &m) == SW_EINVAL, "parse refuses others");
}

/* Random inputs of random sizes: the invariants of every method. */
static void test_random_properties(void)
{
	int bad_range = 0, bad_bound = 0, bad_det = 0, bad_cap = 0, rounds = 300;
	double worst_kk = 1;
	for (int round = 0; round < rounds; round++) {
		size_t n = rnd_() % 400, k = 1 + rnd_() % 17;
		double *c = malloc((n + 1) * sizeof *c), *load = malloc(k * sizeof *load);
		double *cap = malloc(k * sizeof *cap);
		uint32_t *p = malloc((n + 1) * sizeof *p), *q = malloc((n + 1) * sizeof *q);
		int shape = round % 4;
		for (size_t i = 0; i < n; i++)
			c[i] = shape == 0 ? lognormal_() : shape == 1 ? (double)(rnd_() % 5) : shape == 2 ? unif_() * 1e6
			                                                                                  : 7;
		int use_cap = round % 3 == 0;
		for (size_t r = 0; r < k; r++)
			cap[r] = 0.25 + (double)(rnd_() % 8) / 4;
		for (size_t m = 0; m < 3; m++) {
			const double *cp = use_cap ? cap : NULL;
			if (sw_partition(c, n, k, cp, methods_[m], p, NULL)) {
				bad_range++;
				continue;
			}
			for (size_t i = 0; i < n; i++)
				bad_range += p[i] >= k;
			sw_partition(c, n, k, cp, methods_[m], q, NULL);
			bad_det += n && memcmp(p, q, n * sizeof *p) != 0;
			sw_part_stats st;
			sw_partition_stats(c, n, k, cp, p, load, &st);
			double sum = 0, biggest = 0, csum = 0;
			for (size_t r = 0; r < k; r++) {
				sum += load[r];
				csum += cp ? cp[r] : 1;
			}
			for (size_t i = 0; i < n; i++)
				biggest = c[i] > biggest ? c[i] : biggest;
			bad_range += fabs(sum - st.total) > 1e-6 * (st.total + 1);
			if (methods_[m] == SW_PART_SEQ)
				continue;
			/* greedy's guarantee, which KK keeps too: no rank above its target by more than the largest item */
			for (size_t r = 0; r < k; r++) {
				double target = st.total * (cp ? cp[r] : 1) / csum;
				if (load[r] > target + biggest * (1 + 1e-9) + 1e-9)
					bad_bound++;
			}
			if (methods_[m] == SW_PART_KK && shape == 0 && n >= 64 * k && st.over_bound > worst_kk)
				worst_kk = st.over_bound;
			/* with many small items, each rank's share is its capacity's share */
			if (use_cap && shape == 0 && n >= 100 * k)
				for (size_t r = 0; r < k; r++)
					bad_cap += fabs(load[r] / st.total - cp[r] / csum) > 0.02 * cp[r] / csum;
		}
		free(c);
		free(load);
		free(cap);
		free(p);
		free(q);
	}
	is_int(bad_range, 0, "%d random inputs: every item placed exactly once, on a rank that exists", rounds);
	is_int(bad_det, 0, "the same input gives the same placement");
	is_int(bad_bound, 0, "kk and lpt: no rank over its target by more than the largest item");
	is_int(bad_cap, 0, "capacities: each rank's share within 2%% of its capacity's share");
	ok(worst_kk < 1.005, "kk on many log-normal items stays within 0.5%% of the bound (worst %.5f)", worst_kk);
}

/* The benchmark's case, checked here too: 8 ranks x 512 log-normal samples. */
static void test_quality(void)
{
	enum { N = 4096, K = 8 };
	double *c = malloc(N * sizeof *c);
	uint32_t *p = malloc(N * sizeof *p);
	double sum_kk = 0, sum_lpt = 0, worst_kk = 0;
	for (int round = 0; round < 20; round++) {
		for (size_t i = 0; i < N; i++)
			c[i] = lognormal_() + 2.5e-5 * lognormal_() * lognormal_(); /* linear + a little attention */
		sw_part_stats st;
		sw_partition(c, N, K, NULL, SW_PART_KK, p, NULL);
		sw_partition_stats(c, N, K, NULL, p, NULL, &st);
		sum_kk += st.imbalance;
		if (st.imbalance > worst_kk)
			worst_kk = st.imbalance;
		sw_partition(c, N, K, NULL, SW_PART_LPT, p, NULL);
		sw_partition_stats(c, N, K, NULL, p, NULL, &st);
		sum_lpt += st.imbalance;
	}
	ok(worst_kk <= 1.02, "kk, 8 x 512 log-normal: max/mean <= 1.02 (worst of 20: %.5f)", worst_kk);
	ok(sum_kk <= sum_lpt, "kk is at least as even as lpt on average (%.6f vs %.6f)", sum_kk / 20, sum_lpt / 20);

	/* capacities 1,1,0.5,...: shares within 2% of capacity shares */
	double cap[K] = { 1, 1, 0.5, 1, 2, 1, 0.5, 1 }, load[K], csum = 8;
	sw_part_stats st;
	for (size_t m = 0; m < 2; m++) {
		sw_partition(c, N, K, cap, methods_[m], p, NULL);
		sw_partition_stats(c, N, K, cap, p, load, &st);
		double worst = 0;
		for (size_t r = 0; r < K; r++) {
			double dev = fabs(load[r] / st.total / (cap[r] / csum) - 1);
			worst = dev > worst ? dev : worst;
		}
		ok(worst < 0.02, "%s with capacities: worst share off by %.4f%%", sw_part_method_name(methods_[m]),
		   100 * worst);
	}
	free(c);
	free(p);
}

static void test_micro(void)
{
	uint64_t t[] = { 900, 100, 100, 300, 400, 2000, 50 };
	uint32_t m[7];
	size_t empty, over;
	ok(sw_micro_count(t, 7, 1000) == 3, "ffd packs {2000 | 900,100 | 400,300,100,50} in 3 (got %zu)",
	   sw_micro_count(t, 7, 1000));
	ok(sw_micro_split(t, 7, 1000, 3, m, &empty, &over, NULL) == 0, "split into 3");
	ok(m[5] != m[0] && m[5] != m[4], "the item over budget has a batch of its own");
	is_int(over, 1, "one item over budget, reported");
	is_int(empty, 0, "no empty batch");
	ok(sw_micro_split(t, 7, 1000, 2, m, NULL, NULL, NULL) == SW_EINVAL, "fewer batches than needed is refused");
	ok(sw_micro_split(t, 2, 1000, 5, m, &empty, &over, NULL) == 0 && empty == 3,
	   "2 items in 5 batches leaves 3 empty");
	ok(sw_micro_count(t, 0, 10) == 0, "nothing packs into no batches");

	int bad_budget = 0, bad_range = 0, bad_order = 0, bad_empty = 0, bad_over = 0, rounds = 400;
	for (int round = 0; round < rounds; round++) {
		size_t n = 1 + rnd_() % 300;
		uint64_t budget = 500 + rnd_() % 8000, *tok = malloc(n * sizeof *tok);
		size_t want_over = 0;
		for (size_t i = 0; i < n; i++) {
			tok[i] = (uint64_t)lognormal_() * (round % 5 == 0 ? 3 : 1);
			want_over += tok[i] > budget;
		}
		size_t fewest = sw_micro_count(tok, n, budget), count = fewest + rnd_() % 4;
		uint32_t *mi = malloc(n * sizeof *mi);
		uint64_t *load = calloc(count, sizeof *load);
		size_t *items = calloc(count, sizeof *items);
		if (sw_micro_split(tok, n, budget, count, mi, &empty, &over, NULL)) {
			bad_range++;
		} else {
			for (size_t i = 0; i < n; i++) {
				if (mi[i] >= count) {
					bad_range++;
					continue;
				}
				load[mi[i]] += tok[i];
				items[mi[i]]++;
			}
			size_t nempty = 0;
			for (size_t b = 0; b < count; b++) {
				bad_budget += load[b] > budget && items[b] > 1;
				nempty += items[b] == 0;
			}
			bad_empty += nempty != empty || (nempty && n >= count);
			bad_over += over != want_over;
			/* small, large, small, large: evens rise, odds fall, every even <= every odd */
			uint64_t max_even = 0, min_odd = UINT64_MAX;
			for (size_t b = 0; b < count; b++) {
				if (b % 2 == 0 && load[b] > max_even)
					max_even = load[b];
				if (b % 2 == 1 && load[b] < min_odd)
					min_odd = load[b];
				if (b >= 2 && (b % 2 == 0 ? load[b] < load[b - 2] : load[b] > load[b - 2]))
					bad_order++;
			}
			bad_order += count > 1 && max_even > min_odd;
		}
		free(tok);
		free(mi);
		free(load);
		free(items);
	}
	is_int(bad_range, 0, "%d random splits: every item in a batch that exists", rounds);
	is_int(bad_budget, 0, "no batch over budget unless it is a single item");
	is_int(bad_empty, 0, "empty batches only when there are fewer items than batches, and counted");
	is_int(bad_over, 0, "items over budget counted");
	is_int(bad_order, 0, "batches ordered small, large, small, large");
}

/* 1M items on 64 ranks: the scale sw-balance must handle; time is the benchmark's business. */
static void test_large(void)
{
	size_t n = 1000000, k = 64;
	double *c = malloc(n * sizeof *c);
	uint32_t *p = malloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		c[i] = lognormal_();
	sw_part_stats st;
	ok(sw_partition(c, n, k, NULL, SW_PART_KK, p, NULL) == 0, "kk places 1M items on 64 ranks");
	sw_partition_stats(c, n, k, NULL, p, NULL, &st);
	ok(st.imbalance < 1.0001, "and evenly (max/mean %.7f)", st.imbalance);
	free(c);
	free(p);
}

static void test_groups(void)
{
	sw_groups *g = sw_groups_new();
	uint32_t idx;
	char name[32];
	int bad = 0;
	ok(sw_groups_add(g, "p0", 2, &idx) == 1 && idx == 0, "a new name is numbered 0");
	ok(sw_groups_add(g, "p0", 2, &idx) == 0 && idx == 0, "the same name again is not new");
	ok(sw_groups_add(g, "p0/1", 2, &idx) == 0 && idx == 0, "only len bytes count");
	ok(sw_groups_add(g, "", 0, &idx) == 1 && idx == 1, "the empty name is a name");
	for (int i = 0; i < 50000; i++) {
		int n = snprintf(name, sizeof name, "group-%d", i % 20000);
		int rc = sw_groups_add(g, name, (size_t)n, &idx);
		bad += rc != (i < 20000) || idx != (uint32_t)(2 + i % 20000);
	}
	is_int(bad, 0, "50000 adds of 20000 names: each numbered once, in order, through rehashing");
	is_int(sw_groups_count(g), 20002, "count");
	size_t len;
	ok(!strcmp(sw_groups_name(g, 7, &len), "group-5") && len == 7, "name of an index");
	ok(sw_groups_find(g, "group-19999", 11, &idx) == 1 && idx == 20001, "find a present name");
	ok(sw_groups_find(g, "group-20000", 11, &idx) == 0, "find an absent one");
	sw_groups_free(g);
	sw_groups_free(NULL);
}

static void test_rules(void)
{
	static const struct {
		const char *json;
		sw_drop reason;
		const char *detail;
	} cases[] = {
		{ "{\"prompt_tokens\":[1,2],\"response_tokens\":[3],\"reward\":1}", SW_DROP_KEPT, "" },
		{ "{\"prompt_tokens\":[1,-2],\"response_tokens\":[3]}", SW_DROP_MALFORMED, NULL },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[3],\"logprobs\":[-0.5,-1]}", SW_DROP_MALFORMED,
		  "field 'logprobs' has 2 values, 'response_tokens' has 1" },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[3],\"logprobs\":[{\"$f64\":\"nan\"}]}", SW_DROP_NON_FINITE,
		  "field 'logprobs': value 0 is nan" },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[3],\"reward\":\"high\"}", SW_DROP_MALFORMED,
		  "field 'reward' is a str, not a number" },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[3],\"rewards\":{\"math\":{\"$f64\":\"inf\"}}}",
		  SW_DROP_NON_FINITE, "field 'rewards': 'math' is inf" },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[3],\"verifier_error\":\"timeout\"}", SW_DROP_VERIFIER_ERROR,
		  "timeout" },
		{ "{\"prompt_tokens\":[1],\"response_tokens\":[]}", SW_DROP_EMPTY, "empty response" },
		{ "{\"prompt\":\"\",\"response\":\"\"}", SW_DROP_EMPTY, "no tokens" },
		{ "{\"prompt_tokens\":[1,2,3,4,5,6,7,8,9,10],\"response_tokens\":[3,4]}", SW_DROP_TOO_LONG,
		  "12 tokens, more than --max-len 10" },
	};
	sw_cost_model *cm = sw_cost_model_new();
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sw_rec *r = json_rec(cases[i].json);
		sw_sample_check c;
		sw_drop got = sw_sample_check_rec(cm, r, 10, &c);
		ok(got == cases[i].reason && c.reason == got, "%s: %s (%s)", cases[i].json, sw_drop_name(cases[i].reason),
		   c.detail);
		if (cases[i].detail)
			ok(!strcmp(c.detail, cases[i].detail), "  and says why: '%s'", c.detail);
		sw_rec_free(r);
	}
	ok(!strcmp(sw_drop_name(SW_DROP_UNIFORM), "uniform_group") && !strcmp(sw_drop_name(SW_DROP_KEPT), "kept"),
	   "the reasons' names are the output's");
	sw_cost_model_free(cm);
}

static void test_balancer(void)
{
	const char *lines[] = {
		"{\"group\":\"a\",\"prompt_tokens\":[1,2,3],\"response_tokens\":[4,5],\"reward\":1}",
		"{\"group\":\"a\",\"prompt_tokens\":[1,2,3],\"response_tokens\":[4],\"reward\":0}",
		"{\"group\":\"b\",\"prompt_tokens\":[1],\"response_tokens\":[4],\"reward\":1}",
		"{\"group\":\"b\",\"prompt_tokens\":[1],\"response_tokens\":[5],\"reward\":1}",
		"{\"group\":\"c\",\"prompt_tokens\":[1,2,3,4],\"response_tokens\":[7,8,9],\"reward\":0.5}",
		"{\"group\":\"c\",\"prompt_tokens\":[1,2],\"response_tokens\":[],\"reward\":0}",
		"{\"group\":\"d\",\"prompt_tokens\":[1,2],\"response_tokens\":[3]}",
		"{\"group\":\"c\",\"prompt_tokens\":[1,2,3,4],\"response_tokens\":[5,6],\"reward\":0.25}",
	};
	size_t n = sizeof lines / sizeof *lines;
	sw_error err = { 0 };
	sw_cost_model *cm = sw_cost_model_new();
	sw_balance_opts o = { .ranks = 2, .method = SW_PART_KK, .max_tokens = 8, .drop_uniform = 1, .cost = cm };
	sw_balancer *b = sw_balancer_new(&o, &err);
	ok(b != NULL, "a balancer of 2 ranks");
	for (size_t i = 0; i < n; i++) {
		sw_rec *r = json_rec(lines[i]);
		ok(sw_balancer_add(b, r, 7, i + 1, &err) == 0, "sample %zu taken", i);
		sw_rec_free(r);
	}
	ok(sw_balancer_run(b, &err) == 0, "run (%s)", err.msg);
	sw_balance_summary su;
	sw_balancer_summary(b, &su);
	is_int(su.samples, n, "every sample counted");
	is_int(su.drops[SW_DROP_UNIFORM], 2, "group b, all rewards 1, dropped as uniform");
	is_int(su.drops[SW_DROP_NO_REWARD], 1, "the sample without a reward dropped as such");
	is_int(su.drops[SW_DROP_EMPTY], 1, "the empty response dropped");
	is_int(su.kept, 4, "the rest kept");
	is_int(su.groups, 4, "four groups");
	is_int(su.items, 2, "two items placed: the kept groups a and c");
	ok(sw_balancer_kept(b) == su.kept, "as many in the output as kept");
	sw_balance_sample x;
	sw_balancer_sample(b, 6, &x);
	ok(x.reason == SW_DROP_NO_REWARD && x.file == 7 && x.record == 7 && x.detail, "a dropped sample keeps where it "
	   "came from and why: %s", x.detail);
	/* the output: by rank, then micro-batch; a group on one rank; every micro-batch under budget */
	uint32_t last_rank = 0, last_micro = 0, rank_of_a = 9, rank_of_c = 9;
	uint64_t used[2][16] = { { 0 } };
	int ordered = 1, whole = 1;
	for (size_t j = 0; j < sw_balancer_kept(b); j++) {
		size_t i = sw_balancer_at(b, j);
		sw_balancer_sample(b, i, &x);
		if (x.rank < last_rank || (x.rank == last_rank && x.micro < last_micro))
			ordered = 0;
		last_rank = x.rank;
		last_micro = x.micro;
		uint32_t *g = i < 2 ? &rank_of_a : &rank_of_c;
		if (*g != 9 && *g != x.rank)
			whole = 0;
		*g = x.rank;
		if (x.micro < 16)
			used[x.rank][x.micro] += x.tokens;
	}
	ok(ordered, "kept samples come by rank, then micro-batch");
	ok(whole && rank_of_a != rank_of_c, "each group whole on its own rank");
	int under = 1;
	for (int r = 0; r < 2; r++)
		for (int m = 0; m < 16; m++)
			under &= used[r][m] <= 8;
	ok(under, "every micro-batch within the 8-token budget");
	sw_rank_summary rs0, rs1;
	sw_balancer_rank(b, 0, &rs0);
	sw_balancer_rank(b, 1, &rs1);
	ok(rs0.samples + rs1.samples == 4 && rs0.groups == 1 && rs1.groups == 1, "per rank: samples and groups");
	ok(fabs(rs0.share + rs1.share - 1) < 1e-12 && rs0.capacity_share == 0.5, "shares add up");
	size_t len;
	char *json = sw_balancer_stats_json(b, &len, &err);
	ok(json && len == strlen(json) && json[len - 1] == '\n' && strstr(json, "\"drops\":{\"malformed\":0,") &&
	   strstr(json, "\"uniform_group\":2}") && strstr(json, "\"per_rank\":[{\"rank\":0,"),
	   "the statistics as one line of JSON");
	free(json);
	sw_balancer_free(b);
	sw_balancer_free(NULL);
	sw_cost_model_free(cm);
}

int main(void)
{
	test_groups();
	test_small_exact();
	test_edges();
	test_random_properties();
	test_quality();
	test_micro();
	test_large();
	test_rules();
	test_balancer();
	return tap_done();
}
