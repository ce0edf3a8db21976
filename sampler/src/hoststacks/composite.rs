//! The source `record` uses: py-spy for a process that runs Python, native frames (perf
//! events) for one that does not. A process is read one way only: Python stacks never get
//! native frames mixed in.

use super::native::{FRAMES_KIND, NativeSource};
use super::pyspy::PySpySource;
use super::source::{AttachError, StackReader, StackSource};
use std::time::Duration;

/// What the composite source records, for the manifest.
pub const FRAMES: &str = "python frames; native frames (perf task-clock, frame-pointer call chains) for processes without python";

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
}

impl StackSource for HostSource {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        match self.python.attach(pid) {
            Err(AttachError::NotPython { .. }) => self.native.attach(pid),
            other => other,
        }
    }

    fn frames_kind(&self) -> &'static str {
        FRAMES
    }
}
