//! `cufall info TRACE`: what a recording holds.

use anyhow::Result;
use cufall_analysis::capture::{CaptureLine, capture_lines};
use cufall_analysis::render::capture_text;
use cufall_analysis::select::{DomainCount, domain_counts, domain_label, ranges_text};
use cufall_trace::Trace;
use cufall_trace::model::RecordingStatus;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// The trace folder (as written by `cufall record -o NAME.cufall`).
    pub trace: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &InfoArgs) -> Result<ExitCode> {
    let trace = Trace::open(&args.trace)?;
    let summary = trace.summary()?;
    let m = trace.manifest();
    let duration_ns = match (summary.first_ns, summary.last_ns) {
        (Some(a), Some(b)) => (b - a).max(0),
        _ => 0,
    };
    let nvtx = trace.nvtx()?;
    let domains = domain_counts(&nvtx);
    let events = trace.capture_events()?;
    let capture = capture_lines(&events);
    let mut warnings = trace.warnings();
    // Absurd manifest values are named here as `report` and `view` name them.
    warnings.extend(cufall_analysis::manifest::check(&trace)?.warnings);
    if args.json {
        let devices = devices_json(m, &summary);
        let out = serde_json::json!({
            "path": args.trace.display().to_string(),
            "format": m.format,
            "schema_version": m.schema_version,
            "cufall_version": m.cufall_version,
            "status": m.status,
            "clock": m.clock,
            "hostname": m.hostname,
            "command": m.command,
            "target_command": m.target_command,
            "target_exit_code": m.target_exit_code,
            "start_ns": summary.first_ns,
            "end_ns": summary.last_ns,
            "duration_ns": duration_ns,
            "interval_ns": m.sampling.as_ref().map(|s| s.interval_ns),
            "metrics": m.sampling.as_ref().map(|s| &s.metrics),
            "counters_unavailable": m.counters_unavailable,
            "nvml_interval_ns": m.nvml_interval_ns,
            "devices": devices,
            "nvtx_ranges": summary.nvtx_names.iter().map(|(n, c)| serde_json::json!({"name": n, "count": c})).collect::<Vec<_>>(),
            "nvtx_domains": domains_json(&domains),
            "capture_events": events.len(),
            "capture": capture,
            "kernels": summary.kernels,
            "segments": summary.segments,
            "bytes": summary.bytes,
            "warnings": warnings,
        });
        cufall_sampler::cli::print(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut o = String::new();
    let line = |o: &mut String, k: &str, v: String| o.push_str(&format!("{k:<14}{v}\n"));
    line(&mut o, "trace", args.trace.display().to_string());
    line(
        &mut o,
        "status",
        match m.status {
            RecordingStatus::Complete => "complete".into(),
            RecordingStatus::Recording => "not closed (recorder killed or still running)".into(),
        },
    );
    line(
        &mut o,
        "written by",
        format!(
            "cufall {} (trace format {})",
            m.cufall_version, m.schema_version
        ),
    );
    if !m.hostname.is_empty() {
        line(&mut o, "host", cufall_text::name(&m.hostname).into_owned());
    }
    line(&mut o, "command", shell_join(&m.command));
    if let Some(t) = &m.target_command {
        let code = m
            .target_exit_code
            .map(|c| format!(" (exit code {c})"))
            .unwrap_or_default();
        line(&mut o, "program", format!("{}{code}", shell_join(t)));
    }
    line(&mut o, "duration", fmt_duration(duration_ns));
    match &m.sampling {
        Some(s) => {
            line(
                &mut o,
                "interval",
                format!("{} ({})", fmt_duration(s.interval_ns), s.source),
            );
            o.push_str("metrics\n");
            for metric in &s.metrics {
                let unit = if metric.unit.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", metric.unit)
                };
                o.push_str(&format!("  {}{unit}\n", metric.name));
            }
        }
        None => line(&mut o, "metrics", "none (NVML-only recording)".into()),
    }
    if let Some(why) = &m.counters_unavailable {
        line(&mut o, "counters", format!("unavailable: {why}"));
    }
    if let Some(ns) = m.nvml_interval_ns {
        line(&mut o, "nvml every", fmt_duration(ns));
    }
    o.push_str("devices\n");
    // Every device the manifest lists or the data holds: a device with samples but missing from
    // the manifest is shown, and said to be missing.
    for (id, s) in &summary.devices {
        let about = match m.devices.iter().find(|d| d.id.0 == *id) {
            Some(d) if d.chip.is_empty() => format!(" {}", d.name),
            Some(d) => format!(" {} ({})", d.name, d.chip),
            None => " (not in manifest.json's devices: name unknown)".to_string(),
        };
        o.push_str(&format!(
            "  GPU {id} {about}: {} samples, {} drops ({} lost), {} NVML readings\n",
            s.samples,
            s.drops,
            fmt_duration(s.dropped_ns),
            s.nvml_rows
        ));
    }
    if nvtx.is_empty() {
        line(&mut o, "nvtx ranges", "none captured".into());
    } else {
        o.push_str(&nvtx_text(&nvtx, &domains));
    }
    line(&mut o, "kernels", summary.kernels.to_string());
    o.push_str(&capture_section(&events, &capture));
    line(
        &mut o,
        "size",
        format!(
            "{} in {} segments",
            fmt_bytes(summary.bytes),
            summary.segments
        ),
    );
    for w in &warnings {
        o.push_str(&format!("warning: {w}\n"));
    }
    // Names from the recording reach the terminal only escaped.
    cufall_sampler::cli::print(&cufall_text::escape_lines(&o))?;
    Ok(ExitCode::SUCCESS)
}

/// Each device of the manifest or the data with its counts, for `--json` (`name`, `chip` and
/// the rest null for a device missing from the manifest).
fn devices_json(
    m: &cufall_trace::model::Manifest,
    summary: &cufall_trace::TraceSummary,
) -> Vec<serde_json::Value> {
    summary
        .devices
        .iter()
        .map(|(id, s)| {
            let d = m.devices.iter().find(|d| d.id.0 == *id);
            serde_json::json!({
                "index": id, "in_manifest": d.is_some(),
                "name": d.map(|d| &d.name), "chip": d.map(|d| &d.chip),
                "uuid": d.map(|d| &d.uuid), "pci_bus_id": d.map(|d| &d.pci_bus_id),
                "sm_count": d.map(|d| d.sm_count),
                "samples": s.samples, "drops": s.drops, "dropped_ns": s.dropped_ns,
                "nvml_rows": s.nvml_rows,
            })
        })
        .collect()
}

/// The NVTX domains for `--json`: ranges, the library that writes each, whether its ranges
/// are phases by default.
fn domains_json(domains: &[DomainCount]) -> Vec<serde_json::Value> {
    domains
        .iter()
        .map(|d| {
            serde_json::json!({
                "domain": d.domain, "ranges": d.ranges, "library": d.library,
                "phases_by_default": d.library.is_none(),
            })
        })
        .collect()
}

/// The NVTX domains (program or library, with their counts), then the names of the program's
/// ranges (a library's can number thousands: XLA names each compiler pass).
fn nvtx_text(nvtx: &[cufall_trace::model::NvtxRange], domains: &[DomainCount]) -> String {
    let mut o = String::from("nvtx domains\n");
    let width = domains
        .iter()
        .map(|d| domain_label(&d.domain).chars().count())
        .max()
        .unwrap_or(0);
    for d in domains {
        let (kind, what) = match d.library {
            Some(lib) => (
                "library",
                format!(" ({lib}): not phases unless --phases names the domain"),
            ),
            None => ("program", ": phases".to_string()),
        };
        o.push_str(&format!(
            "  {:<width$}  {kind}  {}{what}\n",
            domain_label(&d.domain),
            ranges_text(d.ranges)
        ));
    }
    let mut names: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in nvtx
        .iter()
        .filter(|r| cufall_analysis::select::library_of(&r.domain).is_none())
    {
        *names.entry(r.name.as_str()).or_default() += 1;
    }
    if !names.is_empty() {
        let mut names: Vec<(&str, u64)> = names.into_iter().collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        o.push_str("nvtx ranges (the program's domains)\n");
        for (name, count) in names {
            let name = cufall_text::pad_right(&cufall_text::name(name), 24);
            o.push_str(&format!("  {name} {count}\n"));
        }
    }
    o
}

/// The capture table's problems, one line per kind; a capture without any says so.
fn capture_section(events: &[cufall_trace::model::CaptureEvent], lines: &[CaptureLine]) -> String {
    if events.is_empty() {
        return String::new();
    }
    if lines.is_empty() {
        return format!("{:<14}no problems recorded\n", "capture");
    }
    capture_text(lines)
        .lines()
        .map(|l| format!("{}\n", l.trim_start()))
        .collect()
}

/// A command line as a shell would take it, cut to a few lines' width (the program chose it).
fn shell_join(args: &[String]) -> String {
    let joined = args
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    cufall_text::fit(&joined, 4 * cufall_text::NAME_WIDTH).into_owned()
}

/// `1.234 s`, `12.5 ms`, `10 µs`, `250 ns`.
pub fn fmt_duration(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    if a >= 1e9 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}
