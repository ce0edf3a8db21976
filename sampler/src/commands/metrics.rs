//! `cufall metrics [--device N] [--filter WORD]`: the metrics PM sampling offers on a GPU, with
//! type, unit and description, and the sub-metrics (rollups) that apply.

use cufall_cupti::{Cupti, HostKind, MetricKind, ProfilerHost};
use cufall_trace::model::Nanos;
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
    /// Also measure what each listed metric costs to sample (its counter-data bytes per
    /// sample, the finest interval sampled without loss, the default interval alone); on by
    /// default with --filter. Needs access to the GPU's counters.
    #[arg(long)]
    pub cost: bool,
    /// What sampling these metrics together costs (repeatable): bytes per sample, the default
    /// interval `cufall record --metric ...` would choose, the finest lossless interval.
    #[arg(long, value_name = "METRIC")]
    pub metric: Vec<String>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<MetricCost>,
}

/// What sampling one metric (as a full name) or a set of metrics costs on this GPU.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MetricCost {
    /// The full names measured.
    pub metrics: Vec<String>,
    pub bytes_per_sample: u64,
    /// The finest interval the cost model says the decoder holds without loss.
    pub finest_lossless_ns: Nanos,
    /// The interval `cufall record` chooses for these metrics alone.
    pub default_interval_ns: Nanos,
    /// CPU per GPU at the default interval, cores.
    pub cores_at_default: f64,
}

impl MetricCost {
    fn new(metrics: Vec<String>, bytes_per_sample: u64) -> MetricCost {
        let model = crate::cost::CostModel::H200.for_metrics(&metrics);
        let n = metrics.len();
        let default_interval_ns = model
            .default_interval(bytes_per_sample, n, crate::cost::CORE_BUDGET)
            .0;
        MetricCost {
            finest_lossless_ns: model.finest_lossless_ns(bytes_per_sample, n),
            cores_at_default: model
                .predict(bytes_per_sample, n, default_interval_ns)
                .cores(),
            default_interval_ns,
            bytes_per_sample,
            metrics,
        }
    }

    /// `4729 B/sample as dram__throughput...: lossless down to 7us; alone the default is 12us
    /// (0.95 cores)`.
    fn line(&self) -> String {
        format!(
            "{} B/sample as {}: lossless down to {}; the default interval for it is {} ({:.2} cores)",
            self.bytes_per_sample,
            self.metrics.join(" + "),
            crate::args::duration::interval_text(self.finest_lossless_ns.get()),
            crate::args::duration::interval_text(self.default_interval_ns.get()),
            self.cores_at_default
        )
    }
}

/// The full name a base metric is usually sampled as, for its cost line: the `%` of peak where
/// the metric has it (what `--metric` defaults use), else its first sub-metric.
pub fn usual_full_name(base: &str, sub_metrics: &[String]) -> Option<String> {
    const USUAL: [&str; 3] = [".avg.pct_of_peak_sustained_elapsed", ".ratio", ".sum"];
    USUAL
        .iter()
        .find(|u| sub_metrics.iter().any(|s| s == *u))
        .map(|u| (*u).to_string())
        .or_else(|| sub_metrics.first().cloned())
        .map(|s| format!("{base}{s}"))
}

/// Measures bytes per sample on one GPU: PM sampling enabled once (without binding a CUDA
/// context to this thread), configured per metric set.
struct Coster {
    sampler: cufall_cupti::PmSampler,
}

impl Coster {
    fn new(cupti: &Cupti, device: usize) -> Result<Coster, cufall_cupti::CuptiError> {
        Ok(Coster {
            sampler: cufall_cupti::PmSampler::enable(cupti, device)?,
        })
    }

    fn cost(
        &mut self,
        cupti: &Cupti,
        host: &ProfilerHost,
        metrics: &[String],
    ) -> Result<MetricCost, cufall_cupti::CuptiError> {
        let config = host.config_image(cupti, metrics)?;
        let bytes = crate::pipeline::device::bytes_per_sample(
            &mut self.sampler,
            &config,
            metrics,
            cufall_trace::model::Nanos(100_000),
        )?;
        Ok(MetricCost::new(metrics.to_vec(), bytes))
    }

    /// Disables sampling.
    fn close(self) {
        drop(self.sampler);
    }
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
    let counters = availability.is_some();
    let host = ProfilerHost::new(&cupti, HostKind::PmSampling, &chip, availability)?;
    if !args.metric.is_empty() {
        return cost_of_set(&cupti, &host, args, note);
    }
    let want_cost = args.cost || args.filter.is_some();
    let (mut coster, cost_note) = match (want_cost, counters) {
        (true, true) => match Coster::new(&cupti, args.device) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(format!("costs not measured: {e}"))),
        },
        (true, false) => (
            None,
            Some("costs not measured: the GPU's counters are out of reach".to_string()),
        ),
        _ => (None, None),
    };
    let all = host.all_base_metrics()?;
    let (rows, subs_by_kind) = collect_rows(&cupti, &host, &all, args, coster.as_mut());
    if let Some(c) = coster {
        c.close();
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
    if let Some(n) = cost_note {
        let _ = writeln!(out, "({n})");
    }
    render_rows(&mut out, args, &rows, want_cost, &subs_by_kind);
    emit(&out);
    Ok(0)
}

/// Subtypes of a metric kind, as the listing shows them once per kind.
type SubsByKind = BTreeMap<&'static str, Vec<String>>;

/// The rows of the listing (those matching the filter), each with its cost where a coster is
/// given, and one metric's sub-metrics per kind.
fn collect_rows(
    cupti: &Cupti,
    host: &ProfilerHost,
    all: &[(String, MetricKind)],
    args: &MetricsArgs,
    mut coster: Option<&mut Coster>,
) -> (Vec<Row>, SubsByKind) {
    let mut rows = Vec::new();
    let mut subs_by_kind = SubsByKind::new();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut costed = 0usize;
    for (name, kind) in all {
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
        let own_subs = || host.sub_metrics(name, *kind).unwrap_or_default();
        let sub_metrics = if args.filter.is_some() || args.json {
            own_subs()
        } else {
            Vec::new()
        };
        let cost = match coster.as_mut() {
            Some(c) => {
                let subs = if sub_metrics.is_empty() {
                    own_subs()
                } else {
                    sub_metrics.clone()
                };
                costed += 1;
                // Each metric is configured on the GPU to be measured: say how far it got.
                if tty && costed.is_multiple_of(25) {
                    eprint!("\rcufall: measuring what each metric costs: {costed} metrics…");
                }
                usual_full_name(name, &subs).and_then(|full| c.cost(cupti, host, &[full]).ok())
            }
            None => None,
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
            cost,
        });
    }
    if tty && costed >= 25 {
        eprintln!();
    }
    (rows, subs_by_kind)
}

/// The text listing's rows, the cost hint and the sub-metrics by type.
fn render_rows(
    out: &mut String,
    args: &MetricsArgs,
    rows: &[Row],
    want_cost: bool,
    subs_by_kind: &SubsByKind,
) {
    let _ = writeln!(
        out,
        "A metric is BASE + SUB-METRIC, e.g. sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed.\n"
    );
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(10);
    for r in rows {
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
        if let Some(c) = &r.cost {
            let _ = writeln!(out, "{:width$}  cost: {}", "", c.line(), width = width);
        }
    }
    if !want_cost {
        let _ = writeln!(
            out,
            "\nWhat a metric costs to sample (bytes per sample, the finest lossless interval): \
add --cost, or --filter WORD; --metric M --metric M2 for a set."
        );
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
}

/// `cufall metrics --metric M ...`: what sampling that set costs.
fn cost_of_set(
    cupti: &Cupti,
    host: &ProfilerHost,
    args: &MetricsArgs,
    note: Option<String>,
) -> anyhow::Result<i32> {
    if let Some(n) = note {
        anyhow::bail!(
            "cannot measure what the metrics cost: the GPU's counters are out of reach ({n})"
        );
    }
    let range = ProfilerHost::new(cupti, HostKind::RangeProfiler, &host.chip(), None).ok();
    let catalogue = cufall_cupti::metric::Catalogue::read(host, range.as_ref())?;
    for m in &args.metric {
        catalogue.validate(host, m)?;
    }
    let mut coster = Coster::new(cupti, args.device)?;
    let cost = coster.cost(cupti, host, &args.metric);
    coster.close();
    let cost = cost?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&cost)?));
    } else {
        emit(&format!(
            "GPU {}: {}\n(model of an H200's CPU: docs/sampler.md; a faster CPU goes finer)\n",
            args.device,
            cost.line()
        ));
    }
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
    fn a_metric_is_costed_as_it_is_usually_sampled() {
        let subs = strings(&[".avg", ".avg.pct_of_peak_sustained_elapsed", ".sum"]);
        assert_eq!(
            usual_full_name("dram__throughput", &subs).as_deref(),
            Some("dram__throughput.avg.pct_of_peak_sustained_elapsed")
        );
        let subs = strings(&[".max", ".sum", ".sum.per_second"]);
        assert_eq!(
            usual_full_name("lts__t_bytes", &subs).as_deref(),
            Some("lts__t_bytes.sum")
        );
        assert_eq!(
            usual_full_name("x__y", &strings(&[".max"])).as_deref(),
            Some("x__y.max")
        );
        assert_eq!(usual_full_name("x__y", &[]), None);
        let c = MetricCost::new(
            strings(&["dram__throughput.avg.pct_of_peak_sustained_elapsed"]),
            4_729,
        );
        assert!(
            c.line().starts_with("4729 B/sample as dram__throughput"),
            "{}",
            c.line()
        );
        assert!(
            c.default_interval_ns <= Nanos(12_000) && c.finest_lossless_ns < c.default_interval_ns
        );
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
