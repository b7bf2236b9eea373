#!/bin/sh
# bench/bench_tokenizer.sh - libsw's tokenizer beside Hugging Face `tokenizers`
# (Python, the same tokenizer.json, the same corpus, one thread), in one run.
#
# The corpus is this repository's own text (C, shell, Python, Markdown, man
# pages) and a multilingual part (the training text of
# tests/fixtures/make_tokenizers.py: CJK, emoji, combining marks, RTL,
# numbers, whitespace runs), about 1.3 MB.  Two tokenizers are trained on it
# with `tokenizers`, vocabulary 32000: Llama 3's pre-tokenizer (Split regex +
# ByteLevel) and Qwen2's (NFC + Split regex + ByteLevel).  Each is timed
# encoding the corpus as one text, and line by line (one call per line, as
# prompts are encoded); medians of RUNS (default 5) runs.  Loading
# tokenizer.json is timed apart (median of RUNS loads a side: libsw's
# sw_tokenizer_load, tokenizers' Tokenizer.from_file).
# The ids of both sides are compared (count and hash) and must be the same.
# Ratio = our MB/s / theirs, so > 1 means we are faster; by wall time and by
# CPU time (the steadier of the two on a shared machine).
set -eu
. "$(dirname "$0")/env.sh"
runs=${RUNS:-5}
python3 -c 'import tokenizers' 2>/dev/null ||
	{ echo "bench_tokenizer: python3 with tokenizers is needed (pip install tokenizers)" >&2; exit 1; }
# the driver, built here so that this script needs no rule of the Makefile beyond libsw.a
make -s -C "$top" B="$B" "$B/lib/libsw.a" >/dev/null
libs=$(make -s -C "$top" --no-print-directory --eval 'sw-print-libs: ; @echo $(LDLIBS_SW)' sw-print-libs)
mkdir -p "$B/bench"
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -fopenmp -I"$top/libsw" \
	-o "$B/bench/tokenizer_bench" "$top/bench/tokenizer_bench.c" "$B/lib/libsw.a" $libs
d=$(bench_tmp tok)
trap 'rm -rf "$d"' EXIT

(cd "$top" && git ls-files '*.c' '*.h' '*.md' '*.py' '*.sh' 'man/*' | grep -v '^third_party/' |
	xargs cat) >"$d/corpus.txt"
python3 - "$d" "$top" <<'EOF'
import json, os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "fixtures"))
import make_tokenizers as mt
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
d = sys.argv[1]
with open(os.path.join(d, "corpus.txt"), "a") as f:
    f.write("\n".join(mt.training_corpus()) + "\n")
text = open(os.path.join(d, "corpus.txt"), encoding="utf-8").read()
for name, regex, nfc in (("llama3", mt.LLAMA3_RE, False), ("qwen2", mt.QWEN2_RE, True)):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=32000, show_progress=False, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(keepends=True), tr)
    os.makedirs(os.path.join(d, name))
    tok.save(os.path.join(d, name, "tokenizer.json"))
EOF
bytes=$(stat -c %s "$d/corpus.txt")

# The peer: the same measurement in `tokenizers`, one thread.
peer() { # dir mode
	RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 - "$1" "$d/corpus.txt" "$runs" "$2" <<'EOF'
import statistics, sys, time
from tokenizers import Tokenizer
loads = []
for r in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
    loads.append(time.perf_counter() - t0)
raw = open(sys.argv[2], "rb").read()
text = raw.decode("utf-8")
parts = text.splitlines(keepends=True) if sys.argv[4] == "lines" else [text]
secs, cpus, ids = [], [], []
for r in range(int(sys.argv[3])):
    t0, c0 = time.perf_counter(), time.process_time()
    out = [tok.encode(p, add_special_tokens=False).ids for p in parts]
    secs.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
    ids = out
h, n = 0xcbf29ce484222325, 0
for seq in ids:
    for i in seq:
        h = ((h ^ i) * 0x100000001b3) & 0xffffffffffffffff
    n += len(seq)
med, cmed = statistics.median(secs), statistics.median(cpus)
print("seconds=%.6f mbps=%.3f cpu_mbps=%.3f ids=%d hash=%016x load_ms=%.3f" % (med, len(raw) / 1e6 / med,
      len(raw) / 1e6 / cmed, n, h, statistics.median(loads) * 1e3))
EOF
}
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

echo "Corpus: $bytes bytes ($(wc -l <"$d/corpus.txt") lines); vocabulary 32000; tokenizers $(python3 -c 'import tokenizers; print(tokenizers.__version__)'); one thread; median of $runs runs."
echo
echo "| tokenizer, input | libsw: MB/s wall (cpu) | tokenizers: MB/s wall (cpu) | ratio wall | ratio cpu | ids identical | loading tokenizer.json, ms: libsw / tokenizers |"
echo "|---|---|---|---|---|---|---|"
for name in llama3 qwen2; do
	for mode in text lines; do
		a=$(SW_THREADS=1 OMP_NUM_THREADS=1 "$B/bench/tokenizer_bench" "$d/$name" "$d/corpus.txt" "$runs" "$mode")
		b=$(peer "$d/$name" "$mode")
		same=no
		[ "$(get "$a" ids) $(get "$a" hash)" = "$(get "$b" ids) $(get "$b" hash)" ] && same="yes ($(get "$a" ids) ids)"
		awk -v w="$name, $([ "$mode" = text ] && echo "one text" || echo "line by line")" \
		    -v a="$(get "$a" mbps)" -v b="$(get "$b" mbps)" -v ac="$(get "$a" cpu_mbps)" \
		    -v bc="$(get "$b" cpu_mbps)" -v s="$same" -v al="$(get "$a" load_ms)" -v bl="$(get "$b" load_ms)" \
		    'BEGIN { printf "| %s | %.2f (%.2f) | %.2f (%.2f) | %.2f | %.2f | %s | %.1f / %.1f |\n", w, a, ac, b, bc, a / b, ac / bc, s, al, bl }'
		[ "$same" != no ] || { echo "bench_tokenizer: $name ($mode): ids differ: ours $a, theirs $b" >&2; exit 1; }
	done
done
