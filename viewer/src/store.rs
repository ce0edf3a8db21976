//! Everything the view has received: per-device pyramids of each heatmap's value, drops, NVML
//! readings, NVTX ranges. Fed by [`LiveEvent`]s, from the live sampler, a replay, or a recording
//! loaded whole; memory is bounded in live use (rings) and proportional to the recording when
//! browsing.

use crate::bucket::{Pyramid, Summary};
use cufall_live::{FeedInfo, LiveEvent};
use cufall_trace::model::{
    DeviceId, DeviceInfo, DropRecord, HeatmapSpec, MetricInfo, Nanos, NvmlRow, NvtxRange,
};
use std::collections::VecDeque;

/// How long data is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Live: at most this many bins per pyramid level; small side tables are capped too.
    Ring { bins_per_level: usize },
    /// A recording loaded whole.
    All,
}

/// Bins per level for live views: enough for 1,300 columns at any zoom step.
pub const LIVE_BINS_PER_LEVEL: usize = 4096;
/// Side-table rows kept in live views (drops, NVML per device; NVTX ranges).
const LIVE_ROWS: usize = 20_000;

/// User overrides of how heatmaps are derived (`--metric`, `--denominator`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeatmapOverrides {
    /// Show only these metrics (each as a heatmap), in this order.
    pub metrics: Vec<String>,
    pub denominator: Option<String>,
    pub no_denominator: bool,
    pub full_scale: Option<f64>,
}

impl HeatmapOverrides {
    /// The heatmaps to show: the producer's (or one per metric), with overrides applied.
    pub fn apply(&self, specs: &[HeatmapSpec], metrics: &[MetricInfo]) -> Vec<HeatmapSpec> {
        let mut out: Vec<HeatmapSpec> = if !self.metrics.is_empty() {
            self.metrics
                .iter()
                .map(|m| {
                    specs
                        .iter()
                        .find(|s| &s.metric == m)
                        .cloned()
                        .unwrap_or(HeatmapSpec {
                            metric: m.clone(),
                            denominator: None,
                            full_scale: None,
                        })
                })
                .collect()
        } else if !specs.is_empty() {
            // Recordings made before the spread rollups stopped being heatmaps of their own list
            // `.min`/`.max` beside `.avg`: they are the `.avg` heatmap's spread rows.
            specs
                .iter()
                .filter(|s| !is_spread_sibling(&s.metric, specs))
                .cloned()
                .collect()
        } else {
            // Without specs, show every metric that is not only a denominator or a spread sibling.
            let mut v: Vec<HeatmapSpec> = Vec::new();
            for m in metrics {
                let (base, rollup) = split_rollup(&m.name);
                let sibling_shown = rollup && v.iter().any(|s| split_rollup(&s.metric).0 == base);
                if !sibling_shown {
                    v.push(HeatmapSpec {
                        metric: m.name.clone(),
                        denominator: None,
                        full_scale: None,
                    });
                }
            }
            v
        };
        for s in &mut out {
            if self.no_denominator {
                s.denominator = None;
            } else if let Some(d) = &self.denominator {
                s.denominator = Some(d.clone());
            }
            if self.full_scale.is_some() {
                s.full_scale = self.full_scale;
            }
        }
        out
    }

    /// Metric names these overrides need that `metrics` lacks.
    pub fn unknown(&self, metrics: &[MetricInfo]) -> Vec<String> {
        self.metrics
            .iter()
            .chain(self.denominator.iter().filter(|_| !self.no_denominator))
            .filter(|n| !metrics.iter().any(|m| &m.name == *n))
            .cloned()
            .collect()
    }
}

/// `sm__x.avg.pct` → (`sm__x.pct`, true) when the rollup is min/avg/max.
fn split_rollup(name: &str) -> (String, bool) {
    let parts: Vec<&str> = name.split('.').collect();
    match parts.get(1) {
        Some(&("min" | "avg" | "max")) => {
            let mut rest = vec![parts[0]];
            rest.extend(&parts[2..]);
            (rest.join("."), true)
        }
        _ => (name.to_string(), false),
    }
}

/// Whether `metric` is the `.min` or `.max` rollup of a `.avg` metric that `specs` also shows.
fn is_spread_sibling(metric: &str, specs: &[HeatmapSpec]) -> bool {
    let rollup = metric.split('.').nth(1);
    matches!(rollup, Some("min" | "max"))
        && with_rollup(metric, "avg").is_some_and(|avg| specs.iter().any(|s| s.metric == avg))
}

fn with_rollup(name: &str, rollup: &str) -> Option<String> {
    let mut parts: Vec<&str> = name.split('.').collect();
    match parts.get(1) {
        Some(&("min" | "avg" | "max")) => {
            parts[1] = rollup;
            Some(parts.join("."))
        }
        _ => None,
    }
}

/// One row of a GPU band: the heatmap value from one metric column.
#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    /// `max`, `avg`, `min` for the SM spread; empty for a single lane.
    pub label: String,
    pub column: usize,
}

/// An NVML reading shown as a heatmap when the GPU counters are out of reach, so that an
/// NVML-only recording or live view still shows something per GPU over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlField {
    /// NVML "GPU utilization", what nvidia-smi shows.
    GpuUtil,
    /// NVML memory utilization.
    MemUtil,
}

impl NvmlField {
    pub const ALL: [NvmlField; 2] = [NvmlField::GpuUtil, NvmlField::MemUtil];

    /// The heatmap's title.
    pub fn title(self) -> &'static str {
        match self {
            NvmlField::GpuUtil => "NVML GPU utilization (nvidia-smi: any kernel running)",
            NvmlField::MemUtil => "NVML memory utilization (device memory busy)",
        }
    }

    fn value(self, r: &NvmlRow) -> Option<f64> {
        match self {
            NvmlField::GpuUtil => r.gpu_util_pct,
            NvmlField::MemUtil => r.mem_util_pct,
        }
        .map(f64::from)
    }
}

/// A heatmap with its columns resolved against the feed's metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    pub spec: HeatmapSpec,
    pub unit: String,
    pub denominator_column: Option<usize>,
    /// The plain lane (the named metric).
    pub main: Lane,
    /// Max, avg and min across SMs when those columns were recorded (top to bottom).
    pub spread: Vec<Lane>,
    /// Fed from NVML readings instead of sample columns.
    pub nvml: Option<NvmlField>,
}

impl Heatmap {
    /// A heatmap of an NVML reading (0–100 %).
    pub fn of_nvml(field: NvmlField) -> Heatmap {
        Heatmap {
            spec: HeatmapSpec {
                metric: field.title().to_string(),
                denominator: None,
                full_scale: Some(100.0),
            },
            unit: "%".to_string(),
            denominator_column: None,
            main: Lane {
                label: String::new(),
                column: usize::MAX,
            },
            spread: Vec::new(),
            nvml: Some(field),
        }
    }

    /// The value that maps to the top of the colour scale, when known up front.
    pub fn full_scale(&self) -> Option<f64> {
        self.spec.full_scale.or_else(|| {
            if self.spec.denominator.is_some() {
                Some(1.0)
            } else if self.unit == "%" || self.spec.metric.contains(".pct") {
                Some(100.0)
            } else {
                None
            }
        })
    }

    /// Whether values are best shown as a percentage.
    pub fn is_percent(&self) -> bool {
        self.spec.denominator.is_some() || self.unit == "%" || self.spec.metric.contains(".pct")
    }

    /// All lanes that need a pyramid: the main lane then the spread lanes.
    fn all_lanes(&self) -> impl Iterator<Item = &Lane> {
        std::iter::once(&self.main).chain(self.spread.iter())
    }

    /// Index into a device's series of lane `l` (0 = main, 1.. = spread): a spread lane over
    /// the main metric's own column shares the main lane's pyramid.
    pub fn series_index(&self, l: usize) -> usize {
        match l.checked_sub(1).and_then(|i| self.spread.get(i)) {
            Some(lane) if lane.column == self.main.column => 0,
            _ => l,
        }
    }
}

/// A metric a heatmap names that the feed does not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingMetric(pub String);

/// Resolves heatmap specs against the metric columns; the first spec naming an unknown metric
/// is an error that names it.
pub fn resolve(
    specs: &[HeatmapSpec],
    metrics: &[MetricInfo],
) -> Result<Vec<Heatmap>, MissingMetric> {
    let col = |n: &str| metrics.iter().position(|m| m.name == n);
    let mut out = Vec::new();
    for s in specs {
        let main = col(&s.metric).ok_or_else(|| MissingMetric(s.metric.clone()))?;
        let denominator_column = match &s.denominator {
            Some(d) => Some(col(d).ok_or_else(|| MissingMetric(d.clone()))?),
            None => None,
        };
        let spread: Vec<Lane> = ["max", "avg", "min"]
            .iter()
            .filter_map(|r| {
                let n = with_rollup(&s.metric, r)?;
                Some(Lane {
                    label: (*r).to_string(),
                    column: col(&n)?,
                })
            })
            .collect();
        let spread = if spread.len() >= 2 {
            spread
        } else {
            Vec::new()
        };
        out.push(Heatmap {
            unit: metrics[main].unit.clone(),
            spec: s.clone(),
            denominator_column,
            main: Lane {
                label: String::new(),
                column: main,
            },
            spread,
            nvml: None,
        });
    }
    Ok(out)
}

/// The data of one device.
#[derive(Clone, Debug)]
pub struct DeviceData {
    pub info: DeviceInfo,
    /// `[heatmap][lane]`: lane 0 is the main lane, then the spread lanes.
    pub series: Vec<Vec<Pyramid>>,
    pub drops: VecDeque<DropRecord>,
    pub nvml: VecDeque<NvmlRow>,
    pub samples: u64,
}

/// Which NVTX ranges the phase lane keeps, decided by the caller: the command line knows which
/// NVTX domains are the program's phases and which a library's.
#[derive(Clone)]
pub struct NvtxFilter(pub std::sync::Arc<dyn Fn(&NvtxRange) -> bool + Send + Sync>);

impl std::fmt::Debug for NvtxFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvtxFilter")
    }
}

/// All data of a view.
#[derive(Clone, Debug)]
pub struct Store {
    /// The GPUs in the order first seen. The `d: usize` the methods below take is an index into
    /// this list; the GPU's own number is `devices[d].info.id` (a `DeviceId`).
    pub devices: Vec<DeviceData>,
    pub metrics: Vec<MetricInfo>,
    pub heatmaps: Vec<Heatmap>,
    pub nvtx: VecDeque<NvtxRange>,
    pub messages: VecDeque<String>,
    pub interval_ns: i64,
    pub base_ns: i64,
    pub retention: Retention,
    pub counters_unavailable: Option<String>,
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub ended: bool,
    pub kernels: u64,
    /// Events the feed discarded because the view fell behind.
    pub discarded: u64,
    /// NVTX ranges of the feed kept for the phase lane; `None`: every range.
    pub nvtx_filter: Option<NvtxFilter>,
    /// The time an NVML reading counts for in a heatmap's mean: the polling interval (readings
    /// come at a steady rate, so each weighs the same).
    nvml_weight_ns: i64,
    scratch: Vec<f64>,
}

/// The finest sampling interval cufall records (`sampler::sizing::MIN_INTERVAL_NS`). A manifest
/// that says less (0 or 1 ns: a damaged file) would make bins far finer than the samples, and
/// every sample would step over thousands of empty bins.
const MIN_INTERVAL_NS: i64 = 1_000;

/// The level-0 bin width for an interval: the next power of two above it, so that every base
/// bin of an uninterrupted recording holds at least one sample.
pub fn base_bin_ns(interval: Nanos) -> i64 {
    let i = interval.0.clamp(MIN_INTERVAL_NS, 1 << 40) as u64;
    (i + 1).next_power_of_two() as i64
}

impl Store {
    /// An empty store for the feed described by `info`, showing `heatmaps` (already resolved).
    pub fn new(
        info: &FeedInfo,
        heatmaps: Vec<Heatmap>,
        retention: Retention,
        base_ns: i64,
    ) -> Self {
        let mut s = Store {
            devices: Vec::new(),
            metrics: info.metrics.clone(),
            heatmaps,
            nvtx: VecDeque::new(),
            messages: VecDeque::new(),
            interval_ns: info.interval_ns.0,
            base_ns,
            retention,
            counters_unavailable: info.counters_unavailable.clone(),
            first_ns: None,
            last_ns: None,
            ended: false,
            kernels: 0,
            discarded: 0,
            nvtx_filter: None,
            nvml_weight_ns: info.nvml_interval_ns.0.max(1),
            scratch: Vec::new(),
        };
        for d in &info.devices {
            s.device_index(d.id, Some(d));
        }
        s
    }

    fn new_pyramid(&self) -> Pyramid {
        match self.retention {
            Retention::Ring { bins_per_level } => Pyramid::ring(self.base_ns, bins_per_level),
            Retention::All => Pyramid::unbounded(self.base_ns),
        }
    }

    fn device_index(&mut self, id: DeviceId, info: Option<&DeviceInfo>) -> usize {
        if let Some(i) = self.devices.iter().position(|d| d.info.id == id) {
            return i;
        }
        let series = self
            .heatmaps
            .iter()
            .map(|h| h.all_lanes().map(|_| self.new_pyramid()).collect())
            .collect();
        self.devices.push(DeviceData {
            info: info.cloned().unwrap_or(DeviceInfo {
                id,
                name: String::new(),
                chip: String::new(),
                uuid: String::new(),
                pci_bus_id: String::new(),
                sm_count: None,
                memory_total_bytes: None,
            }),
            series,
            drops: VecDeque::new(),
            nvml: VecDeque::new(),
            samples: 0,
        });
        self.devices.sort_by_key(|d| d.info.id);
        self.devices
            .iter()
            .position(|d| d.info.id == id)
            .unwrap_or(0)
    }

    fn cap(&self) -> Option<usize> {
        match self.retention {
            Retention::Ring { .. } => Some(LIVE_ROWS),
            Retention::All => None,
        }
    }

    fn see_time(&mut self, t: i64) {
        self.first_ns = Some(self.first_ns.map_or(t, |f| f.min(t)));
        self.last_ns = Some(self.last_ns.map_or(t, |l| l.max(t)));
    }

    /// Takes in one event of the feed.
    pub fn ingest(&mut self, event: LiveEvent) {
        let cap = self.cap();
        match event {
            LiveEvent::Samples(b) => {
                if b.is_empty() {
                    return;
                }
                let d = self.device_index(b.device, None);
                let mut scratch = std::mem::take(&mut self.scratch);
                for (h, hm) in self.heatmaps.iter().enumerate() {
                    if hm.nvml.is_some() {
                        continue;
                    }
                    for (l, lane) in hm.all_lanes().enumerate() {
                        if hm.series_index(l) != l {
                            continue; // shares the main lane's pyramid
                        }
                        let Some(num) = b.values.get(lane.column) else {
                            continue;
                        };
                        scratch.clear();
                        match hm.denominator_column.and_then(|c| b.values.get(c)) {
                            Some(den) => scratch.extend(
                                num.iter()
                                    .zip(den)
                                    .map(|(n, d)| if *d > 0.0 { n / d } else { f64::NAN }),
                            ),
                            None => scratch.extend_from_slice(num),
                        }
                        if let Some(p) =
                            self.devices[d].series.get_mut(h).and_then(|s| s.get_mut(l))
                        {
                            p.add_samples(&b.start_ns, &b.end_ns, scratch.iter().copied());
                        }
                    }
                }
                self.scratch = scratch;
                self.devices[d].samples += b.len() as u64;
                let (lo, hi) = (
                    b.start_ns.iter().copied().min().unwrap_or(0),
                    b.end_ns.iter().copied().max().unwrap_or(0),
                );
                self.see_time(lo);
                self.see_time(hi);
            }
            LiveEvent::Drop(r) => {
                let d = self.device_index(r.device, None);
                self.see_time(r.start_ns);
                self.see_time(r.end_ns);
                push_capped(&mut self.devices[d].drops, r, cap);
            }
            LiveEvent::Nvml(rows) => {
                for r in rows {
                    let d = self.device_index(r.device, None);
                    for (h, hm) in self.heatmaps.iter().enumerate() {
                        let Some(v) = hm.nvml.and_then(|f| f.value(&r)) else {
                            continue;
                        };
                        if let Some(p) =
                            self.devices[d].series.get_mut(h).and_then(|s| s.get_mut(0))
                        {
                            let end = r.t_ns.saturating_add(self.nvml_weight_ns);
                            p.add_samples(&[r.t_ns], &[end], std::iter::once(v));
                        }
                    }
                    if self.heatmaps.iter().any(|hm| hm.nvml.is_some()) {
                        self.see_time(r.t_ns);
                    }
                    push_capped(&mut self.devices[d].nvml, r, cap);
                }
            }
            LiveEvent::Nvtx(ranges) => {
                for r in ranges {
                    if self.nvtx_filter.as_ref().is_none_or(|f| (f.0)(&r)) {
                        push_capped(&mut self.nvtx, r, cap);
                    }
                }
            }
            LiveEvent::Kernels(k) => self.kernels += k.len() as u64,
            LiveEvent::Message(m) => push_capped(&mut self.messages, m, Some(50)),
            LiveEvent::End => self.ended = true,
        }
    }

    /// Sorts the side tables by time (after loading a recording whose tables were appended in
    /// segments).
    pub fn finish_loading(&mut self) {
        for d in &mut self.devices {
            d.drops.make_contiguous().sort_by_key(|r| r.start_ns);
            d.nvml.make_contiguous().sort_by_key(|r| r.t_ns);
        }
        self.nvtx
            .make_contiguous()
            .sort_by_key(|r| (r.start_ns, r.depth));
    }

    /// The newest NVML reading of device `d` at or before `t_ns`.
    pub fn nvml_at(&self, d: usize, t_ns: i64) -> Option<&NvmlRow> {
        let rows = &self.devices.get(d)?.nvml;
        let i = rows.partition_point(|r| r.t_ns <= t_ns);
        if i == 0 { None } else { rows.get(i - 1) }
    }

    /// Drops of device `d` overlapping `[from, to)`.
    pub fn drops_in(&self, d: usize, from: i64, to: i64) -> impl Iterator<Item = &DropRecord> {
        self.devices
            .get(d)
            .into_iter()
            .flat_map(|dev| dev.drops.iter())
            .filter(move |r| r.start_ns < to && r.end_ns > from)
    }

    /// Per column of `col_ns` from `t0` (`cols` of them, up to `t1`), the time device `d` lost
    /// to drops in it.
    pub fn dropped_per_column(
        &self,
        d: usize,
        t0: i64,
        t1: i64,
        col_ns: i64,
        cols: usize,
    ) -> Vec<i64> {
        let mut lost = vec![0i64; cols];
        let col_ns = col_ns.max(1);
        for r in self.drops_in(d, t0, t1) {
            // Saturating: a damaged trace may hold drops that reach the ends of i64.
            let a = r.start_ns.max(t0).saturating_sub(t0) / col_ns;
            let b = (r.end_ns.min(t1).saturating_sub(t0).saturating_sub(1) / col_ns).max(a);
            for c in a..=b {
                if let Some(slot) = usize::try_from(c).ok().and_then(|c| lost.get_mut(c)) {
                    let cs = t0.saturating_add(c.saturating_mul(col_ns));
                    let ce = cs.saturating_add(col_ns);
                    *slot =
                        slot.saturating_add(r.end_ns.min(ce).saturating_sub(r.start_ns.max(cs)));
                }
            }
        }
        lost
    }

    /// The aggregate of heatmap `h`, lane `l` of device `d` over `[from, to)`.
    pub fn total(&self, d: usize, h: usize, l: usize, from: i64, to: i64) -> Summary {
        self.devices
            .get(d)
            .and_then(|dev| Some((dev.series.get(h)?, self.heatmaps.get(h)?)))
            .and_then(|(s, hm)| s.get(hm.series_index(l)))
            .map_or(Summary::EMPTY, |p| p.total(from, to))
    }

    /// Bins held over all pyramids (memory accounting for benchmarks).
    pub fn bins_held(&self) -> usize {
        self.devices
            .iter()
            .flat_map(|d| d.series.iter().flatten())
            .map(Pyramid::bins_held)
            .sum()
    }
}

fn push_capped<T>(q: &mut VecDeque<T>, v: T, cap: Option<usize>) {
    q.push_back(v);
    if let Some(cap) = cap {
        while q.len() > cap {
            q.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(n: &str) -> MetricInfo {
        MetricInfo {
            name: n.into(),
            unit: String::new(),
            description: String::new(),
        }
    }

    #[test]
    fn the_nvtx_filter_keeps_the_phase_lane_s_ranges_only() {
        let info = FeedInfo {
            devices: Vec::new(),
            metrics: Vec::new(),
            heatmaps: Vec::new(),
            interval_ns: Nanos(10_000),
            nvml_interval_ns: Nanos(0),
            counters_unavailable: None,
        };
        let range = |name: &str, domain: &str| NvtxRange {
            name: name.into(),
            domain: domain.into(),
            end_ns: 10,
            ..Default::default()
        };
        let feed = || LiveEvent::Nvtx(vec![range("step", ""), range("cub::Scan", "CCCL")]);
        let mut all = Store::new(&info, Vec::new(), Retention::All, 16_384);
        all.ingest(feed());
        assert_eq!(all.nvtx.len(), 2);
        let mut program = Store::new(&info, Vec::new(), Retention::All, 16_384);
        program.nvtx_filter = Some(NvtxFilter(std::sync::Arc::new(|r: &NvtxRange| {
            r.domain != "CCCL"
        })));
        program.ingest(feed());
        let names: Vec<&str> = program.nvtx.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["step"]);
    }

    #[test]
    fn spread_lanes_are_found_from_rollup_siblings() {
        let metrics = [
            m("sm__x.avg"),
            m("sm__x.max"),
            m("sm__x.min"),
            m("gr__cycles_elapsed.max"),
        ];
        let specs = [HeatmapSpec {
            metric: "sm__x.avg".into(),
            denominator: Some("gr__cycles_elapsed.max".into()),
            full_scale: None,
        }];
        let h = resolve(&specs, &metrics).unwrap();
        let labels: Vec<_> = h[0].spread.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["max", "avg", "min"]);
        assert_eq!(h[0].denominator_column, Some(3));
        assert_eq!(h[0].full_scale(), Some(1.0));
        assert_eq!(
            resolve(
                &[HeatmapSpec {
                    metric: "nope".into(),
                    denominator: None,
                    full_scale: None
                }],
                &metrics
            ),
            Err(MissingMetric("nope".into()))
        );
    }

    /// A recording that lists the spread rollups as heatmaps of their own shows one heatmap
    /// with spread rows, not three identical ones.
    #[test]
    fn spread_rollups_listed_as_heatmaps_are_one_heatmap() {
        let metrics = [
            m("sm__x.avg"),
            m("sm__x.min"),
            m("sm__x.max"),
            m("dram__y.avg"),
        ];
        let spec = |name: &str| HeatmapSpec {
            metric: name.into(),
            denominator: None,
            full_scale: None,
        };
        let specs = [
            spec("sm__x.avg"),
            spec("sm__x.min"),
            spec("sm__x.max"),
            spec("dram__y.avg"),
        ];
        let shown = HeatmapOverrides::default().apply(&specs, &metrics);
        let names: Vec<_> = shown.iter().map(|s| s.metric.as_str()).collect();
        assert_eq!(names, ["sm__x.avg", "dram__y.avg"]);
        let h = resolve(&shown, &metrics).unwrap();
        let labels: Vec<_> = h[0].spread.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["max", "avg", "min"]);
        // Asked for by name, a rollup is still shown.
        let o = HeatmapOverrides {
            metrics: vec!["sm__x.min".into()],
            ..Default::default()
        };
        assert_eq!(o.apply(&specs, &metrics)[0].metric, "sm__x.min");
    }

    #[test]
    fn overrides_replace_denominator_and_scale() {
        let metrics = [m("a.avg"), m("a.max"), m("b.sum")];
        let o = HeatmapOverrides::default();
        let specs = o.apply(&[], &metrics);
        assert_eq!(
            specs.iter().map(|s| s.metric.as_str()).collect::<Vec<_>>(),
            ["a.avg", "b.sum"]
        );
        let o = HeatmapOverrides {
            metrics: vec!["b.sum".into()],
            denominator: Some("a.max".into()),
            full_scale: Some(2.0),
            ..Default::default()
        };
        let s = o.apply(&[], &metrics);
        assert_eq!(s[0].denominator.as_deref(), Some("a.max"));
        assert_eq!(s[0].full_scale, Some(2.0));
        let o = HeatmapOverrides {
            metrics: vec!["zzz".into()],
            ..Default::default()
        };
        assert_eq!(o.unknown(&metrics), ["zzz"]);
    }
}
