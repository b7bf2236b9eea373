/*
 * tokenizer.c - the byte tokenizer and Hugging Face byte-level BPE: loading
 * tokenizer.json and tokenizer_config.json, encode, decode, chat templates.
 *
 * The byte tokenizer is itself a byte-level BPE with no merges, so it is
 * built by loading the very tokenizer.json that sw_tokenizer_save_byte()
 * writes: one code path, and a file `tokenizers` reads as it is.
 *
 * Encoding follows tokenizers' order of work:
 *   1. added tokens whose "normalized" is false are matched in the raw text
 *      (leftmost-longest, as its Aho-Corasick matcher does);
 *   2. each stretch between them is normalised (NFC, when the file says so)
 *      and searched for the "normalized" added tokens;
 *   3. the rest runs through the pre-tokenizer steps (Split regexes through
 *      PCRE2, then ByteLevel with its optional prefix space and GPT-2 regex);
 *   4. each piece becomes byte symbols merged by rank (lowest rank first, the
 *      leftmost on ties), with a per-call cache of pieces already seen.
 * Tokens are kept in their byte form (the ByteLevel alphabet undone), so the
 * merges work on bytes and decoding is concatenation.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "yyjson/yyjson.h"
#include "common/internal.h"

/* Normalisation to NFC, tokenizer_nfc.c: appends the NFC form of the valid UTF-8 p[0..n). */
int sw_tok_nfc_(const uint8_t *p, size_t n, sw_buf *out);

#define MAX_ID ((uint32_t)1 << 22)    /* ids we accept; the largest real vocabularies are ~256k */
#define MAX_FILE ((size_t)1 << 30)    /* tokenizer.json larger than this is refused */
#define CACHE_PIECE_MAX 64            /* pieces longer than this are not cached */
#define CACHE_MAX ((size_t)1 << 18)   /* cache entries per encode call */

enum { TF_PRESENT = 1, TF_ADDED = 2, TF_SPECIAL = 4 };
enum { BH_REMOVED, BH_ISOLATED, BH_MERGED_PREV, BH_MERGED_NEXT, BH_CONTIGUOUS };
/* chat templates: the families' exact templates (tokenizer_templates.h) */
enum { TM_PLAIN, TM_CHATML, TM_LLAMA3, TM_LLAMA31, TM_LLAMA32, TM_QWEN25, TM_QWEN3, TM_UNKNOWN };

typedef struct split_ {
	pcre2_code *re;
	int behavior, invert;
} split_;

typedef struct added_ {
	uint32_t off, len, id; /* content in added_pool, as matched (NFC'd when normalized) */
	uint8_t special, lstrip, rstrip, normalized;
} added_;

struct sw_tokenizer {
	uint32_t nvocab;          /* max id + 1 */
	uint8_t *pool;            /* every token's byte form */
	uint32_t *tok_off, *tok_len;
	uint8_t *tok_flags;
	uint32_t *vtab;           /* byte form -> id for the BPE model's vocabulary, open addressing */
	uint32_t vmask;
	uint64_t *mkey;           /* merges: (left << 32 | right) -> rank, new id */
	uint32_t *mrank, *mnew;
	uint32_t mmask;
	size_t nmerges;
	int32_t byte_id[256];     /* the token of each single byte, -1 when the vocabulary lacks it */
	int unk_id, fuse_unk, ignore_merges, nfc;
	split_ *splits;           /* the Split steps before ByteLevel */
	size_t nsplits;
	int prefix_space;         /* ByteLevel add_prefix_space */
	pcre2_code *bl_re;        /* ByteLevel's GPT-2 regex when use_regex, else NULL */
	int jit;                  /* every regex is JIT-compiled */
	added_ *added;
	size_t nadded;
	uint8_t *added_pool;
	uint8_t first_raw[256], first_norm[256]; /* first bytes of added tokens of pass 1, pass 2 */
	int bos, eos, pad;
	int tmpl;
	char *default_system;     /* chatml: the system prompt a template adds when none is given */
	char *bos_text;           /* llama3: the BOS token's text */
	int eot;                  /* the template's end-of-turn token, -1 when none */
};

/* ---- the ByteLevel alphabet ---------------------------------------------------- */

static uint16_t b2u_[256];  /* byte -> code point */
static int16_t u2b_[324];   /* code point -> byte, -1 when none */

static void alphabet_init_(void)
{
	if (b2u_[0])
		return; /* filled already: byte 0 maps to U+0100, never 0 */
	int n = 0;
	for (int i = 0; i < 324; i++)
		u2b_[i] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
		int cp = printable ? b : 256 + n++;
		u2b_[cp] = (int16_t)b;
		b2u_[b] = (uint16_t)cp;
	}
}

/* Length of the valid UTF-8 sequence at p (RFC 3629), 0 when p starts no valid one. */
static size_t utf8_len_(const uint8_t *p, size_t n, uint32_t *cp)
{
	uint8_t c = p[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	size_t k;
	uint32_t v, min;
	if ((c & 0xe0) == 0xc0) k = 2, v = c & 0x1f, min = 0x80;
	else if ((c & 0xf0) == 0xe0) k = 3, v = c & 0x0f, min = 0x800;
	else if ((c & 0xf8) == 0xf0) k = 4, v = c & 0x07, min = 0x10000;
	else return 0;
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return k;
}

static void put_utf8_(sw_buf *b, uint32_t cp, int *rc)
{
	uint8_t s[4];
	size_t k;
	if (cp < 0x80) s[0] = (uint8_t)cp, k = 1;
	else if (cp < 0x800) s[0] = (uint8_t)(0xc0 | cp >> 6), s[1] = (uint8_t)(0x80 | (cp & 0x3f)), k = 2;
	else s[0] = (uint8_t)(0xe0 | cp >> 12), s[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)),
	     s[2] = (uint8_t)(0x80 | (cp & 0x3f)), k = 3;
	if (sw_buf_put(b, s, k))
		*rc = SW_ENOMEM;
}

/*
 * A token's byte form: each character of the ByteLevel alphabet becomes its
 * byte; a token with any other character is taken as its UTF-8 text, whole,
 * as tokenizers' ByteLevel decoder does.  *mapped says which it was.
 */
static int byte_form_(const char *s, size_t n, sw_buf *out, int *mapped)
{
	size_t start = out->len;
	const uint8_t *p = (const uint8_t *)s;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = utf8_len_(p + i, n - i, &cp);
		if (!k || cp >= 324 || u2b_[cp] < 0) {
			out->len = start;
			*mapped = 0;
			return sw_buf_put(out, s, n) ? SW_ENOMEM : 0;
		}
		uint8_t b = (uint8_t)u2b_[cp];
		if (sw_buf_put(out, &b, 1))
			return SW_ENOMEM;
		i += k;
	}
	*mapped = 1;
	return 0;
}

/* ---- hashing -------------------------------------------------------------------- */

static uint64_t hash_(const uint8_t *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	uint64_t w = 0;
	memcpy(&w, p + i, n - i);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 29;
	return h;
}

static uint64_t hash64_(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

/* The model-vocabulary id of byte string p[0..n), or -1. */
static int64_t vocab_find_(const sw_tokenizer *t, const uint8_t *p, size_t n)
{
	if (!t->vtab)
		return -1;
	for (uint32_t i = (uint32_t)hash_(p, n) & t->vmask;; i = (i + 1) & t->vmask) {
		uint32_t id = t->vtab[i];
		if (id == UINT32_MAX)
			return -1;
		if (t->tok_len[id] == n && !memcmp(t->pool + t->tok_off[id], p, n))
			return id;
	}
}

static int merge_find_(const sw_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *nid)
{
	if (!t->mkey)
		return 0;
	uint64_t k = (uint64_t)a << 32 | b;
	for (uint32_t i = (uint32_t)hash64_(k) & t->mmask;; i = (i + 1) & t->mmask) {
		if (t->mkey[i] == UINT64_MAX)
			return 0;
		if (t->mkey[i] == k) {
			*rank = t->mrank[i];
			*nid = t->mnew[i];
			return 1;
		}
	}
}

/* ---- loading -------------------------------------------------------------------- */

static const char *jtype_(yyjson_val *v)
{
	yyjson_val *ty = yyjson_obj_get(v, "type");
	return yyjson_is_str(ty) ? yyjson_get_str(ty) : NULL;
}

static int jbool_(yyjson_val *o, const char *key, int *out, int dflt, sw_error *err)
{
	yyjson_val *v = yyjson_obj_get(o, key);
	if (!v || yyjson_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!yyjson_is_bool(v))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: '%s' is not true or false", key);
	*out = yyjson_get_bool(v);
	return 0;
}

static int compile_(sw_tokenizer *t, const char *pat, size_t n, int literal, pcre2_code **out,
                    sw_error *err)
{
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, n,
	                               PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &ec, &eo,
	                               NULL);
	if (!re) {
		PCRE2_UCHAR msg[120];
		pcre2_get_error_message(ec, msg, sizeof msg);
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre-tokenizer regex: %s at offset %zu",
		               (const char *)msg, (size_t)eo);
	}
	if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
		t->jit = 0; /* no JIT on this machine or for this pattern: the interpreter serves */
	*out = re;
	return 0;
}

static const char gpt2_re_[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_split_(sw_tokenizer *t, yyjson_val *v, sw_error *err)
{
	yyjson_val *pat = yyjson_obj_get(v, "pattern");
	yyjson_val *rx = yyjson_obj_get(pat, "Regex"), *lit = yyjson_obj_get(pat, "String");
	yyjson_val *s = rx ? rx : lit;
	if (!yyjson_is_obj(pat) || !yyjson_is_str(s))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: Split without a Regex or String pattern");
	yyjson_val *bh = yyjson_obj_get(v, "behavior");
	static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious",
		                             "MergedWithNext", "Contiguous" };
	int behavior = -1;
	for (int i = 0; i < 5 && yyjson_is_str(bh); i++)
		if (!strcmp(yyjson_get_str(bh), names[i]))
			behavior = i;
	if (behavior < 0)
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: Split behavior %s%s%s is not supported",
		               yyjson_is_str(bh) ? "'" : "", yyjson_is_str(bh) ? yyjson_get_str(bh) : "missing",
		               yyjson_is_str(bh) ? "'" : "");
	int invert;
	if (jbool_(v, "invert", &invert, 0, err))
		return err->code;
	split_ *ns = realloc(t->splits, (t->nsplits + 1) * sizeof *ns);
	if (!ns)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	t->splits = ns;
	split_ *sp = &ns[t->nsplits];
	sp->re = NULL;
	sp->behavior = behavior;
	sp->invert = invert;
	int rc = compile_(t, yyjson_get_str(s), yyjson_get_len(s), s == lit, &sp->re, err);
	if (rc)
		return rc;
	t->nsplits++;
	return 0;
}

static int load_bytelevel_(sw_tokenizer *t, yyjson_val *v, sw_error *err)
{
	int use_regex, trim;
	if (jbool_(v, "add_prefix_space", &t->prefix_space, 1, err) ||
	    jbool_(v, "use_regex", &use_regex, 1, err) || jbool_(v, "trim_offsets", &trim, 1, err))
		return err->code;
	if (use_regex)
		return compile_(t, gpt2_re_, sizeof gpt2_re_ - 1, 0, &t->bl_re, err);
	return 0;
}

/* Sequence[Split..., ByteLevel] or ByteLevel alone: the shapes GPT-2, Llama 3 and Qwen2 use. */
static int load_pretok_(sw_tokenizer *t, yyjson_val *v, sw_error *err)
{
	const char *ty = jtype_(v);
	if (!v || yyjson_is_null(v))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: no pre_tokenizer: not a byte-level BPE");
	if (!ty)
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer without a type");
	if (!strcmp(ty, "ByteLevel"))
		return load_bytelevel_(t, v, err);
	if (strcmp(ty, "Sequence"))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer '%s' is not supported", ty);
	yyjson_val *arr = yyjson_obj_get(v, "pretokenizers");
	size_t n = yyjson_arr_size(arr);
	if (!yyjson_is_arr(arr) || n == 0)
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer Sequence without steps");
	for (size_t i = 0; i < n; i++) {
		yyjson_val *s = yyjson_arr_get(arr, i);
		const char *st = jtype_(s);
		if (!st)
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer step without a type");
		if (!strcmp(st, "Split") && i + 1 < n) {
			int rc = load_split_(t, s, err);
			if (rc)
				return rc;
		} else if (!strcmp(st, "ByteLevel") && i + 1 == n) {
			return load_bytelevel_(t, s, err);
		} else if (!strcmp(st, "Split") || !strcmp(st, "ByteLevel")) {
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer Sequence must be Split "
			                                "steps then one ByteLevel, not %s at step %zu",
			               st, i + 1);
		} else {
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: pre_tokenizer '%s' is not supported",
			               st);
		}
	}
	return 0;
}

static int load_normalizer_(sw_tokenizer *t, yyjson_val *v, sw_error *err)
{
	if (!v || yyjson_is_null(v))
		return 0;
	const char *ty = jtype_(v);
	if (ty && !strcmp(ty, "NFC")) {
		t->nfc = 1;
		return 0;
	}
	if (ty && !strcmp(ty, "Sequence")) {
		yyjson_val *arr = yyjson_obj_get(v, "normalizers");
		size_t n = yyjson_arr_size(arr);
		for (size_t i = 0; i < n; i++) {
			int rc = load_normalizer_(t, yyjson_arr_get(arr, i), err);
			if (rc)
				return rc;
		}
		return 0;
	}
	return sw_fail(err, SW_EFORMAT, "tokenizer.json: normalizer '%s' is not supported",
	               ty ? ty : "without a type");
}

static int load_decoder_(yyjson_val *v, sw_error *err)
{
	const char *ty = jtype_(v);
	if (ty && !strcmp(ty, "ByteLevel"))
		return 0;
	if (ty && !strcmp(ty, "Sequence")) {
		yyjson_val *arr = yyjson_obj_get(v, "decoders");
		if (yyjson_arr_size(arr) == 1)
			return load_decoder_(yyjson_arr_get(arr, 0), err);
		ty = "Sequence";
	}
	return sw_fail(err, SW_EFORMAT, "tokenizer.json: decoder '%s' is not supported (want ByteLevel)",
	               ty ? ty : v && !yyjson_is_null(v) ? "without a type" : "none");
}

/* Set token id's byte form; model entries also go into the lookup table later. */
static int set_token_(sw_tokenizer *t, sw_buf *pool, uint32_t id, const char *s, size_t n, int flags,
                      int *mapped, sw_error *err)
{
	size_t off = pool->len;
	if (byte_form_(s, n, pool, mapped))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (pool->len > UINT32_MAX)
		return sw_fail(err, SW_ETOOBIG, "tokenizer.json: vocabulary text too large");
	t->tok_off[id] = (uint32_t)off;
	t->tok_len[id] = (uint32_t)(pool->len - off);
	t->tok_flags[id] |= (uint8_t)flags;
	return 0;
}

static int grow_tokens_(sw_tokenizer *t, uint32_t nv, sw_error *err)
{
	if (nv <= t->nvocab)
		return 0;
	uint32_t *o = realloc(t->tok_off, nv * sizeof *o);
	if (o) t->tok_off = o;
	uint32_t *l = realloc(t->tok_len, nv * sizeof *l);
	if (l) t->tok_len = l;
	uint8_t *f = realloc(t->tok_flags, nv);
	if (f) t->tok_flags = f;
	if (!o || !l || !f)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memset(t->tok_off + t->nvocab, 0, (nv - t->nvocab) * sizeof *o);
	memset(t->tok_len + t->nvocab, 0, (nv - t->nvocab) * sizeof *l);
	memset(t->tok_flags + t->nvocab, 0, nv - t->nvocab);
	t->nvocab = nv;
	return 0;
}

static int get_id_(yyjson_val *v, const char *what, uint32_t *id, sw_error *err)
{
	if (!yyjson_is_uint(v) && !(yyjson_is_sint(v) && yyjson_get_sint(v) >= 0))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: %s: id is not a non-negative integer", what);
	uint64_t u = yyjson_get_uint(v);
	if (yyjson_is_sint(v))
		u = (uint64_t)yyjson_get_sint(v);
	if (u >= MAX_ID)
		return sw_fail(err, SW_ERANGE, "tokenizer.json: %s: id %llu is too large", what,
		               (unsigned long long)u);
	*id = (uint32_t)u;
	return 0;
}

static int load_model_(sw_tokenizer *t, yyjson_val *m, sw_buf *pool, sw_error *err)
{
	const char *ty = jtype_(m);
	if (!yyjson_is_obj(m))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: no model");
	if (!ty || strcmp(ty, "BPE"))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: model '%s' is not supported (only BPE)",
		               ty ? ty : "without a type");
	int byte_fallback;
	if (jbool_(m, "byte_fallback", &byte_fallback, 0, err) ||
	    jbool_(m, "fuse_unk", &t->fuse_unk, 0, err) ||
	    jbool_(m, "ignore_merges", &t->ignore_merges, 0, err))
		return err->code;
	if (byte_fallback)
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: BPE byte_fallback is not supported "
		                                "(a SentencePiece-style BPE, not byte-level)");
	yyjson_val *d = yyjson_obj_get(m, "dropout");
	if (d && !yyjson_is_null(d) && !(yyjson_is_num(d) && yyjson_get_num(d) == 0))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: BPE dropout is not supported");
	static const char *const fixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
	for (int i = 0; i < 2; i++) {
		yyjson_val *f = yyjson_obj_get(m, fixes[i]);
		if (f && !yyjson_is_null(f) && !(yyjson_is_str(f) && yyjson_get_len(f) == 0))
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: BPE %s is not supported", fixes[i]);
	}

	yyjson_val *vocab = yyjson_obj_get(m, "vocab");
	if (!yyjson_is_obj(vocab))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: BPE model without a vocab object");
	size_t nv = yyjson_obj_size(vocab);
	uint32_t maxid = 0;
	yyjson_obj_iter it;
	yyjson_val *k, *v;
	yyjson_obj_iter_init(vocab, &it);
	while ((k = yyjson_obj_iter_next(&it))) {
		uint32_t id;
		v = yyjson_obj_iter_get_val(k);
		if (get_id_(v, "vocab", &id, err))
			return err->code;
		if (id > maxid)
			maxid = id;
	}
	if (nv && grow_tokens_(t, maxid + 1, err))
		return err->code;
	uint32_t cap = 16;
	while (cap < 2 * nv + 2)
		cap *= 2;
	t->vtab = malloc(cap * sizeof *t->vtab);
	if (!t->vtab)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memset(t->vtab, 0xff, cap * sizeof *t->vtab);
	t->vmask = cap - 1;
	yyjson_obj_iter_init(vocab, &it);
	while ((k = yyjson_obj_iter_next(&it))) {
		uint32_t id;
		int mapped;
		v = yyjson_obj_iter_get_val(k);
		(void)get_id_(v, "vocab", &id, err);
		if (t->tok_flags[id] & TF_PRESENT)
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: vocab: id %u is given twice", id);
		if (set_token_(t, pool, id, yyjson_get_str(k), yyjson_get_len(k), TF_PRESENT, &mapped, err))
			return err->code;
		if (!mapped)
			continue; /* a token BPE can never form from bytes: for decoding only */
		t->pool = pool->p; /* vocab_find_ reads the pool as it grows */
		const uint8_t *bp = pool->p + t->tok_off[id];
		if (vocab_find_(t, bp, t->tok_len[id]) >= 0)
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: vocab: token '%s' is given twice",
			               yyjson_get_str(k));
		uint32_t i = (uint32_t)hash_(bp, t->tok_len[id]) & t->vmask;
		while (t->vtab[i] != UINT32_MAX)
			i = (i + 1) & t->vmask;
		t->vtab[i] = id;
	}
	t->pool = pool->p;
	for (int b = 0; b < 256; b++) {
		uint8_t c = (uint8_t)b;
		int64_t id = vocab_find_(t, &c, 1);
		t->byte_id[b] = (int32_t)id;
	}

	t->unk_id = -1;
	yyjson_val *unk = yyjson_obj_get(m, "unk_token");
	if (yyjson_is_str(unk)) {
		sw_buf bf = { 0 };
		int mapped;
		if (byte_form_(yyjson_get_str(unk), yyjson_get_len(unk), &bf, &mapped))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		int64_t id = vocab_find_(t, bf.p, bf.len);
		sw_buf_release(&bf);
		if (id < 0)
			return sw_fail(err, SW_EFORMAT, "tokenizer.json: unk_token '%s' is not in the vocab",
			               yyjson_get_str(unk));
		t->unk_id = (int)id;
	} else if (unk && !yyjson_is_null(unk)) {
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: unk_token is not a string");
	}

	yyjson_val *merges = yyjson_obj_get(m, "merges");
	if (!yyjson_is_arr(merges))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: BPE model without a merges array");
	size_t nm = yyjson_arr_size(merges);
	cap = 16;
	while (cap < 2 * nm + 2)
		cap *= 2;
	t->mkey = malloc(cap * sizeof *t->mkey);
	t->mrank = malloc(cap * sizeof *t->mrank);
	t->mnew = malloc(cap * sizeof *t->mnew);
	if (!t->mkey || !t->mrank || !t->mnew)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memset(t->mkey, 0xff, cap * sizeof *t->mkey);
	t->mmask = cap - 1;
	sw_buf a = { 0 }, b = { 0 };
	int rc = 0;
	size_t rank = 0;
	yyjson_arr_iter ai;
	yyjson_val *e;
	yyjson_arr_iter_init(merges, &ai);
	for (; (e = yyjson_arr_iter_next(&ai)); rank++) {
		const char *l, *r;
		size_t ll, rl;
		if (yyjson_is_str(e)) {
			/* "left right": tokens hold no space, the ByteLevel alphabet maps it to 'Ġ' */
			l = yyjson_get_str(e);
			const char *sp = memchr(l, ' ', yyjson_get_len(e));
			if (!sp || memchr(sp + 1, ' ', yyjson_get_len(e) - (size_t)(sp + 1 - l))) {
				rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: merge %zu is not two tokens", rank + 1);
				break;
			}
			ll = (size_t)(sp - l);
			r = sp + 1;
			rl = yyjson_get_len(e) - ll - 1;
		} else if (yyjson_arr_size(e) == 2 && yyjson_is_str(yyjson_arr_get(e, 0)) &&
		           yyjson_is_str(yyjson_arr_get(e, 1))) {
			l = yyjson_get_str(yyjson_arr_get(e, 0));
			ll = yyjson_get_len(yyjson_arr_get(e, 0));
			r = yyjson_get_str(yyjson_arr_get(e, 1));
			rl = yyjson_get_len(yyjson_arr_get(e, 1));
		} else {
			rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: merge %zu is not two tokens", rank + 1);
			break;
		}
		int ma, mb;
		a.len = b.len = 0;
		if (byte_form_(l, ll, &a, &ma) || byte_form_(r, rl, &b, &mb)) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		int64_t ia = ma ? vocab_find_(t, a.p, a.len) : -1, ib = mb ? vocab_find_(t, b.p, b.len) : -1;
		if (ma && mb && (ia < 0 || ib < 0)) {
			rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: merge %zu: '%.*s' is not in the vocab",
			             rank + 1, (int)(ia < 0 ? ll : rl), ia < 0 ? l : r);
			break;
		}
		if (!ma || !mb)
			continue; /* a pair of tokens no byte sequence reaches: it never applies */
		if (sw_buf_put(&a, b.p, b.len)) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		int64_t in = vocab_find_(t, a.p, a.len);
		if (in < 0) {
			rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: merge %zu: '%.*s%.*s' is not in the vocab",
			             rank + 1, (int)ll, l, (int)rl, r);
			break;
		}
		uint64_t key = (uint64_t)ia << 32 | (uint64_t)ib;
		uint32_t i = (uint32_t)hash64_(key) & t->mmask;
		while (t->mkey[i] != UINT64_MAX && t->mkey[i] != key)
			i = (i + 1) & t->mmask;
		t->nmerges += t->mkey[i] == UINT64_MAX;
		t->mkey[i] = key; /* a pair given twice keeps its last rank, as tokenizers does */
		t->mrank[i] = (uint32_t)rank;
		t->mnew[i] = (uint32_t)in;
	}
	sw_buf_release(&a);
	sw_buf_release(&b);
	return rc;
}

static int load_added_(sw_tokenizer *t, yyjson_val *arr, sw_buf *pool, sw_error *err)
{
	if (!arr || yyjson_is_null(arr))
		return 0;
	if (!yyjson_is_arr(arr))
		return sw_fail(err, SW_EFORMAT, "tokenizer.json: added_tokens is not an array");
	size_t n = yyjson_arr_size(arr);
	t->added = calloc(n ? n : 1, sizeof *t->added);
	if (!t->added)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	sw_buf ap = { 0 };
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		yyjson_val *o = yyjson_arr_get(arr, i), *c = yyjson_obj_get(o, "content");
		added_ *a = &t->added[i];
		int sw, ls, rs, nz, sp, mapped;
		uint32_t id;
		if (!yyjson_is_obj(o) || !yyjson_is_str(c) || !yyjson_get_len(c)) {
			rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: added token %zu has no content", i + 1);
			break;
		}
		if ((rc = get_id_(yyjson_obj_get(o, "id"), "added_tokens", &id, err)) ||
		    (rc = jbool_(o, "single_word", &sw, 0, err)) || (rc = jbool_(o, "lstrip", &ls, 0, err)) ||
		    (rc = jbool_(o, "rstrip", &rs, 0, err)) || (rc = jbool_(o, "normalized", &nz, 0, err)) ||
		    (rc = jbool_(o, "special", &sp, 0, err)))
			break;
		if (sw) {
			rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: added token '%s': single_word is not "
			                              "supported", yyjson_get_str(c));
			break;
		}
		if ((rc = grow_tokens_(t, id + 1, err)))
			break;
		/* the added token's text replaces the vocab's for decoding, as tokenizers has it */
		if ((rc = set_token_(t, pool, id, yyjson_get_str(c), yyjson_get_len(c),
		                     TF_PRESENT | TF_ADDED | (sp ? TF_SPECIAL : 0), &mapped, err)))
			break;
		if (!sp)
			t->tok_flags[id] &= (uint8_t)~TF_SPECIAL;
		a->id = id;
		a->special = (uint8_t)sp;
		a->lstrip = (uint8_t)ls;
		a->rstrip = (uint8_t)rs;
		a->normalized = (uint8_t)nz;
		a->off = (uint32_t)ap.len;
		/* normalized tokens are matched in normalised text, so their content is normalised too */
		if (nz && t->nfc)
			rc = sw_tok_nfc_((const uint8_t *)yyjson_get_str(c), yyjson_get_len(c), &ap) ? SW_ENOMEM : 0;
		else
			rc = sw_buf_put(&ap, yyjson_get_str(c), yyjson_get_len(c)) ? SW_ENOMEM : 0;
		if (rc) {
			sw_fail(err, rc, "out of memory");
			break;
		}
		a->len = (uint32_t)(ap.len - a->off);
		(nz ? t->first_norm : t->first_raw)[ap.p[a->off]] = 1;
		t->nadded++;
	}
	t->added_pool = ap.p;
	return rc;
}

static char *read_file_(const char *path, size_t *len, int *missing, sw_error *err)
{
	*missing = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			*missing = 1;
			return NULL;
		}
		int e = errno;
		sw_fail(err, SW_EIO, "cannot open '%s': %s", path, strerror(e));
		err->sys_errno = e;
		return NULL;
	}
	sw_buf b = { 0 };
	for (;;) {
		if (b.len > MAX_FILE) {
			sw_fail(err, SW_ETOOBIG, "'%s' is larger than %zu bytes", path, MAX_FILE);
			break;
		}
		if (sw_buf_reserve(&b, 1 << 16)) {
			sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		ssize_t r = read(fd, b.p + b.len, b.cap - b.len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			sw_fail(err, SW_EIO, "cannot read '%s': %s", path, strerror(e));
			err->sys_errno = e;
			break;
		}
		if (r == 0) {
			close(fd);
			*len = b.len;
			if (sw_buf_reserve(&b, 1)) {
				sw_buf_release(&b);
				sw_fail(err, SW_ENOMEM, "out of memory");
				return NULL;
			}
			b.p[b.len] = 0;
			return (char *)b.p;
		}
		b.len += (size_t)r;
	}
	close(fd);
	sw_buf_release(&b);
	return NULL;
}

static yyjson_doc *parse_json_(char *text, size_t len, const char *name, sw_error *err)
{
	yyjson_read_err re;
	yyjson_doc *doc = yyjson_read_opts(text, len, 0, NULL, &re);
	if (!doc)
		sw_fail(err, re.code == YYJSON_READ_ERROR_MEMORY_ALLOCATION ? SW_ENOMEM : SW_EFORMAT,
		        "%s: %s at byte %zu", name, re.msg, re.pos);
	else if (!yyjson_is_obj(yyjson_doc_get_root(doc)) ||
	         sw_json_refuse_twins(yyjson_doc_get_root(doc), name, err)) {
		if (!yyjson_is_obj(yyjson_doc_get_root(doc)))
			sw_fail(err, SW_EFORMAT, "%s: not a JSON object", name);
		yyjson_doc_free(doc);
		doc = NULL;
	}
	return doc;
}

void sw_tokenizer_free(sw_tokenizer *t)
{
	if (!t)
		return;
	free(t->pool);
	free(t->tok_off);
	free(t->tok_len);
	free(t->tok_flags);
	free(t->vtab);
	free(t->mkey);
	free(t->mrank);
	free(t->mnew);
	for (size_t i = 0; i < t->nsplits; i++)
		pcre2_code_free(t->splits[i].re);
	free(t->splits);
	pcre2_code_free(t->bl_re);
	free(t->added);
	free(t->added_pool);
	free(t->default_system);
	free(t->bos_text);
	free(t);
}

/* The added-token id whose content is s, else a vocab token whose byte form is s; -1 if none. */
static int64_t find_token_(const sw_tokenizer *t, const char *s, size_t n)
{
	for (size_t i = 0; i < t->nadded; i++) {
		const added_ *a = &t->added[i];
		if (a->len == n && !memcmp(t->added_pool + a->off, s, n))
			return a->id;
	}
	return vocab_find_(t, (const uint8_t *)s, n);
}

/* tokenizer.json's text -> a tokenizer with no config applied yet. */
static sw_tokenizer *load_json_(char *text, size_t len, sw_error *err)
{
	alphabet_init_();
	yyjson_doc *doc = parse_json_(text, len, "tokenizer.json", err);
	if (!doc)
		return NULL;
	sw_tokenizer *t = calloc(1, sizeof *t);
	sw_buf pool = { 0 };
	if (!t) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		yyjson_doc_free(doc);
		return NULL;
	}
	t->jit = 1;
	t->bos = t->eos = t->pad = t->eot = -1;
	t->tmpl = TM_PLAIN;
	yyjson_val *root = yyjson_doc_get_root(doc);
	int rc = load_normalizer_(t, yyjson_obj_get(root, "normalizer"), err);
	if (!rc)
		rc = load_pretok_(t, yyjson_obj_get(root, "pre_tokenizer"), err);
	if (!rc)
		rc = load_decoder_(yyjson_obj_get(root, "decoder"), err);
	if (!rc)
		rc = load_model_(t, yyjson_obj_get(root, "model"), &pool, err);
	if (!rc)
		rc = load_added_(t, yyjson_obj_get(root, "added_tokens"), &pool, err);
	t->pool = pool.p;
	yyjson_doc_free(doc);
	if (!rc && t->nvocab == 0)
		rc = sw_fail(err, SW_EFORMAT, "tokenizer.json: the vocabulary is empty");
	if (rc) {
		sw_tokenizer_free(t);
		return NULL;
	}
	return t;
}

/* A token named in tokenizer_config.json: a string, {"content": ...}, or null. */
static int config_token_(sw_tokenizer *t, yyjson_val *root, const char *key, int *id, char **text,
                         sw_error *err)
{
	yyjson_val *v = yyjson_obj_get(root, key);
	if (yyjson_is_obj(v))
		v = yyjson_obj_get(v, "content");
	if (!v || yyjson_is_null(v))
		return 0;
	if (!yyjson_is_str(v))
		return sw_fail(err, SW_EFORMAT, "tokenizer_config.json: %s is not a string", key);
	int64_t found = find_token_(t, yyjson_get_str(v), yyjson_get_len(v));
	if (found < 0)
		return sw_fail(err, SW_EFORMAT, "tokenizer_config.json: %s '%s' is not a token", key,
		               yyjson_get_str(v));
	*id = (int)found;
	if (text) {
		free(*text);
		*text = strdup(yyjson_get_str(v));
		if (!*text)
			return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	return 0;
}

#include "tokenizer/tokenizer_templates.h"

/*
 * Does template s (already normalised) equal the known text k, where a \x01
 * in k stands for a literal default system prompt?  That prompt goes to
 * *hole (malloc'd) when there is one.  1 yes, 0 no, SW_ENOMEM.
 */
static int template_is_(const char *s, const char *k, char **hole)
{
	const char *h = strchr(k, '\x01');
	*hole = NULL;
	if (!h)
		return !strcmp(s, k);
	size_t pre = (size_t)(h - k), post = strlen(h + 1), n = strlen(s);
	if (n < pre + post || strncmp(s, k, pre) || strcmp(s + n - post, h + 1))
		return 0;
	size_t len = n - pre - post;
	const char *lit = s + pre;
	if (strcspn(lit, "'\"{}\\\n") < len)
		return 0; /* not a plain literal: not the known template */
	*hole = malloc(len + 1);
	if (!*hole)
		return SW_ENOMEM;
	memcpy(*hole, lit, len);
	(*hole)[len] = 0;
	return 1;
}

/*
 * Recognise a chat template: it must be one of the known templates text for
 * text (once "\n" escapes are read as newlines and the ends trimmed, as the
 * two spellings of one template in tokenizer_config.json files differ so).
 * Anything else is "unknown": rendered by no approximation.
 */
static int detect_template_(sw_tokenizer *t, const char *tmpl, sw_error *err)
{
	t->tmpl = tmpl ? TM_UNKNOWN : TM_PLAIN;
	if (!tmpl)
		return 0;
	size_t n = strlen(tmpl);
	char *s = malloc(n + 1), *o = s;
	if (!s)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (const char *p = tmpl; *p; p++) {
		if (p[0] == '\\' && p[1] == 'n') {
			*o++ = '\n';
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = 0;
	char *b = s;
	while (*b == ' ' || *b == '\n' || *b == '\t' || *b == '\r')
		b++;
	while (o > b && (o[-1] == ' ' || o[-1] == '\n' || o[-1] == '\t' || o[-1] == '\r'))
		*--o = 0;
	int rc = 0;
	for (size_t i = 0; i < sizeof known_templates_ / sizeof *known_templates_; i++) {
		char *hole;
		rc = template_is_(b, known_templates_[i].text, &hole);
		if (rc < 0)
			break;
		if (rc == 1) {
			t->tmpl = known_templates_[i].kind;
			free(t->default_system);
			t->default_system = hole;
			rc = 0;
			break;
		}
	}
	free(s);
	if (rc < 0)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (t->tmpl == TM_CHATML || t->tmpl == TM_QWEN25 || t->tmpl == TM_QWEN3)
		t->eot = (int)find_token_(t, "<|im_end|>", 10);
	else if (t->tmpl >= TM_LLAMA3 && t->tmpl <= TM_LLAMA32)
		t->eot = (int)find_token_(t, "<|eot_id|>", 10);
	return 0;
}

/*
 * Apply tokenizer_config.json's text: BOS/EOS/PAD and the chat template.
 * dir, when not NULL, is where a chat_template.jinja may hold the template.
 */
static int apply_config_(sw_tokenizer *t, const char *ctext, size_t clen, const char *dir,
                         sw_error *err)
{
	char path[4096];
	size_t len;
	int missing;
	/* yyjson reads in place only with a flag we do not pass, but wants a mutable pointer */
	char *text = malloc(clen + 1);
	if (!text)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memcpy(text, ctext, clen);
	text[clen] = 0;
	yyjson_doc *doc = parse_json_(text, clen, "tokenizer_config.json", err);
	if (!doc) {
		free(text);
		return err->code;
	}
	yyjson_val *root = yyjson_doc_get_root(doc);
	int rc = config_token_(t, root, "bos_token", &t->bos, &t->bos_text, err);
	if (!rc)
		rc = config_token_(t, root, "eos_token", &t->eos, NULL, err);
	if (!rc)
		rc = config_token_(t, root, "pad_token", &t->pad, NULL, err);
	yyjson_val *ct = yyjson_obj_get(root, "chat_template");
	if (!rc && yyjson_is_arr(ct)) {
		/* named templates: the one called "default" is what apply_chat_template uses */
		yyjson_val *def = NULL;
		for (size_t i = 0; i < yyjson_arr_size(ct); i++) {
			yyjson_val *e = yyjson_arr_get(ct, i), *nm = yyjson_obj_get(e, "name");
			if (yyjson_is_str(nm) && !strcmp(yyjson_get_str(nm), "default"))
				def = yyjson_obj_get(e, "template");
		}
		ct = def;
		if (!def)
			t->tmpl = TM_UNKNOWN;
	}
	if (!rc && ct && !yyjson_is_null(ct) && !yyjson_is_str(ct))
		rc = sw_fail(err, SW_EFORMAT, "tokenizer_config.json: chat_template is not a string");
	char *jinja = NULL;
	if (!rc && dir && (!ct || yyjson_is_null(ct)) && t->tmpl != TM_UNKNOWN) {
		/* newer transformers keep the template in a file of its own */
		snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
		jinja = read_file_(path, &len, &missing, err);
		if (!jinja && !missing)
			rc = err->code;
	}
	if (!rc && t->tmpl != TM_UNKNOWN)
		rc = detect_template_(t, jinja ? jinja : yyjson_is_str(ct) ? yyjson_get_str(ct) : NULL, err);
	free(jinja);
	yyjson_doc_free(doc);
	free(text);
	return rc;
}

static int load_config_(sw_tokenizer *t, const char *dir, sw_error *err)
{
	char path[4096];
	size_t len;
	int missing;
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	char *text = read_file_(path, &len, &missing, err);
	if (!text)
		return missing ? 0 : err->code;
	int rc = apply_config_(t, text, len, dir, err);
	free(text);
	return rc;
}

sw_tokenizer *sw_tokenizer_from_json(const char *json, size_t len, const char *config, size_t clen,
                                     sw_error *err)
{
	if (!json)
		return sw_fail(err, SW_EINVAL, "no tokenizer.json text"), NULL;
	char *text = malloc(len + 1);
	if (!text)
		return sw_fail(err, SW_ENOMEM, "out of memory"), NULL;
	memcpy(text, json, len);
	text[len] = 0;
	sw_tokenizer *t = load_json_(text, len, err);
	free(text);
	if (t && config && apply_config_(t, config, clen, NULL, err)) {
		sw_tokenizer_free(t);
		t = NULL;
	}
	return t;
}

sw_tokenizer *sw_tokenizer_load(const char *dir, sw_error *err)
{
	char path[4096];
	size_t len;
	int missing;
	if (!dir)
		return sw_fail(err, SW_EINVAL, "no model directory"), NULL;
	if (strlen(dir) > sizeof path - 64)
		return sw_fail(err, SW_EINVAL, "model directory name too long"), NULL;
	struct stat st;
	int bad = stat(dir, &st) != 0;
	if (bad || !S_ISDIR(st.st_mode)) {
		int e = bad ? errno : ENOTDIR;
		sw_fail(err, SW_EIO, "cannot open model directory '%s': %s", dir, strerror(e));
		if (err)
			err->sys_errno = e;
		return NULL;
	}
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	char *text = read_file_(path, &len, &missing, err);
	if (!text && !missing)
		return NULL;
	if (!text) {
		static const char *const foreign[] = { "tokenizer.model", "vocab.json", "merges.txt",
			                               "vocab.txt" };
		for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
			snprintf(path, sizeof path, "%s/%s", dir, foreign[i]);
			if (!access(path, F_OK))
				return sw_fail(err, SW_EFORMAT, "'%s/%s' without tokenizer.json is not supported",
				               dir, foreign[i]), NULL;
		}
		sw_tokenizer *t = sw_tokenizer_byte();
		if (!t)
			sw_fail(err, SW_ENOMEM, "out of memory");
		return t;
	}
	sw_tokenizer *t = load_json_(text, len, err);
	free(text);
	if (t && load_config_(t, dir, err)) {
		sw_tokenizer_free(t);
		t = NULL;
	}
	return t;
}

/* ---- the byte tokenizer --------------------------------------------------------- */

static const char *const byte_specials_[] = { "<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>",
	                                      "<|im_end|>" };

static const char chatml_template_[] =
	"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
	" + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
	"{% endif %}";

/* A JSON string literal of s (s holds no control characters but \n). */
static int put_jstr_(sw_buf *b, const char *s)
{
	int rc = sw_buf_put(b, "\"", 1);
	for (; *s && !rc; s++) {
		if (*s == '"' || *s == '\\')
			rc = sw_buf_put(b, "\\", 1) || sw_buf_put(b, s, 1);
		else if (*s == '\n')
			rc = sw_buf_put(b, "\\n", 2);
		else
			rc = sw_buf_put(b, s, 1);
	}
	return rc || sw_buf_put(b, "\"", 1) ? SW_ENOMEM : 0;
}

static int byte_json_(sw_buf *b)
{
	alphabet_init_();
	char tmp[320];
	int rc = 0;
	rc |= sw_buf_put(b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[", 66);
	for (int i = 0; i < 5; i++) {
		int n = snprintf(tmp, sizeof tmp,
		                 "%s{\"id\":%d,\"content\":\"%s\",\"single_word\":false,\"lstrip\":false,"
		                 "\"rstrip\":false,\"normalized\":false,\"special\":true}",
		                 i ? "," : "", 256 + i, byte_specials_[i]);
		rc |= sw_buf_put(b, tmp, (size_t)n);
	}
	static const char mid[] =
		"],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
		"\"trim_offsets\":true,\"use_regex\":false},\"post_processor\":null,\"decoder\":{\"type\":"
		"\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":"
		"{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
		"\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":"
		"false,\"vocab\":{";
	rc |= sw_buf_put(b, mid, sizeof mid - 1);
	for (int i = 0; i < 256; i++) {
		int e = 0;
		rc |= sw_buf_put(b, i ? ",\"" : "\"", i ? 2 : 1);
		if (b2u_[i] == '"' || b2u_[i] == '\\')
			rc |= sw_buf_put(b, "\\", 1);
		put_utf8_(b, b2u_[i], &e);
		int n = snprintf(tmp, sizeof tmp, "\":%d", i);
		rc |= e | sw_buf_put(b, tmp, (size_t)n);
	}
	rc |= sw_buf_put(b, "},\"merges\":[]}}\n", 16);
	return rc ? SW_ENOMEM : 0;
}

static int byte_config_json_(sw_buf *b)
{
	static const char head[] =
		"{\"tokenizer_class\":\"PreTrainedTokenizerFast\",\"bos_token\":\"<|bos|>\","
		"\"eos_token\":\"<|eos|>\",\"pad_token\":\"<|pad|>\",\"clean_up_tokenization_spaces\":false,"
		"\"chat_template\":";
	if (sw_buf_put(b, head, sizeof head - 1) || put_jstr_(b, chatml_template_) || sw_buf_put(b, "}\n", 2))
		return SW_ENOMEM;
	return 0;
}

sw_tokenizer *sw_tokenizer_byte(void)
{
	sw_buf j = { 0 };
	sw_error err = { 0 };
	if (byte_json_(&j)) {
		sw_buf_release(&j);
		return NULL;
	}
	sw_tokenizer *t = load_json_((char *)j.p, j.len, &err);
	sw_buf_release(&j);
	if (!t)
		return NULL; /* only out of memory: the text above is known good */
	t->bos = SW_TOK_BYTE_BOS;
	t->eos = SW_TOK_BYTE_EOS;
	t->pad = SW_TOK_BYTE_PAD;
	t->bos_text = strdup("<|bos|>");
	if (!t->bos_text || detect_template_(t, chatml_template_, &err)) {
		sw_tokenizer_free(t);
		return NULL;
	}
	return t;
}

static int write_atomic_(const char *dir, const char *name, const sw_buf *b, sw_error *err)
{
	char path[4096], tmp[4096];
	if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path ||
	    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= (int)sizeof tmp)
		return sw_fail(err, SW_EINVAL, "model directory name too long");
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		int e = errno;
		sw_fail(err, SW_EIO, "cannot create '%s': %s", tmp, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	size_t w = fwrite(b->p, 1, b->len, f);
	int bad = w != b->len || fflush(f) != 0 || ferror(f);
	int e = errno;
	if (fclose(f) != 0 && !bad)
		bad = 1, e = errno;
	if (!bad && rename(tmp, path) != 0)
		bad = 1, e = errno;
	if (bad) {
		unlink(tmp);
		sw_fail(err, SW_EIO, "cannot write '%s': %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	return 0;
}

int sw_tokenizer_save_byte(const char *dir, sw_error *err)
{
	if (!dir)
		return sw_fail(err, SW_EINVAL, "no model directory");
	sw_buf j = { 0 }, c = { 0 };
	int rc = byte_json_(&j) || byte_config_json_(&c) ? sw_fail(err, SW_ENOMEM, "out of memory") : 0;
	if (!rc)
		rc = write_atomic_(dir, "tokenizer.json", &j, err);
	if (!rc)
		rc = write_atomic_(dir, "tokenizer_config.json", &c, err);
	sw_buf_release(&j);
	sw_buf_release(&c);
	return rc;
}

/* ---- accessors ------------------------------------------------------------------ */

size_t sw_tokenizer_vocab(const sw_tokenizer *t) { return t ? t->nvocab : 0; }
int sw_tokenizer_bos(const sw_tokenizer *t) { return t ? t->bos : -1; }
int sw_tokenizer_eos(const sw_tokenizer *t) { return t ? t->eos : -1; }
int sw_tokenizer_pad(const sw_tokenizer *t) { return t ? t->pad : -1; }

int sw_tokenizer_token_id(const sw_tokenizer *t, const char *token)
{
	if (!t || !token)
		return -1;
	return (int)find_token_(t, token, strlen(token));
}

int sw_tokenizer_is_special(const sw_tokenizer *t, uint32_t id)
{
	return t && id < t->nvocab && (t->tok_flags[id] & TF_SPECIAL);
}

size_t sw_tokenizer_stop_ids(const sw_tokenizer *t, uint32_t *ids, size_t max)
{
	size_t n = 0;
	if (!t)
		return 0;
	if (t->eos >= 0) {
		if (n < max)
			ids[n] = (uint32_t)t->eos;
		n++;
	}
	if (t->eot >= 0 && t->eot != t->eos) {
		if (n < max)
			ids[n] = (uint32_t)t->eot;
		n++;
	}
	return n;
}

const char *sw_tokenizer_template(const sw_tokenizer *t)
{
	static const char *const names[] = { "plain", "chatml", "llama3", "llama3", "llama3",
		                             "chatml", "chatml", "unknown" };
	return t ? names[t->tmpl] : "unknown";
}

/* ---- encoding ------------------------------------------------------------------- */

typedef struct sym_ {
	uint32_t id;
	int32_t prev, next;
} sym_;

typedef struct merge_ {
	uint32_t rank, pos, nid;
} merge_;

typedef struct centry_ {
	uint64_t h;
	uint32_t koff, klen, ioff, icnt; /* klen == 0: empty slot */
} centry_;

typedef struct enc_ {
	const sw_tokenizer *t;
	int special;
	sw_error *err;
	uint32_t *ids;
	size_t n, cap;
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
	sym_ *syms;
	merge_ *heap;
	size_t symcap;
	sw_buf norm, pre;     /* NFC text; ByteLevel piece with its prefix space */
	centry_ *ctab;        /* the cache of pieces: bytes -> ids */
	size_t cmask, cused, merged;
	sw_buf ckeys, cids;
} enc_;

static int emit_(enc_ *e, uint32_t id)
{
	if (e->n == e->cap) {
		size_t nc = e->cap ? e->cap * 2 : 256;
		uint32_t *p = realloc(e->ids, nc * sizeof *p);
		if (!p)
			return sw_fail(e->err, SW_ENOMEM, "out of memory");
		e->ids = p;
		e->cap = nc;
	}
	e->ids[e->n++] = id;
	return 0;
}

static int heap_less_(const merge_ *a, const merge_ *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push_(merge_ *h, size_t *n, merge_ m)
{
	size_t i = (*n)++;
	while (i) {
		size_t p = (i - 1) / 2;
		if (!heap_less_(&m, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = m;
}

static merge_ heap_pop_(merge_ *h, size_t *n)
{
	merge_ top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less_(&h[c + 1], &h[c]))
			c++;
		if (!heap_less_(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* BPE over one piece: byte symbols, merged lowest rank first (leftmost on ties). */
static int bpe_merge_(enc_ *e, const uint8_t *p, size_t n)
{
	const sw_tokenizer *t = e->t;
	if (n > e->symcap) {
		size_t nc = n < 64 ? 64 : n;
		sym_ *s = realloc(e->syms, nc * sizeof *s);
		if (s)
			e->syms = s;
		/* every merge pushes at most two entries: room for n + 2n */
		merge_ *h = realloc(e->heap, 3 * nc * sizeof *h);
		if (h)
			e->heap = h;
		if (!s || !h)
			return sw_fail(e->err, SW_ENOMEM, "out of memory");
		e->symcap = nc;
	}
	sym_ *s = e->syms;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_id[p[i]];
		if (id < 0) {
			if (t->unk_id < 0)
				return sw_fail(e->err, SW_EFORMAT, "byte 0x%02x has no token and there is no "
				                                   "unk_token", p[i]);
			if (t->fuse_unk && m && s[m - 1].id == (uint32_t)t->unk_id)
				continue;
			id = t->unk_id;
		}
		s[m].id = (uint32_t)id;
		s[m].prev = (int32_t)m - 1;
		s[m].next = (int32_t)m + 1;
		m++;
	}
	if (!m)
		return 0;
	s[m - 1].next = -1;
	size_t hn = 0;
	uint32_t rank, nid;
	for (size_t i = 0; i + 1 < m; i++)
		if (merge_find_(t, s[i].id, s[i + 1].id, &rank, &nid))
			heap_push_(e->heap, &hn, (merge_){ rank, (uint32_t)i, nid });
	while (hn) {
		merge_ top = heap_pop_(e->heap, &hn);
		sym_ *a = &s[top.pos];
		if (a->id == UINT32_MAX || a->next < 0)
			continue;
		sym_ *b = &s[a->next];
		if (!merge_find_(t, a->id, b->id, &rank, &nid) || nid != top.nid)
			continue; /* stale: one side has merged since this entry was pushed */
		a->id = nid;
		b->id = UINT32_MAX;
		a->next = b->next;
		if (a->next >= 0)
			s[a->next].prev = (int32_t)top.pos;
		if (a->prev >= 0 && merge_find_(t, s[a->prev].id, a->id, &rank, &nid))
			heap_push_(e->heap, &hn, (merge_){ rank, (uint32_t)a->prev, nid });
		if (a->next >= 0 && merge_find_(t, a->id, s[a->next].id, &rank, &nid))
			heap_push_(e->heap, &hn, (merge_){ rank, top.pos, nid });
	}
	for (int32_t i = 0; i >= 0; i = s[i].next)
		if (emit_(e, s[i].id))
			return SW_ENOMEM;
	return 0;
}

static int cache_grow_(enc_ *e)
{
	size_t ncap = e->ctab ? (e->cmask + 1) * 2 : 1024;
	centry_ *nt = calloc(ncap, sizeof *nt);
	if (!nt)
		return SW_ENOMEM;
	for (size_t i = 0; e->ctab && i <= e->cmask; i++) {
		if (!e->ctab[i].klen)
			continue;
		size_t j = e->ctab[i].h & (ncap - 1);
		while (nt[j].klen)
			j = (j + 1) & (ncap - 1);
		nt[j] = e->ctab[i];
	}
	free(e->ctab);
	e->ctab = nt;
	e->cmask = ncap - 1;
	return 0;
}

static int bpe_(enc_ *e, const uint8_t *p, size_t n)
{
	const sw_tokenizer *t = e->t;
	if (!n)
		return 0;
	if (n == 1 && t->byte_id[p[0]] >= 0)
		return emit_(e, (uint32_t)t->byte_id[p[0]]);
	if (t->ignore_merges) {
		int64_t id = vocab_find_(t, p, n);
		if (id >= 0)
			return emit_(e, (uint32_t)id);
	}
	if (n > CACHE_PIECE_MAX)
		return bpe_merge_(e, p, n);
	uint64_t h = hash_(p, n);
	size_t j = 0;
	if (e->ctab) {
		for (j = h & e->cmask; e->ctab[j].klen; j = (j + 1) & e->cmask) {
			centry_ *c = &e->ctab[j];
			if (c->h == h && c->klen == n && !memcmp(e->ckeys.p + c->koff, p, n)) {
				const uint32_t *ids = (const uint32_t *)(void *)e->cids.p + c->ioff;
				for (uint32_t k = 0; k < c->icnt; k++)
					if (emit_(e, ids[k]))
						return SW_ENOMEM;
				return 0;
			}
		}
	}
	size_t before = e->n;
	int rc = bpe_merge_(e, p, n);
	/* a short text is done before a cache would pay for itself */
	if (rc || e->cused >= CACHE_MAX || ++e->merged < 32)
		return rc;
	if (!e->ctab || 2 * (e->cused + 1) > e->cmask + 1) {
		if (cache_grow_(e))
			return 0; /* no room to cache: the result stands all the same */
		for (j = h & e->cmask; e->ctab[j].klen; j = (j + 1) & e->cmask)
			;
	}
	size_t cnt = e->n - before;
	if (sw_buf_reserve(&e->ckeys, n) || sw_buf_reserve(&e->cids, cnt * sizeof(uint32_t)) ||
	    e->cids.len / sizeof(uint32_t) + cnt > UINT32_MAX || e->ckeys.len + n > UINT32_MAX)
		return 0;
	centry_ *c = &e->ctab[j];
	c->h = h;
	c->koff = (uint32_t)e->ckeys.len;
	c->klen = (uint32_t)n;
	c->ioff = (uint32_t)(e->cids.len / sizeof(uint32_t));
	c->icnt = (uint32_t)cnt;
	sw_buf_put(&e->ckeys, p, n);
	sw_buf_put(&e->cids, e->ids + before, cnt * sizeof(uint32_t));
	e->cused++;
	return 0;
}

/* The first match of re in p[0..n) at or after start: 1 with [*ms, *me), 0 for none, or an error. */
static int match_(enc_ *e, const pcre2_code *re, const uint8_t *p, size_t n, size_t start, size_t *ms,
                  size_t *me)
{
	int rc = e->t->jit ? pcre2_jit_match(re, p, n, start, PCRE2_NO_UTF_CHECK, e->md, e->mc)
	                   : pcre2_match(re, p, n, start, PCRE2_NO_UTF_CHECK, e->md, e->mc);
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->js) {
		/* a long run the JIT's default 32 KiB stack cannot hold: a larger one, made only now,
		 * since an 8 MiB mapping per call would cost more than short texts take to encode */
		e->js = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
		if (!e->js)
			return sw_fail(e->err, SW_ENOMEM, "out of memory");
		pcre2_jit_stack_assign(e->mc, NULL, e->js);
		rc = pcre2_jit_match(re, p, n, start, PCRE2_NO_UTF_CHECK, e->md, e->mc);
	}
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* deeper still: the interpreter keeps its frames on the heap */
		rc = pcre2_match(re, p, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, e->mc);
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc < 0) {
		PCRE2_UCHAR msg[120];
		pcre2_get_error_message(rc, msg, sizeof msg);
		return sw_fail(e->err, SW_ERANGE, "pre-tokenizer regex: %s", (const char *)msg);
	}
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
	*ms = ov[0];
	*me = ov[1];
	return 1;
}

static size_t char_len_(const uint8_t *p, size_t n, size_t i)
{
	size_t s = i + 1;
	while (s < n && (p[s] & 0xc0) == 0x80)
		s++;
	return s - i;
}

/*
 * The next match as tokenizers' regex iteration (the onig crate's
 * find_iter) yields it: from *start on, empty matches included, except an
 * empty one right where the last match ended (*last, or SIZE_MAX for none),
 * which moves the search one character on.  1, 0 at the end, or an error.
 */
static int find_(enc_ *e, const pcre2_code *re, const uint8_t *p, size_t n, size_t *start,
                 size_t *last, size_t *ms, size_t *me)
{
	for (;;) {
		if (*start > n)
			return 0;
		int rc = match_(e, re, p, n, *start, ms, me);
		if (rc <= 0)
			return rc;
		if (*ms == *me && *last == *me) {
			*start += *start < n ? char_len_(p, n, *start) : 1;
			continue;
		}
		*start = *last = *me;
		return 1;
	}
}

static int pipe_(enc_ *e, size_t step, const uint8_t *p, size_t n);

/* ByteLevel: the prefix space, the GPT-2 regex when asked, then BPE on each piece. */
static int bytelevel_(enc_ *e, const uint8_t *p, size_t n)
{
	const sw_tokenizer *t = e->t;
	if (t->prefix_space && p[0] != ' ') {
		e->pre.len = 0;
		if (sw_buf_put(&e->pre, " ", 1) || sw_buf_put(&e->pre, p, n))
			return sw_fail(e->err, SW_ENOMEM, "out of memory");
		p = e->pre.p;
		n = e->pre.len;
	}
	if (!t->bl_re)
		return bpe_(e, p, n);
	size_t start = 0, last = 0, lastm = SIZE_MAX, ms, me;
	int rc;
	/* Isolated: matches and the gaps between them are pieces alike */
	while ((rc = find_(e, t->bl_re, p, n, &start, &lastm, &ms, &me)) == 1) {
		if ((ms > last && bpe_(e, p + last, ms - last)) || bpe_(e, p + ms, me - ms))
			return e->err->code;
		last = me;
	}
	if (rc)
		return rc;
	return last < n ? bpe_(e, p + last, n - last) : 0;
}

/*
 * Split step: the matches of the regex and the gaps between them, made into
 * pieces as the behaviour says (tokenizers' SplitDelimiterBehavior), each
 * handed to the next step.
 */
static int split_step_(enc_ *e, size_t step, const uint8_t *p, size_t n)
{
	const split_ *sp = &e->t->splits[step];
	sw_buf spans = { 0 }; /* (start, end, is_match) triples covering p[0..n), empty matches too */
	size_t start = 0, lastm = SIZE_MAX, prev = 0, ms, me, v[3];
	int rc;
	while ((rc = find_(e, sp->re, p, n, &start, &lastm, &ms, &me)) == 1) {
		if (ms > prev) {
			v[0] = prev, v[1] = ms, v[2] = (size_t)sp->invert;
			if (sw_buf_put(&spans, v, sizeof v))
				goto oom;
		}
		v[0] = ms, v[1] = me, v[2] = (size_t)!sp->invert;
		if (sw_buf_put(&spans, v, sizeof v))
			goto oom;
		prev = me;
	}
	if (rc < 0)
		goto out;
	if (n > prev) {
		v[0] = prev, v[1] = n, v[2] = (size_t)sp->invert;
		if (sw_buf_put(&spans, v, sizeof v))
			goto oom;
	}
	rc = 0;
	size_t *sv = (size_t *)(void *)spans.p, ns = spans.len / sizeof v, k = 0;
	/* fold the spans in place into pieces; a piece's flag is its last span's */
	for (size_t i = 0; i < ns; i++) {
		size_t *c = sv + 3 * i, *last = k ? sv + 3 * (k - 1) : NULL;
		int m = (int)c[2];
		switch (sp->behavior) {
		case BH_REMOVED:
			if (m)
				continue;
			break;
		case BH_MERGED_PREV:
			/* a match joins the piece before it, unless that ended in a match */
			if (m && last && !last[2]) {
				last[1] = c[1], last[2] = 1;
				continue;
			}
			break;
		case BH_MERGED_NEXT:
			/* a gap joins a match that stands alone before it */
			if (!m && last && last[2]) {
				last[1] = c[1], last[2] = 0;
				continue;
			}
			break;
		case BH_CONTIGUOUS:
			if (last && last[2] == c[2]) {
				last[1] = c[1];
				continue;
			}
			break;
		}
		memmove(sv + 3 * k, c, sizeof v);
		k++;
	}
	for (size_t i = 0; i < k && !rc; i++) /* pipe_ passes over empty pieces, as tokenizers drops them */
		rc = pipe_(e, step + 1, p + sv[3 * i], sv[3 * i + 1] - sv[3 * i]);
	goto out;
oom:
	rc = sw_fail(e->err, SW_ENOMEM, "out of memory");
out:
	sw_buf_release(&spans);
	return rc;
}

static int pipe_(enc_ *e, size_t step, const uint8_t *p, size_t n)
{
	if (!n)
		return 0;
	return step < e->t->nsplits ? split_step_(e, step, p, n) : bytelevel_(e, p, n);
}

/* Rust's char::is_whitespace (the White_Space property), which lstrip/rstrip use. */
static size_t space_len_(const uint8_t *p, size_t n)
{
	uint32_t c;
	size_t k = utf8_len_(p, n, &c);
	if (!k)
		return 0;
	int ws = (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	         c == 0x205f || c == 0x3000;
	return ws ? k : 0;
}

/* The longest added token of this pass (normalized or not) at p[0..n), or NULL. */
static const added_ *added_at_(const sw_tokenizer *t, const uint8_t *p, size_t n, int norm)
{
	const added_ *best = NULL;
	for (size_t i = 0; i < t->nadded; i++) {
		const added_ *a = &t->added[i];
		if (a->normalized == norm && a->len <= n && (!best || a->len > best->len) &&
		    t->added_pool[a->off] == p[0] && !memcmp(t->added_pool + a->off, p, a->len))
			best = a;
	}
	return best;
}

typedef int (*seg_fn_)(enc_ *e, const uint8_t *p, size_t n);

/*
 * Split p[0..n) at the added tokens of one pass (leftmost-longest), handing
 * the text between them to fn.  A special token skipped (special == 0) is
 * text, and matching goes on after it, as tokenizers does.
 */
static int added_pass_(enc_ *e, const uint8_t *p, size_t n, int norm, seg_fn_ fn)
{
	const sw_tokenizer *t = e->t;
	const uint8_t *first = norm ? t->first_norm : t->first_raw;
	size_t done = 0, i = 0;
	int rc;
	while (i < n) {
		if (!first[p[i]]) {
			i++;
			continue;
		}
		const added_ *a = added_at_(t, p + i, n - i, norm);
		if (!a) {
			i++;
			continue;
		}
		if (a->special && !e->special) {
			i += a->len;
			continue;
		}
		size_t s = i, en = i + a->len;
		if (a->lstrip)
			while (s > done) {
				size_t k = 0; /* step back over one whitespace character */
				for (size_t b = 1; b <= 4 && b <= s - done && !k; b++)
					if (space_len_(p + s - b, b) == b)
						k = b;
				if (!k)
					break;
				s -= k;
			}
		if (a->rstrip)
			for (size_t k; en < n && (k = space_len_(p + en, n - en));)
				en += k;
		if (s > done && (rc = fn(e, p + done, s - done)))
			return rc;
		if ((rc = emit_(e, a->id)))
			return rc;
		done = i = en;
	}
	return done < n ? fn(e, p + done, n - done) : 0;
}

static int normalized_seg_(enc_ *e, const uint8_t *p, size_t n)
{
	return pipe_(e, 0, p, n);
}

/* Text between raw added tokens: valid UTF-8 runs normalised and split again; other bytes alone. */
static int raw_seg_(enc_ *e, const uint8_t *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t j = i;
		uint32_t cp;
		size_t k;
		while (j < n && (k = utf8_len_(p + j, n - j, &cp)))
			j += k;
		if (j > i) {
			const uint8_t *q = p + i;
			size_t qn = j - i;
			int rc;
			if (e->t->nfc) {
				e->norm.len = 0;
				if (sw_tok_nfc_(q, qn, &e->norm))
					return sw_fail(e->err, SW_ENOMEM, "out of memory");
				/* the normalised run is copied: pieces of it outlive e->norm's next use */
				uint8_t *cp2 = malloc(e->norm.len ? e->norm.len : 1);
				if (!cp2)
					return sw_fail(e->err, SW_ENOMEM, "out of memory");
				memcpy(cp2, e->norm.p, e->norm.len);
				rc = added_pass_(e, cp2, e->norm.len, 1, normalized_seg_);
				free(cp2);
			} else {
				rc = added_pass_(e, q, qn, 1, normalized_seg_);
			}
			if (rc)
				return rc;
		}
		if (j < n) {
			/* a byte that begins no valid UTF-8 sequence: a piece of its own */
			int rc = bpe_(e, p + j, 1);
			if (rc)
				return rc;
			j++;
		}
		i = j;
	}
	return 0;
}

int sw_tokenizer_encode(const sw_tokenizer *t, const char *text, size_t len, int special,
                        uint32_t **ids, size_t *n, sw_error *err)
{
	if (!t || (!text && len) || !ids || !n)
		return sw_fail(err, SW_EINVAL, "bad arguments to sw_tokenizer_encode");
	*ids = NULL;
	*n = 0;
	sw_error dummy;
	enc_ e = { .t = t, .special = special, .err = err ? err : &dummy };
	int rc = 0;
	if (t->nsplits || t->bl_re) {
		e.md = pcre2_match_data_create(8, NULL);
		e.mc = pcre2_match_context_create(NULL);
		if (!e.md || !e.mc)
			rc = sw_fail(e.err, SW_ENOMEM, "out of memory");
	}
	if (!rc && len)
		rc = added_pass_(&e, (const uint8_t *)text, len, 0, raw_seg_);
	if (!rc && !e.ids)
		e.ids = malloc(sizeof *e.ids); /* a valid pointer for an empty result */
	if (!rc && !e.ids)
		rc = sw_fail(e.err, SW_ENOMEM, "out of memory");
	pcre2_match_data_free(e.md);
	pcre2_match_context_free(e.mc);
	pcre2_jit_stack_free(e.js);
	free(e.syms);
	free(e.heap);
	sw_buf_release(&e.norm);
	sw_buf_release(&e.pre);
	free(e.ctab);
	sw_buf_release(&e.ckeys);
	sw_buf_release(&e.cids);
	if (rc) {
		free(e.ids);
		return rc;
	}
	*ids = e.ids;
	*n = e.n;
	return 0;
}

/*
 * The bytes of ids: raw (as the tokens hold them), or as tokenizers' decode
 * makes text of them: the bytes of the model's tokens between two added
 * tokens are one piece whose invalid UTF-8 becomes U+FFFD (from_utf8_lossy),
 * an added token's text is a piece of its own, and skipped special tokens
 * join the pieces on either side of them.
 */
static int decode_(const sw_tokenizer *t, const uint32_t *ids, size_t n, int skip_special, int lossy,
                   char **text, size_t *len, sw_error *err)
{
	if (!t || (!ids && n) || !text || !len)
		return sw_fail(err, SW_EINVAL, "bad arguments to sw_tokenizer_decode");
	*text = NULL;
	*len = 0;
	sw_buf b = { 0 }, piece = { 0 };
	int rc = 0;
	for (size_t i = 0; i <= n && !rc; i++) {
		uint32_t id = i < n ? ids[i] : 0;
		if (i < n && (id >= t->nvocab || !(t->tok_flags[id] & TF_PRESENT))) {
			rc = sw_fail(err, SW_ERANGE, "token %zu: id %u is not in the vocabulary", i + 1, id);
			break;
		}
		if (i < n && skip_special && (t->tok_flags[id] & TF_SPECIAL))
			continue;
		const uint8_t *p = i < n ? t->pool + t->tok_off[id] : NULL;
		size_t k = i < n ? t->tok_len[id] : 0;
		if (!lossy) {
			rc = sw_buf_put(&b, p, k);
		} else if (i < n && !(t->tok_flags[id] & TF_ADDED)) {
			rc = sw_buf_put(&piece, p, k);
		} else { /* an added token, or the end: the piece before it is done */
			rc = sw_utf8_lossy(&b, piece.p, piece.len) || sw_utf8_lossy(&b, p, k);
			piece.len = 0;
		}
	}
	if (!rc && sw_buf_put(&b, "", 1))
		rc = SW_ENOMEM;
	sw_buf_release(&piece);
	if (rc) {
		sw_buf_release(&b);
		return rc == SW_ERANGE ? rc : sw_fail(err, SW_ENOMEM, "out of memory");
	}
	*text = (char *)b.p;
	*len = b.len - 1;
	return 0;
}

int sw_tokenizer_decode(const sw_tokenizer *t, const uint32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, sw_error *err)
{
	return decode_(t, ids, n, skip_special, 1, text, len, err);
}

int sw_tokenizer_decode_bytes(const sw_tokenizer *t, const uint32_t *ids, size_t n, int skip_special,
                              char **text, size_t *len, sw_error *err)
{
	return decode_(t, ids, n, skip_special, 0, text, len, err);
}

/* ---- chat templates ------------------------------------------------------------- */

/* Python's str.isspace(), which Jinja's trim uses: the whitespace of the Llama 3 template. */
static size_t py_space_(const uint8_t *p, size_t n)
{
	uint32_t c;
	size_t k = utf8_len_(p, n, &c);
	if (!k)
		return 0;
	int ws = (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	         c == 0x202f || c == 0x205f || c == 0x3000;
	return ws ? k : 0;
}

static int put_trimmed_(sw_buf *b, const char *s)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t n = strlen(s), i = 0, k;
	while (i < n && (k = py_space_(p + i, n - i)))
		i += k;
	size_t end = i;
	for (size_t j = i; j < n;) {
		k = py_space_(p + j, n - j);
		if (k) {
			j += k;
			continue;
		}
		uint32_t cp;
		size_t l = utf8_len_(p + j, n - j, &cp);
		j += l ? l : 1;
		end = j;
	}
	return sw_buf_put(b, p + i, end - i);
}

static int puts_(sw_buf *b, const char *s) { return sw_buf_put(b, s, strlen(s)); }
static int putn_(sw_buf *b, const char *s, size_t n) { return sw_buf_put(b, s, n); }

/* Qwen's tool turns: consecutive "tool" messages share one user turn of <tool_response>s. */
static int qwen_tool_(sw_buf *b, const sw_chat_msg *m, size_t n, size_t i)
{
	int rc = 0;
	if (i == 0 || strcmp(m[i - 1].role, "tool"))
		rc |= puts_(b, "<|im_start|>user");
	rc |= puts_(b, "\n<tool_response>\n") | puts_(b, m[i].content) | puts_(b, "\n</tool_response>");
	if (i + 1 == n || strcmp(m[i + 1].role, "tool"))
		rc |= puts_(b, "<|im_end|>\n");
	return rc;
}

static int ends_with_(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Python's s.strip('\n'), s.lstrip('\n'), s.rstrip('\n') on p[0..n): the span that stays. */
static void strip_nl_(const char **p, size_t *n, int left, int right)
{
	while (left && *n && **p == '\n')
		(*p)++, (*n)--;
	while (right && *n && (*p)[*n - 1] == '\n')
		(*n)--;
}

/* Qwen3: an assistant turn, its <think> block kept only after the last user query. */
static int qwen3_assistant_(sw_buf *b, const sw_chat_msg *m, size_t n, size_t i, size_t last_query)
{
	const char *c = m[i].content, *reason = "";
	size_t clen = strlen(c), rlen = 0;
	const char *end = strstr(c, "</think>");
	if (end) {
		/* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
		const char *r = c, *q;
		for (q = c; (q = strstr(q, "<think>")) && q < end; q += 7)
			r = q + 7;
		reason = r;
		rlen = (size_t)(end - r);
		strip_nl_(&reason, &rlen, 0, 1);
		strip_nl_(&reason, &rlen, 1, 0);
		/* content.split('</think>')[-1].lstrip('\n') */
		const char *last = end;
		for (q = end; (q = strstr(q + 1, "</think>"));)
			last = q;
		c = last + 8;
		clen = strlen(c);
		strip_nl_(&c, &clen, 1, 0);
	}
	int rc = 0;
	if (i > last_query && (i + 1 == n || rlen)) {
		strip_nl_(&reason, &rlen, 1, 1);
		strip_nl_(&c, &clen, 1, 0);
		rc |= puts_(b, "<|im_start|>assistant\n<think>\n") | putn_(b, reason, rlen) |
		      puts_(b, "\n</think>\n\n") | putn_(b, c, clen);
	} else {
		rc |= puts_(b, "<|im_start|>assistant\n") | putn_(b, c, clen);
	}
	return rc | puts_(b, "<|im_end|>\n");
}

/* transformers' tojson of a string: json.dumps(s, ensure_ascii=False). */
static int put_json_str_(sw_buf *b, const char *s)
{
	int rc = puts_(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		if (c == '"' || c == '\\')
			esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
		else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
			esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c == '\b' ? 'b' : 'f',
			esc[2] = 0;
		else if (c < 0x20)
			snprintf(esc, sizeof esc, "\\u%04x", c);
		else
			esc[0] = (char)c, esc[1] = 0;
		rc |= puts_(b, esc);
	}
	return rc | puts_(b, "\"");
}

/* Llama 3.1 and 3.2: the system turn always, with the knowledge and today's dates. */
static int llama31_(const sw_tokenizer *t, sw_buf *b, const sw_chat_msg *m, size_t n, size_t *first)
{
	char date[32] = "26 Jul 2024";
	if (t->tmpl == TM_LLAMA32) {
		/* the template asks strftime_now("%d %b %Y"), which transformers gives as local time */
		time_t now = time(NULL);
		struct tm tm;
		if (localtime_r(&now, &tm))
			strftime(date, sizeof date, "%d %b %Y", &tm);
	}
	int rc = t->bos_text ? puts_(b, t->bos_text) : 0;
	rc |= puts_(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
	               "Today Date: ") | puts_(b, date) | puts_(b, "\n\n");
	*first = 0;
	if (n && !strcmp(m[0].role, "system")) {
		rc |= put_trimmed_(b, m[0].content);
		*first = 1;
	}
	return rc | puts_(b, "<|eot_id|>");
}

int sw_tokenizer_chat(const sw_tokenizer *t, const sw_chat_msg *msgs, size_t n, int gen,
                      char **text, size_t *len, sw_error *err)
{
	if (!t || (!msgs && n) || !text || !len)
		return sw_fail(err, SW_EINVAL, "bad arguments to sw_tokenizer_chat");
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if (!msgs[i].role || !msgs[i].content)
			return sw_fail(err, SW_EINVAL, "message %zu has no %s", i + 1,
			               msgs[i].role ? "content" : "role");
	if (t->tmpl == TM_UNKNOWN)
		return sw_fail(err, SW_EFORMAT, "the model's chat template is none we know (chatml, llama3 "
		                                "and the Qwen2.5, Qwen3, Llama 3.1 and 3.2 forms); give the "
		                                "prompt as text");
	if (t->tmpl == TM_QWEN25 || t->tmpl == TM_QWEN3)
		for (size_t i = 0; i < n; i++) {
			const char *r = msgs[i].role;
			/* the template renders no other role: it would drop the message without a word */
			if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "assistant") && strcmp(r, "tool"))
				return sw_fail(err, SW_EINVAL, "message %zu: role '%s' is not one the model's "
				                               "chat template renders (user, system, assistant, tool)",
				               i + 1, r);
		}
	sw_buf b = { 0 };
	int rc = 0;
	size_t first = 0, last_query = n ? n - 1 : 0;
	if (t->tmpl == TM_LLAMA31 || t->tmpl == TM_LLAMA32)
		rc |= llama31_(t, &b, msgs, n, &first);
	if (t->tmpl == TM_QWEN25 || t->tmpl == TM_QWEN3) {
		if (n && !strcmp(msgs[0].role, "system"))
			rc |= puts_(&b, "<|im_start|>system\n") | puts_(&b, msgs[0].content) | puts_(&b, "<|im_end|>\n");
		else if (t->tmpl == TM_QWEN25)
			rc |= puts_(&b, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
			                "helpful assistant.<|im_end|>\n");
		first = n && !strcmp(msgs[0].role, "system");
	}
	if (t->tmpl == TM_QWEN3)
		for (size_t i = n; i-- > 0;)
			if (!strcmp(msgs[i].role, "user") && !(!strncmp(msgs[i].content, "<tool_response>", 15) &&
			                                       ends_with_(msgs[i].content, "</tool_response>"))) {
				last_query = i;
				break;
			}
	for (size_t i = first; i < n && !rc; i++) {
		const char *role = msgs[i].role, *c = msgs[i].content;
		switch (t->tmpl) {
		case TM_CHATML:
			if (i == 0 && t->default_system && strcmp(role, "system"))
				rc |= puts_(&b, "<|im_start|>system\n") | puts_(&b, t->default_system) |
				      puts_(&b, "<|im_end|>\n");
			rc |= puts_(&b, "<|im_start|>") | puts_(&b, role) | puts_(&b, "\n") | puts_(&b, c) |
			      puts_(&b, "<|im_end|>\n");
			break;
		case TM_QWEN25:
		case TM_QWEN3:
			if (!strcmp(role, "tool"))
				rc |= qwen_tool_(&b, msgs, n, i);
			else if (t->tmpl == TM_QWEN3 && !strcmp(role, "assistant"))
				rc |= qwen3_assistant_(&b, msgs, n, i, last_query);
			else
				rc |= puts_(&b, "<|im_start|>") | puts_(&b, role) | puts_(&b, "\n") | puts_(&b, c) |
				      puts_(&b, "<|im_end|>\n");
			break;
		case TM_LLAMA3:
		case TM_LLAMA31:
		case TM_LLAMA32:
			if (i == 0 && t->bos_text && t->tmpl == TM_LLAMA3)
				rc |= puts_(&b, t->bos_text);
			if (t->tmpl != TM_LLAMA3 && (!strcmp(role, "ipython") || !strcmp(role, "tool")))
				/* a string is iterable to Jinja, so the template gives it through tojson */
				rc |= puts_(&b, "<|start_header_id|>ipython<|end_header_id|>\n\n") |
				      put_json_str_(&b, c) | puts_(&b, "<|eot_id|>");
			else
				rc |= puts_(&b, "<|start_header_id|>") | puts_(&b, role) |
				      puts_(&b, "<|end_header_id|>\n\n") | put_trimmed_(&b, c) | puts_(&b, "<|eot_id|>");
			break;
		default:
			rc |= puts_(&b, role) | puts_(&b, ": ") | puts_(&b, c) | puts_(&b, "\n");
		}
	}
	if (gen)
		rc |= puts_(&b, t->tmpl == TM_PLAIN ? "assistant: "
		                : t->tmpl >= TM_LLAMA3 && t->tmpl <= TM_LLAMA32
		                        ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
		                        : "<|im_start|>assistant\n");
	rc |= sw_buf_put(&b, "", 1);
	if (rc) {
		sw_buf_release(&b);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	*text = (char *)b.p;
	*len = b.len - 1;
	return 0;
}
