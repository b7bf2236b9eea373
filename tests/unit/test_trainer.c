/*
 * test_trainer.c - sw_trainer without a process: an SFT and a GRPO step on a
 * tiny random model give the same weights whether the trainer loads a model
 * directory, trains a store in place or is handed the arenas; its state
 * round-trips through the directory and the optimiser store; a bad sample is
 * an error naming it; a step that fails before its first update leaves the
 * store as it was.  Every trainer computes on the backend SW_TEST_DEVICE
 * names ("cpu" when unset): on guard, a trainer that touched its tensors
 * (weights, gradients, moments, the state files' reads and writes) itself
 * would fault.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tiny_model.h"

static char dir_[256];
static const sw_backend *be_;

static char *at_(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir_, name);
	return buf[k];
}

static sw_model_config cfg_(void)
{
	return tiny_config("llama", 37, 24, 40, 6, 64);
}

/* Sample i of a set: 4 groups of 4, response lengths 2..7, reward 1 for one of each group. */
static sw_rec *sample_(int i, int bad)
{
	sw_rec *r = sw_rec_new();
	uint32_t p[5], q[8];
	size_t np = 2 + (size_t)(i / 4) % 3, nq = 2 + (size_t)(i * 7) % 6; /* a group shares its prompt */
	char g[16];
	for (size_t j = 0; j < np; j++)
		p[j] = (uint32_t)(1 + (i / 4 * 5 + j * 3) % 36);
	for (size_t j = 0; j < nq; j++)
		q[j] = (uint32_t)(1 + (i * 11 + j * 5) % 36);
	if (bad)
		q[1] = 40;
	snprintf(g, sizeof g, "g%d", i / 4);
	if (!r || sw_rec_set_u32s(r, "prompt_tokens", p, np) || sw_rec_set_u32s(r, "response_tokens", q, nq) ||
	    sw_rec_set_f64(r, "reward", i % 4 == i / 4 ? 1.0 : 0.0) || sw_rec_set_str(r, "group", g, strlen(g)))
		abort();
	return r;
}

static sw_trainer_config config_(sw_rl_algo algo)
{
	sw_trainer_config c = sw_trainer_defaults();
	c.algo = algo;
	c.agg = sw_rl_algo_default_agg(algo);
	c.loss.algo = algo;
	c.adam.lr = 1e-2f;
	c.epochs = 2;
	c.minibatches = 2;
	c.micro_tokens = 24; /* several micro batches */
	c.seed = 5;
	c.backend = be_;
	return c;
}

static int feed_step_(sw_trainer *t, sw_trainer_stats *st, sw_error *err)
{
	for (int i = 0; i < 16; i++)
		if (sw_trainer_add(t, sample_(i, 0), "set.jsonl", (uint64_t)i + 1, err))
			return -1;
	return sw_trainer_step(t, st, err) || sw_trainer_commit(t, st, err) ? -1 : 0;
}

/* The weights of a model directory, as floats. */
static sw_model *load_(const char *dir)
{
	sw_error err = { 0 };
	sw_model *m = sw_model_load(dir, &err);
	if (!m)
		printf("# %s: %s\n", dir, err.msg);
	return m;
}

static int same_floats_(const float *a, const float *b, size_t n)
{
	return a && b && !memcmp(a, b, n * sizeof *a);
}

/* optimizer.bin's moments (after its 32-byte header) against the optimiser store's (after 16 floats). */
static int same_moments_(const char *dir, const char *opt_spec, size_t n)
{
	char p[600];
	snprintf(p, sizeof p, "%s/optimizer.bin", dir);
	FILE *f = fopen(p, "rb");
	float *mv = malloc(2 * n * sizeof *mv);
	sw_error err = { 0 };
	sw_store *o = sw_store_open(opt_spec, false, &err);
	int same = f && mv && o && fseek(f, 32, SEEK_SET) == 0 && fread(mv, sizeof *mv, 2 * n, f) == 2 * n &&
	           sw_store_nfloats(o) == 16 + 2 * n && same_floats_(mv, sw_store_arena(o) + 16, 2 * n);
	if (f)
		fclose(f);
	free(mv);
	sw_store_close(o);
	return same;
}

static void test_three_ways_(sw_rl_algo algo, const char *name)
{
	sw_error err = { 0 };
	sw_trainer_stats st;
	sw_trainer_config c = config_(algo);
	sw_model_config c0 = cfg_();
	char spec[64], opt[80], out1[64], out2[64];
	snprintf(spec, sizeof spec, "shm:swtest-trainer-%ld-%s", (long)getpid(), name);
	snprintf(opt, sizeof opt, "%s.opt", spec);
	snprintf(out1, sizeof out1, "%s-1", name);
	snprintf(out2, sizeof out2, "%s-2", name);

	/* two steps on directories: m0 -> out1 -> out2 */
	sw_trainer *t = sw_trainer_new(&c, &err);
	ok(t && !sw_trainer_load_dir(t, at_("m0"), at_(out1), &err) && !feed_step_(t, &st, &err),
	   "%s: a step on a directory (%s)", name, err.msg);
	ok(st.step == 1 && st.updates == 4 && st.samples == 16 && st.trained == 16 && st.tokens > 0 && isfinite(st.loss),
	   "%s: its statistics: step %llu, %llu updates, loss %g", name, (unsigned long long)st.step,
	   (unsigned long long)st.updates, st.loss);
	sw_rec *mr = sw_rec_new();
	double loss = 0;
	ok(!sw_trainer_metrics(t, &st, mr, &err) && !sw_rec_get_f64(mr, "loss", &loss) && fabs(loss - st.loss) <= 1e-8 * fabs(st.loss),
	   "%s: the metrics record", name);
	sw_rec_free(mr);
	sw_trainer_free(t);
	t = sw_trainer_new(&c, &err);
	ok(t && !sw_trainer_load_dir(t, at_(out1), at_(out2), &err) && sw_trainer_version(t) == 1 &&
	   !feed_step_(t, &st, &err) && st.step == 2,
	   "%s: a second step from the directory's trainer state (%s)", name, err.msg);
	sw_trainer_free(t);

	/* the same two steps in place on a store */
	sw_store_unlink(spec, NULL);
	sw_store_unlink(opt, NULL);
	sw_store *w = sw_store_create_from_model(spec, at_("m0"), 0, &err);
	ok(w != NULL, "%s: a store of the start model (%s)", name, err.msg);
	for (int k = 0; k < 2; k++) {
		t = sw_trainer_new(&c, &err);
		ok(t && !sw_trainer_open_store(t, spec, opt, &err), "%s: the store opened for step %d (%s)", name, k + 1,
		   err.msg);
		/* in place: the trainer's weights are the store's memory, not a copy of it */
		/* (read through the backend: on guard the trainer's mapping of the store is device memory) */
		float *a = sw_store_arena(w), x = a[7], *h = malloc(sw_model_config_nparams(&c0) * sizeof *h);
		a[7] = x + 1;
		ok(t && h && !sw_model_read(sw_trainer_model(t), h, &err) && h[7] == x + 1,
		   "%s: the trainer computes on the store's arena", name);
		a[7] = x;
		free(h);
		ok(t && !feed_step_(t, &st, &err), "%s: step %d in place on the store (%s)", name, k + 1, err.msg);
		sw_trainer_free(t);
		sw_model *d = load_(at_(k ? out2 : out1));
		is_int(sw_store_version(w), k + 1, "%s: the store's version after step %d", name, k + 1);
		ok(d && same_floats_(d->arena, sw_store_arena(w), d->nparams),
		   "%s: step %d in place gives the directory's weights, bit for bit", name, k + 1);
		ok(d && same_moments_(at_(k ? out2 : out1), opt, d->nparams),
		   "%s: and its AdamW moments", name);
		sw_model_free(d);
	}

	/* the caller's arenas, state handed over */
	sw_model *m = sw_model_load_on(be_, at_("m0"), &err);
	sw_model *mm = sw_model_new_on(be_, &c0, &err), *vv = sw_model_new_on(be_, &c0, &err);
	float *h = malloc(sw_model_config_nparams(&c0) * sizeof *h);
	t = sw_trainer_new(&c, &err);
	ok(t && m && mm && vv && !sw_trainer_attach(t, m, mm->arena, vv->arena, 0, 0, NULL, &err) &&
	   !feed_step_(t, &st, &err),
	   "%s: a step on the caller's arenas (%s)", name, err.msg);
	sw_trainer_free(t);
	sw_model *d = load_(at_(out1));
	ok(m && d && h && !sw_model_read(m, h, &err) && same_floats_(d->arena, h, d->nparams),
	   "%s: the caller's arenas get the same weights", name);
	sw_model_free(d);
	sw_model_free(m);
	sw_model_free(mm);
	sw_model_free(vv);
	free(h);

	/* a step that fails before its first update leaves the store as it was */
	char before[65], after[65];
	sw_store_digest(w, before, &err);
	t = sw_trainer_new(&c, &err);
	sw_error e2 = { 0 };
	int rc = t && !sw_trainer_open_store(t, spec, opt, &err) ? 0 : -1;
	for (int i = 0; !rc && i < 16; i++) {
		sw_rec *r = sw_rec_new();
		sw_rec_set_str(r, "verifier_error", "timeout", 7);
		rc = sw_trainer_add(t, r, "masked.jsonl", (uint64_t)i + 1, &e2);
	}
	ok(!rc && sw_trainer_step(t, &st, &e2) == SW_EEMPTY &&
	   !strcmp(e2.msg, "masked.jsonl: every one of the 16 samples is masked out by its 'verifier_error'"),
	   "%s: a step with nothing to train fails: %s", name, e2.msg);
	sw_trainer_free(t);
	/* text needs a tokenizer, which a store has not */
	t = sw_trainer_new(&c, &err);
	sw_rec *tx = sw_rec_new();
	uint32_t q[2] = { 3, 4 };
	sw_rec_set_str(tx, "prompt", "2+2=", 4);
	sw_rec_set_u32s(tx, "response_tokens", q, 2);
	ok(t && !sw_trainer_open_store(t, spec, opt, &err) && sw_trainer_add(t, tx, "text.jsonl", 1, &e2) == SW_EINVAL &&
	   !strcmp(e2.msg, "text.jsonl: record 1: field 'prompt' is text, and a store has no tokenizer: give token ids"),
	   "%s: a text prompt on a store: %s", name, e2.msg);
	sw_trainer_free(t);
	sw_store_digest(w, after, &err);
	ok(sw_store_version(w) == 2 && !strcmp(before, after), "%s: the store is as it was, version 2", name);
	sw_store_close(w);
	sw_store_unlink(spec, NULL);
	sw_store_unlink(opt, NULL);
}

static void test_bad_sample_(void)
{
	sw_error err = { 0 };
	sw_trainer_config c = config_(SW_RL_GRPO);
	sw_trainer *t = sw_trainer_new(&c, &err);
	ok(t && !sw_trainer_load_dir(t, at_("m0"), at_("bad"), &err), "a trainer for bad samples");
	ok(!sw_trainer_add(t, sample_(0, 0), "bad.jsonl", 1, &err), "a good sample is taken");
	int rc = sw_trainer_add(t, sample_(1, 1), "bad.jsonl", 2, &err);
	is_int(rc, SW_ERANGE, "a token outside the vocabulary is SW_ERANGE");
	ok(!strcmp(err.msg, "bad.jsonl: record 2: field 'response_tokens' holds token 40, outside the model's "
	                    "vocabulary of 37") && err.record == 2,
	   "the message names the file, the record and the field: %s", err.msg);
	sw_rec *r = sw_rec_new();
	uint32_t p[1] = { 1 }, q[1] = { 2 };
	sw_rec_set_u32s(r, "prompt_tokens", p, 1);
	sw_rec_set_u32s(r, "response_tokens", q, 1);
	sw_rec_set_str(r, "group", "g", 1);
	rc = sw_trainer_add(t, r, "bad.jsonl", 3, &err);
	ok(rc == SW_ENOENT && !strcmp(err.msg, "bad.jsonl: record 3: field 'reward' is missing (score the samples "
	                                       "with sw-verify first)"),
	   "a sample without a reward: %s", err.msg);
	sw_trainer_free(t);
	ok(access(at_("bad"), F_OK) != 0, "nothing written");
	sw_trainer_free(NULL);
}

/* The micro batch the trainer chooses at SmolLM2-135M's shapes (134.5M
 * parameters): every layer kept under its activations' budget of 2.5 B a
 * parameter (test_engine counts the floats a token: 30 layers of 5771 and
 * 2112 of scratch, so 5/8 float a parameter keeps 479 tokens whole; 3/8
 * kept 287 and a micro batch of 384 ran layers again). */
static void test_micro_tokens_(void)
{
	sw_model_config c = smol135_config();
	size_t np = SMOL135_PARAMS, b = sw_trainer_micro_tokens(&c, np, 0);
	is_int((int)b, 479, "SmolLM2-135M's shapes: micro batches of 479 tokens by default");
	is_int((int)sw_engine_tokens_kept(&c, np / 8 * 5), (int)b, "every layer's activations kept at that size");
	is_int((int)sw_trainer_micro_tokens(&c, np, 100), 100, "--micro-tokens 100 is taken as it is");
	is_int((int)sw_trainer_micro_tokens(&c, np, 1000000), (int)sw_engine_tokens_within(&c, np / 8 * 5),
	       "--micro-tokens beyond what fits is lowered to it (%zu)", sw_engine_tokens_within(&c, np / 8 * 5));
	/* a model whose budget keeps fewer than 384 tokens whole: 384, with layers run again */
	is_int((int)sw_trainer_micro_tokens(&c, np / 2, 0), 384, "a budget that keeps fewer: 384 tokens");
	is_int((int)sw_trainer_micro_tokens(NULL, np, 0), 1, "no config: 1");
}

int main(void)
{
	snprintf(dir_, sizeof dir_, "%s/sw-test-trainer-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir_))
		return 1;
	sw_error e0 = { 0 };
	if (!(be_ = sw_backend_get(getenv("SW_TEST_DEVICE"), &e0))) {
		fprintf(stderr, "test_trainer: %s\n", e0.msg);
		return 1;
	}
	printf("# on the %s backend\n", sw_backend_name(be_));
	sw_engine_threads(1);
	sw_error err = { 0 };
	sw_model_config cfg = cfg_();
	sw_model *m = sw_model_new(&cfg, &err);
	sw_model_init_random(m, 3, 0.2f);
	ok(m && !sw_model_save(m, at_("m0"), SW_DT_F32, &err), "a tiny random model directory (%s)", err.msg);
	sw_model_free(m);
	test_three_ways_(SW_RL_SFT, "sft");
	test_three_ways_(SW_RL_GRPO, "grpo");
	test_bad_sample_();
	test_micro_tokens_();
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
	if (system(cmd))
		printf("# cannot remove %s\n", dir_);
	return tap_done();
}
