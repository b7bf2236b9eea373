/*
 * rng.c - xoshiro256** seeded by splitmix64 (see rng.h): the state is four
 * words the caller owns, so there is no global generator to share.
 */
#include "common/rng.h"

static uint64_t rotl_(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t sw_rng_next(sw_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl_(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl_(s[3], 45);
	return out;
}

uint64_t sw_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void sw_rng_seed(sw_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = sw_splitmix64(&seed);
}
