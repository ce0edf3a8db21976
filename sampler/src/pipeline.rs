//! The PM-sampling pipeline of one device, and the single sink that writes everything.
//!
//! ```text
//!  device thread (1 per GPU)          evaluator threads (N per GPU)         sink thread (1)
//!  ─────────────────────────          ─────────────────────────────         ───────────────
//!  decode HW buffer → image A   ──▶   evaluate sealed image, sample by  ──▶ reorder by seq,
//!  seal A after 20 ms / N samples     sample, into a SampleBatch;            write the trace,
//!  read its timestamps, find holes    restore the written prefix of the      feed the live view,
//!  (drop records) ; go on with B ◀──  image from the blank; hand it back     count drops
//! ```
//!
//! The decoder never lets an image get near full (see [`crate::sizing`]), never evaluates, and
//! never initialises images through CUPTI after start: the evaluators restore the bytes decode
//! wrote from a [`BlankImage`], and check now and then that decode wrote nowhere else. Every hole
//! in the timestamps becomes a drop record ([`crate::gaps`]).

use crate::gaps::{GapDetector, Verdict};
use crate::sizing::ImagePlan;
use cufall_cupti::host::MetricList;
use cufall_cupti::{
    BlankImage, CounterData, Cupti, CuptiError, DecodeStop, HostKind, PmSampler, ProfilerHost,
};
use cufall_live::{LiveEvent, LiveSender};
use cufall_trace::TraceWriter;
use cufall_trace::model::{
    ApiCall, CaptureEvent, DeviceId, DropReason, DropRecord, KernelRecord, NvmlRow, NvtxRange,
    SampleBatch,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What flows into the sink.
pub(crate) enum SinkMsg {
    Samples {
        device: DeviceId,
        seq: u64,
        batch: SampleBatch,
    },
    Drops(Vec<DropRecord>),
    Nvml(Vec<NvmlRow>),
    Message(String),
    /// Captured from the profiled program (see [`crate::capture`]).
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    Api(Vec<ApiCall>),
    Capture(Vec<CaptureEvent>),
}

/// Live counters of one device's pipeline (read by status lines and benchmarks).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    pub decode_calls: AtomicU64,
    pub samples_decoded: AtomicU64,
    pub samples_evaluated: AtomicU64,
    pub images_sealed: AtomicU64,
    pub images_allocated: AtomicU64,
    pub image_bytes: AtomicU64,
    pub counter_data_full: AtomicU64,
    pub hw_overflows: AtomicU64,
    pub restarts: AtomicU64,
    pub decode_errors: AtomicU64,
    pub eval_errors: AtomicU64,
    pub eval_ns: AtomicU64,
    pub decode_ns: AtomicU64,
    pub partial_at_seal: AtomicU64,
    pub max_seam_ns: AtomicU64,
    /// CPU time spent making used images blank again.
    pub reset_ns: AtomicU64,
    /// Bytes written making used images blank again.
    pub reset_bytes: AtomicU64,
    /// 1 while used images are restored by their written prefix, 0 when whole (the layout is
    /// unknown, or decode was seen writing beyond the prefix).
    pub reset_by_prefix: AtomicU64,
    /// Evaluator threads running.
    pub evaluators_alive: AtomicU64,
    /// Images made blank again so far.
    pub images_restored: AtomicU64,
    /// Longest single `cuptiPmSamplingDecodeData` call.
    pub max_decode_call_ns: AtomicU64,
    /// Longest time between the starts of two decode calls: how long the hardware buffer
    /// filled unread.
    pub max_decode_gap_ns: AtomicU64,
    /// Most samples one decode call moved.
    pub max_samples_per_decode: AtomicU64,
    /// Decode calls that started more than [`SLOW_DECODE`] after the previous one.
    pub late_decodes: AtomicU64,
    pub bytes_per_sample: AtomicU64,
    pub samples_per_image: AtomicU64,
    /// Why the device thread ended early, if it did.
    pub error: Mutex<Option<String>>,
}

/// Everything a device thread needs to set up PM sampling.
#[derive(Clone, Debug)]
pub(crate) struct DeviceSetup {
    pub device: DeviceId,
    pub index: usize,
    pub chip: String,
    pub availability: Vec<u8>,
    pub metrics: Vec<String>,
    pub config_image: Vec<u8>,
    pub interval_ns: u64,
    pub hw_buffer_bytes: usize,
    pub eval_threads: usize,
    pub plan: ImagePlan,
}

/// Reported by a device thread once it is configured and ready to start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ready {
    pub image_bytes: usize,
}

pub(crate) struct DeviceThread {
    pub handle: JoinHandle<Result<(), String>>,
    pub go: Sender<bool>,
}

/// Spawns the device thread; it enables and configures PM sampling, reports on `ready`, then
/// waits for `go` before starting.
pub(crate) fn spawn_device(
    setup: DeviceSetup,
    cupti: Cupti,
    out: Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
    counters: Arc<DeviceCounters>,
    ready: Sender<(DeviceId, Result<Ready, CuptiError>)>,
) -> std::io::Result<DeviceThread> {
    let (go_tx, go_rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("cufall-gpu{}", setup.index))
        .spawn(move || {
            let r = device_main(setup, cupti, out, stop, Arc::clone(&counters), ready, go_rx);
            if let Err(e) = &r
                && let Ok(mut slot) = counters.error.lock()
            {
                *slot = Some(e.clone());
            }
            r
        })?;
    Ok(DeviceThread { handle, go: go_tx })
}

fn enable(
    cupti: &Cupti,
    index: usize,
) -> Result<(PmSampler, Option<cufall_cupti::PrimaryContext>), CuptiError> {
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

/// A decode call this long after the previous one (twice the decode period) is counted as late
/// (`late_decodes`).
pub const SLOW_DECODE: Duration = Duration::from_millis(50);

/// Every this many images, an evaluator checks that decode wrote nothing beyond the prefix it
/// restores (always on a device's first image).
const LAYOUT_CHECK_EVERY: u64 = 64;

struct Armed {
    plan: ImagePlan,
    bytes_per_sample: u64,
    sampler: PmSampler,
    _ctx: Option<cufall_cupti::PrimaryContext>,
    template: BlankImage,
    /// The blank image CUPTI initialised to learn the template: the first image of the pool.
    first: CounterData,
    hosts: Vec<ProfilerHost>,
}

fn arm(setup: &DeviceSetup, cupti: &Cupti) -> Result<Armed, CuptiError> {
    let (mut sampler, ctx) = enable(cupti, setup.index)?;
    sampler.set_config(
        &setup.config_image,
        setup.hw_buffer_bytes,
        setup.interval_ns,
    )?;
    let mut list = MetricList::new(&setup.metrics)?;
    let layout = sampler.image_layout(&mut list)?;
    let bytes_per_sample = match layout {
        Some(l) => l.bytes_per_sample as u64,
        None => {
            let one = sampler.counter_data_size(&mut list, 1)?;
            let hundred_one = sampler.counter_data_size(&mut list, 101)?;
            (hundred_one.saturating_sub(one) / 100).max(1) as u64
        }
    };
    let plan = setup
        .plan
        .capped(bytes_per_sample, crate::sizing::MAX_IMAGE_BYTES);
    // The image CUPTI initialises to learn the blank pattern is the pool's first image.
    let first = sampler.counter_data(&mut list, plan.samples_per_image)?;
    let template = BlankImage::from_blank(&first, layout);
    let mut hosts = Vec::new();
    for _ in 0..setup.eval_threads.max(1) {
        let mut h = ProfilerHost::new(
            cupti,
            HostKind::PmSampling,
            &setup.chip,
            Some(setup.availability.clone()),
        )?;
        h.add_metrics(&mut list)?;
        hosts.push(h);
    }
    Ok(Armed {
        plan,
        bytes_per_sample,
        sampler,
        _ctx: ctx,
        template,
        first,
        hosts,
    })
}

struct EvalJob {
    seq: u64,
    image: CounterData,
    /// (sample index, start_ns, end_ns) of the samples to evaluate.
    samples: Vec<(usize, i64, i64)>,
    /// Samples decode populated in the image (the prefix to restore afterwards).
    touched: usize,
}

fn device_main(
    setup: DeviceSetup,
    cupti: Cupti,
    out: Sender<SinkMsg>,
    stop: Arc<AtomicBool>,
    counters: Arc<DeviceCounters>,
    ready: Sender<(DeviceId, Result<Ready, CuptiError>)>,
    go: Receiver<bool>,
) -> Result<(), String> {
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
    let _ = ready.send((setup.device, Ok(Ready { image_bytes })));
    drop(ready);
    if !matches!(go.recv(), Ok(true)) {
        return Ok(());
    }
    let Armed {
        plan,
        bytes_per_sample,
        mut sampler,
        _ctx,
        template,
        first,
        hosts,
    } = armed;
    counters
        .reset_by_prefix
        .store(u64::from(template.layout().is_some()), Ordering::Relaxed);
    counters
        .samples_per_image
        .store(u64::from(plan.samples_per_image), Ordering::Relaxed);
    counters
        .bytes_per_sample
        .store(bytes_per_sample, Ordering::Relaxed);
    let template = Arc::new(template);

    // Evaluators.
    let (job_tx, job_rx) = mpsc::channel::<EvalJob>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (free_tx, free_rx) = mpsc::channel::<CounterData>();
    let mut evaluators = Vec::new();
    for (i, host) in hosts.into_iter().enumerate() {
        let job_rx = Arc::clone(&job_rx);
        let free_tx = free_tx.clone();
        let out = out.clone();
        let template = Arc::clone(&template);
        let counters = Arc::clone(&counters);
        let metrics = setup.metrics.clone();
        let device = setup.device;
        counters.evaluators_alive.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name(format!("cufall-eval{}-{i}", setup.index))
            .spawn(move || {
                evaluator_main(
                    host, metrics, device, job_rx, free_tx, out, template, counters,
                )
            });
        match spawned {
            Ok(h) => evaluators.push(h),
            Err(e) => return Err(format!("cannot start an evaluation thread: {e}")),
        }
    }
    // Kept for the threads that allocate extra images; the decode loop never sends on it.
    let spare_tx = free_tx;

    let setup = DeviceSetup { plan, ..setup };
    let result = decode_loop(
        &setup,
        &cupti,
        &mut sampler,
        (&template, first),
        &out,
        &stop,
        &counters,
        &job_tx,
        (&free_rx, &spare_tx),
    );
    let _ = sampler.stop();
    drop(job_tx);
    for h in evaluators {
        let _ = h.join();
    }
    drop(sampler);
    result
}

#[allow(clippy::too_many_arguments)]
fn decode_loop(
    setup: &DeviceSetup,
    cupti: &Cupti,
    sampler: &mut PmSampler,
    (template, first): (&Arc<BlankImage>, CounterData),
    out: &Sender<SinkMsg>,
    stop: &AtomicBool,
    counters: &DeviceCounters,
    jobs: &Sender<EvalJob>,
    (free, spare_tx): (&Receiver<CounterData>, &Sender<CounterData>),
) -> Result<(), String> {
    let plan = setup.plan;
    let device = setup.device;
    let mut gaps = GapDetector::new(device, i64::try_from(setup.interval_ns).unwrap_or(i64::MAX));
    let mut allocated = 0usize;
    let mut pool: Vec<CounterData> = vec![first];
    allocated += 1;
    while allocated < plan.initial_images {
        pool.push(template.new_image());
        allocated += 1;
    }
    counters
        .images_allocated
        .store(allocated as u64, Ordering::Relaxed);
    let Some(mut cur) = pool.pop() else {
        return Err("no counter data image".into());
    };
    let mut seq = 0u64;
    let mut image_started = Instant::now();
    let mut consecutive_errors = 0u32;
    let mut last_end: Option<i64> = None;
    let mut drained_after_stop = 0u32;
    let mut stop_iterations = 0u32;

    gaps.started_at(crate::now_unix_ns());
    sampler
        .start()
        .map_err(|e| format!("{device}: could not start PM sampling: {e}"))?;

    let mut sealed_for_stop = false;
    let mut stopped_ns: Option<i64> = None;
    let mut populated_before = 0usize;
    let mut last_decode_start: Option<Instant> = None;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        // The samples the hardware still holds at Stop are decoded into the room the current image
        // has left, and those that do not fit are lost (COUNTER_DATA_FULL). So before stopping,
        // hand the current image on once and stop with an empty one in hand.
        let mut seal_before_stop = false;
        if stopping && sampler.is_running() {
            if !sealed_for_stop && cur.info().map(|i| i.completed > 0).unwrap_or(false) {
                seal_before_stop = true;
            } else {
                let _ = sampler.stop();
                stopped_ns = Some(crate::now_unix_ns());
            }
            sealed_for_stop = true;
        }
        let mut force_seal = seal_before_stop;
        let mut restart = false;
        let t0 = Instant::now();
        if let Some(prev) = last_decode_start.replace(t0) {
            let gap = t0.duration_since(prev);
            counters
                .max_decode_gap_ns
                .fetch_max(gap.as_nanos() as u64, Ordering::Relaxed);
            if gap > SLOW_DECODE {
                counters.late_decodes.fetch_add(1, Ordering::Relaxed);
            }
        }
        let outcome = sampler.decode(&mut cur);
        let call_ns = t0.elapsed().as_nanos() as u64;
        counters.decode_ns.fetch_add(call_ns, Ordering::Relaxed);
        counters
            .max_decode_call_ns
            .fetch_max(call_ns, Ordering::Relaxed);
        counters.decode_calls.fetch_add(1, Ordering::Relaxed);
        let mut end_of_records = false;
        match outcome {
            Ok(o) => {
                consecutive_errors = 0;
                if o.overflow {
                    counters.hw_overflows.fetch_add(1, Ordering::Relaxed);
                    gaps.mark_suspect(DropReason::HardwareBufferOverflow);
                }
                match o.stop {
                    DecodeStop::CounterDataFull => {
                        counters.counter_data_full.fetch_add(1, Ordering::Relaxed);
                        gaps.mark_suspect(DropReason::CounterDataFull);
                        force_seal = true;
                    }
                    DecodeStop::EndOfRecords => end_of_records = true,
                    DecodeStop::Other => {}
                }
            }
            Err(CuptiError::HardwareBufferOverflow { .. }) => {
                counters.hw_overflows.fetch_add(1, Ordering::Relaxed);
                gaps.mark_suspect(DropReason::HardwareBufferOverflow);
                let _ = out.send(SinkMsg::Message(format!(
                    "{device}: the PM sampling hardware buffer overflowed (decoding fell behind); restarting sampling. Use a longer --interval or fewer metrics to avoid this."
                )));
                force_seal = true;
                restart = !stopping;
                end_of_records = stopping;
            }
            Err(e) => {
                counters.decode_errors.fetch_add(1, Ordering::Relaxed);
                consecutive_errors += 1;
                if consecutive_errors >= 20 || stopping {
                    let msg = format!("{device}: PM sampling decode keeps failing: {e}");
                    let _ = out.send(SinkMsg::Message(msg.clone()));
                    if !stopping {
                        return Err(msg);
                    }
                    end_of_records = true;
                }
            }
        }

        let info = cur.info().unwrap_or_default();
        counters.max_samples_per_decode.fetch_max(
            info.populated.saturating_sub(populated_before) as u64,
            Ordering::Relaxed,
        );
        populated_before = info.populated;
        let full_soon = info.populated as u64 * 10 >= u64::from(plan.samples_per_image) * 9;
        let due = info.completed >= plan.seal_after_samples as usize
            || (info.completed > 0 && image_started.elapsed() >= plan.seal_period);
        let settled = info.populated == info.completed;
        let finishing = stopping && end_of_records;
        if info.completed > 0 && (force_seal || full_soon || finishing || (due && settled)) {
            if info.populated > info.completed {
                counters
                    .partial_at_seal
                    .fetch_add((info.populated - info.completed) as u64, Ordering::Relaxed);
            }
            let mut samples = Vec::with_capacity(info.completed);
            let mut drops = Vec::new();
            for i in 0..info.completed {
                let (s, e) = match sampler.sample_times(&cur, i) {
                    Ok((s, e)) => (s as i64, e as i64),
                    Err(_) => (0, 0),
                };
                if let Some(prev) = last_end
                    && s >= prev
                {
                    counters
                        .max_seam_ns
                        .fetch_max((s - prev) as u64, Ordering::Relaxed);
                }
                if e > 0 {
                    last_end = Some(e);
                }
                let (verdict, rec) = gaps.observe(s, e);
                if let Some(r) = rec {
                    drops.push(r);
                }
                if verdict == Verdict::Keep {
                    samples.push((i, s, e));
                }
            }
            counters
                .samples_decoded
                .fetch_add(info.completed as u64, Ordering::Relaxed);
            counters.images_sealed.fetch_add(1, Ordering::Relaxed);
            if !drops.is_empty() {
                let _ = out.send(SinkMsg::Drops(drops));
            }
            let next = match pool.pop() {
                Some(img) => img,
                None => match free.try_recv() {
                    Ok(img) => img,
                    Err(TryRecvError::Empty) => {
                        // Making a new image writes all of it (~130 ms for 150 MB): never on this
                        // thread. Take whichever comes first, a new one or one the evaluators
                        // hand back; the image margin covers the wait.
                        if allocated < plan.max_images {
                            allocated += 1;
                            counters
                                .images_allocated
                                .store(allocated as u64, Ordering::Relaxed);
                            let (tx, t) = (spare_tx.clone(), Arc::clone(template));
                            let _ = std::thread::Builder::new()
                                .name(format!("cufall-img{}", setup.index))
                                .spawn(move || {
                                    let _ = tx.send(t.new_image());
                                });
                        }
                        wait_for_image(free, counters, device)?
                    }
                    Err(TryRecvError::Disconnected) => {
                        return Err(format!("{device}: evaluation threads stopped"));
                    }
                },
            };
            let sealed = std::mem::replace(&mut cur, next);
            image_started = Instant::now();
            populated_before = 0;
            if jobs
                .send(EvalJob {
                    seq,
                    image: sealed,
                    samples,
                    touched: info.populated,
                })
                .is_err()
            {
                return Err(format!("{device}: evaluation threads stopped"));
            }
            seq += 1;
            // Take back any images the evaluators finished, so the pool stays warm.
            while let Ok(img) = free.try_recv() {
                pool.push(img);
            }
        }
        if restart {
            sampler
                .rearm(
                    cupti,
                    &setup.config_image,
                    setup.hw_buffer_bytes,
                    setup.interval_ns,
                )
                .and_then(|_| sampler.start())
                .map_err(|e| {
                    format!("{device}: could not restart PM sampling after an overflow: {e}")
                })?;
            // The samples between the last kept one and the restart are gone: say so.
            if let Some(r) = gaps.restarted_at(crate::now_unix_ns()) {
                let _ = out.send(SinkMsg::Drops(vec![r]));
            }
            last_end = None;
            counters.restarts.fetch_add(1, Ordering::Relaxed);
        }
        if stopping {
            stop_iterations += 1;
            if end_of_records && info.completed == 0 {
                drained_after_stop += 1;
                if drained_after_stop >= 2 {
                    break;
                }
            }
            // Never spin forever on a device that keeps answering after Stop.
            if stop_iterations > 2_000 {
                break;
            }
            continue;
        }
        if !force_seal {
            // Decode calls start every `decode_period` (a slow call shortens the sleep), so one
            // call moves about one period of samples however busy the decoder is.
            std::thread::sleep(plan.decode_period.saturating_sub(t0.elapsed()));
        }
    }
    // An overflow while draining loses the tail: that is a hole too.
    if let Some(r) = gaps.finish_at(stopped_ns.unwrap_or_else(crate::now_unix_ns)) {
        let _ = out.send(SinkMsg::Drops(vec![r]));
    }
    Ok(())
}

/// Waits for a blank image. The channel stays open (the decode loop keeps a sender for image
/// allocation), so a dead evaluator pool is noticed through `evaluators_alive`.
fn wait_for_image(
    free: &Receiver<CounterData>,
    counters: &DeviceCounters,
    device: DeviceId,
) -> Result<CounterData, String> {
    loop {
        match free.recv_timeout(Duration::from_millis(100)) {
            Ok(img) => return Ok(img),
            Err(RecvTimeoutError::Timeout)
                if counters.evaluators_alive.load(Ordering::Relaxed) > 0 => {}
            Err(_) => return Err(format!("{device}: evaluation threads stopped")),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn evaluator_main(
    host: ProfilerHost,
    metrics: Vec<String>,
    device: DeviceId,
    jobs: Arc<Mutex<Receiver<EvalJob>>>,
    free: Sender<CounterData>,
    out: Sender<SinkMsg>,
    template: Arc<BlankImage>,
    counters: Arc<DeviceCounters>,
) {
    // Counted up by the spawner (so the decode loop never sees 0 before this thread runs).
    struct Alive<'a>(&'a DeviceCounters);
    impl Drop for Alive<'_> {
        fn drop(&mut self) {
            self.0.evaluators_alive.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _alive = Alive(&counters);
    let Ok(mut list) = MetricList::new(&metrics) else {
        return;
    };
    let mut values = vec![0.0f64; metrics.len()];
    loop {
        let job = {
            let Ok(rx) = jobs.lock() else { return };
            rx.recv()
        };
        let Ok(mut job) = job else { return };
        let t0 = Instant::now();
        let mut batch = SampleBatch::new(device, metrics.len());
        let mut drops = Vec::new();
        for &(i, s, e) in &job.samples {
            match host.evaluate(job.image.bytes(), i, &mut list, &mut values) {
                Ok(()) => batch.push(s, e, &values),
                Err(_) => {
                    counters.eval_errors.fetch_add(1, Ordering::Relaxed);
                    drops.push(DropRecord {
                        device,
                        start_ns: s,
                        end_ns: e,
                        reason: DropReason::DecodeError,
                        lost_samples: Some(1),
                    });
                }
            }
        }
        counters
            .samples_evaluated
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if !drops.is_empty() {
            let _ = out.send(SinkMsg::Drops(drops));
        }
        let _ = out.send(SinkMsg::Samples {
            device,
            seq: job.seq,
            batch,
        });
        counters
            .eval_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let t = Instant::now();
        let written = restore_image(
            &template,
            &mut job.image,
            job.touched,
            &counters,
            &out,
            device,
        );
        counters
            .reset_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        counters
            .reset_bytes
            .fetch_add(written as u64, Ordering::Relaxed);
        if free.send(job.image).is_err() {
            // The decoder is gone; keep draining jobs so their samples still reach the sink.
        }
    }
}

/// Makes a used image blank again: its written prefix when the layout is known and holds,
/// the whole image otherwise. On a device's first image and every [`LAYOUT_CHECK_EVERY`]th,
/// first checks that decode wrote nothing beyond that prefix; if it did, the layout is not
/// trusted again on this device and the user is told (correctness is kept, CPU cost rises).
fn restore_image(
    template: &BlankImage,
    image: &mut CounterData,
    touched: usize,
    counters: &DeviceCounters,
    out: &Sender<SinkMsg>,
    device: DeviceId,
) -> usize {
    let prefix_ok = counters.reset_by_prefix.load(Ordering::Relaxed) == 1;
    let Some(layout) = template.layout().filter(|_| prefix_ok) else {
        return template.restore(image, None);
    };
    let n = counters.images_restored.fetch_add(1, Ordering::Relaxed);
    if n.is_multiple_of(LAYOUT_CHECK_EVERY)
        && let Some(at) = template.first_difference_after(image, layout.prefix_bytes(touched))
    {
        counters.reset_by_prefix.store(0, Ordering::Relaxed);
        let _ = out.send(SinkMsg::Message(format!(
            "{device}: CUPTI wrote a counter-data image beyond the samples it decoded (byte {at} of {}, {touched} samples); restoring whole images from now on, which costs more CPU",
            template.size_bytes()
        )));
        return template.restore(image, None);
    }
    template.restore(image, Some(touched))
}

/// Drop counts by reason: records and estimated lost samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DropTally {
    pub by_reason: BTreeMap<&'static str, (u64, u64)>,
}

impl DropTally {
    pub fn add(&mut self, r: &DropRecord) {
        let e = self.by_reason.entry(r.reason.as_str()).or_default();
        e.0 += 1;
        e.1 += r.lost_samples.unwrap_or(0);
    }

    /// Records other than warm-up: real losses.
    pub fn losses(&self) -> (u64, u64) {
        self.by_reason
            .iter()
            .filter(|(k, _)| **k != DropReason::Warmup.as_str())
            .fold((0, 0), |(a, b), (_, (c, d))| (a + c, b + d))
    }
}

/// State the sink shares with the session handle while running.
#[derive(Debug, Default)]
pub struct SinkShared {
    pub samples_written: AtomicU64,
    pub nvml_rows: AtomicU64,
    pub tally: Mutex<DropTally>,
    pub error: Mutex<Option<String>>,
    pub messages: Mutex<Vec<String>>,
}

pub(crate) struct SinkResult {
    pub writer: Option<TraceWriter>,
}

/// The one thread that writes the trace and feeds the live view, in per-device sequence order.
pub(crate) fn sink_main(
    rx: Receiver<SinkMsg>,
    writer: Option<TraceWriter>,
    live: Option<LiveSender>,
    shared: Arc<SinkShared>,
) -> SinkResult {
    let mut pending: HashMap<DeviceId, (u64, BTreeMap<u64, SampleBatch>)> = HashMap::new();
    let mut trace = TraceSink {
        writer,
        failed: false,
        shared: &shared,
    };
    loop {
        let msg = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Some(SinkMsg::Samples { device, seq, batch }) => {
                let entry = pending.entry(device).or_default();
                entry.1.insert(seq, batch);
                while let Some(b) = entry.1.remove(&entry.0) {
                    entry.0 += 1;
                    if b.is_empty() {
                        continue;
                    }
                    shared
                        .samples_written
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    trace.write(|w| w.append_samples(&b));
                    if let Some(l) = &live {
                        l.send(LiveEvent::Samples(b));
                    }
                }
            }
            Some(SinkMsg::Drops(rows)) => {
                if let Ok(mut t) = shared.tally.lock() {
                    rows.iter().for_each(|r| t.add(r));
                }
                trace.write(|w| w.append_drops(&rows));
                if let Some(l) = &live {
                    for r in rows {
                        l.send(LiveEvent::Drop(r));
                    }
                }
            }
            Some(SinkMsg::Nvml(rows)) => {
                shared
                    .nvml_rows
                    .fetch_add(rows.len() as u64, Ordering::Relaxed);
                trace.write(|w| w.append_nvml(&rows));
                if let Some(l) = &live {
                    l.send(LiveEvent::Nvml(rows));
                }
            }
            Some(SinkMsg::Nvtx(rows)) => {
                trace.write(|w| w.append_nvtx(&rows));
                if let Some(l) = &live {
                    l.send(LiveEvent::Nvtx(rows));
                }
            }
            Some(SinkMsg::Kernels(rows)) => {
                trace.write(|w| w.append_kernels(&rows));
                if let Some(l) = &live {
                    l.send(LiveEvent::Kernels(rows));
                }
            }
            Some(SinkMsg::Api(rows)) => trace.write(|w| w.append_api(&rows)),
            Some(SinkMsg::Capture(rows)) => trace.write(|w| w.append_capture(&rows)),
            Some(SinkMsg::Message(m)) => {
                if let Ok(mut v) = shared.messages.lock() {
                    v.push(m.clone());
                }
                if let Some(l) = &live {
                    l.send(LiveEvent::Message(m));
                }
            }
            None => {}
        }
        trace.write(|w| w.flush_if_due());
    }
    // Anything still out of order (a lost sequence number) is written rather than kept back.
    for (_, (_, rest)) in pending {
        for (_, b) in rest {
            shared
                .samples_written
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            trace.write(|w| w.append_samples(&b));
        }
    }
    if let Some(l) = &live {
        l.send(LiveEvent::End);
    }
    SinkResult {
        writer: trace.writer,
    }
}

/// The trace writer of the sink: after the first failed write it writes nothing more (the live
/// view keeps going) and the failure is reported once, through [`SinkShared::error`].
struct TraceSink<'a> {
    writer: Option<TraceWriter>,
    failed: bool,
    shared: &'a SinkShared,
}

impl TraceSink<'_> {
    fn write(&mut self, f: impl FnOnce(&mut TraceWriter) -> cufall_trace::Result<()>) {
        let Some(w) = self.writer.as_mut().filter(|_| !self.failed) else {
            return;
        };
        if let Err(e) = f(w) {
            self.failed = true;
            if let Ok(mut slot) = self.shared.error.lock()
                && slot.is_none()
            {
                *slot = Some(format!("writing the trace failed: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_live::FeedInfo;
    use cufall_trace::model::{DeviceInfo, Manifest, MetricInfo, SamplingInfo};
    use cufall_trace::{Trace, WriterOptions};

    const T0: i64 = 1_764_460_800_000_000_000;

    fn manifest() -> Manifest {
        let mut m = Manifest::new("test", T0);
        m.devices = (0..2)
            .map(|i| DeviceInfo {
                id: DeviceId(i),
                name: "GPU".into(),
                chip: "GH100".into(),
                uuid: format!("GPU-{i}"),
                pci_bus_id: String::new(),
                sm_count: None,
                memory_total_bytes: None,
            })
            .collect();
        m.sampling = Some(SamplingInfo {
            interval_ns: 10_000,
            metrics: vec![MetricInfo {
                name: "m.avg".into(),
                unit: "%".into(),
                description: String::new(),
            }],
            source: "test".into(),
        });
        m
    }

    fn batch(device: u32, t0: i64, n: usize, columns: usize) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(device), columns);
        for i in 0..n {
            let s = t0 + i as i64 * 10_000;
            b.push(s, s + 10_000, &vec![i as f64; columns]);
        }
        b
    }

    fn live() -> (LiveSender, cufall_live::LiveReceiver) {
        let m = manifest();
        cufall_live::feed(
            FeedInfo {
                devices: m.devices.clone(),
                metrics: m.sampling.map(|s| s.metrics).unwrap_or_default(),
                heatmaps: Vec::new(),
                interval_ns: 10_000,
                nvml_interval_ns: 10_000_000,
                counters_unavailable: None,
            },
            64,
        )
    }

    fn sample_starts(events: &[LiveEvent]) -> Vec<(u32, i64)> {
        events
            .iter()
            .filter_map(|e| match e {
                LiveEvent::Samples(b) => Some((b.device.0, b.start_ns[0])),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_sink_writes_batches_in_sequence_order_and_tallies_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sink.cufall");
        let writer = TraceWriter::create(&path, manifest(), WriterOptions::default()).unwrap();
        let (live_tx, live_rx) = live();
        let (tx, rx) = mpsc::channel();
        // Device 0's second image is evaluated first; device 1 is in order; seq 2 of device 1
        // never comes (its batch is written at the end rather than kept back).
        let send = |m| tx.send(m).unwrap();
        send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 1,
            batch: batch(0, T0 + 50_000, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(1),
            seq: 0,
            batch: batch(1, T0, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 0,
            batch: batch(0, T0, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(1),
            seq: 3,
            batch: batch(1, T0 + 150_000, 5, 1),
        });
        send(SinkMsg::Drops(vec![
            DropRecord {
                device: DeviceId(1),
                start_ns: T0 + 50_000,
                end_ns: T0 + 150_000,
                reason: DropReason::CounterDataFull,
                lost_samples: Some(10),
            },
            DropRecord {
                device: DeviceId(0),
                start_ns: T0 - 10_000,
                end_ns: T0,
                reason: DropReason::Warmup,
                lost_samples: Some(1),
            },
        ]));
        send(SinkMsg::Nvml(vec![NvmlRow {
            device: DeviceId(0),
            t_ns: T0,
            gpu_util_pct: Some(50),
            ..NvmlRow::default()
        }]));
        send(SinkMsg::Message("hello".into()));
        drop(tx);
        let shared = Arc::new(SinkShared::default());
        let out = sink_main(rx, Some(writer), Some(live_tx), Arc::clone(&shared));
        out.writer.unwrap().finish(T0 + 1_000_000).unwrap();

        assert_eq!(shared.samples_written.load(Ordering::Relaxed), 20);
        assert_eq!(shared.nvml_rows.load(Ordering::Relaxed), 1);
        assert_eq!(shared.tally.lock().unwrap().losses(), (1, 10));
        assert_eq!(*shared.messages.lock().unwrap(), vec!["hello".to_string()]);
        assert_eq!(*shared.error.lock().unwrap(), None);

        let events = live_rx.drain(Duration::from_millis(50));
        assert_eq!(
            sample_starts(&events),
            vec![(1, T0), (0, T0), (0, T0 + 50_000)],
            "each device in sequence order; the orphan is not sent live"
        );
        assert!(matches!(events.last(), Some(LiveEvent::End)));

        let t = Trace::open(&path).unwrap();
        let mut starts: Vec<(u32, i64)> = t
            .sample_batches()
            .unwrap()
            .iter()
            .flat_map(|b| b.start_ns.iter().map(move |s| (b.device.0, *s)))
            .collect();
        assert_eq!(
            starts.len(),
            20,
            "the batch after the missing sequence number is kept"
        );
        starts.sort();
        assert_eq!(starts[0], (0, T0));
        assert_eq!(t.drops().unwrap().len(), 2);
        assert_eq!(t.nvml().unwrap().len(), 1);
    }

    #[test]
    fn a_failed_write_is_reported_once_and_the_live_view_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fail.cufall");
        let writer = TraceWriter::create(&path, manifest(), WriterOptions::default()).unwrap();
        let (live_tx, live_rx) = live();
        let (tx, rx) = mpsc::channel();
        // Two columns where the trace has one: the writer refuses the first batch.
        for seq in 0..3 {
            tx.send(SinkMsg::Samples {
                device: DeviceId(0),
                seq,
                batch: batch(0, T0 + seq as i64 * 50_000, 5, 2),
            })
            .unwrap();
        }
        drop(tx);
        let shared = Arc::new(SinkShared::default());
        let out = sink_main(rx, Some(writer), Some(live_tx), Arc::clone(&shared));
        assert!(out.writer.is_some());
        let err = shared
            .error
            .lock()
            .unwrap()
            .clone()
            .expect("the failure is reported");
        assert!(err.starts_with("writing the trace failed"), "{err}");
        let events = live_rx.drain(Duration::from_millis(50));
        assert_eq!(
            sample_starts(&events).len(),
            3,
            "the live view got every batch"
        );
    }
}
