//! The timeline: an overview strip, the time axis and one row per track, drawn from the shared
//! state of each open recording, and the navigation input on it.
//!
//! Rows (see [`rows`]): NVTX lanes of each recording, then per GPU each metric (of recording A,
//! then of B right below it, so differences line up), kernels, NVML power, SM clock and NVML
//! utilisation. Metric tracks are drawn from the level-of-detail pyramid, one summary per
//! point column, or from raw samples when single samples are wider than a column.

use crate::app::TraceSlot;
use crate::data::Shared;
use crate::fmt::{fmt_dur, fmt_offset, fmt_value};
use crate::lod::{DevicePyramid, Summary};
use crate::spans::{Piece, Spans, floor_i64, gallop};
use crate::tables::{
    DeviceKernels, KernelView, NVML_MEM_CLOCK, NVML_POWER, NVML_SM_CLOCK, NVML_TEMPERATURE,
    NVML_UTIL, Names, NvtxLane,
};
use crate::view::{Drag, Settings, TimeView, TrackStyle, ViewState};
use cufall_analysis::names::short_kernel_name;
use cufall_trace::model::NvtxRange;
use eframe::egui::{
    self, Align2, Color32, CornerRadius, FontId, Mesh, Pos2, Rect, Sense, Shape, Stroke,
    StrokeKind, Ui, Vec2,
};
use std::sync::MutexGuard;

/// Width of the label column.
pub const LABEL_W: f32 = 210.0;
const OVERVIEW_H: f32 = 34.0;
const AXIS_H: f32 = 22.0;
const LANE_H: f32 = 18.0;
const NVML_H: f32 = 22.0;

/// An NVML value shown as a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlField {
    Power,
    SmClock,
    GpuUtil,
}

impl NvmlField {
    pub const ALL: [NvmlField; 3] = [NvmlField::Power, NvmlField::SmClock, NvmlField::GpuUtil];

    pub fn title(self) -> &'static str {
        match self {
            NvmlField::Power => "power (W)",
            NvmlField::SmClock => "SM clock (MHz)",
            NvmlField::GpuUtil => "NVML util % (nvidia-smi)",
        }
    }

    /// Its column in [`crate::tables::DeviceNvml::series`].
    pub fn column(self) -> usize {
        match self {
            NvmlField::Power => NVML_POWER,
            NvmlField::SmClock => NVML_SM_CLOCK,
            NvmlField::GpuUtil => NVML_UTIL,
        }
    }
}

/// One row of the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Row {
    Nvtx {
        ti: usize,
        lane: usize,
    },
    Metric {
        ti: usize,
        dev: u32,
        m: usize,
    },
    Kernels {
        ti: usize,
        dev: u32,
    },
    Nvml {
        ti: usize,
        dev: u32,
        field: NvmlField,
    },
    /// A title line above each GPU's rows.
    Device {
        dev: u32,
    },
}

impl Row {
    fn height(&self, settings: &Settings) -> f32 {
        match self {
            Row::Nvtx { .. } => LANE_H,
            Row::Metric { .. } => match settings.style {
                TrackStyle::Heat => settings.track_height,
                TrackStyle::Line => settings.track_height * 1.6,
            },
            Row::Kernels { .. } => LANE_H,
            Row::Nvml { .. } => NVML_H,
            Row::Device { .. } => 18.0,
        }
    }
}

/// A recording with its shared state locked for this frame.
pub struct Locked<'a> {
    pub slot: &'a TraceSlot,
    pub s: MutexGuard<'a, Shared>,
}

/// The rows to draw, in order.
pub fn rows(traces: &[Locked<'_>], settings: &Settings) -> Vec<Row> {
    let mut out = Vec::new();
    if settings.show_nvtx {
        for (ti, t) in traces.iter().enumerate() {
            if let Some(tables) = &t.s.tables {
                for lane in 0..tables.lanes.lanes.len() {
                    out.push(Row::Nvtx { ti, lane });
                }
            }
        }
    }
    let mut devices: Vec<u32> = traces
        .iter()
        .flat_map(|t| t.slot.data.devices.iter().copied())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        out.push(Row::Device { dev });
        let metrics = traces
            .iter()
            .map(|t| t.slot.data.metrics.len())
            .max()
            .unwrap_or(0);
        for m in 0..metrics {
            for (ti, t) in traces.iter().enumerate() {
                if m < t.slot.data.metrics.len() && t.slot.data.devices.contains(&dev) {
                    out.push(Row::Metric { ti, dev, m });
                }
            }
        }
        if settings.show_kernels {
            for (ti, t) in traces.iter().enumerate() {
                let has =
                    t.s.tables
                        .as_ref()
                        .is_some_and(|tb| tb.kernels.contains_key(&dev));
                if has {
                    out.push(Row::Kernels { ti, dev });
                }
            }
        }
        if settings.show_nvml {
            for field in NvmlField::ALL {
                for (ti, t) in traces.iter().enumerate() {
                    let has =
                        t.s.tables.as_ref().is_some_and(|tb| {
                            tb.nvml.get(&dev).is_some_and(|n| n.has(field.column()))
                        });
                    if has {
                        out.push(Row::Nvml { ti, dev, field });
                    }
                }
            }
        }
    }
    out
}

/// The Turbo colour map (Google's polynomial fit) at `t` in `[0, 1]`.
pub fn turbo(t: f32) -> Color32 {
    let t = t.clamp(0.0, 1.0);
    let r = 0.135_721_4
        + t * (4.615_392_6
            + t * (-42.660_324 + t * (132.131_09 + t * (-152.942_4 + t * 59.286_38))));
    let g = 0.091_402_6
        + t * (2.194_188_4
            + t * (4.842_966_6 + t * (-14.185_034 + t * (4.277_298_6 + t * 2.829_566))));
    let b = 0.106_673_3
        + t * (12.641_946 + t * (-60.582_05 + t * (110.362_77 + t * (-89.903_11 + t * 27.348_25))));
    let c = |v: f32| (v.clamp(0.0, 1.0) * 255.0) as u8;
    Color32::from_rgb(c(r), c(g), c(b))
}

/// A stable colour for a name.
pub fn name_color(name: &str) -> Color32 {
    let mut h: u32 = 2_166_136_261;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(16_777_619);
    }
    let hue = (h % 360) as f32 / 360.0;
    egui::ecolor::Hsva::new(hue, 0.45, 0.78, 1.0).into()
}

/// The value at the top of a metric's scale: the recording's heatmap full scale, 100 for
/// percentages, else the largest value in the trace.
pub fn full_scale(t: &Locked<'_>, m: usize) -> f64 {
    let Some(info) = t.slot.data.metrics.get(m) else {
        return 1.0;
    };
    if let Some(f) = t
        .slot
        .data
        .manifest
        .heatmaps
        .iter()
        .find(|h| h.metric == info.name && h.denominator.is_none())
        .and_then(|h| h.full_scale)
    {
        return f;
    }
    if info.unit == "%" || info.name.contains("pct") {
        return 100.0;
    }
    let peak =
        t.s.pyramids
            .values()
            .filter_map(|p| {
                // The coarsest level with blocks (levels above are reserved while loading).
                let top = p.levels.iter().rev().find(|l| !l.is_empty())?;
                top.stats
                    .get(m)
                    .map(|c| c.iter().map(|s| s.max).fold(f32::NEG_INFINITY, f32::max))
            })
            .fold(f32::NEG_INFINITY, f32::max);
    if peak.is_finite() && peak > 0.0 {
        f64::from(peak)
    } else {
        1.0
    }
}

/// Geometry of the data area for converting between time and x.
#[derive(Clone, Copy, Debug)]
pub struct Geom {
    pub x0: f32,
    pub w: f32,
    pub view: TimeView,
}

impl Geom {
    pub fn x(&self, t: f64) -> f32 {
        self.x0 + ((t - self.view.t0) / self.view.span() * f64::from(self.w)) as f32
    }
    pub fn t(&self, x: f32) -> f64 {
        self.view.at(f64::from((x - self.x0) / self.w.max(1.0)))
    }
    pub fn frac(&self, x: f32) -> f64 {
        f64::from((x - self.x0) / self.w.max(1.0))
    }
    pub fn px_ns(&self) -> f64 {
        self.view.span() / f64::from(self.w.max(1.0))
    }
}

/// The whole extent of all recordings on the shared axis.
pub fn shared_extent(traces: &[Locked<'_>]) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for t in traces {
        lo = lo.min(t.slot.disp(t.s.extent.start_ns));
        hi = hi.max(t.slot.disp(t.s.extent.end_ns));
    }
    if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (0.0, 1e9)
    }
}

/// Something under the pointer, for hover text, clicks and double-clicks.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub text: String,
    /// Its extent on the shared axis, if it has one (a range, a kernel, a gap).
    pub span: Option<(f64, f64)>,
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
                if let Row::Metric { ti, m, .. } = row
                    && let Some(info) = traces[*ti].slot.data.metrics.get(*m)
                {
                    let id =
                        egui::Id::unique(("cufall-metric-label", *ti, *m, row_rect.top() as i32));
                    let unit = if info.unit.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", info.unit)
                    };
                    ui.interact(label_rect, id, Sense::hover())
                        .on_hover_text(format!("{}{unit}\n{}", info.name, info.description));
                }
                let h = draw_row(
                    ui, &painter, *row, label_rect, area, traces, &geom, settings, hovered,
                );
                if h.is_some() {
                    hit = h;
                }
            }
            // Selection and box-zoom overlays over every row.
            if let Some((a, b)) = st.selection() {
                let r = Rect::from_x_y_ranges(geom.x(a)..=geom.x(b), data_rect.y_range());
                painter.rect_filled(r, 0.0, Color32::from_rgba_unmultiplied(120, 170, 255, 40));
                painter.vline(
                    r.left(),
                    data_rect.y_range(),
                    Stroke::new(1.0, Color32::LIGHT_BLUE),
                );
                painter.vline(
                    r.right(),
                    data_rect.y_range(),
                    Stroke::new(1.0, Color32::LIGHT_BLUE),
                );
            }
            if let (Some(Drag::BoxZoom { from }), Some(p)) = (st.drag, pointer) {
                let r = Rect::from_x_y_ranges(geom.x(from)..=p.x, data_rect.y_range());
                painter.rect_stroke(
                    r,
                    0.0,
                    Stroke::new(1.5, Color32::YELLOW),
                    StrokeKind::Inside,
                );
            }
            if let Some(p) = pointer {
                painter.vline(
                    p.x,
                    data_rect.y_range(),
                    Stroke::new(1.0, Color32::from_gray(160)),
                );
            }
            navigation(ui, &resp, &geom, st, extent, hit.as_ref());
            if let Some(h) = &hit
                && st.drag.is_none()
            {
                resp.on_hover_text_at_pointer(h.text.clone());
            }
        });
    st.last_data_rect = Some(data_rect.intersect(ui.clip_rect()));
    keyboard(ui, st, &geom, extent);
    st.view.keep_near(extent.0, extent.1);
}

/// Pointer input on the rows: Ctrl+wheel zoom at the cursor, horizontal wheel pan, drag pan,
/// Shift+drag select, right drag or Ctrl+drag box zoom, click selects and double-click fits
/// what is under the pointer.
fn navigation(
    ui: &Ui,
    resp: &egui::Response,
    geom: &Geom,
    st: &mut ViewState,
    extent: (f64, f64),
    hit: Option<&Hit>,
) {
    let max_span = (extent.1 - extent.0) * 2.0;
    let (zoom, scroll, mods) = ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta(), i.modifiers));
    if let Some(p) = resp.hover_pos() {
        if zoom != 1.0 {
            st.view.zoom_at(geom.frac(p.x), f64::from(zoom), max_span);
        }
        if scroll.x != 0.0 {
            st.view.pan(-f64::from(scroll.x / geom.w));
        }
    }
    // The drag starts where the button went down, not where egui recognised the drag.
    if resp.drag_started()
        && let Some(p) = ui
            .input(|i| i.pointer.press_origin())
            .or(resp.interact_pointer_pos())
    {
        let t = geom.t(p.x);
        st.drag = Some(
            if resp.dragged_by(egui::PointerButton::Secondary) || mods.command {
                Drag::BoxZoom { from: t }
            } else if mods.shift {
                Drag::Select { from: t }
            } else {
                Drag::Pan {
                    view: st.view,
                    x: p.x,
                }
            },
        );
    }
    if let Some(p) = resp.interact_pointer_pos() {
        match st.drag {
            Some(Drag::Pan { view, x }) if resp.dragged() => {
                let mut v = view;
                v.pan(-f64::from((p.x - x) / geom.w));
                st.view = v;
            }
            Some(Drag::Select { from }) if resp.dragged() => {
                st.selection = Some((from, geom.t(p.x)));
            }
            _ => {}
        }
    }
    if resp.drag_stopped() {
        if let (Some(Drag::BoxZoom { from }), Some(p)) = (st.drag, resp.interact_pointer_pos()) {
            let to = geom.t(p.x);
            if (geom.x(to) - geom.x(from)).abs() > 3.0 {
                st.view.fit(from, to, 0.0);
            }
        }
        st.drag = None;
    }
    if resp.double_clicked() {
        if let Some((a, b)) = hit.and_then(|h| h.span) {
            st.view.fit(a, b, 0.05);
        }
    } else if resp.clicked()
        && let Some((a, b)) = hit.and_then(|h| h.span)
    {
        st.selection = Some((a, b));
    }
}

/// W/S zoom, A/D pan, F fit the selection, Esc clear it, `?` help. Ignored while a text field
/// has the keyboard.
fn keyboard(ui: &Ui, st: &mut ViewState, geom: &Geom, extent: (f64, f64)) {
    if ui.ctx().egui_wants_keyboard_input() {
        return;
    }
    let max_span = (extent.1 - extent.0) * 2.0;
    let pointer = ui.input(|i| i.pointer.hover_pos());
    let anchor = pointer
        .map(|p| geom.frac(p.x))
        .filter(|f| (0.0..=1.0).contains(f))
        .unwrap_or(0.5);
    ui.input(|i| {
        if i.key_pressed(egui::Key::W) {
            st.view.zoom_at(anchor, 1.5, max_span);
        }
        if i.key_pressed(egui::Key::S) {
            st.view.zoom_at(anchor, 1.0 / 1.5, max_span);
        }
        if i.key_pressed(egui::Key::A) {
            st.view.pan(-0.15);
        }
        if i.key_pressed(egui::Key::D) {
            st.view.pan(0.15);
        }
        if i.key_pressed(egui::Key::F) {
            if let Some((a, b)) = st.selection() {
                st.view.fit(a, b, 0.02);
            } else {
                st.view.fit(extent.0, extent.1, 0.01);
            }
        }
        if i.key_pressed(egui::Key::Escape) {
            st.selection = None;
            st.drag = None;
            st.show_help = false;
        }
        let question = i.key_pressed(egui::Key::Questionmark)
            || i.events
                .iter()
                .any(|e| matches!(e, egui::Event::Text(t) if t == "?"));
        if question {
            st.show_help = !st.show_help;
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn overview_ui(
    ui: &Ui,
    rect: Rect,
    traces: &[Locked<'_>],
    st: &mut ViewState,
    extent: (f64, f64),
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
        let t = whole.t(p.x);
        let span = st.view.span();
        st.view.t0 = t - span / 2.0;
        st.view.t1 = t + span / 2.0;
    }
}

fn axis_ui(ui: &Ui, rect: Rect, geom: &Geom, origin: f64) {
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
    let first = ((geom.view.t0 - origin) / step).ceil() * step + origin;
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
        format!("window {}", fmt_dur(span)),
        FontId::proportional(12.0),
        ui.visuals().weak_text_color(),
    );
}

/// Colours one point column per summary; neighbours of the same colour are one quad (the same
/// pixels, fewer vertices to copy each frame).
fn heat_mesh(painter: &egui::Painter, area: Rect, cols: &[Summary], scale: f64) {
    let mut mesh = Mesh::default();
    let w = area.width() / cols.len().max(1) as f32;
    let x = |c: usize| area.left() + c as f32 * w;
    let mut open: Option<(usize, Color32)> = None;
    let close = |mesh: &mut Mesh, run: Option<(usize, Color32)>, end: usize| {
        if let Some((c0, color)) = run {
            let r = Rect::from_min_max(
                Pos2::new(x(c0), area.top()),
                Pos2::new(x(end), area.bottom()),
            );
            mesh.add_colored_rect(r, color);
        }
    };
    for (c, s) in cols.iter().enumerate() {
        let color = s
            .mean()
            .or((!s.is_empty()).then_some(f64::from(s.max)))
            .map(|mean| turbo((mean / scale) as f32));
        if open.map(|o| o.1) != color {
            close(&mut mesh, open.take(), c);
            open = color.map(|k| (c, k));
        }
    }
    close(&mut mesh, open, cols.len());
    painter.add(Shape::mesh(mesh));
}

/// The min–max band of each column and the mean as a step line (as counters are drawn: a
/// column's mean holds across it), a mesh each, the band under the line. Neighbouring columns
/// of the same band or the same mean are one quad.
fn line_mesh(painter: &egui::Painter, area: Rect, cols: &[Summary], scale: f64, color: Color32) {
    const LINE_W: f32 = 1.2;
    let mut mesh = Mesh::default();
    let w = area.width() / cols.len().max(1) as f32;
    let x = |c: usize| area.left() + c as f32 * w;
    let y = |v: f64| area.bottom() - ((v / scale).clamp(0.0, 1.05) as f32) * (area.height() - 2.0);
    let band = color.gamma_multiply(0.35);
    // Open runs: (first column, top, bottom) of the band and (first column, y) of the line.
    let mut band_run: Option<(usize, f32, f32)> = None;
    let mut line_run: Option<(usize, f32)> = None;
    let close_band = |mesh: &mut Mesh, run: Option<(usize, f32, f32)>, end: usize| {
        if let Some((c0, top, bottom)) = run {
            let r = Rect::from_min_max(Pos2::new(x(c0), top), Pos2::new(x(end), bottom));
            mesh.add_colored_rect(r, band);
        }
    };
    let close_line = |mesh: &mut Mesh, run: Option<(usize, f32)>, end: usize| {
        if let Some((c0, ym)) = run {
            let r = Rect::from_min_max(
                Pos2::new(x(c0), ym - LINE_W / 2.0),
                Pos2::new(x(end), ym + LINE_W / 2.0),
            );
            mesh.add_colored_rect(r, color);
        }
    };
    let mut bands = Mesh::default();
    for (c, s) in cols.iter().enumerate() {
        let b = (!s.is_empty()).then(|| (y(f64::from(s.max)) - 0.5, y(f64::from(s.min)) + 0.5));
        if band_run.map(|r| (r.1, r.2)) != b {
            close_band(&mut bands, band_run.take(), c);
            band_run = b.map(|(top, bottom)| (c, top, bottom));
        }
        let m = s.mean().map(y);
        match (line_run, m) {
            (Some((_, prev)), Some(ym)) if prev == ym => {}
            // Samples of no duration have no mean: the line goes on across them.
            (Some(_), None) if !s.is_empty() => {}
            (prev, m) => {
                close_line(&mut mesh, prev, c);
                line_run = m.map(|ym| (c, ym));
                // The step between two means, where the line goes on.
                if let (Some((_, a)), Some(b)) = (prev, m) {
                    let r = Rect::from_min_max(
                        Pos2::new(x(c) - LINE_W / 2.0, a.min(b) - LINE_W / 2.0),
                        Pos2::new(x(c) + LINE_W / 2.0, a.max(b) + LINE_W / 2.0),
                    );
                    mesh.add_colored_rect(r, color);
                }
            }
        }
    }
    close_band(&mut bands, band_run, cols.len());
    close_line(&mut mesh, line_run, cols.len());
    // The band under the line.
    painter.add(Shape::mesh(bands));
    painter.add(Shape::mesh(mesh));
}

/// Hatches `r` with diagonal lines: used for missing data (drops), loading placeholders and
/// runs of kernels too narrow to draw one by one. The lines are one mesh of thin quads cut at
/// `r`'s sides (one shape, not a stroked segment per line).
fn hatch(painter: &egui::Painter, r: Rect, color: Color32) {
    const STEP: f32 = 6.0;
    // Half the horizontal width of a 1-point line at 45°.
    const HALF: f32 = 0.7;
    let h = r.height();
    if h <= 0.0 || r.width() <= 0.0 {
        return;
    }
    let mut mesh = Mesh::default();
    // Line k runs from (x, bottom) to (x + h, top): the point u along it is (x + u, bottom - u).
    // Its part inside `r` is cut at the sides (so a rectangle a pixel wide still shows dashes).
    let side = |v: f32| v.clamp(r.left(), r.right());
    let mut x = r.left() - h;
    while x < r.right() {
        let u0 = (r.left() - x).max(0.0);
        let u1 = (r.right() - x).min(h);
        if u0 < u1 {
            let base = mesh.vertices.len() as u32;
            for (px, py) in [
                (side(x + u0 - HALF), r.bottom() - u0),
                (side(x + u0 + HALF), r.bottom() - u0),
                (side(x + u1 + HALF), r.bottom() - u1),
                (side(x + u1 - HALF), r.bottom() - u1),
            ] {
                mesh.colored_vertex(Pos2::new(px, py), color);
            }
            mesh.add_triangle(base, base + 1, base + 2);
            mesh.add_triangle(base, base + 2, base + 3);
        }
        x += STEP;
    }
    painter.add(Shape::mesh(mesh));
}

#[allow(clippy::too_many_arguments)]
fn draw_row(
    ui: &Ui,
    painter: &egui::Painter,
    row: Row,
    label: Rect,
    area: Rect,
    traces: &[Locked<'_>],
    geom: &Geom,
    settings: &Settings,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let weak = ui.visuals().weak_text_color();
    let text = ui.visuals().text_color();
    let tag = |ti: usize| {
        if traces.len() > 1 {
            if ti == 0 { "A " } else { "B " }
        } else {
            ""
        }
    };
    let put_label = |s: &str, color: Color32| {
        let p = painter.with_clip_rect(label);
        p.text(
            Pos2::new(label.left() + 6.0, label.center().y),
            Align2::LEFT_CENTER,
            s,
            FontId::proportional(12.0),
            color,
        );
    };
    match row {
        Row::Device { dev } => {
            let name = traces
                .iter()
                .flat_map(|t| t.slot.data.manifest.devices.iter())
                .find(|d| d.id.0 == dev)
                .map(|d| d.name.clone())
                .unwrap_or_default();
            painter.hline(
                label.left()..=area.right(),
                label.top(),
                Stroke::new(1.0, ui.visuals().widgets.noninteractive.bg_stroke.color),
            );
            put_label(&format!("GPU {dev}  {name}"), text);
            None
        }
        Row::Nvtx { ti, lane } => {
            let t = &traces[ti];
            let tables = t.s.tables.as_ref()?;
            let l = tables.lanes.lanes.get(lane)?;
            put_label(&format!("{}{}", tag(ti), l.title), weak);
            nvtx_lane(
                painter,
                t,
                l,
                &tables.nvtx,
                area,
                geom,
                pointer,
                shared_origin(traces),
            )
        }
        Row::Metric { ti, dev, m } => {
            let t = &traces[ti];
            let info = &t.slot.data.metrics[m];
            put_label(&format!("{}{}", tag(ti), short_metric(&info.name)), text);
            metric_track(ui, painter, t, dev, m, area, geom, settings, pointer)
        }
        Row::Kernels { ti, dev } => {
            let t = &traces[ti];
            put_label(&format!("{}kernels", tag(ti)), weak);
            let tables = t.s.tables.as_ref()?;
            let k = tables.kernels.get(&dev)?;
            kernel_lane(painter, t, k, &tables.names, area, geom, pointer)
        }
        Row::Nvml { ti, dev, field } => {
            let t = &traces[ti];
            put_label(&format!("{}{}", tag(ti), field.title()), weak);
            let tables = t.s.tables.as_ref()?;
            let n = tables.nvml.get(&dev)?;
            let ncols = area.width().max(1.0) as usize;
            let t0 = t.slot.local(geom.view.t0);
            let cols = match n.series.fine.as_deref() {
                Some(p) => p.columns(field.column(), t0, geom.px_ns(), ncols, Some(&[&n.series])),
                None => vec![Summary::EMPTY; ncols],
            };
            let scale = match field {
                NvmlField::GpuUtil => 100.0,
                NvmlField::Power => n.peak_power_w.max(1.0),
                NvmlField::SmClock => n.peak_sm_clock_mhz.max(1.0),
            };
            painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
            line_mesh(painter, area, &cols, scale, Color32::from_rgb(240, 190, 90));
            let p = pointer?;
            let i = n.at(t.slot.local(geom.t(p.x)))?;
            let v = |m: usize| opt(n.value(m, i));
            Some(Hit {
                text: format!(
                    "NVML at {}: power {} W, SM {} MHz, mem {} MHz, util {} % (nvidia-smi), {} °C",
                    fmt_offset(
                        t.slot.disp(n.series.start_ns[i]) - shared_origin(traces),
                        1.0
                    ),
                    v(NVML_POWER),
                    v(NVML_SM_CLOCK),
                    v(NVML_MEM_CLOCK),
                    v(NVML_UTIL),
                    v(NVML_TEMPERATURE),
                ),
                span: None,
            })
        }
    }
}

/// Spans narrower than this many pixels are drawn as part of a run.
const MIN_SPAN_PX: f64 = 2.0;

/// One NVTX lane: ranges wide enough drawn and labelled, runs of narrower ones as one box.
#[allow(clippy::too_many_arguments)]
fn nvtx_lane(
    painter: &egui::Painter,
    t: &Locked<'_>,
    l: &NvtxLane,
    nvtx: &[NvtxRange],
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
    origin: f64,
) -> Option<Hit> {
    let mut hit = None;
    for piece in lane_pieces(&l.spans, t, area, geom) {
        let Piece::Span(j) = piece else {
            if let Some(h) = run_hit(painter, area, geom, piece, pointer, "NVTX ranges") {
                hit = Some(h);
            }
            continue;
        };
        let r = &nvtx[l.ranges[j] as usize];
        let (x0, x1) = span_box(
            painter,
            t,
            area,
            geom,
            (r.start_ns, r.end_ns),
            (&r.name, &r.name),
            &NVTX_BOX,
        );
        if pointer.is_some_and(|p| p.x >= x0 - 1.0 && p.x <= x1 + 1.0) {
            hit = Some(Hit {
                text: format!(
                    "{}\n{} ({})\nstarts at {}\ndepth {}, pid {} tid {}{}",
                    r.name,
                    fmt_dur((r.end_ns - r.start_ns) as f64),
                    r.kind.as_str(),
                    fmt_offset(t.slot.disp(r.start_ns) - origin, 1.0),
                    r.depth,
                    r.pid,
                    r.tid,
                    if r.domain.is_empty() {
                        String::new()
                    } else {
                        format!(", domain {}", r.domain)
                    }
                ),
                span: Some((t.slot.disp(r.start_ns), t.slot.disp(r.end_ns))),
            });
        }
    }
    hit
}

/// One metric track: the summaries per pixel column as a heat strip or a line, the loading
/// frontier, drops and idle gaps over them.
#[allow(clippy::too_many_arguments)]
fn metric_track(
    ui: &Ui,
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: u32,
    m: usize,
    area: Rect,
    geom: &Geom,
    settings: &Settings,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let info = &t.slot.data.metrics[m];
    let weak = ui.visuals().weak_text_color();
    painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
    let scale = full_scale(t, m);
    let t0 = t.slot.local(geom.view.t0);
    let px = geom.px_ns();
    let ncols = area.width().max(1.0) as usize;
    let mut hit = None;
    if let Some(p) = t.s.pyramids.get(&dev) {
        let need_raw = p.level_for(px).is_none();
        let raw = if need_raw {
            t.s.tiles.series(dev, t0, t.slot.local(geom.view.t1))
        } else {
            None
        };
        let cols = p.columns(m, t0, px, ncols, raw.as_deref());
        match settings.style {
            TrackStyle::Heat => heat_mesh(painter, area, &cols, scale),
            TrackStyle::Line => line_mesh(
                painter,
                area,
                &cols,
                scale,
                Color32::from_rgb(110, 200, 255),
            ),
        }
        if let Some(ptr) = pointer {
            hit = Some(metric_hit(
                t,
                p,
                dev,
                m,
                ptr,
                area,
                geom,
                &cols,
                raw.as_deref(),
                info,
            ));
        }
    }
    // Not loaded yet: a placeholder past the frontier.
    if !t.s.samples_done {
        let x = geom.x(t.slot.disp(t.s.loaded_until_ns)).max(area.left());
        if x < area.right() {
            let r = Rect::from_x_y_ranges(x..=area.right(), area.y_range());
            hatch(painter, r, Color32::from_gray(90));
            painter.text(
                r.left_center() + Vec2::new(4.0, 0.0),
                Align2::LEFT_CENTER,
                "loading…",
                FontId::proportional(11.0),
                weak,
            );
        }
    }
    if let Some(h) = drops_overlay(painter, t, dev, area, geom, pointer) {
        hit = Some(h);
    }
    if settings.show_gaps
        && let Some(h) = gaps_overlay(painter, t, dev, area, geom, pointer, m == 0)
    {
        hit = Some(h);
    }
    hit
}

/// One device's kernel lane: kernels wide enough drawn and labelled, runs of narrower ones as
/// one hatched box.
fn kernel_lane(
    painter: &egui::Painter,
    t: &Locked<'_>,
    k: &DeviceKernels,
    names: &Names,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let mut hit = None;
    for piece in lane_pieces(&k.spans, t, area, geom) {
        let Piece::Span(j) = piece else {
            if let Some(h) = run_hit(painter, area, geom, piece, pointer, "kernels") {
                hit = Some(h);
            }
            continue;
        };
        let r = k.get(j, names);
        // Labelled with the short name; coloured by the full one, so that two instantiations of
        // one template still differ.
        let (x0, x1) = span_box(
            painter,
            t,
            area,
            geom,
            (r.start_ns, r.end_ns),
            (r.name, &short_kernel_name(r.name)),
            &KERNEL_BOX,
        );
        if pointer.is_some_and(|p| p.x >= x0 && p.x <= x1) {
            hit = Some(Hit {
                text: kernel_text(&r),
                span: Some((t.slot.disp(r.start_ns), t.slot.disp(r.end_ns))),
            });
        }
    }
    hit
}

/// How a lane draws a span wide enough to see on its own.
struct BoxStyle {
    radius: u8,
    /// Labelled from this width (points).
    label_from: f32,
    font: f32,
}

const NVTX_BOX: BoxStyle = BoxStyle {
    radius: 2,
    label_from: 30.0,
    font: 11.0,
};
const KERNEL_BOX: BoxStyle = BoxStyle {
    radius: 1,
    label_from: 40.0,
    font: 10.0,
};

/// Draws the span `(start_ns, end_ns)` of a lane as a box coloured by its name, labelled where
/// wide enough (`(name, label)`); returns its x range (unclipped, for the pointer's hit test).
fn span_box(
    painter: &egui::Painter,
    t: &Locked<'_>,
    area: Rect,
    geom: &Geom,
    (start_ns, end_ns): (i64, i64),
    (name, label): (&str, &str),
    style: &BoxStyle,
) -> (f32, f32) {
    let x0 = geom.x(t.slot.disp(start_ns));
    let x1 = geom.x(t.slot.disp(end_ns));
    let rr = Rect::from_x_y_ranges(
        x0.max(area.left() - 2.0)..=x1.min(area.right() + 2.0),
        area.y_range(),
    )
    .shrink2(Vec2::new(0.0, 1.0));
    painter.rect_filled(rr, CornerRadius::same(style.radius), name_color(name));
    if rr.width() > style.label_from {
        painter.with_clip_rect(rr).text(
            Pos2::new(rr.left() + 3.0, rr.center().y),
            Align2::LEFT_CENTER,
            label,
            FontId::proportional(style.font),
            Color32::BLACK,
        );
    }
    (x0, x1)
}

/// The pieces of one lane in `area` (columns of one pixel from its left edge).
fn lane_pieces(spans: &Spans, t: &Locked<'_>, area: Rect, geom: &Geom) -> Vec<Piece> {
    let ncols = area.width().max(1.0) as usize;
    let px = geom.px_ns();
    let t0 = t.slot.local(geom.view.t0) as f64 + f64::from(area.left() - geom.x0) * px;
    spans.pieces(t0, px, ncols, MIN_SPAN_PX)
}

/// Draws a run of spans too short to draw one by one (grey for one, hatched for several), and
/// returns its tooltip if the pointer is on it.
fn run_hit(
    painter: &egui::Painter,
    area: Rect,
    geom: &Geom,
    piece: Piece,
    pointer: Option<Pos2>,
    what: &str,
) -> Option<Hit> {
    let Piece::Run {
        cols,
        spans,
        narrow,
        busy_ns,
    } = piece
    else {
        return None;
    };
    let x0 = area.left() + cols.0 as f32;
    let x1 = (area.left() + cols.1 as f32).max(x0 + 1.0);
    let rr = Rect::from_x_y_ranges(x0..=x1, area.y_range()).shrink2(Vec2::new(0.0, 1.0));
    let count = spans.1 - spans.0;
    if count <= 1 {
        painter.rect_filled(rr, 0.0, Color32::from_gray(200));
    } else {
        painter.rect_filled(rr, 0.0, Color32::from_gray(70));
        hatch(painter, rr, Color32::from_gray(210));
    }
    let p = pointer?;
    (p.x >= x0 - 1.0 && p.x <= x1 + 1.0 && narrow > 0).then(|| Hit {
        text: format!(
            "{count} {what}, {narrow} too short to draw one by one\nbusy {} over {}\n(zoom in to \
             see each)",
            fmt_dur(busy_ns as f64),
            fmt_dur(geom.t(x1) - geom.t(x0))
        ),
        span: Some((geom.t(x0), geom.t(x1))),
    })
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.0}"))
}

fn shared_origin(traces: &[Locked<'_>]) -> f64 {
    shared_extent(traces).0
}

/// A kernel's tooltip: its short name, the full one below it when it differs, then its figures.
fn kernel_text(r: &KernelView<'_>) -> String {
    let short = short_kernel_name(r.name);
    let full = if short == r.name {
        String::new()
    } else {
        format!("\n{}", r.name)
    };
    let mut s = format!(
        "{short}{full}\n{} {} on stream {}",
        r.shape.kind.as_str(),
        fmt_dur((r.end_ns - r.start_ns) as f64),
        r.shape.stream
    );
    if let (Some(g), Some(b)) = (r.shape.grid, r.shape.block) {
        s.push_str(&format!(
            "\ngrid {}×{}×{}, block {}×{}×{}",
            g[0], g[1], g[2], b[0], b[1], b[2]
        ));
    }
    if let Some(bytes) = r.bytes {
        s.push_str(&format!("\n{bytes} bytes"));
    }
    s
}

#[allow(clippy::too_many_arguments)]
fn metric_hit(
    t: &Locked<'_>,
    p: &DevicePyramid,
    dev: u32,
    m: usize,
    ptr: Pos2,
    area: Rect,
    geom: &Geom,
    cols: &[Summary],
    raw: Option<&[&crate::lod::RawSeries]>,
    info: &cufall_trace::model::MetricInfo,
) -> Hit {
    let tp = t.slot.local(geom.t(ptr.x));
    let mut text = format!("GPU {dev} {}", info.name);
    if let Some(raw) = raw {
        let sample = raw.iter().find_map(|r| {
            let i = r.overlapping(tp, tp + 1);
            (!i.is_empty()).then(|| (r.start_ns[i.start], r.end_ns[i.start], r.values[m][i.start]))
        });
        match sample {
            Some((s, e, v)) => {
                text.push_str(&format!(
                    "\nsample {} {}\nfrom {} to {} ({})",
                    fmt_value(f64::from(v)),
                    info.unit,
                    fmt_offset(t.slot.disp(s) - geom_origin(t), 1.0),
                    fmt_offset(t.slot.disp(e) - geom_origin(t), 1.0),
                    fmt_dur((e - s) as f64)
                ));
                return Hit {
                    text,
                    span: Some((t.slot.disp(s), t.slot.disp(e))),
                };
            }
            None => text.push_str("\nno sample here"),
        }
        return Hit { text, span: None };
    }
    let c = ((ptr.x - area.left()).max(0.0) as usize).min(cols.len().saturating_sub(1));
    match cols.get(c) {
        Some(s) if !s.is_empty() => text.push_str(&format!(
            "\nmean {} (min {}, max {}) {}\nover {} at this zoom ({} summarised)",
            s.mean().map_or("–".into(), fmt_value),
            fmt_value(f64::from(s.min)),
            fmt_value(f64::from(s.max)),
            info.unit,
            fmt_dur(geom.px_ns()),
            if p.level_for(geom.px_ns()).is_some() {
                "blocks"
            } else {
                "blocks wider than a pixel; raw samples loading"
            },
        )),
        _ => text.push_str("\nno samples here"),
    }
    Hit { text, span: None }
}

fn geom_origin(t: &Locked<'_>) -> f64 {
    t.slot.disp(t.s.extent.start_ns)
}

fn drops_overlay(
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: u32,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let drops = t.s.tables.as_ref()?.drops.get(&dev)?;
    let mut hit = None;
    // Drops of a device are sorted by start and do not overlap: skip those before the window.
    let t0 = t.slot.local(geom.view.t0);
    let t1 = t.slot.local(geom.view.t1);
    let lo = drops.partition_point(|d| d.end_ns < t0);
    let hi = drops.partition_point(|d| d.start_ns <= t1).max(lo);
    for d in &drops[lo..hi] {
        let x0 = geom.x(t.slot.disp(d.start_ns));
        let x1 = geom.x(t.slot.disp(d.end_ns)).max(x0 + 1.0);
        if x1 < area.left() || x0 > area.right() {
            continue;
        }
        let r = Rect::from_x_y_ranges(x0.max(area.left())..=x1.min(area.right()), area.y_range());
        painter.rect_filled(r, 0.0, Color32::from_gray(40));
        hatch(painter, r, Color32::from_rgb(200, 80, 80));
        if r.width() > 70.0 {
            painter.text(
                r.center(),
                Align2::CENTER_CENTER,
                format!("no data: {}", d.reason.as_str()),
                FontId::proportional(10.0),
                Color32::WHITE,
            );
        }
        if pointer.is_some_and(|p| p.x >= x0 - 1.0 && p.x <= x1 + 1.0) {
            hit = Some(Hit {
                text: format!(
                    "no samples for {} ({}){}",
                    fmt_dur((d.end_ns - d.start_ns) as f64),
                    d.reason.as_str(),
                    d.lost_samples
                        .map_or(String::new(), |n| format!(", about {n} samples lost"))
                ),
                span: Some((t.slot.disp(d.start_ns), t.slot.disp(d.end_ns))),
            });
        }
    }
    hit
}

fn gaps_overlay(
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: u32,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
    label: bool,
) -> Option<Hit> {
    let Some(Ok(_)) = &t.s.report else {
        return None;
    };
    let g = t.s.gaps_by_device.get(&dev)?;
    let t0 = t.slot.local(geom.view.t0);
    let t1 = t.slot.local(geom.view.t1);
    let lo = g.end_ns.partition_point(|e| *e < t0);
    let hi = g.start_ns.partition_point(|s| *s <= t1).max(lo);
    let x_start = |k: usize| geom.x(t.slot.disp(g.start_ns[k]));
    let x_end = |k: usize| geom.x(t.slot.disp(g.end_ns[k])).max(x_start(k) + 1.0);
    // Gaps closer than a pixel are drawn as one box (labelled with their count when zoomed
    // out), so a frame draws at most one box per pixel column. The boxes are one mesh, placed
    // under the labels.
    let boxes_at = painter.add(Shape::Noop);
    let mut boxes = Mesh::default();
    let mut draw = |run: (f32, f32, usize, i64)| {
        // A gap found by rounded times may end a fraction of a pixel before the area.
        if run.1 < area.left() || run.0 > area.right() {
            return;
        }
        let r = Rect::from_x_y_ranges(
            run.0.max(area.left())..=run.1.min(area.right()),
            area.y_range(),
        );
        boxes.add_colored_rect(r, Color32::from_rgba_unmultiplied(255, 140, 0, 22));
        let bar = Rect::from_min_max(r.min, Pos2::new(r.right(), r.top() + 3.0));
        boxes.add_colored_rect(bar, Color32::from_rgb(255, 150, 30));
        if label && r.width() > 50.0 {
            let text = if run.2 == 1 {
                fmt_dur(run.3 as f64)
            } else {
                format!("{} gaps, {}", run.2, fmt_dur(run.3 as f64))
            };
            let galley = painter.layout_no_wrap(text, FontId::proportional(10.0), Color32::WHITE);
            if galley.size().x < r.width() {
                let at = Pos2::new(r.center().x - galley.size().x / 2.0, r.top() + 4.0);
                let bg = Rect::from_min_size(at, galley.size()).expand(1.0);
                painter.rect_filled(bg, 2.0, Color32::from_rgba_unmultiplied(60, 30, 0, 200));
                painter.galley(at, galley, Color32::WHITE);
            }
        }
    };
    // A run takes every following gap that starts within a pixel of its end. A device's gaps are
    // sorted and never overlap, so their ends only grow: the gaps a run takes are found by a
    // galloping search, a pixel or more at a time, and a frame costs about one search per box.
    // The search compares trace times with the time a pixel past the run's end, not pixels.
    // Gaps that start well within a pixel of the previous one's end (with room for the
    // rounding of pixel positions) are taken in whole blocks first: the search would take each.
    let px = geom.px_ns();
    let surely_within = floor_i64(px * 0.99) - 2;
    let mut i = lo;
    while i < hi {
        let x0 = x_start(i);
        let mut j = i + 1;
        let mut x1 = x_end(i);
        loop {
            let k = g.close_run_until(j, hi, surely_within);
            if k > j {
                j = k;
                x1 = x1.max(x_end(j - 1));
            }
            let until = geom.t(x1 + 1.0);
            let k = j + gallop(&g.start_ns[j..hi], |s| t.slot.disp(*s) <= until);
            if k == j {
                break;
            }
            j = k;
            x1 = x1.max(x_end(j - 1));
        }
        draw((x0, x1, j - i, g.dur_prefix[j] - g.dur_prefix[i]));
        i = j;
    }
    painter.set(boxes_at, Shape::mesh(boxes));
    // The gap under the pointer: the last one starting at or before it, if it reaches it.
    if let Some(p) = pointer {
        let k = lo + g.start_ns[lo..hi].partition_point(|s| geom.x(t.slot.disp(*s)) <= p.x);
        if k > lo && x_end(k - 1) >= p.x {
            let k = k - 1;
            let duration_ns = g.duration_ns(k);
            let mut text = format!(
                "idle gap {} in {}",
                fmt_dur(duration_ns as f64),
                crate::fmt::plain(g.place(k))
            );
            if let Some(kr) = g.kernel_resident_ns(k) {
                text.push_str(&format!(
                    "\nno kernel resident {}, kernel resident but counters idle {}",
                    fmt_dur((duration_ns - kr) as f64),
                    fmt_dur(kr as f64)
                ));
            }
            return Some(Hit {
                text,
                span: Some((t.slot.disp(g.start_ns[k]), t.slot.disp(g.end_ns[k]))),
            });
        }
    }
    None
}

/// A metric name short enough for a label: the counter without its unit prefix and rollup,
/// `%` for a percentage of peak (`sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`
/// becomes `sm pipe_tensor_cycles_active %`); the full name is in the tooltip.
pub fn short_metric(name: &str) -> String {
    let base = name.split('.').next().unwrap_or(name);
    let base = base.replace("__", " ");
    let rollup = name.split('.').nth(1).filter(|r| *r != "avg");
    let mut s = base;
    if let Some(r) = rollup {
        s.push('.');
        s.push_str(r);
    }
    if name.contains("pct") {
        s.push_str(" %");
    }
    if s.chars().count() > 30 {
        s = s.chars().take(29).collect::<String>() + "…";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::Shape;
    use cufall_trace::model::ActivityKind;

    fn view(name: &str) -> KernelView<'_> {
        KernelView {
            name,
            start_ns: 0,
            end_ns: 1500,
            shape: Shape {
                kind: ActivityKind::Kernel,
                stream: 7,
                grid: None,
                block: None,
            },
            bytes: None,
        }
    }

    #[test]
    fn a_kernel_tooltip_leads_with_the_short_name_and_keeps_the_full_one() {
        let full = "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>";
        let text = kernel_text(&view(full));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "splitKreduce_kernel");
        assert_eq!(lines[1], full);
        assert!(lines[2].starts_with("kernel "), "{text}");
        // A plain name is not repeated.
        let text = kernel_text(&view("rmsnorm"));
        assert_eq!(text.lines().next(), Some("rmsnorm"));
        assert!(
            text.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("kernel "))
        );
    }
}
