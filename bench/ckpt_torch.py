#!/usr/bin/env python3
"""ckpt_torch.py - the peer of bench/bench_ckpt.sh: a checkpoint as
transformers' Trainer writes one, of the same model and optimiser state.

    python3 bench/ckpt_torch.py MODEL OUTDIR ROUNDS

loads MODEL (f32), takes one AdamW step on a few tokens so that the
optimiser holds its two moments, then ROUNDS times writes OUTDIR/ckpt-N as
Trainer._save_checkpoint does (model.save_pretrained with safetensors, then
torch.save of the optimiser's state_dict to optimizer.pt) and, as a second
figure, the same followed by an fsync of every file and of the directory
(what sw-run's checkpoints do: durable before the run goes on). Trainer
itself does not fsync and digests nothing. Prints one JSON line:
{"save_s": [...], "save_fsync_s": [...], "bytes": N}.
"""
import json
import os
import shutil
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def save(model, opt, d, durable):
    t0 = time.perf_counter()
    os.makedirs(d)
    model.save_pretrained(d, safe_serialization=True)
    torch.save(opt.state_dict(), os.path.join(d, "optimizer.pt"))
    if durable:
        for name in os.listdir(d):
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - t0


def main():
    model_dir, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.randint(0, model.config.vocab_size, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    res = {"save_s": [], "save_fsync_s": []}
    for r in range(rounds):
        for key, durable in (("save_s", False), ("save_fsync_s", True)):
            d = os.path.join(out, f"ckpt-{key}-{r}")
            res[key].append(save(model, opt, d, durable))
            res["bytes"] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            shutil.rmtree(d)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
