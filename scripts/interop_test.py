#!/usr/bin/env python3
"""Reads a trace written by cufall's writer with pyarrow and polars, without cufall.

The fixture (crates/trace/examples/write_fixture.rs, synthetic data) has 2 devices x 3000
samples; sample i has start_ns = T0 + i*10000, end_ns = start_ns + 9984, tensor value i % 100
and DRAM value ((i*7) % 64) * 0.5.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parent.parent
T0 = 1_764_460_000_000_000_000
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)


with tempfile.TemporaryDirectory() as tmp:
    trace = pathlib.Path(tmp) / "fixture.cufall"
    # `cargo test --workspace` has already built the example; building it alone would unify
    # features differently and rebuild polars, so run the built binary when it is there.
    built = ROOT / "target" / "debug" / "examples" / "write_fixture"
    if built.exists():
        cmd = [str(built), str(trace)]
    else:
        cmd = ["cargo", "run", "--quiet", "-p", "cufall-trace", "--example", "write_fixture", "--", str(trace)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    manifest = json.loads((trace / "manifest.json").read_text())
    check(manifest["format"] == "cufall-trace", "manifest format")
    check(manifest["schema_version"].split(".")[0] == "1", "schema major")

    # pyarrow: the samples folder as one dataset.
    t = ds.dataset(trace / "samples", format="parquet").to_table()
    check(t.num_rows == 6000, f"pyarrow row count {t.num_rows}")
    check(t.column_names == ["device", "start_ns", "end_ns", TENSOR, DRAM], f"columns {t.column_names}")
    dev0 = t.filter(ds.field("device") == 0).sort_by("start_ns")
    starts = dev0.column("start_ns").to_pylist()
    check(starts == [T0 + i * 10000 for i in range(3000)], "pyarrow start_ns")
    check(dev0.column(TENSOR).to_pylist() == [float(i % 100) for i in range(3000)], "pyarrow tensor values")
    for f in sorted((trace / "samples").glob("*.parquet")):
        pq.read_metadata(f)  # every segment is a standalone Parquet file

    # polars: lazy scan of every table.
    s = pl.scan_parquet(str(trace / "samples" / "*.parquet")).filter(pl.col("device") == 1).sort("start_ns").collect()
    check(s.height == 3000, "polars rows")
    check((s["end_ns"] - s["start_ns"]).unique().to_list() == [9984], "polars durations")
    check(s[DRAM].to_list() == [((i * 7) % 64) * 0.5 for i in range(3000)], "polars dram values")
    nvtx = pl.read_parquet(str(trace / "nvtx" / "*.parquet"))
    check(sorted(nvtx["name"].to_list()) == ["draft step=1", "prefill"], "nvtx names")
    drops = pl.read_parquet(str(trace / "drops" / "*.parquet"))
    check(sorted(drops["reason"].to_list()) == ["counter_data_full", "warmup"], "drop reasons")
    nvml = pl.read_parquet(str(trace / "nvml" / "*.parquet")).sort("t_ns")
    check(nvml["power_w"].to_list()[0] == 412.5 and nvml["power_w"].to_list()[1] is None, "nvml power")
    kernels = pl.read_parquet(str(trace / "kernels" / "*.parquet"))
    check(kernels.height == 2 and kernels["bytes"].to_list().count(1 << 30) == 1, "kernels")

    # Trace 1.2's host stacks: a sample's stack is the stacks rows with its stack_id.
    stacks = pl.read_parquet(str(trace / "stacks" / "*.parquet"))
    host = pl.read_parquet(str(trace / "host_samples" / "*.parquet"))
    check(host.height == 6 and set(host["state"].to_list()) == {"running", "idle"}, "host samples")
    leaf = host.join(stacks.filter(pl.col("depth") == 0), on="stack_id").sort("t_ns")
    check(leaf["function"].to_list()[:2] == ["build_tree", "cudaStreamSynchronize"], "host stacks")
    check(t.num_rows == 6000, "pyarrow still reads the samples")
    sql = f"""
        SELECT s.function, s.file, s.line, count(*) AS samples
        FROM read_parquet('{trace}/host_samples/*.parquet') h
        JOIN read_parquet('{trace}/stacks/*.parquet') s USING (stack_id)
        WHERE s.depth = 0 GROUP BY ALL ORDER BY samples DESC, s.function"""
    rows = duckdb.sql(sql).fetchall()
    check(rows == [("build_tree", "tree.py", 88, 3), ("cudaStreamSynchronize", "libcudart.so.13", None, 3)], f"duckdb host frames {rows}")

    # Several nodes' recordings of one run, with DuckDB: hosts from the manifests, phases from
    # every node's NVTX table at once (the SQL that docs/guide.md shows).
    runs = pathlib.Path(tmp) / "runs"
    for node in ["node-a", "node-b"]:
        subprocess.run([*cmd[:-1], str(runs / f"{node}.cufall")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    hosts = duckdb.sql(f"SELECT count(*) FROM read_json_auto('{runs}/*.cufall/manifest.json')").fetchall()[0][0]
    check(hosts == 2, f"duckdb manifests {hosts}")
    per_node = duckdb.sql(f"""
        SELECT regexp_extract(filename, '([^/]+)\\.cufall/nvtx/', 1) AS node, name,
               count(*) AS ranges, sum(end_ns - start_ns) / 1e6 AS total_ms
        FROM read_parquet('{runs}/*.cufall/nvtx/*.parquet', filename = true)
        GROUP BY ALL ORDER BY name, node""").fetchall()
    check([r[:3] for r in per_node] == [("node-a", "draft step=1", 1), ("node-b", "draft step=1", 1), ("node-a", "prefill", 1), ("node-b", "prefill", 1)], f"duckdb per node {per_node}")

    # Real H200 recordings shipped in examples/ must read too.
    for rec in sorted((ROOT / "examples").glob("*.cufall")):
        m = json.loads((rec / "manifest.json").read_text())
        files = sorted((rec / "samples").glob("*.parquet"))
        if files:
            df = pl.read_parquet([str(f) for f in files])
            names = [x["name"] for x in m["sampling"]["metrics"]] if m.get("sampling") else []
            check(all(n in df.columns for n in names), f"{rec.name}: metric columns")
            check(df.height > 0, f"{rec.name}: samples")

print(f"interop: {checks} passed, 0 failed")
