#!/usr/bin/env python3
"""Checks a recording of examples/workloads/profiler_workers.py against what its workers timed
themselves, with Python's standard library alone (the trace read through `cufall export
--format csv`):

  analyze_workers.py CSV_DIR TRUTH_DIR

Prints one PASS or FAIL line per check and exits 1 if any failed:
- every worker's own windows are `process_window` rows of its pid, at the times it timed;
- the leaky worker's window ends at its exit, and a `window_open_at_exit` row names its pid;
- the `capture_window` rows are the union of all workers' windows;
- every NVTX phase and every sample in the trace overlaps a window (nothing outside);
- every worker's phases inside its own windows are all there.
"""
import bisect
import csv
import glob
import json
import os
import sys

MS = 1_000_000
TOL_NS = 5 * MS  # a window's edge as the worker timed it against the trace's
EXIT_NS = 5_000 * MS  # a window left open ends at the process's exit, after its last timing

results = []


def check(ok, name, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}")


def rows(csv_dir, table):
    path = os.path.join(csv_dir, f"{table}.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(w) for w in out]


def overlaps(s, e, windows):
    return any(e >= ws and s < we for ws, we in windows)


def near(a, b, tol=TOL_NS):
    return abs(a - b) <= tol


def main():
    csv_dir, truth_dir = sys.argv[1], sys.argv[2]
    truth = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(truth_dir, "worker-*.json")))]
    workers = [t for t in truth if not t["leaky"]]
    leaky = [t for t in truth if t["leaky"]]
    check(len(workers) >= 2 and len(leaky) == 1, "every worker wrote its timings",
          f"{len(workers)} workers, {len(leaky)} leaky")
    capture = rows(csv_dir, "capture")
    per_pid = {}
    for r in capture:
        if r["event"] == "process_window":
            s = int(r["t_ns"])
            per_pid.setdefault(int(r["pid"]), []).append((s, s + int(r["count"]), r["detail"]))
    unions = sorted((int(r["t_ns"]), int(r["t_ns"]) + int(r["count"]))
                    for r in capture if r["event"] == "capture_window")

    for t in workers:
        want = [tuple(w) for w in t["windows"]]
        got = sorted(per_pid.get(t["pid"], []))
        ok = len(got) == len(want) and all(
            near(g[0], w[0]) and near(g[1], w[1]) for g, w in zip(got, want))
        worst = max((max(abs(g[0] - w[0]), abs(g[1] - w[1])) for g, w in zip(got, want)), default=0)
        check(ok, f"worker {t['worker']} (pid {t['pid']}): its {len(want)} windows are its process_window rows",
              f"{len(got)} rows, edges within {worst / 1e6:.2f} ms of its own timing")
    for t in leaky:
        (ws, we), = t["windows"]
        got = per_pid.get(t["pid"], [])
        ok = (len(got) == 1 and near(got[0][0], ws) and we - TOL_NS <= got[0][1] <= we + EXIT_NS
              and f"the exit of process {t['pid']}" in got[0][2])
        check(ok, f"leaky worker (pid {t['pid']}): its window ends at its exit",
              f"{got[0][2] if got else 'no row'}; ends {((got[0][1] - we) / 1e6 if got else 0):.1f} ms after its last timing")
        problem = [r for r in capture if r["event"] == "window_open_at_exit"]
        ok = (len(problem) == 1 and int(problem[0]["pid"]) == t["pid"]
              and f"process {t['pid']}" in problem[0]["detail"])
        check(ok, "a window_open_at_exit row names the leaky worker",
              problem[0]["detail"] if problem else "none")

    # The union, with the leaky window's end taken from the trace (it ends at the exit).
    spans = [tuple(w) for t in workers for w in t["windows"]]
    for t in leaky:
        got = per_pid.get(t["pid"], [])
        spans.append((t["windows"][0][0], got[0][1] if got else t["windows"][0][1]))
    want = union(spans)
    ok = len(unions) == len(want) and all(near(g[0], w[0]) and near(g[1], w[1])
                                          for g, w in zip(unions, want))
    check(ok, "the capture_window rows are the union of every worker's windows",
          f"{len(unions)} rows, {len(want)} expected: "
          + ", ".join(f"{(e - s) / 1e6:.0f} ms" for s, e in unions))

    nvtx = rows(csv_dir, "nvtx")
    outside = [r for r in nvtx if not overlaps(int(r["start_ns"]), int(r["end_ns"]), unions)]
    pids = {int(r["pid"]) for r in nvtx}
    check(not outside and nvtx, "every NVTX phase in the trace overlaps a window",
          f"{len(nvtx)} phases of {len(pids)} processes, {len(outside)} outside")
    samples = rows(csv_dir, "samples")
    s_out = [r for r in samples if not overlaps(int(r["start_ns"]), int(r["end_ns"]), unions)]
    check(not s_out and samples, "every counter sample overlaps a window",
          f"{len(samples)} samples, {len(s_out)} outside")

    by_pid = {}
    # The workers' own phases (a library's ranges, CUB's in domain CCCL, are not theirs).
    for r in (r for r in nvtx if r["name"] in ("prefill", "decode") and r["domain"] == ""):
        by_pid.setdefault(int(r["pid"]), []).append((int(r["start_ns"]), int(r["end_ns"]), r["name"]))
    for t in workers + leaky:
        mine = sorted(by_pid.get(t["pid"], []))
        starts = [r[0] for r in mine]
        missing = 0
        total = 0
        for ws, we in ([tuple(w) for w in t["windows"]] if not t["leaky"] else [tuple(t["windows"][0])]):
            # Steps the worker timed wholly inside its own window: each must be a range of its
            # pid in the trace, within the step's timing.
            inside = [(s, e, n) for n, s, e in t["steps"] if s >= ws and e <= we]
            total += len(inside)
            for s, e, n in inside:
                lo, hi = bisect.bisect_left(starts, s), bisect.bisect_right(starts, e)
                if not any(rn == n and re <= e for _, re, rn in mine[lo:hi]):
                    missing += 1
        check(total > 0 and missing == 0,
              f"worker {t['worker']} (pid {t['pid']}): every phase inside its own windows is in the trace",
              f"{total - missing} of {total}")
        # And the trace holds its phases inside the union only: as many as it timed there.
        expected = sum(1 for n, s, e in t["steps"] if overlaps(s, e, unions))
        check(abs(len(mine) - expected) <= 2 * len(unions),
              f"worker {t['worker']} (pid {t['pid']}): its phases in the trace are those inside the windows",
              f"{len(mine)} in the trace, {expected} timed inside the windows")
    print(f"{'PASS' if all(results) else 'FAIL'}  all {len(results)} checks")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
