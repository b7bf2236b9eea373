/*
 * replay.c - run a libFuzzer target over files without libFuzzer, so that
 * `make test` replays every target's seeds and the inputs that once crashed
 * it (tests/fuzz/seeds/NAME/, tests/fuzz/crashes/NAME/) with the ordinary
 * compiler, and `make check` does so under the sanitizers.  A target reports
 * a broken property by abort(), which ends this program with SIGABRT.
 *
 *   replay FILE...    prints "ok N inputs" when every input ran through
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		uint8_t *buf = NULL;
		size_t len = 0, cap = 0, got;
		do {
			if (len == cap) {
				cap = cap ? cap * 2 : 65536;
				uint8_t *p = realloc(buf, cap);
				if (!p) {
					fprintf(stderr, "replay: out of memory\n");
					return 1;
				}
				buf = p;
			}
			got = fread(buf + len, 1, cap - len, f);
			len += got;
		} while (got);
		if (ferror(f)) {
			perror(argv[i]);
			return 1;
		}
		fclose(f);
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		n++;
	}
	printf("ok %d inputs\n", n);
	return 0;
}
