/*
 * rng.h - the library's one small random generator for shuffles and seeds:
 * xoshiro256** (Blackman and Vigna), seeded with splitmix64.  Its four words
 * are plain state, so an object can save them and go on where it stopped
 * (the trainer keeps them in its state file to shuffle minibatches the same
 * way after a resume).  Not for anything secret: libsodium is for that.
 */
#ifndef SW_RNG_H
#define SW_RNG_H

#include <stdint.h>

typedef struct sw_rng {
	uint64_t s[4];
} sw_rng;

/* splitmix64 (Steele, Lea and Flood): the next value of the sequence *s walks; also
 * the stream random init fills a model's tensors from (model.c). */
uint64_t sw_splitmix64(uint64_t *s);
/* The four words from splitmix64 of seed. */
void sw_rng_seed(sw_rng *r, uint64_t seed);
uint64_t sw_rng_next(sw_rng *r);

#endif
