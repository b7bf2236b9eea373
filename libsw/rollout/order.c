/*
 * order.c - the rollout's samples go out in the order of the input (prompt
 * by prompt, response k after response k-1), not in the order they finish.
 *
 * Which response finishes first depends on how fast the input arrives and
 * so on what shared a step; a trainer downstream sums what it reads in
 * order, so a repeated or resumed run must see the same order to reach the
 * same weights.  A finished sample waits here until those before it are
 * out: at most the samples in flight.  Keys are index * G + k; prompts
 * skipped as invalid have no samples and leave no gap.
 */
#include <stdlib.h>
#include <string.h>
#include "rollout_internal.h"

typedef struct held_ {
	uint64_t key;
	uint8_t *p;
	size_t n;
} held_;

struct sw_rollout_order {
	uint64_t G;
	held_ *held;
	size_t nheld, cap;
	uint64_t next_key;
	uint64_t out;              /* samples handed out */
	uint64_t *skipped;         /* indices of skipped prompts, ascending */
	size_t nskipped, skipcap, skip_at;
};

sw_rollout_order *sw_rollout_order_new(uint64_t G)
{
	sw_rollout_order *o = calloc(1, sizeof *o);
	if (o)
		o->G = G;
	return o;
}

void sw_rollout_order_free(sw_rollout_order *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->nheld; i++)
		free(o->held[i].p);
	free(o->held);
	free(o->skipped);
	free(o);
}

static int emit_(sw_rollout_order *o, const sw_rollout_io *io, const held_ *h, sw_error *err)
{
	int rc = io->put(io->ctx, h->p, h->n);
	o->out++;
	return rc ? sw_fail(err, rc < 0 ? rc : SW_EIO, "the output refused a sample") : 0;
}

/* Hand out every held sample whose turn has come. */
static int advance_(sw_rollout_order *o, const sw_rollout_io *io, sw_error *err)
{
	for (;;) {
		uint64_t idx = o->next_key / o->G;
		while (o->skip_at < o->nskipped && o->skipped[o->skip_at] < idx)
			o->skip_at++;
		if (o->skip_at < o->nskipped && o->skipped[o->skip_at] == idx) {
			o->next_key = (idx + 1) * o->G;
			continue;
		}
		size_t i;
		for (i = 0; i < o->nheld && o->held[i].key != o->next_key; i++)
			;
		if (i == o->nheld)
			return 0;
		held_ h = o->held[i];
		o->held[i] = o->held[--o->nheld];
		o->next_key++;
		int rc = emit_(o, io, &h, err);
		free(h.p);
		if (rc)
			return rc;
	}
}

/* v (n elements of size bytes, room for *cap) with room for one more; NULL when out of memory. */
static void *grow_(void *v, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return v;
	size_t c = *cap ? 2 * *cap : 64;
	void *x = realloc(v, size * c);
	if (x)
		*cap = c;
	return x;
}

int sw_rollout_order_put(sw_rollout_order *o, uint64_t key, const uint8_t *p, size_t n,
                         const sw_rollout_io *io, sw_error *err)
{
	held_ *h = grow_(o->held, o->nheld, &o->cap, sizeof *h);
	uint8_t *copy = h ? malloc(n ? n : 1) : NULL;
	if (h)
		o->held = h;
	if (!copy)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	memcpy(copy, p, n);
	o->held[o->nheld++] = (held_){ key, copy, n };
	return advance_(o, io, err);
}

int sw_rollout_order_skip(sw_rollout_order *o, uint64_t idx, const sw_rollout_io *io, sw_error *err)
{
	uint64_t *s = grow_(o->skipped, o->nskipped, &o->skipcap, sizeof *s);
	if (!s)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	o->skipped = s;
	o->skipped[o->nskipped++] = idx;
	return advance_(o, io, err);
}

static int held_cmp_(const void *a, const void *b)
{
	uint64_t x = ((const held_ *)a)->key, y = ((const held_ *)b)->key;
	return x < y ? -1 : x > y;
}

/* At the end (or after an invalid record, whose place never fills): the rest, in order. */
int sw_rollout_order_drain(sw_rollout_order *o, const sw_rollout_io *io, sw_error *err)
{
	if (o->nheld)
		qsort(o->held, o->nheld, sizeof *o->held, held_cmp_);
	size_t i = 0;
	int rc = 0;
	while (i < o->nheld && !rc) {
		rc = emit_(o, io, &o->held[i], err);
		free(o->held[i++].p);
	}
	if (i && i < o->nheld)
		memmove(o->held, o->held + i, sizeof *o->held * (o->nheld - i));
	o->nheld -= i;
	return rc;
}

uint64_t sw_rollout_order_out(const sw_rollout_order *o)
{
	return o->out;
}
