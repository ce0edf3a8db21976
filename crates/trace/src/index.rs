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

/// The longest index line read: an entry is about 250 bytes (a few more per GPU in
/// `rows_per_device`); a longer line is not one cufall wrote, and is not read further.
pub(crate) const LINE_LIMIT: usize = 64 << 10;

/// Why an index could not be parsed: a bad line, or the file could not be read.
#[derive(Debug)]
pub(crate) enum ParseFail {
    Line(BadLine),
    Io(std::io::Error),
}

/// Parses an index a line at a time, skipping a last line cut short by a crash; any other bad
/// line is reported with its number and the field at fault. Memory stays that of one line and
/// the entries, whatever the file holds (250 MB of blank lines read in constant memory).
pub(crate) fn parse_lines(mut r: impl std::io::BufRead) -> Result<Vec<SegmentEntry>, ParseFail> {
    let mut entries = Vec::new();
    let mut raw = Vec::new();
    let mut number = 0usize;
    loop {
        raw.clear();
        number += skip_newlines(&mut r).map_err(ParseFail::Io)? + 1;
        let ended = read_line(&mut r, &mut raw).map_err(ParseFail::Io)?;
        if raw.is_empty() && !ended {
            return Ok(entries);
        }
        if raw.len() > LINE_LIMIT {
            return Err(ParseFail::Line(BadLine {
                line: number,
                why: format!("longer than {LINE_LIMIT} bytes, which no segment entry is"),
            }));
        }
        let text = String::from_utf8_lossy(&raw);
        let mut line: &str = &text;
        if number == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<SegmentEntry>(line) {
            Ok(e) => match inconsistent(&e) {
                None => entries.push(e),
                Some(why) => return Err(ParseFail::Line(BadLine { line: number, why })),
            },
            // The final line has no newline after it: it was being written when the writer died.
            Err(_) if !ended => return Ok(entries),
            Err(e) => {
                return Err(ParseFail::Line(BadLine {
                    line: number,
                    why: explain(line, &e),
                }));
            }
        }
    }
}

/// Skips empty lines a buffer at a time (an index padded with millions of them reads in a
/// moment); how many.
fn skip_newlines(r: &mut impl std::io::BufRead) -> std::io::Result<usize> {
    let mut skipped = 0;
    loop {
        let n = match r.fill_buf() {
            Ok(buf) => buf.iter().take_while(|b| **b == b'\n').count(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(skipped);
        }
        r.consume(n);
        skipped += n;
    }
}

/// Reads one line into `out` without its `\n`, keeping at most [`LINE_LIMIT`] + 1 bytes of it
/// (the rest is skipped); whether the line ended with a newline.
fn read_line(r: &mut impl std::io::BufRead, out: &mut Vec<u8>) -> std::io::Result<bool> {
    loop {
        let (used, ended) = {
            let buf = match r.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(false);
            }
            let (line, ended) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            let room = (LINE_LIMIT + 1).saturating_sub(out.len());
            out.extend_from_slice(&line[..line.len().min(room)]);
            (ended.unwrap_or(buf.len()), ended.is_some())
        };
        r.consume(used);
        if ended {
            return Ok(true);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"table":"nvml","file":"nvml/000000.parquet","bytes":3819,"crc32":1,"rows":2,"rows_per_device":{"0":2},"t_min_ns":5,"t_max_ns":9}"#;

    fn parse(text: &str) -> Result<Vec<SegmentEntry>, ParseFail> {
        parse_lines(text.as_bytes())
    }

    /// What a failed parse says: the line and why.
    fn said(r: Result<Vec<SegmentEntry>, ParseFail>) -> String {
        match r {
            Ok(entries) => panic!("parsed {} entries", entries.len()),
            Err(ParseFail::Line(bad)) => format!("line {}: {}", bad.line, bad.why),
            Err(ParseFail::Io(e)) => e.to_string(),
        }
    }

    #[test]
    fn lines_blank_lines_a_cut_last_line_and_a_bom() {
        assert_eq!(
            parse(&format!("\u{feff}{LINE}\n\n  \n{LINE}\n"))
                .unwrap()
                .len(),
            2
        );
        assert_eq!(parse(&format!("{LINE}\n{}", &LINE[..40])).unwrap().len(), 1);
        assert_eq!(parse(LINE).unwrap().len(), 1);
        assert_eq!(
            said(parse(&format!("{LINE}\n{}\n{LINE}\n", &LINE[..40]))),
            "line 2: not valid JSON: EOF while parsing a string at line 1 column 40"
        );
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn a_long_line_is_refused_after_its_limit() {
        let long = format!("{LINE}{}\n", " ".repeat(LINE_LIMIT));
        assert_eq!(
            said(parse(&format!("{LINE}\n{long}"))),
            format!("line 2: longer than {LINE_LIMIT} bytes, which no segment entry is")
        );
    }

    #[test]
    fn many_blank_lines_read_in_the_memory_of_one() {
        // 64 MiB of newlines through a reader that makes them as asked: nothing is held, and
        // the line numbers still count them.
        struct Newlines(usize);
        impl std::io::Read for Newlines {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0);
                buf[..n].fill(b'\n');
                self.0 -= n;
                Ok(n)
            }
        }
        let r = std::io::BufReader::new(std::io::Read::chain(Newlines(64 << 20), LINE.as_bytes()));
        assert_eq!(parse_lines(r).unwrap().len(), 1);
        let bad = format!("{}{}\n", "\n".repeat(1000), &LINE[..40]);
        assert!(said(parse(&bad)).starts_with("line 1001: "));
    }
}
