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
