//! `cufall record -o TRACE [flags] [-- CMD ARGS]`: sample every selected GPU into a trace until
//! CMD exits, `--duration` passes, or Ctrl-C; the trace is always closed properly.

use crate::duration::{parse_duration, parse_positive_duration};
use crate::hoststacks::{self, HostArgs, HostStacks, HostSummary, Switch};
use crate::os;
use crate::pipeline::SinkMsg;
use crate::pipeline::pause::CounterState;
use crate::pipeline::window::Edge;
use crate::program::{exit_code, stop_child, which};
use crate::recorder::{CaptureSummary, Recorder};
use crate::session::SessionHandle;
use crate::session::{self, CounterPolicy, Prepared, SessionConfig, Summary};
use crate::spec::{self, MetricRequest, Selection};
use crate::units::parse_devices;
use anyhow::{Context, anyhow, bail};
use cufall_capture::{CaptureEventKind, Kinds, RangeTrigger};
use cufall_trace::model::Manifest;
use cufall_trace::model::nanos;
use cufall_trace::{TraceWriter, WriterOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// The metric and device flags shared by `record` and the live view.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SelectionArgs {
    /// PM-sampling metric to record, with rollup/sub-metric (repeatable; one heatmap each).
    /// Default: tensor-pipe activity and DRAM throughput as % of peak. `cufall metrics` lists
    /// them.
    #[arg(long = "metric", value_name = "METRIC")]
    pub metric: Vec<String>,
    /// Divide every --metric by this metric, sample by sample (e.g. gr__cycles_elapsed.max). A
    /// bare counter (`sm__pipe_tensor_cycles_active.avg`) is then still shown against its true
    /// full scale: its sustained peak over the same sample, as % (--raw for the plain ratio).
    #[arg(long, value_name = "METRIC")]
    pub denominator: Option<String>,
    /// Show raw values (overrides --denominator; implies --raw).
    #[arg(long)]
    pub no_denominator: bool,
    /// Show a bare counter (a metric with only a rollup, such as
    /// sm__pipe_tensor_cycles_active.avg) as it counts, in cycles or bytes per sample (or over
    /// --denominator), instead of as % of its sustained peak.
    #[arg(long)]
    pub raw: bool,
    /// Value mapped to the top of the colour scale (default: 100 for %, 1 for ratios).
    #[arg(long, value_name = "X", value_parser = crate::cli::number::parse_full_scale)]
    pub full_scale: Option<f64>,
    /// GPU-time sampling interval, e.g. 10us, 50us, 1ms (default: chosen from the metrics'
    /// counter-data bytes per sample, the finest at about one core per GPU: 50us for the
    /// default pair, 12us for the DRAM metric alone on an H200; `cufall metrics` gives each
    /// metric's bytes and finest lossless interval; see docs/sampler.md).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub interval: Option<Duration>,
    /// GPUs to sample: all, 0, 0,2 or 0-3 (CUDA numbering).
    #[arg(long, value_name = "LIST", default_value = "all")]
    pub devices: String,
    /// Also record the min and max across SMs of each per-SM (`sm__...avg...`) metric, to show
    /// how evenly the SMs work.
    #[arg(long)]
    pub sm_spread: bool,
    /// NVML polling interval (power, clocks, utilisation, memory, temperature, throttling).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_positive_duration)]
    pub nvml_interval: Duration,
    /// Evaluation threads per GPU.
    #[arg(long, hide = true)]
    pub eval_threads: Option<usize>,
    /// PM sampling hardware buffer per GPU, in MiB.
    #[arg(long, hide = true)]
    pub hw_buffer_mib: Option<usize>,
    /// Seal a counter-data image after this much GPU time of samples (benchmarks).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub seal: Option<Duration>,
    /// Room beyond the seal point, in GPU time of samples (benchmarks).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub margin: Option<Duration>,
}

impl SelectionArgs {
    /// Turns the flags into a session configuration and the heatmaps to show.
    pub fn to_config(&self, policy: CounterPolicy) -> anyhow::Result<(SessionConfig, Selection)> {
        let selection = spec::select(&MetricRequest {
            metrics: self.metric.clone(),
            denominator: self.denominator.clone(),
            no_denominator: self.no_denominator,
            full_scale: self.full_scale,
            sm_spread: self.sm_spread,
            raw: self.raw || self.no_denominator,
        })?;
        let interval_ns = self.interval.map(nanos);
        let devices = parse_devices(&self.devices).map_err(|e| anyhow!("--devices: {e}"))?;
        let cfg = SessionConfig {
            devices,
            metrics: selection.columns.clone(),
            interval_ns,
            core_budget: crate::cost::CORE_BUDGET,
            nvml_interval: Some(self.nvml_interval),
            counters: policy,
            hw_buffer_bytes: self.hw_buffer_mib.map(|m| m << 20),
            eval_threads: self.eval_threads.map(|n| n.max(1)),
            image_timing: crate::sizing::ImageTiming::from_flags(self.seal, self.margin),
            optional_metrics: selection.added.clone(),
            fallbacks: selection.fallbacks.clone(),
        };
        Ok((cfg, selection))
    }
}

/// What ends a recording limited to windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RangeEnd {
    /// The end of the first window closes the trace; the program runs on.
    #[default]
    Stop,
    /// The end of the first window closes the trace and stops the program.
    StopShutdown,
    /// Every window is recorded, until the program exits (or --duration, or Ctrl-C).
    Repeat,
}

/// How a recording is limited to windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Windows {
    /// Opened and closed by the program.
    Program(RangeTrigger),
    /// Opened and closed by `cufall control` (SIGUSR1/SIGUSR2).
    Signal,
    /// One window from the end of `--delay` on.
    Delay(Duration),
}

impl Windows {
    /// The window flags, checked before anything starts.
    pub fn from_flags(
        range: Option<&str>,
        delay: Option<Duration>,
        has_program: bool,
    ) -> anyhow::Result<Option<Windows>> {
        let w = match (range, delay) {
            (Some(_), Some(_)) => bail!(
                "--delay and --capture-range both choose when recording starts; keep one (a window the program opens, or one after a fixed delay)"
            ),
            (None, Some(d)) => Windows::Delay(d),
            (Some(r), None) if r.trim().eq_ignore_ascii_case("signal") => Windows::Signal,
            (Some(r), None) => Windows::Program(
                RangeTrigger::parse(r).map_err(|e| anyhow!("--capture-range: {e}"))?,
            ),
            (None, None) => return Ok(None),
        };
        if matches!(w, Windows::Program(_)) && !has_program {
            bail!(
                "--capture-range {} needs a program to watch (after --); without one use --capture-range signal or --delay",
                range.unwrap_or_default()
            );
        }
        Ok(Some(w))
    }

    fn trigger(&self) -> Option<RangeTrigger> {
        match self {
            Windows::Program(t) => Some(t.clone()),
            _ => None,
        }
    }
}

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

/// The host's clock error when the recording begins, for reading several nodes' recordings
/// together (`cufall_analysis::nodes`).
fn add_clock_error(m: &mut Manifest) {
    use cufall_analysis::nodes::{CLOCK_EST_ERROR_US, CLOCK_MAX_ERROR_US, CLOCK_SYNCHRONISED};
    if let Some((max_us, est_us, synced)) = crate::os::clock_error() {
        m.extra
            .insert(CLOCK_MAX_ERROR_US.into(), max_us.to_string());
        m.extra
            .insert(CLOCK_EST_ERROR_US.into(), est_us.to_string());
        let synced = if synced { "yes" } else { "no" };
        m.extra.insert(CLOCK_SYNCHRONISED.into(), synced.into());
    }
}

impl RecordArgs {
    /// Whether the program's host stacks are sampled: with a program, unless turned off.
    fn host_stacks(&self) -> bool {
        !self.command.is_empty() && self.host.host_stacks == Switch::On
    }
}

/// This machine's host name (empty when the kernel does not say).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
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
            let text = crate::cli::hint::message(&e, &crate::argv0::command_name());
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
    let mut manifest = Manifest::new(env!("CARGO_PKG_VERSION"), crate::now_unix_ns());
    manifest.hostname = hostname();
    add_clock_error(&mut manifest);
    manifest.command = std::env::args().collect();
    manifest.target_command = (!args.command.is_empty()).then(|| args.command.clone());
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
    let writer = match TraceWriter::create(
        &args.output,
        manifest,
        WriterOptions {
            overwrite: args.force,
            ..WriterOptions::default()
        },
    ) {
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
    record_with(
        args,
        prepared,
        writer,
        duration,
        recorder,
        capture.wait,
        windows,
    )
}

/// `--capture` and `--capture-wait`, checked before anything starts.
pub struct CaptureRequest {
    pub kinds: Kinds,
    /// The capture library, when there is a program to capture from.
    pub library: Option<PathBuf>,
    pub wait: Duration,
}

impl CaptureRequest {
    pub fn from_flags(kinds: &str, wait: Duration, command: &[String]) -> anyhow::Result<Self> {
        let kinds = Kinds::parse(kinds).map_err(|e| anyhow!("--capture: {e}"))?;
        let library = if command.is_empty() || kinds.is_empty() {
            None
        } else {
            Some(crate::recorder::find_library()?)
        };
        Ok(CaptureRequest {
            kinds,
            library,
            wait,
        })
    }
}

/// The record loop's side of capture windows: the delay, the control signals, and when a
/// closed window ends the recording.
struct WindowWatch {
    windows: Option<Windows>,
    end: RangeEnd,
    started: Instant,
    delay_sent: bool,
    signals: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>,
    signal_open: bool,
    _control: Option<crate::control::ControlFile>,
    /// The session's counters, once it runs (what `cufall control pause` pauses).
    sharing: Arc<std::sync::OnceLock<crate::pipeline::pause::CounterSharing>>,
}

impl WindowWatch {
    fn new(
        windows: Option<Windows>,
        end: RangeEnd,
        trace: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let signal = matches!(windows, Some(Windows::Signal));
        let sharing = Arc::new(std::sync::OnceLock::new());
        let control = match control_file(trace, signal, &sharing) {
            Ok(c) => Some(c),
            // Windows by signal need the file; a pause is a convenience.
            Err(e) if signal => return Err(e),
            Err(e) => {
                say(format!(
                    "`cufall control pause` cannot reach this recording: {}",
                    crate::cli::hint::message_without_advice(&e)
                ));
                None
            }
        };
        Ok(WindowWatch {
            windows,
            end,
            started: Instant::now(),
            delay_sent: false,
            signals: signal.then(os::catch_window_signals),
            signal_open: false,
            _control: control,
            sharing,
        })
    }

    /// The session runs: its counters can be paused from now on.
    fn running(&self, handle: &SessionHandle) {
        let _ = self.sharing.set(handle.sharing());
    }

    /// Whether `--duration` has passed: counted from the end of `--delay` when there is one.
    fn duration_passed(&self, d: Duration) -> bool {
        let from = match &self.windows {
            Some(Windows::Delay(delay)) => *delay,
            _ => Duration::ZERO,
        };
        self.started.elapsed() >= from + d
    }

    fn edge(handle: &SessionHandle, open: bool, why: &str) {
        handle.window_edge(Edge {
            t_ns: crate::now_unix_ns(),
            open,
            source: 0,
            why: why.into(),
        });
    }

    /// Moves cufall's own windows; returns why the recording ends, and whether the program is
    /// stopped with it, when a closed window ends it.
    fn poll(&mut self, handle: &SessionHandle) -> Option<(&'static str, bool)> {
        match &self.windows {
            None => return None,
            Some(Windows::Delay(d)) if !self.delay_sent && self.started.elapsed() >= *d => {
                self.delay_sent = true;
                Self::edge(
                    handle,
                    true,
                    &format!("the end of --delay {}", humantime::format_duration(*d)),
                );
            }
            _ => {}
        }
        if let Some((open, close)) = &self.signals {
            if open.swap(false, Ordering::SeqCst) && !self.signal_open {
                self.signal_open = true;
                Self::edge(handle, true, "cufall control start");
            }
            if close.swap(false, Ordering::SeqCst) && self.signal_open {
                self.signal_open = false;
                Self::edge(handle, false, "cufall control stop");
            }
        }
        let log = handle.windows();
        match self.end {
            _ if log.closed == 0 => None,
            RangeEnd::Repeat => None,
            RangeEnd::Stop => Some(("the capture window closed", false)),
            RangeEnd::StopShutdown => Some(("the capture window closed", true)),
        }
    }

    /// After the recording (the sink has taken every edge): what the windows were, and a
    /// trace row when none opened.
    fn report(
        &self,
        log: crate::pipeline::window::WindowLog,
        writer: &mut TraceWriter,
    ) -> anyhow::Result<()> {
        let Some(w) = &self.windows else {
            return Ok(());
        };
        if log.opened > 0 {
            let of = if log.process_windows > 0 {
                format!(
                    " (the union of {} window(s) of the program's processes)",
                    log.process_windows
                )
            } else {
                String::new()
            };
            say(format!(
                "kept {} capture window(s){of}; only they are in the trace",
                log.opened
            ));
            return Ok(());
        }
        let why = match w {
            Windows::Program(RangeTrigger::ProfilerApi) => {
                "the program never called cudaProfilerStart (torch.cuda.profiler.start()); check that its profiling switch is on".to_string()
            }
            Windows::Program(RangeTrigger::Nvtx(n)) => format!(
                "the program never began an NVTX range named `{n}` (names are matched exactly, in any domain; `cufall info` on a recording without --capture-range lists them)"
            ),
            Windows::Signal => "no `cufall control start` arrived".into(),
            Windows::Delay(_) => "the recording ended before --delay passed".into(),
        };
        say(format!(
            "no capture window opened, so the trace holds no samples: {why}"
        ));
        writer.append_capture(&[cufall_trace::model::CaptureEvent {
            t_ns: crate::now_unix_ns(),
            pid: 0,
            event: CaptureEventKind::NoWindow.into(),
            count: 0,
            detail: why,
        }])?;
        Ok(())
    }
}

/// What was captured and how windows were opened, in the manifest's extras.
fn note_capture(
    writer: &mut TraceWriter,
    recorder: Option<&Recorder>,
    windows: Option<&Windows>,
) -> anyhow::Result<()> {
    if let Some(r) = recorder {
        writer.update_manifest(|m| {
            m.extra.insert("capture".into(), r.kinds().to_env());
        })?;
    }
    if let Some(w) = windows {
        let text = match w {
            Windows::Program(t) => t.to_env(),
            Windows::Signal => "signal".into(),
            Windows::Delay(d) => format!("delay {}", humantime::format_duration(*d)),
        };
        writer.update_manifest(|m| {
            m.extra.insert("capture_range".into(), text);
        })?;
    }
    Ok(())
}

fn record_with(
    args: &RecordArgs,
    prepared: Prepared,
    mut writer: TraceWriter,
    duration: Option<Duration>,
    recorder: Option<Recorder>,
    capture_wait: Duration,
    windows: Option<Windows>,
) -> anyhow::Result<i32> {
    note_capture(&mut writer, recorder.as_ref(), windows.as_ref())?;
    let mut watch = WindowWatch::new(windows, args.capture_range_end, &args.output)?;
    let interval_ns = prepared.interval_ns;
    let predicted = prepared.cost.as_ref().map(session::Cost::predicted);
    let n_devices = prepared.devices.len();
    let counters = prepared.has_counters();
    // Taken before the sink starts; handed to the host-stack thread once the program runs.
    let host_tx = args.host_stacks().then(|| prepared.sink_sender());
    let handle = prepared.start(None, Some(writer))?;
    watch.running(&handle);
    let started = Instant::now();
    // Let the warm-up sample end before the program starts, so its first kernels are sampled.
    std::thread::sleep(Duration::from_millis(20));
    let mut child = match args.command.split_first() {
        Some((program, rest)) => match Command::new(program)
            .args(rest)
            .envs(
                recorder
                    .as_ref()
                    .map(Recorder::child_env)
                    .unwrap_or_default(),
            )
            .spawn()
        {
            Ok(c) => Some(c),
            Err(e) => {
                // The sink ends only once every sender is gone.
                drop(host_tx);
                let outcome = handle.stop();
                if let Some(w) = outcome.writer {
                    w.abandon();
                }
                bail!("cannot run `{program}`: {e}");
            }
        },
        None => None,
    };
    let host = start_host_stacks(host_tx, child.as_ref(), args.host.host_interval);
    let (why_stopped, child_status) =
        wait_for_end(child.as_mut(), &handle, &mut watch, duration, started);
    let host = host.map(HostStacks::stop);
    let program_runs_on = child.is_some() && child_status.is_none();
    let captured = recorder.map(|r| finish_capture(r, why_stopped, program_runs_on, capture_wait));
    let outcome = handle.stop();
    let summary = outcome.summary;
    let code = child_status.map(exit_code);
    let mut writer = outcome
        .writer
        .context("the trace writer was lost; the trace may be incomplete")?;
    writer.update_manifest(|m| {
        m.target_exit_code = code;
        if let Some(h) = &host {
            m.extra
                .insert(hoststacks::MANIFEST_KEY.into(), h.manifest_text());
            m.host_stacks = Some(h.manifest_meta());
        } else if args.host_stacks() {
            let (words, meta) = hoststacks::not_started(args.host.host_interval);
            m.extra.insert(hoststacks::MANIFEST_KEY.into(), words);
            m.host_stacks = Some(meta);
        }
    })?;
    watch.report(outcome.windows, &mut writer)?;
    let stats = writer.finish(crate::now_unix_ns())?;
    print_summary(
        args,
        &summary,
        interval_ns,
        n_devices,
        counters,
        why_stopped,
        stats.bytes,
    );
    if let Some(c) = &captured {
        print_capture(c);
    }
    for line in host.iter().flat_map(HostSummary::lines) {
        say(line);
    }
    if let Some(p) = &args.stats_json {
        write_stats(p, &summary, predicted)?;
    }
    if !summary.errors.is_empty() {
        for e in &summary.errors {
            say(format!("error: {e}"));
        }
        if code.is_none() {
            return Ok(1);
        }
    }
    Ok(code.unwrap_or(if why_stopped == "Ctrl-C" { 130 } else { 0 }))
}

/// Starts sampling the program's host stacks, when asked for and the program runs; a thread
/// that cannot start leaves the recording without them, said once.
fn start_host_stacks(
    tx: Option<Sender<SinkMsg>>,
    child: Option<&std::process::Child>,
    interval: Duration,
) -> Option<HostStacks> {
    let (tx, child) = (tx?, child?);
    match HostStacks::start(
        child.id(),
        tx,
        Box::new(hoststacks::HostSource::new(interval)),
        Box::new(hoststacks::ProcFs::default()),
        hoststacks::Options::at(interval),
    ) {
        Ok(h) => Some(h),
        Err(e) => {
            say(format!(
                "recording without host stacks: cannot start their thread: {e}"
            ));
            None
        }
    }
}

/// The fence that keeps cufall's threads off the program's CPUs
/// ([`crate::cpus`]); `CUFALL_CPU_FENCE=off` turns it off (to measure what it saves).
fn cpu_fence() -> Option<crate::cpus::CpuFence<crate::cpus::ThisProcess>> {
    if std::env::var("CUFALL_CPU_FENCE").is_ok_and(|v| v.eq_ignore_ascii_case("off")) {
        return None;
    }
    crate::cpus::CpuFence::for_this_process()
}

/// This recording's control file: window signals when `signal`, pause and resume always.
fn control_file(
    trace: &std::path::Path,
    signal: bool,
    sharing: &Arc<std::sync::OnceLock<crate::pipeline::pause::CounterSharing>>,
) -> anyhow::Result<crate::control::ControlFile> {
    use crate::control::{Request, answer, state_line};
    let sharing = Arc::clone(sharing);
    let handler: crate::control::Handler = Arc::new(move |req| {
        let Some(s) = sharing.get() else {
            return Err("the recording is starting; try again in a moment".into());
        };
        match req {
            Request::Pause(d) => answer(s.pause(d)),
            Request::Resume => answer(s.resume()),
            Request::State => Ok(state_line(s.state())),
        }
    });
    crate::control::ControlFile::create(
        crate::control::Kind::Record,
        signal,
        &trace.display().to_string(),
        Some(handler),
    )
}

/// Waits until the recording ends: Ctrl-C, the program's exit, the capture window's end,
/// `--duration` or a sampling error; stops the program where that is the rule. Returns why, and
/// the program's exit status if it ended.
fn wait_for_end(
    mut child: Option<&mut std::process::Child>,
    handle: &SessionHandle,
    watch: &mut WindowWatch,
    duration: Option<Duration>,
    started: Instant,
) -> (&'static str, Option<ExitStatus>) {
    let tty = std::io::stderr().is_terminal();
    let mut last_status = Instant::now();
    let mut child_status: Option<ExitStatus> = None;
    let mut fence = child.as_ref().and_then(|_| cpu_fence());
    let mut last_fence = Instant::now();
    let mut fence_checks = 0u32;
    let why_stopped;
    loop {
        std::thread::sleep(Duration::from_millis(25));
        // Soon after the start (a `taskset` in front of the program execs it at once), then
        // every second.
        let due = if fence_checks < 8 { 50 } else { 1000 };
        if let (Some(f), Some(c)) = (fence.as_mut(), child.as_deref())
            && last_fence.elapsed() >= Duration::from_millis(due)
        {
            last_fence = Instant::now();
            fence_checks += 1;
            use crate::hoststacks::procs::ProcessTable;
            let pids: Vec<u32> = crate::hoststacks::procs::ProcFs::default()
                .tree(c.id())
                .iter()
                .map(|p| p.pid)
                .collect();
            if let Some(line) = f.check(&pids) {
                say(line);
            }
        }
        if os::interrupted() {
            why_stopped = "Ctrl-C";
            if let Some(c) = child.as_deref_mut() {
                child_status = stop_child(c);
            }
            break;
        }
        if let Some(c) = child.as_deref_mut()
            && let Ok(Some(s)) = c.try_wait()
        {
            child_status = Some(s);
            why_stopped = "the program exited";
            break;
        }
        if let Some((why, stop_program)) = watch.poll(handle) {
            why_stopped = why;
            if stop_program && let Some(c) = child.as_deref_mut() {
                say(
                    "the capture window closed: stopping the program (--capture-range-end stop-shutdown)",
                );
                child_status = stop_child(c);
            } else if let Some(c) = child.as_deref() {
                say(format!(
                    "the capture window closed: the trace is closed; the program (process {}) runs on",
                    c.id()
                ));
            }
            break;
        }
        if let Some(d) = duration
            && watch.duration_passed(d)
        {
            why_stopped = "--duration passed";
            if let Some(c) = child.as_deref_mut() {
                say("--duration passed: stopping the program");
                child_status = stop_child(c);
            }
            break;
        }
        if let Some(e) = handle.error() {
            say(format!("sampling failed: {e}"));
            why_stopped = "an error";
            if let Some(c) = child.as_deref_mut() {
                child_status = stop_child(c);
            }
            break;
        }
        if tty && last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            let s = handle.status();
            let paused = match handle.sharing().state() {
                Some(CounterState::Paused { left }) => {
                    format!(" · paused, {} s left", left.as_secs())
                }
                Some(CounterState::Waiting { .. }) => " · waiting for the counters".into(),
                _ => String::new(),
            };
            eprint!(
                "\rcufall: recording {:>6.1} s · {} samples · {} lost{paused}      ",
                started.elapsed().as_secs_f64(),
                s.samples_written,
                s.lost_samples
            );
            let _ = std::io::stderr().flush();
        }
    }
    if tty {
        eprintln!();
    }
    (why_stopped, child_status)
}

/// Ends capture: waits for the program's processes to send what they hold (long when the
/// program exited, short when the user stopped it, only for in-flight records when the program
/// runs on after its window), then closes the recorder.
fn finish_capture(
    r: Recorder,
    why_stopped: &str,
    program_runs_on: bool,
    capture_wait: Duration,
) -> CaptureSummary {
    let wait = if why_stopped == "the program exited" {
        capture_wait
    } else if program_runs_on {
        // The window's last records are still on their way (CUPTI's buffers are taken every
        // 100 ms, sent every 50 ms): wait for them, not for the program.
        r.program_runs_on();
        Duration::from_millis(1000)
    } else {
        capture_wait.min(Duration::from_secs(2))
    };
    r.wait_for_processes(wait);
    r.finish()
}

/// `--stats-json`: the run's summary with the cost model's prediction beside it.
fn write_stats(
    path: &Path,
    summary: &Summary,
    predicted: Option<session::PredictedCost>,
) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Stats<'a> {
        #[serde(flatten)]
        summary: &'a Summary,
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
    let mut seen = std::collections::BTreeSet::new();
    for p in c.problems.iter().chain(&c.protocol_errors) {
        if seen.insert(p) {
            say(format!("capture: {p}"));
        }
    }
}

fn print_summary(
    args: &RecordArgs,
    s: &Summary,
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
            crate::sizing::format_interval(interval_ns),
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
