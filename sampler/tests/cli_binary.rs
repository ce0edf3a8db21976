//! The `cufall` binary as a user runs it: exit codes and what reaches stderr.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

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

/// `--version` also says where the capture library is (the one `record -- CMD` would load),
/// or why none is usable; `-V` stays one line.
#[test]
fn version_says_where_the_capture_library_is() {
    let out = cufall().arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("capture library: "))
        .unwrap_or_else(|| panic!("no capture library line in {text}"));
    // The test build's library lies beside the binary (target/debug/).
    assert!(line.ends_with("libcufall_inject.so"), "{line}");
    let bad = tempfile::NamedTempFile::new().unwrap();
    let out = cufall()
        .arg("--version")
        .env("CUFALL_INJECT_LIBRARY", bad.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("is not a loadable capture library (not an ELF file)"),
        "{text}"
    );
    let out = cufall().arg("-V").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

/// Whether this machine lacks an NVIDIA GPU, as the bare command finds out.
fn no_gpu_here() -> Option<String> {
    let out = cufall().stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (stderr.contains("libcuda.so.1) was not found") || stderr.contains("no CUDA device"))
        .then_some(stderr)
}

/// The first command on a machine without a GPU: without a terminal, the error, the replay
/// hint (naming the bundled recording where it lies) and exit code 1; at a terminal, the bundled
/// recording plays at once under a title saying no GPU was found, and the reason follows it.
#[test]
fn without_a_gpu_the_bare_command_replays_the_bundled_recording_at_a_terminal() {
    let Some(stderr) = no_gpu_here() else {
        eprintln!("skipped: this machine has an NVIDIA GPU");
        return;
    };
    assert!(
        stderr.contains("To look at a real recording without a GPU, run `")
            && stderr.contains("examples/h200-matmul-copy.cufall`"),
        "{stderr}"
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the terminal half: no `script` (util-linux) to give cufall a terminal");
        return;
    }
    // The terminal `script` makes has no size of its own: give it one the view fits.
    let cmd = format!("stty rows 30 cols 120; {}", env!("CARGO_BIN_EXE_cufall"));
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("CUFALL_ARGV0")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(b"q").unwrap();
        stdin.flush().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("NO NVIDIA GPU FOUND: a recording made on an H200"),
        "{screen}"
    );
    assert!(
        screen.contains("That was the bundled recording"),
        "{screen}"
    );
    assert_eq!(out.status.code(), Some(0), "{screen}");
}
