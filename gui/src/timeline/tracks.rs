//! What each row draws: NVTX and kernel lanes (spans wide enough one by one, runs of narrower
//! ones as one box), metric tracks from the pyramid or raw samples with the loading frontier,
//! drops and idle gaps over them, NVML lines; and the tooltip of what is under the pointer.

use super::geom::{Geom, Hit};
use super::hostlane::host_row;
use super::paint::{
    DROP_FILL, DROP_HATCH, GAP_FILL, ab_tag, group_title, hatch, hatch_into, heat_mesh, line_mesh,
    name_color,
};
use super::rows::{NvmlField, Row};
use crate::axis::AxisTime;
use crate::fmt::{Nanos, fmt_offset, fmt_value, round_ns, short_metric};
use crate::loaded::{Locked, ReportState, gpu_label, hosts_differ, node_gpu_label, shared_extent};
use crate::lod::{DevicePyramid, RawSeries, Summary};
use crate::spans::{Piece, Spans, floor_i64, gallop};
use crate::tables::{
    DeviceKernels, KernelView, NVML_MEM_CLOCK, NVML_POWER, NVML_SM_CLOCK, NVML_TEMPERATURE,
    NVML_UTIL, Names, NvtxLane,
};
use crate::view::{GpuGroup, Settings, TrackStyle};
use cufall_analysis::names::short_kernel_name;
use cufall_trace::model::DeviceId;
use cufall_trace::model::{MetricInfo, NvtxRange};
use eframe::egui::{
    self, Align2, Color32, CornerRadius, FontId, Mesh, Pos2, Rect, Shape, Stroke, Ui, Vec2,
};
use std::borrow::Cow;

/// The value at the top of a metric's scale: the recording's heatmap full scale (one above 0),
/// 100 for percentages, else the largest value in the trace.
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
        .and_then(|h| cufall_analysis::manifest::usable_full_scale(h.full_scale))
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

#[allow(clippy::too_many_arguments)]
pub(super) fn draw_row(
    ui: &Ui,
    painter: &egui::Painter,
    row: Row,
    (label, area): (Rect, Rect),
    traces: &[Locked<'_>],
    geom: &Geom,
    settings: &Settings,
    (pointer, cursor_x): (Option<Pos2>, Option<f32>),
) -> Option<Hit> {
    let weak = ui.visuals().weak_text_color();
    let text = ui.visuals().text_color();
    let tag = |ti: usize| ab_tag(traces, ti);
    let dev_tag = |ti: usize, dev: DeviceId| device_tag(traces, ti, dev);
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
    let colors = (text, weak);
    match row {
        Row::Device { group, folded } => device_row(
            ui,
            painter,
            (group, folded),
            (label, area),
            traces,
            geom,
            settings,
            pointer,
        ),
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
            let style = (settings.style, settings.show_gaps);
            let name = format!(
                "{}{}",
                dev_tag(ti, dev),
                short_metric(&t.slot.data.metrics[m].name)
            );
            let (hit, out) =
                metric_track(ui, painter, t, dev, m, area, geom, style, pointer, cursor_x);
            let unit = unit_suffix(&t.slot.data.metrics[m].unit);
            track_label(painter, label, &out.readout(name, &unit), colors);
            hit
        }
        Row::Kernels { ti, dev } => {
            let t = &traces[ti];
            put_label(&format!("{}kernels", dev_tag(ti, dev)), weak);
            let tables = t.s.tables.as_ref()?;
            let k = tables.kernels.get(&dev)?;
            kernel_lane(painter, t, k, &tables.names, area, geom, pointer)
        }
        Row::Nvml { ti, dev, field } => {
            let (hit, out) = nvml_track(
                ui,
                painter,
                traces,
                ti,
                dev,
                field,
                area,
                geom,
                (pointer, cursor_x),
            );
            let name = format!("{}{}", dev_tag(ti, dev), field.title());
            track_label(painter, label, &out.readout(name, field.unit()), colors);
            hit
        }
        Row::HostTitle { .. } | Row::Host { .. } => {
            host_row(ui, painter, row, (label, area), traces, geom, pointer)
        }
    }
}

/// A GPU group's title row; folded, with the GPU's first metric as a heat strip.
#[allow(clippy::too_many_arguments)]
fn device_row(
    ui: &Ui,
    painter: &egui::Painter,
    (group, folded): (GpuGroup, bool),
    (label, area): (Rect, Rect),
    traces: &[Locked<'_>],
    geom: &Geom,
    settings: &Settings,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let (text, weak) = (ui.visuals().text_color(), ui.visuals().weak_text_color());
    let dev = group.dev;
    let name = traces
        .iter()
        .enumerate()
        .filter(|(ti, _)| group.holds(*ti))
        .flat_map(|(_, t)| t.slot.data.manifest.devices.iter())
        .find(|d| d.id == dev)
        .map(|d| d.name.clone())
        .unwrap_or_default();
    painter.hline(
        label.left()..=area.right(),
        label.top(),
        Stroke::new(1.0, ui.visuals().widgets.noninteractive.bg_stroke.color),
    );
    let title = match group.ti {
        Some(ti) => format!("{}  {name}", node_gpu_label(traces, ti, dev)),
        None => format!("{}  {name}", group_gpus(traces, dev)),
    };
    group_title(painter, label, &title, folded, text);
    if !folded {
        return None;
    }
    // What the folded row shows, under the title where there is room.
    if label.height() >= 34.0
        && let Some(info) = traces.iter().find_map(|t| t.slot.data.metrics.first())
    {
        painter.with_clip_rect(label).text(
            Pos2::new(label.left() + 18.0, label.center().y + 8.0),
            Align2::LEFT_CENTER,
            short_metric(&info.name),
            FontId::proportional(11.0),
            weak,
        );
    }
    folded_group(ui, painter, traces, group, area, geom, settings, pointer)
}

/// ` %`, ` W`, ...: a unit after a number; nothing for none.
fn unit_suffix(unit: &str) -> String {
    if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    }
}

/// What a chart's label shows: its name, its scale (the values at the chart's top and bottom)
/// and the value at the cursor's time.
struct Readout {
    name: String,
    top: String,
    bottom: String,
    value: Option<String>,
    /// Where the chart ends (above the gap band, where there is one).
    chart_bottom: f32,
}

/// A chart's label: the name on the first line and the value at the cursor on the second (the
/// scale's top and bottom at the right, by the chart's edges); one line where the row is low.
fn track_label(
    painter: &egui::Painter,
    label: Rect,
    r: &Readout,
    (text, weak): (Color32, Color32),
) {
    let p = painter.with_clip_rect(label);
    let small = FontId::proportional(10.0);
    let top = p.layout_no_wrap(r.top.clone(), small.clone(), weak);
    let scale_w = top.size().x + 6.0;
    let bottom_y = r.chart_bottom.min(label.bottom());
    let two_lines = bottom_y - label.top() >= 28.0;
    let name_y = if two_lines {
        label.top() + 8.0
    } else {
        label.center().y
    };
    let name_rect = Rect::from_x_y_ranges(label.left()..=label.right() - scale_w, label.y_range());
    painter.with_clip_rect(name_rect.intersect(label)).text(
        Pos2::new(label.left() + 6.0, name_y),
        Align2::LEFT_CENTER,
        &r.name,
        FontId::proportional(12.0),
        text,
    );
    p.galley(
        Pos2::new(label.right() - top.size().x, label.top() + 1.0),
        top,
        weak,
    );
    if two_lines {
        p.text(
            Pos2::new(label.right(), bottom_y - 1.0),
            Align2::RIGHT_BOTTOM,
            &r.bottom,
            small,
            weak,
        );
        if let Some(v) = &r.value {
            p.text(
                Pos2::new(label.left() + 6.0, bottom_y - 8.0),
                Align2::LEFT_CENTER,
                v,
                FontId::monospace(11.0),
                Color32::from_rgb(150, 210, 255),
            );
        }
    }
}

/// The label tag of a row in a GPU's group: `A `/`B ` with several recordings, `host:GPU n `
/// where they come from different hosts (as `cufall report A B` names GPUs), else nothing.
fn device_tag(traces: &[Locked<'_>], ti: usize, dev: DeviceId) -> String {
    if hosts_differ(traces) {
        format!("{} ", gpu_label(traces, ti, dev))
    } else {
        ab_tag(traces, ti)
    }
}

/// The title of a GPU's group of every recording: the GPU, or with several hosts' recordings
/// each host's (`node-a:GPU 0 · node-b:GPU 0`).
fn group_gpus(traces: &[Locked<'_>], dev: DeviceId) -> String {
    if !hosts_differ(traces) {
        return dev.to_string();
    }
    let names: Vec<String> = (0..traces.len())
        .filter(|ti| traces[*ti].slot.data.devices.contains(&dev))
        .map(|ti| gpu_label(traces, ti, dev))
        .collect();
    names.join(" · ")
}

/// What a chart drew: its full scale, the value at the cursor's time and where the chart ends.
struct ChartOut {
    scale: f64,
    at_cursor: Option<f64>,
    chart_bottom: f32,
}

impl ChartOut {
    /// The label of the chart `name`, its values in `unit` (` %`).
    fn readout(&self, name: String, unit: &str) -> Readout {
        Readout {
            name,
            top: format!("{}{unit}", fmt_value(self.scale)),
            bottom: "0".into(),
            value: self.at_cursor.map(|v| format!("{}{unit}", fmt_value(v))),
            chart_bottom: self.chart_bottom,
        }
    }
}

/// The column mean under the cursor.
fn at_cursor(cols: &[Summary], area: Rect, cursor_x: Option<f32>) -> Option<f64> {
    let x = cursor_x?;
    let c = (x - area.left()).floor();
    if c < 0.0 {
        return None;
    }
    let s = cols.get(c as usize)?;
    s.mean().or((!s.is_empty()).then_some(s.max))
}

/// An NVML field of one GPU as an area chart, with the readings under the pointer.
#[allow(clippy::too_many_arguments)]
fn nvml_track(
    ui: &Ui,
    painter: &egui::Painter,
    traces: &[Locked<'_>],
    ti: usize,
    dev: DeviceId,
    field: NvmlField,
    area: Rect,
    geom: &Geom,
    (pointer, cursor_x): (Option<Pos2>, Option<f32>),
) -> (Option<Hit>, ChartOut) {
    let mut out = ChartOut {
        scale: 1.0,
        at_cursor: None,
        chart_bottom: area.bottom(),
    };
    let t = &traces[ti];
    let Some(n) = t.s.tables.as_ref().and_then(|tb| tb.nvml.get(&dev)) else {
        return (None, out);
    };
    let ncols = area.width().max(1.0) as usize;
    let t0 = t.slot.local(geom.view.t0);
    let cols = match n.series.fine.as_deref() {
        Some(p) => p.columns(field.column(), t0, geom.px_ns(), ncols, Some(&[&n.series])),
        None => vec![Summary::EMPTY; ncols],
    };
    out.scale = match field {
        NvmlField::GpuUtil => 100.0,
        NvmlField::Power => n.peak_power_w.max(1.0),
        NvmlField::SmClock => n.peak_sm_clock_mhz.max(1.0),
    };
    out.at_cursor = at_cursor(&cols, area, cursor_x);
    painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
    line_mesh(
        painter,
        area,
        &cols,
        out.scale,
        Color32::from_rgb(240, 190, 90),
    );
    let Some(p) = pointer else {
        return (None, out);
    };
    let Some(i) = n.at(t.slot.local(geom.t(p.x))) else {
        return (None, out);
    };
    let v = |m: usize| opt(n.value(m, i));
    let hit = Hit {
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
    };
    (Some(hit), out)
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
    origin: AxisTime,
) -> Option<Hit> {
    let range = |j: usize| &nvtx[l.ranges[j] as usize];
    let span = |j: usize| {
        let r = range(j);
        LaneSpan {
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            name: &r.name,
            label: Cow::Borrowed(&r.name),
        }
    };
    let text = |j: usize| {
        let r = range(j);
        format!(
            "{}\n{} ({})\nstarts at {}\ndepth {}, pid {} tid {}{}",
            r.name,
            Nanos(r.end_ns - r.start_ns),
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
        )
    };
    let at = (area, geom, pointer);
    lane(painter, t, &l.spans, at, &NVTX_LANE, &span, &text)
}

/// A folded group's row: the GPU's first metric as a heat strip, of each recording of the group
/// that has the GPU (A above B), with its drops and idle gaps: enough to see where the GPU was
/// busy.
#[allow(clippy::too_many_arguments)]
fn folded_group(
    ui: &Ui,
    painter: &egui::Painter,
    traces: &[Locked<'_>],
    group: GpuGroup,
    area: Rect,
    geom: &Geom,
    settings: &Settings,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let dev = group.dev;
    let with: Vec<&Locked<'_>> = traces
        .iter()
        .enumerate()
        .filter(|(ti, t)| {
            group.holds(*ti)
                && t.slot.data.devices.contains(&dev)
                && !t.slot.data.metrics.is_empty()
        })
        .map(|(_, t)| t)
        .collect();
    let band = area.height() / with.len().max(1) as f32;
    let mut hit = None;
    for (i, t) in with.into_iter().enumerate() {
        let top = area.top() + band * i as f32;
        let r = Rect::from_x_y_ranges(area.x_range(), top..=top + band);
        let p = pointer.filter(|p| r.contains(*p));
        let style = (TrackStyle::Heat, settings.show_gaps);
        if let (Some(h), _) = metric_track(ui, painter, t, dev, 0, r, geom, style, p, None) {
            hit = Some(h);
        }
    }
    hit
}

/// Height of the band of idle gaps under a GPU's first track.
const GAP_BAND_H: f32 = 9.0;

/// One metric track: the summaries per pixel column as an area chart or a heat strip (`style`:
/// how, and whether idle gaps are drawn), the loading frontier and drops over them; under the
/// GPU's first track, a band marking its idle gaps (never a veil over the data).
#[allow(clippy::too_many_arguments)]
fn metric_track(
    ui: &Ui,
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: DeviceId,
    m: usize,
    area: Rect,
    geom: &Geom,
    (style, show_gaps): (TrackStyle, bool),
    pointer: Option<Pos2>,
    cursor_x: Option<f32>,
) -> (Option<Hit>, ChartOut) {
    let info = &t.slot.data.metrics[m];
    let weak = ui.visuals().weak_text_color();
    let band = (show_gaps && m == 0 && area.height() >= 2.0 * GAP_BAND_H)
        .then(|| Rect::from_x_y_ranges(area.x_range(), area.bottom() - GAP_BAND_H..=area.bottom()));
    let chart = match band {
        Some(b) => Rect::from_x_y_ranges(area.x_range(), area.top()..=b.top() - 1.0),
        None => area,
    };
    painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
    let mut out = ChartOut {
        scale: full_scale(t, m),
        at_cursor: None,
        chart_bottom: chart.bottom(),
    };
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
        out.at_cursor = at_cursor(&cols, chart, cursor_x);
        match style {
            TrackStyle::Heat => heat_mesh(painter, chart, &cols, out.scale),
            TrackStyle::Line => line_mesh(
                painter,
                chart,
                &cols,
                out.scale,
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
                chart,
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
    // The gap under the pointer's time, wherever on the track the pointer is: its hover text
    // follows the value's, and a click or double-click takes the gap.
    if show_gaps && let Some(g) = gaps_band(painter, t, dev, band, area, geom, pointer) {
        hit = Some(match hit {
            Some(h) if h.span.is_none() => Hit {
                text: format!("{}\n{}", h.text, g.text),
                span: g.span,
            },
            _ => g,
        });
    }
    (hit, out)
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
    // Labelled with the short name; coloured by the full one, so that two instantiations of one
    // template still differ.
    let span = |j: usize| {
        let r = k.get(j, names);
        LaneSpan {
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            name: r.name,
            label: short_kernel_name(r.name),
        }
    };
    let text = |j: usize| kernel_text(&k.get(j, names));
    let at = (area, geom, pointer);
    lane(painter, t, &k.spans, at, &KERNEL_LANE, &span, &text)
}

/// How a lane draws its spans.
struct LaneStyle {
    /// What the spans are, for the tooltip of a run of narrow ones.
    what: &'static str,
    radius: u8,
    /// Labelled from this width (points).
    label_from: f32,
    font: f32,
    /// How far beside a span (points) the pointer still picks it.
    hit_margin: f32,
}

const NVTX_LANE: LaneStyle = LaneStyle {
    what: "NVTX ranges",
    radius: 2,
    label_from: 30.0,
    font: 11.0,
    hit_margin: 1.0,
};
const KERNEL_LANE: LaneStyle = LaneStyle {
    what: "kernels",
    radius: 1,
    label_from: 40.0,
    font: 10.0,
    hit_margin: 0.0,
};

/// A span of a lane as [`lane`] draws it.
struct LaneSpan<'a> {
    start_ns: i64,
    end_ns: i64,
    /// Picks the colour.
    name: &'a str,
    label: Cow<'a, str>,
}

/// Draws a lane of `spans` in `area`: each span wide enough as a box (`span(j)` says which,
/// `text(j)` its tooltip), runs of narrower ones as one box; returns the tooltip of what is
/// under `pointer`.
fn lane<'a>(
    painter: &egui::Painter,
    t: &Locked<'_>,
    spans: &Spans,
    (area, geom, pointer): (Rect, &Geom, Option<Pos2>),
    style: &LaneStyle,
    span: &dyn Fn(usize) -> LaneSpan<'a>,
    text: &dyn Fn(usize) -> String,
) -> Option<Hit> {
    let mut hit = None;
    for piece in lane_pieces(spans, t, area, geom) {
        let Piece::Span(j) = piece else {
            if let Some(h) = run_hit(painter, area, geom, piece, pointer, style.what) {
                hit = Some(h);
            }
            continue;
        };
        let r = span(j);
        let (x0, x1) = span_box(
            painter,
            t,
            area,
            geom,
            (r.start_ns, r.end_ns),
            (r.name, &r.label),
            style,
        );
        let m = style.hit_margin;
        if pointer.is_some_and(|p| p.x >= x0 - m && p.x <= x1 + m) {
            hit = Some(Hit {
                text: text(j),
                span: Some((t.slot.disp(r.start_ns), t.slot.disp(r.end_ns))),
            });
        }
    }
    hit
}

/// Draws the span `(start_ns, end_ns)` of a lane as a box coloured by its name, labelled where
/// wide enough (`(name, label)`); returns its x range (unclipped, for the pointer's hit test).
fn span_box(
    painter: &egui::Painter,
    t: &Locked<'_>,
    area: Rect,
    geom: &Geom,
    (start_ns, end_ns): (i64, i64),
    (name, label): (&str, &str),
    style: &LaneStyle,
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
    let (ncols, px, t0) = geom.columns(t.slot, area);
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
            Nanos(busy_ns),
            round_ns(geom.t(x1) - geom.t(x0))
        ),
        span: Some((geom.t(x0), geom.t(x1))),
    })
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.0}"))
}

fn shared_origin(traces: &[Locked<'_>]) -> AxisTime {
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
        Nanos(r.end_ns - r.start_ns),
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
    dev: DeviceId,
    m: usize,
    ptr: Pos2,
    area: Rect,
    geom: &Geom,
    cols: &[Summary],
    raw: Option<&[&RawSeries]>,
    info: &MetricInfo,
) -> Hit {
    let tp = t.slot.local(geom.t(ptr.x));
    let mut text = format!("{dev} {}", info.name);
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
                    Nanos(e - s)
                ));
                // No span: a click or double-click on a counter track takes the gap or
                // phase there, not one sample of a few µs.
                return Hit { text, span: None };
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
            fmt_value(s.min),
            fmt_value(s.max),
            info.unit,
            round_ns(geom.px_ns()),
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

fn geom_origin(t: &Locked<'_>) -> AxisTime {
    t.slot.disp(t.s.extent.start_ns)
}

fn drops_overlay(
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: DeviceId,
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
        painter.rect_filled(r, 0.0, DROP_FILL);
        hatch(painter, r, DROP_HATCH);
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
                    Nanos(d.end_ns - d.start_ns),
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

/// A device's idle gaps as a hatched band under its first track (`band`, when the track has
/// one), and the gap under the pointer anywhere on the track (`area`).
fn gaps_band(
    painter: &egui::Painter,
    t: &Locked<'_>,
    dev: DeviceId,
    band: Option<Rect>,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let ReportState::Ready(_) = &t.s.report else {
        return None;
    };
    let g = t.s.gaps_by_device.get(&dev)?;
    let t0 = t.slot.local(geom.view.t0);
    let t1 = t.slot.local(geom.view.t1);
    let lo = g.end_ns.partition_point(|e| *e < t0);
    let hi = g.start_ns.partition_point(|s| *s <= t1).max(lo);
    let x_start = |k: usize| geom.x(t.slot.disp(g.start_ns[k]));
    let x_end = |k: usize| geom.x(t.slot.disp(g.end_ns[k])).max(x_start(k) + 1.0);
    if let Some(band) = band {
        // Gaps closer than a pixel are drawn as one box, so a frame draws at most one box per
        // pixel column; the boxes are one mesh, hatched by one more over the whole band (its
        // dark lines all but vanish on the band's dark ground between gaps).
        let mut boxes = Mesh::default();
        let mut labels = Vec::new();
        let mut draw = |run: (f32, f32, usize, i64)| {
            // A gap found by rounded times may end a fraction of a pixel before the area.
            if run.1 < band.left() || run.0 > band.right() {
                return;
            }
            let r = Rect::from_x_y_ranges(
                run.0.max(band.left())..=run.1.min(band.right()),
                band.y_range(),
            );
            boxes.add_colored_rect(r, GAP_FILL);
            if r.width() > 60.0 {
                labels.push((r, run.2, run.3));
            }
        };
        // A run takes every following gap that starts within a pixel of its end. A device's
        // gaps are sorted and never overlap, so their ends only grow: the gaps a run takes are
        // found by a galloping search, a pixel or more at a time, and a frame costs about one
        // search per box. The search compares trace times with the time a pixel past the run's
        // end, not pixels. Gaps that start well within a pixel of the previous one's end (with
        // room for the rounding of pixel positions) are taken in whole blocks first.
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
        hatch_into(&mut boxes, band, Color32::from_black_alpha(110));
        painter.add(Shape::mesh(boxes));
        // Wide gaps say their length on the band.
        for (r, n, dur) in labels {
            let text = if n == 1 {
                Nanos(dur).to_string()
            } else {
                format!("{n} gaps, {}", Nanos(dur))
            };
            let galley = painter.layout_no_wrap(text, FontId::proportional(9.0), Color32::WHITE);
            if galley.size().x + 8.0 < r.width() {
                let at = Pos2::new(
                    r.center().x - galley.size().x / 2.0,
                    r.center().y - galley.size().y / 2.0,
                );
                let bg = Rect::from_min_size(at, galley.size()).expand2(Vec2::new(2.0, 0.0));
                painter.rect_filled(bg, 1.0, GAP_FILL);
                painter.galley(at, galley, Color32::WHITE);
            }
        }
    }
    // The gap under the pointer: the last one starting at or before it, if it reaches it.
    let p = pointer.filter(|p| area.contains(*p))?;
    let k = lo + g.start_ns[lo..hi].partition_point(|s| geom.x(t.slot.disp(*s)) <= p.x);
    if k > lo && x_end(k - 1) >= p.x {
        let k = k - 1;
        let duration_ns = g.duration_ns(k);
        let mut text = format!(
            "idle gap {} in {}",
            Nanos(duration_ns),
            crate::fmt::plain(g.place(k))
        );
        if let Some(kr) = g.kernel_resident_ns(k) {
            text.push_str(&format!(
                "\nno kernel resident {}, kernel resident but counters idle {}",
                Nanos(duration_ns - kr),
                Nanos(kr)
            ));
        }
        return Some(Hit {
            text,
            span: Some((t.slot.disp(g.start_ns[k]), t.slot.disp(g.end_ns[k]))),
        });
    }
    None
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
