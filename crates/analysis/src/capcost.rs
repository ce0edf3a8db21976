//! What capture itself added to the program's host time, per phase: the events that fell in
//! each phase's ranges (NVTX ranges, kernel launches, copies, graph launches) times the cost
//! per event: the NVTX path's as the capture library measured it in the program at capture
//! start, the CUDA kinds' as `cufall record` measured them after the program in a calibration
//! process of its own (the trace's `capture_cost_*` rows, `docs/trace-format.md`).
//!
//! A phase step is one of its ranges. An event falls in a phase when it is inside one of the
//! phase's ranges: an NVTX range when both its ends are (each range is one event: a push/pop
//! pair, a start/end pair, or a mark, which costs a little less), GPU work when its GPU start
//! is (its launch was a little earlier, on the host). A kind with events in the phase and no measured cost makes the
//! phase's cost unknown, never 0; the calibrated kinds' part is still given. A recording made
//! before capture was calibrated has no cost rows: its cost is unknown everywhere.

use cufall_trace::model::{
    ActivityKind, CaptureEvent, CaptureEventKind, CostKind, KernelRecord, Nanos, NvtxRange,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// The kinds of event capture adds host time for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// An NVTX range or mark, through cufall's handlers.
    Nvtx,
    /// A kernel launch traced by CUPTI.
    Kernel,
    /// A copy or memset traced by CUPTI.
    Memcpy,
    /// A whole CUDA graph launch (`--capture graphs`).
    Graph,
    /// A kernel of a graph traced node by node (`--capture graph-nodes`).
    GraphNode,
}

const KINDS: [EventKind; 5] = [
    EventKind::Nvtx,
    EventKind::Kernel,
    EventKind::Memcpy,
    EventKind::Graph,
    EventKind::GraphNode,
];

impl EventKind {
    /// The kind of the `capture_cost_<kind>` rows that measure it.
    fn cost_kind(self) -> Option<CostKind> {
        match self {
            EventKind::Nvtx => Some(CostKind::Nvtx),
            EventKind::Kernel => Some(CostKind::Kernel),
            EventKind::Memcpy => Some(CostKind::Memcpy),
            EventKind::Graph => Some(CostKind::Graph),
            EventKind::GraphNode => Some(CostKind::GraphNode),
        }
    }

    /// The kind for people, plural.
    pub fn plural(self) -> &'static str {
        match self {
            EventKind::Nvtx => "NVTX ranges",
            EventKind::Kernel => "kernel launches",
            EventKind::Memcpy => "copies",
            EventKind::Graph => "graph launches",
            EventKind::GraphNode => "graph nodes traced one by one",
        }
    }

    fn of_activity(k: &KernelRecord) -> EventKind {
        match k.kind {
            ActivityKind::Kernel if k.graph_id.is_some_and(|g| g != 0) => EventKind::GraphNode,
            ActivityKind::Kernel => EventKind::Kernel,
            ActivityKind::Memcpy | ActivityKind::Memset => EventKind::Memcpy,
            ActivityKind::Graph => EventKind::Graph,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One kind's cost per event, as the processes that measured it said.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindCost {
    pub kind: EventKind,
    /// Nanoseconds per event, the mean over the processes that measured it; `None`: unknown.
    pub ns_per_event: Option<f64>,
    /// Processes that measured it.
    pub processes: usize,
    /// How it was measured, or why it is unknown (the first row's detail).
    pub detail: String,
}

/// What capture added in one phase (or the whole run, for a recording without phases).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseCost {
    pub path: String,
    /// Ranges of the phase (0 for the whole run).
    pub steps: u64,
    /// The phase's host time: its ranges' summed durations (the run's length for the whole
    /// run).
    pub host_ns: Nanos,
    /// Events that fell in the phase's ranges, by kind.
    pub events: BTreeMap<EventKind, u64>,
    /// Added host time of the kinds with a measured cost.
    pub known_ns: f64,
    /// Added host time in all; `None` when a kind with events here has no measured cost.
    pub added_ns: Option<f64>,
    /// [`PhaseCost::added_ns`] per step.
    pub per_step_ns: Option<f64>,
    /// [`PhaseCost::added_ns`] over [`PhaseCost::host_ns`].
    pub host_fraction: Option<f64>,
    /// Kinds with events here and no measured cost.
    pub unknown: Vec<EventKind>,
}

/// The capture cost section of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureCost {
    /// The trace has cost rows at all (false: recorded before capture was calibrated).
    pub calibrated: bool,
    /// Every kind with events in the recording or a cost row.
    pub kinds: Vec<KindCost>,
    /// Phases with events, in tree order; the whole run alone when there are no phases.
    pub phases: Vec<PhaseCost>,
}

/// Events per slot (phases, then the whole run last) and kind, counted as the report reads
/// the tables.
#[derive(Clone, Debug)]
pub struct Counts {
    per_slot: Vec<[u64; KINDS.len()]>,
}

impl Counts {
    pub fn new(slots: usize) -> Counts {
        Counts {
            per_slot: vec![[0; KINDS.len()]; slots],
        }
    }

    fn add(&mut self, slots: impl Iterator<Item = usize>, kind: EventKind) {
        for s in slots {
            if let Some(c) = self.per_slot.get_mut(s) {
                c[kind.index()] += 1;
            }
        }
    }

    /// Counts an NVTX range in the slots both its start and its end fall in: a range that
    /// begins where its first child begins is in the parent's phase, not the child's.
    pub fn add_range<I: Iterator<Item = usize>>(
        &mut self,
        r: &NvtxRange,
        slots: impl Fn(i64) -> I,
    ) {
        let last = (r.end_ns - 1).max(r.start_ns);
        let at_end: Vec<usize> = slots(last).collect();
        self.add(
            slots(r.start_ns).filter(|s| at_end.contains(s)),
            EventKind::Nvtx,
        );
    }

    /// Counts GPU work in the slots its GPU start falls in.
    pub fn add_activity<I: Iterator<Item = usize>>(
        &mut self,
        k: &KernelRecord,
        slots: impl Fn(i64) -> I,
    ) {
        self.add(slots(k.start_ns), EventKind::of_activity(k));
    }

    fn of(&self, slot: usize) -> BTreeMap<EventKind, u64> {
        let Some(c) = self.per_slot.get(slot) else {
            return BTreeMap::new();
        };
        KINDS
            .iter()
            .filter(|k| c[k.index()] > 0)
            .map(|k| (*k, c[k.index()]))
            .collect()
    }
}

/// Each kind's cost from the `capture_cost_*` rows (other rows are ignored).
pub fn kind_costs(events: &[CaptureEvent]) -> Vec<KindCost> {
    KINDS
        .iter()
        .filter_map(|kind| {
            let cost = kind.cost_kind()?;
            let row = |measured| CaptureEventKind::Cost {
                kind: cost,
                measured,
            };
            // A row that says 0 ns measured nothing: read as unknown.
            let ok: Vec<&CaptureEvent> = events
                .iter()
                .filter(|e| e.is(row(true)) && e.count > 0)
                .collect();
            let bad = events.iter().find(|e| e.is(row(false)));
            if ok.is_empty() {
                return bad.map(|b| KindCost {
                    kind: *kind,
                    ns_per_event: None,
                    processes: 0,
                    detail: b.detail.clone(),
                });
            }
            let mean = ok.iter().map(|e| e.count as f64).sum::<f64>() / ok.len() as f64;
            Some(KindCost {
                kind: *kind,
                ns_per_event: Some(mean),
                processes: ok.len(),
                detail: ok[0].detail.clone(),
            })
        })
        .collect()
}

/// What the cost of a phase is counted over: its path, its ranges (steps) and their time.
#[derive(Clone, Copy, Debug)]
pub struct PhaseSteps<'a> {
    pub path: &'a str,
    pub count: u64,
    pub total_ns: Nanos,
}

/// The section, from the costs and the counts; `None` when the recording has no captured
/// events (no program, or nothing captured).
pub fn build(
    costs: Vec<KindCost>,
    counts: &Counts,
    phases: &[PhaseSteps<'_>],
    whole_run: &PhaseSteps<'_>,
) -> Option<CaptureCost> {
    let whole_slot = counts.per_slot.len().checked_sub(1)?;
    let all = counts.of(whole_slot);
    if all.is_empty() {
        return None;
    }
    let calibrated = !costs.is_empty();
    let cost_of = |k: EventKind| {
        costs
            .iter()
            .find(|c| c.kind == k)
            .and_then(|c| c.ns_per_event)
    };
    let phase_cost = |path: &str, steps: u64, host_ns: Nanos, events: BTreeMap<EventKind, u64>| {
        let mut known_ns = 0.0;
        let mut unknown = Vec::new();
        for (k, n) in &events {
            match cost_of(*k) {
                Some(c) => known_ns += c * *n as f64,
                None => unknown.push(*k),
            }
        }
        let added_ns = unknown.is_empty().then_some(known_ns);
        PhaseCost {
            path: path.to_string(),
            steps,
            host_ns,
            events,
            known_ns,
            added_ns,
            per_step_ns: added_ns.filter(|_| steps > 0).map(|a| a / steps as f64),
            host_fraction: added_ns
                .filter(|_| host_ns > Nanos::ZERO)
                .map(|a| a / host_ns.as_f64()),
            unknown,
        }
    };
    let rows: Vec<PhaseCost> = if phases.is_empty() {
        vec![phase_cost(
            whole_run.path,
            0,
            whole_run.total_ns,
            all.clone(),
        )]
    } else {
        phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.count > 0)
            .map(|(i, p)| (p, counts.of(i)))
            .filter(|(_, events)| !events.is_empty())
            .map(|(p, events)| phase_cost(p.path, p.count, p.total_ns, events))
            .collect()
    };
    let mut kinds = costs;
    for k in all.keys() {
        if !kinds.iter().any(|c| c.kind == *k) {
            kinds.push(KindCost {
                kind: *k,
                ns_per_event: None,
                processes: 0,
                detail: if calibrated {
                    "no process measured it".into()
                } else {
                    "recorded before capture was calibrated".into()
                },
            });
        }
    }
    kinds.sort_by_key(|c| c.kind);
    Some(CaptureCost {
        calibrated,
        kinds,
        phases: rows,
    })
}
