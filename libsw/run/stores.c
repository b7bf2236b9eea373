/*
 * stores.c - the shared-memory stores of a run and their lifetime: the
 * weights (loaded from the model or a checkpoint), the optimiser state
 * (made by the trainer at its first step, opened here when it exists) and
 * the frozen reference.  Named first and loaded after, so that a caller
 * can tell its signal handler what to remove before anything exists.
 *
 * A run with ranks has one more: the directory in which Open MPI's ranks
 * map their shared-memory transport's segments (btl vader, sm in Open MPI
 * 5) and its launcher keeps its session directory (orte_tmpdir_base;
 * prte_top_session_dir in Open MPI 5: the job's topology and PMIx's segments,
 * 4 to 8 MB).  By default those are in /dev/shm and /tmp, and Open MPI
 * removes them when its job ends; a launcher killed with the run (the guard
 * ends a killed run's stages with SIGKILL) removes nothing, and they stayed
 * until the machine restarted.  In the run's own directory, NAME.mpi beside
 * its stores, they go with the run however it ends, and sw_store_sweep
 * removes the directory of a run whose stores are gone.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "run/run_internal.h"

int sw_run_stores_name(sw_run_stores *s, const char *prefix, int on_gpu, sw_error *err)
{
	memset(s, 0, sizeof *s);
	sw_error e = { 0 };
	char shm[SW_STORE_NAME_MAX + 8];
	if (sw_store_name_random(prefix, shm, sizeof shm, &e))
		return sw_fail(err, e.code, "cannot name a store: %s", e.msg);
	const char *name = shm + 4; /* after "shm:" */
	snprintf(s->spec, sizeof s->spec, "%s:%.*s", on_gpu ? "cuda" : "shm", SW_STORE_NAME_MAX, name);
	snprintf(s->opt_spec, sizeof s->opt_spec, "shm:%s.opt", name);
	snprintf(s->ref_spec, sizeof s->ref_spec, "%s.ref", s->spec);
	return 0;
}

int sw_run_stores_load(sw_run_stores *s, const char *weights_from, uint64_t version, const char *ref_model,
                       sw_error *err)
{
	sw_error e = { 0 };
	if (!(s->w = sw_store_create_from_model(s->spec, weights_from, version, &e)))
		return sw_fail(err, e.code, "cannot load '%s' into a weight store: %s", weights_from, e.msg);
	if (ref_model && !(s->ref = sw_store_create_from_model(s->ref_spec, ref_model, 0, &e)))
		return sw_fail(err, e.code, "cannot load '%s' into the reference store: %s", ref_model, e.msg);
	return 0;
}

/*
 * Room in /dev/shm for every store the run will have, the optimiser state's
 * (the largest: two floats a parameter, made at the first train stage)
 * included: a /dev/shm too small (a container's is 64 MB) is said before the
 * run starts, not after its first rollout.  On a GPU the weights and the
 * reference are device memory, their shared objects a header each.
 */
static int room_(const char *weights_from, int ref, int on_gpu, sw_error *err)
{
	char path[SW_RUN_PATH_MAX];
	sw_model_config cfg;
	int rc = sw_run_path(path, sizeof path, err, "%s/config.json", weights_from);
	if (rc || (rc = sw_model_config_load(path, &cfg, err)))
		return rc;
	size_t np = sw_model_config_nparams(&cfg);
	/* the optimiser store: the moments and a header of 16 floats (trainer_state.c) */
	size_t need = sw_store_shm_bytes(on_gpu ? 0 : np) * (ref ? 2 : 1) + sw_store_shm_bytes(2 * np + 16);
	return sw_store_shm_room(need, ref ? "the run's stores (the weights, the reference and the optimiser state) need"
	                                   : "the run's stores (the weights and the optimiser state) need", err);
}

int sw_run_stores_make(sw_run_stores *s, sw_run_guard *g, const sw_experiment *x, const char *weights_from,
                       uint64_t version, sw_error *err)
{
	int keep = x->keep, on_gpu = x->device && !strncmp(x->device, "cuda", 4);
	int rc = sw_run_stores_name(s, "sw-run", on_gpu, err);
	const char *ref_model = x->ref ? x->model : NULL;
	if (rc || (rc = room_(weights_from, ref_model != NULL, on_gpu, err)))
		return rc;
	/* the guard knows them before they exist, so that it removes what loading them made */
	const char *specs[] = { s->spec, s->opt_spec, s->ref_spec };
	for (int i = 0; i < 3; i++)
		sw_run_guard_store(g, specs[i]);
	if (keep)
		sw_run_guard_keep(g);
	if ((rc = sw_run_stores_load(s, weights_from, version, ref_model, err)) || x->ranks <= 1)
		return rc;
	/* after the stores: a sweep keeps NAME.mpi while NAME's creator runs */
	snprintf(s->mpi_dir, sizeof s->mpi_dir, "/dev/shm/%s.mpi", strchr(s->spec, ':') + 1);
	sw_run_guard_dir(g, s->mpi_dir);
	if (mkdir(s->mpi_dir, 0700)) {
		int e = errno;
		rc = sw_fail(err, SW_EIO, "cannot create '%s' for the ranks' shared memory: %s", s->mpi_dir, strerror(e));
		s->mpi_dir[0] = 0;
	}
	return rc;
}

sw_store *sw_run_stores_opt(sw_run_stores *s)
{
	if (!s->opt)
		s->opt = sw_store_open(s->opt_spec, true, NULL);
	return s->opt;
}

void sw_run_stores_release(sw_run_stores *s, int keep)
{
	sw_store_close(s->w);
	sw_store_close(s->opt);
	sw_store_close(s->ref);
	s->w = s->opt = s->ref = NULL;
	if (!keep && s->spec[0]) {
		sw_store_unlink(s->spec, NULL);
		sw_store_unlink(s->opt_spec, NULL);
		sw_store_unlink(s->ref_spec, NULL);
	}
	if (s->mpi_dir[0])
		sw_run_rmtree(s->mpi_dir);
	s->mpi_dir[0] = 0;
}
