//! Report and export on damaged copies of a bundled recording (rows in every table): what the
//! analysis makes of what a trace does not say, or says wrongly.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_analysis::export::{DEFAULT_MAX_COUNTER_POINTS, ExportOptions, Format, export};
use cufall_analysis::render::report_text;
use cufall_analysis::report::{Note, Report, Verdict};
use cufall_analysis::samples::FullScaleSource;
use cufall_analysis::{AnalysisError, ReportOptions, build_report};
use cufall_testkit::examples::edit_manifest;
use cufall_trace::parquet::write_frame;
use cufall_trace::{Column, Frame, Table, Trace, Values};
use std::fs;
use std::path::{Path, PathBuf};

const EXAMPLE: &str = "h200-torch-phases-api.cufall";

fn example_copy(tmp: &tempfile::TempDir) -> PathBuf {
    cufall_testkit::examples::copy_example(tmp.path(), EXAMPLE)
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
    // Every table of the trace format, then `phases` and `gaps`.
    let files = Table::ALL.len() + 2;
    assert_eq!(summary.files.len(), files);
    assert_eq!(listing(&good).len(), files);

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

/// Rewrites the samples as one segment after `edit`; the index goes (its checksums no longer
/// hold).
fn rewrite_samples(dir: &Path, edit: impl FnOnce(Vec<Column>) -> Vec<Column>) {
    let frame = Trace::open(dir).unwrap().frame(Table::Samples).unwrap();
    let columns = edit(frame.columns);
    for e in fs::read_dir(dir.join("samples")).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    let file = fs::File::create(dir.join("samples/000000.parquet")).unwrap();
    write_frame(&Frame::new(columns), file).unwrap();
    fs::remove_file(dir.join("index.jsonl")).unwrap();
}

/// The samples with `OPTIONAL` metric columns (as traces of older writers have them), null
/// where `null(row)` says.
fn with_null_values(dir: &Path, null: impl Fn(usize) -> bool) {
    rewrite_samples(dir, |columns| {
        columns
            .into_iter()
            .map(|c| match &c.values {
                Values::F32(v) => Column::optional(
                    &c.name,
                    v.iter().enumerate().map(|(i, x)| (!null(i)).then_some(*x)),
                ),
                _ => c,
            })
            .collect()
    });
}

/// A null metric value is unknown: neither idle nor busy, and said.
#[test]
fn null_metric_values_are_unknown_not_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let whole = build_report(&Trace::open(&dir).unwrap(), &ReportOptions::default()).unwrap();
    let idle = whole.whole_run.idle_fraction.unwrap();
    assert!(idle > 0.99, "{idle}");

    // Every other sample without values: the rest still reads as idle as the whole did.
    with_null_values(&dir, |i| i % 2 == 0);
    let r = build_report(&Trace::open(&dir).unwrap(), &ReportOptions::default()).unwrap();
    let half = r.whole_run.idle_fraction.unwrap();
    assert!((half - idle).abs() < 0.01, "{half} vs {idle}");
    let n = whole.whole_run.devices[0].samples;
    let unknown = r
        .notes
        .iter()
        .find_map(|note| match note {
            Note::UnknownValues { samples, .. } => Some(*samples),
            _ => None,
        })
        .unwrap();
    assert_eq!(unknown, n.div_ceil(2));
    let gpu = &r.whole_run.devices[0];
    assert!(gpu.unknown_ns.get() > 0 && gpu.sampled_ns.get() + gpu.unknown_ns.get() > 0);
    // Means are over the known values.
    assert!(gpu.activity.mean.is_some_and(f64::is_finite));
    let text = report_text(&r);
    assert!(text.contains("lack a value the idle test needs"), "{text}");

    // No values at all: idle time unknown, not 0 % idle.
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    with_null_values(&dir, |_| true);
    let r = build_report(&Trace::open(&dir).unwrap(), &ReportOptions::default()).unwrap();
    assert_eq!(r.whole_run.idle_fraction, None);
    assert_eq!(r.whole_run.verdict, Verdict::ValuesUnknown);
    assert_eq!(r.gap_count, 0);
}

fn report(dir: &Path) -> Report {
    build_report(&Trace::open(dir).unwrap(), &ReportOptions::default()).unwrap()
}

/// An interval or full scale no recording can have is named in a warning, and the analysis takes
/// what the samples show: the same gaps as with the recorded values.
#[test]
fn absurd_manifest_values_are_named_and_replaced_by_what_the_samples_show() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let good = report(&dir);
    assert_eq!(good.interval_ns.get(), 30_000);
    assert!(good.warnings.is_empty(), "{:?}", good.warnings);
    for bad in [0i64, -30_000, 1 << 62, 7] {
        edit_manifest(&dir, |m| m["sampling"]["interval_ns"] = bad.into());
        let r = report(&dir);
        assert_eq!(r.interval_ns.get(), 30_000, "interval {bad}");
        assert_eq!(r.gap_count, good.gap_count, "interval {bad}");
        assert_eq!(r.min_gap_ns.get(), good.min_gap_ns.get(), "interval {bad}");
        let named = format!("manifest.json's sampling.interval_ns is {bad}");
        assert!(
            r.warnings.iter().any(|w| w.contains(&named)),
            "{:?}",
            r.warnings
        );
    }
    // Within a factor of 4 of the samples, the manifest's interval stands.
    edit_manifest(&dir, |m| m["sampling"]["interval_ns"] = 40_000.into());
    assert_eq!(report(&dir).interval_ns.get(), 40_000);
    edit_manifest(&dir, |m| m["sampling"]["interval_ns"] = 30_000.into());

    for bad in [0.0f64, -5.0] {
        edit_manifest(&dir, |m| {
            for h in m["heatmaps"].as_array_mut().unwrap() {
                h["full_scale"] = bad.into();
            }
        });
        let r = report(&dir);
        let a = r.activity.as_ref().unwrap();
        assert_eq!(a.full_scale, 100.0);
        assert_eq!(a.full_scale_source, FullScaleSource::Percent);
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("heatmap full_scale") && w.contains(&format!("is {bad}"))),
            "{:?}",
            r.warnings
        );
        assert_eq!(r.whole_run.idle_fraction, good.whole_run.idle_fraction);
    }
}

/// One sample stamped at time 0 is outside the recording: left out, with a warning, and the
/// report's duration is the recording's.
#[test]
fn a_sample_far_outside_the_recording_is_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let good = report(&dir);
    rewrite_samples(&dir, |mut columns| {
        for c in &mut columns {
            if let Values::I64(v) = &mut c.values {
                v[0] = if c.name == "start_ns" { 0 } else { 30_000 };
            }
        }
        columns
    });
    let r = report(&dir);
    // The second sample starts where the first ended.
    let shift = r.start_ns - good.start_ns;
    assert!(
        (29_000..31_000).contains(&shift),
        "the first sample is gone: {shift}"
    );
    assert_eq!(r.end_ns, good.end_ns);
    assert!(
        r.warnings.iter().any(|w| w
            .starts_with("1 row(s) lie more than a minute outside the recording")
            && w.contains("(samples: 1)")),
        "{:?}",
        r.warnings
    );
}
