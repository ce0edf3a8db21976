//! The wire format between the capture library inside a profiled program
//! (`libcufall_inject.so`, the `inject/` crate) and the recording `cufall`.
//!
//! `cufall record -- CMD` starts CMD with:
//!
//! | variable | value |
//! |---|---|
//! | `CUDA_INJECTION64_PATH`, `NVTX_INJECTION64_PATH` | the capture library |
//! | [`ENV_SOCKET`] | the Unix socket the recorder listens on |
//! | [`ENV_KINDS`] | what to capture, as [`Kinds::to_env`] writes it |
//!
//! Every process of the program that loads the library (children inherit the environment)
//! opens one connection and sends [`Frame`]s, each encoded as
//!
//! ```text
//! u32 body length (little endian) | u8 tag | body
//! ```
//!
//! Integers are little endian, strings are a `u32` byte length and UTF-8 bytes. The first frame
//! of a connection is [`Frame::Hello`], the last (when the process exits normally)
//! [`Frame::Bye`]. Names that repeat (kernel names, NVTX domains, registered strings, API
//! names) are sent once as [`Frame::String`] and referred to by id; an id may be used before
//! its definition arrives (definitions and uses can travel in different per-thread buffers), so
//! the receiver resolves late ones when they come.
//!
//! Timestamps are nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of CUPTI's
//! activity records and of PM samples on Linux, so records and counter samples line up without
//! conversion.
//!
//! The types that mirror a trace row type of the same meaning carry a `Wire` prefix
//! ([`WireRangeKind`], [`WireActivityKind`], [`WireApiDomain`], [`WireApiCall`]), so the recorder,
//! which turns one into the other, names both without renaming imports.
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

use std::borrow::Cow;

/// Version of this wire format; the recorder refuses a connection that speaks another.
pub const PROTOCOL_VERSION: u32 = 2;
/// Path of the recorder's Unix socket.
pub const ENV_SOCKET: &str = "CUFALL_CAPTURE_SOCKET";
/// What to capture (see [`Kinds::parse`]).
pub const ENV_KINDS: &str = "CUFALL_CAPTURE";
/// Set only when the recording is limited to windows the program opens itself: the trigger,
/// as [`RangeTrigger::to_env`] writes it.
pub const ENV_RANGE: &str = "CUFALL_CAPTURE_RANGE";
/// File name of the capture library, installed next to the `cufall` binary.
pub const LIBRARY_FILE: &str = "libcufall_inject.so";
/// Longest name sent; longer ones are cut, and a longer one received is a broken stream.
pub const MAX_NAME_BYTES: usize = 65_536;
/// Most distinct kernels one [`Frame::Graph`] lists (the most frequent first).
pub const MAX_GRAPH_KERNELS: usize = 4096;
/// Largest frame body accepted; anything larger is a broken stream.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// What a recording captures from the program, a set of flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Kinds(u32);

impl Kinds {
    /// NVTX ranges and marks of every domain.
    pub const NVTX: Kinds = Kinds(1);
    /// Kernels executed on the GPU.
    pub const KERNELS: Kinds = Kinds(2);
    /// Memory copies and memsets.
    pub const MEMCPY: Kinds = Kinds(4);
    /// The CUDA runtime and driver calls that launch, copy and synchronise, with host times.
    pub const API: Kinds = Kinds(8);
    /// CUDA graph launches as one record per graph launch (CUPTI's graph trace): the kernels
    /// inside a graph get no records of their own.
    pub const GRAPHS: Kinds = Kinds(16);
    /// CUDA graphs traced per node: a record for every kernel a graph runs (heavier: it
    /// delays the graph's nodes; measured in `docs/benchmarks.md`). Excludes [`Kinds::GRAPHS`].
    pub const GRAPH_NODES: Kinds = Kinds(32);
    /// Nothing.
    pub const NONE: Kinds = Kinds(0);
    /// What `record` captures when `--capture` is not given: graphs whole, as Nsight Systems
    /// does by default.
    pub const DEFAULT: Kinds = Kinds(1 | 2 | 4 | 16);

    const NAMES: [(&'static str, Kinds); 6] = [
        ("nvtx", Kinds::NVTX),
        ("kernels", Kinds::KERNELS),
        ("memcpy", Kinds::MEMCPY),
        ("api", Kinds::API),
        ("graphs", Kinds::GRAPHS),
        ("graph-nodes", Kinds::GRAPH_NODES),
    ];
    /// What `all` means: everything, with graphs whole.
    const ALL: Kinds = Kinds(1 | 2 | 4 | 8 | 16);

    pub fn contains(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether anything needs CUPTI (everything but NVTX does).
    pub fn needs_cupti(self) -> bool {
        self.0 & !Kinds::NVTX.0 != 0
    }

    pub fn union(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    /// Parses `nvtx,kernels,memcpy`, `all` or `none` (names in any order, case-insensitive);
    /// `none` stands alone. `graph-nodes` replaces the whole-graph records of `graphs` (also
    /// when `all` is given with it); naming both is an error.
    pub fn parse(text: &str) -> Result<Kinds, UnknownKind> {
        let mut out = Kinds::NONE;
        let words: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .collect();
        for word in &words {
            let lower = word.to_ascii_lowercase();
            match lower.as_str() {
                "none" if words.len() > 1 => return Err(UnknownKind::NoneWithOthers(text.into())),
                "none" => {}
                "all" => out = out.union(Kinds::ALL),
                _ => match Kinds::NAMES.iter().find(|(n, _)| *n == lower) {
                    Some((_, k)) => out = out.union(*k),
                    None => return Err(UnknownKind::Unknown(word.to_string())),
                },
            }
        }
        if out.contains(Kinds::GRAPH_NODES) && out.contains(Kinds::GRAPHS) {
            let explicit = words.iter().any(|w| w.eq_ignore_ascii_case("graphs"));
            if explicit {
                return Err(UnknownKind::GraphsTwice(text.into()));
            }
            out = Kinds(out.0 & !Kinds::GRAPHS.0);
        }
        Ok(out)
    }

    /// The names of the set flags, comma-separated (`none` for the empty set).
    pub fn to_env(self) -> String {
        let names: Vec<&str> = Kinds::NAMES
            .iter()
            .filter(|(_, k)| self.contains(*k))
            .map(|(n, _)| *n)
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// A `--capture` list that names no set of capture kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownKind {
    /// A word that names no kind.
    #[error(
        "unknown capture kind `{0}` (known: nvtx, kernels, memcpy, api, graphs, graph-nodes, all, none)"
    )]
    Unknown(String),
    /// `graphs` and `graph-nodes` together: a graph is traced whole or per node, not both.
    #[error(
        "`{0}`: `graphs` (one record per graph launch) and `graph-nodes` (one per kernel node) exclude each other; keep one"
    )]
    GraphsTwice(String),
    /// `none` with other kinds: which one was meant is unclear.
    #[error("`{0}`: `none` turns capture off and cannot be combined with other kinds")]
    NoneWithOthers(String),
}

/// What opens a capture window inside the program (`--capture-range`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeTrigger {
    /// Between `cudaProfilerStart`/`cuProfilerStart` and the matching stop, in any process.
    ProfilerApi,
    /// From the start of an NVTX range of this name (push/pop or start/end, any domain) to its
    /// end.
    Nvtx(String),
}

impl RangeTrigger {
    /// Parses `cuda-profiler-api` or `nvtx:NAME`.
    pub fn parse(text: &str) -> Result<RangeTrigger, BadRange> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("cuda-profiler-api") || t.eq_ignore_ascii_case("cudaProfilerApi")
        {
            return Ok(RangeTrigger::ProfilerApi);
        }
        match t.split_once(':') {
            Some((kind, name)) if kind.eq_ignore_ascii_case("nvtx") => {
                if name.is_empty() {
                    Err(BadRange::EmptyName)
                } else if name.len() > MAX_NAME_BYTES {
                    Err(BadRange::TooLong)
                } else {
                    Ok(RangeTrigger::Nvtx(name.to_string()))
                }
            }
            _ => Err(BadRange::Unknown(t.to_string())),
        }
    }

    /// The value of [`ENV_RANGE`]; [`RangeTrigger::parse`] reads it back.
    pub fn to_env(&self) -> String {
        match self {
            RangeTrigger::ProfilerApi => "cuda-profiler-api".into(),
            RangeTrigger::Nvtx(n) => format!("nvtx:{n}"),
        }
    }
}

/// A `--capture-range` value that names no trigger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRange {
    #[error(
        "unknown capture range `{0}` (known: cuda-profiler-api, nvtx:NAME; a window from another terminal: --capture-range signal)"
    )]
    Unknown(String),
    #[error("`nvtx:` needs a range name, e.g. nvtx:serve")]
    EmptyName,
    #[error("the NVTX range name is longer than {MAX_NAME_BYTES} bytes")]
    TooLong,
}

/// How an NVTX range was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireRangeKind {
    PushPop,
    StartEnd,
    /// An instantaneous marker (`nvtxMark`): start equals end.
    Mark,
}

/// The payload attached to an NVTX event, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Payload {
    None,
    Int(i64),
    UInt(u64),
    Float(f64),
}

/// The message of an NVTX event: inline text or a registered string's id.
#[derive(Clone, Debug, PartialEq)]
pub enum Name<'a> {
    Text(Cow<'a, str>),
    /// Text as the program gave it, sent unchecked (it decodes as [`Name::Text`], invalid
    /// UTF-8 replaced): the hot path skips validating every name.
    Bytes(&'a [u8]),
    Registered(u32),
}

/// One finished NVTX range (or mark) of one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Range<'a> {
    pub start_ns: i64,
    pub end_ns: i64,
    /// Thread that pushed or started the range (system thread id).
    pub tid: u32,
    /// Push/pop nesting depth within the domain on that thread (0 = outermost).
    pub depth: u32,
    pub kind: WireRangeKind,
    /// String id of the domain's name; 0 is the default domain.
    pub domain: u32,
    pub category: u32,
    /// ARGB colour, when one was given.
    pub color: Option<u32>,
    pub payload: Payload,
    pub name: Name<'a>,
}

/// What a GPU activity record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireActivityKind {
    Kernel,
    Memcpy,
    Memset,
    /// A whole CUDA graph launch (`--capture graphs`).
    Graph,
}

/// One kernel, copy, memset or graph launch on a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activity {
    pub kind: WireActivityKind,
    /// CUDA device ordinal.
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    /// CUPTI's correlation id, shared with the API call that launched it.
    pub correlation: u32,
    pub start_ns: i64,
    pub end_ns: i64,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    /// The CUDA graph it belongs to; 0 when it was not launched from a graph.
    pub graph_id: u32,
    /// Bytes moved or set (copies and memsets).
    pub bytes: u64,
    /// CUPTI's memcpy kind (`CUpti_ActivityMemcpyKind`): 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, ...
    pub copy_kind: u8,
    /// String id of the (mangled) kernel name; 0 for copies, memsets and graphs.
    pub name: u32,
}

/// Which CUDA API a [`WireApiCall`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireApiDomain {
    Runtime,
    Driver,
}

/// One CUDA runtime or driver call, with its host-side duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireApiCall {
    pub domain: WireApiDomain,
    pub start_ns: i64,
    pub end_ns: i64,
    pub tid: u32,
    pub correlation: u32,
    /// String id of the function's name (e.g. `cudaLaunchKernel`).
    pub name: u32,
}

/// One kernel of a CUDA graph, with how many nodes run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphKernel {
    /// String id of the (mangled) kernel name.
    pub name: u32,
    pub count: u32,
}

/// A frame of the wire format.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame<'a> {
    /// First frame of every connection.
    Hello {
        version: u32,
        pid: u32,
        ppid: u32,
        /// What this process will capture (after its own checks).
        kinds: Kinds,
        /// The program's executable, for the user.
        exe: Cow<'a, str>,
    },
    /// Defines string `id` (ids start at 1 and are unique within a connection).
    String {
        id: u32,
        text: Cow<'a, str>,
    },
    Range(Range<'a>),
    Activity(Activity),
    Api(WireApiCall),
    /// Something the user must hear about capture in this process: CUPTI missing, records
    /// dropped by CUPTI, ranges left open at exit, ...
    Status {
        t_ns: i64,
        /// A [`CaptureEventKind`]'s name.
        event: Cow<'a, str>,
        count: u64,
        detail: Cow<'a, str>,
    },
    /// A GPU as this process numbers it (`CUDA_VISIBLE_DEVICES` may renumber them), with its
    /// UUID so the recorder maps it to its own device numbering.
    Device {
        id: u32,
        uuid: [u8; 16],
    },
    /// The process is exiting normally; nothing follows.
    Bye {
        t_ns: i64,
    },
    /// The program opened (`open`) or closed a capture window at `t_ns` (`--capture-range`):
    /// `cudaProfilerStart`/`Stop`, or the start/end of the named NVTX range.
    Window {
        t_ns: i64,
        open: bool,
    },
    /// The process created a CUDA context on a device (CUPTI's context record): it did GPU work
    /// (a process that only initialised CUDA, such as a compile worker, sends none).
    Context {
        device: u32,
        context: u32,
    },
    /// A CUDA graph was instantiated (graphs traced whole): its id, the id of the instantiated
    /// graph (0 if unknown), its node count (child graphs included) and its kernels.
    Graph {
        graph_id: u32,
        exec_id: u32,
        nodes: u32,
        kernels: Vec<GraphKernel>,
    },
}

/// NVML's spelling of a GPU UUID (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The names of the status events the library sends and the recorder writes (the `capture`
/// table's `event` column), spelt once in `cufall-model`. [`Frame::Status`] carries the name as
/// text, so a newer library's names cross the wire too.
pub use cufall_model::event::{CaptureEventKind, CostKind};

mod tag {
    pub const HELLO: u8 = 1;
    pub const STRING: u8 = 2;
    pub const RANGE: u8 = 3;
    pub const ACTIVITY: u8 = 4;
    pub const API: u8 = 5;
    pub const STATUS: u8 = 6;
    pub const BYE: u8 = 7;
    pub const DEVICE: u8 = 8;
    pub const WINDOW: u8 = 9;
    pub const CONTEXT: u8 = 10;
    pub const GRAPH: u8 = 11;
}

/// Appends the encoding of `frame` to `out`.
pub fn encode(frame: &Frame<'_>, out: &mut Vec<u8>) {
    // One reservation up front: the field writes below then never reallocate for the fixed
    // part of a frame (the hot path encodes an NVTX range per pop).
    out.reserve(96);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer(out);
    match frame {
        Frame::Hello {
            version,
            pid,
            ppid,
            kinds,
            exe,
        } => {
            w.u8(tag::HELLO);
            w.u32(*version);
            w.u32(*pid);
            w.u32(*ppid);
            w.u32(kinds.0);
            w.str(exe);
        }
        Frame::String { id, text } => {
            w.u8(tag::STRING);
            w.u32(*id);
            w.str(text);
        }
        Frame::Range(r) => encode_range(&mut w, r),
        Frame::Activity(a) => encode_activity(&mut w, a),
        Frame::Api(c) => {
            w.u8(tag::API);
            w.u8(match c.domain {
                WireApiDomain::Runtime => 0,
                WireApiDomain::Driver => 1,
            });
            w.i64(c.start_ns);
            w.i64(c.end_ns);
            w.u32(c.tid);
            w.u32(c.correlation);
            w.u32(c.name);
        }
        Frame::Status {
            t_ns,
            event,
            count,
            detail,
        } => {
            w.u8(tag::STATUS);
            w.i64(*t_ns);
            w.str(event);
            w.u64(*count);
            w.str(detail);
        }
        Frame::Device { id, uuid } => {
            w.u8(tag::DEVICE);
            w.u32(*id);
            w.0.extend_from_slice(uuid);
        }
        Frame::Bye { t_ns } => {
            w.u8(tag::BYE);
            w.i64(*t_ns);
        }
        Frame::Window { t_ns, open } => {
            w.u8(tag::WINDOW);
            w.i64(*t_ns);
            w.u8(u8::from(*open));
        }
        Frame::Context { device, context } => {
            w.u8(tag::CONTEXT);
            w.u32(*device);
            w.u32(*context);
        }
        Frame::Graph {
            graph_id,
            exec_id,
            nodes,
            kernels,
        } => encode_graph(&mut w, *graph_id, *exec_id, *nodes, kernels),
    }
    let body = out.len() - at - 4;
    let len = u32::try_from(body).unwrap_or(u32::MAX).to_le_bytes();
    out[at..at + 4].copy_from_slice(&len);
}

/// The body of a [`Frame::Activity`].
fn encode_activity(w: &mut Writer<'_>, a: &Activity) {
    w.u8(tag::ACTIVITY);
    w.u8(match a.kind {
        WireActivityKind::Kernel => 0,
        WireActivityKind::Memcpy => 1,
        WireActivityKind::Memset => 2,
        WireActivityKind::Graph => 3,
    });
    w.u32(a.device);
    w.u32(a.context);
    w.u32(a.stream);
    w.u32(a.correlation);
    w.i64(a.start_ns);
    w.i64(a.end_ns);
    for v in a.grid.iter().chain(&a.block) {
        w.i32(*v);
    }
    w.u32(a.graph_id);
    w.u64(a.bytes);
    w.u8(a.copy_kind);
    w.u32(a.name);
}

/// The body of a [`Frame::Graph`]: at most [`MAX_GRAPH_KERNELS`] kernels.
fn encode_graph(
    w: &mut Writer<'_>,
    graph_id: u32,
    exec_id: u32,
    nodes: u32,
    kernels: &[GraphKernel],
) {
    w.u8(tag::GRAPH);
    w.u32(graph_id);
    w.u32(exec_id);
    w.u32(nodes);
    let kernels = &kernels[..kernels.len().min(MAX_GRAPH_KERNELS)];
    w.u32(u32::try_from(kernels.len()).unwrap_or(0));
    for k in kernels {
        w.u32(k.name);
        w.u32(k.count);
    }
}

/// The body of a [`Frame::Range`].
fn encode_range(w: &mut Writer<'_>, r: &Range<'_>) {
    w.u8(tag::RANGE);
    w.i64(r.start_ns);
    w.i64(r.end_ns);
    w.u32(r.tid);
    w.u32(r.depth);
    w.u8(match r.kind {
        WireRangeKind::PushPop => 0,
        WireRangeKind::StartEnd => 1,
        WireRangeKind::Mark => 2,
    });
    w.u32(r.domain);
    w.u32(r.category);
    match r.color {
        Some(c) => {
            w.u8(1);
            w.u32(c);
        }
        None => w.u8(0),
    }
    match r.payload {
        Payload::None => w.u8(0),
        Payload::Int(v) => {
            w.u8(1);
            w.i64(v);
        }
        Payload::UInt(v) => {
            w.u8(2);
            w.u64(v);
        }
        Payload::Float(v) => {
            w.u8(3);
            w.u64(v.to_bits());
        }
    }
    match &r.name {
        Name::Text(t) => {
            w.u8(0);
            w.str(t);
        }
        Name::Bytes(b) => {
            w.u8(0);
            w.bytes(b);
        }
        Name::Registered(id) => {
            w.u8(1);
            w.u32(*id);
        }
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        // A name longer than 64 KiB is cut (at a character boundary): no real name is, and a
        // bounded frame keeps a runaway string from stalling the stream.
        let mut end = s.len().min(MAX_NAME_BYTES);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes(&s.as_bytes()[..end]);
    }
    fn bytes(&mut self, b: &[u8]) {
        let b = &b[..b.len().min(MAX_NAME_BYTES)];
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
    }
}

/// Why a byte stream is not a valid sequence of frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("a frame of {0} bytes is larger than the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("unknown frame tag {0}")]
    UnknownTag(u8),
    #[error("a frame with tag {tag} ends early (needs {needed} more bytes)")]
    Short { tag: u8, needed: usize },
    #[error("a frame with tag {tag} has {extra} bytes left over")]
    Trailing { tag: u8, extra: usize },
    #[error("invalid value {value} for {what}")]
    BadValue { what: &'static str, value: u8 },
    #[error("a string of {0} bytes is longer than the {MAX_NAME_BYTES}-byte limit")]
    NameTooLong(usize),
    #[error("a graph listing {0} kernels, more than the {MAX_GRAPH_KERNELS} allowed")]
    TooManyGraphKernels(usize),
}

/// Splits a byte stream into frames; feed it bytes as they arrive.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    at: usize,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        } else if self.at > (1 << 20) {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received that do not yet form a whole frame.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'static>>, ProtocolError> {
        let rest = &self.buf[self.at..];
        if rest.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(ProtocolError::TooLarge(len));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let frame = decode_body(&rest[4..4 + len])?;
        self.at += 4 + len;
        Ok(Some(frame))
    }
}

/// Decodes one frame body (the bytes after the length).
pub fn decode_body(body: &[u8]) -> Result<Frame<'static>, ProtocolError> {
    let mut r = Reader { b: body, tag: 0 };
    let t = r.u8()?;
    r.tag = t;
    let frame = match t {
        tag::HELLO => Frame::Hello {
            version: r.u32()?,
            pid: r.u32()?,
            ppid: r.u32()?,
            kinds: Kinds(r.u32()?),
            exe: r.str()?,
        },
        tag::STRING => Frame::String {
            id: r.u32()?,
            text: r.str()?,
        },
        tag::RANGE => decode_range(&mut r)?,
        tag::ACTIVITY => decode_activity(&mut r)?,
        tag::API => Frame::Api(WireApiCall {
            domain: match r.u8()? {
                0 => WireApiDomain::Runtime,
                1 => WireApiDomain::Driver,
                v => {
                    return Err(ProtocolError::BadValue {
                        what: "API domain",
                        value: v,
                    });
                }
            },
            start_ns: r.i64()?,
            end_ns: r.i64()?,
            tid: r.u32()?,
            correlation: r.u32()?,
            name: r.u32()?,
        }),
        tag::STATUS => Frame::Status {
            t_ns: r.i64()?,
            event: r.str()?,
            count: r.u64()?,
            detail: r.str()?,
        },
        tag::BYE => Frame::Bye { t_ns: r.i64()? },
        tag::DEVICE => Frame::Device {
            id: r.u32()?,
            uuid: r.array()?,
        },
        tag::WINDOW => Frame::Window {
            t_ns: r.i64()?,
            open: match r.u8()? {
                0 => false,
                1 => true,
                v => {
                    return Err(ProtocolError::BadValue {
                        what: "window flag",
                        value: v,
                    });
                }
            },
        },
        tag::CONTEXT => Frame::Context {
            device: r.u32()?,
            context: r.u32()?,
        },
        tag::GRAPH => {
            let graph_id = r.u32()?;
            let exec_id = r.u32()?;
            let nodes = r.u32()?;
            let n = r.u32()? as usize;
            if n > MAX_GRAPH_KERNELS {
                return Err(ProtocolError::TooManyGraphKernels(n));
            }
            let mut kernels = Vec::with_capacity(n);
            for _ in 0..n {
                kernels.push(GraphKernel {
                    name: r.u32()?,
                    count: r.u32()?,
                });
            }
            Frame::Graph {
                graph_id,
                exec_id,
                nodes,
                kernels,
            }
        }
        other => return Err(ProtocolError::UnknownTag(other)),
    };
    if !r.b.is_empty() {
        return Err(ProtocolError::Trailing {
            tag: t,
            extra: r.b.len(),
        });
    }
    Ok(frame)
}

fn decode_range(r: &mut Reader<'_>) -> Result<Frame<'static>, ProtocolError> {
    let start_ns = r.i64()?;
    let end_ns = r.i64()?;
    let tid = r.u32()?;
    let depth = r.u32()?;
    let kind = match r.u8()? {
        0 => WireRangeKind::PushPop,
        1 => WireRangeKind::StartEnd,
        2 => WireRangeKind::Mark,
        v => {
            return Err(ProtocolError::BadValue {
                what: "range kind",
                value: v,
            });
        }
    };
    let domain = r.u32()?;
    let category = r.u32()?;
    let color = match r.u8()? {
        0 => None,
        _ => Some(r.u32()?),
    };
    let payload = match r.u8()? {
        0 => Payload::None,
        1 => Payload::Int(r.i64()?),
        2 => Payload::UInt(r.u64()?),
        3 => Payload::Float(f64::from_bits(r.u64()?)),
        v => {
            return Err(ProtocolError::BadValue {
                what: "payload type",
                value: v,
            });
        }
    };
    let name = match r.u8()? {
        0 => Name::Text(r.str()?),
        _ => Name::Registered(r.u32()?),
    };
    Ok(Frame::Range(Range {
        start_ns,
        end_ns,
        tid,
        depth,
        kind,
        domain,
        category,
        color,
        payload,
        name,
    }))
}

fn decode_activity(r: &mut Reader<'_>) -> Result<Frame<'static>, ProtocolError> {
    let kind = match r.u8()? {
        0 => WireActivityKind::Kernel,
        1 => WireActivityKind::Memcpy,
        2 => WireActivityKind::Memset,
        3 => WireActivityKind::Graph,
        v => {
            return Err(ProtocolError::BadValue {
                what: "activity kind",
                value: v,
            });
        }
    };
    let device = r.u32()?;
    let context = r.u32()?;
    let stream = r.u32()?;
    let correlation = r.u32()?;
    let start_ns = r.i64()?;
    let end_ns = r.i64()?;
    let mut dims = [0i32; 6];
    for d in &mut dims {
        *d = r.i32()?;
    }
    Ok(Frame::Activity(Activity {
        kind,
        device,
        context,
        stream,
        correlation,
        start_ns,
        end_ns,
        grid: [dims[0], dims[1], dims[2]],
        block: [dims[3], dims[4], dims[5]],
        graph_id: r.u32()?,
        bytes: r.u64()?,
        copy_kind: r.u8()?,
        name: r.u32()?,
    }))
}

struct Reader<'a> {
    b: &'a [u8],
    tag: u8,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.b.len() < n {
            return Err(ProtocolError::Short {
                tag: self.tag,
                needed: n - self.b.len(),
            });
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, ProtocolError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn str(&mut self) -> Result<Cow<'static, str>, ProtocolError> {
        let n = self.u32()? as usize;
        // The encoder never writes a longer one: a longer length is garbage, not a name.
        if n > MAX_NAME_BYTES {
            return Err(ProtocolError::NameTooLong(n));
        }
        let bytes = self.take(n)?;
        Ok(Cow::Owned(String::from_utf8_lossy(bytes).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames() -> Vec<Frame<'static>> {
        vec![
            Frame::Hello {
                version: PROTOCOL_VERSION,
                pid: 42,
                ppid: 1,
                kinds: Kinds::DEFAULT,
                exe: "/usr/bin/python3".into(),
            },
            Frame::String {
                id: 7,
                text: "_Z6kernelPf".into(),
            },
            Frame::Range(Range {
                start_ns: 1_764_000_000_000_000_000,
                end_ns: 1_764_000_000_000_123_456,
                tid: 4242,
                depth: 2,
                kind: WireRangeKind::PushPop,
                domain: 0,
                category: 3,
                color: Some(0xff00_ff00),
                payload: Payload::Float(1.5),
                name: Name::Text("verify".into()),
            }),
            Frame::Range(Range {
                start_ns: 5,
                end_ns: 5,
                tid: 1,
                depth: 0,
                kind: WireRangeKind::Mark,
                domain: 9,
                category: 0,
                color: None,
                payload: Payload::UInt(u64::MAX),
                name: Name::Registered(11),
            }),
            Frame::Activity(Activity {
                kind: WireActivityKind::Kernel,
                device: 1,
                context: 2,
                stream: 7,
                correlation: 99,
                start_ns: 10,
                end_ns: 20,
                grid: [132, 1, 1],
                block: [256, 1, 1],
                graph_id: 0,
                bytes: 0,
                copy_kind: 0,
                name: 7,
            }),
            Frame::Api(WireApiCall {
                domain: WireApiDomain::Driver,
                start_ns: 1,
                end_ns: 2,
                tid: 3,
                correlation: 99,
                name: 8,
            }),
            Frame::Status {
                t_ns: 3,
                event: CaptureEventKind::CuptiDropped.as_str().into(),
                count: 12,
                detail: "context 1".into(),
            },
            Frame::Device {
                id: 0,
                uuid: [7; 16],
            },
            Frame::Bye { t_ns: 4 },
            Frame::Window {
                t_ns: 5,
                open: true,
            },
            Frame::Window {
                t_ns: 6,
                open: false,
            },
            Frame::Context {
                device: 1,
                context: 3,
            },
            Frame::Graph {
                graph_id: 12,
                exec_id: 13,
                nodes: 48,
                kernels: vec![
                    GraphKernel { name: 7, count: 24 },
                    GraphKernel { name: 9, count: 1 },
                ],
            },
        ]
    }

    #[test]
    fn every_frame_round_trips_through_a_byte_stream_cut_anywhere() {
        let mut bytes = Vec::new();
        for f in frames() {
            encode(&f, &mut bytes);
        }
        for cut in 0..bytes.len() {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                d.push(part);
                while let Some(f) = d.next_frame().expect("valid stream") {
                    got.push(f);
                }
            }
            assert_eq!(got, frames(), "cut at {cut}");
            assert_eq!(d.pending_bytes(), 0);
        }
    }

    /// A cost row crosses the wire whole.
    #[test]
    fn cost_rows_round_trip() {
        let nvtx = CaptureEventKind::Cost {
            kind: CostKind::Nvtx,
            measured: true,
        };
        let f = Frame::Status {
            t_ns: 1_764_000_000_000_000_000,
            event: nvtx.as_str().into(),
            count: 187,
            detail: "187 ns per NVTX range".into(),
        };
        let mut bytes = Vec::new();
        encode(&f, &mut bytes);
        let mut d = Decoder::new();
        d.push(&bytes);
        assert_eq!(d.next_frame().unwrap(), Some(f));
    }

    #[test]
    fn unchecked_bytes_decode_as_text_with_bad_utf8_replaced() {
        let mut bytes = Vec::new();
        let range = |name| {
            Frame::Range(Range {
                start_ns: 1,
                end_ns: 2,
                tid: 3,
                depth: 0,
                kind: WireRangeKind::PushPop,
                domain: 0,
                category: 0,
                color: None,
                payload: Payload::None,
                name,
            })
        };
        encode(&range(Name::Bytes(b"draft\xff")), &mut bytes);
        let mut d = Decoder::new();
        d.push(&bytes);
        assert_eq!(
            d.next_frame().unwrap(),
            Some(range(Name::Text("draft\u{fffd}".into())))
        );
    }

    #[test]
    fn broken_streams_are_errors_not_panics() {
        let mut d = Decoder::new();
        d.push(&(MAX_FRAME_BYTES as u32 + 1).to_le_bytes());
        assert!(matches!(d.next_frame(), Err(ProtocolError::TooLarge(_))));
        assert_eq!(decode_body(&[99]), Err(ProtocolError::UnknownTag(99)));
        assert!(matches!(
            decode_body(&[tag::BYE, 1, 2]),
            Err(ProtocolError::Short { .. })
        ));
        let mut bytes = Vec::new();
        encode(&Frame::Bye { t_ns: 1 }, &mut bytes);
        let mut body = bytes[4..].to_vec();
        body.push(0);
        assert!(matches!(
            decode_body(&body),
            Err(ProtocolError::Trailing { .. })
        ));
    }

    #[test]
    fn uuids_are_spelled_like_nvml() {
        let mut u = [0u8; 16];
        u[0] = 0xab;
        u[15] = 0x01;
        assert_eq!(uuid_string(&u), "GPU-ab000000-0000-0000-0000-000000000001");
    }

    #[test]
    fn graphs_are_whole_unless_nodes_are_asked_for() {
        assert_eq!(
            Kinds::parse("nvtx,kernels,memcpy,graphs"),
            Ok(Kinds::DEFAULT)
        );
        let nodes = Kinds::parse("nvtx,kernels,memcpy,graph-nodes").unwrap();
        assert!(nodes.contains(Kinds::GRAPH_NODES) && !nodes.contains(Kinds::GRAPHS));
        let all_nodes = Kinds::parse("all,graph-nodes").unwrap();
        assert!(all_nodes.contains(Kinds::GRAPH_NODES) && !all_nodes.contains(Kinds::GRAPHS));
        assert!(all_nodes.contains(Kinds::API));
        assert!(matches!(
            Kinds::parse("graphs,graph-nodes"),
            Err(UnknownKind::GraphsTwice(_))
        ));
        assert_eq!(Kinds::parse(&nodes.to_env()), Ok(nodes));
    }

    #[test]
    fn capture_ranges_parse_and_round_trip() {
        assert_eq!(
            RangeTrigger::parse("cuda-profiler-api"),
            Ok(RangeTrigger::ProfilerApi)
        );
        let n = RangeTrigger::parse("nvtx:serve step").unwrap();
        assert_eq!(n, RangeTrigger::Nvtx("serve step".into()));
        assert_eq!(RangeTrigger::parse(&n.to_env()), Ok(n));
        assert_eq!(RangeTrigger::parse("nvtx:"), Err(BadRange::EmptyName));
        assert!(matches!(
            RangeTrigger::parse("profiler"),
            Err(BadRange::Unknown(_))
        ));
    }

    #[test]
    fn kinds_parse_and_print() {
        assert_eq!(
            Kinds::parse("nvtx,kernels,memcpy"),
            Ok(Kinds::NVTX.union(Kinds::KERNELS).union(Kinds::MEMCPY))
        );
        assert_eq!(Kinds::parse("none"), Ok(Kinds::NONE));
        assert_eq!(
            Kinds::parse(" NVTX , api "),
            Ok(Kinds::NVTX.union(Kinds::API))
        );
        assert_eq!(
            Kinds::parse("all").map(Kinds::to_env).as_deref(),
            Ok("nvtx,kernels,memcpy,api,graphs")
        );
        assert_eq!(Kinds::DEFAULT.to_env(), "nvtx,kernels,memcpy,graphs");
        assert_eq!(Kinds::NONE.to_env(), "none");
        assert!(Kinds::parse("kernel").is_err());
        assert_eq!(
            Kinds::parse("nvtx,none"),
            Err(UnknownKind::NoneWithOthers("nvtx,none".into()))
        );
        assert!(!Kinds::NVTX.needs_cupti());
        assert!(Kinds::DEFAULT.needs_cupti());
        assert!(!Kinds::NONE.contains(Kinds::NONE));
    }

    /// A valid stream of every frame kind, for the mutation tests.
    fn valid_stream() -> Vec<u8> {
        let mut bytes = Vec::new();
        for f in frames() {
            encode(&f, &mut bytes);
        }
        bytes
    }

    /// Decodes everything `bytes` holds; the decoder must stop at the first error.
    fn decode_all(bytes: &[u8], chunk: usize) -> Result<usize, ProtocolError> {
        let mut d = Decoder::new();
        let mut n = 0;
        for part in bytes.chunks(chunk.max(1)) {
            d.push(part);
            while let Some(_f) = d.next_frame()? {
                n += 1;
            }
        }
        Ok(n)
    }

    #[test]
    fn a_huge_string_length_is_an_error_before_any_allocation() {
        // A STRING frame whose length field claims 1 GiB inside a small frame.
        let mut body = vec![tag::STRING];
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&(1u32 << 30).to_le_bytes());
        assert_eq!(decode_body(&body), Err(ProtocolError::NameTooLong(1 << 30)));
    }

    proptest! {
        /// Garbage from a hostile or broken process: the decoder returns frames or an error,
        /// never panics, never reads past its input.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                                    chunk in 1usize..300) {
            let _ = decode_all(&bytes, chunk);
        }

        /// A valid stream with bytes flipped, inserted or cut: frames up to the damage, then
        /// an error or a wait for more bytes; never a panic.
        #[test]
        fn damaged_streams_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(),
                                       cut in any::<prop::sample::Index>(), mode in 0u8..3) {
            let mut bytes = valid_stream();
            let i = at.index(bytes.len());
            match mode {
                0 => bytes[i] ^= byte | 1,
                1 => bytes.insert(i, byte),
                _ => bytes.truncate(cut.index(bytes.len())),
            }
            let _ = decode_all(&bytes, 7);
        }

        #[test]
        fn ranges_round_trip(start in any::<i64>(), len in 0i64..1_000_000, tid in any::<u32>(),
                             depth in 0u32..64, cat in any::<u32>(), color in any::<Option<u32>>(),
                             name in ".{0,40}", payload in any::<i64>()) {
            let f = Frame::Range(Range {
                start_ns: start,
                end_ns: start.saturating_add(len),
                tid, depth, kind: WireRangeKind::StartEnd, domain: 3, category: cat, color,
                payload: Payload::Int(payload),
                name: Name::Text(name.into()),
            });
            let mut bytes = Vec::new();
            encode(&f, &mut bytes);
            let mut d = Decoder::new();
            d.push(&bytes);
            prop_assert_eq!(d.next_frame().unwrap(), Some(f));
        }
    }
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-capture (lib.rs)", &src.join("lib.rs"));
    }
}
