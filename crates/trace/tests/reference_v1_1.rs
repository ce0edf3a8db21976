//! The format-1.1 reference: a real recording made with capture on an H200
//! (`examples/h200-specdec-0.5b-graphs-off.cufall`, see examples/README.md). Every future
//! cufall must keep reading it exactly like this.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_trace::model::{ActivityKind, RangeKind, RecordingStatus};
use cufall_trace::{Table, Trace};

#[test]
fn reads_the_v1_1_reference_recording() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/h200-specdec-0.5b-graphs-off.cufall");
    let trace = Trace::open(&dir).unwrap();
    let m = trace.manifest();
    assert_eq!(m.schema_version, "1.1");
    assert_eq!(m.status, RecordingStatus::Complete);
    assert_eq!(
        m.extra.get("capture").map(String::as_str),
        Some("nvtx,kernels,memcpy")
    );
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());

    // The engine's NVTX phases, whole: two prefills (warm-up and timed run), then one draft,
    // verify and accept per step, each carrying its step number as payload.
    let nvtx = trace.nvtx().unwrap();
    let count = |n: &str| nvtx.iter().filter(|r| r.name == n).count();
    assert_eq!(count("prefill"), 2);
    assert_eq!(
        (count("draft"), count("verify"), count("accept")),
        (76, 76, 76)
    );
    assert!(
        nvtx.iter()
            .all(|r| r.kind == RangeKind::PushPop && r.end_ns >= r.start_ns)
    );
    assert!(
        nvtx.iter()
            .filter(|r| r.name == "draft")
            .all(|r| r.payload_int.is_some())
    );

    // Kernels on the counters' clock, with launch dimensions, demangled names and copies.
    let kernels = trace.kernels().unwrap();
    assert_eq!(kernels.len(), 31_045);
    let k: Vec<_> = kernels
        .iter()
        .filter(|k| k.kind == ActivityKind::Kernel)
        .collect();
    assert!(
        k.iter()
            .all(|k| k.grid.is_some() && k.block.is_some() && k.end_ns >= k.start_ns)
    );
    assert!(
        k.iter().all(|k| !k.name.starts_with("_Z")),
        "names are demangled"
    );
    assert!(
        kernels
            .iter()
            .any(|k| k.kind == ActivityKind::Memcpy && k.bytes.is_some())
    );
    let s = trace.summary().unwrap();
    let (first, last) = (s.first_ns.unwrap(), s.last_ns.unwrap());
    assert!(k.iter().all(|k| k.start_ns >= first && k.end_ns <= last));

    // Every table of format 1.1 exists, the empty ones as a schema-only segment (1.2's host
    // tables came later: a 1.1 trace has no folders for them, and reads them as empty).
    for t in Table::ALL
        .into_iter()
        .filter(|t| !matches!(t, Table::Stacks | Table::HostSamples))
    {
        assert!(dir.join(t.dir_name()).is_dir(), "{t:?}");
    }
    assert!(trace.api_calls().unwrap().is_empty());
    assert!(trace.stacks().unwrap().is_empty() && trace.host_samples().unwrap().is_empty());
    let events = trace.capture_events().unwrap();
    assert!(events.iter().any(|e| e.event == "cuda_attached"));
    assert!(events.iter().any(|e| e.event == "nvtx_attached"));
}
