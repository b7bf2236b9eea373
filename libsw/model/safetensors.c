/*
 * safetensors.c - model weights in Hugging Face's safetensors format, in and
 * out: a single model.safetensors or shards named by
 * model.safetensors.index.json; F32, F16 and BF16 read (converted to the
 * arena's float32), F32 and BF16 written.
 *
 * The format: 8 bytes little-endian N, N bytes of JSON header
 * {"__metadata__": {...}, "NAME": {"dtype", "shape", "data_offsets": [b, e]}},
 * then the data, offsets counting from its start.  Files are read through
 * mmap and every header is checked before a byte of data is touched, so a
 * damaged file is an error naming the file and the tensor, never a crash.
 * Files are written as the safetensors library writes them (tensors sorted
 * by name, compact header padded with spaces to 8 bytes), so an f32 model
 * loaded and saved again is the same file byte for byte.
 */
#define _DEFAULT_SOURCE /* madvise */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "model/model_io.h"

static int fail_t_(sw_error *err, int code, const sw_st_file *f, const char *tensor, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* "PATH: tensor 'NAME': MSG", or "PATH: MSG" without a tensor. */
static int fail_t_(sw_error *err, int code, const sw_st_file *f, const char *tensor, const char *fmt, ...)
{
	char m[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (tensor)
		return sw_fail(err, code, "%s: tensor '%.80s': %s", f->path, tensor, m);
	return sw_fail(err, code, "%s: %s", f->path, m);
}

static size_t dtype_size_(sw_dtype d)
{
	return d == SW_DT_F32 ? 4 : 2;
}

static const char *dtype_name_(sw_dtype d)
{
	return d == SW_DT_F32 ? "F32" : d == SW_DT_F16 ? "F16" : "BF16";
}

static int cmp_begin_(const void *a, const void *b)
{
	const sw_st_tensor *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Check one header entry and fill t. */
static int entry_(sw_st_file *f, const char *name, yyjson_val *v, sw_st_tensor *t, sw_error *err)
{
	if (!yyjson_is_obj(v))
		return fail_t_(err, SW_EFORMAT, f, name, "its entry is %s, not an object",
		               yyjson_get_type_desc(v));
	yyjson_val *dt = yyjson_obj_get(v, "dtype"), *sh = yyjson_obj_get(v, "shape"),
	           *off = yyjson_obj_get(v, "data_offsets");
	if (!dt || !yyjson_is_str(dt))
		return fail_t_(err, SW_EFORMAT, f, name, "'dtype' is %s", dt ? "not a string" : "missing");
	const char *d = yyjson_get_str(dt);
	if (!strcmp(d, "F32"))
		t->dtype = SW_DT_F32;
	else if (!strcmp(d, "F16"))
		t->dtype = SW_DT_F16;
	else if (!strcmp(d, "BF16"))
		t->dtype = SW_DT_BF16;
	else
		return fail_t_(err, SW_EFORMAT, f, name, "dtype '%.40s' is not supported (F32, F16 or BF16)", d);
	if (!sh || !yyjson_is_arr(sh))
		return fail_t_(err, SW_EFORMAT, f, name, "'shape' is %s", sh ? "not an array" : "missing");
	if (yyjson_arr_size(sh) > 8)
		return fail_t_(err, SW_EFORMAT, f, name, "'shape' has %zu dimensions, more than 8",
		               yyjson_arr_size(sh));
	size_t i, n;
	yyjson_val *e;
	t->ndim = 0;
	t->numel = 1;
	yyjson_arr_foreach(sh, i, n, e) {
		if (!yyjson_is_uint(e) && !(yyjson_is_sint(e) && yyjson_get_sint(e) >= 0))
			return fail_t_(err, SW_EFORMAT, f, name, "'shape' has an element that is not a size");
		uint64_t x = yyjson_get_uint(e);
		if (x > ((uint64_t)1 << 40) || (x && t->numel > ((uint64_t)1 << 60) / x))
			return fail_t_(err, SW_EFORMAT, f, name, "'shape' is too large");
		t->shape[t->ndim++] = (int64_t)x;
		t->numel *= x;
	}
	if (!off || !yyjson_is_arr(off) || yyjson_arr_size(off) != 2 || !yyjson_is_uint(yyjson_arr_get(off, 0)) ||
	    !yyjson_is_uint(yyjson_arr_get(off, 1)))
		return fail_t_(err, SW_EFORMAT, f, name, "'data_offsets' is %s",
		               off ? "not two byte offsets" : "missing");
	t->begin = yyjson_get_uint(yyjson_arr_get(off, 0));
	t->end = yyjson_get_uint(yyjson_arr_get(off, 1));
	if (t->begin > t->end)
		return fail_t_(err, SW_EFORMAT, f, name, "data_offsets [%llu, %llu] end before they begin",
		               (unsigned long long)t->begin, (unsigned long long)t->end);
	if (t->end > f->data_size)
		return fail_t_(err, SW_ETRUNC, f, name,
		               "data_offsets end at byte %llu, past the %zu bytes of data in the file (truncated?)",
		               (unsigned long long)t->end, f->data_size);
	uint64_t want = t->numel * dtype_size_(t->dtype);
	if (t->end - t->begin != want)
		return fail_t_(err, SW_EFORMAT, f, name, "%s of %llu elements is %llu bytes, data_offsets give %llu",
		               d, (unsigned long long)t->numel, (unsigned long long)want,
		               (unsigned long long)(t->end - t->begin));
	return 0;
}

static int parse_(sw_st_file *f, sw_error *err)
{
	if (f->size < 8)
		return fail_t_(err, SW_ETRUNC, f, NULL, "%zu bytes, too short for a safetensors header", f->size);
	uint64_t hn = 0;
	for (int i = 7; i >= 0; i--)
		hn = hn << 8 | f->map[i];
	if (hn > f->size - 8)
		return fail_t_(err, SW_ETRUNC, f, NULL, "header length %llu runs past the end of the file (%zu bytes)",
		               (unsigned long long)hn, f->size);
	if (hn > SW_ST_MAX_HEADER)
		return fail_t_(err, SW_EFORMAT, f, NULL, "header length %llu is over the limit of %u bytes",
		               (unsigned long long)hn, SW_ST_MAX_HEADER);
	if (hn < 2 || f->map[8] != '{')
		return fail_t_(err, SW_EFORMAT, f, NULL, "the header does not start with '{'; not a safetensors file");
	f->data = f->map + 8 + hn;
	f->data_size = f->size - 8 - (size_t)hn;
	yyjson_read_err je;
	yyjson_doc *doc = yyjson_read_opts((char *)(f->map + 8), (size_t)hn, YYJSON_READ_NOFLAG, NULL, &je);
	if (!doc)
		return fail_t_(err, SW_EFORMAT, f, NULL, "bad header JSON at byte %zu: %s", 8 + je.pos, je.msg);
	int rc = 0;
	yyjson_val *root = yyjson_doc_get_root(doc);
	if (!yyjson_is_obj(root)) {
		rc = fail_t_(err, SW_EFORMAT, f, NULL, "the header is %s, not an object", yyjson_get_type_desc(root));
		goto out;
	}
	/* a tensor named twice: safetensors (Rust's serde) keeps the last, yyjson_obj_get the first */
	if ((rc = sw_json_refuse_twins(root, f->path, err)))
		goto out;
	f->t = calloc(yyjson_obj_size(root) + 1, sizeof *f->t);
	if (!f->t) {
		rc = fail_t_(err, SW_ENOMEM, f, NULL, "out of memory");
		goto out;
	}
	size_t i, n;
	yyjson_val *k, *v;
	yyjson_obj_foreach(root, i, n, k, v) {
		const char *name = yyjson_get_str(k);
		size_t len = yyjson_get_len(k);
		if (memchr(name, 0, len)) {
			rc = fail_t_(err, SW_EFORMAT, f, NULL, "a tensor name holds a NUL byte");
			goto out;
		}
		if (!strcmp(name, "__metadata__")) {
			/* the spec: a map of strings to strings */
			size_t j, m;
			yyjson_val *mk, *mv;
			if (!yyjson_is_obj(v)) {
				rc = fail_t_(err, SW_EFORMAT, f, NULL, "'__metadata__' is %s, not an object",
				             yyjson_get_type_desc(v));
				goto out;
			}
			yyjson_obj_foreach(v, j, m, mk, mv) {
				if (!yyjson_is_str(mv)) {
					rc = fail_t_(err, SW_EFORMAT, f, NULL, "'__metadata__' value of '%.60s' is %s, not a string",
					             yyjson_get_str(mk), yyjson_get_type_desc(mv));
					goto out;
				}
			}
			continue;
		}
		sw_st_tensor *t = &f->t[f->n];
		if (!(t->name = strdup(name))) {
			rc = fail_t_(err, SW_ENOMEM, f, NULL, "out of memory");
			goto out;
		}
		f->n++;
		if ((rc = entry_(f, name, v, t, err)))
			goto out;
	}
	/* overlapping data is refused (an entry of one name twice was, with the header's text) */
	if (f->n > 1) {
		sw_st_tensor *sorted = malloc(f->n * sizeof *sorted);
		if (!sorted) {
			rc = fail_t_(err, SW_ENOMEM, f, NULL, "out of memory");
			goto out;
		}
		memcpy(sorted, f->t, f->n * sizeof *sorted);
		qsort(sorted, f->n, sizeof *sorted, cmp_begin_);
		for (size_t j = 1; j < f->n && !rc; j++)
			if (sorted[j].begin < sorted[j - 1].end)
				rc = fail_t_(err, SW_EFORMAT, f, sorted[j].name, "its data overlaps that of '%.60s'",
				             sorted[j - 1].name);
		free(sorted);
	}
out:
	yyjson_doc_free(doc);
	return rc;
}

int sw_st_open_mem(sw_st_file *f, const void *p, size_t size, const char *path, sw_error *err)
{
	memset(f, 0, sizeof *f);
	f->path = strdup(path);
	f->map = p;
	f->size = size;
	if (!f->path)
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	int rc = parse_(f, err);
	if (rc)
		sw_st_close(f);
	return rc;
}

int sw_st_open_file(sw_st_file *f, const char *path, sw_error *err)
{
	memset(f, 0, sizeof *f);
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		sw_fail(err, SW_EIO, "%s: cannot open: %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return sw_fail(err, SW_EIO, "%s: not a regular file", path);
	}
	const void *p = NULL;
	if (st.st_size > 0) {
		/*
		 * Not populated: the mapped pages of a file count in the process's
		 * resident set, so a file read whole into the map beside the arena
		 * it is copied into made loading peak at twice the weights.
		 * sw_st_read_f32() reads the map in order (read-ahead told so) and
		 * drops each stretch once it is in the arena.
		 */
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			sw_fail(err, SW_EIO, "%s: cannot map: %s", path, strerror(e));
			if (err)
				err->sys_errno = e;
			return SW_EIO;
		}
	}
	close(fd);
	if (p)
		madvise((void *)p, (size_t)st.st_size, MADV_SEQUENTIAL);
	int rc = sw_st_open_mem(f, p ? p : "", (size_t)st.st_size, path, err);
	if (rc) {
		if (p)
			munmap((void *)p, (size_t)st.st_size);
		return rc;
	}
	f->mapped = p != NULL;
	return 0;
}

void sw_st_close(sw_st_file *f)
{
	if (f->mapped)
		munmap((void *)f->map, f->size);
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->path);
	memset(f, 0, sizeof *f);
}

static float f16_(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
	if (e == 0) {
		if (!m) {
			bits = s;
		} else { /* subnormal: normalise the mantissa */
			e = 113;
			while (!(m & 0x400))
				m <<= 1, e--;
			bits = s | e << 23 | (m & 0x3ff) << 13;
		}
	} else if (e == 31) {
		bits = s | 0x7f800000u | m << 13;
	} else {
		bits = s | (e + 112) << 23 | m << 13;
	}
	float x;
	memcpy(&x, &bits, 4);
	return x;
}

/*
 * One thread, in blocks that stay in L1 between the conversion and the
 * check: the work is bound by memory, and a parallel loop per tensor only
 * adds barriers (costly on a machine whose cores are busy with other work).
 */
#define BLOCK_ 4096

/* Stretches of a mapped file read before their pages are given back. */
#define DROP_ ((size_t)4 << 20)

/*
 * Give back the pages of [a, b) of a mapped file (rounded out to whole
 * pages: one shared with a neighbouring tensor faults back in from the
 * page cache when read, the map is read-only), so that the file's pages
 * and the arena are not resident together.
 */
static void drop_(const sw_st_file *f, const unsigned char *a, const unsigned char *b)
{
	if (!f->mapped || b <= a)
		return;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)a & ~(pg - 1);
	uintptr_t hi = ((uintptr_t)b + pg - 1) & ~(pg - 1), end = (uintptr_t)f->map + f->size;
	if (hi > end)
		hi = end;
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int sw_st_read_f32(const sw_st_file *f, size_t i, float *dst, sw_error *err)
{
	const sw_st_tensor *t = &f->t[i];
	const unsigned char *p = f->data + t->begin, *kept = p;
	size_t n = (size_t)t->numel, es = t->dtype == SW_DT_F32 ? 4 : 2;
	for (size_t lo = 0; lo < n; lo += BLOCK_) {
		if ((size_t)(p + lo * es - kept) >= DROP_) {
			drop_(f, kept, p + lo * es);
			kept = p + lo * es;
		}
		size_t k = n - lo < BLOCK_ ? n - lo : BLOCK_;
		float *d = dst + lo;
		const unsigned char *s = p + lo * es;
		if (t->dtype == SW_DT_F32) {
			memcpy(d, s, k * 4);
		} else if (t->dtype == SW_DT_BF16) {
			for (size_t j = 0; j < k; j++) {
				uint16_t h;
				memcpy(&h, s + 2 * j, 2); /* little-endian, as the file */
				uint32_t b = (uint32_t)h << 16;
				memcpy(&d[j], &b, 4);
			}
		} else {
			for (size_t j = 0; j < k; j++) {
				uint16_t h;
				memcpy(&h, s + 2 * j, 2);
				d[j] = f16_(h);
			}
		}
		/* a NaN or Inf in a checkpoint is damage, not a weight: all exponent bits set */
		uint32_t any = 0;
		for (size_t j = 0; j < k; j++) {
			uint32_t b;
			memcpy(&b, &d[j], 4);
			any |= (b & 0x7f800000u) == 0x7f800000u;
		}
		if (any)
			for (size_t j = 0; j < k; j++)
				if (!isfinite(d[j]))
					return fail_t_(err, SW_EFORMAT, f, t->name, "element %zu is %s", lo + j,
					               isnan(d[j]) ? "NaN" : "infinite");
	}
	drop_(f, kept, p + n * es);
	return 0;
}

/* ---- loading a model directory ---- */

static char *join_(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (p) {
		memcpy(p, dir, a);
		p[a] = '/';
		memcpy(p + a + 1, name, b + 1);
	}
	return p;
}

static int exists_(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Tensors a checkpoint may hold that the model derives instead. */
static int derived_(const char *name)
{
	size_t n = strlen(name);
	return n >= 19 && !strcmp(name + n - 19, "rotary_emb.inv_freq");
}

/*
 * A LLaVA checkpoint's tensor name as the model names it (sw/model.h): the
 * layout transformers 5 writes ("language_model.model.X",
 * "language_model.lm_head.weight", "vision_tower.X",
 * "multi_modal_projector.X"), the one it holds in memory
 * ("model.language_model.X", "lm_head.weight", "model.vision_tower.X",
 * "model.multi_modal_projector.X") and the llava-hf checkpoints' (the
 * tower's names under "vision_tower.vision_model.") all read.  A text
 * model's names are its own.
 */
static const char *canon_(const sw_model *m, const char *name, char *buf, size_t size)
{
	static const char *const map[][2] = {
		{ "language_model.model.", "model." },
		{ "language_model.lm_head.", "lm_head." },
		{ "model.language_model.", "model." },
		{ "model.vision_tower.vision_model.", "vision_tower." },
		{ "model.vision_tower.", "vision_tower." },
		{ "vision_tower.vision_model.", "vision_tower." },
		{ "model.multi_modal_projector.", "multi_modal_projector." },
	};
	if (!m->cfg.vision.model_type[0])
		return name;
	for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
		size_t n = strlen(map[i][0]);
		if (!strncmp(name, map[i][0], n)) {
			snprintf(buf, size, "%s%s", map[i][1], name + n);
			return buf;
		}
	}
	return name;
}

/* The name a tensor is saved under: transformers 5's layout for a LLaVA model. */
static void saved_name_(const sw_model *m, const sw_tensor *t, char *buf, size_t size)
{
	bool text = strncmp(t->name, "vision_tower.", 13) && strncmp(t->name, "multi_modal_projector.", 22);
	snprintf(buf, size, "%s%s", m->cfg.vision.model_type[0] && text ? "language_model." : "", t->name);
}

typedef struct load_ctx_ {
	sw_model *m;
	float *host;           /* the arena where the host writes it in place (cpu), else NULL */
	float *buf;            /* else one tensor's staging, uploaded when it is read */
	unsigned char *seen;   /* per model tensor: from which file (1-based), 0 not yet */
	float *tied_lm;        /* lm_head.weight found in a tied checkpoint */
	char tied_lm_file[256];
} load_ctx_;

/* The tensors of one file into the model; only: the names the index gives this file. */
static int load_st_(load_ctx_ *x, const sw_st_file *fp, const char *path, int fileno_, const char *const *only,
                    size_t nonly, sw_error *err)
{
	const sw_st_file f = *fp;
	int rc = 0;
	sw_model *m = x->m;
	for (size_t i = 0; i < f.n && !rc; i++) {
		const sw_st_tensor *t = &f.t[i];
		char cb[160];
		const char *nm = canon_(m, t->name, cb, sizeof cb);
		if (derived_(t->name))
			continue;
		if (only) {
			/* a shard holds what the index says it holds, and nothing else */
			size_t j;
			for (j = 0; j < nonly && strcmp(only[j], t->name); j++)
				;
			if (j == nonly) {
				rc = fail_t_(err, SW_EFORMAT, &f, t->name,
				             "is in this shard but model.safetensors.index.json puts it elsewhere or nowhere");
				break;
			}
		}
		const sw_tensor *mt = sw_model_tensor(m, nm);
		float *dst = NULL;
		if (!mt && m->cfg.tie_word_embeddings && !strcmp(nm, "lm_head.weight")) {
			/* some tied checkpoints carry the copy; it must be the copy */
			if (x->tied_lm) {
				rc = fail_t_(err, SW_EFORMAT, &f, t->name, "appears in two files");
				break;
			}
			mt = sw_model_tensor(m, "model.embed_tokens.weight");
			dst = x->tied_lm = malloc(mt->numel * sizeof(float));
			snprintf(x->tied_lm_file, sizeof x->tied_lm_file, "%s", path);
			if (!dst) {
				rc = fail_t_(err, SW_ENOMEM, &f, t->name, "out of memory");
				break;
			}
		} else if (!mt) {
			rc = fail_t_(err, SW_EFORMAT, &f, t->name, "is not a tensor of this %s model (unexpected)",
			             m->cfg.model_type);
			break;
		} else {
			size_t k = (size_t)(mt - m->tensors);
			if (x->seen[k]) {
				rc = fail_t_(err, SW_EFORMAT, &f, t->name, "appears twice");
				break;
			}
			x->seen[k] = (unsigned char)fileno_;
			dst = x->host ? x->host + mt->offset : x->buf;
		}
		int same = t->ndim == mt->ndim;
		for (int d = 0; same && d < t->ndim; d++)
			same = t->shape[d] == mt->shape[d];
		if (!same) {
			char got[128] = "", want[64];
			for (int d = 0; d < t->ndim && strlen(got) < 100; d++)
				snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
				         (long long)t->shape[d]);
			want[0] = 0;
			for (int d = 0; d < mt->ndim; d++)
				snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
				         (long long)mt->shape[d]);
			rc = fail_t_(err, SW_EFORMAT, &f, t->name, "shape [%s], but config.json makes it [%s]", got, want);
			break;
		}
		rc = sw_st_read_f32(&f, i, dst, err);
		if (!rc && dst == x->buf)
			rc = m->backend->upload(mt->data, dst, mt->numel * sizeof(float), err);
	}
	return rc;
}

static int load_file_(load_ctx_ *x, const char *path, int fileno_, const char *const *only, size_t nonly,
                      sw_error *err)
{
	sw_st_file f;
	int rc = sw_st_open_file(&f, path, err);
	if (rc)
		return rc;
	rc = load_st_(x, &f, path, fileno_, only, nonly, err);
	sw_st_close(&f);
	return rc;
}

/* After every file: each tensor there, a tied lm_head the copy of the embedding. */
static int load_done_(load_ctx_ *x, const char *where, sw_error *err)
{
	sw_model *m = x->m;
	for (size_t i = 0; i < m->ntensors; i++)
		if (!x->seen[i])
			return sw_fail(err, SW_EFORMAT, "%s: tensor '%.80s' is missing", where, m->tensors[i].name);
	const float *embed = x->host;
	if (x->tied_lm && !embed) {
		int rc = m->backend->download(x->buf, m->embed, m->tensors[0].numel * sizeof(float), err);
		if (rc)
			return rc;
		embed = x->buf;
	}
	if (x->tied_lm && memcmp(x->tied_lm, embed, m->tensors[0].numel * sizeof(float)))
		return sw_fail(err, SW_EFORMAT,
		               "%s: tensor 'lm_head.weight' differs from model.embed_tokens.weight, "
		               "but config.json ties them",
		               x->tied_lm_file);
	return 0;
}

/* Where the tensors go: the arena itself, or one tensor's staging on a device. */
static int load_begin_(load_ctx_ *x, sw_error *err)
{
	sw_model *m = x->m;
	if ((x->host = (float *)m->backend->host_view(m->arena)))
		return SW_OK;
	if (!(x->buf = malloc(sw_model_max_numel(m) * sizeof(float) + 1)))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	return SW_OK;
}

int sw_st_load_into(sw_model *m, const sw_st_file *f, sw_error *err)
{
	load_ctx_ x = { m, NULL, NULL, calloc(m->ntensors + 1, 1), NULL, "" };
	int rc = x.seen ? load_begin_(&x, err) : sw_fail(err, SW_ENOMEM, "out of memory");
	if (!rc)
		rc = load_st_(&x, f, f->path, 1, NULL, 0, err);
	if (!rc)
		rc = load_done_(&x, f->path, err);
	free(x.buf);
	free(x.tied_lm);
	free(x.seen);
	return rc;
}

/* model.safetensors.index.json: the shard of each tensor. */
static int load_sharded_(load_ctx_ *x, const char *dir, const char *index, sw_error *err)
{
	FILE *fp = fopen(index, "rb");
	sw_buf b = { 0 };
	char chunk[65536];
	size_t n;
	int rc = 0;
	if (!fp) {
		int e = errno;
		sw_fail(err, SW_EIO, "%s: cannot open: %s", index, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0 && !rc)
		if (b.len > SW_ST_MAX_HEADER || sw_buf_put(&b, chunk, n))
			rc = sw_fail(err, SW_ETOOBIG, "%s: too large for an index", index);
	fclose(fp);
	if (rc) {
		sw_buf_release(&b);
		return rc;
	}
	yyjson_read_err je;
	yyjson_doc *doc = yyjson_read_opts((char *)b.p, b.len, YYJSON_READ_NOFLAG, NULL, &je);
	sw_buf_release(&b);
	if (!doc)
		return sw_fail(err, SW_EFORMAT, "%s: bad JSON at byte %zu: %s", index, je.pos, je.msg);
	if ((rc = sw_json_refuse_twins(yyjson_doc_get_root(doc), index, err))) {
		yyjson_doc_free(doc);
		return rc;
	}
	yyjson_val *map = yyjson_obj_get(yyjson_doc_get_root(doc), "weight_map");
	const char **names = NULL, **files = NULL;
	size_t nt = 0;
	if (!map || !yyjson_is_obj(map)) {
		rc = sw_fail(err, SW_EFORMAT, "%s: 'weight_map' is %s", index, map ? "not an object" : "missing");
		goto out;
	}
	nt = yyjson_obj_size(map);
	names = calloc(nt + 1, sizeof *names);
	files = calloc(nt + 1, sizeof *files);
	if (!names || !files) {
		rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", index);
		goto out;
	}
	size_t i;
	yyjson_val *k, *v;
	yyjson_obj_foreach(map, i, n, k, v) {
		const char *file = yyjson_get_str(v);
		names[i] = yyjson_get_str(k);
		if (!file || !*file || strchr(file, '/') || !strcmp(file, "..") || !strcmp(file, ".")) {
			rc = sw_fail(err, SW_EFORMAT, "%s: tensor '%.80s': shard is %s, not a file name in the directory",
			             index, names[i], file ? "a path" : yyjson_get_type_desc(v));
			goto out;
		}
		files[i] = file;
		char cb[160];
		const char *nm = canon_(x->m, names[i], cb, sizeof cb);
		if (!derived_(names[i]) && !sw_model_tensor(x->m, nm) &&
		    !(x->m->cfg.tie_word_embeddings && !strcmp(nm, "lm_head.weight"))) {
			rc = sw_fail(err, SW_EFORMAT, "%s: tensor '%.80s' is not a tensor of this %s model (unexpected)",
			             index, names[i], x->m->cfg.model_type);
			goto out;
		}
	}
	/* every shard once, with the names the index gives it */
	const char **only = calloc(nt + 1, sizeof *only);
	if (!only) {
		rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", index);
		goto out;
	}
	int fileno_ = 0;
	for (i = 0; i < nt && !rc; i++) {
		size_t j, nonly = 0;
		for (j = 0; j < i && strcmp(files[j], files[i]); j++)
			;
		if (j < i)
			continue; /* done already */
		for (j = i; j < nt; j++)
			if (!strcmp(files[j], files[i]))
				only[nonly++] = names[j];
		char *path = join_(dir, files[i]);
		if (!path) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		fileno_ = fileno_ < 255 ? fileno_ + 1 : 255;
		rc = load_file_(x, path, fileno_, only, nonly, err);
		free(path);
	}
	free(only);
	/* a name in the index that no shard held */
	for (i = 0; i < nt && !rc; i++) {
		char cb[160];
		const sw_tensor *mt = sw_model_tensor(x->m, canon_(x->m, names[i], cb, sizeof cb));
		if (mt && !x->seen[mt - x->m->tensors])
			rc = sw_fail(err, SW_EFORMAT, "%s/%s: tensor '%.80s' is missing (the index puts it there)", dir,
			             files[i], names[i]);
	}
out:
	free(names);
	free(files);
	yyjson_doc_free(doc);
	return rc;
}

int sw_model_load_weights(sw_model *m, const char *dir, sw_error *err)
{
	char *single = join_(dir, "model.safetensors"), *index = join_(dir, "model.safetensors.index.json");
	load_ctx_ x = { m, NULL, NULL, calloc(m->ntensors + 1, 1), NULL, "" };
	int rc = 0;
	if (!single || !index || !x.seen) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = load_begin_(&x, err)))
		goto out;
	/* as transformers: the single file first, then the index */
	if (exists_(single)) {
		rc = load_file_(&x, single, 1, NULL, 0, err);
	} else if (exists_(index)) {
		rc = load_sharded_(&x, dir, index, err);
	} else {
		rc = sw_fail(err, SW_EIO, "%s: no model.safetensors or model.safetensors.index.json", dir);
		if (err)
			err->sys_errno = ENOENT;
		goto out;
	}
	if (!rc)
		rc = load_done_(&x, exists_(single) ? single : index, err);
out:
	free(x.buf);
	free(x.tied_lm);
	free(x.seen);
	free(single);
	free(index);
	return rc;
}

sw_model *sw_model_load(const char *dir, sw_error *err)
{
	return sw_model_load_on(NULL, dir, err);
}

sw_model *sw_model_load_on(const sw_backend *be, const char *dir, sw_error *err)
{
	char *cfg = join_(dir, "config.json");
	sw_model_config c;
	if (!cfg) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	int rc = sw_model_config_load(cfg, &c, err);
	free(cfg);
	if (rc)
		return NULL;
	/* every float will be written or the model freed: no need to zero the arena first */
	sw_error e2 = { 0 };
	sw_model *m = sw_model_new_uninit(be, &c, &e2);
	if (!m) {
		sw_fail(err, e2.code, "%s: %s", dir, e2.msg);
		return NULL;
	}
	if (sw_model_load_weights(m, dir, err)) {
		sw_model_free(m);
		return NULL;
	}
	return m;
}

/* ---- saving ---- */

static uint16_t to_bf16_(float x)
{
	uint32_t b;
	memcpy(&b, &x, 4);
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((b >> 16) | 0x40); /* NaN stays a quiet NaN */
	b += 0x7fffu + ((b >> 16) & 1);      /* round to nearest, ties to even, as torch */
	return (uint16_t)(b >> 16);
}

typedef struct named_ {
	const sw_tensor *t;
	char name[128];            /* as saved */
} named_;

static int cmp_tensor_name_(const void *a, const void *b)
{
	return strcmp(((const named_ *)a)->name, ((const named_ *)b)->name);
}

static int save_weights_(const sw_model *m, const char *path, sw_dtype dt, const sw_save_opts *o, sw_error *err)
{
	if (dt != SW_DT_F32 && dt != SW_DT_BF16)
		return sw_fail(err, SW_EINVAL, "%s: weights are written as F32 or BF16, not %s", path, dtype_name_(dt));
	named_ *order = malloc(m->ntensors * sizeof *order);
	sw_buf h = { 0 };
	int rc = 0;
	if (!order)
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	/* the arena where the host reads it in place (cpu), else one tensor at a time from the device */
	const float *host = m->backend->host_view(m->arena);
	float *tbuf = host ? NULL : malloc(sw_model_max_numel(m) * sizeof(float) + 1);
	if (!host && !tbuf) {
		free(order);
		return sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	}
	for (size_t i = 0; i < m->ntensors; i++) {
		order[i].t = &m->tensors[i];
		saved_name_(m, &m->tensors[i], order[i].name, sizeof order[i].name);
	}
	qsort(order, m->ntensors, sizeof *order, cmp_tensor_name_);
	/* the header as the safetensors library writes it: compact, sorted, padded with spaces */
	const char *meta = "{\"__metadata__\":{\"format\":\"pt\"}";
	if (sw_buf_put(&h, "01234567", 8) || sw_buf_put(&h, meta, strlen(meta)))
		goto oom;
	uint64_t off = 0, es = dt == SW_DT_F32 ? 4 : 2;
	for (size_t i = 0; i < m->ntensors; i++) {
		const sw_tensor *t = order[i].t;
		char line[320], shape[96] = "";
		for (int d = 0; d < t->ndim; d++)
			snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "",
			         (long long)t->shape[d]);
		snprintf(line, sizeof line, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
		         order[i].name, dtype_name_(dt), shape, (unsigned long long)off,
		         (unsigned long long)(off + t->numel * es));
		if (sw_buf_put(&h, line, strlen(line)))
			goto oom;
		off += t->numel * es;
	}
	if (sw_buf_put(&h, "}", 1))
		goto oom;
	while ((h.len - 8) % 8)
		if (sw_buf_put(&h, " ", 1))
			goto oom;
	uint64_t hn = h.len - 8;
	for (int i = 0; i < 8; i++)
		h.p[i] = (uint8_t)(hn >> (8 * i));

	sw_afile f;
	if ((rc = sw_afile_open(&f, path, err)))
		goto out;
	rc = sw_afile_set(&f, o, 1, err);
	rc = rc ? rc : sw_afile_write(&f, h.p, h.len, err);
	uint16_t buf[8192];
	for (size_t i = 0; i < m->ntensors && !rc; i++) {
		const sw_tensor *t = order[i].t;
		const float *data = host ? host + t->offset : tbuf;
		if (!host && (rc = m->backend->download(tbuf, t->data, t->numel * sizeof(float), err)))
			break;
		if (dt == SW_DT_F32) {
			rc = sw_afile_write(&f, data, t->numel * sizeof(float), err);
			continue;
		}
		for (size_t j = 0; j < t->numel && !rc; j += 8192) {
			size_t k = t->numel - j < 8192 ? t->numel - j : 8192;
			for (size_t q = 0; q < k; q++)
				buf[q] = to_bf16_(data[j + q]);
			rc = sw_afile_write(&f, buf, k * 2, err);
		}
	}
	if (!rc)
		rc = sw_afile_commit(&f, err);
	if (rc)
		sw_afile_abort(&f);
out:
	free(tbuf);
	free(order);
	sw_buf_release(&h);
	return rc;
oom:
	rc = sw_fail(err, SW_ENOMEM, "%s: out of memory", path);
	goto out;
}

int sw_model_save_weights(const sw_model *m, const char *path, sw_dtype dt, sw_error *err)
{
	return save_weights_(m, path, dt, NULL, err);
}

int sw_model_save(const sw_model *m, const char *dir, sw_dtype dt, sw_error *err)
{
	return sw_model_save_with(m, dir, dt, NULL, err);
}

int sw_model_save_with(const sw_model *m, const char *dir, sw_dtype dt, const sw_save_opts *o, sw_error *err)
{
	if (mkdir(dir, 0777) && errno != EEXIST) {
		int e = errno;
		sw_fail(err, SW_EIO, "%s: cannot create the directory: %s", dir, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	char *st = join_(dir, "model.safetensors"), *cfg = join_(dir, "config.json");
	int rc = !st || !cfg ? sw_fail(err, SW_ENOMEM, "out of memory") : 0;
	/* the weights first, so that a failure leaves any older config.json beside its own weights */
	if (!rc)
		rc = save_weights_(m, st, dt, o, err);
	if (!rc)
		rc = sw_model_config_write(&m->cfg, cfg, dt == SW_DT_F32 ? "float32" : "bfloat16", err);
	free(st);
	free(cfg);
	return rc;
}
