/*
 * test_pool.c - the task pool of sw/pool.h: the priority rule case by case,
 * statistics against a hand computation, the take order, persistence
 * across open/commit, bad records, and concurrent writers (forked
 * processes) losing no update thanks to the lock.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "sw/sw.h"
#include "sw/pool.h"
#include "tap.h"

static char dir_[] = "/tmp/sw-test-pool.XXXXXX";
static char path_[300];

static sw_rec *rec_(const char *json)
{
	sw_error e = { 0 };
	sw_reader *r = sw_reader_memopen(json, strlen(json), "test", &e);
	sw_rec *rec = sw_rec_new();
	if (!r || sw_reader_next(r, rec) != 1 || sw_rec_own(rec)) {
		printf("# bad test JSON: %s\n", json);
		exit(1);
	}
	sw_reader_free(r);
	return rec;
}

static int add_(sw_pool *p, const char *json, sw_error *e)
{
	sw_rec *r = rec_(json);
	int rc = sw_pool_add(p, r, e);
	sw_rec_free(r);
	return rc;
}

static int obs_(sw_pool *p, const char *json, sw_error *e)
{
	sw_rec *r = rec_(json);
	int rc = sw_pool_observe(p, r, 1.0, e);
	sw_rec_free(r);
	return rc;
}

static void test_priority(void)
{
	sw_pool_stats half = { .seen = 1, .pass_rate = 0.5, .reward_var = 0.25, .last_seen = 3 };
	sw_pool_stats solved = { .seen = 1, .pass_rate = 1, .reward_var = 0, .last_seen = 3, .streak = 1 };
	sw_pool_stats hard = { .seen = 1, .pass_rate = 0, .reward_var = 0, .last_seen = 3 };
	sw_pool_stats noisy = { .seen = 1, .pass_rate = 1, .reward_var = 0.04, .last_seen = 3, .streak = 1 };
	ok(sw_pool_priority(&half, 3) == 1, "pass rate 0.5: full signal, 1");
	ok(fabs(sw_pool_priority(&noisy, 3) - 0.4) < 1e-12, "all passed but rewards vary (sd 0.2): 0.4");
	ok(sw_pool_priority(&hard, 3) == 0.1, "never passed: the floor, 0.1");
	ok(sw_pool_priority(&solved, 3) == 0.05, "solved once: the floor halves, 0.05");
	solved.streak = 4;
	ok(sw_pool_priority(&solved, 3) == 0.1 / 16, "solved 4 times in a row: 0.1 / 16");
	ok(sw_pool_priority(&hard, 13) == 0.2, "10 rounds unseen doubles the priority");
	ok(sw_pool_priority(&hard, 103) > sw_pool_priority(&half, 3), "100 rounds on, a hard prompt comes back before a fresh good one");
	sw_pool_stats q = { .seen = 1, .pass_rate = 0.25, .reward_var = 0, .last_seen = 1 };
	ok(sw_pool_priority(&q, 1) == 0.75, "4 p (1 - p) at p = 0.25");
}

static void test_flow(void)
{
	sw_error e = { 0 };
	sw_pool *p = sw_pool_open(path_, SW_POOL_CREATE, &e);
	ok(p && sw_pool_count(p) == 0, "a missing pool opens empty to add to (%s)", e.msg);
	ok(add_(p, "{\"id\":\"a\",\"prompt\":\"x\"}", &e) == 1, "add a");
	ok(add_(p, "{\"id\":\"b\",\"prompt\":\"y\",\"pool\":{\"seen\":99}}", &e) == 1, "add b (its own pool map is ignored)");
	ok(add_(p, "{\"id\":\"c\"}", &e) == 1, "add c");
	ok(add_(p, "{\"id\":\"a\",\"prompt\":\"x\"}", &e) == 0, "a again: not added");
	ok(add_(p, "{\"id\":\"b\",\"prompt\":\"y\",\"pool\":{\"seen\":3}}", &e) == 0,
	   "b again, another pool map: the same prompt, not added");
	ok(add_(p, "{\"prompt\":\"y\",\"id\":\"b\"}", &e) == 0, "b again, its fields in another order: not added");
	ok(add_(p, "{\"id\":\"b\",\"prompt\":\"y\",\"label\":1}", &e) == SW_EFORMAT, "b with a field more: another prompt");
	ok(add_(p, "{\"id\":\"b\"}", &e) == SW_EFORMAT, "b with a field less: another prompt");
	ok(add_(p, "{\"id\":\"a\",\"prompt\":\"other\"}", &e) == SW_EFORMAT &&
	   strstr(e.msg, "id 'a' is the pool's already, for another prompt"),
	   "another prompt with a's id: SW_EFORMAT (%s)", e.msg);
	ok(sw_pool_count(p) == 3, "nothing added for it");
	ok(add_(p, "{\"prompt\":\"no id\"}", &e) < 0 && strstr(e.msg, "no 'id' field"), "no id: %s", e.msg);
	ok(add_(p, "{\"id\":5}", &e) < 0 && strstr(e.msg, "field 'id' is not a str"), "id not a str: %s", e.msg);
	ok(sw_pool_commit(p, &e) == 0, "commit");
	sw_pool_free(p);

	/* a pool that is there without its lock (copied alone) gets one */
	char lk[320];
	snprintf(lk, sizeof lk, "%s.lock", path_);
	ok(unlink(lk) == 0, "the lock removed");
	p = sw_pool_open(path_, SW_POOL_UPDATE, &e);
	ok(p && sw_pool_count(p) == 3, "reopened to update: 3 prompts");
	ok(access(lk, F_OK) == 0, "its lock made again");
	sw_pool_stats st;
	sw_rec *r = sw_rec_new();
	sw_pool_get(p, 1, r, &st);
	ok(st.seen == 0 && st.added == 1, "b starts unseen, added second");
	const char *s;
	size_t n;
	ok(sw_rec_get_str(r, "prompt", &s, &n) == 0 && n == 1 && *s == 'y', "b keeps its fields");

	/* a: 1, 0, 0.5 -> pass 1/3, mean 0.5, var 1/6; c: 1, 1 -> solved; b unseen */
	ok(obs_(p, "{\"group\":\"a\",\"reward\":1.0}", &e) == 1, "observe a 1");
	ok(obs_(p, "{\"group\":\"a\",\"reward\":0}", &e) == 1, "observe a 0");
	ok(obs_(p, "{\"group\":\"a\",\"reward\":0.5}", &e) == 1, "observe a 0.5");
	ok(obs_(p, "{\"group\":\"a\",\"reward\":0.5,\"verifier_error\":\"boom\"}", &e) == 0, "verifier_error: skipped");
	ok(obs_(p, "{\"group\":\"c\",\"reward\":1}", &e) == 1 && obs_(p, "{\"group\":\"c\",\"reward\":1}", &e) == 1,
	   "observe c 1, 1");
	ok(obs_(p, "{\"group\":\"zz\",\"reward\":1}", &e) == SW_ENOENT && strstr(e.msg, "prompt 'zz' is not in the pool"),
	   "unknown prompt: %s", e.msg);
	ok(obs_(p, "{\"group\":\"a\"}", &e) < 0 && strstr(e.msg, "no 'reward' field"), "no reward: %s", e.msg);
	ok(obs_(p, "{\"group\":\"a\",\"reward\":\"good\"}", &e) < 0 && strstr(e.msg, "not a number"), "reward a str: %s",
	   e.msg);
	ok(obs_(p, "{\"group\":\"a\",\"reward\":{\"$f64\":\"nan\"}}", &e) < 0 && strstr(e.msg, "is nan"), "NaN reward: %s",
	   e.msg);
	ok(obs_(p, "{\"id\":\"a/0\",\"reward\":1}", &e) < 0 && strstr(e.msg, "no 'group' field"), "no group: %s", e.msg);
	is_int(sw_pool_update(p), 2, "one round updates a and c");
	is_int(sw_pool_round(p), 1, "round 1");
	sw_pool_get(p, 0, r, &st);
	ok(st.seen == 1 && st.samples == 3 && fabs(st.pass_rate - 1.0 / 3) < 1e-12 && fabs(st.reward_mean - 0.5) < 1e-12 &&
	           fabs(st.reward_var - 1.0 / 6) < 1e-12 && st.last_seen == 1 && st.streak == 0,
	   "a: seen 1, 3 samples, pass 1/3, mean 0.5, var 1/6");
	sw_pool_get(p, 2, r, &st);
	ok(st.pass_rate == 1 && st.streak == 1 && st.reward_var == 0, "c: solved, streak 1");

	/* the order: b (unseen), a (signal 8/9), c (floor 0.05) */
	size_t idx[3];
	ok(sw_pool_take(p, 3, idx) == 3 && idx[0] == 1 && idx[1] == 0 && idx[2] == 2, "take: unseen b, then a, then c");
	ok(sw_pool_take(p, 1, idx) == 1 && idx[0] == 1, "take 1: b");
	ok(sw_pool_commit(p, &e) == 0, "commit the round");
	sw_pool_free(p);

	/* a second round: c solved again, a only seen then */
	p = sw_pool_open(path_, SW_POOL_CREATE, &e);
	obs_(p, "{\"group\":\"c\",\"reward\":1}", &e);
	obs_(p, "{\"group\":\"b\",\"reward\":1}", &e);
	sw_pool_update(p);
	sw_pool_get(p, 2, r, &st);
	ok(st.streak == 2 && st.seen == 2 && st.samples == 3 && st.last_seen == 2, "c: streak 2, seen twice");
	sw_pool_get(p, 0, r, &st);
	ok(st.last_seen == 1 && sw_pool_round(p) == 2, "a was not seen in round 2");
	sw_val v;
	ok(sw_rec_get(r, "pool", &v) == 0 && v.type == SW_T_MAP, "records come with their pool map");
	sw_pool_free(p); /* not committed: dropped */
	p = sw_pool_open(path_, SW_POOL_READ, &e);
	sw_pool_get(p, 2, r, &st);
	ok(st.streak == 1 && sw_pool_round(p) == 1, "an uncommitted round is not in the file");
	ok(sw_pool_commit(p, &e) == SW_EINVAL, "a pool opened for reading cannot be committed");
	sw_pool_free(p);
	sw_pool_free(NULL);
	sw_rec_free(r);
}

static void test_bad_files(void)
{
	sw_error e = { 0 };
	char p2[320];
	snprintf(p2, sizeof p2, "%s/missing", dir_);
	ok(!sw_pool_open(p2, SW_POOL_READ, &e) && e.code == SW_EIO && e.sys_errno == ENOENT,
	   "a missing pool cannot be read: %s", e.msg);
	ok(!sw_pool_open(p2, SW_POOL_UPDATE, &e) && e.code == SW_EIO && e.sys_errno == ENOENT &&
	   strstr(e.msg, "cannot open pool"), "a missing pool cannot be updated: %s", e.msg);
	char lk[340];
	snprintf(lk, sizeof lk, "%s.lock", p2);
	ok(access(p2, F_OK) && errno == ENOENT && access(lk, F_OK) && errno == ENOENT,
	   "neither made the pool nor its lock");
	ok(!sw_pool_open(p2, 3, &e) && e.code == SW_EINVAL && strstr(e.msg, "unknown mode 3"), "mode 3: %s", e.msg);
	snprintf(p2, sizeof p2, "%s/bad", dir_);
	FILE *f = fopen(p2, "w");
	fputs("{\"id\":\"a\"}\n{\"id\":\"a\"}\n", f);
	fclose(f);
	ok(!sw_pool_open(p2, SW_POOL_CREATE, &e) && strstr(e.msg, "record 2: a second prompt of the same id"), "duplicate ids: %s",
	   e.msg);
	f = fopen(p2, "w");
	fputs("{\"id\":\"a\",\"pool\":{\"added\":0,\"seen\":\"x\"}}\n", f);
	fclose(f);
	ok(!sw_pool_open(p2, SW_POOL_CREATE, &e) && strstr(e.msg, "record 1: pool field 'seen' is not a whole number"), "bad stats: %s",
	   e.msg);
	f = fopen(p2, "w");
	fputs("{\"id\":\"a\"}\n{\"id\":", f);
	fclose(f);
	ok(!sw_pool_open(p2, SW_POOL_CREATE, &e) && e.code < 0, "a torn file is an error: %s", e.msg);
	f = fopen(p2, "w");
	fclose(f);
	sw_pool *p = sw_pool_open(p2, SW_POOL_CREATE, &e);
	ok(p && sw_pool_count(p) == 0, "an empty file is an empty pool");
	sw_pool_free(p);
}

/* Forked writers adding at the same time: the lock serialises them, nothing is lost. */
static void test_concurrent(void)
{
	char p3[320];
	snprintf(p3, sizeof p3, "%s/conc", dir_);
	enum { PROCS = 6, EACH = 15 };
	for (int k = 0; k < PROCS; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 0; i < EACH; i++) {
				sw_error e = { 0 };
				sw_pool *p = sw_pool_open(p3, SW_POOL_CREATE, &e);
				char json[64];
				snprintf(json, sizeof json, "{\"id\":\"w%d-%d\"}", k, i);
				if (!p || add_(p, json, &e) != 1 || sw_pool_commit(p, &e))
					_exit(1);
				sw_pool_free(p);
			}
			_exit(0);
		}
	}
	int failed = 0, status;
	for (int k = 0; k < PROCS; k++)
		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	is_int(failed, 0, "%d writers ran", PROCS);
	sw_error e = { 0 };
	sw_pool *p = sw_pool_open(p3, SW_POOL_READ, &e);
	ok(p && sw_pool_count(p) == PROCS * EACH, "all %d prompts are there (%zu)", PROCS * EACH, p ? sw_pool_count(p) : 0);
	sw_pool_free(p);
}

int main(void)
{
	if (!mkdtemp(dir_))
		return 1;
	snprintf(path_, sizeof path_, "%s/pool.msgpack", dir_);
	test_priority();
	test_flow();
	test_bad_files();
	test_concurrent();
	int rc = tap_done();
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
	if (system(cmd))
		rc = 1;
	return rc;
}
