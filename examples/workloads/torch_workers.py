#!/usr/bin/env python3
"""GPU work done in child processes, for checking that cufall's capture follows a program's
children: --workers spawned processes each run --steps "worker{i}/step" ranges of bf16 matmuls on
cuda:0, worker 0 also runs a grandchild (a fresh interpreter, "grandchild" range), and the parent
touches CUDA only at the end, in "parent/final".

  python3 torch_workers.py                         # 2 workers, 20 steps each
  python3 torch_workers.py --workers 4 --steps 50
  cufall record -o w.cufall --capture nvtx,kernels -- python3 torch_workers.py

Prints {"parent": pid, "workers": [pid, ...], "grandchild": pid}.
"""
import argparse
import json
import multiprocessing as mp
import os
import queue
import subprocess
import sys

import torch

GRANDCHILD = """
import os, torch
torch.cuda.nvtx.range_push("grandchild")
a = torch.randn(4096, 4096, device="cuda:0", dtype=torch.bfloat16)
for _ in range(5):
    b = a @ a
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print(os.getpid())
"""


def worker(i, steps, q):
    dev = torch.device("cuda:0")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    for _ in range(steps):
        torch.cuda.nvtx.range_push(f"worker{i}/step")
        for _ in range(10):
            b = a @ a
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    grandchild = None
    if i == 0:
        # A process that itself starts a child: the injection must reach it through the environment.
        r = subprocess.run([sys.executable, "-c", GRANDCHILD], stdout=subprocess.PIPE, text=True, check=True)
        grandchild = int(r.stdout.split()[-1])
    q.put((i, os.getpid(), grandchild))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps per worker")
    a = p.parse_args()

    # spawn, not fork: a forked child of a CUDA process cannot use CUDA, and spawn is what
    # PyTorch programs use (the parent has no CUDA context yet anyway).
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, a.steps, q)) for i in range(a.workers)]
    for pr in procs:
        pr.start()
    # Read the queue before joining (a child with an unread queued item may not exit), and stop
    # waiting once all are dead: liveness is checked before the get, so nothing sent is missed.
    seen = []
    while len(seen) < len(procs):
        alive = any(pr.is_alive() for pr in procs)
        try:
            seen.append(q.get(timeout=5))
        except queue.Empty:
            if not alive:
                break
    for pr in procs:
        pr.join()
    if any(pr.exitcode != 0 for pr in procs):
        print(f"torch_workers: exit codes {[pr.exitcode for pr in procs]}", file=sys.stderr)
        sys.exit(1)

    torch.cuda.nvtx.range_push("parent/final")
    x = torch.ones(1024, device="cuda:0")
    assert x.sum().item() == 1024
    torch.cuda.nvtx.range_pop()

    seen.sort()
    print(json.dumps({
        "parent": os.getpid(),
        "workers": [pid for _, pid, _ in seen],
        "grandchild": next(g for _, _, g in seen if g is not None),
    }))


if __name__ == "__main__":
    main()
