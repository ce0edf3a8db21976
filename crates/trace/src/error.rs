//! Errors of reading and writing traces. Each names the file and what is wrong with it; what to
//! type next (a flag, a command) is the command line's to add.

use std::path::PathBuf;

/// Everything that can go wrong with a trace. The `Display` text names the file and the problem
/// (and, where it needs no command line, the remedy).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no trace at {path}: the path does not exist", path = .0.display())]
    NotFound(PathBuf),

    #[error("{path} is not a cufall trace: {why}. A trace is a folder holding manifest.json and one folder of Parquet segments per table", path = .path.display())]
    NotATrace { path: PathBuf, why: String },

    #[error("{path} was written with trace format {found}, newer than this cufall understands (up to {supported}.x). Upgrade cufall to read it.", path = .path.display())]
    NewerVersion {
        path: PathBuf,
        found: String,
        supported: u32,
    },

    #[error("{path} is corrupted: {why}. The file was damaged after it was written; restore it from a copy or record again.", path = .path.display())]
    Corrupt { path: PathBuf, why: String },

    #[error("{path} is {what}, not a plain file: a trace holds only plain files. Put back the file the recording wrote.", path = .path.display())]
    NotAFile { path: PathBuf, what: &'static str },

    #[error("{path} is larger than {limit} bytes, more than cufall ever writes there: it is not part of a cufall trace", path = .path.display())]
    TooLarge { path: PathBuf, limit: u64 },

    #[error("{path} already exists", path = .0.display())]
    AlreadyExists(PathBuf),

    #[error("cannot write {path}: {source}. Check that the folder exists and that you may write there.", path = .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot encode {path} as Parquet: {source}", path = .path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: crate::parquet::ParquetError,
    },

    #[error("cannot read {path}: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the trace has no metric named `{name}`. It records: {available}.")]
    UnknownMetric { name: String, available: String },

    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;
