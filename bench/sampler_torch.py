#!/usr/bin/env python3
"""sampler_torch.py - the peer of bench/sampler_bench.c: transformers'
sampling step (generate's logits warpers - temperature, top-k, top-p - then
softmax and torch.multinomial; at temperature 0 generate's argmax) on the
same row of logits, on the CPU.

    python3 bench/sampler_torch.py LOGITS V TEMP TOP_K TOP_P REPS

Prints one line of KEY=VALUE pairs like sampler_bench: the median time of
a step over REPS, for a batch of one row.
"""
import statistics
import sys
import time

import numpy as np
import torch
from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

path, V, temp, top_k, top_p, reps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), \
    float(sys.argv[5]), int(sys.argv[6])
z = torch.from_numpy(np.fromfile(path, dtype="<f4", count=V).copy()).view(1, V)
warp = LogitsProcessorList()
if temp != 1.0 and temp > 0:
    warp.append(TemperatureLogitsWarper(temp))
if top_k > 0:
    warp.append(TopKLogitsWarper(top_k))
if top_p < 1.0:
    warp.append(TopPLogitsWarper(top_p))
ids = torch.zeros((1, 1), dtype=torch.long)
torch.manual_seed(7)
t, s = [], 0
for _ in range(reps):
    t0 = time.perf_counter()
    if temp == 0:  # greedy: generate's argmax; the log-prob at T = 1, as libsw's
        tok = torch.argmax(z, dim=-1, keepdim=True)
        lp = torch.log_softmax(z, dim=-1)[0, tok]
    else:
        w = warp(ids, z.clone())
        p = torch.softmax(w, dim=-1)
        tok = torch.multinomial(p, 1)
        lp = torch.log_softmax(z / temp, dim=-1)[0, tok]  # the token's log-prob, as libsw hands it out
    t.append(time.perf_counter() - t0)
    s += int(tok)
print(f"side=torch V={V} temp={temp:g} top_k={top_k} top_p={top_p:g} "
      f"ms_per_pick={1e3 * statistics.median(t):.4f} token_sum={s} threads={torch.get_num_threads()}")
