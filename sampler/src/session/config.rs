//! What a session samples and how ([`SessionConfig`]), and the checks it passes before any GPU
//! is touched.

use super::error::SessionError;
use crate::sizing;
use cufall_trace::model::nanos;
use std::time::Duration;

/// What to do when GPU counters are out of reach (no libcupti, no privileges, another profiler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterPolicy {
    /// Fail with the reason and the fix.
    Required,
    /// Record NVML only and say why in `counters_unavailable`.
    BestEffort,
    /// Do not touch the counters at all.
    Off,
}

/// What a session samples, and how.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// CUDA ordinals to sample; `None` = every visible GPU.
    pub devices: Option<Vec<usize>>,
    /// Metrics to collect (one column each).
    pub metrics: Vec<String>,
    /// GPU-time sampling interval; `None`: the finest the cost model says holds without loss
    /// within [`SessionConfig::core_budget`] for these metrics' counter-data bytes
    /// ([`crate::cost::CostModel::choose_interval`]).
    pub interval: Option<Duration>,
    /// The CPU per GPU, in cores, the default interval may cost: [`crate::cost::CORE_BUDGET`]
    /// (`record`), [`crate::cost::EXPORTER_CORE_BUDGET`] (`serve`).
    pub core_budget: f64,
    /// NVML polling interval; `None` = no NVML.
    pub nvml_interval: Option<Duration>,
    pub counters: CounterPolicy,
    /// PM sampling hardware buffer per device; `None`: by the rate of counter data
    /// ([`crate::cost::hw_buffer_bytes`]).
    pub hw_buffer_bytes: Option<usize>,
    /// Evaluation threads per device; `None`: as many as the interval and metrics need
    /// ([`sizing::eval_threads`]).
    pub eval_threads: Option<usize>,
    /// Override of the image plan's seal period and margin (benchmarks).
    pub image_timing: Option<sizing::ImageTiming>,
    /// Metrics cufall added itself (the percentages of peak of bare counters): one a chip cannot
    /// evaluate is left out ([`Prepared::peaks_refused`]), not an error.
    pub optional_metrics: Vec<String>,
    /// Metrics with a stand-in: (asked, stand-in). A chip that cannot evaluate the first
    /// records the second ([`Prepared::metrics_substituted`]); the defaults' cheaper tensor
    /// counter falls back so to the usual one (`crate::metric_spec::Selection::fallbacks`).
    pub fallbacks: Vec<(String, String)>,
}

pub const DEFAULT_NVML_INTERVAL: Duration = Duration::from_millis(10);
impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            devices: None,
            metrics: crate::metric_spec::DEFAULT_METRICS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            interval: None,
            core_budget: crate::cost::CORE_BUDGET,
            nvml_interval: Some(DEFAULT_NVML_INTERVAL),
            counters: CounterPolicy::BestEffort,
            hw_buffer_bytes: None,
            eval_threads: None,
            image_timing: None,
            optional_metrics: Vec::new(),
            fallbacks: crate::metric_spec::default_fallbacks(),
        }
    }
}

impl SessionConfig {
    /// The interval asked for, in the trace's nanoseconds.
    pub fn interval_ns(&self) -> Option<i64> {
        self.interval.map(nanos)
    }

    /// Refuses what no machine can do: an interval below the finest cufall supports.
    pub fn validate(&self) -> Result<(), SessionError> {
        if let Some(iv) = self.interval_ns()
            && iv < sizing::MIN_INTERVAL_NS
            && self.counters != CounterPolicy::Off
        {
            return Err(SessionError::IntervalTooShort {
                interval_ns: iv,
                min_ns: sizing::MIN_INTERVAL_NS,
            });
        }
        Ok(())
    }
}
