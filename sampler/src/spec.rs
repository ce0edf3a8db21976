//! Which metrics to record and how each heatmap is derived from them: the logic behind
//! `--metric`, `--denominator`, `--no-denominator`, `--full-scale` and `--sm-spread`.

use cufall_cupti::metric::MetricName;
use cufall_trace::model::HeatmapSpec;

/// Tensor-pipe activity as % of peak: the honest "are the tensor cores busy" number.
pub const DEFAULT_TENSOR: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
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
}

/// What to collect (one column per metric, no duplicates) and which heatmaps to show.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub columns: Vec<String>,
    pub heatmaps: Vec<HeatmapSpec>,
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
        .map(|m| HeatmapSpec {
            metric: m.clone(),
            denominator: denominator.clone(),
            full_scale: req
                .full_scale
                .or_else(|| default_full_scale(m, denominator.is_some())),
        })
        .collect();
    Ok(Selection { columns, heatmaps })
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
    fn denominator_is_collected_once_and_scales_to_one() {
        let s = select(&MetricRequest {
            metrics: vec![
                "sm__pipe_tensor_cycles_active.avg".into(),
                "sm__cycles_active.avg".into(),
            ],
            denominator: Some("gr__cycles_elapsed.max".into()),
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
                "sm__pipe_tensor_cycles_active.min.pct_of_peak_sustained_elapsed".into(),
                "sm__pipe_tensor_cycles_active.max.pct_of_peak_sustained_elapsed".into(),
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
