//! The library behind the `cufall` binary: every command the library can run (`commands/`, one
//! file per subcommand), the pieces of the command line they share (`args/`), and the sampler:
//! PM sampling of every selected GPU through CUPTI, NVML beside it, the program's capture and
//! host stacks. The binary (`src/bin/cufall/main.rs`) parses arguments and dispatches here; its
//! own commands (the live view, `gui`) use [`session`] and the viewer directly.
//!
//! | module | what it does |
//! |---|---|
//! | [`commands`] | one module per subcommand: `record`, `metrics`, `control`, `serve`, `probe` (the hidden `probe-sampler`), `report`, `diff`, `export`, `view` (and `replay`), `info` |
//! | [`args`] | the pieces of the command line: the one duration syntax, numbers, device lists, and the flags several commands share; each parser's typed error keeps the message |
//! | [`hint`] | the fix added to an error's message, naming flags and the command as it was run |
//! | [`argv0`] | the command as the user typed it |
//! | [`session`] | the reusable API: `config` (what to sample, checked), `arm` (prepare: validate + arm GPUs), `handle` (start to a trace and/or a live feed, stop), `estimate` (the cost said before starting) |
//! | [`recording`] | one `record` run from start to end: the program, its capture windows, the wait for the end |
//! | [`pipeline`] | per-device decode thread and evaluator threads, behind small traits over CUPTI (`decode`, `evaluate`, `device`, `pause`): what the sink writes |
//! | [`sink`] | writing the trace: the one sink thread (batches in order, the trace, the live feed), capture windows (`window`), the trace file's life around it (`trace`) |
//! | [`recorder`] | the program's NVTX ranges, kernels, copies and API calls, from the capture library |
//! | [`hoststacks`] | the stacks of the program's host threads: Python with py-spy's library, native frames with perf events for processes without Python (and the hidden `probe-host-stacks`) |
//! | [`control_file`] | the control files and sockets by which `cufall control` reaches a running `record` or `serve` |
//! | [`cpus`] | the fence that keeps cufall's own threads off the CPUs the program is kept to |
//! | [`holes`] | timestamps → kept samples + explicit drop records (holes, warm-up) |
//! | [`cost`] | what a metric set costs from its counter-data bytes per sample: decoder load, cores, the finest lossless and the default interval; the one choice of a session's interval |
//! | [`sizing`] | counter-data image sizes and when to swap them so no sample is silently lost; evaluator threads, memory and CPU a rate needs |
//! | [`metric_spec`] | the metric specs: `--metric`/`--denominator`/`--full-scale`/`--sm-spread` → columns and heatmaps |
//! | [`nvml`] | the NVML side channel |
//! | [`program`] | the program run under cufall: found, started, stopped, its exit code |
//! | [`serve`] | the Prometheus exporter and its flight recorder, behind `cufall serve` |
#![deny(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod args;
pub mod argv0;
pub mod capcal;
pub mod commands;
pub mod control_file;
pub mod cost;
pub mod cpus;
pub mod hint;
pub mod holes;
pub mod hoststacks;
pub mod metric_spec;
pub mod nvml;
mod os;
pub mod pipeline;
pub mod program;
pub mod recorder;
pub mod recording;
pub mod serve;
pub mod session;
pub mod sink;
pub mod sizing;

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
        cufall_testkit::imports::assert_one_way(
            "cufall (bin/cufall/main.rs)",
            &src.join("bin/cufall/main.rs"),
        );
    }
}
