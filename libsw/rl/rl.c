/*
 * rl.c - advantages, the clipped policy loss with its gradient, loss
 * aggregation and trainer statistics (see sw/rl.h).
 *
 * Everything is computed in double from float inputs, because the loss is a
 * sum over up to millions of tokens and the references it is tested against
 * are PyTorch float64.  Where verl and TRL differ this file says which it
 * follows; tests/fixtures/make_rl_refs.py implements the same choices in
 * PyTorch, independently of this code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/rl.h"

/* --- names ----------------------------------------------------------------- */

static const char *const algo_names_[] = { "sft", "grpo", "dr_grpo", "dapo", "rloo", "reinforce++" };
static const char *const agg_names_[] = { "token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                          "seq-mean-token-sum-norm" };
static const char *const kl_names_[] = { "k1", "k2", "k3" };

#define NELEM(a) (sizeof(a) / sizeof *(a))

const char *sw_rl_algo_name(sw_rl_algo a)
{
	return (unsigned)a < NELEM(algo_names_) ? algo_names_[a] : "?";
}

const char *sw_rl_agg_name(sw_rl_agg a)
{
	return (unsigned)a < NELEM(agg_names_) ? agg_names_[a] : "?";
}

const char *sw_rl_kl_name(sw_rl_kl k)
{
	return (unsigned)k < NELEM(kl_names_) ? kl_names_[k] : "?";
}

static int parse_(const char *s, const char *const *names, size_t n, int *out)
{
	for (size_t i = 0; s && i < n; i++)
		if (!strcmp(s, names[i])) {
			*out = (int)i;
			return 0;
		}
	return SW_EINVAL;
}

int sw_rl_algo_parse(const char *s, sw_rl_algo *out)
{
	int i, rc = parse_(s, algo_names_, NELEM(algo_names_), &i);
	if (!rc)
		*out = (sw_rl_algo)i;
	return rc;
}

int sw_rl_agg_parse(const char *s, sw_rl_agg *out)
{
	int i, rc = parse_(s, agg_names_, NELEM(agg_names_), &i);
	if (!rc)
		*out = (sw_rl_agg)i;
	return rc;
}

int sw_rl_kl_parse(const char *s, sw_rl_kl *out)
{
	int i, rc = parse_(s, kl_names_, NELEM(kl_names_), &i);
	if (!rc)
		*out = (sw_rl_kl)i;
	return rc;
}

sw_rl_agg sw_rl_algo_default_agg(sw_rl_algo a)
{
	switch (a) {
	case SW_RL_GRPO: return SW_RL_SEQ_MEAN_TOKEN_MEAN;
	case SW_RL_DR_GRPO: return SW_RL_SEQ_MEAN_TOKEN_SUM_NORM;
	default: return SW_RL_TOKEN_MEAN;
	}
}

/* --- KL estimators ---------------------------------------------------------------- */

double sw_rl_kl_value(sw_rl_kl k, double logp, double ref_logp, double *dlogp)
{
	double d = logp - ref_logp, g, v;
	switch (k) {
	case SW_RL_K1:
		v = d, g = 1;
		break;
	case SW_RL_K2:
		v = 0.5 * d * d, g = d;
		break;
	default: {
		/* verl's low_var_kl: kl = ref - logp clamped to +-20, then
		 * exp(kl) - kl - 1 clamped to +-10.  A clamp that holds passes no
		 * gradient, as torch.clamp's backward does outside its range. */
		double kl = -d, live = 1;
		if (kl < -20 || kl > 20) {
			kl = kl < -20 ? -20 : 20;
			live = 0;
		}
		double e = exp(kl);
		v = e - kl - 1;
		if (v > 10) {
			v = 10;
			live = 0;
		}
		g = live ? 1 - e : 0;
	}
	}
	if (dlogp)
		*dlogp = g;
	return v;
}

/* --- checks ---------------------------------------------------------------------------- */

static int check_off_(size_t nseq, const size_t *off, sw_error *err)
{
	if (!nseq)
		return sw_fail(err, SW_EEMPTY, "empty batch: no sequences");
	if (!off)
		return sw_fail(err, SW_EINVAL, "no token offsets");
	if (off[0] != 0)
		return sw_fail(err, SW_EINVAL, "token offsets start at %zu, not 0", off[0]);
	for (size_t i = 0; i < nseq; i++)
		if (off[i + 1] < off[i]) {
			if (err)
				err->record = i + 1;
			return sw_fail(err, SW_EINVAL, "token offsets go backwards (%zu after %zu)", off[i + 1],
			               off[i]);
		}
	return 0;
}

static int bad_value_(sw_error *err, uint64_t seq, uint64_t tok, const char *what, double x)
{
	if (err) {
		err->record = seq;
		err->offset = tok;
	}
	return sw_fail(err, SW_ERANGE, "%s is %s", what, isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf");
}

/* --- advantages ------------------------------------------------------------------------- */

typedef struct {
	uint64_t group;
	size_t seq;
} gidx_;

static int cmp_gidx_(const void *a, const void *b)
{
	const gidx_ *x = a, *y = b;
	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int trains_(const sw_rl_batch *b, size_t i)
{
	return !b->train || b->train[i];
}

/* Outcome estimators: one advantage per sequence from its group's scores. */
static int outcome_(sw_rl_algo a, const sw_rl_batch *b, double eps, const double *score, double *adv,
                    sw_rl_adv_stats *st, sw_error *err)
{
	size_t n = 0;
	gidx_ *ix = malloc(b->nseq * sizeof *ix);
	if (!ix)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t i = 0; i < b->nseq; i++)
		if (trains_(b, i))
			ix[n++] = (gidx_){ b->group[i], i };
	qsort(ix, n, sizeof *ix, cmp_gidx_);
	for (size_t lo = 0, hi; lo < n; lo = hi) {
		for (hi = lo + 1; hi < n && ix[hi].group == ix[lo].group; hi++)
			;
		size_t k = hi - lo;
		double mean = 0, var = 0, mn = INFINITY, mx = -INFINITY;
		for (size_t j = lo; j < hi; j++) {
			double s = score[ix[j].seq];
			mean += s;
			mn = s < mn ? s : mn;
			mx = s > mx ? s : mx;
		}
		mean /= (double)k;
		for (size_t j = lo; j < hi; j++) {
			double d = score[ix[j].seq] - mean;
			var += d * d;
		}
		st->groups++;
		if (k == 1) {
			/* No other response to compare with: no learning signal.
			 * TRL gets the same 0 (nanstd of one value is NaN, zeroed);
			 * verl would hand GRPO the raw score and RLOO the raw reward. */
			st->singleton_groups++;
			adv[ix[lo].seq] = 0;
			continue;
		}
		if (mn == mx) {
			/* Exactly 0, not the rounding residue of s - mean. */
			st->zero_std_groups++;
			for (size_t j = lo; j < hi; j++)
				adv[ix[j].seq] = 0;
			continue;
		}
		double sd = sqrt(var / (double)(k - 1));
		for (size_t j = lo; j < hi; j++) {
			double s = score[ix[j].seq];
			switch (a) {
			case SW_RL_GRPO:
			case SW_RL_DAPO:
				adv[ix[j].seq] = (s - mean) / (sd + eps);
				break;
			case SW_RL_RLOO:
				/* s - (sum - s) / (k - 1), written as verl does */
				adv[ix[j].seq] = s * (double)k / (double)(k - 1) - mean * (double)k / (double)(k - 1);
				break;
			default: /* Dr. GRPO */
				adv[ix[j].seq] = s - mean;
			}
		}
	}
	free(ix);
	return 0;
}

/* REINFORCE++ (verl's compute_reinforce_plus_plus_outcome_advantage):
 * discounted returns of the token rewards, whitened over the batch. */
static int reinforce_pp_(const sw_rl_batch *b, double gamma, float *adv_tok, double *adv_seq)
{
	size_t ntok = b->off[b->nseq];
	double *ret = malloc((ntok ? ntok : 1) * sizeof *ret);
	double sum = 0, var = 0;
	size_t cnt = 0;
	if (!ret)
		return SW_ENOMEM;
	for (size_t i = 0; i < b->nseq; i++) {
		if (!trains_(b, i))
			continue;
		double g = 0;
		for (size_t t = b->off[i + 1]; t-- > b->off[i];) {
			double r = b->kl && b->kl_coef ? -b->kl_coef * (double)b->kl[t] : 0;
			if (t == b->off[i + 1] - 1)
				r += b->reward[i];
			g = r + gamma * g;
			ret[t] = g;
			sum += g;
			cnt++;
		}
	}
	double mean = cnt ? sum / (double)cnt : 0;
	for (size_t i = 0; i < b->nseq; i++)
		if (trains_(b, i))
			for (size_t t = b->off[i]; t < b->off[i + 1]; t++)
				var += (ret[t] - mean) * (ret[t] - mean);
	var = cnt > 1 ? var / (double)(cnt - 1) : 0;
	double rs = 1 / sqrt(var + 1e-8);
	for (size_t i = 0; i < b->nseq; i++) {
		int tr = trains_(b, i);
		for (size_t t = b->off[i]; t < b->off[i + 1]; t++)
			adv_tok[t] = tr ? (float)((ret[t] - mean) * rs) : 0.0f;
		if (adv_seq)
			adv_seq[i] = tr && b->off[i + 1] > b->off[i] ? (ret[b->off[i]] - mean) * rs : 0;
	}
	free(ret);
	return 0;
}

int sw_rl_advantages(sw_rl_algo a, const sw_rl_batch *b, const sw_rl_adv_opts *o, float *adv_tok,
                     double *adv_seq, sw_rl_adv_stats *st_out, sw_error *err)
{
	sw_rl_adv_stats st = { 0 };
	int rc;
	if (!b || !adv_tok)
		return sw_fail(err, SW_EINVAL, "no batch or no output");
	if ((rc = check_off_(b->nseq, b->off, err)))
		return rc;
	if (a == SW_RL_SFT || (unsigned)a > SW_RL_REINFORCE_PP)
		return sw_fail(err, SW_EINVAL, "%s has no advantages", sw_rl_algo_name(a));
	if (!b->reward || (a != SW_RL_REINFORCE_PP && !b->group))
		return sw_fail(err, SW_EINVAL, "no rewards or no group ids");
	double eps = o && o->eps > 0 ? o->eps : 1e-6;
	double gamma = o && o->gamma > 0 ? o->gamma : 1;
	if (o && (o->eps < 0 || o->gamma < 0 || o->gamma > 1))
		return sw_fail(err, SW_EINVAL, "eps must be >= 0 and gamma in [0, 1]");

	/* Every value that will be read must be a number: a NaN reward is an
	 * error of the stage that produced it, never a zero advantage. */
	st.nseq = b->nseq;
	st.reward_min = INFINITY;
	st.reward_max = -INFINITY;
	size_t ntrain = 0;
	for (size_t i = 0; i < b->nseq; i++) {
		if (!trains_(b, i)) {
			st.masked++;
			continue;
		}
		double r = b->reward[i];
		if (!isfinite(r))
			return bad_value_(err, i + 1, 0, "reward", r);
		if (b->kl && b->kl_coef)
			for (size_t t = b->off[i]; t < b->off[i + 1]; t++)
				if (!isfinite(b->kl[t]))
					return bad_value_(err, i + 1, t, "KL penalty", b->kl[t]);
		ntrain++;
		st.reward_mean += r;
		st.reward_min = r < st.reward_min ? r : st.reward_min;
		st.reward_max = r > st.reward_max ? r : st.reward_max;
	}
	if (!ntrain)
		return sw_fail(err, SW_EEMPTY, "every sequence of the batch is masked out");
	st.reward_mean /= (double)ntrain;
	for (size_t i = 0; i < b->nseq; i++)
		if (trains_(b, i))
			st.reward_std += (b->reward[i] - st.reward_mean) * (b->reward[i] - st.reward_mean);
	st.reward_std = sqrt(st.reward_std / (double)ntrain);

	double *seq = adv_seq ? adv_seq : malloc(b->nseq * sizeof *seq);
	if (!seq)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (a == SW_RL_REINFORCE_PP) {
		/* batch-normalised: groups play no part */
		if (reinforce_pp_(b, gamma, adv_tok, seq)) {
			if (!adv_seq)
				free(seq);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
	} else {
		double *score = malloc(b->nseq * sizeof *score);
		if (!score) {
			if (!adv_seq)
				free(seq);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < b->nseq; i++) {
			double s = trains_(b, i) ? b->reward[i] : 0;
			/* verl's compute_rewards with use_kl_in_reward: the token
			 * rewards are -beta kl, and the outcome estimators sum them */
			if (trains_(b, i) && b->kl && b->kl_coef)
				for (size_t t = b->off[i]; t < b->off[i + 1]; t++)
					s -= b->kl_coef * (double)b->kl[t];
			score[i] = s;
			seq[i] = 0;
		}
		rc = outcome_(a, b, eps, score, seq, &st, err);
		free(score);
		if (rc) {
			if (!adv_seq)
				free(seq);
			return rc;
		}
		for (size_t i = 0; i < b->nseq; i++)
			for (size_t t = b->off[i]; t < b->off[i + 1]; t++)
				adv_tok[t] = trains_(b, i) ? (float)seq[i] : 0.0f;
	}

	st.adv_min = INFINITY;
	st.adv_max = -INFINITY;
	for (size_t i = 0; i < b->nseq; i++)
		if (trains_(b, i)) {
			st.adv_mean += seq[i];
			st.adv_min = seq[i] < st.adv_min ? seq[i] : st.adv_min;
			st.adv_max = seq[i] > st.adv_max ? seq[i] : st.adv_max;
		}
	st.adv_mean /= (double)ntrain;
	for (size_t i = 0; i < b->nseq; i++)
		if (trains_(b, i))
			st.adv_std += (seq[i] - st.adv_mean) * (seq[i] - st.adv_mean);
	st.adv_std = sqrt(st.adv_std / (double)ntrain);
	if (!adv_seq)
		free(seq);
	if (st_out)
		*st_out = st;
	return 0;
}

/* --- aggregation weights ------------------------------------------------------------------ */

int sw_rl_weights(sw_rl_agg m, size_t nseq, const size_t *off, const unsigned char *train,
                  double max_len, double *w, sw_error *err)
{
	int rc;
	if ((rc = check_off_(nseq, off, err)))
		return rc;
	if (!w)
		return sw_fail(err, SW_EINVAL, "no output");
	if ((unsigned)m > SW_RL_SEQ_MEAN_TOKEN_SUM_NORM)
		return sw_fail(err, SW_EINVAL, "unknown aggregation mode %d", (int)m);
	if (m == SW_RL_SEQ_MEAN_TOKEN_SUM_NORM && !(max_len > 0 && isfinite(max_len)))
		return sw_fail(err, SW_EINVAL, "seq-mean-token-sum-norm needs a maximum length > 0");
	double ntok = 0, nseq_live = 0;
	for (size_t i = 0; i < nseq; i++)
		if ((!train || train[i]) && off[i + 1] > off[i]) {
			ntok += (double)(off[i + 1] - off[i]);
			nseq_live++;
		}
	if (!ntok)
		return sw_fail(err, SW_EEMPTY, "no tokens to train on (every sequence is masked out or empty)");
	/* Sequences with no tokens are left out of S: verl's seq-mean-token-mean
	 * would divide 0 by 0 for them, and they carry nothing to learn. */
	for (size_t i = 0; i < nseq; i++) {
		double n = (double)(off[i + 1] - off[i]), x;
		if (train && !train[i])
			x = 0;
		else if (m == SW_RL_TOKEN_MEAN)
			x = 1 / ntok;
		else if (m == SW_RL_SEQ_MEAN_TOKEN_SUM)
			x = 1 / nseq_live;
		else if (m == SW_RL_SEQ_MEAN_TOKEN_MEAN)
			x = n ? 1 / (nseq_live * n) : 0;
		else
			/* The Dr. GRPO paper's code and TRL's "dr_grpo": the sum over
			 * the batch divided by (sequences x the maximum length); verl
			 * leaves out the number of sequences, a constant factor that
			 * would change the effective learning rate with the batch. */
			x = 1 / (nseq_live * max_len);
		for (size_t t = off[i]; t < off[i + 1]; t++)
			w[t] = x;
	}
	return 0;
}

/* --- the loss ----------------------------------------------------------------------------------- */

int sw_rl_loss(const sw_rl_loss_opts *o, const sw_rl_tokens *t, float *dlogp, float *dentropy,
               sw_rl_stats *st, sw_error *err)
{
	if (!o || !t || !dlogp || (t->n && (!t->logp || !t->w)))
		return sw_fail(err, SW_EINVAL, "missing loss inputs");
	int rl = o->algo != SW_RL_SFT;
	if ((unsigned)o->algo > SW_RL_REINFORCE_PP)
		return sw_fail(err, SW_EINVAL, "unknown algorithm %d", (int)o->algo);
	if (rl && t->n && (!t->old_logp || !t->adv))
		return sw_fail(err, SW_EINVAL, "%s needs the old log-probs and the advantages",
		               sw_rl_algo_name(o->algo));
	if (rl && !(o->clip_low >= 0 && o->clip_low < 1 && o->clip_high >= 0 && isfinite(o->clip_high)))
		return sw_fail(err, SW_EINVAL, "clip range must have 0 <= low < 1 and high >= 0");
	if (o->clip_dual != 0 && !(o->clip_dual > 1 && isfinite(o->clip_dual)))
		return sw_fail(err, SW_EINVAL, "dual-clip bound must be > 1 (or 0 for none)");
	if (o->tis_cap < 0 || o->kl_coef < 0 || o->entropy_coef < 0 || !isfinite(o->tis_cap) ||
	    !isfinite(o->kl_coef) || !isfinite(o->entropy_coef))
		return sw_fail(err, SW_EINVAL, "coefficients must be finite and >= 0");
	int tis = rl && o->tis_cap > 0, kl = o->kl_coef > 0, ent = o->entropy_coef > 0;
	if (t->n && ((tis && !t->behav_logp) || (kl && !t->ref_logp) || (ent && !t->entropy)))
		return sw_fail(err, SW_EINVAL, "%s requested without its log-probs or entropies",
		               tis ? "importance sampling" : kl ? "KL loss" : "entropy bonus");
	if ((unsigned)o->kl_kind > SW_RL_K3)
		return sw_fail(err, SW_EINVAL, "unknown KL estimator %d", (int)o->kl_kind);

	sw_rl_stats s = st ? *st : (sw_rl_stats){ 0 };
	for (size_t i = 0; i < t->n; i++) {
		double w = t->w[i];
		dlogp[i] = 0;
		if (dentropy)
			dentropy[i] = 0;
		if (w == 0)
			continue;
		if (!isfinite(w))
			return bad_value_(err, 0, i, "aggregation weight", w);
		double lp = t->logp[i], l, g, pg;
		if (!isfinite(lp))
			return bad_value_(err, 0, i, "log-prob", lp);
		if (!rl) {
			pg = -lp;
			g = -1;
		} else {
			double old = t->old_logp[i], A = t->adv[i], is = 1;
			if (!isfinite(old))
				return bad_value_(err, 0, i, "old log-prob", old);
			if (!isfinite(A))
				return bad_value_(err, 0, i, "advantage", A);
			double lr = lp - old, dr = 1;
			if (lr < -20 || lr > 20) { /* verl clamps the log-ratio */
				lr = lr < -20 ? -20 : 20;
				dr = 0;
			}
			double ratio = exp(lr);
			double lo = 1 - o->clip_low, hi = 1 + o->clip_high;
			double rc = ratio < lo ? lo : ratio > hi ? hi : ratio;
			double pg1 = -A * ratio, pg2 = -A * rc;
			/* max(pg1, pg2): when the clipped one is larger the ratio is
			 * outside the range and the loss is flat in logp */
			if (pg2 > pg1) {
				pg = pg2;
				g = 0;
			} else {
				pg = pg1;
				g = -A * ratio * dr;
			}
			if (ratio < lo && A < 0)
				s.clip_low++;
			if (ratio > hi && A > 0)
				s.clip_high++;
			if (o->clip_dual > 1 && A < 0 && pg > -A * o->clip_dual) {
				/* Dual clip (Ye et al. 2019): a very negative advantage on
				 * a token the policy now favours cannot push without bound */
				pg = -A * o->clip_dual;
				g = 0;
				s.clip_dual++;
			}
			if (tis) {
				double b = t->behav_logp[i];
				if (!isfinite(b))
					return bad_value_(err, 0, i, "rollout log-prob", b);
				/* TRL's token_truncate: exp(old - behaviour), capped;
				 * a constant weight, no gradient flows through it */
				is = exp(old - b);
				if (is > o->tis_cap) {
					is = o->tis_cap;
					s.tis_truncated++;
				}
				pg *= is;
				g *= is;
				s.tis_sum += is;
			}
			s.ratio_sum += ratio;
			s.ratio_max = ratio > s.ratio_max ? ratio : s.ratio_max;
			s.ppo_kl_sum += old - lp;
		}
		l = pg;
		s.pg_loss += w * pg;
		if (kl) {
			double ref = t->ref_logp[i], gk;
			if (!isfinite(ref))
				return bad_value_(err, 0, i, "reference log-prob", ref);
			double k = sw_rl_kl_value(o->kl_kind, lp, ref, &gk);
			l += o->kl_coef * k;
			g += o->kl_coef * gk;
			s.kl_loss += w * k;
			s.kl_sum += k;
		}
		if (t->entropy) {
			double h = t->entropy[i];
			if (!isfinite(h))
				return bad_value_(err, 0, i, "entropy", h);
			s.entropy += w * h;
			s.entropy_sum += h;
			if (ent) {
				l -= o->entropy_coef * h;
				if (dentropy)
					dentropy[i] = (float)(-o->entropy_coef * w);
			}
		}
		s.loss += w * l;
		s.tokens++;
		dlogp[i] = (float)(w * g);
	}
	if (st)
		*st = s;
	return 0;
}

int sw_rl_mismatch(const float *behav, const float *old, size_t n, double *mean_abs, double *max_abs,
                   double *kl, sw_error *err)
{
	double sum = 0, mx = 0, k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(behav[i]))
			return bad_value_(err, 0, i, "rollout log-prob", behav[i]);
		if (!isfinite(old[i]))
			return bad_value_(err, 0, i, "log-prob", old[i]);
		double d = (double)behav[i] - (double)old[i];
		sum += fabs(d);
		mx = fabs(d) > mx ? fabs(d) : mx;
		/* k3 of KL(behaviour || trainer) on samples of the behaviour policy:
		 * r = p_trainer / p_behaviour, (r - 1) - log r >= 0 */
		k += expm1(-d) + d;
	}
	if (mean_abs)
		*mean_abs = n ? sum / (double)n : 0;
	if (max_abs)
		*max_abs = mx;
	if (kl)
		*kl = n ? k / (double)n : 0;
	return 0;
}
