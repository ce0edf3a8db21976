//! The large synthetic trace of the benchmarks (`cufall-analysis`'s `bench_report`,
//! `cufall-gui`'s `bench_gui`): a training-like loop of 10 ms steps, each a draft phase
//! (0–4 ms), an idle gap (0.5 ms), a verify phase (4.5–9 ms) and an idle gap (1 ms), on GPUs
//! named like H200s, with NVTX ranges for the phases, kernels inside them and NVML every step.
//! The values are made up; nothing here is a measurement of a GPU.
//!
//! ```text
//! step  |draft 4 ms          |0.5|verify 4.5 ms          |1 ms|
//! GPU   |busy                |idle|busy                  |idle|
//! ```
//!
//! Each benchmark keeps the trace its published figures were measured on, as a [`BenchKind`]:
//! the report's has cycle counters and noisy, jittered samples (so the Parquet columns do not
//! compress to nothing) and a `step` range over each step; the window's has percentage counters
//! with units, a heat map scaled to 100 % and a choice of how many counters. The schedule,
//! devices, manifest and writing loop are this one function.

use cufall_trace::model::{
    ActivityKind, DeviceId, DeviceInfo, FrameKind, Gil, HeatmapSpec, HostSample, HostState,
    KernelRecord, Manifest, MetricInfo, NvmlRow, NvtxRange, RangeKind, SampleBatch, SamplingInfo,
    StackFrame,
};
use cufall_trace::{TraceWriter, WriteStats, WriterOptions};
use std::path::Path;

/// The recording's start (late 2025 on the Unix clock).
pub const T0_NS: i64 = 1_764_000_000_000_000_000;
/// One step of the loop.
pub const STEP_NS: i64 = 10_000_000;

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchTrace {
    pub seconds: i64,
    pub gpus: u32,
    pub kind: BenchKind,
}

/// Which benchmark's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchKind {
    /// `bench_report`'s: 4 counters (tensor-pipe cycles, elapsed cycles, DRAM %, SM cycles) at
    /// `rate_hz`, timestamps jittered by up to 63 ns and noisy values, written 100 ms at a time
    /// with a segment per table per second of data; NVTX `step` ranges over `draft` and `verify`;
    /// each range's time split into `kernels_per_range` back-to-back kernels (20 templated
    /// names when more than one).
    Report {
        rate_hz: i64,
        kernels_per_range: i64,
    },
    /// `bench_gui`'s: the first `metrics` (1 to 4) of tensor-pipe %, DRAM %, SM cycles and
    /// elapsed cycles, every `interval_ns`, written a second at a time (segments as the writer's
    /// flush interval has them); `draft` and `verify` ranges, one kernel inside each; with
    /// `host_threads` above 0, host stacks of that many threads of one process sampled every
    /// millisecond ([`host_stacks`]).
    Gui {
        interval_ns: i64,
        metrics: usize,
        host_threads: u32,
    },
}

impl BenchKind {
    fn metric_names(self) -> Vec<&'static str> {
        match self {
            BenchKind::Report { .. } => vec![
                "sm__pipe_tensor_cycles_active.avg",
                "gr__cycles_elapsed.max",
                "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                "sm__cycles_active.avg",
            ],
            BenchKind::Gui { metrics, .. } => [
                "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                "sm__cycles_active.avg",
                "gr__cycles_elapsed.max",
            ][..metrics.clamp(1, 4)]
                .to_vec(),
        }
    }

    fn interval_ns(self) -> i64 {
        match self {
            BenchKind::Report { rate_hz, .. } => 1_000_000_000 / rate_hz.max(1),
            BenchKind::Gui { interval_ns, .. } => interval_ns.max(1),
        }
    }

    /// Samples per device written at a time, and chunks per segment (`None`: as the writer's
    /// flush interval falls).
    fn chunking(self) -> (i64, Option<i64>) {
        match self {
            BenchKind::Report { rate_hz, .. } => ((rate_hz / 10).max(1), Some(rate_hz.max(1))),
            BenchKind::Gui { .. } => (1_000_000_000 / self.interval_ns(), None),
        }
    }
}

/// A cheap, fixed pseudo-random mix (splitmix64).
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Busy in [0, 4 ms) and [4.5 ms, 9 ms) of every step.
pub fn busy(t_in_step: i64) -> bool {
    t_in_step < 4_000_000 || (4_500_000..9_000_000).contains(&t_in_step)
}

/// The manifest: `gpus` H200s and the kind's counters.
fn manifest(spec: &BenchTrace) -> Manifest {
    let names = spec.kind.metric_names();
    let mut m = Manifest::new("bench", T0_NS);
    m.devices = (0..spec.gpus)
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
    let report = matches!(spec.kind, BenchKind::Report { .. });
    let unit = |n: &str| match (report, n.contains("pct")) {
        (true, _) => String::new(),
        (false, true) => "%".into(),
        (false, false) => "cycle".into(),
    };
    m.sampling = Some(SamplingInfo {
        interval_ns: spec.kind.interval_ns(),
        metrics: names
            .iter()
            .map(|n| MetricInfo {
                name: n.to_string(),
                unit: unit(n),
                description: String::new(),
            })
            .collect(),
        source: "synthetic".into(),
    });
    m.heatmaps = vec![if report {
        HeatmapSpec {
            metric: names[0].into(),
            denominator: Some(names[1].into()),
            full_scale: Some(1.0),
        }
    } else {
        HeatmapSpec {
            metric: names[0].into(),
            denominator: None,
            full_scale: Some(100.0),
        }
    }];
    if !report {
        m.nvml_interval_ns = Some(STEP_NS);
    }
    m
}

/// Sample `j` of chunk `chunk` of GPU `dev`: its values into `row`, and its start and end.
fn sample(kind: BenchKind, dev: u32, chunk: i64, j: i64, row: &mut [f64]) -> (i64, i64) {
    let interval = kind.interval_ns();
    match kind {
        BenchKind::Report { .. } => {
            let (per_chunk, _) = kind.chunking();
            let i = chunk * per_chunk + j;
            let s = T0_NS + i * interval + (mix(i as u64) % 64) as i64;
            let e = T0_NS + (i + 1) * interval + (mix(i as u64 + 1) % 64) as i64;
            let on = busy((s - T0_NS) % STEP_NS);
            let r = mix((i as u64) << 8 | u64::from(dev));
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
            row.copy_from_slice(&[tensor, elapsed, dram, sm]);
            (s, e)
        }
        BenchKind::Gui { .. } => {
            let start = T0_NS + chunk * 1_000_000_000 + j * interval;
            let r = mix((start as u64) ^ u64::from(dev)) % 1000;
            let on = busy((start - T0_NS) % STEP_NS);
            let values = [
                if on {
                    60.0 + (r % 300) as f64 / 10.0
                } else {
                    (r % 10) as f64 / 10.0
                },
                if on {
                    20.0 + (r % 500) as f64 / 10.0
                } else {
                    0.5
                },
                if on { 18_000.0 } else { 200.0 },
                19_800.0,
            ];
            let n = row.len();
            row.copy_from_slice(&values[..n]);
            (start, start + interval)
        }
    }
}

/// The NVTX ranges, kernels and NVML rows of the step starting at `step`.
fn step_rows(
    spec: &BenchTrace,
    step: i64,
    nvtx: &mut Vec<NvtxRange>,
    kernels: &mut Vec<KernelRecord>,
    nvml: &mut Vec<NvmlRow>,
) {
    const PHASES: [(&str, i64, i64); 2] =
        [("draft", 0, 4_000_000), ("verify", 4_500_000, 9_000_000)];
    let range = |name: &str, a: i64, b: i64, depth: u32, who: u32| NvtxRange {
        start_ns: step + a,
        end_ns: step + b,
        name: name.into(),
        domain: String::new(),
        kind: RangeKind::PushPop,
        depth,
        pid: who,
        tid: who,
        ..Default::default()
    };
    match spec.kind {
        BenchKind::Report {
            kernels_per_range, ..
        } => {
            let per_range = kernels_per_range.max(1);
            nvtx.push(range("step", 0, STEP_NS, 0, 42));
            for (name, a, b) in PHASES {
                nvtx.push(range(name, a, b, 1, 42));
            }
            for d in 0..spec.gpus {
                for (name, a, b) in [
                    ("draft_gemm", 0, 4_000_000),
                    ("verify_gemm", 4_500_000, 9_000_000),
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
        }
        BenchKind::Gui { .. } => {
            for (name, a, b) in PHASES {
                nvtx.push(range(name, a, b, 0, 1));
                for d in 0..spec.gpus {
                    kernels.push(KernelRecord {
                        device: DeviceId(d),
                        start_ns: step + a + 10_000,
                        end_ns: step + b - 10_000,
                        kind: ActivityKind::Kernel,
                        name: format!("{name}_kernel"),
                        ..Default::default()
                    });
                }
            }
            for d in 0..spec.gpus {
                nvml.push(NvmlRow {
                    device: DeviceId(d),
                    t_ns: step,
                    power_w: Some(400.0 + (mix(step as u64) % 100) as f32),
                    sm_clock_mhz: Some(1980),
                    gpu_util_pct: Some(100),
                    ..Default::default()
                });
            }
        }
    }
}

/// Writes the trace at `path` (with `options`: whether to replace one there, when to flush)
/// and returns what the writer wrote.
pub fn write_bench_trace(
    path: &Path,
    spec: &BenchTrace,
    options: WriterOptions,
) -> cufall_trace::Result<WriteStats> {
    let kind = spec.kind;
    let metrics = kind.metric_names().len();
    let interval = kind.interval_ns();
    let mut w = TraceWriter::create(path, manifest(spec), options)?;
    let host_threads = match kind {
        BenchKind::Gui { host_threads, .. } => host_threads,
        BenchKind::Report { .. } => 0,
    };
    if host_threads > 0 {
        w.append_stacks(&host_stacks())?;
    }
    let (per_chunk, chunks_per_segment) = kind.chunking();
    // The samples of each chunk, and where the data ends.
    let (chunks, end_ns) = match kind {
        BenchKind::Report { rate_hz, .. } => {
            let total = spec.seconds * rate_hz;
            (
                (total + per_chunk - 1) / per_chunk,
                T0_NS + total * interval,
            )
        }
        BenchKind::Gui { .. } => (spec.seconds, T0_NS + spec.seconds * 1_000_000_000),
    };
    let mut row = vec![0f64; metrics];
    let mut written = 0;
    for chunk in 0..chunks {
        let n = match kind {
            BenchKind::Report { rate_hz, .. } => per_chunk.min(spec.seconds * rate_hz - written),
            BenchKind::Gui { .. } => per_chunk,
        };
        for d in 0..spec.gpus {
            let mut b = SampleBatch::new(DeviceId(d), metrics);
            for j in 0..n {
                let (s, e) = sample(kind, d, chunk, j, &mut row);
                b.push(s, e, &row);
            }
            w.append_samples(&b)?;
        }
        // The steps of the chunk's time.
        let (t_lo, t_hi) = match kind {
            BenchKind::Report { .. } => {
                (T0_NS + written * interval, T0_NS + (written + n) * interval)
            }
            BenchKind::Gui { .. } => {
                let t = T0_NS + chunk * 1_000_000_000;
                (t, t + 1_000_000_000)
            }
        };
        let (mut nvtx, mut kernels, mut nvml) = (Vec::new(), Vec::new(), Vec::new());
        let mut step = t_lo;
        while step < t_hi {
            step_rows(spec, step, &mut nvtx, &mut kernels, &mut nvml);
            step += STEP_NS;
        }
        w.append_nvtx(&nvtx)?;
        w.append_kernels(&kernels)?;
        w.append_nvml(&nvml)?;
        if host_threads > 0 {
            w.append_host_samples(&host_samples(host_threads, t_lo, t_hi))?;
        }
        written += n;
        match chunks_per_segment {
            // Like the recorder: one segment per table per second of data.
            Some(per_segment) if written % per_segment == 0 => w.flush()?,
            Some(_) => {}
            None => w.flush_if_due()?,
        }
    }
    w.finish(end_ns)
}

/// The process whose threads the host samples are of.
pub const HOST_PID: u32 = 4000;
/// The host samples' interval.
pub const HOST_INTERVAL_NS: i64 = 1_000_000;

/// The stacks of the host samples, interned: 1 `main > run_step > draft > … > launch` (16 frames,
/// Python over native), 2 the same through `verify`, 3 `main > run_step > synchronize >
/// cudaStreamSynchronize` (waiting for the GPU), 4 a worker `thread_main > queue.get > futex`.
pub fn host_stacks() -> Vec<StackFrame> {
    let frame = |stack_id: u64, depth: u32, function: &str, native: bool| StackFrame {
        stack_id,
        depth,
        function: function.into(),
        file: if native {
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05".into()
        } else {
            "engine.py".into()
        },
        line: (!native).then_some(depth + 10),
        module: String::new(),
        kind: if native {
            FrameKind::Native
        } else {
            FrameKind::Python
        },
    };
    let mut out = Vec::new();
    // Innermost first (depth 0 is the innermost frame).
    for (id, phase) in [(1, "draft"), (2, "verify")] {
        let names: Vec<String> = [
            "0x4c13f6",
            "cuLaunchKernel",
            "cudaLaunchKernel",
            "launch",
            "forward_layer",
            "attention",
            "forward_layer",
            "decoder",
            "forward",
            "__call__",
            "model_step",
            phase,
            "run_step",
            "loop",
            "main",
            "<module>",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (d, n) in names.iter().enumerate() {
            out.push(frame(id, d as u32, n, d < 3));
        }
    }
    for (d, n) in [
        "cudaStreamSynchronize",
        "synchronize",
        "run_step",
        "loop",
        "main",
        "<module>",
    ]
    .iter()
    .enumerate()
    {
        out.push(frame(3, d as u32, n, d == 0));
    }
    for (d, n) in ["futex_wait", "get", "thread_main"].iter().enumerate() {
        out.push(frame(4, d as u32, n, d == 0));
    }
    out
}

/// Every thread's samples in `[t_lo, t_hi)`, one a millisecond: thread 0 (the main thread)
/// follows the steps (draft, verify, waiting in the gaps), the others wait in a queue.
pub fn host_samples(threads: u32, t_lo: i64, t_hi: i64) -> Vec<HostSample> {
    let mut out = Vec::new();
    for th in 0..threads {
        let tid = HOST_PID + th;
        let mut t = t_lo;
        while t < t_hi {
            let in_step = (t - T0_NS).rem_euclid(STEP_NS);
            let (stack_id, idle) = match th {
                0 if !busy(in_step) => (3, true),
                0 if in_step < 4_000_000 => (1, false),
                0 => (2, false),
                _ => (4, true),
            };
            out.push(HostSample {
                t_ns: t + i64::from(th) * 7_000,
                pid: HOST_PID,
                tid,
                thread_name: if th == 0 {
                    "MainThread".into()
                } else {
                    format!("worker-{th}")
                },
                state: if idle {
                    HostState::Idle
                } else {
                    HostState::Running
                },
                gil: Gil::Unknown,
                stack_id,
            });
            t += HOST_INTERVAL_NS;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(spec: &BenchTrace) -> (WriteStats, cufall_trace::Trace, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bench.cufall");
        let stats = write_bench_trace(&path, spec, WriterOptions::default()).expect("write");
        let trace = cufall_trace::Trace::open(&path).expect("open");
        (stats, trace, dir)
    }

    #[test]
    fn the_report_kind_has_a_step_range_and_split_kernels_in_each_step() {
        let spec = BenchTrace {
            seconds: 1,
            gpus: 2,
            kind: BenchKind::Report {
                rate_hz: 1000,
                kernels_per_range: 3,
            },
        };
        let (s, trace, _dir) = write(&spec);
        // 100 steps: step, draft and verify ranges; per GPU 2 × 3 kernels and one NVML row.
        assert_eq!(
            (s.samples, s.nvtx_ranges, s.kernels, s.nvml_rows),
            (2000, 300, 1200, 200)
        );
        let m = trace.manifest();
        assert_eq!(m.sampling.as_ref().map(|s| s.interval_ns), Some(1_000_000));
        assert_eq!(m.end_unix_ns, Some(T0_NS + 1_000_000_000));
        assert_eq!(m.devices.len(), 2);
    }

    #[test]
    fn the_gui_kind_has_the_counters_asked_for_and_one_kernel_per_range() {
        let spec = BenchTrace {
            seconds: 2,
            gpus: 1,
            kind: BenchKind::Gui {
                interval_ns: 100_000,
                metrics: 2,
                host_threads: 3,
            },
        };
        let (s, trace, _dir) = write(&spec);
        // 3 threads, one sample a millisecond for 2 s.
        assert_eq!(s.host_samples, 6000);
        assert_eq!(
            (s.samples, s.nvtx_ranges, s.kernels, s.nvml_rows),
            (20_000, 400, 400, 200)
        );
        let m = trace.manifest();
        let units: Vec<&str> = m
            .sampling
            .iter()
            .flat_map(|s| s.metrics.iter().map(|m| m.unit.as_str()))
            .collect();
        assert_eq!(units, ["%", "%"]);
        assert_eq!(m.nvml_interval_ns, Some(STEP_NS));
    }

    #[test]
    fn busy_follows_the_step_schedule() {
        let busy_at: Vec<bool> = [
            0, 3_999_999, 4_000_000, 4_499_999, 4_500_000, 8_999_999, 9_000_000,
        ]
        .into_iter()
        .map(busy)
        .collect();
        assert_eq!(busy_at, [true, true, false, false, true, true, false]);
    }
}
