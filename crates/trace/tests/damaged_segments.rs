//! One rule for a segment that is not there whole: listed in the index but missing, cut short,
//! or incomplete without an index. It is left out with one warning naming it, and a samples
//! segment's span becomes a `segment_unreadable` drop; bytes that are there but wrong (changed
//! since written, or not decodable) are refused by every reader, whatever tables it reads.
//! Each case is a damaged copy of a bundled recording with rows in every table.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_trace::model::{DropReason, Nanos};
use cufall_trace::{Table, Trace, TraceError};
use std::fs;
use std::path::{Path, PathBuf};

const EXAMPLE: &str = "h200-torch-phases-api.cufall";

fn example_copy(tmp: &tempfile::TempDir) -> PathBuf {
    cufall_testkit::examples::copy_example(tmp.path(), EXAMPLE)
}

/// The index line of `file`, as JSON.
fn index_entry(dir: &Path, file: &str) -> serde_json::Value {
    let text = fs::read_to_string(dir.join("index.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["file"] == file)
        .unwrap()
}

fn unreadable(trace: &Trace) -> Vec<(i64, i64, Option<u64>)> {
    trace
        .drops()
        .unwrap()
        .into_iter()
        .filter(|d| d.reason == DropReason::SegmentUnreadable)
        .map(|d| (d.start_ns, d.end_ns, d.lost_samples))
        .collect()
}

#[test]
fn a_missing_samples_segment_is_a_drop_over_its_indexed_span() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let whole = Trace::open(&dir).unwrap().summary().unwrap().devices
        [&cufall_trace::model::DeviceId(0)]
        .clone();
    let seg = "samples/000003.parquet";
    let e = index_entry(&dir, seg);
    fs::remove_file(dir.join(seg)).unwrap();

    let trace = Trace::open(&dir).unwrap();
    let (lo, hi) = (
        e["t_min_ns"].as_i64().unwrap(),
        e["t_max_ns"].as_i64().unwrap(),
    );
    let rows = e["rows"].as_u64().unwrap();
    assert_eq!(unreadable(&trace), [(lo, hi, Some(rows))]);
    let s = trace.summary().unwrap();
    let gpu = &s.devices[&cufall_trace::model::DeviceId(0)];
    assert_eq!(gpu.samples, whole.samples - rows);
    assert_eq!(gpu.dropped_ns, whole.dropped_ns + Nanos(hi - lo));
    let w = trace.warnings();
    let named: Vec<&String> = w.iter().filter(|w| w.contains(seg)).collect();
    assert_eq!(named.len(), 1, "{w:?}");
    assert!(
        named[0].contains("missing") && named[0].contains("segment_unreadable"),
        "{w:?}"
    );
    // The rest reads.
    assert_eq!(
        trace.samples(&[]).unwrap().len() as u64,
        whole.samples - rows
    );
}

#[test]
fn without_the_index_a_cut_samples_segment_is_a_drop_between_its_neighbours() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let full = Trace::open(&dir).unwrap();
    // The samples of segments 2 and 4 bound the hole segment 3 leaves.
    let bound = |seg: &str| {
        let e = index_entry(&dir, seg);
        (
            e["t_min_ns"].as_i64().unwrap(),
            e["t_max_ns"].as_i64().unwrap(),
        )
    };
    let (_, before_max) = bound("samples/000002.parquet");
    let (after_min, _) = bound("samples/000004.parquet");
    drop(full);
    fs::remove_file(dir.join("index.jsonl")).unwrap();
    let seg = dir.join("samples/000003.parquet");
    let bytes = fs::read(&seg).unwrap();
    fs::write(&seg, &bytes[..bytes.len() / 2]).unwrap();

    let trace = Trace::open(&dir).unwrap();
    let holes = unreadable(&trace);
    assert_eq!(holes.len(), 1, "{holes:?}");
    let (lo, hi, lost) = holes[0];
    // The last sample before ends at or just after the index's latest start; the first after
    // starts at the index's earliest start.
    assert!(
        lo >= before_max && lo - before_max < 1_000_000,
        "{lo} {before_max}"
    );
    assert_eq!(hi, after_min);
    assert_eq!(lost, None, "how many samples it held is unknown");
    // One warning for the missing index, one for the cut segment: not one per segment.
    let w = trace.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("index.jsonl is missing"), "{w:?}");
    assert!(
        w[1].contains("samples/000003.parquet") && w[1].contains("segment_unreadable"),
        "{w:?}"
    );
    assert!(
        trace.summary().unwrap().devices[&cufall_trace::model::DeviceId(0)].dropped_ns
            >= Nanos(hi - lo)
    );
}

#[test]
fn a_segment_that_cannot_be_decoded_is_refused_by_every_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    // Without the index nothing is checksummed: the footer is what tells the damage.
    fs::remove_file(dir.join("index.jsonl")).unwrap();
    let seg = dir.join("kernels/000000.parquet");
    let mut bytes = fs::read(&seg).unwrap();
    let n = bytes.len();
    for b in &mut bytes[n - 40..n - 8] {
        *b ^= 0x5a;
    }
    fs::write(&seg, &bytes).unwrap();
    let trace = Trace::open(&dir).unwrap();
    for err in [
        trace.check().unwrap_err(),
        trace.summary().unwrap_err(),
        trace.kernels().unwrap_err(),
    ] {
        assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("kernels/000000.parquet"), "{err}");
    }
    // A table the damage is not in reads.
    assert!(!trace.nvtx().unwrap().is_empty());
}

#[test]
fn changed_bytes_of_a_table_a_reader_skips_are_refused_by_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let seg = dir.join("api/000000.parquet");
    let mut bytes = fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&seg, &bytes).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let err = trace.check().unwrap_err();
    assert!(
        err.to_string()
            .contains("api/000000.parquet fails its checksum"),
        "{err}"
    );
    assert!(trace.frame(Table::Api).is_err());
}

/// Without the index, a cut first samples segment starts where the warm-up drop before it ends,
/// not at the recording's creation.
#[test]
fn without_the_index_a_cut_first_segment_starts_after_the_warm_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example_copy(&tmp);
    let e = index_entry(&dir, "samples/000000.parquet");
    let (first, last) = (
        e["t_min_ns"].as_i64().unwrap(),
        e["t_max_ns"].as_i64().unwrap(),
    );
    fs::remove_file(dir.join("index.jsonl")).unwrap();
    let seg = dir.join("samples/000000.parquet");
    fs::write(&seg, &fs::read(&seg).unwrap()[..3000]).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let holes = unreadable(&trace);
    assert_eq!(holes.len(), 1, "{holes:?}");
    let (lo, hi, _) = holes[0];
    assert_eq!(lo, first, "the warm-up drop ends at the first sample");
    assert!(hi >= last && hi - last < 1_000_000, "{hi} {last}");
}
