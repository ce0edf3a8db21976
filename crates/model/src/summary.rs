//! [`Summary`]: what the views keep of a set of samples of one value — the exact minimum and
//! maximum, and the time-weighted mean as Σ value × duration over Σ duration.
//!
//! Both the terminal heatmap's pyramid (`cufall-viewer`, `bucket`) and the desktop timeline's
//! (`cufall-gui`, `lod`) summarise with this type, so a window shows the same mean in both.
//! Weighting by time matters where samples are uneven: a sample cut short at a drop, or a
//! long one after a stall, counts for the time it covers, not as one sample among equals.

/// Summary of a value over a set of samples (empty: no sample with a value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub min: f64,
    pub max: f64,
    /// Σ value × duration (ns) over the samples.
    pub weighted_sum: f64,
    /// Σ duration (ns) of the samples with a value (NaN values are left out).
    pub dur_ns: i64,
}

impl Default for Summary {
    fn default() -> Self {
        Summary::EMPTY
    }
}

impl Summary {
    pub const EMPTY: Summary = Summary {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        weighted_sum: 0.0,
        dur_ns: 0,
    };

    /// One sample lasting `dur_ns` (a negative duration counts as none); a NaN value gives the
    /// empty summary.
    pub fn of(value: f64, dur_ns: i64) -> Summary {
        if value.is_nan() {
            return Summary::EMPTY;
        }
        let dur_ns = dur_ns.max(0);
        Summary {
            min: value,
            max: value,
            weighted_sum: value * dur_ns as f64,
            dur_ns,
        }
    }

    /// Adds one sample lasting `dur_ns`.
    pub fn add(&mut self, value: f64, dur_ns: i64) {
        self.merge(&Summary::of(value, dur_ns));
    }

    pub fn is_empty(&self) -> bool {
        self.min > self.max
    }

    pub fn merge(&mut self, o: &Summary) {
        if o.is_empty() {
            return;
        }
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.weighted_sum += o.weighted_sum;
        self.dur_ns = self.dur_ns.saturating_add(o.dur_ns);
    }

    /// Adds the fraction `frac` (0..=1) of `o`'s time, with `o`'s mean; min and max are those
    /// of the whole of `o` (a part of a summary has no min of its own).
    pub fn merge_part(&mut self, o: &Summary, frac: f64) {
        if o.is_empty() || frac <= 0.0 {
            return;
        }
        let mut part = *o;
        if frac < 1.0 {
            part.weighted_sum = o.weighted_sum * frac;
            // Rounded to the nearest (both factors are positive) without a rounding call; the
            // product is below `o.dur_ns`, so it fits.
            #[expect(
                clippy::cast_possible_truncation,
                reason = "a share of an i64 duration is within i64"
            )]
            let dur_ns = (((o.dur_ns as f64) * frac + 0.5) as i64).max(1);
            part.dur_ns = dur_ns;
        }
        self.merge(&part);
    }

    /// Time-weighted mean; `None` when empty or when the samples have no duration.
    pub fn mean(&self) -> Option<f64> {
        (!self.is_empty() && self.dur_ns > 0).then(|| self.weighted_sum / self.dur_ns as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_mean_weights_samples_by_their_time() {
        // A 10 ns sample of 1 and a 30 ns sample of 5: (10 + 150) / 40, not (1 + 5) / 2.
        let mut s = Summary::EMPTY;
        s.add(1.0, 10);
        s.add(5.0, 30);
        assert_eq!(s.mean(), Some(4.0));
        assert_eq!((s.min, s.max, s.dur_ns), (1.0, 5.0, 40));
    }

    #[test]
    fn nan_and_timeless_samples_have_no_mean() {
        assert!(Summary::of(f64::NAN, 10).is_empty());
        assert_eq!(Summary::EMPTY.mean(), None);
        let s = Summary::of(3.0, 0);
        assert!(!s.is_empty());
        assert_eq!(s.mean(), None);
        assert_eq!(s.max, 3.0);
    }

    proptest! {
        /// Merging summaries in any grouping gives the summary of all their samples: min and
        /// max exactly, the time and the weighted sum exactly for integer values and times.
        #[test]
        fn merging_is_the_summary_of_the_union(
            samples in proptest::collection::vec((-1000i32..1000, 0i64..10_000), 0..200),
            split in 0usize..200,
        ) {
            let split = split.min(samples.len());
            let mut whole = Summary::EMPTY;
            let (mut a, mut b) = (Summary::EMPTY, Summary::EMPTY);
            for (i, &(v, d)) in samples.iter().enumerate() {
                whole.add(f64::from(v), d);
                if i < split { a.add(f64::from(v), d) } else { b.add(f64::from(v), d) }
            }
            a.merge(&b);
            prop_assert_eq!(a, whole);
            let dur: i64 = samples.iter().map(|s| s.1).sum();
            let ws: f64 = samples.iter().map(|s| f64::from(s.0) * s.1 as f64).sum();
            prop_assert_eq!(whole.dur_ns, dur);
            prop_assert_eq!(whole.weighted_sum, ws);
            prop_assert_eq!(whole.mean(), (!samples.is_empty() && dur > 0).then(|| ws / dur as f64));
            if let Some(m) = whole.mean() {
                prop_assert!(whole.min <= m && m <= whole.max);
            }
        }
    }
}
