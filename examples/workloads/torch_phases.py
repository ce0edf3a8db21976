#!/usr/bin/env python3
"""An LLM-decode-shaped program with NVTX phases, for checking cufall's NVTX and kernel capture.

Phases: "setup" (CPU only: weights built with torch.randn, padded with sleep to --seconds-setup),
"load" (CUDA start-up and the weights' host-to-device copies), "prefill" (8192^3 bf16 matmuls),
then --steps "decode" ranges, each holding a "draft" range (batch-1 matmuls, memory bound) and a
"verify" range (one medium matmul), with a host sleep of --host-gap-ms between them in neither,
so the trace shows GPU idle gaps that belong to no draft/verify range.

  python3 torch_phases.py                                  # 1.5 s setup, 40 steps, 2 ms gaps
  python3 torch_phases.py --steps 200 --host-gap-ms 5
  cufall record -o p.cufall --capture nvtx,kernels -- python3 torch_phases.py
"""
import argparse
import json
import time

import torch
from torch.cuda import nvtx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40, help="decode steps")
    p.add_argument("--host-gap-ms", type=float, default=2.0, help="host sleep between draft and verify")
    p.add_argument("--seconds-setup", type=float, default=1.5, help="length of the CPU-only setup")
    a = p.parse_args()

    t_start = time.time()
    torch.manual_seed(0)
    nvtx.range_push("setup")
    # Float32 on the CPU (CPU bf16 randn is slow), few enough to take ~0.5 s of the setup;
    # scaled by 1/sqrt(4096) so repeated x @ W keeps x's magnitude.
    draft_w = [torch.randn(4096, 4096) / 64 for _ in range(4)]
    verify_w = torch.randn(4096, 4096) / 64
    time.sleep(max(0.0, a.seconds_setup - (time.time() - t_start)))
    nvtx.range_pop()
    t_setup = time.time()

    nvtx.range_push("load")
    dev = torch.device("cuda")
    bf = torch.bfloat16
    draft_w = [w.to(dev, bf) for w in draft_w]
    verify_w = verify_w.to(dev, bf)
    verify_x = torch.randn(2048, 4096, device=dev, dtype=bf)
    A, B = (torch.randn(8192, 8192, device=dev, dtype=bf) for _ in range(2))  # made on the GPU
    torch.cuda.synchronize()
    nvtx.range_pop()

    nvtx.range_push("prefill")
    for _ in range(8):
        C = A @ B
    torch.cuda.synchronize()
    nvtx.range_pop()
    t_prefill = time.time()

    for _ in range(a.steps):
        nvtx.range_push("decode")
        nvtx.range_push("draft")
        x = torch.randn(1, 4096, device=dev, dtype=bf)
        for w in draft_w:
            x = x @ w
        nvtx.range_pop()
        time.sleep(a.host_gap_ms / 1000)
        nvtx.range_push("verify")
        y = verify_x @ verify_w
        nvtx.range_pop()
        torch.cuda.synchronize()
        nvtx.range_pop()
    t_end = time.time()

    print(json.dumps({
        "steps": a.steps,
        "wall_s": round(t_end - t_start, 4),
        "setup_s": round(t_setup - t_start, 4),
        "decode_s": round(t_end - t_prefill, 4),
    }))


if __name__ == "__main__":
    main()
