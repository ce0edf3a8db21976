//! What `cufall serve` computes from the sample stream, per GPU: running totals (Prometheus
//! counters) and the values of each scraper's window (gauges).
//!
//! Every batch that reaches the exporter is folded once into the *current bucket*. A bucket is
//! closed by a scrape (of any scraper) when it is at least [`MIN_BUCKET`] old, and at least once
//! a second; closed buckets are kept for [`MAX_WINDOW`]. A scraper's window is the union of the
//! buckets closed since its previous scrape, so each sample counts in exactly one window of each
//! scraper, whatever the scrape intervals of the others; a scrape right after another one's
//! close reads up to that close (at most [`MIN_BUCKET`] behind). So a client scraping as fast
//! as it can neither multiplies the buckets nor shortens anyone's history: [`MAX_BUCKETS`]
//! holds [`MAX_WINDOW`] of them. A scraper seen for the first time gets the buckets of the last
//! [`FIRST_WINDOW`]; one that comes back after more than [`MAX_WINDOW`] gets what is kept.
//!
//! Idle is the report's idle ([`cufall_analysis::samples::Activity`], with the report's default
//! threshold): the activity value below 5 % of its full scale and every other recorded
//! percentage metric below 5 %, tested at the `f32` precision a trace stores, so a flight
//! recorder dump's `cufall report` and the exporter agree on which samples were idle. An idle
//! gap is a run of idle samples without a hole in time (a hole is never idle, as in the
//! report); a gap counts in the window where it ends, with its whole length, once it is at
//! least [`MIN_GAP_NS`] long.

use cufall_analysis::samples::{Activity, ActivityEval, FullScaleSource};
use cufall_trace::model::SampleBatch;
use cufall_trace::model::{DeviceId, DropReason, DropRecord, HeatmapSpec, MetricInfo, NvmlRow};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Shortest idle run counted as a gap.
pub const MIN_GAP_NS: i64 = 1_000_000;
/// How far back a scraper's window may reach (and how long closed buckets are kept).
pub const MAX_WINDOW: Duration = Duration::from_secs(600);
/// The window of a scraper's first scrape (Prometheus' usual scrape interval).
pub const FIRST_WINDOW: Duration = Duration::from_secs(15);
/// A bucket is closed at least this often, so that old ones can be let go on time.
pub const BUCKET_PERIOD: Duration = Duration::from_secs(1);
/// A scrape closes the current bucket only when it is at least this old.
pub const MIN_BUCKET: Duration = Duration::from_millis(100);
/// Closed buckets kept at most: [`MAX_WINDOW`] of the shortest ones, so scrapes, however
/// frequent, do not let buckets go before [`MAX_WINDOW`].
pub const MAX_BUCKETS: usize = 6_000;
/// Scrapers remembered at most; the one scraped least recently is forgotten first.
pub const MAX_SCRAPERS: usize = 64;

/// The report's rule for the value whose low stretches are idle, for a live metric set: the
/// first heatmap's metric (divided by its denominator), else the first metric; its full scale
/// is the heatmap's, else 1 for a ratio, else 100 for a percentage; every other percentage
/// metric must be low too. `None` when the full scale is unknown (a raw metric without
/// `--full-scale`): the report would take the trace's peak, which a live stream does not have.
pub fn live_activity(metrics: &[MetricInfo], heatmaps: &[HeatmapSpec]) -> Option<Activity> {
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    let heatmap = heatmaps.iter().find(|h| names.contains(&h.metric.as_str()));
    let metric = heatmap.map_or_else(
        || names.first().map(|n| n.to_string()),
        |h| Some(h.metric.clone()),
    )?;
    let denominator = heatmap
        .and_then(|h| h.denominator.clone())
        .filter(|d| names.contains(&d.as_str()));
    let unit = metrics
        .iter()
        .find(|m| m.name == metric)
        .map(|m| m.unit.as_str())
        .unwrap_or_default();
    let given = heatmap
        .and_then(|h| h.full_scale)
        .filter(|f| f.is_finite() && *f > 0.0);
    let (full_scale, full_scale_source) = if let Some(f) = given {
        (f, FullScaleSource::Heatmap)
    } else if denominator.is_some() {
        (1.0, FullScaleSource::Ratio)
    } else if unit == "%" || metric.contains("pct") {
        (100.0, FullScaleSource::Percent)
    } else {
        return None;
    };
    let chosen = [Some(&metric), denominator.as_ref()];
    let also_low = metrics
        .iter()
        .filter(|m| m.unit == "%" || m.name.contains("pct_of_peak"))
        .map(|m| m.name.clone())
        .filter(|n| !chosen.contains(&Some(n)))
        .collect();
    Some(Activity {
        metric,
        denominator,
        full_scale,
        full_scale_source,
        idle_below: cufall_analysis::report::DEFAULT_IDLE_BELOW,
        also_low,
    })
}

/// Totals of one device over a span (a bucket, a window, or the whole run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub samples: u64,
    /// Time of the samples whose idle test could be made.
    pub sampled_ns: i64,
    pub idle_ns: i64,
    /// Idle gaps of at least [`MIN_GAP_NS`] that ended in the span, and their length.
    pub gaps: u64,
    pub gap_ns: i64,
    /// Samples lost (drop records other than warm-up).
    pub lost_samples: u64,
    /// Per metric: sum, count of known values, max.
    pub sums: Vec<f64>,
    pub counts: Vec<u64>,
    pub maxes: Vec<f64>,
    /// NVML utilisation (%) and power (W): sum and count of readings.
    pub util: (f64, u64),
    pub power: (f64, u64),
}

impl Totals {
    fn new(metrics: usize) -> Self {
        Totals {
            sums: vec![0.0; metrics],
            counts: vec![0; metrics],
            maxes: vec![f64::NEG_INFINITY; metrics],
            ..Totals::default()
        }
    }

    pub fn add(&mut self, o: &Totals) {
        self.samples += o.samples;
        self.sampled_ns += o.sampled_ns;
        self.idle_ns += o.idle_ns;
        self.gaps += o.gaps;
        self.gap_ns += o.gap_ns;
        self.lost_samples += o.lost_samples;
        if self.sums.len() < o.sums.len() {
            self.sums.resize(o.sums.len(), 0.0);
            self.counts.resize(o.sums.len(), 0);
            self.maxes.resize(o.sums.len(), f64::NEG_INFINITY);
        }
        for i in 0..o.sums.len() {
            self.sums[i] += o.sums[i];
            self.counts[i] += o.counts[i];
            self.maxes[i] = self.maxes[i].max(o.maxes[i]);
        }
        self.util.0 += o.util.0;
        self.util.1 += o.util.1;
        self.power.0 += o.power.0;
        self.power.1 += o.power.1;
    }

    /// Mean of metric `i` over its known values; `None` without any.
    pub fn mean(&self, i: usize) -> Option<f64> {
        let n = *self.counts.get(i)?;
        (n > 0).then(|| self.sums[i] / n as f64)
    }

    /// Largest value of metric `i`; `None` without any.
    pub fn max(&self, i: usize) -> Option<f64> {
        let n = *self.counts.get(i)?;
        (n > 0).then(|| self.maxes[i])
    }

    /// Idle time over the time whose idle test could be made; `None` without such time.
    pub fn idle_ratio(&self) -> Option<f64> {
        (self.sampled_ns > 0).then(|| self.idle_ns as f64 / self.sampled_ns as f64)
    }

    pub fn util_ratio(&self) -> Option<f64> {
        (self.util.1 > 0).then(|| self.util.0 / self.util.1 as f64 / 100.0)
    }

    pub fn power_w(&self) -> Option<f64> {
        (self.power.1 > 0).then(|| self.power.0 / self.power.1 as f64)
    }
}

/// The idle run a device is in, carried across batches and buckets.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    /// Start and end of the current run of idle samples.
    idle: Option<(i64, i64)>,
    /// End of the last sample seen.
    last_end: Option<i64>,
}

/// One closed or open bucket.
#[derive(Debug)]
struct Bucket {
    seq: u64,
    opened: Instant,
    devices: BTreeMap<DeviceId, Totals>,
}

#[derive(Clone, Copy, Debug)]
struct Scraper {
    /// The first bucket this scraper has not been served.
    next_seq: u64,
    last_scrape: Instant,
}

/// What one scrape gets: per device, its window's totals and the running totals.
#[derive(Debug, Default)]
pub struct Scrape {
    /// How long the window is (from its first bucket's opening to now).
    pub window: Duration,
    pub windows: BTreeMap<DeviceId, Totals>,
    pub totals: BTreeMap<DeviceId, Totals>,
}

/// Per-device running totals and the buckets scrapers' windows are made of.
pub struct Aggregator {
    metrics: usize,
    eval: Option<ActivityEval>,
    /// Idle tests need this much time between samples to call it a hole (half an interval,
    /// as the report).
    hole_ns: i64,
    runs: HashMap<DeviceId, Run>,
    totals: BTreeMap<DeviceId, Totals>,
    current: Bucket,
    closed: VecDeque<Bucket>,
    scrapers: HashMap<String, Scraper>,
    /// Scratch: one batch's values at the precision a trace stores.
    f32_values: Vec<Vec<f32>>,
}

impl Aggregator {
    /// `activity`: how idle is told (`None`: idle time and gaps are not measured).
    pub fn new(metrics: &[MetricInfo], activity: Option<&Activity>, interval_ns: i64) -> Self {
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        Aggregator {
            metrics: metrics.len(),
            eval: activity.and_then(|a| a.eval(&names)),
            hole_ns: (interval_ns / 2).max(1),
            runs: HashMap::new(),
            totals: BTreeMap::new(),
            current: Bucket {
                seq: 0,
                opened: Instant::now(),
                devices: BTreeMap::new(),
            },
            closed: VecDeque::new(),
            scrapers: HashMap::new(),
            f32_values: Vec::new(),
        }
    }

    /// Whether idle time and gaps are measured.
    pub fn measures_idle(&self) -> bool {
        self.eval.is_some()
    }

    /// Makes `device` known (its counters are exported from now on, at 0).
    pub fn add_device(&mut self, device: DeviceId) {
        let m = self.metrics;
        self.totals.entry(device).or_insert_with(|| Totals::new(m));
    }

    fn bucket(&mut self, device: DeviceId) -> &mut Totals {
        let m = self.metrics;
        self.totals.entry(device).or_insert_with(|| Totals::new(m));
        self.current
            .devices
            .entry(device)
            .or_insert_with(|| Totals::new(m))
    }

    /// Folds one batch of samples in (samples of a device arrive in time order).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "idle is tested at the f32 precision a trace stores, as the report does"
    )]
    pub fn samples(&mut self, batch: &SampleBatch) {
        let mut values = std::mem::take(&mut self.f32_values);
        values.resize_with(batch.values.len(), Vec::new);
        for (dst, src) in values.iter_mut().zip(&batch.values) {
            dst.clear();
            dst.extend(src.iter().map(|v| *v as f32));
        }
        let mut delta = Totals::new(self.metrics);
        let mut run = self.runs.get(&batch.device).copied().unwrap_or_default();
        // The idle test's columns are those of the run the aggregator was made for.
        let eval = self
            .eval
            .as_ref()
            .filter(|_| batch.values.len() == self.metrics);
        for i in 0..batch.len() {
            let (start, end) = (batch.start_ns[i], batch.end_ns[i]);
            delta.samples += 1;
            for (m, col) in batch.values.iter().enumerate().take(self.metrics) {
                let v = col[i];
                if !v.is_nan() {
                    delta.sums[m] += v;
                    delta.counts[m] += 1;
                    delta.maxes[m] = delta.maxes[m].max(v);
                }
            }
            let Some(eval) = eval else { continue };
            // A hole in time (a drop, a restart) or a batch out of order ends an idle run.
            if run
                .last_end
                .is_some_and(|e| start - e > self.hole_ns || start < e)
            {
                end_run(&mut run, &mut delta);
            }
            run.last_end = Some(end);
            let act = eval.value(&values, i);
            if !eval.known(&values, i, act) {
                end_run(&mut run, &mut delta);
                continue;
            }
            delta.sampled_ns += end - start;
            if eval.idle(&values, i, act) {
                delta.idle_ns += end - start;
                run.idle = Some(run.idle.map_or((start, end), |(s, _)| (s, end)));
            } else {
                end_run(&mut run, &mut delta);
            }
        }
        self.f32_values = values;
        self.runs.insert(batch.device, run);
        self.fold(batch.device, &delta);
    }

    fn fold(&mut self, device: DeviceId, delta: &Totals) {
        self.bucket(device).add(delta);
        if let Some(t) = self.totals.get_mut(&device) {
            t.add(delta);
        }
    }

    /// Drop records: lost samples count (warm-up is not a loss). The hole a drop leaves ends
    /// an idle run through the samples' times, not here: a drop can reach the exporter before
    /// the samples evaluated ahead of it.
    pub fn drops(&mut self, rows: &[DropRecord]) {
        for r in rows {
            let mut delta = Totals::new(self.metrics);
            if r.reason != DropReason::Warmup {
                delta.lost_samples = r.lost_samples.unwrap_or(0);
            }
            self.fold(r.device, &delta);
        }
    }

    /// NVML readings: utilisation and power.
    pub fn nvml(&mut self, rows: &[NvmlRow]) {
        for r in rows {
            let b = self.bucket(r.device);
            if let Some(u) = r.gpu_util_pct {
                b.util.0 += f64::from(u);
                b.util.1 += 1;
            }
            if let Some(p) = r.power_w {
                b.power.0 += f64::from(p);
                b.power.1 += 1;
            }
        }
    }

    /// Sampling of every device stopped (a restart follows): an idle run ends at the last
    /// sample, it does not go on across the pause.
    pub fn pause(&mut self) {
        let runs: Vec<DeviceId> = self.runs.keys().copied().collect();
        for d in runs {
            let mut delta = Totals::new(self.metrics);
            if let Some(run) = self.runs.get_mut(&d) {
                end_run(run, &mut delta);
                run.last_end = None;
            }
            self.fold(d, &delta);
        }
    }

    /// Closes the current bucket when it is [`BUCKET_PERIOD`] old, and lets old buckets go.
    pub fn tick(&mut self, now: Instant) {
        if now.duration_since(self.current.opened) >= BUCKET_PERIOD {
            self.close(now);
        }
    }

    fn close(&mut self, now: Instant) {
        let next = Bucket {
            seq: self.current.seq + 1,
            opened: now,
            devices: BTreeMap::new(),
        };
        self.closed
            .push_back(std::mem::replace(&mut self.current, next));
        while self.closed.len() > MAX_BUCKETS
            || self
                .closed
                .front()
                .is_some_and(|b| now.duration_since(b.opened) > MAX_WINDOW)
        {
            self.closed.pop_front();
        }
    }

    /// The window of scraper `who` (up to the last bucket closed, at `now` when the current one
    /// is [`MIN_BUCKET`] old) and the running totals.
    pub fn scrape(&mut self, who: &str, now: Instant) -> Scrape {
        if now.duration_since(self.current.opened) >= MIN_BUCKET {
            self.close(now);
        }
        let first_unseen = match self.scrapers.get(who) {
            Some(s) => s.next_seq,
            None => {
                // A new scraper: the buckets of the last FIRST_WINDOW.
                self.closed
                    .iter()
                    .find(|b| now.duration_since(b.opened) <= FIRST_WINDOW)
                    .map_or(self.current.seq, |b| b.seq)
            }
        };
        let mut out = Scrape {
            totals: self.totals.clone(),
            ..Scrape::default()
        };
        let mut opened = None;
        for b in self.closed.iter().filter(|b| b.seq >= first_unseen) {
            opened.get_or_insert(b.opened);
            for (d, t) in &b.devices {
                out.windows
                    .entry(*d)
                    .or_insert_with(|| Totals::new(self.metrics))
                    .add(t);
            }
        }
        // The window ends where the open bucket began (`now` when this scrape closed one).
        out.window = opened.map_or(Duration::ZERO, |o| self.current.opened.duration_since(o));
        self.scrapers.insert(
            who.to_string(),
            Scraper {
                next_seq: self.current.seq,
                last_scrape: now,
            },
        );
        if self.scrapers.len() > MAX_SCRAPERS
            && let Some(oldest) = self
                .scrapers
                .iter()
                .min_by_key(|(_, s)| s.last_scrape)
                .map(|(k, _)| k.clone())
        {
            self.scrapers.remove(&oldest);
        }
        out
    }

    /// Scrapers remembered now.
    pub fn scrapers(&self) -> usize {
        self.scrapers.len()
    }
}

/// Ends an idle run: it is a gap when long enough.
fn end_run(run: &mut Run, delta: &mut Totals) {
    if let Some((s, e)) = run.idle.take()
        && e - s >= MIN_GAP_NS
    {
        delta.gaps += 1;
        delta.gap_ns += e - s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IV: i64 = 100_000;

    fn metrics() -> Vec<MetricInfo> {
        vec![MetricInfo {
            name: "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed".into(),
            unit: "%".into(),
            description: String::new(),
        }]
    }

    fn agg() -> Aggregator {
        let m = metrics();
        let a = live_activity(&m, &[]).unwrap();
        Aggregator::new(&m, Some(&a), IV)
    }

    /// Samples `from..to` (sample numbers) of device 0, each `IV` long, with value `v`.
    fn batch(from: i64, to: i64, v: f64) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(0), 1);
        for k in from..to {
            b.push(k * IV, (k + 1) * IV, &[v]);
        }
        b
    }

    fn window(s: &Scrape) -> &Totals {
        &s.windows[&DeviceId(0)]
    }

    #[test]
    fn mean_max_and_idle_fraction_of_a_window() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.samples(&batch(0, 80, 50.0));
        a.samples(&batch(80, 100, 1.0));
        let s = a.scrape("p", t);
        let w = window(&s);
        assert_eq!(w.samples, 100);
        assert!((w.mean(0).unwrap() - (80.0 * 50.0 + 20.0) / 100.0).abs() < 1e-9);
        assert_eq!(w.max(0), Some(50.0));
        assert!((w.idle_ratio().unwrap() - 0.2).abs() < 1e-12);
        // 20 idle samples of 100 µs: a run of 2 ms, still open (no busy sample after it).
        assert_eq!(w.gaps, 0);
    }

    #[test]
    fn a_gap_crossing_a_scrape_counts_once_whole_where_it_ends() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.samples(&batch(0, 10, 80.0));
        a.samples(&batch(10, 25, 0.0)); // idle from 1.0 ms
        let first = a.scrape("p", t);
        assert_eq!(window(&first).gaps, 0, "the gap has not ended yet");
        a.samples(&batch(25, 40, 0.0)); // idle until 4.0 ms
        a.samples(&batch(40, 50, 80.0));
        let second = a.scrape("p", t + Duration::from_secs(1));
        let w = window(&second);
        assert_eq!((w.gaps, w.gap_ns), (1, 3_000_000));
        assert_eq!(w.samples, 25);
        assert_eq!(second.totals[&DeviceId(0)].gaps, 1);
        // The idle time is split between the windows where it was sampled.
        assert_eq!(window(&first).idle_ns + w.idle_ns, 3_000_000);
    }

    #[test]
    fn short_runs_and_holes_are_not_gaps() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.samples(&batch(0, 5, 0.0)); // 0.5 ms idle: too short
        a.samples(&batch(5, 6, 90.0));
        a.samples(&batch(6, 12, 0.0)); // 0.6 ms idle, then a hole
        a.samples(&batch(20, 26, 0.0)); // 0.6 ms idle after the hole
        a.samples(&batch(26, 27, 90.0));
        let w = a.scrape("p", t);
        assert_eq!(window(&w).gaps, 0, "a hole is never idle: two short runs");
        let mut b = agg();
        b.samples(&batch(0, 12, 0.0));
        b.drops(&[DropRecord {
            device: DeviceId(0),
            start_ns: 12 * IV,
            end_ns: 13 * IV,
            reason: DropReason::HardwareBufferOverflow,
            lost_samples: Some(1),
        }]);
        b.samples(&batch(13, 14, 90.0));
        let w = b.scrape("p", t + MIN_BUCKET);
        assert_eq!((window(&w).gaps, window(&w).gap_ns), (1, 1_200_000));
        assert_eq!(window(&w).lost_samples, 1);
        // A drop that arrives early does not cut the run the samples continue.
        let mut c = agg();
        c.drops(&[DropRecord {
            device: DeviceId(0),
            start_ns: 40 * IV,
            end_ns: 41 * IV,
            reason: DropReason::HardwareBufferOverflow,
            lost_samples: Some(1),
        }]);
        c.samples(&batch(0, 30, 0.0));
        c.samples(&batch(30, 31, 90.0));
        let w = c.scrape("p", t + MIN_BUCKET);
        assert_eq!((window(&w).gaps, window(&w).gap_ns), (1, 3_000_000));
    }

    #[test]
    fn a_window_without_samples_has_no_values() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.samples(&batch(0, 10, 30.0));
        a.scrape("p", t);
        let s = a.scrape("p", t + Duration::from_secs(1));
        assert!(!s.windows.contains_key(&DeviceId(0)));
        // The running totals stay.
        assert_eq!(s.totals[&DeviceId(0)].samples, 10);
        let empty = Totals::new(1);
        assert_eq!(empty.mean(0), None);
        assert_eq!(empty.max(0), None);
        assert_eq!(empty.idle_ratio(), None);
        assert_eq!(empty.util_ratio(), None);
        assert_eq!(empty.power_w(), None);
    }

    #[test]
    fn each_scraper_sees_every_sample_once() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        let (mut p, mut q) = (0, 0);
        for k in 0..10 {
            a.samples(&batch(k * 10, k * 10 + 10, 40.0));
            let at = t + Duration::from_millis(100 * k as u64);
            p += a
                .scrape("p", at)
                .windows
                .get(&DeviceId(0))
                .map_or(0, |w| w.samples);
            if k % 3 == 2 {
                q += a
                    .scrape("q", at)
                    .windows
                    .get(&DeviceId(0))
                    .map_or(0, |w| w.samples);
            }
        }
        assert_eq!(p, 100);
        assert_eq!(q, 90, "q scraped last after sample 90");
    }

    #[test]
    fn scrapers_and_buckets_stay_bounded() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        for k in 0..(MAX_SCRAPERS + 10) {
            a.scrape(&format!("s{k}"), t + Duration::from_millis(k as u64));
        }
        assert_eq!(a.scrapers(), MAX_SCRAPERS);
        for k in 0..(MAX_BUCKETS as u64 + 50) {
            a.tick(t + BUCKET_PERIOD * (k as u32 + 1));
        }
        assert!(a.closed.len() <= MAX_BUCKETS);
        assert!(a.closed.len() <= MAX_WINDOW.as_secs() as usize + 1);
        assert!(MAX_BUCKETS as u128 >= MAX_WINDOW.as_millis() / MIN_BUCKET.as_millis());
    }

    #[test]
    fn a_fast_scraper_does_not_shorten_a_slow_ones_window() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.scrape("slow", t);
        let mut fed = 0;
        // A minute of a scrape every millisecond beside one batch every 50 ms: a bucket closed
        // at every scrape would have reached MAX_BUCKETS and let the slow scraper's go.
        for ms in 1..=60_000u64 {
            if ms % 50 == 0 {
                a.samples(&batch(fed, fed + 1, 40.0));
                fed += 1;
            }
            a.scrape("fast", t + Duration::from_millis(ms));
        }
        assert!(a.closed.len() <= 601, "{} buckets", a.closed.len());
        let end = t + Duration::from_millis(60_000 + 100);
        let slow = a.scrape("slow", end);
        // Every batch since the slow scraper's first scrape, none let go early.
        assert_eq!(
            slow.windows.get(&DeviceId(0)).map_or(0, |w| w.samples),
            1_200
        );
        assert!(slow.window >= Duration::from_secs(59), "{:?}", slow.window);
    }

    #[test]
    fn a_scrape_right_after_a_close_reads_up_to_it_and_counts_once() {
        let mut a = agg();
        let t = Instant::now() + MIN_BUCKET;
        a.samples(&batch(0, 10, 40.0));
        assert_eq!(window(&a.scrape("p", t)).samples, 10);
        a.samples(&batch(10, 20, 40.0));
        // Within MIN_BUCKET of the close: nothing new yet, and nothing lost.
        let early = a.scrape("p", t + Duration::from_millis(10));
        assert!(!early.windows.contains_key(&DeviceId(0)));
        let later = a.scrape("p", t + Duration::from_millis(150));
        assert_eq!(window(&later).samples, 10);
    }

    #[test]
    fn the_activity_follows_the_reports_rule() {
        let pair = vec![
            MetricInfo {
                name: "sm__pipe_tensor_cycles_active.avg".into(),
                unit: "cycle".into(),
                description: String::new(),
            },
            MetricInfo {
                name: "gr__cycles_elapsed.max".into(),
                unit: "cycle".into(),
                description: String::new(),
            },
            MetricInfo {
                name: "dram__throughput.avg.pct_of_peak_sustained_elapsed".into(),
                unit: "%".into(),
                description: String::new(),
            },
        ];
        let heat = vec![HeatmapSpec {
            metric: "sm__pipe_tensor_cycles_active.avg".into(),
            denominator: Some("gr__cycles_elapsed.max".into()),
            full_scale: None,
        }];
        let a = live_activity(&pair, &heat).unwrap();
        assert_eq!(a.full_scale, 1.0);
        assert_eq!(
            a.also_low,
            vec!["dram__throughput.avg.pct_of_peak_sustained_elapsed".to_string()]
        );
        assert!(
            live_activity(&pair[..1], &[]).is_none(),
            "a raw count has no full scale"
        );
    }
}
