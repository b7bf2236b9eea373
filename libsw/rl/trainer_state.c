/*
 * trainer_state.c - where a trainer's weights and optimiser state live, and
 * how a step is made durable.
 *
 * A model directory carries trainer_state.json (one JSON record: the step
 * count, the update count, the shuffle's random state, the optimiser file's
 * BLAKE2b-256) and optimizer.bin (a 32-byte header, then AdamW's first and
 * second moments as little-endian float32), so a state from another model or
 * a damaged file is refused rather than trained on.  A step is committed by
 * writing the new model, its state and the files beside it into OUT.tmp-PID,
 * then putting that directory in OUT's place in one rename: OUT is always
 * the old model or the new one, whole.
 *
 * A store pair is trained in place (rl.h says what that leaves when a step
 * dies).  STORE.opt holds 16 floats of header (the bytes of "SWADAMW1", the
 * parameter count, the updates made, the weights' version it belongs to, the
 * random generator's 4 words), then the first and second moments; sw-run
 * checkpoints it as raw floats and restores it on resume.
 *
 * The moments are the backend's memory.  The files reach them through it:
 * in place where device memory is host memory (the CPU: no copy), else a
 * bounded piece at a time through a host buffer.
 */
#define _GNU_SOURCE /* renameat2(RENAME_EXCHANGE): swap two directories atomically */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rl/trainer_internal.h"

#define OPT_MAGIC "SWADAMW1"
#define OPT_HEADER 32
#define OPT_STORE_HEADER 16

static char *path_(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int oom_(sw_error *err)
{
	return sw_fail(err, SW_ENOMEM, "out of memory");
}

static int sys_(sw_error *err, const char *fmt, const char *a, const char *b)
{
	int e = errno;
	char m[sizeof err->msg];
	snprintf(m, sizeof m, fmt, a, b);
	sw_fail(err, SW_EIO, "%s: %s", m, strerror(e));
	if (err)
		err->sys_errno = e;
	return SW_EIO;
}

/* ---- the moments through the backend ---------------------------------------------------- */

#define PIECE_ ((size_t)1 << 20) /* floats a bounce buffer holds: 4 MiB */

typedef int (*piece_fn_)(void *ctx, const void *p, size_t bytes, sw_error *err);

/* n floats of device memory to fn, in order: in place if the host can read them, else in pieces. */
static int dev_read_(const sw_backend *be, const float *dev, size_t n, piece_fn_ fn, void *ctx, sw_error *err)
{
	const void *hv = be->host_view(dev);
	if (hv)
		return fn(ctx, hv, n * sizeof(float), err);
	float *buf = malloc((n < PIECE_ ? n : PIECE_) * sizeof(float) + 1);
	int rc = buf ? 0 : oom_(err);
	for (size_t i = 0; !rc && i < n; i += PIECE_) {
		size_t k = n - i < PIECE_ ? n - i : PIECE_;
		if (!(rc = be->download(buf, dev + i, k * sizeof(float), err)))
			rc = fn(ctx, buf, k * sizeof(float), err);
	}
	free(buf);
	return rc;
}

/* n floats from f into device memory: 1 if f is short, else 0 or an SW_E* code. */
static int dev_fread_(const sw_backend *be, float *dev, size_t n, FILE *f, sw_error *err)
{
	float *hv = (float *)be->host_view(dev);
	if (hv)
		return fread(hv, sizeof(float), n, f) != n;
	float *buf = malloc((n < PIECE_ ? n : PIECE_) * sizeof(float) + 1);
	int rc = buf ? 0 : oom_(err);
	for (size_t i = 0; !rc && i < n; i += PIECE_) {
		size_t k = n - i < PIECE_ ? n - i : PIECE_;
		rc = fread(buf, sizeof(float), k, f) != k ? 1 : be->upload(dev + i, buf, k * sizeof(float), err);
	}
	free(buf);
	return rc;
}

static int hash_piece_(void *hs, const void *p, size_t bytes, sw_error *err)
{
	(void)err;
	crypto_generichash_update(hs, p, bytes);
	return 0;
}

static void hex32_(const unsigned char h[32], char hx[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(hx + 2 * i, 3, "%02x", h[i]);
}

static int opt_hash_(const sw_trainer *t, const unsigned char *hdr, char *hx, sw_error *err)
{
	unsigned char h[32];
	crypto_generichash_state hs;
	size_t n = t->model->nparams;
	int rc;
	crypto_generichash_init(&hs, NULL, 0, sizeof h);
	crypto_generichash_update(&hs, hdr, OPT_HEADER);
	if ((rc = dev_read_(t->be, t->m, n, hash_piece_, &hs, err)) || (rc = dev_read_(t->be, t->v, n, hash_piece_, &hs, err)))
		return rc;
	crypto_generichash_final(&hs, h, sizeof h);
	hex32_(h, hx);
	return 0;
}

/* The BLAKE2b of header and moments (m, v: np floats each): optimizer.bin's, in h and as hex. */
static void dir_hash_(const unsigned char hdr[OPT_HEADER], uint64_t np, const float *m, const float *v,
                      unsigned char h[32], char hx[65])
{
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, 32);
	crypto_generichash_update(&hs, hdr, OPT_HEADER);
	crypto_generichash_update(&hs, (const unsigned char *)m, np * sizeof(float));
	crypto_generichash_update(&hs, (const unsigned char *)v, np * sizeof(float));
	crypto_generichash_final(&hs, h, 32);
	hex32_(h, hx);
}

/* optimizer.bin hashed on a thread of its own while it is written: the two take about as long */
typedef struct hash_job_ {
	const unsigned char *hdr;
	uint64_t np;
	const float *m, *v;
	unsigned char h[32];
	char hx[65];
} hash_job_;

static void *hash_job_run_(void *p)
{
	hash_job_ *j = p;
	dir_hash_(j->hdr, j->np, j->m, j->v, j->h, j->hx);
	return NULL;
}

/* ---- a model directory ------------------------------------------------------------------ */

/* What trainer_state.json says. */
typedef struct jstate_ {
	uint64_t version, updates, nparams;
	uint64_t rng[4];
	char hash[64];                  /* optimizer.bin's BLAKE2b-256, hex */
} jstate_;

/* Field key of trainer_state.json: there, and an unsigned integer. */
static int u64_field_(sw_rec *rec, const char *js, const char *key, uint64_t *out, sw_error *err)
{
	sw_val v;
	if (sw_rec_get(rec, key, &v))
		return sw_fail(err, SW_EFORMAT, "%s: field '%s' is missing", js, key);
	if (v.type != SW_T_UINT)
		return sw_fail(err, SW_EFORMAT, "%s: field '%s' is of type %s, not an unsigned integer", js, key,
		               sw_type_name(v.type));
	*out = v.v.u;
	return 0;
}

/* trainer_state.json: one JSON object (a second record, or anything after it, is not a state we wrote). */
static int read_json_state_(const char *js, jstate_ *j, sw_error *err)
{
	sw_error e2 = { 0 };
	sw_reader *r = sw_reader_open(js, &e2);
	sw_rec *rec = sw_rec_new();
	int rc = SW_EFORMAT, got;
	const char *fmt, *h;
	size_t fl, hl, n;
	sw_val rv, e;
	sw_iter it;
	if (!r || !rec) {
		rc = r ? oom_(err) : sw_fail(err, SW_EIO, "cannot open '%s': %s", js, strerror(e2.sys_errno));
		goto out;
	}
	if ((got = sw_reader_next(r, rec)) != 1) {
		char where[200];
		rc = got ? sw_fail(err, SW_EFORMAT, "%s: %s", js, sw_error_str(sw_reader_error(r), where, sizeof where))
		         : sw_fail(err, SW_EFORMAT, "%s: empty: no trainer state in it", js);
		goto out;
	}
	if (sw_rec_get_str(rec, "format", &fmt, &fl)) {
		sw_fail(err, rc, "%s: field 'format' is missing or not a string: not a trainer state of sw-train", js);
		goto out;
	}
	if (fl != 10 || memcmp(fmt, "sw-train 1", 10)) {
		sw_fail(err, rc, "%s: format '%.*s', not 'sw-train 1': a trainer state of another version of sw-train",
		        js, fl > 40 ? 40 : (int)fl, fmt);
		goto out;
	}
	if ((rc = u64_field_(rec, js, "version", &j->version, err)) ||
	    (rc = u64_field_(rec, js, "updates", &j->updates, err)) ||
	    (rc = u64_field_(rec, js, "nparams", &j->nparams, err)))
		goto out;
	rc = SW_EFORMAT;
	if (sw_rec_get_str(rec, "optimizer_blake2b", &h, &hl) || hl != 64 || strspn(h, "0123456789abcdef") < 64) {
		sw_fail(err, rc, "%s: field 'optimizer_blake2b' is not 64 hex digits", js);
		goto out;
	}
	memcpy(j->hash, h, 64);
	n = 0;
	if (!sw_rec_get(rec, "rng", &rv) && rv.type == SW_T_ARRAY && rv.v.count == 4) {
		sw_iter_init(&it, &rv);
		for (; n < 4 && sw_iter_next(&it, &e) == 1 && e.type == SW_T_UINT; n++)
			j->rng[n] = e.v.u;
	}
	if (n != 4) {
		sw_fail(err, rc, "%s: field 'rng' is not 4 numbers", js);
		goto out;
	}
	if ((got = sw_reader_next(r, rec)) != 0) {
		char where[200];
		sw_fail(err, rc, "%s: %s", js, got > 0 ? "a second record after the state: a trainer state is one JSON object"
		                                       : sw_error_str(sw_reader_error(r), where, sizeof where));
		goto out;
	}
	rc = 0;
out:
	sw_rec_free(rec);
	sw_reader_free(r);
	return rc;
}

int sw_trainer_state_load(sw_trainer *t, const char *dir, sw_error *err)
{
	size_t nparams = t->model->nparams;
	char *js = path_(dir, "trainer_state.json"), *ob = path_(dir, "optimizer.bin");
	struct stat sb;
	int rc = 0;
	FILE *f = NULL;
	sw_error e2 = { 0 };
	if (!js || !ob) {
		rc = oom_(err);
		goto out;
	}
	if (!(t->mm = sw_model_new_on(t->be, &t->model->cfg, &e2)) ||
	    !(t->vm = sw_model_new_on(t->be, &t->model->cfg, &e2))) {
		rc = sw_fail(err, e2.code, "cannot allocate the optimiser state: %s", e2.msg);
		goto out;
	}
	t->m = t->mm->arena;
	t->v = t->vm->arena;
	if (stat(js, &sb)) {
		if (errno != ENOENT)
			rc = sys_(err, "cannot read '%s'%s", js, "");
		else if (!stat(ob, &sb))
			rc = sw_fail(err, SW_EFORMAT, "'%s' is there but '%s' is not: a damaged trainer state", ob, js);
		else
			sw_rng_seed(&t->rng, t->c.seed);
		goto out;
	}
	jstate_ j;
	if ((rc = read_json_state_(js, &j, err)))
		goto out;
	t->version = j.version;
	t->updates = j.updates;
	memcpy(t->rng.s, j.rng, sizeof j.rng);
	rc = SW_EFORMAT;
	if (j.nparams != nparams) {
		sw_fail(err, rc, "%s: the optimiser state is for %llu parameters, the model has %zu", js,
		        (unsigned long long)j.nparams, nparams);
		goto out;
	}
	if (!(f = fopen(ob, "rb"))) {
		rc = sys_(err, "cannot open '%s'%s", ob, "");
		goto out;
	}
	unsigned char hdr[OPT_HEADER];
	char hx[65];
	int r = 1;
	if (fread(hdr, 1, sizeof hdr, f) == sizeof hdr && !memcmp(hdr, OPT_MAGIC, 8) &&
	    !(r = dev_fread_(t->be, t->m, nparams, f, err)) && !(r = dev_fread_(t->be, t->v, nparams, f, err)))
		r = fgetc(f) != EOF;
	if (r) {
		rc = r == 1 ? sw_fail(err, SW_EFORMAT, "%s: not an optimiser state of %zu parameters", ob, nparams) : r;
		goto out;
	}
	if ((rc = opt_hash_(t, hdr, hx, err)))
		goto out;
	rc = SW_EFORMAT;
	if (memcmp(hx, j.hash, 64)) {
		sw_fail(err, rc, "%s: its BLAKE2b does not match '%s': the trainer state is damaged", ob, js);
		goto out;
	}
	rc = 0;
out:
	if (f)
		fclose(f);
	free(js);
	free(ob);
	return rc;
}

static int write_piece_(void *f, const void *p, size_t bytes, sw_error *err)
{
	return sw_afile_write(f, p, bytes, err);
}

/* path := a (na bytes of host memory), then, where t is given, its moments. */
static int afile_put_(const char *path, const void *a, size_t na, const sw_trainer *t, sw_error *err)
{
	sw_afile f;
	int rc;
	if ((rc = sw_afile_open(&f, path, err)))
		return rc;
	if ((rc = sw_afile_write(&f, a, na, err)) ||
	    (t && ((rc = dev_read_(t->be, t->m, t->model->nparams, write_piece_, &f, err)) ||
	           (rc = dev_read_(t->be, t->v, t->model->nparams, write_piece_, &f, err)))) ||
	    (rc = sw_afile_commit(&f, err))) {
		sw_afile_abort(&f);
		return rc;
	}
	return 0;
}

/* trainer_state.json, through the JSON library; algo NULL: a state exported from a store, which knows neither. */
static int state_json_(const jstate_ *j, const char *algo, float lr, sw_buf *out, sw_error *err)
{
	sw_rec *r = sw_rec_new();
	sw_buf rng = { 0 };
	const uint8_t *p;
	size_t n;
	int rc = SW_ENOMEM;
	if (!r || sw_mp_put_array(&rng, 4))
		goto out;
	for (int i = 0; i < 4; i++)
		if (sw_mp_put_u64(&rng, j->rng[i]))
			goto out;
	if (sw_rec_set_str(r, "format", "sw-train 1", 10) || sw_rec_set_u64(r, "version", j->version) ||
	    sw_rec_set_u64(r, "updates", j->updates) || sw_rec_set_u64(r, "nparams", j->nparams) ||
	    sw_rec_set_raw(r, "rng", rng.p, rng.len) || sw_rec_set_str(r, "optimizer", "optimizer.bin", 13) ||
	    sw_rec_set_str(r, "optimizer_blake2b", j->hash, 64) ||
	    (algo && (sw_rec_set_str(r, "algo", algo, strlen(algo)) || sw_rec_set_f32(r, "lr", lr))) ||
	    sw_rec_bytes(r, &p, &n))
		goto out;
	rc = sw_mp_to_json(p, n, out, err);
out:
	if (rc == SW_ENOMEM)
		oom_(err);
	sw_buf_release(&rng);
	sw_rec_free(r);
	return rc;
}

static int state_save_(const sw_trainer *t, const char *dir, sw_error *err)
{
	size_t nparams = t->model->nparams;
	unsigned char hdr[OPT_HEADER] = { 0 };
	char hx[65], *ob = path_(dir, "optimizer.bin"), *js = path_(dir, "trainer_state.json");
	uint64_t np = nparams;
	sw_buf j = { 0 };
	int rc;
	if (!ob || !js) {
		rc = oom_(err);
		goto out;
	}
	memcpy(hdr, OPT_MAGIC, 8);
	memcpy(hdr + 8, &np, 8);
	memcpy(hdr + 16, &t->updates, 8);
	/* hashed on a thread beside the write where the moments are host memory (the CPU's), else before it;
	 * written through the page cache (not around it as a checkpoint is: the directory is the model the
	 * next step reads, and reading it back from the disk cost more than writing around the cache saved) */
	hash_job_ hj = { hdr, np, t->be->host_view(t->m), t->be->host_view(t->v), { 0 }, "" };
	pthread_t th;
	int threaded = hj.m && hj.v && !pthread_create(&th, NULL, hash_job_run_, &hj);
	if (!threaded && (rc = opt_hash_(t, hdr, hx, err)))
		goto out;
	rc = afile_put_(ob, hdr, sizeof hdr, t, err);
	if (threaded) {
		pthread_join(th, NULL);
		memcpy(hx, hj.hx, sizeof hx);
	}
	if (rc)
		goto out;
	jstate_ js_ = { t->version, t->updates, nparams, { 0 }, { 0 } };
	memcpy(js_.rng, t->rng.s, sizeof js_.rng);
	memcpy(js_.hash, hx, 64);
	if ((rc = state_json_(&js_, sw_rl_algo_name(t->c.algo), t->c.adam.lr, &j, err)))
		goto out;
	rc = afile_put_(js, j.p, j.len, NULL, err);
out:
	sw_buf_release(&j);
	free(ob);
	free(js);
	return rc;
}

static int skip_copy_(const char *name)
{
	size_t n = strlen(name);
	return name[0] == '.' || !strcmp(name, "config.json") || !strcmp(name, "optimizer.bin") ||
	       !strcmp(name, "trainer_state.json") || !strcmp(name, "model.safetensors.index.json") ||
	       (n > 12 && !strcmp(name + n - 12, ".safetensors"));
}

/* The files of the model directory the trainer does not write itself
 * (tokenizer, generation config, ...) go along into the new one. */
static int copy_extras_(const char *src, const char *dst, sw_error *err)
{
	DIR *d = opendir(src);
	struct dirent *de;
	int rc = 0;
	if (!d)
		return sys_(err, "cannot read the directory '%s'%s", src, "");
	while (!rc && (de = readdir(d))) {
		if (skip_copy_(de->d_name))
			continue;
		char *from = path_(src, de->d_name), *to = path_(dst, de->d_name);
		struct stat sb;
		if (!from || !to)
			rc = oom_(err);
		else if (stat(from, &sb))
			rc = sys_(err, "cannot read '%s'%s", from, "");
		else if (S_ISREG(sb.st_mode)) {
			int in = open(from, O_RDONLY | O_CLOEXEC);
			sw_afile f;
			char buf[65536];
			ssize_t k = 0;
			if (in < 0)
				rc = sys_(err, "cannot copy '%s' to '%s'", from, to);
			else if (!(rc = sw_afile_open(&f, to, err))) {
				while (!rc && (k = read(in, buf, sizeof buf)) > 0)
					rc = sw_afile_write(&f, buf, (size_t)k, err);
				if (!rc && k < 0)
					rc = sys_(err, "cannot copy '%s' to '%s'", from, to);
				if (rc || (rc = sw_afile_commit(&f, err)))
					sw_afile_abort(&f);
			}
			if (in >= 0)
				close(in);
		}
		free(from);
		free(to);
	}
	closedir(d);
	return rc;
}

/* Remove a directory of plain files (ours: a model directory we replaced). */
static int remove_flat_dir_(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *p = path_(dir, de->d_name);
		if (!p || unlink(p))
			rc = -1;
		free(p);
	}
	closedir(d);
	return rmdir(dir) || rc ? -1 : 0;
}

static int fsync_dir_(const char *dir, sw_error *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd)) {
		sys_(err, "cannot sync the directory '%s'%s", dir, "");
		if (fd >= 0)
			close(fd);
		return SW_EIO;
	}
	close(fd);
	return 0;
}

static char *parent_(const char *path)
{
	char *p = strdup(path), *s;
	if (!p)
		return NULL;
	while ((s = strrchr(p, '/')) && s[1] == 0 && s != p)
		*s = 0; /* trailing slashes */
	s = strrchr(p, '/');
	if (!s) {
		free(p);
		p = strdup(".");
	} else if (s == p) {
		s[1] = 0;
	} else {
		*s = 0;
	}
	return p;
}

/*
 * --out may name a model directory that exists (it is replaced, whole, at
 * the end) or nothing yet.  Check now, before any work, that replacing it
 * loses nothing: it holds plain files only and is a model (config.json) or
 * empty.  Also clear the temporary directories of earlier runs that died.
 */
int sw_trainer_check_out(const char *out, sw_error *err)
{
	struct stat sb;
	if (stat(out, &sb)) {
		if (errno != ENOENT)
			return sys_(err, "cannot use '%s'%s", out, "");
	} else {
		if (!S_ISDIR(sb.st_mode))
			return sw_fail(err, SW_EINVAL, "cannot write the model to '%s': it is not a directory", out);
		DIR *d = opendir(out);
		struct dirent *de;
		int files = 0, config = 0, rc = 0;
		if (!d)
			return sys_(err, "cannot read the directory '%s'%s", out, "");
		while (!rc && (de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char *p = path_(out, de->d_name);
			if (!p)
				rc = oom_(err);
			else if (lstat(p, &sb) || !S_ISREG(sb.st_mode))
				rc = sw_fail(err, SW_EINVAL, "refusing to replace '%s': '%s' is not a plain file", out,
				             de->d_name);
			free(p);
			files++;
			config |= !strcmp(de->d_name, "config.json");
		}
		closedir(d);
		if (rc)
			return rc;
		if (files && !config)
			return sw_fail(err, SW_EINVAL, "refusing to replace '%s': it is not a model directory (no config.json)",
			               out);
	}
	/* OUT.tmp-PID of a process that is gone */
	char *par = parent_(out);
	if (!par)
		return oom_(err);
	const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
	size_t bl = strlen(base);
	DIR *d = opendir(par);
	struct dirent *de;
	while (d && bl && (de = readdir(d))) {
		char *end;
		if (strncmp(de->d_name, base, bl) || strncmp(de->d_name + bl, ".tmp-", 5))
			continue;
		long pid = strtol(de->d_name + bl + 5, &end, 10);
		if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* not ours, or its writer is still at work */
		char *p = path_(par, de->d_name);
		if (p)
			remove_flat_dir_(p);
		free(p);
	}
	if (d)
		closedir(d);
	free(par);
	return 0;
}

int sw_trainer_commit_dir(sw_trainer *t, sw_error *err)
{
	char tmp[4096], old[4096];
	char *out = strdup(t->out), *par = NULL;
	int rc = 0;
	if (!out)
		return oom_(err);
	size_t ol = strlen(out);
	while (ol > 1 && out[ol - 1] == '/')
		out[--ol] = 0;
	if (ol + 32 > sizeof tmp) {
		rc = sw_fail(err, SW_EINVAL, "the path '%s' is too long", out);
		goto out;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
	snprintf(old, sizeof old, "%s.old-%ld", out, (long)getpid());
	remove_flat_dir_(tmp);
	if (mkdir(tmp, 0755)) {
		rc = sys_(err, "cannot create '%s'%s", tmp, "");
		goto out;
	}
	sw_error e2 = { 0 };
	if (sw_model_save(t->model, tmp, SW_DT_F32, &e2)) {
		rc = sw_fail(err, e2.code, "cannot save the model: %s", e2.msg);
		goto out;
	}
	if ((rc = copy_extras_(t->model_dir, tmp, err)) || (rc = state_save_(t, tmp, err)) ||
	    (rc = fsync_dir_(tmp, err)))
		goto out;
	struct stat sb;
	if (!stat(out, &sb)) {
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
			remove_flat_dir_(tmp); /* the old model, now under the temporary name */
		} else if (errno == EINVAL || errno == ENOSYS) {
			/* a file system that cannot swap: two renames, the old kept until the new is in */
			if (rename(out, old) || rename(tmp, out)) {
				rc = sys_(err, "cannot replace '%s'%s", out, "");
				goto out;
			}
			remove_flat_dir_(old);
		} else {
			rc = sys_(err, "cannot replace '%s'%s", out, "");
			goto out;
		}
	} else if (rename(tmp, out)) {
		rc = sys_(err, "cannot rename '%s' to '%s'", tmp, out);
		goto out;
	}
	if (!(par = parent_(out)))
		rc = oom_(err);
	else
		rc = fsync_dir_(par, err);
out:
	free(par);
	free(out);
	return rc;
}

/* ---- a pair of stores, in place -------------------------------------------------------------- */

/* The optimiser store's arena as the backend's memory (read before, written after through it). */
static int opt_borrow_(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	if (!(t->o_dev = t->be->borrow(sw_store_arena(t->o), sw_store_nfloats(t->o) * sizeof(float), &e2)))
		return sw_fail(err, e2.code ? e2.code : SW_EINVAL, "store '%s': %s", t->o_spec,
		               e2.code ? e2.msg : "the device cannot compute on it in place");
	t->m = t->o_dev + OPT_STORE_HEADER;
	t->v = t->m + t->model->nparams;
	return 0;
}

/*
 * The optimiser store's moments, viewed in place: its header is checked
 * against the weights, under its seqlock.  A missing store is the first
 * step: it is made (zeroed) at the first update.
 */
static int opt_open_(sw_trainer *t, sw_error *err)
{
	size_t nparams = t->model->nparams;
	sw_error e2 = { 0 };
	uint64_t seq;
	if (!(t->o = sw_store_open(t->o_spec, true, &e2))) {
		if (e2.code == SW_EIO && e2.sys_errno == ENOENT) {
			sw_rng_seed(&t->rng, t->c.seed);
			return 0;
		}
		return sw_fail(err, e2.code, "the optimiser state: %s", e2.msg);
	}
	size_t n = sw_store_nfloats(t->o);
	if (n != OPT_STORE_HEADER + 2 * nparams)
		return sw_fail(err, SW_EFORMAT, "store '%s' holds %zu floats, not the optimiser state of %zu parameters",
		               t->o_spec, n, nparams);
	if (sw_store_read_begin(t->o, &seq, &e2))
		return sw_fail(err, e2.code, "store '%s': %s", t->o_spec, e2.msg);
	float *a = sw_store_arena(t->o);
	unsigned char hdr[OPT_STORE_HEADER * sizeof(float)];
	uint64_t np, ver;
	memcpy(hdr, a, sizeof hdr);
	if (sw_store_read_retry(t->o, seq))
		return sw_fail(err, SW_EIO, "store '%s': it keeps changing while it is read (another writer?)", t->o_spec);
	memcpy(&np, hdr + 8, 8);
	memcpy(&t->updates, hdr + 16, 8);
	memcpy(&ver, hdr + 24, 8);
	memcpy(t->rng.s, hdr + 32, 32);
	if (memcmp(hdr, OPT_MAGIC, 8) || np != nparams)
		return sw_fail(err, SW_EFORMAT, "store '%s' does not hold an optimiser state of sw-train for %zu parameters",
		               t->o_spec, nparams);
	if (ver != t->version)
		return sw_fail(err, SW_EFORMAT,
		               "store '%s' holds the optimiser state of version %llu, the weights are at version %llu",
		               t->o_spec, (unsigned long long)ver, (unsigned long long)t->version);
	return opt_borrow_(t, err);
}

/*
 * Data parallel over a store (rl.h): rank 0 alone trains it in place; a rank
 * above 0 copies the weights and the moments (zeros before the first step)
 * into memory of its own and lets the stores go, so that only one writer
 * changes them and no rank reads a weight another is updating.
 */
static int private_copy_(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	const sw_backend *be = t->be;
	size_t bytes = t->model->nparams * sizeof(float);
	sw_model *w = sw_model_new_on(be, &t->model->cfg, &e2);
	int rc = 0;
	if (!w || !(t->mm = sw_model_new_on(be, &t->model->cfg, &e2)) || !(t->vm = sw_model_new_on(be, &t->model->cfg, &e2))) {
		sw_model_free(w);
		return sw_fail(err, e2.code, "cannot copy the store's weights: %s", e2.msg);
	}
	if ((rc = be->copy(w->arena, t->model->arena, bytes, err)) ||
	    (rc = t->m ? be->copy(t->mm->arena, t->m, bytes, err) : be->memset(t->mm->arena, 0, bytes, err)) ||
	    (rc = t->v ? be->copy(t->vm->arena, t->v, bytes, err) : be->memset(t->vm->arena, 0, bytes, err)) ||
	    (rc = be->sync(err))) {
		sw_model_free(w);
		return rc;
	}
	sw_model_free(t->model); /* the view: gives the store's arena back */
	t->model = w;
	t->m = t->mm->arena;
	t->v = t->vm->arena;
	if (t->o_dev)
		be->unborrow(t->o_dev);
	t->o_dev = NULL;
	sw_store_close(t->o);
	sw_store_close(t->w);
	t->o = t->w = NULL;
	return 0;
}

int sw_trainer_open_store(sw_trainer *t, const char *weights, const char *opt, sw_error *err)
{
	sw_error e2 = { 0 };
	uint64_t seq;
	if (t->model)
		return sw_fail(err, SW_EINVAL, "the trainer has its weights already");
	if (!(t->w_spec = strdup(weights)) || !(t->o_spec = strdup(opt)))
		return oom_(err);
	if (!(t->w = sw_store_open(weights, true, &e2)))
		return sw_fail(err, e2.code, "%s", e2.msg); /* it names the store */
	const sw_model_config *sc = sw_store_config(t->w);
	if (!sc || sw_store_nfloats(t->w) < sw_model_config_nparams(sc))
		return sw_fail(err, SW_EFORMAT, "store '%s' holds no model", weights);
	/* a published version: not one a writer that died left half-written */
	if (sw_store_read_begin(t->w, &seq, &e2))
		return sw_fail(err, e2.code, "store '%s': %s", weights, e2.msg);
	if (sw_store_usable_on(t->w, t->be, &e2) || !(t->model = sw_model_view_on(t->be, sc, sw_store_arena(t->w), &e2)))
		return sw_fail(err, e2.code, "store '%s': %s", weights, e2.msg);
	t->own_model = 1; /* the view, not the arena */
	t->start_version = t->version = sw_store_version(t->w);
	int rc = opt_open_(t, err);
	if (rc || t->rank == 0)
		return rc;
	return private_copy_(t, err);
}

/*
 * Both stores enter an update before the first weight changes: a second
 * writer is refused before anything changes, and readers wait from here to
 * the publish.  A version that moved since the step began means another
 * writer trained these weights meanwhile: nothing is written.
 */
int sw_trainer_store_begin(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	size_t n = t->model->nparams;
	if (t->updating)
		return 0;
	if (sw_store_version(t->w) != t->start_version)
		return sw_fail(err, SW_EIO,
		               "store '%s' went from version %llu to %llu during the step (another trainer?); nothing written",
		               t->w_spec, (unsigned long long)t->start_version,
		               (unsigned long long)sw_store_version(t->w));
	if (!t->o) {
		int rc;
		if (!(t->o = sw_store_create(t->o_spec, NULL, OPT_STORE_HEADER + 2 * n, &e2)))
			return sw_fail(err, e2.code, "cannot create the optimiser store: %s", e2.msg) /* e2 names it */;
		if ((rc = opt_borrow_(t, err)))
			return rc;
	} else if (sw_store_write_begin(t->o, &e2)) {
		return sw_fail(err, e2.code, "store '%s': %s", t->o_spec, e2.msg);
	}
	if (sw_store_write_begin(t->w, &e2))
		return sw_fail(err, e2.code, "store '%s': %s", t->w_spec, e2.msg);
	t->updating = 1;
	return 0;
}

int sw_trainer_commit_store(sw_trainer *t, sw_error *err)
{
	sw_error e2 = { 0 };
	int rc;
	if ((rc = sw_trainer_store_begin(t, err))) /* a step of no update still moves the version */
		return rc;
	unsigned char hdr[OPT_STORE_HEADER * sizeof(float)] = { 0 };
	uint64_t np = t->model->nparams;
	memcpy(hdr, OPT_MAGIC, 8);
	memcpy(hdr + 8, &np, 8);
	memcpy(hdr + 16, &t->updates, 8);
	memcpy(hdr + 24, &t->version, 8);
	memcpy(hdr + 32, t->rng.s, 32);
	if ((rc = t->be->upload(t->o_dev, hdr, sizeof hdr, err)))
		return rc;
	if (sw_store_publish(t->w, t->version, &e2))
		return sw_fail(err, e2.code, "store '%s': %s", t->w_spec, e2.msg);
	if (sw_store_publish(t->o, t->version, &e2))
		return sw_fail(err, e2.code, "store '%s': %s", t->o_spec, e2.msg);
	t->updating = 0;
	return 0;
}

/* ---- a store's state as a directory's, and back (sw-run's checkpoints) --------------------------- */

/* The directory format's 32-byte header. */
static void dir_header_bytes_(unsigned char hdr[OPT_HEADER], uint64_t np, uint64_t updates)
{
	memset(hdr, 0, OPT_HEADER);
	memcpy(hdr, OPT_MAGIC, 8);
	memcpy(hdr + 8, &np, 8);
	memcpy(hdr + 16, &updates, 8);
}

static void dir_header_(unsigned char hdr[OPT_HEADER], uint64_t np, uint64_t updates, const float *mv,
                        unsigned char h[32], char hx[65])
{
	dir_header_bytes_(hdr, np, updates);
	dir_hash_(hdr, np, mv, mv + np, h, hx);
}

int sw_trainer_state_export(sw_store *opt, const char *dir, sw_error *err)
{
	return sw_trainer_state_export_with(opt, dir, NULL, err);
}

int sw_trainer_state_export_with(sw_store *opt, const char *dir, const sw_save_opts *o, sw_error *err)
{
	size_t n = sw_store_nfloats(opt);
	const float *a = sw_store_arena(opt);
	unsigned char sh[OPT_STORE_HEADER * sizeof(float)], hdr[OPT_HEADER];
	uint64_t np, seq;
	jstate_ j;
	sw_error e2 = { 0 };
	char *ob = path_(dir, "optimizer.bin"), *js = path_(dir, "trainer_state.json");
	sw_buf jb = { 0 };
	int rc = 0;
	if (!ob || !js) {
		rc = oom_(err);
		goto out;
	}
	if (sw_store_read_begin(opt, &seq, &e2)) {
		rc = sw_fail(err, e2.code, "the optimiser store: %s", e2.msg);
		goto out;
	}
	memcpy(sh, a, sizeof sh);
	memcpy(&np, sh + 8, 8);
	if (n < OPT_STORE_HEADER || memcmp(sh, OPT_MAGIC, 8) || n != OPT_STORE_HEADER + 2 * np) {
		rc = sw_fail(err, SW_EFORMAT, "the optimiser store holds no optimiser state of sw-train");
		goto out;
	}
	memcpy(&j.updates, sh + 16, 8);
	memcpy(&j.version, sh + 24, 8);
	memcpy(j.rng, sh + 32, 32);
	j.nparams = np;
	dir_header_bytes_(hdr, np, j.updates);
	hash_job_ hj = { hdr, np, a + OPT_STORE_HEADER, a + OPT_STORE_HEADER + np, { 0 }, "" };
	pthread_t th;
	int threaded = !pthread_create(&th, NULL, hash_job_run_, &hj);
	sw_afile f;
	/* the file's digest is the one the job takes: noted below, not taken again */
	if (!(rc = sw_afile_open(&f, ob, err)) &&
	    ((rc = sw_afile_set(&f, o, 0, err)) || (rc = sw_afile_write(&f, hdr, sizeof hdr, err)) ||
	     (rc = sw_afile_write(&f, a + OPT_STORE_HEADER, 2 * np * sizeof(float), err))))
		sw_afile_abort(&f);
	if (threaded)
		pthread_join(th, NULL);
	else if (!rc)
		hash_job_run_(&hj);
	if (rc)
		goto out;
	memcpy(j.hash, hj.hx, 64);
	/* a trainer that published meanwhile: what was hashed and written is not one state */
	if (sw_store_read_retry(opt, seq)) {
		sw_afile_abort(&f);
		rc = sw_fail(err, SW_EIO, "the optimiser store changed while it was saved (a trainer still running?)");
		goto out;
	}
	if ((rc = sw_afile_commit(&f, err)) ||
	    (o && o->digests && (rc = sw_digests_note(o->digests, ob, OPT_HEADER + 2 * np * sizeof(float), hj.h, err))) ||
	    (rc = state_json_(&j, NULL, 0, &jb, err)))
		goto out;
	rc = afile_put_(js, jb.p, jb.len, NULL, err);
out:
	sw_buf_release(&jb);
	free(ob);
	free(js);
	return rc;
}

int sw_trainer_state_import(const char *dir, const char *spec, sw_store **optp, sw_error *err)
{
	char *ob = path_(dir, "optimizer.bin"), *js = path_(dir, "trainer_state.json");
	sw_error e2 = { 0 };
	FILE *f = NULL;
	jstate_ j;
	int rc = 0;
	if (!ob || !js) {
		rc = oom_(err);
		goto out;
	}
	if ((rc = read_json_state_(js, &j, err)))
		goto out;
	size_t n = OPT_STORE_HEADER + 2 * (size_t)j.nparams;
	if (!*optp && !(*optp = sw_store_create(spec, NULL, n, &e2))) {
		rc = sw_fail(err, e2.code, "cannot create the optimiser store: %s", e2.msg) /* e2 names it */;
		goto out;
	}
	sw_store *opt = *optp;
	if (sw_store_nfloats(opt) != n) {
		rc = sw_fail(err, SW_EFORMAT, "%s: a state of %llu parameters, the optimiser store holds %zu floats", js,
		             (unsigned long long)j.nparams, sw_store_nfloats(opt));
		goto out;
	}
	if (!(f = fopen(ob, "rb"))) {
		rc = sys_(err, "cannot open '%s'%s", ob, "");
		goto out;
	}
	/* whole and no more, known before the store is touched: a file cut or padded is not the state saved */
	struct stat sb;
	if (fstat(fileno(f), &sb) || (uint64_t)sb.st_size != OPT_HEADER + 2 * j.nparams * sizeof(float)) {
		rc = sw_fail(err, SW_EFORMAT, "%s: not an optimiser state of %llu parameters", ob, (unsigned long long)j.nparams);
		goto out;
	}
	if (sw_store_write_begin(opt, &e2)) {
		rc = sw_fail(err, e2.code, "store '%s': %s", spec, e2.msg);
		goto out;
	}
	float *a = sw_store_arena(opt);
	unsigned char hdr[OPT_HEADER], want[OPT_HEADER];
	char hx[65];
	/* whole and no more: a file cut or padded is not the state that was saved */
	if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || fread(a + OPT_STORE_HEADER, sizeof(float), n - OPT_STORE_HEADER, f) !=
	    n - OPT_STORE_HEADER || fgetc(f) != EOF) {
		rc = sw_fail(err, SW_EFORMAT, "%s: not an optimiser state of %llu parameters", ob, (unsigned long long)j.nparams);
		goto out;
	}
	unsigned char h[32];
	dir_header_(want, j.nparams, j.updates, a + OPT_STORE_HEADER, h, hx);
	if (memcmp(hdr, want, sizeof hdr) || memcmp(hx, j.hash, 64)) {
		rc = sw_fail(err, SW_EFORMAT, "%s: its BLAKE2b does not match '%s': the trainer state is damaged", ob, js);
		goto out;
	}
	unsigned char sh[OPT_STORE_HEADER * sizeof(float)] = { 0 };
	memcpy(sh, OPT_MAGIC, 8);
	memcpy(sh + 8, &j.nparams, 8);
	memcpy(sh + 16, &j.updates, 8);
	memcpy(sh + 24, &j.version, 8);
	memcpy(sh + 32, j.rng, 32);
	memcpy(a, sh, sizeof sh);
	if (sw_store_publish(opt, j.version, &e2))
		rc = sw_fail(err, e2.code, "store '%s': %s", spec, e2.msg);
out:
	if (f)
		fclose(f);
	free(ob);
	free(js);
	return rc;
}
