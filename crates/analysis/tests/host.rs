//! The host's frames during the gaps, on the fixture with host stacks (see
//! `cufall_testkit::fixture` for the timeline and the threads' stacks).

use cufall_analysis::diff::{build_diff, diff_text};
use cufall_analysis::host::{HostClass, HostScope, LaunchingFrom};
use cufall_analysis::render::report_text;
use cufall_analysis::report::Report;
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::fixture::{Fixture, US};
use cufall_trace::Trace;

fn opts() -> ReportOptions {
    ReportOptions {
        min_gap_ns: Some(50 * US),
        ..Default::default()
    }
}

fn with_host() -> Fixture {
    Fixture {
        host_stacks: true,
        ..Default::default()
    }
}

fn report_of(fx: &Fixture) -> (tempfile::TempDir, Report) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = fx.write(dir.path(), "fixture.cufall");
    let trace = Trace::open(&path).expect("open");
    let mut r = build_report(&trace, &opts()).expect("report");
    r.trace = "fixture.cufall".into();
    (dir, r)
}

fn class<'a>(r: &'a Report, scope: HostScope, name: &str) -> &'a HostClass {
    let h = r.host.as_ref().expect("host side");
    h.gap_classes
        .iter()
        .chain(h.phases.iter())
        .find(|c| c.scope == scope && c.name == name)
        .unwrap_or_else(|| panic!("no {scope:?} {name}"))
}

#[test]
fn print_it() {
    let (_d, r) = report_of(&with_host());
    println!("{}", report_text(&r));
}
