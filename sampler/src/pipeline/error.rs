//! Why a device could not be armed or its pipeline ended early, and how a cause or a panic reads
//! on one line.

use cufall_cupti::CuptiError;
use cufall_trace::model::DeviceId;

/// Why a device's pipeline ended early.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("{device}: could not start PM sampling")]
    Start {
        device: DeviceId,
        #[source]
        source: CuptiError,
    },
    #[error("{device}: could not restart PM sampling after a hardware-buffer overflow")]
    Restart {
        device: DeviceId,
        #[source]
        source: CuptiError,
    },
    #[error("{device}: PM sampling decode failed {count} times in a row")]
    DecodeKeepsFailing {
        device: DeviceId,
        count: u32,
        #[source]
        source: CuptiError,
    },
    #[error(
        "{device}: every evaluation thread stopped (last failure: {cause}); sampling of this GPU \
ended, its unevaluated samples are recorded as evaluation_failed drops"
    )]
    EvaluatorsGone { device: DeviceId, cause: String },
    #[error("{device}: cannot start the {what} thread")]
    Spawn {
        device: DeviceId,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{device}: the {thread} thread panicked: {message}")]
    Panicked {
        device: DeviceId,
        thread: &'static str,
        message: String,
    },
}

/// `error: cause: cause…`, the way a user reads a chain of errors on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Why a device could not be armed.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    #[error(transparent)]
    Cupti(#[from] CuptiError),
    #[error(
        "sampling at {} needs about {} of memory ({devices} GPU(s) × {images} counter-data \
images of {} and a {} hardware buffer), but this machine has {} available. Use a longer \
--interval, fewer or cheaper metrics (`cufall metrics` gives each one's bytes per sample) or \
fewer --devices",
        crate::args::duration::interval_text(interval_ns.0),
        crate::sizing::format_bytes(*need_bytes),
        crate::sizing::format_bytes(*image_bytes),
        crate::sizing::format_bytes(*hw_buffer_bytes),
        crate::sizing::format_bytes(*available_bytes)
    )]
    NotEnoughMemory {
        interval_ns: cufall_trace::model::Nanos,
        need_bytes: u64,
        image_bytes: u64,
        hw_buffer_bytes: u64,
        devices: usize,
        images: usize,
        available_bytes: u64,
    },
}
