/*
 * digests.c - the digests of files as libsw wrote them (sw/save.h): a
 * small table of paths under one directory, their sizes and BLAKE2b-256.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "sw/save.h"

typedef struct entry_ {
	char *rel;
	uint64_t size;
	unsigned char h[SW_DIGEST_LEN];
} entry_;

struct sw_digests {
	pthread_mutex_t mu; /* savers on several threads note into one */
	char *dir;
	entry_ *e;
	size_t n, cap;
};

sw_digests *sw_digests_new(const char *dir)
{
	sw_digests *d = calloc(1, sizeof *d);
	if (!d || !(d->dir = strdup(dir))) {
		free(d);
		return NULL;
	}
	pthread_mutex_init(&d->mu, NULL);
	size_t n = strlen(d->dir);
	while (n > 1 && d->dir[n - 1] == '/')
		d->dir[--n] = 0;
	return d;
}

void sw_digests_free(sw_digests *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++)
		free(d->e[i].rel);
	free(d->e);
	free(d->dir);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

const char *sw_digests_dir(const sw_digests *d)
{
	return d->dir;
}

static entry_ *find_(const sw_digests *d, const char *rel)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->e[i].rel, rel))
			return &d->e[i];
	return NULL;
}

int sw_digests_note(sw_digests *d, const char *path, uint64_t size, const unsigned char h[SW_DIGEST_LEN],
                    sw_error *err)
{
	size_t n = strlen(d->dir);
	if (strncmp(path, d->dir, n) || path[n] != '/' || !path[n + 1])
		return sw_fail(err, SW_EINVAL, "'%.200s' is not under '%.200s'", path, d->dir);
	const char *rel = path + n + 1;
	int rc = 0;
	pthread_mutex_lock(&d->mu);
	entry_ *e = find_(d, rel);
	if (!e && d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 8;
		entry_ *v = realloc(d->e, cap * sizeof *v);
		if (v)
			d->e = v, d->cap = cap;
	}
	if (!e && d->n < d->cap && (d->e[d->n].rel = strdup(rel)))
		e = &d->e[d->n++];
	if (e) {
		e->size = size;
		memcpy(e->h, h, SW_DIGEST_LEN);
	} else {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int sw_digests_get(const sw_digests *d, const char *rel, uint64_t *size, unsigned char h[SW_DIGEST_LEN])
{
	pthread_mutex_lock((pthread_mutex_t *)&d->mu);
	const entry_ *e = find_(d, rel);
	if (e) {
		*size = e->size;
		memcpy(h, e->h, SW_DIGEST_LEN);
	}
	pthread_mutex_unlock((pthread_mutex_t *)&d->mu);
	return e ? 0 : SW_ENOENT;
}
