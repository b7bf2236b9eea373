/*
 * vision_bench.c - libsw's side of bench/bench_vision.sh: a LLaVA's vision
 * tower and projector (libsw/compute/vision.c, on the backend $SW_DEVICE
 * names, "cpu" when unset) timed on the model and the pixels
 * bench/vision_torch.py wrote, one line of KEY=VALUE pairs:
 *
 *   vision_bench DIR STEPS   forward (no activations kept), and forward
 *                            keeping them + backward of sum(features *
 *                            dfeat) into the tower's and the projector's
 *                            gradients; medians of STEPS after one warm-up;
 *                            check= is that sum, to put beside transformers'
 *
 * Threads from $SW_THREADS, else every core.  Links libsw.a: the vision run
 * is internal (compute/vision.h).
 */
#define _DEFAULT_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compute/backend.h"
#include "compute/vision.h"
#include "sw/backend.h"
#include "sw/model.h"
#include "bench_stats.h"

static double now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die_(const char *what, const sw_error *e)
{
	fprintf(stderr, "vision_bench: %s: %s\n", what, e ? e->msg : "");
	exit(1);
}

/* DIR/name, exactly n floats. */
static float *floats_(const char *dir, const char *name, size_t n)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	float *p = malloc(n * sizeof *p);
	if (!f || !p || fread(p, sizeof *p, n, f) != n || fgetc(f) != EOF) {
		fprintf(stderr, "vision_bench: %s: not %zu floats\n", path, n);
		exit(1);
	}
	fclose(f);
	return p;
}

static size_t file_floats_(const char *dir, const char *name)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END)) {
		fprintf(stderr, "vision_bench: %s: cannot read\n", path);
		exit(1);
	}
	long n = ftell(f);
	fclose(f);
	return (size_t)n / sizeof(float);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: vision_bench DIR STEPS\n");
		return 2;
	}
	const char *dir = argv[1];
	int steps = atoi(argv[2]);
	if (steps < 1)
		steps = 1;
	const char *th = getenv("SW_THREADS");
	if (th && atoi(th) > 0)
		omp_set_num_threads(atoi(th));
	sw_error e = { 0 };
	const sw_backend *be = sw_backend_get(getenv("SW_DEVICE") ? getenv("SW_DEVICE") : "cpu", &e);
	if (!be)
		die_("backend", &e);
	char mdir[4200];
	snprintf(mdir, sizeof mdir, "%s/model", dir);
	sw_model *m = sw_model_load_on(be, mdir, &e);
	if (!m)
		die_(mdir, &e);
	const sw_model_config *c = &m->cfg;
	const int S = c->vision.image_size, N = sw_model_image_tokens(c), H = c->hidden_size;
	const size_t per = (size_t)3 * S * S;
	const int nimg = (int)(file_floats_(dir, "pixels.f32") / per);
	float *px = floats_(dir, "pixels.f32", per * (size_t)nimg);
	const size_t nf = (size_t)nimg * N * H;
	float *dfh = floats_(dir, "dfeat.f32", nf), *fh = malloc(nf * sizeof *fh);
	float *df = be->alloc(nf * sizeof *df, &e);
	sw_model *g = sw_model_new_on(be, c, &e);
	sw_vision_run *v = sw_vision_run_new(m, &e);
	if (!fh || !df || !g || !v || be->upload(df, dfh, nf * sizeof *df, &e))
		die_("setup", &e);
	double *fwd = calloc((size_t)steps, sizeof *fwd), *both = calloc((size_t)steps, sizeof *both), check = 0;
	for (int i = 0; i <= steps; i++) {
		const float *f;
		double t0 = now_();
		if (sw_vision_run_forward(v, px, nimg, false, &f, &e) || be->sync(&e))
			die_("forward", &e);
		double t1 = now_();
		if (be->download(fh, f, nf * sizeof *fh, &e) || sw_model_zero(g, &e))
			die_("download", &e);
		double t2 = now_();
		if (sw_vision_run_forward(v, px, nimg, true, &f, &e) || sw_vision_run_backward(v, df, g, true, &e) ||
		    be->sync(&e))
			die_("forward + backward", &e);
		double t3 = now_();
		check = 0;
		for (size_t k = 0; k < nf; k++)
			check += (double)fh[k] * dfh[k];
		if (i)
			fwd[i - 1] = t1 - t0, both[i - 1] = t3 - t2;
	}
	printf("fwd_s=%.5f fwdbwd_s=%.5f images=%d check=%.6e threads=%d backend=%s\n", bench_median(fwd, steps),
	       bench_median(both, steps), nimg, check, omp_get_max_threads(), be->name);
	sw_vision_run_free(v);
	be->free(df);
	sw_model_free(g);
	sw_model_free(m);
	free(px), free(dfh), free(fh), free(fwd), free(both);
	return 0;
}
