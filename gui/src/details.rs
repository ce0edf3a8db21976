//! The details pane along the bottom of the window (as Perfetto's): what is inside the
//! selection, one tab at a time: the figures per GPU and metric, the flame graph (icicle) of the
//! host stacks sampled in it, and its kernels, NVTX ranges, idle gaps and host frames as tables
//! that sort by a click on a column's title. With two recordings each table holds both, a column
//! saying whose; a phase selected in the side panel is each recording's own range of it.

use crate::flame::Icicle;
use crate::fmt::{Nanos, fmt_offset, fmt_pct, fmt_value, plain, round_ns, short_metric};
use crate::host_threads::HostStacks;
use crate::icicle::icicle_ui;
use crate::loaded::{Locked, shared_extent, trace_tag};
use crate::stats::SelectionStats;
use crate::view::{AxisTime, DetailsTab, Input, ViewState};
use cufall_analysis::names::short_kernel_name;
use eframe::egui::{self, RichText, Ui};
use std::cmp::Ordering;

/// The most rows a table shows (the longest first, or as sorted).
pub const TABLE_ROWS: usize = 500;

/// The pane's contents: the tabs, then the chosen one; returns what the user did in it, for
/// [`ViewState::apply`].
pub fn details_ui(
    ui: &mut Ui,
    traces: &[Locked<'_>],
    st: &ViewState,
    (sel, flame): (Option<&SelectionStats>, Option<&Icicle>),
) -> Vec<Input> {
    let mut out = Vec::new();
    // The tab drawn this frame: the one clicked takes effect at once.
    let mut shown = st.details_tab;
    ui.horizontal(|ui| {
        for (tab, name) in DetailsTab::ALL {
            if ui.selectable_label(shown == tab, name).clicked() {
                shown = tab;
                out.push(Input::ShowDetailsTab(tab));
            }
        }
        ui.separator();
        match sel {
            Some(s) => ui.label(
                RichText::new(format!(
                    "selection {} from {}",
                    round_ns(s.b - s.a),
                    fmt_offset(s.a - shared_extent(traces).0, 1e5)
                ))
                .strong(),
            ),
            None => ui.label(
                "No selection: Shift+drag on the timeline, or click a range, kernel, gap or phase.",
            ),
        };
    });
    ui.separator();
    let Some(sel) = sel else {
        return out;
    };
    let sort = (shown, st.details_sort);
    egui::ScrollArea::both()
        .id_salt(("details", format!("{shown:?}")))
        .auto_shrink([false, false])
        .show(ui, |ui| match shown {
            DetailsTab::Summary => summary_ui(ui, sel),
            DetailsTab::Flame => icicle_ui(ui, traces, st.flame_pick, flame, &mut out),
            DetailsTab::Kernels => {
                let t = kernels_table(traces, sel);
                table_ui(ui, "kernels", &t, sort, &mut out);
            }
            DetailsTab::Ranges => {
                let t = ranges_table(traces, sel);
                table_ui(ui, "ranges", &t, sort, &mut out);
            }
            DetailsTab::Gaps => {
                let t = gaps_table(traces, sel);
                table_ui(ui, "gaps", &t, sort, &mut out);
            }
            DetailsTab::Frames => {
                let pick = st.flame_pick.ti;
                let t = match (flame, traces.get(pick).and_then(|t| t.s.tables.as_ref())) {
                    (Some(ic), Some(tb)) => frames_table(&tb.host, ic),
                    _ => Table::default(),
                };
                if t.rows.is_empty() {
                    ui.label("No host samples in the selection.");
                } else {
                    ui.label(format!(
                        "host frames of {} (the flame graph's threads): share of the samples with \
                         the frame on the stack, and as the innermost frame",
                        crate::loaded::trace_tag(traces.len(), pick).trim_end()
                    ));
                }
                table_ui(ui, "frames", &t, sort, &mut out);
            }
        });
    out
}

/// A cell's value for sorting.
#[derive(Clone, Debug, PartialEq)]
pub enum Key {
    Num(f64),
    Text(String),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Num(a), Key::Num(b)) => a.total_cmp(b),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            (Key::Num(_), Key::Text(_)) => Ordering::Less,
            (Key::Text(_), Key::Num(_)) => Ordering::Greater,
        }
    }
}

/// One row: its cells as shown, their sort keys, a hover text for the first text cell, and the
/// time it stands for (a click selects it and zooms there).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableRow {
    pub cells: Vec<String>,
    pub keys: Vec<Key>,
    pub hover: Option<String>,
    pub span: Option<(AxisTime, AxisTime)>,
}

/// A table of the pane: column titles, rows, and the column it sorts by first (descending).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<&'static str>,
    pub rows: Vec<TableRow>,
    pub default_sort: usize,
    /// Rows left out past [`TABLE_ROWS`].
    pub more: usize,
}

impl Table {
    /// The rows in the order of column `col` (descending or not), ties by the first column.
    pub fn sorted(&self, (col, desc): (usize, bool)) -> Vec<&TableRow> {
        let mut rows: Vec<&TableRow> = self.rows.iter().collect();
        rows.sort_by(|a, b| {
            let o = match (a.keys.get(col), b.keys.get(col)) {
                (Some(x), Some(y)) => x.cmp(y),
                _ => Ordering::Equal,
            };
            let o = if desc { o.reverse() } else { o };
            o.then_with(|| match (a.keys.first(), b.keys.first()) {
                (Some(x), Some(y)) => x.cmp(y),
                _ => Ordering::Equal,
            })
        });
        rows
    }
}

/// Draws a table: a click on a column's title sorts by it (again: the other way); a click on a
/// row with a time selects it and zooms there. `(tab, sort)`: the tab shown and the order the
/// user chose last ([`ViewState::details_sort`]).
fn table_ui(
    ui: &mut Ui,
    id: &str,
    t: &Table,
    (tab, sort): (DetailsTab, Option<(DetailsTab, usize, bool)>),
    out: &mut Vec<Input>,
) {
    if t.headers.is_empty() {
        return;
    }
    if t.rows.is_empty() {
        ui.label(format!("No {id} in the selection."));
        return;
    }
    let sort = match sort {
        Some((of, col, desc)) if of == tab && col < t.headers.len() => (col, desc),
        _ => (t.default_sort, true),
    };
    let mut click = None;
    egui::Grid::new(("details", id))
        .striped(true)
        .num_columns(t.headers.len())
        .show(ui, |ui| {
            for (c, h) in t.headers.iter().enumerate() {
                let arrow = match (sort.0 == c, sort.1) {
                    (true, true) => " v",
                    (true, false) => " ^",
                    _ => "",
                };
                let resp = ui
                    .selectable_label(sort.0 == c, format!("{h}{arrow}"))
                    .on_hover_text("click: sort by this column (again: the other way)");
                if resp.clicked() {
                    let desc = if sort.0 == c { !sort.1 } else { true };
                    click = Some((c, desc));
                }
            }
            ui.end_row();
            for row in t.sorted(sort) {
                for (c, cell) in row.cells.iter().enumerate() {
                    let resp = if c == 0 && row.span.is_some() {
                        ui.selectable_label(false, cell)
                    } else {
                        ui.label(cell)
                    };
                    let resp = match (&row.hover, c) {
                        (Some(h), 0) => resp.on_hover_text(h),
                        _ => resp,
                    };
                    if resp.clicked()
                        && let Some((a, b)) = row.span
                    {
                        let margin = 0.5;
                        out.push(Input::Fit { a, b, margin });
                        out.push(Input::Select { a, b });
                    }
                }
                ui.end_row();
            }
        });
    if t.more > 0 {
        ui.label(format!("… and {} more rows", t.more));
    }
    if let Some((c, desc)) = click {
        out.push(Input::SortDetails { tab, col: c, desc });
    }
}

/// The figures per recording, GPU and metric: mean, minimum, maximum, idle share.
fn summary_ui(ui: &mut Ui, sel: &SelectionStats) {
    if !sel.exact {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("edge samples loading: values at the edges estimated");
        });
    }
    ui.horizontal_top(|ui| {
        for t in &sel.traces {
            ui.vertical(|ui| {
                ui.strong(&t.name);
                ui.label(format!(
                    "{} kernels, {} NVTX ranges inside",
                    t.kernel_count, t.range_count
                ));
                for d in &t.devices {
                    ui.label(format!(
                        "{}{}: sampled {}{}",
                        t.host.as_ref().map_or(String::new(), |h| format!("{h}:")),
                        d.device,
                        Nanos(d.sampled_ns),
                        d.idle_fraction
                            .map_or(String::new(), |f| format!(", idle {}", fmt_pct(f)))
                    ));
                    egui::Grid::new(("sel", &t.name, d.device))
                        .striped(true)
                        .num_columns(4)
                        .show(ui, |ui| {
                            ui.strong("metric");
                            ui.strong("mean");
                            ui.strong("min");
                            ui.strong("max");
                            ui.end_row();
                            for m in &d.metrics {
                                ui.label(short_metric(&m.name)).on_hover_text(&m.name);
                                let s = &m.summary;
                                if s.is_empty() {
                                    for _ in 0..3 {
                                        ui.label("–");
                                    }
                                } else {
                                    ui.label(s.mean().map_or("–".into(), fmt_value));
                                    ui.label(fmt_value(s.min));
                                    ui.label(fmt_value(s.max));
                                }
                                ui.end_row();
                            }
                        });
                }
            });
            ui.add_space(24.0);
        }
    });
}

/// `A`, `B`, ... with several recordings, else nothing.
fn whose(n: usize, ti: usize) -> String {
    trace_tag(n, ti).trim_end().to_string()
}

/// The columns before a table's own: whose, with two recordings or more.
fn with_whose(n: usize, headers: &[&'static str]) -> Vec<&'static str> {
    let mut h = Vec::new();
    if n > 1 {
        h.push("rec");
    }
    h.extend_from_slice(headers);
    h
}

/// A row with its recording's tag in front where there are several.
fn row(n: usize, ti: usize, cells: Vec<(String, Key)>) -> TableRow {
    let mut r = TableRow::default();
    if n > 1 {
        r.cells.push(whose(n, ti));
        r.keys.push(Key::Num(ti as f64));
    }
    for (c, k) in cells {
        r.cells.push(c);
        r.keys.push(k);
    }
    r
}

/// Kernels inside the selection by short name: count, time inside, share of the selection.
pub fn kernels_table(traces: &[Locked<'_>], sel: &SelectionStats) -> Table {
    names_table(traces, sel, true)
}

/// NVTX ranges inside the selection by name.
pub fn ranges_table(traces: &[Locked<'_>], sel: &SelectionStats) -> Table {
    names_table(traces, sel, false)
}

fn names_table(traces: &[Locked<'_>], sel: &SelectionStats, kernels: bool) -> Table {
    let n = sel.traces.len().max(traces.len());
    let mut t = Table {
        headers: with_whose(
            n,
            &[
                if kernels { "kernel" } else { "range" },
                "count",
                "time inside",
                "of the selection",
            ],
        ),
        default_sort: if n > 1 { 3 } else { 2 },
        ..Table::default()
    };
    let len = (sel.b - sel.a).max(1.0);
    for (ti, ts) in sel.traces.iter().enumerate() {
        let list = if kernels { &ts.kernels } else { &ts.ranges };
        for s in list {
            let shown = if kernels {
                short_kernel_name(&s.name).to_string()
            } else {
                s.name.clone()
            };
            let mut r = row(
                n,
                ti,
                vec![
                    (shown.clone(), Key::Text(shown.clone())),
                    (s.count.to_string(), Key::Num(s.count as f64)),
                    (Nanos(s.inside_ns).to_string(), Key::Num(s.inside_ns as f64)),
                    (
                        fmt_pct(s.inside_ns as f64 / len),
                        Key::Num(s.inside_ns as f64),
                    ),
                ],
            );
            if shown != s.name {
                r.hover = Some(s.name.clone());
            }
            t.rows.push(r);
        }
    }
    cap(&mut t);
    t
}

/// The idle gaps of every GPU that meet the selection: GPU, start, length, place.
pub fn gaps_table(traces: &[Locked<'_>], sel: &SelectionStats) -> Table {
    let n = traces.len();
    let origin = shared_extent(traces).0;
    let mut t = Table {
        headers: with_whose(n, &["length", "GPU", "at", "where"]),
        default_sort: usize::from(n > 1),
        ..Table::default()
    };
    for (ti, tr) in traces.iter().enumerate() {
        let (t0, t1) = sel
            .windows
            .get(ti)
            .copied()
            .unwrap_or((tr.slot.local(sel.a), tr.slot.local(sel.b)));
        for (dev, g) in &tr.s.gaps_by_device {
            let lo = g.end_ns.partition_point(|e| *e <= t0);
            let hi = g.start_ns.partition_point(|s| *s < t1).max(lo);
            for k in lo..hi {
                let d = g.duration_ns(k);
                let at = tr.slot.disp(g.start_ns[k]);
                let mut r = row(
                    n,
                    ti,
                    vec![
                        (Nanos(d).to_string(), Key::Num(d as f64)),
                        (dev.0.to_string(), Key::Num(f64::from(dev.0))),
                        (fmt_offset(at - origin, 1e5), Key::Num(at - origin)),
                        (plain(g.place(k)), Key::Text(plain(g.place(k)))),
                    ],
                );
                r.span = Some((at, tr.slot.disp(g.end_ns[k])));
                r.hover = Some("click: select the gap and zoom to it".into());
                t.rows.push(r);
            }
        }
    }
    cap(&mut t);
    t
}

/// The host frames of the flame graph's samples by function: samples with the function on the
/// stack (a recursive call counted once), and as the innermost frame.
pub fn frames_table(host: &HostStacks, ic: &Icicle) -> Table {
    use std::collections::HashMap;
    let mut by_fn: HashMap<u32, (u64, u64)> = HashMap::new();
    for (i, node) in ic.nodes.iter().enumerate() {
        let Some(f) = host.frames.get(node.frame as usize) else {
            continue;
        };
        let e = by_fn.entry(f.function).or_default();
        e.1 += node.own;
        // On the stack once: not under a box of the same function.
        let mut up = ic.nodes[i].parent;
        let mut nested = false;
        while let Some(p) = up {
            if host
                .frames
                .get(ic.nodes[p].frame as usize)
                .map(|x| x.function)
                == Some(f.function)
            {
                nested = true;
                break;
            }
            up = ic.nodes[p].parent;
        }
        if !nested {
            e.0 += node.count;
        }
    }
    let total = ic.total.max(1) as f64;
    let mut t = Table {
        headers: vec!["function", "on the stack", "innermost", "samples"],
        default_sort: 1,
        ..Table::default()
    };
    for (f, (on, own)) in by_fn {
        let name = host.function_name(f).to_string();
        t.rows.push(TableRow {
            cells: vec![
                name.clone(),
                fmt_pct(on as f64 / total),
                fmt_pct(own as f64 / total),
                on.to_string(),
            ],
            keys: vec![
                Key::Text(name),
                Key::Num(on as f64),
                Key::Num(own as f64),
                Key::Num(on as f64),
            ],
            hover: None,
            span: None,
        });
    }
    cap(&mut t);
    t
}

/// Keeps the [`TABLE_ROWS`] first rows in the default order.
fn cap(t: &mut Table) {
    if t.rows.len() <= TABLE_ROWS {
        return;
    }
    let order: Vec<TableRow> = t
        .sorted((t.default_sort, true))
        .into_iter()
        .take(TABLE_ROWS)
        .cloned()
        .collect();
    t.more = t.rows.len() - order.len();
    t.rows = order;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, v: f64) -> TableRow {
        TableRow {
            cells: vec![name.into(), v.to_string()],
            keys: vec![Key::Text(name.into()), Key::Num(v)],
            ..TableRow::default()
        }
    }

    #[test]
    fn tables_sort_by_any_column_either_way() {
        let t = Table {
            headers: vec!["name", "time"],
            rows: vec![r("b", 2.0), r("a", 2.0), r("c", 9.0)],
            default_sort: 1,
            more: 0,
        };
        let names = |s| -> Vec<String> { t.sorted(s).iter().map(|r| r.cells[0].clone()).collect() };
        // Ties in the sorted column go by the first.
        assert_eq!(names((1, true)), ["c", "a", "b"]);
        assert_eq!(names((1, false)), ["a", "b", "c"]);
        assert_eq!(names((0, true)), ["c", "b", "a"]);
        assert_eq!(names((0, false)), ["a", "b", "c"]);
    }

    #[test]
    fn long_tables_keep_their_first_rows() {
        let mut t = Table {
            headers: vec!["name", "time"],
            rows: (0..TABLE_ROWS + 7)
                .map(|i| r(&format!("k{i}"), i as f64))
                .collect(),
            default_sort: 1,
            more: 0,
        };
        cap(&mut t);
        assert_eq!(t.rows.len(), TABLE_ROWS);
        assert_eq!(t.more, 7);
        assert_eq!(
            t.sorted((1, true))[0].cells[0],
            format!("k{}", TABLE_ROWS + 6)
        );
    }
}
