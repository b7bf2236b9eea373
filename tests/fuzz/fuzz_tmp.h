/*
 * fuzz_tmp.h - a scratch directory for a fuzz target whose decoder reads
 * files: made once (mkdtemp, mode 0700, under $TMPDIR or /tmp), and removed
 * with the files in it when the process exits, so that `make test`'s
 * replays leave nothing behind.  The directory holds files only.  Define
 * FUZZ_NAME and include fuzz_check.h first.
 */
#ifndef SW_FUZZ_TMP_H
#define SW_FUZZ_TMP_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_tmp_[96];

static void fuzz_tmp_gone_(void)
{
	DIR *d = opendir(fuzz_tmp_);
	struct dirent *e;
	char p[sizeof fuzz_tmp_ + 256];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", fuzz_tmp_, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(fuzz_tmp_);
}

/* The directory's path (made on the first call). */
static const char *fuzz_tmp(void)
{
	if (!fuzz_tmp_[0]) {
		const char *tmp = getenv("TMPDIR");
		snprintf(fuzz_tmp_, sizeof fuzz_tmp_, "%.60s/" FUZZ_NAME ".XXXXXX",
		         tmp && *tmp && strlen(tmp) <= 60 ? tmp : "/tmp");
		CHECK(mkdtemp(fuzz_tmp_) != NULL, "cannot make a directory in %s", fuzz_tmp_);
		atexit(fuzz_tmp_gone_);
	}
	return fuzz_tmp_;
}
#endif
