//! `cufall report`: per-phase statistics per device, idle gaps with their places and causes,
//! drops, and a verdict per phase. [`build_report`] computes a [`Report`] (serialisable, for
//! `--json` and for `diff`); [`crate::render`] prints it as text.
//!
//! The pieces below; this root only re-exports them, so that `crate::report::X` names every
//! item, and none of them imports it (the crate's import test would see a circle):
//!
//! - `build`: reading the trace once and putting the report together ([`build_report`] and
//!   its variants, the activity value, the run's extent, drops);
//! - `verdict`: each phase's statistics over its devices, its [`Verdict`], and the
//!   [`Note`]s on the whole report;
//! - `gap_fold`: the gaps folded in one at a time (totals per device and phase, groups per
//!   place, the longest rows), so that no list of every gap is held;
//! - `cells`: the sample totals, NVML readings and dropped time per device and phase, folded in
//!   segment by segment;
//! - `types`: the report itself and its settings.

mod build;
mod cells;
mod gap_fold;
mod types;
mod verdict;

pub use build::{build_report, build_report_with, resolve_activity};
pub(crate) use build::{build_report_checked, chosen_ranges};
pub use types::{
    BUSY_BELOW, DEFAULT_GAP_INTERVALS, DEFAULT_IDLE_BELOW, DeviceDrops, GapGroup, GapPiece, GapRow,
    GapTotals, GpuInfo, HOST_BOUND_FROM, HostShares, Note, PhaseDevice, PhaseDomains, PhaseReport,
    PlaceKind, ReasonTotals, Report, ReportOptions, Stat, Verdict,
};
