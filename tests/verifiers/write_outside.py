# write_outside.py - hostile: on an "attack" sample, writes the file the
# sample's "target" field names (outside its own directory).
import json
import os
import sys

for line in sys.stdin:
    s = json.loads(line)
    if s.get("response") == "attack":
        with open(s["target"], "w") as f:
            f.write("escaped\n")
        print(json.dumps({"score": 1, "violations": ["ESCAPED: wrote " + s["target"]]}), flush=True)
        continue
    # its own directory is fine to write
    with open(os.path.join(os.environ["TMPDIR"], "scratch.txt"), "w") as f:
        f.write(line)
    print('{"score": 1}', flush=True)
