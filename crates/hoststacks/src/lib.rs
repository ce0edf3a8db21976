//! Host stacks: the stacks of every thread of every process of the recorded program, sampled on
//! the trace's clock while it runs (`cufall record --host-stacks on`, the default with a program):
//! Python stacks for a process that runs Python (each thread's innermost native frame or system
//! call appended), native frames for one that does not.
//!
//! ```text
//!  one sampling thread, every --host-interval (1 ms):          sink thread
//!  ──────────────────────────────────────────────────          ───────────
//!  every 200 ms: /proc scan for the program's processes   ┐
//!    (new → attach, exec → attach again, gone → retire;   │
//!    attaching runs on a second thread)                   │
//!  each attached process: read every thread's stack ──────┼──▶ HostMsg::Stacks { stacks, samples }
//!    (py-spy + the thread's newest perf sample, or perf   │     (stacks written first)
//!    events alone where no Python runs; never pausing     │
//!    it), intern, stamp the time                          │
//!  a late round or a failed read → counted as missed ─────┴──▶ HostMsg::Events (per process)
//! ```
//!
//! | module | part |
//! |---|---|
//! | [`source`] | what the loop asks of a stack reader ([`StackSource`], [`StackReader`]) and its typed errors |
//! | [`pyspy`] | the Python reader, py-spy's library |
//! | [`native`] | the native reader for processes without Python: perf task-clock samples, ELF symbols; the call chains of Python threads |
//! | [`leaf`] | which native frame of a Python thread's call chain is appended under its Python frames |
//! | [`composite`] | the source `record` uses: py-spy with native leaves, native where no Python runs |
//! | [`procs`] | the program's process tree from `/proc` ([`ProcessTable`]) |
//! | [`intern`] | stacks → ids, memory bounded |
//! | [`sampler`] | the round loop |
//! | [`report`] | what the loop found, for the user, the manifest and the trace's capture table |
//! | [`event`] | the manifest key and the words host stacks write besides their capture-table events |
//!
//! The loop sends [`HostMsg`]s to a channel of the caller's own message type (`M:
//! From<HostMsg>`): `cufall`'s trace writer takes them with its other rows. The command-line
//! flags and the hidden `probe-host-stacks` command are the `cufall` binary's
//! (`sampler/src/hoststacks/`). Native frames need perf events: [`native::perf`] is the crate's
//! only unsafe code.
#![deny(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod composite;
pub mod event;
pub mod intern;
pub mod leaf;
pub mod native;
pub mod procs;
pub mod pyspy;
pub mod report;
pub mod sampler;
pub mod source;
#[cfg(test)]
mod tests;

pub use composite::HostSource;
pub use native::NativeSource;
pub use procs::{ProcFs, ProcessTable};
pub use pyspy::PySpySource;
pub use report::{HostSummary, ProcessReport};
pub use sampler::{HostMsg, HostStacks, Options};
pub use source::{
    AttachError, Frame, NativeChains, ReadError, StackReader, StackSource, ThreadStack,
};

use cufall_model::{HostFrames, HostStacksMeta, nanos};
use std::time::Duration;

pub use event::MANIFEST_KEY;

/// The finest `--host-interval`: one read of a process takes tens of microseconds.
pub const MIN_INTERVAL: Duration = Duration::from_micros(100);

/// Why `--host-stacks off` recordings have none.
const SWITCHED_OFF: &str = "--host-stacks off";

/// The manifest's `extra.host_stacks` as a recording starts (its end replaces it with what was
/// found: [`HostSummary::manifest_text`]).
pub fn start_text(on: bool, interval: Duration) -> String {
    if on {
        format!("on: {}, {}", report::rate_text(interval), composite::FRAMES)
    } else {
        format!("off: {SWITCHED_OFF}")
    }
}

/// The manifest's `host_stacks` as a recording starts (its end replaces it with what was
/// found: [`HostSummary::manifest_meta`]).
pub fn start_meta(on: bool, interval: Duration) -> HostStacksMeta {
    HostStacksMeta {
        interval_ns: nanos(interval),
        frames: HostFrames::Mixed,
        off_reason: (!on).then(|| SWITCHED_OFF.to_string()),
    }
}

/// The manifest's `host_stacks`, words and values, when the host-stack thread did not start.
pub fn not_started(interval: Duration) -> (String, HostStacksMeta) {
    let why = "the host-stack thread could not start";
    let meta = HostStacksMeta {
        off_reason: Some(why.to_string()),
        ..start_meta(true, interval)
    };
    (format!("off: {why}"), meta)
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-hoststacks (lib.rs)", &src.join("lib.rs"));
    }
}
