//! What CUPTI's tracing of kernels, copies and graph launches adds to each launch, measured on
//! this machine with the program's capture kinds, for the report's CAPTURE COST section.
//!
//! The NVTX path's cost is measured inside the program (the capture library times its own
//! handlers). The CUDA kinds' cost is inside CUDA's launch path and CUPTI's record hand-over,
//! and timing it means launching work: not in the program's contexts, but in a calibration
//! process of cufall's own ([`child`], `cufall calibrate-capture`), which `cufall record`
//! starts once the program has exited (so it takes nothing from the program) and which loads
//! the capture library exactly as the program did. Its measurements become the trace's
//! `capture_cost_<kind>` rows (process 0, the recorder's); a kind it could not measure gets a
//! `capture_cost_<kind>_unknown` row with why, never 0.

use cufall_capture::{CaptureEventKind, CostKind, Kinds};
use cufall_trace::model::CaptureEvent;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use lines::{ChildLine, ENTRY_SET_TRACING, ENTRY_TAKE_RECORDS, Launch, Measured, cost_kinds};

pub mod child;
pub mod lines;
#[cfg(test)]
mod tests;

/// Kernel nodes of the calibration's graph (a chain of empty kernels).
pub const GRAPH_NODES: u32 = 8;
/// The calibration process is stopped after this long (CUDA's start-up included).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `cufall calibrate-capture`: the calibration process (started by `cufall record`).
#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    /// The capture kinds to time (as `--capture` takes them).
    #[arg(long, default_value = "kernels,memcpy,graphs")]
    pub kinds: String,
    /// Kernel nodes of the graph launched.
    #[arg(long, default_value_t = GRAPH_NODES)]
    pub graph_nodes: u32,
}

/// Runs the calibration process's work and prints its lines; exits 0 when every line is
/// printed (a kind that failed says why in its line).
pub fn child_main(args: &ChildArgs) -> anyhow::Result<()> {
    let kinds = Kinds::parse(&args.kinds)?;
    for line in child::run(kinds, args.graph_nodes) {
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}

/// The outcome of a calibration: each needed kind's timing or why there is none.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    pub kinds: Vec<(CostKind, Result<Measured, String>)>,
    /// How long it took, start-up included.
    pub took: Duration,
}

/// Why the calibration process gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("the calibration process could not start: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the calibration process did not finish within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the calibration process failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
}

/// Starts `exe calibrate-capture` with the capture library `library` loaded for `kinds`, waits
/// at most `timeout`, and reads its lines. Every kind `kinds` needs gets an outcome.
pub fn run(exe: &Path, library: &Path, kinds: Kinds, timeout: Duration) -> Calibration {
    let started = Instant::now();
    let needed = cost_kinds(kinds);
    if needed.is_empty() {
        return Calibration::default();
    }
    let outcome = spawn_and_read(exe, library, kinds, timeout);
    Calibration {
        kinds: match outcome {
            Ok(stdout) => outcomes(&needed, &stdout),
            Err(e) => needed.iter().map(|k| (*k, Err(e.to_string()))).collect(),
        },
        took: started.elapsed(),
    }
}

fn spawn_and_read(
    exe: &Path,
    library: &Path,
    kinds: Kinds,
    timeout: Duration,
) -> Result<String, CalibrationError> {
    // Only the CUDA kinds: NVTX is measured in the program.
    let cuda_kinds = kinds.without(Kinds::NVTX).to_env();
    let mut command = Command::new(exe);
    if let Some(path) = library_path_with_cupti() {
        command.env("LD_LIBRARY_PATH", path);
    }
    let mut child = command
        .arg("calibrate-capture")
        .arg("--kinds")
        .arg(&cuda_kinds)
        .env("CUDA_INJECTION64_PATH", library)
        .env(cufall_capture::ENV_KINDS, &cuda_kinds)
        .env(cufall_capture::ENV_CALIBRATE, "1")
        // The process hands its records over itself, block by block.
        .env("CUFALL_CAPTURE_FLUSH_MS", "0")
        .env_remove(cufall_capture::ENV_SOCKET)
        .env_remove(cufall_capture::ENV_RANGE)
        .env_remove("NVTX_INJECTION64_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(CalibrationError::Spawn)?;
    // Both pipes are drained while the process runs, so that a chatty CUDA or CUPTI cannot
    // fill one and stall it.
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CalibrationError::Timeout(timeout));
            }
        }
    };
    let joined = |h: Option<std::thread::JoinHandle<String>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (stdout, stderr) = (joined(out), joined(err));
    if !status.success() && stdout.trim().is_empty() {
        return Err(CalibrationError::Failed {
            status: status.to_string(),
            stderr: last_line(&stderr),
        });
    }
    Ok(stdout)
}

/// `LD_LIBRARY_PATH` for the calibration process when cufall found CUPTI outside the dynamic
/// linker's search path (a PyTorch wheel's `nvidia/cu13/lib`, a toolkit not in ldconfig's
/// cache): the capture library loads CUPTI by soname, which a program that brought its own
/// CUPTI had already loaded, and the calibration process has not. `None`: leave it as it is.
fn library_path_with_cupti() -> Option<std::ffi::OsString> {
    let found = cufall_cupti::loader::ensure_cupti().ok()?;
    let dir = Path::new(&found).parent().filter(|d| d.is_dir())?;
    Some(prepend_dir(dir, std::env::var_os("LD_LIBRARY_PATH")))
}

/// `dir` first in a search path.
fn prepend_dir(dir: &Path, path: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut out = std::ffi::OsString::from(dir);
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        out.push(":");
        out.push(p);
    }
    out
}

/// Reads a pipe to its end on a thread of its own, keeping the first MiB.
fn drain(pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    use std::io::Read;
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut pipe = pipe;
        let _ = (&mut pipe).take(1 << 20).read_to_end(&mut kept);
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        String::from_utf8_lossy(&kept).into_owned()
    })
}

fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message");
    line.chars().take(300).collect()
}

/// Each needed kind's outcome from the process's output; a kind it did not mention, or a
/// figure that is not a finite time, has none, with why.
pub fn outcomes(needed: &[CostKind], stdout: &str) -> Vec<(CostKind, Result<Measured, String>)> {
    let lines: Vec<ChildLine> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect();
    needed
        .iter()
        .map(|k| {
            let line = lines.iter().find(|l| l.kind == k.as_str());
            let outcome = match line {
                None => Err("the calibration process did not measure it".to_string()),
                Some(ChildLine {
                    measured: Some(m), ..
                }) if m.ns.is_finite() && m.bare_ns.is_finite() && m.rounds > 0 => Ok(m.clone()),
                Some(ChildLine { error: Some(e), .. }) => Err(e.clone()),
                Some(_) => Err("the calibration process gave no usable figure".to_string()),
            };
            (*k, outcome)
        })
        .collect()
}

/// The event a kind's cost is per, for people.
fn per_what(kind: CostKind) -> &'static str {
    match kind {
        CostKind::Nvtx => "NVTX range",
        CostKind::Kernel => "kernel launch",
        CostKind::Memcpy => "copy",
        CostKind::Graph => "graph launch",
        CostKind::GraphNode => "graph kernel node",
    }
}

/// The trace's `capture_cost_*` rows for a calibration, at `t_ns`. A measured cost of 0 or less
/// (tracing added nothing this process could tell from its noise) is written as 1 ns: the row
/// says so, and a 0 would read as unknown.
pub fn rows(c: &Calibration, t_ns: i64) -> Vec<CaptureEvent> {
    c.kinds
        .iter()
        .map(|(kind, outcome)| match outcome {
            Ok(m) => {
                let ns = m.whole_ns();
                let graph = m
                    .graph_nodes
                    .map(|n| format!(", a graph of {n} empty kernels"))
                    .unwrap_or_default();
                let floor = if m.ns < 1.0 {
                    " (not told apart from the untraced launches: below what this measures)"
                } else {
                    ""
                };
                CaptureEvent {
                    t_ns,
                    pid: 0,
                    event: CaptureEventKind::Cost {
                        kind: *kind,
                        measured: true,
                    }
                    .into(),
                    count: ns,
                    detail: format!(
                        "{ns} ns per {what}{floor}: CUPTI's tracing in the launch path and the hand-over \
                         of its record, timed after the program in a calibration process of \
                         cufall's own with the program's capture kinds (median of {rounds} rounds \
                         of {launches} launches{graph}, traced against untraced: {low}–{high} ns; \
                         an untraced one took {bare} ns)",
                        what = per_what(*kind),
                        rounds = m.rounds,
                        launches = m.launches,
                        low = m.low_ns.round(),
                        high = m.high_ns.round(),
                        bare = m.bare_ns.round(),
                    ),
                }
            }
            Err(why) => CaptureEvent {
                t_ns,
                pid: 0,
                event: CaptureEventKind::Cost {
                    kind: *kind,
                    measured: false,
                }
                .into(),
                count: 0,
                detail: format!("not measured: {why}"),
            },
        })
        .collect()
}

/// One line for the recording's summary: each kind's cost, or why it is unknown.
pub fn summary_line(c: &Calibration) -> Option<String> {
    if c.kinds.is_empty() {
        return None;
    }
    let parts: Vec<String> = c
        .kinds
        .iter()
        .map(|(kind, outcome)| match outcome {
            Ok(m) => format!(
                "{} {}",
                per_what(*kind),
                cufall_trace::model::Nanos(i64::try_from(m.whole_ns()).unwrap_or(i64::MAX))
            ),
            Err(why) => format!("{} unknown ({why})", per_what(*kind)),
        })
        .collect();
    Some(format!(
        "capture cost per event, measured after the program in {:.1} s: {}",
        c.took.as_secs_f64(),
        parts.join("; ")
    ))
}
