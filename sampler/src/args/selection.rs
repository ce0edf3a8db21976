//! The metric and device flags that `record`, `serve` and the live view share.

use crate::args::duration::parse_positive_duration;
use crate::args::units::parse_devices;
use crate::metric_spec::{self, MetricRequest, Selection};
use crate::session::{CounterPolicy, SessionConfig};
use anyhow::anyhow;
use std::time::Duration;

/// The metric and device flags shared by `record` and the live view.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SelectionArgs {
    /// PM-sampling metric to record, with rollup/sub-metric (repeatable; one heatmap each).
    /// Default: tensor-pipe activity and DRAM throughput as % of peak. `cufall metrics` lists
    /// them.
    #[arg(long = "metric", value_name = "METRIC")]
    pub metric: Vec<String>,
    /// Divide every --metric by this metric, sample by sample (e.g. gr__cycles_elapsed.max). A
    /// bare counter (`sm__pipe_tensor_cycles_active.avg`) is then still shown against its true
    /// full scale: its sustained peak over the same sample, as % (--raw for the plain ratio).
    #[arg(long, value_name = "METRIC")]
    pub denominator: Option<String>,
    /// Show raw values (overrides --denominator; implies --raw).
    #[arg(long)]
    pub no_denominator: bool,
    /// Show a bare counter (a metric with only a rollup, such as
    /// sm__pipe_tensor_cycles_active.avg) as it counts, in cycles or bytes per sample (or over
    /// --denominator), instead of as % of its sustained peak.
    #[arg(long)]
    pub raw: bool,
    /// Value mapped to the top of the colour scale (default: 100 for %, 1 for ratios).
    #[arg(long, value_name = "X", value_parser = crate::args::number::parse_full_scale)]
    pub full_scale: Option<f64>,
    /// GPU-time sampling interval, e.g. 10us, 50us, 1ms (default: chosen from the metrics'
    /// counter-data bytes per sample, the finest at about one core per GPU: 50us for the
    /// default pair, 12us for the DRAM metric alone on an H200; `cufall metrics` gives each
    /// metric's bytes and finest lossless interval; see docs/sampler.md).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub interval: Option<Duration>,
    /// GPUs to sample: all, 0, 0,2 or 0-3 (CUDA numbering).
    #[arg(long, value_name = "LIST", default_value = "all")]
    pub devices: String,
    /// Also record the min and max across SMs of each per-SM (`sm__...avg...`) metric, to show
    /// how evenly the SMs work.
    #[arg(long)]
    pub sm_spread: bool,
    /// NVML polling interval (power, clocks, utilisation, memory, temperature, throttling).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_positive_duration)]
    pub nvml_interval: Duration,
    /// Evaluation threads per GPU.
    #[arg(long, hide = true)]
    pub eval_threads: Option<usize>,
    /// PM sampling hardware buffer per GPU, in MiB.
    #[arg(long, hide = true)]
    pub hw_buffer_mib: Option<usize>,
    /// Seal a counter-data image after this much GPU time of samples (benchmarks).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub seal: Option<Duration>,
    /// Room beyond the seal point, in GPU time of samples (benchmarks).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub margin: Option<Duration>,
}

impl SelectionArgs {
    /// Turns the flags into a session configuration and the heatmaps to show.
    pub fn to_config(&self, policy: CounterPolicy) -> anyhow::Result<(SessionConfig, Selection)> {
        let selection = metric_spec::select(&MetricRequest {
            metrics: self.metric.clone(),
            denominator: self.denominator.clone(),
            no_denominator: self.no_denominator,
            full_scale: self.full_scale,
            sm_spread: self.sm_spread,
            raw: self.raw || self.no_denominator,
        })?;
        let devices = parse_devices(&self.devices).map_err(|e| anyhow!("--devices: {e}"))?;
        let cfg = SessionConfig {
            devices,
            metrics: selection.columns.clone(),
            interval: self.interval,
            core_budget: crate::cost::CORE_BUDGET,
            nvml_interval: Some(self.nvml_interval),
            counters: policy,
            hw_buffer_bytes: self.hw_buffer_mib.map(|m| m << 20),
            eval_threads: self.eval_threads.map(|n| n.max(1)),
            image_timing: crate::sizing::ImageTiming::from_flags(self.seal, self.margin),
            optional_metrics: selection.added.clone(),
            fallbacks: selection.fallbacks.clone(),
        };
        Ok((cfg, selection))
    }
}
