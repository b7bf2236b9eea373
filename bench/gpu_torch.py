#!/usr/bin/env python3
"""gpu_torch.py - the peer of bench/gpu_bench.c's train: the same training
step (forward, next-token cross-entropy, backward, clip to 1.0, AdamW) of
the same Qwen2.5-0.5B-shaped model (transformers' Qwen2ForCausalLM from the
config, random weights), on PyTorch on the same GPU.

    python3 bench/gpu_torch.py STEPS NSEQ LEN [--dtype f32|bf16]

f32: TF32 off (what the CUDA backend computes: plain f32); bf16: bf16
autocast over f32 weights and AdamW state (mixed precision, llm.c's
scheme).  SDPA attention.  Prints one line of KEY=VALUE pairs like
gpu_bench: the median step time, model TFLOP/s and MFU against the GPU's
datasheet f32 and dense bf16 rates: $SW_GPU_F32_TFLOPS and
$SW_GPU_BF16_TFLOPS as gpu_bench takes them (with $SW_GPU_HBM_TBS: all
three or none), else the H200's 67 and 990; the line says which.
"""
import argparse
import os
import statistics
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("steps", type=int)
ap.add_argument("nseq", type=int)
ap.add_argument("len", type=int)
ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
a = ap.parse_args()

# the datasheet rates, as gpu_bench.c's rates_get_
_names = ("SW_GPU_F32_TFLOPS", "SW_GPU_BF16_TFLOPS", "SW_GPU_HBM_TBS")
_set = {n: os.environ[n] for n in _names if os.environ.get(n)}
if _set and len(_set) < 3:
    sys.exit("gpu_torch: SW_GPU_F32_TFLOPS, SW_GPU_BF16_TFLOPS and SW_GPU_HBM_TBS: all three or none")
try:
    _rates = {n: float(v) for n, v in _set.items()}
except ValueError:
    sys.exit(f"gpu_torch: {_set}: positive numbers (TFLOP/s or TB/s)")
if any(not (0 < x <= 1e6) for x in _rates.values()):
    sys.exit(f"gpu_torch: {_set}: positive numbers (TFLOP/s or TB/s)")
F32_PEAK = _rates.get("SW_GPU_F32_TFLOPS", 67.0) * 1e12
BF16_PEAK = _rates.get("SW_GPU_BF16_TFLOPS", 990.0) * 1e12
RATES = "env" if _set else "h200"

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                  num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                  tie_word_embeddings=True, attn_implementation="sdpa")
torch.manual_seed(1)
dev = torch.device("cuda")
model = Qwen2ForCausalLM(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
tok = torch.randint(0, cfg.vocab_size, (a.nseq, a.len), device=dev)
nparams = sum(p.numel() for p in model.parameters())

times = []
for i in range(a.steps + 1):  # step 0 warms up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
        loss = model(input_ids=tok, labels=tok).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    print(f"gpu_torch: step {i}: {times[-1]:.3f} s, loss {loss.item():.4f}", file=sys.stderr)

D, In, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
QD = cfg.num_attention_heads * (D // cfg.num_attention_heads)
KD = cfg.num_key_value_heads * (D // cfg.num_attention_heads)
T = a.nseq * a.len
lin = L * (2 * D * QD + 2 * D * KD + 3 * D * In) + V * D
att = L * a.nseq * (a.len * (a.len + 1) / 2) * QD * 2
flops = 6 * lin * T + 6 * att
med = statistics.median(times[1:])
print(f"device=torch-{a.dtype} params={nparams} tokens={T} steps={a.steps} step_s={med:.4f} "
      f"tokens_per_s={T / med:.1f} tflops={flops / med / 1e12:.2f} mfu_f32={flops / med / F32_PEAK:.4f} "
      f"mfu_bf16={flops / med / BF16_PEAK:.4f} loss={loss.item():.4f} torch={torch.__version__} "
      f"rates={RATES} f32_tflops={F32_PEAK / 1e12:.0f} bf16_tflops={BF16_PEAK / 1e12:.0f}")
