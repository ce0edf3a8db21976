//! How big the counter-data images are, when the decoder swaps them, how many evaluator threads
//! a rate needs, and what all that costs in memory and CPU.
//!
//! The trap (measured on the H200, `docs/metrics.md`): when `cuptiPmSamplingDecodeData` stops because
//! the image is full, the samples that did not fit are lost without any overflow flag. So an
//! image must hold everything one decode call can return. The decoder *seals* an image (hands it
//! to the evaluators) after `seal_after_samples` samples or `seal_period`, whichever comes first,
//! and the image has room for `margin` more on top, enough for the decoder to be late by `margin`
//! of GPU time.
//!
//! The margin is large (150 ms) because the decoder *is* sometimes late: on a two-GPU H200,
//! while a profiled program tore down its CUDA contexts, single decode calls took up to 126 ms
//! and a 40 ms margin lost samples; in 60 s runs at 30 µs the latest decode call was 52–60 ms. The margin costs resident memory: a blank image's sample slots are
//! not zeros, so every page of an image is written when it is made (about 25 KB per sample with
//! the default metrics; 690 MB per image at 10 µs). It costs no CPU after that: only the part
//! decode wrote is restored after use ([`cufall_cupti::BlankImage`]).
//!
//! CUPTI takes an image's capacity as a `uint32_t` sample count and its size as a `size_t`
//! (`CUpti_PmSampling_GetCounterDataSize_Params`); it documents no other limit, so cufall's own
//! limit is [`MAX_IMAGE_BYTES`] per image and the machine's available memory, checked before
//! sampling starts ([`MemoryNeed`]).

use cufall_trace::model::nanos_u64;
use std::time::Duration;

/// The image plan of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImagePlan {
    /// Samples one image holds.
    pub samples_per_image: u32,
    /// Seal the image once this many samples are complete.
    pub seal_after_samples: u32,
    /// Or once the image has been filling this long (keeps the live view fresh at slow rates).
    pub seal_period: Duration,
    /// How long the decoder sleeps between decodes.
    pub decode_period: Duration,
    /// Images allocated up front (one filling, the rest being evaluated or spare).
    pub initial_images: usize,
    /// Most images a device may have at once before the decoder waits for evaluators.
    pub max_images: usize,
}

/// When to seal an image and how much room it has beyond that (`--seal`, `--margin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageTiming {
    /// Seal an image once it holds this much GPU time of samples.
    pub seal_period: Duration,
    /// Room beyond the seal point: how late a decode call may be without loss.
    pub margin: Duration,
}

impl Default for ImageTiming {
    fn default() -> Self {
        ImageTiming {
            seal_period: SEAL_PERIOD,
            margin: MARGIN,
        }
    }
}

impl ImageTiming {
    /// From the durations given on the command line; what is not given keeps its default.
    pub fn from_flags(seal: Option<Duration>, margin: Option<Duration>) -> Option<Self> {
        let d = ImageTiming::default();
        match (seal, margin) {
            (None, None) => None,
            (s, m) => Some(ImageTiming {
                seal_period: s.unwrap_or(d.seal_period),
                margin: m.unwrap_or(d.margin),
            }),
        }
    }
}

/// Time an image is allowed to fill before it is sealed.
pub const SEAL_PERIOD: Duration = Duration::from_millis(20);
/// How long the decoder sleeps between decode calls. Each `cuptiPmSamplingDecodeData` call costs
/// about 2 ms of CPU on top of its per-sample work (H200, `docs/benchmarks-sampler.md`), so
/// decoding every 25 ms instead of every few ms saves a tenth of a core; the live view gets
/// samples ~25 ms later.
pub const DECODE_PERIOD: Duration = Duration::from_millis(25);
/// Extra room beyond the seal point, in GPU time: how late the decoder may be without loss.
pub const MARGIN: Duration = Duration::from_millis(150);

/// The shortest interval cufall accepts. CUPTI's `SetConfig` takes any value on GH100 (50 ns
/// passed), but below this the images and the decode cost explode without a measured benefit.
pub const MIN_INTERVAL_NS: i64 = 1_000;
/// Largest counter-data image cufall allocates (each device has up to `max_images`).
pub const MAX_IMAGE_BYTES: u64 = 4 << 30;

pub fn plan(interval_ns: i64) -> ImagePlan {
    plan_with(interval_ns, ImageTiming::default())
}

/// [`plan`] with another seal period and margin (benchmarks compare them).
pub fn plan_with(interval_ns: i64, timing: ImageTiming) -> ImagePlan {
    let interval_ns = interval_ns.max(1).unsigned_abs();
    let per = |d: Duration| -> u64 { nanos_u64(d).div_ceil(interval_ns) };
    let seal_after = per(timing.seal_period).clamp(1, 1 << 24);
    let capacity = (seal_after + per(timing.margin).max(1)).clamp(16, 1 << 24);
    ImagePlan {
        samples_per_image: u32::try_from(capacity).unwrap_or(u32::MAX),
        seal_after_samples: u32::try_from(seal_after).unwrap_or(u32::MAX),
        seal_period: timing.seal_period,
        decode_period: decode_period(timing),
        // Evaluation is split between threads and ends long before the next seal: one image
        // fills while the other is evaluated; more are made (off the decode thread) on demand.
        initial_images: 2,
        max_images: 6,
    }
}

/// How often the decoder calls: every [`DECODE_PERIOD`], more often when the margin is short
/// (a quarter of it, at least every 200 µs).
pub fn decode_period(timing: ImageTiming) -> Duration {
    DECODE_PERIOD
        .min(timing.margin / 4)
        .max(Duration::from_micros(200))
}

impl ImagePlan {
    /// Shrinks the plan so one image stays under `max_bytes`, keeping the seal point at a third
    /// of the image (two thirds of margin).
    pub fn capped(mut self, bytes_per_sample: u64, max_bytes: u64) -> Self {
        let cap = (max_bytes / bytes_per_sample.max(1)).clamp(16, u64::from(u32::MAX));
        if u64::from(self.samples_per_image) > cap {
            // `cap` is clamped to u32 above.
            self.samples_per_image = u32::try_from(cap).unwrap_or(u32::MAX);
            self.seal_after_samples = self
                .seal_after_samples
                .min(u32::try_from((cap / 3).max(1)).unwrap_or(u32::MAX));
        }
        self
    }
}

/// Evaluator threads are sized to be busy at most this share of the time.
const EVAL_BUSY: f64 = 0.6;

/// Evaluator threads a device needs for the rate the model predicts (at least 2, so one slow
/// image never holds back the next): evaluation and restoring image slots run on them.
pub fn eval_threads(p: &crate::cost::Prediction) -> usize {
    let cores = p.eval_cores + p.restore_cores;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a small positive count, clamped after rounding up"
    )]
    let threads = (cores / EVAL_BUSY).ceil() as usize;
    threads.clamp(2, 16)
}

/// The memory a recording's counter-data images will hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    pub devices: usize,
    pub image_bytes: u64,
    pub images_per_device: usize,
    pub hw_buffer_bytes: u64,
}

impl MemoryNeed {
    /// Bytes made resident up front: every device's initial images and its hardware buffer
    /// (CUPTI makes the whole buffer resident).
    pub fn up_front_bytes(&self) -> u64 {
        self.devices as u64
            * (self.images_per_device as u64 * self.image_bytes + self.hw_buffer_bytes)
    }
}

/// The memory the system can still give (`MemAvailable` of `/proc/meminfo`), if known.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `1.2 GB`, `350 MB`: decimal units, as memory is usually quoted.
pub fn format_bytes(b: u64) -> String {
    if b >= 1_000_000_000 {
        format!("{:.1} GB", b as f64 / 1e9)
    } else {
        format!("{} MB", b.div_ceil(1_000_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::Nanos;

    #[test]
    fn images_are_capped_in_bytes() {
        let p = plan(1_000).capped(25_000, 1 << 30);
        assert!(u64::from(p.samples_per_image) * 25_000 <= 1 << 30);
        assert!(p.seal_after_samples * 3 <= p.samples_per_image);
        let small = plan(100_000);
        assert_eq!(small.capped(25_000, MAX_IMAGE_BYTES), small);
    }

    #[test]
    fn forty_microseconds_leaves_a_150_ms_margin() {
        let p = plan(40_000);
        assert_eq!(p.seal_after_samples, 500);
        assert_eq!(p.samples_per_image, 500 + 3_750);
        assert_eq!(p.decode_period, DECODE_PERIOD);
        assert_eq!(p.capped(25_000, MAX_IMAGE_BYTES), p);
    }

    #[test]
    fn ten_microseconds_keeps_the_whole_margin() {
        // 17,000 samples of 25.5 KB: 434 MB, under the cap, so a late call of 150 ms fits.
        let p = plan(10_000);
        assert_eq!(p.capped(25_529, MAX_IMAGE_BYTES), p);
        assert_eq!(p.seal_after_samples, 2_000);
        assert_eq!(p.samples_per_image, 17_000);
    }

    #[test]
    fn slow_rates_get_small_images_and_lazy_decodes() {
        let p = plan(1_000_000);
        assert_eq!(p.seal_after_samples, 20);
        assert_eq!(p.samples_per_image, 20 + 150);
        assert_eq!(p.decode_period, DECODE_PERIOD);
    }

    #[test]
    fn timing_flags_keep_the_default_of_what_is_not_given() {
        assert_eq!(ImageTiming::from_flags(None, None), None);
        let t = ImageTiming::from_flags(Some(Duration::from_millis(10)), None).unwrap();
        assert_eq!(t.seal_period, Duration::from_millis(10));
        assert_eq!(t.margin, MARGIN, "no silent short margin");
        let t = ImageTiming::from_flags(None, Some(Duration::from_millis(100))).unwrap();
        assert_eq!(t.seal_period, SEAL_PERIOD);
        assert_eq!(t.margin, Duration::from_millis(100));
    }

    #[test]
    fn evaluator_threads_follow_the_rate() {
        let m = crate::cost::CostModel::H200;
        assert_eq!(eval_threads(&m.predict(25_529, 2, Nanos(100_000))), 2);
        assert_eq!(eval_threads(&m.predict(25_529, 2, Nanos(30_000))), 2);
        // 17 µs per sample at 100,000 samples/s is 1.7 cores: 3 threads at 60 % or less.
        assert_eq!(eval_threads(&m.predict(25_529, 2, Nanos(10_000))), 3);
        assert_eq!(eval_threads(&m.predict(25_529, 2, Nanos(1_000))), 16);
    }

    #[test]
    fn meminfo_is_read_and_bytes_print_in_decimal_units() {
        let text = "MemTotal:       131072000 kB\nMemAvailable:    1000000 kB\n";
        assert_eq!(parse_mem_available(text), Some(1_024_000_000));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(format_bytes(1_380_000_000), "1.4 GB");
        assert_eq!(format_bytes(219_000_000), "219 MB");
        let need = MemoryNeed {
            devices: 2,
            image_bytes: 100,
            images_per_device: 2,
            hw_buffer_bytes: 50,
        };
        assert_eq!(need.up_front_bytes(), 500);
    }

    proptest::proptest! {
        #[test]
        fn margin_always_covers_several_decode_periods(interval in 1_000i64..10_000_000) {
            let p = plan(interval);
            let margin_samples = u64::from(p.samples_per_image - p.seal_after_samples);
            let per_decode = nanos_u64(p.decode_period).div_ceil(interval.unsigned_abs());
            proptest::prop_assert!(margin_samples >= 3 * per_decode, "{p:?}");
            proptest::prop_assert!(p.seal_after_samples >= 1);
        }
    }
}
