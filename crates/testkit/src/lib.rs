//! Synthetic data for cufall's tests, snapshots and benchmarks: nothing here is a measurement,
//! and nothing here ships in the `cufall` binary (crates take it as a dev-dependency only).
//!
//! - [`fixture`]: a trace on disk with known phases, gaps, kernels and drops, for the analysis
//!   and the command line's end-to-end tests;
//! - [`synth`]: live feeds and demo traces (devices named like H200s, a waveform per device), for
//!   the viewer's snapshots and benchmarks.
//!
//! The trace crate's own format tests keep their fixtures beside them: they test the writer this
//! crate uses.
#![forbid(unsafe_code)]

pub mod fixture;
pub mod synth;
