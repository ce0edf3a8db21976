//! The side panel: per-phase statistics and the largest gaps from the analysis report (a click
//! zooms there), the statistics of the selection, and the comparison of two recordings.

use crate::fmt::{Nanos, fmt_pct, fmt_value, short_metric};
use crate::loaded::{
    DiffState, GAPS_LISTED, Locked, ReportState, gpu_label, hosts_differ, shared_extent,
};
use crate::view::{DetailsTab, Input, SideTab, ViewState};
use cufall_analysis::diff::DiffReport;
use cufall_analysis::report::{PhaseReport, Report};
use cufall_analysis::select::domain_label;
use eframe::egui::{self, RichText, Ui};

/// Draws the side panel; returns what the user did in it, for [`ViewState::apply`].
pub fn side_panel_ui(
    ui: &mut Ui,
    traces: &[Locked<'_>],
    st: &ViewState,
    diff: &DiffState,
) -> Vec<Input> {
    let mut out = Vec::new();
    // The tab drawn this frame: the one clicked takes effect at once.
    let mut tab = st.side_tab;
    // A Compare tab left open when a third recording arrived would compare A with B alone.
    if traces.len() != 2 && tab == SideTab::Compare {
        tab = SideTab::Phases;
        out.push(Input::ShowSideTab(tab));
    }
    ui.horizontal(|ui| {
        let mut tab_ui = |ui: &mut Ui, t: SideTab, name: &str| {
            if ui.selectable_label(tab == t, name).clicked() && tab != t {
                tab = t;
                out.push(Input::ShowSideTab(t));
            }
        };
        tab_ui(ui, SideTab::Phases, "Phases");
        tab_ui(ui, SideTab::Gaps, "Gaps");
        // The comparison is of two recordings; more are the nodes of one run.
        if traces.len() == 2 {
            tab_ui(ui, SideTab::Compare, "Compare");
        }
    });
    ui.separator();
    // Both ways: a table wider than the panel (several metrics with long names) scrolls
    // sideways from its first column. Laid out wider than the panel without a scroll area, the
    // panel grew past its left edge under the timeline, hiding the phase names.
    // A scroll position per tab: the Gaps tab once opened scrolled to where the Phases tab
    // was, its header out of view.
    egui::ScrollArea::both()
        .id_salt(("side-panel", format!("{tab:?}")))
        .auto_shrink([false, false])
        .show(ui, |ui| match tab {
            SideTab::Phases => {
                for (ti, t) in traces.iter().enumerate() {
                    phases_ui(ui, ti, t, &mut out);
                }
            }
            SideTab::Gaps => {
                for (ti, t) in traces.iter().enumerate() {
                    gaps_ui(ui, ti, t, traces, &mut out);
                }
            }
            SideTab::Compare => compare_ui(ui, traces, st, diff, &mut out),
        });
    out
}

fn report_or_placeholder<'a>(ui: &mut Ui, t: &'a Locked<'_>) -> Option<&'a Report> {
    match &t.s.report {
        ReportState::Computing { scanned } => {
            ui.horizontal(|ui| {
                ui.spinner();
                match *scanned {
                    Some((done, total)) => ui.label(format!(
                        "computing the report… samples scanned: {} %",
                        done * 100 / total.max(1)
                    )),
                    None => ui.label("computing the report…"),
                };
            });
            None
        }
        ReportState::NvmlOnly => {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                "this recording has no GPU counters (NVML only): no per-phase statistics",
            );
            None
        }
        ReportState::Failed(e) => {
            ui.colored_label(ui.visuals().warn_fg_color, e);
            None
        }
        ReportState::Ready(r) => Some(r),
    }
}

fn title(ti: usize, t: &Locked<'_>, n: usize) -> String {
    format!("{}{}", crate::loaded::trace_tag(n, ti), t.slot.data.name)
}

fn phases_ui(ui: &mut Ui, ti: usize, t: &Locked<'_>, out: &mut Vec<Input>) {
    ui.heading(title(ti, t, if ti > 0 { 2 } else { 1 }));
    let Some(report) = report_or_placeholder(ui, t) else {
        return;
    };
    let domains = &report.phase_domains;
    if report.phases.is_empty() && report.nvtx_captured {
        ui.label(format!(
            "No NVTX range is a phase with --phases {}: the whole run is one phase.",
            domains.phases
        ));
    } else if report.phases.is_empty() {
        ui.label("No NVTX phases in this recording: the whole run is one phase.");
    }
    if let Some(include) = &domains.include_left_out {
        // Library ranges are drawn on lanes of their own; the panel says why they are not here.
        let left: Vec<String> = domains
            .left_out
            .iter()
            .map(|d| format!("{} ({})", domain_label(&d.domain), d.ranges))
            .collect();
        ui.label(RichText::new(format!("Not phases: {}", left.join(", "))).weak())
            .on_hover_text(format!(
                "Ranges of library domains are drawn on lanes of their own. To make them \
                 phases, open the window with --phases {include}"
            ));
    }
    let metrics: Vec<&str> = report.metrics.iter().map(String::as_str).collect();
    egui::Grid::new(("phases", ti))
        .striped(true)
        .num_columns(4 + metrics.len())
        .show(ui, |ui| {
            ui.strong("phase");
            ui.strong("count");
            ui.strong("time");
            ui.strong("idle");
            for m in &metrics {
                ui.strong(short_metric(m)).on_hover_text(*m);
            }
            ui.end_row();
            let all = std::iter::once(&report.whole_run).chain(report.phases.iter());
            for p in all {
                let label = format!("{}{}", "  ".repeat(p.depth), p.name);
                let resp = ui.selectable_label(false, label).on_hover_text(format!(
                    "{}\n{}\nclick: zoom to its next range",
                    p.path, p.verdict
                ));
                if resp.clicked() {
                    out.push(zoom_to_phase(t, p));
                }
                ui.label(p.count.to_string());
                ui.label(p.total_ns.to_string());
                ui.label(p.idle_fraction.map_or("–".into(), fmt_pct));
                for (m, _) in metrics.iter().enumerate() {
                    let (mean, peak) = phase_metric(p, m);
                    ui.label(format!(
                        "{} / {}",
                        mean.map_or("–".into(), fmt_value),
                        peak.map_or("–".into(), fmt_value)
                    ))
                    .on_hover_text("mean / peak over the phase, all GPUs");
                }
                ui.end_row();
            }
        });
    ui.add_space(8.0);
}

/// Sample-weighted mean and the peak of metric `m` over all GPUs of a phase.
fn phase_metric(p: &PhaseReport, m: usize) -> (Option<f64>, Option<f64>) {
    let mut acc = 0.0;
    let mut w = 0u64;
    let mut peak: Option<f64> = None;
    for d in &p.devices {
        if let Some(s) = d.metrics.get(m) {
            if let Some(v) = s.mean {
                acc += v * d.samples as f64;
                w += d.samples;
            }
            if let Some(v) = s.peak {
                peak = Some(peak.map_or(v, |x: f64| x.max(v)));
            }
        }
    }
    ((w > 0).then(|| acc / w as f64), peak)
}

/// A click on phase `p`: the whole run fitted, or the next of the phase's ranges.
fn zoom_to_phase(t: &Locked<'_>, p: &PhaseReport) -> Input {
    if p.path == "(whole run)" {
        return Input::Fit {
            a: t.slot.disp(t.s.extent.start_ns),
            b: t.slot.disp(t.s.extent.end_ns),
            margin: 0.01,
        };
    }
    let ranges = crate::stats::phase_ranges(t, &p.path)
        .into_iter()
        .map(|(a, b)| (t.slot.disp(a), t.slot.disp(b)))
        .collect();
    Input::NextPhaseRange {
        path: p.path.clone(),
        ranges,
    }
}

fn gaps_ui(ui: &mut Ui, ti: usize, t: &Locked<'_>, traces: &[Locked<'_>], out: &mut Vec<Input>) {
    ui.heading(title(ti, t, traces.len()));
    let Some(report) = report_or_placeholder(ui, t) else {
        return;
    };
    ui.label(format!(
        "{} gaps of at least {} (idle: {})",
        report.gap_count,
        report.min_gap_ns,
        report
            .activity
            .as_ref()
            .map_or("no counters".into(), |a| format!(
                "{} below {}",
                a.label(),
                fmt_value(a.threshold())
            ))
    ));
    let extent = shared_extent(traces);
    let origin = extent.0;
    egui::Grid::new(("gaps", ti))
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            ui.strong("length");
            ui.strong("GPU");
            ui.strong("at");
            ui.strong("where");
            ui.end_row();
            for g in report.gaps.iter().take(GAPS_LISTED) {
                let resp = ui.selectable_label(false, g.duration_ns.to_string());
                // The column is titled GPU: its number, or `host:GPU n` for several hosts.
                if hosts_differ(traces) {
                    ui.label(gpu_label(traces, ti, g.device));
                } else {
                    ui.label(g.device.0.to_string());
                }
                ui.label(crate::fmt::fmt_offset(
                    t.slot.disp(g.start_ns) - origin,
                    1e5,
                ));
                ui.label(crate::fmt::plain(&g.place));
                ui.end_row();
                if resp.clicked() {
                    let (a, b) = (t.slot.disp(g.start_ns), t.slot.disp(g.end_ns));
                    out.push(Input::Fit { a, b, margin: 1.0 });
                    out.push(Input::Select { a, b });
                    // Where the host was while the GPU idled: the flame graph, where there is one.
                    let host = t.s.tables.as_ref().is_some_and(|tb| !tb.host.is_empty());
                    if host {
                        out.push(Input::ShowDetailsTab(DetailsTab::Flame));
                    }
                }
            }
        });
    let listed = report.gaps.len().min(GAPS_LISTED) as u64;
    if report.gap_count > listed {
        ui.label(format!("… and {} shorter ones", report.gap_count - listed));
    }
    ui.add_space(8.0);
}

/// The Compare tab's alignments other than a phase.
const START: &str = "(start of run)";
const WALL_CLOCK: &str = "(wall clock)";

fn compare_ui(
    ui: &mut Ui,
    traces: &[Locked<'_>],
    st: &ViewState,
    diff: &DiffState,
    out: &mut Vec<Input>,
) {
    let common = common_phases(traces);
    ui.horizontal(|ui| {
        let current = match (&st.align_phase, st.align_wall) {
            (_, true) => WALL_CLOCK.to_string(),
            (Some(p), false) => p.clone(),
            (None, false) => START.to_string(),
        };
        egui::ComboBox::from_label("B aligned at the first range of this phase")
            .selected_text(current)
            .show_ui(ui, |ui| {
                if ui
                    .selectable_label(!st.align_wall && st.align_phase.is_none(), START)
                    .clicked()
                {
                    out.push(Input::AlignAt(None));
                }
                // Two hosts' recordings of one run: their own clocks, unshifted.
                if ui.selectable_label(st.align_wall, WALL_CLOCK).clicked() {
                    out.push(Input::AlignWall);
                }
                for p in &common {
                    let on = !st.align_wall && st.align_phase.as_ref() == Some(p);
                    if ui.selectable_label(on, p).clicked() {
                        out.push(Input::AlignAt(Some(p.clone())));
                    }
                }
            });
    });
    if common.is_empty() && !st.align_wall {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "The recordings have no phase in common: they are aligned at their starts.",
        );
    }
    match diff {
        DiffState::None => {}
        DiffState::Computing(_) => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("comparing…");
            });
        }
        DiffState::Done(r) => {
            let d = match r.as_ref() {
                Ok(d) => d,
                Err(e) => {
                    ui.colored_label(ui.visuals().error_fg_color, e.to_string());
                    return;
                }
            };
            diff_tables_ui(ui, d);
        }
    }
}

/// The comparison's tables: phases (time and idle share, B minus A) and gaps by place.
fn diff_tables_ui(ui: &mut Ui, d: &DiffReport) {
    ui.label("B minus A, biggest changes first (time is summed NVTX range time)");
    egui::Grid::new("diff")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            ui.strong("phase");
            ui.strong("A");
            ui.strong("B");
            ui.strong("Δ time");
            ui.strong("Δ idle");
            ui.end_row();
            for p in std::iter::once(&d.whole_run).chain(d.phases.iter()) {
                ui.label(crate::fmt::plain(&p.path));
                ui.label(p.a.as_ref().map_or("–".into(), |s| s.total_ns.to_string()));
                ui.label(p.b.as_ref().map_or("–".into(), |s| s.total_ns.to_string()));
                let color = if p.delta_total_ns > Nanos::ZERO {
                    ui.visuals().warn_fg_color
                } else {
                    egui::Color32::from_rgb(120, 200, 120)
                };
                ui.colored_label(
                    color,
                    format!(
                        "{}{}",
                        if p.delta_total_ns > Nanos::ZERO {
                            "+"
                        } else {
                            ""
                        },
                        p.delta_total_ns
                    ),
                );
                ui.label(
                    p.delta_idle
                        .map_or("–".into(), |x| format!("{:+.1} pt", x * 100.0)),
                );
                ui.end_row();
            }
        });
    if !d.gaps.is_empty() {
        ui.add_space(6.0);
        ui.strong("gaps by place");
        egui::Grid::new("diffgaps")
            .striped(true)
            .num_columns(4)
            .show(ui, |ui| {
                ui.strong("place");
                ui.strong("A");
                ui.strong("B");
                ui.strong("Δ");
                ui.end_row();
                for g in d.gaps.iter().take(20) {
                    ui.label(crate::fmt::plain(&g.place));
                    let t = &g.totals;
                    ui.label(format!("{}× {}", t.count_a, t.total_a_ns));
                    ui.label(format!("{}× {}", t.count_b, t.total_b_ns));
                    ui.label(t.delta_total_ns.to_string());
                    ui.end_row();
                }
            });
    }
}

/// Phase paths present in every recording, in the first one's order.
pub fn common_phases(traces: &[Locked<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = traces.first().and_then(|t| t.s.tables.as_ref()) else {
        return out;
    };
    for p in &first.phases.phases {
        let everywhere = traces[1..].iter().all(|t| {
            t.s.tables
                .as_ref()
                .is_some_and(|tb| tb.phases.phases.iter().any(|q| q.path == p.path))
        });
        if everywhere {
            out.push(p.path.clone());
        }
    }
    out
}
