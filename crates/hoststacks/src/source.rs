//! What the round loop asks of the layer that reads another process's stacks: attach to a
//! process, then read every thread's stack once per round. The real implementations are
//! [`crate::pyspy`] (Python) and [`crate::native`] (perf events),
//! joined by [`crate::composite`]; tests drive the loop with a fake.

use cufall_model::{FrameKind, Gil, HostFrames, HostState};

/// One frame as read from the process, innermost first in [`ThreadStack::frames`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: Option<u32>,
    pub module: String,
    pub kind: FrameKind,
}

/// One thread of a process at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadStack {
    /// The operating system's thread id; 0 when the interpreter did not say.
    pub tid: u32,
    pub name: String,
    pub state: HostState,
    pub gil: Gil,
    /// Innermost (running) frame first; empty when the thread runs no Python code (a native
    /// reader always gives at least one frame).
    pub frames: Vec<Frame>,
}

/// Why a process could not be attached to.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Reading another process's memory is not permitted (user, Yama, container).
    #[error("no permission to read the memory of process {pid}")]
    NoPermission {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    /// No Python interpreter is loaded in the process.
    #[error("process {pid} runs no Python")]
    NotPython { pid: u32 },
    /// An interpreter the reader does not know how to read.
    #[error("process {pid} runs a Python this cufall cannot read ({detail})")]
    UnsupportedPython { pid: u32, detail: String },
    /// No Python, and native frames cannot be read either (perf events refused or not
    /// offered); the detail says why and the fix.
    #[error("process {pid} runs no Python, and its native frames cannot be read: {detail}")]
    NativeUnavailable { pid: u32, detail: String },
    /// The process ended before it could be read.
    #[error("process {pid} exited")]
    Gone { pid: u32 },
    /// Anything else (often: the interpreter is still starting); retried a few times.
    #[error("cannot read the Python interpreter of process {pid}: {detail}")]
    Other { pid: u32, detail: String },
}

/// Why one round's read of an attached process failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The process ended (or exec'd away from Python).
    #[error("the process exited")]
    Gone,
    /// Reading its memory is no longer permitted (it made itself undumpable, or changed
    /// user): it is attached again, which says why.
    #[error("no permission to read its memory")]
    Denied,
    /// A read that raced with the running program (the program is not paused), or any other
    /// failure of one round; the round is counted as missed.
    #[error("{0}")]
    Failed(String),
}

/// An attached process: one read per round.
pub trait StackReader: Send {
    /// What runs there, for the summary (`python 3.11.7`, `native (perf task-clock)`).
    fn describe(&self) -> String;
    /// Every thread's stack, now.
    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError>;
    /// What the summary says once about this process beside its samples: why the native
    /// frames of its Python threads could not be read (perf events refused).
    fn native_refused(&self) -> Option<String> {
        None
    }
}

/// The native call chains of chosen threads of one process (a Python process's Python
/// threads), read without pausing it; each thread's perf event is opened the first time it is
/// asked for.
pub trait NativeChains: Send {
    /// The call chain of `tid`'s newest sample since the last look, innermost first, up to its
    /// first interpreter frame (the rest is not looked up); None when it has none (it used
    /// less than one period of CPU since, or has no event).
    fn chain(&mut self, tid: u32) -> Option<Vec<Frame>>;
    /// The round is over: events of threads not asked for in a while are closed.
    fn end_round(&mut self);
}

/// Attaches readers to processes.
pub trait StackSource: Send {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError>;
    /// What is read, for the manifest and the docs (`python frames`).
    fn frames_kind(&self) -> &'static str;
    /// What is read, for the manifest's typed `host_stacks.frames`.
    fn frames(&self) -> HostFrames;
    /// Native call chains of `pid`'s threads, where this source reads them: None where it does
    /// not, a [`AttachError::NativeUnavailable`] where perf events are refused.
    fn chains(&mut self, _pid: u32) -> Option<Result<Box<dyn NativeChains>, AttachError>> {
        None
    }
}
