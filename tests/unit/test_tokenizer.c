/*
 * test_tokenizer.c - the byte tokenizer, byte-level BPE tokenizer.json files
 * and chat templates, against what Hugging Face `tokenizers` and
 * transformers give (tests/fixtures/tokenizers/, made by
 * tests/fixtures/make_tokenizers.py), plus round trips and bad input.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "sw/sw.h"
#include "yyjson/yyjson.h"
#include "tap.h"

static char fixtures_[4096];

/* tests/fixtures/tokenizers, found from this file's path (make builds from the top). */
static void find_fixtures_(void)
{
	const char *env = getenv("SW_TOKENIZER_FIXTURES");
	if (env) {
		snprintf(fixtures_, sizeof fixtures_, "%s", env);
		return;
	}
	snprintf(fixtures_, sizeof fixtures_, "%s", __FILE__);
	char *s = strstr(fixtures_, "unit/test_tokenizer.c");
	if (s)
		strcpy(s, "fixtures/tokenizers");
}

static char *slurp_(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *p = malloc((size_t)n + 1);
	if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
		free(p);
		p = NULL;
	}
	fclose(f);
	if (p)
		p[n] = 0;
	*len = (size_t)n;
	return p;
}

static void spit_(const char *dir, const char *name, const char *text)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* ids of a JSON array equal to ids[0..n)? Prints the first difference. */
static int ids_equal_(yyjson_val *arr, const uint32_t *ids, size_t n)
{
	size_t want = yyjson_arr_size(arr);
	for (size_t i = 0; i < want && i < n; i++)
		if (yyjson_get_uint(yyjson_arr_get(arr, i)) != ids[i]) {
			printf("#   first difference at %zu: got %u, want %llu\n", i, ids[i],
			       (unsigned long long)yyjson_get_uint(yyjson_arr_get(arr, i)));
			return 0;
		}
	if (want != n)
		printf("#   got %zu ids, want %zu\n", n, want);
	return want == n;
}

static int str_equal_(yyjson_val *s, const char *p, size_t n)
{
	int eq = yyjson_get_len(s) == n && !memcmp(yyjson_get_str(s), p, n);
	if (!eq)
		printf("#   got  \"%.*s\"\n#   want \"%s\"\n", (int)n, p, yyjson_get_str(s));
	return eq;
}

static yyjson_val *stress_spec_; /* expected.json's "stress": how to build the long texts */

/* The long texts of make_tokenizers.py's stress_texts(): runs of pieces, and an LCG's mix. */
static char *stress_text_(int which, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	yyjson_val *pieces = yyjson_obj_get(stress_spec_, "pieces"), *runs = yyjson_obj_get(stress_spec_, "runs");
	uint64_t x = yyjson_get_uint(yyjson_obj_get(stress_spec_, "seed"));
	size_t count = which ? (size_t)yyjson_get_uint(yyjson_obj_get(stress_spec_, "count"))
	                     : yyjson_arr_size(runs);
	for (size_t i = 0; i < count && b; i++) {
		yyjson_val *p;
		size_t reps = 1;
		if (which) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			p = yyjson_arr_get(pieces, (x >> 33) % yyjson_arr_size(pieces));
		} else {
			p = yyjson_arr_get(yyjson_arr_get(runs, i), 0);
			reps = (size_t)yyjson_get_uint(yyjson_arr_get(yyjson_arr_get(runs, i), 1));
		}
		for (size_t r = 0; r < reps && b; r++) {
			size_t l = yyjson_get_len(p);
			while (n + l > cap) {
				char *nb = realloc(b, cap *= 2);
				if (!nb)
					free(b);
				b = nb;
			}
			if (b)
				memcpy(b + n, yyjson_get_str(p), l);
			n += l;
		}
	}
	*len = n;
	return b;
}

/* Every case of one family: ids with and without special tokens, decoding, chat renders. */
static void check_family_(sw_tokenizer *t, const char *name, yyjson_val *fam)
{
	sw_error err = { 0 };
	is_int(sw_tokenizer_vocab(t), yyjson_get_uint(yyjson_obj_get(fam, "vocab")), "%s: vocabulary size", name);
	is_int(sw_tokenizer_bos(t), yyjson_get_sint(yyjson_obj_get(fam, "bos")), "%s: bos", name);
	is_int(sw_tokenizer_eos(t), yyjson_get_sint(yyjson_obj_get(fam, "eos")), "%s: eos", name);
	ok(!strcmp(sw_tokenizer_template(t), yyjson_get_str(yyjson_obj_get(fam, "template"))),
	   "%s: template %s", name, sw_tokenizer_template(t));
	yyjson_val *cases = yyjson_obj_get(fam, "cases");
	size_t ncase = yyjson_arr_size(cases), enc_ok = 0, plain_ok = 0, dec_ok = 0, skip_ok = 0;
	for (size_t i = 0; i < ncase; i++) {
		yyjson_val *c = yyjson_arr_get(cases, i), *text = yyjson_obj_get(c, "text");
		uint32_t *ids = NULL;
		size_t n = 0;
		char *out = NULL;
		size_t outlen = 0;
		int rc = sw_tokenizer_encode(t, yyjson_get_str(text), yyjson_get_len(text), 1, &ids, &n, &err);
		if (rc == 0 && ids_equal_(yyjson_obj_get(c, "ids"), ids, n))
			enc_ok++;
		else
			printf("#   %s: case %zu: rc %d %s\n", name, i, rc, err.msg);
		if (rc == 0 && sw_tokenizer_decode(t, ids, n, 0, &out, &outlen, &err) == 0 &&
		    str_equal_(yyjson_obj_get(c, "decoded"), out, outlen))
			dec_ok++;
		free(out);
		out = NULL;
		if (rc == 0 && sw_tokenizer_decode(t, ids, n, 1, &out, &outlen, &err) == 0 &&
		    str_equal_(yyjson_obj_get(c, "decoded_skip"), out, outlen))
			skip_ok++;
		free(out);
		free(ids);
		ids = NULL;
		rc = sw_tokenizer_encode(t, yyjson_get_str(text), yyjson_get_len(text), 0, &ids, &n, &err);
		if (rc == 0 && ids_equal_(yyjson_obj_get(c, "ids_nospecial"), ids, n))
			plain_ok++;
		else
			printf("#   %s: case %zu without special tokens: rc %d\n", name, i, rc);
		free(ids);
	}
	is_int(enc_ok, ncase, "%s: ids of every case as tokenizers gives them", name);
	is_int(plain_ok, ncase, "%s: ids with special tokens as text (encode_special_tokens)", name);
	is_int(dec_ok, ncase, "%s: decode as tokenizers decodes", name);
	is_int(skip_ok, ncase, "%s: decode skipping special tokens", name);

	yyjson_val *stress = yyjson_obj_get(fam, "stress");
	for (size_t i = 0; i < yyjson_arr_size(stress); i++) {
		yyjson_val *want = yyjson_arr_get(stress, i);
		size_t len = 0, n = 0;
		char *text = stress_text_((int)i, &len);
		uint32_t *ids = NULL;
		int rc = text ? sw_tokenizer_encode(t, text, len, 1, &ids, &n, &err) : SW_ENOMEM;
		uint64_t h = 0xcbf29ce484222325ull;
		for (size_t k = 0; k < n; k++)
			h = (h ^ ids[k]) * 0x100000001b3ull;
		char hex[20];
		snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
		ok(rc == 0 && n == yyjson_get_uint(yyjson_obj_get(want, "ids")) &&
		   !strcmp(hex, yyjson_get_str(yyjson_obj_get(want, "hash"))),
		   "%s: long text %zu (%zu bytes): %zu ids, hash %s, as tokenizers", name, i + 1, len, n, hex);
		free(ids);
		free(text);
	}

	yyjson_val *chats = yyjson_obj_get(fam, "chat");
	size_t nchat = yyjson_arr_size(chats), chat_ok = 0;
	for (size_t i = 0; i < nchat; i++) {
		yyjson_val *c = yyjson_arr_get(chats, i), *msgs = yyjson_obj_get(c, "messages");
		sw_chat_msg m[8];
		size_t nm = yyjson_arr_size(msgs);
		for (size_t k = 0; k < nm && k < 8; k++) {
			m[k].role = yyjson_get_str(yyjson_obj_get(yyjson_arr_get(msgs, k), "role"));
			m[k].content = yyjson_get_str(yyjson_obj_get(yyjson_arr_get(msgs, k), "content"));
		}
		char *text = NULL;
		size_t len = 0;
		int gen = yyjson_get_bool(yyjson_obj_get(c, "add_generation_prompt"));
		if (sw_tokenizer_chat(t, m, nm, gen, &text, &len, &err) == 0 &&
		    str_equal_(yyjson_obj_get(c, "text"), text, len))
			chat_ok++;
		free(text);
	}
	ok(nchat > 0 && chat_ok == nchat, "%s: %zu of %zu chat renders as apply_chat_template", name,
	   chat_ok, nchat);
}

static void families_(yyjson_val *root)
{
	static const char *const fams[][2] = { { "gpt2", "gpt2" }, { "llama3", "llama3" },
		                               { "qwen2", "qwen2" }, { "byte", "chatml" } };
	for (size_t i = 0; i < 4; i++) {
		char dir[4200];
		sw_error err = { 0 };
		snprintf(dir, sizeof dir, "%s/%s", fixtures_, fams[i][1]);
		sw_tokenizer *t = sw_tokenizer_load(dir, &err);
		ok(t != NULL, "load %s: %s", dir, t ? "ok" : err.msg);
		if (t)
			check_family_(t, fams[i][1], yyjson_obj_get(root, fams[i][0]));
		sw_tokenizer_free(t);
	}
	/* the built-in byte tokenizer is what `tokenizers` makes of the same definition */
	sw_tokenizer *b = sw_tokenizer_byte();
	ok(b != NULL, "sw_tokenizer_byte");
	if (b)
		check_family_(b, "built-in byte", yyjson_obj_get(root, "byte"));
	sw_tokenizer_free(b);
}

/* Every Split behaviour (inverted or not, String or Regex), ByteLevel's prefix space and regex. */
static void splits_(yyjson_val *root)
{
	yyjson_val *sp = yyjson_obj_get(root, "splits"), *vars = yyjson_obj_get(sp, "variants");
	char *model = yyjson_val_write(yyjson_obj_get(sp, "model"), 0, NULL);
	char *added = yyjson_val_write(yyjson_obj_get(sp, "added_tokens"), 0, NULL);
	size_t nv = yyjson_arr_size(vars);
	ok(nv >= 17 && model && added, "split variants: %zu", nv);
	for (size_t i = 0; i < nv && model && added; i++) {
		yyjson_val *v = yyjson_arr_get(vars, i), *cases = yyjson_obj_get(v, "cases");
		char *pt = yyjson_val_write(yyjson_obj_get(v, "pre_tokenizer"), 0, NULL);
		size_t cap = strlen(model) + strlen(added) + strlen(pt) + 200;
		char *json = malloc(cap);
		snprintf(json, cap, "{\"added_tokens\":%s,\"pre_tokenizer\":%s,\"decoder\":{\"type\":"
		                    "\"ByteLevel\"},\"model\":%s}", added, pt, model);
		sw_error err = { 0 };
		sw_tokenizer *t = sw_tokenizer_from_json(json, strlen(json), NULL, 0, &err);
		size_t good = 0, nc = yyjson_arr_size(cases);
		for (size_t k = 0; t && k < nc; k++) {
			yyjson_val *c = yyjson_arr_get(cases, k), *text = yyjson_obj_get(c, "text");
			uint32_t *ids = NULL;
			size_t n = 0;
			if (sw_tokenizer_encode(t, yyjson_get_str(text), yyjson_get_len(text), 1, &ids, &n, &err) == 0 &&
			    ids_equal_(yyjson_obj_get(c, "ids"), ids, n))
				good++;
			free(ids);
		}
		ok(t && good == nc, "split variant %zu (%.90s): %zu of %zu cases as tokenizers %s", i + 1,
		   pt + 40, good, nc, t ? "" : err.msg);
		sw_tokenizer_free(t);
		free(json);
		free(pt);
	}
	free(model);
	free(added);
}

/*
 * A Split regex whose match outgrows the JIT's stack ((a|b)+ over 400000
 * bytes): the match still completes (`tokenizers` gives one id a byte here).
 */
static void deep_regex_(void)
{
	static const char head[] =
		"{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
		"{\"Regex\":\"(a|b)+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
		"\"add_prefix_space\":false,\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},"
		"\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{\"a\":97,\"b\":98,\"c\":99}}}";
	size_t n = 400001;
	char *text = malloc(n);
	for (size_t i = 0; i + 1 < n; i++)
		text[i] = i % 2 ? 'b' : 'a';
	text[n - 1] = 'c';
	sw_error err = { 0 };
	sw_tokenizer *t = sw_tokenizer_from_json(head, sizeof head - 1, NULL, 0, &err);
	uint32_t *ids = NULL;
	size_t k = 0;
	int rc = t ? sw_tokenizer_encode(t, text, n, 1, &ids, &k, &err) : -1;
	int same = rc == 0 && k == n;
	for (size_t i = 0; same && i < n; i++)
		same = ids[i] == (uint8_t)text[i];
	ok(same, "a regex match deeper than the JIT stack completes: rc %d, %zu ids %s", rc, k, err.msg);
	free(ids);
	free(text);
	sw_tokenizer_free(t);
}

/* The templates TRL keeps for Llama 3.1, 3.2, Qwen2.5, Qwen3 as transformers renders them; look-alikes refused. */
static void templates_(yyjson_val *root)
{
	yyjson_val *tp = yyjson_obj_get(root, "templates"), *known = yyjson_obj_get(tp, "known");
	char today[32];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(today, sizeof today, "%d %b %Y", &tm);
	ok(yyjson_arr_size(known) == 4, "%zu known templates in the fixtures", yyjson_arr_size(known));
	for (size_t i = 0; i < yyjson_arr_size(known); i++) {
		yyjson_val *k = yyjson_arr_get(known, i), *cfg = yyjson_obj_get(k, "config");
		const char *name = yyjson_get_str(yyjson_obj_get(k, "name"));
		char path[4200];
		size_t jlen = 0;
		const char *fam = yyjson_get_str(yyjson_obj_get(k, "family"));
		snprintf(path, sizeof path, "%s/%s/tokenizer.json", fixtures_, fam ? fam : "?");
		char *json = slurp_(path, &jlen);
		size_t clen = 0;
		snprintf(path, sizeof path, "%s/%s", fixtures_, yyjson_get_str(cfg));
		char *ctext = slurp_(path, &clen);
		sw_error err = { 0 };
		sw_tokenizer *t = json && ctext ? sw_tokenizer_from_json(json, jlen, ctext, clen, &err) : NULL;
		free(ctext);
		ok(t && strcmp(sw_tokenizer_template(t), "unknown"), "template %s recognised (%s)", name,
		   t ? sw_tokenizer_template(t) : err.msg);
		yyjson_val *chats = yyjson_obj_get(k, "chat");
		size_t good = 0, nchat = yyjson_arr_size(chats);
		for (size_t c = 0; t && c < nchat; c++) {
			yyjson_val *e = yyjson_arr_get(chats, c), *msgs = yyjson_obj_get(e, "messages");
			sw_chat_msg m[8];
			size_t nm = yyjson_arr_size(msgs);
			for (size_t j = 0; j < nm && j < 8; j++) {
				m[j].role = yyjson_get_str(yyjson_obj_get(yyjson_arr_get(msgs, j), "role"));
				m[j].content = yyjson_get_str(yyjson_obj_get(yyjson_arr_get(msgs, j), "content"));
			}
			/* llama3_2 asks today's date; the fixture holds @DATE@ in its place */
			const char *want = yyjson_get_str(yyjson_obj_get(e, "text"));
			size_t wl = strlen(want) + 64, o = 0;
			char *w = malloc(wl);
			for (const char *q = want; *q;)
				if (!strncmp(q, "@DATE@", 6)) {
					o += (size_t)snprintf(w + o, wl - o, "%s", today);
					q += 6;
				} else {
					w[o++] = *q++;
				}
			w[o] = 0;
			char *text = NULL;
			size_t len = 0;
			int rc = sw_tokenizer_chat(t, m, nm, yyjson_get_bool(yyjson_obj_get(e, "add_generation_prompt")),
			                           &text, &len, &err);
			if (rc == 0 && len == o && !memcmp(text, w, o))
				good++;
			else
				printf("#   %s, render %zu: rc %d\n#   got  \"%s\"\n#   want \"%s\"\n", name, c, rc,
				       text ? text : err.msg, w);
			free(text);
			free(w);
		}
		ok(t && good == nchat, "template %s: %zu of %zu renders as apply_chat_template", name, good, nchat);
		sw_tokenizer_free(t);
		free(json);
	}
	yyjson_val *look = yyjson_obj_get(tp, "lookalikes");
	for (size_t i = 0; i < yyjson_arr_size(look); i++) {
		yyjson_val *k = yyjson_arr_get(look, i), *cfg = yyjson_obj_get(k, "config");
		char path[4200];
		size_t jlen = 0;
		snprintf(path, sizeof path, "%s/qwen2/tokenizer.json", fixtures_);
		char *json = slurp_(path, &jlen);
		sw_error err = { 0 };
		sw_tokenizer *t = json ? sw_tokenizer_from_json(json, jlen, yyjson_get_str(cfg), yyjson_get_len(cfg), &err)
		                       : NULL;
		ok(t && !strcmp(sw_tokenizer_template(t), "unknown"), "look-alike template %s is unknown",
		   yyjson_get_str(yyjson_obj_get(k, "name")));
		sw_tokenizer_free(t);
		free(json);
	}
	/* a role the Qwen templates would drop silently is an error */
	sw_error err = { 0 };
	char path[4200];
	size_t jlen = 0, clen = 0;
	snprintf(path, sizeof path, "%s/templates/qwen2_5.json", fixtures_);
	char *ctext = slurp_(path, &clen);
	snprintf(path, sizeof path, "%s/qwen2/tokenizer.json", fixtures_);
	char *json = slurp_(path, &jlen);
	sw_tokenizer *t = json && ctext ? sw_tokenizer_from_json(json, jlen, ctext, clen, &err) : NULL;
	free(ctext);
	sw_chat_msg m[2] = { { "user", "hi" }, { "function", "x" } };
	char *text = NULL;
	size_t len;
	ok(t && sw_tokenizer_chat(t, m, 2, 1, &text, &len, &err) == SW_EINVAL && strstr(err.msg, "'function'"),
	   "qwen2.5: a role its template drops is refused: %s", err.msg);
	sw_tokenizer_free(t);
	free(json);
}

typedef struct job_ {
	const sw_tokenizer *t;
	const char *text;
	size_t len;
	uint64_t hash;
	size_t n;
	int rc;
} job_;

static void *encode_job_(void *arg)
{
	job_ *j = arg;
	for (int r = 0; r < 3; r++) {
		uint32_t *ids = NULL;
		sw_error err = { 0 };
		j->rc |= sw_tokenizer_encode(j->t, j->text, j->len, 1, &ids, &j->n, &err);
		uint64_t h = 0xcbf29ce484222325ull;
		for (size_t k = 0; k < j->n; k++)
			h = (h ^ ids[k]) * 0x100000001b3ull;
		if (r && h != j->hash)
			j->rc = -1;
		j->hash = h;
		free(ids);
	}
	return NULL;
}

/* One tokenizer, four threads encoding at once: each gets tokenizers' ids (the header's promise). */
static void threads_(yyjson_val *root)
{
	char dir[4200];
	sw_error err = { 0 };
	snprintf(dir, sizeof dir, "%s/qwen2", fixtures_);
	sw_tokenizer *t = sw_tokenizer_load(dir, &err);
	size_t len = 0;
	char *text = stress_text_(1, &len);
	yyjson_val *want = yyjson_arr_get(yyjson_obj_get(yyjson_obj_get(root, "qwen2"), "stress"), 1);
	job_ jobs[4];
	pthread_t th[4];
	int good = t && text, started = 0;
	for (int i = 0; i < 4 && good; i++) {
		jobs[i] = (job_){ .t = t, .text = text, .len = len };
		good = pthread_create(&th[i], NULL, encode_job_, &jobs[i]) == 0;
		started += good;
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4 && good; i++) {
		char hex[20];
		snprintf(hex, sizeof hex, "%016llx", (unsigned long long)jobs[i].hash);
		good = jobs[i].rc == 0 && jobs[i].n == yyjson_get_uint(yyjson_obj_get(want, "ids")) &&
		       !strcmp(hex, yyjson_get_str(yyjson_obj_get(want, "hash")));
	}
	ok(good, "qwen2: four threads encoding at once each get tokenizers' ids");
	free(text);
	sw_tokenizer_free(t);
}

static uint64_t rng_ = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_(void)
{
	rng_ ^= rng_ << 13;
	rng_ ^= rng_ >> 7;
	rng_ ^= rng_ << 17;
	return rng_;
}

/*
 * decode(encode(x)) == x for random byte strings, valid UTF-8 or not.  Only
 * the first nbits pieces are used: the later ones change text by design
 * (a decomposed accent under NFC, an added token that strips spaces).
 */
static void round_trips_(const char *name, sw_tokenizer *t, size_t nbits)
{
	static const char *const bits[] = { "<|im_start|>", "<|endoftext|>", "<|eot_id|>", " ", "  ",
		                            "\n", "\t", "é", "日本", "😀", "'s", "123",
		                            "abc", "\xff", "\xc3", "\xe6\x97", "\xed\xa0\x80", "e\xcc\x81",
		                            "<mask>" };
	int good = 1;
	for (int r = 0; r < 300 && good; r++) {
		char buf[512];
		size_t n = 0;
		while (n < 400) {
			const char *b = bits[rnd_() % nbits];
			size_t l = strlen(b);
			if (rnd_() % 4 == 0) {
				buf[n++] = (char)(rnd_() & 0xff);
				continue;
			}
			memcpy(buf + n, b, l);
			n += l;
			if (rnd_() % 16 == 0)
				break;
		}
		for (int special = 0; special < 2 && good; special++) {
			uint32_t *ids = NULL;
			size_t k = 0;
			char *out = NULL;
			size_t outlen = 0;
			sw_error err = { 0 };
			if (sw_tokenizer_encode(t, buf, n, special, &ids, &k, &err) ||
			    sw_tokenizer_decode_bytes(t, ids, k, 0, &out, &outlen, &err) || outlen != n ||
			    memcmp(out, buf, n)) {
				printf("#   %s: round trip %d failed (%s)\n", name, r, err.msg);
				good = 0;
			}
			for (size_t j = 0; j < k && good; j++)
				if (ids[j] >= sw_tokenizer_vocab(t))
					good = 0;
			free(ids);
			free(out);
		}
	}
	ok(good, "%s: decode_bytes(encode(x)) == x for 300 random byte strings", name);
}

static void byte_basics_(void)
{
	sw_tokenizer *t = sw_tokenizer_byte();
	sw_error err = { 0 };
	uint32_t *ids = NULL;
	size_t n = 0;
	const char text[] = "a<|im_start|>\xff";
	is_int(sw_tokenizer_vocab(t), SW_TOK_BYTE_VOCAB, "byte: vocabulary of 256 bytes + 5 specials");
	is_int(sw_tokenizer_pad(t), SW_TOK_BYTE_PAD, "byte: pad");
	is_int(sw_tokenizer_token_id(t, "<|im_end|>"), SW_TOK_BYTE_IM_END, "byte: <|im_end|> by name");
	is_int(sw_tokenizer_token_id(t, "A"), 'A', "byte: a byte by name");
	is_int(sw_tokenizer_token_id(t, "<|nope|>"), -1, "byte: no such token");
	ok(sw_tokenizer_is_special(t, SW_TOK_BYTE_EOS) && !sw_tokenizer_is_special(t, 'x'),
	   "byte: special tokens are special, bytes are not");
	uint32_t stop[4];
	size_t ns = sw_tokenizer_stop_ids(t, stop, 4);
	ok(ns == 2 && stop[0] == SW_TOK_BYTE_EOS && stop[1] == SW_TOK_BYTE_IM_END,
	   "byte: generation stops at <|eos|> and <|im_end|>");
	ok(sw_tokenizer_encode(t, text, sizeof text - 1, 1, &ids, &n, &err) == 0 && n == 3 &&
	   ids[0] == 'a' && ids[1] == SW_TOK_BYTE_IM_START && ids[2] == 0xff,
	   "byte: special token recognised, invalid UTF-8 kept as its byte");
	free(ids);
	ok(sw_tokenizer_encode(t, text, sizeof text - 1, 0, &ids, &n, &err) == 0 && n == sizeof text - 1,
	   "byte: special=0 encodes the marker as its bytes");
	free(ids);
	ok(sw_tokenizer_encode(t, "", 0, 1, &ids, &n, &err) == 0 && n == 0 && ids != NULL,
	   "byte: empty text gives no ids");
	free(ids);
	uint32_t bad = SW_TOK_BYTE_VOCAB;
	char *out = NULL;
	size_t len;
	is_int(sw_tokenizer_decode(t, &bad, 1, 0, &out, &len, &err), SW_ERANGE,
	       "decode: an id outside the vocabulary is SW_ERANGE");
	ok(strstr(err.msg, "261") != NULL, "decode: the error names the id (%s)", err.msg);
	sw_chat_msg m[1] = { { "user", NULL } };
	is_int(sw_tokenizer_chat(t, m, 1, 1, &out, &len, &err), SW_EINVAL, "chat: a message without content");
	sw_tokenizer_free(t);
	sw_tokenizer_free(NULL);
}

static void save_byte_(yyjson_val *root)
{
	char dir[] = "/tmp/sw-tok-test.XXXXXX";
	sw_error err = { 0 };
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	is_int(sw_tokenizer_save_byte(dir, &err), 0, "save_byte: %s", err.msg);
	sw_tokenizer *t = sw_tokenizer_load(dir, &err);
	ok(t != NULL, "save_byte then load: %s", t ? "ok" : err.msg);
	if (t)
		check_family_(t, "saved byte", yyjson_obj_get(root, "byte"));
	sw_tokenizer_free(t);
	/* a directory with no tokenizer files at all holds the byte tokenizer */
	char path[4200];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	unlink(path);
	t = sw_tokenizer_load(dir, &err);
	ok(t && sw_tokenizer_vocab(t) == SW_TOK_BYTE_VOCAB && !strcmp(sw_tokenizer_template(t), "chatml"),
	   "no tokenizer files: the byte tokenizer");
	sw_tokenizer_free(t);
	spit_(dir, "tokenizer.model", "x");
	t = sw_tokenizer_load(dir, &err);
	ok(!t && strstr(err.msg, "tokenizer.model"), "tokenizer.model alone is refused: %s", err.msg);
	snprintf(path, sizeof path, "%s/tokenizer.model", dir);
	unlink(path);
	rmdir(dir);
	t = sw_tokenizer_load(dir, &err);
	ok(!t && err.code == SW_EIO, "a missing model directory: %s", err.msg);
}

/* A tokenizer.json of an unsupported kind or broken: NULL, and the message names the problem. */
static void bad_files_(void)
{
	static const char *const cases[][2] = {
		{ "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
		  "\"decoder\":{\"type\":\"ByteLevel\"}}", "WordPiece" },
		{ "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
		  "\"decoder\":{\"type\":\"ByteLevel\"}}", "Unigram" },
		{ "{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},"
		  "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}}", "Lowercase" },
		{ "{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},"
		  "\"decoder\":{\"type\":\"ByteLevel\"}}", "Metaspace" },
		{ "{\"pre_tokenizer\":null,\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},"
		  "\"decoder\":{\"type\":\"ByteLevel\"}}", "not a byte-level BPE" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"Metaspace\"},"
		  "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", "decoder 'Metaspace'" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
		  "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}",
		  "byte_fallback" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
		  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
		  "merge 1: 'c' is not in the vocab" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
		  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
		  "merge 1: 'ab' is not in the vocab" },
		{ "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
		  "{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\"}]},\"decoder\":"
		  "{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		  "regex" },
		{ "{\"added_tokens\":[{\"id\":1,\"content\":\"x\",\"single_word\":true}],\"pre_tokenizer\":"
		  "{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
		  "\"vocab\":{\"a\":0},\"merges\":[]}}", "single_word" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
		  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999},\"merges\":[]}}", "too large" },
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,",
		  "tokenizer.json" },
		{ "[1,2]", "not a JSON object" },
		/* a token twice in the vocabulary ("\u0061" is "a"): tokenizers keeps the last id, a lookup the first */
		{ "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
		  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\\u0061\":2},\"merges\":[]}}",
		  "tokenizer.json: the name \"a\" appears twice in an object" },
	};
	char dir[] = "/tmp/sw-tok-bad.XXXXXX";
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sw_error err = { 0 };
		spit_(dir, "tokenizer.json", cases[i][0]);
		sw_tokenizer *t = sw_tokenizer_load(dir, &err);
		ok(!t && err.code < 0 && strstr(err.msg, cases[i][1]), "bad tokenizer.json %zu refused: %s", i + 1,
		   err.msg);
		sw_tokenizer_free(t);
	}
	/* a config naming a token the vocabulary lacks; a template of no known family */
	spit_(dir, "tokenizer.json",
	      "{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},\"decoder\":{\"type\":"
	      "\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}");
	spit_(dir, "tokenizer_config.json", "{\"eos_token\":\"</s>\"}");
	sw_error err = { 0 };
	sw_tokenizer *t = sw_tokenizer_load(dir, &err);
	ok(!t && strstr(err.msg, "eos_token '</s>' is not a token"), "config with an unknown eos: %s", err.msg);
	spit_(dir, "tokenizer_config.json", "{\"chat_template\":\"{{ bos_token }}{% for m in messages %}"
	                                    "[INST] {{ m['content'] }} [/INST]{% endfor %}\"}");
	t = sw_tokenizer_load(dir, &err);
	char *out = NULL;
	size_t len;
	sw_chat_msg m[1] = { { "user", "hi" } };
	ok(t && !strcmp(sw_tokenizer_template(t), "unknown") &&
	   sw_tokenizer_chat(t, m, 1, 1, &out, &len, &err) == SW_EFORMAT,
	   "an unknown chat template loads, and chat refuses it: %s", err.msg);
	sw_tokenizer_free(t);
	/* the template in chat_template.jinja, as newer transformers saves it */
	spit_(dir, "tokenizer_config.json", "{\"bos_token\":\"a\"}");
	spit_(dir, "chat_template.jinja",
	      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
	      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
	      " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
	      "{{ content }}{% endfor %}{% if add_generation_prompt %}"
	      "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}\n");
	t = sw_tokenizer_load(dir, &err);
	ok(t && !strcmp(sw_tokenizer_template(t), "llama3") && sw_tokenizer_bos(t) == 0 &&
	   sw_tokenizer_chat(t, m, 1, 0, &out, &len, &err) == 0 &&
	   !strcmp(out, "a<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"),
	   "chat_template.jinja is read when tokenizer_config.json has no template");
	free(out);
	char jpath[4200];
	snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
	unlink(jpath);
	/* a byte the vocabulary lacks, with no unk_token: an error, never a dropped byte */
	uint32_t *ids = NULL;
	size_t n = 0;
	ok(t && sw_tokenizer_encode(t, "abc", 3, 1, &ids, &n, &err) == SW_EFORMAT &&
	   strstr(err.msg, "0x63"), "a byte with no token is an error: %s", err.msg);
	sw_tokenizer_free(t);
	char path[4200];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	unlink(path);
	rmdir(dir);
}

/* fixtures_/name read and parsed (NULL on failure, said as a failed test); *text to free. */
static yyjson_doc *read_fixture_(const char *name, char **text)
{
	char path[4200];
	size_t len = 0;
	snprintf(path, sizeof path, "%s/%s", fixtures_, name);
	*text = slurp_(path, &len);
	yyjson_doc *doc = *text ? yyjson_read(*text, len, 0) : NULL;
	ok(doc != NULL, "read %s", path);
	return doc;
}

/*
 * Ids that make no valid UTF-8 (a response cut inside a character, byte
 * tokens, added tokens between a character's halves, random ids): decode
 * gives what tokenizers' decode gives (decode.json, made by
 * tests/fixtures/make_decode_refs.py), U+FFFD for every invalid sequence.
 */
static void decode_refs_(void)
{
	char *text;
	yyjson_doc *doc = read_fixture_("decode.json", &text);
	yyjson_val *fams = yyjson_obj_get(yyjson_doc_get_root(doc), "families"), *k, *cases;
	yyjson_obj_iter it = yyjson_obj_iter_with(fams);
	while ((k = yyjson_obj_iter_next(&it))) {
		cases = yyjson_obj_iter_get_val(k);
		const char *name = yyjson_get_str(k) ? yyjson_get_str(k) : "?";
		char dir[4200];
		sw_error err = { 0 };
		snprintf(dir, sizeof dir, "%s/%s", fixtures_, name);
		sw_tokenizer *t = sw_tokenizer_load(dir, &err);
		size_t n = yyjson_arr_size(cases), good = 0, bad = 0, fffd = 0;
		for (size_t i = 0; t && i < n; i++) {
			yyjson_val *c = yyjson_arr_get(cases, i), *jids = yyjson_obj_get(c, "ids");
			size_t m = yyjson_arr_size(jids);
			uint32_t *ids = malloc(sizeof *ids * (m ? m : 1));
			for (size_t j = 0; j < m; j++)
				ids[j] = (uint32_t)yyjson_get_uint(yyjson_arr_get(jids, j));
			int same = 1;
			for (int skip = 0; skip < 2; skip++) {
				char *out = NULL;
				size_t outlen = 0;
				yyjson_val *want = yyjson_obj_get(c, skip ? "text_skip" : "text");
				if (sw_tokenizer_decode(t, ids, m, skip, &out, &outlen, &err) ||
				    !str_equal_(want, out, outlen)) {
					if (bad++ < 3)
						printf("#   %s: case %zu (skip %d): got '%s', want '%s'\n", name, i, skip,
						       out ? out : err.msg, yyjson_get_str(want) ? yyjson_get_str(want) : "?");
					same = 0;
				} else if (!skip && strstr(out, "\xef\xbf\xbd")) {
					fffd++;
				}
				free(out);
			}
			good += same;
			free(ids);
		}
		is_int(good, n, "%s: decode of %zu id sequences as tokenizers decodes them", name, n);
		ok(fffd > n / 2, "%s: %zu of them hold U+FFFD", name, fffd);
		sw_tokenizer_free(t);
	}
	yyjson_doc_free(doc);
	free(text);
}

int main(void)
{
	find_fixtures_();
	char *text;
	yyjson_doc *doc = read_fixture_("expected.json", &text);
	if (!doc)
		return tap_done();
	yyjson_val *root = yyjson_doc_get_root(doc);
	stress_spec_ = yyjson_obj_get(root, "stress");
	byte_basics_();
	families_(root);
	splits_(root);
	deep_regex_();
	threads_(root);
	templates_(root);
	save_byte_(root);
	bad_files_();
	decode_refs_();
	static const char *const fams[] = { "gpt2", "llama3", "qwen2" };
	for (size_t i = 0; i < 3; i++) {
		char dir[4200];
		sw_error err = { 0 };
		snprintf(dir, sizeof dir, "%s/%s", fixtures_, fams[i]);
		sw_tokenizer *t = sw_tokenizer_load(dir, &err);
		if (t) /* gpt2 has <mask> (lstrip, rstrip), qwen2 normalises to NFC */
			round_trips_(fams[i], t, i == 0 ? 18 : i == 2 ? 17 : 19);
		sw_tokenizer_free(t);
	}
	sw_tokenizer *b = sw_tokenizer_byte();
	round_trips_("byte", b, 19);
	sw_tokenizer_free(b);
	yyjson_doc_free(doc);
	free(text);
	return tap_done();
}
