//! The rows of the timeline, in order: NVTX lanes of each recording, then per GPU a group: a title
//! row, each metric (of recording A, then of B right below it, so differences line up), kernels,
//! NVML power, SM clock and NVML utilisation; a folded group is its title row alone, which then
//! shows the GPU's first metric. Recordings of the nodes of one run on the wall clock have a group
//! per node and GPU instead ([`GpuGroup`]), node after node. The sampled host threads of each
//! recording come between the NVTX lanes and the GPUs, under a title that folds them. And how each
//! row may be sized ([`Fit`]), for [`super::layout::share_heights`].

use super::layout::Fit;
use crate::loaded::Locked;
use crate::tables::{NVML_POWER, NVML_SM_CLOCK, NVML_UTIL};
use crate::view::{GpuGroup, Settings, TrackStyle};
use cufall_trace::model::DeviceId;
use std::collections::BTreeSet;

/// NVTX and kernel lanes: one line of boxes with their names.
const LANE: Fit = Fit::fixed(18.0);
/// The title of an open group.
const TITLE: Fit = Fit::fixed(18.0);
/// A folded group: the title with the GPU's first metric as a heat strip.
const FOLDED: Fit = Fit::flexible(24.0, 40.0, 0.6);
/// A metric drawn as a heat strip: colour needs little height, but its scale and the value at
/// the cursor are two lines of the label.
const HEAT: Fit = Fit::flexible(24.0, 40.0, 1.0);
/// A metric drawn as an area chart: compact, about 48 points (a line needs more than a strip
/// to be read; the label holds the scale and the value at the cursor).
const LINE: Fit = Fit::flexible(32.0, 48.0, 1.0);
/// An NVML line: context beside the counters, so it takes less of the height.
const NVML: Fit = Fit::flexible(22.0, 34.0, 0.7);
/// One stack level of a host thread's flame chart.
pub const HOST_LEVEL_H: f32 = 12.0;
/// The deepest stack level a flame chart draws (the hover shows the whole stack).
pub const HOST_LEVELS_MAX: usize = 16;
/// The tallest a track can be dragged.
pub const RESIZE_MAX: f32 = 480.0;

/// An NVML value shown as a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlField {
    Power,
    SmClock,
    GpuUtil,
}

impl NvmlField {
    pub const ALL: [NvmlField; 3] = [NvmlField::Power, NvmlField::SmClock, NvmlField::GpuUtil];

    pub fn title(self) -> &'static str {
        match self {
            NvmlField::Power => "power",
            NvmlField::SmClock => "SM clock",
            NvmlField::GpuUtil => "NVML util (nvidia-smi)",
        }
    }

    /// After a value: ` W`, ` MHz`, ` %`.
    pub fn unit(self) -> &'static str {
        match self {
            NvmlField::Power => " W",
            NvmlField::SmClock => " MHz",
            NvmlField::GpuUtil => " %",
        }
    }

    /// Its column in [`crate::tables::DeviceNvml::series`].
    pub fn column(self) -> usize {
        match self {
            NvmlField::Power => NVML_POWER,
            NvmlField::SmClock => NVML_SM_CLOCK,
            NvmlField::GpuUtil => NVML_UTIL,
        }
    }
}

/// One row of the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Row {
    Nvtx {
        ti: usize,
        lane: usize,
    },
    Metric {
        ti: usize,
        dev: DeviceId,
        m: usize,
    },
    Kernels {
        ti: usize,
        dev: DeviceId,
    },
    Nvml {
        ti: usize,
        dev: DeviceId,
        field: NvmlField,
    },
    /// The title line of each GPU's group; a click folds or unfolds the group.
    Device {
        group: GpuGroup,
        folded: bool,
    },
    /// The title line of a recording's sampled host threads; a click folds or unfolds them.
    HostTitle {
        ti: usize,
        folded: bool,
    },
    /// One sampled host thread: index into the recording's [`crate::host_threads::HostStacks::threads`];
    /// `open`: a flame chart (a level per stack depth, outermost on top), else one lane of the
    /// innermost frame. A click on its label opens or closes it.
    Host {
        ti: usize,
        thread: usize,
        open: bool,
    },
}

impl Row {
    /// How the row may be sized, before any height the user gave it.
    pub fn base_fit(&self, settings: &Settings) -> Fit {
        match self {
            Row::Nvtx { .. } | Row::Kernels { .. } | Row::Host { open: false, .. } => LANE,
            // The real height depends on the thread's stack depth ([`Row::fit`]).
            Row::Host { open: true, .. } => Fit::fixed(HOST_LEVEL_H * 2.0 + 2.0),
            Row::HostTitle { .. } => TITLE,
            Row::Metric { .. } => match settings.style {
                TrackStyle::Heat => HEAT,
                TrackStyle::Line => LINE,
            },
            Row::Nvml { .. } => NVML,
            Row::Device { folded: false, .. } => TITLE,
            Row::Device { folded: true, .. } => FOLDED,
        }
    }

    /// How the row may be sized: a track the user resized keeps the height given
    /// ([`Settings::track_heights`]); the others share the rest.
    pub fn fit(&self, traces: &[Locked<'_>], settings: &Settings) -> Fit {
        if let Row::Host {
            ti,
            thread,
            open: true,
        } = *self
        {
            let depth = traces
                .get(ti)
                .and_then(|t| t.s.tables.as_ref())
                .and_then(|tb| tb.host.threads.get(thread))
                .map_or(1, |th| th.max_depth.clamp(1, HOST_LEVELS_MAX));
            // Two levels at least: the label's two lines.
            return Fit::fixed(HOST_LEVEL_H * depth.max(2) as f32 + 2.0);
        }
        let base = self.base_fit(settings);
        match self
            .resize_key(traces)
            .and_then(|k| settings.track_heights.get(&k))
        {
            Some(&h) if h.is_finite() => Fit::fixed(h.clamp(base.min, RESIZE_MAX)),
            _ => base,
        }
    }

    /// The name under which a track's height is kept when the user drags its bottom edge:
    /// the metric (or NVML field), so that the metric's tracks on every GPU and in both
    /// recordings stay alike; `None` for rows of fixed height.
    pub fn resize_key(&self, traces: &[Locked<'_>]) -> Option<String> {
        match self {
            Row::Metric { ti, m, .. } => traces
                .get(*ti)?
                .slot
                .data
                .metrics
                .get(*m)
                .map(|info| format!("metric {}", info.name)),
            Row::Nvml { field, .. } => Some(format!("nvml {}", field.title())),
            Row::Device { folded: true, .. } => Some("folded GPU".into()),
            Row::Nvtx { .. }
            | Row::Kernels { .. }
            | Row::Device { folded: false, .. }
            | Row::HostTitle { .. }
            | Row::Host { .. } => None,
        }
    }
}

/// Every GPU of the open recordings, in order.
pub fn devices(traces: &[Locked<'_>]) -> Vec<DeviceId> {
    let mut devices: Vec<DeviceId> = traces
        .iter()
        .flat_map(|t| t.slot.data.devices.iter().copied())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    devices
}

/// The GPU groups, in order: per GPU of every recording, or with `per_node` (the nodes of one
/// run) per recording and GPU, recording after recording.
pub fn groups(traces: &[Locked<'_>], per_node: bool) -> Vec<GpuGroup> {
    if !per_node {
        return devices(traces).into_iter().map(GpuGroup::all).collect();
    }
    traces
        .iter()
        .enumerate()
        .flat_map(|(ti, t)| {
            t.slot
                .data
                .devices
                .iter()
                .map(move |&dev| GpuGroup { ti: Some(ti), dev })
        })
        .collect()
}

/// Which host rows are folded: the recordings whose threads are folded into their title, and
/// the threads (recording, pid, tid) drawn as flame charts.
pub type HostOpen<'a> = (&'a BTreeSet<usize>, &'a BTreeSet<(usize, u32, u32)>);

/// A recording with more sampled host threads than this starts with them folded.
pub const HOST_OPEN_MAX: usize = 8;

/// How many host threads recording `ti` sampled.
pub fn host_threads(traces: &[Locked<'_>], ti: usize) -> usize {
    traces
        .get(ti)
        .and_then(|t| t.s.tables.as_ref())
        .map_or(0, |tb| tb.host.threads.len())
}

/// Whether a thread is one of cufall's own (its sampler, CUPTI and capture threads run inside
/// the profiled process): hidden unless [`Settings::show_cufall_threads`].
pub fn is_cufall_thread(name: &str) -> bool {
    name.starts_with("cufall-") || name.starts_with("cufall_")
}

/// The host threads of recording `ti` the rows show (indices into its threads): all, or all but
/// cufall's own; and how many of cufall's were left out.
pub fn shown_threads(traces: &[Locked<'_>], ti: usize, settings: &Settings) -> (Vec<usize>, usize) {
    let Some(tb) = traces.get(ti).and_then(|t| t.s.tables.as_ref()) else {
        return (Vec::new(), 0);
    };
    let mut hidden = 0;
    let shown = (0..tb.host.threads.len())
        .filter(|&i| {
            let own = is_cufall_thread(&tb.host.threads[i].name);
            hidden += usize::from(own && !settings.show_cufall_threads);
            settings.show_cufall_threads || !own
        })
        .collect();
    (shown, hidden)
}

/// The rows to draw, in order; the GPU groups in `folded` are their title row alone, and so
/// are the host threads of the recordings in `host.0`; the threads in `host.1` (recording,
/// pid, tid) are flame charts; `per_node`: a group per recording and GPU ([`groups`]).
pub fn rows(
    traces: &[Locked<'_>],
    settings: &Settings,
    (folded, host): (&BTreeSet<GpuGroup>, HostOpen<'_>),
    per_node: bool,
) -> Vec<Row> {
    let (host_folded, open_threads) = host;
    let mut out = Vec::new();
    if settings.show_nvtx {
        for (ti, t) in traces.iter().enumerate() {
            if let Some(tables) = &t.s.tables {
                for lane in 0..tables.lanes.lanes.len() {
                    out.push(Row::Nvtx { ti, lane });
                }
            }
        }
    }
    // The host threads under the phases: what the program did on the CPU, above the GPUs.
    for ti in 0..traces.len() {
        let (shown, _) = shown_threads(traces, ti, settings);
        if shown.is_empty() {
            continue;
        }
        let fold = host_folded.contains(&ti);
        out.push(Row::HostTitle { ti, folded: fold });
        if fold {
            continue;
        }
        let Some(tb) = traces[ti].s.tables.as_ref() else {
            continue;
        };
        for thread in shown {
            let th = &tb.host.threads[thread];
            let open = open_threads.contains(&(ti, th.pid, th.tid));
            out.push(Row::Host { ti, thread, open });
        }
    }
    for group in groups(traces, per_node) {
        let fold = folded.contains(&group);
        out.push(Row::Device {
            group,
            folded: fold,
        });
        if fold {
            continue;
        }
        let dev = group.dev;
        // The recordings whose tracks the group holds: every one, or its node's.
        let members = || {
            traces
                .iter()
                .enumerate()
                .filter(move |(ti, _)| group.holds(*ti))
        };
        let metrics = members()
            .map(|(_, t)| t.slot.data.metrics.len())
            .max()
            .unwrap_or(0);
        for m in 0..metrics {
            for (ti, t) in members() {
                if m < t.slot.data.metrics.len() && t.slot.data.devices.contains(&dev) {
                    out.push(Row::Metric { ti, dev, m });
                }
            }
        }
        if settings.show_kernels {
            for (ti, t) in members() {
                let has =
                    t.s.tables
                        .as_ref()
                        .is_some_and(|tb| tb.kernels.contains_key(&dev));
                if has {
                    out.push(Row::Kernels { ti, dev });
                }
            }
        }
        if settings.show_nvml {
            for field in NvmlField::ALL {
                for (ti, t) in members() {
                    let has =
                        t.s.tables.as_ref().is_some_and(|tb| {
                            tb.nvml.get(&dev).is_some_and(|n| n.has(field.column()))
                        });
                    if has {
                        out.push(Row::Nvml { ti, dev, field });
                    }
                }
            }
        }
    }
    out
}
