//! Snapshots of typical frames (rendered into a ratatui buffer, compared as text) and the
//! behaviour of the view around them. All data is synthetic (`cufall_testkit::synth`).

use cufall_live::{LiveEvent, feed};
use cufall_testkit::synth;
use cufall_viewer::app::{self, ViewSetup};
use cufall_viewer::color::Palette;
use cufall_viewer::input::Input;
use cufall_viewer::print::{render, to_ansi, to_text};
use cufall_viewer::replay::Recording;
use cufall_viewer::state::{HeatmapState, Mode, ViewOptions};
use cufall_viewer::store::HeatmapOverrides;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;

/// 2025-11-30T00:00:00Z: a round start keeps bins aligned and snapshots stable.
const T0: i64 = 1_764_460_800_000_000_000;
const IV: i64 = 10_000;

fn setup(palette: Palette, metrics: &[&str]) -> ViewSetup {
    ViewSetup {
        view: ViewOptions {
            palette,
            ..ViewOptions::default()
        },
        overrides: HeatmapOverrides {
            metrics: metrics.iter().map(|s| s.to_string()).collect(),
            ..HeatmapOverrides::default()
        },
        source: "test.cufall".into(),
        phases: None,
    }
}

fn recording(d: synth::Demo) -> Recording {
    Recording {
        info: d.info,
        batches: d.batches,
        drops: d.drops,
        nvml: d.nvml,
        nvtx: d.nvtx,
        kernels: Vec::new(),
        warnings: Vec::new(),
    }
}

fn browse(rec: Recording, s: &ViewSetup, w: u16, h: u16) -> HeatmapState {
    let mut st = app::browse_state(rec, s).expect("state");
    st.update(Input::Resize(w, h));
    st.fit_all();
    st
}

/// Draws through a real `Terminal<TestBackend>`, as the interactive view does.
fn frame(st: &HeatmapState) -> String {
    let mut t = Terminal::new(TestBackend::new(st.width, st.height)).expect("terminal");
    t.draw(|f| cufall_viewer::draw::draw(f, st)).expect("draw");
    to_text(t.backend().buffer())
}

fn constant(gpus: u32, level: f64, dur_ns: i64) -> Recording {
    let info = synth::info(gpus, IV);
    let batches = (0..gpus)
        .map(|g| synth::batch(g, T0, (dur_ns / IV) as usize, IV, |_| level))
        .collect();
    Recording {
        info,
        batches,
        drops: Vec::new(),
        nvml: Vec::new(),
        nvtx: Vec::new(),
        kernels: Vec::new(),
        warnings: Vec::new(),
    }
}

const TENSOR: &[&str] = &[synth::TENSOR_AVG];

#[test]
fn idle_gpu() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(1, 0.0, 200_000_000), &s, 100, 12);
    st.options.spread = false;
    insta::assert_snapshot!(frame(&st));
}

#[test]
fn saturated_gpus_are_full_blocks_and_red() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(2, 1.0, 200_000_000), &s, 100, 12);
    st.options.spread = false;
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("100.0%"));
    // In colour the same cells are red (top and bottom halves).
    st.options.palette = Palette::Truecolor;
    let buf = render(&st, 100, 12);
    let cell = &buf[(12, 2)];
    assert_eq!(cell.symbol(), "▀");
    let Color::Rgb(r, g, b) = cell.fg else {
        panic!("{:?}", cell.fg)
    };
    assert!(
        r > 150 && g < 80 && b < 40,
        "full scale should be red: {r} {g} {b}"
    );
}

#[test]
fn gaps_without_samples_show_as_dots() {
    let s = setup(Palette::Mono, TENSOR);
    let mut rec = constant(1, 0.5, 100_000_000);
    // A second run of samples 50 ms after the first: nothing recorded in between.
    rec.batches
        .push(synth::batch(0, T0 + 150_000_000, 5_000, IV, |_| 0.5));
    let mut st = browse(rec, &s, 100, 12);
    st.options.spread = false;
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("·····"));
}

#[test]
fn drops_are_marked_in_the_band_the_axis_and_the_status_line() {
    let s = setup(Palette::Mono, TENSOR);
    let mut rec = constant(1, 0.5, 100_000_000);
    rec.batches
        .push(synth::batch(0, T0 + 150_000_000, 5_000, IV, |_| 0.5));
    rec.drops.push(synth::drop_record(
        0,
        T0 + 100_000_000,
        T0 + 150_000_000,
        5_000,
    ));
    let mut st = browse(rec, &s, 100, 12);
    st.options.spread = false;
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("xxxx"));
    assert!(text.contains("^^^^"));
    assert!(text.contains("drops in view: GPU0 1× 50ms, 5000 samples"));
}

#[test]
fn eight_gpus_with_phases_nvml_and_a_drop() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(
        recording(synth::demo(8, T0, 1_000_000_000, IV)),
        &s,
        130,
        30,
    );
    st.options.spread = false;
    let text = frame(&st);
    insta::assert_snapshot!(text);
    for g in 0..8 {
        assert!(text.contains(&format!("GPU{g}")));
    }
    assert!(
        text.contains("smi 100%"),
        "NVML util beside the counter value"
    );
    assert!(text.contains("|step"), "phase lane");
}

#[test]
fn sm_spread_rows() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(recording(synth::demo(2, T0, 300_000_000, IV)), &s, 110, 14);
    st.set_window(T0, T0 + 200_000_000);
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("GPU0 max") && text.contains("     avg") && text.contains("     min"));
    st.update(Input::ToggleSpread);
    assert!(!frame(&st).contains("GPU0 max"));
}

#[test]
fn colour_frame_in_16_colours() {
    let s = setup(Palette::Ansi16, TENSOR);
    let mut st = browse(recording(synth::demo(2, T0, 300_000_000, IV)), &s, 90, 10);
    st.options.spread = false;
    st.set_window(T0, T0 + 100_000_000);
    let buf = render(&st, 90, 10);
    insta::assert_snapshot!(to_ansi(&buf));
}

#[test]
fn stacked_metrics_and_cycling() {
    let s = setup(Palette::Mono, &[]);
    let mut st = browse(recording(synth::demo(2, T0, 300_000_000, IV)), &s, 110, 24);
    st.options.spread = false;
    let text = frame(&st);
    assert!(
        text.contains(synth::TENSOR_AVG) && text.contains(synth::DRAM),
        "{text}"
    );
    st.update(Input::NextMetric);
    let one = frame(&st);
    assert!(one.contains(synth::TENSOR_AVG) && !one.contains(synth::DRAM));
    st.update(Input::NextMetric);
    let two = frame(&st);
    assert!(!two.contains(synth::TENSOR_AVG) && two.contains(synth::DRAM));
}

#[test]
fn help_overlay() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(1, 0.3, 100_000_000), &s, 80, 20);
    st.update(Input::ToggleHelp);
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("keys") && text.contains("pause"));
}

/// Esc closes the help overlay; only a second Esc quits.
#[test]
fn esc_closes_the_help_before_it_quits() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(1, 0.3, 100_000_000), &s, 80, 20);
    st.update(Input::ToggleHelp);
    st.update(Input::Back);
    assert!(!st.show_help && !st.quit);
    st.update(Input::Back);
    assert!(st.quit);
}

#[test]
fn max_aggregation_keeps_short_bursts_visible() {
    let s = setup(Palette::Mono, TENSOR);
    // 1 s idle with one 100 µs burst at full tensor use every 100 ms.
    let info = synth::info(1, IV);
    let b = synth::batch(0, T0, 100_000, IV, |t| {
        if (t - T0) % 100_000_000 < 100_000 {
            1.0
        } else {
            0.0
        }
    });
    let rec = Recording {
        info,
        batches: vec![b],
        drops: vec![],
        nvml: vec![],
        nvtx: vec![],
        kernels: vec![],
        warnings: vec![],
    };
    let mut st = browse(rec, &s, 100, 10);
    st.options.spread = false;
    let band = |st: &HeatmapState| -> String {
        frame(st)
            .lines()
            .filter(|l| l.starts_with("GPU0"))
            .collect()
    };
    assert!(!band(&st).contains('█'), "{}", band(&st));
    st.update(Input::ToggleAgg);
    assert_eq!(band(&st).matches('█').count(), 10, "{}", band(&st));
}

#[test]
fn zoom_pan_and_jumps() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(
        recording(synth::demo(4, T0, 1_000_000_000, IV)),
        &s,
        120,
        20,
    );
    let (a, b) = st.window();
    assert!(a <= T0 && b >= T0 + 1_000_000_000, "fits the recording");
    st.update(Input::ZoomIn);
    st.update(Input::ZoomIn);
    let (a2, b2) = st.window();
    assert!(b2 - a2 < b - a);
    st.update(Input::PanRight);
    assert!(st.window().0 > a2);
    st.update(Input::Home);
    assert!(st.window().0 <= T0);
    // The drop of the demo is at the middle: jumping to it centres it.
    st.update(Input::NextDrop);
    let (a3, b3) = st.window();
    let drop_at = T0 + 500_000_000;
    assert!(a3 < drop_at && drop_at < b3, "{a3} {drop_at} {b3}");
    st.update(Input::Home);
    st.update(Input::NextPhase);
    let (a4, b4) = st.window();
    assert!(a4 > T0 && b4 > a4);
    st.update(Input::Quit);
    assert!(st.quit);
}

#[test]
fn live_feed_from_another_thread_and_pause() {
    let info = synth::info(2, IV);
    let (tx, rx) = feed(info, 1024);
    let producer = std::thread::spawn(move || {
        for chunk in 0..20 {
            for g in 0..2 {
                let t = T0 + chunk * 10_000_000;
                tx.send(LiveEvent::Samples(synth::batch(g, t, 1000, IV, |_| 0.75)));
            }
        }
        tx.send(LiveEvent::Nvml(vec![synth::nvml(
            0,
            T0 + 150_000_000,
            97,
            650.0,
            1980,
        )]));
        tx.send(LiveEvent::End);
    });
    let s = setup(Palette::Mono, TENSOR);
    let text = cufall_viewer::live::print_after(
        &rx,
        &s,
        Mode::Live,
        std::time::Duration::from_secs(5),
        100,
        0,
    )
    .expect("frame");
    producer.join().expect("producer");
    assert!(text.contains("75.0%"), "{text}");
    assert!(text.contains("smi  97%"), "{text}");
    assert!(text.contains("▶ LIVE"), "{text}");

    // Pausing freezes the window while data keeps arriving.
    let (tx, rx) = feed(synth::info(1, IV), 1024);
    let mut st = app::live_state(&rx, &s, Mode::Live).expect("state");
    st.update(Input::Feed(LiveEvent::Samples(synth::batch(
        0,
        T0,
        1000,
        IV,
        |_| 0.5,
    ))));
    st.update(Input::TogglePause);
    let w = st.window();
    st.update(Input::Feed(LiveEvent::Samples(synth::batch(
        0,
        T0 + 10_000_000_000,
        1000,
        IV,
        |_| 0.5,
    ))));
    assert_eq!(st.window(), w);
    st.update(Input::TogglePause);
    assert!(st.window().1 > w.1);
    drop(tx);
}

#[test]
fn unknown_metric_is_a_clear_error() {
    let (_tx, rx) = feed(synth::info(1, IV), 16);
    let s = setup(Palette::Mono, &["sm__nope.avg"]);
    let Err(e) = app::live_state(&rx, &s, Mode::Live) else {
        panic!("accepted an unknown metric")
    };
    let msg = e.to_string();
    assert!(
        msg.contains("unknown metric sm__nope.avg") && msg.contains(synth::TENSOR_AVG),
        "{msg}"
    );
}

#[test]
fn live_memory_is_bounded() {
    let (_tx, rx) = feed(synth::info(1, IV), 16);
    let s = setup(Palette::Mono, TENSOR);
    let mut st = app::live_state(&rx, &s, Mode::Live).expect("state");
    let mut held = Vec::new();
    for chunk in 0..200 {
        let t = T0 + chunk * 100_000_000;
        st.update(Input::Feed(LiveEvent::Samples(synth::batch(
            0,
            t,
            10_000,
            IV,
            |_| 0.5,
        ))));
        if chunk % 50 == 49 {
            held.push(st.store.bins_held());
        }
    }
    // 20 s of 100 kHz: the rings stop growing at the fine levels; only coarse levels still fill.
    let growth = held[3] - held[2];
    assert!(growth < held[2] / 10, "{held:?}");
}

#[test]
fn small_terminals_degrade_gracefully() {
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(recording(synth::demo(8, T0, 300_000_000, IV)), &s, 70, 16);
    st.update(Input::Resize(70, 16));
    let text = frame(&st);
    // No room for max/avg/min rows: the plain row only; no room for the right panel.
    assert!(!text.contains("GPU0 max"), "{text}");
    assert!(text.contains("GPU7"), "{text}");
    assert!(!text.contains("smi"), "{text}");
    st.update(Input::Resize(15, 3));
    assert!(frame(&st).contains("too small"));
}

/// A recording without GPU counters: NVML every 10 ms on 2 GPUs, GPU 0 busy for the middle
/// half second (nvidia-smi 100 %, memory 40 %), GPU 1 idle.
fn nvml_only() -> Recording {
    let mut info = synth::info(2, IV);
    info.metrics.clear();
    info.heatmaps.clear();
    info.counters_unavailable = Some(
        "GPU counters were not recorded: NVML-only recording was asked for (--nvml-only)".into(),
    );
    let mut nvml = Vec::new();
    for i in 0..100 {
        let t = T0 + i * 10_000_000;
        let busy = (25..75).contains(&i);
        for g in 0..2 {
            let mut r = synth::nvml(g, t, if busy && g == 0 { 100 } else { 0 }, 90.0, 1980);
            r.mem_util_pct = Some(if busy && g == 0 { 40 } else { 0 });
            nvml.push(r);
        }
    }
    Recording {
        info,
        batches: Vec::new(),
        drops: Vec::new(),
        nvml,
        nvtx: Vec::new(),
        kernels: Vec::new(),
        warnings: Vec::new(),
    }
}

#[test]
fn without_counters_the_view_shows_nvml_per_gpu() {
    let s = setup(Palette::Mono, &[]);
    let st = browse(nvml_only(), &s, 110, 14);
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(text.contains("NVML GPU utilization"), "{text}");
    assert!(text.contains("NVML memory utilization"), "{text}");
    assert!(text.contains("counters unavailable"), "banner: {text}");
    // GPU 0's busy half second is full blocks in the GPU-utilization band; GPU 1 has none.
    let lines: Vec<&str> = text.lines().collect();
    let gpu0 = lines
        .iter()
        .find(|l| l.starts_with("GPU0"))
        .expect("GPU0 row");
    let gpu1 = lines
        .iter()
        .find(|l| l.starts_with("GPU1"))
        .expect("GPU1 row");
    assert!(gpu0.contains("████"), "{gpu0}");
    assert!(!gpu1.contains('█'), "{gpu1}");
}

#[test]
fn a_live_view_without_counters_fills_from_nvml() {
    let rec = nvml_only();
    let (tx, rx) = feed(rec.info.clone(), 64);
    tx.send(LiveEvent::Nvml(rec.nvml.clone()));
    tx.send(LiveEvent::End);
    let text = cufall_viewer::live::print_after(
        &rx,
        &setup(Palette::Mono, &[]),
        Mode::Live,
        std::time::Duration::from_secs(5),
        100,
        0,
    )
    .expect("frame");
    assert!(text.contains("NVML GPU utilization"), "{text}");
    assert!(text.contains("████"), "{text}");
    assert!(text.contains("counters unavailable"), "{text}");
}

#[test]
fn a_live_frame_too_low_for_its_gpus_is_refused_with_the_minimum() {
    let (tx, rx) = feed(synth::info(2, IV), 1024);
    tx.send(LiveEvent::Samples(synth::batch(0, T0, 100, IV, |_| 0.5)));
    tx.send(LiveEvent::End);
    let s = setup(Palette::Mono, TENSOR);
    let short = std::time::Duration::from_secs(1);
    let err = cufall_viewer::live::print_after(&rx, &s, Mode::Live, short, 100, 6)
        .expect_err("6 rows hold no two-GPU frame");
    assert!(
        matches!(
            err,
            cufall_viewer::ViewError::FrameTooLow { height: 6, min: 7 }
        ),
        "{err}"
    );
    let (tx, rx) = feed(synth::info(2, IV), 1024);
    tx.send(LiveEvent::End);
    let text = cufall_viewer::live::print_after(&rx, &s, Mode::Live, short, 100, 7).expect("frame");
    assert_eq!(text.lines().count(), 7, "{text}");
}

#[test]
fn x_selects_the_next_gap_and_the_status_line_says_where_the_host_was() {
    use cufall_viewer::state::GapMark;
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(1, 0.5, 100_000_000), &s, 100, 12);
    st.options.spread = false;
    let mark = |a: i64, b: i64, text: &str| GapMark {
        start_ns: T0 + a,
        end_ns: T0 + b,
        text: text.into(),
    };
    st.set_gaps(vec![
        mark(
            60_000_000,
            62_000_000,
            "GPU0 draft → verify 2.00 ms · host: thread 7 in main (p.py:64) 90% waiting",
        ),
        mark(
            20_000_000,
            30_000_000,
            "GPU0 prefill 10.00 ms · host: thread 7 in load (p.py:9) 100%",
        ),
    ]);
    // Nothing selected: the frame is the usual one, with `x gap` among the keys.
    assert!(!frame(&st).contains("gap 1/2"));
    assert!(frame(&st).contains("x gap"));
    // From the window's centre (50 ms), `x` goes to the later gap, `X` back to the earlier.
    st.update(Input::NextGap);
    let text = frame(&st);
    insta::assert_snapshot!(text);
    assert!(
        text.contains("gap 2/2: GPU0 draft → verify 2.00 ms · host: thread 7 in main (p.py:64)"),
        "{text}"
    );
    assert!(text.contains("=="), "the gap is marked on the axis: {text}");
    let (a, b) = st.window();
    assert!(a <= T0 + 60_000_000 && T0 + 62_000_000 <= b);
    st.update(Input::PrevGap);
    assert!(frame(&st).contains("gap 1/2: GPU0 prefill 10.00 ms"));
    st.update(Input::PrevGap);
    assert_eq!(st.gap_cursor, Some(0), "no gap before the first");
    // Esc unselects before it quits.
    st.update(Input::Back);
    assert_eq!(st.gap_cursor, None);
    assert!(!st.quit);
    st.update(Input::Back);
    assert!(st.quit);
}

#[test]
fn gaps_found_in_the_background_arrive_when_ready() {
    use cufall_viewer::state::{GapMark, PendingGaps};
    let s = setup(Palette::Mono, TENSOR);
    let mut st = browse(constant(1, 0.5, 100_000_000), &s, 100, 12);
    let pending = PendingGaps::default();
    st.pending_gaps = Some(pending.clone());
    st.update(Input::NextGap);
    assert_eq!(st.gap_cursor, None);
    assert!(frame(&st).contains("idle gaps: still being found"));
    pending
        .0
        .set(vec![GapMark {
            start_ns: T0 + 70_000_000,
            end_ns: T0 + 71_000_000,
            text: "GPU0 verify 1.00 ms".into(),
        }])
        .unwrap();
    st.update(Input::NextGap);
    assert_eq!(st.gap_cursor, Some(0));
    assert!(st.pending_gaps.is_none());
    assert!(frame(&st).contains("gap 1/1: GPU0 verify 1.00 ms"));
}
