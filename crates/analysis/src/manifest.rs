//! What the analysis takes from `manifest.json`, checked against the samples: a value no
//! recording can have (a sampling interval of 0, a full scale of -5, a creation time of 0) gets
//! a warning naming the field and the value, and the analysis takes what the samples show.

use crate::error::Result;
use cufall_trace::model::Nanos;
use cufall_trace::{Trace, TraceError};

/// How many sample lengths the interval is measured from (the first segments' samples).
const MEASURED_SAMPLES: usize = 100_000;

/// A manifest interval further than this factor from the samples' typical length (the mean of the middle half of their lengths) is not theirs.
const INTERVAL_FACTOR: i64 = 4;

/// The manifest's facts the analysis uses, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The sampling interval: the manifest's, or the samples' typical length (the mean of the middle half of their lengths) where the manifest's
    /// is not a sampling interval of these samples; 1 ns without either.
    pub interval_ns: Nanos,
    /// One line per absurd value: the field, the value, and what is used instead.
    pub warnings: Vec<String>,
}

/// A heatmap's full scale if it can be one (finite and above 0).
pub fn usable_full_scale(full_scale: Option<f64>) -> Option<f64> {
    full_scale.filter(|f| f.is_finite() && *f > 0.0)
}

/// Checks the manifest's sampling interval, times and heatmap full scales.
pub fn check(trace: &Trace) -> Result<Checked> {
    let m = trace.manifest();
    let mut warnings = Vec::new();
    for h in &m.heatmaps {
        if let Some(f) = h
            .full_scale
            .filter(|f| usable_full_scale(Some(*f)).is_none())
        {
            warnings.push(format!(
                "manifest.json's heatmap full_scale for {} is {f}, which no value can be a \
                 fraction of: ignored (the full scale comes from the metric instead)",
                h.metric
            ));
        }
    }
    let interval_ns = match m.sampling.as_ref().map(|s| s.interval_ns) {
        None => 1,
        Some(given) => {
            let measured = typical_sample_ns(trace)?;
            let fits = |x: i64| {
                given <= x.saturating_mul(INTERVAL_FACTOR)
                    && x <= given.saturating_mul(INTERVAL_FACTOR)
            };
            match measured {
                _ if given <= 0 || measured.is_some_and(|x| !fits(x)) => {
                    let used = measured.unwrap_or(1);
                    warnings.push(format!(
                        "manifest.json's sampling.interval_ns is {given}, {}: the analysis uses \
                         {used} ns, {}",
                        if given <= 0 {
                            "which no sampling interval can be".to_string()
                        } else {
                            format!("which is not the length of these samples ({used} ns)")
                        },
                        if measured.is_some() {
                            "the typical length of the samples"
                        } else {
                            "as there are no samples to measure"
                        }
                    ));
                    used
                }
                _ => given,
            }
        }
    };
    // The reader bounds rows by these times (`cufall_trace::RecordingSpan`); where they cannot
    // bound anything, say so.
    let created = m.created_unix_ns;
    if created <= 0 {
        warnings.push(format!(
            "manifest.json's created_unix_ns is {created}, before any recording: the samples' \
             own times are used"
        ));
    }
    if let Some(end) = m.end_unix_ns.filter(|end| *end < created) {
        warnings.push(format!(
            "manifest.json's end_unix_ns ({end}) is before its created_unix_ns ({created}): \
             the samples' own times are used"
        ));
    }
    Ok(Checked {
        interval_ns: Nanos(interval_ns),
        warnings,
    })
}

/// Why the measuring pass stopped: enough lengths, or a read error.
enum Stop {
    Enough,
    Trace(TraceError),
}

impl From<TraceError> for Stop {
    fn from(e: TraceError) -> Self {
        Stop::Trace(e)
    }
}

/// The typical length of the first [`MEASURED_SAMPLES`] samples longer than 0 (see
/// [`middle_mean`]); `None` without samples.
pub fn typical_sample_ns(trace: &Trace) -> Result<Option<i64>> {
    let mut lengths: Vec<i64> = Vec::new();
    let read = trace.samples_between(i64::MIN, i64::MAX, &[], |rows| {
        lengths.extend(
            rows.start_ns
                .iter()
                .zip(&rows.end_ns)
                .map(|(s, e)| e.saturating_sub(*s))
                .filter(|d| *d > 0),
        );
        if lengths.len() >= MEASURED_SAMPLES {
            Err(Stop::Enough)
        } else {
            Ok(())
        }
    });
    if let Err(Stop::Trace(e)) = read {
        return Err(e.into());
    }
    Ok(middle_mean(&mut lengths))
}

/// The mean of the middle half of `v` (its interquartile mean), rounded to whole nanoseconds:
/// robust to a few samples spanning holes, and, unlike the median, steady where the lengths
/// alternate between two values (CUPTI's PM samples at 30 µs are 29,985 or 30,015 ns long).
fn middle_mean(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let (lo, hi) = (v.len() / 4, v.len() - v.len() / 4);
    let mid = &v[lo..hi.max(lo + 1)];
    let sum: i128 = mid.iter().map(|x| i128::from(*x)).sum();
    let n = i128::try_from(mid.len()).ok()?;
    i64::try_from((sum + n / 2) / n).ok()
}

#[cfg(test)]
mod tests {
    use super::middle_mean;

    #[test]
    fn the_middle_mean_ignores_outliers_and_steadies_two_values() {
        let mut two = [
            29_985, 30_015, 29_985, 30_015, 29_985, 30_015, 29_985, 30_015,
        ];
        assert_eq!(middle_mean(&mut two), Some(30_000));
        let mut outliers = [
            30_000,
            30_000,
            30_000,
            30_000,
            30_000,
            30_000,
            1,
            4_000_000_000,
        ];
        assert_eq!(middle_mean(&mut outliers), Some(30_000));
        assert_eq!(middle_mean(&mut [7]), Some(7));
        assert_eq!(middle_mean(&mut []), None);
    }
}
