//! Turning a device's stream of sample timestamps into kept samples and explicit drop records.
//!
//! PM samples of a GPU-time-interval trigger tile time: each sample starts where the previous
//! one ended (on an H200 the largest seam seen was 98 ns). Anything else is a hole: samples lost
//! to a full counter-data image, a hardware-buffer overflow, or an unknown cause. The detector
//! never drops a sample silently: every hole becomes a [`DropRecord`], and the first sample
//! after each start (which spans from the start call to the first decode, not one interval) is
//! reported as a [`DropReason::Warmup`] record instead of a sample.

use cufall_trace::model::{DeviceId, DropReason, DropRecord};

/// What to do with one decoded sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Not a sample of the interval (warm-up or invalid timestamps); a drop record says why.
    Exclude,
}

#[derive(Clone, Debug)]
pub struct HoleDetector {
    device: DeviceId,
    interval_ns: i64,
    tolerance_ns: i64,
    last_end: Option<i64>,
    warmup_pending: bool,
    suspect: Option<DropReason>,
    /// When sampling was (re)started: the warm-up sample's record starts no earlier (CUPTI
    /// stamps the first sample from when the device was configured, before the start call).
    started_ns: Option<i64>,
}

impl HoleDetector {
    pub fn new(device: DeviceId, interval_ns: i64) -> Self {
        let interval_ns = interval_ns.max(1);
        HoleDetector {
            device,
            interval_ns,
            // Half an interval, but at least 1 µs of timestamp jitter.
            tolerance_ns: (interval_ns / 2).max(1_000),
            last_end: None,
            warmup_pending: true,
            suspect: None,
            started_ns: None,
        }
    }

    /// Records when sampling was (re)started (ns since the Unix epoch).
    pub fn started_at(&mut self, t_ns: i64) {
        self.started_ns = Some(t_ns);
    }

    /// Sampling was restarted at `t_ns` (after a hardware-buffer overflow): the samples from the
    /// last kept one to the restart are lost, and the record for that hole (attributed to the
    /// suspect, else [`DropReason::Gap`]) is returned. The next sample is a warm-up sample again.
    pub fn restarted_at(&mut self, t_ns: i64) -> Option<DropRecord> {
        let reason = self.suspect.take().unwrap_or(DropReason::Gap);
        // Before any sample was seen, the hole starts where sampling started.
        let rec = self
            .last_end
            .or(self.started_ns)
            .filter(|&prev| t_ns > prev)
            .map(|prev| DropRecord {
                device: self.device,
                start_ns: prev,
                end_ns: t_ns,
                reason,
                lost_samples: Some(self.lost(t_ns - prev)),
            });
        self.warmup_pending = true;
        self.last_end = None;
        self.started_ns = Some(t_ns);
        rec
    }

    /// Sampling stopped at `t_ns`. If something lost samples after the last kept one (an
    /// overflow while draining), that tail is a hole: its record is returned.
    pub fn finish_at(&mut self, t_ns: i64) -> Option<DropRecord> {
        let reason = self.suspect.take()?;
        let prev = self
            .last_end
            .filter(|&prev| t_ns - prev > self.tolerance_ns)?;
        Some(DropRecord {
            device: self.device,
            start_ns: prev,
            end_ns: t_ns,
            reason,
            lost_samples: Some(self.lost(t_ns - prev)),
        })
    }

    /// The decoder saw something that loses samples; the next hole is attributed to it.
    pub fn mark_suspect(&mut self, reason: DropReason) {
        // A hardware overflow explains more than a full image does; keep the stronger one.
        if self.suspect != Some(DropReason::HardwareBufferOverflow) {
            self.suspect = Some(reason);
        }
    }

    fn lost(&self, span_ns: i64) -> u64 {
        let n = (span_ns + self.interval_ns / 2) / self.interval_ns;
        u64::try_from(n.max(1)).unwrap_or(1)
    }

    /// Classifies one sample (timestamps in ns) and returns the drop record it implies, if any.
    pub fn observe(&mut self, start_ns: i64, end_ns: i64) -> (Verdict, Option<DropRecord>) {
        if start_ns <= 0 || end_ns <= start_ns {
            let from = self.last_end.unwrap_or(start_ns.max(0));
            let rec = DropRecord {
                device: self.device,
                start_ns: from,
                end_ns: end_ns.max(from),
                reason: DropReason::DecodeError,
                lost_samples: Some(1),
            };
            if end_ns > 0 {
                self.last_end = Some(end_ns.max(from));
            }
            return (Verdict::Exclude, Some(rec));
        }
        if self.warmup_pending {
            self.warmup_pending = false;
            self.last_end = Some(end_ns);
            // A suspect stays: an image that filled with the warm-up sample in it still lost
            // the samples after it.
            let from = self
                .started_ns
                .map_or(start_ns, |s| s.clamp(start_ns, end_ns));
            let rec = DropRecord {
                device: self.device,
                start_ns: from,
                end_ns,
                reason: DropReason::Warmup,
                lost_samples: Some(u64::try_from((end_ns - from) / self.interval_ns).unwrap_or(0)),
            };
            return (Verdict::Exclude, Some(rec));
        }
        let rec = match self.last_end {
            Some(prev) if start_ns - prev > self.tolerance_ns => Some(DropRecord {
                device: self.device,
                start_ns: prev,
                end_ns: start_ns,
                reason: self.suspect.take().unwrap_or(DropReason::Gap),
                lost_samples: Some(self.lost(start_ns - prev)),
            }),
            _ => None,
        };
        self.last_end = Some(self.last_end.map_or(end_ns, |p| p.max(end_ns)));
        (Verdict::Keep, rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det() -> HoleDetector {
        HoleDetector::new(DeviceId(0), 10_000)
    }

    #[test]
    fn first_sample_is_warmup_then_tiling_samples_are_kept() {
        let mut d = det();
        let (v, r) = d.observe(1_000_000, 300_000_000);
        assert_eq!(v, Verdict::Exclude);
        let r = r.unwrap();
        assert_eq!(r.reason, DropReason::Warmup);
        let mut t = 300_000_000;
        for _ in 0..100 {
            let (v, r) = d.observe(t + 50, t + 10_000);
            assert_eq!(v, Verdict::Keep);
            assert!(r.is_none());
            t += 10_000;
        }
    }

    #[test]
    fn a_hole_becomes_a_gap_record_with_lost_count() {
        let mut d = det();
        d.observe(1, 10_000);
        d.observe(10_000, 20_000);
        let (v, r) = d.observe(70_000, 80_000);
        assert_eq!(v, Verdict::Keep);
        let r = r.unwrap();
        assert_eq!((r.start_ns, r.end_ns), (20_000, 70_000));
        assert_eq!(r.reason, DropReason::Gap);
        assert_eq!(r.lost_samples, Some(5));
    }

    #[test]
    fn suspected_cause_labels_the_next_hole_only() {
        let mut d = det();
        d.observe(1, 10_000);
        d.mark_suspect(DropReason::CounterDataFull);
        d.observe(10_000, 20_000); // no hole: the suspicion stays until one appears
        let (_, r) = d.observe(40_000, 50_000);
        assert_eq!(r.unwrap().reason, DropReason::CounterDataFull);
        let (_, r) = d.observe(90_000, 100_000);
        assert_eq!(r.unwrap().reason, DropReason::Gap);
    }

    #[test]
    fn overflow_outranks_full_image() {
        let mut d = det();
        d.observe(1, 10_000);
        d.mark_suspect(DropReason::HardwareBufferOverflow);
        d.mark_suspect(DropReason::CounterDataFull);
        let (_, r) = d.observe(100_000, 110_000);
        assert_eq!(r.unwrap().reason, DropReason::HardwareBufferOverflow);
    }

    #[test]
    fn warmup_record_starts_at_the_start_call() {
        let mut d = det();
        d.started_at(900_000_000);
        let (_, r) = d.observe(5_000_000, 900_050_000);
        let r = r.unwrap();
        assert_eq!((r.start_ns, r.end_ns), (900_000_000, 900_050_000));
        assert_eq!(r.lost_samples, Some(5));
    }

    #[test]
    fn a_restart_after_an_overflow_records_the_hole_then_a_warmup() {
        let mut d = det();
        d.observe(1, 10_000);
        d.observe(10_000, 20_000);
        d.mark_suspect(DropReason::HardwareBufferOverflow);
        let hole = d
            .restarted_at(5_000_000)
            .expect("the hole up to the restart");
        assert_eq!(hole.reason, DropReason::HardwareBufferOverflow);
        assert_eq!((hole.start_ns, hole.end_ns), (20_000, 5_000_000));
        assert_eq!(hole.lost_samples, Some(498));
        let (v, r) = d.observe(4_000_000, 5_010_000);
        assert_eq!(v, Verdict::Exclude);
        let w = r.unwrap();
        assert_eq!(w.reason, DropReason::Warmup);
        assert_eq!(w.start_ns, 5_000_000, "the warm-up starts at the restart");
        // Tiling samples after it are kept, no further record.
        assert_eq!(d.observe(5_010_000, 5_020_000), (Verdict::Keep, None));
        // A restart before any sample was kept records nothing.
        let mut fresh = det();
        assert_eq!(fresh.restarted_at(1_000), None);
    }

    #[test]
    fn an_overflow_while_draining_records_the_lost_tail() {
        let mut d = det();
        d.observe(1, 10_000);
        d.observe(10_000, 20_000);
        assert_eq!(d.finish_at(25_000), None, "no suspect: a normal end");
        d.mark_suspect(DropReason::HardwareBufferOverflow);
        let tail = d.finish_at(1_020_000).expect("tail");
        assert_eq!(tail.reason, DropReason::HardwareBufferOverflow);
        assert_eq!((tail.start_ns, tail.end_ns), (20_000, 1_020_000));
        assert_eq!(tail.lost_samples, Some(100));
    }

    #[test]
    fn invalid_timestamps_are_excluded_and_recorded() {
        let mut d = det();
        d.observe(1, 10_000);
        let (v, r) = d.observe(20_000, 20_000);
        assert_eq!(v, Verdict::Exclude);
        assert_eq!(r.unwrap().reason, DropReason::DecodeError);
    }

    proptest::proptest! {
        /// Every nanosecond between the first kept sample and the last is covered by a kept
        /// sample or a drop record: nothing disappears silently.
        #[test]
        fn holes_are_always_accounted(gaps in proptest::collection::vec(0i64..100_000, 1..200)) {
            let mut d = det();
            d.observe(1, 10_000);
            let mut t = 10_000i64;
            let mut covered = 0i64;
            let first = t;
            for g in gaps {
                let start = t + g;
                let (v, r) = d.observe(start, start + 10_000);
                proptest::prop_assert_eq!(v, Verdict::Keep);
                if let Some(r) = r {
                    covered += r.end_ns - r.start_ns;
                } else {
                    covered += start - t; // seam below tolerance
                }
                covered += 10_000;
                t = start + 10_000;
            }
            proptest::prop_assert_eq!(covered, t - first);
        }
    }
}
