//! A sampled host thread's lane: its innermost function over time, coloured by the function's
//! name (the colour the same name gets everywhere), waiting samples lighter and hatched; runs
//! of pixel columns showing the same function merged ([`crate::host::HostThread::runs`]); and
//! the whole stack of the sample under the pointer.

use super::geom::{Geom, Hit};
use super::paint::{ab_tag, group_title, hatch, name_color};
use super::rows::Row;
use crate::axis::AxisTime;
use crate::fmt::{Nanos, fmt_offset};
use crate::host::{HostStacks, HostThread};
use crate::model::{Locked, host_of, hosts_differ, shared_extent};
use cufall_trace::model::HostState;
use eframe::egui::{self, Align2, Color32, FontId, Pos2, Rect, Ui};

/// Runs at least this wide are labelled with their function.
const LABEL_FROM_PX: f32 = 40.0;

/// A host threads' title row (a fold like a GPU's group) or one thread's lane, with its label
/// (`pid/tid name`, after the recording's host or `A`/`B` with two recordings).
pub(super) fn host_row(
    ui: &Ui,
    painter: &egui::Painter,
    row: Row,
    (label, area): (Rect, Rect),
    traces: &[Locked<'_>],
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let tag = |ti: usize| {
        if hosts_differ(traces) {
            format!("{} ", host_of(&traces[ti]))
        } else {
            ab_tag(traces, ti)
        }
    };
    match row {
        Row::HostTitle { ti, folded } => {
            let n = traces[ti]
                .s
                .tables
                .as_ref()
                .map_or(0, |tb| tb.host.threads.len());
            let title = format!("{}host threads ({n})", tag(ti));
            group_title(painter, label, &title, folded, ui.visuals().text_color());
            None
        }
        Row::Host { ti, thread } => {
            let t = &traces[ti];
            let host = &t.s.tables.as_ref()?.host;
            let th = host.threads.get(thread)?;
            painter.with_clip_rect(label).text(
                Pos2::new(label.left() + 6.0, label.center().y),
                Align2::LEFT_CENTER,
                format!("{}{}/{} {}", tag(ti), th.pid, th.tid, th.name),
                FontId::proportional(12.0),
                ui.visuals().weak_text_color(),
            );
            let bg = ui.visuals().extreme_bg_color;
            painter.rect_filled(area, 0.0, bg);
            let lane = Lane {
                t,
                host,
                th,
                origin: shared_extent(traces).0,
                background: bg,
            };
            host_lane(painter, &lane, area, geom, pointer)
        }
        _ => None,
    }
}

/// What a lane draws: thread `th` of recording `t`, times shown from `origin`.
struct Lane<'a, 'b> {
    t: &'a Locked<'b>,
    host: &'a HostStacks,
    th: &'a HostThread,
    origin: AxisTime,
    background: Color32,
}

/// Draws a thread's lane in `area`; returns the hovered sample's tooltip.
fn host_lane(
    painter: &egui::Painter,
    lane: &Lane<'_, '_>,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let Lane {
        t,
        host,
        th,
        origin,
        background,
    } = *lane;
    let ncols = area.width().max(1.0) as usize;
    let px = geom.px_ns();
    let t0 = t.slot.local(geom.view.t0) as f64 + f64::from(area.left() - geom.x0) * px;
    let col_w = area.width() / ncols as f32;
    for run in th.runs(host, t0, px, ncols) {
        let r = Rect::from_x_y_ranges(
            area.left() + run.col0 as f32 * col_w..=area.left() + run.col1 as f32 * col_w,
            area.top() + 1.0..=area.bottom() - 1.0,
        );
        let name = host.function_name(run.function);
        let color = name_color(name);
        if run.idle {
            // Waiting: the function's colour faded towards the background, hatched, so that a
            // thread blocked in `cudaStreamSynchronize` reads differently from one computing.
            painter.rect_filled(r, 0.0, color.lerp_to_gamma(background, 0.6));
            hatch(painter, r, Color32::from_black_alpha(90));
        } else {
            painter.rect_filled(r, 0.0, color);
        }
        if r.width() >= LABEL_FROM_PX {
            painter.with_clip_rect(r.shrink(1.0)).text(
                Pos2::new(r.left() + 3.0, r.center().y),
                Align2::LEFT_CENTER,
                name,
                FontId::proportional(11.0),
                Color32::BLACK,
            );
        }
    }
    let p = pointer?;
    let i = th.at(t.slot.local(geom.t(p.x)))?;
    Some(Hit {
        text: sample_text(host, th, i, t.slot.disp(th.t_ns[i]) - origin),
        span: Some((t.slot.disp(th.t_ns[i]), t.slot.disp(th.end_ns(i)))),
    })
}

/// A sample's tooltip: thread, time, state, GIL, then the stack from the innermost frame out.
fn sample_text(host: &HostStacks, th: &HostThread, i: usize, at_ns: f64) -> String {
    let state = match th.state[i] {
        HostState::Running => "running",
        HostState::Idle => "waiting (idle)",
    };
    let mut s = format!(
        "{}/{} {}\nat {} (sampled every {})\n{state}, GIL {}\n",
        th.pid,
        th.tid,
        th.name,
        fmt_offset(at_ns, 1e5),
        Nanos(th.interval_ns),
        th.gil[i].as_str(),
    );
    let frames = host.stack(th.stack[i]);
    if frames.is_empty() {
        s.push_str("(stack not in the recording)");
    }
    // A deep stack is cut in the middle of the tooltip, not at its end, where `main` is.
    const SHOWN: usize = 24;
    for (k, f) in frames.iter().enumerate() {
        if frames.len() > SHOWN && k == SHOWN / 2 {
            s.push_str(&format!("  … {} frames …\n", frames.len() - SHOWN));
        }
        if frames.len() > SHOWN && k >= SHOWN / 2 && k < frames.len() - SHOWN / 2 {
            continue;
        }
        s.push_str(&host.frame_line(*f));
        s.push('\n');
    }
    s.trim_end().to_string()
}
