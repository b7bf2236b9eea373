/*
 * verify_builtin.c - the text work of the built-in verifiers that is more
 * than a library call: final-answer extraction and numeric comparison for
 * `math`, the arithmetic checker of `countdown`, and DAPO's overlong
 * penalty for `length`.  Pure functions of their arguments, so the unit
 * tests drive them directly.
 */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "verify/verify_internal.h"

/* ---- math: the final answer ---- */

static const char *rfind_(const char *s, size_t n, const char *pat)
{
	size_t m = strlen(pat);
	if (m > n)
		return NULL;
	for (size_t i = n - m + 1; i-- > 0;)
		if (!memcmp(s + i, pat, m))
			return s + i;
	return NULL;
}

static long put_trim_(const char *s, size_t n, char *out, size_t cap)
{
	while (n && isspace((unsigned char)*s))
		s++, n--;
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (!n || n >= cap)
		return -1;
	memcpy(out, s, n);
	out[n] = 0;
	return (long)n;
}

long sw_math_answer(const char *s, size_t n, char *out, size_t cap)
{
	/* \boxed{...}: the last one whose braces close */
	const char *end = s + n;
	for (size_t lim = n; lim;) {
		const char *b = rfind_(s, lim, "\\boxed");
		if (!b)
			break;
		const char *p = b + 6;
		while (p < end && *p == ' ')
			p++;
		if (p < end && *p == '{') {
			int depth = 0;
			const char *q = p;
			for (; q < end; q++) {
				if (*q == '{')
					depth++;
				else if (*q == '}' && --depth == 0)
					break;
			}
			if (q < end) {
				long r = put_trim_(p + 1, (size_t)(q - p - 1), out, cap);
				if (r >= 0)
					return r;
			}
		}
		lim = (size_t)(b - s);
	}
	/* GSM8K: "#### 72" */
	const char *h = rfind_(s, n, "####");
	if (h) {
		const char *p = h + 4, *q = p;
		while (q < end && *q != '\n')
			q++;
		long r = put_trim_(p, (size_t)(q - p), out, cap);
		if (r >= 0)
			return r;
	}
	/* the last number: -?digits with , groups, .digits, /digits */
	for (size_t i = n; i-- > 0;) {
		if (!isdigit((unsigned char)s[i]))
			continue;
		size_t e = i + 1, b = i;
		while (b > 0 && (isdigit((unsigned char)s[b - 1]) ||
		                 ((s[b - 1] == ',' || s[b - 1] == '.' || s[b - 1] == '/') && b >= 2 &&
		                  isdigit((unsigned char)s[b - 2]))))
			b--;
		if (b > 0 && s[b - 1] == '-')
			b--;
		return put_trim_(s + b, e - b, out, cap);
	}
	return -1;
}

static size_t normalise_(const char *s, size_t n, char *out, size_t cap);

/* Copy s without what does not change a value: spaces, $, \!, \, \; thousands commas,
 * \left \right, \text{...} units, a trailing period or %. */
static size_t normalise_(const char *s, size_t n, char *out, size_t cap)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++) {
		char c = s[i];
		if (isspace((unsigned char)c) || c == '$')
			continue;
		if (c == '\\' && i + 1 < n && strchr("!,;: $%", s[i + 1])) {
			i++;
			if (s[i] == '%' && k + 1 < cap)
				out[k++] = '%';
			continue;
		}
		if (c == '\\' && (!strncmp(s + i, "\\left", 5) || !strncmp(s + i, "\\right", 6))) {
			i += s[i + 1] == 'l' ? 4 : 5;
			continue;
		}
		if (c == '\\' && (!strncmp(s + i, "\\text{", 6) || !strncmp(s + i, "\\mbox{", 6) ||
		                  !strncmp(s + i, "\\mathrm{", 8))) {
			/* a unit: drop it with its braces */
			const char *o = memchr(s + i, '{', n - i);
			const char *c2 = o ? memchr(o, '}', n - (size_t)(o - s)) : NULL;
			if (c2) {
				/* alone it is the answer ("\\text{(B)}"): keep what it says */
				if (k == 0)
					k = normalise_(o + 1, (size_t)(c2 - o - 1), out, cap);
				i = (size_t)(c2 - s);
				continue;
			}
		}
		if (c == ',' && k && isdigit((unsigned char)out[k - 1]) && i + 3 < n + 0 &&
		    isdigit((unsigned char)s[i + 1]) && isdigit((unsigned char)s[i + 2]) &&
		    isdigit((unsigned char)s[i + 3]) && (i + 4 >= n || !isdigit((unsigned char)s[i + 4])))
			continue;
		out[k++] = c;
	}
	while (k && (out[k - 1] == '.' || out[k - 1] == '%'))
		k--;
	out[k] = 0;
	return k;
}

/* A plain decimal number: the whole of s. */
static int decimal_(const char *s, size_t n, double *x)
{
	char buf[128];
	if (!n || n >= sizeof buf)
		return -1;
	memcpy(buf, s, n);
	buf[n] = 0;
	size_t i = 0;
	if (buf[i] == '-' || buf[i] == '+')
		i++;
	int digits = 0;
	for (; isdigit((unsigned char)buf[i]); i++)
		digits++;
	if (buf[i] == '.')
		for (i++; isdigit((unsigned char)buf[i]); i++)
			digits++;
	if (!digits)
		return -1;
	if (buf[i] == 'e' || buf[i] == 'E') {
		size_t j = i + 1;
		if (buf[j] == '-' || buf[j] == '+')
			j++;
		if (!isdigit((unsigned char)buf[j]))
			return -1;
		for (; isdigit((unsigned char)buf[j]); j++)
			;
		i = j;
	}
	if (buf[i])
		return -1;
	*x = strtod(buf, NULL);
	return isfinite(*x) ? 0 : -1;
}

/* {x} or a single digit after \frac: the argument's span */
static int frac_arg_(const char *s, size_t n, size_t *i, const char **a, size_t *an)
{
	if (*i >= n)
		return -1;
	if (s[*i] == '{') {
		int depth = 0;
		for (size_t j = *i; j < n; j++) {
			if (s[j] == '{')
				depth++;
			else if (s[j] == '}' && --depth == 0) {
				*a = s + *i + 1;
				*an = j - *i - 1;
				*i = j + 1;
				return 0;
			}
		}
		return -1;
	}
	if (isdigit((unsigned char)s[*i])) {
		*a = s + *i;
		*an = 1;
		++*i;
		return 0;
	}
	return -1;
}

int sw_math_number(const char *s, size_t n, double *x)
{
	char buf[256];
	n = normalise_(s, n, buf, sizeof buf);
	s = buf;
	int neg = 0;
	size_t i = 0;
	if (n && (s[0] == '-' || s[0] == '+')) {
		neg = s[0] == '-';
		i = 1;
	}
	const char *fr[] = { "\\frac", "\\dfrac", "\\tfrac" };
	for (size_t k = 0; k < 3; k++) {
		size_t m = strlen(fr[k]);
		if (n - i > m && !strncmp(s + i, fr[k], m)) {
			size_t j = i + m;
			const char *a, *b;
			size_t an, bn;
			double p, q;
			if (frac_arg_(s, n, &j, &a, &an) || frac_arg_(s, n, &j, &b, &bn) || j != n ||
			    sw_math_number(a, an, &p) || sw_math_number(b, bn, &q) || q == 0)
				return -1;
			*x = neg ? -p / q : p / q;
			return 0;
		}
	}
	const char *slash = memchr(s + i, '/', n - i);
	if (slash) {
		double p, q;
		if (decimal_(s + i, (size_t)(slash - s - i), &p) ||
		    decimal_(slash + 1, n - (size_t)(slash + 1 - s), &q) || q == 0)
			return -1;
		*x = neg ? -p / q : p / q;
		return 0;
	}
	if (decimal_(s + i, n - i, x))
		return -1;
	if (neg)
		*x = -*x;
	return 0;
}

int sw_math_equal(const char *a, size_t an, const char *b, size_t bn, double tol)
{
	double x, y;
	if (!sw_math_number(a, an, &x) && !sw_math_number(b, bn, &y)) {
		double scale = fmax(1.0, fmax(fabs(x), fabs(y)));
		return fabs(x - y) <= tol * scale;
	}
	char na[256], nb[256];
	size_t la = normalise_(a, an, na, sizeof na), lb = normalise_(b, bn, nb, sizeof nb);
	return la && la == lb && !memcmp(na, nb, la);
}

/* ---- countdown: exact rational arithmetic ---- */

typedef struct { long long p, q; } rat_;

typedef struct cd_ {
	const char *s;
	size_t n, i;
	long long used[64];
	size_t nused;
	int bad;
} cd_;

static long long gcd_(long long a, long long b)
{
	if (a < 0)
		a = -a;
	if (b < 0)
		b = -b;
	while (b) {
		long long t = a % b;
		a = b;
		b = t;
	}
	return a ? a : 1;
}

static rat_ norm_(cd_ *c, long long p, long long q)
{
	if (q == 0) {
		c->bad = 1;
		return (rat_){ 0, 1 };
	}
	if (q < 0) {
		if (p == LLONG_MIN || q == LLONG_MIN) {
			c->bad = 1;
			return (rat_){ 0, 1 };
		}
		p = -p, q = -q;
	}
	long long g = gcd_(p, q);
	return (rat_){ p / g, q / g };
}

static void ws_(cd_ *c)
{
	while (c->i < c->n && isspace((unsigned char)c->s[c->i]))
		c->i++;
}

static rat_ expr_(cd_ *c, int depth);

static rat_ atom_(cd_ *c, int depth)
{
	ws_(c);
	if (c->i >= c->n || depth > 64) {
		c->bad = 1;
		return (rat_){ 0, 1 };
	}
	if (c->s[c->i] == '(') {
		c->i++;
		rat_ r = expr_(c, depth + 1);
		ws_(c);
		if (c->i >= c->n || c->s[c->i] != ')')
			c->bad = 1;
		else
			c->i++;
		return r;
	}
	if (!isdigit((unsigned char)c->s[c->i])) {
		c->bad = 1;
		return (rat_){ 0, 1 };
	}
	long long v = 0;
	while (c->i < c->n && isdigit((unsigned char)c->s[c->i])) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c->s[c->i] - '0', &v)) {
			c->bad = 1;
			return (rat_){ 0, 1 };
		}
		c->i++;
	}
	if (c->nused < sizeof c->used / sizeof *c->used)
		c->used[c->nused++] = v;
	else
		c->bad = 1;
	return (rat_){ v, 1 };
}

static rat_ unary_(cd_ *c, int depth)
{
	ws_(c);
	if (c->i < c->n && c->s[c->i] == '-') {
		c->i++;
		rat_ r = unary_(c, depth + 1);
		return norm_(c, -r.p, r.q);
	}
	return atom_(c, depth);
}

static rat_ term_(cd_ *c, int depth)
{
	rat_ a = unary_(c, depth);
	for (;;) {
		ws_(c);
		if (c->bad || c->i >= c->n || (c->s[c->i] != '*' && c->s[c->i] != '/'))
			return a;
		char op = c->s[c->i++];
		rat_ b = unary_(c, depth);
		long long p = 0, q = 1;
		if (op == '*') {
			if (__builtin_mul_overflow(a.p, b.p, &p) || __builtin_mul_overflow(a.q, b.q, &q))
				c->bad = 1;
		} else {
			if (__builtin_mul_overflow(a.p, b.q, &p) || __builtin_mul_overflow(a.q, b.p, &q))
				c->bad = 1;
		}
		if (c->bad)
			return a;
		a = norm_(c, p, q);
	}
}

static rat_ expr_(cd_ *c, int depth)
{
	rat_ a = term_(c, depth);
	for (;;) {
		ws_(c);
		if (c->bad || c->i >= c->n || (c->s[c->i] != '+' && c->s[c->i] != '-'))
			return a;
		char op = c->s[c->i++];
		rat_ b = term_(c, depth);
		long long x = 0, y = 0, q = 1;
		if (__builtin_mul_overflow(a.p, b.q, &x) || __builtin_mul_overflow(b.p, a.q, &y) ||
		    __builtin_mul_overflow(a.q, b.q, &q) ||
		    (op == '+' ? __builtin_add_overflow(x, y, &x) : __builtin_sub_overflow(x, y, &x))) {
			c->bad = 1;
			return a;
		}
		a = norm_(c, x, q);
	}
}

static int cmp_ll_(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

int sw_countdown_check(const char *expr, size_t n, const long long *numbers, size_t count,
                       long long target)
{
	cd_ c = { expr, n, 0, { 0 }, 0, 0 };
	/* "expr = value": the left side is the expression */
	const char *eq = memchr(expr, '=', n);
	if (eq)
		c.n = (size_t)(eq - expr);
	for (size_t i = 0; i < c.n; i++)
		if (!strchr("0123456789+-*/() \t\r\n", expr[i]))
			return -1;
	rat_ r = expr_(&c, 0);
	ws_(&c);
	if (c.bad || c.i != c.n || c.nused == 0)
		return -1;
	if (c.nused != count || count > 64)
		return 0;
	long long want[64];
	memcpy(want, numbers, count * sizeof *want);
	qsort(want, count, sizeof *want, cmp_ll_);
	qsort(c.used, count, sizeof *c.used, cmp_ll_);
	if (memcmp(want, c.used, count * sizeof *want))
		return 0;
	return r.q == 1 && r.p == target;
}

/* ---- length: DAPO's soft overlong punishment ---- */

double sw_length_penalty(uint64_t len, uint64_t max, uint64_t buffer)
{
	/* 0 up to max - buffer, then falling linearly to -1 at max, -1 beyond */
	uint64_t expected = max > buffer ? max - buffer : 0;
	if (len <= expected)
		return 0.0;
	if (len <= max)
		return buffer ? ((double)expected - (double)len) / (double)buffer : 0.0;
	return -1.0;
}
