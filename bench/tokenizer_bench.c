/*
 * tokenizer_bench.c - our side of bench/bench_tokenizer.sh: encode a corpus
 * with a model directory's tokenizer, single thread, and print one line of
 * KEY=VALUE pairs (median seconds of RUNS encodes, MB/s by wall and by CPU
 * time, the number of ids
 * and an FNV-1a hash of them, so the script can check that `tokenizers`
 * gave the very same ids).
 *
 *   tokenizer_bench DIR CORPUS RUNS [lines]
 *
 * With "lines", every line of the corpus (its newline included) is encoded
 * by a call of its own, as prompts are; else the corpus is one text.
 * Loading is not timed.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sw/sw.h"

static double now_(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: tokenizer_bench DIR CORPUS RUNS [lines]\n");
		return 2;
	}
	int runs = atoi(argv[3]), lines = argc > 4 && !strcmp(argv[4], "lines");
	sw_error err = { 0 };
	/* loading: tokenizer.json read, checked (a name twice in an object is refused) and indexed */
	double *ld = calloc((size_t)(runs > 0 ? runs : 1), sizeof *ld);
	sw_tokenizer *t = NULL;
	for (int r = 0; r < (runs > 0 ? runs : 1); r++) {
		sw_tokenizer_free(t);
		double t0 = now_(CLOCK_MONOTONIC);
		if (!(t = sw_tokenizer_load(argv[1], &err))) {
			fprintf(stderr, "tokenizer_bench: %s: %s\n", argv[1], err.msg);
			return 1;
		}
		ld[r] = now_(CLOCK_MONOTONIC) - t0;
	}
	FILE *f = fopen(argv[2], "rb");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	size_t len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	char *text = malloc(len + 1);
	if (!text || fread(text, 1, len, f) != len) {
		fprintf(stderr, "tokenizer_bench: cannot read %s\n", argv[2]);
		return 1;
	}
	fclose(f);
	double *sec = calloc((size_t)(runs > 0 ? runs : 1), sizeof *sec);
	double *cpu = calloc((size_t)(runs > 0 ? runs : 1), sizeof *cpu);
	uint64_t hash = 0;
	size_t count = 0;
	for (int r = 0; r < runs; r++) {
		uint64_t h = 0xcbf29ce484222325ull;
		size_t total = 0;
		double t0 = now_(CLOCK_MONOTONIC), c0 = now_(CLOCK_PROCESS_CPUTIME_ID);
		for (size_t pos = 0; pos < len;) {
			size_t n = len - pos;
			if (lines) {
				const char *nl = memchr(text + pos, '\n', n);
				if (nl)
					n = (size_t)(nl - (text + pos)) + 1;
			}
			uint32_t *ids;
			size_t k;
			if (sw_tokenizer_encode(t, text + pos, n, 1, &ids, &k, &err)) {
				fprintf(stderr, "tokenizer_bench: encode: %s\n", err.msg);
				return 1;
			}
			for (size_t i = 0; i < k; i++)
				h = (h ^ ids[i]) * 0x100000001b3ull;
			total += k;
			free(ids);
			pos += n;
		}
		sec[r] = now_(CLOCK_MONOTONIC) - t0;
		cpu[r] = now_(CLOCK_PROCESS_CPUTIME_ID) - c0;
		hash = h;
		count = total;
	}
	qsort(sec, (size_t)runs, sizeof *sec, cmp_);
	qsort(cpu, (size_t)runs, sizeof *cpu, cmp_);
	double med = runs % 2 ? sec[runs / 2] : (sec[runs / 2 - 1] + sec[runs / 2]) / 2;
	double cmed = runs % 2 ? cpu[runs / 2] : (cpu[runs / 2 - 1] + cpu[runs / 2]) / 2;
	qsort(ld, (size_t)runs, sizeof *ld, cmp_);
	double lmed = runs % 2 ? ld[runs / 2] : (ld[runs / 2 - 1] + ld[runs / 2]) / 2;
	printf("seconds=%.6f mbps=%.3f cpu_mbps=%.3f ids=%zu hash=%016llx load_ms=%.3f\n", med,
	       (double)len / 1e6 / med, (double)len / 1e6 / cmed, count, (unsigned long long)hash, lmed * 1e3);
	free(ld);
	free(sec);
	free(cpu);
	free(text);
	sw_tokenizer_free(t);
	return 0;
}
