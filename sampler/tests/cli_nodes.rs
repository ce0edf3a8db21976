//! `cufall report A B ...`: recordings of one run made on several hosts, read together. The
//! nodes are a real H200 recording written again as two hosts, the second with every timestamp
//! a known 3 ms later, so the answer is known: node-b's phases end 3 ms after node-a's.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use cufall_testkit::examples::{as_node, edit_manifest, examples_dir};
use std::path::Path;

const EXAMPLE: &str = "h200-torch-phases.cufall";
const LAG_NS: i64 = 3_000_000;

fn cufall(cwd: &Path) -> Command {
    let mut c = Command::cargo_bin("cufall").expect("binary");
    c.current_dir(cwd).env_remove("CUFALL_ARGV0");
    c
}

/// What `cufall ARGS` in `dir` prints, when it succeeds.
fn stdout_in(dir: &Path, args: &[&str]) -> String {
    let out = cufall(dir).args(args).assert().success();
    String::from_utf8_lossy(&out.get_output().stdout).into_owned()
}

/// What `cufall ARGS` in `dir` prints as JSON, when it succeeds.
fn json_in(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = cufall(dir).args(args).assert().success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

/// A new folder with two nodes (`a.cufall`, `b.cufall`): B lags by [`LAG_NS`]; each host's
/// clock is off by at most `clock_us`.
fn two_nodes(clock_us: i64) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = examples_dir().join(EXAMPLE);
    as_node(&src, &tmp.path().join("a.cufall"), "node-a", 0, clock_us);
    as_node(
        &src,
        &tmp.path().join("b.cufall"),
        "node-b",
        LAG_NS,
        clock_us,
    );
    tmp
}

#[test]
fn a_lagging_node_is_named_with_its_lag_per_phase() {
    let tmp = two_nodes(200);
    let text = stdout_in(tmp.path(), &["report", "a.cufall", "b.cufall"]);
    insta::assert_snapshot!("nodes_report", text);
    assert!(text.contains("node-a:GPU 0 (NVIDIA H200)"), "{text}");
    assert!(
        text.contains("two hosts' clocks may differ by up to 400.0 µs"),
        "{text}"
    );
    assert!(
        text.contains("draft: node-b ends 3.00 ms after the earliest node on average"),
        "{text}"
    );
    assert!(
        text.contains("longer than the clocks' uncertainty"),
        "{text}"
    );
    assert!(text.contains("lagging node: node-b"), "{text}");

    let v = json_in(tmp.path(), &["report", "a.cufall", "b.cufall", "--json"]);
    assert_eq!(v["lagging"], 1);
    assert_eq!(v["clock_uncertainty_ns"], 400_000);
    let draft = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "decode/draft")
        .unwrap();
    assert_eq!(draft["nodes"][1]["mean_lag_ns"], LAG_NS);
    assert_eq!(draft["nodes"][0]["mean_lag_ns"], 0);
    assert_eq!(draft["beyond_clocks"], true);
}

#[test]
fn a_lag_within_the_clocks_uncertainty_is_said_to_be_possibly_clock_error() {
    let tmp = two_nodes(2_000);
    let text = stdout_in(tmp.path(), &["report", "a.cufall", "b.cufall"]);
    assert!(
        text.contains("within the clocks' uncertainty: it may be clock error"),
        "{text}"
    );
}

/// `cufall ARGS` in `dir` fails with one line of stderr that holds `needle`.
fn refused_in_one_line(dir: &Path, args: &[&str], needle: &str) {
    let out = cufall(dir).args(args).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains(needle), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// One message each: the same GPU twice, the same host twice, recordings that share no time.
#[test]
fn recordings_that_are_not_one_run_are_refused() {
    let tmp = two_nodes(200);
    let one_line = |args: &[&str], needle: &str| refused_in_one_line(tmp.path(), args, needle);
    one_line(
        &["report", "a.cufall", "a.cufall"],
        "a.cufall and a.cufall both hold node-a:GPU 0: recordings of several nodes of one run hold each GPU once",
    );
    let src = examples_dir().join(EXAMPLE);
    as_node(
        &src,
        &tmp.path().join("later.cufall"),
        "node-c",
        3_600_000_000_000,
        200,
    );
    // The same host with other GPUs: rows named `host:GPU n` could not be told apart.
    as_node(&src, &tmp.path().join("a-again.cufall"), "node-a", 0, 200);
    edit_manifest(&tmp.path().join("a-again.cufall"), |v| {
        v["devices"][0]["uuid"] = "GPU-another".into();
        v["devices"][0]["id"] = 1.into();
    });
    one_line(
        &["report", "a.cufall", "a-again.cufall"],
        "a.cufall and a-again.cufall were both recorded on host `node-a`: the nodes of one run are recorded on different hosts",
    );
    one_line(
        &[
            "diff",
            "a.cufall",
            "b.cufall",
            "--vs",
            "a.cufall",
            "a-again.cufall",
        ],
        "side B of the diff: a.cufall and a-again.cufall were both recorded on host `node-a`",
    );
    one_line(
        &["report", "a.cufall", "later.cufall"],
        "these recordings share no time, so they are not nodes of one run: a.cufall (host node-a) covers 2026-12-01 08:10:45",
    );
}

/// One hour: a second run of the same job, later.
const LATER_NS: i64 = 3_600_000_000_000;

/// The second run in `dir` (`a2.cufall`, `b2.cufall`, an hour after the first): node-b now
/// lags by 1 ms.
fn second_run(dir: &Path) {
    let src = examples_dir().join(EXAMPLE);
    as_node(&src, &dir.join("a2.cufall"), "node-a", LATER_NS, 200);
    as_node(
        &src,
        &dir.join("b2.cufall"),
        "node-b",
        LATER_NS + 1_000_000,
        200,
    );
}

#[test]
fn two_runs_of_two_nodes_are_compared_per_phase_and_per_node() {
    let tmp = two_nodes(200);
    second_run(tmp.path());
    let args = [
        "diff",
        "a.cufall",
        "b.cufall",
        "--vs",
        "a2.cufall",
        "b2.cufall",
    ];
    let text = stdout_in(tmp.path(), &args);
    insta::assert_snapshot!("nodes_diff", text);
    assert!(
        text.contains("nodes matched by host: node-a, node-b"),
        "{text}"
    );
    assert!(text.contains("lagging node (A): node-b"), "{text}");
    assert!(text.contains("lagging node (B): node-b"), "{text}");
    assert!(text.contains("node-b +3.00 ms  node-b +1.00 ms"), "{text}");

    let v = json_in(tmp.path(), &[&args[..], &["--json"]].concat());
    assert_eq!(v["by_host"], true);
    assert_eq!(v["a"]["lagging"], 1);
    let draft = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "decode/draft")
        .unwrap();
    // Both nodes' 40 ranges on each side, the same durations: no change of time.
    assert_eq!(draft["a"]["count"], 80);
    assert_eq!(draft["delta_total_ns"], 0);
    assert_eq!(draft["lagging_a"], 1);
    assert_eq!(draft["nodes"][1]["a"]["mean_lag_ns"], LAG_NS);
    assert_eq!(draft["nodes"][1]["b"]["mean_lag_ns"], 1_000_000);
    assert_eq!(draft["nodes"][1]["delta_mean_lag_ns"], 1_000_000 - LAG_NS);
}

/// Other hosts on the second side: the nodes are paired in the order given, and the text says
/// so.
#[test]
fn nodes_of_other_hosts_are_paired_in_the_order_given() {
    let tmp = two_nodes(200);
    let src = examples_dir().join(EXAMPLE);
    as_node(&src, &tmp.path().join("c.cufall"), "node-c", LATER_NS, 200);
    let text = stdout_in(
        tmp.path(),
        &["diff", "a.cufall", "b.cufall", "--vs", "c.cufall"],
    );
    assert!(
        text.contains(
            "nodes matched in the order given (A / B): node-a / node-c, node-b / -; the sides do not name the same hosts"
        ),
        "{text}"
    );
    assert!(text.contains("lagging node (B): none"), "{text}");

    // A's two nodes against B's one: twice the steps and the time in A, and node-b's change is
    // its whole time, gone.
    let v = json_in(
        tmp.path(),
        &["diff", "a.cufall", "b.cufall", "--vs", "c.cufall", "--json"],
    );
    assert_eq!(v["by_host"], false);
    let decode = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "decode")
        .unwrap();
    assert_eq!(
        (&decode["a"]["count"], &decode["b"]["count"]),
        (&80.into(), &40.into())
    );
    let one_node = decode["b"]["total_ns"].as_i64().unwrap();
    assert_eq!(decode["a"]["total_ns"].as_i64(), Some(2 * one_node));
    assert_eq!(decode["delta_total_ns"].as_i64(), Some(-one_node));
    assert_eq!(decode["nodes"][1]["b"], serde_json::Value::Null);
    assert_eq!(
        decode["nodes"][1]["delta_total_ns"].as_i64(),
        Some(-one_node)
    );
}

/// `diff A B` is the diff of two recordings still, and so is one recording per side with --vs.
#[test]
fn one_recording_per_side_is_the_plain_diff() {
    let tmp = two_nodes(200);
    for args in [
        &["diff", "a.cufall", "b.cufall"][..],
        &["diff", "a.cufall", "--vs", "b.cufall"][..],
    ] {
        let text = stdout_in(tmp.path(), args);
        assert!(
            text.starts_with("cufall diff: A = a.cufall, B = b.cufall"),
            "{text}"
        );
    }
}

/// One message each: a side whose recordings share no time, the same GPU twice on a side,
/// more than two recordings without --vs.
#[test]
fn sides_that_are_not_one_run_are_refused() {
    let tmp = two_nodes(200);
    second_run(tmp.path());
    let one_line = |args: &[&str], needle: &str| refused_in_one_line(tmp.path(), args, needle);
    one_line(
        &["diff", "a.cufall", "b2.cufall", "--vs", "a2.cufall"],
        "side A of the diff: these recordings share no time, so they are not nodes of one run: a.cufall (host node-a) covers 2026-12-01 08:10:45",
    );
    one_line(
        &[
            "diff",
            "a.cufall",
            "b.cufall",
            "--vs",
            "b2.cufall",
            "b2.cufall",
        ],
        "side B of the diff: b2.cufall and b2.cufall both hold node-b:GPU 0: recordings of several nodes of one run hold each GPU once",
    );
    one_line(
        &["diff", "a.cufall", "b.cufall", "a2.cufall"],
        "3 recordings given without --vs: to compare two runs of several nodes, put the second run's recordings after --vs",
    );
}
