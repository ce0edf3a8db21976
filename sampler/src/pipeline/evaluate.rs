//! Evaluator threads: chunks of sealed images become sample batches.
//!
//! The decode thread splits each sealed image into chunks (one per evaluator at most), each with
//! its own sequence number, so a large image is evaluated by several threads at once. The image is
//! shared by its chunks; the thread that finishes the last chunk restores the image and hands it
//! back to the decoder.
//!
//! Nothing is lost silently here: a sample CUPTI cannot evaluate is a `decode_error` drop; a chunk
//! whose evaluation panics becomes an `evaluation_failed` drop covering its samples, with the
//! cause sent to the user, and its (empty) batch still goes to the sink so later batches are not
//! held back. A chunk that is dropped without being evaluated (every evaluator gone) does the
//! same from its `Drop`. An evaluator that panics [`RETIRE_AFTER_PANICS`] times in a row retires.

use super::counters::DeviceCounters;
use super::error::panic_message;
use super::source::{ImageStore, SampleEvaluator};
use crate::sink::SinkMsg;
use cufall_trace::model::nanos_u64;
use cufall_trace::model::{DeviceId, DropReason, DropRecord, SampleBatch};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A sealed image shared by its chunks.
pub(crate) struct Sealed<I> {
    pub image: I,
    /// Samples decode populated in the image (the prefix to restore).
    pub touched: usize,
}

/// One evaluator job: some samples of a sealed image.
pub(crate) struct Chunk<I> {
    pub seq: u64,
    pub image: Option<Arc<Sealed<I>>>,
    /// (sample index, start_ns, end_ns) of the samples to evaluate.
    pub samples: Vec<(usize, i64, i64)>,
    /// Set once the chunk's batch (or its failure) reached the sink.
    pub delivered: bool,
    pub device: DeviceId,
    pub out: Sender<SinkMsg>,
    pub counters: Arc<DeviceCounters>,
}

impl<I> Chunk<I> {
    /// Reports this chunk's samples as `evaluation_failed` and sends its empty batch, so the sink
    /// never waits for it.
    fn fail(&mut self, cause: &str) {
        if self.delivered {
            return;
        }
        self.delivered = true;
        let n = self.samples.len() as u64;
        if let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) {
            self.counters
                .eval_failed_samples
                .fetch_add(n, Ordering::Relaxed);
            let _ = self.out.send(SinkMsg::Message(format!(
                "{}: {n} samples were not evaluated ({cause}); they are recorded as \
evaluation_failed drops",
                self.device
            )));
            let _ = self.out.send(SinkMsg::Drops(vec![DropRecord {
                device: self.device,
                start_ns: first.1,
                end_ns: last.2.max(first.1),
                reason: DropReason::EvaluationFailed,
                lost_samples: Some(n),
            }]));
        }
        let _ = self.out.send(SinkMsg::Samples {
            device: self.device,
            seq: self.seq,
            batch: SampleBatch::new(self.device, 0),
        });
    }
}

impl<I> Drop for Chunk<I> {
    fn drop(&mut self) {
        self.fail("no evaluation thread was left to evaluate them");
    }
}

/// An evaluator retires after this many panics in a row.
pub const RETIRE_AFTER_PANICS: u32 = 3;

/// What evaluator threads share.
pub(crate) struct EvalShared<I, M> {
    pub jobs: Mutex<Receiver<Chunk<I>>>,
    pub free: Sender<I>,
    pub images: Arc<M>,
    /// The cause of the last evaluator failure (for the decoder's error when all are gone).
    pub last_failure: Arc<Mutex<Option<String>>>,
}

/// One evaluator thread's loop.
pub(crate) fn evaluator_main<I, M, E>(
    mut eval: E,
    shared: Arc<EvalShared<I, M>>,
    counters: Arc<DeviceCounters>,
) where
    I: Send + Sync + 'static,
    M: ImageStore<I>,
    E: SampleEvaluator<I>,
{
    // Counted up by the spawner (so the decode loop never sees 0 before this thread runs).
    struct Alive<'a>(&'a DeviceCounters);
    impl Drop for Alive<'_> {
        fn drop(&mut self) {
            self.0.evaluators_alive.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _alive = Alive(&counters);
    let mut values = vec![0.0f64; eval.metric_count()];
    let mut panics_in_a_row = 0u32;
    loop {
        let job = match shared.jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(mut chunk) = job else { return };
        let t0 = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| {
            evaluate_chunk(&mut eval, &chunk, &mut values, &counters)
        }));
        counters
            .eval_ns
            .fetch_add(nanos_u64(t0.elapsed()), Ordering::Relaxed);
        match result {
            Ok((batch, drops)) => {
                panics_in_a_row = 0;
                chunk.delivered = true;
                counters
                    .samples_evaluated
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                if !drops.is_empty() {
                    let _ = chunk.out.send(SinkMsg::Drops(drops));
                }
                let _ = chunk.out.send(SinkMsg::Samples {
                    device: chunk.device,
                    seq: chunk.seq,
                    batch,
                });
            }
            Err(payload) => {
                panics_in_a_row += 1;
                counters.eval_panics.fetch_add(1, Ordering::Relaxed);
                let cause = format!("evaluation panicked: {}", panic_message(payload.as_ref()));
                chunk.fail(&cause);
                if let Ok(mut slot) = shared.last_failure.lock() {
                    *slot = Some(cause);
                }
            }
        }
        hand_back(&mut chunk, &shared, &counters);
        if panics_in_a_row >= RETIRE_AFTER_PANICS {
            let _ = chunk.out.send(SinkMsg::Message(format!(
                "{}: an evaluation thread panicked {panics_in_a_row} times in a row and stopped",
                chunk.device
            )));
            return;
        }
    }
}

fn evaluate_chunk<I, E: SampleEvaluator<I>>(
    eval: &mut E,
    chunk: &Chunk<I>,
    values: &mut [f64],
    counters: &DeviceCounters,
) -> (SampleBatch, Vec<DropRecord>) {
    let mut batch = SampleBatch::new(chunk.device, values.len());
    let mut drops = Vec::new();
    let Some(sealed) = chunk.image.as_ref() else {
        return (batch, drops);
    };
    for &(i, s, e) in &chunk.samples {
        match eval.evaluate(&sealed.image, i, values) {
            Ok(()) => batch.push(s, e, values),
            Err(_) => {
                counters.eval_errors.fetch_add(1, Ordering::Relaxed);
                drops.push(DropRecord {
                    device: chunk.device,
                    start_ns: s,
                    end_ns: e,
                    reason: DropReason::DecodeError,
                    lost_samples: Some(1),
                });
            }
        }
    }
    (batch, drops)
}

/// The last chunk of an image restores it and returns it to the decoder.
fn hand_back<I, M: ImageStore<I>>(
    chunk: &mut Chunk<I>,
    shared: &EvalShared<I, M>,
    counters: &DeviceCounters,
) {
    let Some(sealed) = chunk.image.take().and_then(Arc::into_inner) else {
        return;
    };
    let Sealed { mut image, touched } = sealed;
    let t = Instant::now();
    let r = shared.images.restore(&mut image, touched);
    counters
        .reset_ns
        .fetch_add(nanos_u64(t.elapsed()), Ordering::Relaxed);
    counters
        .reset_bytes
        .fetch_add(r.bytes as u64, Ordering::Relaxed);
    counters.images_restored.fetch_add(1, Ordering::Relaxed);
    if !r.by_prefix {
        counters.reset_by_prefix.store(0, Ordering::Relaxed);
    }
    if let Some(m) = r.stray_write {
        let _ = chunk
            .out
            .send(SinkMsg::Message(format!("{}: {m}", chunk.device)));
    }
    // The decoder may be gone (stopping); the image is then simply freed.
    let _ = shared.free.send(image);
}
