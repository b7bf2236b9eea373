/*
 * sw-train - one optimisation step per input stream: SFT, or a policy
 * gradient of the GRPO family with KL to a reference, on a model directory.
 *
 * The step: read every sample of the stream and check it; compute the old
 * log-probabilities under the weights that start the step (and the
 * reference's, when there is a KL term); compute advantages over the whole
 * stream (libsw/rl/rl.c); then epochs x minibatches AdamW updates, each
 * accumulating gradients over micro batches (sw-balance's `micro`, or a
 * token budget); then write the new model with its optimiser state, RNG
 * and schedule position into --out atomically, append a metrics record, and
 * pass the samples through with `advantage` set.  Nothing is written until
 * the whole step has succeeded: a failed or killed step leaves the previous
 * model directory as it was.
 *
 * With --weights STORE (sw-run's way) the weights live in a shared-memory
 * store instead: they are copied out, trained, and copied back in one
 * update published as the next version, with the optimiser state in the
 * store STORE.opt beside them (or $SW_OPT), which sw-run checkpoints.
 */
#define _GNU_SOURCE /* renameat2(RENAME_EXCHANGE): swap two directories atomically */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

enum {
	OPT_LR = 0x100, OPT_SCHEDULE, OPT_WARMUP, OPT_TOTAL, OPT_MIN_LR, OPT_WD, OPT_GRAD_NORM,
	OPT_CLIP_LOW, OPT_CLIP_HIGH, OPT_CLIP_DUAL, OPT_KL_COEF, OPT_KL_EST, OPT_KL_REWARD, OPT_REF,
	OPT_ENTROPY, OPT_TIS, OPT_EPOCHS, OPT_MINIBATCHES, OPT_MICRO_TOKENS, OPT_RANK, OPT_TRAIN_ON,
	OPT_MAX_LEN, OPT_EPS, OPT_GAMMA, OPT_SEED, OPT_METRICS, OPT_AGG, OPT_FORCE, OPT_WEIGHTS
};

static const cli_opt opts[] = {
	{ 'm', 'm', "model", "dir", "dir", "the model to train (a Hugging Face model directory)" },
	{ 'o', 'o', "out", "dir", "dir", "write the trained model here, atomically (may be the same as --model)" },
	{ OPT_WEIGHTS, 0, "weights", "store", NULL,
	  "train the weights of a shared store, shm:NAME, in place (default $SW_WEIGHTS)" },
	{ 'a', 'a', "algo", "name", "sft|grpo|dr_grpo|dapo|rloo|reinforce++", "the algorithm (default grpo)" },
	{ OPT_AGG, 0, "loss-agg", "mode", "token-mean|seq-mean-token-sum|seq-mean-token-mean|seq-mean-token-sum-norm",
	  "how token losses are combined (default: the algorithm's own)" },
	{ OPT_LR, 0, "lr", "rate", NULL, "peak learning rate (default 1e-6)" },
	{ OPT_SCHEDULE, 0, "schedule", "name", "constant|cosine|linear", "learning-rate schedule after warm-up" },
	{ OPT_WARMUP, 0, "warmup", "updates", NULL, "linear warm-up over this many updates (default 0)" },
	{ OPT_TOTAL, 0, "total-updates", "num", NULL, "length of the cosine or linear decay, in updates" },
	{ OPT_MIN_LR, 0, "min-lr-ratio", "ratio", NULL, "the decay ends at lr times this (default 0)" },
	{ OPT_WD, 0, "weight-decay", "w", NULL, "AdamW's decoupled weight decay (default 0.01)" },
	{ OPT_GRAD_NORM, 0, "max-grad-norm", "norm", NULL, "clip the global gradient norm (default 1; 0: never)" },
	{ OPT_CLIP_LOW, 0, "clip-low", "eps", NULL, "the ratio is clipped below at 1 - eps (default 0.2)" },
	{ OPT_CLIP_HIGH, 0, "clip-high", "eps", NULL, "and above at 1 + eps (default 0.2; 0.28 for dapo)" },
	{ OPT_CLIP_DUAL, 0, "clip-dual", "c", NULL, "dual clip for negative advantages, c > 1 (default off)" },
	{ OPT_KL_COEF, 0, "kl-coef", "beta", NULL, "weight of KL to the reference (default 0; needs --ref)" },
	{ OPT_KL_EST, 0, "kl-estimator", "name", "k1|k2|k3", "KL estimator (default k3 as a loss, k1 in the reward)" },
	{ OPT_KL_REWARD, 0, "kl-in-reward", NULL, NULL, "charge the KL as a reward penalty instead of a loss term" },
	{ OPT_REF, 0, "ref", "model", "dir", "the reference model for the KL term: a directory or a store (default $SW_REF)" },
	{ OPT_ENTROPY, 0, "entropy-coef", "c", NULL, "entropy bonus (default 0)" },
	{ OPT_TIS, 0, "tis-cap", "c", NULL,
	  "truncated importance sampling of off-policy samples, weights capped at c (default off)" },
	{ OPT_EPOCHS, 0, "epochs", "num", NULL, "passes over the samples (default 1)" },
	{ OPT_MINIBATCHES, 0, "minibatches", "num", NULL, "optimiser updates per pass (default 1)" },
	{ OPT_MICRO_TOKENS, 0, "micro-tokens", "num", NULL,
	  "token budget of a micro batch when samples have no 'micro' (default 8192)" },
	{ OPT_RANK, 0, "rank", "r", NULL, "train only the samples with rank r" },
	{ OPT_TRAIN_ON, 0, "train-on", "what", "response|prompt+response", "tokens SFT learns (default response)" },
	{ OPT_MAX_LEN, 0, "max-len", "tokens", NULL,
	  "the constant of seq-mean-token-sum-norm (default: the longest response)" },
	{ OPT_EPS, 0, "adv-eps", "eps", NULL, "added to the group std by grpo and dapo (default 1e-6)" },
	{ OPT_GAMMA, 0, "gamma", "g", NULL, "discount of reinforce++ token rewards (default 1)" },
	{ OPT_SEED, 0, "seed", "num", NULL, "seed of the minibatch shuffle for a model without trainer state" },
	{ 'j', 'j', "threads", "num", NULL, "compute threads (default: every core)" },
	{ OPT_METRICS, 0, "metrics", "file", "file", "append one JSON record of the step's metrics to file" },
	{ 'f', 'f', "format", "format", "msgpack|json", "write the samples as msgpack or json (default msgpack)" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the samples written with zstd" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-train", "[file ...]", "file",
	"Train a model one step on a stream of samples: SFT, GRPO, Dr. GRPO, DAPO, RLOO or REINFORCE++.",
	opts
};

/* ---- settings ---------------------------------------------------------------- */

typedef struct settings {
	const char *model, *out, *ref, *metrics, *weights, *opt_spec;
	sw_rl_algo algo;
	int agg_set;
	sw_rl_agg agg;
	sw_adamw_config adam;
	sw_rl_loss_opts loss;
	int kl_set, kl_in_reward, sft_all;
	double max_len, adv_eps, gamma;
	long epochs, minibatches;
	size_t micro_tokens;
	long long rank; /* -1: every rank */
	uint64_t seed;
} settings;

static double opt_num_(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (!*s || *end || errno || !(x >= lo && x <= hi))
		cli_usage("option '%s' wants a number from %g to %g, not '%s'", opt, lo, hi, s);
	return x;
}

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int progress_(void)
{
	return cli_verbosity > 0 || (cli_verbosity == 0 && isatty(2));
}

static void *xcalloc_(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		cli_die("out of memory");
	return p;
}

static void *xrealloc_(void *p, size_t n, size_t size)
{
	if (n && size > SIZE_MAX / n)
		cli_die("out of memory");
	p = realloc(p, n && size ? n * size : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

/* ---- the samples ------------------------------------------------------------------ */

typedef struct sample {
	sw_rec *rec;
	const char *file;   /* for messages */
	uint64_t recno;     /* 1-based within file */
	int32_t *tok;       /* prompt then response */
	size_t np, nr;
	float *behav;       /* the rollout's log-probs of the response, or NULL */
	double reward;
	char *group;        /* as text */
	uint64_t gid;
	int valid;          /* 0: verifier_error, masked out */
	int mine;           /* valid, of our rank */
	long long micro, rank, version; /* -1: absent */
	size_t nloss;       /* tokens the loss is over */
	size_t goff;        /* its first token in the flat per-token arrays */
	double adv;
} sample;

typedef struct batch {
	sample *s;
	size_t n, cap;
} batch;

static noreturn void die_rec_(const sample *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static noreturn void die_rec_(const sample *s, const char *fmt, ...)
{
	char m[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	cli_die("%s: record %llu: %s", s->file, (unsigned long long)s->recno, m);
}

/* An array of token ids; NULL and *present 0 when absent. */
static uint32_t *get_tokens_(sample *s, const char *key, size_t *n, int *present)
{
	uint32_t *buf = NULL;
	int rc = sw_rec_get_u32s(s->rec, key, NULL, 0, n);
	*present = rc != SW_ENOENT;
	if (rc == SW_ENOENT)
		return NULL;
	if (rc == SW_ERANGE && *n > 0) { /* the usual path: the length first, then the values */
		size_t cap = *n;
		buf = xcalloc_(cap, sizeof *buf);
		rc = sw_rec_get_u32s(s->rec, key, buf, cap, n);
	}
	if (rc)
		free(buf);
	if (rc == SW_ETYPE || rc == SW_ERANGE)
		die_rec_(s, "field '%s' is not an array of token ids", key);
	if (rc)
		die_rec_(s, "field '%s': %s", key, sw_strerror(rc));
	return buf;
}

/* An array of numbers (any msgpack number type), as floats. */
static float *get_numbers_(sample *s, const char *key, size_t *n, int *present)
{
	sw_val v, e;
	int rc = sw_rec_get(s->rec, key, &v);
	*present = rc != SW_ENOENT;
	if (rc == SW_ENOENT)
		return NULL;
	if (rc || v.type != SW_T_ARRAY)
		die_rec_(s, "field '%s' is not an array of numbers", key);
	float *out = xcalloc_(v.v.count, sizeof *out);
	sw_iter it;
	sw_iter_init(&it, &v);
	size_t i = 0;
	double x;
	while ((rc = sw_iter_next(&it, &e)) == 1) {
		if (sw_val_number(&e, &x)) {
			free(out);
			die_rec_(s, "field '%s' value %zu is a %s, not a number", key, i + 1, sw_type_name(e.type));
		}
		out[i++] = (float)x;
	}
	if (rc < 0) {
		free(out);
		die_rec_(s, "field '%s': %s", key, sw_strerror(rc));
	}
	*n = i;
	return out;
}

static long long get_uint_field_(sample *s, const char *key)
{
	uint64_t u;
	int rc = sw_rec_get_u64(s->rec, key, &u);
	if (rc == SW_ENOENT)
		return -1;
	if (rc || u > (uint64_t)INT64_MAX)
		die_rec_(s, "field '%s' is not a whole number >= 0", key);
	return (long long)u;
}

/*
 * Text where the token ids are missing, tokenised as sw-rollout does it: a
 * prompt (special tokens recognised), or messages rendered with the chat
 * template and its generation prompt; a response as it is.  The tokenizer is
 * the model directory's, loaded at the first text.
 */
static sw_tokenizer *tok_;
static const char *tok_dir_;

static sw_tokenizer *tokenizer_(sample *s, const char *what)
{
	sw_error err = { 0 };
	if (!tok_) {
		if (!tok_dir_)
			die_rec_(s, "%s is text, and a store has no tokenizer: give token ids", what);
		if (!(tok_ = sw_tokenizer_load(tok_dir_, &err)))
			cli_die("cannot load the tokenizer of '%s': %s", tok_dir_, err.msg);
	}
	return tok_;
}

static uint32_t *encode_(sample *s, const char *text, size_t len, const char *what, size_t *n)
{
	sw_error err = { 0 };
	uint32_t *ids;
	if (sw_tokenizer_encode(tokenizer_(s, what), text, len, 1, &ids, n, &err))
		die_rec_(s, "cannot tokenise %s: %s", what, err.msg);
	return ids;
}

static uint32_t *prompt_text_(sample *s, size_t *n)
{
	sw_val v, m, k, x;
	if (sw_rec_get(s->rec, "messages", &v) == 0) {
		if (v.type != SW_T_ARRAY)
			die_rec_(s, "field 'messages' is a %s, not an array of {role, content} maps", sw_type_name(v.type));
		if (v.v.count == 0)
			die_rec_(s, "field 'messages' is empty");
		sw_chat_msg *msgs = xcalloc_(v.v.count, sizeof *msgs);
		char **strs = xcalloc_(2 * (size_t)v.v.count, sizeof *strs);
		sw_iter it, mi;
		size_t i = 0;
		sw_iter_init(&it, &v);
		while (sw_iter_next(&it, &m) == 1) {
			if (m.type != SW_T_MAP)
				die_rec_(s, "field 'messages': message %zu is a %s, not a map", i, sw_type_name(m.type));
			sw_iter_init(&mi, &m);
			while (sw_iter_next(&mi, &k) == 1 && sw_iter_next(&mi, &x) == 1) {
				int role = k.type == SW_T_STR && k.v.str.len == 4 && !memcmp(k.v.str.ptr, "role", 4);
				int content = k.type == SW_T_STR && k.v.str.len == 7 && !memcmp(k.v.str.ptr, "content", 7);
				if (!role && !content)
					continue;
				if (x.type != SW_T_STR)
					die_rec_(s, "field 'messages': message %zu: '%s' is a %s, not a string", i,
					         role ? "role" : "content", sw_type_name(x.type));
				char *c = xcalloc_(x.v.str.len + 1, 1);
				memcpy(c, x.v.str.ptr, x.v.str.len);
				strs[2 * i + !role] = c;
			}
			if (!strs[2 * i] || !strs[2 * i + 1])
				die_rec_(s, "field 'messages': message %zu has no '%s'", i, strs[2 * i] ? "content" : "role");
			msgs[i] = (sw_chat_msg){ strs[2 * i], strs[2 * i + 1] };
			i++;
		}
		char *text;
		size_t tl;
		sw_error err = { 0 };
		if (sw_tokenizer_chat(tokenizer_(s, "field 'messages'"), msgs, i, 1, &text, &tl, &err))
			die_rec_(s, "cannot render 'messages' with the chat template: %s", err.msg);
		uint32_t *ids = encode_(s, text, tl, "the rendered messages", n);
		free(text);
		for (size_t j = 0; j < 2 * i; j++)
			free(strs[j]);
		free(strs);
		free(msgs);
		return ids;
	}
	if (sw_rec_get(s->rec, "prompt", &v) == 0) {
		if (v.type != SW_T_STR)
			die_rec_(s, "field 'prompt' is a %s, not a string", sw_type_name(v.type));
		return encode_(s, v.v.str.ptr, v.v.str.len, "field 'prompt'", n);
	}
	die_rec_(s, "no prompt: the record has no 'prompt_tokens', 'messages' or 'prompt' field");
}

/* Read and check one sample; the record is the sample's from now on. */
static void load_sample_(const settings *st, const sw_model_config *cfg, sample *s)
{
	sw_val v;
	int present;
	s->micro = get_uint_field_(s, "micro");
	s->rank = get_uint_field_(s, "rank");
	s->version = get_uint_field_(s, "policy_version");
	/* a failed verifier masks the sample: it is never given a default reward */
	s->valid = !(sw_rec_get(s->rec, "verifier_error", &v) == 0 && v.type != SW_T_NIL);
	s->mine = s->valid && (st->rank < 0 || s->rank == st->rank);
	if (st->rank >= 0 && s->valid && s->rank < 0)
		die_rec_(s, "field 'rank' is missing (--rank %lld trains the samples sw-balance gave that rank)",
		         st->rank);
	if (!s->valid)
		return;

	/* static: a bad record ends the program while these are held, and they stay reachable */
	static uint32_t *p, *r;
	size_t np, nr;
	p = get_tokens_(s, "prompt_tokens", &np, &present);
	if (!present)
		p = prompt_text_(s, &np);
	r = get_tokens_(s, "response_tokens", &nr, &present);
	if (!present) {
		if (sw_rec_get(s->rec, "response", &v))
			die_rec_(s, "no response: the record has no 'response_tokens' or 'response' field");
		if (v.type != SW_T_STR)
			die_rec_(s, "field 'response' is a %s, not a string", sw_type_name(v.type));
		r = encode_(s, v.v.str.ptr, v.v.str.len, "field 'response'", &nr);
	}
	if (np == 0)
		die_rec_(s, "the prompt is empty: the first response token needs a token before it");
	if (np + nr > (size_t)cfg->max_position_embeddings)
		die_rec_(s, "%zu prompt and %zu response tokens exceed the model's %d positions", np, nr,
		         cfg->max_position_embeddings);
	s->tok = xcalloc_(np + nr, sizeof *s->tok);
	for (size_t i = 0; i < np + nr; i++) {
		uint32_t t = i < np ? p[i] : r[i - np];
		if (t >= (uint32_t)cfg->vocab_size)
			die_rec_(s, "field '%s' holds token %u, outside the model's vocabulary of %d",
			         i < np ? "prompt_tokens" : "response_tokens", t, cfg->vocab_size);
		s->tok[i] = (int32_t)t;
	}
	free(p);
	free(r);
	p = r = NULL;
	s->np = np;
	s->nr = nr;
	s->nloss = st->sft_all ? np + nr - 1 : nr;
	if (st->algo == SW_RL_SFT)
		return;

	size_t nlp = 0;
	s->behav = get_numbers_(s, "logprobs", &nlp, &present);
	if (present && nlp != nr)
		die_rec_(s, "field 'logprobs' has %zu values, 'response_tokens' has %zu", nlp, nr);
	for (size_t i = 0; s->behav && i < nlp; i++)
		if (!isfinite(s->behav[i]) || s->behav[i] > 0)
			die_rec_(s, "field 'logprobs' value %zu is %g, not a log-probability", i + 1, (double)s->behav[i]);

	int rc = sw_rec_get_f64(s->rec, "reward", &s->reward);
	if (rc == SW_ENOENT)
		die_rec_(s, "field 'reward' is missing (score the samples with sw-verify first)");
	if (rc)
		die_rec_(s, "field 'reward' is not a number");
	if (!isfinite(s->reward))
		die_rec_(s, "field 'reward' is %s", isnan(s->reward) ? "NaN" : "infinite");

	if (st->algo != SW_RL_REINFORCE_PP) {
		char num[32];
		rc = sw_rec_get(s->rec, "group", &v);
		if (rc == SW_ENOENT)
			die_rec_(s, "field 'group' is missing (%s compares the responses of one prompt)",
			         sw_rl_algo_name(st->algo));
		if (rc)
			die_rec_(s, "field 'group': %s", sw_strerror(rc));
		if (v.type == SW_T_STR) {
			s->group = xcalloc_(v.v.str.len + 1, 1);
			memcpy(s->group, v.v.str.ptr, v.v.str.len);
		} else if (v.type == SW_T_UINT || v.type == SW_T_INT) {
			if (v.type == SW_T_UINT)
				snprintf(num, sizeof num, "%llu", (unsigned long long)v.v.u);
			else
				snprintf(num, sizeof num, "%lld", (long long)v.v.i);
			s->group = strdup(num);
			if (!s->group)
				cli_die("out of memory");
		} else {
			die_rec_(s, "field 'group' is a %s, not a string", sw_type_name(v.type));
		}
	}
}

static const char *input_name_(const char *f)
{
	return strcmp(f, "-") ? f : "stdin";
}

static void read_samples_(const settings *st, const sw_model_config *cfg, char **files, int nfiles, batch *b)
{
	size_t max_record = cli_max_record();
	sw_error err = { 0 };
	for (int i = 0; i < nfiles; i++) {
		sw_reader *r = sw_reader_open(files[i], &err);
		const char *name = input_name_(files[i]);
		if (!r)
			cli_die("cannot open '%s': %s", files[i], strerror(err.sys_errno));
		sw_reader_set_max_record(r, max_record);
		int rc;
		for (;;) {
			sw_rec *rec = sw_rec_new();
			if (!rec)
				cli_die("out of memory");
			if ((rc = sw_reader_next(r, rec)) != 1) {
				sw_rec_free(rec);
				break;
			}
			if (sw_rec_own(rec))
				cli_die("out of memory");
			if (b->n == b->cap) {
				b->cap = b->cap ? 2 * b->cap : 256;
				b->s = xrealloc_(b->s, b->cap, sizeof *b->s);
			}
			sample *s = &b->s[b->n++];
			memset(s, 0, sizeof *s);
			s->rec = rec;
			s->file = name;
			s->recno = sw_reader_records(r);
			load_sample_(st, cfg, s);
		}
		/* an input of no bytes is no samples, not a broken stream */
		if (rc < 0 && sw_reader_error(r)->code != SW_EEMPTY)
			cli_die_stream(name, sw_reader_error(r));
		sw_reader_free(r);
	}
	if (!b->n)
		cli_die("%s: no samples to train on (the input is empty)",
		        nfiles == 1 ? input_name_(files[0]) : "input");
}

/* Number the groups: equal strings, equal ids, whatever their order in the stream. */
static int cmp_group_(const void *a, const void *b)
{
	const sample *const *x = a, *const *y = b;
	return strcmp((*x)->group, (*y)->group);
}

static void number_groups_(batch *b)
{
	sample **v = xcalloc_(b->n, sizeof *v);
	size_t n = 0;
	for (size_t i = 0; i < b->n; i++)
		if (b->s[i].group)
			v[n++] = &b->s[i];
	qsort(v, n, sizeof *v, cmp_group_);
	uint64_t id = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && strcmp(v[i]->group, v[i - 1]->group))
			id++;
		v[i]->gid = id;
	}
	free(v);
}

/* ---- forward and backward over micro batches ---------------------------------------- */

/* The loss tokens of sample s start at row first_row_(s) of its sequence. */
static size_t first_row_(const settings *st, const sample *s)
{
	return st->sft_all ? 0 : s->np - 1;
}

typedef struct packed {
	int32_t *tokens, *cu;
	float *lp, *ent;       /* per row */
	float *dlp, *dent;     /* per row, for the backward */
	size_t rows, cap_rows, cap_seq;
} packed;

static void pack_(packed *pk, sample *const *v, size_t n)
{
	size_t rows = 0;
	for (size_t i = 0; i < n; i++)
		rows += v[i]->np + v[i]->nr;
	if (rows > INT32_MAX)
		cli_die("a micro batch of %zu tokens is too large", rows);
	if (rows > pk->cap_rows) {
		pk->cap_rows = rows;
		pk->tokens = xrealloc_(pk->tokens, rows, sizeof *pk->tokens);
		pk->lp = xrealloc_(pk->lp, rows, sizeof *pk->lp);
		pk->ent = xrealloc_(pk->ent, rows, sizeof *pk->ent);
		pk->dlp = xrealloc_(pk->dlp, rows, sizeof *pk->dlp);
		pk->dent = xrealloc_(pk->dent, rows, sizeof *pk->dent);
	}
	if (n + 1 > pk->cap_seq) {
		pk->cap_seq = n + 1;
		pk->cu = xrealloc_(pk->cu, n + 1, sizeof *pk->cu);
	}
	pk->cu[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = v[i]->np + v[i]->nr;
		memcpy(pk->tokens + pk->cu[i], v[i]->tok, len * sizeof *pk->tokens);
		pk->cu[i + 1] = pk->cu[i] + (int32_t)len;
	}
	pk->rows = rows;
}

static void forward_(sw_engine *e, packed *pk, sample *const *v, size_t n, int for_backward, int want_ent,
                     const char *what)
{
	sw_error err = { 0 };
	pack_(pk, v, n);
	sw_batch b = { (int)n, pk->tokens, pk->cu, NULL };
	if (sw_engine_forward(e, &b, for_backward, pk->lp, want_ent ? pk->ent : NULL, &err))
		cli_die("%s: %s (micro batch starting at %s record %llu)", what, err.msg, v[0]->file,
		        (unsigned long long)v[0]->recno);
}

/* Copy the loss tokens' values of packed rows into out (micro order). */
static void gather_(const settings *st, const packed *pk, const float *rows, sample *const *v, size_t n,
                    float *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(out + k, rows + pk->cu[i] + first_row_(st, v[i]), v[i]->nloss * sizeof *out);
		k += v[i]->nloss;
	}
}

/* Micro batches: by the samples' `micro` field, else by token budget. */
typedef struct micro_list {
	sample ***mb;  /* mb[i]: its samples */
	size_t *len;
	size_t n;
} micro_list;

static int cmp_micro_(const void *a, const void *b)
{
	const sample *const *x = a, *const *y = b;
	if ((*x)->micro != (*y)->micro)
		return (*x)->micro < (*y)->micro ? -1 : 1;
	return *x < *y ? -1 : *x > *y; /* stream order within one */
}

static void micro_split_(sample **v, size_t n, int by_field, size_t budget, micro_list *ml)
{
	ml->n = 0;
	ml->mb = xcalloc_(n, sizeof *ml->mb);
	ml->len = xcalloc_(n, sizeof *ml->len);
	if (by_field)
		qsort(v, n, sizeof *v, cmp_micro_);
	size_t tok = 0;
	for (size_t i = 0; i < n; i++) {
		size_t t = v[i]->np + v[i]->nr;
		int cut = ml->n == 0 || (by_field ? v[i]->micro != v[i - 1]->micro : tok + t > budget);
		if (cut) {
			ml->mb[ml->n] = v + i;
			ml->len[ml->n++] = 0;
			tok = 0;
		}
		ml->len[ml->n - 1]++;
		tok += t;
	}
}

static void micro_free_(micro_list *ml)
{
	free(ml->mb);
	free(ml->len);
}

/* ---- the optimiser's state and the model directory ------------------------------------- */

typedef struct trainer_state {
	uint64_t version;  /* steps trained: the policy_version of these weights */
	uint64_t updates;  /* optimiser updates: AdamW's step and the schedule's position */
	uint64_t rng[4];   /* xoshiro256** */
	float *m, *v;      /* AdamW moments, nparams each */
} trainer_state;

static uint64_t rotl_(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next_(uint64_t *s)
{
	uint64_t r = rotl_(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl_(s[3], 45);
	return r;
}

static void rng_seed_(uint64_t *s, uint64_t seed)
{
	for (int i = 0; i < 4; i++) { /* splitmix64 */
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		s[i] = z ^ (z >> 31);
	}
}

static char *path_(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = xcalloc_(n, 1);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

#define OPT_MAGIC "SWADAMW1"
#define OPT_HEADER 32

static void hex_(const unsigned char *h, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static void opt_hash_(const unsigned char *hdr, const trainer_state *ts, size_t nparams, char *hx)
{
	unsigned char h[32];
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, sizeof h);
	crypto_generichash_update(&hs, hdr, OPT_HEADER);
	crypto_generichash_update(&hs, (const unsigned char *)ts->m, nparams * sizeof(float));
	crypto_generichash_update(&hs, (const unsigned char *)ts->v, nparams * sizeof(float));
	crypto_generichash_final(&hs, h, sizeof h);
	hex_(h, sizeof h, hx);
}

/*
 * trainer_state.json (one JSON line, read with the stream reader) and
 * optimizer.bin (a 32-byte header, then the first and second moments as
 * little-endian float32), whose BLAKE2b-256 the JSON records, so a state
 * from another model or a damaged file is refused rather than trained on.
 */
static void state_load_(const char *dir, size_t nparams, trainer_state *ts, uint64_t seed)
{
	char *js = path_(dir, "trainer_state.json"), *ob = path_(dir, "optimizer.bin");
	struct stat sb;
	memset(ts, 0, sizeof *ts);
	ts->m = xcalloc_(nparams, sizeof(float));
	ts->v = xcalloc_(nparams, sizeof(float));
	if (stat(js, &sb)) {
		if (errno != ENOENT)
			cli_die("cannot read '%s': %s", js, strerror(errno));
		if (!stat(ob, &sb))
			cli_die("'%s' is there but '%s' is not: a damaged trainer state", ob, js);
		rng_seed_(ts->rng, seed);
		free(js);
		free(ob);
		return;
	}
	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(js, &err);
	sw_rec *rec = sw_rec_new();
	if (!r || !rec)
		cli_die("cannot open '%s': %s", js, r ? "out of memory" : strerror(err.sys_errno));
	if (sw_reader_next(r, rec) != 1)
		cli_die("%s: no trainer state in it", js);
	uint64_t np = 0;
	const char *fmt, *hash;
	size_t fl, hl, n;
	if (sw_rec_get_str(rec, "format", &fmt, &fl) || fl != 10 || memcmp(fmt, "sw-train 1", 10) ||
	    sw_rec_get_u64(rec, "version", &ts->version) || sw_rec_get_u64(rec, "updates", &ts->updates) ||
	    sw_rec_get_u64(rec, "nparams", &np) || sw_rec_get_str(rec, "optimizer_blake2b", &hash, &hl) ||
	    hl != 64)
		cli_die("%s: not a trainer state of this version of sw-train", js);
	sw_val rv, e;
	sw_iter it;
	if (sw_rec_get(rec, "rng", &rv) || rv.type != SW_T_ARRAY || rv.v.count != 4)
		cli_die("%s: field 'rng' is not 4 numbers", js);
	sw_iter_init(&it, &rv);
	for (n = 0; n < 4 && sw_iter_next(&it, &e) == 1 && e.type == SW_T_UINT; n++)
		ts->rng[n] = e.v.u;
	if (n != 4)
		cli_die("%s: field 'rng' is not 4 numbers", js);
	if (np != nparams)
		cli_die("%s: the optimiser state is for %llu parameters, the model has %zu", js,
		        (unsigned long long)np, nparams);

	FILE *f = fopen(ob, "rb");
	if (!f)
		cli_die("cannot open '%s': %s", ob, strerror(errno));
	unsigned char hdr[OPT_HEADER];
	char hx[65];
	if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || memcmp(hdr, OPT_MAGIC, 8) ||
	    fread(ts->m, sizeof(float), nparams, f) != nparams || fread(ts->v, sizeof(float), nparams, f) != nparams ||
	    fgetc(f) != EOF)
		cli_die("%s: not an optimiser state of %zu parameters", ob, nparams);
	fclose(f);
	opt_hash_(hdr, ts, nparams, hx);
	if (memcmp(hx, hash, 64))
		cli_die("%s: its BLAKE2b does not match '%s': the trainer state is damaged", ob, js);
	sw_rec_free(rec);
	sw_reader_free(r);
	free(js);
	free(ob);
}

static void write_all_(int fd, const void *p, size_t n, const char *path)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			cli_die("cannot write '%s': %s", path, strerror(errno));
		c += w;
		n -= (size_t)w;
	}
}

static void write_file_(const char *path, const void *a, size_t na, const void *b, size_t nb, const void *c,
                        size_t nc)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		cli_die("cannot create '%s': %s", path, strerror(errno));
	write_all_(fd, a, na, path);
	write_all_(fd, b, nb, path);
	write_all_(fd, c, nc, path);
	if (fsync(fd) || close(fd))
		cli_die("cannot write '%s': %s", path, strerror(errno));
}

static void state_save_(const char *dir, size_t nparams, const trainer_state *ts, const settings *st)
{
	unsigned char hdr[OPT_HEADER] = { 0 };
	char hx[65], *ob = path_(dir, "optimizer.bin"), *js = path_(dir, "trainer_state.json");
	uint64_t np = nparams;
	memcpy(hdr, OPT_MAGIC, 8);
	memcpy(hdr + 8, &np, 8);
	memcpy(hdr + 16, &ts->updates, 8);
	opt_hash_(hdr, ts, nparams, hx);
	write_file_(ob, hdr, sizeof hdr, ts->m, nparams * sizeof(float), ts->v, nparams * sizeof(float));
	char j[1024];
	int n = snprintf(j, sizeof j,
	                 "{\"format\":\"sw-train 1\",\"version\":%llu,\"updates\":%llu,\"nparams\":%llu,"
	                 "\"rng\":[%llu,%llu,%llu,%llu],\"optimizer\":\"optimizer.bin\",\"optimizer_blake2b\":\"%s\","
	                 "\"algo\":\"%s\",\"lr\":%.9g}\n",
	                 (unsigned long long)ts->version, (unsigned long long)ts->updates, (unsigned long long)np,
	                 (unsigned long long)ts->rng[0], (unsigned long long)ts->rng[1],
	                 (unsigned long long)ts->rng[2], (unsigned long long)ts->rng[3], hx,
	                 sw_rl_algo_name(st->algo), (double)st->adam.lr);
	write_file_(js, j, (size_t)n, "", 0, "", 0);
	free(ob);
	free(js);
}

static int skip_copy_(const char *name)
{
	size_t n = strlen(name);
	return name[0] == '.' || !strcmp(name, "config.json") || !strcmp(name, "optimizer.bin") ||
	       !strcmp(name, "trainer_state.json") || !strcmp(name, "model.safetensors.index.json") ||
	       (n > 12 && !strcmp(name + n - 12, ".safetensors"));
}

/* The files of the model directory we do not write ourselves (tokenizer,
 * generation config, ...) go along into the new one. */
static void copy_extras_(const char *src, const char *dst)
{
	DIR *d = opendir(src);
	struct dirent *de;
	if (!d)
		cli_die("cannot read the directory '%s': %s", src, strerror(errno));
	while ((de = readdir(d))) {
		if (skip_copy_(de->d_name))
			continue;
		char *from = path_(src, de->d_name), *to = path_(dst, de->d_name);
		struct stat sb;
		if (stat(from, &sb))
			cli_die("cannot read '%s': %s", from, strerror(errno));
		if (S_ISREG(sb.st_mode)) {
			int in = open(from, O_RDONLY | O_CLOEXEC);
			int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			char buf[65536];
			ssize_t k;
			if (in < 0 || out < 0)
				cli_die("cannot copy '%s' to '%s': %s", from, to, strerror(errno));
			while ((k = read(in, buf, sizeof buf)) > 0)
				write_all_(out, buf, (size_t)k, to);
			if (k < 0 || fsync(out) || close(out))
				cli_die("cannot copy '%s' to '%s': %s", from, to, strerror(errno));
			close(in);
		}
		free(from);
		free(to);
	}
	closedir(d);
}

/* Remove a directory of plain files (ours: a model directory we replaced). */
static int remove_flat_dir_(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *p = path_(dir, de->d_name);
		if (unlink(p))
			rc = -1;
		free(p);
	}
	closedir(d);
	return rmdir(dir) || rc ? -1 : 0;
}

static void fsync_dir_(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd))
		cli_die("cannot sync the directory '%s': %s", dir, strerror(errno));
	close(fd);
}

static char *parent_(const char *path)
{
	char *p = strdup(path), *s;
	if (!p)
		cli_die("out of memory");
	while ((s = strrchr(p, '/')) && s[1] == 0 && s != p)
		*s = 0; /* trailing slashes */
	s = strrchr(p, '/');
	if (!s) {
		free(p);
		p = strdup(".");
	} else if (s == p) {
		s[1] = 0;
	} else {
		*s = 0;
	}
	if (!p)
		cli_die("out of memory");
	return p;
}

/*
 * --out may name a model directory that exists (it is replaced, whole, at
 * the end) or nothing yet.  Check now, before any work, that replacing it
 * loses nothing: it holds plain files only and is a model (config.json) or
 * empty.  Also clear the temporary directories of earlier runs that died.
 */
static void check_out_(const char *out)
{
	struct stat sb;
	if (stat(out, &sb)) {
		if (errno != ENOENT)
			cli_die("cannot use '%s': %s", out, strerror(errno));
	} else {
		if (!S_ISDIR(sb.st_mode))
			cli_die("cannot write the model to '%s': it is not a directory", out);
		DIR *d = opendir(out);
		struct dirent *de;
		int files = 0, config = 0;
		if (!d)
			cli_die("cannot read the directory '%s': %s", out, strerror(errno));
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char *p = path_(out, de->d_name);
			if (lstat(p, &sb) || !S_ISREG(sb.st_mode))
				cli_die("refusing to replace '%s': '%s' is not a plain file", out, de->d_name);
			free(p);
			files++;
			config |= !strcmp(de->d_name, "config.json");
		}
		closedir(d);
		if (files && !config)
			cli_die("refusing to replace '%s': it is not a model directory (no config.json)", out);
	}
	/* OUT.tmp-PID of a process that is gone */
	char *par = parent_(out);
	const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
	size_t bl = strlen(base);
	DIR *d = opendir(par);
	struct dirent *de;
	while (d && bl && (de = readdir(d))) {
		char *end;
		if (strncmp(de->d_name, base, bl) || strncmp(de->d_name + bl, ".tmp-", 5))
			continue;
		long pid = strtol(de->d_name + bl + 5, &end, 10);
		if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* not ours, or its writer is still at work */
		char *p = path_(par, de->d_name);
		remove_flat_dir_(p);
		free(p);
	}
	if (d)
		closedir(d);
	free(par);
}

/* Write the model, its state and the files beside it into OUT.tmp-PID, then
 * put that in OUT's place in one rename: OUT is always the old model or the
 * new one, whole. */
static void commit_(const settings *st, const sw_model *m, const trainer_state *ts)
{
	char tmp[4096], old[4096];
	sw_error err = { 0 };
	char *out = strdup(st->out);
	if (!out)
		cli_die("out of memory");
	size_t ol = strlen(out);
	while (ol > 1 && out[ol - 1] == '/')
		out[--ol] = 0;
	if (ol + 32 > sizeof tmp)
		cli_die("the path '%s' is too long", out);
	snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
	snprintf(old, sizeof old, "%s.old-%ld", out, (long)getpid());
	remove_flat_dir_(tmp);
	if (mkdir(tmp, 0755))
		cli_die("cannot create '%s': %s", tmp, strerror(errno));
	if (sw_model_save(m, tmp, SW_DT_F32, &err))
		cli_die("cannot save the model: %s", err.msg);
	copy_extras_(st->model, tmp);
	state_save_(tmp, m->nparams, ts, st);
	fsync_dir_(tmp);
	struct stat sb;
	if (!stat(out, &sb)) {
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
			remove_flat_dir_(tmp); /* the old model, now under the temporary name */
		} else if (errno == EINVAL || errno == ENOSYS) {
			/* a file system that cannot swap: two renames, the old kept until the new is in */
			if (rename(out, old) || rename(tmp, out))
				cli_die("cannot replace '%s': %s", out, strerror(errno));
			remove_flat_dir_(old);
		} else {
			cli_die("cannot replace '%s': %s", out, strerror(errno));
		}
	} else if (rename(tmp, out)) {
		cli_die("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
	}
	char *par = parent_(out);
	fsync_dir_(par);
	free(par);
	free(out);
}

/* ---- the state in shared stores --------------------------------------------------------------- */

/*
 * STORE.opt holds 16 floats of header (the bytes of: "SWADAMW1", the
 * parameter count, the updates made, the weights' version it belongs to, the
 * random generator's 4 words), then the first and second moments.  sw-run
 * checkpoints it as raw floats and restores it on resume.
 */
#define OPT_STORE_HEADER 16

static int is_store_(const char *s)
{
	return !strncmp(s, "shm:", 4) || !strncmp(s, "cuda:", 5);
}

/* Copy n floats out of a store under its seqlock. */
static void store_read_(sw_store *s, float *dst, size_t n, const char *spec)
{
	sw_error err = { 0 };
	for (int tries = 0;; tries++) {
		uint64_t seq;
		if (sw_store_read_begin(s, &seq, &err))
			cli_die("store '%s': %s", spec, err.msg);
		memcpy(dst, sw_store_arena(s), n * sizeof *dst);
		if (!sw_store_read_retry(s, seq))
			return;
		if (tries == 100)
			cli_die("store '%s': it keeps changing while it is read (another writer?)", spec);
	}
}

static sw_store *state_load_store_(const char *spec, size_t nparams, uint64_t version, trainer_state *ts,
                                   uint64_t seed)
{
	sw_error err = { 0 };
	memset(ts, 0, sizeof *ts);
	ts->version = version;
	ts->m = xcalloc_(nparams, sizeof(float));
	ts->v = xcalloc_(nparams, sizeof(float));
	sw_store *o = sw_store_open(spec, true, &err);
	if (!o) {
		if (err.code == SW_EIO && err.sys_errno == ENOENT) { /* the first step: made at the end */
			rng_seed_(ts->rng, seed);
			return NULL;
		}
		cli_die("cannot open the optimiser store '%s': %s", spec, err.msg);
	}
	size_t n = sw_store_nfloats(o);
	if (n != OPT_STORE_HEADER + 2 * nparams)
		cli_die("store '%s' holds %zu floats, not the optimiser state of %zu parameters", spec, n, nparams);
	float *all = xcalloc_(n, sizeof(float));
	store_read_(o, all, n, spec);
	unsigned char hdr[OPT_STORE_HEADER * sizeof(float)];
	uint64_t np, ver;
	memcpy(hdr, all, sizeof hdr);
	memcpy(&np, hdr + 8, 8);
	memcpy(&ts->updates, hdr + 16, 8);
	memcpy(&ver, hdr + 24, 8);
	memcpy(ts->rng, hdr + 32, 32);
	if (memcmp(hdr, OPT_MAGIC, 8) || np != nparams)
		cli_die("store '%s' does not hold an optimiser state of sw-train for %zu parameters", spec, nparams);
	if (ver != version)
		cli_die("store '%s' holds the optimiser state of version %llu, the weights are at version %llu", spec,
		        (unsigned long long)ver, (unsigned long long)version);
	memcpy(ts->m, all + OPT_STORE_HEADER, nparams * sizeof(float));
	memcpy(ts->v, all + OPT_STORE_HEADER + nparams, nparams * sizeof(float));
	free(all);
	return o;
}

/*
 * Both stores are opened for writing first (a second writer is refused
 * before anything changes), both filled, then the weights published as the
 * next version and the optimiser state with them.
 */
static void commit_store_(const settings *st, sw_store *w, sw_store *o, uint64_t start_version,
                          const sw_model *m, const trainer_state *ts)
{
	sw_error err = { 0 };
	size_t n = m->nparams;
	if (sw_store_version(w) != start_version)
		cli_die("store '%s' went from version %llu to %llu during the step (another trainer?); nothing written",
		        st->weights, (unsigned long long)start_version, (unsigned long long)sw_store_version(w));
	if (!o) {
		if (!(o = sw_store_create(st->opt_spec, NULL, OPT_STORE_HEADER + 2 * n, &err)))
			cli_die("cannot create the optimiser store '%s': %s", st->opt_spec, err.msg);
	} else if (sw_store_write_begin(o, &err)) {
		cli_die("store '%s': %s", st->opt_spec, err.msg);
	}
	if (sw_store_write_begin(w, &err))
		cli_die("store '%s': %s", st->weights, err.msg);
	unsigned char hdr[OPT_STORE_HEADER * sizeof(float)] = { 0 };
	uint64_t np = n;
	memcpy(hdr, OPT_MAGIC, 8);
	memcpy(hdr + 8, &np, 8);
	memcpy(hdr + 16, &ts->updates, 8);
	memcpy(hdr + 24, &ts->version, 8);
	memcpy(hdr + 32, ts->rng, 32);
	float *oa = sw_store_arena(o);
	memcpy(oa, hdr, sizeof hdr);
	memcpy(oa + OPT_STORE_HEADER, ts->m, n * sizeof(float));
	memcpy(oa + OPT_STORE_HEADER + n, ts->v, n * sizeof(float));
	memcpy(sw_store_arena(w), m->arena, n * sizeof(float));
	if (sw_store_publish(w, ts->version, &err))
		cli_die("store '%s': %s", st->weights, err.msg);
	if (sw_store_publish(o, ts->version, &err))
		cli_die("store '%s': %s", st->opt_spec, err.msg);
	sw_store_close(o);
}

/* The reference model: a directory, or a store read in place (it is frozen). */
static sw_model *load_ref_(const char *spec, sw_store **rs, uint64_t *seq)
{
	sw_error err = { 0 };
	sw_model *rm;
	*rs = NULL;
	if (!is_store_(spec)) {
		if (!(rm = sw_model_load(spec, &err)))
			cli_die("cannot load the reference model: %s", err.msg);
		return rm;
	}
	if (!(*rs = sw_store_open(spec, false, &err)))
		cli_die("cannot open the reference store '%s': %s", spec, err.msg);
	const sw_model_config *c = sw_store_config(*rs);
	if (!c || sw_store_nfloats(*rs) < sw_model_config_nparams(c))
		cli_die("store '%s' holds no model", spec);
	if (sw_store_read_begin(*rs, seq, &err))
		cli_die("store '%s': %s", spec, err.msg);
	if (!(rm = sw_model_view(c, sw_store_arena(*rs), &err)))
		cli_die("store '%s': %s", spec, err.msg);
	return rm;
}

/* ---- metrics ------------------------------------------------------------------------------- */

typedef struct jbuf {
	char *p;
	size_t len, cap;
} jbuf;

static void jput_(jbuf *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jput_(jbuf *j, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(j->p + j->len, j->cap - j->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			cli_die("cannot format the metrics");
		if ((size_t)n < j->cap - j->len) {
			j->len += (size_t)n;
			return;
		}
		j->cap = j->cap * 2 + (size_t)n + 256;
		j->p = xrealloc_(j->p, j->cap, 1);
	}
}

/* A JSON number: finite values only (JSON has no NaN); others become null. */
static void jnum_(jbuf *j, const char *key, double x)
{
	if (isfinite(x))
		jput_(j, ",\"%s\":%.9g", key, x);
	else
		jput_(j, ",\"%s\":null", key);
}

/* ---- the step ------------------------------------------------------------------------------- */

typedef struct totals {
	double loss, pg_loss, kl_loss, entropy_loss, grad_norm, grad_norm_max, lr;
	sw_rl_stats rl;
	uint64_t updates, clipped_updates, tokens_trained;
	double mis_sum, mis_max, mis_kl;
	uint64_t mis_tokens, offpolicy;
	uint64_t acc_right, acc_tokens;
} totals;

/*
 * Greedy token accuracy, as TRL's SFT trainer logs it: the share of loss
 * tokens that are the argmax of their row's logits (the first of equals,
 * as greedy decoding takes it).  Every token right means greedy decoding
 * from the prompt gives the response back.
 */
static void accuracy_(const settings *st, const sw_engine *e, const packed *pk, sample *const *v, size_t n,
                      int vocab, totals *tot)
{
	const float *lg = sw_engine_logits(e);
	if (!lg)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t r0 = (size_t)pk->cu[i] + first_row_(st, v[i]);
		for (size_t j = 0; j < v[i]->nloss; j++) {
			const float *row = lg + (r0 + j) * (size_t)vocab;
			int32_t target = pk->tokens[r0 + j + 1];
			int best = 0;
			for (int k = 1; k < vocab; k++)
				if (row[k] > row[best])
					best = k;
			tot->acc_right += best == target;
			tot->acc_tokens++;
		}
	}
}

static void add_stats_(totals *tot, const sw_rl_stats *rs, const sw_adamw_stats *ast)
{
	tot->updates++;
	tot->loss += rs->loss;
	tot->pg_loss += rs->pg_loss;
	tot->kl_loss += rs->kl_loss;
	tot->entropy_loss += rs->entropy;
	tot->grad_norm += ast->grad_norm;
	tot->grad_norm_max = ast->grad_norm > tot->grad_norm_max ? ast->grad_norm : tot->grad_norm_max;
	tot->clipped_updates += ast->clipped;
	tot->lr = ast->lr;
	tot->rl.tokens += rs->tokens;
	tot->rl.clip_low += rs->clip_low;
	tot->rl.clip_high += rs->clip_high;
	tot->rl.clip_dual += rs->clip_dual;
	tot->rl.tis_truncated += rs->tis_truncated;
	tot->rl.kl_sum += rs->kl_sum;
	tot->rl.entropy_sum += rs->entropy_sum;
	tot->rl.ratio_sum += rs->ratio_sum;
	tot->rl.tis_sum += rs->tis_sum;
	tot->rl.ppo_kl_sum += rs->ppo_kl_sum;
	tot->rl.ratio_max = rs->ratio_max > tot->rl.ratio_max ? rs->ratio_max : tot->rl.ratio_max;
}

int main(int argc, char **argv)
{
	const char *arg;
	int c, optind_, force = 0, fmt_json = 0, threads = 0, fmt_set = 0, total_set = 0, seed_set = 0;
	settings st = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	st.algo = SW_RL_GRPO;
	st.adam = sw_adamw_defaults(1e-6f);
	st.adam.max_grad_norm = 1.0f;
	st.loss.clip_low = 0.2;
	st.loss.clip_high = -1; /* the algorithm's default */
	st.loss.kl_kind = SW_RL_K3;
	st.epochs = 1;
	st.minibatches = 1;
	st.micro_tokens = 8192;
	st.rank = -1;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'm': st.model = arg; break;
		case 'o': st.out = arg; break;
		case OPT_WEIGHTS: st.weights = arg; break;
		case 'a':
			if (sw_rl_algo_parse(arg, &st.algo))
				cli_usage("unknown algorithm '%s' (sft, grpo, dr_grpo, dapo, rloo or reinforce++)", arg);
			break;
		case OPT_AGG:
			if (sw_rl_agg_parse(arg, &st.agg))
				cli_usage("unknown loss aggregation '%s' (token-mean, seq-mean-token-sum, "
				          "seq-mean-token-mean or seq-mean-token-sum-norm)", arg);
			st.agg_set = 1;
			break;
		case OPT_LR: st.adam.lr = (float)opt_num_("--lr", arg, 0, 1); break;
		case OPT_SCHEDULE:
			if (!strcmp(arg, "constant"))
				st.adam.schedule = SW_LR_CONSTANT;
			else if (!strcmp(arg, "cosine"))
				st.adam.schedule = SW_LR_COSINE;
			else if (!strcmp(arg, "linear"))
				st.adam.schedule = SW_LR_LINEAR;
			else
				cli_usage("unknown schedule '%s' (constant, cosine or linear)", arg);
			break;
		case OPT_WARMUP: st.adam.warmup_steps = (int64_t)cli_uint("--warmup", arg, 0, INT64_MAX); break;
		case OPT_TOTAL:
			st.adam.total_steps = (int64_t)cli_uint("--total-updates", arg, 1, INT64_MAX);
			total_set = 1;
			break;
		case OPT_MIN_LR: st.adam.min_lr_ratio = (float)opt_num_("--min-lr-ratio", arg, 0, 1); break;
		case OPT_WD: st.adam.weight_decay = (float)opt_num_("--weight-decay", arg, 0, 1); break;
		case OPT_GRAD_NORM: st.adam.max_grad_norm = (float)opt_num_("--max-grad-norm", arg, 0, 1e30); break;
		case OPT_CLIP_LOW: st.loss.clip_low = opt_num_("--clip-low", arg, 0, 0.999999); break;
		case OPT_CLIP_HIGH: st.loss.clip_high = opt_num_("--clip-high", arg, 0, 1e6); break;
		case OPT_CLIP_DUAL:
			st.loss.clip_dual = opt_num_("--clip-dual", arg, 0, 1e6);
			if (st.loss.clip_dual != 0 && st.loss.clip_dual <= 1)
				cli_usage("option '--clip-dual' wants a bound above 1 (or 0 for none), not '%s'", arg);
			break;
		case OPT_KL_COEF: st.loss.kl_coef = opt_num_("--kl-coef", arg, 0, 1e6); break;
		case OPT_KL_EST:
			if (sw_rl_kl_parse(arg, &st.loss.kl_kind))
				cli_usage("unknown KL estimator '%s' (k1, k2 or k3)", arg);
			st.kl_set = 1;
			break;
		case OPT_KL_REWARD: st.kl_in_reward = 1; break;
		case OPT_REF: st.ref = arg; break;
		case OPT_ENTROPY: st.loss.entropy_coef = opt_num_("--entropy-coef", arg, 0, 1e6); break;
		case OPT_TIS:
			st.loss.tis_cap = opt_num_("--tis-cap", arg, 0, 1e6);
			if (st.loss.tis_cap != 0 && st.loss.tis_cap < 1)
				cli_usage("option '--tis-cap' wants a cap of at least 1 (or 0 for none), not '%s'", arg);
			break;
		case OPT_EPOCHS: st.epochs = (long)cli_uint("--epochs", arg, 1, 1000); break;
		case OPT_MINIBATCHES: st.minibatches = (long)cli_uint("--minibatches", arg, 1, 1000000); break;
		case OPT_MICRO_TOKENS: st.micro_tokens = cli_uint("--micro-tokens", arg, 1, INT32_MAX); break;
		case OPT_RANK: st.rank = (long long)cli_uint("--rank", arg, 0, INT32_MAX); break;
		case OPT_TRAIN_ON:
			if (!strcmp(arg, "response"))
				st.sft_all = 0;
			else if (!strcmp(arg, "prompt+response"))
				st.sft_all = 1;
			else
				cli_usage("unknown --train-on '%s' (response or prompt+response)", arg);
			break;
		case OPT_MAX_LEN: st.max_len = (double)cli_uint("--max-len", arg, 1, INT32_MAX); break;
		case OPT_EPS: st.adv_eps = opt_num_("--adv-eps", arg, 1e-30, 1); break;
		case OPT_GAMMA: st.gamma = opt_num_("--gamma", arg, 1e-30, 1); break;
		case OPT_SEED:
			st.seed = cli_uint("--seed", arg, 0, UINT64_MAX);
			seed_set = 1;
			break;
		case 'j': threads = (int)cli_uint("-j", arg, 1, 4096); break;
		case OPT_METRICS: st.metrics = arg; break;
		case 'f':
			if (!strcmp(arg, "msgpack"))
				fmt_json = 0;
			else if (!strcmp(arg, "json"))
				fmt_json = 1;
			else
				cli_usage("unknown format '%s' (msgpack or json)", arg);
			fmt_set = 1;
			break;
		case 'z': wo.zstd_level = 3; break;
		case OPT_FORCE: force = 1; break;
		}
	}
	/* what sw-run hands every stage in the environment */
	const char *env;
	if (!st.model && !st.weights && (env = getenv("SW_WEIGHTS")) && *env)
		st.weights = env;
	if (!st.ref && st.loss.kl_coef > 0 && (env = getenv("SW_REF")) && *env)
		st.ref = env;
	if (!seed_set && (env = getenv("SW_SEED")) && *env) {
		char *end;
		errno = 0;
		st.seed = strtoull(env, &end, 10);
		if (*end || errno || env[0] == '-')
			cli_usage("SW_SEED='%s' is not a whole number", env);
	}
	if ((env = getenv("SW_LR_SCALE")) && *env) { /* sw-run's degrade level */
		char *end;
		errno = 0;
		double x = strtod(env, &end);
		if (*end || errno || !(x >= 0 && x <= 1e6))
			cli_usage("SW_LR_SCALE='%s' is not a number from 0 to 1e6", env);
		st.adam.lr *= (float)x;
	}
	/* settings that only make sense together */
	if (st.model && st.weights)
		cli_usage("--model and --weights are two places for the weights: give one");
	if (!st.model && !st.weights)
		cli_usage("no model: give --model DIR or --weights STORE");
	if (st.model && !st.out)
		cli_usage("no output: give --out DIR (it may be the same as --model)");
	if (st.weights && st.out)
		cli_usage("--out is for --model: a store is updated in place");
	if (st.weights && !is_store_(st.weights))
		cli_usage("--weights wants a store, shm:NAME, not '%s'", st.weights);
	char opt_buf[SW_STORE_NAME_MAX + 16];
	if (st.weights) {
		if ((env = getenv("SW_OPT")) && *env) {
			st.opt_spec = env;
		} else {
			snprintf(opt_buf, sizeof opt_buf, "%s.opt", st.weights);
			st.opt_spec = opt_buf;
		}
	}
	if (st.algo == SW_RL_SFT && st.kl_in_reward)
		cli_usage("sft has no reward to charge a KL penalty to");
	if (st.sft_all && st.algo != SW_RL_SFT)
		cli_usage("--train-on prompt+response is for --algo sft");
	if ((st.loss.kl_coef > 0) != (st.ref != NULL))
		cli_usage(st.ref ? "--ref is given but --kl-coef is 0" : "--kl-coef needs a reference model: give --ref DIR");
	if (st.kl_in_reward && !st.loss.kl_coef)
		cli_usage("--kl-in-reward needs --kl-coef");
	if (st.loss.tis_cap && st.algo == SW_RL_SFT)
		cli_usage("--tis-cap is for the policy-gradient algorithms");
	if (st.adam.schedule != SW_LR_CONSTANT && !total_set)
		cli_usage("a %s schedule needs --total-updates", st.adam.schedule == SW_LR_COSINE ? "cosine" : "linear");
	if (st.loss.clip_high < 0)
		st.loss.clip_high = st.algo == SW_RL_DAPO ? 0.28 : 0.2;
	if (!st.agg_set)
		st.agg = sw_rl_algo_default_agg(st.algo);
	if (st.kl_in_reward && !st.kl_set)
		st.loss.kl_kind = SW_RL_K1; /* verl's default penalty in the reward */
	st.loss.algo = st.algo;
	if (!fmt_set && !wo.zstd_level && isatty(1))
		fmt_json = 1; /* as sw-cat: a terminal gets JSON unless asked otherwise */
	wo.format = fmt_json ? SW_FMT_JSON : SW_FMT_MSGPACK;
	if (isatty(1) && (!fmt_json || wo.zstd_level) && !force)
		cli_usage("refusing to write binary to a terminal (use -f json or --force)");
	if (sodium_init() < 0)
		cli_die("cannot initialise libsodium");
	signal(SIGPIPE, SIG_IGN);
	sw_engine_threads(threads);

	char **files = argv + optind_;
	int nfiles = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}

	double t0 = now_(), t_read, t_old = 0, t_ref = 0, t_adv, t_train, t_write;
	tok_dir_ = st.model;
	sw_error err = { 0 };
	sw_model *model;
	sw_store *wst = NULL, *ost = NULL;
	uint64_t start_version = 0;
	trainer_state ts;
	if (st.weights) {
		/* a private copy is trained; the store changes only when the step is done */
		if (!(wst = sw_store_open(st.weights, true, &err)))
			cli_die("cannot open the store '%s': %s", st.weights, err.msg);
		const sw_model_config *sc = sw_store_config(wst);
		if (!sc || sw_store_nfloats(wst) < sw_model_config_nparams(sc))
			cli_die("store '%s' holds no model", st.weights);
		if (!(model = sw_model_new(sc, &err)))
			cli_die("store '%s': %s", st.weights, err.msg);
		start_version = sw_store_version(wst);
		store_read_(wst, model->arena, model->nparams, st.weights);
		ost = state_load_store_(st.opt_spec, model->nparams, start_version, &ts, st.seed);
	} else {
		check_out_(st.out);
		if (!(model = sw_model_load(st.model, &err)))
			cli_die("cannot load the model: %s", err.msg);
		state_load_(st.model, model->nparams, &ts, st.seed);
	}
	const sw_model_config *cfg = &model->cfg;

	batch b = { 0 };
	read_samples_(&st, cfg, files, nfiles, &b);
	number_groups_(&b);
	size_t ntok = 0, nvalid = 0, nmine = 0, nmasked = 0;
	int by_micro = 0;
	for (size_t i = 0; i < b.n; i++) {
		sample *s = &b.s[i];
		s->goff = ntok;
		ntok += s->valid ? s->nloss : 0;
		nvalid += s->valid;
		nmine += s->mine;
		nmasked += !s->valid;
		by_micro |= s->mine && s->micro >= 0;
	}
	if (!nvalid)
		cli_die("%s: every one of the %zu samples is masked out by its 'verifier_error'", b.s[0].file, b.n);
	if (!nmine)
		cli_die("%s: no sample of rank %lld among the %zu", b.s[0].file, st.rank, b.n);
	for (size_t i = 0; by_micro && i < b.n; i++)
		if (b.s[i].mine && b.s[i].micro < 0)
			die_rec_(&b.s[i], "field 'micro' is missing (other samples have it: they were balanced together)");
	t_read = now_();

	/* which samples need the old and reference log-probs before training */
	int need_all = st.kl_in_reward; /* the penalty enters every group's baseline */
	int rl = st.algo != SW_RL_SFT;
	/* With one update per step, the weights that give the training forward
	 * its log-probs are those that start the step: they are the old
	 * log-probs, and a separate pass would only recompute them (TRL skips
	 * it the same way). */
	int old_pass = rl && (st.epochs * st.minibatches > 1 || need_all);
	float *old = rl ? xcalloc_(ntok, sizeof(float)) : NULL;
	float *ref = st.ref ? xcalloc_(ntok, sizeof(float)) : NULL;
	float *kl_pen = st.kl_in_reward ? xcalloc_(ntok, sizeof(float)) : NULL;
	float *adv = rl ? xcalloc_(ntok, sizeof(float)) : NULL;
	sample **pre = xcalloc_(b.n, sizeof *pre);
	size_t npre = 0;
	for (size_t i = 0; i < b.n; i++)
		if (b.s[i].valid && b.s[i].nloss && (need_all || b.s[i].mine))
			pre[npre++] = &b.s[i];

	sw_engine *eng = sw_engine_new(model, &err);
	if (!eng)
		cli_die("cannot start the engine: %s", err.msg);
	packed pk = { 0 };
	micro_list ml;
	micro_split_(pre, npre, 0, st.micro_tokens, &ml);
	if (old_pass) {
		for (size_t k = 0; k < ml.n; k++) {
			forward_(eng, &pk, ml.mb[k], ml.len[k], 0, 0, "old log-probs");
			for (size_t i = 0; i < ml.len[k]; i++) {
				sample *s = ml.mb[k][i];
				memcpy(old + s->goff, pk.lp + pk.cu[i] + first_row_(&st, s), s->nloss * sizeof *old);
			}
		}
		t_old = now_() - t_read;
	}
	if (st.ref) {
		double t = now_();
		sw_store *rst;
		uint64_t rseq = 0;
		sw_model *rm = load_ref_(st.ref, &rst, &rseq);
		if (rm->cfg.vocab_size != cfg->vocab_size)
			cli_die("the reference model's vocabulary (%d) is not the model's (%d)", rm->cfg.vocab_size,
			        cfg->vocab_size);
		sw_engine *re = sw_engine_new(rm, &err);
		if (!re)
			cli_die("cannot start the engine: %s", err.msg);
		for (size_t k = 0; k < ml.n; k++) {
			forward_(re, &pk, ml.mb[k], ml.len[k], 0, 0, "reference log-probs");
			for (size_t i = 0; i < ml.len[k]; i++) {
				sample *s = ml.mb[k][i];
				memcpy(ref + s->goff, pk.lp + pk.cu[i] + first_row_(&st, s), s->nloss * sizeof *ref);
			}
		}
		sw_engine_free(re);
		sw_model_free(rm);
		if (rst && sw_store_read_retry(rst, rseq))
			cli_die("the reference store '%s' changed while it was read", st.ref);
		sw_store_close(rst);
		t_ref = now_() - t;
	}
	micro_free_(&ml);
	if (kl_pen)
		for (size_t i = 0; i < npre; i++)
			for (size_t t = pre[i]->goff; t < pre[i]->goff + pre[i]->nloss; t++)
				kl_pen[t] = (float)sw_rl_kl_value(st.loss.kl_kind, old[t], ref[t], NULL);

	/* advantages over the whole stream, every rank's samples included */
	double ta = now_();
	sw_rl_adv_stats as = { 0 };
	if (rl) {
		size_t *off = xcalloc_(b.n + 1, sizeof *off);
		double *rew = xcalloc_(b.n, sizeof *rew), *seq = xcalloc_(b.n, sizeof *seq);
		uint64_t *grp = xcalloc_(b.n, sizeof *grp);
		unsigned char *tr = xcalloc_(b.n, 1);
		for (size_t i = 0; i < b.n; i++) {
			off[i] = b.s[i].goff;
			rew[i] = b.s[i].valid ? b.s[i].reward : NAN;
			grp[i] = b.s[i].gid;
			tr[i] = (unsigned char)b.s[i].valid;
		}
		off[b.n] = ntok;
		sw_rl_batch rb = { b.n, off, rew, grp, tr, kl_pen, st.kl_in_reward ? st.loss.kl_coef : 0 };
		sw_rl_adv_opts ao = { st.adv_eps, st.gamma };
		if (sw_rl_advantages(st.algo, &rb, &ao, adv, seq, &as, &err)) {
			if (err.record)
				die_rec_(&b.s[err.record - 1], "%s", err.msg);
			cli_die("advantages: %s", err.msg);
		}
		for (size_t i = 0; i < b.n; i++)
			b.s[i].adv = seq[i];
		free(off), free(rew), free(seq), free(grp), free(tr);
	}
	t_adv = now_() - ta;

	/* the trained samples, and what the loss needs for them */
	sample **T = xcalloc_(b.n, sizeof *T);
	size_t nT = 0, maxresp = 0, tokens_total = 0;
	for (size_t i = 0; i < b.n; i++)
		if (b.s[i].mine && b.s[i].nloss) {
			T[nT++] = &b.s[i];
			maxresp = b.s[i].nloss > maxresp ? b.s[i].nloss : maxresp;
		}
	if (!nT)
		cli_die("%s: the samples to train on have no tokens to learn", b.s[0].file);
	double max_len = st.max_len ? st.max_len : (double)maxresp;
	if (st.agg == SW_RL_SEQ_MEAN_TOKEN_SUM_NORM && st.max_len && maxresp > st.max_len)
		cli_die("a response of %zu tokens is longer than --max-len %.0f", maxresp, st.max_len);

	sw_model *grad = sw_model_new(cfg, &err);
	if (!grad)
		cli_die("cannot allocate the gradients: %s", err.msg);
	size_t cap = 0;
	float *m_lp = NULL, *m_old = NULL, *m_beh = NULL, *m_ref = NULL, *m_ent = NULL, *m_adv = NULL;
	float *g_lp = NULL, *g_ent = NULL;
	double *m_w = NULL, *wmini = NULL;
	size_t *moff = xcalloc_(nT + 1, sizeof *moff), *wpos = xcalloc_(b.n, sizeof *wpos);
	totals tot = { 0 };
	double tt = now_();
	int use_tis = st.loss.tis_cap > 0;
	sw_rl_loss_opts lo = st.loss;
	if (st.kl_in_reward)
		lo.kl_coef = 0; /* charged in the reward already */
	for (long ep = 0; ep < st.epochs; ep++) {
		/* PPO's reuse: a fresh order every pass, when there is more than one minibatch */
		if (st.minibatches > 1)
			for (size_t i = nT; i > 1; i--) {
				size_t j = (size_t)(rng_next_(ts.rng) % i);
				sample *x = T[i - 1];
				T[i - 1] = T[j];
				T[j] = x;
			}
		size_t per = nT / (size_t)st.minibatches, extra = nT % (size_t)st.minibatches, at = 0;
		for (long mbi = 0; mbi < st.minibatches; mbi++) {
			size_t nm = per + ((size_t)mbi < extra);
			sample **M = T + at;
			at += nm;
			if (!nm)
				continue;
			/* the aggregation weights of this minibatch, which one update trains */
			moff[0] = 0;
			for (size_t i = 0; i < nm; i++)
				moff[i + 1] = moff[i] + M[i]->nloss;
			wmini = xrealloc_(wmini, moff[nm], sizeof *wmini);
			if (sw_rl_weights(st.agg, nm, moff, NULL, max_len, wmini, &err))
				cli_die("loss weights: %s", err.msg);
			for (size_t i = 0; i < nm; i++)
				wpos[M[i] - b.s] = moff[i];
			memset(grad->arena, 0, grad->nparams * sizeof(float));
			sw_rl_stats rs = { 0 };
			micro_list mm;
			micro_split_(M, nm, by_micro, st.micro_tokens, &mm);
			for (size_t k = 0; k < mm.n; k++) {
				sample **V = mm.mb[k];
				size_t nv = mm.len[k], nl = 0;
				for (size_t i = 0; i < nv; i++)
					nl += V[i]->nloss;
				if (nl > cap) {
					cap = nl;
					m_lp = xrealloc_(m_lp, cap, sizeof *m_lp);
					m_old = xrealloc_(m_old, cap, sizeof *m_old);
					m_beh = xrealloc_(m_beh, cap, sizeof *m_beh);
					m_ref = xrealloc_(m_ref, cap, sizeof *m_ref);
					m_ent = xrealloc_(m_ent, cap, sizeof *m_ent);
					m_adv = xrealloc_(m_adv, cap, sizeof *m_adv);
					g_lp = xrealloc_(g_lp, cap, sizeof *g_lp);
					g_ent = xrealloc_(g_ent, cap, sizeof *g_ent);
					m_w = xrealloc_(m_w, cap, sizeof *m_w);
				}
				forward_(eng, &pk, V, nv, 1, 1, "training forward");
				if (ep == 0)
					accuracy_(&st, eng, &pk, V, nv, cfg->vocab_size, &tot);
				gather_(&st, &pk, pk.lp, V, nv, m_lp);
				gather_(&st, &pk, pk.ent, V, nv, m_ent);
				size_t q = 0;
				for (size_t i = 0; i < nv; i++) {
					sample *s = V[i];
					size_t n = s->nloss;
					memcpy(m_w + q, wmini + wpos[s - b.s], n * sizeof *m_w);
					if (rl) {
						if (!old_pass) /* the first forward of the step: these are the old log-probs */
							memcpy(old + s->goff, m_lp + q, n * sizeof *old);
						memcpy(m_old + q, old + s->goff, n * sizeof *m_old);
						memcpy(m_adv + q, adv + s->goff, n * sizeof *m_adv);
						/* the rollout's log-probs: compared once, and the truncated IS
						 * weights of the samples of older weights */
						if (s->behav && ep == 0) {
							double mean, mx, kl;
							sw_rl_mismatch(s->behav, old + s->goff, n, &mean, &mx, &kl, NULL);
							tot.mis_sum += mean * (double)n;
							tot.mis_kl += kl * (double)n;
							tot.mis_max = mx > tot.mis_max ? mx : tot.mis_max;
							tot.mis_tokens += n;
						}
						int off_policy = s->behav && s->version >= 0 && (uint64_t)s->version < ts.version;
						if (ep == 0 && off_policy)
							tot.offpolicy++;
						memcpy(m_beh + q, off_policy && use_tis ? s->behav : old + s->goff,
						       n * sizeof *m_beh);
					}
					if (ref)
						memcpy(m_ref + q, ref + s->goff, n * sizeof *m_ref);
					q += n;
				}
				sw_rl_tokens tk = { nl, m_lp, m_old, m_beh, m_ref, m_ent, m_adv, m_w };
				if (sw_rl_loss(&lo, &tk, g_lp, g_ent, &rs, &err)) {
					/* map the token back to its sample */
					size_t t = err.offset, i = 0;
					while (i + 1 < nv && t >= V[i]->nloss)
						t -= V[i++]->nloss;
					die_rec_(V[i], "token %zu: %s", t + 1, err.msg);
				}
				memset(pk.dlp, 0, pk.rows * sizeof *pk.dlp);
				memset(pk.dent, 0, pk.rows * sizeof *pk.dent);
				q = 0;
				for (size_t i = 0; i < nv; i++) {
					size_t r0 = (size_t)pk.cu[i] + first_row_(&st, V[i]);
					memcpy(pk.dlp + r0, g_lp + q, V[i]->nloss * sizeof *g_lp);
					memcpy(pk.dent + r0, g_ent + q, V[i]->nloss * sizeof *g_ent);
					q += V[i]->nloss;
				}
				if (sw_engine_backward(eng, pk.dlp, lo.entropy_coef > 0 ? pk.dent : NULL, grad, &err))
					cli_die("backward: %s", err.msg);
				tot.tokens_trained += pk.rows;
			}
			micro_free_(&mm);
			sw_adamw_stats ast = { 0 };
			if (sw_adamw_step(&st.adam, model, grad, ts.m, ts.v, (int64_t)ts.updates, &ast, &err))
				cli_die("update %llu: %s (the model is left as it was)", (unsigned long long)ts.updates + 1,
				        err.msg);
			ts.updates++;
			add_stats_(&tot, &rs, &ast);
			if (progress_())
				fprintf(stderr, "%s: update %llu: loss %.6g, grad norm %.4g, lr %.3g\n", prog.name,
				        (unsigned long long)ts.updates, rs.loss, ast.grad_norm, (double)ast.lr);
		}
	}
	t_train = now_() - tt;
	for (size_t i = 0; i < nT; i++)
		tokens_total += T[i]->np + T[i]->nr;

	/* the new model, whole, in --out's place; then the metrics and the samples */
	double tw = now_();
	ts.version++;
	if (wst)
		commit_store_(&st, wst, ost, start_version, model, &ts);
	else
		commit_(&st, model, &ts);
	t_write = now_() - tw;

	double total_s = now_() - t0, nt = tot.rl.tokens ? (double)tot.rl.tokens : 1, nu = (double)tot.updates;
	size_t rmin = SIZE_MAX, rmax = 0;
	double rsum = 0;
	for (size_t i = 0; i < nT; i++) {
		rsum += (double)T[i]->nr;
		rmin = T[i]->nr < rmin ? T[i]->nr : rmin;
		rmax = T[i]->nr > rmax ? T[i]->nr : rmax;
	}
	if (st.metrics) {
		jbuf j = { 0 };
		jput_(&j, "{\"step\":%llu,\"algo\":\"%s\",\"loss_agg\":\"%s\"", (unsigned long long)ts.version,
		      sw_rl_algo_name(st.algo), sw_rl_agg_name(st.agg));
		jput_(&j, ",\"samples\":%zu,\"trained\":%zu,\"masked\":%zu,\"updates\":%llu,\"tokens\":%llu",
		      b.n, nT, nmasked, (unsigned long long)tot.updates, (unsigned long long)tot.rl.tokens);
		jnum_(&j, "loss", tot.loss / nu);
		jnum_(&j, "pg_loss", tot.pg_loss / nu);
		if (st.loss.kl_coef && !st.kl_in_reward)
			jnum_(&j, "kl_loss", tot.kl_loss / nu);
		jnum_(&j, "entropy_loss", tot.entropy_loss / nu);
		if (st.ref && !st.kl_in_reward)
			jnum_(&j, "kl", tot.rl.kl_sum / nt);
		if (st.kl_in_reward) {
			double s = 0;
			size_t n = 0;
			for (size_t i = 0; i < b.n; i++)
				if (b.s[i].mine)
					for (size_t t = b.s[i].goff; t < b.s[i].goff + b.s[i].nloss; t++, n++)
						s += kl_pen[t];
			jnum_(&j, "kl", n ? s / (double)n : 0);
		}
		jnum_(&j, "entropy", tot.rl.entropy_sum / nt);
		jnum_(&j, "token_accuracy", tot.acc_tokens ? (double)tot.acc_right / (double)tot.acc_tokens : 0);
		if (rl) {
			jnum_(&j, "clip_frac_low", (double)tot.rl.clip_low / nt);
			jnum_(&j, "clip_frac_high", (double)tot.rl.clip_high / nt);
			jnum_(&j, "clip_frac", (double)(tot.rl.clip_low + tot.rl.clip_high) / nt);
			if (st.loss.clip_dual)
				jnum_(&j, "clip_frac_dual", (double)tot.rl.clip_dual / nt);
			jnum_(&j, "ratio_mean", tot.rl.ratio_sum / nt);
			jnum_(&j, "ratio_max", tot.rl.ratio_max);
			jnum_(&j, "ppo_kl", tot.rl.ppo_kl_sum / nt);
			if (use_tis) {
				jput_(&j, ",\"off_policy_samples\":%llu", (unsigned long long)tot.offpolicy);
				jnum_(&j, "tis_mean", tot.rl.tis_sum / nt);
				jnum_(&j, "tis_truncated_frac", (double)tot.rl.tis_truncated / nt);
			}
		}
		jnum_(&j, "grad_norm", tot.grad_norm / nu);
		jnum_(&j, "grad_norm_max", tot.grad_norm_max);
		jput_(&j, ",\"grad_clipped\":%llu", (unsigned long long)tot.clipped_updates);
		jnum_(&j, "lr", tot.lr);
		if (rl) {
			jnum_(&j, "reward_mean", as.reward_mean);
			jnum_(&j, "reward_std", as.reward_std);
			jnum_(&j, "reward_min", as.reward_min);
			jnum_(&j, "reward_max", as.reward_max);
			jnum_(&j, "adv_mean", as.adv_mean);
			jnum_(&j, "adv_std", as.adv_std);
			jnum_(&j, "adv_min", as.adv_min);
			jnum_(&j, "adv_max", as.adv_max);
			if (st.algo != SW_RL_REINFORCE_PP)
				jput_(&j, ",\"groups\":%zu,\"zero_std_groups\":%zu,\"singleton_groups\":%zu", as.groups,
				      as.zero_std_groups, as.singleton_groups);
		}
		jnum_(&j, "response_len_mean", rsum / (double)nT);
		jput_(&j, ",\"response_len_min\":%zu,\"response_len_max\":%zu", rmin, rmax);
		if (tot.mis_tokens) {
			jnum_(&j, "logprob_mismatch_mean", tot.mis_sum / (double)tot.mis_tokens);
			jnum_(&j, "logprob_mismatch_max", tot.mis_max);
			jnum_(&j, "logprob_mismatch_kl", tot.mis_kl / (double)tot.mis_tokens);
		}
		jnum_(&j, "tokens_per_s", t_train > 0 ? (double)tot.tokens_trained / t_train : 0);
		jput_(&j, ",\"time_s\":{\"read\":%.6f,\"old_logprobs\":%.6f,\"ref_logprobs\":%.6f,\"advantages\":%.6f,"
		          "\"train\":%.6f,\"write\":%.6f,\"total\":%.6f}}\n",
		      t_read - t0, t_old, t_ref, t_adv, t_train, t_write, total_s);
		FILE *mf = fopen(st.metrics, "a");
		if (!mf || fwrite(j.p, 1, j.len, mf) != j.len || fclose(mf))
			cli_die("cannot append to '%s': %s", st.metrics, strerror(errno));
		free(j.p);
	}

	/* the samples pass through, each with the advantage it was trained with */
	sw_writer *w = sw_writer_open("-", &wo, &err);
	if (!w)
		cli_die("cannot write the samples: %s", err.msg);
	for (size_t i = 0; i < b.n; i++) {
		if (rl && b.s[i].valid && sw_rec_set_f32(b.s[i].rec, "advantage", (float)b.s[i].adv))
			cli_die("out of memory");
		if (sw_writer_put(w, b.s[i].rec))
			cli_die_stream("stdout", sw_writer_error(w));
	}
	if (sw_writer_close(w))
		cli_die_stream("stdout", sw_writer_error(w));
	sw_writer_free(w);
	if (progress_())
		fprintf(stderr, "%s: step %llu: %zu samples (%zu masked), %zu tokens, %llu updates, loss %.6g, %.2f s\n",
		        prog.name, (unsigned long long)ts.version, b.n, nmasked, tokens_total,
		        (unsigned long long)tot.updates, tot.loss / nu, total_s);

	free(moff), free(wpos), free(wmini), free(T), free(pre);
	free(m_lp), free(m_old), free(m_beh), free(m_ref), free(m_ent), free(m_adv), free(g_lp), free(g_ent), free(m_w);
	free(old), free(ref), free(kl_pen), free(adv);
	free(pk.tokens), free(pk.cu), free(pk.lp), free(pk.ent), free(pk.dlp), free(pk.dent);
	for (size_t i = 0; i < b.n; i++) {
		sw_rec_free(b.s[i].rec);
		free(b.s[i].tok), free(b.s[i].behav), free(b.s[i].group);
	}
	free(b.s);
	free(ts.m), free(ts.v);
	sw_engine_free(eng);
	sw_model_free(grad);
	sw_model_free(model);
	sw_store_close(wst);
	sw_tokenizer_free(tok_);
	cli_exit(0);
}
