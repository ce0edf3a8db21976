//! How big the counter-data images are and when the decoder swaps them.
//!
//! The trap (H200-FACTS, and `docs/metrics.md`): when `cuptiPmSamplingDecodeData` stops because
//! the image is full, the samples that did not fit are lost without any overflow flag. So the
//! decoder never lets an image approach full: it *seals* an image (hands it to the evaluators)
//! after `seal_after_samples` samples or `seal_period`, whichever comes first, and the image has
//! room for `margin` more on top, enough for the decoder to be late by `margin` of GPU time.
//!
//! The margin is large (250 ms) because the decoder *is* sometimes that late: on a two-GPU H200,
//! while a profiled program tore down its CUDA contexts, decode calls were held up long enough
//! to overflow a 40 ms margin. The margin costs address space, not memory or CPU: images are
//! lazily zeroed memory and only the part decode wrote is restored after use
//! ([`cufall_cupti::BlankImage`]).

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

/// Time an image is allowed to fill before it is sealed.
pub const SEAL_PERIOD: Duration = Duration::from_millis(20);
/// How long the decoder sleeps between decode calls. Each `cuptiPmSamplingDecodeData` call costs
/// about 2 ms of CPU on top of its ~16 µs per sample (H200, `docs/benchmarks-sampler.md`), so
/// decoding every 25 ms instead of every few ms saves a tenth of a core; the live view gets
/// samples ~25 ms later.
pub const DECODE_PERIOD: Duration = Duration::from_millis(25);
/// Extra room beyond the seal point, in GPU time: how late the decoder may be without loss.
pub const MARGIN: Duration = Duration::from_millis(250);

/// The shortest interval cufall accepts. CUPTI's `SetConfig` takes any value on GH100 (50 ns
/// passed), but below this the images and the decode cost explode without a measured benefit.
pub const MIN_INTERVAL_NS: u64 = 1_000;
/// Largest counter-data image cufall allocates (each device has up to `max_images`).
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

pub fn plan(interval_ns: u64) -> ImagePlan {
    plan_with(interval_ns, SEAL_PERIOD, MARGIN)
}

/// [`plan`] with another seal period and margin (benchmarks compare them).
pub fn plan_with(interval_ns: u64, seal_period: Duration, margin: Duration) -> ImagePlan {
    let interval_ns = interval_ns.max(1);
    let per = |d: Duration| -> u64 { (d.as_nanos() as u64).div_ceil(interval_ns) };
    let seal_after = per(seal_period).clamp(1, 1 << 20);
    let capacity = (seal_after + per(margin).max(1)).clamp(16, 1 << 20);
    ImagePlan {
        samples_per_image: u32::try_from(capacity).unwrap_or(u32::MAX),
        seal_after_samples: u32::try_from(seal_after).unwrap_or(u32::MAX),
        seal_period,
        decode_period: DECODE_PERIOD
            .min(margin / 4)
            .max(Duration::from_micros(200)),
        initial_images: 3,
        max_images: 8,
    }
}

impl ImagePlan {
    /// Shrinks the plan so one image stays under `max_bytes`, keeping the seal point at a third
    /// of the image (two thirds of margin).
    pub fn capped(mut self, bytes_per_sample: u64, max_bytes: u64) -> Self {
        let cap = (max_bytes / bytes_per_sample.max(1)).clamp(16, u64::from(u32::MAX));
        if u64::from(self.samples_per_image) > cap {
            self.samples_per_image = cap as u32;
            self.seal_after_samples = self.seal_after_samples.min((cap / 3).max(1) as u32);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_capped_in_bytes() {
        let p = plan(1_000).capped(25_000, MAX_IMAGE_BYTES);
        assert!(u64::from(p.samples_per_image) * 25_000 <= MAX_IMAGE_BYTES);
        assert!(p.seal_after_samples * 3 <= p.samples_per_image);
        let small = plan(100_000);
        assert_eq!(small.capped(25_000, MAX_IMAGE_BYTES), small);
    }

    #[test]
    fn forty_microseconds_leaves_a_250_ms_margin() {
        let p = plan(40_000);
        assert_eq!(p.seal_after_samples, 500);
        assert_eq!(p.samples_per_image, 500 + 6_250);
        assert_eq!(p.decode_period, DECODE_PERIOD);
        // 25 KB per sample: 169 MB of address space, under the cap.
        assert_eq!(p.capped(25_000, MAX_IMAGE_BYTES), p);
    }

    #[test]
    fn ten_microseconds_is_capped_in_bytes_but_keeps_a_margin() {
        let p = plan(10_000).capped(25_000, MAX_IMAGE_BYTES);
        assert_eq!(p.seal_after_samples, 2_000);
        let margin_ms = (p.samples_per_image - p.seal_after_samples) as f64 * 0.01;
        assert!(margin_ms > 80.0, "{margin_ms} ms");
    }

    #[test]
    fn slow_rates_get_small_images_and_lazy_decodes() {
        let p = plan(1_000_000);
        assert_eq!(p.seal_after_samples, 20);
        assert_eq!(p.samples_per_image, 20 + 250);
        assert_eq!(p.decode_period, DECODE_PERIOD);
    }

    proptest::proptest! {
        #[test]
        fn margin_always_covers_several_decode_periods(interval in 1_000u64..10_000_000) {
            let p = plan(interval);
            let margin_samples = u64::from(p.samples_per_image - p.seal_after_samples);
            let per_decode = (p.decode_period.as_nanos() as u64).div_ceil(interval);
            proptest::prop_assert!(margin_samples >= 3 * per_decode, "{p:?}");
            proptest::prop_assert!(p.seal_after_samples >= 1);
        }
    }
}
