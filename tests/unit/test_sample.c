/*
 * test_sample.c - the sampler of sw-rollout: Philox against the Random123
 * known-answer vectors, the exact sets top-k, top-p and min-p keep, greedy
 * ties, the log-probabilities, and the frequencies of many draws against
 * the distribution they come from; sw_exp (the sampler's exponential)
 * against libm's, and the sampler's vectorised sums against the same
 * arithmetic done here one element at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compute/cpu/vmath.h"
#include "sw/sw.h"
#include "tap.h"

#define V 8

/* probabilities by id (a permutation, so that order by id != order by probability) */
static const double P[V] = { 0.05, 0.25, 0.02, 0.40, 0.10, 0.15, 0.03, 0.00 };

static void logits_of_(float *l, double t)
{
	for (int i = 0; i < V; i++)
		l[i] = P[i] > 0 ? (float)(log(P[i]) * t) : -INFINITY;
}

/* The support under par, as a bitmask of ids, with its probabilities. */
static unsigned support_(sw_sampling par, const float *l, double *probs)
{
	sw_error err = { 0 };
	sw_sampler *s = sw_sampler_new(V, &par, &err);
	int32_t ids[V];
	double pr[V];
	int n = sw_sampler_support(s, l, ids, pr, &err);
	unsigned mask = 0;
	for (int i = 0; i < n; i++) {
		mask |= 1u << ids[i];
		if (probs)
			probs[ids[i]] = pr[i];
	}
	sw_sampler_free(s);
	return n > 0 ? mask : 0xffffffffu;
}

static void test_philox(void)
{
	/* Random123 kat_vectors, philox4x32 with 10 rounds */
	static const uint32_t ctr[3][4] = { { 0, 0, 0, 0 },
		{ 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff },
		{ 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 } };
	static const uint32_t key[3][2] = { { 0, 0 }, { 0xffffffff, 0xffffffff }, { 0xa4093822, 0x299f31d0 } };
	static const uint32_t want[3][4] = { { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
		{ 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
		{ 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } };
	for (int i = 0; i < 3; i++) {
		uint32_t o[4];
		sw_philox4x32(ctr[i], key[i], o);
		ok(!memcmp(o, want[i], sizeof o), "philox4x32-10 known answer %d (%08x %08x %08x %08x)", i,
		   o[0], o[1], o[2], o[3]);
	}
	double a = sw_rng_uniform(7, 3, 2, 1), b = sw_rng_uniform(7, 3, 2, 1);
	ok(a == b && a >= 0 && a < 1, "the draw is a pure function of its counter");
	ok(sw_rng_uniform(7, 3, 2, 2) != a && sw_rng_uniform(7, 3, 3, 1) != a &&
	   sw_rng_uniform(7, 4, 2, 1) != a && sw_rng_uniform(8, 3, 2, 1) != a &&
	   sw_rng_uniform(7, 3 + (1ull << 32), 2, 1) != a,
	   "step, k, stream (both halves) and seed each change the draw");
	double sum = 0;
	for (uint32_t i = 0; i < 100000; i++)
		sum += sw_rng_uniform(1, 0, 0, i);
	ok(fabs(sum / 100000 - 0.5) < 0.005, "uniform mean %.4f", sum / 100000);
}

static void test_check(void)
{
	sw_error err = { 0 };
	sw_sampling p = sw_sampling_defaults();
	is_int(sw_sampling_check(&p, &err), 0, "defaults are valid");
	p.temperature = -0.5;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "negative temperature: %s", err.msg);
	p.temperature = NAN;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "NaN temperature: %s", err.msg);
	p = sw_sampling_defaults(), p.top_p = 0;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "top-p 0: %s", err.msg);
	p = sw_sampling_defaults(), p.top_p = 1.01;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "top-p above 1: %s", err.msg);
	p = sw_sampling_defaults(), p.min_p = 1.5;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "min-p above 1: %s", err.msg);
	p = sw_sampling_defaults(), p.top_k = -1;
	is_int(sw_sampling_check(&p, &err), SW_EINVAL, "negative top-k: %s", err.msg);
	ok(sw_sampler_new(V, &p, &err) == NULL, "a sampler is not made with bad settings");
}

static void test_sets(void)
{
	float l[V];
	logits_of_(l, 1);
	sw_sampling p = sw_sampling_defaults();
	double pr[V] = { 0 };
	/* ids by probability: 3 (.40), 1 (.25), 5 (.15), 4 (.10), 0 (.05), 6 (.03), 2 (.02); 7 is -Inf */
	is_int(support_(p, l, NULL), 0x7f, "no truncation keeps every token of non-zero probability");
	p.top_k = 3;
	is_int(support_(p, l, pr), (1 << 3) | (1 << 1) | (1 << 5), "top-k 3 keeps the three largest");
	ok(fabs(pr[3] - 0.4 / 0.8) < 1e-6 && fabs(pr[1] - 0.25 / 0.8) < 1e-6 && fabs(pr[5] - 0.15 / 0.8) < 1e-6,
	   "top-k renormalises what it keeps");
	p.top_k = 100;
	is_int(support_(p, l, NULL), 0x7f, "top-k above the vocabulary keeps all");
	p = sw_sampling_defaults(), p.top_p = 0.6;
	is_int(support_(p, l, NULL), (1 << 3) | (1 << 1), "top-p 0.6 keeps the smallest set reaching it (.40 + .25)");
	p.top_p = 0.9;
	is_int(support_(p, l, NULL), (1 << 3) | (1 << 1) | (1 << 5) | (1 << 4),
	       "top-p 0.9 keeps .40 .25 .15 .10");
	p.top_p = 0.3;
	is_int(support_(p, l, NULL), 1 << 3, "top-p below the largest keeps the largest only");
	p = sw_sampling_defaults(), p.top_k = 4, p.top_p = 0.8;
	/* top-4 mass .9: renormalised .444 .278 .167 .111, cumulative .444 .722 .889 */
	is_int(support_(p, l, NULL), (1 << 3) | (1 << 1) | (1 << 5), "top-p applies to what top-k kept, renormalised");
	p = sw_sampling_defaults(), p.min_p = 0.3;
	is_int(support_(p, l, pr), (1 << 3) | (1 << 1) | (1 << 5), "min-p 0.3 keeps p >= 0.12");
	ok(fabs(pr[5] - 0.15 / 0.8) < 1e-6, "min-p renormalises what it keeps");
	p.min_p = 1;
	is_int(support_(p, l, NULL), 1 << 3, "min-p 1 keeps the largest only");
	p = sw_sampling_defaults(), p.top_k = 5, p.min_p = 0.5;
	is_int(support_(p, l, NULL), (1 << 3) | (1 << 1), "min-p after top-k");
	p = sw_sampling_defaults(), p.temperature = 0;
	is_int(support_(p, l, NULL), 1 << 3, "temperature 0 keeps the argmax");

	/* ties go to the lower id */
	float t[V] = { 0, 2, 1, 2, 2, 0, 0, 0 };
	p = sw_sampling_defaults(), p.temperature = 0;
	is_int(support_(p, t, NULL), 1 << 1, "greedy: a tie goes to the lower id");
	p = sw_sampling_defaults(), p.top_k = 2;
	is_int(support_(p, t, NULL), (1 << 1) | (1 << 3), "top-k: ties at the cut go to the lower ids");

	/* temperature reshapes before truncation: at T = 2 the probabilities are sqrt(P) renormalised */
	p = sw_sampling_defaults(), p.temperature = 2;
	support_(p, l, pr);
	double z = 0;
	for (int i = 0; i < V; i++)
		z += sqrt(P[i]);
	ok(fabs(pr[3] - sqrt(0.4) / z) < 1e-6 && fabs(pr[2] - sqrt(0.02) / z) < 1e-6, "temperature 2 flattens");
	p.top_p = 0.5; /* sqrt-probabilities normalised: .2405 .1901 .1473 .1202 ... */
	is_int(support_(p, l, NULL), (1 << 3) | (1 << 1) | (1 << 5), "top-p sees the tempered distribution");
}

static void test_errors(void)
{
	sw_error err = { 0 };
	sw_sampling p = sw_sampling_defaults();
	sw_sampler *s = sw_sampler_new(V, &p, &err);
	float l[V];
	logits_of_(l, 1);
	l[4] = NAN;
	is_int(sw_sampler_pick(s, l, 0.5, NULL, &err), SW_ERANGE, "a NaN logit is an error: %s", err.msg);
	l[4] = INFINITY;
	is_int(sw_sampler_pick(s, l, 0.5, NULL, &err), SW_ERANGE, "a +Inf logit is an error: %s", err.msg);
	for (int i = 0; i < V; i++)
		l[i] = -INFINITY;
	is_int(sw_sampler_pick(s, l, 0.5, NULL, &err), SW_ERANGE, "all -Inf is an error: %s", err.msg);
	sw_sampler_free(s);
	sw_sampler_free(NULL);
	ok(sw_sampler_new(0, &p, &err) == NULL, "no sampler for an empty vocabulary");
}

/* Draw n tokens with the counter RNG; compare the frequencies with probs (within 5 sigma). */
static void freq_(sw_sampling p, const float *l, const char *what)
{
	enum { N = 200000 };
	sw_error err = { 0 };
	sw_sampler *s = sw_sampler_new(V, &p, &err);
	int32_t ids[V];
	double pr[V], want[V] = { 0 };
	int n = sw_sampler_support(s, l, ids, pr, &err);
	for (int i = 0; i < n; i++)
		want[ids[i]] = pr[i];
	long cnt[V] = { 0 };
	int bad = 0;
	for (uint32_t i = 0; i < N; i++) {
		int tok = sw_sampler_pick(s, l, sw_rng_uniform(42, 9, 0, i), NULL, &err);
		if (tok < 0 || tok >= V)
			bad++;
		else
			cnt[tok]++;
	}
	double worst = 0;
	int outside = 0;
	for (int i = 0; i < V; i++) {
		double f = (double)cnt[i] / N, sd = sqrt(want[i] * (1 - want[i]) / N) + 1e-12;
		if (want[i] == 0 && cnt[i])
			outside++;
		if (fabs(f - want[i]) / sd > worst)
			worst = fabs(f - want[i]) / sd;
	}
	ok(!bad && !outside && worst < 5, "%s: frequencies within %.2f sigma of the distribution, none outside it",
	   what, worst);
	sw_sampler_free(s);
}

static void test_draws(void)
{
	float l[V];
	logits_of_(l, 1);
	sw_sampling p = sw_sampling_defaults();
	freq_(p, l, "T 1");
	p.temperature = 0.7;
	freq_(p, l, "T 0.7");
	p = sw_sampling_defaults(), p.top_k = 3;
	freq_(p, l, "top-k 3");
	p = sw_sampling_defaults(), p.top_p = 0.9;
	freq_(p, l, "top-p 0.9");
	p = sw_sampling_defaults(), p.min_p = 0.2;
	freq_(p, l, "min-p 0.2");

	/* logprob: the sampling policy's, log softmax(logits / T), untruncated */
	sw_error err = { 0 };
	p = sw_sampling_defaults(), p.temperature = 0.5, p.top_k = 2;
	sw_sampler *s = sw_sampler_new(V, &p, &err);
	float lp = 0;
	/* kept in id order: id 1 (mass .0625), id 3 (.16); u * .2225 walks them */
	int tok = sw_sampler_pick(s, l, 0.5, &lp, &err);
	double z = 0;
	for (int i = 0; i < V; i++)
		z += P[i] * P[i];
	is_int(tok, 3, "u 0.5 under top-k 2 picks id 3 (past id 1's .0625 of .2225)");
	ok(fabs(lp - log(0.4 * 0.4 / z)) < 1e-6, "logprob is log softmax(logits/T), before top-k (%g vs %g)", lp,
	   log(0.16 / z));
	ok(lp == sw_sampling_logprob(l, V, 0.5, tok), "sw_sampling_logprob gives the same bits");
	is_int(sw_sampler_pick(s, l, 0.99, &lp, &err), 3, "u 0.99 picks the last kept id");
	is_int(sw_sampler_pick(s, l, 0.25, &lp, &err), 1, "u 0.25 picks id 1 (.0556 < .0625)");
	is_int(sw_sampler_pick(s, l, 0.0, &lp, &err), 1, "u 0 picks the first kept id");
	sw_sampler_free(s);
	p = sw_sampling_defaults(), p.temperature = 0;
	s = sw_sampler_new(V, &p, &err);
	tok = sw_sampler_pick(s, l, 0.999, &lp, &err);
	ok(tok == 3 && fabs(lp - log(0.4)) < 1e-6, "greedy ignores u; its logprob is at T = 1 (%g)", lp);
	ok(lp == sw_sampling_logprob(l, V, 0, tok), "greedy: sw_sampling_logprob gives the same bits");
	sw_sampler_free(s);
	/* the same over a vocabulary of random logits, where the order of the sums shows */
	enum { BV = 32000 };
	float *bl = malloc(sizeof *bl * BV);
	uint32_t h = 1;
	for (int i = 0; i < BV && bl; i++) {
		h = h * 1664525u + 1013904223u;
		bl[i] = (float)((double)(h >> 8) / (1 << 24) * 20 - 10);
	}
	s = bl ? sw_sampler_new(BV, &p, &err) : NULL;
	tok = s ? sw_sampler_pick(s, bl, 0.5, &lp, &err) : -1;
	ok(tok >= 0 && lp == sw_sampling_logprob(bl, BV, 0, tok),
	   "greedy over %d logits: its logprob is sw_sampling_logprob's, bit for bit", BV);
	sw_sampler_free(s);
	free(bl);
	ok(isnan(sw_sampling_logprob(l, V, 1, V)), "logprob of an id outside the vocabulary is NaN");
}

/*
 * The kept sets of large vocabularies against a whole sort: the sampler
 * sorts only the tokens at or above a power of two (sampler.c); this test
 * sorts all of them, as the definition says (probabilities in double,
 * ties to the lower id; top-p's mass the normaliser in id order, after
 * top-k the kept tokens' in sorted order), for peaked, flat and tied
 * logits, every setting the same set.
 */
typedef struct rc_ {
	double p;
	int id;
} rc_;

static int rc_cmp_(const void *a, const void *b)
{
	const rc_ *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static int ref_support_(const float *l, int n, sw_sampling par, unsigned char *keep)
{
	double t = par.temperature > 0 ? par.temperature : 1, m = -INFINITY, z = 0;
	for (int i = 0; i < n; i++)
		m = fmax(m, t == 1 ? (double)l[i] : (double)l[i] / t);
	rc_ *c = malloc(sizeof *c * (size_t)n);
	int k = 0;
	for (int i = 0; i < n; i++) {
		double p = exp((t == 1 ? (double)l[i] : (double)l[i] / t) - m);
		z += p;
		if (p > 0)
			c[k++] = (rc_){ p, i };
	}
	qsort(c, (size_t)k, sizeof *c, rc_cmp_);
	bool tk = par.top_k > 0 && par.top_k < n;
	if (tk && par.top_k < k)
		k = par.top_k;
	if (par.top_p < 1) {
		double zk = 0, cum = 0;
		if (tk)
			for (int i = 0; i < k; i++)
				zk += c[i].p;
		else
			zk = z;
		int j = 0;
		while (j < k) {
			cum += c[j++].p;
			if (cum >= par.top_p * zk)
				break;
		}
		k = j;
	}
	memset(keep, 0, (size_t)n);
	int kept = 0;
	for (int i = 0; i < k && c[i].p >= par.min_p * c[0].p; i++)
		keep[c[i].id] = 1, kept++;
	free(c);
	return kept;
}

static void test_large_(void)
{
	enum { NV = 6007 };
	static float l[NV];
	static int32_t ids[NV];
	static double pr[NV];
	static unsigned char keep[NV];
	static const struct {
		double t;
		int k;
		double p, minp;
	} set[] = { { 1, 0, 0.9, 0 }, { 0.7, 0, 0.95, 0 }, { 1, 50, 1, 0 }, { 1.3, 200, 0.8, 0 },
		    { 1, 0, 0.5, 0.05 }, { 1, 1, 1, 0 }, { 1, 6006, 0.999, 0 }, { 1, 0, 0.999999, 0 } };
	const char *dist[] = { "peaked", "flat", "tied" };
	uint64_t rng = 99;
	int same = 1, checked = 0, sizes = 0;
	for (int d = 0; d < 3; d++)
		for (int rep = 0; rep < 4; rep++) {
			for (int i = 0; i < NV; i++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				double u = (double)(rng >> 11) * 0x1p-53;
				/* peaked: -1.1 log(rank-like); flat: small spread; tied: 12 values */
				l[i] = d == 0 ? (float)(-1.1 * log(1 + u * NV))
				     : d == 1 ? (float)(u - 0.5)
				              : (float)((int)(u * 12) * 0.37);
			}
			for (size_t si = 0; si < sizeof set / sizeof set[0]; si++) {
				sw_sampling par = sw_sampling_defaults();
				par.temperature = set[si].t, par.top_k = set[si].k, par.top_p = set[si].p;
				par.min_p = set[si].minp;
				sw_error err = { 0 };
				sw_sampler *s = sw_sampler_new(NV, &par, &err);
				int n = s ? sw_sampler_support(s, l, ids, pr, &err) : -1;
				int nref = ref_support_(l, NV, par, keep);
				int eq = n == nref;
				for (int i = 0; i < n && eq; i++)
					eq = keep[ids[i]] == 1;
				if (!eq && same)
					printf("#   %s logits, T %g top-k %d top-p %g min-p %g: %d kept, the whole sort keeps %d\n",
					     dist[d], set[si].t, set[si].k, set[si].p, set[si].minp, n, nref);
				same &= eq;
				checked++, sizes += n;
				sw_sampler_free(s);
			}
		}
	ok(same, "6007 tokens, peaked, flat and tied logits, %d settings: the kept sets of a whole sort "
	         "(%d sets, %d tokens kept in all)", checked, checked, sizes);
}

/* Units in the last place between a and b (b finite and not 0). */
static double ulps_(double a, double b)
{
	return fabs(a - b) / (nextafter(fabs(b), INFINITY) - fabs(b));
}

static void test_exp_(void)
{
	uint64_t rng = 7;
	double worst = 0, at = 0;
	int zero_inf = 1;
	for (int i = 0; i < 400000; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		double x = -746 + (double)(rng >> 11) * 0x1p-53 * 1456;
		double a = sw_exp(x), b = exp(x);
		if (b == 0 || isinf(b)) {
			zero_inf &= a == b;
			continue;
		}
		if (ulps_(a, b) > worst)
			worst = ulps_(a, b), at = x;
	}
	ok(worst <= 2 && zero_inf, "sw_exp within 2 ulp of libm's exp over [-746, 710] (worst %.2f at %.17g), "
	                           "0 and inf where exp gives them", worst, at);
	ok(sw_exp(0) == 1 && sw_exp(-INFINITY) == 0 && sw_exp(INFINITY) == INFINITY && isnan(sw_exp(NAN)) &&
	   sw_exp(-745.13) == 0x1p-1074 && sw_exp(-745.14) == 0 && sw_exp(709.78) < INFINITY &&
	   sw_exp(709.79) == INFINITY, "sw_exp at 0, +-inf, NaN and the ends of its range");
	ok(ulps_(sw_exp(-720), exp(-720)) <= 2 && ulps_(sw_exp(-1e-17), 1) == 0,
	   "sw_exp within 2 ulp where e^x is subnormal (x = -720), and e^-1e-17 is 1");
}

/*
 * The sampler's exponentials and sums run vectorised (one clone per width);
 * here the same arithmetic one element at a time: without truncation the
 * probabilities are each p / the normaliser (16 lanes added in lane order,
 * then the tail), which must have the same bits, and so must T != 1's
 * log-prob.
 */
static void test_lanes_(void)
{
	enum { NV = 49157, LN = 16 };
	static float l[NV];
	static double p[NV], pr[NV];
	static int32_t ids[NV];
	uint64_t rng = 5;
	for (int i = 0; i < NV; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		l[i] = (float)((double)(rng >> 11) * 0x1p-53 * 30 - 20);
	}
	l[77] = -INFINITY;
	for (int ti = 0; ti < 2; ti++) {
		double t = ti ? 0.7 : 1.0, m = -INFINITY;
		for (int i = 0; i < NV; i++)
			m = fmax(m, (double)l[i] / t);
		double lane[LN] = { 0 }, z = 0;
		for (int i = 0; i < NV; i++)
			p[i] = sw_exp((double)l[i] / t - m);
		int n16 = NV / LN * LN;
		for (int i = 0; i < n16; i++)
			lane[i % LN] += p[i];
		for (int k = 0; k < LN; k++)
			z += lane[k];
		for (int i = n16; i < NV; i++)
			z += p[i];
		sw_sampling par = sw_sampling_defaults();
		par.temperature = t;
		sw_error err = { 0 };
		sw_sampler *s = sw_sampler_new(NV, &par, &err);
		int n = s ? sw_sampler_support(s, l, ids, pr, &err) : -1, same = n == NV - 1;
		for (int i = 0; i < n && same; i++)
			same = ids[i] != 77 && pr[i] == p[ids[i]] / z;
		ok(same, "T %g, %d logits: the sampler's probabilities have the bits of sw_exp / its sum in "
		         "16 lanes computed one at a time (%d kept)", t, NV, n);
		float lp = 0;
		int tok = s ? sw_sampler_pick(s, l, 0.5, &lp, &err) : -1;
		if (ti) {
			float want = (float)((double)l[tok] / t - m - log(z));
			ok(tok >= 0 && lp == want && lp == sw_sampling_logprob(l, NV, t, tok),
			   "T 0.7: the log-prob is the one of that normaliser, and sw_sampling_logprob's "
			   "(%.9g, %.9g)", lp, want);
		}
		sw_sampler_free(s);
	}
}

/* Greedy's token is the first place of the largest logit wherever it sits:
 * in the 16-lane body or the tail, tied within a lane, across lanes, or
 * between the body and the tail. */
static void test_argmax_(void)
{
	static float l[49157];
	static const int sizes[] = { 5, 16, 17, 33, 49157 };
	int good = 1, cases = 0;
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		int n = sizes[si];
		/* places of the maximum: a, and (where >= 0) a tie at b */
		int pl[][2] = { { 0, -1 }, { n - 1, -1 }, { n / 2, -1 }, { 3, 3 + 16 }, { 7, 2 },
			        { n - 2, n - 1 }, { n / 3, n - 1 }, { 1, 17 } };
		for (size_t k = 0; k < sizeof pl / sizeof pl[0]; k++) {
			int a = pl[k][0], b = pl[k][1];
			if (a >= n || b >= n)
				continue;
			for (int i = 0; i < n; i++)
				l[i] = (float)((i * 37) % 101) * 0.01f - 2;
			l[a] = 3;
			if (b >= 0)
				l[b] = 3;
			int want = b >= 0 && b < a ? b : a;
			sw_sampling par = sw_sampling_defaults();
			par.temperature = 0;
			sw_error err = { 0 };
			sw_sampler *s = sw_sampler_new(n, &par, &err);
			int got = s ? sw_sampler_pick(s, l, 0.5, NULL, &err) : -1;
			if (got != want && good)
				printf("#   %d logits, the largest at %d and %d: picked %d\n", n, a, b, got);
			good &= got == want;
			cases++;
			sw_sampler_free(s);
		}
	}
	ok(good, "greedy picks the first place of the largest logit (%d rows: body, tail, ties in a lane, "
	         "across lanes, body and tail)", cases);
}

int main(void)
{
	test_philox();
	test_check();
	test_sets();
	test_errors();
	test_draws();
	test_large_();
	test_exp_();
	test_lanes_();
	test_argmax_();
	return tap_done();
}
