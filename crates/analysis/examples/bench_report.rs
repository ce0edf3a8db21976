//! Benchmark of `cufall report` on a large synthetic trace.
//!
//! ```text
//! cargo run --release -p cufall-analysis --example bench_report -- generate /tmp/big.cufall
//! cargo run --release -p cufall-analysis --example bench_report -- report /tmp/big.cufall
//! ```
//!
//! `generate` writes the synthetic trace of `cufall_testkit::bench` (its `Report` kind; default:
//! 60 s, 8 GPUs, 100 kHz, 4 metrics: about 48 million samples, 190 million values): 10 ms steps of draft (4 ms), an idle
//! gap (0.5 ms), verify (4.5 ms) and an idle gap (1 ms), with NVTX ranges, kernels and NVML,
//! one segment per table per second of data as the recorder writes them.
//! `report` times the report in a fresh process and prints wall time and peak RSS (VmHWM).
//! Options: `--seconds N --gpus N --rate-hz N --kernels-per-range N` (the last splits each range's
//! one kernel into N back-to-back kernels of 20 templated names, for a trace heavy in kernels). `breakdown PATH [--window N]` times the samples
//! scan alone; `export PATH parquet|csv|perfetto OUT` times an export.

use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::bench::{BenchKind, BenchTrace, write_bench_trace};
use cufall_trace::model::Nanos;
use cufall_trace::{Trace, WriterOptions};
use std::path::Path;
use std::time::Instant;

fn arg(args: &[String], name: &str, default: i64) -> i64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Writes the trace (`cufall_testkit::bench`, the report's kind) and says what it wrote.
fn generate(
    path: &str,
    seconds: i64,
    gpus: u32,
    rate_hz: i64,
    kernels_per_range: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    let spec = BenchTrace {
        seconds,
        gpus,
        kind: BenchKind::Report {
            rate_hz,
            kernels_per_range,
        },
    };
    let opts = WriterOptions {
        overwrite: true,
        ..Default::default()
    };
    let stats = write_bench_trace(Path::new(path), &spec, opts)?;
    println!(
        "wrote {path}: {} samples ({} values), {} segments, {:.1} MB",
        stats.samples,
        stats.samples * 4,
        stats.segments,
        stats.bytes as f64 / 1e6
    );
    Ok(())
}

/// Times the report's passes separately (each in this process, one after the other).
fn breakdown(path: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    // Time the passes separately (each in this process, one after the other).
    use cufall_analysis::{phases::Phases, report::resolve_activity, samples};
    let trace = Trace::open(path)?;
    let t = Instant::now();
    let activity = resolve_activity(&trace, &ReportOptions::default())?
        .ok_or("the trace has no GPU counters")?;
    let phases = Phases::build(&trace.nvtx()?);
    println!("nvtx + phases: {:.2} s", t.elapsed().as_secs_f64());
    let metrics: Vec<String> = trace.metric_names().iter().map(|m| m.to_string()).collect();
    let t = Instant::now();
    let windows = samples::time_windows(
        &trace,
        arg(args, "--window", samples::SAMPLES_PER_WINDOW as i64) as u64,
    )?;
    let spec = samples::ScanSpec {
        phases: &phases,
        activity: &activity,
        metrics: &metrics,
        min_gap_ns: Nanos(50_000),
        hole_ns: Nanos(5_000),
        samples_per_window: arg(args, "--window", samples::SAMPLES_PER_WINDOW as i64) as u64,
    };
    let (totals, frags) = samples::scan_samples(&trace, &spec)?;
    println!(
        "scan_samples: {:.2} s ({} windows, {} cells, {} fragments)",
        t.elapsed().as_secs_f64(),
        windows.len(),
        totals.len(),
        frags.len()
    );
    let t = Instant::now();
    let k = trace.kernels()?;
    println!("kernels: {:.2} s ({})", t.elapsed().as_secs_f64(), k.len());
    if let Some(kb) = vm_hwm_kb() {
        println!("peak RSS (VmHWM): {:.0} MB", kb as f64 / 1024.0);
    }
    Ok(())
}

/// `bench_report export PATH parquet|csv|perfetto OUT`: times an export.
fn export(path: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    use cufall_analysis::export::{self, ExportOptions, Format};
    let format = match args.get(3).map(String::as_str) {
        Some("parquet") => Format::Parquet,
        Some("csv") => Format::Csv,
        _ => Format::Perfetto,
    };
    let t = Instant::now();
    let trace = Trace::open(path)?;
    let summary = export::export(
        &trace,
        &ExportOptions {
            format,
            output: args.get(4).map(std::path::PathBuf::from),
            force: true,
            max_counter_points: export::DEFAULT_MAX_COUNTER_POINTS,
            report: ReportOptions::default(),
        },
    )?;
    println!(
        "export {:?}: {} file(s), {} events, wall time {:.2} s",
        format,
        summary.files.len(),
        summary.events,
        t.elapsed().as_secs_f64()
    );
    if let Some(kb) = vm_hwm_kb() {
        println!("peak RSS (VmHWM): {:.0} MB", kb as f64 / 1024.0);
    }
    if format == Format::Parquet {
        let file = summary
            .files
            .iter()
            .find(|f| f.ends_with("samples.parquet"))
            .ok_or("no samples.parquet")?;
        let bytes = std::fs::read(file)?;
        let rows = cufall_trace::parquet::read_frame(bytes.into(), Some(&["start_ns"]))?.height();
        println!("samples.parquet read back: {rows} rows");
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(cmd), Some(path)) = (args.get(1), args.get(2)) else {
        eprintln!(
            "usage: bench_report generate|report PATH [--seconds N --gpus N --rate-hz N --kernels-per-range N]"
        );
        std::process::exit(2);
    };
    match cmd.as_str() {
        "generate" => {
            let t = Instant::now();
            generate(
                path,
                arg(&args, "--seconds", 60),
                arg(&args, "--gpus", 8) as u32,
                arg(&args, "--rate-hz", 100_000),
                arg(&args, "--kernels-per-range", 1).max(1),
            )?;
            println!("generated in {:.1} s", t.elapsed().as_secs_f64());
        }
        "breakdown" => breakdown(path, &args)?,
        "export" => export(path, &args)?,
        "report" => {
            let t = Instant::now();
            let trace = Trace::open(path)?;
            let report = build_report(&trace, &ReportOptions::default())?;
            let wall = t.elapsed().as_secs_f64();
            let samples: u64 = report.whole_run.devices.iter().map(|d| d.samples).sum();
            let gaps: u64 = report.gap_groups.iter().map(|g| g.totals.count).sum();
            println!(
                "report: {samples} samples ({} values), {} phases, {gaps} gaps, {} gap places",
                samples * report.metrics.len() as u64,
                report.phases.len(),
                report.gap_groups.len()
            );
            for g in report.gap_groups.iter().take(4) {
                println!(
                    "  {}: {} gaps, {} ns",
                    g.place, g.totals.count, g.totals.total_ns
                );
            }
            println!("wall time: {wall:.2} s");
            match vm_hwm_kb() {
                Some(kb) => println!("peak RSS (VmHWM): {:.0} MB", kb as f64 / 1024.0),
                None => println!("peak RSS: unavailable (/proc/self/status unreadable)"),
            }
        }
        other => {
            eprintln!("unknown command `{other}`: use generate or report");
            std::process::exit(2);
        }
    }
    Ok(())
}
