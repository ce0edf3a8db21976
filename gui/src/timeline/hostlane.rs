//! A sampled host thread's lane: its innermost function over time, coloured by the function's
//! name (the colour the same name gets everywhere), waiting samples lighter and hatched; runs
//! of pixel columns showing the same function merged ([`crate::host_threads::HostThread::runs`]);
//! and the whole stack of the sample under the pointer.

use super::geom::{Geom, Hit};
use super::paint::{ab_tag, group_title, hatch, hatch_into, name_color};
use super::rows::{HOST_LEVEL_H, HOST_LEVELS_MAX, Row, is_cufall_thread};
use crate::axis::AxisTime;
use crate::fmt::{Nanos, fmt_offset};
use crate::host_threads::{HostStacks, HostThread, Levels};
use crate::loaded::{Locked, host_of, hosts_differ, shared_extent};
use cufall_trace::model::HostState;
use eframe::egui::{self, Align2, Color32, FontId, Mesh, Pos2, Rect, Shape, Ui};

/// Flame chart boxes narrower than this (points) that follow one another are drawn as one grey
/// box: a zoomed-out busy thread would otherwise be a box per pixel column and level.
const NARROW_PX: f32 = 2.0;
/// Runs at least this wide are labelled with their function.
const LABEL_FROM_PX: f32 = 40.0;

/// A host threads' title row (a fold like a GPU's group) or one thread's track, with its label:
/// the thread's name and, below it, its process (after the recording's host or `A`/`B` with two
/// recordings). An open thread is a flame chart, a level per stack depth, the outermost frame on
/// top; a closed one a lane of its innermost frame.
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
            let host = &traces[ti].s.tables.as_ref()?.host;
            let own = host
                .threads
                .iter()
                .filter(|t| is_cufall_thread(&t.name))
                .count();
            let n = host.threads.len();
            // The settings are not at hand here: the rows left cufall's threads out or not, and
            // the count says which.
            let title = if own > 0 {
                format!("{}host threads ({n}, {own} of cufall)", tag(ti))
            } else {
                format!("{}host threads ({n})", tag(ti))
            };
            group_title(painter, label, &title, folded, ui.visuals().text_color());
            None
        }
        Row::Host { ti, thread, open } => {
            let t = &traces[ti];
            let host = &t.s.tables.as_ref()?.host;
            let th = host.threads.get(thread)?;
            thread_label(ui, painter, label, (host, th), &tag(ti), open);
            let bg = ui.visuals().extreme_bg_color;
            painter.rect_filled(area, 0.0, bg);
            let lane = Lane {
                t,
                host,
                th,
                origin: shared_extent(traces).0,
                background: bg,
            };
            if open {
                flame_chart(painter, &lane, area, geom, pointer)
            } else {
                host_lane(painter, &lane, area, geom, pointer)
            }
        }
        _ => None,
    }
}

/// A thread's name as labels show it: its own, `main thread` for a process's first thread
/// without one, else `thread TID`.
pub fn thread_title(th: &HostThread) -> String {
    if !th.name.is_empty() {
        th.name.clone()
    } else if th.tid == th.pid {
        "main thread".into()
    } else {
        format!("thread {}", th.tid)
    }
}

/// The label of a thread's track: a triangle (open: a flame chart), the thread's name, and its
/// process with the ids on a second line where the row has room (else after the name).
fn thread_label(
    ui: &Ui,
    painter: &egui::Painter,
    label: Rect,
    (host, th): (&HostStacks, &HostThread),
    tag: &str,
    open: bool,
) {
    let p = painter.with_clip_rect(label);
    let text = ui.visuals().text_color();
    let weak = ui.visuals().weak_text_color();
    let y = label.top() + 9.0;
    let c = Pos2::new(label.left() + 10.0, y);
    let tri = if open {
        vec![
            c + egui::vec2(-4.0, -2.5),
            c + egui::vec2(4.0, -2.5),
            c + egui::vec2(0.0, 3.5),
        ]
    } else {
        vec![
            c + egui::vec2(-2.5, -4.0),
            c + egui::vec2(3.5, 0.0),
            c + egui::vec2(-2.5, 4.0),
        ]
    };
    p.add(egui::Shape::convex_polygon(tri, weak, egui::Stroke::NONE));
    let process = format!("{} · tid {}", host.process_name(th.pid), th.tid);
    if label.height() >= 24.0 {
        p.text(
            Pos2::new(label.left() + 18.0, y),
            Align2::LEFT_CENTER,
            format!("{tag}{}", thread_title(th)),
            FontId::proportional(12.0),
            text,
        );
        p.text(
            Pos2::new(label.left() + 18.0, y + 13.0),
            Align2::LEFT_CENTER,
            process,
            FontId::proportional(10.0),
            weak,
        );
    } else {
        let r = p.text(
            Pos2::new(label.left() + 18.0, label.center().y),
            Align2::LEFT_CENTER,
            format!("{tag}{}", thread_title(th)),
            FontId::proportional(12.0),
            text,
        );
        p.text(
            Pos2::new(r.right() + 6.0, label.center().y),
            Align2::LEFT_CENTER,
            process,
            FontId::proportional(10.0),
            weak,
        );
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

/// [`Geom::columns`] of the lane, and their width.
fn columns(t: &Locked<'_>, area: Rect, geom: &Geom) -> (usize, f64, f64, f32) {
    let (ncols, px, t0) = geom.columns(t.slot, area);
    (ncols, px, t0, area.width() / ncols as f32)
}

/// Draws a thread's lane in `area`; returns the hovered sample's tooltip.
fn host_lane(
    painter: &egui::Painter,
    lane: &Lane<'_, '_>,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let (host, th, background) = (lane.host, lane.th, lane.background);
    let (ncols, px, t0, col_w) = columns(lane.t, area, geom);
    for run in th.runs(host, t0, px, ncols, Levels::Leaf) {
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
    hovered(lane, geom, pointer)
}

/// The tooltip of the sample under `pointer`, if any.
fn hovered(lane: &Lane<'_, '_>, geom: &Geom, pointer: Option<Pos2>) -> Option<Hit> {
    let Lane {
        t,
        host,
        th,
        origin,
        ..
    } = *lane;
    let p = pointer?;
    let i = th.at(t.slot.local(geom.t(p.x)))?;
    Some(Hit {
        text: sample_text(host, th, i, t.slot.disp(th.t_ns[i]) - origin),
        span: Some((t.slot.disp(th.t_ns[i]), t.slot.disp(th.end_ns(i)))),
    })
}

/// A thread's flame chart in `area`: a level per stack depth from the outermost frame at the
/// top, the runs of [`Levels::Stack`] as boxes (so boxes nest as calls do); waiting samples are
/// drawn faded and hatched. Returns the hovered sample's tooltip.
fn flame_chart(
    painter: &egui::Painter,
    lane: &Lane<'_, '_>,
    area: Rect,
    geom: &Geom,
    pointer: Option<Pos2>,
) -> Option<Hit> {
    let (host, th, background) = (lane.host, lane.th, lane.background);
    let levels = th.max_depth.clamp(1, HOST_LEVELS_MAX);
    let (ncols, px, t0, col_w) = columns(lane.t, area, geom);
    let mut fills = Mesh::default();
    let mut lines = Mesh::default();
    let mut labels: Vec<(Rect, u32)> = Vec::new();
    // Per level, boxes narrower than NARROW_PX that follow one another, drawn as one grey box
    // (a zoomed-out view of a busy thread has a box per pixel column and level otherwise):
    // its x range.
    let mut narrow: Vec<Option<(f32, f32)>> = vec![None; levels];
    let level_y = |d: usize| {
        let top = area.top() + 1.0 + d as f32 * HOST_LEVEL_H;
        top..=top + HOST_LEVEL_H - 1.0
    };
    let flush = |fills: &mut Mesh, d: usize, run: Option<(f32, f32)>| {
        if let Some((x0, x1)) = run {
            let r = Rect::from_x_y_ranges(x0..=x1, level_y(d));
            fills.add_colored_rect(r, Color32::from_gray(120));
        }
    };
    for run in th.runs(host, t0, px, ncols, Levels::Stack(levels)) {
        let d = run.level;
        let r = Rect::from_x_y_ranges(
            area.left() + run.col0 as f32 * col_w..=area.left() + run.col1 as f32 * col_w,
            level_y(d),
        );
        if r.width() < NARROW_PX {
            match &mut narrow[d] {
                Some((_, x1)) if *x1 >= r.left() - 0.5 => *x1 = r.right(),
                n => {
                    flush(&mut fills, d, n.take());
                    *n = Some((r.left(), r.right()));
                }
            }
            continue;
        }
        flush(&mut fills, d, narrow[d].take());
        let color = name_color(host.function_name(run.function));
        if run.idle {
            fills.add_colored_rect(r, color.lerp_to_gamma(background, 0.6));
            hatch_into(&mut lines, r, Color32::from_black_alpha(90));
        } else {
            fills.add_colored_rect(r, color);
        }
        if r.width() >= LABEL_FROM_PX {
            labels.push((r, run.function));
        }
    }
    for (d, n) in narrow.iter_mut().enumerate() {
        flush(&mut fills, d, n.take());
    }
    painter.add(Shape::mesh(fills));
    if !lines.is_empty() {
        painter.add(Shape::mesh(lines));
    }
    flame_labels(painter, host, &labels);
    hovered(lane, geom, pointer)
}

/// The names of the boxes wide enough for one.
fn flame_labels(painter: &egui::Painter, host: &HostStacks, labels: &[(Rect, u32)]) {
    for &(r, function) in labels {
        painter.with_clip_rect(r.shrink(1.0)).text(
            Pos2::new(r.left() + 2.0, r.center().y),
            Align2::LEFT_CENTER,
            host.function_name(function),
            FontId::proportional(10.0),
            Color32::BLACK,
        );
    }
}

/// A sample's tooltip: thread, time, state, GIL, then the stack from the innermost frame out.
fn sample_text(host: &HostStacks, th: &HostThread, i: usize, at_ns: f64) -> String {
    let state = match th.state[i] {
        HostState::Running => "running",
        HostState::Idle => "waiting (idle)",
    };
    let process = if th.tid == th.pid {
        String::new()
    } else {
        format!(" in {}", host.process_name(th.pid))
    };
    let mut s = format!(
        "{}/{} {}{process}\nat {} (sampled every {})\n{state}, GIL {}\n",
        th.pid,
        th.tid,
        thread_title(th),
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
