//! The `specdec` binary: bad input gets one `specdec: error:` line and exit status 1, never a
//! panic; the CPU backend prints a JSON report.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::{Command, Output};

fn specdec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(args)
        .output()
        .unwrap()
}

fn assert_clean_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.starts_with("specdec: error: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn context_over_the_maximum() {
    let out = specdec(&[
        "--preset",
        "tiny",
        "--context",
        "1000",
        "--max-context",
        "512",
    ]);
    assert_clean_error(&out, "--max-context 512");
}

#[test]
fn missing_and_malformed_weights() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.safetensors");
    let out = specdec(&["--weights", missing.to_str().unwrap()]);
    assert_clean_error(&out, "cannot read weights file");
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"definitely not safetensors").unwrap();
    let out = specdec(&["--weights", junk.to_str().unwrap()]);
    assert_clean_error(&out, "not a valid safetensors file");
}

#[test]
fn bad_knobs() {
    assert_clean_error(&specdec(&["--page-size", "32"]), "--page-size 32");
    assert_clean_error(&specdec(&["--preset", "huge"]), "unknown preset");
}

/// With a GPU the tiny model's head dimension is refused, without one the driver is missing:
/// either way a clean error, never a panic.
#[test]
fn gpu_backend_errors_cleanly() {
    let out = specdec(&["--preset", "tiny", "--context", "16", "--prompt-len", "8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NVIDIA") || err.contains("CUDA") || err.contains("head-dim"),
        "{err}"
    );
    assert_clean_error(&out, "");
}

#[test]
fn cpu_backend_json_report() {
    let out = specdec(&[
        "--backend",
        "cpu",
        "--preset",
        "tiny",
        "--context",
        "20",
        "--prompt-len",
        "8",
        "--new-tokens",
        "12",
        "--width",
        "2",
        "--depth",
        "3",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backend"], "cpu");
    assert!(v["steps"].as_u64().unwrap() >= 1);
    let c = v["mean_committed_per_step"].as_f64().unwrap();
    assert!((1.0..=4.0).contains(&c), "{c}");
}
