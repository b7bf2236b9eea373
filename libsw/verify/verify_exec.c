/*
 * verify_exec.c - exec verifiers: a pool of long-lived sandboxed worker
 * processes that read one JSON sample a line and answer one JSON object a
 * line; and the `code` verifier, which runs generated programs on test
 * cases in the same sandbox.
 *
 * Throughput comes from pipelining: a worker is sent every sample routed to
 * it at once (up to the window), so it never waits for us, and a sample goes
 * to the worker with the fewest outstanding.  Replies come back in the order
 * the samples went out, so the oldest outstanding request of a worker is the
 * one a reply, a death or a timeout belongs to.  A worker that dies, stops
 * answering (the per-reply timeout counts from when its previous reply came)
 * or writes a line that is not a reply costs that one sample a
 * verifier_error; the samples queued behind it go to the restarted worker.
 * Workers that die three times in a row before answering anything mark the
 * verifier broken: its samples then fail at once rather than restart forever.
 *
 * Each worker talks over one AF_UNIX stream socket (its standard input and
 * output both), so that a dead reader costs us EPIPE (MSG_NOSIGNAL), never
 * SIGPIPE, without touching the program's signal handling.  Its standard
 * error is a pipe of its own that we read: each line goes on to the
 * caller's descriptor prefixed with the verifier's name, cut at ERR_LINE
 * bytes and at ERR_RATE lines a second (ERR_BURST at once); what is over
 * is counted and said, never waited for, so a verifier can neither flood
 * sw-verify's standard error nor block on it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "sw/verifier.h"
#include "verify/verify_internal.h"

#define LINE_MAX_ ((size_t)16 << 20) /* a reply longer than this is not one */
#define BROKEN_AFTER 3               /* deaths in a row without a reply */
#define NAMES_BYTES 4096
#define MAX_FILES 16                 /* files a command names, shown in its box */
#define ERR_LINE 1000                /* bytes of a stderr line passed on */
#define ERR_RATE 20.0                /* stderr lines a second passed on, on average */
#define ERR_BURST 100.0              /* and at once */

typedef struct worker_ {
	pid_t pid;
	int fd;                 /* -1 when not running */
	sw_sandbox_dir dir;
	sw_buf out;             /* requests not yet written */
	size_t out_off;
	sw_buf in;              /* reply bytes not yet a whole line */
	size_t scanned;         /* bytes of in already searched for a newline */
	uint64_t *q;            /* outstanding sequence numbers, oldest first (a ring) */
	size_t qhead, qlen;
	double head_since;      /* when the oldest outstanding became the one being answered */
	uint64_t answered;      /* replies since it started */
	int efd;                /* its standard error, -1 when not running or not read */
	sw_buf err;             /* stderr bytes not yet a whole line */
} worker_;

struct sw_vpool {
	struct sw_verify *v;
	size_t vi;
	char name[64];
	char *argv[4];
	char cwd[4096];         /* where sw-verify was started: the command's relative paths */
	char *files[MAX_FILES]; /* what the command names, shown in its box */
	sw_bind binds[MAX_FILES];
	size_t nfiles;
	sw_sandbox sb;
	double timeout;
	size_t window;
	int errfd;
	double err_tokens, err_when; /* the stderr lines it may pass on now, and since when */
	uint64_t err_dropped;
	worker_ *w;
	unsigned nw;
	unsigned usable;        /* the workers that may start: nw, fewer once one could not for want of open files */
	unsigned dead_in_row;
	int broken;
	char broken_why[400];
	sw_buf json;
	char names[NAMES_BYTES];
};

static void err_read_(sw_vpool *p, worker_ *w);

static void worker_stop_(sw_vpool *p, worker_ *w, int *status)
{
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	if (w->pid > 0) {
		sw_sandbox_kill(w->pid);
		int st = 0;
		while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
			;
		if (status)
			*status = st;
		w->pid = 0;
	}
	if (w->efd >= 0) {
		/* what it said before it went (its box is gone: no more comes) */
		err_read_(p, w);
		if (w->efd >= 0)
			close(w->efd);
		w->efd = -1;
	}
	sw_sandbox_reap(&w->dir);
	w->out.len = w->out_off = 0;
	w->err.len = 0;
	w->in.len = w->scanned = 0;
}

static int worker_start_(sw_vpool *p, worker_ *w, sw_error *err)
{
	int sv[2], ep[2] = { -1, -1 };
	char warn[300]; /* said once, when the verifier was added (sw_sandbox_check) */
	int e = 0, rc;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		e = errno;
		rc = sw_fail(err, SW_EIO, "cannot make a socket pair: %s", strerror(e));
	} else if (p->errfd >= 0 && pipe2(ep, O_CLOEXEC)) {
		e = errno;
		close(sv[0]);
		close(sv[1]);
		rc = sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(e));
	}
	if (e) {
		if (err)
			err->sys_errno = e; /* EMFILE: the pool goes on with fewer workers */
		return rc;
	}
	sw_sandbox_cgroup(&p->sb, &w->dir); /* none where cgroup v2 is not ours: the rlimits hold */
	rc = sw_sandbox_spawn(&p->sb, &w->dir, p->cwd[0] ? p->cwd : NULL, p->binds, p->nfiles,
	                          p->argv, sv[1], sv[1], ep[1], &w->pid, warn, sizeof warn, err);
	close(sv[1]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (rc) {
		close(sv[0]);
		if (ep[0] >= 0)
			close(ep[0]);
		sw_sandbox_reap(&w->dir);
		return rc;
	}
	w->efd = ep[0];
	if (w->efd >= 0)
		fcntl(w->efd, F_SETFL, fcntl(w->efd, F_GETFL) | O_NONBLOCK);
	w->fd = sv[0];
	fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) | O_NONBLOCK);
	w->answered = 0;
	w->head_since = sw_now();
	return 0;
}

sw_vpool *sw_vpool_new(struct sw_verify *v, size_t vi, const char *name, const char *command,
                     const sw_sandbox *sb, unsigned workers, double timeout, size_t window,
                     int errfd, sw_error *err)
{
	sw_vpool *p = calloc(1, sizeof *p);
	if (!p) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	p->v = v;
	p->vi = vi;
	snprintf(p->name, sizeof p->name, "%s", name);
	p->argv[0] = "/bin/sh";
	p->argv[1] = "-c";
	p->argv[2] = strdup(command);
	if (!getcwd(p->cwd, sizeof p->cwd))
		p->cwd[0] = 0;
	p->nfiles = sw_sandbox_files(command, p->cwd[0] ? p->cwd : NULL, p->files, MAX_FILES);
	for (size_t i = 0; i < p->nfiles; i++)
		p->binds[i] = (sw_bind){ p->files[i], p->files[i], 0 };
	p->err_tokens = ERR_BURST;
	p->err_when = sw_now();
	p->sb = *sb;
	p->timeout = timeout;
	p->window = window;
	p->errfd = errfd;
	p->nw = p->usable = workers;
	p->w = calloc(workers, sizeof *p->w);
	if (!p->argv[2] || !p->w)
		goto oom;
	for (unsigned i = 0; i < workers; i++) {
		worker_ *w = &p->w[i];
		w->fd = w->efd = -1;
		if (!(w->q = malloc(window * sizeof *w->q)))
			goto oom;
	}
	for (unsigned i = 0; i < workers; i++)
		if (sw_sandbox_dir_make(&p->w[i].dir, err)) {
			sw_vpool_free(p);
			return NULL;
		}
	return p;
oom:
	sw_vpool_free(p);
	sw_fail(err, SW_ENOMEM, "out of memory");
	return NULL;
}

void sw_vpool_free(sw_vpool *p)
{
	if (!p)
		return;
	/* end of input for every worker, a moment to leave on their own, then SIGKILL */
	for (unsigned i = 0; p->w && i < p->nw; i++)
		if (p->w[i].fd >= 0)
			shutdown(p->w[i].fd, SHUT_WR);
	double until = sw_now() + 1.0;
	for (unsigned i = 0; p->w && i < p->nw; i++) {
		worker_ *w = &p->w[i];
		while (w->pid > 0 && sw_now() < until) {
			int st;
			pid_t r = waitpid(w->pid, &st, WNOHANG);
			if (r == w->pid || (r < 0 && errno != EINTR)) {
				w->pid = 0;
				break;
			}
			struct timespec ts = { 0, 2000000 };
			nanosleep(&ts, NULL);
		}
		worker_stop_(p, w, NULL);
		sw_sandbox_dir_remove(&w->dir);
		sw_buf_release(&w->out);
		sw_buf_release(&w->in);
		sw_buf_release(&w->err);
		free(w->q);
	}
	if (p->err_dropped && p->errfd >= 0)
		dprintf(p->errfd, "[%s] (%llu more lines of its standard error dropped)\n", p->name,
		        (unsigned long long)p->err_dropped);
	for (size_t i = 0; i < p->nfiles; i++)
		free(p->files[i]);
	free(p->w);
	free(p->argv[2]);
	sw_buf_release(&p->json);
	free(p);
}

size_t sw_vpool_nfds(const sw_vpool *p)
{
	return 2 * (size_t)p->nw; /* each worker's socket, then each one's stderr */
}

/* One line of a worker's standard error: on to errfd, prefixed, within the rate. */
static void err_line_(sw_vpool *p, const char *line, size_t n)
{
	double now = sw_now();
	p->err_tokens += (now - p->err_when) * ERR_RATE;
	if (p->err_tokens > ERR_BURST)
		p->err_tokens = ERR_BURST;
	p->err_when = now;
	if (p->err_tokens < 1) {
		p->err_dropped++;
		return;
	}
	p->err_tokens -= 1;
	char buf[4 * ERR_LINE + 200], shown[4 * ERR_LINE + 8];
	int k = 0;
	if (p->err_dropped)
		k = snprintf(buf, sizeof buf, "[%s] (%llu lines of its standard error dropped)\n", p->name,
		             (unsigned long long)p->err_dropped);
	p->err_dropped = 0;
	/* the sandbox's code may write anything: no escape sequence of its reaches the terminal
	 * (a CRLF line's CR is no part of the line) */
	if (n && line[n - 1] == '\r')
		n--;
	size_t keep = n > ERR_LINE ? ERR_LINE : n;
	k += snprintf(buf + k, sizeof buf - (size_t)k, "[%s] %s%s\n", p->name,
	              sw_show_text(shown, sizeof shown, line, keep, 0), keep < n ? " [...]" : "");
	if (k >= (int)sizeof buf) /* (names are short: never, but never past buf either) */
		k = (int)sizeof buf - 1;
	/* whole or not at all: a blocked reader of ours costs the line, never a wait */
	ssize_t wr = write(p->errfd, buf, (size_t)k);
	(void)wr;
}

/* Read what a worker wrote on its standard error; lines go on. */
static void err_read_(sw_vpool *p, worker_ *w)
{
	for (;;) {
		if (sw_buf_reserve(&w->err, 4096))
			return;
		ssize_t n = read(w->efd, w->err.p + w->err.len, w->err.cap - w->err.len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				if (w->err.len)
					err_line_(p, (const char *)w->err.p, w->err.len);
				w->err.len = 0;
				close(w->efd);
				w->efd = -1;
			}
			return;
		}
		w->err.len += (size_t)n;
		size_t start = 0;
		uint8_t *nl;
		while ((nl = memchr(w->err.p + start, '\n', w->err.len - start))) {
			size_t end = (size_t)(nl - w->err.p);
			err_line_(p, (const char *)w->err.p + start, end - start);
			start = end + 1;
		}
		if (w->err.len - start > ERR_LINE) {
			/* a line without end: its first part goes now, the rest is dropped */
			err_line_(p, (const char *)w->err.p + start, w->err.len - start);
			start = w->err.len;
		}
		memmove(w->err.p, w->err.p + start, w->err.len - start);
		w->err.len -= start;
	}
}

static void fail_(sw_vpool *p, uint64_t seq, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_(sw_vpool *p, uint64_t seq, const char *fmt, ...)
{
	char why[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	sw_verify_answer(p->v, seq, p->vi, 0, 0, NULL, 0, why);
}

/* Append the request line of sample seq to the worker's output. */
static int enqueue_(sw_vpool *p, worker_ *w, uint64_t seq, struct sw_rec *rec, sw_error *err)
{
	const uint8_t *mp;
	size_t n;
	int rc;
	if ((rc = sw_rec_bytes(rec, &mp, &n)))
		return sw_fail(err, rc, "cannot encode the record");
	if (w->out_off && w->out_off == w->out.len)
		w->out.len = w->out_off = 0;
	if ((rc = sw_mp_to_json(mp, n, &w->out, err)))
		return rc;
	w->q[(w->qhead + w->qlen) % p->window] = seq;
	if (!w->qlen++)
		w->head_since = sw_now();
	return 0;
}

static void flush_(worker_ *w)
{
	while (w->fd >= 0 && w->out_off < w->out.len) {
		ssize_t n = send(w->fd, w->out.p + w->out_off, w->out.len - w->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			w->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break; /* EAGAIN: later; EPIPE: the read side will see the death */
	}
	if (w->out_off == w->out.len)
		w->out.len = w->out_off = 0;
	else if (w->out_off > ((size_t)1 << 20)) {
		memmove(w->out.p, w->out.p + w->out_off, w->out.len - w->out_off);
		w->out.len -= w->out_off;
		w->out_off = 0;
	}
}

static uint64_t qpop_(sw_vpool *p, worker_ *w)
{
	uint64_t s = w->q[w->qhead];
	w->qhead = (w->qhead + 1) % p->window;
	w->qlen--;
	return s;
}

/* Fail everything still queued on w (the verifier is broken). */
static void fail_all_(sw_vpool *p, worker_ *w)
{
	while (w->qlen)
		fail_(p, qpop_(p, w), "%s", p->broken_why);
}

/*
 * The worker is gone or must go: the oldest outstanding sample gets why,
 * the worker is stopped, and if samples remain a new one starts and is sent
 * them again.
 */
static int restart_(sw_vpool *p, worker_ *w, const char *why, int blame_status, sw_error *err)
{
	int status = 0;
	int answered = w->answered > 0;
	worker_stop_(p, w, &status);
	char how[200];
	if (blame_status) {
		sw_sandbox_status_str(status, how, sizeof how);
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
			snprintf(how, sizeof how, "used up its CPU time (cpu=%llu s)", (unsigned long long)p->sb.cpu_s);
	} else {
		snprintf(how, sizeof how, "%s", why);
	}
	p->dead_in_row = answered ? 1 : p->dead_in_row + 1;
	if (w->qlen)
		fail_(p, qpop_(p, w), "worker %s%s%s", how, blame_status && why ? ": " : "",
		      blame_status && why ? why : "");
	if (p->dead_in_row >= BROKEN_AFTER && !p->broken) {
		p->broken = 1;
		snprintf(p->broken_why, sizeof p->broken_why,
		         "broken: %d workers in a row ended before answering (last %s)", BROKEN_AFTER, how);
	}
	if (p->broken) {
		fail_all_(p, w);
		return 0;
	}
	if (!w->qlen)
		return 0;
	/* send the rest again, to a fresh worker */
	size_t left = w->qlen;
	uint64_t *tmp = malloc(left * sizeof *tmp);
	if (!tmp)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	for (size_t i = 0; i < left; i++)
		tmp[i] = qpop_(p, w);
	sw_error e2 = { 0 };
	if (worker_start_(p, w, &e2)) {
		for (size_t i = 0; i < left; i++)
			fail_(p, tmp[i], "cannot restart the worker: %s", e2.msg);
		free(tmp);
		p->dead_in_row++;
		return 0;
	}
	int rc = 0;
	for (size_t i = 0; i < left && !rc; i++) {
		struct sw_rec *rec = sw_verify_rec(p->v, tmp[i]);
		if (rec)
			rc = enqueue_(p, w, tmp[i], rec, err);
	}
	free(tmp);
	flush_(w);
	return rc;
}

/* The worker that may start with the fewest samples outstanding (the first of equals). */
static worker_ *least_busy_(sw_vpool *p)
{
	worker_ *w = &p->w[0];
	for (unsigned i = 1; i < p->usable; i++)
		if (p->w[i].qlen < w->qlen)
			w = &p->w[i];
	return w;
}

int sw_vpool_submit(sw_vpool *p, uint64_t seq, struct sw_rec *rec, sw_error *err)
{
	if (p->broken) {
		fail_(p, seq, "%s", p->broken_why);
		return 0;
	}
	worker_ *w = least_busy_(p);
	if (w->fd < 0) {
		sw_error e2 = { 0 };
		int rc = worker_start_(p, w, &e2);
		unsigned k = (unsigned)(w - p->w);
		if (rc && k > 0 && e2.sys_errno == EMFILE) {
			/* the workers before it run: the pool goes on with them, said once */
			p->usable = k;
			sw_verify_warn(p->v, "%s: %u of its %u workers run: the next cannot start (%s)", p->name, k, p->nw,
			               e2.msg);
			w = least_busy_(p);
			rc = w->fd < 0 ? worker_start_(p, w, &e2) : 0;
		}
		if (rc) {
			p->dead_in_row++;
			if (p->dead_in_row >= BROKEN_AFTER) {
				p->broken = 1;
				snprintf(p->broken_why, sizeof p->broken_why, "broken: %s", e2.msg);
			}
			fail_(p, seq, "cannot start the worker: %s", e2.msg);
			return 0;
		}
	}
	int rc = enqueue_(p, w, seq, rec, err);
	if (!rc && w->out.len - w->out_off >= 65536)
		flush_(w);
	return rc;
}

size_t sw_vpool_watch(sw_vpool *p, struct pollfd *fds, size_t max, double *deadline)
{
	size_t n = 0;
	for (unsigned i = 0; i < p->nw && n < max; i++) {
		worker_ *w = &p->w[i];
		flush_(w);
		fds[n].fd = w->fd; /* -1: poll ignores it */
		fds[n].events = (short)(w->fd >= 0 ? POLLIN | (w->out_off < w->out.len ? POLLOUT : 0) : 0);
		fds[n].revents = 0;
		n++;
		if (w->fd >= 0 && w->qlen) {
			double d = w->head_since + p->timeout;
			if (*deadline <= 0 || d < *deadline)
				*deadline = d;
		}
	}
	for (unsigned i = 0; i < p->nw && n < max; i++, n++) {
		fds[n].fd = p->w[i].efd;
		fds[n].events = POLLIN;
		fds[n].revents = 0;
	}
	return n;
}

/* One reply line for the oldest outstanding sample of w. */
static int reply_(sw_vpool *p, worker_ *w, const char *line, size_t n, sw_error *err)
{
	if (!w->qlen)
		return restart_(p, w, "wrote a line nobody asked for", 0, err);
	uint64_t seq = qpop_(p, w);
	w->answered++;
	p->dead_in_row = 0;
	w->head_since = sw_now();
	double score;
	unsigned nn;
	char why[300];
	if (sw_verify_parse_reply(line, n, &score, p->names, sizeof p->names, &nn,
	                          SW_VERIFIER_MAX_VIOLATIONS, why, sizeof why)) {
		sw_verify_answer(p->v, seq, p->vi, 0, 0, NULL, 0, why);
		return 0;
	}
	size_t len = 0;
	for (unsigned i = 0; i < nn; i++)
		len += strlen(p->names + len) + 1;
	sw_verify_answer(p->v, seq, p->vi, 1, score, p->names, len, NULL);
	return 0;
}

static int read_(sw_vpool *p, worker_ *w, sw_error *err)
{
	for (;;) {
		if (sw_buf_reserve(&w->in, 65536))
			return sw_fail(err, SW_ENOMEM, "out of memory");
		ssize_t n = recv(w->fd, w->in.p + w->in.len, w->in.cap - w->in.len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		/* EOF, or a reset (it died with requests unread): it is gone, or closed
		 * its output, which is as bad */
		if (n <= 0)
			return restart_(p, w, n < 0 && errno != ECONNRESET ? strerror(errno) : NULL, 1, err);
		w->in.len += (size_t)n;
		/* whole lines */
		size_t start = 0;
		for (;;) {
			uint8_t *nl = memchr(w->in.p + w->scanned, '\n', w->in.len - w->scanned);
			if (!nl) {
				w->scanned = w->in.len;
				break;
			}
			size_t end = (size_t)(nl - w->in.p);
			int rc = reply_(p, w, (const char *)w->in.p + start, end - start, err);
			if (rc)
				return rc;
			if (w->fd < 0) /* restarted inside: what was read belongs to the dead one */
				return 0;
			start = end + 1;
			w->scanned = start;
		}
		if (start) {
			memmove(w->in.p, w->in.p + start, w->in.len - start);
			w->in.len -= start;
			w->scanned -= start;
		}
		if (w->in.len > LINE_MAX_)
			return restart_(p, w, "wrote a line longer than 16 MiB", 0, err);
	}
}

int sw_vpool_service(sw_vpool *p, const struct pollfd *fds, size_t n, sw_error *err)
{
	double now = sw_now();
	int rc;
	for (unsigned i = 0; i < p->nw && p->nw + i < n; i++) {
		worker_ *w = &p->w[i];
		if (w->efd >= 0 && fds[p->nw + i].fd == w->efd && fds[p->nw + i].revents)
			err_read_(p, w);
	}
	for (unsigned i = 0; i < p->nw && i < n; i++) {
		worker_ *w = &p->w[i];
		if (w->fd < 0 || fds[i].fd != w->fd)
			continue;
		if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
			if ((rc = read_(p, w, err)))
				return rc;
		}
		if (w->fd >= 0 && (fds[i].revents & POLLOUT))
			flush_(w);
	}
	for (unsigned i = 0; i < p->nw; i++) {
		worker_ *w = &p->w[i];
		if (w->fd >= 0 && w->qlen && now > w->head_since + p->timeout) {
			char why[80];
			snprintf(why, sizeof why, "gave no reply within %g s (timeout)", p->timeout);
			if ((rc = restart_(p, w, why, 0, err)))
				return rc;
		}
	}
	return 0;
}

/* ---- code: programs on test cases ---- */

static int write_file_(const char *dir, const char *name, const char *s, size_t n, uid_t uid)
{
	char path[512];
	snprintf(path, sizeof path, "%s/src/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	int e = sw_fd_write_all(fd, s, n, NULL);
	if (e) {
		close(fd);
		errno = e;
		return -1;
	}
	if (geteuid() == 0 && fchown(fd, uid, uid)) {
		/* the sandbox can still read it: 0644 */
	}
	return close(fd);
}

/* Run argv in the box with stdin from file `in` of dir; collect stdout (at most cap bytes). */
static int run_(const sw_sandbox *sb, sw_sandbox_dir *d, int rw, char *const argv[], const char *in,
                double timeout, sw_buf *out, size_t cap, int *status, int *timed_out, char *why,
                size_t whylen)
{
	char src[300];
	snprintf(src, sizeof src, "%s/src", d->path);
	sw_bind bind = { src, "/src", rw };
	int pfd[2], infd = -1;
	char path[512], warn[300];
	sw_error err = { 0 };
	*timed_out = 0;
	if (in) {
		snprintf(path, sizeof path, "%s/src/%s", d->path, in);
		if ((infd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			snprintf(why, whylen, "cannot open the test input: %s", strerror(errno));
			return -1;
		}
	}
	if (pipe2(pfd, O_CLOEXEC)) {
		snprintf(why, whylen, "cannot make a pipe: %s", strerror(errno));
		if (infd >= 0)
			close(infd);
		return -1;
	}
	pid_t pid;
	sw_sandbox_cgroup(sb, d);
	/* the program's files in /src, where it works (read-only but to the compiler) */
	int rc = sw_sandbox_spawn(sb, d, "/src", &bind, 1, argv, infd, pfd[1], -1, &pid, warn, sizeof warn,
	                          &err);
	close(pfd[1]);
	if (infd >= 0)
		close(infd);
	if (rc) {
		close(pfd[0]);
		sw_sandbox_reap(d);
		snprintf(why, whylen, "%s", err.msg);
		return -1;
	}
	out->len = 0;
	double until = sw_now() + timeout;
	for (;;) {
		double left = until - sw_now();
		if (left <= 0) {
			*timed_out = 1;
			break;
		}
		struct pollfd q = { pfd[0], POLLIN, 0 };
		int r = poll(&q, 1, (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		if (sw_buf_reserve(out, 65536))
			break;
		ssize_t n = read(pfd[0], out->p + out->len, out->cap - out->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		out->len += (size_t)n;
		if (out->len > cap)
			break; /* more output than any answer: it fails */
	}
	close(pfd[0]);
	sw_sandbox_kill(pid); /* its group, and with the pid namespace everything it started */
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	sw_sandbox_reap(d);
	return 0;
}

/* Equal but for trailing spaces on each line and trailing newlines. */
static int same_output_(const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0, j = 0;
	for (;;) {
		size_t ie = i, je = j;
		while (ie < an && a[ie] != '\n')
			ie++;
		while (je < bn && b[je] != '\n')
			je++;
		size_t il = ie, jl = je;
		while (il > i && (a[il - 1] == ' ' || a[il - 1] == '\t' || a[il - 1] == '\r'))
			il--;
		while (jl > j && (b[jl - 1] == ' ' || b[jl - 1] == '\t' || b[jl - 1] == '\r'))
			jl--;
		if (il - i != jl - j || memcmp(a + i, b + j, il - i))
			return 0;
		i = ie < an ? ie + 1 : an;
		j = je < bn ? je + 1 : bn;
		/* the rest may only be empty lines */
		int arest = 1, brest = 1;
		for (size_t k = i; k < an; k++)
			if (!strchr(" \t\r\n", a[k]))
				arest = 0;
		for (size_t k = j; k < bn; k++)
			if (!strchr(" \t\r\n", b[k]))
				brest = 0;
		if (arest && brest)
			return 1;
		if (i >= an || j >= bn)
			return 0;
	}
}

int sw_code_run(const sw_sandbox *sb, const char *lang, const char *src, size_t srclen,
                const char *const *inputs, const size_t *inlens, const char *const *outputs,
                const size_t *outlens, size_t ntests, double timeout, double *score, char *why,
                size_t whylen)
{
	sw_sandbox_dir d;
	sw_error err = { 0 };
	sw_buf out = { 0 };
	int rc = -1, status, to;
	if (sw_sandbox_dir_make(&d, &err)) {
		snprintf(why, whylen, "%s", err.msg);
		return -1;
	}
	const char *file = !strcmp(lang, "c") ? "prog.c" : !strcmp(lang, "sh") ? "prog.sh" : "prog.py";
	if (write_file_(d.path, file, src, srclen, d.uid)) {
		snprintf(why, whylen, "cannot write the program: %s", strerror(errno));
		goto out;
	}
	char *py[] = { "python3", "prog.py", NULL }, *sh[] = { "/bin/sh", "prog.sh", NULL };
	char *bin[] = { "./prog", NULL };
	char *const *argv = !strcmp(lang, "c") ? bin : !strcmp(lang, "sh") ? sh : py;
	if (!strcmp(lang, "c")) {
		char *cc[] = { "cc", "-O1", "-w", "-o", "prog", "prog.c", "-lm", NULL };
		if (run_(sb, &d, 1, cc, NULL, fmax(timeout, 30), &out, 1 << 20, &status, &to, why, whylen))
			goto out;
		if (to || !WIFEXITED(status) || WEXITSTATUS(status)) {
			/* it does not compile: the program's fault, every test fails */
			*score = 0;
			rc = 0;
			goto out;
		}
	}
	size_t passed = 0;
	for (size_t i = 0; i < ntests; i++) {
		if (write_file_(d.path, "input.txt", inputs[i], inlens[i], d.uid)) {
			snprintf(why, whylen, "cannot write the test input: %s", strerror(errno));
			goto out;
		}
		if (run_(sb, &d, 0, argv, "input.txt", timeout, &out, outlens[i] + 4096, &status, &to, why, whylen))
			goto out;
		if (!to && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		    same_output_((const char *)out.p, out.len, outputs[i], outlens[i]))
			passed++;
	}
	*score = (double)passed / (double)ntests;
	rc = 0;
out:
	sw_buf_release(&out);
	sw_sandbox_dir_remove(&d);
	return rc;
}
