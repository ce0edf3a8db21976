//! The format-1.0 reference: a real recording made on an H200 (`examples/h200-matmul-copy.cufall`,
//! see examples/README.md). Every future cufall must keep reading it exactly like this.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_trace::Trace;
use cufall_trace::model::{DropReason, RecordingStatus};

const TENSOR: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

#[test]
fn reads_the_v1_0_reference_recording() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/h200-matmul-copy.cufall");
    let trace = Trace::open(&dir).unwrap();
    let m = trace.manifest();
    assert_eq!(m.schema_version, "1.0");
    assert_eq!(m.status, RecordingStatus::Complete);
    assert_eq!(m.devices[0].chip, "GH100");
    assert_eq!(trace.metric_names(), vec![TENSOR, DRAM]);
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());

    let s = trace.summary().unwrap();
    assert_eq!(s.devices[&cufall_trace::model::DeviceId(0)].samples, 55_529);
    let drops = trace.drops().unwrap();
    assert_eq!(drops.len(), 1);
    assert_eq!(drops[0].reason, DropReason::Warmup);

    // The recording holds a bf16 matmul phase (tensor pipes near 93 %) and a copy phase (DRAM
    // near 88 %): the peaks of both metrics are there.
    let batch = &trace.sample_batches().unwrap()[0];
    let peak = |m: usize| batch.values[m].iter().cloned().fold(f64::MIN, f64::max);
    assert!(peak(0) > 85.0, "tensor peak {}", peak(0));
    assert!(peak(1) > 80.0, "dram peak {}", peak(1));
    assert!(batch.start_ns.windows(2).all(|w| w[0] <= w[1]));
    assert!(batch.start_ns.iter().zip(&batch.end_ns).all(|(s, e)| s < e));
    assert!(!trace.nvml().unwrap().is_empty());
}
