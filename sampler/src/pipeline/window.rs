//! Capture windows: a recording limited to the windows the program or the user opens
//! (`--capture-range`, `--delay`, a signal from `cufall control`) keeps only what falls inside
//! them.
//!
//! Window edges arrive late and out of order against the data: a program's `cudaProfilerStart`
//! reaches the recorder a few milliseconds after it happened, while counter samples of that
//! instant may already be at the sink. So the [`Gate`] holds every row it is given for
//! [`HOLD`] (far longer than an edge takes to arrive), then keeps what overlaps a window and
//! forgets the rest. Memory is bounded by what arrives in [`HOLD`].
//!
//! Several sources may hold a window open at once (two processes of a server both between
//! `cudaProfilerStart` and `Stop`): the window is open while any of them holds it, so the
//! windows are the union of the sources' intervals.

use cufall_capture::event;
use cufall_trace::model::{
    ApiCall, CaptureEvent, DropRecord, HostSample, KernelRecord, NvmlRow, NvtxRange, SampleBatch,
};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long rows wait at the gate for the edges of their time to arrive.
pub const HOLD: Duration = Duration::from_secs(1);

/// Rows on their way to the trace.
#[derive(Clone, Debug)]
pub enum Rows {
    Samples(SampleBatch),
    Drops(Vec<DropRecord>),
    Nvml(Vec<NvmlRow>),
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    Api(Vec<ApiCall>),
    HostSamples(Vec<HostSample>),
}

/// One edge of a window, from one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub t_ns: i64,
    pub open: bool,
    /// Who moved it: a process id of the program, or 0 for cufall itself (delay, signal).
    pub source: u32,
    /// What moved it, for the trace (`cudaProfilerStart in process 42`).
    pub why: String,
}

#[derive(Clone, Debug, PartialEq)]
struct Window {
    start_ns: i64,
    end_ns: Option<i64>,
    opened_by: String,
    closed_by: Option<String>,
}

impl Window {
    fn overlaps(&self, start_ns: i64, end_ns: i64) -> bool {
        end_ns >= self.start_ns && self.end_ns.is_none_or(|e| start_ns < e)
    }

    fn event(&self) -> CaptureEvent {
        let end = self.end_ns.unwrap_or(self.start_ns);
        CaptureEvent {
            t_ns: self.start_ns,
            pid: 0,
            event: event::WINDOW.into(),
            count: u64::try_from(end.saturating_sub(self.start_ns)).unwrap_or(0),
            detail: format!(
                "opened by {}, closed by {}",
                self.opened_by,
                self.closed_by
                    .as_deref()
                    .unwrap_or("the end of the recording")
            ),
        }
    }
}

/// Windows so far, for the record loop and the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowLog {
    pub opened: u64,
    pub closed: u64,
    /// Length of the closed windows.
    pub closed_ns: i64,
}

/// Holds rows until their windows are known; see the module docs.
#[derive(Debug, Default)]
pub struct Gate {
    queue: VecDeque<(Instant, Rows)>,
    holders: HashMap<u32, u32>,
    windows: Vec<Window>,
    /// The latest close among the sources of the open window: edges of different processes
    /// arrive in any order, and the window lasts until the last of them.
    latest_close: Option<i64>,
    log: WindowLog,
}

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    pub fn log(&self) -> WindowLog {
        self.log
    }

    fn is_open(&self) -> bool {
        self.holders.values().any(|n| *n > 0)
    }

    /// Applies an edge; returns the window's trace row when this edge closed one.
    pub fn edge(&mut self, e: Edge) -> Option<CaptureEvent> {
        let was_open = self.is_open();
        let n = self.holders.entry(e.source).or_default();
        if e.open {
            *n += 1;
        } else if *n == 0 {
            // A stop without a start (or a second stop): nothing to close.
            return None;
        } else {
            *n -= 1;
        }
        match (was_open, self.is_open()) {
            (false, true) => {
                self.log.opened += 1;
                self.latest_close = None;
                self.windows.push(Window {
                    start_ns: e.t_ns,
                    end_ns: None,
                    opened_by: e.why,
                    closed_by: None,
                });
                None
            }
            (true, false) => self.close_last(e.t_ns, e.why),
            (true, true) if e.open => {
                // Another source opened earlier than the edge that opened the window, but its
                // edge came later: the window starts at the earliest open.
                if let Some(w) = self.windows.last_mut().filter(|w| w.end_ns.is_none())
                    && e.t_ns < w.start_ns
                {
                    w.start_ns = e.t_ns;
                }
                None
            }
            _ => {
                if !e.open {
                    self.latest_close = Some(self.latest_close.map_or(e.t_ns, |t| t.max(e.t_ns)));
                }
                None
            }
        }
    }

    fn close_last(&mut self, t_ns: i64, why: String) -> Option<CaptureEvent> {
        let latest = self.latest_close.take().map_or(t_ns, |t| t.max(t_ns));
        let w = self.windows.last_mut().filter(|w| w.end_ns.is_none())?;
        // Edges of different processes may disagree by a few microseconds: never end before
        // the start.
        let end = latest.max(w.start_ns);
        w.end_ns = Some(end);
        w.closed_by = Some(why);
        self.log.closed += 1;
        self.log.closed_ns += end - w.start_ns;
        Some(w.event())
    }

    /// Closes the window still open at the end of the recording; forgets every holder.
    pub fn close_all(&mut self, t_ns: i64, why: &str) -> Option<CaptureEvent> {
        let open = self.is_open();
        self.holders.clear();
        if open {
            self.close_last(t_ns, why.to_string())
        } else {
            None
        }
    }

    pub fn hold(&mut self, now: Instant, rows: Rows) {
        self.queue.push_back((now, rows));
    }

    /// The rows that have waited [`HOLD`] by `now`, cut to the windows.
    pub fn release(&mut self, now: Instant) -> Vec<Rows> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.queue.front() {
            if now.saturating_duration_since(*t) < HOLD {
                break;
            }
            if let Some((_, rows)) = self.queue.pop_front()
                && let Some(kept) = self.cut(rows)
            {
                out.push(kept);
            }
        }
        out
    }

    /// Every row still held, cut to the windows (at the end of the recording).
    pub fn drain(&mut self) -> Vec<Rows> {
        let queue = std::mem::take(&mut self.queue);
        queue
            .into_iter()
            .filter_map(|(_, rows)| self.cut(rows))
            .collect()
    }

    fn inside(&self, start_ns: i64, end_ns: i64) -> bool {
        self.windows.iter().any(|w| w.overlaps(start_ns, end_ns))
    }

    /// What of `rows` falls in a window: samples, NVML readings, ranges, kernels and calls that
    /// overlap one, whole; drops cut at the window's edges.
    fn cut(&self, rows: Rows) -> Option<Rows> {
        match rows {
            Rows::Samples(b) => {
                let mut out = SampleBatch::new(b.device, b.values.len());
                let mut values = vec![0.0; b.values.len()];
                for i in 0..b.len() {
                    if self.inside(b.start_ns[i], b.end_ns[i]) {
                        for (v, column) in values.iter_mut().zip(&b.values) {
                            *v = column[i];
                        }
                        out.push(b.start_ns[i], b.end_ns[i], &values);
                    }
                }
                (!out.is_empty()).then_some(Rows::Samples(out))
            }
            Rows::Drops(d) => {
                let cut: Vec<DropRecord> = d.iter().flat_map(|r| self.cut_drop(r)).collect();
                (!cut.is_empty()).then_some(Rows::Drops(cut))
            }
            Rows::Nvml(r) => keep(r, |x| self.inside(x.t_ns, x.t_ns)).map(Rows::Nvml),
            Rows::Nvtx(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Nvtx),
            Rows::Kernels(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Kernels),
            Rows::Api(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Api),
            Rows::HostSamples(r) => keep(r, |x| self.inside(x.t_ns, x.t_ns)).map(Rows::HostSamples),
        }
    }

    fn cut_drop(&self, r: &DropRecord) -> Vec<DropRecord> {
        let len = u128::from(u64::try_from(r.end_ns - r.start_ns).unwrap_or(0).max(1));
        self.windows
            .iter()
            .filter(|w| w.overlaps(r.start_ns, r.end_ns))
            .map(|w| {
                let start = r.start_ns.max(w.start_ns);
                let end = w.end_ns.map_or(r.end_ns, |e| r.end_ns.min(e));
                let part = u128::from(u64::try_from(end - start).unwrap_or(0));
                DropRecord {
                    start_ns: start,
                    end_ns: end,
                    // The estimate shared out by time: never more than the whole.
                    lost_samples: r
                        .lost_samples
                        .map(|n| u64::try_from(u128::from(n) * part / len).unwrap_or(n)),
                    ..r.clone()
                }
            })
            .collect()
    }
}

fn keep<T>(rows: Vec<T>, inside: impl Fn(&T) -> bool) -> Option<Vec<T>> {
    let kept: Vec<T> = rows.into_iter().filter(|r| inside(r)).collect();
    (!kept.is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::{DeviceId, DropReason};

    fn edge(t_ns: i64, open: bool, source: u32) -> Edge {
        Edge {
            t_ns,
            open,
            source,
            why: format!("test {source}"),
        }
    }

    fn batch(starts: &[i64]) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(0), 1);
        for s in starts {
            b.push(*s, s + 10, &[*s as f64]);
        }
        b
    }

    fn starts(rows: &[Rows]) -> Vec<i64> {
        rows.iter()
            .flat_map(|r| match r {
                Rows::Samples(b) => b.start_ns.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn only_samples_inside_a_window_are_kept_and_only_after_the_hold() {
        let mut g = Gate::new();
        let t0 = Instant::now();
        g.hold(t0, Rows::Samples(batch(&[0, 100, 200, 300, 400])));
        // The edges arrive after the samples they cut.
        assert!(g.edge(edge(95, true, 7)).is_none());
        let closed = g.edge(edge(305, false, 7)).expect("the window closes");
        assert_eq!((closed.t_ns, closed.count), (95, 210));
        assert_eq!(closed.event, event::WINDOW);
        assert!(g.release(t0 + HOLD / 2).is_empty(), "still held");
        let out = g.release(t0 + HOLD);
        // 0..10 ends before the window; 90..100 would overlap only if it reached 95.
        assert_eq!(starts(&out), vec![100, 200, 300]);
        assert_eq!(
            g.log(),
            WindowLog {
                opened: 1,
                closed: 1,
                closed_ns: 210
            }
        );
    }

    #[test]
    fn host_samples_are_kept_inside_windows_only() {
        let mut g = Gate::new();
        let t0 = Instant::now();
        let sample = |t_ns| HostSample {
            t_ns,
            pid: 1,
            tid: 1,
            ..HostSample::default()
        };
        g.hold(
            t0,
            Rows::HostSamples(vec![sample(10), sample(150), sample(400)]),
        );
        g.edge(edge(100, true, 0));
        g.edge(edge(300, false, 0));
        let out = g.release(t0 + HOLD);
        let kept: Vec<i64> = out
            .iter()
            .flat_map(|r| match r {
                Rows::HostSamples(s) => s.iter().map(|x| x.t_ns).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(kept, vec![150]);
    }

    #[test]
    fn edges_of_several_processes_arriving_out_of_order_still_make_their_union() {
        let mut g = Gate::new();
        g.edge(edge(100, true, 1));
        // Process 2 opened at 50, but its edge arrives after process 1's.
        g.edge(edge(50, true, 2));
        // Process 1 closes at 300 and its edge arrives first; process 2 closed at 280.
        g.edge(edge(300, false, 1));
        let w = g
            .edge(edge(280, false, 2))
            .expect("closed by the last holder");
        assert_eq!((w.t_ns, w.count), (50, 250));
    }

    #[test]
    fn windows_of_several_processes_are_their_union() {
        let mut g = Gate::new();
        g.edge(edge(100, true, 1));
        g.edge(edge(150, true, 2));
        assert!(g.edge(edge(200, false, 1)).is_none(), "process 2 holds it");
        let w = g
            .edge(edge(300, false, 2))
            .expect("closed by the last holder");
        assert_eq!((w.t_ns, w.count), (100, 200));
        // A stop with no start and a second stop change nothing.
        assert!(g.edge(edge(400, false, 3)).is_none());
        assert!(g.edge(edge(410, false, 2)).is_none());
        assert_eq!(g.log().opened, 1);
    }

    #[test]
    fn nothing_is_kept_without_a_window_and_an_open_window_keeps_everything_after_it() {
        let mut g = Gate::new();
        g.hold(Instant::now(), Rows::Samples(batch(&[0, 100])));
        assert!(g.drain().is_empty());
        g.edge(edge(150, true, 0));
        g.hold(Instant::now(), Rows::Samples(batch(&[100, 200, 1_000_000])));
        assert_eq!(starts(&g.drain()), vec![200, 1_000_000]);
        let end = g
            .close_all(2_000_000, "the end")
            .expect("closed at the end");
        assert_eq!(end.count, 2_000_000 - 150);
        assert!(end.detail.contains("closed by the end"));
        assert!(g.close_all(3_000_000, "again").is_none());
    }

    #[test]
    fn drops_are_cut_at_window_edges_and_rows_kept_whole_when_they_overlap() {
        let mut g = Gate::new();
        g.edge(edge(100, true, 0));
        g.edge(edge(200, false, 0));
        g.edge(edge(300, true, 0));
        g.edge(edge(400, false, 0));
        let drop = DropRecord {
            device: DeviceId(0),
            start_ns: 50,
            end_ns: 350,
            reason: DropReason::CounterDataFull,
            lost_samples: Some(300),
        };
        g.hold(Instant::now(), Rows::Drops(vec![drop]));
        g.hold(
            Instant::now(),
            Rows::Nvtx(vec![
                NvtxRange {
                    start_ns: 0,
                    end_ns: 120,
                    name: "serve".into(),
                    ..NvtxRange::default()
                },
                NvtxRange {
                    start_ns: 210,
                    end_ns: 290,
                    name: "between".into(),
                    ..NvtxRange::default()
                },
            ]),
        );
        let out = g.drain();
        let Rows::Drops(d) = &out[0] else {
            panic!("{out:?}")
        };
        let spans: Vec<(i64, i64, Option<u64>)> = d
            .iter()
            .map(|r| (r.start_ns, r.end_ns, r.lost_samples))
            .collect();
        assert_eq!(spans, vec![(100, 200, Some(100)), (300, 350, Some(50))]);
        let Rows::Nvtx(n) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].name, "serve");
    }
}
