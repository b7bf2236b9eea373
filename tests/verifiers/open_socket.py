# open_socket.py - hostile: on an "attack" sample, opens an AF_INET socket and
# connects to 1.1.1.1:53 and then to a local port.
import json
import socket
import sys

for line in sys.stdin:
    s = json.loads(line)
    if s.get("response") == "attack":
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.settimeout(0.5)
        try:
            c.connect(("127.0.0.1", 9))
        except OSError:
            pass  # nobody listening; but the socket was made, which is the escape
        print(json.dumps({"score": 1, "violations": ["ESCAPED: made an AF_INET socket"]}), flush=True)
        continue
    print('{"score": 1}', flush=True)
