//! The side panel's flame graph of the selection: whose host samples (a recording's threads,
//! all or one), then the icicle ([`crate::flame::Icicle`]) scaled to the panel's width, the
//! outermost frames on top, each box coloured by its function as on the host lanes, its label
//! cut to fit; hovering a box gives its function, file:line and share of the samples.

use crate::flame::Icicle;
use crate::host_threads::HostStacks;
use crate::loaded::{Locked, host_of, hosts_differ};
use crate::timeline::name_color;
use crate::view::{FlamePick, Input};
use eframe::egui::{
    self, Color32, FontId, Pos2, Rect, Sense, Stroke, StrokeKind, Ui, Vec2, text::LayoutJob,
    text::TextWrapping,
};

/// Height of one row of boxes.
const ROW_H: f32 = 18.0;
/// Boxes narrower than this are drawn without a label.
const LABEL_FROM_PX: f32 = 14.0;

/// The flame graph section of the Selection tab, of `pick`'s samples; nothing when no recording
/// has host samples. A change of whose samples goes to `out`.
pub fn icicle_ui(
    ui: &mut Ui,
    traces: &[Locked<'_>],
    pick: FlamePick,
    icicle: Option<&Icicle>,
    out: &mut Vec<Input>,
) {
    let with_host: Vec<usize> = (0..traces.len())
        .filter(|ti| {
            traces[*ti]
                .s
                .tables
                .as_ref()
                .is_some_and(|tb| !tb.host.is_empty())
        })
        .collect();
    if with_host.is_empty() {
        return;
    }
    // Whose samples this frame draws: a change takes effect at once.
    let mut shown = pick;
    if !with_host.contains(&shown.ti) {
        shown = FlamePick {
            ti: with_host[0],
            thread: None,
        };
    }
    ui.separator();
    ui.strong("Host stacks in the selection");
    pick_ui(ui, traces, &with_host, &mut shown);
    if shown != pick {
        out.push(Input::PickFlame(shown));
    }
    let (Some(ic), Some(tb)) = (icicle, traces[shown.ti].s.tables.as_ref()) else {
        return;
    };
    if ic.total == 0 {
        ui.label("No host samples in the selection.");
        return;
    }
    ui.label(format!(
        "{} samples{}; width: share of the samples, top: outermost frame",
        ic.total,
        if ic.unknown > 0 {
            format!(" ({} more without a stack in the recording)", ic.unknown)
        } else {
            String::new()
        }
    ));
    draw_icicle(ui, &tb.host, ic);
}

/// The combo that chooses whose samples: every thread of a recording, or one thread.
fn pick_ui(ui: &mut Ui, traces: &[Locked<'_>], with_host: &[usize], pick: &mut FlamePick) {
    let who = |ti: usize| {
        if hosts_differ(traces) {
            format!("{}: ", host_of(&traces[ti]))
        } else {
            // `A: ` where there are several recordings.
            crate::loaded::trace_tag(traces.len(), ti).replace(' ', ": ")
        }
    };
    let thread_name = |ti: usize, (pid, tid): (u32, u32)| {
        let name = traces[ti]
            .s
            .tables
            .as_ref()
            .and_then(|tb| {
                tb.host
                    .threads
                    .iter()
                    .find(|t| (t.pid, t.tid) == (pid, tid))
            })
            .map_or("", |t| t.name.as_str());
        format!("{}{pid}/{tid} {name}", who(ti))
    };
    let current = match pick.thread {
        None => format!("{}all threads", who(pick.ti)),
        Some(th) => thread_name(pick.ti, th),
    };
    egui::ComboBox::from_label("threads")
        .selected_text(current)
        .show_ui(ui, |ui| {
            for &ti in with_host {
                let all = FlamePick { ti, thread: None };
                ui.selectable_value(pick, all, format!("{}all threads", who(ti)));
                let Some(tb) = traces[ti].s.tables.as_ref() else {
                    continue;
                };
                for th in &tb.host.threads {
                    let one = FlamePick {
                        ti,
                        thread: Some((th.pid, th.tid)),
                    };
                    let label = thread_name(ti, (th.pid, th.tid));
                    ui.selectable_value(pick, one, label);
                }
            }
        });
}

/// The boxes, scaled to the available width; the hovered box's details as a tooltip.
fn draw_icicle(ui: &mut Ui, host: &HostStacks, ic: &Icicle) {
    let width = ui.available_width().max(100.0);
    let (rect, resp) =
        ui.allocate_exact_size(Vec2::new(width, ROW_H * ic.depth as f32), Sense::hover());
    let painter = ui.painter_at(rect);
    let scale = width / ic.total as f32;
    let pointer = resp.hover_pos();
    let mut hovered = None;
    for n in &ic.nodes {
        let x0 = rect.left() + n.start as f32 * scale;
        let x1 = rect.left() + (n.start + n.count) as f32 * scale;
        let y0 = rect.top() + n.depth as f32 * ROW_H;
        let r = Rect::from_min_max(Pos2::new(x0, y0), Pos2::new(x1, y0 + ROW_H - 1.0));
        let Some(frame) = host.frames.get(n.frame as usize) else {
            continue;
        };
        let name = host.names.get(frame.function);
        painter.rect_filled(r, 0.0, name_color(name));
        if r.width() >= LABEL_FROM_PX {
            let mut job = LayoutJob::simple_singleline(
                name.to_string(),
                FontId::proportional(11.0),
                Color32::BLACK,
            );
            job.wrap = TextWrapping::truncate_at_width(r.width() - 4.0);
            let galley = painter.layout_job(job);
            let y = r.center().y - galley.size().y / 2.0;
            painter.galley(Pos2::new(r.left() + 2.0, y), galley, Color32::BLACK);
        }
        if pointer.is_some_and(|p| r.contains(p)) {
            painter.rect_stroke(r, 0.0, Stroke::new(1.0, Color32::WHITE), StrokeKind::Inside);
            hovered = Some(n);
        }
    }
    if let Some(n) = hovered {
        let share = n.count as f64 / ic.total as f64 * 100.0;
        let own = n.own as f64 / ic.total as f64 * 100.0;
        resp.on_hover_text_at_pointer(format!(
            "{}\n{} of {} samples ({share:.1} %), {own:.1} % in this frame itself",
            host.frame_line(n.frame),
            n.count,
            ic.total
        ));
    }
}
