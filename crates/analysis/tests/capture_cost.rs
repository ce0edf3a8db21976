//! The report's CAPTURE COST section: events in each phase's ranges × the cost per event the
//! capture library measured, on fixture traces (`cufall_testkit::fixture`: three 1000 µs
//! `step`s, each a 400 µs `draft` and a 400 µs `verify`, one kernel per draft and verify on
//! each of two GPUs), and on a real recording made before capture measured its cost.

use cufall_analysis::capcost::{CaptureCost, EventKind};
use cufall_analysis::render::report_text;
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::fixture::{Fixture, T0};
use cufall_trace::Trace;
use cufall_trace::model::CaptureEvent;

fn row(pid: u32, event: &str, count: u64, detail: &str) -> CaptureEvent {
    CaptureEvent {
        t_ns: T0,
        pid,
        event: event.into(),
        count,
        detail: detail.into(),
    }
}

fn report_with(rows: Vec<CaptureEvent>) -> (String, CaptureCost, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Fixture::default().write_with_capture(dir.path(), "fx.cufall", &rows);
    let trace = Trace::open(&path).expect("open");
    let r = build_report(&trace, &ReportOptions::default()).expect("report");
    let json = serde_json::to_value(&r).expect("json");
    let cost = r.capture_cost.clone().expect("a CAPTURE COST section");
    (report_text(&r), cost, json)
}

fn section(text: &str) -> String {
    let at = text.find("\nCAPTURE COST").expect("a CAPTURE COST section");
    let rest = &text[at + 1..];
    let end = rest.find("\n\n").unwrap_or(rest.len());
    rest[..end].to_string()
}

#[test]
fn measured_costs_give_the_added_time_per_step() {
    // Two processes measured NVTX (400 and 600 ns: the mean, 500, is used), one kernels.
    let (text, c, json) = report_with(vec![
        row(1234, "capture_cost_nvtx", 400, "400 ns per NVTX range"),
        row(1240, "capture_cost_nvtx", 600, "600 ns per NVTX range"),
        row(
            1234,
            "capture_cost_kernel",
            9_000,
            "9000 ns per kernel launch",
        ),
    ]);
    assert!(c.calibrated);
    // The cost rows are this section, not capture problems or unknown capture events.
    assert!(!text.contains("capture event"), "{text}");
    assert!(!text.contains("capture_cost"), "{text}");
    let step = c.phases.iter().find(|p| p.path == "step").unwrap();
    // Per step: 3 NVTX ranges × 500 ns + 4 kernels × 9 µs = 37.5 µs of a 1000 µs step.
    assert_eq!(step.steps, 3);
    assert_eq!(step.events[&EventKind::Nvtx], 9);
    assert_eq!(step.events[&EventKind::Kernel], 12);
    assert_eq!(step.added_ns, Some(3.0 * 37_500.0));
    assert_eq!(step.per_step_ns, Some(37_500.0));
    assert!((step.host_fraction.unwrap() - 0.0375).abs() < 1e-12);
    // A draft: its own range and one kernel per GPU, 18.5 µs of 400 µs.
    let draft = c.phases.iter().find(|p| p.path == "step/draft").unwrap();
    assert_eq!(draft.per_step_ns, Some(18_500.0));
    assert!((draft.host_fraction.unwrap() - 18.5 / 400.0).abs() < 1e-12);
    assert_eq!(
        section(&text),
        "CAPTURE COST (host time cufall's capture added, from its cost per event measured in \
         the program and after it)\n  \
         step: capture added about 37.5 µs per step (3.8% of host time); gaps shorter than that \
         may be cufall's own\n  \
         step/draft: capture added about 18.5 µs per step (4.6% of host time); gaps shorter \
         than that may be cufall's own\n  \
         step/verify: capture added about 18.5 µs per step (4.6% of host time); gaps shorter \
         than that may be cufall's own\n  \
         cost per event: NVTX ranges 500 ns; kernel launches 9.0 µs"
    );
    let j = &json["capture_cost"];
    assert_eq!(j["calibrated"], true);
    assert_eq!(j["phases"][0]["path"], "step");
    assert_eq!(j["phases"][0]["per_step_ns"], 37_500.0);
    assert_eq!(j["phases"][0]["events"]["kernel"], 12);
    assert_eq!(j["kinds"][0]["kind"], "nvtx");
    assert_eq!(j["kinds"][0]["ns_per_event"], 500.0);
    assert_eq!(j["kinds"][0]["processes"], 2);
}

#[test]
fn a_kind_without_a_measured_cost_makes_the_cost_unknown_never_zero() {
    let (text, c, json) = report_with(vec![
        row(1234, "capture_cost_nvtx", 500, "500 ns per NVTX range"),
        row(1234, "capture_cost_kernel_unknown", 0, "not measured"),
        // A measured row of 0 ns measured nothing: it does not make the cost known.
        row(1240, "capture_cost_kernel", 0, "0 ns"),
    ]);
    let step = c.phases.iter().find(|p| p.path == "step").unwrap();
    assert_eq!(step.added_ns, None);
    assert_eq!(step.per_step_ns, None);
    assert_eq!(step.host_fraction, None);
    assert_eq!(step.unknown, vec![EventKind::Kernel]);
    assert_eq!(step.known_ns, 9.0 * 500.0);
    let s = section(&text);
    assert!(
        s.contains(
            "  step: capture cost unknown: kernel launches have no measured cost; the measured \
             kinds alone add about 1.5 µs per step\n"
        ),
        "{s}"
    );
    assert!(
        s.contains("cost per event: NVTX ranges 500 ns; kernel launches unknown"),
        "{s}"
    );
    assert!(!s.contains("about 0"), "{s}");
    assert_eq!(
        json["capture_cost"]["phases"][0]["added_ns"],
        serde_json::Value::Null
    );
    assert_eq!(
        json["capture_cost"]["kinds"][1]["ns_per_event"],
        serde_json::Value::Null
    );
    assert_eq!(json["capture_cost"]["kinds"][1]["detail"], "not measured");
}

#[test]
fn a_recording_without_cost_rows_says_unknown() {
    let (text, c, json) = report_with(Vec::new());
    assert!(!c.calibrated);
    assert!(c.phases.iter().all(|p| p.added_ns.is_none()));
    assert_eq!(
        section(&text),
        "CAPTURE COST (host time cufall's capture added, from its cost per event measured in \
         the program and after it)\n  \
         capture cost unknown: this recording holds no measurement of capture's cost (made \
         before cufall measured it)"
    );
    assert_eq!(json["capture_cost"]["calibrated"], false);
}

/// A real recording of trace format 1.1, from before capture measured its cost: NVTX ranges
/// and kernels, no cost rows.
#[test]
fn an_old_recording_reads_as_unknown() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let trace = Trace::open(root.join("examples/h200-specdec-0.5b-graphs-off.cufall")).unwrap();
    let r = build_report(&trace, &ReportOptions::default()).unwrap();
    let c = r
        .capture_cost
        .as_ref()
        .expect("a recording with captured events");
    assert!(!c.calibrated);
    assert!(c.kinds.iter().all(|k| k.ns_per_event.is_none()));
    assert!(
        c.phases
            .iter()
            .all(|p| p.added_ns.is_none() && p.known_ns == 0.0)
    );
    let text = report_text(&r);
    assert!(text.contains("  capture cost unknown: this recording holds no measurement"));
    // Its capture rows are not mistaken for capture problems.
    assert!(!text.contains("capture_cost"));
}

/// A recording of counters only (no program): no section at all.
#[test]
fn a_recording_without_captured_events_has_no_section() {
    let dir = tempfile::tempdir().unwrap();
    let fx = Fixture {
        nvtx: false,
        kernels: false,
        ..Default::default()
    };
    let path = fx.write(dir.path(), "fx.cufall");
    let r = build_report(&Trace::open(&path).unwrap(), &ReportOptions::default()).unwrap();
    assert!(r.capture_cost.is_none());
    assert!(!report_text(&r).contains("CAPTURE COST"));
    assert!(
        serde_json::to_value(&r)
            .unwrap()
            .get("capture_cost")
            .is_none()
    );
}

/// The recorder's calibration (process 0) measures the CUDA kinds after the program; a
/// process's own `_unknown` row for the same kind (what capture wrote before the calibration
/// existed) does not make the cost unknown when a measurement is there.
#[test]
fn the_recorders_calibration_row_counts_over_a_processs_unknown_row() {
    let (text, c, _) = report_with(vec![
        row(1234, "capture_cost_nvtx", 500, "500 ns per NVTX range"),
        row(1234, "capture_cost_kernel_unknown", 0, "not measured"),
        row(
            0,
            "capture_cost_kernel",
            3_000,
            "3000 ns per kernel launch: CUPTI's tracing in the launch path",
        ),
    ]);
    let kernel = c
        .kinds
        .iter()
        .find(|k| k.kind == EventKind::Kernel)
        .unwrap();
    assert_eq!(kernel.ns_per_event, Some(3_000.0));
    let step = c.phases.iter().find(|p| p.path == "step").unwrap();
    // Per step: 3 NVTX ranges × 500 ns + 4 kernels × 3 µs = 13.5 µs of a 1000 µs step.
    assert_eq!(step.per_step_ns, Some(13_500.0));
    assert!(
        section(&text).contains("step: capture added about 13.5 µs per step"),
        "{text}"
    );
}
