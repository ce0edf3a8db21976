//! The recorder side of capture: finds the capture library, prepares the profiled program's
//! environment, listens on a Unix socket for the program's processes (one connection each,
//! `cufall-capture`'s wire format), turns their frames into trace rows and hands them to the
//! sink, on the same clock as the counter samples.
//!
//! A process's frames are decoded on a thread of its own. Names sent once by id (kernel names,
//! NVTX domains, registered strings, API names) are resolved per connection; a record whose
//! name has not arrived yet waits (its definition travels in another buffer of the same process
//! and follows within one flush period), and is written with a placeholder if the connection
//! ends first. Kernel names are demangled here, not in the program.

use crate::sink::SinkMsg;
use cufall_capture::{CaptureEventKind, Kinds, RangeTrigger};
use cufall_trace::model::{CaptureEvent, DeviceId, DeviceInfo};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod connection;
mod library;
mod shared;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod workers_tests;

use connection::Connection;
pub use connection::demangle;
pub use library::{CaptureError, ENV_LIBRARY, check_library, find_library};
pub use shared::{CaptureSummary, ProcessSummary};
use shared::{Shared, State, WindowTrigger, problem_text};

/// A listening recorder.
pub struct Recorder {
    tx: Sender<SinkMsg>,
    kinds: Kinds,
    range: Option<RangeTrigger>,
    library: PathBuf,
    dir: PathBuf,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<State>>,
    rows: Arc<AtomicU64>,
    listener: Option<JoinHandle<()>>,
    readers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The recording ends while the program runs on by design (a closed capture window): its
    /// open connections are not stragglers to warn about.
    runs_on: AtomicBool,
}

impl Recorder {
    /// Listens on a fresh socket in a private temporary folder.
    pub(crate) fn start(
        kinds: Kinds,
        range: Option<RangeTrigger>,
        library: PathBuf,
        devices: &[DeviceInfo],
        tx: Sender<SinkMsg>,
    ) -> Result<Recorder, CaptureError> {
        let dir = std::env::temp_dir().join(format!(
            "cufall-{}-{}",
            std::process::id(),
            crate::now_unix_ns()
        ));
        let socket = dir.join("capture.sock");
        let socket_err = |source| CaptureError::Socket {
            path: socket.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(socket_err)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(socket_err)?;
        }
        let listener = UnixListener::bind(&socket).map_err(socket_err)?;
        listener.set_nonblocking(true).map_err(socket_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(State::default()));
        let rows = Arc::new(AtomicU64::new(0));
        let readers = Arc::new(Mutex::new(Vec::new()));
        let uuids: HashMap<String, DeviceId> =
            devices.iter().map(|d| (d.uuid.clone(), d.id)).collect();
        let trigger = Arc::new(WindowTrigger::of(range.as_ref()));
        let handle = {
            let (stop, state, readers, rows) = (
                Arc::clone(&stop),
                Arc::clone(&state),
                Arc::clone(&readers),
                Arc::clone(&rows),
            );
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("cufall-capture".into())
                .spawn(move || {
                    let shared = Shared {
                        tx,
                        stop,
                        state,
                        rows,
                        uuids: Arc::new(uuids),
                        trigger,
                    };
                    accept_loop(listener, &shared, &readers)
                })
                .map_err(socket_err)?
        };
        Ok(Recorder {
            tx,
            kinds,
            range,
            library,
            dir,
            socket,
            stop,
            state,
            rows,
            listener: Some(handle),
            readers,
            runs_on: AtomicBool::new(false),
        })
    }

    /// The environment the program runs with. A variable another tool already set is left
    /// alone, and the part of capture that needed it is reported as missing (in the trace's
    /// capture table and the summary).
    pub fn child_env(&self) -> Vec<(OsString, OsString)> {
        self.child_env_given(|v| std::env::var_os(v))
    }

    /// [`Recorder::child_env`] for a parent environment read through `existing`.
    fn child_env_given(
        &self,
        existing: impl Fn(&str) -> Option<OsString>,
    ) -> Vec<(OsString, OsString)> {
        let mut vars = vec![
            (
                OsString::from(cufall_capture::ENV_SOCKET),
                OsString::from(&self.socket),
            ),
            (
                OsString::from(cufall_capture::ENV_KINDS),
                OsString::from(self.kinds.to_env()),
            ),
        ];
        if let Some(r) = &self.range {
            vars.push((
                OsString::from(cufall_capture::ENV_RANGE),
                OsString::from(r.to_env()),
            ));
        }
        let mut notes = Vec::new();
        let now = crate::now_unix_ns();
        let mut take = |var: &str, what: &str| {
            match existing(var) {
            Some(v) if Path::new(&v) != self.library => notes.push(CaptureEvent {
                t_ns: now,
                pid: 0,
                event: CaptureEventKind::NotInjected.into(),
                count: 0,
                detail: format!(
                    "{var} is already set to {} (another tool's injection): {what} not captured. Unset it to capture them.",
                    Path::new(&v).display()
                ),
            }),
            _ => vars.push((OsString::from(var), OsString::from(&self.library))),
        }
        };
        if self.kinds.needs_cupti() {
            take("CUDA_INJECTION64_PATH", "kernels, copies and API calls are");
        }
        if self.kinds.contains(Kinds::NVTX) {
            take("NVTX_INJECTION64_PATH", "NVTX ranges are");
        }
        self.report(notes);
        vars
    }

    /// Writes events to the capture table and keeps them for the summary.
    fn report(&self, events: Vec<CaptureEvent>) {
        if events.is_empty() {
            return;
        }
        if let Ok(mut s) = self.state.lock() {
            s.summary
                .problems
                .extend(events.iter().filter_map(problem_text));
        }
        let _ = self.tx.send(SinkMsg::Capture(events));
    }

    /// What this recorder captures.
    pub fn kinds(&self) -> Kinds {
        self.kinds
    }

    /// Rows delivered so far (NVTX ranges, activity records, API calls).
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }

    /// After the program exited: waits until every process that connected has closed its
    /// connection and none connected for a moment, at most `timeout`.
    pub fn wait_for_processes(&self, timeout: Duration) {
        let start = Instant::now();
        let deadline = start + timeout;
        // A connection made just before the program exited may not be accepted yet: quiet
        // means no connection open and none seen for this long, counted from the wait too.
        let quiet = Duration::from_millis(300);
        while Instant::now() < deadline {
            let done = self.state.lock().map_or(true, |s| {
                s.open == 0 && s.last_change.unwrap_or(start).max(start).elapsed() >= quiet
            });
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Measures what CUPTI's tracing of the captured CUDA kinds added per launch, in a
    /// calibration process of cufall's own (`exe calibrate-capture`, [`crate::capcal`]), when
    /// the program's processes delivered GPU activity; writes the `capture_cost_*` rows and
    /// keeps the summary's line. Call it once the program has exited (it launches work).
    pub fn calibrate(&self, exe: &Path) {
        let activities = self.state.lock().map_or(0, |s| s.summary.activities);
        if activities == 0 || !self.kinds.needs_cupti() {
            return;
        }
        let c = crate::capcal::run(exe, &self.library, self.kinds, crate::capcal::TIMEOUT);
        let rows = crate::capcal::rows(&c, crate::now_unix_ns());
        if let Ok(mut s) = self.state.lock() {
            s.summary.calibration = crate::capcal::summary_line(&c);
        }
        if !rows.is_empty() {
            let _ = self.tx.send(SinkMsg::Capture(rows));
        }
    }

    /// Says that the recording ends while the program runs on, by design (the end of a
    /// capture window): the processes still connected get no warning.
    pub fn program_runs_on(&self) {
        self.runs_on.store(true, Ordering::Relaxed);
    }

    /// Stops listening, lets every reader hand over what it has, and removes the socket.
    pub fn finish(mut self) -> CaptureSummary {
        let stragglers = self.state.lock().map_or(0, |s| s.open);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.listener.take() {
            let _ = h.join();
        }
        let readers = std::mem::take(&mut *self.readers.lock().unwrap_or_else(|e| e.into_inner()));
        for h in readers {
            let _ = h.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let (seen, quiet) = self.state.lock().map_or((0, Vec::new()), |s| {
            (s.summary.processes.len(), s.summary.quiet.clone())
        });
        let now = crate::now_unix_ns();
        if !quiet.is_empty() {
            let mut names: Vec<String> = quiet
                .iter()
                .take(5)
                .map(|p| format!("{} ({})", p.pid, short_exe(&p.exe)))
                .collect();
            if quiet.len() > 5 {
                names.push(format!("and {} more", quiet.len() - 5));
            }
            let events = vec![CaptureEvent {
                t_ns: now,
                pid: 0,
                event: CaptureEventKind::Quiet.into(),
                count: quiet.len() as u64,
                detail: format!(
                    "{} process(es) of the program never did GPU work nor sent an NVTX range (compile workers, data loaders, tokenizer pools): nothing to capture from them: {}",
                    quiet.len(),
                    names.join(", ")
                ),
            }];
            let _ = self.tx.send(SinkMsg::Capture(events));
        }
        if seen == 0 {
            self.report(vec![CaptureEvent {
                t_ns: now,
                pid: 0,
                event: CaptureEventKind::NoCuda.into(),
                count: 0,
                detail: "no process of the program initialised CUDA or called NVTX, so no CUDA activity was seen (or the capture library failed to load in it)".into(),
            }]);
        }
        if stragglers > 0 && !self.runs_on.load(Ordering::Relaxed) {
            self.report(vec![CaptureEvent {
                t_ns: now,
                pid: 0,
                event: CaptureEventKind::NoGoodbye.into(),
                count: stragglers as u64,
                detail: format!("{stragglers} process(es) of the program were still running when the recording closed; their later records are not in the trace"),
            }]);
        }
        let mut summary = self
            .state
            .lock()
            .map(|s| s.summary.clone())
            .unwrap_or_default();
        summary.stragglers = stragglers;
        summary
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn accept_loop(listener: UnixListener, shared: &Shared, readers: &Arc<Mutex<Vec<JoinHandle<()>>>>) {
    loop {
        // After a stop, connections already waiting are still taken (a process that connected
        // and exited in the same instant), then the loop ends at the first empty accept.
        let stopping = shared.stop.load(Ordering::Relaxed);
        match listener.accept() {
            Ok((stream, _)) => {
                if let Ok(mut s) = shared.state.lock() {
                    s.open += 1;
                    s.last_change = Some(Instant::now());
                }
                let mut conn = Connection::new(shared);
                let (stop, state) = (Arc::clone(&shared.stop), Arc::clone(&shared.state));
                let spawned = std::thread::Builder::new()
                    .name("cufall-capture-conn".into())
                    .spawn(move || {
                        conn.serve(stream, &stop);
                        if let Ok(mut s) = state.lock() {
                            s.open = s.open.saturating_sub(1);
                            s.last_change = Some(Instant::now());
                        }
                    });
                if let Ok(h) = spawned
                    && let Ok(mut r) = readers.lock()
                {
                    r.push(h);
                }
            }
            Err(_) if stopping => break,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The program's file name, for one-line summaries.
fn short_exe(exe: &str) -> &str {
    exe.rsplit('/').next().unwrap_or(exe)
}
