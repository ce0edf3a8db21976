//! `cufall diff A1 A2 --vs B1 B2`: two runs made on several nodes each, compared. Each side is
//! read as [`crate::nodes`] reads the nodes of one run (each GPU `host:GPU n`, the recordings on
//! their hosts' wall clocks, a lag per phase and node); its phases are then merged over its
//! nodes (counts and totals added, p50 and p99 over every node's ranges, idle over every
//! node's sampled time) and compared with the other side's as `cufall diff` compares two
//! recordings ([`crate::diff`]). Nodes are paired across the sides by host where both sides
//! name the same hosts, else in the order given, so each node's own change and lag can be
//! read too.
//!
//! Side B is analysed with the activity metric, full scale and minimum gap of A's first
//! recording, as `diff` analyses B with A's.

use crate::diff::{
    PhaseDiff, biggest_phase_change_first, idle_line, metric_not_in_b, options_like, phase_cells,
    phase_columns, phase_diff, recorded_in_any, setup_warnings, signed_ns,
};
use crate::nodes::{NodePhase, NodesRead, NodesReport, read_nodes};
use crate::phases::{Phases, percentile};
use crate::render::{TextTable, fmt_ns, fmt_pct};
use crate::report::{PhaseReport, Report, ReportOptions};
use crate::samples::Activity;
use crate::{AnalysisError, Result};
use cufall_trace::Trace;
use cufall_trace::model::Nanos;
use serde::Serialize;

/// A node of A and the node of B it is compared with (indices into each side's nodes); one
/// side is `None` where the other has more nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NodePair {
    pub a: Option<usize>,
    pub b: Option<usize>,
}

/// One phase on a pair of nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeChange {
    pub a: Option<NodePhase>,
    pub b: Option<NodePhase>,
    /// B minus A (a missing side counts as zero).
    pub delta_total_ns: Nanos,
    /// B's mean lag minus A's, where both have one.
    pub delta_mean_lag_ns: Option<Nanos>,
}

/// One phase of the two runs: all nodes of a side together, then per pair of nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodesPhaseDiff {
    /// The phase over all nodes of each side.
    #[serde(flatten)]
    pub all: PhaseDiff,
    /// The node of each side whose phase ends last on average, if one lags at all.
    pub lagging_a: Option<usize>,
    pub lagging_b: Option<usize>,
    /// One per [`NodesDiff::pairs`].
    pub nodes: Vec<NodeChange>,
}

/// Two runs of several nodes each, compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodesDiff {
    /// Each side as `cufall report` reads the nodes of one run.
    pub a: NodesReport,
    pub b: NodesReport,
    /// Whether the nodes are paired by host (both sides name the same hosts, each once) or
    /// in the order given.
    pub by_host: bool,
    pub pairs: Vec<NodePair>,
    /// How idle is measured on every node of both sides: A's first recording's activity
    /// value, threshold and shortest gap.
    pub activity: Option<Activity>,
    pub idle_threshold: Option<f64>,
    pub min_gap_ns: Nanos,
    pub warnings: Vec<String>,
    /// Every node's whole recording, each side's together.
    pub whole_run: PhaseDiff,
    /// Every phase of A or B, biggest change of total time first.
    pub phases: Vec<NodesPhaseDiff>,
}

/// Compares runs `a` and `b`, each given as its nodes' recordings; [`ReportOptions::phases`]
/// chooses the phases of all of them (a domain it names must be recorded in at least one).
pub fn build_nodes_diff(a: &[&Trace], b: &[&Trace], opts: &ReportOptions) -> Result<NodesDiff> {
    for (side, traces) in [("A", a), ("B", b)] {
        if traces.is_empty() {
            return Err(AnalysisError::NoNodes { side });
        }
    }
    // A's first recording sets the activity, full scale and shortest gap; every other node of
    // either side is read with them, so that one side's idle time never mixes thresholds.
    let first = read_nodes(&a[..1], opts, &|_, e| e).map_err(|e| on_side("A", e))?;
    let like = options_like(
        first
            .reports
            .first()
            .ok_or(AnalysisError::NoNodes { side: "A" })?,
        opts,
    );
    let ra = if a.len() > 1 {
        read_nodes(a, &like, &|_, e| e).map_err(|e| on_side("A", e))?
    } else {
        first
    };
    let first_a = ra
        .reports
        .first()
        .ok_or(AnalysisError::NoNodes { side: "A" })?;
    let opts_b = like;
    let (activity, idle_threshold, min_gap_ns) = (
        first_a.activity.clone(),
        first_a.idle_threshold,
        first_a.min_gap_ns,
    );
    let rb = read_nodes(b, &opts_b, &metric_not_in_b).map_err(|e| on_side("B", e))?;
    let all: Vec<&Report> = ra.reports.iter().chain(&rb.reports).collect();
    opts.phases
        .check_domains(&recorded_in_any(&all))
        .map_err(AnalysisError::UnknownDomains)?;
    let mut warnings: Vec<String> = (ra.report.warnings.iter().map(|w| format!("A: {w}")))
        .chain(rb.report.warnings.iter().map(|w| format!("B: {w}")))
        .collect();
    let (side_a, side_b): (Vec<&Report>, Vec<&Report>) =
        (ra.reports.iter().collect(), rb.reports.iter().collect());
    warnings.extend(setup_warnings(&side_a, &side_b));
    let (by_host, pairs) = pair_nodes(&ra.report, &rb.report);
    let whole = |r: &NodesRead| {
        let parts: Vec<&PhaseReport> = r.reports.iter().map(|n| &n.whole_run).collect();
        let durations = parts.iter().map(|p| p.total_ns.get()).collect();
        merged("(whole run)", &parts, durations)
    };
    let whole_run = phase_diff("(whole run)", Some(&whole(&ra)), Some(&whole(&rb)));
    let mut paths: Vec<&str> = Vec::new();
    for p in ra.report.phases.iter().chain(&rb.report.phases) {
        if !paths.contains(&p.path.as_str()) {
            paths.push(&p.path);
        }
    }
    let mut phases: Vec<NodesPhaseDiff> = paths
        .iter()
        .map(|path| phase_of_runs(path, &ra, &rb, &pairs))
        .collect();
    biggest_phase_change_first(&mut phases, |p| &p.all);
    Ok(NodesDiff {
        a: ra.report,
        b: rb.report,
        by_host,
        pairs,
        activity,
        idle_threshold,
        min_gap_ns,
        warnings,
        whole_run,
        phases,
    })
}

/// A side's error that says which side: the recordings of one side that are not one run.
fn on_side(side: &'static str, e: AnalysisError) -> AnalysisError {
    match e {
        AnalysisError::NodesDoNotOverlap { .. }
        | AnalysisError::SameGpuTwice { .. }
        | AnalysisError::SameHostTwice { .. } => AnalysisError::NodesSide {
            side,
            reason: Box::new(e),
        },
        other => other,
    }
}

/// Pairs the nodes of the two sides: by host where both sides name the same hosts, each once
/// (in A's order); else in the order given, the longer side's last nodes without a partner.
fn pair_nodes(a: &NodesReport, b: &NodesReport) -> (bool, Vec<NodePair>) {
    let (ha, hb) = (hosts(a), hosts(b));
    let unique = |h: &[&str]| {
        let mut s = h.to_vec();
        s.sort_unstable();
        s.dedup();
        s.len() == h.len()
    };
    let same = unique(&ha) && ha.len() == hb.len() && ha.iter().all(|h| hb.contains(h));
    if same {
        let pairs = ha
            .iter()
            .enumerate()
            .map(|(i, h)| NodePair {
                a: Some(i),
                b: hb.iter().position(|x| x == h),
            })
            .collect();
        return (true, pairs);
    }
    let n = ha.len().max(hb.len());
    let pairs = (0..n)
        .map(|i| NodePair {
            a: (i < ha.len()).then_some(i),
            b: (i < hb.len()).then_some(i),
        })
        .collect();
    (false, pairs)
}

fn hosts(r: &NodesReport) -> Vec<&str> {
    r.nodes.iter().map(|n| n.host.as_str()).collect()
}

/// The host of node `i` of a side, `-` for no node.
fn host_at(r: &NodesReport, i: Option<usize>) -> &str {
    i.map_or("-", |i| r.nodes[i].host.as_str())
}

/// One phase of both runs: merged over each side's nodes, and per pair of nodes.
fn phase_of_runs(path: &str, a: &NodesRead, b: &NodesRead, pairs: &[NodePair]) -> NodesPhaseDiff {
    let across = |r: &'_ NodesRead| -> Option<crate::nodes::PhaseAcross> {
        r.report.phases.iter().find(|p| p.path == path).cloned()
    };
    let (pa, pb) = (across(a), across(b));
    let all = phase_diff(
        path,
        merged_phase(a, path).as_ref(),
        merged_phase(b, path).as_ref(),
    );
    let node = |p: Option<&crate::nodes::PhaseAcross>, i: Option<usize>| -> Option<NodePhase> {
        p?.nodes.get(i?).filter(|n| n.count > 0).cloned()
    };
    let nodes = pairs
        .iter()
        .map(|pair| {
            let (na, nb) = (node(pa.as_ref(), pair.a), node(pb.as_ref(), pair.b));
            let total = |n: &Option<NodePhase>| n.as_ref().map_or(Nanos::ZERO, |n| n.total_ns);
            let lag = |n: &Option<NodePhase>| n.as_ref().and_then(|n| n.mean_lag_ns);
            NodeChange {
                delta_total_ns: total(&nb) - total(&na),
                delta_mean_lag_ns: lag(&na).zip(lag(&nb)).map(|(x, y)| y - x),
                a: na,
                b: nb,
            }
        })
        .collect();
    NodesPhaseDiff {
        all,
        lagging_a: pa.as_ref().and_then(|p| p.lagging),
        lagging_b: pb.as_ref().and_then(|p| p.lagging),
        nodes,
    }
}

/// The phase at `path` over every node of a side, `None` where no node has it.
fn merged_phase(r: &NodesRead, path: &str) -> Option<PhaseReport> {
    let parts: Vec<&PhaseReport> = r
        .reports
        .iter()
        .filter_map(|n| n.phases.iter().find(|p| p.path == path))
        .collect();
    if parts.is_empty() {
        return None;
    }
    Some(merged(path, &parts, durations_of(&r.phases, path)))
}

/// Every node's range durations of the phase at `path`.
fn durations_of(phases: &[Phases], path: &str) -> Vec<i64> {
    phases
        .iter()
        .filter_map(|ph| ph.phases.iter().find(|p| p.path == path))
        .flat_map(|p| p.durations_ns.iter().copied())
        .collect()
}

/// Several nodes' reports of one phase as one: every node's GPUs, `durations` (every node's
/// ranges) for the count, total and percentiles, idle over every GPU's sampled time.
fn merged(path: &str, parts: &[&PhaseReport], mut durations: Vec<i64>) -> PhaseReport {
    durations.sort_unstable();
    let devices: Vec<_> = parts
        .iter()
        .flat_map(|p| p.devices.iter().cloned())
        .collect();
    let sampled: i64 = devices.iter().map(|d| d.sampled_ns.get()).sum();
    let idle: i64 = devices.iter().map(|d| d.idle_ns.get()).sum();
    PhaseReport {
        path: path.to_string(),
        name: parts[0].name.clone(),
        depth: parts[0].depth,
        count: durations.len() as u64,
        total_ns: Nanos(durations.iter().sum()),
        p50_ns: Nanos(percentile(&durations, 0.5)),
        p99_ns: Nanos(percentile(&durations, 0.99)),
        devices,
        idle_fraction: (sampled > 0).then(|| idle as f64 / sampled as f64),
        verdict: parts[0].verdict.clone(),
    }
}

/// The text form of a [`NodesDiff`].
pub fn nodes_diff_text(d: &NodesDiff) -> String {
    let mut o = format!(
        "cufall diff: two runs of several nodes, A = {} recording{}, B = {} recording{}\n",
        d.a.nodes.len(),
        plural(d.a.nodes.len()),
        d.b.nodes.len(),
        plural(d.b.nodes.len())
    );
    for (tag, r, whole) in [("A", &d.a, &d.whole_run.a), ("B", &d.b, &d.whole_run.b)] {
        let nodes: Vec<String> = r
            .nodes
            .iter()
            .map(|n| format!("{} ({})", n.host, n.trace))
            .collect();
        o.push_str(&format!(
            "  {tag}: {}; {} GPU{}; overlap {}; idle {}; clocks {}\n",
            nodes.join(", "),
            r.nodes.iter().map(|n| n.gpus.len()).sum::<usize>(),
            plural(r.nodes.iter().map(|n| n.gpus.len()).sum()),
            fmt_ns(r.overlap_end_ns - r.overlap_start_ns),
            fmt_pct(whole.as_ref().and_then(|w| w.idle_fraction)),
            r.clock_uncertainty_ns.map_or("unknown".into(), |u| {
                format!("may differ by up to {}", fmt_ns(u))
            }),
        ));
    }
    o.push_str(&idle_line(
        d.activity.as_ref(),
        d.idle_threshold,
        d.min_gap_ns,
    ));
    o.push_str(&pairing_line(d));
    for w in &d.warnings {
        o.push_str(&format!("  warning: {w}\n"));
    }
    o.push_str(
        "\nPHASES (all nodes of a side together: counts and totals added, p50 and p99 over every \
         node's ranges; lagging: the node whose phase ends last, mean lag; biggest change in \
         total time first)\n",
    );
    let mut t = TextTable::new(&phase_columns(true, &["lagging A", "lagging B"]));
    // The lagging node of a side in a phase, with its mean lag.
    let lagging = |r: &NodesReport, path: &str, i: Option<usize>| -> String {
        let Some(i) = i else { return "-".into() };
        let lag = r
            .phases
            .iter()
            .find(|p| p.path == path)
            .and_then(|p| p.nodes.get(i)?.mean_lag_ns);
        format!(
            "{} +{}",
            r.nodes[i].host,
            fmt_ns(lag.unwrap_or(Nanos::ZERO))
        )
    };
    let mut whole = phase_cells(&d.whole_run, true);
    whole.extend(["".to_string(), "".to_string()]);
    t.row(whole);
    for p in &d.phases {
        let mut row = phase_cells(&p.all, true);
        row.push(lagging(&d.a, &p.all.path, p.lagging_a));
        row.push(lagging(&d.b, &p.all.path, p.lagging_b));
        t.row(row);
    }
    o.push_str(&t.render("  "));
    o.push_str(&per_node_text(d));
    o.push('\n');
    for (tag, r) in [("A", &d.a), ("B", &d.b)] {
        o.push_str(&format!(
            "lagging node ({tag}): {}\n",
            r.lagging.map_or(
                "none (no phase was matched on every node, or none ends later)",
                |i| { r.nodes[i].host.as_str() }
            )
        ));
    }
    // Names from the recordings reach the terminal only escaped.
    cufall_text::escape_lines(&o).into_owned()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Which node of A is compared with which of B.
fn pairing_line(d: &NodesDiff) -> String {
    if d.by_host {
        let hosts: Vec<&str> = d.pairs.iter().map(|p| host_at(&d.a, p.a)).collect();
        format!("  nodes matched by host: {}\n", hosts.join(", "))
    } else {
        let pairs: Vec<String> = d
            .pairs
            .iter()
            .map(|p| format!("{} / {}", host_at(&d.a, p.a), host_at(&d.b, p.b)))
            .collect();
        format!(
            "  nodes matched in the order given (A / B): {}; the sides do not name the same hosts, each once\n",
            pairs.join(", ")
        )
    }
}

/// The PHASES PER NODE table: each pair of nodes' own times and lags.
fn per_node_text(d: &NodesDiff) -> String {
    let mut o = String::from(
        "\nPHASES PER NODE (each node's own ranges; lag: how long after its side's earliest node \
         the node ended the phase, on average over the matched occurrences)\n",
    );
    let mut t = TextTable::new(&[
        "phase", "node", "count A", "count B", "total A", "total B", "Δ total", "p50 A", "p50 B",
        "idle A", "idle B", "lag A", "lag B", "Δ lag",
    ]);
    for p in &d.phases {
        for (k, (n, pair)) in p.nodes.iter().zip(&d.pairs).enumerate() {
            let get = |s: &Option<NodePhase>, f: &dyn Fn(&NodePhase) -> String| {
                s.as_ref().map_or("-".to_string(), f)
            };
            let lag = |s: &NodePhase| s.mean_lag_ns.map_or("-".into(), fmt_ns);
            t.row(vec![
                if k == 0 {
                    p.all.path.clone()
                } else {
                    String::new()
                },
                if d.by_host {
                    host_at(&d.a, pair.a).to_string()
                } else {
                    format!("{} / {}", host_at(&d.a, pair.a), host_at(&d.b, pair.b))
                },
                get(&n.a, &|s| s.count.to_string()),
                get(&n.b, &|s| s.count.to_string()),
                get(&n.a, &|s| fmt_ns(s.total_ns)),
                get(&n.b, &|s| fmt_ns(s.total_ns)),
                signed_ns(n.delta_total_ns),
                get(&n.a, &|s| fmt_ns(s.p50_ns)),
                get(&n.b, &|s| fmt_ns(s.p50_ns)),
                get(&n.a, &|s| fmt_pct(s.idle_fraction)),
                get(&n.b, &|s| fmt_pct(s.idle_fraction)),
                get(&n.a, &lag),
                get(&n.b, &lag),
                n.delta_mean_lag_ns.map_or("-".into(), signed_ns),
            ]);
        }
    }
    o.push_str(&t.render("  "));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::Node;
    use crate::report::Verdict;

    fn side(hosts: &[&str]) -> NodesReport {
        NodesReport {
            nodes: hosts
                .iter()
                .map(|h| Node {
                    host: (*h).to_string(),
                    trace: format!("{h}.cufall"),
                    gpus: Vec::new(),
                    start_ns: 0,
                    end_ns: 1,
                    clock: None,
                    idle_fraction: None,
                })
                .collect(),
            overlap_start_ns: 0,
            overlap_end_ns: 1,
            clock_uncertainty_ns: None,
            phases: Vec::new(),
            lagging: None,
            warnings: Vec::new(),
        }
    }

    fn pair(a: Option<usize>, b: Option<usize>) -> NodePair {
        NodePair { a, b }
    }

    #[test]
    fn the_same_hosts_pair_by_name_whatever_their_order() {
        let (by_host, pairs) = pair_nodes(&side(&["x", "y", "z"]), &side(&["z", "x", "y"]));
        assert!(by_host);
        assert_eq!(
            pairs,
            vec![
                pair(Some(0), Some(1)),
                pair(Some(1), Some(2)),
                pair(Some(2), Some(0))
            ]
        );
    }

    /// Other hosts, a host twice or more nodes on one side: paired in the order given.
    #[test]
    fn other_hosts_pair_in_the_order_given() {
        for (a, b) in [
            (&["x", "y"][..], &["p", "q"][..]),
            (&["x", "x"][..], &["x", "x"][..]),
            (&["x", "y"][..], &["x", "y", "z"][..]),
        ] {
            let (by_host, pairs) = pair_nodes(&side(a), &side(b));
            assert!(!by_host, "{a:?} {b:?}");
            assert_eq!(pairs[0], pair(Some(0), Some(0)));
            assert_eq!(pairs.len(), a.len().max(b.len()));
        }
        let (_, pairs) = pair_nodes(&side(&["x", "y"]), &side(&["p"]));
        assert_eq!(pairs[1], pair(Some(1), None));
    }

    /// The merged percentiles are over every node's ranges, not an average of the nodes'.
    #[test]
    fn a_phase_merged_over_nodes_takes_every_nodes_ranges() {
        let part = |total_ns| PhaseReport {
            path: "step".into(),
            name: "step".into(),
            depth: 0,
            count: 0,
            total_ns: Nanos(total_ns),
            p50_ns: Nanos::ZERO,
            p99_ns: Nanos::ZERO,
            devices: Vec::new(),
            idle_fraction: None,
            verdict: Verdict::NotMeasured,
        };
        let (x, y) = (part(0), part(0));
        // Node x ran 10 steps of 1 ms, node y 10 of 9 ms.
        let durations: Vec<i64> = (0..20)
            .map(|i| if i % 2 == 0 { 1_000_000 } else { 9_000_000 })
            .collect();
        let m = merged("step", &[&x, &y], durations);
        assert_eq!((m.count, m.total_ns.get()), (20, 100_000_000));
        assert_eq!((m.p50_ns.get(), m.p99_ns.get()), (1_000_000, 9_000_000));
        assert_eq!(m.idle_fraction, None);
    }
}
