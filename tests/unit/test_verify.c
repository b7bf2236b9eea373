/* test_verify.c - the verifiers' text work (answers, numbers, countdown,
 * the length penalty), the exec reply parser, and the verifier set through
 * its library API: specs, scores, the reward, routing and bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "verify/verify_internal.h"
#include "tap.h"
#include "tmpfiles.h"

static void answer_(const char *text, const char *want)
{
	char out[256], shown[256];
	long n = sw_math_answer(text, strlen(text), out, sizeof out);
	snprintf(shown, sizeof shown, "%s", text);
	for (char *p = shown; *p; p++)
		if (*p == '\n')
			*p = '|'; /* one TAP line each */
	if (!want)
		ok(n < 0, "no answer in '%s'", shown);
	else
		ok(n >= 0 && !strcmp(out, want), "answer of '%s' is '%s' (got '%s')", shown, want, n >= 0 ? out : "none");
}

static void number_(const char *text, int valid, double want)
{
	double x = 0;
	int rc = sw_math_number(text, strlen(text), &x);
	if (!valid)
		ok(rc < 0, "'%s' is no number", text);
	else
		ok(rc == 0 && fabs(x - want) < 1e-12, "'%s' is %g (got %g, rc %d)", text, want, x, rc);
}

static int equal_(const char *a, const char *b, double tol)
{
	return sw_math_equal(a, strlen(a), b, strlen(b), tol);
}

static int cd_(const char *e, const long long *nums, size_t n, long long target)
{
	return sw_countdown_check(e, strlen(e), nums, n, target);
}

static int reply_(const char *line, double *score, unsigned *nn, char *names, size_t size, char *why)
{
	return sw_verify_parse_reply(line, strlen(line), score, names, size, nn, 4, why, 200);
}

static sw_rec *json_rec_(const char *json)
{
	sw_json_parser *jp = sw_json_parser_new();
	sw_buf b = { 0 };
	sw_error e = { 0 };
	size_t used;
	sw_rec *r = sw_rec_new();
	if (!jp || !r || sw_json_to_mp(jp, json, strlen(json), &used, &b, &e) ||
	    sw_rec_load(r, b.p, b.len) || sw_rec_own(r)) {
		printf("# bad test JSON: %s\n", json);
		exit(2);
	}
	sw_buf_release(&b);
	sw_json_parser_free(jp);
	return r;
}

/* Push one sample through a set and give back its JSON line. */
static int through_(sw_verify *v, const char *json, char *out, size_t size, sw_error *e)
{
	sw_rec *r = json_rec_(json), *done;
	int rc = sw_verify_push(v, r, 1, e);
	sw_rec_free(r);
	if (rc)
		return rc;
	if ((rc = sw_verify_pop(v, &done, 1, e)) != 1)
		return rc < 0 ? rc : -99;
	const uint8_t *p;
	size_t n;
	sw_buf b = { 0 };
	sw_rec_bytes(done, &p, &n);
	sw_mp_to_json(p, n, &b, e);
	snprintf(out, size, "%.*s", (int)(b.len ? b.len - 1 : 0), (const char *)b.p);
	sw_buf_release(&b);
	return 0;
}

int main(void)
{
	/* ---- final answers ---- */
	answer_("so the total is \\boxed{72}.", "72");
	answer_("\\boxed{\\frac{1}{2}} then 9", "\\frac{1}{2}");
	answer_("\\boxed{1} and \\boxed{ 2 }", "2");
	answer_("\\boxed{3} and \\boxed{4", "3");
	answer_("\\boxed {5}", "5");
	answer_("steps\n#### 1,234\nextra", "1,234");
	answer_("####", NULL);
	answer_("it costs $3.50 and then -12 more", "-12");
	answer_("ratio 3/4.", "3/4");
	answer_("no digits here", NULL);
	answer_("", NULL);

	/* ---- numbers ---- */
	number_("72", 1, 72);
	number_("-2.5", 1, -2.5);
	number_("1,000", 1, 1000);
	number_("$1,000.50", 1, 1000.5);
	number_("3/4", 1, 0.75);
	number_("\\frac{3}{4}", 1, 0.75);
	number_("-\\dfrac{1}{8}", 1, -0.125);
	number_("\\frac34", 1, 0.75);
	number_("\\frac{\\frac{1}{2}}{2}", 1, 0.25);
	number_("50\\%", 1, 50);
	number_("12 \\text{ apples}", 1, 12);
	number_("1e3", 1, 1000);
	number_("5.", 1, 5);
	number_("1/0", 0, 0);
	number_("\\frac{1}{0}", 0, 0);
	number_("x+1", 0, 0);
	number_("1e999", 0, 0);
	number_("", 0, 0);
	number_("3-", 0, 0);

	ok(equal_("0.5", "1/2", 1e-6), "0.5 = 1/2");
	ok(equal_("1000000", "1000000.5", 1e-6), "relative tolerance at a million");
	ok(!equal_("1", "1.00001", 1e-6), "1 != 1.00001 at 1e-6");
	ok(equal_("1", "1.00001", 1e-4), "1 = 1.00001 at 1e-4");
	ok(equal_("\\text{(B)}", "(B)", 1e-6), "text answers compare as text");
	ok(!equal_("(A)", "(B)", 1e-6), "(A) != (B)");
	ok(!equal_("", "", 1e-6), "two empty answers are not equal");
	ok(equal_("x^2 + 1", "x^2+1", 1e-6), "spaces do not count");

	/* ---- countdown ---- */
	long long a[] = { 1, 2, 5, 6 }, b[] = { 3, 3, 7, 1 }, big[] = { 9223372036854775807LL, 2 };
	is_int(cd_("(6 - 2) * 5 + 1", a, 4, 21), 1, "countdown: a right expression");
	is_int(cd_("(6-2)*5+1 = 21", a, 4, 21), 1, "countdown: with its '= value'");
	is_int(cd_("(6 - 2) * 5 + 1", a, 4, 22), 0, "countdown: the wrong value");
	is_int(cd_("(6 - 2) * 5", a, 4, 20), 0, "countdown: a number left unused");
	is_int(cd_("6 * 6 - 5 + 2 - 1", a, 4, 38), 0, "countdown: a number used twice");
	is_int(cd_("1 / 3 * 3 * 7", b, 4, 7), 1, "countdown: exact fractions");
	is_int(cd_("7 / (3 - 3) + 1", b, 4, 7), -1, "countdown: division by zero is no expression");
	is_int(cd_("((6 - 2) * 5 + 1", a, 4, 21), -1, "countdown: unbalanced parentheses");
	is_int(cd_("6 ** 2", a, 4, 36), -1, "countdown: ** is not allowed");
	is_int(cd_("import os", a, 4, 1), -1, "countdown: letters");
	is_int(cd_("", a, 4, 1), -1, "countdown: empty");
	is_int(cd_("9223372036854775807 * 2", big, 2, 0), -1, "countdown: overflow is no expression");
	is_int(cd_("99999999999999999999 + 1", big, 2, 0), -1, "countdown: a literal too large");
	{
		char deep[400];
		memset(deep, '(', 150);
		deep[150] = '1';
		memset(deep + 151, ')', 150);
		deep[301] = 0;
		long long one = 1;
		is_int(cd_(deep, &one, 1, 1), -1, "countdown: nesting beyond 64 levels is refused, not a crash");
	}
	is_int(cd_("-1 + 2", (long long[]){ 1, 2 }, 2, 1), 1, "countdown: unary minus");

	/* ---- length ---- */
	ok(sw_length_penalty(6, 10, 4) == 0.0, "length: 0 up to max - buffer");
	ok(sw_length_penalty(7, 10, 4) == -0.25, "length: linear in the buffer");
	ok(sw_length_penalty(10, 10, 4) == -1.0, "length: -1 at max");
	ok(sw_length_penalty(11, 10, 4) == -1.0, "length: -1 beyond");
	ok(sw_length_penalty(10, 10, 0) == 0.0, "length: no buffer, 0 up to max");
	ok(sw_length_penalty(11, 10, 0) == -1.0, "length: no buffer, -1 beyond");

	/* ---- exec replies ---- */
	double s;
	unsigned nn;
	char names[64], why[200];
	is_int(reply_("{\"score\": 0.5}", &s, &nn, names, sizeof names, why), 0, "reply: a score");
	ok(s == 0.5 && nn == 0, "reply: 0.5, no violations");
	is_int(reply_("{\"score\":1,\"violations\":[\"a\",\"bc\"],\"x\":{}} \r", &s, &nn, names, sizeof names, why), 0,
	       "reply: violations, an unknown key, trailing white space");
	ok(s == 1 && nn == 2 && !strcmp(names, "a") && !strcmp(names + 2, "bc"), "reply: the names, NUL-separated");
	is_int(reply_("{\"score\": -3, \"violations\": null}", &s, &nn, names, sizeof names, why), 0, "reply: null violations");
	is_int(reply_("{\"error\": \"cannot\"}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: an error reply");
	ok(!strcmp(why, "the verifier says: cannot"), "reply: the error says why (%s)", why);
	is_int(reply_("{\"score\": NaN}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: NaN");
	is_int(reply_("{\"score\": 1e999}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: infinity");
	ok(strstr(why, "not finite") || strstr(why, "garbage"), "reply: infinity refused (%s)", why);
	is_int(reply_("{\"score\": \"1\"}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: a string score");
	is_int(reply_("{}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: no score");
	is_int(reply_("[1]", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: not an object");
	is_int(reply_("{\"score\": 1, \"violations\": [], \"sc\\u006fre\": 0}", &s, &nn, names, sizeof names, why),
	       SW_EFORMAT, "reply: a name twice");
	ok(!strcmp(why, "bad reply: the name 'score' appears twice in an object"), "reply: says which (%s)", why);
	is_int(reply_("{\"score\": 1} {\"score\": 2}", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: two objects");
	is_int(reply_("", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: empty");
	is_int(reply_("{\"score\": 1, \"violations\": [1]}", &s, &nn, names, sizeof names, why), SW_EFORMAT,
	       "reply: a violation that is a number");
	is_int(reply_("{\"score\": 1, \"violations\": [\"\"]}", &s, &nn, names, sizeof names, why), SW_EFORMAT,
	       "reply: an empty violation");
	is_int(reply_("{\"score\": 1, \"violations\": [\"a\\u0000b\"]}", &s, &nn, names, sizeof names, why), SW_EFORMAT,
	       "reply: a NUL inside a violation");
	is_int(reply_("{\"score\": 1, \"violations\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", &s, &nn, names, sizeof names, why),
	       SW_EFORMAT, "reply: more violations than allowed");
	is_int(reply_("{\"score\": 1, \"violations\": [\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]}",
	              &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: names longer than the buffer");
	is_int(reply_("\x01\x02\xff garbage", &s, &nn, names, sizeof names, why), SW_EFORMAT, "reply: binary garbage");
	ok(!strchr(why, '\x01'), "reply: control bytes are not echoed into the message");

	/* ---- the set, through its API ---- */
	sw_error e = { 0 };
	char out[1024];
	sw_verify_free(NULL);
	sw_verify *v = sw_verify_new(NULL, &e);
	ok(v != NULL, "sw_verify_new");
	is_int(sw_verify_add(v, "math,weight=0.5", &e), 0, "add math");
	is_int(sw_verify_add(v, "regex:\\\\boxed\\{,as=format,weight=0.25", &e), 0, "add regex");
	is_int(sw_verify_add(v, "length,max=4,buffer=2", &e), 0, "add length");
	is_int(sw_verify_add(v, "bogus", &e), SW_EINVAL, "an unknown verifier");
	ok(strstr(e.msg, "unknown verifier 'bogus'") != NULL, "says so: %s", e.msg);
	is_int(sw_verify_add(v, "math", &e), SW_EINVAL, "a second math");
	is_int(sw_verify_add(v, "regex:(", &e), SW_EINVAL, "a bad pattern");
	is_int(sw_verify_add(v, "length,max=2,buffer=3", &e), SW_EINVAL, "buffer above max");
	is_int(sw_verify_add(v, "exact,timeout=3", &e), SW_EINVAL, "a key that does not apply");
	is_int(sw_verify_count(v), 3, "three verifiers");
	ok(!strcmp(sw_verify_name(v, 1), "format"), "as= names it");
	is_int(through_(v, "{\"response\":\"\\\\boxed{4}\",\"label\":\"4\",\"response_tokens\":[1,2,3]}", out,
	                sizeof out, &e), 0, "a sample goes through");
	ok(!strcmp(out, "{\"response\":\"\\\\boxed{4}\",\"label\":\"4\",\"response_tokens\":[1,2,3],"
	                "\"rewards\":{\"math\":1.0,\"format\":1.0,\"length\":-0.5},\"violations\":[],\"reward\":0.25}"),
	   "rewards, violations and the weighted reward: %s", out);
	is_int(through_(v, "{\"label\":\"4\",\"response_tokens\":[]}", out, sizeof out, &e), SW_ENOENT,
	       "a missing response is bad input");
	ok(!strcmp(e.msg, "verifier 'math' needs field 'response', which is missing") && e.record == 1,
	   "the error names the verifier, the field and the record: %s", e.msg);
	is_int(sw_verify_pending(v), 0, "the bad sample was not taken");
	is_int(through_(v, "{\"response\":\"4\",\"label\":\"4\",\"response_tokens\":[],\"verifiers\":[\"format\"]}", out,
	                sizeof out, &e), 0, "routing");
	ok(strstr(out, "\"rewards\":{\"format\":0.0},\"violations\":[],\"reward\":0.0") != NULL, "only format: %s", out);
	is_int(sw_verify_done(v), 2, "two samples done");
	is_int(sw_verify_failed(v), 0, "none failed");
	sw_verify_free(v);

	/* hard: the minimum of what the applied verifiers can give */
	v = sw_verify_new(&(sw_verify_opts){ .label_field = "answer", .worker_stderr = -1 }, &e);
	is_int(sw_verify_add(v, "exact,weight=2", &e), 0, "add exact");
	is_int(sw_verify_add(v, "length,max=4,buffer=2,hard,weight=3", &e), 0, "add a hard length");
	is_int(through_(v, "{\"response\":\"x\",\"answer\":\"x\",\"response_tokens\":[1,2,3,4,5]}", out, sizeof out, &e),
	       0, "a sample over the length");
	ok(strstr(out, "\"violations\":[\"length\"],\"reward\":-3.0") != NULL, "hard: the minimum, -3: %s", out);
	sw_verify_free(v);

	v = sw_verify_new(&(sw_verify_opts){ .min_reward_set = 1, .min_reward = -7, .worker_stderr = -1 }, &e);
	sw_verify_add(v, "json,hard", &e);
	is_int(through_(v, "{\"response\":\"{\"}", out, sizeof out, &e), 0, "bad JSON, hard");
	ok(strstr(out, "\"rewards\":{\"json\":0.0},\"violations\":[\"json\"],\"reward\":-7.0") != NULL,
	   "hard: --min-reward: %s", out);
	sw_verify_free(v);

	/* the files the specs name, whose bytes decide the rewards (sw-verify records their digests) */
	char list[300], script[300], spec[700];
	const char *files[8];
	ok(tmp_open("verify-files") == 0, "a scratch directory");
	snprintf(list, sizeof list, "%s/rules.txt", tmp_dir_);
	snprintf(script, sizeof script, "%s/verifier.py", tmp_dir_);
	tmp_put(list, "badword\n", 8);
	tmp_put(script, "print(1)\n", 9);
	v = sw_verify_new(&(sw_verify_opts){ .worker_stderr = -1 }, &e);
	is_int(sw_verify_add(v, "math", &e), 0, "math: no file");
	snprintf(spec, sizeof spec, "blocklist:%s", list);
	is_int(sw_verify_add(v, spec, &e), 0, "a blocklist: %s", e.msg);
	snprintf(spec, sizeof spec, "exec:python3 %s --flag %s/not-there x/y,sandbox=none", script, tmp_dir_);
	is_int(sw_verify_add(v, spec, &e), 0, "an exec verifier: %s", e.msg);
	is_int(sw_verify_files(v, files, 8), 2, "the list and the script, not python3 nor a path that is no file");
	ok(!strcmp(files[0], list) && !strcmp(files[1], script), "in order: %s, %s", files[0], files[1]);
	is_int(sw_verify_files(v, files, 1), 2, "the count past cap");
	sw_verify_free(v);
	tmp_close();
	return tap_done();
}
