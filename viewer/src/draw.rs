//! Drawing: turns a [`HeatmapState`] into a ratatui frame. Nothing here changes state; every
//! function takes the state by shared reference.
//!
//! Screen, top to bottom: title; per heatmap a legend row then one band per GPU (label, cells,
//! current value and NVML); the NVTX phase lane; the time axis with drop marks; a status line;
//! the key footer. Cells query the pyramids, so a frame costs the same at any sample rate.

use crate::bucket::Summary;
use crate::color::{self, Palette};
use crate::input::KEYS;
use crate::state::{HeatmapState, Mode, layout};
use crate::store::Heatmap;
use cufall_trace::model::Nanos;
use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draws the whole screen.
pub fn draw(f: &mut Frame, state: &HeatmapState) {
    let area = f.area();
    draw_into(f.buffer_mut(), area, state);
}

/// The smallest frame drawn; below it the screen says "too small". A trace may need more rows
/// than [`MIN_HEIGHT`]: [`min_height`] says how many.
pub const MIN_WIDTH: u16 = 20;
pub const MIN_HEIGHT: u16 = 4;
/// The largest frame `--print` draws (a frame is held in memory whole: 1000 × 1000 cells are
/// about 50 MB).
pub const MAX_WIDTH: u16 = 1000;
pub const MAX_HEIGHT: u16 = 1000;

/// Rows outside the heatmap sections: title, phase lane (when the trace has NVTX ranges), time
/// axis, status line, key footer.
fn fixed_rows(state: &HeatmapState) -> u16 {
    4 + u16::from(!state.store.nvtx.is_empty())
}

/// The fewest rows that show `state` without overdrawing: the fixed rows, one legend, one GPU row
/// and, with more than one GPU, the line that says how many GPUs are not shown.
pub fn min_height(state: &HeatmapState) -> u16 {
    let hidden_line = u16::from(state.store.devices.len() > 1);
    (fixed_rows(state) + 2 + hidden_line).max(MIN_HEIGHT)
}

/// [`draw`] on a plain buffer (for `--print` and benchmarks).
pub fn draw_into(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    if area.height < min_height(state) || area.width < MIN_WIDTH {
        buf.set_stringn(
            area.x,
            area.y,
            "too small: enlarge the terminal",
            area.width as usize,
            BOLD,
        );
        return;
    }
    let has_phases = !state.store.nvtx.is_empty();
    let fixed = fixed_rows(state);
    let mut y = area.y;
    draw_title(buf, Rect::new(area.x, y, area.width, 1), state);
    y += 1;
    let body_h = area.height.saturating_sub(fixed);
    draw_heatmap_buf(buf, Rect::new(area.x, y, area.width, body_h), state);
    y += body_h;
    if has_phases {
        draw_phases(buf, Rect::new(area.x, y, area.width, 1), state);
        y += 1;
    }
    draw_axis(buf, Rect::new(area.x, y, area.width, 1), state);
    draw_status(buf, Rect::new(area.x, y + 1, area.width, 1), state);
    draw_footer(buf, Rect::new(area.x, y + 2, area.width, 1), state);
    if state.show_help {
        draw_help(buf, area);
    }
}

/// The heatmap sections (legend and GPU bands of each visible metric) into `area`.
pub fn draw_heatmap(f: &mut Frame, area: Rect, state: &HeatmapState) {
    draw_heatmap_buf(f.buffer_mut(), area, state);
}

fn heat_x(area: Rect) -> u16 {
    area.x + layout::LABEL_W
}

/// Lanes of heatmap `hm` on screen: indexes into the device's series for it.
fn lanes(state: &HeatmapState, hm: &Heatmap) -> Vec<usize> {
    if state.options.spread && !hm.spread.is_empty() {
        (1..=hm.spread.len()).collect()
    } else {
        vec![0]
    }
}

/// Rows the first `n` bands take: a legend row each and `g` GPUs of `hs[i]` rows.
fn rows_needed(hs: &[u16], n: usize, g: u16) -> u32 {
    hs[..n]
        .iter()
        .map(|h| 1 + u32::from(g) * u32::from(*h))
        .sum()
}

/// Band heights (rows per GPU) for the metrics to show: as tall as the frame allows, as many
/// metrics as fit with at least one row per band; a band too short for one row (half row in
/// colour) per lane shows its plain lane only. Returns how many metrics fit, their heights and
/// their lanes.
fn fit_bands(
    lane_sets: Vec<Vec<usize>>,
    shown: usize,
    color: bool,
    g: u16,
    limit: u32,
) -> (usize, Vec<u16>, Vec<Vec<usize>>) {
    // Rows a band needs to show each of its lanes (half rows in colour).
    let min_h: Vec<u16> = lane_sets
        .iter()
        .map(|l| {
            if color {
                (l.len() as u16).div_ceil(2)
            } else {
                l.len() as u16
            }
        })
        .collect();
    let need = |hs: &[u16], n: usize| rows_needed(hs, n, g);
    let mut n = shown;
    let mut hs: Vec<u16> = min_h.iter().map(|h| (*h).max(2)).collect();
    if need(&hs, n) > limit {
        hs.clone_from(&min_h);
    }
    if need(&hs, n) > limit {
        hs.iter_mut().for_each(|h| *h = 1);
    }
    // Stack as many metrics as fit with at least one row per band.
    while n > 1 && need(&hs, n) > limit {
        n -= 1;
    }
    // Bands too short for one row (half row in colour) per lane show the plain lane only.
    let mut lane_sets = lane_sets;
    for (i, l) in lane_sets.iter_mut().enumerate().take(n) {
        let rows = usize::from(hs[i]) * if color { 2 } else { 1 };
        if rows < l.len() {
            *l = vec![0];
            hs[i] = hs[i].max(1);
        }
    }
    (n, hs, lane_sets)
}

fn draw_heatmap_buf(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let store = &state.store;
    if store.heatmaps.is_empty() || store.devices.is_empty() {
        let msg = match &store.counters_unavailable {
            Some(why) => format!("GPU counters unavailable: {why}"),
            None if store.heatmaps.is_empty() => "no metrics to show".to_string(),
            None => "waiting for samples…".to_string(),
        };
        buf.set_stringn(area.x + 1, area.y, msg, area.width as usize, BOLD);
        return;
    }
    // GPUs that fit with one row each under one legend; the last row then says how many not.
    let all = store.devices.len();
    let fit = usize::from(area.height.saturating_sub(1));
    let devs = if all <= fit {
        all
    } else {
        fit.saturating_sub(1).max(1)
    };
    let g = u16::try_from(devs).unwrap_or(u16::MAX);
    let mut shown = state.visible_heatmaps();
    let color = state.options.palette.is_color();
    let lane_sets: Vec<Vec<usize>> = shown
        .iter()
        .map(|&h| lanes(state, &store.heatmaps[h]))
        .collect();
    let body_h = if devs < all {
        area.height - 1
    } else {
        area.height
    };
    let limit = u32::from(body_h);
    let (n, hs, lane_sets) = fit_bands(lane_sets, shown.len(), color, g, limit);
    shown.truncate(n);
    let need = |hs: &[u16], n: usize| rows_needed(hs, n, g);
    // Spare rows make bands taller, up to 4 rows.
    let spare = limit.saturating_sub(need(&hs, n)) / (u32::from(g) * n as u32).max(1);
    let spare = u16::try_from(spare).unwrap_or(u16::MAX);
    let bottom = area.y + body_h;
    let mut y = area.y;
    for (i, &h) in shown.iter().enumerate() {
        // Only single-lane bands grow: split bands keep one row (or half row) per lane.
        let cap = if lane_sets[i].len() == 1 { 4 } else { hs[i] };
        let band_h = hs[i].saturating_add(spare).min(cap.max(hs[i]));
        let height = band_h
            .saturating_mul(g)
            .saturating_add(1)
            .min(bottom.saturating_sub(y));
        if height < 2 {
            break;
        }
        draw_section(
            buf,
            Rect::new(area.x, y, area.width, height),
            state,
            h,
            &lane_sets[i],
            band_h,
        );
        y += height;
    }
    if devs < all {
        // The longest wording that fits the width.
        let hidden = all - devs;
        let line = [
            format!("{hidden} of {all} GPUs not shown: the frame has room for {devs} (a taller frame shows more)"),
            format!("{hidden} of {all} GPUs not shown"),
            format!("+{hidden} GPUs not shown"),
            format!("+{hidden} GPUs"),
        ]
        .into_iter()
        .find(|l| l.chars().count() <= usize::from(area.width))
        .unwrap_or_else(|| format!("+{hidden}"));
        buf.set_stringn(area.x, bottom, line, usize::from(area.width), BOLD);
    }
}

/// What one band shows in one column.
#[derive(Clone, Copy)]
enum CellValue {
    NoData,
    Dropped,
    Value(f64),
}

/// The heat cells of one device band: in colour, two lanes per character cell (`▀` with
/// foreground over background); in monochrome, one shade character per lane row. Dropped columns
/// are marked, partly dropped ones underlined.
fn draw_cells(
    buf: &mut Buffer,
    (x0, y): (u16, u16),
    band_h: u16,
    nl: usize,
    palette: Palette,
    lost: &[i64],
    cell: &dyn Fn(usize, usize) -> CellValue,
) {
    for (c, lost_ns) in lost.iter().enumerate() {
        let x = x0 + c as u16;
        let partial_drop = *lost_ns > 0;
        for r in 0..band_h {
            let cellref = &mut buf[(x, y + r)];
            if palette.is_color() {
                let px = |p: u16| usize::from(p) * nl / usize::from(2 * band_h);
                let top = cell(px(2 * r), c);
                let bot = cell(px(2 * r + 1), c);
                let col = |v: CellValue| match v {
                    CellValue::Value(f) => Some(palette.color(f)),
                    _ => None,
                };
                if matches!(top, CellValue::Dropped) || matches!(bot, CellValue::Dropped) {
                    cellref.set_char(color::DROP_COLOR).set_style(
                        Style::new()
                            .fg(Color::Red)
                            .bg(Color::Reset)
                            .add_modifier(Modifier::BOLD),
                    );
                    continue;
                }
                let mut style = match (col(top), col(bot)) {
                    (Some(a), Some(b)) => {
                        cellref.set_char('▀');
                        Style::new().fg(a).bg(b)
                    }
                    (Some(a), None) => {
                        cellref.set_char('▀');
                        Style::new().fg(a).bg(Color::Reset)
                    }
                    (None, Some(b)) => {
                        cellref.set_char('▄');
                        Style::new().fg(b).bg(Color::Reset)
                    }
                    (None, None) => {
                        cellref.set_char(' ');
                        Style::new().fg(Color::Reset).bg(Color::Reset)
                    }
                };
                if partial_drop && r + 1 == band_h {
                    style = style
                        .add_modifier(Modifier::UNDERLINED)
                        .underline_color(Color::Red);
                }
                cellref.set_style(style);
            } else {
                let lane = usize::from(r) * nl / usize::from(band_h);
                let ch = match cell(lane, c) {
                    CellValue::Value(f) => color::shade(f),
                    CellValue::Dropped => color::DROP_MONO,
                    CellValue::NoData => color::NO_DATA,
                };
                cellref.set_char(ch);
            }
        }
    }
}

/// A GPU's band labels: its name on the first row, and each spread lane's label (`min`, `max`)
/// on the lane's first row where the lanes have rows of their own.
fn band_labels(
    buf: &mut Buffer,
    (x, y): (u16, u16),
    band_h: u16,
    name: &str,
    hm: &Heatmap,
    lane_ix: &[usize],
    color: bool,
) {
    let nl = lane_ix.len();
    for r in 0..band_h {
        let lane = usize::from(r) * nl / usize::from(band_h);
        let text = if r == 0 { name } else { "" };
        let first_row_of_lane = r == 0 || (usize::from(r) - 1) * nl / usize::from(band_h) != lane;
        let lane_label = if nl > 1 && first_row_of_lane && (!color || band_h >= nl as u16) {
            hm.spread[lane_ix[lane] - 1].label.as_str()
        } else {
            ""
        };
        let label = format!("{text:<5}{lane_label:<3}");
        buf.set_stringn(
            x,
            y + r,
            label,
            usize::from(layout::LABEL_W - 1),
            if r == 0 { BOLD } else { DIM },
        );
    }
}

fn draw_section(
    buf: &mut Buffer,
    area: Rect,
    state: &HeatmapState,
    h: usize,
    lane_ix: &[usize],
    band_h: u16,
) {
    let store = &state.store;
    let hm = &store.heatmaps[h];
    let cols = state
        .cols()
        .min(usize::from(area.width.saturating_sub(layout::LABEL_W)));
    let (t0, t1) = state.window();
    let col_ns = state.col_ns();
    let palette = state.options.palette;
    // Query every band first: an unscaled raw metric is scaled to the largest value in view.
    let mut bins: Vec<Vec<Vec<Summary>>> = Vec::with_capacity(store.devices.len());
    let mut peak = 0.0f64;
    // Bands that fit in `area` (one row at least); the caller says how many GPUs are left out.
    let fit = usize::from(area.height.saturating_sub(1) / band_h.max(1));
    for dev in store.devices.iter().take(fit) {
        let mut per_lane = Vec::with_capacity(lane_ix.len());
        for &l in lane_ix {
            let mut out = Vec::new();
            if let Some(p) = dev.series.get(h).and_then(|s| s.get(hm.series_index(l))) {
                p.query(t0, col_ns, cols, &mut out);
            }
            for b in &out {
                if let Some(v) = state.value(b) {
                    peak = peak.max(v);
                }
            }
            per_lane.push(out);
        }
        bins.push(per_lane);
    }
    let scale = hm
        .full_scale()
        .unwrap_or(if peak > 0.0 { peak } else { 1.0 });
    draw_legend(
        buf,
        Rect::new(area.x, area.y, area.width, 1),
        state,
        hm,
        scale,
        lane_ix,
    );

    let x0 = heat_x(area);
    let panel_x = x0 + cols as u16 + 1;
    for (d, dev) in store.devices.iter().enumerate().take(fit) {
        let y = area.y + 1 + d as u16 * band_h;
        // Which columns lost samples, and how much of each.
        let lost = store.dropped_per_column(d, t0, t1, col_ns, cols);
        let cell = |lane: usize, c: usize| -> CellValue {
            let b = &bins[d][lane][c];
            match state.value(b) {
                Some(v) if lost[c] * 2 < col_ns => CellValue::Value(v / scale),
                _ if lost[c] > 0 => CellValue::Dropped,
                Some(v) => CellValue::Value(v / scale),
                None => CellValue::NoData,
            }
        };
        let nl = lane_ix.len();
        band_labels(
            buf,
            (area.x, y),
            band_h,
            &format!("GPU{}", dev.info.id.0),
            hm,
            lane_ix,
            palette.is_color(),
        );
        draw_cells(buf, (x0, y), band_h, nl, palette, &lost, &cell);
        // Right panel: current value, then NVML.
        let panel_w = layout::panel_w(area.width);
        if panel_w > 0 {
            // The heatmap's own metric: with spread rows, the lane over its column (the avg lane
            // of an `.avg` heatmap, the min lane of a `.min` one).
            let main = lane_ix
                .iter()
                .position(|&l| hm.series_index(l) == 0)
                .unwrap_or(bins[d].len() / 2);
            let now = current(state, &bins[d][main]);
            let text = format!("{:>7}", now.map_or("-".to_string(), |v| fmt_value(v, hm)));
            buf.set_stringn(panel_x, y, &text, 8, BOLD);
            let nvml = nvml_text(state, d, t0, t1);
            buf.set_stringn(panel_x + 8, y, nvml, usize::from(panel_w) - 9, Style::new());
            if band_h > 1 && nl > 1 {
                let ext: Vec<String> = lane_ix
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != main)
                    .map(|(i, &l)| {
                        let v = current(state, &bins[d][i]);
                        format!(
                            "{} {}",
                            store.heatmaps[h].spread[l - 1].label,
                            v.map_or("-".to_string(), |v| fmt_value(v, hm))
                        )
                    })
                    .collect();
                buf.set_stringn(
                    panel_x + 1,
                    y + 1,
                    ext.join("  "),
                    usize::from(panel_w) - 2,
                    DIM,
                );
            }
        }
    }
}

/// The value of a band "now": the newest column with data when following a feed, the mean of
/// the window when browsing.
fn current(state: &HeatmapState, bins: &[Summary]) -> Option<f64> {
    if state.follow {
        bins.iter().rev().find_map(|b| state.value(b))
    } else {
        let mut all = Summary::EMPTY;
        for b in bins {
            all.merge(b);
        }
        state.value(&all)
    }
}

/// NVML's view of device `d`: the newest reading when following, the window mean otherwise.
fn nvml_text(state: &HeatmapState, d: usize, t0: i64, t1: i64) -> String {
    let store = &state.store;
    let Some(dev) = store.devices.get(d) else {
        return String::new();
    };
    let (util, power, clock) = if state.follow {
        match store.nvml_at(d, t1) {
            Some(r) => (
                r.gpu_util_pct.map(f64::from),
                r.power_w.map(f64::from),
                r.sm_clock_mhz.map(f64::from),
            ),
            None => (None, None, None),
        }
    } else {
        let lo = dev.nvml.partition_point(|r| r.t_ns < t0);
        let hi = dev.nvml.partition_point(|r| r.t_ns < t1);
        let mean = |f: &dyn Fn(&cufall_trace::model::NvmlRow) -> Option<f64>| {
            let v: Vec<f64> = dev.nvml.range(lo..hi).filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        (
            mean(&|r| r.gpu_util_pct.map(f64::from)),
            mean(&|r| r.power_w.map(f64::from)),
            mean(&|r| r.sm_clock_mhz.map(f64::from)),
        )
    };
    if util.is_none() && power.is_none() && clock.is_none() {
        return "nvml -".to_string();
    }
    let f = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.0}{unit}"));
    format!(
        "smi {:>4} {:>5} {:>8}",
        f(util, "%"),
        f(power, "W"),
        f(clock, "MHz")
    )
}

/// A value for people: a percentage for ratios and `%` metrics, SI prefixes otherwise.
pub fn fmt_value(v: f64, hm: &Heatmap) -> String {
    if hm.spec.denominator.is_some() {
        format!("{:.1}%", v * 100.0)
    } else if hm.is_percent() {
        format!("{v:.1}%")
    } else {
        fmt_si(v)
    }
}

/// A scale end: like [`fmt_value`] without needless decimals.
fn fmt_scale(v: f64, hm: &Heatmap) -> String {
    let s = fmt_value(v, hm);
    s.replace(".0%", "%")
}

fn fmt_si(v: f64) -> String {
    let a = v.abs();
    let (d, s) = if a >= 1e12 {
        (1e12, "T")
    } else if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / d;
    if x.abs() >= 100.0 || d == 1.0 && x.fract() == 0.0 {
        format!("{x:.0}{s}")
    } else {
        format!("{x:.2}{s}")
    }
}

fn draw_title(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let mode = match state.mode {
        Mode::Live => "live",
        Mode::Replay => "replay",
        Mode::Browse => "view",
    };
    let (t0, t1) = state.window();
    let gpus = state.store.devices.len();
    // The live view has no file to name: its title is the mode alone.
    let source = if state.source.is_empty() {
        String::new()
    } else {
        format!(" {}", state.source)
    };
    let left = format!(
        "cufall {mode}{source} │ {gpus} GPU{} │ window {} ({}/col, {}) │ {}",
        if gpus == 1 { "" } else { "s" },
        Nanos(t1.saturating_sub(t0)).compact(),
        Nanos(state.col_ns()).compact(),
        state.options.agg.name(),
        state.options.palette.name(),
    );
    buf.set_stringn(area.x, area.y, &left, area.width as usize, BOLD);
    let right = if state.store.ended && state.mode == Mode::Replay {
        "■ END"
    } else if state.paused {
        "‖ PAUSED"
    } else if state.follow {
        "▶ LIVE"
    } else {
        ""
    };
    let w = right.chars().count() as u16;
    if !right.is_empty() && area.width > w + left.chars().count() as u16 + 1 {
        buf.set_string(area.x + area.width - w, area.y, right, BOLD);
    }
}

fn draw_legend(
    buf: &mut Buffer,
    area: Rect,
    state: &HeatmapState,
    hm: &Heatmap,
    scale: f64,
    lane_ix: &[usize],
) {
    let palette = state.options.palette;
    let cols = (state.cols() as u16).min(area.width.saturating_sub(layout::LABEL_W));
    let right = heat_x(area) + cols;
    let lo = fmt_scale(0.0, hm);
    let hi = fmt_scale(scale, hm);
    let auto = if hm.full_scale().is_none() {
        " (auto)"
    } else {
        ""
    };
    let spread = if lane_ix.len() > 1 {
        "  rows: SM max/avg/min"
    } else {
        ""
    };
    let scale_w = (lo.chars().count() + hi.chars().count() + auto.len() + 13) as u16;
    let mut name = hm.spec.metric.clone();
    if let Some(d) = &hm.spec.denominator {
        name = format!("{name} ÷ {d}");
    }
    // The name gives way to the scale: it is truncated first.
    let room = usize::from((right - area.x).saturating_sub(scale_w + 2)).max(12);
    if name.chars().count() > room {
        name = name
            .chars()
            .take(room.saturating_sub(1))
            .collect::<String>()
            + "…";
    }
    let mut x = area.x;
    buf.set_stringn(x, area.y, &name, usize::from(right - x), BOLD);
    x += name.chars().count() as u16 + 2;
    if x + scale_w <= right {
        buf.set_string(x, area.y, &lo, Style::new());
        x += lo.chars().count() as u16 + 1;
        for i in 0..10u16 {
            let f = f64::from(i) / 9.0;
            let cell = &mut buf[(x + i, area.y)];
            if palette.is_color() {
                cell.set_char('█').set_fg(palette.color(f));
            } else {
                cell.set_char(color::shade(f));
            }
        }
        x += 11;
        let rest = format!("{hi}{auto}{spread}");
        buf.set_stringn(
            x,
            area.y,
            rest,
            usize::from(right.saturating_sub(x)),
            Style::new(),
        );
    }
    // Heading of the right panel.
    let pw = layout::panel_w(area.width);
    let px = right + 1;
    if pw > 0 && px + 8 < area.right() {
        let head = if state.follow {
            "    now nvidia-smi"
        } else {
            "   mean nvidia-smi"
        };
        buf.set_stringn(px, area.y, head, usize::from(pw - 1), DIM);
    }
}

/// A stable colour per phase name.
fn phase_color(name: &str) -> Color {
    const C: [Color; 6] = [
        Color::Indexed(24),
        Color::Indexed(89),
        Color::Indexed(58),
        Color::Indexed(23),
        Color::Indexed(54),
        Color::Indexed(94),
    ];
    let h = name
        .bytes()
        .fold(5381u32, |h, b| h.wrapping_mul(33) ^ u32::from(b));
    C[h as usize % C.len()]
}

fn draw_phases(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let (t0, t1) = state.window();
    let col = state.col_ns();
    let cols = state
        .cols()
        .min(usize::from(area.width.saturating_sub(layout::LABEL_W)));
    buf.set_stringn(
        area.x,
        area.y,
        "phase",
        usize::from(layout::LABEL_W - 1),
        DIM,
    );
    // Per column: the deepest range that covers its middle and is at least a column long, else
    // the outermost one covering it.
    let mut best: Vec<Option<usize>> = vec![None; cols];
    for (i, r) in state.store.nvtx.iter().enumerate() {
        if r.end_ns <= t0 || r.start_ns >= t1 {
            continue;
        }
        // Deeper ranges win once they are wide enough to carry a label.
        // Saturating: a damaged trace may hold ranges that reach the ends of i64.
        let len = r.end_ns.saturating_sub(r.start_ns);
        let wide = len >= col.saturating_mul(4);
        let a = r
            .start_ns
            .saturating_sub(t0)
            .saturating_sub(col / 2)
            .max(0)
            .saturating_add(col - 1)
            / col;
        let b = r
            .end_ns
            .saturating_sub(t0)
            .saturating_sub(col / 2 + 1)
            .div_euclid(col);
        let mut c = a;
        while c <= b && (c as usize) < cols {
            let slot = &mut best[c as usize];
            let take = match slot {
                None => true,
                Some(j) => {
                    let o = &state.store.nvtx[*j];
                    (wide && r.depth > o.depth)
                        || (o.end_ns.saturating_sub(o.start_ns) < col.saturating_mul(4)
                            && r.depth < o.depth)
                }
            };
            if take {
                *slot = Some(i);
            }
            c += 1;
        }
    }
    let x0 = heat_x(area);
    let color = state.options.palette.is_color();
    let mut c = 0;
    while c < cols {
        let Some(i) = best[c] else {
            c += 1;
            continue;
        };
        let mut e = c;
        while e + 1 < cols && best[e + 1] == Some(i) {
            e += 1;
        }
        // Escaped as every text output escapes names from a recording (the buffer would drop
        // control characters silently).
        let name = cufall_text::escape(&state.store.nvtx[i].name);
        let len = e - c + 1;
        let text: String = if color {
            format!("{name:<len$}").chars().take(len).collect()
        } else {
            format!("|{name:<len$}").chars().take(len).collect()
        };
        let style = if color {
            Style::new().bg(phase_color(&name)).fg(Color::White)
        } else {
            Style::new()
        };
        buf.set_stringn(x0 + c as u16, area.y, text, len, style);
        c = e + 1;
    }
}

fn nice_step(min_ns: i64) -> i64 {
    let mut s = 1i64;
    loop {
        for m in [1, 2, 5] {
            if s.saturating_mul(m) >= min_ns {
                return s.saturating_mul(m);
            }
        }
        s = s.saturating_mul(10);
    }
}

fn draw_axis(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let (t0, t1) = state.window();
    let col = state.col_ns();
    let cols = state
        .cols()
        .min(usize::from(area.width.saturating_sub(layout::LABEL_W)));
    let x0 = heat_x(area);
    let rel_to_end = state.follow;
    buf.set_stringn(
        area.x,
        area.y,
        if rel_to_end { "t-now" } else { "t" },
        usize::from(layout::LABEL_W - 1),
        DIM,
    );
    let step = nice_step(col.saturating_mul(12));
    let origin = if rel_to_end {
        t1
    } else {
        state.origin_ns.unwrap_or(t0)
    };
    let mut k = t0.saturating_sub(origin).div_euclid(step);
    let mut last_end = 0usize;
    loop {
        let t = origin.saturating_add(k.saturating_mul(step));
        k += 1;
        if t >= t1 || t == i64::MAX {
            break;
        }
        if t < t0 {
            continue;
        }
        let c = (t.saturating_sub(t0) / col) as usize;
        if c >= cols || c < last_end {
            continue;
        }
        let label = format!("╵{}", Nanos(t.saturating_sub(origin)).compact());
        let n = label.chars().count();
        if c + n > cols {
            break;
        }
        buf.set_string(x0 + c as u16, area.y, &label, DIM);
        last_end = c + n + 1;
    }
    // Marks [start, end) on the axis row: `mono` without colour, `colored` in `fg`.
    let color = state.options.palette.is_color();
    let mut mark = |start: i64, end: i64, mono: char, colored: char, fg: Color| {
        let a = (start.max(t0).saturating_sub(t0) / col) as usize;
        let b = ((end.min(t1).saturating_sub(t0).saturating_sub(1) / col) as usize).max(a);
        for c in a..=b.min(cols.saturating_sub(1)) {
            let cell = &mut buf[(x0 + c as u16, area.y)];
            if color {
                cell.set_char(colored).set_style(Style::new().fg(fg));
            } else {
                cell.set_char(mono);
            }
        }
    };
    // The selected gap under the axis's labels.
    if let Some((_, g)) = state.selected_gap()
        && g.end_ns > t0
        && g.start_ns < t1
    {
        mark(g.start_ns, g.end_ns, '=', '━', Color::Yellow);
    }
    // Drop marks over the axis, for any GPU.
    for d in 0..state.store.devices.len() {
        for r in state.store.drops_in(d, t0, t1) {
            mark(r.start_ns, r.end_ns, '^', '▲', Color::Red);
        }
    }
}

fn draw_status(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let store = &state.store;
    let (t0, t1) = state.window();
    let mut parts: Vec<String> = Vec::new();
    if let Some((i, g)) = state.selected_gap() {
        parts.push(format!("gap {}/{}: {}", i + 1, state.gaps.len(), g.text));
    }
    if let Some(why) = &store.counters_unavailable {
        parts.push(format!("counters unavailable: {why}"));
    }
    let mut drops = Vec::new();
    for (d, dev) in store.devices.iter().enumerate() {
        let (mut n, mut ns, mut lost) = (0u64, 0i64, 0u64);
        for r in store.drops_in(d, t0, t1) {
            n += 1;
            ns = ns.saturating_add(r.end_ns.saturating_sub(r.start_ns));
            lost += r.lost_samples.unwrap_or(0);
        }
        if n > 0 {
            let lost = if lost > 0 {
                format!(", {lost} samples")
            } else {
                String::new()
            };
            drops.push(format!(
                "GPU{} {n}× {}{lost}",
                dev.info.id.0,
                Nanos(ns).compact()
            ));
        }
    }
    if drops.is_empty() {
        parts.push("drops in view: none".into());
    } else {
        parts.push(format!("drops in view: {}", drops.join(", ")));
    }
    if store.discarded > 0 {
        parts.push(format!(
            "view fell behind: {} batches not shown (the recording is complete)",
            store.discarded
        ));
    }
    if let Some(m) = store.messages.back() {
        parts.push(m.clone());
    }
    let style = if state.gap_cursor.is_some() {
        Style::new().fg(Color::Yellow)
    } else if drops.is_empty() && store.discarded == 0 {
        DIM
    } else {
        Style::new().fg(Color::Red)
    };
    let style = if state.options.palette.is_color() {
        style
    } else {
        Style::new()
    };
    buf.set_stringn(
        area.x,
        area.y,
        parts.join("  ·  "),
        usize::from(area.width),
        style,
    );
}

fn draw_footer(buf: &mut Buffer, area: Rect, state: &HeatmapState) {
    let mut short = vec![
        ("q", "quit"),
        ("?", "help"),
        ("space", "pause"),
        ("+/-", "zoom"),
        ("←/→", "pan"),
        ("[ ]", "phase"),
        ("d", "drop"),
    ];
    if !state.gaps.is_empty() {
        short.push(("x", "gap"));
    }
    short.extend([("m", "metric"), ("s", "spread"), ("a", "mean/max")]);
    let mut x = area.x;
    for (k, what) in short {
        let need = (k.chars().count() + what.chars().count() + 3) as u16;
        if x + need > area.right() {
            break;
        }
        buf.set_string(x, area.y, k, Style::new().add_modifier(Modifier::REVERSED));
        buf.set_string(x + k.chars().count() as u16 + 1, area.y, what, DIM);
        x += need;
    }
}

fn draw_help(buf: &mut Buffer, area: Rect) {
    let w = 46.min(area.width);
    let h = (KEYS.len() as u16 + 4).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    for y in r.top()..r.bottom() {
        for x in r.left()..r.right() {
            buf[(x, y)].reset();
        }
    }
    let border = "─".repeat(usize::from(w.saturating_sub(2)));
    buf.set_string(r.x, r.y, format!("┌{border}┐"), Style::new());
    buf.set_string(r.x, r.bottom() - 1, format!("└{border}┘"), Style::new());
    for y in r.y + 1..r.bottom() - 1 {
        buf.set_string(r.x, y, "│", Style::new());
        buf.set_string(r.right() - 1, y, "│", Style::new());
    }
    buf.set_string(r.x + 2, r.y, " keys ", BOLD);
    for (i, (k, what)) in KEYS.iter().enumerate() {
        let y = r.y + 2 + i as u16;
        if y + 1 >= r.bottom() {
            break;
        }
        buf.set_stringn(
            r.x + 2,
            y,
            format!("{k:<11}{what}"),
            usize::from(w - 4),
            Style::new(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        let dur = |ns: i64| Nanos(ns).compact().to_string();
        assert_eq!(dur(850), "850ns");
        assert_eq!(dur(12_500), "12.5µs");
        assert_eq!(dur(16_777_216), "16.8ms");
        assert_eq!(dur(2_000_000_000), "2s");
        assert_eq!(dur(-4_000_000_000), "-4s");
        assert_eq!(dur(125_000_000_000), "2m05s");
        assert_eq!(fmt_si(1.5e9), "1.50G");
        assert_eq!(fmt_si(42.0), "42");
    }
}
