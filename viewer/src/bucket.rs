//! Time bucketing: how samples become the cells of a heatmap, and the pyramid that makes drawing
//! cost independent of the number of raw samples.
//!
//! A sample belongs to the bucket that contains its `start_ns`; buckets are half-open
//! `[t0 + i·w, t0 + (i+1)·w)`. A bucket is a [`Summary`] (shared with the desktop timeline): min,
//! max and the mean weighted by each sample's time, so a sample cut short by a drop counts for
//! the time it covers. [`bucket_samples`] is the plain definition (used by tests and as the
//! reference); [`Pyramid`] gives the same answer without touching raw samples: it keeps, for
//! one series, bins of `base_ns`, `2·base_ns`, `4·base_ns`, ... (level `k` bins are
//! `base_ns << k` wide and aligned to multiples of their width on the epoch). A query whose
//! start is aligned to a level's bin width and whose column width is a multiple of it is exact
//! and costs `columns × (column width / bin width)` bin reads, whatever the sample rate.
//!
//! Live views keep a bounded ring of bins per level ([`Pyramid::ring`]); browsing a recording
//! keeps every bin ([`Pyramid::unbounded`]).

use std::collections::VecDeque;

pub use cufall_trace::model::Summary;

/// How the samples of one bucket become one value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Agg {
    /// The mean of the samples in the bucket, weighted by their time.
    #[default]
    Mean,
    /// The largest sample in the bucket (short bursts stay visible when zoomed out).
    Max,
}

impl Agg {
    pub fn name(self) -> &'static str {
        match self {
            Agg::Mean => "mean",
            Agg::Max => "max",
        }
    }

    /// The value of bucket `s` under this aggregation, `None` for an empty bucket. Samples
    /// without duration have no mean: a bucket of only those shows their maximum, as the
    /// desktop timeline's heat strips do.
    pub fn of(self, s: &Summary) -> Option<f64> {
        match self {
            Agg::Mean => s.mean().or((!s.is_empty()).then_some(s.max)),
            Agg::Max => (!s.is_empty()).then_some(s.max),
        }
    }
}

/// The reference bucketing: `n` buckets of `width_ns` from `t0_ns` of the samples
/// `[start_ns[i], end_ns[i])`; samples starting outside are ignored; non-finite values are
/// skipped.
pub fn bucket_samples(
    start_ns: &[i64],
    end_ns: &[i64],
    values: &[f64],
    t0_ns: i64,
    width_ns: i64,
    n: usize,
) -> Vec<Summary> {
    let mut out = vec![Summary::EMPTY; n];
    if width_ns <= 0 {
        return out;
    }
    for ((&t, &e), &v) in start_ns.iter().zip(end_ns).zip(values) {
        if !v.is_finite() || t < t0_ns {
            continue;
        }
        let i = (t - t0_ns) / width_ns;
        if let Some(b) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
            b.add(v, e.saturating_sub(t));
        }
    }
    out
}

/// Levels above the base: level `k` bins are `base_ns << k` wide.
pub const LEVELS: usize = 24;

#[derive(Clone, Debug, Default)]
struct Level {
    /// Absolute index (time / bin width) of `bins[0]`.
    first: i64,
    bins: VecDeque<Summary>,
}

impl Level {
    fn end(&self) -> i64 {
        self.first + self.bins.len() as i64
    }

    /// Adds `bin` to the bin at absolute index `idx`. In a ring (`cap` set) indexes more than
    /// `cap` bins behind the newest are too old and ignored; a jump far ahead restarts the ring.
    fn add(&mut self, idx: i64, bin: &Summary, cap: Option<usize>) {
        // Fast path: samples arrive in time order, into the newest bin or the one after it.
        let end = self.end();
        if idx == end - 1 && !self.bins.is_empty() {
            if let Some(b) = self.bins.back_mut() {
                b.merge(bin);
            }
            return;
        }
        if idx == end && !self.bins.is_empty() {
            if cap.is_some_and(|c| self.bins.len() >= c) {
                self.bins.pop_front();
                self.first += 1;
            }
            self.bins.push_back(*bin);
            return;
        }
        if self.bins.is_empty() {
            self.first = idx;
            self.bins.push_back(Summary::EMPTY);
        }
        if idx < self.first {
            let need = (self.first - idx) as u64;
            if let Some(cap) = cap
                && need + self.bins.len() as u64 > cap as u64
            {
                return;
            }
            for _ in 0..need {
                self.bins.push_front(Summary::EMPTY);
            }
            self.first = idx;
        } else if idx >= self.end() {
            let need = (idx - self.end() + 1) as u64;
            match cap {
                Some(cap) if need >= cap as u64 => {
                    self.bins.clear();
                    self.first = idx;
                    self.bins.push_back(Summary::EMPTY);
                }
                _ => {
                    for _ in 0..need {
                        self.bins.push_back(Summary::EMPTY);
                    }
                }
            }
            if let Some(cap) = cap {
                while self.bins.len() > cap {
                    self.bins.pop_front();
                    self.first += 1;
                }
            }
        }
        if let Some(b) = self.bins.get_mut((idx - self.first) as usize) {
            b.merge(bin);
        }
    }

    fn get(&self, idx: i64) -> Option<&Summary> {
        if idx < self.first {
            return None;
        }
        self.bins.get((idx - self.first) as usize)
    }
}

/// Summaries of one series at every power-of-two resolution; see the module docs.
#[derive(Clone, Debug)]
pub struct Pyramid {
    base_ns: i64,
    /// `base_ns == 1 << shift` when the base is a power of two (the usual case): bin indexes
    /// are then a shift instead of a division.
    shift: Option<u32>,
    cap: Option<usize>,
    levels: Vec<Level>,
    /// Scratch runs reused between inserts: (absolute index, bin).
    runs: Vec<(i64, Summary)>,
    newest_ns: Option<i64>,
    oldest_ns: Option<i64>,
}

impl Pyramid {
    /// Keeps at most `bins_per_level` bins per level: memory is bounded whatever runs.
    pub fn ring(base_ns: i64, bins_per_level: usize) -> Self {
        Self::new(base_ns, Some(bins_per_level.max(2)))
    }

    /// Keeps every bin (for a recording loaded whole).
    pub fn unbounded(base_ns: i64) -> Self {
        Self::new(base_ns, None)
    }

    fn new(base_ns: i64, cap: Option<usize>) -> Self {
        let base_ns = base_ns.max(1);
        Pyramid {
            base_ns,
            shift: (base_ns.count_ones() == 1).then(|| base_ns.trailing_zeros()),
            cap,
            levels: vec![Level::default(); LEVELS],
            runs: Vec::new(),
            newest_ns: None,
            oldest_ns: None,
        }
    }

    pub fn base_ns(&self) -> i64 {
        self.base_ns
    }

    /// Width of a level-`k` bin.
    pub fn bin_ns(&self, level: usize) -> i64 {
        // Saturating: the base of a recording that spans centuries is large (a damaged trace).
        self.base_ns.saturating_mul(1 << level.min(LEVELS - 1))
    }

    /// Start time of the newest sample added.
    pub fn newest_ns(&self) -> Option<i64> {
        self.newest_ns
    }

    pub fn oldest_ns(&self) -> Option<i64> {
        self.oldest_ns
    }

    /// Adds samples (`[start_ns[i], end_ns[i])`, `values[i]`), best in time order; non-finite
    /// values are skipped. Cost: about two bin updates per sample plus a few per level.
    pub fn add_samples(
        &mut self,
        start_ns: &[i64],
        end_ns: &[i64],
        values: impl IntoIterator<Item = f64>,
    ) {
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let base = self.base_ns;
        let shift = self.shift;
        for ((&t, &e), v) in start_ns.iter().zip(end_ns).zip(values) {
            if !v.is_finite() {
                continue;
            }
            let dur_ns = e.saturating_sub(t);
            lo = lo.min(t);
            hi = hi.max(t);
            // An arithmetic shift floors like div_euclid.
            let idx = match shift {
                Some(s) => t >> s,
                None => t.div_euclid(base),
            };
            match runs.last_mut() {
                Some((i, b)) if *i == idx => b.add(v, dur_ns),
                _ => runs.push((idx, Summary::of(v, dur_ns))),
            }
        }
        if lo <= hi {
            self.newest_ns = Some(self.newest_ns.map_or(hi, |n| n.max(hi)));
            self.oldest_ns = Some(self.oldest_ns.map_or(lo, |n| n.min(lo)));
        }
        for level in 0..LEVELS {
            if runs.is_empty() {
                break;
            }
            let cap = self.cap;
            for (idx, bin) in &runs {
                self.levels[level].add(*idx, bin, cap);
            }
            // Coalesce runs for the next level (indexes halve; arithmetic shift floors).
            let mut w = 0;
            for r in 0..runs.len() {
                let (idx, bin) = runs[r];
                let up = idx >> 1;
                if w > 0 && runs[w - 1].0 == up {
                    runs[w - 1].1.merge(&bin);
                } else {
                    runs[w] = (up, bin);
                    w += 1;
                }
            }
            runs.truncate(w);
        }
        self.runs = runs;
    }

    /// The finest level whose bins tile `[t0_ns, t0_ns + cols·col_ns)` exactly, and still hold
    /// that window (a ring forgets old fine bins first).
    fn level_for(&self, t0_ns: i64, col_ns: i64) -> usize {
        let mut best = 0;
        for k in 0..LEVELS {
            let w = self.bin_ns(k);
            if col_ns % w != 0 || t0_ns.rem_euclid(w) != 0 {
                break;
            }
            best = k;
        }
        // Prefer the coarsest exact level: fewest reads. If a ring no longer holds the start of
        // the window at that level, no coarser level is exact either; use what is there.
        best
    }

    /// Fills `out` with `cols` buckets of `col_ns` from `t0_ns`. Exact when `t0_ns` and `col_ns`
    /// are multiples of `base_ns` (see [`Pyramid::aligned`]); otherwise each bin is counted in
    /// the column holding its start.
    pub fn query(&self, t0_ns: i64, col_ns: i64, cols: usize, out: &mut Vec<Summary>) {
        out.clear();
        out.resize(cols, Summary::EMPTY);
        if col_ns <= 0 || cols == 0 {
            return;
        }
        let k = self.level_for(t0_ns, col_ns);
        let w = self.bin_ns(k);
        let level = &self.levels[k];
        if level.bins.is_empty() {
            return;
        }
        let end_ns = t0_ns.saturating_add(col_ns.saturating_mul(cols as i64));
        let lo = t0_ns.div_euclid(w).max(level.first);
        let hi = (end_ns - 1).div_euclid(w).min(level.end() - 1);
        let mut idx = lo;
        while idx <= hi {
            if let Some(b) = level.get(idx)
                && !b.is_empty()
            {
                let c = (idx.saturating_mul(w).saturating_sub(t0_ns)).div_euclid(col_ns);
                if let Some(slot) = usize::try_from(c).ok().and_then(|c| out.get_mut(c)) {
                    slot.merge(b);
                }
            }
            idx += 1;
        }
    }

    /// The aggregate of everything in `[from_ns, to_ns)` at base resolution or coarser.
    pub fn total(&self, from_ns: i64, to_ns: i64) -> Summary {
        let mut out = Vec::with_capacity(1);
        let w = self.base_ns;
        let from = from_ns.div_euclid(w) * w;
        let to = (to_ns + w - 1).div_euclid(w) * w;
        self.query(from, (to - from).max(w), 1, &mut out);
        out.first().copied().unwrap_or(Summary::EMPTY)
    }

    /// Bins held, over all levels (for memory accounting).
    pub fn bins_held(&self) -> usize {
        self.levels.iter().map(|l| l.bins.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bins_merge_and_report_values() {
        let mut b = Summary::EMPTY;
        assert_eq!(Agg::Mean.of(&b), None);
        b.add(1.0, 10);
        b.add(3.0, 10);
        assert_eq!(Agg::Mean.of(&b), Some(2.0));
        assert_eq!(Agg::Max.of(&b), Some(3.0));
    }

    #[test]
    fn a_bucket_mean_weights_samples_by_their_time() {
        // A full 100 ns sample of 10 and one cut short to 20 ns (at a drop) of 40: the short
        // one counts for its 20 ns, (1000 + 800) / 120 = 15, not (10 + 40) / 2.
        let b = bucket_samples(&[0, 100], &[100, 120], &[10.0, 40.0], 0, 1000, 1);
        assert_eq!(Agg::Mean.of(&b[0]), Some(15.0));
        let mut p = Pyramid::unbounded(1024);
        p.add_samples(&[0, 100], &[100, 120], [10.0, 40.0]);
        assert_eq!(Agg::Mean.of(&p.total(0, 1024)), Some(15.0));
        // Samples without duration have no mean; the bucket shows their maximum.
        let b = bucket_samples(&[5, 6], &[5, 6], &[1.0, 2.0], 0, 1000, 1);
        assert_eq!(Agg::Mean.of(&b[0]), Some(2.0));
    }

    #[test]
    fn ring_memory_is_bounded() {
        let mut p = Pyramid::ring(1024, 64);
        for i in 0..100_000i64 {
            p.add_samples(&[i * 100], &[i * 100 + 100], [1.0]);
        }
        assert!(p.bins_held() <= 64 * LEVELS);
        let mut out = Vec::new();
        // The newest 16 base bins are still there, exact.
        let t0 = (100_000 * 100 / 1024 - 16) * 1024;
        p.query(t0, 1024, 16, &mut out);
        assert!(out.iter().all(|b| !b.is_empty() && b.dur_ns > 0));
    }

    /// Samples sorted by start: starts, ends (1 to 5000 ns later) and integer values.
    fn samples() -> impl Strategy<Value = (Vec<i64>, Vec<i64>, Vec<f64>)> {
        prop::collection::vec((0i64..2_000_000, 1i64..5000, -1000i32..1000), 0..400).prop_map(
            |mut v| {
                v.sort_by_key(|p| p.0);
                (
                    v.iter().map(|p| p.0).collect(),
                    v.iter().map(|p| p.0 + p.1).collect(),
                    v.iter().map(|p| f64::from(p.2)).collect(),
                )
            },
        )
    }

    /// Time of the samples starting in `[lo, hi)`.
    fn time_in(t: &[i64], e: &[i64], lo: i64, hi: i64) -> i64 {
        t.iter()
            .zip(e)
            .filter(|(s, _)| **s >= lo && **s < hi)
            .map(|(s, e)| e - s)
            .sum()
    }

    proptest! {
        /// Every sample inside the window lands in exactly one bucket, and none outside does:
        /// each bucket holds the time of exactly the samples starting in it.
        #[test]
        fn every_sample_lands_in_exactly_one_bucket(
            (t, e, v) in samples(), t0 in -100_000i64..1_000_000, w in 1i64..50_000,
            n in 1usize..200,
        ) {
            let buckets = bucket_samples(&t, &e, &v, t0, w, n);
            let inside = time_in(&t, &e, t0, t0 + w * n as i64);
            prop_assert_eq!(buckets.iter().map(|b| b.dur_ns).sum::<i64>(), inside);
            for (i, b) in buckets.iter().enumerate() {
                let lo = t0 + w * i as i64;
                prop_assert_eq!(b.dur_ns, time_in(&t, &e, lo, lo + w));
                let own = t.iter().filter(|&&s| s >= lo && s < lo + w).count();
                prop_assert_eq!(b.is_empty(), own == 0);
            }
        }

        /// The pyramid gives the reference buckets exactly (integer values and times keep sums
        /// exact), for any aligned window, column width and insertion batching, in a ring or
        /// not.
        #[test]
        fn pyramid_matches_reference(
            (t, e, v) in samples(), shift in 0u32..6, m in 1i64..4, start in 0i64..64,
            n in 1usize..300, split in 0usize..400, ring in any::<bool>(),
        ) {
            let base = 1024;
            let col = m * (base << shift);
            let t0 = start * (base << shift);
            let mut p = if ring { Pyramid::ring(base, 4096) } else { Pyramid::unbounded(base) };
            let split = split.min(t.len());
            p.add_samples(&t[..split], &e[..split], v[..split].iter().copied());
            p.add_samples(&t[split..], &e[split..], v[split..].iter().copied());
            let mut got = Vec::new();
            p.query(t0, col, n, &mut got);
            let want = bucket_samples(&t, &e, &v, t0, col, n);
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.dur_ns, w.dur_ns);
                prop_assert_eq!(Agg::Mean.of(g), Agg::Mean.of(w));
                prop_assert_eq!(Agg::Max.of(g), Agg::Max.of(w));
                if !w.is_empty() {
                    prop_assert_eq!(g.min, w.min);
                }
            }
        }

        /// Bucket means are exact: Σ value × time / Σ time of exactly the samples in the
        /// bucket.
        #[test]
        fn bucket_means_are_exact(
            (t, e, v) in samples(), w in 1i64..100_000, n in 1usize..100,
        ) {
            let buckets = bucket_samples(&t, &e, &v, 0, w, n);
            for (i, b) in buckets.iter().enumerate() {
                let lo = w * i as i64;
                let own: Vec<(f64, i64)> = t.iter().zip(&e).zip(&v)
                    .filter(|((s, _), _)| **s >= lo && **s < lo + w)
                    .map(|((s, e), x)| (*x, e - s)).collect();
                let dur: i64 = own.iter().map(|o| o.1).sum();
                let want = (!own.is_empty())
                    .then(|| own.iter().map(|(x, d)| x * *d as f64).sum::<f64>() / dur as f64);
                prop_assert_eq!(b.mean(), want);
            }
        }
    }
}
