//! The sampler side of cufall: PM sampling of every selected GPU through CUPTI, NVML beside it,
//! and the `record`, `metrics` commands. The binary (`src/main.rs`) parses arguments and
//! dispatches here; the live view uses [`session`] directly.
//!
//! | module | what it does |
//! |---|---|
//! | [`session`] | the reusable API: prepare (validate + arm GPUs), start (to a trace and/or a live feed), stop |
//! | [`pipeline`] | per-device decode thread, evaluator threads, the single writer/sink thread (`decode`, `evaluate`, `sink`, behind small traits over CUPTI) |
//! | [`capture`] | the program's NVTX ranges, kernels, copies and API calls, from the capture library |
//! | [`gaps`] | timestamps → kept samples + explicit drop records (holes, warm-up) |
//! | [`sizing`] | counter-data image sizes and when to swap them so no sample is silently lost; evaluator threads, memory and CPU a rate needs |
//! | [`spec`] | `--metric`/`--denominator`/`--full-scale`/`--sm-spread` → columns and heatmaps |
//! | [`nvml`] | the NVML side channel |
//! | [`program`] | the program run under cufall: found, started, stopped, its exit code |
//! | [`record`], [`metrics_cmd`] | the subcommands (the hidden `probe-sampler` is the binary's own) |
//! | [`cli`] | the other subcommands' flags, the one duration syntax, hints added to errors |
#![deny(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod capture;
pub mod cli;
pub mod control;
pub mod gaps;
pub mod metrics_cmd;
pub mod nvml;
mod os;
pub mod pipeline;
pub mod program;
pub mod record;
pub mod session;
pub mod sizing;
pub mod spec;
pub mod units;

/// Default interval for `metric_count` metrics: the finest one at which one GPU costs at most
/// one core and 512 MB (the goal for a node of eight), measured on an H200 (GH100, CUPTI 13.0,
/// driver 580, 2026-12-01, `docs/benchmarks-sampler.md`): 50 µs for up to two metrics (0.82
/// cores, 412 MB peak), 100 µs for more (four metrics cost 2.0 cores at 30 µs). Finer intervals
/// down to [`lossless_floor_ns`] are lossless too, at a higher cost that is printed up front.
pub fn default_interval_ns(metric_count: usize) -> u64 {
    if metric_count <= 2 { 50_000 } else { 100_000 }
}

/// The finest interval this pipeline held without loss for 60 s under a matmul load on an H200
/// for `metric_count` metrics (25 µs for one, 30 µs for two to four; 20 µs lost 2 % with one),
/// or `None` where nothing was measured. CUPTI's decoder is the limit: it costs 18 µs (one
/// metric) to 27 µs (two to four) of CPU per sample, on the one thread a device allows. Finer
/// intervals get a note at start: holes are likely, and each is recorded.
pub fn lossless_floor_ns(metric_count: usize) -> Option<u64> {
    match metric_count {
        0 | 1 => Some(25_000),
        2..=4 => Some(30_000),
        _ => None,
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of every trace timestamp.
pub fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(cufall_trace::model::nanos)
        .unwrap_or(0)
}

/// Turns a subcommand's result (an exit code) into the binary's `ExitCode`.
pub fn exit_code(r: anyhow::Result<i32>) -> anyhow::Result<std::process::ExitCode> {
    r.map(|c| std::process::ExitCode::from(u8::try_from(c.clamp(0, 255)).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_never_finer_than_what_was_measured_lossless() {
        for n in 0..12 {
            let d = default_interval_ns(n);
            assert!(d >= sizing::MIN_INTERVAL_NS);
            if let Some(floor) = lossless_floor_ns(n) {
                assert!(d >= floor, "{n} metrics: default {d} ns < floor {floor} ns");
            }
        }
        assert_eq!(default_interval_ns(2), 50_000);
        assert_eq!(default_interval_ns(4), 100_000);
        assert_eq!(lossless_floor_ns(1), Some(25_000));
    }
}
