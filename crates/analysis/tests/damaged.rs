//! Report and export on damaged copies of a bundled recording (rows in every table): what the
//! analysis makes of what a trace does not say, or says wrongly.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_analysis::export::{DEFAULT_MAX_COUNTER_POINTS, ExportOptions, Format, export};
use cufall_analysis::{AnalysisError, ReportOptions};
use cufall_trace::Trace;
use std::fs;
use std::path::{Path, PathBuf};

const EXAMPLE: &str = "h200-torch-phases-api.cufall";

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), target).unwrap();
        }
    }
}

fn example_copy(tmp: &tempfile::TempDir) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(EXAMPLE);
    let dir = tmp.path().join(EXAMPLE);
    copy_dir(&src, &dir);
    dir
}

fn export_opts(format: Format, output: &Path) -> ExportOptions {
    ExportOptions {
        format,
        output: Some(output.to_path_buf()),
        force: true,
        max_counter_points: DEFAULT_MAX_COUNTER_POINTS,
        report: ReportOptions::default(),
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An export that fails half-way (here: one of its files cannot be put in place) leaves nothing
/// it made: no partial files, no temporary files, no folder it created.
#[test]
fn a_failed_export_leaves_no_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = Trace::open(example_copy(&tmp)).unwrap();

    // The folder exists, with a folder where the capture table's file would go.
    let out = tmp.path().join("out");
    fs::create_dir_all(out.join("capture.parquet/keep")).unwrap();
    let err = export(&trace, &export_opts(Format::Parquet, &out)).unwrap_err();
    assert!(matches!(err, AnalysisError::Write { .. }), "{err}");
    assert!(err.to_string().contains("capture.parquet"), "{err}");
    assert_eq!(listing(&out), ["capture.parquet"], "only what was there");

    // A Perfetto file whose place is taken by a folder.
    let json = tmp.path().join("t.perfetto.json");
    fs::create_dir_all(json.join("keep")).unwrap();
    assert!(export(&trace, &export_opts(Format::Perfetto, &json)).is_err());
    assert_eq!(
        listing(tmp.path()),
        [EXAMPLE, "out", "t.perfetto.json"],
        "no temporary file left beside it"
    );

    // A good export writes every file.
    let good = tmp.path().join("good");
    let summary = export(&trace, &export_opts(Format::Csv, &good)).unwrap();
    assert_eq!(summary.files.len(), 9);
    assert_eq!(listing(&good).len(), 9);

    // A trace with a damaged segment is refused before anything is written.
    let fresh = tmp.path().join("fresh");
    let trace_dir = tmp.path().join(EXAMPLE);
    fs::write(
        trace_dir.join("nvtx/000000.parquet"),
        b"PAR1 not parquet PAR1",
    )
    .unwrap();
    fs::remove_file(trace_dir.join("index.jsonl")).unwrap();
    let damaged = Trace::open(&trace_dir).unwrap();
    assert!(export(&damaged, &export_opts(Format::Csv, &fresh)).is_err());
    assert!(!fresh.exists(), "nothing written");
}
