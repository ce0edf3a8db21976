#!/usr/bin/env python3
"""Per-phase means of a trace's raw counter columns and the full scales derived from them.

  analyze_scale.py TRACE PHASES_JSON          # probe: columns and ratios per phase
  analyze_scale.py --check DIR NCU_CSV        # check: the user's commands against % and ncu

Each phase is trimmed by 10 % at both ends (launch ramp, final sync) before averaging.
"""
import csv
import glob
import io
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

X = "sm__pipe_tensor_cycles_active.avg"
PCT = X + ".pct_of_peak_sustained_elapsed"


def table(trace, name):
    files = sorted(glob.glob(os.path.join(trace, name, "*.parquet")))
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()


def phase_rows(df, ph):
    s, e = ph["start_ns"], ph["end_ns"]
    trim = (e - s) // 10
    return df[(df.start_ns >= s + trim) & (df.end_ns <= e - trim)]


def ratios(sel):
    out = {}
    dur = (sel.end_ns - sel.start_ns) / 1e9
    cols = set(sel.columns)

    def r(name, v):
        out[name] = float(v.mean())

    if X in cols and X + ".peak_sustained" in cols and "sm__cycles_elapsed.avg" in cols:
        r("X/(peak*sm_elapsed) %", 100 * sel[X] / (sel[X + ".peak_sustained"] * sel["sm__cycles_elapsed.avg"]))
    if X in cols and X + ".peak_sustained_elapsed" in cols:
        r("X/peak_sustained_elapsed %", 100 * sel[X] / sel[X + ".peak_sustained_elapsed"])
    if X in cols and "gr__cycles_elapsed.max" in cols:
        r("X/gr", sel[X] / sel["gr__cycles_elapsed.max"])
    for c in ("sm__cycles_elapsed.avg", "gpc__cycles_elapsed.max", "gr__cycles_elapsed.max",
              "sys__cycles_elapsed.avg", "gpc__cycles_elapsed.avg", "sm__cycles_elapsed.max",
              "dram__cycles_elapsed.avg"):
        if c in cols:
            r(c + " MHz", sel[c] / dur / 1e6)
    if "sm__cycles_elapsed.avg" in cols and "gr__cycles_elapsed.max" in cols:
        r("sm_elapsed/gr_elapsed", sel["sm__cycles_elapsed.avg"] / sel["gr__cycles_elapsed.max"])
    if "gpc__cycles_elapsed.max" in cols and "gr__cycles_elapsed.max" in cols:
        r("gpc_elapsed/gr_elapsed", sel["gpc__cycles_elapsed.max"] / sel["gr__cycles_elapsed.max"])
    return out


def probe(trace, phases_path):
    df = table(trace, "samples")
    nv = table(trace, "nvml")
    phases = json.load(open(phases_path))
    out = {"columns": [c for c in df.columns], "samples": int(len(df)), "phases": {}}
    for ph in phases:
        sel = phase_rows(df, ph)
        d = {"samples": int(len(sel))}
        for c in df.columns:
            if c in ("device", "start_ns", "end_ns"):
                continue
            try:
                d[c] = float(sel[c].mean())
            except Exception:
                pass
        d.update(ratios(sel))
        if nv is not None and "sm_clock_mhz" in nv.columns:
            t = nv[(nv.t_ns >= ph["start_ns"]) & (nv.t_ns <= ph["end_ns"])] if "t_ns" in nv.columns else nv
            d["nvml sm clock MHz"] = float(t["sm_clock_mhz"].mean())
        out["phases"][ph["name"]] = d
    if nv is not None:
        out["nvml_columns"] = list(nv.columns)
    print(json.dumps(out, indent=1))


def ncu_means(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    start = text.find('"ID"')
    if start < 0:
        return {"error": "no CSV in ncu output", "tail": text[-1500:]}
    vals = {}
    for r in csv.DictReader(io.StringIO(text[start:])):
        try:
            v = float(r.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
        vals.setdefault(r.get("Metric Name", ""), []).append(v)
    return {m: sum(v) / len(v) for m, v in vals.items()}


def report_means(cufall, trace):
    """Per-phase mean of the first heatmap as `cufall report --json` gives it (display units)."""
    p = subprocess.run([cufall, "report", "--json", trace], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-500:]}
    return json.loads(p.stdout)


def check(d, ncu_csv):
    ncu = ncu_means(ncu_csv)
    out = {"ncu": ncu, "runs": {}}
    for n in ("seed", "seed_den", "seed_raw", "pct"):
        tr = os.path.join(d, n + ".cufall")
        if not os.path.isdir(tr):
            continue
        phases = json.load(open(os.path.join(d, n + ".phases.json")))
        df = table(tr, "samples")
        mm = [p for p in phases if p["name"] == "matmul"]
        sel = phase_rows(df, mm[0]) if mm else df
        out["runs"][n] = {"columns": list(df.columns),
                          "means": {c: float(sel[c].mean()) for c in df.columns
                                    if c not in ("device", "start_ns", "end_ns")}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    else:
        probe(sys.argv[1], sys.argv[2])
