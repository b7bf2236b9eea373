# escape.py - tries, for each sample, what the sample's fields ask and
# answers with what happened, as violation names "WHAT=RESULT", for the
# sandbox tests to check: "read" (files to read), "connect" (Unix socket
# paths), "abstract" (abstract Unix socket names), "ls" (directories to
# list), "syscalls" (system calls by number, on x86_64: each is called with
# zero arguments and answers its errno name), "env" (variables to look up),
# "ids" (its user, groups and id maps), "host" (its host name), "write" (MiB to write in $TMPDIR),
# "children" (processes to fork that each touch "child_mib" MiB), "stderr"
# (lines to write on standard error, and one of "long" bytes), "raw" (a line of
# these bytes, as Latin-1 code points, to write on standard error).
import ctypes
import errno
import json
import os
import socket
import sys
import time


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else type(e).__name__


def attempt(fn):
    try:
        r = fn()
        return "ok" if r is None else "ok:" + str(r)
    except Exception as e:  # noqa: BLE001 - any failure is an answer
        return err(e)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    finally:
        s.close()


def write_mib(n):
    with open(os.path.join(os.environ["TMPDIR"], "fill"), "wb") as f:
        for _ in range(n):
            f.write(b"x" * (1 << 20))
            f.flush()


def children(n, mib):
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                b = bytearray(mib << 20)
                for i in range(0, len(b), 4096):
                    b[i] = 1
                time.sleep(1)
                os._exit(0)
            except BaseException:  # noqa: BLE001
                os._exit(1)
        pids.append(pid)
    ok = 0
    for p in pids:
        _, st = os.waitpid(p, 0)
        ok += os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    return ok


libc = ctypes.CDLL(None, use_errno=True)
for line in sys.stdin:
    s = json.loads(line)
    facts = []
    for p in s.get("read", []):
        facts.append("read %s=%s" % (p, attempt(lambda: open(p, "rb").read(1) and None)))
    for p in s.get("connect", []):
        facts.append("connect %s=%s" % (p, attempt(lambda: connect(p))))
    for n in s.get("abstract", []):
        facts.append("abstract %s=%s" % (n, attempt(lambda: connect("\0" + n))))
    for d in s.get("ls", []):
        facts.append("ls %s=%s" % (d, attempt(lambda: ",".join(sorted(os.listdir(d))))))
    for nr in s.get("syscalls", []):
        r = libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0)
        e = ctypes.get_errno()
        facts.append("syscall %d=%s" % (nr, "ok" if r >= 0 else errno.errorcode.get(e, str(e))))
    for v in s.get("env", []):
        facts.append("env %s=%s" % (v, os.environ.get(v, "(unset)")))
    if s.get("ids"):
        facts.append("uid=%d" % os.getuid())
        facts.append("groups=%s" % ",".join(str(g) for g in os.getgroups()))
        facts.append("uid_map=%s" % attempt(lambda: " ".join(open("/proc/self/uid_map").read().split())))
    if s.get("host"):
        facts.append("host=%s" % socket.gethostname())
    if "write" in s:
        facts.append("write=%s" % attempt(lambda: write_mib(s["write"])))
    if "children" in s:
        facts.append("children=%s" % attempt(lambda: children(s["children"], s.get("child_mib", 1))))
    for i in range(s.get("stderr", 0)):
        print("line %d" % i, file=sys.stderr, flush=True)
    if s.get("long"):
        print("L" * s["long"], file=sys.stderr, flush=True)
    if "raw" in s:
        sys.stderr.buffer.write(s["raw"].encode("latin-1") + b"\n")
        sys.stderr.flush()
    print(json.dumps({"score": 1, "violations": facts}), flush=True)
