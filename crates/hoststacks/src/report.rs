//! What the sampling loop found: per process and in all, told three ways: the lines at the end
//! of `record`, the manifest's `host_stacks` entry, and rows of the trace's capture table.

use super::event;
use super::native::DESCRIBE;
use cufall_model::{CaptureEvent, CaptureEventKind, HostFrames, HostStacksMeta, Nanos};
use std::time::Duration;

/// `1ms (1000 Hz)`.
pub fn rate_text(interval: Duration) -> String {
    let hz = 1.0 / interval.as_secs_f64().max(1e-9);
    format!(
        "every {} ({hz:.0} Hz)",
        humantime::format_duration(interval)
    )
}

/// Why a process of the program was not read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unread {
    /// No Python, and no native frames either (the detail says why, when perf events were
    /// refused).
    NotPython,
    NoPermission,
    UnsupportedPython,
    /// Attaching kept failing (the detail is the last error).
    Failed,
}

/// One process of the program, at its end or the recording's.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    /// What it ran (`/proc/PID/exe`).
    pub image: String,
    /// The interpreter read (`python 3.11.7`, or `native (perf task-clock)`); empty when never
    /// read.
    pub interpreter: String,
    pub samples: u64,
    /// Samples missed: rounds that ran late, reads that failed, rounds while re-attaching.
    pub missed: u64,
    pub late_rounds: u64,
    pub failed_reads: u64,
    /// The last failed read's error.
    pub last_error: Option<String>,
    /// Distinct threads sampled.
    pub threads: usize,
    /// Times it exec'd while sampled.
    pub execs: u32,
    pub unread: Option<Unread>,
    /// Why it was not read, and the fix.
    pub unread_detail: String,
    /// Read with py-spy, but the native frames of its threads could not be read (perf events
    /// refused): why, and the fix.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub native_refused: String,
}

/// What host-stack sampling did in a recording.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostSummary {
    pub interval_ns: Nanos,
    /// What is recorded (the source's `frames_kind`).
    pub frames: String,
    /// The same, typed (the source's `frames`).
    #[serde(skip)]
    pub frame_kinds: HostFrames,
    pub processes: Vec<ProcessReport>,
    pub samples: u64,
    pub missed: u64,
    /// Rounds run, and rounds skipped because one ran late.
    pub rounds: u64,
    pub late_rounds: u64,
    /// Distinct stacks written, and times the interning table started again at its bound.
    pub stacks: u64,
    pub intern_resets: u64,
    /// Seconds of wall time the loop ran.
    pub wall_s: f64,
}

/// The fix for a permission refusal: the ways to be allowed to read the program's memory.
pub const PERMISSION_FIX: &str = "give cufall ptrace permission over the program: run it as \
root with the SYS_PTRACE capability (in a container: `docker run --cap-add SYS_PTRACE`, or \
SYS_PTRACE in the pod's securityContext), or as the program's user with \
kernel.yama.ptrace_scope at 0 or 1 (`sudo sysctl kernel.yama.ptrace_scope=1`) and a program \
that does not make itself undumpable; or turn host stacks off with --host-stacks off";

impl HostSummary {
    fn count(&self, what: &Unread) -> usize {
        self.processes
            .iter()
            .filter(|p| p.unread.as_ref() == Some(what))
            .count()
    }

    fn read(&self) -> impl Iterator<Item = &ProcessReport> {
        self.processes.iter().filter(|p| !p.interpreter.is_empty())
    }

    /// Why a process without Python could not be read natively either (the first such).
    fn native_refusal(&self) -> Option<&str> {
        self.processes
            .iter()
            .find(|p| p.unread == Some(Unread::NotPython) && !p.unread_detail.is_empty())
            .map(|p| p.unread_detail.as_str())
    }

    /// The manifest's `extra.host_stacks` at the end: how it was sampled, or why there are
    /// none, in words ([`HostSummary::manifest_meta`] says the same as values).
    pub fn manifest_text(&self) -> String {
        let rate = rate_text(self.interval_ns.to_duration().unwrap_or_default());
        if let Some(why) = self.off_reason() {
            return format!("off: {why}");
        }
        if self.samples > 0 {
            return format!("on: {rate}, {}", self.frames);
        }
        if self.processes.is_empty() {
            return format!("on: {rate}; no process of the program was seen");
        }
        format!("on: {rate}, {}; no sample was read", self.frames)
    }

    /// The manifest's `host_stacks` at the end.
    pub fn manifest_meta(&self) -> HostStacksMeta {
        HostStacksMeta {
            interval_ns: self.interval_ns.get(),
            frames: self.frame_kinds,
            off_reason: self.off_reason(),
        }
    }

    /// Why there are no host stacks: nothing was sampled, and the program could not be read;
    /// `None` when stacks were sampled, or nothing was there to read.
    fn off_reason(&self) -> Option<String> {
        if self.samples > 0 {
            return None;
        }
        if let Some(p) = self
            .processes
            .iter()
            .find(|p| p.unread == Some(Unread::NoPermission))
        {
            return Some(p.unread_detail.clone());
        }
        if self.processes.is_empty() {
            return None;
        }
        if self.read().next().is_none() {
            let why = self
                .processes
                .iter()
                .find(|p| !p.unread_detail.is_empty() && p.unread != Some(Unread::NotPython))
                .map(|p| p.unread_detail.clone())
                .or_else(|| {
                    self.native_refusal()
                        .map(|why| format!("no process of the program runs Python, and native frames could not be read: {why}"))
                })
                .unwrap_or_else(|| "no process of the program runs Python".into());
            return Some(why);
        }
        None
    }

    /// The lines `record` prints at its end.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let threads: usize = self.processes.iter().map(|p| p.threads).sum();
        let read = self.read().count();
        if read > 0 {
            let asked = self.samples + self.missed;
            let native = self.read().filter(|p| p.interpreter == DESCRIBE).count();
            out.push(format!(
                "host stacks: {} samples of {threads} thread(s) in {read} process(es) ({} python, {native} native) {} ({}); {} missed ({:.2} % of {asked} asked for)",
                self.samples,
                read - native,
                rate_text(self.interval_ns.to_duration().unwrap_or_default()),
                self.frames,
                self.missed,
                100.0 * self.missed as f64 / asked.max(1) as f64
            ));
        }
        let refused: Vec<&ProcessReport> = self
            .read()
            .filter(|p| !p.native_refused.is_empty())
            .collect();
        if let Some(first) = refused.first() {
            out.push(format!(
                "host stacks: the native frames of the Python threads of {} process(es) could not be read ({}); those threads show the system call they wait in, not the native function they run",
                refused.len(),
                first.native_refused
            ));
        }
        for p in &self.processes {
            match &p.unread {
                Some(Unread::NotPython) | None => {}
                Some(_) => out.push(format!(
                    "host stacks: process {} ({}) not read: {}",
                    p.pid,
                    short(&p.image),
                    p.unread_detail
                )),
            }
        }
        let not_python = self.count(&Unread::NotPython);
        if not_python > 0 {
            out.push(match self.native_refusal() {
                Some(why) => format!(
                    "host stacks: {not_python} process(es) of the program run no Python and their native frames could not be read ({why}); not sampled"
                ),
                None => format!(
                    "host stacks: {not_python} process(es) of the program run no Python; not sampled"
                ),
            });
        }
        if read == 0 && self.processes.iter().all(|p| p.unread.is_none()) {
            out.push(format!("host stacks: {}", self.manifest_text()));
        }
        out
    }

    /// Rows for the capture table (`CaptureEventKind::HostStacks` and its kin) of the
    /// processes in `reports`.
    pub fn events(reports: &[ProcessReport], t_ns: i64) -> Vec<CaptureEvent> {
        let mut out = Vec::new();
        for p in reports {
            if !p.interpreter.is_empty() {
                out.push(CaptureEvent {
                    t_ns,
                    pid: p.pid,
                    event: CaptureEventKind::HostStacks.into(),
                    count: p.samples,
                    detail: format!(
                        "{} ({}): {} thread(s), {} samples, {} missed{}",
                        p.interpreter,
                        short(&p.image),
                        p.threads,
                        p.samples,
                        p.missed,
                        if p.execs > 0 {
                            format!(", exec'd {} time(s)", p.execs)
                        } else {
                            String::new()
                        }
                    ),
                });
            }
            if p.missed > 0 {
                out.push(CaptureEvent {
                    t_ns,
                    pid: p.pid,
                    event: CaptureEventKind::HostSamplesMissed.into(),
                    count: p.missed,
                    detail: missed_detail(p),
                });
            }
            if matches!(
                p.unread,
                Some(Unread::NoPermission | Unread::UnsupportedPython | Unread::Failed)
            ) {
                out.push(CaptureEvent {
                    t_ns,
                    pid: p.pid,
                    event: CaptureEventKind::HostStacksUnavailable.into(),
                    count: 0,
                    detail: p.unread_detail.clone(),
                });
            }
        }
        out
    }

    /// The recording's one row for the processes that run no Python.
    pub fn not_python_event(&self, t_ns: i64) -> Option<CaptureEvent> {
        let names: Vec<&str> = self
            .processes
            .iter()
            .filter(|p| p.unread == Some(Unread::NotPython))
            .map(|p| short(&p.image))
            .collect();
        if names.is_empty() {
            return None;
        }
        let mut distinct: Vec<&str> = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        Some(CaptureEvent {
            t_ns,
            pid: 0,
            event: CaptureEventKind::HostStacksNotPython.into(),
            count: names.len() as u64,
            detail: match self.native_refusal() {
                Some(why) => format!(
                    "{} process(es) run no Python, and their {} ({why}); not sampled: {}",
                    names.len(),
                    event::NATIVE_REFUSED,
                    distinct.join(", ")
                ),
                None => format!(
                    "{} process(es) run no Python, not sampled: {}",
                    names.len(),
                    distinct.join(", ")
                ),
            },
        })
    }
}

fn missed_detail(p: &ProcessReport) -> String {
    let mut parts = Vec::new();
    if p.late_rounds > 0 {
        parts.push(format!(
            "{} round(s) skipped because the sampler ran late",
            p.late_rounds
        ));
    }
    if p.failed_reads > 0 {
        parts.push(format!(
            "{} read(s) failed (the program is not paused, so a read can race with it; last: {})",
            p.failed_reads,
            p.last_error.as_deref().unwrap_or("unknown")
        ));
    }
    if parts.is_empty() {
        parts.push("rounds while the process was attached again".into());
    }
    parts.join("; ")
}

/// The program's file name without its folder (`python3.11`).
fn short(image: &str) -> &str {
    match image.rsplit('/').next() {
        Some(s) if !s.is_empty() => s,
        _ => "unknown program",
    }
}
