//! Small traces with a row or more in every table, for the trace format's own tests and for
//! the command line's `info` tests (synthetic data, not recordings).

use cufall_trace::model::*;
use cufall_trace::{TraceWriter, WriterOptions};
use std::path::Path;

pub const T0: i64 = 1_764_460_000_000_000_000;
pub const METRICS: [&str; 2] = [
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
];

pub fn manifest(devices: u32) -> Manifest {
    let mut m = Manifest::new("0.1.0-test", T0);
    m.hostname = "testhost".into();
    m.command = vec![
        "cufall".into(),
        "record".into(),
        "-o".into(),
        "x.cufall".into(),
    ];
    m.devices = (0..devices)
        .map(|i| DeviceInfo {
            id: DeviceId(i),
            name: "NVIDIA H200".into(),
            chip: "GH100".into(),
            uuid: format!("GPU-{i}"),
            pci_bus_id: format!("0000:{i:02x}:00.0"),
            sm_count: Some(132),
            memory_total_bytes: Some(150_000_000_000),
        })
        .collect();
    m.sampling = Some(SamplingInfo {
        interval_ns: 10_000,
        metrics: METRICS
            .iter()
            .map(|n| MetricInfo {
                name: (*n).into(),
                unit: "%".into(),
                description: String::new(),
            })
            .collect(),
        source: "cupti_pm_sampling".into(),
    });
    m.nvml_interval_ns = Some(10_000_000);
    m.heatmaps = vec![HeatmapSpec {
        metric: METRICS[0].into(),
        denominator: None,
        full_scale: Some(100.0),
    }];
    m
}

pub fn samples(device: u32, first: usize, n: usize) -> SampleBatch {
    let mut b = SampleBatch::new(DeviceId(device), METRICS.len());
    for i in first..first + n {
        let s = T0 + i as i64 * 10_000;
        // Values exactly representable in f32 so round trips compare exactly.
        b.push(
            s,
            s + 9_984,
            &[(i % 100) as f64, ((i * 7) % 64) as f64 * 0.5],
        );
    }
    b
}

pub fn drops() -> Vec<DropRecord> {
    vec![
        DropRecord {
            device: DeviceId(0),
            start_ns: T0 - 300_000_000,
            end_ns: T0,
            reason: DropReason::Warmup,
            lost_samples: None,
        },
        DropRecord {
            device: DeviceId(1),
            start_ns: T0 + 5_000_000,
            end_ns: T0 + 5_200_000,
            reason: DropReason::CounterDataFull,
            lost_samples: Some(20),
        },
    ]
}

pub fn nvml() -> Vec<NvmlRow> {
    vec![
        NvmlRow {
            device: DeviceId(0),
            t_ns: T0,
            power_w: Some(412.5),
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: Some(3201),
            gpu_util_pct: Some(100),
            mem_util_pct: Some(37),
            mem_used_bytes: Some(81_000_000_000),
            temperature_c: Some(54),
            throttle_reasons: Some(0),
        },
        NvmlRow {
            device: DeviceId(1),
            t_ns: T0 + 10_000_000,
            ..Default::default()
        },
    ]
}

pub fn nvtx() -> Vec<NvtxRange> {
    vec![
        NvtxRange {
            start_ns: T0,
            end_ns: T0 + 2_000_000,
            name: "prefill".into(),
            domain: String::new(),
            kind: RangeKind::PushPop,
            depth: 0,
            pid: 42,
            tid: 43,
            ..Default::default()
        },
        NvtxRange {
            start_ns: T0 + 2_000_000,
            end_ns: T0 + 2_500_000,
            name: "draft step=1".into(),
            domain: "specdec".into(),
            kind: RangeKind::StartEnd,
            depth: 1,
            pid: 42,
            tid: 44,
            ..Default::default()
        },
    ]
}

pub fn kernels() -> Vec<KernelRecord> {
    vec![
        KernelRecord {
            device: DeviceId(0),
            start_ns: T0 + 100,
            end_ns: T0 + 1_900_000,
            kind: ActivityKind::Kernel,
            name: "sm90_xmma_gemm_bf16bf16_bf16f32".into(),
            stream: 7,
            correlation_id: 1001,
            bytes: None,
            pid: 42,
            ..Default::default()
        },
        KernelRecord {
            device: DeviceId(1),
            start_ns: T0 + 200,
            end_ns: T0 + 900,
            kind: ActivityKind::Memcpy,
            name: "DtoD".into(),
            stream: 0,
            correlation_id: 1002,
            bytes: Some(1 << 30),
            pid: 42,
            ..Default::default()
        },
    ]
}

/// One frame of an interned host stack, without a module.
pub fn frame(
    stack_id: u64,
    depth: u32,
    function: &str,
    file: &str,
    line: Option<u32>,
    kind: FrameKind,
) -> StackFrame {
    StackFrame {
        stack_id,
        depth,
        function: function.into(),
        file: file.into(),
        line,
        module: String::new(),
        kind,
    }
}

/// Two interned host stacks: a Python thread in `build_tree` called from `step`, and the same
/// thread in a native frame below `torch.cuda.synchronize`.
pub fn stacks() -> Vec<StackFrame> {
    vec![
        frame(1, 0, "build_tree", "tree.py", Some(88), FrameKind::Python),
        frame(1, 1, "step", "serve.py", Some(12), FrameKind::Python),
        frame(
            2,
            0,
            "cudaStreamSynchronize",
            "libcudart.so.13",
            None,
            FrameKind::Native,
        ),
        frame(
            2,
            1,
            "synchronize",
            "torch/cuda/__init__.py",
            Some(985),
            FrameKind::Python,
        ),
        frame(2, 2, "step", "serve.py", Some(14), FrameKind::Python),
    ]
}

/// Host samples of one thread, alternating between the two [`stacks`], 1 ms apart.
pub fn host_samples() -> Vec<HostSample> {
    (0..6)
        .map(|i| HostSample {
            t_ns: T0 + 1_000_000 * i,
            pid: 42,
            tid: 43,
            thread_name: "MainThread".into(),
            state: if i % 2 == 0 {
                HostState::Running
            } else {
                HostState::Idle
            },
            gil: if i % 2 == 0 { Gil::Held } else { Gil::Released },
            stack_id: 1 + u64::from(i % 2 == 1),
        })
        .collect()
}

/// A complete trace with every table, written in `segments` flushes.
pub fn write_full(dir: &Path, segments: usize) -> cufall_trace::WriteStats {
    let mut w =
        TraceWriter::create(dir, manifest(2), WriterOptions::default()).expect("create trace");
    for s in 0..segments {
        w.append_samples(&samples(0, s * 1000, 1000))
            .expect("samples");
        w.append_samples(&samples(1, s * 1000, 1000))
            .expect("samples");
        if s == 0 {
            w.append_drops(&drops()).expect("drops");
            w.append_nvml(&nvml()).expect("nvml");
            w.append_nvtx(&nvtx()).expect("nvtx");
            w.append_kernels(&kernels()).expect("kernels");
            w.append_stacks(&stacks()).expect("stacks");
            w.append_host_samples(&host_samples())
                .expect("host samples");
        }
        w.flush().expect("flush");
    }
    w.finish(T0 + 1_000_000_000).expect("finish")
}
