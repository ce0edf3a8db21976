//! Each phase's statistics over its devices and its verdict, and the notes on the whole report.

use super::cells::{Cells, mean};
use super::types::{
    BUSY_BELOW, GapTotals, HOST_BOUND_FROM, HostShares, Note, PhaseDevice, PhaseReport, Stat,
    Verdict,
};
use crate::phases::{self, Phases};
use crate::samples::{Activity, SegAgg};
use crate::select::PhaseSelect;
use cufall_trace::model::{DeviceId, DropRecord, Nanos};
use std::collections::BTreeMap;

pub(super) struct Ctx<'a> {
    pub(super) devices: &'a [DeviceId],
    pub(super) cells: &'a Cells,
    /// Gap totals per device and slot.
    pub(super) gaps: &'a BTreeMap<DeviceId, Vec<GapTotals>>,
    pub(super) metrics: &'a [String],
    pub(super) activity: Option<&'a Activity>,
    pub(super) kernels_captured: bool,
    pub(super) min_gap_ns: i64,
}

impl Ctx<'_> {
    /// The whole run as one phase of `duration_ns`.
    pub(super) fn whole_run_report(&self, duration_ns: i64) -> PhaseReport {
        self.phase_report(
            "(whole run)",
            "(whole run)",
            0,
            &[duration_ns.max(0)],
            self.cells.whole_run(),
        )
    }

    /// One report per phase, in tree order.
    pub(super) fn phase_reports(&self, phases: &Phases) -> Vec<PhaseReport> {
        phases
            .phases
            .iter()
            .enumerate()
            .map(|(slot, p)| self.phase_report(&p.path, &p.name, p.depth, &p.durations_ns, slot))
            .collect()
    }

    fn phase_report(
        &self,
        path: &str,
        name: &str,
        depth: usize,
        durations: &[i64],
        slot: usize,
    ) -> PhaseReport {
        let mut devs = Vec::with_capacity(self.devices.len());
        let (mut idle_all, mut sampled_all) = (0i64, 0i64);
        let mut gaps_all = GapTotals::default();
        for d in self.devices {
            let empty = SegAgg::default();
            let agg = self.cells.samples.get(d).map_or(&empty, |c| &c[slot]);
            let nv = self.cells.nvml.get(d).map(|c| &c[slot]);
            let dropped = self.cells.dropped.get(d).map_or(0, |c| c[slot]);
            let n = agg.samples;
            let stat = |i: usize, name: &str| Stat {
                name: name.to_string(),
                mean: agg.mean(i),
                peak: agg.peak(i),
            };
            let metrics: Vec<Stat> = self
                .metrics
                .iter()
                .enumerate()
                .map(|(i, m)| stat(i, m))
                .collect();
            let label = self
                .activity
                .map_or("activity".to_string(), Activity::label);
            let activity = stat(self.metrics.len(), &label);
            let mut gaps = GapTotals::default();
            if self.kernels_captured {
                gaps.no_kernel_ns = Some(Nanos::ZERO);
                gaps.kernel_resident_ns = Some(Nanos::ZERO);
            }
            if let Some(t) = self.gaps.get(d).and_then(|t| t.get(slot)) {
                gaps.merge(t);
            }
            idle_all += agg.idle_ns;
            sampled_all += agg.sampled_ns;
            gaps_all.merge(&gaps);
            devs.push(PhaseDevice {
                device: *d,
                samples: n,
                sampled_ns: Nanos(agg.sampled_ns),
                idle_ns: Nanos(agg.idle_ns),
                unknown_ns: Nanos(agg.unknown_ns),
                idle_fraction: (agg.sampled_ns > 0)
                    .then(|| agg.idle_ns as f64 / agg.sampled_ns as f64),
                dropped_ns: Nanos(dropped),
                activity,
                metrics,
                power_w: nv.and_then(|n| mean(n.power)),
                sm_clock_mhz: nv.and_then(|n| mean(n.sm)),
                mem_clock_mhz: nv.and_then(|n| mean(n.mem)),
                nvml_gpu_util_pct: nv.and_then(|n| mean(n.util)),
                gaps,
            });
        }
        let idle_fraction = (sampled_all > 0).then(|| idle_all as f64 / sampled_all as f64);
        let all_unknown = sampled_all == 0 && devs.iter().any(|d| d.unknown_ns > Nanos::ZERO);
        PhaseReport {
            path: path.to_string(),
            name: name.to_string(),
            depth,
            count: durations.len() as u64,
            total_ns: Nanos(durations.iter().sum()),
            p50_ns: Nanos(phases::percentile(durations, 0.5)),
            p99_ns: Nanos(phases::percentile(durations, 0.99)),
            devices: devs,
            idle_fraction,
            verdict: if self.activity.is_none() {
                Verdict::NotMeasured
            } else if all_unknown {
                Verdict::ValuesUnknown
            } else {
                verdict(
                    idle_fraction,
                    &gaps_all,
                    self.kernels_captured,
                    Nanos(self.min_gap_ns),
                )
            },
        }
    }
}

/// The verdict of a phase from its idle fraction and gap totals.
fn verdict(idle: Option<f64>, gaps: &GapTotals, kernels: bool, min_gap_ns: Nanos) -> Verdict {
    let Some(idle_fraction) = idle else {
        return Verdict::NoSamples;
    };
    if idle_fraction < BUSY_BELOW {
        return Verdict::Busy { idle_fraction };
    }
    if gaps.total_ns == Nanos::ZERO {
        return Verdict::ShortStalls {
            idle_fraction,
            min_gap_ns,
        };
    }
    if !kernels {
        return Verdict::CauseUnknown { idle_fraction };
    }
    let total = gaps.total_ns.as_f64();
    let no_kernel_fraction = gaps.no_kernel_ns.unwrap_or(Nanos::ZERO).as_f64() / total;
    if no_kernel_fraction >= HOST_BOUND_FROM {
        let host = gaps.host.map(|h| HostShares {
            in_sync: h.in_sync_ns.as_f64() / total,
            in_launch: h.in_launch_ns.as_f64() / total,
            outside_cuda: (gaps.total_ns.get() - h.in_sync_ns.get() - h.in_launch_ns.get()).max(0)
                as f64
                / total,
        });
        Verdict::HostBound {
            idle_fraction,
            no_kernel_fraction,
            host,
        }
    } else if no_kernel_fraction <= 1.0 - HOST_BOUND_FROM {
        Verdict::LatencyBound {
            idle_fraction,
            kernel_resident_fraction: 1.0 - no_kernel_fraction,
        }
    } else {
        Verdict::Mixed {
            idle_fraction,
            no_kernel_fraction,
        }
    }
}

impl Ctx<'_> {
    /// The remarks about the whole report: [`notes`], then samples lacking a value and phases of
    /// several processes that overlap.
    pub(super) fn notes(
        &self,
        phases: &Phases,
        nvtx_chosen_by: Option<&PhaseSelect>,
        m: &cufall_trace::model::Manifest,
        drops: &[DropRecord],
        overlap: Option<(i64, Vec<u32>)>,
    ) -> Vec<Note> {
        let no_counters = self
            .activity
            .is_none()
            .then(|| m.counters_unavailable.clone());
        notes(
            phases,
            nvtx_chosen_by,
            no_counters,
            self.kernels_captured,
            drops,
        )
        .into_iter()
        .chain(raw_counter(self.activity, m))
        .chain(unknown_values(self.devices, self.cells, self.activity))
        .chain(overlap_note(overlap))
        .collect()
    }
}

/// The remarks about the whole report; `no_counters` holds the recorder's reason when the
/// recording has no GPU counters.
fn notes(
    phases: &Phases,
    nvtx_chosen_by: Option<&PhaseSelect>,
    no_counters: Option<Option<String>>,
    kernels_captured: bool,
    drops: &[DropRecord],
) -> Vec<Note> {
    let mut notes = Vec::new();
    if phases.is_empty() {
        notes.push(match nvtx_chosen_by {
            None => Note::NoNvtx,
            Some(sel) => Note::NoPhasesChosen {
                phases: sel.to_string(),
            },
        });
    }
    if let Some(why) = no_counters {
        notes.push(Note::NoCounters { why });
    }
    if !kernels_captured {
        notes.push(Note::NoKernels);
    }
    if !drops.is_empty() {
        notes.push(Note::Drops {
            count: drops.len() as u64,
            dropped_ns: drops
                .iter()
                .map(|d| Nanos((d.end_ns - d.start_ns).max(0)))
                .sum(),
        });
    }
    notes
}

/// The note on an activity metric that is a bare counter recorded without its percentage of
/// peak, if it is one.
fn raw_counter(activity: Option<&Activity>, m: &cufall_trace::model::Manifest) -> Option<Note> {
    let a = activity?;
    let recorded = |name: &str| {
        m.sampling
            .as_ref()
            .is_some_and(|s| s.metrics.iter().any(|i| i.name == name))
    };
    (cufall_trace::model::peak::is_bare_counter(&a.metric)
        && !recorded(&cufall_trace::model::peak::percent_column(&a.metric)))
    .then(|| Note::RawCounter {
        metric: a.metric.clone(),
        denominator: a.denominator.clone(),
    })
}

/// The note on samples lacking a value the idle test needs, if any has.
fn unknown_values(
    devices: &[DeviceId],
    cells: &Cells,
    activity: Option<&Activity>,
) -> Option<Note> {
    let (unknown, unknown_ns) = devices
        .iter()
        .filter_map(|d| cells.run_of(d))
        .fold((0, 0), |(n, t), a| (n + a.unknown, t + a.unknown_ns));
    let a = activity.filter(|_| unknown > 0)?;
    Some(Note::UnknownValues {
        samples: unknown,
        unknown_ns: Nanos(unknown_ns),
        metrics: std::iter::once(&a.metric)
            .chain(&a.denominator)
            .chain(&a.also_low)
            .cloned()
            .collect(),
    })
}

/// The note on what bad input left out: phases of several processes that overlap.
fn overlap_note(overlap: Option<(i64, Vec<u32>)>) -> Option<Note> {
    overlap.map(|(overlap_ns, processes)| Note::OverlappingProcesses {
        processes,
        overlap_ns: Nanos(overlap_ns),
    })
}
