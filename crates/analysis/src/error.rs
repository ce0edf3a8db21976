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

    /// The activity value needs a metric the trace does not record.
    #[error("{path} does not record the metrics of `{activity}`", path = .path.display())]
    ActivityNotRecorded { path: PathBuf, activity: String },

    /// `diff` measures both traces with A's activity metric, and B does not record it.
    #[error("{path}: {source} A diff measures both traces with A's activity metric.", path = .path.display())]
    MetricNotInB {
        path: PathBuf,
        #[source]
        source: TraceError,
    },

    /// The idle threshold is not a positive fraction of full scale.
    #[error("the idle threshold must be a positive fraction of full scale, not {0}")]
    IdleBelowOutOfRange(f64),

    /// The shortest gap to report is zero or negative.
    #[error("the shortest gap to report must be a positive duration, not {0} ns")]
    MinGapNotPositive(i64),

    /// `--phases` names NVTX domains the trace does not record; the message lists those it does.
    #[error("{0}")]
    UnknownDomains(crate::select::UnknownDomains),

    /// Recordings read as nodes of one run that share no time.
    #[error("{}", nodes_apart(.spans))]
    NodesDoNotOverlap {
        /// Each recording: its path, host, first and last sample time.
        spans: Vec<(PathBuf, String, i64, i64)>,
    },

    /// Two recordings read as nodes of one run hold the same GPU.
    #[error(
        "{} and {} both hold {gpu}: recordings of several nodes of one run hold each GPU once",
        first.display(),
        second.display()
    )]
    SameGpuTwice {
        gpu: String,
        first: PathBuf,
        second: PathBuf,
    },

    /// Two recordings read as nodes of one run name the same host (with different GPUs): their
    /// rows, named `host:GPU n`, could not be told apart.
    #[error(
        "{} and {} were both recorded on host `{}`: the nodes of one run are recorded on \
         different hosts (one `cufall record` per node, every GPU of the node in it), and rows \
         named `host:GPU n` could not be told apart. Compare two recordings of one host with \
         `cufall diff A B`",
        first.display(),
        second.display(),
        cufall_text::escape(host)
    )]
    SameHostTwice {
        host: String,
        first: PathBuf,
        second: PathBuf,
    },

    /// One side of a diff of several nodes per side is not the nodes of one run.
    /// (The side's error is in the message, not a source: the command line prints one line.)
    #[error("side {side} of the diff: {reason}")]
    NodesSide {
        side: &'static str,
        reason: Box<AnalysisError>,
    },

    /// A side of a diff of several nodes per side has no recording.
    #[error("side {side} of the diff has no recording")]
    NoNodes { side: &'static str },

    #[error("{path} already exists", path = .0.display())]
    OutputExists(PathBuf),

    /// A table export (Parquet, CSV) writes a folder, and a file has the output's name.
    #[error("{path} is a file, and a {format} export is a folder of one file per table", path = .path.display())]
    OutputNotAFolder { path: PathBuf, format: &'static str },

    /// A Perfetto export writes one file, and a folder has the output's name.
    #[error("{path} is a folder, and a Perfetto export is one file", path = .0.display())]
    OutputIsAFolder(PathBuf),

    #[error("cannot write {path}: {source}. Check that the folder exists and that you may write there.", path = .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: WriteFailure,
    },
}

/// The message of [`AnalysisError::NodesDoNotOverlap`]: each recording's host and span.
fn nodes_apart(spans: &[(PathBuf, String, i64, i64)]) -> String {
    let list: Vec<String> = spans
        .iter()
        .map(|(p, host, lo, hi)| {
            format!(
                "{} (host {host}) covers {} to {}",
                p.display(),
                crate::utc::fmt_utc(*lo),
                crate::utc::fmt_utc(*hi)
            )
        })
        .collect();
    format!(
        "these recordings share no time, so they are not nodes of one run: {}",
        list.join("; ")
    )
}

/// What failed while an export was written.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Parquet(#[from] cufall_trace::parquet::ParquetError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = AnalysisError> = std::result::Result<T, E>;

pub(crate) fn write_err(path: &std::path::Path, e: impl Into<WriteFailure>) -> AnalysisError {
    AnalysisError::Write {
        path: path.to_path_buf(),
        source: e.into(),
    }
}
