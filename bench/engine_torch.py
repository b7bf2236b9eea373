#!/usr/bin/env python3
"""engine_torch.py - PyTorch's side of bench/bench_engine.sh: the same model
(LlamaForCausalLM, hidden 768, 12 layers, 12 heads, intermediate 2048, vocab
32000, tied embeddings, float32, CPU) and the same work as engine_bench, one
measurement per run, printed as one line of KEY=VALUE pairs.

    engine_torch.py train STEPS [DIR]  fwd + bwd + clip + AdamW step, 4 x 256 tokens (median of STEPS after
                                       one warm-up); with DIR, first write the model (config.json,
                                       model.safetensors, f32) and the tokens (tokens.i32) there, for
                                       engine_bench to start from the same ones
    engine_torch.py generate NSEQ NEW  greedy model.generate() of NEW tokens after a 16-token prompt

Threads: $SW_THREADS, else every core (torch.set_num_threads).
"""
import os
import resource
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

threads = int(os.environ.get("SW_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)
torch.manual_seed(1)
cfg = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=12, head_dim=64, max_position_embeddings=1024,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1,
                  eos_token_id=2)


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def train(steps, save_dir=None):
    # sdpa: transformers' default attention on CPU, its fastest.
    model = LlamaForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, cfg.vocab_size, (4, 256), generator=g)
    if save_dir:
        model.save_pretrained(save_dir, safe_serialization=True)
        ids.to(torch.int32).numpy().tofile(os.path.join(save_dir, "tokens.i32"))
    loss0 = gnorm0 = gnorm0_f32 = 0.0
    times, cpu, loss = [], [], 0.0
    for i in range(steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        if i == 0:  # before any update, as engine_bench's loss0 and gnorm0
            # The gradients' norm summed in double, as ours is: clip_grad_norm_
            # sums in float32, 1.6e-4 off the exact value at this size (seen here).
            loss0 = out.loss.item()
            gnorm0 = sum(p.grad.double().pow(2).sum().item() for p in model.parameters()) ** 0.5
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        if i == 0:
            gnorm0_f32 = gnorm
        opt.step()
        loss = out.loss.item()
        if i:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    med = median(times)
    print("tokens=1024 step_s=%.4f cpu_s=%.4f tokens_per_s=%.1f loss=%.4f loss0=%.7f gnorm0=%.7f gnorm0_f32=%.7f rss_mb=%d"
          % (med, median(cpu), 1024 / med, loss, loss0, gnorm0, gnorm0_f32, rss_mb()))


def generate(nseq, new):
    model = LlamaForCausalLM(cfg).float().eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, cfg.vocab_size, (nseq, 16), generator=g)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2,
                       min_new_tokens=2, pad_token_id=0)
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=0)
        dt = time.perf_counter() - t0
    assert out.shape[1] == 16 + new
    # Whole generate() time over the new tokens (its prefill of 16 tokens included).
    print("nseq=%d new=%d tokens_per_s=%.2f rss_mb=%d" % (nseq, new, nseq * new / dt, rss_mb()))


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    elif sys.argv[1] == "generate":
        generate(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: engine_torch.py train STEPS [DIR] | generate NSEQ NEW")
