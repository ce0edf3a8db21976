//! One open recording: what the window shows of it, loaded off the UI thread.
//!
//! [`LoadedTrace::open`] reads the manifest at once (so errors show immediately and the tracks
//! can be laid out) and starts one worker thread that, in order:
//!
//! 1. reads the tables beside the samples into [`Tables`] (compact kernels read a segment at a
//!    time, NVTX lanes and phases, drops, NVML with its pyramid); a table that fails its checks is
//!    reported and left empty, the others still load;
//! 2. streams the samples table in time *tiles* (a query per tile, which Parquet row-group
//!    statistics narrow to the files and row groups holding it), pushing each sample into the
//!    device's [`DevicePyramid`]; the pyramid is usable while it grows and the view draws a
//!    placeholder past [`Shared::loaded_until_ns`]; the first tiles are kept while they fit a
//!    quarter of the raw-sample budget ([`crate::tiles::BUILD_KEEPS`]), so that what the
//!    report's scan needs next does not come on top of a full cache;
//! 3. computes the analysis report (per-phase statistics and gaps) for the side panel;
//! 4. then loads tiles of raw samples the view asks for ([`LoadedTrace::request_tiles`]),
//!    evicting the least recently used ones beyond the budget.
//!
//! The UI locks [`Shared`] once per frame; the worker holds the lock only for short steps.
//!
//! The handle ([`LoadedTrace`]) and what it shares ([`Shared`]) are in [`crate::loaded`]; this
//! module is the worker that fills them.

use crate::gaps::DeviceGaps;
use crate::loaded::{GAPS_LISTED, LoadedTrace, ReportState, Request, Shared, TimeSpan, lock};
use crate::lod::DevicePyramid;
use crate::tables::Tables;
use crate::tiles::{TILE_SAMPLES, Tile, TileCache, add_to_tile, finish_tile};
use cufall_analysis::report::{ReportOptions, build_report_with, resolve_activity};
use cufall_analysis::samples::Activity;
use cufall_analysis::select::PhaseSelect;
use cufall_trace::Trace;
use cufall_trace::model::DeviceId;
use cufall_trace::model::MetricInfo;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

/// Samples pushed into the pyramids per lock of [`Shared`].
const PUSH_CHUNK: usize = 1 << 16;
/// Samples per window of the report's scan in the window: a quarter of the command line's
/// ([`cufall_analysis::samples::SAMPLES_PER_WINDOW`]), since here a window's state comes on top
/// of the pyramid and tables (with 4 M windows the 1-hour trace's peak was higher).
pub const REPORT_WINDOW_SAMPLES: u64 = cufall_analysis::samples::SAMPLES_PER_WINDOW / 4;

/// Opening a recording failed before anything could be shown.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct OpenError {
    pub path: PathBuf,
    #[source]
    pub source: cufall_trace::TraceError,
}

impl LoadedTrace {
    /// Opens the trace at `path` and starts loading it; `repaint` is called whenever more is
    /// ready. `raw_budget` bounds the memory of raw samples kept.
    pub fn open(
        path: &Path,
        raw_budget: usize,
        phases: &PhaseSelect,
        repaint: impl Fn() + Send + 'static,
    ) -> Result<LoadedTrace, OpenError> {
        let trace = Trace::open(path).map_err(|source| OpenError {
            path: path.to_path_buf(),
            source,
        })?;
        let manifest = trace.manifest().clone();
        let metrics: Vec<MetricInfo> = manifest
            .sampling
            .as_ref()
            .map(|s| s.metrics.clone())
            .unwrap_or_default();
        let devices: Vec<DeviceId> = manifest.devices.iter().map(|d| d.id).collect();
        // The interval and warnings `report` uses: an absurd manifest value is named and
        // replaced by what the samples show (a samples table that cannot be read is reported
        // when the loader reads it).
        let checked = cufall_analysis::manifest::check(&trace).ok();
        let interval_ns = checked.as_ref().map_or_else(
            || {
                manifest
                    .sampling
                    .as_ref()
                    .map(|s| s.interval_ns)
                    .unwrap_or(0)
                    .max(1)
            },
            |c| c.interval_ns.0,
        );
        let mut warnings = trace.warnings();
        warnings.extend(checked.into_iter().flat_map(|c| c.warnings));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let start = manifest.created_unix_ns;
        let end = manifest.end_unix_ns.unwrap_or(start + 1).max(start + 1);
        let shared = Arc::new(Mutex::new(Shared {
            tables: None,
            pyramids: BTreeMap::new(),
            activity: None,
            extent: TimeSpan {
                start_ns: start,
                end_ns: end,
            },
            loaded_until_ns: start,
            samples_done: false,
            tiles: TileCache::new(raw_budget),
            report: ReportState::Computing { scanned: None },
            gaps_by_device: BTreeMap::new(),
            problems: Vec::new(),
            warnings,
            idle: false,
        }));
        let trace = Arc::new(trace);
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            trace: trace.clone(),
            shared: shared.clone(),
            rx,
            repaint: Box::new(repaint),
            metrics: metrics.iter().map(|m| m.name.clone()).collect(),
            interval_ns,
            rule: None,
            phases: phases.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("cufall-gui-load".into())
            .spawn(move || worker.run());
        if let Err(e) = spawned {
            lock(&shared)
                .problems
                .push(format!("cannot start the loading thread: {e}"));
        }
        Ok(LoadedTrace {
            path: path.to_path_buf(),
            name,
            manifest,
            metrics,
            devices,
            interval_ns,
            trace,
            shared,
            requests: tx,
        })
    }
}

struct Worker {
    trace: Arc<Trace>,
    shared: Arc<Mutex<Shared>>,
    rx: mpsc::Receiver<Request>,
    repaint: Box<dyn Fn() + Send>,
    metrics: Vec<String>,
    interval_ns: i64,
    /// Set once the activity is resolved: computes the idle series of tiles.
    rule: Option<IdleRule>,
    /// Which NVTX ranges are phases.
    phases: PhaseSelect,
}

/// How each sample's idle flag is computed: column indices of the activity value's parts.
struct IdleRule {
    metric: usize,
    denominator: Option<usize>,
    threshold: f32,
    also_low: Vec<usize>,
    pct: f32,
}

impl IdleRule {
    fn of(a: &Activity, metrics: &[String]) -> Option<IdleRule> {
        let idx = |n: &str| metrics.iter().position(|m| m == n);
        Some(IdleRule {
            metric: idx(&a.metric)?,
            denominator: match &a.denominator {
                Some(d) => Some(idx(d)?),
                None => None,
            },
            threshold: a.threshold() as f32,
            also_low: a.also_low.iter().filter_map(|n| idx(n)).collect(),
            pct: (a.idle_below * 100.0) as f32,
        })
    }

    /// 1 for an idle sample, 0 for a busy one, and NaN for one lacking a value the test needs
    /// (null in the trace): unknown, which the pyramid leaves out of the idle fraction as the
    /// report leaves it out of idle time.
    fn idle(&self, v: &[f32]) -> f32 {
        let num = v[self.metric];
        let act = match self.denominator {
            Some(d) if v[d] > 0.0 => num / v[d],
            Some(d) if v[d].is_nan() => f32::NAN,
            Some(_) => 0.0,
            None => num,
        };
        if act.is_nan() || self.also_low.iter().any(|i| v[*i].is_nan()) {
            return f32::NAN;
        }
        let idle = act < self.threshold && self.also_low.iter().all(|i| v[*i] < self.pct);
        if idle { 1.0 } else { 0.0 }
    }
}

impl Worker {
    fn run(mut self) {
        self.load_tables();
        self.load_samples();
        self.load_report();
        self.set(|s| s.idle = true);
        while let Ok(Request::Tile(k)) = self.rx.recv() {
            self.serve_tile(k);
            let done = {
                let s = lock(&self.shared);
                s.tiles.pending.is_empty()
            };
            if done {
                self.set(|s| s.idle = true);
            }
        }
    }

    fn set(&self, f: impl FnOnce(&mut Shared)) {
        f(&mut lock(&self.shared));
        (self.repaint)();
    }

    fn problem(&self, what: &str, e: impl std::fmt::Display) {
        let msg = format!("{}: {what}: {e}", self.trace.path().display());
        self.set(|s| s.problems.push(msg));
    }

    fn load_tables(&self) {
        let interval = self.trace.manifest().nvml_interval_ns.unwrap_or(10_000_000);
        let tables = Tables::load(&self.trace, interval, &self.phases, &|what, e| {
            self.problem(what, e)
        });
        self.set(|s| s.tables = Some(tables));
    }

    /// A sample starting more than this after the previous one's end follows a hole: pyramid
    /// blocks end there.
    fn hole_ns(&self) -> i64 {
        (self.interval_ns / 2).max(1)
    }

    fn load_samples(&mut self) {
        let activity = match resolve_activity(&self.trace, &ReportOptions::default()) {
            Ok(a) => a,
            Err(e) => {
                self.problem("idle time not shown", e);
                None
            }
        };
        self.rule = activity
            .as_ref()
            .and_then(|a| IdleRule::of(a, &self.metrics));
        let series = self.metrics.len() + usize::from(self.rule.is_some());
        let summary = match self.trace.summary() {
            Ok(s) => s,
            Err(e) => {
                self.problem("counters not shown", e);
                self.set(|s| s.samples_done = true);
                return;
            }
        };
        let total: u64 = summary.devices.values().map(|d| d.samples).sum();
        let (first, last) = match (summary.first_ns, summary.last_ns) {
            (Some(a), Some(b)) if b > a => (a, b),
            _ => {
                let e = lock(&self.shared).extent;
                (e.start_ns, e.end_ns)
            }
        };
        let tiles = total.div_ceil(TILE_SAMPLES).max(1) as i64;
        let tile_ns = ((last - first) / tiles + 1).max(1);
        let hole_ns = self.hole_ns();
        self.set(|s| {
            s.activity = activity.clone();
            s.extent = TimeSpan {
                start_ns: first,
                end_ns: last,
            };
            s.loaded_until_ns = first;
            s.tiles.origin_ns = first;
            s.tiles.tile_ns = tile_ns;
            s.tiles.count = tiles;
        });
        if self.metrics.is_empty() {
            self.set(|s| {
                s.samples_done = true;
                s.loaded_until_ns = last;
            });
            return;
        }
        let mut min_start = i64::MAX;
        let mut max_end = i64::MIN;
        for k in 0..tiles {
            while let Ok(Request::Tile(r)) = self.rx.try_recv() {
                // Asked before the build finished: it will be loaded in order anyway.
                lock(&self.shared).tiles.pending.remove(&r);
            }
            let tile = match self.read_tile(first, tile_ns, k, tiles) {
                Ok(t) => t,
                Err(e) => {
                    self.problem("counter samples of a part of the trace not shown", e);
                    continue;
                }
            };
            // The trace's summary is still keyed by the bare device number.
            let (lo, hi) = self.push_tile(&tile, series, hole_ns, |dev| {
                summary.devices.get(&dev).map_or(0, |d| d.samples)
            });
            min_start = min_start.min(lo);
            max_end = max_end.max(hi);
            let until = if k + 1 == tiles {
                last
            } else {
                first + (k + 1) * tile_ns
            };
            self.set(|s| {
                s.loaded_until_ns = until;
                s.tiles.insert(k, tile, false);
            });
        }
        self.set(|s| {
            for p in s.pyramids.values_mut() {
                p.flush();
                p.shrink_to_fit();
            }
            if min_start < max_end {
                s.extent = TimeSpan {
                    start_ns: min_start.min(s.extent.start_ns),
                    end_ns: max_end.max(s.extent.end_ns),
                };
            }
            s.loaded_until_ns = s.extent.end_ns;
            s.samples_done = true;
        });
        crate::memory::give_back();
    }

    /// Adds a tile's samples to each device's pyramid, a chunk at a time so the view is not
    /// held up; `expected(device)` is its sample count, to reserve once. Returns the earliest
    /// start and the latest end in the tile.
    fn push_tile(
        &self,
        tile: &Tile,
        series: usize,
        hole_ns: i64,
        expected: impl Fn(DeviceId) -> u64,
    ) -> (i64, i64) {
        let (mut min_start, mut max_end) = (i64::MAX, i64::MIN);
        for (dev, raw) in &tile.devices {
            min_start = min_start.min(raw.start_ns.first().copied().unwrap_or(i64::MAX));
            max_end = max_end.max(raw.end_ns.iter().copied().max().unwrap_or(i64::MIN));
            let mut row = vec![0f32; series];
            let mut at = 0;
            debug_assert_eq!(raw.values.len(), series);
            while at < raw.len() {
                let to = (at + PUSH_CHUNK).min(raw.len());
                let mut s = lock(&self.shared);
                let p = s.pyramids.entry(*dev).or_insert_with(|| {
                    let mut p = DevicePyramid::new(series, hole_ns);
                    p.reserve_for(expected(*dev));
                    p
                });
                for i in at..to {
                    for (m, col) in raw.values.iter().enumerate() {
                        row[m] = col[i];
                    }
                    p.push(raw.start_ns[i], raw.end_ns[i], &row);
                }
                drop(s);
                at = to;
            }
        }
        (min_start, max_end)
    }

    /// Reads tile `k`: samples starting in `[first + k·span, first + (k+1)·span)`, the first
    /// and last tile open-ended.
    fn read_tile(
        &self,
        first: i64,
        span: i64,
        k: i64,
        count: i64,
    ) -> Result<Tile, cufall_trace::TraceError> {
        let lo = if k == 0 { i64::MIN } else { first + k * span };
        let hi = if k + 1 >= count {
            i64::MAX
        } else {
            first + (k + 1) * span
        };
        let names: Vec<&str> = self.metrics.iter().map(String::as_str).collect();
        let mut tile = Tile::default();
        self.trace.samples_between(lo, hi, &names, |rows| {
            add_to_tile(&mut tile, rows);
            Ok::<(), cufall_trace::TraceError>(())
        })?;
        finish_tile(&mut tile);
        if let Some(rule) = &self.rule {
            // The idle flag as one more series, so raw samples answer idle-fraction queries too.
            let mut row = vec![0f32; self.metrics.len()];
            for series in tile.devices.values_mut() {
                let flags: Vec<f32> = (0..series.len())
                    .map(|i| {
                        for (m, col) in series.values.iter().enumerate() {
                            row[m] = col[i];
                        }
                        rule.idle(&row)
                    })
                    .collect();
                series.values.push(flags);
            }
        }
        // The tile's own pyramid, so that views between a level-0 block and a sample per
        // column cost about one summary per column too (built here, off the UI thread).
        let hole_ns = self.hole_ns();
        for series in tile.devices.values_mut() {
            series.build_fine(hole_ns);
        }
        tile.recount();
        Ok(tile)
    }

    fn serve_tile(&self, k: i64) {
        let (first, span, count) = {
            let s = lock(&self.shared);
            (s.tiles.origin_ns, s.tiles.tile_ns, s.tiles.count)
        };
        match self.read_tile(first, span, k, count) {
            Ok(tile) => self.set(|s| {
                s.tiles.insert(k, tile, true);
            }),
            Err(e) => {
                self.problem("raw samples not loaded", e);
                self.set(|s| {
                    s.tiles.pending.remove(&k);
                    s.tiles.failed.insert(k);
                });
            }
        }
    }

    fn load_report(&self) {
        if self.metrics.is_empty() {
            self.set(|s| s.report = ReportState::NvmlOnly);
            return;
        }
        // The panel lists the longest gaps; the timeline draws every one, kept here compactly.
        let opts = ReportOptions {
            // The selection panel counts kernels itself, for any span.
            kernel_rows: Some(0),
            gap_rows: Some(GAPS_LISTED),
            window_samples: REPORT_WINDOW_SAMPLES,
            phases: self.phases.clone(),
            ..ReportOptions::default()
        };
        let mut building: BTreeMap<DeviceId, DeviceGaps> = BTreeMap::new();
        let r = build_report_with(
            &self.trace,
            &opts,
            &mut |g| building.entry(g.device).or_default().push(g),
            &mut |done, total| {
                self.set(|s| {
                    s.report = ReportState::Computing {
                        scanned: Some((done, total)),
                    }
                })
            },
        )
        .map_err(|e| e.to_string());
        let by_device: BTreeMap<DeviceId, DeviceGaps> = match &r {
            Ok(_) => building.into_iter().map(|(d, g)| (d, g.finish())).collect(),
            Err(_) => BTreeMap::new(),
        };
        crate::memory::give_back();
        self.set(|s| {
            s.report = match r {
                Ok(r) => ReportState::Ready(Box::new(r)),
                Err(e) => ReportState::Failed(e),
            };
            s.gaps_by_device = by_device;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::IdleRule;

    #[test]
    fn a_sample_lacking_a_value_is_unknown_not_busy() {
        let rule = IdleRule {
            metric: 0,
            denominator: Some(1),
            threshold: 0.05,
            also_low: vec![2],
            pct: 5.0,
        };
        assert_eq!(rule.idle(&[0.0, 1.0, 0.0]), 1.0);
        assert_eq!(rule.idle(&[0.9, 1.0, 0.0]), 0.0);
        assert_eq!(
            rule.idle(&[0.0, 0.0, 0.0]),
            1.0,
            "a zero denominator is idle"
        );
        for unknown in [
            [f32::NAN, 1.0, 0.0],
            [0.0, f32::NAN, 0.0],
            [0.0, 1.0, f32::NAN],
        ] {
            assert!(rule.idle(&unknown).is_nan(), "{unknown:?}");
        }
    }
}
