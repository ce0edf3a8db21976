//! What to do next, added to an error's message by the command line. The libraries' errors say
//! what went wrong; only here are flags and commands named, and the command is named the way the
//! user ran it (`./cufall` from a clone, `cufall` from PATH).

use crate::session::SessionError;
use cufall_analysis::AnalysisError;
use cufall_cupti::CuptiError;
use cufall_trace::TraceError;
use cufall_viewer::ViewError;
use std::path::{Path, PathBuf};

/// The bundled recording that the no-GPU hints point to, as a clone holds it.
pub const EXAMPLE_RECORDING: &str = "examples/h200-matmul-copy.cufall";

/// Where an installed cufall keeps its bundled recording, under its prefix (the wheel installs
/// `cufall` into `PREFIX/bin` and the recording into this folder).
pub const SHARED_EXAMPLES: &str = "share/cufall/examples";

/// The bundled recording on this machine: in the working folder (`./cufall` in a clone), in
/// the installed prefix (`PREFIX/share/cufall/examples/`, beside `PREFIX/bin/cufall`), or in the
/// clone a built binary sits in (`target/release/cufall`). Said as `examples/…` when it is the
/// working folder's, else by its whole path.
pub fn bundled_recording() -> Option<PathBuf> {
    let name = Path::new(EXAMPLE_RECORDING)
        .file_name()
        .map(std::ffi::OsStr::to_os_string)?;
    let cwd = std::env::current_dir().ok();
    let mut candidates = Vec::new();
    if let Some(cwd) = &cwd {
        candidates.push(cwd.join(EXAMPLE_RECORDING));
    }
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .map(|e| e.canonicalize().unwrap_or(e))
        .and_then(|e| e.parent().and_then(Path::parent).map(Path::to_path_buf))
    {
        candidates.push(prefix.join(SHARED_EXAMPLES).join(&name));
        if let Some(clone) = prefix.parent() {
            candidates.push(clone.join(EXAMPLE_RECORDING));
        }
    }
    let found = candidates
        .into_iter()
        .find(|c| c.join("manifest.json").is_file())?;
    // In the working folder it is named as the docs name it; elsewhere by its whole path.
    if cwd.is_some_and(|cwd| found == cwd.join(EXAMPLE_RECORDING)) {
        return Some(PathBuf::from(EXAMPLE_RECORDING));
    }
    Some(found)
}

/// The bundled recording as a hint names it: found on this machine, else as a clone holds it.
fn example_recording() -> String {
    bundled_recording().map_or_else(
        || EXAMPLE_RECORDING.to_string(),
        |p| p.display().to_string(),
    )
}

/// The one-line message for `err`: its causes (each said once) and the fix, if one is known.
pub fn message(err: &anyhow::Error, cmd: &str) -> String {
    let mut out = message_without_advice(err);
    if let Some(fix) = advice(err, cmd) {
        out.push_str(if out.ends_with('.') { " " } else { ". " });
        out.push_str(&fix);
    }
    out
}

/// `err`'s causes, each said once, without the fix.
pub fn message_without_advice(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        // Many errors already print their source; do not say it twice.
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether `err` is a write to a pipe whose reader has gone (`cufall report --json | head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether `err` says this machine has no NVIDIA GPU to use (no driver library, no device).
pub fn is_no_gpu(err: &anyhow::Error) -> bool {
    let no_gpu =
        |e: &CuptiError| matches!(e, CuptiError::DriverNotFound { .. } | CuptiError::NoDevice);
    err.chain().any(|cause| {
        cause.downcast_ref::<CuptiError>().is_some_and(no_gpu)
            || matches!(cause.downcast_ref::<SessionError>(), Some(SessionError::Cupti(e)) if no_gpu(e))
    })
}

/// The fix for the first cause in `err`'s chain that has one.
pub fn advice(err: &anyhow::Error, cmd: &str) -> Option<String> {
    err.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<TraceError>() {
            trace_advice(e, cmd)
        } else if let Some(e) = cause.downcast_ref::<AnalysisError>() {
            analysis_advice(e, cmd)
        } else if let Some(e) = cause.downcast_ref::<CuptiError>() {
            cupti_advice(e, cmd)
        } else if let Some(e) = cause.downcast_ref::<ViewError>() {
            view_advice(e)
        } else if let Some(SessionError::Cupti(e)) = cause.downcast_ref::<SessionError>() {
            // Transparent: the chain goes on past the CUPTI error, not through it.
            cupti_advice(e, cmd)
        } else {
            None
        }
    })
}

fn trace_advice(e: &TraceError, cmd: &str) -> Option<String> {
    match e {
        TraceError::NotFound(path) => Some(format!(
            "Check the name, or record one with `{cmd} record -o {} -- YOUR_PROGRAM`.",
            path.display()
        )),
        TraceError::NotATrace { .. } => Some(format!(
            "A trace is the folder `{cmd} record -o NAME.cufall` creates."
        )),
        TraceError::AlreadyExists(_) => {
            Some("Choose another name, or pass --force to replace it.".into())
        }
        TraceError::UnknownMetric { .. } => {
            Some("Choose one of those, or leave the flag out for the recording's own.".into())
        }
        _ => None,
    }
}

fn analysis_advice(e: &AnalysisError, cmd: &str) -> Option<String> {
    match e {
        AnalysisError::Trace(t) => trace_advice(t, cmd),
        AnalysisError::MetricNotInB { .. } => Some(format!(
            "Pass --metric with a metric both traces record (`{cmd} info` lists a trace's metrics); a trace recorded with --nvml-only has no counters to compare."
        )),
        AnalysisError::OutputExists(_) => {
            Some("Choose another output with -o, or pass --force to replace it.".into())
        }
        AnalysisError::OutputNotAFolder { .. } => Some(
            "Name a folder with -o (it is created), or leave -o out for one next to the trace."
                .into(),
        ),
        AnalysisError::OutputIsAFolder(_) => Some(
            "Name a file with -o, e.g. run.perfetto.json, or leave -o out for one next to the trace."
                .into(),
        ),
        AnalysisError::IdleBelowOutOfRange(_) => {
            Some("Pass --idle-below as a fraction, e.g. 0.05 for 5 %.".into())
        }
        AnalysisError::MinGapNotPositive(_) => {
            Some("Pass --min-gap as a positive duration, e.g. 50us.".into())
        }
        AnalysisError::UnknownDomains(_) => Some(
            "Name one of these with --phases domain:NAME, or leave --phases out for the program's own ranges."
                .into(),
        ),
        _ => None,
    }
}

fn view_advice(e: &ViewError) -> Option<String> {
    match e {
        ViewError::UnknownMetric { .. } => {
            Some("Choose one of those with --metric/--denominator.".into())
        }
        ViewError::HeatmapNotRecorded { .. } => Some(
            "Choose the heatmaps yourself with --metric (one of those), or fix the recording's manifest.json."
                .into(),
        ),
        ViewError::NoTerminal => Some("Add --print to write one frame as text instead.".into()),
        ViewError::FrameTooLow { min, .. } => Some(format!("Use --height {min} or more.")),
        ViewError::Terminal(_) => None,
    }
}

fn cupti_advice(e: &CuptiError, cmd: &str) -> Option<String> {
    match e {
        CuptiError::DriverNotFound { .. } | CuptiError::NoDevice => Some(format!(
            "To look at a real recording without a GPU, run `{cmd} replay {}`.",
            example_recording()
        )),
        CuptiError::UnknownMetric { .. } | CuptiError::NotSupportedByPmSampling { .. } => Some(
            format!("Run `{cmd} metrics` to list the metrics PM sampling offers on this GPU."),
        ),
        CuptiError::TooManyMetrics { .. } => {
            Some("Ask for fewer --metric flags (or leave out --sm-spread) per recording.".into())
        }
        CuptiError::IntervalTooSmall { min_hint, .. } => {
            Some(format!("Use --interval {min_hint} or more."))
        }
        CuptiError::HardwareBufferOverflow { .. } => {
            Some("Use a longer --interval or fewer metrics.".into())
        }
        // When it is a cufall of this user's that holds them: which, and how to pause it.
        CuptiError::CountersBusy { .. } => crate::control_file::held_by(cmd),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_closed_pipe_is_recognised_through_context() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("cannot write the output");
        assert!(is_broken_pipe(&e));
        let other = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(!is_broken_pipe(&other));
    }

    #[test]
    fn the_fix_names_the_command_as_it_was_run() {
        let e = anyhow::Error::from(TraceError::NotFound(PathBuf::from("x.cufall")));
        let m = message(&e, "./cufall");
        assert!(m.starts_with("no trace at x.cufall"), "{m}");
        assert!(
            m.contains("`./cufall record -o x.cufall -- YOUR_PROGRAM`"),
            "{m}"
        );
        let e = anyhow::Error::from(CuptiError::NoDevice);
        assert!(message(&e, "cufall").contains("`cufall replay examples/"));
        let e = anyhow::Error::from(SessionError::Cupti(CuptiError::NoDevice));
        assert!(message(&e, "cufall").contains("`cufall replay examples/"));
    }

    #[test]
    fn a_wrapped_error_still_gets_its_fix_and_each_cause_once() {
        let io = std::io::Error::other("disk full");
        let e = anyhow::Error::from(TraceError::Write {
            path: PathBuf::from("t.cufall"),
            source: io,
        })
        .context("recording stopped");
        let m = message(&e, "cufall");
        assert_eq!(m.matches("disk full").count(), 1, "{m}");
        let e = anyhow::Error::from(AnalysisError::MetricNotInB {
            path: PathBuf::from("nvml.cufall"),
            source: TraceError::UnknownMetric {
                name: "m".into(),
                available: "none".into(),
            },
        });
        let m = message(&e, "cufall");
        assert!(
            m.contains("nvml.cufall: the trace has no metric named"),
            "{m}"
        );
        assert!(
            m.contains("Pass --metric with a metric both traces record"),
            "{m}"
        );
        let e = anyhow::Error::from(AnalysisError::OutputExists(PathBuf::from("o")))
            .context("export failed");
        assert!(message(&e, "cufall").ends_with("pass --force to replace it."));
    }
}
