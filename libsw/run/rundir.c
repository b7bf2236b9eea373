/*
 * rundir.c - the run directory: making one, the HALT file a monitor
 * leaves, and the small file work the run room shares (paths, whole-file
 * copies and writes through the atomic file, removing a temporary tree).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "run/run_internal.h"

int sw_run_path(char *buf, size_t size, sw_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size)
		return sw_fail(err, SW_ERANGE, "a path in the run is too long: '%.80s...'", buf);
	return 0;
}

const char *sw_run_size(double bytes, int digits, char b[32])
{
	int gb = bytes >= 1e9;
	snprintf(b, 32, "%.*f %s", gb ? digits + 1 : digits, gb ? bytes / 1e9 : bytes / 1e6, gb ? "GB" : "MB");
	return b;
}

double sw_run_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int sw_run_put_file(const char *path, const void *data, size_t n, sw_error *err)
{
	sw_afile f;
	int rc = sw_afile_open(&f, path, err);
	if (!rc && ((rc = sw_afile_write(&f, data, n, err)) || (rc = sw_afile_commit(&f, err))))
		sw_afile_abort(&f);
	return rc;
}

int sw_run_copy_file(const char *from, const char *to, sw_error *err)
{
	FILE *in = fopen(from, "rb");
	if (!in) {
		int e = errno;
		sw_fail(err, SW_EIO, "cannot open '%s': %s", from, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	sw_afile f;
	int rc = sw_afile_open(&f, to, err);
	char buf[1 << 16];
	size_t got;
	while (!rc && (got = fread(buf, 1, sizeof buf, in)))
		rc = sw_afile_write(&f, buf, got, err);
	if (!rc && ferror(in)) {
		int e = errno;
		rc = sw_fail(err, SW_EIO, "cannot read '%s': %s", from, strerror(e));
		if (err)
			err->sys_errno = e;
	}
	if (!rc)
		rc = sw_afile_commit(&f, err);
	if (rc)
		sw_afile_abort(&f);
	fclose(in);
	return rc;
}

void sw_run_rmtree(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			char p[SW_RUN_PATH_MAX];
			struct stat st;
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
			    sw_run_path(p, sizeof p, NULL, "%s/%s", path, e->d_name))
				continue;
			if (!lstat(p, &st) && S_ISDIR(st.st_mode))
				sw_run_rmtree(p);
			else
				unlink(p);
		}
		closedir(d);
	}
	rmdir(path);
}

static int mkdir_(const char *path, sw_error *err)
{
	if (mkdir(path, 0755) && errno != EEXIST) {
		int e = errno;
		sw_fail(err, SW_EIO, "cannot create '%s': %s", path, strerror(e));
		if (err)
			err->sys_errno = e;
		return SW_EIO;
	}
	return 0;
}

/* The directories above path, as mkdir -p makes them (runs/ for -o runs/x). */
static int mkdir_parents_(const char *path, sw_error *err)
{
	char p[SW_RUN_PATH_MAX];
	int rc = sw_run_path(p, sizeof p, err, "%s", path);
	for (char *c = p + 1; !rc && (c = strchr(c, '/')); c++) {
		*c = 0;
		rc = mkdir_(p, err);
		*c = '/';
	}
	return rc;
}

/* Whether dir holds a run that completed no iteration: its config, and no checkpoint past the start. */
static int unstarted_(const char *dir)
{
	char p[SW_RUN_PATH_MAX], name[256] = "";
	if (sw_run_path(p, sizeof p, NULL, "%s/config", dir) || access(p, F_OK))
		return 0;
	if (sw_run_path(p, sizeof p, NULL, "%s/audit.log", dir) || access(p, F_OK))
		return 0;
	sw_error e = { 0 };
	/* no state yet, or the start's; a state that names something else is no run to start over */
	return sw_checkpoint_latest(dir, name, sizeof name, &e) ? e.code == SW_EIO : !strcmp(name, "ckpt/iter-0000");
}

int sw_rundir_lock(const char *dir, int create, int *locked, sw_error *err)
{
	*locked = 0;
	int rc = create ? mkdir_parents_(dir, err) : 0;
	if ((rc = rc ? rc : create ? mkdir_(dir, err) : 0))
		return rc;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return sw_fail(err, SW_EIO, "cannot open '%s': %s", dir, strerror(errno));
	if (!flock(fd, LOCK_EX | LOCK_NB)) {
		*locked = 1;
		return 0; /* fd stays open: the lock is ours until we end */
	}
	int e = errno;
	close(fd);
	rc = e == ENOSYS || e == ENOLCK || e == EOPNOTSUPP || e == EINVAL ? 0 : SW_EIO;
	if (e == EWOULDBLOCK)
		sw_fail(err, SW_EIO, "'%s' is in use by another sw-run (one at a time in a run directory)", dir);
	else if (!rc)
		sw_fail(err, 0, "cannot lock '%s' (%s): nothing keeps another sw-run out of it", dir, strerror(e));
	else
		sw_fail(err, SW_EIO, "cannot lock '%s': %s", dir, strerror(e));
	if (err)
		err->sys_errno = e;
	return rc;
}

int sw_rundir_create(const char *dir, sw_error *err)
{
	struct stat st;
	if (!stat(dir, &st)) {
		DIR *d = opendir(dir);
		struct dirent *e;
		int empty = 1, again = unstarted_(dir);
		while (d && (e = readdir(d))) {
			char p[SW_RUN_PATH_MAX];
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			/* a run that never completed an iteration is started again in its place */
			struct stat es;
			if (again && !sw_run_path(p, sizeof p, NULL, "%s/%s", dir, e->d_name) && !lstat(p, &es))
				S_ISDIR(es.st_mode) ? sw_run_rmtree(p) : (void)unlink(p);
			else
				empty = 0;
		}
		if (d)
			closedir(d);
		if (!empty)
			return sw_fail(err, SW_EINVAL, "'%s' exists and is not empty (continue a run there with --resume %s)",
			               dir, dir);
	}
	int rc = mkdir_parents_(dir, err);
	rc = rc ? rc : mkdir_(dir, err);
	static const char *const sub[] = { "samples", "ckpt", "tmp" };
	for (int i = 0; !rc && i < 3; i++) {
		char p[SW_RUN_PATH_MAX];
		if (!(rc = sw_run_path(p, sizeof p, err, "%s/%s", dir, sub[i])))
			rc = mkdir_(p, err);
	}
	return rc;
}

int sw_rundir_check_resume(const char *dir, sw_error *err)
{
	char p[SW_RUN_PATH_MAX], name[256];
	struct stat st;
	int rc = sw_run_path(p, sizeof p, err, "%s/config", dir);
	if (rc)
		return rc;
	if (stat(dir, &st))
		return sw_fail(err, SW_EIO, "cannot resume '%s': %s", dir, strerror(errno));
	if (stat(p, &st))
		return sw_fail(err, SW_EIO, "cannot resume '%s': it is no run directory (it has no config)", dir);
	sw_error e = { 0 };
	if (sw_checkpoint_latest(dir, name, sizeof name, &e) && e.code != SW_EIO)
		return sw_fail(err, e.code, "%s", e.msg);
	if (e.code)
		return sw_fail(err, SW_EINVAL, "cannot resume '%s': the run never reached its first checkpoint; "
		               "start it again with sw-run -c %s/config -o %s", dir, dir, dir);
	return 0;
}

int sw_rundir_halt(const char *dir, uint64_t iter, const char *reason, sw_error *err)
{
	char p[SW_RUN_PATH_MAX], *text;
	int rc = sw_run_path(p, sizeof p, err, "%s/HALT", dir);
	if (rc)
		return rc;
	if (asprintf(&text, "iteration %llu: %s\n", (unsigned long long)iter, reason) < 0)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	sw_error e = { 0 };
	if ((rc = sw_run_put_file(p, text, strlen(text), &e))) {
		sw_fail(err, rc, "cannot write '%s': %s", p, e.sys_errno ? strerror(e.sys_errno) : e.msg);
		if (err)
			err->sys_errno = e.sys_errno;
	}
	free(text);
	return rc;
}

int sw_rundir_resume(const char *dir, uint64_t iter, sw_error *err)
{
	char tmp[SW_RUN_PATH_MAX], metrics[SW_RUN_PATH_MAX], scratch[SW_RUN_PATH_MAX], halt[SW_RUN_PATH_MAX];
	int rc = sw_run_path(tmp, sizeof tmp, err, "%s/tmp", dir);
	rc = rc ? rc : sw_run_path(metrics, sizeof metrics, err, "%s/metrics.jsonl", dir);
	rc = rc ? rc : sw_run_path(scratch, sizeof scratch, err, "%s/tmp/metrics.jsonl", dir);
	rc = rc ? rc : sw_run_path(halt, sizeof halt, err, "%s/HALT", dir);
	rc = rc ? rc : mkdir_(tmp, err);
	rc = rc ? rc : sw_metrics_trim(metrics, scratch, iter, err);
	if (!rc)
		unlink(halt);
	return rc;
}

int sw_run_scratch_reset(const char *dir, char *tap, size_t n, sw_error *err)
{
	static const char *const scratch[] = { "tmp/balance-stats.json", "tmp/train-metrics.jsonl", "tmp/rank-times.jsonl" };
	char p[SW_RUN_PATH_MAX];
	int rc = sw_run_path(tap, n, err, "%s/tmp/verified.msgpack", dir);
	for (size_t i = 0; !rc && i < sizeof scratch / sizeof *scratch; i++)
		if (!(rc = sw_run_path(p, sizeof p, err, "%s/%s", dir, scratch[i])))
			unlink(p);
	if (!rc)
		unlink(tap);
	if (!rc && setenv("SW_TAP", tap, 1))
		rc = sw_fail(err, SW_ENOMEM, "cannot set SW_TAP: %s", strerror(errno));
	return rc;
}
