#!/usr/bin/env python3
"""CUDA graph capture and replay, for checking how cufall's capture records graph launches: a
small MLP step ([64,4096] bf16, three matmuls with relu) runs --replays times eagerly inside one
"eager" range, then is captured into a torch.cuda.CUDAGraph and replayed --replays times, each
replay inside its own "replay" range.

  python3 torch_graphs.py                  # 200 eager steps, 200 replays
  python3 torch_graphs.py --replays 5000
  cufall record -o g.cufall --capture nvtx,kernels -- python3 torch_graphs.py

Prints {"replays": N, "eager_us_per_step": .., "graph_us_per_step": .., "match": bool}.
"""
import argparse
import json
import time

import torch
from torch.cuda import nvtx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replays", type=int, default=200, help="graph replays (and eager steps)")
    a = p.parse_args()

    dev = torch.device("cuda")
    bf = torch.bfloat16
    torch.manual_seed(0)
    ws = [torch.randn(4096, 4096, device=dev, dtype=bf) / 64 for _ in range(3)]
    static_x = torch.randn(64, 4096, device=dev, dtype=bf)

    def step():
        h = static_x
        for w in ws[:-1]:
            h = torch.relu(h @ w)
        return h @ ws[-1]

    def timed(f, n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e6 / n

    # Warm-up on a side stream before capture, as torch.cuda.graphs' documentation does, so
    # cuBLAS workspaces and lazy initialisation are not captured into the graph.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)

    nvtx.range_push("eager")
    eager_us = timed(step, a.replays)
    nvtx.range_pop()
    expected = step()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = step()
    g.replay()  # the first replay uploads the graph; keep it out of the timing

    def replay():
        nvtx.range_push("replay")
        g.replay()
        nvtx.range_pop()

    graph_us = timed(replay, a.replays)
    print(json.dumps({
        "replays": a.replays,
        "eager_us_per_step": round(eager_us, 2),
        "graph_us_per_step": round(graph_us, 2),
        "match": torch.allclose(static_out.float(), expected.float(), rtol=1e-2, atol=1e-2),
    }))


if __name__ == "__main__":
    main()
