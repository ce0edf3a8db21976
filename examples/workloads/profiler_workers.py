#!/usr/bin/env python3
"""A server's workers as vLLM and SGLang profile them, without vLLM or SGLang: --workers processes
started with multiprocessing's spawn (as vLLM starts its workers) share cuda:0, each runs a
decode-like loop (NVTX ranges "prefill" every 16th step, "decode" otherwise) and calls
torch.cuda.cudart().cudaProfilerStart() and cudaProfilerStop() at its own moments: --windows
windows of --window-ms each, --period-ms apart, worker i's --stagger-ms after worker i-1's (so
each overlaps the next worker's). In its second window each worker calls cudaProfilerStart twice
(CUDA ignores the second call; one stop ends the window). With --leaky, one more worker opens a
window and exits without closing it.

  python3 profiler_workers.py --out truth/          # 3 workers, 3 windows each, and a leaky one
  cufall record -o w.cufall --capture-range cuda-profiler-api --capture-range-end repeat -- \\
      python3 profiler_workers.py --out truth/

Each worker writes truth/worker-PID.json: its windows as it timed them (time.time_ns() after
cudaProfilerStart returned, before cudaProfilerStop was called, or before it exited) and each
of its steps (name, start, end). scripts/gpu/analyze_workers.py compares them with the trace.
"""
import argparse
import json
import multiprocessing as mp
import os
import time

import torch


def schedule(i, a):
    """Worker i's windows, in ms from the common start."""
    return [
        (a.lead_ms + j * a.period_ms + i * a.stagger_ms,
         a.lead_ms + j * a.period_ms + i * a.stagger_ms + a.window_ms)
        for j in range(a.windows)
    ]


def worker(i, a, leaky, barrier):
    dev = torch.device("cuda:0")
    torch.manual_seed(i)
    # About a millisecond per decode step with four workers on one H200: windows of 300 ms
    # hold a few hundred steps each.
    layers = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64 for _ in range(8)]
    x = torch.randn(64, 4096, device=dev, dtype=torch.bfloat16)
    prompt = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
    cudart = torch.cuda.cudart()

    def step(n):
        name = "prefill" if n % 16 == 0 else "decode"
        t0 = time.time_ns()
        torch.cuda.nvtx.range_push(name)
        h = prompt if name == "prefill" else x
        for w in layers:
            h = torch.nn.functional.gelu(h @ w)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        return (name, t0, time.time_ns())

    step(0)  # CUDA, cuBLAS and the capture library ready before the clock starts
    barrier.wait()
    t_start = time.time_ns()
    if leaky:
        plan = [(a.leaky_at_ms, None)]
        end_ms = a.leaky_at_ms + a.window_ms // 2
    else:
        plan = schedule(i, a)
        end_ms = a.lead_ms + a.windows * a.period_ms + a.tail_ms
    windows, steps = [], []
    k = 0
    n = 1
    while True:
        now_ms = (time.time_ns() - t_start) / 1e6
        if now_ms >= end_ms:
            break
        if k < len(plan):
            open_ms, close_ms = plan[k]
            if len(windows) == k and now_ms >= open_ms:
                cudart.cudaProfilerStart()
                windows.append([time.time_ns(), None])
                if k == 1:
                    cudart.cudaProfilerStart()  # no effect: profiling is on already
            elif len(windows) == k + 1 and close_ms is not None and now_ms >= close_ms:
                windows[k][1] = time.time_ns()
                cudart.cudaProfilerStop()
                k += 1
        steps.append(step(n))
        n += 1
    if leaky:
        windows[0][1] = time.time_ns()  # left open: it ends with the process
    elif windows and windows[-1][1] is None:
        # More workers than the run's length staggers: the last window ends with the run.
        windows[-1][1] = time.time_ns()
        cudart.cudaProfilerStop()
    with open(os.path.join(a.out, f"worker-{os.getpid()}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "worker": i, "leaky": leaky, "windows": windows,
                   "steps": steps}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--windows", type=int, default=3, help="windows per worker")
    p.add_argument("--window-ms", type=int, default=300)
    p.add_argument("--period-ms", type=int, default=1000, help="from one window's start to the next")
    p.add_argument("--stagger-ms", type=int, default=150, help="worker i's windows after worker i-1's")
    p.add_argument("--lead-ms", type=int, default=500, help="steps before the first window")
    p.add_argument("--tail-ms", type=int, default=300, help="steps after the last window")
    p.add_argument("--no-leaky", dest="leaky", action="store_false",
                   help="no worker that exits with its window open")
    p.add_argument("--leaky-at-ms", type=int, default=None,
                   help="when the leaky worker opens its window (default: after every other window)")
    p.add_argument("--out", required=True, help="folder for worker-PID.json")
    a = p.parse_args()
    if a.leaky_at_ms is None:
        a.leaky_at_ms = a.lead_ms + a.windows * a.period_ms
    os.makedirs(a.out, exist_ok=True)

    # spawn, as vLLM's workers: a fresh interpreter per worker, CUDA initialised there.
    ctx = mp.get_context("spawn")
    n = a.workers + (1 if a.leaky else 0)
    barrier = ctx.Barrier(n)
    procs = [ctx.Process(target=worker, args=(i, a, a.leaky and i == a.workers, barrier))
             for i in range(n)]
    for w in procs:
        w.start()
    for w in procs:
        w.join()
    bad = [w.exitcode for w in procs if w.exitcode != 0]
    print(json.dumps({"parent": os.getpid(), "workers": [w.pid for w in procs], "failed": bad}))
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
