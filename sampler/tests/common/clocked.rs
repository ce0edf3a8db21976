//! A fake GPU on the wall clock, for the exporter: every decode call moves the samples of the
//! time since the previous one (one per [`IV_NS`]), whose value follows a fixed pattern: busy
//! at [`BUSY_VALUE`] % for 8 ms, then idle for 2 ms, every 10 ms. So the idle fraction is 0.2
//! and 100 idle gaps of 2 ms end each second.
//!
//! [`Switches`] change it while it runs: `taken` makes it behave as CUPTI does when another
//! profiler holds the counters (decode and start fail with `CountersBusy`), `gone` as a GPU that
//! fell off the bus (decode fails; the next run leaves it out). [`FakeGpus`] is a
//! `serve::Backend`: each run is the real decode loop, evaluators and sink of every present
//! GPU under the library's pause control (`pipeline::pause`, as a session has it), an NVML
//! thread (100 % utilisation, 350 W, nvidia-smi's view of the same pattern), and the live feed
//! the exporter takes. `Switches::sources` counts the fake PM sampling sessions alive, so a test
//! sees a pause release them.

use super::{FakeImage, FakeImages, status};
use cufall_cupti::{CounterDataInfo, CuptiError, DecodeOutcome, DecodeStop};
use cufall_live::FeedInfo;
use cufall_sampler::pipeline::pause::{CounterSharing, Device, DeviceStarter, Pausable, Running};
use cufall_sampler::pipeline::{
    ArmError, DecodeConfig, DeviceCounters, DeviceParts, PmSource, SampleEvaluator, error_chain,
    run_device,
};
use cufall_sampler::serve::{Backend, Run, Started};
use cufall_sampler::session::SessionError;
use cufall_sampler::sink::{SinkMsg, SinkResult, SinkShared, sink_main};
use cufall_sampler::sizing::ImagePlan;
use cufall_trace::model::{DeviceId, DeviceInfo, MetricInfo, Nanos, NvmlRow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

pub const IV_NS: i64 = 100_000;
pub const PERIOD_NS: i64 = 10_000_000;
pub const BUSY_NS: i64 = 8_000_000;
pub const BUSY_VALUE: f64 = 80.0;
pub const METRIC: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
pub const POWER_W: f32 = 350.0;

/// What a test changes on one fake GPU while it runs.
#[derive(Debug, Default)]
pub struct Switches {
    pub taken: AtomicBool,
    pub gone: AtomicBool,
    /// Fake PM sampling sessions alive (made, not yet dropped).
    pub sources: AtomicI64,
    /// Times the GPU was armed again after a pause.
    pub rearmed: AtomicU64,
}

fn now_ns() -> i64 {
    cufall_sampler::now_unix_ns()
}

fn busy_status(during: &'static str) -> CuptiError {
    CuptiError::CountersBusy {
        during,
        status: status(27),
    }
}

/// The fake GPU's PM sampling.
pub struct ClockedSource {
    clock: i64,
    running: bool,
    switches: Arc<Switches>,
    pub produced: Arc<AtomicU64>,
}

impl PmSource for ClockedSource {
    type Image = FakeImage;

    fn start(&mut self) -> Result<(), CuptiError> {
        if self.switches.taken.load(Ordering::SeqCst) {
            return Err(busy_status("cuptiPmSamplingStart"));
        }
        self.running = true;
        self.clock = now_ns() - now_ns().rem_euclid(IV_NS);
        Ok(())
    }

    fn stop(&mut self) -> Result<(), CuptiError> {
        self.running = false;
        Ok(())
    }

    fn is_running(&self) -> bool {
        self.running
    }

    fn decode(&mut self, image: &mut FakeImage) -> Result<DecodeOutcome, CuptiError> {
        if self.switches.gone.load(Ordering::SeqCst) {
            return Err(CuptiError::Api {
                call: "cuptiPmSamplingDecodeData",
                status: status(999),
            });
        }
        if self.switches.taken.load(Ordering::SeqCst) {
            return Err(busy_status("cuptiPmSamplingDecodeData"));
        }
        let mut stop = DecodeStop::EndOfRecords;
        while self.running && self.clock + IV_NS <= now_ns() {
            if image.samples.len() == image.capacity {
                stop = DecodeStop::CounterDataFull;
                break;
            }
            let s = self.clock as u64;
            image.samples.push((s, s + IV_NS as u64));
            self.clock += IV_NS;
            self.produced.fetch_add(1, Ordering::Relaxed);
        }
        Ok(DecodeOutcome {
            stop,
            overflow: false,
        })
    }

    fn fill(&self, image: &FakeImage) -> Result<CounterDataInfo, CuptiError> {
        Ok(image.info())
    }

    fn sample_times(&self, image: &FakeImage, index: usize) -> Result<(u64, u64), CuptiError> {
        image.times(index)
    }

    fn rearm(&mut self) -> Result<(), CuptiError> {
        self.running = false;
        Ok(())
    }

    fn now_ns(&self) -> i64 {
        now_ns()
    }
}

impl Drop for ClockedSource {
    fn drop(&mut self) {
        self.switches.sources.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The pattern's value for a sample starting at `start_ns`.
pub fn pattern(start_ns: i64) -> f64 {
    if start_ns.rem_euclid(PERIOD_NS) < BUSY_NS {
        BUSY_VALUE
    } else {
        0.0
    }
}

pub struct PatternEval;

impl SampleEvaluator<FakeImage> for PatternEval {
    fn metric_count(&self) -> usize {
        1
    }

    fn evaluate(
        &mut self,
        image: &FakeImage,
        index: usize,
        out: &mut [f64],
    ) -> Result<(), CuptiError> {
        let (s, _) = image.samples[index];
        out[0] = pattern(s as i64);
        Ok(())
    }
}

fn plan() -> ImagePlan {
    ImagePlan {
        samples_per_image: 20_000,
        seal_after_samples: 200,
        seal_period: Duration::from_millis(20),
        decode_period: Duration::from_millis(1),
        initial_images: 2,
        max_images: 8,
    }
}

/// Fake GPU `i`: the exporter's tests' "Fake H200".
pub fn device_info(i: usize) -> DeviceInfo {
    cufall_testkit::synth::fake_h200(u32::try_from(i).expect("a handful of fake GPUs"))
}

pub fn metric_info() -> MetricInfo {
    MetricInfo {
        name: METRIC.into(),
        unit: "%".into(),
        description: "tensor pipe activity".into(),
    }
}

/// Fake GPUs as a `serve::Backend`.
pub struct FakeGpus {
    pub switches: Vec<Arc<Switches>>,
    /// Runs started so far.
    pub starts: Arc<AtomicU64>,
}

impl FakeGpus {
    pub fn new(n: usize) -> Self {
        FakeGpus {
            switches: (0..n).map(|_| Arc::default()).collect(),
            starts: Arc::default(),
        }
    }
}

/// One run of the fake GPUs.
pub struct FakeRun {
    nvml_stop: Arc<AtomicBool>,
    sharing: CounterSharing,
    counters: Vec<(DeviceId, Arc<DeviceCounters>)>,
    nvml: Option<JoinHandle<()>>,
    sink: Option<JoinHandle<SinkResult>>,
}

impl Run for FakeRun {
    fn error(&self) -> Option<String> {
        for (id, c) in &self.counters {
            if self.sharing.resumed(*id) {
                continue;
            }
            if let Some(e) = c.error.lock().ok().and_then(|e| e.clone()) {
                return Some(format!("{id}: {e}"));
            }
        }
        if let Some(e) = self.sharing.error() {
            return Some(e);
        }
        self.sharing
            .ended_early()
            .then(|| "a sampling thread ended".to_string())
    }

    fn stop(self: Box<Self>) -> Vec<String> {
        let mut me = *self;
        let errors = me.sharing.stop();
        me.nvml_stop.store(true, Ordering::SeqCst);
        if let Some(h) = me.nvml.take() {
            let _ = h.join();
        }
        if let Some(h) = me.sink.take() {
            let _ = h.join();
        }
        errors
    }

    fn sharing(&self) -> Option<CounterSharing> {
        Some(self.sharing.clone())
    }
}

/// Arms one fake GPU, as `pipeline::Rearm` arms a real one: refused while another profiler
/// holds its counters.
pub struct FakeStarter {
    pub i: usize,
    pub switches: Arc<Switches>,
    pub out: Sender<SinkMsg>,
    pub counters: Arc<DeviceCounters>,
}

impl DeviceStarter for FakeStarter {
    fn start(&mut self, stop: Arc<AtomicBool>) -> Result<Running, ArmError> {
        if self.switches.taken.load(Ordering::SeqCst) {
            return Err(ArmError::Cupti(busy_status("cuptiPmSamplingEnable")));
        }
        self.switches.rearmed.fetch_add(1, Ordering::SeqCst);
        Ok(spawn_device(
            self.i,
            &self.switches,
            &self.out,
            stop,
            &self.counters,
        ))
    }
}

fn spawn_device(
    i: usize,
    switches: &Arc<Switches>,
    tx: &Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
    counters: &Arc<DeviceCounters>,
) -> Running {
    let id = DeviceId(i as u32);
    let (tx, c) = (tx.clone(), Arc::clone(counters));
    switches.sources.fetch_add(1, Ordering::SeqCst);
    let source = ClockedSource {
        clock: 0,
        running: false,
        switches: Arc::clone(switches),
        produced: Arc::default(),
    };
    let started_ns = now_ns();
    let handle = std::thread::spawn(move || {
        let parts = DeviceParts {
            source,
            images: Arc::new(FakeImages {
                capacity: 20_000,
                restored: AtomicU64::new(0),
            }),
            evaluators: vec![PatternEval, PatternEval],
            first_image: None,
        };
        let cfg = DecodeConfig {
            device: id,
            index: i,
            interval_ns: Nanos(IV_NS),
            plan: plan(),
        };
        let r = run_device(parts, &cfg, &tx, &stop, &c);
        if let Err(e) = &r {
            *c.error.lock().unwrap() = Some(error_chain(e));
        }
        r
    });
    Running { handle, started_ns }
}

pub fn spawn_nvml(
    present: Vec<usize>,
    tx: Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let t = now_ns();
            let rows = present
                .iter()
                .map(|&i| NvmlRow {
                    device: DeviceId(i as u32),
                    t_ns: t,
                    power_w: Some(POWER_W),
                    gpu_util_pct: Some(100),
                    ..NvmlRow::default()
                })
                .collect();
            let _ = tx.send(SinkMsg::Nvml(rows));
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

impl Backend for FakeGpus {
    fn start(&mut self) -> Result<Started, SessionError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        let present: Vec<usize> = (0..self.switches.len())
            .filter(|&i| !self.switches[i].gone.load(Ordering::SeqCst))
            .collect();
        if present.is_empty() {
            return Err(SessionError::Cupti(CuptiError::NoDevice));
        }
        let taken = present
            .iter()
            .any(|&i| self.switches[i].taken.load(Ordering::SeqCst));
        let info = FeedInfo {
            devices: present.iter().map(|&i| device_info(i)).collect(),
            metrics: if taken {
                Vec::new()
            } else {
                vec![metric_info()]
            },
            heatmaps: Vec::new(),
            interval_ns: Nanos(IV_NS),
            nvml_interval_ns: Nanos(10_000_000),
            counters_unavailable: taken
                .then(|| busy_status("cuptiProfilerHostInitialize").to_string()),
        };
        let (live_tx, rx) = cufall_live::feed(info, cufall_sampler::serve::FEED_CAPACITY);
        let (tx, sink_rx) = mpsc::channel();
        let sink = std::thread::spawn(move || {
            sink_main(
                sink_rx,
                None,
                Some(live_tx),
                Arc::new(SinkShared::default()),
                None,
            )
        });
        let nvml_stop = Arc::new(AtomicBool::new(false));
        let mut devices = Vec::new();
        let mut counters = Vec::new();
        if !taken {
            for &i in &present {
                let c = Arc::new(DeviceCounters::default());
                let stop = Arc::new(AtomicBool::new(false));
                let running = spawn_device(i, &self.switches[i], &tx, Arc::clone(&stop), &c);
                devices.push(Device {
                    id: DeviceId(i as u32),
                    stop,
                    running,
                    starter: Box::new(FakeStarter {
                        i,
                        switches: Arc::clone(&self.switches[i]),
                        out: tx.clone(),
                        counters: Arc::clone(&c),
                    }),
                });
                counters.push((DeviceId(i as u32), c));
            }
        }
        let sharing = if devices.is_empty() {
            CounterSharing::none("the GPU counters are held by another profiler".into())
        } else {
            CounterSharing::new(Pausable::new(devices, tx.clone()).unwrap())
        };
        let nvml = spawn_nvml(present, tx, Arc::clone(&nvml_stop));
        Ok(Started {
            feed: rx,
            run: Box::new(FakeRun {
                nvml_stop,
                sharing,
                counters,
                nvml: Some(nvml),
                sink: Some(sink),
            }),
        })
    }
}
