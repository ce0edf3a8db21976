//! `cufall export`: the trace's tables, plus the report's phases and gaps, as Parquet or CSV
//! files in a folder; or one Perfetto-loadable JSON trace (Chrome trace-event format: counter
//! tracks per GPU and metric, NVTX slices, kernel slices, gap and drop markers; times in µs from
//! the start of the recording).

use crate::error::{AnalysisError, Result, query_err, write_err};
use crate::report::{Report, ReportOptions, build_report};
use cufall_trace::model::DeviceId;
use cufall_trace::{Table, Trace};
use polars::prelude::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Output formats of `cufall export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    Parquet,
    Csv,
    Perfetto,
}

/// Settings of an export.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub format: Format,
    /// Folder (Parquet, CSV) or file (Perfetto); default next to the trace.
    pub output: Option<PathBuf>,
    pub force: bool,
    /// Most counter points per GPU and metric in a Perfetto trace; denser samples are averaged
    /// into equal time buckets.
    pub max_counter_points: usize,
    pub report: ReportOptions,
}

/// Default cap on Perfetto counter points per track.
pub const DEFAULT_MAX_COUNTER_POINTS: usize = 20_000;

/// Process ids of GPU tracks in the Perfetto trace: far above any host pid.
pub const GPU_PID_BASE: i64 = 1 << 30;
/// Thread ids on a GPU track: counters, gaps, drops, then one per stream.
pub const COUNTER_TID: i64 = 0;
pub const GAP_TID: i64 = 1;
pub const DROP_TID: i64 = 2;
pub const STREAM_TID_BASE: i64 = 100;

/// What an export wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportSummary {
    pub files: Vec<PathBuf>,
    /// Perfetto: counter points were averaged into buckets of this width.
    pub counter_bucket_ns: Option<i64>,
    pub events: u64,
    /// What the reader found wrong with the trace (cut segments are exported as drops).
    pub warnings: Vec<String>,
}

/// The default output path for `trace` in `format`.
pub fn default_output(trace: &Path, format: Format) -> PathBuf {
    let stem = trace
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches('/').to_string())
        .unwrap_or_else(|| "trace".into());
    let stem = stem.strip_suffix(".cufall").unwrap_or(&stem).to_string();
    let parent = trace.parent().unwrap_or(Path::new(""));
    match format {
        Format::Parquet => parent.join(format!("{stem}-parquet")),
        Format::Csv => parent.join(format!("{stem}-csv")),
        Format::Perfetto => parent.join(format!("{stem}.perfetto.json")),
    }
}

/// Runs an export.
pub fn export(trace: &Trace, opts: &ExportOptions) -> Result<ExportSummary> {
    let out = opts
        .output
        .clone()
        .unwrap_or_else(|| default_output(trace.path(), opts.format));
    let report = build_report(trace, &opts.report)?;
    match opts.format {
        Format::Parquet | Format::Csv => export_tables(trace, &report, &out, opts),
        Format::Perfetto => export_perfetto(trace, &report, &out, opts),
    }
}

fn check_target(path: &Path, force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(AnalysisError::OutputExists(path.to_path_buf()));
    }
    Ok(())
}

fn export_tables(
    trace: &Trace,
    report: &Report,
    dir: &Path,
    opts: &ExportOptions,
) -> Result<ExportSummary> {
    let ext = if opts.format == Format::Parquet {
        "parquet"
    } else {
        "csv"
    };
    let names: Vec<String> = Table::ALL
        .iter()
        .map(|t| t.dir_name().to_string())
        .chain(["phases".to_string(), "gaps".to_string()])
        .collect();
    for name in &names {
        check_target(&dir.join(format!("{name}.{ext}")), opts.force)?;
    }
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    let qe = query_err(trace.path());
    let mut files = Vec::new();
    for name in names {
        let path = dir.join(format!("{name}.{ext}"));
        let file = File::create(&path).map_err(|e| write_err(&path, e))?;
        let w = BufWriter::new(file);
        if name == Table::Samples.dir_name() {
            // The big table goes out window by window, so memory stays bounded.
            write_samples(trace, w, opts.format, &path)?;
        } else {
            let mut df = match name.as_str() {
                "phases" => phases_frame(report).map_err(&qe)?,
                "gaps" => gaps_frame(report).map_err(&qe)?,
                // With the spans of skipped segments, so missing data stays marked missing.
                "drops" => trace.drops_frame()?,
                _ => {
                    let table = Table::ALL
                        .into_iter()
                        .find(|t| t.dir_name() == name)
                        .unwrap_or(Table::Drops);
                    trace.frame(table)?
                }
            };
            let res = if opts.format == Format::Parquet {
                ParquetWriter::new(w).finish(&mut df).map(|_| ())
            } else {
                CsvWriter::new(w).include_header(true).finish(&mut df)
            };
            res.map_err(|e| write_err(&path, e))?;
        }
        files.push(path);
    }
    Ok(ExportSummary {
        files,
        counter_bucket_ns: None,
        events: 0,
        warnings: trace.warnings(),
    })
}

/// Writes the samples table to `w`, one time window at a time.
fn write_samples(trace: &Trace, w: BufWriter<File>, format: Format, path: &Path) -> Result<()> {
    let schema = trace
        .lazy(Table::Samples)?
        .collect_schema()
        .map_err(|e| write_err(path, e))?;
    let windows = crate::samples::time_windows(trace, crate::samples::SAMPLES_PER_WINDOW)?;
    // Each window's frame goes to `write` (the Parquet and CSV writers are different types).
    let each_window = |write: &mut dyn FnMut(&DataFrame) -> PolarsResult<()>| -> Result<()> {
        for &(lo, hi) in &windows {
            let lf = trace.lazy_between(Table::Samples, lo, hi)?;
            write(&trace.collect(lf)?).map_err(|e| write_err(path, e))?;
        }
        Ok(())
    };
    if format == Format::Parquet {
        let mut bw = ParquetWriter::new(w)
            .batched(&schema)
            .map_err(|e| write_err(path, e))?;
        each_window(&mut |df| bw.write_batch(df))?;
        bw.finish().map_err(|e| write_err(path, e))?;
    } else {
        let mut bw = CsvWriter::new(w)
            .include_header(true)
            .batched(&schema)
            .map_err(|e| write_err(path, e))?;
        each_window(&mut |df| bw.write_batch(df))?;
        bw.finish().map_err(|e| write_err(path, e))?;
    }
    Ok(())
}

/// One row per phase and device.
pub fn phases_frame(report: &Report) -> PolarsResult<DataFrame> {
    let mut path = Vec::new();
    let mut device = Vec::new();
    let mut count = Vec::new();
    let mut total = Vec::new();
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut samples = Vec::new();
    let mut sampled = Vec::new();
    let mut idle = Vec::new();
    let mut idle_frac = Vec::new();
    let mut dropped = Vec::new();
    let mut act_mean = Vec::new();
    let mut act_peak = Vec::new();
    let mut power = Vec::new();
    let mut sm = Vec::new();
    let mut mem = Vec::new();
    let mut util = Vec::new();
    let mut gap_count = Vec::new();
    let mut gap_ns = Vec::new();
    let mut metric_mean: Vec<Vec<Option<f64>>> = vec![Vec::new(); report.metrics.len()];
    let mut metric_peak: Vec<Vec<Option<f64>>> = vec![Vec::new(); report.metrics.len()];
    for p in std::iter::once(&report.whole_run).chain(report.phases.iter()) {
        for d in &p.devices {
            path.push(p.path.clone());
            device.push(d.device);
            count.push(p.count);
            total.push(p.total_ns);
            p50.push(p.p50_ns);
            p99.push(p.p99_ns);
            samples.push(d.samples);
            sampled.push(d.sampled_ns);
            idle.push(d.idle_ns);
            idle_frac.push(d.idle_fraction);
            dropped.push(d.dropped_ns);
            act_mean.push(d.activity.mean);
            act_peak.push(d.activity.peak);
            power.push(d.power_w);
            sm.push(d.sm_clock_mhz);
            mem.push(d.mem_clock_mhz);
            util.push(d.nvml_gpu_util_pct);
            gap_count.push(d.gaps.count);
            gap_ns.push(d.gaps.total_ns);
            for (i, s) in d.metrics.iter().enumerate().take(report.metrics.len()) {
                metric_mean[i].push(s.mean);
                metric_peak[i].push(s.peak);
            }
        }
    }
    let n = path.len();
    let mut cols = vec![
        Column::new("phase".into(), path),
        Column::new("device".into(), device_column(&device)),
        Column::new("count".into(), count),
        Column::new("total_ns".into(), total),
        Column::new("p50_ns".into(), p50),
        Column::new("p99_ns".into(), p99),
        Column::new("samples".into(), samples),
        Column::new("sampled_ns".into(), sampled),
        Column::new("idle_ns".into(), idle),
        Column::new("idle_fraction".into(), idle_frac),
        Column::new("dropped_ns".into(), dropped),
        Column::new("activity_mean".into(), act_mean),
        Column::new("activity_peak".into(), act_peak),
    ];
    for (i, m) in report.metrics.iter().enumerate() {
        cols.push(Column::new(
            format!("{m}.mean").into(),
            std::mem::take(&mut metric_mean[i]),
        ));
        cols.push(Column::new(
            format!("{m}.peak").into(),
            std::mem::take(&mut metric_peak[i]),
        ));
    }
    cols.extend([
        Column::new("power_w".into(), power),
        Column::new("sm_clock_mhz".into(), sm),
        Column::new("mem_clock_mhz".into(), mem),
        Column::new("nvml_gpu_util_pct".into(), util),
        Column::new("gap_count".into(), gap_count),
        Column::new("gap_ns".into(), gap_ns),
    ]);
    DataFrame::new(n, cols)
}

/// One row per gap.
pub fn gaps_frame(report: &Report) -> PolarsResult<DataFrame> {
    let g = &report.gaps;
    DataFrame::new(
        g.len(),
        vec![
            Column::new(
                "device".into(),
                device_column(&g.iter().map(|x| x.device).collect::<Vec<_>>()),
            ),
            Column::new(
                "start_ns".into(),
                g.iter().map(|x| x.start_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "end_ns".into(),
                g.iter().map(|x| x.end_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "duration_ns".into(),
                g.iter().map(|x| x.duration_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "place".into(),
                g.iter().map(|x| &*x.place).collect::<Vec<_>>(),
            ),
            Column::new(
                "no_kernel_ns".into(),
                g.iter().map(|x| x.no_kernel_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "kernel_resident_ns".into(),
                g.iter().map(|x| x.kernel_resident_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "host_in_sync_ns".into(),
                g.iter()
                    .map(|x| x.host.map(|h| h.in_sync_ns))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "host_in_launch_ns".into(),
                g.iter()
                    .map(|x| x.host.map(|h| h.in_launch_ns))
                    .collect::<Vec<_>>(),
            ),
        ],
    )
}

/// Streams trace events as one JSON document.
struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
    first: bool,
    events: u64,
    t0_ns: i64,
}

impl EventWriter {
    fn ts(&self, t_ns: i64) -> f64 {
        (t_ns - self.t0_ns) as f64 / 1000.0
    }

    fn event(&mut self, v: &serde_json::Value) -> Result<()> {
        if !self.first {
            self.out
                .write_all(b",\n")
                .map_err(|e| write_err(&self.path, e))?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, v).map_err(|e| write_err(&self.path, e))?;
        self.events += 1;
        Ok(())
    }

    fn meta(&mut self, what: &str, pid: i64, tid: i64, name: &str) -> Result<()> {
        self.event(&json!({"ph": "M", "name": what, "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}}))
    }

    fn slice(
        &mut self,
        name: &str,
        cat: &str,
        (pid, tid): (i64, i64),
        (start_ns, end_ns): (i64, i64),
        args: serde_json::Value,
    ) -> Result<()> {
        let v = json!({
            "ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
            "ts": self.ts(start_ns), "dur": (end_ns - start_ns).max(0) as f64 / 1000.0,
            "args": args,
        });
        self.event(&v)
    }
}

/// Device ids as the trace's `device` column holds them (UInt16).
fn device_column(ids: &[DeviceId]) -> Vec<u16> {
    ids.iter()
        .map(|d| u16::try_from(d.0).unwrap_or(u16::MAX))
        .collect()
}

fn gpu_pid(device: DeviceId) -> i64 {
    GPU_PID_BASE + i64::from(device.0)
}

fn export_perfetto(
    trace: &Trace,
    report: &Report,
    path: &Path,
    opts: &ExportOptions,
) -> Result<ExportSummary> {
    check_target(path, opts.force)?;
    let nvtx = trace.nvtx()?;
    let kernels = trace.kernels()?;
    let drops = trace.drops()?;
    let t0_ns = nvtx
        .iter()
        .map(|r| r.start_ns)
        .chain(kernels.iter().map(|k| k.start_ns))
        .chain(std::iter::once(report.start_ns))
        .min()
        .unwrap_or(report.start_ns);
    let file = File::create(path).map_err(|e| write_err(path, e))?;
    let mut w = EventWriter {
        out: BufWriter::new(file),
        path: path.to_path_buf(),
        first: true,
        events: 0,
        t0_ns,
    };
    let head = json!({
        "cufall_trace": report.trace,
        "t0_unix_ns": t0_ns,
        "activity": report.activity.as_ref().map(|a| a.label()),
        "note": "ts and dur are microseconds since t0_unix_ns",
    });
    writeln!(
        w.out,
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{head},\"traceEvents\":["
    )
    .map_err(|e| write_err(path, e))?;

    for g in &report.gpus {
        let pid = gpu_pid(g.device);
        let label = if g.name.is_empty() {
            format!("GPU {}", g.device.0)
        } else {
            format!("GPU {} ({})", g.device.0, g.name)
        };
        w.meta("process_name", pid, 0, &label)?;
        w.event(&json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": g.device}}))?;
        w.meta("thread_name", pid, COUNTER_TID, "counters")?;
        w.meta("thread_name", pid, GAP_TID, "idle gaps")?;
        w.meta("thread_name", pid, DROP_TID, "drops")?;
    }

    // Counters: the samples, then NVML's slower readings on the same GPU tracks.
    let bucket_ns = write_counters(trace, report, &mut w, opts.max_counter_points)?;
    for r in trace.nvml()? {
        let pid = gpu_pid(r.device);
        let ts = w.ts(r.t_ns);
        let readings = [
            ("NVML power W", r.power_w.map(f64::from)),
            ("NVML SM clock MHz", r.sm_clock_mhz.map(f64::from)),
            (
                "NVML GPU util % (nvidia-smi)",
                r.gpu_util_pct.map(f64::from),
            ),
        ];
        for (name, v) in readings {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                w.event(&json!({"ph": "C", "name": name, "pid": pid, "tid": COUNTER_TID, "ts": ts, "args": {"value": v}}))?;
            }
        }
    }

    // NVTX slices on the host threads that emitted them.
    let mut hosts = BTreeSet::new();
    for r in &nvtx {
        let pid = i64::from(r.pid);
        if hosts.insert(pid) {
            w.meta(
                "process_name",
                pid,
                0,
                &format!("host process {} (NVTX)", r.pid),
            )?;
        }
        w.slice(
            &r.name,
            "nvtx",
            (pid, i64::from(r.tid)),
            (r.start_ns, r.end_ns),
            json!({"domain": r.domain, "kind": r.kind.as_str(), "depth": r.depth}),
        )?;
    }
    // Kernel slices, one thread per stream.
    let mut streams = BTreeSet::new();
    for k in &kernels {
        let dev = k.device;
        let pid = gpu_pid(dev);
        let tid = STREAM_TID_BASE + i64::from(k.stream);
        if streams.insert((pid, tid)) {
            w.meta("thread_name", pid, tid, &format!("stream {}", k.stream))?;
        }
        w.slice(
            &k.name,
            k.kind.as_str(),
            (pid, tid),
            (k.start_ns, k.end_ns),
            json!({"correlation_id": k.correlation_id, "bytes": k.bytes, "host_pid": k.pid}),
        )?;
    }
    for g in &report.gaps {
        w.slice(
            &format!("idle gap: {}", g.place),
            "gap",
            (gpu_pid(g.device), GAP_TID),
            (g.start_ns, g.end_ns),
            json!({"no_kernel_us": g.no_kernel_ns.map(|v| v as f64 / 1000.0),
                   "kernel_resident_us": g.kernel_resident_ns.map(|v| v as f64 / 1000.0)}),
        )?;
    }
    for d in &drops {
        let dev = d.device;
        w.slice(
            &format!("drop: {}", d.reason.as_str()),
            "drop",
            (gpu_pid(dev), DROP_TID),
            (d.start_ns, d.end_ns),
            json!({"lost_samples": d.lost_samples}),
        )?;
    }
    w.out.write_all(b"\n]}\n").map_err(|e| write_err(path, e))?;
    w.out.flush().map_err(|e| write_err(path, e))?;
    Ok(ExportSummary {
        files: vec![path.to_path_buf()],
        counter_bucket_ns: bucket_ns,
        events: w.events,
        warnings: trace.warnings(),
    })
}

/// Writes `C` events per GPU and metric (and the activity value); returns the bucket width when
/// samples were averaged.
fn write_counters(
    trace: &Trace,
    report: &Report,
    w: &mut EventWriter,
    max_points: usize,
) -> Result<Option<i64>> {
    let max_per_device = report
        .whole_run
        .devices
        .iter()
        .map(|d| d.samples)
        .max()
        .unwrap_or(0);
    let mut values: Vec<Expr> = report
        .metrics
        .iter()
        .map(|m| col(m.as_str()).cast(DataType::Float64))
        .collect();
    let mut names: Vec<String> = report.metrics.clone();
    match &report.activity {
        Some(a) => {
            values.push(a.expr().cast(DataType::Float64));
            names.push(format!("activity ({})", a.label()));
        }
        // No GPU counters: nothing to draw from the samples table.
        None => return Ok(None),
    }
    let qe = query_err(trace.path());
    // (device, time) -> values, in order.
    let mut points: BTreeMap<(DeviceId, i64), (i64, Vec<f64>)> = BTreeMap::new();
    let bucket = if max_per_device <= max_points.max(1) as u64 {
        let mut sel = vec![col("device"), col("start_ns")];
        sel.extend(
            values
                .into_iter()
                .enumerate()
                .map(|(i, e)| e.alias(format!("v{i}"))),
        );
        let df = trace.collect(trace.lazy(Table::Samples)?.select(sel))?;
        let device = crate::error::column_u16(&df, "device", &qe)?;
        let start = crate::error::column_i64(&df, "start_ns", &qe)?;
        let cols: Vec<Float64Chunked> = (0..names.len())
            .map(|i| crate::error::column_f64(&df, &format!("v{i}"), &qe))
            .collect::<Result<_>>()?;
        for row in 0..df.height() {
            if let (Some(d), Some(t)) = (device.get(row), start.get(row)) {
                let v = cols
                    .iter()
                    .map(|c| c.get(row).unwrap_or(f64::NAN))
                    .collect();
                points.insert((DeviceId(u32::from(d)), t), (t, v));
            }
        }
        None
    } else {
        // Equal time buckets, averaged window by window like the report's scan: runs of rows
        // with the same device and bucket are summed as slices, then merged.
        let span = (report.end_ns - report.start_ns).max(1);
        let width = (span + max_points as i64 - 1) / max_points.max(1) as i64;
        let mut sums: BTreeMap<(DeviceId, i64), (i64, u64, Vec<f64>)> = BTreeMap::new();
        for (lo, hi) in crate::samples::time_windows(trace, crate::samples::SAMPLES_PER_WINDOW)? {
            let lf = trace.lazy_between(Table::Samples, lo, hi)?;
            let mut sel = vec![
                col("device"),
                col("start_ns"),
                ((col("start_ns") - lit(report.start_ns)) / lit(width)).alias("bucket"),
            ];
            sel.extend(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, e)| e.clone().alias(format!("v{i}"))),
            );
            let changed = col("device")
                .neq(col("device").shift(lit(1)))
                .or(col("bucket").neq(col("bucket").shift(lit(1))))
                .fill_null(lit(true));
            let mut run_aggs = vec![
                col("device").first(),
                col("bucket").first(),
                col("start_ns").min(),
                len().cast(DataType::Int64).alias("n"),
            ];
            let mut merge_aggs = vec![col("start_ns").min(), col("n").sum()];
            for i in 0..names.len() {
                let v = format!("v{i}");
                run_aggs.push(col(v.as_str()).sum());
                merge_aggs.push(col(v.as_str()).sum());
            }
            let q = lf
                .select(sel)
                .with_columns([changed.cast(DataType::UInt32).cum_sum(false).alias("run")])
                .group_by([col("run")])
                .agg(run_aggs)
                .group_by([col("device"), col("bucket")])
                .agg(merge_aggs);
            let df = trace.collect(q)?;
            let device = crate::error::column_u16(&df, "device", &qe)?;
            let bucket = crate::error::column_i64(&df, "bucket", &qe)?;
            let start = crate::error::column_i64(&df, "start_ns", &qe)?;
            let n = crate::error::column_i64(&df, "n", &qe)?;
            let cols: Vec<Float64Chunked> = (0..names.len())
                .map(|i| crate::error::column_f64(&df, &format!("v{i}"), &qe))
                .collect::<Result<_>>()?;
            for row in 0..df.height() {
                let (Some(d), Some(b), Some(t)) =
                    (device.get(row), bucket.get(row), start.get(row))
                else {
                    continue;
                };
                let e = sums
                    .entry((DeviceId(u32::from(d)), b))
                    .or_insert_with(|| (t, 0, vec![0.0; names.len()]));
                e.0 = e.0.min(t);
                e.1 += n.get(row).unwrap_or(0).max(0) as u64;
                for (acc, c) in e.2.iter_mut().zip(&cols) {
                    *acc += c.get(row).unwrap_or(f64::NAN);
                }
            }
        }
        for ((d, b), (t, n, s)) in sums {
            let n = n.max(1) as f64;
            points.insert((d, b), (t, s.into_iter().map(|v| v / n).collect()));
        }
        Some(width)
    };
    for ((d, _), (t, vals)) in points {
        let pid = gpu_pid(d);
        let ts = w.ts(t);
        for (name, v) in names.iter().zip(vals) {
            if v.is_finite() {
                w.event(&json!({"ph": "C", "name": name, "pid": pid, "tid": COUNTER_TID, "ts": ts, "args": {"value": v}}))?;
            }
        }
    }
    Ok(bucket)
}
