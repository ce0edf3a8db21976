//! `cufall probe-host-stacks -o TRACE [--host-interval 1ms] -- CMD` (hidden): runs CMD and
//! samples its host stacks into a trace with no GPU part, the way `record` does beside the
//! counters. It exists to measure what sampling costs (`scripts/bench-host-stacks.sh`) on a
//! machine without a GPU; `--stats-json` writes the figures.

use super::{HostArgs, HostSource, HostStacks, HostSummary, Options, ProcFs, Switch};
use crate::program::{exit_code, stop_child, which};
use crate::sink::{SinkMsg, SinkShared, sink_main};
use anyhow::{Context, bail};
use cufall_trace::model::Manifest;
use cufall_trace::{TraceWriter, WriterOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
pub struct ProbeHostArgs {
    /// Trace to write.
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: PathBuf,
    /// Replace TRACE if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub host: HostArgs,
    /// Write the run's figures (samples kept, missed, cufall's CPU and memory) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// Program to run (after --); its exit code becomes cufall's.
    #[arg(last = true, value_name = "CMD", required = true)]
    pub command: Vec<String>,
}

/// The figures of one run.
#[derive(Debug, serde::Serialize)]
struct Stats<'a> {
    wall_s: f64,
    /// cufall's CPU time (user + system, every thread) over the wall time.
    cpu_s: f64,
    cpu_fraction: f64,
    peak_rss_mib: f64,
    /// Samples written, samples missed, and their sum: what was asked for.
    samples: u64,
    missed: u64,
    asked: u64,
    trace_bytes: u64,
    host: &'a HostSummary,
}

pub fn run(args: &ProbeHostArgs) -> anyhow::Result<i32> {
    crate::os::catch_interrupts();
    let Some((program, rest)) = args.command.split_first() else {
        bail!("give a program to run after --");
    };
    if which(program).is_none() {
        bail!("cannot run `{program}`: no such program (not a file, and not found on PATH)");
    }
    let mut manifest = Manifest::new(env!("CARGO_PKG_VERSION"), crate::now_unix_ns());
    manifest.command = std::env::args().collect();
    manifest.target_command = Some(args.command.clone());
    let on = args.host.host_stacks == Switch::On;
    manifest.extra.insert(
        super::MANIFEST_KEY.into(),
        super::start_text(on, args.host.host_interval),
    );
    manifest.host_stacks = Some(super::start_meta(on, args.host.host_interval));
    let writer = TraceWriter::create(
        &args.output,
        manifest,
        WriterOptions {
            overwrite: args.force,
            ..WriterOptions::default()
        },
    )?;
    let (tx, rx) = std::sync::mpsc::channel::<SinkMsg>();
    let shared = Arc::new(SinkShared::default());
    let sink = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("cufall-sink".into())
            .spawn(move || sink_main(rx, Some(writer), None, shared, None))
            .context("cannot start the writer thread")?
    };
    let cpu0 = crate::os::cpu_seconds();
    let started = Instant::now();
    let mut child = std::process::Command::new(program)
        .args(rest)
        .spawn()
        .with_context(|| format!("cannot run `{program}`"))?;
    let host = if on {
        Some(HostStacks::start(
            child.id(),
            tx,
            Box::new(HostSource::new(args.host.host_interval)),
            Box::new(ProcFs::default()),
            Options::at(args.host.host_interval),
        )?)
    } else {
        drop(tx);
        None
    };
    let status = loop {
        if crate::os::interrupted() {
            break stop_child(&mut child);
        }
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e).context("waiting for the program"),
        }
    };
    let host = host.map(HostStacks::stop);
    let summary = host.clone().unwrap_or_default();
    let mut writer = sink
        .join()
        .ok()
        .and_then(|r| r.writer)
        .context("the trace writer was lost")?;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = crate::os::cpu_seconds() - cpu0;
    let code = status.map(exit_code);
    writer.update_manifest(|m| {
        m.target_exit_code = code;
        if on {
            m.extra
                .insert(super::MANIFEST_KEY.into(), summary.manifest_text());
            m.host_stacks = Some(summary.manifest_meta());
        }
    })?;
    let bytes = writer.finish(crate::now_unix_ns())?.bytes;
    for l in host.iter().flat_map(HostSummary::lines) {
        eprintln!("cufall: {l}");
    }
    if let Some(p) = &args.stats_json {
        let stats = Stats {
            wall_s,
            cpu_s,
            cpu_fraction: cpu_s / wall_s.max(1e-9),
            peak_rss_mib: crate::os::peak_rss_bytes() as f64 / f64::from(1u32 << 20),
            samples: summary.samples,
            missed: summary.missed,
            asked: summary.samples + summary.missed,
            trace_bytes: bytes,
            host: &summary,
        };
        std::fs::write(p, serde_json::to_string_pretty(&stats)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(code.unwrap_or(1))
}
