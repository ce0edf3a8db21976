#!/usr/bin/env python3
"""A PyTorch decode loop, host-bound or GPU-bound, that prints its step time: the program whose
slowdown under `cufall record` (host stacks on and off) the host-stacks benchmark measures.

  --mode host   batch 1 through 24 small layers (hidden 512): ~100 tiny kernels per step, plus a
                Python sampling step and a `.item()` that waits for the GPU; the GPU is mostly idle
                and the step time is the host's (launches, Python)
  --mode gpu    batch 4096 through 8 layers of hidden 8192 in bf16: the GPU is busy; the host waits

  python3 decode_loop.py --mode host --seconds 5
  cufall record -o d.cufall -- python3 decode_loop.py --mode host

Prints one JSON line: steps, median and mean step time in microseconds, wall seconds of the
timed part (after --warmup steps).
"""
import argparse
import json
import statistics
import time

import torch
from torch.cuda import nvtx


def build(mode, dev):
    if mode == "host":
        hidden, layers, batch, dtype = 512, 24, 1, torch.float32
    else:
        hidden, layers, batch, dtype = 8192, 8, 4096, torch.bfloat16
    ws = [torch.randn(hidden, hidden, device=dev, dtype=dtype) / hidden**0.5 for _ in range(layers)]
    x = torch.randn(batch, hidden, device=dev, dtype=dtype)
    return ws, x


def sample_token(logits, history):
    # The host's own per-token work: a Python loop over recent tokens (a repetition penalty),
    # then one number brought back from the GPU (the `.item()` every sampler has).
    penalty = 0.0
    for t in history[-64:]:
        penalty += (t % 7) * 1e-3
    return int(torch.argmax(logits[0, :256]).item()) + int(penalty)


def step(ws, x, history):
    nvtx.range_push("forward")
    h = x
    for w in ws:
        h = torch.nn.functional.gelu(h @ w) + h
    nvtx.range_pop()
    nvtx.range_push("sample")
    history.append(sample_token(h, history))
    nvtx.range_pop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["host", "gpu"], default="host")
    p.add_argument("--seconds", type=float, default=5.0, help="length of the timed part")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    a = p.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    ws, x = build(a.mode, dev)
    history = []
    for _ in range(a.warmup):
        step(ws, x, history)
    torch.cuda.synchronize()

    times = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        s = time.perf_counter()
        nvtx.range_push("decode")
        step(ws, x, history)
        nvtx.range_pop()
        times.append(time.perf_counter() - s)
    wall = time.perf_counter() - t0
    print(json.dumps({
        "mode": a.mode,
        "steps": len(times),
        "median_us": round(1e6 * statistics.median(times), 2),
        "mean_us": round(1e6 * wall / len(times), 2),
        "wall_s": round(wall, 3),
    }))


if __name__ == "__main__":
    main()
