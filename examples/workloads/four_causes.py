#!/usr/bin/env python3
"""A loop whose GPU idles for four known host causes, in known proportions, for checking that
`cufall report` finds each one (its verdict line for the `step` place).

Each of --steps NVTX ranges "step" holds, one after the other, with the GPU idle throughout:
  cpu     pure-Python arithmetic                                       (host computing)
  sync    torch.cuda._sleep spins a kernel, torch.cuda.synchronize waits (waiting for the GPU)
  copy    pageable device-to-host copies into a preallocated tensor     (copying)
  launch  many tiny kernel launches (cuLaunchKernel of an empty kernel through ctypes; torch
          one-element adds where the driver cannot be reached)          (launching)
  wait    threading.Event.wait until a helper thread sets it            (waiting on a thread)
The shares are --mix (percent of each step), the step --step-ms long. At the end it prints one
JSON line with the proportions it measured itself (time in each part over the steps' time).

  python3 four_causes.py
  cufall record -o four.cufall --capture nvtx,kernels,memcpy,api -- python3 four_causes.py
"""
import argparse
import ctypes
import json
import threading
import time

import torch
from torch.cuda import nvtx

# An empty kernel: the launch is all there is to it.
PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry noop()
{
    ret;
}
"""


class Launcher:
    """Launches the empty kernel through the driver, with as little Python per launch as ctypes
    allows; `torch` falls back to one-element adds."""

    def __init__(self):
        self.kind = "torch"
        self.x = torch.zeros(1, device="cuda")
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            mod = ctypes.c_void_p()
            fn = ctypes.c_void_p()
            if cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)) != 0:
                raise OSError("cuModuleLoadData failed")
            if cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"noop") != 0:
                raise OSError("cuModuleGetFunction failed")
            launch = cuda.cuLaunchKernel
            u = ctypes.c_uint
            launch.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_void_p]
            launch.restype = ctypes.c_int
            self.args = (fn, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                         None, None)
            self.launch = launch
            if launch(*self.args) != 0:
                raise OSError("cuLaunchKernel failed")
            torch.cuda.synchronize()
            self.kind = "cuLaunchKernel"
        except OSError as e:
            print(f"four_causes: launching through torch ({e})", flush=True)

    def many(self, until):
        n = 0
        if self.kind == "cuLaunchKernel":
            launch, args = self.launch, self.args
            while time.perf_counter() < until:
                for _ in range(50):
                    launch(*args)
                n += 50
        else:
            x = self.x
            while time.perf_counter() < until:
                for _ in range(50):
                    x.add_(1)
                n += 50
        return n


def cpu_work(until):
    acc = 0
    i = 0
    while time.perf_counter() < until:
        for k in range(200):
            acc += (i * k) % 7
        i += 1
    return acc


def sleep_cycles_per_ms():
    """Clock cycles torch.cuda._sleep spins per millisecond, measured."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    torch.cuda._sleep(50_000_000)
    torch.cuda.synchronize()
    return 50_000_000 / ((time.perf_counter() - t) * 1e3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--mix", default="cpu=35,sync=15,copy=20,launch=15,wait=15",
                   help="percent of each step per part")
    a = p.parse_args()
    mix = {k: float(v) / 100.0 for k, v in (kv.split("=") for kv in a.mix.split(","))}

    torch.zeros(1, device="cuda")
    launcher = Launcher()
    cycles_ms = sleep_cycles_per_ms()
    src = torch.empty(16 << 20, dtype=torch.float32, device="cuda").fill_(1.0)  # 64 MiB
    dst = torch.empty(src.shape, dtype=torch.float32)  # pageable, pages touched once here
    dst.fill_(0.0)
    torch.cuda.synchronize()

    spent = {k: 0.0 for k in mix}
    launches = 0
    step_s = 0.0
    for _ in range(a.steps):
        ms = {k: v * a.step_ms for k, v in mix.items()}
        nvtx.range_push("step")
        t0 = time.perf_counter()

        t = time.perf_counter()
        cpu_work(t + ms.get("cpu", 0) / 1e3)
        spent["cpu"] += time.perf_counter() - t

        torch.cuda._sleep(int(cycles_ms * ms.get("sync", 0)))
        t = time.perf_counter()
        torch.cuda.synchronize()
        spent["sync"] += time.perf_counter() - t

        t = time.perf_counter()
        end = t + ms.get("copy", 0) / 1e3
        while time.perf_counter() < end:
            dst.copy_(src)
        spent["copy"] += time.perf_counter() - t

        t = time.perf_counter()
        launches += launcher.many(t + ms.get("launch", 0) / 1e3)
        spent["launch"] += time.perf_counter() - t

        ev = threading.Event()
        helper = threading.Timer(ms.get("wait", 0) / 1e3, ev.set)
        t = time.perf_counter()
        helper.start()
        ev.wait()
        spent["wait"] += time.perf_counter() - t
        helper.join()

        step_s += time.perf_counter() - t0
        nvtx.range_pop()

    shares = {k: round(v / step_s, 4) for k, v in spent.items()}
    shares["other"] = round(1.0 - sum(shares.values()), 4)
    print(json.dumps({"workload": "four_causes", "steps": a.steps, "step_ms": a.step_ms,
                      "launching_through": launcher.kind, "launches": launches,
                      "measured_shares": shares}), flush=True)


if __name__ == "__main__":
    main()
