//! Preparing a session: the devices selected and checked, the metrics validated on each chip,
//! the interval chosen ([`crate::cost::CostModel::choose_interval`]), every device armed on its
//! own thread and waiting for the go, NVML opened ([`prepare`] → [`Prepared`]).

use super::config::{CounterPolicy, SessionConfig};
use super::error::SessionError;
use super::estimate::Cost;
use crate::nvml::NvmlSource;
use crate::pipeline::{self, ArmError, DeviceCounters, DeviceSetup, DeviceThread, Ready, Rearm};
use crate::sink::SinkMsg;
use crate::sizing;
use cufall_cupti::metric::{Catalogue, MetricName};
use cufall_cupti::{Cupti, CuptiError, HostKind, ProfilerHost};
use cufall_live::FeedInfo;
use cufall_trace::model::{DeviceId, DeviceInfo, HeatmapSpec, Manifest, MetricInfo, SamplingInfo};
use cufall_trace::model::{Nanos, nanos};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

/// The interval configured while a chip's bytes per sample are measured (any CUPTI accepts).
const PROBE_INTERVAL_NS: i64 = 100_000;
/// The unit of a full metric name, from its base metric's dimension unit and its suffix.
pub fn unit_for(dim_unit: &str, suffix: &str) -> String {
    if suffix.contains("pct") {
        "%".into()
    } else if suffix.contains("ratio") {
        String::new()
    } else if suffix.ends_with("per_second") {
        format!("{dim_unit}/second")
    } else if suffix.contains("per_cycle") {
        format!("{dim_unit}/cycle")
    } else {
        dim_unit.to_string()
    }
}

/// Everything armed and checked, not yet started.
pub struct Prepared {
    pub devices: Vec<DeviceInfo>,
    pub metrics: Vec<MetricInfo>,
    pub interval_ns: i64,
    /// Why there are no counters, when there are none.
    pub counters_unavailable: Option<String>,
    /// Why there is no NVML data, when there is none.
    pub nvml_unavailable: Option<String>,
    pub nvml_interval: Option<Duration>,
    /// Facts for the manifest's `extra` (CUPTI library, driver, image sizes).
    pub extra: BTreeMap<String, String>,
    /// What sampling the counters will cost, when they are sampled.
    pub cost: Option<Cost>,
    /// Percentages of peak of bare counters (`cufall_trace::model::peak`) that the GPU cannot
    /// evaluate, each with CUPTI's reason: not collected; their counters are shown on a relative
    /// scale ([`crate::metric_spec::Selection::relative`]).
    pub peaks_refused: Vec<(String, String)>,
    /// Metrics a chip could not evaluate that were recorded by their stand-in instead:
    /// (asked, recorded) ([`SessionConfig::fallbacks`]).
    pub metrics_substituted: Vec<(String, String)>,
    pub(super) threads: Vec<ArmedDevice>,
    pub(super) nvml: Option<NvmlSource>,
    pub(super) tx: Sender<SinkMsg>,
    pub(super) rx: Receiver<SinkMsg>,
    /// The trace keeps capture windows only ([`Prepared::limit_to_windows`]).
    pub(super) windowed: bool,
    /// Only the first window: the trace closes when it ends (`--capture-range-end stop`).
    pub(super) first_window_only: bool,
}

/// Validates the configuration against the machine and arms PM sampling on every device.
pub fn prepare(cfg: &SessionConfig) -> Result<Prepared, SessionError> {
    cfg.validate()?;
    let (selected, mut devices) = select_devices(cfg.devices.as_deref())?;
    let (tx, rx) = mpsc::channel();
    let mut extra = BTreeMap::new();
    let mut counters_unavailable = None;
    let mut metrics = Vec::new();
    let mut threads = Vec::new();
    let mut cost: Option<Cost> = None;
    let mut peaks_refused = Vec::new();
    let mut metrics_substituted = Vec::new();
    match cfg.counters {
        CounterPolicy::Off => {
            counters_unavailable =
                Some("NVML-only recording was asked for (--nvml-only)".to_string());
        }
        _ if cfg.metrics.is_empty() => {
            counters_unavailable = Some("no metric was asked for".to_string());
        }
        policy => match arm_counters(cfg, &selected, &mut devices, &tx, &mut extra) {
            Ok((m, t, c, changes)) => {
                metrics = m;
                threads = t;
                cost = Some(c);
                peaks_refused = changes.refused;
                metrics_substituted = changes.substituted;
            }
            Err(e) if policy == CounterPolicy::BestEffort && e.counters_out_of_reach() => {
                // When it is a cufall of this user's that holds them: which, and how to pause it.
                let who = matches!(&e, SessionError::Cupti(CuptiError::CountersBusy { .. }))
                    .then(|| crate::control_file::held_by(&crate::argv0::command_name()))
                    .flatten()
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default();
                counters_unavailable = Some(format!("{e}{who}"));
            }
            Err(e) => return Err(e),
        },
    }
    let (nvml, nvml_unavailable) = open_nvml(cfg.nvml_interval, &devices, &mut extra);
    if threads.is_empty() && nvml.is_none() {
        return Err(SessionError::NothingToRecord {
            counters: counters_unavailable.unwrap_or_else(|| "no GPU counters".into()),
            nvml: nvml_unavailable.unwrap_or_else(|| "no NVML".into()),
        });
    }
    Ok(Prepared {
        devices,
        metrics,
        interval_ns: cost.as_ref().map_or(
            cfg.interval_ns()
                .unwrap_or(crate::cost::NO_COUNTERS_INTERVAL_NS),
            |c| c.interval_ns.get(),
        ),
        counters_unavailable,
        nvml_unavailable,
        nvml_interval: cfg.nvml_interval.filter(|_| nvml.is_some()),
        extra,
        cost,
        peaks_refused,
        metrics_substituted,
        threads,
        nvml,
        tx,
        rx,
        windowed: false,
        first_window_only: false,
    })
}

/// The CUDA ordinals to sample (`None`: every GPU) checked against the driver's devices, and
/// each one's facts for the manifest (its chip is filled in when it is armed).
fn select_devices(asked: Option<&[usize]>) -> Result<(Vec<usize>, Vec<DeviceInfo>), SessionError> {
    let facts = cufall_cupti::driver_devices()?;
    if facts.is_empty() {
        return Err(CuptiError::NoDevice.into());
    }
    let selected: Vec<usize> = match asked {
        None => (0..facts.len()).collect(),
        Some(v) => {
            if let Some(&i) = v.iter().find(|&&i| i >= facts.len()) {
                return Err(CuptiError::DeviceOutOfRange {
                    index: i,
                    count: facts.len(),
                }
                .into());
            }
            v.to_vec()
        }
    };
    if selected.is_empty() {
        return Err(SessionError::NoDeviceSelected);
    }
    let devices = selected
        .iter()
        .map(|&i| {
            let f = &facts[i];
            DeviceInfo {
                id: DeviceId(u32::try_from(i).unwrap_or(u32::MAX)),
                name: f.name.clone(),
                chip: String::new(),
                uuid: f.uuid.clone(),
                pci_bus_id: f.pci_bus_id.clone(),
                sm_count: f.sm_count,
                memory_total_bytes: f.memory_total_bytes,
            }
        })
        .collect();
    Ok((selected, devices))
}

/// Opens NVML for `devices` unless polling is off; the reason when it cannot be had.
fn open_nvml(
    interval: Option<Duration>,
    devices: &[DeviceInfo],
    extra: &mut BTreeMap<String, String>,
) -> (Option<NvmlSource>, Option<String>) {
    if interval.is_none() {
        return (None, Some("NVML polling was turned off".to_string()));
    }
    let ids: Vec<(DeviceId, String)> = devices.iter().map(|d| (d.id, d.uuid.clone())).collect();
    match NvmlSource::open(&ids) {
        Ok(n) => {
            if let Some(v) = &n.driver_version {
                extra.insert("driver_version".into(), v.clone());
            }
            (Some(n), None)
        }
        Err(e) => (None, Some(e.to_string())),
    }
}

/// A device armed and waiting for the go: its thread, the flag that stops it, its counters,
/// and what arms it again after a pause.
pub(super) struct ArmedDevice {
    pub(super) id: DeviceId,
    pub(super) thread: DeviceThread,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) counters: Arc<DeviceCounters>,
    pub(super) rearm: Rearm,
}

type Armed = (Vec<MetricInfo>, Vec<ArmedDevice>, Cost, MetricChanges);

/// What arming changed of the metrics asked for.
#[derive(Debug, Default)]
struct MetricChanges {
    /// Peak columns cufall added that a chip cannot evaluate, each with CUPTI's reason.
    refused: Vec<(String, String)>,
    /// (asked, recorded): metrics recorded by their stand-in.
    substituted: Vec<(String, String)>,
}

/// Counter-data bytes one sample of `metrics` takes on device `index`, asked of CUPTI the way a
/// device thread asks when it arms (enable, configure, size the image), then disabled again: the
/// interval is chosen from it before any device is armed. This runs on the caller's thread, so
/// it never binds a CUDA context there: where PM sampling cannot be enabled without one, the
/// error says so and the caller falls back (the device threads then report the bytes).
fn counter_bytes_per_sample(
    cupti: &Cupti,
    index: usize,
    config: &[u8],
    metrics: &[String],
    interval_ns: i64,
) -> Result<u64, CuptiError> {
    let mut sampler = cufall_cupti::PmSampler::enable(cupti, index)?;
    pipeline::device::bytes_per_sample(&mut sampler, config, metrics, Nanos(interval_ns))
}

/// Waits for `count` device threads to report ready: the largest image, and the samples an
/// image holds; the first failure otherwise.
fn wait_ready(
    ready: &Receiver<(DeviceId, Result<Ready, ArmError>)>,
    count: usize,
) -> Result<(usize, Option<u32>, Option<u64>), ArmError> {
    let mut first_err = None;
    let mut image_bytes = 0usize;
    let mut spi = None;
    let mut bytes: Option<u64> = None;
    for _ in 0..count {
        match ready.recv_timeout(Duration::from_secs(120)) {
            Ok((_, Ok(r))) => {
                image_bytes = image_bytes.max(r.image_bytes);
                spi = Some(r.samples_per_image);
                bytes = bytes.max(Some(r.bytes_per_sample));
            }
            Ok((_, Err(e))) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(ArmError::Cupti(CuptiError::InvalidArgument(
                    "a device thread did not get ready within 120 s".into(),
                )));
                break;
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((image_bytes, spi, bytes)),
    }
}

/// What arming needs of one chip: its configuration image and the bytes a sample takes.
struct ChipSetup {
    config: Vec<u8>,
    /// `Err`: why CUPTI could not say before arming.
    bytes_per_sample: Result<u64, CuptiError>,
}

/// A device to arm: its slot among the selected, CUDA index, chip and counter availability.
type DeviceToArm = (usize, usize, String, Vec<u8>);
/// Per chip what arming needs, the devices to arm, and the metrics' descriptions.
type ChipSetups = (
    HashMap<String, ChipSetup>,
    Vec<DeviceToArm>,
    Vec<MetricInfo>,
    MetricChanges,
);

/// Validates the metrics on each chip of the selected devices and learns what arming needs of
/// each chip (configuration image, bytes per sample); names each device's chip. A bare
/// counter's peak column that a chip cannot evaluate is taken out of `cfg.metrics` and
/// returned with the reason (its metric is then shown on a relative scale), never an error.
fn chip_setups(
    cupti: &Cupti,
    cfg: &mut SessionConfig,
    selected: &[usize],
    devices: &mut [DeviceInfo],
) -> Result<ChipSetups, SessionError> {
    let mut per_chip: HashMap<String, ChipSetup> = HashMap::new();
    let mut infos: Vec<MetricInfo> = Vec::new();
    let mut chips = Vec::new();
    let mut changes = MetricChanges::default();
    for (slot, &index) in selected.iter().enumerate() {
        let chip = cupti.chip_name(index)?;
        let availability = cupti.pm_counter_availability(index)?;
        if !per_chip.contains_key(&chip) {
            let host = ProfilerHost::new(
                cupti,
                HostKind::PmSampling,
                &chip,
                Some(availability.clone()),
            )?;
            let range = ProfilerHost::new(cupti, HostKind::RangeProfiler, &chip, None).ok();
            let catalogue = Catalogue::read(&host, range.as_ref())?;
            let mut kept = Vec::with_capacity(cfg.metrics.len());
            let mut substituted = false;
            for m in &cfg.metrics {
                let Err(e) = catalogue.validate(&host, m) else {
                    kept.push(m.clone());
                    continue;
                };
                let stand_in = cfg.fallbacks.iter().find(|(a, _)| a == m).map(|f| &f.1);
                match stand_in {
                    Some(f) if !kept.contains(f) && catalogue.validate(&host, f).is_ok() => {
                        kept.push(f.clone());
                        changes.substituted.push((m.clone(), f.clone()));
                        substituted = true;
                    }
                    _ if cfg.optional_metrics.contains(m) => {
                        changes.refused.push((m.clone(), e.to_string()));
                    }
                    _ => return Err(e.into()),
                }
            }
            if substituted && !per_chip.is_empty() {
                // An earlier chip was configured with the metric this one lacks: every chip
                // records the stand-in, so the trace has one set of columns.
                cfg.metrics = kept;
                let again = chip_setups(cupti, cfg, selected, devices)?;
                let mut merged = again.3;
                merged.refused.extend(changes.refused);
                merged.substituted.extend(changes.substituted);
                return Ok((again.0, again.1, again.2, merged));
            }
            if kept != cfg.metrics {
                // Configured before any chip was armed: a later chip sees the reduced list.
                if !infos.is_empty() {
                    infos.retain(|i| kept.contains(&i.name));
                }
                cfg.metrics = kept;
            }
            if infos.is_empty() {
                for m in &cfg.metrics {
                    let n = MetricName::parse(m);
                    let props = host.properties(&n.base).ok();
                    infos.push(MetricInfo {
                        name: m.clone(),
                        unit: unit_for(
                            props.as_ref().map_or("", |p| p.dim_unit.as_str()),
                            &n.suffix,
                        ),
                        description: props.map(|p| p.description).unwrap_or_default(),
                    });
                }
            }
            let config = host.config_image(cupti, &cfg.metrics)?;
            let bytes_per_sample = counter_bytes_per_sample(
                cupti,
                index,
                &config,
                &cfg.metrics,
                cfg.interval_ns().unwrap_or(PROBE_INTERVAL_NS),
            );
            per_chip.insert(
                chip.clone(),
                ChipSetup {
                    config,
                    bytes_per_sample,
                },
            );
        }
        devices[slot].chip = chip.clone();
        chips.push((slot, index, chip, availability));
    }
    Ok((per_chip, chips, infos, changes))
}

/// Starts arming one device on its own thread; it reports on `ready` and waits for the go.
fn spawn_armed(
    id: DeviceId,
    setup: DeviceSetup,
    cupti: &Cupti,
    tx: &Sender<SinkMsg>,
    ready: Sender<(DeviceId, Result<Ready, ArmError>)>,
) -> Result<ArmedDevice, SessionError> {
    let counters = Arc::new(DeviceCounters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let rearm = Rearm {
        setup: setup.clone(),
        cupti: cupti.clone(),
        out: tx.clone(),
        counters: Arc::clone(&counters),
    };
    let thread = pipeline::spawn_device(
        setup,
        cupti.clone(),
        tx.clone(),
        Arc::clone(&stop),
        Arc::clone(&counters),
        ready,
    )
    .map_err(|e| CuptiError::InvalidArgument(format!("cannot start a device thread: {e}")))?;
    Ok(ArmedDevice {
        id,
        thread,
        stop,
        counters,
        rearm,
    })
}

fn arm_counters(
    cfg: &SessionConfig,
    selected: &[usize],
    devices: &mut [DeviceInfo],
    tx: &Sender<SinkMsg>,
    extra: &mut BTreeMap<String, String>,
) -> Result<Armed, SessionError> {
    let cupti = Cupti::init()?;
    extra.insert("cupti_library".into(), cupti.cupti_source.clone());
    let mut cfg = cfg.clone();
    let (per_chip, chips, infos, changes) = chip_setups(&cupti, &mut cfg, selected, devices)?;
    let cfg = &cfg;
    // One interval for every GPU (the trace has one): the one the costliest chip allows.
    let timing = cfg.image_timing.unwrap_or_default();
    let model = crate::cost::CostModel::H200
        .with_decode_period(sizing::decode_period(timing))
        .for_metrics(&cfg.metrics);
    let n = cfg.metrics.len();
    let asked: Result<Vec<u64>, &CuptiError> = per_chip
        .values()
        .map(|c| c.bytes_per_sample.as_ref().copied())
        .collect();
    let asked = asked.map(|v| v.into_iter().max().unwrap_or(1));
    let (interval, choice) =
        model.choose_interval(cfg.interval_ns().map(Nanos), asked, n, cfg.core_budget);
    let interval_ns = interval.get();
    // Until the devices report their own, the bytes asked before arming (or the pair's).
    let bytes = asked.unwrap_or(crate::cost::FALLBACK_BYTES_PER_SAMPLE);
    let prediction = model.predict(bytes, n, interval);
    let hw_buffer_bytes = cfg
        .hw_buffer_bytes
        .unwrap_or_else(|| crate::cost::hw_buffer_bytes(bytes, interval));
    let plan = sizing::plan_with(interval_ns, timing);
    let eval_threads = cfg
        .eval_threads
        .unwrap_or_else(|| sizing::eval_threads(&prediction))
        .max(1);
    extra.insert("eval_threads".into(), eval_threads.to_string());
    extra.insert(
        "samples_per_image".into(),
        plan.samples_per_image.to_string(),
    );
    extra.insert("counter_bytes_per_sample".into(), bytes.to_string());
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut threads = Vec::new();
    for (slot, index, chip, availability) in chips {
        let config_image = per_chip
            .get(&chip)
            .map(|c| c.config.clone())
            .unwrap_or_default();
        let setup = DeviceSetup {
            device: devices[slot].id,
            index,
            chip,
            availability,
            metrics: cfg.metrics.clone(),
            config_image,
            interval_ns: interval,
            hw_buffer_bytes,
            eval_threads,
            plan,
            devices_sharing_memory: selected.len(),
        };
        threads.push(spawn_armed(
            devices[slot].id,
            setup,
            &cupti,
            tx,
            ready_tx.clone(),
        )?);
    }
    drop(ready_tx);
    let (image_bytes, spi, measured) = match wait_ready(&ready_rx, threads.len()) {
        Ok((b, s, m)) => (b, s.unwrap_or(plan.samples_per_image), m),
        Err(e) => {
            // Dropping the threads' `go` senders tells them to disarm and exit.
            for d in threads {
                drop(d.thread.go);
                let _ = d.thread.handle.join();
            }
            return Err(e.into());
        }
    };
    extra.insert("samples_per_image".into(), spi.to_string());
    extra.insert("counter_data_image_bytes".into(), image_bytes.to_string());
    // The devices' own layout is the truth the model is stated with.
    let bytes = measured.unwrap_or(bytes);
    extra.insert("counter_bytes_per_sample".into(), bytes.to_string());
    let cost = Cost {
        devices: selected.len(),
        interval_ns: interval,
        metrics: n,
        image_bytes: image_bytes as u64,
        samples_per_image: spi,
        initial_images: plan.initial_images,
        max_images: plan.max_images,
        hw_buffer_bytes: hw_buffer_bytes as u64,
        eval_threads,
        prediction: model.predict(bytes, n, interval),
        finest_lossless_ns: model.finest_lossless_ns(bytes, n),
        choice,
    };
    Ok((infos, threads, cost, changes))
}

impl Prepared {
    /// The heatmaps to show of `selection` on the armed GPUs (none without counters), with a
    /// line for each bare counter whose peak the GPU cannot give (shown on a relative scale).
    pub fn heatmaps_for(
        &self,
        selection: &crate::metric_spec::Selection,
    ) -> (Vec<HeatmapSpec>, Vec<String>) {
        if !self.has_counters() {
            return (Vec::new(), Vec::new());
        }
        let mut s = selection.clone();
        for (asked, recorded) in &self.metrics_substituted {
            s.substitute(asked, recorded);
        }
        let lines = self
            .peaks_refused
            .iter()
            .filter_map(|(column, why)| s.relative(column, why))
            .collect();
        (s.heatmaps, lines)
    }

    /// What a live view needs before the first sample.
    pub fn feed_info(&self, heatmaps: Vec<HeatmapSpec>) -> FeedInfo {
        FeedInfo {
            devices: self.devices.clone(),
            metrics: self.metrics.clone(),
            heatmaps,
            interval_ns: Nanos(self.interval_ns),
            nvml_interval_ns: Nanos(self.nvml_interval.map_or(0, nanos)),
            counters_unavailable: self.counters_unavailable.clone(),
        }
    }

    /// Fills the recording facts of a manifest (devices, sampling, NVML, reasons, extras).
    pub fn fill_manifest(&self, m: &mut Manifest) {
        m.devices = self.devices.clone();
        m.sampling = (!self.threads.is_empty()).then(|| SamplingInfo {
            interval_ns: self.interval_ns,
            metrics: self.metrics.clone(),
            source: "cupti_pm_sampling".into(),
        });
        m.counters_unavailable = self.counters_unavailable.clone();
        m.nvml_interval_ns = self.nvml_interval.map(nanos);
        for (k, v) in &self.extra {
            m.extra.insert(k.clone(), v.clone());
        }
        if let Some(n) = &self.nvml_unavailable {
            m.extra.insert("nvml_unavailable".into(), n.clone());
        }
    }

    pub fn has_counters(&self) -> bool {
        !self.threads.is_empty()
    }

    /// Disarms every device without starting.
    pub fn abort(self) {
        for d in self.threads {
            drop(d.thread.go);
            let _ = d.thread.handle.join();
        }
    }

    /// Keeps only what falls in capture windows in the trace (opened by the program, a delay or
    /// a signal, through [`SessionHandle::window_edge`]); the live view still sees everything.
    /// With `first_only`, windows that open after the first one closed are not kept.
    pub fn limit_to_windows(&mut self, first_only: bool) {
        self.windowed = true;
        self.first_window_only = first_only;
    }

    /// Listens for the records of a program about to be started under capture; they go to the
    /// same sink as the samples. Call before [`Prepared::start`].
    pub fn start_capture(
        &self,
        kinds: cufall_capture::Kinds,
        range: Option<cufall_capture::RangeTrigger>,
        library: std::path::PathBuf,
    ) -> Result<crate::recorder::Recorder, crate::recorder::CaptureError> {
        crate::recorder::Recorder::start(kinds, range, library, &self.devices, self.tx.clone())
    }

    /// A sender into the sink for a producer that starts after [`Prepared::start`] (host
    /// stacks, once the program runs). The sink ends only when every sender is gone: drop it
    /// before [`SessionHandle::stop`].
    pub fn sink_sender(&self) -> Sender<SinkMsg> {
        self.tx.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_suffix() {
        assert_eq!(unit_for("cycle", ".avg.pct_of_peak_sustained_elapsed"), "%");
        assert_eq!(unit_for("byte", ".sum.per_second"), "byte/second");
        assert_eq!(unit_for("cycle", ".max"), "cycle");
        assert_eq!(unit_for("inst", ".avg.per_cycle_active"), "inst/cycle");
    }
}
