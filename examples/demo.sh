#!/bin/sh
# examples/demo.sh - the main job, as far as the toolchain goes today: a
# small pipeline over example samples.  `make demo` builds, then runs this.
# Later programs (rollout, verify, train, run) join the pipeline here.
set -eu
B=${B:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
PATH="$top/$B/bin:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/sw-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

say() { printf '\n$ %s\n' "$*"; }

say "sw-cat examples/samples.jsonl -z -o samples.msgpack.zst"
sw-cat "$top/examples/samples.jsonl" -z -o "$work/samples.msgpack.zst"
ls -l "$work/samples.msgpack.zst" | awk '{ print $5 " bytes of zstd msgpack" }'

say "sw-cat -c samples.msgpack.zst"
sw-cat -c "$work/samples.msgpack.zst"

say "sw-cat -f json -k id,reward,finish samples.msgpack.zst"
sw-cat -f json -k id,reward,finish "$work/samples.msgpack.zst"

say "sw-cat -f json samples.msgpack.zst | sw-cat | cmp - <(sw-cat samples.msgpack.zst)   # byte-exact round trip"
sw-cat "$work/samples.msgpack.zst" >"$work/a.msgpack"
sw-cat -f json "$work/samples.msgpack.zst" | sw-cat >"$work/b.msgpack"
cmp "$work/a.msgpack" "$work/b.msgpack" && echo "identical: $(wc -c <"$work/a.msgpack") bytes"

say "sw-cat -n 1 -f json examples/prompts.jsonl"
sw-cat -n 1 -f json "$top/examples/prompts.jsonl"
