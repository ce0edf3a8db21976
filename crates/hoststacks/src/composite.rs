//! The source `record` uses: py-spy for a process that runs Python, native frames (perf
//! events) for one that does not. A Python thread's stack gets the one native frame it is in
//! appended under its innermost Python frame, from perf events on the Python threads read in
//! the same round ([`super::leaf`]); where perf events are refused it keeps the system call
//! it waits in only, and the end of `record` says so once.

use super::leaf::{Held, merge};
use super::native::{FRAMES_KIND, NativeSource};
use super::pyspy::PySpySource;
use super::source::{AttachError, NativeChains, ReadError, StackReader, StackSource, ThreadStack};
use cufall_model::HostFrames;
use std::collections::HashMap;
use std::time::Duration;

/// What the composite source records, for the manifest.
pub const FRAMES: &str = "python frames with the native frame or system call each thread is in; native frames (perf task-clock, frame-pointer call chains) for processes without python";

const _: () = assert!(const_contains(FRAMES.as_bytes(), FRAMES_KIND.as_bytes()));

/// Whether `hay` holds `needle` (the two descriptions must not drift apart).
const fn const_contains(hay: &[u8], needle: &[u8]) -> bool {
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let mut j = 0;
        while j < needle.len() && hay[i + j] == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return true;
        }
        i += 1;
    }
    false
}

/// Python first; a process without Python is attached natively.
pub struct HostSource {
    python: Box<dyn StackSource>,
    native: Box<dyn StackSource>,
}

impl HostSource {
    /// The real sources; native threads are sampled every half `interval` of their CPU time.
    pub fn new(interval: Duration) -> HostSource {
        HostSource::with(
            Box::new(PySpySource::default()),
            Box::new(NativeSource::new(interval)),
        )
    }

    /// Any two sources (the tests' fakes).
    pub fn with(python: Box<dyn StackSource>, native: Box<dyn StackSource>) -> HostSource {
        HostSource { python, native }
    }

    /// A Python process's reader with its threads' native frames, where they can be read.
    fn mixed(&mut self, pid: u32, python: Box<dyn StackReader>) -> Box<dyn StackReader> {
        let (chains, refused) = match self.native.chains(pid) {
            None => return python,
            Some(Ok(c)) => (Some(c), None),
            Some(Err(AttachError::NativeUnavailable { detail, .. })) => (None, Some(detail)),
            // Gone: its next read says so.
            Some(Err(_)) => (None, None),
        };
        Box::new(MixedReader {
            python,
            chains,
            refused,
            held: HashMap::new(),
        })
    }
}

/// A Python process read by py-spy, each thread's native frame appended from perf events.
struct MixedReader {
    python: Box<dyn StackReader>,
    chains: Option<Box<dyn NativeChains>>,
    /// Why perf events were refused.
    refused: Option<String>,
    held: HashMap<u32, Option<Held>>,
}

impl StackReader for MixedReader {
    fn describe(&self) -> String {
        self.python.describe()
    }

    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        let mut threads = self.python.sample()?;
        let Some(chains) = &mut self.chains else {
            return Ok(threads);
        };
        for t in &mut threads {
            if t.tid == 0 {
                continue;
            }
            let chain = chains.chain(t.tid);
            merge(t, chain.as_deref(), self.held.entry(t.tid).or_default());
        }
        chains.end_round();
        self.held
            .retain(|tid, _| threads.iter().any(|t| t.tid == *tid));
        Ok(threads)
    }

    fn native_refused(&self) -> Option<String> {
        self.refused.clone()
    }
}

impl StackSource for HostSource {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        match self.python.attach(pid) {
            Err(AttachError::NotPython { .. }) => self.native.attach(pid),
            Ok(python) => Ok(self.mixed(pid, python)),
            other => other,
        }
    }

    fn frames_kind(&self) -> &'static str {
        FRAMES
    }

    fn frames(&self) -> HostFrames {
        HostFrames::Mixed
    }
}
