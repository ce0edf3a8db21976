//! The NVML side channel: power, clocks, NVML's own utilisation (what nvidia-smi shows), memory,
//! temperature and throttle reasons of each sampled device, polled at its own rate, so the honest
//! counters can be shown beside the numbers people know.

use cufall_trace::model::{DeviceId, NvmlRow};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Why NVML cannot be polled.
#[derive(Debug, thiserror::Error)]
pub enum NvmlOpenError {
    #[error(
        "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) could not be initialised: {source}"
    )]
    Init {
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    #[error("NVML does not know {device} ({uuid}): {source}")]
    UnknownDevice {
        device: DeviceId,
        uuid: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
}

/// An initialised NVML and the NVML indices of the devices to poll.
pub struct NvmlSource {
    nvml: Nvml,
    /// (trace device id, NVML index)
    devices: Vec<(DeviceId, u32)>,
    pub driver_version: Option<String>,
}

impl NvmlSource {
    /// Initialises NVML and maps each CUDA device (by UUID, falling back to the same index) to
    /// its NVML handle. Errors say why NVML is unavailable.
    pub fn open(devices: &[(DeviceId, String)]) -> Result<Self, NvmlOpenError> {
        let nvml = Nvml::init().map_err(|source| NvmlOpenError::Init { source })?;
        let mut mapped = Vec::new();
        for (id, uuid) in devices {
            let idx = nvml
                .device_by_uuid(uuid.as_str())
                .and_then(|d| d.index())
                .or_else(|_| nvml.device_by_index(id.0).and_then(|d| d.index()))
                .map_err(|source| NvmlOpenError::UnknownDevice {
                    device: *id,
                    uuid: uuid.clone(),
                    source,
                })?;
            mapped.push((*id, idx));
        }
        let driver_version = nvml.sys_driver_version().ok();
        Ok(NvmlSource {
            nvml,
            devices: mapped,
            driver_version,
        })
    }

    /// One reading of every device; fields NVML cannot give are `None`.
    pub fn read(&self) -> Vec<NvmlRow> {
        let t_ns = crate::now_unix_ns();
        self.devices
            .iter()
            .filter_map(|(id, idx)| {
                let d = self.nvml.device_by_index(*idx).ok()?;
                let util = d.utilization_rates().ok();
                Some(NvmlRow {
                    device: *id,
                    t_ns,
                    power_w: d.power_usage().ok().map(|mw| mw as f32 / 1000.0),
                    sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                    mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
                    gpu_util_pct: util.as_ref().map(|u| u.gpu),
                    mem_util_pct: util.as_ref().map(|u| u.memory),
                    mem_used_bytes: d.memory_info().ok().map(|m| m.used),
                    temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
                    throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
                })
            })
            .collect()
    }

    /// Polls every `interval` until `stop`, handing each reading to `sink`.
    pub fn poll(
        self,
        interval: Duration,
        stop: Arc<AtomicBool>,
        mut sink: impl FnMut(Vec<NvmlRow>),
    ) {
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let rows = self.read();
            if !rows.is_empty() {
                sink(rows);
            }
            next += interval;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now; // fell behind (slow NVML): do not burst to catch up
            }
        }
    }
}
