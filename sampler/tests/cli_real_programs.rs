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

/// The host-stack shares of a gap class's launching thread: (function, file's last part, line,
/// share, idle samples over samples).
fn launching_frames(r: &serde_json::Value, class: &str) -> Vec<(String, String, u64, f64, f64)> {
    let classes = r["host"]["gap_classes"].as_array().unwrap();
    let c = classes
        .iter()
        .find(|c| c["name"] == class)
        .unwrap_or_else(|| panic!("no host class {class}: {classes:?}"));
    c["launching"]["self_frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap();
            (
                f["function"].as_str().unwrap().to_string(),
                file.rsplit('/').next().unwrap().to_string(),
                f["line"].as_u64().unwrap_or(0),
                f["share"].as_f64().unwrap(),
                f["idle_samples"].as_f64().unwrap() / f["samples"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn host_stacks_name_the_sleep_between_draft_and_verify() {
    // torch_phases.py sleeps 2 ms (line 64) between its draft and verify ranges, recorded on an
    // H200 with host stacks on (the default).
    let (r, text) = report("examples/h200-torch-phases-host.cufall", &[]);
    let frames = launching_frames(&r, "draft → verify");
    let (function, file, line, share, idle) = &frames[0];
    assert_eq!(
        (function.as_str(), file.as_str(), *line),
        ("main", "torch_phases.py", 64)
    );
    assert!(*share > 0.8 && *share <= 1.0, "{frames:?}");
    assert!(*idle > 0.9, "the sleep is waiting, not running: {frames:?}");
    assert!(
        text.contains("draft → verify (40 gap(s)") && text.contains("in main (torch_phases.py) "),
        "{}",
        &text[..text.len().min(4000)]
    );
}

#[test]
fn host_stacks_of_hugging_face_generate_show_its_sampling_code() {
    // Sampled generation's gaps: the host in transformers' logits processors, not the GPU.
    let (r, _) = report("examples/h200-hf-generate-host.cufall", &[]);
    let frames = launching_frames(&r, "sampled");
    assert!(
        frames
            .iter()
            .take(3)
            .any(|(_, file, ..)| file == "logits_process.py"),
        "{frames:?}"
    );
    assert!(frames.iter().all(|f| f.3 <= 1.0), "{frames:?}");
}

#[test]
fn native_host_frames_of_the_engine_show_cublas_under_its_draft_gaps() {
    // specdec (Rust, no Python) recorded on an H200 with host stacks: its threads are read
    // through perf events; the engine's own symbols and cuBLAS's exported ones are named.
    let (r, text) = report("examples/h200-specdec-graphs-on-native-host.cufall", &[]);
    let classes = r["host"]["gap_classes"].as_array().unwrap();
    let draft = classes.iter().find(|c| c["name"] == "draft").unwrap();
    let inclusive = draft["launching"]["inclusive_frames"].as_array().unwrap();
    assert!(
        inclusive
            .iter()
            .any(|f| f["function"] == "cublasGemmEx" && f["kind"] == "native"),
        "{inclusive:?}"
    );
    assert!(
        text.contains("futex (libc.so.6)"),
        "{}",
        &text[..text.len().min(3000)]
    );
}

#[test]
fn a_flight_recorder_dump_reads_like_any_recording() {
    let (r, _) = report("examples/h200-flight-recorder.cufall", &[]);
    let idle = r["whole_run"]["devices"][0]["idle_fraction"].as_f64();
    assert!(idle.is_some_and(|i| i > 0.9), "{}", r["whole_run"]);
    assert!(r["gap_count"].as_u64().unwrap() >= 30);
}
