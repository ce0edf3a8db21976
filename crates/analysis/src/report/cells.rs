//! The inputs of each phase's statistics per device, folded in segment by segment as the
//! tables are read.

use crate::phases::{Phases, SegPhases, slots_of};
use crate::samples::SegAgg;
use cufall_trace::model::{DeviceId, DropRecord, NvmlRow};
use std::collections::BTreeMap;

pub(super) struct NvmlAgg {
    pub(super) power: (f64, u64),
    pub(super) sm: (f64, u64),
    pub(super) mem: (f64, u64),
    pub(super) util: (f64, u64),
}

impl NvmlAgg {
    fn new() -> Self {
        NvmlAgg {
            power: (0.0, 0),
            sm: (0.0, 0),
            mem: (0.0, 0),
            util: (0.0, 0),
        }
    }
    fn push(&mut self, r: &NvmlRow) {
        let add = |slot: &mut (f64, u64), v: Option<f64>| {
            if let Some(v) = v {
                slot.0 += v;
                slot.1 += 1;
            }
        };
        add(&mut self.power, r.power_w.map(f64::from));
        add(&mut self.sm, r.sm_clock_mhz.map(f64::from));
        add(&mut self.mem, r.mem_clock_mhz.map(f64::from));
        add(&mut self.util, r.gpu_util_pct.map(f64::from));
    }
}

pub(super) fn mean(slot: (f64, u64)) -> Option<f64> {
    (slot.1 > 0).then(|| slot.0 / slot.1 as f64)
}

/// Per device, the inputs of the statistics of each phase and of the whole run (the last slot):
/// sample totals, NVML readings and dropped time, folded in segment by segment as they are read,
/// so that memory follows devices × phases, not the number of segments.
pub(super) struct Cells {
    pub(super) index: SegPhases,
    /// Phases, plus one for the whole run.
    pub(super) slots: usize,
    pub(super) samples: BTreeMap<DeviceId, Vec<SegAgg>>,
    pub(super) nvml: BTreeMap<DeviceId, Vec<NvmlAgg>>,
    pub(super) dropped: BTreeMap<DeviceId, Vec<i64>>,
}

impl Cells {
    pub(super) fn new(phases: &Phases) -> Cells {
        Cells {
            index: SegPhases::build(phases),
            slots: phases.phases.len() + 1,
            samples: BTreeMap::new(),
            nvml: BTreeMap::new(),
            dropped: BTreeMap::new(),
        }
    }

    /// The slot of the whole run.
    pub(super) fn whole_run(&self) -> usize {
        self.slots - 1
    }

    pub(super) fn add_samples(&mut self, d: DeviceId, s: usize, agg: &SegAgg) {
        let n = self.slots;
        let cells = self
            .samples
            .entry(d)
            .or_insert_with(|| vec![SegAgg::default(); n]);
        for slot in slots_of(&self.index, s, n) {
            cells[slot].add(agg);
        }
    }

    /// Places NVML readings in the phases of their segments.
    pub(super) fn add_nvml(&mut self, phases: &Phases, nvml: &[NvmlRow]) {
        let n = self.slots;
        for r in nvml {
            let s = phases.segment_of(r.t_ns);
            let cells = self
                .nvml
                .entry(r.device)
                .or_insert_with(|| (0..n).map(|_| NvmlAgg::new()).collect());
            for slot in slots_of(&self.index, s, n) {
                cells[slot].push(r);
            }
        }
    }

    /// Places dropped time in the phases of the segments it spans.
    pub(super) fn add_drops(&mut self, phases: &Phases, drops: &[DropRecord]) {
        let n = self.slots;
        for dr in drops {
            let lo = phases.segment_of(dr.start_ns);
            let hi = phases.segment_of((dr.end_ns - 1).max(dr.start_ns));
            let cells = self.dropped.entry(dr.device).or_insert_with(|| vec![0; n]);
            for s in lo..=hi {
                let (a, b) = phases.segment_bounds(s, dr.start_ns, dr.end_ns);
                let part = (b.min(dr.end_ns) - a.max(dr.start_ns)).max(0);
                for slot in slots_of(&self.index, s, n) {
                    cells[slot] += part;
                }
            }
        }
    }

    /// The whole run's totals of device `d`.
    pub(super) fn run_of(&self, d: &DeviceId) -> Option<&SegAgg> {
        self.samples.get(d).map(|c| &c[self.slots - 1])
    }
}
