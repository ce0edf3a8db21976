//! Errors of the analysis: what failed and on which trace; the command line adds what to type.

use cufall_trace::TraceError;
use std::path::PathBuf;

/// Everything `report`, `diff` and `export` can fail with. The `Display` text is the message
/// shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// Opening or reading the trace failed; the trace crate's message already says what to do.
    #[error(transparent)]
    Trace(#[from] TraceError),

    /// A query over a trace table failed after the trace itself was read correctly.
    #[error("analysing {path} failed: {why}", path = .path.display())]
    Query { path: PathBuf, why: String },

    /// `diff` measures both traces with A's activity metric, and B does not record it.
    #[error("{path}: {source} A diff measures both traces with A's activity metric.", path = .path.display())]
    MetricNotInB {
        path: PathBuf,
        #[source]
        source: TraceError,
    },

    /// The options cannot be used with this trace.
    #[error("{0}")]
    Invalid(String),

    #[error("{path} already exists", path = .0.display())]
    OutputExists(PathBuf),

    #[error("cannot write {path}: {why}. Check that the folder exists and that you may write there.", path = .path.display())]
    Write { path: PathBuf, why: String },
}

pub type Result<T, E = AnalysisError> = std::result::Result<T, E>;

/// Turns a polars failure on the trace at `path` into an [`AnalysisError::Query`].
pub(crate) fn query_err(
    path: &std::path::Path,
) -> impl Fn(polars::error::PolarsError) -> AnalysisError + '_ {
    move |e| AnalysisError::Query {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

pub(crate) fn write_err(path: &std::path::Path, why: impl std::fmt::Display) -> AnalysisError {
    AnalysisError::Write {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

macro_rules! typed_column {
    ($name:ident, $ty:ty, $cast:ident) => {
        /// Column `name` of `df` with its type checked; a polars error becomes `qe`'s error.
        pub(crate) fn $name(
            df: &polars::prelude::DataFrame,
            name: &str,
            qe: &impl Fn(polars::error::PolarsError) -> AnalysisError,
        ) -> Result<$ty, AnalysisError> {
            Ok(df.column(name).map_err(qe)?.$cast().map_err(qe)?.clone())
        }
    };
}

typed_column!(column_u16, polars::prelude::UInt16Chunked, u16);
typed_column!(column_u32, polars::prelude::UInt32Chunked, u32);
typed_column!(column_i64, polars::prelude::Int64Chunked, i64);
typed_column!(column_f64, polars::prelude::Float64Chunked, f64);
