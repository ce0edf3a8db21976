//! `cufall metrics [--device N] [--filter WORD]`: the metrics PM sampling offers on a GPU, with
//! type, unit and description, and the sub-metrics (rollups) that apply.

use cufall_cupti::{Cupti, HostKind, MetricKind, ProfilerHost};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Clone, Debug, clap::Args)]
pub struct MetricsArgs {
    /// GPU whose metrics to list (CUDA numbering).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub device: usize,
    /// Only metrics whose name or description contains every word (case-insensitive); also
    /// lists each match's sub-metrics.
    #[arg(long, value_name = "WORD")]
    pub filter: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Row {
    name: String,
    kind: &'static str,
    unit: String,
    hw_unit: String,
    description: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sub_metrics: Vec<String>,
}

/// Whether a metric matches every word of the filter.
pub fn matches(filter: &str, name: &str, description: &str) -> bool {
    let hay = format!("{} {}", name, description).to_ascii_lowercase();
    filter
        .split_whitespace()
        .all(|w| hay.contains(&w.to_ascii_lowercase()))
}

pub fn run(args: &MetricsArgs) -> anyhow::Result<i32> {
    let cupti = Cupti::init()?;
    cupti.check_device(args.device)?;
    let facts = cupti.device_facts(args.device)?;
    let chip = cupti.chip_name(args.device)?;
    // Availability needs counter access; the catalogue does not. List it either way.
    let (availability, note) = match cupti.pm_counter_availability(args.device) {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let host = ProfilerHost::new(&cupti, HostKind::PmSampling, &chip, availability)?;
    let all = host.all_base_metrics()?;
    let mut rows = Vec::new();
    let mut subs_by_kind: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (name, kind) in &all {
        let props = host.properties(name).ok();
        let description = props
            .as_ref()
            .map(|p| p.description.clone())
            .unwrap_or_default();
        if let Some(f) = &args.filter
            && !matches(f, name, &description)
        {
            continue;
        }
        if !subs_by_kind.contains_key(kind.as_str()) {
            subs_by_kind.insert(
                kind.as_str(),
                host.sub_metrics(name, *kind).unwrap_or_default(),
            );
        }
        let sub_metrics = if args.filter.is_some() || args.json {
            host.sub_metrics(name, *kind).unwrap_or_default()
        } else {
            Vec::new()
        };
        rows.push(Row {
            name: name.clone(),
            kind: kind.as_str(),
            unit: props
                .as_ref()
                .map(|p| p.dim_unit.clone())
                .unwrap_or_default(),
            hw_unit: props
                .as_ref()
                .map(|p| p.hw_unit.clone())
                .unwrap_or_default(),
            description,
            sub_metrics,
        });
    }
    if args.json {
        let text = serde_json::to_string_pretty(&rows)?;
        emit(&format!("{text}\n"));
        return Ok(0);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PM sampling metrics of GPU {} ({}, chip {}): {} of {} base metrics{}",
        args.device,
        facts.name,
        chip,
        rows.len(),
        all.len(),
        args.filter
            .as_deref()
            .map(|f| format!(" matching \"{f}\""))
            .unwrap_or_default()
    );
    if let Some(n) = note {
        let _ = writeln!(out, "(counter availability unknown: {n})");
    }
    let _ = writeln!(
        out,
        "A metric is BASE + SUB-METRIC, e.g. sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed.\n"
    );
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(10);
    for r in &rows {
        let _ = writeln!(
            out,
            "{:width$}  {:10}  {:8}  {}",
            r.name,
            r.kind,
            r.unit,
            r.description,
            width = width
        );
        for line in sub_metric_lines(&r.sub_metrics, 100) {
            let _ = writeln!(out, "{:width$}  {line}", "", width = width);
        }
    }
    if args.filter.is_none() {
        let _ = writeln!(
            out,
            "\nSub-metrics by type (use --filter NAME for a metric's own list):"
        );
        for k in MetricKind::ALL {
            if let Some(s) = subs_by_kind.get(k.as_str()) {
                let _ = writeln!(out, "  {}:", k.as_str());
                for line in sub_metric_lines(s, 100) {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
    emit(&out);
    Ok(0)
}

/// A metric's sub-metrics in a few lines. CUPTI's lists are mostly every rollup (`.avg`, `.max`,
/// `.min`, `.sum`) times every suffix (`.per_second`, `.pct_of_peak_sustained_elapsed`, ...):
/// shown as the rollups and the suffixes that follow each. Anything else is wrapped at `width`.
pub fn sub_metric_lines(subs: &[String], width: usize) -> Vec<String> {
    if subs.is_empty() {
        return Vec::new();
    }
    let split = |s: &str| -> (String, String) {
        let t = s.trim_start_matches('.');
        match t.split_once('.') {
            Some((r, rest)) => (format!(".{r}"), format!(".{rest}")),
            None => (format!(".{t}"), String::new()),
        }
    };
    let mut rollups: Vec<String> = Vec::new();
    let mut suffixes: Vec<String> = Vec::new();
    for s in subs {
        let (r, x) = split(s);
        if !rollups.contains(&r) {
            rollups.push(r);
        }
        if !suffixes.contains(&x) {
            suffixes.push(x);
        }
    }
    let is_product = rollups.len() > 1
        && suffixes.len() > 1
        && rollups.len() * suffixes.len() == subs.len()
        && subs.iter().all(|s| {
            let (r, x) = split(s);
            rollups.contains(&r) && suffixes.contains(&x)
        });
    if is_product {
        let bare = suffixes.iter().any(|x| x.is_empty());
        let shown: Vec<String> = suffixes.iter().filter(|x| !x.is_empty()).cloned().collect();
        let mut lines = vec![format!(
            "sub-metrics: a rollup ({}), {}followed by one of:",
            rollups.join(" "),
            if bare { "alone or " } else { "" }
        )];
        lines.extend(wrap(&shown, width, "  "));
        return lines;
    }
    let mut lines = wrap(subs, width, "  ");
    if let Some(first) = lines.first_mut() {
        *first = format!("sub-metrics: {}", first.trim_start());
    }
    lines
}

/// Words joined by spaces into lines of at most `width` characters (a longer word stands alone).
fn wrap(words: &[String], width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for w in words {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if line.is_empty() {
            line.push_str(indent);
        } else {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Writes to stdout, quietly stopping when the reader goes away (`cufall metrics | head`).
fn emit(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|_| o.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rollups_times_suffixes_are_shown_as_two_lists() {
        let mut subs = Vec::new();
        for r in [".avg", ".max", ".min", ".sum"] {
            for x in ["", ".per_second", ".pct_of_peak_sustained_elapsed"] {
                subs.push(format!("{r}{x}"));
            }
        }
        let lines = sub_metric_lines(&subs, 100);
        assert_eq!(
            lines,
            vec![
                "sub-metrics: a rollup (.avg .max .min .sum), alone or followed by one of:"
                    .to_string(),
                "  .per_second .pct_of_peak_sustained_elapsed".to_string(),
            ]
        );
    }

    #[test]
    fn other_lists_are_wrapped_and_nothing_is_lost() {
        let subs = strings(&[".ratio", ".pct", ".max_rate", ".sum.per_second"]);
        let lines = sub_metric_lines(&subs, 20);
        assert!(lines.iter().all(|l| l.len() <= 25), "{lines:?}");
        assert!(lines[0].starts_with("sub-metrics: "));
        let joined = lines.join(" ");
        for s in &subs {
            assert!(joined.contains(s.as_str()), "{s} missing from {lines:?}");
        }
        assert!(sub_metric_lines(&[], 80).is_empty());
        // A near-product with a pair missing is not compressed.
        let gappy = strings(&[".avg", ".avg.per_second", ".max"]);
        assert!(sub_metric_lines(&gappy, 100)[0].contains(".avg.per_second"));
    }

    #[test]
    fn filter_needs_every_word() {
        assert!(matches(
            "tensor active",
            "sm__pipe_tensor_cycles_active",
            ""
        ));
        assert!(matches("DRAM", "dram__throughput", ""));
        assert!(matches("bandwidth", "x__y", "peak Bandwidth of DRAM"));
        assert!(!matches("tensor dram", "sm__pipe_tensor_cycles_active", ""));
    }
}
