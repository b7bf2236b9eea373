/*
 * sandbox.c - the box that exec and code verifiers run in.
 *
 * A verifier is a program we did not write, fed text a policy model wrote:
 * it must not reach the network, write outside its own directory, eat the
 * machine's memory, CPU or process table, or outlive sw-verify.  In order,
 * strongest first, a spawn gets:
 *
 *  USERNS  clone() into new user, mount, network, pid, ipc and uts
 *          namespaces.  The mount namespace has every mount read-only
 *          (mount_setattr AT_RECURSIVE) except a bind mount of the verifier's
 *          own directory (its TMPDIR and HOME), and a /proc of its own pid namespace; the network
 *          namespace has only a loopback device, down.  The process runs as
 *          user 1000 of its namespace, mapped (when we are root) to a user id
 *          of its own outside, so RLIMIT_NPROC counts its processes alone
 *          and execve() leaves it no capabilities.  When the first process
 *          dies, the kernel kills everything else in the pid namespace.
 *  ROOTNS  the same namespaces without a user namespace (root only, where
 *          user namespaces are refused): root sets up the mounts, then drops
 *          to the directory's own user id.
 *  WEAK    no namespaces at all (neither is allowed): a plain child, as its
 *          own user id when we are root; the directory is its working
 *          directory and TMPDIR, but world-writable places (/tmp) stay
 *          writable to it, and the network is kept away by seccomp alone.
 *
 * Always: setrlimit CPU, AS, NPROC, FSIZE, NOFILE and CORE (0); a parent
 * death signal; a process group of its own; and a seccomp filter (libseccomp)
 * that denies sockets other than AF_UNIX, new namespaces, mounts, ptrace,
 * module, kexec, bpf, perf, keyring, io_uring and clock calls.  Where the
 * process count cannot be held by RLIMIT_NPROC (no user id of its own), the
 * filter denies creating processes too (threads stay allowed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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
		 * (a rootless container): the sandbox shares our user id */
		d->uid = geteuid();
	}
	return 0;
}

static int rm_(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void sw_sandbox_dir_remove(sw_sandbox_dir *d)
{
	if (!d->path[0])
		return;
	/* a verifier may have left a directory it made unreadable: open it up first */
	chmod(d->path, 0700);
	nftw(d->path, rm_, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	rmdir(d->path);
	d->path[0] = 0;
}

/* ---- the child ---- */

typedef struct spawn_ {
	const sw_sandbox *sb;
	const sw_sandbox_dir *d;
	const char *cwd;
	char *const *argv;
	int fd[3];
	int sync_r;    /* the parent writes one byte when the id maps are in place */
	int status_w;  /* close-on-exec: EOF tells the parent exec worked, else a message */
	int level;
	int nproc_ok;  /* RLIMIT_NPROC holds: the process has a user id of its own */
	char *const *envp;          /* ours, with TMPDIR and HOME the sandbox directory */
	struct sock_fprog prog;     /* the seccomp filter, compiled by the parent */
} spawn_;

static _Noreturn void child_fail_(const spawn_ *s, const char *what)
{
	char buf[256];
	int e = errno;
	int n = snprintf(buf, sizeof buf, "%s: %s", what, strerror(e));
	if (n > 0 && write(s->status_w, buf, (size_t)n) < 0)
		_exit(127);
	_exit(127);
}

/*
 * Compile the filter in the parent: libseccomp allocates, and the child of
 * clone() must not (another thread of ours, OpenBLAS's say, may have held the
 * allocator's lock at the moment of the clone, and the child would wait on
 * it forever).  *prog is malloc'd.
 */
static int seccomp_(int nproc_ok, struct sock_fprog *prog)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -1;
	/* no network but local sockets; the namespace already has no network */
	int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
	                          SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	static const char *const deny[] = {
		"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
		"chroot", "setns", "unshare", "mount_setattr", "move_mount", "open_tree", "fsopen",
		"fsconfig", "fsmount", "fspick", "kexec_load", "kexec_file_load", "init_module",
		"finit_module", "delete_module", "reboot", "swapon", "swapoff", "bpf",
		"perf_event_open", "keyctl", "add_key", "request_key", "acct", "settimeofday",
		"clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "iopl",
		"ioperm", "open_by_handle_at", "name_to_handle_at", "userfaultfd", "quotactl",
		"syslog", "vhangup", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"lookup_dcookie", "personality", "uselib", "nfsservctl", "fanotify_init",
	};
	for (size_t i = 0; rc == 0 && i < sizeof deny / sizeof *deny; i++) {
		int nr = seccomp_syscall_resolve_name(deny[i]);
		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* no new namespaces through clone either; clone3 hides its flags from
	 * seccomp, so it says "not here" and the C library falls back to clone */
	static const unsigned long newns[] = { CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID,
	                                        CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP };
	for (size_t i = 0; rc == 0 && i < sizeof newns / sizeof *newns; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
		                      SCMP_A0(SCMP_CMP_MASKED_EQ, newns[i], newns[i]));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc == 0 && !nproc_ok) {
		/* no user id of its own: RLIMIT_NPROC cannot hold a fork bomb, so no processes */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAGAIN), SCMP_SYS(fork), 0);
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAGAIN), SCMP_SYS(vfork), 0);
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAGAIN), SCMP_SYS(clone), 1,
			                      SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
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

static void limit_(const spawn_ *s, int res, uint64_t v, const char *what)
{
	if (!v)
		return;
	struct rlimit r = { (rlim_t)v, (rlim_t)v };
	if (res == RLIMIT_CPU)
		r.rlim_max = (rlim_t)v + 1; /* SIGXCPU first, SIGKILL a second later */
	if (setrlimit(res, &r))
		child_fail_(s, what);
}

static int child_(void *arg)
{
	const spawn_ *s = arg;
	const sw_sandbox *sb = s->sb;
	if (s->level <= SW_SANDBOX_ROOTNS) {
		char c;
		if (read(s->sync_r, &c, 1) != 1 || c != 'g')
			_exit(127);
	}
	close(s->sync_r);
	setsid();

	if (s->level <= SW_SANDBOX_ROOTNS) {
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
			child_fail_(s, "cannot make the mounts private");
		if (mount(s->d->path, s->d->path, NULL, MS_BIND | MS_REC, NULL))
			child_fail_(s, "cannot bind the sandbox directory");
		/* a /proc that shows the pid namespace only; where the kernel refuses
		 * (a container that hides parts of /proc), the old one stays, read-only */
		mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
		struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID };
		if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro))
			child_fail_(s, "cannot make the file system read-only");
		struct mount_attr rw = { .attr_clr = MOUNT_ATTR_RDONLY };
		if (syscall(SYS_mount_setattr, AT_FDCWD, s->d->path, 0, &rw, sizeof rw))
			child_fail_(s, "cannot make the sandbox directory writable");
	}
	if (!sb->off) {
		/* whatever user it ends up as, it execs with no capabilities: a root
		 * of an outer user namespace (rootless containers) would otherwise keep them */
		for (int cap = 0; cap < 64; cap++)
			if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL && errno != EPERM)
				child_fail_(s, "cannot drop capabilities");
		/*
		 * The raw system calls, not glibc's wrappers: those change every
		 * thread of the process (setxid), and a child cloned from a
		 * threaded sw-verify inherits the list of its parent's threads,
		 * which do not exist here - the wrapper then waits for them forever.
		 */
		if (s->level == SW_SANDBOX_USERNS) {
			long g = SANDBOX_UID_IN, u = SANDBOX_UID_IN;
			syscall(SYS_setgroups, 0, NULL); /* refused (and moot) where setgroups is denied */
			if (syscall(SYS_setresgid, g, g, g) || syscall(SYS_setresuid, u, u, u))
				child_fail_(s, "cannot become the sandbox user");
		} else if (s->d->own_uid) {
			long u = (long)s->d->uid;
			if (syscall(SYS_setgroups, 0, NULL) || syscall(SYS_setresgid, u, u, u) ||
			    syscall(SYS_setresuid, u, u, u))
				child_fail_(s, "cannot become the sandbox user");
		}
	}
	/* after the change of user, which clears it; sw-verify's death is ours */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* the caller's directory, so that a command's relative paths work (it is
	 * read-only in there); the sandbox directory where it cannot go */
	if ((!s->cwd || chdir(s->cwd)) && chdir(s->d->path))
		child_fail_(s, "cannot enter the sandbox directory");

	/* fds 0, 1, 2 from the three given, in two steps so that they may overlap */
	int hi[3];
	for (int i = 0; i < 3; i++) {
		int f = s->fd[i];
		if (f < 0 || (hi[i] = fcntl(f, F_DUPFD, 10)) < 0)
			child_fail_(s, "cannot set up standard input and output");
	}
	for (int i = 0; i < 3; i++)
		if (dup2(hi[i], i) < 0)
			child_fail_(s, "cannot set up standard input and output");
	if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC)) {
		/* an older kernel: close what there is, but the status pipe */
		for (int f = 3; f < 1024; f++)
			if (f != s->status_w)
				close(f);
	}
	signal(SIGPIPE, SIG_DFL);
	if (!sb->off) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &s->prog, 0, 0))
			child_fail_(s, "cannot install the seccomp filter");
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
	execvpe(s->argv[0], s->argv, s->envp);
	child_fail_(s, s->argv[0]);
}

/* ---- the parent ---- */

static int warned_shared_uid_;

static int write_file_(pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int maps_(pid_t pid, const sw_sandbox_dir *d)
{
	char m[64];
	if (geteuid() != 0 && write_file_(pid, "setgroups", "deny"))
		return -1;
	snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, (unsigned)d->uid);
	if (write_file_(pid, "uid_map", m))
		return -1;
	snprintf(m, sizeof m, "%d %u 1\n", SANDBOX_UID_IN, d->own_uid ? (unsigned)d->uid : (unsigned)getegid());
	return write_file_(pid, "gid_map", m);
}

void sw_sandbox_kill(pid_t pid)
{
	if (pid > 0) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
}

int sw_sandbox_spawn(const sw_sandbox *sb, sw_sandbox_dir *d, const char *cwd, char *const argv[],
                     int fd0, int fd1, int fd2, pid_t *pid, char *warn, size_t warnlen, sw_error *err)
{
	int sync[2], status[2];
	warn[0] = 0;
	if (pipe2(sync, O_CLOEXEC))
		return sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(errno));
	if (pipe2(status, O_CLOEXEC)) {
		close(sync[0]);
		close(sync[1]);
		return sw_fail(err, SW_EIO, "cannot make a pipe: %s", strerror(errno));
	}
	spawn_ s = { sb, d, cwd, argv, { fd0, fd1, fd2 }, sync[0], status[1], SW_SANDBOX_USERNS,
	             sb->off || d->own_uid, NULL, { 0, NULL } };
	/* everything the child needs is made here: the child must not allocate */
	char *stack = NULL, **envp = NULL, *tmpdir = NULL, *home = NULL, *cmd = NULL, *shell[4];
	int null = -1, rc = 0, why = 0, e = 0;
	pid_t p = -1;
	size_t ne = 0;
	extern char **environ;
	while (environ[ne])
		ne++;
	if (!(stack = malloc(STACK_SIZE)) || !(envp = malloc((ne + 3) * sizeof *envp)) ||
	    !(tmpdir = malloc(strlen(d->path) + 8)) || !(home = malloc(strlen(d->path) + 6))) {
		rc = sw_fail(err, SW_ENOMEM, "out of memory");
		goto out;
	}
	sprintf(tmpdir, "TMPDIR=%s", d->path);
	sprintf(home, "HOME=%s", d->path);
	size_t k = 0;
	for (size_t i = 0; i < ne; i++)
		if (strncmp(environ[i], "TMPDIR=", 7) && strncmp(environ[i], "HOME=", 5))
			envp[k++] = environ[i];
	envp[k++] = tmpdir;
	envp[k++] = home;
	envp[k] = NULL;
	s.envp = envp;
	if (!s.nproc_ok && !strcmp(argv[0], "/bin/sh") && argv[1] && !strcmp(argv[1], "-c") && argv[2]) {
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
		s.argv = shell;
	}
	if (!sb->off && seccomp_(s.nproc_ok, &s.prog)) {
		rc = sw_fail(err, SW_EIO, "cannot compile the seccomp filter");
		goto out;
	}
	/* /dev/null is opened here: the sandbox user may not be let at it */
	if ((fd0 < 0 || fd1 < 0 || fd2 < 0) && (null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		rc = sw_fail(err, SW_EIO, "cannot open /dev/null: %s", strerror(errno));
		goto out;
	}
	for (int i = 0; i < 3; i++)
		if (s.fd[i] < 0)
			s.fd[i] = null;
	const int ns = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
	if (sb->off) {
		s.level = SW_SANDBOX_OFF;
		p = clone(child_, stack + STACK_SIZE, SIGCHLD, &s);
	} else {
		/* the child has its own copy of the stack (no CLONE_VM) */
		s.level = SW_SANDBOX_USERNS;
		p = clone(child_, stack + STACK_SIZE, CLONE_NEWUSER | ns | SIGCHLD, &s);
		if (p > 0 && maps_(p, d)) {
			why = errno;
			sw_sandbox_kill(p);
			waitpid(p, NULL, 0);
			p = -1;
		} else if (p < 0) {
			why = errno;
		}
		if (p < 0 && geteuid() == 0) {
			s.level = SW_SANDBOX_ROOTNS;
			p = clone(child_, stack + STACK_SIZE, ns | SIGCHLD, &s);
		}
		if (p < 0) {
			s.level = SW_SANDBOX_WEAK;
			p = clone(child_, stack + STACK_SIZE, SIGCHLD, &s);
		}
	}
	e = errno;
	if (p < 0) {
		err->sys_errno = e;
		rc = sw_fail(err, SW_EIO, "cannot start '%s': %s", argv[0], strerror(e));
	}
out:
	/* the child has its own copies of all of it (no CLONE_VM) */
	free(stack);
	free(envp);
	free(tmpdir);
	free(home);
	free(cmd);
	free(s.prog.filter);
	if (null >= 0)
		close(null);
	close(sync[0]);
	close(status[1]);
	if (rc) {
		close(sync[1]);
		close(status[0]);
		return rc;
	}
	if (s.level <= SW_SANDBOX_ROOTNS && write(sync[1], "g", 1) != 1) {
		/* the child is gone already; its message (if any) says why */
	}
	close(sync[1]);
	char msg[256];
	ssize_t n, got = 0;
	while ((n = read(status[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0)
			got += n;
	close(status[0]);
	if (got > 0) {
		msg[got] = 0;
		waitpid(p, NULL, 0);
		return sw_fail(err, SW_EIO, "cannot start '%s' in the sandbox: %s", argv[0], msg);
	}
	d->level = s.level;
	if (s.level == SW_SANDBOX_ROOTNS)
		snprintf(warn, warnlen,
		         "no user namespace (%s): the sandbox runs in mount, network and pid namespaces %s",
		         strerror(why), d->own_uid ? "as a user id of its own"
		                                   : "as our own user id, with no new processes");
	else if (s.level == SW_SANDBOX_WEAK)
		snprintf(warn, warnlen,
		         "cannot make namespaces (%s): no network, mount or pid isolation; relying on "
		         "seccomp (no sockets but AF_UNIX%s), rlimits and %s",
		         strerror(why ? why : e), d->own_uid ? "" : ", no new processes",
		         d->own_uid ? "a user id of its own" : "its own working directory");
	else if (s.level == SW_SANDBOX_USERNS && !d->own_uid && !warned_shared_uid_) {
		warned_shared_uid_ = 1;
		snprintf(warn, warnlen,
		         "no user id of its own for the sandbox (not root): its process count cannot be "
		         "limited, so it may start no new processes");
	}
	*pid = p;
	return 0;
}

void sw_sandbox_status_str(int status, char *buf, size_t size)
{
	if (WIFEXITED(status))
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, size, "stopped (wait status %d)", status);
}
