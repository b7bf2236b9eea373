/*
 * sw-rollout - generate G responses per prompt with the policy, with the
 * per-token log-probabilities of the sampling policy; or, with --score,
 * compute those log-probabilities for responses already in the samples.
 *
 * The scheduler (continuous batching over one decoder, forks of a shared
 * prompt, the counter-based sampling, stop strings, the in-order output,
 * weight updates mid-rollout) is libsw's sw_rollout (sw/rollout.h).  This
 * program is its options, the model and the store, and the streams: a
 * thread of its own reads the input, so that decoding never waits on a pipe
 * that has nothing in it yet, and samples are written as they finish.  On a
 * terminal (or with -v) a line on standard error shows samples, tokens/s
 * and the time left; SIGINT or SIGTERM ends the run between two steps with
 * every sample handed out so far written and the output closed whole.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "sw/dist.h"

enum {
	OPT_FORCE = 0x100, OPT_WEIGHTS, OPT_TEMP, OPT_TOPK, OPT_TOPP, OPT_MINP, OPT_MAXNEW, OPT_STOP,
	OPT_SEED, OPT_BATCH, OPT_STATIC, OPT_SKIP, OPT_SCORE, OPT_AS, OPT_THREADS, OPT_DEVICE
};

static const cli_opt opts[] = {
	{ 'm', 'm', "model", "dir", "dir", "the model directory (config.json, weights, tokenizer)" },
	{ OPT_WEIGHTS, 0, "weights", "store", NULL,
	  "take the weights from a shared store, shm:NAME or cuda:NAME (default $SW_WEIGHTS)" },
	{ 'n', 'n', "samples", "num", NULL, "responses per prompt, G (default 1)" },
	{ OPT_TEMP, 0, "temperature", "t", NULL, "sampling temperature; 0 is greedy (default 1)" },
	{ OPT_TOPK, 0, "top-k", "k", NULL, "sample from the k most probable tokens (default 0: all)" },
	{ OPT_TOPP, 0, "top-p", "p", NULL, "sample from the smallest set of probability >= p (default 1)" },
	{ OPT_MINP, 0, "min-p", "p", NULL, "drop tokens less probable than p times the most probable (default 0)" },
	{ OPT_MAXNEW, 0, "max-new-tokens", "num", NULL, "longest response, in tokens (default 256)" },
	{ OPT_STOP, 0, "stop", "string", NULL, "end a response where string appears (repeatable)" },
	{ OPT_SEED, 0, "seed", "num", NULL, "seed of the sampling (default 0)" },
	{ OPT_BATCH, 0, "batch", "num", NULL, "responses decoded at once (default 64)" },
	{ OPT_STATIC, 0, "static", NULL, NULL,
	  "static batching as a padded batch: the batch waits for its longest response" },
	{ OPT_SKIP, 0, "skip-invalid", NULL, NULL, "skip invalid prompts, count and report them" },
	{ OPT_SCORE, 0, "score", NULL, NULL, "generate nothing: compute the log-probs of the responses given" },
	{ OPT_AS, 0, "as", "field", NULL, "with --score, the field to write (default logprobs)" },
	{ OPT_THREADS, 0, "threads", "num", NULL, "compute threads (default 0: every core)" },
	CLI_OPT_DEVICE(OPT_DEVICE),
	{ 'f', 'f', "format", "format", "msgpack|json",
	  "write msgpack or json (JSON Lines); default msgpack, json on a terminal" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the output with zstd" },
	{ 'o', 'o', "output", "file", "file", "write to file instead of standard output" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-rollout", "[file ...]", "file",
	"Generate responses to prompts with per-token log-probabilities, or score given responses.",
	opts, NULL
};

/* ---- settings and the model ---------------------------------------------------- */

static struct {
	const char *model_dir, *store_spec;
	const sw_backend *be;           /* --device */
	int threads;
	sw_rollout_config rc;
	int32_t eos[64];                /* generation_config.json's end tokens */
	int neos;
} o_;

static sw_model *m_;
static sw_store *store_;
static sw_tokenizer *tok_;
static sw_image_proc *proc_;         /* a LLaVA model's image processor */

static bool same_shape_(const sw_model_config *a, const sw_model_config *b)
{
	return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
	       a->intermediate_size == b->intermediate_size && a->num_hidden_layers == b->num_hidden_layers &&
	       a->num_attention_heads == b->num_attention_heads &&
	       a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim;
}

/* The model, from the store or the directory, and its tokenizer: all of it is here. */
static void load_model_(void)
{
	sw_error err = { 0 };
	if (o_.store_spec) {
		if (!(store_ = sw_store_open(o_.store_spec, false, &err)))
			cli_die("%s", err.msg); /* it names the store */
		const sw_model_config *sc = sw_store_config(store_);
		if (!sc)
			cli_die("store '%s' holds no model (no configuration)", o_.store_spec);
		if (sw_store_nfloats(store_) < sw_model_config_nparams(sc))
			cli_die("store '%s' is smaller than its model", o_.store_spec);
		if (o_.model_dir) {
			char path[4096];
			sw_model_config dc;
			snprintf(path, sizeof path, "%s/config.json", o_.model_dir);
			if (sw_model_config_load(path, &dc, &err))
				cli_die("%s", err.msg);
			if (!same_shape_(&dc, sc))
				cli_die("store '%s' holds a model of another shape than '%s'", o_.store_spec, path);
		}
		if (sw_store_usable_on(store_, o_.be, &err) || !(m_ = sw_model_view_on(o_.be, sc, sw_store_arena(store_), &err)))
			cli_die("store '%s': %s", o_.store_spec, err.msg);
	} else if (!(m_ = sw_model_load_on(o_.be, o_.model_dir, &err))) {
		cli_die("%s", err.msg);
	}
	if (o_.model_dir) {
		if (!(tok_ = sw_tokenizer_load(o_.model_dir, &err)))
			cli_die("%s: %s", o_.model_dir, err.msg);
	} else if (!(tok_ = sw_tokenizer_byte())) {
		cli_die("out of memory");
	}
	int V = m_->cfg.vocab_size;
	/* the built-in byte tokenizer only for a model of its own vocabulary: another model's text would be garbage */
	if (!o_.model_dir && sw_tokenizer_vocab(tok_) != (size_t)V)
		cli_die("store '%s' holds a model of %d tokens and no tokenizer came with it: give -m DIR, the model's "
		        "directory (the built-in byte tokenizer has %zu)", o_.store_spec, V, sw_tokenizer_vocab(tok_));
	if (sw_tokenizer_vocab(tok_) > (size_t)V)
		cli_die("the tokenizer has %zu tokens, more than the model's vocabulary of %d",
		        sw_tokenizer_vocab(tok_), V);
	/* a LLaVA model's pictures are preprocessed as its directory's preprocessor_config.json says */
	if (m_->cfg.vision.model_type[0] && o_.model_dir) {
		if (sw_image_proc_load(o_.model_dir, &proc_, &err))
			cli_die("%s", err.msg);
		o_.rc.image_proc = proc_;
	}
	/* (the model's and the tokenizer's end tokens the scheduler adds itself) */
	if (o_.model_dir && sw_rollout_generation_eos(o_.model_dir, V, o_.eos, (int)(sizeof o_.eos / sizeof *o_.eos),
	                                              &o_.neos, &err))
		cli_die("%s", err.msg);
}

/* ---- the output, and what the feed (sw_rollout_feed: the input, the ranks) hands it ---------- */

static sw_writer *w_;
static const char *out_name_ = "stdout";
static sw_rollout_feed *feed_;
static sw_comm *comm_;               /* the ranks under an MPI launcher, NULL: one process */
/* The signal that interrupts the run (SIGINT, SIGTERM), 0 until one comes: main
 * ends the run between two steps, the feed stops waiting for input. */
static volatile sig_atomic_t stop_sig_;

/* ---- progress on a terminal: samples, tokens/s, the time left ------------------------ */

static sw_rollout *ro_;
static int progress_;                /* 1: shown (stderr a terminal, or -v), 2: a line is up */
static double t0_, tlast_;

/* The line, at most four times a second (final: now, and ended with a newline). */
static void progress_line_(int final)
{
	double t = cli_now();
	if (!progress_ || (!final && t - tlast_ < 0.25))
		return;
	tlast_ = t;
	uint64_t prompts, bytes, written_, skipped;
	int done;
	sw_rollout_feed_counts(feed_, &prompts, &bytes, &done, &written_, &skipped);
	/* every prompt gives G samples (skipped ones none): the total is known once the input has ended */
	uint64_t total = (prompts - skipped) * (uint64_t)(o_.rc.score ? 1 : o_.rc.G);
	double el = t - t0_, rate = el > 0 ? (double)written_ / el : 0;
	char eta[32] = "?";
	if (done && rate > 0 && total >= written_) {
		long s = (long)((double)(total - written_) / rate + 0.5);
		snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
	}
	char of[32] = "";
	if (done)
		snprintf(of, sizeof of, "/%llu", (unsigned long long)total);
	fprintf(stderr, "\r%s: %llu%s samples, %.0f tokens/s, ETA %s \033[K%s", "sw-rollout",
	        (unsigned long long)written_, of, el > 0 ? (double)sw_rollout_tokens(ro_) / el : 0.0, eta,
	        final ? "\n" : "");
	progress_ = final ? 1 : 2;
}

static int put_(void *ctx, const uint8_t *mp, size_t n)
{
	(void)ctx;
	if (sw_writer_put_raw(w_, mp, n))
		cli_die_stream(out_name_, sw_writer_error(w_));
	progress_line_(0);
	return 0;
}

static int flush_(void *ctx)
{
	(void)ctx;
	if (sw_writer_flush(w_))
		cli_die_stream(out_name_, sw_writer_error(w_));
	return 0;
}

static void skipped_(void *ctx, const char *msg)
{
	(void)ctx;
	if (cli_verbosity >= 0)
		cli_warn("%s (skipped)", msg);
}

/* ---- main ---------------------------------------------------------------------------- */

static void on_signal_(int sig)
{
	stop_sig_ = sig;
	signal(sig, SIG_DFL); /* a second one ends the program at once */
}

/* Interrupted: what was handed out goes to the output, closed whole (a zstd frame ended), then the
 * signal's own exit status. */
static void interrupted_(void)
{
	int sig = stop_sig_;
	uint64_t nrec, bytes, written_, skipped;
	int ended;
	sw_rollout_feed_counts(feed_, &nrec, &bytes, &ended, &written_, &skipped);
	if (w_)
		cli_output_end(w_, out_name_);
	if (progress_ == 2)
		progress_line_(1);
	if (w_ && cli_verbosity >= 0)
		cli_warn("interrupted (%s): %llu sample%s written to %s", sig == SIGINT ? "SIGINT" : "SIGTERM",
		         (unsigned long long)written_, written_ == 1 ? "" : "s", out_name_);
	signal(sig, SIG_DFL);
	raise(sig);
	cli_exit(128 + sig);
}

static double real_(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(x) || x < lo || x > hi)
		cli_usage("option '%s' wants a number from %g to %g, not '%s'", opt, lo, hi, s);
	return x;
}

/*
 * Whether sampling p keeps one token whatever the logits (the responses of a
 * prompt are then alike), and the option that makes it so in why.  The most
 * probable of n candidates holds at least 1/n of their mass, so top-p below
 * 1/n keeps it alone; min-p 1 keeps the tokens as probable as it (only
 * exact ties besides).
 */
static int greedy_(const sw_sampling *p, char *why, size_t n)
{
	long cand = p->top_k > 0 && p->top_k < m_->cfg.vocab_size ? p->top_k : m_->cfg.vocab_size;
	if (p->temperature == 0)
		snprintf(why, n, "--temperature 0");
	else if (p->top_k == 1)
		snprintf(why, n, "--top-k 1");
	else if (p->min_p == 1)
		snprintf(why, n, "--min-p 1");
	else if (p->top_p * (double)cand < 1)
		snprintf(why, n, "--top-p %g, below 1/%ld, keeps the most probable token alone", p->top_p, cand);
	else
		return 0;
	return 1;
}

int main(int argc, char **argv)
{
	const char *arg, *out = "-", *gen_only = NULL, **stops = NULL;
	int c, optind_, force = 0, fmt_set = 0, as_set = 0;
	sw_error perr = { 0 };
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	o_.rc = sw_rollout_config_defaults();

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'm':
			o_.model_dir = arg;
			break;
		case OPT_WEIGHTS:
			o_.store_spec = arg;
			break;
		case OPT_DEVICE:
			o_.be = cli_device(arg);
			break;
		case 'n':
			o_.rc.G = (int)cli_uint("-n", arg, 1, 65536);
			gen_only = "-n";
			break;
		case OPT_TEMP:
			o_.rc.sampling.temperature = real_("--temperature", arg, 0, 1e6);
			break;
		case OPT_TOPK:
			o_.rc.sampling.top_k = (int)cli_uint("--top-k", arg, 0, INT32_MAX);
			gen_only = "--top-k";
			break;
		case OPT_TOPP:
			o_.rc.sampling.top_p = real_("--top-p", arg, 0, 1);
			if (o_.rc.sampling.top_p == 0)
				cli_usage("option '--top-p' wants a number above 0 and at most 1, not '%s'", arg);
			gen_only = "--top-p";
			break;
		case OPT_MINP:
			o_.rc.sampling.min_p = real_("--min-p", arg, 0, 1);
			gen_only = "--min-p";
			break;
		case OPT_MAXNEW:
			o_.rc.max_new = (int)cli_uint("--max-new-tokens", arg, 1, 1 << 24);
			gen_only = "--max-new-tokens";
			break;
		case OPT_STOP:
			if (!*arg)
				cli_usage("option '--stop' wants a non-empty string");
			stops = cli_realloc(stops, o_.rc.nstops + 1, sizeof *stops);
			if (sw_rollout_stop_parse(arg, (char **)&stops[o_.rc.nstops++], &perr))
				cli_usage("option '--stop': %s", perr.msg);
			gen_only = "--stop";
			break;
		case OPT_SEED:
			o_.rc.seed = cli_uint("--seed", arg, 0, UINT64_MAX);
			gen_only = "--seed";
			break;
		case OPT_BATCH:
			o_.rc.batch = (int)cli_uint("--batch", arg, 1, 65536);
			break;
		case OPT_STATIC:
			o_.rc.padded = true;
			gen_only = "--static";
			break;
		case OPT_SKIP:
			o_.rc.skip_invalid = true;
			break;
		case OPT_SCORE:
			o_.rc.score = true;
			break;
		case OPT_AS:
			if (!*arg)
				cli_usage("option '--as' wants a field name");
			o_.rc.score_field = arg;
			as_set = 1;
			break;
		case OPT_THREADS:
			o_.threads = (int)cli_uint("--threads", arg, 0, 4096);
			break;
		case 'f':
			wo.format = cli_format(arg);
			fmt_set = 1;
			break;
		case 'z':
			wo.zstd_level = 3;
			break;
		case 'o':
			out = arg;
			break;
		case OPT_FORCE:
			force = 1;
			break;
		}
	}
	if (o_.rc.score && gen_only)
		cli_usage("option '%s' is for generation; --score generates nothing", gen_only);
	if (as_set && !o_.rc.score)
		cli_usage("option '--as' goes with --score");
	if (!o_.store_spec) {
		const char *env = getenv("SW_WEIGHTS");
		if (env && *env)
			o_.store_spec = env;
	}
	if (!o_.model_dir && !o_.store_spec)
		cli_usage("no model: give -m DIR or --weights STORE");
	if (!o_.be)
		o_.be = cli_device(NULL);

	int nfiles = argc - optind_;
	char **files = cli_inputs(argc, argv, optind_, &nfiles);
	sw_error err = { 0 };
	/* under mpirun or srun, the ranks share the prompts out; rank 0 alone writes */
	if (sw_comm_open(&comm_, &err))
		cli_die("%s", err.msg);
	int rank = sw_comm_rank(comm_), size = sw_comm_size(comm_), launched = sw_comm_launched();
	/* (a rank's standard output is the launcher's relay, a terminal under mpirun whatever mpirun's is) */
	cli_output_format(out, &wo, fmt_set || launched, force || launched);
	sw_engine_threads(o_.threads);
	load_model_();
	if (rank == 0)
		w_ = cli_writer_open(out, &wo);
	if (strcmp(out, "-"))
		out_name_ = out;

	o_.rc.stops = stops;
	o_.rc.stop_ids = o_.eos;
	o_.rc.nstop_ids = o_.neos;
	o_.rc.store = store_;
	o_.rc.store_name = o_.store_spec;
	if (!o_.rc.score && sw_sampling_check(&o_.rc.sampling, &err))
		cli_usage("%s", err.msg);
	char why[96];
	if (!o_.rc.score && o_.rc.G > 1 && rank == 0 && cli_verbosity >= 0 && greedy_(&o_.rc.sampling, why, sizeof why))
		cli_warn("warning: -n %d with greedy decoding (%s): a prompt's %d responses are the same", o_.rc.G, why,
		         o_.rc.G);
	sw_rollout *ro = ro_ = sw_rollout_new(m_, tok_, &o_.rc, &err);
	if (!ro)
		cli_die("%s", err.msg);
	/* a signal ignored on entry (nohup, a background job) stays ignored */
	struct sigaction old;
	if (!sigaction(SIGINT, NULL, &old) && old.sa_handler != SIG_IGN)
		signal(SIGINT, on_signal_);
	signal(SIGTERM, on_signal_);
	progress_ = rank == 0 && (cli_verbosity > 0 || (cli_verbosity == 0 && !launched && isatty(2)));
	t0_ = cli_now();
	cli_progress(1, 0); /* (starts the clock of cli_summary; shows nothing) */
	sw_rollout_feed_io fio = { NULL, put_, flush_, skipped_ };
	if (!(feed_ = sw_rollout_feed_new(comm_, files, nfiles, cli_max_record(), &o_.rc, &fio, &stop_sig_, &err)))
		cli_die("%s", err.msg);
	int rc = 0;
	while (!stop_sig_ && (rc = sw_rollout_step(ro, sw_rollout_feed_io_of(feed_), &err)) == 1)
		;
	if (stop_sig_)
		interrupted_();
	rc = sw_rollout_feed_finish(feed_, rc, &err);
	if (progress_ == 2)
		progress_line_(1);
	/* the KV cache freed, back to the GPU, before the output ends: a trainer downstream starts after */
	sw_rollout_free(ro);
	sw_backend_trim(o_.be, NULL);
	/* what came before a bad record is out, the output closed whole, before the message */
	if (w_)
		cli_output_end(w_, out_name_);
	sw_comm_close(comm_);
	if (rc && rank == 0)
		cli_die("%s", err.msg);
	if (rc) /* rank 0 says why and exits 1, the job's status: a rank above 0 exiting 1
	         * first would have mpirun abort the job before rank 0's message is relayed */
		cli_exit(0);
	uint64_t nrec, bytes_in, written, skipped;
	int ended;
	sw_rollout_feed_counts(feed_, &nrec, &bytes_in, &ended, &written, &skipped);
	if (rank == 0)
		cli_summary(written, bytes_in, sw_writer_bytes_out(w_));
	/* how evenly the ranks worked, for sw-run's metrics ($SW_RANK_TIMES) */
	double *busy = cli_malloc(sizeof *busy * (size_t)size);
	int nbusy = sw_rollout_feed_busy(feed_, busy, size);
	if (nbusy && sw_run_rank_times_put("sw-rollout", busy, nbusy, &err))
		cli_warn("%s", err.msg);
	free(busy);
	if (rank == 0 && skipped && cli_verbosity >= 0)
		cli_warn("skipped %llu invalid record%s", (unsigned long long)skipped, skipped == 1 ? "" : "s");
	sw_rollout_feed_free(feed_);
	sw_writer_free(w_);
	sw_tokenizer_free(tok_);
	sw_image_proc_free(proc_);
	sw_model_free(m_);
	sw_store_close(store_);
	for (size_t i = 0; i < o_.rc.nstops; i++)
		free((char *)stops[i]);
	free(stops);
	cli_exit(0);
}
