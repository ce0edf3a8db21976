#!/usr/bin/env python3
"""Matmul bursts launched on GPU 0 and GPU 1 at the same instant (3 bursts of 0.5 s, 0.5 s apart),
to check that cufall's per-GPU timestamps line up: the bursts' rising edges should coincide."""
import json, sys, time
import torch

n = 8192
devs = [torch.device(f"cuda:{i}") for i in range(min(2, torch.cuda.device_count()))]
ab = [(torch.randn(n, n, device=d, dtype=torch.bfloat16), torch.randn(n, n, device=d, dtype=torch.bfloat16)) for d in devs]
for d in devs:
    torch.cuda.synchronize(d)
edges = []
for burst in range(3):
    time.sleep(0.5)
    edges.append(time.time_ns())
    t_end = time.time() + 0.5
    while time.time() < t_end:
        for _ in range(20):
            for (a, b) in ab:
                torch.matmul(a, b)
        for d in devs:
            torch.cuda.synchronize(d)
time.sleep(0.3)
if len(sys.argv) > 1:
    json.dump(edges, open(sys.argv[1], "w"))
