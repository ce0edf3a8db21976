//! The frames of the wire format (see the crate's documentation for their encoding).

use std::borrow::Cow;

use crate::kinds::{Kinds, WireActivityKind, WireApiDomain, WireRangeKind};

/// Version of this wire format; the recorder refuses a connection that speaks another.
pub const PROTOCOL_VERSION: u32 = 2;
/// Most distinct kernels one [`Frame::Graph`] lists (the most frequent first).
pub const MAX_GRAPH_KERNELS: usize = 4096;
/// Largest frame body accepted; anything larger is a broken stream.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

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

/// The tag byte that opens each frame's body, shared by `encode` and `decode`.
pub(crate) mod tag {
    pub(crate) const HELLO: u8 = 1;
    pub(crate) const STRING: u8 = 2;
    pub(crate) const RANGE: u8 = 3;
    pub(crate) const ACTIVITY: u8 = 4;
    pub(crate) const API: u8 = 5;
    pub(crate) const STATUS: u8 = 6;
    pub(crate) const BYE: u8 = 7;
    pub(crate) const DEVICE: u8 = 8;
    pub(crate) const WINDOW: u8 = 9;
    pub(crate) const CONTEXT: u8 = 10;
    pub(crate) const GRAPH: u8 = 11;
}
