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

/// A `specdec` run that must succeed (its stderr is the failure message).
fn specdec_ok(args: &[&str]) -> Output {
    let out = specdec(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The JSON report of a `specdec` run that must succeed.
fn specdec_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&specdec_ok(args).stdout).unwrap()
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
    let v = specdec_json(&[
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
    assert_eq!(v["backend"], "cpu");
    assert!(v["steps"].as_u64().unwrap() >= 1);
    let c = v["mean_committed_per_step"].as_f64().unwrap();
    assert!((1.0..=4.0).contains(&c), "{c}");
}

/// `--bench` times GPU kernels; on the CPU backend it is refused with the fix, not ignored.
#[test]
fn bench_on_the_cpu_backend_is_refused() {
    let out = specdec(&["--backend", "cpu", "--preset", "tiny", "--bench"]);
    assert_clean_error(&out, "--bench");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--backend cpu") && err.contains("drop --bench"),
        "{err}"
    );
}

/// The default draft of a 2-layer model has 1 layer; a 1-layer target cannot have a smaller
/// self-speculative draft and is refused with the ways out.
#[test]
fn default_draft_is_smaller_than_the_target() {
    let base = [
        "--backend",
        "cpu",
        "--preset",
        "tiny",
        "--context",
        "16",
        "--prompt-len",
        "8",
        "--new-tokens",
        "6",
    ];
    let v = specdec_json(&[&base[..], &["--json"]].concat());
    assert_eq!(v["run"]["draft_layers"], 1);
    assert_eq!(v["model"]["layers"], 2);
    let out = specdec(&[&base[..], &["--layers", "1"]].concat());
    assert_clean_error(&out, "self-speculative draft would be the whole model");
    // A small draft of a 1-layer target is a quarter of its width: allowed.
    specdec_ok(&[&base[..], &["--layers", "1", "--draft", "small"]].concat());
}

/// The text report spells choices as the options do.
#[test]
fn text_report_uses_option_spellings() {
    let out = specdec_ok(&[
        "--backend",
        "cpu",
        "--preset",
        "tiny",
        "--context",
        "16",
        "--prompt-len",
        "8",
        "--new-tokens",
        "6",
        "--verify-attn",
        "scattered",
        "--graphs",
        "off",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("draft self-spec (1 layers)"), "{text}");
    assert!(
        text.contains("verify attention scattered, graphs off"),
        "{text}"
    );
    assert!(text.contains(", mode spec:"), "{text}");
    assert!(
        !text.contains("SelfSpec") && !text.contains("Scattered"),
        "{text}"
    );
}

/// `--help` shows an example of each kind of run; `--mode speculative` (the JSON spelling)
/// is accepted as well as `spec`.
#[test]
fn help_has_examples_and_modes_parse() {
    let out = specdec(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Examples:") && help.contains("specdec check"),
        "{help}"
    );
    assert!(help.contains("--draft-layers <DRAFT_LAYERS>"), "{help}");
    let v = specdec_json(&[
        "--backend",
        "cpu",
        "--preset",
        "tiny",
        "--context",
        "8",
        "--prompt-len",
        "4",
        "--new-tokens",
        "3",
        "--mode",
        "speculative",
        "--json",
    ]);
    assert_eq!(v["mode"], "speculative");
}

/// A malformed --config file names the file and the JSON error on one line.
#[test]
fn malformed_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("model.json");
    std::fs::write(&cfg, b"{\"layers\": 2,").unwrap();
    let out = specdec(&["--backend", "cpu", "--config", cfg.to_str().unwrap()]);
    assert_clean_error(&out, "is not a valid model configuration: ");
    let out = specdec(&["--backend", "cpu", "--config", "/nonexistent/model.json"]);
    assert_clean_error(&out, "cannot read --config /nonexistent/model.json: ");
}
