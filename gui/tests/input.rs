//! Navigation driven by real input events on a real recording, checked on the view's numbers:
//! Ctrl+wheel zooms at the cursor, drag pans, right drag box-zooms, Shift+drag selects, keys.

mod common;

use common::{example, harness, settle};
use cufall_gui::view::{AxisTime, Settings};
use eframe::egui::{self, Event, Modifiers, MouseWheelUnit, PointerButton, Pos2, Vec2};
use egui_kittest::kittest::Queryable;

const SIZE: Vec2 = Vec2::new(1200.0, 700.0);

fn open() -> egui_kittest::Harness<'static, common::TestApp> {
    let settings = Settings {
        side_panel: false,
        ..Settings::default()
    };
    harness(
        &[example("h200-specdec-0.5b-graphs-off.cufall")],
        None,
        settings,
        SIZE,
        false,
    )
}

/// Data area of the rows, and the time at an x there.
fn area(h: &mut egui_kittest::Harness<'static, common::TestApp>) -> egui::Rect {
    h.state_mut().app().st.last_data_rect.expect("drawn")
}

fn time_at(h: &mut egui_kittest::Harness<'static, common::TestApp>, x: f32) -> AxisTime {
    let r = area(h);
    let v = h.state_mut().app().st.view;
    v.at(f64::from((x - r.left()) / r.width()))
}

fn drag(
    h: &mut egui_kittest::Harness<'static, common::TestApp>,
    from: Pos2,
    to: Pos2,
    button: PointerButton,
    mods: Modifiers,
) {
    h.event(Event::PointerMoved(from));
    h.step();
    h.event_modifiers(
        Event::PointerButton {
            pos: from,
            button,
            pressed: true,
            modifiers: mods,
        },
        mods,
    );
    h.step();
    for i in 1..=5 {
        let p = from + (to - from) * (i as f32 / 5.0);
        h.event_modifiers(Event::PointerMoved(p), mods);
        h.step();
    }
    h.event_modifiers(
        Event::PointerButton {
            pos: to,
            button,
            pressed: false,
            modifiers: mods,
        },
        mods,
    );
    h.step();
    h.step();
}

#[test]
fn ctrl_wheel_zooms_at_the_cursor() {
    let mut h = open();
    let r = area(&mut h);
    let p = Pos2::new(r.left() + r.width() * 0.3, r.top() + 40.0);
    let before = h.state_mut().app().st.view;
    let t_under = time_at(&mut h, p.x);
    h.event(Event::PointerMoved(p));
    h.step();
    let ctrl = Modifiers::CTRL;
    h.event_modifiers(
        Event::MouseWheel {
            unit: MouseWheelUnit::Line,
            delta: Vec2::new(0.0, 3.0),
            modifiers: ctrl,
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
        },
        ctrl,
    );
    h.step();
    h.step();
    let after = h.state_mut().app().st.view;
    assert!(
        after.span() < before.span() * 0.95,
        "zoomed in: {before:?} -> {after:?}"
    );
    let t_now = time_at(&mut h, p.x);
    assert!(
        (t_now - t_under).abs() < before.span() * 1e-6,
        "the time under the cursor stays: {t_under:?} vs {t_now:?}"
    );
}

#[test]
fn drag_pans_by_the_distance_moved() {
    let mut h = open();
    {
        // The middle half of the run: the whole run cannot move (the view stays on the data).
        let v = &mut h.state_mut().app().st.view;
        let (a, b) = (v.at(0.25), v.at(0.75));
        v.fit(a, b, 0.0);
    }
    h.run_steps(2);
    let r = area(&mut h);
    let y = r.top() + 40.0;
    let before = h.state_mut().app().st.view;
    drag(
        &mut h,
        Pos2::new(r.left() + 500.0, y),
        Pos2::new(r.left() + 400.0, y),
        PointerButton::Primary,
        Modifiers::NONE,
    );
    let after = h.state_mut().app().st.view;
    let expect = before.span() * 100.0 / f64::from(r.width());
    assert!((after.span() - before.span()).abs() < 1.0, "span unchanged");
    assert!(
        ((after.t0 - before.t0) - expect).abs() < expect * 0.02,
        "moved later by {expect}: {before:?} -> {after:?}"
    );
}

#[test]
fn right_drag_zooms_to_the_box() {
    let mut h = open();
    let r = area(&mut h);
    let y = r.top() + 40.0;
    let (x1, x2) = (r.left() + 200.0, r.left() + 320.0);
    let (t1, t2) = (time_at(&mut h, x1), time_at(&mut h, x2));
    drag(
        &mut h,
        Pos2::new(x1, y),
        Pos2::new(x2, y),
        PointerButton::Secondary,
        Modifiers::NONE,
    );
    let v = h.state_mut().app().st.view;
    let tol = (t2 - t1) * 0.02;
    assert!(
        (v.t0 - t1).abs() < tol && (v.t1 - t2).abs() < tol,
        "box [{}, {}] -> view {v:?}",
        t1.ns,
        t2.ns
    );
}

#[test]
fn shift_drag_selects_then_f_fits_and_esc_clears() {
    let mut h = open();
    let r = area(&mut h);
    let y = r.top() + 40.0;
    let (x1, x2) = (r.left() + 100.0, r.left() + 260.0);
    let (t1, t2) = (time_at(&mut h, x1), time_at(&mut h, x2));
    drag(
        &mut h,
        Pos2::new(x1, y),
        Pos2::new(x2, y),
        PointerButton::Primary,
        Modifiers::SHIFT,
    );
    let (a, b) = h.state_mut().app().st.selection().expect("a selection");
    let tol = (t2 - t1) * 0.02;
    assert!(
        (a - t1).abs() < tol && (b - t2).abs() < tol,
        "selected [{}, {}], wanted [{}, {}]",
        a.ns,
        b.ns,
        t1.ns,
        t2.ns
    );
    settle(&mut h);
    // The details pane says what is selected.
    assert!(h.query_all_by_label_contains("selection ").next().is_some());
    h.event(Event::PointerGone);
    h.key_press(egui::Key::F);
    h.step();
    let v = h.state_mut().app().st.view;
    assert!(
        v.t0 <= a && v.t1 >= b && v.span() < (b - a) * 1.1,
        "fitted: {v:?}"
    );
    h.key_press(egui::Key::Escape);
    h.step();
    assert!(h.state_mut().app().st.selection().is_none());
}

#[test]
fn keys_zoom_and_pan() {
    let mut h = open();
    h.event(Event::PointerGone);
    let v0 = h.state_mut().app().st.view;
    h.key_press(egui::Key::W);
    h.step();
    let v1 = h.state_mut().app().st.view;
    assert!((v1.span() - v0.span() / 1.5).abs() < 1.0);
    assert!(
        (AxisTime::mid(v1.t0, v1.t1) - AxisTime::mid(v0.t0, v0.t1)).abs() < 1.0,
        "zoomed at the centre"
    );
    h.key_press(egui::Key::D);
    h.step();
    let v2 = h.state_mut().app().st.view;
    assert!((v2.t0 - v1.t0 - 0.15 * v1.span()).abs() < 1.0);
    h.key_press(egui::Key::S);
    h.step();
    assert!((h.state_mut().app().st.view.span() - v0.span()).abs() < 1.0);
}

#[test]
fn clicking_a_gap_in_the_side_panel_zooms_to_it() {
    let mut h = harness(
        &[example("h200-specdec-0.5b-graphs-off.cufall")],
        None,
        Settings::default(),
        SIZE,
        false,
    );
    h.state_mut().app().st.side_tab = cufall_gui::view::SideTab::Gaps;
    settle(&mut h);
    // The longest gap of this recording (cufall report): 340.17 ms after accept.
    use egui_kittest::kittest::Queryable;
    h.get_by_label("340.17 ms").click();
    h.step();
    h.step();
    let app = h.state_mut().app();
    let (a, b) = app.st.selection().expect("the gap is selected");
    assert!(((b - a) - 340.17e6).abs() < 0.01e6, "{}", b - a);
    assert!(app.st.view.t0 <= a && app.st.view.t1 >= b && app.st.view.span() < (b - a) * 3.5);
}
