//! One rule for values that parse but cannot be true: a row that ends before it starts, a time
//! far outside the recording (`end_ns = i64::MAX`: 7.4 billion seconds), a row read twice, a
//! count no span can hold. Such a row is valid Parquet and passes the checksums (another tool, or
//! a hand, may have written it), so it is not damage; it is left out where rows are handed out
//! (typed rows and the samples, a segment at a time), counted per kind and table, and named in
//! one warning per kind by [`crate::Trace::warnings`]. No figure of any command sees it.
//!
//! The rule per table:
//!
//! | table | ends before it starts | outside the recording | read twice |
//! |---|---|---|---|
//! | samples | `end_ns < start_ns` | `start_ns` or `end_ns` | same `device` and `start_ns` |
//! | drops, nvtx, kernels, api | `end_ns < start_ns` | `start_ns` or `end_ns` | — |
//! | nvml | — | `t_ns` | — |
//! | host_samples | — | `t_ns` | same `pid`, `tid` and `t_ns` |
//! | capture, stacks | — | — | — |
//!
//! The recording's time is `manifest.json`'s `created_unix_ns` to `end_unix_ns`, widened by
//! [`OUTSIDE_MARGIN_NS`] on each side; a recording without an end (killed) ends, for this rule,
//! when it is read. A drop whose `lost_samples` is more than the nanoseconds it spans keeps its
//! span with the count unknown. A samples segment the index lists but that cannot be read becomes
//! a drop over the index's span; a span outside the recording is left out the same way.

use crate::tables::SampleColumns;
use cufall_model::{ApiCall, CaptureEvent, StackFrame};
use cufall_model::{DropRecord, HostSample, KernelRecord, Manifest, NvmlRow, NvtxRange};
use std::collections::{BTreeMap, HashSet};

/// How far outside the recording's time (creation to end, as the manifest gives them) a row may
/// lie: clocks of the GPU, the host and the recorder agree to far better than this.
pub const OUTSIDE_MARGIN_NS: i64 = 60_000_000_000;

/// Why a row cannot be true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Implausible {
    EndsBeforeStart,
    OutsideRecording,
    Duplicate,
    /// A count larger than its span can hold; the count is left out, not the row.
    CountTooLarge,
}

impl Implausible {
    /// The warning for `n` such rows, `tables` naming where they were and how many.
    pub(crate) fn warning(self, n: u64, tables: &str) -> String {
        match self {
            Implausible::EndsBeforeStart => {
                format!("{n} row(s) end before they start ({tables}): left out of every figure")
            }
            Implausible::OutsideRecording => format!(
                "{n} row(s) lie more than a minute outside the recording (manifest.json's \
                 created_unix_ns to end_unix_ns) ({tables}): left out of every figure"
            ),
            Implausible::Duplicate => format!(
                "{n} row(s) repeat a row already read (the same GPU or thread at the same time) \
                 ({tables}): left out of every figure"
            ),
            Implausible::CountTooLarge => format!(
                "{n} drop(s) claim more lost samples than nanoseconds in their span ({tables}): \
                 their counts are left out (the spans stay drops)"
            ),
        }
    }
}

/// What one segment held that cannot be true: kind → rows.
pub(crate) type Found = BTreeMap<Implausible, u64>;

/// The recording's time as this rule takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordingSpan {
    /// Earliest time a row may hold.
    pub lo: i64,
    /// Latest time a row may hold.
    pub hi: i64,
}

impl RecordingSpan {
    /// The span of the recording `m` describes, read at `now_ns` (for one without an end). A
    /// creation time of 0 or less (no recording is that old) bounds nothing below.
    pub fn of(m: &Manifest, now_ns: i64) -> Self {
        let created = m.created_unix_ns;
        let lo = if created > 0 {
            created.saturating_sub(OUTSIDE_MARGIN_NS)
        } else {
            i64::MIN
        };
        let end = match m.end_unix_ns {
            Some(end) if end >= created => end,
            _ => now_ns.max(created),
        };
        RecordingSpan {
            lo,
            hi: end.saturating_add(OUTSIDE_MARGIN_NS),
        }
    }

    /// Whether `t` lies in the span.
    pub fn holds(&self, t: i64) -> bool {
        (self.lo..=self.hi).contains(&t)
    }

    /// What is wrong with an interval, if anything.
    pub fn interval(&self, start: i64, end: i64) -> Option<Implausible> {
        if end < start {
            Some(Implausible::EndsBeforeStart)
        } else if !self.holds(start) || !self.holds(end) {
            Some(Implausible::OutsideRecording)
        } else {
            None
        }
    }

    /// What is wrong with an instant, if anything.
    pub fn instant(&self, t: i64) -> Option<Implausible> {
        (!self.holds(t)).then_some(Implausible::OutsideRecording)
    }
}

/// Rows of a table that can be checked against the rule.
pub trait Screen: Sized {
    /// Leaves out of `rows` (one segment's) those that cannot be true; what was left out.
    fn screen(rows: &mut Vec<Self>, span: &RecordingSpan) -> Found;
}

/// Keeps the rows `check` finds nothing wrong with, counting the others.
fn keep<R>(rows: &mut Vec<R>, found: &mut Found, mut check: impl FnMut(&R) -> Option<Implausible>) {
    rows.retain(|r| match check(r) {
        Some(why) => {
            *found.entry(why).or_default() += 1;
            false
        }
        None => true,
    });
}

macro_rules! screen_intervals {
    ($($row:ty),+) => {$(
        impl Screen for $row {
            fn screen(rows: &mut Vec<Self>, span: &RecordingSpan) -> Found {
                let mut found = Found::new();
                keep(rows, &mut found, |r| span.interval(r.start_ns, r.end_ns));
                found
            }
        }
    )+};
}

screen_intervals!(NvtxRange, KernelRecord, ApiCall);

impl Screen for DropRecord {
    fn screen(rows: &mut Vec<Self>, span: &RecordingSpan) -> Found {
        let mut found = Found::new();
        keep(rows, &mut found, |r| span.interval(r.start_ns, r.end_ns));
        for r in rows.iter_mut() {
            let ns = u64::try_from(r.end_ns.saturating_sub(r.start_ns)).unwrap_or(0);
            // At most one sample per nanosecond: a count past that would overflow a sum.
            if r.lost_samples.is_some_and(|n| n > ns.max(1)) {
                r.lost_samples = None;
                *found.entry(Implausible::CountTooLarge).or_default() += 1;
            }
        }
        found
    }
}

impl Screen for NvmlRow {
    fn screen(rows: &mut Vec<Self>, span: &RecordingSpan) -> Found {
        let mut found = Found::new();
        keep(rows, &mut found, |r| span.instant(r.t_ns));
        found
    }
}

impl Screen for HostSample {
    fn screen(rows: &mut Vec<Self>, span: &RecordingSpan) -> Found {
        let mut found = Found::new();
        let mut seen: HashSet<(u32, u32, i64)> = HashSet::with_capacity(rows.len());
        keep(rows, &mut found, |r| {
            span.instant(r.t_ns).or_else(|| {
                // A thread is sampled once per round: twice at one time is a row read twice.
                (!seen.insert((r.pid, r.tid, r.t_ns))).then_some(Implausible::Duplicate)
            })
        });
        found
    }
}

/// Rows without times: nothing to check.
macro_rules! screen_nothing {
    ($($row:ty),+) => {$(
        impl Screen for $row {
            fn screen(_: &mut Vec<Self>, _: &RecordingSpan) -> Found {
                Found::new()
            }
        }
    )+};
}

screen_nothing!(CaptureEvent, StackFrame);

/// Leaves out of one segment's samples those that cannot be true (see the module's table).
pub(crate) fn screen_samples(rows: &mut SampleColumns, span: &RecordingSpan) -> Found {
    let mut found = Found::new();
    // Each GPU's last start, searched linearly: a segment holds a few GPUs, and this runs on
    // every row the reader hands out.
    let mut last: Vec<(u16, i64)> = Vec::new();
    // Duplicates found cheaply while each GPU's starts rise, as the writer writes them; a
    // segment whose starts do not rise is checked against every row.
    let mut seen: Option<HashSet<(u16, i64)>> = None;
    let verdicts: Vec<Option<Implausible>> = (0..rows.len())
        .map(|i| {
            let (d, s, e) = (rows.device[i], rows.start_ns[i], rows.end_ns[i]);
            if let Some(why) = span.interval(s, e) {
                return Some(why);
            }
            let prev = match last.iter_mut().find(|(dev, _)| *dev == d) {
                Some((_, t)) => Some(std::mem::replace(t, s)),
                None => {
                    last.push((d, s));
                    None
                }
            };
            if seen.is_none() && prev.is_some_and(|p| s < p) {
                let mut all = HashSet::with_capacity(rows.len());
                for j in 0..i {
                    all.insert((rows.device[j], rows.start_ns[j]));
                }
                seen = Some(all);
            }
            let duplicate = match &mut seen {
                Some(all) => !all.insert((d, s)),
                None => prev == Some(s),
            };
            duplicate.then_some(Implausible::Duplicate)
        })
        .collect();
    if verdicts.iter().all(Option::is_none) {
        return found;
    }
    for why in verdicts.iter().flatten() {
        *found.entry(*why).or_default() += 1;
    }
    rows.retain_rows(|i| verdicts[i].is_none());
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_model::{DeviceId, DropReason};

    const SPAN: RecordingSpan = RecordingSpan { lo: 100, hi: 1_000 };

    #[test]
    fn the_span_comes_from_the_manifest_widened_by_a_minute() {
        let mut m = Manifest::new("t", 1_000_000_000_000);
        m.end_unix_ns = Some(2_000_000_000_000);
        let s = RecordingSpan::of(&m, 5_000_000_000_000);
        assert_eq!((s.lo, s.hi), (940_000_000_000, 2_060_000_000_000));
        m.end_unix_ns = None;
        assert_eq!(
            RecordingSpan::of(&m, 5_000_000_000_000).hi,
            5_060_000_000_000
        );
        m.created_unix_ns = 0;
        assert_eq!(RecordingSpan::of(&m, 5).lo, i64::MIN);
        m.end_unix_ns = Some(i64::MAX);
        assert_eq!(RecordingSpan::of(&m, 5).hi, i64::MAX);
    }

    #[test]
    fn samples_that_cannot_be_true_are_left_out_and_counted() {
        let mut rows = SampleColumns::new(1);
        for (d, s, e) in [
            (0u16, 200i64, 300i64),
            (0, 300, 250),      // ends before it starts
            (0, 400, i64::MAX), // ends past the recording
            (0, 300, 400),
            (0, 300, 400), // read twice
            (1, 300, 400), // another GPU at the same time
        ] {
            rows.device.push(d);
            rows.start_ns.push(s);
            rows.end_ns.push(e);
            rows.values[0].push(1.0);
        }
        let found = screen_samples(&mut rows, &SPAN);
        assert_eq!(found[&Implausible::EndsBeforeStart], 1);
        assert_eq!(found[&Implausible::OutsideRecording], 1);
        assert_eq!(found[&Implausible::Duplicate], 1);
        assert_eq!(rows.start_ns, [200, 300, 300]);
        assert_eq!(rows.device, [0, 0, 1]);
        assert_eq!(rows.values[0].len(), 3);
    }

    #[test]
    fn duplicates_out_of_order_are_found_too() {
        let mut rows = SampleColumns::new(0);
        for s in [200i64, 500, 300, 200, 500] {
            rows.device.push(0);
            rows.start_ns.push(s);
            rows.end_ns.push(s + 10);
        }
        let found = screen_samples(&mut rows, &SPAN);
        assert_eq!(found[&Implausible::Duplicate], 2);
        assert_eq!(rows.start_ns, [200, 500, 300]);
    }

    #[test]
    fn host_samples_read_twice_and_drops_counting_too_much() {
        let h = |t, tid| HostSample {
            t_ns: t,
            pid: 1,
            tid,
            ..HostSample::default()
        };
        let mut hs = vec![h(200, 1), h(200, 2), h(200, 1), h(5_000, 1)];
        let found = HostSample::screen(&mut hs, &SPAN);
        assert_eq!(hs.len(), 2);
        assert_eq!(found[&Implausible::Duplicate], 1);
        assert_eq!(found[&Implausible::OutsideRecording], 1);

        let d = |s, e, lost| DropRecord {
            device: DeviceId(0),
            start_ns: s,
            end_ns: e,
            reason: DropReason::Gap,
            lost_samples: lost,
        };
        let mut drops = vec![
            d(200, 300, Some(u64::MAX)),
            d(200, 300, Some(5)),
            d(300, 200, None),
        ];
        let found = DropRecord::screen(&mut drops, &SPAN);
        assert_eq!(drops.len(), 2);
        assert_eq!(drops[0].lost_samples, None);
        assert_eq!(drops[1].lost_samples, Some(5));
        assert_eq!(found[&Implausible::CountTooLarge], 1);
        assert_eq!(found[&Implausible::EndsBeforeStart], 1);
    }
}
