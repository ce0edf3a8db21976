//! `cufall gui [TRACE ...]`: the desktop timeline (`cufall_gui`), behind the default `gui`
//! feature.

use cufall_sampler::args::analysis::PhasesArg;
use std::process::ExitCode;

/// `cufall gui [TRACE [TRACE]] [--align PHASE]`.
#[derive(clap::Args, Debug)]
pub struct GuiArgs {
    /// Recordings to open: one, two to compare (A and B), or the nodes of one run (any number,
    /// on the wall clock; more than two always are). Without any, the window opens empty: drop
    /// a recording on it or type its path.
    #[arg(value_name = "TRACE")]
    pub traces: Vec<std::path::PathBuf>,
    /// Align the second recording at this phase (an NVTX range path such as `verify` or
    /// `step/verify`): its first range starts where the first recording's does; `wall`: every
    /// recording on the shared wall clock, unshifted, each node's GPUs in groups of their own
    /// (hosts' recordings of one run). Default: their first samples line up.
    #[arg(long, value_name = "PHASE|wall")]
    pub align: Option<String>,
    #[command(flatten)]
    pub phases: PhasesArg,
}

/// Problems with the recordings are shown in the window (and on stderr); the error is for a
/// window that cannot open.
pub fn run(args: GuiArgs) -> anyhow::Result<ExitCode> {
    cufall_gui::run(cufall_gui::GuiOptions {
        traces: args.traces,
        align: args.align,
        phases: args.phases.select(),
    })?;
    Ok(ExitCode::SUCCESS)
}
