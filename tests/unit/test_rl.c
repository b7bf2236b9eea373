/*
 * test_rl.c - the RL objective of libsw/rl/rl.c against PyTorch: advantages,
 * losses and gradients of every algorithm and aggregation mode match the
 * references of tests/fixtures/make_rl_refs.py (float64 autograd) to 1e-6
 * relative; gradients also against finite differences; the edge cases
 * (NaN rewards, bad offsets, empty and fully masked batches) are errors.
 */
#include <math.h>
#include <stdlib.h>
#include "sw/rl.h"
#include "tap.h"
#include "../fixtures/rl/rl_refs.h"

/* |a - b| within rel of the larger, with a floor for values near zero. */
static int close_(double a, double b, double rel, double abs_floor)
{
	double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
	return d <= rel * m || d <= abs_floor;
}

/* Worst mismatch of n values, reported once per array rather than per value. */
static int arrays_close_(const char *what, int ci, const float *got_f, const double *got_d, const float *want_f,
                         const double *want_d, size_t n, double rel, double abs_floor)
{
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		double g = got_f ? got_f[i] : got_d[i], w = want_f ? want_f[i] : want_d[i];
		if (!close_(g, w, rel, abs_floor) && !bad++)
			first = i;
	}
	if (bad) {
		double g = got_f ? got_f[first] : got_d[first], w = want_f ? want_f[first] : want_d[first];
		printf("#   case %d %s: %zu of %zu differ; [%zu] got %.17g want %.17g\n", ci, what, bad, n, first, g, w);
	}
	return bad == 0;
}

static sw_rl_batch batch_(const struct rl_adv_case *c)
{
	return (sw_rl_batch){ RL_NSEQ, rl_off, rl_reward, rl_group, rl_train, rl_kl_pen, c->kl_coef };
}

static void test_advantages(void)
{
	for (size_t ci = 0; ci < sizeof rl_adv_cases / sizeof *rl_adv_cases; ci++) {
		const struct rl_adv_case *c = &rl_adv_cases[ci];
		sw_rl_batch b = batch_(c);
		sw_rl_adv_opts o = { c->eps, c->gamma };
		float tok[RL_NTOK];
		double seq[RL_NSEQ];
		sw_rl_adv_stats st;
		sw_error err = { 0 };
		int rc = sw_rl_advantages(c->algo, &b, &o, tok, seq, &st, &err);
		is_int(rc, 0, "advantages %zu (%s, kl %g, gamma %g): succeeds (%s)", ci, sw_rl_algo_name(c->algo),
		       c->kl_coef, c->gamma, err.msg);
		/* float outputs: 1e-6 relative, floor for the rounding residue of
		 * zero-std groups, where PyTorch leaves ~1e-10 and we write 0 */
		ok(arrays_close_("adv_tok", (int)ci, tok, NULL, c->tok, NULL, RL_NTOK, 1e-6, 1e-9),
		   "advantages %zu: per-token values match PyTorch", ci);
		ok(arrays_close_("adv_seq", (int)ci, NULL, seq, NULL, c->seq, RL_NSEQ, 1e-6, 1e-9),
		   "advantages %zu: per-sequence values match PyTorch", ci);
		ok(close_(st.reward_mean, c->reward_mean, 1e-9, 1e-12) && close_(st.reward_std, c->reward_std, 1e-9, 1e-12),
		   "advantages %zu: reward mean %.6f and std %.6f", ci, st.reward_mean, st.reward_std);
		ok(close_(st.adv_mean, c->adv_mean, 1e-6, 1e-9) && close_(st.adv_std, c->adv_std, 1e-6, 1e-9) &&
		       close_(st.adv_min, c->adv_min, 1e-6, 1e-9) && close_(st.adv_max, c->adv_max, 1e-6, 1e-9),
		   "advantages %zu: advantage mean/std/min/max", ci);
		is_int(st.masked, 1, "advantages %zu: one masked sample", ci);
		if (c->algo != SW_RL_REINFORCE_PP) {
			is_int(st.groups, 5, "advantages %zu: five groups", ci);
			/* the singleton, and group 31 whose masked member leaves two */
			is_int(st.singleton_groups, 1, "advantages %zu: one singleton group", ci);
			is_int(st.zero_std_groups, c->kl_coef ? 0 : 1, "advantages %zu: zero-std groups", ci);
		}
	}
}

/* Group 17 (three rewards of 0.5) and the singleton group 24 get exactly 0. */
static void test_advantage_edges(void)
{
	const struct rl_adv_case *c = &rl_adv_cases[0];
	sw_rl_batch b = batch_(c);
	float tok[RL_NTOK];
	double seq[RL_NSEQ];
	int exact = 1;
	sw_rl_advantages(SW_RL_GRPO, &b, NULL, tok, seq, NULL, NULL);
	for (size_t i = 0; i < RL_NSEQ; i++)
		if ((rl_group[i] == 17 || rl_group[i] == 24 || !rl_train[i]) && seq[i] != 0)
			exact = 0;
	ok(exact, "zero-std, singleton and masked samples get advantage exactly 0");

	/* the order of the stream does not matter: reverse the batch */
	size_t roff[RL_NSEQ + 1], len[RL_NSEQ];
	double rrew[RL_NSEQ], rseq[RL_NSEQ];
	uint64_t rgrp[RL_NSEQ];
	unsigned char rtr[RL_NSEQ];
	float rkl[RL_NTOK], rtok[RL_NTOK];
	roff[0] = 0;
	for (size_t i = 0; i < RL_NSEQ; i++) {
		size_t j = RL_NSEQ - 1 - i;
		len[i] = rl_off[j + 1] - rl_off[j];
		roff[i + 1] = roff[i] + len[i];
		rrew[i] = rl_reward[j];
		rgrp[i] = rl_group[j];
		rtr[i] = rl_train[j];
		for (size_t t = 0; t < len[i]; t++)
			rkl[roff[i] + t] = rl_kl_pen[rl_off[j] + t];
	}
	sw_rl_batch rb = { RL_NSEQ, roff, rrew, rgrp, rtr, rkl, 0.1 };
	b.kl_coef = 0.1;
	for (sw_rl_algo a = SW_RL_GRPO; a <= SW_RL_REINFORCE_PP; a++) {
		int same = 1;
		sw_rl_advantages(a, &b, NULL, tok, seq, NULL, NULL);
		sw_rl_advantages(a, &rb, NULL, rtok, rseq, NULL, NULL);
		for (size_t i = 0; i < RL_NSEQ; i++)
			if (!close_(seq[RL_NSEQ - 1 - i], rseq[i], 1e-12, 1e-15))
				same = 0;
		ok(same, "%s: advantages do not depend on the order of the samples", sw_rl_algo_name(a));
	}
}

static void weights_for_(const struct rl_loss_case *c, double *w)
{
	sw_error err = { 0 };
	int rc = sw_rl_weights(c->agg, RL_NSEQ, rl_off, rl_train, RL_MAX_LEN, w, &err);
	if (rc)
		printf("# sw_rl_weights: %s\n", err.msg);
}

static sw_rl_loss_opts opts_(const struct rl_loss_case *c)
{
	return (sw_rl_loss_opts){ c->algo, c->clip_low, c->clip_high, c->clip_dual, c->tis_cap,
		                  c->kl_coef, c->kl_kind, c->entropy_coef };
}

static sw_rl_tokens tokens_(const struct rl_loss_case *c, const float *logp, const float *ent, const double *w)
{
	return (sw_rl_tokens){ RL_NTOK, logp, rl_old, rl_behav, rl_ref, ent,
		               c->adv >= 0 ? rl_adv_cases[c->adv].tok : NULL, w };
}

static double loss_of_(const struct rl_loss_case *c, const float *logp, const float *ent, const double *w)
{
	float g[RL_NTOK], ge[RL_NTOK];
	sw_rl_loss_opts o = opts_(c);
	sw_rl_tokens t = tokens_(c, logp, ent, w);
	sw_rl_stats st = { 0 };
	sw_rl_loss(&o, &t, g, ge, &st, NULL);
	return st.loss;
}

static void test_losses(void)
{
	for (size_t ci = 0; ci < sizeof rl_loss_cases / sizeof *rl_loss_cases; ci++) {
		const struct rl_loss_case *c = &rl_loss_cases[ci];
		double w[RL_NTOK];
		float g[RL_NTOK], ge[RL_NTOK];
		weights_for_(c, w);
		sw_rl_loss_opts o = opts_(c);
		sw_rl_tokens t = tokens_(c, rl_logp, rl_ent, w);
		sw_rl_stats st = { 0 };
		sw_error err = { 0 };
		int rc = sw_rl_loss(&o, &t, g, ge, &st, &err);
		const char *name = sw_rl_algo_name(c->algo), *agg = sw_rl_agg_name(c->agg);
		is_int(rc, 0, "loss %zu (%s, %s): succeeds (%s)", ci, name, agg, err.msg);
		ok(close_(st.loss, c->loss, 1e-6, 1e-12), "loss %zu (%s, %s): loss %.9f, PyTorch %.9f", ci, name, agg,
		   st.loss, c->loss);
		ok(close_(st.pg_loss, c->pg_loss, 1e-6, 1e-12) && close_(st.kl_loss, c->kl_loss, 1e-6, 1e-12) &&
		       close_(st.entropy, c->entropy, 1e-6, 1e-12),
		   "loss %zu: its terms: policy %.6f, KL %.6f, entropy %.6f", ci, st.pg_loss, st.kl_loss, st.entropy);
		ok(arrays_close_("dlogp", (int)ci, g, NULL, NULL, c->dlogp, RL_NTOK, 1e-6, 1e-12),
		   "loss %zu: d loss / d logp matches autograd", ci);
		ok(arrays_close_("dentropy", (int)ci, ge, NULL, NULL, c->dent, RL_NTOK, 1e-6, 1e-12),
		   "loss %zu: d loss / d entropy matches autograd", ci);
		is_int(st.tokens, c->tokens, "loss %zu: tokens trained", ci);
		ok(st.clip_low == (uint64_t)c->clip_low_n && st.clip_high == (uint64_t)c->clip_high_n &&
		       st.clip_dual == (uint64_t)c->clip_dual_n && st.tis_truncated == (uint64_t)c->tis_truncated,
		   "loss %zu: clipped low %llu, high %llu, dual %llu, IS truncated %llu (PyTorch %ld %ld %ld %ld)", ci,
		   (unsigned long long)st.clip_low, (unsigned long long)st.clip_high,
		   (unsigned long long)st.clip_dual, (unsigned long long)st.tis_truncated, c->clip_low_n,
		   c->clip_high_n, c->clip_dual_n, c->tis_truncated);
		ok(close_(st.tis_sum, c->tis_sum, 1e-9, 1e-12) && close_(st.ratio_sum, c->ratio_sum, 1e-9, 1e-12) &&
		       close_(st.ppo_kl_sum, c->ppo_kl_sum, 1e-9, 1e-12) && close_(st.kl_sum, c->kl_sum, 1e-9, 1e-12),
		   "loss %zu: IS weight, ratio, ppo_kl and KL sums", ci);

		/* micro batches: three slices with the minibatch's weights add up to the same */
		size_t cut[] = { 0, 11, 40, RL_NTOK };
		sw_rl_stats acc = { 0 };
		float g2[RL_NTOK];
		for (int k = 0; k < 3; k++) {
			sw_rl_tokens s = t;
			size_t a = cut[k];
			s.n = cut[k + 1] - a;
			s.logp += a, s.old_logp += a, s.behav_logp += a, s.ref_logp += a, s.entropy += a, s.w += a;
			if (s.adv)
				s.adv += a;
			sw_rl_loss(&o, &s, g2 + a, NULL, &acc, NULL);
		}
		ok(close_(acc.loss, st.loss, 1e-12, 1e-15) && acc.tokens == st.tokens &&
		       !memcmp(g, g2, sizeof g),
		   "loss %zu: the same loss and gradients from three micro batches", ci);
	}
}

/* Central differences of the loss in each token's log-prob and entropy. */
static void test_finite_differences(void)
{
	for (size_t ci = 0; ci < sizeof rl_loss_cases / sizeof *rl_loss_cases; ci++) {
		const struct rl_loss_case *c = &rl_loss_cases[ci];
		double w[RL_NTOK];
		float g[RL_NTOK], ge[RL_NTOK], lp[RL_NTOK], en[RL_NTOK];
		weights_for_(c, w);
		sw_rl_loss_opts o = opts_(c);
		sw_rl_tokens t = tokens_(c, rl_logp, rl_ent, w);
		sw_rl_loss(&o, &t, g, ge, NULL, NULL);
		memcpy(lp, rl_logp, sizeof lp);
		memcpy(en, rl_ent, sizeof en);
		int bad = 0, checked = 0, skipped = 0;
		for (size_t i = 0; i < RL_NTOK; i++) {
			if (w[i] == 0)
				continue;
			/* a clip boundary within the step makes the difference meaningless */
			double r = exp((double)rl_logp[i] - (double)rl_old[i]);
			if (c->algo != SW_RL_SFT && (fabs(r - (1 - c->clip_low)) < 3e-3 || fabs(r - (1 + c->clip_high)) < 3e-3 ||
			                             (c->clip_dual && fabs(r - c->clip_dual) < 3e-3))) {
				skipped++;
				continue;
			}
			float x = rl_logp[i];
			lp[i] = x + 1e-3f;
			double up = lp[i] - (double)x, fu = loss_of_(c, lp, en, w);
			lp[i] = x - 1e-3f;
			double dn = (double)x - lp[i], fd = loss_of_(c, lp, en, w);
			lp[i] = x;
			double num = (fu - fd) / (up + dn);
			if (!close_(num, g[i], 1e-4, 1e-9)) {
				if (!bad)
					printf("#   case %zu token %zu: finite difference %.10g, gradient %.10g\n", ci, i, num,
					       (double)g[i]);
				bad++;
			}
			x = rl_ent[i];
			en[i] = x + 1e-3f;
			up = en[i] - (double)x, fu = loss_of_(c, lp, en, w);
			en[i] = x - 1e-3f;
			dn = (double)x - en[i], fd = loss_of_(c, lp, en, w);
			en[i] = x;
			num = (fu - fd) / (up + dn);
			if (!close_(num, ge[i], 1e-4, 1e-9))
				bad++;
			checked++;
		}
		ok(!bad && checked > 50, "loss %zu (%s, %s): gradients agree with finite differences (%d tokens, %d at a "
		   "clip boundary skipped)", ci, sw_rl_algo_name(c->algo), sw_rl_agg_name(c->agg), checked, skipped);
	}
}

/* verl clamps the log-ratio to +-20: beyond it the loss is flat. */
static void test_ratio_clamp(void)
{
	float lp[] = { -1.0f, -1.0f }, old[] = { -26.0f, -20.0f }, adv[] = { -1.0f, -1.0f }, g[2];
	double w[] = { 0.5, 0.5 };
	sw_rl_loss_opts o = { SW_RL_GRPO, 0.2, 0.2, 0, 0, 0, SW_RL_K3, 0 };
	sw_rl_tokens t = { 2, lp, old, NULL, NULL, NULL, adv, w };
	sw_rl_stats st = { 0 };
	ok(sw_rl_loss(&o, &t, g, NULL, &st, NULL) == 0, "huge ratios: succeeds");
	ok(close_(st.loss, 0.5 * exp(20.0) + 0.5 * exp(19.0), 1e-12, 0) && g[0] == 0 &&
	       close_(g[1], 0.5 * exp(19.0), 1e-6, 0),
	   "the log-ratio is clamped at 20 and passes no gradient there (loss %g, gradients %g %g)", st.loss,
	   (double)g[0], (double)g[1]);
}

static void test_kl_estimators(void)
{
	int bad = 0;
	for (sw_rl_kl k = SW_RL_K1; k <= SW_RL_K3; k++)
		for (double d = -3; d <= 3; d += 0.25) {
			double g, gp, gm, h = 1e-6;
			double v = sw_rl_kl_value(k, -1 + d, -1, &g);
			double vp = sw_rl_kl_value(k, -1 + d + h, -1, &gp), vm = sw_rl_kl_value(k, -1 + d - h, -1, &gm);
			double want = k == SW_RL_K1 ? d : k == SW_RL_K2 ? d * d / 2 : exp(-d) + d - 1;
			if (want > 10) /* k3 beyond its clamp: see below */
				continue;
			if (!close_(v, want, 1e-12, 1e-15) || !close_((vp - vm) / (2 * h), g, 1e-6, 1e-9)) {
				printf("#   %s at d = %g: %.12g (want %.12g), slope %.12g (difference %.12g)\n",
				       sw_rl_kl_name(k), d, v, want, g, (vp - vm) / (2 * h));
				bad++;
			}
		}
	ok(!bad, "k1, k2, k3: values and derivatives");
	double g;
	double v = sw_rl_kl_value(SW_RL_K3, -10, -1, &g); /* exp(9) - 9 - 1 > 10: held by the clamp */
	ok(v == 10 && g == 0, "k3 is clamped at 10 and passes no gradient there (got %g, %g)", v, g);
	v = sw_rl_kl_value(SW_RL_K3, 0, -1, &g);
	ok(close_(v, exp(-1.0), 1e-12, 0) && close_(g, 1 - exp(-1.0), 1e-12, 0), "k3 at d = 1");
	ok(sw_rl_kl_value(SW_RL_K3, -2, -2, &g) == 0 && g == 0, "k3 is 0 with zero slope where the policies agree");
}

static void test_names(void)
{
	int bad = 0;
	for (sw_rl_algo a = SW_RL_SFT; a <= SW_RL_REINFORCE_PP; a++) {
		sw_rl_algo x;
		if (sw_rl_algo_parse(sw_rl_algo_name(a), &x) || x != a)
			bad++;
	}
	for (sw_rl_agg a = SW_RL_TOKEN_MEAN; a <= SW_RL_SEQ_MEAN_TOKEN_SUM_NORM; a++) {
		sw_rl_agg x;
		if (sw_rl_agg_parse(sw_rl_agg_name(a), &x) || x != a)
			bad++;
	}
	for (sw_rl_kl k = SW_RL_K1; k <= SW_RL_K3; k++) {
		sw_rl_kl x;
		if (sw_rl_kl_parse(sw_rl_kl_name(k), &x) || x != k)
			bad++;
	}
	ok(!bad, "every name parses back to itself");
	sw_rl_algo a;
	sw_rl_agg g;
	sw_rl_kl k;
	ok(sw_rl_algo_parse("ppo2", &a) == SW_EINVAL && sw_rl_agg_parse("mean", &g) == SW_EINVAL &&
	       sw_rl_kl_parse("k4", &k) == SW_EINVAL && sw_rl_algo_parse(NULL, &a) == SW_EINVAL,
	   "unknown names are SW_EINVAL");
	ok(!strcmp(sw_rl_algo_name(SW_RL_REINFORCE_PP), "reinforce++") &&
	       sw_rl_algo_default_agg(SW_RL_DR_GRPO) == SW_RL_SEQ_MEAN_TOKEN_SUM_NORM &&
	       sw_rl_algo_default_agg(SW_RL_GRPO) == SW_RL_SEQ_MEAN_TOKEN_MEAN &&
	       sw_rl_algo_default_agg(SW_RL_DAPO) == SW_RL_TOKEN_MEAN,
	   "names and default aggregation");
}

static void test_errors(void)
{
	float tok[RL_NTOK];
	double seq[RL_NSEQ], rew[RL_NSEQ], w[RL_NTOK];
	sw_error err = { 0 };
	sw_rl_batch b = batch_(&rl_adv_cases[0]);
	memcpy(rew, rl_reward, sizeof rew);
	b.reward = rew;

	rew[4] = NAN;
	int rc = sw_rl_advantages(SW_RL_GRPO, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_ERANGE && err.record == 5 && strstr(err.msg, "reward is NaN"),
	   "a NaN reward is SW_ERANGE naming the sequence (%d, record %llu, '%s')", rc,
	   (unsigned long long)err.record, err.msg);
	rew[4] = -INFINITY;
	err = (sw_error){ 0 };
	rc = sw_rl_advantages(SW_RL_REINFORCE_PP, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_ERANGE && err.record == 5 && strstr(err.msg, "-Inf"), "an infinite reward too ('%s')", err.msg);
	rew[4] = rl_reward[4];

	err = (sw_error){ 0 };
	b.nseq = 0;
	rc = sw_rl_advantages(SW_RL_GRPO, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_EEMPTY && strstr(err.msg, "empty"), "an empty batch is SW_EEMPTY ('%s')", err.msg);
	b.nseq = RL_NSEQ;

	unsigned char none[RL_NSEQ] = { 0 };
	b.train = none;
	err = (sw_error){ 0 };
	rc = sw_rl_advantages(SW_RL_RLOO, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_EEMPTY && strstr(err.msg, "masked"), "a batch with every sample masked is SW_EEMPTY ('%s')",
	   err.msg);
	rc = sw_rl_weights(SW_RL_TOKEN_MEAN, RL_NSEQ, rl_off, none, 0, w, &err);
	ok(rc == SW_EEMPTY, "and has no weights either");
	b.train = rl_train;

	size_t off[RL_NSEQ + 1];
	memcpy(off, rl_off, sizeof off);
	off[6] = off[7] + 1; /* sequence 7 would end before it starts */
	b.off = off;
	err = (sw_error){ 0 };
	rc = sw_rl_advantages(SW_RL_GRPO, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_EINVAL && err.record == 7, "offsets that go backwards are SW_EINVAL at the sequence ('%s')",
	   err.msg);
	off[6] = rl_off[6];
	off[0] = 1;
	rc = sw_rl_weights(SW_RL_TOKEN_MEAN, RL_NSEQ, off, NULL, 0, w, &err);
	ok(rc == SW_EINVAL, "offsets that do not start at 0 are SW_EINVAL ('%s')", err.msg);
	b.off = rl_off;

	rc = sw_rl_advantages(SW_RL_SFT, &b, NULL, tok, seq, NULL, &err);
	ok(rc == SW_EINVAL, "SFT has no advantages");
	sw_rl_adv_opts bad_gamma = { 0, 1.5 };
	rc = sw_rl_advantages(SW_RL_REINFORCE_PP, &b, &bad_gamma, tok, seq, NULL, &err);
	ok(rc == SW_EINVAL, "gamma above 1 is SW_EINVAL");
	rc = sw_rl_weights(SW_RL_SEQ_MEAN_TOKEN_SUM_NORM, RL_NSEQ, rl_off, rl_train, 0, w, &err);
	ok(rc == SW_EINVAL && strstr(err.msg, "maximum length"), "seq-mean-token-sum-norm without a length ('%s')",
	   err.msg);

	/* the loss: a NaN log-prob, missing inputs, bad settings */
	const struct rl_loss_case *c = &rl_loss_cases[1];
	float lp[RL_NTOK], g[RL_NTOK];
	memcpy(lp, rl_logp, sizeof lp);
	weights_for_(c, w);
	sw_rl_loss_opts o = opts_(c);
	sw_rl_tokens t = tokens_(c, lp, rl_ent, w);
	size_t bad_tok = rl_off[3] + 1;
	lp[bad_tok] = NAN;
	err = (sw_error){ 0 };
	rc = sw_rl_loss(&o, &t, g, NULL, NULL, &err);
	ok(rc == SW_ERANGE && err.offset == bad_tok && strstr(err.msg, "log-prob is NaN"),
	   "a NaN log-prob is SW_ERANGE naming the token (%llu, '%s')", (unsigned long long)err.offset, err.msg);
	lp[bad_tok] = rl_logp[bad_tok];
	t.old_logp = NULL;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL, "%s without old log-probs ('%s')",
	   sw_rl_algo_name(o.algo), err.msg);
	t = tokens_(c, lp, rl_ent, w);
	t.entropy = NULL;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL && strstr(err.msg, "entropy"),
	   "an entropy bonus without entropies ('%s')", err.msg);
	t = tokens_(c, lp, rl_ent, w);
	o.kl_coef = 0.1;
	t.ref_logp = NULL;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL && strstr(err.msg, "KL"),
	   "a KL loss without reference log-probs ('%s')", err.msg);
	o = opts_(c);
	t = tokens_(c, lp, rl_ent, w);
	o.clip_dual = 0.5;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL, "a dual clip bound below 1");
	o = opts_(c);
	o.clip_low = 1.2;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL, "a clip range below zero");
	o = opts_(c);
	o.kl_coef = NAN;
	ok(sw_rl_loss(&o, &t, g, NULL, NULL, &err) == SW_EINVAL, "a NaN coefficient");
}

static void test_mismatch(void)
{
	float a[] = { -1.0f, -2.0f, -0.5f }, b[] = { -1.0f, -2.5f, -0.25f };
	double mean, mx, kl;
	sw_error err = { 0 };
	ok(sw_rl_mismatch(a, b, 3, &mean, &mx, &kl, &err) == 0, "mismatch: succeeds");
	double want_kl = ((exp(-0.5) - 1 + 0.5) + (exp(0.25) - 1 - 0.25)) / 3;
	ok(close_(mean, 0.75 / 3, 1e-12, 0) && mx == 0.5 && close_(kl, want_kl, 1e-12, 0),
	   "mismatch: mean %g, max %g, KL %g", mean, mx, kl);
	ok(sw_rl_mismatch(a, a, 3, &mean, &mx, &kl, &err) == 0 && mean == 0 && mx == 0 && kl == 0,
	   "mismatch of identical log-probs is 0");
	a[1] = NAN;
	ok(sw_rl_mismatch(a, b, 3, &mean, &mx, &kl, &err) == SW_ERANGE && err.offset == 1,
	   "mismatch: a NaN is SW_ERANGE at the token");
}

int main(void)
{
	test_advantages();
	test_advantage_edges();
	test_losses();
	test_finite_differences();
	test_ratio_clamp();
	test_kl_estimators();
	test_names();
	test_errors();
	test_mismatch();
	return tap_done();
}
