//! Host stacks in the `cufall` binary: the flags of `record` (and of the hidden
//! `probe-host-stacks`), that command itself ([`probe`]), and the path from the sampling loop
//! to the trace writer. The sampling is the `cufall-hoststacks` crate's, re-exported here.

pub mod probe;

pub use cufall_hoststacks::*;

use crate::args::duration::{DurationError, parse_positive_duration};
use crate::sink::SinkMsg;
use std::time::Duration;

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

/// Why a `--host-interval` value was refused.
#[derive(Debug, thiserror::Error)]
pub enum HostIntervalError {
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(
        "`{text}` is finer than host stacks can be sampled: give 100us or more (1ms, the default, is 1 kHz)"
    )]
    TooFine { text: String },
}

fn parse_host_interval(s: &str) -> Result<Duration, HostIntervalError> {
    let d = parse_positive_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(HostIntervalError::TooFine { text: s.into() });
    }
    Ok(d)
}

/// The sampling loop's batches go to the trace writer with the other rows.
impl From<HostMsg> for SinkMsg {
    fn from(m: HostMsg) -> SinkMsg {
        match m {
            HostMsg::Stacks { stacks, samples } => SinkMsg::Host { stacks, samples },
            HostMsg::Events(events) => SinkMsg::Capture(events),
        }
    }
}
