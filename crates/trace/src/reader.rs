//! Opening a trace folder, checking it, and reading its tables: as typed rows, as [`Frame`]s,
//! or (the samples) a segment at a time.

use crate::error::{Result, TraceError, corrupt};
use crate::frame::{Field, Frame};
use crate::index::SegmentEntry;
use crate::manifest::{MANIFEST_FILE, read_index, read_manifest};
use crate::newer;
use crate::plain::{ReadFail, read_plain};
use crate::plausible::{self, Found, Implausible, RecordingSpan, Screen};
use crate::tables::{self, SampleColumns, Table};
use cufall_model::{
    ApiCall, CaptureEvent, DeviceId, DropReason, DropRecord, HostSample, KernelRecord, Manifest,
    Nanos, NvmlRow, NvtxRange, SampleBatch, SchemaVersion, StackFrame,
};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

struct Segment {
    path: PathBuf,
    /// `None` for a segment finished just before a crash, before it reached the index.
    entry: Option<SegmentEntry>,
}

/// An open trace. Opening reads the manifest and the index only; each table's segments are
/// checked against their checksums the first time the table is read.
pub struct Trace {
    dir: PathBuf,
    manifest: Manifest,
    /// The manifest's `schema_version`: a newer minor may hold values this cufall ignores.
    version: SchemaVersion,
    segments: BTreeMap<Table, Vec<Segment>>,
    verified: BTreeMap<Table, OnceLock<Result<Vec<PathBuf>, Unusable>>>,
    warnings: Vec<String>,
    /// Whether `index.jsonl` was there: without it no segment has an entry, and one warning
    /// says so instead of one per segment.
    indexed: bool,
    /// Warnings about values of a newer minor version, found as tables are read.
    newer_values: Mutex<Vec<String>>,
    /// The samples segments the last windows ended in, decoded.
    last_segments: Mutex<VecDeque<CachedSegment>>,
    /// The recording's time, for the rule on values that cannot be true ([`crate::plausible`]).
    span: RecordingSpan,
    /// What each segment read so far held that cannot be true, under the name of its table (or
    /// of the index, for a span it gives): each segment counted once however often it is read.
    implausible: Mutex<BTreeMap<PathBuf, (&'static str, Found)>>,
}

/// A decoded samples segment, whole, with the metric columns it was read with.
struct CachedSegment {
    path: PathBuf,
    metrics: Vec<String>,
    rows: Arc<SampleColumns>,
}

/// Decoded segments kept for the next window: a window usually ends inside the segment the next
/// one begins with (windows and segments are cut at different times), which would otherwise be
/// decoded twice. One per reader working through windows at once (the desktop timeline runs two).
const CACHED_SEGMENTS: usize = 2;

/// Counts per device, for `cufall info`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSummary {
    pub samples: u64,
    pub drops: u64,
    pub dropped_ns: Nanos,
    /// The part of `dropped_ns` in `paused` drops: asked for, not lost.
    pub paused_ns: Nanos,
    pub nvml_rows: u64,
}

/// What a trace holds, cheap to compute from the index and the small tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceSummary {
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub devices: BTreeMap<DeviceId, DeviceSummary>,
    /// NVTX range names with their counts, most frequent first.
    pub nvtx_names: Vec<(String, u64)>,
    pub kernels: u64,
    pub segments: u64,
    pub bytes: u64,
}

/// Why a table's segments cannot be used, kept (and cloned) to be given again on every read of
/// the table. Only bytes that are not what was written are damage; a read the file system
/// refused, or a folder where a segment belongs, is said as what it is.
#[derive(Clone, Debug)]
enum Unusable {
    /// The bytes are not what was written; the text names the file.
    Damaged(String),
    /// The file system refused the read (permissions, a symbolic link loop, ...).
    Refused {
        path: PathBuf,
        os: Option<i32>,
        kind: std::io::ErrorKind,
        text: String,
    },
    /// A folder, FIFO or device where a segment belongs.
    NotAFile { path: PathBuf, what: &'static str },
    /// Valid Parquet this cufall does not read (a codec it lacks).
    Unsupported { path: PathBuf, why: String },
}

impl Unusable {
    fn refused(path: &Path, e: &std::io::Error) -> Self {
        Unusable::Refused {
            path: path.to_path_buf(),
            os: e.raw_os_error(),
            kind: e.kind(),
            text: e.to_string(),
        }
    }

    fn error(&self, dir: &Path) -> TraceError {
        match self {
            Unusable::Damaged(why) => corrupt(dir, why.clone()),
            Unusable::Refused {
                path,
                os,
                kind,
                text,
            } => TraceError::Read {
                path: path.clone(),
                source: os.map_or_else(
                    || std::io::Error::new(*kind, text.clone()),
                    std::io::Error::from_raw_os_error,
                ),
            },
            Unusable::NotAFile { path, what } => TraceError::NotAFile {
                path: path.clone(),
                what,
            },
            Unusable::Unsupported { path, why } => TraceError::Unsupported {
                path: path.clone(),
                why: why.clone(),
            },
        }
    }
}

/// The segment files in a table's folder, sorted: `NNNNNN.parquet`, not the hidden temporary
/// files of a segment being written. A table without a folder is empty (a 1.0 trace, or one
/// killed early); a folder that cannot be listed (permissions, a file in its place) is an error,
/// never an empty table.
fn segment_names(tdir: &Path) -> Result<Vec<String>> {
    let read = match std::fs::read_dir(tdir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TraceError::Read {
                path: tdir.to_path_buf(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for item in read {
        let item = item.map_err(|source| TraceError::Read {
            path: tdir.to_path_buf(),
            source,
        })?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name.ends_with(".parquet") && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The segments of each table: the files in its folder, with their index entries, and the
/// segments the index lists that the folder lacks (kept, without a file: a reader warns about
/// them and, for the samples, makes their span a drop).
fn list_segments(
    dir: &Path,
    mut by_file: BTreeMap<String, SegmentEntry>,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<Table, Vec<Segment>>> {
    let mut segments = BTreeMap::new();
    for table in Table::ALL {
        let tdir = dir.join(table.dir_name());
        let mut names = segment_names(&tdir)?;
        // A segment the index lists but the folder lacks stays in the list, without a file:
        // it is warned about and, for the samples, its span becomes a drop.
        let prefix = format!("{}/", table.dir_name());
        names.extend(
            by_file
                .keys()
                .filter_map(|f| f.strip_prefix(&prefix))
                .filter(|n| !n.contains('/') && !n.starts_with('.') && n.ends_with(".parquet"))
                .map(str::to_string),
        );
        names.sort();
        names.dedup();
        let mut list = Vec::new();
        for name in names {
            let rel = format!("{prefix}{name}");
            list.push(Segment {
                path: tdir.join(&name),
                entry: by_file.remove(&rel),
            });
        }
        segments.insert(table, list);
    }
    for missing in by_file.keys() {
        warnings.push(format!(
            "segment {missing} is listed in the index but is not a segment of any table: \
             it is ignored"
        ));
    }
    Ok(segments)
}

fn has_parquet_magic(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1")
}

/// Whether the file at `path` starts and ends with Parquet's magic, read without reading the
/// rest: a segment renamed into place is whole, one cut since is not.
fn has_footer(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let check = || -> std::io::Result<bool> {
        let mut f = std::fs::File::open(path)?;
        if f.metadata()?.len() < 12 {
            return Ok(false);
        }
        let (mut head, mut tail) = ([0u8; 4], [0u8; 4]);
        f.read_exact(&mut head)?;
        f.seek(SeekFrom::End(-4))?;
        f.read_exact(&mut tail)?;
        Ok(&head == b"PAR1" && &tail == b"PAR1")
    };
    std::fs::metadata(path).is_ok_and(|m| m.is_file()) && check().unwrap_or(false)
}

/// Why a segment's bytes did not decode.
enum DecodeFail {
    /// The decoder's error, or `None` for a decoder panic: damaged bytes.
    Damaged(Option<String>),
    /// Valid Parquet that this cufall does not read (see [`crate::parquet::is_refusal`]).
    Refused(String),
}

impl DecodeFail {
    /// The error for the segment `rel` (its path in the trace) of the trace at `dir`.
    fn error(self, dir: &Path, rel: &str, path: &Path) -> TraceError {
        match self {
            DecodeFail::Damaged(why) => corrupt(
                dir,
                format!(
                    "{rel} could not be decoded{}",
                    why.map(|w| format!(" ({w})")).unwrap_or_default()
                ),
            ),
            DecodeFail::Refused(why) => TraceError::Unsupported {
                path: path.to_path_buf(),
                why,
            },
        }
    }
}

/// Decodes a segment's bytes (the named columns, or all), turning a decoder panic on damaged
/// bytes into an error.
fn decode_guarded(bytes: Vec<u8>, only: Option<&[&str]>) -> Result<Frame, DecodeFail> {
    GUARDED.with(|g| g.set(true));
    let run = std::panic::catch_unwind(|| crate::parquet::read_frame(bytes.into(), only));
    GUARDED.with(|g| g.set(false));
    match run {
        Ok(Ok(frame)) => Ok(frame),
        Ok(Err(e)) if crate::parquet::is_refusal(&e) => {
            let why = e.to_string();
            // parquet's own prefix says nothing to a user.
            let why = why.strip_prefix("NYI: ").unwrap_or(&why).to_string();
            Err(DecodeFail::Refused(why))
        }
        Ok(Err(e)) => Err(DecodeFail::Damaged(Some(e.to_string()))),
        Err(_) => Err(DecodeFail::Damaged(None)),
    }
}

impl Trace {
    /// Opens the trace folder at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let dir = path.as_ref().to_path_buf();
        let meta = match std::fs::metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TraceError::NotFound(dir));
            }
            Err(source) => return Err(TraceError::Read { path: dir, source }),
        };
        if !meta.is_dir() {
            let inside = dir
                .parent()
                .filter(|p| p.join(MANIFEST_FILE).is_file())
                .map(|p| {
                    format!(
                        " (it is inside the trace {}: pass that folder)",
                        p.display()
                    )
                })
                .unwrap_or_default();
            return Err(TraceError::NotATrace {
                path: dir,
                why: format!("it is a file, not a trace folder{inside}"),
            });
        }
        let (manifest, version, mut warnings) = read_manifest(&dir)?;
        let (indexed, entries) = match read_index(&dir, version, &mut warnings)? {
            Some(entries) => (true, entries),
            // Said once, with the number of segments, below.
            None => (false, Vec::new()),
        };
        let by_file: BTreeMap<String, SegmentEntry> =
            entries.into_iter().map(|e| (e.file.clone(), e)).collect();

        let segments = list_segments(&dir, by_file, &mut warnings)?;
        if !indexed {
            let n: usize = segments.values().map(Vec::len).sum();
            warnings.push(format!(
                "index.jsonl is missing: the {n} segment(s) are read without checksums, and the \
                 span of a samples segment that cannot be read is known only from the samples \
                 around it"
            ));
        }
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(i64::MAX, |d| {
                i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
            });
        Ok(Trace {
            span: RecordingSpan::of(&manifest, now_ns),
            implausible: Mutex::new(BTreeMap::new()),
            indexed,
            verified: Table::ALL.iter().map(|t| (*t, OnceLock::new())).collect(),
            last_segments: Mutex::new(VecDeque::new()),
            newer_values: Mutex::new(Vec::new()),
            dir,
            manifest,
            version,
            segments,
            warnings,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Things the user should know about this trace (unfinished recording, skipped truncated
    /// segments, newer minor version). Grows as tables are read.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.warnings.clone();
        for table in Table::ALL {
            for seg in &self.segments[&table] {
                if let Some(w) = self.segment_warning(table, seg) {
                    out.push(w);
                }
            }
        }
        if let Ok(found) = self.newer_values.lock() {
            out.extend(found.iter().cloned());
        }
        out.extend(self.implausible_warnings());
        out
    }

    /// The recording's time as the rule on values that cannot be true takes it
    /// ([`Screen`]): rows outside it are left out of what the reader hands out.
    pub fn recording_span(&self) -> RecordingSpan {
        self.span
    }

    /// Notes what the segment at `path` of `table` (a table's folder name, or the index's file
    /// name) held that cannot be true; a segment already noted is not counted again.
    fn note(&self, path: &Path, table: &'static str, found: Found) {
        if found.is_empty() {
            return;
        }
        if let Ok(mut all) = self.implausible.lock() {
            all.entry(path.to_path_buf()).or_insert((table, found));
        }
    }

    /// One warning per kind of value that cannot be true, with its rows per table, over the
    /// segments read so far.
    fn implausible_warnings(&self) -> Vec<String> {
        let Ok(all) = self.implausible.lock() else {
            return Vec::new();
        };
        let mut by_kind: BTreeMap<Implausible, BTreeMap<&'static str, u64>> = BTreeMap::new();
        for (table, found) in all.values() {
            for (kind, n) in found {
                let count = by_kind.entry(*kind).or_default().entry(*table).or_default();
                *count = count.saturating_add(*n);
            }
        }
        by_kind
            .into_iter()
            .map(|(kind, tables)| {
                let total = tables.values().fold(0u64, |a, n| a.saturating_add(*n));
                let named: Vec<String> = tables.iter().map(|(t, n)| format!("{t}: {n}")).collect();
                kind.warning(total, &named.join(", "))
            })
            .collect()
    }

    /// Values a newer minor version added to the kind columns of `table`, made readable (see
    /// [`newer::ignore_values`]); each warning is said once in [`Trace::warnings`].
    fn ignore_newer_values(&self, table: Table, frame: &mut Frame) {
        if let Some(warning) = newer::ignore_values(table, frame)
            && let Ok(mut found) = self.newer_values.lock()
            && !found.contains(&warning)
        {
            found.push(warning);
        }
    }

    /// The warning for a segment that is not read whole, or read without its checks: one per
    /// segment, whichever command reads the trace (see [`Trace::drops`] for the samples' spans).
    fn segment_warning(&self, table: Table, seg: &Segment) -> Option<String> {
        let rel = self.rel(&seg.path);
        let hole = if table == Table::Samples {
            " (its span is a `segment_unreadable` drop: missing data, never idle time)"
        } else {
            ""
        };
        let Ok(meta) = std::fs::metadata(&seg.path) else {
            return seg.entry.as_ref().map(|e| {
                format!(
                    "{rel} is listed in the index ({} rows) but missing: its rows are left \
                     out{hole}; restore the file from a copy of the recording to read them",
                    e.rows
                )
            });
        };
        let len = meta.len();
        match &seg.entry {
            Some(e) if len < e.bytes => Some(format!(
                "{rel} is truncated ({len} of {} bytes): its rows are skipped{hole}",
                e.bytes
            )),
            None if !has_footer(&seg.path) => Some(format!(
                "{rel} is incomplete (no Parquet footer: it was being written when the recording \
                 stopped, or was cut since): its rows are skipped{hole}"
            )),
            None if self.indexed => Some(format!(
                "{rel} was finished after the index was last written: read without a checksum"
            )),
            _ => None,
        }
    }

    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The segments of `table` that pass their checks, checked once per `Trace`.
    fn verified_paths(&self, table: Table) -> Result<Vec<PathBuf>> {
        let cell = &self.verified[&table];
        match cell.get_or_init(|| self.verify(table)) {
            Ok(paths) => Ok(paths.clone()),
            Err(why) => Err(why.error(&self.dir)),
        }
    }

    fn verify(&self, table: Table) -> Result<Vec<PathBuf>, Unusable> {
        let mut ok = Vec::new();
        for seg in &self.segments[&table] {
            // The index knows each segment's size: a longer file is read no further than that.
            let limit = seg.entry.as_ref().map_or(u64::MAX, |e| e.bytes);
            let bytes = match read_plain(&seg.path, limit) {
                // Listed in the index but missing: warned, and a drop for the samples.
                Err(ReadFail::Io(e))
                    if e.kind() == std::io::ErrorKind::NotFound && seg.entry.is_some() =>
                {
                    continue;
                }
                other => other,
            };
            let bytes = bytes.map_err(|e| match e {
                ReadFail::Io(e) => Unusable::refused(&seg.path, &e),
                ReadFail::Refused(TraceError::NotAFile { what, .. }) => Unusable::NotAFile {
                    path: seg.path.clone(),
                    what,
                },
                ReadFail::Refused(_) => Unusable::Damaged(format!(
                    "{} has {} bytes where {limit} were written",
                    self.rel(&seg.path),
                    std::fs::metadata(&seg.path).map_or(0, |m| m.len())
                )),
            })?;
            match &seg.entry {
                Some(e) if (bytes.len() as u64) < e.bytes => continue, // truncated: warned
                Some(e) if crc32fast::hash(&bytes) != e.crc32 => {
                    return Err(Unusable::Damaged(format!(
                        "{} fails its checksum (its bytes were changed)",
                        self.rel(&seg.path)
                    )));
                }
                None if !has_parquet_magic(&bytes) => continue, // incomplete: warned
                _ => {}
            }
            // The footer is decoded here, so that every command finds a segment that cannot be
            // decoded when it first reads the table, even one that counts rows from the index.
            match decode_guarded(bytes, Some(&[])) {
                Ok(_) => {}
                Err(DecodeFail::Damaged(why)) => {
                    return Err(Unusable::Damaged(format!(
                        "{} could not be decoded{}",
                        self.rel(&seg.path),
                        why.map(|w| format!(" ({w})")).unwrap_or_default()
                    )));
                }
                Err(DecodeFail::Refused(why)) => {
                    return Err(Unusable::Unsupported {
                        path: seg.path.clone(),
                        why,
                    });
                }
            }
            ok.push(seg.path.clone());
        }
        Ok(ok)
    }

    /// Checks every segment of every table as reading it would (index, size, checksum, Parquet
    /// footer), so that a command that reads only some tables refuses a damaged trace as one
    /// that reads them all does.
    pub fn check(&self) -> Result<()> {
        for table in Table::ALL {
            self.verified_paths(table)?;
        }
        Ok(())
    }

    /// Names of the recorded metrics (sample columns), in order.
    pub fn metric_names(&self) -> Vec<&str> {
        self.manifest.metric_names()
    }

    /// The verified segments of `table` that may hold rows starting in `[lo, hi)`: those whose
    /// time range in the index (first start to latest start or end) meets the window, and any
    /// the index does not describe. A short window of a long recording (hundreds of segments)
    /// opens only a few files.
    fn segments_between(&self, table: Table, lo: i64, hi: i64) -> Result<Vec<PathBuf>> {
        let verified = self.verified_paths(table)?;
        if lo == i64::MIN && hi == i64::MAX {
            return Ok(verified);
        }
        let verified: std::collections::HashSet<PathBuf> = verified.into_iter().collect();
        Ok(self.segments[&table]
            .iter()
            .filter(|seg| verified.contains(&seg.path))
            .filter(|seg| {
                seg.entry
                    .as_ref()
                    .and_then(|e| Some((e.t_min_ns?, e.t_max_ns?)))
                    .is_none_or(|(first, last)| first < hi && last >= lo)
            })
            .map(|seg| seg.path.clone())
            .collect())
    }

    /// Decodes one segment file (the named columns, or all), turning decoder failures and
    /// decoder panics on damaged bytes into [`TraceError::Corrupt`] naming the file.
    fn read_segment(&self, path: &Path, only: Option<&[&str]>) -> Result<Frame> {
        // Segments reach here verified; the limit holds should one be swapped since.
        let limit = self
            .segments
            .values()
            .flatten()
            .find(|s| s.path == path)
            .and_then(|s| s.entry.as_ref())
            .map_or(u64::MAX, |e| e.bytes);
        let bytes = read_plain(path, limit).map_err(|e| e.into_error(path))?;
        decode_guarded(bytes, only).map_err(|why| why.error(&self.dir, &self.rel(path), path))
    }

    /// The whole of `table` in memory, every column. A table without rows reads as an empty
    /// frame with every column of its schema.
    pub fn frame(&self, table: Table) -> Result<Frame> {
        let mut out = Frame::default();
        for path in self.verified_paths(table)? {
            let frame = self.read_segment(&path, None)?;
            // A newer minor's values are kept as recorded (an export passes them on); in a
            // trace of this version or older an unknown value is damage, as in typed rows.
            if !self.version.is_newer_minor()
                && let Some((value, row)) = newer::unknown_value(table, &frame)
            {
                return Err(corrupt(
                    &self.dir,
                    format!(
                        "{}: row {row} of the {} table holds `{value}`, which is none of the \
                         values cufall writes there",
                        self.rel(&path),
                        table.dir_name()
                    ),
                ));
            }
            out.append(frame).map_err(|why| {
                corrupt(
                    &self.dir,
                    format!(
                        "{} does not fit the {} table's other files: {why}",
                        self.rel(&path),
                        table.dir_name()
                    ),
                )
            })?;
        }
        if out.columns.is_empty() {
            out = Frame::empty(&self.schema(table));
        }
        Ok(out)
    }

    /// The columns `table` has in a trace of this cufall's schema.
    pub fn schema(&self, table: Table) -> Vec<Field> {
        tables::schema(table, &self.metric_names())
    }

    /// Checks that every name is a recorded metric.
    pub fn check_metrics(&self, names: &[&str]) -> Result<()> {
        let known = self.metric_names();
        for name in names {
            if !known.contains(name) {
                return Err(TraceError::UnknownMetric {
                    name: (*name).to_string(),
                    available: if known.is_empty() {
                        "no metrics (an NVML-only recording)".into()
                    } else {
                        known.join(", ")
                    },
                });
            }
        }
        Ok(())
    }

    /// Hands `each` the samples whose start lies in `[lo, hi)` (the whole table for
    /// `[i64::MIN, i64::MAX)`), one segment at a time in file order, with `device`, `start_ns`,
    /// `end_ns` and the named metric columns. The segments are decoded ahead of `each` on one
    /// thread per core but one (at least 1, at most 3); `each` still gets them in file order.
    /// Stops at the first error, of either.
    pub fn samples_between<E: From<TraceError> + Send>(
        &self,
        lo: i64,
        hi: i64,
        metrics: &[&str],
        mut each: impl FnMut(SampleColumns) -> Result<(), E>,
    ) -> Result<(), E> {
        self.check_metrics(metrics)?;
        let paths = self.segments_between(Table::Samples, lo, hi)?;
        let mut cols = vec![
            tables::col::DEVICE,
            tables::col::START_NS,
            tables::col::END_NS,
        ];
        cols.extend_from_slice(metrics);
        let whole = (lo, hi) == (i64::MIN, i64::MAX);
        let last = paths.last().cloned();
        let decode = |path: &PathBuf| -> Result<SampleColumns> {
            if !whole && let Some(cached) = self.cached_segment(path, metrics) {
                let mut rows = SampleColumns::clone(&cached);
                rows.retain_between(lo, hi);
                return Ok(rows);
            }
            let frame = self.read_segment(path, Some(&cols))?;
            let mut rows = SampleColumns::from_frame(frame, metrics)
                .map_err(|why| corrupt(&self.dir, format!("{}: {why}", self.rel(path))))?;
            let found = plausible::screen_samples(&mut rows, &self.span);
            self.note(path, Table::Samples.dir_name(), found);
            if !whole {
                // The segment a window ends in is kept whole for the next window.
                if last.as_ref() == Some(path) {
                    self.cache_segment(path, metrics, Arc::new(rows.clone()));
                }
                rows.retain_between(lo, hi);
            }
            Ok(rows)
        };
        if paths.len() < 2 {
            for path in &paths {
                each(decode(path)?)?;
            }
            return Ok(());
        }
        // Decoders take the segments in turn (decoder k: segments k, k + n, ...), each one
        // segment ahead of the consumer, which takes their results in turn: file order, with
        // at most 2n segments in memory.
        let n = decode_threads().min(paths.len());
        let decode = &decode;
        std::thread::scope(|scope| {
            let receivers: Vec<_> = (0..n)
                .map(|k| {
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<SampleColumns>>(1);
                    let mine: Vec<&PathBuf> = paths.iter().skip(k).step_by(n).collect();
                    scope.spawn(move || {
                        for path in mine {
                            let rows = decode(path);
                            let failed = rows.is_err();
                            // A closed channel means the consumer stopped: nothing more to do.
                            if tx.send(rows).is_err() || failed {
                                return;
                            }
                        }
                    });
                    rx
                })
                .collect();
            for i in 0..paths.len() {
                match receivers[i % n].recv() {
                    Ok(rows) => each(rows?)?,
                    // A decoder stops only after sending its error, which came first.
                    Err(_) => break,
                }
            }
            Ok(())
        })
    }

    /// The decoded samples segment at `path` with these metrics, if a window kept it.
    fn cached_segment(&self, path: &Path, metrics: &[&str]) -> Option<Arc<SampleColumns>> {
        let cache = self.last_segments.lock().ok()?;
        cache
            .iter()
            .find(|c| {
                c.path == path
                    && c.metrics
                        .iter()
                        .map(String::as_str)
                        .eq(metrics.iter().copied())
            })
            .map(|c| Arc::clone(&c.rows))
    }

    fn cache_segment(&self, path: &Path, metrics: &[&str], rows: Arc<SampleColumns>) {
        if let Ok(mut cache) = self.last_segments.lock() {
            cache.retain(|c| {
                c.path != path
                    || c.metrics
                        .iter()
                        .map(String::as_str)
                        .ne(metrics.iter().copied())
            });
            if cache.len() >= CACHED_SEGMENTS {
                cache.pop_front();
            }
            cache.push_back(CachedSegment {
                path: path.to_path_buf(),
                metrics: metrics.iter().map(|m| (*m).to_string()).collect(),
                rows,
            });
        }
    }

    /// Every sample with the named metric columns, in file order.
    pub fn samples(&self, metrics: &[&str]) -> Result<SampleColumns> {
        let mut out = SampleColumns::new(metrics.len());
        self.samples_between(i64::MIN, i64::MAX, metrics, |part| {
            out.device.extend(part.device);
            out.start_ns.extend(part.start_ns);
            out.end_ns.extend(part.end_ns);
            for (a, b) in out.values.iter_mut().zip(part.values) {
                a.extend(b);
            }
            Ok::<(), TraceError>(())
        })?;
        Ok(out)
    }

    /// Every sample, one batch per device, sorted by time.
    pub fn sample_batches(&self) -> Result<Vec<SampleBatch>> {
        let metrics = self.metric_names();
        let mut batches = self.samples(&metrics)?.into_batches();
        for b in &mut batches {
            if !b.start_ns.is_sorted() {
                let mut idx: Vec<usize> = (0..b.len()).collect();
                idx.sort_by_key(|i| b.start_ns[*i]);
                let take = |v: &[i64]| idx.iter().map(|i| v[*i]).collect::<Vec<_>>();
                b.start_ns = take(&b.start_ns);
                b.end_ns = take(&b.end_ns);
                for v in &mut b.values {
                    *v = idx.iter().map(|i| v[*i]).collect();
                }
            }
        }
        Ok(batches)
    }

    /// Every hole in the samples: the drops the recorder wrote, and the span of every samples
    /// segment left out on reading (listed in the index but missing, cut short, or incomplete),
    /// as [`DropReason::SegmentUnreadable`], so that no reader takes missing data for idle time.
    pub fn drops(&self) -> Result<Vec<DropRecord>> {
        let mut rows = self.rows(Table::Drops, tables::rows::<DropRecord>)?;
        let spans = self.unreadable_spans(&rows)?;
        rows.extend(spans);
        Ok(rows)
    }

    /// The drops table as [`Trace::drops`] gives it, as a frame (for export).
    pub fn drops_frame(&self) -> Result<Frame> {
        Ok(tables::frame_of(&self.drops()?))
    }

    /// One drop per device of every samples segment left out: over its span as its index entry
    /// recorded it, with its rows as the lost samples; a segment the index does not describe
    /// spans from the device's last sample before it (without one, the end of its last recorded
    /// drop before, such as the warm-up, or the recording's start) to its first sample after it
    /// (the recording's end when none follows), its lost samples unknown.
    fn unreadable_spans(&self, recorded: &[DropRecord]) -> Result<Vec<DropRecord>> {
        let mut out = Vec::new();
        let segs = &self.segments[&Table::Samples];
        let usable = self.verified_paths(Table::Samples)?;
        for (k, seg) in segs.iter().enumerate() {
            if usable.contains(&seg.path) {
                continue;
            }
            let len = std::fs::metadata(&seg.path).map_or(0, |m| m.len());
            match &seg.entry {
                Some(e) => {
                    let (Some(start_ns), Some(end_ns)) = (e.t_min_ns, e.t_max_ns) else {
                        continue;
                    };
                    if len >= e.bytes {
                        continue;
                    }
                    // A span the recording cannot hold (`t_max_ns = i64::MAX`) is no hole in it.
                    if let Some(why) = self.span.interval(start_ns, end_ns) {
                        let found = Found::from([(why, 1)]);
                        self.note(&seg.path, crate::manifest::INDEX_FILE, found);
                        continue;
                    }
                    for (device, rows) in &e.rows_per_device {
                        let Ok(device) = device.parse::<u32>() else {
                            continue;
                        };
                        out.push(DropRecord {
                            device: DeviceId(device),
                            start_ns,
                            end_ns: end_ns.max(start_ns.saturating_add(1)),
                            reason: DropReason::SegmentUnreadable,
                            lost_samples: Some(*rows),
                        });
                    }
                }
                None if has_footer(&seg.path) => {} // decodable: read, not a hole
                None => {
                    let before = segs[..k].iter().rev().find(|s| usable.contains(&s.path));
                    let after = segs[k + 1..].iter().find(|s| usable.contains(&s.path));
                    let mut ends: BTreeMap<u16, (Option<i64>, Option<i64>)> = BTreeMap::new();
                    if let Some(b) = before {
                        let t = self.sample_times(&b.path)?;
                        for i in 0..t.len() {
                            let e = &mut ends.entry(t.device[i]).or_default().0;
                            *e = Some(e.map_or(t.end_ns[i], |x| x.max(t.end_ns[i])));
                        }
                    }
                    if let Some(a) = after {
                        let t = self.sample_times(&a.path)?;
                        for i in 0..t.len() {
                            let s = &mut ends.entry(t.device[i]).or_default().1;
                            *s = Some(s.map_or(t.start_ns[i], |x| x.min(t.start_ns[i])));
                        }
                    }
                    for (device, (lo, hi)) in ends {
                        let Some(hi) = hi.or(self.manifest.end_unix_ns) else {
                            continue;
                        };
                        let lo = lo.unwrap_or_else(|| {
                            recorded
                                .iter()
                                .filter(|d| d.device.0 == u32::from(device) && d.end_ns <= hi)
                                .map(|d| d.end_ns)
                                .fold(self.manifest.created_unix_ns, i64::max)
                        });
                        if hi > lo {
                            out.push(DropRecord {
                                device: DeviceId(u32::from(device)),
                                start_ns: lo,
                                end_ns: hi,
                                reason: DropReason::SegmentUnreadable,
                                lost_samples: None,
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The devices and times of one verified samples segment.
    fn sample_times(&self, path: &Path) -> Result<SampleColumns> {
        let cols = [
            tables::col::DEVICE,
            tables::col::START_NS,
            tables::col::END_NS,
        ];
        let frame = self.read_segment(path, Some(&cols))?;
        let mut rows = SampleColumns::from_frame(frame, &[])
            .map_err(|why| corrupt(&self.dir, format!("{}: {why}", self.rel(path))))?;
        let found = plausible::screen_samples(&mut rows, &self.span);
        self.note(path, Table::Samples.dir_name(), found);
        Ok(rows)
    }

    /// The rows of a whole table, converted by `rows`.
    fn rows<R: Screen>(&self, table: Table, rows: RowsOf<R>) -> Result<Vec<R>> {
        let mut out = Vec::new();
        self.by_segment(table, rows, |part| out.extend(part))?;
        Ok(out)
    }

    pub fn nvml(&self) -> Result<Vec<NvmlRow>> {
        self.rows(Table::Nvml, tables::rows::<NvmlRow>)
    }

    pub fn nvtx(&self) -> Result<Vec<NvtxRange>> {
        self.rows(Table::Nvtx, tables::rows::<NvtxRange>)
    }

    pub fn kernels(&self) -> Result<Vec<KernelRecord>> {
        self.rows(Table::Kernels, tables::rows::<KernelRecord>)
    }

    /// The kernels one segment at a time, in segment order, so that a reader that keeps them in
    /// a form of its own never holds the whole table twice (a segment is at most a few MB).
    pub fn kernels_by_segment(&self, each: impl FnMut(Vec<KernelRecord>)) -> Result<()> {
        self.by_segment(Table::Kernels, tables::rows::<KernelRecord>, each)
    }

    /// The NVML readings one segment at a time, in segment order (see
    /// [`Trace::kernels_by_segment`]).
    pub fn nvml_by_segment(&self, each: impl FnMut(Vec<NvmlRow>)) -> Result<()> {
        self.by_segment(Table::Nvml, tables::rows::<NvmlRow>, each)
    }

    /// The rows of `table` one verified segment file at a time, converted by `rows`.
    fn by_segment<R: Screen>(
        &self,
        table: Table,
        rows: RowsOf<R>,
        mut each: impl FnMut(Vec<R>),
    ) -> Result<()> {
        let minor = u32::try_from(self.version.minor).unwrap_or(u32::MAX);
        for path in self.verified_paths(table)? {
            let mut frame = self.read_segment(&path, None)?;
            if self.version.is_newer_minor() {
                self.ignore_newer_values(table, &mut frame);
            }
            let mut part = rows(&frame, minor)
                .map_err(|why| corrupt(&self.dir, format!("{}: {why}", self.rel(&path))))?;
            let found = R::screen(&mut part, &self.span);
            self.note(&path, table.dir_name(), found);
            each(part);
        }
        Ok(())
    }

    /// Reads every row of `table` as [`Trace::api_calls`], [`Trace::stacks`] and the others do,
    /// keeping none: a command that does not show a table (`view`, `replay`) refuses what one
    /// that reads it (`report`) refuses, a value no kind has (`gil = maybe`) among it. One
    /// segment in memory at a time.
    pub fn check_rows(&self, table: Table) -> Result<()> {
        match table {
            Table::Samples => {
                self.samples_between(i64::MIN, i64::MAX, &[], |_| Ok::<(), TraceError>(()))
            }
            Table::Drops => self.by_segment(table, tables::rows::<DropRecord>, drop),
            Table::Nvml => self.by_segment(table, tables::rows::<NvmlRow>, drop),
            Table::Nvtx => self.by_segment(table, tables::rows::<NvtxRange>, drop),
            Table::Kernels => self.by_segment(table, tables::rows::<KernelRecord>, drop),
            Table::Api => self.by_segment(table, tables::rows::<ApiCall>, drop),
            Table::Capture => self.by_segment(table, tables::rows::<CaptureEvent>, drop),
            Table::Stacks => self.by_segment(table, tables::rows::<StackFrame>, drop),
            Table::HostSamples => self.by_segment(table, tables::rows::<HostSample>, drop),
        }
    }

    /// CUDA API calls (`--capture api`); empty for traces without them.
    pub fn api_calls(&self) -> Result<Vec<ApiCall>> {
        self.rows(Table::Api, tables::rows::<ApiCall>)
    }

    /// What capture reported per process; empty for traces without capture.
    pub fn capture_events(&self) -> Result<Vec<CaptureEvent>> {
        self.rows(Table::Capture, tables::rows::<CaptureEvent>)
    }

    /// Interned host stacks, one row per frame (`--host-stacks`); empty for traces without them.
    pub fn stacks(&self) -> Result<Vec<StackFrame>> {
        self.rows(Table::Stacks, tables::rows::<StackFrame>)
    }

    /// Samples of the program's host threads (`--host-stacks`); empty for traces without them.
    pub fn host_samples(&self) -> Result<Vec<HostSample>> {
        self.rows(Table::HostSamples, tables::rows::<HostSample>)
    }

    /// The host samples one segment at a time, in segment order (see
    /// [`Trace::kernels_by_segment`]): an hour at 1 kHz of many threads is too many rows, each
    /// with its thread's name, to hold at once.
    pub fn host_samples_by_segment(&self, each: impl FnMut(Vec<HostSample>)) -> Result<()> {
        self.by_segment(Table::HostSamples, tables::rows::<HostSample>, each)
    }

    /// Counts and extents for `cufall info`. Sample counts come from the index where it has
    /// them; the small tables are read.
    pub fn summary(&self) -> Result<TraceSummary> {
        let mut s = TraceSummary::default();
        for id in self.manifest.devices.iter().map(|d| d.id) {
            s.devices.entry(id).or_default();
        }
        let usable = self.verified_paths(Table::Samples)?;
        let mut need_count = false;
        for seg in &self.segments[&Table::Samples] {
            if !usable.contains(&seg.path) {
                continue;
            }
            match &seg.entry {
                Some(e) => {
                    for (d, n) in &e.rows_per_device {
                        let d: u32 = d.parse().unwrap_or(u32::MAX);
                        let count = &mut s.devices.entry(DeviceId(d)).or_default().samples;
                        *count = count.saturating_add(*n);
                    }
                }
                None => need_count = true,
            }
        }
        if need_count {
            // Unindexed segments: count from the data itself.
            for d in s.devices.values_mut() {
                d.samples = 0;
            }
            self.samples_between(i64::MIN, i64::MAX, &[], |part| {
                for d in part.device {
                    s.devices.entry(DeviceId(u32::from(d))).or_default().samples += 1;
                }
                Ok::<(), TraceError>(())
            })?;
        }
        for table in Table::ALL {
            let usable = self.verified_paths(table)?;
            for seg in &self.segments[&table] {
                if !usable.contains(&seg.path) {
                    continue;
                }
                s.segments += 1;
                s.bytes += std::fs::metadata(&seg.path).map(|m| m.len()).unwrap_or(0);
                // Capture rows say how the recording went (a process attached, a window
                // opened); they are not part of the recorded time, which a recording limited
                // to windows starts long after them.
                if table == Table::Capture {
                    continue;
                }
                // Times the recording cannot hold are left out here as in every figure.
                if let Some(e) = &seg.entry {
                    s.first_ns = min_opt(s.first_ns, e.t_min_ns.filter(|t| self.span.holds(*t)));
                    s.last_ns = max_opt(s.last_ns, e.t_max_ns.filter(|t| self.span.holds(*t)));
                }
            }
        }
        for d in self.drops()? {
            let e = s.devices.entry(d.device).or_default();
            e.drops += 1;
            let span = Nanos(d.end_ns.saturating_sub(d.start_ns).max(0));
            e.dropped_ns += span;
            if d.reason == DropReason::Paused {
                e.paused_ns += span;
            }
        }
        for r in self.nvml()? {
            s.devices.entry(r.device).or_default().nvml_rows += 1;
        }
        let mut names: BTreeMap<String, u64> = BTreeMap::new();
        for r in self.nvtx()? {
            *names.entry(r.name).or_default() += 1;
        }
        let mut names: Vec<(String, u64)> = names.into_iter().collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        s.nvtx_names = names;
        // Row counts from the index; a segment it does not describe is decoded to count.
        let usable = self.verified_paths(Table::Kernels)?;
        for seg in &self.segments[&Table::Kernels] {
            if !usable.contains(&seg.path) {
                continue;
            }
            s.kernels = s.kernels.saturating_add(match &seg.entry {
                Some(e) => e.rows,
                None => self
                    .read_segment(&seg.path, Some(&[tables::col::START_NS]))?
                    .height() as u64,
            });
        }
        if s.first_ns.is_none() {
            s.first_ns = Some(self.manifest.created_unix_ns);
            s.last_ns = self.manifest.end_unix_ns;
        }
        Ok(s)
    }
}

/// Threads that decode samples segments ahead of the consumer: one per core but the consumer's,
/// at least 1 and at most 3 (each holds a segment or two in memory, and a short-lived thread's
/// freed memory stays in its own allocator arena). The desktop timeline's peak on a 1-hour,
/// 8-GPU trace (2 cores): 1623 MiB with two decoders and no segment cache, 2222 MiB with two
/// decoders, 4 cached segments and 4 M-sample report windows, 1862 MiB as now (`docs/benchmarks.md`).
fn decode_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).clamp(1, 3))
}

thread_local! {
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is decoding trace data under a panic guard: a panic hook should stay
/// quiet then, because the reader turns the panic into a [`TraceError::Corrupt`] itself.
pub fn in_guarded_decode() -> bool {
    GUARDED.with(|g| g.get())
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Converts a frame of one table, from a trace of the given schema minor, into its rows.
type RowsOf<R> = fn(&Frame, u32) -> Result<Vec<R>, tables::ColumnError>;
