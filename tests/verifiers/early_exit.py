# early_exit.py - hostile: answers two samples, then exits with status 3 on
# reading the third, before answering it.
import sys

n = 0
for line in sys.stdin:
    n += 1
    if n == 3:
        sys.exit(3)
    print('{"score": 1}', flush=True)
