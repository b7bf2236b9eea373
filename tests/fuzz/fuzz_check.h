/*
 * fuzz_check.h - CHECK(cond, fmt, ...) for the fuzz targets: a property
 * that fails prints what and where, and abort()s (libFuzzer and
 * tests/fuzz/replay.c both see the SIGABRT).  Define FUZZ_NAME first.
 */
#ifndef SW_FUZZ_CHECK_H
#define SW_FUZZ_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, FUZZ_NAME ": %s:%d: check failed: %s: ",      \
			        __FILE__, __LINE__, #cond);                           \
			fprintf(stderr, __VA_ARGS__);                                 \
			fputc('\n', stderr);                                          \
			abort();                                                      \
		}                                                                     \
	} while (0)
#endif
