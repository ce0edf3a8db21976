//! Host stacks: the stacks of every thread of every process of the recorded program, sampled on
//! the trace's clock while it runs (`record --host-stacks on`, the default with a program):
//! Python stacks for a process that runs Python (each thread's innermost native frame or system
//! call appended), native frames for one that does not.
//!
//! ```text
//!  one sampling thread, every --host-interval (1 ms):          sink thread
//!  ──────────────────────────────────────────────────          ───────────
//!  every 200 ms: /proc scan for the program's processes   ┐
//!    (new → attach, exec → attach again, gone → retire;   │
//!    attaching runs on a second thread)                   │
//!  each attached process: read every thread's stack ──────┼──▶ SinkMsg::Host { stacks, samples }
//!    (py-spy + the thread's newest perf sample, or perf   │     (stacks written first)
//!    events alone where no Python runs; never pausing     │
//!    it), intern, stamp the time                          │
//!  a late round or a failed read → counted as missed ─────┴──▶ SinkMsg::Capture (per process)
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
//! | [`probe`] | the hidden `probe-host-stacks`: host stacks of a program into a trace, no GPU |

pub mod composite;
pub mod event;
pub mod intern;
pub mod leaf;
pub mod native;
pub mod probe;
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
pub use sampler::{HostStacks, Options};
pub use source::{
    AttachError, Frame, NativeChains, ReadError, StackReader, StackSource, ThreadStack,
};

use crate::duration::parse_positive_duration;
use cufall_trace::model::{HostFrames, HostStacksMeta};
use std::time::Duration;

pub use event::MANIFEST_KEY;

/// The finest `--host-interval`: one read of a process takes tens of microseconds.
pub const MIN_INTERVAL: Duration = Duration::from_micros(100);

/// `--host-stacks on|off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    #[default]
    On,
    Off,
}

/// The host-stack flags of `record` (and of the hidden `probe-host-stacks`).
#[derive(Clone, Debug, clap::Args)]
pub struct HostArgs {
    /// Sample the host stacks of every thread of every process of the program (with a
    /// program after --): Python stacks with the native frame each thread is in, and native
    /// frames (perf events) for processes without Python; on or off. Needs permission to read the program's memory and to use
    /// perf events (see docs/host-stacks.md); without it the recording goes on without stacks.
    #[arg(long, value_enum, value_name = "ON|OFF", default_value = "on")]
    pub host_stacks: Switch,
    /// How often host stacks are sampled (1ms: 1 kHz; at least 100us).
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = parse_host_interval)]
    pub host_interval: Duration,
}

fn parse_host_interval(s: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "`{s}` is finer than host stacks can be sampled: give 100us or more (1ms, the default, is 1 kHz)"
        ));
    }
    Ok(d)
}

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
        interval_ns: i64::try_from(interval.as_nanos()).unwrap_or(i64::MAX),
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
