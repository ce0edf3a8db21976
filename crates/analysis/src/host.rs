//! Where the host was during the gaps: the trace's host samples (`host_samples` and `stacks`,
//! schema 1.2) attributed to the gap classes of a report (each place's gap pieces, and each
//! phase's) and to each phase's whole time.
//!
//! A host sample at `t` stands for its thread over one sampling interval. A gap class's gap time
//! `T` would hold `T / interval` samples of one thread at the recording's rate, so a frame's
//! *share* is the samples in the class's gaps that have the frame, over those expected: time the
//! sampler missed shows up as a `sampled` share under 100 %, never as more time for the frames that
//! were seen. Where a class's time holds more samples than expected (sampling rounds a little
//! faster than the rate, gaps shorter than an interval), shares are over the samples instead, so
//! that none reads above 100 %. *Self* counts the innermost frame; *inclusive* counts a frame
//! anywhere on the stack (once per sample, however often recursion repeats it); both also roll up
//! by function, its lines beneath. A thread is expected only while it was alive, from its first
//! sample to one interval after its last: for all threads together the expected count is the
//! sum of each thread's alive part of the class's time over the interval, so a short-lived
//! process cannot dilute the others' shares. Samples outside the recording never get here: the
//! trace reader leaves them out (`cufall_trace::plausible`). Each view also splits its time by
//! cause ([`crate::causes`]).
//!
//! The *launching thread* of a phase is the thread that made the most kernel-launch calls
//! (`api` rows whose name has `Launch`) starting inside the phase; without API calls in the
//! trace, the thread of most of the phase's NVTX ranges; without either, the thread with the
//! most running samples in the phase, among those of the process that launched most of its
//! kernels where kernels were captured ([`Launchers::or_running`]). A place between two phases
//! takes the launching thread of the phase after it (the one whose launches the gap delays), at
//! the end of the recording that of the phase before.
//!
//! Cost: the samples are sorted once by time; each gap piece finds its samples by binary search,
//! so the attribution is O((pieces + samples) log samples) times the stack depth, plus the
//! threads for each class's and piece's expected samples, never pieces × samples.

use crate::causes::{self, ApiCauses, CauseAcc, HostCause, HostCauses, NameKey};
use crate::gaps::{GapPart, KernelCoverage};
use crate::phases::{Phases, Place, SegPhases, slot_paths, slots_of};
use crate::thresholds::HOST_BOUND_FROM;
use cufall_trace::model::{
    ApiCall, DeviceId, FrameKind, Gil, HostFrames, HostSample, HostStacksMeta, HostState, Manifest,
    Nanos, NvtxRange, StackFrame,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How many frames each view keeps, by share (text shows fewer).
pub const HOST_FRAMES_KEPT: usize = 20;

/// A frame is shown as waiting when at least this share of its samples were idle.
pub const WAITING_FROM: f64 = 0.5;

/// Where the sampling interval used for the expected sample counts comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSource {
    /// The interval the recording asked for ([`asked_interval_ns`]).
    Asked,
    /// The median time between consecutive samples of one thread.
    Observed,
}

/// Which rows chose the launching threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchingFrom {
    ApiCalls,
    NvtxRanges,
    /// No launch calls or ranges: the process that launched most of the phase's kernels, its
    /// thread with the most running samples in the phase.
    KernelProcess,
    /// No launch calls, ranges or kernels: the thread with the most running samples.
    RunningSamples,
    /// Neither: only the all-threads views are given.
    Unknown,
}

/// A host thread of the program.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct HostThread {
    pub pid: u32,
    pub tid: u32,
    /// The name of its first sample (empty when the thread has no sample).
    pub name: String,
}

/// One frame's share of a view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameShare {
    pub function: String,
    pub file: String,
    pub line: Option<u32>,
    pub module: String,
    pub kind: FrameKind,
    pub samples: u64,
    /// Of those, samples of a thread that was idle (in a blocking call, on a lock, asleep).
    pub idle_samples: u64,
    /// `samples` over the samples expected in the time (see the module docs), or over the
    /// view's samples where those are more: at most 1.
    pub share: f64,
}

/// One function's share of a view: its samples over every line, with the lines beneath.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionShare {
    pub function: String,
    pub file: String,
    pub module: String,
    pub kind: FrameKind,
    /// Samples with the function innermost (self) or anywhere on the stack (inclusive, once per
    /// sample however many of its lines the stack holds).
    pub samples: u64,
    /// Of those, samples of a thread that was idle.
    pub idle_samples: u64,
    /// As [`FrameShare::share`]: at most 1.
    pub share: f64,
    /// Its lines, largest share first (self: the lines it was in; inclusive: the lines on the
    /// stack), the first [`HOST_FRAMES_KEPT`].
    pub lines: Vec<FrameShare>,
}

/// The host during a class's time, for one thread or for all.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostView {
    /// The launching thread; `None` for all threads.
    pub thread: Option<HostThread>,
    /// Threads alive during the time (from their first sample to their last), or with a sample
    /// in it.
    pub threads: u64,
    pub samples: u64,
    /// Samples the time would hold at the recording's rate, for `threads` threads (one for a
    /// launching thread); for gaps, the time they cover, overlaps (several GPUs) once.
    pub expected_samples: f64,
    /// `samples / expected_samples`, at most 1: under 1, time the sampler missed.
    pub sampled: f64,
    /// Share of the time in idle samples.
    pub idle: f64,
    /// Share of the time holding Python's GIL; `None` when no sample says.
    pub gil_held: Option<f64>,
    /// Samples whose stack has no frame (or names a stack the trace lacks).
    pub no_frames: u64,
    /// Innermost frames, largest share first, the first [`HOST_FRAMES_KEPT`].
    pub self_frames: Vec<FrameShare>,
    /// Every innermost frame, largest share first: a diff compares these, so that a frame
    /// kept on one side and cut on the other shows its real share on both. Not in the JSON.
    #[serde(skip)]
    pub all_self_frames: Vec<FrameShare>,
    /// Frames anywhere on the stack, largest share first.
    pub inclusive_frames: Vec<FrameShare>,
    /// Innermost frames rolled up by function (every line of it), largest share first, the
    /// first [`HOST_FRAMES_KEPT`].
    pub self_functions: Vec<FunctionShare>,
    /// Functions anywhere on the stack, largest share first, the first [`HOST_FRAMES_KEPT`].
    pub inclusive_functions: Vec<FunctionShare>,
    /// The time split by what the host was doing ([`crate::causes`]).
    pub causes: HostCauses,
}

/// What a [`HostClass`] covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostScope {
    /// The gaps of one place (as the report's gap groups name it).
    Place,
    /// The gaps of one phase (those whose midpoint lies in it).
    PhaseGaps,
    /// The whole time of one phase.
    Phase,
}

/// The host during one class of gaps, or one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostClass {
    pub scope: HostScope,
    /// The place label or the phase path.
    pub name: String,
    /// Gap time (all devices) or phase time.
    pub time_ns: Nanos,
    /// Gaps in the class (0 for a phase's whole time).
    pub gaps: u64,
    pub launching: Option<HostView>,
    pub all: HostView,
    /// Gap classes: at least [`HOST_BOUND_FROM`] of the time without a kernel
    /// resident (or kernels not captured); the verdict section gives these their line.
    pub host_bound: bool,
}

/// The host during one gap: the launching thread of its place (all threads where there is
/// none) and its innermost frames.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapHost {
    /// The launching thread; `None`: all threads.
    pub thread: Option<HostThread>,
    pub samples: u64,
    /// Share of the gap in idle samples.
    pub idle: f64,
    /// Innermost frames, largest share first, the first [`GAP_HOST_FRAMES`].
    pub frames: Vec<FrameShare>,
    /// Innermost frames by function, largest share first, the first [`GAP_HOST_FRAMES`].
    pub functions: Vec<FunctionShare>,
}

/// How many frames each gap's [`GapHost`] keeps.
pub const GAP_HOST_FRAMES: usize = 3;

/// The host side of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostReport {
    pub interval_ns: Nanos,
    pub interval_source: IntervalSource,
    pub samples: u64,
    pub threads: u64,
    pub processes: u64,
    pub launching_from: LaunchingFrom,
    /// Places with gap time without a kernel resident (or any gap time where kernels were not
    /// captured), largest gap time first; then the phases' gaps in tree order.
    pub gap_classes: Vec<HostClass>,
    /// Every phase's whole time, in tree order, the whole run first.
    pub phases: Vec<HostClass>,
}

/// A frame as interned here: the fields that name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FrameKey {
    function: String,
    file: String,
    line: Option<u32>,
    module: String,
    kind: FrameKind,
}

/// A function as interned here: a frame without its line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FunctionKey {
    function: String,
    file: String,
    module: String,
    kind: FrameKind,
}

/// One host sample, resolved: its thread and its stack as indices.
#[derive(Clone, Copy, Debug)]
struct Sample {
    t_ns: i64,
    thread: u32,
    idle: bool,
    gil: Gil,
    /// Index into [`HostIndex::stacks`]; `None`: a stack id the trace lacks.
    stack: Option<u32>,
}

/// The host samples sorted by time, with their stacks and threads interned.
pub struct HostIndex {
    frames: Vec<FrameKey>,
    /// Each frame's function, an index into `functions`.
    frame_fn: Vec<u32>,
    functions: Vec<FunctionKey>,
    /// Each interned stack's innermost frame and distinct frames, as indices into `frames`.
    stacks: Vec<StackFrames>,
    threads: Vec<HostThread>,
    /// Each thread's life as its samples show it, `[first, last + interval)` (a thread is known
    /// by its samples: every one has a span).
    alive: Vec<Option<(i64, i64)>>,
    samples: Vec<Sample>,
    interval_ns: i64,
    interval_source: IntervalSource,
    /// The captured CUDA calls of the verdict's kinds, per thread (empty without them).
    api: ApiCauses,
}

struct StackFrames {
    /// The innermost frame, if the stack has any.
    innermost: Option<u32>,
    /// Every distinct frame of the stack.
    distinct: Vec<u32>,
    /// Every distinct function of the stack.
    distinct_fns: Vec<u32>,
    /// What its frames say the thread was doing, if they name it ([`crate::causes`]).
    cause: Option<(HostCause, NameKey)>,
}

/// The host-stack interval the recording asked for: the manifest's `host_stacks.interval_ns`
/// (trace format 1.4 on), else the rate the words of `extra.host_stacks` name (older traces);
/// `None` when neither gives one a sampler runs at.
pub fn asked_interval_ns(m: &Manifest) -> Option<i64> {
    match &m.host_stacks {
        // One sample in 1000 s at most, as for the words.
        Some(h) => (1..=1_000_000_000_000)
            .contains(&h.interval_ns)
            .then_some(h.interval_ns),
        None => interval_from_words(m.extra.get(HostStacksMeta::EXTRA_KEY).map(String::as_str)),
    }
}

/// Why host stacks are off: the manifest's `host_stacks.off_reason` (trace format 1.4 on), else
/// the words of `extra.host_stacks` after `off:` (older traces); `None` when they were on, or
/// the trace does not say.
pub fn stacks_off(m: &Manifest) -> Option<String> {
    let why = match &m.host_stacks {
        Some(h) => h.off_reason.clone()?,
        None => {
            let words = m.extra.get(HostStacksMeta::EXTRA_KEY)?.trim();
            words
                .strip_prefix("off")?
                .trim_start_matches(':')
                .to_string()
        }
    };
    let why = why.trim();
    Some(if why.is_empty() {
        "no reason given".to_string()
    } else {
        why.to_string()
    })
}

/// How host stacks were sampled, or why not, in words: `extra.host_stacks` as the recorder
/// wrote it, else (a trace with the manifest's `host_stacks` alone) words made from its values
/// (`on: every 1.00 ms (1000 Hz), mixed frames`, `off: <why>`); `None` when the trace says
/// neither.
pub fn setting_words(m: &Manifest) -> Option<String> {
    if let Some(words) = m.extra.get(HostStacksMeta::EXTRA_KEY) {
        return Some(words.clone());
    }
    let h = m.host_stacks.as_ref()?;
    if let Some(why) = stacks_off(m) {
        return Some(format!("off: {why}"));
    }
    let frames = match h.frames {
        HostFrames::Python => "python frames",
        HostFrames::Native => "native frames",
        HostFrames::Mixed => "python frames with their native frames, native frames without python",
        HostFrames::Other => "frames of a kind this cufall does not know",
    };
    let rate = match asked_interval_ns(m) {
        Some(ns) => format!("every {} ({:.0} Hz)", Nanos(ns), 1e9 / ns as f64),
        None => "at an interval that cannot be true".to_string(),
    };
    Some(format!("on: {rate}, {frames}"))
}

/// The interval of `extra.host_stacks` when it names a rate, a number followed by `Hz`
/// (`on: every 1ms (1000 Hz), python frames only`; `1000 Hz`).
fn interval_from_words(host_stacks: Option<&str>) -> Option<i64> {
    let words: Vec<&str> = host_stacks?.split_whitespace().collect();
    let hz: f64 = words.windows(2).find_map(|w| {
        let number = w[0].trim_start_matches('(');
        w[1].starts_with("Hz")
            .then(|| number.parse().ok())
            .flatten()
    })?;
    // From one sample in 1000 s to one a nanosecond; anything else is not a rate a sampler runs.
    if !(hz.is_finite() && (1e-3..=1e9).contains(&hz)) {
        return None;
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "1e9 / hz lies in [1, 1e12] for the rates kept above: within i64"
    )]
    let ns = (1e9 / hz).round() as i64;
    Some(ns.max(1))
}

/// The median time between consecutive samples of one thread; `samples` sorted by time.
fn observed_interval_ns(samples: &[Sample]) -> Option<i64> {
    let mut last: HashMap<u32, i64> = HashMap::new();
    let mut deltas = Vec::new();
    for s in samples {
        if let Some(prev) = last.insert(s.thread, s.t_ns)
            && s.t_ns > prev
        {
            deltas.push(s.t_ns - prev);
        }
    }
    if deltas.is_empty() {
        return None;
    }
    let mid = deltas.len() / 2;
    let (_, m, _) = deltas.select_nth_unstable(mid);
    Some(*m)
}

impl HostIndex {
    /// `None` when the trace has no host samples. `asked_interval_ns` is the recording's
    /// ([`asked_interval_ns`]); without one the samples' spacing gives the interval.
    pub fn build(
        stacks: &[StackFrame],
        samples: &[HostSample],
        asked_interval_ns: Option<i64>,
    ) -> Option<HostIndex> {
        let mut b = HostIndexBuilder::new(stacks);
        b.add(samples);
        b.finish(asked_interval_ns)
    }

    /// The samples with `start <= t < end`.
    fn between(&self, start: i64, end: i64) -> &[Sample] {
        let lo = self.samples.partition_point(|s| s.t_ns < start);
        let hi = self.samples.partition_point(|s| s.t_ns < end);
        &self.samples[lo..hi.max(lo)]
    }

    /// Takes the captured CUDA calls: a sample inside one of a verdict's kinds has its cause.
    pub fn set_api(&mut self, calls: &[ApiCall]) {
        let ids: HashMap<(u32, u32), u32> = self
            .threads
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some(((t.pid, t.tid), u32::try_from(i).ok()?)))
            .collect();
        self.api = ApiCauses::build(calls, self.threads.len(), |pid, tid| {
            ids.get(&(pid, tid)).copied()
        });
    }

    /// What sample `s` says its thread was doing, and what names it.
    fn cause_of(&self, s: &Sample) -> (HostCause, NameKey) {
        if let Some((c, name)) = self.api.at(s.thread, s.t_ns) {
            return (c, NameKey::Api(name));
        }
        let stack = s.stack.and_then(|i| self.stacks.get(i as usize));
        if let Some(c) = stack.and_then(|st| st.cause) {
            return c;
        }
        let inner = stack
            .and_then(|st| st.innermost)
            .and_then(|f| self.frame_fn.get(f as usize))
            .map_or(NameKey::Unnamed, |f| NameKey::Function(*f));
        // Idle in a frame that names no wait (a Python `time.sleep` shows only its caller).
        if s.idle {
            (HostCause::WaitingOnThread, inner)
        } else {
            (HostCause::Computing, inner)
        }
    }

    /// A cause's name as the verdict line words it: `build_tree`, `Event.wait in schedule`.
    fn cause_name(&self, k: NameKey) -> String {
        let f = |i: u32| {
            self.functions
                .get(i as usize)
                .map_or("(unnamed)", |k| k.function.as_str())
        };
        match k {
            NameKey::Function(i) => f(i).to_string(),
            NameKey::FunctionIn(i, outer) => format!("{} in {}", f(i), f(outer)),
            NameKey::Api(i) => self.api.name(i).to_string(),
            NameKey::Unnamed => String::new(),
        }
    }

    /// Time of `covered` during which thread `t` was alive.
    fn alive_in(&self, t: u32, covered: &KernelCoverage) -> i64 {
        match self.alive.get(t as usize).copied().flatten() {
            Some((a, b)) => covered.covered_ns(COVER_LANE, a, b),
            None => 0,
        }
    }

    fn thread_of(&self, key: (u32, u32)) -> Option<u32> {
        self.threads
            .iter()
            .position(|t| (t.pid, t.tid) == key)
            .and_then(|i| u32::try_from(i).ok())
    }
}

/// A [`HostIndex`] built a segment of host samples at a time: each segment's rows (a thread
/// name each) are dropped once their compact samples are kept. The stacks table is kept whole
/// as it is read: it is interned (one row per frame of each distinct stack), small next to the
/// samples.
pub struct HostIndexBuilder {
    frames: Vec<FrameKey>,
    frame_fn: Vec<u32>,
    functions: Vec<FunctionKey>,
    stacks: Vec<StackFrames>,
    stack_of: HashMap<u64, u32>,
    thread_ids: HashMap<(u32, u32), u32>,
    threads: Vec<HostThread>,
    samples: Vec<Sample>,
}

impl HostIndexBuilder {
    pub fn new(stacks: &[StackFrame]) -> HostIndexBuilder {
        let mut frames: Vec<FrameKey> = Vec::new();
        let mut frame_ids: HashMap<FrameKey, u32> = HashMap::new();
        let mut by_id: BTreeMap<u64, Vec<(u32, u32)>> = BTreeMap::new();
        for f in stacks {
            let key = FrameKey {
                function: f.function.clone(),
                file: f.file.clone(),
                line: f.line,
                module: f.module.clone(),
                kind: f.kind,
            };
            // Indices are u32: 2^32 distinct frames, stacks or threads would not fit in memory
            // before they overflowed.
            let next = u32::try_from(frames.len()).unwrap_or(u32::MAX);
            let id = *frame_ids.entry(key.clone()).or_insert_with(|| {
                frames.push(key);
                next
            });
            by_id.entry(f.stack_id).or_default().push((f.depth, id));
        }
        let mut functions: Vec<FunctionKey> = Vec::new();
        let mut function_ids: HashMap<FunctionKey, u32> = HashMap::new();
        let frame_fn: Vec<u32> = frames
            .iter()
            .map(|f| {
                let key = FunctionKey {
                    function: f.function.clone(),
                    file: f.file.clone(),
                    module: f.module.clone(),
                    kind: f.kind,
                };
                let next = u32::try_from(functions.len()).unwrap_or(u32::MAX);
                *function_ids.entry(key.clone()).or_insert_with(|| {
                    functions.push(key);
                    next
                })
            })
            .collect();
        let mut stack_of: HashMap<u64, u32> = HashMap::new();
        let mut stack_list = Vec::with_capacity(by_id.len());
        for (sid, mut rows) in by_id {
            rows.sort_unstable();
            let mut distinct: Vec<u32> = rows.iter().map(|(_, f)| *f).collect();
            distinct.sort_unstable();
            distinct.dedup();
            let mut distinct_fns: Vec<u32> = distinct
                .iter()
                .filter_map(|f| frame_fn.get(*f as usize).copied())
                .collect();
            distinct_fns.sort_unstable();
            distinct_fns.dedup();
            stack_of.insert(sid, u32::try_from(stack_list.len()).unwrap_or(u32::MAX));
            let cause = stack_cause(&frames, &frame_fn, &rows);
            stack_list.push(StackFrames {
                innermost: rows.first().map(|(_, f)| *f),
                distinct,
                distinct_fns,
                cause,
            });
        }
        HostIndexBuilder {
            frames,
            frame_fn,
            functions,
            stacks: stack_list,
            stack_of,
            thread_ids: HashMap::new(),
            threads: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Keeps one segment's samples (in any order), threads interned by (pid, tid).
    pub fn add(&mut self, samples: &[HostSample]) {
        self.samples.reserve(samples.len());
        for s in samples {
            let next = u32::try_from(self.threads.len()).unwrap_or(u32::MAX);
            let threads = &mut self.threads;
            let thread = *self.thread_ids.entry((s.pid, s.tid)).or_insert_with(|| {
                threads.push(HostThread {
                    pid: s.pid,
                    tid: s.tid,
                    name: s.thread_name.clone(),
                });
                next
            });
            self.samples.push(Sample {
                t_ns: s.t_ns,
                thread,
                idle: s.state == HostState::Idle,
                gil: s.gil,
                stack: self.stack_of.get(&s.stack_id).copied(),
            });
        }
    }

    /// `None` when no sample was added. `asked_interval_ns` is the recording's
    /// ([`asked_interval_ns`]); without one the samples' spacing gives the interval.
    pub fn finish(self, asked_interval_ns: Option<i64>) -> Option<HostIndex> {
        if self.samples.is_empty() {
            return None;
        }
        let mut resolved = self.samples;
        resolved.sort_by_key(|s| (s.t_ns, s.thread));
        let (interval_ns, interval_source) = match asked_interval_ns {
            Some(i) => (i, IntervalSource::Asked),
            None => (
                // One sample a thread: no spacing to observe; the recorder's default, 1 kHz.
                observed_interval_ns(&resolved).unwrap_or(1_000_000),
                IntervalSource::Observed,
            ),
        };
        let alive = alive_spans(&resolved, self.threads.len(), interval_ns);
        Some(HostIndex {
            frames: self.frames,
            frame_fn: self.frame_fn,
            functions: self.functions,
            stacks: self.stacks,
            threads: self.threads,
            alive,
            samples: resolved,
            interval_ns,
            interval_source,
            api: ApiCauses::default(),
        })
    }
}

/// What a stack's frames (`rows`: depth and frame, innermost first) say the thread was doing:
/// the outermost frame of a CUDA kind, else the innermost blocking frame, named with the frame
/// outside it; `None` when no frame says.
fn stack_cause(
    frames: &[FrameKey],
    frame_fn: &[u32],
    rows: &[(u32, u32)],
) -> Option<(HostCause, NameKey)> {
    let func = |i: usize| -> Option<(&FrameKey, u32)> {
        let (_, f) = rows.get(i)?;
        Some((frames.get(*f as usize)?, *frame_fn.get(*f as usize)?))
    };
    let cuda = (0..rows.len()).rev().find_map(|i| {
        let (k, f) = func(i)?;
        causes::cuda_cause(&k.function, &k.file).map(|c| (c, NameKey::Function(f)))
    });
    cuda.or_else(|| {
        (0..rows.len()).find_map(|i| {
            let (k, f) = func(i)?;
            causes::blocks(&k.function, &k.file).then(|| {
                let key = match func(i + 1) {
                    Some((_, outer)) => NameKey::FunctionIn(f, outer),
                    None => NameKey::Function(f),
                };
                (HostCause::WaitingOnThread, key)
            })
        })
    })
}

/// Each thread's life, `[first sample, last sample + interval)`; `None` without a sample.
fn alive_spans(samples: &[Sample], threads: usize, interval_ns: i64) -> Vec<Option<(i64, i64)>> {
    let mut alive: Vec<Option<(i64, i64)>> = vec![None; threads];
    for s in samples {
        if let Some(slot) = alive.get_mut(s.thread as usize) {
            let end = s.t_ns.saturating_add(interval_ns);
            *slot = Some(match *slot {
                Some((a, b)) => (a.min(s.t_ns), b.max(end)),
                None => (s.t_ns, end),
            });
        }
    }
    alive
}

/// The one key of the intervals a class covers.
const COVER_LANE: DeviceId = DeviceId(0);

/// The launching thread of each slot (phases, then the whole run), as `(pid, tid)`.
pub struct Launchers {
    pub from: LaunchingFrom,
    by_slot: Vec<Option<(u32, u32)>>,
}

impl Launchers {
    /// From the kernel-launch calls, else from the chosen NVTX ranges; each counted in the
    /// phases covering its start.
    pub(crate) fn build(
        phases: &Phases,
        index: &SegPhases,
        slots: usize,
        api: &[ApiCall],
        ranges: &[NvtxRange],
    ) -> Launchers {
        let launches: Vec<(i64, u32, u32)> = api
            .iter()
            .filter(|c| c.name.contains("Launch"))
            .map(|c| (c.start_ns, c.pid, c.tid))
            .collect();
        let (from, rows) = if !launches.is_empty() {
            (LaunchingFrom::ApiCalls, launches)
        } else if !ranges.is_empty() {
            let rows = ranges.iter().map(|r| (r.start_ns, r.pid, r.tid)).collect();
            (LaunchingFrom::NvtxRanges, rows)
        } else {
            (LaunchingFrom::Unknown, Vec::new())
        };
        let mut counts: Vec<BTreeMap<(u32, u32), u64>> = vec![BTreeMap::new(); slots];
        for (t, pid, tid) in rows {
            for slot in slots_of(index, phases.segment_of(t), slots) {
                *counts[slot].entry((pid, tid)).or_default() += 1;
            }
        }
        let by_slot = counts
            .into_iter()
            .map(|c| {
                // Most launches; among equals the lowest thread id, for a stable answer.
                c.into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                    .map(|(k, _)| k)
            })
            .collect();
        Launchers { from, by_slot }
    }

    /// Where neither launch calls nor NVTX ranges named the threads: per slot, the thread with
    /// the most running samples there, among the threads of the process that launched most of
    /// the slot's kernels (`kernel_pids`, per slot) where kernels were captured and it has
    /// running samples, else among all.
    pub(crate) fn or_running(
        &mut self,
        ix: &HostIndex,
        phases: &Phases,
        index: &SegPhases,
        kernel_pids: &[BTreeMap<u32, u64>],
    ) {
        if self.from != LaunchingFrom::Unknown {
            return;
        }
        let slots = self.by_slot.len();
        let mut running: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); slots];
        for s in ix.samples.iter().filter(|s| !s.idle) {
            for slot in slots_of(index, phases.segment_of(s.t_ns), slots) {
                *running[slot].entry(s.thread).or_default() += 1;
            }
        }
        let key = |t: u32| ix.threads.get(t as usize).map(|t| (t.pid, t.tid));
        // Most counts; among equals the lowest id, for a stable answer.
        let most = |m: &mut dyn Iterator<Item = ((u32, u32), u64)>| {
            m.max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|(k, _)| k)
        };
        for (slot, by_thread) in running.iter().enumerate() {
            let pid = kernel_pids
                .get(slot)
                .and_then(|m| most(&mut m.iter().map(|(p, n)| ((*p, 0), *n))))
                .map(|(p, _)| p);
            let of = |pid: Option<u32>| {
                most(&mut by_thread.iter().filter_map(|(t, n)| {
                    let k = key(*t)?;
                    pid.is_none_or(|p| k.0 == p).then_some((k, *n))
                }))
            };
            self.by_slot[slot] = of(pid).or_else(|| of(None));
        }
        if self.by_slot.iter().any(Option::is_some) {
            self.from = if kernel_pids.iter().any(|m| !m.is_empty()) {
                LaunchingFrom::KernelProcess
            } else {
                LaunchingFrom::RunningSamples
            };
        }
    }

    fn of_slot(&self, slot: usize) -> Option<(u32, u32)> {
        self.by_slot.get(slot).copied().flatten()
    }

    /// The launching thread of a place (see the module docs); `whole` is the whole run's slot.
    fn of_place(&self, place: &Place, whole: usize) -> Option<(u32, u32)> {
        match place {
            Place::WholeRun => self.of_slot(whole),
            Place::In(p) => self.of_slot(*p),
            Place::Between(a, b) => b
                .and_then(|b| self.of_slot(b))
                .or_else(|| a.and_then(|a| self.of_slot(a))),
        }
    }
}

/// Frame and function indices are hashed once per sample and frame: FxHash, not SipHash (the
/// keys are this index's own numbers).
type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<crate::kernels::FxHasher>>;

/// Counts of one frame in one view.
#[derive(Clone, Copy, Debug, Default)]
struct FrameAcc {
    samples: u64,
    idle: u64,
}

/// Samples of one view of one class.
#[derive(Debug, Default)]
struct ViewAcc {
    samples: u64,
    idle: u64,
    gil_held: u64,
    gil_known: u64,
    no_frames: u64,
    threads: BTreeSet<u32>,
    self_frames: FxMap<u32, FrameAcc>,
    inclusive: FxMap<u32, FrameAcc>,
    /// Functions anywhere on the stack, once per sample.
    inclusive_fns: FxMap<u32, FrameAcc>,
    causes: CauseAcc,
}

impl ViewAcc {
    fn add(&mut self, ix: &HostIndex, s: &Sample) {
        self.samples += 1;
        self.idle += u64::from(s.idle);
        match s.gil {
            Gil::Held => {
                self.gil_held += 1;
                self.gil_known += 1;
            }
            Gil::Released => self.gil_known += 1,
            Gil::Unknown => {}
        }
        self.threads.insert(s.thread);
        let (cause, name) = ix.cause_of(s);
        self.causes.add(cause, name);
        let stack = s.stack.and_then(|i| ix.stacks.get(i as usize));
        let Some(innermost) = stack.and_then(|st| st.innermost) else {
            self.no_frames += 1;
            return;
        };
        let bump = |m: &mut FxMap<u32, FrameAcc>, f: u32| {
            let e = m.entry(f).or_default();
            e.samples += 1;
            e.idle += u64::from(s.idle);
        };
        bump(&mut self.self_frames, innermost);
        for f in stack.map_or(&[][..], |st| st.distinct.as_slice()) {
            bump(&mut self.inclusive, *f);
        }
        for f in stack.map_or(&[][..], |st| st.distinct_fns.as_slice()) {
            bump(&mut self.inclusive_fns, *f);
        }
    }

    /// The view over the time `covered`, of thread `launching` or (`None`) of every thread
    /// for the part of the time it was alive.
    fn finish(
        self,
        ix: &HostIndex,
        covered: &KernelCoverage,
        launching: Option<(u32, HostThread)>,
    ) -> HostView {
        let interval = ix.interval_ns.max(1) as f64;
        // A thread is expected to be sampled only while it was alive: one that started late or
        // a short-lived process does not dilute the others' shares.
        let (alive_ns, alive_threads) = match &launching {
            Some((t, _)) => {
                let a = ix.alive_in(*t, covered);
                (a as f64, u64::from(a > 0))
            }
            None => (0..ix.threads.len())
                .filter_map(|t| u32::try_from(t).ok())
                .map(|t| ix.alive_in(t, covered))
                .filter(|a| *a > 0)
                .fold((0.0, 0u64), |(sum, n), a| (sum + a as f64, n + 1)),
        };
        let threads = alive_threads.max(self.threads.len() as u64);
        let expected = alive_ns / interval;
        let thread = launching.map(|(_, t)| t);
        // More samples than expected (rounds a little faster than the rate, gaps shorter
        // than an interval): shares are then of the samples, so that none reads over 100 %.
        let over = expected.max(self.samples as f64);
        let of = |n: u64| if over > 0.0 { n as f64 / over } else { 0.0 };
        let frames = |m: FxMap<u32, FrameAcc>| {
            let mut v: Vec<(u32, FrameShare)> = m
                .into_iter()
                .filter_map(|(f, a)| {
                    let k = ix.frames.get(f as usize)?;
                    Some((
                        f,
                        FrameShare {
                            function: k.function.clone(),
                            file: k.file.clone(),
                            line: k.line,
                            module: k.module.clone(),
                            kind: k.kind,
                            samples: a.samples,
                            idle_samples: a.idle,
                            share: of(a.samples),
                        },
                    ))
                })
                .collect();
            v.sort_by(|(_, a), (_, b)| {
                b.samples
                    .cmp(&a.samples)
                    .then_with(|| a.function.cmp(&b.function))
                    .then_with(|| a.file.cmp(&b.file))
                    .then(a.line.cmp(&b.line))
            });
            v
        };
        let self_lines = frames(self.self_frames);
        let inclusive_lines = frames(self.inclusive);
        // Self: a function's samples are its lines' (each sample has one innermost frame).
        let mut self_fns: FxMap<u32, FrameAcc> = FxMap::default();
        for (i, f) in &self_lines {
            if let Some(func) = ix.frame_fn.get(*i as usize) {
                let e = self_fns.entry(*func).or_default();
                e.samples += f.samples;
                e.idle += f.idle_samples;
            }
        }
        let self_functions = roll_up(ix, self_fns, &self_lines, &of);
        let inclusive_functions = roll_up(ix, self.inclusive_fns, &inclusive_lines, &of);
        let all_self_frames: Vec<FrameShare> = self_lines.into_iter().map(|(_, f)| f).collect();
        let inclusive_frames: Vec<FrameShare> = inclusive_lines
            .into_iter()
            .take(HOST_FRAMES_KEPT)
            .map(|(_, f)| f)
            .collect();
        HostView {
            thread,
            threads,
            samples: self.samples,
            expected_samples: expected,
            sampled: of(self.samples),
            idle: of(self.idle),
            gil_held: (self.gil_known > 0).then(|| of(self.gil_held)),
            no_frames: self.no_frames,
            self_frames: all_self_frames
                .iter()
                .take(HOST_FRAMES_KEPT)
                .cloned()
                .collect(),
            all_self_frames,
            inclusive_frames,
            self_functions,
            inclusive_functions,
            causes: self.causes.finish(over, &|k| ix.cause_name(k)),
        }
    }
}

/// Functions with their counts in `m`, their lines (frame index and share, largest first)
/// beneath, largest first, the first [`HOST_FRAMES_KEPT`]; `of` gives a count's share.
fn roll_up(
    ix: &HostIndex,
    m: FxMap<u32, FrameAcc>,
    lines: &[(u32, FrameShare)],
    of: &dyn Fn(u64) -> f64,
) -> Vec<FunctionShare> {
    let key = |i: u32| ix.functions.get(i as usize);
    let mut kept: Vec<(u32, FrameAcc)> = m.into_iter().filter(|(i, _)| key(*i).is_some()).collect();
    kept.sort_by(|(a, x), (b, y)| {
        let (ka, kb) = (key(*a), key(*b));
        y.samples
            .cmp(&x.samples)
            .then_with(|| ka.map(|k| &k.function).cmp(&kb.map(|k| &k.function)))
            .then_with(|| ka.map(|k| &k.file).cmp(&kb.map(|k| &k.file)))
            .then(a.cmp(b))
    });
    kept.truncate(HOST_FRAMES_KEPT);
    // Only the kept functions' lines are copied; lines come largest first and keep that order.
    let mut by_fn: HashMap<u32, Vec<FrameShare>> =
        kept.iter().map(|(i, _)| (*i, Vec::new())).collect();
    for (f, share) in lines {
        if let Some(v) = ix
            .frame_fn
            .get(*f as usize)
            .and_then(|func| by_fn.get_mut(func))
            && v.len() < HOST_FRAMES_KEPT
        {
            v.push(share.clone());
        }
    }
    kept.into_iter()
        .filter_map(|(i, a)| {
            let k = key(i)?;
            Some(FunctionShare {
                function: k.function.clone(),
                file: k.file.clone(),
                module: k.module.clone(),
                kind: k.kind,
                samples: a.samples,
                idle_samples: a.idle,
                share: of(a.samples),
                lines: by_fn.remove(&i).unwrap_or_default(),
            })
        })
        .collect()
}

/// One class as it is folded: its time, its launching thread's samples and all samples.
#[derive(Debug, Default)]
struct ClassAcc {
    time_ns: i64,
    /// The intervals the class's gaps cover, overlaps once (a gap on 8 GPUs counts once),
    /// disjoint, start to end: the samples are counted over them, and the expected samples
    /// come from them.
    covered: BTreeMap<i64, i64>,
    gaps: u64,
    /// Gap time without a kernel resident; `None` where kernels were not captured.
    no_kernel_ns: Option<i64>,
    launching: Option<u32>,
    launching_acc: ViewAcc,
    all: ViewAcc,
}

impl ClassAcc {
    fn add_samples(&mut self, ix: &HostIndex, samples: &[Sample]) {
        for s in samples {
            self.all.add(ix, s);
            if self.launching == Some(s.thread) {
                self.launching_acc.add(ix, s);
            }
        }
    }

    /// Adds a gap's part or piece `p`; `new_gap`: it starts a gap of the class.
    fn add_gap(&mut self, ix: &HostIndex, p: &GapPart, new_gap: bool) {
        // Gap times come from untrusted timestamps: saturate rather than overflow.
        self.time_ns = self.time_ns.saturating_add(p.duration_ns());
        self.gaps += u64::from(new_gap);
        if let Some(n) = p.no_kernel_ns() {
            let acc = self.no_kernel_ns.get_or_insert(0);
            *acc = acc.saturating_add(n);
        }
        for (a, b) in self.cover(p.start_ns, p.end_ns) {
            self.add_samples(ix, ix.between(a, b));
        }
    }

    /// Marks `[start, end)` covered; returns its parts that were not, in order.
    fn cover(&mut self, start: i64, end: i64) -> Vec<(i64, i64)> {
        if start >= end {
            return Vec::new();
        }
        // The covered intervals that overlap or touch [start, end), last first.
        let touching: Vec<(i64, i64)> = self
            .covered
            .range(..=end)
            .rev()
            .take_while(|(_, e)| **e >= start)
            .map(|(s, e)| (*s, *e))
            .collect();
        let mut new = Vec::new();
        let mut from = start;
        for (s, e) in touching.iter().rev() {
            if *s > from {
                new.push((from, (*s).min(end)));
            }
            from = from.max(*e);
            self.covered.remove(s);
        }
        if from < end {
            new.push((from, end));
        }
        let lo = touching.last().map_or(start, |(s, _)| (*s).min(start));
        let hi = touching.first().map_or(end, |(_, e)| (*e).max(end));
        self.covered.insert(lo, hi);
        new
    }

    fn finish(self, ix: &HostIndex, scope: HostScope, name: String) -> HostClass {
        let launching = self
            .launching
            .and_then(|t| Some((t, ix.threads.get(t as usize)?.clone())));
        let covered =
            KernelCoverage::from_intervals(self.covered.iter().map(|(a, b)| (COVER_LANE, *a, *b)));
        // A phase's whole time is no gap class; a gap class is host-bound as a phase's verdict
        // would call it.
        let host_bound = scope != HostScope::Phase
            && self.time_ns > 0
            && self
                .no_kernel_ns
                .is_none_or(|n| n as f64 >= HOST_BOUND_FROM * self.time_ns as f64);
        HostClass {
            scope,
            name,
            time_ns: Nanos(self.time_ns),
            gaps: self.gaps,
            host_bound,
            launching: launching.map(|t| self.launching_acc.finish(ix, &covered, Some(t))),
            all: self.all.finish(ix, &covered, None),
        }
    }
}

/// The gaps' host samples folded in gap by gap, per place and per phase slot.
pub struct HostFold<'a> {
    ix: &'a HostIndex,
    launchers: &'a Launchers,
    /// The whole run's slot (the last).
    whole_slot: usize,
    places: BTreeMap<Place, (String, ClassAcc)>,
    slots: Vec<ClassAcc>,
}

impl<'a> HostFold<'a> {
    pub fn new(ix: &'a HostIndex, launchers: &'a Launchers, slots: usize) -> HostFold<'a> {
        let slots: Vec<ClassAcc> = (0..slots)
            .map(|s| ClassAcc {
                launching: launchers.of_slot(s).and_then(|k| ix.thread_of(k)),
                ..ClassAcc::default()
            })
            .collect();
        HostFold {
            ix,
            launchers,
            whole_slot: slots.len().saturating_sub(1),
            places: BTreeMap::new(),
            slots,
        }
    }

    /// Counts the samples of gap piece `p` in its place (labelled `label`).
    pub fn add_place(&mut self, p: &GapPart, label: &str) {
        let (ix, launchers, whole) = (self.ix, self.launchers, self.whole_slot);
        let (_, place) = self.places.entry(p.place.clone()).or_insert_with(|| {
            let launching = launchers
                .of_place(&p.place, whole)
                .and_then(|k| ix.thread_of(k));
            (
                label.to_string(),
                ClassAcc {
                    launching,
                    ..ClassAcc::default()
                },
            )
        });
        place.add_gap(ix, p, true);
    }

    /// Counts the samples of gap part `p` in `slot`; `new_gap`: it starts a gap of the slot.
    pub fn add_slot(&mut self, slot: usize, p: &GapPart, new_gap: bool) {
        if let Some(c) = self.slots.get_mut(slot) {
            c.add_gap(self.ix, p, new_gap);
        }
    }

    /// The host during `[start, end)` of a gap in `place`; `None` when no sample falls in it.
    pub fn gap_host(&self, place: &Place, start_ns: i64, end_ns: i64) -> Option<GapHost> {
        let launching = self
            .launchers
            .of_place(place, self.whole_slot)
            .and_then(|k| self.ix.thread_of(k));
        let mut acc = ClassAcc {
            launching,
            ..ClassAcc::default()
        };
        for (a, b) in acc.cover(start_ns, end_ns) {
            acc.add_samples(self.ix, self.ix.between(a, b));
        }
        if acc.all.samples == 0 {
            return None;
        }
        let c = acc.finish(self.ix, HostScope::Place, String::new());
        let v = c.launching.filter(|v| v.samples > 0).unwrap_or(c.all);
        Some(GapHost {
            thread: v.thread,
            samples: v.samples,
            idle: v.idle,
            frames: v.self_frames.into_iter().take(GAP_HOST_FRAMES).collect(),
            functions: v.self_functions.into_iter().take(GAP_HOST_FRAMES).collect(),
        })
    }

    /// The classes with a host-bound share; `phase_paths` names the slots (phases in tree
    /// order, the whole run last).
    pub fn finish(self, phase_paths: &[String]) -> Vec<HostClass> {
        let host_bound = |c: &ClassAcc| c.time_ns > 0 && c.no_kernel_ns.is_none_or(|n| n > 0);
        let ix = self.ix;
        let mut places: Vec<HostClass> = self
            .places
            .into_values()
            .filter(|(_, c)| host_bound(c))
            .map(|(label, c)| c.finish(ix, HostScope::Place, label))
            .collect();
        places.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.name.cmp(&b.name)));
        let phases = self
            .slots
            .into_iter()
            .zip(phase_paths)
            .filter(|(c, _)| host_bound(c))
            .map(|(c, path)| c.finish(ix, HostScope::PhaseGaps, path.clone()));
        places.extend(phases);
        places
    }
}

/// Every phase's whole time (`times_ns` per slot, phases in tree order and the whole run last):
/// each sample counted in the phases covering its segment.
pub(crate) fn phase_classes(
    ix: &HostIndex,
    launchers: &Launchers,
    phases: &Phases,
    index: &SegPhases,
    times_ns: &[i64],
    run: (i64, i64),
    phase_paths: &[String],
) -> Vec<HostClass> {
    let slots = times_ns.len();
    let mut accs: Vec<ClassAcc> = (0..slots)
        .map(|s| ClassAcc {
            time_ns: times_ns[s],
            launching: launchers.of_slot(s).and_then(|k| ix.thread_of(k)),
            ..ClassAcc::default()
        })
        .collect();
    // A phase covers the union of its ranges (ranges of several threads overlapping count
    // once), the whole run its span; the samples are counted below, not here.
    for (p, acc) in phases.phases.iter().zip(accs.iter_mut()) {
        for seg in &p.segments {
            let (a, b) = phases.segment_bounds(*seg as usize, run.0, run.1);
            acc.cover(a, b);
        }
    }
    if let Some(whole) = accs.last_mut() {
        whole.cover(run.0, run.1);
    }
    for s in &ix.samples {
        for slot in slots_of(index, phases.segment_of(s.t_ns), slots) {
            accs[slot].add_samples(ix, std::slice::from_ref(s));
        }
    }
    // The whole run first, as the report's phase tables list it.
    let whole = accs.pop();
    let mut out: Vec<HostClass> = Vec::with_capacity(slots);
    if let (Some(w), Some(name)) = (whole, phase_paths.last()) {
        out.push(w.finish(ix, HostScope::Phase, name.clone()));
    }
    out.extend(
        accs.into_iter()
            .zip(phase_paths)
            .map(|(c, path)| c.finish(ix, HostScope::Phase, path.clone())),
    );
    out
}

/// The host samples of a trace and the launching threads of its phases.
pub struct HostSide {
    pub ix: HostIndex,
    pub launchers: Launchers,
}

impl HostSide {
    /// Readies the host side: fills in launching threads the calls and ranges did not name
    /// ([`Launchers::or_running`]), and takes the captured CUDA calls for the samples' causes.
    pub(crate) fn prepare(
        &mut self,
        phases: &Phases,
        index: &SegPhases,
        kernel_pids: &[BTreeMap<u32, u64>],
        api: &[ApiCall],
    ) {
        self.or_running(phases, index, kernel_pids);
        self.ix.set_api(api);
    }

    /// See [`Launchers::or_running`].
    pub(crate) fn or_running(
        &mut self,
        phases: &Phases,
        index: &SegPhases,
        kernel_pids: &[BTreeMap<u32, u64>],
    ) {
        self.launchers
            .or_running(&self.ix, phases, index, kernel_pids);
    }

    /// The fold of the gaps' samples, for `slots` slots (phases, then the whole run).
    pub fn fold(&self, slots: usize) -> HostFold<'_> {
        HostFold::new(&self.ix, &self.launchers, slots)
    }

    /// The host side of a report: the gap classes the fold gave, and every phase's whole time
    /// (`times_ns`: the phases' total times in tree order, then the whole run's).
    pub(crate) fn report(
        &self,
        phases: &Phases,
        times_ns: &[i64],
        gap_classes: Option<Vec<HostClass>>,
        run: (i64, i64),
    ) -> HostReport {
        let (ix, launchers) = (&self.ix, &self.launchers);
        let index = SegPhases::build(phases);
        let paths = slot_paths(phases);
        let processes: BTreeSet<u32> = ix.threads.iter().map(|t| t.pid).collect();
        HostReport {
            interval_ns: Nanos(ix.interval_ns),
            interval_source: ix.interval_source,
            samples: ix.samples.len() as u64,
            threads: ix.threads.len() as u64,
            processes: processes.len() as u64,
            launching_from: launchers.from,
            gap_classes: gap_classes.unwrap_or_default(),
            phases: phase_classes(ix, launchers, phases, &index, times_ns, run, &paths),
        }
    }
}

/// A source file as the report shows it: a path under `site-packages/` or `dist-packages/`
/// from the package on (`torch/cuda/__init__.py`), else its last component (`tree.py`).
pub fn short_file(file: &str) -> &str {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return &file[i + marker.len()..];
        }
    }
    file.rsplit(['/', '\\']).next().unwrap_or(file)
}

/// `function (file:line)`, `function (file)` or `function`, the file shortened
/// ([`short_file`]); not yet escaped.
pub fn frame_label(function: &str, file: &str, line: Option<u32>) -> String {
    let function = if function.is_empty() {
        "(unnamed)"
    } else {
        function
    };
    let file = short_file(file);
    match (file.is_empty(), line) {
        (true, _) => function.to_string(),
        (false, Some(l)) => format!("{function} ({file}:{l})"),
        (false, None) => format!("{function} ({file})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stack_id: u64, depth: u32, function: &str, line: u32) -> StackFrame {
        StackFrame {
            stack_id,
            depth,
            function: function.into(),
            file: format!("/app/{function}.py"),
            line: Some(line),
            module: String::new(),
            kind: FrameKind::Python,
        }
    }

    fn sample(t_ns: i64, tid: u32, stack_id: u64, idle: bool) -> HostSample {
        HostSample {
            t_ns,
            pid: 7,
            tid,
            thread_name: format!("t{tid}"),
            state: if idle {
                HostState::Idle
            } else {
                HostState::Running
            },
            gil: if idle { Gil::Released } else { Gil::Held },
            stack_id,
        }
    }

    fn gap(start_ns: i64, end_ns: i64) -> GapPart {
        GapPart {
            start_ns,
            end_ns,
            place: Place::WholeRun,
            segment: 0,
            kernel_resident_ns: Some(0),
            host: None,
        }
    }

    /// Stack 1: `outer > inner`; stack 2: `outer > outer > waiter` (recursion); every 10 ns.
    fn stacks() -> Vec<StackFrame> {
        vec![
            frame(1, 0, "inner", 2),
            frame(1, 1, "outer", 1),
            frame(2, 0, "waiter", 3),
            frame(2, 1, "outer", 1),
            frame(2, 2, "outer", 1),
        ]
    }

    /// The classes of `gaps` over a run without phases, API launches by `launcher`.
    fn classes(samples: &[HostSample], gaps: &[GapPart], launcher: u32) -> Vec<HostClass> {
        let ix = HostIndex::build(&stacks(), samples, Some(10)).expect("samples");
        let phases = Phases::build(&[]);
        let index = SegPhases::build(&phases);
        let api = [ApiCall {
            name: "cudaLaunchKernel".into(),
            pid: 7,
            tid: launcher,
            ..Default::default()
        }];
        let l = Launchers::build(&phases, &index, 1, &api, &[]);
        assert_eq!(l.from, LaunchingFrom::ApiCalls);
        let mut fold = HostFold::new(&ix, &l, 1);
        for g in gaps {
            fold.add_place(g, "(whole run)");
            fold.add_slot(0, g, true);
        }
        fold.finish(&["(whole run)".to_string()])
    }

    fn share_of(frames: &[FrameShare], function: &str) -> Option<f64> {
        frames
            .iter()
            .find(|f| f.function == function)
            .map(|f| f.share)
    }

    /// Segments in any order and of any size give the classes the whole table gives.
    #[test]
    fn building_by_segment_gives_what_the_whole_table_gives() {
        let mut samples: Vec<HostSample> = (0..40)
            .map(|i| sample(i * 10, 1 + (i % 3) as u32, 1 + (i % 2) as u64, i % 5 == 0))
            .collect();
        samples.push(sample(15, 4, 99, false)); // a stack the table lacks
        let gaps = [gap(0, 120), gap(200, 330)];
        let whole = HostIndex::build(&stacks(), &samples, Some(10)).expect("samples");
        let mut b = HostIndexBuilder::new(&stacks());
        for part in samples.chunks(7).rev() {
            b.add(part);
        }
        b.add(&[]);
        let parts = b.finish(Some(10)).expect("samples");
        let fold = |ix: &HostIndex| {
            let phases = Phases::build(&[]);
            let index = SegPhases::build(&phases);
            let l = Launchers::build(&phases, &index, 1, &[], &[]);
            let mut f = HostFold::new(ix, &l, 1);
            for g in &gaps {
                f.add_place(g, "(whole run)");
                f.add_slot(0, g, true);
            }
            f.finish(&["(whole run)".to_string()])
        };
        let mut threads_whole = whole.threads.clone();
        let mut threads_parts = parts.threads.clone();
        threads_whole.sort();
        threads_parts.sort();
        assert_eq!(threads_whole, threads_parts);
        // Thread indices differ with the order rows arrive in; the views name threads by
        // (pid, tid), so the classes must not.
        assert_eq!(fold(&whole), fold(&parts));
        assert!(HostIndexBuilder::new(&stacks()).finish(None).is_none());
    }

    /// The same gap on two GPUs (and one overlapping it on a third) counts each sample once,
    /// over the time the gaps cover; the class's time still sums every GPU's gap.
    #[test]
    fn a_gap_on_several_devices_counts_each_sample_once() {
        let samples: Vec<HostSample> = (0..30).map(|i| sample(i * 10, 1, 1, false)).collect();
        // The same time on several GPUs: the devices' parts are folded alike.
        let on = |_device: u32, start_ns: i64, end_ns: i64| gap(start_ns, end_ns);
        let one = classes(&samples, &[on(0, 50, 150)], 1);
        let two = classes(&samples, &[on(0, 50, 150), on(1, 50, 150)], 1);
        let (a, b) = (&one[0].all, &two[0].all);
        assert_eq!(b.samples, 10);
        assert_eq!(b.samples, a.samples);
        assert!((b.expected_samples - a.expected_samples).abs() < 1e-9);
        assert_eq!(b.self_frames, a.self_frames);
        assert_eq!(two[0].time_ns.get(), 200);
        assert_eq!(two[0].gaps, 2);
        // A third GPU's gap [100, 200) adds only [150, 200): five samples, five expected.
        let three = classes(
            &samples,
            &[on(0, 50, 150), on(1, 50, 150), on(2, 100, 200)],
            1,
        );
        assert_eq!(three[0].all.samples, 15);
        assert!((three[0].all.expected_samples - 15.0).abs() < 1e-9);
        assert_eq!(three[0].time_ns.get(), 300);
    }

    #[test]
    fn covering_returns_only_the_new_parts() {
        let mut c = ClassAcc::default();
        assert_eq!(c.cover(10, 20), vec![(10, 20)]);
        assert_eq!(c.cover(30, 40), vec![(30, 40)]);
        assert_eq!(c.cover(15, 35), vec![(20, 30)]);
        assert_eq!(c.cover(0, 50), vec![(0, 10), (40, 50)]);
        assert_eq!(c.cover(5, 45), Vec::<(i64, i64)>::new());
        assert_eq!(c.cover(50, 60), vec![(50, 60)]);
        assert_eq!(c.cover(7, 7), Vec::<(i64, i64)>::new());
        assert_eq!(c.covered.len(), 1);
    }

    /// Gap times come from a file's timestamps: two gaps of i64::MAX saturate, not overflow.
    #[test]
    fn huge_gap_times_saturate() {
        let samples: Vec<HostSample> = (0..20).map(|i| sample(i * 10, 1, 1, false)).collect();
        let cs = classes(&samples, &[gap(0, i64::MAX), gap(1, i64::MAX)], 1);
        assert_eq!(cs[0].time_ns.get(), i64::MAX);
        assert_eq!(cs[0].gaps, 2);
    }

    #[test]
    fn samples_count_inside_gaps_only_as_shares_of_expected_samples() {
        // Thread 1: in `inner` from 0 to 100 ns, in `waiter` (idle) from 100 to 200.
        let mut samples: Vec<HostSample> = (0..20)
            .map(|i| sample(i * 10, 1, if i < 10 { 1 } else { 2 }, i >= 10))
            .collect();
        // Thread 2, always in `waiter`, sampled only every other interval (missed samples).
        samples.extend((0..10).map(|i| sample(i * 20, 2, 2, true)));
        // The gap [50, 150): five samples of each stack for thread 1; the end is exclusive.
        let cs = classes(&samples, &[gap(50, 150)], 1);
        let place = &cs[0];
        assert_eq!(place.scope, HostScope::Place);
        assert_eq!(place.time_ns.get(), 100);
        let l = place.launching.as_ref().expect("launching thread");
        assert_eq!(l.thread.as_ref().map(|t| t.tid), Some(1));
        assert_eq!(l.samples, 10);
        assert!((l.expected_samples - 10.0).abs() < 1e-9);
        assert_eq!(share_of(&l.self_frames, "inner"), Some(0.5));
        assert_eq!(share_of(&l.self_frames, "waiter"), Some(0.5));
        // `outer` is on both stacks, twice on one: inclusive counts it once per sample.
        assert_eq!(share_of(&l.self_frames, "outer"), None);
        assert_eq!(share_of(&l.inclusive_frames, "outer"), Some(1.0));
        assert_eq!(share_of(&l.inclusive_frames, "inner"), Some(0.5));
        assert_eq!(l.idle, 0.5);
        assert_eq!(l.gil_held, Some(0.5));
        assert_eq!(l.sampled, 1.0);
        // All threads: 2 threads expect 20 samples; thread 2 gave 5 (60, 80, ..., 140).
        let a = &place.all;
        assert_eq!((a.threads, a.samples), (2, 15));
        assert!((a.sampled - 0.75).abs() < 1e-9);
        assert_eq!(share_of(&a.self_frames, "waiter"), Some(10.0 / 20.0));
        // The phase slot (the whole run) holds the same gap.
        assert_eq!(cs[1].scope, HostScope::PhaseGaps);
        assert_eq!(cs[1].all.samples, 15);
    }

    #[test]
    fn samples_outside_every_gap_count_nowhere_and_gaps_add_up() {
        let samples: Vec<HostSample> = (0..100).map(|i| sample(i * 10, 1, 1, false)).collect();
        let cs = classes(&samples, &[gap(0, 100), gap(500, 600), gap(2000, 3000)], 1);
        let l = cs[0].launching.as_ref().expect("launching");
        assert_eq!(cs[0].gaps, 3);
        assert_eq!(cs[0].time_ns.get(), 1200);
        // 20 samples in the first two gaps, none in the third: the thread's last sample is at
        // 990 ns, so it is not expected there, and its shares are over the 20 it could give.
        assert_eq!(l.samples, 20);
        assert!((l.expected_samples - 20.0).abs() < 1e-9);
        assert_eq!(l.sampled, 1.0);
        assert_eq!(share_of(&l.self_frames, "inner"), Some(1.0));
    }

    /// A Python stack with the native frame its thread was in appended under its innermost
    /// Python frame (what the sampler writes): that frame names the cause without API calls.
    #[test]
    fn native_leaves_under_python_frames_name_the_causes() {
        let native = |stack_id: u64, function: &str, module: &str| StackFrame {
            stack_id,
            depth: 0,
            function: function.into(),
            file: if module == "kernel" {
                String::new()
            } else {
                format!("/usr/lib/{module}")
            },
            line: None,
            module: module.into(),
            kind: FrameKind::Native,
        };
        let stacks = vec![
            native(1, "cudaStreamSynchronize", "libcudart.so.13"),
            frame(1, 1, "sdpa_attention_forward", 158),
            native(2, "futex", "kernel"),
            frame(2, 1, "item", 12),
            native(3, "cuLaunchKernel", "libcuda.so.1"),
            frame(3, 1, "launch", 3),
            native(4, "cudaMemcpyAsync", "libcudart.so.13"),
            frame(4, 1, "to", 4),
            native(5, "__lll_lock_wait", "libc.so.6"),
            frame(5, 1, "take", 5),
        ];
        // One thread, ten samples in each stack, the futex ones idle.
        let samples: Vec<HostSample> = (0..50)
            .map(|i| sample(i * 10, 1, 1 + (i / 10) as u64, i / 10 == 1))
            .collect();
        let ix = HostIndex::build(&stacks, &samples, Some(10)).expect("samples");
        let phases = Phases::build(&[]);
        let index = SegPhases::build(&phases);
        let l = Launchers::build(&phases, &index, 1, &[], &[]);
        let mut fold = HostFold::new(&ix, &l, 1);
        fold.add_place(&gap(0, 500), "(whole run)");
        let cs = fold.finish(&["(whole run)".to_string()]);
        let c = &cs[0].all.causes;
        assert!(!c.from_api_calls);
        let of = |cause: HostCause| {
            let x = c.causes.iter().find(|x| x.cause == cause).expect("cause");
            let names: Vec<&str> = x.top.iter().map(|n| n.name.as_str()).collect();
            (x.share, names.join(", "))
        };
        assert_eq!(
            of(HostCause::WaitingForGpu),
            (0.2, "cudaStreamSynchronize".into())
        );
        assert_eq!(of(HostCause::Launching), (0.2, "cuLaunchKernel".into()));
        assert_eq!(of(HostCause::Copying), (0.2, "cudaMemcpyAsync".into()));
        let (share, names) = of(HostCause::WaitingOnThread);
        assert!((share - 0.4).abs() < 1e-9, "{share}");
        assert!(
            names.contains("futex in item") && names.contains("__lll_lock_wait in take"),
            "{names}"
        );
        assert_eq!(of(HostCause::Computing).0, 0.0);
    }

    /// The verdict line's causes: a captured copy call names the samples inside it, an idle
    /// sample whose frames name no wait is waiting, a running one computing; with `unsampled`
    /// they add up to 1.
    #[test]
    fn samples_are_split_by_cause_api_calls_first() {
        // Thread 1 running in `inner` for [0, 100), idle in `waiter` for [100, 200); a copy call
        // of its own over [50, 80).
        let samples: Vec<HostSample> = (0..20)
            .map(|i| sample(i * 10, 1, if i < 10 { 1 } else { 2 }, i >= 10))
            .collect();
        let mut ix = HostIndex::build(&stacks(), &samples, Some(10)).expect("samples");
        ix.set_api(&[ApiCall {
            name: "cudaMemcpyAsync".into(),
            start_ns: 50,
            end_ns: 80,
            pid: 7,
            tid: 1,
            ..Default::default()
        }]);
        let phases = Phases::build(&[]);
        let index = SegPhases::build(&phases);
        let l = Launchers::build(&phases, &index, 1, &[], &[]);
        let mut fold = HostFold::new(&ix, &l, 1);
        // 250 ns of gap: 200 ns sampled, the thread's last sample covers up to 200.
        let g = gap(0, 250);
        fold.add_place(&g, "(whole run)");
        let cs = fold.finish(&["(whole run)".to_string()]);
        let c = &cs[0].all.causes;
        let share = |cause: HostCause| {
            c.causes
                .iter()
                .find(|x| x.cause == cause)
                .map_or(0.0, |x| x.share)
        };
        assert!((share(HostCause::Copying) - 0.15).abs() < 1e-9);
        assert!((share(HostCause::Computing) - 0.35).abs() < 1e-9);
        assert!((share(HostCause::WaitingOnThread) - 0.5).abs() < 1e-9);
        assert!(c.from_api_calls);
        let copy = c.causes.iter().find(|x| x.cause == HostCause::Copying);
        assert_eq!(
            copy.map(|x| x.top[0].name.as_str()),
            Some("cudaMemcpyAsync")
        );
        let sum: f64 = c.causes.iter().map(|x| x.share).sum::<f64>() + c.unsampled;
        assert!((sum - 1.0).abs() < 1e-9);
        assert!(cs[0].host_bound);
    }

    /// A thread counts only while it was alive: one that lived for a tenth of the gap time
    /// (a compiler process, say) adds a tenth of a thread's samples to the expected, not one.
    #[test]
    fn a_short_lived_thread_does_not_dilute_the_shares() {
        // Thread 1 sampled all through [0, 1000); thread 2 only in [0, 100).
        let mut samples: Vec<HostSample> = (0..100).map(|i| sample(i * 10, 1, 1, false)).collect();
        samples.extend((0..10).map(|i| sample(i * 10, 2, 2, true)));
        let cs = classes(&samples, &[gap(0, 1000)], 1);
        let a = &cs[0].all;
        assert_eq!((a.threads, a.samples), (2, 110));
        assert!(
            (a.expected_samples - 110.0).abs() < 1e-9,
            "{}",
            a.expected_samples
        );
        assert!((a.sampled - 1.0).abs() < 1e-9);
        assert!((share_of(&a.self_frames, "inner").expect("inner") - 100.0 / 110.0).abs() < 1e-9);
        // A gap where only thread 1 lived expects its samples alone.
        let cs = classes(&samples, &[gap(500, 700)], 1);
        assert_eq!(cs[0].all.threads, 1);
        assert!((cs[0].all.expected_samples - 20.0).abs() < 1e-9);
    }

    #[test]
    fn the_launching_thread_is_the_one_with_the_most_launches() {
        let samples: Vec<HostSample> = (0..10)
            .flat_map(|i| [sample(i * 10, 1, 1, false), sample(i * 10, 2, 2, true)])
            .collect();
        let cs = classes(&samples, &[gap(0, 100)], 2);
        let l = cs[0].launching.as_ref().expect("launching");
        assert_eq!(l.thread.as_ref().map(|t| t.tid), Some(2));
        assert_eq!(share_of(&l.self_frames, "waiter"), Some(1.0));
        // A launching thread without samples gives no launching view.
        let cs = classes(&samples, &[gap(0, 100)], 99);
        assert!(cs[0].launching.is_none());
        assert_eq!(cs[0].all.threads, 2);
    }

    #[test]
    fn launches_beat_nvtx_ranges_and_ranges_stand_in_without_them() {
        let phases = Phases::build(&[]);
        let index = SegPhases::build(&phases);
        let range = NvtxRange {
            pid: 7,
            tid: 5,
            ..Default::default()
        };
        let call = |tid, name: &str| ApiCall {
            name: name.into(),
            pid: 7,
            tid,
            ..Default::default()
        };
        let api = [call(3, "cudaLaunchKernel"), call(4, "cudaMemcpyAsync")];
        let l = Launchers::build(&phases, &index, 1, &api, std::slice::from_ref(&range));
        assert_eq!(
            (l.from, l.of_slot(0)),
            (LaunchingFrom::ApiCalls, Some((7, 3)))
        );
        let only_copies = [call(4, "cudaMemcpyAsync")];
        let l = Launchers::build(&phases, &index, 1, &only_copies, &[range]);
        assert_eq!(
            (l.from, l.of_slot(0)),
            (LaunchingFrom::NvtxRanges, Some((7, 5)))
        );
        let l = Launchers::build(&phases, &index, 1, &[], &[]);
        assert_eq!((l.from, l.of_slot(0)), (LaunchingFrom::Unknown, None));
    }

    /// Without launch calls or ranges (a JAX program: kernels captured, no API calls), the
    /// launching thread is the busiest thread of the process that launched the kernels, else
    /// the busiest thread of all; idle samples do not count.
    #[test]
    fn without_calls_or_ranges_the_busiest_thread_of_the_kernels_process_launches() {
        let in_pid = |pid: u32, tid: u32, t_ns: i64, idle: bool| HostSample {
            pid,
            ..sample(t_ns, tid, 1, idle)
        };
        let mut samples: Vec<HostSample> = (0..5).map(|i| in_pid(7, 1, i * 10, false)).collect();
        samples.extend((0..3).map(|i| in_pid(8, 2, i * 10, false)));
        samples.extend((0..9).map(|i| in_pid(8, 3, i * 10, true)));
        let ix = HostIndex::build(&stacks(), &samples, Some(10)).expect("samples");
        let phases = Phases::build(&[]);
        let index = SegPhases::build(&phases);
        let with = |pids: &[(u32, u64)]| {
            let mut l = Launchers::build(&phases, &index, 1, &[], &[]);
            let m: BTreeMap<u32, u64> = pids.iter().copied().collect();
            l.or_running(&ix, &phases, &index, &[m]);
            (l.from, l.of_slot(0))
        };
        assert_eq!(
            with(&[(8, 10), (7, 2)]),
            (LaunchingFrom::KernelProcess, Some((8, 2)))
        );
        // The kernels' process has no sample: the busiest thread of all.
        assert_eq!(
            with(&[(9, 10)]),
            (LaunchingFrom::KernelProcess, Some((7, 1)))
        );
        assert_eq!(with(&[]), (LaunchingFrom::RunningSamples, Some((7, 1))));
        // Launch calls, where there are some, are never overridden.
        let api = [ApiCall {
            name: "cuLaunchKernel".into(),
            pid: 8,
            tid: 3,
            ..Default::default()
        }];
        let mut l = Launchers::build(&phases, &index, 1, &api, &[]);
        l.or_running(&ix, &phases, &index, &[]);
        assert_eq!(
            (l.from, l.of_slot(0)),
            (LaunchingFrom::ApiCalls, Some((8, 3)))
        );
    }

    #[test]
    fn a_place_between_phases_takes_the_launcher_of_the_phase_after() {
        let l = Launchers {
            from: LaunchingFrom::ApiCalls,
            by_slot: vec![Some((1, 1)), Some((1, 2)), Some((1, 9))],
        };
        assert_eq!(
            l.of_place(&Place::Between(Some(0), Some(1)), 2),
            Some((1, 2))
        );
        assert_eq!(l.of_place(&Place::Between(Some(0), None), 2), Some((1, 1)));
        assert_eq!(l.of_place(&Place::In(0), 2), Some((1, 1)));
        assert_eq!(l.of_place(&Place::WholeRun, 2), Some((1, 9)));
    }

    #[test]
    fn stacks_the_trace_lacks_count_as_samples_without_frames() {
        let samples = vec![sample(0, 1, 1, false), sample(10, 1, 77, false)];
        let cs = classes(&samples, &[gap(0, 20)], 1);
        let l = cs[0].launching.as_ref().expect("launching");
        assert_eq!((l.samples, l.no_frames), (2, 1));
        assert_eq!(share_of(&l.self_frames, "inner"), Some(0.5));
    }

    #[test]
    fn the_interval_is_the_asked_rate_else_the_observed_median() {
        assert_eq!(
            interval_from_words(Some("1000 Hz, python frames")),
            Some(1_000_000)
        );
        assert_eq!(interval_from_words(Some("250.5 Hz")), Some(3_992_016));
        assert_eq!(
            interval_from_words(Some("on: every 100us (10000 Hz), python frames only")),
            Some(100_000)
        );
        for bad in [
            "off: no permission",
            "",
            "Hz",
            "every 1ms",
            "0 Hz",
            "-5 Hz",
            "NaN Hz",
            "1e300 Hz",
        ] {
            assert_eq!(interval_from_words(Some(bad)), None, "{bad}");
        }
        let samples: Vec<HostSample> = [0, 10, 20, 35, 45, 1000]
            .iter()
            .map(|t| sample(*t, 1, 1, false))
            .collect();
        let ix = HostIndex::build(&stacks(), &samples, None).expect("samples");
        assert_eq!(
            (ix.interval_ns, ix.interval_source),
            (10, IntervalSource::Observed)
        );
        assert!(HostIndex::build(&stacks(), &[], None).is_none());
    }

    proptest::proptest! {
        /// Against a count sample by sample: a view holds exactly the samples inside its gaps
        /// (a gap's start in, its end out), once however many of its gaps overlap, every one in one self frame or without frames, and a
        /// frame's inclusive count is never below its self count.
        #[test]
        fn views_count_what_a_brute_force_count_finds(
            samples in proptest::collection::vec((0i64..400, 1u32..4, 0u64..4, proptest::bool::ANY), 0..60),
            gaps in proptest::collection::vec((0i64..400, 1i64..80), 1..6),
        ) {
            let host: Vec<HostSample> = samples
                .iter()
                .map(|(t, tid, stack, idle)| sample(*t, *tid, *stack, *idle))
                .collect();
            let gaps: Vec<GapPart> = gaps.iter().map(|(s, l)| gap(*s, s + l)).collect();
            if host.is_empty() {
                return Ok(());
            }
            let cs = classes(&host, &gaps, 1);
            let all = &cs[0].all;
            let inside = |t: i64| gaps.iter().filter(|g| t >= g.start_ns && t < g.end_ns).count();
            let brute = host.iter().filter(|s| inside(s.t_ns) > 0).count();
            proptest::prop_assert_eq!(all.samples, brute as u64);
            let selfs: u64 = all.self_frames.iter().map(|f| f.samples).sum();
            proptest::prop_assert_eq!(selfs + all.no_frames, all.samples);
            for f in &all.self_frames {
                let incl = all.inclusive_frames.iter().find(|i| i.function == f.function);
                proptest::prop_assert!(incl.is_some_and(|i| i.samples >= f.samples));
            }
            if let Some(l) = &cs[0].launching {
                let mine = host
                    .iter()
                    .filter(|s| s.tid == 1 && inside(s.t_ns) > 0)
                    .count();
                proptest::prop_assert_eq!(l.samples, mine as u64);
            }
        }
    }

    #[test]
    fn files_are_shortened_and_names_made_terminal_safe() {
        assert_eq!(short_file("/srv/app/tree.py"), "tree.py");
        assert_eq!(
            short_file("/usr/lib/python3/site-packages/torch/cuda/__init__.py"),
            "torch/cuda/__init__.py"
        );
        assert_eq!(short_file("libcudart.so.12"), "libcudart.so.12");
        assert_eq!(frame_label("f", "/a/b.py", Some(3)), "f (b.py:3)");
        assert_eq!(frame_label("f", "lib.so", None), "f (lib.so)");
        assert_eq!(frame_label("", "", None), "(unnamed)");
        let hostile = FrameShare {
            function: "evil\u{1b}]0;pwned\u{7}".into(),
            file: "/x/\u{1b}[2J.py".into(),
            line: Some(1),
            module: String::new(),
            kind: FrameKind::Python,
            samples: 1,
            idle_samples: 0,
            share: 1.0,
        };
        let text = crate::render::frame_text(&hostile);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        let long = FrameShare {
            function: "f".repeat(500),
            ..hostile
        };
        assert!(cufall_text::width(&crate::render::frame_text(&long)) <= cufall_text::NAME_WIDTH);
    }
}
