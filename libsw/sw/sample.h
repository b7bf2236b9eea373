/*
 * sw/sample.h - a sample's token fields as every program reads them: the
 * prompt (prompt_tokens, else messages through the chat template, else
 * prompt text), the response (response_tokens, else response text), and
 * any field that holds an array of token ids, checked against the model's
 * vocabulary.  sw-rollout, sw-train and their library objects read samples
 * through here only, so a prompt is tokenised one way everywhere.
 *
 * Text is encoded with special tokens recognised (special = 1), as a chat
 * template renders them.  Messages are [{role, content}, ...] maps, other
 * keys ignored, rendered with the generation prompt.
 *
 * Ownership: *ids is malloc'd (never NULL on success, even for no tokens)
 * and belongs to the caller.  Messages name the field and the token's index
 * but not the record: the caller prefixes "FILE: record N: ".  Functions
 * return SW_OK or a negative SW_E* code and fill err when it is not NULL.
 */
#ifndef SW_SAMPLE_H
#define SW_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "record.h"
#include "tokenizer.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

/*
 * The array of token ids in field key, each in 0 .. vocab-1 (vocab <= 0:
 * any non-negative int32).  An absent field is SW_ENOENT ("no field
 * 'key'"); anything that is not such an array is SW_ETYPE or SW_ERANGE
 * with a message saying which element is wrong and why.
 */
int sw_sample_tokens(sw_rec *r, const char *key, int vocab, int32_t **ids, size_t *n,
                     sw_error *err);

/* text[0..len) encoded by tok (special tokens recognised); what names it in messages. */
int sw_sample_encode(const sw_tokenizer *tok, const char *text, size_t len, const char *what,
                     int vocab, int32_t **ids, size_t *n, sw_error *err);

/*
 * Whether the prompt (or, for sw_sample_response, the response) must be
 * tokenised: the record has no token field for it.  A caller that loads
 * its tokenizer only when text comes asks this first.
 */
int sw_sample_prompt_is_text(sw_rec *r);
int sw_sample_response_is_text(sw_rec *r);

/*
 * The prompt's tokens: prompt_tokens if present, else messages rendered
 * with tok's chat template and its generation prompt, else prompt.  None
 * of the three is SW_ENOENT.  Text with tok NULL is SW_EINVAL.  An empty
 * prompt is returned as it is (n = 0): whether that is an error is the
 * caller's to say.
 */
int sw_sample_prompt(sw_rec *r, const sw_tokenizer *tok, int vocab, int32_t **ids, size_t *n,
                     sw_error *err);

/*
 * A prompt's group id, which sw-rollout's samples of it carry as `group` and
 * start their ids with: the record's id (a string, or an integer written in
 * decimal), else its place in the whole input (from 0) plus 1.  NULL with
 * *bad the id's type name where the id is neither, NULL alone out of
 * memory; the caller frees it.
 */
char *sw_sample_group_id(sw_rec *r, uint64_t place, const char **bad);

/* The response's tokens: response_tokens if present, else response text encoded. */
int sw_sample_response(sw_rec *r, const sw_tokenizer *tok, int vocab, int32_t **ids, size_t *n,
                       sw_error *err);

#pragma GCC visibility pop

#endif
