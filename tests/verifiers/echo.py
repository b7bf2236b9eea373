# echo.py - an honest exec verifier: score 1 when the response, stripped,
# is the label (as text), else 0.  One JSON sample a line in, one answer out.
import json
import sys

for line in sys.stdin:
    s = json.loads(line)
    ok = str(s.get("response", "")).strip() == str(s.get("label", ""))
    sys.stdout.write('{"score": %d}\n' % ok)
    sys.stdout.flush()
