/*
 * sw-audit - check, list and extend a run's audit log, and print the
 * digests it records.
 *
 *   sw-audit verify RUNDIR     the hash chain, every checkpoint it names and,
 *                              with --pubkey, every record's signature
 *   sw-audit show RUNDIR       the records, one line each
 *   sw-audit keygen KEY        a signing key pair: KEY (secret, 0600), KEY.pub
 *   sw-audit digest PATH ...   BLAKE2b-256 of files and directories
 *   sw-audit log RUNDIR EVENT [KEY=VALUE | KEY:=JSON ...]
 *                              append a record (a script's own stage)
 *
 * The work is libsw's (sw/audit.h); this file parses and prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "sw/audit.h"
#include "sw/model.h"

static const cli_opt opts[] = {
	{ 'H', 'H', "head", "hash", NULL,
	  "verify: some record must have this hash (a head kept elsewhere; catches a cut or rewritten log)" },
	{ 'c', 'c', "checkpoint", "path", "dir",
	  "log: record the checkpoint directory RUNDIR/path with its digests" },
	{ 'P', 0, "pubkey", "file", "file",
	  "verify: every record must be signed by this key (KEY.pub of keygen), and a finished run's log end" },
	{ 'w', 'w', "weights", NULL, NULL,
	  "digest: of each model directory's weights as sw-run's log records them (an iteration's weights_digest)" },
	{ 0, 0, NULL, NULL, NULL, NULL }
};

static const cli_prog prog = {
	"sw-audit", "command [arg ...]", "file",
	"Verify (verify RUNDIR), list (show RUNDIR) or extend (log RUNDIR EVENT [KEY=VALUE ...]) a run's audit\n"
	"log, print digests (digest PATH ...), or make a signing key (keygen KEY).  With $SW_SIGN_KEY set, log\n"
	"signs what it appends.",
	opts, "verify|show|log|digest|keygen"
};

/* "RUNDIR/audit.log" for a directory, else the path itself: what messages name. */
static const char *log_name_(const char *path)
{
	static char buf[4200];
	struct stat st;
	if (!stat(path, &st) && S_ISDIR(st.st_mode)) {
		size_t n = strlen(path);
		snprintf(buf, sizeof buf, "%s%saudit.log", path, n && path[n - 1] == '/' ? "" : "/");
		return buf;
	}
	return path;
}

/* A message about the log names it; libsw's I/O messages name their file already. */
static void die_(const char *path, const sw_error *e)
{
	char buf[600];
	if (e->record || (path && e->code != SW_EIO))
		cli_die_stream(log_name_(path), e);
	cli_die("%s", sw_error_str(e, buf, sizeof buf));
}

static int show_(const sw_audit_entry *e, void *ud)
{
	(void)ud;
	if (cli_verbosity > 0)
		printf("%6llu  %s  %-18s %s  %s\n", (unsigned long long)e->seq, e->time, e->event, e->hash, e->fields);
	else
		printf("%6llu  %s  %-18s %s\n", (unsigned long long)e->seq, e->time, e->event, e->fields);
	return 0;
}

static void verify_(char **args, int n, const char *head, const char *pub, int show)
{
	if (n != 1)
		cli_usage("%s takes one run directory or audit log", show ? "show" : "verify");
	sw_error err = { 0 };
	sw_audit_report rep;
	if (sw_audit_verify_signed(args[0], head, pub, show ? show_ : NULL, NULL, &rep, &err))
		die_(pub && err.code != SW_EIO && !err.record ? NULL : args[0], &err);
	if (!show && cli_verbosity >= 0) {
		char sig[300] = "";
		if (pub)
			snprintf(sig, sizeof sig, " (every one signed by %.200s)", pub);
		else if (rep.signed_records)
			snprintf(sig, sizeof sig, " (%llu signed, not checked: give --pubkey)",
			         (unsigned long long)rep.signed_records);
		printf("%s: ok: %llu record%s%s, %llu checkpoint%s, head %s\n", log_name_(args[0]),
		       (unsigned long long)rep.records, rep.records == 1 ? "" : "s", sig,
		       (unsigned long long)rep.checkpoints, rep.checkpoints == 1 ? "" : "s", rep.head);
		if (head)
			printf("%s: the head is record %llu\n", log_name_(args[0]), (unsigned long long)rep.head_record);
	}
}

/* Each path's digest; with weights, of a model directory's parameters: f32, in the model's order, as
 * a weight store holds them (sw_store_digest: what sw-run records as an iteration's weights_digest). */
static void digest_(char **args, int n, int weights)
{
	if (n < 1)
		cli_usage(weights ? "digest --weights takes one or more model directories"
		                  : "digest takes one or more files or directories");
	for (int i = 0; i < n; i++) {
		char hex[SW_DIGEST_HEX];
		sw_error err = { 0 };
		sw_model *m = NULL;
		if (weights ? !(m = sw_model_load(args[i], &err)) : sw_digest_path(args[i], hex, &err))
			die_(NULL, &err);
		if (m)
			sw_digest_mem(m->arena, m->nparams * sizeof(float), hex); /* the CPU's: host memory */
		sw_model_free(m);
		printf("%s  %s\n", hex, args[i]);
	}
}

static void log_(char **args, int n, const char *ckpt)
{
	if (n < 2)
		cli_usage("log takes a run directory or audit log, an event and fields");
	sw_audit_rec *r = sw_audit_rec_new(args[1]);
	if (!r)
		cli_usage("'%s' is not an event name (1 to 64 of a-z, 0-9 and _)", args[1]);
	for (int i = 2; i < n; i++) {
		char *eq = strchr(args[i], '=');
		if (!eq || eq == args[i] || (eq == args[i] + 1 && args[i][0] == ':'))
			cli_usage("'%s' is not KEY=VALUE or KEY:=JSON", args[i]);
		int json = eq[-1] == ':';
		*(json ? eq - 1 : eq) = 0;
		int rc = json ? sw_audit_rec_json(r, args[i], eq + 1) : sw_audit_rec_str(r, args[i], eq + 1);
		if (rc == SW_EFORMAT)
			cli_usage("field '%s': '%s' is not JSON", args[i], eq + 1);
		if (rc)
			cli_usage("field '%s': a reserved or repeated key, or a value that is not UTF-8", args[i]);
	}
	const char *dir = args[0];
	char log[4200], rundir[4200];
	struct stat st;
	if (!stat(dir, &st) && S_ISDIR(st.st_mode)) {
		snprintf(log, sizeof log, "%s", log_name_(dir));
		snprintf(rundir, sizeof rundir, "%s", dir);
	} else {
		/* a path that is not there is a log file only when it says so: a
		 * mistyped run directory must not become a new log */
		size_t dl = strlen(dir);
		if (stat(dir, &st) && (dl < 4 || strcmp(dir + dl - 4, ".log")))
			cli_die("cannot open '%s': No such file or directory", dir);
		const char *slash = strrchr(dir, '/');
		snprintf(log, sizeof log, "%s", dir);
		snprintf(rundir, sizeof rundir, "%.*s", slash ? (int)(slash - dir) : 1, slash ? dir : ".");
	}
	sw_error err = { 0 };
	if (ckpt && sw_audit_rec_checkpoint(r, rundir, ckpt, NULL, &err))
		die_(NULL, &err);
	sw_audit *a = sw_audit_open(log, &err);
	if (!a || sw_audit_append(a, r, &err))
		die_(log, &err);
	if (cli_verbosity > 0)
		cli_note("%s: record %llu, hash %s", log, (unsigned long long)sw_audit_seq(a),
		         sw_audit_head(a));
	sw_audit_close(a);
	sw_audit_rec_free(r);
}

static void keygen_(char **args, int n)
{
	if (n != 1)
		cli_usage("keygen takes the path of the secret key to write (the public key goes to PATH.pub)");
	sw_error err = { 0 };
	if (sw_audit_keygen(args[0], &err))
		die_(NULL, &err);
	if (cli_verbosity > 0)
		cli_note("wrote %s (secret, 0600) and %s.pub", args[0], args[0]);
}

int main(int argc, char **argv)
{
	const char *arg, *head = NULL, *ckpt = NULL, *pub = NULL;
	int c, optind_, weights = 0;
	while ((c = cli_next(&prog, argc, argv, &arg, &optind_))) {
		switch (c) {
		case 'H':
			if (strlen(arg) != 64 || strspn(arg, "0123456789abcdef") != 64)
				cli_usage("option '-H' wants 64 lowercase hex digits, not '%s'", arg);
			head = arg;
			break;
		case 'c':
			ckpt = arg;
			break;
		case 'P':
			pub = arg;
			break;
		case 'w':
			weights = 1;
			break;
		}
	}
	char **args = argv + optind_;
	int n = argc - optind_;
	if (n < 1)
		cli_usage("no command (verify, show, digest, log or keygen)");
	const char *cmd = args[0];
	if (head && strcmp(cmd, "verify"))
		cli_usage("option '-H' is for verify");
	if (ckpt && strcmp(cmd, "log"))
		cli_usage("option '-c' is for log");
	if (pub && strcmp(cmd, "verify"))
		cli_usage("option '--pubkey' is for verify");
	if (weights && strcmp(cmd, "digest"))
		cli_usage("option '--weights' is for digest");
	if (!strcmp(cmd, "verify"))
		verify_(args + 1, n - 1, head, pub, 0);
	else if (!strcmp(cmd, "show"))
		verify_(args + 1, n - 1, NULL, NULL, 1);
	else if (!strcmp(cmd, "keygen"))
		keygen_(args + 1, n - 1);
	else if (!strcmp(cmd, "digest"))
		digest_(args + 1, n - 1, weights);
	else if (!strcmp(cmd, "log"))
		log_(args + 1, n - 1, ckpt);
	else
		cli_usage("unknown command '%s' (verify, show, digest, log or keygen)", cmd);
	cli_exit(0);
}
