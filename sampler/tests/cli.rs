//! Command-line errors that need no GPU: each names the problem and the fix, exits non-zero,
//! never panics, and leaves no trace behind.
#![allow(clippy::unwrap_used)]

use assert_cmd::Command;
use predicates::prelude::*;

fn cufall() -> Command {
    Command::cargo_bin("cufall").unwrap()
}

fn no_panic() -> impl Predicate<str> {
    predicate::str::contains("panicked")
        .not()
        .and(predicate::str::contains("internal error").not())
}

#[test]
fn malformed_metric_is_rejected_before_touching_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    cufall()
        .args(["record", "-o"])
        .arg(dir.path().join("t.cufall"))
        .args(["--metric", "tensor"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("is not a metric name").and(no_panic()));
    assert!(!dir.path().join("t.cufall").exists());
}

#[test]
fn bad_interval_duration_and_devices_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.cufall");
    for (flag, value, needle) in [
        ("--interval", "10 parsecs", "not a duration"),
        ("--interval", "0us", "is zero"),
        ("--duration", "soon", "not a duration"),
        ("--devices", "one", "not a device list"),
        ("--full-scale", "0", "positive"),
    ] {
        cufall()
            .args(["record", "-o"])
            .arg(&out)
            .args([flag, value])
            .assert()
            .failure()
            .stderr(predicate::str::contains(needle).and(no_panic()));
    }
}

#[test]
fn sm_spread_needs_a_per_sm_metric() {
    let dir = tempfile::tempdir().unwrap();
    cufall()
        .args(["record", "-o"])
        .arg(dir.path().join("t.cufall"))
        .args([
            "--sm-spread",
            "--metric",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("per-SM metric"));
}

#[test]
fn existing_output_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.cufall");
    std::fs::create_dir(&out).unwrap();
    cufall()
        .args(["record", "-o"])
        .arg(&out)
        .assert()
        .failure()
        .stderr(predicate::str::contains("--force"));
}

#[test]
fn missing_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    cufall()
        .args(["record", "-o"])
        .arg(dir.path().join("t.cufall"))
        .args(["--", "definitely-not-a-program-cufall"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("definitely-not-a-program-cufall").and(no_panic()));
}

/// On a machine without the NVIDIA driver (CI), GPU commands explain what was looked for and
/// point to `cufall replay`. On a GPU machine this test has nothing to check.
#[test]
fn no_driver_gives_one_clear_paragraph() {
    // SAFETY-free probe: the same check cufall makes.
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.cufall");
    for args in [vec!["metrics"], vec!["record", "--duration", "1s", "-o"]] {
        let mut c = cufall();
        c.args(&args);
        if args[0] == "record" {
            c.arg(&out);
        }
        c.assert().failure().stderr(
            predicate::str::contains("libcuda")
                .and(predicate::str::contains("cufall replay"))
                .and(no_panic()),
        );
    }
    assert!(!out.exists(), "nothing may be left behind");
}

#[test]
fn capture_problems_are_explained_before_the_program_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.cufall");
    let marker = dir.path().join("ran");
    // `record [flags] -o t.cufall -- touch ran`, with the capture library named by `library`.
    let record = |library: Option<&std::path::Path>, flags: &[&str]| {
        let mut c = cufall();
        if let Some(l) = library {
            c.env("CUFALL_INJECT_LIBRARY", l);
        }
        c.args(["record", "-o"])
            .arg(&out)
            .args(flags)
            .args(["--", "touch"])
            .arg(&marker)
            .assert()
            .failure()
    };
    record(Some(&dir.path().join("missing.so")), &[]).stderr(
        predicate::str::contains("capture library libcufall_inject.so was not found")
            // The exact command, with the folder to copy it to.
            .and(predicate::str::contains(format!(
                "cp target/release/libcufall_inject.so {}/",
                dir.path().display()
            )))
            .and(predicate::str::contains("--capture none"))
            .and(no_panic()),
    );
    let not_a_library = dir.path().join("fake.so");
    std::fs::write(&not_a_library, b"#!/bin/sh\n").unwrap();
    record(Some(&not_a_library), &[])
        .stderr(predicate::str::contains("not a loadable capture library").and(no_panic()));
    record(None, &["--capture", "kernel"]).stderr(
        predicate::str::contains("unknown capture kind `kernel`")
            .and(predicate::str::contains("kernels"))
            .and(no_panic()),
    );
    record(None, &["--capture", "graphs,graph-nodes"])
        .stderr(predicate::str::contains("exclude each other").and(no_panic()));
    record(None, &["--capture-range", "profiler"]).stderr(
        predicate::str::contains("unknown capture range `profiler`")
            .and(predicate::str::contains("cuda-profiler-api"))
            .and(no_panic()),
    );
    record(None, &["--capture-range", "nvtx:"])
        .stderr(predicate::str::contains("needs a range name").and(no_panic()));
    record(
        None,
        &["--capture-range", "cuda-profiler-api", "--delay", "5s"],
    )
    .stderr(predicate::str::contains("keep one").and(no_panic()));
    record(
        None,
        &["--capture-range", "cuda-profiler-api", "--capture", "none"],
    )
    .stderr(predicate::str::contains("remove --capture none").and(no_panic()));
    assert!(!out.exists(), "nothing is written");
    assert!(!marker.exists(), "the program never started");
}

#[test]
fn a_capture_range_from_the_program_needs_a_program() {
    let dir = tempfile::tempdir().unwrap();
    cufall()
        .args(["record", "-o"])
        .arg(dir.path().join("t.cufall"))
        .args(["--capture-range", "cuda-profiler-api"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("needs a program to watch").and(no_panic()));
}

#[test]
fn a_control_request_with_no_recording_running_says_how_to_start_one() {
    let tmp = tempfile::tempdir().unwrap();
    cufall()
        .env("TMPDIR", tmp.path())
        .args(["control", "start"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("no recording that takes window signals is running")
                .and(predicate::str::contains("--capture-range signal"))
                .and(no_panic()),
        );
}

/// A program whose name starts with `cufall` (as a `cufall view` does) whose pid a control file
/// names with another start time (the file of an ended recording whose pid was reused) is
/// never signalled, and the stale file goes; a pause with nothing running is refused in one
/// line; a control folder others may write is refused with the fix.
#[test]
fn control_never_signals_a_process_only_named_cufall() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let dir = tmp.path().join(format!("cufall-control-{uid}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let bin = tmp.path().join("cufall-view");
    std::fs::copy("/bin/sleep", &bin).unwrap();
    let mut view = std::process::Command::new(&bin).arg("30").spawn().unwrap();
    let pid = view.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let file = dir.join(pid.to_string());
    std::fs::write(
        &file,
        format!(
            r#"{{"pid":{pid},"start_time":{},"kind":"record","windows":true,"what":"\u001b[2Jold.cufall","command":["cufall","record"]}}"#,
            start + 1
        ),
    )
    .unwrap();
    cufall()
        .env("TMPDIR", tmp.path())
        .args(["control", "start"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no recording that takes window signals").and(no_panic()));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        view.try_wait().unwrap().is_none(),
        "the cufall-view process was signalled"
    );
    assert!(!file.exists());
    let out = cufall()
        .env("TMPDIR", tmp.path())
        .args(["control", "pause", "--for", "30s"])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("nothing to pause: no cufall record or cufall serve"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o733)).unwrap();
    cufall()
        .env("TMPDIR", tmp.path())
        .args(["control", "stop"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("has mode 733").and(predicate::str::contains("chmod 700")),
        );
    let _ = view.kill();
    let _ = view.wait();
}

#[test]
fn view_and_report_flags_are_checked() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let trace = root.join("examples/h200-torch-phases.cufall");
    let run = |args: &[&str], needle: &str| {
        cufall()
            .args(args)
            .arg(&trace)
            .assert()
            .failure()
            .stderr(predicate::str::contains(needle).and(no_panic()));
    };
    run(
        &["view", "--print", "--from", "5s", "--to", "3s"],
        "--to (3s) must be later than --from (5s)",
    );
    run(
        &["view", "--print", "--from", "50s"],
        "is past the end: the recording lasts",
    );
    run(
        &["view", "--print", "--width", "5"],
        "--width 5 is too narrow",
    );
    run(
        &["report", "--idle-below", "5"],
        "not a fraction between 0 and 1",
    );
    // A replay checks its window too, printed or interactive (before it needs a terminal).
    run(
        &["replay", "--print", "--from", "50s"],
        "is past the end: the recording lasts",
    );
    run(
        &["replay", "--from", "50s"],
        "is past the end: the recording lasts",
    );
    run(
        &[
            "export",
            "--format",
            "perfetto",
            "--max-counter-points",
            "0",
        ],
        "0 is not in 1..",
    );
    // Without a terminal the interactive views say so instead of a raw OS error.
    for cmd in ["view", "replay"] {
        run(&[cmd], "needs a terminal");
    }
}

/// The calibration process `record` starts after the program: without the capture library
/// loaded (or without a GPU) it times nothing, and says why for each kind asked, one JSON line
/// each, never a figure.
#[test]
fn the_calibration_process_says_why_for_each_kind_it_cannot_time() {
    let out = cufall()
        .args(["calibrate-capture", "--kinds", "nvtx,kernels,graphs"])
        .env_remove("CUDA_INJECTION64_PATH")
        .assert()
        .success()
        .stderr(no_panic())
        .get_output()
        .stdout
        .clone();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["kernel", "graph"]);
    for l in &lines {
        assert!(l["measured"].is_null(), "{l}");
        assert!(!l["error"].as_str().unwrap().is_empty(), "{l}");
    }
}
