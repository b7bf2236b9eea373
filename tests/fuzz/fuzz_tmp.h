/*
 * fuzz_tmp.h - a scratch directory for a fuzz target whose decoder reads
 * files: tests/unit/tmpfiles.h's (tmp_put, tmp_get write and read whole
 * files in it), made on the first call and removed at exit, so that `make
 * test`'s replays leave nothing behind.  Define FUZZ_NAME and include
 * fuzz_check.h first.
 */
#ifndef SW_FUZZ_TMP_H
#define SW_FUZZ_TMP_H
#include "../unit/tmpfiles.h"

/* The directory's path. */
static const char *fuzz_tmp(void)
{
	if (!tmp_dir_[0]) {
		CHECK(tmp_open(FUZZ_NAME) == 0, "cannot make a scratch directory: %s", tmp_dir_);
		atexit(tmp_close);
	}
	return tmp_dir_;
}
#endif
