/*
 * test_sample_fields.c - a sample's token fields (sw/sample.h): prompt
 * tokens, chat messages and text, responses, and every way a token array
 * can be wrong, each with the message the programs print.
 */
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/sample.h"
#include "tap.h"

static sw_json_parser *jp_;
static sw_buf mp_;

/* A record from one line of JSON. */
static sw_rec *rec_(const char *json)
{
	sw_rec *r = sw_rec_new();
	size_t used;
	sw_error e = { 0 };
	mp_.len = 0;
	if (sw_json_to_mp(jp_, json, strlen(json), &used, &mp_, &e) || sw_rec_load(r, mp_.p, mp_.len) ||
	    sw_rec_own(r)) {
		printf("# bad fixture %s: %s\n", json, e.msg);
		exit(1);
	}
	return r;
}

/* sw_sample_prompt on json: its code, and the message when it fails. */
static int prompt_(const char *json, const sw_tokenizer *tok, int vocab, char *msg, int32_t **ids,
                   size_t *n)
{
	sw_rec *r = rec_(json);
	sw_error e = { 0 };
	int rc = sw_sample_prompt(r, tok, vocab, ids, n, &e);
	strcpy(msg, rc ? e.msg : "");
	sw_rec_free(r);
	return rc;
}

static void bad_(const sw_tokenizer *tok, const char *json, const char *want)
{
	char msg[512];
	int32_t *ids = (int32_t *)&ids;
	size_t n = 7;
	int rc = prompt_(json, tok, 300, msg, &ids, &n);
	ok(rc < 0 && !strcmp(msg, want), "%s: %s", json, want);
	if (strcmp(msg, want))
		printf("#   got '%s'\n", msg);
	ok(ids == NULL && n == 0, "%s: nothing returned", json);
}

int main(void)
{
	jp_ = sw_json_parser_new();
	sw_tokenizer *tok = sw_tokenizer_byte();
	char msg[512];
	int32_t *ids;
	size_t n;

	is_int(prompt_("{\"prompt_tokens\":[1,2,299]}", NULL, 300, msg, &ids, &n), 0, "prompt_tokens");
	ok(n == 3 && ids[0] == 1 && ids[1] == 2 && ids[2] == 299, "prompt_tokens as they are");
	free(ids);
	is_int(prompt_("{\"prompt_tokens\":[]}", NULL, 300, msg, &ids, &n), 0, "an empty prompt is the caller's");
	ok(n == 0 && ids != NULL, "no tokens, but an array to free");
	free(ids);

	/* text: the byte tokenizer's ids are the bytes (UTF-8 of "é" is c3 a9) */
	is_int(prompt_("{\"prompt\":\"a\\u00e9\"}", tok, 300, msg, &ids, &n), 0, "prompt text");
	ok(n == 3 && ids[0] == 'a' && ids[1] == 0xc3 && ids[2] == 0xa9, "prompt text encoded byte by byte");
	free(ids);
	is_int(prompt_("{\"prompt\":\"<|im_start|>x\"}", tok, 300, msg, &ids, &n), 0, "special tokens");
	ok(n == 2 && ids[0] == SW_TOK_BYTE_IM_START && ids[1] == 'x', "special tokens recognised");
	free(ids);
	/* prompt_tokens win over messages and prompt */
	is_int(prompt_("{\"prompt\":\"zz\",\"prompt_tokens\":[5]}", tok, 300, msg, &ids, &n), 0, "both");
	ok(n == 1 && ids[0] == 5, "prompt_tokens win over the text");
	free(ids);

	/* messages through the chat template, with the generation prompt */
	char *want;
	size_t wl;
	sw_chat_msg m[1] = { { "user", "hi" } };
	sw_error e = { 0 };
	is_int(sw_tokenizer_chat(tok, m, 1, 1, &want, &wl, &e), 0, "the template renders");
	uint32_t *wid;
	size_t wn;
	is_int(sw_tokenizer_encode(tok, want, wl, 1, &wid, &wn, &e), 0, "and encodes");
	is_int(prompt_("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"x\"}],\"prompt\":\"no\"}",
	               tok, 300, msg, &ids, &n), 0, "messages");
	int same = n == wn;
	for (size_t i = 0; same && i < n; i++)
		same = ids[i] == (int32_t)wid[i];
	ok(same, "messages are the template's rendering, encoded (other keys ignored; before 'prompt')");
	free(ids), free(want), free(wid);

	bad_(tok, "{\"id\":\"x\"}", "no prompt: the record has no 'prompt', 'messages' or 'prompt_tokens' field");
	bad_(tok, "{\"prompt_tokens\":\"abc\"}", "field 'prompt_tokens' is a str, not an array of token ids");
	bad_(tok, "{\"prompt_tokens\":[1,300]}",
	     "field 'prompt_tokens': token 1 is 300, outside the model's vocabulary of 300");
	bad_(tok, "{\"prompt_tokens\":[1,-4]}",
	     "field 'prompt_tokens': token 1 is -4, outside the model's vocabulary of 300");
	bad_(tok, "{\"prompt_tokens\":[1,2.5]}", "field 'prompt_tokens': token 1 is the number 2.5, not a token id");
	bad_(tok, "{\"prompt_tokens\":[[1]]}", "field 'prompt_tokens': token 0 is a array, not a token id");
	bad_(tok, "{\"messages\":\"hi\"}", "field 'messages' is a str, not an array of {role, content} maps");
	bad_(tok, "{\"messages\":[{\"role\":\"user\"}]}", "field 'messages': message 0 has no 'content'");
	bad_(tok, "{\"messages\":[{\"content\":\"x\"}]}", "field 'messages': message 0 has no 'role'");
	bad_(tok, "{\"messages\":[{\"role\":\"user\",\"content\":3}]}",
	     "field 'messages': message 0: 'content' is a uint, not a string");
	bad_(tok, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},7]}",
	     "field 'messages': message 1 is a uint, not a map");
	bad_(tok, "{\"messages\":[]}", "field 'messages' is empty");
	bad_(tok, "{\"prompt\":5}", "field 'prompt' is a uint, not a string");
	bad_(NULL, "{\"prompt\":\"hi\"}", "field 'prompt' is text, and there is no tokenizer: give token ids");
	/* a tokenizer whose ids do not fit the model is refused, never truncated */
	sw_rec *r = rec_("{\"prompt\":\"\\u00ff\"}");
	is_int(sw_sample_prompt(r, tok, 100, &ids, &n, &e), SW_ERANGE, "text outside a small vocabulary");
	ok(strstr(e.msg, "outside the model's vocabulary of 100") != NULL, "says so: %s", e.msg);
	sw_rec_free(r);

	/* any token field, with no vocabulary bound */
	r = rec_("{\"t\":[0,2147483647],\"u\":[2147483648],\"v\":[-1]}");
	is_int(sw_sample_tokens(r, "t", 0, &ids, &n, &e), 0, "ids up to 2^31-1 without a vocabulary");
	ok(n == 2 && ids[1] == 2147483647, "read as they are");
	free(ids);
	is_int(sw_sample_tokens(r, "u", 0, &ids, &n, &e), SW_ERANGE, "2^31 is no token id");
	ok(!strcmp(e.msg, "field 'u': token 0 is 2147483648, not a token id"), "%s", e.msg);
	is_int(sw_sample_tokens(r, "v", 0, &ids, &n, &e), SW_ERANGE, "-1 is no token id");
	is_int(sw_sample_tokens(r, "w", 0, &ids, &n, &e), SW_ENOENT, "absent");
	ok(!strcmp(e.msg, "no field 'w'"), "%s", e.msg);
	sw_rec_free(r);

	/* responses */
	r = rec_("{\"response\":\"ok\"}");
	ok(sw_sample_response_is_text(r) && sw_sample_prompt_is_text(r), "text, both");
	is_int(sw_sample_response(r, tok, 300, &ids, &n, &e), 0, "response text");
	ok(n == 2 && ids[0] == 'o' && ids[1] == 'k', "encoded");
	free(ids);
	sw_rec_free(r);
	r = rec_("{\"response\":\"ok\",\"response_tokens\":[9]}");
	ok(!sw_sample_response_is_text(r), "response_tokens: not text");
	is_int(sw_sample_response(r, tok, 300, &ids, &n, &e), 0, "response_tokens");
	ok(n == 1 && ids[0] == 9, "win over the text");
	free(ids);
	sw_rec_free(r);
	r = rec_("{}");
	is_int(sw_sample_response(r, tok, 300, &ids, &n, &e), SW_ENOENT, "no response");
	ok(!strcmp(e.msg, "no response: the record has no 'response_tokens' or 'response' field"), "%s", e.msg);
	sw_rec_free(r);

	sw_tokenizer_free(tok);
	sw_json_parser_free(jp_);
	sw_buf_release(&mp_);
	return tap_done();
}
