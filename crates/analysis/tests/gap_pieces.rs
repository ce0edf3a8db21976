//! Idle stretches cut where phases begin and end, on the bundled H200 recordings: every piece
//! placed by its own interval, so that the places add up to the gap total and no phase has more
//! gap time than time.

use cufall_analysis::render::report_text;
use cufall_analysis::report::Report;
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::examples::examples_dir;
use cufall_testkit::fixture::{Fixture, US};
use cufall_trace::Trace;
use cufall_trace::model::Nanos;

fn report_of_example(name: &str) -> Report {
    let trace = Trace::open(examples_dir().join(name)).expect("open");
    build_report(&trace, &ReportOptions::default()).expect("report")
}

/// What must hold of any report: the places' totals, the phases' gap time on the whole run, and
/// the stretches' pieces all add up to one gap total; no phase has more gap time on a GPU than
/// its time; every stretch's pieces lie end to end over it.
fn check_adds_up(r: &Report) {
    let places: Nanos = r.gap_groups.iter().map(|g| g.totals.total_ns).sum();
    let run: Nanos = r.whole_run.devices.iter().map(|d| d.gaps.total_ns).sum();
    let stretches: Nanos = r.gaps.iter().map(|g| g.duration_ns).sum();
    let pieces: Nanos = r
        .gaps
        .iter()
        .flat_map(|g| &g.pieces)
        .map(|p| p.duration_ns)
        .sum();
    assert_eq!((places, run, pieces), (stretches, stretches, stretches));
    let counted: u64 = r.gap_groups.iter().map(|g| g.totals.count).sum();
    assert_eq!(
        counted,
        r.gaps.iter().map(|g| g.pieces.len() as u64).sum::<u64>()
    );
    assert_eq!(r.gap_count, r.gaps.len() as u64);
    for p in &r.phases {
        for d in &p.devices {
            assert!(
                d.gaps.total_ns <= p.total_ns,
                "{}: {} ns of gaps in {} ns",
                p.path,
                d.gaps.total_ns.get(),
                p.total_ns.get()
            );
            assert!(
                d.gaps.total_ns >= Nanos::ZERO
                    && d.gaps.no_kernel_ns.is_none_or(|n| n >= Nanos::ZERO)
            );
        }
    }
    for g in &r.gaps {
        let first = g.pieces.first().expect("a piece");
        assert_eq!(first.start_ns, g.start_ns);
        assert_eq!(g.pieces.last().map(|p| p.end_ns), Some(g.end_ns));
        for w in g.pieces.windows(2) {
            assert_eq!(w[0].end_ns, w[1].start_ns);
            assert_ne!(
                w[0].place, w[1].place,
                "consecutive pieces of one place are one"
            );
        }
        let names: Vec<&str> = g.pieces.iter().map(|p| &*p.place).collect();
        assert_eq!(&*g.place, names.join(" + "));
        for p in &g.pieces {
            assert!(r.gap_groups.iter().any(|x| x.place == *p.place));
        }
    }
}

#[test]
fn places_add_up_on_the_recordings() {
    for name in [
        "h200-torch-phases-host.cufall",
        "h200-specdec-ctx256-graphs-off.cufall",
        "h200-jax-train.cufall",
        "h200-specdec-graphs-on-native-host.cufall",
    ] {
        let r = report_of_example(name);
        check_adds_up(&r);
    }
}

/// The torch recording's first idle stretch (5.3 s, before the program's first kernel) runs
/// through `setup` and `load`: each now holds its own part of it, where the midpoint used to
/// give all of it to `(start) → setup` and none to either phase.
#[test]
fn a_stretch_through_phases_gives_each_its_part() {
    let r = report_of_example("h200-torch-phases-host.cufall");
    let first = &r.gaps[0];
    let places: Vec<&str> = first.pieces.iter().map(|p| &*p.place).collect();
    assert_eq!(places, ["(start) → setup", "setup", "setup → load", "load"]);
    assert_eq!(
        &*first.place,
        "(start) → setup + setup + setup → load + load"
    );
    let phase = |path: &str| r.phases.iter().find(|p| p.path == path).expect(path);
    let setup = phase("setup");
    // setup is idle from its start to its end: all of its time is gap time, and no more.
    assert_eq!(setup.devices[0].gaps.total_ns, setup.total_ns);
    let group = |place: &str| {
        r.gap_groups
            .iter()
            .find(|g| g.place == place)
            .unwrap_or_else(|| panic!("no {place}"))
    };
    assert_eq!(group("setup").totals.total_ns, setup.total_ns);
    // The host's shares of a place are over its own pieces.
    let h = r.host.as_ref().expect("host stacks");
    let class = |name: &str| {
        h.gap_classes
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(class("setup").time_ns.get(), setup.total_ns.get());
    assert_eq!(
        class("(start) → setup").time_ns.get(),
        group("(start) → setup").totals.total_ns.get()
    );
    let text = report_text(&r);
    assert!(
        text.contains("idle stretch(es) cut where phases begin and end"),
        "{text}"
    );
}

/// On the fixture with every NVTX domain a phase, the TSL range that encloses verify ends at
/// 920 µs, inside the 100 µs verify → draft gap: the gap is cut there, 20 µs in one place and
/// 80 µs in the next.
#[test]
fn a_gap_is_cut_where_an_enclosing_range_ends() {
    let fx = Fixture {
        library_nvtx: true,
        ..Fixture::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = fx.write(dir.path(), "fixture.cufall");
    let trace = Trace::open(&path).expect("open");
    let opts = ReportOptions {
        min_gap_ns: Some(Nanos(50 * US)),
        phases: "all".parse().expect("phases"),
        ..Default::default()
    };
    let r = build_report(&trace, &opts).expect("report");
    check_adds_up(&r);
    let cut: Vec<Vec<i64>> = r
        .gaps
        .iter()
        .filter(|g| g.pieces.len() > 1)
        .map(|g| g.pieces.iter().map(|p| p.duration_ns.get() / US).collect())
        .collect();
    assert!(cut.contains(&vec![20, 80]), "{cut:?}");
}

/// The fixture with host stacks rewritten with bad input added: a second process whose `step`
/// ranges overlap the first's by 200 µs each, and host samples a minute before and after the
/// recording (a thread sampled only there, and the main thread), ten minutes out.
fn rewritten_with_bad_input(dir: &std::path::Path) -> std::path::PathBuf {
    use cufall_trace::model::{HostSample, HostState, NvtxRange};
    use cufall_trace::{TraceWriter, WriterOptions};
    let fx = Fixture {
        host_stacks: true,
        ..Fixture::default()
    };
    let good = fx.write(dir, "good.cufall");
    let t = Trace::open(&good).expect("open");
    let path = dir.join("bad.cufall");
    let mut w =
        TraceWriter::create(&path, t.manifest().clone(), WriterOptions::default()).expect("create");
    for b in t.sample_batches().expect("samples") {
        w.append_samples(&b).expect("samples");
    }
    w.append_drops(&t.drops().expect("drops")).expect("drops");
    w.append_kernels(&t.kernels().expect("kernels"))
        .expect("kernels");
    w.append_stacks(&t.stacks().expect("stacks"))
        .expect("stacks");
    let mut nvtx = t.nvtx().expect("nvtx");
    let other: Vec<NvtxRange> = nvtx
        .iter()
        .filter(|r| r.name == "step")
        .map(|r| NvtxRange {
            pid: 999,
            tid: 999,
            start_ns: r.start_ns + 800 * US,
            end_ns: r.end_ns + 200 * US,
            name: "other".into(),
            ..r.clone()
        })
        .collect();
    nvtx.extend(other);
    w.append_nvtx(&nvtx).expect("nvtx");
    let mut host = t.host_samples().expect("host samples");
    let first = host.iter().map(|s| s.t_ns).min().expect("a sample");
    let last = host.iter().map(|s| s.t_ns).max().expect("a sample");
    // Well past the minute of margin the recording's own times get.
    let minute = 10 * 60_000_000_000;
    let stray = |t_ns: i64, tid: u32| HostSample {
        t_ns,
        tid,
        state: HostState::Running,
        ..host[0].clone()
    };
    host.extend([
        stray(first - minute, 4321),
        stray(first - minute + 10 * US, 4321),
        stray(last + minute, 1234),
    ]);
    w.append_host_samples(&host).expect("host");
    w.finish(t.manifest().end_unix_ns.unwrap_or(last))
        .expect("finish");
    path
}

/// Bad input gets a note naming what was left out, and never a share above 100 % or a negative
/// time: overlapping phases of two processes, host samples outside the recording, a thread
/// with no sample inside it.
#[test]
fn bad_input_is_named_and_shares_stay_in_bounds() {
    use cufall_analysis::report::Note;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = rewritten_with_bad_input(dir.path());
    let trace = Trace::open(&path).expect("open");
    let opts = ReportOptions {
        min_gap_ns: Some(Nanos(50 * US)),
        ..Default::default()
    };
    let r = build_report(&trace, &opts).expect("report");
    check_adds_up(&r);
    assert!(
        r.notes.iter().any(|n| matches!(
            n,
            // Each `other` range overlaps the end of one step and, but the last, the start of
            // the next: 200 µs five times.
            Note::OverlappingProcesses { processes, overlap_ns }
                if processes == &[999, 1234] && *overlap_ns == Nanos(5 * 200 * US)
        )),
        "{:?}",
        r.notes
    );
    // Host samples outside the recording are left out by the trace reader, with one warning.
    assert!(
        r.warnings.iter().any(|w| w
            .contains("3 row(s) lie more than a minute outside the recording")
            && w.contains("host")),
        "{:?}",
        r.warnings
    );
    let h = r.host.as_ref().expect("host");
    assert_eq!(h.threads, 2, "the stray thread counts nowhere");
    for c in h.gap_classes.iter().chain(&h.phases) {
        for v in c.launching.iter().chain([&c.all]) {
            assert!((0.0..=1.0).contains(&v.sampled), "{} {}", c.name, v.sampled);
            assert!(v.expected_samples >= 0.0);
            for f in v.self_frames.iter().chain(&v.inclusive_frames) {
                assert!((0.0..=1.0).contains(&f.share), "{} {}", c.name, f.function);
            }
            for f in v.self_functions.iter().chain(&v.inclusive_functions) {
                assert!((0.0..=1.0).contains(&f.share), "{} {}", c.name, f.function);
            }
            let sum: f64 =
                v.causes.causes.iter().map(|x| x.share).sum::<f64>() + v.causes.unsampled;
            assert!(
                (sum - 1.0).abs() < 1e-9 || v.samples == 0,
                "{} {sum}",
                c.name
            );
            assert!(v.causes.causes.iter().all(|x| x.share >= 0.0));
        }
        assert!(c.time_ns >= Nanos::ZERO);
    }
    let text = report_text(&r);
    assert!(
        text.contains("the phases of 2 processes (pid 999, 1234) overlap in time"),
        "{text}"
    );
    assert!(
        text.contains("3 row(s) lie more than a minute outside the recording"),
        "{text}"
    );
}
