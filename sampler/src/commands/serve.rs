//! `cufall serve [--listen ADDR:PORT] [--keep 5m] [--dump-dir DIR] [flags of record]`.
//!
//! The listen address is bound first, so a port in use or an address not allowed is said
//! before any GPU is touched. The first run is started here: a machine without a GPU, CUPTI or
//! driver gets the message `record` gives and a non-zero exit; only the counters being held by
//! another profiler lets the exporter start (sampling NVML, retrying the counters).

use crate::args::duration::parse_positive_duration;
use crate::args::selection::SelectionArgs;
use crate::serve::control::control_file;
use crate::serve::flight::start_budget;
use crate::serve::session_backend::SessionBackend;
use crate::serve::{Backend, DEFAULT_PORT, Exporter, ServeOptions};
use crate::session::CounterPolicy;
use anyhow::anyhow;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Flags of `cufall serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Address and port of the HTTP server (/metrics, /dump, /pause, /resume). 0.0.0.0 listens on every
    /// interface; 127.0.0.1 on this machine only.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = format!("0.0.0.0:{DEFAULT_PORT}"))]
    pub listen: String,
    /// How much of the full-resolution samples the flight recorder keeps in memory.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_positive_duration)]
    pub keep: Duration,
    /// Folder the flight recorder's traces are written to (POST /dump, or SIGUSR1).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dump_dir: PathBuf,
    /// This machine's flight-recorder dumps kept in --dump-dir; after each dump the oldest
    /// beyond this many are deleted (only files named flight-HOST-TIME.cufall).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub dump_keep: u32,
    /// Accept POST /dump, /pause and /resume from other machines too (default: from this
    /// machine only).
    #[arg(long)]
    pub allow_remote_dump: bool,
    #[command(flatten)]
    pub selection: SelectionArgs,
}

/// Runs `cufall serve` until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let (mut cfg, selection) = args.selection.to_config(CounterPolicy::Required)?;
    // Always on beside the node's work: a cheaper default interval than `record`'s.
    cfg.core_budget = crate::cost::EXPORTER_CORE_BUDGET;
    if !args.dump_dir.is_dir() {
        anyhow::bail!(
            "--dump-dir {}: no such folder; create it or choose another",
            args.dump_dir.display()
        );
    }
    let server = crate::serve::http::bind(&args.listen)?;
    let mut opts = ServeOptions::new(args.dump_dir.clone());
    opts.keep = args.keep;
    opts.allow_remote_dump = args.allow_remote_dump;
    opts.dump_keep = usize::try_from(args.dump_keep).unwrap_or(usize::MAX);
    opts.memory_available_bytes = mem_available_bytes();
    opts.heatmaps = selection.heatmaps.clone();
    let exporter = Exporter::new(opts);
    let asked_metrics = cfg.metrics.len();
    let asked_interval = cfg.interval_ns();
    let mut backend = SessionBackend { cfg, selection };
    let first = match backend.start() {
        Ok(s) => s,
        Err(e) => {
            let e = anyhow::Error::from(e);
            return Err(anyhow!(
                "{}",
                crate::hint::message(&e, &crate::argv0::command_name())
            ));
        }
    };
    let budget = start_budget(&first.feed.info, asked_metrics, asked_interval, args.keep);
    if let Some(Err(why)) = exporter
        .options()
        .memory_available_bytes
        .map(|a| budget.check(&crate::args::duration::flag_text(args.keep), a))
    {
        drop(first.run.stop());
        anyhow::bail!("{why}");
    }
    exporter.log(&format!(
        "flight recorder keeps the last {}: {}",
        crate::args::duration::flag_text(args.keep),
        budget.describe()
    ));
    crate::os::catch_interrupts();
    let (dump_flag, _) = crate::os::catch_window_signals();
    let serving = crate::serve::serving::start(server, exporter, backend, Some(first))?;
    let exporter = std::sync::Arc::clone(&serving.exporter);
    let listen = serving
        .addr
        .map_or_else(|| args.listen.clone(), |a| a.to_string());
    let _control = match control_file(&exporter, &listen) {
        Ok(c) => Some(c),
        Err(e) => {
            exporter.log(&format!(
                "`cufall control pause` cannot reach this exporter (POST /pause still can): {}",
                crate::hint::message_without_advice(&e)
            ));
            None
        }
    };
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
                match e.dump() {
                    Err(crate::serve::DumpRefused::Busy) => {
                        e.log("SIGUSR1: a dump is already being written; ignored");
                    }
                    Err(why @ crate::serve::DumpRefused::TooSoon { .. }) => {
                        e.log(&format!("SIGUSR1: {why}; ignored"));
                    }
                    // Written or failed: the dump said so in the log.
                    Ok(_) | Err(crate::serve::DumpRefused::Failed(_)) => {}
                }
            });
        }
    }
    exporter.log("stopping");
    serving.stop();
    Ok(0)
}

fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
