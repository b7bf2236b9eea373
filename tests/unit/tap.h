/*
 * tap.h - the smallest TAP producer: each check prints "ok N - what" or
 * "not ok N - what" with the file and line; tap_done() prints the plan and
 * returns the exit status.  tests/run counts the lines.
 */
#ifndef SW_TAP_H
#define SW_TAP_H
#include <stdio.h>
#include <string.h>

static int tap_n_, tap_fail_;

#define ok(cond, ...)                                                        \
	do {                                                                 \
		int c_ = !!(cond);                                           \
		printf("%s %d - ", c_ ? "ok" : "not ok", ++tap_n_);          \
		printf(__VA_ARGS__);                                         \
		printf("\n");                                                \
		if (!c_) {                                                   \
			tap_fail_++;                                         \
			printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		}                                                            \
	} while (0)

#define is_int(a, b, ...)                                                    \
	do {                                                                 \
		long long a_ = (long long)(a), b_ = (long long)(b);          \
		ok(a_ == b_, __VA_ARGS__);                                   \
		if (a_ != b_)                                                \
			printf("#   got %lld, want %lld\n", a_, b_);         \
	} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n_);
	return tap_fail_ != 0;
}
#endif
