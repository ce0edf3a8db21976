//! `cufall export`: the trace's tables, plus the report's phases and gaps, as Parquet or CSV
//! files in a folder; or one Perfetto-loadable JSON trace (Chrome trace-event format: counter
//! tracks per GPU and metric, NVTX slices, kernel slices, gap and drop markers; times in µs from
//! the start of the recording).

use crate::error::{AnalysisError, Result, write_err};
use crate::report::{Report, ReportOptions, build_report};
use cufall_trace::model::{DeviceId, Nanos};
use cufall_trace::parquet::{ParquetWriter, write_frame};
use cufall_trace::{Column, Field, Frame, Table, Trace, Values};
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
    pub counter_bucket_ns: Option<Nanos>,
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
    check_output_kind(&out, opts.format)?;
    // The kernels are exported one by one, not tabled per phase.
    let report_opts = ReportOptions {
        kernel_rows: Some(0),
        ..opts.report.clone()
    };
    // Every table is checked before anything is written, as every command checks them.
    trace.check()?;
    let report = build_report(trace, &report_opts)?;
    match opts.format {
        Format::Parquet | Format::Csv => export_tables(trace, &report, &out, opts),
        Format::Perfetto => export_perfetto(trace, &report, &out, opts),
    }
}

/// A table export's output must be a folder (or not exist yet), a Perfetto export's a file:
/// `--force` replaces files of the export, never a file or folder of another kind.
fn check_output_kind(out: &Path, format: Format) -> Result<()> {
    let Ok(meta) = std::fs::metadata(out) else {
        return Ok(());
    };
    match format {
        Format::Parquet | Format::Csv if !meta.is_dir() => Err(AnalysisError::OutputNotAFolder {
            path: out.to_path_buf(),
            format: if format == Format::Parquet {
                "Parquet"
            } else {
                "CSV"
            },
        }),
        Format::Perfetto if meta.is_dir() => Err(AnalysisError::OutputIsAFolder(out.to_path_buf())),
        _ => Ok(()),
    }
}

fn check_target(path: &Path, force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(AnalysisError::OutputExists(path.to_path_buf()));
    }
    Ok(())
}

/// The files of one export while they are written: each goes to a hidden temporary name beside
/// its final one (`.NAME.tmp`), and all are renamed into place only once every one is written.
/// Dropped before [`Staged::commit`] succeeds (an error on the way), it removes what the export
/// made: its temporary files, any file already renamed into place, and the output folder if the
/// export created it. A failed export so leaves no partial output behind.
struct Staged {
    /// The output folder, if this export created it.
    created_dir: Option<PathBuf>,
    /// (temporary, final) names, in the order the files were begun.
    files: Vec<(PathBuf, PathBuf)>,
    placed: Vec<PathBuf>,
    committed: bool,
}

impl Staged {
    fn new() -> Self {
        Staged {
            created_dir: None,
            files: Vec::new(),
            placed: Vec::new(),
            committed: false,
        }
    }

    /// Creates `dir` (and its parents), remembering it for removal if it did not exist.
    fn create_dir(&mut self, dir: &Path) -> Result<()> {
        let existed = dir.is_dir();
        std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
        if !existed {
            self.created_dir = Some(dir.to_path_buf());
        }
        Ok(())
    }

    /// Opens the temporary file that becomes `path`.
    fn create(&mut self, path: &Path) -> Result<BufWriter<File>> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        let file = File::create(&tmp).map_err(|e| write_err(path, e))?;
        self.files.push((tmp, path.to_path_buf()));
        Ok(BufWriter::new(file))
    }

    /// Renames every file into place; returns their final names.
    fn commit(mut self) -> Result<Vec<PathBuf>> {
        for (tmp, path) in &self.files {
            std::fs::rename(tmp, path).map_err(|e| write_err(path, e))?;
            self.placed.push(path.clone());
        }
        self.committed = true;
        Ok(std::mem::take(&mut self.placed))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Best effort: a file that cannot be removed now was never the export's to keep.
        for (tmp, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
        for path in &self.placed {
            let _ = std::fs::remove_file(path);
        }
        if let Some(dir) = &self.created_dir {
            // Only if empty: anything else in it is not this export's.
            let _ = std::fs::remove_dir(dir);
        }
    }
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
    let mut staged = Staged::new();
    staged.create_dir(dir)?;
    for name in names {
        let path = dir.join(format!("{name}.{ext}"));
        let mut w = staged.create(&path)?;
        if name == Table::Samples.dir_name() {
            // The big table goes out a segment at a time, so memory stays bounded.
            write_samples(trace, w, opts.format, &path)?;
        } else {
            let df = match name.as_str() {
                "phases" => phases_frame(report),
                "gaps" => gaps_frame(report),
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
            if opts.format == Format::Parquet {
                write_frame(&df, w)
                    .map_err(|e| write_err(&path, e))?
                    .flush()
                    .map_err(|e| write_err(&path, e))?;
            } else {
                write_csv_header(&mut w, &df.names()).map_err(|e| write_err(&path, e))?;
                write_csv_rows(&mut w, &df).map_err(|e| write_err(&path, e))?;
                w.flush().map_err(|e| write_err(&path, e))?;
            }
        }
    }
    Ok(ExportSummary {
        files: staged.commit()?,
        counter_bucket_ns: None,
        events: 0,
        warnings: trace.warnings(),
    })
}

/// Writes the samples table to `w`, one segment at a time (a Parquet row group each).
fn write_samples(trace: &Trace, mut w: BufWriter<File>, format: Format, path: &Path) -> Result<()> {
    let schema: Vec<Field> = trace.schema(Table::Samples);
    let metrics = trace.metric_names();
    let err = |e| write_err(path, e);
    if format == Format::Parquet {
        let mut pw = ParquetWriter::new(w, &schema).map_err(err)?;
        trace.samples_between(i64::MIN, i64::MAX, &metrics, |rows| {
            pw.write(&rows.into_frame(&metrics)).map_err(err)
        })?;
        pw.finish()
            .map_err(err)?
            .flush()
            .map_err(|e| write_err(path, e))?;
    } else {
        let names: Vec<&str> = schema.iter().map(|f| f.name.as_str()).collect();
        write_csv_header(&mut w, &names).map_err(|e| write_err(path, e))?;
        trace.samples_between(i64::MIN, i64::MAX, &metrics, |rows| {
            write_csv_rows(&mut w, &rows.into_frame(&metrics)).map_err(|e| write_err(path, e))
        })?;
        w.flush().map_err(|e| write_err(path, e))?;
    }
    Ok(())
}

/// A CSV field: quoted where it holds a comma, a quote or a line break, and where it is empty
/// (an empty field is a null).
fn csv_field(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    if s.is_empty() || s.contains([',', '"', '\n', '\r']) {
        write!(w, "\"{}\"", s.replace('"', "\"\""))
    } else {
        w.write_all(s.as_bytes())
    }
}

fn write_csv_header(w: &mut impl Write, names: &[&str]) -> std::io::Result<()> {
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        csv_field(w, n)?;
    }
    w.write_all(b"\n")
}

/// The rows of `df` as CSV lines: integers as they are, floats in the shortest text that reads
/// back to the same value and still reads as a float (`1.0`, `1e-30`), nulls as empty fields,
/// empty strings as `""`.
fn write_csv_rows(w: &mut impl Write, df: &Frame) -> std::io::Result<()> {
    for i in 0..df.height() {
        for (j, c) in df.columns.iter().enumerate() {
            if j > 0 {
                w.write_all(b",")?;
            }
            if !c.is_valid(i) {
                continue;
            }
            match &c.values {
                Values::U16(v) => write!(w, "{}", v[i])?,
                Values::U32(v) => write!(w, "{}", v[i])?,
                Values::U64(v) => write!(w, "{}", v[i])?,
                Values::I64(v) => write!(w, "{}", v[i])?,
                Values::F32(v) => write!(w, "{:?}", v[i])?,
                Values::F64(v) => write!(w, "{:?}", v[i])?,
                Values::Str(v) => csv_field(w, &v[i])?,
            }
        }
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// One row per phase and device.
pub fn phases_frame(report: &Report) -> Frame {
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
            total.push(p.total_ns.get());
            p50.push(p.p50_ns.get());
            p99.push(p.p99_ns.get());
            samples.push(d.samples);
            sampled.push(d.sampled_ns.get());
            idle.push(d.idle_ns.get());
            idle_frac.push(d.idle_fraction);
            dropped.push(d.dropped_ns.get());
            act_mean.push(d.activity.mean);
            act_peak.push(d.activity.peak);
            power.push(d.power_w);
            sm.push(d.sm_clock_mhz);
            mem.push(d.mem_clock_mhz);
            util.push(d.nvml_gpu_util_pct);
            gap_count.push(d.gaps.count);
            gap_ns.push(d.gaps.total_ns.get());
            for (i, s) in d.metrics.iter().enumerate().take(report.metrics.len()) {
                metric_mean[i].push(s.mean);
                metric_peak[i].push(s.peak);
            }
        }
    }
    let mut cols = vec![
        Column::strings("phase", path),
        Column::new("device", device_column(&device)),
        Column::new("count", count),
        Column::new("total_ns", total),
        Column::new("p50_ns", p50),
        Column::new("p99_ns", p99),
        Column::new("samples", samples),
        Column::new("sampled_ns", sampled),
        Column::new("idle_ns", idle),
        Column::optional("idle_fraction", idle_frac),
        Column::new("dropped_ns", dropped),
        Column::optional("activity_mean", act_mean),
        Column::optional("activity_peak", act_peak),
    ];
    for (i, m) in report.metrics.iter().enumerate() {
        cols.push(Column::optional(
            &format!("{m}.mean"),
            std::mem::take(&mut metric_mean[i]),
        ));
        cols.push(Column::optional(
            &format!("{m}.peak"),
            std::mem::take(&mut metric_peak[i]),
        ));
    }
    cols.extend([
        Column::optional("power_w", power),
        Column::optional("sm_clock_mhz", sm),
        Column::optional("mem_clock_mhz", mem),
        Column::optional("nvml_gpu_util_pct", util),
        Column::new("gap_count", gap_count),
        Column::new("gap_ns", gap_ns),
    ]);
    Frame::new(cols)
}

/// One row per gap piece: each idle stretch cut where phases begin and end, every piece in one
/// place, with the stretch it belongs to (`stretch_start_ns`, `stretch_end_ns`). A stretch
/// inside one place is one row; the rows of a place add up to its gap time.
pub fn gaps_frame(report: &Report) -> Frame {
    let rows: Vec<(&crate::report::GapRow, &crate::report::GapPiece)> = report
        .gaps
        .iter()
        .flat_map(|g| g.pieces.iter().map(move |p| (g, p)))
        .collect();
    Frame::new(vec![
        Column::new(
            "device",
            device_column(&rows.iter().map(|(g, _)| g.device).collect::<Vec<_>>()),
        ),
        Column::new("start_ns", rows.iter().map(|(_, p)| p.start_ns).collect()),
        Column::new("end_ns", rows.iter().map(|(_, p)| p.end_ns).collect()),
        Column::new(
            "duration_ns",
            rows.iter().map(|(_, p)| p.duration_ns.get()).collect(),
        ),
        Column::strings("place", rows.iter().map(|(_, p)| &*p.place)),
        Column::optional(
            "no_kernel_ns",
            rows.iter().map(|(_, p)| p.no_kernel_ns.map(Nanos::get)),
        ),
        Column::optional(
            "kernel_resident_ns",
            rows.iter()
                .map(|(_, p)| p.kernel_resident_ns.map(Nanos::get)),
        ),
        Column::optional(
            "host_in_sync_ns",
            rows.iter().map(|(_, p)| p.host.map(|h| h.in_sync_ns.get())),
        ),
        Column::optional(
            "host_in_launch_ns",
            rows.iter()
                .map(|(_, p)| p.host.map(|h| h.in_launch_ns.get())),
        ),
        Column::new(
            "stretch_start_ns",
            rows.iter().map(|(g, _)| g.start_ns).collect(),
        ),
        Column::new(
            "stretch_end_ns",
            rows.iter().map(|(g, _)| g.end_ns).collect(),
        ),
    ])
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
        // In i128: a recording whose manifest bounds nothing (`created_unix_ns` of 0 or less)
        // may hold times a whole i64 apart.
        (i128::from(t_ns) - i128::from(self.t0_ns)) as f64 / 1000.0
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

/// A process per GPU with its name and threads: counters, idle gaps, drops.
fn write_gpu_tracks(w: &mut EventWriter, report: &Report) -> Result<()> {
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
    Ok(())
}

/// NVML's readings as counters on each GPU's counter track.
fn write_nvml(w: &mut EventWriter, trace: &Trace) -> Result<()> {
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
    Ok(())
}

/// NVTX slices on the host threads that emitted them, kernel slices on one thread per stream.
fn write_nvtx_and_kernels(
    w: &mut EventWriter,
    nvtx: &[cufall_trace::model::NvtxRange],
    kernels: &[cufall_trace::model::KernelRecord],
) -> Result<()> {
    // NVTX slices on the host threads that emitted them.
    let mut hosts = BTreeSet::new();
    for r in nvtx {
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
    for k in kernels {
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
    Ok(())
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
    let mut staged = Staged::new();
    let mut w = EventWriter {
        out: staged.create(path)?,
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

    write_gpu_tracks(&mut w, report)?;

    // Counters: the samples, then NVML's slower readings on the same GPU tracks.
    let bucket_ns = write_counters(trace, report, &mut w, opts.max_counter_points)?;
    write_nvml(&mut w, trace)?;

    write_nvtx_and_kernels(&mut w, &nvtx, &kernels)?;
    // One slice per piece, so that each sits under its place; the stretch is in the args.
    for g in &report.gaps {
        for p in &g.pieces {
            w.slice(
                &format!("idle gap: {}", p.place),
                "gap",
                (gpu_pid(g.device), GAP_TID),
                (p.start_ns, p.end_ns),
                json!({"no_kernel_us": p.no_kernel_ns.map(|v| v.as_f64() / 1000.0),
                       "kernel_resident_us": p.kernel_resident_ns.map(|v| v.as_f64() / 1000.0),
                       "stretch_us": g.duration_ns.as_f64() / 1000.0,
                       "stretch_places": &*g.place}),
            )?;
        }
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
    let events = w.events;
    drop(w);
    Ok(ExportSummary {
        files: staged.commit()?,
        counter_bucket_ns: bucket_ns.map(Nanos),
        events,
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
    let mut names: Vec<String> = report.metrics.clone();
    let columns: Vec<&str> = report.metrics.iter().map(String::as_str).collect();
    let eval = match &report.activity {
        Some(a) => {
            names.push(format!("activity ({})", a.label()));
            a.eval(&columns)
                .ok_or_else(|| AnalysisError::ActivityNotRecorded {
                    path: trace.path().to_path_buf(),
                    activity: a.label(),
                })?
        }
        // No GPU counters: nothing to draw from the samples table.
        None => return Ok(None),
    };
    // The values of row `i`: every metric, then the activity.
    let row = |rows: &cufall_trace::SampleColumns, i: usize, out: &mut Vec<f64>| {
        out.clear();
        out.extend(rows.values.iter().map(|c| f64::from(c[i])));
        out.push(eval.value(&rows.values, i));
    };
    let mut vals = Vec::with_capacity(names.len());
    // (device, time) -> values, in order.
    let mut points: BTreeMap<(DeviceId, i64), (i64, Vec<f64>)> = BTreeMap::new();
    let bucket = if max_per_device <= max_points.max(1) as u64 {
        trace.samples_between(i64::MIN, i64::MAX, &columns, |rows| {
            for i in 0..rows.len() {
                row(&rows, i, &mut vals);
                let t = rows.start_ns[i];
                let d = DeviceId(u32::from(rows.device[i]));
                points.insert((d, t), (t, vals.clone()));
            }
            Ok::<(), AnalysisError>(())
        })?;
        None
    } else {
        // Equal time buckets: the mean of the samples starting in each.
        let span = (report.end_ns - report.start_ns).max(1);
        let width = (span + max_points as i64 - 1) / max_points.max(1) as i64;
        let mut sums: BTreeMap<(DeviceId, i64), (i64, u64, Vec<f64>)> = BTreeMap::new();
        trace.samples_between(i64::MIN, i64::MAX, &columns, |rows| {
            for i in 0..rows.len() {
                row(&rows, i, &mut vals);
                let t = rows.start_ns[i];
                // Floor division, like the time axis: a sample before the start falls in a
                // bucket of its own rather than in the first one.
                let b = (t - report.start_ns).div_euclid(width);
                let e = sums
                    .entry((DeviceId(u32::from(rows.device[i])), b))
                    .or_insert_with(|| (t, 0, vec![0.0; names.len()]));
                e.0 = e.0.min(t);
                e.1 += 1;
                for (acc, v) in e.2.iter_mut().zip(&vals) {
                    *acc += v;
                }
            }
            Ok::<(), AnalysisError>(())
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_tells_nulls_from_empty_strings_and_floats_from_integers() {
        let df = Frame::new(vec![
            Column::strings("name", ["plain", "", "a,b", "say \"hi\"", "two\nlines"]),
            Column::optional("n", [Some(1u32), None, Some(3), Some(4), Some(5)]),
            Column::new("x", vec![1.0f64, 0.5, 1e-30, f64::NAN, -2.0]),
        ]);
        let mut out = Vec::new();
        write_csv_header(&mut out, &df.names()).unwrap();
        write_csv_rows(&mut out, &df).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "name,n,x\nplain,1,1.0\n\"\",,0.5\n\"a,b\",3,1e-30\n\"say \"\"hi\"\"\",4,NaN\n\"two\nlines\",5,-2.0\n"
        );
    }
}
