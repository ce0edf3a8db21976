//! Time spans sorted by start (the kernels of a device, the ranges of an NVTX lane) and what a
//! frame needs of them at any zoom: which pixel columns something runs in, the spans wide
//! enough to draw one by one, and the count and busy time of each run of narrower ones. A frame
//! costs about two binary searches per pixel column that has something in it, not a visit to
//! every span in view: a whole hour of a kernel every 5 µs draws as fast as a second of it.
//!
//! Spans may overlap (kernels of several streams share a device's lane). The running maximum of
//! the ends, kept by index ([`Spans::reach`]), says whether any span started before a time is
//! still running there, so "is column `c` occupied" is one lookup; the maximum per block of
//! [`BLOCK`] spans finds the longest span starting in a crowded column.

use std::ops::Range;

/// `slice.partition_point(pred)` by a galloping search from the start: a frame steps through
/// sorted items column by column, and a search that starts near its answer stays in a few cache
/// lines, where a binary search over the whole remaining list misses the cache at every step
/// (27 ms a frame over an hour of kernels).
pub fn gallop<T>(slice: &[T], pred: impl Fn(&T) -> bool) -> usize {
    if slice.first().is_none_or(|x| !pred(x)) {
        return 0;
    }
    // pred(slice[lo]) holds; find a bound past the answer.
    let (mut lo, mut step) = (0usize, 1usize);
    while lo + step < slice.len() && pred(&slice[lo + step]) {
        lo += step;
        step *= 2;
    }
    let end = (lo + step).min(slice.len());
    lo + 1 + slice[lo + 1..end].partition_point(pred)
}

/// The first index in `from..hi` where `ok` fails (`hi` if none), crossing each whole block of
/// `block` indexes (aligned to multiples of `block`) for which `block_ok(k)` (block `k`) says
/// that `ok` holds throughout: a search over millions of items costs a step per block.
pub fn first_failing(
    from: usize,
    hi: usize,
    block: usize,
    block_ok: impl Fn(usize) -> bool,
    ok: impl Fn(usize) -> bool,
) -> usize {
    let mut i = from;
    while i < hi {
        if i.is_multiple_of(block) && i + block <= hi && block_ok(i / block) {
            i += block;
            continue;
        }
        if !ok(i) {
            return i;
        }
        i += 1;
    }
    hi
}

/// `x.floor() as i64` without a call: on the baseline x86-64 target `f64::floor` is a library
/// call, and a frame floors a few times per pixel column of every lane.
#[inline]
pub fn floor_i64(x: f64) -> i64 {
    let t = x as i64;
    if (t as f64) > x {
        t.saturating_sub(1)
    } else {
        t
    }
}

/// Spans per block of the block maxima.
pub const BLOCK: usize = 64;

/// Spans in start order with the indexes that make frames cheap. 28 bytes per span.
#[derive(Debug, Default, Clone)]
pub struct Spans {
    start: Vec<i64>,
    end: Vec<i64>,
    /// `reach[i]`: the index of the span with the latest end among `0..=i`.
    reach: Vec<u32>,
    /// `busy[i]`: Σ durations of spans `0..i` (`len() + 1` entries).
    busy: Vec<i64>,
    /// Per block of [`BLOCK`] spans, the index of the one with the latest end.
    block_reach: Vec<u32>,
    /// Per block, the longest time before one of its spans during which nothing runs
    /// ([`Spans::idle_before`]), and its longest span: a frame crosses a block in one step
    /// where the first is under a pixel column and the second under the width from which a
    /// span is drawn on its own.
    block_idle: Vec<i64>,
    block_dur: Vec<i64>,
}

/// Part of a frame's picture of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// A span at least the minimum width: drawn one by one, with its name.
    Span(usize),
    /// Pixel columns `cols.0..cols.1` in which something runs (a wide span drawn over them
    /// hides part of them): spans `spans.0..spans.1` started in them, `narrow` of those are
    /// narrower than the minimum, `busy_ns` is the sum of their durations.
    Run {
        cols: (usize, usize),
        spans: (usize, usize),
        narrow: usize,
        busy_ns: i64,
    },
}

impl Spans {
    /// Spans from `(start, end)` pairs in start order (a span ending before it starts is
    /// taken as instantaneous).
    pub fn from_sorted(pairs: impl IntoIterator<Item = (i64, i64)>) -> Spans {
        let pairs = pairs.into_iter();
        let n = pairs.size_hint().0;
        let mut s = Spans {
            start: Vec::with_capacity(n),
            end: Vec::with_capacity(n),
            reach: Vec::with_capacity(n),
            busy: Vec::with_capacity(n + 1),
            block_reach: Vec::with_capacity(n.div_ceil(BLOCK)),
            block_idle: Vec::with_capacity(n.div_ceil(BLOCK)),
            block_dur: Vec::with_capacity(n.div_ceil(BLOCK)),
        };
        s.busy.push(0);
        for (a, b) in pairs {
            s.push(a, b.max(a));
        }
        s
    }

    fn push(&mut self, start: i64, end: i64) {
        let i = self.start.len();
        debug_assert!(
            self.start.last().is_none_or(|p| *p <= start),
            "spans not in start order"
        );
        self.start.push(start);
        self.end.push(end);
        let idle = self.idle_before(i);
        let r = match self.reach.last() {
            Some(&p) if self.end[p as usize] >= end => p,
            _ => i as u32,
        };
        self.reach.push(r);
        let total = self.busy.last().copied().unwrap_or(0);
        self.busy.push(total + (end - start));
        if i.is_multiple_of(BLOCK) {
            self.block_reach.push(i as u32);
            self.block_idle.push(idle);
            self.block_dur.push(end - start);
        } else {
            if let Some(b) = self.block_reach.last_mut()
                && self.end[*b as usize] < end
            {
                *b = i as u32;
            }
            if let Some(b) = self.block_idle.last_mut() {
                *b = (*b).max(idle);
            }
            if let Some(b) = self.block_dur.last_mut() {
                *b = (*b).max(end - start);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start.is_empty()
    }

    pub fn start(&self, i: usize) -> i64 {
        self.start[i]
    }

    pub fn end(&self, i: usize) -> i64 {
        self.end[i]
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.start.capacity() * 8
            + self.end.capacity() * 8
            + self.reach.capacity() * 4
            + self.busy.capacity() * 8
            + self.block_reach.capacity() * 4
            + (self.block_idle.capacity() + self.block_dur.capacity()) * 8
    }

    /// The latest end among spans `0..=i`.
    fn reach_end(&self, i: usize) -> i64 {
        self.end[self.reach[i] as usize]
    }

    /// How long nothing runs before span `i` starts (negative where an earlier span still
    /// runs; unbounded for the first).
    fn idle_before(&self, i: usize) -> i64 {
        if i == 0 {
            i64::MAX
        } else {
            self.start[i] - self.reach_end(i - 1)
        }
    }

    /// The first span in `from..hi` that is at least `min_w` long or has at least `min_idle`
    /// of nothing running before it (`hi` if none), crossing whole blocks where their maxima
    /// allow.
    fn dense_until(&self, from: usize, hi: usize, min_w: i64, min_idle: i64) -> usize {
        first_failing(
            from,
            hi,
            BLOCK,
            |k| self.block_idle[k] < min_idle && self.block_dur[k] < min_w,
            |i| self.idle_before(i) < min_idle && self.end[i] - self.start[i] < min_w,
        )
    }

    /// Spans that may overlap `[t0, t1)`: every one that does is inside; the range starts at
    /// the first span after which no earlier one reaches past `t0`, and ends at the first span
    /// starting at `t1` or later.
    pub fn overlapping(&self, t0: i64, t1: i64) -> Range<usize> {
        let lo = self.reach.partition_point(|r| self.end[*r as usize] <= t0);
        let hi = self.start.partition_point(|s| *s < t1);
        lo..hi.max(lo)
    }

    /// Σ durations of spans `r`.
    pub fn busy(&self, r: Range<usize>) -> i64 {
        self.busy[r.end] - self.busy[r.start]
    }

    /// The first span in `from..hi` starting at `t` or later (`hi` if none).
    fn first_from(&self, from: usize, hi: usize, t: i64) -> usize {
        from + gallop(&self.start[from.min(hi)..hi], |s| *s < t)
    }

    /// The span with the latest end among `r` (not empty).
    fn longest_reach(&self, r: Range<usize>) -> usize {
        let mut best = r.start;
        let mut take = |i: usize| {
            if self.end[i] > self.end[best] {
                best = i;
            }
        };
        let mut i = r.start;
        while i < r.end {
            if i.is_multiple_of(BLOCK) && i + BLOCK <= r.end {
                take(self.block_reach[i / BLOCK] as usize);
                i += BLOCK;
            } else {
                take(i);
                i += 1;
            }
        }
        best
    }

    /// The picture of columns `0..ncols`, column `c` covering
    /// `[t0_ns + c·px_ns, t0_ns + (c+1)·px_ns)` (times on the recording's own clock, fractional
    /// nanoseconds), spans of at least `min_cols` columns drawn one by one. Each run comes before
    /// the wide spans found in it, so that drawing in order paints them over it.
    pub fn pieces(&self, t0_ns: f64, px_ns: f64, ncols: usize, min_cols: f64) -> Vec<Piece> {
        self.pieces_with(t0_ns, px_ns, ncols, min_cols, true)
    }

    /// [`Spans::pieces`]; `cross` lets a run cross many columns in one step where its spans are
    /// dense and narrow (the tests compare with the column-by-column walk).
    fn pieces_with(
        &self,
        t0: f64,
        px: f64,
        ncols: usize,
        min_cols: f64,
        cross: bool,
    ) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.is_empty() || ncols == 0 || px <= 0.0 || !px.is_finite() {
            return out;
        }
        let edge = |c: usize| floor_i64(t0 + c as f64 * px);
        let min_w = min_cols * px;
        let wide = |i: usize| (self.end[i] - self.start[i]) as f64 >= min_w;
        let Range { start: lo, end: hi } = self.overlapping(edge(0), edge(ncols));
        // An instant (a span of no duration) at the view's first nanosecond is in the view, as
        // it is in every column (`occupied` counts it); `overlapping` leaves out whatever ends
        // there.
        let lo = lo.min(self.reach[..lo].partition_point(|r| self.end[*r as usize] < edge(0)));
        if lo >= hi {
            return out;
        }
        // `as usize` floors a non-negative value and takes a negative one to 0.
        let col_of = |t: i64| (((t as f64 - t0) / px) as usize).min(ncols);
        // First span starting in the view.
        let mut next = lo + self.start[lo..hi].partition_point(|s| *s < edge(0));
        let mut run = Run::default();
        // Spans started before the view that run into it: the one reaching furthest is drawn.
        if next > lo {
            let j = self.reach[next - 1] as usize;
            if self.end[j] > edge(0) && wide(j) {
                out.push(Piece::Span(j));
                run.pushed += 1;
            }
        }
        let mut c = if next > lo || next >= hi {
            0
        } else {
            col_of(self.start[next])
        };
        // A span shorter than this is narrow (whole nanoseconds, rounded down: never more than
        // `min_w`); a column is never narrower than `min_idle`, so where nothing runs for less
        // than that between spans every column is occupied.
        let min_w_ns = floor_i64(min_w);
        let min_idle = floor_i64(px);
        while c < ncols {
            if cross && run.open.is_some() {
                // Inside a run: spans `next..f` are narrow and close together, so every column
                // up to the one where span `f - 1` starts is occupied and draws nothing of its
                // own; cross them in one step.
                let f = self.dense_until(next, hi, min_w_ns, min_idle);
                if f > next + 1 {
                    let last = self.start[f - 1];
                    let mut cn = col_of(last);
                    while cn > c && edge(cn) > last {
                        cn -= 1;
                    }
                    while cn < ncols && edge(cn + 1) <= last {
                        cn += 1;
                    }
                    if cn > c {
                        let to = edge(cn);
                        next += self.start[next..f].partition_point(|s| *s < to);
                        c = cn;
                        continue;
                    }
                }
            }
            let (a, b) = (edge(c), edge(c + 1));
            let after = self.first_from(next, hi, b);
            // Something starts here (an instant counts), or runs into it.
            let occupied = after > next || (after > 0 && self.reach_end(after - 1) > a);
            if occupied && run.open.is_none() {
                run.open = Some((c, next));
            }
            // Wide spans starting in this column: each one if few, else the longest.
            let here = after - next;
            let found = |i: usize, run: &mut Run, out: &mut Vec<Piece>| {
                if wide(i) {
                    out.push(Piece::Span(i));
                    run.pushed += 1;
                    run.wide += 1;
                }
            };
            if (1..=8).contains(&here) {
                for i in next..after {
                    found(i, &mut run, &mut out);
                }
            } else if here > 8 && self.reach_end(after - 1) as f64 >= a as f64 + min_w {
                found(self.longest_reach(next..after), &mut run, &mut out);
            }
            next = after;
            if occupied {
                c += 1;
                continue;
            }
            run.close(self, &mut out, c, next);
            if next >= hi {
                break;
            }
            c = (c + 1).max(col_of(self.start[next]));
        }
        run.close(self, &mut out, c.min(ncols), next);
        out
    }
}

/// The run being built by [`Spans::pieces`].
#[derive(Default)]
struct Run {
    /// First column and first span of the open run.
    open: Option<(usize, usize)>,
    /// Pieces pushed since the run opened (wide spans), which go after it.
    pushed: usize,
    /// Wide spans among the run's own.
    wide: usize,
}

impl Run {
    fn close(&mut self, s: &Spans, out: &mut Vec<Piece>, end_col: usize, end_span: usize) {
        if let Some((c0, s0)) = self.open.take() {
            let at = out.len() - self.pushed;
            out.insert(
                at,
                Piece::Run {
                    cols: (c0, end_col.max(c0 + 1)),
                    spans: (s0, end_span),
                    narrow: (end_span - s0).saturating_sub(self.wide),
                    busy_ns: s.busy(s0..end_span),
                },
            );
        }
        self.pushed = 0;
        self.wide = 0;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn floor_without_a_call_is_floor() {
        for x in [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            2.999,
            -2.001,
            1e15 + 0.5,
            -1e15 - 0.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(floor_i64(x), x.floor() as i64, "{x}");
        }
    }

    fn spans_of(mut v: Vec<(i64, i64)>) -> (Spans, Vec<(i64, i64)>) {
        for p in &mut v {
            p.1 += p.0;
        }
        v.sort_by_key(|p| p.0);
        (Spans::from_sorted(v.iter().copied()), v)
    }

    /// Brute force: columns in which some span runs.
    fn occupied(v: &[(i64, i64)], t0: f64, px: f64, ncols: usize) -> Vec<bool> {
        let edge = |c: usize| (t0 + c as f64 * px).floor() as i64;
        (0..ncols)
            .map(|c| {
                v.iter()
                    .any(|&(s, e)| s < edge(c + 1) && (e > edge(c) || s >= edge(c)))
            })
            .collect()
    }

    fn check(v: Vec<(i64, i64)>, t0: f64, px: f64, ncols: usize, min_cols: f64, disjoint: bool) {
        let (s, v) = spans_of(v);
        let pieces = s.pieces(t0, px, ncols, min_cols);
        let edge = |c: usize| (t0 + c as f64 * px).floor() as i64;
        let mut cols = vec![false; ncols];
        let mut drawn = std::collections::BTreeSet::new();
        let mut started = 0;
        let mut last_col = 0;
        for p in &pieces {
            match *p {
                Piece::Run {
                    cols: (a, b),
                    spans: (x, y),
                    narrow,
                    busy_ns,
                } => {
                    assert!(a < b && b <= ncols && a >= last_col, "{p:?}");
                    last_col = b;
                    for c in cols.iter_mut().take(b).skip(a) {
                        *c = true;
                    }
                    started += y - x;
                    assert!(narrow <= y - x);
                    let brute: i64 = v[x..y].iter().map(|(a, b)| b - a).sum();
                    assert_eq!(busy_ns, brute);
                    for (i, sp) in v[x..y].iter().enumerate() {
                        assert!(
                            sp.0 >= edge(a) && sp.0 < edge(b),
                            "span {} outside its run",
                            x + i
                        );
                    }
                }
                Piece::Span(i) => {
                    let (a, b) = v[i];
                    assert!(
                        (b - a) as f64 >= min_cols * px,
                        "narrow span {i} drawn alone"
                    );
                    assert!(a < edge(ncols) && b > edge(0), "span {i} outside the view");
                    assert!(drawn.insert(i), "span {i} drawn twice");
                }
            }
        }
        assert_eq!(cols, occupied(&v, t0, px, ncols), "occupied columns");
        let in_view = v
            .iter()
            .filter(|p| p.0 >= edge(0) && p.0 < edge(ncols))
            .count();
        assert_eq!(started, in_view, "spans started in the view");
        if disjoint {
            for (i, &(a, b)) in v.iter().enumerate() {
                if (b - a) as f64 >= min_cols * px && a < edge(ncols) && b > edge(0) {
                    assert!(drawn.contains(&i), "wide span {i} not drawn");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn overlapping_spans_match_a_brute_force_scan(
            v in proptest::collection::vec((0i64..100_000, 0i64..3_000), 0..600),
            t0 in -1000.0f64..90_000.0,
            px in 1.0f64..400.0,
            ncols in 1usize..300,
            min_cols in 0.5f64..6.0,
        ) {
            check(v, t0, px, ncols, min_cols, false);
        }

        #[test]
        fn every_wide_span_of_a_lane_is_drawn(
            gaps in proptest::collection::vec((0i64..500, 1i64..4_000), 0..600),
            t0 in -1000.0f64..200_000.0,
            px in 1.0f64..400.0,
            ncols in 1usize..300,
            min_cols in 0.5f64..6.0,
        ) {
            // Disjoint spans, as in an NVTX lane: each starts after the previous one ends.
            let mut at = 0;
            let v: Vec<(i64, i64)> = gaps.iter().map(|&(gap, dur)| {
                let s = at + gap;
                at = s + dur;
                (s, dur)
            }).collect();
            check(v, t0, px, ncols, min_cols, true);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn crossing_dense_runs_draws_what_the_column_walk_draws(
            spans in proptest::collection::vec((0i64..40, 0i64..60), 0..3000),
            wide in proptest::collection::vec((0usize..3000, 100i64..20_000), 0..6),
            t0 in -2000.0f64..60_000.0,
            px in 0.5f64..300.0,
            ncols in 1usize..400,
            min_cols in 0.5f64..6.0,
        ) {
            // Dense short spans (often overlapping) with a few long ones among them.
            let mut at = 0;
            let mut v: Vec<(i64, i64)> = spans.iter().map(|&(gap, dur)| {
                at += gap;
                (at, dur)
            }).collect();
            for (i, dur) in wide {
                if let Some(p) = v.get_mut(i) {
                    p.1 = dur;
                }
            }
            let (s, v) = spans_of(v);
            prop_assert_eq!(
                s.pieces_with(t0, px, ncols, min_cols, true),
                s.pieces_with(t0, px, ncols, min_cols, false)
            );
            check(v.iter().map(|&(a, b)| (a, b - a)).collect(), t0, px, ncols, min_cols, false);
        }

        #[test]
        fn gallop_is_a_partition_point(mut v in proptest::collection::vec(0i64..1000, 0..300), t in -10i64..1010) {
            v.sort_unstable();
            prop_assert_eq!(gallop(&v, |x| *x < t), v.partition_point(|x| *x < t));
        }
    }

    #[test]
    fn a_million_short_spans_cost_columns_not_spans() {
        let (s, _) = spans_of((0..1_000_000).map(|i| (i * 10, 5)).collect());
        let p = s.pieces(0.0, 10_000_000.0 / 1000.0, 1000, 2.0);
        assert_eq!(p.len(), 1, "one run over the whole view");
        let Piece::Run {
            cols,
            spans,
            narrow,
            busy_ns,
        } = p[0]
        else {
            panic!()
        };
        assert_eq!(
            (cols, spans, narrow, busy_ns),
            ((0, 1000), (0, 1_000_000), 1_000_000, 5_000_000)
        );
    }

    #[test]
    fn a_long_span_over_short_ones_is_drawn_over_their_run() {
        let mut v: Vec<(i64, i64)> = (0..1000).map(|i| (i * 100, 10)).collect();
        v.push((5_000, 50_000));
        let (s, v) = spans_of(v);
        let p = s.pieces(0.0, 100.0, 1000, 2.0);
        let long = v.iter().position(|p| p.1 - p.0 == 50_000).unwrap();
        let at = p.iter().position(|x| *x == Piece::Span(long)).unwrap();
        assert!(matches!(p[at - 1], Piece::Run { .. }), "{p:?}");
        // Started before the view, it is still drawn.
        let p = s.pieces(20_000.0, 100.0, 100, 2.0);
        assert!(p.contains(&Piece::Span(long)), "{p:?}");
    }
}
