//! The pieces of the command line: the parsers of durations, numbers and device lists, each
//! with a typed error whose message says what to write, and the flags several commands share.
//! Library crates (trace, analysis, viewer, cupti) know nothing of flags.
//!
//! | module | what it holds |
//! |---|---|
//! | [`duration`] | the one duration syntax of every flag that takes a time |
//! | [`number`] | the number flags' parsers (`--full-scale`, `--idle-below`) |
//! | [`units`] | the device lists (`--devices`) |
//! | [`analysis`] | how idle time is measured and which NVTX ranges are phases (`report`, `diff`, `export`; `--phases` also `view`, `replay`, `gui`) |
//! | [`selection`] | the metric and device flags of `record`, `serve` and the live view |
//! | [`look`] | the terminal heatmap's look flags (`view`, `replay`, the live view) |
//! | [`capture`] | `--capture` and `--capture-wait` of `record` and the live view |

pub mod analysis;
pub mod capture;
pub mod duration;
pub mod look;
pub mod number;
pub mod selection;
pub mod units;
