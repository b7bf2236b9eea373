/*
 * verify_internal.h - what the verifier files of libsw share and do not
 * export: the sandbox that exec and code verifiers run in (sandbox.c).
 */
#ifndef SW_VERIFY_INTERNAL_H
#define SW_VERIFY_INTERNAL_H

#include <sys/types.h>
#include <stdint.h>
#include "sw/error.h"

/* Limits of one sandboxed process; 0 leaves that limit as it is. */
typedef struct sw_sandbox {
	uint64_t cpu_s;  /* RLIMIT_CPU, seconds of CPU time over the process's life */
	uint64_t mem;    /* RLIMIT_AS, bytes of address space */
	uint64_t nproc;  /* RLIMIT_NPROC, processes and threads of its own user id */
	uint64_t fsize;  /* RLIMIT_FSIZE, bytes of the largest file it may write */
	uint64_t nofile; /* RLIMIT_NOFILE */
	int off;         /* 1: no sandbox at all, a plain child (sandbox=no) */
} sw_sandbox;

/* How much isolation a spawn got, best first. */
enum {
	SW_SANDBOX_USERNS = 0, /* user, mount, network, pid, ipc, uts namespaces */
	SW_SANDBOX_ROOTNS = 1, /* the same namespaces but no user namespace; root drops to its own uid */
	SW_SANDBOX_WEAK = 2,   /* no namespaces: seccomp, rlimits, its own directory only */
	SW_SANDBOX_OFF = 3     /* sandbox=no */
};

/* A private working directory and the user id its sandboxes run as. */
typedef struct sw_sandbox_dir {
	char path[256];
	uid_t uid;       /* outside view of the sandbox's user */
	int own_uid;     /* uid is one no one else has (we are root and may use it) */
	int level;       /* the level of the last spawn, SW_SANDBOX_* */
} sw_sandbox_dir;

/* mkdtemp under $TMPDIR (or /tmp), owned by a user id of its own. */
int sw_sandbox_dir_make(sw_sandbox_dir *d, sw_error *err);
/* Remove the directory and everything in it; a no-op when path is empty. */
void sw_sandbox_dir_remove(sw_sandbox_dir *d);

/*
 * Start argv[0] (a PATH search) with fd0, fd1 and fd2 as its standard
 * input, output and error (-1: /dev/null) and every other descriptor
 * closed, in the sandbox sb, with d as TMPDIR and HOME and the one writable
 * place, working in cwd (read-only; NULL or where the sandbox cannot enter
 * it: d).  *pid is the process to wait
 * for and kill; it leads a process group of its own.  warn (warnlen bytes)
 * gets a sentence when the isolation is weaker than SW_SANDBOX_USERNS, else
 * "".  SW_EIO with the reason when it could not start (exec failed too).
 */
int sw_sandbox_spawn(const sw_sandbox *sb, sw_sandbox_dir *d, const char *cwd, char *const argv[],
                     int fd0, int fd1, int fd2, pid_t *pid, char *warn, size_t warnlen, sw_error *err);

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

#endif
