//! The bundled real recordings (`examples/`), copied for tests that damage or edit them.

use std::path::{Path, PathBuf};

/// The repository's `examples/` folder.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Copies the folder `from` into `to`, recursively (a trace is a folder of folders of files).
///
/// # Panics
/// On any I/O error: this is for tests, which should fail loudly.
#[allow(clippy::unwrap_used)]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// A copy of the bundled recording `name` (e.g. `h200-torch-phases-api.cufall`) in `into`.
pub fn copy_example(into: &Path, name: &str) -> PathBuf {
    let dir = into.join(name);
    copy_dir(&examples_dir().join(name), &dir);
    dir
}

/// Rewrites the `manifest.json` of the trace folder `dir` after `edit` changed its JSON.
///
/// # Panics
/// When the manifest cannot be read, parsed or written: this is for tests.
#[allow(clippy::unwrap_used)]
pub fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A copy of the recording at `from`, written at `to` as if another host had made it: its
/// manifest names `host`, its GPUs get UUIDs of their own, its clock error reads `clock_us`
/// microseconds, and every timestamp lies `offset_ns` later (a node whose phases end later, or
/// whose clock runs ahead). For tests of several nodes' recordings read together.
///
/// # Panics
/// On any error: this is for tests, which should fail loudly.
#[allow(clippy::unwrap_used)]
pub fn as_node(from: &Path, to: &Path, host: &str, offset_ns: i64, clock_us: i64) {
    use cufall_trace::model::RecordingStatus;
    use cufall_trace::{Trace, TraceWriter, WriterOptions};
    let t = Trace::open(from).unwrap();
    let mut m = t.manifest().clone();
    m.hostname = host.to_string();
    m.created_unix_ns += offset_ns;
    m.status = RecordingStatus::Recording;
    let end = m.end_unix_ns.take().map(|e| e + offset_ns);
    for d in &mut m.devices {
        d.uuid = format!("GPU-{host}-{}", d.id.0);
    }
    for (k, v) in [
        ("clock_max_error_us", clock_us.to_string()),
        ("clock_est_error_us", (clock_us / 10).to_string()),
        ("clock_synchronised", "yes".to_string()),
    ] {
        m.extra.insert(k.into(), v);
    }
    let mut w = TraceWriter::create(to, m, WriterOptions::default()).unwrap();
    for mut b in t.sample_batches().unwrap() {
        b.start_ns.iter_mut().for_each(|x| *x += offset_ns);
        b.end_ns.iter_mut().for_each(|x| *x += offset_ns);
        w.append_samples(&b).unwrap();
    }
    let mut drops = t.drops().unwrap();
    drops.iter_mut().for_each(|r| {
        r.start_ns += offset_ns;
        r.end_ns += offset_ns;
    });
    w.append_drops(&drops).unwrap();
    let mut nvml = t.nvml().unwrap();
    nvml.iter_mut().for_each(|r| r.t_ns += offset_ns);
    w.append_nvml(&nvml).unwrap();
    let mut nvtx = t.nvtx().unwrap();
    nvtx.iter_mut().for_each(|r| {
        r.start_ns += offset_ns;
        r.end_ns += offset_ns;
    });
    w.append_nvtx(&nvtx).unwrap();
    let mut kernels = t.kernels().unwrap();
    kernels.iter_mut().for_each(|r| {
        r.start_ns += offset_ns;
        r.end_ns += offset_ns;
    });
    w.append_kernels(&kernels).unwrap();
    let mut api = t.api_calls().unwrap();
    api.iter_mut().for_each(|r| {
        r.start_ns += offset_ns;
        r.end_ns += offset_ns;
    });
    w.append_api(&api).unwrap();
    let mut capture = t.capture_events().unwrap();
    capture.iter_mut().for_each(|r| r.t_ns += offset_ns);
    w.append_capture(&capture).unwrap();
    w.finish(end.unwrap_or(0)).unwrap();
}

/// Rows written by `add` through the crate's own writer, added to the trace copy at `trace` as
/// new segments (named `TABLE/9NNNNN.parquet`, listed in its index as the writer lists them),
/// beside its own: valid Parquet with values of the test's choosing, which the reader takes as
/// recorded. With `replace`, the segments of every table `add` wrote rows to are removed first
/// (files and index lines), so that the new rows are the table's only ones.
///
/// # Panics
/// On any error: this is for tests, which should fail loudly.
#[allow(clippy::unwrap_used)]
pub fn splice_rows(trace: &Path, replace: bool, add: impl FnOnce(&mut cufall_trace::TraceWriter)) {
    use cufall_trace::{Trace, TraceWriter, WriterOptions};
    let manifest = Trace::open(trace).unwrap().manifest().clone();
    let scratch = trace.with_extension("extra");
    let mut w = TraceWriter::create(&scratch, manifest, WriterOptions::default()).unwrap();
    add(&mut w);
    w.finish(0).unwrap();
    let extra = std::fs::read_to_string(scratch.join("index.jsonl")).unwrap();
    let entries: Vec<serde_json::Value> = extra
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["rows"].as_u64() != Some(0))
        .collect();
    let tables: Vec<String> = entries
        .iter()
        .map(|e| e["table"].as_str().unwrap().to_string())
        .collect();
    let mut index = std::fs::read_to_string(trace.join("index.jsonl")).unwrap();
    if replace {
        let mut kept = String::new();
        for line in index.lines() {
            let e: serde_json::Value = serde_json::from_str(line).unwrap();
            let table = e["table"].as_str().unwrap_or_default();
            if tables.iter().any(|t| t == table) {
                std::fs::remove_file(trace.join(e["file"].as_str().unwrap())).unwrap();
            } else {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        index = kept;
    }
    for (i, mut e) in entries.into_iter().enumerate() {
        let file = e["file"].as_str().unwrap().to_string();
        let table = file.split('/').next().unwrap();
        let renamed = format!("{table}/9{i:05}.parquet");
        // The writer gives every table of its format a segment; the copy may predate some.
        std::fs::create_dir_all(trace.join(table)).unwrap();
        std::fs::copy(scratch.join(&file), trace.join(&renamed)).unwrap();
        e["file"] = renamed.into();
        index.push_str(&format!("{e}\n"));
    }
    std::fs::write(trace.join("index.jsonl"), index).unwrap();
    std::fs::remove_dir_all(scratch).unwrap();
}

/// Every segment of the table `table` (its folder name) of the trace copy at `trace` encoded
/// again with each text value `placeholder` written as `long` instead, one buffer that every row
/// shares through the segment's dictionary (its index line given the new size and checksum): a
/// small file whose rows name a long string thousands of times, written without holding a copy
/// per row; or a kind column's value the writer's types cannot hold (`gil` = `maybe`).
///
/// # Panics
/// On any error: this is for tests.
#[allow(clippy::unwrap_used)]
pub fn rewrite_text(trace: &Path, table: &str, placeholder: &str, long: Vec<u8>) {
    use cufall_trace::parquet::{ByteArray, ParquetWriter, read_frame};
    let shared = ByteArray::from(long);
    let index = std::fs::read_to_string(trace.join("index.jsonl")).unwrap();
    let mut out = String::new();
    for line in index.lines() {
        let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
        if e["table"] == table {
            let path = trace.join(e["file"].as_str().unwrap());
            let frame = read_frame(std::fs::read(&path).unwrap().into(), None).unwrap();
            let mut w = ParquetWriter::new(Vec::new(), &frame.schema()).unwrap();
            w.write_with(&frame, &|s| {
                if s == placeholder {
                    shared.clone()
                } else {
                    ByteArray::from(s)
                }
            })
            .unwrap();
            let bytes = w.finish().unwrap();
            e["bytes"] = bytes.len().into();
            e["crc32"] = crc32fast::hash(&bytes).into();
            std::fs::write(&path, bytes).unwrap();
        }
        out.push_str(&format!("{e}\n"));
    }
    std::fs::write(trace.join("index.jsonl"), out).unwrap();
}
