/*
 * sw-rollout - generate G responses per prompt with the policy, with the
 * per-token log-probabilities of the sampling policy; or, with --score,
 * compute those log-probabilities for responses already in the samples.
 *
 * Generation is continuous batching over one sw_decoder: up to --batch
 * responses decode together, a finished one leaves the cache at once and
 * its slot goes to the next response.  A prompt is prefilled once, as a
 * "root" sequence that is never extended, and each of its G responses is a
 * fork of the root (the prompt's KV pages are shared).  Every draw comes
 * from a counter-based generator keyed by (seed, the prompt's place in the
 * input, k, step), so the output does not depend on the batch size or on
 * the order in which responses finish.  Samples are written as they
 * finish.
 *
 * KV cache room is reserved before a sequence is started (a root: its
 * prompt; a response: its longest possible length), so a step never finds
 * the cache full; one response's worth is always kept free for the roots
 * already admitted, so the roots cannot starve their own responses.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

enum {
	OPT_FORCE = 0x100, OPT_WEIGHTS, OPT_TEMP, OPT_TOPK, OPT_TOPP, OPT_MINP, OPT_MAXNEW, OPT_STOP,
	OPT_SEED, OPT_BATCH, OPT_STATIC, OPT_SKIP, OPT_SCORE, OPT_AS, OPT_THREADS
};

static const cli_opt opts[] = {
	{ 'm', 'm', "model", "dir", "dir", "the model directory (config.json, weights, tokenizer)" },
	{ OPT_WEIGHTS, 0, "weights", "store", NULL,
	  "take the weights from a shared store, shm:NAME (default $SW_WEIGHTS)" },
	{ 'n', 'n', "samples", "num", NULL, "responses per prompt, G (default 1)" },
	{ OPT_TEMP, 0, "temperature", "t", NULL, "sampling temperature; 0 is greedy (default 1)" },
	{ OPT_TOPK, 0, "top-k", "k", NULL, "sample from the k most probable tokens (default 0: all)" },
	{ OPT_TOPP, 0, "top-p", "p", NULL, "sample from the smallest set of probability >= p (default 1)" },
	{ OPT_MINP, 0, "min-p", "p", NULL, "drop tokens less probable than p times the most probable (default 0)" },
	{ OPT_MAXNEW, 0, "max-new-tokens", "num", NULL, "longest response, in tokens (default 256)" },
	{ OPT_STOP, 0, "stop", "string", NULL, "end a response where string appears (repeatable)" },
	{ OPT_SEED, 0, "seed", "num", NULL, "seed of the sampling (default 0)" },
	{ OPT_BATCH, 0, "batch", "num", NULL, "responses decoded at once (default 64)" },
	{ OPT_STATIC, 0, "static", NULL, NULL,
	  "static batching as a padded batch: the batch waits for its longest response" },
	{ OPT_SKIP, 0, "skip-invalid", NULL, NULL, "skip invalid prompts, count and report them" },
	{ OPT_SCORE, 0, "score", NULL, NULL, "generate nothing: compute the log-probs of the responses given" },
	{ OPT_AS, 0, "as", "field", NULL, "with --score, the field to write (default logprobs)" },
	{ OPT_THREADS, 0, "threads", "num", NULL, "compute threads (default 0: every core)" },
	{ 'f', 'f', "format", "format", "msgpack|json",
	  "write msgpack or json (JSON Lines); default msgpack, json on a terminal" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the output with zstd" },
	{ 'o', 'o', "output", "file", "file", "write to file instead of standard output" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-rollout", "[file ...]", "file",
	"Generate responses to prompts with per-token log-probabilities, or score given responses.",
	opts
};

/* ---- settings and the model ---------------------------------------------------- */

static struct {
	const char *model_dir, *store_spec, *as;
	int G, batch, max_new, threads;
	bool stat, skip, score;
	uint64_t seed;
	sw_sampling par;
	char **stops;
	size_t nstops;
} o_ = { .G = 1, .batch = 64, .max_new = 256, .as = "logprobs" };

static sw_model *m_;
static sw_store *store_;
static sw_tokenizer *tok_;
static int V_, C_;                    /* vocabulary, context */
static int32_t stop_ids_[64];
static int nstop_ids_;
static sw_rec *out_;                  /* the record being written */
static uint64_t skipped_, written_, gen_tokens_;

static void *xmalloc_(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

static void *xrealloc_(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

static char *xstrdup_(const char *s, size_t n)
{
	char *d = xmalloc_(n + 1);
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

static void add_stop_id_(int id)
{
	if (id < 0 || id >= V_)
		return;
	for (int i = 0; i < nstop_ids_; i++)
		if (stop_ids_[i] == id)
			return;
	if (nstop_ids_ < (int)(sizeof stop_ids_ / sizeof *stop_ids_))
		stop_ids_[nstop_ids_++] = id;
}

static bool is_stop_id_(int32_t t)
{
	for (int i = 0; i < nstop_ids_; i++)
		if (stop_ids_[i] == t)
			return true;
	return false;
}

/* eos_token_id of generation_config.json (an id or a list), where there is one. */
static void generation_config_eos_(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/generation_config.json", dir);
	if (access(path, F_OK))
		return;
	sw_error err = { 0 };
	sw_reader *r = sw_reader_open(path, &err);
	sw_rec *rec = sw_rec_new();
	if (!r || !rec)
		cli_die("cannot read '%s': %s", path, r ? "out of memory" : strerror(err.sys_errno));
	if (sw_reader_next(r, rec) != 1)
		cli_die_stream(path, sw_reader_error(r));
	sw_val v;
	if (sw_rec_get(rec, "eos_token_id", &v) == 0) {
		if (v.type == SW_T_UINT) {
			add_stop_id_((int)(v.v.u < (uint64_t)V_ ? v.v.u : (uint64_t)V_));
		} else if (v.type == SW_T_ARRAY) {
			sw_iter it;
			sw_val e;
			sw_iter_init(&it, &v);
			while (sw_iter_next(&it, &e) == 1)
				if (e.type == SW_T_UINT && e.v.u < (uint64_t)V_)
					add_stop_id_((int)e.v.u);
		} else if (v.type != SW_T_NIL) {
			cli_die("%s: field 'eos_token_id' is a %s, not a token id or a list of them", path,
			        sw_type_name(v.type));
		}
	}
	sw_rec_free(rec);
	sw_reader_free(r);
}

static bool same_shape_(const sw_model_config *a, const sw_model_config *b)
{
	return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
	       a->intermediate_size == b->intermediate_size && a->num_hidden_layers == b->num_hidden_layers &&
	       a->num_attention_heads == b->num_attention_heads &&
	       a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim;
}

static void load_model_(void)
{
	sw_error err = { 0 };
	if (o_.store_spec) {
		if (!(store_ = sw_store_open(o_.store_spec, false, &err)))
			cli_die("cannot open store '%s': %s", o_.store_spec, err.msg);
		const sw_model_config *sc = sw_store_config(store_);
		if (!sc)
			cli_die("store '%s' holds no model (no configuration)", o_.store_spec);
		if (sw_store_nfloats(store_) < sw_model_config_nparams(sc))
			cli_die("store '%s' is smaller than its model", o_.store_spec);
		if (o_.model_dir) {
			char path[4096];
			sw_model_config dc;
			snprintf(path, sizeof path, "%s/config.json", o_.model_dir);
			if (sw_model_config_load(path, &dc, &err))
				cli_die("%s", err.msg);
			if (!same_shape_(&dc, sc))
				cli_die("store '%s' holds a model of another shape than '%s'", o_.store_spec, path);
		}
		if (!(m_ = sw_model_view(sc, sw_store_arena(store_), &err)))
			cli_die("store '%s': %s", o_.store_spec, err.msg);
	} else {
		if (!(m_ = sw_model_load(o_.model_dir, &err)))
			cli_die("%s", err.msg);
	}
	if (o_.model_dir) {
		if (!(tok_ = sw_tokenizer_load(o_.model_dir, &err)))
			cli_die("%s: %s", o_.model_dir, err.msg);
	} else if (!(tok_ = sw_tokenizer_byte())) {
		cli_die("out of memory");
	}
	V_ = m_->cfg.vocab_size;
	C_ = m_->cfg.max_position_embeddings;
	if (sw_tokenizer_vocab(tok_) > (size_t)V_)
		cli_die("the tokenizer has %zu tokens, more than the model's vocabulary of %d",
		        sw_tokenizer_vocab(tok_), V_);
	for (int i = 0; i < m_->cfg.n_eos; i++)
		add_stop_id_(m_->cfg.eos_token_ids[i]);
	uint32_t ids[16];
	size_t n = sw_tokenizer_stop_ids(tok_, ids, 16);
	for (size_t i = 0; i < n && i < 16; i++)
		add_stop_id_((int)ids[i]);
	if (o_.model_dir)
		generation_config_eos_(o_.model_dir);
}

/* ---- input ------------------------------------------------------------------------ */

/*
 * Input is read by a thread of its own into a queue of record copies, so
 * that decoding never waits on a pipe that has nothing in it yet: the main
 * loop takes a prompt only when one is there, and blocks (after flushing
 * its output) only when it has nothing else to do.
 */
enum { QCAP = 256 };

typedef struct qitem_ {
	uint8_t *bytes;
	size_t n;
	const char *name;
	uint64_t recno;            /* in its input, from 1 */
} qitem_;

static char **files_;
static int nfiles_;
static size_t max_record_;
static pthread_mutex_t qm_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qput_ = PTHREAD_COND_INITIALIZER, qtake_ = PTHREAD_COND_INITIALIZER;
static qitem_ q_[QCAP];
static int qhead_, qcount_;
static bool qdone_;
static char qerr_[640];              /* why the input ended early, or empty */
static uint64_t bytes_in_;
static sw_rec *in_;
static qitem_ cur_;                  /* the record in in_ */
static uint64_t nread_;              /* records taken over all inputs */

static void *reader_main_(void *arg)
{
	(void)arg;
	sw_error err = { 0 };
	sw_rec *rec = sw_rec_new();
	char buf[512];
	if (!rec)
		snprintf(qerr_, sizeof qerr_, "out of memory");
	for (int i = 0; rec && i < nfiles_ && !qerr_[0]; i++) {
		const char *name = strcmp(files_[i], "-") ? files_[i] : "stdin";
		sw_reader *r = sw_reader_open(files_[i], &err);
		if (!r) {
			snprintf(qerr_, sizeof qerr_, "cannot open '%s': %s", files_[i], strerror(err.sys_errno));
			break;
		}
		sw_reader_set_max_record(r, max_record_);
		int rc;
		while ((rc = sw_reader_next(r, rec)) == 1) {
			const uint8_t *p;
			size_t n;
			uint8_t *copy = NULL;
			if (sw_rec_bytes(rec, &p, &n) == 0 && (copy = malloc(n ? n : 1)))
				memcpy(copy, p, n);
			pthread_mutex_lock(&qm_);
			while (qcount_ == QCAP)
				pthread_cond_wait(&qput_, &qm_);
			if (!copy) {
				snprintf(qerr_, sizeof qerr_, "out of memory");
				pthread_mutex_unlock(&qm_);
				break;
			}
			q_[(qhead_ + qcount_++) % QCAP] = (qitem_){ copy, n, name, sw_reader_records(r) };
			bytes_in_ += n;
			pthread_cond_signal(&qtake_);
			pthread_mutex_unlock(&qm_);
		}
		if (rc < 0) {
			pthread_mutex_lock(&qm_);
			snprintf(qerr_, sizeof qerr_, "%s: %s", name, sw_error_str(sw_reader_error(r), buf, sizeof buf));
			pthread_mutex_unlock(&qm_);
		}
		sw_reader_free(r);
	}
	sw_rec_free(rec);
	pthread_mutex_lock(&qm_);
	qdone_ = true;
	pthread_cond_signal(&qtake_);
	pthread_mutex_unlock(&qm_);
	return NULL;
}

static bool fatal_pending_;
static char fatal_[640];
static sw_writer *w_;
static const char *out_name_ = "stdout";

/*
 * The next record into in_: 1; 0 at the end of the input (or where it
 * could not be read: then fatal_pending_ says why); -1 when none is there
 * yet and block is false.
 */
static int next_record_(bool block)
{
	free(cur_.bytes);
	cur_.bytes = NULL;
	pthread_mutex_lock(&qm_);
	if (!qcount_ && !qdone_) {
		if (!block) {
			pthread_mutex_unlock(&qm_);
			return -1;
		}
		/* about to wait: let what we have flow on downstream */
		if (w_ && sw_writer_flush(w_))
			cli_die_stream(out_name_, sw_writer_error(w_));
		while (!qcount_ && !qdone_)
			pthread_cond_wait(&qtake_, &qm_);
	}
	if (!qcount_) {
		if (qerr_[0] && !fatal_pending_) {
			fatal_pending_ = true;
			memcpy(fatal_, qerr_, sizeof fatal_);
		}
		pthread_mutex_unlock(&qm_);
		return 0;
	}
	cur_ = q_[qhead_];
	qhead_ = (qhead_ + 1) % QCAP;
	qcount_--;
	pthread_cond_signal(&qput_);
	pthread_mutex_unlock(&qm_);
	nread_++;
	if (sw_rec_load(in_, cur_.bytes, cur_.n))
		cli_die("%s: record %llu: not a map", cur_.name, (unsigned long long)cur_.recno);
	return 1;
}

/* A message about the current record, "FILE: record N: ..." */
static char bad_[512];
static void bad_record_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad_record_(const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(bad_, sizeof bad_, "%s: record %llu: %s", cur_.name, (unsigned long long)cur_.recno, msg);
}

/* Copy the current record's bytes. */
static uint8_t *own_bytes_(size_t *n)
{
	const uint8_t *p;
	if (sw_rec_bytes(in_, &p, n))
		cli_die("out of memory");
	uint8_t *b = xmalloc_(*n);
	memcpy(b, p, *n);
	return b;
}

/* Tokens of text (special tokens recognised, as the chat template renders them). */
static int encode_(const char *s, size_t n, int32_t **out, int *nout, const char *what)
{
	uint32_t *ids;
	size_t cnt;
	sw_error err = { 0 };
	if (sw_tokenizer_encode(tok_, s, n, 1, &ids, &cnt, &err)) {
		bad_record_("cannot tokenise %s: %s", what, err.msg);
		return -1;
	}
	if (cnt > (size_t)INT32_MAX / 2) {
		free(ids);
		bad_record_("%s has too many tokens", what);
		return -1;
	}
	*out = xrealloc_(*out, sizeof **out * (cnt ? cnt : 1));
	for (size_t i = 0; i < cnt; i++)
		(*out)[i] = (int32_t)ids[i];
	*nout = (int)cnt;
	free(ids);
	return 0;
}

/* An array of token ids from field key; -1 with bad_ set when it is no such array. */
static int token_array_(const char *key, int32_t **out, int *nout)
{
	sw_val v, e;
	sw_rec_get(in_, key, &v);
	if (v.type != SW_T_ARRAY) {
		bad_record_("field '%s' is a %s, not an array of token ids", key, sw_type_name(v.type));
		return -1;
	}
	sw_iter it;
	sw_iter_init(&it, &v);
	*out = xrealloc_(*out, sizeof **out * (v.v.count ? v.v.count : 1));
	int n = 0, rc;
	while ((rc = sw_iter_next(&it, &e)) == 1) {
		if (e.type == SW_T_UINT && e.v.u < (uint64_t)V_) {
			(*out)[n++] = (int32_t)e.v.u;
		} else if (e.type == SW_T_UINT || e.type == SW_T_INT) {
			bad_record_("field '%s': token %d is %s%llu, outside the model's vocabulary of %d", key, n,
			            e.type == SW_T_INT ? "-" : "",
			            e.type == SW_T_INT ? (unsigned long long)-(e.v.i + 1) + 1 : (unsigned long long)e.v.u,
			            V_);
			return -1;
		} else {
			double x = 0;
			if ((e.type == SW_T_F32 || e.type == SW_T_F64) && !sw_val_number(&e, &x))
				bad_record_("field '%s': token %d is the number %g, not a token id", key, n, x);
			else
				bad_record_("field '%s': token %d is a %s, not a token id", key, n, sw_type_name(e.type));
			return -1;
		}
	}
	if (rc < 0) {
		bad_record_("field '%s' is corrupt", key);
		return -1;
	}
	*nout = n;
	return 0;
}

/* The prompt's tokens: prompt_tokens, else messages rendered, else prompt. */
static int prompt_of_(int32_t **out, int *nout)
{
	sw_val v;
	if (sw_rec_get(in_, "prompt_tokens", &v) == 0) {
		if (token_array_("prompt_tokens", out, nout))
			return -1;
	} else if (sw_rec_get(in_, "messages", &v) == 0) {
		if (v.type != SW_T_ARRAY) {
			bad_record_("field 'messages' is a %s, not an array of {role, content} maps", sw_type_name(v.type));
			return -1;
		}
		sw_chat_msg *msgs = xmalloc_(sizeof *msgs * (v.v.count ? v.v.count : 1));
		char **strs = xmalloc_(sizeof *strs * 2 * (v.v.count ? v.v.count : 1));
		size_t n = 0;
		sw_iter it;
		sw_val e;
		sw_iter_init(&it, &v);
		int rc = 0, ok = 1;
		while (ok && (rc = sw_iter_next(&it, &e)) == 1) {
			if (e.type != SW_T_MAP) {
				bad_record_("field 'messages': message %zu is a %s, not a map", n, sw_type_name(e.type));
				ok = 0;
				break;
			}
			const char *role = NULL, *content = NULL;
			uint32_t rl = 0, cl = 0;
			sw_iter mi;
			sw_val k, x;
			sw_iter_init(&mi, &e);
			while (sw_iter_next(&mi, &k) == 1 && sw_iter_next(&mi, &x) == 1) {
				if (k.type != SW_T_STR)
					continue;
				bool is_role = k.v.str.len == 4 && !memcmp(k.v.str.ptr, "role", 4);
				bool is_content = k.v.str.len == 7 && !memcmp(k.v.str.ptr, "content", 7);
				if ((is_role || is_content) && x.type != SW_T_STR) {
					bad_record_("field 'messages': message %zu: '%s' is a %s, not a string", n,
					            is_role ? "role" : "content", sw_type_name(x.type));
					ok = 0;
					break;
				}
				if (is_role)
					role = x.v.str.ptr, rl = x.v.str.len;
				else if (is_content)
					content = x.v.str.ptr, cl = x.v.str.len;
			}
			if (ok && (!role || !content)) {
				bad_record_("field 'messages': message %zu has no '%s'", n, role ? "content" : "role");
				ok = 0;
			}
			if (ok) {
				strs[2 * n] = xstrdup_(role, rl);
				strs[2 * n + 1] = xstrdup_(content, cl);
				msgs[n] = (sw_chat_msg){ strs[2 * n], strs[2 * n + 1] };
				n++;
			}
		}
		if (ok && rc < 0) {
			bad_record_("field 'messages' is corrupt");
			ok = 0;
		}
		char *text = NULL;
		size_t tlen = 0;
		sw_error err = { 0 };
		if (ok && n == 0) {
			bad_record_("field 'messages' is empty");
			ok = 0;
		}
		if (ok && sw_tokenizer_chat(tok_, msgs, n, 1, &text, &tlen, &err)) {
			bad_record_("cannot render 'messages' with the chat template: %s", err.msg);
			ok = 0;
		}
		if (ok && encode_(text, tlen, out, nout, "the rendered messages"))
			ok = 0;
		free(text);
		for (size_t i = 0; i < 2 * n; i++)
			free(strs[i]);
		free(strs);
		free(msgs);
		if (!ok)
			return -1;
	} else if (sw_rec_get(in_, "prompt", &v) == 0) {
		if (v.type != SW_T_STR) {
			bad_record_("field 'prompt' is a %s, not a string", sw_type_name(v.type));
			return -1;
		}
		if (encode_(v.v.str.ptr, v.v.str.len, out, nout, "'prompt'"))
			return -1;
	} else {
		bad_record_("no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field");
		return -1;
	}
	if (*nout == 0) {
		bad_record_("the prompt is empty (no tokens)");
		return -1;
	}
	return 0;
}

/* The group id: the record's id (a string, or an integer written in decimal), else its number. */
static char *group_id_(void)
{
	sw_val v;
	char buf[32];
	if (sw_rec_get(in_, "id", &v))
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)nread_);
	else if (v.type == SW_T_STR)
		return xstrdup_(v.v.str.ptr, v.v.str.len);
	else if (v.type == SW_T_UINT)
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)v.v.u);
	else if (v.type == SW_T_INT)
		snprintf(buf, sizeof buf, "%lld", (long long)v.v.i);
	else {
		bad_record_("field 'id' is a %s, not a string or an integer", sw_type_name(v.type));
		return NULL;
	}
	return xstrdup_(buf, strlen(buf));
}

/* An invalid record: skipped and counted with --skip-invalid, else fatal (after the drain). */
static void invalid_(void)
{
	if (o_.skip) {
		skipped_++;
		if (cli_verbosity >= 0)
			cli_warn("%s (skipped)", bad_);
		return;
	}
	fatal_pending_ = true;
	memcpy(fatal_, bad_, sizeof bad_);
}

/* ---- output -------------------------------------------------------------------- */

static void put_(sw_rec *rec)
{
	if (sw_writer_put(w_, rec))
		cli_die_stream(out_name_, sw_writer_error(w_));
	written_++;
	cli_progress(written_, 0);
}

/*
 * Samples go out in the order of the input (prompt by prompt, response k
 * after response k-1), not in the order they finish.  Which finishes first
 * depends on how fast the input arrives and so on what shared a step; a
 * trainer downstream sums what it reads in order, so a repeated or resumed
 * run must see the same order to reach the same weights.  A finished sample
 * waits here until those before it are out: at most the samples in flight.
 * Keys are index * G + k; prompts skipped as invalid have no samples.
 */
static void set_or_die_(int rc);

typedef struct held_ {
	uint64_t key;
	uint8_t *p;
	size_t n;
} held_;
static held_ *held_v_;
static size_t nheld_, held_cap_;
static uint64_t next_key_;
static uint64_t *skipidx_;          /* indices of skipped prompts, ascending */
static size_t nskipidx_, skipidx_cap_, skip_at_;

static void put_raw_(const uint8_t *p, size_t n)
{
	if (sw_writer_put_raw(w_, p, n))
		cli_die_stream(out_name_, sw_writer_error(w_));
	written_++;
	cli_progress(written_, 0);
}

/* Write out every held sample whose turn has come. */
static void advance_(uint64_t G)
{
	for (;;) {
		uint64_t idx = next_key_ / G;
		while (skip_at_ < nskipidx_ && skipidx_[skip_at_] < idx)
			skip_at_++;
		if (skip_at_ < nskipidx_ && skipidx_[skip_at_] == idx) {
			next_key_ = (idx + 1) * G;
			continue;
		}
		size_t i;
		for (i = 0; i < nheld_ && held_v_[i].key != next_key_; i++)
			;
		if (i == nheld_)
			return;
		put_raw_(held_v_[i].p, held_v_[i].n);
		free(held_v_[i].p);
		held_v_[i] = held_v_[--nheld_];
		next_key_++;
	}
}

static void put_ordered_(uint64_t key, uint64_t G, sw_rec *rec)
{
	const uint8_t *p;
	size_t n;
	set_or_die_(sw_rec_bytes(rec, &p, &n));
	if (nheld_ == held_cap_) {
		held_cap_ = held_cap_ ? 2 * held_cap_ : 64;
		held_v_ = xrealloc_(held_v_, sizeof *held_v_ * held_cap_);
	}
	held_v_[nheld_].key = key;
	held_v_[nheld_].p = xmalloc_(n);
	memcpy(held_v_[nheld_].p, p, n);
	held_v_[nheld_++].n = n;
	advance_(G);
}

/* Prompt idx gives no samples (it was skipped). */
static void skip_index_(uint64_t idx, uint64_t G)
{
	if (nskipidx_ == skipidx_cap_) {
		skipidx_cap_ = skipidx_cap_ ? 2 * skipidx_cap_ : 16;
		skipidx_ = xrealloc_(skipidx_, sizeof *skipidx_ * skipidx_cap_);
	}
	skipidx_[nskipidx_++] = idx;
	advance_(G);
}

static int held_cmp_(const void *a, const void *b)
{
	uint64_t x = ((const held_ *)a)->key, y = ((const held_ *)b)->key;
	return x < y ? -1 : x > y;
}

/* At the end (or after a fatal record, whose place never fills): the rest, in order. */
static void flush_held_(void)
{
	if (nheld_)
		qsort(held_v_, nheld_, sizeof *held_v_, held_cmp_);
	for (size_t i = 0; i < nheld_; i++) {
		put_raw_(held_v_[i].p, held_v_[i].n);
		free(held_v_[i].p);
	}
	nheld_ = 0;
	free(held_v_);
	free(skipidx_);
}

static void set_or_die_(int rc)
{
	if (rc)
		cli_die("cannot build a sample: %s", sw_strerror(rc));
}

/* ---- the weights' version ----------------------------------------------------- */

static uint64_t read_begin_(void)
{
	uint64_t seq = 0;
	sw_error err = { 0 };
	if (store_ && sw_store_read_begin(store_, &seq, &err))
		cli_die("store '%s': %s", o_.store_spec, err.msg);
	return seq;
}

static bool read_retry_(uint64_t seq)
{
	return store_ && sw_store_read_retry(store_, seq);
}

static uint64_t version_(void)
{
	return store_ ? sw_store_version(store_) : 0;
}

/* ---- generation ---------------------------------------------------------------- */

typedef struct group_ {
	uint8_t *bytes;            /* the prompt record */
	size_t nbytes;
	char *gid;
	int32_t *ptok;
	int plen, max_new;         /* max_new: for this prompt, within the context */
	uint64_t index;            /* 0-based place in the input: the RNG stream */
	int root;                  /* decoder id of the prompt-only sequence; -1 when gone */
	float *root_logits;        /* its next-token logits once prefilled */
	uint64_t version;          /* of the weights that prefilled it */
	int started, finished;
	bool first_reserved;       /* room for the first response is held already */
	struct group_ *next;       /* the list of groups with responses to start */
} group_;

typedef struct sample_ {
	group_ *g;
	int k, id;
	int32_t *tok;
	float *lp;
	int n, cap;
	char *text;
	size_t tlen, tcap;
	int64_t reserved;
	uint64_t version;          /* of the weights it was generated with */
} sample_;

static sw_decoder *d_;
static sw_sampler *sampler_;
static int max_seqs_;
static sample_ **by_id_;              /* live responses by decoder id */
static group_ **root_of_;             /* roots by decoder id */
static group_ *groups_, **groups_tail_ = &groups_; /* groups with responses still to start */
static int live_;
static int64_t cap_tok_, reserved_;
static bool input_done_;
static size_t max_stop_len_;

static int64_t sample_need_(const group_ *g)
{
	/* --static: a finished response keeps its row, padded, up to the longest any may be */
	int64_t most = o_.stat ? (o_.max_new < C_ - g->plen ? o_.max_new : C_ - g->plen) : g->max_new;
	return most + 32;
}

/*
 * --static emulates a padded batch (transformers' generate() on a batch):
 * a finished response stays in the batch, fed a pad token at every step,
 * its output discarded, until the whole batch has finished.  pad_left_[id]
 * is how many more pad tokens such a row may take (-1: not one), pad_res_
 * its KV reservation, released when the batch ends.
 */
static int *pad_left_;
static int64_t *pad_res_;
static int npad_;
static int32_t pad_tok_;

static void pad_feed_(int id)
{
	sw_error err = { 0 };
	if (pad_left_[id] > 0) {
		if (sw_decoder_append(d_, id, &pad_tok_, 1, &err))
			cli_die("decoder: %s", err.msg);
		pad_left_[id]--;
	}
}

static void pad_clear_(void)
{
	for (int i = 0; npad_ && i < max_seqs_; i++)
		if (pad_left_[i] >= 0) {
			sw_decoder_remove(d_, i);
			pad_left_[i] = -1;
			reserved_ -= pad_res_[i];
			npad_--;
		}
}

static int64_t root_need_(const group_ *g)
{
	return (int64_t)g->plen + 16;
}

static void remove_root_(group_ *g);

static void free_group_(group_ *g)
{
	remove_root_(g);
	free(g->bytes);
	free(g->gid);
	free(g->ptok);
	free(g->root_logits);
	free(g);
}

static void remove_root_(group_ *g)
{
	if (g->root < 0)
		return;
	sw_decoder_remove(d_, g->root);
	root_of_[g->root] = NULL;
	g->root = -1;
	reserved_ -= root_need_(g);
}

static void unlink_group_(group_ *g)
{
	for (group_ **pp = &groups_; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			if (groups_tail_ == &g->next)
				groups_tail_ = pp;
			g->next = NULL;
			return;
		}
}

static void finish_(sample_ *s, const char *why)
{
	group_ *g = s->g;
	char id[64];
	size_t gl = strlen(g->gid);
	if (sw_rec_load(out_, g->bytes, g->nbytes))
		cli_die("cannot rebuild the prompt record");
	char *full = xmalloc_(gl + 24);
	snprintf(id, sizeof id, "/%d", s->k);
	memcpy(full, g->gid, gl);
	memcpy(full + gl, id, strlen(id) + 1);
	uint32_t *pt = xmalloc_(sizeof *pt * (size_t)g->plen);
	for (int i = 0; i < g->plen; i++)
		pt[i] = (uint32_t)g->ptok[i];
	uint32_t *rt = xmalloc_(sizeof *rt * (size_t)(s->n ? s->n : 1));
	for (int i = 0; i < s->n; i++)
		rt[i] = (uint32_t)s->tok[i];
	set_or_die_(sw_rec_set_str(out_, "id", full, strlen(full)));
	set_or_die_(sw_rec_set_str(out_, "group", g->gid, gl));
	set_or_die_(sw_rec_set_u32s(out_, "prompt_tokens", pt, (size_t)g->plen));
	set_or_die_(sw_rec_set_str(out_, "response", s->text ? s->text : "", s->tlen));
	set_or_die_(sw_rec_set_u32s(out_, "response_tokens", rt, (size_t)s->n));
	set_or_die_(sw_rec_set_f32s(out_, "logprobs", s->lp, (size_t)s->n));
	set_or_die_(sw_rec_set_str(out_, "finish", why, strlen(why)));
	set_or_die_(sw_rec_set_u64(out_, "policy_version", s->version));
	put_ordered_(g->index * (uint64_t)o_.G + (uint64_t)s->k, (uint64_t)o_.G, out_);
	free(full), free(pt), free(rt);
	gen_tokens_ += (uint64_t)s->n;

	if (s->id >= 0) {
		by_id_[s->id] = NULL;
		live_--;
	}
	if (s->id >= 0 && o_.stat && strcmp(why, "abort")) {
		/* its row stays in the batch as padding: the last token it may take
		 * is the longest response's, or the context's end */
		int most = (int)(sample_need_(g) - 32);
		pad_left_[s->id] = most - s->n;
		pad_res_[s->id] = s->reserved;
		npad_++;
		pad_feed_(s->id);
	} else {
		if (s->id >= 0)
			sw_decoder_remove(d_, s->id);
		reserved_ -= s->reserved;
	}
	free(s->tok), free(s->lp), free(s->text), free(s);
	if (++g->finished == o_.G)
		free_group_(g);
}

/*
 * Add token t (log-prob lp) to s; returns true when s is finished (and
 * written).  The stop-id token stays in response_tokens, not in the text; a
 * stop string cuts the text before it, keeping every token up to the one
 * that completed it.
 */
static bool push_token_(sample_ *s, int32_t t, float lp)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 32;
		s->tok = xrealloc_(s->tok, sizeof *s->tok * (size_t)s->cap);
		s->lp = xrealloc_(s->lp, sizeof *s->lp * (size_t)s->cap);
	}
	s->tok[s->n] = t;
	s->lp[s->n++] = lp;
	if (is_stop_id_(t)) {
		finish_(s, "stop");
		return true;
	}
	if ((size_t)t < sw_tokenizer_vocab(tok_)) {
		/* ids the tokenizer lacks (padding rows of a larger embedding) have no text */
		uint32_t id = (uint32_t)t;
		char *txt;
		size_t len;
		sw_error err = { 0 };
		if (sw_tokenizer_decode(tok_, &id, 1, 0, &txt, &len, &err))
			cli_die("cannot decode token %d: %s", t, err.msg);
		size_t before = s->tlen;
		if (s->tlen + len + 1 > s->tcap) {
			s->tcap = (s->tlen + len + 1) * 2;
			s->text = xrealloc_(s->text, s->tcap);
		}
		memcpy(s->text + s->tlen, txt, len);
		s->tlen += len;
		s->text[s->tlen] = 0;
		free(txt);
		if (o_.nstops && len) {
			/* a stop string can only end in the new bytes: search from where it could start */
			size_t from = before > max_stop_len_ ? before - max_stop_len_ : 0, cut = SIZE_MAX;
			for (size_t i = 0; i < o_.nstops; i++) {
				size_t sl = strlen(o_.stops[i]);
				for (size_t p = from; p + sl <= s->tlen && p < cut; p++)
					if (!memcmp(s->text + p, o_.stops[i], sl)) {
						cut = p;
						break;
					}
			}
			if (cut != SIZE_MAX) {
				s->tlen = cut;
				s->text[cut] = 0;
				finish_(s, "stop");
				return true;
			}
		}
	}
	if (s->n >= s->g->max_new) {
		finish_(s, "length");
		return true;
	}
	return false;
}

static int32_t draw_(const group_ *g, int k, int step, const float *logits, float *lp)
{
	sw_error err = { 0 };
	double u = sw_rng_uniform(o_.seed, g->index, (uint32_t)k, (uint32_t)step);
	int t = sw_sampler_pick(sampler_, logits, u, lp, &err);
	if (t < 0)
		cli_die("group '%s': cannot sample: %s", g->gid, err.msg);
	return t;
}

/*
 * Start the next response of g from its root's logits: 0 when there is no
 * room for it, 1 when it started and g has more to start, 2 when it was
 * g's last (g may then be gone already: its responses may all have ended).
 */
static int start_sample_(group_ *g)
{
	sample_ *s = calloc(1, sizeof *s);
	if (!s)
		cli_die("out of memory");
	int64_t need = sample_need_(g);
	if (g->first_reserved) {
		g->first_reserved = false;
	} else {
		if (reserved_ + need > cap_tok_) {
			free(s);
			return 0;
		}
		reserved_ += need;
	}
	s->g = g;
	s->k = g->started++;
	s->reserved = need;
	s->version = g->version;
	float lp;
	int32_t t = draw_(g, s->k, 0, g->root_logits, &lp);
	sw_error err = { 0 };
	int id = sw_decoder_fork(d_, g->root, &err);
	if (id < 0 || id >= max_seqs_)
		cli_die("decoder: %s", err.msg);
	s->id = id;
	by_id_[id] = s;
	live_++;
	bool last = g->started == o_.G;
	if (last) {
		/* every response has started: the prompt's pages stay with the forks */
		unlink_group_(g);
		remove_root_(g);
	}
	if (!push_token_(s, t, lp) && sw_decoder_append(d_, id, &t, 1, &err))
		cli_die("decoder: %s", err.msg);
	return last ? 2 : 1;
}

/* The record just read was invalid: with --skip-invalid its place in the output order is empty. */
static void skip_if_skipping_(void)
{
	if (o_.skip)
		skip_index_(nread_ - 1, (uint64_t)o_.G);
}

/* Read prompts until one is valid (a new group, its root added) or the input ends. */
static group_ *admit_(bool block)
{
	int32_t *ptok = NULL;
	int plen = 0;
	while (!input_done_ && !fatal_pending_) {
		int rc = next_record_(block);
		if (rc < 0)
			break;
		if (rc == 0) {
			input_done_ = true;
			break;
		}
		char *gid = group_id_();
		if (!gid || prompt_of_(&ptok, &plen)) {
			free(gid);
			invalid_();
			skip_if_skipping_();
			continue;
		}
		if (plen >= C_) {
			bad_record_("prompt has %d tokens, the model's context is %d%s", plen, C_,
			            plen == C_ ? " (no room for a response)" : "");
			free(gid);
			invalid_();
			skip_if_skipping_();
			continue;
		}
		int max_new = o_.max_new;
		sw_val v;
		if (sw_rec_get(in_, "max_new_tokens", &v) == 0) {
			if (v.type != SW_T_UINT)
				bad_record_("field 'max_new_tokens' is %s, not a whole number",
				            v.type == SW_T_INT ? "negative" : sw_type_name(v.type));
			else if (v.v.u < 1 || v.v.u > (uint64_t)o_.max_new)
				bad_record_("field 'max_new_tokens' is %llu, not from 1 to --max-new-tokens %d",
				            (unsigned long long)v.v.u, o_.max_new);
			if (v.type != SW_T_UINT || v.v.u < 1 || v.v.u > (uint64_t)o_.max_new) {
				free(gid);
				invalid_();
				skip_if_skipping_();
				continue;
			}
			max_new = (int)v.v.u;
		}
		group_ *g = calloc(1, sizeof *g);
		if (!g)
			cli_die("out of memory");
		g->bytes = own_bytes_(&g->nbytes);
		g->gid = gid;
		g->ptok = ptok;
		g->plen = plen;
		g->max_new = max_new < C_ - plen ? max_new : C_ - plen;
		g->index = nread_ - 1;
		g->root = -1;
		return g;
	}
	free(ptok);
	return NULL;
}

static void add_root_(group_ *g)
{
	sw_error err = { 0 };
	int id = sw_decoder_add(d_, g->ptok, g->plen, &err);
	if (id < 0 || id >= max_seqs_)
		cli_die("decoder: %s", err.msg);
	g->root = id;
	root_of_[id] = g;
	free(g->root_logits);
	g->root_logits = NULL;
	reserved_ += root_need_(g);
}

/* Responses still to start, over the groups admitted. */
static int64_t demand_(void)
{
	int64_t n = 0;
	for (group_ *g = groups_; g; g = g->next)
		n += o_.G - g->started;
	return n;
}

/* Fill the batch: fork prefilled roots, admit prompts (roots to prefill) while responses are wanted. */
static void fill_(void)
{
	if (o_.stat && live_ > 0)
		return;
	pad_clear_();
	for (group_ *g = groups_, *nx; g; g = nx) {
		nx = g->next;
		while (g->root_logits && live_ < o_.batch)
			if (start_sample_(g) != 1)
				break;
	}
	while (live_ + demand_() < o_.batch && !input_done_ && !fatal_pending_) {
		int64_t sm = (int64_t)o_.max_new + 32;
		/* room for the prompt, its first response, and one more response of anyone's */
		if (groups_ && reserved_ + (int64_t)C_ + 16 + 2 * sm > cap_tok_)
			break;
		group_ *g = admit_(o_.stat || (live_ == 0 && !groups_));
		if (!g)
			break;
		if (reserved_ + root_need_(g) + sample_need_(g) > cap_tok_)
			cli_die("the KV cache of %lld tokens cannot hold a prompt of %d tokens and a response",
			        (long long)cap_tok_, g->plen);
		add_root_(g);
		reserved_ += sample_need_(g);
		g->first_reserved = true;
		*groups_tail_ = g;
		groups_tail_ = &g->next;
	}
}

/* The weights changed under us: what the cache holds is stale.  Live
 * responses end as abort; roots are prefilled again. */
static void invalidate_(void)
{
	for (int i = 0; i < max_seqs_; i++)
		if (by_id_[i])
			finish_(by_id_[i], "abort");
	for (group_ *g = groups_; g; g = g->next) {
		if (g->root >= 0) {
			remove_root_(g);
			add_root_(g);
		}
	}
}

static void generate_(void)
{
	sw_error err = { 0 };
	/* Cache room: the batch's responses at their longest, the prompts of the groups in flight, and one spare. */
	int64_t sm = (int64_t)(o_.max_new < C_ ? o_.max_new : C_) + 32;
	int64_t groups = o_.batch / o_.G + 2;
	int64_t cap = (int64_t)o_.batch * sm + groups * ((int64_t)C_ + 16) + 2 * sm;
	const sw_model_config *c = &m_->cfg;
	double per_tok = 2.0 * c->num_hidden_layers * c->num_key_value_heads * c->head_dim * sizeof(float);
	double budget = 8.0 * (1 << 30);
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0 && (double)pages * (double)psz / 2 < budget)
		budget = (double)pages * (double)psz / 2;
	int64_t floor_ = (int64_t)C_ + 16 + 3 * sm;
	if ((double)cap * per_tok > budget)
		cap = (int64_t)(budget / per_tok);
	if (cap < floor_)
		cap = floor_;
	cap_tok_ = cap;
	max_seqs_ = 2 * o_.batch + o_.G + 2;
	if (!(d_ = sw_decoder_new(m_, max_seqs_, cap_tok_, &err)))
		cli_die("%s", err.msg);
	if (!(sampler_ = sw_sampler_new(V_, &o_.par, &err)))
		cli_usage("%s", err.msg);
	by_id_ = calloc((size_t)max_seqs_, sizeof *by_id_);
	root_of_ = calloc((size_t)max_seqs_, sizeof *root_of_);
	pad_left_ = malloc(sizeof *pad_left_ * (size_t)max_seqs_);
	pad_res_ = calloc((size_t)max_seqs_, sizeof *pad_res_);
	if (!by_id_ || !root_of_ || !pad_left_ || !pad_res_)
		cli_die("out of memory");
	for (int i = 0; i < max_seqs_; i++)
		pad_left_[i] = -1;
	int pad = sw_tokenizer_pad(tok_);
	pad_tok_ = pad >= 0 && pad < V_ ? pad : 0;

	uint64_t last_seq = read_begin_();
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	double last_flush = 0;
	uint64_t flushed = 0;
	for (;;) {
		fill_();
		if (!live_ && !groups_)
			break;
		uint64_t seq = read_begin_();
		if (seq != last_seq) {
			/* the weights changed between steps: the cache is of the old ones */
			invalidate_();
			last_seq = seq;
			continue;
		}
		uint64_t ver = version_();
		int n;
		const int *ids;
		const float *logits;
		if (sw_decoder_step(d_, &n, &ids, &logits, &err))
			cli_die("decoding failed: %s", err.msg);
		if (read_retry_(seq)) {
			/* a write overlapped the step: nothing it computed is used */
			invalidate_();
			last_seq = read_begin_();
			continue;
		}
		if (n == 0 && live_ == 0)
			cli_die("internal error: no response can start (KV cache of %lld tokens, %lld reserved)",
			        (long long)cap_tok_, (long long)reserved_);
		for (int i = 0; i < n; i++) {
			int id = ids[i];
			const float *row = logits + (size_t)i * (size_t)V_;
			if (id < 0 || id >= max_seqs_)
				cli_die("decoder returned an unknown sequence %d", id);
			if (root_of_[id]) {
				group_ *g = root_of_[id];
				g->root_logits = xrealloc_(g->root_logits, sizeof(float) * (size_t)V_);
				memcpy(g->root_logits, row, sizeof(float) * (size_t)V_);
				g->version = ver;
				continue;
			}
			if (pad_left_[id] >= 0) {
				pad_feed_(id);
				continue;
			}
			sample_ *s = by_id_[id];
			if (!s)
				cli_die("decoder returned a sequence %d that is not live", id);
			float lp;
			int32_t t = draw_(s->g, s->k, s->n, row, &lp);
			if (!push_token_(s, t, lp) && sw_decoder_append(d_, id, &t, 1, &err))
				cli_die("decoder: %s", err.msg);
		}
		if (written_ != flushed) {
			/* samples flow on while generation goes on: what finished is
			 * flushed within 50 ms (and a step), not after every sample */
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			double now = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
			if (now - last_flush >= 0.05) {
				if (sw_writer_flush(w_))
					cli_die_stream(out_name_, sw_writer_error(w_));
				last_flush = now;
				flushed = written_;
			}
		}
	}
	sw_decoder_free(d_);
	sw_sampler_free(sampler_);
	free(by_id_);
	free(root_of_);
	free(pad_left_);
	free(pad_res_);
}

/* ---- scoring --------------------------------------------------------------------- */

typedef struct item_ {
	uint8_t *bytes;
	size_t nbytes;
	int32_t *tok;              /* prompt then response */
	int plen, rlen;
	bool set_tokens;           /* response_tokens came from the text: write them too */
} item_;

static sw_engine *e_;
static item_ *items_;
static int nitems_;
static int64_t ntok_;

static void score_flush_(void)
{
	if (!nitems_)
		return;
	sw_error err = { 0 };
	int32_t *tokens = xmalloc_(sizeof *tokens * (size_t)ntok_);
	int32_t *cu = xmalloc_(sizeof *cu * (size_t)(nitems_ + 1));
	cu[0] = 0;
	for (int i = 0; i < nitems_; i++) {
		int len = items_[i].plen + items_[i].rlen;
		memcpy(tokens + cu[i], items_[i].tok, sizeof *tokens * (size_t)len);
		cu[i + 1] = cu[i] + len;
	}
	sw_batch b = { nitems_, tokens, cu, NULL };
	float *lp = NULL;
	size_t lpcap = 0;
	for (;;) {
		uint64_t seq = read_begin_();
		if (sw_engine_forward(e_, &b, false, NULL, NULL, &err))
			cli_die("scoring failed: %s", err.msg);
		const float *logits = sw_engine_logits(e_);
		if (!logits)
			cli_die("scoring failed: the engine kept no logits");
		bool retry = false;
		for (int i = 0; i < nitems_ && !retry; i++) {
			item_ *it = &items_[i];
			if ((size_t)it->rlen > lpcap) {
				lpcap = (size_t)it->rlen * 2;
				lp = xrealloc_(lp, sizeof *lp * lpcap);
			}
			for (int j = 0; j < it->rlen; j++) {
				size_t row = (size_t)cu[i] + (size_t)it->plen - 1 + (size_t)j;
				lp[j] = sw_sampling_logprob(logits + row * (size_t)V_, V_, o_.par.temperature,
				                            it->tok[it->plen + j]);
			}
			/* a write overlapped the forward: do it again before anything goes out */
			if (i == 0 && read_retry_(seq)) {
				retry = true;
				break;
			}
			if (sw_rec_load(out_, it->bytes, it->nbytes))
				cli_die("cannot rebuild a record");
			if (it->set_tokens) {
				uint32_t *rt = xmalloc_(sizeof *rt * (size_t)(it->rlen ? it->rlen : 1));
				for (int j = 0; j < it->rlen; j++)
					rt[j] = (uint32_t)it->tok[it->plen + j];
				set_or_die_(sw_rec_set_u32s(out_, "response_tokens", rt, (size_t)it->rlen));
				free(rt);
			}
			set_or_die_(sw_rec_set_f32s(out_, o_.as, lp, (size_t)it->rlen));
			put_(out_);
		}
		if (!retry)
			break;
	}
	for (int i = 0; i < nitems_; i++)
		free(items_[i].bytes), free(items_[i].tok);
	free(lp), free(tokens), free(cu);
	nitems_ = 0;
	ntok_ = 0;
	if (sw_writer_flush(w_))
		cli_die_stream(out_name_, sw_writer_error(w_));
}

static void score_(void)
{
	sw_error err = { 0 };
	if (!(e_ = sw_engine_new(m_, &err)))
		cli_die("%s", err.msg);
	/* logits of a batch are [tokens, vocab]: keep them near 256 MB */
	int64_t budget = ((int64_t)256 << 20) / ((int64_t)V_ * 4);
	if (budget < C_)
		budget = C_;
	items_ = xmalloc_(sizeof *items_ * (size_t)o_.batch);
	int32_t *ptok = NULL, *rtok = NULL;
	int plen = 0, rlen = 0;
	for (;;) {
		int rc = next_record_(false);
		if (rc < 0) {
			/* the input pauses: what is batched goes out first */
			score_flush_();
			rc = next_record_(true);
		}
		if (rc == 0)
			break;
		sw_val v;
		bool from_text = false;
		if (prompt_of_(&ptok, &plen)) {
			invalid_();
		} else if (sw_rec_get(in_, "response_tokens", &v) == 0) {
			if (token_array_("response_tokens", &rtok, &rlen))
				invalid_();
		} else if (sw_rec_get(in_, "response", &v) == 0) {
			if (v.type != SW_T_STR) {
				bad_record_("field 'response' is a %s, not a string", sw_type_name(v.type));
				invalid_();
			} else if (encode_(v.v.str.ptr, v.v.str.len, &rtok, &rlen, "'response'")) {
				invalid_();
			}
			from_text = true;
		} else {
			bad_record_("nothing to score: the record has no 'response_tokens' or 'response' field");
			invalid_();
		}
		if (!fatal_pending_ && !bad_[0] && plen + rlen > C_) {
			bad_record_("prompt and response have %d tokens, the model's context is %d", plen + rlen, C_);
			invalid_();
		}
		if (fatal_pending_)
			break;
		if (bad_[0]) {
			bad_[0] = 0;
			continue;
		}
		if (nitems_ == o_.batch || (nitems_ && ntok_ + plen + rlen > budget))
			score_flush_();
		item_ *it = &items_[nitems_++];
		it->bytes = own_bytes_(&it->nbytes);
		it->tok = xmalloc_(sizeof *it->tok * (size_t)(plen + rlen));
		memcpy(it->tok, ptok, sizeof *ptok * (size_t)plen);
		memcpy(it->tok + plen, rtok, sizeof *rtok * (size_t)rlen);
		it->plen = plen;
		it->rlen = rlen;
		it->set_tokens = from_text;
		ntok_ += plen + rlen;
	}
	score_flush_();
	free(ptok), free(rtok), free(items_);
	sw_engine_free(e_);
}

/* ---- main ---------------------------------------------------------------------------- */

static double real_(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(x) || x < lo || x > hi)
		cli_usage("option '%s' wants a number from %g to %g, not '%s'", opt, lo, hi, s);
	return x;
}

int main(int argc, char **argv)
{
	const char *arg, *out = "-", *gen_only = NULL;
	int c, optind_, force = 0, fmt_set = 0, as_set = 0;
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	o_.par = sw_sampling_defaults();

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'm':
			o_.model_dir = arg;
			break;
		case OPT_WEIGHTS:
			o_.store_spec = arg;
			break;
		case 'n':
			o_.G = (int)cli_uint("-n", arg, 1, 65536);
			gen_only = "-n";
			break;
		case OPT_TEMP:
			o_.par.temperature = real_("--temperature", arg, 0, 1e6);
			break;
		case OPT_TOPK:
			o_.par.top_k = (int)cli_uint("--top-k", arg, 0, INT32_MAX);
			gen_only = "--top-k";
			break;
		case OPT_TOPP:
			o_.par.top_p = real_("--top-p", arg, 0, 1);
			if (o_.par.top_p == 0)
				cli_usage("option '--top-p' wants a number above 0 and at most 1, not '%s'", arg);
			gen_only = "--top-p";
			break;
		case OPT_MINP:
			o_.par.min_p = real_("--min-p", arg, 0, 1);
			gen_only = "--min-p";
			break;
		case OPT_MAXNEW:
			o_.max_new = (int)cli_uint("--max-new-tokens", arg, 1, 1 << 24);
			gen_only = "--max-new-tokens";
			break;
		case OPT_STOP:
			if (!*arg)
				cli_usage("option '--stop' wants a non-empty string");
			o_.stops = xrealloc_(o_.stops, sizeof *o_.stops * (o_.nstops + 1));
			o_.stops[o_.nstops++] = (char *)arg;
			if (strlen(arg) > max_stop_len_)
				max_stop_len_ = strlen(arg);
			gen_only = "--stop";
			break;
		case OPT_SEED:
			o_.seed = cli_uint("--seed", arg, 0, UINT64_MAX);
			gen_only = "--seed";
			break;
		case OPT_BATCH:
			o_.batch = (int)cli_uint("--batch", arg, 1, 65536);
			break;
		case OPT_STATIC:
			o_.stat = true;
			gen_only = "--static";
			break;
		case OPT_SKIP:
			o_.skip = true;
			break;
		case OPT_SCORE:
			o_.score = true;
			break;
		case OPT_AS:
			if (!*arg)
				cli_usage("option '--as' wants a field name");
			o_.as = arg;
			as_set = 1;
			break;
		case OPT_THREADS:
			o_.threads = (int)cli_uint("--threads", arg, 0, 4096);
			break;
		case 'f':
			wo.format = cli_format(arg);
			fmt_set = 1;
			break;
		case 'z':
			wo.zstd_level = 3;
			break;
		case 'o':
			out = arg;
			break;
		case OPT_FORCE:
			force = 1;
			break;
		}
	}
	if (o_.score && gen_only)
		cli_usage("option '%s' is for generation; --score generates nothing", gen_only);
	if (as_set && !o_.score)
		cli_usage("option '--as' goes with --score");
	if (!o_.store_spec) {
		const char *env = getenv("SW_WEIGHTS");
		if (env && *env)
			o_.store_spec = env;
	}
	if (!o_.model_dir && !o_.store_spec)
		cli_usage("no model: give -m DIR or --weights STORE");

	files_ = argv + optind_;
	nfiles_ = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles_ == 0) {
		files_ = stdin_only;
		nfiles_ = 1;
	}
	cli_output_format(out, &wo, fmt_set, force);

	sw_engine_threads(o_.threads);
	load_model_();
	sw_error err = { 0 };
	if (!(w_ = sw_writer_open(out, &wo, &err)))
		cli_die("cannot write '%s': %s", out, err.msg);
	if (strcmp(out, "-"))
		out_name_ = out;
	max_record_ = cli_max_record();
	if (!(in_ = sw_rec_new()) || !(out_ = sw_rec_new()))
		cli_die("out of memory");

	pthread_t reader;
	if (pthread_create(&reader, NULL, reader_main_, NULL))
		cli_die("cannot start the input thread");
	if (o_.score) {
		score_();
	} else {
		generate_();
		flush_held_();
	}

	pthread_join(reader, NULL);
	uint64_t bytes_in = bytes_in_;
	if (sw_writer_close(w_))
		cli_die_stream(out_name_, sw_writer_error(w_));
	if (fatal_pending_)
		cli_die("%s", fatal_);
	cli_summary(written_, bytes_in, sw_writer_bytes_out(w_));
	if (skipped_ && cli_verbosity >= 0)
		cli_warn("skipped %llu invalid record%s", (unsigned long long)skipped_, skipped_ == 1 ? "" : "s");
	sw_writer_free(w_);
	sw_rec_free(in_);
	sw_rec_free(out_);
	sw_tokenizer_free(tok_);
	sw_model_free(m_);
	sw_store_close(store_);
	free(o_.stops);
	cli_exit(0);
}
