//! What the pipeline asks of CUPTI, as three small traits, and their CUPTI implementations.
//!
//! - [`PmSource`]: the decode thread's view of PM sampling on one device (start, stop, decode
//!   into an image, how full an image is, a sample's timestamps, re-arm after an overflow).
//! - [`ImageStore`]: blank counter-data images of one configuration: made on spare threads,
//!   restored after use.
//! - [`SampleEvaluator`]: one evaluator thread's way of turning a sample into metric values.
//!
//! On a GPU these are [`CuptiSource`], [`CuptiImages`] and [`CuptiEvaluator`], which make exactly
//! the CUPTI calls the pipeline made before the traits existed. Tests drive the same decode state
//! machine with scripted fakes (`sampler/tests/pipeline.rs`).

use cufall_cupti::host::MetricList;
use cufall_cupti::{
    BlankImage, CounterData, CounterDataInfo, Cupti, CuptiError, DecodeOutcome, PmSampler,
    PrimaryContext, ProfilerHost,
};
use cufall_trace::model::Nanos;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A sampling interval as CUPTI's API takes it (`u64` nanoseconds). cufall keeps intervals as
/// [`Nanos`]; they are positive (at least [`crate::sizing::MIN_INTERVAL_NS`] once counters are
/// armed), so this loses nothing. The one conversion between the two, made where CUPTI is
/// called.
pub(crate) fn cupti_interval_ns(interval: Nanos) -> u64 {
    interval.0.max(1).unsigned_abs()
}

/// PM sampling of one device, as the decode loop uses it.
pub trait PmSource: Send {
    /// A counter-data image.
    type Image: Send + Sync + 'static;
    fn start(&mut self) -> Result<(), CuptiError>;
    fn stop(&mut self) -> Result<(), CuptiError>;
    fn is_running(&self) -> bool;
    /// Moves samples from the hardware buffer into `image`. A hardware-buffer overflow is
    /// [`CuptiError::HardwareBufferOverflow`].
    fn decode(&mut self, image: &mut Self::Image) -> Result<DecodeOutcome, CuptiError>;
    /// How many samples `image` holds.
    fn fill(&self, image: &Self::Image) -> Result<CounterDataInfo, CuptiError>;
    /// Start and end timestamps of sample `index` of `image` (ns, the clock of [`Self::now_ns`]).
    fn sample_times(&self, image: &Self::Image, index: usize) -> Result<(u64, u64), CuptiError>;
    /// After a hardware-buffer overflow: make the device ready to start again, same settings.
    fn rearm(&mut self) -> Result<(), CuptiError>;
    /// Now, on the clock of the sample timestamps.
    fn now_ns(&self) -> i64 {
        crate::now_unix_ns()
    }
}

/// What restoring one used image did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Bytes written.
    pub bytes: usize,
    /// Whether only the written prefix was restored (false: the whole image).
    pub by_prefix: bool,
    /// Decode was found to have written beyond the prefix (a message for the user); from now
    /// on whole images are restored.
    pub stray_write: Option<String>,
}

/// Blank images of one configuration.
pub trait ImageStore<I>: Send + Sync + 'static {
    /// A new blank image (slow for big images: never called on the decode thread).
    fn new_image(&self) -> I;
    /// Makes a used image blank again. `touched`: the samples decode populated in it.
    fn restore(&self, image: &mut I, touched: usize) -> Restored;
    /// Bytes of one image.
    fn image_bytes(&self) -> usize;
}

/// Turns samples of an image into metric values (one per evaluator thread).
pub trait SampleEvaluator<I>: Send + 'static {
    fn metric_count(&self) -> usize;
    fn evaluate(&mut self, image: &I, index: usize, out: &mut [f64]) -> Result<(), CuptiError>;
}

/// [`PmSource`] over CUPTI: a configured [`PmSampler`] and what re-arming it needs.
pub struct CuptiSource {
    pub sampler: PmSampler,
    pub cupti: Cupti,
    pub config_image: Vec<u8>,
    pub hw_buffer_bytes: usize,
    pub interval_ns: Nanos,
    /// Kept bound while sampling when the driver wanted a current context to enable.
    pub ctx: Option<PrimaryContext>,
}

impl PmSource for CuptiSource {
    type Image = CounterData;

    fn start(&mut self) -> Result<(), CuptiError> {
        self.sampler.start()
    }

    fn stop(&mut self) -> Result<(), CuptiError> {
        self.sampler.stop()
    }

    fn is_running(&self) -> bool {
        self.sampler.is_running()
    }

    fn decode(&mut self, image: &mut CounterData) -> Result<DecodeOutcome, CuptiError> {
        self.sampler.decode(image)
    }

    fn fill(&self, image: &CounterData) -> Result<CounterDataInfo, CuptiError> {
        image.info()
    }

    fn sample_times(&self, image: &CounterData, index: usize) -> Result<(u64, u64), CuptiError> {
        self.sampler.sample_times(image, index)
    }

    fn rearm(&mut self) -> Result<(), CuptiError> {
        self.sampler.rearm(
            &self.cupti,
            &self.config_image,
            self.hw_buffer_bytes,
            cupti_interval_ns(self.interval_ns),
        )
    }
}

/// Every this many images, the evaluators check that decode wrote nothing beyond the prefix
/// they restore (always on a device's first image).
pub const LAYOUT_CHECK_EVERY: u64 = 64;

/// [`ImageStore`] over a [`BlankImage`]: used images are restored by their written prefix while
/// the image layout holds, whole otherwise.
pub struct CuptiImages {
    template: BlankImage,
    prefix_ok: AtomicBool,
    restored: AtomicU64,
}

impl CuptiImages {
    pub fn new(template: BlankImage) -> Self {
        let prefix_ok = template.layout().is_some();
        CuptiImages {
            template,
            prefix_ok: AtomicBool::new(prefix_ok),
            restored: AtomicU64::new(0),
        }
    }
}

impl ImageStore<CounterData> for CuptiImages {
    fn new_image(&self) -> CounterData {
        self.template.new_image()
    }

    /// On a device's first image and every [`LAYOUT_CHECK_EVERY`]th, first checks that decode
    /// wrote nothing beyond the prefix; if it did, the layout is not trusted again on this device
    /// (correctness is kept, CPU cost rises).
    fn restore(&self, image: &mut CounterData, touched: usize) -> Restored {
        let layout = self
            .template
            .layout()
            .filter(|_| self.prefix_ok.load(Ordering::Relaxed));
        let Some(layout) = layout else {
            return Restored {
                bytes: self.template.restore(image, None),
                by_prefix: false,
                stray_write: None,
            };
        };
        let n = self.restored.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(LAYOUT_CHECK_EVERY)
            && let Some(at) = self
                .template
                .first_difference_after(image, layout.prefix_bytes(touched))
        {
            self.prefix_ok.store(false, Ordering::Relaxed);
            return Restored {
                bytes: self.template.restore(image, None),
                by_prefix: false,
                stray_write: Some(format!(
                    "CUPTI wrote a counter-data image beyond the samples it decoded (byte {at} of \
{}, {touched} samples); restoring whole images from now on, which costs more CPU",
                    self.template.size_bytes()
                )),
            };
        }
        Restored {
            bytes: self.template.restore(image, Some(touched)),
            by_prefix: true,
            stray_write: None,
        }
    }

    fn image_bytes(&self) -> usize {
        self.template.size_bytes()
    }
}

/// [`SampleEvaluator`] over a profiler host object of its own.
pub struct CuptiEvaluator {
    host: ProfilerHost,
    list: MetricList,
}

impl CuptiEvaluator {
    /// `host` must have the recorded metrics added ([`ProfilerHost::add_metrics`]).
    pub fn new(host: ProfilerHost, metrics: &[String]) -> Result<Self, CuptiError> {
        Ok(CuptiEvaluator {
            host,
            list: MetricList::new(metrics)?,
        })
    }
}

impl SampleEvaluator<CounterData> for CuptiEvaluator {
    fn metric_count(&self) -> usize {
        self.list.len()
    }

    fn evaluate(
        &mut self,
        image: &CounterData,
        index: usize,
        out: &mut [f64],
    ) -> Result<(), CuptiError> {
        self.host
            .evaluate(image.bytes(), index, &mut self.list, out)
    }
}
