//! The timeline read at a glance, on real recordings: compact counter tracks with the value at
//! the cursor, idle gaps under the tracks, host threads as flame charts (cufall's own hidden),
//! the details pane, an axis that holds at every zoom, double-click fits, both recordings'
//! kernels of a selected phase, `--align wall` on one host, and a small window.

mod common;

use common::{TestApp, nth_verify, open, settle};
use cufall_gui::loaded::Locked;
use cufall_gui::timeline::{Row, rows};
use cufall_gui::view::{AxisTime, DetailsTab};
use eframe::egui::{self, Event, PointerButton, Pos2, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use std::collections::BTreeSet;

const SIZE: Vec2 = Vec2::new(1400.0, 900.0);
const NATIVE: &str = "h200-specdec-graphs-on-native-host.cufall";

/// The rows drawn now, as the timeline lays them out.
fn current_rows(h: &mut Harness<'static, TestApp>) -> Vec<Row> {
    let app = h.state_mut().app();
    let locked: Vec<Locked<'_>> = app.slots.iter().map(Locked::new).collect();
    let none = BTreeSet::new();
    let host_folded = app.st.host_folded.clone().unwrap_or_default();
    let host_open = app.st.host_open.clone().unwrap_or_default();
    rows(
        &locked,
        &app.settings,
        (
            app.st.folded.as_ref().unwrap_or(&none),
            (&host_folded, &host_open),
        ),
        app.st.nodes_apart(locked.len()),
    )
}

/// Two clicks, each pressed and released in one frame (frames of the harness are a quarter
/// of a second apart, within egui's double-click time).
fn double_click(h: &mut Harness<'static, TestApp>, p: Pos2) {
    for _ in 0..2 {
        let events = &mut h.input_mut().events;
        events.push(Event::PointerMoved(p));
        for pressed in [true, false] {
            events.push(Event::PointerButton {
                pos: p,
                button: PointerButton::Primary,
                pressed,
                modifiers: egui::Modifiers::NONE,
            });
        }
        h.step();
    }
    h.step();
}

#[test]
fn cufall_threads_are_hidden_until_asked_for() {
    let mut h = open(&[NATIVE], None, SIZE, false);
    let names = |h: &mut Harness<'static, TestApp>| -> Vec<String> {
        let rows = current_rows(h);
        let app = h.state_mut().app();
        let s = app.slots[0].data.lock();
        let tb = s.tables.as_ref().expect("tables");
        rows.iter()
            .filter_map(|r| match r {
                Row::Host { thread, .. } => Some(tb.host.threads[*thread].name.clone()),
                _ => None,
            })
            .collect()
    };
    let shown = names(&mut h);
    assert!(!shown.is_empty());
    assert!(shown.iter().all(|n| !n.starts_with("cufall-")), "{shown:?}");
    h.state_mut().app().settings.show_cufall_threads = true;
    h.run_steps(2);
    let all = names(&mut h);
    assert!(all.iter().any(|n| n.starts_with("cufall-")), "{all:?}");
    assert!(all.len() > shown.len());
}

#[test]
fn unsymbolised_frames_name_their_library() {
    let mut h = open(&[NATIVE], None, SIZE, false);
    let app = h.state_mut().app();
    let s = app.slots[0].data.lock();
    let host = &s.tables.as_ref().expect("tables").host;
    let names: Vec<&str> = host
        .frames
        .iter()
        .map(|f| host.names.get(f.function))
        .collect();
    // Addresses in stripped libraries read `libcuda.so+0x…`, never a bare address.
    assert!(
        names.iter().any(|n| n.contains(".so+0x")),
        "{:?}",
        &names[..names.len().min(20)]
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("0x") && !n.contains(' ')),
        "bare addresses left"
    );
}

#[test]
fn a_click_on_a_thread_label_opens_or_closes_its_flame_chart() {
    let mut h = open(&[NATIVE], None, SIZE, false);
    let rows = current_rows(&mut h);
    let closed = rows
        .iter()
        .find_map(|r| match r {
            Row::Host {
                thread,
                open: false,
                ..
            } => Some(*thread),
            _ => None,
        })
        .expect("an idle thread starts closed");
    let open_one = rows
        .iter()
        .any(|r| matches!(r, Row::Host { open: true, .. }));
    assert!(open_one, "the busiest thread starts as a flame chart");
    let (pid, tid, name) = {
        let app = h.state_mut().app();
        let s = app.slots[0].data.lock();
        let th = &s.tables.as_ref().expect("tables").host.threads[closed];
        (th.pid, th.tid, th.name.clone())
    };
    let label = format!("unfold thread {tid} {name}");
    h.get_by_label(&label).click();
    h.run_steps(3);
    let app = h.state_mut().app();
    assert!(
        app.st
            .host_open
            .as_ref()
            .is_some_and(|o| o.contains(&(0, pid, tid))),
        "{:?}",
        app.st.host_open
    );
}

#[test]
fn zoom_out_stops_at_the_whole_run() {
    let mut h = open(&["h200-torch-phases.cufall"], None, SIZE, false);
    for _ in 0..30 {
        h.key_press(egui::Key::S);
        h.step();
    }
    let app = h.state_mut().app();
    let locked: Vec<Locked<'_>> = app.slots.iter().map(Locked::new).collect();
    let (a, b) = cufall_gui::loaded::shared_extent(&locked);
    drop(locked);
    let v = app.st.view;
    let margin = (b - a) * 0.011;
    assert!(
        v.t0 >= a - margin && v.t1 <= b + margin,
        "{v:?} for [{a:?}, {b:?}]"
    );
    assert!(v.span() >= (b - a) * 0.99, "{v:?}");
}

#[test]
fn a_double_click_on_a_counter_track_fits_the_phase_or_gap_not_a_sample() {
    let mut h = open(&["h200-specdec-0.5b-graphs-off.cufall"], None, SIZE, false);
    // Zoomed to the 10th verify range, so single samples are wider than a pixel.
    let (a, b) = {
        let app = h.state_mut().app();
        let (start_ns, end_ns) = nth_verify(app, 9);
        (app.slots[0].disp(start_ns), app.slots[0].disp(end_ns))
    };
    {
        let app = h.state_mut().app();
        app.st.view.fit(a, b, 0.3);
    }
    settle(&mut h);
    let rect = h.state_mut().app().st.last_data_rect.expect("drawn");
    // The middle of the view, on the first counter track: the first row below the NVTX lanes,
    // the host threads and the GPU's title.
    let rows = current_rows(&mut h);
    let first_metric = rows
        .iter()
        .position(|r| matches!(r, Row::Metric { .. }))
        .expect("a counter track");
    assert!(first_metric >= 1);
    let (t_mid, y) = {
        let app = h.state_mut().app();
        (AxisTime::mid(app.st.view.t0, app.st.view.t1), rect.top())
    };
    let _ = t_mid;
    // Find the track's y by walking down until the hover names a metric.
    let x = rect.center().x;
    let mut fitted = None;
    for dy in (0..400).step_by(6) {
        let p = Pos2::new(x, y + dy as f32);
        h.event(Event::PointerMoved(p));
        h.step();
        let on_metric = h
            .query_all_by_label_contains("pipe_tensor")
            .next()
            .is_some();
        if on_metric {
            let before = h.state_mut().app().st.view;
            double_click(&mut h, p);
            fitted = Some((before, h.state_mut().app().st.view));
            break;
        }
    }
    let (before, after) = fitted.expect("found the counter track");
    assert_ne!(before, after, "the double-click fitted something");
    // Not one sample (30 µs): the verify range (its length with a margin) or a gap in it.
    assert!(after.span() > 100_000.0, "fitted {} ns", after.span());
    assert!(
        after.span() <= (b - a) * 1.2,
        "fitted {} ns of {}",
        after.span(),
        b - a
    );
}

#[test]
fn a_phase_selected_in_two_recordings_lists_both_sides_kernels() {
    let mut h = open(
        &[
            "h200-specdec-0.5b-graphs-off.cufall",
            "h200-specdec-0.5b-graphs-on.cufall",
        ],
        Some("verify"),
        SIZE,
        false,
    );
    // The first `verify` in the side panel (A's list): zoom and select its first range.
    h.get_all_by_label("verify")
        .next()
        .expect("verify listed")
        .click();
    h.run_steps(3);
    settle(&mut h);
    let app = h.state_mut().app();
    assert_eq!(
        app.st.selected_phase.as_ref().map(|p| p.0.as_str()),
        Some("verify")
    );
    let stats = app.selection_stats().expect("statistics of the selection");
    assert_eq!(stats.traces.len(), 2);
    for t in &stats.traces {
        assert!(
            t.kernel_count > 0,
            "{}: no kernels in its verify range",
            t.name
        );
    }
    // Each side's window is its own verify range.
    assert_ne!(stats.windows[0], stats.windows[1]);
    app.st.details_tab = DetailsTab::Kernels;
    h.run_steps(2);
    // The kernels table names whose each row is.
    assert!(h.query_all_by_label("B").next().is_some());
    assert!(h.query_all_by_label("A").next().is_some());
}

#[test]
fn align_wall_on_one_host_says_why_it_aligns_nothing() {
    let mut h = open(
        &[
            "h200-specdec-0.5b-graphs-off.cufall",
            "h200-specdec-0.5b-graphs-on.cufall",
        ],
        Some("wall"),
        SIZE,
        false,
    );
    let app = h.state_mut().app();
    let said: Vec<&str> = app.st.messages.iter().map(|m| m.text.as_str()).collect();
    assert!(
        said.iter()
            .any(|m| m.contains("--align wall lines up nothing")
                && m.contains("one host")
                && m.contains("first samples")),
        "{said:?}"
    );
    assert!(!app.st.align_wall);
}

#[test]
fn a_small_window_still_shows_the_axis_and_a_track() {
    let _turn = common::render_turn();
    let mut h = open(
        &["h200-torch-phases-host.cufall"],
        None,
        Vec2::new(400.0, 300.0),
        true,
    );
    let r = h.state_mut().app().st.last_data_rect.expect("drawn");
    assert!(r.height() >= 40.0, "{r:?}");
    assert!(r.width() >= 200.0, "{r:?}");
    h.snapshot("small_window_400x300");
}

#[test]
fn the_details_pane_fills_what_the_tracks_leave() {
    let _turn = common::render_turn();
    let mut h = open(&["h200-torch-phases.cufall"], None, SIZE, true);
    {
        let app = h.state_mut().app();
        let (a, b) = (app.st.view.t0, app.st.view.t1);
        let len = b - a;
        // The decode steps at the end of the run.
        app.st.selection = Some((a + len * 0.85, a + len * 0.89));
        app.st.details_tab = DetailsTab::Kernels;
    }
    settle(&mut h);
    let rect = h.state_mut().app().st.last_data_rect.expect("drawn");
    // The pane starts right under the last track: nothing blank between.
    let pane_top = h
        .query_by_label("Summary")
        .expect("the pane's tabs")
        .rect()
        .top();
    assert!(
        pane_top - rect.bottom() < 30.0,
        "tracks end at {}, the pane starts at {pane_top}",
        rect.bottom()
    );
    // A click on a column title sorts by it (the pane's `count`, below the side panel's).
    h.get_all_by_label("count")
        .max_by(|a, b| a.rect().top().total_cmp(&b.rect().top()))
        .expect("the kernels' count column")
        .click();
    h.run_steps(2);
    let sort = h.state_mut().app().st.details_sort;
    assert_eq!(sort.map(|s| (s.0, s.1)), Some((DetailsTab::Kernels, 1)));
    h.snapshot("details_kernels");
}

#[test]
fn the_value_at_the_cursor_is_on_every_track() {
    let _turn = common::render_turn();
    let mut h = open(&["h200-torch-phases.cufall"], None, SIZE, true);
    let rect = h.state_mut().app().st.last_data_rect.expect("drawn");
    h.event(Event::PointerMoved(Pos2::new(
        rect.left() + rect.width() * 0.8,
        rect.top() + 60.0,
    )));
    h.run_steps(2);
    h.snapshot("cursor_readout");
}
