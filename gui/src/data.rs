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
//!    quarter of the raw-sample budget ([`BUILD_KEEPS`]), so that what the report's scan needs
//!    next does not come on top of a full cache;
//! 3. computes the analysis report (per-phase statistics and gaps) for the side panel;
//! 4. then loads tiles of raw samples the view asks for ([`LoadedTrace::request_tiles`]),
//!    evicting the least recently used ones beyond the budget.
//!
//! The UI locks [`Shared`] once per frame; the worker holds the lock only for short steps.

use crate::lod::{DevicePyramid, RawSeries, RawSlice};
use cufall_analysis::report::{GapRow, Report, ReportOptions, build_report_with, resolve_activity};
use cufall_analysis::samples::Activity;
use cufall_analysis::select::PhaseSelect;
use cufall_trace::model::{Manifest, MetricInfo};
use cufall_trace::{SampleColumns, Trace};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

/// Samples (all devices) per tile the worker reads at a time.
pub const TILE_SAMPLES: u64 = 1 << 20;
/// Samples pushed into the pyramids per lock of [`Shared`].
const PUSH_CHUNK: usize = 1 << 16;
/// Default memory for raw samples kept in tiles.
pub const DEFAULT_RAW_BUDGET_BYTES: usize = 256 << 20;
/// Samples per window of the report's scan in the window: a quarter of the command line's
/// ([`cufall_analysis::samples::SAMPLES_PER_WINDOW`]), since here a window's state comes on top
/// of the pyramid and tables (with 4 M windows the 1-hour trace's peak was higher).
pub const REPORT_WINDOW_SAMPLES: u64 = cufall_analysis::samples::SAMPLES_PER_WINDOW / 4;
/// The share of the raw-sample budget (1/`BUILD_KEEPS`) that tiles read for the pyramid may
/// keep; the rest is for the tiles the view asks for.
pub const BUILD_KEEPS: usize = 4;

/// A stretch of time on the trace's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeSpan {
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Something a worker can be asked for.
enum Request {
    Tile(i64),
}

/// One device's idle gaps in start order, with what a frame needs to draw runs of them narrower
/// than a pixel without visiting each (their spans and a running sum of their durations) and what
/// the pointer's tooltip says of one. Every gap of the recording is here, in 36 bytes or so each;
/// the report itself lists only the longest.
#[derive(Debug, Default)]
pub struct DeviceGaps {
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// `dur_prefix[i]`: total duration of the first `i` gaps (one more entry than gaps).
    pub dur_prefix: Vec<i64>,
    /// Each gap's place, an index into `places`.
    place: Vec<u32>,
    places: Vec<Arc<str>>,
    /// Each gap's time with a kernel resident; empty when kernels were not captured.
    kernel_resident_ns: Vec<i64>,
    /// Per block of [`GAP_BLOCK`] gaps, the longest time between one of them and the gap
    /// before it (set by [`DeviceGaps::finish`]): a frame that merges gaps closer than a pixel
    /// crosses a block in one step where this is under a pixel.
    block_sep: Vec<i64>,
}

/// Gaps per block of [`DeviceGaps`]'s separations.
pub const GAP_BLOCK: usize = 64;

impl DeviceGaps {
    /// Adds a gap; gaps come in start order (as the report finds them), else
    /// [`DeviceGaps::finish`] sorts them.
    pub fn push(&mut self, g: &GapRow) {
        if self.dur_prefix.is_empty() {
            self.dur_prefix.push(0);
        }
        self.start_ns.push(g.start_ns);
        self.end_ns.push(g.end_ns);
        let sum = self.dur_prefix.last().copied().unwrap_or(0) + g.duration_ns;
        self.dur_prefix.push(sum);
        // A place's gaps share one label: the last one's is the likely match.
        let id = match self.place.last() {
            Some(&last) if Arc::ptr_eq(&self.places[last as usize], &g.place) => last,
            _ => match self.places.iter().position(|p| **p == *g.place) {
                Some(i) => i as u32,
                None => {
                    self.places.push(g.place.clone());
                    (self.places.len() - 1) as u32
                }
            },
        };
        self.place.push(id);
        if let Some(k) = g.kernel_resident_ns {
            self.kernel_resident_ns.push(k);
        }
    }

    /// Sorts the gaps by start if they did not come in that order, and gives back spare capacity.
    pub fn finish(mut self) -> DeviceGaps {
        if !self.start_ns.is_sorted() {
            let mut order: Vec<usize> = (0..self.start_ns.len()).collect();
            order.sort_unstable_by_key(|i| self.start_ns[*i]);
            let pick = |v: &[i64]| order.iter().map(|i| v[*i]).collect::<Vec<i64>>();
            let durs: Vec<i64> = order
                .iter()
                .map(|i| self.end_ns[*i] - self.start_ns[*i])
                .collect();
            let start = pick(&self.start_ns);
            let end = pick(&self.end_ns);
            let kr = if self.kernel_resident_ns.len() == order.len() {
                pick(&self.kernel_resident_ns)
            } else {
                Vec::new()
            };
            let place = order.iter().map(|i| self.place[*i]).collect();
            self.dur_prefix = std::iter::once(0)
                .chain(durs.iter().scan(0i64, |acc, d| {
                    *acc += d;
                    Some(*acc)
                }))
                .collect();
            (
                self.start_ns,
                self.end_ns,
                self.kernel_resident_ns,
                self.place,
            ) = (start, end, kr, place);
        }
        self.index_separations();
        self.start_ns.shrink_to_fit();
        self.end_ns.shrink_to_fit();
        self.dur_prefix.shrink_to_fit();
        self.place.shrink_to_fit();
        self.kernel_resident_ns.shrink_to_fit();
        self
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Time from the end of gap `k - 1` to the start of gap `k` (unbounded for the first).
    fn separation(&self, k: usize) -> i64 {
        match k.checked_sub(1) {
            Some(p) => self.start_ns[k] - self.end_ns[p],
            None => i64::MAX,
        }
    }

    fn index_separations(&mut self) {
        self.block_sep = (0..self.len())
            .step_by(GAP_BLOCK)
            .map(|b| {
                (b..(b + GAP_BLOCK).min(self.len()))
                    .map(|k| self.separation(k))
                    .max()
                    .unwrap_or(i64::MIN)
            })
            .collect();
    }

    /// The first gap in `from..hi` that starts more than `max_sep` after the previous gap ends
    /// (`hi` if none): every gap before it continues a run of gaps that close together.
    /// Crosses whole blocks where their separations allow, so a run over a whole hour of gaps
    /// costs a step per block.
    pub fn close_run_until(&self, from: usize, hi: usize, max_sep: i64) -> usize {
        crate::spans::first_failing(
            from,
            hi,
            GAP_BLOCK,
            |b| self.block_sep.get(b).is_some_and(|s| *s <= max_sep),
            |k| self.separation(k) <= max_sep,
        )
    }

    /// Where gap `k` falls, as the report spells it.
    pub fn place(&self, k: usize) -> &str {
        self.place
            .get(k)
            .and_then(|p| self.places.get(*p as usize))
            .map_or("", |p| p)
    }

    /// Gap `k`'s time with a kernel resident; `None` when kernels were not captured.
    pub fn kernel_resident_ns(&self, k: usize) -> Option<i64> {
        self.kernel_resident_ns.get(k).copied()
    }

    pub fn duration_ns(&self, k: usize) -> i64 {
        self.end_ns[k] - self.start_ns[k]
    }
}

/// A tile of raw samples: every device's samples starting in its time span.
#[derive(Debug, Default)]
pub struct Tile {
    pub devices: BTreeMap<u32, RawSeries>,
    bytes: usize,
}

/// Tiles held in memory, least recently used first out.
#[derive(Debug)]
pub struct TileCache {
    /// Start of tile 0 and the span of each tile.
    pub origin_ns: i64,
    pub tile_ns: i64,
    /// Number of tiles covering the samples.
    pub count: i64,
    tiles: HashMap<i64, Tile>,
    lru: VecDeque<i64>,
    pending: HashSet<i64>,
    /// Tiles that could not be read: not asked for again.
    failed: HashSet<i64>,
    budget: usize,
    bytes: usize,
}

impl TileCache {
    fn new(budget: usize) -> TileCache {
        TileCache {
            origin_ns: 0,
            tile_ns: 1,
            count: 0,
            tiles: HashMap::new(),
            lru: VecDeque::new(),
            pending: HashSet::new(),
            failed: HashSet::new(),
            budget,
            bytes: 0,
        }
    }

    /// Tiles whose samples may overlap `[t0, t1)` (a sample may start in the tile before).
    pub fn tiles_for(&self, t0: i64, t1: i64) -> std::ops::RangeInclusive<i64> {
        if self.count == 0 {
            #[allow(clippy::reversed_empty_ranges)]
            return 1..=0;
        }
        let k = |t: i64| ((t - self.origin_ns).div_euclid(self.tile_ns)).clamp(0, self.count - 1);
        (k(t0) - 1).max(0)..=k(t1.max(t0))
    }

    pub fn get(&self, k: i64) -> Option<&Tile> {
        self.tiles.get(&k)
    }

    /// The raw series of `device` for `[t0, t1)`, one per tile; `None` if a tile is missing.
    pub fn series(&self, device: u32, t0: i64, t1: i64) -> Option<Vec<&RawSeries>> {
        let mut out = Vec::new();
        for k in self.tiles_for(t0, t1) {
            let tile = self.tiles.get(&k)?;
            if let Some(s) = tile.devices.get(&device) {
                out.push(s);
            }
        }
        Some(out)
    }

    /// Samples of metric `m` of `device` overlapping `[t0, t1)`, if their tiles are held.
    pub fn slice(&self, device: u32, m: usize, t0: i64, t1: i64) -> Option<RawSlice> {
        let mut out = RawSlice::default();
        for s in self.series(device, t0, t1)? {
            let part = RawSlice::from_series(s, m, t0, t1);
            out.start_ns.extend(part.start_ns);
            out.end_ns.extend(part.end_ns);
            out.values.extend(part.values);
        }
        Some(out)
    }

    /// Missing tiles of `[t0, t1)` not yet asked for.
    fn missing(&self, t0: i64, t1: i64) -> Vec<i64> {
        self.tiles_for(t0, t1)
            .filter(|k| {
                !self.tiles.contains_key(k) && !self.pending.contains(k) && !self.failed.contains(k)
            })
            .collect()
    }

    fn touch(&mut self, k: i64) {
        if let Some(i) = self.lru.iter().position(|x| *x == k) {
            self.lru.remove(i);
        }
        self.lru.push_back(k);
    }

    /// Keeps `tile` if `force` (the view asked for it) or it fits the share of the budget
    /// that the pyramid's build may keep; evicts least recently used tiles.
    fn insert(&mut self, k: i64, tile: Tile, force: bool) -> bool {
        self.pending.remove(&k);
        if !force && self.bytes + tile.bytes > self.budget / BUILD_KEEPS {
            return false;
        }
        self.bytes += tile.bytes;
        self.tiles.insert(k, tile);
        self.touch(k);
        while self.bytes > self.budget && self.lru.len() > 1 {
            if let Some(old) = self.lru.pop_front()
                && let Some(t) = self.tiles.remove(&old)
            {
                self.bytes -= t.bytes;
            }
        }
        true
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

pub use crate::tables::{DeviceKernels, NvtxLanes, Tables};

/// What the worker shares with the UI.
#[derive(Debug)]
pub struct Shared {
    pub tables: Option<Tables>,
    /// Per device, one series per metric and, when the trace has counters, a last series that is
    /// 1 while the GPU is idle and 0 otherwise (its mean over a range is the idle fraction).
    pub pyramids: BTreeMap<u32, DevicePyramid>,
    pub activity: Option<Activity>,
    /// First sample start and last sample end (the manifest's times until samples are read).
    pub extent: TimeSpan,
    /// Samples are in the pyramids up to here.
    pub loaded_until_ns: i64,
    pub samples_done: bool,
    pub tiles: TileCache,
    pub report: Option<Result<Report, String>>,
    /// While the report is computed: windows of the samples table scanned, of how many.
    pub report_progress: Option<(usize, usize)>,
    /// Per device, the report's gaps by start time: a device's gaps never overlap, so the
    /// visible ones, and runs of them narrower than a pixel, are found by binary search.
    pub gaps_by_device: BTreeMap<u32, DeviceGaps>,
    /// Errors met while loading (a damaged table, a failed query), for the window and stderr.
    pub problems: Vec<String>,
    /// The trace's own warnings (unfinished recording, skipped truncated segment, ...).
    pub warnings: Vec<String>,
    /// The worker has nothing left to do.
    pub idle: bool,
}

/// An open recording.
pub struct LoadedTrace {
    pub path: PathBuf,
    /// Short name for titles: the folder name.
    pub name: String,
    pub manifest: Manifest,
    pub metrics: Vec<MetricInfo>,
    pub devices: Vec<u32>,
    pub interval_ns: i64,
    pub trace: Arc<Trace>,
    shared: Arc<Mutex<Shared>>,
    requests: mpsc::Sender<Request>,
}

impl std::fmt::Debug for LoadedTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTrace")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

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
        let devices: Vec<u32> = manifest.devices.iter().map(|d| d.id.0).collect();
        let interval_ns = manifest
            .sampling
            .as_ref()
            .map(|s| s.interval_ns)
            .unwrap_or(0)
            .max(1);
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
            report: None,
            report_progress: None,
            gaps_by_device: BTreeMap::new(),
            problems: Vec::new(),
            warnings: trace.warnings(),
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

    /// The shared state, locked for this frame.
    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// Asks for the raw-sample tiles of `[t0, t1)` that are neither held nor asked for.
    pub fn request_tiles(&self, shared: &mut Shared, t0: i64, t1: i64) {
        if !shared.samples_done {
            return;
        }
        for k in shared.tiles.missing(t0, t1) {
            shared.tiles.pending.insert(k);
            shared.idle = false;
            // A closed channel means the worker is gone; the view keeps its summaries.
            let _ = self.requests.send(Request::Tile(k));
        }
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves consistent-enough data for viewing.
    m.lock().unwrap_or_else(|e| e.into_inner())
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

    fn idle(&self, v: &[f32]) -> f32 {
        let num = v[self.metric];
        let act = match self.denominator {
            Some(d) if v[d] > 0.0 => num / v[d],
            Some(_) => 0.0,
            None => num,
        };
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
                        p.reserve_for(summary.devices.get(dev).map_or(0, |d| d.samples));
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

    /// Reads tile `k`: samples starting in `[first + k·span, first + (k+1)·span)`, the first
    /// and last tile open-ended.
    fn read_tile(&self, first: i64, span: i64, k: i64, count: i64) -> Result<Tile, String> {
        let lo = if k == 0 { i64::MIN } else { first + k * span };
        let hi = if k + 1 >= count {
            i64::MAX
        } else {
            first + (k + 1) * span
        };
        let names: Vec<&str> = self.metrics.iter().map(String::as_str).collect();
        let mut tile = Tile::default();
        self.trace
            .samples_between(lo, hi, &names, |rows| {
                add_to_tile(&mut tile, rows);
                Ok::<(), cufall_trace::TraceError>(())
            })
            .map_err(|e| e.to_string())?;
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
        tile.bytes = tile.devices.values().map(RawSeries::bytes).sum();
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
            self.set(|s| {
                s.report = Some(Err(
                    "this recording has no GPU counters (NVML only): no per-phase statistics"
                        .into(),
                ))
            });
            return;
        }
        // The panel lists the longest gaps; the timeline draws every one, kept here compactly.
        let opts = ReportOptions {
            // The selection panel counts kernels itself, for any span.
            kernel_rows: Some(0),
            gap_rows: Some(crate::panel::GAPS_LISTED),
            window_samples: REPORT_WINDOW_SAMPLES,
            phases: self.phases.clone(),
            ..ReportOptions::default()
        };
        let mut building: BTreeMap<u32, DeviceGaps> = BTreeMap::new();
        let r = build_report_with(
            &self.trace,
            &opts,
            &mut |g| building.entry(g.device.0).or_default().push(g),
            &mut |done, total| self.set(|s| s.report_progress = Some((done, total))),
        )
        .map_err(|e| e.to_string());
        let by_device: BTreeMap<u32, DeviceGaps> = match &r {
            Ok(_) => building.into_iter().map(|(d, g)| (d, g.finish())).collect(),
            Err(_) => BTreeMap::new(),
        };
        crate::memory::give_back();
        self.set(|s| {
            s.report = Some(r);
            s.report_progress = None;
            s.gaps_by_device = by_device;
        });
    }
}

/// Adds the samples of one segment to `tile`, split by device. The trace stores each device's
/// samples in time order (segments in order, batches in order), so no sort is needed in the
/// common case; the caller sorts a device whose samples are not in start order.
fn add_to_tile(tile: &mut Tile, rows: SampleColumns) {
    let metrics = rows.values.len();
    for i in 0..rows.len() {
        let (s, e) = (rows.start_ns[i], rows.end_ns[i]);
        let series = tile
            .devices
            .entry(u32::from(rows.device[i]))
            .or_insert_with(|| RawSeries::new(metrics));
        series.start_ns.push(s);
        series.end_ns.push(e.max(s));
        for (m, column) in rows.values.iter().enumerate() {
            series.values[m].push(column[i]);
        }
    }
}

/// Puts every device of `tile` in start order and counts its bytes.
fn finish_tile(tile: &mut Tile) {
    for series in tile.devices.values_mut() {
        sort_by_start(series);
    }
    tile.bytes = tile.devices.values().map(RawSeries::bytes).sum();
}

/// Puts `series` in start order (stable), if it is not already.
fn sort_by_start(series: &mut RawSeries) {
    if series.start_ns.is_sorted() {
        return;
    }
    let mut idx: Vec<usize> = (0..series.len()).collect();
    idx.sort_by_key(|i| series.start_ns[*i]);
    let take_i64 = |v: &[i64]| idx.iter().map(|i| v[*i]).collect::<Vec<_>>();
    series.start_ns = take_i64(&series.start_ns);
    series.end_ns = take_i64(&series.end_ns);
    for col in series.values.iter_mut() {
        *col = idx.iter().map(|i| col[*i]).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_splits_interleaved_devices_and_sorts_a_device_out_of_order() {
        let rows = SampleColumns {
            device: vec![0, 1, 0, 1, 0],
            start_ns: vec![10, 10, 20, 30, 15],
            end_ns: vec![20, 20, 30, 40, 20],
            values: vec![vec![1.0, 2.0, 3.0, 4.0, 5.0]],
        };
        let mut tile = Tile::default();
        add_to_tile(&mut tile, rows);
        finish_tile(&mut tile);
        let d0 = &tile.devices[&0];
        assert_eq!(d0.start_ns, vec![10, 15, 20]);
        assert_eq!(d0.end_ns, vec![20, 20, 30]);
        assert_eq!(d0.values[0], vec![1.0, 5.0, 3.0]);
        let d1 = &tile.devices[&1];
        assert_eq!(d1.start_ns, vec![10, 30]);
        assert_eq!(d1.values[0], vec![2.0, 4.0]);
        assert_eq!(tile.bytes, d0.bytes() + d1.bytes());
    }

    #[test]
    fn a_run_of_close_gaps_ends_where_a_gap_starts_too_far_after_the_previous() {
        // Gaps 10 ns long, mostly 5 ns apart, with a few wider separations.
        let mut g = DeviceGaps::default();
        let mut at = 0;
        for k in 0..1000i64 {
            at += if k % 97 == 0 || k == 500 { 50 } else { 5 };
            g.start_ns.push(at);
            at += 10;
            g.end_ns.push(at);
        }
        g = g.finish();
        let brute = |from: usize, hi: usize, max: i64| {
            (from..hi)
                .find(|&k| k == 0 || g.start_ns[k] - g.end_ns[k - 1] > max)
                .unwrap_or(hi)
        };
        for from in [0, 1, 63, 64, 65, 100, 127, 128, 490, 501, 999] {
            for hi in [from, from + 1, 200, 640, 1000] {
                for max in [4, 5, 49, 50, 1000] {
                    let hi = hi.clamp(from, 1000);
                    assert_eq!(
                        g.close_run_until(from, hi, max),
                        brute(from, hi, max),
                        "from {from} hi {hi} max {max}"
                    );
                }
            }
        }
    }

    #[test]
    fn tiles_cover_the_previous_one_and_stay_in_range() {
        let mut c = TileCache::new(1 << 20);
        c.origin_ns = 1000;
        c.tile_ns = 100;
        c.count = 5;
        assert_eq!(c.tiles_for(1250, 1420), 1..=4);
        assert_eq!(c.tiles_for(0, 50), 0..=0);
        assert_eq!(c.tiles_for(5000, 6000), 3..=4);
        assert!(c.series(0, 1250, 1420).is_none(), "nothing held yet");
    }
}
