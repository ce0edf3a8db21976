//! The host's frames during the gaps, on the fixture with host stacks (see
//! `cufall_testkit::fixture` for the timeline and the threads' stacks).

mod common;
use common::{opts, report_of};

use cufall_analysis::diff::{build_diff, diff_text};
use cufall_analysis::host::{self, HostClass, HostScope, IntervalSource, LaunchingFrom};
use cufall_analysis::render::report_text;
use cufall_analysis::report::Report;
use cufall_analysis::{ReportOptions, build_report};
use cufall_testkit::fixture::{Fixture, US};
use cufall_trace::Trace;

fn with_host() -> Fixture {
    Fixture {
        host_stacks: true,
        ..Default::default()
    }
}

fn class<'a>(r: &'a Report, scope: HostScope, name: &str) -> &'a HostClass {
    let h = r.host.as_ref().expect("host side");
    h.gap_classes
        .iter()
        .chain(h.phases.iter())
        .find(|c| c.scope == scope && c.name == name)
        .unwrap_or_else(|| panic!("no {scope:?} {name}"))
}

/// The text between two section heads of a report.
fn section<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("no {from} in\n{text}"));
    let end = text[start..].find(to).map_or(text.len(), |e| start + e);
    &text[start..end]
}

fn self_share(v: &cufall_analysis::host::HostView, function: &str) -> f64 {
    v.self_frames
        .iter()
        .find(|f| f.function == function)
        .map_or(0.0, |f| f.share)
}

#[test]
fn the_host_is_in_build_tree_during_every_draft_verify_gap() {
    let (_dir, r) = report_of(&with_host());
    let h = r.host.as_ref().expect("host side");
    assert_eq!((h.samples, h.threads, h.processes), (600, 2, 1));
    assert_eq!(h.interval_ns.get(), 10 * US);
    assert_eq!(h.launching_from, LaunchingFrom::NvtxRanges);
    let dv = class(&r, HostScope::Place, "draft → verify");
    // Five gaps of 100 µs over both GPUs (the third step's is dropped on GPU 0).
    assert_eq!((dv.gaps, dv.time_ns.get()), (5, 500 * US));
    let l = dv.launching.as_ref().expect("launching thread");
    assert_eq!(
        l.thread.as_ref().map(|t| (t.pid, t.tid)),
        Some((1234, 1234))
    );
    // Counted once where the GPUs' gaps overlap: three 100 µs windows of 10 µs samples.
    assert_eq!(l.samples, 30);
    assert!((l.expected_samples - 30.0).abs() < 1e-9);
    assert_eq!(l.self_frames.len(), 1);
    let f = &l.self_frames[0];
    assert_eq!(
        (f.function.as_str(), f.file.as_str(), f.line, f.share),
        ("build_tree", "/srv/app/tree.py", Some(88), 1.0)
    );
    assert_eq!(l.gil_held, Some(1.0));
    assert_eq!(l.idle, 0.0);
    let incl: Vec<(&str, f64)> = l
        .inclusive_frames
        .iter()
        .map(|f| (f.function.as_str(), f.share))
        .collect();
    assert_eq!(incl, [("build_tree", 1.0), ("step", 1.0)]);
    // All threads: the idle worker takes the other half.
    assert_eq!(dv.all.threads, 2);
    assert_eq!(self_share(&dv.all, "build_tree"), 0.5);
    assert_eq!(self_share(&dv.all, "wait\u{1b}[2J"), 0.5);
    // Between verify and the next draft the main thread waits in the native sync.
    let vd = class(&r, HostScope::Place, "verify → draft");
    let l = vd.launching.as_ref().expect("launching thread");
    assert_eq!(self_share(l, "cudaStreamSynchronize"), 1.0);
    assert_eq!(l.idle, 1.0);
    // The idle stretch inside verify had its kernel resident: not a host-bound class.
    assert!(
        h.gap_classes
            .iter()
            .all(|c| !(c.scope == HostScope::Place && c.name == "step/verify"))
    );
}

#[test]
fn each_phase_has_its_top_frames_over_its_whole_time() {
    let (_dir, r) = report_of(&with_host());
    let draft = class(&r, HostScope::Phase, "step/draft");
    assert_eq!(draft.time_ns.get(), 1200 * US);
    let l = draft.launching.as_ref().expect("launching thread");
    assert_eq!(self_share(l, "launch"), 1.0);
    let step = class(&r, HostScope::Phase, "step");
    let l = step.launching.as_ref().expect("launching thread");
    // 3 ms: 2.2 ms busy in `launch`, 300 µs of draft → verify gaps, 500 µs of other idle time.
    assert!((self_share(l, "launch") - 2.2 / 3.0).abs() < 1e-9);
    assert!((self_share(l, "build_tree") - 0.3 / 3.0).abs() < 1e-9);
    assert!((self_share(l, "cudaStreamSynchronize") - 0.5 / 3.0).abs() < 1e-9);
}

#[test]
fn report_text_and_json_name_the_host_frames() {
    let (_dir, r) = report_of(&with_host());
    let text = report_text(&r);
    assert!(!text.contains('\u{1b}'), "an escape reached the terminal");
    insta::assert_snapshot!("host_text", section(&text, "\nHOST during", "\nDROPS"));
    let json = serde_json::to_string_pretty(&r.host).expect("json");
    insta::assert_snapshot!(
        "host_json_head",
        json.lines().take(80).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_trace_without_host_samples_says_nothing_of_the_host() {
    let (_dir, r) = report_of(&Fixture::default());
    assert!(r.host.is_none() && r.host_stacks_off.is_none());
    assert!(!report_text(&r).contains("HOST"));
    let json = serde_json::to_value(&r).expect("json");
    assert!(json.get("host").is_none() && json.get("host_stacks_off").is_none());
}

#[test]
fn the_recorder_s_reason_for_no_stacks_is_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Fixture::default().write(dir.path(), "off.cufall");
    cufall_testkit::examples::edit_manifest(&path, |m| {
        m["extra"]["host_stacks"] =
            "off: no permission to read the program's memory (kernel.yama.ptrace_scope is 1)"
                .into();
    });
    let trace = Trace::open(&path).expect("open");
    let r = build_report(&trace, &opts()).expect("report");
    assert_eq!(
        r.host_stacks_off.as_deref(),
        Some("no permission to read the program's memory (kernel.yama.ptrace_scope is 1)")
    );
    let text = report_text(&r);
    assert!(
        text.contains(
            "HOST: no host stacks in this recording (no permission to read the program's memory \
             (kernel.yama.ptrace_scope is 1)): where the host was during the gaps is not known"
        ),
        "{text}"
    );
}

/// Trace format 1.4's typed `host_stacks` field, in a trace with no words in
/// `extra.host_stacks`: the interval and the reason come from it.
#[test]
fn the_manifest_s_host_stacks_field_is_read_without_the_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = with_host().write(dir.path(), "typed.cufall");
    cufall_testkit::examples::edit_manifest(&path, |m| {
        m["extra"]
            .as_object_mut()
            .expect("extra")
            .remove("host_stacks");
        // Twice the samples' spacing: only the field can say it.
        m["host_stacks"] = serde_json::json!({"interval_ns": 20_000, "frames": "python"});
    });
    let trace = Trace::open(&path).expect("open");
    assert!(!trace.manifest().extra.contains_key("host_stacks"));
    assert_eq!(host::asked_interval_ns(trace.manifest()), Some(20 * US));
    let r = build_report(&trace, &opts()).expect("report");
    let h = r.host.as_ref().expect("host side");
    assert_eq!(
        (h.interval_ns.get(), h.interval_source),
        (20 * US, IntervalSource::Asked)
    );
    assert_eq!(r.host_stacks_off, None);
    assert_eq!(
        host::setting_words(trace.manifest()).as_deref(),
        Some("on: every 20.0 µs (50000 Hz), python frames")
    );

    let path = Fixture::default().write(dir.path(), "off.cufall");
    cufall_testkit::examples::edit_manifest(&path, |m| {
        m["host_stacks"] = serde_json::json!({
            "interval_ns": 1_000_000,
            "frames": "mixed",
            "off_reason": "--host-stacks off",
        });
    });
    let trace = Trace::open(&path).expect("open");
    let r = build_report(&trace, &opts()).expect("report");
    assert_eq!(r.host_stacks_off.as_deref(), Some("--host-stacks off"));
    assert_eq!(
        host::setting_words(trace.manifest()).as_deref(),
        Some("off: --host-stacks off")
    );
}

/// A recording made before the field (trace format 1.2, the bundled one) still gives its
/// interval from the words `on: every 1ms (1000 Hz), ...`.
#[test]
fn an_older_recording_reads_its_interval_from_the_words() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/host-stacks/cpu-host-phases.cufall");
    let trace = Trace::open(&path).expect("open");
    let m = trace.manifest();
    assert_eq!(m.host_stacks, None);
    assert!(m.extra["host_stacks"].contains("(1000 Hz)"));
    assert_eq!(host::asked_interval_ns(m), Some(1_000_000));
    assert_eq!(host::stacks_off(m), None);
    let r = build_report(&trace, &ReportOptions::default()).expect("report");
    let h = r.host.as_ref().expect("host side");
    assert_eq!(
        (h.interval_ns.get(), h.interval_source),
        (1_000_000, IntervalSource::Asked)
    );
}

#[test]
fn diff_names_the_host_frames_that_grew_and_shrank() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = with_host().write(dir.path(), "a.cufall");
    // B's verify ends 50 µs earlier: more time waiting in the sync, less launching.
    let b = Fixture {
        extra_verify_gap_us: 50,
        ..with_host()
    }
    .write(dir.path(), "b.cufall");
    let (ta, tb) = (Trace::open(&a).expect("a"), Trace::open(&b).expect("b"));
    let d = build_diff(&ta, &tb, &opts()).expect("diff");
    let step: Vec<(&str, f64)> = d
        .host_frames
        .iter()
        .filter(|f| f.scope == HostScope::Phase && f.class == "step")
        .map(|f| (f.function.as_str(), (f.delta * 1000.0).round() / 1000.0))
        .collect();
    // 150 µs of 3 ms moved from `launch` to the sync.
    assert_eq!(step, [("cudaStreamSynchronize", 0.05), ("launch", -0.05)]);
    assert!(d.host_frames.iter().all(|f| f.launching));
    let text = diff_text(&d);
    assert!(text.contains("HOST FRAMES"), "{text}");
    insta::assert_snapshot!("host_diff", section(&text, "\nHOST FRAMES", "\u{0}"));
    // Against a trace without host samples there is nothing to compare.
    let plain = Fixture::default().write(dir.path(), "plain.cufall");
    let tp = Trace::open(&plain).expect("plain");
    let d = build_diff(&ta, &tp, &opts()).expect("diff");
    assert!(d.host_frames.is_empty());
    assert!(!diff_text(&d).contains("HOST"));
    assert!(
        serde_json::to_value(&d)
            .expect("json")
            .get("host_frames")
            .is_none()
    );
}

/// Shares roll up by function: `step (serve.py)` is at line 12 while the main thread launches or
/// builds the tree and at line 14 while it waits in the sync, one function over both lines,
/// counted once per sample; its lines are beneath it, in the JSON and with `lines` in text.
#[test]
fn shares_roll_up_by_function_with_the_lines_beneath() {
    let (_dir, r) = report_of(&with_host());
    let step = class(&r, HostScope::Phase, "step");
    let l = step.launching.as_ref().expect("launching thread");
    let f = l
        .inclusive_functions
        .iter()
        .find(|f| f.function == "step")
        .expect("step");
    assert_eq!((f.file.as_str(), f.share), ("/srv/app/serve.py", 1.0));
    let lines: Vec<(Option<u32>, u64)> = f.lines.iter().map(|x| (x.line, x.samples)).collect();
    assert_eq!(lines.iter().map(|(_, n)| n).sum::<u64>(), f.samples);
    assert_eq!(
        lines.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        [Some(12), Some(14)]
    );
    // Self: each function's samples are its lines'; the lines' shares add up to its share.
    for func in &l.self_functions {
        let sum: u64 = func.lines.iter().map(|x| x.samples).sum();
        assert_eq!(sum, func.samples, "{}", func.function);
        assert!(func.share <= 1.0 && func.share >= 0.0);
    }
    let text = cufall_analysis::render::report_text_with(&r, "cufall", true);
    let phase = section(&text, "\nHOST per phase", "\nDROPS");
    assert!(phase.contains("launch (serve.py) 73% [:20 73%]"), "{phase}");
    assert!(!report_text(&r).contains("[:20"));
}

/// The verdict line of each host-bound place: the fixture's main thread builds the tree between
/// draft and verify, and waits in the sync between verify and the next draft.
#[test]
fn each_host_bound_place_gets_its_verdict_line() {
    use cufall_analysis::causes::HostCause;
    let (_dir, r) = report_of(&with_host());
    let share = |name: &str, cause: HostCause| {
        let c = class(&r, HostScope::Place, name);
        assert!(c.host_bound, "{name}");
        let v = c.launching.as_ref().expect("launching");
        v.causes
            .causes
            .iter()
            .find(|x| x.cause == cause)
            .map_or(0.0, |x| x.share)
    };
    assert_eq!(share("draft → verify", HostCause::Computing), 1.0);
    assert_eq!(share("verify → draft", HostCause::WaitingForGpu), 1.0);
    let text = report_text(&r);
    let verdict = section(&text, "\nVERDICT", "\n\n");
    assert!(
        verdict.contains(
            "    draft → verify: 500.0 µs of gaps: host computing 100% (build_tree 100%), \
             unsampled 0%\n"
        ),
        "{verdict}"
    );
    assert!(
        verdict
            .contains("verify → draft: 350.0 µs of gaps: waiting for the GPU 100% (synchronize)"),
        "{verdict}"
    );
}
