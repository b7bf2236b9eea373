#!/usr/bin/env python3
"""model_torch.py - the peer of model_bench.c for bench/bench_model.sh: the
same model directory loaded and saved by safetensors.torch (the library
transformers itself calls), timed in process, medians of RUNS.

    model_torch.py DIR OUTDIR RUNS
"""
import os
import statistics
import sys
import time

import torch
from safetensors.torch import load_file, save_file

d, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
os.makedirs(out, exist_ok=True)
path = os.path.join(d, "model.safetensors")
load, lazy, f32, bf16 = [], [], [], []
for _ in range(runs):
    t0 = time.perf_counter()
    # as libsw holds them: every tensor float32 in the process's own memory
    # (load_file may hand out tensors that still read the file's pages)
    sd = {k: v.to(torch.float32, copy=True) for k, v in load_file(path).items()}
    load.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    sd2 = load_file(path)
    lazy.append(time.perf_counter() - t0)
    del sd2
for _ in range(runs):
    t0 = time.perf_counter()
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    f32.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    save_file({k: v.to(torch.bfloat16) for k, v in sd.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    bf16.append(time.perf_counter() - t0)
print("params %d" % sum(v.numel() for v in sd.values()))
print("load %.6f" % statistics.median(load))
print("load_lazy %.6f" % statistics.median(lazy))
print("save_f32 %.6f" % statistics.median(f32))
print("save_bf16 %.6f" % statistics.median(bf16))
