#!/usr/bin/env python3
"""Reads what scripts/gpu/serve.sh left (scrapes, their times, a flight-recorder dump, a recording
of the load's kernels) with pyarrow alone, and sets the exporter's per-scrape figures beside the
same windows computed from the traces:

  analyze_serve.py DIR DUMP LOAD_TRACE

Per window between two scrapes of GPU 0: the exporter's idle ratio and idle gaps (>= 1 ms);
the same from the dump's samples (idle: every percentage metric below 5 %, the report's rule
for these metrics; a gap is a run of idle samples without a hole); and from the load's
kernels (idle: no kernel resident; a gap: >= 1 ms without one). Windows the dump does not
cover are marked.
"""
import glob
import os
import re
import sys

import numpy as np
import pyarrow.dataset as ds

GAP_NS = 1_000_000


def table(trace, name, columns=None):
    path = os.path.join(trace, name)
    if not os.path.isdir(path) or not glob.glob(os.path.join(path, "*.parquet")):
        return None
    return ds.dataset(path, format="parquet").to_table(columns=columns)


def scrape_values(path, name):
    """{gpu: value} of a series in one scrape."""
    out = {}
    for line in open(path):
        m = re.match(rf'^{name}\{{(.*)\}} (\S+)$', line.strip())
        if m:
            g = re.search(r'gpu="(\d+)"', m.group(1))
            if g:
                out[int(g.group(1))] = float(m.group(2))
    return out


def runs(starts, ends, idle, hole_ns):
    """Idle runs [(s, e)] of consecutive idle samples with no hole between them."""
    out = []
    cur = None
    prev_end = None
    for s, e, i in zip(starts, ends, idle):
        if cur is not None and (not i or s - prev_end > hole_ns):
            out.append(cur)
            cur = None
        if i:
            cur = (cur[0], e) if cur else (s, e)
        prev_end = e
    if cur:
        out.append(cur)
    return out


def clipped(intervals, a, b):
    return [(max(s, a), min(e, b)) for s, e in intervals if e > a and s < b]


def main():
    d, dump, load = sys.argv[1], sys.argv[2], sys.argv[3]
    times = [tuple(map(float, l.split())) for l in open(os.path.join(d, "scrape-times.txt"))]
    times = {int(n): t for n, t in times}

    s = table(dump, "samples")
    samples = None
    if s is not None:
        cols = [c for c in s.column_names if c.endswith("pct_of_peak_sustained_elapsed")]
        dev = s.column("device").to_numpy()
        keep = dev == 0
        st = s.column("start_ns").to_numpy()[keep]
        en = s.column("end_ns").to_numpy()[keep]
        order = np.argsort(st, kind="stable")
        st, en = st[order], en[order]
        vals = [np.nan_to_num(s.column(c).to_numpy(zero_copy_only=False)[keep][order], nan=100.0) for c in cols]
        idle = np.all([v < 5.0 for v in vals], axis=0) if vals else np.zeros(len(st), bool)
        interval = int(np.median(en - st)) if len(st) else 0
        samples = (st, en, idle, runs(st, en, idle, interval // 2 + 1))
        print(f"dump: {len(st)} samples of GPU 0, interval {interval / 1000:.1f} us, metrics {', '.join(cols)}")

    k = table(load, "kernels", ["device", "start_ns", "end_ns"])
    busy = []
    if k is not None:
        kd = k.column("device").to_numpy()
        ks = k.column("start_ns").to_numpy()[kd == 0]
        ke = k.column("end_ns").to_numpy()[kd == 0]
        order = np.argsort(ks)
        for a, b in zip(ks[order], ke[order]):
            if busy and a <= busy[-1][1]:
                busy[-1][1] = max(busy[-1][1], b)
            else:
                busy.append([a, b])
        print(f"load recording: {len(ks)} kernels and copies on GPU 0, {len(busy)} busy stretches")

    print()
    print("window  length | idle: exporter  dump   kernels | gaps >= 1 ms: exporter  dump  kernels")
    diffs, kdiffs = [], []
    for n in sorted(times):
        if n == 0 or n - 1 not in times:
            continue
        a, b = int(times[n - 1] * 1e9), int(times[n] * 1e9)
        f = os.path.join(d, f"scrape-{n}.txt")
        e_idle = scrape_values(f, "cufall_idle_ratio").get(0)
        e_gaps = scrape_values(f, "cufall_window_idle_gaps").get(0)
        d_idle = d_gaps = None
        if samples is not None:
            st, en, idle, rr = samples
            m = (st >= a) & (en <= b)
            if m.any() and st[m][0] - a < 1e9 and b - en[m][-1] < 1e9:
                d_idle = float(((en - st)[m] * idle[m]).sum() / (en - st)[m].sum())
                d_gaps = sum(1 for s0, e0 in clipped(rr, a, b) if e0 - s0 >= GAP_NS)
        k_idle = k_gaps = None
        if busy:
            bb = clipped(busy, a, b)
            k_idle = 1 - sum(e0 - s0 for s0, e0 in bb) / (b - a)
            edges = [a] + [x for s0, e0 in bb for x in (s0, e0)] + [b]
            k_gaps = sum(1 for i in range(0, len(edges), 2) if edges[i + 1] - edges[i] >= GAP_NS)
        fmt = lambda v: "   -  " if v is None else f"{v:6.3f}"
        fmti = lambda v: "  -" if v is None else f"{v:5.0f}"
        print(f"{n:6d}  {(b - a) / 1e9:5.1f}s | {fmt(e_idle)}  {fmt(d_idle)}  {fmt(k_idle)} |"
              f"          {fmti(e_gaps)}  {fmti(d_gaps)}  {fmti(k_gaps)}")
        if e_idle is not None and d_idle is not None:
            diffs.append(abs(e_idle - d_idle))
        if e_idle is not None and k_idle is not None:
            kdiffs.append(abs(e_idle - k_idle))
    print()
    if diffs:
        print(f"exporter vs dump: idle ratio differs by at most {max(diffs):.4f} (median {np.median(diffs):.4f}) over {len(diffs)} windows")
    if kdiffs:
        print(f"exporter vs kernels: idle ratio differs by at most {max(kdiffs):.4f} (median {np.median(kdiffs):.4f}) over {len(kdiffs)} windows")


if __name__ == "__main__":
    main()
