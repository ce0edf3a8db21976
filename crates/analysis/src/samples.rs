//! The pass over the samples table, the one table that can hold hundreds of millions of values
//! (everything else is small). The table is read in time windows of a few million samples
//! ([`time_windows`]), each streamed a segment at a time in file order; one loop over the rows
//! computes two things:
//!
//! 1. segment totals: every sample is placed in a phase segment by a binary search of its
//!    midpoint among the NVTX range boundaries, and added to the totals of its
//!    `(device, segment)`: count, sampled and idle time, sum and peak of every metric and of the
//!    activity value. Phases are unions of segments, so per-phase statistics are sums over this
//!    small result.
//! 2. idle fragments: runs of consecutive idle samples in file order. A run is cut by a change
//!    of device, a change between idle and busy, and any hole in time (a drop): a hole is never
//!    idle. Runs shorter than the minimum gap are kept only where they touch a discontinuity of
//!    the file order (a device switch, a hole, a window edge), since there they may continue
//!    elsewhere; [`crate::gaps`] merges those.

use crate::error::{AnalysisError, Result};
use crate::phases::Phases;
use cufall_trace::model::{DeviceId, Nanos};
use cufall_trace::{SampleColumns, Trace};
use std::collections::{BTreeMap, HashMap};

/// The value whose low stretches count as idle: a metric, optionally divided by another, with
/// the threshold as a fraction of its full scale.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Activity {
    pub metric: String,
    pub denominator: Option<String>,
    /// The value that means "fully busy".
    pub full_scale: f64,
    /// Where the full scale came from.
    pub full_scale_source: FullScaleSource,
    /// Idle means below `idle_below * full_scale`.
    pub idle_below: f64,
    /// Other recorded percentage metrics that must also be below `idle_below` × 100 for a
    /// sample to be idle: a GPU busy moving memory with its tensor pipes still is not idle.
    pub also_low: Vec<String>,
}

impl Activity {
    pub fn threshold(&self) -> f64 {
        self.idle_below * self.full_scale
    }

    /// How to compute the activity value and the idle flag from samples whose metric columns
    /// are named `columns`; `None` if one of the metrics it needs is not among them.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "thresholds compared with the f32 values the trace stores"
    )]
    pub fn eval(&self, columns: &[&str]) -> Option<ActivityEval> {
        let at = |name: &str| columns.iter().position(|c| *c == name);
        Some(ActivityEval {
            metric: at(&self.metric)?,
            denominator: match &self.denominator {
                Some(d) => Some(at(d)?),
                None => None,
            },
            also_low: self
                .also_low
                .iter()
                .map(|m| at(m))
                .collect::<Option<Vec<_>>>()?,
            threshold: self.threshold() as f32,
            also_low_below: (self.idle_below * 100.0) as f32,
        })
    }

    /// ` and M1, M2 below 5%` for the [`Activity::also_low`] metrics; empty without them.
    pub fn also_low_clause(&self) -> String {
        if self.also_low.is_empty() {
            return String::new();
        }
        format!(
            " and {} below {:.0}%",
            self.also_low.join(", "),
            self.idle_below * 100.0
        )
    }

    /// Display name: `a / b` or `a`.
    pub fn label(&self) -> String {
        match &self.denominator {
            Some(d) => format!("{} / {}", self.metric, d),
            None => self.metric.clone(),
        }
    }
}

/// Where an activity's full scale came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FullScaleSource {
    /// Given by the user.
    Given,
    /// The recording's heatmap for the metric.
    Heatmap,
    /// 1, for a metric divided by another.
    #[default]
    Ratio,
    /// 100, for a percentage.
    Percent,
    /// The largest value of the activity in the trace.
    PeakInTrace,
    /// 1, because the metric is never above 0 in the trace.
    NeverAboveZero,
}

/// [`Activity`] resolved against the metric columns of a scan.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivityEval {
    metric: usize,
    denominator: Option<usize>,
    also_low: Vec<usize>,
    threshold: f32,
    also_low_below: f32,
}

impl ActivityEval {
    /// `metric / denominator` of sample `i` (0 where the denominator is 0 or negative, NaN
    /// where it is missing), or the metric itself. Divided in `f64`: rounded to `f32` it is
    /// exactly the `f32` quotient (the idle test compares that), and sums of it keep their
    /// precision.
    pub fn value(&self, values: &[Vec<f32>], i: usize) -> f64 {
        let num = f64::from(values[self.metric][i]);
        match self.denominator {
            Some(d) => {
                let den = f64::from(values[d][i]);
                if den > 0.0 {
                    num / den
                } else if den.is_nan() {
                    f64::NAN
                } else {
                    0.0
                }
            }
            None => num,
        }
    }

    /// The metric columns this needs, of those it was resolved against.
    pub fn columns(&self) -> Vec<usize> {
        let mut v: Vec<usize> = std::iter::once(self.metric)
            .chain(self.denominator)
            .chain(self.also_low.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether the idle test of sample `i`, of activity value `act`, can be made: the value
    /// and every [`Activity::also_low`] metric known (a null in the trace reads as NaN).
    pub fn known(&self, values: &[Vec<f32>], i: usize, act: f64) -> bool {
        !act.is_nan() && self.also_low.iter().all(|m| !values[*m][i].is_nan())
    }

    /// Whether sample `i`, of activity value `act`, is idle: `act` below the threshold and
    /// every [`Activity::also_low`] metric below its own, compared at the `f32` precision the
    /// trace stores. A NaN (missing) value is never idle.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "compared at the f32 precision of the stored values"
    )]
    pub fn idle(&self, values: &[Vec<f32>], i: usize, act: f64) -> bool {
        (act as f32) < self.threshold
            && self
                .also_low
                .iter()
                .all(|m| values[*m][i] < self.also_low_below)
    }
}

/// Totals of one device over one segment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegAgg {
    pub samples: u64,
    /// Time of the samples whose idle test could be made (every value it needs known).
    pub sampled_ns: i64,
    pub idle_ns: i64,
    /// Samples, and their time, lacking a value the idle test needs (null in the trace):
    /// neither idle nor busy, and not in `sampled_ns`.
    pub unknown: u64,
    pub unknown_ns: i64,
    pub first_start_ns: i64,
    pub last_end_ns: i64,
    /// Sum, peak and number of known (not null) values of each metric, then of the activity
    /// value (last).
    pub sums: Vec<f64>,
    pub peaks: Vec<f64>,
    pub counts: Vec<u64>,
}

impl SegAgg {
    /// The mean of column `i` over its known values; `None` without any.
    pub fn mean(&self, i: usize) -> Option<f64> {
        let n = self.counts.get(i).copied().unwrap_or(0);
        (n > 0).then(|| self.sums.get(i).copied().unwrap_or(0.0) / n as f64)
    }

    /// The peak of column `i` over its known values; `None` without any.
    pub fn peak(&self, i: usize) -> Option<f64> {
        let n = self.counts.get(i).copied().unwrap_or(0);
        (n > 0).then(|| self.peaks.get(i).copied().unwrap_or(f64::NAN))
    }
}

impl SegAgg {
    pub fn add(&mut self, other: &SegAgg) {
        if self.samples == 0 {
            *self = other.clone();
            return;
        }
        if other.samples == 0 {
            return;
        }
        self.samples += other.samples;
        self.sampled_ns += other.sampled_ns;
        self.idle_ns += other.idle_ns;
        self.unknown += other.unknown;
        self.unknown_ns += other.unknown_ns;
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.first_start_ns = self.first_start_ns.min(other.first_start_ns);
        self.last_end_ns = self.last_end_ns.max(other.last_end_ns);
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a += b;
        }
        for (a, b) in self.peaks.iter_mut().zip(&other.peaks) {
            *a = a.max(*b);
        }
    }
}

/// Aggregates keyed by `(device, segment)`.
pub type SegmentTotals = HashMap<(DeviceId, u32), SegAgg>;

/// Most samples one window of the scan covers: the samples table is read in time windows of
/// about this many samples (each a segment at a time), so the scan's progress can be reported
/// and a window's state stays small however long the recording is.
pub const SAMPLES_PER_WINDOW: u64 = 4_000_000;

/// Time windows `[lo, hi)` over `start_ns` that split the samples table into parts of about
/// [`SAMPLES_PER_WINDOW`] samples (the first and last are open-ended).
pub fn time_windows(trace: &Trace, samples_per_window: u64) -> Result<Vec<(i64, i64)>> {
    let summary = trace.summary()?;
    let total: u64 = summary.devices.values().map(|d| d.samples).sum();
    let parts = total.div_ceil(samples_per_window.max(1)).max(1) as i64;
    let (Some(first), Some(last)) = (summary.first_ns, summary.last_ns) else {
        return Ok(vec![(i64::MIN, i64::MAX)]);
    };
    if parts == 1 || last <= first {
        return Ok(vec![(i64::MIN, i64::MAX)]);
    }
    let width = ((last - first) / parts).max(1);
    let mut out = Vec::with_capacity(usize::try_from(parts).unwrap_or(0));
    for k in 0..parts {
        let lo = if k == 0 { i64::MIN } else { first + k * width };
        let hi = if k == parts - 1 {
            i64::MAX
        } else {
            first + (k + 1) * width
        };
        out.push((lo, hi));
    }
    Ok(out)
}

/// What one scan of the samples table needs.
#[derive(Clone, Copy, Debug)]
pub struct ScanSpec<'a> {
    pub phases: &'a Phases,
    pub activity: &'a Activity,
    pub metrics: &'a [String],
    pub min_gap_ns: Nanos,
    /// Consecutive samples further apart than this are not contiguous.
    pub hole_ns: Nanos,
    /// See [`SAMPLES_PER_WINDOW`].
    pub samples_per_window: u64,
}

/// Both passes over the samples table, window by window: the per-segment totals and the idle
/// fragments.
pub fn scan_samples(trace: &Trace, spec: &ScanSpec) -> Result<(SegmentTotals, Vec<Fragment>)> {
    let mut totals = SegmentTotals::new();
    let fragments = scan_samples_into(trace, spec, &mut |_, _| {}, &mut |key, agg| {
        totals.entry(key).or_default().add(agg);
    })?;
    Ok((totals, fragments))
}

/// [`scan_samples`] handing each window's totals of a `(device, segment)` to `each` instead of
/// keeping them (a segment cut by a window boundary comes in parts; totals add up), so that a
/// caller that folds them into fewer cells never holds one per segment. Samples that cannot be
/// true (outside the recording, ending before they start) never reach it: the reader leaves them
/// out (`cufall_trace::Screen`).
pub fn scan_samples_into(
    trace: &Trace,
    spec: &ScanSpec,
    each_window: &mut dyn FnMut(usize, usize),
    each: &mut dyn FnMut((DeviceId, u32), &SegAgg),
) -> Result<Vec<Fragment>> {
    let ScanSpec {
        phases,
        activity,
        metrics,
        min_gap_ns,
        hole_ns,
        samples_per_window,
    } = *spec;
    let mut fragments = Vec::new();
    let windows = time_windows(trace, samples_per_window)?;
    let total = windows.len();
    let names: Vec<&str> = metrics.iter().map(String::as_str).collect();
    let eval = activity
        .eval(&names)
        .ok_or_else(|| AnalysisError::ActivityNotRecorded {
            path: trace.path().to_path_buf(),
            activity: activity.label(),
        })?;
    for (done, (lo, hi)) in windows.into_iter().enumerate() {
        let (min_gap_ns, hole_ns) = (min_gap_ns.get(), hole_ns.get());
        let mut pass = WindowPass::new(phases, &eval, metrics.len(), min_gap_ns, hole_ns);
        trace.samples_between(lo, hi, &names, |rows| {
            pass.add(&rows, &mut fragments);
            Ok::<(), AnalysisError>(())
        })?;
        for (key, agg) in pass.finish(&mut fragments) {
            each(key, &agg);
        }
        each_window(done + 1, total);
    }
    fragments.shrink_to_fit();
    Ok(fragments)
}

/// An idle run being followed.
struct Run {
    device: DeviceId,
    start_ns: i64,
    end_ns: i64,
    /// A discontinuity before its first sample.
    edge: bool,
}

/// The state of one window's pass, carried from segment to segment.
struct WindowPass<'a> {
    phases: &'a Phases,
    eval: &'a ActivityEval,
    metrics: usize,
    min_gap_ns: i64,
    hole_ns: i64,
    /// Ordered, so that totals are handed on in the same order every time (floating-point
    /// sums depend on it).
    totals: BTreeMap<(DeviceId, u32), SegAgg>,
    /// The previous sample: device and end.
    prev: Option<(u16, i64)>,
    run: Option<Run>,
}

impl<'a> WindowPass<'a> {
    fn new(
        phases: &'a Phases,
        eval: &'a ActivityEval,
        metrics: usize,
        min_gap_ns: i64,
        hole_ns: i64,
    ) -> Self {
        WindowPass {
            phases,
            eval,
            metrics,
            min_gap_ns,
            hole_ns,
            totals: BTreeMap::new(),
            prev: None,
            run: None,
        }
    }

    /// The phase segment of a sample: how many NVTX boundaries lie at or before its midpoint.
    fn segment(&self, start_ns: i64, end_ns: i64) -> u32 {
        let bounds = &self.phases.boundaries;
        if bounds.is_empty() {
            return 0;
        }
        // The midpoint without overflow, rounded down (towards negative infinity).
        let mid = (start_ns >> 1) + (end_ns >> 1) + (start_ns & end_ns & 1);
        u32::try_from(bounds.partition_point(|b| *b <= mid)).unwrap_or(u32::MAX)
    }

    /// Ends the idle run, if any; `next_edge` says whether a discontinuity follows its last
    /// sample. Runs shorter than the minimum gap are kept only at an edge.
    fn close(&mut self, next_edge: bool, out: &mut Vec<Fragment>) {
        if let Some(r) = self.run.take()
            && (r.end_ns - r.start_ns >= self.min_gap_ns || r.edge || next_edge)
        {
            out.push(Fragment {
                device: r.device,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
            });
        }
    }

    fn add(&mut self, rows: &SampleColumns, fragments: &mut Vec<Fragment>) {
        let values = &rows.values;
        let mut cached: Option<((DeviceId, u32), SegAgg)> = None;
        for i in 0..rows.len() {
            let (dev, start, end) = (rows.device[i], rows.start_ns[i], rows.end_ns[i]);
            let device = DeviceId(u32::from(dev));
            // A discontinuity before this sample: the first of the window, another device, or
            // a hole (or overlap) in time.
            let disc = match self.prev {
                None => true,
                Some((d, prev_end)) => {
                    let step = start.saturating_sub(prev_end);
                    d != dev || step > self.hole_ns || step < -self.hole_ns
                }
            };
            self.prev = Some((dev, end));
            let act = self.eval.value(values, i);
            let known = self.eval.known(values, i, act);
            let idle = known && self.eval.idle(values, i, act);
            if !known {
                // Unknown is not idle, and an idle run does not continue across it.
                self.close(true, fragments);
                self.prev = None;
            } else if idle {
                match &mut self.run {
                    Some(r) if !disc => {
                        r.start_ns = r.start_ns.min(start);
                        r.end_ns = r.end_ns.max(end);
                    }
                    _ => {
                        self.close(disc, fragments);
                        self.run = Some(Run {
                            device,
                            start_ns: start,
                            end_ns: end,
                            edge: disc,
                        });
                    }
                }
            } else {
                self.close(disc, fragments);
            }

            let key = (device, self.segment(start, end));
            let agg = match &mut cached {
                Some((k, agg)) if *k == key => agg,
                _ => {
                    if let Some((k, agg)) = cached.take() {
                        self.totals.entry(k).or_default().add(&agg);
                    }
                    &mut cached
                        .insert((
                            key,
                            SegAgg {
                                sums: vec![0.0; self.metrics + 1],
                                peaks: vec![f64::NAN; self.metrics + 1],
                                counts: vec![0; self.metrics + 1],
                                first_start_ns: start,
                                last_end_ns: end,
                                ..SegAgg::default()
                            },
                        ))
                        .1
                }
            };
            let dur = end - start;
            agg.samples += 1;
            if known {
                agg.sampled_ns += dur;
            } else {
                agg.unknown += 1;
                agg.unknown_ns += dur;
            }
            if idle {
                agg.idle_ns += dur;
            }
            agg.first_start_ns = agg.first_start_ns.min(start);
            agg.last_end_ns = agg.last_end_ns.max(end);
            let row = values
                .iter()
                .map(|c| f64::from(c[i]))
                .chain(std::iter::once(act));
            let cells = agg.sums.iter_mut().zip(&mut agg.peaks).zip(&mut agg.counts);
            for (((sum, peak), count), v) in cells.zip(row) {
                // A null value is unknown: left out of the sums, means and peaks.
                if !v.is_nan() {
                    *sum += v;
                    *peak = peak.max(v);
                    *count += 1;
                }
            }
        }
        if let Some((k, agg)) = cached {
            self.totals.entry(k).or_default().add(&agg);
        }
    }

    /// Ends the window (its last sample is followed by an edge); returns its totals.
    fn finish(mut self, fragments: &mut Vec<Fragment>) -> BTreeMap<(DeviceId, u32), SegAgg> {
        self.close(true, fragments);
        self.totals
    }
}

/// A run of idle samples of one device, consecutive in the file (24 bytes: a long trace has
/// millions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// The largest activity value in the trace (for a full scale when none is known); 0 for a trace
/// without samples.
pub fn metric_peak(trace: &Trace, activity: &Activity) -> Result<f64> {
    let all = trace.metric_names();
    let not_recorded = || AnalysisError::ActivityNotRecorded {
        path: trace.path().to_path_buf(),
        activity: activity.label(),
    };
    // Only the columns the activity value needs are read.
    let needed = activity.eval(&all).ok_or_else(not_recorded)?.columns();
    let names: Vec<&str> = needed.iter().map(|i| all[*i]).collect();
    let eval = activity.eval(&names).ok_or_else(not_recorded)?;
    let mut peak = f64::NAN;
    trace.samples_between(i64::MIN, i64::MAX, &names, |rows| {
        for i in 0..rows.len() {
            peak = peak.max(eval.value(&rows.values, i));
        }
        Ok::<(), AnalysisError>(())
    })?;
    Ok(if peak.is_nan() { 0.0 } else { peak })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity() -> Activity {
        Activity {
            metric: "a".into(),
            denominator: Some("b".into()),
            full_scale: 1.0,
            full_scale_source: FullScaleSource::Ratio,
            idle_below: 0.05,
            also_low: vec!["c".into()],
        }
    }

    #[test]
    fn a_missing_value_is_never_idle_and_a_zero_denominator_is() {
        let eval = activity().eval(&["c", "a", "b"]).expect("resolved");
        assert_eq!(eval.columns(), [0, 1, 2]);
        // Columns c, a, b; samples: busy, idle, zero denominator, NaN denominator, NaN metric,
        // and a percentage (c) that is not low.
        let values = vec![
            vec![0.0f32, 0.0, 0.0, 0.0, 0.0, 50.0],
            vec![800.0f32, 10.0, 5.0, 5.0, f32::NAN, 10.0],
            vec![1000.0f32, 1000.0, 0.0, f32::NAN, 1000.0, 1000.0],
        ];
        let idle: Vec<bool> = (0..6)
            .map(|i| eval.idle(&values, i, eval.value(&values, i)))
            .collect();
        assert_eq!(idle, [false, true, true, false, false, false]);
        assert_eq!(eval.value(&values, 0), 0.8, "divided in f64");
        assert!(activity().eval(&["a", "b"]).is_none(), "c is not read");
    }
}
