#!/usr/bin/env python3
"""A host-bound, graph-replayed decode loop, for measuring what capture adds to each step: the
loop whose gaps cufall exists to explain, and the one where its own cost shows most.

Each step is one replay of a CUDA graph of 8 x (Linear(2048) + GELU) at batch 8 (16 kernels,
about 60 us of GPU time), inside one NVTX range "step". The host does about 100 us per step, so the
GPU waits on the host: any time capture adds to a step is lost steps.

  --mode compile   torch.compile(mode="reduce-overhead") makes and replays the graph (as serving
                   stacks run decode steps; its guards and cudagraph-tree bookkeeping are the
                   host's work)
  --mode graph     torch.cuda.CUDAGraph captured by hand, replayed after a static input copy,
                   with --host-us of Python work per step (starts in a few seconds; no compiler)

  python3 graph_step_loop.py --mode compile --seconds 3
  cufall record -o g.cufall -- python3 graph_step_loop.py --mode graph

Prints {"mode": .., "steps": N, "seconds": S, "us_per_step": ..} for the timed part only (after
warm-up): the number of steps completed in --seconds of wall time.
"""
import argparse
import json
import os
import time

import torch
from torch.cuda import nvtx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["compile", "graph"], default="graph")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--host-us", type=float, default=60.0,
                   help="Python work per step in --mode graph (microseconds)")
    a = p.parse_args()
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    layers = torch.nn.Sequential(*[
        m for _ in range(8) for m in (torch.nn.Linear(2048, 2048), torch.nn.GELU())
    ]).to(dev, bf)
    x = torch.randn(8, 2048, device=dev, dtype=bf)

    with torch.inference_mode():
        if a.mode == "compile":
            f = torch.compile(layers, mode="reduce-overhead")
            for _ in range(5):
                f(x)

            def step():
                return f(x)
        else:
            static_in = torch.empty_like(x)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    layers(static_in)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = layers(static_in)
            spin = a.host_us * 1e-6

            def step():
                t = time.perf_counter() + spin
                while time.perf_counter() < t:
                    pass
                static_in.copy_(x)
                g.replay()
                return out
        torch.cuda.synchronize()
        # A short untimed run first: allocator, clocks and capture's first records settle.
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            with nvtx.range("step"):
                step()
        torch.cuda.synchronize()
        n = 0
        t0 = time.perf_counter()
        end = t0 + a.seconds
        while time.perf_counter() < end:
            with nvtx.range("step"):
                step()
            n += 1
        torch.cuda.synchronize()
        el = time.perf_counter() - t0
    print(json.dumps({
        "mode": a.mode, "steps": n, "seconds": round(el, 3),
        "us_per_step": round(el * 1e6 / max(n, 1), 2),
        "threads": threads(),
    }))


def threads():
    """CPU milliseconds and involuntary context switches of each thread of this process, by
    name: which threads share the program's cores (a profiler's own threads among them)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                st = fh.read()
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            cpu_ms = (int(f[11]) + int(f[12])) * 1000 // tick
            with open(f"/proc/self/task/{tid}/status") as fh:
                inv = [l.split()[1] for l in fh if l.startswith("nonvoluntary_ctxt_switches")]
        except (OSError, ValueError, IndexError):
            continue
        key = name if name not in out else f"{name}#{tid}"
        out[key] = {"cpu_ms": cpu_ms, "involuntary": int(inv[0]) if inv else None}
    return out


if __name__ == "__main__":
    main()
