/*
 * trainer_dist.c - the data-parallel half of sw_trainer's step (rl.h,
 * c.comm): the update from gradients summed across the ranks, ZeRO-1's
 * shards of the moments, the check that every rank holds the same weights,
 * the statistics of an update summed over the ranks.
 *
 * The update must be the same bits on every rank, and the same bits with
 * the moments sharded (zero1) as without.  The sums are the communicator's
 * rank-order sums; the gradient's norm is the rank-order sum of the
 * shards' sums of squares (each shard summed by the backend, as a sharded
 * rank sums its own); and AdamW, element by element, is applied shard by
 * shard in both cases, so no element's arithmetic depends on the sharding.
 * Gradients and weights travel through a host buffer (downloaded,
 * summed, uploaded): the backend's memory need not be the host's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dist/dist_internal.h"
#include "rl/trainer_internal.h"

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* AdamW on the elements [off, off + len) of the model, tensor by tensor;
 * the moments m, v hold element i at (i - moff). */
static void adamw_range_(const sw_trainer *t, const sw_model *g, float gs, float *m, float *v, size_t moff,
                         size_t off, size_t len, float lr, float bc1, float bc2)
{
	const sw_adamw_config *c = &t->c.adam;
	const sw_model *p = t->model;
	for (size_t i = 0; i < p->ntensors; i++) {
		const sw_tensor *tt = &p->tensors[i];
		size_t a = tt->offset > off ? tt->offset : off;
		size_t b = tt->offset + tt->numel < off + len ? tt->offset + tt->numel : off + len;
		if (a >= b)
			continue;
		float wd = tt->ndim == 1 && !c->decay_1d ? 0 : c->weight_decay;
		t->be->adamw(p->arena + a, g->arena + a, gs, m + (a - moff), v + (a - moff), b - a, lr, c->beta1,
		             c->beta2, c->eps, wd, bc1, bc2);
	}
}

int sw_trainer_dist_update(sw_trainer *t, sw_model *grad, float *host, sw_adamw_stats *ast, double *tcomm,
                           sw_error *err)
{
	sw_comm *cm = t->c.comm;
	const sw_backend *o = t->be;
	const sw_adamw_config *c = &t->c.adam;
	size_t n = t->model->nparams, size = (size_t)sw_comm_size(cm), me = (size_t)sw_comm_rank(cm), off, len;
	int zero = t->c.zero1, rc;
	sw_comm_shard(cm, (int)me, n, &off, &len);
	/* the ranks meet first, so that *tcomm is the exchange itself, not the wait for the slowest */
	if ((rc = sw_comm_barrier(cm, err)))
		return rc;
	double t0 = now_();
	/* unsharded: NCCL on a GPU, else the host's rank-order sum (dist/comm.c) */
	if (!zero && (rc = sw_dist_sum_device(cm, o, grad->arena, host, n, err)))
		return rc;
	if (zero && ((rc = o->download(host, grad->arena, n * sizeof *host, err)) ||
	             (rc = sw_comm_reduce_scatter_sum_f32(cm, host, n, err)) ||
	             (rc = o->upload(grad->arena + off, host + off, len * sizeof *host, err))))
		return rc;
	*tcomm += now_() - t0;

	double *part = calloc(size, sizeof *part), ss = 0;
	if (!part)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t r = 0; r < size; r++) {
		size_t ro, rl;
		sw_comm_shard(cm, (int)r, n, &ro, &rl);
		if (!zero || r == me)
			part[r] = o->sumsq(grad->arena + ro, rl);
	}
	/* sharded: each rank has its own shard's; x + 0 is exact, so the sum hands them out unchanged */
	if (zero && (rc = sw_comm_allreduce_sum_f64(cm, part, size, err))) {
		free(part);
		return rc;
	}
	for (size_t r = 0; r < size; r++)
		ss += part[r];
	free(part);
	double norm = sqrt(ss);
	if ((rc = o->sync(err)))
		return rc;
	if (!isfinite(norm))
		return sw_fail(err, SW_ERANGE, "adamw: the gradient is not finite (norm %g)", norm);
	if (!(c->lr >= 0) || !(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) ||
	    !(c->eps > 0) || !(c->weight_decay >= 0))
		return sw_fail(err, SW_EINVAL, "adamw: bad hyper-parameters");
	/* sw_adamw_step's arithmetic (compute/optim.c), from here on shard by shard */
	float gs = 1.0f, lr = sw_lr_at(c, (int64_t)t->updates);
	int clipped = c->max_grad_norm > 0 && norm > c->max_grad_norm;
	if (clipped)
		gs = (float)(c->max_grad_norm / (norm + 1e-6));
	float bc1 = (float)(1.0 - pow(c->beta1, (double)(t->updates + 1)));
	float bc2 = (float)(1.0 - pow(c->beta2, (double)(t->updates + 1)));
	if (zero)
		adamw_range_(t, grad, gs, t->zm, t->zv, off, off, len, lr, bc1, bc2);
	else
		for (size_t r = 0; r < size; r++) {
			size_t ro, rl;
			sw_comm_shard(cm, (int)r, n, &ro, &rl);
			adamw_range_(t, grad, gs, t->m, t->v, 0, ro, rl, lr, bc1, bc2);
		}
	if ((rc = o->sync(err)))
		return rc;
	if (zero) {
		t0 = now_();
		if ((rc = o->download(host + off, t->model->arena + off, len * sizeof *host, err)) ||
		    (rc = sw_comm_allgather_f32(cm, host, n, err)) ||
		    (rc = o->upload(t->model->arena, host, n * sizeof *host, err)))
			return rc;
		*tcomm += now_() - t0;
	}
	ast->grad_norm = norm;
	ast->lr = lr;
	ast->clipped = clipped;
	return SW_OK;
}

int sw_trainer_dist_zero_begin(sw_trainer *t, sw_error *err)
{
	size_t off, len;
	sw_comm_shard(t->c.comm, sw_comm_rank(t->c.comm), t->model->nparams, &off, &len);
	const sw_backend *o = t->be;
	size_t bytes = (len ? len : 1) * sizeof(float);
	if (!t->m || !t->v)
		return sw_fail(err, SW_EINVAL, "--zero1 wants the moments of a model directory");
	if (!(t->zm = o->alloc(bytes, err)) || !(t->zv = o->alloc(bytes, err)))
		return err ? err->code : SW_ENOMEM;
	int rc;
	if ((rc = o->copy(t->zm, t->m + off, len * sizeof(float), err)) ||
	    (rc = o->copy(t->zv, t->v + off, len * sizeof(float), err)))
		return rc;
	/* the point of ZeRO-1: only rank 0, which writes the trainer state, keeps them whole */
	if (sw_comm_rank(t->c.comm) > 0 && t->mm && t->vm) {
		sw_model_free(t->mm);
		sw_model_free(t->vm);
		t->mm = t->vm = NULL;
		t->m = t->v = NULL;
	}
	return SW_OK;
}

int sw_trainer_dist_zero_end(sw_trainer *t, float *host, sw_error *err)
{
	sw_comm *cm = t->c.comm;
	const sw_backend *o = t->be;
	size_t n = t->model->nparams, off, len;
	sw_comm_shard(cm, sw_comm_rank(cm), n, &off, &len);
	float *z[2] = { t->zm, t->zv }, *full[2] = { t->m, t->v };
	int rc = SW_OK;
	for (int i = 0; i < 2 && !rc; i++) {
		if (!(rc = o->download(host + off, z[i], len * sizeof *host, err)) &&
		    !(rc = sw_comm_allgather_f32(cm, host, n, err)) && full[i])
			rc = o->upload(full[i], host, n * sizeof *host, err);
	}
	o->free(t->zm);
	o->free(t->zv);
	t->zm = t->zv = NULL;
	return rc;
}

int sw_trainer_dist_check_weights(sw_trainer *t, float *host, sw_error *err)
{
	size_t n = t->model->nparams;
	int rc = t->be->download(host, t->model->arena, n * sizeof *host, err);
	if (rc)
		return rc;
	/* 64-bit FNV-1a over the words; halves as doubles (exact), max of x and of -x equal on every rank iff
	 * every rank has the same */
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		uint32_t w;
		memcpy(&w, host + i, sizeof w);
		h = (h ^ w) * 0x100000001b3ull;
	}
	double d[4] = { (double)(h >> 32), (double)(h & 0xffffffffu), -(double)(h >> 32), -(double)(h & 0xffffffffu) };
	if ((rc = sw_comm_allreduce_max_f64(t->c.comm, d, 4, err)))
		return rc;
	if (d[0] != -d[2] || d[1] != -d[3])
		return sw_fail(err, SW_EINVAL, "the ranks hold different weights after the step (a bug: please report it)");
	return SW_OK;
}

int sw_trainer_dist_reduce_stats(sw_comm *c, sw_rl_stats *rs, sw_error *err)
{
	double x[14] = { rs->loss, rs->pg_loss, rs->kl_loss, rs->entropy, (double)rs->tokens, (double)rs->clip_low,
		         (double)rs->clip_high, (double)rs->clip_dual, (double)rs->tis_truncated, rs->kl_sum,
		         rs->entropy_sum, rs->ratio_sum, rs->tis_sum, rs->ppo_kl_sum };
	double mx = rs->ratio_max;
	int rc;
	if ((rc = sw_comm_allreduce_sum_f64(c, x, 14, err)) || (rc = sw_comm_allreduce_max_f64(c, &mx, 1, err)))
		return rc;
	rs->loss = x[0], rs->pg_loss = x[1], rs->kl_loss = x[2], rs->entropy = x[3];
	rs->tokens = (uint64_t)x[4], rs->clip_low = (uint64_t)x[5], rs->clip_high = (uint64_t)x[6];
	rs->clip_dual = (uint64_t)x[7], rs->tis_truncated = (uint64_t)x[8];
	rs->kl_sum = x[9], rs->entropy_sum = x[10], rs->ratio_sum = x[11], rs->tis_sum = x[12], rs->ppo_kl_sum = x[13];
	rs->ratio_max = mx;
	return SW_OK;
}
