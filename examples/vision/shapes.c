/*
 * shapes.c - sw-shapes, the vision demo's data: pictures of coloured
 * squares and circles on a plain background, and the question "How many
 * red squares are there?" with its answer, for the `math` verifier.
 *
 * Each picture holds a few shapes of a few colours, none touching another;
 * the question names one colour and one shape, and the answer (0 to 3) is
 * how many of them the picture holds.  The pictures are PNGs in DIR/images/;
 * the prompts are JSON Lines whose media item names the PNG by a path
 * relative to the directory the generator ran in (DIR as given, then
 * images/NAME.png), which is where libsw resolves it:
 *
 *   DIR/train.jsonl   {"id", "prompt": "<image>\nHow many red squares are there?",
 *                      "label": "2", "media": [{"type": "image", "path": "DIR/images/t1.png"}]}
 *   DIR/eval.jsonl    held-out prompts, pictures of their own
 *   DIR/sft.jsonl     the train prompts with the answer as response (and the
 *                     end-of-sequence text of -E), for a warm start
 *
 * Everything comes from one seeded splitmix64 stream and integer geometry,
 * so the same seed gives the same pictures and lines on every machine.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sw/sw.h"

#define PROG "sw-shapes"
#define MAX_SHAPES 6

static const char usage_[] =
	"usage: " PROG " [-h] [-E eos] [-e count] [-n count] [-p text] [-q colour-shape] [-S size] [-s seed] dir\n";

static void help_(void)
{
	fputs(usage_, stdout);
	fputs("\nWrite pictures of coloured squares and circles, and prompts asking how many of one\n"
	      "kind each holds, into DIR (train.jsonl, eval.jsonl, sft.jsonl and images/).\n\n"
	      "  -E eos            text after the answer in sft.jsonl's responses (default <|eos|>)\n"
	      "  -e count          held-out prompts (default 200)\n"
	      "  -n count          training prompts (default 1000)\n"
	      "  -p text           the image placeholder that starts each prompt (default <image>)\n"
	      "  -q colour-shape   always ask about this kind, e.g. red-square (default: a kind drawn\n"
	      "                    for each picture from red, green, blue x square, circle)\n"
	      "  -S size           pictures of size x size pixels, 16 to 1024 (default 30)\n"
	      "  -s seed           seed of the generator (default 1); the same seed gives the same files\n",
	      stdout);
}

static const char *const colour_names_[] = { "red", "green", "blue" };
static const uint8_t colours_[][3] = { { 220, 30, 30 }, { 30, 170, 50 }, { 40, 60, 220 } };
static const char *const shape_names_[] = { "square", "circle" };
#define NCOL 3
#define NSHAPE 2

static uint64_t next_(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A number in [0, n). */
static int below_(uint64_t *s, int n)
{
	return (int)(next_(s) % (uint64_t)n);
}

typedef struct shape_ {
	int x, y, d, colour, kind; /* top-left corner, side (or diameter) */
} shape_;

static void die_(const char *msg, const char *what)
{
	fprintf(stderr, PROG ": %s%s%s\n", msg, what ? ": " : "", what ? what : "");
	exit(1);
}

static void draw_(uint8_t *px, int size, const shape_ *s)
{
	for (int y = s->y; y < s->y + s->d; y++)
		for (int x = s->x; x < s->x + s->d; x++) {
			/* a circle: the pixel's centre within the diameter, in doubled integer units */
			int dx = 2 * (x - s->x) + 1 - s->d, dy = 2 * (y - s->y) + 1 - s->d;
			if (s->kind == 1 && dx * dx + dy * dy > s->d * s->d)
				continue;
			memcpy(px + ((size_t)y * size + x) * 3, colours_[s->colour], 3);
		}
}

/*
 * One picture and its question: the asked kind appears 0 to 3 times, other
 * kinds fill up to MAX_SHAPES - 1 more; *answer is the count.
 */
static void picture_(uint64_t *rng, int size, int qcol, int qkind, uint8_t *px, int *col, int *kind,
                     int *answer)
{
	*col = qcol >= 0 ? qcol : below_(rng, NCOL);
	*kind = qkind >= 0 ? qkind : below_(rng, NSHAPE);
	int want = below_(rng, 4), others = below_(rng, 4);
	/* a plain background, lightly tinted */
	uint8_t bg[3] = { (uint8_t)(235 + below_(rng, 16)), (uint8_t)(235 + below_(rng, 16)),
		          (uint8_t)(235 + below_(rng, 16)) };
	for (size_t i = 0; i < (size_t)size * size; i++)
		memcpy(px + 3 * i, bg, 3);
	shape_ s[MAX_SHAPES];
	int n = 0, placed = 0;
	int dmin = size / 6 > 3 ? size / 6 : 3, dmax = size / 4 > dmin ? size / 4 : dmin;
	for (int i = 0; i < want + others; i++) {
		shape_ t;
		if (i < want)
			t.colour = *col, t.kind = *kind;
		else
			do {
				t.colour = below_(rng, NCOL), t.kind = below_(rng, NSHAPE);
			} while (t.colour == *col && t.kind == *kind);
		/* a free place, one pixel of background around every shape */
		int ok = 0;
		for (int tries = 0; tries < 200 && !ok; tries++) {
			t.d = dmin + below_(rng, dmax - dmin + 1);
			t.x = below_(rng, size - t.d + 1), t.y = below_(rng, size - t.d + 1);
			ok = 1;
			for (int j = 0; j < n && ok; j++)
				ok = t.x + t.d + 1 <= s[j].x || s[j].x + s[j].d + 1 <= t.x || t.y + t.d + 1 <= s[j].y ||
				     s[j].y + s[j].d + 1 <= t.y;
		}
		if (!ok)
			continue; /* the picture is full: fewer distractors, and the answer counts what is drawn */
		s[n++] = t;
		placed += i < want;
	}
	for (int i = 0; i < n; i++)
		draw_(px, size, &s[i]);
	*answer = placed;
}

static void put_str_(sw_rec *r, const char *key, const char *s)
{
	if (sw_rec_set_str(r, key, s, strlen(s)))
		die_("out of memory", NULL);
}

/* One split: count pictures named PREFIXi.png, their prompts to split.jsonl (and sft). */
static void split_(const char *dir, const char *name, char prefix, int count, uint64_t *rng, int size,
                   int qcol, int qkind, const char *placeholder, const char *eos, int sft)
{
	char path[4096], img[4096], text[512];
	sw_error err = { 0 };
	sw_writer_opts wo = { SW_FMT_JSON, 0 };
	snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
	sw_writer *w = sw_writer_open(path, &wo, &err), *ws = NULL;
	if (!w)
		die_(err.msg, NULL);
	if (sft) {
		snprintf(path, sizeof path, "%s/sft.jsonl", dir);
		if (!(ws = sw_writer_open(path, &wo, &err)))
			die_(err.msg, NULL);
	}
	sw_image im = { size, size, 3, malloc((size_t)size * size * 3) };
	sw_rec *r = sw_rec_new(), *item = sw_rec_new();
	if (!im.data || !r || !item)
		die_("out of memory", NULL);
	for (int i = 1; i <= count; i++) {
		int col, kind, answer;
		picture_(rng, size, qcol, qkind, im.data, &col, &kind, &answer);
		snprintf(img, sizeof img, "%s/images/%c%d.png", dir, prefix, i);
		if (sw_image_write_png(img, &im, &err))
			die_(err.msg, NULL);
		sw_rec_clear(r);
		sw_rec_clear(item);
		snprintf(text, sizeof text, "%c%d", prefix, i);
		put_str_(r, "id", text);
		snprintf(text, sizeof text, "%s\nHow many %s %ss are there?", placeholder, colour_names_[col],
		         shape_names_[kind]);
		put_str_(r, "prompt", text);
		snprintf(text, sizeof text, "%d", answer);
		put_str_(r, "label", text);
		/* media: an array of one {type, path} map */
		put_str_(item, "type", "image");
		put_str_(item, "path", img);
		const uint8_t *ib;
		size_t in;
		uint8_t *arr = NULL;
		if (sw_rec_bytes(item, &ib, &in) || !(arr = malloc(in + 1)))
			die_("out of memory", NULL);
		arr[0] = 0x91;
		memcpy(arr + 1, ib, in);
		if (sw_rec_set_raw(r, "media", arr, in + 1))
			die_("cannot encode the media item", NULL);
		free(arr);
		if (sw_writer_put(w, r))
			die_(sw_writer_error(w)->msg, NULL);
		if (ws) {
			snprintf(text, sizeof text, "%d%s", answer, eos);
			put_str_(r, "response", text);
			sw_rec_del(r, "label");
			if (sw_writer_put(ws, r))
				die_(sw_writer_error(ws)->msg, NULL);
		}
	}
	if (sw_writer_close(w) || (ws && sw_writer_close(ws)))
		die_("cannot write the prompts", path);
	sw_writer_free(w);
	sw_writer_free(ws);
	sw_rec_free(r);
	sw_rec_free(item);
	sw_image_release(&im);
}

static int number_(const char *opt, const char *s, int lo, int hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, PROG ": %s: '%s' is not a number from %d to %d\n%s", opt, s, lo, hi, usage_);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	int ntrain = 1000, neval = 200, size = 30, qcol = -1, qkind = -1, c;
	uint64_t seed = 1;
	const char *placeholder = "<image>", *eos = "<|eos|>";
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help")) {
			help_();
			return 0;
		}
	while ((c = getopt(argc, argv, "hE:e:n:p:q:S:s:")) != -1) {
		switch (c) {
		case 'h':
			help_();
			return 0;
		case 'E': eos = optarg; break;
		case 'e': neval = number_("-e", optarg, 0, 1000000); break;
		case 'n': ntrain = number_("-n", optarg, 0, 1000000); break;
		case 'p': placeholder = optarg; break;
		case 'S': size = number_("-S", optarg, 16, 1024); break;
		case 's': seed = (uint64_t)number_("-s", optarg, 0, 2000000000); break;
		case 'q': {
			for (int k = 0; k < NCOL * NSHAPE && qcol < 0; k++) {
				char kind[32];
				snprintf(kind, sizeof kind, "%s-%s", colour_names_[k / NSHAPE], shape_names_[k % NSHAPE]);
				if (!strcmp(kind, optarg))
					qcol = k / NSHAPE, qkind = k % NSHAPE;
			}
			if (qcol < 0) {
				fprintf(stderr, PROG ": -q: '%s' is not one of red|green|blue-square|circle\n%s", optarg,
				        usage_);
				return 2;
			}
			break;
		}
		default:
			fputs(usage_, stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, PROG ": %s\n%s", optind < argc ? "one directory only" : "no directory", usage_);
		return 2;
	}
	const char *dir = argv[optind];
	char path[4096];
	snprintf(path, sizeof path, "%s/images", dir);
	if ((mkdir(dir, 0777) && errno != EEXIST) || (mkdir(path, 0777) && errno != EEXIST)) {
		fprintf(stderr, PROG ": cannot make '%s': %s\n", path, strerror(errno));
		return 1;
	}
	/* the splits draw from streams of their own: -n does not change the held-out pictures */
	uint64_t rt = seed * 2 + 1, re = seed * 2 + 2;
	next_(&rt), next_(&re);
	split_(dir, "train", 't', ntrain, &rt, size, qcol, qkind, placeholder, eos, 1);
	split_(dir, "eval", 'e', neval, &re, size, qcol, qkind, placeholder, eos, 0);
	return 0;
}
