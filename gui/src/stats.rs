//! Statistics of a selected time range: per GPU and metric the time-weighted mean, min and max,
//! the idle fraction, and the kernels and NVTX ranges inside it. Computed from the pyramid (whole
//! blocks) and raw samples at the edges, so they are exact once the edge tiles are loaded.

use crate::axis::AxisTime;
use crate::loaded::Locked;
use crate::loaded::{host_of, hosts_differ};
use crate::lod::Summary;
use cufall_trace::model::DeviceId;
use std::collections::BTreeMap;

/// One metric of one GPU over the selection.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricStat {
    pub name: String,
    pub unit: String,
    pub summary: Summary,
}

/// One GPU of one recording over the selection.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceStat {
    pub device: DeviceId,
    pub metrics: Vec<MetricStat>,
    /// Share of the sampled time the GPU was idle (the analysis' idle rule).
    pub idle_fraction: Option<f64>,
    /// Time covered by samples.
    pub sampled_ns: i64,
}

/// Work of one name inside the selection.
#[derive(Clone, Debug, PartialEq)]
pub struct NameStat {
    pub name: String,
    pub count: usize,
    /// Time inside the selection (clipped at its edges).
    pub inside_ns: i64,
}

/// One recording over the selection.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceStat {
    pub name: String,
    /// The recording's host, where the open recordings come from different hosts (its GPUs
    /// are then named `host:GPU n`).
    pub host: Option<String>,
    pub devices: Vec<DeviceStat>,
    pub kernels: Vec<NameStat>,
    pub kernel_count: usize,
    pub ranges: Vec<NameStat>,
    pub range_count: usize,
}

/// The statistics of a selection `[a, b)` on the shared axis.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionStats {
    pub a: AxisTime,
    pub b: AxisTime,
    pub traces: Vec<TraceStat>,
    /// Each recording's window, on its own clock: the selection, or its own range of the
    /// selected phase.
    pub windows: Vec<(i64, i64)>,
    /// False while edge samples are not loaded: means are then estimated at the edges and
    /// min/max include whole edge blocks.
    pub exact: bool,
}

/// Computes the statistics; returns also the raw tiles it lacked (per recording, as time
/// ranges on that recording's clock) so the caller can ask for them. `phase`: the selected
/// phase's path and which of its ranges, whose own range in each recording is that recording's
/// window (the selection where the recording lacks it).
pub fn selection_stats(
    traces: &[Locked<'_>],
    a: AxisTime,
    b: AxisTime,
    phase: Option<(&str, usize)>,
) -> (SelectionStats, Vec<Vec<(i64, i64)>>) {
    let mut out = SelectionStats {
        a,
        b,
        traces: Vec::new(),
        windows: Vec::new(),
        exact: true,
    };
    let mut wanted = Vec::new();
    for t in traces {
        let (t0, t1) = phase
            .and_then(|(path, n)| phase_range(t, path, n))
            .unwrap_or((t.slot.local(a.floor()), t.slot.local(b.ceil())));
        out.windows.push((t0, t1));
        let mut want = Vec::new();
        let mut devices = Vec::new();
        let nmetrics = t.slot.data.metrics.len();
        for (dev, p) in &t.s.pyramids {
            let mut metrics = Vec::new();
            let mut sampled = 0;
            for (m, info) in t.slot.data.metrics.iter().enumerate() {
                let (s, exact) = p.aggregate(m, t0, t1, &|x, y| t.s.tiles.slice(*dev, m, x, y));
                if !exact {
                    out.exact = false;
                }
                sampled = sampled.max(s.dur_ns);
                metrics.push(MetricStat {
                    name: info.name.clone(),
                    unit: info.unit.clone(),
                    summary: s,
                });
            }
            let idle_fraction = (p.metrics() > nmetrics).then(|| {
                let (s, _) = p.aggregate(nmetrics, t0, t1, &|x, y| {
                    t.s.tiles.slice(*dev, nmetrics, x, y)
                });
                s.mean()
            });
            devices.push(DeviceStat {
                device: *dev,
                metrics,
                idle_fraction: idle_fraction.flatten(),
                sampled_ns: sampled,
            });
        }
        if !out.exact {
            want.push((t0, t0 + 1));
            want.push((t1 - 1, t1));
        }
        let inside =
            t.s.tables
                .as_ref()
                .map(|tables| NamesInside::of(tables, t0, t1))
                .unwrap_or_default();
        out.traces.push(TraceStat {
            name: t.slot.data.name.clone(),
            host: hosts_differ(traces).then(|| host_of(t)),
            devices,
            kernels: inside.kernels,
            kernel_count: inside.kernel_count,
            ranges: inside.ranges,
            range_count: inside.range_count,
        });
        wanted.push(want);
    }
    (out, wanted)
}

/// The ranges of phase `path` in recording `t`, by start, on its clock (empty where the
/// recording has no such phase).
pub fn phase_ranges(t: &Locked<'_>, path: &str) -> Vec<(i64, i64)> {
    let Some(tb) = t.s.tables.as_ref() else {
        return Vec::new();
    };
    let Some(idx) = tb.phases.phases.iter().position(|p| p.path == path) else {
        return Vec::new();
    };
    let mut r: Vec<(i64, i64)> = tb
        .phases
        .ranges
        .iter()
        .filter(|r| r.phase == idx)
        .map(|r| (r.start_ns, r.end_ns))
        .collect();
    r.sort_unstable();
    r
}

/// The `n`-th range (by start) of phase `path` in recording `t`, on its clock.
pub fn phase_range(t: &Locked<'_>, path: &str, n: usize) -> Option<(i64, i64)> {
    phase_ranges(t, path).get(n).copied()
}

/// The kernels and NVTX ranges of one recording that meet a selection, by name, largest time
/// inside first.
#[derive(Default)]
struct NamesInside {
    kernels: Vec<NameStat>,
    kernel_count: usize,
    ranges: Vec<NameStat>,
    range_count: usize,
}

impl NamesInside {
    fn of(tables: &crate::tables::Tables, t0: i64, t1: i64) -> NamesInside {
        let mut kernels: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
        let mut kernel_count = 0;
        // Per name id first (a whole-run selection holds millions of kernels), then named.
        let mut by_id: Vec<(usize, i64)> = vec![(0, 0); tables.names.len()];
        for dk in tables.kernels.values() {
            for i in dk.spans.overlapping(t0, t1) {
                let (s, e) = (dk.spans.start(i), dk.spans.end(i));
                let inside = e.min(t1) - s.max(t0);
                if inside <= 0 && !(s >= t0 && s < t1) {
                    continue;
                }
                kernel_count += 1;
                let e = &mut by_id[dk.name[i] as usize];
                e.0 += 1;
                e.1 += inside.max(0);
            }
        }
        for (id, (count, inside)) in by_id.into_iter().enumerate() {
            if count > 0 {
                kernels.insert(tables.names.get(id as u32), (count, inside));
            }
        }
        let mut ranges: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
        let mut range_count = 0;
        for r in &tables.nvtx {
            let inside = r.end_ns.min(t1) - r.start_ns.max(t0);
            if inside > 0 || (r.start_ns >= t0 && r.start_ns < t1) {
                range_count += 1;
                let e = ranges.entry(r.name.as_str()).or_default();
                e.0 += 1;
                e.1 += inside.max(0);
            }
        }
        NamesInside {
            kernels: by_time_inside(kernels),
            kernel_count,
            ranges: by_time_inside(ranges),
            range_count,
        }
    }
}

fn by_time_inside(m: BTreeMap<&str, (usize, i64)>) -> Vec<NameStat> {
    let mut v: Vec<NameStat> = m
        .into_iter()
        .map(|(n, (c, d))| NameStat {
            name: n.to_string(),
            count: c,
            inside_ns: d,
        })
        .collect();
    v.sort_by(|x, y| y.inside_ns.cmp(&x.inside_ns).then(x.name.cmp(&y.name)));
    v
}
