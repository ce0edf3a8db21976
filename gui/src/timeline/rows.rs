//! The rows of the timeline, in order: NVTX lanes of each recording, then per GPU a title row,
//! each metric (of recording A, then of B right below it, so differences line up), kernels,
//! NVML power, SM clock and NVML utilisation; and the height each takes.

use crate::model::Locked;
use crate::tables::{NVML_POWER, NVML_SM_CLOCK, NVML_UTIL};
use crate::view::{Settings, TrackStyle};
use cufall_trace::model::DeviceId;

const LANE_H: f32 = 18.0;
const NVML_H: f32 = 22.0;

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
            NvmlField::Power => "power (W)",
            NvmlField::SmClock => "SM clock (MHz)",
            NvmlField::GpuUtil => "NVML util % (nvidia-smi)",
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
    /// A title line above each GPU's rows.
    Device {
        dev: DeviceId,
    },
}

impl Row {
    pub fn height(&self, settings: &Settings) -> f32 {
        match self {
            Row::Nvtx { .. } => LANE_H,
            Row::Metric { .. } => match settings.style {
                TrackStyle::Heat => settings.track_height,
                TrackStyle::Line => settings.track_height * 1.6,
            },
            Row::Kernels { .. } => LANE_H,
            Row::Nvml { .. } => NVML_H,
            Row::Device { .. } => 18.0,
        }
    }
}

/// The rows to draw, in order.
pub fn rows(traces: &[Locked<'_>], settings: &Settings) -> Vec<Row> {
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
    let mut devices: Vec<DeviceId> = traces
        .iter()
        .flat_map(|t| t.slot.data.devices.iter().copied())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        out.push(Row::Device { dev });
        let metrics = traces
            .iter()
            .map(|t| t.slot.data.metrics.len())
            .max()
            .unwrap_or(0);
        for m in 0..metrics {
            for (ti, t) in traces.iter().enumerate() {
                if m < t.slot.data.metrics.len() && t.slot.data.devices.contains(&dev) {
                    out.push(Row::Metric { ti, dev, m });
                }
            }
        }
        if settings.show_kernels {
            for (ti, t) in traces.iter().enumerate() {
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
                for (ti, t) in traces.iter().enumerate() {
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
