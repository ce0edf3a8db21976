//! Plain Rust types for the rows and the metadata of a cufall trace.
//!
//! These are what producers (the sampler, tests) hand to `cufall_trace::TraceWriter` and what the
//! live channel carries. They know nothing of Parquet (this crate depends on serde alone, so the
//! live feed builds without it); the column layout they map to is documented in `cufall-trace`'s
//! crate root and in `docs/trace-format.md`. `cufall_trace::model` re-exports this crate.
//!
//! [`summary`] holds the one summary of sample values (min, max, time-weighted mean) that the
//! terminal heatmap and the desktop timeline both draw from; [`time`] holds [`Nanos`], the one
//! type for a span of time and its one spelling (`4.56 ms`).
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

pub mod event;
pub mod peak;
pub mod summary;
pub mod time;
pub use event::{CaptureEventKind, CostKind};
pub use summary::Summary;
pub use time::{Nanos, nanos, nanos_u64, now_unix_ns};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `format` field of every manifest.
pub const FORMAT_NAME: &str = "cufall-trace";
/// Major version of the schema: a reader refuses traces with a larger major.
pub const SCHEMA_MAJOR: u32 = 1;
/// Minor version: additions that older readers can ignore (they warn).
pub const SCHEMA_MINOR: u32 = 4;
/// The first schema version cufall wrote.
pub const SCHEMA_FIRST: SchemaVersion = SchemaVersion { major: 1, minor: 0 };

/// A manifest's `schema_version`, `MAJOR.MINOR`. The parts are `u64` so that an absurdly large
/// major (`99999999999.0`) still reads as a version, newer than this cufall, rather than as
/// garbage; digits past `u64` saturate for the same reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SchemaVersion {
    pub major: u64,
    pub minor: u64,
}

impl SchemaVersion {
    /// The version this cufall writes.
    pub const CURRENT: SchemaVersion = SchemaVersion {
        major: SCHEMA_MAJOR as u64,
        minor: SCHEMA_MINOR as u64,
    };

    /// Parses `MAJOR.MINOR`: two runs of ASCII digits around one dot, nothing else (no sign,
    /// no spaces, no third part).
    pub fn parse(s: &str) -> Option<Self> {
        fn number(part: &str) -> Option<u64> {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(part.bytes().fold(0u64, |n, b| {
                n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
            }))
        }
        let (major, minor) = s.split_once('.')?;
        Some(SchemaVersion {
            major: number(major)?,
            minor: number(minor)?,
        })
    }

    /// Whether a reader of [`SchemaVersion::CURRENT`] must refuse this version (a newer major).
    pub fn is_newer_major(self) -> bool {
        self.major > Self::CURRENT.major
    }

    /// Whether this version is of the current major with a newer minor: it may hold columns,
    /// tables and enum values a reader of [`SchemaVersion::CURRENT`] does not know.
    pub fn is_newer_minor(self) -> bool {
        self.major == Self::CURRENT.major && self.minor > Self::CURRENT.minor
    }

    /// Whether this version is older than any cufall wrote (before [`SCHEMA_FIRST`]).
    pub fn is_before_first(self) -> bool {
        self < SCHEMA_FIRST
    }
}

impl std::fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The clock domain of every timestamp column.
pub const CLOCK_DOMAIN: &str = "unix_realtime_ns";

/// Index of a GPU as CUDA enumerates it (`cuDeviceGet` ordinal).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct DeviceId(pub u32);

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU {}", self.0)
    }
}

/// One GPU taking part in a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub id: DeviceId,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Chip name as CUPTI reports it, e.g. `GH100`. Empty when counters were unavailable.
    #[serde(default)]
    pub chip: String,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub pci_bus_id: String,
    #[serde(default)]
    pub sm_count: Option<u32>,
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
}

/// A counter recorded as one column of the samples table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricInfo {
    /// Full metric name with rollup/submetric, e.g. `sm__pipe_tensor_cycles_active.avg`.
    /// It is also the column name in the samples table.
    pub name: String,
    /// Unit as CUPTI reports it (`cycle`, `%`, `byte/second`, ...); empty when dimensionless.
    #[serde(default)]
    pub unit: String,
    #[serde(default)]
    pub description: String,
}

/// How a heatmap is derived from the recorded metric columns: the value shown is
/// `numerator / denominator` (or the raw numerator without a denominator), mapped to the colour
/// scale so that `full_scale` is the top.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeatmapSpec {
    /// Name of the numerator metric (a column of the samples table).
    pub metric: String,
    /// Name of the denominator metric, if the value is a ratio.
    #[serde(default)]
    pub denominator: Option<String>,
    /// Value mapped to the top of the colour scale. For ratios this is 1.0 unless set.
    #[serde(default)]
    pub full_scale: Option<f64>,
}

/// Whether the recording process closed the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordingStatus {
    /// The trace is still being written, or its writer was killed before closing it.
    Recording,
    /// The writer closed the trace normally.
    Complete,
}

/// PM-sampling settings of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingInfo {
    /// Requested GPU-time interval between samples.
    pub interval_ns: i64,
    /// Metrics recorded, in column order.
    pub metrics: Vec<MetricInfo>,
    /// Where the counters came from, e.g. `cupti_pm_sampling`.
    pub source: String,
}

/// The metadata of a trace (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// `MAJOR.MINOR` of the trace schema, see [`SCHEMA_MAJOR`].
    pub schema_version: String,
    /// Version of the cufall that wrote the trace.
    pub cufall_version: String,
    /// Clock domain of every `*_ns` column: nanoseconds since the Unix epoch (CLOCK_REALTIME).
    pub clock: String,
    pub created_unix_ns: i64,
    #[serde(default)]
    pub end_unix_ns: Option<i64>,
    pub status: RecordingStatus,
    #[serde(default)]
    pub hostname: String,
    /// The cufall command line that made the recording.
    #[serde(default)]
    pub command: Vec<String>,
    /// The program run under cufall, if any.
    #[serde(default)]
    pub target_command: Option<Vec<String>>,
    #[serde(default)]
    pub target_exit_code: Option<i32>,
    pub devices: Vec<DeviceInfo>,
    /// PM sampling settings; `None` for an NVML-only recording.
    #[serde(default)]
    pub sampling: Option<SamplingInfo>,
    /// Why GPU counters are missing from this recording, if they are.
    #[serde(default)]
    pub counters_unavailable: Option<String>,
    /// NVML polling interval; `None` when NVML was not recorded.
    #[serde(default)]
    pub nvml_interval_ns: Option<i64>,
    /// Heatmaps the user asked for when recording.
    #[serde(default)]
    pub heatmaps: Vec<HeatmapSpec>,
    /// Free-form extra facts (driver version, CUDA version, ...).
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
    /// How the program's host stacks were sampled, or why they were not; `None` when no
    /// program ran, and in traces before schema 1.4 (which say it in words only, in
    /// `extra.host_stacks`, [`HostStacksMeta::EXTRA_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_stacks: Option<HostStacksMeta>,
}

/// How a recording sampled the host stacks of the program it ran (`record --host-stacks`,
/// `--host-interval`), or why it has none: the manifest's `host_stacks`. Since schema 1.4;
/// writers still put the same in words in `extra.host_stacks` for people (`cufall info` shows
/// those), and an older trace has only the words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStacksMeta {
    /// The sampling interval asked for.
    pub interval_ns: i64,
    /// The frames the stacks hold.
    pub frames: HostFrames,
    /// Why there are no host stacks (`--host-stacks off`, no permission to read the program,
    /// ...), with the fix where there is one; `None` when host stacks were on.
    #[serde(default)]
    pub off_reason: Option<String>,
}

impl HostStacksMeta {
    /// The manifest's `extra` key whose words say what [`Manifest::host_stacks`] says (all that
    /// traces before 1.4 have): `on: every 1ms (1000 Hz), <frames>` or `off: <why>`.
    pub const EXTRA_KEY: &str = "host_stacks";
}

/// The frames a recording's host stacks hold. Since schema 1.4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostFrames {
    /// Python frames only.
    Python,
    /// Native frames only (perf task-clock samples, frame-pointer call chains).
    Native,
    /// Python frames with the native frame or system call each Python thread is in, and
    /// native frames for processes without Python (what `record` samples).
    #[default]
    Mixed,
    /// A kind a newer writer added: the stacks read all the same.
    #[serde(other)]
    Other,
}

impl Manifest {
    /// A manifest for a new recording with the current format version and no devices yet.
    pub fn new(cufall_version: &str, created_unix_ns: i64) -> Self {
        Manifest {
            format: FORMAT_NAME.to_string(),
            schema_version: format!("{}.{}", SCHEMA_MAJOR, SCHEMA_MINOR),
            cufall_version: cufall_version.to_string(),
            clock: CLOCK_DOMAIN.to_string(),
            created_unix_ns,
            end_unix_ns: None,
            status: RecordingStatus::Recording,
            hostname: String::new(),
            command: Vec::new(),
            target_command: None,
            target_exit_code: None,
            devices: Vec::new(),
            sampling: None,
            counters_unavailable: None,
            nvml_interval_ns: None,
            heatmaps: Vec::new(),
            extra: BTreeMap::new(),
            host_stacks: None,
        }
    }

    /// Names of the recorded metrics, in column order.
    pub fn metric_names(&self) -> Vec<&str> {
        self.sampling
            .iter()
            .flat_map(|s| s.metrics.iter().map(|m| m.name.as_str()))
            .collect()
    }
}

/// A run of consecutive PM samples of one device. `values[m][i]` is metric `m` of sample `i`,
/// metrics in the order of [`SamplingInfo::metrics`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleBatch {
    pub device: DeviceId,
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    pub values: Vec<Vec<f64>>,
}

impl SampleBatch {
    pub fn new(device: DeviceId, metric_count: usize) -> Self {
        SampleBatch {
            device,
            start_ns: Vec::new(),
            end_ns: Vec::new(),
            values: vec![Vec::new(); metric_count],
        }
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Appends one sample; `values` must have one entry per metric.
    pub fn push(&mut self, start_ns: i64, end_ns: i64, values: &[f64]) {
        debug_assert_eq!(values.len(), self.values.len());
        self.start_ns.push(start_ns);
        self.end_ns.push(end_ns);
        for (column, v) in self.values.iter_mut().zip(values) {
            column.push(*v);
        }
    }
}

/// Why samples are missing for an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The hardware sample buffer overflowed because decoding fell behind.
    HardwareBufferOverflow,
    /// The counter-data image filled before all samples were decoded.
    CounterDataFull,
    /// Consecutive samples are further apart than the interval allows: a hole of unknown cause.
    Gap,
    /// The first sample after start spans from start to the first decode; it is not a real
    /// sample of the interval and is kept out of the samples table.
    Warmup,
    /// Decoding or evaluation failed for these samples.
    DecodeError,
    /// The evaluation thread holding these samples failed (panicked or was gone) before it
    /// turned them into values.
    EvaluationFailed,
    /// The live view could not keep up (only in live feeds, never in traces).
    ViewBackpressure,
    /// A segment of the samples table was cut short or damaged and is skipped on reading: the
    /// reader reports its span as missing data (never written by a recorder).
    SegmentUnreadable,
    /// Sampling was paused on request (`cufall control pause`, `POST /pause`) so that another
    /// tool could take the GPU counters: from their release until sampling started again.
    /// Asked for, so never a loss; never idle time either (a 1.3 value; older readers take it
    /// for a `gap`).
    Paused,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::HardwareBufferOverflow => "hardware_buffer_overflow",
            DropReason::CounterDataFull => "counter_data_full",
            DropReason::Gap => "gap",
            DropReason::Warmup => "warmup",
            DropReason::DecodeError => "decode_error",
            DropReason::EvaluationFailed => "evaluation_failed",
            DropReason::ViewBackpressure => "view_backpressure",
            DropReason::SegmentUnreadable => "segment_unreadable",
            DropReason::Paused => "paused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "hardware_buffer_overflow" => DropReason::HardwareBufferOverflow,
            "counter_data_full" => DropReason::CounterDataFull,
            "gap" => DropReason::Gap,
            "warmup" => DropReason::Warmup,
            "decode_error" => DropReason::DecodeError,
            "evaluation_failed" => DropReason::EvaluationFailed,
            "view_backpressure" => DropReason::ViewBackpressure,
            "segment_unreadable" => DropReason::SegmentUnreadable,
            "paused" => DropReason::Paused,
            _ => return None,
        })
    }
}

/// An interval of one device for which samples are missing.
#[derive(Clone, Debug, PartialEq)]
pub struct DropRecord {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
    pub reason: DropReason,
    /// Estimated number of samples lost, when known.
    pub lost_samples: Option<u64>,
}

/// One NVML reading of one device. Fields NVML could not provide are `None`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvmlRow {
    pub device: DeviceId,
    pub t_ns: i64,
    pub power_w: Option<f32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// NVML "GPU utilization": the share of time any kernel ran (what nvidia-smi shows).
    pub gpu_util_pct: Option<u32>,
    /// NVML memory utilization: the share of time device memory was read or written.
    pub mem_util_pct: Option<u32>,
    pub mem_used_bytes: Option<u64>,
    pub temperature_c: Option<u32>,
    /// NVML clock-throttle-reason bit mask (`nvmlClocksEventReasons`).
    pub throttle_reasons: Option<u64>,
}

/// How an NVTX range was delimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    #[default]
    /// `nvtxRangePush`/`nvtxRangePop`: nested per thread, `depth` is meaningful.
    PushPop,
    /// `nvtxRangeStart`/`nvtxRangeEnd`: may cross threads, not nested.
    StartEnd,
    /// `nvtxMark`: an instant (`start_ns == end_ns`). Since schema 1.1.
    Mark,
}

impl RangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RangeKind::PushPop => "push_pop",
            RangeKind::StartEnd => "start_end",
            RangeKind::Mark => "mark",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "push_pop" => Some(RangeKind::PushPop),
            "start_end" => Some(RangeKind::StartEnd),
            "mark" => Some(RangeKind::Mark),
            _ => None,
        }
    }
}

/// One NVTX range (or mark) of the profiled program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvtxRange {
    pub start_ns: i64,
    pub end_ns: i64,
    pub name: String,
    /// NVTX domain; empty for the default domain.
    pub domain: String,
    pub kind: RangeKind,
    /// Nesting depth for push/pop ranges (0 = outermost).
    pub depth: u32,
    pub pid: u32,
    pub tid: u32,
    /// NVTX category (0 when none was given). Since schema 1.1.
    pub category: u32,
    /// ARGB colour the program gave the range. Since schema 1.1.
    pub color: Option<u32>,
    /// Integer payload (`int32`, `int64`, `uint32`, `uint64` up to `i64::MAX`). Since 1.1.
    pub payload_int: Option<i64>,
    /// Floating-point payload (`float`, `double`, or a `uint64` above `i64::MAX`). Since 1.1.
    pub payload_float: Option<f64>,
}

/// What a GPU activity record describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityKind {
    #[default]
    Kernel,
    Memcpy,
    Memset,
    /// A whole CUDA graph launch (`--capture graphs`). Since schema 1.1.
    Graph,
}

impl ActivityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityKind::Kernel => "kernel",
            ActivityKind::Memcpy => "memcpy",
            ActivityKind::Memset => "memset",
            ActivityKind::Graph => "graph",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "kernel" => Some(ActivityKind::Kernel),
            "memcpy" => Some(ActivityKind::Memcpy),
            "memset" => Some(ActivityKind::Memset),
            "graph" => Some(ActivityKind::Graph),
            _ => None,
        }
    }
}

/// One kernel, memcpy, memset or graph launch executed on a GPU by the profiled program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelRecord {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
    pub kind: ActivityKind,
    /// Kernel name (demangled when possible), or the copy direction for memcpys.
    pub name: String,
    pub stream: u32,
    pub correlation_id: u32,
    /// Bytes moved, for memcpy/memset.
    pub bytes: Option<u64>,
    pub pid: u32,
    /// Grid and block dimensions of a kernel (`None` for copies). Since schema 1.1.
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    /// CUDA context (CUPTI's context id). Since schema 1.1.
    pub context_id: Option<u32>,
    /// The CUDA graph the work belongs to, when it was launched from one. Since schema 1.1.
    pub graph_id: Option<u32>,
}

/// Which CUDA API a host call belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiDomain {
    #[default]
    Runtime,
    Driver,
}

impl ApiDomain {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiDomain::Runtime => "runtime",
            ApiDomain::Driver => "driver",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "runtime" => Some(ApiDomain::Runtime),
            "driver" => Some(ApiDomain::Driver),
            _ => None,
        }
    }
}

/// One CUDA runtime or driver call of the profiled program that launches, copies or
/// synchronises (`--capture api`), with its host-side duration. Since schema 1.1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApiCall {
    pub start_ns: i64,
    pub end_ns: i64,
    pub domain: ApiDomain,
    /// Function name, e.g. `cudaLaunchKernel`, `cuStreamSynchronize`.
    pub name: String,
    pub pid: u32,
    pub tid: u32,
    /// Shared with the kernel or copy the call launched.
    pub correlation_id: u32,
}

/// A fact about capture in one process of the profiled program: the library attached, CUPTI
/// was unavailable and why, CUPTI dropped records, ranges were left open, the process ended
/// without a goodbye. Since schema 1.1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptureEvent {
    pub t_ns: i64,
    pub pid: u32,
    /// A short code (`cuda_attached`, `cupti_unavailable`, `cupti_records_dropped`, ...): a
    /// [`CaptureEventKind`]'s name, or a newer writer's that this version does not know.
    pub event: String,
    /// A count where the event has one (records dropped, ranges left open), else 0.
    pub count: u64,
    /// Human-readable detail.
    pub detail: String,
}

impl CaptureEvent {
    /// A row of a known event.
    pub fn new(t_ns: i64, pid: u32, kind: CaptureEventKind, count: u64, detail: String) -> Self {
        CaptureEvent {
            t_ns,
            pid,
            event: kind.as_str().to_string(),
            count,
            detail,
        }
    }

    /// The event this row names; `None` for a name this version does not know.
    pub fn kind(&self) -> Option<CaptureEventKind> {
        CaptureEventKind::parse(&self.event)
    }

    /// Whether this row is of `kind`.
    pub fn is(&self, kind: CaptureEventKind) -> bool {
        self.event == kind.as_str()
    }
}

/// What a sampled host thread was doing. Since schema 1.2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// On a CPU or ready to run.
    #[default]
    Running,
    /// Waiting: in a blocking system call, on a lock, asleep.
    Idle,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Running => "running",
            HostState::Idle => "idle",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(HostState::Running),
            "idle" => Some(HostState::Idle),
            _ => None,
        }
    }
}

/// Whether a sampled thread held Python's global interpreter lock. Since schema 1.2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gil {
    Held,
    Released,
    /// Not a Python thread, or the interpreter did not say.
    #[default]
    Unknown,
}

impl Gil {
    pub fn as_str(self) -> &'static str {
        match self {
            Gil::Held => "held",
            Gil::Released => "released",
            Gil::Unknown => "unknown",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "held" => Some(Gil::Held),
            "released" => Some(Gil::Released),
            "unknown" => Some(Gil::Unknown),
            _ => None,
        }
    }
}

/// One sample of one host thread of the profiled program (`--host-stacks`): when, which
/// thread, what it was doing, and its stack (rows of the stacks table with this `stack_id`).
/// Since schema 1.2.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostSample {
    /// On the trace's clock.
    pub t_ns: i64,
    pub pid: u32,
    /// The operating system's thread id (the `tid` of NVTX ranges and API calls).
    pub tid: u32,
    pub thread_name: String,
    pub state: HostState,
    pub gil: Gil,
    /// The stack, interned in the stacks table; several samples share one id.
    pub stack_id: u64,
}

/// Where a stack frame runs: interpreted Python or native code. Since schema 1.2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    #[default]
    Python,
    Native,
}

impl FrameKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Python => "python",
            FrameKind::Native => "native",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "python" => Some(FrameKind::Python),
            "native" => Some(FrameKind::Native),
            _ => None,
        }
    }
}

/// One frame of an interned host stack: a stack is the rows with one `stack_id`, `depth` 0
/// being the frame that was running (the innermost) and the largest depth the thread's
/// outermost frame. A stack's rows are written before, or in the same flush as, the first
/// sample that names it. Since schema 1.2.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackFrame {
    pub stack_id: u64,
    pub depth: u32,
    /// Function name (Python's qualified name where the interpreter has one).
    pub function: String,
    /// Source file, or the shared object of a native frame; empty when unknown.
    pub file: String,
    /// Line in `file`, when known.
    pub line: Option<u32>,
    /// Python module or library name; empty when unknown.
    pub module: String,
    pub kind: FrameKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_versions_parse_strictly_and_compare() {
        let v = |s| SchemaVersion::parse(s);
        assert_eq!(v("1.1"), Some(SchemaVersion { major: 1, minor: 1 }));
        assert_eq!(v("1.4"), Some(SchemaVersion::CURRENT));
        for bad in [
            "", "1", "1.", ".1", "1.1.1", "-1.0", "+1.0", " 1.0", "1.0 ", "v1.0", "1,1",
        ] {
            assert_eq!(v(bad), None, "{bad:?}");
        }
        let huge = v("99999999999.0").unwrap();
        assert!(huge.is_newer_major());
        assert!(v("184467440737095516150000.0").unwrap().is_newer_major());
        assert!(v("2.0").unwrap().is_newer_major());
        assert!(v("1.5").unwrap().is_newer_minor());
        assert!(!v("1.4").unwrap().is_newer_minor());
        assert!(!v("1.3").unwrap().is_newer_minor());
        assert!(!v("1.2").unwrap().is_newer_minor());
        assert!(!v("1.1").unwrap().is_newer_minor());
        assert!(!v("1.0").unwrap().is_newer_minor());
        assert!(v("0.1").unwrap().is_before_first());
        assert!(!v("1.0").unwrap().is_before_first());
        assert_eq!(v("1.12").unwrap().to_string(), "1.12");
    }
}

#[cfg(test)]
mod host_stacks_meta {
    use super::*;

    #[test]
    fn round_trips_through_json_and_is_absent_when_none() {
        let mut m = Manifest::new("0.1.0", 1);
        let text = serde_json::to_string(&m).unwrap();
        assert!(!text.contains("host_stacks"), "{text}");
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), m);
        for meta in [
            HostStacksMeta {
                interval_ns: 1_000_000,
                frames: HostFrames::Mixed,
                off_reason: None,
            },
            HostStacksMeta {
                interval_ns: 250_000,
                frames: HostFrames::Native,
                off_reason: Some("--host-stacks off".into()),
            },
        ] {
            m.host_stacks = Some(meta);
            let text = serde_json::to_string(&m).unwrap();
            assert_eq!(
                serde_json::from_str::<Manifest>(&text).unwrap(),
                m,
                "{text}"
            );
        }
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["host_stacks"]["frames"], "native");
        assert_eq!(json["host_stacks"]["interval_ns"], 250_000);
    }

    #[test]
    fn a_newer_writers_frames_read_as_other_and_a_missing_reason_as_on() {
        let meta: HostStacksMeta =
            serde_json::from_str(r#"{"interval_ns": 1000, "frames": "gpu_and_python"}"#).unwrap();
        assert_eq!(meta.frames, HostFrames::Other);
        assert_eq!(meta.off_reason, None);
    }
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-model (lib.rs)", &src.join("lib.rs"));
    }
}
