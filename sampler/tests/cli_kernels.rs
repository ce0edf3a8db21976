//! The KERNELS sections of `cufall report` and `cufall diff` end to end, on real recordings in
//! `examples/`.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
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
