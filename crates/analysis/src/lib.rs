//! Analysis of cufall traces: which phase leaves the GPU idle, how much, and why.
//!
//! Everything is built on the trace crate's readers: typed rows for the small tables, and the
//! samples streamed a segment at a time ([`cufall_trace::Trace::samples_between`]):
//!
//! - [`select`]: which NVTX ranges are phases: the program's own by default, library domains
//!   (CUB's `CCCL`, XLA's `TSL`, NCCL, ...) left out unless asked for (`--phases`).
//! - [`phases`]: the chosen NVTX ranges become *phases* (paths of range names, nesting kept), and the
//!   timeline is cut into segments at every range boundary.
//! - [`samples`]: the one pass over the samples table: totals per `(device, segment)`, and
//!   runs of idle samples (the peak of the activity value, when a full scale must be found, is
//!   a second).
//! - [`gaps`]: idle runs become gaps: merged, cut at drops, cut at the phases' edges, each
//!   piece placed in or between phases, and split into *no kernel resident* and *kernel
//!   resident but counters idle*.
//! - [`host`]: the host's frames and functions during each class of gaps and each phase, from
//!   the trace's host samples (`--host-stacks`); [`causes`]: what each sample says the host was
//!   doing (computing, waiting for the GPU, copying, launching, waiting on a thread).
//! - [`kernels`]: which kernels took each phase's GPU time (per device), and
//!   [`names`]: their short names.
//! - [`report`]: `cufall report`, the per-phase statistics per device with a verdict (the
//!   window totals folded into each phase as they are read).
//! - [`diff`]: `cufall diff`, two reports matched by phase.
//! - [`nodes`]: `cufall report A B ...`, several nodes' recordings of one run; [`nodes_diff`]:
//!   `cufall diff A1 A2 --vs B1 B2`, two such runs compared.
//! - [`export`]: `cufall export`, Parquet/CSV tables and a Perfetto trace.
//! - [`capcost`]: what capture itself added to each phase's host time.
//! - [`capture`]: the problems the recorder wrote in the trace's `capture` table, worded.
//! - [`manifest`]: the manifest's interval, times and full scales checked against the samples.
//!
//! The user guide with example output is `docs/analysis.md`.
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod capcost;
pub mod capture;
pub mod causes;
pub mod diff;
mod error;
pub mod export;
pub mod gaps;
pub mod host;
pub mod kernels;
pub mod manifest;
pub mod names;
pub mod nodes;
pub mod nodes_diff;
pub mod phases;
pub mod render;
pub mod report;
pub mod samples;
pub mod select;
mod thresholds;
mod utc;

pub use error::{AnalysisError, Result, WriteFailure};
pub use report::{Report, ReportOptions, build_report};
pub use select::{PhaseSelect, PhaseSelectError};

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-analysis (lib.rs)", &src.join("lib.rs"));
    }
}
