/* test_verify_sandbox.c - the parts of the verifier sandbox that need no
 * box: which files a command names (what the box is given), and removing a
 * sandbox directory a verifier left in a mess (modes 000, links out). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"
#include "verify/verify_internal.h"
#include "tap.h"

static void touch_(const char *dir, const char *name)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
}

/* The files of command, from cwd, joined by spaces (paths shown after the prefix of cwd as "."). */
static void files_(const char *command, const char *cwd, const char *want)
{
	char *out[16], got[2048] = "";
	size_t n = sw_sandbox_files(command, cwd, out, 16), k = strlen(cwd);
	for (size_t i = 0; i < n; i++) {
		const char *p = strncmp(out[i], cwd, k) ? out[i] : out[i] + k;
		snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s%s", i ? " " : "",
		         p == out[i] ? "" : ".", p);
		free(out[i]);
	}
	ok(!strcmp(got, want), "files of '%s': '%s' (got '%s')", command, want, got);
}

int main(void)
{
	char top[] = "/tmp/sw-test-sandbox.XXXXXX";
	if (!mkdtemp(top))
		return 1;
	char d[600];
	snprintf(d, sizeof d, "%s/v", top);
	mkdir(d, 0700);
	snprintf(d, sizeof d, "%s/v/lib", top);
	mkdir(d, 0755);
	snprintf(d, sizeof d, "%s/v", top);
	touch_(d, "judge.py");
	touch_(d, "lib/util.py");
	touch_(d, "data.json");

	/* ---- what a command names ---- */
	files_("python3 judge.py", d, "./judge.py");
	files_("python3 ./judge.py --data=data.json", d, "./judge.py ./data.json");
	/* words are paths from where sw-verify runs, whatever the command does first */
	files_("cd lib && python3 judge.py 'data.json'", d, "./lib ./judge.py ./data.json");
	files_("cd lib && python3 ../judge.py", d, "./lib");
	/* one inside a directory given is there already, either order */
	files_("python3 lib/util.py lib", d, "./lib");
	files_("python3 lib lib/util.py", d, "./lib");
	/* the system is there anyway; /etc, /dev, /proc and / are never given; nor what does not exist */
	files_("/usr/bin/python3 /bin/sh /etc/passwd /dev/null /proc/self / nope.py $HOME -x", d, "");
	/* no climbing out with .. past / */
	files_("python3 ../../../../../../../../../../../etc/passwd", d, "");
	files_("python3 lib/../judge.py", d, "./judge.py");

	/* ---- removing what a verifier left ---- */
	char outside[700], keep[800], p[800];
	snprintf(outside, sizeof outside, "%s/outside", top);
	mkdir(outside, 0755);
	touch_(outside, "keep");
	snprintf(keep, sizeof keep, "%s/keep", outside);
	setenv("TMPDIR", top, 1);
	sw_sandbox_dir dir;
	sw_error err = { 0 };
	is_int(sw_sandbox_dir_make(&dir, &err), 0, "a sandbox directory (%s)", err.msg);
	snprintf(p, sizeof p, "%s/a", dir.path);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/a/b", dir.path);
	mkdir(p, 0755);
	touch_(p, "f");
	chmod(p, 0);
	snprintf(p, sizeof p, "%s/a", dir.path);
	chmod(p, 0);
	snprintf(p, sizeof p, "%s/out", dir.path);
	ok(!symlink(outside, p), "a link to a directory outside");
	snprintf(p, sizeof p, "%s/src/keep", dir.path);
	ok(!symlink(keep, p), "a link to a file outside");
	char path[256];
	snprintf(path, sizeof path, "%s", dir.path);
	sw_sandbox_dir_remove(&dir);
	struct stat st;
	ok(lstat(path, &st) != 0, "the directory is gone, its 000 directories too");
	ok(stat(keep, &st) == 0, "what the links pointed at is still there");
	ok(dir.path[0] == 0, "and it says so");
	sw_sandbox_dir_remove(&dir); /* again: a no-op */

	unlink(keep);
	rmdir(outside);
	snprintf(p, sizeof p, "%s/v/lib/util.py", top);
	unlink(p);
	snprintf(p, sizeof p, "%s/v/lib", top);
	rmdir(p);
	snprintf(p, sizeof p, "%s/v/judge.py", top);
	unlink(p);
	snprintf(p, sizeof p, "%s/v/data.json", top);
	unlink(p);
	snprintf(p, sizeof p, "%s/v", top);
	rmdir(p);
	rmdir(top);
	return tap_done();
}
