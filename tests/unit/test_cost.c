/*
 * test_cost.c - the cost model of sw/cost.h: the default coefficients, each
 * term of the formula against a hand computation, media sizes from fields
 * and from PNG, JPEG and WAV headers, config.json reading (a Llama and a
 * Qwen2-VL-style config), tokenising with the model's tokenizer, and every
 * kind of bad field.
 */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"
#include "sw/cost.h"
#include "tap.h"

static char dir_[] = "/tmp/sw-test-cost.XXXXXX";

/* One record from a line of JSON (sw-stream(5) mapping). */
static sw_rec *rec_(const char *json)
{
	sw_error e = { 0 };
	sw_reader *r = sw_reader_memopen(json, strlen(json), "test", &e);
	sw_rec *rec = sw_rec_new();
	if (!r || sw_reader_next(r, rec) != 1 || sw_rec_own(rec)) {
		printf("# bad test JSON: %s\n", json);
		exit(1);
	}
	sw_reader_free(r);
	return rec;
}

static int cost_(const sw_cost_model *m, const char *json, sw_cost *c, sw_error *e)
{
	sw_rec *r = rec_(json);
	memset(e, 0, sizeof *e);
	int rc = sw_cost_sample(m, r, c, e);
	sw_rec_free(r);
	return rc;
}

static void write_(const char *name, const void *p, size_t n)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir_, name);
	FILE *f = fopen(path, "wb");
	fwrite(p, 1, n, f);
	fclose(f);
}

static int near_(double a, double b)
{
	return fabs(a - b) <= 1e-12 * fabs(b);
}

static void test_defaults(void)
{
	sw_cost_model *m = sw_cost_model_new();
	sw_cost_params p;
	sw_cost c;
	sw_error e;
	sw_cost_model_params(m, &p);
	/* Llama-2-7B: 32 * (4*4096^2 + 3*4096*11008) + 4096*32000 = 6607077376 */
	ok(p.linear == 2.0 * 6607077376.0, "default linear term is 2N of a 7B Llama (%.0f)", p.linear);
	ok(p.attention == 2.0 * 32 * 32 * 128, "default attention term is 2 * layers * heads * head_dim");
	ok(p.patch_size == 14 && p.merge == 2 && p.temporal_patch == 2, "Qwen2-VL patching by default");

	ok(cost_(m, "{\"prompt_tokens\":[1,2,3],\"response_tokens\":[4,5,6,7,8]}", &c, &e) == 0, "tokens given");
	ok(c.prompt_tokens == 3 && c.response_tokens == 5 && c.tokens == 8 && !c.estimated, "3 + 5 tokens");
	ok(near_(c.total, 8 * p.linear + 64 * p.attention), "cost = 8 linear + 64 attention");
	ok(c.linear == 8 * p.linear && c.attention == 64 * p.attention && c.media == 0, "the terms apart");

	ok(cost_(m, "{\"prompt\":\"abcdefghi\",\"response\":\"abcd\"}", &c, &e) == 0, "text only");
	ok(c.prompt_tokens == 3 && c.response_tokens == 1 && c.estimated, "estimated at 4 bytes a token");
	ok(cost_(m, "{\"messages\":[{\"role\":\"user\",\"content\":\"12345678\"}]}", &c, &e) == 0 &&
	           c.prompt_tokens == 2 + 4,
	   "messages: contents plus 4 a message (%llu)", (unsigned long long)c.prompt_tokens);
	ok(cost_(m, "{\"id\":\"x\"}", &c, &e) == 0 && c.tokens == 0 && c.total == 0, "no text, no cost");

	sw_cost_model_set_train(m, 1);
	sw_cost t;
	cost_(m, "{\"prompt_tokens\":[1,2,3],\"response_tokens\":[4,5,6,7,8]}", &t, &e);
	ok(near_(t.total, 3 * (8 * p.linear + 64 * p.attention)), "training costs 3 times as much");
	sw_cost_model_free(m);
	sw_cost_model_free(NULL);
}

static void test_media(void)
{
	sw_cost_model *m = sw_cost_model_new();
	sw_cost_params p;
	sw_cost c;
	sw_error e;
	sw_cost_model_params(m, &p);

	/* 56 x 28: a 28-pixel unit (14 * merge 2) makes 2 x 1 units = 4 x 2 patches, 2 tokens */
	ok(cost_(m, "{\"prompt_tokens\":[1],\"media\":[{\"type\":\"image\",\"w\":28,\"h\":56}]}", &c, &e) == 0,
	   "image with w and h");
	ok(c.patches == 8 && c.media_tokens == 2 && c.tokens == 3, "8 patches, 2 tokens (%llu, %llu)",
	   (unsigned long long)c.patches, (unsigned long long)c.media_tokens);
	ok(near_(c.media, 8 * p.enc_linear + 64 * p.enc_attention), "encoder term of 8 patches");
	ok(near_(c.total, 3 * p.linear + 9 * p.attention + c.media), "patches count as tokens too");
	cost_(m, "{\"media\":[{\"type\":\"image\",\"w\":29,\"h\":1}]}", &c, &e);
	ok(c.patches == 2 * 4, "sides round up to whole units (%llu)", (unsigned long long)c.patches);

	/* video: 3 frames of 28 x 28 = 4 patches each, 2 frames a temporal patch: ceil(12 / 2) = 6 */
	ok(cost_(m, "{\"media\":[{\"type\":\"video\",\"frames\":[{\"w\":28,\"h\":28},{\"w\":28,\"h\":28},"
	            "{\"w\":28,\"h\":28}]}]}", &c, &e) == 0 && c.patches == 6 && c.media_tokens == 1,
	   "video frames x patches / temporal patch");

	/* audio: 1 s at 16 kHz = 100 frames = 50 positions = 25 tokens */
	float *pcm = calloc(16000, sizeof *pcm);
	sw_rec *r = sw_rec_new(), *item = sw_rec_new();
	sw_rec_set_str(item, "type", "audio", 5);
	sw_rec_set_u64(item, "rate", 16000);
	sw_rec_set_bin(item, "data", pcm, 16000 * sizeof *pcm);
	const uint8_t *ib;
	size_t in;
	sw_rec_bytes(item, &ib, &in);
	uint8_t arr[1 + 70000];
	arr[0] = 0x91; /* an array of one */
	memcpy(arr + 1, ib, in);
	sw_rec_set_raw(r, "media", arr, in + 1);
	ok(sw_cost_sample(m, r, &c, &e) == 0 && c.patches == 50 && c.media_tokens == 25,
	   "audio data: 50 positions, 25 tokens (%llu, %llu)", (unsigned long long)c.patches,
	   (unsigned long long)c.media_tokens);
	free(pcm);
	sw_rec_free(r);
	sw_rec_free(item);

	/* sizes from files */
	unsigned char png[24] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
		                  0, 0, 0, 56, 0, 0, 0, 28 };
	write_("a.png", png, sizeof png);
	unsigned char jpg[] = { 0xff, 0xd8, 0xff, 0xe0, 0, 4, 'J', 'F', 0xff, 0xc0, 0, 11, 8, 0, 56, 0, 28, 3, 0, 0, 0 };
	write_("b.jpg", jpg, sizeof jpg);
	unsigned char wav[44] = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' ', 16, 0, 0, 0,
		                  1, 0, 1, 0, 0x80, 0x3e, 0, 0, 0, 0x7d, 0, 0, 2, 0, 16, 0, 'd', 'a', 't', 'a',
		                  0x00, 0xfa, 0, 0 }; /* mono 16 kHz 16-bit, 64000 bytes = 2 s */
	write_("c.wav", wav, sizeof wav);
	char json[512];
	snprintf(json, sizeof json, "{\"media\":[{\"type\":\"image\",\"path\":\"%s/a.png\"}]}", dir_);
	ok(cost_(m, json, &c, &e) == 0 && c.patches == 8, "PNG size from its header (%s)", e.msg);
	snprintf(json, sizeof json, "{\"media\":[{\"type\":\"image\",\"path\":\"%s/b.jpg\"}]}", dir_);
	ok(cost_(m, json, &c, &e) == 0 && c.patches == 8, "JPEG size from its SOF marker (%s)", e.msg);
	snprintf(json, sizeof json, "{\"media\":[{\"type\":\"audio\",\"path\":\"%s/c.wav\"}]}", dir_);
	ok(cost_(m, json, &c, &e) == 0 && c.patches == 100, "WAV length from its header: 2 s, 100 positions (%s)",
	   e.msg);
	snprintf(json, sizeof json, "{\"media\":[{\"type\":\"image\",\"path\":\"%s/c.wav\"}]}", dir_);
	ok(cost_(m, json, &c, &e) == SW_EFORMAT && strstr(e.msg, "not a PNG or JPEG"), "a WAV is no image: %s",
	   e.msg);
	/* damaged headers: named, never read past, never guessed */
	unsigned char jcut[] = { 0xff, 0xd8, 0xff, 0xe0, 0, 200, 'J' }; /* a segment longer than the file */
	write_("cut.jpg", jcut, sizeof jcut);
	unsigned char jbad[] = { 0xff, 0xd8, 0x00, 0x11, 0x22, 0x33 }; /* no marker where one must be */
	write_("bad.jpg", jbad, sizeof jbad);
	unsigned char wnodata[36];
	memcpy(wnodata, wav, 36); /* RIFF, fmt, and no data chunk */
	write_("nodata.wav", wnodata, sizeof wnodata);
	unsigned char wnofmt[20] = { 'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E', 'd', 'a', 't', 'a', 4, 0, 0, 0 };
	write_("nofmt.wav", wnofmt, sizeof wnofmt);
	static const char *const damaged[] = { "image\",\"path\":\"%s/cut.jpg", "image\",\"path\":\"%s/bad.jpg",
		                               "audio\",\"path\":\"%s/nodata.wav", "audio\",\"path\":\"%s/nofmt.wav" };
	for (size_t i = 0; i < 4; i++) {
		char fmt[200];
		snprintf(fmt, sizeof fmt, "{\"media\":[{\"type\":\"%s\"}]}", damaged[i]);
		snprintf(json, sizeof json, fmt, dir_);
		ok(cost_(m, json, &c, &e) == SW_EFORMAT && strstr(e.msg, "media 0: '"), "damaged file %zu: %s", i, e.msg);
	}
	ok(cost_(m, "{\"media\":[{\"type\":\"image\",\"path\":\"/no/such.png\"}]}", &c, &e) == SW_EIO &&
	           strstr(e.msg, "media 0: cannot open '/no/such.png'"),
	   "a missing file: %s", e.msg);
	sw_cost_model_free(m);
}

static void test_bad_fields(void)
{
	sw_cost_model *m = sw_cost_model_new();
	sw_cost c;
	sw_error e;
	static const struct {
		const char *json, *msg;
	} bad[] = {
		{ "{\"prompt_tokens\":\"1 2 3\"}", "field 'prompt_tokens' is a str, not an array" },
		{ "{\"response_tokens\":{\"a\":1}}", "field 'response_tokens' is a map, not an array" },
		{ "{\"prompt\":12}", "field 'prompt' is a uint, not a str" },
		{ "{\"messages\":\"hi\"}", "field 'messages' is a str, not an array" },
		{ "{\"messages\":[{\"role\":\"user\"}]}", "message 0 is not a map of 'role' and 'content' strings" },
		{ "{\"media\":{\"type\":\"image\"}}", "field 'media' is a map, not an array" },
		{ "{\"media\":[7]}", "media 0 is a uint, not a map" },
		{ "{\"media\":[{\"w\":2,\"h\":2}]}", "media 0 has no 'type' string" },
		{ "{\"media\":[{\"type\":\"smell\"}]}", "media 0: unknown type 'smell'" },
		{ "{\"media\":[{\"type\":\"image\",\"w\":28}]}", "media 0: an image needs 'w' and 'h', or a 'path'" },
		{ "{\"media\":[{\"type\":\"image\",\"w\":-3,\"h\":2}]}", "media 0: field 'w' is not a whole number" },
		{ "{\"media\":[{\"type\":\"image\",\"w\":2.5,\"h\":2}]}", "media 0: field 'w' is not a whole number" },
		{ "{\"media\":[{\"type\":\"image\",\"w\":0,\"h\":2}]}", "media 0: field 'w' is not a whole number" },
		{ "{\"media\":[{\"type\":\"video\",\"frames\":[]}]}", "media 0: a video needs a non-empty 'frames'" },
		{ "{\"media\":[{\"type\":\"video\",\"frames\":[{\"w\":1}]}]}", "media 0: frame 0: an image needs" },
		{ "{\"media\":[{\"type\":\"audio\",\"rate\":16000}]}", "media 0: audio needs 'data' and 'rate'" },
		{ "{\"media\":[{\"type\":\"audio\",\"data\":\"xx\",\"rate\":1}]}", "media 0: field 'data' is not bin" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc = cost_(m, bad[i].json, &c, &e);
		ok(rc < 0 && strstr(e.msg, bad[i].msg), "%s: %s", bad[i].json, e.msg);
	}
	sw_cost_params p;
	sw_cost_model_params(m, &p);
	p.linear = NAN;
	ok(!sw_cost_model_from(&p, &e) && e.code == SW_EINVAL, "a NaN coefficient is refused");
	sw_cost_model_params(m, &p);
	p.merge = 0;
	ok(!sw_cost_model_from(&p, &e), "a zero merge is refused");
	sw_cost_model_free(m);
}

static void test_config(void)
{
	sw_error e = { 0 };
	char sub[300];
	/* a small Llama; no tokenizer.json: the byte tokenizer */
	snprintf(sub, sizeof sub, "%s/llama", dir_);
	mkdir(sub, 0700);
	const char *llama = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
	                    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
	                    "\"vocab_size\":300,\"head_dim\":16,\"hidden_act\":\"silu\",\"max_position_embeddings\":256,"
	                    "\"rms_norm_eps\":1e-06}";
	write_("llama/config.json", llama, strlen(llama));
	sw_cost_model *m = sw_cost_model_load(sub, &e);
	ok(m != NULL, "loads a Llama config.json (%s)", e.msg);
	if (!m)
		return;
	sw_cost_params p;
	sw_cost_model_params(m, &p);
	/* per layer: q,o 2*64*64, k,v 2*64*32, MLP 3*64*128; head 64*300 */
	double n = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 64 * 300;
	ok(p.linear == 2 * n, "linear = 2N from its sizes (%g vs %g)", p.linear, 2 * n);
	ok(p.attention == 2 * 2 * 4 * 16, "attention = 2 * layers * heads * head_dim");
	sw_cost c;
	ok(cost_(m, "{\"prompt\":\"hello\",\"response\":\"ab\"}", &c, &e) == 0, "text through the tokenizer");
	ok(c.prompt_tokens == 5 && c.response_tokens == 2 && !c.estimated, "the byte tokenizer: a token a byte");
	ok(cost_(m, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &c, &e) == 0 && c.prompt_tokens > 2,
	   "messages rendered with the chat template (%llu tokens)", (unsigned long long)c.prompt_tokens);
	sw_cost_model_free(m);

	/* a Qwen2-VL-style config: decoder sizes at the top level, a vision tower */
	snprintf(sub, sizeof sub, "%s/vl", dir_);
	mkdir(sub, 0700);
	const char *vl = "{\"model_type\":\"qwen2_vl\",\"hidden_size\":64,\"intermediate_size\":128,"
	                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":300,"
	                 "\"vision_config\":{\"depth\":3,\"embed_dim\":32,\"mlp_ratio\":4,\"hidden_size\":64,"
	                 "\"patch_size\":16,\"spatial_merge_size\":2,\"temporal_patch_size\":2}}";
	write_("vl/config.json", vl, strlen(vl));
	m = sw_cost_model_load(sub, &e);
	ok(m != NULL, "loads a qwen2_vl config.json (%s)", m ? "" : e.msg);
	if (m) {
		sw_cost_model_params(m, &p);
		double nv = 2 * (4 * 64 * 64 + 3 * 64 * 128) + 64 * 300;
		ok(p.linear == 2 * nv, "kv heads default to heads, head_dim to hidden / heads");
		ok(p.enc_linear == 2.0 * 3 * (4 * 32 * 32 + 2 * 32 * 128), "the ViT's width is embed_dim, not hidden_size");
		ok(p.enc_attention == 4.0 * 3 * 32 && p.patch_size == 16, "vision attention and patch size");
		cost_(m, "{\"media\":[{\"type\":\"image\",\"w\":64,\"h\":64}]}", &c, &e);
		ok(c.patches == 16 && c.media_tokens == 4, "64 x 64 in 16-pixel patches: 16 patches, 4 tokens");
		sw_cost_model_free(m);
	}

	const char *bad = "{\"model_type\":\"qwen2_vl\",\"intermediate_size\":128}";
	write_("vl/config.json", bad, strlen(bad));
	ok(!sw_cost_model_load(sub, &e) && strstr(e.msg, "no field 'hidden_size'"), "a missing size is named: %s", e.msg);
	/* sizes past the bounds are refused, naming the field (once clamped, or inf coefficients);
	 * a field twice is refused, naming it */
	static const struct {
		const char *text, *want, *what;
	} bads[] = {
		{ "{\"model_type\":\"mistral\",\"hidden_size\":1e300,\"intermediate_size\":128,"
		  "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":300}",
		  "/config.json: field 'hidden_size' is 1e+300, not a size from 1 to 2^32", "a size past 2^32" },
		{ "{\"model_type\":\"qwen2_vl\",\"hidden_size\":64,\"intermediate_size\":128,"
		  "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":300,"
		  "\"vision_config\":{\"patch_size\":2000000}}",
		  "/config.json: vision_config: field 'patch_size' is 2e+06, more than 1048576", "a patch past 2^20" },
		{ "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":128,"
		  "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":300,\"hidden_size\":4096}",
		  "/config.json: the name \"hidden_size\" appears twice in an object", "a field twice" },
	};
	for (size_t b = 0; b < sizeof bads / sizeof *bads; b++) {
		write_("vl/config.json", bads[b].text, strlen(bads[b].text));
		ok(!sw_cost_model_load(sub, &e) && e.code == SW_EFORMAT && strstr(e.msg, bads[b].want), "%s: %s",
		   bads[b].what, e.msg);
	}
	write_("vl/config.json", "{nope", 5);
	ok(!sw_cost_model_load(sub, &e) && e.code == SW_EFORMAT, "bad JSON: %s", e.msg);
	ok(!sw_cost_model_load("/no/such/dir", &e) && e.code == SW_EIO, "no config.json: %s", e.msg);
}

int main(void)
{
	if (!mkdtemp(dir_))
		return 1;
	test_defaults();
	test_media();
	test_bad_fields();
	test_config();
	int rc = tap_done();
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
	if (system(cmd))
		rc = 1;
	return rc;
}
