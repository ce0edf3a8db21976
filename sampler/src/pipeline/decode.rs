//! The decode state machine of one device.
//!
//! Each turn of the loop makes one decode call into the current image, then maybe *seals* the
//! image (reads its samples' timestamps, records holes, hands it to the evaluators in chunks and
//! goes on with a blank one), maybe re-arms the device after a hardware-buffer overflow, and sleeps
//! until the next decode period. When asked to stop, it seals what the current image holds, stops
//! sampling, and decodes what the hardware still holds until two calls in a row bring nothing.
//!
//! Everything it needs from CUPTI goes through [`PmSource`] and [`ImageStore`], so tests drive
//! it with a scripted fake (`sampler/tests/pipeline.rs`).

use super::counters::{DeviceCounters, SLOW_DECODE, call_size_bin};
use super::error::{PipelineError, error_chain};
use super::evaluate::{Chunk, EvalShared, Sealed, evaluator_main};
use super::source::{ImageStore, PmSource, SampleEvaluator};
use crate::holes::{HoleDetector, Verdict};
use crate::sink::SinkMsg;
use crate::sizing::ImagePlan;
use cufall_cupti::{CounterDataInfo, CuptiError, DecodeStop};
use cufall_trace::model::nanos_u64;
use cufall_trace::model::{DeviceId, DropReason, Nanos};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the decode loop of one device is configured with.
#[derive(Clone, Debug)]
pub struct DecodeConfig {
    pub device: DeviceId,
    /// CUDA ordinal (names the threads).
    pub index: usize,
    pub interval_ns: Nanos,
    pub plan: ImagePlan,
}

/// A device's pipeline before it runs: its source, images and evaluators.
pub struct DeviceParts<S: PmSource, M, E> {
    pub source: S,
    pub images: Arc<M>,
    /// One per evaluator thread.
    pub evaluators: Vec<E>,
    /// A blank image already made (on a GPU, the one CUPTI initialised to learn the pattern).
    pub first_image: Option<S::Image>,
}

/// After this many failed decode calls in a row the device gives up.
pub const MAX_CONSECUTIVE_DECODE_ERRORS: u32 = 20;
/// Samples below which an image is not split between evaluators.
pub const MIN_CHUNK_SAMPLES: usize = 256;

/// Runs one device's pipeline on this thread until `stop` is set and the hardware is drained (or
/// a failure ends it): evaluator threads, the decode loop, then stop and join.
pub fn run_device<S, M, E>(
    parts: DeviceParts<S, M, E>,
    cfg: &DecodeConfig,
    out: &Sender<SinkMsg>,
    stop: &AtomicBool,
    counters: &Arc<DeviceCounters>,
) -> Result<(), PipelineError>
where
    S: PmSource,
    M: ImageStore<S::Image>,
    E: SampleEvaluator<S::Image>,
{
    let DeviceParts {
        source,
        images,
        evaluators,
        first_image,
    } = parts;
    counters
        .image_bytes
        .store(images.image_bytes() as u64, Ordering::Relaxed);
    counters
        .samples_per_image
        .store(u64::from(cfg.plan.samples_per_image), Ordering::Relaxed);
    let (job_tx, job_rx) = mpsc::channel();
    let (free_tx, free_rx) = mpsc::channel();
    let last_failure = Arc::new(Mutex::new(None));
    let shared = Arc::new(EvalShared {
        jobs: Mutex::new(job_rx),
        free: free_tx.clone(),
        images: Arc::clone(&images),
        last_failure: Arc::clone(&last_failure),
    });
    let handles = spawn_evaluators(evaluators, &shared, cfg, counters)?;
    let n_eval = handles.len();
    // Only the evaluators hold the job queue: when the last one ends, sending a chunk fails.
    drop(shared);
    let mut dl = DecodeLoop::new(
        cfg,
        source,
        images,
        first_image,
        Links {
            out,
            stop,
            counters,
            jobs: job_tx,
            free: free_rx,
            spare: free_tx,
            evaluators: n_eval,
        },
    );
    let mut result = dl.run();
    let _ = dl.source.stop();
    // Dropping the rest of the loop closes the job queue: evaluators finish what is queued, then
    // exit. The device is disabled only after that, as it always was.
    let source = dl.into_source();
    if let Err(PipelineError::EvaluatorsGone { cause, .. }) = &mut result
        && let Ok(slot) = last_failure.lock()
        && let Some(c) = slot.as_ref()
    {
        cause.clone_from(c);
    }
    for h in handles {
        let _ = h.join();
    }
    drop(source);
    result
}

/// One thread per evaluator, sharing the job queue.
fn spawn_evaluators<I, M, E>(
    evaluators: Vec<E>,
    shared: &Arc<EvalShared<I, M>>,
    cfg: &DecodeConfig,
    counters: &Arc<DeviceCounters>,
) -> Result<Vec<std::thread::JoinHandle<()>>, PipelineError>
where
    I: Send + Sync + 'static,
    M: ImageStore<I>,
    E: SampleEvaluator<I>,
{
    let mut handles = Vec::new();
    for (i, eval) in evaluators.into_iter().enumerate() {
        let (shared, c) = (Arc::clone(shared), Arc::clone(counters));
        counters.evaluators_alive.fetch_add(1, Ordering::Relaxed);
        counters.evaluators.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name(format!("cufall-eval{}-{i}", cfg.index))
            .spawn(move || evaluator_main(eval, shared, c));
        match spawned {
            Ok(h) => handles.push(h),
            Err(source) => {
                counters.evaluators_alive.fetch_sub(1, Ordering::Relaxed);
                return Err(PipelineError::Spawn {
                    device: cfg.device,
                    what: "evaluation",
                    source,
                });
            }
        }
    }
    Ok(handles)
}

/// The channels and shared state the loop works with.
struct Links<'a, I> {
    out: &'a Sender<SinkMsg>,
    stop: &'a AtomicBool,
    counters: &'a Arc<DeviceCounters>,
    jobs: Sender<Chunk<I>>,
    free: Receiver<I>,
    /// Kept for the threads that make extra images (so `free` never disconnects).
    spare: Sender<I>,
    evaluators: usize,
}

/// Progress of a stop request.
#[derive(Default)]
struct Stopping {
    sealed_for_stop: bool,
    stopped_ns: Option<i64>,
    drained: u32,
    iterations: u32,
}

/// What one decode call asks of the rest of the turn.
#[derive(Default)]
struct Call {
    force_seal: bool,
    restart: bool,
    end_of_records: bool,
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Done,
}

struct DecodeLoop<'a, S: PmSource, M> {
    cfg: &'a DecodeConfig,
    source: S,
    images: Arc<M>,
    links: Links<'a, S::Image>,
    gaps: HoleDetector,
    pool: Vec<S::Image>,
    allocated: usize,
    cur: Option<S::Image>,
    seq: u64,
    image_started: Instant,
    consecutive_errors: u32,
    last_end: Option<i64>,
    populated_before: usize,
    last_decode_start: Option<Instant>,
    stopping: Stopping,
}

impl<'a, S, M> DecodeLoop<'a, S, M>
where
    S: PmSource,
    M: ImageStore<S::Image>,
{
    fn new(
        cfg: &'a DecodeConfig,
        source: S,
        images: Arc<M>,
        first: Option<S::Image>,
        links: Links<'a, S::Image>,
    ) -> Self {
        let mut pool: Vec<S::Image> = first.into_iter().collect();
        while pool.len() < cfg.plan.initial_images.max(1) {
            pool.push(images.new_image());
        }
        let allocated = pool.len();
        links
            .counters
            .images_allocated
            .store(allocated as u64, Ordering::Relaxed);
        let cur = pool.pop();
        DecodeLoop {
            cfg,
            source,
            images,
            links,
            gaps: HoleDetector::new(cfg.device, cfg.interval_ns.0),
            pool,
            allocated,
            cur,
            seq: 0,
            image_started: Instant::now(),
            consecutive_errors: 0,
            last_end: None,
            populated_before: 0,
            last_decode_start: None,
            stopping: Stopping::default(),
        }
    }

    fn into_source(self) -> S {
        self.source
    }

    fn device(&self) -> DeviceId {
        self.cfg.device
    }

    fn send(&self, m: SinkMsg) {
        let _ = self.links.out.send(m);
    }

    fn run(&mut self) -> Result<(), PipelineError> {
        self.gaps.started_at(self.source.now_ns());
        self.source.start().map_err(|source| PipelineError::Start {
            device: self.device(),
            source,
        })?;
        let result = loop {
            match self.step() {
                Ok(Flow::Continue) => {}
                Ok(Flow::Done) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = &result {
            self.salvage(e);
        }
        // An overflow while draining loses the tail: that is a hole too.
        let end = self
            .stopping
            .stopped_ns
            .unwrap_or_else(|| self.source.now_ns());
        if let Some(r) = self.gaps.finish_at(end) {
            self.send(SinkMsg::Drops(vec![r]));
        }
        result
    }

    /// The device is giving up: what the current image holds is sealed (evaluated, or recorded
    /// as lost), and everything after the last sample seen becomes a drop record.
    fn salvage(&mut self, e: &PipelineError) {
        let info = self.fill();
        if info.completed > 0 {
            let _ = self.seal(info);
        }
        self.gaps.mark_suspect(match e {
            PipelineError::EvaluatorsGone { .. } => DropReason::EvaluationFailed,
            _ => DropReason::DecodeError,
        });
        self.stopping.stopped_ns = Some(self.source.now_ns());
    }

    /// One decode call and what follows it.
    fn step(&mut self) -> Result<Flow, PipelineError> {
        let stopping = self.links.stop.load(Ordering::Relaxed);
        let seal_before_stop = self.begin_stop(stopping);
        let t0 = self.note_call_start();
        let (call, call_ns) = self.decode_call(stopping, t0)?;
        let info = self.fill();
        self.account_call(call_ns, &info);
        let force_seal = call.force_seal || seal_before_stop;
        if self.seal_due(&info, force_seal, stopping && call.end_of_records) {
            self.seal(info)?;
        }
        if call.restart {
            self.restart()?;
        }
        if stopping {
            return Ok(self.stop_progress(call.end_of_records, info.completed));
        }
        if !force_seal {
            // Decode calls start every `decode_period` (a slow call shortens the sleep), so one
            // call moves about one period of samples however busy the decoder is.
            std::thread::sleep(self.cfg.plan.decode_period.saturating_sub(t0.elapsed()));
        }
        Ok(Flow::Continue)
    }

    /// The samples the hardware still holds at Stop are decoded into the room the current image
    /// has left, and those that do not fit are lost (COUNTER_DATA_FULL). So before stopping, the
    /// current image is handed on once and sampling stops with an empty one in hand. Returns
    /// whether this turn must seal for that.
    fn begin_stop(&mut self, stopping: bool) -> bool {
        if !stopping || !self.source.is_running() {
            return false;
        }
        let holds_samples = !self.stopping.sealed_for_stop && self.fill().completed > 0;
        if !holds_samples {
            let _ = self.source.stop();
            self.stopping.stopped_ns = Some(self.source.now_ns());
        }
        self.stopping.sealed_for_stop = true;
        holds_samples
    }

    fn note_call_start(&mut self) -> Instant {
        let t0 = Instant::now();
        if let Some(prev) = self.last_decode_start.replace(t0) {
            let gap = t0.duration_since(prev);
            let c = self.links.counters;
            c.max_decode_gap_ns
                .fetch_max(nanos_u64(gap), Ordering::Relaxed);
            if gap > SLOW_DECODE {
                c.late_decodes.fetch_add(1, Ordering::Relaxed);
            }
        }
        t0
    }

    /// One decode call into the current image: what it asks of the turn, and its duration.
    fn decode_call(&mut self, stopping: bool, t0: Instant) -> Result<(Call, u64), PipelineError> {
        let Some(cur) = self.cur.as_mut() else {
            let call = Call {
                end_of_records: true,
                ..Call::default()
            };
            return Ok((call, 0));
        };
        let outcome = self.source.decode(cur);
        let call_ns = nanos_u64(t0.elapsed());
        let call = match outcome {
            Ok(o) => self.decoded(o),
            Err(CuptiError::HardwareBufferOverflow { .. }) => self.overflowed(stopping),
            Err(e) => self.decode_failed(e, stopping)?,
        };
        Ok((call, call_ns))
    }

    /// Counts a decode call's time, by how many samples it moved.
    fn account_call(&self, call_ns: u64, info: &CounterDataInfo) {
        let c = self.links.counters;
        c.decode_ns.fetch_add(call_ns, Ordering::Relaxed);
        c.max_decode_call_ns.fetch_max(call_ns, Ordering::Relaxed);
        c.decode_calls.fetch_add(1, Ordering::Relaxed);
        let moved = info.populated.saturating_sub(self.populated_before) as u64;
        let bin = call_size_bin(moved);
        c.calls_by_size[bin].fetch_add(1, Ordering::Relaxed);
        c.decode_ns_by_size[bin].fetch_add(call_ns, Ordering::Relaxed);
        c.samples_by_size[bin].fetch_add(moved, Ordering::Relaxed);
        c.max_samples_per_decode.fetch_max(moved, Ordering::Relaxed);
    }

    fn decoded(&mut self, o: cufall_cupti::DecodeOutcome) -> Call {
        self.consecutive_errors = 0;
        let c = self.links.counters;
        if o.overflow {
            c.hw_overflows.fetch_add(1, Ordering::Relaxed);
            self.gaps.mark_suspect(DropReason::HardwareBufferOverflow);
        }
        let mut call = Call::default();
        match o.stop {
            DecodeStop::CounterDataFull => {
                c.counter_data_full.fetch_add(1, Ordering::Relaxed);
                self.gaps.mark_suspect(DropReason::CounterDataFull);
                call.force_seal = true;
            }
            DecodeStop::EndOfRecords => call.end_of_records = true,
            DecodeStop::Other => {}
        }
        call
    }

    fn overflowed(&mut self, stopping: bool) -> Call {
        self.links
            .counters
            .hw_overflows
            .fetch_add(1, Ordering::Relaxed);
        self.gaps.mark_suspect(DropReason::HardwareBufferOverflow);
        self.send(SinkMsg::Message(format!(
            "{}: the PM sampling hardware buffer overflowed (decoding fell behind); restarting \
sampling. Use a longer --interval or fewer metrics to avoid this.",
            self.device()
        )));
        Call {
            force_seal: true,
            restart: !stopping,
            end_of_records: stopping,
        }
    }

    fn decode_failed(&mut self, e: CuptiError, stopping: bool) -> Result<Call, PipelineError> {
        self.links
            .counters
            .decode_errors
            .fetch_add(1, Ordering::Relaxed);
        self.consecutive_errors += 1;
        if self.consecutive_errors < MAX_CONSECUTIVE_DECODE_ERRORS && !stopping {
            return Ok(Call::default());
        }
        let err = PipelineError::DecodeKeepsFailing {
            device: self.device(),
            count: self.consecutive_errors,
            source: e,
        };
        self.send(SinkMsg::Message(error_chain(&err)));
        if stopping {
            // Draining ends here; what was decoded so far is still sealed.
            return Ok(Call {
                end_of_records: true,
                ..Call::default()
            });
        }
        Err(err)
    }

    fn fill(&self) -> CounterDataInfo {
        self.cur
            .as_ref()
            .and_then(|c| self.source.fill(c).ok())
            .unwrap_or_default()
    }

    fn seal_due(&mut self, info: &CounterDataInfo, force: bool, finishing: bool) -> bool {
        let plan = &self.cfg.plan;
        self.populated_before = info.populated;
        let full_soon = info.populated as u64 * 10 >= u64::from(plan.samples_per_image) * 9;
        let due = info.completed >= plan.seal_after_samples as usize
            || (info.completed > 0 && self.image_started.elapsed() >= plan.seal_period);
        let settled = info.populated == info.completed;
        info.completed > 0 && (force || full_soon || finishing || (due && settled))
    }

    /// Reads the timestamps of every completed sample, records holes, and hands the image to
    /// the evaluators in chunks; goes on with a blank image.
    fn seal(&mut self, info: CounterDataInfo) -> Result<(), PipelineError> {
        let c = Arc::clone(self.links.counters);
        if info.populated > info.completed {
            c.partial_at_seal
                .fetch_add((info.populated - info.completed) as u64, Ordering::Relaxed);
        }
        let t = Instant::now();
        let samples = self.classify(info.completed);
        c.seal_ns
            .fetch_add(nanos_u64(t.elapsed()), Ordering::Relaxed);
        c.samples_decoded
            .fetch_add(info.completed as u64, Ordering::Relaxed);
        c.images_sealed.fetch_add(1, Ordering::Relaxed);
        // The samples go to the evaluators before anything else can fail, so they are evaluated
        // or recorded as lost, never dropped silently.
        let Some(sealed) = self.cur.take() else {
            return Ok(());
        };
        self.image_started = Instant::now();
        self.populated_before = 0;
        self.hand_to_evaluators(sealed, info.populated, samples)?;
        self.cur = Some(self.next_image()?);
        // Take back any images the evaluators finished, so the pool stays warm.
        while let Ok(img) = self.links.free.try_recv() {
            self.pool.push(img);
        }
        Ok(())
    }

    /// Timestamps of the first `completed` samples through the gap detector: the samples to
    /// keep; drop records go to the sink.
    fn classify(&mut self, completed: usize) -> Vec<(usize, i64, i64)> {
        let mut samples = Vec::with_capacity(completed);
        let mut drops = Vec::new();
        let Some(cur) = self.cur.as_ref() else {
            return samples;
        };
        for i in 0..completed {
            let (s, e) = match self.source.sample_times(cur, i) {
                Ok((s, e)) => (i64::try_from(s).unwrap_or(0), i64::try_from(e).unwrap_or(0)),
                Err(_) => (0, 0),
            };
            if let Some(prev) = self.last_end
                && s >= prev
            {
                self.links
                    .counters
                    .max_seam_ns
                    .fetch_max((s - prev) as u64, Ordering::Relaxed);
            }
            if e > 0 {
                self.last_end = Some(e);
            }
            let (verdict, rec) = self.gaps.observe(s, e);
            drops.extend(rec);
            if verdict == Verdict::Keep {
                samples.push((i, s, e));
            }
        }
        if !drops.is_empty() {
            self.send(SinkMsg::Drops(drops));
        }
        samples
    }

    fn hand_to_evaluators(
        &mut self,
        image: S::Image,
        touched: usize,
        mut samples: Vec<(usize, i64, i64)>,
    ) -> Result<(), PipelineError> {
        let sealed = Arc::new(Sealed { image, touched });
        let chunks = self
            .links
            .evaluators
            .min(samples.len() / MIN_CHUNK_SAMPLES)
            .max(1);
        let per = samples.len().div_ceil(chunks).max(1);
        let mut parts = Vec::with_capacity(chunks);
        while samples.len() > per {
            let rest = samples.split_off(per);
            parts.push(std::mem::replace(&mut samples, rest));
        }
        parts.push(samples);
        let chunks: Vec<Chunk<S::Image>> = parts
            .into_iter()
            .map(|part| {
                let chunk = Chunk {
                    seq: self.seq,
                    image: Some(Arc::clone(&sealed)),
                    samples: part,
                    delivered: false,
                    device: self.device(),
                    out: self.links.out.clone(),
                    counters: Arc::clone(self.links.counters),
                };
                self.seq += 1;
                chunk
            })
            .collect();
        // Only chunks may hold the image: the one that finishes last gets it back whole.
        drop(sealed);
        for chunk in chunks {
            // A refused chunk is dropped here, and its Drop records its samples as lost.
            if self.links.jobs.send(chunk).is_err() {
                return Err(self.evaluators_gone());
            }
        }
        Ok(())
    }

    fn evaluators_gone(&self) -> PipelineError {
        PipelineError::EvaluatorsGone {
            device: self.device(),
            cause: "unknown".into(),
        }
    }

    /// A blank image: from the pool, one the evaluators returned, or a new one made on a spare
    /// thread (making one writes all of it, ~100 ms for 150 MB: never on this thread). The
    /// image margin covers the wait.
    fn next_image(&mut self) -> Result<S::Image, PipelineError> {
        if let Some(img) = self.pool.pop() {
            return Ok(img);
        }
        match self.links.free.try_recv() {
            Ok(img) => return Ok(img),
            Err(TryRecvError::Disconnected) => return Err(self.evaluators_gone()),
            Err(TryRecvError::Empty) => {}
        }
        if self.allocated < self.cfg.plan.max_images {
            let (tx, images) = (self.links.spare.clone(), Arc::clone(&self.images));
            let spawned = std::thread::Builder::new()
                .name(format!("cufall-img{}", self.cfg.index))
                .spawn(move || {
                    let _ = tx.send(images.new_image());
                });
            if spawned.is_ok() {
                self.allocated += 1;
                self.links
                    .counters
                    .images_allocated
                    .store(self.allocated as u64, Ordering::Relaxed);
            }
        }
        self.wait_for_image()
    }

    /// Waits for a blank image. The channel stays open (this loop keeps a sender for image
    /// allocation), so a dead evaluator pool is noticed through `evaluators_alive`.
    fn wait_for_image(&self) -> Result<S::Image, PipelineError> {
        loop {
            match self.links.free.recv_timeout(Duration::from_millis(100)) {
                Ok(img) => return Ok(img),
                Err(RecvTimeoutError::Timeout)
                    if self.links.counters.evaluators_alive.load(Ordering::Relaxed) > 0 => {}
                Err(_) => return Err(self.evaluators_gone()),
            }
        }
    }

    /// After a hardware-buffer overflow: re-arm and start again; the samples between the last
    /// kept one and the restart are a drop record.
    fn restart(&mut self) -> Result<(), PipelineError> {
        self.source
            .rearm()
            .and_then(|_| self.source.start())
            .map_err(|source| PipelineError::Restart {
                device: self.cfg.device,
                source,
            })?;
        if let Some(r) = self.gaps.restarted_at(self.source.now_ns()) {
            self.send(SinkMsg::Drops(vec![r]));
        }
        self.last_end = None;
        self.links.counters.restarts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn stop_progress(&mut self, end_of_records: bool, completed: usize) -> Flow {
        let s = &mut self.stopping;
        s.iterations += 1;
        if end_of_records && completed == 0 {
            s.drained += 1;
            if s.drained >= 2 {
                return Flow::Done;
            }
        }
        // Never spin forever on a device that keeps answering after Stop.
        if s.iterations > 2_000 {
            return Flow::Done;
        }
        Flow::Continue
    }
}
