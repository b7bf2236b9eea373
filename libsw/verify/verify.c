/*
 * verify.c - a set of verifiers: spec parsing, the built-in verifiers, the
 * plug-in loader, and the window of samples in flight that lets exec
 * verifiers answer out of step while samples leave in input order.
 *
 * A sample's life: push reads what the built-ins, plug-ins and `code` need
 * and scores it at once (bad input is refused here, before anything is
 * sent); then it takes a slot of the window and goes to each exec pool it
 * is routed to.  When the last answer is in, pop combines the scores:
 * the weighted sum, or the minimum reward when a hard rule was broken, or
 * no reward at all (verifier_error) when a verifier failed.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>
#include "yyjson/yyjson.h"
#include "common/internal.h"
#include "sw/verifier.h"
#include "verify/verify_internal.h"

#define MAX_VERIFIERS 64
#define NAME_MAX_ 64
#define NAMES_MAX 4096 /* bytes of one verifier's violation names for one sample */

typedef enum kind_ {
	K_EXACT, K_MATH, K_REGEX, K_BLOCKLIST, K_LENGTH, K_JSON, K_COUNTDOWN, K_EXEC, K_CODE, K_PLUGIN
} kind_;

static const char *const kind_names_[] = {
	"exact", "math", "regex", "blocklist", "length", "json", "countdown", "exec", "code", "plugin", NULL
};

const char *const *sw_verify_names(void)
{
	return kind_names_;
}

typedef struct rule_ {
	char *name;
	pcre2_code *re;
} rule_;

typedef struct vf_ {
	kind_ kind;
	char name[NAME_MAX_];
	double weight, lo, hi; /* lo, hi: the range of its score, for the minimum reward */
	int hard, ci, full;
	int raw;               /* blocklist: match the response as written, not folded */
	int confusables;       /* blocklist: fold letters that read as Latin ones too */
	int nomarks;           /* blocklist: fold marks away too */
	double timeout, tol;
	uint64_t max, buffer;
	int chars;             /* length: count characters, not response_tokens */
	pcre2_code *re;        /* regex */
	rule_ *rules;          /* blocklist */
	size_t nrules;
	sw_buf folded;         /* blocklist: the response as its rules read it (fold.c); exact: it folded */
	sw_buf folded2;        /* exact: the label folded */
	sw_vpool *pool;         /* exec */
	char *command;
	unsigned workers;
	sw_sandbox sb;         /* exec, code */
	char lang[16];         /* code */
	void *dl;              /* plugin */
	const sw_verifier_plugin *pl;
	void *pstate;
	char **files;          /* the files the spec names (blocklist, plug-in, exec's command): sw_verify_files */
	size_t nfiles;
} vf_;

typedef struct slot_ {
	sw_rec *rec;
	uint64_t index;
	size_t pending;
	double *score;       /* per verifier */
	unsigned char *st;   /* per verifier: ST_* */
	sw_buf *names;       /* per verifier: violation names, NUL-separated; the reason when failed */
} slot_;

enum { ST_NONE, ST_WAIT, ST_OK, ST_FAIL };

/* The most a pattern's JIT matching may use of its stack (PCRE2's own default: 32 KiB, which a
 * backtracking pattern exhausts on a few thousand bytes of text; see match_). */
#define JIT_STACK_MAX_ (8u << 20)

struct sw_verify {
	sw_verify_opts o;
	char label[128];
	vf_ *vf[MAX_VERIFIERS];
	size_t nvf;
	slot_ *slots;
	size_t window;
	uint64_t head, tail;  /* sequence numbers: head is the oldest in flight */
	int held;             /* the head slot was handed out by pop and is released next call */
	uint64_t done, failed;
	char first_failure[400]; /* the first sample's verifier_error, and its sequence number */
	uint64_t first_failed;
	pcre2_match_data *md;
	pcre2_match_context *mc;  /* with jit: a JIT stack of up to JIT_STACK_MAX_ bytes */
	pcre2_jit_stack *jit;
	sw_buf scratch, json;
	sw_rec *sub;
	struct pollfd *pfd;
	size_t pfd_cap;
};

double sw_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void sw_verify_warn(sw_verify *v, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (v->o.warn)
		v->o.warn(v->o.warn_arg, buf);
}

/* ---- the set ---- */

sw_verify *sw_verify_new(const sw_verify_opts *o, sw_error *err)
{
	sw_verify *v = calloc(1, sizeof *v);
	if (!v) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	if (o)
		v->o = *o;
	else
		v->o.worker_stderr = 2;
	const char *lf = v->o.label_field ? v->o.label_field : "label";
	if (!*lf || strlen(lf) >= sizeof v->label) {
		free(v);
		sw_fail(err, SW_EINVAL, "bad label field name");
		return NULL;
	}
	strcpy(v->label, lf);
	v->window = v->o.window ? v->o.window : 4096;
	v->md = pcre2_match_data_create(32, NULL);
	v->mc = pcre2_match_context_create(NULL);
	v->jit = pcre2_jit_stack_create(32 * 1024, JIT_STACK_MAX_, NULL);
	if (v->mc && v->jit)
		pcre2_jit_stack_assign(v->mc, NULL, v->jit);
	v->sub = sw_rec_new();
	if (!v->md || !v->mc || !v->jit || !v->sub) {
		sw_verify_free(v);
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	return v;
}

static void vf_free_(vf_ *f)
{
	if (!f)
		return;
	sw_vpool_free(f->pool);
	pcre2_code_free(f->re);
	for (size_t i = 0; i < f->nrules; i++) {
		free(f->rules[i].name);
		pcre2_code_free(f->rules[i].re);
	}
	free(f->rules);
	sw_buf_release(&f->folded);
	sw_buf_release(&f->folded2);
	if (f->pl && f->pl->free)
		f->pl->free(f->pstate);
	if (f->dl)
		dlclose(f->dl);
	free(f->command);
	for (size_t i = 0; i < f->nfiles; i++)
		free(f->files[i]);
	free(f->files);
	free(f);
}

/* Note a file the verifier reads (its provenance, sw_verify_files). */
static int add_file_(vf_ *f, const char *path, sw_error *err)
{
	char **v = realloc(f->files, (f->nfiles + 1) * sizeof *v);
	if (!v)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	f->files = v;
	if (!(v[f->nfiles] = strdup(path)))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	f->nfiles++;
	return 0;
}

/* The words of an exec command that name a regular file by a path (with a '/'): its script, say. */
static int command_files_(vf_ *f, const char *cmd, sw_error *err)
{
	int rc = 0;
	while (!rc && *cmd) {
		size_t n = strcspn(cmd, " \t");
		char w[1024];
		struct stat st;
		if (n && n < sizeof w) {
			memcpy(w, cmd, n);
			w[n] = 0;
			if (strchr(w, '/') && !stat(w, &st) && S_ISREG(st.st_mode))
				rc = add_file_(f, w, err);
		}
		cmd += n;
		cmd += strspn(cmd, " \t");
	}
	return rc;
}

size_t sw_verify_files(const sw_verify *v, const char **out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < v->nvf; i++)
		for (size_t j = 0; j < v->vf[i]->nfiles; j++, n++)
			if (n < cap)
				out[n] = v->vf[i]->files[j];
	return n;
}

static void slots_free_(sw_verify *v)
{
	if (!v->slots)
		return;
	for (size_t i = 0; i < v->window; i++) {
		slot_ *s = &v->slots[i];
		sw_rec_free(s->rec);
		free(s->score);
		free(s->st);
		if (s->names)
			for (size_t j = 0; j < v->nvf; j++)
				sw_buf_release(&s->names[j]);
		free(s->names);
	}
	free(v->slots);
	v->slots = NULL;
}

void sw_verify_free(sw_verify *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nvf; i++)
		vf_free_(v->vf[i]);
	slots_free_(v);
	pcre2_match_data_free(v->md);
	pcre2_match_context_free(v->mc);
	pcre2_jit_stack_free(v->jit);
	sw_buf_release(&v->scratch);
	sw_buf_release(&v->json);
	sw_rec_free(v->sub);
	free(v->pfd);
	free(v);
}

size_t sw_verify_count(const sw_verify *v)
{
	return v->nvf;
}

const char *sw_verify_name(const sw_verify *v, size_t i)
{
	return i < v->nvf ? v->vf[i]->name : NULL;
}

size_t sw_verify_pending(const sw_verify *v)
{
	return (size_t)(v->tail - v->head);
}

int sw_verify_full(const sw_verify *v)
{
	return v->tail - v->head >= v->window;
}

uint64_t sw_verify_done(const sw_verify *v)
{
	return v->done;
}

uint64_t sw_verify_failed(const sw_verify *v)
{
	return v->failed;
}

const char *sw_verify_first_failure(const sw_verify *v, uint64_t *index)
{
	if (index)
		*index = v->first_failed;
	return v->failed ? v->first_failure : NULL;
}

/* ---- specs ---- */

static const char *const keys_[] = { "weight", "timeout", "as", "workers", "tol", "max", "buffer",
                                     "unit", "cpu", "mem", "nproc", "fsize", "disk", "sandbox",
                                     "env", "lang", "arg", NULL };
static const char *const flags_[] = { "hard", "ci", "full", "raw", "confusables", "nomarks", NULL };

/* Is s[0..n) a KEY=... or a flag we know? */
static int is_key_(const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	size_t kl = eq ? (size_t)(eq - s) : n;
	const char *const *list = eq ? keys_ : flags_;
	for (size_t i = 0; list[i]; i++)
		if (strlen(list[i]) == kl && !memcmp(list[i], s, kl))
			return 1;
	return 0;
}

static int number_(const char *k, const char *s, double lo, double hi, double *x, sw_error *err)
{
	char *end;
	errno = 0;
	double d = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(d) || d < lo || d > hi)
		return sw_fail(err, SW_EINVAL, "'%s' wants a number from %g to %g, not '%s'", k, lo, hi, s);
	*x = d;
	return 0;
}

static int size_(const char *k, const char *s, uint64_t *x, sw_error *err)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	if (shift)
		end++;
	if (!*s || *s == '-' || *end || errno || v == 0 || v > (UINT64_MAX >> 31))
		return sw_fail(err, SW_EINVAL, "'%s' wants a whole number above 0 (K, M, G allowed), not '%s'",
		               k, s);
	*x = (uint64_t)v << shift;
	return 0;
}

static int compile_(const char *pat, size_t n, int ci, int full, pcre2_code **re, char *why,
                    size_t whylen)
{
	int ec;
	PCRE2_SIZE off;
	/* UCP: \w, \d, \s, \b and the POSIX classes are Unicode's, as the text is */
	uint32_t fl = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (ci ? PCRE2_CASELESS : 0);
	if (full)
		fl |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
	*re = pcre2_compile((PCRE2_SPTR)pat, n, fl, &ec, &off, NULL);
	if (!*re) {
		char msg[160];
		pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
		snprintf(why, whylen, "%s at offset %zu", msg, (size_t)off);
		return -1;
	}
	pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); /* where JIT is missing, matching still works */
	return 0;
}

/*
 * A rule's name, as violations will carry it: a name given in [ ] must be
 * UTF-8 (a pattern is, or PCRE2 refused it) and fit SW_VERIFIER_NAME_MAX;
 * a pattern that is its own name is cut to fit at a character's start.
 */
static int rule_name_(const char *path, size_t lineno, const char *name, size_t *n, int given,
                      sw_error *err)
{
	if (given) {
		if (*n >= SW_VERIFIER_NAME_MAX)
			return sw_fail(err, SW_EINVAL, "%s:%zu: rule name is longer than %d bytes", path, lineno,
			               SW_VERIFIER_NAME_MAX - 1);
		if (sw_utf8_check(name, *n, NULL))
			return sw_fail(err, SW_EINVAL, "%s:%zu: rule name is not UTF-8", path, lineno);
		return 0;
	}
	if (*n >= SW_VERIFIER_NAME_MAX) {
		*n = SW_VERIFIER_NAME_MAX - 1;
		while (*n && ((unsigned char)name[*n] & 0xc0) == 0x80)
			--*n;
	}
	return 0;
}

/* How a blocklist's rules read the response (fold.c), by its flags. */
static int rules_fold_(const vf_ *f)
{
	return SW_FOLD_RULES | (f->confusables ? SW_FOLD_CONFUSABLES : 0) | (f->nomarks ? SW_FOLD_NOMARKS : 0);
}

/* How to mend a pattern the fold changes (pat, n: the part that changes):
 * with nomarks, dropping it where only marks make the difference. */
static int mend_(const vf_ *f, const char *pat, size_t n, const char **what, sw_error *err)
{
	*what = "; write it so, or add ,raw";
	if (!f->nomarks)
		return 0;
	sw_buf b = { 0 };
	const char *t;
	size_t tn;
	if (sw_fold_text(pat, n, SW_FOLD_RULES, &b, &t, &tn))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	*what = tn == n && !memcmp(t, pat, n) ? "; write it so, or drop ,nomarks" : "; write it so";
	sw_buf_release(&b);
	return 0;
}

/*
 * The character an escape at pat[i] (a backslash) writes by its number:
 * \x{H..}, \xHH, \o{O..} or \N{U+H..}, PCRE2's forms (pat compiled, so well
 * formed), with *len its length; -1 for any other escape (len 2: a class,
 * an assertion, a quoted character; an octal \ddd is read as a
 * backreference or a number by the groups before it, and is not looked at).
 */
static long escape_cp_(const char *pat, size_t n, size_t i, size_t *len)
{
	*len = 2;
	if (i + 1 >= n)
		return -1;
	char c = pat[i + 1];
	size_t j = i + 2; /* past the letter */
	int base = c == 'o' ? 8 : 16;
	bool braced = j < n && pat[j] == '{';
	if (c == 'N') {
		if (j + 3 > n || memcmp(pat + j, "{U+", 3))
			return -1;
		j += 3;
	} else if (c == 'o') {
		if (!braced)
			return -1;
		j++;
	} else if (c == 'x') {
		j += braced;
	} else {
		return -1;
	}
	long cp = 0;
	int nd = 0;
	for (; j < n && (braced || nd < 2); j++, nd++) {
		int d = pat[j] >= '0' && pat[j] <= '9' ? pat[j] - '0'
		      : base == 16 && isxdigit((unsigned char)pat[j]) ? tolower((unsigned char)pat[j]) - 'a' + 10
		      : -1;
		if (d < 0 || d >= base || cp > 0x10ffff)
			break;
		cp = cp * base + d;
	}
	if (braced && (j >= n || pat[j] != '}'))
		return -1;
	*len = j + braced - i;
	return cp <= 0x10ffff ? cp : -1;
}

/* A pattern holding at 'at' (n bytes: the letter, or its escape) U+cp, which
 * confusables reads as the ASCII letter to. */
static int confusable_fail_(const char *path, size_t lineno, const char *pat, const char *at, int n, long cp,
                            int to, sw_error *err)
{
	return sw_fail(err, SW_EINVAL,
	               "%s:%zu: pattern '%.48s' would never match: with confusables, '%.*s' (U+%04lX) is read "
	               "as '%c'; write '%c', or drop ,confusables",
	               path, lineno, pat, n, at, cp, to, to);
}

/*
 * Responses reach the rules folded (fold.c); a pattern whose own text the
 * fold changes (a ligature, a fullwidth letter, a zero-width space; with
 * nomarks an accent) would never match what it was written for.  Refused,
 * showing its folded form.  With confusables, so is a pattern holding a
 * letter that fold makes Latin (its text is not folded: a letter made
 * Latin after a backslash or at the end of a range in [ ] would change
 * what the pattern means).  A character the pattern writes by its number
 * (\x{43e}) is one it holds: refused the same way, naming the escape.
 */
static int rule_folded_(vf_ *f, const char *path, size_t lineno, const char *pat, sw_error *err)
{
	const char *t, *what;
	size_t n = strlen(pat), tn;
	int fl = rules_fold_(f) & ~SW_FOLD_CONFUSABLES;
	if (sw_fold_text(pat, n, fl, &f->folded, &t, &tn))
		return sw_fail(err, SW_ENOMEM, "out of memory");
	if (tn != n || memcmp(t, pat, n)) {
		if (mend_(f, pat, n, &what, err))
			return err->code;
		return sw_fail(err, SW_EINVAL,
		               "%s:%zu: pattern '%.48s' would never match: responses are read in NFKC "
		               "without invisible characters%s, where it is '%.48s'%s",
		               path, lineno, pat, f->nomarks ? " or marks" : "", tn ? t : "", what);
	}
	/* pat is UTF-8 (PCRE2 took it) */
	for (size_t i = 0; f->confusables && i < n;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)pat + i,
		                                      (utf8proc_ssize_t)(n - i), &cp);
		int to = k > 1 ? sw_fold_confusable((uint32_t)cp) : 0;
		if (to)
			return confusable_fail_(path, lineno, pat, pat + i, (int)k, cp, to, err);
		i += k > 0 ? (size_t)k : 1;
	}
	/* the characters written by number; text inside \Q...\E is taken as written (checked above) */
	for (size_t i = 0, len = 1; i < n; i += pat[i] == '\\' ? len : 1) {
		if (pat[i] != '\\')
			continue;
		if (i + 1 < n && pat[i + 1] == 'Q') {
			const char *e = strstr(pat + i + 2, "\\E");
			len = e ? (size_t)(e - pat) + 2 - i : n - i;
			continue;
		}
		long cp = escape_cp_(pat, n, i, &len);
		utf8proc_uint8_t u[4];
		utf8proc_ssize_t un = cp >= 0 && utf8proc_codepoint_valid((utf8proc_int32_t)cp)
		                    ? utf8proc_encode_char((utf8proc_int32_t)cp, u) : 0;
		if (!un)
			continue;
		if (sw_fold_text((const char *)u, (size_t)un, fl, &f->folded, &t, &tn))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		if (tn != (size_t)un || memcmp(t, u, tn)) {
			if (mend_(f, (const char *)u, (size_t)un, &what, err))
				return err->code;
			return sw_fail(err, SW_EINVAL,
			               "%s:%zu: pattern '%.48s' would never match: responses are read in NFKC "
			               "without invisible characters%s, where '%.*s' (U+%04lX) is '%.*s'%s",
			               path, lineno, pat, f->nomarks ? " or marks" : "", (int)len, pat + i, cp,
			               (int)tn, tn ? t : "", what);
		}
		int to = f->confusables && cp >= 0x80 ? sw_fold_confusable((uint32_t)cp) : 0;
		if (to)
			return confusable_fail_(path, lineno, pat, pat + i, (int)len, cp, to, err);
	}
	return 0;
}

static int load_blocklist_(vf_ *f, const char *path, sw_error *err)
{
	FILE *fp = fopen(path, "r");
	if (!fp) {
		err->sys_errno = errno;
		return sw_fail(err, SW_EIO, "cannot open blocklist '%s': %s", path, strerror(errno));
	}
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = 0;
	while ((len = getline(&line, &cap, fp)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == '#')
			continue;
		/* "[name] pattern" names the rule; otherwise the pattern is its name */
		char *name = p, *pat = p;
		size_t nlen = strlen(p);
		if (*p == '[') {
			char *c = strchr(p, ']');
			if (!c || c == p + 1) {
				rc = sw_fail(err, SW_EINVAL, "%s:%zu: a rule name in [ ] is not closed or empty", path,
				             lineno);
				break;
			}
			name = p + 1;
			nlen = (size_t)(c - p - 1);
			pat = c + 1;
			while (*pat == ' ' || *pat == '\t')
				pat++;
			if (!*pat) {
				rc = sw_fail(err, SW_EINVAL, "%s:%zu: rule '%.*s' has no pattern", path, lineno,
				             (int)nlen, name);
				break;
			}
		}
		rule_ *r = realloc(f->rules, (f->nrules + 1) * sizeof *r);
		if (!r) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		f->rules = r;
		r = &f->rules[f->nrules];
		char why[200];
		if (compile_(pat, strlen(pat), f->ci, 0, &r->re, why, sizeof why)) {
			rc = sw_fail(err, SW_EINVAL, "%s:%zu: bad pattern: %s", path, lineno, why);
			break;
		}
		if ((rc = rule_name_(path, lineno, name, &nlen, name != pat, err)) ||
		    (!f->raw && (rc = rule_folded_(f, path, lineno, pat, err)))) {
			pcre2_code_free(r->re);
			break;
		}
		if (!(r->name = strndup(name, nlen))) {
			pcre2_code_free(r->re);
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			break;
		}
		f->nrules++;
	}
	if (!rc && ferror(fp))
		rc = sw_fail(err, SW_EIO, "cannot read blocklist '%s': %s", path, strerror(errno));
	if (!rc && !f->nrules)
		rc = sw_fail(err, SW_EINVAL, "blocklist '%s' has no rules", path);
	free(line);
	fclose(fp);
	return rc;
}

static int load_plugin_(vf_ *f, const char *arg, sw_error *err)
{
	/* "LIB.so[,ARG]" */
	char lib[1024];
	const char *comma = strchr(arg, ',');
	size_t n = comma ? (size_t)(comma - arg) : strlen(arg);
	if (!n || n >= sizeof lib)
		return sw_fail(err, SW_EINVAL, "plugin wants a shared object: plugin:LIB.so[,ARG]");
	memcpy(lib, arg, n);
	lib[n] = 0;
	const char *parg = comma ? comma + 1 : NULL;
	/* a bare name would be searched in the system's library path: say ./ for here */
	char path[1100];
	snprintf(path, sizeof path, "%s%s", strchr(lib, '/') ? "" : "./", lib);
	f->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!f->dl)
		return sw_fail(err, SW_EIO, "cannot load plugin: %s", dlerror());
	int frc = add_file_(f, path, err);
	if (frc)
		return frc;
	void *sym = dlsym(f->dl, SW_VERIFIER_ENTRY);
	if (!sym)
		return sw_fail(err, SW_EINVAL, "'%s' is no verifier plug-in: it lacks %s()", lib,
		               SW_VERIFIER_ENTRY);
	sw_verifier_entry_fn entry;
	memcpy(&entry, &sym, sizeof entry); /* ISO C has no object-to-function cast */
	const sw_verifier_plugin *pl = entry();
	if (!pl)
		return sw_fail(err, SW_EINVAL, "plugin '%s': %s() returned NULL", lib, SW_VERIFIER_ENTRY);
	if (pl->abi != SW_VERIFIER_ABI)
		return sw_fail(err, SW_EINVAL, "plugin '%s' is built for verifier ABI %u, this is ABI %d", lib,
		               (unsigned)pl->abi, SW_VERIFIER_ABI);
	if (!pl->score)
		return sw_fail(err, SW_EINVAL, "plugin '%s' has no score function", lib);
	char why[256] = "";
	if (pl->init && pl->init(parg, &f->pstate, why, sizeof why)) {
		why[sizeof why - 1] = 0;
		return sw_fail(err, SW_EINVAL, "plugin '%s' refused to start: %s", lib,
		               why[0] ? why : "no reason given");
	}
	f->pl = pl;
	if (pl->name && *pl->name && !f->name[0])
		snprintf(f->name, sizeof f->name, "%s", pl->name);
	return 0;
}

/*
 * Build the verifier's box once, now: sandbox=strict that cannot be had is
 * an error before any sample; a weaker box the user asked for is said
 * loudly (shown even under -q); what holds the box as a whole is a note.
 */
static int check_box_(sw_verify *v, vf_ *f, sw_error *err)
{
	char *files[16], warn[600], note[400], cwd[4096];
	size_t n = 0;
	sw_bind binds[16];
	if (f->kind == K_EXEC && getcwd(cwd, sizeof cwd))
		n = sw_sandbox_files(f->command, cwd, files, 16);
	for (size_t i = 0; i < n; i++)
		binds[i] = (sw_bind){ files[i], files[i], 0 };
	sw_error e2 = { 0 };
	int rc = sw_sandbox_check(&f->sb, binds, n, warn, sizeof warn, note, sizeof note, &e2);
	for (size_t i = 0; i < n; i++)
		free(files[i]);
	if (rc)
		return sw_fail(err, rc, "%s", e2.msg);
	char msg[1100];
	if (warn[0]) {
		snprintf(msg, sizeof msg, "%s verifier '%s': %s", kind_names_[f->kind], f->name, warn);
		if (f->sb.mode != SW_SANDBOX_STRICT && v->o.note)
			v->o.note(v->o.warn_arg, 2, msg);
		else
			sw_verify_warn(v, "%s", msg);
	}
	if (note[0] && v->o.note) {
		snprintf(msg, sizeof msg, "%s verifier '%s': %s", kind_names_[f->kind], f->name, note);
		v->o.note(v->o.warn_arg, 0, msg);
	}
	return 0;
}

static int valid_name_(const char *s)
{
	if (!*s || strlen(s) >= NAME_MAX_)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_-.", *s))
			return 0;
	return 1;
}

/* Which keys each kind takes, besides weight, hard, as. */
static int takes_(kind_ k, const char *key)
{
	static const struct { kind_ k; const char *keys; } t[] = {
		{ K_EXACT, " ci " },
		{ K_MATH, " tol " },
		{ K_REGEX, " ci full " },
		{ K_BLOCKLIST, " ci raw confusables nomarks " },
		{ K_LENGTH, " max buffer unit " },
		{ K_JSON, " " },
		{ K_COUNTDOWN, " " },
		{ K_EXEC, " timeout workers cpu mem nproc fsize disk sandbox env " },
		{ K_CODE, " timeout lang cpu mem nproc fsize disk sandbox env " },
		{ K_PLUGIN, " arg " },
	};
	char pat[32];
	snprintf(pat, sizeof pat, " %s ", key);
	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		if (t[i].k == k)
			return strstr(t[i].keys, pat) != NULL;
	return 0;
}

static int apply_key_(vf_ *f, const char *key, const char *val, sw_error *err)
{
	double d;
	uint64_t u;
	int *flag = !strcmp(key, "hard") ? &f->hard : !strcmp(key, "ci") ? &f->ci
	          : !strcmp(key, "full") ? &f->full : !strcmp(key, "raw") ? &f->raw
	          : !strcmp(key, "confusables") ? &f->confusables : !strcmp(key, "nomarks") ? &f->nomarks
	          : NULL;
	if (flag) {
		if (val)
			return sw_fail(err, SW_EINVAL, "'%s' takes no value", key);
		*flag = 1;
		if (f->raw && (f->confusables || f->nomarks))
			return sw_fail(err, SW_EINVAL, "'raw' and '%s' do not go together: raw reads the response "
			               "unfolded", f->confusables ? "confusables" : "nomarks");
		return 0;
	}
	if (!val)
		return sw_fail(err, SW_EINVAL, "unknown key '%s'", key);
	if (!strcmp(key, "weight"))
		return number_(key, val, -1e6, 1e6, &f->weight, err);
	if (!strcmp(key, "timeout"))
		return number_(key, val, 0.001, 86400, &f->timeout, err);
	if (!strcmp(key, "tol"))
		return number_(key, val, 0, 1, &f->tol, err);
	if (!strcmp(key, "as")) {
		if (!valid_name_(val))
			return sw_fail(err, SW_EINVAL,
			               "'as' wants a name of letters, digits, '_', '-' and '.', not '%s'", val);
		snprintf(f->name, sizeof f->name, "%s", val);
		return 0;
	}
	if (!strcmp(key, "workers")) {
		if (number_(key, val, 1, 256, &d, err) || d != floor(d))
			return err->code ? err->code : sw_fail(err, SW_EINVAL, "'workers' wants a whole number");
		f->workers = (unsigned)d;
		return 0;
	}
	if (!strcmp(key, "max") || !strcmp(key, "buffer")) {
		char *end;
		errno = 0;
		unsigned long long x = strtoull(val, &end, 10);
		if (!*val || *val == '-' || *end || errno)
			return sw_fail(err, SW_EINVAL, "'%s' wants a whole number, not '%s'", key, val);
		*(!strcmp(key, "max") ? &f->max : &f->buffer) = x;
		return 0;
	}
	if (!strcmp(key, "unit")) {
		if (strcmp(val, "tokens") && strcmp(val, "chars"))
			return sw_fail(err, SW_EINVAL, "'unit' is tokens or chars, not '%s'", val);
		f->chars = !strcmp(val, "chars");
		return 0;
	}
	if (!strcmp(key, "cpu")) {
		if (size_(key, val, &u, err))
			return err->code;
		f->sb.cpu_s = u;
		return 0;
	}
	if (!strcmp(key, "mem"))
		return size_(key, val, &f->sb.mem, err);
	if (!strcmp(key, "fsize"))
		return size_(key, val, &f->sb.fsize, err);
	if (!strcmp(key, "nproc"))
		return size_(key, val, &f->sb.nproc, err);
	if (!strcmp(key, "disk"))
		return size_(key, val, &f->sb.disk, err);
	if (!strcmp(key, "sandbox")) {
		if (strcmp(val, "strict") && strcmp(val, "basic") && strcmp(val, "none"))
			return sw_fail(err, SW_EINVAL, "'sandbox' is strict, basic or none, not '%s'", val);
		f->sb.mode = !strcmp(val, "strict") ? SW_SANDBOX_STRICT
		             : !strcmp(val, "basic") ? SW_SANDBOX_BASIC : SW_SANDBOX_NONE;
		return 0;
	}
	if (!strcmp(key, "env")) {
		/* a variable the box is given by name: it must be one, and be set */
		int ok = (isalpha((unsigned char)*val) || *val == '_') && strlen(val) < sizeof f->sb.env[0];
		for (const char *c = val; ok && *c; c++)
			ok = isalnum((unsigned char)*c) || *c == '_';
		if (!ok)
			return sw_fail(err, SW_EINVAL, "'env' wants the name of a variable, not '%s'", val);
		if (!getenv(val))
			return sw_fail(err, SW_EINVAL, "env=%s: the variable is not set", val);
		if (f->sb.nenv >= SW_SANDBOX_ENV_MAX)
			return sw_fail(err, SW_EINVAL, "more than %d env= keys", SW_SANDBOX_ENV_MAX);
		snprintf(f->sb.env[f->sb.nenv++], sizeof f->sb.env[0], "%s", val);
		return 0;
	}
	if (!strcmp(key, "lang")) {
		if (strcmp(val, "python") && strcmp(val, "c") && strcmp(val, "sh"))
			return sw_fail(err, SW_EINVAL, "'lang' is python, c or sh, not '%s'", val);
		snprintf(f->lang, sizeof f->lang, "%s", val);
		return 0;
	}
	return sw_fail(err, SW_EINVAL, "unknown key '%s'", key);
}

int sw_verify_add(sw_verify *v, const char *spec, sw_error *err)
{
	if (v->slots)
		return sw_fail(err, SW_EINVAL, "verifiers are added before the first sample");
	if (v->nvf >= MAX_VERIFIERS)
		return sw_fail(err, SW_EINVAL, "more than %d verifiers", MAX_VERIFIERS);
	vf_ *f = calloc(1, sizeof *f);
	char *copy = strdup(spec);
	if (!f || !copy) {
		free(f);
		free(copy);
		return sw_fail(err, SW_ENOMEM, "out of memory");
	}
	int rc = 0;
	f->weight = 1.0;
	f->tol = 1e-6;
	f->max = 4096;
	f->buffer = 1024;
	f->workers = 1;
	f->lo = 0;
	f->hi = 1;
	/* NAME, then :ARG up to the first comma that starts a known key */
	size_t nl = strcspn(copy, ":,");
	char *arg = NULL, *rest = copy + nl;
	if (*rest == ':') {
		*rest = 0;
		arg = rest + 1;
		char *p = arg;
		for (;;) {
			char *c = strchr(p, ',');
			if (!c) {
				rest = p + strlen(p);
				break;
			}
			size_t tl = strcspn(c + 1, ",");
			if (is_key_(c + 1, tl)) {
				*c = 0;
				rest = c + 1;
				break;
			}
			p = c + 1;
		}
	} else if (*rest == ',') {
		*rest++ = 0;
	}
	const char *name = copy;
	size_t k;
	for (k = 0; k < K_PLUGIN + 1; k++)
		if (!strcmp(name, kind_names_[k]))
			break;
	if (k == K_PLUGIN + 1) {
		rc = sw_fail(err, SW_EINVAL,
		             "unknown verifier '%s' (exact, math, regex, blocklist, length, json, countdown, "
		             "exec, code, plugin)", name);
		goto out;
	}
	f->kind = (kind_)k;
	int needs_arg = f->kind == K_REGEX || f->kind == K_BLOCKLIST || f->kind == K_EXEC ||
	                f->kind == K_PLUGIN;
	if (needs_arg && (!arg || !*arg)) {
		rc = sw_fail(err, SW_EINVAL, "'%s' needs an argument: %s:%s", name, name,
		             f->kind == K_REGEX ? "PATTERN" : f->kind == K_BLOCKLIST ? "FILE"
		             : f->kind == K_EXEC ? "COMMAND" : "LIB.so[,ARG]");
		goto out;
	}
	if (!needs_arg && arg) {
		rc = sw_fail(err, SW_EINVAL, "'%s' takes no argument (':%s')", name, arg);
		goto out;
	}
	/* sandbox defaults, before the keys change them */
	if (f->kind == K_EXEC || f->kind == K_CODE) {
		memset(&f->sb, 0, sizeof f->sb);
		f->sb.cpu_s = f->kind == K_EXEC ? 3600 : 0;
		f->sb.mem = 1ull << 30;
		f->sb.nproc = 32;
		f->sb.fsize = 64ull << 20;
		f->sb.nofile = 256;
		f->sb.disk = 64ull << 20;
		f->sb.mode = SW_SANDBOX_STRICT;
	}
	f->timeout = f->kind == K_CODE ? 5 : 10;
	snprintf(f->lang, sizeof f->lang, "python");
	/* keys */
	char *save = NULL, *plugin_arg = NULL;
	for (char *t = strtok_r(rest, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');
		int known = is_key_(t, strlen(t));
		if (eq)
			*eq = 0;
		if (!known) {
			if (f->kind == K_PLUGIN && !eq && !plugin_arg) {
				plugin_arg = t; /* plugin:LIB.so,ARG */
				continue;
			}
			rc = sw_fail(err, SW_EINVAL, "unknown key '%s' in '%s'", t, spec);
			goto out;
		}
		if (strcmp(t, "weight") && strcmp(t, "hard") && strcmp(t, "as") && !takes_(f->kind, t)) {
			rc = sw_fail(err, SW_EINVAL, "key '%s' does not apply to '%s'", t, name);
			goto out;
		}
		if (eq && !strcmp(t, "arg")) {
			plugin_arg = eq + 1;
			continue;
		}
		if ((rc = apply_key_(f, t, eq ? eq + 1 : NULL, err)))
			goto out;
	}
	if (f->kind == K_CODE && !f->sb.cpu_s)
		f->sb.cpu_s = (uint64_t)ceil(f->timeout) + 1;
	if (!f->name[0] && f->kind != K_PLUGIN)
		snprintf(f->name, sizeof f->name, "%s", name);
	switch (f->kind) {
	case K_REGEX: {
		char why[200];
		if (compile_(arg, strlen(arg), f->ci, f->full, &f->re, why, sizeof why))
			rc = sw_fail(err, SW_EINVAL, "bad pattern '%s': %s", arg, why);
		break;
	}
	case K_BLOCKLIST:
		rc = load_blocklist_(f, arg, err);
		rc = rc ? rc : add_file_(f, arg, err);
		break;
	case K_LENGTH:
		if (f->buffer > f->max)
			rc = sw_fail(err, SW_EINVAL, "length: buffer=%llu is larger than max=%llu",
			             (unsigned long long)f->buffer, (unsigned long long)f->max);
		f->lo = -1;
		f->hi = 0;
		break;
	case K_EXEC:
		if (!(f->command = strdup(arg)))
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
		rc = rc ? rc : command_files_(f, arg, err);
		break;
	case K_PLUGIN: {
		char buf[1200];
		if (plugin_arg)
			snprintf(buf, sizeof buf, "%s,%s", arg, plugin_arg);
		else
			snprintf(buf, sizeof buf, "%s", arg);
		char as[NAME_MAX_];
		snprintf(as, sizeof as, "%s", f->name);
		f->name[0] = 0;
		rc = load_plugin_(f, buf, err);
		if (as[0])
			snprintf(f->name, sizeof f->name, "%s", as);
		if (!rc && !f->name[0])
			snprintf(f->name, sizeof f->name, "plugin");
		if (!rc && !valid_name_(f->name))
			rc = sw_fail(err, SW_EINVAL, "plugin name '%s' is not a valid name: use as=NAME", f->name);
		break;
	}
	default:
		break;
	}
	if (rc)
		goto out;
	for (size_t i = 0; i < v->nvf; i++)
		if (!strcmp(v->vf[i]->name, f->name)) {
			rc = sw_fail(err, SW_EINVAL, "two verifiers are named '%s': tell them apart with as=NAME",
			             f->name);
			goto out;
		}
	if ((f->kind == K_EXEC || f->kind == K_CODE) && (rc = check_box_(v, f, err)))
		goto out;
	v->vf[v->nvf++] = f;
	f = NULL;
out:
	vf_free_(f);
	free(copy);
	return rc;
}

/* ---- reading what a verifier needs ---- */

static int need_str_(sw_rec *rec, const char *field, const char *who, const char **s, size_t *n,
                     sw_error *err)
{
	int rc = sw_rec_get_str(rec, field, s, n);
	if (rc == SW_ENOENT)
		return sw_fail(err, SW_ENOENT, "verifier '%s' needs field '%s', which is missing", who, field);
	if (rc) {
		sw_val val;
		sw_rec_get(rec, field, &val);
		return sw_fail(err, SW_ETYPE, "field '%s' is %s, verifier '%s' wants a string", field,
		               sw_type_name(val.type), who);
	}
	return 0;
}

/* The label as text: a string as it is, a number written out. */
static int label_text_(sw_verify *v, sw_rec *rec, const char *who, char *buf, size_t cap,
                       const char **s, size_t *n, sw_error *err)
{
	sw_val val;
	int rc = sw_rec_get(rec, v->label, &val);
	if (rc == SW_ENOENT) {
		/* another data set's name for the answer (GSM8K's 'answer', MATH's 'solution', verl's 'ground_truth') */
		static const char *const alt[] = { "answer", "solution", "ground_truth", "target", "reference" };
		for (size_t i = 0; i < sizeof alt / sizeof *alt; i++)
			if (strcmp(alt[i], v->label) && sw_rec_get(rec, alt[i], &val) == 0 &&
			    (val.type == SW_T_STR || val.type == SW_T_INT || val.type == SW_T_UINT ||
			     val.type == SW_T_F32 || val.type == SW_T_F64))
				return sw_fail(err, SW_ENOENT, "verifier '%s' needs field '%s', which is missing; it has '%s': "
				               "--label-field %s reads it", who, v->label, alt[i], alt[i]);
		return sw_fail(err, SW_ENOENT, "verifier '%s' needs field '%s', which is missing", who, v->label);
	}
	if (rc)
		return sw_fail(err, rc, "field '%s' cannot be read", v->label);
	switch (val.type) {
	case SW_T_STR:
		*s = val.v.str.ptr;
		*n = val.v.str.len;
		return 0;
	case SW_T_INT:
		*n = (size_t)snprintf(buf, cap, "%lld", (long long)val.v.i);
		break;
	case SW_T_UINT:
		*n = (size_t)snprintf(buf, cap, "%llu", (unsigned long long)val.v.u);
		break;
	case SW_T_F32:
	case SW_T_F64: {
		double d = val.type == SW_T_F32 ? (double)val.v.f32 : val.v.f64;
		if (!isfinite(d))
			return sw_fail(err, SW_EINVAL, "field '%s' is %s, verifier '%s' wants a finite number",
			               v->label, isnan(d) ? "NaN" : "infinite", who);
		*n = (size_t)snprintf(buf, cap, val.type == SW_T_F32 ? "%.9g" : "%.17g", d);
		break;
	}
	default:
		return sw_fail(err, SW_ETYPE, "field '%s' is %s, verifier '%s' wants a string or a number",
		               v->label, sw_type_name(val.type), who);
	}
	*s = buf;
	return 0;
}

static void trim_(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s))
		++*s, --*n;
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		--*n;
}

/*
 * 1 when re matches s[0..n), 0 when it does not, -1 when matching stopped
 * (PCRE2's match, depth or heap limit: a pattern that backtracks without
 * end on this text), why saying so.  Stopped is not "no match": a response
 * built to exhaust the limit before the forbidden words would otherwise
 * pass a blocklist.
 */
static int match_(sw_verify *v, pcre2_code *re, const char *s, size_t n, const char *rule, char *why,
                  size_t whylen)
{
	int r = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, v->md, v->mc);
	if (r >= 0)
		return 1;
	if (r == PCRE2_ERROR_NOMATCH)
		return 0;
	char msg[160];
	pcre2_get_error_message(r, (PCRE2_UCHAR *)msg, sizeof msg);
	snprintf(why, whylen, "pattern '%.64s' could not be matched against the response: %s", rule, msg);
	return -1;
}

/* The synchronous verifier failed on this sample: st ST_FAIL, why in names (finish_ makes it verifier_error). */
static int fail_(unsigned char *st, sw_buf *names, const char *why, sw_error *err)
{
	*st = ST_FAIL;
	names->len = 0;
	return sw_buf_put(names, why, strlen(why) + 1) ? sw_fail(err, SW_ENOMEM, "out of memory") : 0;
}

static int add_name_(sw_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > NAMES_MAX)
		return 0; /* enough names; the rest would only repeat */
	if (sw_buf_put(b, s, n) || sw_buf_put(b, "", 1))
		return SW_ENOMEM;
	return 0;
}

/* The countdown label: {"target": T, "numbers": [..]}. */
static int countdown_label_(sw_verify *v, sw_rec *rec, long long *nums, size_t *count,
                            long long *target, sw_error *err)
{
	sw_val lab, k, x;
	int rc = sw_rec_get(rec, v->label, &lab), have_t = 0, have_n = 0;
	if (rc == SW_ENOENT)
		return sw_fail(err, SW_ENOENT, "verifier 'countdown' needs field '%s', which is missing", v->label);
	if (rc || lab.type != SW_T_MAP)
		return sw_fail(err, SW_ETYPE, "field '%s' is %s, countdown wants {\"target\": N, \"numbers\": [...]}",
		               v->label, sw_type_name(lab.type));
	sw_iter it;
	sw_iter_init(&it, &lab);
	while (sw_iter_next(&it, &k) == 1 && sw_iter_next(&it, &x) == 1) {
		if (k.type != SW_T_STR)
			continue;
		if (k.v.str.len == 6 && !memcmp(k.v.str.ptr, "target", 6)) {
			double d;
			if (sw_val_number(&x, &d) || d != floor(d) || fabs(d) > 1e15)
				return sw_fail(err, SW_ETYPE, "field '%s': 'target' is not a whole number", v->label);
			*target = (long long)d;
			have_t = 1;
		} else if (k.v.str.len == 7 && !memcmp(k.v.str.ptr, "numbers", 7)) {
			if (x.type != SW_T_ARRAY || x.v.count > 64)
				return sw_fail(err, SW_ETYPE, "field '%s': 'numbers' is not an array of at most 64 numbers",
				               v->label);
			sw_iter in;
			sw_val e;
			*count = 0;
			sw_iter_init(&in, &x);
			while (sw_iter_next(&in, &e) == 1) {
				double d;
				if (sw_val_number(&e, &d) || d != floor(d) || d < 0 || d > 1e15)
					return sw_fail(err, SW_ETYPE, "field '%s': number %zu is not a whole number >= 0",
					               v->label, *count + 1);
				nums[(*count)++] = (long long)d;
			}
			have_n = 1;
		}
	}
	if (!have_t || !have_n)
		return sw_fail(err, SW_EINVAL, "field '%s' lacks '%s'", v->label, have_t ? "numbers" : "target");
	return 0;
}

/* The code verifier's label: an array of {"input": str, "output": str}. */
static int code_tests_(sw_verify *v, sw_rec *rec, const char **in, size_t *inl, const char **out,
                       size_t *outl, size_t *count, size_t cap, sw_error *err)
{
	sw_val lab, t, k, x;
	int rc = sw_rec_get(rec, v->label, &lab);
	if (rc == SW_ENOENT)
		return sw_fail(err, SW_ENOENT, "verifier 'code' needs field '%s', which is missing", v->label);
	if (rc || lab.type != SW_T_ARRAY || lab.v.count == 0)
		return sw_fail(err, SW_ETYPE,
		               "field '%s' is %s, code wants a non-empty array of {\"input\", \"output\"} tests",
		               v->label, rc ? "unreadable" : lab.type == SW_T_ARRAY ? "an empty array" : sw_type_name(lab.type));
	if (lab.v.count > cap)
		return sw_fail(err, SW_ERANGE, "field '%s' holds %u tests, at most %zu are run", v->label,
		               lab.v.count, cap);
	sw_iter it;
	sw_iter_init(&it, &lab);
	*count = 0;
	while (sw_iter_next(&it, &t) == 1) {
		size_t i = *count;
		in[i] = out[i] = NULL;
		inl[i] = outl[i] = 0;
		if (t.type != SW_T_MAP)
			return sw_fail(err, SW_ETYPE, "field '%s': test %zu is %s, not a map", v->label, i + 1,
			               sw_type_name(t.type));
		sw_iter m;
		sw_iter_init(&m, &t);
		while (sw_iter_next(&m, &k) == 1 && sw_iter_next(&m, &x) == 1) {
			if (k.type != SW_T_STR)
				continue;
			int isin = k.v.str.len == 5 && !memcmp(k.v.str.ptr, "input", 5);
			int isout = k.v.str.len == 6 && !memcmp(k.v.str.ptr, "output", 6);
			if ((isin || isout) && x.type != SW_T_STR)
				return sw_fail(err, SW_ETYPE, "field '%s': test %zu: '%s' is %s, not a string", v->label,
				               i + 1, isin ? "input" : "output", sw_type_name(x.type));
			if (isin)
				in[i] = x.v.str.ptr, inl[i] = x.v.str.len;
			if (isout)
				out[i] = x.v.str.ptr, outl[i] = x.v.str.len;
		}
		if (!out[i])
			return sw_fail(err, SW_EINVAL, "field '%s': test %zu has no 'output'", v->label, i + 1);
		if (!in[i])
			in[i] = "";
		++*count;
	}
	return 0;
}

/* The code of a response: its last fenced block (and the fence's language), or all of it. */
static void code_of_(const char *s, size_t n, const char *deflang, const char **code, size_t *len,
                     char *lang, size_t langcap)
{
	const char *best = NULL, *bend = NULL, *tag = NULL;
	size_t taglen = 0;
	const char *p = s, *end = s + n;
	while (p < end) {
		const char *f = memmem(p, (size_t)(end - p), "```", 3);
		if (!f)
			break;
		const char *nl = memchr(f, '\n', (size_t)(end - f));
		if (!nl)
			break;
		const char *close = memmem(nl + 1, (size_t)(end - nl - 1), "```", 3);
		if (!close)
			break;
		best = nl + 1;
		bend = close;
		tag = f + 3;
		taglen = (size_t)(nl - tag);
		p = close + 3;
	}
	snprintf(lang, langcap, "%s", deflang);
	if (!best) {
		*code = s;
		*len = n;
		return;
	}
	*code = best;
	*len = (size_t)(bend - best);
	while (taglen && isspace((unsigned char)tag[taglen - 1]))
		taglen--;
	static const struct { const char *tag, *lang; } t[] = {
		{ "python", "python" }, { "py", "python" }, { "python3", "python" }, { "c", "c" },
		{ "sh", "sh" }, { "bash", "sh" }, { "shell", "sh" },
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		if (strlen(t[i].tag) == taglen && !strncasecmp(tag, t[i].tag, taglen))
			snprintf(lang, langcap, "%s", t[i].lang);
}

/*
 * Score sample rec with the synchronous verifier f: 0 with st set (ST_OK and
 * *score and names, or ST_FAIL and the reason in names), or a data error.
 */
static int score_now_(sw_verify *v, vf_ *f, sw_rec *rec, uint64_t index, double *score,
                      unsigned char *st, sw_buf *names, sw_error *err)
{
	const char *r = NULL, *l = NULL;
	size_t rn = 0, ln = 0;
	char lbuf[64];
	int rc;
	*st = ST_OK;
	*score = 0;
	switch (f->kind) {
	case K_EXACT:
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)) ||
		    (rc = label_text_(v, rec, f->name, lbuf, sizeof lbuf, &l, &ln, err)))
			return rc;
		trim_(&r, &rn);
		trim_(&l, &ln);
		/* the same text composed or not, and with ci in either case, compares equal */
		int how = f->ci ? SW_FOLD_CASE : SW_FOLD_NFC;
		if (sw_fold_text(r, rn, how, &f->folded, &r, &rn) || sw_fold_text(l, ln, how, &f->folded2, &l, &ln))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		*score = rn == ln && !memcmp(r, l, rn);
		return 0;
	case K_MATH: {
		char a[256], b[256];
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)) ||
		    (rc = label_text_(v, rec, f->name, lbuf, sizeof lbuf, &l, &ln, err)))
			return rc;
		long an = sw_math_answer(r, rn, a, sizeof a);
		/* a label may be a whole worked solution ("... #### 72") or just the answer */
		long bn = memmem(l, ln, "\\boxed", 6) || memmem(l, ln, "####", 4)
		          ? sw_math_answer(l, ln, b, sizeof b) : -1;
		if (bn < 0) {
			trim_(&l, &ln);
			if (!ln || ln >= sizeof b)
				return sw_fail(err, SW_EINVAL, "field '%s' holds no answer for verifier '%s'", v->label,
				               f->name);
			memcpy(b, l, ln);
			b[ln] = 0;
			bn = (long)ln;
		}
		*score = an >= 0 && sw_math_equal(a, (size_t)an, b, (size_t)bn, f->tol);
		return 0;
	}
	case K_REGEX: {
		char why[300];
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)))
			return rc;
		int m = match_(v, f->re, r, rn, f->name, why, sizeof why);
		if (m < 0)
			return fail_(st, names, why, err);
		*score = m;
		return 0;
	}
	case K_BLOCKLIST: {
		char why[300], first[300] = "";
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)))
			return rc;
		if (!f->raw && sw_fold_text(r, rn, rules_fold_(f), &f->folded, &r, &rn))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		*score = 1;
		for (size_t i = 0; i < f->nrules; i++) {
			int m = match_(v, f->rules[i].re, r, rn, f->rules[i].name, why, sizeof why);
			if (m < 0 && !first[0])
				snprintf(first, sizeof first, "%s", why);
			if (m > 0) {
				*score = 0;
				if ((rc = add_name_(names, f->rules[i].name, strlen(f->rules[i].name))))
					return sw_fail(err, rc, "out of memory");
			}
		}
		/* a rule not checked to the end leaves the sample unscored, unless another rule was broken:
		 * not checked is not clean (no reward, the sample kept out of training), but broken is broken */
		if (first[0] && *score == 1)
			return fail_(st, names, first, err);
		return 0;
	}
	case K_LENGTH: {
		uint64_t len = 0;
		if (f->chars) {
			if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)))
				return rc;
			for (size_t i = 0; i < rn; i++)
				len += ((unsigned char)r[i] & 0xc0) != 0x80; /* UTF-8 characters */
		} else {
			sw_val t;
			rc = sw_rec_get(rec, "response_tokens", &t);
			if (rc == SW_ENOENT)
				return sw_fail(err, SW_ENOENT,
				               "verifier '%s' needs field 'response_tokens', which is missing (or use unit=chars)",
				               f->name);
			if (rc || t.type != SW_T_ARRAY)
				return sw_fail(err, SW_ETYPE, "field 'response_tokens' is %s, not an array",
				               rc ? "unreadable" : sw_type_name(t.type));
			len = t.v.count;
		}
		*score = sw_length_penalty(len, f->max, f->buffer);
		return 0;
	}
	case K_JSON: {
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)))
			return rc;
		trim_(&r, &rn);
		if (rn >= 3 && !memcmp(r, "```", 3)) {
			/* a fenced block: its body */
			const char *nl = memchr(r, '\n', rn);
			if (nl && rn >= 6 && !memcmp(r + rn - 3, "```", 3) && nl < r + rn - 3) {
				rn = (size_t)(r + rn - 3 - (nl + 1));
				r = nl + 1;
			}
		}
		yyjson_doc *doc = rn ? yyjson_read(r, rn, 0) : NULL;
		*score = doc != NULL;
		yyjson_doc_free(doc);
		return 0;
	}
	case K_COUNTDOWN: {
		long long nums[64], target = 0;
		size_t count = 0;
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)) ||
		    (rc = countdown_label_(v, rec, nums, &count, &target, err)))
			return rc;
		/* the last <answer>...</answer>, else the last line */
		const char *a = NULL, *ae = NULL;
		for (const char *p = r; (p = memmem(p, rn - (size_t)(p - r), "<answer>", 8));) {
			const char *e = memmem(p + 8, rn - (size_t)(p + 8 - r), "</answer>", 9);
			if (!e)
				break;
			a = p + 8;
			ae = e;
			p = e + 9;
		}
		if (!a) {
			size_t n = rn;
			while (n && isspace((unsigned char)r[n - 1]))
				n--;
			const char *nl = n ? memrchr(r, '\n', n) : NULL;
			a = nl ? nl + 1 : r;
			ae = r + n;
		}
		*score = sw_countdown_check(a, (size_t)(ae - a), nums, count, target) == 1;
		return 0;
	}
	case K_CODE: {
		const char *in[256], *out[256], *code;
		size_t inl[256], outl[256], count = 0, clen;
		char lang[16], why[256] = "";
		if ((rc = need_str_(rec, "response", f->name, &r, &rn, err)) ||
		    (rc = code_tests_(v, rec, in, inl, out, outl, &count, 256, err)))
			return rc;
		code_of_(r, rn, f->lang, &code, &clen, lang, sizeof lang);
		if (sw_code_run(&f->sb, lang, code, clen, in, inl, out, outl, count, f->timeout, score, why,
		                sizeof why))
			return fail_(st, names, why, err);
		return 0;
	}
	case K_PLUGIN: {
		sw_verifier_sample smp = { .index = index };
		sw_verifier_result res;
		const uint8_t *mp;
		size_t mpn;
		sw_val lab;
		if ((rc = sw_rec_bytes(rec, &mp, &mpn)))
			return sw_fail(err, rc, "cannot encode the record");
		v->json.len = 0;
		if ((rc = sw_mp_to_json(mp, mpn, &v->json, err)))
			return rc;
		smp.msgpack = mp;
		smp.msgpack_len = mpn;
		smp.json = (const char *)v->json.p;
		smp.json_len = v->json.len - 1;
		if (sw_rec_get_str(rec, "response", &smp.response, &smp.response_len))
			smp.response = NULL, smp.response_len = 0;
		v->scratch.len = 0;
		if (!sw_rec_get(rec, v->label, &lab)) {
			if ((rc = sw_mp_to_json(lab.raw, lab.rawlen, &v->scratch, err)))
				return rc;
			smp.label = (const char *)v->scratch.p;
			smp.label_len = v->scratch.len - 1;
		}
		memset(&res, 0, sizeof res);
		int prc = f->pl->score(f->pstate, &smp, &res);
		char why[320];
		if (prc || !isfinite(res.score) || res.nviolations > SW_VERIFIER_MAX_VIOLATIONS) {
			res.error[sizeof res.error - 1] = 0;
			snprintf(why, sizeof why, "%s", prc ? (res.error[0] ? res.error : "failed, no reason given")
			                               : !isfinite(res.score) ? "gave a score that is not finite"
			                               : "reported too many violations");
			return fail_(st, names, why, err);
		}
		*score = res.score;
		for (unsigned i = 0; i < res.nviolations; i++) {
			size_t n = strnlen(res.violations[i], SW_VERIFIER_NAME_MAX);
			if (n && (rc = add_name_(names, res.violations[i], n)))
				return sw_fail(err, rc, "out of memory");
		}
		return 0;
	}
	case K_EXEC:
		break;
	}
	return sw_fail(err, SW_EINVAL, "verifier '%s' cannot score now", f->name);
}

/* ---- the window ---- */

static int slots_make_(sw_verify *v, sw_error *err)
{
	v->slots = calloc(v->window, sizeof *v->slots);
	if (!v->slots)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t i = 0; i < v->window; i++) {
		slot_ *s = &v->slots[i];
		s->rec = sw_rec_new();
		s->score = calloc(v->nvf ? v->nvf : 1, sizeof *s->score);
		s->st = calloc(v->nvf ? v->nvf : 1, 1);
		s->names = calloc(v->nvf ? v->nvf : 1, sizeof *s->names);
		if (!s->rec || !s->score || !s->st || !s->names) {
			slots_free_(v);
			return sw_fail(err, SW_ENOMEM, "out of memory");
		}
	}
	for (size_t i = 0; i < v->nvf; i++) {
		vf_ *f = v->vf[i];
		if (f->kind == K_EXEC &&
		    !(f->pool = sw_vpool_new(v, i, f->name, f->command, &f->sb, f->workers, f->timeout,
		                            v->window, v->o.worker_stderr, err))) {
			slots_free_(v);
			return err->code ? err->code : SW_ENOMEM;
		}
	}
	return 0;
}

static void release_(sw_verify *v)
{
	if (v->held) {
		v->held = 0;
		v->head++;
	}
}

/* Which verifiers apply: all, or those the sample's `verifiers` field names. */
static int route_(sw_verify *v, sw_rec *rec, unsigned char *use, sw_error *err)
{
	sw_val f, e;
	int rc = sw_rec_get(rec, "verifiers", &f);
	if (rc == SW_ENOENT) {
		memset(use, 1, v->nvf);
		return 0;
	}
	if (rc || f.type != SW_T_ARRAY)
		return sw_fail(err, SW_ETYPE, "field 'verifiers' is %s, not an array of verifier names",
		               rc ? "unreadable" : sw_type_name(f.type));
	memset(use, 0, v->nvf);
	sw_iter it;
	sw_iter_init(&it, &f);
	size_t k = 0;
	while (sw_iter_next(&it, &e) == 1) {
		k++;
		if (e.type != SW_T_STR)
			return sw_fail(err, SW_ETYPE, "field 'verifiers': entry %zu is %s, not a name", k,
			               sw_type_name(e.type));
		size_t i;
		for (i = 0; i < v->nvf; i++)
			if (strlen(v->vf[i]->name) == e.v.str.len && !memcmp(v->vf[i]->name, e.v.str.ptr, e.v.str.len))
				break;
		if (i == v->nvf)
			return sw_fail(err, SW_EINVAL, "field 'verifiers' names '%.*s', which is not a verifier here",
			               (int)(e.v.str.len > 64 ? 64 : e.v.str.len), e.v.str.ptr);
		use[i] = 1;
	}
	/* the safety rules are no sample's to choose: blocklists and hard verifiers score every one */
	for (size_t i = 0; i < v->nvf; i++)
		use[i] |= v->vf[i]->kind == K_BLOCKLIST || v->vf[i]->hard;
	return 0;
}

int sw_verify_push(sw_verify *v, sw_rec *rec, uint64_t index, sw_error *err)
{
	int rc;
	memset(err, 0, sizeof *err);
	if (!v->slots && (rc = slots_make_(v, err)))
		return rc;
	release_(v);
	if (sw_verify_full(v))
		return sw_fail(err, SW_ERANGE, "the window is full");
	slot_ *s = &v->slots[v->tail % v->window];
	const uint8_t *p;
	size_t n;
	if ((rc = sw_rec_bytes(rec, &p, &n)) || (rc = sw_rec_load(s->rec, p, n)) || (rc = sw_rec_own(s->rec))) {
		sw_fail(err, rc, "cannot copy the record");
		goto bad;
	}
	s->index = index;
	s->pending = 0;
	unsigned char use[MAX_VERIFIERS];
	if ((rc = route_(v, s->rec, use, err)))
		goto bad;
	for (size_t i = 0; i < v->nvf; i++) {
		s->names[i].len = 0;
		s->score[i] = 0;
		s->st[i] = use[i] ? ST_WAIT : ST_NONE;
		if (use[i] && v->vf[i]->kind != K_EXEC &&
		    (rc = score_now_(v, v->vf[i], s->rec, index, &s->score[i], &s->st[i], &s->names[i], err)))
			goto bad;
		if (s->st[i] == ST_WAIT)
			s->pending++;
	}
	uint64_t seq = v->tail++;
	for (size_t i = 0; i < v->nvf; i++)
		if (s->st[i] == ST_WAIT && (rc = sw_vpool_submit(v->vf[i]->pool, seq, s->rec, err)))
			return rc; /* out of memory: the set is no longer usable */
	return 0;
bad:
	err->record = index;
	return rc;
}

void sw_verify_answer(sw_verify *v, uint64_t seq, size_t vi, int ok, double score,
                       const char *names, size_t names_len, const char *why)
{
	if (seq < v->head || seq >= v->tail)
		return;
	slot_ *s = &v->slots[seq % v->window];
	if (s->st[vi] != ST_WAIT)
		return;
	s->names[vi].len = 0;
	if (ok) {
		s->st[vi] = ST_OK;
		s->score[vi] = score;
		for (size_t off = 0; off < names_len;) {
			size_t l = strlen(names + off);
			add_name_(&s->names[vi], names + off, l);
			off += l + 1;
		}
	} else {
		s->st[vi] = ST_FAIL;
		sw_buf_put(&s->names[vi], why, strlen(why) + 1);
	}
	s->pending--;
}

sw_rec *sw_verify_rec(sw_verify *v, uint64_t seq)
{
	return seq >= v->head && seq < v->tail ? v->slots[seq % v->window].rec : NULL;
}

/* The reward a hard violation gives: --min-reward, or the lowest weighted sum. */
static double min_reward_(sw_verify *v, const slot_ *s)
{
	if (v->o.min_reward_set)
		return v->o.min_reward;
	double m = 0;
	for (size_t i = 0; i < v->nvf; i++)
		if (s->st[i] != ST_NONE)
			m += fmin(v->vf[i]->weight * v->vf[i]->lo, v->vf[i]->weight * v->vf[i]->hi);
	return m;
}

/*
 * Text from a verifier (a violation's name, why it failed: an exec worker's
 * reply, a plug-in's bytes) as a str: a str is UTF-8, so what is not becomes
 * U+FFFD (sw-stream(5)).
 */
static int put_text_(sw_buf *b, const char *t, size_t n)
{
	if (!sw_utf8_check(t, n, NULL))
		return sw_mp_put_str(b, t, n);
	sw_buf u = { 0 };
	int rc = sw_utf8_lossy(&u, t, n) ? SW_ENOMEM : sw_mp_put_str(b, (const char *)u.p, u.len);
	sw_buf_release(&u);
	return rc;
}

static int finish_(sw_verify *v, slot_ *s, sw_error *err)
{
	sw_buf *b = &v->scratch;
	int rc, failed = 0, hard = 0;
	uint32_t nv = 0;
	double sum = 0;
	const char *why = NULL;
	size_t whyi = 0;
	sw_rec_clear(v->sub);
	for (size_t i = 0; i < v->nvf; i++) {
		vf_ *f = v->vf[i];
		if (s->st[i] == ST_FAIL) {
			if (!failed)
				why = (const char *)s->names[i].p, whyi = i;
			failed++;
			continue;
		}
		if (s->st[i] != ST_OK)
			continue;
		if ((rc = sw_rec_set_f32(v->sub, f->name, (float)s->score[i])))
			return sw_fail(err, rc, "cannot set rewards");
		sum += f->weight * s->score[i];
		int broke = s->names[i].len > 0;
		if (f->hard && !broke && f->kind != K_EXEC && f->kind != K_PLUGIN && s->score[i] < f->hi) {
			/* a hard rule without named violations is broken by falling short of full marks */
			if ((rc = add_name_(&s->names[i], f->name, strlen(f->name))))
				return sw_fail(err, rc, "out of memory");
			broke = 1;
		}
		if (f->hard && broke)
			hard = 1;
		for (size_t off = 0; off < s->names[i].len; off += strlen((char *)s->names[i].p + off) + 1)
			nv++;
	}
	if ((rc = sw_rec_set_map(s->rec, "rewards", v->sub)))
		return sw_fail(err, rc, "cannot set rewards");
	b->len = 0;
	if ((rc = sw_mp_put_array(b, nv)))
		return sw_fail(err, rc, "out of memory");
	for (size_t i = 0; i < v->nvf; i++) {
		if (s->st[i] != ST_OK)
			continue;
		for (size_t off = 0; off < s->names[i].len;) {
			const char *nm = (const char *)s->names[i].p + off;
			size_t l = strlen(nm);
			if ((rc = put_text_(b, nm, l)))
				return sw_fail(err, rc, "out of memory");
			off += l + 1;
		}
	}
	if ((rc = sw_rec_set_raw(s->rec, "violations", b->p, b->len)))
		return sw_fail(err, rc, "cannot set violations");
	if (failed) {
		char msg[400];
		int n = snprintf(msg, sizeof msg, "%s: %s", v->vf[whyi]->name, why ? why : "failed");
		if (n < 0 || (size_t)n >= sizeof msg)
			n = (int)sizeof msg - 1;
		b->len = 0;
		if ((rc = put_text_(b, msg, (size_t)n)) || (rc = sw_rec_set_raw(s->rec, "verifier_error", b->p, b->len)))
			return sw_fail(err, rc, "cannot set verifier_error");
		rc = sw_rec_del(s->rec, "reward"); /* never a default, nor a stale, reward */
		if (!v->failed++) {
			memcpy(v->first_failure, msg, (size_t)n);
			v->first_failure[n] = 0;
			v->first_failed = v->done;
		}
	} else {
		if ((rc = sw_rec_set_f32(s->rec, "reward", (float)(hard ? min_reward_(v, s) : sum))))
			return sw_fail(err, rc, "cannot set reward");
		rc = sw_rec_del(s->rec, "verifier_error");
	}
	if (rc && rc != SW_ENOENT)
		return sw_fail(err, rc, "cannot edit the record");
	v->done++;
	return 0;
}

/* Watch the exec pools for at most timeout seconds (< 0: until something happens). */
static int pump_(sw_verify *v, double timeout, sw_error *err)
{
	size_t need = 0;
	for (size_t i = 0; i < v->nvf; i++)
		if (v->vf[i]->pool)
			need += sw_vpool_nfds(v->vf[i]->pool);
	if (!need)
		return 0;
	if (need > v->pfd_cap) {
		struct pollfd *p = realloc(v->pfd, need * sizeof *p);
		if (!p)
			return sw_fail(err, SW_ENOMEM, "out of memory");
		v->pfd = p;
		v->pfd_cap = need;
	}
	size_t n = 0, at[MAX_VERIFIERS + 1];
	double deadline = 0;
	for (size_t i = 0; i < v->nvf; i++) {
		at[i] = n;
		if (v->vf[i]->pool)
			n += sw_vpool_watch(v->vf[i]->pool, v->pfd + n, need - n, &deadline);
	}
	at[v->nvf] = n;
	int ms = timeout < 0 ? -1 : (int)(timeout * 1000);
	if (deadline > 0) {
		double left = deadline - sw_now();
		int dms = left <= 0 ? 0 : (int)(left * 1000) + 1;
		if (ms < 0 || dms < ms)
			ms = dms;
	}
	int r = poll(v->pfd, n, ms);
	if (r < 0 && errno != EINTR)
		return sw_fail(err, SW_EIO, "poll: %s", strerror(errno));
	for (size_t i = 0; i < v->nvf; i++) {
		int rc;
		if (v->vf[i]->pool &&
		    (rc = sw_vpool_service(v->vf[i]->pool, v->pfd + at[i], at[i + 1] - at[i], err)))
			return rc;
	}
	return 0;
}

int sw_verify_pop(sw_verify *v, sw_rec **out, int block, sw_error *err)
{
	int rc;
	release_(v);
	if (v->head == v->tail)
		return 0;
	slot_ *s = &v->slots[v->head % v->window];
	if (s->pending && (rc = pump_(v, 0, err)))
		return rc;
	while (s->pending && block)
		if ((rc = pump_(v, -1, err)))
			return rc;
	if (s->pending)
		return 0;
	if ((rc = finish_(v, s, err))) {
		err->record = s->index;
		return rc;
	}
	v->held = 1;
	*out = s->rec;
	return 1;
}
