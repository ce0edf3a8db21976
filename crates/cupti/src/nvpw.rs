//! Evaluation of PM-sampling counter data through the Perfworks host library (`libnvperf_host`),
//! which CUPTI's own profiler host API is built on.
//!
//! `cuptiProfilerHostEvaluateToGpuValues` takes metric *names* on every call, so each sample
//! pays for parsing every name and for reading the device's attributes out of the image again.
//! Here the names become evaluation requests once, the device attributes are set from the first
//! image once, and each sample is one `NVPW_MetricsEvaluator_EvaluateToGpuValues` call.
//!
//! The library is optional: where it cannot be found or refuses the chip, the caller keeps
//! CUPTI's evaluation. The parameter structs follow `nvperf_host.h` and `nvperf_cuda_host.h`;
//! each starts with its size, which Perfworks checks, so an older library refuses fields it
//! does not know instead of misreading them.

use crate::error::{CuptiError, Result};
use std::ffi::{CString, c_char, c_void};
use std::mem::offset_of;
use std::path::PathBuf;
use std::ptr::{NonNull, null, null_mut};
use std::sync::OnceLock;

/// `NVPA_Status`: 0 is success.
type NvpaStatus = i32;

#[repr(C)]
struct InitializeHostParams {
    struct_size: usize,
    p_priv: *mut c_void,
}

#[repr(C)]
struct ScratchSizeParams {
    struct_size: usize,
    p_priv: *mut c_void,
    chip: *const c_char,
    availability: *const u8,
    scratch_size: usize,
}

#[repr(C)]
struct InitializeParams {
    struct_size: usize,
    p_priv: *mut c_void,
    scratch: *mut u8,
    scratch_size: usize,
    chip: *const c_char,
    availability: *const u8,
    counter_data: *const u8,
    counter_data_size: usize,
    evaluator: *mut c_void,
}

/// `NVPW_MetricEvalRequest`: a metric name turned into indices once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EvalRequest {
    metric_index: usize,
    metric_type: u8,
    rollup_op: u8,
    submetric: u16,
}

/// `NVPW_MetricEvalRequest_STRUCT_SIZE`: up to the end of its last field, without padding.
const EVAL_REQUEST_STRUCT_SIZE: usize = offset_of!(EvalRequest, submetric) + size_of::<u16>();

#[repr(C)]
struct ConvertParams {
    struct_size: usize,
    p_priv: *mut c_void,
    evaluator: *mut c_void,
    name: *const c_char,
    request: *mut EvalRequest,
    request_struct_size: usize,
}

#[repr(C)]
struct SetDeviceAttributesParams {
    struct_size: usize,
    p_priv: *mut c_void,
    evaluator: *mut c_void,
    counter_data: *const u8,
    counter_data_size: usize,
}

#[repr(C)]
struct EvaluateParams {
    struct_size: usize,
    p_priv: *mut c_void,
    evaluator: *mut c_void,
    requests: *const EvalRequest,
    num_requests: usize,
    request_struct_size: usize,
    request_stride: usize,
    counter_data: *const u8,
    counter_data_size: usize,
    range_index: usize,
    isolated: u8,
    values: *mut f64,
}

#[repr(C)]
struct DestroyParams {
    struct_size: usize,
    p_priv: *mut c_void,
    evaluator: *mut c_void,
}

type Call<P> = unsafe extern "C" fn(*mut P) -> NvpaStatus;

/// The entry points, resolved once per process.
struct Library {
    scratch_size: Call<ScratchSizeParams>,
    initialize: Call<InitializeParams>,
    convert: Call<ConvertParams>,
    set_device_attributes: Call<SetDeviceAttributesParams>,
    evaluate: Call<EvaluateParams>,
    destroy: Call<DestroyParams>,
    /// Keeps the entry points mapped for the life of the process.
    _lib: libloading::Library,
}

static LIBRARY: OnceLock<std::result::Result<Library, String>> = OnceLock::new();

fn library() -> Result<&'static Library> {
    LIBRARY
        .get_or_init(load)
        .as_ref()
        .map_err(|why| CuptiError::FastEvaluator(why.clone()))
}

/// Where `libnvperf_host` may be: beside the libcupti this process loaded (the pair ships
/// together), then wherever the dynamic linker finds it.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        for line in maps.lines() {
            let Some(path) = line.split_whitespace().nth(5) else {
                continue;
            };
            let p = PathBuf::from(path);
            let is_cupti = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libcupti.so"));
            if let (true, Some(dir)) = (is_cupti, p.parent()) {
                let c = dir.join("libnvperf_host.so");
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out.push(PathBuf::from("libnvperf_host.so"));
    out
}

fn load() -> std::result::Result<Library, String> {
    let mut tried = Vec::new();
    for path in candidates() {
        // SAFETY: libnvperf_host's initialisers only set up its own state; it is the library
        // CUPTI ships beside itself for this purpose.
        let lib = match unsafe { libloading::Library::new(&path) } {
            Ok(l) => l,
            Err(e) => {
                tried.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        return resolve(lib).map_err(|e| format!("{}: {e}", path.display()));
    }
    Err(format!(
        "libnvperf_host.so was not found ({})",
        tried.join("; ")
    ))
}

fn resolve(lib: libloading::Library) -> std::result::Result<Library, String> {
    /// Copies a symbol's address out as a function pointer of its declared type.
    ///
    /// # Safety
    /// `T` must be the symbol's true C signature.
    unsafe fn sym<T: Copy>(
        lib: &libloading::Library,
        name: &[u8],
    ) -> std::result::Result<T, String> {
        // SAFETY: the caller states `T` is the symbol's signature.
        unsafe { lib.get::<T>(name) }
            .map(|s| *s)
            .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(name)))
    }
    // SAFETY: each type below is the signature `nvperf_host.h` / `nvperf_cuda_host.h` declare:
    // `NVPA_Status f(Params*)`.
    unsafe {
        let init: Call<InitializeHostParams> = sym(&lib, b"NVPW_InitializeHost\0")?;
        let mut p = InitializeHostParams {
            struct_size: size_of::<InitializeHostParams>(),
            p_priv: null_mut(),
        };
        let status = init(&mut p);
        if status != 0 {
            return Err(format!("NVPW_InitializeHost returned status {status}"));
        }
        Ok(Library {
            scratch_size: sym(
                &lib,
                b"NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize\0",
            )?,
            initialize: sym(&lib, b"NVPW_CUDA_MetricsEvaluator_Initialize\0")?,
            convert: sym(
                &lib,
                b"NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest\0",
            )?,
            set_device_attributes: sym(&lib, b"NVPW_MetricsEvaluator_SetDeviceAttributes\0")?,
            evaluate: sym(&lib, b"NVPW_MetricsEvaluator_EvaluateToGpuValues\0")?,
            destroy: sym(&lib, b"NVPW_MetricsEvaluator_Destroy\0")?,
            _lib: lib,
        })
    }
}

fn check(call: &str, status: NvpaStatus) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(CuptiError::FastEvaluator(format!(
            "{call} returned NVPA status {status}"
        )))
    }
}

/// One metrics evaluator with its requests converted; one per evaluating thread.
pub struct FastEvaluator {
    lib: &'static Library,
    evaluator: NonNull<c_void>,
    requests: Vec<EvalRequest>,
    /// Set once from the first image: every image of a device carries the same attributes.
    attributes_set: bool,
    /// Perfworks keeps pointing into this while the evaluator lives.
    _scratch: Vec<u8>,
}

// SAFETY: the evaluator object is used only through `&mut self` (or dropped), so it is never
// shared between threads; Perfworks ties it to no thread.
unsafe impl Send for FastEvaluator {}

impl std::fmt::Debug for FastEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastEvaluator")
            .field("metrics", &self.requests.len())
            .finish_non_exhaustive()
    }
}

impl FastEvaluator {
    /// An evaluator for `metrics` on `chip`, its names converted to requests.
    pub fn new(chip: &str, availability: Option<&[u8]>, metrics: &[String]) -> Result<Self> {
        let lib = library()?;
        let chip = CString::new(chip)
            .map_err(|_| CuptiError::InvalidArgument("chip name has a NUL".into()))?;
        let availability = availability.map_or(null(), <[u8]>::as_ptr);
        let mut size = ScratchSizeParams {
            struct_size: size_of::<ScratchSizeParams>(),
            p_priv: null_mut(),
            chip: chip.as_ptr(),
            availability,
            scratch_size: 0,
        };
        // SAFETY: the chip name and availability image outlive the call.
        let status = unsafe { (lib.scratch_size)(&mut size) };
        check(
            "NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize",
            status,
        )?;
        let mut scratch = vec![0u8; size.scratch_size];
        let mut init = InitializeParams {
            struct_size: size_of::<InitializeParams>(),
            p_priv: null_mut(),
            scratch: scratch.as_mut_ptr(),
            scratch_size: scratch.len(),
            chip: chip.as_ptr(),
            availability,
            counter_data: null(),
            counter_data_size: 0,
            evaluator: null_mut(),
        };
        // SAFETY: the scratch buffer is owned by the returned value and outlives the evaluator.
        check("NVPW_CUDA_MetricsEvaluator_Initialize", unsafe {
            (lib.initialize)(&mut init)
        })?;
        let evaluator = NonNull::new(init.evaluator).ok_or_else(|| {
            CuptiError::FastEvaluator(
                "NVPW_CUDA_MetricsEvaluator_Initialize gave no evaluator".into(),
            )
        })?;
        let mut fast = FastEvaluator {
            lib,
            evaluator,
            requests: Vec::with_capacity(metrics.len()),
            attributes_set: false,
            _scratch: scratch,
        };
        for name in metrics {
            let c = CString::new(name.as_str())
                .map_err(|_| CuptiError::InvalidArgument(format!("metric `{name}` has a NUL")))?;
            let mut request = EvalRequest::default();
            let mut p = ConvertParams {
                struct_size: size_of::<ConvertParams>(),
                p_priv: null_mut(),
                evaluator: fast.evaluator.as_ptr(),
                name: c.as_ptr(),
                request: &mut request,
                request_struct_size: EVAL_REQUEST_STRUCT_SIZE,
            };
            // SAFETY: the evaluator is live; name and request outlive the call.
            let status = unsafe { (lib.convert)(&mut p) };
            check(
                "NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest",
                status,
            )
            .map_err(|e| CuptiError::FastEvaluator(format!("metric `{name}`: {e}")))?;
            fast.requests.push(request);
        }
        Ok(fast)
    }

    pub fn metric_count(&self) -> usize {
        self.requests.len()
    }

    /// Evaluates sample `index` of a decoded PM-sampling image into one value per metric.
    pub fn evaluate(&mut self, counter_data: &[u8], index: usize, out: &mut [f64]) -> Result<()> {
        if out.len() != self.requests.len() {
            return Err(CuptiError::InvalidArgument(format!(
                "{} output slots for {} metrics",
                out.len(),
                self.requests.len()
            )));
        }
        if !self.attributes_set {
            let mut p = SetDeviceAttributesParams {
                struct_size: size_of::<SetDeviceAttributesParams>(),
                p_priv: null_mut(),
                evaluator: self.evaluator.as_ptr(),
                counter_data: counter_data.as_ptr(),
                counter_data_size: counter_data.len(),
            };
            // SAFETY: the evaluator and image are live for the call.
            check("NVPW_MetricsEvaluator_SetDeviceAttributes", unsafe {
                (self.lib.set_device_attributes)(&mut p)
            })?;
            self.attributes_set = true;
        }
        let mut p = EvaluateParams {
            struct_size: size_of::<EvaluateParams>(),
            p_priv: null_mut(),
            evaluator: self.evaluator.as_ptr(),
            requests: self.requests.as_ptr(),
            num_requests: self.requests.len(),
            request_struct_size: EVAL_REQUEST_STRUCT_SIZE,
            request_stride: size_of::<EvalRequest>(),
            counter_data: counter_data.as_ptr(),
            counter_data_size: counter_data.len(),
            range_index: index,
            isolated: 1,
            values: out.as_mut_ptr(),
        };
        // SAFETY: the requests (`num_requests` of them, `request_stride` apart), the image and
        // the output (one double per request) are live and sized as stated.
        check("NVPW_MetricsEvaluator_EvaluateToGpuValues", unsafe {
            (self.lib.evaluate)(&mut p)
        })
    }
}

impl Drop for FastEvaluator {
    fn drop(&mut self) {
        let mut p = DestroyParams {
            struct_size: size_of::<DestroyParams>(),
            p_priv: null_mut(),
            evaluator: self.evaluator.as_ptr(),
        };
        // SAFETY: the evaluator is live and destroyed exactly once; Drop cannot report errors.
        let _ = unsafe { (self.lib.destroy)(&mut p) };
    }
}

/// Whether two evaluations of one sample agree: equal to 1 part in 10⁹, or both not numbers.
pub fn same_values(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Perfworks checks `structSize` against its own layouts; these are the header's sizes.
    #[test]
    fn parameter_structs_have_the_header_sizes() {
        assert_eq!(EVAL_REQUEST_STRUCT_SIZE, 12);
        assert_eq!(size_of::<EvalRequest>(), 16);
        assert_eq!(size_of::<InitializeHostParams>(), 16);
        assert_eq!(size_of::<ScratchSizeParams>(), 40);
        assert_eq!(size_of::<InitializeParams>(), 72);
        assert_eq!(size_of::<ConvertParams>(), 48);
        assert_eq!(size_of::<SetDeviceAttributesParams>(), 40);
        assert_eq!(offset_of!(EvaluateParams, isolated), 80);
        assert_eq!(size_of::<EvaluateParams>(), 96);
        assert_eq!(size_of::<DestroyParams>(), 24);
    }

    #[test]
    fn values_agree_to_a_part_in_a_billion_and_nan_matches_nan() {
        assert!(same_values(
            &[1.0, f64::NAN, 0.0],
            &[1.0 + 1e-12, f64::NAN, 0.0]
        ));
        assert!(!same_values(&[1.0], &[1.001]));
        assert!(!same_values(&[1.0], &[f64::NAN]));
        assert!(!same_values(&[1.0], &[1.0, 2.0]));
    }

    #[test]
    fn a_machine_without_the_library_gets_a_typed_refusal() {
        // No CUDA here: the library is absent and the caller keeps CUPTI's evaluation.
        if std::path::Path::new("/usr/local/cuda").exists() {
            return;
        }
        let e = FastEvaluator::new("GH100", None, &["dram__throughput.avg".into()]).unwrap_err();
        assert!(e.to_string().contains("libnvperf_host"), "{e}");
    }
}
