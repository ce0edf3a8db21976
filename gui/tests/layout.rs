//! How the timeline uses the window, on a real recording and on synthetic ones (`cufall_testkit`'s
//! benchmark trace, 8 GPUs): the tracks share the height, GPU groups fold and unfold, a track is
//! resized by dragging its bottom edge, and the side panel keeps its first column in view with
//! long metric names. Checked on numbers and with image snapshots (`tests/snapshots/`,
//! rewritten with `UPDATE_SNAPSHOTS=1 cargo test -p cufall-gui --test layout`).

mod common;

use common::{TestApp, example, harness, settle};
use cufall_gui::view::{GpuGroup, Settings};
use cufall_testkit::bench::{BenchKind, BenchTrace, write_bench_trace};
use cufall_trace::WriterOptions;
use cufall_trace::model::DeviceId;
use eframe::egui::{Event, Modifiers, PointerButton, Pos2, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use std::path::PathBuf;

const SIZE: Vec2 = Vec2::new(1400.0, 820.0);
const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

/// A second of the benchmark's synthetic loop on `gpus` GPUs with `metrics` counters (the
/// first two: tensor-pipe % and DRAM %; four add `sm__cycles_active.avg` and
/// `gr__cycles_elapsed.max`), in a temporary folder kept as long as the value.
fn synthetic(gpus: u32, metrics: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bench.cufall");
    let spec = BenchTrace {
        seconds: 1,
        gpus,
        kind: BenchKind::Gui {
            interval_ns: 200_000,
            metrics,
            host_threads: 0,
        },
    };
    write_bench_trace(&path, &spec, WriterOptions::default()).expect("write the trace");
    (dir, path)
}

fn no_panel() -> Settings {
    Settings {
        side_panel: false,
        ..Settings::default()
    }
}

/// The top of the details pane along the window's bottom (its tabs).
fn pane_top(h: &mut Harness<'static, TestApp>) -> f32 {
    h.get_by_label("Summary").rect().top()
}

/// The bottom of the rows' data area as drawn, and the bottom of the window.
fn rows_bottom(h: &mut Harness<'static, TestApp>) -> f32 {
    h.state_mut()
        .app()
        .st
        .last_data_rect
        .expect("drawn")
        .bottom()
}

#[test]
fn one_gpu_fills_the_window() {
    let _turn = common::render_turn();
    let mut h = harness(
        &[example("h200-specdec-0.5b-graphs-off.cufall")],
        None,
        no_panel(),
        SIZE,
        true,
    );
    // Two metric tracks, a kernel lane and three NVML lines share the height: the rows end
    // near the window's bottom edge, not half-way down.
    let bottom = rows_bottom(&mut h);
    let pane = pane_top(&mut h);
    assert!(
        pane - bottom < 20.0,
        "rows end at {bottom}, the details pane starts at {pane}"
    );
    assert_eq!(h.state_mut().app().st.folded, Some(Default::default()));
    h.snapshot("layout_one_gpu");
}

#[test]
fn eight_gpus_start_folded_and_unfold_on_a_click() {
    let _turn = common::render_turn();
    let (_dir, path) = synthetic(8, 2);
    let mut h = harness(&[path], None, no_panel(), SIZE, true);
    // Every row of 8 GPUs at its smallest does not fit: each GPU starts as one row.
    let folded = h.state_mut().app().st.folded.clone().expect("decided");
    assert_eq!(folded.len(), 8);
    let bottom = rows_bottom(&mut h);
    assert!(bottom > SIZE.y - 100.0, "8 folded rows end at {bottom}");
    h.snapshot("layout_eight_gpus_folded");

    h.get_by_label("unfold GPU 3").click();
    away(&mut h);
    let folded = h.state_mut().app().st.folded.clone().expect("decided");
    assert!(!folded.contains(&GpuGroup::all(DeviceId(3))) && folded.len() == 7);
    h.snapshot("layout_eight_gpus_one_open");

    h.get_by_label("fold GPU 3").click();
    settle(&mut h);
    assert_eq!(
        h.state_mut().app().st.folded.as_ref().map(|f| f.len()),
        Some(8)
    );
}

#[test]
fn eight_gpus_unfolded_scroll_at_their_smallest() {
    let _turn = common::render_turn();
    let (_dir, path) = synthetic(8, 2);
    let mut h = harness(&[path], None, no_panel(), SIZE, true);
    h.state_mut().app().st.folded = Some(Default::default());
    settle(&mut h);
    // Taller than the window: the rows scroll, each at its smallest. A group is its title,
    // two metric tracks, the kernel lane and three NVML tracks (18 + 2 × 32 + 18 + 3 × 22
    // points) with 2 points after each of its 7 rows.
    let area = h.state_mut().app().st.last_data_rect.expect("drawn");
    let pane = pane_top(&mut h);
    assert!(
        area.bottom() >= pane - 10.0,
        "{area:?} above the pane at {pane}"
    );
    let gpu0 = h.get_by_label("fold GPU 0").rect();
    let gpu1 = h.get_by_label("fold GPU 1").rect();
    assert!(
        (gpu1.top() - gpu0.top() - 180.0).abs() < 0.5,
        "{gpu0:?} {gpu1:?}"
    );
    h.snapshot("layout_eight_gpus_unfolded");
}

#[test]
fn dragging_a_tracks_bottom_edge_resizes_it() {
    let _turn = common::render_turn();
    let mut h = harness(
        &[example("h200-specdec-0.5b-graphs-off.cufall")],
        None,
        no_panel(),
        SIZE,
        true,
    );
    let key = format!("metric {DRAM}");
    let tensor = h
        .get_by_label(
            "resize metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        )
        .rect();
    let edge = h.get_by_label(&format!("resize {key}")).rect();
    let shared = edge.center().y - tensor.center().y;
    let before = rows_bottom(&mut h);
    let from = Pos2::new(edge.left() + 100.0, edge.center().y);
    drag(&mut h, from, from - Vec2::new(0.0, 60.0));
    settle(&mut h);
    let app = h.state_mut().app();
    let height = *app.settings.track_heights.get(&key).expect("a height kept");
    // Dragged 60 points up from the height it shared with the tensor track above it (the
    // height of that track plus the space between rows).
    let want = shared - 2.0 - 60.0;
    assert!(
        (height - want).abs() < 3.0,
        "height {height}, wanted {want}"
    );
    let edge = h.get_by_label(&format!("resize {key}")).rect();
    let tensor = h
        .get_by_label(
            "resize metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        )
        .rect();
    assert!((edge.center().y - tensor.center().y - 2.0 - height).abs() < 1.0);
    // The other tracks took the height it gave up (as far as their maximums let them): the
    // rows still about fill the window rather than ending 60 points higher.
    let after = rows_bottom(&mut h);
    assert!(
        after <= before && after > before - 10.0,
        "{before} -> {after}"
    );
    away(&mut h);
    h.snapshot("layout_resized_track");

    // Over the data, the same edge is the timeline's: a drag there pans, the height stays
    // (zoomed in first: the whole run does not move).
    {
        let v = &mut h.state_mut().app().st.view;
        let (a, b) = (v.at(0.25), v.at(0.75));
        v.fit(a, b, 0.0);
    }
    settle(&mut h);
    let view = h.state_mut().app().st.view;
    let edge = h.get_by_label(&format!("resize {key}")).rect();
    let over_data = Pos2::new(edge.right() + 300.0, edge.center().y);
    drag(&mut h, over_data, over_data + Vec2::new(100.0, -40.0));
    let app = h.state_mut().app();
    assert_eq!(app.settings.track_heights.get(&key), Some(&height));
    assert!(app.st.view.t0 < view.t0, "the view did not pan");

    // A double-click on the edge gives the track back to the shared layout.
    let edge = h.get_by_label(&format!("resize {key}")).rect();
    let p = edge.center() + Vec2::new(100.0 - edge.width() / 2.0, 0.0);
    // Two clicks in frames a quarter of a second apart: within egui's double-click time.
    for _ in 0..2 {
        click(&mut h, p);
    }
    settle(&mut h);
    assert!(h.state_mut().app().settings.track_heights.is_empty());
}

#[test]
fn long_metric_names_keep_the_phase_column_in_the_side_panel() {
    let _turn = common::render_turn();
    let (_dir, path) = synthetic(1, 4);
    let mut h = harness(&[path], None, Settings::default(), SIZE, true);
    // The phase names are right of the timeline, inside the window. (Laid out wider than the
    // panel, the table once began under the timeline, which hid its first columns.)
    let timeline_right = h
        .state_mut()
        .app()
        .st
        .last_data_rect
        .expect("drawn")
        .right();
    let tabs = h.get_by_label("Phases").rect();
    assert!(tabs.left() > timeline_right, "tabs at {tabs:?}");
    for phase in ["(whole run)", "draft", "verify"] {
        let r = h.get_by_label(phase).rect();
        assert!(
            r.left() >= tabs.left() - 1.0 && r.right() <= SIZE.x,
            "{phase} at {r:?}, tabs at {tabs:?}, timeline ends at {timeline_right}"
        );
    }
    h.snapshot("layout_long_metric_names");
}

fn press(h: &mut Harness<'static, TestApp>, pos: Pos2, pressed: bool) {
    h.event(Event::PointerMoved(pos));
    h.event(Event::PointerButton {
        pos,
        button: PointerButton::Primary,
        pressed,
        modifiers: Modifiers::NONE,
    });
    h.step();
}

/// The pointer leaves the window (no tooltip in the picture), and the window settles.
fn away(h: &mut Harness<'static, TestApp>) {
    h.event(Event::PointerGone);
    settle(h);
}

/// Press and release in one frame (`Harness::event` would give each event a frame of its own,
/// a quarter of a second apart, too slow for a double-click).
fn click(h: &mut Harness<'static, TestApp>, pos: Pos2) {
    let events = &mut h.input_mut().events;
    events.push(Event::PointerMoved(pos));
    for pressed in [true, false] {
        events.push(Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.step();
}

fn drag(h: &mut Harness<'static, TestApp>, from: Pos2, to: Pos2) {
    h.event(Event::PointerMoved(from));
    h.step();
    press(h, from, true);
    for i in 1..=6 {
        h.event(Event::PointerMoved(from + (to - from) * (i as f32 / 6.0)));
        h.step();
    }
    press(h, to, false);
    h.step();
}
