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

/// `cufall report`'s JSON of a recording in `examples/`, with extra arguments.
fn report_json(trace: &str, extra: &[&str]) -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = cufall()
        .current_dir(&root)
        .args(["report", trace, "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The kernels of each phase on a PyTorch recording: every launch is counted once in the whole
/// run, each table adds up, and the text shows short names.
#[test]
fn kernels_per_phase_on_a_real_recording() {
    let trace = "examples/h200-torch-phases.cufall";
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let info = cufall()
        .current_dir(&root)
        .args(["info", trace, "--json"])
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let v = report_json(trace, &[]);
    let tables = v["kernels"].as_array().unwrap();
    let scope = |t: &serde_json::Value, s: &str| t["scope"] == s;
    let whole: Vec<&serde_json::Value> = tables.iter().filter(|t| scope(t, "whole_run")).collect();
    assert_eq!(whole.len(), 1, "one GPU");
    assert_eq!(whole[0]["count"], info["kernels"], "every record once");
    let phases: Vec<&str> = tables
        .iter()
        .filter(|t| scope(t, "phase"))
        .map(|t| t["phase"].as_str().unwrap())
        .collect();
    assert!(
        phases.contains(&"prefill") && phases.contains(&"decode/draft"),
        "{phases:?}"
    );
    for t in tables {
        let rows = t["rows"].as_array().unwrap();
        // JSON lists every kernel name, largest time first, adding up to the table's total.
        assert_eq!(rows.len() as u64, t["names"].as_u64().unwrap());
        let totals: Vec<i64> = rows
            .iter()
            .map(|r| r["total_ns"].as_i64().unwrap())
            .collect();
        assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
        assert_eq!(totals.iter().sum::<i64>(), t["total_ns"].as_i64().unwrap());
        let counts: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
        assert_eq!(counts, t["count"].as_u64().unwrap());
        let busy = t["busy_ns"].as_i64().unwrap();
        assert!(busy > 0 && busy <= t["total_ns"].as_i64().unwrap());
        for r in rows {
            let share = r["share"].as_f64().unwrap();
            assert!((share - r["total_ns"].as_f64().unwrap() / busy as f64).abs() < 1e-9);
            let (p50, max) = (r["p50_ns"].as_i64().unwrap(), r["max_ns"].as_i64().unwrap());
            assert!(p50 <= max && r["mean_ns"].as_i64().unwrap() <= max);
            let (name, short) = (
                r["name"].as_str().unwrap(),
                r["short_name"].as_str().unwrap(),
            );
            assert!(name.contains(short), "{short} is part of {name}");
        }
    }
    // A parent holds its children's kernel time.
    let total_of = |p: &str| {
        tables.iter().find(|t| t["phase"] == p).unwrap()["total_ns"]
            .as_i64()
            .unwrap()
    };
    assert!(total_of("decode") >= total_of("decode/draft") + total_of("decode/verify"));

    // The text: five rows a table by default, short names only.
    let text = cufall()
        .current_dir(&root)
        .args(["report", trace])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("\nKERNELS by GPU time in each phase"),
        "{text}"
    );
    assert!(text.contains("  prefill, GPU 0: busy "), "{text}");
    assert!(text.contains(" distribution_elementwise_grid_stride_kernel "));
    assert!(
        !text.contains("at::native::"),
        "no full C++ names in the text"
    );
    assert!(text.contains("… 2 more kernel(s)"), "{text}");
    // `--kernels N` bounds the rows of each table, in JSON too; 0 leaves them out.
    let two = report_json(trace, &["--kernels", "2"]);
    let rows = |v: &serde_json::Value| -> Vec<usize> {
        v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["rows"].as_array().unwrap().len())
            .collect()
    };
    assert!(rows(&two).iter().all(|n| *n <= 2) && rows(&two).contains(&2));
    assert_eq!(
        rows(&report_json(trace, &["--kernels", "0"])),
        Vec::<usize>::new()
    );
    let none = cufall()
        .current_dir(&root)
        .args(["report", trace, "--kernels", "0"])
        .output()
        .unwrap();
    assert!(none.status.success());
    assert!(!String::from_utf8_lossy(&none.stdout).contains("KERNELS"));
}

/// With CUDA graphs traced whole, verify's GPU time is its graph launches, one per step; the
/// diff against the same run without graphs lists the kernels whose time moved.
#[test]
fn kernels_of_a_graphs_pair_and_their_diff() {
    let off = "examples/h200-specdec-ctx256-graphs-off.cufall";
    let on = "examples/h200-specdec-ctx256-graphs-on.cufall";
    let v = report_json(on, &[]);
    let verify = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["phase"] == "verify")
        .unwrap();
    let steps = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "verify")
        .unwrap()["count"]
        .clone();
    let rows = verify["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["kind"], "graph");
    assert!(rows[0]["name"].as_str().unwrap().starts_with("graph "));
    assert_eq!(rows[0]["count"], steps);

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = cufall()
        .current_dir(&root)
        .args(["diff", off, on, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ks = d["kernels"].as_array().unwrap();
    let deltas: Vec<u64> = ks
        .iter()
        .map(|k| k["delta_total_ns"].as_i64().unwrap().unsigned_abs())
        .collect();
    assert!(
        deltas.windows(2).all(|w| w[0] >= w[1]),
        "biggest change first"
    );
    for k in ks {
        let (a, b) = (
            k["total_a_ns"].as_i64().unwrap(),
            k["total_b_ns"].as_i64().unwrap(),
        );
        assert_eq!(k["delta_total_ns"].as_i64().unwrap(), b - a);
    }
    // Every kernel of each side is in the list, with its whole-run time.
    for (side, key) in [("a", "total_a_ns"), ("b", "total_b_ns")] {
        let whole = d[side]["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["scope"] == "whole_run")
            .unwrap()["total_ns"]
            .as_i64()
            .unwrap();
        let sum: i64 = ks.iter().map(|k| k[key].as_i64().unwrap()).sum();
        assert_eq!(sum, whole, "{side}");
    }
    let graph = ks.iter().find(|k| k["name"] == rows[0]["name"]).unwrap();
    assert_eq!(
        (graph["count_a"].as_u64(), &graph["count_b"]),
        (Some(0), &steps)
    );

    let out = cufall()
        .current_dir(&root)
        .args(["diff", off, on])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let section = &text[text.find("\nKERNELS (whole run").expect("the section")..];
    assert!(
        section.contains("GPU-busy time (kernels, copies, graphs): A "),
        "{section}"
    );
    assert!(section.contains(&format!("\n  {} ", graph["short_name"].as_str().unwrap())));
    assert!(section.contains(" more kernel(s), "), "{section}");
}
