//! Typed errors of the CUPTI layer: what failed and why, with the remedy where it needs no
//! command line (privileges, another profiler); flags to change are the command line's to name.

use cudarc::cupti::sys::{self, CUptiResult};

/// The name of a CUPTI status code (`CUPTI_ERROR_...`) plus CUPTI's own description of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    pub code: i64,
    pub message: String,
}

impl Status {
    pub(crate) fn from_result(r: CUptiResult) -> Self {
        Status {
            name: format!("{r:?}"),
            code: r as i64,
            message: result_string(r),
        }
    }
}

impl Status {
    /// Whether this is the status `r`, compared by CUPTI's code (names are for people).
    pub fn is(&self, r: CUptiResult) -> bool {
        self.code == r as i64
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{} ({})", self.name, self.message)
        }
    }
}

/// How the administrator lets ordinary users read GPU performance counters.
pub const PRIVILEGES_FIX: &str = "GPU performance counters are restricted to administrators on \
this machine. Either run cufall as root (sudo), or have an administrator allow all users: add \
the line `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to a file in /etc/modprobe.d/ \
(e.g. /etc/modprobe.d/nvidia-profiling.conf), then reload the nvidia kernel module or reboot \
(see https://developer.nvidia.com/ERR_NVGPUCTRPERM).";

/// Everything that can go wrong in the CUPTI layer.
#[derive(Debug, thiserror::Error)]
pub enum CuptiError {
    #[error(
        "the NVIDIA GPU driver library (libcuda.so.1) was not found: this machine has no NVIDIA \
driver installed, or it is not on the library path. Looked in: {searched}. Install the NVIDIA \
driver, or run on a machine with an NVIDIA GPU."
    )]
    DriverNotFound { searched: String },

    #[error(
        "CUPTI (libcupti.so, part of the CUDA toolkit, CUDA 12.6 or newer) was not found, so GPU \
counters cannot be read. Looked in: {searched}. Install the CUDA toolkit (or `pip install \
nvidia-cuda-cupti`), or point CUDA_HOME at it, or add the folder that holds libcupti.so to \
LD_LIBRARY_PATH."
    )]
    CuptiNotFound { searched: String },

    #[error("the CUDA driver failed to start ({0}); check `nvidia-smi` works on this machine")]
    DriverInit(String),

    #[error(
        "no CUDA device is visible (the driver reports 0 GPUs; check nvidia-smi and \
CUDA_VISIBLE_DEVICES)."
    )]
    NoDevice,

    #[error("GPU {index} does not exist: this machine has {count} visible CUDA device(s), numbered 0 to {last}", last = count.saturating_sub(1))]
    DeviceOutOfRange { index: usize, count: usize },

    #[error("insufficient privileges to read GPU counters ({during}). {PRIVILEGES_FIX}")]
    InsufficientPrivileges { during: &'static str },

    #[error(
        "the GPU counters are held by another profiler ({during}: {status}). Only one tool can \
read them at a time: stop Nsight Compute/Nsight Systems/DCGM profiling or another cufall, then \
try again (`nvidia-smi` lists processes; DCGM's profiling module can be paused with `dcgmi \
profile --pause`)."
    )]
    CountersBusy {
        during: &'static str,
        status: Status,
    },

    #[error(
        "this GPU does not support CUPTI PM sampling ({during}: {status}); PM sampling needs a \
Turing or newer GPU (Hopper, Ampere, Ada, ...), not a MIG slice, vGPU without profiling, or WSL"
    )]
    DeviceNotSupported {
        during: &'static str,
        status: Status,
    },

    #[error("unknown metric `{name}`{} on this GPU", suggestion_text(suggestions))]
    UnknownMetric {
        name: String,
        suggestions: Vec<String>,
    },

    #[error(
        "metric `{name}` exists on this GPU but cannot be collected by PM sampling (only by \
kernel replay, e.g. Nsight Compute)"
    )]
    NotSupportedByPmSampling { name: String },

    #[error(
        "these metrics do not fit in one pass of the GPU's counters ({detail}): {metrics}. PM \
sampling collects everything in a single pass"
    )]
    TooManyMetrics { metrics: String, detail: String },

    #[error(
        "sampling interval {interval_ns} ns is below what the hardware accepts on this GPU \
(CUPTI refused it: {status}); {min_hint} or more is accepted"
    )]
    IntervalTooSmall {
        interval_ns: u64,
        min_hint: String,
        status: Status,
    },

    #[error("the PM sampling hardware buffer overflowed: decoding fell behind the GPU ({status})")]
    HardwareBufferOverflow { status: Status },

    #[error("CUPTI call {call} failed: {status}")]
    Api { call: &'static str, status: Status },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

fn suggestion_text(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(
            " (did you mean {}?)",
            s.iter()
                .map(|x| format!("`{x}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl CuptiError {
    /// Maps a failed CUPTI call to the error the user should see.
    pub(crate) fn from_call(call: &'static str, r: CUptiResult) -> Self {
        use CUptiResult as R;
        match r {
            R::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
            | R::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => {
                CuptiError::InsufficientPrivileges { during: call }
            }
            R::CUPTI_ERROR_HARDWARE_BUSY
            | R::CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED
            | R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => CuptiError::CountersBusy {
                during: call,
                status: Status::from_result(r),
            },
            R::CUPTI_ERROR_NOT_SUPPORTED
            | R::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
            | R::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED
            | R::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED
            | R::CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED
            | R::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED
            | R::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED => {
                CuptiError::DeviceNotSupported {
                    during: call,
                    status: Status::from_result(r),
                }
            }
            _ => CuptiError::Api {
                call,
                status: Status::from_result(r),
            },
        }
    }

    /// True when GPU counters are out of reach for reasons outside cufall (no CUPTI, no
    /// privileges, another profiler, unsupported GPU): a caller may then fall back to NVML.
    pub fn counters_out_of_reach(&self) -> bool {
        matches!(
            self,
            CuptiError::CuptiNotFound { .. }
                | CuptiError::InsufficientPrivileges { .. }
                | CuptiError::CountersBusy { .. }
                | CuptiError::DeviceNotSupported { .. }
        )
    }

    /// The raw CUPTI status name, when the error came from a CUPTI call.
    pub fn status_name(&self) -> Option<&str> {
        match self {
            CuptiError::CountersBusy { status, .. }
            | CuptiError::DeviceNotSupported { status, .. }
            | CuptiError::IntervalTooSmall { status, .. }
            | CuptiError::HardwareBufferOverflow { status }
            | CuptiError::Api { status, .. } => Some(&status.name),
            _ => None,
        }
    }
}

pub type Result<T, E = CuptiError> = std::result::Result<T, E>;

/// CUPTI's description of a status code, or an empty string when libcupti is not loaded.
fn result_string(r: sys::CUptiResult) -> String {
    if !crate::loaded::cupti_loaded() {
        return String::new();
    }
    let mut p: *const core::ffi::c_char = std::ptr::null();
    // SAFETY: libcupti is loaded; `p` is a valid out-pointer.
    let r = unsafe { sys::cuptiGetResultString(r, &mut p) };
    if r != sys::CUptiResult::CUPTI_SUCCESS || p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI returns a pointer to a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_message_names_the_driver_option() {
        let e = CuptiError::from_call(
            "cuptiPmSamplingEnable",
            CUptiResult::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
        );
        let msg = e.to_string();
        assert!(
            msg.contains("NVreg_RestrictProfilingToAdminUsers=0"),
            "{msg}"
        );
        assert!(msg.contains("/etc/modprobe.d"), "{msg}");
        assert!(e.counters_out_of_reach());
    }

    #[test]
    fn statuses_compare_by_code() {
        let s = Status::from_result(CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY);
        assert!(s.is(CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY));
        assert!(!s.is(CUptiResult::CUPTI_ERROR_UNKNOWN));
        let renamed = Status {
            name: "something else".into(),
            ..s
        };
        assert!(renamed.is(CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY));
    }

    #[test]
    fn busy_maps_to_another_profiler() {
        let e = CuptiError::CountersBusy {
            during: "cuptiPmSamplingStart",
            status: Status {
                name: "CUPTI_ERROR_HARDWARE_BUSY".into(),
                code: 26,
                message: String::new(),
            },
        };
        assert!(e.to_string().contains("another profiler"));
    }

    #[test]
    fn unknown_metric_lists_suggestions() {
        let e = CuptiError::UnknownMetric {
            name: "dram__thruput.avg".into(),
            suggestions: vec!["dram__throughput.avg".into()],
        };
        assert!(
            e.to_string()
                .contains("did you mean `dram__throughput.avg`")
        );
    }

    #[test]
    fn out_of_range_names_the_count() {
        let e = CuptiError::DeviceOutOfRange { index: 3, count: 1 };
        assert!(e.to_string().contains("0 to 0"), "{e}");
    }
}
