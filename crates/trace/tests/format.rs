//! The trace format contract: round trips, crash tolerance, corruption, versioning.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_testkit::tables as common;

use common::*;
use cufall_testkit::examples::copy_dir;
use cufall_trace::model::{HostFrames, HostStacksMeta, RecordingStatus};
use cufall_trace::{
    SCHEMA_MAJOR, SCHEMA_MINOR, Table, Trace, TraceError, TraceWriter, WriterOptions,
};
use std::fs;

#[test]
fn every_table_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t.cufall");
    let stats = write_full(&dir, 3);
    assert_eq!(stats.samples, 6000);

    let trace = Trace::open(&dir).unwrap();
    assert_eq!(trace.manifest(), &{
        let mut m = manifest(2);
        m.status = RecordingStatus::Complete;
        m.end_unix_ns = Some(T0 + 1_000_000_000);
        m
    });
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());

    let batches = trace.sample_batches().unwrap();
    assert_eq!(batches.len(), 2);
    for (d, batch) in batches.iter().enumerate() {
        let mut expected = samples(d as u32, 0, 3000);
        expected.device = batch.device;
        assert_eq!(batch, &expected);
    }
    assert_eq!(trace.drops().unwrap(), drops());
    assert_eq!(trace.nvml().unwrap(), nvml());
    assert_eq!(trace.nvtx().unwrap(), nvtx());
    assert_eq!(trace.kernels().unwrap(), kernels());
    assert_eq!(trace.stacks().unwrap(), stacks());
    assert_eq!(trace.host_samples().unwrap(), host_samples());
    let mut by_segment = Vec::new();
    trace.kernels_by_segment(|k| by_segment.extend(k)).unwrap();
    assert_eq!(by_segment, kernels());
    let mut nvml_parts = Vec::new();
    trace.nvml_by_segment(|r| nvml_parts.extend(r)).unwrap();
    assert_eq!(nvml_parts, nvml());

    let s = trace.summary().unwrap();
    assert_eq!(s.devices[&cufall_trace::model::DeviceId(0)].samples, 3000);
    assert_eq!(s.devices[&cufall_trace::model::DeviceId(1)].samples, 3000);
    assert_eq!(s.devices[&cufall_trace::model::DeviceId(1)].drops, 1);
    assert_eq!(
        s.devices[&cufall_trace::model::DeviceId(1)].dropped_ns,
        cufall_trace::model::Nanos(200_000)
    );
    assert_eq!(s.kernels, 2);
    assert_eq!(s.nvtx_names.len(), 2);
}

#[test]
fn empty_tables_read_as_typed_empty_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("e.cufall");
    let w = TraceWriter::create(&dir, manifest(1), WriterOptions::default()).unwrap();
    w.finish(T0).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let rows = trace.samples(&METRICS).unwrap();
    assert_eq!(rows.len(), 0);
    assert_eq!(rows.values.len(), METRICS.len());
    let df = trace.frame(Table::Samples).unwrap();
    assert_eq!(df.height(), 0);
    assert_eq!(df.columns.len(), 2 + 1 + METRICS.len());
    assert!(trace.nvtx().unwrap().is_empty());
    assert_eq!(
        trace.summary().unwrap().devices[&cufall_trace::model::DeviceId(0)].samples,
        0
    );
}

#[test]
fn unknown_metric_lists_the_recorded_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m.cufall");
    write_full(&dir, 1);
    let trace = Trace::open(&dir).unwrap();
    let err = trace.samples(&["sm__cycles_active.avg"]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TraceError::UnknownMetric { .. }));
    assert!(
        msg.contains("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "{msg}"
    );
}

/// A recording killed without `finish` keeps everything flushed, and says it was not closed.
#[test]
fn unfinished_recording_keeps_flushed_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("k.cufall");
    let mut w = TraceWriter::create(&dir, manifest(1), WriterOptions::default()).unwrap();
    w.append_samples(&samples(0, 0, 500)).unwrap();
    w.flush().unwrap();
    w.append_samples(&samples(0, 500, 500)).unwrap(); // buffered only: lost in the "crash"
    std::mem::forget(w);
    let trace = Trace::open(&dir).unwrap();
    assert_eq!(trace.sample_batches().unwrap()[0].len(), 500);
    assert!(trace.warnings().iter().any(|w| w.contains("not closed")));
}

/// Cutting any segment at any byte offset: the trace still opens and yields every complete
/// segment; the cut one is skipped with a warning naming it.
#[test]
fn cut_segments_yield_every_complete_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.cufall");
    write_full(&src, 3);
    let seg = src.join("samples/000001.parquet");
    let full = fs::read(&seg).unwrap();
    let step = (full.len() / 37).max(1);
    for cut in (0..full.len()).step_by(step).chain([full.len() - 1]) {
        let dir = tmp.path().join(format!("cut{cut}.cufall"));
        copy_dir(&src, &dir);
        fs::write(dir.join("samples/000001.parquet"), &full[..cut]).unwrap();
        let trace = Trace::open(&dir).unwrap();
        let batches = trace.sample_batches().unwrap();
        let n: usize = batches.iter().map(|b| b.len()).sum();
        assert_eq!(n, 4000, "cut at {cut}: segments 0 and 2 remain");
        assert!(
            trace
                .warnings()
                .iter()
                .any(|w| w.contains("samples/000001.parquet")),
            "cut at {cut}: {:?}",
            trace.warnings()
        );
        // The other tables are untouched.
        assert_eq!(trace.nvtx().unwrap().len(), 2);
    }
}

/// The index itself cut mid-line (the writer died while appending): earlier lines count.
#[test]
fn cut_index_line_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i.cufall");
    write_full(&dir, 2);
    let idx = dir.join("index.jsonl");
    let text = fs::read(&idx).unwrap();
    fs::write(&idx, &text[..text.len() - 20]).unwrap();
    let trace = Trace::open(&dir).unwrap();
    // The last indexed segment lost its line: it is still read (its Parquet footer is intact),
    // with a warning that it has no checksum.
    assert_eq!(trace.summary().unwrap().kernels, 2);
    assert!(
        trace
            .warnings()
            .iter()
            .any(|w| w.contains("without a checksum"))
    );
}

#[test]
fn changed_bytes_are_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.cufall");
    write_full(&src, 2);
    let seg = "samples/000000.parquet";
    let full = fs::read(src.join(seg)).unwrap();
    for (i, at) in [0, 4, full.len() / 3, full.len() / 2, full.len() - 5]
        .into_iter()
        .enumerate()
    {
        let dir = tmp.path().join(format!("bad{i}.cufall"));
        copy_dir(&src, &dir);
        let mut bytes = full.clone();
        bytes[at] ^= 0x5a;
        fs::write(dir.join(seg), &bytes).unwrap();
        let trace = Trace::open(&dir).unwrap();
        let err = trace.sample_batches().unwrap_err();
        assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(seg), "{err}");
    }
}

#[test]
fn garbage_files_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    // Garbage manifest.
    let dir = tmp.path().join("g1.cufall");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("manifest.json"), [0xff, 0x00, 0x13, 0x37]).unwrap();
    assert!(matches!(Trace::open(&dir), Err(TraceError::Corrupt { .. })));
    // Manifest of another format.
    fs::write(dir.join("manifest.json"), r#"{"format":"something-else"}"#).unwrap();
    assert!(matches!(
        Trace::open(&dir),
        Err(TraceError::NotATrace { .. })
    ));
    // Garbage index.
    let src = tmp.path().join("src.cufall");
    write_full(&src, 1);
    let dir = tmp.path().join("g2.cufall");
    copy_dir(&src, &dir);
    fs::write(dir.join("index.jsonl"), "not json\n{}\n").unwrap();
    assert!(matches!(
        Trace::open(&dir),
        Err(TraceError::BadIndex { line: 1, .. })
    ));
    // Unindexed garbage segment with Parquet magic at both ends: must fail cleanly.
    let dir = tmp.path().join("g3.cufall");
    copy_dir(&src, &dir);
    fs::write(dir.join("index.jsonl"), "").unwrap();
    let mut junk = b"PAR1".to_vec();
    junk.extend((0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    junk.extend(b"PAR1");
    fs::write(dir.join("samples/000000.parquet"), &junk).unwrap();
    let trace = Trace::open(&dir).unwrap();
    assert!(matches!(
        trace.sample_batches(),
        Err(TraceError::Corrupt { .. })
    ));
}

#[test]
fn missing_paths_and_non_traces_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.cufall");
    let err = Trace::open(&missing).err().unwrap();
    assert!(matches!(err, TraceError::NotFound(_)));
    assert!(err.to_string().contains("nope.cufall"));

    let plain = tmp.path().join("plain");
    fs::create_dir(&plain).unwrap();
    let err = Trace::open(&plain).err().unwrap();
    assert!(err.to_string().contains("no manifest.json"), "{err}");

    let file = tmp.path().join("file.txt");
    fs::write(&file, "hello").unwrap();
    let err = Trace::open(&file).err().unwrap();
    assert!(err.to_string().contains("is a file"), "{err}");
}

/// The manifest's `host_stacks` (1.4), set as a recording starts and replaced at its end,
/// reads back as written; a manifest without it reads as `None`.
#[test]
fn the_host_stacks_field_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("h.cufall");
    let mut m = manifest(1);
    assert_eq!(m.host_stacks, None);
    m.host_stacks = Some(HostStacksMeta {
        interval_ns: 1_000_000,
        frames: HostFrames::Mixed,
        off_reason: None,
    });
    let mut w = TraceWriter::create(&dir, m, WriterOptions::default()).unwrap();
    let end = HostStacksMeta {
        interval_ns: 250_000,
        frames: HostFrames::Mixed,
        off_reason: Some("no permission to read the memory of process 1234".into()),
    };
    w.update_manifest(|m| m.host_stacks = Some(end.clone()))
        .unwrap();
    w.finish(T0 + 1).unwrap();
    let trace = Trace::open(&dir).unwrap();
    assert_eq!(trace.manifest().host_stacks, Some(end));
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    let text = fs::read_to_string(dir.join("manifest.json")).unwrap();
    assert!(text.contains("\"off_reason\""), "{text}");
}

#[test]
fn newer_major_is_refused_newer_minor_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v.cufall");
    write_full(&dir, 1);
    let path = dir.join("manifest.json");
    let text = fs::read_to_string(&path).unwrap();
    let current = format!("\"{}.{}\"", SCHEMA_MAJOR, SCHEMA_MINOR);
    fs::write(&path, text.replace(&current, "\"2.0\"")).unwrap();
    let err = Trace::open(&dir).err().unwrap();
    assert!(matches!(err, TraceError::NewerVersion { .. }));
    assert!(err.to_string().contains("Upgrade cufall"), "{err}");

    fs::write(&path, text.replace(&current, "\"1.7\"")).unwrap();
    let trace = Trace::open(&dir).unwrap();
    assert!(trace.warnings().iter().any(|w| w.contains("1.7")));
}

#[test]
fn existing_output_is_not_replaced_without_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("o.cufall");
    write_full(&dir, 1);
    let err = TraceWriter::create(&dir, manifest(1), WriterOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, TraceError::AlreadyExists(_)));
    let w = TraceWriter::create(
        &dir,
        manifest(1),
        WriterOptions {
            overwrite: true,
            ..Default::default()
        },
    )
    .unwrap();
    w.finish(T0).unwrap();
    // Nothing of the old trace is left: one empty, schema-only segment per table.
    let replaced = Trace::open(&dir).unwrap();
    assert_eq!(
        replaced.summary().unwrap().segments,
        Table::ALL.len() as u64
    );
    for t in Table::ALL {
        assert_eq!(replaced.frame(t).unwrap().height(), 0, "{t:?}");
    }

    // A non-trace is never replaced, even with overwrite.
    let other = tmp.path().join("precious");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("thesis.tex"), "…").unwrap();
    let res = TraceWriter::create(
        &other,
        manifest(1),
        WriterOptions {
            overwrite: true,
            ..Default::default()
        },
    );
    assert!(res.is_err());
    assert!(other.join("thesis.tex").exists());
}

#[test]
fn unwritable_output_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    fs::write(&file, "x").unwrap();
    // A path under a regular file cannot be created.
    let err = TraceWriter::create(file.join("t.cufall"), manifest(1), WriterOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, TraceError::Write { .. }), "{err}");
    assert!(err.to_string().contains("cannot write"), "{err}");
}

#[test]
fn abandon_removes_the_partial_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a.cufall");
    let w = TraceWriter::create(&dir, manifest(1), WriterOptions::default()).unwrap();
    w.abandon();
    assert!(!dir.exists());
}

#[test]
fn a_scan_selects_one_metric_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("l.cufall");
    write_full(&dir, 4);
    let trace = Trace::open(&dir).unwrap();
    let rows = trace.samples(&[METRICS[1]]).unwrap();
    assert_eq!(rows.len(), 8000);
    assert_eq!(rows.values.len(), 1);
    let all = trace.samples(&METRICS).unwrap();
    assert_eq!(rows.values[0], all.values[1]);
    // A metric asked for twice comes twice.
    let twice = trace.samples(&[METRICS[0], METRICS[0]]).unwrap();
    assert_eq!(twice.values[0], all.values[0]);
    assert_eq!(twice.values[1], all.values[0]);
}

#[test]
fn a_scan_between_two_times_reads_the_rows_a_whole_scan_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w.cufall");
    write_full(&dir, 4);
    let trace = Trace::open(&dir).unwrap();
    let all = trace.samples(&METRICS).unwrap();
    let starts = &all.start_ns;
    let (first, last) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
    let span = last - first;
    let cuts = [
        (i64::MIN, first + 1),
        (first, first + span / 4),
        (first + span / 3, first + span / 3 + 1),
        (first + span / 2, last),
        (last, i64::MAX),
        (last + 1, i64::MAX),
    ];
    for (lo, hi) in cuts {
        let mut whole = all.clone();
        whole.retain_between(lo, hi);
        let mut part = cufall_trace::SampleColumns::new(METRICS.len());
        trace
            .samples_between(lo, hi, &METRICS, |p| {
                part.device.extend(p.device);
                part.start_ns.extend(p.start_ns);
                part.end_ns.extend(p.end_ns);
                for (a, b) in part.values.iter_mut().zip(p.values) {
                    a.extend(b);
                }
                Ok::<(), cufall_trace::TraceError>(())
            })
            .unwrap();
        assert_eq!(whole, part, "rows starting in [{lo}, {hi})");
    }
}
