/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * The input is a whole safetensors file.  What must hold:
 *
 *  - the parser either refuses it with an error message that names the
 *    file, or accepts a header whose every tensor lies inside the data,
 *    has as many bytes as its dtype and shape say, and overlaps no other,
 *    under a unique name;
 *  - every accepted tensor converts to float32 (or is refused for a NaN or
 *    Inf, naming the tensor), reading only its own bytes;
 *  - loading the file into a small one-layer llama (hidden 8, vocab 16;
 *    tied and untied) succeeds only when every tensor of the model came
 *    with its shape, and then each tensor's floats are those of the file.
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_safetensors -dict=tests/fuzz/fuzz_safetensors.dict build-fuzz/corpus-fuzz_safetensors
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "model/model_io.h"

#define CONVERT_MAX ((uint64_t)1 << 22) /* elements converted per input */

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_safetensors: %s:%d: check failed: %s: ",    \
			        __FILE__, __LINE__, #cond);                               \
			fprintf(stderr, __VA_ARGS__);                                     \
			fputc('\n', stderr);                                              \
			abort();                                                          \
		}                                                                         \
	} while (0)

static sw_model *small_(int tied)
{
	sw_model_config c = { 0 };
	strcpy(c.model_type, "llama");
	c.vocab_size = 16, c.hidden_size = 8, c.intermediate_size = 8, c.num_hidden_layers = 1;
	c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 4;
	c.max_position_embeddings = 64, c.rms_norm_eps = 1e-6f, c.rope_theta = 10000;
	c.tie_word_embeddings = tied, c.bos_token_id = -1;
	sw_error err = { 0 };
	sw_model *m = sw_model_new(&c, &err);
	CHECK(m != NULL, "sw_model_new: %s", err.msg);
	return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sw_model *models[2];
	if (!models[0])
		models[0] = small_(0), models[1] = small_(1);
	sw_st_file f;
	sw_error err = { 0 };
	int rc = sw_st_open_mem(&f, data, size, "fuzz.safetensors", &err);
	if (rc) {
		CHECK(rc == err.code && rc < 0, "return %d, error code %d", rc, err.code);
		CHECK(!strncmp(err.msg, "fuzz.safetensors: ", 18), "message without the file: %s", err.msg);
		return 0;
	}
	CHECK(f.data >= data + 8 && f.data + f.data_size == data + size, "data outside the input");
	uint64_t converted = 0;
	for (size_t i = 0; i < f.n; i++) {
		const sw_st_tensor *t = &f.t[i];
		size_t es = t->dtype == SW_DT_F32 ? 4 : 2;
		uint64_t numel = 1;
		for (int d = 0; d < t->ndim; d++)
			numel *= (uint64_t)t->shape[d];
		CHECK(numel == t->numel, "%s: numel %llu, shape gives %llu", t->name, (unsigned long long)t->numel,
		      (unsigned long long)numel);
		CHECK(t->begin <= t->end && t->end <= f.data_size && t->end - t->begin == numel * es,
		      "%s: offsets [%llu, %llu] of %zu bytes", t->name, (unsigned long long)t->begin,
		      (unsigned long long)t->end, f.data_size);
		for (size_t j = 0; j < i; j++) {
			const sw_st_tensor *u = &f.t[j];
			CHECK(strcmp(t->name, u->name), "%s twice", t->name);
			CHECK(t->end <= u->begin || u->end <= t->begin || t->begin == t->end || u->begin == u->end,
			      "%s and %s overlap", t->name, u->name);
		}
		if (converted + numel > CONVERT_MAX)
			continue;
		converted += numel;
		/* a buffer of exactly numel floats: ASan sees a write past it */
		float *x = malloc(numel ? numel * sizeof *x : 1);
		CHECK(x != NULL, "out of memory");
		rc = sw_st_read_f32(&f, i, x, &err);
		if (rc) {
			CHECK(rc == SW_EFORMAT && strstr(err.msg, "fuzz.safetensors: tensor '"), "read: %d %s", rc, err.msg);
		} else {
			for (uint64_t j = 0; j < numel; j++)
				CHECK(isfinite(x[j]), "%s: element %llu is not finite", t->name, (unsigned long long)j);
		}
		free(x);
	}
	for (int k = 0; k < 2; k++) {
		sw_model *m = models[k];
		memset(m->arena, 0xff, m->nparams * sizeof(float)); /* NaN everywhere: a tensor not filled shows */
		rc = sw_st_load_into(m, &f, &err);
		if (rc) {
			CHECK(!strncmp(err.msg, "fuzz.safetensors: ", 18), "message without the file: %s", err.msg);
			continue;
		}
		for (size_t i = 0; i < m->ntensors; i++) {
			const sw_tensor *mt = &m->tensors[i];
			size_t j;
			for (j = 0; j < f.n && strcmp(f.t[j].name, mt->name); j++)
				;
			CHECK(j < f.n, "loaded without '%s'", mt->name);
			CHECK(f.t[j].numel == mt->numel, "%s: %llu elements for %zu", mt->name,
			      (unsigned long long)f.t[j].numel, mt->numel);
			float *x = malloc(mt->numel * sizeof *x);
			CHECK(x && sw_st_read_f32(&f, j, x, &err) == 0, "%s reads no more", mt->name);
			CHECK(!memcmp(x, mt->data, mt->numel * sizeof *x), "%s: the arena differs from the file",
			      mt->name);
			free(x);
		}
	}
	sw_st_close(&f);
	return 0;
}
