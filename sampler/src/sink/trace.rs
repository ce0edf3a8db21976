//! The trace file around the sink thread: made with its manifest before the thread starts (so
//! that everything that can fail has failed before the trace exists), notes added to its
//! manifest and capture table, and closed once the thread has handed the writer back.

use cufall_trace::model::{CaptureEvent, Manifest};
use cufall_trace::{TraceWriter, WriterOptions};
use std::path::Path;

/// A new recording's manifest: this cufall, this host and its clock's error, the command line,
/// and the program run under cufall (`program`, empty for none).
pub fn manifest(program: &[String]) -> Manifest {
    let mut manifest = Manifest::new(env!("CARGO_PKG_VERSION"), crate::now_unix_ns());
    manifest.hostname = crate::os::hostname();
    add_clock_error(&mut manifest);
    manifest.command = std::env::args().collect();
    manifest.target_command = (!program.is_empty()).then(|| program.to_vec());
    manifest
}

/// The host's clock error when the recording begins, for reading several nodes' recordings
/// together (`cufall_analysis::nodes`).
fn add_clock_error(m: &mut Manifest) {
    use cufall_analysis::nodes::{CLOCK_EST_ERROR_US, CLOCK_MAX_ERROR_US, CLOCK_SYNCHRONISED};
    if let Some((max_us, est_us, synced)) = crate::os::clock_error() {
        m.extra
            .insert(CLOCK_MAX_ERROR_US.into(), max_us.to_string());
        m.extra
            .insert(CLOCK_EST_ERROR_US.into(), est_us.to_string());
        let synced = if synced { "yes" } else { "no" };
        m.extra.insert(CLOCK_SYNCHRONISED.into(), synced.into());
    }
}

/// Creates the trace at `path` with `manifest`; `overwrite` replaces one that exists.
pub fn create(
    path: &Path,
    manifest: Manifest,
    overwrite: bool,
) -> cufall_trace::Result<TraceWriter> {
    TraceWriter::create(
        path,
        manifest,
        WriterOptions {
            overwrite,
            ..WriterOptions::default()
        },
    )
}

/// What was captured from the program (`capture`: the kinds as the capture library's
/// environment spells them) and how windows were opened (`capture_range`), in the manifest's
/// extras.
pub fn note_capture(
    writer: &mut TraceWriter,
    capture: Option<String>,
    capture_range: Option<String>,
) -> cufall_trace::Result<()> {
    if let Some(kinds) = capture {
        writer.update_manifest(|m| {
            m.extra.insert("capture".into(), kinds);
        })?;
    }
    if let Some(text) = capture_range {
        writer.update_manifest(|m| {
            m.extra.insert("capture_range".into(), text);
        })?;
    }
    Ok(())
}

/// The capture-table row that says no capture window opened, and `why`.
pub fn note_no_window(writer: &mut TraceWriter, why: String) -> cufall_trace::Result<()> {
    writer.append_capture(&[CaptureEvent {
        t_ns: crate::now_unix_ns(),
        pid: 0,
        event: cufall_capture::CaptureEventKind::NoWindow.into(),
        count: 0,
        detail: why,
    }])
}
