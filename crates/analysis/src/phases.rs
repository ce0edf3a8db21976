//! NVTX ranges as *phases*: each range gets a path of names from its outermost enclosing range
//! (`step/draft`), and the timeline is cut into *segments* at every range boundary so that
//! samples can be grouped once per segment and each phase is a union of segments.
//!
//! Segment ids follow `search_sorted(boundaries, t, side = right)`: segment `s` is the time
//! interval `[boundaries[s-1], boundaries[s])`, segment `0` lies before the first boundary and
//! segment `boundaries.len()` after the last. Both of those are outside every range.

use cufall_trace::model::{NvtxRange, RangeKind};
use std::collections::{BTreeMap, HashMap};

/// One range instance with its phase.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeInst {
    pub start_ns: i64,
    pub end_ns: i64,
    /// Index into [`Phases::phases`].
    pub phase: usize,
}

/// One distinct path of range names.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// Names from the outermost range down, joined by `/`.
    pub path: String,
    /// The range's own name (the last component of the path).
    pub name: String,
    /// Nesting depth, 0 for outermost ranges.
    pub depth: usize,
    /// Durations of its ranges, sorted ascending.
    pub durations_ns: Vec<i64>,
    /// Segment ids this phase covers (sorted, unique): the union of its ranges.
    pub segments: Vec<u32>,
}

/// The phases of a trace and the segmentation of its timeline.
#[derive(Clone, Debug, Default)]
pub struct Phases {
    /// In tree order: each parent before its children, siblings by first appearance.
    pub phases: Vec<Phase>,
    pub ranges: Vec<RangeInst>,
    /// Sorted unique range boundaries.
    pub boundaries: Vec<i64>,
    /// The deepest phase covering each segment (`None` outside every range).
    pub leaf_of_segment: Vec<Option<usize>>,
    /// The deepest range instance covering each segment (latest start among equals).
    leaf_range: Vec<Option<usize>>,
    /// Ranges sorted by end time, for "the phase before" lookups.
    by_end: Vec<usize>,
    /// Ranges sorted by start time, for "the phase after" lookups.
    by_start: Vec<usize>,
}

/// Where a time interval falls among the phases.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    /// No NVTX ranges were captured.
    WholeRun,
    /// Inside a phase (index into [`Phases::phases`]).
    In(usize),
    /// Between two phases; `None` is the start or the end of the recording.
    Between(Option<usize>, Option<usize>),
}

/// Each range as (start, end, path, depth): push/pop ranges nest per thread by time
/// containment (`parent/child`); start/end ranges are top-level; marks are left out.
fn range_paths(ranges: &[NvtxRange]) -> Vec<(i64, i64, String, usize)> {
    let mut paths: Vec<(i64, i64, String, usize)> = Vec::with_capacity(ranges.len());
    let mut threads: BTreeMap<(u32, u32), Vec<&NvtxRange>> = BTreeMap::new();
    for r in ranges {
        match r.kind {
            RangeKind::PushPop => threads.entry((r.pid, r.tid)).or_default().push(r),
            RangeKind::StartEnd => paths.push((r.start_ns, r.end_ns, r.name.clone(), 0)),
            // A mark is an instant, not a phase.
            RangeKind::Mark => {}
        }
    }
    for list in threads.values_mut() {
        list.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(b.end_ns.cmp(&a.end_ns)));
        // Stack of (end, path) of the open ranges enclosing the current one.
        let mut stack: Vec<(i64, String)> = Vec::new();
        for r in list.iter() {
            while stack
                .last()
                .is_some_and(|(end, _)| *end < r.end_ns || *end <= r.start_ns)
            {
                stack.pop();
            }
            let path = match stack.last() {
                Some((_, parent)) => format!("{parent}/{}", r.name),
                None => r.name.clone(),
            };
            paths.push((r.start_ns, r.end_ns, path.clone(), stack.len()));
            stack.push((r.end_ns, path));
        }
    }
    paths
}

impl Phases {
    /// Builds phases from NVTX ranges. Push/pop ranges nest per thread by time containment;
    /// start/end ranges cross threads and do not nest, so each is its own top-level phase.
    pub fn build(ranges: &[NvtxRange]) -> Phases {
        let mut paths = range_paths(ranges);
        // Phases in order of first appearance, then arranged as a tree.
        paths.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut phases: Vec<Phase> = Vec::new();
        let mut insts = Vec::with_capacity(paths.len());
        for (start, end, path, depth) in paths {
            let next = phases.len();
            let id = *index.entry(path.clone()).or_insert(next);
            if id == next {
                let name = path.rsplit('/').next().unwrap_or(&path).to_string();
                phases.push(Phase {
                    path,
                    name,
                    depth,
                    durations_ns: Vec::new(),
                    segments: Vec::new(),
                });
            }
            phases[id].durations_ns.push((end - start).max(0));
            insts.push(RangeInst {
                start_ns: start,
                end_ns: end.max(start),
                phase: id,
            });
        }
        let order = tree_order(&phases);
        let mut remap = vec![0; phases.len()];
        for (new, old) in order.iter().enumerate() {
            remap[*old] = new;
        }
        let mut phases: Vec<Phase> = {
            let mut slots: Vec<Option<Phase>> = phases.into_iter().map(Some).collect();
            order.iter().filter_map(|old| slots[*old].take()).collect()
        };
        for r in &mut insts {
            r.phase = remap[r.phase];
        }
        for p in &mut phases {
            p.durations_ns.sort_unstable();
        }

        let mut boundaries: Vec<i64> = insts.iter().flat_map(|r| [r.start_ns, r.end_ns]).collect();
        boundaries.sort_unstable();
        boundaries.dedup();
        let mut leaf_range: Vec<Option<usize>> = vec![None; boundaries.len() + 1];
        // Ranges are sorted by start: a later one of equal depth replaces an earlier one.
        for (i, r) in insts.iter().enumerate() {
            let (lo, hi) = segment_span(&boundaries, r.start_ns, r.end_ns);
            let depth = phases[r.phase].depth;
            for (s, slot) in leaf_range.iter_mut().enumerate().take(hi).skip(lo) {
                phases[r.phase].segments.push(segment_id(s));
                if slot.is_none_or(|j| depth >= phases[insts[j].phase].depth) {
                    *slot = Some(i);
                }
            }
        }
        let leaf_of_segment = leaf_range
            .iter()
            .map(|r| r.map(|i| insts[i].phase))
            .collect();
        for p in &mut phases {
            p.segments.sort_unstable();
            p.segments.dedup();
        }
        let mut by_end: Vec<usize> = (0..insts.len()).collect();
        by_end.sort_by_key(|i| (insts[*i].end_ns, phases[insts[*i].phase].depth));
        let mut by_start: Vec<usize> = (0..insts.len()).collect();
        by_start.sort_by_key(|i| {
            (
                insts[*i].start_ns,
                std::cmp::Reverse(phases[insts[*i].phase].depth),
            )
        });
        Phases {
            phases,
            ranges: insts,
            boundaries,
            leaf_of_segment,
            leaf_range,
            by_end,
            by_start,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of segment ids (`boundaries.len() + 1`).
    pub fn segment_count(&self) -> usize {
        self.boundaries.len() + 1
    }

    /// The segment holding time `t`.
    pub fn segment_of(&self, t: i64) -> usize {
        self.boundaries.partition_point(|b| *b <= t)
    }

    /// Time interval of segment `s`, clipped to `[lo, hi)` for the open-ended outer segments.
    pub fn segment_bounds(&self, s: usize, lo: i64, hi: i64) -> (i64, i64) {
        let start = if s == 0 { lo } else { self.boundaries[s - 1] };
        let end = if s >= self.boundaries.len() {
            hi
        } else {
            self.boundaries[s]
        };
        (start, end)
    }

    /// Where the interval `[start, end)` falls, judged at its midpoint: inside the deepest range
    /// holding the midpoint unless a range nested in that one lies before or after it in the
    /// same enclosing range (then the interval is between those two phases).
    pub fn place(&self, start_ns: i64, end_ns: i64) -> Place {
        if self.ranges.is_empty() {
            return Place::WholeRun;
        }
        let mid = start_ns + (end_ns - start_ns) / 2;
        // The deepest range containing the midpoint.
        let container = self
            .leaf_range
            .get(self.segment_of(mid))
            .copied()
            .flatten()
            .map(|i| &self.ranges[i]);
        let before = self.by_end[..self
            .by_end
            .partition_point(|i| self.ranges[*i].end_ns <= mid)]
            .last()
            .map(|i| &self.ranges[*i]);
        let after_at = self
            .by_start
            .partition_point(|i| self.ranges[*i].start_ns <= mid);
        let after = self.by_start.get(after_at).map(|i| &self.ranges[*i]);
        // `before`: the latest-ending range before mid; among equal ends, the deepest (sorted
        // last). `after`: the earliest-starting range after mid; among equal starts, the deepest.
        let before = before.map(|r| self.deepest_ending_at(r.end_ns));
        if let Some(c) = container {
            let inside = |r: &RangeInst| r.start_ns >= c.start_ns && r.end_ns <= c.end_ns;
            let b_in = before.is_some_and(inside);
            let a_in = after.is_some_and(inside);
            if !b_in && !a_in {
                return Place::In(c.phase);
            }
        }
        Place::Between(before.map(|r| r.phase), after.map(|r| r.phase))
    }

    fn deepest_ending_at(&self, end: i64) -> &RangeInst {
        let hi = self
            .by_end
            .partition_point(|i| self.ranges[*i].end_ns <= end);
        let lo = self
            .by_end
            .partition_point(|i| self.ranges[*i].end_ns < end);
        let pick = self.by_end[lo..hi]
            .iter()
            .max_by_key(|i| {
                (
                    self.phases[self.ranges[**i].phase].depth,
                    self.ranges[**i].start_ns,
                )
            })
            .copied()
            .unwrap_or(self.by_end[hi - 1]);
        &self.ranges[pick]
    }

    /// Display text of a place: `step/draft`, or `verify → draft` with the common parent left
    /// out when both sides share it.
    pub fn label(&self, place: &Place) -> String {
        match place {
            Place::WholeRun => "(whole run)".into(),
            Place::In(p) => self.phases[*p].path.clone(),
            Place::Between(a, b) => {
                let a = a.map(|p| self.phases[p].path.as_str());
                let b = b.map(|p| self.phases[p].path.as_str());
                match (a, b) {
                    (Some(a), Some(b)) => {
                        let (a, b) = strip_common_parent(a, b);
                        format!("{a} → {b}")
                    }
                    (Some(a), None) => format!("{a} → (end)"),
                    (None, Some(b)) => format!("(start) → {b}"),
                    (None, None) => "(outside ranges)".into(),
                }
            }
        }
    }
}

/// Time during which the chosen ranges of more than one process are open at once, and those
/// processes (sorted); `None` when no two processes' ranges overlap. There a gap piece is
/// placed in one range (the deepest, latest-starting), and the others' places are left out.
pub fn cross_process_overlap(ranges: &[NvtxRange]) -> Option<(i64, Vec<u32>)> {
    let mut events: Vec<(i64, i32, u32)> = ranges
        .iter()
        .filter(|r| r.kind != RangeKind::Mark && r.end_ns > r.start_ns)
        .flat_map(|r| [(r.start_ns, 1, r.pid), (r.end_ns, -1, r.pid)])
        .collect();
    // Ends before starts at one instant: ranges that touch do not overlap.
    events.sort_unstable_by_key(|(t, d, _)| (*t, *d));
    let mut open: BTreeMap<u32, u32> = BTreeMap::new();
    let mut overlap_ns = 0i64;
    let mut involved: Vec<u32> = Vec::new();
    let mut last = i64::MIN;
    for (t, d, pid) in events {
        if open.len() > 1 {
            overlap_ns = overlap_ns.saturating_add(t.saturating_sub(last));
            involved.extend(open.keys());
        }
        last = t;
        if d > 0 {
            *open.entry(pid).or_default() += 1;
        } else if let Some(n) = open.get_mut(&pid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&pid);
            }
        }
    }
    involved.sort_unstable();
    involved.dedup();
    (overlap_ns > 0).then_some((overlap_ns, involved))
}

/// Segment ids `[lo, hi)` covered by `[start, end)` whose bounds are both boundaries.
fn segment_span(boundaries: &[i64], start: i64, end: i64) -> (usize, usize) {
    let lo = boundaries.partition_point(|b| *b <= start);
    let hi = boundaries.partition_point(|b| *b <= end);
    (lo, hi)
}

fn strip_common_parent<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    let pa = a.rfind('/').map(|i| &a[..i]);
    let pb = b.rfind('/').map(|i| &b[..i]);
    match (pa, pb) {
        (Some(x), Some(y)) if x == y => (&a[x.len() + 1..], &b[y.len() + 1..]),
        _ => (a, b),
    }
}

/// Parents before children, children in order of first appearance.
fn tree_order(phases: &[Phase]) -> Vec<usize> {
    let index: HashMap<&str, usize> = phases
        .iter()
        .enumerate()
        .map(|(i, p)| (p.path.as_str(), i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); phases.len()];
    let mut roots = Vec::new();
    for (i, p) in phases.iter().enumerate() {
        let parent = p
            .path
            .rfind('/')
            .and_then(|k| index.get(&p.path[..k]).copied());
        match parent {
            Some(parent) => children[parent].push(i),
            None => roots.push(i),
        }
    }
    let mut out = Vec::with_capacity(phases.len());
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(i) = stack.pop() {
        out.push(i);
        stack.extend(children[i].iter().rev());
    }
    out
}

/// For each segment, the phases covering it (compressed rows): the inverse of
/// [`Phase::segments`], which the report's cells and the kernel tables both look up per segment.
pub(crate) struct SegPhases {
    offsets: Vec<u32>,
    phases: Vec<u32>,
}

impl SegPhases {
    pub(crate) fn build(phases: &Phases) -> SegPhases {
        let nseg = phases.segment_count();
        let mut offsets = vec![0u32; nseg + 1];
        for p in &phases.phases {
            for s in &p.segments {
                offsets[*s as usize + 1] += 1;
            }
        }
        for i in 0..nseg {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut out = vec![0u32; offsets[nseg] as usize];
        for (pi, p) in phases.phases.iter().enumerate() {
            for s in &p.segments {
                let at = &mut fill[*s as usize];
                out[*at as usize] = segment_id(pi);
                *at += 1;
            }
        }
        SegPhases {
            offsets,
            phases: out,
        }
    }

    /// The phases covering segment `s` (none outside every range, or past the last segment).
    pub(crate) fn of(&self, s: usize) -> &[u32] {
        match (self.offsets.get(s), self.offsets.get(s + 1)) {
            (Some(&a), Some(&b)) => &self.phases[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// A segment's or phase's index as the compact `u32` the tables keep: there are at most two
/// boundaries per NVTX range, and a trace holds far fewer than 2³¹ ranges.
pub(crate) fn segment_id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a rank between 0 and the length, rounded up on purpose"
    )]
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The cells segment `s` counts in among `slots` (phases, then the whole run last): the phases
/// covering it, and the whole run.
pub(crate) fn slots_of(
    index: &SegPhases,
    s: usize,
    slots: usize,
) -> impl Iterator<Item = usize> + '_ {
    index
        .of(s)
        .iter()
        .map(|p| *p as usize)
        .chain(std::iter::once(slots - 1))
}

/// The name of each slot: the phases' paths in tree order, the whole run last.
pub(crate) fn slot_paths(phases: &Phases) -> Vec<String> {
    phases
        .phases
        .iter()
        .map(|p| p.path.clone())
        .chain(["(whole run)".to_string()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: i64, end: i64, name: &str, depth: u32) -> NvtxRange {
        NvtxRange {
            start_ns: start,
            end_ns: end,
            name: name.into(),
            domain: String::new(),
            kind: RangeKind::PushPop,
            depth,
            pid: 1,
            tid: 1,
            ..Default::default()
        }
    }

    #[test]
    fn nesting_and_places() {
        // step [0,100) { draft [0,40) gap verify [50,90) } gap step [100,200) ...
        let ranges = vec![
            r(0, 100, "step", 0),
            r(0, 40, "draft", 1),
            r(50, 90, "verify", 1),
            r(100, 200, "step", 0),
            r(100, 140, "draft", 1),
            r(150, 190, "verify", 1),
        ];
        let p = Phases::build(&ranges);
        let paths: Vec<&str> = p.phases.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["step", "step/draft", "step/verify"]);
        assert_eq!(p.label(&p.place(10, 20)), "step/draft");
        assert_eq!(p.label(&p.place(40, 50)), "draft → verify");
        assert_eq!(p.label(&p.place(90, 100)), "verify → draft");
        assert_eq!(p.label(&p.place(92, 98)), "verify → draft");
        // Mostly inside the next draft: judged at the midpoint.
        assert_eq!(p.label(&p.place(90, 120)), "step/draft");
        assert_eq!(p.label(&p.place(195, 260)), "step → (end)");
        assert_eq!(p.label(&p.place(-50, -10)), "(start) → step/draft");
        assert_eq!(p.phases[0].durations_ns, vec![100, 100]);
    }

    #[test]
    fn overlapping_ranges_of_several_processes_are_found() {
        let of = |pid: u32, start: i64, end: i64| NvtxRange {
            pid,
            tid: pid,
            ..r(start, end, "step", 0)
        };
        // One process's ranges never overlap across processes: touching ones do not either.
        assert_eq!(
            cross_process_overlap(&[of(1, 0, 10), of(1, 5, 20), of(2, 20, 30)]),
            None
        );
        let got = cross_process_overlap(&[
            of(1, 0, 100),
            of(2, 50, 150),
            of(3, 90, 95),
            of(2, 300, 310),
        ]);
        assert_eq!(got, Some((50, vec![1, 2, 3])));
        assert_eq!(cross_process_overlap(&[]), None);
    }

    #[test]
    fn percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
    }
}
