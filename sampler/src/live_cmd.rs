//! The bare `cufall` command: a live terminal heatmap of every selected GPU. The sampling
//! session (`cufall_sampler::session`) feeds the viewer (`cufall_viewer::live`) through a
//! `cufall_live` feed; nothing is written to disk.

use anyhow::{Result, anyhow};
use cufall_sampler::record::SelectionArgs;
use cufall_sampler::session::{self, CounterPolicy};
use cufall_viewer::cli::{LookArgs, live_options, parse_duration_ns};
use cufall_viewer::state::Mode;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of the live view (used when no subcommand is given).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LiveArgs {
    #[command(flatten)]
    pub selection: SelectionArgs,
    #[command(flatten)]
    pub look: LookArgs,
    /// With --print: how long to sample before printing the frame.
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_duration_ns, requires = "print")]
    pub print_after: i64,
}

/// Events the feed holds for a view that falls behind: a few seconds of 8 GPUs.
const FEED_CAPACITY: usize = 8192;

pub fn run(args: &LiveArgs) -> Result<ExitCode> {
    let (cfg, selection) = args.selection.to_config(CounterPolicy::BestEffort)?;
    let prepared = session::prepare(&cfg).map_err(|e| anyhow!("{e}"))?;
    let heatmaps = if prepared.has_counters() {
        selection.heatmaps.clone()
    } else {
        Vec::new()
    };
    let (tx, rx) = cufall_live::feed(prepared.feed_info(heatmaps), FEED_CAPACITY);
    let handle = prepared.start(Some(tx), None).map_err(|e| anyhow!("{e}"))?;
    let options = live_options(&args.look);
    let shown = if args.look.print {
        let after = Duration::from_nanos(u64::try_from(args.print_after).unwrap_or(0));
        cufall_viewer::live::print_after(
            &rx,
            &options.setup,
            Mode::Live,
            after,
            args.look.width,
            args.look.height.unwrap_or(0),
        )
        .map(|frame| print!("{frame}"))
    } else {
        cufall_viewer::live::run(rx, options)
    };
    let failed = handle.error();
    drop(handle.stop());
    shown?;
    if let Some(e) = failed {
        return Err(anyhow!("sampling stopped with an error: {e}"));
    }
    Ok(ExitCode::SUCCESS)
}
