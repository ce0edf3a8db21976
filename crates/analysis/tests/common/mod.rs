//! What the report tests on the synthetic fixture share: the options they report with and the
//! report of a fixture written to a new folder.

use cufall_analysis::report::Report;
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::fixture::{Fixture, US};
use cufall_trace::Trace;
use cufall_trace::model::Nanos;

/// Gaps from 50 µs, the minimum gap the fixture's timeline is written for.
pub fn opts() -> ReportOptions {
    ReportOptions {
        min_gap_ns: Some(Nanos(50 * US)),
        ..Default::default()
    }
}

/// `fx` written as `fixture.cufall` and reported with [`opts`]; the folder lives as long as the
/// returned guard.
pub fn report_of(fx: &Fixture) -> (tempfile::TempDir, Report) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = fx.write(dir.path(), "fixture.cufall");
    let trace = Trace::open(&path).expect("open");
    let mut r = build_report(&trace, &opts()).expect("report");
    r.trace = "fixture.cufall".into();
    (dir, r)
}
