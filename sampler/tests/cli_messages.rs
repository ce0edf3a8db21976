//! What a user sees from `cufall` on damaged or unusual copies of a bundled recording, made in
//! each test: every message says what the problem is (damage, a newer version, a refused read,
//! a hand edit) and a fix that fits it, never a flag the user did not pass.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use cufall_testkit::examples::{copy_dir, edit_manifest};
use std::fs;
use std::path::{Path, PathBuf};

/// The bundled recording with rows in every table.
const PHASES: &str = "h200-torch-phases-api.cufall";

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(PHASES)
}

/// A copy of the example in `tmp`, under `name`.
fn copy(tmp: &tempfile::TempDir, name: &str) -> PathBuf {
    let dst = tmp.path().join(name);
    copy_dir(&example(), &dst);
    dst
}

/// `cufall ARGS` fails with one line on stderr; that line.
fn refusal(args: &[&std::ffi::OsStr]) -> String {
    let out = cufall()
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn manifest_edits_say_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "m.cufall");
    let info = |t: &Path| refusal(&[os("info"), t.as_os_str()]);

    edit_manifest(&t, |m| m["schema_version"] = serde_json::json!(1.1));
    let err = info(&t);
    assert!(
        err.contains("schema_version is the number 1.1, where cufall writes a string of MAJOR.MINOR (`\"1.4\"`)"),
        "{err}"
    );
    assert!(!err.contains("``"), "{err}");

    edit_manifest(&t, |m| m["schema_version"] = "0.1".into());
    assert!(info(&t).contains("`0.1` is older than any cufall trace"));

    edit_manifest(&t, |m| m["schema_version"] = "99999999999.0".into());
    let err = info(&t);
    assert!(
        err.contains("written with trace format 99999999999.0, newer than this cufall"),
        "{err}"
    );
    assert!(err.contains("Upgrade cufall to read it."), "{err}");

    edit_manifest(&t, |m| {
        m["schema_version"] = "1.1".into();
        m.as_object_mut().unwrap().remove("format");
    });
    let err = info(&t);
    assert!(
        err.contains("its manifest.json has no `format` field"),
        "{err}"
    );
    assert!(!err.contains("format ``"), "{err}");
}

#[test]
fn a_byte_order_mark_before_the_manifest_is_read_past() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "bom.cufall");
    let path = t.join("manifest.json");
    let mut bytes = b"\xef\xbb\xbf".to_vec();
    bytes.extend(fs::read(&path).unwrap());
    fs::write(&path, bytes).unwrap();
    cufall()
        .arg("info")
        .arg(&t)
        .assert()
        .success()
        .stdout(predicates::str::contains("trace format 1.1"));
}

#[test]
fn a_bad_index_line_names_its_field_and_deleting_the_index_opens_the_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "idx.cufall");
    let index = t.join("index.jsonl");
    let text = fs::read_to_string(&index).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut entry: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
    entry["rows"] = "many".into();
    lines[2] = entry.to_string();
    fs::write(&index, lines.join("\n") + "\n").unwrap();
    let err = refusal(&[os("report"), t.as_os_str()]);
    assert!(
        err.contains(
            "index.jsonl is corrupted: line 3 is not a segment entry (field `rows` is \"many\", not a whole number of rows)"
        ),
        "{err}"
    );
    assert!(err.contains("or delete it: the trace then opens"), "{err}");
    fs::remove_file(&index).unwrap();
    cufall()
        .arg("report")
        .arg(&t)
        .assert()
        .success()
        .stdout(predicates::str::contains("index.jsonl is missing"));
}

#[cfg(unix)]
#[test]
fn refused_reads_are_not_called_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "loop.cufall");
    let seg = t.join("kernels/000000.parquet");
    fs::remove_file(&seg).unwrap();
    std::os::unix::fs::symlink("000000.parquet", &seg).unwrap();
    let err = refusal(&[os("report"), t.as_os_str()]);
    assert!(err.contains("cannot read "), "{err}");
    assert!(
        err.contains("It is a symbolic link that leads back to itself"),
        "{err}"
    );
    assert!(!err.contains("corrupted"), "{err}");

    fs::remove_file(&seg).unwrap();
    fs::create_dir(&seg).unwrap();
    let err = refusal(&[os("info"), t.as_os_str()]);
    assert!(
        err.contains("kernels/000000.parquet is a folder, not a plain file"),
        "{err}"
    );
    assert!(!err.contains("corrupted"), "{err}");
}

#[test]
fn a_recorded_heatmap_of_an_unrecorded_metric_is_not_blamed_on_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "hm.cufall");
    edit_manifest(&t, |m| {
        m["heatmaps"] = serde_json::json!([{"metric": "nope.metric"}]);
    });
    let err = refusal(&[os("view"), t.as_os_str(), os("--print")]);
    assert!(
        err.contains("the recording's heatmaps (manifest.json, `heatmaps`) name the metric nope.metric, which it did not record"),
        "{err}"
    );
    assert!(
        err.contains("Choose the heatmaps yourself with --metric"),
        "{err}"
    );
    // With a recorded metric chosen, the view draws.
    cufall()
        .arg("view")
        .arg(&t)
        .args([
            "--print",
            "--metric",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        ])
        .assert()
        .success();
    // A flag that names an unknown metric is still blamed on the flag.
    let err = refusal(&[
        os("view"),
        example().as_os_str(),
        os("--print"),
        os("--metric"),
        os("nope.metric"),
    ]);
    assert!(
        err.contains("the trace has no metric named `nope.metric`"),
        "{err}"
    );
    assert!(err.contains("leave the flag out"), "{err}");
}

#[test]
fn an_export_to_the_wrong_kind_of_output_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("existing.txt");
    fs::write(&file, "keep me").unwrap();
    for format in ["parquet", "csv"] {
        for force in [false, true] {
            let trace = example();
            let mut args = vec![
                os("export"),
                trace.as_os_str(),
                os("--format"),
                os(format),
                os("-o"),
                file.as_os_str(),
            ];
            if force {
                args.push(os("--force"));
            }
            let err = refusal(&args);
            assert!(err.contains("existing.txt is a file, and a"), "{err}");
            assert!(
                err.contains("export is a folder of one file per table"),
                "{err}"
            );
            assert!(err.contains("Name a folder with -o"), "{err}");
            assert!(!err.contains("Check that the folder exists"), "{err}");
        }
    }
    assert_eq!(fs::read_to_string(&file).unwrap(), "keep me");
    let folder = tmp.path().join("a-folder");
    fs::create_dir(&folder).unwrap();
    let err = refusal(&[
        os("export"),
        example().as_os_str(),
        os("--format"),
        os("perfetto"),
        os("-o"),
        folder.as_os_str(),
        os("--force"),
    ]);
    assert!(
        err.contains("a-folder is a folder, and a Perfetto export is one file"),
        "{err}"
    );
}

#[test]
fn an_offset_past_the_trace_clock_is_shown_as_typed() {
    let err = cufall()
        .arg("view")
        .arg(example())
        .args(["--print", "--from", "99999999999999"])
        .output()
        .unwrap();
    assert_eq!(err.status.code(), Some(2));
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(
        err.contains("`99999999999999` is longer than a recording can be"),
        "{err}"
    );
    assert!(!err.contains("153722867m"), "{err}");
}

/// A trace marked 1.5 whose NVTX table holds a range kind this cufall does not know: the
/// commands warn and go on, as the versioning rules say.
#[test]
fn a_newer_minor_value_is_a_warning_not_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy(&tmp, "newer.cufall");
    let rel = "nvtx/000000.parquet";
    let path = t.join(rel);
    let mut frame =
        cufall_trace::parquet::read_frame(fs::read(&path).unwrap().into(), None).unwrap();
    let kind = frame.columns.iter_mut().find(|c| c.name == "kind").unwrap();
    let cufall_trace::Values::Str(kinds) = &mut kind.values else {
        panic!("kind is a string column")
    };
    kinds[0] = "scope".into();
    let bytes = cufall_trace::parquet::write_frame(&frame, Vec::new()).unwrap();
    fs::write(&path, &bytes).unwrap();
    // Out of the index: read without a checksum (and a warning saying so).
    let index = t.join("index.jsonl");
    let kept: Vec<String> = fs::read_to_string(&index)
        .unwrap()
        .lines()
        .filter(|l| !l.contains(rel))
        .map(String::from)
        .collect();
    fs::write(&index, kept.join("\n") + "\n").unwrap();
    let damage = refusal(&[os("report"), t.as_os_str()]);
    assert!(
        damage.contains("column `kind` of the nvtx table holds `scope`"),
        "{damage}"
    );

    edit_manifest(&t, |m| m["schema_version"] = "1.5".into());
    let out = cufall().arg("report").arg(&t).assert().success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        stdout.contains("trace format 1.5 is newer than this cufall's 1.4"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 row of the nvtx table has a kind added after trace format 1.4 (`scope` (1)): it is left out"),
        "{stdout}"
    );
    let out = cufall().arg("info").arg(&t).assert().success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(stdout.contains("`scope` (1)"), "{stdout}");
}
