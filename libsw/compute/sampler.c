/*
 * sampler.c - the token sampler of sw-rollout (see sw/sampler.h).
 *
 * Everything is computed in double from the float logits, so the kept set
 * and the draw do not depend on how the logits' row was laid out (the
 * log-prob handed out at T = 1 is sw_logprob_of's: the decoder's scoring's
 * and the trainer's arithmetic).  The exponentials over the vocabulary are
 * vmath.h's sw_exp (within 2 ulp of libm's exp), summed in fixed lanes, one
 * clone per vector width with the same bits in each.  The
 * truncations run in transformers' order - top-k, then top-p on what top-k
 * kept (renormalised), then min-p - and each keeps a prefix of the tokens
 * sorted by probability (ties: lower id first), so the kept set is exactly
 * defined; the draw then walks that set in id order.
 *
 * Only the tokens that can be in the kept prefix are sorted: a histogram of
 * the probabilities' binary exponents (one pass) gives the largest power
 * of two such that the tokens at or above it are at least top-k's count or
 * hold at least top-p's mass; those are a prefix of the sorted order (a tie
 * group is never split by a threshold), so sorting them alone gives the
 * prefix a whole sort gives.  Sorting all 49k (152k) tokens took 6.4 (22)
 * ms a token.  Top-p's mass without top-k is the normaliser (exp_row_'s
 * lanes; it was the sorted order's sum, then the sum in id order: the same
 * value to rounding).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "compute/cpu/vmath.h"
#include "sw/engine.h"
#include "sw/sampler.h"

sw_sampling sw_sampling_defaults(void)
{
	return (sw_sampling){ .temperature = 1.0, .top_k = 0, .top_p = 1.0, .min_p = 0.0 };
}

int sw_sampling_check(const sw_sampling *p, sw_error *err)
{
	if (!(isfinite(p->temperature) && p->temperature >= 0))
		return sw_fail(err, SW_EINVAL, "temperature %g is not a finite number >= 0", p->temperature);
	if (p->top_k < 0)
		return sw_fail(err, SW_EINVAL, "top-k %d is negative", p->top_k);
	if (!(p->top_p > 0 && p->top_p <= 1))
		return sw_fail(err, SW_EINVAL, "top-p %g is not in (0, 1]", p->top_p);
	if (!(p->min_p >= 0 && p->min_p <= 1))
		return sw_fail(err, SW_EINVAL, "min-p %g is not in [0, 1]", p->min_p);
	return SW_OK;
}

/* ---- Philox4x32-10 ------------------------------------------------------------- */

static inline void mulhilo_(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
	uint64_t p = (uint64_t)a * b;
	*hi = (uint32_t)(p >> 32);
	*lo = (uint32_t)p;
}

void sw_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	for (int r = 0; r < 10; r++) {
		uint32_t hi0, lo0, hi1, lo1;
		mulhilo_(0xD2511F53u, c0, &hi0, &lo0);
		mulhilo_(0xCD9E8D57u, c2, &hi1, &lo1);
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

double sw_rng_uniform(uint64_t seed, uint64_t stream, uint32_t k, uint32_t step)
{
	uint32_t ctr[4] = { step, k, (uint32_t)stream, (uint32_t)(stream >> 32) };
	uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	uint32_t o[4];
	sw_philox4x32(ctr, key, o);
	uint64_t bits = (((uint64_t)o[0] << 32) | o[1]) >> 11;
	return (double)bits * 0x1p-53;
}

/* ---- the sampler ------------------------------------------------------------- */

typedef struct cand_ {
	double p;
	int32_t id;
} cand_;

/* Buckets of binary exponents: p = exp(z - max) is in (0, 1], so its
 * exponent (frexp's) is 1 (p = 1) down to -1073 (the smallest subnormal). */
#define EXP_HI_ 1
#define NBUCKET_ 1076

struct sw_sampler {
	int vocab;
	sw_sampling par;
	double *p;                 /* exp(z - max), [vocab] */
	cand_ *c;                  /* candidates, [vocab] */
	unsigned char *keep;       /* [vocab] */
	int arg;                   /* the row's argmax (greedy's token) */
	int *count;                /* tokens whose p has exponent EXP_HI_ - b, [NBUCKET_] */
	double *mass;              /* their p summed, [NBUCKET_] */
};

sw_sampler *sw_sampler_new(int vocab, const sw_sampling *p, sw_error *err)
{
	if (vocab < 1) {
		sw_fail(err, SW_EINVAL, "a vocabulary of %d tokens", vocab);
		return NULL;
	}
	if (sw_sampling_check(p, err))
		return NULL;
	sw_sampler *s = calloc(1, sizeof *s);
	if (s) {
		s->vocab = vocab;
		s->par = *p;
		s->p = malloc(sizeof *s->p * (size_t)vocab);
		s->c = malloc(sizeof *s->c * (size_t)vocab);
		s->keep = malloc((size_t)vocab);
		s->count = malloc(sizeof *s->count * NBUCKET_);
		s->mass = malloc(sizeof *s->mass * NBUCKET_);
	}
	if (!s || !s->p || !s->c || !s->keep || !s->count || !s->mass) {
		sw_sampler_free(s);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	return s;
}

void sw_sampler_free(sw_sampler *s)
{
	if (!s)
		return;
	free(s->p);
	free(s->c);
	free(s->keep);
	free(s->count);
	free(s->mass);
	free(s);
}

static int cmp_cand_(const void *a, const void *b)
{
	const cand_ *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* The largest of x[0..n) (NaNs passed over), in *arg its first place, and
 * in *bad whether one is NaN or +Inf: in 16 lanes, one clone per vector
 * width (vmath.h; a maximum and its first place are the same whatever the
 * order).  Each lane keeps its first place of its largest; a lane's places
 * all come before the tail's.  *arg is meaningful where !*bad and the
 * largest is above -Inf. */
#define MAX_LANES_ 16
SW_VEC static float max_checked_(const float *x, int n, int *bad, int *arg)
{
	float mx[MAX_LANES_];
	int b[MAX_LANES_] = { 0 }, ix[MAX_LANES_] = { 0 };
	for (int l = 0; l < MAX_LANES_; l++)
		mx[l] = -INFINITY;
	int n16 = n / MAX_LANES_ * MAX_LANES_;
	for (int j = 0; j < n16; j += MAX_LANES_)
		for (int l = 0; l < MAX_LANES_; l++) {
			float v = x[j + l];
			int gt = v > mx[l];
			b[l] |= (v != v) | (v == INFINITY);
			ix[l] = gt ? j + l : ix[l];
			mx[l] = gt ? v : mx[l];
		}
	float m = -INFINITY;
	int any = 0, a = 0;
	for (int l = 0; l < MAX_LANES_; l++) {
		any |= b[l];
		m = mx[l] > m ? mx[l] : m;
	}
	for (int j = n16; j < n; j++) {
		any |= (x[j] != x[j]) | (x[j] == INFINITY);
		m = x[j] > m ? x[j] : m;
	}
	int found = 0;
	for (int l = 0; l < MAX_LANES_; l++)
		if (mx[l] == m && (!found || ix[l] < a))
			a = ix[l], found = 1;
	for (int j = n16; j < n && !found; j++)
		if (x[j] == m)
			a = j, found = 1;
	*bad = any;
	*arg = a;
	return m;
}

/*
 * e^(z_i - m), z_i = logits[i] / t, in double, into p[i] (store) and their
 * sum, in 16 fixed lanes added up in lane order, then the tail in id order:
 * one clone per vector width, the same bits in each (vmath.h).  At t = 1
 * z_i is the float's double, which x / 1 gives too; the division is left
 * out there only for speed.  Inlined into its two callers with constant
 * div and store.
 */
#define EXP_LANES_ 16
static inline __attribute__((always_inline)) double exp_sum_(double *p, const float *x, int n,
                                                           double t, double m, int div,
                                                           int store)
{
	double s[EXP_LANES_] = { 0 };
	int n16 = n / EXP_LANES_ * EXP_LANES_;
	for (int j = 0; j < n16; j += EXP_LANES_)
		for (int l = 0; l < EXP_LANES_; l++) {
			double e = sw_exp((div ? (double)x[j + l] / t : (double)x[j + l]) - m);
			if (store)
				p[j + l] = e;
			s[l] += e;
		}
	double z = 0;
	for (int l = 0; l < EXP_LANES_; l++)
		z += s[l];
	for (int j = n16; j < n; j++) {
		double e = sw_exp((div ? (double)x[j] / t : (double)x[j]) - m);
		if (store)
			p[j] = e;
		z += e;
	}
	return z;
}

/* p[i] = e^(logits[i] / t - m); their sum, the normaliser. */
SW_VEC static double exp_row_(double *p, const float *logits, int n, double t, double m)
{
	return t == 1 ? exp_sum_(p, logits, n, 1, m, 0, 1) : exp_sum_(p, logits, n, t, m, 1, 1);
}

/* The normaliser alone: exp_row_'s, to the bit. */
SW_VEC static double exp_total_(const float *logits, int n, double t, double m)
{
	return t == 1 ? exp_sum_(NULL, logits, n, 1, m, 0, 0) : exp_sum_(NULL, logits, n, t, m, 1, 0);
}

/* Mark in keep the tokens of p > 0 and p >= thr; their mass.  At thr 0
 * every p > 0 is kept and the zeros add nothing, so the mass is the
 * normaliser z itself, to the bit; else it is summed in exp_sum_'s lanes
 * and order.  Loops of one element type each, so that each vectorises. */
SW_VEC static double keep_from_(unsigned char *keep, const double *p, int n, double thr, double z)
{
#pragma omp simd
	for (int j = 0; j < n; j++)
		keep[j] = (unsigned char)((p[j] > 0) & (p[j] >= thr));
	if (thr <= 0)
		return z;
	double s[EXP_LANES_] = { 0 }, k = 0;
	int n16 = n / EXP_LANES_ * EXP_LANES_;
	for (int j = 0; j < n16; j += EXP_LANES_)
		for (int l = 0; l < EXP_LANES_; l++)
			s[l] += ((p[j + l] > 0) & (p[j + l] >= thr)) ? p[j + l] : 0.0;
	for (int l = 0; l < EXP_LANES_; l++)
		k += s[l];
	for (int j = n16; j < n; j++)
		k += keep[j] ? p[j] : 0.0;
	return k;
}

/* Row maximum of logits / t, with the checks every caller needs. */
static int row_max_(const float *logits, int vocab, double t, double *mx, int *arg, sw_error *err)
{
	if (t == 1) {
		/* A float's double is exact and keeps the order: the largest
		 * float and its first place, in one pass (the loop below, which
		 * names a bad logit's place, only for a bad row). */
		int bad, a;
		float mf = max_checked_(logits, vocab, &bad, &a);
		if (!bad && mf > -INFINITY) {
			*mx = (double)mf, *arg = a;
			return SW_OK;
		}
	}
	double m = -INFINITY;
	int a = -1;
	for (int i = 0; i < vocab; i++) {
		float l = logits[i];
		if (isnan(l) || l == INFINITY)
			return sw_fail(err, SW_ERANGE, "logit %d is %s", i, isnan(l) ? "NaN" : "+Inf");
		double z = t == 1 ? (double)l : (double)l / t; /* x / 1 is x: the same bits */
		if (z > m)
			m = z, a = i;
	}
	if (a < 0)
		return sw_fail(err, SW_ERANGE, "every logit is -Inf");
	*mx = m, *arg = a;
	return SW_OK;
}

/* The tokens of p > 0 and p >= thr sorted into s->c: their count (thr 0:
 * every token). */
static int sorted_from_(sw_sampler *s, double thr)
{
	int n = 0;
	for (int i = 0; i < s->vocab; i++)
		if (s->p[i] > 0 && s->p[i] >= thr)
			s->c[n++] = (cand_){ s->p[i], i };
	qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand_);
	return n;
}

/* Top-p's cut of the sorted s->c[0..n): the length of the shortest prefix
 * whose mass, added in sorted order, reaches target; *short_ when none does. */
static int topp_cut_(const sw_sampler *s, int n, double target, bool *short_)
{
	double cum = 0;
	int j = 0;
	while (j < n) {
		cum += s->c[j++].p;
		if (cum >= target)
			break;
	}
	*short_ = cum < target;
	return j;
}

/*
 * The sorted order's prefix that top-k (by_count) or top-p (by mass, of the
 * normaliser z) can keep, sorted into s->c: its length.  The tokens of p at
 * or above 2^e for the largest e at which they reach top-k's count, or
 * top-p's share of z (times 1 + 2^-40: the sorted order's sum may round
 * lower; a shortfall is caught by the caller anyway), else all of them
 * (*all).
 */
static int sorted_prefix_(sw_sampler *s, double z, bool by_count, bool *all)
{
	const sw_sampling *par = &s->par;
	int V = s->vocab;
	memset(s->count, 0, sizeof *s->count * NBUCKET_);
	memset(s->mass, 0, sizeof *s->mass * NBUCKET_);
	for (int i = 0; i < V; i++) {
		double p = s->p[i];
		if (p > 0) {
			int e;
			frexp(p, &e);
			int b = EXP_HI_ - e; /* 0 .. NBUCKET_ - 1 */
			s->count[b]++;
			s->mass[b] += p;
		}
	}
	double want = par->top_p * z * (1 + 0x1p-40), mass = 0;
	long cnt = 0;
	int last = -1;
	for (int b = 0; b < NBUCKET_; b++) {
		cnt += s->count[b], mass += s->mass[b];
		if (by_count ? cnt >= par->top_k : mass >= want) {
			last = b;
			break;
		}
	}
	*all = last < 0;
	/* p >= 2^(EXP_HI_ - last - 1): frexp's exponent e means p in [2^(e-1), 2^e) */
	return sorted_from_(s, last < 0 ? 0.0 : ldexp(1.0, EXP_HI_ - last - 1));
}

/*
 * Mark the kept set in s->keep and fill s->p; *sum is the kept mass, *z the
 * full normaliser, *m the maximum of logits / T.  Greedy marks the argmax
 * and fills only its p (1); its *z is NaN (greedy's log-prob is T = 1's).
 */
static int support_(sw_sampler *s, const float *logits, double *sum, double *z, double *m,
                    sw_error *err)
{
	const sw_sampling *par = &s->par;
	int V = s->vocab, arg = 0;
	double t = par->temperature > 0 ? par->temperature : 1.0;
	int rc = row_max_(logits, V, t, m, &arg, err);
	if (rc)
		return rc;
	s->arg = arg;
	memset(s->keep, 0, (size_t)V);
	if (par->temperature == 0) {
		/* Greedy keeps the argmax, whose term is e^0 = 1: no other is
		 * needed (its log-prob is sw_logprob_of's, at T = 1), and the
		 * exponentials of the whole row were most of a greedy token's
		 * time.  The normaliser is not made. */
		s->p[arg] = 1.0;
		s->keep[arg] = 1;
		*sum = 1.0, *z = NAN;
		return SW_OK;
	}
	double Z = exp_row_(s->p, logits, V, t, *m);
	*z = Z;
	bool trunc_k = par->top_k > 0 && par->top_k < V, trunc_p = par->top_p < 1;
	if (!trunc_k && !trunc_p) {
		/* min-p alone is a threshold: no order needed (p[arg] is 1) */
		*sum = keep_from_(s->keep, s->p, V, par->min_p, Z);
		return SW_OK;
	}
	bool all;
	int n = sorted_prefix_(s, Z, trunc_k, &all);
	if (trunc_k && par->top_k < n)
		n = par->top_k;
	if (trunc_p) {
		/* after top-k: its mass in sorted order; else the normaliser */
		double zk = 0;
		if (trunc_k)
			for (int i = 0; i < n; i++)
				zk += s->c[i].p;
		else
			zk = Z;
		bool short_;
		int j = topp_cut_(s, n, par->top_p * zk, &short_);
		if (short_ && !trunc_k && !all) /* the threshold's tokens fell short by rounding: all */
			j = topp_cut_(s, sorted_from_(s, 0.0), par->top_p * zk, &short_);
		n = j;
	}
	double thr = par->min_p * s->c[0].p, kept = 0;
	for (int i = 0; i < n && s->c[i].p >= thr; i++) {
		s->keep[s->c[i].id] = 1;
		kept += s->c[i].p;
	}
	*sum = kept;
	return SW_OK;
}

int sw_sampler_support(sw_sampler *s, const float *logits, int32_t *ids, double *probs,
                       sw_error *err)
{
	double sum, z, m;
	int rc = support_(s, logits, &sum, &z, &m, err);
	if (rc)
		return rc;
	int n = 0;
	for (int i = 0; i < s->vocab; i++)
		if (s->keep[i]) {
			ids[n] = i;
			probs[n++] = s->p[i] / sum;
		}
	return n;
}

int sw_sampler_pick(sw_sampler *s, const float *logits, double u, float *logprob, sw_error *err)
{
	double sum, z, m;
	int rc = support_(s, logits, &sum, &z, &m, err);
	if (rc)
		return rc;
	double target = u * sum, cum = 0;
	int tok = s->arg; /* greedy's: the one kept */
	for (int i = 0; i < s->vocab && s->par.temperature > 0; i++) {
		if (!s->keep[i])
			continue;
		tok = i;
		cum += s->p[i];
		if (cum > target)
			break;
	}
	if (logprob) {
		/* At T = 1 (greedy's too) sw_sampling_logprob()'s arithmetic is
		 * the CPU logprob op's; otherwise support_() took m and z in its
		 * order: the same bits, without a second pass of exp in double. */
		double t = s->par.temperature > 0 ? s->par.temperature : 1.0;
		*logprob = t == 1 ? sw_logprob_of(logits, s->vocab, tok)
		                  : (float)((double)logits[tok] / t - m - log(z));
	}
	return tok;
}

float sw_sampling_logprob(const float *logits, int vocab, double temperature, int token)
{
	if (token < 0 || token >= vocab)
		return NAN;
	double t = temperature > 0 ? temperature : 1.0, m = -INFINITY;
	/* T = 1: the log-prob the decoder's scoring (sw_decoder_score) and the
	 * trainer's forward compute, to the bit, so a rollout's log-probs are
	 * theirs however the logits round (sw_logprob_of: the CPU op's sums). */
	if (t == 1)
		return sw_logprob_of(logits, vocab, token);
	for (int i = 0; i < vocab; i++) {
		double x = (double)logits[i] / t;
		if (x > m)
			m = x;
	}
	double z = exp_total_(logits, vocab, t, m);
	return (float)((double)logits[token] / t - m - log(z));
}
