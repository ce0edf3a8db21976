//! Safe layer over CUPTI's Profiler Host and PM Sampling APIs, as bound by cudarc 0.19
//! (`cudarc::cupti::sys`, loaded at run time).
//!
//! The layers follow cudarc's habit: `cudarc::cupti::sys` (generated bindings) → [`result`]
//! (one function per CUPTI call, status to `Result`) → the safe types here:
//!
//! - [`Cupti`]: proof that the driver and libcupti are loaded and the profiler is initialised;
//!   chip names, counter availability and device facts.
//! - [`host::ProfilerHost`]: metric catalogue (base metrics, sub-metrics, properties), config
//!   images, evaluation of counter data into metric values. Needs no GPU access.
//! - [`pm::PmSampler`]: PM sampling of one device (enable, configure, start/stop, decode) and its
//!   [`pm::CounterData`] images.
//!
//! Every parameter struct's `structSize` comes from cudarc's `*_STRUCT_SIZE` constants: Rust's
//! padded `size_of` is wrong for several of them and CUPTI then answers `INVALID_PARAMETER`.
//!
//! Library discovery ([`loader`]) runs before anything touches cudarc, because cudarc panics
//! when a library is missing.
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]
// CUPTI is a C API: this crate is where cufall's FFI lives, so it may use unsafe code. Each
// unsafe block carries a `// SAFETY:` comment; everything public is safe.
#![allow(unsafe_code)]

pub mod blank;
pub mod error;
pub mod host;
mod image;
mod init;
mod loaded;
pub mod loader;
pub mod metric;
pub mod pm;
pub mod result;

pub use blank::{BlankImage, ImageLayout};
pub use error::{CuptiError, Result, Status};
pub use host::{HostKind, MetricKind, MetricProperties, ProfilerHost};
pub use image::{CounterData, CounterDataInfo};
pub use init::{Cupti, DeviceFacts, PrimaryContext, driver_devices, format_uuid};
pub use pm::{DecodeOutcome, DecodeStop, PmSampler};

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-cupti (lib.rs)", &src.join("lib.rs"));
    }
}
