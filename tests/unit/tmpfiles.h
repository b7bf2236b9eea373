/*
 * tmpfiles.h - a scratch directory for a unit test and whole files in it:
 * made under $TMPDIR, written and read back whole, removed at the end.
 * Include it after defining _DEFAULT_SOURCE (for mkdtemp).
 */
#ifndef SW_TMPFILES_H
#define SW_TMPFILES_H
#include <stdio.h>
#include <stdlib.h>

static char tmp_dir_[256];

/* Make the scratch directory (sw-test-NAME.XXXXXX); 0 when it is there. */
static inline int tmp_open(const char *name)
{
	snprintf(tmp_dir_, sizeof tmp_dir_, "%s/sw-test-%s.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
	         name);
	return mkdtemp(tmp_dir_) ? 0 : -1;
}

static inline void tmp_close(void)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir_);
	if (system(cmd))
		printf("# cannot remove %s\n", tmp_dir_);
}

/* Write n bytes to path, or abort: a test that cannot set up has nothing to say. */
static inline void tmp_put(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f))
		abort();
}

/* A file's bytes, NUL-terminated, in a buffer of the caller's ("" when it cannot be read); its length in *n. */
static inline char *tmp_get(const char *path, char *buf, size_t cap, size_t *n)
{
	FILE *f = fopen(path, "rb");
	size_t got = f ? fread(buf, 1, cap - 1, f) : 0;
	buf[got] = 0;
	if (f)
		fclose(f);
	if (n)
		*n = got;
	return buf;
}
#endif
