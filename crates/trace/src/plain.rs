//! Reading the small files a trace is opened with (`manifest.json`, `index.jsonl`) and its
//! segments: plain files only, and no more than a limit, so that a FIFO, a device or a huge
//! file never hangs or exhausts the reader.

use crate::error::TraceError;
use std::path::Path;

/// The most `manifest.json` and `index.jsonl` may hold. A manifest is a few KiB; an index line is
/// about 250 bytes per segment, so 256 MiB is a million segments, far past any recording.
pub(crate) const MANIFEST_LIMIT: u64 = 64 << 20;
pub(crate) const INDEX_LIMIT: u64 = 256 << 20;

/// What a file that is not a plain file is, for messages.
fn file_kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a folder"
    } else {
        "not a plain file"
    }
}

/// Reads `path` (following symlinks) if it is a plain file, at most `limit` bytes. A FIFO would
/// block the reader forever and a device (`/dev/zero`) never ends, so both are refused before
/// they are opened; a file longer than `limit` is refused without reading past it.
pub(crate) fn read_plain(path: &Path, limit: u64) -> Result<Vec<u8>, ReadFail> {
    use std::io::Read;
    let file = open_plain(path, limit)?;
    let len = file.metadata().map_or(0, |m| m.len());
    let mut bytes = Vec::with_capacity(usize::try_from(len.min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadFail::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadFail::Refused(TraceError::TooLarge {
            path: path.to_path_buf(),
            limit,
        }));
    }
    Ok(bytes)
}

/// Opens `path` for [`read_plain`]'s checks: a plain file (following symlinks), no longer than
/// `limit` bytes when opened. A caller that reads it as a stream reads no more than `limit`.
pub(crate) fn open_plain(path: &Path, limit: u64) -> Result<std::fs::File, ReadFail> {
    let meta = std::fs::metadata(path).map_err(ReadFail::Io)?;
    if !meta.is_file() {
        return Err(ReadFail::Refused(TraceError::NotAFile {
            path: path.to_path_buf(),
            what: file_kind(meta.file_type()),
        }));
    }
    if meta.len() > limit {
        return Err(ReadFail::Refused(TraceError::TooLarge {
            path: path.to_path_buf(),
            limit,
        }));
    }
    std::fs::File::open(path).map_err(ReadFail::Io)
}

/// Why [`read_plain`] gave no bytes: an I/O error (the caller tells a missing file from others),
/// or a refusal that is already the message.
pub(crate) enum ReadFail {
    Io(std::io::Error),
    Refused(TraceError),
}

impl ReadFail {
    pub(crate) fn into_error(self, path: &Path) -> TraceError {
        match self {
            ReadFail::Io(source) => TraceError::Read {
                path: path.to_path_buf(),
                source,
            },
            ReadFail::Refused(e) => e,
        }
    }
}
