//! The timeline's pointer and keys, turned into [`Input`]s for [`ViewState::apply`]: this module
//! reads egui and decides what was meant; the state changes in `crate::view` alone.
//!
//! Inputs are collected in the order egui reports them and applied in that order once the
//! timeline is drawn, so that a drag that starts in a frame that also zooms begins from the
//! zoomed view.

use super::geom::{Geom, Hit};
use crate::axis::AxisTime;
use crate::view::{Drag, DragKind, Input, ViewState};
use eframe::egui::{self, Ui};

/// Pointer input on the rows: Ctrl+wheel zoom at the cursor, horizontal wheel pan, drag pan,
/// Shift+drag select, right drag or Ctrl+drag box zoom, click selects and double-click fits
/// what is under the pointer: the range, kernel, gap or drop, or on a counter track the gap or
/// (`phase_at`) the innermost phase there.
pub(super) fn pointer_input(
    ui: &Ui,
    resp: &egui::Response,
    geom: &Geom,
    (st, extent): (&ViewState, (AxisTime, AxisTime)),
    hit: Option<&Hit>,
    phase_at: &dyn Fn(f32) -> Option<(AxisTime, AxisTime)>,
    out: &mut Vec<Input>,
) {
    let (zoom, scroll, mods) = ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta(), i.modifiers));
    if let Some(p) = resp.hover_pos() {
        if zoom != 1.0 {
            let anchor = geom.frac(p.x);
            let factor = f64::from(zoom);
            out.push(Input::Zoom { anchor, factor });
        }
        if scroll.x != 0.0 {
            out.push(Input::Pan(-f64::from(scroll.x / geom.w)));
        }
    }
    // The drag starts where the button went down, not where egui recognised the drag.
    if resp.drag_started()
        && let Some(p) = ui
            .input(|i| i.pointer.press_origin())
            .or(resp.interact_pointer_pos())
    {
        let kind = if resp.dragged_by(egui::PointerButton::Secondary) || mods.command {
            DragKind::BoxZoom
        } else if mods.shift {
            DragKind::Select
        } else {
            DragKind::Pan
        };
        let t = geom.t(p.x);
        out.push(Input::DragStart { kind, t, x: p.x });
    }
    if resp.dragged()
        && let Some(p) = resp.interact_pointer_pos()
    {
        let (t, x, w) = (geom.t(p.x), p.x, geom.w);
        out.push(Input::DragTo { t, x, w });
    }
    if resp.drag_stopped() {
        // A box zoom of a few points is a slip of the hand, not a zoom.
        let drag = st.drag_after(out, extent);
        if let (Some(Drag::BoxZoom { from }), Some(p)) = (drag, resp.interact_pointer_pos()) {
            let to = geom.t(p.x);
            if (geom.x(to) - geom.x(from)).abs() > 3.0 {
                out.push(Input::Fit {
                    a: from,
                    b: to,
                    margin: 0.0,
                });
            }
        }
        out.push(Input::DragEnd);
    }
    let under = hit.and_then(|h| h.span);
    if resp.double_clicked() {
        // Nothing with a span of its own under the pointer (a counter's value): the phase there.
        let phase = || resp.interact_pointer_pos().and_then(|p| phase_at(p.x));
        if let Some((a, b)) = under.or_else(phase) {
            out.push(Input::Fit { a, b, margin: 0.05 });
        }
    } else if resp.clicked()
        && let Some((a, b)) = under
    {
        out.push(Input::Select { a, b });
    }
}

/// W/S zoom, A/D pan, F fit the selection, Esc clear it, `?` help. Ignored while a text field
/// has the keyboard.
pub(super) fn key_input(ui: &Ui, geom: &Geom, out: &mut Vec<Input>) {
    if ui.ctx().egui_wants_keyboard_input() {
        return;
    }
    let pointer = ui.input(|i| i.pointer.hover_pos());
    let anchor = pointer
        .map(|p| geom.frac(p.x))
        .filter(|f| (0.0..=1.0).contains(f))
        .unwrap_or(0.5);
    let inputs = ui.input(|i| {
        let mut out = Vec::new();
        let keys = [
            (
                egui::Key::W,
                Input::Zoom {
                    anchor,
                    factor: 1.5,
                },
            ),
            (
                egui::Key::S,
                Input::Zoom {
                    anchor,
                    factor: 1.0 / 1.5,
                },
            ),
            (egui::Key::A, Input::Pan(-0.15)),
            (egui::Key::D, Input::Pan(0.15)),
            (egui::Key::F, Input::FitSelection),
            (egui::Key::Escape, Input::Clear),
        ];
        for (key, input) in keys {
            if i.key_pressed(key) {
                out.push(input);
            }
        }
        let question = i.key_pressed(egui::Key::Questionmark)
            || i.events
                .iter()
                .any(|e| matches!(e, egui::Event::Text(t) if t == "?"));
        if question {
            out.push(Input::ToggleHelp);
        }
        out
    });
    out.extend(inputs);
}
