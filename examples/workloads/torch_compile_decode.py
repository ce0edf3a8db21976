#!/usr/bin/env python3
"""A decode loop compiled with `torch.compile(mode="reduce-overhead")`: each step is one CUDA graph
replay (as serving stacks run their decode steps), for measuring what tracing a graph whole or
per node costs. torch.compile's Inductor forks compile workers that never touch the GPU and end
with `_exit`.

  compile   the first calls (Inductor compiles; the graph is captured)
  decode    --steps steps, each in a "step" range: a 12-layer MLP block on [8, 2048] bf16

  python3 torch_compile_decode.py --steps 2000
  cufall record -o tc.cufall -- python3 torch_compile_decode.py

Prints {"steps": N, "p50_us": .., "mean_us": .., "compile_s": ..}: the host time of one step,
launch to result, synchronised each step.
"""
import argparse
import json
import statistics
import time

import torch
from torch.cuda import nvtx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--layers", type=int, default=12)
    a = p.parse_args()
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    ws = [torch.randn(2048, 2048, device=dev, dtype=bf) / 45 for _ in range(a.layers)]
    x = torch.randn(8, 2048, device=dev, dtype=bf)

    def step(h):
        for w in ws:
            h = h + torch.nn.functional.gelu(h @ w)
            h = h / (h.float().pow(2).mean(-1, keepdim=True).sqrt().to(bf) + 1)
        return h

    f = torch.compile(step, mode="reduce-overhead")
    t0 = time.perf_counter()
    with nvtx.range("compile"), torch.inference_mode():
        for _ in range(3):
            f(x)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    times = []
    with nvtx.range("decode"), torch.inference_mode():
        for _ in range(a.steps):
            s = time.perf_counter()
            with nvtx.range("step"):
                f(x)
                torch.cuda.synchronize()
            times.append((time.perf_counter() - s) * 1e6)
    print(json.dumps({
        "steps": a.steps,
        "p50_us": round(statistics.median(times), 2),
        "mean_us": round(statistics.fmean(times), 2),
        "compile_s": round(compile_s, 2),
    }))


if __name__ == "__main__":
    main()
