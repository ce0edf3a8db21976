//! `view` and `replay` on a trace written to disk (synthetic data, real trace format).

use cufall_sampler::args::look::{DisplayArgs, HeatmapArgs, LookArgs};
use cufall_sampler::commands::view::{ReplayArgs, ViewArgs, replay_text, view_text};
use std::path::PathBuf;

const T0: i64 = 1_764_460_800_000_000_000;

fn display(metric: &str) -> DisplayArgs {
    DisplayArgs {
        heatmaps: HeatmapArgs {
            metrics: vec![metric.into()],
            ..HeatmapArgs::default()
        },
        look: LookArgs {
            width: 110,
            print: true,
            ..LookArgs::default()
        },
        phases: Default::default(),
    }
}

fn demo_trace(dir: &tempfile::TempDir) -> PathBuf {
    let p = dir.path().join("demo.cufall");
    cufall_testkit::synth::write_demo_trace(&p, 3, T0, 500_000_000, 10_000).expect("write trace");
    p
}

#[test]
fn view_print_of_a_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = demo_trace(&dir);
    let mut d = display(cufall_testkit::synth::TENSOR_AVG);
    d.look.from = Some(100_000_000);
    d.look.to = Some(300_000_000);
    let text = view_text(&ViewArgs { trace, display: d }).expect("view");
    let text = text.replace(&dir.path().display().to_string(), "TMP");
    insta::assert_snapshot!(text);
}

#[test]
fn replay_print_goes_through_the_feed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = demo_trace(&dir);
    let args = ReplayArgs {
        trace,
        speed: 1.0,
        display: display(cufall_testkit::synth::DRAM),
    };
    let text = replay_text(&args).expect("replay");
    assert!(text.contains("■ END"), "{text}");
    for g in 0..3 {
        assert!(text.contains(&format!("GPU{g}")), "{text}");
    }
    assert!(text.contains("drops in view: GPU") || text.contains("drops in view: none"));
}

#[test]
fn bad_input_names_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = ViewArgs {
        trace: dir.path().join("nope.cufall"),
        display: display(cufall_testkit::synth::TENSOR_AVG),
    };
    let e = view_text(&missing).expect_err("missing trace");
    assert!(e.to_string().contains("nope.cufall"), "{e}");
    let trace = demo_trace(&dir);
    let e = view_text(&ViewArgs {
        trace,
        display: display("sm__not_a_metric.avg"),
    })
    .expect_err("unknown metric");
    assert!(e.to_string().contains("sm__not_a_metric.avg"), "{e}");
}

/// The live view's phase lane keeps the program's ranges, not a library's, as they arrive.
#[test]
fn the_live_phase_lane_leaves_library_domains_out() {
    let options = cufall_sampler::args::look::live_options(&LookArgs::default());
    let keep = options.setup.phases.expect("a phase filter").0;
    let range = |domain: &str| cufall_trace::model::NvtxRange {
        name: "r".into(),
        domain: domain.into(),
        ..Default::default()
    };
    assert!(keep(&range("")));
    assert!(keep(&range("specdec")));
    assert!(!keep(&range("CCCL")));
    assert!(!keep(&range("TSL")));
}

#[test]
fn the_views_gaps_say_where_the_host_was() {
    // The H200 recording of torch_phases.py with host stacks: every draft → verify gap's line
    // names the 2 ms sleep (line 64).
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/h200-torch-phases-host.cufall");
    let marks = cufall_sampler::commands::view::gap_marks(
        &path,
        &cufall_analysis::select::PhaseSelect::default(),
    );
    let between: Vec<_> = marks
        .iter()
        .filter(|m| m.text.contains("draft → verify"))
        .collect();
    // 40 pieces: 39 stretches inside draft → verify, one more part of a stretch that runs on into
    // verify (each piece is a mark of its own, with its own place).
    assert_eq!(between.len(), 40, "{marks:#?}");
    let named = between
        .iter()
        .filter(|m| {
            m.text
                .contains("host: thread 571 in main (torch_phases.py)")
        })
        .count();
    assert!(named >= 30, "{between:#?}");
    // A recording without host stacks still has its gaps, and says so.
    let plain = cufall_sampler::commands::view::gap_marks(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/h200-torch-phases.cufall"),
        &cufall_analysis::select::PhaseSelect::default(),
    );
    assert!(!plain.is_empty());
    assert!(
        plain
            .iter()
            .all(|m| m.text.ends_with("host: no host samples"))
    );
}
