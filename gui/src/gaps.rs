//! Every idle gap of a recording, per device, in a compact form the timeline draws at any zoom
//! (runs of gaps narrower than a pixel found by binary and galloping search) and the pointer's
//! tooltip reads. Filled by the loader from the analysis report's gaps: each idle stretch's
//! pieces (cut where phases begin and end), so that a piece's tooltip names its own place.

use cufall_analysis::report::{GapPiece, GapRow};
use std::sync::Arc;

/// One device's idle gaps in start order, with what a frame needs to draw runs of them narrower
/// than a pixel without visiting each (their spans and a running sum of their durations) and what
/// the pointer's tooltip says of one. Every gap of the recording is here, in 36 bytes or so each;
/// the report itself lists only the longest.
#[derive(Debug, Default)]
pub struct DeviceGaps {
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// `dur_prefix[i]`: total duration of the first `i` gaps (one more entry than gaps).
    pub dur_prefix: Vec<i64>,
    /// Each gap's place, an index into `places`.
    place: Vec<u32>,
    places: Vec<Arc<str>>,
    /// Each gap's time with a kernel resident; empty when kernels were not captured.
    kernel_resident_ns: Vec<i64>,
    /// Per block of [`GAP_BLOCK`] gaps, the longest time between one of them and the gap
    /// before it (set by [`DeviceGaps::finish`]): a frame that merges gaps closer than a pixel
    /// crosses a block in one step where this is under a pixel.
    block_sep: Vec<i64>,
}

/// Gaps per block of [`DeviceGaps`]'s separations.
pub const GAP_BLOCK: usize = 64;

impl DeviceGaps {
    /// Adds the pieces of a stretch; stretches come in start order (as the report finds them),
    /// else [`DeviceGaps::finish`] sorts them.
    pub fn push(&mut self, g: &GapRow) {
        for p in &g.pieces {
            self.push_piece(p);
        }
    }

    fn push_piece(&mut self, g: &GapPiece) {
        if self.dur_prefix.is_empty() {
            self.dur_prefix.push(0);
        }
        self.start_ns.push(g.start_ns);
        self.end_ns.push(g.end_ns);
        let sum = self.dur_prefix.last().copied().unwrap_or(0) + g.duration_ns.get();
        self.dur_prefix.push(sum);
        // A place's gaps share one label: the last one's is the likely match.
        let id = match self.place.last() {
            Some(&last) if Arc::ptr_eq(&self.places[last as usize], &g.place) => last,
            _ => match self.places.iter().position(|p| **p == *g.place) {
                Some(i) => i as u32,
                None => {
                    self.places.push(g.place.clone());
                    (self.places.len() - 1) as u32
                }
            },
        };
        self.place.push(id);
        if let Some(k) = g.kernel_resident_ns {
            self.kernel_resident_ns.push(k.get());
        }
    }

    /// Sorts the gaps by start if they did not come in that order, and gives back spare capacity.
    pub fn finish(mut self) -> DeviceGaps {
        if !self.start_ns.is_sorted() {
            let mut order: Vec<usize> = (0..self.start_ns.len()).collect();
            order.sort_unstable_by_key(|i| self.start_ns[*i]);
            let pick = |v: &[i64]| order.iter().map(|i| v[*i]).collect::<Vec<i64>>();
            let durs: Vec<i64> = order
                .iter()
                .map(|i| self.end_ns[*i] - self.start_ns[*i])
                .collect();
            let start = pick(&self.start_ns);
            let end = pick(&self.end_ns);
            let kr = if self.kernel_resident_ns.len() == order.len() {
                pick(&self.kernel_resident_ns)
            } else {
                Vec::new()
            };
            let place = order.iter().map(|i| self.place[*i]).collect();
            self.dur_prefix = std::iter::once(0)
                .chain(durs.iter().scan(0i64, |acc, d| {
                    *acc += d;
                    Some(*acc)
                }))
                .collect();
            (
                self.start_ns,
                self.end_ns,
                self.kernel_resident_ns,
                self.place,
            ) = (start, end, kr, place);
        }
        self.index_separations();
        self.start_ns.shrink_to_fit();
        self.end_ns.shrink_to_fit();
        self.dur_prefix.shrink_to_fit();
        self.place.shrink_to_fit();
        self.kernel_resident_ns.shrink_to_fit();
        self
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Time from the end of gap `k - 1` to the start of gap `k` (unbounded for the first).
    fn separation(&self, k: usize) -> i64 {
        match k.checked_sub(1) {
            Some(p) => self.start_ns[k] - self.end_ns[p],
            None => i64::MAX,
        }
    }

    fn index_separations(&mut self) {
        self.block_sep = (0..self.len())
            .step_by(GAP_BLOCK)
            .map(|b| {
                (b..(b + GAP_BLOCK).min(self.len()))
                    .map(|k| self.separation(k))
                    .max()
                    .unwrap_or(i64::MIN)
            })
            .collect();
    }

    /// The first gap in `from..hi` that starts more than `max_sep` after the previous gap ends
    /// (`hi` if none): every gap before it continues a run of gaps that close together.
    /// Crosses whole blocks where their separations allow, so a run over a whole hour of gaps
    /// costs a step per block.
    pub fn close_run_until(&self, from: usize, hi: usize, max_sep: i64) -> usize {
        crate::spans::first_failing(
            from,
            hi,
            GAP_BLOCK,
            |b| self.block_sep.get(b).is_some_and(|s| *s <= max_sep),
            |k| self.separation(k) <= max_sep,
        )
    }

    /// Where gap `k` falls, as the report spells it.
    pub fn place(&self, k: usize) -> &str {
        self.place
            .get(k)
            .and_then(|p| self.places.get(*p as usize))
            .map_or("", |p| p)
    }

    /// Gap `k`'s time with a kernel resident; `None` when kernels were not captured.
    pub fn kernel_resident_ns(&self, k: usize) -> Option<i64> {
        self.kernel_resident_ns.get(k).copied()
    }

    pub fn duration_ns(&self, k: usize) -> i64 {
        self.end_ns[k] - self.start_ns[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::{DeviceId, Nanos};

    /// A stretch crossing three places is three gaps here, each with its own place and time.
    #[test]
    fn a_stretch_is_kept_as_its_pieces() {
        let piece = |start_ns: i64, end_ns: i64, place: &str| GapPiece {
            start_ns,
            end_ns,
            duration_ns: Nanos(end_ns - start_ns),
            place: place.into(),
            no_kernel_ns: Some(Nanos(end_ns - start_ns)),
            kernel_resident_ns: Some(Nanos::ZERO),
            host: None,
            host_frames: None,
        };
        let row = GapRow {
            device: DeviceId(0),
            start_ns: 100,
            end_ns: 400,
            offset_ns: Nanos::ZERO,
            duration_ns: Nanos(300),
            place: "verify → draft + draft + draft → verify".into(),
            no_kernel_ns: Some(Nanos(300)),
            kernel_resident_ns: Some(Nanos::ZERO),
            host: None,
            host_frames: None,
            pieces: vec![
                piece(100, 150, "verify → draft"),
                piece(150, 160, "draft"),
                piece(160, 400, "draft → verify"),
            ],
        };
        let mut g = DeviceGaps::default();
        g.push(&row);
        let g = g.finish();
        assert_eq!(g.len(), 3);
        assert_eq!(
            (0..3).map(|k| g.place(k)).collect::<Vec<_>>(),
            ["verify → draft", "draft", "draft → verify"]
        );
        assert_eq!((g.duration_ns(1), g.kernel_resident_ns(2)), (10, Some(0)));
        assert_eq!(g.dur_prefix.last(), Some(&300));
    }

    #[test]
    fn a_run_of_close_gaps_ends_where_a_gap_starts_too_far_after_the_previous() {
        // Gaps 10 ns long, mostly 5 ns apart, with a few wider separations.
        let mut g = DeviceGaps::default();
        let mut at = 0;
        for k in 0..1000i64 {
            at += if k % 97 == 0 || k == 500 { 50 } else { 5 };
            g.start_ns.push(at);
            at += 10;
            g.end_ns.push(at);
        }
        g = g.finish();
        let brute = |from: usize, hi: usize, max: i64| {
            (from..hi)
                .find(|&k| k == 0 || g.start_ns[k] - g.end_ns[k - 1] > max)
                .unwrap_or(hi)
        };
        for from in [0, 1, 63, 64, 65, 100, 127, 128, 490, 501, 999] {
            for hi in [from, from + 1, 200, 640, 1000] {
                for max in [4, 5, 49, 50, 1000] {
                    let hi = hi.clamp(from, 1000);
                    assert_eq!(
                        g.close_run_until(from, hi, max),
                        brute(from, hi, max),
                        "from {from} hi {hi} max {max}"
                    );
                }
            }
        }
    }
}
