//! Reading `manifest.json` and `index.jsonl`, the two files a trace is opened with: the format
//! name, the schema version (a newer major refused, a newer minor warned about), the fields,
//! and the index of segments. Each problem is said as what it is: a hand edit, damage, or a
//! newer version.

use crate::error::{Result, TraceError, corrupt, cut};
use crate::index::{self, SegmentEntry};
use crate::newer;
use crate::plain::{INDEX_LIMIT, MANIFEST_LIMIT, ReadFail, open_plain, read_plain};
use cufall_model::{FORMAT_NAME, SCHEMA_MAJOR, SCHEMA_MINOR};
use cufall_model::{Manifest, RecordingStatus, SchemaVersion};
use std::path::Path;

/// Name of the metadata file inside a trace folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Name of the segment index inside a trace folder.
pub const INDEX_FILE: &str = "index.jsonl";

/// The manifest's `format` must be cufall's: anything else is not a trace, said as what it is.
fn check_format(dir: &Path, value: &serde_json::Value) -> Result<()> {
    match value.get("format") {
        Some(serde_json::Value::String(f)) if f == FORMAT_NAME => {}
        Some(serde_json::Value::String(f)) if f.is_empty() => {
            return Err(TraceError::NotATrace {
                path: dir.to_path_buf(),
                why: format!("its manifest.json's `format` is empty, not `{FORMAT_NAME}`"),
            });
        }
        Some(serde_json::Value::String(f)) => {
            return Err(TraceError::NotATrace {
                path: dir.to_path_buf(),
                why: format!(
                    "its manifest.json names format `{}`, not `{FORMAT_NAME}`",
                    cut(f, 80)
                ),
            });
        }
        Some(other) => {
            return Err(TraceError::NotATrace {
                path: dir.to_path_buf(),
                why: format!(
                    "its manifest.json's `format` is {}, not the string `{FORMAT_NAME}`",
                    json_kind(other)
                ),
            });
        }
        None => {
            return Err(TraceError::NotATrace {
                path: dir.to_path_buf(),
                why: format!(
                    "its manifest.json has no `format` field (a trace's says `{FORMAT_NAME}`)"
                ),
            });
        }
    }
    Ok(())
}

/// Reads and checks `manifest.json`: the format name, then the schema version (a newer major
/// is refused, a newer minor warned about), then the fields.
pub(crate) fn read_manifest(dir: &Path) -> Result<(Manifest, SchemaVersion, Vec<String>)> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = match read_plain(&manifest_path, MANIFEST_LIMIT) {
        Ok(bytes) => bytes,
        Err(ReadFail::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TraceError::NotATrace {
                path: dir.to_path_buf(),
                why: "the folder has no manifest.json".into(),
            });
        }
        Err(e) => return Err(e.into_error(&manifest_path)),
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| corrupt(&manifest_path, "manifest.json is not UTF-8 text"))?;
    // An editor may add a byte-order mark when the file is saved; JSON readers may ignore it
    // (RFC 8259, 8.1), and nothing else in the file changes with it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        corrupt(
            &manifest_path,
            format!("manifest.json is not valid JSON ({e})"),
        )
    })?;
    if !value.is_object() {
        return Err(TraceError::NotATrace {
            path: dir.to_path_buf(),
            why: format!(
                "its manifest.json holds {}, not the JSON object of a trace's metadata",
                json_kind(&value)
            ),
        });
    }
    check_format(dir, &value)?;
    let version = schema_version(&value).map_err(|why| corrupt(&manifest_path, why.to_string()))?;
    let shown = version.to_string();
    if version.is_newer_major() {
        return Err(TraceError::NewerVersion {
            path: dir.to_path_buf(),
            found: shown,
            supported: SCHEMA_MAJOR,
        });
    }
    let mut warnings = Vec::new();
    if version.is_newer_minor() {
        warnings.push(format!(
            "trace format {shown} is newer than this cufall's {SCHEMA_MAJOR}.{SCHEMA_MINOR}: \
             what it added (columns, tables, values) is ignored; upgrade cufall to see it"
        ));
    }
    let mut value = value;
    if version.is_newer_minor() {
        newer::status(&mut value, &mut warnings);
    }
    if value.get("status").and_then(|s| s.as_str()) == Some("") {
        return Err(corrupt(
            &manifest_path,
            "manifest.json's `status` is empty, where cufall writes `complete` or `recording`",
        ));
    }
    let manifest: Manifest = serde_json::from_value(value)
        .map_err(|e| corrupt(&manifest_path, format!("manifest.json is malformed ({e})")))?;
    // A metric is a column of the samples table, named by it: a nameless one names nothing.
    if let Some(i) = manifest.metric_names().iter().position(|m| m.is_empty()) {
        return Err(corrupt(
            &manifest_path,
            format!(
                "metric {} of manifest.json's `sampling.metrics` has an empty name",
                i + 1
            ),
        ));
    }
    if manifest.status == RecordingStatus::Recording {
        warnings.push(
            "this recording was not closed (its recorder was killed, or is still running): \
             it holds the data up to its last flushed segment"
                .into(),
        );
    }
    Ok((manifest, version, warnings))
}

/// Why the manifest's `schema_version` is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VersionError {
    #[error(
        "schema_version is the number {number}, where cufall writes a string of MAJOR.MINOR (`\"{}\"`)",
        SchemaVersion::CURRENT
    )]
    Number { number: String },
    /// `kind`: what kind of JSON value it is ([`json_kind`]).
    #[error(
        "schema_version is {kind}, where cufall writes a string of MAJOR.MINOR (`\"{}\"`)",
        SchemaVersion::CURRENT
    )]
    NotAString { kind: &'static str },
    #[error("manifest.json has no schema_version")]
    Missing,
    #[error(
        "schema_version is empty, where cufall writes MAJOR.MINOR (`{}`)",
        SchemaVersion::CURRENT
    )]
    Empty,
    /// `text`: the value, cut to 80 characters.
    #[error(
        "schema_version `{text}` is not MAJOR.MINOR (e.g. `{}`)",
        SchemaVersion::CURRENT
    )]
    NotMajorMinor { text: String },
    #[error(
        "schema_version `{version}` is older than any cufall trace (the first was {})",
        cufall_model::SCHEMA_FIRST
    )]
    BeforeFirst { version: SchemaVersion },
}

/// The manifest's `schema_version`, or why it is not one.
fn schema_version(manifest: &serde_json::Value) -> Result<SchemaVersion, VersionError> {
    let text = match manifest.get("schema_version") {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => {
            return Err(VersionError::Number {
                number: n.to_string(),
            });
        }
        Some(other) => {
            return Err(VersionError::NotAString {
                kind: json_kind(other),
            });
        }
        None => return Err(VersionError::Missing),
    };
    if text.is_empty() {
        return Err(VersionError::Empty);
    }
    let version = SchemaVersion::parse(text).ok_or_else(|| VersionError::NotMajorMinor {
        text: cut(text, 80),
    })?;
    if version.is_before_first() {
        return Err(VersionError::BeforeFirst { version });
    }
    Ok(version)
}

/// What kind of JSON value `v` is, for messages.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Reads `index.jsonl`. A missing index is tolerated (with a warning); a bad line is an error
/// that says which line and what is wrong with it, and that deleting the index opens the trace.
/// Entries of tables this cufall does not know are kept out when the trace is of a newer minor
/// version (a table it added).
pub(crate) fn read_index(
    dir: &Path,
    version: SchemaVersion,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<SegmentEntry>>> {
    let index_path = dir.join(INDEX_FILE);
    let mut entries = match open_plain(&index_path, INDEX_LIMIT) {
        Ok(file) => {
            use std::io::Read;
            // A line at a time: an index of a million blank lines costs one line of memory.
            let lines = std::io::BufReader::new(file.take(INDEX_LIMIT.saturating_add(1)));
            index::parse_lines(lines).map_err(|fail| match fail {
                index::ParseFail::Line(bad) => TraceError::BadIndex {
                    path: index_path.clone(),
                    line: bad.line,
                    why: bad.why,
                },
                index::ParseFail::Io(source) => TraceError::Read {
                    path: index_path.clone(),
                    source,
                },
            })?
        }
        // The caller says so once, with the number of segments read without checksums.
        Err(ReadFail::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into_error(&index_path)),
    };
    if version.is_newer_minor() {
        newer::drop_unknown_tables(&mut entries, warnings);
    }
    Ok(Some(entries))
}
