//! `report`, `diff` and `export` through their parsed flags (the `cufall_sampler::commands` layer),
//! on the synthetic fixture: the exported tables read back, Perfetto JSON is valid, JSON report.

use clap::Parser;
use cufall_sampler::commands::diff::{DiffArgs, diff_to};
use cufall_sampler::commands::export::{ExportArgs, export_to};
use cufall_sampler::commands::report::{ReportArgs, report_to};
use cufall_sampler::hint;
use cufall_testkit::fixture::{Fixture, T0, TENSOR, US};
use cufall_trace::Frame;

fn read_parquet(path: &std::path::Path) -> Frame {
    let bytes = std::fs::read(path).expect("open parquet");
    cufall_trace::parquet::read_frame(bytes.into(), None).expect("read parquet")
}

#[test]
fn export_parquet_and_csv_read_back() {
    let (dir, trace) = fixture_trace();
    let out = dir.path().join("pq");
    let args = export_fixture_args(&trace, "parquet", &out, &["--min-gap", "50us"]);
    let mut text = Vec::new();
    export_to(&args, &mut text).expect("export");
    let samples = read_parquet(&out.join("samples.parquet"));
    assert_eq!(samples.height(), 600 - 12);
    assert!(samples.column(TENSOR).is_some());
    let gaps = read_parquet(&out.join("gaps.parquet"));
    assert_eq!(gaps.height(), 13);
    let total: i64 = gaps
        .column("duration_ns")
        .expect("col")
        .slice::<i64>()
        .expect("i64")
        .iter()
        .sum();
    assert_eq!(total, 1450 * US);
    let phases = read_parquet(&out.join("phases.parquet"));
    assert_eq!(phases.height(), 4 * 2);
    assert_eq!(read_parquet(&out.join("nvtx.parquet")).height(), 9);
    assert_eq!(read_parquet(&out.join("kernels.parquet")).height(), 12);
    // A second export to the same place is refused without --force.
    let err = export_to(&args, &mut Vec::new()).expect_err("exists");
    let err = hint::message(&err, "cufall");
    assert!(err.contains("--force"), "{err}");

    let out = dir.path().join("csv");
    let args = export_fixture_args(&trace, "csv", &out, &[]);
    export_to(&args, &mut Vec::new()).expect("export csv");
    let gaps = std::fs::read_to_string(out.join("gaps.csv")).expect("csv");
    assert_eq!(gaps.lines().count(), 1 + 13);
    assert!(gaps.starts_with("device,start_ns,end_ns,duration_ns,place"));
    let samples = std::fs::read_to_string(out.join("samples.csv")).expect("csv");
    assert_eq!(samples.lines().count(), 1 + 588);
}

#[test]
fn export_perfetto_is_valid_trace_event_json() {
    let (dir, trace) = fixture_trace();
    let out = dir.path().join("t.perfetto.json");
    let args = export_fixture_args(&trace, "perfetto", &out, &["--min-gap", "50us"]);
    export_to(&args, &mut Vec::new()).expect("export");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("read")).expect("json");
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "{e}");
        assert!(e["pid"].is_i64() || e["pid"].is_u64(), "{e}");
        assert!(e["tid"].is_i64() || e["tid"].is_u64(), "{e}");
        assert!(e["ts"].is_number(), "{e}");
        match ph {
            "X" => assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}"),
            "C" => {
                let args = e["args"].as_object().expect("counter args");
                assert!(
                    !args.is_empty() && args.values().all(|x| x.is_number()),
                    "{e}"
                );
            }
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_number()),
            other => panic!("unexpected phase {other}"),
        }
        let key = format!("{ph}:{}", e["cat"].as_str().unwrap_or(""));
        *counts.entry(key).or_default() += 1;
    }
    assert_eq!(counts["X:nvtx"], 9);
    assert_eq!(counts["X:kernel"], 12);
    assert_eq!(counts["X:gap"], 13);
    assert_eq!(counts["X:drop"], 2);
    // 588 samples, 3 metrics + the activity value each; 60 NVML readings × 3.
    assert_eq!(counts["C:"], 588 * 4 + 60 * 3);
    // Microseconds from the first event: the first draft starts at 0 and lasts 400 µs; the first
    // gap is 400..500 µs.
    let draft = events
        .iter()
        .find(|e| e["name"] == "draft")
        .expect("draft slice");
    assert_eq!(draft["ts"].as_f64(), Some(0.0));
    assert_eq!(draft["dur"].as_f64(), Some(400.0));
    let gap = events
        .iter()
        .find(|e| e["cat"] == "gap" && e["pid"] == 1i64 << 30 && e["ts"].as_f64() == Some(400.0))
        .expect("gap slice");
    assert_eq!(gap["name"], "idle gap: draft → verify");
    assert_eq!(gap["ts"].as_f64(), Some(400.0));
    assert_eq!(gap["dur"].as_f64(), Some(100.0));
    assert_eq!(v["otherData"]["t0_unix_ns"].as_i64(), Some(T0));
}

#[test]
fn perfetto_counters_are_bucketed_above_the_cap() {
    let (dir, trace) = fixture_trace();
    let out = dir.path().join("t.json");
    let args = export_fixture_args(&trace, "perfetto", &out, &["--max-counter-points", "30"]);
    let mut text = Vec::new();
    export_to(&args, &mut text).expect("export");
    assert!(String::from_utf8_lossy(&text).contains("averaged over 100.0 µs buckets"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("read")).expect("json");
    let counters = v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C")
        .count();
    // 30 buckets per device, except device 0's bucket [2400, 2500) that is all drop; and NVML.
    assert_eq!(counters, (30 + 29) * 4 + 60 * 3);
}

#[derive(Parser)]
struct TestCli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    Report(ReportArgs),
    Diff(DiffArgs),
    Export(ExportArgs),
}

/// The synthetic fixture, written as `t.cufall` in a new folder.
fn fixture_trace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = Fixture::default().write(dir.path(), "t.cufall");
    (dir, trace)
}

/// `cufall export TRACE --format FORMAT -o OUT EXTRA...`, parsed.
fn export_fixture_args(
    trace: &std::path::Path,
    format: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> ExportArgs {
    let mut args = vec![
        trace.to_str().expect("utf8"),
        "--format",
        format,
        "-o",
        out.to_str().expect("utf8"),
    ];
    args.extend_from_slice(extra);
    export_args(&args)
}

fn export_args(args: &[&str]) -> ExportArgs {
    let argv = ["cufall", "export"].into_iter().chain(args.iter().copied());
    match TestCli::try_parse_from(argv).expect("parse").cmd {
        Cmd::Export(a) => a,
        _ => panic!("not export"),
    }
}

#[test]
fn cli_report_json_and_diff_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Fixture::default().write(dir.path(), "a.cufall");
    let a = a.to_str().expect("utf8");
    let cli = TestCli::try_parse_from(["cufall", "report", a, "--min-gap", "50us", "--json"])
        .expect("parse");
    let Cmd::Report(args) = cli.cmd else {
        panic!("not report")
    };
    let mut out = Vec::new();
    report_to(&args, &mut out).expect("report");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v["gaps"].as_array().map(Vec::len), Some(13));
    assert_eq!(v["gap_groups"][0]["place"], "draft → verify");
    assert_eq!(v["phases"][1]["path"], "step/draft");

    let cli = TestCli::try_parse_from(["cufall", "diff", a, a]).expect("parse");
    let Cmd::Diff(args) = cli.cmd else {
        panic!("not diff")
    };
    let mut out = Vec::new();
    diff_to(&args, &mut out).expect("diff");
    let text = String::from_utf8(out).expect("utf8");
    assert!(
        text.contains("PHASES (biggest change in total time first)"),
        "{text}"
    );
    assert!(!text.contains("warning"), "{text}");

    let missing = dir.path().join("missing.cufall");
    let cli = TestCli::try_parse_from(["cufall", "report", missing.to_str().expect("utf8")])
        .expect("parse");
    let Cmd::Report(args) = cli.cmd else {
        panic!("not report")
    };
    let err = report_to(&args, &mut Vec::new())
        .expect_err("missing")
        .to_string();
    assert!(err.contains("no trace at"), "{err}");
}
