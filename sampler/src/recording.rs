//! One recording from its start to its end: the program started with the capture library's
//! environment, its host stacks sampled, cufall's own capture windows moved (`--delay`, `cufall
//! control start|stop`), the wait until Ctrl-C, the program's exit, a closed window,
//! `--duration` or a sampling error ends it, and the capture's last records. `cufall record`
//! ([`crate::commands::record`]) checks the flags, makes the trace and reports the end.

use crate::hoststacks::{self, HostStacks, HostSummary};
use crate::os;
use crate::pipeline::pause::CounterState;
use crate::program::{exit_code, stop_child};
use crate::recorder::{CaptureSummary, Recorder};
use crate::session::{self, Prepared, RunSummary, SessionHandle};
use crate::sink::SinkMsg;
use crate::sink::window::Edge;
use anyhow::{Context, anyhow, bail};
use cufall_capture::RangeTrigger;
use cufall_trace::TraceWriter;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

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

    pub fn trigger(&self) -> Option<RangeTrigger> {
        match self {
            Windows::Program(t) => Some(t.clone()),
            _ => None,
        }
    }
}

/// What one recording does, from `record`'s flags.
pub struct Plan<'a> {
    /// The trace (its path names the control file).
    pub output: &'a Path,
    /// The program to run, if any.
    pub command: &'a [String],
    pub windows: Option<Windows>,
    pub end: RangeEnd,
    pub duration: Option<Duration>,
    /// The program's host stacks' sampling interval, when they are sampled.
    pub host_stacks: Option<Duration>,
    pub capture_wait: Duration,
}

/// How a recording ended, for the command to report.
pub struct Ended {
    pub summary: RunSummary,
    pub why_stopped: &'static str,
    /// The program's exit code, if it ended.
    pub code: Option<i32>,
    pub captured: Option<CaptureSummary>,
    pub host: Option<HostSummary>,
    pub interval_ns: i64,
    pub n_devices: usize,
    pub counters: bool,
    pub predicted: Option<session::PredictedCost>,
}

fn say(msg: impl AsRef<str>) {
    eprintln!("cufall: {}", msg.as_ref());
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
    _control: Option<crate::control_file::ControlFile>,
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
                    crate::hint::message_without_advice(&e)
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
                    &format!(
                        "the end of --delay {}",
                        crate::args::duration::flag_text(*d)
                    ),
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
        log: crate::sink::window::WindowLog,
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
        crate::sink::trace::note_no_window(writer, why)?;
        Ok(())
    }
}

/// What was captured and how windows were opened, in the manifest's extras.
fn note_capture(
    writer: &mut TraceWriter,
    recorder: Option<&Recorder>,
    windows: Option<&Windows>,
) -> anyhow::Result<()> {
    let range = windows.map(|w| match w {
        Windows::Program(t) => t.to_env(),
        Windows::Signal => "signal".into(),
        Windows::Delay(d) => format!("delay {}", crate::args::duration::flag_text(*d)),
    });
    crate::sink::trace::note_capture(writer, recorder.map(|r| r.kinds().to_env()), range)?;
    Ok(())
}

/// One recording, from the start of the session to the closed trace's last update (the
/// command then closes it): the program started with the capture library's environment, its
/// host stacks sampled, waited for until the recording ends, and what ended it.
pub fn record(
    plan: &Plan<'_>,
    prepared: Prepared,
    mut writer: TraceWriter,
    recorder: Option<Recorder>,
) -> anyhow::Result<(Ended, TraceWriter)> {
    note_capture(&mut writer, recorder.as_ref(), plan.windows.as_ref())?;
    let mut watch = WindowWatch::new(plan.windows.clone(), plan.end, plan.output)?;
    let interval_ns = prepared.interval_ns;
    let predicted = prepared.cost.as_ref().map(session::Cost::predicted);
    let n_devices = prepared.devices.len();
    let counters = prepared.has_counters();
    // Taken before the sink starts; handed to the host-stack thread once the program runs.
    let host_tx = plan.host_stacks.is_some().then(|| prepared.sink_sender());
    let handle = prepared.start(None, Some(writer))?;
    watch.running(&handle);
    let started = Instant::now();
    // Let the warm-up sample end before the program starts, so its first kernels are sampled.
    std::thread::sleep(Duration::from_millis(20));
    let mut child = match plan.command.split_first() {
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
    let host = plan
        .host_stacks
        .and_then(|interval| start_host_stacks(host_tx, child.as_ref(), interval));
    let (why_stopped, child_status) =
        wait_for_end(child.as_mut(), &handle, &mut watch, plan.duration, started);
    let host = host.map(HostStacks::stop);
    let program_runs_on = child.is_some() && child_status.is_none();
    let captured =
        recorder.map(|r| finish_capture(r, why_stopped, program_runs_on, plan.capture_wait));
    let outcome = handle.stop();
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
        } else if let Some(interval) = plan.host_stacks {
            let (words, meta) = hoststacks::not_started(interval);
            m.extra.insert(hoststacks::MANIFEST_KEY.into(), words);
            m.host_stacks = Some(meta);
        }
    })?;
    watch.report(outcome.windows, &mut writer)?;
    let ended = Ended {
        summary: outcome.summary,
        why_stopped,
        code,
        captured,
        host,
        interval_ns,
        n_devices,
        counters,
        predicted,
    };
    Ok((ended, writer))
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
) -> anyhow::Result<crate::control_file::ControlFile> {
    use crate::control_file::{Request, answer, state_line};
    let sharing = Arc::clone(sharing);
    let handler: crate::control_file::Handler = Arc::new(move |req| {
        let Some(s) = sharing.get() else {
            return Err("the recording is starting; try again in a moment".into());
        };
        match req {
            Request::Pause(d) => answer(s.pause(d)),
            Request::Resume => answer(s.resume()),
            Request::State => Ok(state_line(s.state())),
        }
    });
    crate::control_file::ControlFile::create(
        crate::control_file::Kind::Record,
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
    if let Ok(exe) = std::env::current_exe() {
        r.calibrate(&exe);
    }
    r.finish()
}
