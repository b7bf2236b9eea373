/*
 * rec.h - a record from one line of JSON, for the unit tests that build
 * their samples as text (the caller frees it with sw_rec_free).
 */
#ifndef SW_TEST_REC_H
#define SW_TEST_REC_H
#include <stdio.h>
#include <string.h>
#include "sw/sw.h"

static inline sw_rec *json_rec(const char *json)
{
	sw_error e = { 0 };
	sw_reader *r = sw_reader_memopen(json, strlen(json), "test", &e);
	sw_rec *rec = sw_rec_new();
	if (!r || sw_reader_next(r, rec) != 1)
		printf("# bad test JSON: %s\n", json);
	sw_rec_own(rec);
	sw_reader_free(r);
	return rec;
}
#endif
