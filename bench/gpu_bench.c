/*
 * gpu_bench.c - the timings of tests/gpu/device-check.sh on a GPU backend
 * ($SW_DEVICE, default "cuda"): one measurement per run, printed as one
 * line of KEY=VALUE pairs.
 *
 *   gpu_bench train STEPS NSEQ LEN   fwd + bwd + AdamW of a Qwen2.5-0.5B-shaped model
 *   gpu_bench decode NSEQ NEW        greedy decoding of NSEQ sequences, NEW tokens each
 *
 * The model: Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads over 2
 * key/value heads of 64, intermediate 4864, vocab 151936, tied embeddings,
 * q/k/v biases; 494M parameters), random normal(0, 0.02) weights, f32;
 * SW_MATMUL=bf16 takes the training products' operands to bf16
 * (sw_backend_matmul; f32 sums).  Training reports the model FLOPs per
 * second against the GPU's datasheet rates, f32 and dense bf16; decoding
 * reports the weight bytes read per second (every step reads every weight
 * once) against its HBM bandwidth.  The rates: $SW_GPU_F32_TFLOPS,
 * $SW_GPU_BF16_TFLOPS and $SW_GPU_HBM_TBS, all three or none
 * (tests/gpu/device-check.sh sets them from the GPU's name), else the
 * H200's, 67, 990 and 4.8; the line says which (rates=env or rates=h200).
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "bench_stats.h"

/* The datasheet rates the fractions are against (see the top). */
typedef struct {
	double f32, bf16, hbm; /* FLOP/s, FLOP/s, bytes/s */
	const char *from;
} rates_;

static rates_ rates_get_(void)
{
	rates_ r = { 67e12, 990e12, 4.8e12, "h200" };
	const char *names[3] = { "SW_GPU_F32_TFLOPS", "SW_GPU_BF16_TFLOPS", "SW_GPU_HBM_TBS" };
	double *dst[3] = { &r.f32, &r.bf16, &r.hbm };
	int set = 0;
	for (int i = 0; i < 3; i++) {
		const char *v = getenv(names[i]);
		if (!v || !*v)
			continue;
		char *end;
		double x = strtod(v, &end);
		if (*end || !(x > 0) || x > 1e6) {
			fprintf(stderr, "gpu_bench: %s='%s': a positive number (TFLOP/s or TB/s)\n", names[i], v);
			exit(2);
		}
		*dst[i] = x * 1e12;
		set++;
	}
	if (set && set < 3) {
		fprintf(stderr, "gpu_bench: SW_GPU_F32_TFLOPS, SW_GPU_BF16_TFLOPS and SW_GPU_HBM_TBS: all three or none\n");
		exit(2);
	}
	if (set)
		r.from = "env";
	return r;
}

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static sw_model_config cfg_(void)
{
	sw_model_config c;
	memset(&c, 0, sizeof c);
	strcpy(c.model_type, "qwen2");
	c.vocab_size = 151936;
	c.hidden_size = 896;
	c.intermediate_size = 4864;
	c.num_hidden_layers = 24;
	c.num_attention_heads = 14;
	c.num_key_value_heads = 2;
	c.head_dim = 64;
	c.max_position_embeddings = 32768;
	c.rms_norm_eps = 1e-6f;
	c.rope_theta = 1000000;
	c.tie_word_embeddings = true;
	c.attention_bias = true;
	c.bos_token_id = -1;
	return c;
}

static void die_(const char *what, const sw_error *e)
{
	fprintf(stderr, "gpu_bench: %s: %s\n", what, e->msg);
	exit(1);
}

static uint64_t rng_ = 12345;
static int32_t tok_(int V)
{
	rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
	return (int32_t)((rng_ >> 33) % (uint64_t)V);
}

static sw_model *model_(const sw_backend *be, sw_error *err)
{
	sw_model_config c = cfg_();
	sw_model *m = sw_model_new_on(be, &c, err);
	if (m && sw_model_init_random(m, 1, 0.02f)) {
		sw_model_free(m);
		return NULL;
	}
	return m;
}

static int train_(const sw_backend *be, int steps, int nseq, int len, const rates_ *r)
{
	sw_error err = { 0 };
	double t_init = now_();
	sw_model *m = model_(be, &err);
	sw_model_config c = cfg_();
	sw_model *g = m ? sw_model_new_on(be, &c, &err) : NULL;
	sw_model *mo = g ? sw_model_new_on(be, &c, &err) : NULL, *vo = mo ? sw_model_new_on(be, &c, &err) : NULL;
	if (!vo || sw_model_zero(mo, &err) || sw_model_zero(vo, &err))
		die_("model", &err);
	t_init = now_() - t_init;
	int T = nseq * len;
	int32_t *tok = malloc(sizeof(int32_t) * T), *cu = malloc(sizeof(int32_t) * (nseq + 1));
	for (int i = 0; i < T; i++)
		tok[i] = tok_(c.vocab_size);
	for (int s = 0; s <= nseq; s++)
		cu[s] = s * len;
	sw_batch b = { nseq, tok, cu, NULL, NULL };
	sw_engine *e = sw_engine_new(m, &err);
	if (!e)
		die_("engine", &err);
	const char *prec = getenv("SW_MATMUL") && *getenv("SW_MATMUL") ? getenv("SW_MATMUL") : "f32";
	if (sw_backend_matmul(be, prec, &err))
		die_("matmul", &err);
	sw_adamw_config oc = sw_adamw_defaults(1e-4f);
	oc.max_grad_norm = 1.0f;
	double *t = malloc(sizeof(double) * (size_t)(steps + 1)), loss = 0;
	sw_adamw_stats st;
	for (int i = 0; i <= steps; i++) { /* step 0 warms up */
		double t0 = now_();
		if (sw_model_zero(g, &err) || sw_engine_cross_entropy(e, &b, NULL, 0, g, &loss, NULL, &err) ||
		    sw_adamw_step(&oc, m, g, mo->arena, vo->arena, i, &st, &err))
			die_("train step", &err);
		t[i] = now_() - t0;
		fprintf(stderr, "gpu_bench: step %d: %.3f s, loss %.4f\n", i, t[i], loss);
	}
	/* Model FLOPs: 6 per weight and token for the linear layers (2 forward,
	 * 4 backward), and causal attention's two products over L(L+1)/2 pairs. */
	double D = c.hidden_size, In = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
	double QD = (double)c.num_attention_heads * c.head_dim, KD = (double)c.num_key_value_heads * c.head_dim;
	double lin = L * (2 * D * QD + 2 * D * KD + 3 * D * In) + V * D;
	double att = L * nseq * (len * (len + 1) / 2.0) * QD * 2;
	double flops = 6 * lin * T + 6 * att;
	double med = bench_median(t + 1, steps);
	printf("device=%s matmul=%s params=%zu tokens=%d steps=%d step_s=%.4f tokens_per_s=%.1f tflops=%.2f "
	       "mfu_f32=%.4f mfu_bf16=%.4f loss=%.4f init_s=%.1f rates=%s f32_tflops=%.0f bf16_tflops=%.0f\n",
	       sw_backend_name(be), prec, m->nparams, T, steps, med, T / med, flops / med / 1e12,
	       flops / med / r->f32, flops / med / r->bf16, loss, t_init, r->from, r->f32 / 1e12, r->bf16 / 1e12);
	sw_engine_free(e);
	sw_model_free(m), sw_model_free(g), sw_model_free(mo), sw_model_free(vo);
	free(tok), free(cu), free(t);
	return 0;
}

static int decode_(const sw_backend *be, int nseq, int new_tokens, const rates_ *r)
{
	sw_error err = { 0 };
	sw_model *m = model_(be, &err);
	if (!m)
		die_("model", &err);
	int V = m->cfg.vocab_size, plen = 16;
	sw_decoder *d = sw_decoder_new(m, nseq, (int64_t)nseq * (plen + new_tokens + 1), &err);
	if (!d)
		die_("decoder", &err);
	int32_t prompt[16];
	for (int s = 0; s < nseq; s++) {
		for (int i = 0; i < plen; i++)
			prompt[i] = tok_(V);
		if (sw_decoder_add(d, prompt, plen, &err) < 0)
			die_("add", &err);
	}
	double *t = malloc(sizeof(double) * (size_t)new_tokens * 2), *ts = t + new_tokens;
	for (int step = 0; step < new_tokens; step++) {
		int n;
		const int *ids;
		const float *z;
		double t0 = now_();
		if (sw_decoder_step(d, &n, &ids, &z, &err))
			die_("step", &err);
		ts[step] = now_() - t0;
		for (int j = 0; j < n; j++) {
			const float *row = z + (size_t)j * V;
			int32_t best = 0;
			for (int v = 1; v < V; v++)
				best = row[v] > row[best] ? v : best;
			if (sw_decoder_append(d, ids[j], &best, 1, &err))
				die_("append", &err);
		}
		t[step] = now_() - t0;
	}
	/* Step 0 is the prefill: the median of the others is decoding. */
	double med = bench_median(t + 1, new_tokens - 1), wbytes = 4.0 * m->nparams;
	/* sw_decoder_step alone (the layers, the logits and their copy to the
	 * host), without the bench's own greedy pick over the vocabulary. */
	double meds = bench_median(ts + 1, new_tokens - 1);
	printf("device=%s params=%zu nseq=%d new=%d step_s=%.5f decoder_step_s=%.5f tokens_per_s=%.1f "
	       "weight_gb_per_s=%.1f hbm_frac=%.4f prefill_s=%.4f rates=%s hbm_tbs=%.2f\n",
	       sw_backend_name(be), m->nparams, nseq, new_tokens, med, meds, nseq / med, wbytes / med / 1e9,
	       wbytes / med / r->hbm, t[0], r->from, r->hbm / 1e12);
	sw_decoder_free(d);
	sw_model_free(m);
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	sw_error err = { 0 };
	const char *dev = getenv("SW_DEVICE") ? getenv("SW_DEVICE") : "cuda";
	rates_ r = rates_get_(); /* a bad rate is said before minutes of work */
	const sw_backend *be = sw_backend_get(dev, &err);
	if (!be)
		die_("device", &err);
	if (argc == 5 && !strcmp(argv[1], "train"))
		return train_(be, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), &r);
	if (argc == 4 && !strcmp(argv[1], "decode"))
		return decode_(be, atoi(argv[2]), atoi(argv[3]), &r);
	fprintf(stderr, "usage: gpu_bench train STEPS NSEQ LEN | decode NSEQ NEW\n");
	return 2;
}
