/*
 * fuzz_tokenizer.c - libFuzzer target for tokenizer.json parsing, encode,
 * decode and the chat templates.
 *
 * The first byte of the input chooses what the rest is:
 *   0: a tokenizer.json;  1: a tokenizer.json, a NUL, a tokenizer_config.json.
 *      Whatever loads must then encode and decode a fixed text and the input
 *      itself: every id below the vocabulary size, every id decodable.
 *   else: text, encoded (with and without special tokens) by the byte
 *      tokenizer and by the fixtures of tests/fixtures/tokenizers, with the
 *      chat templates of its templates/ too (when the fuzzer runs from the
 *      top of the tree).  What must hold:
 *      - ids are below the vocabulary size and decode;
 *      - decode(encode(x)) == x, byte for byte, for the byte tokenizer and
 *        for Llama 3's (no normaliser, no token that strips spaces), also
 *        when x is not UTF-8;
 *      - the text split at newlines into messages (user and assistant in
 *        turn, '!' lines tool turns, '#' lines system turns) renders with
 *        each chat template, and the rendering encodes (special tokens
 *        recognised) and decodes back to itself with the Llama 3 and byte
 *        tokenizers.
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_tokenizer -max_len=65536 build-fuzz/corpus-fuzz_tokenizer tests/fuzz/seeds/fuzz_tokenizer
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sw/sw.h"

#define CHECK(cond, ...)                                                           \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "fuzz_tokenizer: %s:%d: check failed: %s: ", \
			        __FILE__, __LINE__, #cond);                        \
			fprintf(stderr, __VA_ARGS__);                              \
			fputc('\n', stderr);                                       \
			abort();                                                   \
		}                                                                  \
	} while (0)

enum { NFIX = 8 };
static sw_tokenizer *fix_[NFIX];
static int exact_[NFIX]; /* decode(encode(x)) == x holds for this one */
static int loaded_;

static char *slurp_(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *p = NULL;
	size_t n = 0, cap = 0, got;
	do {
		if (n == cap) {
			char *q = realloc(p, cap = cap ? 2 * cap : 65536);
			CHECK(q != NULL, "out of memory");
			p = q;
		}
		got = fread(p + n, 1, cap - n, f);
		n += got;
	} while (got);
	fclose(f);
	*len = n;
	return p;
}

static void load_fixtures_(void)
{
	static const char *const dirs[] = { "tests/fixtures/tokenizers/llama3",
		                            "tests/fixtures/tokenizers/gpt2",
		                            "tests/fixtures/tokenizers/qwen2" };
	loaded_ = 1;
	fix_[0] = sw_tokenizer_byte();
	CHECK(fix_[0] != NULL, "out of memory");
	exact_[0] = 1;
	for (int i = 0; i < 3; i++) {
		sw_error err = { 0 };
		fix_[i + 1] = sw_tokenizer_load(dirs[i], &err); /* NULL when run elsewhere: skipped */
		exact_[i + 1] = i == 0;
	}
	/* the templates of tests/fixtures/tokenizers/templates/ on their families' tokenizers */
	static const char *const tmpl[][2] = { { "llama3_1", "llama3" }, { "llama3_2", "llama3" },
		                               { "qwen2_5", "qwen2" }, { "qwen3", "qwen2" } };
	for (int i = 0; i < 4; i++) {
		char path[256];
		size_t jl = 0, cl = 0;
		snprintf(path, sizeof path, "tests/fixtures/tokenizers/%s/tokenizer.json", tmpl[i][1]);
		char *json = slurp_(path, &jl);
		snprintf(path, sizeof path, "tests/fixtures/tokenizers/templates/%s.json", tmpl[i][0]);
		char *cfg = slurp_(path, &cl);
		sw_error err = { 0 };
		if (json && cfg)
			fix_[4 + i] = sw_tokenizer_from_json(json, jl, cfg, cl, &err);
		exact_[4 + i] = !strcmp(tmpl[i][1], "llama3");
		free(json);
		free(cfg);
	}
}

/* Encode, check the ids, decode; returns the decoded text (caller frees). */
static char *encode_decode_(const sw_tokenizer *t, const char *text, size_t n, int special,
                            size_t *outlen, int must)
{
	uint32_t *ids = NULL;
	size_t k = 0;
	sw_error err = { 0 };
	int rc = sw_tokenizer_encode(t, text, n, special, &ids, &k, &err);
	if (rc) {
		/* a file we loaded may lack a byte's token or have a regex that gives up; fixtures may not */
		CHECK(!must, "encode of %zu bytes: %d %s", n, rc, err.msg);
		CHECK(rc == SW_EFORMAT || rc == SW_ERANGE || rc == SW_ENOMEM, "encode: %d %s", rc, err.msg);
		CHECK(ids == NULL && k == 0, "encode failed but returned ids");
		return NULL;
	}
	size_t vocab = sw_tokenizer_vocab(t);
	for (size_t i = 0; i < k; i++)
		CHECK(ids[i] < vocab, "id %u of %zu >= vocabulary %zu", ids[i], i, vocab);
	char *out = NULL, *dec = NULL;
	size_t declen = 0;
	rc = sw_tokenizer_decode_bytes(t, ids, k, 0, &out, outlen, &err);
	CHECK(rc == 0, "decode of ids encode gave: %d %s", rc, err.msg);
	CHECK(out[*outlen] == 0, "decode: no NUL after the text");
	/* as text: the same bytes where they are UTF-8, U+FFFD (3 bytes) for at most each other byte */
	rc = sw_tokenizer_decode(t, ids, k, 0, &dec, &declen, &err);
	CHECK(rc == 0 && declen <= 3 * *outlen, "decode as text: %d %s", rc, err.msg);
	free(dec);
	char *skip = NULL;
	size_t skiplen = 0;
	rc = sw_tokenizer_decode_bytes(t, ids, k, 1, &skip, &skiplen, &err);
	CHECK(rc == 0 && skiplen <= *outlen, "decode skipping specials: %d, %zu > %zu", rc, skiplen, *outlen);
	free(skip);
	free(ids);
	return out;
}

static void loaded_file_(const uint8_t *data, size_t size, int with_config)
{
	const char *json = (const char *)data, *config = NULL;
	size_t jlen = size, clen = 0;
	if (with_config) {
		const char *nul = memchr(data, 0, size);
		if (nul) {
			jlen = (size_t)(nul - json);
			config = nul + 1;
			clen = size - jlen - 1;
		}
	}
	sw_error err = { 0 };
	sw_tokenizer *t = sw_tokenizer_from_json(json, jlen, config, clen, &err);
	if (!t) {
		CHECK(err.code < 0 && err.msg[0], "a refused file without an error message (%d)", err.code);
		return;
	}
	CHECK(sw_tokenizer_vocab(t) > 0, "a tokenizer with no vocabulary");
	static const char sample[] = "Hello, world! It's 2024: 日本語 😀 \t\n  <|im_start|>x\xff";
	size_t n;
	free(encode_decode_(t, sample, sizeof sample - 1, 1, &n, 0));
	free(encode_decode_(t, json, jlen < 4096 ? jlen : 4096, 1, &n, 0));
	sw_chat_msg m[2] = { { "system", "be safe" }, { "user", "hi" } };
	char *text = NULL;
	size_t len;
	int rc = sw_tokenizer_chat(t, m, 2, 1, &text, &len, &err);
	CHECK(rc == 0 || (rc == SW_EFORMAT && !strcmp(sw_tokenizer_template(t), "unknown")),
	      "chat: %d %s", rc, err.msg);
	free(text);
	sw_tokenizer_free(t);
}

static void text_(const uint8_t *data, size_t size)
{
	if (!loaded_)
		load_fixtures_();
	const char *text = (const char *)data;
	for (int i = 0; i < NFIX; i++) {
		if (!fix_[i])
			continue;
		for (int special = 0; special < 2; special++) {
			size_t n = 0;
			char *out = encode_decode_(fix_[i], text, size, special, &n, 1);
			if (exact_[i])
				CHECK(n == size && !memcmp(out, text, size),
				      "tokenizer %d: decode(encode(x)) != x (%zu bytes, %zu back)", i, size, n);
			free(out);
		}
	}
	/* messages: lines alternate user and assistant, a line starting with '!' is a tool turn,
	 * one starting with '#' a system turn */
	sw_chat_msg m[8];
	char *copy = malloc(size + 1);
	CHECK(copy != NULL, "out of memory");
	memcpy(copy, text, size);
	copy[size] = 0;
	size_t nm = 0;
	char *p = copy;
	while (nm < 8 && p) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		m[nm].role = *p == '!' ? "tool" : *p == '#' ? "system" : nm % 2 ? "assistant" : "user";
		m[nm].content = p;
		nm++;
		p = nl ? nl + 1 : NULL;
	}
	for (int i = 0; i < NFIX; i++) {
		if (!fix_[i])
			continue;
		for (int gen = 0; gen < 2; gen++) {
			char *r = NULL;
			size_t len = 0;
			sw_error err = { 0 };
			int rc = sw_tokenizer_chat(fix_[i], m, nm, gen, &r, &len, &err);
			CHECK(rc == 0, "chat with tokenizer %d: %d %s", i, rc, err.msg);
			CHECK(strlen(r) <= len, "chat: length %zu, NUL at %zu", len, strlen(r));
			size_t n = 0;
			char *out = encode_decode_(fix_[i], r, len, 1, &n, 1);
			if (exact_[i])
				CHECK(n == len && !memcmp(out, r, len), "chat render does not round-trip");
			free(out);
			free(r);
		}
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] == 0 || data[0] == 1)
		loaded_file_(data + 1, size - 1, data[0] == 1);
	else
		text_(data + 1, size - 1);
	return 0;
}
