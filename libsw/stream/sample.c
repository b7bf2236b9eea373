/*
 * sample.c - a sample's token fields (sw/sample.h): the one place where a
 * prompt, chat messages or a response become token ids, for every program.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/sample.h"

static bool key_is_(const sw_val *k, const char *s)
{
	size_t n = strlen(s);
	return k->type == SW_T_STR && k->v.str.len == n && !memcmp(k->v.str.ptr, s, n);
}

int sw_sample_tokens(sw_rec *r, const char *key, int vocab, int32_t **ids, size_t *n,
                     sw_error *err)
{
	sw_val v, e;
	*ids = NULL;
	*n = 0;
	if (sw_rec_get(r, key, &v))
		return sw_fail(err, SW_ENOENT, "no field '%s'", key);
	if (v.type != SW_T_ARRAY)
		return sw_fail(err, SW_ETYPE, "field '%s' is a %s, not an array of token ids", key,
		               sw_type_name(v.type));
	int32_t *out = malloc(sizeof *out * (v.v.count ? v.v.count : 1));
	if (!out)
		return sw_fail(err, SW_ENOMEM, "field '%s': out of memory", key);
	uint64_t limit = vocab > 0 ? (uint64_t)vocab : (uint64_t)INT32_MAX + 1;
	sw_iter it;
	sw_iter_init(&it, &v);
	size_t i = 0;
	int rc;
	while ((rc = sw_iter_next(&it, &e)) == 1) {
		if (e.type == SW_T_UINT && e.v.u < limit) {
			out[i++] = (int32_t)e.v.u;
			continue;
		}
		free(out);
		if ((e.type == SW_T_UINT || e.type == SW_T_INT) && vocab > 0) {
			if (e.type == SW_T_INT)
				return sw_fail(err, SW_ERANGE,
				               "field '%s': token %zu is %lld, outside the model's vocabulary of %d",
				               key, i, (long long)e.v.i, vocab);
			return sw_fail(err, SW_ERANGE,
			               "field '%s': token %zu is %llu, outside the model's vocabulary of %d", key,
			               i, (unsigned long long)e.v.u, vocab);
		}
		if (e.type == SW_T_INT)
			return sw_fail(err, SW_ERANGE, "field '%s': token %zu is %lld, not a token id", key, i,
			               (long long)e.v.i);
		if (e.type == SW_T_UINT)
			return sw_fail(err, SW_ERANGE, "field '%s': token %zu is %llu, not a token id", key, i,
			               (unsigned long long)e.v.u);
		double x = 0;
		if ((e.type == SW_T_F32 || e.type == SW_T_F64) && !sw_val_number(&e, &x))
			return sw_fail(err, SW_ETYPE, "field '%s': token %zu is the number %g, not a token id",
			               key, i, x);
		return sw_fail(err, SW_ETYPE, "field '%s': token %zu is a %s, not a token id", key, i,
		               sw_type_name(e.type));
	}
	if (rc < 0) {
		free(out);
		return sw_fail(err, SW_EFORMAT, "field '%s' is corrupt", key);
	}
	*ids = out;
	*n = i;
	return SW_OK;
}

int sw_sample_encode(const sw_tokenizer *tok, const char *text, size_t len, const char *what,
                     int vocab, int32_t **ids, size_t *n, sw_error *err)
{
	uint32_t *u;
	size_t cnt;
	sw_error e = { 0 };
	*ids = NULL;
	*n = 0;
	if (!tok)
		return sw_fail(err, SW_EINVAL, "%s is text, and there is no tokenizer: give token ids", what);
	if (sw_tokenizer_encode(tok, text, len, 1, &u, &cnt, &e))
		return sw_fail(err, e.code ? e.code : SW_EFORMAT, "cannot tokenise %s: %s", what, e.msg);
	if (cnt > (size_t)INT32_MAX / 2) {
		free(u);
		return sw_fail(err, SW_ETOOBIG, "%s has too many tokens", what);
	}
	/* the tokenizer's ids are uint32; a model reads int32: same bits below 2^31 */
	int32_t *out = malloc(sizeof *out * (cnt ? cnt : 1));
	if (!out) {
		free(u);
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", what);
	}
	for (size_t i = 0; i < cnt; i++) {
		if (vocab > 0 && u[i] >= (uint32_t)vocab) {
			uint32_t bad = u[i];
			free(u), free(out);
			return sw_fail(err, SW_ERANGE,
			               "%s: token %zu is %u, outside the model's vocabulary of %d (is the tokenizer the model's?)",
			               what, i, bad, vocab);
		}
		out[i] = (int32_t)u[i];
	}
	free(u);
	*ids = out;
	*n = cnt;
	return SW_OK;
}

int sw_sample_prompt_is_text(sw_rec *r)
{
	sw_val v;
	return sw_rec_get(r, "prompt_tokens", &v) != 0;
}

int sw_sample_response_is_text(sw_rec *r)
{
	sw_val v;
	return sw_rec_get(r, "response_tokens", &v) != 0;
}

/* messages [{role, content}, ...] rendered with tok's chat template, then encoded. */
static int messages_(const sw_val *v, const sw_tokenizer *tok, int vocab, int32_t **ids,
                     size_t *n, sw_error *err)
{
	if (v->type != SW_T_ARRAY)
		return sw_fail(err, SW_ETYPE, "field 'messages' is a %s, not an array of {role, content} maps",
		               sw_type_name(v->type));
	if (v->v.count == 0)
		return sw_fail(err, SW_EINVAL, "field 'messages' is empty");
	if (!tok)
		return sw_fail(err, SW_EINVAL,
		               "field 'messages' is text, and there is no tokenizer: give token ids");
	size_t cap = v->v.count;
	sw_chat_msg *msgs = calloc(cap, sizeof *msgs);
	char **strs = calloc(2 * cap, sizeof *strs);
	int rc = msgs && strs ? SW_OK : sw_fail(err, SW_ENOMEM, "field 'messages': out of memory");
	size_t i = 0;
	sw_iter it;
	sw_val m;
	sw_iter_init(&it, v);
	int more = 0;
	while (!rc && i < cap && (more = sw_iter_next(&it, &m)) == 1) {
		if (m.type != SW_T_MAP) {
			rc = sw_fail(err, SW_ETYPE, "field 'messages': message %zu is a %s, not a map", i,
			             sw_type_name(m.type));
			break;
		}
		const sw_val *role = NULL, *content = NULL;
		sw_val k, x, rv, cv;
		sw_iter mi;
		sw_iter_init(&mi, &m);
		while (!rc && sw_iter_next(&mi, &k) == 1 && sw_iter_next(&mi, &x) == 1) {
			bool is_role = key_is_(&k, "role"), is_content = key_is_(&k, "content");
			if (!is_role && !is_content)
				continue;
			if (x.type != SW_T_STR)
				rc = sw_fail(err, SW_ETYPE, "field 'messages': message %zu: '%s' is a %s, not a string",
				             i, is_role ? "role" : "content", sw_type_name(x.type));
			else if (is_role)
				rv = x, role = &rv;
			else
				cv = x, content = &cv;
		}
		if (rc)
			break;
		if (!role || !content) {
			rc = sw_fail(err, SW_EINVAL, "field 'messages': message %zu has no '%s'", i,
			             role ? "content" : "role");
			break;
		}
		strs[2 * i] = strndup(role->v.str.ptr, role->v.str.len);
		strs[2 * i + 1] = strndup(content->v.str.ptr, content->v.str.len);
		if (!strs[2 * i] || !strs[2 * i + 1]) {
			rc = sw_fail(err, SW_ENOMEM, "field 'messages': out of memory");
			i++;
			break;
		}
		msgs[i] = (sw_chat_msg){ strs[2 * i], strs[2 * i + 1] };
		i++;
	}
	if (!rc && more < 0)
		rc = sw_fail(err, SW_EFORMAT, "field 'messages' is corrupt");
	char *text = NULL;
	size_t tlen = 0;
	sw_error e = { 0 };
	if (!rc && sw_tokenizer_chat(tok, msgs, i, 1, &text, &tlen, &e))
		rc = sw_fail(err, e.code ? e.code : SW_EFORMAT,
		             "cannot render 'messages' with the chat template: %s", e.msg);
	if (!rc)
		rc = sw_sample_encode(tok, text, tlen, "the rendered messages", vocab, ids, n, err);
	free(text);
	for (size_t j = 0; strs && j < 2 * i; j++)
		free(strs[j]);
	free(strs);
	free(msgs);
	return rc;
}

int sw_sample_prompt(sw_rec *r, const sw_tokenizer *tok, int vocab, int32_t **ids, size_t *n,
                     sw_error *err)
{
	sw_val v;
	*ids = NULL;
	*n = 0;
	if (sw_rec_get(r, "prompt_tokens", &v) == 0)
		return sw_sample_tokens(r, "prompt_tokens", vocab, ids, n, err);
	if (sw_rec_get(r, "messages", &v) == 0)
		return messages_(&v, tok, vocab, ids, n, err);
	if (sw_rec_get(r, "prompt", &v) == 0) {
		if (v.type == SW_T_ARRAY) /* TRL's conversational form */
			return sw_fail(err, SW_ETYPE, "field 'prompt' is an array, not a string: a conversation goes in "
			               "'messages' (jq -c '.messages = .prompt | del(.prompt)' moves it there)");
		if (v.type != SW_T_STR)
			return sw_fail(err, SW_ETYPE, "field 'prompt' is a %s, not a string",
			               sw_type_name(v.type));
		return sw_sample_encode(tok, v.v.str.ptr, v.v.str.len, "field 'prompt'", vocab, ids, n,
		                        err);
	}
	const char *alias = sw_sample_prompt_alias(r);
	if (alias)
		return sw_fail(err, SW_ENOENT, "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' "
		               "field; it has '%s': jq -c '.prompt = .%s' names it the prompt", alias, alias);
	return sw_fail(err, SW_ENOENT,
	               "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field");
}

const char *sw_sample_prompt_alias(sw_rec *r)
{
	static const char *const names[] = { "question", "problem", "query", "instruction", "input" };
	sw_val v;
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (sw_rec_get(r, names[i], &v) == 0 && v.type == SW_T_STR)
			return names[i];
	return NULL;
}

int sw_sample_response(sw_rec *r, const sw_tokenizer *tok, int vocab, int32_t **ids, size_t *n,
                       sw_error *err)
{
	sw_val v;
	*ids = NULL;
	*n = 0;
	if (sw_rec_get(r, "response_tokens", &v) == 0)
		return sw_sample_tokens(r, "response_tokens", vocab, ids, n, err);
	if (sw_rec_get(r, "response", &v) == 0) {
		if (v.type != SW_T_STR)
			return sw_fail(err, SW_ETYPE, "field 'response' is a %s, not a string",
			               sw_type_name(v.type));
		return sw_sample_encode(tok, v.v.str.ptr, v.v.str.len, "field 'response'", vocab, ids, n,
		                        err);
	}
	return sw_fail(err, SW_ENOENT,
	               "no response: the record has no 'response_tokens' or 'response' field");
}

char *sw_sample_group_id(sw_rec *rec, uint64_t place, const char **bad)
{
	sw_val v;
	char buf[32];
	*bad = NULL;
	if (sw_rec_get(rec, "id", &v))
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)place + 1);
	else if (v.type == SW_T_STR)
		return strndup(v.v.str.ptr, v.v.str.len);
	else if (v.type == SW_T_UINT)
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)v.v.u);
	else if (v.type == SW_T_INT)
		snprintf(buf, sizeof buf, "%lld", (long long)v.v.i);
	else {
		*bad = sw_type_name(v.type);
		return NULL;
	}
	return strdup(buf);
}
