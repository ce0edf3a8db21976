//! PM sampling of one device: the GPU samples its performance counters at a fixed GPU-time
//! interval into a hardware buffer; [`PmSampler::decode`] moves records from that buffer into a
//! host-side [`CounterData`] image, whose samples [`crate::ProfilerHost::evaluate`] turns into
//! metric values.
//!
//! Two traps, measured on an H200 (see `docs/metrics.md`):
//! - When decode stops with [`DecodeStop::CounterDataFull`], the records that did not fit are
//!   gone and `overflow` stays 0. Callers must swap images long before one fills.
//! - When decoding falls behind, the hardware buffer overflows and decode fails with
//!   `CUPTI_ERROR_OUT_OF_MEMORY` ([`CuptiError::HardwareBufferOverflow`]).

use crate::blank::{BlankImage, ImageLayout};
use crate::error::{CuptiError, Result, Status};
use crate::host::MetricList;
pub use crate::image::{CounterData, CounterDataInfo};
use crate::init::Cupti;
use crate::result;
use cudarc::cupti::sys;
use std::ptr::NonNull;

/// Why a decode call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeStop {
    /// Everything in the hardware buffer was decoded.
    EndOfRecords,
    /// The counter data image is full: records that did not fit are lost.
    CounterDataFull,
    Other,
}

/// What one decode call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeOutcome {
    pub stop: DecodeStop,
    /// The hardware buffer overflowed since the previous decode.
    pub overflow: bool,
}

/// PM sampling enabled on one device. Dropping it stops sampling and disables it.
///
/// [PM Sampling API](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
#[derive(Debug)]
pub struct PmSampler {
    obj: NonNull<sys::CUpti_PmSampling_Object>,
    device: usize,
    running: bool,
    disabled: bool,
    /// The config image CUPTI was last given, owned for as long as the sampler lives: nothing in
    /// CUPTI's documentation says it copies the image in `cuptiPmSamplingSetConfig`, and the
    /// hidden probe, which freed its image after configuring, died of SIGSEGV in its first
    /// decode (2026-12-02 and -03).
    config: Vec<u8>,
}

// SAFETY: the PM sampling object is addressed by device, not by thread; all uses go through
// `&mut self` or `&self` of one owner.
unsafe impl Send for PmSampler {}

impl PmSampler {
    /// [cuptiPmSamplingEnable](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn enable(cupti: &Cupti, device: usize) -> Result<Self> {
        cupti.check_device(device)?;
        let mut p = sys::CUpti_PmSampling_Enable_Params {
            structSize: sys::PmSampling_Enable_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            deviceIndex: device,
            pPmSamplingObject: std::ptr::null_mut(),
        };
        // SAFETY: libcupti is loaded (`cupti`); the out field is in `p`.
        unsafe { result::pm_enable(&mut p) }?;
        let obj = NonNull::new(p.pPmSamplingObject).ok_or(CuptiError::Api {
            call: "cuptiPmSamplingEnable",
            status: Status {
                name: "null PM sampling object".into(),
                code: 0,
                message: String::new(),
            },
        })?;
        Ok(PmSampler {
            obj,
            device,
            running: false,
            disabled: false,
            config: Vec::new(),
        })
    }

    pub fn device(&self) -> usize {
        self.device
    }

    fn try_set_config(
        &mut self,
        config: &[u8],
        hw_buffer_bytes: usize,
        interval_ns: u64,
    ) -> Result<()> {
        let config = config.to_vec();
        let mut p = sys::CUpti_PmSampling_SetConfig_Params {
            structSize: sys::PmSampling_SetConfig_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
            configSize: config.len(),
            pConfig: config.as_ptr(),
            hardwareBufferSize: hw_buffer_bytes,
            samplingInterval: interval_ns,
            triggerMode: sys::CUpti_PmSampling_TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
            hwBufferAppendMode:
                sys::CUpti_PmSampling_HardwareBuffer_AppendMode::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST,
        };
        // SAFETY: the object is live; `config` is a config image of the stated size, kept
        // alive below for as long as CUPTI may read it.
        let r = unsafe { result::pm_set_config(&mut p) };
        if r.is_ok() {
            // The previous image is freed only once CUPTI holds the new one.
            self.config = config;
        }
        r
    }

    /// Configures the metrics (a config image from [`crate::ProfilerHost::config_image`]), the
    /// hardware buffer size and the GPU-time sampling interval. When CUPTI refuses the interval,
    /// finds the smallest power-of-two multiple it accepts and reports it.
    ///
    /// [cuptiPmSamplingSetConfig](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn set_config(
        &mut self,
        config: &[u8],
        hw_buffer_bytes: usize,
        interval_ns: u64,
    ) -> Result<()> {
        match self.try_set_config(config, hw_buffer_bytes, interval_ns) {
            Ok(()) => Ok(()),
            Err(CuptiError::Api { call, status }) => {
                // Is it the interval? Try longer ones; if one passes, the interval was too short.
                let mut candidate = interval_ns.max(1).saturating_mul(2);
                while candidate <= 1_000_000 {
                    if self
                        .try_set_config(config, hw_buffer_bytes, candidate)
                        .is_ok()
                    {
                        return Err(CuptiError::IntervalTooSmall {
                            interval_ns,
                            min_hint: format_ns(candidate),
                            status,
                        });
                    }
                    candidate = candidate.saturating_mul(2);
                }
                Err(CuptiError::Api { call, status })
            }
            Err(e) => Err(e),
        }
    }

    /// Bytes a counter data image for `max_samples` samples of `metrics` needs.
    ///
    /// [cuptiPmSamplingGetCounterDataSize](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn counter_data_size(&self, metrics: &mut MetricList, max_samples: u32) -> Result<usize> {
        let mut p = sys::CUpti_PmSampling_GetCounterDataSize_Params {
            structSize: sys::PmSampling_GetCounterDataSize_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
            pMetricNames: metrics.as_mut_ptr(),
            numMetrics: metrics.len(),
            maxSamples: max_samples,
            counterDataSize: 0,
        };
        // SAFETY: the object and the metric name array are live.
        unsafe { result::pm_get_counter_data_size(&mut p) }?;
        Ok(p.counterDataSize)
    }

    /// A blank counter data image for `max_samples` samples.
    ///
    /// [cuptiPmSamplingCounterDataImageInitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn counter_data(&self, metrics: &mut MetricList, max_samples: u32) -> Result<CounterData> {
        let size = self.counter_data_size(metrics, max_samples)?;
        let mut bytes = vec![0u8; size];
        let mut p = sys::CUpti_PmSampling_CounterDataImage_Initialize_Params {
            structSize: sys::PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
            counterDataSize: bytes.len(),
            pCounterData: bytes.as_mut_ptr(),
        };
        // SAFETY: `bytes` is writable for `counterDataSize` bytes.
        unsafe { result::pm_counter_data_image_initialize(&mut p) }?;
        Ok(CounterData::from_bytes(bytes, max_samples))
    }

    /// The image layout that `cuptiPmSamplingGetCounterDataSize` implies for `metrics`: a
    /// header plus a fixed number of bytes per sample, or `None` when sizes do not grow linearly.
    pub fn image_layout(&self, metrics: &mut MetricList) -> Result<Option<ImageLayout>> {
        let one = self.counter_data_size(metrics, 1)?;
        let two = self.counter_data_size(metrics, 2)?;
        let hundred_one = self.counter_data_size(metrics, 101)?;
        Ok(ImageLayout::from_sizes(one, two, hundred_one))
    }

    /// A [`BlankImage`] for `max_samples` samples: initialised once through CUPTI, then kept as
    /// its non-zero head, with the layout that lets used images be restored by prefix.
    pub fn blank_image(&self, metrics: &mut MetricList, max_samples: u32) -> Result<BlankImage> {
        let layout = self.image_layout(metrics)?;
        let blank = self.counter_data(metrics, max_samples)?;
        Ok(BlankImage::new(blank, layout))
    }

    /// [cuptiPmSamplingStart](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn start(&mut self) -> Result<()> {
        let mut p = sys::CUpti_PmSampling_Start_Params {
            structSize: sys::PmSampling_Start_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
        };
        // SAFETY: the object is live and configured.
        unsafe { result::pm_start(&mut p) }?;
        self.running = true;
        Ok(())
    }

    /// [cuptiPmSamplingStop](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn stop(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        let mut p = sys::CUpti_PmSampling_Stop_Params {
            structSize: sys::PmSampling_Stop_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
        };
        self.running = false;
        // SAFETY: the object is live and started.
        unsafe { result::pm_stop(&mut p) }
    }

    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Moves samples from the hardware buffer into `data`.
    ///
    /// [cuptiPmSamplingDecodeData](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn decode(&mut self, data: &mut CounterData) -> Result<DecodeOutcome> {
        let mut p = sys::CUpti_PmSampling_DecodeData_Params {
            structSize: sys::PmSampling_DecodeData_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
            pCounterDataImage: data.bytes_mut().as_mut_ptr(),
            counterDataImageSize: data.size_bytes(),
            decodeStopReason:
                sys::CUpti_PmSampling_DecodeStopReason::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER,
            overflow: 0,
        };
        // SAFETY: the object is live; `data` is an initialised image of the stated size that we
        // borrow mutably for the call.
        match unsafe { result::pm_decode_data(&mut p) } {
            Ok(()) => {}
            Err(CuptiError::Api { status, .. })
                if status.is(sys::CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY) =>
            {
                return Err(CuptiError::HardwareBufferOverflow { status });
            }
            Err(e) => return Err(e),
        }
        use sys::CUpti_PmSampling_DecodeStopReason as R;
        let stop = match p.decodeStopReason {
            R::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS => DecodeStop::EndOfRecords,
            R::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL => {
                DecodeStop::CounterDataFull
            }
            _ => DecodeStop::Other,
        };
        Ok(DecodeOutcome {
            stop,
            overflow: p.overflow != 0,
        })
    }

    /// Start and end timestamps (ns, Unix epoch) of sample `index` in `data`.
    ///
    /// [cuptiPmSamplingCounterDataGetSampleInfo](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pub fn sample_times(&self, data: &CounterData, index: usize) -> Result<(u64, u64)> {
        let mut p = sys::CUpti_PmSampling_CounterData_GetSampleInfo_Params {
            structSize: sys::PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
            pCounterDataImage: data.bytes().as_ptr(),
            counterDataImageSize: data.size_bytes(),
            sampleIndex: index,
            startTimestamp: 0,
            endTimestamp: 0,
        };
        // SAFETY: the object and image are live.
        unsafe { result::pm_counter_data_get_sample_info(&mut p) }?;
        Ok((p.startTimestamp, p.endTimestamp))
    }
}

impl PmSampler {
    /// Stops, disables and enables PM sampling on the same device again, with the same
    /// configuration; the caller starts it. After a hardware-buffer overflow a plain Stop/Start
    /// failed on an H200 (`CUPTI_ERROR_UNKNOWN`), a full re-arm is what recovers.
    pub fn rearm(
        &mut self,
        cupti: &Cupti,
        config: &[u8],
        hw_buffer_bytes: usize,
        interval_ns: u64,
    ) -> Result<()> {
        self.disable_now();
        let mut fresh = PmSampler::enable(cupti, self.device)?;
        fresh.set_config(config, hw_buffer_bytes, interval_ns)?;
        // The old value is disabled already; its Drop does nothing more.
        *self = fresh;
        Ok(())
    }

    fn disable_now(&mut self) {
        if self.disabled {
            return;
        }
        let _ = self.stop();
        let mut p = sys::CUpti_PmSampling_Disable_Params {
            structSize: sys::PmSampling_Disable_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pPmSamplingObject: self.obj.as_ptr(),
        };
        self.disabled = true;
        // SAFETY: the object is live and disabled exactly once (guarded by `disabled`); errors
        // are ignored because there is nothing left to do with the object.
        let _ = unsafe { result::pm_disable(&mut p) };
    }
}

impl Drop for PmSampler {
    fn drop(&mut self) {
        // Stops and disables once; errors are ignored because Drop cannot report them.
        self.disable_now();
    }
}

/// `10us`, `2ms`, `500ns`: the shortest exact form of a duration in nanoseconds.
pub fn format_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 && ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns >= 1_000_000 && ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns >= 1_000 && ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_exactly() {
        assert_eq!(format_ns(10_000), "10us");
        assert_eq!(format_ns(2_500), "2500ns");
        assert_eq!(format_ns(3_000_000), "3ms");
        assert_eq!(format_ns(1_000_000_000), "1s");
    }
}
