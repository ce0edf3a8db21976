//! `cufall report`, `cufall diff` and `cufall export` end to end, on the synthetic fixture of the
//! analysis crate and on the real recordings in `examples/` when there are any.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use predicates::prelude::*;

use cufall_testkit::fixture as common;

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

fn fails_with(args: &[&std::ffi::OsStr], needle: &str) {
    let assert = cufall().args(args).assert().failure();
    let err = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(err.contains(needle), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one message: {err}");
}

#[test]
fn report_diff_export_on_a_fixture() {
    let tmp = tempfile::tempdir().unwrap();
    let a = common::Fixture::default().write(tmp.path(), "a.cufall");
    let b = common::Fixture {
        gpu_name: "NVIDIA A100".into(),
        extra_verify_gap_us: 50,
        ..Default::default()
    }
    .write(tmp.path(), "b.cufall");
    cufall()
        .arg("report")
        .arg(&a)
        .args(["--min-gap", "50us"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "draft → verify          5  500.0 µs",
        ))
        .stdout(predicate::str::contains(
            "step/verify: idle 17% of the time; latency-bound",
        ));
    let out = cufall()
        .arg("report")
        .arg(&a)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gaps"].as_array().unwrap().len(), 13);

    cufall()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "warning: the traces come from different GPUs",
        ))
        .stdout(predicate::str::contains("verify → draft"));

    let out = tmp.path().join("a.perfetto.json");
    cufall()
        .arg("export")
        .arg(&a)
        .args(["--format", "perfetto", "-o"])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("wrote"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(!v["traceEvents"].as_array().unwrap().is_empty());

    let report = std::ffi::OsStr::new("report");
    fails_with(
        &[
            report,
            a.as_os_str(),
            "--metric".as_ref(),
            "sm__nope.avg".as_ref(),
        ],
        "no metric named `sm__nope.avg`. It records: sm__pipe_tensor_cycles_active.avg",
    );
    let missing = tmp.path().join("missing.cufall");
    fails_with(&[report, missing.as_os_str()], "does not exist");
    fails_with(
        &["diff".as_ref(), a.as_os_str(), missing.as_os_str()],
        "does not exist",
    );
}

/// Every real recording in `examples/` reports, as text and as JSON, and exports to Perfetto.
#[test]
fn report_on_example_recordings() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "cufall") && path.join("manifest.json").is_file() {
            cufall()
                .arg("report")
                .arg(&path)
                .assert()
                .success()
                .stdout(predicate::str::contains("IDLE GAPS"));
            cufall()
                .arg("report")
                .arg(&path)
                .arg("--json")
                .assert()
                .success();
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("x.json");
            cufall()
                .arg("export")
                .arg(&path)
                .args(["--format", "perfetto", "-o"])
                .arg(&out)
                .assert()
                .success();
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
            assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
        }
    }
}

/// A recording that stored a bare counter's cycles and no percentage of its peak (made before
/// cufall recorded one) says so, in the text and in `--json`; one with the percentage does not.
#[test]
fn a_raw_counter_recording_says_its_values_are_counts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    cufall()
        .arg("report")
        .arg(dir.join("h200-seed-tensor-cycles.cufall"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "note: sm__pipe_tensor_cycles_active.avg is shown as it counts, not as a percentage \
             of its peak",
        ));
    let out = cufall()
        .arg("report")
        .arg(dir.join("h200-seed-tensor-cycles.cufall"))
        .arg("--json")
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let notes = v["notes"].to_string();
    assert!(notes.contains("raw_counter"), "{notes}");
    cufall()
        .arg("report")
        .arg(dir.join("h200-matmul-copy.cufall"))
        .assert()
        .success()
        .stdout(predicate::str::contains("shown as it counts").not());
}

/// The report shown in `docs/analysis.md` is what `cufall report` prints on the bundled recording
/// today (the docs say what the code does).
#[test]
fn the_report_in_the_docs_is_the_real_output() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/analysis.md")).unwrap();
    let cmd = "$ cufall report examples/h200-torch-phases-api.cufall\n";
    let start = docs.find(cmd).expect("the example is in docs/analysis.md") + cmd.len();
    let shown = &docs[start..start + docs[start..].find("```").unwrap()];
    let out = Command::cargo_bin("cufall")
        .unwrap()
        .current_dir(&root)
        .args(["report", "examples/h200-torch-phases-api.cufall"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
}

/// A samples segment cut short (a truncated copy): every command warns about it, and its span is
/// missing data (a drop), never idle time or a gap.
#[test]
fn a_cut_segment_is_warned_about_and_never_idle() {
    let tmp = tempfile::tempdir().unwrap();
    let good = common::Fixture::default().write(tmp.path(), "good.cufall");
    let cut = common::Fixture::default().write(tmp.path(), "cut.cufall");
    let seg = cut.join("samples/000002.parquet");
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &bytes[..bytes.len() / 3]).unwrap();
    let warning = "samples/000002.parquet is truncated";

    let json = |trace: &std::path::Path| -> serde_json::Value {
        let out = cufall()
            .arg("report")
            .arg(trace)
            .args(["--min-gap", "50us", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (g, c) = (json(&good), json(&cut));
    assert!(
        c["warnings"].to_string().contains(warning),
        "{}",
        c["warnings"]
    );
    let dev0 = |v: &serde_json::Value, k: &str| v["whole_run"]["devices"][0][k].as_i64().unwrap();
    assert!(
        dev0(&c, "idle_ns") <= dev0(&g, "idle_ns"),
        "the hole is not idle"
    );
    assert!(
        dev0(&c, "dropped_ns") > dev0(&g, "dropped_ns"),
        "the hole is missing data"
    );
    assert!(
        c["drops"].to_string().contains("segment_unreadable"),
        "{}",
        c["drops"]
    );
    // No gap starts inside the unreadable span.
    let span = c["drops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["by_reason"]["segment_unreadable"].is_object())
        .map(|d| d["dropped_ns"].as_i64().unwrap())
        .unwrap();
    assert!(span > 0);
    assert!(c["gaps"].as_array().unwrap().len() <= g["gaps"].as_array().unwrap().len());

    cufall()
        .arg("report")
        .arg(&cut)
        .assert()
        .success()
        .stdout(predicate::str::contains(warning));
    cufall()
        .arg("diff")
        .arg(&good)
        .arg(&cut)
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("B: {warning}")));
    for format in ["parquet", "csv", "perfetto"] {
        let out = tmp.path().join(format!("out-{format}"));
        cufall()
            .arg("export")
            .arg(&cut)
            .args(["--format", format, "-o"])
            .arg(&out)
            .assert()
            .success()
            .stderr(predicate::str::contains(warning));
    }
    let drops = std::fs::read_to_string(tmp.path().join("out-csv/drops.csv")).unwrap();
    assert!(drops.contains("segment_unreadable"), "{drops}");
    for cmd in ["view", "replay"] {
        cufall()
            .arg(cmd)
            .arg(&cut)
            .args(["--print", "--width", "100"])
            .assert()
            .success()
            .stderr(predicate::str::contains(warning));
    }
}

/// Library NVTX domains are not phases unless `--phases` names them; a domain the trace does not
/// record is one error listing those it does.
#[test]
fn phases_choose_the_program_s_ranges_and_name_library_domains_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let t = library_trace(tmp.path());
    let out = cufall().arg("report").arg(&t).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("cub::"), "{text}");
    assert!(
        text.contains("make them phases with `--phases program,domain:CCCL,domain:TSL`"),
        "{text}"
    );
    cufall()
        .arg("report")
        .arg(&t)
        .args(["--phases", "program,domain:CCCL", "--min-gap", "50us"])
        .assert()
        .success()
        // The text cuts a place to 80 columns (the whole name is in --json).
        .stdout(predicate::str::contains(
            "step/draft/cub::DeviceScan::InclusiveScan → step/verify/cub::DeviceScan::Inclus…",
        ));
    let out = cufall()
        .arg("report")
        .arg(&t)
        .args(["--json", "--phases", "depth:0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["phases"].as_array().unwrap().len(), 1);
    assert_eq!(v["phase_domains"]["phases"], "program,depth:0");
    assert_eq!(v["phase_domains"]["left_out"][0]["domain"], "CCCL");
    assert_eq!(v["phase_domains"]["left_out"][0]["ranges"], 6);

    let report = std::ffi::OsStr::new("report");
    let phases = std::ffi::OsStr::new("--phases");
    fails_with(
        &[report, t.as_os_str(), phases, "domain:NCCL".as_ref()],
        "no NVTX range of domain NCCL in this trace; it records domain:default (9 ranges), \
         domain:CCCL (6 ranges, CUB and Thrust), domain:TSL (3 ranges",
    );
    // A bad value is clap's usage error, naming the terms there are.
    cufall()
        .arg("report")
        .arg(&t)
        .args(["--phases", "cccl"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "`cccl` is not a phase selection: use `program`, `all`, `domain:NAME`",
        ));
}

/// A fixture whose ranges include CUB's (domain CCCL) and XLA's (domain TSL).
fn library_trace(dir: &std::path::Path) -> std::path::PathBuf {
    common::Fixture {
        library_nvtx: true,
        ..Default::default()
    }
    .write(dir, "lib.cufall")
}

/// `diff --phases` takes a domain recorded in either trace.
#[test]
fn diff_takes_library_phases_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let t = library_trace(tmp.path());
    let phases = std::ffi::OsStr::new("--phases");
    let plain = common::Fixture::default().write(tmp.path(), "plain.cufall");
    cufall()
        .arg("diff")
        .arg(&t)
        .arg(&plain)
        .args(["--phases", "program,domain:CCCL"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "step/draft/cub::DeviceScan::InclusiveScan",
        ));
    fails_with(
        &[
            "diff".as_ref(),
            t.as_os_str(),
            plain.as_os_str(),
            phases,
            "domain:TSX".as_ref(),
        ],
        "no NVTX range of domain TSX",
    );
}

/// `view`'s phase lane shows the chosen phases only.
#[test]
fn view_shows_the_chosen_phases_only() {
    let tmp = tempfile::tempdir().unwrap();
    let t = library_trace(tmp.path());
    let phases = std::ffi::OsStr::new("--phases");
    let frame = |extra: &[&str]| {
        let out = cufall()
            .arg("view")
            .arg(&t)
            .args([
                "--print", "--width", "200", "--from", "300us", "--to", "600us",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let lane = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("phase"))
            .unwrap_or_default()
            .to_string()
    };
    let default = lane(&frame(&[]));
    // A CUB call is three columns wide here: `|cu`.
    assert!(
        default.contains("|draft") && !default.contains("|cu"),
        "{default}"
    );
    let cccl = lane(&frame(&["--phases", "domain:CCCL"]));
    assert!(cccl.contains("|cu") && !cccl.contains("draft"), "{cccl}");
    fails_with(
        &[
            "view".as_ref(),
            t.as_os_str(),
            "--print".as_ref(),
            phases,
            "domain:NCCL".as_ref(),
        ],
        "no NVTX range of domain NCCL",
    );
}
