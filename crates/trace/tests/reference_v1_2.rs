//! The format-1.2 reference: a real recording of host stacks (`examples/host-stacks/
//! cpu-host-phases.cufall`, made by `cufall probe-host-stacks` on a Python program, see
//! examples/README.md). Every future cufall must keep reading it exactly like this.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_trace::Trace;
use cufall_trace::model::{FrameKind, Gil, HostState, RecordingStatus};
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn reads_the_v1_2_reference_recording() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/host-stacks/cpu-host-phases.cufall");
    let trace = Trace::open(&dir).unwrap();
    let m = trace.manifest();
    assert_eq!(m.schema_version, "1.2");
    assert_eq!(m.status, RecordingStatus::Complete);
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    assert!(
        m.extra
            .get("host_stacks")
            .is_some_and(|v| v.contains("1000 Hz"))
    );

    let samples = trace.host_samples().unwrap();
    let stacks = trace.stacks().unwrap();
    assert_eq!(samples.len(), 1807);
    // Read a segment at a time (as `report` and `info` read them), the same rows.
    let mut parts = Vec::new();
    let mut segments = 0;
    trace
        .host_samples_by_segment(|rows| {
            segments += 1;
            parts.extend(rows);
        })
        .unwrap();
    assert!(segments > 1, "{segments} segment(s)");
    assert_eq!(parts, samples);
    let ids: BTreeSet<u64> = stacks.iter().map(|f| f.stack_id).collect();
    assert_eq!(ids.len(), 15);
    // Every sample names a stack the trace holds, and each stack's depths run from 0 up.
    assert!(samples.iter().all(|s| ids.contains(&s.stack_id)));
    let mut depths: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for f in &stacks {
        depths.entry(f.stack_id).or_default().push(f.depth);
    }
    for d in depths.values_mut() {
        d.sort_unstable();
        assert_eq!(*d, (0..d.len() as u32).collect::<Vec<_>>());
    }

    // The program's two threads, in their known places.
    let threads: BTreeSet<&str> = samples.iter().map(|s| s.thread_name.as_str()).collect();
    assert_eq!(threads, BTreeSet::from(["MainThread", "tokenizer"]));
    let leaf: BTreeMap<u64, &str> = stacks
        .iter()
        .filter(|f| f.depth == 0)
        .map(|f| (f.stack_id, f.function.as_str()))
        .collect();
    let in_fn = |thread: &str, function: &str| {
        samples
            .iter()
            .filter(|s| s.thread_name == thread && leaf[&s.stack_id] == function)
            .collect::<Vec<_>>()
    };
    let waiting = in_fn("MainThread", "wait_for_device");
    assert!(
        waiting
            .iter()
            .any(|s| s.state == HostState::Idle && s.gil == Gil::Released)
    );
    let building = in_fn("MainThread", "build_tree");
    assert!(
        building
            .iter()
            .any(|s| s.state == HostState::Running && s.gil == Gil::Held)
    );
    assert!(!in_fn("tokenizer", "tokenize").is_empty());
    let build = stacks
        .iter()
        .find(|f| f.function == "build_tree" && f.depth == 0)
        .unwrap();
    assert!(build.file.ends_with("examples/workloads/host_phases.py"));
    assert_eq!(build.line, Some(17)); // `nodes.append(...)`: the workload must keep its lines
    assert_eq!(build.kind, FrameKind::Python);
    let t = trace.summary().unwrap();
    assert!(
        samples
            .iter()
            .all(|s| s.t_ns >= t.first_ns.unwrap() && s.t_ns <= t.last_ns.unwrap())
    );
}
