//! The passes over the samples table, lazy polars queries (the samples table is the one that can
//! hold hundreds of millions of values; everything else is small). The table is read in time
//! windows of a few million samples ([`time_windows`]) so memory stays bounded; per window, two
//! queries share one scan ([`scan_samples`]):
//!
//! 1. segment totals: every sample is placed in a phase segment by a sorted search of its
//!    midpoint among the NVTX range boundaries; runs of consecutive rows with the same device and
//!    segment are numbered by a cumulative sum (sorted, so groups are slices), summed, and merged
//!    per `(device, segment)`: count, sampled and idle time, sum and peak of every metric and of
//!    the activity value. Phases are unions of segments, so per-phase statistics are sums over
//!    this small result.
//! 2. idle fragments: runs of consecutive idle samples in file order, found with a shift and a
//!    cumulative sum. A run is cut by a change of device, a change between idle and busy, and any
//!    hole in time (a drop): a hole is never idle. Runs shorter than the minimum gap are kept only
//!    where they touch a discontinuity of the file order (a device switch, a hole, a window edge),
//!    since there they may continue elsewhere; [`crate::gaps`] merges those.

use crate::error::{AnalysisError, Result, query_err};
use crate::phases::Phases;
use cufall_trace::model::DeviceId;
use cufall_trace::{Table, Trace};
use polars::prelude::*;
use std::collections::HashMap;

/// The value whose low stretches count as idle: a metric, optionally divided by another, with
/// the threshold as a fraction of its full scale.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Activity {
    pub metric: String,
    pub denominator: Option<String>,
    /// The value that means "fully busy".
    pub full_scale: f64,
    /// Where the full scale came from (`heatmap`, `ratio`, `percent`, `peak in trace`, `--full-scale`).
    pub full_scale_source: String,
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

    /// `metric / denominator` (0 where the denominator is 0), or the metric itself, as Float32.
    pub fn expr(&self) -> Expr {
        // Float32 like the metric columns: half the memory of Float64 over hundreds of millions
        // of samples, and far finer than the threshold it is compared with.
        let num = col(self.metric.as_str()).cast(DataType::Float32);
        match &self.denominator {
            Some(d) => {
                let den = col(d.as_str()).cast(DataType::Float32);
                when(den.clone().gt(lit(0.0f32)))
                    .then(num / den)
                    .otherwise(lit(0.0f32))
            }
            None => num,
        }
    }

    /// Whether a sample is idle: the activity value (column `act`) below the threshold and every
    /// [`Activity::also_low`] metric below its own.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "thresholds compared with the f32 values the trace stores"
    )]
    pub fn idle_expr(&self, act: &str) -> Expr {
        let pct = (self.idle_below * 100.0) as f32;
        self.also_low
            .iter()
            .fold(col(act).lt(lit(self.threshold() as f32)), |acc, m| {
                acc.and(col(m.as_str()).cast(DataType::Float32).lt(lit(pct)))
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

/// Totals of one device over one segment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegAgg {
    pub samples: u64,
    pub sampled_ns: i64,
    pub idle_ns: i64,
    pub first_start_ns: i64,
    pub last_end_ns: i64,
    /// Sum and peak of each metric, then of the activity value (last).
    pub sums: Vec<f64>,
    pub peaks: Vec<f64>,
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

const SEG: &str = "__segment";
const DUR: &str = "__dur_ns";
const ACT: &str = "__activity";
const IDLE_DUR: &str = "__idle_ns";
const IDLE: &str = "__idle";

fn segment_expr(phases: &Phases) -> Expr {
    if phases.boundaries.is_empty() {
        return lit(0u32).cast(DataType::UInt32).alias(SEG);
    }
    let bounds = Series::new("bounds".into(), phases.boundaries.clone());
    // (start + end) / 2 stays far below i64::MAX for Unix-epoch nanoseconds (until 2116).
    let mid = (col("start_ns") + col("end_ns")) / lit(2i64);
    lit(bounds)
        .search_sorted(mid, SearchSortedSide::Right, false)
        .cast(DataType::UInt32)
        .alias(SEG)
}

/// Most samples one query holds in memory: the samples table is read in time windows of about
/// this many samples, so memory stays bounded however long the recording is.
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
    pub min_gap_ns: i64,
    /// Consecutive samples further apart than this are not contiguous.
    pub hole_ns: i64,
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
/// caller that folds them into fewer cells never holds one per segment.
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
    for (done, (lo, hi)) in windows.into_iter().enumerate() {
        let lf = trace.lazy_between(Table::Samples, lo, hi)?;
        // The activity value is computed once, in the shared part of the two plans.
        let lf = lf.with_columns([activity.expr().alias(ACT)]);
        let lf = lf.with_columns([activity.idle_expr(ACT).alias(IDLE)]);
        let q1 = segment_query(lf.clone(), phases, metrics);
        let q2 = fragment_query(lf, min_gap_ns, hole_ns);
        let opt = q1.get_current_optimizations();
        let plans = vec![q1.logical_plan, q2.logical_plan];
        // The two queries share their scan (common subplan elimination): one decode per window.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            LazyFrame::collect_all_with_engine(plans, Engine::InMemory, opt)
        }));
        let frames = match run {
            Ok(Ok(frames)) => frames,
            Ok(Err(e)) => return Err(query_err(trace.path())(e)),
            Err(_) => {
                return Err(AnalysisError::Query {
                    path: trace.path().to_path_buf(),
                    why: "the samples table could not be decoded".into(),
                });
            }
        };
        let [seg_df, frag_df] =
            <[DataFrame; 2]>::try_from(frames).map_err(|_| AnalysisError::Query {
                path: trace.path().to_path_buf(),
                why: "a query returned an unexpected number of results".into(),
            })?;
        for (key, agg) in read_segments(trace, &seg_df, metrics.len() + 1)? {
            each(key, &agg);
        }
        fragments.extend(read_fragments(trace, &frag_df)?);
        drop((seg_df, frag_df));
        each_window(done + 1, total);
    }
    fragments.shrink_to_fit();
    Ok(fragments)
}

fn segment_query(lf: LazyFrame, phases: &Phases, metrics: &[String]) -> LazyFrame {
    let value_cols: Vec<String> = metrics
        .iter()
        .cloned()
        .chain(std::iter::once(ACT.to_string()))
        .collect();
    // Stage 1 groups runs of consecutive rows with the same device and segment: the run id is a
    // cumulative sum, flagged sorted, so groups are slices and sums are contiguous.
    let mut run_aggs = vec![
        col("device").first().alias("device"),
        col(SEG).first().alias(SEG),
        len().cast(DataType::Int64).alias("n"),
        col(DUR).sum().alias("dur"),
        col(IDLE_DUR).sum().alias("idle"),
        col("start_ns").min().alias("first"),
        col("end_ns").max().alias("last"),
    ];
    // Stage 2 merges the runs of each (device, segment).
    let mut seg_aggs = vec![
        col("n").sum(),
        col("dur").sum(),
        col("idle").sum(),
        col("first").min(),
        col("last").max(),
    ];
    for (i, m) in value_cols.iter().enumerate() {
        run_aggs.push(
            col(m.as_str())
                .sum()
                .cast(DataType::Float64)
                .alias(format!("s{i}")),
        );
        run_aggs.push(
            col(m.as_str())
                .max()
                .cast(DataType::Float64)
                .alias(format!("p{i}")),
        );
        seg_aggs.push(col(format!("s{i}").as_str()).sum());
        seg_aggs.push(col(format!("p{i}").as_str()).max());
    }
    let changed = col("device")
        .neq(col("device").shift(lit(1)))
        .or(col(SEG).neq(col(SEG).shift(lit(1))))
        .fill_null(lit(true));
    lf.with_columns([
        segment_expr(phases),
        (col("end_ns") - col("start_ns")).alias(DUR),
    ])
    .with_columns([
        changed.cast(DataType::UInt32).cum_sum(false).alias("__run"),
        when(col(IDLE))
            .then(col(DUR))
            .otherwise(lit(0i64))
            .alias(IDLE_DUR),
    ])
    .group_by([col("__run")])
    .agg(run_aggs)
    .group_by([col("device"), col(SEG)])
    .agg(seg_aggs)
}

fn read_segments(
    trace: &Trace,
    df: &DataFrame,
    values: usize,
) -> Result<Vec<((DeviceId, u32), SegAgg)>> {
    let qe = query_err(trace.path());
    let device = crate::error::column_u16(df, "device", &qe)?;
    let seg = crate::error::column_u32(df, SEG, &qe)?;
    let get_i64 = |name: &str| -> Result<Int64Chunked> {
        let c = df
            .column(name)
            .map_err(&qe)?
            .cast(&DataType::Int64)
            .map_err(&qe)?;
        Ok(c.i64().map_err(&qe)?.clone())
    };
    let n = get_i64("n")?;
    let dur = get_i64("dur")?;
    let idle = get_i64("idle")?;
    let first = get_i64("first")?;
    let last = get_i64("last")?;
    let mut sums = Vec::new();
    let mut peaks = Vec::new();
    for i in 0..values {
        sums.push(crate::error::column_f64(df, &format!("s{i}"), &qe)?);
        peaks.push(crate::error::column_f64(df, &format!("p{i}"), &qe)?);
    }
    let mut out = Vec::with_capacity(df.height());
    for row in 0..df.height() {
        out.push((
            (
                DeviceId(u32::from(device.get(row).unwrap_or(0))),
                seg.get(row).unwrap_or(0),
            ),
            SegAgg {
                samples: n.get(row).unwrap_or(0).max(0) as u64,
                sampled_ns: dur.get(row).unwrap_or(0),
                idle_ns: idle.get(row).unwrap_or(0),
                first_start_ns: first.get(row).unwrap_or(0),
                last_end_ns: last.get(row).unwrap_or(0),
                sums: sums.iter().map(|c| c.get(row).unwrap_or(0.0)).collect(),
                peaks: peaks
                    .iter()
                    .map(|c| c.get(row).unwrap_or(f64::NAN))
                    .collect(),
            },
        ));
    }
    Ok(out)
}

/// A run of idle samples of one device, consecutive in the file (24 bytes: a long trace has
/// millions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Idle runs at least `min_gap_ns` long, plus the shorter ones at discontinuities. Consecutive
/// samples further apart than `hole_ns` (or overlapping by more) are not contiguous.
/// `lf` carries each sample's idle flag in its `IDLE` column.
fn fragment_query(lf: LazyFrame, min_gap_ns: i64, hole_ns: i64) -> LazyFrame {
    // A discontinuity before a row: another device, or a hole (or overlap) in time. The one
    // after a row is the next row's.
    let step = col("start_ns") - col("end_ns").shift(lit(1));
    let disc_prev = col("device")
        .neq(col("device").shift(lit(1)))
        .or(step.clone().gt(lit(hole_ns)))
        .or(step.lt(lit(-hole_ns)))
        .fill_null(lit(true));
    lf.select([
        col("device"),
        col("start_ns"),
        col("end_ns"),
        col(IDLE).alias("idle"),
    ])
    .with_columns([disc_prev.alias("dp")])
    .with_columns([col("dp").shift(lit(-1)).fill_null(lit(true)).alias("dn")])
    .with_columns([col("dp")
        .or(col("idle")
            .neq(col("idle").shift(lit(1)))
            .fill_null(lit(true)))
        .cast(DataType::UInt32)
        .cum_sum(false)
        .alias("run")])
    .filter(col("idle"))
    .group_by([col("run")])
    .agg([
        col("device").first().alias("device"),
        col("start_ns").min().alias("start"),
        col("end_ns").max().alias("end"),
        col("dp").or(col("dn")).any(true).alias("edge"),
    ])
    .filter(
        (col("end") - col("start"))
            .gt_eq(lit(min_gap_ns))
            .or(col("edge")),
    )
}

fn read_fragments(trace: &Trace, df: &DataFrame) -> Result<Vec<Fragment>> {
    let qe = query_err(trace.path());
    let device = crate::error::column_u16(df, "device", &qe)?;
    let start = crate::error::column_i64(df, "start", &qe)?;
    let end = crate::error::column_i64(df, "end", &qe)?;
    let mut out = Vec::with_capacity(df.height());
    for row in 0..df.height() {
        out.push(Fragment {
            device: DeviceId(u32::from(device.get(row).unwrap_or(0))),
            start_ns: start.get(row).unwrap_or(0),
            end_ns: end.get(row).unwrap_or(0),
        });
    }
    Ok(out)
}

/// The largest value of `metric` in the trace (for a full scale when none is known).
pub fn metric_peak(trace: &Trace, activity_expr: Expr) -> Result<f64> {
    let df = trace.collect(
        trace
            .lazy(Table::Samples)?
            .select([activity_expr.max().alias("p")]),
    )?;
    let qe = query_err(trace.path());
    let c = df
        .column("p")
        .map_err(&qe)?
        .cast(&DataType::Float64)
        .map_err(&qe)?;
    Ok(c.f64().map_err(&qe)?.get(0).unwrap_or(0.0))
}
