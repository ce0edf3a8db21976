//! The round loop: one thread that, every interval, reads every attached process's threads,
//! and every discovery period looks for the program's processes again.
//!
//! Rounds are scheduled on a fixed grid (start + k × interval). A round that ends past the next
//! grid point skips the points it overran, and each skipped point is a missed sample of every
//! thread the process had when last read: nothing is lost without being counted. Per process,
//! a failed read is a missed sample of each of its threads too.

use super::intern::Interner;
use super::procs::{Proc, ProcessTable};
use super::report::{HostSummary, PERMISSION_FIX, ProcessReport, Unread};
use super::source::{AttachError, ReadError, StackReader, StackSource};
use cufall_model::{CaptureEvent, HostSample, Nanos, StackFrame};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the loop runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub interval: Duration,
    /// How often the program's processes are looked for.
    pub discovery: Duration,
    /// How often rows go to the sink.
    pub flush: Duration,
}

impl Options {
    pub fn at(interval: Duration) -> Options {
        Options {
            interval,
            discovery: Duration::from_millis(200),
            flush: Duration::from_millis(100),
        }
    }
}

/// Discovery scans a process that maps Python may take to become readable (its interpreter
/// starting), before it is reported as unreadable.
pub const ATTACH_TRIES: u32 = 15;
/// Failed reads in a row after which a process is attached again (it may have exec'd into
/// another Python, or its interpreter restarted).
pub const REATTACH_AFTER: u32 = 200;
/// Samples buffered before a send to the sink, whatever the flush period.
const FLUSH_ROWS: usize = 16_384;

/// What the loop sends to its caller's channel (as the caller's own message type, `M:
/// From<HostMsg>`).
#[derive(Clone, Debug, PartialEq)]
pub enum HostMsg {
    /// The stacks first seen in this batch, then the samples, which may name them: a writer
    /// writes the stacks first.
    Stacks {
        stacks: Vec<StackFrame>,
        samples: Vec<HostSample>,
    },
    /// Rows for the trace's capture table (`CaptureEventKind::HostStacks` and its kin).
    Events(Vec<CaptureEvent>),
}

/// Where the loop's messages go: the caller's channel, each message turned into its type.
type Outbox = Box<dyn Fn(HostMsg) + Send>;

fn outbox<M: From<HostMsg> + Send + 'static>(tx: Sender<M>) -> Outbox {
    // A receiver gone (the recording ending) drops what is left: nothing waits for it.
    Box::new(move |m| {
        let _ = tx.send(M::from(m));
    })
}

/// The running sampler.
pub struct HostStacks {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<HostSummary>,
}

impl HostStacks {
    /// Samples `root` and its descendants until [`HostStacks::stop`]; rows and capture events
    /// go to `tx`.
    pub fn start<M: From<HostMsg> + Send + 'static>(
        root: u32,
        tx: Sender<M>,
        source: Box<dyn StackSource>,
        table: Box<dyn ProcessTable>,
        opts: Options,
    ) -> std::io::Result<HostStacks> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cufall-host-stacks".into())
            .spawn(move || {
                let mut s = Sampler::new(root, tx, source, table, opts);
                s.attach_on_a_thread();
                s.run(&flag)
            })?;
        Ok(HostStacks { stop, thread })
    }

    /// Stops after the current round; every row and event is in the sink's queue when this
    /// returns.
    pub fn stop(self) -> HostSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|p| HostSummary {
            processes: vec![ProcessReport {
                unread: Some(Unread::Failed),
                unread_detail: format!(
                    "the host-stack thread panicked: {}",
                    panic_message(p.as_ref())
                ),
                ..ProcessReport::default()
            }],
            ..HostSummary::default()
        })
    }
}

enum State {
    Reading(Box<dyn StackReader>),
    /// Not attached yet (or again): tried this many times.
    Attaching(u32),
    Unread,
}

type Attached = (u32, u64, Result<Box<dyn StackReader>, AttachError>);

/// Where attaching happens: inline (the tests: every step in order), or on a thread of its own,
/// so that a slow attach (py-spy parses the interpreter's binary: milliseconds to tens of
/// milliseconds) never delays a round of the processes already read.
enum Attacher {
    Inline(Box<dyn StackSource>),
    Thread {
        tx: Sender<(u32, u64)>,
        rx: Receiver<Attached>,
        /// Processes with a request in flight.
        pending: HashSet<u32>,
    },
    /// Between the two (while moving the source to its thread).
    None,
}

struct Tracked {
    /// The last attach asked for: an answer to an older one (before an exec) is dropped.
    asked: u64,
    proc: Proc,
    state: State,
    report: ProcessReport,
    tids: HashSet<u32>,
    /// Threads at the last read: what a missed round of this process misses.
    threads_last: u64,
    failures_in_row: u32,
}

pub(super) struct Sampler {
    root: u32,
    out: Outbox,
    attacher: Attacher,
    attach_seq: u64,
    table: Box<dyn ProcessTable>,
    opts: Options,
    procs: BTreeMap<u32, Tracked>,
    interner: Interner,
    stacks: Vec<StackFrame>,
    samples: Vec<HostSample>,
    events: Vec<CaptureEvent>,
    done: Vec<ProcessReport>,
    summary: HostSummary,
}

impl Sampler {
    pub(super) fn new<M: From<HostMsg> + Send + 'static>(
        root: u32,
        tx: Sender<M>,
        source: Box<dyn StackSource>,
        table: Box<dyn ProcessTable>,
        opts: Options,
    ) -> Sampler {
        let summary = HostSummary {
            interval_ns: Nanos::from_duration(opts.interval),
            frames: source.frames_kind().into(),
            frame_kinds: source.frames(),
            ..HostSummary::default()
        };
        Sampler {
            root,
            out: outbox(tx),
            attacher: Attacher::Inline(source),
            attach_seq: 0,
            table,
            opts,
            procs: BTreeMap::new(),
            interner: Interner::default(),
            stacks: Vec::new(),
            samples: Vec::new(),
            events: Vec::new(),
            done: Vec::new(),
            summary,
        }
    }

    /// Moves attaching to a thread of its own (which ends with the sampler); inline if that
    /// thread cannot start.
    fn attach_on_a_thread(&mut self) {
        let Attacher::Inline(mut source) = std::mem::replace(&mut self.attacher, Attacher::None)
        else {
            return;
        };
        let (tx, requests) = channel::<(u32, u64)>();
        let (answers, rx) = channel::<Attached>();
        let spawned = std::thread::Builder::new()
            .name("cufall-host-attach".into())
            .spawn(move || {
                for (pid, seq) in requests {
                    if answers.send((pid, seq, source.attach(pid))).is_err() {
                        break;
                    }
                }
                source
            });
        self.attacher = match spawned {
            Ok(_) => Attacher::Thread {
                tx,
                rx,
                pending: HashSet::new(),
            },
            // The closure (and the source in it) is gone with the failed spawn: nothing can be
            // attached; every process will say so.
            Err(_) => Attacher::None,
        };
    }

    /// Takes the answers of the attach thread.
    fn collect_attached(&mut self) {
        let Attacher::Thread { rx, pending, .. } = &mut self.attacher else {
            return;
        };
        let answers: Vec<Attached> = rx.try_iter().collect();
        for (pid, _, _) in &answers {
            pending.remove(pid);
        }
        for (pid, seq, result) in answers {
            if self.procs.get(&pid).is_some_and(|t| t.asked == seq) {
                self.attached(pid, result);
            }
        }
    }

    pub(super) fn run(mut self, stop: &AtomicBool) -> HostSummary {
        let started = Instant::now();
        let mut next = started;
        let mut next_scan = started;
        let mut last_flush = started;
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_scan {
                self.discover();
                next_scan = Instant::now() + self.opts.discovery;
            }
            self.collect_attached();
            self.round();
            if last_flush.elapsed() >= self.opts.flush || self.samples.len() >= FLUSH_ROWS {
                self.flush();
                last_flush = Instant::now();
            }
            next += self.opts.interval;
            let now = Instant::now();
            if now < next {
                std::thread::sleep(next - now);
            } else {
                let skipped = (now - next).as_nanos() / self.opts.interval.as_nanos().max(1);
                let skipped = u32::try_from(skipped).unwrap_or(u32::MAX);
                if skipped > 0 {
                    self.late(u64::from(skipped));
                    next += self.opts.interval.saturating_mul(skipped);
                }
            }
        }
        self.summary.wall_s = started.elapsed().as_secs_f64();
        self.finish()
    }

    /// Rounds skipped: each is a missed sample of every thread of every attached process.
    fn late(&mut self, rounds: u64) {
        self.summary.late_rounds += rounds;
        for t in self.procs.values_mut() {
            if matches!(t.state, State::Reading(_)) {
                t.report.late_rounds += rounds;
                t.report.missed += rounds * t.threads_last.max(1);
            }
        }
    }

    /// One read of every attached process.
    pub(super) fn round(&mut self) {
        self.summary.rounds += 1;
        let mut gone = Vec::new();
        for (pid, t) in &mut self.procs {
            let reader = match &mut t.state {
                State::Reading(r) => r,
                State::Attaching(_) if t.threads_last > 0 => {
                    // Attached before and waiting to be again: this round is missed.
                    t.report.missed += t.threads_last;
                    continue;
                }
                _ => continue,
            };
            let t_ns = now();
            match reader.sample() {
                Ok(threads) => {
                    t.failures_in_row = 0;
                    t.threads_last = threads.len() as u64;
                    t.report.samples += threads.len() as u64;
                    for th in threads {
                        let (stack_id, rows) = self.interner.intern(&th.frames);
                        if let Some(rows) = rows {
                            self.stacks.extend(rows);
                        }
                        t.tids.insert(th.tid);
                        self.samples.push(HostSample {
                            t_ns,
                            pid: *pid,
                            tid: th.tid,
                            thread_name: th.name,
                            state: th.state,
                            gil: th.gil,
                            stack_id,
                        });
                    }
                }
                Err(ReadError::Gone) => gone.push(*pid),
                Err(ReadError::Denied) => {
                    t.report.missed += t.threads_last.max(1);
                    t.failures_in_row = 0;
                    t.state = State::Attaching(0);
                }
                Err(ReadError::Failed(e)) => {
                    t.report.failed_reads += 1;
                    t.report.missed += t.threads_last.max(1);
                    t.report.last_error = Some(e);
                    t.failures_in_row += 1;
                    if t.failures_in_row >= REATTACH_AFTER {
                        t.failures_in_row = 0;
                        t.state = State::Attaching(0);
                    }
                }
            }
        }
        for pid in gone {
            self.retire(pid);
        }
    }

    /// Looks for the program's processes: new ones are attached, exec'd ones attached again,
    /// ended ones retired.
    pub(super) fn discover(&mut self) {
        let tree = self.table.tree(self.root);
        let seen: HashSet<u32> = tree.iter().map(|p| p.pid).collect();
        let ended: Vec<u32> = self
            .procs
            .keys()
            .copied()
            // A process whose parent ended is no longer in the tree but still the program's.
            .filter(|pid| !seen.contains(pid) && !self.table.alive(*pid))
            .collect();
        for pid in ended {
            self.retire(pid);
        }
        for p in tree {
            let pid = p.pid;
            match self.procs.get_mut(&pid) {
                Some(t) if t.proc.start_ticks != p.start_ticks => {
                    // The pid was handed to a new process.
                    self.retire(pid);
                    self.track(p);
                }
                Some(t) if !p.image.is_empty() && t.proc.image != p.image => {
                    t.report.execs += 1;
                    t.report.image = p.image.clone();
                    t.report.unread = None;
                    t.report.unread_detail.clear();
                    t.proc = p;
                    t.state = State::Attaching(0);
                    self.attach(pid, true);
                }
                Some(t) if matches!(t.state, State::Attaching(_)) => self.attach(pid, false),
                Some(_) => {}
                None => self.track(p),
            }
        }
    }

    fn track(&mut self, p: Proc) {
        let pid = p.pid;
        let report = ProcessReport {
            pid,
            image: p.image.clone(),
            ..ProcessReport::default()
        };
        self.procs.insert(
            pid,
            Tracked {
                asked: 0,
                proc: p,
                state: State::Attaching(0),
                report,
                tids: HashSet::new(),
                threads_last: 0,
                failures_in_row: 0,
            },
        );
        self.attach(pid, true);
    }

    /// Asks for `pid` to be attached; `again` asks even when an answer is on its way (the
    /// process exec'd: that answer is for its old program).
    fn attach(&mut self, pid: u32, again: bool) {
        self.attach_seq += 1;
        let seq = self.attach_seq;
        let Some(t) = self.procs.get_mut(&pid) else {
            return;
        };
        match &mut self.attacher {
            Attacher::Inline(source) => {
                t.asked = seq;
                let result = source.attach(pid);
                self.attached(pid, result);
            }
            Attacher::Thread { tx, pending, .. } => {
                if (pending.insert(pid) || again) && tx.send((pid, seq)).is_ok() {
                    t.asked = seq;
                }
            }
            Attacher::None => {
                t.state = State::Unread;
                t.report.unread = Some(Unread::Failed);
                t.report.unread_detail = "the host-stack attach thread could not start".into();
            }
        }
    }

    fn attached(&mut self, pid: u32, result: Result<Box<dyn StackReader>, AttachError>) {
        let Some(t) = self.procs.get_mut(&pid) else {
            return;
        };
        let tries = match t.state {
            State::Attaching(n) => n + 1,
            _ => 1,
        };
        let (unread, detail) = match result {
            Ok(reader) => {
                t.report.interpreter = reader.describe();
                t.report.native_refused = reader.native_refused().unwrap_or_default();
                t.state = State::Reading(reader);
                return;
            }
            Err(AttachError::Gone { .. }) => {
                self.retire(pid);
                return;
            }
            Err(AttachError::Other { detail, .. }) if tries < ATTACH_TRIES => {
                t.report.last_error = Some(detail);
                t.state = State::Attaching(tries);
                return;
            }
            Err(e @ AttachError::NoPermission { .. }) => (
                Unread::NoPermission,
                format!("{} ({}); to allow it: {PERMISSION_FIX}", e, e_source(&e)),
            ),
            Err(AttachError::NotPython { .. }) => (Unread::NotPython, String::new()),
            Err(AttachError::NativeUnavailable { detail, .. }) => (Unread::NotPython, detail),
            Err(e @ AttachError::UnsupportedPython { .. }) => (
                Unread::UnsupportedPython,
                format!("{e}; a newer cufall (its py-spy) may read it"),
            ),
            Err(e @ AttachError::Other { .. }) => (
                Unread::Failed,
                format!("{e} (gave up after {ATTACH_TRIES} tries)"),
            ),
        };
        t.state = State::Unread;
        t.report.unread = Some(unread);
        t.report.unread_detail = detail;
    }

    /// A process that ended (or whose pid was reused): its account goes to the trace now.
    fn retire(&mut self, pid: u32) {
        if let Some(t) = self.procs.remove(&pid) {
            let report = finished(t);
            self.events
                .extend(HostSummary::events(std::slice::from_ref(&report), now()));
            self.done.push(report);
        }
    }

    /// Sends what is buffered: stacks with (and so before) the samples that name them.
    pub(super) fn flush(&mut self) {
        if !self.samples.is_empty() || !self.stacks.is_empty() {
            let stacks = std::mem::take(&mut self.stacks);
            let samples = std::mem::take(&mut self.samples);
            self.summary.samples += samples.len() as u64;
            self.summary.stacks += stacks.iter().filter(|f| f.depth == 0).count() as u64;
            (self.out)(HostMsg::Stacks { stacks, samples });
        }
        if !self.events.is_empty() {
            (self.out)(HostMsg::Events(std::mem::take(&mut self.events)));
        }
    }

    pub(super) fn finish(mut self) -> HostSummary {
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.retire(pid);
        }
        self.summary.processes = std::mem::take(&mut self.done);
        if let Some(e) = self.summary.not_python_event(now()) {
            self.events.push(e);
        }
        self.flush();
        self.summary.missed = self.summary.processes.iter().map(|p| p.missed).sum();
        self.summary.intern_resets = self.interner.resets();
        self.summary
    }
}

fn finished(t: Tracked) -> ProcessReport {
    let mut r = t.report;
    r.threads = t.tids.len();
    r
}

fn e_source(e: &AttachError) -> String {
    std::error::Error::source(e)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "refused".into())
}

/// The message a panic carried, for the report of a sampler thread that panicked.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

fn now() -> i64 {
    cufall_model::now_unix_ns()
}
