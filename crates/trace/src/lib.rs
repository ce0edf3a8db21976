//! The cufall trace: what a recording is on disk, how to write it while sampling and how to
//! read it back (typed rows, column [`Frame`]s, or the samples a segment at a time).
//!
//! A trace is a folder (by convention `NAME.cufall/`) holding plain, columnar files that polars,
//! pyarrow and DuckDB read without cufall:
//!
//! ```text
//! NAME.cufall/
//!   manifest.json           metadata: format, schema version, devices, metrics, interval, command
//!   index.jsonl             one line per finished segment: table, file, bytes, crc32, rows, times
//!   samples/000000.parquet  PM samples: device, start_ns, end_ns, one Float32 column per metric
//!   drops/000000.parquet    intervals without samples: device, start_ns, end_ns, reason, lost_samples
//!   nvml/000000.parquet     NVML readings: device, t_ns, power_w, clocks, utilisation, memory, ...
//!   nvtx/000000.parquet     NVTX ranges: start_ns, end_ns, name, domain, kind, depth, pid, tid
//!   kernels/000000.parquet  GPU activity: device, start_ns, end_ns, kind, name, stream, ...
//!   api/000000.parquet      CUDA API calls (--capture api): start_ns, end_ns, name, pid, tid, ...
//!   capture/000000.parquet  what capture reported per process: t_ns, pid, event, count, detail
//! ```
//!
//! Schema 1.1 added the `api` and `capture` tables, NVTX `category`, `color` and payloads, the
//! `mark` range kind, kernel grid/block/context/graph columns and the `graph` activity kind;
//! 1.0 traces read with those columns empty. Every table has at least one segment (empty ones
//! carry the schema).
//!
//! Each table is a sequence of *segments*: complete Parquet files, each written to a hidden
//! temporary name and renamed into place, then listed in `index.jsonl` with its CRC-32. The
//! writer starts a new segment at least every second, so a recording killed at any moment keeps
//! everything up to its last finished segment, and no reader ever sees half a file. The reader
//! checks each segment against the index: a truncated segment is skipped with a warning, a
//! damaged one is an error that names it. Rows that are valid but cannot be true (ending before
//! they start, far outside the recording, read twice) are left out where rows are handed out and
//! counted in one warning per kind ([`Screen`]); text past 16 KiB is cut on reading
//! ([`parquet::TEXT_LIMIT`]). A trace of a newer minor version opens with a warning
//! and what that version added (tables, columns, values of the kind columns) is ignored; a newer
//! major is refused.
//!
//! Every `*_ns` column is nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock CUPTI
//! stamps PM samples with. The full specification, with every column, is `docs/trace-format.md`.
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

mod error;
pub mod frame;
mod index;
mod manifest;
mod newer;
pub mod parquet;
mod plain;
mod plausible;
mod reader;
mod tables;
mod writer;

pub use error::{Result, TraceError};
pub use frame::{Column, ColumnType, Field, Frame, Values};
pub use manifest::{INDEX_FILE, MANIFEST_FILE};
pub use plausible::{Implausible, OUTSIDE_MARGIN_NS, RecordingSpan, Screen};
pub use reader::{DeviceSummary, Trace, TraceSummary, in_guarded_decode};
pub use tables::{
    ColumnError, ColumnSpec, SAMPLE_COLUMNS, SampleColumns, Table, TableRow, col, columns,
    frame_of, schema,
};
pub use writer::{TraceWriter, WriteStats, WriterOptions};

/// The row and metadata types (the `cufall-model` crate, which needs serde alone).
pub use cufall_model as model;
pub use cufall_model::{CLOCK_DOMAIN, FORMAT_NAME, SCHEMA_MAJOR, SCHEMA_MINOR};

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-trace (lib.rs)", &src.join("lib.rs"));
    }
}
