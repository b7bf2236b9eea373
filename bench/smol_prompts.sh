# bench/smol_prompts.sh - sourced by the benchmarks of a GRPO iteration's
# pieces (bench_micro.sh, bench_spin.sh): in the current directory, m, a
# random Llama of SmolLM2-135M's shapes written by transformers
# (grpo_trl.py make, as bench_grpo.sh's), and p.jsonl, bench_grpo.sh's first
# 8 prompts.  Needs $here, the bench directory.  smol_prompt_file writes
# p.jsonl alone (for a model made otherwise).
smol_prompts() {
	python3 "$here/grpo_trl.py" make m >/dev/null 2>&1
	smol_prompt_file
}
smol_prompt_file() {
	for i in 0 1 2 3 4 5 6 7; do
		printf '{"id":"p%d","prompt":"Question %d: tell a short story about the number %d."}\n' "$i" "$i" $((7 * i))
	done >p.jsonl
}
