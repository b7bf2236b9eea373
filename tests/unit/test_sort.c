/*
 * test_sort.c - the external sort of sw/balance.h (sw_sorter): a few
 * hundred records sorted with a memory budget so small that they spill to
 * well over 64 runs (so the runs are merged in two rounds) come out exactly
 * as the in-memory sort gives them, groups together and in order of their
 * totals, ties in input order; a string key; errors that name the field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sw.h"
#include "sw/balance.h"
#include "tap.h"

#define N 400

static char tmpdir_[] = "/tmp/test_sort.XXXXXX";

/* Record i: a group of 1 to 4 records (some records alone), a key with many ties, padding. */
static sw_rec *rec_(int i)
{
	sw_rec *r = sw_rec_new();
	char g[16], id[16];
	int gn = snprintf(g, sizeof g, "g%d", (i * 7) % 97);
	int idn = snprintf(id, sizeof id, "r%03d", i);
	sw_rec_set_str(r, "id", id, (size_t)idn);
	if (i % 5)
		sw_rec_set_str(r, "group", g, (size_t)gn);
	sw_rec_set_f64(r, "score", (double)((i * 31) % 13));
	sw_rec_set_str(r, "name", id + 2, 2); /* a string key with ties */
	sw_rec_set_str(r, "pad", "................................................................", 64);
	return r;
}

/* Sort the N records; out gets the order of their ids (each 4 chars), groups their group places. */
static int sort_(const sw_sort_opts *o, char *out, uint64_t *groups, sw_error *err)
{
	sw_sorter *s = sw_sorter_new(o, err);
	if (!s)
		return -1;
	for (int i = 0; i < N; i++) {
		sw_rec *r = rec_(i);
		int rc = sw_sorter_add(s, r, err);
		sw_rec_free(r);
		if (rc) {
			sw_sorter_free(s);
			return rc;
		}
	}
	int rc = sw_sorter_finish(s, err);
	const uint8_t *p;
	size_t n, k = 0;
	uint64_t g;
	sw_rec *r = sw_rec_new();
	while (!rc && (rc = sw_sorter_next(s, &p, &n, &g, err)) == 1) {
		const char *id;
		size_t idn;
		sw_rec_load(r, p, n);
		if (k < N && sw_rec_get_str(r, "id", &id, &idn) == 0 && idn == 4)
			memcpy(out + 4 * k, id, 4);
		if (k < N)
			groups[k] = g;
		k++;
		rc = 0;
	}
	out[4 * N] = 0;
	sw_rec_free(r);
	sw_sorter_free(s);
	return rc ? rc : k == N ? 0 : -100;
}

/* The group of record i, as this test names it (a record alone is a group of its own). */
static void name_of_(int i, char g[32])
{
	if (i % 5 == 0)
		snprintf(g, 32, "alone%d", i);
	else
		snprintf(g, 32, "g%d", (i * 7) % 97);
}

/* The group of the record with id at out[4j]. */
static void group_of_(const char *out, size_t j, char g[32])
{
	name_of_(atoi(out + 4 * j + 1), g);
}

static void test_spill_equals_memory(void)
{
	static char mem[4 * N + 1], disk[4 * N + 1];
	static uint64_t gm[N], gd[N];
	sw_error err = { 0 };
	int modes[][2] = { { 0, 0 }, { 1, 0 }, { 0, 1 }, { 1, 1 } }; /* reverse, no_group */
	for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
		sw_sort_opts o = { .key = "score", .reverse = modes[m][0], .no_group = modes[m][1], .tmpdir = tmpdir_ };
		int a = sort_(&o, mem, gm, &err);
		o.memory = 1024; /* a record or two a run: more than 64 runs */
		int b = sort_(&o, disk, gd, &err);
		ok(a == 0 && b == 0, "sorted in memory and spilled (reverse %d, no_group %d): %s", modes[m][0], modes[m][1],
		   err.msg);
		ok(!strcmp(mem, disk) && !memcmp(gm, gd, sizeof gm), "spilled runs merge into the in-memory order");
	}
	/* the temporary files are unlinked at once: nothing is left */
	char cmd[128];
	snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", tmpdir_);
	ok(system(cmd) == 0, "no run is left in the temporary directory");
}

static void test_groups_together(void)
{
	static char out[4 * N + 1];
	static uint64_t gp[N];
	sw_error err = { 0 };
	sw_sort_opts o = { .key = "score", .memory = 1024, .tmpdir = tmpdir_ };
	ok(sort_(&o, out, gp, &err) == 0, "sorted by score, grouped (%s)", err.msg);
	/* each group is one contiguous run, and the group places rise by one */
	int together = 1, places = 1;
	double prev_total = -1;
	int totals_rise = 1;
	for (size_t j = 0; j < N; j++) {
		char g[32], h[32];
		group_of_(out, j, g);
		if (j && gp[j] != gp[j - 1] && gp[j] != gp[j - 1] + 1)
			places = 0;
		if (j && gp[j] == gp[j - 1]) {
			group_of_(out, j - 1, h);
			if (strcmp(g, h))
				together = 0;
		}
		/* a group seen again after another one broke in */
		for (size_t i = 0; j && i + 1 < j; i++) {
			group_of_(out, i, h);
			if (!strcmp(g, h) && gp[i] != gp[j])
				together = 0;
		}
		if (!j || gp[j] != gp[j - 1]) {
			/* the group's total: the scores of its members */
			double t = 0;
			for (int i = 0; i < N; i++) {
				char x[32];
				name_of_(i, x);
				if (!strcmp(x, g))
					t += (double)((i * 31) % 13);
			}
			if (t < prev_total)
				totals_rise = 0;
			prev_total = t;
		}
	}
	ok(together, "each group comes out as one contiguous run");
	ok(places, "the group places count up from 0 in the output");
	ok(totals_rise, "groups come in order of their totals");
	/* ties in input order: within a group, the ids rise */
	int stable = 1;
	for (size_t j = 1; j < N; j++)
		if (gp[j] == gp[j - 1] && strncmp(out + 4 * (j - 1), out + 4 * j, 4) > 0)
			stable = 0;
	ok(stable, "within a group, records keep their input order");
}

static void test_string_key_and_errors(void)
{
	static char mem[4 * N + 1], disk[4 * N + 1];
	static uint64_t gm[N], gd[N];
	sw_error err = { 0 };
	sw_sort_opts o = { .key = "name", .no_group = 1, .tmpdir = tmpdir_ };
	int a = sort_(&o, mem, gm, &err);
	o.memory = 2048;
	int b = sort_(&o, disk, gd, &err);
	ok(a == 0 && b == 0 && !strcmp(mem, disk), "a string key: the same order spilled or not");
	int sorted = 1;
	for (size_t j = 1; j < N; j++) {
		int c = strncmp(mem + 4 * (j - 1) + 2, mem + 4 * j + 2, 2);
		if (c > 0 || (c == 0 && strncmp(mem + 4 * (j - 1), mem + 4 * j, 4) > 0))
			sorted = 0;
	}
	ok(sorted, "by the string, ties in input order");

	sw_sort_opts bad = { .key = "nope", .tmpdir = tmpdir_ };
	ok(sort_(&bad, mem, gm, &err) == SW_ENOENT && !strcmp(err.msg, "no field 'nope' to sort by"),
	   "a missing key field is SW_ENOENT naming it (%s)", err.msg);
	sw_sort_opts none = { 0 };
	ok(!sw_sorter_new(&none, &err) && err.code == SW_EINVAL, "neither a key nor a cost model is SW_EINVAL");
	sw_sort_opts nodir = { .key = "score", .memory = 1024, .tmpdir = "/no/such/dir" };
	ok(sort_(&nodir, mem, gm, &err) == SW_EIO && strstr(err.msg, "cannot create a temporary file in '/no/such/dir'"),
	   "a spill that cannot be written is SW_EIO naming the directory (%s)", err.msg);
}

static void test_cost_key(void)
{
	sw_error err = { 0 };
	sw_cost_model *cm = sw_cost_model_new();
	sw_sort_opts o = { .cost = cm, .no_group = 1, .memory = 1024, .tmpdir = tmpdir_ };
	sw_sorter *s = sw_sorter_new(&o, &err);
	const char *texts[] = { "a much longer prompt than the others", "mid-size text", "x" };
	for (int i = 0; i < 3; i++) {
		sw_rec *r = sw_rec_new();
		sw_rec_set_str(r, "prompt", texts[i], strlen(texts[i]));
		ok(sw_sorter_add(s, r, &err) == 0, "record %d priced (%s)", i, err.msg);
		double c;
		ok(sw_rec_get_f64(r, "cost", &c) == 0 && c > 0, "the cost is written into the record (%g)", c);
		sw_rec_free(r);
	}
	ok(sw_sorter_finish(s, &err) == 0, "finished");
	const uint8_t *p;
	size_t n;
	uint64_t g;
	double last = 0;
	int rising = 1, count = 0;
	sw_rec *r = sw_rec_new();
	while (sw_sorter_next(s, &p, &n, &g, &err) == 1) {
		double c = 0;
		sw_rec_load(r, p, n);
		sw_rec_get_f64(r, "cost", &c);
		rising &= c >= last;
		last = c;
		count++;
	}
	ok(count == 3 && rising, "cheapest first, each record once");
	sw_rec_free(r);
	sw_sorter_free(s);
	sw_cost_model_free(cm);
}

int main(void)
{
	if (!mkdtemp(tmpdir_)) {
		printf("# cannot make a temporary directory\n");
		return 1;
	}
	test_spill_equals_memory();
	test_groups_together();
	test_string_key_and_errors();
	test_cost_key();
	sw_sorter_free(NULL);
	rmdir(tmpdir_);
	return tap_done();
}
