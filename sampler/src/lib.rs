//! The sampler side of cufall: PM sampling of every selected GPU through CUPTI, NVML beside it,
//! and the `record`, `metrics` commands. The binary (`src/main.rs`) parses arguments and
//! dispatches here; the live view uses [`session`] directly.
//!
//! | module | what it does |
//! |---|---|
//! | [`session`] | the reusable API: prepare (validate + arm GPUs), start (to a trace and/or a live feed), stop |
//! | [`pipeline`] | per-device decode thread, evaluator threads, the single writer/sink thread |
//! | [`gaps`] | timestamps → kept samples + explicit drop records (holes, warm-up) |
//! | [`sizing`] | counter-data image sizes and when to swap them so no sample is silently lost |
//! | [`spec`] | `--metric`/`--denominator`/`--full-scale`/`--sm-spread` → columns and heatmaps |
//! | [`nvml`] | the NVML side channel |
//! | [`record`], [`metrics_cmd`], [`probe`] | the subcommands |
#![deny(unsafe_code)]

pub mod gaps;
pub mod metrics_cmd;
pub mod nvml;
mod os;
pub mod pipeline;
pub mod probe;
pub mod record;
pub mod session;
pub mod sizing;
pub mod spec;
pub mod units;

/// The interval cufall was designed around (100,000 samples/s per GPU). On an H200 with
/// CUPTI 13.0 it is *not* lossless: decoding costs about 23 µs of one core per sample, and a
/// device's samples come out of one hardware stream that only one thread can decode. See
/// `docs/benchmarks-sampler.md`.
pub const TARGET_INTERVAL_NS: u64 = 10_000;

/// Default interval: the finest this pipeline held without loss on an H200 (GH100, CUPTI 13.0,
/// driver 580) for 1, 2 and 4 metrics: 40 µs (measured 2026-11-30, `docs/benchmarks-sampler.md`;
/// 20 µs with one metric lost 0.06 % of samples in 12 s).
pub const DEFAULT_INTERVAL_NS: u64 = 40_000;

/// The finest interval this pipeline holds without loss for `metric_count` metrics, as
/// measured; more than 4 metrics were not measured and get a conservative 100 µs.
pub fn default_interval_ns(metric_count: usize) -> u64 {
    if metric_count <= 4 {
        DEFAULT_INTERVAL_NS
    } else {
        100_000
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of every trace timestamp.
pub fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Turns a subcommand's result (an exit code) into the binary's `ExitCode`.
pub fn exit_code(r: anyhow::Result<i32>) -> anyhow::Result<std::process::ExitCode> {
    r.map(|c| std::process::ExitCode::from(u8::try_from(c.clamp(0, 255)).unwrap_or(1)))
}
