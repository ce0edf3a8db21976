//! The sampler side of cufall: PM sampling of every selected GPU through CUPTI, NVML beside it,
//! and the `record`, `metrics`, `serve` commands. The binary (`src/main.rs`) parses arguments and
//! dispatches here; the live view uses [`session`] directly.
//!
//! | module | what it does |
//! |---|---|
//! | [`session`] | the reusable API: prepare (validate + arm GPUs), start (to a trace and/or a live feed), stop |
//! | [`pipeline`] | per-device decode thread, evaluator threads, the single writer/sink thread (`decode`, `evaluate`, `sink`, behind small traits over CUPTI) |
//! | [`recorder`] | the program's NVTX ranges, kernels, copies and API calls, from the capture library |
//! | [`hoststacks`] | the stacks of the program's host threads: Python with py-spy's library, native frames with perf events for processes without Python (and the hidden `probe-host-stacks`) |
//! | [`holes`] | timestamps → kept samples + explicit drop records (holes, warm-up) |
//! | [`cost`] | what a metric set costs from its counter-data bytes per sample: decoder load, cores, the finest lossless and the default interval |
//! | [`sizing`] | counter-data image sizes and when to swap them so no sample is silently lost; evaluator threads, memory and CPU a rate needs |
//! | [`spec`] | `--metric`/`--denominator`/`--full-scale`/`--sm-spread` → columns and heatmaps |
//! | [`nvml`] | the NVML side channel |
//! | [`program`] | the program run under cufall: found, started, stopped, its exit code |
//! | [`record`], [`metrics_cmd`] | the subcommands (the hidden `probe-sampler` is the binary's own) |
//! | [`serve`] | `cufall serve`: the Prometheus exporter and its flight recorder |
//! | [`cli`] | the other subcommands' flags, the one duration syntax, hints added to errors |
#![deny(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod argv0;
pub mod cli;
pub mod control;
pub mod cost;
pub mod cpus;
pub mod duration;
pub mod holes;
pub mod hoststacks;
pub mod metrics_cmd;
pub mod nvml;
mod os;
pub mod pipeline;
pub mod program;
pub mod record;
pub mod recorder;
pub mod serve;
pub mod session;
pub mod sizing;
pub mod spec;
pub mod units;

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of every trace timestamp.
pub use cufall_trace::model::now_unix_ns;

/// Turns a subcommand's result (an exit code) into the binary's `ExitCode`.
pub fn exit_code(r: anyhow::Result<i32>) -> anyhow::Result<std::process::ExitCode> {
    r.map(|c| std::process::ExitCode::from(u8::try_from(c.clamp(0, 255)).unwrap_or(1)))
}

#[cfg(test)]
mod imports {
    /// No circle among the modules of the library, nor of the binary (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall (lib.rs)", &src.join("lib.rs"));
        cufall_testkit::imports::assert_one_way("cufall (main.rs)", &src.join("main.rs"));
    }
}
