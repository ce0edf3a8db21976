//! Live counters of one device's pipeline and the bins of decode cost.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

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
