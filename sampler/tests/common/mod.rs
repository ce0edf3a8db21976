//! Fake GPUs for the integration tests, driving the real decode state machine, evaluators and
//! sink without CUDA.
//!
//! - [`FakeSource`]: a scripted GPU, one [`Step`] per decode call (the pipeline tests).
//! - [`clocked`]: a GPU that produces samples on the wall clock with a busy/idle pattern, whose
//!   counters can be taken by "another profiler" or that can disappear, and a
//!   `cufall_sampler::serve::Backend` over it (the exporter tests).
#![allow(
    dead_code,
    reason = "each test binary uses the part of the fakes it needs"
)]
#![allow(clippy::unwrap_used)] // tests fail loudly by design

pub mod clocked;

use cufall_cupti::{CounterDataInfo, CuptiError, DecodeOutcome, DecodeStop, Status};
use cufall_sampler::pipeline::{
    DecodeConfig, DeviceCounters, DeviceParts, ImageStore, PipelineError, PmSource, Restored,
    SampleEvaluator, run_device,
};
use cufall_sampler::sink::SinkMsg;
use cufall_sampler::sizing::ImagePlan;
use cufall_trace::model::{DeviceId, Nanos};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

pub const IV: u64 = 10_000;
pub const T0: u64 = 1_764_460_800_000_000_000;

/// One decode call of the script (samples arrive on the fake GPU before the call).
#[derive(Clone, Debug)]
pub enum Step {
    /// `n` samples arrive; decode moves what fits.
    Samples(usize),
    /// The same, and the call takes this long.
    Slow(usize, Duration),
    /// `n` samples arrive; decode moves only `moved` of the backlog (the decoder lags).
    Lag(usize, usize),
    /// `n` samples are lost to a full hardware buffer; decode fails with OUT_OF_MEMORY.
    Overflow(usize),
    /// `n` samples arrive; decode fails with another error (the samples stay in the buffer).
    Error(usize),
    /// `n` samples arrive and the user asks to stop during this call.
    StopDuring(usize),
    /// `n` samples arrive, the user asks to stop, and decode moves only `moved` of the backlog.
    StopLagging(usize, usize),
}

pub fn status(code: i64) -> Status {
    Status {
        name: "fake".into(),
        code,
        message: String::new(),
    }
}

pub struct FakeImage {
    pub capacity: usize,
    pub samples: Vec<(u64, u64)>,
}

impl FakeImage {
    /// What CUPTI says of an image: every sample it holds is populated and complete.
    pub fn info(&self) -> CounterDataInfo {
        CounterDataInfo {
            total: self.capacity,
            populated: self.samples.len(),
            completed: self.samples.len(),
        }
    }

    /// Sample `index`'s start and end, or CUPTI's answer to an index past the end.
    pub fn times(&self, index: usize) -> Result<(u64, u64), CuptiError> {
        self.samples
            .get(index)
            .copied()
            .ok_or(CuptiError::InvalidArgument("no such sample".into()))
    }
}

pub struct FakeSource {
    pub clock: u64,
    pub hw: VecDeque<(u64, u64)>,
    pub script: VecDeque<Step>,
    pub running: bool,
    pub stop: Arc<AtomicBool>,
    pub generated: Arc<AtomicU64>,
    /// Most samples one call moves once sampling has stopped.
    pub drain_per_call: usize,
}

impl FakeSource {
    fn arrive(&mut self, n: usize) {
        if !self.running {
            return;
        }
        for _ in 0..n {
            self.hw.push_back((self.clock, self.clock + IV));
            self.clock += IV;
        }
        self.generated.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Moves up to `limit` samples; when the image fills with samples left, those are gone
    /// (COUNTER_DATA_FULL, as on an H200).
    fn move_into(&mut self, image: &mut FakeImage, limit: usize) -> DecodeStop {
        let room = image.capacity - image.samples.len();
        let want = self.hw.len().min(limit);
        let take = want.min(room);
        image.samples.extend(self.hw.drain(..take));
        if take < want {
            self.hw.clear();
            return DecodeStop::CounterDataFull;
        }
        if self.hw.is_empty() {
            DecodeStop::EndOfRecords
        } else {
            DecodeStop::Other
        }
    }
}

impl PmSource for FakeSource {
    type Image = FakeImage;

    fn start(&mut self) -> Result<(), CuptiError> {
        self.running = true;
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
        let ok = |stop| {
            Ok(DecodeOutcome {
                stop,
                overflow: false,
            })
        };
        let step = if self.running {
            self.script.pop_front()
        } else {
            None
        };
        match step {
            None => {
                if self.running {
                    // The script is over: the user stops.
                    self.stop.store(true, Ordering::Relaxed);
                }
                let limit = self.drain_per_call;
                ok(self.move_into(image, limit))
            }
            Some(Step::Samples(n)) => {
                self.arrive(n);
                ok(self.move_into(image, usize::MAX))
            }
            Some(Step::Slow(n, d)) => {
                self.arrive(n);
                std::thread::sleep(d);
                ok(self.move_into(image, usize::MAX))
            }
            Some(Step::Lag(n, moved)) => {
                self.arrive(n);
                ok(self.move_into(image, moved))
            }
            Some(Step::Overflow(n)) => {
                // The samples never land, and the buffer's content is lost with the re-arm.
                self.clock += n as u64 * IV;
                self.generated.fetch_add(n as u64, Ordering::Relaxed);
                Err(CuptiError::HardwareBufferOverflow { status: status(2) })
            }
            Some(Step::Error(n)) => {
                self.arrive(n);
                Err(CuptiError::Api {
                    call: "cuptiPmSamplingDecodeData",
                    status: status(999),
                })
            }
            Some(Step::StopDuring(n)) => {
                self.arrive(n);
                self.stop.store(true, Ordering::Relaxed);
                ok(self.move_into(image, usize::MAX))
            }
            Some(Step::StopLagging(n, moved)) => {
                self.arrive(n);
                self.stop.store(true, Ordering::Relaxed);
                ok(self.move_into(image, moved))
            }
        }
    }

    fn fill(&self, image: &FakeImage) -> Result<CounterDataInfo, CuptiError> {
        Ok(image.info())
    }

    fn sample_times(&self, image: &FakeImage, index: usize) -> Result<(u64, u64), CuptiError> {
        image.times(index)
    }

    fn rearm(&mut self) -> Result<(), CuptiError> {
        // What the hardware buffer held is lost: it counts as produced (and lost).
        self.hw.clear();
        self.running = false;
        Ok(())
    }

    fn now_ns(&self) -> i64 {
        self.clock as i64
    }
}

pub struct FakeImages {
    pub capacity: usize,
    pub restored: AtomicU64,
}

impl ImageStore<FakeImage> for FakeImages {
    fn new_image(&self) -> FakeImage {
        FakeImage {
            capacity: self.capacity,
            samples: Vec::new(),
        }
    }

    fn restore(&self, image: &mut FakeImage, touched: usize) -> Restored {
        assert!(touched >= image.samples.len().min(touched));
        image.samples.clear();
        self.restored.fetch_add(1, Ordering::Relaxed);
        Restored {
            bytes: touched,
            by_prefix: true,
            stray_write: None,
        }
    }

    fn image_bytes(&self) -> usize {
        self.capacity
    }
}

/// How the fake evaluator behaves.
#[derive(Clone, Copy, Debug)]
pub enum Eval {
    Good,
    /// CUPTI refuses samples whose number is 3 mod 10.
    RefusesSome,
    /// Panics on the chunk that holds sample number `at`.
    PanicsAt(u64),
    /// Panics on every sample.
    AlwaysPanics,
}

pub struct FakeEval(Eval);

impl SampleEvaluator<FakeImage> for FakeEval {
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
        let k = (s - T0) / IV;
        match self.0 {
            Eval::RefusesSome if k % 10 == 3 => {
                return Err(CuptiError::InvalidArgument("refused".into()));
            }
            Eval::PanicsAt(at) if k == at => panic!("fake evaluator broke on sample {k}"),
            Eval::AlwaysPanics => panic!("fake evaluator always breaks"),
            _ => {}
        }
        out[0] = k as f64;
        Ok(())
    }
}

pub fn plan(capacity: u32) -> ImagePlan {
    ImagePlan {
        samples_per_image: capacity,
        seal_after_samples: 100,
        seal_period: Duration::from_secs(5),
        decode_period: Duration::from_millis(1),
        initial_images: 2,
        max_images: 4,
    }
}

/// What the fake GPU and evaluators do.
pub struct Fake {
    pub script: Vec<Step>,
    pub capacity: u32,
    pub eval: Eval,
    pub evaluators: usize,
    pub drain_per_call: usize,
}

pub fn run_fake(
    fake: Fake,
    device: DeviceId,
    tx: &Sender<SinkMsg>,
    stop: &Arc<AtomicBool>,
    counters: &Arc<DeviceCounters>,
    generated: &Arc<AtomicU64>,
) -> Result<(), PipelineError> {
    let Fake {
        script,
        capacity,
        eval,
        evaluators,
        drain_per_call,
    } = fake;
    let source = FakeSource {
        clock: T0,
        hw: VecDeque::new(),
        script: script.into(),
        running: false,
        stop: Arc::clone(stop),
        generated: Arc::clone(generated),
        drain_per_call,
    };
    let parts = DeviceParts {
        source,
        images: Arc::new(FakeImages {
            capacity: capacity as usize,
            restored: AtomicU64::new(0),
        }),
        evaluators: (0..evaluators).map(|_| FakeEval(eval)).collect(),
        first_image: None,
    };
    let cfg = DecodeConfig {
        device,
        index: device.0 as usize,
        interval_ns: Nanos(IV as i64), // the fake GPU counts in CUPTI's u64 nanoseconds
        plan: plan(capacity),
    };
    run_device(parts, &cfg, tx, stop, counters)
}
