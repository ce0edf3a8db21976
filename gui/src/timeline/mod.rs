//! The timeline: an overview strip, the time axis and one row per track, drawn from the shared
//! state of each open recording, and the navigation input on it.
//!
//! - [`rows`](mod@rows): which rows there are, in order, and their heights;
//! - [`input`]: the pointer and keys on the timeline, as [`crate::view::Input`]s that the view
//!   state applies;
//! - `tracks`: what each row draws and the tooltip under the pointer; `paint`: colour maps,
//!   meshes and hatching;
//! - here: the frame's layout (overview, axis, rows, overlays) and time ↔ x ([`Geom`]).
//!
//! Metric tracks are drawn from the level-of-detail pyramid, one summary per point column, or
//! from raw samples when single samples are wider than a column.

pub mod input;
mod paint;
pub mod rows;
mod tracks;

pub use paint::{name_color, turbo};
pub use rows::{NvmlField, Row, rows};
pub use tracks::full_scale;

use crate::axis::AxisTime;
use crate::fmt::{fmt_offset, round_ns};
use crate::model::{Locked, shared_extent};
use crate::view::{Drag, Input, Settings, TimeView, ViewState};
use eframe::egui::{
    self, Align2, Color32, FontId, Pos2, Rect, Sense, Stroke, StrokeKind, Ui, Vec2,
};
use paint::heat_mesh;
use tracks::draw_row;

/// Width of the label column.
pub const LABEL_W: f32 = 210.0;
const OVERVIEW_H: f32 = 34.0;
const AXIS_H: f32 = 22.0;

/// Geometry of the data area for converting between time and x.
#[derive(Clone, Copy, Debug)]
pub struct Geom {
    pub x0: f32,
    pub w: f32,
    pub view: TimeView,
}

impl Geom {
    pub fn x(&self, t: AxisTime) -> f32 {
        self.x0 + ((t - self.view.t0) / self.view.span() * f64::from(self.w)) as f32
    }
    pub fn t(&self, x: f32) -> AxisTime {
        self.view.at(f64::from((x - self.x0) / self.w.max(1.0)))
    }
    pub fn frac(&self, x: f32) -> f64 {
        f64::from((x - self.x0) / self.w.max(1.0))
    }
    pub fn px_ns(&self) -> f64 {
        self.view.span() / f64::from(self.w.max(1.0))
    }
}

/// Something under the pointer, for hover text, clicks and double-clicks.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub text: String,
    /// Its extent on the shared axis, if it has one (a range, a kernel, a gap).
    pub span: Option<(AxisTime, AxisTime)>,
}

/// Draws the overview strip, the axis and the rows, and applies navigation input.
pub fn timeline_ui(
    ui: &mut Ui,
    traces: &mut [Locked<'_>],
    st: &mut ViewState,
    settings: &Settings,
) {
    let extent = shared_extent(traces);
    let full = ui.available_rect_before_wrap();
    let data_x0 = full.left() + LABEL_W;
    let data_w = (full.width() - LABEL_W - 4.0).max(50.0);
    let origin = extent.0;

    // Overview of the whole run, with the visible window.
    let (ov_rect, ov_resp) =
        ui.allocate_exact_size(Vec2::new(full.width(), OVERVIEW_H), Sense::click_and_drag());
    overview_ui(ui, ov_rect, traces, st, extent, data_x0, data_w, &ov_resp);

    let (axis_rect, _) = ui.allocate_exact_size(Vec2::new(full.width(), AXIS_H), Sense::hover());
    let geom = Geom {
        x0: data_x0,
        w: data_w,
        view: st.view,
    };
    axis_ui(ui, axis_rect, &geom, origin);

    let rows = rows(traces, settings);
    let total_h: f32 = rows.iter().map(|r| r.height(settings) + 2.0).sum();
    let mut hit: Option<Hit> = None;
    let mut data_rect = Rect::NOTHING;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            let (rect, _) =
                ui.allocate_exact_size(Vec2::new(full.width(), total_h), Sense::hover());
            data_rect = Rect::from_min_max(
                Pos2::new(data_x0, rect.top()),
                Pos2::new(data_x0 + data_w, rect.bottom()),
            );
            let resp = ui.interact(
                data_rect,
                egui::Id::unique("cufall-timeline"),
                Sense::click_and_drag(),
            );
            let pointer = resp.hover_pos();
            let painter = ui.painter_at(rect);
            let clip = ui.clip_rect();
            let mut y = rect.top();
            for row in &rows {
                let h = row.height(settings);
                let row_rect =
                    Rect::from_min_size(Pos2::new(rect.left(), y), Vec2::new(full.width(), h));
                y += h + 2.0;
                if !row_rect.intersects(clip) {
                    continue;
                }
                let label_rect =
                    Rect::from_min_max(row_rect.min, Pos2::new(data_x0 - 6.0, row_rect.bottom()));
                let area = Rect::from_min_max(
                    Pos2::new(data_x0, row_rect.top()),
                    Pos2::new(data_x0 + data_w, row_rect.bottom()),
                );
                let hovered = pointer.filter(|p| area.contains(*p));
                metric_label_ui(ui, row, label_rect, traces);
                let h = draw_row(
                    ui, &painter, *row, label_rect, area, traces, &geom, settings, hovered,
                );
                if h.is_some() {
                    hit = h;
                }
            }
            overlays(&painter, st, &geom, data_rect, pointer);
            input::pointer_input(ui, &resp, &geom, st, extent, hit.as_ref());
            if let Some(h) = &hit
                && st.drag.is_none()
            {
                resp.on_hover_text_at_pointer(h.text.clone());
            }
        });
    st.last_data_rect = Some(data_rect.intersect(ui.clip_rect()));
    input::key_input(ui, st, &geom, extent);
    st.view.keep_near(extent.0, extent.1);
}

/// A metric row's label tells the metric's full name, unit and description on hover.
fn metric_label_ui(ui: &Ui, row: &Row, label_rect: Rect, traces: &[Locked<'_>]) {
    if let Row::Metric { ti, m, .. } = row
        && let Some(info) = traces[*ti].slot.data.metrics.get(*m)
    {
        let id = egui::Id::unique(("cufall-metric-label", *ti, *m, label_rect.top() as i32));
        let unit = if info.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", info.unit)
        };
        ui.interact(label_rect, id, Sense::hover())
            .on_hover_text(format!("{}{unit}\n{}", info.name, info.description));
    }
}

/// The selection, the box being dragged to zoom and the pointer's time line, over every row.
fn overlays(
    painter: &egui::Painter,
    st: &ViewState,
    geom: &Geom,
    data_rect: Rect,
    pointer: Option<Pos2>,
) {
    let ys = data_rect.y_range();
    if let Some((a, b)) = st.selection() {
        let r = Rect::from_x_y_ranges(geom.x(a)..=geom.x(b), ys);
        painter.rect_filled(r, 0.0, Color32::from_rgba_unmultiplied(120, 170, 255, 40));
        painter.vline(r.left(), ys, Stroke::new(1.0, Color32::LIGHT_BLUE));
        painter.vline(r.right(), ys, Stroke::new(1.0, Color32::LIGHT_BLUE));
    }
    if let (Some(Drag::BoxZoom { from }), Some(p)) = (st.drag, pointer) {
        let r = Rect::from_x_y_ranges(geom.x(from)..=p.x, ys);
        painter.rect_stroke(
            r,
            0.0,
            Stroke::new(1.5, Color32::YELLOW),
            StrokeKind::Inside,
        );
    }
    if let Some(p) = pointer {
        painter.vline(p.x, ys, Stroke::new(1.0, Color32::from_gray(160)));
    }
}

#[allow(clippy::too_many_arguments)]
fn overview_ui(
    ui: &Ui,
    rect: Rect,
    traces: &[Locked<'_>],
    st: &mut ViewState,
    extent: (AxisTime, AxisTime),
    data_x0: f32,
    data_w: f32,
    resp: &egui::Response,
) {
    let painter = ui.painter_at(rect);
    painter.text(
        Pos2::new(rect.left() + 4.0, rect.center().y),
        Align2::LEFT_CENTER,
        "overview",
        FontId::proportional(12.0),
        ui.visuals().weak_text_color(),
    );
    let area = Rect::from_min_max(
        Pos2::new(data_x0, rect.top() + 4.0),
        Pos2::new(data_x0 + data_w, rect.bottom() - 4.0),
    );
    painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
    let whole = Geom {
        x0: data_x0,
        w: data_w,
        view: TimeView {
            t0: extent.0,
            t1: extent.1,
        },
    };
    if let Some(t) = traces.first()
        && let Some((_, p)) = t.s.pyramids.iter().next()
        && !t.slot.data.metrics.is_empty()
    {
        let scale = full_scale(t, 0);
        let cols = p.columns(
            0,
            t.slot.local(whole.view.t0),
            whole.px_ns(),
            data_w as usize,
            None,
        );
        heat_mesh(&painter, area, &cols, scale);
    }

    let v = Rect::from_x_y_ranges(
        whole.x(st.view.t0).max(area.left())..=whole.x(st.view.t1).min(area.right()),
        area.y_range(),
    );
    painter.rect_stroke(v, 0.0, Stroke::new(1.5, Color32::WHITE), StrokeKind::Inside);
    if (resp.dragged() || resp.clicked())
        && let Some(p) = resp.interact_pointer_pos()
    {
        st.apply(Input::CenterAt(whole.t(p.x)), extent);
    }
}

fn axis_ui(ui: &Ui, rect: Rect, geom: &Geom, origin: AxisTime) {
    let painter = ui.painter_at(rect);
    let span = geom.view.span();
    let target = span / f64::from((geom.w / 110.0).max(1.0));
    let mut step = 1.0f64;
    while step * 10.0 <= target {
        step *= 10.0;
    }
    if step * 5.0 <= target {
        step *= 5.0;
    } else if step * 2.0 <= target {
        step *= 2.0;
    }
    let first = origin + ((geom.view.t0 - origin) / step).ceil() * step;
    let color = ui.visuals().text_color();
    let mut t = first;
    let mut n = 0;
    while t <= geom.view.t1 && n < 200 {
        let x = geom.x(t);
        painter.vline(
            x,
            rect.bottom() - 6.0..=rect.bottom(),
            Stroke::new(1.0, color),
        );
        painter.text(
            Pos2::new(x + 2.0, rect.center().y - 2.0),
            Align2::LEFT_CENTER,
            fmt_offset(t - origin, step),
            FontId::monospace(11.0),
            color,
        );
        t += step;
        n += 1;
    }
    painter.text(
        Pos2::new(rect.left() + 4.0, rect.center().y),
        Align2::LEFT_CENTER,
        format!("window {}", round_ns(span)),
        FontId::proportional(12.0),
        ui.visuals().weak_text_color(),
    );
}
