//! The flags `report`, `diff` and `export` share: how idle time is measured, and which NVTX
//! ranges are phases (the latter also taken by `view`, `replay` and `gui`).

use crate::args::duration::parse_positive_ns;
use crate::args::number::{parse_fraction, parse_full_scale};
use cufall_analysis::report::{DEFAULT_IDLE_BELOW, ReportOptions};
use cufall_analysis::select::{PhaseSelect, PhaseSelectError};
use cufall_trace::model::Nanos;

/// How idle time is measured; shared by report, diff and export.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AnalysisArgs {
    /// Activity metric whose low stretches count as idle. Default: the recording's first
    /// heatmap (with its denominator and full scale), else its first metric.
    #[arg(long)]
    pub metric: Option<String>,
    /// Idle means below this fraction of the metric's full scale (0.05 = 5 %).
    #[arg(long, default_value_t = DEFAULT_IDLE_BELOW, value_name = "FRACTION", value_parser = parse_fraction)]
    pub idle_below: f64,
    /// The activity value that means fully busy. Default: the heatmap's; 1 for a ratio; 100
    /// for a percentage; else the peak in the trace.
    #[arg(long, value_name = "VALUE", value_parser = parse_full_scale)]
    pub full_scale: Option<f64>,
    /// Shortest idle interval reported as a gap, e.g. `50us`, `1ms`. Default: 5 sampling
    /// intervals.
    #[arg(long, value_parser = parse_positive_ns, value_name = "DURATION")]
    pub min_gap: Option<i64>,
    #[command(flatten)]
    pub phases: PhasesArg,
}

/// Which NVTX ranges are phases; shared by report, diff, export, view, replay and gui.
#[derive(clap::Args, Debug, Clone, PartialEq, Default)]
pub struct PhasesArg {
    /// Which NVTX ranges are phases: comma-separated `program` (the program's own domains: the
    /// default), `all`, `domain:NAME` (`domain:default` for the unnamed domain), `name:PATTERN`
    /// (`*` matches anything), `depth:N`. Library domains (CCCL, TSL, NCCL, ...) are phases only
    /// when named, e.g. `--phases program,domain:CCCL`.
    #[arg(long = "phases", value_name = "SELECTION", value_parser = parse_phases)]
    pub phases: Option<PhaseSelect>,
}

impl PhasesArg {
    /// The selection given, or the program's own ranges.
    pub fn select(&self) -> PhaseSelect {
        self.phases.clone().unwrap_or_default()
    }
}

fn parse_phases(s: &str) -> Result<PhaseSelect, PhaseSelectError> {
    s.parse::<PhaseSelect>()
}

/// A fraction strictly between 0 and 1: `--idle-below 5` is a mistake for 0.05, not 500 %.
impl AnalysisArgs {
    pub fn options(&self) -> ReportOptions {
        ReportOptions {
            metric: self.metric.clone(),
            full_scale: self.full_scale,
            idle_below: self.idle_below,
            min_gap_ns: self.min_gap.map(Nanos),
            also_low: None,
            gap_rows: None,
            phases: self.phases.select(),
            ..ReportOptions::default()
        }
    }
}
