//! The Prometheus text exposition (format 0.0.4) of one scrape.
//!
//! Every family is written once with its `# HELP` and `# TYPE`. A window value without samples
//! behind it (no sample, no NVML reading, no idle test possible) is left out, never written as
//! 0; the running totals (counters) are always there once a GPU is known.

use super::aggregate::{Scrape, Totals};
use cufall_trace::model::{DeviceId, DeviceInfo, MetricInfo};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Labels every series of a GPU carries, named as dcgm-exporter names them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuLabels {
    /// `(name, value)` in order.
    pub pairs: Vec<(&'static str, String)>,
}

/// Kubernetes' downward-API variables the exporter's pod may set, and their label names.
pub const KUBE_ENV: [(&str, &str); 3] = [
    ("POD_NAME", "pod"),
    ("POD_NAMESPACE", "namespace"),
    ("CONTAINER_NAME", "container"),
];

impl GpuLabels {
    /// `gpu`, `UUID`, `modelName`, `Hostname`, and `pod`/`namespace`/`container` where `env`
    /// gives them.
    pub fn new(d: &DeviceInfo, hostname: &str, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut pairs = vec![
            ("gpu", d.id.0.to_string()),
            ("UUID", d.uuid.clone()),
            ("modelName", d.name.clone()),
            ("Hostname", hostname.to_string()),
        ];
        for (var, label) in KUBE_ENV {
            if let Some(v) = env(var).filter(|v| !v.is_empty()) {
                pairs.push((label, v));
            }
        }
        GpuLabels { pairs }
    }
}

/// Escapes a label value as the exposition format wants it.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn labels(base: &[(&str, String)], extra: &[(&str, &str)]) -> String {
    let all: Vec<String> = base
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .chain(extra.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))))
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// One family being written.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &str, v: f64) {
        let _ = writeln!(self.out, "{name}{labels} {}", number(v));
    }
}

fn family<'a>(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out }
}

/// The state of sampling, as the `state` label of `cufall_sampling_state`.
pub const STATES: [&str; 5] = ["starting", "sampling", "paused", "counters_busy", "stopped"];

/// Everything a scrape shows besides the aggregates.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub gpus: BTreeMap<DeviceId, GpuLabels>,
    pub metrics: Vec<MetricInfo>,
    /// Seconds since the last sample of each GPU reached the exporter (or since sampling
    /// started, before the first).
    pub age_s: BTreeMap<DeviceId, f64>,
    /// One of [`STATES`].
    pub state: &'static str,
    /// Seconds until a pause ends by itself (0 when not paused).
    pub pause_left_s: f64,
    pub restarts: u64,
    pub measures_idle: bool,
    pub cpu_s: f64,
    pub uptime_s: f64,
    pub resident_bytes: Option<u64>,
    pub flight_bytes: u64,
    pub feed_discarded: u64,
    pub scrapers: usize,
    pub dumps: u64,
}

/// A per-GPU family: one series per known GPU with a value.
fn per_gpu(
    out: &mut String,
    ctx: &Context,
    (name, kind, help): (&str, &str, &str),
    value: impl Fn(DeviceId) -> Option<f64>,
) {
    let rows: Vec<(String, f64)> = ctx
        .gpus
        .iter()
        .filter_map(|(d, l)| value(*d).map(|v| (labels(&l.pairs, &[]), v)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let mut f = family(out, name, kind, help);
    for (l, v) in rows {
        f.sample(name, &l, v);
    }
}

/// A per-GPU, per-metric family.
fn per_metric(
    out: &mut String,
    ctx: &Context,
    (name, help): (&str, &str),
    value: impl Fn(DeviceId, usize) -> Option<f64>,
) {
    let mut rows = Vec::new();
    for (d, l) in &ctx.gpus {
        for (i, m) in ctx.metrics.iter().enumerate() {
            if let Some(v) = value(*d, i) {
                let extra = [("metric", m.name.as_str()), ("unit", m.unit.as_str())];
                rows.push((labels(&l.pairs, &extra), v));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    let mut f = family(out, name, "gauge", help);
    for (l, v) in rows {
        f.sample(name, &l, v);
    }
}

fn ns_s(ns: i64) -> f64 {
    ns as f64 / 1e9
}

/// The whole exposition of one scrape.
pub fn render(scrape: &Scrape, ctx: &Context) -> String {
    let mut out = String::new();
    let win = |d: DeviceId| scrape.windows.get(&d).filter(|w| w.samples > 0);
    let any = |d: DeviceId| scrape.windows.get(&d);
    let tot = |d: DeviceId| scrape.totals.get(&d);
    window_families(&mut out, ctx, &win, &any);
    let counters: [Counter; 6] = [
        (
            "cufall_samples_total",
            "PM samples that reached the exporter.",
            |t| t.samples as f64,
        ),
        (
            "cufall_samples_lost_total",
            "PM samples lost (hardware buffer overflow, full image, decode or evaluation failure; warm-up samples are not counted).",
            |t| t.lost_samples as f64,
        ),
        (
            "cufall_sampled_seconds_total",
            "GPU time covered by samples whose idle test could be made.",
            |t| ns_s(t.sampled_ns),
        ),
        (
            "cufall_idle_seconds_total",
            "GPU time of idle samples (the report's idle test).",
            |t| ns_s(t.idle_ns),
        ),
        (
            "cufall_idle_gaps_total",
            "Idle gaps of at least 1 ms, counted when they end.",
            |t| t.gaps as f64,
        ),
        (
            "cufall_idle_gap_seconds_total",
            "Total length of the idle gaps of at least 1 ms.",
            |t| ns_s(t.gap_ns),
        ),
    ];
    for (i, (name, help, f)) in counters.into_iter().enumerate() {
        // Idle counters only exist where idle can be told.
        if i >= 2 && !ctx.measures_idle {
            continue;
        }
        per_gpu(&mut out, ctx, (name, "counter", help), |d| tot(d).map(f));
    }
    per_gpu(
        &mut out,
        ctx,
        (
            "cufall_sample_age_seconds",
            "gauge",
            "Seconds since the last sample of this GPU reached the exporter (since sampling started, before the first): staleness.",
        ),
        |d| ctx.age_s.get(&d).copied(),
    );
    self_families(&mut out, ctx, scrape);
    out
}

/// A running total: its name, help, and how it is read from [`Totals`].
type Counter = (&'static str, &'static str, fn(&Totals) -> f64);

type Win<'a> = dyn Fn(DeviceId) -> Option<&'a Totals> + 'a;

fn window_families(out: &mut String, ctx: &Context, win: &Win<'_>, any: &Win<'_>) {
    per_metric(
        out,
        ctx,
        (
            "cufall_metric_mean",
            "Mean of a PM-sampling metric over the scrape window, in the metric's unit (label unit).",
        ),
        |d, i| win(d).and_then(|w| w.mean(i)),
    );
    per_metric(
        out,
        ctx,
        (
            "cufall_metric_max",
            "Largest sample of a PM-sampling metric in the scrape window.",
        ),
        |d, i| win(d).and_then(|w| w.max(i)),
    );
    per_gpu(
        out,
        ctx,
        (
            "cufall_idle_ratio",
            "gauge",
            "Fraction of the window's sampled GPU time that was idle, at sample resolution.",
        ),
        |d| win(d).and_then(Totals::idle_ratio),
    );
    if ctx.measures_idle {
        per_gpu(
            out,
            ctx,
            (
                "cufall_window_idle_gaps",
                "gauge",
                "Idle gaps of at least 1 ms that ended in the scrape window.",
            ),
            |d| win(d).map(|w| w.gaps as f64),
        );
        per_gpu(
            out,
            ctx,
            (
                "cufall_window_idle_gap_seconds",
                "gauge",
                "Total length of the idle gaps of at least 1 ms that ended in the scrape window.",
            ),
            |d| win(d).map(|w| ns_s(w.gap_ns)),
        );
    }
    per_gpu(
        out,
        ctx,
        (
            "cufall_nvml_gpu_utilization_ratio",
            "gauge",
            "NVML's GPU utilisation (what nvidia-smi shows: the share of time any kernel ran), mean of the window's readings.",
        ),
        |d| any(d).and_then(Totals::util_ratio),
    );
    per_gpu(
        out,
        ctx,
        (
            "cufall_power_watts",
            "gauge",
            "NVML's power draw, mean of the window's readings.",
        ),
        |d| any(d).and_then(Totals::power_w),
    );
}

fn self_families(out: &mut String, ctx: &Context, scrape: &Scrape) {
    let one = |out: &mut String, name: &str, kind: &str, help: &str, v: f64| {
        family(out, name, kind, help).sample(name, "", v);
    };
    {
        let name = "cufall_sampling_state";
        let mut f = family(
            out,
            name,
            "gauge",
            "1 for the exporter's current sampling state (starting, sampling, paused: the GPU counters are released for another tool (cufall control pause, POST /pause), counters_busy: another profiler holds the GPU counters, stopped: waiting to retry).",
        );
        for s in STATES {
            let v = if s == ctx.state { 1.0 } else { 0.0 };
            f.sample(name, &labels(&[], &[("state", s)]), v);
        }
    }
    one(
        out,
        "cufall_pause_remaining_seconds",
        "gauge",
        "Seconds until a pause of the GPU counters ends and sampling resumes by itself; 0 when not paused.",
        ctx.pause_left_s,
    );
    one(
        out,
        "cufall_sampling_restarts_total",
        "counter",
        "Times sampling was started again after it stopped or could not start.",
        ctx.restarts as f64,
    );
    one(
        out,
        "cufall_window_seconds",
        "gauge",
        "Length of this scraper's window (since its previous scrape, at most 10 minutes).",
        scrape.window.as_secs_f64(),
    );
    one(
        out,
        "cufall_exporter_cpu_seconds_total",
        "counter",
        "CPU time the exporter process used (user and system, every thread).",
        ctx.cpu_s,
    );
    let gpus = ctx.gpus.len().max(1) as f64;
    if ctx.uptime_s > 0.0 {
        one(
            out,
            "cufall_exporter_cores_per_gpu",
            "gauge",
            "Cores the exporter used per GPU, averaged since it started.",
            ctx.cpu_s / ctx.uptime_s / gpus,
        );
    }
    if let Some(b) = ctx.resident_bytes {
        one(
            out,
            "cufall_exporter_resident_memory_bytes",
            "gauge",
            "Resident memory of the exporter process.",
            b as f64,
        );
    }
    one(
        out,
        "cufall_flight_recorder_bytes",
        "gauge",
        "Memory the flight recorder's rows take.",
        ctx.flight_bytes as f64,
    );
    one(
        out,
        "cufall_flight_recorder_dumps_total",
        "counter",
        "Flight-recorder traces written.",
        ctx.dumps as f64,
    );
    one(
        out,
        "cufall_exporter_feed_discarded_total",
        "counter",
        "Batches the exporter fell too far behind to take (their samples are in no window and no dump).",
        ctx.feed_discarded as f64,
    );
    one(
        out,
        "cufall_exporter_scrapers",
        "gauge",
        "Scrapers the exporter keeps a window for.",
        ctx.scrapers as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        let d = DeviceInfo {
            id: DeviceId(3),
            name: "NVIDIA \"H200\"".into(),
            chip: "GH100".into(),
            uuid: "GPU-abc".into(),
            pci_bus_id: String::new(),
            sm_count: None,
            memory_total_bytes: None,
        };
        let env = |v: &str| (v == "POD_NAME").then(|| "llm-0".to_string());
        let mut gpus = BTreeMap::new();
        gpus.insert(DeviceId(3), GpuLabels::new(&d, "node1", &env));
        Context {
            gpus,
            metrics: vec![MetricInfo {
                name: "dram__throughput.avg.pct_of_peak_sustained_elapsed".into(),
                unit: "%".into(),
                description: String::new(),
            }],
            state: "sampling",
            measures_idle: true,
            uptime_s: 10.0,
            cpu_s: 1.0,
            ..Context::default()
        }
    }

    #[test]
    fn labels_are_dcgm_exporters_and_escaped() {
        let c = ctx();
        let mut s = Scrape::default();
        s.totals.insert(DeviceId(3), Totals::default());
        let text = render(&s, &c);
        assert!(
            text.contains(
                "cufall_samples_total{gpu=\"3\",UUID=\"GPU-abc\",modelName=\"NVIDIA \\\"H200\\\"\",Hostname=\"node1\",pod=\"llm-0\"} 0"
            ),
            "{text}"
        );
        assert!(
            !text.contains("namespace="),
            "unset variables give no label"
        );
    }

    #[test]
    fn a_window_without_samples_writes_no_window_values() {
        let c = ctx();
        let mut s = Scrape::default();
        s.totals.insert(DeviceId(3), Totals::default());
        let text = render(&s, &c);
        for absent in [
            "cufall_metric_mean",
            "cufall_metric_max",
            "cufall_idle_ratio",
            "cufall_window_idle_gaps",
            "cufall_power_watts",
            "cufall_nvml_gpu_utilization_ratio",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        assert!(text.contains("cufall_sampling_state{state=\"sampling\"} 1"));
        assert!(text.contains("cufall_sampling_state{state=\"counters_busy\"} 0"));
    }

    #[test]
    fn every_family_is_declared_once_before_its_samples() {
        let c = ctx();
        let mut s = Scrape::default();
        let mut w = Totals {
            samples: 10,
            sampled_ns: 1_000,
            idle_ns: 250,
            sums: vec![40.0],
            counts: vec![10],
            maxes: vec![9.0],
            util: (990.0, 10),
            power: (3000.0, 10),
            ..Totals::default()
        };
        s.windows.insert(DeviceId(3), w.clone());
        w.gaps = 2;
        s.totals.insert(DeviceId(3), w);
        let text = render(&s, &c);
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(declared.insert(name.to_string()), "{name} twice");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{name} undeclared");
            }
        }
        assert!(text.contains("cufall_idle_ratio{") && text.contains("} 0.25\n"));
        assert!(text.contains("cufall_nvml_gpu_utilization_ratio{"));
        assert!(text.contains("} 0.99\n"));
        assert!(text.contains(
            "metric=\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",unit=\"%\"} 4\n"
        ));
    }
}
