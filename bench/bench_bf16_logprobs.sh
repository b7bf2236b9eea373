#!/bin/sh
# bench/bench_bf16_logprobs.sh - how far `sw-train --matmul bf16` moves the
# log-probs it computes from the rollout's (f32) ones: the offset of GRPO's
# importance ratio at its first epoch, where the ratio would be 1 in exact
# arithmetic.  The model is bench_grpo.sh's (a random one of SmolLM2-135M's
# shapes, in f32), the samples 8 prompts x 8 responses x 64 tokens sampled by
# sw-rollout and scored by sw-verify; sw-train then trains one step on them
# with --matmul f32 and with --matmul bf16 and reports, over every response
# token, |its log-prob - the rollout's| (the metrics logprob_mismatch_mean,
# _max and _kl, sw-train(1)).  Not a timing: no lock needed.
#
#   sh bench/bench_bf16_logprobs.sh
set -euf
. "$(dirname "$0")/env.sh"
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "bench_bf16_logprobs: needs torch and transformers (to write the model)" >&2; exit 1; }
tmp=$(bench_tmp bf16lp)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python3 "$here/grpo_trl.py" make m >/dev/null 2>&1
python3 - >p.jsonl <<'PY'
import json
for i in range(8):
    print(json.dumps({"id": f"p{i}", "prompt": f"Question {i}: tell a short story about the number {7 * i}."}))
PY
sw-rollout -m m -n 8 --seed 1 --max-new-tokens 64 --threads 2 p.jsonl |
	sw-verify -r length,max=120,buffer=60,unit=chars >s.msgpack
echo "random SmolLM2-135M-shaped model (f32), $(sw-cat -f json s.msgpack | wc -l) samples x 64 tokens from sw-rollout (f32)"
echo "| sw-train --matmul | tokens | mean abs diff | max abs diff | KL(rollout, trainer) |"
echo "|---|---|---|---|---|"
for prec in f32 bf16; do
	sw-train --matmul "$prec" --algo grpo --lr 1e-6 -j 2 -m m -o out.$prec --metrics $prec.jsonl s.msgpack >/dev/null
	jq -r --arg p "$prec" '"| \($p) | \(.mismatch_tokens // .tokens) | \(.logprob_mismatch_mean) | \(.logprob_mismatch_max) | \(.logprob_mismatch_kl) |"' $prec.jsonl
done
