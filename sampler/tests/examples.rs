//! The bundled recordings in `examples/`: each reads, holds what its README line says (NVTX
//! phases and kernels where capture was on), stays small, and the CUDA-graphs pair shows the idle
//! time that graphs close, as `cufall report` and `cufall diff` print it.

use std::path::{Path, PathBuf};

use cufall_analysis::report::{Report, ReportOptions, build_report};
use cufall_trace::Trace;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Every `*.cufall` folder under `examples/` (one level of subfolders too).
fn recordings() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![examples_dir()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("examples/ reads") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "cufall") {
                out.push(p);
            } else if p.is_dir() && d == examples_dir() {
                dirs.push(p);
            }
        }
    }
    out.sort();
    out
}

fn bytes_of(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("reads") {
        let p = e.expect("entry").path();
        total += if p.is_dir() {
            bytes_of(&p)
        } else {
            p.metadata().expect("metadata").len()
        };
    }
    total
}

#[test]
fn every_recording_reads_and_holds_what_its_capture_recorded() {
    let all = recordings();
    assert!(all.len() >= 11, "recordings found: {all:?}");
    let mut total = 0;
    let mut with_phases = 0;
    for path in &all {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let trace = Trace::open(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            trace.warnings().is_empty(),
            "{name}: {:?}",
            trace.warnings()
        );
        let s = trace.summary().unwrap_or_else(|e| panic!("{name}: {e}"));
        let size = bytes_of(path);
        assert!(
            size < 4 << 20,
            "{name} holds {size} bytes (at most 4 MB each)"
        );
        total += size;
        let m = trace.manifest();
        let captured = m.schema_version != "1.0" && m.counters_unavailable.is_none();
        let workload = m.target_command.as_deref().unwrap_or_default().join(" ");
        if captured && (workload.contains("specdec") || workload.contains("torch_phases")) {
            assert!(!s.nvtx_names.is_empty(), "{name}: no NVTX phases");
            assert!(s.kernels > 0, "{name}: no kernels");
            with_phases += 1;
        }
        if m.schema_version == "1.0" {
            assert_eq!(s.kernels, 0, "{name}: a 1.0 trace has no kernels");
        }
        if m.counters_unavailable.is_none() {
            assert!(
                s.devices.values().all(|d| d.samples > 0),
                "{name}: a device without samples"
            );
        }
    }
    assert!(
        with_phases >= 7,
        "{with_phases} captured engine/PyTorch recordings"
    );
    assert!(
        total < 16 << 20,
        "examples/ holds {total} bytes (at most 16 MB)"
    );
}

fn report(name: &str) -> Report {
    let trace = Trace::open(examples_dir().join(name)).expect("opens");
    build_report(&trace, &ReportOptions::default()).expect("report")
}

/// (total time, idle fraction) of a phase.
fn phase(r: &Report, path: &str) -> (i64, f64) {
    let p = r
        .phases
        .iter()
        .find(|p| p.path == path)
        .unwrap_or_else(|| panic!("no phase {path}"));
    (p.total_ns.get(), p.idle_fraction.expect("sampled"))
}

#[test]
fn cuda_graphs_close_the_launch_gaps_of_draft_and_verify() {
    let off = report("h200-specdec-ctx256-graphs-off.cufall");
    let on = report("h200-specdec-ctx256-graphs-on.cufall");
    for (path, min_pp, min_cut) in [("verify", 20.0, 0.30), ("draft", 8.0, 0.20)] {
        let (t_off, idle_off) = phase(&off, path);
        let (t_on, idle_on) = phase(&on, path);
        let pp = (idle_off - idle_on) * 100.0;
        let cut = 1.0 - t_on as f64 / t_off as f64;
        assert!(pp >= min_pp, "{path}: idle {idle_off:.3} -> {idle_on:.3}");
        assert!(cut >= min_cut, "{path}: {t_off} ns -> {t_on} ns");
    }
}
