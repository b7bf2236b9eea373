# garbage.py - hostile: on an "attack" sample, answers a line that is not a
# reply; on "attack2", a reply with a score that is a string.  Then goes on.
import json
import sys

for line in sys.stdin:
    s = json.loads(line)
    if s.get("response") == "attack":
        print("this is not json {", flush=True)
    elif s.get("response") == "attack2":
        print('{"score": "high"}', flush=True)
    else:
        print('{"score": 1}', flush=True)
