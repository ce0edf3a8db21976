//! The gaps folded into the report one at a time: totals per device and phase, groups per
//! place, and the rows the report lists.

use super::types::{GapGroup, GapPiece, GapRow, GapTotals, PlaceKind};
use crate::gaps::Gap;
use crate::host::{self, HostFold};
use crate::phases::{Phases, Place, SegPhases, slot_paths, slots_of};
use cufall_trace::model::{DeviceId, Nanos};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

/// The order of [`Report::gaps`](super::Report::gaps): longest first, then by start and device
/// (a total order: a device's gaps never share a start).
fn longest_first(a: &GapRow, b: &GapRow) -> Ordering {
    b.duration_ns
        .cmp(&a.duration_ns)
        .then(a.start_ns.cmp(&b.start_ns))
        .then(a.device.cmp(&b.device))
}

/// A row in a heap of the longest gaps: the greatest is the one to give up first.
struct Longest(GapRow);

impl PartialEq for Longest {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Longest {}
impl PartialOrd for Longest {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Longest {
    fn cmp(&self, o: &Self) -> Ordering {
        longest_first(&self.0, &o.0)
    }
}

/// The rows a report lists: every gap, or the `n` longest.
enum KeptRows {
    Every(Vec<GapRow>),
    Longest(usize, BinaryHeap<Longest>),
}

impl KeptRows {
    fn keep(&mut self, row: GapRow) {
        match self {
            KeptRows::Every(v) => v.push(row),
            KeptRows::Longest(n, heap) => {
                if heap.len() < *n {
                    heap.push(Longest(row));
                } else if heap
                    .peek()
                    .is_some_and(|worst| longest_first(&row, &worst.0) == Ordering::Less)
                {
                    heap.pop();
                    heap.push(Longest(row));
                }
            }
        }
    }

    fn into_sorted(self) -> Vec<GapRow> {
        let mut rows = match self {
            KeptRows::Every(v) => v,
            KeptRows::Longest(_, heap) => heap.into_iter().map(|l| l.0).collect(),
        };
        rows.sort_unstable_by(longest_first);
        rows
    }
}

/// The gaps of one place, as they are folded in.
struct PlaceFold {
    label: Arc<str>,
    totals: GapTotals,
    max_ns: i64,
    devices: Vec<DeviceId>,
}

/// What [`GapFold`] ends with.
pub(super) struct FoldedGaps {
    /// Per device, the totals of each slot (phases, then the whole run).
    pub(super) totals: BTreeMap<DeviceId, Vec<GapTotals>>,
    /// Largest total first.
    pub(super) groups: Vec<GapGroup>,
    pub(super) rows: Vec<GapRow>,
    /// The host's frames per gap class, where the trace has host samples.
    pub(super) host: Option<Vec<host::HostClass>>,
}

/// The gaps folded in one at a time, so that no list of every gap is held: totals per device and
/// slot (phases, then the whole run, as in [`Cells`](super::cells::Cells)), totals per place,
/// and the listed rows.
pub(super) struct GapFold<'a> {
    phases: &'a Phases,
    index: &'a SegPhases,
    slots: usize,
    start_ns: i64,
    pub(super) count: u64,
    totals: BTreeMap<DeviceId, Vec<GapTotals>>,
    places: BTreeMap<Place, PlaceFold>,
    rows: KeptRows,
    /// The host samples of the gaps, where the trace has them.
    pub(super) host: Option<HostFold<'a>>,
}

impl<'a> GapFold<'a> {
    pub(super) fn new(
        phases: &'a Phases,
        index: &'a SegPhases,
        slots: usize,
        start_ns: i64,
        keep: Option<usize>,
    ) -> GapFold<'a> {
        GapFold {
            phases,
            index,
            slots,
            start_ns,
            count: 0,
            totals: BTreeMap::new(),
            places: BTreeMap::new(),
            rows: match keep {
                None => KeptRows::Every(Vec::new()),
                Some(n) => KeptRows::Longest(n, BinaryHeap::with_capacity(n.min(1 << 16) + 1)),
            },
            host: None,
        }
    }

    /// Counts `g`: each part in the phases covering it and in the whole run, each piece in its
    /// place, and the stretch among the rows.
    pub(super) fn add(&mut self, g: &Gap, each: &mut dyn FnMut(&GapRow)) {
        self.count += 1;
        let (slots, index) = (self.slots, self.index);
        let cells = self
            .totals
            .entry(g.device)
            .or_insert_with(|| vec![GapTotals::default(); slots]);
        // A slot's gap goes on while the parts stay in it: counted once, at its first part.
        let mut before: Vec<usize> = Vec::new();
        for part in &g.parts {
            let now: Vec<usize> = slots_of(index, part.segment, slots).collect();
            for slot in &now {
                let new_gap = !before.contains(slot);
                cells[*slot].add(part, new_gap);
                if let Some(h) = &mut self.host {
                    h.add_slot(*slot, part, new_gap);
                }
            }
            before = now;
        }
        let phases = self.phases;
        let mut pieces = Vec::with_capacity(1);
        for piece in g.pieces() {
            let place = self
                .places
                .entry(piece.place.clone())
                .or_insert_with(|| PlaceFold {
                    label: phases.label(&piece.place).into(),
                    totals: GapTotals::default(),
                    max_ns: 0,
                    devices: Vec::new(),
                });
            place.totals.add(&piece, true);
            place.max_ns = place.max_ns.max(piece.duration_ns());
            if !place.devices.contains(&g.device) {
                place.devices.push(g.device);
            }
            if let Some(h) = &mut self.host {
                h.add_place(&piece, &place.label);
            }
            let host_frames = self
                .host
                .as_ref()
                .and_then(|h| h.gap_host(&piece.place, piece.start_ns, piece.end_ns));
            pieces.push(GapPiece {
                start_ns: piece.start_ns,
                end_ns: piece.end_ns,
                duration_ns: Nanos(piece.duration_ns()),
                place: place.label.clone(),
                no_kernel_ns: piece.no_kernel_ns().map(Nanos),
                kernel_resident_ns: piece.kernel_resident_ns.map(Nanos),
                host: piece.host,
                host_frames,
            });
        }
        let place: Arc<str> = match pieces.as_slice() {
            [one] => one.place.clone(),
            many => many
                .iter()
                .map(|p| &*p.place)
                .collect::<Vec<&str>>()
                .join(" + ")
                .into(),
        };
        // The stretch's host: the launching thread of the place where most of it lies.
        let longest = g
            .pieces()
            .into_iter()
            .max_by_key(|p| p.duration_ns())
            .map(|p| p.place);
        let host_frames = self
            .host
            .as_ref()
            .and_then(|h| longest.and_then(|p| h.gap_host(&p, g.start_ns, g.end_ns)));
        let kernel_resident_ns = g.kernel_resident_ns();
        let row = GapRow {
            device: g.device,
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            offset_ns: Nanos(g.start_ns) - Nanos(self.start_ns),
            duration_ns: Nanos(g.duration_ns()),
            place,
            no_kernel_ns: kernel_resident_ns.map(|k| Nanos(g.duration_ns()) - Nanos(k)),
            kernel_resident_ns: kernel_resident_ns.map(Nanos),
            host: g.host(),
            host_frames,
            pieces,
        };
        each(&row);
        self.rows.keep(row);
    }

    pub(super) fn finish(self) -> FoldedGaps {
        let phases = self.phases;
        let path = |p: Option<usize>| p.map(|p| phases.phases[p].path.clone());
        let mut groups: Vec<GapGroup> = self
            .places
            .into_iter()
            .map(|(place, f)| {
                let mut devices = f.devices;
                devices.sort_unstable();
                let (kind, before, after) = match place {
                    Place::WholeRun => (PlaceKind::WholeRun, None, None),
                    Place::In(_) => (PlaceKind::In, None, None),
                    Place::Between(a, b) => (PlaceKind::Between, path(a), path(b)),
                };
                GapGroup {
                    place: f.label.to_string(),
                    kind,
                    before,
                    after,
                    mean_ns: Nanos(f.totals.total_ns.get() / f.totals.count.max(1) as i64),
                    max_ns: Nanos(f.max_ns),
                    totals: f.totals,
                    devices,
                }
            })
            .collect();
        groups.sort_by(|a, b| {
            b.totals
                .total_ns
                .cmp(&a.totals.total_ns)
                .then(a.place.cmp(&b.place))
        });
        FoldedGaps {
            totals: self.totals,
            groups,
            rows: self.rows.into_sorted(),
            host: self.host.map(|h| h.finish(&slot_paths(phases))),
        }
    }
}
