//! The level-of-detail pyramid of one device's samples: summaries of blocks of samples, and
//! blocks of blocks, so that a view of any width costs about one summary per pixel column.
//!
//! Level 0 holds one [`Summary`] per block of at most [`BASE_BLOCK`] consecutive samples (a block
//! also ends at a hole in time, so level-0 blocks never span a drop); level `k + 1` holds one per
//! [`FANOUT`] consecutive level-`k` blocks. Each summary keeps the exact minimum and maximum and
//! the time-weighted sum (value × sample duration) and the time of its samples, so min and max are
//! exact at every level and a mean over whole blocks is exact to single precision. The pyramid
//! stores a summary in 16 bytes ([`Packed`]: four `f32`, the sums rounded once as a block is
//! closed, about 1 part in 10⁷); queries merge in double precision ([`Summary`]).
//!
//! The pyramid is built while the samples stream in ([`DevicePyramid::push`]); a level's last,
//! incomplete group of children is not summarised yet, and queries read those children from the
//! level below instead ([`DevicePyramid::visit`]), so a pyramid that is still loading is usable
//! and a finished one needs no finishing step.
//!
//! Raw samples are not kept here: they live in tiles of the trace loaded on demand
//! ([`crate::data`]); queries take them as a [`RawSeries`] where the view needs single samples.
//! A loaded tile carries a pyramid of its own with blocks of [`FINE_BLOCK`] samples
//! ([`RawSeries::build_fine`]), so that between "a level-0 block per column" and "a sample per
//! column" a frame still reads about one summary per column instead of every sample in view.

/// Samples per level-0 block, at most.
pub const BASE_BLOCK: usize = 256;
/// Children per block above level 0.
pub const FANOUT: usize = 8;
/// Samples per level-0 block of a loaded tile's own pyramid.
pub const FINE_BLOCK: usize = 8;

/// The summary the pyramid's queries return: shared with the terminal heatmap, so both show the
/// same time-weighted means.
pub use cufall_trace::model::Summary;

/// A [`Summary`] as the pyramid stores it: 16 bytes instead of 32, the sums in single precision
/// (min and max of `f32` samples are exact in `f32`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Packed {
    pub min: f32,
    pub max: f32,
    weighted_sum: f32,
    dur_ns: f32,
}

impl From<&Summary> for Packed {
    /// Rounds the sums to single precision (by design: see the module docs); min and max come
    /// from `f32` samples, so they are exact in `f32`.
    fn from(s: &Summary) -> Packed {
        Packed {
            min: s.min as f32,
            max: s.max as f32,
            weighted_sum: s.weighted_sum as f32,
            dur_ns: s.dur_ns as f32,
        }
    }
}

impl Packed {
    pub fn get(&self) -> Summary {
        Summary {
            min: f64::from(self.min),
            max: f64::from(self.max),
            weighted_sum: f64::from(self.weighted_sum),
            // A stored time is an `f32` made from a whole number of nanoseconds, so it is whole
            // already: no rounding call.
            dur_ns: self.dur_ns as i64,
        }
    }
}

/// Consecutive raw samples of one device, sorted by start: `values[m][i]` is metric `m` of
/// sample `i` (NaN where the trace had no value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSeries {
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    pub values: Vec<Vec<f32>>,
    /// These samples' own pyramid (blocks of [`FINE_BLOCK`]), once [`RawSeries::build_fine`]
    /// has run.
    pub fine: Option<Box<DevicePyramid>>,
}

impl RawSeries {
    pub fn new(metrics: usize) -> RawSeries {
        RawSeries {
            start_ns: Vec::new(),
            end_ns: Vec::new(),
            values: vec![Vec::new(); metrics],
            fine: None,
        }
    }

    /// Builds the pyramid of these samples with blocks of [`FINE_BLOCK`] (a block ends at a
    /// gap longer than `hole_ns`, as in the device's pyramid).
    pub fn build_fine(&mut self, hole_ns: i64) {
        let mut p = DevicePyramid::with_base(self.values.len(), hole_ns, FINE_BLOCK);
        let mut row = vec![0f32; self.values.len()];
        for i in 0..self.len() {
            for (m, col) in self.values.iter().enumerate() {
                row[m] = col[i];
            }
            p.push(self.start_ns[i], self.end_ns[i], &row);
        }
        p.flush();
        self.fine = Some(Box::new(p));
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Indices of the samples overlapping `[t0, t1)`.
    pub fn overlapping(&self, t0: i64, t1: i64) -> std::ops::Range<usize> {
        let lo = self.end_ns.partition_point(|e| *e <= t0);
        let hi = self.start_ns.partition_point(|s| *s < t1);
        lo..hi.max(lo)
    }

    /// Bytes held, for the cache's budget.
    pub fn bytes(&self) -> usize {
        self.len() * (16 + 4 * self.values.len()) + self.fine.as_ref().map_or(0, |f| f.bytes())
    }
}

/// One level of the pyramid.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Level {
    /// First sample start and last sample end of each block.
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// `stats[m][b]`: metric `m` over block `b`.
    pub stats: Vec<Vec<Packed>>,
}

impl Level {
    fn new(metrics: usize) -> Level {
        Level {
            start_ns: Vec::new(),
            end_ns: Vec::new(),
            stats: vec![Vec::new(); metrics],
        }
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Metric `m` over block `b`.
    pub fn summary(&self, m: usize, b: usize) -> Summary {
        self.stats[m][b].get()
    }

    /// Mean block duration, holes included.
    fn mean_block_ns(&self) -> f64 {
        match (self.start_ns.first(), self.end_ns.last()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / self.len() as f64,
            _ => 0.0,
        }
    }
}

/// A block a query visits: its level, time span and index in the level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Visit<'a> {
    pub level: usize,
    pub start_ns: i64,
    pub end_ns: i64,
    /// One summary per metric.
    pub level_ref: &'a Level,
    pub index: usize,
}

/// The pyramid of one device.
#[derive(Clone, Debug, PartialEq)]
pub struct DevicePyramid {
    metrics: usize,
    /// Samples per level-0 block, at most.
    base: usize,
    /// Samples closer than this after the previous one's end are contiguous.
    hole_ns: i64,
    pub levels: Vec<Level>,
    open: Option<OpenBlock>,
    samples: u64,
    last_end_ns: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
struct OpenBlock {
    start_ns: i64,
    end_ns: i64,
    n: usize,
    stats: Vec<Summary>,
}

impl DevicePyramid {
    /// An empty pyramid of `metrics` series; a sample starting more than `hole_ns` after the
    /// previous sample's end starts a new level-0 block.
    pub fn new(metrics: usize, hole_ns: i64) -> DevicePyramid {
        DevicePyramid::with_base(metrics, hole_ns, BASE_BLOCK)
    }

    /// [`DevicePyramid::new`] with level-0 blocks of at most `base` samples.
    pub fn with_base(metrics: usize, hole_ns: i64, base: usize) -> DevicePyramid {
        DevicePyramid {
            metrics,
            base: base.max(1),
            hole_ns: hole_ns.max(0),
            levels: vec![Level::new(metrics)],
            open: None,
            samples: 0,
            last_end_ns: None,
        }
    }

    pub fn metrics(&self) -> usize {
        self.metrics
    }

    /// Samples pushed so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Bytes held by the summaries.
    pub fn bytes(&self) -> usize {
        self.levels
            .iter()
            .map(|l| l.len() * (16 + self.metrics * std::mem::size_of::<Packed>()))
            .sum()
    }

    /// Appends one sample (samples must come in start order); `values` has one entry per metric.
    pub fn push(&mut self, start_ns: i64, end_ns: i64, values: &[f32]) {
        debug_assert_eq!(values.len(), self.metrics);
        let contiguous = self
            .last_end_ns
            .is_some_and(|e| start_ns <= e.saturating_add(self.hole_ns));
        if !contiguous || self.open.as_ref().is_some_and(|b| b.n >= self.base) {
            self.close_open();
        }
        let dur = (end_ns - start_ns).max(0);
        let block = self.open.get_or_insert_with(|| OpenBlock {
            start_ns,
            end_ns,
            n: 0,
            stats: vec![Summary::EMPTY; values.len()],
        });
        block.end_ns = block.end_ns.max(end_ns);
        block.n += 1;
        for (s, v) in block.stats.iter_mut().zip(values) {
            s.merge(&Summary::of(f64::from(*v), dur));
        }
        self.samples += 1;
        self.last_end_ns = Some(self.last_end_ns.map_or(end_ns, |e| e.max(end_ns)));
    }

    /// Reserves the blocks that `samples` contiguous samples fill at every level, so that a
    /// pyramid built to its known size grows without the spare half that doubling leaves (holes
    /// add blocks beyond the estimate; those grow as usual).
    pub fn reserve_for(&mut self, samples: u64) {
        let mut blocks = (samples as usize).div_ceil(self.base);
        let mut level = 0;
        while blocks > 0 {
            if self.levels.len() == level {
                self.levels.push(Level::new(self.metrics));
            }
            let l = &mut self.levels[level];
            let more = blocks.saturating_sub(l.len());
            // A count the memory cannot hold (a damaged index) reserves nothing: the
            // levels then grow as samples come.
            let _ = l.start_ns.try_reserve_exact(more);
            let _ = l.end_ns.try_reserve_exact(more);
            for col in &mut l.stats {
                let _ = col.try_reserve_exact(more);
            }
            blocks /= FANOUT;
            level += 1;
        }
    }

    /// Gives back capacity beyond the blocks held (once no more samples come).
    pub fn shrink_to_fit(&mut self) {
        while self.levels.len() > 1 && self.levels.last().is_some_and(Level::is_empty) {
            self.levels.pop();
        }
        for l in &mut self.levels {
            l.start_ns.shrink_to_fit();
            l.end_ns.shrink_to_fit();
            for col in &mut l.stats {
                col.shrink_to_fit();
            }
        }
    }

    /// Closes the block being filled, so that every pushed sample is visible to queries.
    pub fn flush(&mut self) {
        self.close_open();
    }

    fn close_open(&mut self) {
        let Some(b) = self.open.take() else {
            return;
        };
        let l0 = &mut self.levels[0];
        l0.start_ns.push(b.start_ns);
        l0.end_ns.push(b.end_ns);
        for (col, s) in l0.stats.iter_mut().zip(&b.stats) {
            col.push(Packed::from(s));
        }
        self.roll_up(0);
    }

    /// Summarises the last [`FANOUT`] blocks of `level` into `level + 1` when they complete a
    /// group, and so on upwards.
    fn roll_up(&mut self, mut level: usize) {
        loop {
            let n = self.levels[level].len();
            if !n.is_multiple_of(FANOUT) {
                return;
            }
            if self.levels.len() == level + 1 {
                self.levels.push(Level::new(self.metrics));
            }
            let (lower, upper) = self.levels.split_at_mut(level + 1);
            let child = &lower[level];
            let parent = &mut upper[0];
            let range = n - FANOUT..n;
            parent.start_ns.push(child.start_ns[range.start]);
            parent.end_ns.push(
                child.end_ns[range.clone()]
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0),
            );
            for (m, col) in parent.stats.iter_mut().enumerate() {
                let mut s = Summary::EMPTY;
                for c in &child.stats[m][range.clone()] {
                    s.merge(&c.get());
                }
                col.push(Packed::from(&s));
            }
            level += 1;
        }
    }

    /// The coarsest level whose blocks are on average no longer than `ns`; `None` when even
    /// level 0 blocks are longer (the caller then wants raw samples).
    pub fn level_for(&self, ns: f64) -> Option<usize> {
        let mut best = None;
        for (i, l) in self.levels.iter().enumerate() {
            if l.is_empty() {
                break;
            }
            if l.mean_block_ns() <= ns {
                best = Some(i);
            } else {
                break;
            }
        }
        best
    }

    /// Mean duration of a level-0 block (0 without blocks).
    pub fn base_block_ns(&self) -> f64 {
        self.levels[0].mean_block_ns()
    }

    /// Calls `f` for the blocks at `level` overlapping `[t0, t1)`, and for the time after the
    /// last complete group of each level, the blocks of the level below: every pushed sample is
    /// covered exactly once.
    pub fn visit(&self, level: usize, t0: i64, t1: i64, mut f: impl FnMut(Visit<'_>)) {
        let level = level.min(self.levels.len() - 1);
        let mut from = 0usize;
        for l in (0..=level).rev() {
            let lv = &self.levels[l];
            let lo = from + lv.end_ns[from..].partition_point(|e| *e <= t0);
            let hi = from + lv.start_ns[from..].partition_point(|s| *s < t1);
            for i in lo..hi {
                f(Visit {
                    level: l,
                    start_ns: lv.start_ns[i],
                    end_ns: lv.end_ns[i],
                    level_ref: lv,
                    index: i,
                });
            }
            from = lv.len() * FANOUT;
            if l > 0 && from > self.levels[l - 1].len() {
                from = self.levels[l - 1].len();
            }
        }
    }

    /// Per pixel column `c` (time `[t0 + c·px, t0 + (c+1)·px)`) the summary of metric `m`, from
    /// the coarsest blocks no wider than a column, or from `raw` samples when blocks are wider
    /// and `raw` covers the columns. A summary wider than a column lends each column its min and
    /// max and the column's share of its time.
    pub fn columns(
        &self,
        m: usize,
        t0: i64,
        px_ns: f64,
        ncols: usize,
        raw: Option<&[&RawSeries]>,
    ) -> Vec<Summary> {
        let mut out = vec![Summary::EMPTY; ncols];
        if ncols == 0 || px_ns <= 0.0 || m >= self.metrics {
            return out;
        }
        let t1 = t0 + (px_ns * ncols as f64).ceil() as i64;
        // Column bounds are whole nanoseconds, computed once: every lookup uses the same ones,
        // and a block costs integer comparisons, not a division and a rounding call.
        let edges: Vec<i64> = (0..=ncols)
            .map(|c| t0 + (c as f64 * px_ns) as i64)
            .collect();
        // Blocks come in start order: the column of the last one is where the next one's
        // search starts.
        let mut cursor = 0usize;
        let mut add = |s: i64, e: i64, sum: &Summary| {
            let span = (e - s).max(1);
            let end = s + span;
            let mut c = cursor;
            if edges[c] > s || edges[(c + 2).min(ncols)] <= s {
                // Far from the last block (or behind it): start from the estimate.
                c = (((s - t0) as f64 / px_ns) as usize).min(ncols - 1);
                while c > 0 && edges[c] > s {
                    c -= 1;
                }
            }
            while c < ncols && edges[c + 1] <= s {
                c += 1;
            }
            if c >= ncols {
                cursor = ncols - 1;
                return;
            }
            cursor = c;
            // Most blocks lie inside one column: all of the block goes to it (not one that
            // starts before the first column: only its share of time is in view).
            if s >= edges[c] && end <= edges[c + 1] {
                out[c].merge(sum);
                return;
            }
            while c < ncols && edges[c] < end {
                let overlap = end.min(edges[c + 1]) - s.max(edges[c]);
                if overlap > 0 {
                    out[c].merge_part(sum, overlap as f64 / span as f64);
                }
                c += 1;
            }
        };
        match (self.level_for(px_ns), raw) {
            (None, Some(raw)) => {
                for raw in raw {
                    // The tile's own pyramid where its blocks fit a column; single samples only
                    // where even those are wider.
                    let fine = raw
                        .fine
                        .as_deref()
                        .and_then(|f| Some((f, f.level_for(px_ns)?)));
                    if let Some((f, level)) = fine {
                        f.visit(level, t0, t1, |v| {
                            add(v.start_ns, v.end_ns, &v.level_ref.summary(m, v.index));
                        });
                        continue;
                    }
                    for i in raw.overlapping(t0, t1) {
                        let s = raw.start_ns[i];
                        let e = raw.end_ns[i];
                        add(
                            s,
                            e,
                            &Summary::of(f64::from(raw.values[m][i]), (e - s).max(0)),
                        );
                    }
                }
            }
            (level, _) => self.visit(level.unwrap_or(0), t0, t1, |v| {
                add(v.start_ns, v.end_ns, &v.level_ref.summary(m, v.index));
            }),
        }
        out
    }

    /// Metric `m` over `[t0, t1)`: whole blocks from the coarsest level that fits, the samples
    /// of blocks cut by the edges from `raw` (clipped to the range, time-weighted by their
    /// overlap). Returns the summary and whether it is exact: without `raw` for an edge block, its
    /// share of time is used and its min and max are those of the whole block.
    pub fn aggregate(
        &self,
        m: usize,
        t0: i64,
        t1: i64,
        raw: &dyn Fn(i64, i64) -> Option<RawSlice>,
    ) -> (Summary, bool) {
        let mut total = Summary::EMPTY;
        let mut exact = true;
        if m >= self.metrics || t1 <= t0 {
            return (total, exact);
        }
        let top = self.levels.len() - 1;
        let mut from = 0usize;
        for l in (0..=top).rev() {
            let lv = &self.levels[l];
            let end = lv.len();
            self.aggregate_range(l, from..end, m, t0, t1, raw, &mut total, &mut exact);
            from = (end * FANOUT).min(if l > 0 { self.levels[l - 1].len() } else { 0 });
        }
        (total, exact)
    }

    #[allow(clippy::too_many_arguments)]
    fn aggregate_range(
        &self,
        l: usize,
        range: std::ops::Range<usize>,
        m: usize,
        t0: i64,
        t1: i64,
        raw: &dyn Fn(i64, i64) -> Option<RawSlice>,
        total: &mut Summary,
        exact: &mut bool,
    ) {
        let lv = &self.levels[l];
        let from = range.start;
        let lo = from + lv.end_ns[range.clone()].partition_point(|e| *e <= t0);
        let hi = from + lv.start_ns[range.clone()].partition_point(|s| *s < t1);
        for i in lo..hi {
            let (s, e) = (lv.start_ns[i], lv.end_ns[i]);
            if s >= t0 && e <= t1 {
                total.merge(&lv.summary(m, i));
            } else if l > 0 {
                let c0 = i * FANOUT;
                let c1 = ((i + 1) * FANOUT).min(self.levels[l - 1].len());
                self.aggregate_range(l - 1, c0..c1, m, t0, t1, raw, total, exact);
            } else if let Some(slice) = raw(s.max(t0), e.min(t1)) {
                for k in 0..slice.start_ns.len() {
                    let (a, b) = (slice.start_ns[k], slice.end_ns[k]);
                    let overlap = b.min(t1) - a.max(t0);
                    if overlap > 0 || (a == b && a >= t0 && a < t1) {
                        total.merge(&Summary::of(f64::from(slice.values[k]), overlap.max(0)));
                    }
                }
            } else {
                *exact = false;
                let overlap = e.min(t1) - s.max(t0);
                total.merge_part(&lv.summary(m, i), overlap as f64 / (e - s).max(1) as f64);
            }
        }
    }
}

/// Raw samples of one metric handed to [`DevicePyramid::aggregate`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSlice {
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    pub values: Vec<f32>,
}

impl RawSlice {
    /// Samples of metric `m` of `raw` overlapping `[t0, t1)`.
    pub fn from_series(raw: &RawSeries, m: usize, t0: i64, t1: i64) -> RawSlice {
        let r = raw.overlapping(t0, t1);
        RawSlice {
            start_ns: raw.start_ns[r.clone()].to_vec(),
            end_ns: raw.end_ns[r.clone()].to_vec(),
            values: raw.values[m][r].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Samples of 10 ns each, with holes where `gaps[i]` is true.
    fn samples(values: &[f32], gaps: &[bool]) -> RawSeries {
        let mut raw = RawSeries::new(1);
        let mut t = 1000i64;
        for (i, v) in values.iter().enumerate() {
            if gaps.get(i).copied().unwrap_or(false) {
                t += 55;
            }
            raw.start_ns.push(t);
            raw.end_ns.push(t + 10);
            raw.values[0].push(*v);
            t += 10;
        }
        raw
    }

    fn build(raw: &RawSeries) -> DevicePyramid {
        let mut p = DevicePyramid::new(1, 5);
        for i in 0..raw.len() {
            p.push(raw.start_ns[i], raw.end_ns[i], &[raw.values[0][i]]);
        }
        p.flush();
        p
    }

    /// Min, max, Σ value × time, time and count of the samples overlapping `[t0, t1)`.
    fn brute(raw: &RawSeries, t0: i64, t1: i64) -> (f64, f64, f64, i64, u32) {
        let (mut mn, mut mx, mut ws, mut d, mut n) = (f32::INFINITY, f32::NEG_INFINITY, 0.0, 0, 0);
        for i in 0..raw.len() {
            let (s, e) = (raw.start_ns[i], raw.end_ns[i]);
            let ov = e.min(t1) - s.max(t0);
            if ov > 0 {
                let v = raw.values[0][i];
                mn = mn.min(v);
                mx = mx.max(v);
                ws += f64::from(v) * ov as f64;
                d += ov;
                n += 1;
            }
        }
        (f64::from(mn), f64::from(mx), ws, d, n)
    }

    #[test]
    fn a_reserved_pyramid_is_the_same_pyramid() {
        let values: Vec<f32> = (0..5000).map(|i| (i % 97) as f32).collect();
        let raw = samples(&values, &[]);
        let plain = build(&raw);
        let mut p = DevicePyramid::new(1, 5);
        p.reserve_for(values.len() as u64);
        for i in 0..raw.len() {
            p.push(raw.start_ns[i], raw.end_ns[i], &[raw.values[0][i]]);
        }
        p.flush();
        p.shrink_to_fit();
        assert_eq!(p, plain);
    }

    #[test]
    fn a_block_starting_before_the_view_lends_only_its_share_of_time() {
        // One block of ten 10 ns samples, [1000, 1100); the view starts halfway into it.
        let values = vec![1.0f32; 10];
        let p = build(&samples(&values, &[]));
        assert_eq!(p.levels[0].len(), 1);
        let cols = p.columns(0, 1050, 100.0, 1, None);
        assert_eq!(cols[0].dur_ns, 50);
        assert_eq!(cols[0].mean(), Some(1.0));
    }

    #[test]
    fn blocks_end_at_holes_and_at_the_base_size() {
        let values: Vec<f32> = (0..600).map(|i| i as f32).collect();
        let mut gaps = vec![false; 600];
        gaps[100] = true;
        let p = build(&samples(&values, &gaps));
        let l0 = &p.levels[0];
        // 0..100, then 100..356, 356..600.
        assert_eq!(l0.len(), 3);
        // Every sample lasts 10 ns.
        assert_eq!(l0.summary(0, 0).dur_ns, 100 * 10);
        assert_eq!(l0.summary(0, 1).dur_ns, BASE_BLOCK as i64 * 10);
        assert_eq!(
            l0.summary(0, 2).dur_ns,
            (600 - 100 - BASE_BLOCK as i64) * 10
        );
        assert_eq!(l0.summary(0, 1).min, 100.0);
    }

    #[test]
    fn a_loading_pyramid_covers_every_sample_once() {
        let values: Vec<f32> = (0..(BASE_BLOCK * FANOUT * 3 + 17))
            .map(|i| (i % 7) as f32)
            .collect();
        let raw = samples(&values, &[]);
        let p = build(&raw);
        assert!(p.levels.len() >= 2);
        for level in 0..p.levels.len() {
            // Every sample lasts 10 ns: the time visited counts the samples.
            let mut ns = 0i64;
            p.visit(level, i64::MIN, i64::MAX, |v| {
                ns += v.level_ref.summary(0, v.index).dur_ns;
            });
            assert_eq!(ns, values.len() as i64 * 10, "level {level}");
        }
    }

    proptest! {
        /// Every block at every level holds the exact min and max of its samples, their time
        /// (exact here: small integers are exact in `f32`) and their time-weighted sum to
        /// single precision.
        #[test]
        fn block_summaries_match_brute_force(
            values in proptest::collection::vec(-1000.0f32..1000.0, 1..5000),
            gap_at in proptest::collection::vec(0usize..5000, 0..5),
        ) {
            let mut gaps = vec![false; values.len()];
            for g in gap_at { if g < gaps.len() { gaps[g] = true; } }
            let raw = samples(&values, &gaps);
            let p = build(&raw);
            for lv in &p.levels {
                for b in 0..lv.len() {
                    let (mn, mx, ws, d, n) = brute(&raw, lv.start_ns[b], lv.end_ns[b]);
                    let s = lv.summary(0, b);
                    prop_assert!(n > 0);
                    prop_assert_eq!(s.min, mn);
                    prop_assert_eq!(s.max, mx);
                    prop_assert_eq!(s.dur_ns, d);
                    // Rounded to f32 once per level: a few parts in 10⁷ of the largest term.
                    let scale = raw.values[0].iter().map(|v| f64::from(v.abs())).fold(1.0, f64::max) * d as f64;
                    prop_assert!((s.weighted_sum - ws).abs() <= 1e-6 * scale, "{} vs {ws}", s.weighted_sum);
                }
            }
        }

        /// A range's summary from the pyramid (raw samples at the edges) equals a scan of every
        /// sample clipped to the range.
        #[test]
        fn range_aggregate_matches_brute_force(
            values in proptest::collection::vec(-1000.0f32..1000.0, 1..6000),
            gap_at in proptest::collection::vec(0usize..6000, 0..4),
            a in 0i64..70_000,
            len in 1i64..70_000,
        ) {
            let mut gaps = vec![false; values.len()];
            for g in gap_at { if g < gaps.len() { gaps[g] = true; } }
            let raw = samples(&values, &gaps);
            let p = build(&raw);
            let (t0, t1) = (1000 + a, 1000 + a + len);
            let (s, exact) = p.aggregate(0, t0, t1, &|x, y| Some(RawSlice::from_series(&raw, 0, x, y)));
            prop_assert!(exact);
            let (mn, mx, ws, d, n) = brute(&raw, t0, t1);
            prop_assert_eq!(s.is_empty(), n == 0);
            prop_assert_eq!(s.dur_ns, d);
            if n > 0 {
                prop_assert_eq!(s.min, mn);
                prop_assert_eq!(s.max, mx);
                let scale = raw.values[0].iter().map(|v| f64::from(v.abs())).fold(1.0, f64::max) * d as f64;
                prop_assert!((s.weighted_sum - ws).abs() <= 1e-6 * scale, "{} vs {ws}", s.weighted_sum);
            }
            // Without raw samples, min and max still bound the true ones.
            let (s2, _) = p.aggregate(0, t0, t1, &|_, _| None);
            if n > 0 {
                prop_assert!(s2.min <= mn && s2.max >= mx);
            }
        }

        /// Pixel columns at any zoom hold every sample they overlap: min and max are exact
        /// from raw samples and bound the true ones from blocks.
        #[test]
        fn columns_bound_and_match_brute_force(
            values in proptest::collection::vec(-1000.0f32..1000.0, 1..4000),
            a in 0i64..40_000,
            px in 1.0f64..3000.0,
            ncols in 1usize..64,
        ) {
            let raw = samples(&values, &[]);
            let p = build(&raw);
            let t0 = 1000 + a;
            let from_blocks = p.columns(0, t0, px, ncols, None);
            let from_raw = p.columns(0, t0, px, ncols, Some(&[&raw]));
            for c in 0..ncols {
                let cs = t0 + (c as f64 * px) as i64;
                let ce = t0 + ((c + 1) as f64 * px) as i64;
                let (mn, mx, _, _, n) = brute(&raw, cs, ce);
                if n > 0 && ce > cs {
                    prop_assert!(from_blocks[c].min <= mn && from_blocks[c].max >= mx);
                    if p.level_for(px).is_none() {
                        prop_assert_eq!(from_raw[c].min, mn);
                        prop_assert_eq!(from_raw[c].max, mx);
                    }
                }
            }
        }

        /// With the tile's own pyramid the columns still bound every sample, are exact where
        /// its blocks are wider than a column, and lose no time.
        #[test]
        fn fine_columns_bound_and_match_brute_force(
            values in proptest::collection::vec(-1000.0f32..1000.0, 1..4000),
            gaps in proptest::collection::vec(any::<bool>(), 0..4000),
            a in 0i64..40_000,
            px in 1.0f64..3000.0,
            ncols in 1usize..64,
        ) {
            let mut raw = samples(&values, &gaps);
            let p = build(&raw);
            raw.build_fine(5);
            let fine = raw.fine.as_deref().expect("built");
            prop_assert_eq!(fine.samples(), values.len() as u64);
            let t0 = 1000 + a;
            let cols = p.columns(0, t0, px, ncols, Some(&[&raw]));
            let t1 = t0 + (px * ncols as f64) as i64;
            for (c, col) in cols.iter().enumerate() {
                let cs = t0 + (c as f64 * px) as i64;
                let ce = t0 + ((c + 1) as f64 * px) as i64;
                let (mn, mx, _, _, n) = brute(&raw, cs, ce);
                if n > 0 && ce > cs && p.level_for(px).is_none() {
                    prop_assert!(col.min <= mn && col.max >= mx);
                    if fine.level_for(px).is_none() {
                        prop_assert_eq!(col.min, mn);
                        prop_assert_eq!(col.max, mx);
                    }
                }
            }
            // Whole samples inside the columns: their time is all there.
            if p.level_for(px).is_none() {
                let inside: i64 = (0..raw.len())
                    .filter(|&i| raw.start_ns[i] >= t0 && raw.end_ns[i] <= t1)
                    .map(|i| raw.end_ns[i] - raw.start_ns[i])
                    .sum();
                let total: i64 = cols.iter().map(|c| c.dur_ns).sum();
                prop_assert!(total + 16 * ncols as i64 >= inside, "{total} < {inside}");
            }
        }
    }
}
