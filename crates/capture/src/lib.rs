//! The wire format between the capture library inside a profiled program
//! (`libcufall_inject.so`, the `inject/` crate) and the recording `cufall`.
//!
//! `cufall record -- CMD` starts CMD with:
//!
//! | variable | value |
//! |---|---|
//! | `CUDA_INJECTION64_PATH`, `NVTX_INJECTION64_PATH` | the capture library |
//! | [`ENV_SOCKET`] | the Unix socket the recorder listens on |
//! | [`ENV_KINDS`] | what to capture, as [`Kinds::to_env`] writes it |
//!
//! Every process of the program that loads the library (children inherit the environment)
//! opens one connection and sends [`Frame`]s, each encoded as
//!
//! ```text
//! u32 body length (little endian) | u8 tag | body
//! ```
//!
//! Integers are little endian, strings are a `u32` byte length and UTF-8 bytes. The first frame
//! of a connection is [`Frame::Hello`], the last (when the process exits normally)
//! [`Frame::Bye`]. Names that repeat (kernel names, NVTX domains, registered strings, API
//! names) are sent once as [`Frame::String`] and referred to by id; an id may be used before
//! its definition arrives (definitions and uses can travel in different per-thread buffers), so
//! the receiver resolves late ones when they come.
//!
//! Timestamps are nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of CUPTI's
//! activity records and of PM samples on Linux, so records and counter samples line up without
//! conversion.
//!
//! The types that mirror a trace row type of the same meaning carry a `Wire` prefix
//! ([`WireRangeKind`], [`WireActivityKind`], [`WireApiDomain`], [`WireApiCall`]), so the recorder,
//! which turns one into the other, names both without renaming imports.
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

mod decode;
mod encode;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
mod frame;
mod kinds;
#[cfg(test)]
mod tests;

pub use decode::{Decoder, ProtocolError, decode_body};
pub use encode::encode;
pub use frame::{
    Activity, Frame, GraphKernel, MAX_FRAME_BYTES, MAX_GRAPH_KERNELS, Name, PROTOCOL_VERSION,
    Payload, Range, WireApiCall, uuid_string,
};
pub use kinds::{
    BadRange, ENV_CALIBRATE, ENV_KINDS, ENV_RANGE, ENV_SOCKET, Kinds, LIBRARY_FILE, MAX_NAME_BYTES,
    RangeTrigger, UnknownKind, WireActivityKind, WireApiDomain, WireRangeKind,
};

/// The names of the status events the library sends and the recorder writes (the `capture`
/// table's `event` column), spelt once in `cufall-model`. [`Frame::Status`] carries the name as
/// text, so a newer library's names cross the wire too.
pub use cufall_model::event::{CaptureEventKind, CostKind};

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-capture (lib.rs)", &src.join("lib.rs"));
    }
}
