//! The pieces of the command line that several commands share.
//!
//! | module | what it holds |
//! |---|---|
//! | [`analysis`] | how idle time is measured and which NVTX ranges are phases (`report`, `diff`, `export`; `--phases` also `view`, `replay`, `gui`) |
//! | [`selection`] | the metric and device flags of `record`, `serve` and the live view |
//! | [`capture`] | `--capture` and `--capture-wait` of `record` and the live view |

pub mod analysis;
pub mod capture;
pub mod selection;
