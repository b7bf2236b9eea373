#!/usr/bin/env python3
"""train_torch.py - the peer of bench/bench_train.sh: one GRPO step as TRL
computes it, on PyTorch CPU, for the same model, reference, samples and
hyper-parameters as sw-train.

    python3 bench/train_torch.py POLICY_DIR REF_DIR SAMPLES.jsonl [--beta B]
        [--lr LR] [--runs N] [--threads N]

The samples come in groups of G consecutive responses of one prompt, all of
the same lengths, so TRL's padded batch holds no padding.  The step is TRL
1.16's GRPOTrainer with loss_type="grpo", num_iterations=1 (so the old
log-probs are the policy's own, detached), scale_rewards="group", epsilon
0.2, the k3 KL to the reference times beta, no entropy bonus: the per-token
log-probs and entropies come from trl.trainer.utils (selective_log_softmax,
entropy_from_logits, the functions GRPOTrainer calls), the advantage and the
loss are _generate_and_score_completions' and _compute_loss's lines; then
clip_grad_norm_(1.0) and torch.optim.AdamW.  Prints one JSON line: the loss
and pre-clip gradient norm of the first step and the median step time.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

ap = argparse.ArgumentParser()
ap.add_argument("policy")
ap.add_argument("ref")
ap.add_argument("samples")
ap.add_argument("--beta", type=float, default=0.04)
ap.add_argument("--lr", type=float, default=1e-6)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--threads", type=int, default=0)
a = ap.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)

rows = [json.loads(l) for l in open(a.samples)]
G = sum(1 for r in rows if r["group"] == rows[0]["group"])
prompt_ids = torch.tensor([r["prompt_tokens"] for r in rows])
completion_ids = torch.tensor([r["response_tokens"] for r in rows])
rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float32)
policy = AutoModelForCausalLM.from_pretrained(a.policy, dtype=torch.float32)
ref = AutoModelForCausalLM.from_pretrained(a.ref, dtype=torch.float32)
policy.train()
ref.eval()
opt = torch.optim.AdamW(policy.parameters(), lr=a.lr, weight_decay=0.01)
eps_low = eps_high = 0.2


def logps_and_entropies(model, input_ids, logits_to_keep):
    # GRPOTrainer._get_per_token_logps_and_entropies, temperature 1
    logits = model(input_ids=input_ids).logits
    logits = logits[:, -logits_to_keep - 1 : -1, :]
    return selective_log_softmax(logits, input_ids[:, -logits_to_keep:]), entropy_from_logits(logits)


def step():
    t0 = time.perf_counter()
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    keep = completion_ids.size(1)
    mask = torch.ones_like(completion_ids, dtype=torch.float32)
    # advantages: group mean and std (torch.std, Bessel), 1e-4
    mean = rewards.view(-1, G).mean(dim=1).repeat_interleave(G)
    std = rewards.view(-1, G).std(dim=1).repeat_interleave(G)
    advantages = ((rewards - mean) / (std + 1e-4)).unsqueeze(1)
    with torch.no_grad():
        ref_logps, _ = logps_and_entropies(ref, input_ids, keep)
    opt.zero_grad()
    logps, _ = logps_and_entropies(policy, input_ids, keep)
    old = logps.detach()
    coef_1 = torch.exp(logps - old)
    per_token_kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    per_token_loss = per_token_loss + a.beta * per_token_kl
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return loss.item(), gn.item(), time.perf_counter() - t0


first = None
times = []
for _ in range(a.runs):
    loss, gn, t = step()
    first = first or (loss, gn)
    times.append(t)
times.sort()
print(json.dumps({"loss": first[0], "grad_norm": first[1], "step_s": times[len(times) // 2],
                  "tokens": prompt_ids.numel() + completion_ids.numel(), "threads": torch.get_num_threads()}))
