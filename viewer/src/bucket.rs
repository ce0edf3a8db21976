//! Time bucketing: how samples become the cells of a heatmap, and the pyramid that makes drawing
//! cost independent of the number of raw samples.
//!
//! A sample belongs to the bucket that contains its `start_ns`; buckets are half-open
//! `[t0 + i·w, t0 + (i+1)·w)`. [`bucket_samples`] is the plain definition (used by tests and as
//! the reference); [`Pyramid`] gives the same answer without touching raw samples: it keeps, for
//! one series, bins of `base_ns`, `2·base_ns`, `4·base_ns`, ... (level `k` bins are
//! `base_ns << k` wide and aligned to multiples of their width on the epoch). A query whose
//! start is aligned to a level's bin width and whose column width is a multiple of it is exact
//! and costs `columns × (column width / bin width)` bin reads, whatever the sample rate.
//!
//! Live views keep a bounded ring of bins per level ([`Pyramid::ring`]); browsing a recording
//! keeps every bin ([`Pyramid::unbounded`]).

use std::collections::VecDeque;

/// How the samples of one bucket become one value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Agg {
    /// The mean of the samples in the bucket.
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
}

/// Sum, count, min and max of the samples of one bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    pub sum: f64,
    pub count: u64,
    pub min: f64,
    pub max: f64,
}

impl Default for Bin {
    fn default() -> Self {
        Bin::EMPTY
    }
}

impl Bin {
    pub const EMPTY: Bin = Bin {
        sum: 0.0,
        count: 0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    pub fn of(v: f64) -> Bin {
        Bin {
            sum: v,
            count: 1,
            min: v,
            max: v,
        }
    }

    pub fn add(&mut self, v: f64) {
        self.sum += v;
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Bin) {
        self.sum += o.sum;
        self.count += o.count;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The bucket's value under `agg`, `None` for an empty bucket.
    pub fn value(&self, agg: Agg) -> Option<f64> {
        match agg {
            Agg::Mean => self.mean(),
            Agg::Max => (self.count > 0).then_some(self.max),
        }
    }
}

/// The reference bucketing: `n` buckets of `width_ns` from `t0_ns`; samples outside are
/// ignored; non-finite values are skipped.
pub fn bucket_samples(
    start_ns: &[i64],
    values: &[f64],
    t0_ns: i64,
    width_ns: i64,
    n: usize,
) -> Vec<Bin> {
    let mut out = vec![Bin::EMPTY; n];
    if width_ns <= 0 {
        return out;
    }
    for (&t, &v) in start_ns.iter().zip(values) {
        if !v.is_finite() || t < t0_ns {
            continue;
        }
        let i = (t - t0_ns) / width_ns;
        if let Some(b) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
            b.add(v);
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
    bins: VecDeque<Bin>,
}

impl Level {
    fn end(&self) -> i64 {
        self.first + self.bins.len() as i64
    }

    /// Adds `bin` to the bin at absolute index `idx`. In a ring (`cap` set) indexes more than
    /// `cap` bins behind the newest are too old and ignored; a jump far ahead restarts the ring.
    fn add(&mut self, idx: i64, bin: &Bin, cap: Option<usize>) {
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
            self.bins.push_back(Bin::EMPTY);
        }
        if idx < self.first {
            let need = (self.first - idx) as u64;
            if let Some(cap) = cap
                && need + self.bins.len() as u64 > cap as u64
            {
                return;
            }
            for _ in 0..need {
                self.bins.push_front(Bin::EMPTY);
            }
            self.first = idx;
        } else if idx >= self.end() {
            let need = (idx - self.end() + 1) as u64;
            match cap {
                Some(cap) if need >= cap as u64 => {
                    self.bins.clear();
                    self.first = idx;
                    self.bins.push_back(Bin::EMPTY);
                }
                _ => {
                    for _ in 0..need {
                        self.bins.push_back(Bin::EMPTY);
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

    fn get(&self, idx: i64) -> Option<&Bin> {
        if idx < self.first {
            return None;
        }
        self.bins.get((idx - self.first) as usize)
    }
}

/// Min/max/sum bins of one series at every power-of-two resolution; see the module docs.
#[derive(Clone, Debug)]
pub struct Pyramid {
    base_ns: i64,
    /// `base_ns == 1 << shift` when the base is a power of two (the usual case): bin indexes
    /// are then a shift instead of a division.
    shift: Option<u32>,
    cap: Option<usize>,
    levels: Vec<Level>,
    /// Scratch runs reused between inserts: (absolute index, bin).
    runs: Vec<(i64, Bin)>,
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

    /// Adds samples (`start_ns[i]`, `values[i]`), best in time order; non-finite values are
    /// skipped. Cost: about two bin updates per sample plus a few per level.
    pub fn add_samples(&mut self, start_ns: &[i64], values: impl IntoIterator<Item = f64>) {
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let base = self.base_ns;
        let shift = self.shift;
        for (&t, v) in start_ns.iter().zip(values) {
            if !v.is_finite() {
                continue;
            }
            lo = lo.min(t);
            hi = hi.max(t);
            // An arithmetic shift floors like div_euclid.
            let idx = match shift {
                Some(s) => t >> s,
                None => t.div_euclid(base),
            };
            match runs.last_mut() {
                Some((i, b)) if *i == idx => b.add(v),
                _ => runs.push((idx, Bin::of(v))),
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
    pub fn query(&self, t0_ns: i64, col_ns: i64, cols: usize, out: &mut Vec<Bin>) {
        out.clear();
        out.resize(cols, Bin::EMPTY);
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
    pub fn total(&self, from_ns: i64, to_ns: i64) -> Bin {
        let mut out = Vec::with_capacity(1);
        let w = self.base_ns;
        let from = from_ns.div_euclid(w) * w;
        let to = (to_ns + w - 1).div_euclid(w) * w;
        self.query(from, (to - from).max(w), 1, &mut out);
        out.first().copied().unwrap_or(Bin::EMPTY)
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
        let mut b = Bin::EMPTY;
        assert_eq!(b.value(Agg::Mean), None);
        b.add(1.0);
        b.add(3.0);
        assert_eq!(b.value(Agg::Mean), Some(2.0));
        assert_eq!(b.value(Agg::Max), Some(3.0));
    }

    #[test]
    fn ring_memory_is_bounded() {
        let mut p = Pyramid::ring(1024, 64);
        for i in 0..100_000i64 {
            p.add_samples(&[i * 100], [1.0]);
        }
        assert!(p.bins_held() <= 64 * LEVELS);
        let mut out = Vec::new();
        // The newest 16 base bins are still there, exact.
        let t0 = (100_000 * 100 / 1024 - 16) * 1024;
        p.query(t0, 1024, 16, &mut out);
        assert!(out.iter().all(|b| b.count > 0));
    }

    fn samples() -> impl Strategy<Value = (Vec<i64>, Vec<f64>)> {
        prop::collection::vec((0i64..2_000_000, -1000i32..1000), 0..400).prop_map(|mut v| {
            v.sort_by_key(|p| p.0);
            (
                v.iter().map(|p| p.0).collect(),
                v.iter().map(|p| f64::from(p.1)).collect(),
            )
        })
    }

    proptest! {
        /// Every sample inside the window lands in exactly one bucket, and none outside does.
        #[test]
        fn every_sample_lands_in_exactly_one_bucket(
            (t, v) in samples(), t0 in -100_000i64..1_000_000, w in 1i64..50_000, n in 1usize..200,
        ) {
            let buckets = bucket_samples(&t, &v, t0, w, n);
            let inside = t.iter().filter(|&&s| s >= t0 && s < t0 + w * n as i64).count() as u64;
            prop_assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), inside);
            for (i, b) in buckets.iter().enumerate() {
                let lo = t0 + w * i as i64;
                let own = t.iter().filter(|&&s| s >= lo && s < lo + w).count() as u64;
                prop_assert_eq!(b.count, own);
            }
        }

        /// The pyramid gives the reference buckets exactly (integer values keep sums exact),
        /// for any aligned window, column width and insertion batching, in a ring or not.
        #[test]
        fn pyramid_matches_reference(
            (t, v) in samples(), shift in 0u32..6, m in 1i64..4, start in 0i64..64,
            n in 1usize..300, split in 0usize..400, ring in any::<bool>(),
        ) {
            let base = 1024;
            let col = m * (base << shift);
            let t0 = start * (base << shift);
            let mut p = if ring { Pyramid::ring(base, 4096) } else { Pyramid::unbounded(base) };
            let split = split.min(t.len());
            p.add_samples(&t[..split], v[..split].iter().copied());
            p.add_samples(&t[split..], v[split..].iter().copied());
            let mut got = Vec::new();
            p.query(t0, col, n, &mut got);
            let want = bucket_samples(&t, &v, t0, col, n);
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.count, w.count);
                prop_assert_eq!(g.value(Agg::Mean), w.value(Agg::Mean));
                prop_assert_eq!(g.value(Agg::Max), w.value(Agg::Max));
                if w.count > 0 {
                    prop_assert_eq!(g.min, w.min);
                }
            }
        }

        /// Bucket means are exact: sum/count of exactly the samples in the bucket.
        #[test]
        fn bucket_means_are_exact(
            (t, v) in samples(), w in 1i64..100_000, n in 1usize..100,
        ) {
            let buckets = bucket_samples(&t, &v, 0, w, n);
            for (i, b) in buckets.iter().enumerate() {
                let lo = w * i as i64;
                let own: Vec<f64> = t.iter().zip(&v)
                    .filter(|(s, _)| **s >= lo && **s < lo + w).map(|(_, x)| *x).collect();
                let want = (!own.is_empty()).then(|| own.iter().sum::<f64>() / own.len() as f64);
                prop_assert_eq!(b.mean(), want);
            }
        }
    }
}
