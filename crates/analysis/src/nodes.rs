//! Recordings of one run made on several hosts (one `cufall record` per node under Slurm's
//! `srun` or `torchrun`), read together: each GPU named `host:GPU n`, the recordings put on one
//! wall clock (every trace's clock is its host's `CLOCK_REALTIME`), how far apart the hosts'
//! clocks may be, each phase's times per node, and which node's phases end last.
//!
//! The clocks are not corrected: nothing in the recordings measures the offset between two
//! hosts. What each host's kernel said of its own clock error when it recorded (`adjtimex`:
//! the maximum error against true time, which NTP or PTP keep small) bounds it instead: two
//! hosts' clocks differ by at most the sum of their maximum errors, and a lag shorter than
//! that cannot be told from clock error.
//!
//! Occurrences of a phase are matched across nodes by their order inside the time all
//! recordings cover: the k-th `step` that starts in the overlap on one node with the k-th on
//! every other. A node's lag in an occurrence is how long after the earliest node it ended.

use crate::phases::Phases;
use crate::report::{Report, ReportOptions};
use crate::{AnalysisError, Result};
use cufall_trace::Trace;
use cufall_trace::model::{Manifest, Nanos};
use serde::Serialize;
use std::collections::BTreeMap;

/// `manifest.extra` keys the recorder writes: the host's clock error when recording began, in
/// microseconds, as the kernel keeps it (`adjtimex`), and whether the kernel counts its clock
/// synchronised (NTP/PTP running).
pub const CLOCK_MAX_ERROR_US: &str = "clock_max_error_us";
pub const CLOCK_EST_ERROR_US: &str = "clock_est_error_us";
pub const CLOCK_SYNCHRONISED: &str = "clock_synchronised";

/// What a host's kernel said of its clock when the recording began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClockError {
    /// The most the clock may be off true time.
    pub max_error_ns: Nanos,
    /// The kernel's estimate of its error.
    pub est_error_ns: Nanos,
    pub synchronised: bool,
}

impl ClockError {
    /// From a manifest's `extra`; `None` for a recording made before cufall wrote it, or with
    /// values that are not numbers.
    pub fn of(m: &Manifest) -> Option<ClockError> {
        let us = |k: &str| -> Option<i64> {
            let v: i64 = m.extra.get(k)?.trim().parse().ok()?;
            (v >= 0).then(|| v.saturating_mul(1_000))
        };
        Some(ClockError {
            max_error_ns: Nanos(us(CLOCK_MAX_ERROR_US)?),
            est_error_ns: Nanos(us(CLOCK_EST_ERROR_US)?),
            synchronised: m.extra.get(CLOCK_SYNCHRONISED).map(String::as_str) == Some("yes"),
        })
    }
}

/// One node's recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    pub host: String,
    pub trace: String,
    /// `host:GPU n (name)`.
    pub gpus: Vec<String>,
    /// First sample start and last sample end, on the host's clock.
    pub start_ns: i64,
    pub end_ns: i64,
    pub clock: Option<ClockError>,
    /// Idle time over sampled time, the whole recording, every GPU of the node.
    pub idle_fraction: Option<f64>,
}

/// One phase on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodePhase {
    pub count: u64,
    pub total_ns: Nanos,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    pub idle_fraction: Option<f64>,
    /// How long after the earliest node this node ended the matched occurrences, on average
    /// and at most; `None` without matched occurrences.
    pub mean_lag_ns: Option<Nanos>,
    pub max_lag_ns: Option<Nanos>,
    /// Matched occurrences this node ended last.
    pub last: u64,
}

/// One phase across the nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseAcross {
    pub path: String,
    /// One per node, in the nodes' order (a node without the phase has count 0).
    pub nodes: Vec<NodePhase>,
    /// Occurrences matched across every node inside the overlap.
    pub matched: u64,
    /// The node with the largest mean lag, when occurrences were matched and one lags at all.
    pub lagging: Option<usize>,
    /// Whether that lag is longer than the clocks' uncertainty (`None`: uncertainty unknown).
    pub beyond_clocks: Option<bool>,
}

/// Several nodes' recordings of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodesReport {
    pub nodes: Vec<Node>,
    /// The time every recording covers, on the shared wall clock.
    pub overlap_start_ns: i64,
    pub overlap_end_ns: i64,
    /// The most two hosts' clocks may differ: the two largest maximum errors added; `None`
    /// when a recording does not say.
    pub clock_uncertainty_ns: Option<Nanos>,
    /// Phases in the first node's tree order, then those only other nodes have.
    pub phases: Vec<PhaseAcross>,
    /// The node whose phases lag most (largest summed mean lag over the phases), if any lags.
    pub lagging: Option<usize>,
    pub warnings: Vec<String>,
}

/// Reads `traces` as the recordings of one run on several hosts.
pub fn build_nodes(traces: &[&Trace], opts: &ReportOptions) -> Result<NodesReport> {
    read_nodes(traces, opts, &|_, e| e).map(|r| r.report)
}

/// The nodes of one run read together, with what a diff of two runs needs beyond the report:
/// each node's own report and phases, in the nodes' order.
pub(crate) struct NodesRead {
    pub report: NodesReport,
    pub reports: Vec<Report>,
    pub phases: Vec<Phases>,
}

/// [`build_nodes`], keeping each node's report and phases; `node_err` words a node's report's
/// error (a diff names the side whose recording lacks A's metric).
pub(crate) fn read_nodes(
    traces: &[&Trace],
    opts: &ReportOptions,
    node_err: &dyn Fn(&Trace, AnalysisError) -> AnalysisError,
) -> Result<NodesRead> {
    check_distinct_gpus(traces)?;
    let mut reports = Vec::with_capacity(traces.len());
    for t in traces {
        // A domain `--phases` names may be missing from some nodes: not an error here.
        reports.push(
            crate::report::build_report_checked(t, opts, false, &mut |_| {}, &mut |_, _| {})
                .map_err(|e| node_err(t, e))?,
        );
    }
    let spans: Vec<(i64, i64)> = reports.iter().map(|r| (r.start_ns, r.end_ns)).collect();
    let lo = spans.iter().map(|s| s.0).max().unwrap_or(0);
    let hi = spans.iter().map(|s| s.1).min().unwrap_or(0);
    if lo >= hi {
        return Err(AnalysisError::NodesDoNotOverlap {
            spans: traces
                .iter()
                .zip(&spans)
                .map(|(t, s)| (t.path().to_path_buf(), host_of(t.manifest()), s.0, s.1))
                .collect(),
        });
    }
    let nodes: Vec<Node> = traces
        .iter()
        .zip(&reports)
        .map(|(t, r)| node_of(t.manifest(), r))
        .collect();
    let clock_uncertainty_ns = clock_uncertainty(&nodes);
    let mut ranges = Vec::with_capacity(traces.len());
    for t in traces {
        let (_, chosen, _) = crate::report::chosen_ranges(t, &opts.phases, false)?;
        ranges.push(Phases::build(&chosen));
    }
    let phases = phases_across(&reports, &ranges, (lo, hi), clock_uncertainty_ns);
    let lagging = lagging_node(&phases, nodes.len());
    let mut warnings: Vec<String> = Vec::new();
    for (n, r) in nodes.iter().zip(&reports) {
        warnings.extend(r.warnings.iter().map(|w| format!("{}: {w}", n.host)));
    }
    Ok(NodesRead {
        report: NodesReport {
            nodes,
            overlap_start_ns: lo,
            overlap_end_ns: hi,
            clock_uncertainty_ns,
            phases,
            lagging,
            warnings,
        },
        reports,
        phases: ranges,
    })
}

/// The host a manifest names, or `?` when it names none.
pub(crate) fn host_of(m: &Manifest) -> String {
    if m.hostname.trim().is_empty() {
        "?".into()
    } else {
        m.hostname.clone()
    }
}

/// Two recordings holding the same GPU (same UUID, or same host and index where UUIDs are
/// missing) are not two nodes of one run; nor are two of one host, whose GPUs, named
/// `host:GPU n`, could not be told apart.
fn check_distinct_gpus(traces: &[&Trace]) -> Result<()> {
    let mut hosts: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    let mut seen: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for t in traces {
        let m = t.manifest();
        for d in &m.devices {
            let key = if d.uuid.is_empty() {
                format!("{}:{}", host_of(m), d.id)
            } else {
                d.uuid.clone()
            };
            if let Some(first) = seen.insert(key, t.path().to_path_buf()) {
                return Err(AnalysisError::SameGpuTwice {
                    gpu: format!("{}:{}", host_of(m), d.id),
                    first,
                    second: t.path().to_path_buf(),
                });
            }
        }
    }
    for t in traces {
        let host = host_of(t.manifest());
        if let Some(first) = hosts.insert(host.clone(), t.path().to_path_buf()) {
            return Err(AnalysisError::SameHostTwice {
                host,
                first,
                second: t.path().to_path_buf(),
            });
        }
    }
    Ok(())
}

fn node_of(m: &Manifest, r: &Report) -> Node {
    let host = host_of(m);
    Node {
        gpus: r
            .gpus
            .iter()
            .map(|g| format!("{host}:{} ({})", g.device, g.name))
            .collect(),
        host,
        trace: r.trace.clone(),
        start_ns: r.start_ns,
        end_ns: r.end_ns,
        clock: ClockError::of(m),
        idle_fraction: r.whole_run.idle_fraction,
    }
}

/// The two largest maximum errors added: the most any two of the hosts' clocks can differ.
fn clock_uncertainty(nodes: &[Node]) -> Option<Nanos> {
    let mut errs: Vec<Nanos> = nodes
        .iter()
        .map(|n| n.clock.map(|c| c.max_error_ns))
        .collect::<Option<_>>()?;
    errs.sort_unstable_by(|a, b| b.cmp(a));
    Some(errs.iter().take(2).sum())
}

/// Each phase's figures per node and the lags of its matched occurrences.
fn phases_across(
    reports: &[Report],
    ranges: &[Phases],
    (lo, hi): (i64, i64),
    uncertainty: Option<Nanos>,
) -> Vec<PhaseAcross> {
    let mut paths: Vec<String> = Vec::new();
    for r in reports {
        for p in &r.phases {
            if !paths.contains(&p.path) {
                paths.push(p.path.clone());
            }
        }
    }
    paths
        .into_iter()
        .map(|path| {
            let mut nodes: Vec<NodePhase> = reports
                .iter()
                .map(|r| {
                    r.phases
                        .iter()
                        .find(|p| p.path == path)
                        .map(|p| NodePhase {
                            count: p.count,
                            total_ns: p.total_ns,
                            p50_ns: p.p50_ns,
                            p99_ns: p.p99_ns,
                            idle_fraction: p.idle_fraction,
                            ..NodePhase::default()
                        })
                        .unwrap_or_default()
                })
                .collect();
            let occ: Vec<Vec<(i64, i64)>> =
                ranges.iter().map(|ph| occurrences(ph, &path)).collect();
            let matched = add_lags(&mut nodes, &occ, (lo, hi));
            let lagging = most_lagging(&nodes);
            let beyond_clocks = lagging.and_then(|i| {
                let lag = nodes[i].mean_lag_ns?;
                uncertainty.map(|u| lag > u)
            });
            PhaseAcross {
                path,
                nodes,
                matched,
                lagging,
                beyond_clocks,
            }
        })
        .collect()
}

/// The phase's occurrences on one node, as `(start, end)` in start order. Ranges of the phase
/// that overlap in time are one occurrence, from the first start to the last end: the ranks of
/// a node run a step together, and the node is done with it when its last rank is.
fn occurrences(ph: &Phases, path: &str) -> Vec<(i64, i64)> {
    let Some(idx) = ph.phases.iter().position(|p| p.path == path) else {
        return Vec::new();
    };
    let mut r: Vec<(i64, i64)> = ph
        .ranges
        .iter()
        .filter(|r| r.phase == idx)
        .map(|r| (r.start_ns, r.end_ns.max(r.start_ns)))
        .collect();
    r.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(r.len());
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s < last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Matches occurrences across nodes and fills each node's lag figures; returns how many were
/// matched.
///
/// The k-th occurrence of the phase in one node's recording is matched with the k-th in every
/// other's, where all of them start inside `[lo, hi)`, the time every recording covers. Each
/// recording is counted from its own start, not from the overlap's, so a step in progress when
/// a later recording began does not shift the pairs; this assumes every node's recording holds
/// the program from its start (`cufall record -- CMD` on each node). Timing alone cannot do
/// better: a node lagging by more than a step's period looks like one leading into the next.
fn add_lags(nodes: &mut [NodePhase], occ: &[Vec<(i64, i64)>], (lo, hi): (i64, i64)) -> u64 {
    let count = occ.iter().map(Vec::len).min().unwrap_or(0);
    if nodes.len() < 2 || count == 0 {
        return 0;
    }
    let mut sums = vec![0i128; nodes.len()];
    let mut maxes = vec![0i64; nodes.len()];
    let mut matched: u64 = 0;
    for k in 0..count {
        if !occ.iter().all(|o| (lo..hi).contains(&o[k].0)) {
            continue;
        }
        matched += 1;
        let first = occ.iter().map(|o| o[k].1).min().unwrap_or(0);
        let last = occ.iter().map(|o| o[k].1).max().unwrap_or(0);
        for (n, o) in occ.iter().enumerate() {
            let lag = o[k].1.saturating_sub(first);
            sums[n] += i128::from(lag);
            maxes[n] = maxes[n].max(lag);
            if o[k].1 == last && last > first {
                nodes[n].last += 1;
            }
        }
    }
    if matched == 0 {
        return 0;
    }
    for (n, node) in nodes.iter_mut().enumerate() {
        let mean = i64::try_from(sums[n] / i128::from(matched)).unwrap_or(i64::MAX);
        node.mean_lag_ns = Some(Nanos(mean));
        node.max_lag_ns = Some(Nanos(maxes[n]));
    }
    matched
}

/// The node with the largest mean lag, if it lags at all.
fn most_lagging(nodes: &[NodePhase]) -> Option<usize> {
    nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.mean_lag_ns.filter(|l| *l > Nanos::ZERO).map(|l| (i, l)))
        .max_by_key(|(_, l)| *l)
        .map(|(i, _)| i)
}

/// The node with the largest summed mean lag over the phases: the one the others wait for.
fn lagging_node(phases: &[PhaseAcross], nodes: usize) -> Option<usize> {
    let mut sums = vec![0i128; nodes];
    for p in phases {
        for (i, n) in p.nodes.iter().enumerate() {
            sums[i] += i128::from(n.mean_lag_ns.map_or(0, Nanos::get));
        }
    }
    sums.iter()
        .enumerate()
        .filter(|(_, s)| **s > 0)
        .max_by_key(|(_, s)| **s)
        .map(|(i, _)| i)
}

/// The text form of a [`NodesReport`].
pub fn nodes_text(r: &NodesReport) -> String {
    use crate::render::{TextTable, fmt_ns, fmt_pct};
    use crate::utc::fmt_utc;
    let mut out = format!(
        "cufall report: {} recordings of one run, one per node\n",
        r.nodes.len()
    );
    for n in &r.nodes {
        out.push_str(&format!(
            "  {}: {}, {} GPU{} ({}), {} to {}\n",
            cufall_text::name(&n.host),
            cufall_text::escape(&n.trace),
            n.gpus.len(),
            if n.gpus.len() == 1 { "" } else { "s" },
            n.gpus
                .iter()
                .map(|g| cufall_text::name(g).into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            fmt_utc(n.start_ns),
            fmt_utc(n.end_ns),
        ));
    }
    out.push_str(&format!(
        "  overlap: {} ({} to {}); lags are measured inside it (counts, times and idle are each node's whole recording)\n",
        fmt_ns(r.overlap_end_ns - r.overlap_start_ns),
        fmt_utc(r.overlap_start_ns),
        fmt_utc(r.overlap_end_ns)
    ));
    out.push_str(&clock_line(r));
    out.push('\n');
    out.push_str("PHASES PER NODE (host-side NVTX durations; lag: how long after the earliest node a node ended each matched occurrence)\n");
    let mut t = TextTable::new(&[
        "phase", "node", "count", "total", "p50", "p99", "idle", "mean lag", "max lag", "last",
    ]);
    for p in &r.phases {
        for (i, (np, node)) in p.nodes.iter().zip(&r.nodes).enumerate() {
            let lag = |v: Option<Nanos>| v.map_or("-".into(), fmt_ns);
            t.row(vec![
                if i == 0 {
                    p.path.clone()
                } else {
                    String::new()
                },
                node.host.clone(),
                np.count.to_string(),
                fmt_ns(np.total_ns),
                fmt_ns(np.p50_ns),
                fmt_ns(np.p99_ns),
                fmt_pct(np.idle_fraction),
                lag(np.mean_lag_ns),
                lag(np.max_lag_ns),
                if p.matched > 0 {
                    format!("{} of {}", np.last, p.matched)
                } else {
                    "-".into()
                },
            ]);
        }
    }
    out.push_str(&t.render("  "));
    out.push('\n');
    out.push_str(&verdict_lines(r));
    for w in &r.warnings {
        out.push_str(&format!("warning: {}\n", cufall_text::escape(w)));
    }
    out
}

/// What the hosts' clocks allow: the uncertainty between them, and each host's own error.
fn clock_line(r: &NodesReport) -> String {
    let each: Vec<String> = r
        .nodes
        .iter()
        .map(|n| match n.clock {
            Some(c) => format!(
                "{} ±{}{}",
                cufall_text::name(&n.host),
                crate::render::fmt_ns(c.max_error_ns),
                if c.synchronised {
                    ""
                } else {
                    " (not synchronised)"
                }
            ),
            None => format!("{} unknown", cufall_text::name(&n.host)),
        })
        .collect();
    match r.clock_uncertainty_ns {
        Some(u) => format!(
            "  clocks: each host's maximum error when it recorded (the kernel's, kept by NTP/PTP): {}; two hosts' clocks may differ by up to {}: a lag shorter than that cannot be told from clock error\n",
            each.join(", "),
            crate::render::fmt_ns(u)
        ),
        None => format!(
            "  clocks: {}: the recordings do not all say how far their hosts' clocks may be off (recorded by a cufall before 0.1 wrote it), so a lag between nodes may be clock error\n",
            each.join(", ")
        ),
    }
}

/// One line per phase with a lagging node, then the node the others wait for.
fn verdict_lines(r: &NodesReport) -> String {
    let mut out = String::new();
    for p in &r.phases {
        let Some(i) = p.lagging else { continue };
        let n = &p.nodes[i];
        let clocks = match p.beyond_clocks {
            Some(true) => "longer than the clocks' uncertainty",
            Some(false) => "within the clocks' uncertainty: it may be clock error",
            None => "the clocks' uncertainty is unknown",
        };
        out.push_str(&format!(
            "{}: {} ends {} after the earliest node on average (at most {}; last in {} of {} matched occurrences); {clocks}\n",
            cufall_text::name(&p.path),
            cufall_text::name(&r.nodes[i].host),
            crate::render::fmt_ns(n.mean_lag_ns.unwrap_or(Nanos::ZERO)),
            crate::render::fmt_ns(n.max_lag_ns.unwrap_or(Nanos::ZERO)),
            n.last,
            p.matched
        ));
    }
    match r.lagging {
        Some(i) => out.push_str(&format!(
            "lagging node: {} (its phases end last the most, summed over the phases)\n",
            cufall_text::name(&r.nodes[i].host)
        )),
        None => out.push_str(
            "lagging node: none (no phase was matched on every node, or none ends later)\n",
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: (i64, i64) = (i64::MIN, i64::MAX);

    #[test]
    fn lags_are_measured_from_the_earliest_node_per_occurrence() {
        let mut nodes = vec![NodePhase::default(), NodePhase::default()];
        // Node 1 ends 3 ms after node 0 in two occurrences, 1 ms before it in the third.
        let ms = |a: i64, b: i64| (a * 1_000_000, b * 1_000_000);
        let occ = vec![
            vec![ms(5, 10), ms(15, 20), ms(25, 30)],
            vec![ms(5, 13), ms(15, 23), ms(25, 29)],
        ];
        assert_eq!(add_lags(&mut nodes, &occ, ALL), 3);
        assert_eq!(nodes[0].mean_lag_ns.map(Nanos::get), Some(1_000_000 / 3));
        assert_eq!(nodes[1].mean_lag_ns.map(Nanos::get), Some(2_000_000));
        assert_eq!(nodes[1].max_lag_ns.map(Nanos::get), Some(3_000_000));
        assert_eq!((nodes[0].last, nodes[1].last), (1, 2));
        assert_eq!(most_lagging(&nodes), Some(1));
    }

    #[test]
    fn occurrences_are_matched_only_where_every_node_has_them() {
        let mut nodes = vec![NodePhase::default(), NodePhase::default()];
        let occ = vec![vec![(0, 5), (10, 15), (20, 25)], vec![(1, 6)]];
        assert_eq!(add_lags(&mut nodes, &occ, ALL), 1);
        assert_eq!(nodes[1].mean_lag_ns.map(Nanos::get), Some(1));
        let mut none = vec![NodePhase::default(), NodePhase::default()];
        assert_eq!(add_lags(&mut none, &[vec![(1, 2)], vec![]], ALL), 0);
        assert_eq!(none[0].mean_lag_ns.map(Nanos::get), None);
    }

    /// A step in progress when the later recording began: the pairs are counted from each
    /// recording's start, so the overlap leaves that step out on every node and the steps after
    /// it pair with their own, not shifted by one.
    #[test]
    fn a_step_cut_by_the_overlap_does_not_shift_the_pairs() {
        let mut nodes = vec![NodePhase::default(), NodePhase::default()];
        // Steps every 10 units from 0; node 1 ends each 2 after node 0 and starts each 1 after.
        let a: Vec<(i64, i64)> = (0..5).map(|k| (k * 10, k * 10 + 6)).collect();
        let b: Vec<(i64, i64)> = (0..5).map(|k| (k * 10 + 1, k * 10 + 8)).collect();
        // The overlap begins at 0.5: node 0's first step started before it, node 1's after.
        assert_eq!(add_lags(&mut nodes, &[a, b], (1, i64::MAX)), 4);
        assert_eq!(nodes[1].mean_lag_ns.map(Nanos::get), Some(2));
        assert_eq!(nodes[0].mean_lag_ns.map(Nanos::get), Some(0));
    }

    /// The ranks of a node run a step together: their ranges are one occurrence, ending with
    /// the last rank.
    #[test]
    fn ranks_of_a_node_are_one_occurrence() {
        use cufall_trace::model::{NvtxRange, RangeKind};
        let range = |start_ns, end_ns, pid| NvtxRange {
            start_ns,
            end_ns,
            name: "step".into(),
            domain: String::new(),
            kind: RangeKind::PushPop,
            depth: 0,
            pid,
            tid: pid,
            ..Default::default()
        };
        let ph = Phases::build(&[
            range(0, 10, 1),
            range(1, 12, 2),
            range(20, 30, 1),
            range(21, 29, 2),
        ]);
        assert_eq!(occurrences(&ph, "step"), vec![(0, 12), (20, 30)]);
    }

    #[test]
    fn the_clocks_differ_by_at_most_the_two_largest_errors() {
        let node = |max_ms: i64| Node {
            host: String::new(),
            trace: String::new(),
            gpus: Vec::new(),
            start_ns: 0,
            end_ns: 1,
            clock: Some(ClockError {
                max_error_ns: Nanos(max_ms * 1_000_000),
                est_error_ns: Nanos::ZERO,
                synchronised: true,
            }),
            idle_fraction: None,
        };
        let nodes = vec![node(1), node(5), node(2)];
        assert_eq!(clock_uncertainty(&nodes), Some(Nanos(7_000_000)));
        let mut unknown = nodes.clone();
        unknown[1].clock = None;
        assert_eq!(clock_uncertainty(&unknown), None);
    }

    #[test]
    fn times_are_written_as_utc_dates() {
        use crate::utc::fmt_utc;
        assert_eq!(fmt_utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(
            fmt_utc(1_764_460_800_123_000_000),
            "2025-11-30 00:00:00.123 UTC"
        );
        assert_eq!(
            fmt_utc(951_782_400_000_000_000),
            "2000-02-29 00:00:00.000 UTC"
        );
        assert_eq!(fmt_utc(-1_000_000), "1969-12-31 23:59:59.999 UTC");
    }

    #[test]
    fn clock_errors_come_from_the_manifest_or_not_at_all() {
        let mut m = Manifest::new("0.1.0", 0);
        assert_eq!(ClockError::of(&m), None);
        m.extra.insert(CLOCK_MAX_ERROR_US.into(), "1500".into());
        m.extra.insert(CLOCK_EST_ERROR_US.into(), "20".into());
        m.extra.insert(CLOCK_SYNCHRONISED.into(), "yes".into());
        assert_eq!(
            ClockError::of(&m),
            Some(ClockError {
                max_error_ns: Nanos(1_500_000),
                est_error_ns: Nanos(20_000),
                synchronised: true
            })
        );
        m.extra.insert(CLOCK_MAX_ERROR_US.into(), "-5".into());
        assert_eq!(ClockError::of(&m), None);
    }
}
