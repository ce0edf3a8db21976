//! Synthetic data for cufall's tests, snapshots and benchmarks (and copies of the bundled real
//! recordings): nothing here is a measurement, and nothing here ships in the `cufall` binary (crates take it as a dev-dependency only).
//!
//! - [`bench`]: the large synthetic trace of the benchmarks (`bench_report`, `bench_gui`);
//! - [`cprogram`]: a small C program (or library) built with frame pointers, for the host-stack
//!   tests on real processes;
//! - [`examples`]: copies of the bundled real recordings, for tests that damage them;
//! - [`heap`]: a counting global allocator, for tests that bound memory per case;
//! - [`imports`]: a crate's module graph, for the test each crate has that its modules import
//!   one another one way;
//! - [`fixture`]: a trace on disk with known phases, gaps, kernels and drops (and, on request,
//!   a host name and host samples of two threads), for the analysis, the command line's
//!   end-to-end tests and the window's host lanes;
//! - [`synth`]: live feeds and demo traces (devices named like H200s, a waveform per device), for
//!   the viewer's snapshots and benchmarks;
//! - [`tables`]: small traces with rows in every table, for the trace format's tests.
// Unsafe only in `heap` (a global allocator is an unsafe trait), allowed there with its reason.
#![deny(unsafe_code)]

pub mod bench;
pub mod cprogram;
pub mod examples;
pub mod fixture;
pub mod heap;
pub mod imports;
pub mod synth;
pub mod tables;

/// The seed of a fuzz test: `CUFALL_FUZZ_SEED` (a number, or `random` for a new one), else
/// `default` (CI's fixed seed, so the same code gets the same answer).
pub fn fuzz_seed(default: u64) -> u64 {
    match std::env::var("CUFALL_FUZZ_SEED").ok().as_deref() {
        None => default,
        Some("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(default, |d| d.as_nanos() as u64),
        Some(n) => n.parse().expect("CUFALL_FUZZ_SEED is a number or `random`"),
    }
}

#[cfg(test)]
mod tests {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        crate::imports::assert_one_way("cufall-testkit (lib.rs)", &src.join("lib.rs"));
    }
}
