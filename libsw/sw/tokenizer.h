/*
 * sw/tokenizer.h - text to token ids and back, and chat prompts to text.
 *
 * Two kinds of tokenizer: the built-in byte tokenizer (ids 0-255 are the
 * bytes, special tokens follow from 256), and a Hugging Face tokenizer.json
 * holding a byte-level BPE as GPT-2, Llama 3 and Qwen2 use it (Split regex
 * pre-tokenizers run through PCRE2, the ByteLevel byte-to-unicode mapping,
 * merges by rank, added and special tokens).  A tokenizer.json of any other
 * kind (WordPiece, Unigram, a SentencePiece-style BPE, a normalizer or
 * pre-tokenizer not implemented here) is refused with an error that names
 * what is not supported; nothing is approximated.
 *
 * encode never adds BOS or EOS by itself (a post-processor in tokenizer.json
 * is not applied): ids are exactly the text's, as HF's
 * encode(text, add_special_tokens=False) gives them; callers add
 * sw_tokenizer_bos() where their model wants it (a chat template that
 * renders the BOS token's text does so already).  Text need not be UTF-8:
 * bytes that are not part of a valid UTF-8 sequence are encoded as pieces of
 * their own, so that decode_bytes(encode(x)) == x for every byte string x.
 * decode gives text as Hugging Face tokenizers' decode does, always valid
 * UTF-8: an invalid sequence (a response cut inside a character, byte
 * tokens that form no character) becomes U+FFFD; decode_bytes gives the
 * tokens' bytes as they are.
 *
 * Chat templates are rendered by family ("chatml", "llama3", "plain" when
 * the model has none); Jinja is never run.  The chat_template of
 * tokenizer_config.json (or chat_template.jinja) is recognised only when it
 * is, text for text, one of the templates we reproduce: the plain chatml
 * one, chatml with a default system prompt (Qwen2, SmolLM2), Qwen2.5's,
 * Qwen3's (its <think> handling; enable_thinking left undefined), Llama 3's,
 * Llama 3.1's and Llama 3.2's (today's date, local time, as transformers
 * gives strftime_now); tools are not passed.  Any other template makes
 * sw_tokenizer_template() return "unknown" and sw_tokenizer_chat() fail:
 * a look-alike is never rendered approximately.
 *
 * Ownership: the caller owns the tokenizer from load/byte until
 * sw_tokenizer_free() (free(NULL) is a no-op) and every buffer that encode,
 * decode and chat return (release with free()).  A tokenizer is read-only
 * after loading, so several threads may use one at the same time.
 */
#ifndef SW_TOKENIZER_H
#define SW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_tokenizer sw_tokenizer;

/* The byte tokenizer's special tokens and their ids. */
#define SW_TOK_BYTE_BOS 256       /* <|bos|> */
#define SW_TOK_BYTE_EOS 257       /* <|eos|> */
#define SW_TOK_BYTE_PAD 258       /* <|pad|> */
#define SW_TOK_BYTE_IM_START 259  /* <|im_start|> */
#define SW_TOK_BYTE_IM_END 260    /* <|im_end|> */
#define SW_TOK_BYTE_VOCAB 261

/*
 * Load model_dir/tokenizer.json (with tokenizer_config.json, when present,
 * for the BOS/EOS/PAD tokens and the chat template); without tokenizer.json,
 * the byte tokenizer, unless the directory holds tokenizer files of a kind
 * we cannot read (tokenizer.model, vocab.json), which is an error.  NULL on
 * failure, err says why.
 */
sw_tokenizer *sw_tokenizer_load(const char *model_dir, sw_error *err);

/*
 * The same from memory: json[0..len) is tokenizer.json's text, config[0..clen)
 * tokenizer_config.json's (config may be NULL).  Both are only read.
 */
sw_tokenizer *sw_tokenizer_from_json(const char *json, size_t len, const char *config, size_t clen,
                                     sw_error *err);

/* The built-in byte tokenizer, with the chatml template; NULL when out of memory. */
sw_tokenizer *sw_tokenizer_byte(void);

/*
 * Write the byte tokenizer's tokenizer.json (a ByteLevel BPE with the 256
 * byte symbols and no merges, which Hugging Face `tokenizers` loads as it is)
 * and tokenizer_config.json (its special tokens and the chatml template) into
 * model_dir, which must exist.  0 or an SW_E* code.
 */
int sw_tokenizer_save_byte(const char *model_dir, sw_error *err);

void sw_tokenizer_free(sw_tokenizer *t);

size_t sw_tokenizer_vocab(const sw_tokenizer *t); /* every id is below this */
int sw_tokenizer_bos(const sw_tokenizer *t);      /* a token id, or -1 when none */
int sw_tokenizer_eos(const sw_tokenizer *t);
int sw_tokenizer_pad(const sw_tokenizer *t);

/* The id of the token whose text is token (an added token or a vocabulary entry, in its
 * byte form), or -1. */
int sw_tokenizer_token_id(const sw_tokenizer *t, const char *token);

/* 1 when id is a special token (those decode skips on request), else 0. */
int sw_tokenizer_is_special(const sw_tokenizer *t, uint32_t id);

/*
 * The ids at which generation stops for this tokenizer's chat template: EOS
 * and the template's end-of-turn token (<|im_end|>, <|eot_id|>), each once.
 * Writes at most max of them to ids; returns how many there are.
 */
size_t sw_tokenizer_stop_ids(const sw_tokenizer *t, uint32_t *ids, size_t max);

/*
 * Encode text[0..len) into *ids (malloc'd, *n of them; the caller frees).
 * special: nonzero to recognise special tokens in the text (as the chat
 * template renders them); zero to encode their text as ordinary text.
 * Added tokens that are not special are always recognised, as HF does.
 */
int sw_tokenizer_encode(const sw_tokenizer *t, const char *text, size_t len, int special,
                        uint32_t **ids, size_t *n, sw_error *err);

/*
 * Decode ids into *text (malloc'd, NUL-terminated, *len bytes before the
 * NUL; the caller frees): valid UTF-8, equal to tokenizers'
 * decode(ids, skip_special_tokens=skip_special).  skip_special: leave out
 * special tokens.  An id outside the vocabulary is SW_ERANGE.
 */
int sw_tokenizer_decode(const sw_tokenizer *t, const uint32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, sw_error *err);
/* The same, giving the tokens' bytes as they are (not always UTF-8): for a
 * msgpack bin, or to match stop strings token by token. */
int sw_tokenizer_decode_bytes(const sw_tokenizer *t, const uint32_t *ids, size_t n, int skip_special,
                              char **text, size_t *len, sw_error *err);

typedef struct sw_chat_msg {
	const char *role, *content;
} sw_chat_msg;

/*
 * Render msgs[0..n) with the tokenizer's chat template into *text
 * (malloc'd, NUL-terminated; the caller frees), as transformers'
 * apply_chat_template(msgs, tokenize=False, add_generation_prompt=...)
 * renders it.  Encode the result with special = 1.  SW_EFORMAT for an
 * unknown template; SW_EINVAL for a message without role or content, or
 * with a role the template would leave out (Qwen2.5 and Qwen3 render only
 * user, system, assistant and tool).
 */
int sw_tokenizer_chat(const sw_tokenizer *t, const sw_chat_msg *msgs, size_t n,
                      int add_generation_prompt, char **text, size_t *len, sw_error *err);

/* "chatml", "llama3", "plain" (no chat template at all) or "unknown" (see above). */
const char *sw_tokenizer_template(const sw_tokenizer *t);

#pragma GCC visibility pop

#endif
