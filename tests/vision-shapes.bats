#!/usr/bin/env bats
# sw-shapes (examples/vision/shapes.c), the vision demo's data: its files,
# its answers checked against the pictures themselves, its determinism, and
# its usage errors.
load helpers

# Debian's Python, with the Pillow and msgpack that `make deps-test` installs
# (a python3 earlier on PATH, a pyenv's say, may have neither).
PY=/usr/bin/python3

# count.py DIR FILE: for each prompt, the answer counted from its picture:
# the connected regions of the asked colour, a square filling its bounding
# box and a circle not; prints "ID LABEL COUNTED" per line.
count_py() {
	cat >count.py <<'PY'
import json, sys
from PIL import Image
colours = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (40, 60, 220)}
for line in open(sys.argv[1]):
    r = json.loads(line)
    words = r["prompt"].split()
    colour, shape = words[-4], words[-3].rstrip("s")
    im = Image.open(r["media"][0]["path"]).convert("RGB")
    w, h = im.size
    px = im.load()
    seen, n = set(), 0
    for y in range(h):
        for x in range(w):
            if (x, y) in seen or px[x, y] != colours[colour]:
                continue
            stack, cells = [(x, y)], []
            seen.add((x, y))
            while stack:
                cx, cy = stack.pop()
                cells.append((cx, cy))
                for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                    if 0 <= nx < w and 0 <= ny < h and (nx, ny) not in seen and px[nx, ny] == colours[colour]:
                        seen.add((nx, ny))
                        stack.append((nx, ny))
            xs, ys = [c[0] for c in cells], [c[1] for c in cells]
            box = (max(xs) - min(xs) + 1) * (max(ys) - min(ys) + 1)
            n += (len(cells) == box) == (shape == "square")
    print(r["id"], r["label"], n)
PY
}

@test "sw-shapes writes pictures and prompts whose answers the pictures bear out" {
	run -0 --separate-stderr sw-shapes -n 40 -e 12 -s 3 data
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	[ "$(wc -l <data/train.jsonl)" -eq 40 ]
	[ "$(wc -l <data/eval.jsonl)" -eq 12 ]
	[ "$(wc -l <data/sft.jsonl)" -eq 40 ]
	[ "$(ls data/images | wc -l)" -eq 52 ]
	# every line is JSON with the fields the demo reads, the picture on disk
	run -0 jq -r '[.id, .label, .media[0].type, .media[0].path] | @tsv' data/train.jsonl data/eval.jsonl
	[ "${#lines[@]}" -eq 52 ]
	for l in "${lines[@]}"; do
		set -- $l
		case $2 in [0-3]) ;; *) echo "label $2"; false ;; esac
		[ "$3" = image ]
		[ -s "$4" ] || { echo "missing $4"; false; }
	done
	run -0 jq -r 'select(.prompt | test("^<image>\nHow many (red|green|blue) (squares|circles) are there\\?$") | not) | .id' data/train.jsonl
	[ "$output" = "" ]
	# the answers are right, and not all the same
	count_py
	run -0 "$PY" count.py data/train.jsonl
	bad=$(printf '%s\n' "$output" | awk '$2 != $3')
	[ -z "$bad" ] || { echo "$bad"; false; }
	[ "$(printf '%s\n' "$output" | awk '{print $2}' | sort -u | wc -l)" -ge 3 ]
	run -0 "$PY" count.py data/eval.jsonl
	[ -z "$(printf '%s\n' "$output" | awk '$2 != $3')" ]
	# sft.jsonl: the train prompts, the answer as response
	run -0 jq -r '.response' data/sft.jsonl
	[ "${lines[0]}" = "$(jq -r '.label' data/train.jsonl | head -1)<|eos|>" ]
	# a stream every sw- program reads (Python's msgpack too, after sw-cat)
	run -0 sh -c 'sw-cat -f msgpack data/train.jsonl | /usr/bin/python3 -c "import msgpack, sys; print(sum(1 for r in msgpack.Unpacker(sys.stdin.buffer, raw=False) if r[\"media\"][0][\"type\"] == \"image\"))"'
	[ "$output" = 40 ]
}

@test "sw-shapes: 30 x 30 RGB by default, -S for other sizes, -q and -p and -E" {
	run -0 sw-shapes -n 2 -e 0 small
	run -0 "$PY" -c 'from PIL import Image; im = Image.open("small/images/t1.png"); print(im.size, im.mode)'
	[ "$output" = "(30, 30) RGB" ]
	run -0 sw-shapes -n 3 -e 1 -S 64 -q green-circle -p '<img>' -E '</s>' big
	run -0 "$PY" -c 'from PIL import Image; print(Image.open("big/images/e1.png").size)'
	[ "$output" = "(64, 64)" ]
	run -0 jq -r '.prompt' big/train.jsonl
	[ "${lines[0]}" = "<img>" ]
	[ "${lines[1]}" = "How many green circles are there?" ]
	run -0 jq -r '.response' big/sft.jsonl
	[[ "${lines[0]}" == [0-3]"</s>" ]]
}

@test "sw-shapes is deterministic: the same seed the same files, another seed others" {
	sw-shapes -n 6 -e 3 -s 5 a
	sw-shapes -n 6 -e 3 -s 5 b
	sw-shapes -n 6 -e 3 -s 6 c
	sw-shapes -n 9 -e 3 -s 5 d
	for f in images/t1.png images/e3.png; do
		cmp a/$f b/$f
		run ! cmp -s a/$f c/$f
		cmp a/$f d/$f
	done
	cmp <(sed 's|"a/|"|' a/train.jsonl) <(sed 's|"b/|"|' b/train.jsonl)
	# more training prompts leave the held-out ones as they were
	cmp <(sed 's|"a/|"|' a/eval.jsonl) <(sed 's|"d/|"|' d/eval.jsonl)
}

@test "sw-shapes: help, usage errors, an unwritable directory" {
	run -0 --separate-stderr sw-shapes --help
	[[ "${lines[0]}" == "usage: sw-shapes "* ]]
	[ "$stderr" = "" ]
	run -2 --separate-stderr sw-shapes
	[ "$output" = "" ]
	[[ "$stderr" == "sw-shapes: no directory"* ]]
	run -2 --separate-stderr sw-shapes -S 5 d
	[[ "$stderr" == "sw-shapes: -S: '5' is not a number from 16 to 1024"* ]]
	run -2 --separate-stderr sw-shapes -q purple-square d
	[[ "$stderr" == "sw-shapes: -q: 'purple-square' is not one of"* ]]
	run -2 --separate-stderr sw-shapes -x d
	[[ "$stderr" == *"usage: sw-shapes"* ]]
	run -2 --separate-stderr sw-shapes a b
	[[ "$stderr" == "sw-shapes: one directory only"* ]]
	[ ! -e d ]
	run -1 --separate-stderr sw-shapes -n 1 /nonexistent/x
	[ "$output" = "" ]
	[[ "$stderr" == "sw-shapes: cannot make '/nonexistent/x/images': No such file or directory" ]]
}

@test "README: the sw-shapes block runs as written, from the top of a tree" {
	awk '$0 == "## Images" { on = 1; next } on && /^## / { exit } on && /^    / { print substr($0, 5) }' \
		"$TOP/README.md" >block.sh
	grep -q '^build/bin/sw-shapes -n 1000 -e 200 -s 1 shapes$' block.sh
	ln -s "${SW_BIN%/bin}" build
	run -0 --separate-stderr bash -eo pipefail block.sh
	[ "${#lines[@]}" -eq 2 ]
	[[ "${lines[0]}" == '{"prompt":"<image>\nHow many '*'"label":"'[0-3]'","media":[{"type":"image","path":"shapes/images/e1.png"}]}' ]]
	[ "$(wc -l <shapes/train.jsonl)" -eq 1000 ]
	[ "$(ls shapes/images | wc -l)" -eq 1200 ]
}
