//! `cufall record -o TRACE [flags] [-- CMD ARGS]`: sample every selected GPU into a trace until
//! CMD exits, `--duration` passes, or Ctrl-C; the trace is always closed properly.

use crate::args::capture::CaptureRequest;
use crate::args::duration::{parse_duration, parse_positive_duration};
use crate::args::selection::SelectionArgs;
use crate::hoststacks::{self, HostArgs, HostSummary, Switch};
use crate::os;
use crate::program::which;
use crate::recorder::CaptureSummary;
use crate::recording::{self, Ended, Plan, RangeEnd, Windows};
use crate::session::{self, CounterPolicy, Prepared, RunSummary, SessionConfig};
use crate::sink::trace;
use anyhow::{Context, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `cufall record`.
#[derive(Clone, Debug, clap::Args)]
pub struct RecordArgs {
    /// Trace to write (a folder, by convention NAME.cufall).
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Stop after this long (e.g. 30s, 5m; a bare number is seconds); a running CMD is then
    /// stopped too.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,
    /// Record NVML only (power, clocks, utilisation) when GPU counters are out of reach.
    #[arg(long)]
    pub nvml_only: bool,
    /// Replace TRACE if it exists.
    #[arg(long, alias = "overwrite")]
    pub force: bool,
    /// Write the run's figures (samples, drops, CPU time) as JSON here.
    #[arg(long, hide = true, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// What to capture from the program: nvtx, kernels, memcpy, api (CUDA calls that launch,
    /// copy and synchronise), graphs (one record per CUDA graph launch) or graph-nodes (one per
    /// kernel of a graph instead), all, or none.
    #[arg(
        long,
        value_name = "KINDS",
        default_value = "nvtx,kernels,memcpy,graphs"
    )]
    pub capture: String,
    /// Keep only windows of the run: cuda-profiler-api (between cudaProfilerStart and Stop in
    /// any process of the program, e.g. torch.cuda.profiler.start()), nvtx:NAME (from the start
    /// of an NVTX range NAME to its end), or signal (`cufall control start|stop` from another
    /// terminal). Outside windows nothing is written.
    #[arg(long, value_name = "RANGE")]
    pub capture_range: Option<String>,
    /// What happens when a window closes: stop (the trace is closed, the program runs on),
    /// stop-shutdown (the program is stopped too) or repeat (later windows are recorded too,
    /// until the program exits).
    #[arg(long, value_enum, value_name = "WHAT", default_value = "stop")]
    pub capture_range_end: RangeEnd,
    /// Write nothing for this long after the start (model loading, warm-up); --duration then
    /// counts from the end of the delay.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub delay: Option<Duration>,
    /// After the program exits, how long to wait for processes it started to finish sending.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub capture_wait: Duration,
    #[command(flatten)]
    pub host: HostArgs,
    /// Program to run and record (after `--`); its exit code becomes cufall's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl RecordArgs {
    /// Whether the program's host stacks are sampled: with a program, unless turned off.
    fn host_stacks(&self) -> bool {
        !self.command.is_empty() && self.host.host_stacks == Switch::On
    }
}

fn say(msg: impl AsRef<str>) {
    eprintln!("cufall: {}", msg.as_ref());
}

/// Refuses an output path that exists (without `--force`) or whose folder does not.
fn check_output(output: &Path, force: bool) -> anyhow::Result<()> {
    if output.exists() && !force {
        bail!(
            "{} already exists; choose another -o path or add --force to replace it",
            output.display()
        );
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        bail!(
            "cannot write {}: the folder {} does not exist",
            output.display(),
            parent.display()
        );
    }
    Ok(())
}

/// Prepares the session (everything that can fail before the trace exists) and says what it
/// will cost and what it will not record.
fn prepare_session(cfg: &SessionConfig) -> anyhow::Result<Prepared> {
    let prepared = match session::prepare(cfg) {
        Ok(p) => p,
        Err(e) => {
            let hint = match &e {
                session::SessionError::Cupti(c) if c.counters_out_of_reach() => {
                    "\n\nTo record NVML data only (power, clocks, nvidia-smi's utilisation, memory, temperature), add --nvml-only."
                }
                _ => "",
            };
            let e = anyhow::Error::from(e);
            let text = crate::hint::message(&e, &crate::argv0::command_name());
            return Err(anyhow!("{text}{hint}"));
        }
    };
    if os::interrupted() {
        prepared.abort();
        bail!("interrupted before recording started; nothing was written");
    }
    if let Some(cost) = &prepared.cost {
        say(cost.describe());
        if let Some(w) = cost.loss_warning() {
            say(format!("note: {w}"));
        }
    }
    if let Some(why) = &prepared.counters_unavailable {
        say(format!("recording WITHOUT GPU counters: {why}"));
    }
    if let Some(why) = &prepared.nvml_unavailable {
        say(format!("recording without NVML: {why}"));
    }
    Ok(prepared)
}

/// Runs `cufall record`; returns the process exit code.
pub fn run(args: &RecordArgs) -> anyhow::Result<i32> {
    // From here on Ctrl-C sets a flag instead of killing cufall, so a trace is always closed.
    os::catch_interrupts();
    let policy = if args.nvml_only {
        CounterPolicy::Off
    } else {
        CounterPolicy::Required
    };
    let (cfg, selection) = args.selection.to_config(policy)?;
    let duration = args.duration;
    if let Some(program) = args.command.first()
        && which(program).is_none()
    {
        bail!("cannot run `{program}`: no such program (not a file, and not found on PATH)");
    }
    let capture = CaptureRequest::from_flags(&args.capture, args.capture_wait, &args.command)?;
    let windows = Windows::from_flags(
        args.capture_range.as_deref(),
        args.delay,
        !args.command.is_empty(),
    )?;
    if let Some(Windows::Program(_)) = &windows
        && capture.library.is_none()
    {
        bail!(
            "--capture-range {} needs capture in the program; remove --capture none",
            args.capture_range.as_deref().unwrap_or_default()
        );
    }
    check_output(&args.output, args.force)?;
    let mut prepared = prepare_session(&cfg)?;
    let mut manifest = trace::manifest(&args.command);
    if !args.command.is_empty() {
        manifest.extra.insert(
            hoststacks::MANIFEST_KEY.into(),
            hoststacks::start_text(args.host_stacks(), args.host.host_interval),
        );
        manifest.host_stacks = Some(hoststacks::start_meta(
            args.host_stacks(),
            args.host.host_interval,
        ));
    }
    let (heatmaps, relative) = prepared.heatmaps_for(&selection);
    for line in relative {
        say(line);
    }
    manifest.heatmaps = heatmaps;
    prepared.fill_manifest(&mut manifest);
    let writer = match trace::create(&args.output, manifest, args.force) {
        Ok(w) => w,
        Err(e) => {
            prepared.abort();
            return Err(e.into());
        }
    };
    if windows.is_some() {
        // With `stop` and `stop-shutdown` the trace ends with the first window: one that
        // opens while cufall waits for that window's last records is not kept.
        prepared.limit_to_windows(args.capture_range_end != RangeEnd::Repeat);
    }
    let trigger = windows.as_ref().and_then(Windows::trigger);
    let recorder = match &capture.library {
        Some(lib) => match prepared.start_capture(capture.kinds, trigger, lib.clone()) {
            Ok(r) => Some(r),
            Err(e) => {
                prepared.abort();
                writer.abandon();
                return Err(e.into());
            }
        },
        None => None,
    };
    let plan = Plan {
        output: &args.output,
        command: &args.command,
        windows,
        end: args.capture_range_end,
        duration,
        host_stacks: args.host_stacks().then_some(args.host.host_interval),
        capture_wait: capture.wait,
    };
    let (ended, writer) = recording::record(&plan, prepared, writer, recorder)?;
    let stats = writer.finish(crate::now_unix_ns())?;
    report_end(args, &ended, stats.bytes)
}

/// What `record` prints when the recording has ended; its exit code: the program's, else 1
/// after a sampling error, 130 after Ctrl-C, 0.
fn report_end(args: &RecordArgs, ended: &Ended, bytes: u64) -> anyhow::Result<i32> {
    let summary = &ended.summary;
    print_summary(
        args,
        summary,
        ended.interval_ns,
        ended.n_devices,
        ended.counters,
        ended.why_stopped,
        bytes,
    );
    if let Some(c) = &ended.captured {
        print_capture(c);
    }
    for line in ended.host.iter().flat_map(HostSummary::lines) {
        say(line);
    }
    if let Some(p) = &args.stats_json {
        write_stats(p, summary, ended.predicted.clone())?;
    }
    let code = ended.code;
    if !summary.errors.is_empty() {
        for e in &summary.errors {
            say(format!("error: {e}"));
        }
        if code.is_none() {
            return Ok(1);
        }
    }
    Ok(code.unwrap_or(if ended.why_stopped == "Ctrl-C" {
        130
    } else {
        0
    }))
}

/// `--stats-json`: the run's summary with the cost model's prediction beside it.
fn write_stats(
    path: &Path,
    summary: &RunSummary,
    predicted: Option<session::PredictedCost>,
) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Stats<'a> {
        #[serde(flatten)]
        summary: &'a RunSummary,
        predicted: Option<session::PredictedCost>,
    }
    let json = serde_json::to_string_pretty(&Stats { summary, predicted })?;
    std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
}

fn print_capture(c: &CaptureSummary) {
    say(format!(
        "captured {} NVTX range(s), {} kernel/copy record(s), {} API call(s) from {} process(es)",
        c.nvtx_ranges,
        c.activities,
        c.api_calls,
        c.processes.len()
    ));
    if !c.quiet.is_empty() {
        say(format!(
            "{} process(es) of the program never did GPU work nor sent NVTX ranges (compile workers, data loaders, ...): nothing to capture from them",
            c.quiet.len()
        ));
    }
    if c.cupti_dropped > 0 {
        say(format!(
            "WARNING: CUPTI dropped {} activity record(s) (recorded in the trace's capture table)",
            c.cupti_dropped
        ));
    }
    if let Some(line) = &c.calibration {
        say(line);
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in c.problems.iter().chain(&c.protocol_errors) {
        if seen.insert(p) {
            say(format!("capture: {p}"));
        }
    }
}

fn print_summary(
    args: &RecordArgs,
    s: &RunSummary,
    interval_ns: i64,
    n_devices: usize,
    counters: bool,
    why: &str,
    bytes: u64,
) {
    say(format!(
        "stopped ({why}) after {:.1} s; wrote {} ({:.1} MiB)",
        s.wall_s,
        args.output.display(),
        bytes as f64 / 1048576.0
    ));
    if counters {
        say(format!(
            "{} samples from {} GPU(s) at {}, {} NVML readings",
            s.samples_written,
            n_devices,
            crate::args::duration::interval_text(interval_ns),
            s.nvml_rows
        ));
        let warmups = s.drops.get("warmup").map_or(0, |d| d.records);
        if s.loss_records == 0 {
            say(format!(
                "no samples lost ({warmups} warm-up sample(s) left out by design: each spans from start to the first decode)"
            ));
        } else {
            let detail: Vec<String> = s
                .drops
                .iter()
                .filter(|(k, _)| !["warmup", "paused"].contains(&k.as_str()))
                .map(|(k, c)| format!("{k}: {} hole(s), ~{} samples", c.records, c.lost_samples))
                .collect();
            say(format!(
                "WARNING: {} hole(s), ~{} samples lost ({}). They are in the trace's drops table; a longer --interval or fewer metrics avoids them.",
                s.loss_records,
                s.lost_samples,
                detail.join("; ")
            ));
        }
        if let Some(p) = s.drops.get("paused") {
            say(format!(
                "sampling was paused (cufall control pause): {} `paused` drop record(s) in the \
trace, one per GPU and pause, never counted as idle",
                p.records
            ));
        }
    } else {
        say(format!("{} NVML readings (no GPU counters)", s.nvml_rows));
    }
    if s.wall_s > 0.0 {
        say(format!(
            "cufall used {:.2} CPU cores on average ({:.1} s of CPU)",
            s.cpu_s / s.wall_s,
            s.cpu_s
        ));
    }
    for m in &s.messages {
        say(m);
    }
}
