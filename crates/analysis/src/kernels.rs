//! Which kernels took a phase's GPU time: per phase, per device, the kernels (copies, memsets
//! and whole CUDA graph launches alike) by the GPU time they spent inside the phase, as Nsight
//! Systems' *CUDA GPU kernel summary* lists them for a whole run.
//!
//! **Attribution.** A phase is a union of host-side NVTX range intervals; a kernel runs on the GPU
//! a little after the host launched it. A kernel counts in every phase whose intervals its GPU
//! interval overlaps, with the overlapping part of its time (a kernel with no duration counts
//! where it starts). The phase's *GPU-busy time* is measured the same way, the union of all
//! kernel and copy intervals of the device clipped to the phase, so that a row's share of it
//! cannot pass 100 % unless kernels ran concurrently, and a kernel straddling two phases is
//! split between them rather than given whole to one. This is also how the gaps and samples
//! are placed (on the GPU's time), and how the desktop timeline's selection counts kernels.
//! Time in no phase is a table of its own; a parent phase holds its children's kernels.
//!
//! **Memory.** The kernels are read a segment at a time and folded into one aggregate per
//! `(device, phase, kernel name)`: count, time inside, summed and largest duration, and a
//! log-bucketed histogram of durations for the median (32 buckets per octave: a bucket's
//! midpoint is within 1.6 % of any duration in it, exact below 64 ns; the median is
//! clamped to the smallest and largest duration seen). No list of kernels is kept; besides the
//! aggregates, the busy intervals per device are, a kernel that starts where the previous one
//! of its device ended extending that one's (figures in `docs/benchmarks-analysis.md`).

use crate::gaps::{CoverageBuilder, KernelCoverage};
use crate::names::short_kernel_name;
use crate::phases::{Phases, SegPhases};
use cufall_trace::model::{ActivityKind, DeviceId, KernelRecord, Nanos};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// How many kernels the text report lists per phase and device unless told otherwise.
pub const KERNEL_ROWS_SHOWN: usize = 5;

/// What a table of kernels covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelScope {
    /// The whole recording.
    WholeRun,
    /// One phase (its ranges' time, its children's included).
    Phase,
    /// Time outside every phase.
    OutsidePhases,
}

/// The kernels of one phase (or the whole run, or the time outside every phase) on one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelTable {
    pub scope: KernelScope,
    /// The phase's path; `(whole run)` or `(outside phases)` for the other scopes.
    pub phase: String,
    /// Nesting depth of the phase (0 for the other scopes).
    pub depth: usize,
    pub device: DeviceId,
    /// Time inside the phase with at least one kernel, copy, memset or graph running on the
    /// device: the union of their intervals.
    pub busy_ns: Nanos,
    /// Time of all records inside the phase, summed (more than `busy_ns` where they overlap).
    pub total_ns: Nanos,
    /// Records overlapping the phase.
    pub count: u64,
    /// Distinct names among them.
    pub names: u64,
    /// Largest time inside first; as many as the report was asked to keep.
    pub rows: Vec<KernelRow>,
}

/// One kernel name in a [`KernelTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelRow {
    /// The name as recorded (demangled).
    pub name: String,
    /// [`short_kernel_name`] of it.
    pub short_name: String,
    /// Kernel, copy, memset or graph (rows are per name: the kind of the name's first record).
    pub kind: ActivityKind,
    /// Launches overlapping the phase.
    pub count: u64,
    /// Their GPU time inside the phase.
    pub total_ns: Nanos,
    /// `total_ns` over the table's `busy_ns`.
    pub share: Option<f64>,
    /// Mean, median and largest duration of these launches (whole, also the part outside the
    /// phase of one that straddles its edge). The median is within 1.6 % (see the module docs).
    pub mean_ns: Nanos,
    pub p50_ns: Nanos,
    pub max_ns: Nanos,
}

/// Durations in log-linear buckets: exact below 64 ns, then 32 buckets per power of two. A
/// sorted list: one kernel's durations fall in a few buckets.
#[derive(Clone, Debug, Default)]
struct Histogram {
    buckets: Vec<(u16, u64)>,
}

const EXACT_BELOW: i64 = 64;
const SUB_BITS: u32 = 5;

impl Histogram {
    fn add(&mut self, ns: i64) {
        let b = bucket_of(ns);
        match self.buckets.binary_search_by_key(&b, |(k, _)| *k) {
            Ok(i) => self.buckets[i].1 += 1,
            Err(i) => self.buckets.insert(i, (b, 1)),
        }
    }

    /// The nearest-rank median, as its bucket's midpoint.
    fn median(&self, count: u64) -> i64 {
        let rank = count.div_ceil(2).max(1);
        let mut seen = 0u64;
        for (b, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return bucket_mid(*b);
            }
        }
        0
    }
}

fn bucket_of(ns: i64) -> u16 {
    let v = ns.max(0);
    if v < EXACT_BELOW {
        return u16::try_from(v).unwrap_or(0);
    }
    let e = 63 - v.leading_zeros(); // 6 and up
    let sub = (v >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    let b = EXACT_BELOW + i64::from(e - 6) * (1 << SUB_BITS) + sub;
    u16::try_from(b).unwrap_or(u16::MAX)
}

fn bucket_mid(b: u16) -> i64 {
    let b = i64::from(b);
    if b < EXACT_BELOW {
        return b;
    }
    let e = (b - EXACT_BELOW) / (1 << SUB_BITS) + 6;
    let sub = (b - EXACT_BELOW) % (1 << SUB_BITS);
    let width = 1i64 << (e - i64::from(SUB_BITS));
    (1i64 << e) + sub * width + width / 2
}

/// One kernel name in one phase on one device, as it is folded in.
#[derive(Clone, Debug)]
struct Agg {
    count: u64,
    inside_ns: i64,
    duration_sum_ns: i64,
    min_ns: i64,
    max_ns: i64,
    durations: Histogram,
}

impl Agg {
    fn new() -> Agg {
        Agg {
            count: 0,
            inside_ns: 0,
            duration_sum_ns: 0,
            min_ns: i64::MAX,
            max_ns: 0,
            durations: Histogram::default(),
        }
    }

    fn add(&mut self, duration_ns: i64, inside_ns: i64) {
        self.count += 1;
        self.inside_ns += inside_ns;
        self.duration_sum_ns += duration_ns;
        self.min_ns = self.min_ns.min(duration_ns);
        self.max_ns = self.max_ns.max(duration_ns);
        self.durations.add(duration_ns);
    }
}

/// Busy intervals collected per device as they are read; a kernel that starts where the previous
/// one of its device ended (or inside it) extends it rather than adding an interval, so back to
/// back work costs no memory per kernel.
#[derive(Default)]
struct BusyIntervals {
    builder: CoverageBuilder,
    open: BTreeMap<DeviceId, (i64, i64)>,
}

impl BusyIntervals {
    fn add(&mut self, device: DeviceId, start: i64, end: i64) {
        match self.open.get_mut(&device) {
            Some((s, e)) if start >= *s && start <= *e => *e = (*e).max(end),
            Some(run) => {
                let (s, e) = std::mem::replace(run, (start, end));
                self.builder.add(device, s, e);
            }
            None => {
                self.open.insert(device, (start, end));
            }
        }
    }

    fn finish(mut self) -> KernelCoverage {
        for (device, (s, e)) in std::mem::take(&mut self.open) {
            self.builder.add(device, s, e);
        }
        self.builder.finish()
    }
}

/// FxHash (rustc's): kernel names are hashed once per launch, and SipHash's protection against
/// crafted keys buys nothing for names read from a trace.
#[derive(Default)]
pub(crate) struct FxHasher {
    hash: u64,
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.hash = (self.hash.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(SEED);
        }
        for b in chunks.remainder() {
            self.hash = (self.hash.rotate_left(5) ^ u64::from(*b)).wrapping_mul(SEED);
        }
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Far enough before and after any trace time for the open-ended outer segments.
const FAR_NS: i64 = i64::MAX / 4;

/// One kernel name's aggregates on one device, by slot.
type SlotAggs = Vec<(u32, Agg)>;

/// Kernels folded in as they are read ([`KernelFold::add`]), then made into tables
/// ([`KernelFold::finish`]). Slots: the phases by index, then the whole run, then the time
/// outside every phase.
pub struct KernelFold<'a> {
    phases: &'a Phases,
    covering: SegPhases,
    names: HashMap<String, u32, BuildHasherDefault<FxHasher>>,
    kinds: Vec<ActivityKind>,
    /// By name id: per device, the aggregate of each slot the name ran in (a name runs in a few
    /// phases: a short list searched in order beats hashing every launch).
    aggs: Vec<Vec<(DeviceId, SlotAggs)>>,
    busy: BusyIntervals,
    /// The slots of the kernel being added, with its time in each.
    scratch: Vec<(u32, i64)>,
}

impl<'a> KernelFold<'a> {
    pub fn new(phases: &'a Phases) -> KernelFold<'a> {
        KernelFold {
            phases,
            covering: SegPhases::build(phases),
            names: HashMap::default(),
            kinds: Vec::new(),
            aggs: Vec::new(),
            busy: BusyIntervals::default(),
            scratch: Vec::new(),
        }
    }

    fn whole_run(&self) -> u32 {
        u32::try_from(self.phases.phases.len()).unwrap_or(u32::MAX - 1)
    }

    fn outside(&self) -> u32 {
        self.whole_run() + 1
    }

    /// Folds in a batch of records (a segment of the kernels table).
    pub fn add_all(&mut self, records: Vec<KernelRecord>) {
        for k in records {
            self.add(k);
        }
    }

    /// Folds in one record.
    pub fn add(&mut self, k: KernelRecord) {
        let duration = (k.end_ns - k.start_ns).max(0);
        let (start, end) = (k.start_ns, k.start_ns + duration);
        self.busy.add(k.device, start, end);
        let next = u32::try_from(self.kinds.len()).unwrap_or(u32::MAX);
        let name = match self.names.get(k.name.as_str()) {
            Some(id) => *id,
            None => {
                self.names.insert(k.name, next);
                self.kinds.push(k.kind);
                self.aggs.push(Vec::new());
                next
            }
        };
        self.scratch.clear();
        self.scratch.push((self.whole_run(), duration));
        if !self.phases.is_empty() {
            self.place(start, end);
        }
        let devices = &mut self.aggs[name as usize];
        let at = match devices.iter().position(|(d, _)| *d == k.device) {
            Some(i) => i,
            None => {
                devices.push((k.device, Vec::new()));
                devices.len() - 1
            }
        };
        let slots = &mut devices[at].1;
        for (slot, inside) in &self.scratch {
            let agg = match slots.iter_mut().position(|(s, _)| s == slot) {
                Some(i) => &mut slots[i].1,
                None => {
                    slots.push((*slot, Agg::new()));
                    let last = slots.len() - 1;
                    &mut slots[last].1
                }
            };
            agg.add(duration, *inside);
        }
    }

    /// Adds to the scratch list the phases `[start, end)` overlaps (where it starts, for an
    /// instant), each with the time inside it, or the time outside every phase.
    fn place(&mut self, start: i64, end: i64) {
        let lo = self.phases.segment_of(start);
        let hi = if end > start {
            self.phases.segment_of(end - 1)
        } else {
            lo
        };
        let outside = self.outside();
        for s in lo..=hi {
            let (a, b) = self.phases.segment_bounds(s, -FAR_NS, FAR_NS);
            let part = (b.min(end) - a.max(start)).max(0);
            let covering = self.covering.of(s);
            let slots = if covering.is_empty() {
                std::slice::from_ref(&outside)
            } else {
                covering
            };
            for slot in slots {
                match self.scratch.iter_mut().find(|(x, _)| x == slot) {
                    Some((_, t)) => *t += part,
                    None => self.scratch.push((*slot, part)),
                }
            }
        }
    }

    /// The tables: the whole run, the phases in tree order, then the time outside every phase;
    /// each per device, rows by time inside (largest first), at most `rows` of them (`None`:
    /// every name). Tables without records are left out.
    pub fn finish(mut self, rows: Option<usize>) -> Vec<KernelTable> {
        let busy = std::mem::take(&mut self.busy).finish();
        let aggs = std::mem::take(&mut self.aggs);
        let (whole, outside) = (self.whole_run(), self.outside());
        let mut names: Vec<&str> = vec![""; self.kinds.len()];
        for (n, id) in &self.names {
            names[*id as usize] = n.as_str();
        }
        // Slots in the order shown: whole run, phases, outside.
        let order = |slot: u32| match slot {
            s if s == whole => 0,
            s if s == outside => 2,
            _ => 1,
        };
        let mut grouped: BTreeMap<(u8, u32, DeviceId), Vec<(u32, Agg)>> = BTreeMap::new();
        for (name, devices) in aggs.into_iter().enumerate() {
            let name = u32::try_from(name).unwrap_or(u32::MAX);
            for (dev, slots) in devices {
                for (slot, agg) in slots {
                    grouped
                        .entry((order(slot), slot, dev))
                        .or_default()
                        .push((name, agg));
                }
            }
        }
        grouped
            .into_iter()
            .map(|((_, slot, device), mut list)| {
                let (scope, phase, depth, busy_ns) = if slot == whole {
                    let b = busy.covered_ns(device, -FAR_NS, FAR_NS);
                    (KernelScope::WholeRun, "(whole run)".to_string(), 0, b)
                } else if slot == outside {
                    let b = self.busy_outside(&busy, device);
                    (KernelScope::OutsidePhases, "(outside phases)".into(), 0, b)
                } else {
                    let p = &self.phases.phases[slot as usize];
                    let b = self.busy_in(&busy, device, &p.segments);
                    (KernelScope::Phase, p.path.clone(), p.depth, b)
                };
                list.sort_unstable_by(|(na, a), (nb, b)| {
                    b.inside_ns
                        .cmp(&a.inside_ns)
                        .then_with(|| names[*na as usize].cmp(names[*nb as usize]))
                });
                let count = list.iter().map(|(_, a)| a.count).sum();
                let total_ns = list.iter().map(|(_, a)| Nanos(a.inside_ns)).sum();
                let distinct = list.len() as u64;
                list.truncate(rows.unwrap_or(usize::MAX));
                let rows = list
                    .into_iter()
                    .map(|(id, a)| {
                        let name = names[id as usize];
                        KernelRow {
                            name: name.to_string(),
                            short_name: short_kernel_name(name).into_owned(),
                            kind: self.kinds[id as usize],
                            count: a.count,
                            total_ns: Nanos(a.inside_ns),
                            share: (busy_ns > 0).then(|| a.inside_ns as f64 / busy_ns as f64),
                            mean_ns: Nanos(a.duration_sum_ns / a.count.max(1) as i64),
                            p50_ns: Nanos(a.durations.median(a.count).clamp(a.min_ns, a.max_ns)),
                            max_ns: Nanos(a.max_ns),
                        }
                    })
                    .collect();
                KernelTable {
                    scope,
                    phase,
                    depth,
                    device,
                    busy_ns: Nanos(busy_ns),
                    total_ns,
                    count,
                    names: distinct,
                    rows,
                }
            })
            .collect()
    }

    /// Busy time of `device` inside the given segments.
    fn busy_in(&self, busy: &KernelCoverage, device: DeviceId, segments: &[u32]) -> i64 {
        segments
            .iter()
            .map(|s| {
                let (a, b) = self.phases.segment_bounds(*s as usize, -FAR_NS, FAR_NS);
                busy.covered_ns(device, a, b)
            })
            .sum()
    }

    /// Busy time of `device` in the segments no phase covers.
    fn busy_outside(&self, busy: &KernelCoverage, device: DeviceId) -> i64 {
        (0..self.phases.segment_count())
            .filter(|s| self.covering.of(*s).is_empty())
            .map(|s| {
                let (a, b) = self.phases.segment_bounds(s, -FAR_NS, FAR_NS);
                busy.covered_ns(device, a, b)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::{NvtxRange, RangeKind};

    fn range(start: i64, end: i64, name: &str) -> NvtxRange {
        NvtxRange {
            start_ns: start,
            end_ns: end,
            name: name.into(),
            kind: RangeKind::PushPop,
            pid: 1,
            tid: 1,
            ..Default::default()
        }
    }

    fn k(device: u32, start: i64, end: i64, name: &str) -> KernelRecord {
        KernelRecord {
            device: DeviceId(device),
            start_ns: start,
            end_ns: end,
            kind: if name.starts_with("memcpy") {
                ActivityKind::Memcpy
            } else {
                ActivityKind::Kernel
            },
            name: name.into(),
            ..Default::default()
        }
    }

    fn tables(
        ranges: &[NvtxRange],
        ks: Vec<KernelRecord>,
        rows: Option<usize>,
    ) -> Vec<KernelTable> {
        let phases = Phases::build(ranges);
        let mut fold = KernelFold::new(&phases);
        fold.add_all(ks);
        fold.finish(rows)
    }

    fn find<'t>(t: &'t [KernelTable], phase: &str, dev: u32) -> &'t KernelTable {
        t.iter()
            .find(|x| x.phase == phase && x.device == DeviceId(dev))
            .unwrap_or_else(|| panic!("no table {phase} on {dev}"))
    }

    #[test]
    fn a_straddling_kernel_is_split_by_its_time_in_each_phase() {
        // a [0,100) then b [100,200); the kernel runs [80,130): 20 in a, 30 in b.
        let ranges = [range(0, 100, "a"), range(100, 200, "b")];
        let t = tables(
            &ranges,
            vec![k(0, 10, 30, "x"), k(0, 80, 130, "y"), k(0, 150, 160, "x")],
            None,
        );
        let a = find(&t, "a", 0);
        assert_eq!((a.busy_ns.get(), a.count, a.total_ns.get()), (40, 2, 40));
        assert_eq!(a.rows[0].name, "x");
        assert_eq!(a.rows[0].total_ns.get(), 20);
        assert_eq!(a.rows[1].name, "y");
        assert_eq!(a.rows[1].total_ns.get(), 20);
        // The straddling kernel's own figures stay whole.
        assert_eq!((a.rows[1].mean_ns.get(), a.rows[1].max_ns.get()), (50, 50));
        assert_eq!(a.rows[1].share, Some(0.5));
        let b = find(&t, "b", 0);
        assert_eq!((b.busy_ns.get(), b.count), (40, 2));
        assert_eq!(b.rows[0].name, "y");
        assert_eq!(b.rows[0].total_ns.get(), 30);
        assert_eq!(b.rows[0].share, Some(0.75));
        let whole = find(&t, "(whole run)", 0);
        assert_eq!(whole.scope, KernelScope::WholeRun);
        assert_eq!(
            (whole.count, whole.busy_ns.get(), whole.total_ns.get()),
            (3, 80, 80)
        );
        assert_eq!(whole.rows[0].name, "y");
        assert_eq!(whole.rows[1].count, 2);
        assert!(t.iter().all(|x| x.scope != KernelScope::OutsidePhases));
    }

    #[test]
    fn kernels_outside_phases_and_parents_holding_children() {
        // step [0,100) { draft [10,40) }; kernels before, inside and after.
        let mut draft = range(10, 40, "draft");
        draft.depth = 1;
        let ranges = [range(0, 100, "step"), draft];
        let t = tables(
            &ranges,
            vec![
                k(0, -50, -40, "early"),
                k(0, 20, 30, "d"),
                k(0, 50, 60, "s"),
                k(0, 95, 120, "late"),
                // An instant kernel counts where it starts.
                k(0, 35, 35, "instant"),
            ],
            None,
        );
        let order: Vec<&str> = t.iter().map(|x| x.phase.as_str()).collect();
        assert_eq!(
            order,
            ["(whole run)", "step", "step/draft", "(outside phases)"]
        );
        let step = find(&t, "step", 0);
        assert_eq!(step.count, 4);
        assert_eq!(step.total_ns.get(), 10 + 10 + 5);
        let draft = find(&t, "step/draft", 0);
        assert_eq!(draft.count, 2);
        assert_eq!(draft.rows[0].name, "d");
        assert_eq!(draft.rows[1].name, "instant");
        assert_eq!(draft.rows[1].total_ns.get(), 0);
        let out = find(&t, "(outside phases)", 0);
        assert_eq!(out.count, 2);
        assert_eq!((out.busy_ns.get(), out.total_ns.get()), (30, 30));
        assert_eq!(out.rows[0].name, "late");
        assert_eq!(out.rows[0].total_ns.get(), 20);
    }

    #[test]
    fn devices_get_tables_of_their_own_and_busy_time_is_a_union() {
        let ranges = [range(0, 1000, "p")];
        let t = tables(
            &ranges,
            vec![
                k(0, 0, 100, "gemm"),
                // Concurrent on another stream: busy time counts the overlap once.
                k(0, 50, 150, "memcpy HtoD"),
                k(1, 0, 10, "gemm"),
            ],
            Some(1),
        );
        let p0 = find(&t, "p", 0);
        assert_eq!(
            (p0.busy_ns.get(), p0.total_ns.get(), p0.names),
            (150, 200, 2)
        );
        assert_eq!(p0.rows.len(), 1, "rows are cut to the number asked for");
        assert_eq!(p0.rows[0].share, Some(100.0 / 150.0));
        let p1 = find(&t, "p", 1);
        assert_eq!((p1.busy_ns.get(), p1.count), (10, 1));
        assert_eq!(
            t.iter().filter(|x| x.device == DeviceId(1)).count(),
            2,
            "GPU 1: whole run and p"
        );
    }

    #[test]
    fn without_phases_only_the_whole_run_is_listed() {
        let t = tables(
            &[],
            vec![k(0, 0, 10, "a"), k(0, 20, 50, "memcpy HtoD")],
            None,
        );
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].rows[0].kind, ActivityKind::Memcpy);
        assert_eq!(t[0].rows[0].short_name, "memcpy HtoD");
    }

    #[test]
    fn medians_are_exact_for_small_durations_and_close_for_large() {
        let t = tables(
            &[],
            [3, 5, 7, 9, 40].iter().map(|d| k(0, 0, *d, "a")).collect(),
            None,
        );
        let r = &t[0].rows[0];
        assert_eq!(
            (r.p50_ns.get(), r.mean_ns.get(), r.max_ns.get()),
            (7, 12, 40)
        );
        for v in [64i64, 100, 1_000, 12_345, 1_000_000, 987_654_321, 1 << 40] {
            let mid = bucket_mid(bucket_of(v));
            let err = (mid - v).abs() as f64 / v as f64;
            assert!(err <= 1.0 / 64.0, "{v} → {mid}");
        }
        // Every duration of one value comes back exactly (clamped to min and max).
        let t = tables(&[], vec![k(0, 0, 12_345, "a"); 3], None);
        assert_eq!(t[0].rows[0].p50_ns.get(), 12_345);
    }

    proptest::proptest! {
        /// Busy time is the union of the intervals, whatever order they come in, and each
        /// phase's rows add up to the time of the kernels inside it.
        #[test]
        fn busy_time_is_the_union_in_any_order(
            ks in proptest::collection::vec((0i64..300, 0i64..40), 1..30),
        ) {
            let ranges = [range(50, 150, "a"), range(150, 260, "b")];
            let records = ks.iter().map(|(s, l)| k(0, *s, s + l, "x")).collect();
            let t = tables(&ranges, records, None);
            let covered = |lo: i64, hi: i64| {
                (lo..hi).filter(|t| ks.iter().any(|(s, l)| t >= s && *t < s + l)).count() as i64
            };
            let inside = |lo: i64, hi: i64| -> i64 {
                ks.iter().map(|(s, l)| ((s + l).min(hi) - (*s).max(lo)).max(0)).sum()
            };
            let busy = |p: &str| t.iter().find(|x| x.phase == p).map_or(0, |x| x.busy_ns.get());
            let total = |p: &str| t.iter().find(|x| x.phase == p).map_or(0, |x| x.total_ns.get());
            proptest::prop_assert_eq!(busy("(whole run)"), covered(0, 400));
            proptest::prop_assert_eq!(busy("a"), covered(50, 150));
            proptest::prop_assert_eq!(busy("b"), covered(150, 260));
            proptest::prop_assert_eq!(total("a"), inside(50, 150));
            proptest::prop_assert_eq!(
                busy("(outside phases)"),
                covered(0, 50) + covered(260, 400)
            );
        }

        /// The median is within 1.6 % of the exact nearest-rank median.
        #[test]
        fn median_is_close_to_exact(mut ds in proptest::collection::vec(1i64..10_000_000, 1..60)) {
            let t = tables(&[], ds.iter().map(|d| k(0, 0, *d, "a")).collect(), None);
            ds.sort_unstable();
            let exact = crate::phases::percentile(&ds, 0.5);
            let got = t[0].rows[0].p50_ns.get();
            proptest::prop_assert!((got - exact).abs() as f64 <= exact as f64 / 64.0 + 1.0, "{got} vs {exact}");
        }
    }
}
