//! The CUPTI Profiler Host API: the metric catalogue of a chip, config images, and evaluation
//! of counter data into metric values. None of it touches the GPU; it needs only the chip name
//! (and, for PM sampling, the counter availability image of the device).

use crate::error::{CuptiError, Result, Status};
use crate::init::Cupti;
use crate::result::{self, cstr_to_string};
use cudarc::cupti::sys;
use std::ffi::CString;
use std::ptr::NonNull;

/// Which profiler the host object describes metrics for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    PmSampling,
    /// The range profiler (kernel replay); used to tell "unknown metric" from "exists, but not
    /// for PM sampling".
    RangeProfiler,
}

impl HostKind {
    fn sys(self) -> sys::CUpti_ProfilerType {
        match self {
            HostKind::PmSampling => sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING,
            HostKind::RangeProfiler => sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_RANGE_PROFILER,
        }
    }
}

/// CUPTI's metric types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MetricKind {
    Counter,
    Ratio,
    Throughput,
}

impl MetricKind {
    pub const ALL: [MetricKind; 3] = [
        MetricKind::Counter,
        MetricKind::Ratio,
        MetricKind::Throughput,
    ];

    fn sys(self) -> sys::CUpti_MetricType {
        match self {
            MetricKind::Counter => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_COUNTER,
            MetricKind::Ratio => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO,
            MetricKind::Throughput => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT,
        }
    }

    fn from_sys(t: sys::CUpti_MetricType) -> Self {
        match t {
            sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO => MetricKind::Ratio,
            sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT => MetricKind::Throughput,
            _ => MetricKind::Counter,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Ratio => "ratio",
            MetricKind::Throughput => "throughput",
        }
    }
}

/// What CUPTI says about a base metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricProperties {
    pub description: String,
    /// Hardware unit that counts it (`sm`, `dram`, `gpc`, ...).
    pub hw_unit: String,
    /// Dimension unit (`cycle`, `byte`, `%`, ...).
    pub dim_unit: String,
    pub kind: MetricKind,
}

/// An owned list of metric names in the form CUPTI takes them (an array of C strings).
#[derive(Debug)]
pub struct MetricList {
    names: Vec<CString>,
    ptrs: Vec<*const core::ffi::c_char>,
}

// SAFETY: the raw pointers point into the `CString`s owned by the same value, which are never
// mutated; moving the value between threads keeps them valid.
unsafe impl Send for MetricList {}
// SAFETY: shared access only reads.
unsafe impl Sync for MetricList {}

impl MetricList {
    pub fn new<S: AsRef<str>>(names: &[S]) -> Result<Self> {
        let names: Vec<CString> = names
            .iter()
            .map(|n| {
                CString::new(n.as_ref()).map_err(|_| {
                    CuptiError::InvalidArgument(format!("metric name {:?} has a NUL", n.as_ref()))
                })
            })
            .collect::<Result<_>>()?;
        let ptrs = names.iter().map(|c| c.as_ptr()).collect();
        Ok(MetricList { names, ptrs })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn names(&self) -> Vec<String> {
        self.names
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut *const core::ffi::c_char {
        self.ptrs.as_mut_ptr()
    }
}

/// A profiler host object for one chip. Dropping it deinitialises the object.
///
/// [Profiler Host API](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
#[derive(Debug)]
pub struct ProfilerHost {
    obj: NonNull<sys::CUpti_Profiler_Host_Object>,
    kind: HostKind,
    chip: CString,
    // CUPTI may keep pointing at these while the object lives.
    availability: Option<Vec<u8>>,
}

// SAFETY: a host object is not tied to a thread; `ProfilerHost` methods that use it take
// `&self`/`&mut self`, so moving it between threads never shares it.
unsafe impl Send for ProfilerHost {}

impl ProfilerHost {
    /// [cuptiProfilerHostInitialize](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    ///
    /// Needs a loaded libcupti: pass the [`Cupti`] handle to prove it.
    pub fn new(
        _cupti: &Cupti,
        kind: HostKind,
        chip: &str,
        availability: Option<Vec<u8>>,
    ) -> Result<Self> {
        let chip = CString::new(chip)
            .map_err(|_| CuptiError::InvalidArgument("chip name has a NUL".into()))?;
        let mut p = sys::CUpti_Profiler_Host_Initialize_Params {
            structSize: sys::Profiler_Host_Initialize_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            profilerType: kind.sys(),
            pChipName: chip.as_ptr(),
            pCounterAvailabilityImage: availability
                .as_ref()
                .map_or(std::ptr::null(), |a| a.as_ptr()),
            pHostObject: std::ptr::null_mut(),
        };
        // SAFETY: libcupti is loaded (`_cupti`); the chip name and availability image are owned
        // by the returned value and outlive the object.
        unsafe { result::host_initialize(&mut p) }?;
        let obj = NonNull::new(p.pHostObject).ok_or(CuptiError::Api {
            call: "cuptiProfilerHostInitialize",
            status: Status {
                name: "null host object".into(),
                code: 0,
                message: String::new(),
            },
        })?;
        Ok(ProfilerHost {
            obj,
            kind,
            chip,
            availability,
        })
    }

    pub fn kind(&self) -> HostKind {
        self.kind
    }

    pub fn chip(&self) -> String {
        self.chip.to_string_lossy().into_owned()
    }

    /// A fresh host object for the same chip and availability (e.g. one per evaluation thread).
    pub fn duplicate(&self, cupti: &Cupti) -> Result<Self> {
        ProfilerHost::new(cupti, self.kind, &self.chip(), self.availability.clone())
    }

    /// Base metric names of one type.
    ///
    /// [cuptiProfilerHostGetBaseMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn base_metrics(&self, kind: MetricKind) -> Result<Vec<String>> {
        let mut p = sys::CUpti_Profiler_Host_GetBaseMetrics_Params {
            structSize: sys::Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
            metricType: kind.sys(),
            ppMetricNames: std::ptr::null_mut(),
            numMetrics: 0,
        };
        // SAFETY: the host object is live; CUPTI fills the out fields.
        unsafe { result::host_get_base_metrics(&mut p) }?;
        Ok(c_string_array(p.ppMetricNames, p.numMetrics))
    }

    /// Every base metric with its type, sorted by name.
    pub fn all_base_metrics(&self) -> Result<Vec<(String, MetricKind)>> {
        let mut v = Vec::new();
        for k in MetricKind::ALL {
            v.extend(self.base_metrics(k)?.into_iter().map(|n| (n, k)));
        }
        v.sort();
        Ok(v)
    }

    /// The rollup/sub-metric suffixes valid for a base metric, each starting with `.`
    /// (e.g. `.avg`, `.avg.pct_of_peak_sustained_elapsed`).
    ///
    /// [cuptiProfilerHostGetSubMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn sub_metrics(&self, base: &str, kind: MetricKind) -> Result<Vec<String>> {
        let name = CString::new(base)
            .map_err(|_| CuptiError::InvalidArgument("metric name has a NUL".into()))?;
        let mut p = sys::CUpti_Profiler_Host_GetSubMetrics_Params {
            structSize: sys::Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
            metricType: kind.sys(),
            pMetricName: name.as_ptr(),
            numOfSubmetrics: 0,
            ppSubMetrics: std::ptr::null_mut(),
        };
        // SAFETY: the host object and `name` are live for the call.
        unsafe { result::host_get_sub_metrics(&mut p) }?;
        Ok(c_string_array(p.ppSubMetrics, p.numOfSubmetrics)
            .into_iter()
            .map(|s| {
                if s.starts_with('.') {
                    s
                } else {
                    format!(".{s}")
                }
            })
            .collect())
    }

    /// Description and units of a base metric.
    ///
    /// [cuptiProfilerHostGetMetricProperties](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn properties(&self, base: &str) -> Result<MetricProperties> {
        let name = CString::new(base)
            .map_err(|_| CuptiError::InvalidArgument("metric name has a NUL".into()))?;
        let mut p = sys::CUpti_Profiler_Host_GetMetricProperties_Params {
            structSize: sys::Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
            pMetricName: name.as_ptr(),
            pDescription: std::ptr::null(),
            pHwUnit: std::ptr::null(),
            pDimUnit: std::ptr::null(),
            metricType: sys::CUpti_MetricType::CUPTI_METRIC_TYPE_COUNTER,
        };
        // SAFETY: the host object and `name` are live for the call.
        unsafe { result::host_get_metric_properties(&mut p) }?;
        Ok(MetricProperties {
            description: cstr_to_string(p.pDescription),
            hw_unit: cstr_to_string(p.pHwUnit),
            dim_unit: cstr_to_string(p.pDimUnit),
            kind: MetricKind::from_sys(p.metricType),
        })
    }

    /// The most hardware metrics one pass can collect on this chip (CUPTI's estimate).
    ///
    /// [cuptiProfilerHostGetMaxNumHardwareMetricsPerPass](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn max_metrics_per_pass(&self) -> Result<usize> {
        let mut avail = self.availability.clone();
        let mut p = sys::CUpti_Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params {
            structSize: sys::Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params_STRUCT_SIZE
                as usize,
            pPriv: std::ptr::null_mut(),
            profilerType: self.kind.sys(),
            pChipName: self.chip.as_ptr(),
            pCounterAvailabilityImage: avail
                .as_mut()
                .map_or(std::ptr::null_mut(), |a| a.as_mut_ptr()),
            maxMetricsPerPass: 0,
        };
        // SAFETY: chip name and availability copy are live for the call.
        unsafe { result::host_get_max_metrics_per_pass(&mut p) }?;
        Ok(p.maxMetricsPerPass)
    }

    /// Adds metrics to this host object's configuration (cumulative). Evaluation host objects
    /// get the recorded metrics this way, as CUPTI's own samples do.
    ///
    /// [cuptiProfilerHostConfigAddMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn add_metrics(&mut self, metrics: &mut MetricList) -> Result<()> {
        let mut p = sys::CUpti_Profiler_Host_ConfigAddMetrics_Params {
            structSize: sys::Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
            ppMetricNames: metrics.as_mut_ptr(),
            numMetrics: metrics.len(),
        };
        // SAFETY: the host object and the name array are live for the call.
        unsafe { result::host_config_add_metrics(&mut p) }
    }

    /// Builds the config image for `metrics` on a fresh host object (adding metrics to a host
    /// object is cumulative), and checks they fit one pass.
    ///
    /// [cuptiProfilerHostConfigAddMetrics](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html),
    /// [cuptiProfilerHostGetConfigImage](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html),
    /// [cuptiProfilerHostGetNumOfPasses](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn config_image(&self, cupti: &Cupti, metrics: &[String]) -> Result<Vec<u8>> {
        let fresh = self.duplicate(cupti)?;
        let mut list = MetricList::new(metrics)?;
        let mut p = sys::CUpti_Profiler_Host_ConfigAddMetrics_Params {
            structSize: sys::Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: fresh.obj.as_ptr(),
            ppMetricNames: list.as_mut_ptr(),
            numMetrics: list.len(),
        };
        // SAFETY: the host object and the name array are live for the call.
        if let Err(e) = unsafe { result::host_config_add_metrics(&mut p) } {
            return Err(match e {
                CuptiError::Api { status, .. } => CuptiError::TooManyMetrics {
                    metrics: metrics.join(", "),
                    detail: format!("cuptiProfilerHostConfigAddMetrics: {status}"),
                },
                other => other,
            });
        }
        let mut s = sys::CUpti_Profiler_Host_GetConfigImageSize_Params {
            structSize: sys::Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: fresh.obj.as_ptr(),
            configImageSize: 0,
        };
        // SAFETY: the host object is live.
        unsafe { result::host_get_config_image_size(&mut s) }?;
        let mut image = vec![0u8; s.configImageSize];
        let mut g = sys::CUpti_Profiler_Host_GetConfigImage_Params {
            structSize: sys::Profiler_Host_GetConfigImage_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: fresh.obj.as_ptr(),
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
        };
        // SAFETY: `image` is writable for `configImageSize` bytes.
        unsafe { result::host_get_config_image(&mut g) }?;
        let mut n = sys::CUpti_Profiler_Host_GetNumOfPasses_Params {
            structSize: sys::Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            numOfPasses: 0,
        };
        // SAFETY: `image` is a complete config image of the stated size.
        unsafe { result::host_get_num_of_passes(&mut n) }?;
        if n.numOfPasses > 1 {
            return Err(CuptiError::TooManyMetrics {
                metrics: metrics.join(", "),
                detail: format!("they need {} passes", n.numOfPasses),
            });
        }
        Ok(image)
    }

    /// Evaluates sample `index` of a counter data image into one value per metric.
    ///
    /// [cuptiProfilerHostEvaluateToGpuValues](https://docs.nvidia.com/cupti/api/group__CUPTI__PROFILER__HOST__API.html)
    pub fn evaluate(
        &self,
        counter_data: &[u8],
        index: usize,
        metrics: &mut MetricList,
        out: &mut [f64],
    ) -> Result<()> {
        if out.len() != metrics.len() {
            return Err(CuptiError::InvalidArgument(format!(
                "{} output slots for {} metrics",
                out.len(),
                metrics.len()
            )));
        }
        let mut p = sys::CUpti_Profiler_Host_EvaluateToGpuValues_Params {
            structSize: sys::Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
            pCounterDataImage: counter_data.as_ptr(),
            counterDataImageSize: counter_data.len(),
            rangeIndex: index,
            ppMetricNames: metrics.as_mut_ptr(),
            numMetrics: metrics.len(),
            pMetricValues: out.as_mut_ptr(),
        };
        // SAFETY: the image, names and output (of `numMetrics` doubles) are live and sized as
        // stated.
        unsafe { result::host_evaluate_to_gpu_values(&mut p) }
    }
}

impl Drop for ProfilerHost {
    fn drop(&mut self) {
        let mut p = sys::CUpti_Profiler_Host_Deinitialize_Params {
            structSize: sys::Profiler_Host_Deinitialize_Params_STRUCT_SIZE as usize,
            pPriv: std::ptr::null_mut(),
            pHostObject: self.obj.as_ptr(),
        };
        // SAFETY: the object is live and deinitialised exactly once; errors are ignored
        // because Drop cannot report them.
        let _ = unsafe { result::host_deinitialize(&mut p) };
    }
}

fn c_string_array(p: *mut *const core::ffi::c_char, n: usize) -> Vec<String> {
    if p.is_null() {
        return Vec::new();
    }
    (0..n)
        .map(|i| {
            // SAFETY: CUPTI returned an array of `n` string pointers owned by the host object,
            // which is live while we copy them.
            cstr_to_string(unsafe { *p.add(i) })
        })
        .collect()
}
