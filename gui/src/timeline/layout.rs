//! How the rows share the timeline's height: each row says how it may be sized ([`Fit`]: a
//! minimum, a maximum and a weight), and [`share_heights`] gives every row a height so that
//! together they fill the height there is. Rows of fixed height (lanes, titles) have a weight of
//! 0; tracks grow with their weight until they reach their maximum. Where even the minimums do
//! not fit, every row takes its minimum and the timeline scrolls.
//!
//! The function knows nothing of what a row draws, so a new kind of row (a lane of host stacks,
//! say) only needs a [`Fit`].

/// How a row may be sized, in points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    pub min: f32,
    pub max: f32,
    /// Its share of the height left once every row has its minimum (rows of equal weight grow
    /// alike); 0 keeps the row at its minimum.
    pub weight: f32,
}

impl Fit {
    /// A row that is always `h` high.
    pub const fn fixed(h: f32) -> Fit {
        Fit {
            min: h,
            max: h,
            weight: 0.0,
        }
    }

    /// A row that grows with `weight` from `min` to `max`.
    pub const fn flexible(min: f32, max: f32, weight: f32) -> Fit {
        Fit { min, max, weight }
    }

    /// The row's height for a level `lambda` of the water line: `lambda × weight`, held
    /// between the minimum and the maximum.
    fn at(&self, lambda: f64) -> f64 {
        let lo = f64::from(self.min);
        let hi = f64::from(self.max.max(self.min));
        if self.weight > 0.0 {
            (lambda * f64::from(self.weight)).clamp(lo, hi)
        } else {
            lo
        }
    }
}

/// Heights for rows that share `available` points, in the rows' order.
///
/// Every height lies between its row's minimum and maximum. When the minimums take more than
/// `available`, every row gets its minimum (the caller scrolls); when even the maximums take
/// less, every row gets its maximum (what is left stays empty). In between, the heights sum to
/// `available`: the height is `lambda × weight` for one level `lambda` shared by all rows, held
/// between each row's bounds, so rows of equal weight and bounds are equally high.
pub fn share_heights(fits: &[Fit], available: f32) -> Vec<f32> {
    let target = f64::from(available.max(0.0));
    let sum = |lambda: f64| fits.iter().map(|f| f.at(lambda)).sum::<f64>();
    let lows: f64 = fits.iter().map(|f| f64::from(f.min)).sum();
    if target <= lows {
        return fits.iter().map(|f| f.min).collect();
    }
    // The level at which every flexible row has reached its maximum.
    let top = fits
        .iter()
        .filter(|f| f.weight > 0.0)
        .map(|f| f64::from(f.max.max(f.min)) / f64::from(f.weight))
        .fold(0.0, f64::max);
    if sum(top) <= target {
        return fits.iter().map(|f| to_f32(f.at(top))).collect();
    }
    // The sum grows continuously and never falls with the level: bisect for the level whose
    // sum is the target. 64 halvings take the level to f64's precision.
    let (mut lo, mut hi) = (0.0, top);
    for _ in 0..64 {
        let mid = (lo + hi) / 2.0;
        if sum(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    fits.iter().map(|f| to_f32(f.at(hi))).collect()
}

/// Heights that fill `available` whatever the rows' maximums: [`share_heights`], and where every
/// flexible row reached its maximum, the rest shared among them by weight, so that nothing stays
/// blank below the last row. Rows of fixed height keep it.
pub fn fill_heights(fits: &[Fit], available: f32) -> Vec<f32> {
    let mut h = share_heights(fits, available);
    let left = available - h.iter().sum::<f32>();
    let weights: f32 = fits.iter().map(|f| f.weight).sum();
    if left > 0.5 && weights > 0.0 {
        for (x, f) in h.iter_mut().zip(fits) {
            *x += left * f.weight / weights;
        }
    }
    h
}

/// A height in points: the heights come from `f32` bounds, so narrowing loses nothing but
/// precision below a pixel.
#[expect(
    clippy::cast_possible_truncation,
    reason = "a height between two f32 bounds"
)]
fn to_f32(h: f64) -> f32 {
    h as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TRACK: Fit = Fit::flexible(20.0, 160.0, 1.0);
    const LANE: Fit = Fit::fixed(18.0);

    fn total(h: &[f32]) -> f32 {
        h.iter().sum()
    }

    #[test]
    fn tracks_fill_the_height_left_by_lanes() {
        // 1 GPU, 2 metrics: two lanes and two tracks in 300 points.
        let h = share_heights(&[LANE, TRACK, TRACK, LANE], 300.0);
        assert_eq!(h[0], 18.0);
        assert_eq!(h[3], 18.0);
        assert!((h[1] - 132.0).abs() < 1e-3, "{h:?}");
        assert!((h[2] - 132.0).abs() < 1e-3, "{h:?}");
    }

    #[test]
    fn too_little_height_gives_every_row_its_minimum() {
        let fits = vec![TRACK; 40];
        let h = share_heights(&fits, 500.0);
        assert!(h.iter().all(|&x| x == 20.0), "{h:?}");
    }

    #[test]
    fn too_much_height_stops_at_the_maximums() {
        let h = share_heights(&[LANE, TRACK], 2000.0);
        assert_eq!(h, vec![18.0, 160.0]);
    }

    #[test]
    fn weights_share_what_is_above_the_minimums() {
        let nvml = Fit::flexible(16.0, 60.0, 0.4);
        let h = share_heights(&[TRACK, nvml], 120.0);
        // The level lambda with lambda + 0.4 lambda = 120: 85.7 and 34.3.
        assert!((h[0] - 85.714).abs() < 1e-2, "{h:?}");
        assert!((h[1] - 34.286).abs() < 1e-2, "{h:?}");
    }

    #[test]
    fn a_row_at_its_maximum_leaves_the_rest_to_the_others() {
        let short = Fit::flexible(20.0, 30.0, 1.0);
        let h = share_heights(&[short, TRACK], 150.0);
        assert_eq!(h[0], 30.0);
        assert!((h[1] - 120.0).abs() < 1e-3, "{h:?}");
    }

    #[test]
    fn filling_shares_what_the_maximums_leave_by_weight() {
        let nvml = Fit::flexible(16.0, 60.0, 0.5);
        let h = fill_heights(&[LANE, TRACK, nvml], 18.0 + 160.0 + 60.0 + 150.0);
        assert_eq!(h[0], 18.0);
        assert!((h[1] - 260.0).abs() < 1e-3, "{h:?}");
        assert!((h[2] - 110.0).abs() < 1e-3, "{h:?}");
        // Below the maximums it is share_heights; with lanes alone there is nothing to grow.
        assert_eq!(
            fill_heights(&[LANE, TRACK], 100.0),
            share_heights(&[LANE, TRACK], 100.0)
        );
        assert_eq!(fill_heights(&[LANE], 500.0), vec![18.0]);
    }

    #[test]
    fn no_rows_no_heights() {
        assert!(share_heights(&[], 100.0).is_empty());
        assert_eq!(share_heights(&[LANE], -5.0), vec![18.0]);
    }

    fn fit() -> impl Strategy<Value = Fit> {
        (
            1.0f32..80.0,
            0.0f32..200.0,
            prop_oneof![Just(0.0f32), 0.1f32..3.0],
        )
            .prop_map(|(min, extra, weight)| Fit::flexible(min, min + extra, weight))
    }

    proptest! {
        #[test]
        fn heights_keep_their_bounds_and_fill_what_they_can(
            fits in prop::collection::vec(fit(), 0..30),
            available in 0.0f32..4000.0,
        ) {
            let h = share_heights(&fits, available);
            prop_assert_eq!(h.len(), fits.len());
            for (x, f) in h.iter().zip(&fits) {
                prop_assert!(*x >= f.min - 1e-3 && *x <= f.max + 1e-3, "{} not in {:?}", x, f);
            }
            let mins: f32 = fits.iter().map(|f| f.min).sum();
            let maxs: f32 = fits
                .iter()
                .map(|f| if f.weight > 0.0 { f.max } else { f.min })
                .sum();
            let want = available.clamp(mins, maxs.max(mins));
            prop_assert!((total(&h) - want).abs() <= 1e-3 * want.max(1.0), "{} vs {}", total(&h), want);
        }

        #[test]
        fn filled_heights_fill_the_height_when_a_row_can_grow(
            fits in prop::collection::vec(fit(), 1..30),
            available in 0.0f32..4000.0,
        ) {
            let h = fill_heights(&fits, available);
            let mins: f32 = fits.iter().map(|f| f.min).sum();
            let grows = fits.iter().any(|f| f.weight > 0.0);
            for (x, f) in h.iter().zip(&fits) {
                prop_assert!(*x >= f.min - 1e-3, "{} below {:?}", x, f);
            }
            if grows && available >= mins {
                prop_assert!((total(&h) - available).abs() <= 1e-3 * available.max(1.0));
            }
        }

        #[test]
        fn more_height_never_shrinks_a_row(
            fits in prop::collection::vec(fit(), 1..20),
            a in 0.0f32..3000.0,
            more in 0.0f32..1000.0,
        ) {
            let h1 = share_heights(&fits, a);
            let h2 = share_heights(&fits, a + more);
            for (x, y) in h1.iter().zip(&h2) {
                prop_assert!(*y >= *x - 1e-3, "{:?} -> {:?}", h1, h2);
            }
        }
    }
}
