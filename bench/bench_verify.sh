#!/bin/sh
# bench/bench_verify.sh - sw-verify beside its peers on the same samples, in one run:
#
#   exec pool      samples/s of a trivial Python verifier (tests/verifiers/echo.py:
#                  json.loads, compare, one line out) run by sw-verify as a pool
#                  of 1 and 2 sandboxed workers, pipelined (the default window)
#                  vs the same pool in lock-step (--window 1: one sample in
#                  flight, what a naive request/reply driver does) and vs the
#                  same scoring done in-process by one Python loop over JSON
#                  Lines (what a Python framework's reward function does).
#   sandbox cost   the same pool with sandbox=none: the difference per sample,
#                  and the start-up of a sandboxed worker (1-sample runs).
#   built-ins      math + regex + blocklist + length on sw-datagen's realistic
#                  samples (prompt, ~300 tokens, log-probs), vs the same four
#                  rules in Python (re, the same extraction order) over JSON
#                  Lines, and vs sw-cat alone (reading and writing the stream).
#
# Medians of hyperfine runs.  Ratios are peer time / our time (> 1: sw-verify
# is faster).  The "built-ins <= 1% of rollout time" figure needs sw-rollout,
# which does not exist yet: it is not measured here.
# Environment: SW_BENCH_VERIFY_N (small samples for the exec pool, default
# 50000), SW_BENCH_VERIFY_DATAGEN (sw-datagen records, default 20000), RUNS (3).
set -eu
. "$(dirname "$0")/env.sh"
n=${SW_BENCH_VERIFY_N:-50000}
ng=${SW_BENCH_VERIFY_DATAGEN:-20000}
for t in hyperfine jq python3; do
	command -v $t >/dev/null || { echo "bench_verify: $t is missing (make deps-bench)" >&2; exit 1; }
done
d=$(bench_tmp verify)
chmod 755 "$d" # the sandbox runs as a user of its own: let it read the verifier
trap 'rm -rf "$d"' EXIT
cp "$top/tests/verifiers/echo.py" "$d/echo.py"

# small samples: an id, a short response with a boxed answer, a label
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) {
	a = (i * 7919) % 1000; l = (i % 3) ? a : a + 1
	printf "{\"id\":\"p%d/%d\",\"response\":\"%d\",\"label\":\"%d\"}\n", i / 8, i % 8, a, l } }' >"$d/small.jsonl"
sw-cat -o "$d/small.msgpack" "$d/small.jsonl"
echo '{"id":"one","response":"1","label":"1"}' >"$d/one.jsonl"

# realistic samples, with the label the math verifier needs
sw-datagen -n "$ng" -f json | jq -c '.label = ((.response | capture("boxed\\{(?<a>[0-9]+)\\}").a) // "0")' >"$d/gen.jsonl"
sw-cat -o "$d/gen.msgpack" "$d/gen.jsonl"
printf '%s\n' '[weapons] \b(build|make) a bomb\b' '[poison] poison(ous)?' '[pii] \b\d{3}-\d{2}-\d{4}\b' \
	'[self-harm] \bkill (myself|yourself)\b' >"$d/rules.txt"

cat >"$d/peer_echo.py" <<'EOF'
# The exec verifier's scoring, in-process: one Python loop over JSON Lines.
import json, sys
out = sys.stdout
for line in sys.stdin:
    s = json.loads(line)
    ok = str(s.get("response", "")).strip() == str(s.get("label", ""))
    s["rewards"] = {"exec": float(ok)}
    s["reward"] = float(ok)
    s["violations"] = []
    out.write(json.dumps(s) + "\n")
EOF
cat >"$d/peer_builtin.py" <<'EOF'
# math + format regex + blocklist + DAPO length, as a Python reward function would.
import json, re, sys
rules = []
for l in open(sys.argv[1]):
    m = re.match(r"\[([^\]]+)\]\s*(.*)", l.rstrip("\n"))
    rules.append((m.group(1), re.compile(m.group(2))))
fmt = re.compile(r"\\boxed\{")
num = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
def answer(s):
    i = s.rfind("\\boxed{")
    if i >= 0:
        depth, j = 0, i + 6
        for k in range(j, len(s)):
            if s[k] == "{": depth += 1
            elif s[k] == "}":
                depth -= 1
                if depth == 0: return s[j + 1:k].strip()
    i = s.rfind("####")
    if i >= 0: return s[i + 4:].split("\n")[0].strip()
    m = num.findall(s)
    return m[-1] if m else None
def value(a):
    a = a.replace(",", "").replace("$", "").strip()
    try:
        if "/" in a:
            p, q = a.split("/", 1); return float(p) / float(q)
        return float(a)
    except (ValueError, ZeroDivisionError):
        return None
def length(n, mx=512, buf=128):
    e = mx - buf
    return 0.0 if n <= e else ((e - n) / buf if n <= mx else -1.0)
out = sys.stdout
for line in sys.stdin:
    s = json.loads(line)
    r = s["response"]
    a, b = answer(r), str(s["label"])
    x, y = (value(a) if a else None), value(b)
    m = float(a is not None and (abs(x - y) <= 1e-6 * max(1, abs(x), abs(y)) if x is not None and y is not None else a == b))
    v = [n for n, p in rules if p.search(r)]
    sc = {"math": m, "format": float(bool(fmt.search(r))), "blocklist": float(not v),
          "length": length(len(s["response_tokens"]))}
    s["rewards"] = sc
    s["reward"] = sc["math"] + 0.2 * sc["format"] + sc["length"]
    s["violations"] = v
    out.write(json.dumps(s) + "\n")
EOF

# "WALL CPU": the median wall seconds of a command and its mean CPU seconds
# (user + system, every process of it, workers included), from hyperfine's
# JSON export.  On a shared machine the CPU time is the steadier of the two.
t() {
	hyperfine -N --style none --warmup 1 --runs "${RUNS:-3}" --export-json "$d/h.json" \
		"sh -c '$1'" >/dev/null 2>&1 || { echo "bench_verify: failed: $1" >&2; exit 1; }
	jq -r '.results[0] | "\(.median) \(.user + .system)"' "$d/h.json"
}
# "N samples/s (W s wall, C s cpu)" of a "WALL CPU" pair
rate() { echo "$1" | awk -v n="$2" '{ printf "%.0f samples/s (%.3f s wall, %.3f s cpu)", n / $1, $1, $2 }'; }
# peer/ours, wall and cpu
ratio() { printf '%s %s\n' "$1" "$2" | awk '{ printf "%.2f wall, %.2f cpu", $3 / $1, $4 / $2 }'; }

cd "$d"
# The interpreter the sandbox can run (its user cannot enter a mode 0700 home
# with a python3 in it), the same for every run so that they compare.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
EX="$PY echo.py"
echo "Exec pool: $n small samples ({id, response, label}), $(nproc) cores; built-ins: $ng sw-datagen samples ($(stat -c %s gen.msgpack) bytes of msgpack)."
echo
echo "| what | sw-verify | peer | peer/ours |"
echo "|---|---|---|---|"
p1=$(t "sw-verify -q -r \"exec:$EX,workers=1\" small.msgpack >/dev/null")
p2=$(t "sw-verify -q -r \"exec:$EX,workers=2\" small.msgpack >/dev/null")
ls1=$(t "sw-verify -q --window 1 -r \"exec:$EX,workers=1\" small.msgpack >/dev/null")
py=$(t "$PY peer_echo.py <small.jsonl >/dev/null")
echo "| exec pool, 1 worker, pipelined (peer: the same, lock-step, --window 1) | $(rate "$p1" "$n") | $(rate "$ls1" "$n") | $(ratio "$p1" "$ls1") |"
echo "| exec pool, 2 workers, pipelined (peer: the same, lock-step) | $(rate "$p2" "$n") | $(rate "$ls1" "$n") | $(ratio "$p2" "$ls1") |"
echo "| exec pool, 2 workers (peer: the scoring in-process, one Python loop over JSON Lines) | $(rate "$p2" "$n") | $(rate "$py" "$n") | $(ratio "$p2" "$py") |"
u1=$(t "sw-verify -q -r \"exec:$EX,workers=1,sandbox=none\" small.msgpack >/dev/null")
s1=$(t "sw-verify -q -r \"exec:$EX\" one.jsonl >/dev/null")
u0=$(t "sw-verify -q -r \"exec:$EX,sandbox=none\" one.jsonl >/dev/null")
echo "| sandbox, 1 worker (peer: sandbox=none) | $(rate "$p1" "$n") | $(rate "$u1" "$n") | $(ratio "$p1" "$u1") |"
echo "| start-up and 1 sample (peer: sandbox=none) | $(rate "$s1" 1) | $(rate "$u0" 1) | $(ratio "$s1" "$u0") |"
echo
printf '%s %s %s %s\n' "$p1" "$u1" "$s1" "$u0" | awk -v n="$n" '{
	printf "Sandbox cost: %+.2f us wall, %+.2f us cpu a sample in steady state (%+.1f%% of the sandboxed wall time); %+.1f ms wall, %+.1f ms cpu to start a worker (namespaces, mounts, seccomp).\n",
		($1 - $3) / n * 1e6, ($2 - $4) / n * 1e6, ($1 - $3) / $1 * 100, ($5 - $7) * 1e3, ($6 - $8) * 1e3 }'
echo
bi=$(t "sw-verify -q -r math -r regex:boxed[{],as=format,weight=0.2 -r blocklist:rules.txt -r length,max=512,buffer=128 gen.msgpack >/dev/null")
m1=$(t "sw-verify -q -r math gen.msgpack >/dev/null")
bl=$(t "sw-verify -q -r blocklist:rules.txt gen.msgpack >/dev/null")
cat0=$(t "sw-cat gen.msgpack >/dev/null")
pyb=$(t "$PY peer_builtin.py rules.txt <gen.jsonl >/dev/null")
echo "| what | sw-verify | peer | peer/ours |"
echo "|---|---|---|---|"
echo "| math + regex + blocklist (4 rules) + length (peer: the same in Python, re + json) | $(rate "$bi" "$ng") | $(rate "$pyb" "$ng") | $(ratio "$bi" "$pyb") |"
echo "| math alone (peer: sw-cat, only reading and writing the stream) | $(rate "$m1" "$ng") | $(rate "$cat0" "$ng") | $(ratio "$m1" "$cat0") |"
echo "| blocklist alone, 4 rules (peer: sw-cat) | $(rate "$bl" "$ng") | $(rate "$cat0" "$ng") | $(ratio "$bl" "$cat0") |"
echo
# Built-in verification beside the rollout that made the samples: the
# `small` model, 64 prompts x 8 responses (up to 64 new tokens each).
sw-model init --size small --seed 1 vm >/dev/null
"$top/examples/arith/make-data.sh" vd >/dev/null
head -64 vd/train.jsonl >p64.jsonl
ro=$(RUNS=1 t "OMP_WAIT_POLICY=passive sw-rollout -m vm -n 8 --seed 1 --max-new-tokens 64 -o ro.msgpack p64.jsonl")
vo=$(t "sw-verify -q -r math -r blocklist:vd/blocklist,hard -r length -r json ro.msgpack >/dev/null")
echo "| what | sw-verify | sw-rollout (the samples' generation) | verify / rollout |"
echo "|---|---|---|---|"
printf '%s %s\n' "$vo" "$ro" | awk '{ printf "| math + blocklist (hard) + length + json over 512 samples of the small model | %.4f s wall, %.4f s cpu | %.2f s wall, %.2f s cpu | %.3f%% wall, %.3f%% cpu |\n", $1, $2, $3, $4, $1 / $3 * 100, $2 / $4 * 100 }'
