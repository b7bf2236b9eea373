/*
 * sandbox.c - the box that exec and code verifiers run in.
 *
 * A verifier is a program we did not write, fed text a policy model wrote:
 * it must not reach the network, read the user's files or talk to the
 * user's processes, write outside its own directory, eat the machine's
 * memory, CPU, disk or process table, or outlive sw-verify.  In order,
 * strongest first, a spawn gets:
 *
 *  USERNS  clone() into new user, mount, network, pid, ipc and uts
 *          namespaces.  Its root is built from nothing: a tmpfs holding
 *          read-only binds of the system directories (/usr, /bin, /lib*,
 *          a few files of /etc), /dev/null and its kin, the files its
 *          command names, a /proc of its own pid namespace, and /box, a
 *          size-limited tmpfs that is its one writable directory (HOME,
 *          TMPDIR, and /tmp points there).  Nothing of /home, /root, /tmp,
 *          /run or /dev/shm is in it, nor the machine's host name (it is
 *          "sandbox").  It runs as user 1000 of its namespace: mapped,
 *          when we are root, to a user id no one else has; else to a
 *          subordinate id of ours (newuidmap, /etc/subuid) where there is
 *          one, else to our own id, which the namespaces keep from
 *          everything of ours.  No supplementary groups.
 *  ROOTNS  the same without a user namespace (root only, where user
 *          namespaces are refused): root builds the box, then drops to the
 *          directory's own user id.
 *  WEAK    no namespaces (sandbox=basic only): a plain child, as its own
 *          user id when we are root; its directory is on the host.
 *
 * Always: a cleared environment; setrlimit CPU, AS, NPROC, FSIZE, NOFILE
 * and CORE (0); a parent death signal; a process group of its own; a
 * seccomp allow-list (what an interpreter, a shell and a compiler need;
 * anything else fails with ENOSYS); and, where cgroup v2 has the memory
 * and pids controllers for us, a cgroup of its own holding the whole box
 * to mem and nproc.  sandbox=strict takes USERNS or ROOTNS and refuses
 * anything less.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include "common/internal.h"
#include "verify/verify_internal.h"

#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define SANDBOX_UID_IN 1000       /* who the verifier is inside its user namespace */
#define STACK_SIZE (256 * 1024)
#define COPY_MAX ((off_t)64 << 20) /* a named file the box user cannot read is copied in, up to this */

/* What of the host the box's root holds, read-only (those that exist here). */
static const char *const sys_dirs_[] = { "usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", NULL };
static const char *const etc_[] = { "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	                             "localtime", "timezone", "nsswitch.conf", "mime.types",
	                             "ssl", "ca-certificates", "ca-certificates.conf", "python3",
	                             "os-release", "gai.conf", NULL };
static const char *const dev_[] = { "null", "zero", "full", "random", "urandom", NULL };

/* ---- the directory ---- */

int sw_sandbox_dir_make(sw_sandbox_dir *d, sw_error *err)
{
	static unsigned counter;
	const char *t = getenv("TMPDIR");
	if (!t || !*t)
		t = "/tmp";
	memset(d, 0, sizeof *d);
	int n = snprintf(d->path, sizeof d->path, "%s/sw-verify.XXXXXX", t);
	if (n < 0 || (size_t)n >= sizeof d->path)
		return sw_fail(err, SW_EINVAL, "TMPDIR is too long");
	if (!mkdtemp(d->path)) {
		int e = errno;
		d->path[0] = 0;
		err->sys_errno = e;
		return sw_fail(err, SW_EIO, "cannot make a directory in '%s': %s", t, strerror(e));
	}
	if (geteuid() == 0) {
		/* A user id no one else has: 2^30 + pid * 256 + a counter. */
		d->uid = (uid_t)(0x40000000u + ((unsigned)getpid() % 0x300000u) * 256u + (counter++ % 256u));
		d->own_uid = chown(d->path, d->uid, d->uid) == 0;
	}
	if (!d->own_uid) {
		/* not root, or root of a user namespace that maps only itself
		 * (a rootless container): outside the namespaces, our own id */
		d->uid = geteuid();
	}
	/* root: where the box's root is built; src: files given to it (code) */
	char p[300];
	snprintf(p, sizeof p, "%s/root", d->path);
	int bad = mkdir(p, 0700);
	/* src: the box's user writes there (the compiler's output); not root, we
	 * cannot give it to that user, who may be a subordinate id of ours: it
	 * is open to all, inside a directory (0700) open to none but us */
	snprintf(p, sizeof p, "%s/src", d->path);
	bad = bad || mkdir(p, 0755) || (d->own_uid && chown(p, d->uid, d->uid)) ||
	      (geteuid() != 0 && chmod(p, 0777));
	if (bad) {
		int e = errno;
		sw_sandbox_dir_remove(d);
		err->sys_errno = e;
		return sw_fail(err, SW_EIO, "cannot make a directory in '%s': %s", t, strerror(e));
	}
	return 0;
}

/*
 * Remove name in dir, never following a symbolic link and never leaving
 * the file system dev: a directory is opened O_NOFOLLOW, given back its
 * modes (a verifier may have left it 000), emptied and removed.
 */
static void rm_at_(int dir, const char *name, dev_t dev, int depth)
{
	if (!unlinkat(dir, name, 0) || errno == ENOENT || depth > 64)
		return;
	struct stat st;
	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode) || st.st_dev != dev)
		return;
	int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && (fchmodat(dir, name, 0700, 0) ||
	               (fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0))
		return;
	/* opened without following: check it is still what we looked at */
	struct stat now;
	if (fstat(fd, &now) || now.st_ino != st.st_ino || now.st_dev != dev) {
		close(fd);
		return;
	}
	fchmod(fd, 0700);
	DIR *dp = fdopendir(fd);
	if (!dp) {
		close(fd);
		return;
	}
	/* names go as we read: read again until a pass finds nothing */
	for (int any = 1, pass = 0; any && pass < 8; pass++) {
		struct dirent *e;
		any = 0;
		rewinddir(dp);
		while ((e = readdir(dp))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			any = 1;
			rm_at_(dirfd(dp), e->d_name, dev, depth + 1);
		}
	}
	closedir(dp);
	unlinkat(dir, name, AT_REMOVEDIR);
}

void sw_sandbox_dir_remove(sw_sandbox_dir *d)
{
	if (!d->path[0])
		return;
	sw_sandbox_reap(d);
	struct stat st;
	if (!lstat(d->path, &st) && S_ISDIR(st.st_mode))
		rm_at_(AT_FDCWD, d->path, st.st_dev, 0);
	d->path[0] = 0;
}

/* ---- the verifier's own files ---- */

/* path made absolute (from cwd) and lexically clean ("." and ".." resolved,
 * no double slashes) into out; -1 when it does not fit or climbs above / */
static int clean_path_(const char *cwd, const char *path, char *out, size_t size)
{
	char buf[8192];
	int n = path[0] == '/' ? snprintf(buf, sizeof buf, "%s", path)
	                       : snprintf(buf, sizeof buf, "%s/%s", cwd, path);
	if (n < 0 || (size_t)n >= sizeof buf || size < 2)
		return -1;
	size_t o = 0;
	for (char *save = NULL, *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		if (!strcmp(t, "."))
			continue;
		if (!strcmp(t, "..")) {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o == 0)
				return -1;
			o--;
			continue;
		}
		size_t tl = strlen(t);
		if (o + 1 + tl + 1 > size)
			return -1;
		out[o++] = '/';
		memcpy(out + o, t, tl);
		o += tl;
	}
	if (!o)
		out[o++] = '/';
	out[o] = 0;
	return 0;
}

static int under_(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n] || !strcmp(dir, "/"));
}

size_t sw_sandbox_files(const char *command, const char *cwd, char **out, size_t max)
{
	static const char *const seps = " \t\n;|&<>()'\"`=";
	static const char *const keep_out[] = { "/dev", "/proc", "/sys", "/etc", "/box", NULL };
	char *copy = strdup(command);
	size_t n = 0;
	if (!copy)
		return 0;
	for (char *save = NULL, *t = strtok_r(copy, seps, &save); t && n < max; t = strtok_r(NULL, seps, &save)) {
		char path[4096];
		struct stat st;
		if (t[0] == '-' || t[0] == '$' || !cwd || clean_path_(cwd, t, path, sizeof path) ||
		    stat(path, &st) || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) || !strcmp(path, "/") ||
		    !strcmp(path, "/tmp"))
			continue;
		/* what the box shows anyway, and what it must not be given */
		int skip = 0;
		for (size_t i = 0; !skip && sys_dirs_[i]; i++) {
			char d[64];
			snprintf(d, sizeof d, "/%s", sys_dirs_[i]);
			skip = under_(path, d);
		}
		for (size_t i = 0; !skip && keep_out[i]; i++)
			skip = under_(path, keep_out[i]);
		/* one inside a directory already given is there already; a directory
		 * holding ones given before takes their place */
		for (size_t i = 0; !skip && i < n; i++)
			skip = under_(path, out[i]);
		for (size_t i = 0; !skip && i < n;) {
			if (under_(out[i], path)) {
				free(out[i]);
				out[i] = out[--n];
			} else {
				i++;
			}
		}
		if (!skip && (out[n] = strdup(path)))
			n++;
	}
	free(copy);
	return n;
}

/* ---- cgroup v2 ---- */

static int write_text_(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int read_text_(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

static int has_word_(const char *list, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (!p[n] || p[n] == ' ' || p[n] == '\n'))
			return 1;
	return 0;
}

/*
 * Our own cgroup v2 directory, when it hands the memory and pids
 * controllers to cgroups below it and we may make them: 0 and dir set, else
 * -1 and why.
 */
static int cg_parent_(char *dir, size_t size, char *why, size_t whylen)
{
	char buf[4096], ctl[512];
	const char *mnt = "/sys/fs/cgroup";
	snprintf(buf, sizeof buf, "%s/cgroup.controllers", mnt);
	if (access(buf, F_OK)) {
		mnt = "/sys/fs/cgroup/unified";
		snprintf(buf, sizeof buf, "%s/cgroup.controllers", mnt);
		if (access(buf, F_OK)) {
			snprintf(why, whylen, "no cgroup v2 file system");
			return -1;
		}
	}
	if (read_text_("/proc/self/cgroup", buf, sizeof buf)) {
		snprintf(why, whylen, "cannot read /proc/self/cgroup");
		return -1;
	}
	char *l = strstr(buf, "0::");
	if (l != buf && (!l || l[-1] != '\n')) {
		snprintf(why, whylen, "no cgroup v2 in /proc/self/cgroup");
		return -1;
	}
	l += 3;
	l[strcspn(l, "\n")] = 0;
	snprintf(dir, size, "%s%s", mnt, strcmp(l, "/") ? l : "");
	char path[4400];
	snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
	if (read_text_(path, ctl, sizeof ctl) || !has_word_(ctl, "memory") || !has_word_(ctl, "pids")) {
		snprintf(why, whylen, "cgroup v2 does not delegate the memory and pids controllers to %s", dir);
		return -1;
	}
	if (access(dir, W_OK)) {
		snprintf(why, whylen, "cannot make cgroups in %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* A cgroup for the box with its limits: 0 and d->cg set, else -1 and why. */
static int cg_make_(const sw_sandbox *sb, sw_sandbox_dir *d, char *why, size_t whylen)
{
	static unsigned counter;
	char parent[256], path[400], v[32];
	if (cg_parent_(parent, sizeof parent, why, whylen))
		return -1;
	snprintf(d->cg, sizeof d->cg, "%s/sw-verify.%d.%u", parent, (int)getpid(), counter++);
	if (mkdir(d->cg, 0755)) {
		snprintf(why, whylen, "cannot make %s: %s", d->cg, strerror(errno));
		d->cg[0] = 0;
		return -1;
	}
	int rc = 0;
	if (sb->mem) {
		snprintf(path, sizeof path, "%s/memory.max", d->cg);
		snprintf(v, sizeof v, "%llu", (unsigned long long)sb->mem);
		rc |= write_text_(path, v);
		snprintf(path, sizeof path, "%s/memory.swap.max", d->cg);
		write_text_(path, "0"); /* absent without swap accounting */
	}
	if (sb->nproc) {
		snprintf(path, sizeof path, "%s/pids.max", d->cg);
		snprintf(v, sizeof v, "%llu", (unsigned long long)sb->nproc);
		rc |= write_text_(path, v);
	}
	if (rc) {
		snprintf(why, whylen, "cannot set the limits of %s: %s", d->cg, strerror(errno));
		rmdir(d->cg);
		d->cg[0] = 0;
		return -1;
	}
	return 0;
}

void sw_sandbox_reap(sw_sandbox_dir *d)
{
	if (!d->cg[0])
		return;
	char path[400];
	snprintf(path, sizeof path, "%s/cgroup.kill", d->cg);
	write_text_(path, "1");
	/* the processes leave the cgroup as the kernel reaps them: a moment */
	for (int i = 0; i < 200 && rmdir(d->cg) && errno == EBUSY; i++) {
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	d->cg[0] = 0;
}

/* ---- the child ---- */

typedef struct spawn_ {
	const sw_sandbox *sb;
	const sw_sandbox_dir *d;
	const char *cwd;
	const sw_bind *binds;
	size_t nbinds;
	char *const *argv;          /* NULL: a probe */
	int fd[3];
	int sync_r;    /* the parent writes one byte when the id maps and the cgroup are in place */
	int status_w;  /* close-on-exec: EOF tells the parent exec worked, else a message */
	int level;
	uid_t box_uid; /* who the verifier is, seen from where the box is built */
	char **envp;
	struct sock_fprog prog;     /* the seccomp filter, compiled by the parent */
} spawn_;

/* What an exec pool's worker that failed for want of open files adds to its reason */
static const char *fd_hint_(int e)
{
	return e == EMFILE ? " (the open file limit, ulimit -n, is too low for the workers)" : "";
}

/* 'S' what: the box could not be built (another level may do); 'X': the command failed to start. */
static _Noreturn void child_fail_(const spawn_ *s, char kind, const char *what)
{
	char buf[512];
	int e = errno;
	/* out of a resource ('R'), not of a sandbox's means: a weaker box would fail the same */
	if (e == EMFILE || e == ENFILE || e == ENOMEM)
		kind = 'R';
	/* 'R' carries the errno itself, for the caller's sys_errno: "R24 what: why" */
	int n = kind == 'R' ? snprintf(buf, sizeof buf, "R%d %s: %s", e, what, strerror(e))
	                    : snprintf(buf, sizeof buf, "%c%s: %s", kind, what, strerror(e));
	if (n > 0 && write(s->status_w, buf, (size_t)n) < 0)
		_exit(127);
	_exit(127);
}

/*
 * The allow-list, compiled in the parent: libseccomp allocates, and the
 * child of clone() must not (another thread of ours, OpenBLAS's say, may
 * have held the allocator's lock at the moment of the clone, and the child
 * would wait on it forever).  What an interpreter (python3, sh) and a
 * compiler driver (cc, as, ld) call; anything else, old or new, fails with
 * ENOSYS, which is what a program expects of a call this kernel lacks.
 * *prog is malloc'd.
 */
static int seccomp_(int nproc_ok, struct sock_fprog *prog)
{
	static const char *const allow[] = {
		/* files */
		"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
		"pwritev2", "open", "openat", "openat2", "creat", "close", "close_range", "stat", "fstat",
		"lstat", "newfstatat", "statx", "statfs", "fstatfs", "lseek", "access", "faccessat",
		"faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat",
		"renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat", "unlink", "unlinkat",
		"symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat",
		"fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask", "truncate", "ftruncate",
		"fallocate", "fsync", "fdatasync", "sync_file_range", "flock", "fcntl", "ioctl", "dup",
		"dup2", "dup3", "pipe", "pipe2", "sendfile", "copy_file_range", "splice", "tee",
		"fadvise64", "readahead", "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat",
		"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
		"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
		/* memory */
		"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mlock",
		"munlock", "memfd_create", "get_mempolicy", "membarrier",
		/* processes, threads, signals */
		"clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
		"kill", "tkill", "tgkill", "getpid", "getppid", "gettid", "getpgrp", "getpgid", "setpgid",
		"getsid", "setsid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
		"getgroups", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
		"rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack",
		"pause", "alarm", "getitimer", "setitimer", "set_tid_address", "set_robust_list",
		"get_robust_list", "futex", "futex_waitv", "rseq", "arch_prctl", "prctl", "restart_syscall",
		"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
		"sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
		"sched_rr_get_interval", "getpriority", "setpriority", "getrlimit", "setrlimit",
		"prlimit64", "getrusage", "times", "capget", "uname", "sysinfo", "getcpu", "getrandom",
		/* time */
		"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
		"timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
		"timerfd_create", "timerfd_settime", "timerfd_gettime",
		/* waiting */
		"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
		"epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd",
		"signalfd4",
		/* local sockets (socket itself below: AF_UNIX only; the network namespace holds no other) */
		"socketpair", "connect", "accept", "accept4", "bind", "listen", "shutdown", "sendto",
		"recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "getsockname", "getpeername",
		"setsockopt", "getsockopt",
		NULL
	};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
	if (!ctx)
		return -1;
	int rc = 0;
	for (size_t i = 0; rc == 0 && allow[i]; i++) {
		int nr = seccomp_syscall_resolve_name(allow[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		if (!nproc_ok && (!strcmp(allow[i], "fork") || !strcmp(allow[i], "vfork")))
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAGAIN), nr, 0);
		else if (strcmp(allow[i], "clone"))
			rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
	}
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
		                      SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	/*
	 * clone without namespace flags: a thread always; a process where its
	 * count can be held (else EAGAIN, and the shell execs its one command).
	 * clone3 hides its flags from seccomp: ENOSYS (the default), and the C
	 * library falls back to clone.
	 */
	const unsigned long ns = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID |
	                         CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
	if (rc == 0 && nproc_ok)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, ns, 0));
	if (rc == 0 && !nproc_ok) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
		                      SCMP_A0(SCMP_CMP_MASKED_EQ, ns | CLONE_THREAD, CLONE_THREAD));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAGAIN), SCMP_SYS(clone), 1,
			                      SCMP_A0(SCMP_CMP_MASKED_EQ, ns | CLONE_THREAD, 0));
	}
	int fd = rc == 0 ? memfd_create("sw-seccomp", MFD_CLOEXEC) : -1;
	if (fd < 0 || seccomp_export_bpf(ctx, fd))
		rc = -1;
	off_t size = rc == 0 ? lseek(fd, 0, SEEK_END) : -1;
	if (size <= 0 || size % (off_t)sizeof(struct sock_filter) || size > 65536 * 8)
		rc = -1;
	if (rc == 0 && !(prog->filter = malloc((size_t)size)))
		rc = -1;
	if (rc == 0 && pread(fd, prog->filter, (size_t)size, 0) != size) {
		free(prog->filter);
		prog->filter = NULL;
		rc = -1;
	}
	if (rc == 0)
		prog->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}

/* The limit v on res, both soft and hard; where the process's own hard limit
 * is lower already (ulimit -n 64 under sw-verify), that one stays: it is
 * stricter, and only a privileged process could raise it. */
static void limit_(const spawn_ *s, int res, uint64_t v, const char *what)
{
	if (!v)
		return;
	struct rlimit cur, r = { (rlim_t)v, (rlim_t)v };
	if (res == RLIMIT_CPU)
		r.rlim_max = (rlim_t)v + 1; /* SIGXCPU first, SIGKILL a second later */
	if (!getrlimit(res, &cur) && cur.rlim_max != RLIM_INFINITY && r.rlim_max > cur.rlim_max) {
		r.rlim_max = cur.rlim_max;
		if (r.rlim_cur > r.rlim_max)
			r.rlim_cur = r.rlim_max;
	}
	if (setrlimit(res, &r))
		child_fail_(s, 'S', what);
}

/* mkdir -p of path's components after the first skip bytes (the box's root). */
static int mkdirs_(char *path, size_t skip, int last)
{
	for (char *p = path + skip + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int r = mkdir(path, 0755);
		*p = '/';
		if (r && errno != EEXIST)
			return -1;
	}
	return last && mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

/* Show the host's src at dst (in the box being built): a symbolic link is
 * made again as one, a directory or a file is bound. */
static void show_(const spawn_ *s, const char *src, char *dst, size_t skip, int must)
{
	struct stat st;
	char link[4096];
	if (lstat(src, &st)) {
		if (must)
			child_fail_(s, 'S', src);
		return;
	}
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(src, link, sizeof link - 1);
		if (n < 0)
			child_fail_(s, 'S', src);
		link[n] = 0;
		if (mkdirs_(dst, skip, 0) || symlink(link, dst))
			child_fail_(s, 'S', dst);
		return;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdirs_(dst, skip, 1))
			child_fail_(s, 'S', dst);
	} else {
		int fd;
		if (mkdirs_(dst, skip, 0) || (fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0444)) < 0)
			child_fail_(s, 'S', dst);
		close(fd);
	}
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL))
		child_fail_(s, 'S', src);
}

/*
 * A file the box's user could not read where it is (mode 0600, say): the
 * builder, still the caller, reads it now and the box gets a copy.
 */
static void copy_in_(const spawn_ *s, const char *src, char *dst, size_t skip, const struct stat *st)
{
	if (st->st_size > COPY_MAX) {
		errno = EFBIG;
		child_fail_(s, 'S', src);
	}
	int in = open(src, O_RDONLY | O_CLOEXEC), out;
	if (in < 0)
		child_fail_(s, 'S', src);
	if (mkdirs_(dst, skip, 0) ||
	    (out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st->st_mode & 0111 ? 0555 : 0444)) < 0)
		child_fail_(s, 'S', dst);
	off_t left = st->st_size;
	while (left > 0) {
		ssize_t n = sendfile(out, in, NULL, (size_t)left);
		if (n <= 0)
			child_fail_(s, 'S', src);
		left -= n;
	}
	close(in);
	close(out);
}

static void write_in_(const spawn_ *s, const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		child_fail_(s, 'S', path);
	close(fd);
}

/*
 * Give the box the binds (its own files): those outside /tmp (tmp 0) or
 * those under it (tmp 1), which go into its own directory, where /tmp
 * points.  A file its user could not read where it is is copied in.
 */
static void give_(const spawn_ *s, const char *r, int tmp)
{
	char p[4352];
	size_t rl = strlen(r);
	for (size_t i = 0; i < s->nbinds; i++) {
		const sw_bind *b = &s->binds[i];
		struct stat st;
		int under = !strncmp(b->box, "/tmp/", 5);
		if (under != tmp)
			continue;
		snprintf(p, sizeof p, "%s%s%s", r, under ? "/box" : "", b->box + (under ? 4 : 0));
		if (stat(b->host, &st))
			child_fail_(s, 'S', b->host);
		if (S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH) && !b->rw)
			copy_in_(s, b->host, p, rl, &st);
		else
			show_(s, b->host, p, rl, 1);
	}
}

/* Build the box's root on d->path and make it the root. */
static void build_root_(const spawn_ *s)
{
	char p[4352], opt[160], r[300];
	snprintf(r, sizeof r, "%s/root", s->d->path);
	size_t rl = strlen(r);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		child_fail_(s, 'S', "cannot make the mounts private");
	if (mount("tmpfs", r, "tmpfs", MS_NOSUID | MS_NODEV, "size=80m,mode=0755"))
		child_fail_(s, 'S', "cannot mount the box's root (tmpfs)");
	/*
	 * The verifier's own files first, while the root holds nothing but the
	 * directories leading to them (sw_sandbox_files keeps them out of
	 * what the system binds below show, and apart from each other); those
	 * under /tmp once its directory is there, /tmp pointing at it.
	 */
	give_(s, r, 0);
	for (size_t i = 0; sys_dirs_[i]; i++) {
		char src[64];
		snprintf(src, sizeof src, "/%s", sys_dirs_[i]);
		snprintf(p, sizeof p, "%s/%s", r, sys_dirs_[i]);
		show_(s, src, p, rl, !strcmp(sys_dirs_[i], "usr"));
	}
	snprintf(p, sizeof p, "%s/etc", r);
	if (mkdir(p, 0755) && errno != EEXIST)
		child_fail_(s, 'S', p);
	for (size_t i = 0; etc_[i]; i++) {
		char src[64];
		snprintf(src, sizeof src, "/etc/%s", etc_[i]);
		snprintf(p, sizeof p, "%s/etc/%s", r, etc_[i]);
		show_(s, src, p, rl, 0);
	}
	/* who the box is, for programs that ask (getpwuid): nobody of the host */
	unsigned u = (unsigned)s->box_uid;
	snprintf(opt, sizeof opt, "root:x:0:0:root:/:/bin/sh\nsandbox:x:%u:%u:sandbox:/box:/bin/sh\n", u, u);
	snprintf(p, sizeof p, "%s/etc/passwd", r);
	write_in_(s, p, opt);
	snprintf(opt, sizeof opt, "root:x:0:\nsandbox:x:%u:\n", u);
	snprintf(p, sizeof p, "%s/etc/group", r);
	write_in_(s, p, opt);
	snprintf(p, sizeof p, "%s/dev", r);
	if (mkdir(p, 0755))
		child_fail_(s, 'S', p);
	for (size_t i = 0; dev_[i]; i++) {
		char src[64];
		snprintf(src, sizeof src, "/dev/%s", dev_[i]);
		snprintf(p, sizeof p, "%s/dev/%s", r, dev_[i]);
		show_(s, src, p, rl, !strcmp(dev_[i], "null"));
	}
	static const char *const links[][2] = { { "fd", "/proc/self/fd" }, { "stdin", "/proc/self/fd/0" },
		                                 { "stdout", "/proc/self/fd/1" },
		                                 { "stderr", "/proc/self/fd/2" } };
	for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
		snprintf(p, sizeof p, "%s/dev/%s", r, links[i][0]);
		if (symlink(links[i][1], p))
			child_fail_(s, 'S', p);
	}
	/* a /proc of its pid namespace where the kernel allows one (a container
	 * that hides parts of its own /proc may not): else none at all */
	snprintf(p, sizeof p, "%s/proc", r);
	if (mkdir(p, 0555))
		child_fail_(s, 'S', p);
	mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	/* its one writable place, a tmpfs of its own: the disk limit */
	snprintf(p, sizeof p, "%s/box", r);
	if (mkdir(p, 0700))
		child_fail_(s, 'S', p);
	int n = snprintf(opt, sizeof opt, "mode=0700,uid=%u,gid=%u", u, u);
	if (s->sb->disk)
		snprintf(opt + n, sizeof opt - (size_t)n, ",size=%llu", (unsigned long long)s->sb->disk);
	if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, opt))
		child_fail_(s, 'S', "cannot mount the box's directory (tmpfs)");
	/* /tmp is its own directory too */
	snprintf(p, sizeof p, "%s/tmp", r);
	if (symlink("/box", p))
		child_fail_(s, 'S', p);
	give_(s, r, 1);
	/* all read-only (and nosuid), but its own directory and what is bound rw */
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID };
	if (syscall(SYS_mount_setattr, AT_FDCWD, r, AT_RECURSIVE, &ro, sizeof ro))
		child_fail_(s, 'S', "cannot make the box's root read-only");
	struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY };
	snprintf(p, sizeof p, "%s/box", r);
	if (syscall(SYS_mount_setattr, AT_FDCWD, p, 0, &rw, sizeof rw))
		child_fail_(s, 'S', "cannot make the box's directory writable");
	for (size_t i = 0; i < s->nbinds; i++) {
		snprintf(p, sizeof p, "%s%s", r, s->binds[i].box);
		if (s->binds[i].rw && syscall(SYS_mount_setattr, AT_FDCWD, p, 0, &rw, sizeof rw))
			child_fail_(s, 'S', p);
	}
	/* and it is the root: the host's goes */
	if (chdir(r) || syscall(SYS_pivot_root, ".", "."))
		child_fail_(s, 'S', "cannot change the root (pivot_root)");
	if (umount2(".", MNT_DETACH) || chdir("/"))
		child_fail_(s, 'S', "cannot let go of the host's root");
	/* its own UTS namespace, named for what it is: not the host's name */
	if (sethostname("sandbox", 7))
		child_fail_(s, 'S', "cannot name the box's host");
}

static int child_(void *arg)
{
	const spawn_ *s = arg;
	const sw_sandbox *sb = s->sb;
	char c = 'g';
	if (s->level != SW_SANDBOX_OFF && (read(s->sync_r, &c, 1) != 1 || (c != 'g' && c != 'r')))
		_exit(127);
	int in_root = c == 'r';
	close(s->sync_r);
	setsid();

	if (s->level <= SW_SANDBOX_ROOTNS)
		build_root_(s);
	if (s->level != SW_SANDBOX_OFF) {
		/* whatever user it ends up as, it execs with no capabilities: a root
		 * of an outer user namespace (rootless containers) would otherwise keep them */
		for (int cap = 0; cap < 64; cap++)
			if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL && errno != EPERM)
				child_fail_(s, 'S', "cannot drop capabilities");
		/*
		 * The raw system calls, not glibc's wrappers: those change every
		 * thread of the process (setxid), and a child cloned from a
		 * threaded sw-verify inherits the list of its parent's threads,
		 * which do not exist here - the wrapper then waits for them forever.
		 */
		if (s->level == SW_SANDBOX_USERNS) {
			long g = SANDBOX_UID_IN, u = SANDBOX_UID_IN;
			if (in_root && syscall(SYS_setgroups, 0, NULL))
				child_fail_(s, 'S', "cannot drop the supplementary groups");
			if (syscall(SYS_setresgid, g, g, g) || syscall(SYS_setresuid, u, u, u))
				child_fail_(s, 'S', "cannot become the sandbox user");
		} else if (s->d->own_uid) {
			long u = (long)s->d->uid;
			if (syscall(SYS_setgroups, 0, NULL) || syscall(SYS_setresgid, u, u, u) ||
			    syscall(SYS_setresuid, u, u, u))
				child_fail_(s, 'S', "cannot become the sandbox user");
		}
	}
	/* after the change of user, which clears it; sw-verify's death is ours */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	const char *home = s->level <= SW_SANDBOX_ROOTNS ? "/box" : s->d->path, *cwd = s->cwd;
	/* no mount namespace: a directory of the box is where it is on the host */
	for (size_t i = 0; cwd && s->level > SW_SANDBOX_ROOTNS && i < s->nbinds; i++)
		if (!strcmp(cwd, s->binds[i].box))
			cwd = s->binds[i].host;
	if ((!cwd || chdir(cwd)) && chdir(home))
		child_fail_(s, 'S', "cannot enter the box's directory");

	/* fds 0, 1, 2 from the three given, in two steps so that they may overlap */
	int hi[3];
	for (int i = 0; i < 3; i++) {
		int f = s->fd[i];
		if (f < 0 || (hi[i] = fcntl(f, F_DUPFD, 10)) < 0) {
			if (errno == EINVAL) /* F_DUPFD at 10 under an open file limit of 10 or less */
				errno = EMFILE;
			child_fail_(s, 'S', "cannot set up standard input and output");
		}
	}
	for (int i = 0; i < 3; i++)
		if (dup2(hi[i], i) < 0)
			child_fail_(s, 'S', "cannot set up standard input and output");
	if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC)) {
		/* an older kernel: close what there is, but the status pipe */
		for (int f = 3; f < 1024; f++)
			if (f != s->status_w)
				close(f);
	}
	signal(SIGPIPE, SIG_DFL);
	if (s->level != SW_SANDBOX_OFF) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &s->prog, 0, 0))
			child_fail_(s, 'S', "cannot install the seccomp filter");
		/* the limits last: the address-space limit may be below what this
		 * copy of sw-verify has mapped (nothing here allocates anyway) */
		limit_(s, RLIMIT_CPU, sb->cpu_s, "cannot limit CPU time");
		limit_(s, RLIMIT_AS, sb->mem, "cannot limit memory");
		limit_(s, RLIMIT_NPROC, sb->nproc, "cannot limit processes");
		limit_(s, RLIMIT_FSIZE, sb->fsize, "cannot limit file size");
		limit_(s, RLIMIT_NOFILE, sb->nofile, "cannot limit open files");
		struct rlimit core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &core);
	}
	/* a probe: the box could be built.  The raw system call, not _exit: a
	 * call to a noreturn function on this clone's own stack makes an
	 * AddressSanitizer build (make check) warn, and the warning's buffer
	 * cannot be mapped under the address-space limit just set */
	if (!s->argv)
		syscall(SYS_exit_group, 0);
	execvpe(s->argv[0], s->argv, s->envp);
	child_fail_(s, 'X', s->argv[0]);
}

/* ---- the parent ---- */

static int write_file_(pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	return write_text_(path, text);
}

/* The first subordinate id of ours in file (/etc/subuid or /etc/subgid): 0 and *start, or -1. */
static int subid_(const char *file, unsigned id, const char *name, unsigned long *start)
{
	FILE *f = fopen(file, "re");
	char line[512];
	int rc = -1;
	if (!f)
		return -1;
	while (rc && fgets(line, sizeof line, f)) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*a = 0;
		char idbuf[16];
		snprintf(idbuf, sizeof idbuf, "%u", id);
		if ((name && !strcmp(line, name)) || !strcmp(line, idbuf)) {
			*start = strtoul(a + 1, NULL, 10);
			rc = strtoul(b + 1, NULL, 10) > 0 ? 0 : -1;
		}
	}
	fclose(f);
	return rc;
}

/* Run newuidmap or newgidmap (setuid helpers) on pid: 0 when it mapped. */
static int newidmap_(const char *prog, pid_t pid, unsigned id, unsigned long sub)
{
	char a[5][24];
	snprintf(a[0], sizeof a[0], "%d", (int)pid);
	snprintf(a[1], sizeof a[1], "%u", id);
	snprintf(a[2], sizeof a[2], "%d", SANDBOX_UID_IN);
	snprintf(a[3], sizeof a[3], "%lu", sub);
	char *argv[] = { (char *)prog, a[0], "0", a[1], "1", a[2], a[3], "1", NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t h;
	int st = -1, rc = posix_spawnp(&h, prog, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		return -1;
	while (waitpid(h, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/*
 * The id maps of the child's user namespace.  Root: 0 is root (to build the
 * box) and 1000 the box's own id.  Else, where /etc/subuid and /etc/subgid
 * give us ids and newuidmap is there: 0 is us and 1000 a subordinate id;
 * else 1000 is us and nothing else exists.  *in_root: the child is 0 inside.
 */
static int maps_(pid_t pid, const sw_sandbox_dir *d, int *in_root, int *sub)
{
	char m[96];
	*in_root = *sub = 0;
	if (geteuid() == 0) {
		snprintf(m, sizeof m, "0 0 1\n%d %u 1\n", SANDBOX_UID_IN, (unsigned)d->uid);
		if (d->own_uid && !write_file_(pid, "uid_map", m)) {
			snprintf(m, sizeof m, "0 0 1\n%d %u 1\n", SANDBOX_UID_IN, (unsigned)d->uid);
			*in_root = 1;
			return write_file_(pid, "gid_map", m);
		}
		/* root of a namespace that maps only root: the box is us */
		snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, (unsigned)geteuid());
		if (write_file_(pid, "uid_map", m))
			return -1;
		snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, (unsigned)getegid());
		return write_file_(pid, "gid_map", m);
	}
	unsigned long su, sg;
	char pwbuf[1024];
	struct passwd pw, *pwp = NULL;
	getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &pwp);
	const char *name = pwp ? pwp->pw_name : NULL;
	if (!subid_("/etc/subuid", (unsigned)geteuid(), name, &su) &&
	    !subid_("/etc/subgid", (unsigned)geteuid(), name, &sg) &&
	    !newidmap_("newuidmap", pid, (unsigned)geteuid(), su) &&
	    !newidmap_("newgidmap", pid, (unsigned)getegid(), sg)) {
		*in_root = *sub = 1;
		return 0;
	}
	if (write_file_(pid, "setgroups", "deny"))
		return -1;
	snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, (unsigned)geteuid());
	if (write_file_(pid, "uid_map", m))
		return -1;
	snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, (unsigned)getegid());
	return write_file_(pid, "gid_map", m);
}

void sw_sandbox_kill(pid_t pid)
{
	if (pid > 0) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
}

/* The cleared environment: PATH, LANG, LC_*, TZ, the env=NAME ones; HOME and TMPDIR the box's. */
static char **env_(const sw_sandbox *sb, const char *home)
{
	extern char **environ;
	size_t ne = 0;
	while (environ[ne])
		ne++;
	char **e = calloc(ne + 4, sizeof *e);
	char *h = malloc(strlen(home) + 6), *t = malloc(strlen(home) + 8);
	if (!e || !h || !t) {
		free(e);
		free(h);
		free(t);
		return NULL;
	}
	sprintf(h, "HOME=%s", home);
	sprintf(t, "TMPDIR=%s", home);
	size_t k = 0;
	int path = 0;
	for (size_t i = 0; i < ne; i++) {
		const char *v = environ[i];
		size_t nl = strcspn(v, "=");
		int ok = (nl == 4 && !strncmp(v, "PATH", 4)) || (nl == 4 && !strncmp(v, "LANG", 4)) ||
		         (nl == 2 && !strncmp(v, "TZ", 2)) || !strncmp(v, "LC_", 3);
		for (unsigned j = 0; !ok && j < sb->nenv; j++)
			ok = strlen(sb->env[j]) == nl && !strncmp(v, sb->env[j], nl);
		if (ok && v[nl] == '=') {
			e[k++] = (char *)v;
			path |= nl == 4 && !strncmp(v, "PATH", 4);
		}
	}
	if (!path)
		e[k++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	e[k++] = h;
	e[k++] = t;
	e[k] = NULL;
	return e;
}

static void env_free_(char **e)
{
	if (!e)
		return;
	size_t k = 0;
	while (e[k])
		k++;
	free(e[k - 2]);
	free(e[k - 1]);
	free(e);
}

/*
 * One try at a level: 0 started (*pid); 1 the box could not be built at
 * this level (why); -1 the command could not start or something else
 * failed (err filled).
 */
static int try_(spawn_ *s, int level, char *stack, pid_t *pid, char *why, size_t whylen, sw_error *err)
{
	int sync[2], status[2], rc = 0;
	const sw_sandbox_dir *d = s->d;
	int pe = pipe2(sync, O_CLOEXEC) ? errno : 0;
	if (!pe && pipe2(status, O_CLOEXEC)) {
		pe = errno;
		close(sync[0]);
		close(sync[1]);
	}
	if (pe) {
		sw_fail(err, SW_EIO, "cannot make a pipe: %s%s", strerror(pe), fd_hint_(pe));
		if (err)
			err->sys_errno = pe; /* EMFILE: an exec pool goes on with fewer workers */
		return -1;
	}
	s->level = level;
	s->sync_r = sync[0];
	s->status_w = status[1];
	s->prog.filter = NULL;
	s->envp = NULL;
	/* RLIMIT_NPROC holds where the box's user is its own: a user id of its
	 * own, or a user namespace (whose processes the kernel counts apart) */
	int nproc_ok = level == SW_SANDBOX_OFF || level == SW_SANDBOX_USERNS || d->own_uid;
	pid_t p = -1;
	errno = 0;
	if (level != SW_SANDBOX_OFF && seccomp_(nproc_ok, &s->prog)) {
		int e = errno; /* memfd_create's, say, out of open files */
		rc = sw_fail(err, SW_EIO, "cannot compile the seccomp filter%s%s%s", e ? ": " : "", e ? strerror(e) : "",
		             fd_hint_(e));
		if (err)
			err->sys_errno = e;
		goto out;
	}
	if (!(s->envp = env_(s->sb, level <= SW_SANDBOX_ROOTNS ? "/box" : d->path))) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	char *shell[4], *cmd = NULL;
	char *const *argv = s->argv;
	if (argv && !nproc_ok && !strcmp(argv[0], "/bin/sh") && argv[1] && !strcmp(argv[1], "-c") && argv[2]) {
		/* no new processes: the shell must become the command, not fork it */
		if (!(cmd = malloc(strlen(argv[2]) + 6))) {
			rc = sw_fail(err, SW_ENOMEM, "out of memory");
			goto out;
		}
		sprintf(cmd, "exec %s", argv[2]);
		shell[0] = argv[0];
		shell[1] = argv[1];
		shell[2] = cmd;
		shell[3] = NULL;
		s->argv = shell;
	}
	s->box_uid = level == SW_SANDBOX_USERNS ? SANDBOX_UID_IN : d->uid;
	const int ns = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
	int flags = level == SW_SANDBOX_USERNS ? CLONE_NEWUSER | ns : level == SW_SANDBOX_ROOTNS ? ns : 0;
	/* the child has its own copy of the stack and of all of s (no CLONE_VM);
	 * what the id maps made of it (root inside or not) it learns from the
	 * byte it waits for */
	p = clone(child_, stack + STACK_SIZE, flags | SIGCHLD, s);
	int e = errno;
	s->argv = argv;
	free(cmd);
	if (p < 0) {
		snprintf(why, whylen, "%s (%s)",
		         level == SW_SANDBOX_USERNS ? "no user namespace" : "no namespaces as root",
		         strerror(e));
		rc = level == SW_SANDBOX_OFF ? (sw_fail(err, SW_EIO, "cannot start: %s", strerror(e)), -1) : 1;
		goto out;
	}
	char go = 'g';
	if (level == SW_SANDBOX_USERNS) {
		int in_root, sub;
		if (maps_(p, d, &in_root, &sub)) {
			snprintf(why, whylen, "no user namespace (cannot write its id maps: %s)", strerror(errno));
			sw_sandbox_kill(p);
			waitpid(p, NULL, 0);
			rc = 1;
			goto out;
		}
		go = in_root ? 'r' : 'g';
	}
	if (d->cg[0] && level != SW_SANDBOX_OFF) {
		char path[400], pidtext[24];
		snprintf(path, sizeof path, "%s/cgroup.procs", d->cg);
		snprintf(pidtext, sizeof pidtext, "%d", (int)p);
		if (write_text_(path, pidtext)) {
			rc = sw_fail(err, SW_EIO, "cannot put the box in its cgroup %s: %s", d->cg, strerror(errno));
			sw_sandbox_kill(p);
			waitpid(p, NULL, 0);
			goto out;
		}
	}
	close(sync[0]);
	sync[0] = -1;
	close(status[1]);
	status[1] = -1;
	if (level != SW_SANDBOX_OFF && write(sync[1], &go, 1) != 1) {
		/* the child is gone already; its message (if any) says why */
	}
	char msg[512];
	ssize_t n, got = 0;
	while ((n = read(status[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0)
			got += n;
	msg[got] = 0;
	if (got > 0 || !s->argv) {
		int st = 0;
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		if (got == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			*pid = 0; /* the probe passed */
		} else if (got > 0 && msg[0] == 'S') {
			snprintf(why, whylen, "%s", msg + 1);
			rc = 1;
		} else if (got > 0 && msg[0] == 'R') {
			char *why_r;
			int e = (int)strtol(msg + 1, &why_r, 10);
			rc = sw_fail(err, SW_EIO, "cannot start %s%s%s: %s%s", s->argv ? "'" : "the box", s->argv ? s->argv[0] : "",
			             s->argv ? "'" : "", why_r + (*why_r == ' '),
			             fd_hint_(e));
			if (err)
				err->sys_errno = e;
		} else {
			rc = sw_fail(err, SW_EIO, "cannot start '%s' in the sandbox: %s",
			             s->argv ? s->argv[0] : "the probe", got ? msg + 1 : "it died");
		}
		goto out;
	}
	*pid = p;
out:
	free(s->prog.filter);
	s->prog.filter = NULL;
	env_free_(s->envp);
	if (sync[0] >= 0)
		close(sync[0]);
	if (status[1] >= 0)
		close(status[1]);
	close(sync[1]);
	close(status[0]);
	return rc;
}

int sw_sandbox_spawn(const sw_sandbox *sb, sw_sandbox_dir *d, const char *cwd, const sw_bind *binds,
                     size_t nbinds, char *const argv[], int fd0, int fd1, int fd2, pid_t *pid,
                     char *warn, size_t warnlen, sw_error *err)
{
	spawn_ s = { 0 };
	s.sb = sb;
	s.d = d;
	s.cwd = cwd;
	s.binds = binds;
	s.nbinds = nbinds;
	s.argv = argv;
	s.fd[0] = fd0;
	s.fd[1] = fd1;
	s.fd[2] = fd2;
	warn[0] = 0;
	/* everything the child needs is made here: the child must not allocate */
	char *stack = malloc(STACK_SIZE);
	int null = -1, rc = 1;
	char why[2][600] = { "", "" };
	if (!stack)
		return sw_fail(err, SW_ENOMEM, "out of memory");
	/* /dev/null is opened here: the sandbox user may not be let at it */
	if ((fd0 < 0 || fd1 < 0 || fd2 < 0) && (null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		free(stack);
		return sw_fail(err, SW_EIO, "cannot open /dev/null: %s", strerror(errno));
	}
	for (int i = 0; i < 3; i++)
		if (s.fd[i] < 0)
			s.fd[i] = null;
	if (sb->mode == SW_SANDBOX_NONE) {
		rc = try_(&s, SW_SANDBOX_OFF, stack, pid, why[0], sizeof why[0], err);
	} else {
		rc = try_(&s, SW_SANDBOX_USERNS, stack, pid, why[0], sizeof why[0], err);
		if (rc == 1 && geteuid() == 0)
			rc = try_(&s, SW_SANDBOX_ROOTNS, stack, pid, why[1], sizeof why[1], err);
		else if (rc == 1)
			snprintf(why[1], sizeof why[1], "not root");
		if (rc == 1 && sb->mode == SW_SANDBOX_BASIC) {
			char w3[600];
			rc = try_(&s, SW_SANDBOX_WEAK, stack, pid, w3, sizeof w3, err);
			if (rc == 1)
				rc = sw_fail(err, SW_EIO, "cannot start the box: %s", w3);
		}
		if (rc == 1)
			rc = sw_fail(err, SW_EIO,
			             "sandbox=strict cannot be had here: %s; %s; ask for less by name: "
			             "sandbox=basic (seccomp, rlimits, its own directory) or sandbox=none",
			             why[0], why[1]);
	}
	if (null >= 0)
		close(null);
	free(stack);
	if (rc)
		return rc;
	d->level = s.level;
	if (s.level == SW_SANDBOX_ROOTNS)
		snprintf(warn, warnlen, "%s: the sandbox runs in mount, network and pid namespaces %s", why[0],
		         d->own_uid ? "as a user id of its own" : "as our own user id, with no new processes");
	else if (s.level == SW_SANDBOX_WEAK)
		snprintf(warn, warnlen,
		         "sandbox=basic: %s; %s: no network, mount or pid isolation; relying on seccomp "
		         "(no sockets but AF_UNIX%s), rlimits and %s",
		         why[0], why[1], d->own_uid ? "" : ", no new processes",
		         d->own_uid ? "a user id of its own" : "its own working directory");
	else if (s.level == SW_SANDBOX_OFF)
		snprintf(warn, warnlen, "sandbox=none: it runs with no sandbox, as a plain child with our "
		                        "user, files and network");
	return 0;
}

int sw_sandbox_check(const sw_sandbox *sb, const sw_bind *binds, size_t nbinds, char *warn,
                     size_t warnlen, char *note, size_t notelen, sw_error *err)
{
	sw_sandbox_dir d;
	pid_t pid = 0;
	char why[600];
	note[0] = 0;
	int rc = sw_sandbox_dir_make(&d, err);
	if (rc)
		return rc;
	rc = sw_sandbox_spawn(sb, &d, NULL, binds, nbinds, NULL, -1, -1, -1, &pid, warn, warnlen, err);
	if (!rc && sb->mode != SW_SANDBOX_NONE) {
		if (!cg_make_(sb, &d, why, sizeof why))
			snprintf(note, notelen, "the box as a whole is held to mem and nproc by its cgroup (%s)",
			         d.cg);
		else
			snprintf(note, notelen, "%s: mem and nproc hold per process (RLIMIT_AS, RLIMIT_NPROC), "
			                        "not for the box as a whole", why);
	}
	sw_sandbox_dir_remove(&d);
	return rc;
}

int sw_sandbox_cgroup(const sw_sandbox *sb, sw_sandbox_dir *d)
{
	char why[600];
	if (sb->mode == SW_SANDBOX_NONE)
		return 0;
	return cg_make_(sb, d, why, sizeof why);
}

void sw_sandbox_status_str(int status, char *buf, size_t size)
{
	if (WIFEXITED(status))
		snprintf(buf, size, "exited with status %d%s", WEXITSTATUS(status),
		         WEXITSTATUS(status) == 127   ? " (the shell's status for a command not found)"
		         : WEXITSTATUS(status) == 126 ? " (the shell's status for a command it cannot run)"
		                                      : "");
	else if (WIFSIGNALED(status))
		snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, size, "stopped (wait status %d)", status);
}
