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

use crate::pipeline::SinkMsg;
use crate::pipeline::window::Edge;
use cufall_capture::{
    Decoder, Frame, Kinds, Name, Payload, RangeKind as WireKind, RangeTrigger, event,
};
use cufall_trace::model::{
    ActivityKind, ApiCall, ApiDomain, CaptureEvent, DeviceId, DeviceInfo, KernelRecord, NvtxRange,
    RangeKind,
};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable that points cufall at another capture library (tests, packaging).
pub const ENV_LIBRARY: &str = "CUFALL_INJECT_LIBRARY";
/// Rows a connection batches before handing them to the sink.
const BATCH_ROWS: usize = 8192;
/// Longest a decoded row waits for its batch.
const BATCH_AGE: Duration = Duration::from_millis(50);
/// Most bytes of names (kernel names, NVTX strings, domains) one process may define: far more
/// than any real program (a PyTorch run defines a few MB), and a bound on what a broken or
/// hostile process can make the recorder hold.
const MAX_STRING_BYTES: usize = 256 << 20;
/// Most records one process may have waiting for a name that was never defined.
const MAX_HELD: usize = 1 << 20;

/// Why capture cannot start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "the capture library {} was not found (looked {looked}). Build it with `cargo build --release -p cufall-inject` (the `./cufall` launcher does), put it next to the cufall binary or name it in {ENV_LIBRARY}; or record without capture: --capture none",
        cufall_capture::LIBRARY_FILE
    )]
    LibraryMissing { looked: String },
    #[error(
        "{} is not a loadable capture library ({why}). Rebuild it with `cargo build --release -p cufall-inject`, or record without capture: --capture none",
        path.display()
    )]
    LibraryUnusable { path: PathBuf, why: String },
    #[error("cannot listen for the program's capture data at {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Finds `libcufall_inject.so`: `$CUFALL_INJECT_LIBRARY`, else next to the running binary
/// (`target/release/` for a build, the install folder), else one folder up (test binaries live
/// in `target/debug/deps/`).
pub fn find_library() -> Result<PathBuf, CaptureError> {
    let mut looked = Vec::new();
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os(ENV_LIBRARY) {
        // Named explicitly: that library or none.
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(CaptureError::LibraryMissing {
                looked: format!("at {} (from {ENV_LIBRARY})", p.display()),
            });
        }
        check_library(&p)?;
        return Ok(p);
    }
    if let Ok(exe) = std::env::current_exe() {
        let exe = exe.canonicalize().unwrap_or(exe);
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join(cufall_capture::LIBRARY_FILE));
            if let Some(up) = dir.parent() {
                candidates.push(up.join(cufall_capture::LIBRARY_FILE));
            }
        }
    }
    for c in candidates {
        if c.is_file() {
            check_library(&c)?;
            return Ok(c.canonicalize().unwrap_or(c));
        }
        looked.push(c.display().to_string());
    }
    Err(CaptureError::LibraryMissing {
        looked: if looked.is_empty() {
            "nowhere: the binary's own path is unknown".into()
        } else {
            looked.join(", ")
        },
    })
}

/// Checks, without loading it into cufall, that `path` is a 64-bit ELF shared library that
/// exports both entry points CUDA and NVTX look for.
pub fn check_library(path: &Path) -> Result<(), CaptureError> {
    let unusable = |why: String| CaptureError::LibraryUnusable {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| unusable(format!("cannot read it: {e}")))?;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(unusable("not an ELF file".into()));
    }
    if bytes[4] != 2 {
        return Err(unusable("not a 64-bit library".into()));
    }
    if u16::from_le_bytes([bytes[16], bytes[17]]) != 3 {
        return Err(unusable("not a shared library".into()));
    }
    for symbol in ["InitializeInjection\0", "InitializeInjectionNvtx2\0"] {
        if !bytes.windows(symbol.len()).any(|w| w == symbol.as_bytes()) {
            return Err(unusable(format!(
                "it does not export {}",
                symbol.trim_end_matches('\0')
            )));
        }
    }
    Ok(())
}

/// One process of the program, as the recorder saw it.
#[derive(Clone, Debug, Default)]
pub struct ProcessSummary {
    pub pid: u32,
    pub exe: String,
    pub said_goodbye: bool,
    pub nvtx_ranges: u64,
    pub activities: u64,
    pub api_calls: u64,
    /// CUDA contexts it created (CUPTI's context records): it did GPU work.
    pub contexts: u64,
}

impl ProcessSummary {
    /// Whether the process did anything capture records: GPU work or NVTX ranges. A process
    /// that did neither (a compile worker, a data loader) has nothing that could be missing.
    pub fn touched_gpu_or_nvtx(&self) -> bool {
        self.contexts > 0 || self.activities > 0 || self.nvtx_ranges > 0 || self.api_calls > 0
    }
}

/// What capture delivered, for the summary.
#[derive(Clone, Debug, Default)]
pub struct CaptureSummary {
    pub processes: Vec<ProcessSummary>,
    pub nvtx_ranges: u64,
    pub activities: u64,
    pub api_calls: u64,
    pub cupti_dropped: u64,
    /// Every event from the capture table worth telling the user, in arrival order.
    pub problems: Vec<String>,
    /// Connections still open when the recorder stopped.
    pub stragglers: usize,
    pub protocol_errors: Vec<String>,
    /// Processes that never did GPU work nor sent a record (no warnings of their own).
    pub quiet: Vec<ProcessSummary>,
}

#[derive(Default)]
struct State {
    open: usize,
    last_change: Option<Instant>,
    summary: CaptureSummary,
}

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
        let trigger: Arc<str> = match &range {
            Some(RangeTrigger::ProfilerApi) => "cudaProfilerStart/Stop".into(),
            Some(RangeTrigger::Nvtx(n)) => format!("NVTX range `{n}`").into(),
            None => "".into(),
        };
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
                event: event::NOT_INJECTED.into(),
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
                event: event::QUIET.into(),
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
                event: event::NO_CUDA.into(),
                count: 0,
                detail: "no process of the program initialised CUDA or called NVTX, so no CUDA activity was seen (or the capture library failed to load in it)".into(),
            }]);
        }
        if stragglers > 0 && !self.runs_on.load(Ordering::Relaxed) {
            self.report(vec![CaptureEvent {
                t_ns: now,
                pid: 0,
                event: event::NO_GOODBYE.into(),
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

/// What every connection's thread shares.
struct Shared {
    tx: Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<State>>,
    rows: Arc<AtomicU64>,
    uuids: Arc<HashMap<String, DeviceId>>,
    /// What opens a capture window, for the trace's words (empty: no capture range).
    trigger: Arc<str>,
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

/// A frame whose names are not all known yet.
enum Held {
    Range(cufall_capture::Range<'static>),
    Activity(cufall_capture::Activity),
    Api(cufall_capture::ApiCall),
}

struct Connection {
    tx: Sender<SinkMsg>,
    state: Arc<Mutex<State>>,
    rows: Arc<AtomicU64>,
    uuids: Arc<HashMap<String, DeviceId>>,
    trigger: Arc<str>,
    pid: u32,
    strings: HashMap<u32, String>,
    string_bytes: usize,
    /// Windows this process opened and has not closed.
    windows_open: u32,
    /// End of the latest record delivered (NVTX range, kernel, copy or call).
    last_record_ns: Option<i64>,
    /// The stream was broken and closed by the recorder.
    broken: bool,
    /// Kernel, copy and call records CUPTI sent without timestamps (left out).
    untimed: u64,
    /// The recording closed while the process was still connected (it did not end).
    still_running: bool,
    demangled: HashMap<u32, String>,
    devices: HashMap<u32, DeviceId>,
    held: Vec<Held>,
    nvtx: Vec<NvtxRange>,
    kernels: Vec<KernelRecord>,
    api: Vec<ApiCall>,
    events: Vec<CaptureEvent>,
    last_send: Instant,
    me: ProcessSummary,
    /// The process set up CUPTI activity tracing.
    cupti_attached: bool,
}

impl Connection {
    fn new(shared: &Shared) -> Self {
        Connection {
            tx: shared.tx.clone(),
            state: Arc::clone(&shared.state),
            rows: Arc::clone(&shared.rows),
            uuids: Arc::clone(&shared.uuids),
            trigger: Arc::clone(&shared.trigger),
            pid: 0,
            strings: HashMap::new(),
            string_bytes: 0,
            windows_open: 0,
            last_record_ns: None,
            broken: false,
            untimed: 0,
            still_running: false,
            demangled: HashMap::new(),
            devices: HashMap::new(),
            held: Vec::new(),
            nvtx: Vec::new(),
            kernels: Vec::new(),
            api: Vec::new(),
            events: Vec::new(),
            last_send: Instant::now(),
            me: ProcessSummary::default(),
            cupti_attached: false,
        }
    }

    fn serve(&mut self, mut stream: UnixStream, stop: &AtomicBool) {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
        let mut decoder = Decoder::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut stopping_since: Option<Instant> = None;
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    decoder.push(&buf[..n]);
                    loop {
                        let outcome = match decoder.next_frame() {
                            Ok(Some(f)) => self.on_frame(f),
                            Ok(None) => break,
                            Err(e) => Err(e.to_string()),
                        };
                        if let Err(why) = outcome {
                            self.protocol_error(why);
                            self.finish_connection();
                            return;
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            if self.last_send.elapsed() >= BATCH_AGE {
                self.send_batches();
            }
            if stop.load(Ordering::Relaxed) {
                // The recording is closing: read what is already queued, then stop.
                let since = *stopping_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(200) {
                    // The process is still running: the recorder's straggler row covers it.
                    self.still_running = true;
                    break;
                }
            }
        }
        self.finish_connection();
    }

    fn protocol_error(&mut self, why: String) {
        let msg = format!(
            "process {}: broken capture stream ({why}); its connection was closed and its later records are not in the trace",
            self.pid
        );
        if let Ok(mut s) = self.state.lock() {
            s.summary.protocol_errors.push(msg.clone());
        }
        self.broken = true;
        self.event(event::BROKEN_STREAM, 0, msg);
    }

    fn event(&mut self, name: &str, count: u64, detail: String) {
        self.events.push(CaptureEvent {
            t_ns: crate::now_unix_ns(),
            pid: self.pid,
            event: name.into(),
            count,
            detail,
        });
    }

    fn on_frame(&mut self, f: Frame<'static>) -> Result<(), String> {
        match f {
            Frame::Hello {
                version, pid, exe, ..
            } => {
                self.pid = pid;
                self.me.pid = pid;
                self.me.exe = exe.into_owned();
                if version != cufall_capture::PROTOCOL_VERSION {
                    self.protocol_error(format!(
                        "protocol {version}, this cufall speaks {}",
                        cufall_capture::PROTOCOL_VERSION
                    ));
                }
            }
            Frame::String { id, text } => {
                self.string_bytes += text.len();
                if self.string_bytes > MAX_STRING_BYTES {
                    return Err(format!(
                        "it defined more than {} MiB of names",
                        MAX_STRING_BYTES >> 20
                    ));
                }
                if let Some(old) = self.strings.insert(id, text.into_owned()) {
                    self.string_bytes -= old.len();
                }
                if !self.held.is_empty() {
                    let held = std::mem::take(&mut self.held);
                    for h in held {
                        self.admit(h, false);
                    }
                }
            }
            Frame::Range(r) => self.admit(Held::Range(r), false),
            Frame::Activity(a) => self.admit(Held::Activity(a), false),
            Frame::Api(c) => self.admit(Held::Api(c), false),
            Frame::Device { id, uuid } => {
                let key = cufall_capture::uuid_string(&uuid);
                if let Some(d) = self.uuids.get(&key) {
                    self.devices.insert(id, *d);
                }
            }
            Frame::Status {
                t_ns,
                event: name,
                count,
                detail,
            } => {
                if name == event::CUPTI_DROPPED
                    && let Ok(mut s) = self.state.lock()
                {
                    s.summary.cupti_dropped += count;
                }
                if name == event::CUDA_ATTACHED && count > 0 {
                    self.cupti_attached = true;
                }
                self.events.push(CaptureEvent {
                    t_ns,
                    pid: self.pid,
                    event: name.into_owned(),
                    count,
                    detail: detail.into_owned(),
                });
            }
            Frame::Bye { .. } => self.me.said_goodbye = true,
            Frame::Window { t_ns, open } => self.window_edge(t_ns, open, None),
            Frame::Context { .. } => self.me.contexts += 1,
            Frame::Graph {
                graph_id,
                exec_id,
                nodes,
                kernels,
            } => self.graph_contents(graph_id, exec_id, nodes, &kernels),
        }
        if self.held.len() > MAX_HELD {
            return Err(format!(
                "more than {MAX_HELD} records wait for names it never defined"
            ));
        }
        if self.rows_buffered() >= BATCH_ROWS {
            self.send_batches();
        }
        Ok(())
    }

    /// A CUDA graph the process instantiated: one capture row with its kernels, by demangled
    /// name, most nodes first.
    fn graph_contents(
        &mut self,
        graph_id: u32,
        exec_id: u32,
        nodes: u32,
        kernels: &[cufall_capture::GraphKernel],
    ) {
        let mut named: Vec<(String, u32)> = Vec::new();
        for k in kernels {
            let raw = self.name(k.name, true).unwrap_or_default();
            let name = demangle(&raw);
            match named.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += k.count,
                None => named.push((name, k.count)),
            }
        }
        named.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let kernel_nodes: u64 = named.iter().map(|(_, c)| u64::from(*c)).sum();
        let list: Vec<String> = named.iter().map(|(n, c)| format!("{c} × {n}")).collect();
        self.event(
            event::GRAPH_CONTENTS,
            u64::from(nodes),
            format!(
                "graph {graph_id} (instantiated as {exec_id}): {nodes} nodes, {kernel_nodes} kernels: {}",
                list.join("; ")
            ),
        );
    }

    /// A window edge of this process; `closing_at_exit` closes one the process left open.
    fn window_edge(&mut self, t_ns: i64, open: bool, closing_at_exit: Option<&str>) {
        if open {
            self.windows_open += 1;
        } else if self.windows_open == 0 {
            return;
        } else {
            self.windows_open -= 1;
        }
        let what = match (open, closing_at_exit) {
            (_, Some(why)) => why.to_string(),
            (true, None) => format!("{} (start) in process {}", self.trigger, self.pid),
            (false, None) => format!("{} (end) in process {}", self.trigger, self.pid),
        };
        let _ = self.tx.send(SinkMsg::Window(Edge {
            t_ns,
            open,
            source: self.pid,
            why: what,
        }));
    }

    fn rows_buffered(&self) -> usize {
        self.nvtx.len() + self.kernels.len() + self.api.len()
    }

    fn name(&self, id: u32, last_chance: bool) -> Option<String> {
        match self.strings.get(&id) {
            Some(s) => Some(s.clone()),
            None if last_chance => Some(format!("<unnamed #{id}>")),
            None => None,
        }
    }

    /// Turns a frame into a row, or holds it until its names arrive.
    fn admit(&mut self, h: Held, last_chance: bool) {
        match h {
            Held::Range(r) => {
                let name = match &r.name {
                    Name::Text(t) => Some(t.to_string()),
                    Name::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    Name::Registered(id) => self.name(*id, last_chance),
                };
                let domain = if r.domain == 0 {
                    Some(String::new())
                } else {
                    self.name(r.domain, last_chance)
                };
                let (Some(name), Some(domain)) = (name, domain) else {
                    self.held.push(Held::Range(r));
                    return;
                };
                let (payload_int, payload_float) = match r.payload {
                    Payload::None => (None, None),
                    Payload::Int(v) => (Some(v), None),
                    Payload::UInt(v) => match i64::try_from(v) {
                        Ok(v) => (Some(v), None),
                        Err(_) => (None, Some(v as f64)),
                    },
                    Payload::Float(v) => (None, Some(v)),
                };
                self.me.nvtx_ranges += 1;
                self.saw_record(r.end_ns);
                self.nvtx.push(NvtxRange {
                    start_ns: r.start_ns,
                    end_ns: r.end_ns,
                    name,
                    domain,
                    kind: match r.kind {
                        WireKind::PushPop => RangeKind::PushPop,
                        WireKind::StartEnd => RangeKind::StartEnd,
                        WireKind::Mark => RangeKind::Mark,
                    },
                    depth: r.depth,
                    pid: self.pid,
                    tid: r.tid,
                    category: r.category,
                    color: r.color,
                    payload_int,
                    payload_float,
                });
            }
            Held::Activity(a) => {
                // CUPTI leaves a record's times 0 when it could not timestamp it (seen on the
                // H200 for two kernels of a JAX program): kept, it would stretch the trace back
                // to 1970.
                if a.start_ns <= 0 || a.end_ns < a.start_ns {
                    self.untimed += 1;
                    return;
                }
                let name = match a.kind {
                    cufall_capture::ActivityKind::Kernel => {
                        if let Some(n) = self.demangled.get(&a.name) {
                            n.clone()
                        } else if let Some(raw) = self.name(a.name, last_chance) {
                            let n = demangle(&raw);
                            self.demangled.insert(a.name, n.clone());
                            n
                        } else {
                            self.held.push(Held::Activity(a));
                            return;
                        }
                    }
                    cufall_capture::ActivityKind::Memcpy => {
                        format!("memcpy {}", copy_kind_name(a.copy_kind))
                    }
                    cufall_capture::ActivityKind::Memset => "memset".into(),
                    cufall_capture::ActivityKind::Graph => format!("graph {}", a.graph_id),
                };
                let kind = match a.kind {
                    cufall_capture::ActivityKind::Kernel => ActivityKind::Kernel,
                    cufall_capture::ActivityKind::Memcpy => ActivityKind::Memcpy,
                    cufall_capture::ActivityKind::Memset => ActivityKind::Memset,
                    cufall_capture::ActivityKind::Graph => ActivityKind::Graph,
                };
                let dims = |d: [i32; 3]| d.map(|v| u32::try_from(v).unwrap_or(0));
                let is_kernel = kind == ActivityKind::Kernel;
                self.me.activities += 1;
                self.saw_record(a.end_ns);
                self.kernels.push(KernelRecord {
                    device: self
                        .devices
                        .get(&a.device)
                        .copied()
                        .unwrap_or(DeviceId(a.device)),
                    start_ns: a.start_ns,
                    end_ns: a.end_ns,
                    kind,
                    name,
                    stream: a.stream,
                    correlation_id: a.correlation,
                    bytes: matches!(kind, ActivityKind::Memcpy | ActivityKind::Memset)
                        .then_some(a.bytes),
                    pid: self.pid,
                    grid: is_kernel.then(|| dims(a.grid)),
                    block: is_kernel.then(|| dims(a.block)),
                    context_id: Some(a.context),
                    graph_id: (a.graph_id != 0).then_some(a.graph_id),
                });
            }
            Held::Api(c) => {
                if c.start_ns <= 0 || c.end_ns < c.start_ns {
                    self.untimed += 1;
                    return;
                }
                let Some(name) = self.name(c.name, last_chance) else {
                    self.held.push(Held::Api(c));
                    return;
                };
                self.me.api_calls += 1;
                self.saw_record(c.end_ns);
                self.api.push(ApiCall {
                    start_ns: c.start_ns,
                    end_ns: c.end_ns,
                    domain: match c.domain {
                        cufall_capture::ApiDomain::Runtime => ApiDomain::Runtime,
                        cufall_capture::ApiDomain::Driver => ApiDomain::Driver,
                    },
                    name,
                    pid: self.pid,
                    tid: c.tid,
                    correlation_id: c.correlation,
                });
            }
        }
    }

    fn saw_record(&mut self, end_ns: i64) {
        self.last_record_ns = Some(self.last_record_ns.map_or(end_ns, |t| t.max(end_ns)));
    }

    fn send_batches(&mut self) {
        self.last_send = Instant::now();
        let n = self.rows_buffered() as u64;
        if n > 0 {
            self.rows.fetch_add(n, Ordering::Relaxed);
        }
        if !self.nvtx.is_empty() {
            let _ = self.tx.send(SinkMsg::Nvtx(std::mem::take(&mut self.nvtx)));
        }
        if !self.kernels.is_empty() {
            let _ = self
                .tx
                .send(SinkMsg::Kernels(std::mem::take(&mut self.kernels)));
        }
        if !self.api.is_empty() {
            let _ = self.tx.send(SinkMsg::Api(std::mem::take(&mut self.api)));
        }
        if !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            if let Ok(mut s) = self.state.lock() {
                for e in &events {
                    if let Some(p) = problem_text(e) {
                        s.summary.problems.push(p);
                    }
                }
            }
            let _ = self.tx.send(SinkMsg::Capture(events));
        }
    }

    fn finish_connection(&mut self) {
        let held = std::mem::take(&mut self.held);
        for h in held {
            self.admit(h, true);
        }
        let now = crate::now_unix_ns();
        while self.windows_open > 0 {
            let why = format!("the exit of process {}", self.pid);
            self.window_edge(now, false, Some(&why));
        }
        // A process that never did GPU work nor sent a range (a compile worker, a data loader)
        // has nothing that could be missing: no warnings, one summary line for all of them.
        if self.untimed > 0 {
            self.event(
                event::UNTIMED,
                self.untimed,
                format!(
                    "process {}: CUPTI delivered {} kernel, copy or call record(s) without timestamps; they are left out",
                    self.pid, self.untimed
                ),
            );
        }
        let quiet = self.pid != 0 && !self.me.touched_gpu_or_nvtx() && !self.broken;
        if !quiet {
            self.warn_about_missing(now);
        }
        self.send_batches();
        if let Ok(mut s) = self.state.lock() {
            s.summary.nvtx_ranges += self.me.nvtx_ranges;
            s.summary.activities += self.me.activities;
            s.summary.api_calls += self.me.api_calls;
            if self.pid != 0 {
                s.summary.processes.push(self.me.clone());
            }
            if quiet {
                s.summary.quiet.push(self.me.clone());
            }
        }
    }

    /// Warnings for a process whose records may really be incomplete.
    fn warn_about_missing(&mut self, now: i64) {
        if self.cupti_attached && self.me.contexts > 0 && self.me.activities == 0 {
            self.event(
                event::NO_ACTIVITY,
                0,
                format!(
                    "process {} created a CUDA context but delivered no kernel or copy records: it launched no GPU work, or another CUPTI client in it (torch.profiler, Nsight, another tracer) took over CUPTI's activity buffers, which CUPTI gives to one client only",
                    self.pid
                ),
            );
        }
        if self.pid != 0 && !self.me.said_goodbye && !self.broken && !self.still_running {
            let since = match self.last_record_ns {
                Some(t) => format!(
                    "records of its last {:.0} ms (after the last one delivered) may be missing",
                    now.saturating_sub(t) as f64 / 1e6
                ),
                None => "it delivered no record before it ended".to_string(),
            };
            self.event(
                event::NO_GOODBYE,
                0,
                format!(
                    "process {} ended without flushing capture (killed, crashed or _exit): {since}",
                    self.pid
                ),
            );
        }
    }
}

/// What the user should read about a capture event, or `None` for routine ones.
fn problem_text(e: &CaptureEvent) -> Option<String> {
    match e.event.as_str() {
        event::CUDA_ATTACHED
        | event::NVTX_ATTACHED
        | event::FORKED
        | event::QUIET
        | event::WINDOW
        | event::GRAPH_CONTENTS => None,
        _ => Some(format!("process {}: {} ({})", e.pid, e.detail, e.event)),
    }
}

fn copy_kind_name(k: u8) -> &'static str {
    match k {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

/// A kernel's readable name: demangled, without parameter lists (as timelines show them);
/// names that are not Itanium-mangled (`extern "C"` kernels) stay as they are.
pub fn demangle(raw: &str) -> String {
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    cpp_demangle::Symbol::new(raw)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| raw.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_capture::encode;
    use std::io::Write;
    use std::sync::mpsc::{Receiver, channel};

    /// A binary of this workspace's build (`scripts/check.sh` builds them before the tests).
    fn built(name: &str) -> PathBuf {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        let p = profile_dir.join(name);
        assert!(
            p.is_file(),
            "{} is missing: run `cargo build --workspace` before the tests (scripts/check.sh does)",
            p.display()
        );
        p
    }

    fn drain(rx: &Receiver<SinkMsg>) -> (Vec<NvtxRange>, Vec<KernelRecord>, Vec<CaptureEvent>) {
        let (mut n, mut k, mut c) = (Vec::new(), Vec::new(), Vec::new());
        while let Ok(m) = rx.try_recv() {
            match m {
                SinkMsg::Nvtx(r) => n.extend(r),
                SinkMsg::Kernels(r) => k.extend(r),
                SinkMsg::Capture(r) => c.extend(r),
                _ => {}
            }
        }
        (n, k, c)
    }

    fn run_under_capture(
        kinds: Kinds,
        program: &Path,
        args: &[&str],
    ) -> (
        Vec<NvtxRange>,
        Vec<KernelRecord>,
        Vec<CaptureEvent>,
        CaptureSummary,
    ) {
        let (tx, rx) = channel();
        let (n, k, c, summary) = run_under_capture_to(kinds, None, program, args, tx);
        let (mut n2, mut k2, mut c2) = drain(&rx);
        n2.extend(n);
        k2.extend(k);
        c2.extend(c);
        (n2, k2, c2, summary)
    }

    /// Runs a program under capture, its messages to `tx`.
    fn run_under_capture_to(
        kinds: Kinds,
        range: Option<RangeTrigger>,
        program: &Path,
        args: &[&str],
        tx: std::sync::mpsc::Sender<SinkMsg>,
    ) -> (
        Vec<NvtxRange>,
        Vec<KernelRecord>,
        Vec<CaptureEvent>,
        CaptureSummary,
    ) {
        let lib = built(cufall_capture::LIBRARY_FILE);
        check_library(&lib).unwrap();
        let rec = Recorder::start(kinds, range, lib, &[], tx).unwrap();
        let status = std::process::Command::new(program)
            .args(args)
            .envs(rec.child_env_given(|_| None))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        rec.wait_for_processes(Duration::from_secs(10));
        let summary = rec.finish();
        (Vec::new(), Vec::new(), Vec::new(), summary)
    }

    /// `--capture-range nvtx:prefill` inside a real program: the capture library sees the
    /// range begin and end and sends both edges at those instants.
    #[test]
    fn an_nvtx_range_opens_and_closes_a_window() {
        let specdec = built("specdec");
        let args = [
            "--preset",
            "tiny",
            "--backend",
            "cpu",
            "--context",
            "32",
            "--new-tokens",
            "4",
        ];
        let (tx, rx) = channel();
        let range = Some(RangeTrigger::Nvtx("prefill".into()));
        run_under_capture_to(Kinds::NVTX, range, &specdec, &args, tx);
        let msgs: Vec<SinkMsg> = rx.try_iter().collect();
        let edges: Vec<&Edge> = msgs
            .iter()
            .filter_map(|m| match m {
                SinkMsg::Window(e) => Some(e),
                _ => None,
            })
            .collect();
        let prefill: Vec<&NvtxRange> = msgs
            .iter()
            .filter_map(|m| match m {
                SinkMsg::Nvtx(r) => Some(r),
                _ => None,
            })
            .flatten()
            .filter(|r| r.name == "prefill")
            .collect();
        assert_eq!(prefill.len(), 1);
        assert_eq!(edges.len(), 2, "{edges:?}");
        assert!(edges[0].open && !edges[1].open);
        assert_eq!(
            (edges[0].t_ns, edges[1].t_ns),
            (prefill[0].start_ns, prefill[0].end_ns)
        );
        assert!(
            edges[0].why.contains("NVTX range `prefill`"),
            "{}",
            edges[0].why
        );
    }

    /// The real capture library inside a real program: the engine's CPU backend emits NVTX
    /// phases (prefill, then draft / verify / accept per step, each with the step as payload).
    #[test]
    fn the_engine_nvtx_phases_arrive_whole() {
        let specdec = built("specdec");
        let args = [
            "--preset",
            "tiny",
            "--backend",
            "cpu",
            "--context",
            "32",
            "--new-tokens",
            "8",
        ];
        let (ranges, kernels, events, summary) = run_under_capture(Kinds::NVTX, &specdec, &args);
        assert!(kernels.is_empty());
        let count = |n: &str| ranges.iter().filter(|r| r.name == n).count();
        assert_eq!(count("prefill"), 1, "{ranges:#?}");
        assert!(count("draft") >= 1 && count("verify") >= 1 && count("accept") >= 1);
        assert_eq!(count("draft"), count("accept"));
        for r in &ranges {
            assert_eq!(r.kind, RangeKind::PushPop);
            assert!(r.end_ns >= r.start_ns);
            assert!(
                r.start_ns > 1_600_000_000_000_000_000,
                "Unix-epoch nanoseconds"
            );
            assert!(r.pid > 0 && r.tid > 0);
        }
        let steps: Vec<i64> = ranges
            .iter()
            .filter(|r| r.name == "draft")
            .filter_map(|r| r.payload_int)
            .collect();
        assert_eq!(steps.len(), count("draft"), "every draft carries its step");
        assert!(events.iter().any(|e| e.event == event::NVTX_ATTACHED));
        assert_eq!(summary.processes.len(), 1);
        assert!(summary.processes[0].said_goodbye);
        assert_eq!(summary.nvtx_ranges as usize, ranges.len());
    }

    /// Several processes (a shell starting two engines): one connection each, all captured,
    /// and the recorder waits for both.
    #[test]
    fn every_process_of_the_program_is_captured() {
        let specdec = built("specdec");
        let cmd = format!(
            "{s} --preset tiny --backend cpu --context 16 --new-tokens 4 & {s} --preset tiny --backend cpu --context 16 --new-tokens 4 --seed 2; wait",
            s = specdec.display()
        );
        let (ranges, _, _, summary) =
            run_under_capture(Kinds::DEFAULT, Path::new("/bin/sh"), &["-c", &cmd]);
        let pids: std::collections::BTreeSet<u32> = ranges.iter().map(|r| r.pid).collect();
        assert_eq!(pids.len(), 2, "{pids:?}");
        assert_eq!(summary.processes.len(), 2);
        assert!(ranges.iter().filter(|r| r.name == "prefill").count() == 2);
    }

    /// A process that forks: the child's ranges come on a connection of its own, the parent's
    /// exactly once (the child never re-sends what the parent had buffered).
    #[test]
    fn a_forked_child_reports_on_its_own_connection() {
        let program = built("examples/nvtx_fork");
        let (ranges, _, events, summary) = run_under_capture(Kinds::NVTX, &program, &[]);
        let by_name = |n: &str| ranges.iter().filter(|r| r.name == n).collect::<Vec<_>>();
        let (parent, child) = (by_name("parent"), by_name("child"));
        assert_eq!((parent.len(), child.len()), (1, 1), "{ranges:#?}");
        assert_ne!(parent[0].pid, child[0].pid);
        assert_eq!(by_name("parent-run").len(), 1);
        assert_eq!(by_name("parent-run")[0].kind, RangeKind::StartEnd);
        let mark = by_name("before-fork");
        assert_eq!(mark.len(), 1);
        assert_eq!(
            (mark[0].kind, mark[0].start_ns),
            (RangeKind::Mark, mark[0].end_ns)
        );
        assert!(
            events
                .iter()
                .any(|e| e.event == event::FORKED && e.pid == child[0].pid)
        );
        assert_eq!(summary.processes.len(), 2);
        assert!(summary.processes.iter().all(|p| p.said_goodbye));
    }

    /// A program that never touches CUDA or NVTX: the trace says so instead of staying silent.
    #[test]
    fn a_program_without_cuda_is_reported() {
        let (ranges, _, events, summary) =
            run_under_capture(Kinds::DEFAULT, Path::new("/bin/true"), &[]);
        assert!(ranges.is_empty());
        assert!(summary.processes.is_empty());
        assert!(
            events.iter().any(|e| e.event == event::NO_CUDA),
            "{events:?}"
        );
    }

    /// A connection to the recorder's socket, as a process of the program would open.
    fn connect_like_a_process(rec: &Recorder) -> UnixStream {
        let socket = rec
            .child_env()
            .into_iter()
            .find(|(k, _)| k == cufall_capture::ENV_SOCKET)
            .map(|(_, v)| PathBuf::from(v))
            .unwrap();
        UnixStream::connect(socket).unwrap()
    }

    fn frame(f: Frame<'_>) -> Vec<u8> {
        let mut b = Vec::new();
        encode(&f, &mut b);
        b
    }

    /// Names defined after their first use, a kernel name to demangle, a device mapped by UUID,
    /// and a process that ends without a goodbye (killed): every record arrives, the end is
    /// reported.
    #[test]
    fn late_names_devices_and_a_missing_goodbye() {
        let (tx, rx) = channel();
        let uuid = [0x11u8; 16];
        let devices = vec![DeviceInfo {
            id: DeviceId(3),
            name: "GPU".into(),
            chip: String::new(),
            uuid: cufall_capture::uuid_string(&uuid),
            pci_bus_id: String::new(),
            sm_count: None,
            memory_total_bytes: None,
        }];
        let rec = Recorder::start(
            Kinds::DEFAULT,
            None,
            PathBuf::from("/nonexistent"),
            &devices,
            tx,
        )
        .unwrap();
        let mut c = connect_like_a_process(&rec);
        let mut bytes = frame(Frame::Hello {
            version: cufall_capture::PROTOCOL_VERSION,
            pid: 77,
            ppid: 1,
            kinds: Kinds::DEFAULT,
            exe: "fake".into(),
        });
        bytes.extend(frame(Frame::Status {
            t_ns: 1,
            event: event::CUDA_ATTACHED.into(),
            count: 1,
            detail: "libcupti.so.13 (CUPTI API 130001): kernels".into(),
        }));
        bytes.extend(frame(Frame::Device { id: 0, uuid }));
        bytes.extend(frame(Frame::Range(cufall_capture::Range {
            start_ns: 10,
            end_ns: 20,
            tid: 5,
            depth: 0,
            kind: WireKind::PushPop,
            domain: 2,
            category: 4,
            color: Some(0xff00ff00),
            payload: Payload::UInt(u64::MAX),
            name: Name::Registered(1),
        })));
        bytes.extend(frame(Frame::Activity(cufall_capture::Activity {
            kind: cufall_capture::ActivityKind::Kernel,
            device: 0,
            context: 1,
            stream: 7,
            correlation: 9,
            start_ns: 12,
            end_ns: 18,
            grid: [4, 1, 1],
            block: [128, 1, 1],
            graph_id: 0,
            bytes: 0,
            copy_kind: 0,
            name: 3,
        })));
        bytes.extend(frame(Frame::String {
            id: 1,
            text: "verify".into(),
        }));
        bytes.extend(frame(Frame::String {
            id: 2,
            text: "engine".into(),
        }));
        bytes.extend(frame(Frame::String {
            id: 3,
            text: "_Z12empty_kernelv".into(),
        }));
        // Split the stream mid-frame, as a socket may.
        let cut = bytes.len() / 2;
        c.write_all(&bytes[..cut]).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        c.write_all(&bytes[cut..]).unwrap();
        drop(c);
        rec.wait_for_processes(Duration::from_secs(5));
        let summary = rec.finish();
        let (ranges, kernels, events) = drain(&rx);
        assert_eq!(ranges.len(), 1);
        let r = &ranges[0];
        assert_eq!(
            (r.name.as_str(), r.domain.as_str(), r.pid),
            ("verify", "engine", 77)
        );
        assert_eq!((r.category, r.color), (4, Some(0xff00ff00)));
        assert_eq!(
            (r.payload_int, r.payload_float),
            (None, Some(u64::MAX as f64))
        );
        assert_eq!(kernels.len(), 1);
        let k = &kernels[0];
        assert_eq!((k.name.as_str(), k.device), ("empty_kernel", DeviceId(3)));
        assert_eq!((k.grid, k.block), (Some([4, 1, 1]), Some([128, 1, 1])));
        assert!(
            events
                .iter()
                .any(|e| e.event == event::NO_GOODBYE && e.pid == 77)
        );
        assert!(!summary.processes[0].said_goodbye);
        assert!(
            summary
                .problems
                .iter()
                .any(|p| p.contains("ended without flushing"))
        );
    }

    /// Sends `frames` on one connection, as a process would, and returns what the recorder
    /// made of them.
    fn one_process(
        range: Option<RangeTrigger>,
        frames: Vec<Frame<'static>>,
    ) -> (Vec<SinkMsg>, CaptureSummary) {
        let (tx, rx) = channel();
        let rec = Recorder::start(
            Kinds::DEFAULT,
            range,
            PathBuf::from("/nonexistent"),
            &[],
            tx,
        )
        .unwrap();
        let mut c = connect_like_a_process(&rec);
        let mut bytes = Vec::new();
        for f in frames {
            encode(&f, &mut bytes);
        }
        c.write_all(&bytes).unwrap();
        drop(c);
        rec.wait_for_processes(Duration::from_secs(5));
        let summary = rec.finish();
        (rx.try_iter().collect(), summary)
    }

    fn hello(pid: u32) -> Frame<'static> {
        Frame::Hello {
            version: cufall_capture::PROTOCOL_VERSION,
            pid,
            ppid: 1,
            kinds: Kinds::DEFAULT,
            exe: "/usr/bin/python3".into(),
        }
    }

    fn attached() -> Frame<'static> {
        Frame::Status {
            t_ns: 1,
            event: event::CUDA_ATTACHED.into(),
            count: 1,
            detail: "libcupti.so.13 (CUPTI API 130001): kernels, memcpy, memset".into(),
        }
    }

    fn events_of(msgs: &[SinkMsg]) -> Vec<CaptureEvent> {
        msgs.iter()
            .filter_map(|m| match m {
                SinkMsg::Capture(e) => Some(e.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// A CUDA context, then no kernel record: another CUPTI client (torch.profiler) took the
    /// buffers, or the process launched nothing. The user is told which.
    #[test]
    fn kernel_capture_that_delivers_nothing_is_reported() {
        let (msgs, summary) = one_process(
            None,
            vec![
                hello(88),
                attached(),
                Frame::Context {
                    device: 0,
                    context: 1,
                },
                Frame::Bye { t_ns: 2 },
            ],
        );
        let events = events_of(&msgs);
        assert!(
            events
                .iter()
                .any(|e| e.event == event::NO_ACTIVITY && e.pid == 88)
        );
        assert!(
            summary
                .problems
                .iter()
                .any(|p| p.contains("torch.profiler"))
        );
    }

    /// A compile worker: CUDA initialised (CUPTI attached), no context, no record, and `_exit`
    /// (no goodbye). Nothing could be missing, so no warning; one summary row counts it.
    #[test]
    fn a_process_that_never_touched_the_gpu_gets_no_warning() {
        let (msgs, summary) = one_process(None, vec![hello(91), attached()]);
        let events = events_of(&msgs);
        assert!(
            !events
                .iter()
                .any(|e| e.event == event::NO_GOODBYE || e.event == event::NO_ACTIVITY),
            "{events:?}"
        );
        assert!(summary.problems.is_empty(), "{:?}", summary.problems);
        assert_eq!(summary.quiet.len(), 1);
        let quiet = events.iter().find(|e| e.event == event::QUIET).unwrap();
        assert_eq!(quiet.count, 1);
        assert!(quiet.detail.contains("91 (python3)"), "{}", quiet.detail);
    }

    /// A process that did GPU work and was killed: the warning says how much may be missing,
    /// counted from its last delivered record.
    #[test]
    fn a_killed_process_is_told_from_its_last_record() {
        let now = crate::now_unix_ns();
        let kernel = Frame::Activity(cufall_capture::Activity {
            kind: cufall_capture::ActivityKind::Memcpy,
            device: 0,
            context: 1,
            stream: 7,
            correlation: 9,
            start_ns: now - 2_000_000,
            end_ns: now - 1_000_000,
            grid: [0; 3],
            block: [0; 3],
            graph_id: 0,
            bytes: 64,
            copy_kind: 1,
            name: 0,
        });
        let (msgs, summary) = one_process(
            None,
            vec![
                hello(92),
                attached(),
                Frame::Context {
                    device: 0,
                    context: 1,
                },
                kernel,
            ],
        );
        let events = events_of(&msgs);
        let warn = events
            .iter()
            .find(|e| e.event == event::NO_GOODBYE && e.pid == 92)
            .expect("warned");
        assert!(
            warn.detail.contains("after the last one delivered"),
            "{}",
            warn.detail
        );
        assert!(summary.quiet.is_empty());
    }

    /// A graph's contents, learnt once when it is instantiated: one capture row naming its
    /// kernels, demangled, most nodes first (names defined after their use included).
    #[test]
    fn graph_contents_become_one_row_per_graph() {
        let (msgs, _) = one_process(
            None,
            vec![
                hello(96),
                Frame::String {
                    id: 1,
                    text: "_Z4gemmv".into(),
                },
                Frame::Graph {
                    graph_id: 12,
                    exec_id: 13,
                    nodes: 30,
                    kernels: vec![
                        cufall_capture::GraphKernel { name: 2, count: 4 },
                        cufall_capture::GraphKernel { name: 1, count: 24 },
                    ],
                },
                Frame::String {
                    id: 2,
                    text: "rmsnorm".into(),
                },
                Frame::Bye { t_ns: 2 },
            ],
        );
        let events = events_of(&msgs);
        let g = events
            .iter()
            .find(|e| e.event == event::GRAPH_CONTENTS)
            .expect("a row per graph");
        assert_eq!((g.pid, g.count), (96, 30));
        assert!(
            g.detail.starts_with(
                "graph 12 (instantiated as 13): 30 nodes, 28 kernels: 24 × gemm; 4 × "
            ),
            "{}",
            g.detail
        );
    }

    /// Window edges of a process reach the sink, and a window the process leaves open is
    /// closed when its connection ends.
    #[test]
    fn window_edges_are_forwarded_and_closed_at_exit() {
        let (msgs, _) = one_process(
            Some(RangeTrigger::ProfilerApi),
            vec![
                hello(93),
                Frame::Window {
                    t_ns: 10,
                    open: true,
                },
                Frame::Window {
                    t_ns: 20,
                    open: false,
                },
                Frame::Window {
                    t_ns: 30,
                    open: true,
                },
            ],
        );
        let edges: Vec<(i64, bool, u32)> = msgs
            .iter()
            .filter_map(|m| match m {
                SinkMsg::Window(e) => Some((e.t_ns, e.open, e.source)),
                _ => None,
            })
            .collect();
        assert_eq!(edges.len(), 4, "{edges:?}");
        assert_eq!(
            &edges[..3],
            &[(10, true, 93), (20, false, 93), (30, true, 93)]
        );
        assert!(!edges[3].1 && edges[3].0 > 30, "closed at the exit");
        let why: Vec<String> = msgs
            .iter()
            .filter_map(|m| match m {
                SinkMsg::Window(e) => Some(e.why.clone()),
                _ => None,
            })
            .collect();
        assert!(why[0].contains("cudaProfilerStart"), "{why:?}");
        assert!(why[3].contains("exit of process 93"), "{why:?}");
    }

    /// Garbage on a connection closes it with a row in the capture table; the recorder goes on
    /// taking other processes.
    #[test]
    fn a_connection_sending_garbage_is_closed_and_the_recording_goes_on() {
        let (tx, rx) = channel();
        let rec =
            Recorder::start(Kinds::DEFAULT, None, PathBuf::from("/nonexistent"), &[], tx).unwrap();
        let mut bad = connect_like_a_process(&rec);
        let mut bytes = frame(hello(94));
        // A frame whose string claims more bytes than any name may have.
        let mut body = vec![2u8];
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        bytes.extend_from_slice(&body);
        bad.write_all(&bytes).unwrap();
        let mut good = connect_like_a_process(&rec);
        let mut ok = frame(hello(95));
        ok.extend(frame(Frame::Range(cufall_capture::Range {
            start_ns: 1,
            end_ns: 2,
            tid: 1,
            depth: 0,
            kind: WireKind::PushPop,
            domain: 0,
            category: 0,
            color: None,
            payload: Payload::None,
            name: Name::Text("step".into()),
        })));
        ok.extend(frame(Frame::Bye { t_ns: 3 }));
        good.write_all(&ok).unwrap();
        drop(good);
        rec.wait_for_processes(Duration::from_secs(2));
        drop(bad);
        let summary = rec.finish();
        let (ranges, _, events) = drain(&rx);
        assert_eq!(ranges.len(), 1, "the other process is recorded");
        let broken = events
            .iter()
            .find(|e| e.event == event::BROKEN_STREAM)
            .expect("a row says so");
        assert_eq!(broken.pid, 94);
        assert!(broken.detail.contains("longer than"), "{}", broken.detail);
        assert_eq!(summary.protocol_errors.len(), 1);
    }

    #[test]
    fn another_tools_injection_is_left_alone_and_reported() {
        let (tx, rx) = channel();
        let rec =
            Recorder::start(Kinds::DEFAULT, None, PathBuf::from("/lib/ours.so"), &[], tx).unwrap();
        let env = rec.child_env_given(|v| {
            (v == "CUDA_INJECTION64_PATH").then(|| OsString::from("/opt/other/libtool.so"))
        });
        assert!(!env.iter().any(|(k, _)| k == "CUDA_INJECTION64_PATH"));
        assert!(
            env.iter()
                .any(|(k, v)| k == "NVTX_INJECTION64_PATH" && v == "/lib/ours.so")
        );
        let _ = rec.finish();
        let (_, _, events) = drain(&rx);
        assert!(
            events
                .iter()
                .any(|e| e.event == event::NOT_INJECTED
                    && e.detail.contains("/opt/other/libtool.so"))
        );
    }

    #[test]
    fn kernel_names_are_demangled_without_parameters() {
        assert_eq!(demangle("_Z12empty_kernelv"), "empty_kernel");
        assert_eq!(
            demangle("_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_"),
            "at::native::elementwise_kernel<128, 2>"
        );
        assert_eq!(demangle("plain_c_kernel"), "plain_c_kernel");
    }

    #[test]
    fn a_library_without_the_entry_points_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lib.so");
        std::fs::write(&p, b"not an elf").unwrap();
        assert!(matches!(
            check_library(&p),
            Err(CaptureError::LibraryUnusable { .. })
        ));
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[16] = 3;
        std::fs::write(&p, &elf).unwrap();
        let e = check_library(&p).unwrap_err().to_string();
        assert!(e.contains("does not export InitializeInjection"), "{e}");
        elf.extend_from_slice(b"InitializeInjection\0InitializeInjectionNvtx2\0");
        std::fs::write(&p, &elf).unwrap();
        assert!(check_library(&p).is_ok());
    }
}
