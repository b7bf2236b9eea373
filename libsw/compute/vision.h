/*
 * vision.h - what engine.c and decoder.c share of vision.c: a LLaVA
 * model's vision tower and projector run over a batch of images, forward
 * and backward, on the model's backend.  Not exported.
 */
#ifndef SW_COMPUTE_VISION_H
#define SW_COMPUTE_VISION_H

#include <stdbool.h>
#include "compute/backend.h"
#include "sw/model.h"

typedef struct sw_vision_run sw_vision_run;

/* A run for model m (cfg.vision set), or NULL with err filled. */
sw_vision_run *sw_vision_run_new(const sw_model *m, sw_error *err);
void sw_vision_run_free(sw_vision_run *v);

/*
 * nimg images (host pixels [nimg][channels][size][size], as the image
 * processor gives them) through the tower and the projector: *features
 * points to [nimg * N, hidden] rows of the backend's memory (N =
 * sw_vision_tokens), the run's until its next call.  keep: the activations
 * stay for sw_vision_run_backward.  A pixel that is not finite is
 * SW_EINVAL naming the image.
 */
int sw_vision_run_forward(sw_vision_run *v, const float *pixels, int nimg, bool keep,
                          const float **features, sw_error *err);

/*
 * Given d(loss)/d(features) (dfeat, backend memory, [nimg * N, hidden]),
 * ADD the projector's gradients to g (a model of the same configuration),
 * and the tower's too when tower is true.
 */
int sw_vision_run_backward(sw_vision_run *v, const float *dfeat, sw_model *g, bool tower,
                           sw_error *err);

/*
 * The runs of image tokens in tokens[0..T) as (start, length) pairs in
 * *runs (grown as needed, *cap its size), checked against nimages images
 * of sw_model_image_tokens() tokens each: SW_EINVAL naming the counts
 * otherwise.  In engine.c.
 */
int sw_image_runs(const sw_model_config *c, const int32_t *tokens, int T, int nimages,
                  int32_t **runs, size_t *cap, int *nruns, sw_error *err);

#endif
