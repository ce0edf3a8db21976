//! Which metrics to record and how each heatmap is derived from them: the logic behind
//! `--metric`, `--denominator`, `--no-denominator`, `--full-scale` and `--sm-spread`.

use cufall_cupti::metric::MetricName;
use cufall_trace::model::HeatmapSpec;
use cufall_trace::model::peak::is_bare_counter;

/// Tensor-pipe activity as % of peak: the honest "are the tensor cores busy" number. This is
/// the `_realtime` form of the tensor-pipe counter (same unit, same peak of 4 per cycle), which
/// GH100 carries in 7,001 bytes of counter data per sample against the usual form's 20,825; on
/// the H200 both read within a point of each other and of `ncu`
/// (docs/benchmarks-sampler.md). A GPU without it records [`USUAL_TENSOR`] instead.
pub const DEFAULT_TENSOR: &str =
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed";
/// The tensor-pipe percentage `ncu` and DCGM name: the default's stand-in on GPUs that lack
/// the `_realtime` counter.
pub const USUAL_TENSOR: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
/// DRAM throughput as % of peak.
pub const DEFAULT_DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
/// What cufall records without `--metric`.
pub const DEFAULT_METRICS: [&str; 2] = [DEFAULT_TENSOR, DEFAULT_DRAM];

/// The user's metric flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricRequest {
    pub metrics: Vec<String>,
    pub denominator: Option<String>,
    pub no_denominator: bool,
    pub full_scale: Option<f64>,
    pub sm_spread: bool,
    /// `--raw`: bare counters as they count (cycles, bytes), not against their peak.
    pub raw: bool,
}

/// What to collect (one column per metric, no duplicates) and which heatmaps to show.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub columns: Vec<String>,
    pub heatmaps: Vec<HeatmapSpec>,
    /// The `--denominator` in effect (none with `--no-denominator`).
    pub denominator: Option<String>,
    /// Columns cufall added to the metrics asked for: the percentages of peak of bare
    /// counters. A GPU that cannot evaluate one drops it ([`Selection::relative`]).
    pub added: Vec<String>,
    /// (column, stand-in): what a GPU that cannot evaluate a default column records instead
    /// ([`default_fallbacks`]; none when metrics were asked for by name).
    pub fallbacks: Vec<(String, String)>,
}

/// The stand-ins of the default metrics: the usual tensor-pipe counter for its `_realtime`
/// form, in each rollup `--sm-spread` may add.
pub fn default_fallbacks() -> Vec<(String, String)> {
    ["avg", "min", "max"]
        .iter()
        .map(|r| {
            (
                DEFAULT_TENSOR.replace(".avg.", &format!(".{r}.")),
                USUAL_TENSOR.replace(".avg.", &format!(".{r}.")),
            )
        })
        .collect()
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error(
        "`{0}` is not a metric name: metric names look like `unit__counter_name.rollup`, e.g. `{DEFAULT_DRAM}` (see `cufall metrics`)"
    )]
    Malformed(String),
    #[error("--full-scale must be a positive number, got {0}")]
    BadFullScale(f64),
    #[error(
        "--sm-spread needs a per-SM metric with an `.avg` rollup (a name starting with `sm__`, e.g. `{DEFAULT_TENSOR}`); none of the metrics asked for is one"
    )]
    NoPerSmMetric,
}

/// Whether a metric's value is already a percentage.
pub fn is_percent(name: &str) -> bool {
    name.contains(".pct")
}

/// The value mapped to the top of the colour scale when the user gives none.
pub fn default_full_scale(name: &str, has_denominator: bool) -> Option<f64> {
    if has_denominator {
        Some(1.0)
    } else if is_percent(name) {
        Some(100.0)
    } else {
        None
    }
}

fn check_name(name: &str) -> Result<(), SpecError> {
    let ok = !name.is_empty()
        && name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(SpecError::Malformed(name.to_string()))
    }
}

/// Applies the flags. Metric names are checked for shape here and against the GPU's catalogue
/// later (`cufall_cupti::metric::Catalogue::validate`).
///
/// A bare counter (a rollup and nothing after it, [`is_bare_counter`]) is shown as a percentage
/// of its sustained peak unless `--raw` is given: CUPTI's `.pct_of_peak_sustained_elapsed` of it
/// is collected beside it and is its heatmap (`cufall_trace::model::peak`). A `--denominator` is
/// then still collected, but the value shown is the ratio against its true full scale, which is
/// that same percentage: (metric / D) / (peak / D). A percentage the GPU cannot evaluate is
/// dropped when the GPU is armed ([`Selection::relative`]).
pub fn select(req: &MetricRequest) -> Result<Selection, SpecError> {
    if let Some(fs) = req.full_scale
        && !(fs.is_finite() && fs > 0.0)
    {
        return Err(SpecError::BadFullScale(fs));
    }
    let metrics: Vec<String> = if req.metrics.is_empty() {
        DEFAULT_METRICS.iter().map(|s| s.to_string()).collect()
    } else {
        req.metrics.iter().map(|m| m.trim().to_string()).collect()
    };
    let denominator = if req.no_denominator {
        None
    } else {
        req.denominator.clone()
    };
    let mut shown: Vec<String> = Vec::new();
    for m in &metrics {
        check_name(m)?;
        push_unique(&mut shown, m);
        if req.sm_spread {
            let n = MetricName::parse(m);
            if n.base.starts_with("sm__") && n.rollup() == Some("avg") {
                for r in ["min", "max"] {
                    if let Some(v) = n.with_rollup(r) {
                        push_unique(&mut shown, &v.full());
                    }
                }
            }
        }
    }
    if req.sm_spread && shown.len() == metrics.len() {
        return Err(SpecError::NoPerSmMetric);
    }
    let mut columns = shown.clone();
    if let Some(d) = &denominator {
        check_name(d)?;
        push_unique(&mut columns, d);
    }
    // One heatmap per requested metric: the `.min`/`.max` rollups of `--sm-spread` are its
    // spread rows, not heatmaps of their own.
    let heatmaps = shown
        .iter()
        .filter(|m| metrics.iter().any(|r| r.as_str() == m.as_str()))
        .map(|m| {
            if !req.raw && is_bare_counter(m) {
                return HeatmapSpec {
                    full_scale: req.full_scale.or(Some(100.0)),
                    ..HeatmapSpec::of_peak(m)
                };
            }
            HeatmapSpec {
                metric: m.clone(),
                denominator: denominator.clone(),
                full_scale: req
                    .full_scale
                    .or_else(|| default_full_scale(m, denominator.is_some())),
            }
        })
        .collect::<Vec<_>>();
    // The percentages of bare counters are columns cufall adds (unless asked for too).
    let mut added = Vec::new();
    for h in &heatmaps {
        if !columns.contains(&h.metric) {
            added.push(h.metric.clone());
            columns.push(h.metric.clone());
        }
    }
    let fallbacks = if req.metrics.is_empty() {
        default_fallbacks()
    } else {
        Vec::new()
    };
    Ok(Selection {
        columns,
        heatmaps,
        denominator,
        added,
        fallbacks,
    })
}

impl Selection {
    /// Renames column `asked`, which a GPU recorded as `recorded` ([`Selection::fallbacks`]),
    /// in the columns and the heatmaps.
    pub fn substitute(&mut self, asked: &str, recorded: &str) {
        for c in &mut self.columns {
            if c == asked {
                *c = recorded.to_string();
            }
        }
        for h in &mut self.heatmaps {
            if h.metric == asked {
                h.metric = recorded.to_string();
            }
        }
    }

    /// Drops the percentage column `column` that the GPU cannot evaluate: its counter is then
    /// shown as it counts (over the denominator, when one was given), on a relative scale.
    /// Returns the line that says so.
    pub fn relative(&mut self, column: &str, why: &str) -> Option<String> {
        if !self.added.iter().any(|c| c == column) {
            return None;
        }
        let counter = cufall_trace::model::peak::percent_of(column)?.to_string();
        let denominator = self.denominator.clone();
        let h = self.heatmaps.iter_mut().find(|h| h.metric == column)?;
        h.metric = counter.clone();
        h.denominator = denominator;
        h.full_scale = h.denominator.as_ref().map(|_| 1.0);
        self.columns.retain(|c| c != column);
        self.added.retain(|c| c != column);
        Some(format!(
            "{counter} is shown as it counts, on a relative scale: CUPTI cannot give its \
             percentage of peak on this GPU ({why}); --raw hides this line"
        ))
    }
}

fn push_unique(v: &mut Vec<String>, s: &str) {
    if !v.iter().any(|x| x == s) {
        v.push(s.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_two_percent_metrics() {
        let s = select(&MetricRequest::default()).unwrap();
        assert_eq!(s.columns, vec![DEFAULT_TENSOR, DEFAULT_DRAM]);
        assert!(
            s.heatmaps
                .iter()
                .all(|h| h.full_scale == Some(100.0) && h.denominator.is_none())
        );
    }

    #[test]
    fn only_the_defaults_have_stand_ins_and_a_stand_in_renames_its_column() {
        let mut s = select(&MetricRequest::default()).unwrap();
        assert!(
            s.fallbacks
                .contains(&(DEFAULT_TENSOR.to_string(), USUAL_TENSOR.to_string()))
        );
        s.substitute(DEFAULT_TENSOR, USUAL_TENSOR);
        assert_eq!(s.columns, vec![USUAL_TENSOR, DEFAULT_DRAM]);
        assert_eq!(s.heatmaps[0].metric, USUAL_TENSOR);
        assert_eq!(s.heatmaps[0].full_scale, Some(100.0));
        let spread = select(&MetricRequest {
            sm_spread: true,
            ..MetricRequest::default()
        })
        .unwrap();
        for c in &spread.columns[..3] {
            assert!(
                spread.fallbacks.iter().any(|(a, _)| a == c),
                "{c} has no stand-in"
            );
        }
        let named = select(&MetricRequest {
            metrics: vec![DEFAULT_TENSOR.into()],
            ..MetricRequest::default()
        })
        .unwrap();
        assert!(named.fallbacks.is_empty());
    }

    #[test]
    fn denominator_is_collected_once_and_scales_to_one() {
        // --raw: the plain ratios (without it, bare counters are shown as % of their peak).
        let s = select(&MetricRequest {
            metrics: vec![
                "sm__pipe_tensor_cycles_active.avg".into(),
                "sm__cycles_active.avg".into(),
            ],
            denominator: Some("gr__cycles_elapsed.max".into()),
            raw: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.columns.len(), 3);
        assert_eq!(s.columns[2], "gr__cycles_elapsed.max");
        assert_eq!(s.heatmaps.len(), 2);
        assert_eq!(
            s.heatmaps[0].denominator.as_deref(),
            Some("gr__cycles_elapsed.max")
        );
        assert_eq!(s.heatmaps[0].full_scale, Some(1.0));
    }

    #[test]
    fn a_bare_counter_is_shown_as_percent_of_peak_and_raw_keeps_cycles() {
        let seed = "sm__pipe_tensor_cycles_active.avg";
        let pct = format!("{seed}.pct_of_peak_sustained_elapsed");
        let s = select(&MetricRequest {
            metrics: vec![seed.into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.columns, vec![seed.to_string(), pct.clone()]);
        assert_eq!(s.heatmaps, vec![HeatmapSpec::of_peak(seed)]);
        assert_eq!(s.added, vec![pct.clone()]);
        // The seed's denominator is collected, and the value is still the percentage of peak.
        let d = select(&MetricRequest {
            metrics: vec![seed.into()],
            denominator: Some("gr__cycles_elapsed.max".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            d.columns,
            vec![
                seed.to_string(),
                "gr__cycles_elapsed.max".into(),
                pct.clone()
            ]
        );
        assert_eq!(d.heatmaps, vec![HeatmapSpec::of_peak(seed)]);
        // --raw: the cycles, over the denominator when one is given.
        let r = select(&MetricRequest {
            metrics: vec![seed.into()],
            denominator: Some("gr__cycles_elapsed.max".into()),
            raw: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            r.columns,
            vec![seed.to_string(), "gr__cycles_elapsed.max".into()]
        );
        assert_eq!(r.heatmaps[0].metric, seed);
        assert_eq!(
            r.heatmaps[0].denominator.as_deref(),
            Some("gr__cycles_elapsed.max")
        );
        // Percentages asked for are shown as they are.
        let p = select(&MetricRequest::default()).unwrap();
        assert!(p.added.is_empty());
        assert_eq!(p.columns, vec![DEFAULT_TENSOR, DEFAULT_DRAM]);
    }

    #[test]
    fn a_percentage_the_gpu_cannot_give_leaves_a_relative_scale_and_says_why() {
        let mut s = select(&MetricRequest {
            metrics: vec!["dram__bytes_read.sum".into()],
            ..Default::default()
        })
        .unwrap();
        let line = s
            .relative(
                "dram__bytes_read.sum.pct_of_peak_sustained_elapsed",
                "refused",
            )
            .unwrap();
        assert!(
            line.contains("relative scale") && line.contains("refused"),
            "{line}"
        );
        assert_eq!(s.columns, vec!["dram__bytes_read.sum".to_string()]);
        assert_eq!(s.heatmaps[0].metric, "dram__bytes_read.sum");
        assert_eq!(s.heatmaps[0].full_scale, None);
        assert_eq!(
            s.relative("x__y.avg.pct_of_peak_sustained_elapsed", "no"),
            None
        );
    }

    #[test]
    fn no_denominator_wins_and_full_scale_applies() {
        let s = select(&MetricRequest {
            metrics: vec![DEFAULT_DRAM.into()],
            denominator: Some("gr__cycles_elapsed.max".into()),
            no_denominator: true,
            full_scale: Some(50.0),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.columns, vec![DEFAULT_DRAM]);
        assert_eq!(s.heatmaps[0].denominator, None);
        assert_eq!(s.heatmaps[0].full_scale, Some(50.0));
    }

    #[test]
    fn sm_spread_adds_min_and_max_rollups() {
        let s = select(&MetricRequest {
            sm_spread: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            s.columns,
            vec![
                DEFAULT_TENSOR.to_string(),
                "sm__pipe_tensor_cycles_active_realtime.min.pct_of_peak_sustained_elapsed".into(),
                "sm__pipe_tensor_cycles_active_realtime.max.pct_of_peak_sustained_elapsed".into(),
                DEFAULT_DRAM.to_string(),
            ]
        );
        // The rollups are the tensor heatmap's spread rows, not heatmaps of their own.
        let shown: Vec<&str> = s.heatmaps.iter().map(|h| h.metric.as_str()).collect();
        assert_eq!(shown, [DEFAULT_TENSOR, DEFAULT_DRAM]);
    }

    #[test]
    fn sm_spread_without_an_sm_metric_is_an_error() {
        let e = select(&MetricRequest {
            metrics: vec![DEFAULT_DRAM.into()],
            sm_spread: true,
            ..Default::default()
        });
        assert_eq!(e, Err(SpecError::NoPerSmMetric));
    }

    #[test]
    fn malformed_names_and_scales_are_rejected() {
        assert!(matches!(
            select(&MetricRequest {
                metrics: vec!["tensor".into()],
                ..Default::default()
            }),
            Err(SpecError::Malformed(_))
        ));
        assert!(matches!(
            select(&MetricRequest {
                full_scale: Some(0.0),
                ..Default::default()
            }),
            Err(SpecError::BadFullScale(_))
        ));
    }
}
