//! Metric names: `base__name.rollup[.submetric]`, e.g.
//! `sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`: the base metric
//! (`sm__pipe_tensor_cycles_active`), then a suffix CUPTI calls a sub-metric (`.avg...`).
//! Validation against a chip's catalogue and "did you mean" suggestions live here.

use crate::error::{CuptiError, Result};
use crate::host::{MetricKind, ProfilerHost};
use std::collections::BTreeMap;

/// A metric name split into its base metric and its suffix (empty, or starting with `.`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricName {
    pub base: String,
    pub suffix: String,
}

impl MetricName {
    pub fn parse(name: &str) -> Self {
        let name = name.trim();
        // Some base names carry a dotted prefix (`CTC.TriageCompute.ctc__rx_bytes`): the suffix
        // starts at the first `.` after the `__` of the base name.
        let from = name.find("__").unwrap_or(0);
        match name[from..].find('.').map(|i| i + from) {
            Some(i) => MetricName {
                base: name[..i].to_string(),
                suffix: name[i..].to_string(),
            },
            None => MetricName {
                base: name.to_string(),
                suffix: String::new(),
            },
        }
    }

    pub fn full(&self) -> String {
        format!("{}{}", self.base, self.suffix)
    }

    /// The rollup (`avg`, `sum`, `min`, `max`), if the suffix starts with one.
    pub fn rollup(&self) -> Option<&str> {
        let first = self.suffix.trim_start_matches('.').split('.').next()?;
        matches!(first, "avg" | "sum" | "min" | "max").then_some(first)
    }

    /// The same metric with another rollup (`sm__x.avg.pct` → `sm__x.max.pct`).
    pub fn with_rollup(&self, rollup: &str) -> Option<MetricName> {
        let old = self.rollup()?;
        let rest = &self.suffix[1 + old.len()..];
        Some(MetricName {
            base: self.base.clone(),
            suffix: format!(".{rollup}{rest}"),
        })
    }
}

/// Edit distance between two strings (insertions, deletions, substitutions).
pub use strsim::levenshtein;

/// Up to `n` candidates close to `query`: small edit distance, or containing every
/// `_`-separated word of the query. Closest first.
pub fn suggest<'a>(
    query: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let q = query.to_ascii_lowercase();
    let words: Vec<&str> = q.split('_').filter(|w| w.len() >= 3).collect();
    let limit = (q.len() / 3).max(2);
    let mut scored: Vec<(usize, String)> = candidates
        .into_iter()
        .filter_map(|c| {
            let d = levenshtein(&q, &c.to_ascii_lowercase());
            let has_words = !words.is_empty() && words.iter().all(|w| c.contains(w));
            if d <= limit {
                Some((d, c.to_string()))
            } else if has_words {
                Some((limit + 1 + d, c.to_string()))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

/// The PM-sampling metric catalogue of one chip: base metrics with their types; sub-metrics are
/// looked up on demand.
pub struct Catalogue {
    pub bases: BTreeMap<String, MetricKind>,
    /// Base metrics the range profiler (kernel replay) knows but PM sampling does not.
    pub replay_only: std::collections::BTreeSet<String>,
}

impl Catalogue {
    /// Reads the catalogue from a PM-sampling host object, and from a range-profiler host
    /// object when given (to recognise metrics PM sampling cannot collect).
    pub fn read(pm: &ProfilerHost, range: Option<&ProfilerHost>) -> Result<Self> {
        let bases: BTreeMap<String, MetricKind> = pm.all_base_metrics()?.into_iter().collect();
        let mut replay_only = std::collections::BTreeSet::new();
        if let Some(r) = range
            && let Ok(all) = r.all_base_metrics()
        {
            replay_only = all
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| !bases.contains_key(n))
                .collect();
        }
        Ok(Catalogue { bases, replay_only })
    }

    /// Checks that `name` is a complete metric PM sampling can collect on this chip.
    pub fn validate(&self, pm: &ProfilerHost, name: &str) -> Result<()> {
        let m = MetricName::parse(name);
        let Some(kind) = self.bases.get(&m.base).copied() else {
            if self.replay_only.contains(&m.base) {
                return Err(CuptiError::NotSupportedByPmSampling {
                    name: name.to_string(),
                });
            }
            let close = suggest(&m.base, self.bases.keys().map(String::as_str), 3);
            let suggestions = close
                .into_iter()
                .map(|b| {
                    let suffix = if m.suffix.is_empty() {
                        ".avg".to_string()
                    } else {
                        m.suffix.clone()
                    };
                    format!("{b}{suffix}")
                })
                .collect();
            return Err(CuptiError::UnknownMetric {
                name: name.to_string(),
                suggestions,
            });
        };
        let subs = pm.sub_metrics(&m.base, kind)?;
        if subs.contains(&m.suffix) {
            return Ok(());
        }
        let query = if m.suffix.is_empty() {
            ".avg".to_string()
        } else {
            m.suffix.clone()
        };
        let mut close = suggest(&query, subs.iter().map(String::as_str), 3);
        if close.is_empty() {
            close = subs.iter().take(3).cloned().collect();
        }
        Err(CuptiError::UnknownMetric {
            name: name.to_string(),
            suggestions: close
                .into_iter()
                .map(|s| format!("{}{s}", m.base))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_base_and_suffix() {
        let m =
            MetricName::parse("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed");
        assert_eq!(m.base, "sm__pipe_tensor_cycles_active");
        assert_eq!(m.suffix, ".avg.pct_of_peak_sustained_elapsed");
        assert_eq!(m.rollup(), Some("avg"));
        assert_eq!(
            m.with_rollup("max").map(|x| x.full()),
            Some("sm__pipe_tensor_cycles_active.max.pct_of_peak_sustained_elapsed".to_string())
        );
        let dotted = MetricName::parse("CTC.TriageCompute.ctc__rx_bytes.sum");
        assert_eq!(dotted.base, "CTC.TriageCompute.ctc__rx_bytes");
        assert_eq!(dotted.suffix, ".sum");
        let bare = MetricName::parse("gr__cycles_elapsed");
        assert_eq!(bare.suffix, "");
        assert_eq!(bare.rollup(), None);
        assert_eq!(bare.with_rollup("max"), None);
    }

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    #[test]
    fn suggests_close_names_first() {
        let cands = [
            "dram__throughput",
            "dram__bytes_read",
            "sm__pipe_tensor_cycles_active",
            "sm__cycles_active",
        ];
        let s = suggest("dram__thruput", cands.iter().copied(), 3);
        assert_eq!(s.first().map(String::as_str), Some("dram__throughput"));
        let s = suggest("tensor_cycles", cands.iter().copied(), 3);
        assert_eq!(s, vec!["sm__pipe_tensor_cycles_active".to_string()]);
        assert!(suggest("zzzzzzzzzzzz", cands.iter().copied(), 3).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn levenshtein_is_a_metric(a in "[a-z_]{0,12}", b in "[a-z_]{0,12}") {
            proptest::prop_assert_eq!(levenshtein(&a, &b), levenshtein(&b, &a));
            proptest::prop_assert!(levenshtein(&a, &b) <= a.len().max(b.len()));
            proptest::prop_assert_eq!(levenshtein(&a, &a), 0);
        }

        #[test]
        fn parse_round_trips(base in "[a-z]{2,5}__[a-z_]{1,10}", suffix in "(\\.[a-z_]{1,8}){0,3}") {
            let full = format!("{base}{suffix}");
            proptest::prop_assert_eq!(MetricName::parse(&full).full(), full);
        }
    }
}
