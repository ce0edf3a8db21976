//! `index.jsonl`: the list of finished segments with their sizes and checksums.
//!
//! One JSON object per line, appended after the segment was renamed into place. A line cut short
//! by a crash is ignored. The checksum lets the reader tell a damaged segment from a good one
//! before handing bytes to the Parquet decoder.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One finished segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SegmentEntry {
    pub table: String,
    /// Path relative to the trace folder, e.g. `samples/000003.parquet`.
    pub file: String,
    pub bytes: u64,
    pub crc32: u32,
    pub rows: u64,
    /// Rows per device (device index as a string key, for JSON), for tables with a device column.
    #[serde(default)]
    pub rows_per_device: BTreeMap<String, u64>,
    /// Earliest and latest timestamp in the segment, if it has rows.
    #[serde(default)]
    pub t_min_ns: Option<i64>,
    #[serde(default)]
    pub t_max_ns: Option<i64>,
}

/// Parses an index, skipping a last line cut short by a crash. Any other bad line is reported
/// as `Err(line_number)`.
pub(crate) fn parse(text: &str) -> Result<Vec<SegmentEntry>, usize> {
    let mut entries = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<SegmentEntry>(line) {
            Ok(e) => entries.push(e),
            // The final line has no newline after it: it was being written when the writer died.
            Err(_) if i == last => {}
            Err(_) => return Err(i + 1),
        }
    }
    Ok(entries)
}
