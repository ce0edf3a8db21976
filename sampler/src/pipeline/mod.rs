//! The PM-sampling pipeline of one device, and the single sink that writes everything.
//!
//! ```text
//!  decode thread (1 per GPU)          evaluator threads (N per GPU)         sink thread (1)
//!  ─────────────────────────          ─────────────────────────────         ───────────────
//!  decode HW buffer → image A   ──▶   evaluate one chunk of a sealed    ──▶ reorder by seq
//!  seal A after 20 ms / N samples     image into a SampleBatch; the          (bounded), write
//!  read its timestamps, find holes    last chunk restores the written        the trace, feed the
//!  (drop records); go on with B ◀──   prefix and hands the image back        live view, count drops
//! ```
//!
//! | module | part |
//! |---|---|
//! | [`source`] | what the pipeline asks of CUPTI ([`PmSource`], [`ImageStore`], [`SampleEvaluator`]) and the CUPTI implementations |
//! | [`decode`] | the decode state machine: decode calls, sealing, holes, overflow re-arm, stop |
//! | [`evaluate`] | evaluator threads: chunks of sealed images → batches; failures become drops |
//! | [`sink`] | the one thread that puts batches in order and writes the trace and the live feed |
//! | [`device`] | arming a GPU through CUPTI and running its pipeline on a thread; arming it again after a pause |
//! | [`pause`] | sharing the counters: a pause releases every device's PM sampling, the end of the pause arms them again |
//! | [`window`] | capture windows: rows held until their windows are known, then cut to them |
//!
//! The decoder never lets an image get near full (see [`crate::sizing`]), never evaluates, and
//! never initialises images through CUPTI after start: the evaluators restore the bytes decode
//! wrote from a blank pattern, and check now and then that decode wrote nowhere else. Every
//! hole in the timestamps becomes a drop record ([`crate::gaps`]); every sample an evaluator
//! could not turn into values becomes one too, so the samples kept plus the samples in drop
//! records always account for every sample the hardware delivered.

pub mod decode;
pub mod device;
pub mod evaluate;
pub mod pause;
pub mod sink;
pub mod source;
pub mod window;

pub use decode::{DecodeConfig, DeviceParts, run_device};
pub use device::{ArmError, DeviceSetup, DeviceThread, Ready, Rearm, spawn_device};
pub use sink::{DropCount, DropTally, MAX_PENDING_BATCHES, SinkResult, SinkShared, sink_main};
pub use source::{
    CuptiEvaluator, CuptiImages, CuptiSource, ImageStore, PmSource, Restored, SampleEvaluator,
};

use cufall_cupti::CuptiError;
use cufall_trace::model::{
    ApiCall, CaptureEvent, DeviceId, DropRecord, HostSample, KernelRecord, NvmlRow, NvtxRange,
    SampleBatch, StackFrame,
};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// What flows into the sink.
pub enum SinkMsg {
    /// One chunk's samples (possibly none), in the device's sequence of chunks.
    Samples {
        device: DeviceId,
        seq: u64,
        batch: SampleBatch,
    },
    Drops(Vec<DropRecord>),
    Nvml(Vec<NvmlRow>),
    Message(String),
    /// Captured from the profiled program (see [`crate::recorder`]).
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    Api(Vec<ApiCall>),
    Capture(Vec<CaptureEvent>),
    /// Host stacks (see [`crate::hoststacks`]): the stacks first seen in this batch, then the
    /// samples, which may name them; the sink writes the stacks first.
    Host {
        stacks: Vec<StackFrame>,
        samples: Vec<HostSample>,
    },
    /// A capture window opened or closed (`--capture-range`, `--delay`, `cufall control`).
    Window(window::Edge),
}

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

/// Live counters of one device's pipeline (read by status lines, summaries and benchmarks).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    pub decode_calls: AtomicU64,
    pub samples_decoded: AtomicU64,
    pub samples_evaluated: AtomicU64,
    pub images_sealed: AtomicU64,
    pub images_allocated: AtomicU64,
    pub image_bytes: AtomicU64,
    pub counter_data_full: AtomicU64,
    pub hw_overflows: AtomicU64,
    pub restarts: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Samples CUPTI could not evaluate (each a `decode_error` drop).
    pub eval_errors: AtomicU64,
    /// Chunks whose evaluation panicked (their samples are `evaluation_failed` drops).
    pub eval_panics: AtomicU64,
    /// Samples recorded as `evaluation_failed` drops.
    pub eval_failed_samples: AtomicU64,
    pub eval_ns: AtomicU64,
    pub decode_ns: AtomicU64,
    /// CPU time of the decode thread spent reading timestamps and finding holes at seals.
    pub seal_ns: AtomicU64,
    pub partial_at_seal: AtomicU64,
    pub max_seam_ns: AtomicU64,
    /// CPU time spent making used images blank again.
    pub reset_ns: AtomicU64,
    /// Bytes written making used images blank again.
    pub reset_bytes: AtomicU64,
    /// 1 while used images are restored by their written prefix, 0 when whole (the layout is
    /// unknown, or decode was seen writing beyond the prefix).
    pub reset_by_prefix: AtomicU64,
    /// Evaluator threads running.
    pub evaluators_alive: AtomicU64,
    /// Evaluator threads started.
    pub evaluators: AtomicU64,
    /// Images made blank again so far.
    pub images_restored: AtomicU64,
    /// Longest single decode call.
    pub max_decode_call_ns: AtomicU64,
    /// Longest time between the starts of two decode calls: how long the hardware buffer
    /// filled unread.
    pub max_decode_gap_ns: AtomicU64,
    /// Most samples one decode call moved.
    pub max_samples_per_decode: AtomicU64,
    /// Decode calls that started more than [`SLOW_DECODE`] after the previous one.
    pub late_decodes: AtomicU64,
    /// Decode calls and their CPU time by how many samples they moved (see [`CALL_SIZE_BINS`]).
    pub calls_by_size: [AtomicU64; CALL_SIZE_BINS.len()],
    pub decode_ns_by_size: [AtomicU64; CALL_SIZE_BINS.len()],
    pub samples_by_size: [AtomicU64; CALL_SIZE_BINS.len()],
    pub bytes_per_sample: AtomicU64,
    pub samples_per_image: AtomicU64,
    /// Why the device's pipeline ended early, if it did (the error with its causes).
    pub error: Mutex<Option<String>>,
}

/// Upper bounds (samples moved by one decode call) of the bins decode cost is counted in.
pub const CALL_SIZE_BINS: [u64; 7] = [100, 1_000, 3_000, 10_000, 30_000, 100_000, u64::MAX];

/// The bin of a decode call that moved `samples` samples.
pub fn call_size_bin(samples: u64) -> usize {
    CALL_SIZE_BINS
        .iter()
        .position(|&b| samples <= b)
        .unwrap_or(CALL_SIZE_BINS.len() - 1)
}

/// A decode call this long after the previous one (twice the decode period) is counted as late
/// (`late_decodes`).
pub const SLOW_DECODE: Duration = Duration::from_millis(50);
