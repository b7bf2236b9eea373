#!/bin/sh
# bench/bench_fold.sh - what folding the response costs sw-verify's
# blocklist (NFKC, invisible and control characters removed: sw-verify(1)),
# beside the same work in Python, in one run.
#
# 20000 responses of ~1500 characters, a fifth each: plain ASCII English,
# English with typographic punctuation (’ “ ” — …), Chinese, English with
# fullwidth letters, zero-width spaces and emoji (text the fold changes),
# and Russian (every letter looked up by the confusables fold, a third of
# them changed).  Timed, medians of hyperfine runs:
#
#   sw-verify -r blocklist:rules.txt       (folded, the default)
#   sw-verify -r blocklist:rules.txt,raw   (matched as written)
#   sw-verify -r blocklist:rules.txt,confusables   (folded, and letters
#       that read as Latin ones made them)
#   sw-verify -r blocklist:rules.txt,nomarks       (folded without marks)
#   python3 peer: the same rules with re over JSON Lines, the response put
#   in NFKC (unicodedata) with \p{Default_Ignorable_Code_Point} removed (the
#   regex module), and the same without the fold.
#
# Ratios: raw / folded (what the fold costs sw-verify; < 1), folded /
# confusables and folded / nomarks (what each costs on top), and Python's
# folded time / ours (> 1: sw-verify is faster).  Needs hyperfine, jq and
# python3 with the regex module (pip install regex).
# Environment: SW_BENCH_FOLD_N (samples, default 20000), RUNS (default 5).
set -eu
. "$(dirname "$0")/env.sh"
n=${SW_BENCH_FOLD_N:-20000}
runs=${RUNS:-5}
for t in hyperfine jq python3; do
	command -v $t >/dev/null || { echo "bench_fold: $t is missing (make deps-bench)" >&2; exit 1; }
done
python3 -c 'import regex' 2>/dev/null ||
	{ echo "bench_fold: python3 with the regex module is needed (pip install regex)" >&2; exit 1; }
d=$(bench_tmp fold)
trap 'rm -rf "$d"' EXIT

python3 - "$n" "$d" <<'EOF'
import json, random, sys
n, d = int(sys.argv[1]), sys.argv[2]
rnd = random.Random(7)
words = "the of and to in is that it for as with was on be by this are from at or an have not but which".split()
han = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
ru = "и в не на что он с как это по но они к у же вы за бы да мы от так его же все она было".split()
def english(k):
    return " ".join(rnd.choice(words) for _ in range(k))
def kind(i):
    m = i % 5
    if m == 0:
        return english(280) + ". So make a cake."
    if m == 1:
        return english(130) + " \u201cquoted\u201d \u2014 it\u2019s \u2026 " + english(130)
    if m == 2:
        return "".join(rnd.choice(han) for _ in range(500))
    if m == 3:
        return english(250) + " \uff4d\uff41\uff4b\uff45 a bo\u200bmb \U0001F600"
    return " ".join(rnd.choice(ru) for _ in range(500))
with open(f"{d}/in.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": f"s{i}", "response": kind(i)}) + "\n")
EOF
sw-cat -o "$d/in.msgpack" "$d/in.jsonl"
printf '%s\n' '[weapons] \b(build|make) a bomb\b' '[poison] poison(ous)?' '[pii] \b\d{3}-\d{2}-\d{4}\b' \
	'[self-harm] \bkill (myself|yourself)\b' >"$d/rules.txt"

cat >"$d/peer.py" <<'EOF'
# The blocklist as a Python reward function: re over JSON Lines; with "fold",
# the response in NFKC without default-ignorable code points first.
import json, re, sys, unicodedata
import regex
fold = len(sys.argv) > 2 and sys.argv[2] == "fold"
rules = []
for l in open(sys.argv[1]):
    m = re.match(r"\[([^\]]+)\]\s*(.*)", l.rstrip("\n"))
    rules.append((m.group(1), re.compile(m.group(2))))
di = regex.compile(r"\p{Default_Ignorable_Code_Point}")
out = sys.stdout
for line in sys.stdin:
    s = json.loads(line)
    r = s["response"]
    if fold:
        r = di.sub("", unicodedata.normalize("NFKC", di.sub("", r)))
    v = [name for name, p in rules if p.search(r)]
    s["rewards"] = {"blocklist": 0.0 if v else 1.0}
    s["reward"] = 0.0 if v else 1.0
    s["violations"] = v
    out.write(json.dumps(s) + "\n")
EOF

# both sides catch as many: a fifth of the samples (the folded kind), or none raw (counts, not ids)
caught=$(sw-verify -q -f json -r "blocklist:$d/rules.txt" "$d/in.msgpack" | jq -s 'map(select(.violations != [])) | length')
raw=$(sw-verify -q -f json -r "blocklist:$d/rules.txt,raw" "$d/in.msgpack" | jq -s 'map(select(.violations != [])) | length')
conf=$(sw-verify -q -f json -r "blocklist:$d/rules.txt,confusables" "$d/in.msgpack" | jq -s 'map(select(.violations != [])) | length')
nomarks=$(sw-verify -q -f json -r "blocklist:$d/rules.txt,nomarks" "$d/in.msgpack" | jq -s 'map(select(.violations != [])) | length')
peer=$(python3 "$d/peer.py" "$d/rules.txt" fold <"$d/in.jsonl" | jq -s 'map(select(.violations != [])) | length')
if [ "$caught" != "$peer" ] || [ "$caught" != $((n / 5)) ] || [ "$raw" != 0 ] || [ "$conf" != "$caught" ] ||
	[ "$nomarks" != "$caught" ]; then
	echo "bench_fold: the sides disagree: sw-verify caught $caught folded, $raw raw, $conf confusables," \
		"$nomarks nomarks; Python $peer" >&2
	exit 1
fi

hyperfine -N -r "$runs" --export-json "$d/h.json" \
	-n folded "sw-verify -q -o /dev/null -r blocklist:$d/rules.txt $d/in.msgpack" \
	-n raw "sw-verify -q -o /dev/null -r blocklist:$d/rules.txt,raw $d/in.msgpack" \
	-n confusables "sw-verify -q -o /dev/null -r blocklist:$d/rules.txt,confusables $d/in.msgpack" \
	-n nomarks "sw-verify -q -o /dev/null -r blocklist:$d/rules.txt,nomarks $d/in.msgpack" \
	-n py-folded "sh -c 'python3 $d/peer.py $d/rules.txt fold <$d/in.jsonl >/dev/null'" \
	-n py-raw "sh -c 'python3 $d/peer.py $d/rules.txt <$d/in.jsonl >/dev/null'" >/dev/null
jq -r --argjson n "$n" --arg caught "$caught" '
	([.results[] | {key: .command, value: .median}] | from_entries) as $m |
	"Samples: \($n) (~1500 characters each; \($caught) caught folded, with confusables and with nomarks, none raw, as many by Python folded); medians of \(.results[0].times | length) runs.",
	"",
	"| what | seconds | samples/s |",
	"|---|---|---|",
	(["folded", "raw", "confusables", "nomarks", "py-folded", "py-raw"][] as $k |
		"| \($k) | \($m[$k] * 1000 | round / 1000) | \($n / $m[$k] | round) |"),
	"",
	"raw / folded (the fold'"'"'s cost to sw-verify): \($m.raw / $m.folded * 100 | round / 100)",
	"folded / confusables (what confusables costs on top): \($m.folded / $m.confusables * 100 | round / 100)",
	"folded / nomarks (what nomarks costs on top): \($m.folded / $m.nomarks * 100 | round / 100)",
	"Python folded / sw-verify folded: \($m["py-folded"] / $m.folded * 100 | round / 100)"
' "$d/h.json"
