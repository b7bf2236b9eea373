#!/usr/bin/env python3
"""forge_audit_log.py - write the forged audit logs of tests/fuzz/crashes/fuzz_audit_log/.

Each is a log whose hash chain is whole (anyone can compute BLAKE2b-256, the
chain's digest; only a signature needs the key) but whose records the log's
writer never writes.  The verifier once accepted each, or followed it:

  control-event.log       an event holding ESC [2J, shown as it was by `sw-audit show`
  control-field.log       a field's key and value holding control bytes, shown bare
  absolute-checkpoint.log a checkpoint at "/", whose digest the verifier computed
                          over the whole file system
  dotdot-checkpoint.log   a checkpoint at "../..", outside the run directory
  nul-checkpoint.log      a checkpoint path with a NUL inside ("ckpt\\u0000/x")

    python3 tests/fuzz/forge_audit_log.py tests/fuzz/crashes/fuzz_audit_log
"""
import hashlib
import json
import os
import sys

ZERO = "0" * 64


def chain(records, time="2026-12-06T03:10:49.652Z"):
    """The log's lines: each record with seq, time, event and prev first, then its hash."""
    out, prev = [], ZERO
    for seq, (event, fields) in enumerate(records, 1):
        head = '{"seq":%d,"time":%s,"event":%s,"prev":"%s"' % (
            seq, json.dumps(time), json.dumps(event), prev)
        body = head + "".join("," + json.dumps(k) + ":" + v for k, v in fields)
        h = hashlib.blake2b(body.encode(), digest_size=32).hexdigest()
        out.append(body + ',"hash":"%s"}\n' % h)
        prev = h
    return "".join(out)


def checkpoint(path):
    return [("run_start", []), ("checkpoint", [("path", path), ("digest", '"' + ZERO + '"'),
                                                ("files", "{}")])]


LOGS = {
    "control-event.log": [("run_start", []), ("run\x1b[2J", [("iter", '"1"')])],
    "control-field.log": [("run_start", [("a\x1bkey", '"v\\u0007x"'), ("ok", '"bell\\u0007"')])],
    "absolute-checkpoint.log": checkpoint('"/"'),
    "dotdot-checkpoint.log": checkpoint('"../.."'),
    "nul-checkpoint.log": checkpoint('"ckpt\\u0000/x"'),
}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, records in LOGS.items():
        with open(os.path.join(out, name), "w", encoding="utf-8", newline="") as f:
            f.write(chain(records))
