/*
 * optim.c - AdamW with decoupled weight decay, global-norm gradient
 * clipping, and the learning-rate schedules (constant, cosine, linear, each
 * after a linear warm-up).  The optimiser's state is two arenas of the
 * model's size (m, v) that the caller owns, so a store can keep them with
 * the weights and a resumed run continues exactly.  The update itself is
 * the backend's adamw, tensor by tensor (1-D tensors may skip the decay),
 * on the parameters' backend: the host sees only the gradient's norm.
 */
#include <math.h>
#include <string.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "sw/engine.h"

#define M_PI_ 3.14159265358979323846

sw_adamw_config sw_adamw_defaults(float lr)
{
	sw_adamw_config c = { 0 };
	c.lr = lr;
	c.beta1 = 0.9f;
	c.beta2 = 0.999f;
	c.eps = 1e-8f;
	c.weight_decay = 0.01f;
	c.decay_1d = false;
	c.max_grad_norm = 0;
	c.schedule = SW_LR_CONSTANT;
	c.min_lr_ratio = 0;
	c.train_vision_tower = false;
	return c;
}

float sw_lr_at(const sw_adamw_config *c, int64_t step)
{
	if (step < 0)
		step = 0;
	/* Warm-up reaches lr at its last step, so the first update is not 0. */
	if (c->warmup_steps > 0 && step < c->warmup_steps)
		return c->lr * (float)(step + 1) / (float)c->warmup_steps;
	if (c->schedule == SW_LR_CONSTANT)
		return c->lr;
	int64_t span = c->total_steps - c->warmup_steps;
	double prog = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
	prog = prog < 0 ? 0 : prog > 1 ? 1 : prog;
	double lo = c->min_lr_ratio, f;
	if (c->schedule == SW_LR_COSINE)
		f = lo + (1 - lo) * 0.5 * (1 + cos(M_PI_ * prog));
	else
		f = 1 - (1 - lo) * prog;
	return (float)(c->lr * f);
}

int sw_adamw_step(const sw_adamw_config *c, sw_model *p, sw_model *g, float *m, float *v,
                  int64_t step, sw_adamw_stats *stats, sw_error *err)
{
	if (!c || !p || !g || !m || !v || step < 0)
		return sw_fail(err, SW_EINVAL, "adamw: missing argument");
	if (g->nparams != p->nparams || g->ntensors != p->ntensors)
		return sw_fail(err, SW_EINVAL, "adamw: the gradient does not match the model");
	if (!(c->lr >= 0) || !(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) ||
	    !(c->eps > 0) || !(c->weight_decay >= 0))
		return sw_fail(err, SW_EINVAL, "adamw: bad hyper-parameters");
	if (g->backend != p->backend)
		return sw_fail(err, SW_EINVAL, "adamw: the gradient is on %s, the model on %s",
		               g->backend->name, p->backend->name);
	const sw_backend *o = p->backend;
	double norm = sqrt(o->sumsq(g->arena, g->nparams));
	int rc = o->sync(err);
	if (rc)
		return rc;
	if (!isfinite(norm))
		return sw_fail(err, SW_ERANGE, "adamw: the gradient is not finite (norm %g)", norm);
	bool clipped = false;
	float gs = 1.0f;
	if (c->max_grad_norm > 0 && norm > c->max_grad_norm) {
		/* torch.nn.utils.clip_grad_norm_'s coefficient, applied inside the update. */
		gs = (float)(c->max_grad_norm / (norm + 1e-6));
		clipped = true;
	}
	float lr = sw_lr_at(c, step);
	/* In double, as torch computes them from a Python float step. */
	float bc1 = (float)(1.0 - pow(c->beta1, (double)(step + 1)));
	float bc2 = (float)(1.0 - pow(c->beta2, (double)(step + 1)));
	for (size_t i = 0; i < p->ntensors; i++) {
		const sw_tensor *t = &p->tensors[i];
		if (!c->train_vision_tower && !strncmp(t->name, "vision_tower.", 13))
			continue;
		float wd = t->ndim == 1 && !c->decay_1d ? 0 : c->weight_decay;
		o->adamw(p->arena + t->offset, g->arena + t->offset, gs, m + t->offset, v + t->offset,
		         t->numel, lr, c->beta1, c->beta2, c->eps, wd, bc1, bc2);
	}
	if ((rc = o->sync(err)))
		return rc;
	if (stats) {
		stats->grad_norm = norm;
		stats->lr = lr;
		stats->clipped = clipped;
	}
	return SW_OK;
}
