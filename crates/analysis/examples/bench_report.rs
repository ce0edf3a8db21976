//! Benchmark of `cufall report` on a large synthetic trace.
//!
//! ```text
//! cargo run --release -p cufall-analysis --example bench_report -- generate /tmp/big.cufall
//! cargo run --release -p cufall-analysis --example bench_report -- report /tmp/big.cufall
//! ```
//!
//! `generate` writes a synthetic trace (default: 60 s, 8 GPUs, 100 kHz, 4 metrics: about 48
//! million samples, 190 million values) with TraceWriter: 10 ms steps of draft (4 ms), an idle
//! gap (0.5 ms), verify (4.5 ms) and an idle gap (1 ms), with NVTX ranges, kernels and NVML,
//! one segment per table per second of data as the recorder writes them.
//! `report` times the report in a fresh process and prints wall time and peak RSS (VmHWM).
//! Options: `--seconds N --gpus N --rate-hz N --kernels-per-range N` (the last splits each range's
//! one kernel into N back-to-back kernels of 20 templated names, for a trace heavy in kernels). `breakdown PATH [--window N]` times the samples
//! scan alone; `export PATH parquet|csv|perfetto OUT` times an export.

use cufall_analysis::{ReportOptions, build_report};
use cufall_trace::model::{
    ActivityKind, DeviceId, DeviceInfo, HeatmapSpec, KernelRecord, Manifest, MetricInfo, NvmlRow,
    NvtxRange, RangeKind, SampleBatch, SamplingInfo,
};
use cufall_trace::{Trace, TraceWriter, WriterOptions};
use std::time::Instant;

const T0: i64 = 1_764_000_000_000_000_000;
const STEP_NS: i64 = 10_000_000;

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

/// A cheap, fixed pseudo-random mix (splitmix64).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Busy in [0, 4 ms) and [4.5 ms, 9 ms) of every step.
fn busy(t_in_step: i64) -> bool {
    t_in_step < 4_000_000 || (4_500_000..9_000_000).contains(&t_in_step)
}

fn generate(
    path: &str,
    seconds: i64,
    gpus: u32,
    rate_hz: i64,
    per_range: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    let interval = 1_000_000_000 / rate_hz;
    let mut m = Manifest::new("bench", T0);
    m.devices = (0..gpus)
        .map(|i| DeviceInfo {
            id: DeviceId(i),
            name: "NVIDIA H200".into(),
            chip: "GH100".into(),
            uuid: String::new(),
            pci_bus_id: String::new(),
            sm_count: Some(132),
            memory_total_bytes: None,
        })
        .collect();
    let names = [
        "sm__pipe_tensor_cycles_active.avg",
        "gr__cycles_elapsed.max",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__cycles_active.avg",
    ];
    m.sampling = Some(SamplingInfo {
        interval_ns: interval,
        metrics: names
            .iter()
            .map(|n| MetricInfo {
                name: n.to_string(),
                unit: String::new(),
                description: String::new(),
            })
            .collect(),
        source: "synthetic".into(),
    });
    m.heatmaps = vec![HeatmapSpec {
        metric: names[0].into(),
        denominator: Some(names[1].into()),
        full_scale: Some(1.0),
    }];
    let opts = WriterOptions {
        overwrite: true,
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, m, opts)?;
    let per_batch = rate_hz / 10; // 100 ms of samples per batch
    let total = seconds * rate_hz;
    let mut i0 = 0;
    while i0 < total {
        let n = per_batch.min(total - i0);
        for d in 0..gpus {
            let mut b = SampleBatch::new(DeviceId(d), names.len());
            for i in i0..i0 + n {
                // Timestamps jitter by up to 63 ns (consecutive samples stay contiguous) and
                // values are noisy, as in real recordings, so the Parquet columns do not
                // compress to nothing.
                let s = T0 + i * interval + (mix(i as u64) % 64) as i64;
                let e = T0 + (i + 1) * interval + (mix(i as u64 + 1) % 64) as i64;
                let on = busy((s - T0) % STEP_NS);
                let r = mix((i as u64) << 8 | u64::from(d));
                let u = |k: u32| ((r >> (k * 16)) & 0xffff) as f64 / 65536.0;
                let elapsed = 1750.0 + 10.0 * u(0);
                let (tensor, dram, sm) = if on {
                    (
                        (0.55 + 0.1 * u(1)) * elapsed,
                        60.0 + 20.0 * u(2),
                        0.8 + 0.2 * u(3),
                    )
                } else {
                    (0.02 * u(1) * elapsed, 2.0 * u(2), 0.05 * u(3))
                };
                b.push(s, e, &[tensor, elapsed, dram, sm]);
            }
            w.append_samples(&b)?;
        }
        let t_lo = T0 + i0 * interval;
        let t_hi = T0 + (i0 + n) * interval;
        let mut nvtx = Vec::new();
        let mut kernels = Vec::new();
        let mut nvml = Vec::new();
        let mut step = t_lo;
        while step < t_hi {
            for (a, b, name, depth) in [
                (0, STEP_NS, "step", 0),
                (0, 4_000_000, "draft", 1),
                (4_500_000, 9_000_000, "verify", 1),
            ] {
                nvtx.push(NvtxRange {
                    start_ns: step + a,
                    end_ns: step + b,
                    name: name.into(),
                    domain: String::new(),
                    kind: RangeKind::PushPop,
                    depth,
                    pid: 42,
                    tid: 42,
                    ..Default::default()
                });
            }
            for d in 0..gpus {
                for (a, b, name) in [
                    (0, 4_000_000, "draft_gemm"),
                    (4_500_000, 9_000_000, "verify_gemm"),
                ] {
                    let len = (b - a) / per_range;
                    for j in 0..per_range {
                        kernels.push(KernelRecord {
                            device: DeviceId(d),
                            start_ns: step + a + j * len,
                            end_ns: step + a + (j + 1) * len,
                            kind: ActivityKind::Kernel,
                            name: if per_range == 1 {
                                name.into()
                            } else {
                                format!("bench::{name}_{}<float, {}>", j % 20, j % 3)
                            },
                            stream: 7,
                            correlation_id: 0,
                            bytes: None,
                            pid: 42,
                            ..Default::default()
                        });
                    }
                }
                nvml.push(NvmlRow {
                    device: DeviceId(d),
                    t_ns: step,
                    power_w: Some(450.0),
                    sm_clock_mhz: Some(1755),
                    mem_clock_mhz: Some(2619),
                    gpu_util_pct: Some(100),
                    ..Default::default()
                });
            }
            step += STEP_NS;
        }
        w.append_nvtx(&nvtx)?;
        w.append_kernels(&kernels)?;
        w.append_nvml(&nvml)?;
        i0 += n;
        // Like the recorder: one segment per table per second of data.
        if i0 % rate_hz == 0 {
            w.flush()?;
        }
    }
    let stats = w.finish(T0 + total * interval)?;
    println!(
        "wrote {path}: {} samples ({} values), {} segments, {:.1} MB",
        stats.samples,
        stats.samples * names.len() as u64,
        stats.segments,
        stats.bytes as f64 / 1e6
    );
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
        "breakdown" => {
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
                arg(&args, "--window", samples::SAMPLES_PER_WINDOW as i64) as u64,
            )?;
            let spec = samples::ScanSpec {
                phases: &phases,
                activity: &activity,
                metrics: &metrics,
                min_gap_ns: 50_000,
                hole_ns: 5_000,
                samples_per_window: arg(&args, "--window", samples::SAMPLES_PER_WINDOW as i64)
                    as u64,
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
        }
        "export" => {
            // bench_report export PATH parquet|csv|perfetto OUT
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
                let rows =
                    cufall_trace::parquet::read_frame(bytes.into(), Some(&["start_ns"]))?.height();
                println!("samples.parquet read back: {rows} rows");
            }
        }
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
