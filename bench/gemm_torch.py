#!/usr/bin/env python3
"""gemm_torch.py - PyTorch's matmul (MKL on CPU) on the shapes of bench/gemm_bench.c, the peer of
bench/bench_gemm.sh: one line per shape in gemm_bench's format,

    provider=torch shape=MxNxK op=NT|NN|TN gflops=MEDIAN what=WORDS

    gemm_torch.py REPS

A second provider, torch-bf16: torch.matmul on bf16 tensors (converted before the clock starts, the
result bf16), MKL-DNN's bf16 kernels.

Threads: $SW_THREADS, else every core (torch.set_num_threads).  The median of REPS timed calls after
one warm-up, small products timed over a batch of calls as gemm_bench does.
"""
import os
import sys
import time

import torch

# (transpose A, transpose B, M, N, K, what): gemm_bench.c's shapes_, in its order.
SHAPES = [
    (0, 1, 1024, 768, 768, "fwd q/k/v/o"), (0, 1, 1024, 2048, 768, "fwd gate/up"),
    (0, 1, 1024, 768, 2048, "fwd down"), (0, 1, 1024, 32000, 768, "fwd lm_head"),
    (0, 0, 1024, 768, 768, "bwd dx q/k/v/o"), (0, 0, 1024, 768, 2048, "bwd dx gate/up"),
    (0, 0, 1024, 2048, 768, "bwd dx down"), (0, 0, 1024, 768, 32000, "bwd dx lm_head"),
    (1, 0, 768, 768, 1024, "bwd dW q/k/v/o"), (1, 0, 2048, 768, 1024, "bwd dW gate/up"),
    (1, 0, 768, 2048, 1024, "bwd dW down"), (1, 0, 32000, 768, 1024, "bwd dW lm_head"),
    (0, 1, 1, 2048, 768, "decode"), (0, 1, 4, 2048, 768, "decode"), (0, 1, 8, 2048, 768, "decode"),
    (0, 1, 16, 2048, 768, "decode"), (0, 1, 32, 2048, 768, "decode"), (0, 1, 1, 32000, 768, "decode"),
    (0, 1, 8, 32000, 768, "decode"), (0, 1, 32, 32000, 768, "decode"),
]


# SW_BENCH_SHAPES=smol: gemm_bench.c's smol_, in its order.
SMOL = [
    (0, 1, 256, 576, 576, "fwd q/o"), (0, 1, 256, 192, 576, "fwd k/v"), (0, 1, 256, 1536, 576, "fwd gate/up"),
    (0, 1, 256, 576, 1536, "fwd down"), (0, 1, 341, 49152, 576, "fwd lm_head"),
    (0, 0, 256, 576, 576, "bwd dx q/o"), (0, 0, 256, 576, 192, "bwd dx k/v"),
    (0, 0, 256, 576, 1536, "bwd dx gate/up"), (0, 0, 256, 1536, 576, "bwd dx down"),
    (0, 0, 341, 576, 49152, "bwd dx lm_head"),
    (1, 0, 576, 576, 256, "bwd dW q/o"), (1, 0, 192, 576, 256, "bwd dW k/v"),
    (1, 0, 1536, 576, 256, "bwd dW gate/up"), (1, 0, 576, 1536, 256, "bwd dW down"),
    (1, 0, 49152, 576, 341, "bwd dW lm_head"),
]


def main():
    global SHAPES
    want = os.environ.get("SW_BENCH_SHAPES", "") or "110m"
    if want not in ("110m", "smol"):
        sys.exit("gemm_torch: unknown SW_BENCH_SHAPES '%s' (known: 110m, smol)" % want)
    if want == "smol":
        SHAPES = SMOL
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.set_num_threads(int(os.environ.get("SW_THREADS", "0")) or os.cpu_count())
    g = torch.Generator().manual_seed(1)
    for prov in ("torch", "torch-bf16"):
        print("kernels provider=%s threads=%d what=torch %s, %s, mkldnn bf16 %s" % (
            prov, torch.get_num_threads(), torch.__version__, torch.backends.cpu.get_cpu_capability(),
            torch.ops.mkldnn._is_mkldnn_bf16_supported()))
    for ta, tb, M, N, K, what in SHAPES:
        # Stored as gemm_bench stores them: A is K x M when transposed, B is N x K when transposed.
        A = torch.rand((K, M) if ta else (M, K), generator=g) - 0.5
        B = torch.rand((N, K) if tb else (K, N), generator=g) - 0.5
        for prov, dt in (("torch", torch.float32), ("torch-bf16", torch.bfloat16)):
            a, b = (A.t() if ta else A).to(dt), (B.t() if tb else B).to(dt)
            C = torch.empty(M, N, dtype=dt)
            flop = 2.0 * M * N * K
            inner = int(1e8 / flop) if flop < 1e8 else 1
            times = []
            for r in range(reps + 1):
                t0 = time.perf_counter()
                for _ in range(inner):
                    torch.matmul(a, b, out=C)
                if r:
                    times.append((time.perf_counter() - t0) / inner)
            times.sort()
            med = times[reps // 2] if reps % 2 else 0.5 * (times[reps // 2 - 1] + times[reps // 2])
            op = ("T" if ta else "N") + ("T" if tb else "N")
            print("provider=%s shape=%dx%dx%d op=%s gflops=%.2f what=%s" % (prov, M, N, K, op, flop / med / 1e9, what),
                  flush=True)


if __name__ == "__main__":
    main()
