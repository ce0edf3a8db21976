#!/usr/bin/env python3
"""Per-phase means of a cufall trace's samples, next to ncu's per-kernel values.

  analyze_truth.py TRACE PHASES_JSON NCU_MATMUL_CSV NCU_COPY_CSV > truth.json

Each busy phase is trimmed by 10 % at both ends (launch ramp, final sync) before averaging.
"""
import csv
import glob
import io
import json
import os
import sys

import pyarrow.parquet as pq
import pyarrow as pa

METRICS = [
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
]


def read_samples(trace):
    files = sorted(glob.glob(os.path.join(trace, "samples", "*.parquet")))
    df = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    if "device" in df.columns:
        df = df[df.device == 0]  # the workloads run on GPU 0
    return df


def ncu_means(path):
    """Mean of each metric over the most frequent kernel in an `ncu --csv` log."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    start = text.find('"ID"')
    if start < 0:
        return {"error": "no CSV in ncu output", "tail": text[-2000:]}
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    by_kernel = {}
    for r in rows:
        name = r.get("Kernel Name", "")
        m = r.get("Metric Name", "")
        v = r.get("Metric Value", "").replace(",", "")
        try:
            v = float(v)
        except ValueError:
            continue
        by_kernel.setdefault(name, {}).setdefault(m, []).append(v)
    if not by_kernel:
        return {"error": "no metric rows"}
    kernel = max(by_kernel, key=lambda k: max(len(v) for v in by_kernel[k].values()))
    return {
        "kernel": kernel[:120],
        "launches": max(len(v) for v in by_kernel[kernel].values()),
        **{m: sum(v) / len(v) for m, v in by_kernel[kernel].items()},
    }


def main():
    trace, phases_path, ncu_mm, ncu_cp = sys.argv[1:5]
    # The default tensor column is the `_realtime` form where the GPU has it: the same
    # quantity as ncu's metric, compared under ncu's name.
    df = read_samples(trace).rename(columns={METRICS[0].replace("_active.", "_active_realtime."): METRICS[0]})
    phases = json.load(open(phases_path))
    out = {"samples": int(len(df)), "phases": {}}
    for ph in phases:
        s, e = ph["start_ns"], ph["end_ns"]
        trim = (e - s) // 10
        sel = df[(df.start_ns >= s + trim) & (df.end_ns <= e - trim)]
        out["phases"][ph["name"]] = {
            "samples": int(len(sel)),
            **{m: float(sel[m].mean()) if m in sel and len(sel) else None for m in METRICS},
        }
    out["ncu"] = {"matmul": ncu_means(ncu_mm), "copy": ncu_means(ncu_cp)}
    rows = []
    for phase in ("matmul", "copy"):
        for m in METRICS:
            pm = out["phases"].get(phase, {}).get(m)
            nc = out["ncu"][phase].get(m)
            diff = None if pm is None or nc is None else pm - nc
            rows.append({"phase": phase, "metric": m, "cufall": pm, "ncu": nc, "diff_pp": diff,
                         "within_5pp": None if diff is None else abs(diff) <= 5.0})
    out["table"] = rows
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
