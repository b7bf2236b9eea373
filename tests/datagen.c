/*
 * datagen.c - sw-datagen, a deterministic generator of realistic sample
 * records for the tests and the benchmarks (in the spirit of zstd's datagen).
 *
 * Each record looks like what sw-rollout and sw-verify would leave behind
 * for a math prompt: English-like prompt and response text with numbers,
 * newlines, quotes and a little non-ASCII; token ids with a long-tailed
 * distribution; per-token log-probabilities that are mostly close to zero
 * with a heavy tail, as a sampled policy's are; a finish reason; per-verifier
 * rewards and their combination.  Prompts come in groups of GROUP responses
 * that share the prompt, as rollout writes them.
 *
 * Two options shape a batch for the balancing benchmarks: -l draws response
 * lengths from a log-normal (median -t, a long tail, at most 8192 tokens),
 * -i gives that share of the prompts an image (its w and h in the record's
 * media), which a group's responses share.  Without them the output is
 * what it always was.
 *
 * Everything comes from one seeded splitmix64 stream, with only exact IEEE
 * arithmetic on top (no rand(), no libm transcendental functions), so the
 * same seed gives the same bytes on every machine, and a shorter run is a
 * prefix of a longer one whatever -n or -b says.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sw.h"

#define PROG "sw-datagen"
#define GROUP 8          /* responses per prompt */
#define VOCAB 50000      /* token ids are below this */
#define MAX_TOKENS 1000000

static const char usage_[] =
	"usage: " PROG " [-hl] [-b bytes] [-f format] [-i percent] [-n records] [-s seed] [-t tokens]\n";

static void help_(void)
{
	fputs(usage_, stdout);
	fputs("\nWrite a deterministic stream of realistic sample records to standard output.\n\n"
	      "  -b bytes     stop once at least this many bytes are written (K, M, G suffixes)\n"
	      "  -f format    msgpack (default) or json (JSON Lines)\n"
	      "  -n records   stop after this many records (default 1000 when -b is not given)\n"
	      "  -s seed      seed of the generator (default 1); the same seed gives the same bytes\n"
	      "  -t tokens    mean response length in tokens, varied by +-30% (default 300)\n"
	      "  -l           log-normal response lengths instead: median -t, sigma 1, at most 8192\n"
	      "  -i percent   this share of the prompts come with an image (media: w, h)\n"
	      "  -h           print this help and exit\n\n"
	      "With both -n and -b, whichever limit is reached first ends the stream.\n"
	      "Msgpack is not written to a terminal.\n", stdout);
}

static _Noreturn void usage_error_(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", usage_);
	exit(2);
}

static _Noreturn void die_(const char *what, const sw_error *e)
{
	if (e && (e->code == SW_EPIPE || e->sys_errno == EPIPE)) {
		/* the reader went away: end as quietly as a default SIGPIPE would */
		signal(SIGPIPE, SIG_DFL);
		raise(SIGPIPE);
		exit(1);
	}
	if (e)
		fprintf(stderr, PROG ": %s: %s\n", what, e->msg[0] ? e->msg : sw_strerror(e->code));
	else
		fprintf(stderr, PROG ": %s\n", what);
	exit(1);
}

/* A whole number from an option argument, with an optional K, M or G (powers of 1024). */
static uint64_t number_(const char *opt, const char *s, uint64_t min, uint64_t max, int suffix)
{
	char *end;
	char what[128];
	snprintf(what, sizeof what, "'%s' wants a whole number from %" PRIu64 " to %" PRIu64 ", not '%%s'",
	         opt, min, max);
	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		usage_error_(what, s);
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || end == s)
		usage_error_(what, s);
	unsigned shift = 0;
	if (suffix && *end) {
		switch (*end) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		default: usage_error_(what, s);
		}
		end++;
	}
	if (*end || (shift && x > (UINT64_MAX >> shift)))
		usage_error_(what, s);
	x <<= shift;
	if (x < min || x > max)
		usage_error_(what, s);
	return x;
}

/* ---- the random stream ---- */

typedef struct rng { uint64_t s; } rng;

static uint64_t next_(rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double unif_(rng *r)
{
	return (double)(next_(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n > 0 (the slight modulo bias is of no concern here). */
static uint32_t below_(rng *r, uint32_t n)
{
	return (uint32_t)(next_(r) % n);
}

/*
 * The natural logarithm of x > 0 by frexp (exact) and the atanh series, so
 * that it gives the same bits everywhere, unlike libm's log.
 */
static double ln_(double x)
{
	int e;
	double m = frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
	if (m < 0.70710678118654752) {
		m *= 2;
		e--;
	}
	double s = (m - 1) / (m + 1), s2 = s * s, term = s, sum = 0;
	for (int k = 1; k < 30; k += 2) {
		sum += term / k;
		term *= s2;
	}
	return 2 * sum + e * 0.69314718055994531;
}

/*
 * e^x by range reduction to r in [-ln2/2, ln2/2] and its Taylor series,
 * exact IEEE arithmetic only, for the same reason as ln_.
 */
static double exp_(double x)
{
	double k = floor(x / 0.69314718055994531 + 0.5), r = x - k * 0.69314718055994531, term = 1, sum = 1;
	for (int i = 1; i < 25; i++) {
		term *= r / i;
		sum += term;
	}
	return ldexp(sum, (int)k);
}

/* A log-normal length: median * e^(sigma z), z the Irwin-Hall sum of 12 uniforms less 6 (about normal). */
static size_t lognormal_(rng *r, double median)
{
	double z = -6;
	for (int i = 0; i < 12; i++)
		z += unif_(r);
	double x = median * exp_(z);
	return x < 1 ? 1 : x > 8192 ? 8192 : (size_t)x;
}

/* Exponential with the given mean. */
static double expo_(rng *r, double mean)
{
	return -mean * ln_(1 - unif_(r)); /* 1 - u is in (0, 1] */
}

/* A token id: log-uniform over the vocabulary, so small (frequent) ids dominate, as in real text. */
static uint32_t token_(rng *r)
{
	/* exp(u * ln VOCAB) by repeated squaring would need exp; the product of
	 * uniforms gives a similar long tail with exact arithmetic */
	double u = unif_(r) * unif_(r) * unif_(r);
	uint32_t t = (uint32_t)(u * VOCAB);
	return t < VOCAB ? t : VOCAB - 1;
}

/*
 * The log-probability of a sampled token: most are nearly certain, some
 * hesitant, a few surprising; always in [-8, 0).
 */
static float logprob_(rng *r)
{
	double u = unif_(r), lp;
	if (u < 0.62)
		lp = -expo_(r, 0.01);
	else if (u < 0.92)
		lp = -expo_(r, 0.6);
	else
		lp = -1.5 - expo_(r, 1.8);
	if (lp < -7.99)
		lp = -7.99 + 0.01 * unif_(r);
	float f = (float)lp;
	return f < 0 ? f : -1e-6f;
}

/* ---- text ---- */

typedef struct text { char *p; size_t len, cap; } text;

static void put_(text *t, const char *s, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 1024;
		while (t->len + n + 1 > cap)
			cap *= 2;
		char *p = realloc(t->p, cap);
		if (!p)
			die_("out of memory", NULL);
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = 0;
}

static void puts_(text *t, const char *s)
{
	put_(t, s, strlen(s));
}

static const char *const words_[] = {
	"the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "be", "on",
	"this", "by", "are", "we", "or", "from", "at", "which", "an", "so", "if", "then", "each",
	"number", "numbers", "sum", "product", "total", "value", "values", "equal", "equals",
	"first", "second", "third", "last", "next", "step", "steps", "remaining", "left", "more",
	"less", "than", "twice", "half", "times", "per", "every", "both", "all", "only", "must",
	"can", "will", "has", "have", "had", "does", "gives", "get", "find", "compute", "solve",
	"let", "denote", "suppose", "since", "because", "therefore", "thus", "hence", "note",
	"check", "again", "now", "here", "there", "when", "where", "how", "many", "much", "what",
	"apples", "oranges", "books", "students", "class", "teacher", "store", "price", "dollars",
	"cents", "hours", "minutes", "days", "weeks", "miles", "kilometers", "speed", "distance",
	"train", "car", "tank", "water", "liters", "box", "boxes", "bag", "marbles", "red", "blue",
	"green", "cards", "deck", "probability", "chance", "coin", "dice", "triangle", "circle",
	"square", "rectangle", "area", "perimeter", "radius", "angle", "side", "sides", "length",
	"width", "height", "volume", "integer", "integers", "positive", "negative", "prime",
	"divisible", "remainder", "digits", "fraction", "percent", "ratio", "average", "mean",
	"median", "equation", "expression", "variable", "function", "root", "roots", "solution",
	"answer", "result", "original", "new", "same", "different", "smallest", "largest",
	"together", "alone", "work", "job", "rate", "cost", "costs", "sells", "buys", "spends",
	"saves", "earns", "pays", "bought", "sold", "gave", "took", "shared", "split", "among",
	"friends", "family", "garden", "farm", "trees", "eggs", "chickens", "cookies", "pizza",
	"slices", "carefully", "simply", "directly", "exactly", "about", "nearly", "at least",
	"at most", "in total", "we know", "it follows", "so far", "so that",
};

static const char *const unicode_[] = { "\xcf\x80", "\xe2\x89\xa4", "\xc3\x97", "\xe2\x88\x9a", "\xc2\xb0" };

static const char *word_(rng *r)
{
	return words_[below_(r, sizeof words_ / sizeof *words_)];
}

/* One sentence of 5 to 18 words, with numbers, now and then a comma, a quote or a symbol. */
static void sentence_(rng *r, text *t, char end)
{
	char num[32];
	int n = 5 + (int)below_(r, 14);
	for (int i = 0; i < n; i++) {
		uint32_t what = below_(r, 100);
		if (i)
			put_(t, " ", 1);
		if (what < 9) {
			int len = what < 6 ? snprintf(num, sizeof num, "%u", below_(r, 1000))
			                   : snprintf(num, sizeof num, "%u.%02u", below_(r, 100), below_(r, 100));
			put_(t, num, (size_t)len);
		} else if (what < 10) {
			puts_(t, unicode_[below_(r, sizeof unicode_ / sizeof *unicode_)]);
		} else if (what < 11) {
			puts_(t, "\"");
			puts_(t, word_(r));
			puts_(t, "\"");
		} else {
			const char *w = word_(r);
			if (i == 0) {
				char c = w[0] >= 'a' && w[0] <= 'z' ? (char)(w[0] - 'a' + 'A') : w[0];
				put_(t, &c, 1);
				puts_(t, w + 1);
			} else {
				puts_(t, w);
			}
		}
		if (i + 1 < n && below_(r, 100) < 8)
			put_(t, ",", 1);
	}
	put_(t, &end, 1);
}

/* A question of about 200 to 600 characters. */
static void prompt_(rng *r, text *t)
{
	size_t want = 200 + below_(r, 401);
	t->len = 0;
	puts_(t, "Solve the following problem and put the final answer in \\boxed{}.\n\n");
	while (t->len + 60 < want) {
		sentence_(r, t, '.');
		put_(t, " ", 1);
	}
	sentence_(r, t, '?');
}

/*
 * A response of about 4 characters a token: reasoning sentences in
 * paragraphs, then the answer, unless the generation was cut off.
 */
static void response_(rng *r, text *t, size_t tokens, int cut, uint32_t answer)
{
	size_t want = tokens * 4;
	char num[64];
	t->len = 0;
	while (t->len < want) {
		sentence_(r, t, '.');
		if (below_(r, 100) < 20)
			puts_(t, "\n\n");
		else
			puts_(t, " ");
	}
	if (cut) {
		t->len = want; /* cut mid-word, as a length limit does */
		while (t->len && (t->p[t->len - 1] & 0xc0) == 0x80)
			t->len--; /* but not inside a UTF-8 character */
		if (t->len && (unsigned char)t->p[t->len - 1] >= 0xc0)
			t->len--;
		t->p[t->len] = 0;
	} else {
		int len = snprintf(num, sizeof num, "\n\nThe answer is $\\boxed{%u}$.", answer);
		put_(t, num, (size_t)len);
	}
}

/* ---- records ---- */

typedef struct gen {
	rng r;
	uint64_t mean_tokens;
	text prompt, response;
	uint32_t *ptok, *rtok;
	float *lp;
	size_t nptok, ptok_cap, rtok_cap, lp_cap;
	uint32_t answer;      /* the group's true answer */
	int lognormal;        /* -l */
	uint32_t image_pct;   /* -i */
	uint32_t img_w, img_h; /* the group's image, 0 when none */
	sw_rec *rec, *rewards;
} gen;

static void *grow_(void *p, size_t *cap, size_t want, size_t size)
{
	if (want <= *cap)
		return p;
	size_t cap2 = *cap ? *cap : 256;
	while (cap2 < want)
		cap2 *= 2;
	void *q = realloc(p, cap2 * size);
	if (!q)
		die_("out of memory", NULL);
	*cap = cap2;
	return q;
}

static void check_(int rc)
{
	if (rc) {
		sw_error e = { .code = rc };
		die_("cannot build a record", &e);
	}
}

/* Record k: the (k % GROUP)-th response to prompt k / GROUP. */
static void record_(gen *g, uint64_t k)
{
	uint64_t p = k / GROUP, j = k % GROUP;
	rng *r = &g->r;
	char id[48], group[32];

	if (j == 0) {
		/* a new prompt, shared by the group's responses */
		prompt_(r, &g->prompt);
		g->answer = below_(r, 1000);
		g->nptok = g->prompt.len / 4 + 1;
		g->ptok = grow_(g->ptok, &g->ptok_cap, g->nptok, sizeof *g->ptok);
		for (size_t i = 0; i < g->nptok; i++)
			g->ptok[i] = token_(r);
		g->img_w = g->img_h = 0;
		if (g->image_pct && below_(r, 100) < g->image_pct) {
			/* a photo-sized image, in steps of 28 pixels, 224 to 1344 a side */
			g->img_w = 224 + 28 * below_(r, 41);
			g->img_h = 224 + 28 * below_(r, 41);
		}
	}

	/* the response length: the mean, +-30%; or log-normal */
	size_t ntok;
	if (g->lognormal) {
		ntok = lognormal_(r, (double)g->mean_tokens);
	} else {
		double f = 0.7 + 0.6 * unif_(r);
		ntok = (size_t)((double)g->mean_tokens * f + 0.5);
	}
	if (ntok < 1)
		ntok = 1;
	int cut = below_(r, 100) < 12;
	int correct = !cut && below_(r, 100) < 55;
	response_(r, &g->response, ntok, cut, correct ? g->answer : (g->answer + 1 + below_(r, 50)) % 1000);
	g->rtok = grow_(g->rtok, &g->rtok_cap, ntok, sizeof *g->rtok);
	g->lp = grow_(g->lp, &g->lp_cap, ntok, sizeof *g->lp);
	for (size_t i = 0; i < ntok; i++) {
		g->rtok[i] = token_(r);
		g->lp[i] = logprob_(r);
	}
	float format = cut ? 0.0f : (float)(0.5 + 0.5 * unif_(r));
	if (!cut && below_(r, 100) < 10)
		format = 0.0f;
	float math = correct ? 1.0f : 0.0f;

	snprintf(id, sizeof id, "p%" PRIu64 "/%" PRIu64, p, j);
	snprintf(group, sizeof group, "p%" PRIu64, p);
	sw_rec *rec = g->rec;
	sw_rec_clear(rec);
	check_(sw_rec_set_str(rec, "id", id, strlen(id)));
	check_(sw_rec_set_str(rec, "group", group, strlen(group)));
	check_(sw_rec_set_str(rec, "prompt", g->prompt.p, g->prompt.len));
	check_(sw_rec_set_u32s(rec, "prompt_tokens", g->ptok, g->nptok));
	check_(sw_rec_set_str(rec, "response", g->response.p, g->response.len));
	check_(sw_rec_set_u32s(rec, "response_tokens", g->rtok, ntok));
	check_(sw_rec_set_f32s(rec, "logprobs", g->lp, ntok));
	check_(sw_rec_set_str(rec, "finish", cut ? "length" : "stop", cut ? 6 : 4));
	check_(sw_rec_set_u64(rec, "policy_version", p / 64));
	sw_rec_clear(g->rewards);
	check_(sw_rec_set_f32(g->rewards, "math", math));
	check_(sw_rec_set_f32(g->rewards, "format", format));
	check_(sw_rec_set_map(rec, "rewards", g->rewards));
	check_(sw_rec_set_f32(rec, "reward", math + 0.2f * format));
	if (g->img_w) {
		sw_rec_clear(g->rewards); /* reused as the image's map */
		check_(sw_rec_set_str(g->rewards, "type", "image", 5));
		check_(sw_rec_set_u64(g->rewards, "w", g->img_w));
		check_(sw_rec_set_u64(g->rewards, "h", g->img_h));
		const uint8_t *ip;
		size_t in;
		check_(sw_rec_bytes(g->rewards, &ip, &in));
		uint8_t arr[64];
		if (in + 1 > sizeof arr)
			die_("image map too large", NULL);
		arr[0] = 0x91; /* an array of one */
		memcpy(arr + 1, ip, in);
		check_(sw_rec_set_raw(rec, "media", arr, in + 1));
	}
}

int main(int argc, char **argv)
{
	uint64_t nrec = UINT64_MAX, nbytes = UINT64_MAX, seed = 1;
	int c, have_n = 0, have_b = 0;
	gen g = { .mean_tokens = 300 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help")) {
			help_();
			return 0;
		} else if (!strcmp(argv[i], "--")) {
			break;
		}
	opterr = 0;
	while ((c = getopt(argc, argv, ":b:f:hi:ln:s:t:")) != -1) {
		switch (c) {
		case 'b':
			nbytes = number_("-b", optarg, 1, UINT64_MAX, 1);
			have_b = 1;
			break;
		case 'f':
			if (!strcmp(optarg, "msgpack"))
				wo.format = SW_FMT_MSGPACK;
			else if (!strcmp(optarg, "json"))
				wo.format = SW_FMT_JSON;
			else
				usage_error_("unknown format '%s' (msgpack or json)", optarg);
			break;
		case 'h':
			help_();
			return 0;
		case 'i':
			g.image_pct = (uint32_t)number_("-i", optarg, 0, 100, 0);
			break;
		case 'l':
			g.lognormal = 1;
			break;
		case 'n':
			nrec = number_("-n", optarg, 0, UINT64_MAX, 0);
			have_n = 1;
			break;
		case 's':
			seed = number_("-s", optarg, 0, UINT64_MAX, 0);
			break;
		case 't':
			g.mean_tokens = number_("-t", optarg, 1, MAX_TOKENS, 0);
			break;
		case ':': {
			char o[3] = { '-', (char)optopt, 0 };
			usage_error_("option '%s' wants an argument", o);
		}
		default: {
			char o[3] = { '-', (char)optopt, 0 };
			usage_error_("unknown option '%s'", o);
		}
		}
	}
	if (optind < argc)
		usage_error_("unexpected argument '%s'", argv[optind]);
	if (!have_n && !have_b)
		nrec = 1000;
	if (wo.format == SW_FMT_MSGPACK && isatty(1)) {
		fprintf(stderr, PROG ": refusing to write binary to a terminal (redirect it, or use -f json)\n");
		return 2;
	}

	sw_error err = { 0 };
	sw_writer *w = sw_writer_fdopen(1, "stdout", &wo, &err);
	if (!w)
		die_("stdout", &err);
	g.r.s = seed;
	g.rec = sw_rec_new();
	g.rewards = sw_rec_new();
	if (!g.rec || !g.rewards)
		die_("out of memory", NULL);

	/*
	 * Msgpack goes out as the record's own bytes, so their count is exact.
	 * JSON's length is known only once written: with a byte limit, each
	 * record is flushed so that the writer's count is exact too.
	 */
	uint64_t written = 0;
	for (uint64_t k = 0; k < nrec && written < nbytes; k++) {
		record_(&g, k);
		if (sw_writer_put(w, g.rec))
			die_("stdout", sw_writer_error(w));
		if (wo.format == SW_FMT_MSGPACK) {
			const uint8_t *p;
			size_t n;
			check_(sw_rec_bytes(g.rec, &p, &n));
			written += n;
		} else if (have_b) {
			if (sw_writer_flush(w))
				die_("stdout", sw_writer_error(w));
			written = sw_writer_bytes_out(w);
		}
	}
	if (sw_writer_close(w))
		die_("stdout", sw_writer_error(w));
	sw_writer_free(w);
	sw_rec_free(g.rec);
	sw_rec_free(g.rewards);
	free(g.prompt.p);
	free(g.response.p);
	free(g.ptok);
	free(g.rtok);
	free(g.lp);
	return 0;
}
