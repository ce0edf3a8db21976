//! `cufall serve [--listen ADDR:PORT] [--keep 5m] [--dump-dir DIR] [flags of record]`.
//!
//! The listen address is bound first, so a port in use or an address not allowed is said
//! before any GPU is touched. The first run is started here: a machine without a GPU, CUPTI or
//! driver gets the message `record` gives and a non-zero exit; only the counters being held by
//! another profiler lets the exporter start (sampling NVML, retrying the counters).

use super::flight::Budget;
use super::session_backend::SessionBackend;
use super::{Backend, DEFAULT_PORT, Exporter, ServeOptions};
use crate::cli::duration::parse_positive_duration;
use crate::record::SelectionArgs;
use crate::session::CounterPolicy;
use anyhow::anyhow;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Flags of `cufall serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Address and port of the HTTP server (/metrics, /dump). 0.0.0.0 listens on every
    /// interface; 127.0.0.1 on this machine only.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = format!("0.0.0.0:{DEFAULT_PORT}"))]
    pub listen: String,
    /// How much of the full-resolution samples the flight recorder keeps in memory.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_positive_duration)]
    pub keep: Duration,
    /// Folder the flight recorder's traces are written to (POST /dump, or SIGUSR1).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dump_dir: PathBuf,
    /// Accept POST /dump from other machines too (default: from this machine only).
    #[arg(long)]
    pub allow_remote_dump: bool,
    #[command(flatten)]
    pub selection: SelectionArgs,
}

/// Runs `cufall serve` until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let (cfg, selection) = args.selection.to_config(CounterPolicy::Required)?;
    if !args.dump_dir.is_dir() {
        anyhow::bail!(
            "--dump-dir {}: no such folder; create it or choose another",
            args.dump_dir.display()
        );
    }
    let server = super::http::bind(&args.listen)?;
    let mut opts = ServeOptions::new(args.dump_dir.clone());
    opts.keep = args.keep;
    opts.allow_remote_dump = args.allow_remote_dump;
    opts.heatmaps = selection.heatmaps.clone();
    let exporter = Exporter::new(opts);
    let mut backend = SessionBackend {
        cfg,
        heatmaps: selection.heatmaps,
    };
    let first = match backend.start() {
        Ok(s) => s,
        Err(e) => {
            let e = anyhow::Error::from(e);
            return Err(anyhow!(
                "{}",
                crate::cli::hint::message(&e, &crate::cli::hint::command_name())
            ));
        }
    };
    if let Err(why) = check_memory(&first.feed.info, args.keep) {
        drop(first.run.stop());
        anyhow::bail!("{why}");
    }
    say_cost(&exporter, &first.feed.info, args.keep);
    crate::os::catch_interrupts();
    let (dump_flag, _) = crate::os::catch_window_signals();
    let serving = super::start(server, exporter, backend, Some(first))?;
    let exporter = std::sync::Arc::clone(&serving.exporter);
    exporter.log(&format!(
        "serving http://{}/metrics; flight recorder: POST /dump {} or SIGUSR1 to pid {}",
        serving
            .addr
            .map_or_else(|| args.listen.clone(), |a| a.to_string()),
        if args.allow_remote_dump {
            "from any peer"
        } else {
            "from this machine"
        },
        std::process::id()
    ));
    while !crate::os::interrupted() {
        std::thread::sleep(Duration::from_millis(100));
        if dump_flag.swap(false, Ordering::SeqCst) {
            let e = std::sync::Arc::clone(&exporter);
            // A signal's dump runs beside scrapes; a second one while it runs is refused.
            std::thread::spawn(move || {
                if let Err(super::DumpRefused::Busy) = e.dump() {
                    e.log("SIGUSR1: a dump is already being written; ignored");
                }
            });
        }
    }
    exporter.log("stopping");
    serving.stop();
    Ok(0)
}

/// Says at start what the flight recorder will hold, in memory, and what it costs.
fn say_cost(exporter: &Exporter, info: &cufall_live::FeedInfo, keep: Duration) {
    let budget = Budget::new(
        info.devices.len(),
        info.metrics.len(),
        info.interval_ns,
        cufall_trace::model::nanos(keep),
    );
    exporter.log(&format!(
        "flight recorder keeps the last {}: {}",
        humantime::format_duration(keep),
        budget.describe()
    ));
}

/// Refuses a `--keep` whose flight recorder would take more than half of the memory this
/// machine has available (`MemAvailable`; not checked where `/proc/meminfo` does not say).
fn check_memory(info: &cufall_live::FeedInfo, keep: Duration) -> Result<(), String> {
    let budget = Budget::new(
        info.devices.len(),
        info.metrics.len(),
        info.interval_ns,
        cufall_trace::model::nanos(keep),
    );
    let Some(available) = mem_available_bytes() else {
        return Ok(());
    };
    budget.check(&humantime::format_duration(keep).to_string(), available)
}

fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
