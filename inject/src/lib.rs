//! `libcufall_inject.so`: what `cufall record -- CMD` loads into the profiled program.
//!
//! Two entry points, both called by NVIDIA's own loaders:
//!
//! - `InitializeInjection`, which CUDA calls when it initialises in a process whose environment
//!   names this library in `CUDA_INJECTION64_PATH`: it sets up CUPTI activity tracing of
//!   kernels, copies, memsets, graph launches and API calls ([`cupti`]).
//! - `InitializeInjectionNvtx2`, which each NVTX copy calls on its first NVTX call when
//!   `NVTX_INJECTION64_PATH` names this library: it installs our NVTX handlers ([`nvtx`]).
//!
//! Records go to the recording cufall through [`delivery`], one Unix-socket connection per
//! process. Nothing here may panic into the program, block it on a missing recorder, or allocate
//! through anything but the system allocator.
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod calibrate;
pub mod callbacks;
pub mod cupti;
pub mod delivery;
pub mod ffi;
pub mod nvtx;

use cufall_capture::CaptureEventKind;
use std::sync::Once;
use std::time::Duration;

/// How long the exit hook waits for the last records to reach the recorder.
const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

static EXIT_HOOKS: Once = Once::new();

/// Registers the exit flush and the fork handler once per process.
pub fn ensure_exit_hooks() {
    EXIT_HOOKS.call_once(|| ffi::register_process_hooks(at_exit, after_fork_child));
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let h = delivery::hub();
        if !h.live() {
            return;
        }
        cupti::flush();
        nvtx::report_open_ranges();
        h.close(EXIT_FLUSH_TIMEOUT);
    });
}

extern "C" fn after_fork_child() {
    let _ = std::panic::catch_unwind(|| {
        delivery::after_fork_in_child();
        let h = delivery::hub();
        h.status(
            CaptureEventKind::Forked,
            1,
            &format!(
                "forked from process {}",
                std::os::unix::process::parent_id()
            ),
        );
    });
}

/// Called by CUDA (driver) when it initialises with `CUDA_INJECTION64_PATH` naming this library.
/// Returns 1 (CUDA ignores failures; the program must run on either way).
#[allow(unsafe_code, reason = "the entry point CUDA looks up by name")]
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    let _ = std::panic::catch_unwind(|| {
        let h = delivery::hub();
        if !h.live() {
            return;
        }
        ensure_exit_hooks();
        if h.kinds.needs_cupti() {
            match cupti::attach(h.kinds) {
                Ok(a) => {
                    h.status(CaptureEventKind::CudaAttached, a.activity_kinds, &a.detail);
                }
                Err(why) => h.status(CaptureEventKind::CuptiUnavailable, 0, &why.to_string()),
            }
        } else {
            h.status(
                CaptureEventKind::CudaAttached,
                0,
                "NVTX only: CUPTI not used",
            );
        }
        if let Err(why) = callbacks::attach(h.kinds, h.range.as_ref()) {
            h.status(CaptureEventKind::CallbacksUnavailable, 0, &why.to_string());
        }
    });
    1
}

/// Called by an NVTX copy on its first call when `NVTX_INJECTION64_PATH` names this library.
#[allow(unsafe_code, reason = "the entry point NVTX looks up by name")]
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<nvtx::GetExportTable>) -> i32 {
    std::panic::catch_unwind(|| {
        let installed = nvtx::install(get_export_table);
        if installed == 1 {
            ensure_exit_hooks();
            calibrate::nvtx_once();
        }
        installed
    })
    .unwrap_or(0)
}

/// For cufall's calibration process only ([`cufall_capture::ENV_CALIBRATE`]): CUPTI's tracing
/// of the capture kinds off (`on` 0) or on (`on` 1). Returns 0, or -1 with nothing changed
/// (not a calibration process, or CUPTI refused).
#[allow(
    unsafe_code,
    reason = "an entry point cufall's calibration process looks up by name"
)]
#[unsafe(no_mangle)]
pub extern "C" fn cufall_calibration_set_tracing(on: i32) -> i32 {
    std::panic::catch_unwind(|| match calibrate::set_tracing(on != 0) {
        Ok(()) => 0,
        Err(_) => -1,
    })
    .unwrap_or(-1)
}

/// For cufall's calibration process only: flushes CUPTI's buffers and returns the kernel, copy,
/// memset and graph records they held since the last call, or -1 outside a calibration
/// process.
#[allow(
    unsafe_code,
    reason = "an entry point cufall's calibration process looks up by name"
)]
#[unsafe(no_mangle)]
pub extern "C" fn cufall_calibration_take_records() -> i64 {
    std::panic::catch_unwind(|| {
        calibrate::take_records().map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
    })
    .unwrap_or(-1)
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-inject (lib.rs)", &src.join("lib.rs"));
    }
}
