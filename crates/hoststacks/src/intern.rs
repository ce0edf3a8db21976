//! Stacks interned to ids: a thread that sits in one place for a second is a thousand samples
//! naming one stack, written once.
//!
//! Memory is bounded: when the frames held pass [`MAX_INTERNED_BYTES`] the table is emptied
//! and starts again with fresh ids (ids are never reused, so every id in the trace still
//! names one stack; a stack seen again after a reset is written again under a new id).
//! Stacks deeper than [`MAX_DEPTH`] keep their innermost frames and end in one frame that
//! says how many were left out.

use super::source::Frame;
use cufall_model::{FrameKind, StackFrame};
use std::collections::HashMap;

/// Bytes of frame text (and per-frame overhead) the table may hold before it starts again.
pub const MAX_INTERNED_BYTES: usize = 64 << 20;
/// Frames kept per stack, innermost first.
pub const MAX_DEPTH: usize = 512;
/// Counted per frame on top of its text: the strings' and the vector's own bookkeeping.
const FRAME_OVERHEAD: usize = 96;

/// The interning table.
#[derive(Debug, Default)]
pub struct Interner {
    ids: HashMap<Vec<Frame>, u64>,
    next_id: u64,
    bytes: usize,
    resets: u64,
}

impl Interner {
    /// The stack's id, and its rows for the stacks table when it is new (to be written no later
    /// than the first sample naming it).
    pub fn intern(&mut self, frames: &[Frame]) -> (u64, Option<Vec<StackFrame>>) {
        let frames = cut(frames);
        if let Some(id) = self.ids.get(frames.as_slice()) {
            return (*id, None);
        }
        let size: usize = frames
            .iter()
            .map(|f| f.function.len() + f.file.len() + f.module.len() + FRAME_OVERHEAD)
            .sum();
        if self.bytes + size > MAX_INTERNED_BYTES && !self.ids.is_empty() {
            self.ids.clear();
            self.bytes = 0;
            self.resets += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        let rows = rows(id, &frames);
        self.bytes += size;
        self.ids.insert(frames, id);
        (id, Some(rows))
    }

    /// Distinct stacks held now.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Times the table was emptied to stay under its bound.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Bytes counted against [`MAX_INTERNED_BYTES`] now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The frames to intern: a thread with no Python frame is one frame saying so, a deep stack is
/// cut with one frame saying how much.
fn cut(frames: &[Frame]) -> Vec<Frame> {
    if frames.is_empty() {
        return vec![Frame {
            function: NO_PYTHON_FRAME.into(),
            file: String::new(),
            line: None,
            module: String::new(),
            kind: FrameKind::Native,
        }];
    }
    if frames.len() <= MAX_DEPTH {
        return frames.to_vec();
    }
    let mut kept = frames[..MAX_DEPTH - 1].to_vec();
    kept.push(Frame {
        function: format!("({} outer frames left out)", frames.len() - (MAX_DEPTH - 1)),
        file: String::new(),
        line: None,
        module: String::new(),
        kind: FrameKind::Python,
    });
    kept
}

/// The one frame of a thread that was running no Python code when sampled (in C, in the
/// interpreter's start or end, or a Python thread state without a frame).
pub const NO_PYTHON_FRAME: &str = "(no Python frame)";

fn rows(id: u64, frames: &[Frame]) -> Vec<StackFrame> {
    frames
        .iter()
        .enumerate()
        .map(|(depth, f)| StackFrame {
            stack_id: id,
            // MAX_DEPTH bounds the depth far below u32::MAX.
            depth: u32::try_from(depth).unwrap_or(u32::MAX),
            function: f.function.clone(),
            file: f.file.clone(),
            line: f.line,
            module: f.module.clone(),
            kind: f.kind,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            file: "/x/app.py".into(),
            line: Some(line),
            module: "app".into(),
            kind: FrameKind::Python,
        }
    }

    #[test]
    fn one_stack_gets_one_id_and_its_rows_once() {
        let mut i = Interner::default();
        let s = [frame("inner", 3), frame("outer", 10)];
        let (a, rows) = i.intern(&s);
        let rows = rows.expect("a new stack has rows");
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].depth, rows[0].function.as_str()), (0, "inner"));
        assert_eq!((rows[1].depth, rows[1].function.as_str()), (1, "outer"));
        assert!(rows.iter().all(|r| r.stack_id == a));
        let (b, again) = i.intern(&s);
        assert_eq!(a, b);
        assert!(again.is_none(), "a known stack is not written twice");
        // Another line is another stack.
        let (c, rows) = i.intern(&[frame("inner", 4), frame("outer", 10)]);
        assert_ne!(a, c);
        assert!(rows.is_some());
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn a_thread_without_python_frames_gets_a_stack_that_says_so() {
        let mut i = Interner::default();
        let (_, rows) = i.intern(&[]);
        let rows = rows.expect("new");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].function, NO_PYTHON_FRAME);
        assert_eq!(rows[0].kind, FrameKind::Native);
    }

    #[test]
    fn deep_stacks_keep_their_innermost_frames_and_say_how_many_were_cut() {
        let mut i = Interner::default();
        let deep: Vec<Frame> = (0..MAX_DEPTH as u32 + 10).map(|n| frame("f", n)).collect();
        let (_, rows) = i.intern(&deep);
        let rows = rows.expect("new");
        assert_eq!(rows.len(), MAX_DEPTH);
        assert_eq!(rows[0].line, Some(0));
        assert_eq!(rows[MAX_DEPTH - 1].function, "(11 outer frames left out)");
    }

    #[test]
    fn the_table_starts_again_at_its_bound_and_never_reuses_an_id() {
        let mut i = Interner::default();
        let long = "x".repeat(1 << 20);
        let mut ids = std::collections::HashSet::new();
        for n in 0..200u32 {
            let mut f = frame(&long, n);
            f.file = long.clone();
            let (id, rows) = i.intern(&[f]);
            assert!(rows.is_some());
            assert!(ids.insert(id), "id {id} reused");
            assert!(i.bytes() <= MAX_INTERNED_BYTES);
        }
        assert!(i.resets() >= 2, "{} resets", i.resets());
        // A stack from before the last reset comes back under a new id, with its rows again.
        let mut f = frame(&long, 0);
        f.file = long.clone();
        let (id, rows) = i.intern(&[f]);
        assert!(rows.is_some());
        assert!(ids.insert(id));
    }
}
