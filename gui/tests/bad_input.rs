//! Bad input: each problem gives one clear message in the window (and on stderr), never a
//! panic, and whatever can still be shown is shown.

mod common;

use common::{example, harness};
use cufall_gui::loaded::ReportState;
use cufall_gui::view::Settings;
use cufall_testkit::examples::copy_dir;
use eframe::egui::Vec2;
use std::path::PathBuf;

const SIZE: Vec2 = Vec2::new(1000.0, 600.0);

fn copy_example(name: &str, dir: &tempfile::TempDir) -> PathBuf {
    let to = dir.path().join(name);
    copy_dir(&example(name), &to);
    to
}

fn messages(traces: &[PathBuf], align: Option<&str>) -> (Vec<String>, common::TestApp) {
    let mut h = harness(traces, align, Settings::default(), SIZE, false);
    let state = h.state_mut();
    let texts = state
        .app()
        .st
        .messages
        .iter()
        .map(|m| m.text.clone())
        .collect();
    let app = std::mem::replace(
        state,
        common::TestApp {
            traces: Vec::new(),
            align: None,
            settings: Settings::default(),
            app: None,
        },
    );
    (texts, app)
}

#[test]
fn missing_file() {
    let (msgs, mut app) = messages(&[PathBuf::from("/nonexistent/run.cufall")], None);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("does not exist"), "{msgs:?}");
    assert!(app.app().slots.is_empty());
}

#[test]
fn not_a_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "hello").expect("write");
    let (msgs, _) = messages(&[file, dir.path().to_path_buf()], None);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs.iter().all(|m| m.contains("is not a cufall trace")),
        "{msgs:?}"
    );
}

#[test]
fn newer_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = copy_example("h200-torch-phases.cufall", &dir);
    let m = t.join("manifest.json");
    let text = std::fs::read_to_string(&m).expect("read");
    std::fs::write(
        &m,
        text.replace("\"schema_version\": \"1.1\"", "\"schema_version\": \"2.0\"")
            .replace("\"schema_version\":\"1.1\"", "\"schema_version\":\"2.0\""),
    )
    .expect("write");
    let (msgs, _) = messages(&[t], None);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(
        msgs[0].contains("newer") && msgs[0].contains("Upgrade"),
        "{msgs:?}"
    );
}

#[test]
fn corrupted_samples_segment_still_shows_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = copy_example("h200-specdec-0.5b-graphs-off.cufall", &dir);
    let seg = t.join("samples/000000.parquet");
    let mut bytes = std::fs::read(&seg).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&seg, bytes).expect("write");
    let (msgs, mut app) = messages(&[t], None);
    assert!(
        msgs.iter().any(|m| m.contains("fails its checksum")),
        "{msgs:?}"
    );
    let slot = &app.app().slots[0];
    let s = slot.data.lock();
    let tables = s.tables.as_ref().expect("small tables loaded");
    assert!(!tables.nvtx.is_empty(), "NVTX ranges still shown");
    assert!(!tables.kernels.is_empty(), "kernels still shown");
}

#[test]
fn truncated_segment_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = copy_example("h200-specdec-0.5b-graphs-off.cufall", &dir);
    let seg = t.join("samples/000001.parquet");
    let bytes = std::fs::read(&seg).expect("read");
    std::fs::write(&seg, &bytes[..bytes.len() / 3]).expect("write");
    let (msgs, mut app) = messages(&[t], None);
    assert!(msgs.iter().any(|m| m.contains("truncated")), "{msgs:?}");
    let slot = &app.app().slots[0];
    let s = slot.data.lock();
    let samples: u64 = s.pyramids.values().map(|p| p.samples()).sum();
    // The first segment's 25,107 samples are still there.
    assert!(samples >= 25_107, "{samples}");
}

#[test]
fn no_common_phase_to_align_at() {
    let (msgs, mut app) = messages(
        &[
            example("h200-specdec-0.5b-graphs-off.cufall"),
            example("h200-matmul-copy.cufall"),
        ],
        Some("verify"),
    );
    assert!(
        msgs.iter().any(|m| m.contains("no NVTX phase in common")),
        "{msgs:?}"
    );
    assert_eq!(app.app().slots.len(), 2, "both recordings still open");
    assert_eq!(app.app().st.align_phase, None);
}

#[test]
fn unknown_phase_names_the_common_ones() {
    let (msgs, _) = messages(
        &[
            example("h200-specdec-0.5b-graphs-off.cufall"),
            example("h200-specdec-0.5b-graphs-on.cufall"),
        ],
        Some("decode"),
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("not in both recordings") && m.contains("verify")),
        "{msgs:?}"
    );
}

#[test]
fn an_nvml_only_recording_has_no_statistics_and_that_is_no_error() {
    let (msgs, mut app) = messages(
        &[example("counters-unavailable/h200-nvml-only.cufall")],
        None,
    );
    let slot = &app.app().slots[0];
    let s = slot.data.lock();
    assert!(matches!(s.report, ReportState::NvmlOnly), "{:?}", s.report);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert!(
        !msgs.iter().any(|m| m.contains("statistics")),
        "not a message: {msgs:?}"
    );
}

#[test]
fn an_absurd_manifest_interval_is_named_and_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = copy_example("h200-specdec-0.5b-graphs-off.cufall", &dir);
    let m = t.join("manifest.json");
    let text = std::fs::read_to_string(&m).expect("read");
    std::fs::write(
        &m,
        text.replace("\"interval_ns\": 30000", "\"interval_ns\": 0"),
    )
    .expect("write");
    let (msgs, mut app) = messages(&[t], None);
    assert!(
        msgs.iter()
            .any(|m| m.contains("manifest.json's sampling.interval_ns is 0")),
        "{msgs:?}"
    );
    assert_eq!(app.app().slots[0].data.interval_ns, 30_000);
}

/// The rows a recording opens with, and the line naming what it lacks.
fn rows_and_absent(traces: &[PathBuf]) -> (Vec<cufall_gui::timeline::Row>, Option<String>) {
    use cufall_gui::loaded::Locked;
    let mut h = harness(traces, None, Settings::default(), SIZE, false);
    let app = h.state_mut().app();
    let locked: Vec<Locked<'_>> = app.slots.iter().map(Locked::new).collect();
    let none = Default::default();
    let host = (
        app.st.host_folded.clone().unwrap_or_default(),
        app.st.host_open.clone().unwrap_or_default(),
    );
    let rows = cufall_gui::timeline::rows(
        &locked,
        &app.settings,
        (app.st.folded.as_ref().unwrap_or(&none), (&host.0, &host.1)),
        false,
    );
    (rows, cufall_gui::timeline::absent_line(&locked))
}

#[test]
fn a_recording_without_counters_kernels_or_host_samples_says_what_is_absent() {
    use cufall_gui::timeline::Row;
    // NVML alone: no counters, no kernels, no host samples; its NVML tracks are there.
    let (rows, line) = rows_and_absent(&[example("counters-unavailable/h200-nvml-only.cufall")]);
    assert_eq!(
        line.as_deref(),
        Some(
            "This recording has no GPU counters, no kernels, no host samples (record with \
             --host-stacks)."
        )
    );
    assert!(
        rows.iter().any(|r| matches!(r, Row::Nvml { .. })),
        "{rows:?}"
    );
    assert!(
        !rows
            .iter()
            .any(|r| matches!(r, Row::Metric { .. } | Row::Kernels { .. }))
    );
    // Counters and kernels, no host samples.
    let (rows, line) = rows_and_absent(&[example("h200-torch-phases.cufall")]);
    assert_eq!(
        line.as_deref(),
        Some("This recording has no host samples (record with --host-stacks).")
    );
    assert!(rows.iter().any(|r| matches!(r, Row::Metric { .. })));
    assert!(rows.iter().any(|r| matches!(r, Row::Kernels { .. })));
    // Everything: no line.
    let (rows, line) = rows_and_absent(&[example("h200-torch-phases-host.cufall")]);
    assert_eq!(line, None);
    assert!(rows.iter().any(|r| matches!(r, Row::Host { .. })));
    // Two recordings: whose.
    let (_, line) = rows_and_absent(&[
        example("h200-torch-phases.cufall"),
        example("counters-unavailable/h200-nvml-only.cufall"),
    ]);
    assert_eq!(
        line.as_deref(),
        Some("A, B: no host samples (record with --host-stacks); B: no GPU counters, no kernels.")
    );
}
