#!/usr/bin/env python3
"""Steady GPU phases for cufall's truth check, benchmark and example recordings.

Default run: idle, a bf16 matmul loop, idle, a device-to-device copy loop, idle. Each phase is
an NVTX range, and its wall-clock span (time.time_ns, the clock of cufall's traces) is written
to --phases-json so samples can be averaged per phase.

  python3 matmul_copy.py --seconds 2 --phases-json phases.json   # the phases
  python3 matmul_copy.py --only matmul --iters 30                # a few kernels, for ncu
  python3 matmul_copy.py --bench 8                               # matmul TFLOP/s over 8 s
  python3 matmul_copy.py --load 60                               # background matmul load

The copy is an elementwise kernel (y = x * 1.0 over 1 GiB of float32): Nsight Compute profiles
kernels, not cudaMemcpy, and the truth check compares both tools on the same kernels.
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0, help="length of each busy phase")
    p.add_argument("--idle", type=float, default=0.5, help="length of each idle phase")
    p.add_argument("--n", type=int, default=8192, help="matmul size (n x n x n, bf16)")
    p.add_argument("--copy-mib", type=int, default=1024, help="bytes copied per copy kernel")
    p.add_argument("--phases-json", help="write the phases' spans here")
    p.add_argument("--only", choices=["matmul", "copy"], help="run --iters kernels of one kind")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--bench", type=float, help="time matmuls for this many seconds")
    p.add_argument("--load", type=float, help="run matmuls for this many seconds, quietly")
    a = p.parse_args()

    dev = torch.device("cuda")
    torch.manual_seed(0)
    A = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    B = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    C = torch.empty(a.n, a.n, device=dev, dtype=torch.bfloat16)
    X = torch.randn(a.copy_mib * 2**20 // 4, device=dev, dtype=torch.float32)
    Y = torch.empty_like(X)

    def mm():
        torch.matmul(A, B, out=C)

    def cp():
        torch.mul(X, 1.0, out=Y)

    for _ in range(3):
        mm()
        cp()
    torch.cuda.synchronize()

    if a.only:
        f = mm if a.only == "matmul" else cp
        for _ in range(a.iters):
            f()
        torch.cuda.synchronize()
        return

    if a.bench or a.load:
        secs = a.bench or a.load
        batch = 50
        done = 0
        start_ev = torch.cuda.Event(enable_timing=True)
        end_ev = torch.cuda.Event(enable_timing=True)
        t_end = time.time() + secs
        start_ev.record()
        while time.time() < t_end:
            for _ in range(batch):
                mm()
            done += batch
            torch.cuda.synchronize()
        end_ev.record()
        torch.cuda.synchronize()
        ms = start_ev.elapsed_time(end_ev)
        if a.bench:
            tflops = 2 * a.n**3 * done / (ms * 1e-3) / 1e12
            print(json.dumps({"matmuls": done, "ms": ms, "ms_per_matmul": ms / done, "tflops": tflops}))
        return

    phases = []

    def phase(name, f, secs, batch):
        torch.cuda.synchronize()
        t0 = time.time_ns()
        torch.cuda.nvtx.range_push(name)
        if f is None:
            time.sleep(secs)
        else:
            t_end = time.time() + secs
            while time.time() < t_end:
                for _ in range(batch):
                    f()
                torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        t1 = time.time_ns()
        phases.append({"name": name, "start_ns": t0, "end_ns": t1})

    phase("idle0", None, a.idle, 0)
    phase("matmul", mm, a.seconds, 40)
    phase("idle1", None, a.idle, 0)
    phase("copy", cp, a.seconds, 100)
    phase("idle2", None, a.idle, 0)
    if a.phases_json:
        with open(a.phases_json, "w") as fh:
            json.dump(phases, fh)


if __name__ == "__main__":
    main()
