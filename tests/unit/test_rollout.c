/*
 * test_rollout.c - the rollout scheduler (sw/rollout.h) without a process:
 * a tiny random model with the byte tokenizer, records fed from memory and
 * samples caught in memory.  Samples come out in input order; the same
 * prompts give the same samples (tokens and log-probs, bit for bit) at any
 * batch size and with static batching; two schedulers interleaved in one
 * process give what each gives alone; an invalid record is reported to the
 * caller, skipped or ending the reading; a weight update mid-rollout ends
 * the responses in flight as "abort" and the later ones carry the new
 * version; score mode gives generation's log-probs back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/sw.h"
#include "tap.h"
#include "tiny_model.h"

/* ---- a tiny model --------------------------------------------------------------- */

/* Every model is on the backend SW_TEST_DEVICE names ("cpu" when unset): on
 * guard, a scheduler that touched model memory itself would fault. */
static const sw_backend *be_;

static sw_model *model_(void)
{
	/* vocabulary: the byte tokenizer's 261 and ids without text */
	sw_model_config c = tiny_config("llama", 300, 32, 48, 8, 96);
	c.n_eos = 1;
	c.eos_token_ids[0] = 2;
	sw_error err = { 0 };
	sw_model *m = sw_model_new_on(be_, &c, &err);
	if (m)
		sw_model_init_random(m, 7, 0.5f);
	return m;
}

/* ---- records in, samples out, in memory ---------------------------------------- */

typedef struct feed_ {
	uint8_t *in[64];           /* the input records, msgpack */
	size_t nin[64];
	int n, at;
	bool pause;                /* answer every other non-blocking pull with WAIT */
	int waits;
	sw_rec *rec;
	char *out[512];            /* one line per sample: id finish version tokens logprob-bits */
	int nout;
	char bad[8][240];          /* the invalid records' messages */
	int nbad, badat[8];
} feed_;

static void add_(feed_ *f, const char *id, const char *prompt, int max_new)
{
	sw_rec *r = sw_rec_new();
	const uint8_t *p;
	size_t n;
	sw_rec_clear(r);
	if (id)
		sw_rec_set_str(r, "id", id, strlen(id));
	if (prompt)
		sw_rec_set_str(r, "prompt", prompt, strlen(prompt));
	if (max_new)
		sw_rec_set_u64(r, "max_new_tokens", (uint64_t)max_new);
	sw_rec_bytes(r, &p, &n);
	f->in[f->n] = malloc(n);
	memcpy(f->in[f->n], p, n);
	f->nin[f->n++] = n;
	sw_rec_free(r);
}

static void prompts_(feed_ *f, int n)
{
	char id[16], prompt[64];
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof id, "p%d", i);
		snprintf(prompt, sizeof prompt, "prompt number %d", i * 7);
		add_(f, id, prompt, 0);
	}
}

static int next_(void *ctx, bool block, sw_rec **rec)
{
	feed_ *f = ctx;
	if (f->pause && !block && f->waits++ % 2 == 0)
		return SW_ROLLOUT_WAIT;
	if (f->at == f->n)
		return 0;
	if (!f->rec)
		f->rec = sw_rec_new();
	sw_rec_load(f->rec, f->in[f->at], f->nin[f->at]);
	f->at++;
	*rec = f->rec;
	return 1;
}

static int put_(void *ctx, const uint8_t *mp, size_t n)
{
	feed_ *f = ctx;
	sw_rec *r = sw_rec_new();
	const char *id = "", *fin = "";
	size_t idl = 0, fl = 0, nt = 0, nl = 0;
	uint64_t ver = 99;
	uint32_t tok[256];
	float lp[256];
	if (sw_rec_load(r, mp, n))
		return SW_EFORMAT;
	sw_rec_get_str(r, "id", &id, &idl);
	sw_rec_get_str(r, "finish", &fin, &fl);
	sw_rec_get_u64(r, "policy_version", &ver);
	sw_rec_get_u32s(r, "response_tokens", tok, 256, &nt);
	if (sw_rec_get_f32s(r, "logprobs", lp, 256, &nl))
		sw_rec_get_f32s(r, "score", lp, 256, &nl);
	char *line = malloc(64 + idl + fl + 24 * (nt + nl));
	int k = sprintf(line, "%.*s %.*s %llu", (int)idl, id, (int)fl, fin, (unsigned long long)ver);
	for (size_t i = 0; i < nt && i < 256; i++)
		k += sprintf(line + k, " %u", tok[i]);
	k += sprintf(line + k, " |");
	for (size_t i = 0; i < nl && i < 256; i++) {
		uint32_t bits;
		memcpy(&bits, &lp[i], 4);
		k += sprintf(line + k, " %08x", bits);
	}
	f->out[f->nout++] = line;
	sw_rec_free(r);
	return 0;
}

static void invalid_(void *ctx, const char *msg)
{
	feed_ *f = ctx;
	snprintf(f->bad[f->nbad], sizeof f->bad[0], "%s", msg);
	f->badat[f->nbad++] = f->at;
}

static sw_rollout_io io_(feed_ *f)
{
	return (sw_rollout_io){ .ctx = f, .next = next_, .put = put_, .invalid = invalid_ };
}

static void feed_free_(feed_ *f)
{
	for (int i = 0; i < f->n; i++)
		free(f->in[i]);
	for (int i = 0; i < f->nout; i++)
		free(f->out[i]);
	sw_rec_free(f->rec);
	memset(f, 0, sizeof *f);
}

/* f's records copied into g (a fresh feed). */
static void copy_in_(feed_ *g, const feed_ *f)
{
	memset(g, 0, sizeof *g);
	for (int i = 0; i < f->n; i++) {
		g->in[i] = malloc(f->nin[i]);
		memcpy(g->in[i], f->in[i], f->nin[i]);
		g->nin[i] = f->nin[i];
	}
	g->n = f->n;
}

static bool same_out_(const feed_ *a, const feed_ *b, bool say)
{
	if (a->nout != b->nout)
		return false;
	for (int i = 0; i < a->nout; i++)
		if (strcmp(a->out[i], b->out[i])) {
			if (say)
				printf("#   sample %d: %.80s\n#        vs: %.80s\n", i, a->out[i], b->out[i]);
			return false;
		}
	return true;
}

static int run_(const sw_model *m, const sw_tokenizer *tok, const sw_rollout_config *c, feed_ *f)
{
	sw_error err = { 0 };
	sw_rollout *r = sw_rollout_new(m, tok, c, &err);
	if (!r) {
		printf("# %s\n", err.msg);
		return SW_EINVAL;
	}
	sw_rollout_io io = io_(f);
	int rc = sw_rollout_run(r, &io, &err);
	if (rc)
		printf("# run: %s\n", err.msg);
	sw_rollout_free(r);
	return rc;
}

static sw_rollout_config cfg_(int G, int batch, int max_new)
{
	sw_rollout_config c = sw_rollout_config_defaults();
	c.G = G;
	c.batch = batch;
	c.max_new = max_new;
	c.seed = 42;
	c.kv_bytes = 64 << 20;
	return c;
}

/* ---- the tests ------------------------------------------------------------------ */

/* The number of response tokens in a sample's line. */
static int ntok_(const char *line)
{
	int n = -3;
	for (const char *p = line; *p && *p != '|'; p++)
		n += *p == ' ';
	return n;
}

static void test_order_(const sw_model *m, const sw_tokenizer *tok)
{
	/* B runs long, A and C short: C finishes long before B, yet goes out after it */
	feed_ f = { 0 };
	add_(&f, "A", "a", 2);
	add_(&f, "B", "b", 40);
	add_(&f, "C", "c", 2);
	add_(&f, "D", "dd", 5);
	sw_rollout_config c = cfg_(2, 2, 40);
	c.sampling.temperature = 0;
	is_int(run_(m, tok, &c, &f), 0, "the run ends well");
	const char *want[] = { "A/0", "A/1", "B/0", "B/1", "C/0", "C/1", "D/0", "D/1" };
	bool in_order = f.nout == 8;
	for (int i = 0; in_order && i < 8; i++)
		in_order = !strncmp(f.out[i], want[i], 3) && f.out[i][3] == ' ';
	ok(in_order, "samples come out in input order, whatever finishes first");
	ok(f.nout == 8 && !strncmp(f.out[0], "A/0 length 0 ", 13) && ntok_(f.out[0]) == 2 && ntok_(f.out[2]) > 2,
	   "finish, version and tokens are set (%s)", f.nout ? f.out[0] : "");
	feed_free_(&f);
}

static void test_batch_invariance_(const sw_model *m, const sw_tokenizer *tok)
{
	feed_ ref = { 0 }, f;
	prompts_(&ref, 9);
	sw_rollout_config c = cfg_(3, 1, 24);
	c.nstops = 1;
	const char *stop[] = { "e" };
	c.stops = stop;
	is_int(run_(m, tok, &c, &ref), 0, "batch 1 runs");
	is_int(ref.nout, 27, "G samples per prompt");
	int batches[] = { 4, 64 };
	for (int i = 0; i < 2; i++) {
		copy_in_(&f, &ref);
		f.pause = true; /* the input arriving in bits changes what shares a step, not the samples */
		c.batch = batches[i];
		run_(m, tok, &c, &f);
		ok(same_out_(&ref, &f, true), "batch %d gives batch 1's samples, log-probs bit for bit", batches[i]);
		feed_free_(&f);
	}
	copy_in_(&f, &ref);
	c.batch = 5;
	c.padded = true;
	run_(m, tok, &c, &f);
	ok(same_out_(&ref, &f, true), "static batching gives the same samples");
	feed_free_(&f);
	copy_in_(&f, &ref);
	c.padded = false;
	c.seed = 43;
	run_(m, tok, &c, &f);
	ok(f.nout == 27 && !same_out_(&ref, &f, false), "another seed gives other samples");
	feed_free_(&f);
	feed_free_(&ref);
}

static void test_two_(const sw_model *m, const sw_tokenizer *tok)
{
	feed_ a1 = { 0 }, b1 = { 0 }, a2, b2;
	prompts_(&a1, 6);
	add_(&b1, "x", "another input altogether", 0);
	add_(&b1, "y", "and one more", 0);
	add_(&b1, "z", "zzz", 3);
	copy_in_(&a2, &a1);
	copy_in_(&b2, &b1);
	sw_rollout_config ca = cfg_(2, 3, 20), cb = cfg_(4, 5, 16);
	cb.seed = 7;
	cb.sampling.top_k = 20;
	run_(m, tok, &ca, &a1);
	run_(m, tok, &cb, &b1);
	sw_error ea = { 0 }, eb = { 0 };
	sw_rollout *ra = sw_rollout_new(m, tok, &ca, &ea), *rb = sw_rollout_new(m, tok, &cb, &eb);
	sw_rollout_io ia = io_(&a2), ib = io_(&b2);
	int rca = 1, rcb = 1, steps = 0;
	while (rca == 1 || rcb == 1) {
		if (rca == 1)
			rca = sw_rollout_step(ra, &ia, &ea);
		if (rcb == 1)
			rcb = sw_rollout_step(rb, &ib, &eb);
		steps++;
	}
	ok(ra && rb && rca == 0 && rcb == 0 && steps > 5, "two schedulers step in turn to the end (%d steps)", steps);
	ok(same_out_(&a1, &a2, true), "the first gives what it gives alone");
	ok(same_out_(&b1, &b2, true), "the second gives what it gives alone");
	sw_rollout_free(ra);
	sw_rollout_free(rb);
	feed_free_(&a1), feed_free_(&b1), feed_free_(&a2), feed_free_(&b2);
}

static void test_invalid_(const sw_model *m, const sw_tokenizer *tok)
{
	feed_ f = { 0 }, g;
	add_(&f, "ok", "fine", 0);
	add_(&f, "x", NULL, 0);
	add_(&f, "late", "after the bad one", 0);
	copy_in_(&g, &f);
	sw_rollout_config c = cfg_(2, 4, 6);
	sw_error err = { 0 };
	sw_rollout *r = sw_rollout_new(m, tok, &c, &err);
	sw_rollout_io io = io_(&f);
	int rc = sw_rollout_run(r, &io, &err);
	is_int(rc, SW_EFORMAT, "an invalid record ends the run with SW_EFORMAT");
	ok(f.nbad == 1 && f.badat[0] == 2 &&
	   !strcmp(f.bad[0], "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field"),
	   "the caller hears of it, with its message, while it is the record pulled last");
	ok(f.nout == 2 && !strncmp(f.out[0], "ok/0 ", 5) && !strncmp(f.out[1], "ok/1 ", 5),
	   "the samples before it are finished and handed out, none after");
	sw_rollout_free(r);

	c.skip_invalid = true;
	r = sw_rollout_new(m, tok, &c, &err);
	io = io_(&g);
	is_int(sw_rollout_run(r, &io, &err), 0, "with skip_invalid the run goes on");
	ok(g.nbad == 1 && g.nout == 4 && !strncmp(g.out[2], "late/0 ", 7), "the bad record is skipped, leaving no gap");
	is_int(sw_rollout_skipped(r), 1, "and counted");
	sw_rollout_free(r);
	feed_free_(&f), feed_free_(&g);

	feed_ h = { 0 };
	add_(&h, "long", "abc", 9);
	is_int(run_(m, tok, &c, &h), 0, "a record's max_new_tokens above the limit is skipped");
	ok(h.nbad == 1 && !strcmp(h.bad[0], "field 'max_new_tokens' is 9, not from 1 to --max-new-tokens 6"),
	   "with the program's message (%s)", h.bad[0]);
	feed_free_(&h);
}

/* Does line a (an aborted sample) have tokens that begin b's? */
static bool prefix_of_(const char *a, const char *b)
{
	const char *ta = strchr(strchr(strchr(a, ' ') + 1, ' ') + 1, ' ');
	const char *tb = strchr(strchr(strchr(b, ' ') + 1, ' ') + 1, ' ');
	size_t n = (size_t)(strchr(ta, '|') - ta);
	return !strncmp(ta, tb, n);
}

static void test_weights_(sw_model *m, const sw_tokenizer *tok)
{
	sw_error err = { 0 };
	char spec[128];
	sw_store *s = NULL;
	if (sw_store_name_random("sw-test-rollout", spec, sizeof spec, &err) ||
	    !(s = sw_store_create(spec, &m->cfg, 0, &err))) {
		ok(0, "a store: %s", err.msg);
		return;
	}
	sw_model_read(m, sw_store_arena(s), &err);
	sw_store_publish(s, 7, &err);
	/* from here the store's arena is the backend's: written through the view only */
	sw_model *v = sw_model_view_on(be_, &m->cfg, sw_store_arena(s), &err);

	feed_ ref = { 0 }, f;
	prompts_(&ref, 12);
	copy_in_(&f, &ref);
	sw_rollout_config c = cfg_(4, 8, 20);
	run_(m, tok, &c, &ref);
	c.store = s;
	c.store_name = spec;
	sw_rollout *r = sw_rollout_new(v, tok, &c, &err);
	sw_rollout_io io = io_(&f);
	int rc = 1;
	for (int i = 0; i < 6 && rc == 1; i++)
		rc = sw_rollout_step(r, &io, &err);
	/* the same weights published again: what is in flight was made by version 7 */
	sw_store_write_begin(s, &err);
	ok(!sw_model_copy(v, m, &err), "the weights written into the store in place (%s)", err.msg);
	sw_store_publish(s, 8, &err);
	while (rc == 1)
		rc = sw_rollout_step(r, &io, &err);
	is_int(rc, 0, "the run goes on to the end");
	int abort7 = 0, done8 = 0, other = 0, match = 0;
	for (int i = 0; i < f.nout; i++) {
		if (strstr(f.out[i], " abort 7 "))
			abort7++;
		else if (strstr(f.out[i], " 8 ") && !strstr(f.out[i], " abort "))
			done8++;
		else
			other++;
		/* ref has version 0; the tokens are the same (the weights are) */
		match += strstr(f.out[i], " abort ") ? prefix_of_(f.out[i], ref.out[i]) : prefix_of_(ref.out[i], f.out[i]);
	}
	is_int(f.nout, 48, "every sample is out, in order");
	ok(abort7 > 0 && done8 > 0 && other == 0,
	   "responses in flight end as abort of version 7, the later ones finish with version 8 (%d, %d, %d)",
	   abort7, done8, other);
	is_int(match, f.nout, "aborted responses are the start of what the run without a store gives, the rest all of it");
	sw_rollout_free(r);
	feed_free_(&f), feed_free_(&ref);
	sw_model_free(v);
	sw_store_close(s);
	sw_store_unlink(spec, &err);
}

static void test_score_(const sw_model *m, const sw_tokenizer *tok)
{
	feed_ f = { 0 }, g = { 0 };
	prompts_(&f, 4);
	sw_rollout_config c = cfg_(2, 3, 12);
	c.sampling.temperature = 0.7;
	run_(m, tok, &c, &f);
	/* the samples become the input of score mode */
	for (int i = 0; i < f.nout; i++) {
		char id[32];
		snprintf(id, sizeof id, "%.*s", (int)(strchr(f.out[i], ' ') - f.out[i]), f.out[i]);
		add_(&g, id, NULL, 0);
	}
	sw_rec *rec = sw_rec_new();
	for (int i = 0; i < g.n; i++) {
		/* prompt and response_tokens from the generated sample */
		uint32_t tok_[64];
		int nt = 0;
		char *p = strchr(strchr(strchr(f.out[i], ' ') + 1, ' ') + 1, ' ');
		while (*p == ' ' && p[1] != '|')
			tok_[nt++] = (uint32_t)strtoul(p + 1, &p, 10);
		sw_rec_load(rec, g.in[i], g.nin[i]);
		char prompt[64];
		snprintf(prompt, sizeof prompt, "prompt number %d", i / 2 * 7);
		sw_rec_set_str(rec, "prompt", prompt, strlen(prompt));
		sw_rec_set_u32s(rec, "response_tokens", tok_, (size_t)nt);
		const uint8_t *b;
		size_t n;
		sw_rec_bytes(rec, &b, &n);
		free(g.in[i]);
		g.in[i] = malloc(n);
		memcpy(g.in[i], b, n);
		g.nin[i] = n;
	}
	sw_rec_free(rec);
	sw_rollout_config sc = sw_rollout_config_defaults();
	sc.score = true;
	sc.batch = 3;
	sc.sampling.temperature = 0.7;
	sc.score_field = "score";
	is_int(run_(m, tok, &sc, &g), 0, "score mode runs");
	double worst = g.nout == f.nout ? 0 : 1;
	for (int i = 0; i < g.nout && i < f.nout; i++) {
		char *a = strchr(f.out[i], '|'), *b = strchr(g.out[i], '|');
		while (a && b && *a && *b) {
			float x, y;
			uint32_t bx = (uint32_t)strtoul(a + 1, &a, 16), by = (uint32_t)strtoul(b + 1, &b, 16);
			memcpy(&x, &bx, 4), memcpy(&y, &by, 4);
			/* to float rounding, relative to the size of the log-prob */
			double d = fabs((double)x - y) / (fabs((double)x) > 1 ? fabs((double)x) : 1);
			if (d > worst)
				worst = d;
			if (!*a || !*b)
				break;
		}
	}
	/* (random weights of std 0.5 make large logits: 1e-4 of rounding, where a wrong row or token is off by ~1) */
	ok(worst < 1e-4, "score mode gives generation's log-probs back (worst relative difference %g)", worst);
	feed_free_(&f), feed_free_(&g);
}

/* --stop strings as users write them: the escapes become their bytes; unknown ones are refused. */
static void test_stop_parse_(void)
{
	static const struct { const char *in, *out; } good[] = {
		{ "\\n\\n", "\n\n" }, { "a\\tb\\r", "a\tb\r" }, { "\\\\n", "\\n" }, { "\\x41\\x0a", "A\n" },
		{ "</s>", "</s>" }, { "\xc3\xa9", "\xc3\xa9" },
	};
	int n_ok = 0;
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		char *out = NULL;
		sw_error e = { 0 };
		n_ok += !sw_rollout_stop_parse(good[i].in, &out, &e) && !strcmp(out, good[i].out);
		free(out);
	}
	is_int(n_ok, (int)(sizeof good / sizeof *good), "stop strings: \\n \\t \\r \\\\ \\xHH become their bytes");
	static const char *const bad[] = { "\\q", "\\x4", "\\x00", "a\\", "\\xg1" };
	int n_bad = 0;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char *out = (char *)1;
		sw_error e = { 0 };
		n_bad += sw_rollout_stop_parse(bad[i], &out, &e) == SW_EINVAL && !out && strstr(e.msg, "escape");
	}
	is_int(n_bad, (int)(sizeof bad / sizeof *bad), "an unknown or short escape, or \\x00, is refused");
}

int main(void)
{
	sw_error e0 = { 0 };
	if (!(be_ = sw_backend_get(getenv("SW_TEST_DEVICE"), &e0))) {
		fprintf(stderr, "test_rollout: %s\n", e0.msg);
		return 1;
	}
	printf("# on the %s backend\n", sw_backend_name(be_));
	test_stop_parse_();
	sw_engine_threads(2);
	sw_model *m = model_();
	sw_tokenizer *tok = sw_tokenizer_byte();
	if (!m || !tok) {
		ok(0, "a tiny model and the byte tokenizer");
		return tap_done();
	}
	sw_error err = { 0 };
	sw_rollout_config c = cfg_(0, 1, 1);
	ok(!sw_rollout_new(m, tok, &c, &err) && err.code == SW_EINVAL, "G 0 is refused");
	c = cfg_(1, 1, 1);
	c.sampling.top_p = 0;
	ok(!sw_rollout_new(m, tok, &c, &err) && err.code == SW_EINVAL, "a bad sampling setting is refused");
	sw_rollout_free(NULL);

	test_order_(m, tok);
	test_batch_invariance_(m, tok);
	test_two_(m, tok);
	test_invalid_(m, tok);
	test_weights_(m, tok);
	test_score_(m, tok);
	sw_tokenizer_free(tok);
	sw_model_free(m);
	return tap_done();
}
