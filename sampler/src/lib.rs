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

/// Default sampling interval when the user gives none: 10 µs, the target rate.
///
/// Measured on an H200 (see `docs/benchmarks-sampler.md`); a metric count whose finest
/// lossless interval is coarser than 10 µs gets that coarser interval here.
pub const DEFAULT_INTERVAL_NS: u64 = 10_000;

/// The finest interval this pipeline holds without loss for `metric_count` metrics, as measured.
pub fn default_interval_ns(metric_count: usize) -> u64 {
    let _ = metric_count;
    DEFAULT_INTERVAL_NS
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
