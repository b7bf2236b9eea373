# bench/smol_model.sh - sourced by the benchmarks that need a GRPO iteration's
# model without transformers (bench_profile.sh, bench_rollout_grpo.sh,
# bench_faults.sh): smol_model DIR writes to DIR a random Llama of
# SmolLM2-135M's shapes (hidden 576, 30 layers, 9 heads, 3 KV heads,
# intermediate 1536, vocabulary 49152, tied), f32, by $B/bin/sw-model init,
# its tiny config's other fields kept; DIR.t and DIR.json are its scratch.
smol_model() {
	"$B/bin/sw-model" init -q -s tiny "$1.t"
	jq '.hidden_size = 576 | .num_hidden_layers = 30 | .num_attention_heads = 9 |
		.num_key_value_heads = 3 | .head_dim = 64 | .intermediate_size = 1536 |
		.vocab_size = 49152 | .tie_word_embeddings = true | .max_position_embeddings = 2048' \
		"$1.t/config.json" >"$1.json"
	"$B/bin/sw-model" init -q -c "$1.json" "$1"
	rm -rf "$1.t" "$1.json"
}
