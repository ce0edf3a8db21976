//! Synthetic fixture traces with known phases, gaps and drops (not recordings of a real GPU).
//!
//! Timeline of every device, in µs from T0, sampled every 10 µs:
//!
//! ```text
//! step k (k = 0, 1, 2) = [1000k, 1000k + 1000)
//!   draft  [1000k,       1000k + 400)   busy
//!   (gap)  [1000k + 400, 1000k + 500)   idle, no kernel   -> "draft → verify"
//!   verify [1000k + 500, 1000k + 900)   busy, except [1600, 1800) in step 1: idle with the
//!                                         verify kernel resident -> "step/verify"
//!   (gap)  [1000k + 900, 1000k + 1000)  idle, no kernel   -> "verify → draft" (k = 0, 1),
//!                                                           "step/verify → (end)" (k = 2)
//! ```
//!
//! Device 0 has two drops: [2400, 2500) covers the whole draft → verify gap of step 2, and
//! [1930, 1950) cuts the verify → draft gap at 1900 into 30 µs (below the 50 µs minimum gap)
//! and 50 µs. Device 1 has no drops. Busy samples have tensor = 0.8 × elapsed, idle ones 0.
//! Samples are written in batches of 450 µs, devices interleaved, so file blocks split gaps.
//!
//! With `library_nvtx`, library ranges on the same thread, inside the program's (never phases by
//! default): per step, `cub::DeviceScan::InclusiveScan` of domain `CCCL` at [350, 400) in draft
//! and [500, 550) in verify (taken as phases, they name the draft → verify gap), and
//! `XlaPassPipeline:#name=fusion#` of domain `TSL` at [450, 920), enclosing verify. With
//! `capture_problems`, the capture table holds a routine `cuda_attached`, two processes'
//! `no_activity_records`, a `cupti_records_dropped` of 17 records, a `quiet_processes` of 2 and
//! an event this version does not know (`future_event`).
//!
//! With `host_stacks`, host samples every 10 µs (at 5, 15, 25, ... µs) of two threads of
//! process 1234, and `manifest.extra.host_stacks` = `on: every 10us (100000 Hz), python frames
//! only` (as the recorder words it):
//! - `MainThread` (tid 1234, the thread of the NVTX ranges): in `build_tree (tree.py:88)` under
//!   `step (serve.py:12)`, running with the GIL, during every draft → verify gap; in the native
//!   `cudaStreamSynchronize` under `synchronize (.../torch/cuda/__init__.py:985)` under
//!   `step (serve.py:14)`, idle without the GIL, in every other idle stretch; in
//!   `launch (serve.py:20)` under `step (serve.py:12)`, running, while the GPU is busy.
//! - a worker, `tokenizer` (tid 1240), always idle in `wait\x1b[2J (threading.py:320)` (a
//!   function name holding an escape sequence, as a hostile program could) under
//!   `encode (tok.py:5)`.
//!
//! [`Fixture::write_with`] adds, on request ([`Extras`]), a host name in the manifest and host
//! samples of two threads with stacks that follow the phases ([`phase_thread_stacks`],
//! [`phase_thread_samples`]; stack ids from 101, apart from `host_stacks`'): `MainThread`
//! follows the phases (running in draft and verify, waiting in the gaps), `loader` alternates
//! between reading and sleeping.

use cufall_trace::model::{
    ActivityKind, CaptureEvent, DeviceId, DeviceInfo, DropReason, DropRecord, FrameKind, Gil,
    HeatmapSpec, HostSample, HostState, KernelRecord, Manifest, MetricInfo, NvmlRow, NvtxRange,
    RangeKind, SampleBatch, SamplingInfo, StackFrame,
};
use cufall_trace::{TraceWriter, WriterOptions};
use std::path::{Path, PathBuf};

pub const T0: i64 = 1_764_000_000_000_000_000;
pub const US: i64 = 1_000;
pub const INTERVAL: i64 = 10 * US;
pub const TENSOR: &str = "sm__pipe_tensor_cycles_active.avg";
pub const ELAPSED: &str = "gr__cycles_elapsed.max";
pub const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

/// What to put in a fixture.
#[derive(Clone, Debug)]
pub struct Fixture {
    pub gpu_name: String,
    pub nvtx: bool,
    pub kernels: bool,
    pub drops: bool,
    /// Extra idle time at the end of every verify (makes the verify → draft gap longer).
    pub extra_verify_gap_us: i64,
    pub heatmap: bool,
    /// CCCL and TSL ranges inside the program's (see the module docs).
    pub library_nvtx: bool,
    /// Problems in the capture table (see the module docs).
    pub capture_problems: bool,
    /// Host samples and stacks (see the module docs).
    pub host_stacks: bool,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture {
            gpu_name: "NVIDIA H200".into(),
            nvtx: true,
            kernels: true,
            drops: true,
            extra_verify_gap_us: 0,
            heatmap: true,
            library_nvtx: false,
            capture_problems: false,
            host_stacks: false,
        }
    }
}

fn rel(us: i64) -> i64 {
    T0 + us * US
}

impl Fixture {
    fn verify_end_us(&self) -> i64 {
        900 - self.extra_verify_gap_us
    }

    fn busy(&self, t_us: i64) -> bool {
        let k = t_us % 1000;
        if (1600..1800).contains(&t_us) {
            return false;
        }
        k < 400 || (500..self.verify_end_us()).contains(&k)
    }

    fn drops_of(&self, device: u32) -> Vec<(i64, i64)> {
        if self.drops && device == 0 {
            vec![(2400, 2500), (1930, 1950)]
        } else {
            Vec::new()
        }
    }

    /// The NVTX ranges: the program's steps, and library ranges with `library_nvtx`.
    fn ranges(&self) -> Vec<NvtxRange> {
        let mut r = Vec::new();
        for k in 0..3 {
            let b = k * 1000;
            let mut ranges = vec![
                (b, b + 1000, "step", "", 0),
                (b, b + 400, "draft", "", 1),
                (b + 500, b + self.verify_end_us(), "verify", "", 1),
            ];
            if self.library_nvtx {
                ranges.extend([
                    (
                        b + 350,
                        b + 400,
                        "cub::DeviceScan::InclusiveScan",
                        "CCCL",
                        2,
                    ),
                    (b + 450, b + 920, "XlaPassPipeline:#name=fusion#", "TSL", 1),
                    (
                        b + 500,
                        b + 550,
                        "cub::DeviceScan::InclusiveScan",
                        "CCCL",
                        2,
                    ),
                ]);
            }
            for (s, e, name, domain, depth) in ranges {
                r.push(NvtxRange {
                    start_ns: rel(s),
                    end_ns: rel(e),
                    name: name.into(),
                    domain: domain.into(),
                    kind: RangeKind::PushPop,
                    depth,
                    pid: 1234,
                    tid: 1234,
                    ..Default::default()
                });
            }
        }
        r
    }

    /// The manifest: two GPUs, the three metrics, the heatmap if asked for.
    fn manifest(&self) -> Manifest {
        let mut m = Manifest::new("test", T0);
        m.devices = (0..2)
            .map(|i| DeviceInfo {
                id: DeviceId(i),
                name: self.gpu_name.clone(),
                chip: if self.gpu_name.contains("H200") {
                    "GH100".into()
                } else {
                    "GA100".into()
                },
                uuid: String::new(),
                pci_bus_id: String::new(),
                sm_count: Some(132),
                memory_total_bytes: None,
            })
            .collect();
        m.sampling = Some(SamplingInfo {
            interval_ns: INTERVAL,
            metrics: [TENSOR, ELAPSED, DRAM]
                .iter()
                .map(|n| MetricInfo {
                    name: n.to_string(),
                    unit: if *n == DRAM {
                        "%".into()
                    } else {
                        "cycle".into()
                    },
                    description: String::new(),
                })
                .collect(),
            source: "synthetic".into(),
        });
        if self.host_stacks {
            m.extra.insert(
                cufall_trace::model::HostStacksMeta::EXTRA_KEY.into(),
                "on: every 10us (100000 Hz), python frames only".into(),
            );
        }
        if self.heatmap {
            m.heatmaps = vec![HeatmapSpec {
                metric: TENSOR.into(),
                denominator: Some(ELAPSED.into()),
                full_scale: None,
            }];
        }
        m
    }

    /// Draft and verify kernels of the three steps on both GPUs.
    fn kernel_records(&self) -> Vec<KernelRecord> {
        let mut ks = Vec::new();
        for d in 0..2 {
            for k in 0..3 {
                let b = k * 1000;
                for (s, e, name) in [
                    (b, b + 400, "draft_gemm"),
                    (b + 500, b + self.verify_end_us(), "verify_gemm"),
                ] {
                    ks.push(KernelRecord {
                        device: DeviceId(d),
                        start_ns: rel(s),
                        end_ns: rel(e),
                        kind: ActivityKind::Kernel,
                        name: name.into(),
                        stream: 7,
                        correlation_id: (k * 2) as u32,
                        bytes: None,
                        pid: 1234,
                        ..Default::default()
                    });
                }
            }
        }
        ks
    }

    /// The host samples of `host_stacks` (see the module docs).
    fn host_samples(&self) -> Vec<HostSample> {
        let mut v = Vec::new();
        for t in (5..3000).step_by(10) {
            let (stack_id, idle) = if self.busy(t) {
                (3, false)
            } else if (400..500).contains(&(t % 1000)) {
                (1, false)
            } else {
                (2, true)
            };
            let state = |idle| {
                if idle {
                    HostState::Idle
                } else {
                    HostState::Running
                }
            };
            let gil = |idle| if idle { Gil::Released } else { Gil::Held };
            v.push(HostSample {
                t_ns: rel(t),
                pid: 1234,
                tid: 1234,
                thread_name: "MainThread".into(),
                state: state(idle),
                gil: gil(idle),
                stack_id,
            });
            v.push(HostSample {
                t_ns: rel(t),
                pid: 1234,
                tid: 1240,
                thread_name: "tokenizer".into(),
                state: state(true),
                gil: gil(true),
                stack_id: 4,
            });
        }
        v
    }

    /// Writes the trace into `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        self.write_with(dir, name, &Extras::default())
    }

    /// Writes the trace into `dir/name` with `extras` (host stacks, a host name); with
    /// `Extras::default()` the same trace as [`Fixture::write`].
    pub fn write_with(&self, dir: &Path, name: &str, extras: &Extras) -> PathBuf {
        self.write_all(dir, name, extras, &[])
    }

    /// Writes the trace into `dir/name` with `capture_rows` added to its capture table
    /// (capture's cost per event, `capture_cost_*`).
    pub fn write_with_capture(
        &self,
        dir: &Path,
        name: &str,
        capture_rows: &[CaptureEvent],
    ) -> PathBuf {
        self.write_all(dir, name, &Extras::default(), capture_rows)
    }

    fn write_all(
        &self,
        dir: &Path,
        name: &str,
        extras: &Extras,
        capture_rows: &[CaptureEvent],
    ) -> PathBuf {
        let path = dir.join(name);
        let mut m = self.manifest();
        if let Some(h) = &extras.hostname {
            m.hostname = h.clone();
        }
        let mut w = TraceWriter::create(&path, m, WriterOptions::default()).expect("create");
        // Samples in 450 µs blocks, devices interleaved, one segment per block round.
        let mut block = 0;
        while block < 3000 {
            for d in 0..2u32 {
                let drops = self.drops_of(d);
                let mut b = SampleBatch::new(DeviceId(d), 3);
                let mut t = block;
                while t < (block + 450).min(3000) {
                    if !drops.iter().any(|(s, e)| t >= *s && t < *e) {
                        let on = self.busy(t);
                        let tensor = if on { 800.0 } else { 0.0 };
                        let dram = if on { 60.0 } else { 1.0 };
                        b.push(rel(t), rel(t + 10), &[tensor, 1000.0, dram]);
                    }
                    t += 10;
                }
                w.append_samples(&b).expect("samples");
            }
            w.flush().expect("flush");
            block += 450;
        }
        let mut drops = Vec::new();
        for d in 0..2u32 {
            for (s, e) in self.drops_of(d) {
                drops.push(DropRecord {
                    device: DeviceId(d),
                    start_ns: rel(s),
                    end_ns: rel(e),
                    reason: DropReason::CounterDataFull,
                    lost_samples: Some(((e - s) / 10) as u64),
                });
            }
        }
        w.append_drops(&drops).expect("drops");
        if self.nvtx {
            w.append_nvtx(&self.ranges()).expect("nvtx");
        }
        if self.kernels {
            w.append_kernels(&self.kernel_records()).expect("kernels");
        }
        let mut nvml = Vec::new();
        for d in 0..2u32 {
            for t in (0..3000).step_by(100) {
                nvml.push(NvmlRow {
                    device: DeviceId(d),
                    t_ns: rel(t + 50),
                    power_w: Some(300.0 + d as f32),
                    sm_clock_mhz: Some(1980),
                    mem_clock_mhz: Some(3201),
                    gpu_util_pct: Some(100),
                    ..Default::default()
                });
            }
        }
        w.append_nvml(&nvml).expect("nvml");
        if self.capture_problems {
            w.append_capture(&capture_problems()).expect("capture");
        }
        if !capture_rows.is_empty() {
            w.append_capture(capture_rows).expect("capture");
        }
        if self.host_stacks {
            w.append_stacks(&host_stacks()).expect("stacks");
            w.append_host_samples(&self.host_samples())
                .expect("host samples");
        }
        if extras.phase_threads {
            w.append_stacks(&phase_thread_stacks()).expect("stacks");
            w.append_host_samples(&phase_thread_samples())
                .expect("host samples");
        }
        w.finish(rel(3000)).expect("finish");
        path
    }
}

/// What [`Fixture::write_with`] adds to a fixture.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The manifest's host name (the fixture's default names none).
    pub hostname: Option<String>,
    /// Host samples of two threads whose stacks follow the phases (see the module docs); not
    /// meant with [`Fixture::host_stacks`] (the same threads would be sampled twice).
    pub phase_threads: bool,
}

/// A frame of a fixture's stack: function, file, line, whether native.
type FrameSpec = (&'static str, &'static str, Option<u32>, bool);

/// The stacks of [`Extras::phase_threads`], innermost frame first.
const HOST_STACKS: [&[FrameSpec]; 6] = [
    &[
        ("build_tree", "tree.py", Some(88), false),
        ("draft", "serve.py", Some(30), false),
        ("step", "serve.py", Some(12), false),
        ("main", "serve.py", Some(140), false),
    ],
    &[
        ("cudaStreamSynchronize", "libcudart.so.13", None, true),
        ("synchronize", "torch/cuda/__init__.py", Some(985), false),
        ("step", "serve.py", Some(14), false),
        ("main", "serve.py", Some(140), false),
    ],
    &[
        ("forward", "model.py", Some(51), false),
        ("verify", "serve.py", Some(40), false),
        ("step", "serve.py", Some(16), false),
        ("main", "serve.py", Some(140), false),
    ],
    &[
        ("get", "queue.py", Some(171), false),
        ("next_batch", "serve.py", Some(60), false),
        ("main", "serve.py", Some(138), false),
    ],
    &[
        ("read_batch", "data.py", Some(22), false),
        ("loader_loop", "data.py", Some(10), false),
    ],
    &[
        ("sleep", "", None, true),
        ("loader_loop", "data.py", Some(12), false),
    ],
];

/// The stacks table of [`Extras::phase_threads`]: stack ids 101 to 106.
pub fn phase_thread_stacks() -> Vec<StackFrame> {
    let mut out = Vec::new();
    for (i, frames) in HOST_STACKS.iter().enumerate() {
        for (depth, (function, file, line, native)) in frames.iter().enumerate() {
            let kind = if *native {
                FrameKind::Native
            } else {
                FrameKind::Python
            };
            out.push(crate::tables::frame(
                i as u64 + PHASE_STACK_0,
                depth as u32,
                function,
                file,
                *line,
                kind,
            ));
        }
    }
    out
}

/// The first stack id of [`phase_thread_stacks`], apart from those of [`Fixture::host_stacks`].
const PHASE_STACK_0: u64 = 101;

/// The host samples of [`Extras::phase_threads`], every 50 µs of the run: `MainThread` (1234/1234)
/// in `build_tree` during draft, waiting in `cudaStreamSynchronize` in the draft → verify gap,
/// in `forward` during verify and waiting in `queue.get` in the verify → draft gap; `loader`
/// (1234/1240) in `read_batch` for 150 µs of every 250 and waiting in `sleep` for the rest.
pub fn phase_thread_samples() -> Vec<HostSample> {
    let mut out = Vec::new();
    for t in (0..3000).step_by(50) {
        let k = t % 1000;
        let (main, main_idle) = match k {
            0..400 => (0, false),
            400..500 => (1, true),
            500..900 => (2, false),
            _ => (3, true),
        };
        let (loader, loader_idle) = if t % 250 < 150 { (4, false) } else { (5, true) };
        for (tid, name, stack_id, idle) in [
            (1234, "MainThread", main, main_idle),
            (1240, "loader", loader, loader_idle),
        ] {
            out.push(HostSample {
                t_ns: rel(t),
                pid: 1234,
                tid,
                thread_name: name.into(),
                state: if idle {
                    HostState::Idle
                } else {
                    HostState::Running
                },
                gil: if idle { Gil::Released } else { Gil::Held },
                stack_id: PHASE_STACK_0 + stack_id,
            });
        }
    }
    out
}

/// The stacks of a fixture with `host_stacks`.
fn host_stacks() -> Vec<StackFrame> {
    use crate::tables::frame;
    let py = FrameKind::Python;
    vec![
        frame(1, 0, "build_tree", "/srv/app/tree.py", Some(88), py),
        frame(1, 1, "step", "/srv/app/serve.py", Some(12), py),
        frame(
            2,
            0,
            "cudaStreamSynchronize",
            "libcudart.so.12",
            None,
            FrameKind::Native,
        ),
        frame(
            2,
            1,
            "synchronize",
            "/usr/lib/python3/dist-packages/torch/cuda/__init__.py",
            Some(985),
            py,
        ),
        frame(2, 2, "step", "/srv/app/serve.py", Some(14), py),
        frame(3, 0, "launch", "/srv/app/serve.py", Some(20), py),
        frame(3, 1, "step", "/srv/app/serve.py", Some(12), py),
        frame(
            4,
            0,
            "wait\u{1b}[2J",
            "/usr/lib/python3.11/threading.py",
            Some(320),
            py,
        ),
        frame(4, 1, "encode", "/srv/app/tok.py", Some(5), py),
    ]
}

/// The capture table of a fixture with `capture_problems`.
fn capture_problems() -> Vec<CaptureEvent> {
    use cufall_trace::model::CaptureEventKind as K;
    let ev = |pid: u32, event: &str, count: u64, detail: &str| CaptureEvent {
        t_ns: rel(3000),
        pid,
        event: event.into(),
        count,
        detail: detail.into(),
    };
    vec![
        ev(
            1234,
            K::CudaAttached.as_str(),
            4,
            "kernels, memcpy, graphs, api",
        ),
        ev(
            1234,
            K::NoActivity.as_str(),
            0,
            "process 1234 had kernel capture set up but delivered no kernel or copy records",
        ),
        ev(
            1240,
            K::NoActivity.as_str(),
            0,
            "process 1240 had kernel capture set up but delivered no kernel or copy records",
        ),
        ev(
            1234,
            K::CuptiDropped.as_str(),
            17,
            "CUPTI dropped 17 records",
        ),
        ev(0, K::Quiet.as_str(), 2, "2 processes sent no records"),
        // A name a newer recorder may write: shown as written, never refused.
        ev(0, "future_event", 3, "something a newer recorder says"),
    ]
}
