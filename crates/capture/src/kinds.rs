//! What a recording captures and how the program is told: the capture kinds (`--capture`),
//! the capture-range trigger (`--capture-range`), the environment variables that carry them to
//! the program, and the kinds of range, activity and API call the frames carry.

/// Path of the recorder's Unix socket.
pub const ENV_SOCKET: &str = "CUFALL_CAPTURE_SOCKET";
/// What to capture (see [`Kinds::parse`]).
pub const ENV_KINDS: &str = "CUFALL_CAPTURE";
/// Set only when the recording is limited to windows the program opens itself: the trigger,
/// as [`RangeTrigger::to_env`] writes it.
pub const ENV_RANGE: &str = "CUFALL_CAPTURE_RANGE";
/// Set to `1` only in cufall's own calibration process (`cufall record` measures what CUPTI's
/// tracing adds per launch there, after the program): the library then traces as in a program,
/// keeps no connection, discards what it buffers, and lets the process switch tracing off and
/// on (`cufall_calibration_set_tracing`).
pub const ENV_CALIBRATE: &str = "CUFALL_CAPTURE_CALIBRATE";
/// File name of the capture library, installed next to the `cufall` binary.
pub const LIBRARY_FILE: &str = "libcufall_inject.so";
/// Longest name sent; longer ones are cut, and a longer one received is a broken stream.
pub const MAX_NAME_BYTES: usize = 65_536;

/// What a recording captures from the program, a set of flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
// The field is the wire encoding of the set (`encode`, `decode`).
pub struct Kinds(pub(crate) u32);

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

    /// This set less the flags of `other`.
    pub fn without(self, other: Kinds) -> Kinds {
        Kinds(self.0 & !other.0)
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

/// What a GPU activity record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireActivityKind {
    Kernel,
    Memcpy,
    Memset,
    /// A whole CUDA graph launch (`--capture graphs`).
    Graph,
}

/// Which CUDA API a [`WireApiCall`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireApiDomain {
    Runtime,
    Driver,
}
