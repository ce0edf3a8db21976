//! The `cufall` binary as a user runs it: exit codes and what reaches stderr.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn cufall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cufall"));
    c.env_remove("CUFALL_ARGV0");
    c
}

/// `--version` names the trace formats this build writes and reads, so a user with an old
/// recording knows at once whether it opens.
#[test]
fn version_names_the_trace_formats() {
    let out = cufall().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let (major, minor) = (
        cufall_trace::model::SCHEMA_MAJOR,
        cufall_trace::model::SCHEMA_MINOR,
    );
    assert!(
        text.starts_with(&format!(
            "cufall {} (writes trace format {major}.{minor}; reads 1.0 to {major}.{minor}",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

#[test]
fn output_cut_by_its_reader_ends_quietly() {
    let trace = example("h200-specdec-0.5b-graphs-off.cufall");
    for args in [
        vec!["report", "--json"],
        vec!["info", "--json"],
        vec!["view", "--print"],
    ] {
        let mut child = cufall()
            .args(&args)
            .arg(&trace)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cufall");
        // Close the reading end at once, as `| head -0` would: every write then fails.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(
            !stderr.contains("error") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_zero_full_scale_is_refused_by_every_command() {
    let trace = example("h200-matmul-copy.cufall");
    for cmd in ["report", "view", "export"] {
        let mut c = cufall();
        c.arg(cmd).arg(&trace).args(["--full-scale", "0"]);
        if cmd == "view" {
            c.arg("--print");
        }
        if cmd == "export" {
            c.args(["--format", "csv"]);
        }
        let out = c.output().expect("run cufall");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(stderr.contains("cannot be a full scale"), "{cmd}: {stderr}");
    }
}

#[test]
fn a_missing_trace_is_one_line_with_the_fix() {
    let out = cufall()
        .args(["info", "no-such-run.cufall"])
        .output()
        .expect("run cufall");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no trace at no-such-run.cufall")
            && stderr.contains("cufall record -o no-such-run.cufall"),
        "{stderr}"
    );
}
