# probe.py - answers each sample with what it sees of its sandbox, as
# violation names, for the tests to check: its uid, its network devices,
# whether /, its working directory and its TMPDIR are writable, its pid, its
# limits, its capabilities.
import json
import os
import resource
import sys


def writable(path):
    try:
        with open(os.path.join(path, ".probe"), "w") as f:
            f.write("x")
        os.unlink(os.path.join(path, ".probe"))
        return "rw"
    except OSError as e:
        return "ro:" + (os.strerror(e.errno) if e.errno else str(e))


def capeff():
    with open("/proc/self/status") as f:
        return [l.split()[1] for l in f if l.startswith("CapEff:")][0]


def devices():
    with open("/proc/self/net/dev") as f:
        return ",".join(sorted(l.split(":")[0].strip() for l in f.readlines()[2:]))


for line in sys.stdin:
    facts = [
        "uid=%d" % os.getuid(),
        "net=" + devices(),
        "root=" + writable("/"),
        "tmp=" + writable("/tmp"),
        "cwd=" + writable("."),
        "tmpdir=" + writable(os.environ["TMPDIR"]),
        "home_is_tmpdir=%s" % (os.environ.get("HOME") == os.environ.get("TMPDIR")),
        "ppid=%d" % os.getppid(),
        "nproc=%d" % resource.getrlimit(resource.RLIMIT_NPROC)[0],
        "as=%d" % resource.getrlimit(resource.RLIMIT_AS)[0],
        "fsize=%d" % resource.getrlimit(resource.RLIMIT_FSIZE)[0],
        "cpu=%d" % resource.getrlimit(resource.RLIMIT_CPU)[0],
        "capeff=" + capeff(),
    ]
    print(json.dumps({"score": 1, "violations": facts}), flush=True)
