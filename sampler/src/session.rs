//! A sampling session: the reusable API behind `cufall record` and the live view.
//!
//! ```no_run
//! # fn demo() -> Result<(), cufall_sampler::session::SessionError> {
//! use cufall_sampler::session::{prepare, SessionConfig};
//! let prepared = prepare(&SessionConfig::default())?; // validates everything, arms the GPUs
//! let (tx, _rx) = cufall_live::feed(prepared.feed_info(Vec::new()), 256);
//! let handle = prepared.start(Some(tx), None)?;        // samples flow to the live view
//! // ... later
//! let outcome = handle.stop();                          // drains, closes, sums up
//! # Ok(()) }
//! ```
//!
//! [`prepare`] does everything that can fail because of the user or the machine (driver, CUPTI,
//! privileges, metric names, pass count, interval, NVML) before anything is written, so a caller
//! can create the trace only once all of that passed. [`Prepared::start`] then only starts.

use crate::nvml::NvmlSource;
use crate::pipeline::{
    self, ArmError, DeviceCounters, DeviceSetup, DeviceThread, Ready, Rearm, pause,
};
use crate::sink::{DropCount, DropTally, SinkMsg, SinkShared};
use crate::sizing;
use cufall_cupti::metric::{Catalogue, MetricName};
use cufall_cupti::{Cupti, CuptiError, HostKind, ProfilerHost};
use cufall_live::{FeedInfo, LiveSender};
use cufall_trace::TraceWriter;
use cufall_trace::model::nanos;
use cufall_trace::model::{DeviceId, DeviceInfo, HeatmapSpec, Manifest, MetricInfo, SamplingInfo};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to do when GPU counters are out of reach (no libcupti, no privileges, another profiler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterPolicy {
    /// Fail with the reason and the fix.
    Required,
    /// Record NVML only and say why in `counters_unavailable`.
    BestEffort,
    /// Do not touch the counters at all.
    Off,
}

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// CUDA ordinals to sample; `None` = every visible GPU.
    pub devices: Option<Vec<usize>>,
    /// Metrics to collect (one column each).
    pub metrics: Vec<String>,
    /// GPU-time sampling interval; `None`: the finest the cost model says holds without loss
    /// within [`SessionConfig::core_budget`] for these metrics' counter-data bytes
    /// ([`crate::cost`]).
    pub interval_ns: Option<i64>,
    /// The CPU per GPU, in cores, the default interval may cost: [`crate::cost::CORE_BUDGET`]
    /// (`record`), [`crate::cost::EXPORTER_CORE_BUDGET`] (`serve`).
    pub core_budget: f64,
    /// NVML polling interval; `None` = no NVML.
    pub nvml_interval: Option<Duration>,
    pub counters: CounterPolicy,
    /// PM sampling hardware buffer per device; `None`: by the rate of counter data
    /// ([`crate::cost::hw_buffer_bytes`]).
    pub hw_buffer_bytes: Option<usize>,
    /// Evaluation threads per device; `None`: as many as the interval and metrics need
    /// ([`sizing::eval_threads`]).
    pub eval_threads: Option<usize>,
    /// Override of the image plan's seal period and margin (benchmarks).
    pub image_timing: Option<sizing::ImageTiming>,
    /// Metrics cufall added itself (the percentages of peak of bare counters): one a chip cannot
    /// evaluate is left out ([`Prepared::peaks_refused`]), not an error.
    pub optional_metrics: Vec<String>,
    /// Metrics with a stand-in: (asked, stand-in). A chip that cannot evaluate the first
    /// records the second ([`Prepared::metrics_substituted`]); the defaults' cheaper tensor
    /// counter falls back so to the usual one (`crate::spec::Selection::fallbacks`).
    pub fallbacks: Vec<(String, String)>,
}

pub const DEFAULT_NVML_INTERVAL: Duration = Duration::from_millis(10);
/// The interval configured while a chip's bytes per sample are measured (any CUPTI accepts).
const PROBE_INTERVAL_NS: i64 = 100_000;
/// The interval when CUPTI could not say the bytes per sample before arming: the model's
/// choice for the default pair's bytes (50 µs within one core per GPU, 200 µs within the
/// exporter's budget), whatever metrics were asked.
fn fallback_interval_ns(model: &crate::cost::CostModel, metrics: usize, cores: f64) -> i64 {
    model
        .default_interval_within(FALLBACK_BYTES_PER_SAMPLE, metrics.max(2), cores)
        .0
}

/// The bytes per sample assumed until the devices report theirs, in that case: the pair's.
const FALLBACK_BYTES_PER_SAMPLE: u64 = 25_529;

/// How the interval was chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum IntervalChoice {
    /// `--interval`.
    Given,
    /// The cost model's default within `cores` per GPU; `budget_met` false when no step keeps
    /// the metrics within it (the coarsest step is taken).
    Model { budget_met: bool, cores: f64 },
    /// CUPTI could not say the bytes per sample before arming (`why`): the default pair's
    /// interval was taken.
    Fallback { why: String },
}

impl IntervalChoice {
    /// The cost model's default interval for `bytes` per sample of `metrics` metrics within
    /// `cores` per GPU, and the choice that names it.
    fn model(
        model: &crate::cost::CostModel,
        bytes: u64,
        metrics: usize,
        cores: f64,
    ) -> (i64, Self) {
        let (iv, budget_met) = model.default_interval_within(bytes, metrics, cores);
        (iv, IntervalChoice::Model { budget_met, cores })
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            devices: None,
            metrics: crate::spec::DEFAULT_METRICS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            interval_ns: None,
            core_budget: crate::cost::CORE_BUDGET,
            nvml_interval: Some(DEFAULT_NVML_INTERVAL),
            counters: CounterPolicy::BestEffort,
            hw_buffer_bytes: None,
            eval_threads: None,
            image_timing: None,
            optional_metrics: Vec::new(),
            fallbacks: crate::spec::default_fallbacks(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Cupti(#[from] CuptiError),
    /// Not enough memory for the images the interval needs (see [`ArmError::NotEnoughMemory`]).
    #[error(transparent)]
    Memory(ArmError),
    #[error(
        "sampling interval {} is below the minimum cufall supports ({}): CUPTI accepts shorter \
intervals on GH100 without complaint, but the hardware and the decoder cannot deliver them (see \
docs/metrics.md); use --interval 1us or more, or leave --interval out for the measured default",
        crate::sizing::format_interval(*interval_ns),
        crate::sizing::format_interval(*min_ns)
    )]
    IntervalTooShort { interval_ns: i64, min_ns: i64 },
    #[error("no device selected (--devices is empty)")]
    NoDeviceSelected,
    /// Neither counters nor NVML can be read; each says why.
    #[error("nothing can be recorded: {counters}; and {nvml}")]
    NothingToRecord { counters: String, nvml: String },
    #[error("cannot start the writer thread: {source}")]
    WriterThread {
        #[source]
        source: std::io::Error,
    },
}

impl From<ArmError> for SessionError {
    fn from(e: ArmError) -> Self {
        match e {
            ArmError::Cupti(c) => SessionError::Cupti(c),
            m @ ArmError::NotEnoughMemory { .. } => SessionError::Memory(m),
        }
    }
}

impl SessionError {
    /// GPU counters are out of reach for reasons outside cufall ([`CuptiError::counters_out_of_reach`]).
    pub fn counters_out_of_reach(&self) -> bool {
        matches!(self, SessionError::Cupti(c) if c.counters_out_of_reach())
    }
}

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
    /// scale ([`crate::spec::Selection::relative`]).
    pub peaks_refused: Vec<(String, String)>,
    /// Metrics a chip could not evaluate that were recorded by their stand-in instead:
    /// (asked, recorded) ([`SessionConfig::fallbacks`]).
    pub metrics_substituted: Vec<(String, String)>,
    threads: Vec<ArmedDevice>,
    nvml: Option<NvmlSource>,
    tx: Sender<SinkMsg>,
    rx: Receiver<SinkMsg>,
    /// The trace keeps capture windows only ([`Prepared::limit_to_windows`]).
    windowed: bool,
    /// Only the first window: the trace closes when it ends (`--capture-range-end stop`).
    first_window_only: bool,
}

/// Validates the configuration against the machine and arms PM sampling on every device.
pub fn prepare(cfg: &SessionConfig) -> Result<Prepared, SessionError> {
    if let Some(iv) = cfg.interval_ns
        && iv < sizing::MIN_INTERVAL_NS
        && cfg.counters != CounterPolicy::Off
    {
        return Err(SessionError::IntervalTooShort {
            interval_ns: iv,
            min_ns: sizing::MIN_INTERVAL_NS,
        });
    }
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
        // Without counters nothing is sampled (the manifest has no sampling); the interval then
        // only sets the live view's finest bin, as the default pair's 50 µs always did.
        interval_ns: cost
            .as_ref()
            .map_or(cfg.interval_ns.unwrap_or(50_000), |c| c.interval_ns),
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
struct ArmedDevice {
    id: DeviceId,
    thread: DeviceThread,
    stop: Arc<AtomicBool>,
    counters: Arc<DeviceCounters>,
    rearm: Rearm,
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

/// The cost model's prediction for a recording, as `--stats-json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictedCost {
    pub interval_ns: i64,
    pub bytes_per_sample: u64,
    pub decode_busy: f64,
    pub eval_cores: f64,
    pub restore_cores: f64,
    pub cores: f64,
    pub lossless: bool,
    pub loss_fraction: f64,
    pub finest_lossless_ns: i64,
    /// Whether the cost model chose the interval (no `--interval`).
    pub interval_chosen: bool,
}

/// What sampling will cost, stated before it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    pub devices: usize,
    pub interval_ns: i64,
    pub metrics: usize,
    /// One counter-data image.
    pub image_bytes: u64,
    pub samples_per_image: u32,
    /// Images made up front per device, and the most a device may make.
    pub initial_images: usize,
    pub max_images: usize,
    pub hw_buffer_bytes: u64,
    pub eval_threads: usize,
    /// What the cost model says of this rate (bytes per sample, decoder load, cores).
    pub prediction: crate::cost::Prediction,
    /// The finest interval the model says the decoder holds for these metrics.
    pub finest_lossless_ns: i64,
    /// How the interval was chosen.
    pub choice: IntervalChoice,
}

/// `one core`, `0.3 of a core`, `2 cores`.
fn cores_text(cores: f64) -> String {
    if (cores - 1.0).abs() < 1e-9 {
        "one core".into()
    } else if cores < 1.0 {
        format!("{cores} of a core")
    } else {
        format!("{cores} cores")
    }
}

impl Cost {
    /// One line for the user.
    pub fn describe(&self) -> String {
        let per = self.image_bytes * self.initial_images as u64;
        let bytes = self.prediction.bytes_per_sample;
        let finest = crate::sizing::format_interval(self.finest_lossless_ns);
        let why = match &self.choice {
            IntervalChoice::Model {
                budget_met: true,
                cores,
            } => format!(
                " (the finest interval at about {} per GPU for {bytes} bytes of counter data \
per sample; --interval sets another, down to {finest} without loss)",
                cores_text(*cores)
            ),
            IntervalChoice::Model {
                budget_met: false,
                cores,
            } => format!(
                " (the coarsest interval cufall chooses: no interval keeps {bytes} bytes of counter \
data per sample within about {} per GPU; choose cheaper metrics, `cufall metrics` gives \
each one's bytes)",
                cores_text(*cores)
            ),
            IntervalChoice::Fallback { why } => format!(
                " (the default pair's interval: CUPTI could not say the bytes per sample before \
the GPUs were armed ({why}); they are {bytes}, lossless down to {finest})"
            ),
            IntervalChoice::Given => format!(" ({bytes} bytes of counter data per sample)"),
        };
        format!(
            "sampling {} GPU(s) at {}{why} with {} metric(s): about {:.1} CPU cores (decoder {:.0} % \
busy) and {} of counter-data images per GPU ({} images of {} up front, up to {} on demand; plus a \
{} hardware buffer), {} evaluation threads per GPU",
            self.devices,
            crate::sizing::format_interval(self.interval_ns),
            self.metrics,
            self.prediction.cores(),
            self.prediction.decode_busy * 100.0,
            sizing::format_bytes(per),
            self.initial_images,
            sizing::format_bytes(self.image_bytes),
            self.max_images,
            sizing::format_bytes(self.hw_buffer_bytes),
            self.eval_threads
        )
    }

    /// The model's figures, for `--stats-json` (benchmarks put them beside what was measured).
    pub fn predicted(&self) -> PredictedCost {
        let p = &self.prediction;
        PredictedCost {
            interval_ns: self.interval_ns,
            bytes_per_sample: p.bytes_per_sample,
            decode_busy: p.decode_busy,
            eval_cores: p.eval_cores,
            restore_cores: p.restore_cores,
            cores: p.cores(),
            lossless: p.lossless(),
            loss_fraction: p.loss_fraction(),
            finest_lossless_ns: self.finest_lossless_ns,
            interval_chosen: self.choice != IntervalChoice::Given,
        }
    }

    /// The line to print before sampling when the model predicts lost samples at this rate:
    /// how many, and the interval that would lose none.
    pub fn loss_warning(&self) -> Option<String> {
        let p = &self.prediction;
        (!p.lossless()).then(|| {
            format!(
                "at {} the decoder would need {:.0} % of a core for {} bytes of counter data per \
sample (it keeps up to {:.0} %): expect up to {:.0} % of samples lost, each hole recorded as a \
drop; {} or longer loses none (or choose cheaper metrics: `cufall metrics` gives each one's bytes \
per sample)",
                crate::sizing::format_interval(self.interval_ns),
                p.decode_busy * 100.0,
                p.bytes_per_sample,
                crate::cost::DECODE_BUSY_MAX * 100.0,
                (p.loss_fraction() * 100.0).ceil(),
                crate::sizing::format_interval(self.finest_lossless_ns)
            )
        })
    }
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
    pipeline::device::bytes_per_sample(&mut sampler, config, metrics, interval_ns)
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
                cfg.interval_ns.unwrap_or(PROBE_INTERVAL_NS),
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
    let (interval_ns, choice) = match (cfg.interval_ns, &asked) {
        (Some(iv), _) => (iv, IntervalChoice::Given),
        (None, Ok(bytes)) => IntervalChoice::model(&model, *bytes, n, cfg.core_budget),
        (None, Err(why)) => (
            fallback_interval_ns(&model, n, cfg.core_budget),
            IntervalChoice::Fallback {
                why: why.to_string(),
            },
        ),
    };
    // Until the devices report their own, the bytes asked before arming (or the pair's).
    let bytes = asked.clone().unwrap_or(FALLBACK_BYTES_PER_SAMPLE);
    let prediction = model.predict(bytes, n, interval_ns);
    let hw_buffer_bytes = cfg
        .hw_buffer_bytes
        .unwrap_or_else(|| crate::cost::hw_buffer_bytes(bytes, interval_ns));
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
            interval_ns,
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
        interval_ns,
        metrics: n,
        image_bytes: image_bytes as u64,
        samples_per_image: spi,
        initial_images: plan.initial_images,
        max_images: plan.max_images,
        hw_buffer_bytes: hw_buffer_bytes as u64,
        eval_threads,
        prediction: model.predict(bytes, n, interval_ns),
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
        selection: &crate::spec::Selection,
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
            interval_ns: self.interval_ns,
            nvml_interval_ns: self.nvml_interval.map_or(0, nanos),
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

    /// Starts sampling. Data goes to `writer` (a trace) and/or `live` (a view).
    pub fn start(
        self,
        live: Option<LiveSender>,
        writer: Option<TraceWriter>,
    ) -> Result<SessionHandle, SessionError> {
        let shared = Arc::new(SinkShared::default());
        let cpu0 = crate::os::cpu_seconds();
        let started = Instant::now();
        let first_only = self.first_window_only;
        let gate = self
            .windowed
            .then(|| crate::sink::window::Gate::new().first_only(first_only));
        let window_tx = self.windowed.then(|| self.tx.clone());
        let sink = {
            let shared = Arc::clone(&shared);
            let rx = self.rx;
            std::thread::Builder::new()
                .name("cufall-sink".into())
                .spawn(move || crate::sink::sink_main(rx, writer, live, shared, gate))
                .map_err(|source| SessionError::WriterThread { source })?
        };
        let mut devices = Vec::new();
        let mut counters = Vec::new();
        for d in self.threads {
            let started_ns = crate::now_unix_ns();
            let _ = d.thread.go.send(true);
            devices.push(pause::Device {
                id: d.id,
                stop: d.stop,
                running: pause::Running {
                    handle: d.thread.handle,
                    started_ns,
                },
                starter: Box::new(d.rearm),
            });
            counters.push((d.id, d.counters));
        }
        let sharing = if devices.is_empty() {
            pause::CounterSharing::none(
                self.counters_unavailable
                    .clone()
                    .unwrap_or_else(|| "this session samples no GPU counters".into()),
            )
        } else {
            let p = pause::Pausable::new(devices, self.tx.clone())
                .map_err(|source| SessionError::WriterThread { source })?;
            pause::CounterSharing::new(p)
        };
        let nvml_stop = Arc::new(AtomicBool::new(false));
        let nvml_thread = match (self.nvml, self.nvml_interval) {
            (Some(src), Some(interval)) => {
                let tx = self.tx.clone();
                let stop = Arc::clone(&nvml_stop);
                std::thread::Builder::new()
                    .name("cufall-nvml".into())
                    .spawn(move || {
                        src.poll(interval, stop, |rows| {
                            let _ = tx.send(SinkMsg::Nvml(rows));
                        })
                    })
                    .ok()
            }
            _ => None,
        };
        if let Some(reason) = &self.counters_unavailable {
            let _ = self
                .tx
                .send(SinkMsg::Message(format!("no GPU counters: {reason}")));
        }
        drop(self.tx);
        Ok(SessionHandle {
            nvml_stop,
            sharing,
            counters,
            nvml_thread,
            sink: Some(sink),
            shared,
            started,
            cpu0,
            window_tx,
        })
    }
}

/// A running session.
pub struct SessionHandle {
    nvml_stop: Arc<AtomicBool>,
    /// The devices' pipelines, pausable ([`SessionHandle::sharing`]).
    sharing: pause::CounterSharing,
    counters: Vec<(DeviceId, Arc<DeviceCounters>)>,
    nvml_thread: Option<JoinHandle<()>>,
    sink: Option<JoinHandle<crate::sink::SinkResult>>,
    shared: Arc<SinkShared>,
    started: Instant,
    cpu0: f64,
    /// Where cufall's own window edges go (delay, signal); dropped at stop so the sink ends.
    window_tx: Option<Sender<SinkMsg>>,
}

/// Per-device pipeline figures at the end of a run.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub samples_decoded: u64,
    pub samples_evaluated: u64,
    pub images_sealed: u64,
    pub images_allocated: u64,
    pub image_bytes: u64,
    pub counter_data_full: u64,
    pub hw_overflows: u64,
    pub restarts: u64,
    pub decode_errors: u64,
    pub eval_errors: u64,
    pub partial_at_seal: u64,
    pub max_seam_ns: u64,
    pub decode_calls: u64,
    pub decode_cpu_s: f64,
    pub eval_cpu_s: f64,
    pub eval_us_per_sample: f64,
    pub reset_cpu_s: f64,
    /// Average bytes restored per used image.
    pub reset_bytes_per_image: u64,
    /// Used images were restored by their written prefix (false: whole images).
    pub reset_by_prefix: bool,
    pub max_decode_call_ms: f64,
    pub max_decode_gap_ms: f64,
    pub max_samples_per_decode: u64,
    pub late_decodes: u64,
    pub bytes_per_sample: u64,
    pub samples_per_image: u64,
    /// Evaluator threads started.
    pub evaluators: u64,
    /// Chunks whose evaluation panicked, and the samples recorded as `evaluation_failed`.
    pub eval_panics: u64,
    pub eval_failed_samples: u64,
    /// Decode-thread CPU spent reading timestamps and finding holes.
    pub seal_cpu_s: f64,
    /// Decode cost by how many samples a call moved.
    pub decode_by_call_size: Vec<CallSizeReport>,
}

/// Decode calls that moved up to `up_to_samples` samples (and more than the bin before).
#[derive(Clone, Debug, Serialize)]
pub struct CallSizeReport {
    pub up_to_samples: u64,
    pub calls: u64,
    pub samples: u64,
    pub us_per_sample: f64,
    pub ms_per_call: f64,
}

impl DeviceReport {
    /// The figures of one device's pipeline counters.
    pub fn from_counters(id: DeviceId, c: &DeviceCounters) -> DeviceReport {
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let evaluated = g(&c.samples_evaluated);
        let eval_ns = g(&c.eval_ns);
        let decode_by_call_size = pipeline::CALL_SIZE_BINS
            .iter()
            .enumerate()
            .filter(|(i, _)| g(&c.calls_by_size[*i]) > 0)
            .map(|(i, &up_to)| {
                let (calls, samples, ns) = (
                    g(&c.calls_by_size[i]),
                    g(&c.samples_by_size[i]),
                    g(&c.decode_ns_by_size[i]),
                );
                CallSizeReport {
                    up_to_samples: up_to,
                    calls,
                    samples,
                    us_per_sample: ns as f64 / samples.max(1) as f64 / 1e3,
                    ms_per_call: ns as f64 / calls.max(1) as f64 / 1e6,
                }
            })
            .collect();
        DeviceReport {
            device: id.0,
            samples_decoded: g(&c.samples_decoded),
            samples_evaluated: evaluated,
            images_sealed: g(&c.images_sealed),
            images_allocated: g(&c.images_allocated),
            image_bytes: g(&c.image_bytes),
            counter_data_full: g(&c.counter_data_full),
            hw_overflows: g(&c.hw_overflows),
            restarts: g(&c.restarts),
            decode_errors: g(&c.decode_errors),
            eval_errors: g(&c.eval_errors),
            partial_at_seal: g(&c.partial_at_seal),
            max_seam_ns: g(&c.max_seam_ns),
            decode_calls: g(&c.decode_calls),
            decode_cpu_s: g(&c.decode_ns) as f64 * 1e-9,
            eval_cpu_s: eval_ns as f64 * 1e-9,
            reset_cpu_s: g(&c.reset_ns) as f64 * 1e-9,
            reset_bytes_per_image: g(&c.reset_bytes) / g(&c.images_restored).max(1),
            reset_by_prefix: g(&c.reset_by_prefix) == 1,
            max_decode_call_ms: g(&c.max_decode_call_ns) as f64 * 1e-6,
            max_decode_gap_ms: g(&c.max_decode_gap_ns) as f64 * 1e-6,
            max_samples_per_decode: g(&c.max_samples_per_decode),
            late_decodes: g(&c.late_decodes),
            bytes_per_sample: g(&c.bytes_per_sample),
            samples_per_image: g(&c.samples_per_image),
            eval_us_per_sample: if evaluated > 0 {
                eval_ns as f64 / evaluated as f64 / 1e3
            } else {
                0.0
            },
            evaluators: g(&c.evaluators),
            eval_panics: g(&c.eval_panics),
            eval_failed_samples: g(&c.eval_failed_samples),
            seal_cpu_s: g(&c.seal_ns) as f64 * 1e-9,
            decode_by_call_size,
        }
    }
}

/// What a run did, for the user and for benchmarks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Peak resident memory of the process, MiB.
    pub peak_rss_mib: f64,
    pub samples_written: u64,
    pub nvml_rows: u64,
    /// Drop records and estimated lost samples, by reason.
    pub drops: BTreeMap<String, DropCount>,
    pub loss_records: u64,
    pub lost_samples: u64,
    pub devices: Vec<DeviceReport>,
    pub messages: Vec<String>,
    pub errors: Vec<String>,
}

pub struct SessionOutcome {
    /// The trace writer handed to `start`, still open: the caller finishes it.
    pub writer: Option<TraceWriter>,
    pub summary: Summary,
    /// Capture windows, once the sink has taken every edge.
    pub windows: crate::sink::window::WindowLog,
}

/// A snapshot while running.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub samples_written: u64,
    pub loss_records: u64,
    pub lost_samples: u64,
    pub error: Option<String>,
}

impl SessionHandle {
    pub fn status(&self) -> Status {
        let DropCount {
            records: loss_records,
            lost_samples,
        } = self
            .shared
            .tally
            .lock()
            .map(|t| t.losses())
            .unwrap_or_default();
        Status {
            samples_written: self.shared.samples_written.load(Ordering::Relaxed),
            loss_records,
            lost_samples,
            error: self.error(),
        }
    }

    /// A failure that ended sampling early (a device thread or the writer), if any.
    pub fn error(&self) -> Option<String> {
        if let Ok(e) = self.shared.error.lock()
            && let Some(e) = e.as_ref()
        {
            return Some(e.clone());
        }
        for (id, c) in &self.counters {
            // After a pause the pause control says which failures end a device: a start
            // refused because the counters were taken again is retried.
            if self.sharing.resumed(*id) {
                continue;
            }
            if let Ok(e) = c.error.lock()
                && let Some(e) = e.as_ref()
            {
                return Some(format!("{id}: {e}"));
            }
        }
        if let Some(e) = self.sharing.error() {
            return Some(e);
        }
        self.sharing
            .ended_early()
            .then(|| "a device's sampling thread ended early".to_string())
    }

    /// Pausing and resuming this session's GPU counters (`cufall control pause`).
    pub fn sharing(&self) -> pause::CounterSharing {
        self.sharing.clone()
    }

    /// Opens or closes a capture window (a recording limited to windows).
    pub fn window_edge(&self, edge: crate::sink::window::Edge) {
        if let Some(tx) = &self.window_tx {
            let _ = tx.send(SinkMsg::Window(edge));
        }
    }

    /// Capture windows opened and closed so far.
    pub fn windows(&self) -> crate::sink::window::WindowLog {
        self.shared.windows.lock().map(|l| *l).unwrap_or_default()
    }

    /// Stops sampling, drains every image, waits for the writer; returns the writer unfinished.
    pub fn stop(mut self) -> SessionOutcome {
        self.window_tx = None;
        let mut errors = self.sharing.stop();
        self.nvml_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.nvml_thread.take() {
            let _ = h.join();
        }
        let writer = match self.sink.take().map(|h| h.join()) {
            Some(Ok(r)) => r.writer,
            Some(Err(_)) => {
                errors.push("the writer thread panicked".into());
                None
            }
            None => None,
        };
        if let Ok(e) = self.shared.error.lock()
            && let Some(e) = e.as_ref()
        {
            errors.push(e.clone());
        }
        let tally: DropTally = self
            .shared
            .tally
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        let DropCount {
            records: loss_records,
            lost_samples,
        } = tally.losses();
        let devices = self
            .counters
            .iter()
            .map(|(id, c)| DeviceReport::from_counters(*id, c))
            .collect();
        let summary = Summary {
            wall_s: self.started.elapsed().as_secs_f64(),
            cpu_s: crate::os::cpu_seconds() - self.cpu0,
            peak_rss_mib: crate::os::peak_rss_bytes() as f64 / (1 << 20) as f64,
            samples_written: self.shared.samples_written.load(Ordering::Relaxed),
            nvml_rows: self.shared.nvml_rows.load(Ordering::Relaxed),
            drops: tally
                .by_reason
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            loss_records,
            lost_samples,
            devices,
            messages: self
                .shared
                .messages
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default(),
            errors,
        };
        let windows = self.shared.windows.lock().map(|l| *l).unwrap_or_default();
        SessionOutcome {
            writer,
            summary,
            windows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_interval_keeps_the_budget_asked_for() {
        let m = crate::cost::CostModel::H200;
        assert_eq!(
            fallback_interval_ns(&m, 2, crate::cost::CORE_BUDGET),
            50_000
        );
        assert_eq!(
            fallback_interval_ns(&m, 2, crate::cost::EXPORTER_CORE_BUDGET),
            200_000
        );
        assert_eq!(
            fallback_interval_ns(&m, 1, crate::cost::EXPORTER_CORE_BUDGET),
            200_000
        );
    }

    #[test]
    fn units_follow_the_suffix() {
        assert_eq!(unit_for("cycle", ".avg.pct_of_peak_sustained_elapsed"), "%");
        assert_eq!(unit_for("byte", ".sum.per_second"), "byte/second");
        assert_eq!(unit_for("cycle", ".max"), "cycle");
        assert_eq!(unit_for("inst", ".avg.per_cycle_active"), "inst/cycle");
    }

    fn cost_at(bytes: u64, metrics: usize, interval_ns: Option<i64>) -> Cost {
        let model = crate::cost::CostModel::H200;
        let iv = interval_ns.unwrap_or_else(|| model.default_interval_ns(bytes, metrics));
        Cost {
            devices: 1,
            interval_ns: iv,
            metrics,
            image_bytes: 80_000_000,
            samples_per_image: 17_000,
            initial_images: 2,
            max_images: 6,
            hw_buffer_bytes: crate::cost::hw_buffer_bytes(bytes, iv) as u64,
            eval_threads: 2,
            prediction: model.predict(bytes, metrics, iv),
            finest_lossless_ns: model.finest_lossless_ns(bytes, metrics),
            choice: match interval_ns {
                Some(_) => IntervalChoice::Given,
                None => IntervalChoice::Model {
                    budget_met: true,
                    cores: crate::cost::CORE_BUDGET,
                },
            },
        }
    }

    #[test]
    fn the_lines_quoted_in_the_sampler_docs_are_what_the_model_prints() {
        let docs = include_str!("../../docs/sampler.md");
        let chosen = cost_at(4_729, 1, None).describe();
        let head = "sampling 1 GPU(s) at 12us (the finest interval at about one core per GPU for \
4729 bytes of counter data per sample; --interval sets another, down to 7us without loss) with 1 \
metric(s): about 1.0 CPU cores (decoder 51 % busy) and ";
        assert!(chosen.starts_with(head), "{chosen}");
        assert!(docs.contains(&format!("cufall: {head}...")));
        assert_eq!(cost_at(4_729, 1, None).loss_warning(), None);
        let warning = cost_at(4_729, 1, Some(5_000))
            .loss_warning()
            .expect("5 µs loses samples");
        assert!(
            docs.contains(&format!("cufall: note: {warning}")),
            "{warning}"
        );
        let pair = cost_at(25_529, 2, None).describe();
        assert!(pair.contains("at 50us ("), "{pair}");
        assert!(
            pair.contains("about 0.9 CPU cores (decoder 55 % busy)"),
            "{pair}"
        );
        let mut heavy = cost_at(20_000_000, 12, None);
        heavy.choice = IntervalChoice::Model {
            budget_met: false,
            cores: crate::cost::CORE_BUDGET,
        };
        assert!(
            heavy
                .describe()
                .contains("no interval keeps 20000000 bytes of counter data"),
            "{}",
            heavy.describe()
        );
        let mut fallback = cost_at(4_729, 1, Some(50_000));
        fallback.choice = IntervalChoice::Fallback {
            why: "refused".into(),
        };
        let line = fallback.describe();
        assert!(
            line.contains("(the default pair's interval: CUPTI could not say"),
            "{line}"
        );
        assert!(
            line.contains("(refused); they are 4729, lossless down to 7us)"),
            "{line}"
        );
        let given = cost_at(25_529, 2, Some(30_000)).describe();
        assert!(
            given.contains("at 30us (25529 bytes of counter data per sample) with"),
            "{given}"
        );
    }
}
