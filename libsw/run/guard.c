/*
 * guard.c - what a run leaves behind when it dies, however it dies.
 *
 * sw-run's signal handlers remove its stores and end its stages when it is
 * interrupted, but SIGKILL runs no handler, and a stage's shell forks its
 * command, so PR_SET_PDEATHSIG (which reaches the shell only) leaves the
 * command itself running: a killed run's trainer, balancer and pool stages
 * went on writing the run directory while the resumed run used it.  The
 * guard is a small process forked at the start that holds the read end of
 * a pipe and learns, line by line, the stores the run made and the process
 * group of the stages running now (and the directory of the ranks' shared
 * memory, for a run with ranks).  When the run ends, the pipe's last
 * writer is gone and the guard reads end-of-file: it kills that group,
 * waits until none of it is left, then removes the stores and that
 * directory; only then does it exit.  A normal end has already done all of
 * this; the guard finds nothing left.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdnoreturn.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include "run/run_internal.h"

#define GUARD_MAX_STORES_ 8

struct sw_run_guard {
	int fd;                 /* the write end; -1 once closed */
	pid_t pid;
};

/*
 * Until no process of the group runs, at most secs.  A killed stage stays a
 * zombie until whoever inherited it (init, or a container's first process,
 * which may never collect) does, so kill -0 on the group is not the test.
 */
static void wait_gone_(pid_t pgid, double secs)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	for (int i = 0; i < (int)(secs * 100) && sw_procs_group_alive(pgid); i++)
		nanosleep(&ts, NULL);
}

static noreturn void guard_main_(int rfd)
{
	char line[SW_STORE_NAME_MAX + 64], stores[GUARD_MAX_STORES_][SW_STORE_NAME_MAX + 80];
	char dir[SW_STORE_NAME_MAX + 64] = "";
	int nstores = 0;
	size_t len = 0;
	pid_t pgid = 0;
	/* it outlives the run by moments: a terminal's Ctrl-C or a kill of the run's group is the run's to handle */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		char c;
		ssize_t k = read(rfd, &c, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		if (c != '\n') {
			if (len < sizeof line - 1)
				line[len++] = c;
			continue;
		}
		line[len] = 0;
		len = 0;
		if (line[0] == 'P')
			pgid = (pid_t)atol(line + 1);
		else if (line[0] == 'S' && nstores < GUARD_MAX_STORES_ && !strncmp(line + 1, "shm:", 4))
			snprintf(stores[nstores++], sizeof stores[0], "/dev/shm/%s", line + 5);
		else if (line[0] == 'K') /* the stores stay (--keep-stores) */
			nstores = 0;
		else if (line[0] == 'D' && !strncmp(line + 1, "/dev/shm/", 9))
			snprintf(dir, sizeof dir, "%s", line + 1);
	}
	if (pgid > 0) {
		kill(-pgid, SIGKILL);
		wait_gone_(pgid, 10);
	}
	for (int i = 0; i < nstores; i++)
		unlink(stores[i]);
	if (dir[0])
		sw_run_rmtree(dir);
	_exit(0);
}

sw_run_guard *sw_run_guard_start(sw_error *err)
{
	int fds[2];
	sw_run_guard *g = calloc(1, sizeof *g);
	if (!g) {
		sw_fail(err, SW_ENOMEM, "out of memory");
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(errno));
		free(g);
		return NULL;
	}
	/* the stages' commands that their shells forked come back to the run when the shells end */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		sw_fail(err, SW_EIO, "cannot start the run's guard: %s", strerror(errno));
		close(fds[0]), close(fds[1]);
		free(g);
		return NULL;
	}
	if (pid == 0) {
		/* nothing of the run's but the pipe: no terminal, no output a caller waits on */
		close(fds[1]);
		int dn = open("/dev/null", O_RDWR);
		for (int fd = 0; fd < 3 && dn >= 0; fd++)
			dup2(dn, fd);
		long max = sysconf(_SC_OPEN_MAX);
		for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 1024); fd++)
			if (fd != fds[0])
				close(fd);
		guard_main_(fds[0]);
	}
	close(fds[0]);
	g->fd = fds[1];
	g->pid = pid;
	return g;
}

/* One line to the guard: async-signal-safe (a write of a few bytes to a pipe is atomic). */
static void say_(sw_run_guard *g, char what, const char *text)
{
	char buf[SW_STORE_NAME_MAX + 64];
	size_t n = 0, k = strlen(text);
	if (!g || g->fd < 0 || k + 3 > sizeof buf)
		return;
	buf[n++] = what;
	memcpy(buf + n, text, k);
	n += k;
	buf[n++] = '\n';
	while (write(g->fd, buf, n) < 0 && errno == EINTR)
		;
}

void sw_run_guard_store(sw_run_guard *g, const char *spec)
{
	say_(g, 'S', spec);
}

void sw_run_guard_keep(sw_run_guard *g)
{
	say_(g, 'K', "");
}

void sw_run_guard_dir(sw_run_guard *g, const char *path)
{
	say_(g, 'D', path);
}

void sw_run_guard_pgid(sw_run_guard *g, long pgid)
{
	char num[24];
	sw_run_utoa(num, pgid > 0 ? (unsigned long)pgid : 0);
	say_(g, 'P', num);
}

void sw_run_guard_free(sw_run_guard *g)
{
	if (!g)
		return;
	if (g->fd >= 0)
		close(g->fd);
	free(g);
}
