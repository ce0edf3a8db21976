//! A GPU's pipeline on its own thread: arming PM sampling through CUPTI, reporting ready, waiting
//! for the go, then [`run_device`] with the CUPTI implementations of the pipeline's traits.

use super::counters::DeviceCounters;
use super::decode::{DecodeConfig, DeviceParts, run_device};
use super::error::{ArmError, PipelineError, error_chain, panic_message};
use super::source::{CuptiEvaluator, CuptiImages, CuptiSource};
use crate::sink::SinkMsg;
use crate::sizing::ImagePlan;
use cufall_cupti::host::MetricList;
use cufall_cupti::{
    BlankImage, CounterData, Cupti, CuptiError, HostKind, PmSampler, PrimaryContext, ProfilerHost,
};
use cufall_trace::model::{DeviceId, Nanos};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

/// Everything a device thread needs to set up PM sampling.
#[derive(Clone, Debug)]
pub struct DeviceSetup {
    pub device: DeviceId,
    pub index: usize,
    pub chip: String,
    pub availability: Vec<u8>,
    pub metrics: Vec<String>,
    pub config_image: Vec<u8>,
    pub interval_ns: Nanos,
    pub hw_buffer_bytes: usize,
    pub eval_threads: usize,
    pub plan: ImagePlan,
    /// Devices armed at the same time (they share the machine's memory).
    pub devices_sharing_memory: usize,
}

/// Reported by a device thread once it is configured and ready to start.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    pub image_bytes: usize,
    pub samples_per_image: u32,
    /// Counter-data bytes of one sample, as this device's images are laid out.
    pub bytes_per_sample: u64,
}

pub struct DeviceThread {
    pub handle: JoinHandle<Result<(), PipelineError>>,
    pub go: Sender<bool>,
}

/// Spawns the device thread; it enables and configures PM sampling, reports on `ready`, then
/// waits for `go` before starting. A panic on that thread comes back as
/// [`PipelineError::Panicked`] with its message.
pub fn spawn_device(
    setup: DeviceSetup,
    cupti: Cupti,
    out: Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
    counters: Arc<DeviceCounters>,
    ready: Sender<(DeviceId, Result<Ready, ArmError>)>,
) -> std::io::Result<DeviceThread> {
    let (go_tx, go_rx) = mpsc::channel();
    let device = setup.device;
    let handle = std::thread::Builder::new()
        .name(format!("cufall-gpu{}", setup.index))
        .spawn(move || {
            let c = Arc::clone(&counters);
            let r = catch_unwind(AssertUnwindSafe(move || {
                device_main(setup, cupti, &out, &stop, &c, ready, go_rx)
            }))
            .unwrap_or_else(|p| {
                Err(PipelineError::Panicked {
                    device,
                    thread: "sampling",
                    message: panic_message(p.as_ref()),
                })
            });
            if let Err(e) = &r
                && let Ok(mut slot) = counters.error.lock()
            {
                *slot = Some(error_chain(e));
            }
            r
        })?;
    Ok(DeviceThread { handle, go: go_tx })
}

pub(crate) fn enable(
    cupti: &Cupti,
    index: usize,
) -> Result<(PmSampler, Option<PrimaryContext>), CuptiError> {
    match PmSampler::enable(cupti, index) {
        Ok(s) => Ok((s, None)),
        Err(e @ CuptiError::Api { .. }) => {
            // Some drivers want a current context; retry with the primary one.
            let Ok(ctx) = cupti.bind_primary_context(index) else {
                return Err(e);
            };
            let s = PmSampler::enable(cupti, index)?;
            Ok((s, Some(ctx)))
        }
        Err(e) => Err(e),
    }
}

/// Counter-data bytes one sample of `metrics` takes, asked of CUPTI the way a device thread asks
/// when it arms: configure `sampler` with `config` (the metrics' configuration image), then read
/// the image layout ([`sample_bytes`]).
///
/// [cuptiPmSamplingGetCounterDataSize](https://docs.nvidia.com/cupti/api/group__CUPTI__PM__SAMPLING__API.html)
pub(crate) fn bytes_per_sample(
    sampler: &mut PmSampler,
    config: &[u8],
    metrics: &[String],
    interval_ns: Nanos,
) -> Result<u64, CuptiError> {
    sampler.set_config(
        config,
        128 << 20,
        super::source::cupti_interval_ns(interval_ns),
    )?;
    let mut list = MetricList::new(metrics)?;
    let layout = sampler.image_layout(&mut list)?;
    sample_bytes(sampler, &mut list, layout)
}

/// Bytes of one sample slot: the layout's, or where sizes do not grow linearly, the mean over
/// 100 samples. The recorder's estimate before arming and a device's own use this one rule.
fn sample_bytes(
    sampler: &PmSampler,
    list: &mut MetricList,
    layout: Option<cufall_cupti::ImageLayout>,
) -> Result<u64, CuptiError> {
    Ok(match layout {
        Some(l) => l.bytes_per_sample as u64,
        None => {
            let one = sampler.counter_data_size(list, 1)?;
            let hundred_one = sampler.counter_data_size(list, 101)?;
            (hundred_one.saturating_sub(one) / 100).max(1) as u64
        }
    })
}

/// A device armed: configured, its first image made, its evaluators' host objects ready.
struct Armed {
    plan: ImagePlan,
    bytes_per_sample: u64,
    source: CuptiSource,
    template: BlankImage,
    /// The blank image CUPTI initialised to learn the template: the first image of the pool.
    first: CounterData,
    evaluators: Vec<CuptiEvaluator>,
}

/// Refuses before the images are made when the machine cannot hold them.
fn check_memory(setup: &DeviceSetup, image_bytes: u64) -> Result<(), ArmError> {
    let need = crate::sizing::MemoryNeed {
        devices: setup.devices_sharing_memory.max(1),
        image_bytes,
        images_per_device: setup.plan.initial_images,
        hw_buffer_bytes: setup.hw_buffer_bytes as u64,
    };
    match crate::sizing::mem_available_bytes() {
        Some(avail) if need.up_front_bytes() > avail => Err(ArmError::NotEnoughMemory {
            interval_ns: setup.interval_ns,
            need_bytes: need.up_front_bytes(),
            image_bytes,
            hw_buffer_bytes: need.hw_buffer_bytes,
            devices: need.devices,
            images: need.images_per_device,
            available_bytes: avail,
        }),
        _ => Ok(()),
    }
}

fn arm(setup: &DeviceSetup, cupti: &Cupti) -> Result<Armed, ArmError> {
    let (mut sampler, ctx) = enable(cupti, setup.index)?;
    sampler.set_config(
        &setup.config_image,
        setup.hw_buffer_bytes,
        super::source::cupti_interval_ns(setup.interval_ns),
    )?;
    let mut list = MetricList::new(&setup.metrics)?;
    let layout = sampler.image_layout(&mut list)?;
    let bytes_per_sample = sample_bytes(&sampler, &mut list, layout)?;
    let plan = setup
        .plan
        .capped(bytes_per_sample, crate::sizing::MAX_IMAGE_BYTES);
    let image_bytes = sampler.counter_data_size(&mut list, plan.samples_per_image)?;
    check_memory(setup, image_bytes as u64)?;
    // The image CUPTI initialises to learn the blank pattern is the pool's first image.
    let first = sampler.counter_data(&mut list, plan.samples_per_image)?;
    let template = BlankImage::from_blank(&first, layout);
    let mut evaluators = Vec::new();
    for _ in 0..setup.eval_threads.max(1) {
        let mut h = ProfilerHost::new(
            cupti,
            HostKind::PmSampling,
            &setup.chip,
            Some(setup.availability.clone()),
        )?;
        h.add_metrics(&mut list)?;
        evaluators.push(CuptiEvaluator::new(h, &setup.metrics)?);
    }
    Ok(Armed {
        plan,
        bytes_per_sample,
        source: CuptiSource {
            sampler,
            cupti: cupti.clone(),
            config_image: setup.config_image.clone(),
            hw_buffer_bytes: setup.hw_buffer_bytes,
            interval_ns: setup.interval_ns,
            ctx,
        },
        template,
        first,
        evaluators,
    })
}

fn device_main(
    setup: DeviceSetup,
    cupti: Cupti,
    out: &Sender<SinkMsg>,
    stop: &AtomicBool,
    counters: &Arc<DeviceCounters>,
    ready: Sender<(DeviceId, Result<Ready, ArmError>)>,
    go: Receiver<bool>,
) -> Result<(), PipelineError> {
    let armed = match arm(&setup, &cupti) {
        Ok(a) => a,
        Err(e) => {
            let _ = ready.send((setup.device, Err(e)));
            return Ok(());
        }
    };
    let image_bytes = armed.template.size_bytes();
    counters
        .image_bytes
        .store(image_bytes as u64, Ordering::Relaxed);
    let _ = ready.send((
        setup.device,
        Ok(Ready {
            image_bytes,
            samples_per_image: armed.plan.samples_per_image,
            bytes_per_sample: armed.bytes_per_sample,
        }),
    ));
    drop(ready);
    if !matches!(go.recv(), Ok(true)) {
        return Ok(());
    }
    let Armed {
        plan,
        bytes_per_sample,
        source,
        template,
        first,
        evaluators,
    } = armed;
    counters
        .reset_by_prefix
        .store(u64::from(template.layout().is_some()), Ordering::Relaxed);
    counters
        .bytes_per_sample
        .store(bytes_per_sample, Ordering::Relaxed);
    let parts = DeviceParts {
        source,
        images: Arc::new(CuptiImages::new(template)),
        evaluators,
        first_image: Some(first),
    };
    let cfg = DecodeConfig {
        device: setup.device,
        index: setup.index,
        interval_ns: setup.interval_ns,
        plan,
    };
    run_device(parts, &cfg, out, stop, counters)
}

/// Arms a device again after a pause, as the session armed it: a new device thread on the
/// same setup, started once it reports ready.
pub struct Rearm {
    pub setup: DeviceSetup,
    pub cupti: Cupti,
    pub out: Sender<SinkMsg>,
    pub counters: Arc<DeviceCounters>,
}

impl super::pause::DeviceStarter for Rearm {
    fn start(&mut self, stop: Arc<AtomicBool>) -> Result<super::pause::Running, ArmError> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let t = spawn_device(
            self.setup.clone(),
            self.cupti.clone(),
            self.out.clone(),
            stop,
            Arc::clone(&self.counters),
            ready_tx,
        )
        .map_err(|e| CuptiError::InvalidArgument(format!("cannot start a device thread: {e}")))?;
        let refused = match ready_rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok((_, Ok(_))) => None,
            Ok((_, Err(e))) => Some(e),
            Err(_) => Some(ArmError::Cupti(CuptiError::InvalidArgument(
                "the device thread did not get ready within 120 s".into(),
            ))),
        };
        if let Some(e) = refused {
            // Dropping `go` tells the thread to disarm and exit.
            drop(t.go);
            let _ = t.handle.join();
            return Err(e);
        }
        let started_ns = crate::now_unix_ns();
        let _ = t.go.send(true);
        Ok(super::pause::Running {
            handle: t.handle,
            started_ns,
        })
    }

    fn forget_error(&mut self) {
        if let Ok(mut slot) = self.counters.error.lock() {
            *slot = None;
        }
    }
}
