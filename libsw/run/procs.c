/*
 * procs.c - the processes of the machine as /proc lists them: each one's
 * parent, group and state.  What the run needs to find what its stages left
 * outside their group: an MPI launcher (Open MPI's mpirun) puts each rank in
 * a process group of its own, so a signal to the stages' group does not
 * reach the ranks, and a rank that outlives its launcher is reparented to
 * the run (the subreaper), not to the group.  A zombie is a process that has
 * ended: it is listed with state 'Z' until its parent collects it.
 *
 * Async-signal-safe and without malloc (raw getdents64 into a buffer on the
 * stack): the guard, a child forked from a process that may have threads,
 * calls it too.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "run/run_internal.h"

struct linux_dirent64_ {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

size_t sw_run_utoa(char *out, unsigned long v)
{
	char rev[24];
	size_t n = 0;
	do
		rev[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < sizeof rev);
	for (size_t i = 0; i < n; i++)
		out[i] = rev[n - 1 - i];
	out[n] = 0;
	return n;
}

/* /proc/PID/stat's pid, state, ppid and pgrp: 0, or -1 when the process is gone or the line is not one. */
static int read_stat_(long pid, sw_proc_info *p)
{
	char path[40] = "/proc/", buf[512];
	size_t n = 6;
	n += sw_run_utoa(path + n, (unsigned long)pid);
	memcpy(path + n, "/stat", 6);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t got = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (got <= 0)
		return -1;
	buf[got] = 0;
	/* "PID (COMM) S PPID PGRP ...": the command may hold spaces and ')', so from the last ')' */
	char *s = NULL;
	for (char *c = buf; *c; c++)
		if (*c == ')')
			s = c;
	if (!s || s[1] != ' ' || !s[2] || s[3] != ' ')
		return -1;
	p->pid = (pid_t)pid;
	p->state = s[2];
	long f[2] = { 0, 0 };
	s += 4;
	for (int i = 0; i < 2; i++) {
		int neg = *s == '-', digits = 0;
		s += neg;
		for (; *s >= '0' && *s <= '9'; s++, digits++)
			f[i] = f[i] * 10 + (*s - '0');
		if (!digits || (i == 0 && *s != ' '))
			return -1;
		f[i] = neg ? -f[i] : f[i];
		s++;
	}
	p->ppid = (pid_t)f[0];
	p->pgrp = (pid_t)f[1];
	return 0;
}

int sw_procs_each(int (*fn)(const sw_proc_info *p, void *arg), void *arg)
{
	char buf[4096] __attribute__((aligned(8)));
	int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return n < 0 ? -1 : 0;
		}
		for (long off = 0; off < n;) {
			struct linux_dirent64_ *d = (struct linux_dirent64_ *)(buf + off);
			off += d->d_reclen;
			long pid = 0;
			const char *c = d->d_name;
			for (; *c >= '0' && *c <= '9' && pid < 1L << 40; c++)
				pid = pid * 10 + (*c - '0');
			sw_proc_info p;
			if (*c || !pid || read_stat_(pid, &p))
				continue;
			int rc = fn(&p, arg);
			if (rc) {
				close(fd);
				return rc;
			}
		}
	}
}

static int live_in_group_(const sw_proc_info *p, void *arg)
{
	return p->pgrp == *(pid_t *)arg && p->state != 'Z' && p->state != 'X';
}

int sw_procs_group_alive(pid_t pgid)
{
	return sw_procs_each(live_in_group_, &pgid) > 0;
}

typedef struct {
	pid_t self, own; /* this process and its group */
	int found;
} orphans_;

/* A child of ours in a group not ours: a stage's; its group killed, then it collected. */
static int orphan_(const sw_proc_info *p, void *arg)
{
	orphans_ *o = arg;
	if (p->ppid != o->self || p->pgrp == o->own || p->pgrp <= 0)
		return 0;
	kill(-p->pgrp, SIGKILL);
	kill(p->pid, SIGKILL);
	while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
		;
	o->found++;
	return 0;
}

int sw_procs_collect_orphans(void)
{
	orphans_ o = { getpid(), getpgrp(), 0 };
	int total = 0;
	/* each round collects what the last one's kills reparented to us; a bound against a fork bomb's churn */
	for (int round = 0; round < 64; round++) {
		o.found = 0;
		if (sw_procs_each(orphan_, &o) < 0 || !o.found)
			break;
		total += o.found;
	}
	return total;
}
