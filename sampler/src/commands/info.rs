//! `cufall info TRACE`: what a recording holds.

use anyhow::Result;
use cufall_analysis::capture::{CaptureLine, capture_lines};
use cufall_analysis::render::capture_text;
use cufall_analysis::select::{DomainCount, domain_counts, domain_label, ranges_text};
use cufall_trace::Trace;
use cufall_trace::model::{CaptureEventKind, MetricInfo, Nanos, RecordingStatus};
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

/// What a recording holds: `--json` prints it as it is, the text is [`render`]'s.
#[derive(Debug, serde::Serialize)]
pub struct Info {
    pub path: String,
    pub format: String,
    pub schema_version: String,
    pub cufall_version: String,
    pub status: RecordingStatus,
    pub clock: String,
    pub hostname: String,
    pub command: Vec<String>,
    pub target_command: Option<Vec<String>>,
    pub target_exit_code: Option<i32>,
    pub start_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub duration_ns: i64,
    pub interval_ns: Option<i64>,
    pub metrics: Option<Vec<MetricInfo>>,
    /// Where the samples came from (`cupti_pm_sampling`); text only.
    #[serde(skip)]
    pub sampling_source: Option<String>,
    pub counters_unavailable: Option<String>,
    pub nvml_interval_ns: Option<i64>,
    /// Every device the manifest lists or the data holds.
    pub devices: Vec<DeviceRow>,
    pub nvtx_ranges: Vec<NameCount>,
    pub nvtx_domains: Vec<DomainRow>,
    /// The program's (not a library's) range names with their counts, most first; text only.
    #[serde(skip)]
    pub program_ranges: Vec<NameCount>,
    pub capture_events: usize,
    pub capture: Vec<CaptureLine>,
    /// The program's host stacks, when the recording ran a program (absent before trace 1.2).
    pub host_stacks: Option<HostStacksInfo>,
    pub kernels: u64,
    pub segments: u64,
    pub bytes: u64,
    pub warnings: Vec<String>,
}

/// What host-stack sampling gave (`record --host-stacks`), from the manifest's `host_stacks`,
/// the `host_samples` table and the capture table's `host_*` rows.
#[derive(Debug, Default, serde::Serialize)]
pub struct HostStacksInfo {
    /// How it was sampled, or why there are no stacks (`on: every 1ms (1000 Hz), ...`,
    /// `off: ...`).
    pub setting: Option<String>,
    pub samples: u64,
    /// Distinct threads (pid, tid) and processes sampled.
    pub threads: usize,
    pub processes: usize,
    /// Distinct stacks the samples name.
    pub stacks: usize,
    /// Samples asked for and not taken (late rounds, failed reads).
    pub missed: u64,
    /// Processes that run Python and could not be read: `process PID: why`.
    pub unread: Vec<String>,
    /// Processes of the program that run no Python and got no stacks (not read natively
    /// either).
    pub not_python: u64,
    /// Why their native frames could not be read (perf events refused or absent), when
    /// that was tried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_python_why: Option<String>,
}

/// The host-stack account of a trace; none when it has neither the setting nor rows.
fn host_stacks_info(
    trace: &Trace,
    events: &[cufall_trace::model::CaptureEvent],
) -> Result<Option<HostStacksInfo>> {
    use crate::hoststacks::event as ev;
    let setting = cufall_analysis::host::setting_words(trace.manifest());
    // Counted a segment at a time: an hour of samples is too many rows to hold at once; the
    // sets keep only distinct threads and stacks.
    let mut samples = 0u64;
    let mut threads = std::collections::HashSet::<(u32, u32)>::new();
    let mut stacks = std::collections::HashSet::<u64>::new();
    trace.host_samples_by_segment(|rows| {
        samples = samples.saturating_add(rows.len() as u64);
        for s in rows {
            threads.insert((s.pid, s.tid));
            stacks.insert(s.stack_id);
        }
    })?;
    if setting.is_none() && samples == 0 {
        return Ok(None);
    }
    let processes: std::collections::HashSet<u32> = threads.iter().map(|t| t.0).collect();
    let sum = |kind: CaptureEventKind| -> u64 {
        events
            .iter()
            .filter(|e| e.is(kind))
            .map(|e| e.count)
            // The counts are the capture's untrusted bytes: saturate rather than overflow.
            .fold(0u64, u64::saturating_add)
    };
    Ok(Some(HostStacksInfo {
        setting,
        samples,
        threads: threads.len(),
        processes: processes.len(),
        stacks: stacks.len(),
        missed: sum(CaptureEventKind::HostSamplesMissed),
        unread: events
            .iter()
            .filter(|e| e.is(CaptureEventKind::HostStacksUnavailable))
            .map(|e| format!("process {}: {}", e.pid, e.detail))
            .collect(),
        not_python: sum(CaptureEventKind::HostStacksNotPython),
        not_python_why: events
            .iter()
            .find(|e| {
                e.is(CaptureEventKind::HostStacksNotPython) && e.detail.contains(ev::NATIVE_REFUSED)
            })
            .map(|e| e.detail.clone()),
    }))
}

/// `info`'s host-stack lines.
fn host_stacks_text(h: &HostStacksInfo) -> String {
    let mut o = String::new();
    let setting = h.setting.as_deref().unwrap_or("(setting not recorded)");
    if h.samples > 0 {
        let asked = h.samples.saturating_add(h.missed);
        o.push_str(&format!(
            "{:<14}{} samples of {} thread(s) in {} process(es), {} distinct stacks; {} missed ({:.2} % of {asked}); {setting}\n",
            "host stacks",
            h.samples,
            h.threads,
            h.processes,
            h.stacks,
            h.missed,
            100.0 * h.missed as f64 / asked.max(1) as f64
        ));
    } else {
        o.push_str(&format!("{:<14}none: {setting}\n", "host stacks"));
    }
    for u in &h.unread {
        // The setting already says it when it is why there are none.
        let (_, detail) = u.split_once(": ").unwrap_or(("", u));
        if !setting.contains(detail) {
            o.push_str(&format!("  not read: {u}\n"));
        }
    }
    match &h.not_python_why {
        Some(why) if h.not_python > 0 => o.push_str(&format!("  {why}\n")),
        _ if h.not_python > 0 => o.push_str(&format!(
            "  {} process(es) of the program run no Python (not sampled)\n",
            h.not_python
        )),
        _ => {}
    }
    o
}

/// One GPU of a recording: the manifest's facts (absent for a device the manifest leaves out)
/// and the data's counts.
#[derive(Debug, serde::Serialize)]
pub struct DeviceRow {
    pub index: u32,
    pub in_manifest: bool,
    pub name: Option<String>,
    pub chip: Option<String>,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub sm_count: Option<Option<u32>>,
    pub samples: u64,
    pub drops: u64,
    pub dropped_ns: i64,
    /// The part of `dropped_ns` paused on request (`cufall control pause`): not lost.
    pub paused_ns: i64,
    pub nvml_rows: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct NameCount {
    pub name: String,
    pub count: u64,
}

/// An NVTX domain: its ranges, the library that writes it, whether its ranges are phases by
/// default.
#[derive(Debug, serde::Serialize)]
pub struct DomainRow {
    pub domain: String,
    pub ranges: u64,
    pub library: Option<&'static str>,
    pub phases_by_default: bool,
}

impl Info {
    /// Reads what `info` shows of the trace at `path`.
    pub fn gather(path: &std::path::Path) -> Result<Info> {
        let trace = Trace::open(path)?;
        let summary = trace.summary()?;
        let m = trace.manifest().clone();
        let duration_ns = match (summary.first_ns, summary.last_ns) {
            (Some(a), Some(b)) => (b - a).max(0),
            _ => 0,
        };
        let nvtx = trace.nvtx()?;
        let domains = domain_counts(&nvtx);
        let events = trace.capture_events()?;
        let host_stacks = host_stacks_info(&trace, &events)?;
        // Host-stack rows are told in their own lines, not among capture's problems.
        let events: Vec<_> = events
            .into_iter()
            .filter(|e| !e.kind().is_some_and(CaptureEventKind::is_host_stacks))
            .collect();
        let mut warnings = trace.warnings();
        // Absurd manifest values are named here as `report` and `view` name them.
        warnings.extend(cufall_analysis::manifest::check(&trace)?.warnings);
        Ok(Info {
            path: path.display().to_string(),
            devices: device_rows(&m, &summary),
            nvtx_ranges: summary
                .nvtx_names
                .iter()
                .map(|(n, c)| NameCount {
                    name: n.clone(),
                    count: *c,
                })
                .collect(),
            nvtx_domains: domains.iter().map(domain_row).collect(),
            program_ranges: program_ranges(&nvtx),
            capture_events: events.len(),
            capture: capture_lines(&events),
            host_stacks,
            kernels: summary.kernels,
            segments: summary.segments,
            bytes: summary.bytes,
            start_ns: summary.first_ns,
            end_ns: summary.last_ns,
            duration_ns,
            interval_ns: m.sampling.as_ref().map(|s| s.interval_ns),
            sampling_source: m.sampling.as_ref().map(|s| s.source.clone()),
            metrics: m.sampling.map(|s| s.metrics),
            warnings,
            format: m.format,
            schema_version: m.schema_version,
            cufall_version: m.cufall_version,
            status: m.status,
            clock: m.clock,
            hostname: m.hostname,
            command: m.command,
            target_command: m.target_command,
            target_exit_code: m.target_exit_code,
            counters_unavailable: m.counters_unavailable,
            nvml_interval_ns: m.nvml_interval_ns,
        })
    }
}

pub fn run(args: &InfoArgs) -> Result<ExitCode> {
    let info = Info::gather(&args.trace)?;
    if args.json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&info)?))?;
    } else {
        // Names from the recording reach the terminal only escaped.
        super::print(&cufall_text::escape_lines(&render(&info)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A duration as every text output prints one (`4.56 ms`).
fn fmt_duration_ns(ns: i64) -> String {
    Nanos(ns).to_string()
}

/// `info`'s text.
pub fn render(i: &Info) -> String {
    let mut o = String::new();
    let line = |o: &mut String, k: &str, v: String| o.push_str(&format!("{k:<14}{v}\n"));
    line(&mut o, "trace", i.path.clone());
    line(
        &mut o,
        "status",
        match i.status {
            RecordingStatus::Complete => "complete".into(),
            RecordingStatus::Recording => "not closed (recorder killed or still running)".into(),
        },
    );
    line(
        &mut o,
        "written by",
        format!(
            "cufall {} (trace format {})",
            i.cufall_version, i.schema_version
        ),
    );
    if !i.hostname.is_empty() {
        line(&mut o, "host", cufall_text::name(&i.hostname).into_owned());
    }
    line(&mut o, "command", shell_join(&i.command));
    if let Some(t) = &i.target_command {
        let code = i
            .target_exit_code
            .map(|c| format!(" (exit code {c})"))
            .unwrap_or_default();
        line(&mut o, "program", format!("{}{code}", shell_join(t)));
    }
    line(&mut o, "duration", fmt_duration_ns(i.duration_ns));
    match (&i.metrics, i.interval_ns) {
        (Some(metrics), Some(interval_ns)) => {
            line(
                &mut o,
                "interval",
                format!(
                    "{} ({})",
                    fmt_duration_ns(interval_ns),
                    i.sampling_source.as_deref().unwrap_or_default()
                ),
            );
            o.push_str("metrics\n");
            for metric in metrics {
                let unit = if metric.unit.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", metric.unit)
                };
                o.push_str(&format!("  {}{unit}\n", metric.name));
            }
        }
        _ => line(&mut o, "metrics", "none (NVML-only recording)".into()),
    }
    if let Some(why) = &i.counters_unavailable {
        line(&mut o, "counters", format!("unavailable: {why}"));
    }
    if let Some(ns) = i.nvml_interval_ns {
        line(&mut o, "nvml every", fmt_duration_ns(ns));
    }
    o.push_str(&devices_text(&i.devices));
    if i.nvtx_domains.is_empty() {
        line(&mut o, "nvtx ranges", "none captured".into());
    } else {
        o.push_str(&nvtx_text(&i.nvtx_domains, &i.program_ranges));
    }
    line(&mut o, "kernels", i.kernels.to_string());
    o.push_str(&capture_section(i.capture_events, &i.capture));
    if let Some(h) = &i.host_stacks {
        o.push_str(&host_stacks_text(h));
    }
    line(
        &mut o,
        "size",
        format!("{} in {} segments", fmt_bytes(i.bytes), i.segments),
    );
    for w in &i.warnings {
        o.push_str(&format!("warning: {w}\n"));
    }
    o
}

/// Every device the manifest lists or the data holds: a device with samples but missing from
/// the manifest is shown, and said to be missing.
fn devices_text(devices: &[DeviceRow]) -> String {
    let mut o = String::from("devices\n");
    for d in devices {
        let about = match (&d.name, &d.chip) {
            (Some(name), Some(chip)) if !chip.is_empty() => format!(" {name} ({chip})"),
            (Some(name), _) => format!(" {name}"),
            (None, _) => " (not in manifest.json's devices: name unknown)".to_string(),
        };
        let paused = if d.paused_ns > 0 {
            format!(", {} paused", fmt_duration_ns(d.paused_ns))
        } else {
            String::new()
        };
        o.push_str(&format!(
            "  GPU {} {about}: {} samples, {} drops ({} lost{paused}), {} NVML readings\n",
            d.index,
            d.samples,
            d.drops,
            fmt_duration_ns(d.dropped_ns - d.paused_ns),
            d.nvml_rows
        ));
    }
    o
}

/// Each device of the manifest or the data with its counts (`name`, `chip` and the rest
/// absent for a device missing from the manifest).
fn device_rows(
    m: &cufall_trace::model::Manifest,
    summary: &cufall_trace::TraceSummary,
) -> Vec<DeviceRow> {
    // The manifest's devices in its order, then any the data holds that it leaves out.
    let ids = m.devices.iter().map(|d| d.id).chain(
        summary
            .devices
            .keys()
            .copied()
            .filter(|id| !m.devices.iter().any(|d| d.id == *id)),
    );
    ids.map(|id| {
        let d = m.devices.iter().find(|d| d.id == id);
        let s = summary.devices.get(&id).cloned().unwrap_or_default();
        DeviceRow {
            index: id.0,
            in_manifest: d.is_some(),
            name: d.map(|d| d.name.clone()),
            chip: d.map(|d| d.chip.clone()),
            uuid: d.map(|d| d.uuid.clone()),
            pci_bus_id: d.map(|d| d.pci_bus_id.clone()),
            sm_count: d.map(|d| d.sm_count),
            samples: s.samples,
            drops: s.drops,
            dropped_ns: s.dropped_ns.get(),
            paused_ns: s.paused_ns.get(),
            nvml_rows: s.nvml_rows,
        }
    })
    .collect()
}

fn domain_row(d: &DomainCount) -> DomainRow {
    DomainRow {
        domain: d.domain.clone(),
        ranges: d.ranges,
        library: d.library,
        phases_by_default: d.library.is_none(),
    }
}

/// The names of the program's ranges (a library's can number thousands: XLA names each
/// compiler pass) with their counts, most first.
fn program_ranges(nvtx: &[cufall_trace::model::NvtxRange]) -> Vec<NameCount> {
    let mut names: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in nvtx
        .iter()
        .filter(|r| cufall_analysis::select::library_of(&r.domain).is_none())
    {
        *names.entry(r.name.as_str()).or_default() += 1;
    }
    let mut names: Vec<NameCount> = names
        .into_iter()
        .map(|(name, count)| NameCount {
            name: name.to_string(),
            count,
        })
        .collect();
    names.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    names
}

/// The NVTX domains (program or library, with their counts), then the names of the program's
/// ranges.
fn nvtx_text(domains: &[DomainRow], program: &[NameCount]) -> String {
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
    if !program.is_empty() {
        o.push_str("nvtx ranges (the program's domains)\n");
        for n in program {
            let name = cufall_text::pad_right(&cufall_text::name(&n.name), 24);
            o.push_str(&format!("  {name} {}\n", n.count));
        }
    }
    o
}

/// The capture table's problems, one line per kind; a capture without any says so.
fn capture_section(events: usize, lines: &[CaptureLine]) -> String {
    if events == 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_whose_native_frames_were_refused_say_why() {
        let mut h = HostStacksInfo {
            setting: Some("on: every 1ms (1000 Hz), ...".into()),
            samples: 10,
            threads: 1,
            processes: 1,
            stacks: 1,
            not_python: 2,
            ..HostStacksInfo::default()
        };
        assert!(
            host_stacks_text(&h)
                .contains("  2 process(es) of the program run no Python (not sampled)")
        );
        h.not_python_why = Some(
            "2 process(es) run no Python, and their native frames could not be read (perf_event_open was refused); not sampled: sh".into(),
        );
        let text = host_stacks_text(&h);
        assert!(text.contains("perf_event_open was refused"), "{text}");
        assert!(!text.contains("(not sampled)\n"), "{text}");
    }
}
