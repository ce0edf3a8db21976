//! `cufall info` end to end: a good trace, and every kind of bad input.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use predicates::prelude::*;
use std::fs;

use cufall_testkit::tables as common;

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

#[test]
fn info_summarises_a_trace_as_text_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t.cufall");
    common::write_full(&dir, 2);
    cufall()
        .arg("info")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "GPU 0  NVIDIA H200 (GH100): 2000 samples",
        ))
        .stdout(predicate::str::contains(
            "GPU 1  NVIDIA H200 (GH100): 2000 samples, 1 drops",
        ))
        .stdout(predicate::str::contains(
            "dram__throughput.avg.pct_of_peak_sustained_elapsed [%]",
        ))
        .stdout(predicate::str::contains("prefill"))
        .stdout(predicate::str::contains("interval      10.0 µs"))
        .stdout(predicate::str::contains("kernels       2"));
    let out = cufall()
        .arg("info")
        .arg(&dir)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"][1]["samples"], 2000);
    assert_eq!(v["devices"][1]["drops"], 1);
    assert_eq!(v["interval_ns"], 10_000);
    assert_eq!(v["kernels"], 2);
    assert_eq!(v["status"], "complete");
    assert_eq!(v["nvtx_ranges"].as_array().unwrap().len(), 2);
}

fn fails_with(args: &[&std::ffi::OsStr], needle: &str) {
    let assert = cufall().args(args).assert().failure();
    let out = assert.get_output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert!(!err.contains("RUST_BACKTRACE"), "stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one message: {err}");
}

#[test]
fn info_bad_inputs_give_one_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let info = std::ffi::OsStr::new("info");

    let missing = tmp.path().join("missing.cufall");
    fails_with(&[info, missing.as_os_str()], "does not exist");

    let plain = tmp.path().join("photos");
    fs::create_dir(&plain).unwrap();
    fails_with(&[info, plain.as_os_str()], "no manifest.json");

    let garbage = tmp.path().join("garbage.cufall");
    fs::write(&garbage, [0u8, 1, 2, 3, 0xff]).unwrap();
    fails_with(&[info, garbage.as_os_str()], "is a file");

    // A trace whose sample segment was cut (truncated copy): still opens, warns.
    let dir = tmp.path().join("cut.cufall");
    common::write_full(&dir, 2);
    let seg = dir.join("samples/000001.parquet");
    let bytes = fs::read(&seg).unwrap();
    fs::write(&seg, &bytes[..bytes.len() / 2]).unwrap();
    cufall()
        .arg("info")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("1000 samples"))
        .stdout(predicate::str::contains(
            "warning: samples/000001.parquet is truncated",
        ));

    // Garbage bytes inside a segment: a clear error naming the file.
    let dir = tmp.path().join("bad.cufall");
    common::write_full(&dir, 1);
    let seg = dir.join("samples/000000.parquet");
    let mut bytes = fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&seg, &bytes).unwrap();
    fails_with(
        &[info, dir.as_os_str()],
        "samples/000000.parquet fails its checksum",
    );

    // A newer major version.
    let dir = tmp.path().join("new.cufall");
    common::write_full(&dir, 1);
    let m = dir.join("manifest.json");
    let text = fs::read_to_string(&m).unwrap().replace(
        &format!(
            "\"{}.{}\"",
            cufall_trace::SCHEMA_MAJOR,
            cufall_trace::SCHEMA_MINOR
        ),
        "\"9.0\"",
    );
    fs::write(&m, text).unwrap();
    fails_with(&[info, dir.as_os_str()], "Upgrade cufall");
}

/// Info lists NVTX ranges per domain, marked program or library, and the capture table's
/// problems, one line per kind.
#[test]
fn info_lists_domains_and_capture_problems() {
    let tmp = tempfile::tempdir().unwrap();
    let t = cufall_testkit::fixture::Fixture {
        library_nvtx: true,
        capture_problems: true,
        ..Default::default()
    }
    .write(tmp.path(), "lib.cufall");
    let out = cufall().arg("info").arg(&t).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  (default)  program  9 ranges: phases\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  CCCL       library  6 ranges (CUB and Thrust): not phases unless --phases names the domain\n"
        ),
        "{text}"
    );
    assert!(text.contains("  TSL        library  3 ranges"), "{text}");
    // The names listed are the program's, not the libraries'.
    assert!(!text.contains("cub::"), "{text}");
    assert!(
        text.contains(
            "capture problem: cupti_records_dropped: CUPTI dropped 17 activity record(s)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "capture problem: no_activity_records: kernel capture was set up in 2 processes but no \
             kernel or copy records arrived (pid 1234, 1240): another CUPTI client"
        ),
        "{text}"
    );
    assert!(
        text.contains("capture: quiet_processes: 2 processes"),
        "{text}"
    );
    assert!(
        text.contains(
            "capture event: future_event: 1 row(s), count 3: something a newer recorder says"
        ),
        "{text}"
    );
    assert!(!text.contains("cuda_attached"), "{text}");
    let out = cufall().arg("info").arg(&t).arg("--json").output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nvtx_domains"][1]["domain"], "CCCL");
    assert_eq!(v["nvtx_domains"][1]["phases_by_default"], false);
    assert_eq!(v["capture"][0]["event"], "cupti_records_dropped");
    assert_eq!(v["capture"][0]["severity"], "problem");
    assert_eq!(v["capture"].as_array().unwrap().len(), 4);

    // The report says the same.
    cufall()
        .arg("report")
        .arg(&t)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "  capture problem: no_activity_records: kernel capture was set up in 2 processes",
        ));
}

/// The capture table's counts are another process's bytes: counts of u64::MAX (missed host
/// samples, processes without Python) must give a line, not an overflow panic.
#[test]
fn info_survives_huge_host_capture_counts() {
    use cufall_trace::model::CaptureEvent;
    use cufall_trace::{Trace, TraceWriter, WriterOptions};
    let tmp = tempfile::tempdir().unwrap();
    let src = cufall_testkit::fixture::Fixture {
        host_stacks: true,
        ..Default::default()
    }
    .write(tmp.path(), "src.cufall");
    let src = Trace::open(&src).unwrap();
    let path = tmp.path().join("huge.cufall");
    let mut w =
        TraceWriter::create(&path, src.manifest().clone(), WriterOptions::default()).unwrap();
    w.append_stacks(&src.stacks().unwrap()).unwrap();
    w.append_host_samples(&src.host_samples().unwrap()).unwrap();
    let ev = |event: &str| CaptureEvent {
        t_ns: src.manifest().created_unix_ns,
        pid: 1234,
        event: event.into(),
        count: u64::MAX,
        detail: String::new(),
    };
    w.append_capture(&[
        ev("host_samples_missed"),
        ev("host_samples_missed"),
        ev("host_not_python"),
    ])
    .unwrap();
    w.finish(src.manifest().end_unix_ns.unwrap()).unwrap();
    for args in [&["info"][..], &["info", "--json"][..]] {
        let out = cufall().args(args).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&u64::MAX.to_string()), "{text}");
    }
}
