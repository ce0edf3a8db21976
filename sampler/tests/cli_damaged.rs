//! What each command shows of a damaged copy of a bundled recording (rows in every table): the
//! same rule in every command, and nothing silently wrong.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use cufall_testkit::examples::edit_manifest;
use predicates::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};

const EXAMPLE: &str = "h200-torch-phases-api.cufall";

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

/// A copy of [`EXAMPLE`] in a new folder, to damage; the folder lives as long as the guard.
fn example_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = cufall_testkit::examples::copy_example(tmp.path(), EXAMPLE);
    (tmp, dir)
}

/// `info` lists every device the data holds, not only those of the manifest.
#[test]
fn info_shows_devices_missing_from_the_manifest() {
    let (_tmp, dir) = example_copy();
    edit_manifest(&dir, |m| m["devices"] = serde_json::json!([]));
    cufall()
        .arg("info")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "GPU 0  (not in manifest.json's devices: name unknown): 248933 samples",
        ));

    edit_manifest(&dir, |m| {
        m["devices"] = serde_json::json!([{"id": 7, "name": "NVIDIA H200", "chip": "GH100",
            "uuid": "GPU-x", "pci_bus_id": "0000:00:07.0", "sm_count": 132,
            "memory_total_bytes": 1}]);
    });
    let out = cufall().arg("info").arg(&dir).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("GPU 0  (not in manifest.json's devices: name unknown): 248933 samples"),
        "{text}"
    );
    assert!(
        text.contains("GPU 7  NVIDIA H200 (GH100): 0 samples"),
        "{text}"
    );
    let out = cufall()
        .args(["info", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    // The manifest's device first, then the one only the data holds.
    assert_eq!(devices[0]["index"], 7);
    assert_eq!(devices[0]["in_manifest"], true);
    assert_eq!(devices[1]["index"], 0);
    assert_eq!(devices[1]["in_manifest"], false);
    assert_eq!(devices[1]["samples"], 248_933);
}

/// `view` and `replay` refuse a damaged segment of a table they do not show, as `info` and
/// `report` do; a missing samples segment is a drop in all of them.
#[test]
fn every_command_applies_the_same_rule_to_damaged_segments() {
    let (_tmp, dir) = example_copy();
    let seg = dir.join("capture/000001.parquet");
    let mut bytes = fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&seg, &bytes).unwrap();
    for cmd in [
        &["info"][..],
        &["report"],
        &["view", "--print"],
        &["replay", "--print"],
    ] {
        cufall()
            .args(cmd)
            .arg(&dir)
            .assert()
            .failure()
            .stderr(predicate::str::contains(
                "capture/000001.parquet fails its checksum",
            ));
    }

    let (_tmp, dir) = example_copy();
    fs::remove_file(dir.join("samples/000003.parquet")).unwrap();
    let missing = "samples/000003.parquet is listed in the index (33454 rows) but missing";
    cufall()
        .arg("info")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("2 drops (1.005 s lost)"))
        .stdout(predicate::str::contains(missing));
    cufall()
        .arg("report")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("segment_unreadable ×1 (1.004 s)"))
        .stdout(predicate::str::contains(missing));
    cufall()
        .args(["view", "--print"])
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("drops in view: GPU0 2×"))
        .stderr(predicate::str::contains(missing));
}

/// `--to` is refused where it cannot mean a window, and where the view cannot show exactly the
/// window asked for, it says what it shows.
#[test]
fn a_window_the_view_cannot_show_is_refused_or_said() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(EXAMPLE);
    let view = |to: &str| {
        let mut c = cufall();
        c.args(["view", "--print", "--width", "100", "--to", to])
            .arg(&src);
        c
    };
    for (to, why) in [
        ("100000000h", "292 years"),
        ("0", "later than the start of the data"),
        (
            "1ns",
            "shorter than one column of the view at its finest zoom",
        ),
    ] {
        view(to)
            .assert()
            .failure()
            .stderr(predicate::str::contains(why));
    }
    cufall()
        .args(["replay", "--print", "--to", "1ns"])
        .arg(&src)
        .assert()
        .failure()
        .stderr(predicate::str::contains("shorter than one column"));
    view("7s")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "note: the view shows -67.4ms – 7.72s for the window 0 – 7s",
        ));
    view("1h")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "--to 60m00s is past the end of the data (it lasts 7.47s): the window ends there",
        ));
}

/// An absurd manifest interval is named by `info`, `report` and `view` alike, and the view
/// shows the recording as it does with the recorded interval.
#[test]
fn an_absurd_interval_is_named_and_replaced_in_every_command() {
    let (_tmp, dir) = example_copy();
    let view = || {
        let out = cufall()
            .args(["view", "--print", "--width", "100"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (good, _) = view();
    edit_manifest(&dir, |m| m["sampling"]["interval_ns"] = (1i64 << 62).into());
    let named = "manifest.json's sampling.interval_ns is 4611686018427387904";
    let (shown, warned) = view();
    assert_eq!(shown.lines().next(), good.lines().next(), "same window");
    assert!(warned.contains(named), "{warned}");
    for cmd in ["info", "report"] {
        cufall()
            .arg(cmd)
            .arg(&dir)
            .assert()
            .success()
            .stdout(predicate::str::contains(named));
    }
}
