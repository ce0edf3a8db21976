//! `cufall report`, `--json` and `cufall diff` on the fixture with host stacks (see
//! `cufall_testkit::fixture`): the host's frames during the gaps, end to end.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;

use cufall_testkit::fixture::Fixture;

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

fn stdout_of(dir: &std::path::Path, args: &[&str]) -> String {
    let out = cufall().current_dir(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn with_host() -> Fixture {
    Fixture {
        host_stacks: true,
        ..Default::default()
    }
}

#[test]
fn report_and_json_name_where_the_host_was() {
    let tmp = tempfile::tempdir().unwrap();
    with_host().write(tmp.path(), "host.cufall");
    let text = stdout_of(tmp.path(), &["report", "host.cufall", "--min-gap", "50us"]);
    assert!(!text.contains('\u{1b}'), "an escape reached the terminal");
    insta::assert_snapshot!("report_with_host_stacks", text);
    // The docs quote this section as the code prints it today.
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/analysis.md");
    let docs = std::fs::read_to_string(docs).unwrap();
    let intro = "prints, after its gaps:\n\n```text\n";
    let start = docs
        .find(intro)
        .expect("the example is in docs/analysis.md")
        + intro.len();
    let shown = &docs[start..start + docs[start..].find("```").unwrap()];
    let from = text.find("HOST during").unwrap();
    let to = text.find("\nDROPS").unwrap();
    assert_eq!(text[from..to].trim_end(), shown.trim_end());
    let json = stdout_of(
        tmp.path(),
        &["report", "host.cufall", "--min-gap", "50us", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let dv = v["host"]["gap_classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "draft → verify")
        .unwrap();
    let top = &dv["launching"]["self_frames"][0];
    assert_eq!(top["function"], "build_tree");
    assert_eq!(top["file"], "/srv/app/tree.py");
    assert_eq!(top["line"], 88);
    assert_eq!(top["kind"], "python");
    // Once each where the two GPUs' gaps overlap: three 100 µs windows of 10 µs samples.
    assert_eq!(top["samples"], 30);
    assert_eq!(top["share"], 1.0);
    assert_eq!(dv["launching"]["thread"]["tid"], 1234);
}

#[test]
fn diff_shows_host_frames_that_grew_and_shrank() {
    let tmp = tempfile::tempdir().unwrap();
    with_host().write(tmp.path(), "a.cufall");
    Fixture {
        extra_verify_gap_us: 50,
        ..with_host()
    }
    .write(tmp.path(), "b.cufall");
    let text = stdout_of(
        tmp.path(),
        &["diff", "a.cufall", "b.cufall", "--min-gap", "50us"],
    );
    let host = &text[text.find("\nHOST FRAMES").unwrap()..];
    // B spends 150 µs more of each 3 ms step waiting in the sync, and as much less launching.
    let row = |frame: &str, change: &str| {
        host.lines().any(|l| {
            l.trim_start().starts_with("all of step ") && l.contains(frame) && l.ends_with(change)
        })
    };
    assert!(row("launch (serve.py:20)", "-5.0 pp"), "{host}");
    assert!(
        row("cudaStreamSynchronize (libcudart.so.12)", "+5.0 pp"),
        "{host}"
    );
    let json = stdout_of(
        tmp.path(),
        &[
            "diff",
            "a.cufall",
            "b.cufall",
            "--min-gap",
            "50us",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(!v["host_frames"].as_array().unwrap().is_empty());
}
