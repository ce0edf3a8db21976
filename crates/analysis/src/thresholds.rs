//! The thresholds of the verdicts, shared by the report's verdict and the host's gap classes.

/// Below this idle fraction a phase is busy.
pub const BUSY_BELOW: f64 = 0.10;
/// From this share of gap time without a kernel resident, a phase is host-bound; up to one
/// minus it, latency-bound.
pub const HOST_BOUND_FROM: f64 = 0.6;
