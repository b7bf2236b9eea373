/*
 * fuzz_pool.c - libFuzzer target for the task pool's reader (libsw/balance/
 * pool.c, behind sw-pool and sw-run): the pool file, a stream of prompts
 * (msgpack or JSON lines) each with its `pool` map of statistics.
 *
 * The input is the pool file.  What must hold:
 *
 *  - a refused pool gets a negative code and a message;
 *  - an accepted one hands out every prompt with statistics in range
 *    (pass rate in [0, 1], finite mean, variance >= 0, a priority that is
 *    not NaN), and sw_pool_take gives distinct indices, no more than asked;
 *  - written back (sw_pool_commit) and read again, it is the same pool:
 *    the same count, round, ids and statistics, prompt by prompt.
 *
 * A property that fails calls abort().
 *
 *   make fuzz                        (builds into build-fuzz/)
 *   make test                        (replays tests/fuzz/seeds/fuzz_pool/)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/error.h"
#include "sw/pool.h"
#include "sw/record.h"

#define FUZZ_NAME "fuzz_pool"
#include "fuzz_check.h"
#include "fuzz_tmp.h"

#define MAXN_ 4096

static int same_stats_(const sw_pool_stats *a, const sw_pool_stats *b)
{
	return a->added == b->added && a->seen == b->seen && a->samples == b->samples &&
	       a->last_seen == b->last_seen && a->streak == b->streak && a->pass_rate == b->pass_rate &&
	       a->reward_mean == b->reward_mean && a->reward_var == b->reward_var;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[320], lock[330];
	snprintf(path, sizeof path, "%s/pool", fuzz_tmp());
	snprintf(lock, sizeof lock, "%s.lock", path);
	tmp_put(path, data, size);
	sw_error err = { 0 };
	sw_pool *p = sw_pool_open(path, SW_POOL_UPDATE, &err);
	if (!p) {
		CHECK(err.code < 0 && err.msg[0], "refused with code %d and message '%s'", err.code, err.msg);
		unlink(lock);
		return 0;
	}
	size_t n = sw_pool_count(p);
	uint64_t round = sw_pool_round(p);
	static sw_pool_stats st[MAXN_];
	static char ids[MAXN_][64];
	sw_rec *rec = sw_rec_new();
	CHECK(rec != NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		sw_pool_stats s;
		CHECK(sw_pool_get(p, i, rec, &s) == 0, "prompt %zu of %zu not handed out", i, n);
		CHECK(s.pass_rate >= 0 && s.pass_rate <= 1 && isfinite(s.reward_mean) && s.reward_var >= 0 &&
		      isfinite(s.reward_var), "prompt %zu: pass rate %g, mean %g, variance %g", i, s.pass_rate,
		      s.reward_mean, s.reward_var);
		CHECK(!isnan(sw_pool_priority(&s, round)), "prompt %zu: a NaN priority", i);
		CHECK(s.last_seen <= round, "prompt %zu seen in round %llu, after the pool's %llu", i,
		      (unsigned long long)s.last_seen, (unsigned long long)round);
		const char *id;
		size_t idn;
		CHECK(sw_rec_get_str(rec, "id", &id, &idn) == 0, "prompt %zu has no id", i);
		if (i < MAXN_) {
			st[i] = s;
			snprintf(ids[i], sizeof ids[i], "%.*s", (int)(idn < 63 ? idn : 63), id);
		}
	}
	size_t want = n / 2 + 1, idx[MAXN_ + 1];
	if (want <= MAXN_) {
		size_t got = sw_pool_take(p, want, idx);
		CHECK(got <= want && got <= n && (n == 0 || got == (want < n ? want : n)), "took %zu of %zu asked, %zu there",
		      got, want, n);
		for (size_t i = 0; i < got; i++) {
			CHECK(idx[i] < n, "index %zu past %zu", idx[i], n);
			for (size_t j = 0; j < i; j++)
				CHECK(idx[i] != idx[j], "index %zu handed out twice", idx[i]);
		}
	}
	memset(&err, 0, sizeof err);
	CHECK(sw_pool_commit(p, &err) == 0, "an accepted pool is not written back: %s", err.msg);
	sw_pool_free(p);
	memset(&err, 0, sizeof err);
	p = sw_pool_open(path, SW_POOL_READ, &err);
	CHECK(p != NULL, "what was written does not read back: %s", err.msg);
	CHECK(sw_pool_count(p) == n && sw_pool_round(p) == round, "read back: %zu prompts in round %llu, not %zu in %llu",
	      sw_pool_count(p), (unsigned long long)sw_pool_round(p), n, (unsigned long long)round);
	for (size_t i = 0; i < n && i < MAXN_; i++) {
		sw_pool_stats s;
		const char *id;
		size_t idn;
		CHECK(sw_pool_get(p, i, rec, &s) == 0 && sw_rec_get_str(rec, "id", &id, &idn) == 0, "prompt %zu", i);
		CHECK(same_stats_(&s, &st[i]), "prompt %zu: its statistics changed on the way back", i);
		CHECK(!strncmp(id, ids[i], strlen(ids[i])), "prompt %zu: id changed", i);
	}
	sw_pool_free(p);
	sw_rec_free(rec);
	unlink(lock);
	return 0;
}
