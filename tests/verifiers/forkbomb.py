# forkbomb.py - hostile: on an "attack" sample, forks sleeping children until
# fork fails, at most 200 (so that even an uncontained run stays small), and
# answers with how many it got.
import json
import os
import sys
import time

for line in sys.stdin:
    s = json.loads(line)
    if s.get("response") == "attack":
        n = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
        print(json.dumps({"score": n}), flush=True)
        continue
    print('{"score": 1}', flush=True)
