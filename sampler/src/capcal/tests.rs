use super::*;
use std::os::unix::fs::PermissionsExt;

fn measured(ns: f64) -> Measured {
    Measured {
        ns,
        low_ns: ns - 100.0,
        high_ns: ns + 100.0,
        bare_ns: 2_000.0,
        rounds: 15,
        launches: 200,
        graph_nodes: None,
    }
}

/// A stand-in for `cufall`: a shell script that prints `stdout`, sleeps `sleep` seconds and
/// exits with `code`, whatever it is asked; returns it and the folder that holds it.
fn fake_exe(stdout: &str, sleep: f64, code: i32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cufall");
    let body = format!(
        "#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\necho 'a message on stderr' >&2\nsleep {sleep}\nexit {code}\n"
    );
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, path)
}

use std::path::PathBuf;

#[test]
fn the_cost_is_the_median_difference_with_its_spread_and_the_bare_launch() {
    let m = Measured::from_rounds(
        &[900.0, 1_100.0, 1_000.0, 5_000.0, f64::NAN],
        &[2_000.0, 2_100.0, 1_900.0, 2_050.0, 1_950.0],
        200,
    );
    assert_eq!(m.ns, 1_100.0, "the median of the finite rounds");
    assert_eq!((m.low_ns, m.high_ns), (900.0, 5_000.0));
    assert_eq!(m.bare_ns, 2_000.0);
    assert_eq!((m.rounds, m.launches), (5, 200));
    let per = m.per_node(4);
    assert_eq!((per.ns, per.bare_ns), (275.0, 500.0));
}

#[test]
fn each_capture_kind_needs_its_cost_kind_and_nvtx_none() {
    let k = |s| cost_kinds(Kinds::parse(s).unwrap());
    assert_eq!(k("nvtx"), vec![]);
    assert_eq!(
        k("nvtx,kernels,memcpy,graphs"),
        vec![CostKind::Kernel, CostKind::Memcpy, CostKind::Graph]
    );
    assert_eq!(k("graph-nodes"), vec![CostKind::GraphNode]);
    assert_eq!(k("api"), vec![]);
}

#[test]
fn lines_become_outcomes_and_a_kind_the_process_did_not_mention_is_unknown() {
    let out = [
        serde_json::to_string(&ChildLine::measured("kernel", measured(1_500.0))).unwrap(),
        "not json at all".to_string(),
        serde_json::to_string(&ChildLine::failed("memcpy", "cuMemAlloc failed")).unwrap(),
        // A figure that is not a time is not a cost.
        r#"{"kind":"graph","measured":{"ns":null,"low_ns":0,"high_ns":0,"bare_ns":1,"rounds":3,"launches":200}}"#
            .to_string(),
    ]
    .join("\n");
    let got = outcomes(
        &[
            CostKind::Kernel,
            CostKind::Memcpy,
            CostKind::Graph,
            CostKind::GraphNode,
        ],
        &out,
    );
    assert_eq!(got[0], (CostKind::Kernel, Ok(measured(1_500.0))));
    assert_eq!(
        got[1],
        (CostKind::Memcpy, Err("cuMemAlloc failed".to_string()))
    );
    assert!(got[2].1.is_err(), "{got:?}");
    assert_eq!(
        got[3],
        (
            CostKind::GraphNode,
            Err("the calibration process did not measure it".to_string())
        )
    );
}

#[test]
fn measured_kinds_become_cost_rows_and_failed_ones_unknown_rows_never_zero() {
    let c = Calibration {
        kinds: vec![
            (
                CostKind::Graph,
                Ok(Measured {
                    graph_nodes: Some(8),
                    ..measured(7_940.4)
                }),
            ),
            (CostKind::Kernel, Ok(measured(-30.0))),
            (CostKind::Memcpy, Err("cuInit failed: no device".into())),
        ],
        took: Duration::from_millis(900),
    };
    let rows = rows(&c, 42);
    assert_eq!(rows.len(), 3);
    let graph = &rows[0];
    assert!(graph.is(CaptureEventKind::Cost {
        kind: CostKind::Graph,
        measured: true
    }));
    assert_eq!((graph.count, graph.t_ns, graph.pid), (7_940, 42, 0));
    assert!(
        graph
            .detail
            .starts_with("7940 ns per graph launch: CUPTI's tracing"),
        "{}",
        graph.detail
    );
    assert!(graph.detail.contains("a graph of 8 empty kernels"));
    assert!(graph.detail.contains("an untraced one took 2000 ns"));
    // Nothing told apart from noise: 1 ns and said so, not 0 (which reads as unknown).
    assert_eq!(rows[1].count, 1);
    assert!(
        rows[1].detail.contains("not told apart"),
        "{}",
        rows[1].detail
    );
    assert!(rows[2].is(CaptureEventKind::Cost {
        kind: CostKind::Memcpy,
        measured: false
    }));
    assert_eq!(rows[2].count, 0);
    assert_eq!(rows[2].detail, "not measured: cuInit failed: no device");
    let line = summary_line(&c).unwrap();
    assert_eq!(
        line,
        "capture cost per event, measured after the program in 0.9 s: graph launch 7.9 µs; \
         kernel launch 1 ns; copy unknown (cuInit failed: no device)"
    );
}

#[test]
fn a_process_that_prints_its_lines_is_read() {
    let line = serde_json::to_string(&ChildLine::measured("graph", measured(8_000.0))).unwrap();
    let (_dir, exe) = fake_exe(&line, 0.0, 0);
    let c = run(
        &exe,
        Path::new("/nonexistent/libcufall_inject.so"),
        Kinds::parse("nvtx,graphs").unwrap(),
        Duration::from_secs(20),
    );
    assert_eq!(c.kinds.len(), 1, "{c:?}");
    assert_eq!(c.kinds[0], (CostKind::Graph, Ok(measured(8_000.0))));
}

#[test]
fn a_process_that_fails_hangs_or_cannot_start_leaves_every_kind_unknown_with_why() {
    let kinds = Kinds::parse("kernels,graphs").unwrap();
    let lib = Path::new("/nonexistent/libcufall_inject.so");
    let (_d1, crashing) = fake_exe("", 0.0, 3);
    let c = run(&crashing, lib, kinds, Duration::from_secs(20));
    assert_eq!(c.kinds.len(), 2);
    for (_, o) in &c.kinds {
        let why = o.as_ref().unwrap_err();
        assert!(
            why.contains("failed (exit status: 3): a message on stderr"),
            "{why}"
        );
    }
    let (_d2, hanging) = fake_exe("", 30.0, 0);
    let t0 = Instant::now();
    let c = run(&hanging, lib, kinds, Duration::from_millis(300));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the process was stopped"
    );
    for (_, o) in &c.kinds {
        assert!(o.as_ref().unwrap_err().contains("did not finish within"));
    }
    let c = run(Path::new("/nonexistent/cufall"), lib, kinds, TIMEOUT);
    for (_, o) in &c.kinds {
        assert!(o.as_ref().unwrap_err().contains("could not start"));
    }
}

#[test]
fn nothing_to_calibrate_for_nvtx_alone() {
    let c = run(
        Path::new("/nonexistent/cufall"),
        Path::new("/nonexistent/lib.so"),
        Kinds::NVTX,
        TIMEOUT,
    );
    assert!(c.kinds.is_empty());
    assert_eq!(summary_line(&c), None);
}

#[test]
fn cuptis_folder_goes_first_in_the_calibration_process_search_path() {
    let dir = Path::new("/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib");
    assert_eq!(prepend_dir(dir, None), dir.as_os_str());
    assert_eq!(
        prepend_dir(dir, Some("/usr/local/cuda/lib64".into())),
        std::ffi::OsString::from(
            "/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib:/usr/local/cuda/lib64"
        )
    );
    assert_eq!(prepend_dir(dir, Some("".into())), dir.as_os_str());
}

/// A calibration process that writes more to stderr than a pipe holds (CUDA and CUPTI may warn
/// at length) is still read, not stalled into a timeout.
#[test]
fn a_process_that_writes_much_to_stderr_is_not_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("cufall");
    let line = serde_json::to_string(&ChildLine::measured("graph", measured(2_500.0))).unwrap();
    std::fs::write(
        &exe,
        format!("#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' x >&2\necho '{line}'\n"),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = run(
        &exe,
        Path::new("/nonexistent/libcufall_inject.so"),
        Kinds::parse("graphs").unwrap(),
        Duration::from_secs(20),
    );
    assert_eq!(c.kinds, vec![(CostKind::Graph, Ok(measured(2_500.0)))]);
}
