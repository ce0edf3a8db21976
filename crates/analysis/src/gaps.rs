//! Idle gaps: merging the idle runs found by [`crate::samples::scan_samples`], cutting them
//! at drops (time without samples is never idle), cutting each idle stretch at every phase edge
//! (a range's start or end) into *parts*, each placed by its own interval (in a phase, or between
//! two), and splitting each part by kernel residency.
//!
//! A part lies inside one segment of the phases' timeline ([`crate::phases`]), so its place and
//! the phases covering it hold for all of it: a phase's gap time is never more than its time, and
//! the places' gap times add up to the gaps' total. Consecutive parts of one place make a
//! *piece* ([`Gap::pieces`]): what a place counts as one of its gaps.

use crate::phases::{Phases, Place};
use crate::samples::Fragment;
use cufall_trace::model::{ActivityKind, ApiCall, DeviceId, DropRecord, KernelRecord, Nanos};
use std::collections::BTreeMap;

/// One idle stretch of one device, cut at the phases' edges.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
    /// The stretch cut at every range boundary, in time order, end to end: at least one.
    pub parts: Vec<GapPart>,
}

/// The part of an idle stretch in one segment of the phases' timeline, or (as
/// [`Gap::pieces`] gives them) a run of consecutive parts with one place.
#[derive(Clone, Debug, PartialEq)]
pub struct GapPart {
    pub start_ns: i64,
    pub end_ns: i64,
    pub place: Place,
    /// The segment holding its start ([`Phases::segment_of`]).
    pub segment: usize,
    /// Time of the part with at least one kernel running on the device (`None`: kernels were
    /// not captured).
    pub kernel_resident_ns: Option<i64>,
    /// What the host was doing during the part, from the captured CUDA calls (`None`:
    /// `--capture api` was off).
    pub host: Option<HostTime>,
}

impl GapPart {
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Time without a kernel resident (`None`: kernels were not captured).
    pub fn no_kernel_ns(&self) -> Option<i64> {
        self.kernel_resident_ns
            .map(|k| self.duration_ns().saturating_sub(k))
    }

    /// Adds the next part (it starts where this one ends) to this one.
    fn extend(&mut self, next: &GapPart) {
        self.end_ns = next.end_ns;
        self.kernel_resident_ns = match (self.kernel_resident_ns, next.kernel_resident_ns) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        match (&mut self.host, &next.host) {
            (Some(h), Some(n)) => h.add(n),
            (h @ None, Some(n)) => *h = Some(*n),
            _ => {}
        }
    }
}

/// Time of a gap the profiled program's host threads spent in CUDA calls: waiting on the GPU
/// (synchronise, wait, query) or launching and copying. The rest of the gap the host was busy
/// elsewhere (CPU work, Python, I/O) or idle. Overlapping calls of several threads count once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostTime {
    pub in_sync_ns: Nanos,
    pub in_launch_ns: Nanos,
}

impl HostTime {
    pub fn add(&mut self, o: &HostTime) {
        self.in_sync_ns += o.in_sync_ns;
        self.in_launch_ns += o.in_launch_ns;
    }
}

/// The captured CUDA calls as two coverages: synchronising calls, and all calls.
pub struct HostCoverage {
    sync: KernelCoverage,
    any: KernelCoverage,
}

/// Host calls are one lane, not a GPU's: the interval union is keyed on this one key.
const HOST_LANE: DeviceId = DeviceId(0);

impl HostCoverage {
    /// `None` when the trace has no API calls (`--capture api` was off).
    pub fn build(calls: &[ApiCall]) -> Option<HostCoverage> {
        if calls.is_empty() {
            return None;
        }
        let waits = |c: &&ApiCall| {
            ["Synchronize", "Wait", "Query"]
                .iter()
                .any(|w| c.name.contains(w))
        };
        let union = |calls: &mut dyn Iterator<Item = &ApiCall>| {
            KernelCoverage::from_intervals(calls.map(|c| (HOST_LANE, c.start_ns, c.end_ns)))
        };
        Some(HostCoverage {
            sync: union(&mut calls.iter().filter(waits)),
            any: union(&mut calls.iter()),
        })
    }

    /// Time of `[start, end)` in synchronising calls, and in other calls outside those.
    pub fn split(&self, start: i64, end: i64) -> HostTime {
        let in_sync_ns = self.sync.covered_ns(HOST_LANE, start, end);
        HostTime {
            in_sync_ns: Nanos(in_sync_ns),
            in_launch_ns: Nanos(self.any.covered_ns(HOST_LANE, start, end) - in_sync_ns),
        }
    }
}

impl Gap {
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The parts, consecutive ones of one place merged: each a gap of its place.
    pub fn pieces(&self) -> Vec<GapPart> {
        let mut pieces: Vec<GapPart> = Vec::with_capacity(1);
        for p in &self.parts {
            match pieces.last_mut() {
                Some(last) if last.place == p.place => last.extend(p),
                _ => pieces.push(p.clone()),
            }
        }
        pieces
    }

    /// Time of the stretch with a kernel resident (`None`: kernels were not captured).
    pub fn kernel_resident_ns(&self) -> Option<i64> {
        self.parts
            .iter()
            .filter_map(|p| p.kernel_resident_ns)
            .reduce(i64::saturating_add)
    }

    /// Time of the stretch in CUDA calls (`None`: `--capture api` was off).
    pub fn host(&self) -> Option<HostTime> {
        self.parts.iter().filter_map(|p| p.host).reduce(|mut a, b| {
            a.add(&b);
            a
        })
    }
}

/// Merges idle fragments that touch in time (`hole` apart at most) per device, removes the
/// parts covered by drops, and yields the gaps at least `min_gap` long, by device and start.
/// The gaps are produced as they are read (one pass over the sorted fragments), never listed.
pub fn merge_fragments(
    mut fragments: Vec<Fragment>,
    drops: &[DropRecord],
    min_gap: Nanos,
    hole: Nanos,
) -> impl Iterator<Item = (DeviceId, i64, i64)> + use<> {
    let (min_gap_ns, hole_ns) = (min_gap.get(), hole.get());
    fragments.sort_unstable_by_key(|f| (f.device, f.start_ns, f.end_ns));
    let mut drops_by_device: BTreeMap<DeviceId, Vec<(i64, i64)>> = BTreeMap::new();
    for d in drops {
        drops_by_device
            .entry(d.device)
            .or_default()
            .push((d.start_ns, d.end_ns));
    }
    let mut fragments = fragments.into_iter().peekable();
    // A run of touching fragments, closed as the next fragment does not touch it.
    let runs = std::iter::from_fn(move || {
        let first = fragments.next()?;
        let (dev, start) = (first.device, first.start_ns);
        let mut end = first.end_ns;
        while let Some(f) = fragments.next_if(|f| f.device == dev && f.start_ns - end <= hole_ns) {
            end = end.max(f.end_ns);
        }
        Some((dev, start, end))
    });
    runs.flat_map(move |(dev, start, end)| {
        let mut pieces = vec![(start, end)];
        for (ds, de) in drops_by_device.get(&dev).map_or(&[][..], Vec::as_slice) {
            if *de <= start || *ds >= end {
                continue;
            }
            pieces = pieces
                .into_iter()
                .flat_map(|(s, e)| {
                    if *de <= s || *ds >= e {
                        vec![(s, e)]
                    } else {
                        let mut v = Vec::new();
                        if *ds > s {
                            v.push((s, *ds));
                        }
                        if *de < e {
                            v.push((*de, e));
                        }
                        v
                    }
                })
                .collect();
        }
        pieces
            .into_iter()
            .filter(move |(s, e)| e - s >= min_gap_ns)
            .map(move |(s, e)| (dev, s, e))
    })
}

/// Work that keeps a GPU busy: kernels, and CUDA graph launches recorded as one record
/// (`--capture graphs`). Copies and sets are not counted.
pub fn keeps_gpu_busy(kind: ActivityKind) -> bool {
    matches!(kind, ActivityKind::Kernel | ActivityKind::Graph)
}

/// Busy time of each device's kernels, as sorted disjoint intervals with prefix sums.
pub struct KernelCoverage {
    by_device: BTreeMap<DeviceId, DeviceCoverage>,
}

/// Disjoint sorted busy intervals and the prefix sums of their lengths.
struct DeviceCoverage {
    intervals: Vec<(i64, i64)>,
    prefix: Vec<i64>,
}

impl KernelCoverage {
    /// `None` when the trace has no kernel records at all (capture was off).
    pub fn build(kernels: &[KernelRecord]) -> Option<KernelCoverage> {
        if kernels.is_empty() {
            return None;
        }
        Some(KernelCoverage::from_intervals(
            kernels
                .iter()
                .filter(|k| keeps_gpu_busy(k.kind))
                .map(|k| (k.device, k.start_ns, k.end_ns)),
        ))
    }

    /// The union of `(key, start, end)` intervals, per key.
    pub fn from_intervals(intervals: impl Iterator<Item = (DeviceId, i64, i64)>) -> KernelCoverage {
        let mut b = CoverageBuilder::default();
        for (dev, s, e) in intervals {
            b.add(dev, s, e);
        }
        b.finish()
    }

    /// Time within `[start, end)` during which a kernel ran on `device`.
    pub fn covered_ns(&self, device: DeviceId, start: i64, end: i64) -> i64 {
        let Some(DeviceCoverage {
            intervals: iv,
            prefix,
        }) = self.by_device.get(&device)
        else {
            return 0;
        };
        // Intervals wholly inside, plus the clipped parts of the two at the edges.
        let lo = iv.partition_point(|(_, e)| *e <= start);
        let hi = iv.partition_point(|(s, _)| *s < end);
        if lo >= hi {
            return 0;
        }
        let mut total = prefix[hi].saturating_sub(prefix[lo]);
        let (s0, _) = iv[lo];
        if s0 < start {
            total = total.saturating_sub(start.saturating_sub(s0));
        }
        let (_, e1) = iv[hi - 1];
        if e1 > end {
            total = total.saturating_sub(e1.saturating_sub(end));
        }
        total.max(0)
    }
}

/// Collects busy intervals as they are read (a segment at a time) into one list per device,
/// then sorts and merges each in place: no copy of every interval is held beside the lists.
#[derive(Default)]
pub struct CoverageBuilder {
    lists: BTreeMap<DeviceId, Vec<(i64, i64)>>,
}

impl CoverageBuilder {
    pub fn add(&mut self, device: DeviceId, start: i64, end: i64) {
        self.lists
            .entry(device)
            .or_default()
            .push((start, end.max(start)));
    }

    pub fn finish(self) -> KernelCoverage {
        let mut by_device = BTreeMap::new();
        for (dev, mut list) in self.lists {
            list.sort_unstable();
            // Merge overlapping intervals in place: `w` is the last kept one.
            let mut w = 0usize;
            for i in 1..list.len() {
                let (s, e) = list[i];
                if s <= list[w].1 {
                    list[w].1 = list[w].1.max(e);
                } else {
                    w += 1;
                    list[w] = (s, e);
                }
            }
            list.truncate(if list.is_empty() { 0 } else { w + 1 });
            list.shrink_to_fit();
            let mut prefix = Vec::with_capacity(list.len() + 1);
            prefix.push(0i64);
            let mut acc = 0;
            // Timestamps come from a file: spans near i64's ends saturate, never overflow.
            for (s, e) in &list {
                acc = e.saturating_sub(*s).saturating_add(acc);
                prefix.push(acc);
            }
            by_device.insert(
                dev,
                DeviceCoverage {
                    intervals: list,
                    prefix,
                },
            );
        }
        KernelCoverage { by_device }
    }
}

/// The merged idle intervals as gaps, each cut at the phases' edges into parts with their
/// place, kernel residency and host time, built one at a time as they are taken.
pub fn gaps_of<'a>(
    merged: impl IntoIterator<Item = (DeviceId, i64, i64)> + 'a,
    phases: &'a Phases,
    kernels: Option<&'a KernelCoverage>,
    host: Option<&'a HostCoverage>,
) -> impl Iterator<Item = Gap> + 'a {
    merged.into_iter().map(move |(device, start_ns, end_ns)| {
        let parts = cut_at_edges(phases, start_ns, end_ns)
            .map(|(segment, a, b)| GapPart {
                start_ns: a,
                end_ns: b,
                place: phases.place(a, b),
                segment,
                kernel_resident_ns: kernels.map(|k| k.covered_ns(device, a, b)),
                host: host.map(|h| h.split(a, b)),
            })
            .collect();
        Gap {
            device,
            start_ns,
            end_ns,
            parts,
        }
    })
}

/// `[start, end)` cut at every range boundary inside it, as `(segment, start, end)` in time
/// order; `[start, start)` when it is empty, so that every gap has a part.
pub fn cut_at_edges(
    phases: &Phases,
    start_ns: i64,
    end_ns: i64,
) -> impl Iterator<Item = (usize, i64, i64)> + '_ {
    let mut at = start_ns;
    let mut first = true;
    std::iter::from_fn(move || {
        if at >= end_ns && !first {
            return None;
        }
        first = false;
        let segment = phases.segment_of(at);
        // The next boundary after `at` (segment_of counts those at or before it).
        let next = phases
            .boundaries
            .get(segment)
            .copied()
            .map_or(end_ns, |b| b.min(end_ns))
            .max(at);
        let part = (segment, at, next);
        at = if next > at { next } else { end_ns };
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::DropReason;

    fn frag(device: u32, start_ns: i64, end_ns: i64) -> Fragment {
        Fragment {
            device: DeviceId(device),
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn fragments_merge_across_file_blocks_but_not_across_holes_or_drops() {
        let drops = vec![DropRecord {
            device: DeviceId(1),
            start_ns: 500,
            end_ns: 600,
            reason: DropReason::CounterDataFull,
            lost_samples: None,
        }];
        let frags = vec![
            frag(0, 100, 150),
            frag(0, 150, 210), // continues the previous one in another file block
            frag(0, 300, 320), // after a hole: separate, and too short
            frag(1, 400, 700),
        ];
        let got: Vec<_> = merge_fragments(frags, &drops, Nanos(50), Nanos(5)).collect();
        assert_eq!(
            got,
            vec![
                (DeviceId(0), 100, 210),
                (DeviceId(1), 400, 500),
                (DeviceId(1), 600, 700)
            ]
        );
    }

    proptest::proptest! {
        /// Covered time equals a brute-force count over every nanosecond.
        #[test]
        fn coverage_matches_brute_force(
            ks in proptest::collection::vec((0i64..200, 0i64..40), 1..12),
            a in 0i64..250,
            len in 0i64..100,
        ) {
            let recs: Vec<KernelRecord> = ks
                .iter()
                .map(|(s, l)| KernelRecord {
                    device: DeviceId(0),
                    start_ns: *s,
                    end_ns: s + l,
                    kind: ActivityKind::Kernel,
                    name: String::new(),
                    stream: 0,
                    correlation_id: 0,
                    bytes: None,
                    pid: 0,
                    ..Default::default()
                })
                .collect();
            let cov = KernelCoverage::build(&recs).expect("kernels");
            let brute = (a..a + len)
                .filter(|t| ks.iter().any(|(s, l)| *t >= *s && *t < s + l))
                .count() as i64;
            proptest::prop_assert_eq!(cov.covered_ns(DeviceId(0), a, a + len), brute);
        }

        /// An idle run cut into fragments anywhere (at file-block edges) merges back whole.
        #[test]
        fn fragments_merge_back(cuts in proptest::collection::btree_set(1i64..99, 0..6)) {
            let mut points = vec![0i64];
            points.extend(cuts.iter().map(|c| c * 10));
            points.push(1000);
            let frags: Vec<Fragment> = points
                .windows(2)
                .map(|w| frag(3, 1000 + w[0], 1000 + w[1]))
                .collect();
            proptest::prop_assert_eq!(merge_fragments(frags, &[], Nanos(500), Nanos(5)).collect::<Vec<_>>(), vec![(DeviceId(3), 1000, 2000)]);
        }
    }

    proptest::proptest! {
        /// Whatever the ranges (several processes', overlapping, nested or not), a stretch's
        /// parts lie end to end over it, and no phase gets more of it than the time its ranges
        /// cover, which is never more than their summed durations.
        #[test]
        fn no_phase_gets_more_gap_time_than_its_time(
            ranges in proptest::collection::vec(
                (1u32..4, 0i64..500, 1i64..200, proptest::bool::ANY, 0usize..3), 0..10),
            start in 0i64..600,
            len in 1i64..400,
        ) {
            use cufall_trace::model::{NvtxRange, RangeKind};
            let names = ["step", "draft", "verify"];
            let nvtx: Vec<NvtxRange> = ranges
                .iter()
                .map(|(pid, s, l, push, name)| NvtxRange {
                    start_ns: *s,
                    end_ns: s + l,
                    name: names[*name].into(),
                    kind: if *push { RangeKind::PushPop } else { RangeKind::StartEnd },
                    pid: *pid,
                    tid: *pid,
                    ..Default::default()
                })
                .collect();
            let phases = Phases::build(&nvtx);
            let g = gaps_of([(DeviceId(0), start, start + len)], &phases, None, None)
                .next()
                .expect("a gap");
            let mut at = start;
            for p in &g.parts {
                proptest::prop_assert_eq!(p.start_ns, at);
                proptest::prop_assert!(p.end_ns > p.start_ns);
                at = p.end_ns;
            }
            proptest::prop_assert_eq!(at, start + len);
            let index = crate::phases::SegPhases::build(&phases);
            for (i, ph) in phases.phases.iter().enumerate() {
                let gap: i64 = g
                    .parts
                    .iter()
                    .filter(|p| index.of(p.segment).contains(&crate::phases::segment_id(i)))
                    .map(GapPart::duration_ns)
                    .sum();
                let covered: i64 = ph
                    .segments
                    .iter()
                    .map(|s| {
                        let (a, b) = phases.segment_bounds(*s as usize, 0, 0);
                        b - a
                    })
                    .sum();
                proptest::prop_assert!(gap <= covered, "{}: {gap} > {covered}", ph.path);
                proptest::prop_assert!(covered <= ph.durations_ns.iter().sum::<i64>());
            }
        }
    }

    #[test]
    fn host_time_splits_a_gap_into_sync_launch_and_elsewhere() {
        let call = |name: &str, s, e| ApiCall {
            start_ns: s,
            end_ns: e,
            name: name.into(),
            ..Default::default()
        };
        let calls = [
            call("cudaLaunchKernel", 0, 10),
            call("cudaStreamSynchronize", 20, 60),
            // A second thread's launch inside the sync counts once, as sync.
            call("cuLaunchKernel", 30, 40),
            call("cudaMemcpyAsync", 70, 80),
        ];
        let h = HostCoverage::build(&calls).expect("calls");
        assert_eq!(
            h.split(5, 100),
            HostTime {
                in_sync_ns: Nanos(40),
                in_launch_ns: Nanos(15),
            }
        );
        assert!(HostCoverage::build(&[]).is_none());
    }

    /// A stretch from inside one draft to inside the next step's draft: cut at every range
    /// edge, each part placed by itself, consecutive parts of one place merged into a piece.
    #[test]
    fn a_stretch_is_cut_at_phase_edges_and_merged_by_place() {
        use cufall_trace::model::{NvtxRange, RangeKind};
        let r = |start_ns, end_ns, name: &str| NvtxRange {
            start_ns,
            end_ns,
            name: name.into(),
            kind: RangeKind::PushPop,
            pid: 1,
            tid: 1,
            ..Default::default()
        };
        let phases = Phases::build(&[
            r(0, 100, "step"),
            r(0, 40, "draft"),
            r(50, 90, "verify"),
            r(100, 200, "step"),
            r(100, 140, "draft"),
            r(150, 190, "verify"),
        ]);
        let cuts: Vec<(i64, i64)> = cut_at_edges(&phases, 30, 120)
            .map(|(_, a, b)| (a, b))
            .collect();
        assert_eq!(cuts, [(30, 40), (40, 50), (50, 90), (90, 100), (100, 120)]);
        assert_eq!(cut_at_edges(&phases, 7, 7).count(), 1);
        assert_eq!(
            cut_at_edges(&phases, 300, 400).collect::<Vec<_>>(),
            [(phases.segment_count() - 1, 300, 400)]
        );
        let kernels = KernelCoverage::from_intervals([(DeviceId(0), 60, 70)].into_iter());
        let g = gaps_of([(DeviceId(0), 30, 120)], &phases, Some(&kernels), None)
            .next()
            .expect("a gap");
        assert_eq!(g.parts.len(), 5);
        let pieces = g.pieces();
        let labels: Vec<String> = pieces.iter().map(|p| phases.label(&p.place)).collect();
        assert_eq!(
            labels,
            [
                "step/draft",
                "draft → verify",
                "step/verify",
                "verify → draft",
                "step/draft"
            ]
        );
        let lens: i64 = pieces.iter().map(GapPart::duration_ns).sum();
        assert_eq!(lens, g.duration_ns());
        assert_eq!(pieces[2].kernel_resident_ns, Some(10));
        assert_eq!(g.kernel_resident_ns(), Some(10));
        // Without phases a stretch is one part of the whole run.
        let none = Phases::build(&[]);
        let g = gaps_of([(DeviceId(0), 30, 120)], &none, None, None)
            .next()
            .expect("a gap");
        assert_eq!(g.pieces().len(), 1);
        assert_eq!(g.pieces()[0].place, Place::WholeRun);
    }

    #[test]
    fn kernel_coverage_clips_at_edges() {
        let k = |s, e| KernelRecord {
            device: DeviceId(0),
            start_ns: s,
            end_ns: e,
            kind: ActivityKind::Kernel,
            name: "k".into(),
            stream: 7,
            correlation_id: 0,
            bytes: None,
            pid: 1,
            ..Default::default()
        };
        let cov = KernelCoverage::build(&[k(0, 100), k(50, 150), k(200, 300)]).expect("kernels");
        assert_eq!(cov.covered_ns(DeviceId(0), 100, 250), 50 + 50);
        assert_eq!(cov.covered_ns(DeviceId(0), 150, 200), 0);
        assert_eq!(cov.covered_ns(DeviceId(0), -10, 400), 250);
        assert_eq!(cov.covered_ns(DeviceId(1), 0, 400), 0);
    }
}
