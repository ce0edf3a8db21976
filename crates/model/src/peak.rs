//! What 100 % means for a bare counter.
//!
//! A counter asked for with only a rollup (`sm__pipe_tensor_cycles_active.avg`, the design's first
//! command) counts events or active cycles: its raw value per sample (171k cycles) says nothing by
//! itself, and its ratio to an elapsed-cycles counter of another clock domain is not a fraction
//! (3.1 on an H200 when the tensor pipes are 90 % busy: the pipe counts up to 4 per SM cycle, and
//! the SM and `gr` clocks differ). cufall records such a counter beside its **percentage of its
//! sustained peak** as CUPTI evaluates it (`<metric>.pct_of_peak_sustained_elapsed`: the counter
//! over its peak rate per cycle times the cycles elapsed in its own clock domain, the number ncu
//! gives) and shows that column: an ordinary percentage metric for every reader (views, report,
//! export, the exporter, the desktop timeline). The raw column stays in the trace (`--raw` shows
//! it).

use crate::HeatmapSpec;

/// Suffix of the column that holds a counter as a percentage of its sustained peak.
pub const PERCENT_SUFFIX: &str = ".pct_of_peak_sustained_elapsed";

/// The rollups a bare counter may end in.
const ROLLUPS: [&str; 4] = ["avg", "sum", "min", "max"];

/// Whether `metric` is a counter asked for with a rollup and nothing after it
/// (`dram__bytes_read.sum`, `sm__pipe_tensor_cycles_active.avg`): one whose value has a
/// sustained peak CUPTI can state. Percentages, ratios and `.per_second` forms are not.
pub fn is_bare_counter(metric: &str) -> bool {
    let Some(from) = metric.find("__") else {
        return false;
    };
    let Some(dot) = metric[from..].find('.').map(|i| i + from) else {
        return false;
    };
    ROLLUPS.contains(&&metric[dot + 1..])
}

/// The percentage-of-peak column recorded beside a bare counter.
pub fn percent_column(metric: &str) -> String {
    format!("{metric}{PERCENT_SUFFIX}")
}

/// The bare counter whose percentage of peak `column` is, if it is one.
pub fn percent_of(column: &str) -> Option<&str> {
    column
        .strip_suffix(PERCENT_SUFFIX)
        .filter(|m| is_bare_counter(m))
}

impl HeatmapSpec {
    /// The heatmap of a bare counter shown as a percentage of its sustained peak.
    pub fn of_peak(metric: &str) -> HeatmapSpec {
        HeatmapSpec {
            metric: percent_column(metric),
            denominator: None,
            full_scale: Some(100.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_counters_are_a_rollup_and_nothing_after_it() {
        assert!(is_bare_counter("sm__pipe_tensor_cycles_active.avg"));
        assert!(is_bare_counter("dram__bytes_read.sum"));
        assert!(is_bare_counter("CTC.TriageCompute.ctc__rx_bytes.max"));
        assert!(!is_bare_counter("sm__pipe_tensor_cycles_active"));
        assert!(!is_bare_counter(
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
        ));
        assert!(!is_bare_counter("gr__cycles_elapsed.avg.per_second"));
        assert!(!is_bare_counter("sm__x.avg.peak_sustained"));
        assert!(!is_bare_counter("nounderscore.avg"));
    }

    #[test]
    fn the_percent_column_names_its_counter() {
        let c = percent_column("sm__pipe_tensor_cycles_active.avg");
        assert_eq!(
            c,
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
        );
        assert_eq!(percent_of(&c), Some("sm__pipe_tensor_cycles_active.avg"));
        assert_eq!(percent_of("gr__cycles_elapsed.max"), None);
        assert_eq!(
            percent_of("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            Some("dram__throughput.avg")
        );
        let h = HeatmapSpec::of_peak("sm__pipe_tensor_cycles_active.avg");
        assert_eq!(h.metric, c);
        assert_eq!((h.denominator, h.full_scale), (None, Some(100.0)));
    }
}
