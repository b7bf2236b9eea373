/*
 * store_handoff.c - the weight hand-off from trainer to generator, timed:
 * from the trainer's step end (just before it publishes) to the generator
 * process holding a consistent view of the new version and having read
 * weights through it.  Three ways, on the same Llama-shaped model:
 *
 *   shm    a shared store (sw/store.h): publish, a byte on a pipe, the
 *          generator reads through its view in place (no copy)
 *   file   the trainer writes the arena to a file, the generator reads it
 *          into its own buffer (no fsync, which favours the file)
 *   pipe   the trainer writes the arena through a pipe (1 MiB buffer)
 *
 * The generator "uses" the weights the same way in all three: it reads 64
 * floats from each of 64 tensors spread over the model, through its views,
 * so that what it reads does not grow with the model.
 *
 * usage: store_handoff tiny|small|base shm|file|pipe REPS [DIR]
 * prints: SIZE MODE NPARAMS MEDIAN_US P10_US P90_US SEEN_MEDIAN_US
 * (the last: to the generator holding the new weights whole, before it reads any)
 * DIR is where the file mode writes (default $TMPDIR or /tmp).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "sw/sw.h"

static double now_(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); /* system-wide: comparable across the two processes */
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die_(const char *what, const char *why)
{
	fprintf(stderr, "store_handoff: %s: %s\n", what, why);
	exit(1);
}

static void full_(int fd, void *p, size_t n, int wr)
{
	char *c = p;
	while (n) {
		ssize_t k = wr ? write(fd, c, n) : read(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			die_(wr ? "write" : "read", k ? strerror(errno) : "end of file");
		c += k;
		n -= (size_t)k;
	}
}

/* Llama-shaped configurations of about 1M, 15M and 110M parameters. */
static sw_model_config cfg_(const char *size)
{
	sw_model_config c = { 0 };
	strcpy(c.model_type, "llama");
	c.max_position_embeddings = 512;
	c.rms_norm_eps = 1e-5f;
	c.rope_theta = 10000.0f;
	c.bos_token_id = -1;
	if (!strcmp(size, "tiny")) {
		c.vocab_size = 256, c.hidden_size = 128, c.intermediate_size = 384, c.num_hidden_layers = 4;
		c.num_attention_heads = 4, c.num_key_value_heads = 4;
	} else if (!strcmp(size, "small")) {
		c.vocab_size = 2048, c.hidden_size = 512, c.intermediate_size = 1536, c.num_hidden_layers = 4;
		c.num_attention_heads = 8, c.num_key_value_heads = 8;
	} else if (!strcmp(size, "base")) {
		c.vocab_size = 32000, c.hidden_size = 768, c.intermediate_size = 2048, c.num_hidden_layers = 12;
		c.num_attention_heads = 12, c.num_key_value_heads = 12, c.tie_word_embeddings = true;
	} else {
		die_(size, "not tiny, small or base");
	}
	c.head_dim = c.hidden_size / c.num_attention_heads;
	return c;
}

/* Read weights through the model's views: 64 floats from each of 64 tensors
 * spread over the model, the same amount whatever its size. */
static float use_(const sw_model *m, uint64_t v)
{
	float s = 0;
	for (size_t k = 0; k < 64; k++) {
		const sw_tensor *t = &m->tensors[(k * m->ntensors / 64 + v) % m->ntensors];
		size_t n = t->numel < 64 ? t->numel : 64;
		for (size_t i = 0; i < n; i++)
			s += t->data[i];
	}
	return s;
}

static int cmp_(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 4)
		die_("usage", "store_handoff tiny|small|base shm|file|pipe REPS [DIR]");
	const char *size = argv[1], *mode = argv[2];
	int reps = atoi(argv[3]);
	const char *tmpdir = argc > 4 ? argv[4] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	int shm = !strcmp(mode, "shm"), file = !strcmp(mode, "file"), pipe_ = !strcmp(mode, "pipe");
	if (!(shm || file || pipe_) || reps < 1)
		die_(mode, "not shm, file or pipe, or no repetitions");
	/* a run of this bench that was killed may have left its store behind */
	sw_store_sweep("swbench", NULL, NULL);
	sw_model_config cfg = cfg_(size);
	size_t np = sw_model_config_nparams(&cfg), bytes = np * sizeof(float);
	sw_error err = { 0 };

	/* the trainer's weights: in a store, or in its own memory */
	char spec[128], path[4200];
	sw_store *st = NULL;
	float *arena;
	if (shm) {
		if (sw_store_name_random("swbench", spec, sizeof spec, &err) || !(st = sw_store_create(spec, &cfg, 0, &err)))
			die_("create", err.msg);
		arena = sw_store_arena(st);
	} else if (!(arena = aligned_alloc(64, (bytes + 63) / 64 * 64))) {
		die_("alloc", strerror(errno));
	}
	sw_model *tm = sw_model_view(&cfg, arena, &err);
	if (!tm)
		die_("view", err.msg);
	sw_model_init_random(tm, 1, 0.02f);
	if (shm && sw_store_publish(st, 0, &err))
		die_("publish", err.msg);
	snprintf(path, sizeof path, "%s/sw-bench-handoff.%ld", tmpdir, (long)getpid());

	int note[2], ack[2], data[2];
	if (pipe(note) || pipe(ack) || pipe(data))
		die_("pipe", strerror(errno));
	fcntl(data[1], F_SETPIPE_SZ, 1 << 20);
	pid_t pid = fork();
	if (pid < 0)
		die_("fork", strerror(errno));
	if (pid == 0) {
		/* the generator; with the other ends closed, a crash on either side is an end of file, not a hang */
		close(note[1]);
		close(ack[0]);
		close(data[1]);
		sw_store *gs = NULL;
		float *mine = NULL;
		if (shm) {
			if (!(gs = sw_store_open(spec, false, &err)))
				die_("open", err.msg);
		} else if (!(mine = aligned_alloc(64, (bytes + 63) / 64 * 64))) {
			die_("alloc", strerror(errno));
		}
		sw_model *gm = sw_model_view(shm ? sw_store_config(gs) : &cfg, shm ? sw_store_arena(gs) : mine, &err);
		if (!gm)
			die_("view", err.msg);
		/* a generator that has run once has every page of its weights mapped: so has this one */
		volatile float sink = 0;
		for (size_t i = 0; i < np; i += 1024)
			sink += gm->arena[i];
		double t1[2] = { 0, 0 }; /* when it saw the new weights whole, when it had used them */
		full_(ack[1], t1, sizeof t1, 1); /* ready: the trainer may remove the store's name */
		for (;;) {
			uint64_t v;
			full_(note[0], &v, sizeof v, 0);
			if (v == 0)
				break;
			if (shm) {
				uint64_t q;
				do {
					if (sw_store_read_begin(gs, &q, &err))
						die_("read", err.msg);
					if (sw_store_version(gs) < v)
						continue; /* not yet visible: look again */
					t1[0] = now_();
					sink += use_(gm, v);
				} while (sw_store_read_retry(gs, q) || sw_store_version(gs) < v);
			} else if (file) {
				int fd = open(path, O_RDONLY);
				if (fd < 0)
					die_(path, strerror(errno));
				full_(fd, mine, bytes, 0);
				close(fd);
				t1[0] = now_();
				sink += use_(gm, v);
			} else {
				full_(data[0], mine, bytes, 0);
				t1[0] = now_();
				sink += use_(gm, v);
			}
			t1[1] = now_();
			full_(ack[1], t1, sizeof t1, 1);
		}
		(void)sink;
		_exit(0);
	}
	close(note[0]);
	close(ack[1]);
	close(data[0]);
	double t1[2];
	full_(ack[0], t1, sizeof t1, 0);
	if (shm)
		sw_store_unlink(spec, &err); /* both have it mapped: nothing is left behind, however we end */

	double *dt = calloc((size_t)reps, sizeof *dt), *ds = calloc((size_t)reps, sizeof *ds);
	for (int r = 0; r < reps; r++) {
		uint64_t v = (uint64_t)r + 1;
		/* the step: the trainer changes weights in place */
		if (shm && sw_store_write_begin(st, &err))
			die_("write", err.msg);
		for (size_t i = 0; i < np; i += 4096)
			arena[i] += 1e-3f;
		double t0 = now_();
		if (shm) {
			if (sw_store_publish(st, v, &err))
				die_("publish", err.msg);
			full_(note[1], &v, sizeof v, 1);
		} else if (file) {
			int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0)
				die_(path, strerror(errno));
			full_(fd, arena, bytes, 1);
			close(fd);
			full_(note[1], &v, sizeof v, 1);
		} else {
			full_(note[1], &v, sizeof v, 1);
			full_(data[1], arena, bytes, 1);
		}
		full_(ack[0], t1, sizeof t1, 0);
		ds[r] = t1[0] - t0;
		dt[r] = t1[1] - t0;
	}
	uint64_t end = 0;
	full_(note[1], &end, sizeof end, 1);
	waitpid(pid, NULL, 0);
	if (file)
		unlink(path);
	qsort(dt, (size_t)reps, sizeof *dt, cmp_);
	qsort(ds, (size_t)reps, sizeof *ds, cmp_);
	printf("%s %s %zu %.1f %.1f %.1f %.1f\n", size, mode, np, dt[reps / 2] * 1e6, dt[reps / 10] * 1e6,
	       dt[reps - 1 - reps / 10] * 1e6, ds[reps / 2] * 1e6);
	free(dt);
	free(ds);
	sw_model_free(tm);
	if (shm)
		sw_store_close(st);
	else
		free(arena);
	return 0;
}
