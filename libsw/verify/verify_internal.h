/*
 * verify_internal.h - what the verifier files of libsw share and do not
 * export: the sandbox that exec and code verifiers run in (sandbox.c).
 */
#ifndef SW_VERIFY_INTERNAL_H
#define SW_VERIFY_INTERNAL_H

#include <sys/types.h>
#include <stdint.h>
#include "sw/error.h"

/* What isolation a verifier must have: sandbox=strict|basic|none. */
enum {
	SW_SANDBOX_STRICT = 0, /* namespaces and a root built from nothing, or no run at all */
	SW_SANDBOX_BASIC = 1,  /* the best there is here, down to seccomp and rlimits alone */
	SW_SANDBOX_NONE = 2    /* a plain child: trusted verifiers only */
};

#define SW_SANDBOX_ENV_MAX 16

/* Limits of one box and what it is given; 0 leaves a limit as it is. */
typedef struct sw_sandbox {
	uint64_t cpu_s;  /* RLIMIT_CPU, seconds of CPU time over the process's life */
	uint64_t mem;    /* RLIMIT_AS per process; memory.max of the box's cgroup where there is one */
	uint64_t nproc;  /* RLIMIT_NPROC, processes and threads of its user; pids.max of the cgroup */
	uint64_t fsize;  /* RLIMIT_FSIZE, bytes of the largest file it may write */
	uint64_t nofile; /* RLIMIT_NOFILE */
	uint64_t disk;   /* bytes of its writable directory (a tmpfs) */
	int mode;        /* SW_SANDBOX_STRICT, _BASIC or _NONE */
	unsigned nenv;   /* variables passed by name (env=NAME) besides the allow-list */
	char env[SW_SANDBOX_ENV_MAX][64];
} sw_sandbox;

/* How much isolation a spawn got, best first. */
enum {
	SW_SANDBOX_USERNS = 0, /* user, mount, network, pid, ipc, uts namespaces; a root of its own */
	SW_SANDBOX_ROOTNS = 1, /* the same without a user namespace (root only) */
	SW_SANDBOX_WEAK = 2,   /* no namespaces: seccomp, rlimits, its own directory (sandbox=basic) */
	SW_SANDBOX_OFF = 3     /* sandbox=none */
};

/* A host path shown in the box at box (read-only unless rw). */
typedef struct sw_bind {
	const char *host;
	const char *box;
	int rw;
} sw_bind;

/*
 * A box's host directory: in namespaces the mount point its root is built
 * on (empty on the host side), else (WEAK) its working directory; and the
 * user id and cgroup of its processes.
 */
typedef struct sw_sandbox_dir {
	char path[256];
	uid_t uid;       /* outside view of the sandbox's user (root: one no one else has) */
	int own_uid;     /* uid is one no one else has (we are root and may use it) */
	int level;       /* the level of the last spawn, SW_SANDBOX_USERNS... */
	char cg[320];    /* the box's cgroup v2 directory, "" when none */
} sw_sandbox_dir;

/* mkdtemp under $TMPDIR (or /tmp). */
int sw_sandbox_dir_make(sw_sandbox_dir *d, sw_error *err);
/* Remove the directory and everything in it, never following a symbolic
 * link, whatever modes were left on it; a no-op when path is empty. */
void sw_sandbox_dir_remove(sw_sandbox_dir *d);

/*
 * Start argv[0] (a PATH search) with fd0, fd1 and fd2 as its standard
 * input, output and error (-1: /dev/null) and every other descriptor
 * closed, in a box of sb's mode built on d, with binds[nbinds] in it, in
 * the box's directory cwd (NULL or where it does not exist: its writable
 * directory), with a cleared environment.  *pid leads a process group of
 * its own.  argv NULL: build the box, then end with status 0 (a probe).
 * warn (warnlen bytes) gets a sentence when the isolation is weaker than
 * sandbox=strict's, else "".  SW_EIO with the reason when it could not
 * start, also when sb asks for strict and this machine cannot give it (the
 * message then says what is missing and how to ask for less).
 */
int sw_sandbox_spawn(const sw_sandbox *sb, sw_sandbox_dir *d, const char *cwd, const sw_bind *binds,
                     size_t nbinds, char *const argv[], int fd0, int fd1, int fd2, pid_t *pid,
                     char *warn, size_t warnlen, sw_error *err);

/*
 * Build a box of sb's mode with binds once, to learn now what it gets:
 * 0 with a sentence in warn when weaker than strict (else ""), and in note
 * what holds the box as a whole (its cgroup, or that there is none); or
 * the error of sw_sandbox_spawn.
 */
int sw_sandbox_check(const sw_sandbox *sb, const sw_bind *binds, size_t nbinds, char *warn,
                     size_t warnlen, char *note, size_t notelen, sw_error *err);

/*
 * The files a command names: its words that are paths (relative ones from
 * cwd) of existing files or directories, made absolute, outside what every
 * box shows anyway and outside /etc, /dev, /proc and /sys.  At most max
 * malloc'd paths in out; their number.
 */
size_t sw_sandbox_files(const char *command, const char *cwd, char **out, size_t max);

/* A cgroup v2 of its own for the box about to start on d, where there can be
 * one (d->cg; "" and -1 where not). */
int sw_sandbox_cgroup(const sw_sandbox *sb, sw_sandbox_dir *d);

/* After the box's first process is gone: end what is left in its cgroup and remove it. */
void sw_sandbox_reap(sw_sandbox_dir *d);

/* SIGKILL the process and its group (a pid namespace dies with its first process). */
void sw_sandbox_kill(pid_t pid);

/* "exited with status 3", "killed by signal 9 (Killed)" for a wait status. */
void sw_sandbox_status_str(int status, char *buf, size_t size);

/* ---- the verifier set and its exec pools (verify.c, verify_exec.c) ---- */

struct sw_verify;
struct sw_rec;
typedef struct sw_vpool sw_vpool;
struct pollfd;

/* A verifier's answer for the sample numbered seq: ok with score and the
 * NUL-separated violation names, or failed with why. */
void sw_verify_answer(struct sw_verify *v, uint64_t seq, size_t vi, int ok, double score,
                       const char *names, size_t names_len, const char *why);
/* The record of a sample still in flight (for sending it again). */
struct sw_rec *sw_verify_rec(struct sw_verify *v, uint64_t seq);
void sw_verify_warn(struct sw_verify *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

sw_vpool *sw_vpool_new(struct sw_verify *v, size_t vi, const char *name, const char *command,
                     const sw_sandbox *sb, unsigned workers, double timeout, size_t window,
                     int errfd, sw_error *err);
void sw_vpool_free(sw_vpool *p);
/* Send the sample on its way; the answer comes through sw_verify_answer. */
int sw_vpool_submit(sw_vpool *p, uint64_t seq, struct sw_rec *rec, sw_error *err);
/* Descriptors to watch (at most max) and the earliest deadline (seconds, monotonic). */
size_t sw_vpool_watch(sw_vpool *p, struct pollfd *fds, size_t max, double *deadline);
/* After poll: read replies, write requests, enforce timeouts. */
int sw_vpool_service(sw_vpool *p, const struct pollfd *fds, size_t n, sw_error *err);
size_t sw_vpool_nfds(const sw_vpool *p);

/* The code verifier: run source (language "python", "c" or "sh") on each test. */
int sw_code_run(const sw_sandbox *sb, const char *lang, const char *src, size_t srclen,
                const char *const *inputs, const size_t *inlens, const char *const *outputs,
                const size_t *outlens, size_t ntests, double timeout, double *score, char *why,
                size_t whylen);

double sw_now(void);

/* ---- built-in helpers, for the unit tests ---- */

/* The final answer of a solution: the last \boxed{...}, else what follows the
 * last "####", else the last number; its length, or -1 when there is none. */
long sw_math_answer(const char *s, size_t n, char *out, size_t cap);
/* The answer as a number: integers, decimals, a/b, \frac{a}{b}, with $, commas,
 * spaces, \!, \text{...} and a trailing % ignored; 0 and *x, or -1. */
int sw_math_number(const char *s, size_t n, double *x);
/* Do two answers agree (numerically within rel. tol, else as normalised text)? */
int sw_math_equal(const char *a, size_t an, const char *b, size_t bn, double tol);
/* Countdown: 1 when expr uses each of numbers exactly once and equals target,
 * 0 when it is well-formed but wrong, -1 when it is no expression. */
int sw_countdown_check(const char *expr, size_t n, const long long *numbers, size_t count,
                       long long target);
/* DAPO's overlong penalty for a response of len units. */
double sw_length_penalty(uint64_t len, uint64_t max, uint64_t buffer);

/*
 * Text folded for comparing (fold.c): s[0..n) without bytes that are not
 * UTF-8, in NFC; with SW_FOLD_RULES (what a blocklist's rules read) in NFKC
 * instead, control characters other than whitespace and default-ignorable
 * code points removed, with SW_FOLD_NOMARKS without marks too, and with
 * SW_FOLD_CONFUSABLES the letters of other scripts that read as an ASCII
 * letter made that letter; with SW_FOLD_CASE case-folded (Unicode's full
 * folding).  *text, *len: s itself where that changes nothing, else the
 * folded text in out (NUL-terminated).  0 or SW_ENOMEM.
 */
enum { SW_FOLD_NFC = 0, SW_FOLD_RULES = 1, SW_FOLD_CASE = 2, SW_FOLD_CONFUSABLES = 4, SW_FOLD_NOMARKS = 8 };
struct sw_buf;
int sw_fold_text(const char *s, size_t n, int how, struct sw_buf *out, const char **text, size_t *len);
/* The ASCII letter a letter of another script reads as, where the
 * confusables fold (SW_FOLD_RULES | SW_FOLD_CONFUSABLES) maps it; else 0. */
int sw_fold_confusable(uint32_t cp);

#endif
