//! A recording as a live feed: [`Recording::load`] reads a trace, [`play`] sends it through a
//! [`LiveSender`] in time order at some multiple of real time, so that replay uses exactly the
//! code path of the live view. Browsing loads a recording the same way, all at once.

use cufall_live::{FeedInfo, LiveEvent, LiveSender};
use cufall_trace::Trace;
use cufall_trace::model::{DropRecord, KernelRecord, Nanos, NvmlRow, NvtxRange, SampleBatch};
use std::time::{Duration, Instant};

/// Replay plays this much of the idle time before the first activity in real time.
pub const LEAD_IN_NS: i64 = 1_000_000_000;
/// A counter above this share of its largest value counts as activity.
const ACTIVE_SHARE: f64 = 0.05;

/// Everything of a trace that the view shows, in memory.
#[derive(Clone, Debug)]
pub struct Recording {
    pub info: FeedInfo,
    pub batches: Vec<SampleBatch>,
    pub drops: Vec<DropRecord>,
    pub nvml: Vec<NvmlRow>,
    pub nvtx: Vec<NvtxRange>,
    pub kernels: Vec<KernelRecord>,
    pub warnings: Vec<String>,
}

impl Recording {
    /// Reads every table of `trace` (errors name the trace and the problem).
    pub fn load(trace: &Trace) -> cufall_trace::Result<Self> {
        let m = trace.manifest();
        let info = FeedInfo {
            devices: m.devices.clone(),
            metrics: m
                .sampling
                .as_ref()
                .map(|s| s.metrics.clone())
                .unwrap_or_default(),
            heatmaps: m.heatmaps.clone(),
            interval_ns: Nanos(m.sampling.as_ref().map_or(10_000, |s| s.interval_ns)),
            nvml_interval_ns: Nanos(m.nvml_interval_ns.unwrap_or(0)),
            counters_unavailable: m.counters_unavailable.clone(),
        };
        let mut drops = trace.drops()?;
        drops.sort_by_key(|r| r.start_ns);
        let mut nvml = trace.nvml()?;
        nvml.sort_by_key(|r| r.t_ns);
        let mut nvtx = trace.nvtx()?;
        nvtx.sort_by_key(|r| r.end_ns);
        let mut kernels = trace.kernels()?;
        kernels.sort_by_key(|r| r.end_ns);
        Ok(Recording {
            info,
            batches: trace.sample_batches()?,
            drops,
            nvml,
            nvtx,
            kernels,
            warnings: trace.warnings(),
        })
    }

    /// Keeps what falls in `[lo, hi)`: samples and NVML readings that start there, and drops,
    /// NVTX ranges and kernels that overlap it.
    pub fn keep_between(&mut self, lo: i64, hi: i64) {
        let inside = |t: i64| lo <= t && t < hi;
        let overlaps = |a: i64, b: i64| a < hi && b >= lo;
        for b in &mut self.batches {
            let keep: Vec<bool> = b.start_ns.iter().map(|t| inside(*t)).collect();
            let pick = |v: &mut Vec<i64>| {
                let mut k = keep.iter();
                v.retain(|_| k.next().copied().unwrap_or(false));
            };
            pick(&mut b.start_ns);
            pick(&mut b.end_ns);
            for col in &mut b.values {
                let mut k = keep.iter();
                col.retain(|_| k.next().copied().unwrap_or(false));
            }
        }
        self.batches.retain(|b| !b.is_empty());
        self.drops.retain(|r| overlaps(r.start_ns, r.end_ns));
        self.nvml.retain(|r| inside(r.t_ns));
        self.nvtx.retain(|r| overlaps(r.start_ns, r.end_ns));
        self.kernels.retain(|r| overlaps(r.start_ns, r.end_ns));
    }

    /// First and last timestamps of anything recorded.
    pub fn extent(&self) -> Option<(i64, i64)> {
        let mut lo = i64::MAX;
        let mut hi = i64::MIN;
        let mut see = |a: i64, b: i64| {
            lo = lo.min(a);
            hi = hi.max(b);
        };
        for b in &self.batches {
            if let (Some(a), Some(z)) = (b.start_ns.first(), b.end_ns.last()) {
                see(*a, *z);
            }
        }
        for r in &self.drops {
            see(r.start_ns, r.end_ns);
        }
        for r in &self.nvml {
            see(r.t_ns, r.t_ns);
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// When the recording first shows activity: its first kernel, copy or NVTX range, else the
    /// first sample at which a counter is above 5 % of that counter's largest value in the
    /// recording. `None` when nothing is ever active.
    pub fn first_activity_ns(&self) -> Option<i64> {
        let captured = self
            .kernels
            .iter()
            .map(|k| k.start_ns)
            .chain(self.nvtx.iter().map(|r| r.start_ns))
            .min();
        if captured.is_some() {
            return captured;
        }
        let mut first: Option<i64> = None;
        for b in &self.batches {
            for col in &b.values {
                let peak = col
                    .iter()
                    .copied()
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max);
                if peak <= 0.0 {
                    continue;
                }
                if let Some(i) = col.iter().position(|v| *v > ACTIVE_SHARE * peak) {
                    let t = b.start_ns[i];
                    first = Some(first.map_or(t, |f| f.min(t)));
                }
            }
        }
        first
    }

    /// Where real-time playback starts: [`LEAD_IN_NS`] before the first activity (never before
    /// the first sample). What comes before is sent at once, so it is in the view's history
    /// without being waited through.
    pub fn playback_start_ns(&self) -> Option<i64> {
        let (first, last) = self.extent()?;
        Some(
            self.first_activity_ns()
                .map_or(first, |a| a.saturating_sub(LEAD_IN_NS).clamp(first, last)),
        )
    }

    /// Every event of the recording in one go (for browsing).
    pub fn into_events(self) -> Vec<LiveEvent> {
        let mut v: Vec<LiveEvent> = self.batches.into_iter().map(LiveEvent::Samples).collect();
        v.extend(self.drops.into_iter().map(LiveEvent::Drop));
        v.push(LiveEvent::Nvml(self.nvml));
        v.push(LiveEvent::Nvtx(self.nvtx));
        v.push(LiveEvent::Kernels(self.kernels));
        v.extend(self.warnings.into_iter().map(LiveEvent::Message));
        v.push(LiveEvent::End);
        v
    }
}

fn slice(b: &SampleBatch, lo: usize, hi: usize) -> SampleBatch {
    SampleBatch {
        device: b.device,
        start_ns: b.start_ns[lo..hi].to_vec(),
        end_ns: b.end_ns[lo..hi].to_vec(),
        values: b.values.iter().map(|c| c[lo..hi].to_vec()).collect(),
    }
}

/// Sends `rec` through `tx` in chunks of `chunk` of recorded time, at `speed` times real
/// time (`f64::INFINITY`: as fast as possible), then [`LiveEvent::End`]. Stops early when the
/// view hangs up. Blocking: run it on its own thread.
pub fn play(rec: Recording, speed: f64, chunk: Nanos, tx: &LiveSender) {
    let Some((t_first, t_last)) = rec.extent() else {
        for w in rec.warnings {
            tx.send(LiveEvent::Message(w));
        }
        tx.send(LiveEvent::End);
        return;
    };
    for w in &rec.warnings {
        tx.send(LiveEvent::Message(w.clone()));
    }
    let chunk_ns = chunk.get().max(1);
    let start = rec.playback_start_ns().unwrap_or(t_first);
    if start > t_first {
        tx.send(LiveEvent::Message(format!(
            "replay starts {:.1} s in, {:.1} s before the first activity (the idle time before it is shown at once)",
            (start - t_first) as f64 / 1e9,
            (LEAD_IN_NS.min(start - t_first)) as f64 / 1e9
        )));
    }
    let wall0 = Instant::now();
    let mut pos = vec![0usize; rec.batches.len()];
    let (mut di, mut ni, mut vi, mut ki) = (0, 0, 0, 0);
    let mut t = t_first;
    while t <= t_last {
        if tx.is_closed() {
            return;
        }
        let end = t.saturating_add(chunk_ns);
        for (b, p) in rec.batches.iter().zip(pos.iter_mut()) {
            let hi = *p + b.start_ns[*p..].partition_point(|&s| s < end);
            if hi > *p {
                tx.send(LiveEvent::Samples(slice(b, *p, hi)));
                *p = hi;
            }
        }
        while di < rec.drops.len() && rec.drops[di].start_ns < end {
            tx.send(LiveEvent::Drop(rec.drops[di].clone()));
            di += 1;
        }
        let take = |i: &mut usize, n: usize, key: &dyn Fn(usize) -> i64| {
            let a = *i;
            while *i < n && key(*i) < end {
                *i += 1;
            }
            a..*i
        };
        let r = take(&mut ni, rec.nvml.len(), &|i| rec.nvml[i].t_ns);
        if !r.is_empty() {
            tx.send(LiveEvent::Nvml(rec.nvml[r].to_vec()));
        }
        let r = take(&mut vi, rec.nvtx.len(), &|i| rec.nvtx[i].end_ns);
        if !r.is_empty() {
            tx.send(LiveEvent::Nvtx(rec.nvtx[r].to_vec()));
        }
        let r = take(&mut ki, rec.kernels.len(), &|i| rec.kernels[i].end_ns);
        if !r.is_empty() {
            tx.send(LiveEvent::Kernels(rec.kernels[r].to_vec()));
        }
        // Empty chunks are skipped: the loop runs once per chunk with data, however long the
        // recording (a stray timestamp at 0 would otherwise mean decades of 10 ms steps).
        let next = [
            rec.drops.get(di).map(|r| r.start_ns),
            rec.nvml.get(ni).map(|r| r.t_ns),
            rec.nvtx.get(vi).map(|r| r.end_ns),
            rec.kernels.get(ki).map(|r| r.end_ns),
        ]
        .into_iter()
        .flatten()
        .chain(
            rec.batches
                .iter()
                .zip(&pos)
                .filter_map(|(b, p)| b.start_ns.get(*p).copied()),
        )
        .min();
        // Everything is sent: the end comes now, not after waiting out a stray end time (a drop
        // that a damaged trace ends at i64::MAX).
        let Some(next) = next else { break };
        t = if next > end {
            end.saturating_add((next - end) / chunk_ns * chunk_ns)
        } else {
            end
        };
        if end == i64::MAX {
            break;
        }
        if speed.is_finite() && speed > 0.0 && t > start {
            let due = Duration::from_secs_f64((t - start) as f64 / 1e9 / speed);
            let now = wall0.elapsed();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }
    // NVTX ranges that end after the last sample still belong to the recording.
    if vi < rec.nvtx.len() {
        tx.send(LiveEvent::Nvtx(rec.nvtx[vi..].to_vec()));
    }
    tx.send(LiveEvent::End);
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::DeviceId;

    /// One device, one metric: `idle_s` seconds of zeros, then a second at 90, 1 ms samples.
    fn recording(idle_s: i64) -> Recording {
        let mut b = SampleBatch::new(DeviceId(0), 1);
        let ms = 1_000_000;
        for i in 0..(idle_s * 1000 + 1000) {
            b.start_ns.push(i * ms);
            b.end_ns.push((i + 1) * ms);
            b.values[0].push(if i < idle_s * 1000 { 0.0 } else { 90.0 });
        }
        Recording {
            info: FeedInfo {
                devices: Vec::new(),
                metrics: Vec::new(),
                heatmaps: Vec::new(),
                interval_ns: Nanos(1_000_000),
                nvml_interval_ns: Nanos(0),
                counters_unavailable: None,
            },
            batches: vec![b],
            drops: Vec::new(),
            nvml: Vec::new(),
            nvtx: Vec::new(),
            kernels: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn keeping_a_window_keeps_the_samples_that_start_in_it() {
        let ms = 1_000_000;
        let mut r = recording(2);
        r.nvml.push(NvmlRow {
            t_ns: 500 * ms,
            ..NvmlRow::default()
        });
        r.keep_between(1000 * ms, 1500 * ms);
        let b = &r.batches[0];
        assert_eq!(b.len(), 500);
        assert_eq!(b.start_ns.first(), Some(&(1000 * ms)));
        assert_eq!(b.start_ns.last(), Some(&(1499 * ms)));
        assert_eq!(b.values[0].len(), 500);
        assert!(r.nvml.is_empty());
        r.keep_between(0, 10 * ms);
        assert!(r.batches.is_empty(), "no empty batch is left");
    }

    #[test]
    fn playback_starts_a_second_before_the_first_busy_sample() {
        let rec = recording(6);
        assert_eq!(rec.first_activity_ns(), Some(6_000_000_000));
        assert_eq!(rec.playback_start_ns(), Some(5_000_000_000));
    }

    #[test]
    fn a_recording_busy_from_the_start_plays_from_the_start() {
        let rec = recording(0);
        assert_eq!(rec.playback_start_ns(), Some(0));
    }

    #[test]
    fn captured_activity_wins_over_counters() {
        let mut rec = recording(6);
        rec.kernels.push(KernelRecord {
            start_ns: 3_500_000_000,
            end_ns: 3_600_000_000,
            ..KernelRecord::default()
        });
        assert_eq!(rec.playback_start_ns(), Some(2_500_000_000));
    }

    #[test]
    fn a_drop_to_the_end_of_time_does_not_hold_back_the_end() {
        let mut rec = recording(0);
        rec.drops.push(DropRecord {
            device: DeviceId(0),
            start_ns: 500_000_000,
            end_ns: i64::MAX,
            reason: cufall_trace::model::DropReason::Gap,
            lost_samples: None,
        });
        let (tx, rx) = cufall_live::feed(rec.info.clone(), 1 << 16);
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            play(rec, 100.0, Nanos(10_000_000), &tx);
            let _ = done_tx.send(());
        });
        // One second of samples at 100× real time: 10 ms, not 292 years.
        assert!(done.recv_timeout(Duration::from_secs(10)).is_ok());
        assert!(rx.drain(Duration::ZERO).contains(&LiveEvent::End));
    }

    #[test]
    fn an_idle_recording_plays_from_its_first_sample() {
        let mut rec = recording(2);
        for v in rec.batches[0].values[0].iter_mut() {
            *v = 0.0;
        }
        assert_eq!(rec.first_activity_ns(), None);
        assert_eq!(rec.playback_start_ns(), Some(0));
    }
}
