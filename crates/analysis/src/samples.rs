//! The two passes over the samples table, both lazy polars queries (the samples table is the one
//! that can hold hundreds of millions of values; everything else is small):
//!
//! 1. [`aggregate_segments`]: every sample is placed in a phase segment by a sorted search of its
//!    midpoint among the NVTX range boundaries, then grouped by `(device, segment)`: count,
//!    sampled and idle time, sum and peak of every metric and of the activity value. Phases are
//!    unions of segments, so per-phase statistics are sums over this small frame.
//! 2. [`idle_fragments`]: runs of consecutive idle samples in file order, found with a shift and
//!    a cumulative sum. A run is cut by a change of device, a change between idle and busy, and
//!    any hole in time (a drop): a hole is never idle. Runs shorter than the minimum gap are kept
//!    only where they touch a discontinuity of the file order (a device switch or a hole), since
//!    there they may continue in another part of the file; [`crate::gaps`] merges those.

use crate::error::{Result, query_err};
use crate::phases::Phases;
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
}

impl Activity {
    pub fn threshold(&self) -> f64 {
        self.idle_below * self.full_scale
    }

    /// `metric / denominator` (0 where the denominator is 0), or the metric itself, as Float64.
    pub fn expr(&self) -> Expr {
        let num = col(self.metric.as_str()).cast(DataType::Float64);
        match &self.denominator {
            Some(d) => {
                let den = col(d.as_str()).cast(DataType::Float64);
                when(den.clone().gt(lit(0.0)))
                    .then(num / den)
                    .otherwise(lit(0.0))
            }
            None => num,
        }
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
pub type SegmentTotals = HashMap<(u16, u32), SegAgg>;

const SEG: &str = "__segment";
const DUR: &str = "__dur_ns";
const ACT: &str = "__activity";

fn segment_expr(phases: &Phases) -> Expr {
    if phases.boundaries.is_empty() {
        return lit(0u32).cast(DataType::UInt32).alias(SEG);
    }
    let bounds = Series::new("bounds".into(), phases.boundaries.clone());
    let mid = col("start_ns") + (col("end_ns") - col("start_ns")) / lit(2i64);
    lit(bounds)
        .search_sorted(mid, SearchSortedSide::Right, false)
        .cast(DataType::UInt32)
        .alias(SEG)
}

/// Pass 1: per `(device, segment)` totals.
pub fn aggregate_segments(
    trace: &Trace,
    phases: &Phases,
    activity: &Activity,
    metrics: &[String],
) -> Result<SegmentTotals> {
    let thr = activity.threshold();
    let mut aggs = vec![
        len().alias("n"),
        col(DUR).sum().alias("dur"),
        when(col(ACT).lt(lit(thr)))
            .then(col(DUR))
            .otherwise(lit(0i64))
            .sum()
            .alias("idle"),
        col("start_ns").min().alias("first"),
        col("end_ns").max().alias("last"),
    ];
    let value_cols: Vec<String> = metrics
        .iter()
        .cloned()
        .chain(std::iter::once(ACT.to_string()))
        .collect();
    for (i, m) in value_cols.iter().enumerate() {
        aggs.push(
            col(m.as_str())
                .cast(DataType::Float64)
                .sum()
                .alias(format!("s{i}")),
        );
        aggs.push(
            col(m.as_str())
                .max()
                .cast(DataType::Float64)
                .alias(format!("p{i}")),
        );
    }
    let query = trace
        .lazy(Table::Samples)?
        .with_columns([
            segment_expr(phases),
            (col("end_ns") - col("start_ns")).alias(DUR),
            activity.expr().alias(ACT),
        ])
        .group_by([col("device"), col(SEG)])
        .agg(aggs);
    let df = trace.collect(query)?;
    let qe = query_err(trace.path());
    let device = df
        .column("device")
        .map_err(&qe)?
        .u16()
        .map_err(&qe)?
        .clone();
    let seg = df.column(SEG).map_err(&qe)?.u32().map_err(&qe)?.clone();
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
    for i in 0..value_cols.len() {
        sums.push(
            df.column(&format!("s{i}"))
                .map_err(&qe)?
                .f64()
                .map_err(&qe)?
                .clone(),
        );
        peaks.push(
            df.column(&format!("p{i}"))
                .map_err(&qe)?
                .f64()
                .map_err(&qe)?
                .clone(),
        );
    }
    let mut out = SegmentTotals::with_capacity(df.height());
    for row in 0..df.height() {
        let key = (device.get(row).unwrap_or(0), seg.get(row).unwrap_or(0));
        out.insert(
            key,
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
        );
    }
    Ok(out)
}

/// A run of idle samples of one device, consecutive in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub device: u16,
    pub start_ns: i64,
    pub end_ns: i64,
    pub samples: u64,
    /// The run touches a discontinuity of the file order and may continue elsewhere.
    pub edge: bool,
}

/// Pass 2: idle runs at least `min_gap_ns` long, plus the shorter ones at discontinuities.
/// Consecutive samples further apart than `hole_ns` (or overlapping by more) are not contiguous.
pub fn idle_fragments(
    trace: &Trace,
    activity: &Activity,
    min_gap_ns: i64,
    hole_ns: i64,
) -> Result<Vec<Fragment>> {
    let thr = activity.threshold();
    let prev_dev = col("device").shift(lit(1));
    let next_dev = col("device").shift(lit(-1));
    let disc_prev = prev_dev
        .clone()
        .neq(col("device"))
        .fill_null(lit(true))
        .or((col("start_ns") - col("end_ns").shift(lit(1)))
            .abs()
            .gt(lit(hole_ns))
            .fill_null(lit(true)));
    let disc_next = next_dev
        .neq(col("device"))
        .fill_null(lit(true))
        .or((col("start_ns").shift(lit(-1)) - col("end_ns"))
            .abs()
            .gt(lit(hole_ns))
            .fill_null(lit(true)));
    let query = trace
        .lazy(Table::Samples)?
        .select([
            col("device"),
            col("start_ns"),
            col("end_ns"),
            activity.expr().lt(lit(thr)).alias("idle"),
        ])
        .with_columns([disc_prev.alias("dp"), disc_next.alias("dn")])
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
            len().cast(DataType::Int64).alias("n"),
            col("dp").or(col("dn")).any(true).alias("edge"),
        ])
        .filter(
            (col("end") - col("start"))
                .gt_eq(lit(min_gap_ns))
                .or(col("edge")),
        );
    let df = trace.collect(query)?;
    let qe = query_err(trace.path());
    let device = df
        .column("device")
        .map_err(&qe)?
        .u16()
        .map_err(&qe)?
        .clone();
    let start = df.column("start").map_err(&qe)?.i64().map_err(&qe)?.clone();
    let end = df.column("end").map_err(&qe)?.i64().map_err(&qe)?.clone();
    let n = df.column("n").map_err(&qe)?.i64().map_err(&qe)?.clone();
    let edge = df.column("edge").map_err(&qe)?.bool().map_err(&qe)?.clone();
    let mut out = Vec::with_capacity(df.height());
    for row in 0..df.height() {
        out.push(Fragment {
            device: device.get(row).unwrap_or(0),
            start_ns: start.get(row).unwrap_or(0),
            end_ns: end.get(row).unwrap_or(0),
            samples: n.get(row).unwrap_or(0).max(0) as u64,
            edge: edge.get(row).unwrap_or(true),
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
