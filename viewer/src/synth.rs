//! Synthetic feeds for tests, snapshots and benchmarks (no GPU involved): devices named like
//! H200s, a tensor-pipe metric with its SM spread and a cycles denominator, and a waveform per
//! device. Nothing here pretends to be a measurement.

use cufall_live::FeedInfo;
use cufall_trace::model::{
    DeviceId, DeviceInfo, DropReason, DropRecord, HeatmapSpec, MetricInfo, NvmlRow, NvtxRange,
    RangeKind, SampleBatch,
};

pub const TENSOR_AVG: &str = "sm__pipe_tensor_cycles_active.avg";
pub const TENSOR_MAX: &str = "sm__pipe_tensor_cycles_active.max";
pub const TENSOR_MIN: &str = "sm__pipe_tensor_cycles_active.min";
pub const CYCLES: &str = "gr__cycles_elapsed.max";
pub const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

/// Columns of every synthetic batch, in order.
pub fn metrics() -> Vec<MetricInfo> {
    [(TENSOR_AVG, "cycle"), (TENSOR_MAX, "cycle"), (TENSOR_MIN, "cycle"), (CYCLES, "cycle"), (DRAM, "%")]
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
        interval_ns,
        counters_unavailable: None,
    }
}

/// `n` samples of device `gpu` from `t0_ns`, every `interval_ns`; `level(t)` gives the tensor
/// busy fraction (0..=1) at time `t`. The SM spread is ±30 % around it; DRAM follows at half.
pub fn batch(gpu: u32, t0_ns: i64, n: usize, interval_ns: i64, level: impl Fn(i64) -> f64) -> SampleBatch {
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
    }
}
