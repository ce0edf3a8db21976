//! The thin layer over cudarc's generated bindings: one function per CUPTI call, turning its
//! status into a [`Result`]. The callers in [`crate::host`] and [`crate::pm`] fill the parameter
//! structs (with `structSize` from cudarc's `*_STRUCT_SIZE` constants, never `size_of`, which
//! is padded) and uphold the pointer contracts.
//!
//! Each function is `unsafe`: the caller promises that the struct's pointers are valid for the
//! duration of the call, as each NVIDIA API page requires, and that libcupti is loaded
//! ([`crate::loader::ensure_cupti`]).

use crate::error::{CuptiError, Result};
use cudarc::cupti::sys;
use std::ffi::CStr;

fn check(call: &'static str, r: sys::CUptiResult) -> Result<()> {
    match r {
        sys::CUptiResult::CUPTI_SUCCESS => Ok(()),
        e => Err(CuptiError::from_call(call, e)),
    }
}

/// A string CUPTI returned, copied (empty for a null pointer).
pub(crate) fn cstr_to_string(p: *const core::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI returns NUL-terminated strings that live as long as the object that owns
    // them; we copy before returning.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

macro_rules! wrap {
    ($(#[$doc:meta])* $name:ident, $call:ident, $params:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// libcupti is loaded and every pointer in `p` is valid as the NVIDIA page requires.
        pub unsafe fn $name(p: &mut $params) -> Result<()> {
            // SAFETY: upheld by the caller (see the function's contract).
            check(stringify!($call), unsafe { sys::$call(p) })
        }
    };
}

wrap!(
    /// [cuptiProfilerInitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__API.html)
    profiler_initialize, cuptiProfilerInitialize, sys::CUpti_Profiler_Initialize_Params);
wrap!(
    /// [cuptiDeviceGetChipName](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__API.html)
    device_get_chip_name, cuptiDeviceGetChipName, sys::CUpti_Device_GetChipName_Params);
wrap!(
    /// [cuptiProfilerHostInitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_initialize, cuptiProfilerHostInitialize, sys::CUpti_Profiler_Host_Initialize_Params);
wrap!(
    /// [cuptiProfilerHostDeinitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_deinitialize, cuptiProfilerHostDeinitialize, sys::CUpti_Profiler_Host_Deinitialize_Params);
wrap!(
    /// [cuptiProfilerHostGetBaseMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_base_metrics, cuptiProfilerHostGetBaseMetrics, sys::CUpti_Profiler_Host_GetBaseMetrics_Params);
wrap!(
    /// [cuptiProfilerHostGetSubMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_sub_metrics, cuptiProfilerHostGetSubMetrics, sys::CUpti_Profiler_Host_GetSubMetrics_Params);
wrap!(
    /// [cuptiProfilerHostGetMetricProperties](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_metric_properties, cuptiProfilerHostGetMetricProperties, sys::CUpti_Profiler_Host_GetMetricProperties_Params);
wrap!(
    /// [cuptiProfilerHostConfigAddMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_config_add_metrics, cuptiProfilerHostConfigAddMetrics, sys::CUpti_Profiler_Host_ConfigAddMetrics_Params);
wrap!(
    /// [cuptiProfilerHostGetConfigImageSize](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_config_image_size, cuptiProfilerHostGetConfigImageSize, sys::CUpti_Profiler_Host_GetConfigImageSize_Params);
wrap!(
    /// [cuptiProfilerHostGetConfigImage](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_config_image, cuptiProfilerHostGetConfigImage, sys::CUpti_Profiler_Host_GetConfigImage_Params);
wrap!(
    /// [cuptiProfilerHostGetNumOfPasses](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_num_of_passes, cuptiProfilerHostGetNumOfPasses, sys::CUpti_Profiler_Host_GetNumOfPasses_Params);
wrap!(
    /// [cuptiProfilerHostGetMaxNumHardwareMetricsPerPass](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_get_max_metrics_per_pass, cuptiProfilerHostGetMaxNumHardwareMetricsPerPass, sys::CUpti_Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params);
wrap!(
    /// [cuptiProfilerHostEvaluateToGpuValues](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    host_evaluate_to_gpu_values, cuptiProfilerHostEvaluateToGpuValues, sys::CUpti_Profiler_Host_EvaluateToGpuValues_Params);
wrap!(
    /// [cuptiPmSamplingGetCounterAvailability](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_get_counter_availability, cuptiPmSamplingGetCounterAvailability, sys::CUpti_PmSampling_GetCounterAvailability_Params);
wrap!(
    /// [cuptiPmSamplingEnable](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_enable, cuptiPmSamplingEnable, sys::CUpti_PmSampling_Enable_Params);
wrap!(
    /// [cuptiPmSamplingDisable](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_disable, cuptiPmSamplingDisable, sys::CUpti_PmSampling_Disable_Params);
wrap!(
    /// [cuptiPmSamplingSetConfig](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_set_config, cuptiPmSamplingSetConfig, sys::CUpti_PmSampling_SetConfig_Params);
wrap!(
    /// [cuptiPmSamplingStart](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_start, cuptiPmSamplingStart, sys::CUpti_PmSampling_Start_Params);
wrap!(
    /// [cuptiPmSamplingStop](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_stop, cuptiPmSamplingStop, sys::CUpti_PmSampling_Stop_Params);
wrap!(
    /// [cuptiPmSamplingDecodeData](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_decode_data, cuptiPmSamplingDecodeData, sys::CUpti_PmSampling_DecodeData_Params);
wrap!(
    /// [cuptiPmSamplingGetCounterDataSize](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_get_counter_data_size, cuptiPmSamplingGetCounterDataSize, sys::CUpti_PmSampling_GetCounterDataSize_Params);
wrap!(
    /// [cuptiPmSamplingCounterDataImageInitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_counter_data_image_initialize, cuptiPmSamplingCounterDataImageInitialize, sys::CUpti_PmSampling_CounterDataImage_Initialize_Params);
wrap!(
    /// [cuptiPmSamplingGetCounterDataInfo](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_get_counter_data_info, cuptiPmSamplingGetCounterDataInfo, sys::CUpti_PmSampling_GetCounterDataInfo_Params);
wrap!(
    /// [cuptiPmSamplingCounterDataGetSampleInfo](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
    pm_counter_data_get_sample_info, cuptiPmSamplingCounterDataGetSampleInfo, sys::CUpti_PmSampling_CounterData_GetSampleInfo_Params);
