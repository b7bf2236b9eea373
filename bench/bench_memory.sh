#!/bin/sh
# bench/bench_memory.sh - peak resident memory of the generator (sw-rollout)
# and of the train stage (sw-train), against what they must hold, and
# beside the same programs of an earlier build (BEFORE=dir of its bin/).
#
# Generator: a random Llama of the engine benchmark's 110M shape (hidden
# 768, 12 layers, 12 heads, intermediate 2048, vocab 32000, tied: a 438 MB
# f32 safetensors file), greedy, one prompt x 256 new tokens and 32
# responses x 128 (--batch 32); the bound is (weights + KV cache of the
# tokens decoded) x 1.1.
# Train: a random model of SmolLM2-135M's shape (hidden 576, 30 layers, 9
# heads, 3 KV heads, intermediate 1536, vocab 49152, tied), one GRPO step of
# 64 samples (8 prompts of 48 tokens x 8 responses of 16 to 64 tokens) with
# a reference model (KL 0.04); the bound is 16 B a parameter (weights,
# gradient, AdamW's two moments) + 25%, and beside it the same + the
# reference's 4 B a parameter.
# Peak RSS from /usr/bin/time -v; one run each (RSS does not vary with the
# load).  Environment: BEFORE, SW_BENCH_THREADS (default 2), PARTS
# ("gen train", the default, or one of them).
set -eu
. "$(dirname "$0")/env.sh"
TH=${SW_BENCH_THREADS:-2}
PARTS=${PARTS:-gen train}
[ -x /usr/bin/time ] || { echo "bench_memory: /usr/bin/time is missing" >&2; exit 1; }
d=$(bench_tmp memory)
trap 'rm -rf "$d"' EXIT
export OMP_WAIT_POLICY=PASSIVE

# peak RSS in MB of a command (its wall and CPU seconds left in $d/secs)
peak() {
	/usr/bin/time -v "$@" 2>"$d/time" >/dev/null || { cat "$d/time" >&2; exit 1; }
	awk '/Elapsed/ { n = split($NF, p, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + p[i] }
		/User time/ { c += $NF } /System time/ { c += $NF }
		END { printf "%.1f %.1f\n", w, c }' "$d/time" >"$d/secs"
	awk '/Maximum resident/ { printf "%.1f\n", $NF / 1024 }' "$d/time"
}
# a config.json: the base size's, with these fields changed
config() {
	sw-model init -q -s tiny "$d/t"
	jq "$1" "$d/t/config.json" >"$2"
	rm -rf "$d/t"
}
bins="now:$(dirname "$(command -v sw-rollout)")${BEFORE:+ before:$BEFORE}"

if echo "$PARTS" | grep -q gen; then
	config '.hidden_size = 768 | .num_hidden_layers = 12 | .num_attention_heads = 12 |
		.num_key_value_heads = 12 | .head_dim = 64 | .intermediate_size = 2048 |
		.vocab_size = 32000 | .tie_word_embeddings = true | .max_position_embeddings = 1024' "$d/c110.json"
	sw-model init -q -c "$d/c110.json" "$d/m110"
	wmb=$(stat -c %s "$d/m110/model.safetensors" | awk '{ printf "%.1f", $1 / 1048576 }')
	echo '{"id":"a","prompt":"The quick brown fox jumps over the lazy dog"}' >"$d/p1.jsonl"
	for i in $(seq 32); do echo "{\"id\":\"q$i\",\"prompt\":\"Question $i: what is $i plus $i?\"}"; done >"$d/p32.jsonl"
	# the KV cache a token: 2 (k, v) x layers x kv heads x head_dim x 4 bytes
	kvt=$((2 * 12 * 12 * 64 * 4))
	echo "Generator: 110M-shape model, weights $wmb MiB (f32 file), --threads $TH, greedy."
	echo
	echo "| build | workload | peak RSS | (weights + KV) x 1.1 | ratio to weights + KV |"
	echo "|---|---|---|---|---|"
	for b in $bins; do
		name=${b%%:*} dir=${b#*:}
		for w in "1 256 p1" "32 128 p32"; do
			set -- $w
			rss=$(peak "$dir/sw-rollout" -m "$d/m110" --threads "$TH" --temperature 0 --batch "$1" \
				--max-new-tokens "$2" -f json -o "$d/out.json" "$d/$3.jsonl")
			# the tokens in the cache: every sample's prompt and response
			kvtok=$(jq -s 'map(.prompt_tokens + .response_tokens | length) | add' "$d/out.json")
			kvmb=$(awk -v t="$kvtok" -v b="$kvt" 'BEGIN { printf "%.1f", t * b / 1048576 }')
			awk -v nm="$name" -v n="$1" -v new="$2" -v r="$rss" -v w="$wmb" -v k="$kvmb" 'BEGIN {
				printf "| %s | %d x %d new tokens | %.0f MiB | %.0f MiB | %.2fx |\n", nm, n, new, r, (w + k) * 1.1, r / (w + k) }'
		done
	done
	echo
fi

if echo "$PARTS" | grep -q train; then
	config '.hidden_size = 576 | .num_hidden_layers = 30 | .num_attention_heads = 9 |
		.num_key_value_heads = 3 | .head_dim = 64 | .intermediate_size = 1536 |
		.vocab_size = 49152 | .tie_word_embeddings = true | .max_position_embeddings = 2048 |
		.rope_theta = 100000' "$d/c135.json"
	sw-model init -q -c "$d/c135.json" --seed 1 "$d/policy"
	sw-model init -q -c "$d/c135.json" --seed 2 "$d/ref"
	np=$(sw-model info --json "$d/policy" | jq .parameters)
	awk 'BEGIN {
		srand(7)
		for (g = 0; g < 8; g++) {
			p = ""
			for (i = 0; i < 48; i++) p = p (i ? "," : "") int(rand() * 49152)
			for (k = 0; k < 8; k++) {
				n = 16 + int(rand() * 49); r = ""
				for (i = 0; i < n; i++) r = r (i ? "," : "") int(rand() * 49152)
				printf "{\"id\":\"p%d/%d\",\"group\":\"p%d\",\"prompt_tokens\":[%s],\"response_tokens\":[%s],\"reward\":%d}\n",
					g, k, g, p, r, (k + g) % 3 == 0
			}
		}
	}' >"$d/samples.jsonl"
	tok=$(jq -s 'map(.prompt_tokens + .response_tokens | length) | add' "$d/samples.jsonl")
	echo "Train: SmolLM2-135M shape, $np parameters, 64 samples ($tok tokens), GRPO with a reference, -j $TH."
	echo
	echo "| build | peak RSS | 16 B/param + 25% | ratio | (16 + 4 B/param) + 25% | ratio | wall (CPU) s |"
	echo "|---|---|---|---|---|---|---|"
	for b in $bins; do
		name=${b%%:*} dir=${b#*:}
		rm -rf "$d/out"
		rss=$(peak "$dir/sw-train" -q -j "$TH" -m "$d/policy" -o "$d/out" --ref "$d/ref" --kl-coef 0.04 \
			"$d/samples.jsonl")
		awk -v nm="$name" -v r="$rss" -v p="$np" -v s="$(cat "$d/secs")" 'BEGIN {
			a = p * 16 * 1.25 / 1048576; b = p * 20 * 1.25 / 1048576; split(s, t, " ")
			printf "| %s | %.0f MiB | %.0f MiB | %.2f | %.0f MiB | %.2f | %.1f (%.1f) |\n", nm, r, a, r / a, b, r / b, t[1], t[2] }'
	done
fi
