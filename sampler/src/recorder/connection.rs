//! One process's connection: its frames become trace rows, names resolved per connection,
//! records held until their names arrive, warnings where records may really be missing.

use super::shared::{ProcessSummary, Shared, State, WindowTrigger, problem_text};
use crate::sink::SinkMsg;
use crate::sink::window::Edge;
use cufall_capture::{CaptureEventKind, Decoder, Frame, Name, Payload, WireRangeKind};
use cufall_trace::model::{
    ActivityKind, ApiCall, ApiDomain, CaptureEvent, DeviceId, KernelRecord, NvtxRange, RangeKind,
};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rows a connection batches before handing them to the sink.
const BATCH_ROWS: usize = 8192;
/// Longest a decoded row waits for its batch.
const BATCH_AGE: Duration = Duration::from_millis(50);
/// Most bytes of names (kernel names, NVTX strings, domains) one process may define: far more
/// than any real program (a PyTorch run defines a few MB), and a bound on what a broken or
/// hostile process can make the recorder hold.
const MAX_STRING_BYTES: usize = 256 << 20;
/// Most records one process may have waiting for a name that was never defined, and their
/// bytes (about).
const MAX_HELD: usize = 1 << 20;
const MAX_HELD_BYTES: usize = 256 << 20;

/// Why a process's capture stream was closed.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error(transparent)]
    Frame(cufall_capture::ProtocolError),
    #[error("a second hello on one connection")]
    SecondHello,
    #[error("a hello from process 0")]
    HelloFromZero,
    #[error(
        "protocol {version}, this cufall speaks {}: use the capture library of the same build",
        cufall_capture::PROTOCOL_VERSION
    )]
    Version { version: u32 },
    #[error("it defined more than {} MiB of names", MAX_STRING_BYTES >> 20)]
    TooManyNames,
    #[error(
        "more than {MAX_HELD} records or {} MiB wait for names it never defined",
        MAX_HELD_BYTES >> 20
    )]
    TooMuchHeld,
}

/// Distinct kernels a `graph_contents` row lists (most nodes first), and the characters kept
/// of each name: a row stays small whatever a program sends.
const GRAPH_KERNELS_LISTED: usize = 64;
const GRAPH_NAME_CHARS: usize = 200;

/// A frame whose names are not all known yet.
enum Held {
    Range(cufall_capture::Range<'static>),
    Activity(cufall_capture::Activity),
    Api(cufall_capture::WireApiCall),
}

pub(super) struct Connection {
    tx: Sender<SinkMsg>,
    state: Arc<Mutex<State>>,
    rows: Arc<AtomicU64>,
    uuids: Arc<HashMap<String, DeviceId>>,
    trigger: Arc<WindowTrigger>,
    pid: u32,
    strings: HashMap<u32, String>,
    string_bytes: usize,
    /// Windows this process opened and has not closed.
    windows_open: u32,
    /// Bytes (about) of the records in `held`.
    held_bytes: usize,
    /// Closes that arrived before their opens (the edges travel in different threads'
    /// buffers), with their times: the next open is closed at once at that time.
    early_closes: Vec<i64>,
    /// End of the latest record delivered (NVTX range, kernel, copy or call).
    last_record_ns: Option<i64>,
    /// The stream was broken and closed by the recorder.
    broken: bool,
    /// Kernel, copy and call records CUPTI sent without timestamps (left out).
    untimed: u64,
    /// The recording closed while the process was still connected (it did not end).
    still_running: bool,
    /// When the process said goodbye (its exit, on its clock).
    bye_ns: Option<i64>,
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
    pub(super) fn new(shared: &Shared) -> Self {
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
            early_closes: Vec::new(),
            held_bytes: 0,
            last_record_ns: None,
            broken: false,
            untimed: 0,
            still_running: false,
            bye_ns: None,
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

    pub(super) fn serve(&mut self, mut stream: UnixStream, stop: &AtomicBool) {
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
                            Err(e) => Err(StreamError::Frame(e)),
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

    fn protocol_error(&mut self, why: StreamError) {
        let msg = format!(
            "process {}: broken capture stream ({why}); its connection was closed and its later records are not in the trace",
            self.pid
        );
        if let Ok(mut s) = self.state.lock() {
            s.summary.protocol_errors.push(msg.clone());
        }
        self.broken = true;
        self.event(CaptureEventKind::BrokenStream, 0, msg);
    }

    fn event(&mut self, kind: CaptureEventKind, count: u64, detail: String) {
        self.events.push(CaptureEvent::new(
            crate::now_unix_ns(),
            self.pid,
            kind,
            count,
            detail,
        ));
    }

    fn on_frame(&mut self, f: Frame<'static>) -> Result<(), StreamError> {
        match f {
            Frame::Hello {
                version, pid, exe, ..
            } => {
                if self.pid != 0 {
                    return Err(StreamError::SecondHello);
                }
                if pid == 0 {
                    return Err(StreamError::HelloFromZero);
                }
                self.pid = pid;
                self.me.pid = pid;
                self.me.exe = exe.into_owned();
                if version != cufall_capture::PROTOCOL_VERSION {
                    return Err(StreamError::Version { version });
                }
            }
            Frame::String { id, text } => {
                self.string_bytes += text.len();
                if self.string_bytes > MAX_STRING_BYTES {
                    return Err(StreamError::TooManyNames);
                }
                if let Some(old) = self.strings.insert(id, text.into_owned()) {
                    self.string_bytes -= old.len();
                }
                if !self.held.is_empty() {
                    self.held_bytes = 0;
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
                if name == CaptureEventKind::CuptiDropped.as_str()
                    && let Ok(mut s) = self.state.lock()
                {
                    s.summary.cupti_dropped += count;
                }
                if name == CaptureEventKind::CudaAttached.as_str() && count > 0 {
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
            Frame::Bye { t_ns } => {
                self.me.said_goodbye = true;
                self.bye_ns = Some(t_ns);
            }
            Frame::Window { t_ns, open } => self.window_edge(t_ns, open, None),
            Frame::Context { .. } => self.me.contexts += 1,
            Frame::Graph {
                graph_id,
                exec_id,
                nodes,
                kernels,
            } => self.graph_contents(graph_id, exec_id, nodes, &kernels),
        }
        if self.held.len() > MAX_HELD || self.held_bytes > MAX_HELD_BYTES {
            return Err(StreamError::TooMuchHeld);
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
            let name = match self.demangled.get(&k.name) {
                Some(n) => n.clone(),
                None => {
                    let raw = self.name(k.name, true).unwrap_or_default();
                    let n = demangle(&raw);
                    self.demangled.insert(k.name, n.clone());
                    n
                }
            };
            match named.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += k.count,
                None => named.push((name, k.count)),
            }
        }
        named.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let kernel_nodes: u64 = named.iter().map(|(_, c)| u64::from(*c)).sum();
        // A row of bounded size whatever the program sends: the most frequent kernels, names
        // cut (the kernels table holds every launch's full name).
        let mut list: Vec<String> = named
            .iter()
            .take(GRAPH_KERNELS_LISTED)
            .map(|(n, c)| {
                let n: String = n.chars().take(GRAPH_NAME_CHARS).collect();
                format!("{c} × {n}")
            })
            .collect();
        if named.len() > GRAPH_KERNELS_LISTED {
            list.push(format!(
                "{} more kernels",
                named.len() - GRAPH_KERNELS_LISTED
            ));
        }
        self.event(
            CaptureEventKind::GraphContents,
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
            if self.windows_open > 0 && !self.trigger.nests {
                // cudaProfilerStart while profiling: CUDA ignores it, and one stop ends both.
                return;
            }
            self.windows_open += 1;
        } else if self.windows_open == 0 {
            // A close whose open has not arrived yet (at most a few per flush round).
            if closing_at_exit.is_none() && self.early_closes.len() < 64 {
                self.early_closes.push(t_ns);
            }
            return;
        } else {
            self.windows_open -= 1;
        }
        let what = match (open, closing_at_exit) {
            (_, Some(why)) => why.to_string(),
            (true, None) => format!("{} in process {}", self.trigger.open, self.pid),
            (false, None) => format!("{} in process {}", self.trigger.close, self.pid),
        };
        let _ = self.tx.send(SinkMsg::Window(Edge {
            t_ns,
            open,
            source: self.pid,
            why: what,
        }));
        // An open whose close came first: close it at that close's time.
        if open && let Some(i) = self.early_closes.iter().position(|c| *c >= t_ns) {
            let close = self.early_closes.remove(i);
            self.window_edge(close, false, None);
        }
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
            Held::Range(r) => self.admit_range(r, last_chance),
            Held::Activity(a) => self.admit_activity(a, last_chance),
            Held::Api(c) => self.admit_api(c, last_chance),
        }
    }

    fn admit_range(&mut self, r: cufall_capture::Range<'static>, last_chance: bool) {
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
            self.held_bytes += match &r.name {
                Name::Text(t) => t.len(),
                Name::Bytes(b) => b.len(),
                Name::Registered(_) => 0,
            } + 64;
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
                WireRangeKind::PushPop => RangeKind::PushPop,
                WireRangeKind::StartEnd => RangeKind::StartEnd,
                WireRangeKind::Mark => RangeKind::Mark,
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

    fn admit_activity(&mut self, a: cufall_capture::Activity, last_chance: bool) {
        // CUPTI leaves a record's times 0 when it could not timestamp it (seen on the
        // H200 for two kernels of a JAX program): kept, it would stretch the trace back
        // to 1970.
        if a.start_ns <= 0 || a.end_ns < a.start_ns {
            self.untimed += 1;
            return;
        }
        let name = match a.kind {
            cufall_capture::WireActivityKind::Kernel => {
                if let Some(n) = self.demangled.get(&a.name) {
                    n.clone()
                } else if let Some(raw) = self.name(a.name, last_chance) {
                    let n = demangle(&raw);
                    self.demangled.insert(a.name, n.clone());
                    n
                } else {
                    self.held_bytes += 96;
                    self.held.push(Held::Activity(a));
                    return;
                }
            }
            cufall_capture::WireActivityKind::Memcpy => {
                format!("memcpy {}", copy_kind_name(a.copy_kind))
            }
            cufall_capture::WireActivityKind::Memset => "memset".into(),
            cufall_capture::WireActivityKind::Graph => format!("graph {}", a.graph_id),
        };
        let kind = match a.kind {
            cufall_capture::WireActivityKind::Kernel => ActivityKind::Kernel,
            cufall_capture::WireActivityKind::Memcpy => ActivityKind::Memcpy,
            cufall_capture::WireActivityKind::Memset => ActivityKind::Memset,
            cufall_capture::WireActivityKind::Graph => ActivityKind::Graph,
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
            bytes: matches!(kind, ActivityKind::Memcpy | ActivityKind::Memset).then_some(a.bytes),
            pid: self.pid,
            grid: is_kernel.then(|| dims(a.grid)),
            block: is_kernel.then(|| dims(a.block)),
            context_id: Some(a.context),
            graph_id: (a.graph_id != 0).then_some(a.graph_id),
        });
    }

    fn admit_api(&mut self, c: cufall_capture::WireApiCall, last_chance: bool) {
        if c.start_ns <= 0 || c.end_ns < c.start_ns {
            self.untimed += 1;
            return;
        }
        let Some(name) = self.name(c.name, last_chance) else {
            self.held_bytes += 48;
            self.held.push(Held::Api(c));
            return;
        };
        self.me.api_calls += 1;
        self.saw_record(c.end_ns);
        self.api.push(ApiCall {
            start_ns: c.start_ns,
            end_ns: c.end_ns,
            domain: match c.domain {
                cufall_capture::WireApiDomain::Runtime => ApiDomain::Runtime,
                cufall_capture::WireApiDomain::Driver => ApiDomain::Driver,
            },
            name,
            pid: self.pid,
            tid: c.tid,
            correlation_id: c.correlation,
        });
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
        self.held_bytes = 0;
        let held = std::mem::take(&mut self.held);
        for h in held {
            self.admit(h, true);
        }
        let now = crate::now_unix_ns();
        self.close_window_at_exit(now);
        // A process that never did GPU work nor sent a range (a compile worker, a data loader)
        // has nothing that could be missing: no warnings, one summary line for all of them.
        if self.untimed > 0 {
            self.event(
                CaptureEventKind::Untimed,
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

    /// A window the process left open ends at its exit, with a row that says so. A process
    /// still running when the recording closed keeps it open: the end of the recording
    /// closes it.
    fn close_window_at_exit(&mut self, now: i64) {
        if self.windows_open == 0 || self.still_running {
            return;
        }
        let exit_ns = self.bye_ns.unwrap_or(now);
        self.event(
            CaptureEventKind::WindowOpenAtExit,
            u64::from(self.windows_open),
            format!(
                "process {} exited with its capture window open ({} without {}): the window was closed at its exit",
                self.pid, self.trigger.open, self.trigger.close
            ),
        );
        let why = format!("the exit of process {}", self.pid);
        while self.windows_open > 0 {
            self.window_edge(exit_ns, false, Some(&why));
        }
    }

    /// Warnings for a process whose records may really be incomplete.
    fn warn_about_missing(&mut self, now: i64) {
        if self.cupti_attached && self.me.contexts > 0 && self.me.activities == 0 {
            self.event(
                CaptureEventKind::NoActivity,
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
                CaptureEventKind::NoGoodbye,
                0,
                format!(
                    "process {} ended without flushing capture (killed, crashed or _exit): {since}",
                    self.pid
                ),
            );
        }
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
