/*
 * audit.c - the hash-chained audit log and the digests it records (see
 * sw/audit.h for the format).  Records are built with yyjson's mutable
 * documents; the fixed head of each line (seq, time, event, prev) is
 * written by hand so that every line starts the same way and the body a
 * hash covers is exactly the bytes before ,"hash".  A signed line carries
 * ,"sig":"S" after its hash: libsodium's Ed25519 over the bytes before it.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "sw/audit.h"
#include "sw/run.h"

#define HASH_LEN_ 32
#define ZERO_HEX_ "0000000000000000000000000000000000000000000000000000000000000000"
#define TAIL_KEY_ ",\"hash\":\""
#define TAIL_LEN_ (sizeof TAIL_KEY_ - 1 + 64 + 2) /* ,"hash":"<64>"} */

static int sys_(sw_error *err, int e, const char *path, const char *what)
{
	int code = sw_fail(err, SW_EIO, "%s: %s: %s", path, what, strerror(e));
	if (err)
		err->sys_errno = e;
	return code;
}

/* --- digests ---------------------------------------------------------------------- */

static void hex_(const unsigned char *h, char hex[SW_DIGEST_HEX])
{
	sodium_bin2hex(hex, SW_DIGEST_HEX, h, HASH_LEN_);
}

void sw_digest_mem(const void *p, size_t n, char hex[SW_DIGEST_HEX])
{
	unsigned char h[HASH_LEN_];
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, HASH_LEN_);
	/* the size argument is unsigned long long: feed big arenas in pieces all the same */
	const unsigned char *b = p;
	while (n) {
		size_t k = n > (1u << 30) ? (1u << 30) : n;
		crypto_generichash_update(&st, b, k);
		b += k;
		n -= k;
	}
	crypto_generichash_final(&st, h, HASH_LEN_);
	hex_(h, hex);
}

static int file_hash_(const char *path, unsigned char h[HASH_LEN_], uint64_t *size, sw_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sys_(err, errno, path, "cannot open");
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, HASH_LEN_);
	static __thread unsigned char buf[1 << 16];
	uint64_t total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return sys_(err, e, path, "cannot read");
		}
		if (n == 0)
			break;
		crypto_generichash_update(&st, buf, (unsigned long long)n);
		total += (uint64_t)n;
	}
	close(fd);
	crypto_generichash_final(&st, h, HASH_LEN_);
	if (size)
		*size = total;
	return 0;
}

int sw_digest_file(const char *path, char hex[SW_DIGEST_HEX], sw_error *err)
{
	unsigned char h[HASH_LEN_];
	int rc = file_hash_(path, h, NULL, err);
	if (!rc)
		hex_(h, hex);
	return rc;
}

/* The regular files under a directory, as relative paths. */
typedef struct flist_ {
	char **v;
	size_t n, cap;
} flist_;

static void flist_free_(flist_ *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	*l = (flist_){ 0 };
}

static int walk_(const char *root, const char *rel, flist_ *l, sw_error *err)
{
	char dpath[4096];
	snprintf(dpath, sizeof dpath, "%s%s%s", root, *rel ? "/" : "", rel);
	DIR *d = opendir(dpath);
	if (!d)
		return sys_(err, errno, dpath, "cannot read the directory");
	struct dirent *de;
	int rc = 0;
	while (!rc && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char r[4096], full[4096];
		if ((size_t)snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= sizeof r) {
			rc = sw_fail(err, SW_ERANGE, "%s: a path in it is too long", root);
			break;
		}
		struct stat st;
		if ((size_t)snprintf(full, sizeof full, "%s/%s", root, r) >= sizeof full) {
			rc = sw_fail(err, SW_ERANGE, "%s: a path in it is too long", root);
		} else if (lstat(full, &st)) {
			rc = sys_(err, errno, full, "cannot stat");
		} else if (S_ISDIR(st.st_mode)) {
			rc = walk_(root, r, l, err);
		} else if (S_ISLNK(st.st_mode) && stat(full, &st)) {
			rc = sys_(err, errno, full, "a symbolic link whose target cannot be read");
		} else if (!S_ISREG(st.st_mode)) {
			rc = sw_fail(err, SW_EFORMAT, "%s: not a regular file, a directory or a symbolic link to a regular file, "
			             "so not digested", full);
		} else {
			if (l->n == l->cap) {
				size_t cap = l->cap ? l->cap * 2 : 16;
				char **v = realloc(l->v, cap * sizeof *v);
				if (!v) {
					rc = sw_fail(err, SW_ENOMEM, "out of memory");
					break;
				}
				l->v = v;
				l->cap = cap;
			}
			if (!(l->v[l->n] = strdup(r)))
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
			else
				l->n++;
		}
	}
	closedir(d);
	return rc;
}

static int cmp_str_(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every file of a directory hashed, on up to 4 threads: a checkpoint's or a sharded model's large files side
 * by side (BLAKE2b runs near 1 GB/s a core).  Each file's result in its slot; the digest is made in order after. */
typedef struct fhash_ {
	const char *dir;
	char **names;
	size_t n, next;
	const sw_digests *written;
	unsigned char (*h)[HASH_LEN_];
	uint64_t *size;
	int *rc;
	sw_error *errs;
	pthread_mutex_t mu;
} fhash_;

/* One file's hash: as written (written noted it: not read, but its size must still be the size written), else read. */
static int fhash_one_(fhash_ *a, size_t i)
{
	char full[8192];
	struct stat sb;
	sw_error *err = &a->errs[i];
	snprintf(full, sizeof full, "%s/%s", a->dir, a->names[i]);
	if (!a->written || sw_digests_get(a->written, a->names[i], &a->size[i], a->h[i]))
		return file_hash_(full, a->h[i], &a->size[i], err);
	if (stat(full, &sb))
		return sys_(err, errno, full, "cannot stat");
	if ((uint64_t)sb.st_size != a->size[i])
		return sw_fail(err, SW_EFORMAT, "%s: %llu bytes, %llu written: it changed since", full,
		               (unsigned long long)sb.st_size, (unsigned long long)a->size[i]);
	return 0;
}

static void *fhash_run_(void *p)
{
	fhash_ *a = p;
	for (;;) {
		pthread_mutex_lock(&a->mu);
		size_t i = a->next++;
		pthread_mutex_unlock(&a->mu);
		if (i >= a->n)
			return NULL;
		a->rc[i] = fhash_one_(a, i);
	}
}

/*
 * The directory's digest, and each file's digest in files (a map; may be
 * NULL) of the mutable doc, in the sorted order the digest uses.
 */
static int dir_digest_(const char *dir, char hex[SW_DIGEST_HEX], yyjson_mut_doc *doc, yyjson_mut_val *files,
                       const sw_digests *written, sw_error *err)
{
	flist_ l = { 0 };
	int rc = walk_(dir, "", &l, err);
	if (rc) {
		flist_free_(&l);
		return rc;
	}
	qsort(l.v, l.n, sizeof *l.v, cmp_str_);
	size_t n = l.n ? l.n : 1;
	fhash_ a = { dir, l.v, l.n, 0, written, malloc(n * sizeof *a.h), malloc(n * sizeof *a.size),
	             calloc(n, sizeof *a.rc), calloc(n, sizeof *a.errs), PTHREAD_MUTEX_INITIALIZER };
	if (!a.h || !a.size || !a.rc || !a.errs) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = l.n < 4 ? l.n : 4;
	nt = cpus > 0 && (size_t)cpus < nt ? (size_t)cpus : nt;
	pthread_t th[3];
	size_t started = 0;
	while (started + 1 < nt && !pthread_create(&th[started], NULL, fhash_run_, &a))
		started++;
	fhash_run_(&a);
	for (size_t t = 0; t < started; t++)
		pthread_join(th[t], NULL);

	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, HASH_LEN_);
	for (size_t i = 0; i < l.n && !rc; i++) {
		unsigned char le[8];
		if ((rc = a.rc[i])) {
			if (err)
				*err = a.errs[i];
			break;
		}
		for (int k = 0; k < 8; k++)
			le[k] = (unsigned char)(a.size[i] >> (8 * k));
		crypto_generichash_update(&st, (const unsigned char *)l.v[i], strlen(l.v[i]) + 1);
		crypto_generichash_update(&st, le, 8);
		crypto_generichash_update(&st, a.h[i], HASH_LEN_);
		if (files) {
			char fh[SW_DIGEST_HEX];
			hex_(a.h[i], fh);
			if (!yyjson_mut_obj_add(files, yyjson_mut_strcpy(doc, l.v[i]), yyjson_mut_strcpy(doc, fh)))
				rc = sw_fail(err, SW_ENOMEM, "out of memory");
		}
	}
	if (!rc) {
		unsigned char h[HASH_LEN_];
		crypto_generichash_final(&st, h, HASH_LEN_);
		hex_(h, hex);
	}
out:
	free(a.h), free(a.size), free(a.rc), free(a.errs);
	flist_free_(&l);
	return rc;
}

int sw_digest_dir(const char *dir, char hex[SW_DIGEST_HEX], sw_error *err)
{
	return dir_digest_(dir, hex, NULL, NULL, NULL, err);
}

/* --- seals: what a directory's files were, to know later that none changed ------------------ */

typedef struct seal_file_ {
	char *name;                 /* relative, as the digest names it */
	struct stat st;             /* stat(2)'s, through a link as the digest reads it */
} seal_file_;

struct sw_dir_seal {
	char *dir;
	size_t n;
	seal_file_ *f;              /* sorted by name, as the digest's order */
};

static int seal_stat_(const char *dir, const char *name, struct stat *st)
{
	char full[8192];
	if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, name) >= sizeof full) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return stat(full, st);
}

void sw_dir_seal_free(sw_dir_seal *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->f[i].name);
	free(s->f);
	free(s->dir);
	free(s);
}

sw_dir_seal *sw_dir_seal_take(const char *dir, sw_error *err)
{
	flist_ l = { 0 };
	sw_dir_seal *s = calloc(1, sizeof *s);
	int rc = !s || !(s->dir = strdup(dir)) ? sw_fail(err, SW_ENOMEM, "out of memory") : walk_(dir, "", &l, err);
	if (!rc && !(s->f = calloc(l.n ? l.n : 1, sizeof *s->f)))
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	if (!rc)
		qsort(l.v, l.n, sizeof *l.v, cmp_str_);
	for (size_t i = 0; !rc && i < l.n; i++, s->n++) {
		s->f[i].name = l.v[i], l.v[i] = NULL;
		if (seal_stat_(dir, s->f[i].name, &s->f[i].st)) {
			int e = errno;
			char full[8192];
			snprintf(full, sizeof full, "%s/%s", dir, s->f[i].name);
			rc = sys_(err, e, full, "cannot stat");
		}
	}
	flist_free_(&l);
	if (rc) {
		sw_dir_seal_free(s);
		return NULL;
	}
	return s;
}

static int same_time_(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

int sw_dir_seal_check(const sw_dir_seal *s, sw_error *err)
{
	flist_ l = { 0 };
	int rc = walk_(s->dir, "", &l, err);
	if (rc) {
		flist_free_(&l);
		return rc;
	}
	qsort(l.v, l.n, sizeof *l.v, cmp_str_);
	const char *what = NULL, *which = NULL;
	for (size_t i = 0, j = 0; !what && (i < s->n || j < l.n);) {
		int c = i == s->n ? 1 : j == l.n ? -1 : strcmp(s->f[i].name, l.v[j]);
		struct stat st;
		const struct stat *was = i < s->n ? &s->f[i].st : NULL;
		if (c < 0) {
			what = "was removed", which = s->f[i].name;
		} else if (c > 0) {
			what = "was added", which = l.v[j];
		} else if (seal_stat_(s->dir, s->f[i].name, &st)) {
			what = "was removed", which = s->f[i].name;
		} else if (st.st_dev != was->st_dev || st.st_ino != was->st_ino) {
			what = "was replaced", which = s->f[i].name;
		} else if (st.st_size != was->st_size || !same_time_(st.st_mtim, was->st_mtim) ||
		           !same_time_(st.st_ctim, was->st_ctim)) {
			/* written to (ctime moves with every write, chmod or link, and no system call sets it back) */
			what = "was changed", which = s->f[i].name;
		}
		i += c <= 0, j += c >= 0;
	}
	if (what)
		rc = sw_fail(err, SW_EFORMAT, "'%.120s' changed while it was read: file '%.60s' %s", s->dir, which, what);
	flist_free_(&l);
	return rc;
}

struct sw_digest_job {
	char *dir;
	pthread_t th;
	int threaded;
	int rc;
	char hex[SW_DIGEST_HEX];
	sw_error err;
};

static void *digest_job_run_(void *p)
{
	sw_digest_job *j = p;
	j->rc = sw_digest_dir(j->dir, j->hex, &j->err);
	return NULL;
}

sw_digest_job *sw_digest_dir_begin(const char *dir, sw_error *err)
{
	sw_digest_job *j = calloc(1, sizeof *j);
	if (!j || !(j->dir = strdup(dir))) {
		free(j);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	j->threaded = !pthread_create(&j->th, NULL, digest_job_run_, j);
	return j;
}

int sw_digest_dir_end(sw_digest_job *j, char hex[SW_DIGEST_HEX], sw_error *err)
{
	if (!j)
		return sw_fail(err, SW_EINVAL, "no digest job");
	if (j->threaded)
		pthread_join(j->th, NULL);
	else
		digest_job_run_(j);
	int rc = j->rc;
	if (rc && err)
		*err = j->err;
	else if (!rc)
		memcpy(hex, j->hex, SW_DIGEST_HEX);
	free(j->dir);
	free(j);
	return rc;
}

int sw_digest_path(const char *path, char hex[SW_DIGEST_HEX], sw_error *err)
{
	struct stat st;
	if (stat(path, &st))
		return sys_(err, errno, path, "cannot stat");
	if (S_ISDIR(st.st_mode))
		return sw_digest_dir(path, hex, err);
	return sw_digest_file(path, hex, err);
}

/* --- records ------------------------------------------------------------------------ */

struct sw_audit_rec {
	char event[65];
	yyjson_mut_doc *doc;
	yyjson_mut_val *obj; /* the record's own fields, in the order added */
};

static int utf8_ok_(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k = (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 0;
		if (!k || i + k >= n)
			return 0;
		for (size_t j = 1; j <= k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
		/* overlong forms, surrogates and beyond U+10FFFF, which JSON cannot carry */
		unsigned d = s[i + 1];
		if ((k == 1 && c < 0xc2) || (k == 2 && c == 0xe0 && d < 0xa0) || (k == 2 && c == 0xed && d >= 0xa0) ||
		    (k == 3 && c == 0xf0 && d < 0x90) || (k == 3 && (c > 0xf4 || (c == 0xf4 && d >= 0x90))))
			return 0;
		i += k + 1;
	}
	return 1;
}

static const char *const reserved_[] = { "seq", "time", "event", "prev", "hash", "sig" };

static int key_ok_(const sw_audit_rec *r, const char *key)
{
	if (!r || !key || !*key || !utf8_ok_((const unsigned char *)key, strlen(key)))
		return 0;
	for (size_t i = 0; i < sizeof reserved_ / sizeof *reserved_; i++)
		if (!strcmp(key, reserved_[i]))
			return 0;
	return yyjson_mut_obj_get(r->obj, key) == NULL;
}

static int add_(sw_audit_rec *r, const char *key, yyjson_mut_val *v)
{
	if (!v)
		return SW_ENOMEM;
	return yyjson_mut_obj_add(r->obj, yyjson_mut_strcpy(r->doc, key), v) ? 0 : SW_ENOMEM;
}

/* An event's name: 1 to 64 of a-z, 0-9 and _. */
static int event_ok_(const char *event, size_t n)
{
	if (n == 0 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((event[i] >= 'a' && event[i] <= 'z') || (event[i] >= '0' && event[i] <= '9') || event[i] == '_'))
			return 0;
	return 1;
}

sw_audit_rec *sw_audit_rec_new(const char *event)
{
	size_t n = event ? strlen(event) : 0;
	if (!event_ok_(event, n))
		return NULL;
	sw_audit_rec *r = calloc(1, sizeof *r);
	if (!r || !(r->doc = yyjson_mut_doc_new(NULL)) || !(r->obj = yyjson_mut_obj(r->doc))) {
		sw_audit_rec_free(r);
		return NULL;
	}
	yyjson_mut_doc_set_root(r->doc, r->obj);
	memcpy(r->event, event, n + 1);
	return r;
}

void sw_audit_rec_free(sw_audit_rec *r)
{
	if (!r)
		return;
	yyjson_mut_doc_free(r->doc);
	free(r);
}

int sw_audit_rec_str(sw_audit_rec *r, const char *key, const char *value)
{
	if (!key_ok_(r, key) || !value || !utf8_ok_((const unsigned char *)value, strlen(value)))
		return SW_EINVAL;
	return add_(r, key, yyjson_mut_strcpy(r->doc, value));
}

int sw_audit_rec_int(sw_audit_rec *r, const char *key, int64_t value)
{
	if (!key_ok_(r, key))
		return SW_EINVAL;
	return add_(r, key, yyjson_mut_sint(r->doc, value));
}

int sw_audit_rec_num(sw_audit_rec *r, const char *key, double value)
{
	if (!key_ok_(r, key) || !isfinite(value))
		return SW_EINVAL;
	return add_(r, key, yyjson_mut_real(r->doc, value));
}

int sw_audit_rec_argv(sw_audit_rec *r, const char *key, int argc, char *const argv[])
{
	if (!key_ok_(r, key) || argc < 0)
		return SW_EINVAL;
	for (int i = 0; i < argc; i++)
		if (!argv[i] || !utf8_ok_((const unsigned char *)argv[i], strlen(argv[i])))
			return SW_EINVAL;
	yyjson_mut_val *a = yyjson_mut_arr(r->doc);
	if (!a)
		return SW_ENOMEM;
	for (int i = 0; i < argc; i++)
		if (!yyjson_mut_arr_append(a, yyjson_mut_strcpy(r->doc, argv[i])))
			return SW_ENOMEM;
	return add_(r, key, a);
}

int sw_audit_rec_json(sw_audit_rec *r, const char *key, const char *json)
{
	if (!key_ok_(r, key) || !json)
		return SW_EINVAL;
	yyjson_doc *d = yyjson_read(json, strlen(json), 0);
	if (!d)
		return SW_EFORMAT;
	yyjson_mut_val *v = yyjson_val_mut_copy(r->doc, yyjson_doc_get_root(d));
	yyjson_doc_free(d);
	return add_(r, key, v);
}

/* Whether relpath names a place inside the run directory: relative, not
 * empty, no ".." component.  The writer records only such paths and the
 * verifier follows only such paths (a forged "/" would have it digest the
 * whole file system). */
static int inside_(const char *relpath)
{
	return relpath && *relpath && relpath[0] != '/' && strcmp(relpath, "..") && strncmp(relpath, "../", 3) &&
	       !strstr(relpath, "/../") && !(strlen(relpath) >= 3 && !strcmp(relpath + strlen(relpath) - 3, "/.."));
}

int sw_audit_rec_checkpoint(sw_audit_rec *r, const char *rundir, const char *relpath, const sw_digests *written,
                            sw_error *err)
{
	if (!inside_(relpath))
		return sw_fail(err, SW_EINVAL, "checkpoint '%.200s': not a path inside the run directory",
		               relpath ? relpath : "");
	if (!key_ok_(r, "path") || !key_ok_(r, "digest") || !key_ok_(r, "files"))
		return sw_fail(err, SW_EINVAL, "checkpoint '%.200s': the record has a path, digest or files already",
		               relpath);
	char dir[4096], hex[SW_DIGEST_HEX];
	snprintf(dir, sizeof dir, "%s/%s", rundir, relpath);
	yyjson_mut_val *files = yyjson_mut_obj(r->doc);
	if (!files)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	int rc = dir_digest_(dir, hex, r->doc, files, written, err);
	if (rc)
		return rc;
	if (sw_audit_rec_str(r, "path", relpath) || sw_audit_rec_str(r, "digest", hex) || add_(r, "files", files))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	return 0;
}

int sw_audit_rec_files(sw_audit_rec *r, const char *key, const char *const *paths, size_t n, sw_error *err)
{
	if (!key_ok_(r, key))
		return sw_fail(err, SW_EINVAL, "'%s' is no key a record may take, or it has one already", key ? key : "");
	yyjson_mut_val *files = yyjson_mut_obj(r->doc);
	if (!files)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (!paths[i] || !utf8_ok_((const unsigned char *)paths[i], strlen(paths[i])))
			return sw_fail(err, SW_EINVAL, "a file's path is not UTF-8 text");
		if (yyjson_mut_obj_get(files, paths[i]))
			continue; /* named twice: once is its digest */
		unsigned char h[HASH_LEN_];
		char hex[SW_DIGEST_HEX];
		int rc = file_hash_(paths[i], h, NULL, err);
		if (rc)
			return rc;
		hex_(h, hex);
		if (!yyjson_mut_obj_add(files, yyjson_mut_strcpy(r->doc, paths[i]), yyjson_mut_strcpy(r->doc, hex)))
			return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	return add_(r, key, files) ? sw_fail(err, SW_ENOMEM, "out of memory") : 0;
}

/* --- reading and checking lines ------------------------------------------------------- */

/* Everything about one line that the chain needs. */
typedef struct line_ {
	uint64_t seq;
	char hash[SW_DIGEST_HEX];
	int sig;         /* 1: the line is signed (and, with a key given, the signature verified) */
	yyjson_doc *doc; /* the parsed line, the caller's to free */
} line_;

#define SIG_KEY_ ",\"sig\":\""
#define SIG_LEN_ (sizeof SIG_KEY_ - 1 + 2 * crypto_sign_BYTES + 1) /* ,"sig":"<128>" */

static int is_hex_(const char *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return 0;
	return 1;
}

/* A record's time: YYYY-MM-DDTHH:MM:SS.mmmZ, the digits where the writer puts them. */
static int time_ok_(const char *t, size_t n)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
	if (n != sizeof shape - 1)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (shape[i] == 'd' ? !(t[i] >= '0' && t[i] <= '9') : t[i] != shape[i])
			return 0;
	return 1;
}

/*
 * Check the line p[0..n) (no newline) as record want, following prev; fill
 * ln.  pk: the public key every record must be signed with, or NULL (a
 * signature is then only read).  err gets the message only: the caller
 * says where.
 */
static int check_line_(const char *p, size_t n, uint64_t want, const char *prev, const unsigned char *pk,
                       line_ *ln, sw_error *err)
{
	ln->doc = NULL;
	ln->sig = 0;
	if (n == 0)
		return sw_fail(err, SW_EFORMAT, "an empty line where a record was expected");
	/* BODY,"hash":"H"} or BODY,"hash":"H","sig":"S"}: core is what precedes the sig */
	size_t core = n - 1;
	const char *sig = NULL;
	if (p[n - 1] == '}' && n - 1 > SIG_LEN_ && !memcmp(p + n - 1 - SIG_LEN_, SIG_KEY_, sizeof SIG_KEY_ - 1) &&
	    p[n - 2] == '"') {
		core = n - 1 - SIG_LEN_;
		sig = p + core + sizeof SIG_KEY_ - 1;
	}
	size_t htail = TAIL_LEN_ - 1; /* ,"hash":"<64>" */
	if (p[n - 1] != '}' || core < htail + 1 || memcmp(p + core - htail, TAIL_KEY_, sizeof TAIL_KEY_ - 1) ||
	    p[core - 1] != '"')
		return sw_fail(err, SW_EFORMAT, "the line does not end in its hash (,\"hash\":\"...\"}): edited or "
		                                "not an audit record");
	const char *h = p + core - 65;
	if (!is_hex_(h, 64))
		return sw_fail(err, SW_EFORMAT, "its hash is not 64 lowercase hex digits: edited");
	char got[SW_DIGEST_HEX];
	sw_digest_mem(p, core - htail, got);
	if (memcmp(got, h, 64))
		return sw_fail(err, SW_EFORMAT, "its contents do not match its hash: the record was edited");
	if (sig) {
		unsigned char s[crypto_sign_BYTES];
		if (!is_hex_(sig, 2 * crypto_sign_BYTES) ||
		    sodium_hex2bin(s, sizeof s, sig, 2 * crypto_sign_BYTES, NULL, NULL, NULL))
			return sw_fail(err, SW_EFORMAT, "its signature is not 128 lowercase hex digits: edited");
		if (pk && crypto_sign_verify_detached(s, (const unsigned char *)p, core, pk))
			return sw_fail(err, SW_EFORMAT, "its signature does not verify with the public key: the "
			                                "record was written or re-chained without the signing key");
		ln->sig = 1;
	} else if (pk) {
		return sw_fail(err, SW_EFORMAT, "it is not signed, and every record must be (a public key was "
		                                "given): written without the signing key");
	}
	memcpy(ln->hash, h, 64);
	ln->hash[64] = 0;
	yyjson_doc *d = yyjson_read(p, n, 0);
	yyjson_val *root = d ? yyjson_doc_get_root(d) : NULL;
	if (!yyjson_is_obj(root)) {
		yyjson_doc_free(d);
		return sw_fail(err, SW_EFORMAT, "not a JSON object, though its hash matches: forged");
	}
	/* the writer writes each name once; a twin reads as the first here, as the
	 * last in Python's json: one signed line, two records */
	const char *tw;
	size_t twn;
	int t = sw_json_twin(root, &tw, &twn);
	if (t) {
		char shown[80];
		if (t == 1)
			sw_show_text(shown, sizeof shown, tw, twn, 1);
		yyjson_doc_free(d);
		return t == 1 ? sw_fail(err, SW_EFORMAT, "the name \"%s\" appears twice in it, though its hash "
		                                         "matches: forged", shown)
		              : sw_fail(err, t, "out of memory");
	}
	ln->doc = d;
	yyjson_val *seq = yyjson_obj_get(root, "seq"), *pv = yyjson_obj_get(root, "prev");
	yyjson_val *ev = yyjson_obj_get(root, "event"), *tm = yyjson_obj_get(root, "time");
	if (!yyjson_is_uint(seq) || !yyjson_is_str(ev) || !yyjson_is_str(tm) || !yyjson_is_str(pv))
		return sw_fail(err, SW_EFORMAT, "lacks seq, time, event or prev");
	/* as sw_audit_append writes them (they are shown as they are, so no control bytes get through) */
	if (!event_ok_(yyjson_get_str(ev), yyjson_get_len(ev)) || !time_ok_(yyjson_get_str(tm), yyjson_get_len(tm)))
		return sw_fail(err, SW_EFORMAT, "its event or time is not one the log's writer writes (an event of "
		                                "a-z, 0-9 and _; a time as 2026-01-31T23:59:59.999Z): forged");
	ln->seq = yyjson_get_uint(seq);
	if (ln->seq > want)
		return sw_fail(err, SW_EFORMAT,
		               "seq is %llu where %llu was expected: record %llu was deleted, or records were moved",
		               (unsigned long long)ln->seq, (unsigned long long)want, (unsigned long long)want);
	if (ln->seq < want)
		return sw_fail(err, SW_EFORMAT,
		               "seq is %llu where %llu was expected: records were moved, repeated or inserted",
		               (unsigned long long)ln->seq, (unsigned long long)want);
	if (strcmp(yyjson_get_str(pv), prev))
		return sw_fail(err, SW_EFORMAT,
		               want == 1 ? "prev is not zeros, as the first record's must be: records before it "
		                           "were removed"
		                         : "prev is not the hash of record %llu: that record was replaced",
		               (unsigned long long)(want - 1));
	return 0;
}

static int read_all_(const char *path, sw_buf *b, sw_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sys_(err, errno, path, "cannot open");
	for (;;) {
		if (sw_buf_reserve(b, 1 << 16)) {
			close(fd);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
		ssize_t n = read(fd, b->p + b->len, b->cap - b->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return sys_(err, e, path, "cannot read");
		}
		if (n == 0)
			break;
		b->len += (size_t)n;
	}
	close(fd);
	return 0;
}

/* Whether s[0..n) can be shown bare: not empty, no NUL, space, quote or control byte. */
static int bare_(const char *s, size_t n)
{
	if (n == 0 || strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f || s[i] == '"' || s[i] == '\'')
			return 0;
	return 1;
}

/* v as JSON text (escaped) onto b. */
static void put_json_(sw_buf *b, yyjson_val *v)
{
	size_t n;
	char *s = yyjson_val_write(v, 0, &n);
	if (s)
		sw_buf_put(b, s, n);
	free(s);
}

/* A record's other fields as "key=value ...": keys and strings bare where bare_ allows, the rest as JSON. */
static char *summary_(yyjson_val *root)
{
	sw_buf b = { 0 };
	yyjson_obj_iter it;
	yyjson_val *k;
	yyjson_obj_iter_init(root, &it);
	while ((k = yyjson_obj_iter_next(&it))) {
		const char *key = yyjson_get_str(k);
		yyjson_val *v = yyjson_obj_iter_get_val(k);
		int skip = 0;
		for (size_t i = 0; i < sizeof reserved_ / sizeof *reserved_; i++)
			skip |= !strcmp(key, reserved_[i]);
		if (skip || !strcmp(key, "files"))
			continue;
		if (b.len)
			sw_buf_put(&b, " ", 1);
		/* a key or string with a space, a quote, '=' or a control byte is shown as JSON */
		if (bare_(key, yyjson_get_len(k)) && !strchr(key, '='))
			sw_buf_put(&b, key, strlen(key));
		else
			put_json_(&b, k);
		sw_buf_put(&b, "=", 1);
		if (yyjson_is_str(v) && bare_(yyjson_get_str(v), yyjson_get_len(v))) {
			sw_buf_put(&b, yyjson_get_str(v), yyjson_get_len(v));
		} else if (yyjson_is_real(v)) {
			/* for reading, not for checking: the log keeps every digit */
			char num[40];
			int n = snprintf(num, sizeof num, "%.6g", yyjson_get_real(v));
			sw_buf_put(&b, num, (size_t)n);
		} else {
			put_json_(&b, v);
		}
	}
	if (sw_buf_put(&b, "", 1)) {
		sw_buf_release(&b);
		return NULL;
	}
	return (char *)b.p;
}

/* A checkpoint the log names, checked once the chain is. */
typedef struct ckpt_ {
	uint64_t rec, offset;
	const char *line;
	size_t len;
	int removed;
} ckpt_;

/* Check the checkpoint record c against its directory under logdir; got (may be NULL) gets the directory's digest. */
static int check_ckpt_(const char *logdir, const ckpt_ *c, char got[SW_DIGEST_HEX], sw_error *err)
{
	yyjson_doc *d = yyjson_read(c->line, c->len, 0);
	yyjson_val *root = yyjson_doc_get_root(d);
	yyjson_val *path = yyjson_obj_get(root, "path"), *dig = yyjson_obj_get(root, "digest");
	yyjson_val *files = yyjson_obj_get(root, "files");
	int rc = 0;
	if (!yyjson_is_str(path) || !yyjson_is_str(dig) || yyjson_get_len(dig) != 64) {
		rc = sw_fail(err, SW_EFORMAT, "a checkpoint record without a path and a digest");
		goto out;
	}
	const char *rel = yyjson_get_str(path);
	char dir[4096], hex[SW_DIGEST_HEX];
	struct stat st;
	/* as sw_audit_rec_checkpoint writes it: a NUL inside (\u0000) would cut the name short */
	if (!inside_(rel) || strlen(rel) != yyjson_get_len(path)) {
		rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s': not a path inside the run directory, as a "
		             "checkpoint record's must be: forged", rel);
		goto out;
	}
	if ((size_t)snprintf(dir, sizeof dir, "%s/%s", logdir, rel) >= sizeof dir) {
		rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s': the path is too long", rel);
		goto out;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s' is missing", rel);
		goto out;
	}
	yyjson_mut_doc *md = yyjson_mut_doc_new(NULL);
	yyjson_mut_val *now = md ? yyjson_mut_obj(md) : NULL;
	sw_error e2 = { 0 };
	if (!now) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	} else if (dir_digest_(dir, hex, md, now, NULL, &e2)) {
		rc = sw_fail(err, e2.code, "checkpoint '%.200s': %s", rel, e2.msg);
		if (err)
			err->sys_errno = e2.sys_errno;
	} else if (strcmp(hex, yyjson_get_str(dig))) {
		/* name the file: one recorded but gone or changed, or one new */
		const char *what = NULL, *which = NULL;
		yyjson_obj_iter it;
		yyjson_val *k;
		if (yyjson_is_obj(files)) {
			yyjson_obj_iter_init(files, &it);
			while (!what && (k = yyjson_obj_iter_next(&it))) {
				yyjson_mut_val *v = yyjson_mut_obj_get(now, yyjson_get_str(k));
				const char *want = yyjson_get_str(yyjson_obj_iter_get_val(k));
				if (!v)
					what = "was removed", which = yyjson_get_str(k);
				else if (!want || strcmp(yyjson_mut_get_str(v), want))
					what = "changed", which = yyjson_get_str(k);
			}
			yyjson_mut_obj_iter mit;
			yyjson_mut_val *mk;
			yyjson_mut_obj_iter_init(now, &mit);
			while (!what && (mk = yyjson_mut_obj_iter_next(&mit)))
				if (!yyjson_obj_get(files, yyjson_mut_get_str(mk)))
					what = "was added", which = yyjson_mut_get_str(mk);
		}
		if (what)
			rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s' does not match its digest: file '%.200s' %s",
			             rel, which, what);
		else
			rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s' does not match its digest", rel);
	} else if (got) {
		memcpy(got, hex, SW_DIGEST_HEX);
	}
	yyjson_mut_doc_free(md);
out:
	yyjson_doc_free(d);
	return rc;
}

/*
 * Whether the run in dir finished: a HALT file, or metrics.jsonl holding
 * its last iteration (config's iters).  A directory that is no run (no
 * config) has not.
 */
static int run_finished_(const char *dir, uint64_t *iters)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof path, "%s/HALT", dir);
	if (!stat(path, &st))
		return 1;
	sw_experiment x;
	sw_experiment_init(&x);
	snprintf(path, sizeof path, "%s/config", dir);
	int ok = !stat(path, &st) && !sw_experiment_read(&x, path, NULL);
	*iters = x.iters;
	sw_experiment_release(&x);
	sw_buf b = { 0 };
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	if (!ok || read_all_(path, &b, NULL)) {
		sw_buf_release(&b);
		return 0;
	}
	int done = 0;
	for (const char *p = (const char *)b.p, *end = p + b.len, *nl; !done && p < end; p = nl + 1) {
		if (!(nl = memchr(p, '\n', (size_t)(end - p))))
			nl = end;
		yyjson_doc *d = yyjson_read(p, (size_t)(nl - p), 0);
		yyjson_val *root = yyjson_doc_get_root(d), *it = yyjson_obj_get(root, "iter");
		done = yyjson_is_uint(it) && yyjson_get_uint(it) == *iters && !yyjson_get_bool(yyjson_obj_get(root, "eval"));
		yyjson_doc_free(d);
	}
	sw_buf_release(&b);
	return done;
}

/* The directory the file at path is in: "." for a bare name, "/" for one at the root. */
static void dir_of_(const char *path, char *dir, size_t n)
{
	const char *slash = strrchr(path, '/');
	snprintf(dir, n, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
}

/* path as sw_audit_verify takes it (a run directory, or the log file): the log and the directory its
 * checkpoints' paths are relative to; -1 (errno set) when path cannot be looked at. */
static int log_paths_(const char *path, char log[4096], char logdir[4096])
{
	struct stat st;
	if (stat(path, &st))
		return -1;
	if (S_ISDIR(st.st_mode)) {
		snprintf(log, 4096, "%s/audit.log", path);
		snprintf(logdir, 4096, "%s", path);
	} else {
		snprintf(log, 4096, "%s", path);
		dir_of_(path, logdir, 4096);
	}
	return 0;
}

/*
 * The verifier; ckpts 0 checks the chain (and with pk the signatures) only,
 * as an appender needs: not the checkpoints, nor that a finished run's log
 * has its end record (a run resumed for more iterations than its config
 * says is running again, and its stages append to it).  *bytes: the bytes
 * of the log read.  pk: see check_line_.
 */
static int verify_(const char *path, const char *head, const unsigned char *pk, sw_audit_fn fn, void *ud,
                   sw_audit_report *rep, sw_error *err, int ckpts, uint64_t *bytes)
{
	char log[4096], logdir[4096];
	sw_audit_report r = { 0 };
	if (log_paths_(path, log, logdir))
		return sys_(err, errno, path, "cannot open");
	sw_buf b = { 0 };
	int rc = read_all_(log, &b, err);
	if (rc)
		return rc;
	ckpt_ *ck = NULL;
	size_t nck = 0, capck = 0;
	char prev[SW_DIGEST_HEX] = ZERO_HEX_;
	const char *p = (const char *)b.p, *end = p + b.len;
	uint64_t want = 1;
	if (b.len == 0)
		rc = sw_fail(err, SW_EEMPTY, "the log holds no records");
	while (!rc && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		uint64_t off = (uint64_t)(p - (const char *)b.p);
		line_ ln = { 0 };
		if (!nl) {
			rc = sw_fail(err, SW_ETRUNC, "the line has no end: the log was cut");
		} else {
			rc = check_line_(p, (size_t)(nl - p), want, prev, pk, &ln, err);
		}
		if (rc) {
			if (err) {
				err->record = want;
				err->offset = off;
			}
			yyjson_doc_free(ln.doc);
			break;
		}
		yyjson_val *root = yyjson_doc_get_root(ln.doc);
		const char *event = yyjson_get_str(yyjson_obj_get(root, "event"));
		if (head && !strcmp(head, ln.hash))
			r.head_record = want;
		r.signed_records += (uint64_t)ln.sig;
		/* the run's end: run_end or halt after its last start or resume */
		if (!strcmp(event, "run_start") || !strcmp(event, "resume"))
			r.ended = 0;
		else if (!strcmp(event, "run_end") || !strcmp(event, "halt"))
			r.ended = 1;
		if (!strcmp(event, "checkpoint") || !strcmp(event, "checkpoint_removed")) {
			int removal = event[10] != 0;
			const char *cp = yyjson_get_str(yyjson_obj_get(root, "path"));
			if (removal) {
				for (size_t i = 0; cp && i < nck; i++) {
					yyjson_doc *d = yyjson_read(ck[i].line, ck[i].len, 0);
					const char *q = yyjson_get_str(yyjson_obj_get(yyjson_doc_get_root(d), "path"));
					if (q && !strcmp(q, cp))
						ck[i].removed = 1;
					yyjson_doc_free(d);
				}
			} else {
				if (nck == capck) {
					size_t cap = capck ? capck * 2 : 8;
					ckpt_ *v = realloc(ck, cap * sizeof *v);
					if (!v) {
						yyjson_doc_free(ln.doc);
						rc = sw_fail(err, SW_ENOMEM, "out of memory");
						break;
					}
					ck = v;
					capck = cap;
				}
				ck[nck++] = (ckpt_){ want, off, p, (size_t)(nl - p), 0 };
			}
		}
		if (fn) {
			char *sum = summary_(root);
			sw_audit_entry e = { want, yyjson_get_str(yyjson_obj_get(root, "time")), event, ln.hash,
				             sum ? sum : "", p, (size_t)(nl - p) };
			rc = sum ? fn(&e, ud) : sw_fail(err, SW_ENOMEM, "out of memory");
			free(sum);
		}
		yyjson_doc_free(ln.doc);
		memcpy(prev, ln.hash, SW_DIGEST_HEX);
		r.records = want++;
		p = nl + 1;
	}
	for (size_t i = 0; !rc && ckpts && i < nck; i++) {
		if (ck[i].removed)
			continue;
		if ((rc = check_ckpt_(logdir, &ck[i], NULL, err)) && err) {
			err->record = ck[i].rec;
			err->offset = ck[i].offset;
		}
		r.checkpoints++;
	}
	if (!rc && head && !r.head_record)
		rc = sw_fail(err, SW_EFORMAT,
		             "no record has the head hash %.64s: the log was cut before it, or rewritten", head);
	uint64_t iters = 0;
	if (!rc && pk && ckpts && !r.ended && run_finished_(logdir, &iters)) {
		rc = sw_fail(err, SW_EFORMAT, "the run finished (a HALT file, or metrics.jsonl holds iteration %llu of "
		             "%llu) but its log lacks its signed end record (run_end or halt): the log was cut",
		             (unsigned long long)iters, (unsigned long long)iters);
		if (err)
			err->record = r.records + 1;
	}
	free(ck);
	if (bytes)
		*bytes = b.len;
	sw_buf_release(&b);
	memcpy(r.head, prev, SW_DIGEST_HEX);
	if (rep)
		*rep = r;
	return rc;
}

int sw_audit_verify(const char *path, const char *head, sw_audit_fn fn, void *ud, sw_audit_report *rep,
                    sw_error *err)
{
	return verify_(path, head, NULL, fn, ud, rep, err, 1, NULL);
}

/* --- keys ----------------------------------------------------------------------------- */

/* A key file: one line of lowercase hex, n bytes. */
static int read_key_(const char *path, unsigned char *key, size_t n, int secret, sw_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sys_(err, errno, path, "cannot open");
	struct stat st;
	char hex[2 * crypto_sign_SECRETKEYBYTES + 2];
	ssize_t k = fstat(fd, &st) ? -1 : read(fd, hex, sizeof hex);
	int e = errno;
	close(fd);
	if (k < 0)
		return sys_(err, e, path, "cannot read");
	if (secret && (st.st_mode & 077))
		return sw_fail(err, SW_EINVAL, "%s: the secret key is readable by others (mode %04o): chmod 600 it",
		               path, (unsigned)(st.st_mode & 07777));
	if ((size_t)k != 2 * n + 1 || hex[2 * n] != '\n' || !is_hex_(hex, 2 * n) ||
	    sodium_hex2bin(key, n, hex, 2 * n, NULL, NULL, NULL))
		return sw_fail(err, SW_EFORMAT, "%s: not an audit %s key (one line of %zu hex digits, as sw-audit "
		               "keygen writes)", path, secret ? "secret" : "public", 2 * n);
	return 0;
}

static int write_key_(const char *path, const unsigned char *key, size_t n, mode_t mode, sw_error *err)
{
	char hex[2 * crypto_sign_SECRETKEYBYTES + 2];
	sodium_bin2hex(hex, sizeof hex, key, n);
	hex[2 * n] = '\n';
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return sys_(err, errno, path, "cannot create");
	int bad = write(fd, hex, 2 * n + 1) != (ssize_t)(2 * n + 1) || fsync(fd);
	int e = errno;
	if (close(fd) || bad) {
		unlink(path);
		return sys_(err, bad ? e : errno, path, "cannot write");
	}
	return 0;
}

int sw_audit_keygen(const char *path, sw_error *err)
{
	unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
	char pub[4200];
	if (!path || (size_t)snprintf(pub, sizeof pub, "%s.pub", path) >= sizeof pub)
		return sw_fail(err, SW_EINVAL, "no key path, or one too long");
	if (sodium_init() < 0)
		return sw_fail(err, SW_EIO, "libsodium cannot start");
	crypto_sign_keypair(pk, sk);
	int rc = write_key_(path, sk, sizeof sk, 0600, err);
	sodium_memzero(sk, sizeof sk);
	if (!rc && (rc = write_key_(pub, pk, sizeof pk, 0644, err)))
		unlink(path);
	return rc;
}

int sw_audit_sign_env(const char *path, sw_error *err)
{
	unsigned char sk[crypto_sign_SECRETKEYBYTES];
	char *abs = path ? realpath(path, NULL) : NULL;
	int rc = !abs ? sys_(err, errno, path ? path : "", "cannot open") : read_key_(abs, sk, sizeof sk, 1, err);
	sodium_memzero(sk, sizeof sk);
	if (!rc && setenv(SW_AUDIT_KEY_ENV, abs, 1))
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	free(abs);
	return rc;
}

int sw_audit_verify_signed(const char *path, const char *head, const char *pubkey, sw_audit_fn fn, void *ud,
                           sw_audit_report *rep, sw_error *err)
{
	unsigned char pk[crypto_sign_PUBLICKEYBYTES];
	if (!pubkey)
		return verify_(path, head, NULL, fn, ud, rep, err, 1, NULL);
	int rc = read_key_(pubkey, pk, sizeof pk, 0, err);
	return rc ? rc : verify_(path, head, pk, fn, ud, rep, err, 1, NULL);
}

/* The last checkpoint record naming want, as the chain is read; a later removal of it forgets it. */
typedef struct last_ckpt_ {
	const char *want;
	char *line;     /* a copy: the entry's line is valid only during the call */
	size_t len;
	uint64_t seq;
	sw_audit_run_facts facts;
} last_ckpt_;

static int last_ckpt_fn_(const sw_audit_entry *e, void *ud)
{
	last_ckpt_ *l = ud;
	l->facts.ended = !strcmp(e->event, "run_end");
	if (!strcmp(e->event, "run_start") && !l->facts.model_digest[0]) {
		yyjson_doc *d = yyjson_read(e->line, e->len, 0);
		yyjson_val *md = yyjson_obj_get(yyjson_doc_get_root(d), "model_digest");
		if (yyjson_is_str(md) && yyjson_get_len(md) == SW_DIGEST_HEX - 1)
			memcpy(l->facts.model_digest, yyjson_get_str(md), SW_DIGEST_HEX);
		yyjson_doc_free(d);
	}
	if (strcmp(e->event, "checkpoint") && strcmp(e->event, "checkpoint_removed"))
		return 0;
	yyjson_doc *d = yyjson_read(e->line, e->len, 0);
	yyjson_val *path = yyjson_obj_get(yyjson_doc_get_root(d), "path");
	int same = yyjson_is_str(path) && yyjson_get_len(path) == strlen(l->want) && !strcmp(yyjson_get_str(path), l->want);
	yyjson_doc_free(d);
	if (!same)
		return 0;
	free(l->line);
	l->line = NULL;
	if (!strcmp(e->event, "checkpoint_removed"))
		return 0;
	if (!(l->line = malloc(e->len)))
		return SW_ENOMEM;
	memcpy(l->line, e->line, e->len);
	l->len = e->len;
	l->seq = e->seq;
	return 0;
}

int sw_audit_check_checkpoint(const char *path, const char *relpath, char digest[SW_DIGEST_HEX],
                              sw_audit_run_facts *facts, sw_error *err)
{
	if (!inside_(relpath))
		return sw_fail(err, SW_EINVAL, "checkpoint '%.200s': not a path inside the run directory",
		               relpath ? relpath : "");
	last_ckpt_ l = { relpath, NULL, 0, 0, { 0, "" } };
	sw_audit_report rep;
	int rc = verify_(path, NULL, NULL, last_ckpt_fn_, &l, &rep, err, 0, NULL);
	if (rc == SW_ENOMEM)
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	if (rc)
		goto out;
	if (!l.line) {
		rc = sw_fail(err, SW_EFORMAT, "checkpoint '%.200s': no record of the audit log names it: not a "
		             "checkpoint this run recorded", relpath);
		goto out;
	}
	char log[4096], logdir[4096];
	if (log_paths_(path, log, logdir)) {
		rc = sys_(err, errno, path, "cannot open");
		goto out;
	}
	ckpt_ c = { l.seq, 0, l.line, l.len, 0 };
	if ((rc = check_ckpt_(logdir, &c, digest, err)) && err)
		err->record = l.seq;
	if (!rc && facts)
		*facts = l.facts;
out:
	free(l.line);
	return rc;
}

/* --- appending --------------------------------------------------------------------- */

struct sw_audit {
	int fd;
	char *path;
	uint64_t seq;
	uint64_t size;              /* bytes of the log we have checked */
	char head[SW_DIGEST_HEX];   /* "" before the first record */
	int signing;                /* sk and pk hold a key: every record we append is signed */
	unsigned char sk[crypto_sign_SECRETKEYBYTES], pk[crypto_sign_PUBLICKEYBYTES];
};

sw_audit *sw_audit_open(const char *path, sw_error *err)
{
	sw_audit *a = calloc(1, sizeof *a);
	if (!a || !(a->path = strdup(path))) {
		free(a);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	struct stat pre;
	int existed = !stat(path, &pre);
	/* a log says what ran, with which arguments: its owner's to read */
	a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (a->fd < 0) {
		sys_(err, errno, path, "cannot open");
		sw_audit_close(a);
		return NULL;
	}
	if (!existed) {
		/* the new name itself must survive a crash, not only what is appended */
		char dir[4096];
		dir_of_(path, dir, sizeof dir);
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		int bad = dfd < 0 || fsync(dfd);
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		if (bad) {
			sys_(err, e, dir, "cannot sync the directory");
			sw_audit_close(a);
			return NULL;
		}
	}
	struct stat st;
	if (fstat(a->fd, &st) || !S_ISREG(st.st_mode)) {
		sw_fail(err, SW_EIO, "%s: not a regular file", path);
		sw_audit_close(a);
		return NULL;
	}
	const char *key = getenv(SW_AUDIT_KEY_ENV);
	if (key && *key) {
		if (sodium_init() < 0 || read_key_(key, a->sk, sizeof a->sk, 1, err)) {
			if (err && !err->code)
				sw_fail(err, SW_EIO, "libsodium cannot start");
			sw_audit_close(a);
			return NULL;
		}
		crypto_sign_ed25519_sk_to_pk(a->pk, a->sk);
		a->signing = 1;
	}
	if (st.st_size > 0) {
		/* the chain only (and, when we sign, every record's signature by our key: a log
		 * someone else wrote or re-chained is not ours to extend); checkpoints are the
		 * verifier's business */
		sw_audit_report rep;
		uint64_t bytes = 0;
		if (flock(a->fd, LOCK_SH)) {
			sys_(err, errno, path, "cannot lock");
			sw_audit_close(a);
			return NULL;
		}
		int rc = verify_(path, NULL, a->signing ? a->pk : NULL, NULL, NULL, &rep, err, 0, &bytes);
		flock(a->fd, LOCK_UN);
		/* an unsigned record after signed ones would leave a log that no public key verifies */
		if (!rc && !a->signing && rep.signed_records)
			rc = sw_fail(err, SW_EINVAL, "its records are signed, and one appended without the key would "
			             "break the log's signatures: give the signing key ($%s; sw-run --sign-key)",
			             SW_AUDIT_KEY_ENV);
		if (rc) {
			sw_audit_close(a);
			return NULL;
		}
		a->seq = rep.records;
		memcpy(a->head, rep.head, SW_DIGEST_HEX);
		a->size = bytes;
	}
	return a;
}

/* Read records that another process appended since we last looked. */
static int catch_up_(sw_audit *a, uint64_t size, sw_error *err)
{
	sw_buf b = { 0 };
	int rc = read_all_(a->path, &b, err);
	if (rc)
		return rc;
	if (b.len < size)
		size = b.len;
	const char *p = (const char *)b.p + a->size, *end = (const char *)b.p + size;
	char prev[SW_DIGEST_HEX];
	memcpy(prev, a->head[0] ? a->head : ZERO_HEX_, SW_DIGEST_HEX);
	while (!rc && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		line_ ln;
		if (!nl)
			rc = sw_fail(err, SW_ETRUNC, "the line has no end: the log was cut");
		else
			rc = check_line_(p, (size_t)(nl - p), a->seq + 1, prev, a->signing ? a->pk : NULL, &ln, err);
		if (rc) {
			if (err) {
				err->record = a->seq + 1;
				err->offset = (uint64_t)(p - (const char *)b.p);
			}
			break;
		}
		yyjson_doc_free(ln.doc);
		memcpy(prev, ln.hash, SW_DIGEST_HEX);
		a->seq++;
		p = nl + 1;
	}
	if (!rc) {
		memcpy(a->head, prev, SW_DIGEST_HEX);
		a->size = size;
	}
	sw_buf_release(&b);
	return rc;
}

int sw_audit_append(sw_audit *a, const sw_audit_rec *r, sw_error *err)
{
	if (!a || !r)
		return sw_fail(err, SW_EINVAL, "no log or no record");
	if (flock(a->fd, LOCK_EX))
		return sys_(err, errno, a->path, "cannot lock");
	int rc = 0;
	struct stat st;
	sw_buf b = { 0 };
	char *fields = NULL;
	if (fstat(a->fd, &st)) {
		rc = sys_(err, errno, a->path, "cannot stat");
		goto out;
	}
	if ((uint64_t)st.st_size != a->size && (rc = catch_up_(a, (uint64_t)st.st_size, err)))
		goto out;
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	char head[400];
	int n = snprintf(head, sizeof head,
	                 "{\"seq\":%llu,\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"event\":\"%s\","
	                 "\"prev\":\"%s\"",
	                 (unsigned long long)(a->seq + 1), tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	                 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, r->event, a->head[0] ? a->head : ZERO_HEX_);
	size_t flen = 0;
	if (!(fields = yyjson_mut_val_write(r->obj, 0, &flen))) {
		rc = sw_fail(err, SW_ENOMEM, "cannot write the record");
		goto out;
	}
	rc = sw_buf_put(&b, head, (size_t)n);
	if (!rc && flen > 2) { /* "{...}" -> ",..." */
		rc = sw_buf_put(&b, ",", 1);
		if (!rc)
			rc = sw_buf_put(&b, fields + 1, flen - 2);
	}
	char hex[SW_DIGEST_HEX];
	if (!rc) {
		sw_digest_mem(b.p, b.len, hex);
		char tail[80];
		int tn = snprintf(tail, sizeof tail, "%s%s\"", TAIL_KEY_, hex);
		rc = sw_buf_put(&b, tail, (size_t)tn);
	}
	if (!rc && a->signing) { /* Ed25519 over everything before ,"sig" */
		unsigned char sig[crypto_sign_BYTES];
		char shex[2 * crypto_sign_BYTES + 1];
		crypto_sign_detached(sig, NULL, b.p, b.len, a->sk);
		sodium_bin2hex(shex, sizeof shex, sig, sizeof sig);
		rc = sw_buf_put(&b, SIG_KEY_, sizeof SIG_KEY_ - 1) || sw_buf_put(&b, shex, sizeof shex - 1) ||
		     sw_buf_put(&b, "\"", 1);
	}
	if (!rc)
		rc = sw_buf_put(&b, "}\n", 2);
	if (rc) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	/* one write (a reader never sees half a line from a live writer); one cut short is
	 * continued, to its end or to the error that stopped it */
	size_t done = 0;
	int e = sw_fd_write_all(a->fd, b.p, b.len, &done);
	if (!e && fsync(a->fd))
		e = errno;
	if (e) {
		/* a record written in part (a full disk) or not made durable is cut off again: the log
		 * ends with its last whole record, as its head says, and the run can go on from it */
		int c = sw_fd_cut_back(a->fd, st.st_size);
		rc = sw_fail(err, SW_EIO, "%s: cannot %s record %llu: %s%s%s", a->path,
		             done == b.len ? "sync" : "append", (unsigned long long)(a->seq + 1), strerror(e),
		             c ? "; nor cut the part written off again: " : "", c ? strerror(c) : "");
		if (err)
			err->sys_errno = e;
		goto out;
	}
	a->seq++;
	a->size = (uint64_t)st.st_size + b.len;
	memcpy(a->head, hex, SW_DIGEST_HEX);
out:
	flock(a->fd, LOCK_UN);
	free(fields);
	sw_buf_release(&b);
	return rc;
}

uint64_t sw_audit_seq(const sw_audit *a)
{
	return a->seq;
}

const char *sw_audit_head(const sw_audit *a)
{
	return a->head;
}

void sw_audit_close(sw_audit *a)
{
	if (!a)
		return;
	if (a->fd >= 0)
		close(a->fd);
	sodium_memzero(a->sk, sizeof a->sk);
	free(a->path);
	free(a);
}
