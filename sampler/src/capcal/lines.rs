//! What passes between the recorder and the calibration process: the capture library's two
//! entry points the process looks up, what it launches, and its output lines (JSON, one per
//! kind).

use cufall_capture::{CostKind, Kinds};
use serde::{Deserialize, Serialize};

/// The capture library's switch of CUPTI's tracing (`inject/src/lib.rs`).
pub const ENTRY_SET_TRACING: &str = "cufall_calibration_set_tracing";
/// The capture library's record hand-over and count (`inject/src/lib.rs`).
pub const ENTRY_TAKE_RECORDS: &str = "cufall_calibration_take_records";

/// What the calibration process launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    Kernel,
    Copy,
    Graph,
}

/// One kind's timing, as the calibration process measured it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Added nanoseconds per event: the median over rounds of (traced − untraced) per launch.
    pub ns: f64,
    /// The smallest and largest round's difference.
    pub low_ns: f64,
    pub high_ns: f64,
    /// Nanoseconds per untraced launch (median).
    pub bare_ns: f64,
    pub rounds: usize,
    pub launches: u32,
    /// Kernel nodes of the graph launched (graph kinds).
    #[serde(default)]
    pub graph_nodes: Option<u32>,
}

impl Measured {
    /// From each round's difference and untraced time per launch (nanoseconds).
    pub fn from_rounds(diffs: &[f64], bare: &[f64], launches: u32) -> Measured {
        let median = |v: &[f64]| {
            let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let finite = || diffs.iter().copied().filter(|x| x.is_finite());
        Measured {
            ns: median(diffs),
            low_ns: finite().fold(f64::INFINITY, f64::min),
            high_ns: finite().fold(f64::NEG_INFINITY, f64::max),
            bare_ns: median(bare),
            rounds: diffs.len(),
            launches,
            graph_nodes: None,
        }
    }

    /// The cost in whole nanoseconds, at least 1 (a row of 0 would read as unknown).
    pub fn whole_ns(&self) -> u64 {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "rounded and at least 1: a cost in ns"
        )]
        let ns = self.ns.round().max(1.0) as u64;
        ns
    }

    /// The figures per kernel node of a graph of `nodes` (graphs traced node by node).
    pub fn per_node(mut self, nodes: u32) -> Measured {
        let n = f64::from(nodes.max(1));
        self.ns /= n;
        self.low_ns /= n;
        self.high_ns /= n;
        self.bare_ns /= n;
        self
    }
}

/// One line of the calibration process's output (JSON): a kind's timing or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildLine {
    /// The cost kind's name (`kernel`, `memcpy`, `graph`, `graph_node`).
    pub kind: String,
    #[serde(default)]
    pub measured: Option<Measured>,
    #[serde(default)]
    pub error: Option<String>,
}

impl ChildLine {
    pub fn measured(kind: &str, m: Measured) -> ChildLine {
        ChildLine {
            kind: kind.into(),
            measured: Some(m),
            error: None,
        }
    }

    pub fn failed(kind: &str, why: &str) -> ChildLine {
        ChildLine {
            kind: kind.into(),
            measured: None,
            error: Some(why.into()),
        }
    }
}

/// The cost kinds a recording with `kinds` needs measured (NVTX aside: the program measures
/// it), with the names the calibration process uses.
pub fn cost_kinds(kinds: Kinds) -> Vec<CostKind> {
    let mut out = Vec::new();
    if kinds.contains(Kinds::KERNELS) {
        out.push(CostKind::Kernel);
    }
    if kinds.contains(Kinds::MEMCPY) {
        out.push(CostKind::Memcpy);
    }
    if kinds.contains(Kinds::GRAPHS) {
        out.push(CostKind::Graph);
    } else if kinds.contains(Kinds::GRAPH_NODES) {
        out.push(CostKind::GraphNode);
    }
    out
}
