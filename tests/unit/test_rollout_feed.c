/*
 * test_rollout_feed.c - what data-parallel rollout stands on, without MPI:
 * a prompt given to a scheduler with its place in the whole input
 * (sw_rollout_io.place) gives the samples it gives in one process, bytes
 * and all, whatever came before it; the feed (one process) reads files in
 * its thread and names an invalid record by file and record, skipped or
 * ending the input after the samples before it; generation_config.json's
 * end tokens; and sw-run's side: the ranks' busy times to rank_imbalance,
 * the launcher before the ranked stages' command lines.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sw.h"
#include "tap.h"
#include "tiny_model.h"
#include "tmpfiles.h"

static void mkdir_p_(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
	if (system(cmd))
		abort();
}

static sw_model *model_(void)
{
	sw_model_config c = tiny_config("llama", 300, 32, 48, 8, 96);
	c.n_eos = 1;
	c.eos_token_ids[0] = 2;
	sw_error err = { 0 };
	sw_model *m = sw_model_new_on(sw_backend_get("cpu", &err), &c, &err);
	if (m)
		sw_model_init_random(m, 7, 0.5f);
	return m;
}

static sw_rollout_config cfg_(void)
{
	sw_rollout_config c = sw_rollout_config_defaults();
	c.G = 3;
	c.batch = 4;
	c.max_new = 10;
	c.seed = 42;
	c.kv_bytes = 64 << 20;
	return c;
}

/* The samples, each its own bytes. */
typedef struct out_ {
	uint8_t *s[256];
	size_t n[256];
	int count;
	char skipped[4][240];
	int nskipped;
} out_;

static int put_(void *ctx, const uint8_t *mp, size_t n)
{
	out_ *o = ctx;
	if (o->count == 256 || !(o->s[o->count] = malloc(n)))
		return SW_ENOMEM;
	memcpy(o->s[o->count], mp, n);
	o->n[o->count++] = n;
	return 0;
}

static void skipped_(void *ctx, const char *msg)
{
	out_ *o = ctx;
	if (o->nskipped < 4)
		snprintf(o->skipped[o->nskipped++], sizeof o->skipped[0], "%s", msg);
}

static void out_free_(out_ *o)
{
	for (int i = 0; i < o->count; i++)
		free(o->s[i]);
	memset(o, 0, sizeof *o);
}

/* One process through the feed: the final code, its message in err. */
static int feed_run_(const sw_model *m, const sw_tokenizer *tok, const sw_rollout_config *c, const char *path,
                     out_ *o, sw_error *err)
{
	char *files[] = { (char *)path };
	sw_rollout_feed_io fio = { o, put_, NULL, skipped_ };
	sw_rollout *r = sw_rollout_new(m, tok, c, err);
	sw_rollout_feed *f = r ? sw_rollout_feed_new(NULL, files, 1, 0, c, &fio, NULL, err) : NULL;
	int rc = f ? 0 : SW_EINVAL;
	while (f && (rc = sw_rollout_step(r, sw_rollout_feed_io_of(f), err)) == 1)
		;
	if (f)
		rc = sw_rollout_feed_finish(f, rc, err);
	sw_rollout_feed_free(f);
	sw_rollout_free(r);
	return rc;
}

/* Records from memory with their places: what a rank's block is. */
typedef struct slice_ {
	sw_rec *recs[16];
	int n, at;
	uint64_t first;            /* the place of recs[0] */
	out_ *o;
} slice_;

static int slice_next_(void *ctx, bool block, sw_rec **rec)
{
	(void)block;
	slice_ *s = ctx;
	if (s->at == s->n)
		return 0;
	*rec = s->recs[s->at++];
	return 1;
}

static int slice_put_(void *ctx, const uint8_t *mp, size_t n)
{
	return put_(((slice_ *)ctx)->o, mp, n);
}

static uint64_t slice_place_(void *ctx)
{
	slice_ *s = ctx;
	return s->first + (uint64_t)s->at - 1;
}

/* id NULL: none */
static const char *const ids_[] = { "a", NULL, "c", NULL, "e" };
static const char *const texts_[] = { "one", "two two", "three", "four", "five five five" };

static void test_place_(const sw_model *m, const sw_tokenizer *tok)
{
	char path[400];
	sw_error err = { 0 };
	snprintf(path, sizeof path, "%s/p.jsonl", tmp_dir_);
	FILE *f = fopen(path, "w");
	for (int i = 0; i < 5; i++) {
		if (ids_[i])
			fprintf(f, "{\"id\":\"%s\",\"prompt\":\"%s\"}\n", ids_[i], texts_[i]);
		else
			fprintf(f, "{\"prompt\":\"%s\"}\n", texts_[i]);
	}
	fclose(f);
	sw_rollout_config c = cfg_();
	out_ whole = { 0 };
	is_int(feed_run_(m, tok, &c, path, &whole, &err), 0, "one process through the feed: %s", err.msg);
	is_int(whole.count, 15, "3 samples of each of 5 prompts");

	/* the last three prompts alone, told their places 2, 3, 4: the last nine samples, byte for byte */
	out_ part = { 0 }, other = { 0 };
	slice_ s = { .n = 3, .first = 2, .o = &part };
	for (int i = 0; i < 3; i++) {
		s.recs[i] = sw_rec_new();
		if (ids_[2 + i])
			sw_rec_set_str(s.recs[i], "id", ids_[2 + i], strlen(ids_[2 + i]));
		sw_rec_set_str(s.recs[i], "prompt", texts_[2 + i], strlen(texts_[2 + i]));
	}
	sw_rollout_io io = { .ctx = &s, .next = slice_next_, .put = slice_put_, .place = slice_place_ };
	sw_rollout *r = sw_rollout_new(m, tok, &c, &err);
	is_int(sw_rollout_run(r, &io, &err), 0, "the slice: %s", err.msg);
	sw_rollout_free(r);
	is_int(part.count, 9, "3 samples of each of 3 prompts");
	bool same = part.count == 9;
	for (int i = 0; same && i < 9; i++)
		same = part.n[i] == whole.n[6 + i] && !memcmp(part.s[i], whole.s[6 + i], part.n[i]);
	ok(same, "a prompt at its place draws what it draws in the whole input (and is named by it: \"4/0\")");
	/* without places the same prompts draw as the first ones of an input */
	s.at = 0;
	s.o = &other;
	io.place = NULL;
	r = sw_rollout_new(m, tok, &c, &err);
	is_int(sw_rollout_run(r, &io, &err), 0, "the slice without places");
	sw_rollout_free(r);
	ok(other.count == 9 && (other.n[0] != whole.n[6] || memcmp(other.s[0], whole.s[6], other.n[0])),
	   "without its place a prompt draws as the first of its input");
	for (int i = 0; i < 3; i++)
		sw_rec_free(s.recs[i]);
	out_free_(&whole), out_free_(&part), out_free_(&other);
}

/* An invalid record in one process: skipped and named, or the end after the samples before it. */
static void test_invalid_(const sw_model *m, const sw_tokenizer *tok)
{
	char path[400];
	sw_error err = { 0 };
	snprintf(path, sizeof path, "%s/bad.jsonl", tmp_dir_);
	FILE *f = fopen(path, "w");
	fprintf(f, "{\"id\":\"a\",\"prompt\":\"one\"}\n{\"id\":\"b\",\"prompt\":5}\n{\"id\":\"c\",\"prompt\":\"three\"}\n");
	fclose(f);
	sw_rollout_config c = cfg_();
	out_ o = { 0 };
	char want[600];
	snprintf(want, sizeof want, "%s: record 2: field 'prompt' is a uint, not a string", path);
	is_int(feed_run_(m, tok, &c, path, &o, &err), SW_EFORMAT, "an invalid record ends the input");
	ok(!strcmp(err.msg, want), "named by file and record: %s", err.msg);
	is_int(o.count, 3, "the samples before it are out");
	out_free_(&o);
	c.skip_invalid = true;
	is_int(feed_run_(m, tok, &c, path, &o, &err), 0, "--skip-invalid goes on");
	is_int(o.count, 6, "the samples of the others");
	is_int(o.nskipped, 1, "the skipped one is named once");
	ok(!strcmp(o.skipped[0], want), "named by file and record: %s", o.skipped[0]);
	out_free_(&o);
	is_int(feed_run_(m, tok, &c, "/nonexistent/x.jsonl", &o, &err), SW_EIO, "a file that cannot be opened");
	ok(strstr(err.msg, "cannot open '/nonexistent/x.jsonl'") != NULL, "says so: %s", err.msg);
	out_free_(&o);
}

/*
 * An invalid record ends the run while the reading thread is still in a
 * read (a pipe whose writer has not closed it): sw_rollout_feed_free
 * cannot wait for it, so the thread frees the feed when its read ends.
 * (make check's LeakSanitizer sees a feed left unfreed: with a file, the
 * thread was sometimes still reading when the feed was freed, and the feed
 * leaked.)
 */
static void test_invalid_mid_read_(const sw_model *m, const sw_tokenizer *tok)
{
	int fds[2];
	char path[64];
	sw_error err = { 0 };
	if (pipe(fds)) {
		ok(0, "a pipe");
		return;
	}
	const char *bad = "{\"id\":\"a\",\"prompt\":5}\n";
	ok(write(fds[1], bad, strlen(bad)) == (ssize_t)strlen(bad), "an invalid first record in the pipe");
	snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
	sw_rollout_config c = cfg_();
	out_ o = { 0 };
	is_int(feed_run_(m, tok, &c, path, &o, &err), SW_EFORMAT, "it ends the run, the pipe still open");
	ok(strstr(err.msg, "record 1: field 'prompt' is a uint, not a string") != NULL, "named: %s", err.msg);
	is_int(o.count, 0, "no sample");
	out_free_(&o);
	close(fds[1]); /* the read ends: the thread frees the feed */
	usleep(200 * 1000);
	close(fds[0]);
}

static void test_generation_eos_(void)
{
	char dir[400], path[500];
	int32_t ids[4];
	int n = 0;
	sw_error err = { 0 };
	snprintf(dir, sizeof dir, "%s/model", tmp_dir_);
	mkdir_p_(dir);
	is_int(sw_rollout_generation_eos(dir, 100, ids, 4, &n, &err), 0, "no generation_config.json: none");
	is_int(n, 0, "no ids");
	snprintf(path, sizeof path, "%s/generation_config.json", dir);
	tmp_put(path, "{\"eos_token_id\": [5, 500, 7]}", 29);
	is_int(sw_rollout_generation_eos(dir, 100, ids, 4, &n, &err), 0, "a list");
	ok(n == 2 && ids[0] == 5 && ids[1] == 7, "the ids below the vocabulary: %d", n);
	n = 0;
	tmp_put(path, "{\"eos_token_id\": \"x\"}", 21);
	is_int(sw_rollout_generation_eos(dir, 100, ids, 4, &n, &err), SW_EFORMAT, "a string is no id");
	ok(strstr(err.msg, "field 'eos_token_id' is a str") != NULL, "says so: %s", err.msg);
	/* an item that is no id, once skipped without a word; more ids than there is room for, once cut */
	n = 0;
	const char *neg = "{\"eos_token_id\": [5, -1]}", *five = "{\"eos_token_id\": [1, 2, 3, 4, 5]}";
	tmp_put(path, neg, strlen(neg));
	is_int(sw_rollout_generation_eos(dir, 100, ids, 4, &n, &err), SW_EFORMAT, "a negative item refused");
	ok(strstr(err.msg, "generation_config.json: field 'eos_token_id': item 1 is a int, not a token id") != NULL,
	   "names the item: %s", err.msg);
	n = 0;
	tmp_put(path, five, strlen(five));
	is_int(sw_rollout_generation_eos(dir, 100, ids, 4, &n, &err), SW_ERANGE, "five ids, room for four");
	ok(strstr(err.msg, "field 'eos_token_id' names more than 4 end tokens") != NULL, "says so: %s", err.msg);
}

static void test_rank_times_(void)
{
	char dir[400], path[500];
	sw_error err = { 0 };
	snprintf(dir, sizeof dir, "%s/run", tmp_dir_);
	snprintf(path, sizeof path, "%s/run/tmp", tmp_dir_);
	mkdir_p_(path);
	snprintf(path, sizeof path, "%s/run/tmp/rank-times.jsonl", tmp_dir_);
	unsetenv("SW_RANK_TIMES");
	double busy[] = { 2, 1, 3 };
	is_int(sw_run_rank_times_put("sw-rollout", busy, 3, &err), 0, "no SW_RANK_TIMES: nothing to do");
	ok(access(path, F_OK) != 0, "and nothing written");
	ok(sw_run_rank_times(dir) == NULL, "no record: no figure");
	setenv("SW_RANK_TIMES", path, 1);
	is_int(sw_run_rank_times_put("sw-rollout", busy, 3, &err), 0, "rank 0 says: %s", err.msg);
	double two[] = { 1, 1 };
	is_int(sw_run_rank_times_put("sw-train", two, 2, &err), 0, "and another stage");
	sw_rec *r = sw_run_rank_times(dir);
	double x = NAN, y = NAN;
	ok(r && !sw_rec_get_f64(r, "rollout", &x) && fabs(x - 1.5) < 1e-6, "rollout: max 3 over mean 2: %g", x);
	ok(r && !sw_rec_get_f64(r, "train", &y) && y == 1, "train: even: %g", y);
	ok(access(path, F_OK) != 0, "read once: the file is gone");
	sw_rec_free(r);
	unsetenv("SW_RANK_TIMES");
}

static void test_stage_cmds_(void)
{
	sw_experiment x;
	sw_error err = { 0 };
	char *cmds[SW_NSTAGE];
	sw_experiment_init(&x);
	sw_experiment_set(&x, "train", "sw-train --algo grpo", &err);
	unsetenv("SLURM_JOB_ID");
	is_int(sw_experiment_stage_cmds(&x, cmds, &err), 0, "one rank");
	ok(!strcmp(cmds[SW_STAGE_TRAIN], "sw-train --algo grpo"), "one rank: the command as it is");
	ok(!strncmp(cmds[SW_STAGE_BALANCE], "sw-balance -n \"$SW_RANKS\" ", 26), "the default balance: a partition a rank: %s",
	   cmds[SW_STAGE_BALANCE]);
	sw_experiment_stage_cmds_free(cmds);
	is_int(sw_experiment_set(&x, "ranks", "2", &err), 0, "two ranks");
	is_int(sw_experiment_stage_cmds(&x, cmds, &err), 0, "their commands");
	ok(!strncmp(cmds[SW_STAGE_ROLLOUT], "mpirun -np \"$SW_RANKS\" sw-rollout ", 34), "%s", cmds[SW_STAGE_ROLLOUT]);
	ok(!strncmp(cmds[SW_STAGE_EVAL_ROLLOUT], "mpirun -np ", 11), "the evaluation's rollout too");
	ok(!strcmp(cmds[SW_STAGE_SORT], "sw-sort"), "not the others");
	ok(!strcmp(cmds[SW_STAGE_TRAIN], "mpirun -np \"$SW_RANKS\" sw-train --algo grpo"), "the trainer too: %s",
	   cmds[SW_STAGE_TRAIN]);
	ok(!strncmp(cmds[SW_STAGE_BALANCE], "sw-balance -n \"$SW_RANKS\" ", 26), "balance not, its -n the ranks");
	sw_experiment_stage_cmds_free(cmds);
	setenv("SLURM_JOB_ID", "12", 1);
	is_int(sw_experiment_stage_cmds(&x, cmds, &err), 0, "inside Slurm");
	ok(!strncmp(cmds[SW_STAGE_ROLLOUT], "srun -n \"$SW_RANKS\" --overlap --input=0 --kill-on-bad-exit=1 sw-rollout ", 71),
	   "%s", cmds[SW_STAGE_ROLLOUT]);
	ok(!strncmp(cmds[SW_STAGE_TRAIN], "srun -n \"$SW_RANKS\" --overlap --input=0 --kill-on-bad-exit=1 sw-train ", 69),
	   "%s", cmds[SW_STAGE_TRAIN]);
	sw_experiment_stage_cmds_free(cmds);
	unsetenv("SLURM_JOB_ID");
	is_int(sw_experiment_set(&x, "launcher", "my-launcher -n 2", &err), 0, "a launcher of one's own");
	is_int(sw_experiment_stage_cmds(&x, cmds, &err), 0, "its commands");
	ok(!strncmp(cmds[SW_STAGE_ROLLOUT], "my-launcher -n 2 sw-rollout ", 28), "%s", cmds[SW_STAGE_ROLLOUT]);
	sw_experiment_stage_cmds_free(cmds);
	is_int(sw_experiment_set(&x, "ranks", "0", &err), SW_EINVAL, "no ranks is no run");
	is_int(sw_experiment_set(&x, "launcher", "", &err), SW_EINVAL, "an empty launcher");
	sw_experiment_release(&x);
}

/* The feed's reading thread hands on in batches: a scheduler that waits for
 * input wakes to every record one read of a small file gave, not to the
 * first alone (else, on a busy machine, it starts a batch with one prompt);
 * a file of more records than the queue holds still comes whole, in order. */
static void test_batches_(void)
{
	char path[400];
	sw_error err = { 0 };
	static const int totals[] = { 40, 600 }; /* one read's worth; more than the queue holds */
	for (size_t ti = 0; ti < sizeof totals / sizeof *totals; ti++) {
		int total = totals[ti];
		snprintf(path, sizeof path, "%s/many.jsonl", tmp_dir_);
		FILE *fp = fopen(path, "w");
		for (int i = 0; i < total; i++)
			fprintf(fp, "{\"i\":%d,\"prompt\":\"p\"}\n", i);
		fclose(fp);
		char *files[] = { path };
		sw_rollout_config c = cfg_();
		sw_rollout_feed_io fio = { NULL, put_, NULL, skipped_ };
		sw_rollout_feed *f = sw_rollout_feed_new(NULL, files, 1, 0, &c, &fio, NULL, &err);
		const sw_rollout_io *io = f ? sw_rollout_feed_io_of(f) : NULL;
		ok(f != NULL, "a feed of %d records", total);
		if (!f)
			return;
		sw_rec *rec;
		int64_t i = -1;
		is_int(io->next(io->ctx, true, &rec), 1, "the first record, waited for");
		ok(rec && !sw_rec_get_i64(rec, "i", &i) && i == 0, "is the file's first");
		int got = 1, waits = 0, order = 1;
		for (;;) {
			int rc = io->next(io->ctx, false, &rec);
			if (rc == SW_ROLLOUT_WAIT) {
				waits += got < total;
				rc = io->next(io->ctx, true, &rec);
			}
			if (rc != 1)
				break;
			order &= !sw_rec_get_i64(rec, "i", &i) && i == got;
			got++;
		}
		is_int(got, total, "every record");
		ok(order, "in the file's order");
		if (total == 40)
			is_int(waits, 0, "all there when the first was: none waited for after it");
		is_int(sw_rollout_feed_finish(f, 0, &err), 0, "the input's end");
		sw_rollout_feed_free(f);
	}
}

int main(void)
{
	if (tmp_open("rollout-feed"))
		return 1;
	sw_model *m = model_();
	sw_tokenizer *tok = sw_tokenizer_byte();
	ok(m && tok, "a tiny model and the byte tokenizer");
	if (m && tok) {
		test_place_(m, tok);
		test_invalid_(m, tok);
		test_invalid_mid_read_(m, tok);
	}
	test_generation_eos_();
	test_batches_();
	test_rank_times_();
	test_stage_cmds_();
	sw_tokenizer_free(tok);
	sw_model_free(m);
	tmp_close();
	return tap_done();
}
