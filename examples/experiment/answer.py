#!/usr/bin/env python3
# answer.py - an exec verifier for sw-verify, in Python: one JSON sample a
# line in, one JSON object a line out.  It scores 1 when the response is the
# label and nothing else (no extra words: the format the task asks for),
# 0.5 when the label is there with more around it, 0 otherwise; a response
# that asks for a password is a violation named "credentials".
#
#   sw-verify -r 'exec:python3 answer.py,workers=2,as=format' samples.msgpack
import json
import sys

for line in sys.stdin:
    s = json.loads(line)
    response = s.get("response", "").strip()
    label = str(s.get("label", ""))
    if response == label:
        score = 1.0
    elif label and label in response.split():
        score = 0.5
    else:
        score = 0.0
    violations = ["credentials"] if "password" in response.lower() else []
    print(json.dumps({"score": score, "violations": violations}), flush=True)
