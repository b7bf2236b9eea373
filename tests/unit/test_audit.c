/*
 * test_audit.c - digests against known BLAKE2b-256 values and their
 * documented definition, the record builder's refusals, the hash chain
 * across reopen and a second appender, and every kind of tampering named
 * with its record: an edited byte, a deleted, moved or cut record, a
 * changed, removed or added checkpoint file; an append that fails part way
 * (a file size limit standing for a full disk) leaves no part of its record.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include "common/internal.h"
#include "sw/audit.h"
#include "tap.h"

static char dir_[256];

static void put_(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		abort();
}

static char *slurp_(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	static char buf[1 << 16];
	*n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[*n] = 0;
	return buf;
}

/* A directory d holding b ("abc") and sub/z ("zz"). */
static void tree_(const char *d)
{
	char p[600];
	mkdir(d, 0755);
	snprintf(p, sizeof p, "%s/sub", d);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/sub/z", d);
	put_(p, "zz");
	snprintf(p, sizeof p, "%s/b", d);
	put_(p, "abc");
}

static void test_digests_(void)
{
	char hex[SW_DIGEST_HEX], path[512];
	sw_error e = { 0 };
	sw_digest_mem("", 0, hex);
	ok(!strcmp(hex, "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"), "BLAKE2b-256 of nothing");
	sw_digest_mem("abc", 3, hex);
	ok(!strcmp(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"), "BLAKE2b-256 of abc");
	snprintf(path, sizeof path, "%s/f", dir_);
	put_(path, "abc");
	is_int(sw_digest_file(path, hex, &e), 0, "digest a file");
	ok(!strcmp(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"), "a file's is its bytes'");
	snprintf(path, sizeof path, "%s/nope", dir_);
	ok(sw_digest_file(path, hex, &e) == SW_EIO && e.sys_errno == ENOENT, "a missing file: %s", e.msg);

	/* a directory, computed here from the documented definition */
	char d[512], p2[600];
	snprintf(d, sizeof d, "%s/dd", dir_);
	tree_(d);
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, 32);
	const char *names[] = { "b", "sub/z" }, *data[] = { "abc", "zz" };
	for (int i = 0; i < 2; i++) {
		unsigned char h[32], le[8] = { 0 };
		le[0] = (unsigned char)strlen(data[i]);
		crypto_generichash(h, 32, (const unsigned char *)data[i], strlen(data[i]), NULL, 0);
		crypto_generichash_update(&st, (const unsigned char *)names[i], strlen(names[i]) + 1);
		crypto_generichash_update(&st, le, 8);
		crypto_generichash_update(&st, h, 32);
	}
	unsigned char h[32];
	char want[SW_DIGEST_HEX];
	crypto_generichash_final(&st, h, 32);
	sodium_bin2hex(want, sizeof want, h, 32);
	is_int(sw_digest_path(d, hex, &e), 0, "digest a directory");
	ok(!strcmp(hex, want), "a directory's digest is the documented one");
	/* taken on a thread of its own: the same digest, or the same error */
	sw_digest_job *j = sw_digest_dir_begin(d, &e);
	memset(hex, 0, sizeof hex);
	ok(j && sw_digest_dir_end(j, hex, &e) == 0 && !strcmp(hex, want), "a digest job gives the same digest");
	snprintf(p2, sizeof p2, "%s/nope", dir_);
	j = sw_digest_dir_begin(p2, &e);
	ok(j && sw_digest_dir_end(j, hex, &e) == SW_EIO && e.sys_errno == ENOENT && strstr(e.msg, "nope"),
	   "a digest job of a missing directory fails as sw_digest_dir does: %s", e.msg);
	/* a link to a regular file counts as a copy of it under the link's name (a Hugging Face cache's
	 * snapshot); a link to a directory or a dangling one is refused */
	char c[512], want2[SW_DIGEST_HEX];
	snprintf(c, sizeof c, "%s/copy", dir_);
	tree_(c);
	snprintf(p2, sizeof p2, "%s/link", c);
	put_(p2, "abc");
	is_int(sw_digest_dir(c, want2, &e), 0, "the copy's digest");
	snprintf(p2, sizeof p2, "%s/link", d);
	if (symlink("b", p2))
		abort();
	is_int(sw_digest_dir(d, hex, &e), 0, "a directory with a link to a file in it");
	ok(!strcmp(hex, want2) && strcmp(hex, want), "its digest is the copy's: %s", hex);
	unlink(p2);
	if (symlink("sub", p2))
		abort();
	ok(sw_digest_dir(d, hex, &e) == SW_EFORMAT && strstr(e.msg, "not a regular file") && strstr(e.msg, "/link"),
	   "a link to a directory is refused: %s", e.msg);
	unlink(p2);
	if (symlink("gone", p2))
		abort();
	ok(sw_digest_dir(d, hex, &e) == SW_EIO && e.sys_errno == ENOENT && strstr(e.msg, "target cannot be read"),
	   "a dangling link is refused: %s", e.msg);
	unlink(p2);
}

static void test_rec_(void)
{
	ok(!sw_audit_rec_new("") && !sw_audit_rec_new("Run Start") && !sw_audit_rec_new(NULL), "bad event names");
	sw_audit_rec *r = sw_audit_rec_new("stage");
	ok(r != NULL, "a record");
	is_int(sw_audit_rec_str(r, "name", "rollout"), 0, "a string field");
	is_int(sw_audit_rec_str(r, "name", "again"), SW_EINVAL, "a key used twice refused");
	is_int(sw_audit_rec_str(r, "hash", "x"), SW_EINVAL, "'hash' is reserved");
	is_int(sw_audit_rec_int(r, "seq", 3), SW_EINVAL, "'seq' is reserved");
	is_int(sw_audit_rec_str(r, "bad", "\xff\xfe"), SW_EINVAL, "a string that is not UTF-8 refused");
	is_int(sw_audit_rec_str(r, "over", "\xc0\xaf"), SW_EINVAL, "an overlong UTF-8 form refused");
	is_int(sw_audit_rec_str(r, "cut", "a\xe2\x82"), SW_EINVAL, "a cut UTF-8 sequence refused");
	is_int(sw_audit_rec_str(r, "euro", "\xe2\x82\xac"), 0, "a whole UTF-8 sequence is fine");
	is_int(sw_audit_rec_num(r, "x", NAN), SW_EINVAL, "NaN refused");
	is_int(sw_audit_rec_json(r, "j", "{\"a\":"), SW_EFORMAT, "JSON that does not parse refused");
	sw_audit_rec_free(r);
	sw_audit_rec_free(NULL);

	/* files' digests by their paths: each once, each as sw_digest_file has it; a missing one named */
	char a[512], b[512], gone[512], da[SW_DIGEST_HEX], db[SW_DIGEST_HEX];
	snprintf(a, sizeof a, "%s/rules.txt", dir_);
	snprintf(b, sizeof b, "%s/verifier.py", dir_);
	snprintf(gone, sizeof gone, "%s/gone.txt", dir_);
	put_(a, "badword\n");
	put_(b, "print(1)\n");
	sw_error e = { 0 };
	ok(!sw_digest_file(a, da, &e) && !sw_digest_file(b, db, &e), "the files' digests");
	r = sw_audit_rec_new("verifiers");
	const char *paths[] = { a, b, a };
	is_int(sw_audit_rec_files(r, "files", paths, 3, &e), 0, "files recorded: %s", e.msg);
	is_int(sw_audit_rec_files(r, "files", paths, 1, &e), SW_EINVAL, "the key once");
	sw_audit_rec_free(r);
	r = sw_audit_rec_new("verifiers");
	const char *bad[] = { a, gone };
	is_int(sw_audit_rec_files(r, "files", bad, 2, &e), SW_EIO, "a file that is not there");
	ok(strstr(e.msg, gone) && e.sys_errno == ENOENT, "named: %s", e.msg);
	sw_audit_rec_free(r);
	/* appended, the object reads back path by path */
	char log[512];
	snprintf(log, sizeof log, "%s/files.log", dir_);
	sw_audit *l = sw_audit_open(log, &e);
	r = sw_audit_rec_new("verifiers");
	ok(l && r && !sw_audit_rec_files(r, "files", paths, 3, &e) && !sw_audit_append(l, r, &e), "appended: %s", e.msg);
	sw_audit_rec_free(r);
	sw_audit_close(l);
	size_t n;
	const char *text = slurp_(log, &n);
	char want[2048];
	snprintf(want, sizeof want, "\"files\":{\"%s\":\"%s\",\"%s\":\"%s\"}", a, da, b, db);
	ok(strstr(text, want) != NULL, "each file once, in order: %s", text);
}

typedef struct seen_ {
	int n;
	char fields[4][256];
} seen_;

static int collect_(const sw_audit_entry *e, void *ud)
{
	seen_ *s = ud;
	if (s->n < 4)
		snprintf(s->fields[s->n], sizeof s->fields[0], "%s %s", e->event, e->fields);
	s->n++;
	return 0;
}

static void append_(sw_audit *a, const char *event, int iter)
{
	sw_audit_rec *r = sw_audit_rec_new(event);
	sw_error e = { 0 };
	sw_audit_rec_int(r, "iter", iter);
	if (sw_audit_append(a, r, &e))
		printf("# append: %s\n", e.msg);
	sw_audit_rec_free(r);
}

static void test_chain_(void)
{
	char log[512];
	sw_error e = { 0 };
	snprintf(log, sizeof log, "%s/audit.log", dir_);
	sw_audit *a = sw_audit_open(log, &e);
	ok(a && sw_audit_seq(a) == 0 && !*sw_audit_head(a), "a new log");
	sw_audit_rec *r = sw_audit_rec_new("run_start");
	char *argv[] = { "sw-run", "--iters", "3", "a b" };
	sw_audit_rec_argv(r, "argv", 4, argv);
	sw_audit_rec_json(r, "config", "{\"lr\":0.001}");
	sw_audit_rec_num(r, "lr", 0.5);
	is_int(sw_audit_append(a, r, &e), 0, "append run_start");
	sw_audit_rec_free(r);
	append_(a, "stage", 1);
	append_(a, "stage", 2);
	is_int(sw_audit_seq(a), 3, "three records");
	char head3[SW_DIGEST_HEX];
	snprintf(head3, sizeof head3, "%s", sw_audit_head(a));
	sw_audit_close(a);

	size_t n;
	char *text = slurp_(log, &n);
	ok(!strncmp(text, "{\"seq\":1,\"time\":\"", 17), "a line starts with seq and time");
	char *nl = strchr(text, '\n');
	ok(nl && !strncmp(nl - 75, ",\"hash\":\"", 9), "and ends with its hash");
	char hex[SW_DIGEST_HEX];
	sw_digest_mem(text, (size_t)(nl - 75 - text), hex);
	ok(nl && !strncmp(nl - 66, hex, 64), "the hash is BLAKE2b-256 of the body before it");
	ok(strstr(text, "\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\""),
	   "the first prev is zeros");
	ok(strstr(text, "\"argv\":[\"sw-run\",\"--iters\",\"3\",\"a b\"]"), "argv is kept as an array");

	/* reopen and go on; a second handle appends in between */
	a = sw_audit_open(log, &e);
	ok(a && sw_audit_seq(a) == 3 && !strcmp(sw_audit_head(a), head3), "reopened at record 3, same head");
	sw_audit *b = sw_audit_open(log, &e);
	append_(a, "stage", 3);
	append_(b, "halt", 3);
	append_(a, "resume", 3);
	is_int(sw_audit_seq(a), 6, "the first handle read the second's record before its own");
	sw_audit_close(a);
	sw_audit_close(b);
	sw_audit_close(NULL);

	sw_audit_report rep;
	seen_ s = { 0 };
	is_int(sw_audit_verify(dir_, NULL, collect_, &s, &rep, &e), 0, "verify: %s", e.msg);
	is_int(rep.records, 6, "six records");
	is_int(s.n, 6, "the callback saw each");
	ok(!strcmp(s.fields[0], "run_start argv=[\"sw-run\",\"--iters\",\"3\",\"a b\"] config={\"lr\":0.001} lr=0.5"),
	   "listing fields: %s", s.fields[0]);
	is_int(sw_audit_verify(log, head3, NULL, NULL, &rep, &e), 0, "a head that is in the chain: record %llu",
	       (unsigned long long)rep.head_record);
	is_int(rep.head_record, 3, "the head names record 3");
}

/* Write the log with line `drop` removed, lines a and b swapped, or cut to `cut` bytes. */
static void rewrite_(const char *src, const char *dst, int drop, int sa, int sb, long cut)
{
	size_t n;
	char *t = slurp_(src, &n), *lines[64];
	int nl = 0;
	char copy[1 << 16];
	memcpy(copy, t, n + 1);
	for (char *p = copy, *q; *p && nl < 64; p = q + 1) {
		q = strchr(p, '\n');
		lines[nl++] = p;
		*q = 0;
	}
	FILE *f = fopen(dst, "w");
	for (int i = 0; i < nl; i++) {
		int j = i + 1 == sa ? sb - 1 : i + 1 == sb ? sa - 1 : i;
		if (i + 1 != drop)
			fprintf(f, "%s\n", lines[j]);
	}
	fclose(f);
	if (cut >= 0 && truncate(dst, cut))
		abort();
}

static void expect_bad_(const char *path, uint64_t rec, const char *what, const char *desc)
{
	sw_error e = { 0 };
	sw_audit_report rep;
	int rc = sw_audit_verify(path, NULL, NULL, NULL, &rep, &e);
	ok(rc < 0 && e.record == rec && strstr(e.msg, what), "%s: record %llu: %s", desc,
	   (unsigned long long)e.record, e.msg);
}

static void test_tamper_(void)
{
	char log[512], bad[512];
	snprintf(log, sizeof log, "%s/audit.log", dir_);
	snprintf(bad, sizeof bad, "%s/bad.log", dir_);
	size_t n;
	char *t = slurp_(log, &n);

	/* one byte of record 2 changed: "iter":1 -> "iter":7 */
	char copy[1 << 16];
	memcpy(copy, t, n + 1);
	char *l2 = strchr(copy, '\n') + 1, *it = strstr(l2, "\"iter\":1");
	it[7] = '7';
	FILE *f = fopen(bad, "w");
	fwrite(copy, 1, n, f);
	fclose(f);
	expect_bad_(bad, 2, "edited", "an edited byte");

	rewrite_(log, bad, 3, 0, 0, -1);
	expect_bad_(bad, 3, "record 3 was deleted", "a deleted line");
	rewrite_(log, bad, 0, 2, 3, -1);
	expect_bad_(bad, 2, "seq is 3 where 2 was expected", "two lines swapped");
	rewrite_(log, bad, 0, 0, 0, (long)n - 10);
	expect_bad_(bad, 6, "the log was cut", "a cut last line");
	rewrite_(log, bad, 1, 0, 0, -1);
	expect_bad_(bad, 1, "seq is 2 where 1 was expected", "the first line deleted");
	rewrite_(log, bad, 0, 0, 0, 0);
	{
		sw_error e = { 0 };
		ok(sw_audit_verify(bad, NULL, NULL, NULL, NULL, &e) == SW_EEMPTY, "an emptied log: %s", e.msg);
	}

	/* whole records cut off the end: a valid chain, caught by the head */
	const char *last = t + n - 1;
	while (last > t && last[-1] != '\n')
		last--;
	char head[SW_DIGEST_HEX];
	memcpy(head, t + n - 67, 64);
	head[64] = 0;
	rewrite_(log, bad, 0, 0, 0, (long)(last - t));
	sw_error e = { 0 };
	sw_audit_report rep;
	is_int(sw_audit_verify(bad, NULL, NULL, NULL, &rep, &e), 0, "a log cut at a line end is a valid chain...");
	ok(sw_audit_verify(bad, head, NULL, NULL, &rep, &e) < 0 && strstr(e.msg, "no record has the head hash"),
	   "...that the kept head catches: %s", e.msg);

	/* a tampered log is not extended */
	rewrite_(log, bad, 2, 0, 0, -1);
	e = (sw_error){ 0 };
	ok(!sw_audit_open(bad, &e) && e.record == 2, "appending to a tampered log refused: record %llu: %s",
	   (unsigned long long)e.record, e.msg);
}

/* A run directory dir_/NAME with an empty checkpoint directory ckpt/CKPT in it; its path in run. */
static void run_dir_(char *run, size_t n, const char *name, const char *ckpt)
{
	char p[700];
	snprintf(run, n, "%s/%s", dir_, name);
	mkdir(run, 0755);
	snprintf(p, sizeof p, "%s/ckpt", run);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/ckpt/%s", run, ckpt);
	mkdir(p, 0755);
}

static void test_checkpoints_(void)
{
	char run[512], p[700], log[600];
	sw_error e = { 0 };
	run_dir_(run, sizeof run, "run", "iter-2");
	snprintf(p, sizeof p, "%s/ckpt/iter-2/config.json", run);
	put_(p, "{\"hidden_size\":64}\n");
	snprintf(p, sizeof p, "%s/ckpt/iter-2/model.safetensors", run);
	put_(p, "weights");
	snprintf(log, sizeof log, "%s/audit.log", run);
	sw_audit *a = sw_audit_open(log, &e);
	append_(a, "run_start", 0);
	sw_audit_rec *r = sw_audit_rec_new("checkpoint");
	is_int(sw_audit_rec_checkpoint(r, run, "../etc", NULL, &e), SW_EINVAL, "a checkpoint outside the run refused");
	is_int(sw_audit_rec_checkpoint(r, run, "ckpt/iter-2", NULL, &e), 0, "a checkpoint record: %s", e.msg);
	is_int(sw_audit_append(a, r, &e), 0, "appended");
	sw_audit_rec_free(r);
	append_(a, "stage", 3);
	sw_audit_report rep;
	is_int(sw_audit_verify(run, NULL, NULL, NULL, &rep, &e), 0, "verify with the checkpoint: %s", e.msg);
	is_int(rep.checkpoints, 1, "one checkpoint checked");

	/* one checkpoint against its record, as sw-run checks the one it resumes from */
	char got[SW_DIGEST_HEX] = "", want[SW_DIGEST_HEX];
	snprintf(p, sizeof p, "%s/ckpt/iter-2", run);
	is_int(sw_digest_dir(p, want, &e), 0, "the directory's digest");
	sw_audit_run_facts facts = { -1, "x" };
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, &facts, &e), 0, "the checkpoint matches: %s", e.msg);
	ok(!strcmp(got, want), "its digest: %s", got);
	is_int(facts.ended, 0, "the log has not ended (its last record is a stage's)");
	ok(facts.model_digest[0] == 0, "its start record names no model digest: none");
	is_int(sw_audit_check_checkpoint(log, "ckpt/iter-2", got, NULL, &e), 0, "given the log file: %s", e.msg);
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-3", got, NULL, &e), SW_EFORMAT, "one no record names");
	ok(!strcmp(e.msg, "checkpoint 'ckpt/iter-3': no record of the audit log names it: not a checkpoint this "
	               "run recorded"), "%s", e.msg);
	is_int(sw_audit_check_checkpoint(run, "../run/ckpt/iter-2", got, NULL, &e), SW_EINVAL, "a path outside refused");
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-", got, NULL, &e), SW_EFORMAT, "a prefix of the path is not it");

	snprintf(p, sizeof p, "%s/ckpt/iter-2/model.safetensors", run);
	put_(p, "weightz");
	expect_bad_(run, 2, "file 'model.safetensors' changed", "a checkpoint file changed");
	e = (sw_error){ 0 };
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, NULL, &e), SW_EFORMAT, "a changed one refused alone too");
	ok(!strcmp(e.msg, "checkpoint 'ckpt/iter-2' does not match its digest: file 'model.safetensors' changed") &&
	   e.record == 2, "%s (record %llu)", e.msg, (unsigned long long)e.record);
	put_(p, "weights");
	snprintf(p, sizeof p, "%s/ckpt/iter-2/extra", run);
	put_(p, "x");
	expect_bad_(run, 2, "file 'extra' was added", "a file added");
	unlink(p);
	snprintf(p, sizeof p, "%s/ckpt/iter-2/config.json", run);
	unlink(p);
	expect_bad_(run, 2, "file 'config.json' was removed", "a file removed");
	snprintf(p, sizeof p, "%s/ckpt/iter-2/model.safetensors", run);
	unlink(p);
	snprintf(p, sizeof p, "%s/ckpt/iter-2", run);
	rmdir(p);
	expect_bad_(run, 2, "checkpoint 'ckpt/iter-2' is missing", "the checkpoint removed");
	r = sw_audit_rec_new("checkpoint_removed");
	sw_audit_rec_str(r, "path", "ckpt/iter-2");
	sw_audit_append(a, r, &e);
	sw_audit_rec_free(r);
	is_int(sw_audit_verify(run, NULL, NULL, NULL, &rep, &e), 0, "a removal the log records is fine: %s", e.msg);
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, NULL, &e), SW_EFORMAT, "but a removed one is no resume point");
	ok(strstr(e.msg, "no record of the audit log names it") != NULL, "%s", e.msg);
	/* recorded again (a run that made it anew): the last record is the one that counts */
	snprintf(p, sizeof p, "%s/ckpt/iter-2", run);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/ckpt/iter-2/model.safetensors", run);
	put_(p, "new weights");
	r = sw_audit_rec_new("checkpoint");
	is_int(sw_audit_rec_checkpoint(r, run, "ckpt/iter-2", NULL, &e), 0, "recorded anew");
	sw_audit_append(a, r, &e);
	sw_audit_rec_free(r);
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, &facts, &e), 0, "checked against its new record: %s", e.msg);
	is_int(facts.ended, 0, "not ended");
	append_(a, "run_end", 2);
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, &facts, &e), 0, "after the run's end: %s", e.msg);
	is_int(facts.ended, 1, "the log ends with the run's end");
	append_(a, "resume", 2);
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, &facts, &e), 0, "resumed: %s", e.msg);
	is_int(facts.ended, 0, "an end followed by a resume is no end");
	/* a log whose chain is broken vouches for nothing */
	sw_audit_close(a);
	char text[1 << 14];
	FILE *f = fopen(log, "r");
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f)
		fclose(f);
	text[n] = 0;
	char *seq1 = strstr(text, "\"seq\":1,");
	ok(seq1 != NULL, "the first record");
	if (seq1) {
		seq1[6] = '7';
		f = fopen(log, "w");
		fwrite(text, 1, n, f);
		fclose(f);
		e = (sw_error){ 0 };
		ok(sw_audit_check_checkpoint(run, "ckpt/iter-2", got, NULL, &e) == SW_EFORMAT && e.record == 1,
		   "a broken chain refused: record %llu: %s", (unsigned long long)e.record, e.msg);
	}
}

/* What the resume check reads of the run besides the checkpoint: the first start record's model digest. */
static void test_facts_(void)
{
	char run[512], p[700], log[600];
	sw_error e = { 0 };
	run_dir_(run, sizeof run, "frun", "iter-1");
	snprintf(p, sizeof p, "%s/ckpt/iter-1/w", run);
	put_(p, "w");
	snprintf(log, sizeof log, "%s/audit.log", run);
	sw_audit *a = sw_audit_open(log, &e);
	static const char *const md[] = { "1111111111111111111111111111111111111111111111111111111111111111",
	                                  "2222222222222222222222222222222222222222222222222222222222222222" };
	for (int i = 0; i < 2; i++) { /* a second start record (none is written, but one read) does not count */
		sw_audit_rec *r = sw_audit_rec_new("run_start");
		sw_audit_rec_str(r, "model_digest", md[i]);
		sw_audit_append(a, r, &e);
		sw_audit_rec_free(r);
		if (!i) {
			r = sw_audit_rec_new("checkpoint");
			sw_audit_rec_checkpoint(r, run, "ckpt/iter-1", NULL, &e);
			sw_audit_append(a, r, &e);
			sw_audit_rec_free(r);
		}
	}
	sw_audit_close(a);
	char got[SW_DIGEST_HEX];
	sw_audit_run_facts f;
	is_int(sw_audit_check_checkpoint(run, "ckpt/iter-1", got, &f, &e), 0, "checked: %s", e.msg);
	ok(!strcmp(f.model_digest, md[0]) && !f.ended, "the first start record's model digest: %s", f.model_digest);
}

/* A checkpoint recorded with the digests its files were written with (sw/save.h): those files are not read. */
static void test_written_(void)
{
	char run[512], ck[600], p[700], log[600], hx[SW_DIGEST_HEX];
	sw_error e = { 0 };
	snprintf(run, sizeof run, "%s/wrun", dir_);
	snprintf(ck, sizeof ck, "%s/ckpt/iter-5", run);
	mkdir(run, 0755);
	snprintf(p, sizeof p, "%s/ckpt", run);
	mkdir(p, 0755);
	mkdir(ck, 0755);
	snprintf(p, sizeof p, "%s/a", ck);
	put_(p, "aaa");
	snprintf(p, sizeof p, "%s/b", ck);
	put_(p, "bbbb");
	snprintf(p, sizeof p, "%s/c", ck);
	put_(p, "cc");
	sw_digests *d = sw_digests_new(ck);
	unsigned char h[SW_DIGEST_LEN];
	crypto_generichash(h, sizeof h, (const unsigned char *)"aaa", 3, NULL, 0);
	sw_digests_note(d, p, 0, h, &e); /* c: noted below again with its real size */
	snprintf(p, sizeof p, "%s/a", ck);
	is_int(sw_digests_note(d, p, 3, h, &e), 0, "a noted as written");
	/* b noted with the digest of other bytes of its size: the record takes the note, the check then fails */
	crypto_generichash(h, sizeof h, (const unsigned char *)"zzzz", 4, NULL, 0);
	snprintf(p, sizeof p, "%s/b", ck);
	is_int(sw_digests_note(d, p, 4, h, &e), 0, "b noted");
	snprintf(p, sizeof p, "%s/c", ck);
	crypto_generichash(h, sizeof h, (const unsigned char *)"cc", 2, NULL, 0);
	is_int(sw_digests_note(d, p, 3, h, &e), 0, "c noted with a size it does not have");
	sw_audit_rec *r = sw_audit_rec_new("checkpoint");
	is_int(sw_audit_rec_checkpoint(r, run, "ckpt/iter-5", d, &e), SW_EFORMAT, "a file whose size is not as written");
	snprintf(p, sizeof p, "%s/c: 2 bytes, 3 written: it changed since", ck);
	ok(!strcmp(e.msg, p), "%s", e.msg);
	sw_audit_rec_free(r);
	snprintf(p, sizeof p, "%s/c", ck);
	is_int(sw_digests_note(d, p, 2, h, &e), 0, "c noted as it is");
	snprintf(p, sizeof p, "%s/new", ck);
	put_(p, "not written by the saver");
	r = sw_audit_rec_new("checkpoint");
	is_int(sw_audit_rec_checkpoint(r, run, "ckpt/iter-5", d, &e), 0, "recorded with the digests as written: %s", e.msg);
	snprintf(log, sizeof log, "%s/audit.log", run);
	sw_audit *a = sw_audit_open(log, &e);
	is_int(a ? sw_audit_append(a, r, &e) : -1, 0, "appended");
	sw_audit_rec_free(r);
	sw_audit_close(a);
	size_t n;
	const char *text = slurp_(log, &n);
	char want[200];
	sw_digest_mem("aaa", 3, hx);
	snprintf(want, sizeof want, "\"a\":\"%s\"", hx);
	ok(strstr(text, want) != NULL, "a: its digest");
	sw_digest_mem("zzzz", 4, hx);
	snprintf(want, sizeof want, "\"b\":\"%s\"", hx);
	ok(strstr(text, want) != NULL, "b: the digest noted, not the file's (it was not read)");
	sw_digest_mem("not written by the saver", 24, hx);
	snprintf(want, sizeof want, "\"new\":\"%s\"", hx);
	ok(strstr(text, want) != NULL, "a file not noted: read");
	sw_audit_report rep;
	is_int(sw_audit_verify(run, NULL, NULL, NULL, &rep, &e), SW_EFORMAT, "verify reads b and finds it is not what was written");
	ok(strstr(e.msg, "file 'b' changed") != NULL, "%s", e.msg);
	snprintf(p, sizeof p, "%s/b", ck);
	put_(p, "zzzz");
	is_int(sw_audit_verify(run, NULL, NULL, NULL, &rep, &e), 0, "with the bytes written it verifies: %s", e.msg);
	sw_digests_free(d);
}

/*
 * Exhaustive: every single-byte change anywhere in the log, and every cut at
 * any length, is caught (a cut at a line end through the head hash).
 */
static void test_every_byte_(void)
{
	char log[512], bad[512];
	snprintf(log, sizeof log, "%s/audit.log", dir_);
	snprintf(bad, sizeof bad, "%s/mut.log", dir_);
	size_t n;
	char orig[1 << 16], head[SW_DIGEST_HEX];
	const char *text = slurp_(log, &n);
	memcpy(orig, text, n + 1);
	memcpy(head, orig + n - 67, 64);
	head[64] = 0;
	size_t missed = 0, missed_cut = 0, crashed = 0;
	/* one file changed in place and put back: a new file per case is slow on some disks */
	int fd = open(bad, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, orig, n) != (ssize_t)n)
		abort();
	for (size_t i = 0; i < n; i++) {
		static const unsigned char flips[] = { 0x01, 0x20, 0x80 };
		for (size_t k = 0; k < sizeof flips; k++) {
			char c = (char)(orig[i] ^ flips[k]);
			if (pwrite(fd, &c, 1, (off_t)i) != 1)
				abort();
			sw_error e = { 0 };
			int rc = sw_audit_verify(bad, NULL, NULL, NULL, NULL, &e);
			missed += rc == 0;
			crashed += rc < 0 && !e.msg[0];
		}
		if (pwrite(fd, &orig[i], 1, (off_t)i) != 1)
			abort();
	}
	{
		sw_error e = { 0 };
		is_int(sw_audit_verify(bad, head, NULL, NULL, NULL, &e), 0, "the log put back byte by byte is whole again");
	}
	for (size_t len = n; len-- > 0;) {
		if (ftruncate(fd, (off_t)len))
			abort();
		sw_error e = { 0 };
		missed_cut += sw_audit_verify(bad, head, NULL, NULL, NULL, &e) == 0;
	}
	close(fd);
	is_int(missed, 0, "each of %zu bytes changed three ways: every change caught", n);
	is_int(crashed, 0, "and every one with a message");
	is_int(missed_cut, 0, "the log cut at each of %zu lengths: every cut caught with the head", n);
	unlink(bad);
}

/*
 * A signed log (sw_audit_keygen, $SW_SIGN_KEY): every record carries a
 * signature that verifies with the public key, every byte changed is caught
 * with it (the signature's own bytes too), another key's public key fails,
 * and a log that is not signed by the key is not extended with it.
 */
static void test_signed_(void)
{
	char key[512], pub[512], other[512], opub[512], log[512], bad[512];
	snprintf(key, sizeof key, "%s/k", dir_);
	snprintf(pub, sizeof pub, "%s/k.pub", dir_);
	snprintf(other, sizeof other, "%s/o", dir_);
	snprintf(opub, sizeof opub, "%s/o.pub", dir_);
	snprintf(log, sizeof log, "%s/signed.log", dir_);
	snprintf(bad, sizeof bad, "%s/signed-mut.log", dir_);
	sw_error e = { 0 };
	is_int(sw_audit_keygen(key, &e), 0, "keygen: %s", e.msg);
	is_int(sw_audit_keygen(other, &e), 0, "a second key");
	is_int(sw_audit_keygen(key, &e), SW_EIO, "keygen never writes over a key");
	struct stat st;
	ok(!stat(key, &st) && (st.st_mode & 0777) == 0600, "the secret key is 0600");
	setenv(SW_AUDIT_KEY_ENV, key, 1);
	sw_audit *a = sw_audit_open(log, &e);
	ok(a != NULL, "a signed log opens: %s", e.msg);
	for (int i = 1; i <= 3; i++)
		append_(a, "stage", i);
	sw_audit_close(a);
	ok(!stat(log, &st) && (st.st_mode & 0777) == 0600, "the log is created 0600");
	sw_audit_report rep;
	is_int(sw_audit_verify_signed(log, NULL, pub, NULL, NULL, &rep, &e), 0, "verifies with the public key: %s", e.msg);
	ok(rep.records == 3 && rep.signed_records == 3, "3 records, 3 signed");
	is_int(sw_audit_verify_signed(log, NULL, opub, NULL, NULL, &rep, &e), SW_EFORMAT, "another key's fails");
	ok(e.record == 1 && strstr(e.msg, "signature does not verify"), "at record 1: %s", e.msg);

	size_t n;
	char orig[1 << 16];
	const char *text = slurp_(log, &n);
	memcpy(orig, text, n + 1);
	int fd = open(bad, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, orig, n) != (ssize_t)n)
		abort();
	size_t missed = 0;
	for (size_t i = 0; i < n; i++) {
		char c = (char)(orig[i] ^ 0x01);
		if (pwrite(fd, &c, 1, (off_t)i) != 1)
			abort();
		missed += sw_audit_verify_signed(bad, NULL, pub, NULL, NULL, NULL, &e) == 0;
		if (pwrite(fd, &orig[i], 1, (off_t)i) != 1)
			abort();
	}
	close(fd);
	is_int(missed, 0, "each of %zu bytes of a signed log changed: every change caught with the key", n);

	setenv(SW_AUDIT_KEY_ENV, other, 1);
	ok(sw_audit_open(log, &e) == NULL && strstr(e.msg, "signature does not verify"),
	   "another key does not extend the log: %s", e.msg);
	unsetenv(SW_AUDIT_KEY_ENV);
	e = (sw_error){ 0 };
	ok(sw_audit_open(log, &e) == NULL && e.code == SW_EINVAL &&
	   strstr(e.msg, "its records are signed, and one appended without the key would break the log's signatures"),
	   "nor does no key: %s", e.msg);
	/* an unsigned record chained by hand after the signed ones */
	text = slurp_(log, &n);
	char prev[SW_DIGEST_HEX], body[256], line[400];
	const char *h = strstr(text + n - 250, "\"hash\":\"");
	ok(h != NULL, "the last record's hash");
	if (!h)
		return;
	memcpy(prev, h + 8, 64);
	prev[64] = 0;
	snprintf(body, sizeof body, "{\"seq\":4,\"time\":\"2026-12-07T06:00:00.000Z\",\"event\":\"stage\",\"prev\":\"%s\"",
	         prev);
	unsigned char hb[32];
	crypto_generichash(hb, 32, (const unsigned char *)body, strlen(body), NULL, 0);
	char hx[SW_DIGEST_HEX];
	sodium_bin2hex(hx, sizeof hx, hb, 32);
	snprintf(line, sizeof line, "%s,\"hash\":\"%s\"}\n", body, hx);
	fd = open(log, O_WRONLY | O_APPEND);
	if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		abort();
	close(fd);
	is_int(sw_audit_verify_signed(log, NULL, pub, NULL, NULL, NULL, &e), SW_EFORMAT, "an unsigned record fails");
	ok(e.record == 4 && strstr(e.msg, "not signed"), "named: record 4: %s", e.msg);
	is_int(sw_audit_verify(log, NULL, NULL, NULL, &rep, &e), 0, "without the key, the chain alone holds");
	ok(rep.signed_records == 3, "3 of its 4 records signed");
}

/* A full disk mid-append, played by a file size limit (the write stops short, as on ENOSPC): the record
 * written in part is cut off again, the log verifies, and the writer goes on from its last whole record. */
static void test_full_(void)
{
	char log[512];
	sw_error e = { 0 };
	struct stat st0, st1;
	struct rlimit old, lim;
	snprintf(log, sizeof log, "%s/full.log", dir_);
	sw_audit *a = sw_audit_open(log, &e);
	append_(a, "run_start", 0);
	append_(a, "stage", 1);
	char head[SW_DIGEST_HEX];
	snprintf(head, sizeof head, "%s", sw_audit_head(a));
	if (stat(log, &st0) || getrlimit(RLIMIT_FSIZE, &old))
		abort();
	signal(SIGXFSZ, SIG_IGN);
	lim = old;
	lim.rlim_cur = (rlim_t)st0.st_size + 40; /* room for 40 bytes of a record of ~200 */
	ok(!setrlimit(RLIMIT_FSIZE, &lim), "a file size limit 40 bytes past the log's end");
	sw_audit_rec *r = sw_audit_rec_new("stage");
	sw_audit_rec_int(r, "iter", 2);
	int rc = sw_audit_append(a, r, &e);
	ok(rc == SW_EIO && e.sys_errno == EFBIG && strstr(e.msg, "full.log: cannot append record 3: File too large"),
	   "the append fails, naming the log, the record and the error that stopped it: %s", e.msg);
	e = (sw_error){ 0 };
	ok(!stat(log, &st1) && st1.st_size == st0.st_size, "the 40 bytes written are cut off again (%lld, was %lld)",
	   (long long)st1.st_size, (long long)st0.st_size);
	ok(sw_audit_seq(a) == 2 && !strcmp(sw_audit_head(a), head), "the writer is still at record 2");
	sw_audit_report rep;
	is_int(sw_audit_verify(log, NULL, NULL, NULL, &rep, &e), 0, "the log verifies: %s", e.msg);
	ok(!setrlimit(RLIMIT_FSIZE, &old), "the limit lifted");
	is_int(sw_audit_append(a, r, &e), 0, "the same record appended then: %s", e.msg);
	e = (sw_error){ 0 };
	sw_audit_rec_free(r);
	sw_audit_close(a);
	is_int(sw_audit_verify(log, NULL, NULL, NULL, &rep, &e), 0, "and the log verifies: %s", e.msg);
	is_int(rep.records, 3, "three records");
	signal(SIGXFSZ, SIG_DFL);
}

/* A seal taken of a directory knows each way its files can change after: written to (the same bytes
 * too), a mode changed, replaced by a rename, removed, added, a link's target rewritten. */
static void test_seal_(void)
{
	char d[512], p[600], q[600];
	sw_error e = { 0 };
	snprintf(d, sizeof d, "%s/sealed", dir_);
	tree_(d);
	snprintf(p, sizeof p, "%s/t", d);
	put_(p, "target");
	snprintf(p, sizeof p, "%s/link", d);
	if (symlink("t", p))
		abort();
	sw_dir_seal *s = sw_dir_seal_take(d, &e);
	ok(s != NULL, "a seal is taken: %s", s ? "" : e.msg);
	if (!s)
		return;
	is_int(sw_dir_seal_check(s, &e), 0, "nothing changed: the check passes (%s)", e.msg);
	/* each change, then the seal taken again for the next */
	struct {
		const char *what, *msg;
	} c[] = {
		{ "write", "file 'b' was changed" },        { "same", "file 'b' was changed" },
		{ "chmod", "file 'sub/z' was changed" },    { "rename", "file 'b' was replaced" },
		{ "remove", "file 'sub/z' was removed" },   { "add", "file 'new' was added" },
		{ "target", "file 'link' was changed" },    { "relink", "file 'link' was replaced" },
		{ "truncate", "file 't' was changed" },
	};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		const char *w = c[i].what;
		struct timespec ts = { 0, 2000000 }; /* a coarse clock's tick between the seal and the change */
		nanosleep(&ts, NULL);
		if (!strcmp(w, "write") || !strcmp(w, "same")) {
			snprintf(p, sizeof p, "%s/b", d);
			put_(p, "abd"); /* "same": the bytes it already holds */
		} else if (!strcmp(w, "chmod")) {
			snprintf(p, sizeof p, "%s/sub/z", d);
			if (chmod(p, 0600))
				abort();
		} else if (!strcmp(w, "rename")) {
			snprintf(p, sizeof p, "%s/b.new", d);
			snprintf(q, sizeof q, "%s/b", d);
			put_(p, "abd");
			if (rename(p, q))
				abort();
		} else if (!strcmp(w, "remove")) {
			snprintf(p, sizeof p, "%s/sub/z", d);
			unlink(p);
		} else if (!strcmp(w, "add")) {
			snprintf(p, sizeof p, "%s/new", d);
			put_(p, "n");
		} else if (!strcmp(w, "target")) {
			snprintf(p, sizeof p, "%s/t", d);
			put_(p, "other!");
		} else if (!strcmp(w, "relink")) {
			snprintf(p, sizeof p, "%s/link", d);
			unlink(p);
			if (symlink("b", p))
				abort();
		} else {
			snprintf(p, sizeof p, "%s/t", d);
			if (truncate(p, 1))
				abort();
		}
		memset(&e, 0, sizeof e);
		int rc = sw_dir_seal_check(s, &e);
		char want[1200];
		snprintf(want, sizeof want, "'%s' changed while it was read: %s", d, c[i].msg);
		ok(rc == SW_EFORMAT && !strcmp(e.msg, want), "%s: %s", w, e.msg);
		sw_dir_seal_free(s);
		s = sw_dir_seal_take(d, &e);
		if (!s)
			abort();
		ok(sw_dir_seal_check(s, &e) == 0, "%s: sealed again, unchanged", w);
	}
	/* reading changes nothing */
	char hex[SW_DIGEST_HEX];
	ok(sw_digest_dir(d, hex, &e) == 0 && sw_dir_seal_check(s, &e) == 0, "a digest read every file: still sealed");
	sw_dir_seal_free(s);
	snprintf(p, sizeof p, "%s/nope", dir_);
	ok(!sw_dir_seal_take(p, &e) && e.sys_errno == ENOENT, "no directory, no seal: %s", e.msg);
	sw_dir_seal_free(NULL);
}

int main(void)
{
	snprintf(dir_, sizeof dir_, "%s/sw-test-audit.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir_) || sodium_init() < 0)
		return 1;
	test_digests_();
	test_seal_();
	test_rec_();
	test_chain_();
	test_tamper_();
	test_every_byte_();
	test_checkpoints_();
	test_written_();
	test_facts_();
	test_signed_();
	test_full_();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
	if (system(cmd))
		printf("# could not remove %s\n", dir_);
	return tap_done();
}
