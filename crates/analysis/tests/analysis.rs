//! Report, diff and export on synthetic fixture traces (see `common/mod.rs` for the timeline).

mod common;
use common::{opts, report_of};

use cufall_analysis::diff::{build_diff, diff_text};
use cufall_analysis::render::report_text;
use cufall_analysis::report::{GapGroup, PlaceKind, Report, build_report_with};
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::fixture::{DRAM, ELAPSED, Fixture, INTERVAL, T0, TENSOR, US};
use cufall_trace::Trace;
use cufall_trace::model::DeviceId;
use cufall_trace::model::Nanos;

fn group<'a>(r: &'a Report, place: &str) -> &'a GapGroup {
    r.gap_groups
        .iter()
        .find(|g| g.place == place)
        .unwrap_or_else(|| panic!("no gap group {place}; have {:?}", r.gap_groups))
}

#[test]
fn gaps_have_exact_counts_durations_places_and_causes() {
    let (_dir, r) = report_of(&Fixture::default());
    let places: Vec<(&str, u64, i64)> = r
        .gap_groups
        .iter()
        .map(|g| {
            (
                g.place.as_str(),
                g.totals.count,
                g.totals.total_ns.get() / US,
            )
        })
        .collect();
    // Ranked by total time.
    assert_eq!(
        places,
        [
            ("draft → verify", 5, 500),
            ("step/verify", 2, 400),
            ("verify → draft", 4, 350),
            ("step/verify → (end)", 2, 200),
        ]
    );
    let dv = group(&r, "draft → verify");
    assert_eq!(dv.kind, PlaceKind::Between);
    assert_eq!(dv.before.as_deref(), Some("step/draft"));
    assert_eq!(dv.after.as_deref(), Some("step/verify"));
    assert_eq!(dv.totals.no_kernel_ns.map(Nanos::get), Some(500 * US));
    assert_eq!(dv.totals.kernel_resident_ns.map(Nanos::get), Some(0));
    assert_eq!(dv.devices, [DeviceId(0), DeviceId(1)]);
    // The idle stretch inside verify has the verify kernel resident: latency-bound.
    let v = group(&r, "step/verify");
    assert_eq!(v.kind, PlaceKind::In);
    assert_eq!(v.totals.kernel_resident_ns.map(Nanos::get), Some(400 * US));
    assert_eq!(v.totals.no_kernel_ns.map(Nanos::get), Some(0));
    // Device 0's verify → draft gap at 1900 µs is cut by a drop at [1930, 1950): the 30 µs
    // piece is under the minimum gap, the 50 µs piece stays.
    let mut dev0: Vec<(i64, i64)> = r
        .gaps
        .iter()
        .filter(|g| g.device == DeviceId(0))
        .map(|g| ((g.start_ns - T0) / US, g.duration_ns.get() / US))
        .collect();
    dev0.sort_unstable();
    assert_eq!(
        dev0,
        [
            (400, 100),
            (900, 100),
            (1400, 100),
            (1600, 200),
            (1950, 50),
            (2900, 100)
        ]
    );
    assert_eq!(r.gaps.len(), 13);
    assert_eq!(r.gaps[0].duration_ns.get(), 200 * US, "longest first");
}

#[test]
fn drops_are_reported_and_never_counted_as_idle() {
    let (_dir, r) = report_of(&Fixture::default());
    let whole = |d: u32| {
        r.whole_run
            .devices
            .iter()
            .find(|x| x.device == DeviceId(d))
            .expect("device")
            .clone()
    };
    // Device 0: 3000 µs minus 120 µs of drops sampled; idle 680 µs (the 30 µs piece before the
    // drop counts as idle time, the drop itself does not).
    assert_eq!(whole(0).sampled_ns.get(), 2880 * US);
    assert_eq!(whole(0).idle_ns.get(), 680 * US);
    assert_eq!(whole(0).dropped_ns.get(), 120 * US);
    assert_eq!(whole(1).sampled_ns.get(), 3000 * US);
    assert_eq!(whole(1).idle_ns.get(), 800 * US);
    assert_eq!(whole(1).dropped_ns.get(), 0);
    for g in r.gaps.iter().filter(|g| g.device == DeviceId(0)) {
        for (s, e) in [(2400, 2500), (1930, 1950)] {
            assert!(
                g.end_ns <= T0 + s * US || g.start_ns >= T0 + e * US,
                "gap {g:?} overlaps a drop"
            );
        }
    }
    assert_eq!(r.drops.len(), 1);
    assert_eq!(r.drops[0].device, DeviceId(0));
    assert_eq!(r.drops[0].count, 2);
    assert_eq!(r.drops[0].dropped_ns.get(), 120 * US);
    assert_eq!(r.drops[0].lost_samples, 12);
}

#[test]
fn phase_statistics() {
    let (_dir, r) = report_of(&Fixture::default());
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["step", "step/draft", "step/verify"]);
    let draft = &r.phases[1];
    assert_eq!(
        (
            draft.count,
            draft.total_ns.get(),
            draft.p50_ns.get(),
            draft.p99_ns.get()
        ),
        (3, 1200 * US, 400 * US, 400 * US)
    );
    assert_eq!(draft.depth, 1);
    for d in &draft.devices {
        assert_eq!(d.idle_ns.get(), 0);
        assert_eq!(d.samples, 120);
        assert_eq!(d.metrics[0].name, TENSOR);
        assert_eq!(d.metrics[0].mean, Some(800.0));
        assert_eq!(d.metrics[0].peak, Some(800.0));
        assert_eq!(d.metrics[2].mean, Some(60.0));
        let act = d.activity.mean.expect("activity");
        assert!((act - 0.8).abs() < 1e-9, "{act}");
        assert_eq!(d.power_w, Some(300.0 + f64::from(d.device.0)));
        assert_eq!(d.sm_clock_mhz, Some(1980.0));
    }
    assert!(
        draft.verdict.to_string().starts_with("busy"),
        "{}",
        draft.verdict
    );
    let verify = &r.phases[2];
    let idle = verify.idle_fraction.expect("idle");
    assert!((idle - 200.0 / 1200.0).abs() < 1e-9, "{idle}");
    assert!(
        verify.verdict.to_string().contains("latency-bound"),
        "{}",
        verify.verdict
    );
    let step = &r.phases[0];
    assert_eq!(step.devices[0].dropped_ns.get(), 120 * US);
    assert!(r.nvtx_captured && r.kernels_captured && r.nvml_captured);
    assert_eq!(r.min_gap_ns.get(), 50 * US);
    assert_eq!(r.activity.as_ref().expect("activity").metric, TENSOR);
    assert_eq!(
        r.activity
            .as_ref()
            .expect("activity")
            .denominator
            .as_deref(),
        Some(ELAPSED)
    );
    assert_eq!(r.activity.as_ref().expect("activity").full_scale, 1.0);
}

#[test]
fn default_min_gap_is_five_intervals_and_raw_metric_uses_trace_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fx = Fixture {
        heatmap: false,
        ..Fixture::default()
    };
    let trace = Trace::open(fx.write(dir.path(), "t.cufall")).expect("open");
    let r = build_report(&trace, &ReportOptions::default()).expect("report");
    assert_eq!(r.min_gap_ns.get(), 5 * INTERVAL);
    assert_eq!(r.activity.as_ref().expect("activity").metric, TENSOR);
    assert_eq!(r.activity.as_ref().expect("activity").denominator, None);
    assert_eq!(r.activity.as_ref().expect("activity").full_scale, 800.0);
    assert_eq!(r.gaps.len(), 13);
    // A percentage metric gets a full scale of 100.
    let opts = ReportOptions {
        metric: Some(DRAM.into()),
        ..Default::default()
    };
    let r = build_report(&trace, &opts).expect("report");
    assert_eq!(r.activity.as_ref().expect("activity").full_scale, 100.0);
    assert_eq!(r.idle_threshold, Some(5.0));
    assert_eq!(r.gaps.len(), 13);
}

#[test]
fn listing_the_longest_gaps_changes_no_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = Trace::open(Fixture::default().write(dir.path(), "t.cufall")).expect("open");
    let mut seen = Vec::new();
    let every = build_report_with(
        &trace,
        &opts(),
        &mut |g| seen.push(g.clone()),
        &mut |_, _| {},
    )
    .expect("report");
    assert!(every.gaps.len() > 4, "{}", every.gaps.len());
    assert_eq!(every.gap_count, every.gaps.len() as u64);
    // Every gap is handed over once, by device then time, whatever the report keeps.
    let mut sorted = seen.clone();
    sorted.sort_by_key(|g| (g.device, g.start_ns));
    assert_eq!(seen, sorted);
    let mut longest = every.gaps.clone();
    longest.sort_by_key(|g| (g.device, g.start_ns));
    assert_eq!(seen, longest);
    for keep in [0, 1, 4, every.gaps.len() + 3] {
        let o = ReportOptions {
            gap_rows: Some(keep),
            ..opts()
        };
        let mut n = 0;
        let some = build_report_with(&trace, &o, &mut |_| n += 1, &mut |_, _| {}).expect("report");
        assert_eq!(n, every.gaps.len());
        assert_eq!(some.gap_count, every.gap_count);
        assert_eq!(some.gaps, every.gaps[..keep.min(every.gaps.len())]);
        assert_eq!(
            Report {
                gaps: every.gaps.clone(),
                ..some
            },
            every
        );
    }
}

#[test]
fn trace_without_nvtx_reports_the_whole_run() {
    let (_dir, r) = report_of(&Fixture {
        nvtx: false,
        kernels: false,
        ..Fixture::default()
    });
    assert!(!r.nvtx_captured);
    assert!(r.phases.is_empty());
    assert!(
        r.notes
            .iter()
            .any(|n| n.to_string().contains("NVTX ranges were not captured")),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.to_string().contains("kernel activity was not captured"))
    );
    assert_eq!(r.gap_groups.len(), 1);
    assert_eq!(r.gap_groups[0].place, "(whole run)");
    assert_eq!(r.gap_groups[0].totals.count, 13);
    assert_eq!(r.gap_groups[0].totals.total_ns.get(), 1450 * US);
    assert_eq!(r.gap_groups[0].totals.no_kernel_ns.map(Nanos::get), None);
    insta::assert_snapshot!("report_without_nvtx", report_text(&r));
}

#[test]
fn unknown_metric_lists_the_recorded_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = Trace::open(Fixture::default().write(dir.path(), "t.cufall")).expect("open");
    let opts = ReportOptions {
        metric: Some("sm__nope.avg".into()),
        ..Default::default()
    };
    let err = build_report(&trace, &opts)
        .expect_err("unknown metric")
        .to_string();
    assert!(err.contains("no metric named `sm__nope.avg`"), "{err}");
    assert!(err.contains(TENSOR) && err.contains(DRAM), "{err}");
}

#[test]
fn report_text_snapshot() {
    let (_dir, r) = report_of(&Fixture::default());
    insta::assert_snapshot!("report_fixture", report_text(&r));
}

#[test]
fn diff_matches_phases_and_warns_about_different_gpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Trace::open(Fixture::default().write(dir.path(), "a.cufall")).expect("open a");
    let fx_b = Fixture {
        gpu_name: "NVIDIA A100".into(),
        extra_verify_gap_us: 50,
        ..Fixture::default()
    };
    let b = Trace::open(fx_b.write(dir.path(), "b.cufall")).expect("open b");
    let mut d = build_diff(&a, &b, &opts()).expect("diff");
    assert!(
        d.warnings.iter().any(|w| w.contains("different GPUs")),
        "{:?}",
        d.warnings
    );
    assert_eq!(d.phases[0].path, "step/verify");
    assert_eq!(d.phases[0].delta_total_ns.get(), -150 * US);
    let gaps: Vec<(&str, i64)> = d
        .gaps
        .iter()
        .map(|g| (g.place.as_str(), g.totals.delta_total_ns.get() / US))
        .collect();
    assert_eq!(
        gaps,
        [
            ("verify → draft", 230),
            ("step/verify → (end)", 100),
            ("draft → verify", 0),
            ("step/verify", 0),
        ]
    );
    // A metric only A records: the error names B and says what to do.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let c = Trace::open(
        Fixture {
            heatmap: false,
            ..Fixture::default()
        }
        .write(dir2.path(), "c.cufall"),
    )
    .expect("open c");
    let only_a = ReportOptions {
        metric: Some("sm__only_in_a.avg".into()),
        ..opts()
    };
    let err = build_diff(&a, &c, &only_a)
        .expect_err("unknown in A")
        .to_string();
    assert!(err.contains("no metric named `sm__only_in_a.avg`"), "{err}");
    d.a.trace = "a.cufall".into();
    d.b.trace = "b.cufall".into();
    insta::assert_snapshot!("diff_fixture", diff_text(&d));
}

/// Reading the samples in many small time windows gives the same totals and gaps as one window.
#[test]
fn windowed_scan_matches_a_single_window() {
    use cufall_analysis::{gaps, phases::Phases, report::resolve_activity, samples};
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = Trace::open(Fixture::default().write(dir.path(), "t.cufall")).expect("open");
    let activity = resolve_activity(&trace, &opts())
        .expect("activity")
        .expect("counters");
    let phases = Phases::build(&trace.nvtx().expect("nvtx"));
    let metrics: Vec<String> = trace.metric_names().iter().map(|m| m.to_string()).collect();
    let drops = trace.drops().expect("drops");
    let run = |per_window: u64| {
        let spec = samples::ScanSpec {
            phases: &phases,
            activity: &activity,
            metrics: &metrics,
            min_gap_ns: Nanos(50 * US),
            hole_ns: Nanos(5 * US),
            samples_per_window: per_window,
        };
        let (totals, frags) = samples::scan_samples(&trace, &spec).expect("scan");
        let windows = samples::time_windows(&trace, per_window)
            .expect("windows")
            .len();
        (
            totals,
            gaps::merge_fragments(frags, &drops, Nanos(50 * US), Nanos(5 * US)).collect::<Vec<_>>(),
            windows,
        )
    };
    let (t1, g1, w1) = run(u64::MAX);
    assert_eq!(w1, 1);
    for per_window in [37, 100, 250] {
        let (t, g, w) = run(per_window);
        assert!(w > 1);
        assert_eq!(g, g1, "gaps with windows of {per_window} samples");
        assert_eq!(t.len(), t1.len());
        for (k, a) in &t1 {
            let b = &t[k];
            assert_eq!(
                (
                    a.samples,
                    a.sampled_ns,
                    a.idle_ns,
                    a.first_start_ns,
                    a.last_end_ns,
                    &a.peaks
                ),
                (
                    b.samples,
                    b.sampled_ns,
                    b.idle_ns,
                    b.first_start_ns,
                    b.last_end_ns,
                    &b.peaks
                ),
                "segment {k:?}"
            );
            for (x, y) in a.sums.iter().zip(&b.sums) {
                assert!(
                    (x - y).abs() < 1e-6 * x.abs().max(1.0),
                    "segment {k:?}: {x} vs {y}"
                );
            }
        }
    }
}

/// A trace whose recording produced no samples reports without failing, and one without GPU
/// counters (NVML only) reports what it has and says why idle time is not measured.
#[test]
fn empty_and_counterless_traces() {
    use cufall_trace::model::{DeviceId, DeviceInfo, Manifest};
    use cufall_trace::{TraceWriter, WriterOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let fx = Fixture::default();
    // Same manifest as the fixture, no rows at all.
    let full = fx.write(dir.path(), "full.cufall");
    let manifest = Trace::open(&full).expect("open").manifest().clone();
    let empty = dir.path().join("empty.cufall");
    TraceWriter::create(&empty, manifest, WriterOptions::default())
        .expect("create")
        .finish(T0)
        .expect("finish");
    let r = build_report(&Trace::open(&empty).expect("open"), &opts()).expect("report");
    assert!(r.gaps.is_empty());
    assert_eq!(r.whole_run.devices.len(), 2);
    assert_eq!(r.whole_run.devices[0].samples, 0);
    assert_eq!(
        r.whole_run.verdict.to_string(),
        "no samples fall in this phase"
    );
    assert!(report_text(&r).contains("IDLE GAPS"));

    let mut m = Manifest::new("test", T0);
    m.devices = vec![DeviceInfo {
        id: DeviceId(0),
        name: "NVIDIA H200".into(),
        chip: String::new(),
        uuid: String::new(),
        pci_bus_id: String::new(),
        sm_count: None,
        memory_total_bytes: None,
    }];
    m.counters_unavailable = Some("profiling is restricted to admin users".into());
    let nvml_only = dir.path().join("nvml.cufall");
    TraceWriter::create(&nvml_only, m, WriterOptions::default())
        .expect("create")
        .finish(T0)
        .expect("finish");
    let r = build_report(&Trace::open(&nvml_only).expect("open"), &opts()).expect("report");
    assert_eq!(r.activity, None);
    assert!(
        r.notes.iter().any(|n| n
            .to_string()
            .contains("GPU counters were not recorded (profiling is restricted")),
        "{:?}",
        r.notes
    );
    assert!(report_text(&r).contains("idle: not measured"));
    // In a diff, B must record A's activity metric: the error names B and says what to do.
    let a = Trace::open(&full).expect("open");
    let err = build_diff(&a, &Trace::open(&nvml_only).expect("open"), &opts())
        .expect_err("B lacks the metric")
        .to_string();
    assert!(
        err.contains("nvml.cufall: the trace has no metric named"),
        "{err}"
    );
    // What to pass instead is the command line's to say (sampler/tests/cli_analysis.rs).
    assert!(err.contains("A's activity metric"), "{err}");
}

fn report_with(fx: &Fixture, phases: &str) -> cufall_analysis::Result<Report> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = fx.write(dir.path(), "fixture.cufall");
    let trace = Trace::open(&path).expect("open");
    let opts = ReportOptions {
        phases: phases.parse().expect("a phase selection"),
        ..opts()
    };
    build_report(&trace, &opts)
}

fn with_libraries() -> Fixture {
    Fixture {
        library_nvtx: true,
        ..Fixture::default()
    }
}

#[test]
fn library_ranges_are_not_phases_and_never_name_a_gap() {
    let (_d, plain) = report_of(&Fixture::default());
    let r = report_with(&with_libraries(), "program").expect("report");
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["step", "step/draft", "step/verify"]);
    // The gaps fall where they fall without the library ranges: the program's path names them.
    assert_eq!(r.gap_groups, plain.gap_groups);
    assert_eq!(r.phases, plain.phases);
    let d = &r.phase_domains;
    let used: Vec<(&str, u64)> = d
        .used
        .iter()
        .map(|c| (c.domain.as_str(), c.ranges))
        .collect();
    assert_eq!(used, [("", 9)]);
    let left: Vec<(&str, u64)> = d
        .left_out
        .iter()
        .map(|c| (c.domain.as_str(), c.ranges))
        .collect();
    assert_eq!(left, [("CCCL", 6), ("TSL", 3)]);
    assert_eq!(
        d.include_left_out.as_deref(),
        Some("program,domain:CCCL,domain:TSL")
    );
    let text = report_text(&r);
    assert!(
        text.contains("  phases: the program's NVTX ranges: the default domain (9 ranges)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  not phases: CCCL (6 ranges, CUB and Thrust), TSL (3 ranges, XLA, JAX and \
             TensorFlow's TSL profiler); make them phases with \
             `--phases program,domain:CCCL,domain:TSL`\n"
        ),
        "{text}"
    );
    assert!(!text.contains("cub::"), "{text}");
    assert!(!text.contains("XlaPass"), "{text}");
}

#[test]
fn naming_a_library_domain_makes_its_ranges_phases_again() {
    let r = report_with(&with_libraries(), "program,domain:CCCL").expect("report");
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "step",
            "step/draft",
            "step/draft/cub::DeviceScan::InclusiveScan",
            "step/verify",
            "step/verify/cub::DeviceScan::InclusiveScan"
        ]
    );
    // The draft → verify gap now lies between two CUB calls, as the issue saw it.
    assert!(
        r.gap_groups.iter().any(|g| g.place
            == "step/draft/cub::DeviceScan::InclusiveScan → step/verify/cub::DeviceScan::InclusiveScan"),
        "{:?}",
        r.gap_groups
    );
    let left: Vec<&str> = r
        .phase_domains
        .left_out
        .iter()
        .map(|c| c.domain.as_str())
        .collect();
    assert_eq!(left, ["TSL"]);
    // Only CCCL: its ranges are outermost phases of their own.
    let r = report_with(&with_libraries(), "domain:CCCL").expect("report");
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["cub::DeviceScan::InclusiveScan"]);
    assert_eq!(r.phases[0].count, 6);
    // TSL's range encloses verify: with every domain, verify nests under it.
    let r = report_with(&with_libraries(), "all").expect("report");
    assert!(
        r.phases
            .iter()
            .any(|p| p.path == "step/XlaPassPipeline:#name=fusion#/verify"),
        "{:?}",
        r.phases.iter().map(|p| &p.path).collect::<Vec<_>>()
    );
}

#[test]
fn names_and_depth_narrow_the_phases() {
    let r = report_with(&Fixture::default(), "depth:0").expect("report");
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["step"]);
    let r = report_with(&Fixture::default(), "name:*r*").expect("report");
    let paths: Vec<&str> = r.phases.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["draft", "verify"]);
    // Nothing chosen: one phase, the whole run, and a note that says so.
    let r = report_with(&Fixture::default(), "name:nothing").expect("report");
    assert!(r.phases.is_empty());
    assert!(r.nvtx_captured);
    assert!(
        r.notes
            .iter()
            .any(|n| matches!(n, cufall_analysis::report::Note::NoPhasesChosen { .. }))
    );
}

#[test]
fn an_unknown_domain_is_one_error_listing_the_recorded_ones() {
    let e = report_with(&with_libraries(), "domain:NCCL").expect_err("NCCL is not recorded");
    assert_eq!(
        e.to_string(),
        "no NVTX range of domain NCCL in this trace; it records domain:default (9 ranges), \
         domain:CCCL (6 ranges, CUB and Thrust), domain:TSL (3 ranges, XLA, JAX and TensorFlow's \
         TSL profiler)"
    );
    // A diff accepts a domain recorded in either trace.
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Trace::open(with_libraries().write(dir.path(), "a.cufall")).expect("a");
    let b = Trace::open(Fixture::default().write(dir.path(), "b.cufall")).expect("b");
    let opts = ReportOptions {
        phases: "program,domain:CCCL".parse().expect("selection"),
        ..opts()
    };
    let d = build_diff(&a, &b, &opts).expect("diff");
    assert!(d.a.phases.len() > d.b.phases.len());
    let opts = ReportOptions {
        phases: "domain:NCCL".parse().expect("selection"),
        ..opts
    };
    assert!(build_diff(&a, &b, &opts).is_err());
}

#[test]
fn capture_problems_come_from_the_trace() {
    let fx = Fixture {
        capture_problems: true,
        ..Fixture::default()
    };
    let (_d, r) = report_of(&fx);
    let events: Vec<&str> = r.capture.iter().map(|l| l.event.as_str()).collect();
    assert_eq!(
        events,
        [
            "cupti_records_dropped",
            "no_activity_records",
            "quiet_processes",
            "future_event"
        ]
    );
    let text = report_text(&r);
    assert!(
        text.contains(
            "  capture problem: cupti_records_dropped: CUPTI dropped 17 activity record(s)"
        ),
        "{text}"
    );
    assert!(text.contains("torch.profiler"), "{text}");
    assert!(
        text.contains(
            "  capture event: future_event: 1 row(s), count 3: something a newer recorder says\n"
        ),
        "{text}"
    );
    // A clean capture shows nothing.
    let (_d, r) = report_of(&Fixture::default());
    assert!(r.capture.is_empty());
}

#[test]
fn diff_names_the_library_domains_left_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Trace::open(with_libraries().write(dir.path(), "a.cufall")).expect("a");
    let b = Trace::open(Fixture::default().write(dir.path(), "b.cufall")).expect("b");
    let d = build_diff(&a, &b, &opts()).expect("diff");
    // The library ranges change nothing: same phases, same gap places on both sides.
    assert_eq!(
        d.a.phases.iter().map(|p| &p.path).collect::<Vec<_>>(),
        d.b.phases.iter().map(|p| &p.path).collect::<Vec<_>>()
    );
    assert!(
        d.gaps.iter().all(|g| g.totals.delta_total_ns.get() == 0),
        "{:?}",
        d.gaps
    );
    let text = diff_text(&d);
    assert!(
        text.contains(
            "  not phases (A): CCCL (6 ranges), TSL (3 ranges); make them phases with \
             `--phases program,domain:CCCL,domain:TSL`\n"
        ),
        "{text}"
    );
    assert!(!text.contains("not phases (B)"), "{text}");
}
