//! What can keep a session from starting.

use crate::pipeline::ArmError;
use cufall_cupti::CuptiError;

/// Why a session cannot be prepared or started.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Cupti(#[from] CuptiError),
    /// Not enough memory for the images the interval needs (see [`ArmError::NotEnoughMemory`]).
    #[error(transparent)]
    Memory(ArmError),
    #[error(
        "sampling interval {} is below the minimum cufall supports ({}): CUPTI accepts shorter \
intervals on GH100 without complaint, but the hardware and the decoder cannot deliver them (see \
docs/metrics.md); use --interval 1us or more, or leave --interval out for the measured default",
        crate::args::duration::interval_text(*interval_ns),
        crate::args::duration::interval_text(*min_ns)
    )]
    IntervalTooShort { interval_ns: i64, min_ns: i64 },
    #[error("no device selected (--devices is empty)")]
    NoDeviceSelected,
    /// Neither counters nor NVML can be read; each says why.
    #[error("nothing can be recorded: {counters}; and {nvml}")]
    NothingToRecord { counters: String, nvml: String },
    #[error("cannot start the writer thread: {source}")]
    WriterThread {
        #[source]
        source: std::io::Error,
    },
}

impl From<ArmError> for SessionError {
    fn from(e: ArmError) -> Self {
        match e {
            ArmError::Cupti(c) => SessionError::Cupti(c),
            m @ ArmError::NotEnoughMemory { .. } => SessionError::Memory(m),
        }
    }
}

impl SessionError {
    /// GPU counters are out of reach for reasons outside cufall ([`CuptiError::counters_out_of_reach`]).
    pub fn counters_out_of_reach(&self) -> bool {
        matches!(self, SessionError::Cupti(c) if c.counters_out_of_reach())
    }
}
