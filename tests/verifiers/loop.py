# loop.py - hostile: on an "attack" sample, loops forever.
import json
import sys

for line in sys.stdin:
    s = json.loads(line)
    while s.get("response") == "attack":
        pass
    print('{"score": 1}', flush=True)
