//! The program's host threads as sampled (`--host-stacks`): each thread's samples in time order
//! with their interned stacks, and what a frame draws of a thread's lane at any zoom
//! ([`HostThread::runs`]): one lookup per pixel column, neighbouring columns with the same
//! innermost function and state merged into one run, so a 10-minute recording at 1 kHz draws
//! as fast as a second of it.
//!
//! Function and file names come from another process: they are cleaned once, when read
//! ([`clean_text`]), so that every view draws them as plain text.

use crate::names::Names;
use cufall_trace::model::{FrameKind, Gil, HostSample, HostState, StackFrame};
use std::collections::{BTreeMap, HashMap};

/// The longest function or file name kept, in characters; longer ones end in `…` (a C++
/// template name can run to kilobytes).
pub const NAME_CHARS: usize = 160;
/// A sample's stack that the stacks table does not hold.
pub const NO_STACK: u32 = u32::MAX;

/// One frame of an interned stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// In [`HostStacks::names`].
    pub function: u32,
    /// In [`HostStacks::names`]; the empty name when unknown.
    pub file: u32,
    pub line: Option<u32>,
    pub kind: FrameKind,
}

/// One sampled thread: its samples by time.
#[derive(Debug, Default)]
pub struct HostThread {
    pub pid: u32,
    pub tid: u32,
    /// Cleaned ([`clean_text`]).
    pub name: String,
    pub t_ns: Vec<i64>,
    /// Per sample, its stack in [`HostStacks`], or [`NO_STACK`].
    pub stack: Vec<u32>,
    pub state: Vec<HostState>,
    pub gil: Vec<Gil>,
    /// The usual time between samples (the median): a sample stands for the time up to the
    /// next one, but for at most twice this, so a thread that stopped being sampled shows a
    /// hole rather than its last stack stretched.
    pub interval_ns: i64,
    /// The deepest stack sampled (frames), for the height of its flame chart.
    pub max_depth: usize,
    /// How many samples found the thread running (not waiting): the busiest threads start as
    /// flame charts.
    pub running: usize,
}

/// What a lane or a level of a flame chart draws over a stretch of pixel columns `[col0, col1)`:
/// the sample in the first column's middle, and every column up to `col1` shows the same thing
/// at this level (see [`Levels`]) in the same state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRun {
    /// 0 for a lane; a flame chart's stack depth from the outermost frame.
    pub level: usize,
    pub col0: usize,
    pub col1: usize,
    /// The sample at the run's first column.
    pub sample: usize,
    /// The function's name in [`HostStacks::names`], or [`NO_STACK`].
    pub function: u32,
    pub idle: bool,
}

/// What the runs of [`HostThread::runs`] follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Levels {
    /// One level, the innermost function (a closed thread's lane): neighbours with the same
    /// function merge.
    Leaf,
    /// A level per stack depth, the outermost frame at level 0, at most this many (a flame
    /// chart): a run goes on while the columns show the same frame at its depth under the same
    /// runs above it, so runs nest as calls do.
    Stack(usize),
}

impl HostThread {
    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_ns.is_empty()
    }

    /// Where sample `i` ends: at the next sample, or one and a half intervals after it where the
    /// next is further (the last sample, a pause in sampling).
    pub fn end_ns(&self, i: usize) -> i64 {
        let cap = self.t_ns[i].saturating_add(self.interval_ns.saturating_mul(3) / 2);
        self.t_ns.get(i + 1).map_or(cap, |&n| n.min(cap))
    }

    /// The sample whose time holds `t`, if any.
    pub fn at(&self, t: i64) -> Option<usize> {
        let i = self.t_ns.partition_point(|&s| s <= t).checked_sub(1)?;
        (t < self.end_ns(i)).then_some(i)
    }

    /// The samples that start in `[t0, t1)`.
    pub fn between(&self, t0: i64, t1: i64) -> std::ops::Range<usize> {
        self.t_ns.partition_point(|&s| s < t0)..self.t_ns.partition_point(|&s| s < t1)
    }

    /// The runs to draw of `ncols` pixel columns of `px_ns` each from `t0_ns` (this recording's
    /// clock): per column the sample under its middle, neighbours that show the same thing at a
    /// level in the same state merged; columns without a sample belong to no run. A frame costs
    /// a lookup per column and a step per level, whatever the zoom. Runs come as they end: by
    /// column, then level.
    pub fn runs(
        &self,
        stacks: &HostStacks,
        t0_ns: f64,
        px_ns: f64,
        ncols: usize,
        levels: Levels,
    ) -> Vec<HostRun> {
        let mut out: Vec<HostRun> = Vec::new();
        if self.is_empty() || px_ns <= 0.0 {
            return out;
        }
        let n = match levels {
            Levels::Leaf => 1,
            Levels::Stack(n) => n,
        };
        // Per level, the run going on: (what it shows, first column, its sample, waiting).
        let mut open: Vec<Option<(u32, usize, usize, bool)>> = vec![None; n];
        let mut last: Option<usize> = None;
        let mut frames: &[u32] = &[];
        let mut idle = false;
        for c in 0..=ncols {
            let sample = if c < ncols {
                self.at((t0_ns + (c as f64 + 0.5) * px_ns).round() as i64)
            } else {
                None
            };
            if sample != last || c == ncols {
                last = sample;
                frames = sample.map_or(&[], |i| stacks.stack(self.stack[i]));
                idle = sample.is_some_and(|i| self.state[i] == HostState::Idle);
            }
            let mut parent_goes_on = true;
            for (d, slot) in open.iter_mut().enumerate() {
                let shown = match levels {
                    Levels::Leaf => sample.map(|i| stacks.leaf_function(self.stack[i])),
                    // Level d holds the frame d from the outermost (stacks are innermost first).
                    Levels::Stack(_) => (d < frames.len()).then(|| frames[frames.len() - 1 - d]),
                };
                let goes_on = parent_goes_on
                    && matches!((*slot, shown), (Some((f, _, _, i)), Some(g)) if f == g && i == idle);
                if !goes_on {
                    if let Some((what, col0, first, idle)) = slot.take() {
                        let function = match levels {
                            Levels::Leaf => what,
                            Levels::Stack(_) => stacks
                                .frames
                                .get(what as usize)
                                .map_or(NO_STACK, |f| f.function),
                        };
                        out.push(HostRun {
                            level: d,
                            col0,
                            col1: c,
                            sample: first,
                            function,
                            idle,
                        });
                    }
                    *slot = shown.zip(sample).map(|(f, i)| (f, c, i, idle));
                }
                parent_goes_on = goes_on;
            }
        }
        out
    }
}

/// The host samples of a recording: interned names, frames and stacks, and the threads.
#[derive(Debug, Default)]
pub struct HostStacks {
    pub names: Names,
    pub frames: Vec<Frame>,
    /// Stack `s` is `stack_frames[stack_at[s]..stack_at[s + 1]]`, innermost frame first.
    stack_frames: Vec<u32>,
    stack_at: Vec<u32>,
    /// Sorted by pid, then tid: the threads of one process together.
    pub threads: Vec<HostThread>,
}

impl HostStacks {
    /// Arranges the trace's stacks and host samples; frames of a stack arrive in any order
    /// (sorted by depth here), samples too.
    pub fn build(frames: Vec<StackFrame>, mut samples: Vec<HostSample>) -> HostStacks {
        let mut hs = HostStacks::default();
        let mut by_id: BTreeMap<u64, Vec<(u32, u32)>> = BTreeMap::new();
        let mut frame_ids: HashMap<Frame, u32> = HashMap::new();
        for f in frames {
            let frame = Frame {
                function: hs.names.id(&clean_text(&frame_function(&f))),
                file: hs.names.id(&clean_text(&f.file)),
                line: f.line,
                kind: f.kind,
            };
            let id = *frame_ids.entry(frame).or_insert_with(|| {
                hs.frames.push(frame);
                (hs.frames.len() - 1) as u32
            });
            by_id.entry(f.stack_id).or_default().push((f.depth, id));
        }
        let mut index: HashMap<u64, u32> = HashMap::new();
        hs.stack_at.push(0);
        for (stack_id, mut list) in by_id {
            list.sort_by_key(|(depth, _)| *depth);
            hs.stack_frames.extend(list.iter().map(|(_, f)| *f));
            hs.stack_at.push(hs.stack_frames.len() as u32);
            index.insert(stack_id, (hs.stack_at.len() - 2) as u32);
        }
        samples.sort_by_key(|s| (s.pid, s.tid, s.t_ns));
        for s in samples {
            let new = hs
                .threads
                .last()
                .is_none_or(|t| (t.pid, t.tid) != (s.pid, s.tid));
            if new {
                hs.threads.push(HostThread {
                    pid: s.pid,
                    tid: s.tid,
                    name: clean_text(&s.thread_name),
                    ..HostThread::default()
                });
            }
            if let Some(t) = hs.threads.last_mut() {
                t.t_ns.push(s.t_ns);
                t.stack
                    .push(index.get(&s.stack_id).copied().unwrap_or(NO_STACK));
                t.state.push(s.state);
                t.gil.push(s.gil);
            }
        }
        for t in &mut hs.threads {
            t.interval_ns = median_step(&t.t_ns);
            t.running = t.state.iter().filter(|s| **s == HostState::Running).count();
        }
        for i in 0..hs.threads.len() {
            let depth = hs.threads[i]
                .stack
                .iter()
                .map(|s| hs.stack(*s).len())
                .max()
                .unwrap_or(0);
            hs.threads[i].max_depth = depth;
        }
        hs
    }

    /// The thread's process, by the name of its main thread (the one whose tid is the pid; the
    /// kernel names it after the program), as `name pid`; `pid N` where the main thread was not
    /// sampled or has no name of its own (Python calls every main thread `MainThread`).
    pub fn process_name(&self, pid: u32) -> String {
        self.threads
            .iter()
            .find(|t| t.pid == pid && t.tid == pid && !t.name.is_empty() && t.name != "MainThread")
            .map_or_else(|| format!("pid {pid}"), |t| format!("{} {pid}", t.name))
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Stack `s`'s frames, innermost first; none for [`NO_STACK`].
    pub fn stack(&self, s: u32) -> &[u32] {
        let s = s as usize;
        match (self.stack_at.get(s), self.stack_at.get(s + 1)) {
            (Some(&a), Some(&b)) => &self.stack_frames[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The innermost function of stack `s`, or [`NO_STACK`] for a stack without frames.
    pub fn leaf_function(&self, s: u32) -> u32 {
        self.stack(s)
            .first()
            .map_or(NO_STACK, |&f| self.frames[f as usize].function)
    }

    /// A function's name, `(unknown stack)` for [`NO_STACK`].
    pub fn function_name(&self, id: u32) -> &str {
        if id == NO_STACK {
            "(unknown stack)"
        } else {
            self.names.get(id)
        }
    }

    /// A frame as one line: `function  file:line  (python)`.
    pub fn frame_line(&self, f: u32) -> String {
        let Some(fr) = self.frames.get(f as usize) else {
            return String::new();
        };
        let file = self.names.get(fr.file);
        let at = match (file.is_empty(), fr.line) {
            (true, _) => String::new(),
            (false, Some(l)) => format!("  {file}:{l}"),
            (false, None) => format!("  {file}"),
        };
        format!(
            "{}{at}  ({})",
            self.names.get(fr.function),
            fr.kind.as_str()
        )
    }
}

/// A frame's function as drawn: a native frame without a symbol (the sampler writes its address,
/// `0x4c13f6`) is named by its library and offset, `libcuda.so+0x4c13f6`, as perf and Perfetto
/// name them; the version after `.so` is left out.
fn frame_function(f: &StackFrame) -> String {
    let addr = f
        .function
        .strip_prefix("0x")
        .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()));
    if f.kind != FrameKind::Native || !addr || f.file.is_empty() {
        return f.function.clone();
    }
    let base = f.file.rsplit('/').next().unwrap_or(&f.file);
    let lib = match base.find(".so") {
        Some(i) => &base[..i + 3],
        None => base,
    };
    format!("{lib}+{}", f.function)
}

/// The median time between consecutive samples (1 ms where there are fewer than two).
fn median_step(t: &[i64]) -> i64 {
    let mut steps: Vec<i64> = t
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d > 0)
        .collect();
    if steps.is_empty() {
        return 1_000_000;
    }
    let mid = steps.len() / 2;
    *steps.select_nth_unstable(mid).1
}

/// Text from another process made safe to draw: control characters and the invisible ones that
/// reorder or hide text (bidirectional overrides, zero-width) become `�`, and anything past
/// [`NAME_CHARS`] characters is cut with `…`.
pub fn clean_text(s: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
    };
    let mut out: String = s
        .chars()
        .take(NAME_CHARS)
        .map(|c| if hidden(c) { '\u{FFFD}' } else { c })
        .collect();
    if s.chars().nth(NAME_CHARS).is_some() {
        out.pop();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    fn frame(stack_id: u64, depth: u32, function: &str) -> StackFrame {
        StackFrame {
            stack_id,
            depth,
            function: function.into(),
            file: "x.py".into(),
            line: Some(depth + 1),
            ..Default::default()
        }
    }

    fn sample(t_ns: i64, tid: u32, stack_id: u64, idle: bool) -> HostSample {
        HostSample {
            t_ns,
            pid: 1,
            tid,
            state: if idle {
                HostState::Idle
            } else {
                HostState::Running
            },
            stack_id,
            ..Default::default()
        }
    }

    /// Stack 1: main > a; stack 2: main > b.
    fn two_stacks(samples: Vec<HostSample>) -> HostStacks {
        HostStacks::build(
            vec![
                frame(1, 1, "main"),
                frame(1, 0, "a"),
                frame(2, 0, "b"),
                frame(2, 1, "main"),
            ],
            samples,
        )
    }

    #[test]
    fn stacks_are_innermost_first_and_threads_grouped() {
        let hs = two_stacks(vec![
            sample(30, 2, 1, false),
            sample(10, 1, 2, false),
            sample(20, 1, 1, true),
        ]);
        assert_eq!(hs.threads.len(), 2);
        assert_eq!(hs.threads[0].t_ns, vec![10, 20]);
        let s = hs.threads[0].stack[0];
        assert_eq!(hs.function_name(hs.leaf_function(s)), "b");
        let names: Vec<&str> = hs
            .stack(s)
            .iter()
            .map(|f| hs.names.get(hs.frames[*f as usize].function))
            .collect();
        assert_eq!(names, ["b", "main"]);
        assert_eq!(hs.frame_line(hs.stack(s)[0]), "b  x.py:1  (python)");
    }

    #[test]
    fn equal_neighbours_merge_into_one_run_per_pixel() {
        // 1000 samples 1 µs apart: a, a, b, b, a, a, ... in pairs; idle from 500 on.
        let samples = (0..1000)
            .map(|i| sample(i * 1000, 1, 1 + ((i / 2) % 2) as u64, i >= 500))
            .collect();
        let hs = two_stacks(samples);
        let th = &hs.threads[0];
        // Zoomed in: a column per µs, so runs change every 2 columns.
        let runs = th.runs(&hs, 0.0, 1000.0, 8, Levels::Leaf);
        let cols: Vec<(usize, usize)> = runs.iter().map(|r| (r.col0, r.col1)).collect();
        assert_eq!(cols, [(0, 2), (2, 4), (4, 6), (6, 8)]);
        assert_eq!(hs.function_name(runs[0].function), "a");
        assert_eq!(hs.function_name(runs[1].function), "b");
        // Zoomed out, 4 µs a column: every column's middle sample (2, 6, 10, ...) is `b`:
        // one run for the running half, one for the idle half.
        let runs = th.runs(&hs, 0.0, 4000.0, 250, Levels::Leaf);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!((runs[0].col0, runs[0].col1, runs[0].idle), (0, 125, false));
        assert_eq!((runs[1].col0, runs[1].col1, runs[1].idle), (125, 250, true));
        // Runs never overlap and stay in order.
        assert!(runs.windows(2).all(|w| w[0].col1 <= w[1].col0));
    }

    #[test]
    fn a_pause_in_sampling_is_a_hole() {
        let hs = two_stacks(vec![
            sample(0, 1, 1, false),
            sample(1000, 1, 1, false),
            sample(2000, 1, 1, false),
            sample(100_000, 1, 1, false),
        ]);
        let th = &hs.threads[0];
        assert_eq!(th.interval_ns, 1000);
        assert_eq!(th.at(2500), Some(2));
        assert_eq!(th.at(3500), None, "beyond 1.5 intervals");
        let runs = th.runs(&hs, 0.0, 1000.0, 10, Levels::Leaf);
        assert_eq!((runs[0].col0, runs[0].col1), (0, 3));
        assert_eq!(runs.len(), 1);
    }

    #[test]
    fn native_frames_without_symbols_are_named_by_library_and_offset() {
        let native = |function: &str, file: &str| StackFrame {
            stack_id: 1,
            function: function.into(),
            file: file.into(),
            kind: FrameKind::Native,
            ..Default::default()
        };
        let f = native("0x4c13f6", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05");
        assert_eq!(frame_function(&f), "libcuda.so+0x4c13f6");
        assert_eq!(
            frame_function(&native("0x10", "/opt/app/engine")),
            "engine+0x10"
        );
        // Symbols, Python frames and addresses in no file stay as they are.
        assert_eq!(
            frame_function(&native("cuLaunchKernel", "/x/libcuda.so.1")),
            "cuLaunchKernel"
        );
        assert_eq!(frame_function(&native("0x4c13f6", "")), "0x4c13f6");
        let py = StackFrame {
            kind: FrameKind::Python,
            ..native("0xabc", "x.py")
        };
        assert_eq!(frame_function(&py), "0xabc");
        let hs = HostStacks::build(vec![f], vec![sample(0, 1, 1, false)]);
        assert_eq!(
            hs.function_name(hs.leaf_function(hs.threads[0].stack[0])),
            "libcuda.so+0x4c13f6"
        );
        assert_eq!(hs.threads[0].max_depth, 1);
        assert_eq!(hs.threads[0].running, 1);
    }

    #[test]
    fn unknown_stacks_and_hostile_names() {
        let hs = HostStacks::build(
            vec![frame(1, 0, "evil\u{1b}[31m\u{202E}name\n")],
            vec![sample(0, 1, 9, false), sample(10, 1, 1, false)],
        );
        let th = &hs.threads[0];
        assert_eq!(th.stack[0], NO_STACK);
        assert_eq!(
            hs.function_name(hs.leaf_function(th.stack[0])),
            "(unknown stack)"
        );
        let name = hs.function_name(hs.leaf_function(th.stack[1]));
        assert!(!name.chars().any(|c| c.is_control()), "{name:?}");
        assert!(!name.contains('\u{202E}'));
        let long = clean_text(&"x".repeat(10_000));
        assert_eq!(long.chars().count(), NAME_CHARS);
        assert!(long.ends_with('…'));
        assert_eq!(clean_text("ok"), "ok");
    }
}
