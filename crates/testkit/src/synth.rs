//! Synthetic feeds for tests, snapshots and benchmarks (no GPU involved): devices named like
//! H200s, a tensor-pipe metric with its SM spread and a cycles denominator, and a waveform per
//! device. Nothing here pretends to be a measurement.

use cufall_live::FeedInfo;
use cufall_trace::model::{
    DeviceId, DeviceInfo, DropReason, DropRecord, HeatmapSpec, MetricInfo, Nanos, NvmlRow,
    NvtxRange, RangeKind, SampleBatch,
};

pub const TENSOR_AVG: &str = "sm__pipe_tensor_cycles_active.avg";
pub const TENSOR_MAX: &str = "sm__pipe_tensor_cycles_active.max";
pub const TENSOR_MIN: &str = "sm__pipe_tensor_cycles_active.min";
pub const CYCLES: &str = "gr__cycles_elapsed.max";
pub const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

/// The device the fake GPUs of the exporter's and the pipeline's tests report as GPU `i`:
/// "Fake H200", with a UUID and a PCI bus id of its own.
pub fn fake_h200(i: u32) -> DeviceInfo {
    DeviceInfo {
        id: DeviceId(i),
        name: "Fake H200".into(),
        chip: "GH100".into(),
        uuid: format!("GPU-fake-{i}"),
        pci_bus_id: format!("00000000:{:02X}:00.0", i + 1),
        sm_count: Some(132),
        memory_total_bytes: None,
    }
}

/// Columns of every synthetic batch, in order.
pub fn metrics() -> Vec<MetricInfo> {
    [
        (TENSOR_AVG, "cycle"),
        (TENSOR_MAX, "cycle"),
        (TENSOR_MIN, "cycle"),
        (CYCLES, "cycle"),
        (DRAM, "%"),
    ]
    .iter()
    .map(|(n, u)| MetricInfo {
        name: (*n).into(),
        unit: (*u).into(),
        description: String::new(),
    })
    .collect()
}

pub fn device(i: u32) -> DeviceInfo {
    DeviceInfo {
        id: DeviceId(i),
        name: "NVIDIA H200".into(),
        chip: "GH100".into(),
        uuid: format!("GPU-synthetic-{i}"),
        pci_bus_id: String::new(),
        sm_count: Some(132),
        memory_total_bytes: None,
    }
}

/// A feed of `gpus` devices sampled every `interval_ns`, showing tensor-pipe activity as a
/// fraction of elapsed cycles, and DRAM throughput.
pub fn info(gpus: u32, interval_ns: i64) -> FeedInfo {
    FeedInfo {
        devices: (0..gpus).map(device).collect(),
        metrics: metrics(),
        heatmaps: vec![
            HeatmapSpec {
                metric: TENSOR_AVG.into(),
                denominator: Some(CYCLES.into()),
                full_scale: None,
            },
            HeatmapSpec {
                metric: DRAM.into(),
                denominator: None,
                full_scale: None,
            },
        ],
        interval_ns: Nanos(interval_ns),
        nvml_interval_ns: Nanos(10_000_000),
        counters_unavailable: None,
    }
}

/// `n` samples of device `gpu` from `t0_ns`, every `interval_ns`; `level(t)` gives the tensor
/// busy fraction (0..=1) at time `t`. The SM spread is ±30 % around it; DRAM follows at half.
pub fn batch(
    gpu: u32,
    t0_ns: i64,
    n: usize,
    interval_ns: i64,
    level: impl Fn(i64) -> f64,
) -> SampleBatch {
    let mut b = SampleBatch::new(DeviceId(gpu), 5);
    let cycles = 1980.0 * interval_ns as f64 / 1000.0;
    for i in 0..n {
        let t = t0_ns + i as i64 * interval_ns;
        let f = level(t).clamp(0.0, 1.0);
        let avg = f * cycles;
        b.push(
            t,
            t + interval_ns,
            &[avg, (avg * 1.3).min(cycles), avg * 0.7, cycles, f * 50.0],
        );
    }
    b
}

pub fn drop_record(gpu: u32, start_ns: i64, end_ns: i64, lost: u64) -> DropRecord {
    DropRecord {
        device: DeviceId(gpu),
        start_ns,
        end_ns,
        reason: DropReason::CounterDataFull,
        lost_samples: Some(lost),
    }
}

pub fn nvml(gpu: u32, t_ns: i64, util: u32, power_w: f32, clock: u32) -> NvmlRow {
    NvmlRow {
        device: DeviceId(gpu),
        t_ns,
        power_w: Some(power_w),
        sm_clock_mhz: Some(clock),
        gpu_util_pct: Some(util),
        ..NvmlRow::default()
    }
}

pub fn range(name: &str, start_ns: i64, end_ns: i64, depth: u32) -> NvtxRange {
    NvtxRange {
        start_ns,
        end_ns,
        name: name.into(),
        domain: String::new(),
        kind: RangeKind::PushPop,
        depth,
        pid: 1,
        tid: 1,
        ..Default::default()
    }
}

/// The synthetic workload of [`demo`]: a serving loop of prefill (tensor pipes busy), draft
/// (light), verify (medium) and idle gaps, 100 ms per round.
pub fn demo_level(gpu: u32, t_rel_ns: i64) -> f64 {
    if gpu == 5 {
        return 0.0; // one idle GPU
    }
    let p = (t_rel_ns + i64::from(gpu) * 3_000_000).rem_euclid(100_000_000);
    match p {
        0..40_000_000 => 0.85 + 0.1 * ((p / 1_000_000) % 3) as f64 / 2.0,
        40_000_000..45_000_000 => 0.0,
        45_000_000..75_000_000 => 0.15,
        75_000_000..95_000_000 => 0.55,
        _ => 0.02,
    }
}

/// Phases of [`demo_level`] as NVTX ranges, over `[t0, t0 + dur)`.
pub fn demo_phases(t0_ns: i64, dur_ns: i64) -> Vec<NvtxRange> {
    let mut v = Vec::new();
    let mut r = t0_ns;
    while r < t0_ns + dur_ns {
        v.push(range("step", r, r + 95_000_000, 0));
        v.push(range("prefill", r, r + 40_000_000, 1));
        v.push(range("draft", r + 45_000_000, r + 75_000_000, 1));
        v.push(range("verify", r + 75_000_000, r + 95_000_000, 1));
        r += 100_000_000;
    }
    v
}

/// Everything of a synthetic recording of `gpus` devices for `dur_ns`: samples per device (with
/// a 12 ms hole on GPU 3 recorded as a drop), NVML every 10 ms, NVTX phases.
pub struct Demo {
    pub info: FeedInfo,
    pub batches: Vec<SampleBatch>,
    pub drops: Vec<DropRecord>,
    pub nvml: Vec<NvmlRow>,
    pub nvtx: Vec<NvtxRange>,
}

pub fn demo(gpus: u32, t0_ns: i64, dur_ns: i64, interval_ns: i64) -> Demo {
    let n = (dur_ns / interval_ns) as usize;
    let hole = (t0_ns + dur_ns / 2, t0_ns + dur_ns / 2 + 12_000_000);
    let mut batches = Vec::new();
    let mut drops = Vec::new();
    for g in 0..gpus {
        let mut b = batch(g, t0_ns, n, interval_ns, |t| demo_level(g, t - t0_ns));
        if g == 3 {
            let keep: Vec<usize> = (0..b.len())
                .filter(|&i| b.start_ns[i] < hole.0 || b.start_ns[i] >= hole.1)
                .collect();
            let lost = (b.len() - keep.len()) as u64;
            b = SampleBatch {
                device: b.device,
                start_ns: keep.iter().map(|&i| b.start_ns[i]).collect(),
                end_ns: keep.iter().map(|&i| b.end_ns[i]).collect(),
                values: b
                    .values
                    .iter()
                    .map(|c| keep.iter().map(|&i| c[i]).collect())
                    .collect(),
            };
            drops.push(drop_record(g, hole.0, hole.1, lost));
        }
        batches.push(b);
    }
    let mut nvml_rows = Vec::new();
    let mut t = t0_ns;
    while t < t0_ns + dur_ns {
        for g in 0..gpus {
            let busy = demo_level(g, t - t0_ns);
            let util = if g == 5 { 0 } else { 100 };
            nvml_rows.push(nvml(
                g,
                t,
                util,
                120.0 + 550.0 * busy as f32,
                if g == 5 { 345 } else { 1980 },
            ));
        }
        t += 10_000_000;
    }
    Demo {
        info: info(gpus, interval_ns),
        batches,
        drops,
        nvml: nvml_rows,
        nvtx: demo_phases(t0_ns, dur_ns),
    }
}

/// Writes [`demo`] as a trace folder at `path` (for tests, docs and trying the viewer).
pub fn write_demo_trace(
    path: &std::path::Path,
    gpus: u32,
    t0_ns: i64,
    dur_ns: i64,
    interval_ns: i64,
) -> cufall_trace::Result<()> {
    use cufall_trace::model::{Manifest, SamplingInfo};
    use cufall_trace::{TraceWriter, WriterOptions};
    let d = demo(gpus, t0_ns, dur_ns, interval_ns);
    let mut m = Manifest::new("synthetic", t0_ns);
    m.hostname = "synthetic".into();
    m.command = vec!["cufall-viewer synthetic demo (not a GPU recording)".into()];
    m.devices = d.info.devices.clone();
    m.sampling = Some(SamplingInfo {
        interval_ns,
        metrics: d.info.metrics.clone(),
        source: "synthetic".into(),
    });
    m.nvml_interval_ns = Some(10_000_000);
    m.heatmaps = d.info.heatmaps.clone();
    let mut w = TraceWriter::create(
        path,
        m,
        WriterOptions {
            overwrite: true,
            ..WriterOptions::default()
        },
    )?;
    for b in &d.batches {
        w.append_samples(b)?;
    }
    w.append_drops(&d.drops)?;
    w.append_nvml(&d.nvml)?;
    w.append_nvtx(&d.nvtx)?;
    w.finish(t0_ns + dur_ns)?;
    Ok(())
}
