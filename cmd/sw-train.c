/*
 * sw-train - one optimisation step per input stream: SFT, or a policy
 * gradient of the GRPO family with KL to a reference, on a model directory
 * or in place on a weight store.
 *
 * The step is libsw's sw_trainer (libsw/sw/rl.h, libsw/rl/trainer.c):
 * this program turns its options into the trainer's configuration, reads
 * the stream(s) into it, runs the step, commits it, appends the metrics
 * record and passes the samples through with `advantage` set.  Nothing is
 * written until the whole step has succeeded: a failed or killed step
 * leaves the previous model directory as it was.  With --weights STORE
 * (sw-run's way) the weights and the optimiser state STORE.opt (or
 * $SW_OPT) are trained in place, published as the next version at the end.
 *
 * Under mpirun (or srun) every rank reads the whole stream (rank 0 reads
 * standard input and hands it on) and trains its own samples; a failure
 * on any rank is agreed on by all before any exits, and rank 0 alone
 * writes the model, the metrics and the samples.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

enum {
	OPT_LR = 0x100, OPT_SCHEDULE, OPT_WARMUP, OPT_TOTAL, OPT_MIN_LR, OPT_WD, OPT_GRAD_NORM,
	OPT_CLIP_LOW, OPT_CLIP_HIGH, OPT_CLIP_DUAL, OPT_KL_COEF, OPT_KL_EST, OPT_KL_REWARD, OPT_REF,
	OPT_ENTROPY, OPT_TIS, OPT_EPOCHS, OPT_MINIBATCHES, OPT_MICRO_TOKENS, OPT_NO_PROMPT_SHARING, OPT_RANK, OPT_TRAIN_ON,
	OPT_MAX_LEN, OPT_EPS, OPT_GAMMA, OPT_SEED, OPT_METRICS, OPT_AGG, OPT_FORCE, OPT_WEIGHTS,
	OPT_DEVICE, OPT_SHARD_MOMENTS, OPT_TRAIN_VISION, OPT_MATMUL
};

static const cli_opt opts[] = {
	{ 'm', 'm', "model", "dir", "dir", "the model to train (a Hugging Face model directory)" },
	{ 'o', 'o', "out", "dir", "dir", "write the trained model here, atomically (may be the same as --model)" },
	{ OPT_WEIGHTS, 0, "weights", "store", NULL,
	  "train the weights of a shared store, shm:NAME or cuda:NAME, in place (default $SW_WEIGHTS)" },
	{ 'a', 'a', "algo", "name", "sft|grpo|dr_grpo|dapo|rloo|reinforce++", "the algorithm (default grpo)" },
	{ OPT_AGG, 0, "loss-agg", "mode", "token-mean|seq-mean-token-sum|seq-mean-token-mean|seq-mean-token-sum-norm",
	  "how token losses are combined (default: the algorithm's own)" },
	{ OPT_LR, 0, "lr", "rate", NULL, "peak learning rate (default 1e-6)" },
	{ OPT_SCHEDULE, 0, "schedule", "name", "constant|cosine|linear", "learning-rate schedule after warm-up" },
	{ OPT_WARMUP, 0, "warmup", "updates", NULL, "linear warm-up over this many updates (default 0)" },
	{ OPT_TOTAL, 0, "total-updates", "num", NULL, "length of the cosine or linear decay, in updates" },
	{ OPT_MIN_LR, 0, "min-lr-ratio", "ratio", NULL, "the decay ends at lr times this (default 0)" },
	{ OPT_WD, 0, "weight-decay", "w", NULL, "AdamW's decoupled weight decay (default 0.01)" },
	{ OPT_GRAD_NORM, 0, "max-grad-norm", "norm", NULL, "clip the global gradient norm (default 1; 0: never)" },
	{ OPT_CLIP_LOW, 0, "clip-low", "eps", NULL, "the ratio is clipped below at 1 - eps (default 0.2)" },
	{ OPT_CLIP_HIGH, 0, "clip-high", "eps", NULL, "and above at 1 + eps (default 0.2; 0.28 for dapo)" },
	{ OPT_CLIP_DUAL, 0, "clip-dual", "c", NULL, "dual clip for negative advantages, c > 1 (default off)" },
	{ OPT_KL_COEF, 0, "kl-coef", "beta", NULL, "weight of KL to the reference (default 0; needs --ref)" },
	{ OPT_KL_EST, 0, "kl-estimator", "name", "k1|k2|k3", "KL estimator (default k3 as a loss, k1 in the reward)" },
	{ OPT_KL_REWARD, 0, "kl-in-reward", NULL, NULL, "charge the KL as a reward penalty instead of a loss term" },
	{ OPT_REF, 0, "ref", "model", "dir", "the reference model for the KL term: a directory or a store (default $SW_REF)" },
	{ OPT_ENTROPY, 0, "entropy-coef", "c", NULL, "entropy bonus (default 0)" },
	{ OPT_TIS, 0, "tis-cap", "c", NULL,
	  "truncated importance sampling of off-policy samples, weights capped at c (default off)" },
	{ OPT_EPOCHS, 0, "epochs", "num", NULL, "passes over the samples (default 1)" },
	{ OPT_MINIBATCHES, 0, "minibatches", "num", NULL, "optimiser updates per pass (default 1)" },
	{ OPT_MICRO_TOKENS, 0, "micro-tokens", "num", NULL,
	  "token budget of a micro batch (chosen by default; lowered to fit the activations' memory)" },
	{ OPT_NO_PROMPT_SHARING, 0, "no-prompt-sharing", NULL, NULL,
	  "run each sample's prompt itself (default: a micro batch's samples of one prompt run it once)" },
	{ OPT_RANK, 0, "rank", "r", NULL, "train only the samples with rank r" },
	{ OPT_SHARD_MOMENTS, 0, "shard-moments", NULL, NULL, "under mpirun: shard AdamW's moments across the ranks (ZeRO-1)" },
	{ OPT_TRAIN_VISION, 0, "train-vision", NULL, NULL,
	  "a LLaVA model: train its vision tower too (default: frozen; the projector always learns)" },
	{ OPT_TRAIN_ON, 0, "train-on", "what", "response|prompt+response", "tokens SFT learns (default response)" },
	{ OPT_MAX_LEN, 0, "max-len", "tokens", NULL,
	  "the constant of seq-mean-token-sum-norm (default: the longest response)" },
	{ OPT_EPS, 0, "adv-eps", "eps", NULL, "added to the group std by grpo and dapo (default 1e-6)" },
	{ OPT_GAMMA, 0, "gamma", "g", NULL, "discount of reinforce++ token rewards (default 1)" },
	{ OPT_SEED, 0, "seed", "num", NULL, "seed of the minibatch shuffle for a model without trainer state" },
	{ 'j', 'j', "threads", "num", NULL, "compute threads (default: every core)" },
	CLI_OPT_DEVICE(OPT_DEVICE),
	{ OPT_MATMUL, 0, "matmul", "prec", "f32|bf16",
	  "precision of the matrix products: f32, or bf16 inputs with f32 sums (default f32, $SW_MATMUL)" },
	{ OPT_METRICS, 0, "metrics", "file", "file", "append one JSON record of the step's metrics to file" },
	{ 'f', 'f', "format", "format", "msgpack|json", "write the samples as msgpack or json (default msgpack)" },
	{ 'z', 'z', "zstd", NULL, NULL, "compress the samples written with zstd" },
	{ OPT_FORCE, 0, "force", NULL, NULL, "write msgpack even to a terminal" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-train", "[file ...]", "file",
	"Train a model one step on a stream of samples: SFT, GRPO, Dr. GRPO, DAPO, RLOO or REINFORCE++.",
	opts, NULL
};

static double opt_num_(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (!*s || *end || errno || !(x >= lo && x <= hi))
		cli_usage("option '%s' wants a number from %g to %g, not '%s'", opt, lo, hi, s);
	return x;
}

/* A terminal, as far as the program can tell: mpirun hands its ranks a pseudo-terminal
 * whatever its own output is, so under a launcher nothing is one. */
static int tty_(int fd)
{
	return !sw_comm_launched() && isatty(fd);
}

static int progress_(void)
{
	return cli_verbosity > 0 || (cli_verbosity == 0 && tty_(2));
}

static int is_store_(const char *s)
{
	return !strncmp(s, "shm:", 4) || !strncmp(s, "cuda:", 5);
}

static void on_update_(void *ctx, uint64_t update, const sw_rl_stats *rs, const sw_adamw_stats *as)
{
	if (progress_() && sw_comm_rank(ctx) == 0)
		fprintf(stderr, "%s: update %llu: loss %.6g, grad norm %.4g, lr %.3g\n", prog.name,
		        (unsigned long long)update, rs->loss, as->grad_norm, (double)as->lr);
}

static const char *input_name_(const char *f)
{
	return strcmp(f, "-") ? f : "stdin";
}

/* Say msg, leave the ranks and exit with status.  Every rank says it before any leaves:
 * mpirun stops the whole job when the first rank exits with an error. */
static noreturn void die_ranks_(sw_comm *comm, int status, const char *msg)
{
	/* in one write, so that the ranks' lines do not mix on a shared stderr */
	char line[sizeof((sw_error *)0)->msg + 64];
	int n = snprintf(line, sizeof line, "%s: %s\n", prog.name, msg);
	if (write(2, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1) < 0)
		n = 0;
	sw_comm_close(comm);
	cli_exit(status);
}

/* Every rank's verdict on rc (one process: rc itself); a failure exits 1 on every rank with
 * the message of the lowest rank that failed. */
static void agree_or_die_(sw_comm *comm, int rc, sw_error *err)
{
	if ((rc = sw_comm_agree(comm, rc, err)))
		die_ranks_(comm, 1, err->msg);
}

/* How long each rank worked at the step (its time less the collectives'), to rank 0, which
 * appends it to $SW_RANK_TIMES for sw-run's rank_imbalance; a figure lost is only warned of. */
static void rank_times_(sw_comm *comm, double busy)
{
	sw_error err = { 0 };
	if (!comm)
		return;
	size_t *len = sw_comm_rank(comm) == 0 ? cli_malloc(sizeof *len * (size_t)sw_comm_size(comm)) : NULL;
	void *all = NULL;
	if (sw_comm_gather_bytes(comm, &busy, sizeof busy, 0, &all, len, &err) ||
	    (all && sw_run_rank_times_put(prog.name, all, sw_comm_size(comm), &err)))
		cli_warn("%s", err.msg);
	free(all);
	free(len);
}

/* A reader of file; under ranks, standard input (which mpirun gives rank 0 alone) is read
 * whole by rank 0 and handed to every rank, *held until the reader is done with it. */
static sw_reader *open_input_(sw_comm *comm, const char *file, void **held, sw_error *err)
{
	*held = NULL;
	if (!comm || strcmp(file, "-"))
		return sw_reader_open(file, err);
	uint64_t n = 0, cap = 0;
	char *buf = NULL;
	int rc = SW_OK;
	ssize_t k = 1;
	while (sw_comm_rank(comm) == 0 && k > 0) {
		if (n == cap)
			buf = cli_realloc(buf, cap = cap ? 2 * cap : 1 << 16, 1);
		if ((k = read(0, buf + n, cap - n)) < 0 && errno != EINTR) {
			snprintf(err->msg, sizeof err->msg, "cannot read stdin: %s", strerror(errno));
			rc = err->code = SW_EIO;
		}
		n += k > 0 ? (uint64_t)k : 0;
		k = k < 0 && errno == EINTR ? 1 : k;
	}
	/* the others wait as long as the stages before this one take: asleep, not spinning on a core */
	sw_error be = { 0 };
	int brc = sw_comm_barrier_idle(comm, &be);
	if (!rc && brc)
		rc = brc, *err = be;
	agree_or_die_(comm, rc, err);
	if (sw_comm_bcast(comm, &n, sizeof n, 0, err) || !(*held = buf = cli_realloc(buf, n ? n : 1, 1)) ||
	    sw_comm_bcast(comm, buf, n, 0, err))
		agree_or_die_(comm, err->code ? err->code : SW_EIO, err);
	return sw_reader_memopen(buf, n, "stdin", err);
}

/*
 * Read every file into the trainer: SW_OK, or the first error with err set.  Under ranks
 * an error about a sample another rank trains is that rank's to report: reading stops,
 * *foreign holds the error's code, and SW_OK is returned.
 */
static int read_samples_(sw_trainer *tr, sw_comm *comm, char **files, int nfiles, int *foreign, sw_error *err)
{
	size_t max_record = cli_max_record();
	for (int i = 0; i < nfiles; i++) {
		void *held;
		sw_reader *r = open_input_(comm, files[i], &held, err);
		const char *name = input_name_(files[i]);
		if (!r) {
			snprintf(err->msg, sizeof err->msg, "cannot open '%s': %s", files[i], strerror(err->sys_errno));
			return SW_EIO;
		}
		sw_reader_set_max_record(r, max_record);
		int rc;
		for (;;) {
			sw_rec *rec = sw_rec_new();
			if (!rec)
				cli_die("out of memory");
			if ((rc = sw_reader_next(r, rec)) != 1) {
				sw_rec_free(rec);
				break;
			}
			if (sw_rec_own(rec))
				cli_die("out of memory");
			if ((rc = sw_trainer_add(tr, rec, name, sw_reader_records(r), err))) {
				long long owner = sw_trainer_sample_owner(tr, sw_trainer_nsamples(tr) - 1);
				if (owner >= 0 && owner != sw_comm_rank(comm)) {
					*foreign = rc;
					rc = SW_OK;
				}
				sw_reader_free(r);
				free(held);
				return rc;
			}
		}
		/* an input of no bytes is no samples, not a broken stream */
		if (rc < 0 && sw_reader_error(r)->code != SW_EEMPTY) {
			char buf[200];
			rc = sw_reader_error(r)->code;
			snprintf(err->msg, sizeof err->msg, "%s: %s", name, sw_error_str(sw_reader_error(r), buf, sizeof buf));
			err->code = rc;
			sw_reader_free(r);
			free(held);
			return rc == SW_EPIPE ? SW_EIO : rc;
		}
		sw_reader_free(r);
		free(held);
	}
	if (!sw_trainer_nsamples(tr)) {
		snprintf(err->msg, sizeof err->msg, "%s: no samples to train on (the input is empty)",
		         nfiles == 1 ? input_name_(files[0]) : "input");
		return err->code = SW_EEMPTY;
	}
	return SW_OK;
}

static void write_metrics_(const char *path, const sw_trainer *tr, const sw_trainer_stats *st)
{
	sw_error err = { 0 };
	sw_rec *m = sw_rec_new();
	if (!m || sw_trainer_metrics(tr, st, m, &err))
		cli_die("cannot format the metrics");
	if (sw_metrics_append(path, m, &err)) /* a failed append leaves no part of the record */
		cli_die("%s", err.msg);
	sw_rec_free(m);
}

int main(int argc, char **argv)
{
	const char *arg, *model = NULL, *out = NULL, *weights = NULL, *opt_spec = NULL, *metrics = NULL;
	const char *matmul = NULL;
	int c, optind_, force = 0, fmt_json = 0, threads = 0, fmt_set = 0, total_set = 0, seed_set = 0;
	int agg_set = 0, kl_set = 0, zero1 = 0;
	sw_trainer_config tc = sw_trainer_defaults();
	sw_writer_opts wo = { SW_FMT_MSGPACK, 0 };
	tc.loss.clip_high = -1; /* the algorithm's default */
	tc.on_update = on_update_;

	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'm': model = arg; break;
		case 'o': out = arg; break;
		case OPT_WEIGHTS: weights = arg; break;
		case 'a':
			if (sw_rl_algo_parse(arg, &tc.algo))
				cli_usage("unknown algorithm '%s' (sft, grpo, dr_grpo, dapo, rloo or reinforce++)", arg);
			break;
		case OPT_AGG:
			if (sw_rl_agg_parse(arg, &tc.agg))
				cli_usage("unknown loss aggregation '%s' (token-mean, seq-mean-token-sum, "
				          "seq-mean-token-mean or seq-mean-token-sum-norm)", arg);
			agg_set = 1;
			break;
		case OPT_LR: tc.adam.lr = (float)opt_num_("--lr", arg, 0, 1); break;
		case OPT_SCHEDULE:
			if (!strcmp(arg, "constant"))
				tc.adam.schedule = SW_LR_CONSTANT;
			else if (!strcmp(arg, "cosine"))
				tc.adam.schedule = SW_LR_COSINE;
			else if (!strcmp(arg, "linear"))
				tc.adam.schedule = SW_LR_LINEAR;
			else
				cli_usage("unknown schedule '%s' (constant, cosine or linear)", arg);
			break;
		case OPT_WARMUP: tc.adam.warmup_steps = (int64_t)cli_uint("--warmup", arg, 0, INT64_MAX); break;
		case OPT_TOTAL:
			tc.adam.total_steps = (int64_t)cli_uint("--total-updates", arg, 1, INT64_MAX);
			total_set = 1;
			break;
		case OPT_MIN_LR: tc.adam.min_lr_ratio = (float)opt_num_("--min-lr-ratio", arg, 0, 1); break;
		case OPT_WD: tc.adam.weight_decay = (float)opt_num_("--weight-decay", arg, 0, 1); break;
		case OPT_GRAD_NORM: tc.adam.max_grad_norm = (float)opt_num_("--max-grad-norm", arg, 0, 1e30); break;
		case OPT_CLIP_LOW: tc.loss.clip_low = opt_num_("--clip-low", arg, 0, 0.999999); break;
		case OPT_CLIP_HIGH: tc.loss.clip_high = opt_num_("--clip-high", arg, 0, 1e6); break;
		case OPT_CLIP_DUAL:
			tc.loss.clip_dual = opt_num_("--clip-dual", arg, 0, 1e6);
			if (tc.loss.clip_dual != 0 && tc.loss.clip_dual <= 1)
				cli_usage("option '--clip-dual' wants a bound above 1 (or 0 for none), not '%s'", arg);
			break;
		case OPT_KL_COEF: tc.loss.kl_coef = opt_num_("--kl-coef", arg, 0, 1e6); break;
		case OPT_KL_EST:
			if (sw_rl_kl_parse(arg, &tc.loss.kl_kind))
				cli_usage("unknown KL estimator '%s' (k1, k2 or k3)", arg);
			kl_set = 1;
			break;
		case OPT_KL_REWARD: tc.kl_in_reward = 1; break;
		case OPT_TRAIN_VISION: tc.adam.train_vision_tower = true; break;
		case OPT_REF: tc.ref = arg; break;
		case OPT_DEVICE: tc.backend = cli_device(arg); break;
		case OPT_ENTROPY: tc.loss.entropy_coef = opt_num_("--entropy-coef", arg, 0, 1e6); break;
		case OPT_TIS:
			tc.loss.tis_cap = opt_num_("--tis-cap", arg, 0, 1e6);
			if (tc.loss.tis_cap != 0 && tc.loss.tis_cap < 1)
				cli_usage("option '--tis-cap' wants a cap of at least 1 (or 0 for none), not '%s'", arg);
			break;
		case OPT_EPOCHS: tc.epochs = (long)cli_uint("--epochs", arg, 1, 1000); break;
		case OPT_MINIBATCHES: tc.minibatches = (long)cli_uint("--minibatches", arg, 1, 1000000); break;
		case OPT_MICRO_TOKENS: tc.micro_tokens = cli_uint("--micro-tokens", arg, 1, INT32_MAX); break;
		case OPT_NO_PROMPT_SHARING: tc.no_prompt_sharing = 1; break;
		case OPT_RANK: tc.rank = (long long)cli_uint("--rank", arg, 0, INT32_MAX); break;
		case OPT_TRAIN_ON:
			if (!strcmp(arg, "response"))
				tc.train_all = 0;
			else if (!strcmp(arg, "prompt+response"))
				tc.train_all = 1;
			else
				cli_usage("unknown --train-on '%s' (response or prompt+response)", arg);
			break;
		case OPT_MAX_LEN: tc.max_len = (double)cli_uint("--max-len", arg, 1, INT32_MAX); break;
		case OPT_EPS: tc.adv_eps = opt_num_("--adv-eps", arg, 1e-30, 1); break;
		case OPT_GAMMA: tc.gamma = opt_num_("--gamma", arg, 1e-30, 1); break;
		case OPT_SEED:
			tc.seed = cli_uint("--seed", arg, 0, UINT64_MAX);
			seed_set = 1;
			break;
		case 'j': threads = (int)cli_uint("-j", arg, 1, 4096); break;
		case OPT_METRICS: metrics = arg; break;
		case 'f':
			if (!strcmp(arg, "msgpack"))
				fmt_json = 0;
			else if (!strcmp(arg, "json"))
				fmt_json = 1;
			else
				cli_usage("unknown format '%s' (msgpack or json)", arg);
			fmt_set = 1;
			break;
		case 'z': wo.zstd_level = 3; break;
		case OPT_FORCE: force = 1; break;
		case OPT_SHARD_MOMENTS: zero1 = 1; break;
		case OPT_MATMUL:
			if (strcmp(arg, "f32") && strcmp(arg, "bf16"))
				cli_usage("unknown --matmul '%s' (f32 or bf16)", arg);
			matmul = arg;
			break;
		}
	}
	/* what sw-run hands every stage in the environment */
	const char *env;
	if (!tc.backend)
		tc.backend = cli_device(NULL);
	if (!model && !weights && (env = getenv("SW_WEIGHTS")) && *env)
		weights = env;
	/* sw-run's train stage: its metrics go where the run reads them, whatever the user's command line */
	if (!metrics && (env = getenv("SW_TRAIN_METRICS")) && *env)
		metrics = env;
	if (!matmul && (env = getenv("SW_MATMUL")) && *env) {
		if (strcmp(env, "f32") && strcmp(env, "bf16"))
			cli_usage("SW_MATMUL='%s' is not f32 or bf16", env);
		matmul = env;
	}
	if (!tc.ref && tc.loss.kl_coef > 0 && (env = getenv("SW_REF")) && *env)
		tc.ref = env;
	if (!seed_set && (env = getenv("SW_SEED")) && *env) {
		char *end;
		errno = 0;
		tc.seed = strtoull(env, &end, 10);
		if (*end || errno || env[0] == '-')
			cli_usage("SW_SEED='%s' is not a whole number", env);
	}
	if ((env = getenv("SW_LR_SCALE")) && *env) { /* sw-run's degrade level */
		char *end;
		errno = 0;
		double x = strtod(env, &end);
		if (*end || errno || !(x >= 0 && x <= 1e6))
			cli_usage("SW_LR_SCALE='%s' is not a number from 0 to 1e6", env);
		tc.adam.lr *= (float)x;
	}
	/* settings that only make sense together */
	if (model && weights)
		cli_usage("--model and --weights are two places for the weights: give one");
	if (!model && !weights)
		cli_usage("no model: give --model DIR or --weights STORE");
	if (model && !out)
		cli_usage("no output: give --out DIR (it may be the same as --model)");
	if (weights && out)
		cli_usage("--out is for --model: a store is updated in place");
	if (weights && !is_store_(weights))
		cli_usage("--weights wants a store, shm:NAME or cuda:NAME, not '%s'", weights);
	char opt_buf[SW_STORE_NAME_MAX + 16];
	if (weights) {
		if ((env = getenv("SW_OPT")) && *env) {
			opt_spec = env;
		} else {
			/* shm: beside a cuda: store: the moments must outlive this process, their creator */
			snprintf(opt_buf, sizeof opt_buf, "shm:%s.opt", strchr(weights, ':') + 1);
			opt_spec = opt_buf;
		}
	}
	if (tc.algo == SW_RL_SFT && tc.kl_in_reward)
		cli_usage("sft has no reward to charge a KL penalty to");
	if (tc.train_all && tc.algo != SW_RL_SFT)
		cli_usage("--train-on prompt+response is for --algo sft");
	if ((tc.loss.kl_coef > 0) != (tc.ref != NULL))
		cli_usage(tc.ref ? "--ref is given but --kl-coef is 0" : "--kl-coef needs a reference model: give --ref DIR");
	if (tc.kl_in_reward && !tc.loss.kl_coef)
		cli_usage("--kl-in-reward needs --kl-coef");
	if (tc.loss.tis_cap && tc.algo == SW_RL_SFT)
		cli_usage("--tis-cap is for the policy-gradient algorithms");
	if (tc.adam.schedule != SW_LR_CONSTANT && !total_set)
		cli_usage("a %s schedule needs --total-updates", tc.adam.schedule == SW_LR_COSINE ? "cosine" : "linear");
	if (tc.loss.clip_high < 0)
		tc.loss.clip_high = tc.algo == SW_RL_DAPO ? 0.28 : 0.2;
	if (!agg_set)
		tc.agg = sw_rl_algo_default_agg(tc.algo);
	if (tc.kl_in_reward && !kl_set)
		tc.loss.kl_kind = SW_RL_K1; /* verl's default penalty in the reward */
	if (!fmt_set && !wo.zstd_level && tty_(1))
		fmt_json = 1; /* as sw-cat: a terminal gets JSON unless asked otherwise */
	wo.format = fmt_json ? SW_FMT_JSON : SW_FMT_MSGPACK;
	if (tty_(1) && (!fmt_json || wo.zstd_level) && !force)
		cli_usage("refusing to write binary to a terminal (use -f json or --force)");
	if (sodium_init() < 0)
		cli_die("cannot initialise libsodium");
	signal(SIGPIPE, SIG_IGN);
	sw_engine_threads(threads);
	sw_error merr = { 0 };
	if (matmul && sw_backend_matmul(tc.backend, matmul, &merr))
		cli_die("%s", merr.msg);

	char **files = argv + optind_;
	int nfiles = argc - optind_;
	static char *stdin_only[] = { "-", NULL };
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}

	/* the ranks of mpirun or srun; NULL: one process */
	sw_error err = { 0 };
	sw_comm *comm;
	if (sw_comm_open(&comm, &err))
		cli_die("%s", err.msg);
	/* every rank has the same command line: each says so and leaves */
	if (comm && tc.rank >= 0)
		die_ranks_(comm, 2, "--rank is for one process: under mpirun each rank trains its own samples");
	tc.comm = comm;
	tc.zero1 = zero1 && comm;
	tc.ctx = comm;
	int rank = sw_comm_rank(comm), rc, foreign = 0;
	sw_trainer *tr = sw_trainer_new(&tc, &err);
	rc = !tr ? err.code : weights ? sw_trainer_open_store(tr, weights, opt_spec, &err)
	                              : sw_trainer_load_dir(tr, model, out, &err);
	/* a store has no directory: a LLaVA model's image processor is the run's model directory's */
	if (!rc && weights && (env = getenv("SW_MODEL")) && *env)
		rc = sw_trainer_media_dir(tr, env, &err);
	agree_or_die_(comm, rc, &err);
	rc = read_samples_(tr, comm, files, nfiles, &foreign, &err);
	/* the sample's owner speaks first; the others' own view of it is a last resort */
	agree_or_die_(comm, rc, &err);
	agree_or_die_(comm, foreign, &err);
	sw_trainer_stats st;
	double t0 = cli_now(), c0 = sw_comm_seconds(comm);
	if (sw_trainer_step(tr, &st, &err)) /* agreed by every rank inside */
		die_ranks_(comm, 1, err.msg);
	rank_times_(comm, cli_now() - t0 - (sw_comm_seconds(comm) - c0));
	if (rank == 0 && st.adv.groups && st.adv.singleton_groups == st.adv.groups && cli_verbosity >= 0)
		cli_warn("warning: every group holds one response: %s compares a prompt's responses, so every "
		         "advantage is 0 and the rewards teach nothing (sw-rollout -n 2 or more)", sw_rl_algo_name(tc.algo));
	agree_or_die_(comm, rank == 0 ? sw_trainer_commit(tr, &st, &err) : SW_OK, &err);
	/* the ranks are done: rank 0 writes the rest as one process does */
	sw_comm_close(comm);
	if (rank > 0) {
		sw_trainer_free(tr);
		cli_exit(0);
	}
	if (metrics)
		write_metrics_(metrics, tr, &st);

	/* the samples pass through, each with the advantage it was trained with */
	sw_writer *w = sw_writer_open("-", &wo, &err);
	if (!w)
		cli_die("cannot write the samples: %s", err.msg);
	for (size_t i = 0; i < sw_trainer_nsamples(tr); i++)
		if (sw_writer_put(w, sw_trainer_sample(tr, i)))
			cli_die_stream("stdout", sw_writer_error(w));
	if (sw_writer_close(w))
		cli_die_stream("stdout", sw_writer_error(w));
	sw_writer_free(w);
	if (progress_())
		fprintf(stderr, "%s: step %llu: %zu samples (%zu masked), %zu tokens, %llu updates, loss %.6g, %.2f s\n",
		        prog.name, (unsigned long long)st.step, st.samples, st.masked, st.tokens_total,
		        (unsigned long long)st.updates, st.loss, st.time_total);
	sw_trainer_free(tr);
	cli_exit(0);
}
