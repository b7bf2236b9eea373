# alloc.py - hostile: on an "attack" sample, allocates 10 GB and touches it.
import json
import sys

for line in sys.stdin:
    s = json.loads(line)
    if s.get("response") == "attack":
        b = bytearray(10 * 2**30)
        b[::1 << 20] = b"x" * len(range(0, len(b), 1 << 20))
        print(json.dumps({"score": 1, "violations": ["ESCAPED: got 10 GB"]}), flush=True)
        continue
    print('{"score": 1}', flush=True)
