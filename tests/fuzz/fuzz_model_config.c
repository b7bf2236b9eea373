/*
 * fuzz_model_config.c - libFuzzer target for the config.json reader.
 *
 * The input is a config.json.  What must hold:
 *
 *  - a refused input gets a negative code and a message that starts with
 *    the file's name;
 *  - an accepted one passes sw_model_config_check and has parameters;
 *  - written back as config.json text and read again, it is the same
 *    configuration, field for field (the writer's floats read back exactly).
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   build-fuzz/fuzz_model_config -dict=tests/fuzz/fuzz_model_config.dict build-fuzz/corpus-fuzz_model_config
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_io.h"

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "fuzz_model_config: %s:%d: check failed: %s: ",     \
			        __FILE__, __LINE__, #cond);                                \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
			abort();                                                           \
		}                                                                          \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sw_model_config c, d;
	sw_error err = { 0 };
	int rc = sw_model_config_parse((const char *)data, size, "fuzz/config.json", &c, &err);
	if (rc) {
		CHECK(rc < 0 && rc == err.code, "return %d, error code %d", rc, err.code);
		CHECK(!strncmp(err.msg, "fuzz/config.json: ", 18), "message without the file: %s", err.msg);
		return 0;
	}
	CHECK(sw_model_config_check(&c, &err) == 0, "accepted but fails the check: %s", err.msg);
	CHECK(sw_model_config_nparams(&c) > 0, "no parameters");
	sw_buf b = { 0 };
	rc = sw_model_config_text(&c, "fuzz/out.json", "float32", &b, &err);
	CHECK(rc == 0, "an accepted config is not written: %s", err.msg);
	memset(&err, 0, sizeof err);
	rc = sw_model_config_parse((const char *)b.p, b.len, "fuzz/out.json", &d, &err);
	if (rc)
		fprintf(stderr, "%.*s\n", (int)b.len, (const char *)b.p);
	CHECK(rc == 0, "what was written does not read back: %s", err.msg);
	CHECK(!memcmp(&c, &d, sizeof c), "written and read back, the configuration changed");
	sw_buf_release(&b);
	return 0;
}
