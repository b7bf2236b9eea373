/*
 * test_backend.c - the device seam (libsw/compute/backend.h): each memory
 * entry and each op the model code used to do by hand, on cpu and on guard;
 * guard memory faults when the host touches it (a forked child dies of
 * SIGSEGV), borrowed host memory too until it is given back; and a whole
 * model - forward and backward, decoding with forks, an AdamW step, save
 * and load - gives the same bits on guard as on cpu.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "compute/backend.h"
#include "sw/backend.h"
#include "sw/engine.h"
#include "sw/model.h"
#include "tap.h"
#include "tiny_model.h"
#include "tmpfiles.h"

static sw_model_config cfg_(const char *type, bool bias, bool qk, bool tied)
{
	sw_model_config c = tiny_config(type, 41, 32, 48, 8, 128);
	c.tie_word_embeddings = tied;
	c.attention_bias = bias;
	c.qk_norm = qk;
	return c;
}

/*
 * Run fn(p) in a child; true when the child died of SIGSEGV (under
 * AddressSanitizer, which catches the signal to report it: when it failed).
 */
static bool faults_(void (*fn)(volatile float *), volatile float *p)
{
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		signal(SIGSEGV, SIG_DFL);
		fn(p);
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
#ifdef __SANITIZE_ADDRESS__
	if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
		return true;
#endif
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

static void read_(volatile float *p)
{
	float x = p[0];
	(void)x;
}

static void write_(volatile float *p)
{
	p[1] = 1.0f;
}

/* ---- the names ---- */

static void test_names_(void)
{
	sw_error err = { 0 };
	ok(sw_backend_get(NULL, &err) == sw_backend_cpu() && sw_backend_get("", &err) == sw_backend_cpu() &&
	   sw_backend_get("cpu", &err) == sw_backend_cpu(), "NULL, \"\" and \"cpu\" are the CPU backend");
	ok(sw_backend_get("guard", &err) == sw_backend_guard(), "\"guard\" is the guard");
	ok(!strcmp(sw_backend_name(sw_backend_guard()), "guard") && !strcmp(sw_backend_name(NULL), "cpu"),
	   "sw_backend_name");
	ok(sw_backend_get("cuda9", &err) == NULL && err.code == SW_EINVAL && strstr(err.msg, "cuda9") &&
	   strstr(err.msg, "cpu") && strstr(err.msg, "guard"),
	   "an unknown name is refused, the known ones listed: %s", err.msg);
	ok(sw_backend_trim(sw_backend_cpu(), &err) == SW_OK && sw_backend_trim(sw_backend_guard(), &err) == SW_OK &&
	   sw_backend_trim(NULL, &err) == SW_OK, "trim is a no-op on the CPU backends and NULL");
	/* the optional entries: none on the CPU backends (their memory is the host's) */
	const sw_backend *be[] = { sw_backend_cpu(), sw_backend_guard() };
	for (int i = 0; i < 2; i++)
		ok(!be[i]->ipc_alloc && !be[i]->ipc_open && !be[i]->coll_sum && !be[i]->argmax && !be[i]->trim,
		   "%s has no ipc, collective, argmax or trim entry", be[i]->name);
}

/* ---- each entry, on one backend ---- */

static void test_entries_(const sw_backend *be)
{
	const char *n = be->name;
	sw_error err = { 0 };
	enum { N = 64 };
	float h[N], back[N];
	for (int i = 0; i < N; i++)
		h[i] = (float)i * 0.5f - 3;
	float *a = be->alloc(sizeof h, &err), *b = be->alloc(sizeof h, &err);
	ok(a && b && ((uintptr_t)a & 63) == 0, "%s: alloc gives aligned memory", n);
	is_int(be->upload(a, h, sizeof h, &err), 0, "%s: upload", n);
	memset(back, 0, sizeof back);
	ok(be->download(back, a, sizeof h, &err) == 0 && !memcmp(back, h, sizeof h), "%s: download gives the upload back", n);
	ok(be->copy(b, a, sizeof h, &err) == 0 && be->download(back, b, sizeof h, &err) == 0 &&
	   !memcmp(back, h, sizeof h), "%s: device-to-device copy", n);
	ok(be->memset(b + 8, 0, 8 * sizeof(float), &err) == 0 && be->download(back, b, sizeof h, &err) == 0 &&
	   back[7] == h[7] && back[8] == 0 && back[15] == 0 && back[16] == h[16], "%s: memset of a range", n);
	ok((be->host_view(a) != NULL) == !strcmp(n, "cpu"), "%s: host_view only where memory is host memory", n);
	{
		/* past a megabyte fills and copies go over the threads in pieces: 3 MiB + 123 bytes, from an odd
		 * offset, so the last piece is short; the bytes beside the range stay */
		size_t big = ((size_t)3 << 20) + 123, tot = big + 256;
		unsigned char *hb = malloc(tot), *hc = malloc(tot);
		unsigned char *da = be->alloc(tot, &err), *db = be->alloc(tot, &err);
		for (size_t i = 0; hb && i < tot; i++)
			hb[i] = (unsigned char)(i * 7 + i / 251);
		int rc = !hb || !hc || !da || !db || be->upload(da, hb, tot, &err) || be->upload(db, hb, tot, &err) ||
		         be->memset(da + 77, 0xab, big, &err) || be->download(hc, da, tot, &err);
		bool same = !rc;
		for (size_t i = 0; same && i < tot; i++)
			same = hc[i] == (i >= 77 && i < 77 + big ? 0xab : hb[i]);
		ok(same, "%s: memset of 3 MiB + 123 bytes: every byte of the range, none beside it", n);
		rc = rc || be->copy(db + 33, da + 50, big, &err) || be->download(hc, db, tot, &err);
		same = !rc;
		for (size_t i = 0; same && i < tot; i++)
			same = hc[i] == (i >= 33 && i < 33 + big ? (i + 17 >= 77 && i + 17 < 77 + big ? 0xab : hb[i + 17]) : hb[i]);
		ok(same, "%s: copy of 3 MiB + 123 bytes between odd offsets: every byte, none beside it", n);
		be->free(da), be->free(db);
		free(hb), free(hc);
	}

	/* KV pages: two rows into page 2 slots 1, 2 and one into page 0 slot 3
	 * (pages of 4 slots, kd 4: two heads of 2).  A page holds each head's
	 * slots in a run: [page][head][slot][2]. */
	int32_t hi[] = { 0, 2, 1, 0, 0, 1, /* ptab */ 0, 0, 0, /* poff */ 5, 6, 3 /* pos */ };
	int32_t *idx = be->alloc(sizeof hi, &err);
	float *kp = be->alloc(3 * 4 * 4 * sizeof(float), &err), *vp = be->alloc(3 * 4 * 4 * sizeof(float), &err);
	be->upload(idx, hi, sizeof hi, &err);
	be->memset(kp, 0, 48 * sizeof(float), &err);
	be->memset(vp, 0, 48 * sizeof(float), &err);
	be->kv_write(kp, vp, a, a + 12, 3, 4, 2, 4, 16, idx, idx + 6, idx + 9);
	float k[48], v[48], wk[48] = { 0 }, wv[48] = { 0 };
	be->download(k, kp, sizeof k, &err);
	be->download(v, vp, sizeof v, &err);
	/* row j: ptab[poff + pos/4] -> pos 5: ptab[1] = 2, slot 1; pos 6: page 2 slot 2; pos 3: ptab[0] = 0 slot 3 */
	const int pg[3] = { 2, 2, 0 }, slot[3] = { 1, 2, 3 };
	for (int j = 0; j < 3; j++)
		for (int g = 0; g < 2; g++)
			for (int e = 0; e < 2; e++) {
				wk[pg[j] * 16 + g * 8 + slot[j] * 2 + e] = h[j * 4 + g * 2 + e];
				wv[pg[j] * 16 + g * 8 + slot[j] * 2 + e] = h[12 + j * 4 + g * 2 + e];
			}
	ok(!memcmp(k, wk, sizeof k) && !memcmp(v, wv, sizeof v) && k[34] == h[0] && k[43] == h[3] &&
	   v[15] == h[12 + 11],
	   "%s: kv_write puts each row's heads in their page's runs, at its slot", n);
	{
		/* Heads of 16 floats: a slot is a whole cache line, which the CPU
		 * backend streams past the cache; a pool 16 bytes off a line
		 * (off 4) takes the plain copy; the decoder's pages hold K, then V
		 * (stride two pages' floats).  Each puts every row where the
		 * layout says and touches nothing else of one buffer. */
		enum { HD = 16, KD = 2 * HD, PG = 4, NP = 3, PF = NP * PG * KD, BUF = 2 * PF + 32 };
		static const struct {
			int koff, voff, stride;
			const char *what;
		} cs[] = {
			{ 0, PF + 16, PG * KD, "of heads of 16 (pool on a cache line): each row at its slot, nothing beside" },
			{ 4, PF + 20, PG * KD,
			  "of heads of 16 (pool 4 floats off a cache line): each row at its slot, nothing beside" },
			{ 0, PG * KD, 2 * PG * KD,
			  "into pages that hold K then V (stride 2 pages' floats): each row at its slot" },
		};
		float src[2 * 3 * KD], got[BUF], want[BUF];
		for (int i = 0; i < 2 * 3 * KD; i++)
			src[i] = (float)(i * 37 % 101) - 50.5f;
		float *ds = be->alloc(sizeof src, &err), *buf = be->alloc(sizeof got, &err);
		be->upload(ds, src, sizeof src, &err);
		for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
			be->memset(buf, 0, sizeof got, &err);
			be->kv_write(buf + cs[c].koff, buf + cs[c].voff, ds, ds + 3 * KD, 3, KD, HD, PG, cs[c].stride, idx,
			             idx + 6, idx + 9);
			memset(want, 0, sizeof want);
			for (int w = 0; w < 2; w++)
				for (int j = 0; j < 3; j++)
					for (int g = 0; g < 2; g++)
						for (int e = 0; e < HD; e++)
							want[(w ? cs[c].voff : cs[c].koff) + pg[j] * cs[c].stride + g * PG * HD +
							     slot[j] * HD + e] = src[w * 3 * KD + j * KD + g * HD + e];
			be->download(got, buf, sizeof got, &err);
			ok(!memcmp(got, want, sizeof got), "%s: kv_write %s", n, cs[c].what);
		}
		be->free(ds), be->free(buf);
	}
	/* Row gather: rows 3, 0 of a [8, 8]. */
	int32_t hr[] = { 3, 0 };
	int32_t *rows = be->alloc(sizeof hr, &err);
	be->upload(rows, hr, sizeof hr, &err);
	be->rows_gather(b, a, rows, 2, 8);
	be->download(back, b, 16 * sizeof(float), &err);
	ok(!memcmp(back, h + 24, 8 * sizeof(float)) && !memcmp(back + 8, h, 8 * sizeof(float)), "%s: rows_gather", n);
	is_int(be->first_nonfinite(a, 8, 8), -1, "%s: first_nonfinite of finite rows is -1", n);
	float inf = INFINITY, nan = NAN;
	be->upload(a + 5 * 8 + 3, &inf, sizeof inf, &err);
	be->upload(a + 6 * 8 + 1, &nan, sizeof nan, &err);
	is_int(be->first_nonfinite(a, 8, 8), 5, "%s: first_nonfinite finds the row holding an Inf", n);
	is_int(be->first_nonfinite(a + 48, 2, 8), 0, "%s: and a NaN", n);
	{
		/* rows of 1000: the 16-lane body and the tail; finite extremes pass */
		enum { WR = 6, WC = 1000 };
		static float hw[WR * WC];
		for (int i = 0; i < WR * WC; i++)
			hw[i] = i % 7 == 0 ? 3e38f : i % 11 == 0 ? -3e38f : (float)(i % 13) - 6;
		hw[2 * WC + 500] = -INFINITY, hw[3 * WC + 995] = NAN, hw[4 * WC + 17] = INFINITY;
		float *w = be->alloc(sizeof hw, &err);
		be->upload(w, hw, sizeof hw, &err);
		ok(be->first_nonfinite(w, 2, WC) == -1 && be->first_nonfinite(w, WR, WC) == 2 &&
		   be->first_nonfinite(w + 3 * WC, 3, WC) == 0 && be->first_nonfinite(w + 4 * WC, 2, WC) == 0 &&
		   be->first_nonfinite(w + 5 * WC, 1, WC) == -1,
		   "%s: first_nonfinite over rows of 1000: -Inf in the body, NaN in the tail, +Inf", n);
		be->free(w);
	}
	ok(fabs(be->sumsq(b, 8) - 0) >= 0 && be->sumsq(rows == NULL ? b : b, 0) == 0, "%s: sumsq of nothing is 0", n);
	is_int(be->sync(&err), 0, "%s: sync after all that is clean (%s)", n, err.msg);
	be->free(a), be->free(b), be->free(idx), be->free(kp), be->free(vp), be->free(rows);
	be->free(NULL);
}

/* ---- the vision ops (layernorm, activations, non-causal attention) ---- */

/* Run them on be from the same inputs; the results downloaded into out. */
static void vision_ops_(const sw_backend *be, float *out, size_t nout)
{
	enum { T = 13, D = 16, H = 2, HD = 8 };
	sw_error err = { 0 };
	uint64_t s = 12345;
	float h[T * D * 3];
	for (int i = 0; i < T * D * 3; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		h[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 4 - 2);
	}
	int32_t cu[3] = { 0, 9, T };
	size_t na = be->attn_scratch(9);
	float *x = be->alloc(sizeof h, &err), *y = be->alloc(sizeof(float) * T * D * 8, &err),
	      *sc = be->alloc(sizeof(float) * na, &err);
	int32_t *dcu = be->alloc(sizeof cu, &err);
	be->upload(x, h, sizeof h, &err);
	be->upload(dcu, cu, sizeof cu, &err);
	float *q = x, *k = x + T * D, *v = x + 2 * T * D, *w = x + 5, *b = x + 40;
	float *ln = y, *mean = y + T * D, *rstd = mean + T, *dx = y + 2 * T * D, *dw = dx + T * D,
	      *db = dw + D, *act = y + 4 * T * D, *dact = y + 5 * T * D, *att = y + 6 * T * D,
	      *lse = att + T * D;
	be->memset(y, 0, sizeof(float) * T * D * 8, &err);
	be->layernorm_fwd(ln, mean, rstd, q, w, b, T, D, 1e-6f);
	be->layernorm_bwd(dx, dw, db, k, q, w, mean, rstd, T, D);
	be->act_fwd(act, q, T * D, SW_ACT_QUICK_GELU);
	be->act_bwd(dact, k, q, T * D, SW_ACT_GELU_TANH);
	be->attn_fwd(att, lse, q, k, v, dcu, 2, H, H, HD, 0, sc);
	be->download(out, y, nout * sizeof(float), &err);
	ok(be->sync(&err) == 0, "%s: the vision ops run (%s)", be->name, err.msg);
	be->free(x), be->free(y), be->free(sc), be->free(dcu);
}

static void test_vision_ops_(void)
{
	size_t n = 13 * 16 * 8;
	float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
	vision_ops_(sw_backend_cpu(), a, n);
	vision_ops_(sw_backend_guard(), b, n);
	ok(!memcmp(a, b, n * sizeof(float)),
	   "layernorm, its backward, the activations and non-causal attention: guard = cpu bit for bit");
	free(a), free(b);
}

/* ---- the guard's protection ---- */

static void test_guard_faults_(void)
{
	const sw_backend *g = sw_backend_guard();
	sw_error err = { 0 };
	float *p = g->alloc(4096 * 3, &err);
	ok(p != NULL, "guard: alloc");
	ok(faults_(read_, p), "guard: a host read of its memory faults (the child died of SIGSEGV)");
	ok(faults_(write_, p), "guard: so does a host write");
	float one = 1;
	ok(g->upload(p, &one, sizeof one, &err) == 0 && faults_(read_, p), "guard: closed again after an upload");

	/* Regions of whole pages are often adjacent: a region's base is the
	 * other's end, and must still name its own region (free, ops). */
	float *x = g->alloc(4096, &err), *a1 = g->alloc(4096, &err), *a2 = g->alloc(4096, &err);
	bool adjacent = a1 + 1024 == a2 || a2 + 1024 == a1;
	g->free(x); /* the last region takes x's place in the guard's list, before the other */
	g->free(a2 + 1024 == a1 ? a1 : a2);
	g->free(a2 + 1024 == a1 ? a2 : a1);
	ok(g->sync(&err) == 0, "guard: adjacent regions (%s here) each free by their base (%s)",
	   adjacent ? "adjacent" : "not adjacent", err.msg);

	/* A host pointer given to an op is reported by sync, not ignored. */
	float host[8] = { 0 };
	g->scale(host, 2.0f, 8);
	int rc = g->sync(&err);
	ok(rc == SW_EINVAL && strstr(err.msg, "scale") && strstr(err.msg, "not guard memory"),
	   "guard: an op given host memory is an error at sync: %s", err.msg);
	is_int(g->sync(&err), 0, "guard: and the error is cleared once reported");
	rc = g->download(host, host + 1, 4, &err);
	ok(rc == SW_EINVAL, "guard: a download from host memory is refused: %s", err.msg);
	g->free(p);

	/* A model on guard: its arena faults; on cpu it does not. */
	sw_model_config c = cfg_("llama", false, false, false);
	sw_model *m = sw_model_new_on(g, &c, &err), *mc = sw_model_new(&c, &err);
	ok(m && mc && m->backend == g && mc->backend == sw_backend_cpu(), "models on guard and on cpu");
	ok(faults_(read_, m->arena) && faults_(read_, m->layers[1].w_down), "guard: a model's tensors fault when read");
	ok(!faults_(read_, mc->arena), "cpu: they do not");
	sw_model_free(m), sw_model_free(mc);

	/* Borrowed host memory: protected while a model views it, given back after. */
	size_t n = sw_model_config_nparams(&c), bytes = n * sizeof(float);
	float *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ok(arena != MAP_FAILED, "an arena of host memory");
	arena[0] = 7;
	m = sw_model_view_on(g, &c, arena, &err);
	ok(m && m->arena == arena, "guard: a model views borrowed host memory (%s)", err.msg);
	ok(faults_(read_, arena), "guard: the borrowed memory faults while the model uses it");
	sw_model *m2 = sw_model_view_on(g, &c, arena, &err);
	ok(m2 != NULL, "guard: a second view of the same memory");
	sw_model_free(m2);
	ok(faults_(read_, arena), "guard: still protected while the first view lives");
	ok(sw_model_init_random(m, 9, 0.1f) == 0, "guard: init_random on a borrowed arena");
	sw_model_free(m);
	ok(!faults_(read_, arena) && arena[0] != 7, "guard: given back on free, with what the model wrote");
	mc = sw_model_new(&c, &err);
	sw_model_init_random(mc, 9, 0.1f);
	ok(!memcmp(mc->arena, arena, bytes), "guard: init_random gives the CPU's bits");
	sw_model_free(mc);
	ok(sw_model_view_on(g, &c, arena + 1, &err) == NULL && err.code == SW_EINVAL,
	   "guard: memory that is not page-aligned is refused: %s", err.msg);
	munmap(arena, bytes);
}

/* ---- whole models, cpu against guard, bit for bit ---- */

static bool same_model_(const sw_model *a, const sw_model *b)
{
	float *x = malloc(a->nparams * sizeof(float)), *y = malloc(b->nparams * sizeof(float));
	bool same = x && y && a->nparams == b->nparams && !sw_model_read(a, x, NULL) &&
	            !sw_model_read(b, y, NULL) && !memcmp(x, y, a->nparams * sizeof(float));
	free(x), free(y);
	return same;
}

typedef struct run_ {
	sw_model *m, *g, *mo, *vo;
	float lp[40], ent[40], *logits;
	float dec[64][41];         /* every step's logits, in id order */
	int ndec;
	float score[20];
	sw_adamw_stats st;
	int rc;
} run_;

static void run_model_(const sw_backend *be, sw_model_config c, run_ *r)
{
	sw_error err = { 0 };
	memset(r, 0, sizeof *r);
	r->m = sw_model_new_on(be, &c, &err);
	r->g = sw_model_new_on(be, &c, &err);
	r->mo = sw_model_new_on(be, &c, &err);
	r->vo = sw_model_new_on(be, &c, &err);
	if (!r->m || !r->g || !r->mo || !r->vo) {
		r->rc = -1;
		return;
	}
	sw_model_init_random(r->m, 3, 0.2f);
	int32_t tok[40], cu[] = { 0, 17, 18, 40 };
	for (int i = 0; i < 40; i++)
		tok[i] = (i * 7 + 3) % c.vocab_size;
	float dlp[40], dent[40];
	for (int i = 0; i < 40; i++)
		dlp[i] = (float)((i % 5) - 2) * 0.1f, dent[i] = (float)((i % 3) - 1) * 0.05f;
	sw_engine *e = sw_engine_new(r->m, &err);
	sw_batch b = { 3, tok, cu, NULL, NULL };
	r->rc |= sw_engine_forward(e, &b, true, r->lp, r->ent, &err);
	const float *lg = sw_engine_logits(e);
	if ((r->logits = malloc(sizeof(float) * 40 * c.vocab_size)) && lg)
		memcpy(r->logits, lg, sizeof(float) * 40 * c.vocab_size);
	r->rc |= sw_engine_backward(e, dlp, dent, r->g, &err);
	sw_engine_free(e);

	/* Decoding: a prompt, forked three ways, each fork its own tokens, one removed. */
	sw_decoder *d = sw_decoder_new(r->m, 6, 400, &err);
	int root = sw_decoder_add(d, tok, 19, &err), nout;
	const int *ids;
	const float *z;
	r->rc |= sw_decoder_step(d, &nout, &ids, &z, &err);
	int f[3];
	for (int k = 0; k < 3; k++) {
		f[k] = sw_decoder_fork(d, root, &err);
		int32_t t = (int32_t)(k + 1);
		r->rc |= sw_decoder_append(d, f[k], &t, 1, &err);
	}
	for (int it = 0; it < 12 && !r->rc; it++) {
		if (it == 4)
			sw_decoder_remove(d, f[1]);
		r->rc |= sw_decoder_step(d, &nout, &ids, &z, &err);
		for (int j = 0; j < nout && r->ndec < 64; j++) {
			memcpy(r->dec[r->ndec++], z + (size_t)j * c.vocab_size, sizeof(float) * c.vocab_size);
			int32_t t = (int32_t)((ids[j] * 5 + it) % c.vocab_size);
			r->rc |= sw_decoder_append(d, ids[j], &t, 1, &err);
		}
	}
	r->rc |= sw_decoder_score(d, tok + 18, 20, r->score, NULL, &err);
	sw_decoder_free(d);

	sw_adamw_config ac = sw_adamw_defaults(1e-2f);
	ac.max_grad_norm = 0.5f;
	r->rc |= sw_adamw_step(&ac, r->m, r->g, r->mo->arena, r->vo->arena, 0, &r->st, &err);
	r->rc |= sw_adamw_step(&ac, r->m, r->g, r->mo->arena, r->vo->arena, 1, &r->st, &err);
	if (r->rc)
		printf("# %s: %s\n", be->name, err.msg);
}

static void free_run_(run_ *r)
{
	sw_model_free(r->m), sw_model_free(r->g), sw_model_free(r->mo), sw_model_free(r->vo);
	free(r->logits);
}

static void test_same_bits_(const char *what, sw_model_config c)
{
	static run_ a, b;
	run_model_(sw_backend_cpu(), c, &a);
	run_model_(sw_backend_guard(), c, &b);
	ok(a.rc == 0 && b.rc == 0, "%s: forward, backward, decoding and AdamW run on cpu and guard", what);
	ok(!memcmp(a.lp, b.lp, sizeof a.lp) && !memcmp(a.ent, b.ent, sizeof a.ent),
	   "%s: forward log-probs and entropies, bit for bit", what);
	ok(a.logits && b.logits && !memcmp(a.logits, b.logits, sizeof(float) * 40 * c.vocab_size),
	   "%s: sw_engine_logits, bit for bit", what);
	ok(a.ndec == b.ndec && a.ndec > 20 && !memcmp(a.dec, b.dec, sizeof a.dec),
	   "%s: %d rows of decoding logits with forks, bit for bit", what, a.ndec);
	ok(!memcmp(a.score, b.score, sizeof a.score), "%s: sw_decoder_score, bit for bit", what);
	ok(same_model_(a.g, b.g), "%s: gradients, bit for bit", what);
	ok(a.st.grad_norm == b.st.grad_norm && a.st.clipped == b.st.clipped, "%s: AdamW's gradient norm", what);
	ok(same_model_(a.m, b.m) && same_model_(a.mo, b.mo) && same_model_(a.vo, b.vo),
	   "%s: parameters and both moments after two AdamW steps, bit for bit", what);

	/* Save from guard, load on cpu and back on guard. */
	char dir[] = "/tmp/sw-test-backend.XXXXXX";
	sw_error err = { 0 };
	if (mkdtemp(dir)) {
		int rc = sw_model_save(b.m, dir, SW_DT_F32, &err);
		sw_model *l = sw_model_load(dir, &err), *lg = sw_model_load_on(sw_backend_guard(), dir, &err);
		ok(rc == 0 && l && lg && same_model_(l, a.m) && same_model_(lg, a.m) && lg->backend == sw_backend_guard(),
		   "%s: a guard model saved, loaded on cpu and on guard: the same bits (%s)", what, err.msg);
		sw_model *cp = sw_model_new(&c, &err);
		ok(cp && sw_model_copy(cp, lg, &err) == 0 && same_model_(cp, a.m), "%s: sw_model_copy from guard to cpu", what);
		sw_model *g2 = sw_model_new_on(sw_backend_guard(), &c, &err);
		ok(g2 && sw_model_copy(g2, cp, &err) == 0 && same_model_(g2, a.m), "%s: and from cpu to guard", what);
		sw_model *g3 = sw_model_new_on(sw_backend_guard(), &c, &err);
		ok(g3 && sw_model_copy(g3, g2, &err) == 0 && same_model_(g3, a.m), "%s: and guard to guard", what);
		sw_model_save(b.m, dir, SW_DT_BF16, &err);
		sw_model_free(l);
		l = sw_model_load_on(sw_backend_guard(), dir, &err);
		sw_model *lc = sw_model_load(dir, &err);
		ok(l && lc && same_model_(l, lc), "%s: bf16 from guard, loaded on guard and cpu alike", what);
		sw_model_free(cp), sw_model_free(l), sw_model_free(lg), sw_model_free(g2), sw_model_free(g3),
			sw_model_free(lc);
		char path[300];
		snprintf(path, sizeof path, "%s/model.safetensors", dir);
		unlink(path);
		snprintf(path, sizeof path, "%s/config.json", dir);
		unlink(path);
		rmdir(dir);
	}
	free_run_(&a), free_run_(&b);
}

/* ---- the profiling backend: guard's ops timed, the same bits, a table at exit ---- */

/* The profile's text (tmpfiles.h's tmp_get into a buffer of this size). */
static char prof_text_[1 << 20];

/* In a child (the profiler is one per process): what it found, a bit a check. */
enum { P_OPEN_FAILS = 1, P_SAME = 2, P_ONE = 4, P_OTHER = 8, P_BITS = 16 };

static int prof_child_(const char *path, sw_model_config c)
{
	sw_error err = { 0 };
	int r = 0;
	if (!sw_backend_prof(sw_backend_guard(), "/nonexistent-sw-dir/profile", &err) && err.code == SW_EIO &&
	    !strcmp(err.msg, "SW_PROFILE: /nonexistent-sw-dir/profile: No such file or directory"))
		r |= P_OPEN_FAILS;
	const sw_backend *p = sw_backend_prof(sw_backend_guard(), path, &err);
	if (p && p != sw_backend_guard() && !strcmp(p->name, "guard") && p->host_memory)
		r |= P_SAME;
	if (p && sw_backend_prof(sw_backend_guard(), path, &err) == p)
		r |= P_ONE;
	memset(&err, 0, sizeof err);
	if (!sw_backend_prof(sw_backend_cpu(), path, &err) &&
	    !strcmp(err.msg, "SW_PROFILE: this process profiles device guard already, not cpu"))
		r |= P_OTHER;
	static run_ a, b;
	run_model_(sw_backend_guard(), c, &a);
	run_model_(p, c, &b);
	if (!a.rc && !b.rc && !memcmp(a.lp, b.lp, sizeof a.lp) && a.ndec == b.ndec &&
	    !memcmp(a.dec, b.dec, sizeof a.dec) && !memcmp(a.score, b.score, sizeof a.score) &&
	    same_model_(a.g, b.g) && same_model_(a.m, b.m) && a.st.grad_norm == b.st.grad_norm)
		r |= P_BITS;
	return r;
}

static void test_prof_(void)
{
	ok(tmp_open("prof") == 0, "a directory for the profile");
	char path[300];
	snprintf(path, sizeof path, "%s/profile", tmp_dir_);
	sw_model_config c = cfg_("llama", false, false, false);
	int r = -1;
	pid_t kid[2];
	for (int k = 0; k < 2; k++) { /* two processes append to one file; each must find it all */
		int st = 0;
		fflush(stdout);
		if ((kid[k] = fork()) == 0)
			exit(prof_child_(path, c)); /* exit: the table is written at exit */
		waitpid(kid[k], &st, 0);
		r &= WIFEXITED(st) ? WEXITSTATUS(st) : 0;
	}
	ok(r >= 0 && (r & P_OPEN_FAILS), "prof: a file it cannot open is an error naming SW_PROFILE and the file");
	ok(r >= 0 && (r & P_SAME), "prof: the wrapper keeps the inner's name and memory kind");
	ok(r >= 0 && (r & P_ONE), "prof: asked again for the same device, the same wrapper");
	ok(r >= 0 && (r & P_OTHER), "prof: asked for another device, an error");
	ok(r >= 0 && (r & P_BITS),
	   "prof: forward, backward, decoding with forks and AdamW through the profiler: guard's bits");
	char *t = tmp_get(path, prof_text_, sizeof prof_text_, NULL), *h1 = strstr(t, "# SW_PROFILE: "),
	     *h2 = h1 ? strstr(h1 + 1, "# SW_PROFILE: ") : NULL;
	char want[64];
	snprintf(want, sizeof want, "pid %ld, device guard: ", (long)kid[0]);
	ok(h1 && h2 && !strstr(h2 + 1, "# SW_PROFILE: ") && strstr(h1, want) && h1 == t,
	   "prof: each process appends one table, headed by its pid and device");
	/* the engine's products (its q projection: hidden 32 by 32 over the 40 tokens), the decoder's
	 * (its vocabulary's, 41 by 32, for one row; q, k and v, gate and up, each one call of
	 * parts), attention, AdamW */
	const char *rows[] = { "\ngemm              (all shapes)", "\nlinear_rows       (all shapes)",
		               "\nadamw             (all shapes)", "\nattn_paged        (all shapes)",
		               "\nlinear_rows       M=1 N=41 K=32 ", "\ngemm              ta=0 tb=1 M=40 N=32 K=32 ",
		               "\nattn_fwd          nseq=3 H=4 KVH=2 hd=8 causal=1 ", "\nadamw             n=",
		               "\nlinear_rows_parts parts=3 M=", "\nlinear_rows_parts parts=2 M=" };
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
		ok(h1 && h2 && strstr(h1, rows[i]) && strstr(h1, rows[i]) < h2, "prof: the table has the row '%s'", rows[i] + 1);
	/* the totals: an op's row adds its shapes' rows, the header adds the ops' */
	unsigned long long ops = 0, all = 0, lr = 0, lr_shapes = 0, n;
	double sec = -1, share = -1, us = -1, gf = -1;
	ok(h1 && sscanf(h1, "# SW_PROFILE: test_backend, pid %*d, device guard: %*f s since the device was opened, "
	                    "%*f s in %llu operations", &ops) == 1 && ops > 100, "prof: the header counts %llu operations", ops);
	for (char *l = h1 ? strchr(h1, '\n') : NULL; l && l < h2; l = strchr(l + 1, '\n')) {
		char name[32], shape[16];
		if (sscanf(l + 1, "%31s (all shapes) %llu", name, &n) == 2) {
			all += n;
			if (!strcmp(name, "linear_rows"))
				lr = n;
		} else if (sscanf(l + 1, "linear_rows M=%15s %*s %*s %llu", shape, &n) == 2)
			lr_shapes += n;
	}
	ok(all == ops && lr > 0 && lr == lr_shapes,
	   "prof: the ops' calls add up to the header's (%llu, %llu); linear_rows' shapes to its own (%llu, %llu)",
	   all, ops, lr_shapes, lr);
	/* a row's figures: calls, seconds, share, us a call, GFLOP/s for a product */
	char *g = h1 ? strstr(h1, "\ngemm              (all shapes)") : NULL;
	ok(g && sscanf(g + 1, "gemm (all shapes) %llu %lf %lf%% %lf %lf", &n, &sec, &share, &us, &gf) == 5 &&
	   n > 0 && sec >= 0 && share > 0 && share < 100 && us > 0 && gf > 0,
	   "prof: the products' row: %llu calls, %g s, %g%%, %g us a call, %g GFLOP/s", n, sec, share, us, gf);
	tmp_close();
}

/* ---- the profiler over a backend that queues its ops (as cuda does): a fake one ---- */

static int fake_syncs_, fake_fail_;

static int fake_sync_(sw_error *err)
{
	fake_syncs_++;
	if (!fake_fail_)
		return SW_OK;
	fake_fail_ = 0;
	if (err) {
		err->code = SW_EIO;
		snprintf(err->msg, sizeof err->msg, "fake: the kernel failed");
	}
	return SW_EIO;
}

enum { A_SYNCED = 1, A_KEPT = 2, A_CLEARED = 4, A_RESULT = 8 };

static int prof_async_child_(const char *path)
{
	static sw_backend fake;
	fake = *sw_backend_cpu();
	fake.name = "fake", fake.host_memory = false, fake.sync = fake_sync_;
	sw_error err = { 0 };
	const sw_backend *p = sw_backend_prof(&fake, path, &err);
	if (!p)
		return 0;
	float y[4] = { 1, 2, 3, 4 }, x[4] = { 10, 20, 30, 40 };
	int r = 0;
	p->add(y, x, 4);
	if (fake_syncs_ == 1)
		r |= A_SYNCED; /* each op waited for */
	fake_fail_ = 1;
	p->add(y, x, 4); /* its wait fails: kept for the caller's sync */
	int rc = p->sync(&err);
	if (rc == SW_EIO && !strcmp(err.msg, "fake: the kernel failed") && fake_syncs_ == 3)
		r |= A_KEPT;
	memset(&err, 0, sizeof err);
	if (p->sync(&err) == SW_OK && !err.code)
		r |= A_CLEARED;
	if (y[0] == 21 && y[3] == 84)
		r |= A_RESULT;
	return r;
}

static void test_prof_async_(void)
{
	char path[300];
	int st = 0, dir = tmp_open("prof-async");
	snprintf(path, sizeof path, "%s/profile", tmp_dir_);
	fflush(stdout);
	pid_t kid = dir == 0 ? fork() : -1;
	if (kid == 0)
		exit(prof_async_child_(path));
	if (kid > 0)
		waitpid(kid, &st, 0);
	int r = kid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 0;
	ok(r & A_SYNCED, "prof over a queueing device: each op is followed by the device's sync");
	ok(r & A_KEPT, "prof over a queueing device: a failure that sync reports comes back from the caller's next sync");
	ok(r & A_CLEARED, "prof over a queueing device: and is cleared by it");
	ok(r & A_RESULT, "prof over a queueing device: the ops ran");
	char *t = tmp_get(path, prof_text_, sizeof prof_text_, NULL), *l = strstr(t, "\nadd               (all shapes) ");
	unsigned long long n = 0;
	ok(strstr(t, "device fake: ") && l && sscanf(l + 1, "add (all shapes) %llu", &n) == 1 && n == 2,
	   "prof over a queueing device: its table counts the two adds (%llu)", n);
	if (dir == 0)
		tmp_close();
}

/* Whether the process has a library whose path contains name mapped. */
static int mapped_(const char *name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	while (f && !found && fgets(line, sizeof line, f))
		found = strstr(line, name) != NULL;
	if (f)
		fclose(f);
	return found;
}

/*
 * OpenBLAS is loaded when it is chosen, not with the program (its pthreads
 * build starts a pool of threads that spin when it loads): absent under
 * the default provider, loaded by sw_backend_cpu_gemm("openblas"), its
 * products right, OpenMP's thread count untouched.
 */
static void test_openblas_on_demand_(void)
{
	const sw_backend *be = sw_backend_cpu();
	sw_error err = { 0 };
	ok(!mapped_("libopenblas"), "OpenBLAS is not loaded under the default provider (%s)",
	   sw_backend_cpu_gemm_kernels());
	int nt = omp_get_max_threads();
	int rc = sw_backend_cpu_gemm("openblas", &err);
	ok(rc == SW_OK && !strncmp(sw_backend_cpu_gemm_kernels(), "openblas ", 9) && mapped_("libopenblas"),
	   "choosing OpenBLAS loads it (rc=%d %s %s)", rc, err.msg, sw_backend_cpu_gemm_kernels());
	ok(omp_get_max_threads() == nt, "OpenMP's threads as they were (%d, %d)", omp_get_max_threads(), nt);
	enum { M = 37, N = 70, K = 53 };
	float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K), *C = malloc(sizeof(float) * M * N);
	for (int i = 0; i < M * K; i++)
		A[i] = (float)((i * 7) % 13) / 13 - 0.5f;
	for (int i = 0; i < N * K; i++)
		B[i] = (float)((i * 5) % 11) / 11 - 0.5f;
	be->gemm(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);
	double worst = 0;
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double r = 0;
			for (int k = 0; k < K; k++)
				r += (double)A[i * K + k] * B[j * K + k];
			worst = fabs(C[i * N + j] - r) > worst ? fabs(C[i * N + j] - r) : worst;
		}
	ok(worst < 1e-5, "OpenBLAS's product A B^T, %dx%dx%d (worst %.2g)", M, N, K, worst);
	ok(sw_backend_cpu_gemm("onednn", &err) == SW_OK && !strncmp(sw_backend_cpu_gemm_kernels(), "onednn ", 7),
	   "and back to oneDNN (%s)", sw_backend_cpu_gemm_kernels());
	free(A), free(B), free(C);
}

int main(void)
{
	sw_engine_threads(2);
	test_prof_(); /* first: its children compute, and libgomp's threads do not survive a fork */
	test_prof_async_();
	test_names_();
	test_entries_(sw_backend_cpu());
	test_entries_(sw_backend_guard());
	test_guard_faults_();
	test_vision_ops_();
	test_same_bits_("llama", cfg_("llama", false, false, false));
	test_same_bits_("qwen2 (bias, tied)", cfg_("qwen2", true, false, true));
	test_same_bits_("qwen3 (q/k norm)", cfg_("qwen3", false, true, false));
	test_openblas_on_demand_(); /* last: OpenBLAS, once loaded, stays */
	return tap_done();
}
