//! Errors of reading and writing traces. Each names the file and what is wrong with it; what to
//! type next (a flag, a command) is the command line's to add.

use std::path::{Path, PathBuf};

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

    /// A segment that is valid Parquet but that this cufall does not read: a codec it was built
    /// without, or more text than any trace holds. Not damage.
    #[error("{path} cannot be read by this cufall: {why}.", path = .path.display())]
    Unsupported { path: PathBuf, why: String },

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

    /// The file system refused a read: permissions, a symbolic link that loops, a file where a
    /// folder belongs. Not damage: the bytes may be intact.
    #[error("cannot read {path}: {source}. {fix}.", path = .path.display(), fix = read_fix(.source))]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A line of `index.jsonl` other than a last one cut short by a crash is not a segment entry.
    #[error("{path} is corrupted: line {line} is not a segment entry ({why}). The index was damaged after it was written; restore it from a copy, or delete it: the trace then opens, its segments read without checksums.", path = .path.display())]
    BadIndex {
        path: PathBuf,
        line: usize,
        why: String,
    },

    #[error("the trace has no metric named `{name}`. It records: {available}.")]
    UnknownMetric { name: String, available: String },

    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;

/// What to do about a failed read, by what the file system said.
fn read_fix(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    if is_symlink_loop(e) {
        return "It is a symbolic link that leads back to itself: put back the file the recording wrote";
    }
    match e.kind() {
        ErrorKind::PermissionDenied => {
            "You may not read it: check its owner and permissions (`ls -l`), or run as a user who may read it"
        }
        ErrorKind::NotADirectory => {
            "A trace holds a folder there: put back the folder the recording wrote"
        }
        ErrorKind::IsADirectory => {
            "A trace holds a file there: put back the file the recording wrote"
        }
        ErrorKind::NotFound => {
            "It went away while cufall read the trace: check that nothing else is moving or deleting it"
        }
        _ => "Check that the disk is readable and that you may read the file",
    }
}

/// Whether `e` is `ELOOP` (too many levels of symbolic links), which has no stable `ErrorKind`.
fn is_symlink_loop(e: &std::io::Error) -> bool {
    #[cfg(target_os = "linux")]
    const ELOOP: Option<i32> = Some(40);
    #[cfg(target_os = "macos")]
    const ELOOP: Option<i32> = Some(62);
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    const ELOOP: Option<i32> = None;
    ELOOP.is_some() && e.raw_os_error() == ELOOP
}

/// A [`TraceError::Corrupt`] of the file at `path`.
pub(crate) fn corrupt(path: &Path, why: impl Into<String>) -> TraceError {
    TraceError::Corrupt {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// `text` cut to `chars` characters, for messages quoting what a file holds (control characters
/// are escaped where a message is shown, as for every text from a trace).
pub(crate) fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    fn read(kind: ErrorKind) -> String {
        TraceError::Read {
            path: PathBuf::from("t.cufall/nvtx"),
            source: Error::from(kind),
        }
        .to_string()
    }

    /// A refused read is never called damage: the file may be whole, and the fix is elsewhere.
    #[test]
    fn refused_reads_say_what_they_are_not_corruption() {
        let denied = read(ErrorKind::PermissionDenied);
        assert!(
            denied.starts_with("cannot read t.cufall/nvtx: "),
            "{denied}"
        );
        assert!(denied.contains("You may not read it"), "{denied}");
        let denied_os = TraceError::Read {
            path: PathBuf::from("x"),
            source: Error::from_raw_os_error(13),
        }
        .to_string();
        assert!(
            denied_os.contains("check its owner and permissions"),
            "{denied_os}"
        );
        let eloop = TraceError::Read {
            path: PathBuf::from("x"),
            source: Error::from_raw_os_error(40),
        }
        .to_string();
        assert!(
            eloop.contains("symbolic link that leads back to itself"),
            "{eloop}"
        );
        assert!(read(ErrorKind::NotADirectory).contains("put back the folder"));
        for kind in [
            ErrorKind::PermissionDenied,
            ErrorKind::NotADirectory,
            ErrorKind::IsADirectory,
            ErrorKind::NotFound,
            ErrorKind::Other,
        ] {
            let m = read(kind);
            assert!(!m.contains("damaged"), "{m}");
            assert!(!m.contains("restore it from a copy"), "{m}");
        }
    }
}
