/*
 * genconfig.c - the end tokens a model directory's generation_config.json
 * names (eos_token_id: an id or a list of them), which end a response
 * besides the model's and the tokenizer's own.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "sw/stream.h"
#include "rollout_internal.h"

/* id to ids when the model has it (an id past its vocabulary ends nothing it can write); SW_ERANGE past cap. */
static int add_(int32_t *ids, int cap, int *n, int vocab, uint64_t id)
{
	if (id >= (uint64_t)vocab)
		return 0;
	if (*n >= cap)
		return SW_ERANGE;
	ids[(*n)++] = (int32_t)id;
	return 0;
}

int sw_rollout_generation_eos(const char *dir, int vocab, int32_t *ids, int cap, int *n, sw_error *err)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/generation_config.json", dir) >= sizeof path)
		return sw_fail(err, SW_ERANGE, "'%s': the path is too long", dir);
	if (access(path, F_OK))
		return 0;
	sw_error e = { 0 };
	char where[400];
	sw_reader *r = sw_reader_open(path, &e);
	sw_rec *rec = sw_rec_new();
	int rc = 0;
	if (!r || !rec) {
		rc = sw_fail(err, r ? SW_ENOMEM : SW_EIO, "cannot read '%s': %s", path, r ? "out of memory" : strerror(e.sys_errno));
	} else if (sw_reader_next(r, rec) != 1) {
		rc = sw_fail(err, SW_EFORMAT, "%s: %s", path, sw_error_str(sw_reader_error(r), where, sizeof where));
	} else {
		sw_val v, x;
		if (sw_rec_get(rec, "eos_token_id", &v) == 0) {
			if (v.type == SW_T_UINT) {
				rc = add_(ids, cap, n, vocab, v.v.u);
			} else if (v.type == SW_T_ARRAY) {
				sw_iter it;
				sw_iter_init(&it, &v);
				for (uint32_t i = 0; !rc && sw_iter_next(&it, &x) == 1; i++)
					rc = x.type != SW_T_UINT
					     ? sw_fail(err, SW_EFORMAT, "%s: field 'eos_token_id': item %u is a %s, not a token id",
					               path, i, sw_type_name(x.type))
					     : add_(ids, cap, n, vocab, x.v.u);
			} else if (v.type != SW_T_NIL) {
				rc = sw_fail(err, SW_EFORMAT, "%s: field 'eos_token_id' is a %s, not a token id or a list of them",
				             path, sw_type_name(v.type));
			}
		}
	}
	if (rc == SW_ERANGE)
		rc = sw_fail(err, SW_ERANGE, "%s: field 'eos_token_id' names more than %d end tokens", path, cap);
	sw_rec_free(rec);
	sw_reader_free(r);
	return rc;
}
