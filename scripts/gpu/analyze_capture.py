#!/usr/bin/env python3
"""Reads a captured cufall trace with pyarrow (no cufall) and prints what capture checks need.

  analyze_capture.py counts TRACE EXPECTED.json   # rows per kind against what the program emitted
  analyze_capture.py align TRACE                   # kernel edges against counter edges
  analyze_capture.py procs TRACE                   # NVTX ranges and kernels per process
  analyze_capture.py kinds TRACE                   # activity kinds, API calls, capture events
"""
import json
import os
import sys

import pyarrow.dataset as ds

TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def table(trace, name):
    path = os.path.join(trace, name)
    if not os.path.isdir(path):
        return None
    # The default tensor column is the `_realtime` form where the GPU has it.
    return ds.dataset(path, format="parquet").to_table().to_pandas().rename(
        columns={TENSOR.replace("_active.", "_active_realtime."): TENSOR})


def events(trace):
    c = table(trace, "capture")
    if c is None or c.empty:
        print("capture events: none")
        return
    for _, r in c.iterrows():
        print(f"  capture event pid={r.pid} {r.event} count={r['count']}: {r.detail}")


def counts(trace, expected_path):
    exp = json.loads(open(expected_path).read().strip().splitlines()[-1])
    n = table(trace, "nvtx")
    k = table(trace, "kernels")
    pp = int((n.kind == "push_pop").sum())
    se = int((n.kind == "start_end").sum())
    mk = int((n.kind == "mark").sum())
    dom = int((n.domain == "cufall-test").sum())
    kern = int((k.kind == "kernel").sum())
    print("what          emitted   recorded")
    print(f"push/pop     {exp['push_pop'] + exp['domain_ranges']:>8} {pp:>10}")
    print(f"start/end    {exp['start_end']:>8} {se:>10}")
    print(f"marks        {exp['marks']:>8} {mk:>10}")
    print(f"domain       {exp['domain_ranges']:>8} {dom:>10}")
    print(f"kernels      {exp['kernels']:>8} {kern:>10}   (+ warm-up kernels, if any)")
    colored = n[n.color.notna()]
    print(f"ranges with colour {len(colored)}, with int payload {int(n.payload_int.notna().sum())}, "
          f"categories {sorted(n.category.unique().tolist())[:6]}")
    reg = n[n.domain == "cufall-test"].name.unique().tolist()
    print("registered-string names in the custom domain:", reg[:4])
    events(trace)


def align(trace):
    """For each matmul and copy phase: the first kernel start and the last kernel end against the
    first and last sample where the phase's counter is busy. Within one sampling interval means
    the clocks agree."""
    s = table(trace, "samples").sort_values("start_ns")
    k = table(trace, "kernels")
    n = table(trace, "nvtx")
    interval = int((s.end_ns - s.start_ns).median())
    print(f"sampling interval (median sample length) {interval / 1000:.1f} us")
    print("phase   metric  first kernel start -> first busy sample start   last kernel end -> last busy sample end  (us)")
    worst = 0.0
    for phase, metric in (("matmul", TENSOR), ("copy", DRAM)):
        for _, r in n[n.name == phase].iterrows():
            ks = k[(k.kind == "kernel") & (k.start_ns >= r.start_ns) & (k.end_ns <= r.end_ns + 50_000_000)]
            if ks.empty:
                continue
            k0, k1 = int(ks.start_ns.min()), int(ks.end_ns.max())
            w = s[(s.end_ns >= k0 - 20 * interval) & (s.start_ns <= k1 + 20 * interval)]
            busy = w[w[metric] > 10.0]
            if busy.empty:
                continue
            d0 = (int(busy.start_ns.iloc[0]) - k0) / 1000
            d1 = (int(busy.end_ns.iloc[-1]) - k1) / 1000
            worst = max(worst, abs(d0), abs(d1))
            print(f"{phase:<7} {metric[:6]}  {d0:>+10.1f}                                   {d1:>+10.1f}")
    print(f"largest edge difference {worst:.1f} us = {worst * 1000 / interval:.2f} sampling intervals")


def procs(trace):
    n = table(trace, "nvtx")
    k = table(trace, "kernels")
    print("pid      nvtx_ranges  kernels  names")
    for pid in sorted(set(n.pid.tolist()) | set(k.pid.tolist())):
        names = sorted(n[n.pid == pid].name.unique().tolist())[:4]
        print(f"{pid:<8} {int((n.pid == pid).sum()):>11} {int((k.pid == pid).sum()):>8}  {names}")
    events(trace)


def kinds(trace):
    k = table(trace, "kernels")
    print("activity kinds:", k.kind.value_counts().to_dict() if k is not None else {})
    if k is not None and "graph_id" in k:
        print("kernels launched from graphs:", int(((k.kind == "kernel") & k.graph_id.notna()).sum()))
    a = table(trace, "api")
    if a is not None and not a.empty:
        print("API calls:", a.name.value_counts().head(8).to_dict())
    events(trace)


if __name__ == "__main__":
    mode = sys.argv[1]
    {"counts": lambda: counts(sys.argv[2], sys.argv[3]), "align": lambda: align(sys.argv[2]),
     "procs": lambda: procs(sys.argv[2]), "kinds": lambda: kinds(sys.argv[2])}[mode]()
