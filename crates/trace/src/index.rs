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

/// A line of the index that is not a segment entry: its number (from 1) and what is wrong.
#[derive(Debug)]
pub(crate) struct BadLine {
    pub line: usize,
    pub why: String,
}

/// Parses an index, skipping a last line cut short by a crash. Any other bad line is reported
/// with its number and the field at fault.
pub(crate) fn parse(text: &str) -> Result<Vec<SegmentEntry>, BadLine> {
    let mut entries = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<SegmentEntry>(line) {
            Ok(e) => match inconsistent(&e) {
                None => entries.push(e),
                Some(why) => return Err(BadLine { line: i + 1, why }),
            },
            // The final line has no newline after it: it was being written when the writer died.
            Err(_) if i == last => {}
            Err(e) => {
                return Err(BadLine {
                    line: i + 1,
                    why: explain(line, &e),
                });
            }
        }
    }
    Ok(entries)
}

/// What is wrong with an entry whose fields parse but do not agree with each other: counts
/// per device that are not device numbers or do not add up to the rows, or a time span that
/// ends before it starts. The reader sums these counts and spans; an index that disagrees
/// with itself was not written by cufall.
fn inconsistent(e: &SegmentEntry) -> Option<String> {
    let mut sum: u64 = 0;
    for (device, rows) in &e.rows_per_device {
        if device.parse::<u16>().is_err() {
            return Some(format!(
                "field `rows_per_device` has key {}, not a device number",
                shown(&serde_json::Value::from(device.as_str()))
            ));
        }
        let Some(more) = sum.checked_add(*rows) else {
            return Some("field `rows_per_device` adds up to more than 2^64 rows".into());
        };
        sum = more;
    }
    if !e.rows_per_device.is_empty() && sum != e.rows {
        return Some(format!(
            "field `rows_per_device` adds up to {sum} rows, not the {} of field `rows`",
            e.rows
        ));
    }
    if let (Some(lo), Some(hi)) = (e.t_min_ns, e.t_max_ns)
        && lo > hi
    {
        return Some(format!(
            "field `t_min_ns` ({lo}) is after field `t_max_ns` ({hi})"
        ));
    }
    None
}

/// What is wrong with a line that did not parse as a [`SegmentEntry`], naming the field at
/// fault where there is one (serde's message names the type it expected, not the field).
fn explain(line: &str, err: &serde_json::Error) -> String {
    use serde_json::Value;
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return format!("not valid JSON: {err}");
    };
    let Value::Object(fields) = value else {
        return "not a JSON object".into();
    };
    fn check<T: serde::de::DeserializeOwned>(v: &Value) -> bool {
        serde_json::from_value::<T>(v.clone()).is_ok()
    }
    /// A field's name, whether a value fits it, and what it should be.
    type Rule<'a> = (&'a str, fn(&Value) -> bool, &'a str);
    let required: [Rule; 5] = [
        ("table", check::<String>, "a string"),
        ("file", check::<String>, "a string"),
        ("bytes", check::<u64>, "a whole number of bytes"),
        ("crc32", check::<u32>, "a CRC-32, a whole number below 2^32"),
        ("rows", check::<u64>, "a whole number of rows"),
    ];
    for (name, ok, want) in required {
        match fields.get(name) {
            None => return format!("field `{name}` is missing"),
            Some(v) if !ok(v) => return format!("field `{name}` is {}, not {want}", shown(v)),
            Some(_) => {}
        }
    }
    let optional: [Rule; 3] = [
        (
            "rows_per_device",
            check::<BTreeMap<String, u64>>,
            "an object of row counts",
        ),
        (
            "t_min_ns",
            check::<Option<i64>>,
            "a timestamp in nanoseconds or null",
        ),
        (
            "t_max_ns",
            check::<Option<i64>>,
            "a timestamp in nanoseconds or null",
        ),
    ];
    for (name, ok, want) in optional {
        if let Some(v) = fields.get(name)
            && !ok(v)
        {
            return format!("field `{name}` is {}, not {want}", shown(v));
        }
    }
    err.to_string()
}

/// A JSON value as it appears in the line, cut to 40 characters.
fn shown(v: &serde_json::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
