//! Recordings of third-party programs made on an H200 (`examples/`): a Hugging Face program
//! whose PyTorch ops add CUB's `CCCL` ranges, and a model server recorded by window. Their
//! reports must read as the program's own: phases and gap places from its ranges only, the
//! window alone in the trace.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;

fn report(trace: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = |json: bool| {
        let mut c = Command::cargo_bin("cufall").unwrap();
        c.current_dir(&root).args(["report", trace]).args(extra);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    (
        serde_json::from_slice(&run(true)).unwrap(),
        String::from_utf8(run(false)).unwrap(),
    )
}

fn phase_paths(r: &serde_json::Value) -> Vec<String> {
    r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_hugging_face_programs_phases_are_its_own_and_cub_stays_out() {
    let (r, text) = report("examples/h200-hf-generate.cufall", &[]);
    assert_eq!(
        phase_paths(&r),
        ["load", "warmup", "greedy", "sampled", "assisted"]
    );
    for g in r["gap_groups"].as_array().unwrap() {
        let place = g.to_string();
        assert!(
            !place.contains("cub::"),
            "a gap placed at a library range: {place}"
        );
    }
    assert_eq!(r["phase_domains"]["left_out"][0]["domain"], "CCCL");
    assert!(
        text.contains("not phases: CCCL (163 ranges"),
        "{}",
        &text[..text.len().min(2000)]
    );
    // Asked for, CUB's ranges become phases again, nested in the program's.
    let (with_cub, _) = report(
        "examples/h200-hf-generate.cufall",
        &["--phases", "program,domain:CCCL"],
    );
    let paths = phase_paths(&with_cub);
    assert!(
        paths.iter().any(|p| p.starts_with("sampled/cub::")),
        "{paths:?}"
    );
}

#[test]
fn a_server_recorded_by_window_holds_the_window_only() {
    let (r, text) = report("examples/h200-serve-window.cufall", &[]);
    let span_ns = r["end_ns"].as_i64().unwrap() - r["start_ns"].as_i64().unwrap();
    // The window lasted 121 ms; the program ran for 6.8 s, 2 s of it loading the model.
    assert!(
        (100_000_000..200_000_000).contains(&span_ns),
        "span {span_ns} ns"
    );
    let paths = phase_paths(&r);
    for p in ["request", "request/prefill", "request/decode"] {
        assert!(paths.iter().any(|x| x == p), "{paths:?}");
    }
    assert!(
        !paths.iter().any(|x| x == "load"),
        "the model load is outside the window"
    );
    assert!(
        text.contains("capture: capture_window: the recording kept capture windows only"),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(text.contains("KERNELS"), "the window's kernels are tabled");
}
